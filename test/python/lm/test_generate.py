"""kiln.compile_lm: decoder-only LMs with their KV cache generate the tokens of ``transformers`` (issue 37).

Tiny random configs (2 layers, hidden 64, grouped-query attention where the
family has it), compiled once per family.  Greedy decoding over 32 new tokens
must give exactly the tokens of ``transformers``' ``generate(do_sample=False)``
at B = 1 and at B = 3 with prompts of different lengths (left padding and a
mask), with 0 fallbacks in either graph.  Sampling is reproducible from a seed
and keeps to the top-k; streaming yields generate's tokens.
"""

import numpy as np
import pytest
import torch

import kiln

VOCAB, NEW = 128, 32
MAX_BATCH, MAX_LEN = 4, 64


def _model(family):
    import transformers as t

    t.logging.set_verbosity_error()
    # initializer_range 0.2: random weights that small give one token over and
    # over, which a wrong cache or mask would reproduce as well.
    kw = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=128, vocab_size=VOCAB,
              max_position_embeddings=128, initializer_range=0.2)
    gqa = dict(kw, num_key_value_heads=2)
    model = {
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**gqa)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**gqa)),
        "mistral": lambda: t.MistralForCausalLM(t.MistralConfig(**gqa)),
        "phi": lambda: t.PhiForCausalLM(t.PhiConfig(**kw)),
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=VOCAB,
                                                       n_positions=128, initializer_range=0.2)),
    }[family]()
    # Generate all 32 tokens: the configs' default eos id (2 for LLaMA) would end rows early.
    model.generation_config.eos_token_id = None
    return model


# Mistral and Phi under slow: the same loop, 2 more compiles (`-m "not slow"` leaves them out).
@pytest.fixture(scope="module", params=["llama", "qwen2", "gpt2", pytest.param("mistral", marks=pytest.mark.slow),
                                        pytest.param("phi", marks=pytest.mark.slow)])
def compiled(request):
    torch.manual_seed(0)
    model = _model(request.param).eval()
    return request.param, model, kiln.compile_lm(model, max_batch=MAX_BATCH, max_len=MAX_LEN)


def _reference(model, ids, mask=None):
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0)


def test_no_fallbacks(compiled):
    family, _, lm = compiled
    report = lm.report()
    assert report["fallback_ops"] == 0, (family, report["step"]["fallback"])


def test_greedy_b1_matches_transformers(compiled):
    family, model, lm = compiled
    ids = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(1))
    want = _reference(model, ids)
    got = lm.generate(ids, max_new_tokens=NEW)
    assert isinstance(got, torch.Tensor) and got.shape == (1, 5 + NEW)
    assert len(set(want[0, 5:].tolist())) > 2, "the reference repeats a token: the test could not fail"
    assert got.tolist() == want.tolist(), family


def test_greedy_b3_left_padded_matches_transformers(compiled):
    family, model, lm = compiled
    gen = torch.Generator().manual_seed(2)
    lengths = [9, 4, 1]  # the longest, a middle one and a one-token prompt
    ids = torch.zeros((3, 9), dtype=torch.long)
    mask = torch.zeros((3, 9), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, 9 - n:] = torch.randint(1, VOCAB, (n,), generator=gen)
        mask[row, 9 - n:] = 1
    want = _reference(model, ids, mask)
    got = lm.generate(ids.numpy(), attention_mask=mask.numpy(), max_new_tokens=NEW)
    assert isinstance(got, np.ndarray)
    assert got.tolist() == want.tolist(), family
    # Each padded row also gives what its prompt alone gives.
    alone = lm.generate(ids[2:, 8:], max_new_tokens=NEW)
    assert alone[0, 1:].tolist() == got[2, 9:].tolist()


def test_stream_yields_generate_tokens(compiled):
    _, _, lm = compiled
    ids = np.random.default_rng(3).integers(0, VOCAB, (2, 6))
    steps = list(lm.stream(ids, max_new_tokens=8))
    assert len(steps) == 8 and all(s.shape == (2,) for s in steps)
    assert np.array_equal(np.stack(steps, 1), lm.generate(ids, max_new_tokens=8)[:, 6:])
    assert lm.timings["ttft_s"] > 0 and len(lm.timings["decode_s"]) == 7


def test_sampling_is_seeded_and_keeps_to_top_k(compiled):
    _, model, lm = compiled
    ids = np.random.default_rng(4).integers(0, VOCAB, (2, 5))
    first = lm.generate(ids, max_new_tokens=12, do_sample=True, temperature=0.8, top_k=3, seed=7)
    again = lm.generate(ids, max_new_tokens=12, do_sample=True, temperature=0.8, top_k=3, seed=7)
    other = lm.generate(ids, max_new_tokens=12, do_sample=True, temperature=0.8, top_k=3, seed=8)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)
    # Each sampled token is among the 3 best of the logits the step saw.
    steps = lm.stream(ids, max_new_tokens=12, do_sample=True, temperature=0.8, top_k=3, seed=7)
    for step, token in enumerate(steps):
        assert np.array_equal(token, first[:, 5 + step])
    prefix = torch.from_numpy(first[:, :5])
    for step in range(12):
        with torch.no_grad():
            logits = model(prefix).logits[:, -1].numpy()
        top = np.argsort(-logits, axis=-1)[:, :3]
        assert all(first[r, 5 + step] in top[r] for r in range(2)), step
        prefix = torch.from_numpy(first[:, :6 + step])


def test_eos_ends_rows(compiled):
    _, model, lm = compiled
    ids = torch.randint(0, VOCAB, (2, 4), generator=torch.Generator().manual_seed(5))
    free = lm.generate(ids, max_new_tokens=NEW)
    eos = int(free[0, 4 + 3])  # row 0's fourth token: the row ends there
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=NEW, do_sample=False, eos_token_id=eos, pad_token_id=0)
    got = lm.generate(ids, max_new_tokens=NEW, eos_token_id=eos, pad_token_id=0)
    assert got.tolist() == want.tolist()


def test_errors_name_the_limit(compiled):
    _, _, lm = compiled
    with pytest.raises(kiln.ShapeError, match="max_len=64"):
        lm.generate(np.zeros((1, 40), np.int64), max_new_tokens=30)
    with pytest.raises(kiln.ShapeError, match="max_batch=4"):
        lm.generate(np.zeros((5, 4), np.int64), max_new_tokens=2)
    with pytest.raises(kiln.ShapeError, match=r"token id 100000, outside the vocabulary \[0, "):
        lm.generate(np.array([[1, 2, 100000]]), max_new_tokens=2)
    with pytest.raises(kiln.ShapeError, match="token id -1"):
        lm.generate(np.array([[-1, 2]]), max_new_tokens=2)
