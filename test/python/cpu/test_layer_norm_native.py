"""Layer norm as one native call (kiln_layer_norm, kiln/backends/cpu/library_kernels.py, chosen on kiln IR),
against torch: with and without weight and bias, a row length with whole
vectors, a vector tail and a scalar tail, norms over two dims, rows on one
thread and over the pool, at each symbol's min, a middle and a large value."""

import numpy as np
import pytest
import torch

import kiln

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)


class Norm(torch.nn.Module):
    def __init__(self, shape, affine, bias=True):
        super().__init__()
        torch.manual_seed(sum(shape))
        self.ln = torch.nn.LayerNorm(shape, elementwise_affine=affine, bias=bias)
        if affine:
            with torch.no_grad():  # not the ones and zeros they start as
                self.ln.weight.uniform_(0.5, 1.5)
                if bias:
                    self.ln.bias.uniform_(-1, 1)

    def forward(self, x):
        return self.ln(x)


def _compile(module, shape):
    dims = {0: torch.export.Dim("B", min=1, max=64), 1: torch.export.Dim("L", min=1, max=128)}
    return kiln.compile(module, (torch.randn(*shape),), dynamic_shapes={"x": dims}, keep_ir=True)


def _check(model, module, shape, seed):
    # An offset and a spread per row: a one-pass E[x^2] - mean^2 variance would lose digits here.
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape, dtype=np.float32) * 3 + rng.uniform(-50, 50, shape[:2] + (1,) * (len(shape) - 2))
         ).astype(np.float32)
    with torch.inference_mode():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [256, 100, 7])  # whole vectors; vectors and a tail; a tail only
@pytest.mark.parametrize("affine, bias", [(True, True), (True, False), (False, False)])
def test_native_layer_norm_matches_torch(n, affine, bias):
    module = Norm((n,), affine, bias)
    model = _compile(module, (2, 3, n))
    assert "kiln_layer_norm" in model.ir["llvm"]
    for b, seq in ((1, 1), (3, 32), (64, 128)):  # one row (one thread); 96 rows; 8192 rows (the pool)
        _check(model, module, (b, seq, n), b * seq)


def test_norm_over_two_trailing_dims():
    module = Norm((6, 20), True)
    model = _compile(module, (2, 3, 6, 20))
    assert "kiln_layer_norm" in model.ir["llvm"]
    for b, seq in ((1, 1), (5, 17), (64, 128)):
        _check(model, module, (b, seq, 6, 20), seq)


def test_without_the_native_runtime_the_generated_chain_matches(monkeypatch):
    monkeypatch.setenv("KILN_NATIVE", "0")
    module = Norm((100,), True)
    model = _compile(module, (2, 3, 100))
    assert "kiln_layer_norm" not in model.ir["llvm"]
    _check(model, module, (4, 9, 100), 1)
