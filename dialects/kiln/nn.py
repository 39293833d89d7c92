"""Contractions, convolution, pooling, reductions, normalization, attention."""

# No `from __future__ import annotations`: the ext DSL reads annotations as objects.

from typing import Optional

from ..._mlir import ext, ir
from ...errors import VerifyError
from ..dims import dim, shape_text
from .base import ATTR, KilnOp, TensorInfo, TensorType, is_float
from .shapes import broadcast_dims, norm_axes, norm_axis, require_dims_equal, require_rank, same_dtype, window_out


class MatmulOp(KilnOp, name="matmul", traits=[ext.Pure]):
    """Matrix product with numpy ``matmul`` semantics.

    1-D operands are promoted (a leading / trailing 1, removed afterwards);
    leading batch dims broadcast.

    ``%r = "kiln.matmul"(%a, %b) : (!kiln.tensor<["B", "L", 64], f32>, !kiln.tensor<[64, 256], f32>) -> !kiln.tensor<["B", "L", 256], f32>``
    """

    lhs: ext.Operand[TensorType]
    rhs: ext.Operand[TensorType]
    res: ext.Result[TensorType]

    def shape(self, operands, attrs):
        a, b = operands
        dtype = same_dtype(operands)
        if a.rank == 0 or b.rank == 0:
            raise VerifyError("operands must have rank >= 1")
        ad = list(a.dims) if a.rank > 1 else [dim(1), a.dims[0]]
        bd = list(b.dims) if b.rank > 1 else [b.dims[0], dim(1)]
        require_dims_equal(
            ad[-1], bd[-2],
            f"contracting dims differ between {shape_text(a.dims)} and {shape_text(b.dims)}",
        )
        batch = broadcast_dims([ad[:-2], bd[:-2]], "batch dims")
        out = list(batch)
        if a.rank > 1:
            out.append(ad[-2])
        if b.rank > 1:
            out.append(bd[-1])
        return [TensorInfo(tuple(out), dtype)]


def _pairs(attrs, name, count, default):
    v = attrs[name] if attrs[name] is not None else default
    if len(v) != count:
        raise VerifyError(f"attribute '{name}' must have {count} values, got {len(v)}")
    return v


class Conv2dOp(KilnOp, name="conv2d", traits=[ext.Pure]):
    """2-D convolution, NCHW input, OIHW weight, optional bias ``[O]``.

    ``pads`` is ``[top, left, bottom, right]``.

    ``%r = "kiln.conv2d"(%x, %w, %b) {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 3, "H", "W"], f32>, !kiln.tensor<[32, 3, 3, 3], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["N", 32, "H", "W"], f32>``
    """

    x: ext.Operand[TensorType]
    weight: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    bias: Optional[ext.Operand[TensorType]] = None

    ATTRS = {
        "strides": ATTR.ints(default=[1, 1]),
        "pads": ATTR.ints(default=[0, 0, 0, 0]),
        "dilations": ATTR.ints(default=[1, 1]),
        "groups": ATTR.int(default=1),
    }

    def shape(self, operands, attrs):
        x, w = operands[0], operands[1]
        dtype = same_dtype(operands)
        require_rank(x, 4, "input")
        require_rank(w, 4, "weight")
        strides = _pairs(attrs, "strides", 2, [1, 1])
        pads = _pairs(attrs, "pads", 4, [0, 0, 0, 0])
        dil = _pairs(attrs, "dilations", 2, [1, 1])
        groups = attrs["groups"]
        if groups < 1:
            raise VerifyError(f"attribute 'groups' must be positive, got {groups}")
        n, c, h, wd = x.dims
        o, ci, kh, kw = w.dims
        require_dims_equal(c, ci * groups, f"input channels must equal weight dim 1 times groups ({groups})")
        if o.is_static and o.value % groups:
            raise VerifyError(f"output channels {o} are not divisible by groups {groups}")
        if len(operands) == 3:
            b = operands[2]
            require_rank(b, 1, "bias")
            require_dims_equal(b.dims[0], o, "bias size must equal the output channels")
        oh = window_out(h, kh, strides[0], pads[0], pads[2], dil[0])
        ow = window_out(wd, kw, strides[1], pads[1], pads[3], dil[1])
        return [TensorInfo((n, o, oh, ow), dtype)]


class _Pool2dOp(KilnOp):
    """Shared shape rule of 2-D pooling over NCHW input."""

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]

    def shape(self, operands, attrs):
        (x,) = operands
        require_rank(x, 4, "input")
        kernel = _pairs(attrs, "kernel", 2, None)
        strides = _pairs(attrs, "strides", 2, kernel)
        pads = _pairs(attrs, "pads", 4, [0, 0, 0, 0])
        dil = _pairs(attrs, "dilations", 2, [1, 1]) if "dilations" in attrs else [1, 1]
        ceil = attrs["ceil_mode"]
        # Any padding is allowed (ONNX's rule; PyTorch's half-kernel limit is
        # stricter): the lowering pads explicitly.
        if any(p < 0 for p in pads):
            raise VerifyError(f"padding {pads} must be non-negative")
        n, c, h, w = x.dims
        oh = window_out(h, dim(kernel[0]), strides[0], pads[0], pads[2], dil[0], ceil)
        ow = window_out(w, dim(kernel[1]), strides[1], pads[1], pads[3], dil[1], ceil)
        return [TensorInfo((n, c, oh, ow), x.dtype)]


class MaxPool2dOp(_Pool2dOp, name="max_pool2d", traits=[ext.Pure]):
    """2-D max pooling (NCHW); ``strides`` default to ``kernel``.

    ``%r = "kiln.max_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (!kiln.tensor<["N", 8, 32, 32], f32>) -> !kiln.tensor<["N", 8, 16, 16], f32>``
    """

    ATTRS = {
        "kernel": ATTR.ints(),
        "strides": ATTR.ints(optional=True),
        "pads": ATTR.ints(default=[0, 0, 0, 0]),
        "dilations": ATTR.ints(default=[1, 1]),
        "ceil_mode": ATTR.bool(default=False),
    }


class AvgPool2dOp(_Pool2dOp, name="avg_pool2d", traits=[ext.Pure]):
    """2-D average pooling (NCHW); padded cells count when ``count_include_pad``
    (never the cells ``ceil_mode`` adds past the padding).

    ``%r = "kiln.avg_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (...) -> ...``
    """

    ATTRS = {
        "kernel": ATTR.ints(),
        "strides": ATTR.ints(optional=True),
        "pads": ATTR.ints(default=[0, 0, 0, 0]),
        "dilations": ATTR.ints(default=[1, 1]),
        "ceil_mode": ATTR.bool(default=False),
        "count_include_pad": ATTR.bool(default=False),
    }


class _ReduceOp(KilnOp):
    """Shared shape rule of reductions over ``axes`` (all axes when empty)."""

    FAMILY = "reductions"  # kiln.implementations' table (the module is nn.py)

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"axes": ATTR.ints(default=[]), "keepdims": ATTR.bool(default=False)}

    def shape(self, operands, attrs):
        (x,) = operands
        axes = norm_axes(attrs["axes"], x.rank) if attrs["axes"] else list(range(x.rank))
        if attrs["keepdims"]:
            dims = tuple(dim(1) if i in axes else d for i, d in enumerate(x.dims))
        else:
            dims = tuple(d for i, d in enumerate(x.dims) if i not in axes)
        return [TensorInfo(dims, x.dtype)]


class ReduceSumOp(_ReduceOp, name="reduce_sum", traits=[ext.Pure]):
    """Sum over ``axes``: ``%r = "kiln.reduce_sum"(%x) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 1], f32>``."""


class ReduceMeanOp(_ReduceOp, name="reduce_mean", traits=[ext.Pure]):
    """Mean over ``axes``: ``%r = "kiln.reduce_mean"(%x) {axes = array<i64: -1>} : (...) -> ...``."""


class ReduceMaxOp(_ReduceOp, name="reduce_max", traits=[ext.Pure]):
    """Maximum over ``axes``: ``%r = "kiln.reduce_max"(%x) {axes = array<i64: 0>} : (...) -> ...``."""


class CumsumOp(KilnOp, name="cumsum", traits=[ext.Pure]):
    """Inclusive running sum along ``axis`` (``torch.cumsum``): ``r[..., i, ...]`` is
    the sum of ``x[..., :i+1, ...]``.  Position ids (``cumsum(mask) * mask``) and
    ALiBi slopes use it, usually on integers.

    ``%r = "kiln.cumsum"(%x) {axis = 1 : i64} : (!kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64>``
    """

    FAMILY = "reductions"  # kiln.implementations' table (the module is nn.py)

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"axis": ATTR.int()}

    def shape(self, operands, attrs):
        (x,) = operands
        if x.rank == 0:
            raise VerifyError("requires an operand of rank >= 1")
        norm_axis(attrs["axis"], x.rank)
        # A sum of booleans is a count: the frontend casts them to an integer first.
        if str(x.dtype) == "i1":
            raise VerifyError("requires a numeric operand, got i1")
        return [x]


class SoftmaxOp(KilnOp, name="softmax", traits=[ext.Pure]):
    """Softmax along ``axis`` (default the last).

    ``%r = "kiln.softmax"(%x) {axis = -1 : i64} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>``
    """

    FAMILY = "reductions"  # kiln.implementations' table (the module is nn.py)

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"axis": ATTR.int(default=-1)}

    def shape(self, operands, attrs):
        (x,) = operands
        norm_axis(attrs["axis"], x.rank)
        if not is_float(x.dtype):
            raise VerifyError(f"requires a floating-point operand, got {x.dtype}")
        return [x]


class LayerNormOp(KilnOp, name="layer_norm", traits=[ext.Pure]):
    """Layer normalization over the dims from ``axis`` on, with optional
    ``weight`` and ``bias`` shaped like those dims.

    ``%r = "kiln.layer_norm"(%x, %g, %b) {axis = -1 : i64, epsilon = 1.0e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["B", "L", 256], f32>, !kiln.tensor<[256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", "L", 256], f32>``
    """

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    weight: Optional[ext.Operand[TensorType]] = None
    bias: Optional[ext.Operand[TensorType]] = None
    ATTRS = {"axis": ATTR.int(default=-1), "epsilon": ATTR.float(default=1e-5)}

    def shape(self, operands, attrs):
        x = operands[0]
        same_dtype(operands)
        axis = norm_axis(attrs["axis"], x.rank)
        norm = x.dims[axis:]
        for name, v in (("weight", self.weight), ("bias", self.bias)):
            if v is None:
                continue
            info = operands[list(self.operation.operands).index(v)]
            if len(info.dims) != len(norm) or any(a != b for a, b in zip(info.dims, norm)):
                raise VerifyError(f"{name} must have shape {shape_text(norm)}, got {shape_text(info.dims)}")
        return [x]


class BatchNormOp(KilnOp, name="batch_norm", traits=[ext.Pure]):
    """Inference-form batch normalization over axis 1 (``N, C, ...``):
    ``(x - mean) / sqrt(var + epsilon) * scale + bias``, each of shape ``[C]``.

    ``%r = "kiln.batch_norm"(%x, %scale, %bias, %mean, %var) {epsilon = 1.0e-05 : f64} : (...) -> ...``
    """

    x: ext.Operand[TensorType]
    scale: ext.Operand[TensorType]
    bias: ext.Operand[TensorType]
    mean: ext.Operand[TensorType]
    var: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"epsilon": ATTR.float(default=1e-5)}

    def shape(self, operands, attrs):
        x = operands[0]
        same_dtype(operands)
        if x.rank < 2:
            raise VerifyError(f"input must have rank >= 2, got {shape_text(x.dims)}")
        for name, info in zip(("scale", "bias", "mean", "var"), operands[1:]):
            if info.rank != 1 or info.dims[0] != x.dims[1]:
                raise VerifyError(f"{name} must have shape [{x.dims[1]}], got {shape_text(info.dims)}")
        return [x]


def _require_default_scale(attrs, head) -> None:
    """The default scale is ``1/sqrt(head dim)``: undefined for a head dim of 0."""
    if attrs["scale"] is None and head.is_static and head.value == 0:
        raise VerifyError("head dim is 0, so the default scale 1/sqrt(0) is undefined: give 'scale'")


def gqa_group(q_dims, k_dims, v_dims) -> int:
    """How many q heads share one k / v head: ``Hq / Hkv`` when k and v have
    ``Hkv > 1`` heads on dim -3 and q a static multiple ``Hq`` of it (all of
    rank >= 3; a dim of 1 broadcasts as any batch dim), else 1."""
    if min(len(q_dims), len(k_dims), len(v_dims)) < 3:
        return 1
    hq, hk, hv = q_dims[-3], k_dims[-3], v_dims[-3]
    if not (hq.is_static and hk.is_static and hv.is_static) or hk != hv:
        return 1
    hq, hk = hq.value, hk.value
    if hk <= 1 or hk == hq or hq % hk:
        return 1
    return hq // hk


class AttentionOp(KilnOp, name="attention", traits=[ext.Pure]):
    """Scaled dot-product attention ``softmax(q k^T * scale + mask) v``.

    ``q: [..., L, D]``, ``k: [..., S, D]``, ``v: [..., S, Dv]`` give
    ``[..., L, Dv]``; leading dims broadcast.  ``causal`` masks keys after the
    query position; ``mask`` (optional) is added to the scores (f32) or
    selects them (i1).  ``scale`` defaults to ``1/sqrt(D)``.

    **Grouped-query attention**: k and v may have fewer heads than q on dim
    -3 (static ``Hq`` and ``Hkv``, ``Hq % Hkv == 0``, both of rank >= 3): q
    head ``h`` reads k / v head ``h // (Hq / Hkv)`` (``torch``'s
    ``enable_gqa``, transformers' ``repeat_kv``), with no repeated copy.

    ``%r = "kiln.attention"(%q, %k, %v) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 4, "L", 64], f32>, ...) -> !kiln.tensor<["B", 4, "L", 64], f32>``
    """

    q: ext.Operand[TensorType]
    k: ext.Operand[TensorType]
    v: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    mask: Optional[ext.Operand[TensorType]] = None
    ATTRS = {"causal": ATTR.bool(default=False), "scale": ATTR.float(optional=True)}

    def shape(self, operands, attrs):
        q, k, v = operands[:3]
        same_dtype([q, k, v])
        for name, info in (("q", q), ("k", k), ("v", v)):
            if info.rank < 2:
                raise VerifyError(f"{name} must have rank >= 2, got {shape_text(info.dims)}")
        require_dims_equal(q.dims[-1], k.dims[-1], "q and k head dims differ")
        require_dims_equal(k.dims[-2], v.dims[-2], "k and v sequence dims differ")
        _require_default_scale(attrs, q.dims[-1])
        group = gqa_group(q.dims, k.dims, v.dims)
        if group > 1:  # k and v read as if repeated to q's heads
            k = TensorInfo(k.dims[:-3] + (q.dims[-3],) + k.dims[-2:], k.dtype)
            v = TensorInfo(v.dims[:-3] + (q.dims[-3],) + v.dims[-2:], v.dtype)
        batch = broadcast_dims([q.dims[:-2], k.dims[:-2], v.dims[:-2]], "batch dims of q, k, v")
        out = batch + (q.dims[-2], v.dims[-1])
        if len(operands) == 4:
            m = operands[3]
            broadcast_dims([m.dims, batch + (q.dims[-2], k.dims[-2])], "mask and scores")
        return [TensorInfo(out, q.dtype)]


class PackedAttentionOp(KilnOp, name="packed_attention", traits=[ext.Pure]):
    """Multi-head self-attention over a packed projection, heads in place.

    ``qkv: [..., L, 3 * heads * D]`` holds q, k and v side by side in its
    last dim, each ``heads`` heads of ``D``; the result ``[..., L, heads *
    D]`` holds head ``h`` of the output at ``h * D .. (h + 1) * D``:
    ``kiln.attention`` of that head's q, k and v (``causal`` and ``scale``
    as there, ``scale`` defaulting to ``1/sqrt(D)``).  ``kiln-pack-attention``
    forms it from the reshape / transpose / slice chain that splits a
    transformer's heads out of the projection and the transpose / reshape
    that merges them back, so the CPU backend reads and writes the heads
    where they lie instead of copying them twice.

    ``%r = "kiln.packed_attention"(%qkv) {causal = true, heads = 4 : i64} : (!kiln.tensor<["B", "L", 768], f32>) -> !kiln.tensor<["B", "L", 256], f32>``
    """

    qkv: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"heads": ATTR.int(), "causal": ATTR.bool(default=False), "scale": ATTR.float(optional=True)}

    def shape(self, operands, attrs):
        x = operands[0]
        heads = attrs["heads"]
        if x.rank < 2:
            raise VerifyError(f"qkv must have rank >= 2, got {shape_text(x.dims)}")
        if heads < 1:
            raise VerifyError(f"heads must be positive, got {heads}")
        last = x.dims[-1]
        if not last.is_static or last.value % (3 * heads):
            raise VerifyError(f"qkv's last dim must be a static multiple of 3 * heads = {3 * heads}, "
                              f"got {shape_text(x.dims)}")
        _require_default_scale(attrs, dim(last.value // (3 * heads)))
        return [TensorInfo(x.dims[:-1] + (dim(last.value // 3),), x.dtype)]


class ReduceProdOp(_ReduceOp, name="reduce_prod", traits=[ext.Pure]):
    """Product over ``axes`` (1 over an empty set): ``%r = "kiln.reduce_prod"(%x) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 1], f32>``."""


class ReduceMinOp(_ReduceOp, name="reduce_min", traits=[ext.Pure]):
    """Minimum over ``axes`` (+inf / the type's maximum / true over an empty set): ``%r = "kiln.reduce_min"(%x) {axes = array<i64: 0>} : (...) -> ...``."""


class _ArgReduceOp(KilnOp):
    """Shared shape rule of argmax / argmin: the ``i64`` index of the extreme
    along ``axis`` (the first one, or the last with ``select_last_index``)."""

    FAMILY = "reductions"  # kiln.implementations' table (the module is nn.py)

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"axis": ATTR.int(default=0), "keepdims": ATTR.bool(default=True),
             "select_last_index": ATTR.bool(default=False)}

    def shape(self, operands, attrs):
        (x,) = operands
        if x.rank == 0:
            raise VerifyError("requires an operand of rank >= 1")
        if str(x.dtype) == "i1":
            raise VerifyError("requires a numeric operand, got i1")
        axis = norm_axis(attrs["axis"], x.rank)
        if attrs["keepdims"]:
            dims = tuple(dim(1) if i == axis else d for i, d in enumerate(x.dims))
        else:
            dims = tuple(d for i, d in enumerate(x.dims) if i != axis)
        return [TensorInfo(dims, ir.IntegerType.get_signless(64))]


class ArgmaxOp(_ArgReduceOp, name="argmax", traits=[ext.Pure]):
    """Index of the maximum along ``axis`` (NaN counts as the maximum, as in numpy).

    ``%r = "kiln.argmax"(%x) {axis = 1 : i64, keepdims = false} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B"], i64>``
    """


class ArgminOp(_ArgReduceOp, name="argmin", traits=[ext.Pure]):
    """Index of the minimum along ``axis`` (NaN counts as the minimum, as in numpy).

    ``%r = "kiln.argmin"(%x) {axis = -1 : i64, select_last_index = true} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 1], i64>``
    """


class RmsNormOp(KilnOp, name="rms_norm", traits=[ext.Pure]):
    """Root-mean-square normalization over the dims from ``axis`` on (LLaMA's
    ``RMSNorm``): ``x * rsqrt(mean(x**2) + epsilon)``, times an optional
    ``weight`` shaped like those dims.  For ``f16`` / ``bf16`` input the
    statistics and the normalized value are computed in ``f32`` and rounded
    to the input's dtype before the weight multiplies it (the casts
    transformers' ``LlamaRMSNorm`` writes).

    ``%r = "kiln.rms_norm"(%x, %g) {axis = -1 : i64, epsilon = 1.0e-06 : f64, operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<["B", "L", 256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", "L", 256], f32>``
    """

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    weight: Optional[ext.Operand[TensorType]] = None
    ATTRS = {"axis": ATTR.int(default=-1), "epsilon": ATTR.float(default=1e-6)}

    def shape(self, operands, attrs):
        x = operands[0]
        same_dtype(operands)
        if not is_float(x.dtype):
            raise VerifyError(f"requires a floating-point operand, got {x.dtype}")
        axis = norm_axis(attrs["axis"], x.rank)
        norm = x.dims[axis:]
        if len(operands) == 2:
            w = operands[1]
            if len(w.dims) != len(norm) or any(a != b for a, b in zip(w.dims, norm)):
                raise VerifyError(f"weight must have shape {shape_text(norm)}, got {shape_text(w.dims)}")
        return [x]
