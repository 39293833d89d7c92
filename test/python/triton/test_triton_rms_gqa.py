"""RMS norm and grouped-query attention through the Triton graph pipeline
(``kiln-default-triton``): LLaMA's RMSNorm and ``repeat_kv`` + SDPA become
``kiln.rms_norm`` (decomposed back into primitives for Triton's reduction
kernels) and one ``kiln.attention`` over the 2 k / v heads (the
flash-attention kernel reads k / v entry ``bh // group``), and
``kiln.compile(..., device="cuda")`` in interpreter mode matches eager at
several (B, L)."""

import torch
from helpers import check
from torch.export import Dim

import kiln
from kiln._mlir import ir
from kiln.frontends.torch_import import import_torch
from kiln.pipelines.pipeline import Pipeline


class Block(torch.nn.Module):
    """RMSNorm, then q / k / v projections with 4 q and 2 k / v heads, repeat_kv, causal SDPA."""

    def __init__(self, hidden=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, hidden // heads
        self.weight = torch.nn.Parameter(torch.randn(hidden))
        self.q = torch.nn.Linear(hidden, heads * self.d, bias=False)
        self.kv = torch.nn.Linear(hidden, 2 * kv_heads * self.d, bias=False)

    def forward(self, x):
        b, seq, _ = x.shape
        h = self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        q = self.q(h).view(b, seq, self.heads, self.d).transpose(1, 2)
        k, v = self.kv(h).view(b, seq, 2, self.kv_heads, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        g = self.heads // self.kv_heads
        k = k[:, :, None].expand(b, self.kv_heads, g, seq, self.d).reshape(b, self.heads, seq, self.d)
        v = v.repeat_interleave(g, dim=1)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).reshape(b, seq, -1)


def test_rms_norm_and_gqa_attention_on_triton():
    torch.manual_seed(0)
    module = Block().eval()
    dyn = ({0: Dim("B", min=1, max=4), 1: Dim("L", min=1, max=64)},)
    ir_module = import_torch(module, (torch.randn(2, 8, 32),), dyn)
    with ir_module.context, ir.Location.unknown():
        Pipeline.named("kiln-default-triton", without=["kiln-fuse"]).run(ir_module)
    text = str(ir_module)
    assert '"kiln.rms_norm"' not in text and '"kiln.expand"' not in text, text
    attention = [line for line in text.splitlines() if '"kiln.attention"' in line]
    assert len(attention) == 1 and '["B", 2, "L", 8]' in attention[0], attention
    model = kiln.compile(ir_module, device="cuda", fuse=True)
    assert [s.kernel.spec.pattern for s in model.schedule].count("kiln.attention") == 1
    gen = torch.Generator().manual_seed(3)
    for shape in [(1, 1, 32), (2, 7, 32), (4, 64, 32)]:
        x = torch.randn(*shape, generator=gen)
        with torch.no_grad():
            want = module(x)
        check(model(x), want, "f32")
