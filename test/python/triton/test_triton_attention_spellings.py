"""The bench block with attention written out (GPT-2's eager spelling, see
``test/python/transforms/test_attention_spellings.py``) through the Triton
graph pipeline (``kiln-default-triton``: ``kiln-simplify``'s ``attention``
pattern, packed attention off) and ``kiln.compile(..., device="cuda")`` in
interpreter mode: the same 7 kernels as the ``scaled_dot_product_attention``
spelling (test_e2e), one of them the flash-attention kernel, and eager's
numbers at several (B, L).  ``kiln.compile(device="cuda")`` itself runs no
graph pipeline today, so the test runs it first."""

import sys
from pathlib import Path

import torch
from helpers import check

import kiln
from kiln._mlir import ir
from kiln.frontends.torch_import import import_torch
from kiln.pipelines.pipeline import Pipeline

sys.path.insert(0, str(Path(__file__).parents[1] / "transforms"))
from test_attention_spellings import WrittenOut, transformer_block  # noqa: E402


def test_written_out_attention_is_one_triton_kernel():
    ref, args, dyn = transformer_block()
    module = WrittenOut().eval()
    module.load_state_dict(ref.state_dict())
    ir_module = import_torch(module, args, dyn)
    with ir_module.context, ir.Location.unknown():
        Pipeline.named("kiln-default-triton", without=["kiln-fuse"]).run(ir_module)
    model = kiln.compile(ir_module, device="cuda", fuse=True)
    patterns = [s.kernel.spec.pattern for s in model.schedule]
    assert len(patterns) == 7 and patterns.count("kiln.attention") == 1, patterns
    gen = torch.Generator().manual_seed(3)
    for shape in [(1, 1, 256), (2, 7, 256), (1, 33, 256)]:
        x = torch.randn(*shape, generator=gen)
        with torch.no_grad():
            want = module(x)
        check(model(x), want, "f32")
