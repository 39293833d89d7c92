"""The shape contract: binding, checks and the exact ShapeError messages."""

import numpy as np
import pytest
import torch

from kiln.errors import ShapeError
from kiln.module import SymbolInfo
from kiln.runtime.contract import InputSpec, ShapeContract, compile_expr
from kiln.runtime.profiles import normalize_profiles

SYMS = {"B": SymbolInfo("B", 1, 64, 8), "L": SymbolInfo("L", 1, 512, 128)}


def contract(profiles=None):
    inputs = [
        InputSpec.make("x", ["B", "L", 16], "f32"),
        InputSpec.make("mask", ["B", "L"], "i1"),
        InputSpec.make("pos", ["L+1"], "i64"),
    ]
    return ShapeContract(inputs, SYMS, normalize_profiles(profiles, SYMS))


def arrays(b, n, mask_l=None, pos_l=None):
    return [
        np.zeros((b, n, 16), np.float32),
        np.zeros((b, mask_l or n), bool),
        np.zeros(((pos_l or n) + 1,), np.int64),
    ]


PROFILES = [{"name": "small", "B": (1, 4, 8)}, {"name": "large", "B": (9, 32, 64), "L": (1, 128, 512)}]


def test_binds_from_first_dim():
    assert contract().bind(arrays(3, 7)) == {"B": 3, "L": 7}
    assert contract().bind(arrays(64, 512)) == {"B": 64, "L": 512}


def test_torch_inputs():
    c = contract()
    xs = [torch.from_numpy(a) for a in arrays(2, 5)]
    assert c.bind(xs) == {"B": 2, "L": 5}


def test_range_message_with_profiles():
    with pytest.raises(ShapeError) as e:
        contract(PROFILES).bind(arrays(65, 4))
    assert str(e.value) == (
        "input 'x' axis 0: B = 65 violates 1 <= B <= 64 (profiles: small B in [1, 8], large B in [9, 64])"
    )


def test_range_message_without_profiles():
    with pytest.raises(ShapeError) as e:
        contract().bind(arrays(4, 513))
    assert str(e.value) == "input 'x' axis 1: L = 513 violates 1 <= L <= 512"
    with pytest.raises(ShapeError) as e:
        contract().bind(arrays(0, 5))
    assert str(e.value) == "input 'x' axis 0: B = 0 violates 1 <= B <= 64"


def test_mismatch_message():
    with pytest.raises(ShapeError) as e:
        contract().bind(arrays(2, 128, mask_l=100))
    assert str(e.value) == "input 'mask' axis 1 is 100 but L = 128 was bound from input 'x' axis 1"


def test_expression_message():
    with pytest.raises(ShapeError) as e:
        contract().bind(arrays(2, 128, pos_l=100))
    assert str(e.value) == "input 'pos' axis 0 is 101 but L+1 = 129 (L = 128 bound from input 'x' axis 1)"


def test_rank_dtype_count_messages():
    c = contract()
    a = arrays(2, 3)
    with pytest.raises(ShapeError) as e:
        c.bind([a[0][0]] + a[1:])
    assert str(e.value) == "input 'x' has rank 2 [3, 16], but the model expects rank 3 [B, L, 16]"
    with pytest.raises(ShapeError) as e:
        c.bind([a[0].astype(np.float64)] + a[1:])
    assert str(e.value) == "input 'x' has dtype f64, but the model expects f32"
    with pytest.raises(ShapeError) as e:
        c.bind(a[:2])
    assert str(e.value) == "the model takes 3 inputs ('x', 'mask', 'pos'), got 2"
    with pytest.raises(ShapeError) as e:
        c.bind([np.zeros((2, 3, 15), np.float32)] + a[1:])
    assert str(e.value) == "input 'x' axis 2 is 15 but the model expects 16"


def test_bind_from_expression_and_divisibility():
    syms = {"L": SymbolInfo("L", 2, 64, multiple_of=2)}
    c = ShapeContract([InputSpec.make("t", ["2*L+1"], "f32"), InputSpec.make("u", ["L"], "f32")], syms)
    assert c.bind_shapes([(9,), (4,)]) == {"L": 4}
    with pytest.raises(ShapeError) as e:
        c.bind_shapes([(10,), (4,)])
    assert str(e.value) == "input 't' axis 0 is 10, which is not 2*L+1 for any integer L"
    with pytest.raises(ShapeError) as e:
        c.bind_shapes([(7,), (3,)])
    assert str(e.value) == "input 't' axis 0: L = 3 violates L % 2 == 0"


def test_shape_contract_data():
    d = contract(PROFILES).describe(policy="error")
    assert d["symbols"]["B"] == {"min": 1, "max": 64, "opt": 8, "multiple_of": None}
    assert d["inputs"][2] == {"name": "pos", "shape": ["L+1"], "dtype": "i64"}
    assert d["bound_from"]["L"] == {"input": "x", "axis": 1}
    assert [p["name"] for p in d["profiles"]] == ["small", "large"]
    assert d["profiles"][1]["ranges"]["L"] == {"min": 1, "opt": 128, "max": 512}
    assert d["policy"] == "error"


def test_compile_expr():
    fn, syms = compile_expr("max(64*B, 4*B*L)+(L-3)/2+1")
    assert syms == {"B", "L"}
    assert fn({"B": 2, "L": 9}) == max(128, 72) + 3 + 1
    assert fn({"B": 2, "L": 100}) == 800 + 48 + 1


def test_shape_checks_round_trip_and_names_with_a_bar():
    from kiln.runtime.contract import BoundsCheck, ReshapeCheck, check_from_data, parse_checks

    # A node name may hold "|": the dim texts after it never do.
    (b,) = parse_checks(["bounds|node 'a|b' (Slice)|s0|e0|12"])
    assert b == BoundsCheck("node 'a|b' (Slice)", "s0", "e0", "12")
    r = ReshapeCheck("node 'r' (Reshape)", ("B", "12"), ("s0", "s1"))
    assert [check_from_data(c.as_data()) for c in (b, r)] == [b, r]
    with pytest.raises(ShapeError, match="unknown shape check"):
        parse_checks(["bounds|where|s0|e0"])
