"""Max pooling for ``kiln-cpu-library``: the padded copy and the window as one native call.

``convert-kiln-to-linalg`` lowers a strided ``kiln.max_pool2d`` to a
padding generic (``-inf`` around the input, tagged ``kiln.pool_pad`` with
its pads) and a window generic reading the padded buffer once per tap
(tagged ``kiln.max_pool`` with ``[KH, KW, sh, sw, dh, dw]`` and the
pads); without padding the window reads the input itself.  Both run on one thread, and the
padding generic computes every element's clamped index (ResNet-50's 3x3
stride-2 pool over 64 x 112 x 112: 0.62 ms).  With the native runtime,
:func:`rewrite_max_pools` replaces them with one ``kiln_maxpool2d`` call
(kiln_dispatch.c), which skips the taps outside the input instead of
padding it and splits the planes over the native pool; the padded buffer
goes with the padding generic.

It applies to contiguous f32 NCHW memrefs; a pool lowered otherwise (stride
1, ``ceil_mode``, more than 64 taps) is not tagged and keeps its generics.
"""

from __future__ import annotations

from ..._mlir import ir
from ...conversions.kiln_to_linalg.nn import MAX_POOL_ATTR, POOL_PAD_ATTR
from .buffers import erase_dead_buffers, loaded_memref, op_of
from .library import add_pointer, contiguous_f32, native_enabled, pool_threads_line, replace_generics

__all__ = ["NATIVE_MAXPOOL", "rewrite_max_pools"]

#: The C entry point.
NATIVE_MAXPOOL = "kiln_maxpool2d"

_DECL = (f"func.func private @{NATIVE_MAXPOOL}(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, "
         "i64, i64, i32)")


def _source(padded, pads: list[int]):
    """``(source, (top, left))``: the window's own input when the pool has
    no padding (``pads`` all 0), else the input the tagged padding generic
    copied into ``padded`` (the one memref its body loads from); None when
    that does not hold."""
    if not any(pads):
        return (padded, (0, 0)) if contiguous_f32(padded, 4) else None
    alloc = getattr(padded.owner, "operation", None)
    if alloc is None or alloc.name != "memref.alloc":
        return None
    writers = [op_of(u.owner) for u in padded.uses]
    writers = [op for op in writers if op.name == "linalg.generic" and POOL_PAD_ATTR in op.attributes]
    source = loaded_memref(writers[0]) if len(writers) == 1 else None
    if source is None or not contiguous_f32(source, 4):
        return None
    top, left = list(ir.DenseI64ArrayAttr(writers[0].attributes[POOL_PAD_ATTR]))[:2]
    return source, (top, left)


def _helper_text(name: str, tx, ty, window: list[int], pads: tuple[int, int]) -> str:
    lines = [f"func.func private @{name}(%X: {tx}, %Y: {ty}) {{"]
    add = lines.append
    for i in range(4):
        add(f"  %i{i} = arith.constant {i} : index")
    for tag, v, i in (("n", "X", 0), ("c", "X", 1), ("h", "X", 2), ("w", "X", 3), ("oh", "Y", 2), ("ow", "Y", 3)):
        add(f"  %{tag}i = memref.dim %{v}, %i{i} : {tx if v == 'X' else ty}")
        add(f"  %{tag} = arith.index_cast %{tag}i : index to i64")
    add("  %planes = arith.muli %n, %c : i64")
    consts = []
    for tag, value in zip(("kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl"), [*window, *pads]):
        add(f"  %{tag} = arith.constant {value} : i64")
        consts.append(f"%{tag}")
    for tag, t in (("X", tx), ("Y", ty)):
        add_pointer(add, tag, t)
    add(pool_threads_line())  # asked at run time: the code serves any pool size
    args = ", ".join(["%planes", "%h", "%w", "%oh", "%ow", *consts, "%pX", "%pY", "%nthr"])
    add(f"  func.call @{NATIVE_MAXPOOL}({args}) : ({', '.join(['i64'] * 15)}, i32) -> ()")
    add("  return")
    add("}")
    return "\n".join(lines)


def _match(op):
    """``(source, (top, left))`` for a tagged window generic whose input and
    output qualify, else None."""
    if MAX_POOL_ATTR not in op.attributes or not contiguous_f32(op.operands[-1], 4):
        return None
    return _source(op.operands[0], list(ir.DenseI64ArrayAttr(op.attributes[MAX_POOL_ATTR]))[6:])


def rewrite_max_pools(module) -> int:
    """Replace every tagged max pool in ``module`` (bufferized) with a
    ``kiln_maxpool2d`` call; the count.  Nothing changes without the native runtime."""
    if not native_enabled():
        return 0

    def helper(name, op, found):
        (x, pads), window = found, list(ir.DenseI64ArrayAttr(op.attributes[MAX_POOL_ATTR]))[:6]
        return _helper_text(name, x.type, op.operands[-1].type, window, pads)

    count, functions = replace_generics(module.operation, _match, NATIVE_MAXPOOL, _DECL, "kiln_maxpool", helper,
                                        lambda op, found: [found[0], op.operands[-1]])
    for fn in functions:
        erase_dead_buffers(fn)  # the padding generic and its buffer
    return count
