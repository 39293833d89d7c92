"""kiln_vconv.c's unpadded stride-2 path: tiles that read X itself and only
its taps inside the image (vc_steps_box), instead of a zero-padded copy.

Each case runs in a child process (a wrong tap can fault, and
KILN_VCONV_UNPADDED is read once a process): X is placed against a
PROT_NONE page, once ending where the page starts and once starting where
one ends, so a tap that reads the padding's place outside X faults; and the
result must equal, bit for bit, the padded copy's (KILN_VCONV_UNPADDED=0):
the same products summed in the same order, the padding's zeros left out.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from kiln.runtime import native

pytestmark = [pytest.mark.native,  # fails, not skips, without the library (conftest.py)
              pytest.mark.skipif(native.load() is not None and native.load().kiln_vector_width() != 16,
                                 reason="kiln_vconv.c is built for AVX-512 only")]

_CHILD = r"""
import ctypes, json, mmap, sys
import numpy as np
from kiln.runtime import native

g, placement = json.loads(sys.argv[1]), sys.argv[2]
n, c, h, w, f, kh, kw, s, d, p = g
oh, ow = (h + 2 * p - d * (kh - 1) - 1) // s + 1, (w + 2 * p - d * (kw - 1) - 1) // s + 1
rng = np.random.default_rng(sum(g))
x_values = rng.standard_normal((n, c, h, w), dtype=np.float32)
wt = rng.standard_normal((f, c, kh, kw), dtype=np.float32)
bias = rng.standard_normal(f, dtype=np.float32)
page = mmap.PAGESIZE
size = x_values.nbytes
span = (size + page - 1) // page * page
region = mmap.mmap(-1, span + 2 * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(region))
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base, page, 0) == 0 and libc.mprotect(base + page + span, page, 0) == 0
start = page if placement == "after-guard" else page + span - size  # else: ends at the guard
x = np.frombuffer(region, np.float32, n * c * h * w, start).reshape(n, c, h, w)
x[...] = x_values
y = np.zeros((n, f, oh, ow), np.float32)
conv = native.load().kiln_conv2d
I64 = ctypes.c_int64
conv.argtypes = [I64] * 19 + [ctypes.c_float, ctypes.c_int32, I64, ctypes.c_int32, I64]
slot = (I64 * 1)(0)
conv(n, f, c, h, w, kh, kw, oh, ow, s, s, d, d, p, p, x.ctypes.data, wt.ctypes.data, bias.ctypes.data, 0, 0.0, 1,
     y.ctypes.data, 2, ctypes.addressof(slot))
sys.stdout.write(y.tobytes().hex())
"""

# (batch, C, H, W, F, KH, KW, stride, dilation, pad): stride-2 windows 3
# wide with whole tiles of one or two channel vectors a row on planes that do not crowd L1 (the
# 7 x 4 tiles keep the copy): two tiles a row on one image (the row tasks),
# whole images per thread, three images, dilation 2 with padding 2 (one tile
# a row, missing both its first and last pixel's padding), the weight in two
# blocks of whole channels (groups outer), 8-pixel tiles on 16 x 16, 16 x 1
# tiles on an odd width (the row's last pixel misses its last tap), and a
# 5 x 3 window (the top and bottom two rows of taps outside for the edge rows).
GEOMETRIES = [
    (1, 32, 56, 56, 32, 3, 3, 2, 1, 1),
    (2, 29, 28, 28, 32, 3, 3, 2, 1, 1),
    (3, 32, 28, 28, 64, 3, 3, 2, 1, 1),
    (1, 32, 28, 28, 32, 3, 3, 2, 2, 2),
    (1, 256, 28, 28, 128, 3, 3, 2, 1, 1),
    (2, 32, 16, 16, 24, 3, 3, 2, 1, 1),
    (1, 32, 31, 31, 48, 3, 3, 2, 1, 1),
    (1, 32, 29, 28, 32, 5, 3, 2, 1, 1),
]


def _run(g, placement, unpadded):
    env = dict(os.environ, KILN_VCONV_UNPADDED="1" if unpadded else "0")
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(g), placement], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"child failed ({done.returncode}): {done.stderr[-2000:]}"
    return np.frombuffer(bytes.fromhex(done.stdout), np.float32)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g) for g in GEOMETRIES])
def test_unpadded_tiles_read_only_inside_x_and_match_the_padded_copy(geometry):
    n, c, h, w, f, kh, kw, s, d, p = geometry
    rng = np.random.default_rng(sum(geometry))
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((f, c, kh, kw), dtype=np.float32)
    bias = rng.standard_normal(f, dtype=np.float32)
    want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(bias),
                                                 stride=s, padding=p, dilation=d)).numpy().ravel()
    padded = _run(geometry, "after-guard", unpadded=False)
    for placement in ("after-guard", "before-guard"):
        y = _run(geometry, placement, unpadded=True)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=max(1e-4, 2e-7 * c * kh * kw))
        # Equal but for the sign of a zero sum (a skipped +0 product).
        np.testing.assert_array_equal(y + 0.0, padded + 0.0)
