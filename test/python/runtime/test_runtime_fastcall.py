"""The fast path of repeated input keys (kiln.runtime.fastcall): the same
numbers as the ordinary path, fresh outputs, the same counters, and the
ordinary path wherever the frozen plan does not hold."""

import threading

import numpy as np
import pytest
import torch
from test_runtime_model import PROFILES, TEXT, inputs, reference

import kiln
from kiln.bench import models
from kiln.runtime.executor import FAST_KEYS

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def mlp():
    module, example, dynamic = models.tiny_mlp()
    return module, kiln.compile(module, example, dynamic)


def _want(module, x):
    with torch.no_grad():
        return module(torch.as_tensor(x)).numpy()


def _fast_calls(model):
    return model.report()["fast_calls"]


@pytest.mark.parametrize("b", [1, 33, 64])
def test_repeats_run_fast_on_each_calls_data(mlp, b):
    module, model = mlp
    rng = np.random.default_rng(b)
    x1, x2 = (rng.standard_normal((b, 16), dtype=np.float32) for _ in range(2))
    model(x1)  # the key's first call: the ordinary path, which freezes the plan
    before = _fast_calls(model)
    y1 = model(x1)
    kept = y1.copy()
    y2 = model(x2)  # same key, other data: the pointers are the call's own
    assert _fast_calls(model) == before + 2
    np.testing.assert_allclose(y1, _want(module, x1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(y2, _want(module, x2), rtol=RTOL, atol=ATOL)
    assert y1 is not y2 and np.array_equal(y1, kept)  # each call's outputs are its own
    x1[:] = x2  # the input changed in place: read again by the next call
    np.testing.assert_allclose(model(x1), y2, rtol=0, atol=0)


def test_torch_in_torch_out(mlp):
    module, model = mlp
    x = torch.randn(5, 16)
    model(x)
    before = _fast_calls(model)
    y = model(x)
    assert isinstance(y, torch.Tensor) and not y.requires_grad
    torch.testing.assert_close(y, module(x).detach(), rtol=RTOL, atol=ATOL)
    xg = x.clone().requires_grad_()
    yg = model(xg)
    assert not yg.requires_grad and _fast_calls(model) == before + 2
    torch.testing.assert_close(yg, y, rtol=0, atol=0)


@pytest.mark.parametrize("make", [
    lambda x: np.asfortranarray(x),  # not C-contiguous
    lambda x: np.repeat(x, 2, axis=1)[:, ::2],  # strided
])
def test_inputs_the_plan_cannot_read_take_the_ordinary_path(mlp, make):
    module, model = mlp
    x = np.random.default_rng(3).standard_normal((6, 16), dtype=np.float32)
    model(x)
    model(x)
    before = _fast_calls(model)
    odd = make(x.copy())
    assert odd.shape == x.shape and odd.dtype == x.dtype  # the same key as x
    np.testing.assert_allclose(model(odd), _want(module, x), rtol=RTOL, atol=ATOL)
    assert _fast_calls(model) == before


def test_arguments_that_are_not_arrays_are_shape_errors(mlp):
    class ArrayLike:  # a shape and a dtype, but neither numpy's nor torch's
        def __init__(self, shape):
            self.shape, self.dtype = shape, np.dtype("float32")

    module, model = mlp
    x = np.zeros((4, 16), np.float32)
    model(x)
    model(x)  # the key (4, 16) f32 has a fast path and a cached binding now
    for bad, kind in (([[0.0] * 16] * 4, "list"), (ArrayLike((4, 16)), "ArrayLike"), (ArrayLike([4, 16]), "ArrayLike")):
        with pytest.raises(kiln.ShapeError, match=f"input 'x' is a {kind}, not a numpy array or a torch tensor"):
            model(bad)


def test_read_only_inputs(mlp):
    module, model = mlp
    x = np.random.default_rng(4).standard_normal((7, 16), dtype=np.float32)
    x.setflags(write=False)
    model(x)
    before = _fast_calls(model)
    np.testing.assert_allclose(model(x), _want(module, x), rtol=RTOL, atol=ATOL)
    assert _fast_calls(model) == before + 1


def test_counters_match_the_ordinary_path(monkeypatch):
    shapes = [(4, 64), (4, 64), (3, 10), (4, 64), (20, 5), (20, 5), (3, 10), (20, 5)]

    def run():
        m = kiln.compile(TEXT, profiles=PROFILES[:1], policy="specialize", static_kernels=True)
        for b, n in shapes:
            x, mask = inputs(b, n)
            torch.testing.assert_close(m(x, mask), reference(x, mask), rtol=RTOL, atol=ATOL)
        return m.report()

    fast = run()
    monkeypatch.setenv("KILN_FAST", "0")
    ordinary = run()
    assert fast["fast_calls"] == 5 and ordinary["fast_calls"] == 0  # the repeats
    for key in ("calls", "timed_calls", "last_selection", "specializations", "cache_hits"):
        assert fast[key] == ordinary[key], key
    a, b = fast["profiles"], ordinary["profiles"]
    assert a["profile_hits"] == b["profile_hits"] and a["generic_calls"] == b["generic_calls"]
    for name, v in a["variants"].items():
        assert (v["static_calls"], v["dynamic_calls"]) == (b["variants"][name]["static_calls"],
                                                          b["variants"][name]["dynamic_calls"]), name
    assert fast["arena"]["at"] == ordinary["arena"]["at"] == {"B": 20, "L": 5}


def test_threads_share_a_model(mlp):
    module, model = mlp
    xs = [np.random.default_rng(i).standard_normal((8, 16), dtype=np.float32) for i in range(4)]
    wants = [_want(module, x) for x in xs]
    before = model.report()["calls"]
    errors = []

    def worker(i):
        for _ in range(50):
            y = model(xs[i])
            if not np.allclose(y, wants[i], rtol=RTOL, atol=ATOL):
                errors.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert model.report()["calls"] == before + 200


def test_more_keys_than_kept(mlp):
    module, model = mlp
    sizes = list(range(1, FAST_KEYS + 4))
    for _ in range(2):
        for b in sizes:
            x = np.full((b, 16), 0.25 * b, np.float32)
            np.testing.assert_allclose(model(x), _want(module, x), rtol=RTOL, atol=ATOL)
    runtime = model.runtime
    assert len(runtime._fast) <= FAST_KEYS
    # Each kept fast path holds one arena; the evicted ones gave theirs back.
    assert runtime.pool.in_use == sum(f is not None for f in runtime._fast.values())


@pytest.mark.parametrize("how", ["profiling", "KILN_FAST=0", "fallback"])
def test_no_fast_path(how, monkeypatch):
    from test_runtime_model import Bessel

    if how == "KILN_FAST=0":
        monkeypatch.setenv("KILN_FAST", "0")
    module = Bessel().eval() if how == "fallback" else models.tiny_mlp()[0]
    dyn = {"x": {0: torch.export.Dim("B", min=1, max=64)}}
    m = kiln.compile(module, (torch.randn(4, 16),), dynamic_shapes=dyn, profiling=how == "profiling",
                     fallback=how == "fallback")
    x = torch.randn(3, 16)
    for _ in range(3):
        with torch.no_grad():
            torch.testing.assert_close(m(x), module(x), rtol=RTOL, atol=ATOL)
    r = m.report()
    assert r["fast_calls"] == 0 and r["calls"] == 3
