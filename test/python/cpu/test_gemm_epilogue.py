"""A matrix product's bias add, ReLU / exact GELU and residual add applied
natively (backends/cpu/gemm_epilogue.py: in the small GEMM's registers,
kiln_sgemm_small_epi, or by kiln_bias_act after sgemv / OpenBLAS), against
torch, on every library path: the native small-M GEMM, sgemv (one row) and
OpenBLAS (rows above KILN_SMALL_M)."""

import numpy as np
import pytest
import torch

import kiln

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)


class Linear(torch.nn.Module):
    def __init__(self, k, n, bias, act):
        super().__init__()
        torch.manual_seed(k + n)
        self.fc = torch.nn.Linear(k, n, bias=bias)
        self.act = act

    def forward(self, x):
        y = self.fc(x)
        if self.act == "relu":
            return torch.relu(y)
        if self.act in ("gelu", "tanh"):
            return torch.nn.functional.gelu(y, approximate="tanh" if self.act == "tanh" else "none")
        return y


def _compile(module, shape):
    dims = {0: torch.export.Dim("B", min=1, max=64)}
    if len(shape) == 3:
        dims[1] = torch.export.Dim("L", min=1, max=64)
    return kiln.compile(module, (torch.randn(*shape),), dynamic_shapes={"x": dims}, keep_ir=True)


def _check(model, module, shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * 2
    with torch.inference_mode():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("bias, act", [(True, None), (True, "relu"), (True, "gelu"), (False, "gelu"),
                                       (False, "relu")])
def test_fused_epilogue_matches_torch(bias, act):
    module = Linear(96, 90, bias, act)  # 90 columns: whole panels of 32 and a partial one; a vector tail
    model = _compile(module, (4, 96))
    assert "kiln_bias_act" in model.ir["llvm"]
    for rows in (1, 7, 64):  # sgemv, the native GEMM's partial row block, several blocks
        _check(model, module, (rows, 96), rows)


def test_rows_above_small_m_go_through_openblas_and_still_get_the_epilogue(monkeypatch):
    monkeypatch.setenv("KILN_SMALL_M", "4")
    module = Linear(64, 48, True, "gelu")
    model = _compile(module, (8, 64))
    assert "kiln_bias_act" in model.ir["llvm"]
    for rows in (3, 37, 64):
        _check(model, module, (rows, 64), rows)


def test_batch_dims_fold_into_the_rows():
    module = Linear(32, 64, True, "gelu")
    model = _compile(module, (2, 5, 32))
    assert "kiln_bias_act" in model.ir["llvm"]
    for shape in ((1, 1, 32), (3, 17, 32), (64, 64, 32)):
        _check(model, module, shape, shape[1])


def test_tanh_gelu_stays_a_generic_and_matches():
    module = Linear(32, 64, True, "tanh")
    model = _compile(module, (4, 32))
    assert "kiln_bias_act" in model.ir["llvm"]  # the bias add alone
    _check(model, module, (9, 32))


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_nan_stays_nan_and_infinities_saturate(act):
    module = Linear(4, 40, True, act)
    model = _compile(module, (2, 4))
    x = np.array([[np.nan, 0, 0, 0], [1e30, 1e30, 1e30, 1e30], [-1e30, -1e30, -1e30, -1e30]], np.float32)
    with torch.inference_mode():
        want = module(torch.from_numpy(x)).numpy()
    got = model(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5)


class Residual(torch.nn.Module):
    """``r + act(x W + b)``: a transformer's projection before its residual connection."""

    def __init__(self, k, n, act):
        super().__init__()
        self.fc = Linear(k, n, True, act)

    def forward(self, x, r):
        return r + self.fc(x)


@pytest.mark.parametrize("act", [None, "gelu"])
@pytest.mark.parametrize("small_m", [None, "4"])  # the native GEMM's registers; OpenBLAS + kiln_bias_act
def test_residual_add_joins_the_epilogue(act, small_m, monkeypatch):
    if small_m:
        monkeypatch.setenv("KILN_SMALL_M", small_m)
    module = Residual(64, 90, act)
    dims = {0: torch.export.Dim("B", min=1, max=64), 1: torch.export.Dim("L", min=1, max=64)}
    model = kiln.compile(module, (torch.randn(2, 3, 64), torch.randn(2, 3, 90)), dynamic_shapes=(dims, dims),
                         keep_ir=True)
    llvm = model.ir["llvm"]
    assert "kiln_sgemm_small_epi" in llvm and "kiln_bias_act" in llvm
    for b, seq in ((1, 1), (3, 7), (64, 64)):  # sgemv; a partial row block; rows past KILN_SMALL_M
        rng = np.random.default_rng(b * seq)
        x = rng.standard_normal((b, seq, 64), dtype=np.float32)
        r = rng.standard_normal((b, seq, 90), dtype=np.float32)
        with torch.inference_mode():
            want = module(torch.from_numpy(x), torch.from_numpy(r)).numpy()
        np.testing.assert_allclose(model(x, r), want, rtol=1e-5, atol=2e-5)
