"""``kiln-decompose``: rewrite high-level ops into kiln primitives.

A backend without a kernel for ``gelu``, ``layer_norm``, ``softmax``,
``attention`` or ``batch_norm`` asks for their decomposition, so the op
still runs natively (as elementwise ops, reductions and matmuls) instead of
through ``kiln.fallback``.  One boolean option per op selects what is
decomposed (all by default)::

    kiln-decompose{softmax=false attention=true}

The decompositions compute the op's documented meaning:

- ``gelu``: ``0.5 * x * (1 + erf(x / sqrt(2)))``, or with ``approximate =
  "tanh"``: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``;
- ``softmax``: ``e / reduce_sum(e)`` with ``e = exp(x - reduce_max(x))``;
- ``layer_norm``: ``(x - mean) * rsqrt(mean((x - mean)**2) + eps)``, then
  ``* weight`` and ``+ bias``;
- ``rms_norm``: ``x * rsqrt(mean(x**2) + eps)`` (in f32 for f16 / bf16 x,
  cast back), then ``* weight``;
- ``matmul_w8``: ``matmul(x, transpose(dequantize(w, scale, 0)))``, the
  dequantization blocked along k by ``group_size``;
- ``matmul_integer``: the operands minus their zero points in ``i32``, cast
  to f32 and multiplied in chunks of at most ``EXACT_K`` of the contraction
  (each chunk's sums exact in f32), the chunks cast to ``i32`` and added
  (needs a static contraction dim: otherwise the op is kept);
- ``batch_norm``: ``(x - mean) * (scale * rsqrt(var + eps)) + bias``, the
  ``[C]`` parameters reshaped to broadcast along axis 1;
- ``attention``: ``softmax(q @ k^T * scale + mask) @ v``; a boolean mask
  selects with ``where(mask, s, -inf)``; grouped-query k and v (fewer
  heads) are repeated to q's heads first; ``causal`` uses a constant
  lower-triangular mask, so it needs static query and key lengths (and the
  default scale a static head dim): otherwise the op is kept and counted.

Statistics: ``<op> decomposed`` per op, ``attention kept`` when it can't be.
"""

from __future__ import annotations

import math

import numpy as np

from .._mlir import ir
from ..dialects.kiln import create_op, tensor_info, tensor_type
from ..dialects.kiln.nn import gqa_group
from ..dialects.kiln.quant import EXACT_ATTR, EXACT_K
from ..pipelines.registry import Option, Pass, register_pass
from ._graph import block_ops, functions, make_constant, scalar_constant
from .fold_constants import operand_map

__all__ = ["DECOMPOSITIONS", "Decompose", "exact_int_products"]


class _Emitter:
    """Builds kiln ops right before ``root``, at its location."""

    def __init__(self, root):
        self.root = root
        self.ip = ir.InsertionPoint(root)
        self.loc = root.location
        self.dtype = tensor_info(root.results[0].type).dtype

    def op(self, name: str, *operands, **attrs):
        return create_op(name, operands, attrs=attrs or None, loc=self.loc, ip=self.ip).result

    def scalar(self, value: float):
        return scalar_constant(value, self.dtype, loc=self.loc, ip=self.ip)

    def const(self, array, dtype):
        return make_constant(array, dtype, loc=self.loc, ip=self.ip)


def _gelu(root, e: _Emitter):
    x = root.operands[0]
    if root.opview.attr("approximate") == "tanh":
        cube = e.op("kiln.mul", e.op("kiln.mul", x, x), x)
        inner = e.op("kiln.add", x, e.op("kiln.mul", cube, e.scalar(0.044715)))
        t = e.op("kiln.tanh", e.op("kiln.mul", inner, e.scalar(math.sqrt(2 / math.pi))))
    else:
        t = e.op("kiln.erf", e.op("kiln.mul", x, e.scalar(1 / math.sqrt(2))))
    return e.op("kiln.mul", e.op("kiln.mul", x, e.op("kiln.add", t, e.scalar(1.0))), e.scalar(0.5))


def _softmax_of(x, axis: int, e: _Emitter):
    peak = e.op("kiln.reduce_max", x, axes=[axis], keepdims=True)
    ex = e.op("kiln.exp", e.op("kiln.sub", x, peak))
    return e.op("kiln.div", ex, e.op("kiln.reduce_sum", ex, axes=[axis], keepdims=True))


def _softmax(root, e: _Emitter):
    return _softmax_of(root.operands[0], root.opview.attr("axis"), e)


def _layer_norm(root, e: _Emitter):
    fields = operand_map(root)
    x = root.operands[0]
    rank = len(tensor_info(x.type).dims)
    axes = list(range(root.opview.attr("axis") % rank, rank))
    mean = e.op("kiln.reduce_mean", x, axes=axes, keepdims=True)
    d = e.op("kiln.sub", x, mean)
    var = e.op("kiln.reduce_mean", e.op("kiln.mul", d, d), axes=axes, keepdims=True)
    y = e.op("kiln.mul", d, e.op("kiln.rsqrt", e.op("kiln.add", var, e.scalar(root.opview.attr("epsilon")))))
    if "weight" in fields:
        y = e.op("kiln.mul", y, root.operands[fields["weight"]])
    if "bias" in fields:
        y = e.op("kiln.add", y, root.operands[fields["bias"]])
    return y


def _cast(x, dtype, e: _Emitter):
    """``x`` cast to ``dtype`` (a cast's result type names its target)."""
    info = tensor_info(x.type)
    return create_op("kiln.cast", [x], results=[tensor_type(info.dims, dtype)], loc=e.loc, ip=e.ip).result


def _rms_norm(root, e: _Emitter):
    fields = operand_map(root)
    x = root.operands[0]
    info = tensor_info(x.type)
    axes = list(range(root.opview.attr("axis") % info.rank, info.rank))
    low = str(info.dtype) in ("f16", "bf16")
    if low:  # statistics and the normalized value in f32, as the op is documented
        x = _cast(x, ir.F32Type.get(), e)
    ms = e.op("kiln.reduce_mean", e.op("kiln.mul", x, x), axes=axes, keepdims=True)
    eps = root.opview.attr("epsilon")
    eps = scalar_constant(eps, ir.F32Type.get(), loc=e.loc, ip=e.ip) if low else e.scalar(eps)
    y = e.op("kiln.mul", x, e.op("kiln.rsqrt", e.op("kiln.add", ms, eps)))
    if low:
        y = _cast(y, info.dtype, e)
    if "weight" in fields:
        y = e.op("kiln.mul", y, root.operands[fields["weight"]])
    return y


def _matmul_w8(root, e: _Emitter):
    x, w, scale = root.operands
    dims = tensor_info(scale.type).dims
    if not all(d.is_static for d in dims):
        return None  # a zero point of the scale's shape needs static dims
    zero = e.const(np.zeros([d.value for d in dims], np.int8), "i8")
    wide = e.op("kiln.dequantize", w, scale, zero, axis=1, block_size=root.opview.attr("group_size"))
    return e.op("kiln.matmul", x, e.op("kiln.transpose", wide, perm=[1, 0]))


def exact_int_products(build, cast, a, b):
    """``a @ b`` for i32 tensors ``a [..., K]`` and ``b [.., K, N]`` (or ``[K]``) holding centered 8-bit values,
    K static, exactly: f32 matmuls over chunks of at most :data:`EXACT_K` of K (each sum below 2**24, so exact
    in f32; marked :data:`EXACT_ATTR` so precision passes leave them), converted to i32 and summed there
    (wrapping as int32 accumulation does).  ``build(name, *operands, **attrs)`` creates ``kiln.<name>``,
    ``cast(value, dtype)`` a cast: the importer's and a rewrite's builders both serve."""
    k = tensor_info(a.type).dims[-1].value
    b_rank = tensor_info(b.type).rank
    a_axis, b_axis = tensor_info(a.type).rank - 1, b_rank - 2 if b_rank > 1 else 0
    af, bf = cast(a, "f32"), cast(b, "f32")
    out = None
    for start in range(0, k, EXACT_K):
        end = min(k, start + EXACT_K)
        ac, bc = af, bf
        if (start, end) != (0, k):
            ac = build("slice", af, starts=[start], ends=[end], steps=[1], axes=[a_axis])
            bc = build("slice", bf, starts=[start], ends=[end], steps=[1], axes=[b_axis])
        product = build("matmul", ac, bc)
        product.owner.attributes[EXACT_ATTR] = ir.UnitAttr.get()
        part = cast(product, "i32")
        out = part if out is None else build("add", out, part)
    return out


def _matmul_integer(root, e: _Emitter):
    a, b, za, zb = root.operands
    if not tensor_info(b.type).dims[0].is_static:
        return None

    def centered(v, zp):
        return e.op("kiln.sub", _cast(v, "i32", e), _cast(zp, "i32", e))

    return exact_int_products(lambda name, *operands, **attrs: e.op(f"kiln.{name}", *operands, **attrs),
                              lambda v, dtype: _cast(v, dtype, e), centered(a, za), centered(b, zb))


def _batch_norm(root, e: _Emitter):
    x, scale, bias, mean, var = root.operands
    info = tensor_info(x.type)
    channels = info.dims[1]
    shape = [channels] + [1] * (info.rank - 2)

    def per_channel(v):
        return v if info.rank == 2 else e.op("kiln.reshape", v, shape=shape)

    inv = e.op("kiln.mul", per_channel(scale), e.op("kiln.rsqrt", e.op("kiln.add", per_channel(var), e.scalar(root.opview.attr("epsilon")))))
    return e.op("kiln.add", e.op("kiln.mul", e.op("kiln.sub", x, per_channel(mean)), inv), per_channel(bias))


#: The largest causal mask (query length x keys, one byte each) that the
#: attention decomposition folds into a constant; past it the op is kept.
MAX_CAUSAL_MASK = 1 << 24


def _repeat_heads(x, group: int, e: _Emitter):
    """``x [.., H, S, D]`` with each head repeated ``group`` times in a row:
    ``[.., H * group, S, D]`` (transformers' ``repeat_kv``)."""
    dims = list(tensor_info(x.type).dims)
    pre, heads, tail = dims[:-3], dims[-3], dims[-2:]
    y = e.op("kiln.reshape", x, shape=pre + [heads, 1] + tail)
    y = e.op("kiln.expand", y, shape=pre + [heads, group] + tail)
    return e.op("kiln.reshape", y, shape=pre + [heads * group] + tail)


def _attention(root, e: _Emitter):
    fields = operand_map(root)
    q, k, v = (root.operands[fields[n]] for n in ("q", "k", "v"))
    qi, ki = tensor_info(q.type), tensor_info(k.type)
    causal = root.opview.attr("causal")
    scale = root.opview.attr("scale")
    length, keys, head = qi.dims[-2], ki.dims[-2], qi.dims[-1]
    if scale is None:
        if not head.is_static:
            return None
        scale = 1 / math.sqrt(head.value)
    if causal and not (length.is_static and keys.is_static):
        return None
    if causal and length.value * keys.value > MAX_CAUSAL_MASK:
        return None  # the mask would be a constant of that many elements: keep the op
    group = gqa_group(qi.dims, ki.dims, tensor_info(v.type).dims)
    if group > 1:  # grouped-query attention: each k / v head repeated in a row
        k, v = (_repeat_heads(x, group, e) for x in (k, v))
    perm = list(range(ki.rank - 2)) + [ki.rank - 1, ki.rank - 2]
    s = e.op("kiln.matmul", q, e.op("kiln.transpose", k, perm=perm))
    s = e.op("kiln.mul", s, e.scalar(scale))
    neg_inf = None
    if "mask" in fields:
        mask = root.operands[fields["mask"]]
        if str(tensor_info(mask.type).dtype) == "i1":
            neg_inf = e.scalar(-math.inf)
            s = e.op("kiln.where", mask, s, neg_inf)
        else:
            s = e.op("kiln.add", s, mask)
    if causal:
        tri = np.tril(np.ones((length.value, keys.value), dtype=np.bool_))
        neg_inf = neg_inf or e.scalar(-math.inf)
        s = e.op("kiln.where", e.const(tri, "i1"), s, neg_inf)
    return e.op("kiln.matmul", _softmax_of(s, -1, e), v)


#: ``{op name: (option name, decomposition(root, emitter) -> value | None)}``.
DECOMPOSITIONS = {
    "kiln.gelu": ("gelu", _gelu),
    "kiln.softmax": ("softmax", _softmax),
    "kiln.layer_norm": ("layer-norm", _layer_norm),
    "kiln.batch_norm": ("batch-norm", _batch_norm),
    "kiln.rms_norm": ("rms-norm", _rms_norm),
    "kiln.matmul_w8": ("matmul-w8", _matmul_w8),
    "kiln.matmul_integer": ("matmul-integer", _matmul_integer),
    "kiln.attention": ("attention", _attention),
}


@register_pass
class Decompose(Pass):
    """Rewrite gelu, softmax, layer_norm, batch_norm and attention into primitives."""

    name = "kiln-decompose"
    summary = "Decompose high-level ops (gelu, layer_norm, softmax, attention, batch_norm) into kiln primitives"
    options = tuple(
        Option(opt, bool, True, f"decompose {name}") for name, (opt, _) in DECOMPOSITIONS.items()
    )

    def run(self, module) -> None:
        wanted = {name: fn for name, (opt, fn) in DECOMPOSITIONS.items() if self.option(opt)}
        for fn in functions(module):
            for block in fn.regions[0].blocks:
                self._decompose_block(block, wanted)

    def _decompose_block(self, block, wanted) -> None:
        for op in block_ops(block):
            if op.name == "kiln.fused":
                self._decompose_block(op.regions[0].blocks[0], wanted)
                continue
            rewrite = wanted.get(op.name)
            if rewrite is None:
                continue
            short = op.name.split(".", 1)[1]
            new = rewrite(op, _Emitter(op))
            if new is None:
                self.bump(f"{short} kept")
                continue
            if new.type != op.results[0].type:
                # The primitives refine a '?' dim: keep the declared type's
                # users valid by giving the new value the declared type.
                new.set_type(op.results[0].type)
            op.results[0].replace_all_uses_with(new)
            op.erase()
            self.bump(f"{short} decomposed")
