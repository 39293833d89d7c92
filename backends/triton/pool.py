"""2-D max and average pooling (NCHW) with a fused epilogue.

One program computes ``BLOCK`` output elements; the window (static size) is
unrolled with ``tl.static_range`` and out-of-bounds cells are masked, which
is also how padding works.  Average pooling divides by the valid cells, or
with ``count_include_pad`` by the cells inside the padded input (PyTorch's
rule, ceil_mode windows included).
"""

from __future__ import annotations

from collections.abc import Mapping

from .emit import Source, emit_epilogue, epilogue_inputs
from .kernel import TritonKernel, bcast_strides, next_pow2

__all__ = ["PoolKernel"]


class PoolKernel(TritonKernel):
    """``kiln.max_pool2d`` / ``kiln.avg_pool2d``."""

    kind = "pool"

    @classmethod
    def configs(cls, spec):
        return [{"BLOCK": 128, "num_warps": 4}, {"BLOCK": 512, "num_warps": 4}]

    @classmethod
    def default_config(cls, spec, binding: Mapping[str, int]):
        try:
            n = 1
            for d in spec.output_specs[0].shape(binding):
                n *= d
        except Exception:
            n = 4096
        return {"BLOCK": max(64, min(512, next_pow2(n))), "num_warps": 4}

    def generate(self) -> str:
        spec = self.spec
        is_max = spec.anchor.op == "kiln.max_pool2d"
        ins = epilogue_inputs(spec, set())
        src = Source()
        params = ["x", "out0"] + [f"in{k}" for k in ins] + ["n_elements", "C", "H", "W", "OH", "OW"]
        params += [f"sx{i}" for i in range(4)] + [f"es{k}_{a}" for k in ins for a in range(4)]
        params += [f"{n}: tl.constexpr" for n in ("KH", "KW", "SH", "SW", "PH", "PW", "PB", "PR", "DH", "DW", "BLOCK")]
        src("@triton.jit")
        src(f"def kernel({', '.join(params)}):")
        src.indent()
        src("offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)")
        src("mask = offs < n_elements")
        src("ow = offs % OW")
        src("t = offs // OW")
        src("oh = t % OH")
        src("t = t // OH")
        src("c = t % C")
        src("nb = t // C")
        src("base = x + nb * sx0 + c * sx1")
        if is_max:
            src("acc = tl.full((BLOCK,), float('-inf'), tl.float32)")
        else:
            src("acc = tl.zeros((BLOCK,), dtype=tl.float32)")
            src("cnt = tl.zeros((BLOCK,), dtype=tl.float32)")
        src("for kh in tl.static_range(KH):")
        src.indent()
        src("for kw in tl.static_range(KW):")
        src.indent()
        src("ih = oh * SH - PH + kh * DH")
        src("iw = ow * SW - PW + kw * DW")
        src("ok = mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)")
        other = "float('-inf')" if is_max else "0.0"
        src(f"v = tl.load(base + ih * sx2 + iw * sx3, mask=ok, other={other}).to(tl.float32)")
        if is_max:
            src("acc = tl.maximum(acc, v)")
        else:
            src("acc += v")
            if spec.anchor.attrs.get("count_include_pad"):
                src("inpad = (ih >= -PH) & (ih < H + PB) & (iw >= -PW) & (iw < W + PR)")
                src("cnt += tl.where(inpad, 1.0, 0.0)")
            else:
                src("cnt += tl.where(ok, 1.0, 0.0)")
        src.dedent()
        src.dedent()
        if not is_max:
            src("acc = acc / tl.maximum(cnt, 1.0)")
        values = emit_epilogue(src, spec, list(range(1, len(spec.nodes))), {0: "acc"}, ["nb", "c", "oh", "ow"], "mask")
        src(f"tl.store(out0 + offs, {values[spec.outputs[0]]}.to(out0.dtype.element_ty), mask=mask)")
        return src.text()

    def launch(self, inputs, outputs, binding):
        spec = self.spec
        at = spec.anchor.attrs
        x = inputs[spec.anchor.args[0][1]]
        out = outputs[0]
        kernel = at["kernel"]
        strides = at.get("strides") or kernel
        pads = at.get("pads") or [0, 0, 0, 0]
        dil = at.get("dilations") or [1, 1]
        ins = epilogue_inputs(spec, set())
        n, c, h, w = x.shape
        _, _, oh, ow = out.shape
        args = [x, out] + [inputs[k] for k in ins] + [out.numel(), c, h, w, oh, ow] + list(x.stride())
        for k in ins:
            args += bcast_strides(inputs[k], tuple(out.shape))
        block = self.config["BLOCK"]
        cx = {
            "KH": kernel[0], "KW": kernel[1], "SH": strides[0], "SW": strides[1], "PH": pads[0], "PW": pads[1],
            "PB": pads[2], "PR": pads[3], "DH": dil[0], "DW": dil[1], "BLOCK": block,
        }
        return ((out.numel() + block - 1) // block,), args, cx
