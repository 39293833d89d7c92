"""Hugging Face decoders and encoders with ``attn_implementation="eager"``
(attention written out in Python, as older checkpoints and many users run
them): ``kiln-simplify`` recognizes each layer's attention as one
``kiln.attention`` (GPT-2's scaled matmul and combined mask, LLaMA's
``repeat_kv`` GQA, BERT's additive padding mask), and the compiled model
matches eager at the min, a middle and the max of B and L.  Tiny configs,
random weights, right padding different per row.  Marked slow (about 75 s
of CPU for the three compiles), as the decoder-family tests are."""

import collections
import re

import pytest
import torch
from torch.export import Dim

import kiln
from kiln._mlir import ir
from kiln.frontends.torch_import import import_torch
from kiln.pipelines.pipeline import Pipeline

transformers = pytest.importorskip("transformers")

LAYERS = 2
COMMON = dict(num_hidden_layers=LAYERS, num_attention_heads=4, vocab_size=128, max_position_embeddings=512)
CONFIGS = {
    "gpt2": lambda: transformers.GPT2Model(transformers.GPT2Config(n_embd=64, n_layer=LAYERS, n_head=4, vocab_size=128,
                                                                   n_positions=512)),
    "llama": lambda: transformers.LlamaModel(transformers.LlamaConfig(hidden_size=64, num_key_value_heads=2,
                                                                      intermediate_size=128, **COMMON)),
    "bert": lambda: transformers.BertModel(transformers.BertConfig(hidden_size=64, intermediate_size=128, **COMMON)),
}
SHAPES = [(1, 2), (3, 17), (8, 64)]


class LastHiddenState(torch.nn.Module):
    def __init__(self, model, **kwargs):
        super().__init__()
        self.model, self.kwargs = model, kwargs

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **self.kwargs).last_hidden_state


def _model(name):
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = CONFIGS[name]()
    model.config._attn_implementation = "eager"
    return LastHiddenState(model.eval(), **({} if name == "bert" else {"use_cache": False})).eval()


def _inputs(b, seq):
    g = torch.Generator().manual_seed(b * 100 + seq)
    ids = torch.randint(0, 128, (b, seq), generator=g)
    mask = torch.ones(b, seq, dtype=torch.int64)
    for row in range(b):
        mask[row, seq - row % max(seq // 2, 1):] = 0 if row else 1  # right padding, row 0 unpadded
    return ids, mask


def _dynamic():
    b, seq = Dim("B", min=1, max=8), Dim("L", min=2, max=64)
    return ({0: b, 1: seq}, {0: b, 1: seq})


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_hf_eager_attention_is_recognized_and_matches(name):
    module = _model(name)
    args = _inputs(2, 16)
    ir_module = import_torch(module, args, _dynamic())
    with ir_module.context, ir.Location.unknown():
        Pipeline.parse("builtin.module(kiln-infer-shapes,kiln-fold-constants,kiln-simplify)").run(ir_module)
    ops = collections.Counter(re.findall(r'"(kiln\.[a-z_0-9]+)"', str(ir_module).split("{-#")[0]))
    assert ops["kiln.attention"] == LAYERS and ops["kiln.softmax"] == 0, ops
    compiled = kiln.compile(module, args, _dynamic(), fallback=False)
    for b, seq in SHAPES:
        ids, mask = _inputs(b, seq)
        with torch.no_grad():
            want = module(ids, mask)
        got = compiled(ids, mask)
        keep = mask.bool()  # padded rows' outputs are don't-care in HF (and differ by mask convention)
        torch.testing.assert_close(got[keep], want[keep], rtol=2e-4, atol=2e-4)
