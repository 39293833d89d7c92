"""The bench models compiled once for the CPU and run at several shapes vs PyTorch;
compilation counts; ShapeError before any kernel runs."""

import numpy as np
import pytest
import torch

import kiln
from kiln.bench import models
from kiln.compiler import compilation_count

RTOL, ATOL = 1e-4, 1e-5


def _compile(factory):
    module, example, dynamic = factory()
    before = compilation_count()
    model = kiln.compile(module, example, dynamic)
    assert compilation_count() == before + 1
    return module, model


@pytest.fixture(scope="module")
def tiny_mlp():
    return _compile(models.tiny_mlp)


@pytest.fixture(scope="module")
def small_cnn():
    return _compile(models.small_cnn)


@pytest.fixture(scope="module")
def transformer():
    return _compile(models.transformer_block)


def _check(module, model, x):
    with torch.no_grad():
        want = module(x).numpy()
    got = model(x.numpy())
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return got


@pytest.mark.parametrize("b", [1, 7, 64, 3, 33])
def test_tiny_mlp_matches_torch(tiny_mlp, b):
    module, model = tiny_mlp
    _check(module, model, torch.randn(b, 16, generator=torch.Generator().manual_seed(b)))


@pytest.mark.parametrize("b", [1, 7, 64])
def test_small_cnn_matches_torch(small_cnn, b):
    module, model = small_cnn
    _check(module, model, torch.randn(b, 3, 32, 32, generator=torch.Generator().manual_seed(b)))


# B in {1, 7, 64} and L in {1, 33, 512}; the big pairs are kept apart to stay fast.
@pytest.mark.parametrize("b,seq", [(1, 1), (7, 33), (1, 512), (64, 3), (2, 100)])
def test_transformer_block_matches_torch(transformer, b, seq):
    module, model = transformer
    x = torch.randn(b, seq, 256, generator=torch.Generator().manual_seed(b * 1000 + seq))
    _check(module, model, x)


def test_torch_in_torch_out(tiny_mlp):
    module, model = tiny_mlp
    x = torch.randn(5, 16)
    y = model(x)
    assert isinstance(y, torch.Tensor)
    with torch.no_grad():
        torch.testing.assert_close(y, module(x), rtol=RTOL, atol=ATOL)


def test_one_compilation_serves_all_shapes(tiny_mlp):
    module, model = tiny_mlp
    before = compilation_count()
    for b in (1, 2, 7, 33, 64, 17):
        _check(module, model, torch.randn(b, 16))
    assert compilation_count() == before
    assert model.compilations == 1


class _Spy:
    """Counts calls of a function and forwards them."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kw):
        self.calls += 1
        return self.fn(*args, **kw)


@pytest.mark.parametrize(
    "x,message",
    [
        (np.zeros((65, 16), np.float32), "B = 65 violates 1 <= B <= 64"),
        (np.zeros((0, 16), np.float32), "B = 0 violates"),
        (np.zeros((4, 16, 1), np.float32), "rank 3"),
        (np.zeros((4, 16), np.float64), "dtype f64"),
        (np.zeros((4, 15), np.float32), "axis 1"),
    ],
)
def test_bad_inputs_raise_shape_error_before_any_kernel(tiny_mlp, x, message, monkeypatch):
    from kiln.runtime.fastcall import FastCall

    module, model = tiny_mlp
    executor = model.runtime.executor  # the generic executor: the only one without profiles
    # Every kernel launch happens inside Executor.run or, for a repeated input key, a FastCall.
    spy = executor.run = _Spy(executor.run)
    fast_calls = []
    fast = FastCall.__call__
    monkeypatch.setattr(FastCall, "__call__", lambda self, args: fast_calls.append(1) or fast(self, args))
    try:
        with pytest.raises(kiln.ShapeError, match=message):
            model(x)
        assert spy.calls + len(fast_calls) == 0
        model(np.zeros((4, 16), np.float32))  # the spies do see a good call
        assert spy.calls + len(fast_calls) == 1
    finally:
        del executor.run


def test_non_contiguous_inputs(tiny_mlp):
    module, model = tiny_mlp
    x = torch.randn(16, 9).T  # a transposed view: not C-contiguous
    assert not x.is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(model(x), module(x), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(model(x.numpy()), module(x).detach().numpy(), rtol=RTOL, atol=ATOL)
