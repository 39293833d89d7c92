"""Symbol ranges and profiles given by the user are integers (issue 35):
``symbols={"N": (1.5, 16.7)}`` was taken as ``(1, 16)``, a profile's
``(1.5, 4, 8)`` as ``(1, 4, 8)``, ``True`` as 1.  Each is a KilnError naming
the symbol and the bad value."""

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.errors import KilnError
from kiln.module import SymbolInfo
from kiln.runtime.profiles import ProfileSelector, normalize_profiles

SYMS = {"B": SymbolInfo("B", 1, 64, 8), "L": SymbolInfo("L", 1, 512, 128)}


def _relu_model() -> onnx.ModelProto:
    """Y = Relu(X), X of shape [N, 4]."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["Y"])], "relu",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("rng, message", [
    ((1.5, 16.7), "symbol 'N': min must be an integer, got 1.5 (range (1.5, 16.7))"),
    ((1, 16.0), "symbol 'N': max must be an integer, got 16.0 (range (1, 16.0))"),
    ((True, 8), "symbol 'N': min must be an integer, got True (range (True, 8))"),
    ((1, np.float32(8)), "symbol 'N': max must be an integer, got"),
    ("1,16", "symbol 'N': range must be (min, max), got '1,16'"),
    ("16", "symbol 'N': range must be (min, max), got '16'"),
    ((1, 2, 3), "symbol 'N': range must be (min, max), got (1, 2, 3)"),
    ((4,), "symbol 'N': range must be (min, max), got (4,)"),
    (None, "symbol 'N': range must be (min, max), got None"),
    ((8, 2), "symbol 'N' has min 8 > max 2"),
    ((-1, 2), "symbol 'N' has min -1 < 0"),
])
def test_onnx_symbol_ranges_must_be_integers(rng, message):
    with pytest.raises(KilnError, match=re.escape(message)):
        kiln.import_onnx(_relu_model(), symbols={"N": rng})


def test_onnx_symbols_must_be_a_dict():
    with pytest.raises(KilnError, match=re.escape("symbols must be a dict of name -> (min, max), got [('N', (1, 8))]")):
        kiln.import_onnx(_relu_model(), symbols=[("N", (1, 8))])


def test_onnx_integer_ranges_still_work():
    """numpy integers are integers; the range is enforced at call time."""
    model = kiln.compile(_relu_model(), symbols={"N": (np.int64(1), 16)})
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(model(x), np.maximum(x, 0))
    with pytest.raises(kiln.ShapeError, match="N = 17 violates 1 <= N <= 16"):
        model(np.zeros((17, 4), np.float32))


@pytest.mark.parametrize("triple, message", [
    ((1.5, 4, 8), "profile 'profile0' symbol 'B': min must be an integer, got 1.5 (in (1.5, 4, 8))"),
    ((1, 4.2, 8), "profile 'profile0' symbol 'B': opt must be an integer, got 4.2 (in (1, 4.2, 8))"),
    ((1, 4, 8.0), "profile 'profile0' symbol 'B': max must be an integer, got 8.0 (in (1, 4, 8.0))"),
    ((1, True, 8), "profile 'profile0' symbol 'B': opt must be an integer, got True (in (1, True, 8))"),
    ("148", "profile 'profile0' symbol 'B': expected (min, opt, max), got '148'"),
    ((1, 8), "profile 'profile0' symbol 'B': expected (min, opt, max), got (1, 8)"),
    ((1, 9, 8), "profile 'profile0' symbol 'B': needs min <= opt <= max, got (1, 9, 8)"),
    ((1, 0, 8), "profile 'profile0' symbol 'B': needs min <= opt <= max, got (1, 0, 8)"),
])
def test_profile_ranges_must_be_integers(triple, message):
    with pytest.raises(KilnError, match=re.escape(message)):
        normalize_profiles([{"B": triple}], SYMS)


def test_profile_numpy_integers_are_integers():
    (p,) = normalize_profiles([{"B": (np.int32(1), np.int64(4), 8)}], SYMS)
    assert p.range_map == {"B": (1, 4, 8)}
    assert all(type(v) is int for v in p.range_map["B"])


@pytest.mark.parametrize("budget, message", [
    (1.5, "budget must be an integer >= 0 (specialized buckets), got 1.5"),
    (-1, "budget must be an integer >= 0 (specialized buckets), got -1"),
    ({"B": "2"}, "budget of symbol 'B' must be an integer >= 0 (specialized buckets), got '2'"),
])
def test_budget_must_be_an_integer(budget, message):
    with pytest.raises(KilnError, match=re.escape(message)):
        ProfileSelector([], SYMS, lambda p: None, "specialize", budget)
