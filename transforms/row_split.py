"""Which kernels may run as two halves of their leading dim, on two threads.

Generated code runs on the calling thread: a layer_norm, a transpose or the
bias and GELU passes after a GEMM use one core of two.  A kernel whose every
op treats rows of its leading dim independently (the dim is the same symbol
``S`` in every value that has it, and no op reduces, mixes or moves along
it) computes the same thing when called twice, on rows ``[0, S/2)`` and
``[S/2, S)`` of its row-split inputs and outputs; the runtime does that
(:mod:`kiln.runtime.executor`, ``kiln_run_split`` of the native library),
one half on a worker of the native pool.

:func:`split_symbol` decides it from the kernel's kiln IR, at compile time
(:func:`kiln.compile_prepare.prepare` records it as ``Step.split``): it
lives here, not in ``runtime/``, because a loaded artifact runs without MLIR.  A kernel is left
whole when its shared inputs (those without ``S``, and the constants inlined
in it: weights) exceed
:data:`MAX_SHARED_BYTES`, since each half would stream them again (the MLP's
16 MiB weights), and library calls inside a half find the pool busy and run
on their own thread.
"""

from __future__ import annotations

import math

from ..dialects.kiln import TensorType, tensor_info
from ..errors import KilnError
from ..runtime.arena import torch_dtype
from .partition import is_elementwise

__all__ = ["MAX_SHARED_BYTES", "split_symbol"]

#: Most bytes of inputs a split kernel's two halves both read: the
#: transformer block's 1 MiB weights split well (its GEMM epilogues then use
#: both cores), the MLP's 16 MiB ones do not (each half streams them again).
MAX_SHARED_BYTES = 4 << 20

def _info(value):
    return tensor_info(value.type) if isinstance(value.type, TensorType) else None


def _leading(info, sym: str) -> bool:
    return info is not None and info.rank > 0 and not info.dims[0].is_static and str(info.dims[0]) == sym


def _norm(axes, rank: int) -> set[int]:
    return {a % rank for a in axes}


def _row_op(op, sym: str) -> bool:
    """Whether ``op`` maps row ``i`` of its leading-``sym`` operands to row ``i`` of its result only."""
    name = op.name
    if name == "kiln.constant":
        return True
    if len(op.results) != 1:
        return False
    out = _info(op.results[0])
    if not _leading(out, sym):
        return False
    ins = [_info(v) for v in op.operands]
    attrs = op.opview.decoded_attrs() if hasattr(op.opview, "decoded_attrs") else {}
    if is_elementwise(name):
        # Same-rank operands have the rows (or a broadcast dim of 1); lower ranks broadcast.
        return all(i is None or i.rank < out.rank or _leading(i, sym) or (i.dims[0].is_static and i.dims[0].value == 1)
                   for i in ins)
    first = ins[0] if ins else None
    if not _leading(first, sym):  # also an op without operands (a range): it makes rows from nothing
        return False
    if name == "kiln.matmul":
        # Rows of a (or a batch dim both have); a rank-2 b [S, N] would contract over S.
        b = ins[1]
        return not _leading(b, sym) or b.rank == first.rank >= 3
    if name in ("kiln.conv2d", "kiln.max_pool2d", "kiln.avg_pool2d", "kiln.batch_norm"):
        return not any(_leading(i, sym) for i in ins[1:])  # weights, bias, statistics: shared
    if name == "kiln.attention":
        # Only a batch dim: rows of q attend to every key (and causal masks count them).
        return first.rank >= 3 and all(_leading(i, sym) for i in ins[:3]) and \
            all(i.rank < out.rank or _leading(i, sym) for i in ins[3:])
    if name == "kiln.packed_attention":
        return first.rank >= 3  # [S, L, 3 * H * D]: S a batch dim (of rank 2, S would be the queries)
    if name in ("kiln.quantize", "kiln.dequantize"):
        # Per-tensor parameters, or along another axis (a blocked scale has the rows too: it is split with x).
        axis = attrs.get("axis")
        return axis is None or axis % first.rank != 0
    if name in ("kiln.softmax", "kiln.layer_norm"):
        return attrs.get("axis", -1) % first.rank != 0
    if name in ("kiln.argmax", "kiln.argmin"):
        return attrs.get("axis", 0) % first.rank != 0
    if name in ("kiln.reduce_sum", "kiln.reduce_mean", "kiln.reduce_max", "kiln.reduce_min", "kiln.reduce_prod"):
        axes = attrs.get("axes") or list(range(first.rank))
        return 0 not in _norm(axes, first.rank)
    if name == "kiln.transpose":
        return list(attrs.get("perm", []))[:1] == [0]
    if name == "kiln.reshape":
        return True  # both leading dims are S (checked above), and S is nowhere else
    if name == "kiln.slice":
        return 0 not in _norm(attrs.get("axes", []), first.rank)
    if name == "kiln.concat":
        return attrs.get("axis", 0) % out.rank != 0 and all(_leading(i, sym) for i in ins)
    return False


def _nbytes(info) -> int | None:
    if info is None or any(not d.is_static for d in info.dims):
        return None
    try:
        itemsize = torch_dtype(info.dtype).itemsize
    except KilnError:  # a dtype the runtime has no tensor for: never split
        return None
    return math.prod(d.value for d in info.dims) * itemsize


def split_symbol(fn) -> str | None:
    """The symbol a kernel function (kiln IR, one block) may be split along, or None."""
    body = fn.regions[0].blocks[0]
    args = [_info(a) for a in body.arguments]
    ops = [o.operation for o in body.operations]
    ret = ops[-1] if ops and ops[-1].name == "func.return" else None
    outs = [_info(v) for v in ret.operands] if ret is not None else []
    if not outs or outs[0] is None or outs[0].rank == 0 or outs[0].dims[0].is_static:
        return None
    sym = str(outs[0].dims[0])
    if len(outs[0].dims[0].symbols) != 1 or sym not in outs[0].dims[0].symbols:
        return None  # an expression (B*L), not a symbol
    if not all(_leading(o, sym) for o in outs) or not any(_leading(a, sym) for a in args):
        return None
    values = list(args)
    for op in ops:
        if op.name == "func.return":
            continue
        if not _row_op(op, sym):
            return None
        values += [_info(r) for r in op.results]
    for info in values:  # S only ever as a leading dim
        if info is not None and any(sym in d.symbols for d in info.dims[1:]):
            return None
        if info is not None and info.rank and not _leading(info, sym) and sym in info.dims[0].symbols:
            return None
    # Both halves read the inputs without S and the constants inlined in the kernel (weights, when
    # kiln-partition inlines them).
    shared = 0
    consts = [_info(op.results[0]) for op in ops if op.name == "kiln.constant"]
    for info in args + consts:
        if info is not None and not _leading(info, sym):
            size = _nbytes(info)
            if size is None:
                return None  # a shared input of symbolic size
            shared += size
    return sym if shared <= MAX_SHARED_BYTES else None
