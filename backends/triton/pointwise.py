"""Pointwise kernels: elementwise and broadcast chains (and view copies).

One program handles ``BLOCK`` consecutive elements of the (contiguous)
output.  The flat index is split into one index per output axis with the
runtime dims (``d0 .. d{r-1}``, kernel arguments, so one kernel serves every
shape), and every input is loaded at ``sum(index_a * stride_a)`` with host
strides that are 0 along broadcast axes: broadcasting, transposes and slices
of inputs cost no copies.  The tail block is masked.
"""

from __future__ import annotations

from collections.abc import Mapping

from .emit import Source, emit_epilogue, epilogue_inputs
from .kernel import TritonKernel, bcast_strides, next_pow2

__all__ = ["PointwiseKernel"]


class PointwiseKernel(TritonKernel):
    """A chain of elementwise ops over one output shape."""

    kind = "pointwise"

    @classmethod
    def configs(cls, spec):
        return [{"BLOCK": 256, "num_warps": 4}, {"BLOCK": 1024, "num_warps": 4}, {"BLOCK": 4096, "num_warps": 8}]

    @classmethod
    def default_config(cls, spec, binding: Mapping[str, int]):
        try:
            n = 1
            for d in spec.output_specs[0].shape(binding):
                n *= d
        except Exception:
            n = 1 << 16
        return {"BLOCK": max(128, min(1024, next_pow2(n))), "num_warps": 4}

    def generate(self) -> str:
        spec = self.spec
        out = spec.output_specs[0]
        rank = out.rank
        ins = epilogue_inputs(spec, set())
        src = Source()
        params = [f"in{k}" for k in ins] + [f"out{j}" for j in range(len(spec.outputs))]
        params += ["n_elements"] + [f"d{a}" for a in range(rank)]
        params += [f"es{k}_{a}" for k in ins for a in range(rank)]
        params += ["BLOCK: tl.constexpr"]
        src("@triton.jit")
        src(f"def kernel({', '.join(params)}):")
        src.indent()
        src("offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)")
        src("mask = offs < n_elements")
        index = []
        src("rest = offs")
        for a in reversed(range(rank)):
            if a == 0:
                src("i0 = rest")
            else:
                src(f"i{a} = rest % d{a}")
                src(f"rest = rest // d{a}")
            index.insert(0, f"i{a}")
        values = emit_epilogue(src, spec, list(range(len(spec.nodes))), {}, index, "mask")
        for j, node_index in enumerate(spec.outputs):
            src(f"tl.store(out{j} + offs, {values[node_index]}.to(out{j}.dtype.element_ty), mask=mask)")
        return src.text()

    def launch(self, inputs, outputs, binding):
        shape = tuple(outputs[0].shape)
        n = outputs[0].numel()
        ins = epilogue_inputs(self.spec, set())
        args = [inputs[k] for k in ins] + list(outputs) + [n, *shape]
        for k in ins:
            args += bcast_strides(inputs[k], shape)
        block = self.config["BLOCK"]
        return ((n + block - 1) // block,), args, {"BLOCK": block}
