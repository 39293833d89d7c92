"""kiln.compile_lm writes the KV cache in place (issue 37): the step's cache inputs are donated to
``kiln.update_slice`` ops, nothing of the cache's length is allocated per step, and the caller's arrays
hold the keys and values ``transformers`` computes."""

import re

import numpy as np
import pytest
import torch

import kiln
from kiln.lm.generate import KVCache

VOCAB, LAYERS, KV_HEADS, HEAD_DIM = 128, 2, 2, 16


def _llama():
    import transformers as t

    t.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = t.LlamaConfig(num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=KV_HEADS,
                           hidden_size=64, intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=512,
                           initializer_range=0.2)
    model = t.LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    return model


@pytest.fixture(scope="module")
def compiled():
    model = _llama()
    return model, {n: kiln.compile_lm(model, max_batch=2, max_len=n, keep_ir=True) for n in (64, 256)}


def test_cache_update_is_an_in_place_kiln_op(compiled):
    """The graph keeps one ``kiln.update_slice`` per layer's keys and values, each marked ``in_place`` once
    partitioned (the kernel writes the donated cache input), with no fallback; only the logits come back."""
    _, lms = compiled
    lm = lms[64]
    assert lm.report()["fallback_ops"] == 0
    assert len(lm.step.output_names) == 1  # the logits only: no keys or values come back
    pattern = re.compile(r'= "?kiln\.update_slice\b')
    assert len([ln for ln in lm.step.ir["optimized"].splitlines() if pattern.search(ln)]) == 2 * LAYERS
    updates = [ln for ln in lm.step.ir["partitioned"].splitlines() if pattern.search(ln)]
    assert len(updates) == 2 * LAYERS, updates
    assert all("in_place = true" in ln for ln in updates), updates


def test_caches_are_donated_and_the_arena_does_not_grow_with_max_len(compiled):
    _, lms = compiled
    plans = {n: lm.step.runtime.prepared.plan for n, lm in lms.items()}
    for n, plan in plans.items():
        assert len(plan.inplace) == 2 * LAYERS and len(plan.donated) == 2 * LAYERS, n
        # A donated cache is neither an arena buffer nor a fresh output.
        assert not set(plan.inplace) & (set(plan.buffers) | set(plan.outputs)), n
        assert lms[n].step.runtime.executor._copy_back == [], n
    # No buffer's size depends on the cache's length: the same sizes, so the same bytes without reuse.
    assert sorted(b["size"] for b in plans[64].buffers.values()) == \
        sorted(b["size"] for b in plans[256].buffers.values())
    for binding in ({"B": 1, "L": 1, "P": 1}, {"B": 2, "L": 1, "P": 2}, {"B": 2, "L": 1, "P": 40},
                    {"B": 1, "L": 1, "P": 63}, {"B": 2, "L": 20, "P": 1}, {"B": 2, "L": 7, "P": 30}):
        assert plans[64].sizes_at(binding)[1] == plans[256].sizes_at(binding)[1], binding
        if binding["L"] == 1:
            # A decode step's arena is the same too.  (A prompt's can differ by reuse alone: the planner
            # packs the same buffers by the symbols' ranges, and P's range is the cache's length.)
            assert plans[64].sizes_at(binding)[0] == plans[256].sizes_at(binding)[0], binding


def test_the_callers_cache_holds_transformers_keys_and_values(compiled):
    """After the prompt and two decoded tokens, the cache rows (the caller's arrays, same buffers) hold the
    keys and values of ``transformers``' own cache at slots 1 .. P, and the null slot and the rest are untouched."""
    model, lms = compiled
    lm = lms[64]
    ids = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(3))
    before = [a.ctypes.data for a in lm.cache.keys + lm.cache.values]
    for a in lm.cache.keys + lm.cache.values:
        a.fill(0)
    got = lm.generate(ids, max_new_tokens=3)
    assert [a.ctypes.data for a in lm.cache.keys + lm.cache.values] == before
    with torch.no_grad():
        out = model(got[:, :-1], use_cache=True)  # the prompt and the two tokens fed back (the third is not)
    filled = 7 + 2
    for layer in range(LAYERS):
        want_k = out.past_key_values.layers[layer].keys.numpy()
        want_v = out.past_key_values.layers[layer].values.numpy()
        k, v = lm.cache.keys[layer], lm.cache.values[layer]
        np.testing.assert_allclose(k[:2, :, 1:1 + filled], want_k, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(v[:2, :, 1:1 + filled], want_v, rtol=1e-4, atol=1e-4)
        assert (k[:, :, 0] == 0).all() and (k[:, :, 1 + filled:] == 0).all()
        assert (v[:, :, 0] == 0).all() and (v[:, :, 1 + filled:] == 0).all()


def test_max_len_64_and_256_generate_the_same_tokens(compiled):
    model, lms = compiled
    ids = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=0)
    assert len(set(want[0, 5:].tolist())) > 2
    for n, lm in lms.items():
        assert lm.generate(ids, max_new_tokens=16).tolist() == want.tolist(), n
    assert isinstance(lms[64].cache, KVCache)
