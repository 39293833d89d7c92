"""Export a ``transformers`` decoder-only LM as two kiln graphs with its KV cache as plain tensors.

kiln compiles graphs whose inputs and outputs are tensors, so the cache
crosses the graph boundary as one ``past_k`` / ``past_v`` tensor per layer,
``[B, Hkv, P, D]``.  Inside ``forward`` the wrapper builds the model's own
:class:`transformers.DynamicCache` from those tensors and calls the model
with it, so rotary embeddings, grouped-query attention and the causal and
padding masks over ``P + L`` positions are the model's own code, traced by
``torch.export`` with ``P`` symbolic.  Nothing here is specific to one
family: every ``*ForCausalLM`` taking ``cache=``, ``position_ids=`` and
``logits_to_keep=`` exports the same way.

Two graphs, because a dim of size 0 cannot be symbolic in ``torch.export``:

* **prefill**: ``(input_ids [B, L], attention_mask [B, L], position_ids [B, L])``
  -> ``(logits [B, V], k_0, v_0, ..., k_{n-1}, v_{n-1})`` with ``k_i`` ``[B, Hkv, L, D]``;
* **decode**: ``(input_ids [B, 1], attention_mask [B, P+1], position_ids [B, 1],
  past_k_0, past_v_0, ...)`` -> the same outputs for the one new position.

Both return only the *new* positions' keys and values (never the whole
cache) and only the last position's logits (what generation reads).
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedError

__all__ = ["DecodeStep", "PrefillStep", "cache_geometry", "export_dims"]


def cache_geometry(config) -> tuple[int, int, int]:
    """``(layers, kv_heads, head_dim)`` of a decoder config, under each family's names.

    The names differ between families (GPT-2's ``n_layer`` / ``n_head``);
    ``head_dim`` is explicit in some configs (Gemma) and ``hidden / heads``
    elsewhere.  Raises :class:`~kiln.errors.UnsupportedError` when the config
    names none of them.
    """
    config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config

    def first(*names):
        for name in names:
            value = getattr(config, name, None)
            if value is not None:
                return int(value)
        return None

    layers = first("num_hidden_layers", "n_layer", "num_layers")
    heads = first("num_attention_heads", "n_head")
    hidden = first("hidden_size", "n_embd", "d_model")
    kv_heads = first("num_key_value_heads", "n_head_kv", "multi_query_group_num") or heads
    if getattr(config, "multi_query", False) and not getattr(config, "new_decoder_architecture", False):
        kv_heads = 1  # Falcon-7B style multi-query attention
    head_dim = first("head_dim") or (hidden // heads if hidden and heads else None)
    if None in (layers, kv_heads, head_dim):
        raise UnsupportedError(
            f"kiln.compile_lm: cannot read the cache geometry (layers, key-value heads, head dim) from "
            f"{type(config).__name__}")
    return layers, kv_heads, head_dim


def _cache_from(past: tuple[torch.Tensor, ...]):
    """The model's own ``DynamicCache`` holding ``past`` (k_0, v_0, k_1, v_1, ...)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer in range(len(past) // 2):
        cache.update(past[2 * layer], past[2 * layer + 1], layer)
    return cache


def _new_positions(cache, length: int, whole: bool) -> list[torch.Tensor]:
    """The last ``length`` positions of every layer's keys and values, k_0, v_0, ...

    ``whole``: the cache held no past, so everything is new -- no slice, whose
    start ``-L`` would be a symbolic negative index.
    """
    out = []
    for layer in cache.layers:
        if whole:
            out += [layer.keys, layer.values]
        else:
            out += [layer.keys[:, :, -length:], layer.values[:, :, -length:]]
    return out


class _Step(torch.nn.Module):
    """One forward of ``model`` with the cache as tensors (see the module docstring)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def _run(self, input_ids, attention_mask, position_ids, past):
        cache = _cache_from(past)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         cache=cache, use_cache=True, logits_to_keep=1)
        returned = getattr(out, "past_key_values", None) or getattr(out, "cache", None) or cache
        return (out.logits[:, -1, :], *_new_positions(returned, input_ids.shape[1], not past))


class PrefillStep(_Step):
    """The prompt: no past; returns the last logits and every layer's K/V of the ``L`` positions."""

    def forward(self, input_ids, attention_mask, position_ids):
        return self._run(input_ids, attention_mask, position_ids, ())


class DecodeStep(_Step):
    """One new token over a past of ``P`` positions (``past`` = k_0, v_0, k_1, v_1, ...)."""

    def forward(self, input_ids, attention_mask, position_ids, *past):
        return self._run(input_ids, attention_mask, position_ids, past)


def export_dims(max_batch: int, max_len: int):
    """The ``torch.export`` dims: ``B`` in [1, max_batch], ``L`` in [2, max_len], ``P`` in [1, max_len - 1].

    ``L`` starts at 2 because torch.export specializes a dim seen as 1; a
    one-token prompt runs through the decode graph's path instead (see
    :class:`kiln.lm.generate.CompiledLM`).
    """
    from torch.export import Dim

    if max_len < 3:
        raise UnsupportedError(f"kiln.compile_lm: max_len must be at least 3, got {max_len}")
    batch = Dim("B", min=1, max=max_batch)
    length = Dim("L", min=2, max=max_len)
    past = Dim("P", min=1, max=max_len - 1)
    return batch, length, past

