"""GEMM templates: matmul / batched matmul, and conv2d as implicit GEMM,
each with a fused elementwise epilogue.

Both tile the output in ``BM x BN`` blocks and walk the contraction in ``BK``
steps with ``tl.dot`` (fp16/bf16 operands, fp32 accumulator; fp32 operands
use IEEE precision unless the config asks for ``tf32``).  The epilogue
(bias, activation, residual add ...) runs on the fp32 accumulator before the
single store.  M, N, K, the batch dims and all strides are runtime
arguments; the boundaries are masked.

Conv2d is implicit GEMM: ``M = N*OH*OW``, ``N = O / groups``,
``K = C/groups * KH * KW``; the A tile is gathered from the input with the
window arithmetic (padding by masks), so no im2col buffer exists.  The group
index is the third grid axis.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import UnsupportedError
from .emit import Source, emit_epilogue, epilogue_inputs
from .kernel import TritonKernel, bcast_strides, interpreting

__all__ = ["Conv2dKernel", "MatmulKernel"]

#: Block configurations the autotuner measures (BM, BN, BK, warps, stages).
GEMM_CONFIGS = [
    {"BM": 16, "BN": 16, "BK": 16, "num_warps": 1, "num_stages": 2},
    {"BM": 32, "BN": 32, "BK": 32, "num_warps": 4, "num_stages": 3},
    {"BM": 64, "BN": 64, "BK": 32, "num_warps": 4, "num_stages": 3},
    {"BM": 128, "BN": 64, "BK": 32, "num_warps": 4, "num_stages": 4},
    {"BM": 128, "BN": 128, "BK": 32, "num_warps": 8, "num_stages": 3},
]


def _gemm_heuristic(m: int, n: int) -> dict:
    bm = 16 if m <= 16 else 32 if m <= 32 else 64 if m <= 512 else 128
    bn = 16 if n <= 16 else 32 if n <= 32 else 64 if n <= 256 else 128
    for c in GEMM_CONFIGS:
        if c["BM"] == bm and c["BN"] == bn:
            return dict(c)
    return {"BM": bm, "BN": bn, "BK": 32, "num_warps": 4 if bm * bn <= 8192 else 8, "num_stages": 3}


def _precision(spec, config) -> str:
    dtype = spec.inputs[spec.anchor.args[0][1]].spec.dtype
    if dtype in ("f16", "bf16"):
        return ""
    if dtype != "f32":
        raise UnsupportedError(f"'{spec.anchor.op}' on the Triton backend supports f16, bf16 and f32, not {dtype}")
    return f', input_precision="{config.get("precision", "ieee")}"'


def upcast(t) -> bool:
    """True when ``tl.dot`` must see fp32 tiles: the interpreter multiplies
    bf16 tiles wrongly (their raw bits), so there bf16 is upcast first —
    the same products, exact in fp32.  Compiled kernels keep bf16 dots."""
    import torch

    return interpreting() and t.dtype == torch.bfloat16


def _upcast(src: Source, *names: str) -> None:
    src("if UPCAST:")
    for n in names:
        src(f"    {n} = {n}.to(tl.float32)")


def _store_epilogue(src: Source, spec, index: list[str], mask: str, out_offset: str) -> None:
    values = emit_epilogue(src, spec, list(range(1, len(spec.nodes))), {0: "acc"}, index, mask)
    src(f"tl.store(out0 + {out_offset}, {values[spec.outputs[0]]}.to(out0.dtype.element_ty), mask={mask})")


class MatmulKernel(TritonKernel):
    """``kiln.matmul`` (numpy semantics, broadcast batch dims) + epilogue."""

    kind = "matmul"

    @classmethod
    def configs(cls, spec):
        return [dict(c) for c in GEMM_CONFIGS]

    @classmethod
    def default_config(cls, spec, binding: Mapping[str, int]):
        try:
            out = spec.output_specs[0].shape(binding)
            a = spec.inputs[spec.anchor.args[0][1]].spec.shape(binding)
            m = a[-2] if len(a) > 1 else 1
            n = out[-1] if spec.inputs[spec.anchor.args[1][1]].spec.rank > 1 else 1
        except Exception:
            m = n = 64
        return _gemm_heuristic(m, n)

    def _layout(self):
        a = self.spec.inputs[self.spec.anchor.args[0][1]].spec
        b = self.spec.inputs[self.spec.anchor.args[1][1]].spec
        nbatch = self.spec.anchor.out.rank - (a.rank > 1) - (b.rank > 1)
        return a.rank == 1, b.rank == 1, nbatch

    def generate(self) -> str:
        spec = self.spec
        a_vec, b_vec, nb = self._layout()
        ins = epilogue_inputs(spec, set())
        rank = spec.anchor.out.rank
        src = Source()
        bs = [f"bd{i}" for i in range(nb)]
        params = ["a", "b", "out0"] + [f"in{k}" for k in ins] + ["M", "N", "K"] + bs
        params += [f"sa_b{i}" for i in range(nb)] + ["sa_m", "sa_k"]
        params += [f"sb_b{i}" for i in range(nb)] + ["sb_k", "sb_n"]
        params += [f"so_b{i}" for i in range(nb)] + ["so_m", "so_n"]
        params += [f"es{k}_{x}" for k in ins for x in range(rank)]
        params += ["BM: tl.constexpr", "BN: tl.constexpr", "BK: tl.constexpr", "UPCAST: tl.constexpr"]
        src("@triton.jit")
        src(f"def kernel({', '.join(params)}):")
        src.indent()
        src("pid_m = tl.program_id(0)")
        src("pid_n = tl.program_id(1)")
        src("rest = tl.program_id(2).to(tl.int64)")
        for i in reversed(range(nb)):
            src(f"ib{i} = rest % bd{i}")
            src(f"rest = rest // bd{i}")
        boff = {w: " + ".join(f"ib{i} * s{w}_b{i}" for i in range(nb)) or "0" for w in ("a", "b", "o")}
        src("offs_m = pid_m * BM + tl.arange(0, BM)")
        src("offs_n = pid_n * BN + tl.arange(0, BN)")
        src("offs_k = tl.arange(0, BK)")
        src(f"a_ptrs = a + ({boff['a']}) + offs_m[:, None] * sa_m + offs_k[None, :] * sa_k")
        src(f"b_ptrs = b + ({boff['b']}) + offs_k[:, None] * sb_k + offs_n[None, :] * sb_n")
        src("acc = tl.zeros((BM, BN), dtype=tl.float32)")
        src("for k0 in range(0, K, BK):")
        src.indent()
        src("kmask = (k0 + offs_k) < K")
        src("av = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & kmask[None, :], other=0.0)")
        src("bv = tl.load(b_ptrs, mask=kmask[:, None] & (offs_n[None, :] < N), other=0.0)")
        _upcast(src, "av", "bv")
        src(f"acc = tl.dot(av, bv, acc{_precision(spec, self.config)})")
        src("a_ptrs += BK * sa_k")
        src("b_ptrs += BK * sb_k")
        src.dedent()
        src("mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)")
        index = [f"ib{i}" for i in range(nb)]
        if not a_vec:
            index.append("offs_m[:, None]")
        if not b_vec:
            index.append("offs_n[None, :]")
        _store_epilogue(src, spec, index, "mask", f"({boff['o']}) + offs_m[:, None] * so_m + offs_n[None, :] * so_n")
        return src.text()

    def launch(self, inputs, outputs, binding):
        spec = self.spec
        a = inputs[spec.anchor.args[0][1]]
        b = inputs[spec.anchor.args[1][1]]
        out = outputs[0]
        a_vec, b_vec, nb = self._layout()
        a2 = a.unsqueeze(0) if a_vec else a
        b2 = b.unsqueeze(-1) if b_vec else b
        m, k = a2.shape[-2], a2.shape[-1]
        n = b2.shape[-1]
        batch = tuple(out.shape[:nb])
        o2 = out.reshape(batch + (m, n))
        sa = bcast_strides(a2, batch + (m, k))
        sb = bcast_strides(b2, batch + (k, n))
        so = list(o2.stride())
        ins = epilogue_inputs(spec, set())
        args = [a, b, out] + [inputs[i] for i in ins] + [m, n, k, *batch] + sa + sb + so
        for i in ins:
            args += bcast_strides(inputs[i], tuple(out.shape))
        c = self.config
        nbatch = 1
        for d in batch:
            nbatch *= d
        grid = ((m + c["BM"] - 1) // c["BM"], (n + c["BN"] - 1) // c["BN"], nbatch)
        return grid, args, {"BM": c["BM"], "BN": c["BN"], "BK": c["BK"], "UPCAST": upcast(a)}


class Conv2dKernel(TritonKernel):
    """``kiln.conv2d`` (NCHW, OIHW, optional bias, groups) as implicit GEMM + epilogue."""

    kind = "conv2d"

    @classmethod
    def configs(cls, spec):
        return [dict(c) for c in GEMM_CONFIGS[:4]]

    @classmethod
    def default_config(cls, spec, binding: Mapping[str, int]):
        try:
            n, o, oh, ow = spec.output_specs[0].shape(binding)
            m = n * oh * ow
            og = o // int(spec.anchor.attrs.get("groups", 1))
        except Exception:
            m, og = 1024, 32
        cfg = _gemm_heuristic(m, og)
        cfg["BK"] = 16 if cfg["BN"] <= 16 else 32
        return cfg

    def generate(self) -> str:
        spec = self.spec
        w = spec.inputs[spec.anchor.args[1][1]].spec
        if not (w.dims[2].is_static and w.dims[3].is_static):
            raise UnsupportedError(f"conv2d on the Triton backend needs a static kernel size, got {w.text()}")
        has_bias = len(spec.anchor.args) == 3
        ins = epilogue_inputs(spec, set())
        src = Source()
        params = ["x", "w"] + (["bias"] if has_bias else []) + ["out0"] + [f"in{k}" for k in ins]
        params += ["H", "W", "OH", "OW", "M", "CG", "OG"]
        params += [f"sx{i}" for i in range(4)] + [f"sw{i}" for i in range(4)] + [f"so{i}" for i in range(4)]
        params += [f"es{k}_{x}" for k in ins for x in range(4)]
        params += [f"{n}: tl.constexpr" for n in ("KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW", "BM", "BN", "BK", "UPCAST")]
        src("@triton.jit")
        src(f"def kernel({', '.join(params)}):")
        src.indent()
        src("pid_m = tl.program_id(0)")
        src("pid_n = tl.program_id(1)")
        src("g = tl.program_id(2)")
        src("offs_m = (pid_m * BM + tl.arange(0, BM)).to(tl.int64)")
        src("mmask = offs_m < M")
        src("ow = offs_m % OW")
        src("t = offs_m // OW")
        src("oh = t % OH")
        src("nb = t // OH")
        src("offs_c = pid_n * BN + tl.arange(0, BN)")
        src("cmask = offs_c < OG")
        src("oc = g * OG + offs_c")
        src("KTOT = CG * KH * KW")
        src("acc = tl.zeros((BM, BN), dtype=tl.float32)")
        src("for k0 in range(0, KTOT, BK):")
        src.indent()
        src("kk = k0 + tl.arange(0, BK)")
        src("kmask = kk < KTOT")
        src("ci = kk // (KH * KW)")
        src("r = kk % (KH * KW)")
        src("kh = r // KW")
        src("kw = r % KW")
        src("ih = oh[:, None] * SH - PH + kh[None, :] * DH")
        src("iw = ow[:, None] * SW - PW + kw[None, :] * DW")
        src("am = mmask[:, None] & kmask[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)")
        src("av = tl.load(x + nb[:, None] * sx0 + (g * CG + ci)[None, :] * sx1 + ih * sx2 + iw * sx3, mask=am, other=0.0)")
        src(
            "bv = tl.load(w + oc[None, :] * sw0 + ci[:, None] * sw1 + kh[:, None] * sw2 + kw[:, None] * sw3, "
            "mask=kmask[:, None] & cmask[None, :], other=0.0)"
        )
        _upcast(src, "av", "bv")
        src(f"acc = tl.dot(av, bv, acc{_precision(spec, self.config)})")
        src.dedent()
        if has_bias:
            src("acc += tl.load(bias + oc, mask=cmask, other=0.0).to(tl.float32)[None, :]")
        src("mask = mmask[:, None] & cmask[None, :]")
        index = ["nb[:, None]", "oc[None, :]", "oh[:, None]", "ow[:, None]"]
        _store_epilogue(
            src, spec, index, "mask", "nb[:, None] * so0 + oc[None, :] * so1 + oh[:, None] * so2 + ow[:, None] * so3"
        )
        return src.text()

    def launch(self, inputs, outputs, binding):
        spec = self.spec
        at = spec.anchor.attrs
        x = inputs[spec.anchor.args[0][1]]
        w = inputs[spec.anchor.args[1][1]]
        bias = [inputs[spec.anchor.args[2][1]]] if len(spec.anchor.args) == 3 else []
        out = outputs[0]
        groups = int(at.get("groups") or 1)
        n, c, h, wd = x.shape
        o, cg, kh, kw = w.shape
        _, _, oh, ow = out.shape
        strides = at.get("strides") or [1, 1]
        pads = at.get("pads") or [0, 0, 0, 0]
        dil = at.get("dilations") or [1, 1]
        ins = epilogue_inputs(spec, set())
        og = o // groups
        args = [x, w, *bias, out] + [inputs[i] for i in ins]
        args += [h, wd, oh, ow, n * oh * ow, cg, og]
        args += list(x.stride()) + list(w.stride()) + list(out.stride())
        for i in ins:
            args += bcast_strides(inputs[i], tuple(out.shape))
        cfg = self.config
        cx = {
            "KH": kh, "KW": kw, "SH": strides[0], "SW": strides[1], "PH": pads[0], "PW": pads[1],
            "DH": dil[0], "DW": dil[1], "BM": cfg["BM"], "BN": cfg["BN"], "BK": cfg["BK"], "UPCAST": upcast(x),
        }
        grid = ((n * oh * ow + cfg["BM"] - 1) // cfg["BM"], (og + cfg["BN"] - 1) // cfg["BN"], groups)
        return grid, args, cx

