"""The pieces of kiln.compile_lm (issue 37): the deferred-assert import fix, the cache geometry, the logits processing."""

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.frontends.export_fixes import drop_runtime_asserts
from kiln.lm.export import cache_geometry
from kiln.lm.generate import KVCache, _positions, _process_logits


class RepeatKV(torch.nn.Module):
    """transformers' ``repeat_kv`` over ``cat(past, new)``: the guard torch cannot prove for all ``P``."""

    def forward(self, past, new):
        kv = torch.cat([past, new], 2)
        b, h, s, d = kv.shape
        return kv[:, :, None].expand(b, h, 2, s, d).reshape(b, h * 2, s, d)


def test_deferred_asserts_are_dropped_and_the_program_compiles():
    args = (torch.randn(2, 2, 3, 16), torch.randn(2, 2, 1, 16))
    shapes = ({0: Dim("B", min=1, max=4), 2: Dim("P", min=1, max=63)}, {0: Dim("B", min=1, max=4)})
    ep = torch.export.export(RepeatKV(), args, dynamic_shapes=shapes, prefer_deferred_runtime_asserts_over_guards=True)
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.sym_min in targets and torch.ops.aten._assert_scalar.default in targets  # what the importer rejected
    compiled = kiln.compile(ep, args, dynamic_shapes=shapes)
    assert compiled.report()["fallback"]["ops"] == 0
    gen = torch.Generator().manual_seed(0)
    for b, p in [(1, 1), (3, 30), (4, 63)]:
        past, new = torch.randn(b, 2, p, 16, generator=gen), torch.randn(b, 2, 1, 16, generator=gen)
        assert torch.equal(compiled(past, new), RepeatKV()(past, new)), (b, p)


def test_drop_runtime_asserts_keeps_the_computation():
    args = (torch.randn(1, 2, 3, 16), torch.randn(1, 2, 1, 16))
    ep = torch.export.export(RepeatKV(), args, dynamic_shapes=({2: Dim("P", min=1, max=63)}, None),
                             prefer_deferred_runtime_asserts_over_guards=True)
    assert drop_runtime_asserts(ep) >= 1
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.sym_min not in targets and torch.ops.aten._assert_scalar.default not in targets
    assert torch.ops.aten.reshape.default in targets and torch.ops.aten.cat.default in targets
    assert torch.equal(ep.module()(*args), RepeatKV()(*args))
    assert drop_runtime_asserts(ep) == 0


def test_cache_geometry_reads_each_family_names():
    from kiln.bench.torchvision_compat import define_torchvision_schemas

    define_torchvision_schemas()
    import transformers as t

    assert cache_geometry(t.LlamaConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=8,
                                        num_key_value_heads=2)) == (3, 2, 8)
    assert cache_geometry(t.GPT2Config(n_layer=5, n_embd=96, n_head=4)) == (5, 4, 24)
    assert cache_geometry(t.GemmaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                        num_key_value_heads=1, head_dim=32)) == (2, 1, 32)
    with pytest.raises(kiln.UnsupportedError, match="cache geometry"):
        cache_geometry(t.PretrainedConfig())


def test_positions_follow_transformers():
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    assert _positions(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]]


def test_top_k_and_top_p_keep_the_best_tokens():
    logits = np.log(np.array([[0.5, 0.2, 0.15, 0.1, 0.05], [0.05, 0.1, 0.15, 0.2, 0.5]]))
    kept = np.isfinite(_process_logits(logits, 1.0, 2, None))
    assert kept.tolist() == [[True, True, False, False, False], [False, False, False, True, True]]
    # top_p 0.6: 0.5 alone is short of it, 0.5 + 0.2 passes it -> two tokens
    kept = np.isfinite(_process_logits(logits, 1.0, None, 0.6))
    assert kept.tolist() == [[True, True, False, False, False], [False, False, False, True, True]]
    kept = np.isfinite(_process_logits(logits, 1.0, None, 0.1))  # the best token always stays
    assert kept.sum(-1).tolist() == [1, 1]
    assert np.allclose(_process_logits(logits, 0.5, None, None), logits * 2)


def test_cache_buffers_are_donatable_views():
    """The rows handed to the step are views of the cache, C-contiguous and writeable (what donation needs)."""
    cache = KVCache(layers=2, max_batch=3, kv_heads=2, max_len=8, head_dim=4)
    rows = cache.buffers(2)
    assert [r.shape for r in rows] == [(2, 2, 9, 4)] * 4
    assert all(r.flags.c_contiguous and r.flags.writeable for r in rows)
    rows[3][:, :, 1:4] = 4  # a write through the view is a write into the cache
    assert (cache.values[1][:2, :, 1:4] == 4).all() and (cache.values[1][2:] == 0).all()
    assert (cache.keys[0] == 0).all()


class MaskedSDPA(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_query_with_every_key_masked_gives_zeros_as_torch():
    """A left-padded prompt's padding rows: torch's SDPA gives 0 there (kiln gave NaN, which reached every
    later token through the cache)."""
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    length, keys = Dim("L", min=1, max=16), Dim("S", min=2, max=16)
    model = kiln.compile(MaskedSDPA(), (q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), mask),
                         dynamic_shapes=({2: length}, {2: keys}, {2: keys}, {2: length, 3: keys}))
    gen = torch.Generator().manual_seed(0)
    for n, s in [(1, 2), (5, 9), (16, 16)]:
        q, k, v = (torch.randn(2, 4, m, 8, generator=gen) for m in (n, s, s))
        mask = torch.rand(2, 1, n, s, generator=gen) > 0.3
        mask[0, 0, 0, :] = False  # a query that sees no key
        mask[1, 0, -1, :] = False
        want = MaskedSDPA()(q, k, v, mask)
        got = model(q, k, v, mask)
        assert not torch.isnan(got).any(), (n, s)
        assert (got[0, :, 0] == 0).all() and (got[1, :, -1] == 0).all()
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (n, s)
