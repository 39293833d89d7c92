"""Attention for ``kiln-cpu-library``: the lowered chain as one native call.

``convert-kiln-to-linalg`` lowers a ``kiln.attention`` to a chain
on a materialized ``[..., L, S]`` scores buffer: the ``q k^T`` contraction,
a scale (and causal mask) pass, four softmax passes and the ``p v``
contraction, and tags both contractions with ``kiln.attention = {id, scale,
causal}``.  With the native runtime, :func:`rewrite_attention` replaces the
``p v`` contraction with a call of ``kiln_attention`` (the flash-attention
kernel in ``runtime/native/kiln_attention.c``), reading ``q``, ``k`` and
``v`` from the ``q k^T`` contraction's operands (``kiln_attention_gqa``, with
a group: a grouped-query attention's k / v map reads head ``h floordiv
group``, and the kernel reads k / v head ``h / group`` in place), and then
erases what only fed it (:func:`erase_dead_buffers`): the passes, the scores buffer and its
fills.  A masked chain (its tag says ``masked``; its scale-and-mask pass
carries the id as ``kiln.attention_mask``) calls ``kiln_attention_masked``
with the mask's pointer and its strides per loop read at run time (0 where
it broadcasts): an f32 mask is added to the scores, a bool one keeps those
whose byte is set.  At most two batch dims (``[B, H, L, S]``).

It applies when q, k, v and the output are contiguous f32 memrefs of one
rank with the same batch dims (no broadcasting) and static head dims of at
most :data:`MAX_HEAD_DIM`; anything else keeps the generated chain, whose
contractions then go to sgemm like any other.

A ``kiln.packed_attention``'s chain (its tag carries ``heads``) reads q, k
and v from one ``[.., L, 3, H, D]`` view of the projection and writes the
output ``[.., L, H * D]`` at column ``h * D + e``; it becomes a
``kiln_attention_packed`` call, which reads and writes the heads strided
where they lie (the transformer block at (1, 32) had spent 4 and 3 us
copying them out of the projection and back).  Without the native runtime
that chain stays generated code (its contractions' maps are not sgemm's).
"""

from __future__ import annotations

from ..._mlir import ir
from ...conversions.kiln_to_linalg.attention import ATTENTION_ATTR, MASK_ATTR, MAX_HEAD_DIM, packed_attention_maps
from ...conversions.kiln_to_linalg.common import affine_map
from .buffers import erase_dead_buffers, indexing_maps
from .library import (
    _dims,
    _is_contiguous,
    _zero_fill_before,
    add_address,
    add_pointer,
    contiguous_f32,
    function_names,
    insert_helpers,
    native_enabled,
    pool_threads_line,
    strided_pointers,
    unique_name,
)

__all__ = ["MAX_HEAD_DIM", "NATIVE_ATTENTION", "NATIVE_GQA", "NATIVE_MASKED", "NATIVE_PACKED", "rewrite_attention"]

#: The C entry points (the second for kiln.packed_attention), and the largest
#: head dim they take (its MAX_HEAD_DIM).
NATIVE_ATTENTION = "kiln_attention"
NATIVE_PACKED = "kiln_attention_packed"
#: The entry point the unpacked chain calls: kiln_attention with a group
#: (q heads per k / v head; 1 unless grouped-query attention).
NATIVE_GQA = "kiln_attention_gqa"
#: kiln_attention_gqa with a mask over the scores (f32 added, or bool).
NATIVE_MASKED = "kiln_attention_masked"

def _tag(op) -> dict | None:
    if ATTENTION_ATTR not in op.attributes:
        return None
    d = ir.DictAttr(op.attributes[ATTENTION_ATTR])
    return {"id": ir.IntegerAttr(d["id"]).value, "scale": ir.FloatAttr(d["scale"]).value,
            "causal": ir.BoolAttr(d["causal"]).value,
            "masked": "masked" in d and ir.BoolAttr(d["masked"]).value,
            "heads": ir.IntegerAttr(d["heads"]).value if "heads" in d else None}


class _Attention:
    """A matched pair: the ``q k^T`` and ``p v`` generics and q, k, v, out."""

    def __init__(self, qk, pv, q, k, v, out, scale, causal, heads=None, group=1, mask=None, mask_dims=None):
        self.qk, self.pv, self.q, self.k, self.v, self.out = qk, pv, q, k, v, out
        self.scale, self.causal = scale, causal
        self.heads = heads  # kiln.packed_attention's: q, k and v are one [.., L, 3, H, D] view
        self.group = group  # grouped-query attention: q heads per k / v head
        self.mask = mask  # the mask memref, or None
        self.mask_dims = mask_dims  # per loop (b.., l, s): the mask dim reading it, or None (broadcast)


def _grouped_dims(amap, axis: int) -> tuple[list[int] | None, int]:
    """``(dims, group)`` of a k / v map whose result ``axis`` may be ``d
    floordiv group`` (a grouped-query attention's head, as lower_attention
    writes it): the map's dim positions with that result read as ``d``."""
    results = list(amap.results)
    group = 1
    if 0 <= axis < len(results):
        try:
            fd = ir.AffineFloorDivExpr(results[axis])
            group = ir.AffineConstantExpr(fd.rhs).value
            results[axis] = fd.lhs
        except (ValueError, TypeError):
            pass
    out = []
    for e in results:
        try:
            out.append(ir.AffineDimExpr(e).position)
        except (ValueError, TypeError):
            return None, 1
    return out, group


def _match_packed(qk, pv, tag) -> _Attention | None:
    """The chain of a ``kiln.packed_attention``: q, k and v one contiguous
    ``[.., L, 3, H, D]`` view read at parts 0, 1, 2, the output ``[.., L, H
    * D]`` written at column ``h * D + e`` (as ``lower_packed_attention``
    emits them)."""
    x, out = qk.operands[0], pv.operands[2]
    if not (qk.operands[1] == x and pv.operands[1] == x and contiguous_f32(x) and contiguous_f32(out)):
        return None
    xt = ir.MemRefType(x.type)
    nb = xt.rank - 4
    heads, d = xt.shape[-2], xt.shape[-1]
    if nb < 0 or xt.shape[-3] != 3 or heads != tag["heads"] or ir.ShapedType.is_dynamic_size(d) \
            or not 1 <= d <= MAX_HEAD_DIM or ir.MemRefType(out.type).rank != nb + 2:
        return None
    want = [affine_map(nb + 4, m) for m in packed_attention_maps(nb, d)]
    if indexing_maps(qk)[:2] != want[:2] or indexing_maps(pv)[1:] != want[2:]:
        return None
    return _Attention(qk, pv, x, x, x, out, tag["scale"], tag["causal"], heads)


def _mask_dims(op, nb: int) -> tuple[ir.Value, list[int | None]] | None:
    """The mask of a chain's scale-and-mask pass ``op`` (loops ``(b.., l,
    s)``) and, per loop, the mask dim that reads it (None where the mask
    broadcasts); None when the kernel cannot take it (an element type other
    than f32 / bool, more than two batch dims, another map)."""
    if op is None or len(op.operands) != 3 or nb > 2:
        return None
    mask = op.operands[1]
    try:
        mt = ir.MemRefType(mask.type)
    except (ValueError, TypeError):
        return None
    if str(mt.element_type) not in ("f32", "i1"):
        return None
    loops: list[int | None] = [None] * (nb + 2)
    for i, e in enumerate(indexing_maps(op)[1].results):
        try:
            loops[ir.AffineDimExpr(e).position] = i
        except (ValueError, TypeError):
            try:
                if ir.AffineConstantExpr(e).value != 0:
                    return None
            except (ValueError, TypeError):
                return None
    return mask, loops


def _match(pv, qk_by_id, masks) -> _Attention | None:
    tag = _tag(pv)
    qk = qk_by_id.get(tag["id"]) if tag is not None else None
    if qk is None or qk.block != pv.block or len(pv.operands) != 3 or len(qk.operands) != 3:
        return None
    if tag["heads"] is not None:
        return _match_packed(qk, pv, tag)
    q, k, v, out = qk.operands[0], qk.operands[1], pv.operands[1], pv.operands[2]
    try:
        types = [ir.MemRefType(x.type) for x in (q, k, v, out)]
    except (ValueError, TypeError):
        return None
    rank = types[0].rank
    if rank < 2 or any(t.rank != rank or str(t.element_type) != "f32" or not _is_contiguous(t) for t in types):
        return None
    d, dv = types[0].shape[-1], types[2].shape[-1]
    if any(ir.ShapedType.is_dynamic_size(x) or not 1 <= x <= MAX_HEAD_DIM for x in (d, dv)):
        return None
    nb = rank - 2
    batch = list(range(nb))
    want_qk = [batch + [nb, nb + 2], batch + [nb + 1, nb + 2]]
    want_pv = batch + [nb + 2, nb + 1]
    qk_maps, pv_maps = indexing_maps(qk), indexing_maps(pv)
    kmap, group = _grouped_dims(qk_maps[1], nb - 1)
    vmap, vgroup = _grouped_dims(pv_maps[1], nb - 1)
    if [_dims(qk_maps[0]), kmap] != want_qk or vmap != want_pv or _dims(pv_maps[2]) != batch + [nb, nb + 1] \
            or group != vgroup:
        return None  # a broadcast batch dim (or another layout): keep the chain
    mask, mask_dims = None, None
    if tag["masked"]:
        found = _mask_dims(masks.get(tag["id"]), nb)
        if found is None:
            return None
        mask, mask_dims = found
    return _Attention(qk, pv, q, k, v, out, tag["scale"], tag["causal"], group=group, mask=mask, mask_dims=mask_dims)


def _packed_text(name: str, a: _Attention) -> str:
    tx, to = ir.MemRefType(a.q.type), ir.MemRefType(a.out.type)
    nb = tx.rank - 4
    lines = [f"func.func private @{name}(%X: {tx}, %O: {to}) {{"]
    add = lines.append
    add("  %n0 = arith.constant 1 : index")
    for i in range(nb + 1):  # the batch dims flattened, then L
        add(f"  %i{i} = arith.constant {i} : index")
        add(f"  %d{i} = memref.dim %X, %i{i} : {tx}")
        if i < nb:
            add(f"  %n{i + 1} = arith.muli %n{i}, %d{i} : index")
    add(f"  %batch = arith.index_cast %n{nb} : index to i64")
    add(f"  %L = arith.index_cast %d{nb} : index to i64")
    add(f"  %H = arith.constant {tx.shape[-2]} : i64")
    add(f"  %D = arith.constant {tx.shape[-1]} : i64")
    for tag, t in (("X", tx), ("O", to)):
        add_pointer(add, tag, t)
    add(f"  %scale = arith.constant {a.scale!r} : f32")
    add(f"  %causal = arith.constant {int(a.causal)} : i32")
    add(pool_threads_line())  # asked at run time: the code serves any pool size
    add(f"  %rc = func.call @{NATIVE_PACKED}(%batch, %H, %L, %D, %pX, %pO, %scale, %causal, %nthr) : "
        "(i64, i64, i64, i64, i64, i64, f32, i32, i32) -> i32")
    add("  return")
    add("}")
    return "\n".join(lines)


def _helper_text(name: str, a: _Attention) -> str:
    if a.heads is not None:
        return _packed_text(name, a)
    tq, tk, tv, to = (ir.MemRefType(x.type) for x in (a.q, a.k, a.v, a.out))
    rank = tq.rank
    tm = ir.MemRefType(a.mask.type) if a.mask is not None else None
    margs = f", %M: {tm}" if tm is not None else ""
    lines = [f"func.func private @{name}(%Q: {tq}, %K: {tk}, %V: {tv}, %O: {to}{margs}) {{"]
    add = lines.append
    for i in range(rank):
        add(f"  %i{i} = arith.constant {i} : index")
    add("  %h0 = arith.constant 1 : index")
    for i in range(rank - 2):  # every batch dim flattened into heads
        add(f"  %b{i} = memref.dim %O, %i{i} : {to}")
        add(f"  %h{i + 1} = arith.muli %h{i}, %b{i} : index")
    add(f"  %L = memref.dim %Q, %i{rank - 2} : {tq}")
    add(f"  %S = memref.dim %K, %i{rank - 2} : {tk}")
    for v, src in (("heads", f"%h{rank - 2}"), ("L", "%L"), ("S", "%S")):
        add(f"  %{v}64 = arith.index_cast {src} : index to i64")
    add(f"  %D = arith.constant {tq.shape[-1]} : i64")
    add(f"  %Dv = arith.constant {tv.shape[-1]} : i64")
    for tag, t in (("Q", tq), ("K", tk), ("V", tv), ("O", to)):
        add_pointer(add, tag, t)
    add(f"  %scale = arith.constant {a.scale!r} : f32")
    add(f"  %causal = arith.constant {int(a.causal)} : i32")
    add(pool_threads_line())  # asked at run time: the code serves any pool size
    add(f"  %group = arith.constant {a.group} : i64")
    if tm is None:
        add(f"  %rc = func.call @{NATIVE_GQA}(%heads64, %group, %L64, %S64, %D, %Dv, %pQ, %pK, %pV, %pO, %scale, "
            "%causal, %nthr) : (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i32, i32) -> i32")
    else:
        mask_args = _mask_lines(add, a, tm, rank - 2)
        add(f"  %rc = func.call @{NATIVE_MASKED}(%heads64, %group, %L64, %S64, %D, %Dv, %pQ, %pK, %pV, %pO, "
            f"%scale, %causal, {mask_args}, %nthr) : ({_MASKED_TYPES}) -> i32")
    add("  return")
    add("}")
    return "\n".join(lines)


def _mask_lines(add, a: _Attention, tm, nb: int) -> str:
    """Emit the mask arguments of kiln_attention_masked and return them as
    call operands: ``%yM`` (the mask's first element's address), its kind
    (1 f32, 2 bool), ``%hin`` (the innermost batch dim's size) and the
    element strides of loops ``b0``, ``b1``, ``l``, ``s`` (read from the
    memref at run time; 0 where the mask broadcasts)."""
    strided_pointers(add, {"M": tm})
    size = 4 if str(tm.element_type) == "f32" else 1  # i1 is a byte in memory, as torch's bool
    add_address(add, "M", "%oM", size)
    add(f"  %mkind = arith.constant {1 if size == 4 else 2} : i32")
    add("  %zero64 = arith.constant 0 : i64")
    strides = []
    for i, dim_ in enumerate([None] * (2 - nb) + a.mask_dims):  # as if there were two batch loops
        if dim_ is None:
            strides.append("%zero64")
        else:
            add(f"  %mstride{i} = arith.index_cast %tM#{dim_} : index to i64")
            strides.append(f"%mstride{i}")
    add(f"  %hin = arith.index_cast %b{nb - 1} : index to i64" if nb else "  %hin = arith.constant 1 : i64")
    return ", ".join(["%yM", "%mkind", "%hin", *strides])


_MASKED_TYPES = "i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i32, i64, i32, i64, i64, i64, i64, i64, i32"
_MASKED_DECL = f"func.func private @{NATIVE_MASKED}({_MASKED_TYPES}) -> i32"
_DECL = (f"func.func private @{NATIVE_GQA}(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i32, i32) "
         "-> i32")
_PACKED_DECL = f"func.func private @{NATIVE_PACKED}(i64, i64, i64, i64, i64, i64, f32, i32, i32) -> i32"


def _entry(a: _Attention) -> str:
    """The native entry point ``a``'s helper calls."""
    return NATIVE_PACKED if a.heads is not None else NATIVE_MASKED if a.mask is not None else NATIVE_GQA


def rewrite_attention(module) -> int:
    """Replace every matched attention chain in ``module`` (bufferized) with a
    ``kiln_attention`` call; the count.  Nothing changes without the native runtime."""
    from ..._mlir import func

    module = module.operation
    if not native_enabled():
        return 0
    qk_by_id, pvs, masks = {}, [], {}

    def visit(op):
        if op.name == "linalg.generic":
            if MASK_ATTR in op.attributes:
                masks[ir.IntegerAttr(op.attributes[MASK_ATTR]).value] = op
            tag = _tag(op)
            if tag is not None:
                # The q k^T contraction comes first; the p v one is the second with that id.
                if tag["id"] in qk_by_id:
                    pvs.append(op)
                else:
                    qk_by_id[tag["id"]] = op
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    found = [a for a in (_match(pv, qk_by_id, masks) for pv in pvs) if a is not None]
    if not found:
        return 0
    names = function_names(module)
    entries = {_entry(a) for a in found}
    texts = [decl for entry, decl in ((NATIVE_GQA, _DECL), (NATIVE_PACKED, _PACKED_DECL), (NATIVE_MASKED, _MASKED_DECL))
             if entry not in names and entry in entries]
    calls = []
    for i, a in enumerate(found):
        name = unique_name(f"kiln_attention_{i}", names)
        texts.append(_helper_text(name, a))
        calls.append((name, a))
    insert_helpers(module, texts)
    functions = []
    for name, a in calls:
        fill = _zero_fill_before(a.pv, a.out)  # the call writes every element of out
        operands = [a.q, a.out] if a.heads is not None else [a.q, a.k, a.v, a.out]
        if a.mask is not None:
            operands.append(a.mask)
        with ir.InsertionPoint(a.pv), a.pv.location:
            func.CallOp([], ir.FlatSymbolRefAttr.get(name), operands)
        fn = a.pv.parent
        a.pv.erase()
        if fill is not None:
            fill.erase()
        if fn not in functions:
            functions.append(fn)
    for fn in functions:
        erase_dead_buffers(fn)
    return len(calls)
