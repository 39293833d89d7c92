"""The CPU backend's object-code cache: a second compile of the same module
loads the cached library instead of running LLVM, with the same results."""

import gc
import os
from pathlib import Path

import numpy as np
import pytest
from test_native_gemm import weight_text

import kiln
from kiln.backends.cpu import objcache
from kiln.runtime import native

# A C compiler links the cached kernels: without one these fail, not skip (conftest.py).
pytestmark = [pytest.mark.cc,
              pytest.mark.skipif(os.environ.get("KILN_CPU_CACHE") == "0", reason="KILN_CPU_CACHE=0 for this run")]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return tmp_path


def _entries(root: Path) -> list[Path]:
    return sorted((root / "cpu").rglob("*.so"))


def test_second_compile_hits_and_matches(cache_dir):
    text, w = weight_text(64, 96, seed=3)
    first = kiln.compile(text)
    assert first.report()["kernel_cache"] == "miss"
    assert len(_entries(cache_dir)) == 1
    second = kiln.compile(text)
    assert second.report()["kernel_cache"] == "hit"
    x = np.random.default_rng(0).standard_normal((5, 64), dtype=np.float32)
    np.testing.assert_allclose(second(x), x @ w, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(second(x), first(x))


def test_different_weights_are_different_entries(cache_dir, monkeypatch):
    """Weights inside the kernels (under inline_limit) are part of the key."""
    monkeypatch.setenv("KILN_INLINE_LIMIT", "1G")
    kiln.compile(weight_text(16, 8, seed=1)[0])
    model = kiln.compile(weight_text(16, 8, seed=2)[0])
    assert model.report()["kernel_cache"] == "miss"
    assert len(_entries(cache_dir)) == 2


def test_weights_passed_to_the_kernels_share_an_entry_and_keep_their_values(cache_dir):
    """Weights past inline_limit are arguments: two models that differ only
    in them share one entry, and each computes with its own weights."""
    text1, w1 = weight_text(16, 8, seed=1)
    text2, w2 = weight_text(16, 8, seed=2)
    first = kiln.compile(text1)
    second = kiln.compile(text2)
    assert (first.report()["kernel_cache"], second.report()["kernel_cache"]) == ("miss", "hit")
    assert len(_entries(cache_dir)) == 1
    x = np.random.default_rng(0).standard_normal((3, 16), dtype=np.float32)
    np.testing.assert_allclose(first(x), x @ w1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second(x), x @ w2, rtol=1e-5, atol=1e-5)


def test_one_changed_weight_is_a_different_entry(cache_dir, monkeypatch):
    """Large weights inside the kernels are hashed from their buffers (elided
    from the printed key text): the last element alone must change the key."""
    monkeypatch.setenv("KILN_INLINE_LIMIT", "1G")
    text, w = weight_text(16, 8, seed=5)
    kiln.compile(text)
    w2 = w.copy()
    w2[-1, -1] += 1.0
    text2 = text.replace(w.tobytes().hex().upper(), w2.tobytes().hex().upper())
    assert text2 != text
    model = kiln.compile(text2)
    assert model.report()["kernel_cache"] == "miss"
    x = np.ones((1, 16), np.float32)
    np.testing.assert_allclose(model(x), x @ w2, rtol=1e-5, atol=1e-5)


def test_key_hashes_weights_instead_of_printing_them():
    """The key's text has the weight elided and its bytes hashed; the same
    key comes out of another compile of the same text."""
    from kiln._mlir import ir
    from kiln.context import make_context
    from kiln.module import parse_module

    text, _ = weight_text(16, 8, seed=6)
    keys = []
    for _ in range(2):
        with make_context(), ir.Location.unknown():
            module = parse_module(text, "<test>")
            assert objcache._weights_elided_key(module) is not None
            keys.append(objcache.cache_key(module, 3, []))
    assert keys[0] == keys[1]


def test_models_from_one_entry_do_not_share_packed_weights(cache_dir):
    text, w = weight_text(128, 64, seed=4)
    a = kiln.compile(text)
    b = kiln.compile(text)
    x = np.ones((2, 128), np.float32)
    a(x), b(x)  # both pack their weight
    del a
    gc.collect()  # frees a's packed copy; b's must survive
    np.testing.assert_allclose(b(x), x @ w, rtol=1e-4, atol=1e-4)
    if native.load() is not None:
        assert native.packed_bytes() > 0


def test_corrupt_entry_is_rebuilt(cache_dir):
    text, w = weight_text(8, 8, seed=5)
    kiln.compile(text)
    (entry,) = _entries(cache_dir)
    entry.write_bytes(b"not a shared library")
    model = kiln.compile(text)
    assert model.report()["kernel_cache"] == "miss"
    x = np.ones((3, 8), np.float32)
    np.testing.assert_allclose(model(x), x @ w, rtol=1e-4, atol=1e-4)
    assert kiln.compile(text).report()["kernel_cache"] == "hit"


def test_cache_off(cache_dir, monkeypatch):
    monkeypatch.setenv("KILN_CPU_CACHE", "0")
    model = kiln.compile(weight_text(8, 8)[0])
    assert model.report()["kernel_cache"] == "off"
    assert _entries(cache_dir) == []


def test_hit_skips_the_lowering(cache_dir, monkeypatch):
    """The key is taken before lowering: a hit runs no lowering stage, a
    changed ``KILN_*`` setting or kiln source is another entry, and
    ``keep_ir`` lowers."""
    import kiln.compiler

    text, w = weight_text(32, 16, seed=7)
    kiln.compile(text)
    lowered = []
    real_lower = kiln.compiler.lower
    monkeypatch.setattr(kiln.compiler, "lower", lambda *a, **k: lowered.append(1) or real_lower(*a, **k))
    model = kiln.compile(text)
    assert model.report()["kernel_cache"] == "hit" and lowered == []
    x = np.random.default_rng(1).standard_normal((4, 32), dtype=np.float32)
    np.testing.assert_allclose(model(x), x @ w, rtol=1e-4, atol=1e-4)
    monkeypatch.setenv("KILN_SMALL_M", "8")
    assert kiln.compile(text).report()["kernel_cache"] == "miss" and lowered == [1]
    monkeypatch.delenv("KILN_SMALL_M")
    monkeypatch.setattr(objcache, "_SOURCE", "an edited kiln")  # the lowering code changed
    assert kiln.compile(text).report()["kernel_cache"] == "miss" and lowered == [1, 1]
    kept = kiln.compile(text, keep_ir=True)
    assert "llvm" in kept.ir and lowered == [1, 1, 1]
