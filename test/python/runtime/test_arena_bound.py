"""The arena pool is bounded in bytes (issue 35): a model called at thousands
of distinct shapes kept an arena of every size (RSS 0.5 -> 4.1 GB).  Idle
arenas are evicted least recently used first, arenas in use never, fast
paths' arenas count against the cap; the cap is automatic, an option, or
``KILN_ARENA_POOL_BYTES``."""

import os
import random
import re
import sys

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.bench import models
from kiln.errors import KilnError
from kiln.runtime import arena
from kiln.runtime.arena import MIN_POOL_BYTES, ArenaPool, pool_bytes_setting
from kiln.runtime.executor import FAST_KEYS

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")


def _rss() -> int:
    """Resident bytes of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ----------------------------------------------------------------------------
# The pool itself
# ----------------------------------------------------------------------------


def test_idle_arenas_are_evicted_least_recently_used_first():
    pool = ArenaPool(max_bytes=3000)
    bufs = {n: pool.acquire(n) for n in (1000, 1100, 1200)}
    for n in (1000, 1100, 1200):  # 1000 is the least recently used
        pool.release(bufs[n], n)
    s = pool.stats()
    assert s["pooled_bytes"] == 2300 and s["evictions"] == 1 and s["cap_bytes"] == 3000
    pool.release(pool.acquire(1100), 1100)  # 1100 used again: now 1200 is the oldest
    assert pool.stats()["reuses"] == 1
    pool.release(pool.acquire(1000), 1000)  # allocated anew (evicted); 1200 goes for it
    s = pool.stats()
    assert s["allocations"] == 4 and s["reuses"] == 1 and s["evictions"] == 2
    assert s["pooled_bytes"] == 2100
    pool.release(pool.acquire(1100), 1100)
    assert pool.stats()["reuses"] == 2  # still there


def test_arenas_in_use_are_never_evicted():
    pool = ArenaPool(max_bytes=0)  # keep nothing idle
    a, b = pool.acquire(4096), pool.acquire(4096)
    b.fill_(7)
    pool.release(a, 4096)
    assert pool.stats()["pooled_bytes"] == 0 and pool.stats()["evictions"] == 1
    assert int(b.sum()) == 7 * 4096 and pool.in_use == 1  # untouched
    kept = pool.acquire(8192, keep=True)  # a fast path's: over the cap by itself
    assert pool.over_cap() and pool.stats()["kept_bytes"] == 8192
    kept.fill_(1)
    pool.release(kept, 8192, kept=True)
    assert not pool.over_cap() and pool.stats()["kept_bytes"] == 0


def test_kept_arenas_count_against_the_cap():
    pool = ArenaPool(max_bytes=10_000)
    for n in (3000, 3001, 3002):
        pool.release(pool.acquire(n), n)
    assert pool.stats()["pooled_bytes"] == 9003
    fast = pool.acquire(5000, keep=True)
    s = pool.stats()
    assert s["kept_bytes"] == 5000 and s["pooled_bytes"] + s["kept_bytes"] <= 10_000
    pool.release(fast, 5000, kept=True)
    assert pool.stats()["kept_bytes"] == 0


def test_automatic_cap_follows_the_largest_arena(monkeypatch):
    monkeypatch.delenv("KILN_ARENA_POOL_BYTES", raising=False)
    monkeypatch.setattr(arena, "MIN_POOL_BYTES", 1000)
    pool = ArenaPool()
    assert pool.max_bytes is None and pool.cap == 1000
    pool.release(pool.acquire(800), 800)
    assert pool.cap == 1600
    for n in range(700, 710):
        pool.release(pool.acquire(n), n)
    s = pool.stats()
    assert s["pooled_bytes"] <= 1600 and s["evictions"] == 9
    pool.max_bytes = 0  # set later: trims at once
    assert pool.stats()["pooled_bytes"] == 0


@pytest.mark.parametrize("value, want", [(0, 0), (4096, 4096), (np.int64(5), 5), ("512M", 512 << 20),
                                         ("2GiB", 2 << 30), (" 64 kb ", 64 << 10), ("123", 123)])
def test_pool_bytes_settings(value, want):
    assert pool_bytes_setting(value) == want


@pytest.mark.parametrize("value, why", [(1.5, "must be a number of bytes, got 1.5"),
                                        (True, "must be a number of bytes, got True"),
                                        (-1, "must be >= 0, got -1"),
                                        ("1.5G", "must be a number of bytes (e.g. 268435456 or '256M'), got '1.5G'"),
                                        ("lots", "must be a number of bytes (e.g. 268435456 or '256M'), got 'lots'")])
def test_bad_pool_bytes_are_kiln_errors(value, why):
    with pytest.raises(KilnError, match=re.escape(f"arena_pool_bytes {why}")):
        ArenaPool(max_bytes=value)


def test_pool_bytes_from_the_environment(monkeypatch):
    monkeypatch.setenv("KILN_ARENA_POOL_BYTES", "3M")
    assert ArenaPool().cap == 3 << 20
    assert ArenaPool(max_bytes=5).cap == 5  # the option wins
    monkeypatch.setenv("KILN_ARENA_POOL_BYTES", "abc")
    with pytest.raises(KilnError, match="KILN_ARENA_POOL_BYTES must be a number of bytes .*got 'abc'"):
        ArenaPool()


# ----------------------------------------------------------------------------
# A model at many shapes
# ----------------------------------------------------------------------------


def test_fast_paths_stay_within_the_cap():
    """Every kept fast path holds an arena: past the cap the oldest close."""
    module, example, dynamic = models.tiny_mlp()
    model = kiln.compile(module, example, dynamic)
    runtime = model.runtime
    sizes = list(range(40, 40 + FAST_KEYS))
    x0 = np.full((sizes[0], 16), 0.5, np.float32)
    model(x0)
    model.runtime.pool.max_bytes = runtime.pool.stats()["largest_bytes"] * 3  # room for about three
    for _ in range(3):
        for b in sizes:
            x = np.full((b, 16), 0.01 * b, np.float32)
            y = model(x)
            with torch.no_grad():
                np.testing.assert_allclose(y, module(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
    s = runtime.pool.stats()
    live = sum(f is not None for f in runtime._fast.values())
    assert 1 <= live <= 3 and s["kept_bytes"] <= s["cap_bytes"]
    assert s["pooled_bytes"] + s["kept_bytes"] <= s["cap_bytes"]
    assert runtime.pool.in_use == live
    assert model.report()["arena"]["pool"]["cap_bytes"] == s["cap_bytes"]


def test_rss_stays_bounded_over_many_shapes(monkeypatch):
    """The quickstart block at 2,000 random (B, L): RSS grew by ~800 MB over
    1,800 calls before the bound; now by less than the cap and two arenas."""
    sys.path.insert(0, EXAMPLES)
    try:
        from quickstart import Block
    finally:
        sys.path.remove(EXAMPLES)
    monkeypatch.delenv("KILN_ARENA_POOL_BYTES", raising=False)  # the default cap
    torch.manual_seed(0)
    block = Block().eval()
    model = kiln.compile(block, (torch.randn(2, 8, 64),),
                         ({0: Dim("B", min=1, max=64), 1: Dim("L", min=1, max=512)},))
    rng = random.Random(0)
    gen = np.random.default_rng(0)
    checks = []
    rss_warm = None
    for i in range(2000):
        b, seq = rng.randint(1, 16), rng.randint(1, 128)
        x = gen.standard_normal((b, seq, 64), dtype=np.float32)
        y = model(x)
        if i % 100 == 0:
            checks.append((x, y))
        if i == 199:
            rss_warm = _rss()
    grown = _rss() - rss_warm
    s = model.runtime.pool.stats()
    cap = s["cap_bytes"]
    assert cap == max(2 * s["largest_bytes"], MIN_POOL_BYTES) and s["evictions"] > 0
    assert s["pooled_bytes"] + s["kept_bytes"] <= cap + s["largest_bytes"]  # the newest fast path may exceed it
    assert grown < cap + 2 * s["largest_bytes"] + (48 << 20), f"RSS grew {grown >> 20} MiB: {s}"
    for x, y in checks + [(c[0], model(c[0])) for c in checks[:3]]:  # right before and after evictions
        with torch.no_grad():
            want = block(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_the_pool_cap_is_a_compile_option():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU()).eval()
    model = kiln.compile(mlp, (torch.randn(2, 8),), ({0: Dim("B", min=1, max=32)},), arena_pool_bytes="8M")
    assert model.runtime.pool.cap == 8 << 20
    with pytest.raises(KilnError, match="arena_pool_bytes must be a number of bytes"):
        kiln.compile(mlp, (torch.randn(2, 8),), ({0: Dim("B", min=1, max=32)},), arena_pool_bytes="lots")
