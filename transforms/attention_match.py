"""``kiln-simplify``'s ``attention`` pattern: attention written out, as one
``kiln.attention``.

Users (and GPT-2's eager code) write attention as

    s = q @ k.transpose(-1, -2) * scale          # or / sqrt(d), or q * scale first
    s = s.masked_fill(mask, -inf)                # or + bias / + additive mask
    p = softmax(s, -1)                           # or exp / sum, after kiln's softmax pattern
    o = p @ v

and the torch importer turns each 4-D ``@`` into ``reshape(matmul(reshape(
expand(a)), reshape(expand(b))))`` over a flattened batch.  The pattern is
rooted at the product with ``v`` and walks up:

- the **product** is a ``kiln.matmul``, or a ``kiln.reshape`` of a 3-D one
  whose leading dim is the product of the reshape's leading dims (the
  importer's batched form); each operand is then read back in the
  reshape's batch dims (a ``reshape`` that ``reshape-reshape`` folds away,
  or that keeps a GQA ``expand`` of k and v as it is);
- ``p`` is a ``kiln.softmax`` over the last axis read only by the product
  (or by torch.onnx's NaN guard ``where(ne(p, p), 0, p)`` the product reads);
- ``s`` peels, from the outside in: positive constant **scales** (``mul`` /
  ``div`` by a splat), a boolean **mask** ``where(m, c, s)`` with ``c``
  ``-inf`` or a huge negative (``masked_fill``: ``m`` marks the dropped
  scores) or ``where(m, s, c)`` (``m`` marks the kept ones), and an
  **additive mask** ``s + m`` (a padding mask, ALiBi or another bias) that
  broadcasts to the scores without widening them and that no scale seen
  further out multiplies;
- the core is ``q @ kT`` (same product forms), ``k`` is ``kT`` with its last
  two axes swapped (a transpose that ``transpose-transpose`` folds into the
  head split), and scales on ``q`` or ``k`` join the others.

A boolean mask ``j > i`` built from two ``kiln.range`` over the query and key
positions (``torch.arange(L)`` compared with itself transposed, the causal
mask) becomes ``causal = true``; another boolean mask becomes the op's ``i1``
mask (inverting the comparison that built it, or selecting ``-inf`` / ``0``
into an additive mask where it is not an integer comparison).  Several
masks besides the causal one become one additive mask, their sum (``-inf``
/ ``0`` selected by the boolean ones).  A finite fill (``finfo.min``,
``-1e9``) of the only mask acts as ``-inf``; beside other masks it is kept
as that value in the additive mask (the source's ``finfo.min + finfo.min =
-inf``, and rows dropping every score, are then computed as written).  ``scale`` is set unless it is the
default ``1 / sqrt(D)``.

``attention-gqa``: a ``kiln.attention`` (matched here or imported from
SDPA) whose k and v are transformers' ``repeat_kv`` of fewer heads (the
importer's ``reshape`` / ``expand`` / ``reshape``, also what
``repeat_interleave`` on the heads gives) takes those heads as they are:
grouped-query attention, q head ``h`` reading k / v head ``h // group``,
with no repeated copy.
"""

from __future__ import annotations

import math

import numpy as np

from .._mlir import ir
from ..dialects.kiln import tensor_info
from ..dialects.kiln.shapes import matrix_transpose, product
from ._graph import make_constant
from ._match import Pattern, build, dims_of, producer, rank, single_use, splat
from .fold_constants import operand_map

__all__ = ["ATTENTION_PATTERNS", "attention"]

#: The comparison that keeps what ``name`` drops (and the converse).
_INVERSE = {"kiln.gt": "kiln.le", "kiln.le": "kiln.gt", "kiln.lt": "kiln.ge", "kiln.ge": "kiln.lt",
            "kiln.eq": "kiln.ne", "kiln.ne": "kiln.eq"}

#: A masked-out score at most this (f32/f64) is as good as -inf to a softmax
#: (``exp`` of it is 0 next to any finite score); ``masked_fill(m, -1e9)``.
_HUGE_NEGATIVE = -1e9


def _masked_value(value) -> bool:
    """True when ``value`` is a splat constant a softmax sees as ``-inf``:
    ``-inf``, at most -1e9, or at most half the dtype's lowest (f16's -65504)."""
    c = splat(value)
    if c is None:
        return False
    if c == -math.inf or c <= _HUGE_NEGATIVE:
        return True
    lowest = {"f16": -65504.0}.get(str(tensor_info(value.type).dtype))
    return lowest is not None and c <= lowest / 2


def _positive_scale(value) -> float | None:
    c = splat(value)
    return c if c is not None and math.isfinite(c) and c > 0 else None


def _peel_scale(value):
    """``(x, factor)`` when ``value`` is ``x * c``, ``c * x`` or ``x / c`` with a
    positive splat ``c`` that leaves x's type unchanged; else ``(value, 1.0)``."""
    for name in ("kiln.mul", "kiln.div"):
        op = producer(value, name)
        if op is None:
            continue
        orders = ((0, 1), (1, 0)) if name == "kiln.mul" else ((0, 1),)
        for xi, ci in orders:
            x, c = op.operands[xi], _positive_scale(op.operands[ci])
            if c is not None and x.type == value.type:
                return x, (c if name == "kiln.mul" else 1.0 / c)
    return value, 1.0


class _Builder:
    """Ops built before the root while a match is still tentative; erased if
    it fails later, so a near-miss leaves the IR as it was."""

    def __init__(self, root):
        self.root = root
        self.made: list = []

    def op(self, name, operands, attrs=None):
        v = build(self.root, name, operands, attrs)
        if v is not None:
            self.made.append(v.owner.operation)
        return v

    def constant(self, array, dtype):
        v = make_constant(np.asarray(array), dtype, loc=self.root.location, ip=ir.InsertionPoint(self.root))
        self.made.append(v.owner.operation)
        return v

    def discard(self):
        for op in reversed(self.made):
            if not any(list(r.uses) for r in op.results):
                op.erase()
        self.made.clear()


def _product(value):
    """``(a, b, batch)`` when ``value`` is a batched matrix product of ``a [...,
    M, K]`` and ``b [..., K, N]`` giving ``batch + [M, N]``: a ``kiln.matmul``
    (``a``, ``b`` its operands, possibly needing a broadcast) or the importer's
    ``reshape(matmul(a3, b3))`` with ``a3``'s leading dim the product of
    ``batch`` (``a``, ``b`` then 3-D, to read back in ``batch``); else None."""
    mm = producer(value, "kiln.matmul")
    if mm is not None:
        a, b = mm.operands
        if rank(a) < 2 or rank(b) < 2:
            return None
        return a, b, None
    r = producer(value, "kiln.reshape")
    mm = producer(r.operands[0], "kiln.matmul") if r is not None else None
    if mm is None or not single_use(r.operands[0]):
        return None
    a, b = mm.operands
    flat, out = dims_of(mm.results[0]), dims_of(value)
    if rank(a) != 3 or rank(b) != 3 or len(out) < 3 or out[-2:] != flat[-2:] or product(out[:-2]) != flat[0]:
        return None
    return a, b, out[:-2]


def _in_batch(builder, value, batch):
    """``value [..., M, K]`` as ``batch + [M, K]``: itself when ``batch`` is None
    (a direct product) or its leading dims already are ``batch``, else a
    reshape (same element count required)."""
    dims = dims_of(value)
    if batch is None or dims[:-2] == list(batch):
        return value
    want = list(batch) + dims[-2:]
    r = producer(value, "kiln.reshape")
    if r is not None and dims_of(r.operands[0]) == want:
        return r.operands[0]  # the importer's flattening of an operand already in batch
    if product(dims[:-2]) != product(batch):
        return None
    return builder.op("kiln.reshape", [value], {"shape": list(batch) + dims[-2:]})


def _swap_last(builder, value):
    """``value`` with its last two axes swapped (a transpose; simplify folds it
    into the transpose that usually produced ``value``)."""
    perm = matrix_transpose(rank(value))
    t = producer(value, "kiln.transpose")
    if t is not None and list(t.opview.attr("perm")) == perm:
        return t.operands[0]
    return builder.op("kiln.transpose", [value], {"perm": perm})


def _positions(value, axis_len):
    """True when ``value`` is a ``kiln.range`` 0, 1, ... of ``axis_len``
    reshaped to put it on one axis (all other dims 1); returns that axis
    counted from the end, else None."""
    r = producer(value, "kiln.reshape")
    src = r.operands[0] if r is not None else value
    rng = producer(src, "kiln.range")
    if rng is None:
        return None
    a = rng.opview.decoded_attrs()
    if a["start"] != 0 or a["step"] != 1:
        return None
    dims = dims_of(value)
    axes = [i for i, d in enumerate(dims) if not (d.is_static and d.value == 1)]
    length = dims_of(src)
    if len(length) != 1 or length[0] != axis_len:
        return None
    if len(axes) != 1:
        return None
    return axes[0] - len(dims)


_COMPARE = {"kiln.gt": np.greater, "kiln.ge": np.greater_equal, "kiln.lt": np.less, "kiln.le": np.less_equal,
            "kiln.eq": np.equal, "kiln.ne": np.not_equal}


def _offset_predicate(cond, q_len):
    """The i1 ``cond`` as a predicate of ``d = j - i`` (key minus query
    position) when it compares positions from ``kiln.range``: ``cmp(a, b)``
    or ``cmp(a - b, c)`` with ``a``, ``b`` the two positions and ``c`` an
    integer splat (``torch.triu(ones, 1)``'s ``j - i >= 1``); else None."""
    op = cond.owner
    if isinstance(op, ir.Block) or op.operation.name not in _COMPARE:
        return None
    op = op.operation
    cmp = _COMPARE[op.name]
    lhs, rhs = op.operands
    c = 0.0
    sub = producer(lhs, "kiln.sub")
    if sub is not None and _positions(rhs, q_len) is None:
        c = splat(rhs)
        if c is None or c != int(c):
            return None
        lhs, rhs = sub.operands
    a, b = _positions(lhs, q_len), _positions(rhs, q_len)
    if a is None or b is None or {a, b} != {-1, -2}:
        return None
    sign = 1 if a == -1 else -1  # a - b is d (j - i) or -d
    return lambda d: bool(cmp(sign * d, c))


def _is_causal(cond, drop: bool, q_len, k_len) -> bool:
    """True when the i1 ``cond`` is the causal mask of a square score: the
    keys after the query (``d = j - i >= 1``) when it marks the dropped
    scores, the others when it marks the kept ones; ``i`` the query position
    (axis -2) and ``j`` the key's (axis -1), both from ``kiln.range``.  A
    comparison of ``d`` with an integer is a step or a point, so agreeing on
    ``-3 .. 3`` decides it."""
    if q_len != k_len:
        return False
    pred = _offset_predicate(cond, q_len)
    return pred is not None and all(pred(d) == ((d >= 1) == drop) for d in range(-3, 4))


def _broadcasts_into(mask, scores_dims) -> bool:
    """True when ``mask`` broadcasts to ``scores_dims`` without widening them."""
    m = dims_of(mask)
    if len(m) > len(scores_dims):
        return False
    for a, b in zip(reversed(m), reversed(scores_dims)):
        if not (a == b or a.is_static and a.value == 1):
            return False
    return True


def _peel_scores(s, scores_dims, dtype):
    """Walk the softmax input ``s`` down to the product ``q @ kT``: returns
    ``(core, factor, masks)`` with ``masks`` a list of ``("add", m, None)`` /
    ``("keep", m, fill)`` / ``("drop", m, fill)`` (``fill``: the value the
    ``where`` selects for a dropped score); None when something else is in the way
    (a scale outside an additive mask, a mask that widens the scores)."""
    factor, masks = 1.0, []
    for _ in range(6):
        x, f = _peel_scale(s)
        if f != 1.0:
            factor, s = factor * f, x
            continue
        where = producer(s, "kiln.where")
        if where is not None and s.type == where.results[0].type:
            cond, a, b = where.operands
            if dims_of(b) == scores_dims and _masked_value(a):
                kind, s, fill = "drop", b, splat(a)
            elif dims_of(a) == scores_dims and _masked_value(b):
                kind, s, fill = "keep", a, splat(b)
            else:
                return None
            if not _broadcasts_into(cond, scores_dims):
                return None
            masks.append((kind, cond, fill))
            continue
        add = producer(s, "kiln.add")
        if add is not None:
            for si, mi in ((0, 1), (1, 0)):
                inner, m = add.operands[si], add.operands[mi]
                if dims_of(inner) == scores_dims and _reaches_product(inner):
                    break
            else:
                return None
            if factor != 1.0 or tensor_info(m.type).dtype != dtype or not _broadcasts_into(m, scores_dims):
                return None  # (qk + m) * c scales the mask too
            masks.append(("add", m, None))
            s = inner
            continue
        return s, factor, masks
    return None


def _reaches_product(value) -> bool:
    """True when ``value`` is a product, possibly scaled or masked on the way."""
    for _ in range(6):
        if _product(value) is not None:
            return True
        x, f = _peel_scale(value)
        if f != 1.0:
            value = x
            continue
        where = producer(value, "kiln.where")
        if where is None:
            return False
        value = where.operands[2] if _masked_value(where.operands[1]) else where.operands[1]
    return False


def _is_integer_compare(op) -> bool:
    """True for a comparison of integer / boolean tensors, whose inverse is
    its negation (a float comparison with a NaN is false both ways)."""
    return op.name in _INVERSE and all(
        str(tensor_info(v.type).dtype).startswith(("i", "u", "si")) for v in op.operands)


def _bool_mask(builder, kind, cond, dtype, fill, additive=False):
    """The ``i1`` mask (true: keep) for a boolean ``where`` filling ``-inf``,
    or with ``additive`` (or where the drop mask is not an integer comparison
    to invert, or the fill is finite) the ``0`` / ``fill`` mask selected by
    it.  A finite fill (``finfo.min``, ``-1e9``) stays that value: a row with
    every score dropped is uniform over them in the source, and the sum with
    another mask (``finfo.min + finfo.min = -inf``) is the source's."""
    op = cond.owner
    if not additive and fill == -math.inf:
        if kind == "keep":
            return cond
        if not isinstance(op, ir.Block) and _is_integer_compare(op.operation):
            return builder.op(_INVERSE[op.operation.name], list(op.operation.operands))
    neg = builder.constant(np.array(fill), dtype)
    zero = builder.constant(np.array(0.0), dtype)
    return builder.op("kiln.where", [cond, zero, neg] if kind == "keep" else [cond, neg, zero])


def _unguarded(value):
    """``x`` when ``value`` is ``where(ne(x, x), 0, x)`` -- the guard torch.onnx
    writes after SDPA's softmax, zeroing the NaN rows whose every score is
    masked (``kiln.attention`` gives 0 there too) -- and nothing else reads
    ``x`` or the comparison; else ``value``."""
    w = producer(value, "kiln.where")
    if w is None:
        return value
    cond, zero, x = w.operands
    ne = producer(cond, "kiln.ne")
    if ne is None or list(ne.operands) != [x, x] or splat(zero) != 0.0 or not single_use(cond):
        return value
    readers = [u.owner.operation for u in x.uses]
    if len(readers) != 3 or not all(r in (ne.operation, w.operation) for r in readers):
        return value
    return x


def attention(root):
    """``softmax(q @ kT * scale [+ mask]) @ v`` -> ``kiln.attention`` (see the module doc)."""
    out = _product(root.results[0])
    if out is None:
        return None
    p_val, v_val, batch = out
    if batch is not None:
        # The batched form: p is the softmax flattened to [N, L, S], rows in
        # the output's batch order (the same batch dims, row-major).
        r = producer(p_val, "kiln.reshape")
        if r is None or not single_use(p_val):
            return None
        p_src = r.operands[0]
        if dims_of(p_src) != list(batch) + dims_of(p_val)[-2:]:
            return None
    else:
        p_src = p_val
    if not single_use(p_src):
        return None
    p_src = _unguarded(p_src)  # the guard checked that only it reads the softmax
    sm = producer(p_src, "kiln.softmax")
    if sm is None or sm.opview.attr("axis") % rank(p_src) != rank(p_src) - 1:
        return None
    s = sm.operands[0]
    scores_dims = dims_of(s)
    dtype = tensor_info(s.type).dtype
    peeled = _peel_scores(s, scores_dims, dtype)
    if peeled is None:
        return None
    core, factor, masks = peeled
    qk = _product(core)
    if qk is None:
        return None
    q_val, kt_val, qk_batch = qk
    builder = _Builder(root)
    try:
        result = _assemble(builder, q_val, kt_val, v_val, qk_batch, batch, factor, masks, dtype)
    except Exception:
        builder.discard()
        raise
    if result is None or result.type != root.results[0].type:
        builder.discard()
        return None
    return result


def _assemble(builder, q_val, kt_val, v_val, qk_batch, batch, factor, masks, dtype):
    q = _in_batch(builder, q_val, qk_batch)
    kt = _in_batch(builder, kt_val, qk_batch)
    v = _in_batch(builder, v_val, batch)
    if q is None or kt is None or v is None:
        return None
    q, fq = _peel_scale(q)
    kt, fkt = _peel_scale(kt)
    k = _swap_last(builder, kt)
    if k is None:
        return None
    k, fk = _peel_scale(k)
    factor *= fq * fkt * fk
    q_len, k_len = dims_of(q)[-2], dims_of(k)[-2]
    if len(masks) == 1 and masks[0][0] != "add":
        # The only mask: a finite fill drops a score as -inf does (exp of it
        # is 0 next to any kept score); only a row that drops every score
        # differs (uniform in the source).  With several masks the fill
        # stays what it is (finfo.min + finfo.min is -inf in the source).
        masks = [(masks[0][0], masks[0][1], -math.inf)]
    causal, rest = False, []
    for kind, m, fill in masks:
        if kind != "add" and not causal and fill == -math.inf and _is_causal(m, kind == "drop", q_len, k_len):
            causal = True
        else:
            rest.append((kind, m, fill))
    mask = None
    if len(rest) == 1:
        kind, m, fill = rest[0]
        mask = m if kind == "add" else _bool_mask(builder, kind, m, dtype, fill)
    elif rest:
        # Several masks (padding and a bias): one additive mask, their sum.
        for kind, m, fill in rest:
            term = m if kind == "add" else _bool_mask(builder, kind, m, dtype, fill, additive=True)
            if term is None:
                return None
            mask = term if mask is None else builder.op("kiln.add", [mask, term])
            if mask is None:
                return None
    attrs = {"causal": causal}
    head = dims_of(q)[-1]
    default = 1.0 / math.sqrt(head.value) if head.is_static and head.value > 0 else None
    if default is None or abs(factor - default) > 1e-6 * default:
        attrs["scale"] = factor
    operands = [q, k, v] + ([mask] if mask is not None else [])
    return builder.op("kiln.attention", operands, attrs)


def _head_repeat(value):
    """``(expand input, pre, Hkv, group)`` when ``value [*pre, Hq, S, D]`` is
    ``reshape(expand(y [*pre, Hkv, 1, S, D] -> [*pre, Hkv, group, S, D]))``
    (through any reshapes): each of y's ``Hkv`` heads repeated ``group``
    times in a row, so head ``h`` is y's ``h // group`` (transformers'
    ``repeat_kv``, ``repeat_interleave(group, dim=-3)``); else None.  A
    tiling repeat (``k.repeat(1, group, 1, 1)``: head ``h`` is ``h % Hkv``)
    expands an axis before the heads and does not match."""
    dims = dims_of(value)
    if len(dims) < 3:
        return None
    src = value
    for _ in range(4):
        r = producer(src, "kiln.reshape")
        if r is None:
            break
        src = r.operands[0]
    ex = producer(src, "kiln.expand")
    if ex is None or src == value:
        return None
    y = ex.operands[0]
    out, inp = dims_of(src), dims_of(y)
    if len(out) != len(dims) + 1 or len(inp) != len(out):
        return None
    pre, hkv, group = out[:-4], out[-4], out[-3]
    if not (hkv.is_static and group.is_static and group.value > 1) or inp != pre + [hkv, 1] + out[-2:]:
        return None
    if dims != pre + [hkv * group] + out[-2:]:
        return None
    return y, pre, hkv, group.value


def attention_gqa(root):
    """``attention(q, repeat_kv(k), repeat_kv(v))`` -> ``attention(q, k, v)``
    with k and v's fewer heads (grouped-query attention: no repeated copy)."""
    fields = operand_map(root)
    k, v = root.operands[fields["k"]], root.operands[fields["v"]]
    rk, rv = _head_repeat(k), _head_repeat(v)
    if rk is None or rv is None or rk[1:] != rv[1:]:
        return None
    builder = _Builder(root)
    operands = []
    for y, pre, hkv, _ in (rk, rv):
        dims = dims_of(y)
        operands.append(builder.op("kiln.reshape", [y], {"shape": pre + [hkv] + dims[-2:]}))
    attrs = {"causal": root.opview.attr("causal")}
    if root.opview.attr("scale") is not None:
        attrs["scale"] = root.opview.attr("scale")
    q = root.operands[fields["q"]]
    mask = [root.operands[fields["mask"]]] if "mask" in fields else []
    result = None if any(o is None for o in operands) else builder.op("kiln.attention", [q, *operands, *mask], attrs)
    if result is None or result.type != root.results[0].type:
        builder.discard()
        return None
    return result


#: The table entries :mod:`kiln.transforms.simplify` adds to its own.
ATTENTION_PATTERNS = [
    Pattern("attention", "kiln.matmul", attention),
    Pattern("attention", "kiln.reshape", attention),
    Pattern("attention-gqa", "kiln.attention", attention_gqa),
]
