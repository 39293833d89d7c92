"""LLaMA-family decoders with grouped-query attention (fewer k / v heads than
q heads) and RMS norm: ``kiln-simplify`` turns every RMSNorm into one
``kiln.rms_norm`` and every attention into one ``kiln.attention`` over the
k / v heads as they are (transformers' ``repeat_kv`` is not materialized:
no expand of k or v survives), and the compiled model matches eager at the
min, a middle and the max of B and L.  Tiny configs, random weights, right
padding different per row; LLaMA through transformers' SDPA attention
(``repeat_kv`` then SDPA), Qwen2 through its eager attention (the matmuls
written out).  Marked slow: each compile is tens of seconds of CPU."""

import collections
import re

import pytest
import torch
from torch.export import Dim

import kiln

transformers = pytest.importorskip("transformers")

LAYERS = 2
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16
COMMON = dict(hidden_size=HEADS * HEAD_DIM, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
              num_key_value_heads=KV_HEADS, intermediate_size=128, vocab_size=128, max_position_embeddings=512)
CONFIGS = {
    "llama-sdpa": (lambda: transformers.LlamaModel(transformers.LlamaConfig(**COMMON)), "sdpa"),
    "qwen2-eager": (lambda: transformers.Qwen2Model(transformers.Qwen2Config(**COMMON)), "eager"),
}
B_MIN, B_MAX, L_MIN, L_MAX = 1, 8, 2, 64
SHAPES = [(B_MIN, L_MIN), (3, 17), (B_MAX, L_MAX)]


class LastHiddenState(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state


def _model(name):
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    make, impl = CONFIGS[name]
    model = make()
    model.config._attn_implementation = impl
    return LastHiddenState(model.eval()).eval()


def _inputs(b, seq):
    g = torch.Generator().manual_seed(b * 100 + seq)
    ids = torch.randint(0, 128, (b, seq), generator=g)
    mask = torch.ones(b, seq, dtype=torch.int64)
    for row in range(1, b):
        mask[row, seq - row % max(seq // 2, 1):] = 0  # right padding, row 0 unpadded
    return ids, mask


def _dynamic():
    b, seq = Dim("B", min=B_MIN, max=B_MAX), Dim("L", min=L_MIN, max=L_MAX)
    return ({0: b, 1: seq}, {0: b, 1: seq})


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_gqa_decoder_has_rms_norm_and_grouped_attention_and_matches(name):
    module = _model(name)
    compiled = kiln.compile(module, _inputs(2, 16), _dynamic(), keep_ir=True, fallback=False)
    text = str(compiled.ir["optimized"]).split("{-#")[0]
    ops = collections.Counter(re.findall(r'"(kiln\.[a-z_0-9]+)"', text))
    # Two norms a layer and the final one; one attention a layer.
    assert ops["kiln.rms_norm"] == 2 * LAYERS + 1, ops
    assert ops["kiln.attention"] == LAYERS and ops["kiln.softmax"] == 0, ops
    for line in text.splitlines():
        if '"kiln.attention"' in line:
            operand_types = line.split(" : (", 1)[1].split(") -> ", 1)[0]
            heads = re.findall(r'!kiln\.tensor<\["B", (\d+), "L", \d+\]', operand_types)
            assert heads[:3] == [str(HEADS), str(KV_HEADS), str(KV_HEADS)], line
        # repeat_kv's expand of k / v to [B, Hkv, group, L, D]: gone.
        assert not re.search(r'"kiln\.expand".*-> !kiln\.tensor<\["B", \d+, \d+, "L", \d+\]', line), line
    for b, seq in SHAPES:
        ids, mask = _inputs(b, seq)
        with torch.no_grad():
            want = module(ids, mask)
        got = compiled(ids, mask)
        got = got[0] if isinstance(got, (tuple, list)) else got
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"{name} at (B, L) = ({b}, {seq})")
