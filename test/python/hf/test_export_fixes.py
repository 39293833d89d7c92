"""The export fixes get Hugging Face models through torch-mlir's importer.

Each family fails in torch-mlir's own ``export_and_import`` without the
fixes (asserted, so the fixes stay necessary and the test can fail), and
imports with them.
"""

import pytest
import torch
import transformers  # a test dependency (pyproject's `test` extra)
from torch.export import Dim, export
from torch_mlir import fx

from kiln.examples.hf_models import LastHiddenState
from kiln.frontends.export_fixes import prepare_exported_program


def _gpt2():
    return transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=50, n_positions=64))


def _bert():
    return transformers.BertModel(
        transformers.BertConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=32, intermediate_size=64,
                                vocab_size=50, max_position_embeddings=64)
    )


def _llama():
    return transformers.LlamaModel(
        transformers.LlamaConfig(num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
                                 intermediate_size=64, vocab_size=50, max_position_embeddings=64)
    )


FAMILIES = {
    "gpt2": (_gpt2, "Cannot view a tensor"),
    "bert": (_bert, "Could not find state mapping for buffer"),
    "llama": (_llama, "Could not find state mapping for buffer"),
}


def _export(factory):
    torch.manual_seed(0)
    model = LastHiddenState(factory()).eval()
    ids = torch.randint(0, 50, (2, 8))
    shapes = {"input_ids": {0: Dim("B", min=1, max=8), 1: Dim("L", min=2, max=32)}}
    return export(model, (ids,), dynamic_shapes=shapes)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_torch_mlir_import_fails_without_the_fixes(family):
    factory, message = FAMILIES[family]
    with pytest.raises(Exception, match=message):
        fx.export_and_import(_export(factory), output_type="raw", import_symbolic_shape_expressions=True)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_torch_mlir_import_succeeds_with_the_fixes(family):
    factory, _ = FAMILIES[family]
    ep = prepare_exported_program(_export(factory))
    module = fx.export_and_import(ep, output_type="raw", import_symbolic_shape_expressions=True, decomposition_table={})
    text = str(module)
    assert "torch.aten.embedding" in text
    # scaled_dot_product_attention is kept whole, for kiln.attention.
    assert "torch.aten.scaled_dot_product_attention" in text
