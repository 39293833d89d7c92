"""Export a ``transformers`` decoder-only LM as one kiln graph with its KV cache as plain tensors.

kiln compiles graphs whose inputs and outputs are tensors, so the cache
crosses the graph boundary as one ``past_k`` / ``past_v`` tensor per layer,
``[B, Hkv, P, D]``.  Inside ``forward`` the wrapper builds the model's own
:class:`transformers.DynamicCache` from those tensors and calls the model
with it, so rotary embeddings, grouped-query attention and the causal and
padding masks over ``P + L`` positions are the model's own code, traced by
``torch.export`` with ``B``, ``L`` and ``P`` symbolic.  Nothing here is
specific to one family: every ``*ForCausalLM`` taking ``cache=``,
``position_ids=`` and ``logits_to_keep=`` exports the same way.

One graph (:class:`Step`) serves the prompt (``L`` tokens) and each decoded
token (``L = 1``): ``(input_ids, past_mask, new_mask, position_ids, k_0, v_0,
...)`` -> ``logits [B, V]`` (the last position's, what generation reads).
``k_i`` / ``v_i`` are the whole preallocated cache rows ``[B, Hkv, MAX, D]``
(``MAX`` static); the model's cache layers (``_layer_class()``) write the
new keys and values at ``[P, P + L)`` with ``index_copy_`` (kiln imports it as
``kiln.update_slice``, donated: the caller's arrays are written in place,
nothing is returned or copied back) and attend over the first ``P + L``
positions only.  The past always holds at least the cache's null slot (a dim
of size 0 cannot be symbolic in torch.export).
"""

from __future__ import annotations

import functools

import torch

from ..errors import UnsupportedError

__all__ = ["Step", "cache_geometry", "export_dims"]


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


@functools.cache
def _layer_class():
    """The in-place cache layer class, defined on first use: importing ``transformers`` is slow and optional."""
    from transformers.cache_utils import DynamicLayer

    class _InPlaceLayer(DynamicLayer):
        """A ``transformers`` cache layer over a preallocated buffer ``[B, Hkv, MAX, D]`` holding ``past`` positions.

        ``update`` writes the new keys and values at ``[past, past + L)``
        in place and returns the first ``past + L`` positions, what
        attention reads.  Both are spelled with an index (``index_copy_``,
        ``index_select`` of an ``arange``), not a slice: a slice view ending
        at the symbolic ``P + L`` of the static ``MAX`` makes torch.export
        guard ``P + L != MAX`` (its contiguity check of the view), which
        would narrow ``P`` and ``L`` below the cache's length.
        """

        def __init__(self, keys, values, past):
            super().__init__()
            self.buffers, self.past = (keys, values), past
            # What the model reads before the update (the past length, for masks and positions).
            self.keys, self.values = keys[:, :, :past], values[:, :, :past]
            self.is_initialized = True
            self.device, self.dtype = keys.device, keys.dtype

        def update(self, key_states, value_states, *args, **kwargs):
            keys, values = self.buffers
            written = torch.arange(self.past, self.past + key_states.shape[-2])
            keys.index_copy_(2, written, key_states)
            values.index_copy_(2, written, value_states)
            seen = torch.arange(self.past + key_states.shape[-2])
            self.keys, self.values = keys.index_select(2, seen), values.index_select(2, seen)
            return self.keys, self.values

    return _InPlaceLayer


def _cache_over(buffers: tuple[torch.Tensor, ...], past):
    """The model's own ``DynamicCache`` whose layers write into ``buffers`` (k_0, v_0, k_1, v_1, ...)."""
    from transformers import DynamicCache

    layer = _layer_class()
    cache = DynamicCache()
    cache.layers = [layer(buffers[2 * i], buffers[2 * i + 1], past) for i in range(len(buffers) // 2)]
    cache.layer_class_to_replicate = None  # every layer is given: none is created on the fly
    return cache


class Step(torch.nn.Module):
    """``L`` new tokens over a past of ``P`` positions (see the module docstring).

    ``forward(input_ids [B, L], past_mask [B, P], new_mask [B, L],
    position_ids [B, L], k_0, v_0, k_1, v_1, ...)`` with ``k_i`` / ``v_i``
    the cache rows ``[B, Hkv, MAX, D]`` (positions ``[0, P)`` filled)
    returns ``logits [B, V]`` and writes the new keys and values at
    ``[P, P + L)`` of ``k_i`` / ``v_i`` (mutated inputs: donated buffers in
    kiln).  The mask comes in two parts because torch.export cannot name the
    dim ``P + L`` of one mask (a derived dim is a function of one dim).
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, past_mask, new_mask, position_ids, *cache_rows):
        cache = _cache_over(cache_rows, past_mask.shape[1])
        mask = torch.cat([past_mask, new_mask], dim=1)
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                         cache=cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]


def export_dims(max_batch: int, max_len: int):
    """The ``torch.export`` dims: ``B`` in [1, max_batch], ``L`` in [1, max_len - 1], ``P`` in [1, max_len - 1].

    ``P`` counts the cache's first slot, a null position every mask hides
    (:class:`kiln.lm.generate.KVCache`): a past is never empty, since a dim
    of size 0 cannot be symbolic in torch.export, and the prompt and each
    decoded token run through the same graph.
    """
    from torch.export import Dim

    if max_len < 3:
        raise UnsupportedError(f"kiln.compile_lm: max_len must be at least 3, got {max_len}")
    # At least 4: torch.export has no dim of range [1, 1], and with the range
    # [1, 2] (max_batch 1, example batch 2) it left the past inputs' batch
    # unmerged with B (s56 vs B: cat and attention fell back).  The cache,
    # allocated for max_batch rows, bounds the batch anyway.
    batch = Dim("B", min=1, max=max(max_batch, 4))
    length = Dim("L", min=1, max=max_len - 1)
    past = Dim("P", min=1, max=max_len - 1)
    return batch, length, past
