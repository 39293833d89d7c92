"""Kernels the Triton backend runs in PyTorch: concat, pad, gather, gather_elements,
scatter_nd, update_slice, argmax / argmin, reduce_prod, cumsum, fallback.

These are data-movement ops (or ops kiln cannot lower) with no generated
Triton kernel yet; they follow the same kernel contract so a program mixes
them freely with generated kernels.  ``is_fallback`` marks them for the
runtime's counters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...errors import UnsupportedError
from .kernel import TritonKernel

__all__ = ["TORCH_OPS", "TorchKernel"]


class TorchKernel(TritonKernel):
    """One kiln op computed with torch on the tensors' device."""

    kind = "torch"
    is_fallback = True

    def generate(self) -> str:
        return ""

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: Mapping[str, int]) -> None:
        from .kernel import as_torch

        inputs = [as_torch(a) for a in inputs]
        outputs = [as_torch(a) for a in outputs]
        self.check(inputs, outputs, binding)
        xs = [i.apply(t, binding) for i, t in zip(self.spec.inputs, inputs)]
        node = self.spec.anchor
        fn = TORCH_OPS.get(node.op)
        if fn is None or (node.op == "kiln.fallback" and not node.attrs["op_name"].startswith("aten.")):
            raise UnsupportedError(f"the Triton backend has no kernel for '{node.op}'")
        y = fn([xs[i] for _, i in node.args], node.attrs, binding)
        outputs[0].copy_(y)


def _concat(args, at, binding):
    import torch

    return torch.cat(args, dim=at["axis"])


def _pad(args, at, binding):
    import torch.nn.functional as F  # noqa: N812

    rank = args[0].dim()
    pads = at["pads"]
    flat = []
    for a in reversed(range(rank)):
        flat += [pads[a], pads[a + rank]]
    mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}[at.get("mode", "constant")]
    if mode == "constant":
        return F.pad(args[0], flat, mode=mode, value=at.get("value", 0.0))
    return F.pad(args[0], flat, mode=mode)


def _gather(args, at, binding):
    import torch

    data, idx = args
    axis = at.get("axis", 0) % data.dim()
    idx = idx.reshape(-1).long()  # negative indices count from the end (kiln.gather's, numpy's take)
    flat = torch.index_select(data, axis, torch.where(idx < 0, idx + data.shape[axis], idx))
    return flat.reshape(data.shape[:axis] + args[1].shape + data.shape[axis + 1 :])


def _arg_reduce(which: str):
    def run(args, at, binding):
        import torch

        x = args[0]
        axis = at.get("axis", 0) % x.dim()
        fn = torch.argmax if which == "max" else torch.argmin
        if at.get("select_last_index", False):
            y = x.shape[axis] - 1 - fn(torch.flip(x, [axis]), dim=axis, keepdim=True)
        else:
            y = fn(x, dim=axis, keepdim=True)
        return y if at.get("keepdims", True) else y.squeeze(axis)

    return run


def _cumsum(args, at, binding):
    import torch

    return torch.cumsum(args[0], dim=at["axis"], dtype=args[0].dtype)


def _reduce_prod(args, at, binding):
    import torch

    y = args[0]
    for a in sorted({a % y.dim() for a in at.get("axes") or range(y.dim())}, reverse=True):
        y = torch.prod(y, dim=a, keepdim=bool(at.get("keepdims", False)))
    return y


def _gather_elements(args, at, binding):
    import torch

    data, idx = args
    axis = at.get("axis", 0) % data.dim()
    idx = idx.long()
    return torch.gather(data, axis, torch.where(idx < 0, idx + data.shape[axis], idx))


def _update_slice(args, at, binding):
    """A copy: the Triton path donates no buffer yet."""
    from ...dialects.dims import dim, evaluate

    dest, upd = args
    axis = at["axis"] % dest.dim()
    start = int(evaluate(dim(at["offset"][0]), binding))
    y = dest.clone()
    y.narrow(axis, start, upd.shape[axis]).copy_(upd)
    return y


def _aten(args, at, binding):
    """A ``kiln.fallback`` of an ``aten`` op: that op."""
    import torch

    name = at["op_name"].split(".")
    fn = getattr(torch.ops.aten, name[1])
    fn = getattr(fn, name[2]) if len(name) > 2 else fn
    return fn(*args)


def _quantize_op(op: str):
    return lambda args, at, binding: _quantize(op, *args, at.get("axis"), at.get("block_size"))


def _quantize(op: str, x, scale, zero_point, axis, block_size):
    """kiln.quantize (round half to even, saturate to the zero point's type) or
    kiln.dequantize, with per-tensor, per-axis or blocked parameters."""
    import torch

    if axis is None:
        s, z = scale.reshape(()), zero_point.reshape(())
    elif block_size is not None:
        axis %= x.dim()
        s, z = (p.repeat_interleave(block_size, dim=axis).narrow(axis, 0, x.shape[axis]) for p in (scale, zero_point))
    else:
        shape = [1] * x.dim()
        shape[axis % x.dim()] = -1
        s, z = scale.reshape(shape), zero_point.reshape(shape)
    if op == "kiln.dequantize":
        return (x.to(torch.int64) - z.to(torch.int64)).to(scale.dtype) * s
    info = torch.iinfo(zero_point.dtype)
    return torch.clamp(torch.round(x / s).to(torch.float64) + z, info.min, info.max).to(zero_point.dtype)


def _scatter_nd(data, indices, updates, reduction: str):
    """ONNX ScatterND on torch tensors: rows of ``indices`` applied in order."""
    import torch

    k = indices.shape[-1]
    out = data.clone()
    rows = indices.reshape(-1, k).long().tolist()
    ups = updates.reshape((len(rows),) + tuple(data.shape[k:]))
    for row, u in zip(rows, ups):
        pos = tuple(p + data.shape[j] if p < 0 else p for j, p in enumerate(row))
        if reduction == "add":
            out[pos] = out[pos] + u
        elif reduction == "mul":
            out[pos] = out[pos] * u
        elif reduction == "max":
            out[pos] = torch.maximum(out[pos], u)
        elif reduction == "min":
            out[pos] = torch.minimum(out[pos], u)
        else:
            out[pos] = u
    return out


#: ``{kiln op: fn(operand tensors, attributes, binding) -> result tensor}``:
#: the ops a Triton-backend schedule runs in PyTorch (see the module docstring).
TORCH_OPS = {
    "kiln.concat": _concat,
    "kiln.pad": _pad,
    "kiln.gather": _gather,
    "kiln.gather_elements": _gather_elements,
    "kiln.argmax": _arg_reduce("max"),
    "kiln.argmin": _arg_reduce("min"),
    "kiln.cumsum": _cumsum,
    "kiln.reduce_prod": _reduce_prod,
    "kiln.update_slice": _update_slice,
    "kiln.scatter_nd": lambda args, at, binding: _scatter_nd(*args, at.get("reduction", "none")),
    "kiln.quantize": _quantize_op("kiln.quantize"),
    "kiln.dequantize": _quantize_op("kiln.dequantize"),
    "kiln.fallback": _aten,
}
