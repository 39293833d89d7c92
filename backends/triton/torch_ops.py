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

__all__ = ["TorchKernel"]


class TorchKernel(TritonKernel):
    """One kiln op computed with torch on the tensors' device."""

    kind = "torch"
    is_fallback = True

    def generate(self) -> str:
        return ""

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: Mapping[str, int]) -> None:
        import torch
        import torch.nn.functional as F  # noqa: N812

        from .kernel import as_torch

        inputs = [as_torch(a) for a in inputs]
        outputs = [as_torch(a) for a in outputs]
        self.check(inputs, outputs, binding)
        xs = [i.apply(t, binding) for i, t in zip(self.spec.inputs, inputs)]
        node = self.spec.anchor
        args = [xs[i] for _, i in node.args]
        at = node.attrs
        op = node.op
        if op == "kiln.concat":
            y = torch.cat(args, dim=at["axis"])
        elif op == "kiln.pad":
            rank = args[0].dim()
            pads = at["pads"]
            flat = []
            for a in reversed(range(rank)):
                flat += [pads[a], pads[a + rank]]
            mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}[at.get("mode", "constant")]
            y = F.pad(args[0], flat, mode=mode, value=at.get("value", 0.0)) if mode == "constant" else F.pad(
                args[0], flat, mode=mode
            )
        elif op == "kiln.gather":
            data, idx = args
            axis = at.get("axis", 0) % data.dim()
            idx = idx.reshape(-1).long()  # negative indices count from the end (kiln.gather's, numpy's take)
            flat = torch.index_select(data, axis, torch.where(idx < 0, idx + data.shape[axis], idx))
            y = flat.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1 :])
        elif op in ("kiln.argmax", "kiln.argmin"):
            x = args[0]
            axis = at.get("axis", 0) % x.dim()
            fn = torch.argmax if op == "kiln.argmax" else torch.argmin
            if at.get("select_last_index", False):
                y = x.shape[axis] - 1 - fn(torch.flip(x, [axis]), dim=axis, keepdim=True)
            else:
                y = fn(x, dim=axis, keepdim=True)
            y = y if at.get("keepdims", True) else y.squeeze(axis)
        elif op == "kiln.cumsum":
            y = torch.cumsum(args[0], dim=at["axis"], dtype=args[0].dtype)
        elif op == "kiln.reduce_prod":
            y = args[0]
            axes = sorted({a % y.dim() for a in at.get("axes") or range(y.dim())}, reverse=True)
            for a in axes:
                y = torch.prod(y, dim=a, keepdim=bool(at.get("keepdims", False)))
        elif op == "kiln.gather_elements":
            data, idx = args
            axis = at.get("axis", 0) % data.dim()
            idx = idx.long()
            y = torch.gather(data, axis, torch.where(idx < 0, idx + data.shape[axis], idx))
        elif op == "kiln.update_slice":  # a copy: the Triton path donates no buffer yet
            from ...dialects.dims import dim, evaluate

            dest, upd = args
            axis = at["axis"] % dest.dim()
            start = int(evaluate(dim(at["offset"][0]), binding))
            y = dest.clone()
            y.narrow(axis, start, upd.shape[axis]).copy_(upd)
        elif op == "kiln.scatter_nd":
            y = _scatter_nd(*args, at.get("reduction", "none"))
        elif op in ("kiln.quantize", "kiln.dequantize"):
            y = _quantize(op, *args, at.get("axis"), at.get("block_size"))
        elif op == "kiln.fallback" and at["op_name"].startswith("aten."):
            name = at["op_name"].split(".")
            fn = getattr(torch.ops.aten, name[1])
            fn = getattr(fn, name[2]) if len(name) > 2 else fn
            y = fn(*args)
        else:
            raise UnsupportedError(f"the Triton backend has no kernel for '{op}'")
        outputs[0].copy_(y)


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
