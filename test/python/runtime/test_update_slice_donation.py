"""kiln.update_slice through kiln.compile: a KV-cache-style write of ``new`` into
``cache`` at positions P..P+L-1 followed by attention over cache[:, :, :P+L].

Checked against eager PyTorch at the min, a middle and the max of P and L,
with no fallback; the caller's cache is written in place (same buffer), the
memory plan donates it (no arena space, no output buffer, no copy back) and
the kernel copies only the L positions (its bufferized IR writes the cache
through a subview only).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as nnf
from torch.export import Dim

import kiln
from kiln.errors import KilnError

H, D = 4, 16
P_RANGE, L_RANGE = (1, 40), (1, 8)
SHAPES = [(1, 1), (20, 4), (40, 8), (1, 8), (40, 1)]  # (P, L): min, middle, max of each


class SliceAssign(torch.nn.Module):
    def forward(self, cache, new, pos):
        p, n = pos.shape[0], new.shape[2]
        cache[:, :, p:p + n] = new
        k = cache[:, :, :p + n]
        return nnf.scaled_dot_product_attention(new, k, k)


class IndexCopy(torch.nn.Module):
    def forward(self, cache, new, pos):
        p, n = pos.shape[0], new.shape[2]
        cache.index_copy_(2, torch.arange(p, p + n), new)
        k = cache[:, :, :p + n]
        return nnf.scaled_dot_product_attention(new, k, k)


class IndexPut(torch.nn.Module):
    def forward(self, cache, new, pos):
        p, n = pos.shape[0], new.shape[2]
        cache[:, :, torch.arange(p, p + n)] = new
        k = cache[:, :, :p + n]
        return nnf.scaled_dot_product_attention(new, k, k)


def _compile(module, max_len=64, **kw):
    cache = torch.zeros(2, H, max_len, D)
    args = (cache, torch.randn(2, H, 3, D), torch.zeros(5))
    ds = ({}, {2: Dim("L", min=L_RANGE[0], max=L_RANGE[1])}, {0: Dim("P", min=P_RANGE[0], max=P_RANGE[1])})
    return kiln.compile(module, args, ds, **kw)


@pytest.fixture(scope="module", params=[SliceAssign, IndexCopy, IndexPut], ids=lambda c: c.__name__)
def compiled(request):
    return request.param, _compile(request.param())


def _case(p, n, max_len=64, seed=0):
    g = torch.Generator().manual_seed(seed + 97 * p + n)
    return (torch.randn(2, H, max_len, D, generator=g), torch.randn(2, H, n, D, generator=g), torch.zeros(p))


@pytest.mark.parametrize("p,n", SHAPES)
def test_matches_eager_in_place(compiled, p, n):
    cls, model = compiled
    cache0, new, pos = _case(p, n)
    ref_cache = cache0.clone()
    ref = cls()(ref_cache, new, pos)
    # numpy: the caller's array is the one written (same buffer, updated).
    cache = cache0.numpy().copy()
    view = cache[:, :, p:p + n]  # a view of the caller's buffer, kept across the call
    before = cache.ctypes.data
    out = model(cache, new.numpy(), pos.numpy())
    assert isinstance(out, np.ndarray)  # the mutated cache is not returned, only the attention
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5, atol=1e-5)
    assert cache.ctypes.data == before
    np.testing.assert_array_equal(cache, ref_cache.numpy())
    assert np.shares_memory(view, cache)
    np.testing.assert_array_equal(view, new.numpy())
    # torch: the same tensor (data pointer) holds the update.
    t = cache0.clone()
    ptr = t.data_ptr()
    out_t = model(t, new, pos)
    torch.testing.assert_close(out_t, ref, rtol=1e-5, atol=1e-5)
    assert t.data_ptr() == ptr
    torch.testing.assert_close(t, ref_cache, rtol=0, atol=0)


def test_no_fallback_and_donated(compiled):
    _, model = compiled
    assert model.report()["fallback"]["ops"] == 0
    ex = model.runtime.executor
    (out, src), = ex.inplace.items()
    assert ex.donated == {out: src} and src in ex.schedule.inputs
    assert ex._copy_back == []  # written in place, nothing copied back
    plan = model.runtime.prepared.plan
    # The cache is neither in the arena nor a freshly allocated output.
    assert out not in plan.buffers and out not in plan.outputs
    assert len(model.output_names) == 1


class IndexCopyWithHead(torch.nn.Module):
    """The cache write next to a projection of the last position and a
    bias computed from its weight's transpose, which kiln computes once
    when the model is built (a hoisted kernel of constants only) where
    kiln-fold-constants does not read the weight (past 64 MiB: an LLM's
    head): hoisting re-planned memory without the donation, and the mutated
    cache came back as an extra output (the 110 M-parameter LLM bench's
    kiln peer, 2026-12-06, whose head's W^T was hoisted then; a transpose
    only products read is read in place now, so the sum keeps one here)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.head = torch.nn.Linear(32, 64, bias=False)

    def forward(self, cache, new, x):
        cache.index_copy_(2, torch.arange(0, new.shape[2]), new)
        return self.head(x[:, -1:, :]) + self.head.weight.t().sum(0)


def test_donation_survives_hoisted_weight_transposes(monkeypatch):
    from kiln.transforms import fold_constants

    monkeypatch.setattr(fold_constants, "_MAX_OPERAND_BYTES", 1024)  # the head's 8 KiB as an LLM's 98 MB
    module = IndexCopyWithHead()
    seq = Dim("L", min=1, max=8)
    model = kiln.compile(module, (torch.zeros(2, H, 16, D), torch.randn(2, H, 3, D), torch.randn(2, 3, 32)),
                         ({}, {2: seq}, {1: seq}))
    assert ["kiln.transpose"] not in [k["ops"] for k in model.report()["kernels"]]  # ran at compile time
    assert any(tuple(t.shape) == (32, 64) for t in model.runtime.prepared.constants.values())  # W^T, hoisted
    assert len(model.output_names) == 1 and model.runtime.executor.donated
    for n in (1, 8):
        cache, new, x = np.zeros((2, H, 16, D), np.float32), np.random.rand(2, H, n, D).astype(np.float32), \
            np.random.rand(2, n, 32).astype(np.float32)
        ref_cache = torch.from_numpy(cache.copy())
        with torch.no_grad():
            ref = module(ref_cache, torch.from_numpy(new), torch.from_numpy(x))
        out = model(cache, new, x)
        assert isinstance(out, np.ndarray)  # the logits alone: the cache is written in place
        np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(cache, ref_cache.numpy())


def test_plan_does_not_grow_with_cache_length():
    """The arena and the outputs are the same for a cache of 64 or 4096
    positions: nothing of the cache's size is allocated or copied per call."""
    small, large = _compile(SliceAssign(), 64), _compile(SliceAssign(), 4096)
    a, b = small.runtime.prepared.plan, large.runtime.prepared.plan
    assert a.arena_size == b.arena_size
    assert sorted(a.outputs.values()) == sorted(b.outputs.values())
    assert b.inplace and b.donated and large.runtime.executor._copy_back == []
    cache0, new, pos = _case(40, 8, max_len=4096)
    ref_cache = cache0.clone()
    ref = SliceAssign()(ref_cache, new, pos)
    cache = cache0.clone()
    torch.testing.assert_close(large(cache, new, pos), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cache, ref_cache, rtol=0, atol=0)


def test_kernel_copies_only_the_update():
    """The donated kernel's bufferized IR writes the cache's buffer only
    through a subview of the update's extent, and copies nothing whole."""
    from kiln.backends.cpu.lowering import lower
    from kiln.compile_prepare import prepare
    from kiln.frontends import import_torch
    from kiln.pipelines import Pipeline

    # Without donation (checked by hand) this kernel allocates a whole cache,
    # copies the input into it and the result out of it: both fail below.
    cache = torch.zeros(2, H, 4096, D)
    ds = ({}, {2: Dim("L", min=1, max=8)}, {0: Dim("P", min=1, max=40)})
    module = import_torch(SliceAssign(), (cache, torch.randn(2, H, 3, D), torch.zeros(5)), ds)
    with module.context:
        Pipeline.named("kiln-default-cpu").run(module)
        prepared = prepare(module, "main")
        assert prepared.plan.inplace
        lower(module, stop_after="kiln-cpu-bufferize")
        text = str(module)
    whole = "memref<2x4x4096x16xf32>"
    lines = [ln for ln in text.splitlines() if whole in ln]
    assert lines, text[:2000]
    # Every use of a whole-cache buffer: the signature, subviews of it (the
    # update's [.., L, ..] window and the attention's read of P+L rows),
    # and nothing that allocates, copies or loops over all of it.
    for ln in lines:
        assert "memref.alloc" not in ln and "memref.copy" not in ln, ln
        assert not ("outs(%" in ln and f": {whole})" in ln), ln  # a loop writing all of it
    assert any("memref.subview" in ln for ln in lines)  # the update's window


class ReadOldAfterWrite(torch.nn.Module):
    """The old cache is read after the write: no donation in place; the new
    value is still written into the caller's array (copied back)."""

    def forward(self, cache, new, pos):
        p, n = pos.shape[0], new.shape[2]
        old = cache.clone()
        cache[:, :, p:p + n] = new
        return old[:, :, :p + n].sum(2) - cache[:, :, :p + n].sum(2)


@pytest.mark.parametrize("p,n", [(1, 1), (40, 8)])
def test_read_after_write_copies_back(p, n):
    model = _compile(ReadOldAfterWrite())
    cache0, new, pos = _case(p, n)
    ref_cache = cache0.clone()
    ref = ReadOldAfterWrite()(ref_cache, new, pos)
    cache = cache0.clone()
    torch.testing.assert_close(model(cache, new, pos), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(cache, ref_cache, rtol=0, atol=0)
    assert model.report()["fallback"]["ops"] == 0


class Functional(torch.nn.Module):
    """slice_scatter without a mutation: the input is read, never written."""

    def forward(self, cache, new, pos):
        p, n = pos.shape[0], new.shape[2]
        return torch.slice_scatter(cache, new, 2, p, p + n) * 2.0


@pytest.mark.parametrize("p,n", [(1, 1), (20, 4), (40, 8)])
def test_functional_slice_scatter_leaves_input(p, n):
    model = _compile(Functional())
    cache0, new, pos = _case(p, n)
    cache = cache0.clone()
    torch.testing.assert_close(model(cache, new, pos), Functional()(cache0, new, pos), rtol=0, atol=0)
    torch.testing.assert_close(cache, cache0, rtol=0, atol=0)
    assert model.report()["fallback"]["ops"] == 0
    assert not model.runtime.executor.inplace


def test_donated_input_must_be_writable(compiled):
    _, model = compiled
    cache0, new, pos = _case(3, 2)
    for _ in range(2):  # the second call of this shape has a fast path: it must refuse too
        model(cache0.numpy().copy(), new.numpy(), pos.numpy())
    ro = cache0.numpy().copy()
    ro.flags.writeable = False
    with pytest.raises(KilnError, match="written in place"):
        model(ro, new.numpy(), pos.numpy())
    strided = torch.randn(2, H, D, 64).transpose(2, 3)
    with pytest.raises(KilnError, match="written in place"):
        model(strided, new, pos)


def test_artifact_keeps_donation(compiled, tmp_path):
    """A saved and loaded model still writes into the caller's cache."""
    cls, model = compiled
    kiln.save(model, tmp_path / "m")
    loaded = kiln.load(tmp_path / "m")
    assert loaded.runtime.executor.inplace == model.runtime.executor.inplace
    for p, n in [(1, 1), (40, 8)]:
        cache0, new, pos = _case(p, n, seed=5)
        ref_cache = cache0.clone()
        ref = cls()(ref_cache, new, pos)
        cache = cache0.clone()
        torch.testing.assert_close(loaded(cache, new, pos), ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(cache, ref_cache, rtol=0, atol=0)


def test_decode_loop_fast_path(compiled):
    """A decode loop over one cache array: each step writes at its own P; a
    repeated shape takes the fast path, which writes into the caller's array too."""
    cls, model = compiled
    g = torch.Generator().manual_seed(11)
    cache = np.zeros((2, H, 64, D), np.float32)
    ref_cache = torch.zeros(2, H, 64, D)
    before = model.report().get("fast_calls", 0)
    for p in [1, 2, 3, 3, 3, 4, 40]:
        new = torch.randn(2, H, 1, D, generator=g)
        ref = cls()(ref_cache, new, torch.zeros(p))
        out = model(cache, new.numpy(), np.zeros(p, np.float32))
        np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(cache, ref_cache.numpy())
    assert model.report().get("fast_calls", 0) > before


def test_plan_inplace_intermediate_lifetime():
    """An in-place result takes no space of its own and keeps the buffer it
    is written into alive through its own uses (no other value reuses it)."""
    from types import SimpleNamespace

    from kiln.dialects.dims import dim
    from kiln.runtime.memplan import plan_memory

    def val(i, kind, step):
        return SimpleNamespace(id=i, kind=kind, info=SimpleNamespace(dims=(dim("B"), dim(16)), dtype="f32"), step=step, index=0)

    # step0: x -> a; step1: update(a, x) -> b (in place into a); step2: b -> c; step3: c -> d (output)
    values = [val(0, "input", -1), val(1, "intermediate", 0), val(2, "intermediate", 1),
              val(3, "intermediate", 2), val(4, "output", 3)]
    steps = [SimpleNamespace(inputs=[0], outputs=[1]), SimpleNamespace(inputs=[1, 0], outputs=[2]), SimpleNamespace(inputs=[2], outputs=[3]),
             SimpleNamespace(inputs=[3], outputs=[4])]
    symbols = {"B": SimpleNamespace(min=1, max=8, opt=4)}
    plan, buffers = plan_memory(SimpleNamespace(steps=steps, values=values), symbols, inplace={2: 1})
    assert 2 not in plan.buffers and plan.inplace == {2: 1}
    a, c = plan.buffers[1], plan.buffers[3]
    assert a["live"] == (0, 2)  # a lives until b's last read (step 2)
    assert a["offset"] != c["offset"]  # c (defined at step 2) cannot take a's space
    without, _ = plan_memory(SimpleNamespace(steps=steps, values=values), symbols)
    assert len(without.buffers) == len(plan.buffers) + 1
