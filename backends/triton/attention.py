"""A FlashAttention-style kernel for ``kiln.attention``, registered as a
custom kernel — the worked example of :func:`kiln.register_kernel`.

One program owns ``BM`` queries of one (batch, head) and streams the keys
and values in ``BN`` blocks with the online softmax (running max ``m``,
running sum ``l``, rescaled accumulator), so the ``L x S`` score matrix never
exists in memory.  With ``causal`` the key loop stops at the query block's
end and the diagonal block is masked (query ``i`` sees keys ``j <= i``,
PyTorch's ``is_causal``).  An optional mask is added to the scores (float)
or selects them (bool).  fp16/bf16 operands use fp32 scores and accumulator.
Grouped-query attention (k / v with fewer heads) reads k / v entry
``bh // GROUP`` of the flattened batch: no repeated copy.

The registration at the bottom is what a user writes for their own kernel::

    kiln.register_kernel("kiln.attention", device="cuda", dtypes=["f16", "bf16", "f32"],
                         shape_fn=..., workspace=..., impl=FlashAttention, name="flash_attention")
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ...errors import UnsupportedError
from .emit import Source
from .kernel import TritonKernel, next_pow2
from .matmul import _upcast, upcast

__all__ = ["AttentionKernel", "attention_shape", "attention_workspace"]


class AttentionKernel(TritonKernel):
    """Fused scaled-dot-product attention (see the module docstring)."""

    kind = "attention"

    @classmethod
    def configs(cls, spec):
        return [{"BM": 16, "BN": 16, "num_warps": 2}, {"BM": 64, "BN": 32, "num_warps": 4},
                {"BM": 128, "BN": 64, "num_warps": 8, "num_stages": 2}]

    @classmethod
    def default_config(cls, spec, binding: Mapping[str, int]):
        try:
            q = spec.inputs[spec.anchor.args[0][1]].spec.shape(binding)
            length = q[-2]
        except Exception:
            length = 128
        return {"BM": 16, "BN": 16, "num_warps": 2} if length <= 32 else {"BM": 64, "BN": 32, "num_warps": 4}

    def _dims(self):
        q = self.spec.inputs[self.spec.anchor.args[0][1]].spec
        v = self.spec.inputs[self.spec.anchor.args[2][1]].spec
        if not (q.dims[-1].is_static and v.dims[-1].is_static):
            raise UnsupportedError(f"kiln.attention on the Triton backend needs static head dims, got {q.text()}")
        if q.dtype not in ("f16", "bf16", "f32"):
            raise UnsupportedError(f"kiln.attention on the Triton backend supports f16, bf16, f32, not {q.dtype}")
        return q.dims[-1].value, v.dims[-1].value, q.dtype

    def generate(self) -> str:
        d, dv, dtype = self._dims()
        has_mask = len(self.spec.anchor.args) == 4
        prec = ', input_precision="ieee"' if dtype == "f32" else ""
        src = Source()
        params = ["q", "k", "v"] + (["msk"] if has_mask else []) + ["out0", "L", "S", "sm_scale"]
        params += ["sqb", "sqm", "sqd", "skb", "skn", "skd", "svb", "svn", "svd", "sob", "som", "sod"]
        if has_mask:
            params += ["smb", "smm", "smn"]
        params += [f"{n}: tl.constexpr" for n in ("D", "DV", "BD", "BDV", "BM", "BN", "CAUSAL", "UPCAST", "GROUP")]
        src("@triton.jit")
        src(f"def kernel({', '.join(params)}):")
        src.indent()
        src("pid_m = tl.program_id(0)")
        src("bh = tl.program_id(1).to(tl.int64)")
        # Grouped-query attention: q entry bh reads k / v entry bh // GROUP
        # (heads innermost in the flattened batch; GROUP 1 otherwise).
        src("kvh = bh // GROUP")
        src("offs_m = pid_m * BM + tl.arange(0, BM)")
        src("offs_n = tl.arange(0, BN)")
        src("offs_d = tl.arange(0, BD)")
        src("offs_dv = tl.arange(0, BDV)")
        src("mrow = offs_m < L")
        src("qt = tl.load(q + bh * sqb + offs_m[:, None] * sqm + offs_d[None, :] * sqd, "
            "mask=mrow[:, None] & (offs_d[None, :] < D), other=0.0)")
        _upcast(src, "qt")
        src("m_i = tl.full((BM,), float('-inf'), tl.float32)")
        src("l_i = tl.zeros((BM,), dtype=tl.float32)")
        src("acc = tl.zeros((BM, BDV), dtype=tl.float32)")
        src("hi = S")
        src("if CAUSAL:")
        src("    hi = tl.minimum(S, (pid_m + 1) * BM)")
        src("for n0 in range(0, hi, BN):")
        src.indent()
        src("cols = n0 + offs_n")
        src("kt = tl.load(k + kvh * skb + cols[None, :] * skn + offs_d[:, None] * skd, "
            "mask=(cols[None, :] < S) & (offs_d[:, None] < D), other=0.0)")
        _upcast(src, "kt")
        src(f"s = tl.dot(qt, kt{prec}) * sm_scale")
        src("ok = (cols[None, :] < S) & mrow[:, None]")
        src("if CAUSAL:")
        src("    ok = ok & (cols[None, :] <= offs_m[:, None])")
        if has_mask:
            src("mv = tl.load(msk + bh * smb + offs_m[:, None] * smm + cols[None, :] * smn, mask=ok, other=0)")
            if self.spec.inputs[self.spec.anchor.args[3][1]].spec.dtype == "i1":
                src("ok = ok & (mv != 0)")
            else:
                src("s = s + mv.to(tl.float32)")
        src("s = tl.where(ok, s, float('-inf'))")
        src("m_new = tl.maximum(m_i, tl.max(s, axis=1))")
        # A row with no visible key yet has m_new = -inf: keep exp() finite.
        src("m_safe = tl.where(m_new == float('-inf'), 0.0, m_new)")
        src("p = tl.exp(s - m_safe[:, None])")
        src("alpha = tl.exp(m_i - m_safe)")
        src("l_i = l_i * alpha + tl.sum(p, axis=1)")
        src("vt = tl.load(v + kvh * svb + cols[:, None] * svn + offs_dv[None, :] * svd, "
            "mask=(cols[:, None] < S) & (offs_dv[None, :] < DV), other=0.0)")
        _upcast(src, "vt")
        src(f"acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt{prec})")
        src("m_i = m_new")
        src.dedent()
        src("o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]")
        src("tl.store(out0 + bh * sob + offs_m[:, None] * som + offs_dv[None, :] * sod, o.to(out0.dtype.element_ty), "
            "mask=mrow[:, None] & (offs_dv[None, :] < DV))")
        return src.text()

    def launch(self, inputs, outputs, binding):
        spec = self.spec
        d, dv, _ = self._dims()
        q, k, v = (inputs[r[1]] for r in spec.anchor.args[:3])
        out = outputs[0]
        batch = tuple(out.shape[:-2])
        length, s_len = q.shape[-2], k.shape[-2]

        def flat(t, tail):
            return t.expand(batch + tail).reshape((-1,) + tail)

        group = _group(tuple(q.shape), tuple(k.shape))
        kv_batch = batch[:-1] + (batch[-1] // group,) if group > 1 else batch
        q3 = flat(q, (length, d))
        k3, v3 = (t.expand(kv_batch + tail).reshape((-1,) + tail) for t, tail in ((k, (s_len, d)), (v, (s_len, dv))))
        o3 = out.reshape((-1, length, dv))
        scale = spec.anchor.attrs.get("scale")
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        args = [q3, k3, v3]
        mask_strides = []
        if len(spec.anchor.args) == 4:
            m = inputs[spec.anchor.args[3][1]]
            m = m.reshape((1,) * (len(batch) + 2 - m.dim()) + tuple(m.shape))
            m3 = flat(m, (length, s_len))
            args.append(m3)
            mask_strides = list(m3.stride())
        args += [o3, length, s_len, scale]
        args += list(q3.stride()) + list(k3.stride()) + list(v3.stride()) + list(o3.stride()) + mask_strides
        c = self.config
        cx = {
            "D": d, "DV": dv, "BD": max(16, next_pow2(d)), "BDV": max(16, next_pow2(dv)),
            "BM": c["BM"], "BN": c["BN"], "CAUSAL": bool(spec.anchor.attrs.get("causal")),
            "UPCAST": upcast(q), "GROUP": group,
        }
        grid = ((length + c["BM"] - 1) // c["BM"], q3.shape[0])
        return grid, args, cx


def _group(q, k) -> int:
    """q heads per k / v head (dim -3): ``kiln.attention``'s grouped-query
    form (the verifier checked the division), else 1."""
    if len(q) < 3 or len(k) < 3 or k[-3] in (1, q[-3]) or q[-3] % k[-3]:
        return 1
    return q[-3] // k[-3]


def attention_shape(q, k, v, mask=None):
    """Shape function of the custom kernel: ``[..., L, Dv]`` from q, k, v dims."""
    return tuple(q[:-1]) + (v[-1],)


def attention_workspace(q, k, v, mask=None) -> int:
    """Workspace bytes the kernel needs: none (scores live in registers)."""
    return 0


def register(registry=None) -> None:
    """Register the kernel for ``kiln.attention`` on cuda (the worked example)."""
    from ..registry import register_kernel

    register_kernel(
        "kiln.attention",
        device="cuda",
        dtypes=["f16", "bf16", "f32"],
        shape_fn=attention_shape,
        workspace=attention_workspace,
        impl=AttentionKernel,
        name="flash_attention",
        priority=10,
        registry=registry,
    )

