"""``kiln-simplify``: algebraic rewrites, as a table of patterns.

Each entry of :data:`PATTERNS` names a rewrite, the op it is rooted at, and a
guard-first function that returns the value replacing the root's result (a
new op built before the root, or an existing value), or ``None`` for *no
match*.  A replacement is used only when its type is exactly the root's
result type, so broadcasting rewrites (``x[4] * ones[B, 4]``) never change a
shape.  The driver sweeps each block until nothing matches, erasing the ops
a rewrite leaves dead.

=======================  =====================================================
pattern                  rewrite
=======================  =====================================================
``mul-one``              ``x * 1``, ``1 * x``  ->  ``x``
``div-one``              ``x / 1``  ->  ``x``
``add-zero``             ``x + 0``, ``0 + x``, ``x - 0``  ->  ``x``
``neg-neg``              ``-(-x)``  ->  ``x``
``transpose-transpose``  ``transpose(transpose(x, p), q)``  ->  one transpose (or ``x``)
``transpose-identity``   ``transpose(x, [0, 1, ...])``  ->  ``x``
``reshape-reshape``      ``reshape(reshape(x))``  ->  one reshape (or ``x``)
``reshape-noop``         a reshape to the operand's own type  ->  ``x``
``expand-noop``          an expand to the operand's own type  ->  ``x``
``cast-noop``            a cast to the operand's own dtype  ->  ``x``
``softmax``              ``exp(x - max(x)) / sum(exp(x - max(x)))`` (or without the
                         max) over one axis  ->  ``kiln.softmax``
``layer-norm``           ``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps)`` (or
                         ``* rsqrt(...)``) over trailing axes  ->  ``kiln.layer_norm``
``layer-norm-weight``    ``layer_norm(x) * g``  ->  ``layer_norm(x, weight=g)``
``layer-norm-bias``      ``layer_norm(x) + b``  ->  ``layer_norm(x, bias=b)``
``rms-norm``             ``x * rsqrt(mean(x**2) + eps)`` (or ``x / sqrt(...)``, ``x * x``)
                         over trailing axes  ->  ``kiln.rms_norm``
                         (:mod:`kiln.transforms.norm_match`)
``rms-norm-weight``      ``rms_norm(x) * w``  ->  ``rms_norm(x, weight=w)``
``rms-norm-cast``        ``cast(rms_norm(cast(x, f32)), bf16)``  ->  ``rms_norm(x)`` (x bf16 / f16)
``avg-pool-global``      ``avg_pool2d(x)`` whose window is the whole (static) image,
                         unpadded  ->  ``reduce_mean(x, axes=[2, 3], keepdims)``
``conv-batch-norm``      ``batch_norm(conv2d(x, w, b))`` with constant weights and
                         statistics  ->  ``conv2d(x, w * s, (b - mean) * s + beta)``,
                         ``s = gamma / sqrt(var + eps)`` per output channel
``gelu``                 ``0.5 * x * (1 + erf(x / sqrt 2))`` and the tanh form
                         ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)))``
                         ->  ``kiln.gelu`` (:mod:`kiln.transforms.activation_match`)
``silu``                 ``x * sigmoid(x)``  ->  ``kiln.silu``
``attention``            ``softmax(q @ kT * scale [+ mask]) @ v`` written out (scale as
                         mul / div, on the scores or on q; ``masked_fill`` / ``where``
                         or additive masks; the importer's batched matmuls), the
                         causal ``arange`` mask as ``causal``  ->  ``kiln.attention``
                         (:mod:`kiln.transforms.attention_match`)
``attention-gqa``        ``attention(q, repeat_kv(k), repeat_kv(v))`` (k, v heads each
                         repeated in a row)  ->  ``attention(q, k, v)``, fewer k / v heads
``packed-attention``     the heads of one projection ``p [.., L, 3 * H * D]`` split
                         (reshape to ``[.., L, 3, H, D]``, transpose to ``[3, .., H,
                         L, D]``, a slice and reshape per q, k, v), attended, and
                         merged back (transpose, reshape to ``[.., L, H * D]``)
                         ->  ``kiln.packed_attention(p, heads = H)``
=======================  =====================================================

The recognitions undo a frontend's decomposition, so the backends see one
op they have a kernel for; ``avg-pool-global`` lets a classifier's pool
(ONNX's ``AveragePool`` over the last 7 x 7 map of ResNet-50) fuse with the
convolution before it as ``GlobalAveragePool``'s mean does;
``packed-attention`` lets the CPU backend read the heads where the
projection wrote them (the Triton pipeline disables it: its kernels take
``kiln.attention``).  ``conv-batch-norm`` is the inference-time folding
every CNN runtime does: the normalization costs a pass over the activation,
the folded weights nothing.  Option ``disable`` (a list) turns patterns off.
Statistics: one counter per pattern applied.
"""

from __future__ import annotations

import numpy as np

from .._mlir import ir
from ..dialects.dims import dim
from ..dialects.kiln import tensor_info
from ..errors import KilnError, VerifyError
from ..pipelines.registry import Option, Pass, register_pass
from ._graph import block_ops, constant_array, functions, make_constant
from ._match import Pattern, axes_of, build, dims_of, producer, rank, same_value, single_use, splat
from .activation_match import ACTIVATION_PATTERNS
from .attention_match import ATTENTION_PATTERNS
from .fold_constants import operand_map
from .norm_match import NORM_PATTERNS

__all__ = ["PATTERNS", "Pattern", "Simplify"]

_producer, _splat, _build, _rank, _axes = producer, splat, build, rank, axes_of
_single_use, _dims_of = single_use, dims_of


# -- identities ---------------------------------------------------------------


def _identity_operand(root, unit: float, positions=(0, 1)):
    """The other operand when operand ``i`` (in ``positions``) is all ``unit``."""
    for i in positions:
        other = root.operands[1 - i]
        if _splat(root.operands[i]) == unit and other.type == root.results[0].type:
            return other
    return None


def mul_one(root):
    return _identity_operand(root, 1.0)


def div_one(root):
    return _identity_operand(root, 1.0, positions=(1,))


def add_zero(root):
    return _identity_operand(root, 0.0)


def sub_zero(root):
    return _identity_operand(root, 0.0, positions=(1,))


def neg_neg(root):
    inner = _producer(root.operands[0], "kiln.neg")
    return inner.operands[0] if inner is not None else None


def _same_type_operand(root):
    x = root.operands[0]
    return x if x.type == root.results[0].type else None


def transpose_identity(root):
    perm = root.opview.attr("perm")
    return root.operands[0] if perm == list(range(len(perm))) else None


def transpose_transpose(root):
    inner = _producer(root.operands[0], "kiln.transpose")
    if inner is None:
        return None
    p, q = inner.opview.attr("perm"), root.opview.attr("perm")
    composed = [p[i] for i in q]
    x = inner.operands[0]
    if composed == list(range(len(composed))):
        return x
    return _build(root, "kiln.transpose", [x], {"perm": composed})


def reshape_reshape(root):
    inner = _producer(root.operands[0], "kiln.reshape")
    if inner is None:
        return None
    x = inner.operands[0]
    if x.type == root.results[0].type:
        return x
    return _build(root, "kiln.reshape", [x], {"shape": root.opview.attr("shape")})


# -- recognitions ---------------------------------------------------------------


def softmax(root):
    """``e / reduce_sum(e, [a], keepdims)`` with ``e = exp(x - reduce_max(x, [a], keepdims))``."""
    e, s = root.operands
    total = _producer(s, "kiln.reduce_sum")
    exp = _producer(e, "kiln.exp")
    if total is None or exp is None or total.operands[0] != e:
        return None
    axes = _axes(total)
    if axes is None or len(axes) != 1:
        return None
    x = exp.operands[0]
    shifted = _producer(x, "kiln.sub")
    if shifted is not None:
        peak = _producer(shifted.operands[1], "kiln.reduce_max")
        if peak is not None and peak.operands[0] == shifted.operands[0] and _axes(peak) == axes:
            x = shifted.operands[0]
    if x.type != root.results[0].type:
        return None
    return _build(root, "kiln.softmax", [x], {"axis": axes[0] - _rank(x)})


def _variance_of(value, centered, axes) -> bool:
    """True when ``value`` is ``reduce_mean(centered**2, axes, keepdims)``."""
    mean = _producer(value, "kiln.reduce_mean")
    if mean is None or _axes(mean) != axes:
        return False
    sq = mean.operands[0]
    mul = _producer(sq, "kiln.mul")
    if mul is not None:
        return same_value(mul.operands[0], centered) and same_value(mul.operands[1], centered)
    power = _producer(sq, "kiln.pow")
    return power is not None and same_value(power.operands[0], centered) and _splat(power.operands[1]) == 2.0


def layer_norm(root):
    """``d / sqrt(var + eps)`` or ``d * rsqrt(var + eps)``, ``d = x - reduce_mean(x)``."""
    if root.name == "kiln.div":
        d, den = root.operands
        root_op = _producer(den, "kiln.sqrt")
    else:
        d, den = root.operands
        root_op = _producer(den, "kiln.rsqrt")
        if root_op is None:
            den, d = root.operands
            root_op = _producer(den, "kiln.rsqrt")
    if root_op is None:
        return None
    centered = _producer(d, "kiln.sub")
    if centered is None:
        return None
    x, mean_v = centered.operands
    mean = _producer(mean_v, "kiln.reduce_mean")
    if mean is None or mean.operands[0] != x:
        return None
    axes = _axes(mean)
    rank = _rank(x)
    if axes is None or axes != list(range(rank - len(axes), rank)):
        return None  # layer_norm normalizes trailing axes only
    plus = _producer(root_op.operands[0], "kiln.add")
    if plus is None:
        return None
    for var_v, eps_v in (plus.operands, reversed(list(plus.operands))):
        eps = _splat(eps_v)
        if eps is not None and _rank(eps_v) <= 1 and _variance_of(var_v, d, axes):
            break
    else:
        return None
    if x.type != root.results[0].type:
        return None
    return _build(root, "kiln.layer_norm", [x], {"axis": axes[0] - rank, "epsilon": eps})


def _fold_into_layer_norm(root, field: str):
    for i in (0, 1):
        ln = _producer(root.operands[i], "kiln.layer_norm")
        param = root.operands[1 - i]
        if ln is None or not _single_use(root.operands[i]):
            continue
        fields = operand_map(ln)
        if field in fields or (field == "weight" and "bias" in fields):
            continue  # already has it, or a bias that must come after the weight
        x = ln.operands[0]
        info, p = tensor_info(x.type), tensor_info(param.type)
        axis = ln.opview.attr("axis") % info.rank
        if p.dtype != info.dtype or tuple(p.dims) != tuple(info.dims[axis:]):
            continue
        named = {name: ln.operands[idx] for name, idx in fields.items() if name != "x"}
        named[field] = param
        attrs = {"axis": ln.opview.attr("axis"), "epsilon": ln.opview.attr("epsilon")}
        return _build(root, "kiln.layer_norm", [x], attrs, **named)
    return None


def layer_norm_weight(root):
    return _fold_into_layer_norm(root, "weight")


def layer_norm_bias(root):
    return _fold_into_layer_norm(root, "bias")


def conv_batch_norm(root):
    """``batch_norm(conv2d(x, w[, b]), gamma, beta, mean, var)`` -> one conv2d
    with the per-channel affine folded into its weight and bias; only when
    the conv feeds nothing else and every parameter is a constant."""
    conv = _producer(root.operands[0], "kiln.conv2d")
    if conv is None or not _single_use(root.operands[0]):
        return None
    gamma, beta, mean, var = (constant_array(v) for v in root.operands[1:5])
    fields = operand_map(conv)
    w = constant_array(conv.operands[fields["weight"]])
    b = constant_array(conv.operands[fields["bias"]]) if "bias" in fields else 0.0
    if any(a is None for a in (gamma, beta, mean, var, w, b)) or w.dtype.kind != "f":
        return None
    # The per-channel scale and the bias in float64; the weight scaled in its
    # own dtype (one more rounding, of the scale: <= 1 ulp; in float64 the
    # 25 M weights of ResNet-50 took 0.1 s of its 0.7 s warm compile).
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + root.opview.attr("epsilon"))
    weight = w * scale.astype(w.dtype).reshape((-1,) + (1,) * (w.ndim - 1))
    bias = (np.asarray(b, np.float64) - mean) * scale + beta
    dtype = tensor_info(conv.operands[fields["weight"]].type).dtype
    ip = ir.InsertionPoint(root)
    new_w = make_constant(weight, dtype, loc=root.location, ip=ip)
    new_b = make_constant(bias, dtype, loc=root.location, ip=ip)
    decoded = conv.opview.decoded_attrs()
    attrs = {name: decoded[name] for name in ("strides", "pads", "dilations", "groups")}
    folded = _build(root, "kiln.conv2d", [conv.operands[0], new_w, new_b], attrs)
    if folded is None:
        new_w.owner.erase()
        new_b.owner.erase()
    return folded


def avg_pool_global(root):
    attrs = root.opview.decoded_attrs()
    x = root.operands[0]
    dims = tensor_info(x.type).dims
    if len(dims) != 4 or any(attrs["pads"]) or not all(d.is_static for d in dims[2:]):
        return None
    if list(attrs["kernel"]) != [dims[2].value, dims[3].value]:
        return None
    return _build(root, "kiln.reduce_mean", [x], {"axes": [2, 3], "keepdims": True})


def _head_part(value, i: int):
    """The packed projection ``p`` when ``value`` is part ``i`` (0 q, 1 k,
    2 v) of ``transpose(reshape(p, [.., L, 3, H, D]))`` split per head:
    ``reshape(slice(t, axis 0, i .. i + 1))`` with ``t`` that transpose to
    ``[3, .., H, L, D]``; else None."""
    r = _producer(value, "kiln.reshape")
    sl = _producer(r.operands[0], "kiln.slice") if r is not None else None
    if sl is None:
        return None
    a = sl.opview.decoded_attrs()
    if list(a["axes"]) != [0] or list(a["starts"]) != [i] or list(a["ends"]) != [i + 1] or \
            list(a["steps"] or [1]) != [1] or _dims_of(r.results[0]) != _dims_of(sl.results[0])[1:]:
        return None
    t = _producer(sl.operands[0], "kiln.transpose")
    split = _producer(t.operands[0], "kiln.reshape") if t is not None else None
    if split is None:
        return None
    nb = len(_dims_of(split.results[0])) - 4  # [.., L, 3, H, D]
    if nb < 0 or list(t.opview.attr("perm")) != [nb + 1, *range(nb), nb + 2, nb, nb + 3]:
        return None
    p = split.operands[0]
    pd, rd = _dims_of(p), _dims_of(split.results[0])
    if pd[:-1] != rd[:nb + 1] or not all(d.is_static for d in pd[-1:] + rd[nb + 1:]) or rd[nb + 1].value != 3 \
            or pd[-1].value != 3 * rd[nb + 2].value * rd[nb + 3].value:
        return None
    return p


def packed_attention(root):
    t = _producer(root.operands[0], "kiln.transpose")
    att = _producer(t.operands[0], "kiln.attention") if t is not None else None
    if att is None or len(att.operands) != 3 or not (_single_use(att.results[0]) and _single_use(t.results[0])):
        return None
    ad = _dims_of(att.results[0])  # [.., H, L, D]
    nb = len(ad) - 3
    if nb < 0 or list(t.opview.attr("perm")) != [*range(nb), nb + 1, nb, nb + 2]:
        return None
    parts = [_head_part(v, i) for i, v in enumerate(att.operands)]
    if any(q is None for q in parts) or not parts[0] == parts[1] == parts[2]:
        return None
    p = parts[0]
    heads, d = ad[nb], ad[-1]
    out = _dims_of(root.results[0])
    if not (heads.is_static and d.is_static) or out != ad[:nb] + [ad[nb + 1], dim(heads.value * d.value)]:
        return None
    a = att.opview.decoded_attrs()
    attrs = {"heads": heads.value, "causal": a["causal"]}
    if a["scale"] is not None:
        attrs["scale"] = a["scale"]
    return _build(root, "kiln.packed_attention", [p], attrs)


#: The rewrite table, tried in order at each op.
PATTERNS: list[Pattern] = [
    Pattern("mul-one", "kiln.mul", mul_one),
    Pattern("div-one", "kiln.div", div_one),
    Pattern("add-zero", "kiln.add", add_zero),
    Pattern("add-zero", "kiln.sub", sub_zero),
    Pattern("neg-neg", "kiln.neg", neg_neg),
    Pattern("transpose-identity", "kiln.transpose", transpose_identity),
    Pattern("transpose-transpose", "kiln.transpose", transpose_transpose),
    Pattern("reshape-noop", "kiln.reshape", _same_type_operand),
    Pattern("reshape-reshape", "kiln.reshape", reshape_reshape),
    Pattern("expand-noop", "kiln.expand", _same_type_operand),
    Pattern("cast-noop", "kiln.cast", _same_type_operand),
    Pattern("softmax", "kiln.div", softmax),
    Pattern("layer-norm", "kiln.div", layer_norm),
    Pattern("layer-norm", "kiln.mul", layer_norm),
    Pattern("layer-norm-weight", "kiln.mul", layer_norm_weight),
    Pattern("layer-norm-bias", "kiln.add", layer_norm_bias),
    *NORM_PATTERNS,
    Pattern("avg-pool-global", "kiln.avg_pool2d", avg_pool_global),
    Pattern("conv-batch-norm", "kiln.batch_norm", conv_batch_norm),
    *ACTIVATION_PATTERNS,
    *ATTENTION_PATTERNS,
    Pattern("packed-attention", "kiln.reshape", packed_attention),
]

PATTERN_NAMES = tuple(dict.fromkeys(p.name for p in PATTERNS))


def _erase_dead(op) -> None:
    """Erase ``op`` if its results are unused, then its producers likewise.

    A worklist, each op on it once: a producer reached twice (the softmax
    that a NaN guard's ``ne`` and ``where`` both read) must not be visited
    again after its erasure through the other path (a use-after-free)."""
    work = [op]
    while work:
        op = work.pop()
        if op.name in ("kiln.symbol", "kiln.yield", "func.return") or not op.results:
            continue
        if any(list(r.uses) for r in op.results):
            continue
        producers = [v.owner.operation for v in op.operands if not isinstance(v.owner, ir.Block)]
        op.erase()
        for p in producers:
            if p.name.startswith("kiln.") and p not in work:
                work.append(p)


@register_pass
class Simplify(Pass):
    """Apply the algebraic rewrite table until nothing matches."""

    name = "kiln-simplify"
    summary = "Algebraic simplifications; softmax, layer / RMS norm, GELU, SiLU and attention recognition (a table of patterns)"
    options = (Option("disable", list, [], f"patterns to skip: {', '.join(PATTERN_NAMES)}"),)

    #: Sweeps over a block before giving up on reaching a fixpoint.
    MAX_SWEEPS = 16

    def run(self, module) -> None:
        disabled = set(self.option("disable"))
        unknown = disabled - set(PATTERN_NAMES)
        if unknown:
            raise KilnError(f"kiln-simplify: unknown pattern(s) {', '.join(sorted(unknown))} (patterns: {', '.join(PATTERN_NAMES)})")
        by_root: dict[str, list[Pattern]] = {}
        for p in PATTERNS:
            if p.name not in disabled:
                by_root.setdefault(p.root, []).append(p)
        for fn in functions(module):
            for block in fn.regions[0].blocks:
                self._simplify_block(block, by_root)

    def _simplify_block(self, block, by_root) -> None:
        for _ in range(self.MAX_SWEEPS):
            changed = False
            for op in block_ops(block):
                if op.name == "kiln.fused":
                    self._simplify_block(op.regions[0].blocks[0], by_root)
                    continue
                for pattern in by_root.get(op.name, ()):
                    if self._apply(pattern, op):
                        changed = True
                        break
            if not changed:
                return

    def _apply(self, pattern: Pattern, op) -> bool:
        try:
            new = pattern.fn(op)
        except (VerifyError, KilnError, ValueError, IndexError):
            new = None
        if new is None:
            return False
        result = op.results[0]
        if new.type != result.type:
            owner = new.owner
            if not isinstance(owner, ir.Block):
                _erase_dead(owner.operation)
            return False
        result.replace_all_uses_with(new)
        _erase_dead(op)
        self.bump(pattern.name)
        return True
