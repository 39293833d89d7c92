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
"""

from __future__ import annotations

from .calls import LibraryCall, f32, i64, pointer, register, size, threads

__all__ = ["LAYER_NORM", "MAX_POOL", "RMS_NORM", "register_builtins"]


def _rows(attrs: dict, rank: int) -> range:
    return range(attrs["axis"] % rank)


def _normalized(attrs: dict, rank: int) -> range:
    return range(attrs["axis"] % rank, rank)


LAYER_NORM = LibraryCall(
    "native.layer_norm", "kiln_layer_norm",
    (size("x", _rows), size("x", _normalized), pointer("x"), pointer("weight"), pointer("bias"),
     f32(lambda a: a["epsilon"]), pointer("res"), threads()),
    why=lambda op: "f32 rows: statistics and normalization in one native call, rows over the pool",
    optional=("weight", "bias"))

RMS_NORM = LibraryCall(
    "native.rms_norm", "kiln_rms_norm",
    (size("x", _rows), size("x", _normalized), pointer("x"), pointer("weight"), f32(lambda a: a["epsilon"]),
     pointer("res"), threads()),
    why=lambda op: "f32 rows: the sum of squares and the scaling in one native call, rows over the pool",
    optional=("weight",))

#: Windows of more taps keep the generated code (the lowering's own unrolling limit).
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
    return i64(lambda a: [*_pool(a)[0], *_pool(a)[1], *_pool(a)[2], *_pool(a)[3][:2]][i])


MAX_POOL = LibraryCall(
    "native.max_pool2d", "kiln_maxpool2d",
    (size("x", [0, 1]), size("x", [2]), size("x", [3]), size("res", [2]), size("res", [3]),
     *(_pool_arg(i) for i in range(8)),  # KH, KW, sh, sw, dh, dw, top, left
     pointer("x"), pointer("res"), threads()),
    why=_why_max_pool)

def register_builtins(registry) -> None:
    """Register kiln's CPU library kernels in ``registry`` (its ``load_builtins`` calls this)."""
    register("kiln.layer_norm", LAYER_NORM, registry)
    register("kiln.rms_norm", RMS_NORM, registry)
    register("kiln.max_pool2d", MAX_POOL, registry)
