"""kiln's CPU library kernels: which native function implements which kiln op, and when.

Each entry is a :class:`~kiln.backends.cpu.calls.LibraryCall` registered in
the kernel registry for ``device="cpu"``: the C function of the native
runtime (``runtime/native/kiln_dispatch.c``), its signature (how its
arguments come from the op's operands and attributes) and ``why`` it fits an
op (None where it does not; the reason is what ``kiln-opt`` and
``report()`` show).  ``kiln-select-kernels`` chooses them on kiln IR;
nothing is recognised after lowering.

- ``native.layer_norm`` (``kiln_layer_norm``): the two-pass statistics and
  the normalization per row, rows over the native pool from 16 KiB.  The
  generated chain (sum, mean, centred squares, inverse, normalize: four
  passes and two row buffers) took 4.5 us for 32 x 256 in the transformer
  block at ``(1, 32)``; the native call 2.5 us.
- ``native.rms_norm`` (``kiln_rms_norm``): the same for RMS norm.
- ``native.max_pool2d`` (``kiln_maxpool2d``): strided windows of at most 64
  taps, skipping the taps outside the input instead of padding it, planes
  over the pool (ResNet-50's 3x3 stride-2 pool over 64 x 112 x 112: the
  generated padding copy and window took 0.62 ms).  Stride 1 and
  ``ceil_mode`` keep the generated code (not measured faster natively).
- ``native.attention`` (``kiln_attention_gqa``, ``kiln_attention.c``): flash
  attention over f32 q / k / v of one rank with the same batch dims (k / v
  heads read in place under grouped-query attention), head dims static up to
  :data:`MAX_HEAD_DIM`: no ``[.., L, S]`` scores buffer.
- ``native.attention_masked`` (``kiln_attention_masked``): the same with an
  f32 (added) or bool (kept where set) mask over at most two batch dims,
  read where it lies through its strides (0 where it broadcasts).
- ``native.conv2d_depthwise`` (``kiln_dwconv2d``, ``kiln_dwconv.c``): an f32
  depthwise ``kiln.conv2d`` (one channel a group, no multiplier; windows of
  at most 64 rows): each plane copied with its padding into the thread's
  scratch, every output vector's window summed in a register (a 3x3 keeps
  its weights in registers), planes over the pool.  MobileNetV2's layers at
  B = 8 (two threads, AVX2 EPYC): 144 x 56 x 56 stride 1 4.7 ms, 96 x 112 x
  112 stride 2 6.0 ms (torch 9.0 / 32 ms; kiln's generated loop nest
  ~9 / ~15 ms in the model's profile).
- ``native.permute`` (``kiln_permute``): a transpose that keeps the
  innermost dim, as runs of it copied on the native pool (the generated copy
  runs on one thread, and its kernel can be split only along an output's
  leading symbol: the transformer block's stacked q/k/v transpose ``[B, L,
  3, H, D] -> [3, B, H, L, D]`` was not); f32 / i32.
- ``native.packed_attention`` (``kiln_attention_packed``): a
  ``kiln.packed_attention``'s heads read from the ``[.., L, 3 * H * D]``
  projection and written at column ``h * D`` of the output, in place.

Products take their own contraction as the placeholder (``contraction=True``;
kiln-cpu-library and kiln-cpu-lowp-gemm write their helpers, :mod:`.gemm_text`
and :mod:`.lowp_gemm`):

- ``native.conv2d``: an f32 ``kiln.conv2d`` (one group): its im2col product
  is the placeholder; the native convolution gathers the im2col in the call
  (the weight constant), folding in the zero padding and the bias, else the
  library GEMM.  In a fused group it applies a residual add / ReLU / global
  sum or mean after it too (:func:`.epilogues.conv_steps`).
- ``native.gemm``: an f32 ``kiln.matmul`` of matrices (and the f32 products
  inside a generated attention: ``kiln.parts``, :attr:`.calls.LibraryCall.parts`): kiln's native small-M GEMM for few rows times a constant B
  (packed once), sgemv for one row, OpenBLAS's sgemm in slabs on the native
  pool otherwise -- by M, at run time (:func:`.library.small_m`); with
  ``KILN_NATIVE=0``, OpenBLAS alone.  In a fused group the native calls
  apply a bias add, ReLU / GELU and residual add after it
  (:func:`.epilogues.gemm_steps`).

- ``native.matmul_lowp`` (``kiln_lowp_gemm``, ``kiln_lowp.c``): a bf16 / f16
  ``kiln.matmul`` summed in f32 (AMX-BF16 tiles, AVX512-BF16's ``vdpbf16ps``
  or widened FMAs, by CPU), a constant B packed once, then rounded.
- ``native.conv2d_lowp`` (``kiln_lowp_conv2d`` / ``kiln_lowp_gemm``): a
  bf16 / f16 ``kiln.conv2d`` of one group: per image the weight ``[O, C *
  KH * KW]`` times its im2col on the 16-bit GEMM, the im2col gathered by the
  call straight into the GEMM's pair panels (the padding read as 0); a
  pointwise stride-1 one reads its input in place; summed in f32 from the
  bias.
- ``native.matmul_w8`` (``kiln_w8_gemm``, ``kiln_w8.c``): f32 rows times
  int8 weight rows scaled per group, the weight read as it is.
- ``native.matmul_integer`` (``kiln_i8_gemm``, ``kiln_i8.c``): 8-bit
  operands with zero points summed in i32 (AVX512-VNNI / AMX-INT8, AVX2's
  ``vpmaddwd``, or scalar), a constant B packed once.
"""

from __future__ import annotations

import math

from .calls import LibraryCall, Site, address, array, f32, i32, i64, pointer, register, size, stride, threads
from .epilogues import conv_steps, gemm_steps

__all__ = [
    "ATTENTION",
    "ATTENTION_MASKED",
    "CONV2D",
    "CONV2D_LOWP",
    "LAYER_NORM",
    "MAX_HEAD_DIM",
    "MAX_POOL",
    "PACKED_ATTENTION",
    "PERMUTE",
    "MATMUL_F32",
    "MATMUL_INTEGER",
    "MATMUL_LOWP",
    "MATMUL_W8",
    "RMS_NORM",
    "register_builtins",
]


def _rows(site: Site) -> range:
    return range(site.attrs["axis"] % site.rank("x"))


def _normalized(site: Site) -> range:
    return range(site.attrs["axis"] % site.rank("x"), site.rank("x"))


LAYER_NORM = LibraryCall(
    "native.layer_norm", "kiln_layer_norm",
    (size("x", _rows), size("x", _normalized), pointer("x"), pointer("weight"), pointer("bias"),
     f32(lambda site: site.attrs["epsilon"]), pointer("res"), threads()),
    why=lambda op: "f32 rows: statistics and normalization in one native call, rows over the pool",
    optional=("weight", "bias"))

RMS_NORM = LibraryCall(
    "native.rms_norm", "kiln_rms_norm",
    (size("x", _rows), size("x", _normalized), pointer("x"), pointer("weight"), f32(lambda site: site.attrs["epsilon"]),
     pointer("res"), threads()),
    why=lambda op: "f32 rows: the sum of squares and the scaling in one native call, rows over the pool",
    optional=("weight",))

#: Windows of more taps keep the generated code, as when the lowering's unrolling limit decided it
#: (``kiln_maxpool2d`` itself has no limit; whether it wins past 64 taps is not measured).
MAX_POOL_TAPS = 64


def _pool(attrs: dict) -> tuple[list[int], list[int], list[int], list[int]]:
    kernel = list(attrs["kernel"])
    strides = list(attrs.get("strides") or kernel)
    return kernel, strides, list(attrs.get("dilations") or [1, 1]), list(attrs.get("pads") or [0, 0, 0, 0])


def _why_max_pool(op) -> str | None:
    kernel, strides, _, pads = _pool(op.decoded_attrs())
    if op.decoded_attrs()["ceil_mode"] or min(strides) < 2 or kernel[0] * kernel[1] > MAX_POOL_TAPS:
        return None
    if not all(2 * p <= k for p, k in zip(pads, kernel + kernel)):  # a window wholly in the padding
        return None
    return f"strided window (stride {strides[0]}x{strides[1]}, {kernel[0] * kernel[1]} taps): taps outside the " \
           "input skipped, planes over the pool"


def _pool_arg(i: int):
    return i64(lambda site: [x for part in _pool(site.attrs) for x in part][i])


MAX_POOL = LibraryCall(
    "native.max_pool2d", "kiln_maxpool2d",
    (size("x", [0, 1]), size("x", [2]), size("x", [3]), size("res", [2]), size("res", [3]),
     *(_pool_arg(i) for i in range(8)),  # KH, KW, sh, sw, dh, dw, top, left
     pointer("x"), pointer("res"), threads()),
    why=_why_max_pool)


#: The largest head dim the native attention takes (kiln_attention.c's MAX_HEAD_DIM).
MAX_HEAD_DIM = 256


def _scale(site: Site, head_dim: int) -> float:
    scale = site.attrs.get("scale")
    return 1.0 / math.sqrt(head_dim) if scale is None else scale


def _group(site: Site) -> int:
    """q heads per k / v head (grouped-query attention; 1 otherwise)."""
    q, k = site.shapes["q"], site.shapes["k"]
    if len(q) < 3 or q[-3] is None or k[-3] is None or q[-3] == k[-3] or k[-3] == 1:
        return 1
    return q[-3] // k[-3]


def _nb(site: Site) -> int:
    return site.rank("q") - 2


def _head_args():
    """heads (the batch dims flattened), group, L, S, D, Dv, q, k, v, out, scale, causal."""
    return (size("res", lambda s: range(_nb(s))), i64(_group), size("q", lambda s: [_nb(s)]),
            size("k", lambda s: [_nb(s)]), size("q", lambda s: [_nb(s) + 1]), size("v", lambda s: [_nb(s) + 1]),
            pointer("q"), pointer("k"), pointer("v"), pointer("res"),
            f32(lambda s: _scale(s, s.shapes["q"][-1])), i32(lambda s: int(s.attrs["causal"])))


def _mask_dim(loop: int):
    """The mask dim read by loop ``loop`` of ``(b0, b1, l, s)`` (as if there
    were two batch loops; the mask right-aligned to the loops), None where
    the mask broadcasts (a dim of 1, or none)."""
    def dim_of(s: Site) -> int | None:
        nb, mask = _nb(s), s.shapes["mask"]
        at = loop - (2 - nb)  # the loop's position among the op's b.., l, s
        j = at - (nb + 2 - len(mask))
        return None if at < 0 or j < 0 or mask[j] == 1 else j
    return dim_of


def _why_attention(op, masked: bool) -> str | None:
    from ...dialects.kiln import tensor_info
    from ...dialects.kiln.nn import gqa_group

    view = op.opview
    if (view.mask is not None) != masked:
        return None
    q, k, v = (tensor_info(x.type) for x in (view.q, view.k, view.v))
    out = tensor_info(op.results[0].type)
    if not (q.rank == k.rank == v.rank == out.rank) or q.rank < 2:
        return None  # broadcast batch dims: the generated chain
    d, dv = q.dims[-1], v.dims[-1]
    if not (d.is_static and dv.is_static and 1 <= d.value <= MAX_HEAD_DIM and 1 <= dv.value <= MAX_HEAD_DIM):
        return None
    group = gqa_group(q.dims, k.dims, v.dims)
    kb = list(k.dims[:-2])
    if group > 1:
        kb[-1] = q.dims[-3]
    if list(q.dims[:-2]) != kb or list(k.dims[:-2]) != list(v.dims[:-2]) or list(out.dims[:-2]) != list(q.dims[:-2]):
        return None
    what = f"head dim {d.value}" + (f", {group} q heads per k / v head" if group > 1 else "")
    if not masked:
        return f"f32 flash attention ({what}): no scores buffer"
    m = tensor_info(view.mask.type)
    nb = q.rank - 2
    if str(m.dtype) not in ("f32", "i1") or nb > 2 or m.rank > nb + 2:
        return None
    return f"f32 flash attention with a {'boolean' if str(m.dtype) == 'i1' else 'additive'} mask ({what}), " \
           "the mask read through its strides"


ATTENTION = LibraryCall(
    "native.attention", "kiln_attention_gqa", (*_head_args(), threads()),
    why=lambda op: _why_attention(op, masked=False), returns="i32")

ATTENTION_MASKED = LibraryCall(
    "native.attention_masked", "kiln_attention_masked",
    (*_head_args(),
     # the mask: its first element, its kind (1 f32 added, 2 bool kept where set), the innermost batch dim's
     # size, its strides per loop (b0, b1, l, s; 0 where it broadcasts)
     address("mask"), i32(lambda s: 2 if s.dtypes["mask"] == "i1" else 1),
     size("res", lambda s: [_nb(s) - 1] if _nb(s) else []),
     *(stride("mask", _mask_dim(loop)) for loop in range(4)),
     threads()),
    why=lambda op: _why_attention(op, masked=True), returns="i32")


def _packed_head_dim(site: Site) -> int:
    return site.shapes["qkv"][-1] // (3 * site.attrs["heads"])


def _why_packed(op) -> str | None:
    from ...dialects.kiln import tensor_info

    x = tensor_info(op.operands[0].type)
    d = x.dims[-1].value // (3 * op.opview.decoded_attrs()["heads"])
    if not 1 <= d <= MAX_HEAD_DIM:
        return None
    return f"f32 flash attention over the packed projection (head dim {d}): heads read and written in place"


PACKED_ATTENTION = LibraryCall(
    "native.packed_attention", "kiln_attention_packed",
    (size("res", lambda s: range(s.rank("res") - 2)), i64(lambda s: s.attrs["heads"]),
     size("res", lambda s: [s.rank("res") - 2]), i64(_packed_head_dim), pointer("qkv"), pointer("res"),
     f32(lambda s: _scale(s, _packed_head_dim(s))), i32(lambda s: int(s.attrs["causal"])), threads()),
    why=_why_packed, returns="i32")


#: The largest rank kiln_permute takes (its PERMUTE_MAX_RANK).
PERMUTE_MAX_RANK = 8


def _why_permute(op) -> str | None:
    perm = list(op.opview.decoded_attrs()["perm"])
    rank = len(perm)
    if not 2 <= rank <= PERMUTE_MAX_RANK or perm[-1] != rank - 1 or perm == list(range(rank)):
        return None  # the innermost dim moves (no runs to copy), or nothing moves
    return f"the innermost dim stays (runs of it copied, rows over the pool): perm {perm}"


def _permute_meta(site: Site) -> list:
    """kiln_permute's array: the output's sizes, then per output dim the
    input's (dense) element stride along it."""
    perm, rank = list(site.attrs["perm"]), site.rank("res")
    return [("res", [j]) for j in range(rank)] + [("x", range(perm[j] + 1, rank)) for j in range(rank)]


PERMUTE = LibraryCall(
    "native.permute", "kiln_permute",
    (i64(lambda s: s.rank("res")), array(_permute_meta), pointer("x"), pointer("res"), i64(lambda s: 4), threads()),
    why=_why_permute)


def _lowp_path() -> str:
    """How a bf16 product runs on this CPU now (what ``why`` says)."""
    from .lowp_gemm import uses_amx, uses_dp

    return "AMX-BF16 tiles" if uses_amx() else "AVX512-BF16 vdpbf16ps" if uses_dp() else "widened to f32, FMAs"


def _matrix_operands(op) -> bool:
    from ...dialects.kiln import tensor_info

    return all(tensor_info(v.type).rank >= 2 for v in op.operands)


def _why_lowp(op) -> str | None:
    from ...dialects.kiln import tensor_info

    a, b = (tensor_info(v.type) for v in op.operands)
    if not _matrix_operands(op) or str(a.dtype) != str(b.dtype):
        return None  # a vector operand: the generated contraction
    path = _lowp_path() if str(a.dtype) == "bf16" else "widened to f32, FMAs"
    return f"{a.dtype} product summed in f32 ({path}); a constant B is packed once"


def _why_integer(op) -> str | None:
    from .lowp_gemm import uses_avx2, uses_vnni

    path = "AVX512-VNNI" if uses_vnni() else "AVX2 vpmaddwd" if uses_avx2() else "scalar i32"
    return f"8-bit product with zero points summed in i32 ({path}); a constant B is packed once"


def _why_gemm(op) -> str | None:
    if not _matrix_operands(op):
        return None  # a vector operand: the generated contraction
    return "f32 product: the native GEMM for few rows times a constant B, OpenBLAS sgemm otherwise (by M at run time)"


def _why_conv(op) -> str | None:
    if op.opview.decoded_attrs()["groups"] != 1:
        return None  # grouped / depthwise: the generated convolution
    return "f32 convolution: the native convolution gathers its im2col (padding and bias folded in) for a " \
           "constant weight; sgemm over an im2col copy otherwise"


#: The most window rows kiln-select-kernels gives the native depthwise convolution (it has no
#: limit since it pads planes; larger windows are not measured against the generated code).
DWCONV_MAX_KH = 64


def _why_dwconv(op) -> str | None:
    from ...dialects.kiln import tensor_info

    x, w = (tensor_info(v.type) for v in (op.operands[0], op.operands[1]))
    groups = op.decoded_attrs()["groups"]
    c, one, kh, kw = w.dims
    if groups == 1 or not (x.dims[1].is_static and x.dims[1].value == groups and c.is_static and c.value == groups):
        return None  # grouped but not one channel a group (or a channel multiplier): the generated convolution
    if not (one.is_static and one.value == 1 and kh.is_static and kw.is_static) or kh.value > DWCONV_MAX_KH:
        return None
    return f"f32 depthwise {kh.value}x{kw.value}: each plane's window sums in vector registers, taps outside " \
           "the input skipped (no padded copy), planes over the pool"


def _conv_attr(name: str, i: int, default: int):
    return i64(lambda site: int(list(site.attrs.get(name) or [default] * 4)[i]))


CONV2D_DEPTHWISE = LibraryCall(
    "native.conv2d_depthwise", "kiln_dwconv2d",
    (size("x", [0, 1]), size("x", [1]), size("x", [2]), size("x", [3]), size("res", [2]), size("res", [3]),
     size("weight", [2]), size("weight", [3]), _conv_attr("strides", 0, 1), _conv_attr("strides", 1, 1),
     _conv_attr("dilations", 0, 1), _conv_attr("dilations", 1, 1), _conv_attr("pads", 0, 0), _conv_attr("pads", 1, 0),
     pointer("x"), pointer("weight"), pointer("bias"), i64(lambda site: 0), pointer("res"), threads()),
    why=_why_dwconv, optional=("bias",))

CONV2D = LibraryCall("native.conv2d", "kiln_conv2d", (), why=_why_conv, contraction=True, native=False,
                     epilogue=conv_steps)
def _why_attention_products(op) -> str | None:
    from ...dialects.kiln import tensor_info

    if any(str(tensor_info(v.type).dtype) != "f32" for v in (op.operands[0], op.results[0])):
        return None  # bf16 / f16: the generated chain sums in f32 loops
    return "generated attention chain: its q k^T and p v products on the library GEMM"


MATMUL_F32 = LibraryCall("native.gemm", "scipy_cblas_sgemm64_", (), why=_why_gemm, contraction=True, native=False,
                         epilogue=gemm_steps, parts={"kiln.attention": _why_attention_products,
                                                     "kiln.packed_attention": _why_attention_products})
MATMUL_LOWP = LibraryCall("native.matmul_lowp", "kiln_lowp_gemm", (), why=_why_lowp, contraction=True)


def _why_conv_lowp(op) -> str | None:
    from ...dialects.kiln import tensor_info

    if op.opview.decoded_attrs()["groups"] != 1:
        return None  # grouped / depthwise: the generated convolution
    dtype = str(tensor_info(op.operands[0].type).dtype)
    path = _lowp_path() if dtype == "bf16" else "widened to f32, FMAs"
    return f"{dtype} convolution: the weight times each image's im2col summed in f32 ({path})"


CONV2D_LOWP = LibraryCall("native.conv2d_lowp", "kiln_lowp_gemm", (), why=_why_conv_lowp, contraction=True)
MATMUL_W8 = LibraryCall(
    "native.matmul_w8", "kiln_w8_gemm", (),
    why=lambda op: "f32 rows times int8 weight rows scaled per group: the weight read as it is, no f32 copy",
    contraction=True)
MATMUL_INTEGER = LibraryCall("native.matmul_integer", "kiln_i8_gemm", (), why=_why_integer, contraction=True)


def register_builtins(registry) -> None:
    """Register kiln's CPU library kernels in ``registry`` (its ``load_builtins`` calls this)."""
    register("kiln.layer_norm", LAYER_NORM, registry)
    register("kiln.rms_norm", RMS_NORM, registry)
    register("kiln.max_pool2d", MAX_POOL, registry)
    register("kiln.attention", ATTENTION, registry)
    register("kiln.attention", ATTENTION_MASKED, registry)
    register("kiln.packed_attention", PACKED_ATTENTION, registry)
    register("kiln.transpose", PERMUTE, registry, dtypes=("f32", "i32"))
    register("kiln.matmul", MATMUL_F32, registry)
    register("kiln.conv2d", CONV2D, registry)
    register("kiln.conv2d", CONV2D_DEPTHWISE, registry, dtypes=("f32",))
    register("kiln.matmul", MATMUL_LOWP, registry, dtypes=("bf16", "f16"))
    register("kiln.conv2d", CONV2D_LOWP, registry, dtypes=("bf16", "f16"))
    register("kiln.matmul_w8", MATMUL_W8, registry, dtypes=("f32",))
    register("kiln.matmul_integer", MATMUL_INTEGER, registry, dtypes=("i8", "ui8"))
