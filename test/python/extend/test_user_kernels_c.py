"""C kernels registered from user code (issue 40): C source kiln compiles, and a shared-library symbol.

``kiln_ext_c::rms_rows`` (each row divided by its root mean square) runs as
C through the ``kiln_tensor`` ABI (:mod:`kiln.backends.user_c`), compiled
with fallback=False and compared with eager at B = 1, 7, 16 and L = 1, 37, 96.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import torch

import kiln
from kiln.backends.registry import REGISTRY
from kiln.backends.user_c import KILN_KERNEL_H
from kiln.errors import KilnError

B = torch.export.Dim("B", min=1, max=16)
L = torch.export.Dim("L", min=1, max=96)
SHAPES = [(1, 1), (7, 37), (16, 96)]

RMS_ROWS = r"""
#include <math.h>
int rms_rows(const kiln_tensor *in, int64_t n_in, kiln_tensor *out, int64_t n_out) {
    if (n_in != 1 || n_out != 1 || in[0].rank < 1) return 1;
    int64_t cols = in[0].shape[in[0].rank - 1], rows = 1;
    for (int64_t d = 0; d + 1 < in[0].rank; d++) rows *= in[0].shape[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < cols; c++) s += (double)x[r * cols + c] * x[r * cols + c];
        float inv = (float)(1.0 / sqrt(s / cols + 1e-6));
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = x[r * cols + c] * inv;
    }
    return 0;
}
"""


@torch.library.custom_op("kiln_ext_c::rms_rows", mutates_args=())
def rms_rows(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@rms_rows.register_fake
def _(x):
    return torch.empty_like(x)


class M(torch.nn.Module):
    def forward(self, x):
        return rms_rows(x * 3 + 1) - 0.5


@pytest.fixture
def registered():
    names = []
    yield names
    for name in names:
        REGISTRY.unregister(name, "cpu")


def check(compiled):
    for b, n in SHAPES:
        x = torch.randn(b, n, 24, generator=torch.Generator().manual_seed(b + n))
        np.testing.assert_allclose(compiled(x).numpy(), M()(x).numpy(), atol=1e-5, rtol=1e-5)


def compile_model():
    return kiln.compile(M(), (torch.randn(2, 3, 24),), {"x": {0: B, 1: L}}, fallback=False)


def test_c_source_kernel(registered):
    kiln.register_kernel(rms_rows, kiln.CKernel("rms_rows", source=RMS_ROWS), device="cpu", dtypes=["f32"],
                         shape_fn=lambda x: x, name="c_rms_rows")
    registered.append("c_rms_rows")
    compiled = compile_model()
    report = compiled.report()
    assert report["fallback"]["ops"] == 0
    assert [k["impl"] for k in report["kernels"]].count("user.c_rms_rows") == 1
    check(compiled)


def test_shared_library_symbol(registered, tmp_path):
    src = tmp_path / "rms.c"
    src.write_text(KILN_KERNEL_H + RMS_ROWS)
    so = tmp_path / "librms.so"
    subprocess.run([shutil.which("cc") or shutil.which("gcc"), "-O2", "-fPIC", "-shared", "-o", str(so), str(src)],
                   check=True)
    kiln.register_kernel(rms_rows, kiln.CKernel("rms_rows", library=so), device="cpu", shape_fn=lambda x: x,
                         name="so_rms_rows")
    registered.append("so_rms_rows")
    check(compile_model())


def test_c_errors(registered):
    with pytest.raises(KilnError, match=r"C kernel 'broken' does not compile"):
        kiln.CKernel("broken", source="int broken(const kiln_tensor *in, int64_t n) { return undeclared; }")
    with pytest.raises(KilnError, match=r"has no symbol 'other'"):
        kiln.CKernel("other", source=RMS_ROWS)
    kiln.register_kernel(rms_rows, kiln.CKernel("fails", source="""
int fails(const kiln_tensor *in, int64_t n_in, kiln_tensor *out, int64_t n_out) { return 7; }
"""), device="cpu", shape_fn=lambda x: x, name="c_fails")
    registered.append("c_fails")
    compiled = compile_model()
    with pytest.raises(KilnError, match=r"'user.c_fails' registered for 'kiln_ext_c::rms_rows' failed.*returned 7"):
        compiled(torch.randn(2, 3, 24))
