"""Patterns for ONNX convolution and pooling: Conv, ConvTranspose, MaxPool, AveragePool.

kiln has 2-D ops (``kiln.conv2d``, ``kiln.max_pool2d``, ``kiln.avg_pool2d``),
which the CPU backend maps to native kernels; the other ranks are exact
decompositions into them, so the 2-D paths stay as they were:

- 1-D: a unit height (``[N, C, L]`` as ``[N, C, 1, L]``).
- 3-D convolution: the sum over the depth taps of 2-D convolutions, each over
  the (strided) depth slice of the input the tap reads, with depth folded
  into the batch.
- 3-D pooling: a 2-D pool over ``(H, W)`` with depth folded into the
  channels, then a 2-D pool over ``(D, H*W)`` with a ``[kd, 1]`` window.
  Max is separable; so is the average over a box, whose divisor (valid
  cells, or cells inside the padding) is the product of per-axis counts.
- ConvTranspose: without dilation and with a kernel at least its stride,
  one stride-1 convolution computing every output phase (a 1x1 convolution
  when the kernel equals the stride), the phases interleaved by a reshape /
  transpose; otherwise zero insertion (reshape, pad, reshape) between the
  input's cells, then a stride-1 convolution with the weight's in / out
  channels swapped per group and its taps flipped.  Either result is
  cropped or padded to ONNX's output window.
- MaxPool's ``Indices``: the running maximum over the window taps (strided
  slices of the input padded with ``-inf``) with the flattened index of
  each tap's cell chosen alongside it.

Pads are ONNX's ``[begin_0, .., begin_r, end_0, .., end_r]`` throughout.
"""

from __future__ import annotations

import itertools

from ...dialects.dims import dim
from ...dialects.kiln import tensor_type
from ...dialects.kiln.data import SLICE_END
from .aten import dims_of, rank_of
from .driver import Decline
from .onnx import pattern

# ----------------------------------------------------------------------------
# Attributes
# ----------------------------------------------------------------------------


def _spatial(cx, x, kernel):
    """``(strides, dilations, pads)`` of a sliding-window op over ``x``
    (ONNX pads order), ``auto_pad`` applied."""
    r = rank_of(x) - 2
    strides = list(cx.attr("strides", None) or [1] * r)
    dilations = list(cx.attr("dilations", None) or [1] * r)
    if len(strides) != r or len(dilations) != r or len(kernel) != r:
        raise Decline(f"strides / dilations / kernel_shape do not have {r} values")
    auto = cx.attr("auto_pad", "NOTSET")
    if auto == "VALID":
        return strides, dilations, [0] * (2 * r)
    if auto in ("NOTSET", ""):
        pads = list(cx.attr("pads", None) or [0] * (2 * r))
        if len(pads) != 2 * r:
            raise Decline(f"pads must have {2 * r} values, got {pads}")
        return strides, dilations, pads
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise Decline(f"auto_pad {auto}")
    lo, hi = [], []
    for size, k, s, d in zip(dims_of(x)[2:], kernel, strides, dilations):
        extent = (k - 1) * d + 1
        if s == 1:
            total = extent - 1  # out = size for every size
        elif size.is_static:
            out = -(-size.value // s)
            total = max(0, (out - 1) * s + extent - size.value)
        else:
            raise Decline(f"auto_pad {auto} with stride {s} over the symbolic dim {size}")
        small, big = total // 2, total - total // 2
        lo.append(small if auto == "SAME_UPPER" else big)
        hi.append(big if auto == "SAME_UPPER" else small)
    return strides, dilations, lo + hi


def _kernel(cx, w):
    """A convolution's ``kernel_shape``, else the weight's spatial dims."""
    k = cx.attr("kernel_shape", None)
    if k is not None:
        return list(k)
    wd = dims_of(w)[2:]
    if not all(d.is_static for d in wd):
        raise Decline("a weight with symbolic spatial dims")
    return [d.value for d in wd]


def _pads2d(pads):
    """ONNX ``[b_h, b_w, e_h, e_w]`` is kiln's ``[top, left, bottom, right]`` already."""
    return list(pads)


# ----------------------------------------------------------------------------
# Reshaping helpers
# ----------------------------------------------------------------------------


def _reshape(cx, x, dims):
    return cx.build("reshape", x, shape=list(dims))


def _to_2d(cx, x):
    """``[N, C, L]`` -> ``[N, C, 1, L]``: kiln's 2-D ops then do 1-D work."""
    d = dims_of(x)
    return _reshape(cx, x, d[:2] + [dim(1)] + d[2:])


def _from_2d(cx, y):
    d = dims_of(y)
    return _reshape(cx, y, d[:2] + d[3:])


def _slice(cx, x, axis, start, end, step=1):
    """``x[.., start:end:step, ..]`` on ``axis`` (``end`` None: to the end; negative: from the end)."""
    if start == 0 and end is None and step == 1:
        return x
    return cx.build("slice", x, starts=[start], ends=[SLICE_END if end is None else end], axes=[axis], steps=[step])


def _window_slice(cx, x, axis, offset, extent, stride):
    """The cells one window tap reads along ``axis``: ``offset + o * stride``
    for every output position ``o`` of a window of ``extent`` cells; the
    count comes out as the window's output size, symbolic dims included."""
    tail = extent - 1 - offset
    return _slice(cx, x, axis, offset, -tail if tail else None, stride)


# ----------------------------------------------------------------------------
# Convolution
# ----------------------------------------------------------------------------


def conv(cx, x, w, b, strides, dilations, pads, groups):
    """N-D convolution (1-D to 3-D) of ``x`` with weight ``w`` and optional bias ``b``."""
    r = rank_of(x) - 2
    if r == 2:
        operands = [x, w] + ([b] if b is not None else [])
        return cx.build("conv2d", *operands, strides=strides, pads=_pads2d(pads), dilations=dilations, groups=groups)
    if r == 1:
        y = conv(cx, _to_2d(cx, x), _to_2d(cx, w), b, [1] + strides, [1] + dilations,
                 [0, pads[0], 0, pads[1]], groups)
        return _from_2d(cx, y)
    if r == 3:
        return _conv3d(cx, x, w, b, strides, dilations, pads, groups)
    raise Decline(f"{r}-D convolution")


#: kiln.concat takes at most this many operands: deeper kernels sum several convolutions.
_MAX_CONCAT = 16


def _conv3d(cx, x, w, b, strides, dilations, pads, groups):
    """3-D convolution as 2-D convolutions over depth slices: the input cells
    depth tap ``kd`` reads (``x[:, :, kd*dd + od*sd]``, depth folded into the
    batch) stacked along the channels, tap-major within each group, against
    the weight's taps laid out alike; one convolution for up to 16 taps (the
    sum of such convolutions for more)."""
    n = dims_of(x)[0]
    wd = dims_of(w)
    o, cg, kd = wd[0], wd[1], wd[2].value
    if not cg.is_static:
        raise Decline("Conv 3-D with a symbolic weight channel dim")
    if pads[0] or pads[3]:
        x = cx.build("pad", x, pads=[0, 0, pads[0], 0, 0, 0, 0, pads[3], 0, 0], value=0.0)
    xt = cx.build("transpose", x, perm=[0, 2, 1, 3, 4])  # [N, D, C, H, W]
    extent = (kd - 1) * dilations[0] + 1
    p2 = [pads[1], pads[2], pads[4], pads[5]]
    y = None
    # Chunks of equal size, at most _MAX_CONCAT taps (a divisor of kd): sums of
    # convolutions of unequal channel counts here (16 + 1, 9 + 8 taps) gave
    # wrong values through the optimized native CPU path (issue 36 report).
    size = max(c for c in range(1, min(kd, _MAX_CONCAT) + 1) if kd % c == 0)
    for first in range(0, kd, size):
        taps = range(first, min(kd, first + size))
        parts = []
        for t in taps:
            xs = _window_slice(cx, xt, 1, t * dilations[0], extent, strides[0])
            sd = dims_of(xs)
            od = sd[1]
            # [N*OD, 1, G, Cg, H, W]
            parts.append(_reshape(cx, xs, [sd[0] * sd[1], dim(1), dim(groups), cg] + sd[3:]))
        stack = parts[0] if len(parts) == 1 else cx.build("concat", *parts, axis=1)
        if groups > 1 and len(parts) > 1:
            stack = cx.build("transpose", stack, perm=[0, 2, 1, 3, 4, 5])  # [N*OD, G, T, Cg, H, W]
        sdims = dims_of(stack)
        xs = _reshape(cx, stack, [sdims[0], dim(groups * len(parts)) * cg] + sdims[4:])
        wt = _slice(cx, w, 2, first, first + len(parts)) if len(parts) < kd else w
        wt = cx.build("transpose", wt, perm=[0, 2, 1, 3, 4])  # [O, T, Cg, KH, KW]
        wt = _reshape(cx, wt, [o, dim(len(parts)) * cg] + wd[3:])
        yt = conv(cx, xs, wt, b if first == 0 else None, strides[1:], dilations[1:], p2, groups)
        y = yt if y is None else cx.build("add", y, yt)
    yd = dims_of(y)
    y = _reshape(cx, y, [n, od, o, yd[2], yd[3]])
    return cx.build("transpose", y, perm=[0, 2, 1, 3, 4])


@pattern("Conv")
def lower_conv(cx):
    x, w = cx.tensor(0), cx.tensor(1)
    if rank_of(x) not in (3, 4, 5):
        raise Decline(f"{rank_of(x) - 2}-D Conv")
    strides, dilations, pads = _spatial(cx, x, _kernel(cx, w))
    b = cx.tensor(2) if cx.has(2) else None
    return conv(cx, x, w, b, strides, dilations, pads, cx.attr("group", 1))


# ----------------------------------------------------------------------------
# ConvTranspose
# ----------------------------------------------------------------------------


def _transpose_pads(cx, x, kernel, strides, dilations):
    """``(begin, length)`` per spatial axis: the result is the full transposed
    convolution (length ``s*(in-1) + extent``, zeros past it) read from
    ``begin`` (negative: zeros first) for ``length`` cells, as ONNX's
    reference computes it from ``pads``, ``output_padding``, ``output_shape``
    and ``auto_pad``."""
    r = len(kernel)
    ins = dims_of(x)[2:]
    out_pad = list(cx.attr("output_padding", None) or [0] * r)[:r]
    out_shape = cx.attr("output_shape", None)
    if out_shape is not None:
        out_shape = list(out_shape)[-r:]
    auto = cx.attr("auto_pad", "NOTSET")
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    full = [s * (i - 1) + op + e for s, i, op, e in zip(strides, ins, out_pad, extents)]
    if auto in ("SAME_UPPER", "SAME_LOWER") and cx.attr("pads", None) is None:
        target = out_shape if out_shape is not None else [i * s for i, s in zip(ins, strides)]
        begins = []
        for f, t in zip(full, target):
            total = dim(f) - t
            if not total.is_static:
                raise Decline(f"ConvTranspose auto_pad {auto}: total padding {total} is symbolic")
            total = total.value
            begins.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
        return begins, [dim(t) for t in target]
    if auto == "VALID":
        pads = [0] * (2 * r)
    else:
        pads = list(cx.attr("pads", None) or [0] * (2 * r))
    if len(pads) != 2 * r:
        raise Decline(f"ConvTranspose pads must have {2 * r} values, got {pads}")
    if out_shape is not None:
        return pads[:r], [dim(t) for t in out_shape]
    return pads[:r], [dim(f) - pads[a] - pads[a + r] for a, f in enumerate(full)]


def _insert_zeros(cx, x, strides):
    """``[N, C, S..]`` -> ``[N, C, S*s..]`` with ``s - 1`` zeros after each cell."""
    if all(s == 1 for s in strides):
        return x
    d = dims_of(x)
    split = d[:2]
    for size in d[2:]:
        split += [size, dim(1)]
    y = _reshape(cx, x, split)
    r = len(strides)
    rank = 2 + 2 * r
    pads = [0] * (2 * rank)
    for a, s in enumerate(strides):
        pads[rank + 3 + 2 * a] = s - 1
    y = cx.build("pad", y, pads=pads, value=0.0)
    return _reshape(cx, y, d[:2] + [size * s for size, s in zip(d[2:], strides)])


def _transposed_weight(cx, w, groups):
    """``[Ci, Co/g, K..]`` -> ``[Co, Ci/g, K..]`` per group, taps reversed."""
    wd = dims_of(w)
    r = len(wd) - 2
    ci, cog = wd[0], wd[1]
    if not ci.is_static or ci.value % groups:
        raise Decline(f"ConvTranspose weight dim 0 ({ci}) is not a static multiple of group {groups}")
    if groups == 1:
        wt = cx.build("transpose", w, perm=[1, 0] + list(range(2, r + 2)))
    else:
        cig = ci.value // groups
        w5 = _reshape(cx, w, [dim(groups), dim(cig), cog] + wd[2:])
        w5 = cx.build("transpose", w5, perm=[0, 2, 1] + list(range(3, r + 3)))
        wt = _reshape(cx, w5, [cog * groups, dim(cig)] + wd[2:])
    axes = list(range(2, r + 2))
    return cx.build("slice", wt, starts=[-1] * r, ends=[-SLICE_END] * r, axes=axes, steps=[-1] * r)


def _crop(cx, y, axis, begin, length):
    """``y`` along ``axis`` read from ``begin`` for ``length`` cells, zeros outside it."""
    size = dims_of(y)[axis]
    tail = length + begin - size  # cells past y's end (negative: cut)
    if not tail.is_static:
        raise Decline(f"ConvTranspose output length {length} of a symbolic input on axis {axis}")
    tail = tail.value
    if begin > 0 or tail < 0:
        y = _slice(cx, y, axis, max(begin, 0), tail if tail < 0 else None)
    if begin < 0 or tail > 0:
        pads = [0] * (2 * rank_of(y))
        pads[axis], pads[rank_of(y) + axis] = max(-begin, 0), max(tail, 0)
        y = cx.build("pad", y, pads=pads, value=0.0)
    return y


def _conv_transpose_tiles(cx, x, w, begins, lengths, groups):
    """A transposed convolution whose kernel equals its stride (no dilation:
    U-Net's and FPN's 2x2 stride-2 upsampling): every input cell writes its
    own ``K..`` tile of the output, so the result is one 1x1 convolution to
    ``Co * prod(K)`` channels and a reshape / transpose laying the tiles out
    (no multiplies by inserted zeros), then cropped or padded to the output
    window, and the bias added."""
    xd, wd = dims_of(x), dims_of(w)
    r = len(xd) - 2
    ci, cog, ks = wd[0], wd[1], [d.value for d in wd[2:]]
    if not ci.is_static or ci.value % groups:
        raise Decline(f"ConvTranspose weight dim 0 ({ci}) is not a static multiple of group {groups}")
    cig = ci.value // groups
    tile = 1
    for k in ks:
        tile *= k
    # [Ci, Co/g, K..] -> [g, Co/g, K.., Ci/g] -> [Co * prod(K), Ci/g, 1..]
    w1 = _reshape(cx, w, [dim(groups), dim(cig), cog] + wd[2:])
    w1 = cx.build("transpose", w1, perm=[0, 2] + list(range(3, r + 3)) + [1])
    w1 = _reshape(cx, w1, [cog * (groups * tile), dim(cig)] + [dim(1)] * r)
    y = conv(cx, x, w1, None, [1] * r, [1] * r, [0] * (2 * r), groups)
    co = cog * groups
    # [N, Co, K.., S..] -> [N, Co, S1, K1, S2, K2, ..] -> [N, Co, S1*K1, ..]
    y = _reshape(cx, y, xd[:1] + [co] + [dim(k) for k in ks] + xd[2:])
    perm = [0, 1]
    for a in range(r):
        perm += [2 + r + a, 2 + a]
    y = cx.build("transpose", y, perm=perm)
    y = _reshape(cx, y, xd[:1] + [co] + [size * k for size, k in zip(xd[2:], ks)])
    for a in range(r):
        y = _crop(cx, y, 2 + a, begins[a], lengths[a])
    if cx.has(2):
        y = cx.build("add", y, _reshape(cx, cx.tensor(2), [dim(1), co] + [dim(1)] * r))
    return y


def _conv_transpose_phases(cx, x, w, kernel, strides, begins, lengths, groups):
    """A strided transposed convolution as one stride-1 convolution of ``x``
    computing every output phase (the cells ``q = s*m + phi``) at once: phase
    ``phi`` is the correlation of ``x`` with the taps ``w[phi::s]`` reversed
    (zero-filled in front to ``J = ceil(K/s)`` taps), the phases' weights
    stacked along the output channels (per group); the phases are then
    interleaved (reshape / transpose), cropped or padded to the output
    window, and the bias added.  No products with inserted zeros."""
    xd, wd = dims_of(x), dims_of(w)
    r = len(xd) - 2
    ci, cog = wd[0], wd[1]
    if not ci.is_static or ci.value % groups:
        raise Decline(f"ConvTranspose weight dim 0 ({ci}) is not a static multiple of group {groups}")
    cig = ci.value // groups
    taps = [-(-k // st) for k, st in zip(kernel, strides)]
    parts = []
    for phase in itertools.product(*[range(st) for st in strides]):
        sub = cx.build("slice", w, starts=list(phase), ends=[SLICE_END] * r, axes=list(range(2, r + 2)),
                       steps=list(strides))
        sub = cx.build("slice", sub, starts=[-1] * r, ends=[-SLICE_END] * r, axes=list(range(2, r + 2)),
                       steps=[-1] * r)
        front = [t - d.value for t, d in zip(taps, dims_of(sub)[2:])]
        if any(front):
            sub = cx.build("pad", sub, pads=[0, 0] + front + [0] * (r + 2), value=0.0)
        parts.append(_reshape(cx, sub, [dim(groups), dim(cig), dim(1), cog] + [dim(t) for t in taps]))
    stack = parts[0] if len(parts) == 1 else cx.build("concat", *parts, axis=2)
    stack = cx.build("transpose", stack, perm=[0, 2, 3, 1] + list(range(4, r + 4)))  # [g, P, Cog, Cig, J..]
    w1 = _reshape(cx, stack, [cog * (groups * len(parts)), dim(cig)] + [dim(t) for t in taps])
    y = conv(cx, x, w1, None, [1] * r, [1] * r, [t - 1 for t in taps] * 2, groups)
    m = dims_of(y)[2:]
    co = cog * groups
    # [N, g, s.., Cog, M..] -> [N, g, Cog, M1, s1, M2, s2, ..] -> [N, Co, M1*s1, ..]
    y = _reshape(cx, y, xd[:1] + [dim(groups)] + [dim(st) for st in strides] + [cog] + m)
    perm = [0, 1, 2 + r]
    for a in range(r):
        perm += [3 + r + a, 2 + a]
    y = cx.build("transpose", y, perm=perm)
    y = _reshape(cx, y, xd[:1] + [co] + [size * st for size, st in zip(m, strides)])
    for a in range(r):
        y = _crop(cx, y, 2 + a, begins[a], lengths[a])
    if cx.has(2):
        y = cx.build("add", y, _reshape(cx, cx.tensor(2), [dim(1), co] + [dim(1)] * r))
    return y


@pattern("ConvTranspose")
def lower_conv_transpose(cx):
    x, w = cx.tensor(0), cx.tensor(1)
    r = rank_of(x) - 2
    if r not in (1, 2, 3):
        raise Decline(f"{r}-D ConvTranspose")
    kernel = [d.value for d in dims_of(w)[2:]] if all(d.is_static for d in dims_of(w)[2:]) else None
    if kernel is None:
        raise Decline("ConvTranspose with a weight of symbolic spatial dims")
    strides = list(cx.attr("strides", None) or [1] * r)
    dilations = list(cx.attr("dilations", None) or [1] * r)
    groups = cx.attr("group", 1)
    begins, lengths = _transpose_pads(cx, x, kernel, strides, dilations)
    if all(d == 1 for d in dilations) and any(s > 1 for s in strides):
        if kernel == strides:
            return _conv_transpose_tiles(cx, x, w, begins, lengths, groups)
        phases = 1
        for st in strides:
            phases *= st
        if all(k >= st for k, st in zip(kernel, strides)) and phases <= _MAX_CONCAT:
            return _conv_transpose_phases(cx, x, w, kernel, strides, begins, lengths, groups)
    z = _insert_zeros(cx, x, strides)
    # The full result is the stride-1 convolution of the zero-inserted input
    # padded by extent - 1 on each side; cell p of the output reads full cell
    # p + begin.  z holds s - 1 trailing zeros beyond the last input cell.
    lo, hi = [], []
    for a in range(r):
        extent = (kernel[a] - 1) * dilations[a] + 1
        zlen = dims_of(z)[2 + a]
        low = extent - 1 - begins[a]
        high = lengths[a] + extent - 1 - zlen - low
        if not high.is_static:
            raise Decline(f"ConvTranspose output length {lengths[a]} of a symbolic input on axis {a + 2}")
        lo.append(low)
        hi.append(high.value)
    # Negative pads crop.
    for a in range(r):
        if lo[a] < 0 or hi[a] < 0:
            start = max(0, -lo[a])
            end = hi[a] if hi[a] < 0 else None
            z = _slice(cx, z, 2 + a, start, end)
            lo[a], hi[a] = max(lo[a], 0), max(hi[a], 0)
    wt = _transposed_weight(cx, w, groups)
    b = cx.tensor(2) if cx.has(2) else None
    return conv(cx, z, wt, b, [1] * r, dilations, lo + hi, groups)


# ----------------------------------------------------------------------------
# Pooling
# ----------------------------------------------------------------------------


def pool(cx, kind, x, kernel, strides, dilations, pads, ceil, count_include_pad=False):
    """N-D pooling (1-D to 3-D); ``kind`` is ``max_pool2d`` or ``avg_pool2d``."""
    r = rank_of(x) - 2
    if r == 2:
        attrs = dict(kernel=kernel, strides=strides, pads=_pads2d(pads), dilations=dilations, ceil_mode=ceil)
        if kind == "avg_pool2d":
            attrs["count_include_pad"] = count_include_pad
        return cx.build(kind, x, **attrs)
    if r == 1:
        y = pool(cx, kind, _to_2d(cx, x), [1] + kernel, [1] + strides, [1] + dilations, [0, pads[0], 0, pads[1]],
                 ceil, count_include_pad)
        return _from_2d(cx, y)
    if r == 3:
        n, c, d, h, w = dims_of(x)
        y = pool(cx, kind, _reshape(cx, x, [n, c * d, h, w]), kernel[1:], strides[1:], dilations[1:],
                 [pads[1], pads[2], pads[4], pads[5]], ceil, count_include_pad)
        oh, ow = dims_of(y)[2:]
        y = pool(cx, kind, _reshape(cx, y, [n, c, d, oh * ow]), [kernel[0], 1], [strides[0], 1],
                 [dilations[0], 1], [pads[0], 0, pads[3], 0], ceil, count_include_pad)
        return _reshape(cx, y, [n, c, dims_of(y)[2], oh, ow])
    raise Decline(f"{r}-D pooling")


def _pool_pattern(kind):
    def lower(cx):
        x = cx.tensor(0)
        if rank_of(x) not in (3, 4, 5):
            raise Decline(f"{rank_of(x) - 2}-D pooling")
        kernel = cx.attr("kernel_shape", None)
        if kernel is None:
            raise Decline("no kernel_shape")
        kernel = list(kernel)
        strides, dilations, pads = _spatial(cx, x, kernel)
        ceil = bool(cx.attr("ceil_mode", 0))
        if kind == "max_pool2d" and len(cx.op.results) > 1 and any(True for _ in cx.op.results[1].uses):
            if cx.attr("storage_order", 0) not in (0, 1):
                raise Decline(f"MaxPool storage_order {cx.attr('storage_order')}")
            return max_pool_with_indices(cx, x, kernel, strides, dilations, pads, ceil, cx.attr("storage_order", 0))
        y = pool(cx, kind, x, kernel, strides, dilations, pads, ceil, bool(cx.attr("count_include_pad", 0)))
        return (y, None) if len(cx.op.results) > 1 else y

    return lower


lower_max_pool = pattern("MaxPool")(_pool_pattern("max_pool2d"))
lower_average_pool = pattern("AveragePool")(_pool_pattern("avg_pool2d"))


def max_pool_with_indices(cx, x, kernel, strides, dilations, pads, ceil, storage_order):
    """MaxPool's ``(Y, Indices)``: Indices holds the flattened index into
    ``x`` of each maximum (row-major over ``N, C, spatial``; with
    ``storage_order`` 1 the spatial part column-major), the first one in
    window order on ties.  ``Y`` is the ordinary pool; the indices come from
    a running maximum over the taps, each a strided slice of ``x`` padded
    with ``-inf`` (and of the index grid padded alike)."""
    r = rank_of(x) - 2
    dims = dims_of(x)
    total = dim(1)
    for d in dims:
        total = total * d
    # The index of every cell of x, in x's layout.
    idx = cx.build("range", shape=[total], start=0.0, step=1.0, results=[tensor_type([total], "i64")])
    if storage_order == 1:
        idx = _reshape(cx, idx, dims[:2] + dims[2:][::-1])
        idx = cx.build("transpose", idx, perm=[0, 1] + list(range(r + 1, 1, -1)))
    else:
        idx = _reshape(cx, idx, dims)
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    # ceil_mode: pad high so the floor rule over the padded input counts the
    # windows that start inside the input or the low padding (see window_out).
    highs = [min(pads[r + a] + strides[a] - 1, extents[a] - 1) if ceil else pads[r + a] for a in range(r)]
    lows = pads[:r]
    xp, ip = x, idx
    if any(lows) or any(highs):
        padding = [0, 0] + lows + [0, 0] + highs
        xp = cx.build("pad", x, pads=padding, value=float("-inf"))
        ip = cx.build("pad", idx, pads=padding, value=-1.0)
    best = chosen = None
    for tap in itertools.product(*[range(k) for k in kernel]):
        v, i = xp, ip
        for a, t in enumerate(tap):
            v = _window_slice(cx, v, 2 + a, t * dilations[a], extents[a], strides[a])
            i = _window_slice(cx, i, 2 + a, t * dilations[a], extents[a], strides[a])
        if best is None:
            best, chosen = v, i
            continue
        take = cx.build("gt", v, best, results=[tensor_type(dims_of(v), "i1")])
        best = cx.build("where", take, v, best)
        chosen = cx.build("where", take, i, chosen)
    y = pool(cx, "max_pool2d", x, kernel, strides, dilations, pads, ceil)
    return y, chosen
