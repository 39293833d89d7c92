"""Hugging Face transformer families compile once and match eager at dynamic (B, L).

Each family is built from a tiny config with random weights
(kiln/examples/hf_models.py), exported with dynamic batch and sequence, and
compared with PyTorch eager at several shapes, L = 2 and the longest
sequence included, without recompiling.  The fallback count is asserted:
0 for every family (BERT called with a padding mask included: its
``aten.index.Tensor``, advanced indexing of the mask, is a kiln gather since issue 43).
"""

import pytest
import torch

import kiln
from kiln.compiler import compilation_count
from kiln.examples import hf_models

SHAPES = [(1, 2), (3, 17), (16, 64)]  # (B, L): L's min, a middle value, its max
EXPECTED_FALLBACKS = {"gpt2": 0, "bert": 0, "bert_padded": 0, "llama": 0, "qwen2": 0}


@pytest.mark.parametrize("family", sorted(EXPECTED_FALLBACKS))
def test_family_compiles_once_and_matches_eager(family):
    module, args, shapes = hf_models.FAMILIES[family]()
    _, report = kiln.import_torch(module, args, dynamic_shapes=shapes, with_report=True)
    assert report.fallbacks == EXPECTED_FALLBACKS[family], report.format()
    assert report.symbols == {"B": [1, hf_models.MAX_B], "L": [2, hf_models.MAX_L]}

    before = compilation_count()
    compiled = kiln.compile(module, args, dynamic_shapes=shapes)
    after_compile = compilation_count()
    gen = torch.Generator().manual_seed(7)
    for b, length in SHAPES:
        inputs = [torch.randint(0, hf_models.VOCAB, (b, length), generator=gen)]
        if len(args) == 2:  # a padding mask: random padding, the first token always real
            mask = (torch.rand(b, length, generator=gen) > 0.3).long()
            mask[:, 0] = 1
            inputs.append(mask)
        with torch.inference_mode():
            expected = module(*inputs)
        got = compiled(*inputs)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert compilation_count() == after_compile, "a new shape recompiled"
    assert after_compile > before
