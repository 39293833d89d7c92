"""Small Hugging Face transformers, built from configs with random weights.

Each factory returns ``(module, example_args, dynamic_shapes)`` for
``kiln.compile`` / ``kiln-import pkg.module:factory``: the model wrapped to
take ``input_ids`` and return the last hidden state, with a dynamic batch
``B`` and sequence ``L``.  No hub download: the configs are tiny and the
weights random (seeded).

    kiln-import examples.hf_models:llama --report
"""

from __future__ import annotations

import torch

VOCAB = 128
MAX_B, MAX_L = 16, 64


class LastHiddenState(torch.nn.Module):
    """``input_ids -> last_hidden_state``: how a deployment calls an encoder/decoder body."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).last_hidden_state


class WithPaddingMask(torch.nn.Module):
    """``(input_ids, attention_mask) -> last_hidden_state``: a padded batch (mask 0 = padding)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _wrap(model):
    from torch.export import Dim

    module = LastHiddenState(model).eval()
    ids = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))
    shapes = {"input_ids": {0: Dim("B", min=1, max=MAX_B), 1: Dim("L", min=2, max=MAX_L)}}
    return module, (ids,), shapes


def _transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def gpt2():
    """GPT-2: learned positions, tanh-GELU MLP, causal attention."""
    t = _transformers()
    torch.manual_seed(0)
    cfg = t.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=VOCAB, n_positions=MAX_L,
                       bos_token_id=0, eos_token_id=0)
    return _wrap(t.GPT2Model(cfg))


def bert():
    """BERT: position and token-type embeddings (non-persistent buffers), GELU, padding-free mask."""
    t = _transformers()
    torch.manual_seed(0)
    cfg = t.BertConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=128,
                       vocab_size=VOCAB, max_position_embeddings=MAX_L)
    return _wrap(t.BertModel(cfg))


def llama():
    """LLaMA: RMSNorm, rotary embeddings, SiLU-gated MLP, grouped-query attention (2 KV heads for 4)."""
    t = _transformers()
    torch.manual_seed(0)
    cfg = t.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                        intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=MAX_L)
    return _wrap(t.LlamaModel(cfg))


def bert_padded():
    """BERT called with an ``attention_mask``: the padding mask comes from an input."""
    from torch.export import Dim

    module, (ids,), _ = bert()
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0
    b, length = Dim("B", min=1, max=MAX_B), Dim("L", min=2, max=MAX_L)
    shapes = {"input_ids": {0: b, 1: length}, "attention_mask": {0: b, 1: length}}
    return WithPaddingMask(module.model).eval(), (ids, mask), shapes


def qwen2():
    """Qwen2: LLaMA-like with attention biases and grouped-query attention."""
    t = _transformers()
    torch.manual_seed(0)
    cfg = t.Qwen2Config(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                        intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=MAX_L)
    return _wrap(t.Qwen2Model(cfg))


FAMILIES = {"gpt2": gpt2, "bert": bert, "bert_padded": bert_padded, "llama": llama, "qwen2": qwen2}
