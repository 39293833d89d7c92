"""Elementwise kiln ops on the CPU backend vs PyTorch, at several (B, L), one compilation."""

import numpy as np
import pytest
import torch
from kbuild import K, module_text

import kiln
from kiln.compiler import compilation_count

SHAPES = [(1, 1), (7, 33), (64, 512), (3, 17), (64, 1)]

FLOAT_OUTS = [
    ("add", lambda x, p, z: x + p),
    ("sub", lambda x, p, z: x - z),
    ("mul", lambda x, p, z: x * p),
    ("div", lambda x, p, z: x / p),
    ("pow", lambda x, p, z: torch.pow(p, x)),
    ("maximum", lambda x, p, z: torch.maximum(x, z)),
    ("minimum", lambda x, p, z: torch.minimum(x, p)),
    ("neg", lambda x, p, z: -x),
    ("abs", lambda x, p, z: x.abs()),
    ("exp", lambda x, p, z: x.exp()),
    ("log", lambda x, p, z: p.log()),
    ("sqrt", lambda x, p, z: p.sqrt()),
    ("rsqrt", lambda x, p, z: p.rsqrt()),
    ("tanh", lambda x, p, z: x.tanh()),
    ("sigmoid", lambda x, p, z: x.sigmoid()),
    ("relu", lambda x, p, z: x.relu()),
    ("gelu", lambda x, p, z: torch.nn.functional.gelu(x)),
    ("gelu_tanh", lambda x, p, z: torch.nn.functional.gelu(x, approximate="tanh")),
    ("silu", lambda x, p, z: torch.nn.functional.silu(x)),
    ("erf", lambda x, p, z: torch.erf(x)),
    ("where", lambda x, p, z: torch.where(x > z, x, p.expand_as(x))),
    ("cast_bool_f32", lambda x, p, z: (x < z).to(torch.float32)),
]
BOOL_OUTS = [
    ("eq", lambda x, p, z: x == x.round()),
    ("ne", lambda x, p, z: x != z),
    ("lt", lambda x, p, z: x < z),
    ("le", lambda x, p, z: x <= p),
    ("gt", lambda x, p, z: x > z),
    ("ge", lambda x, p, z: x >= z),
]


def _body(x, p, z):
    outs = [
        K.add(x, p), K.sub(x, z), K.mul(x, p), K.div(x, p), K.pow(p, x), K.maximum(x, z), K.minimum(x, p),
        K.neg(x), K.abs(x), K.exp(x), K.log(p), K.sqrt(p), K.rsqrt(p), K.tanh(x), K.sigmoid(x), K.relu(x),
        K.gelu(x), K.gelu(x, approximate="tanh"), K.silu(x), K.erf(x),
        K.where(K.gt(x, z), x, p),
    ]
    from kiln.dialects.kiln import tensor_info, tensor_type

    lt = K.lt(x, z)
    info = tensor_info(lt.type)
    outs.append(K.cast(lt, results=[tensor_type(info.dims, "f32")]))
    rounded = K.cast(K.cast(x, results=[tensor_type(info.dims, "i32")]), results=[tensor_type(info.dims, "f32")])
    outs += [K.eq(x, rounded), K.ne(x, z), K.lt(x, z), K.le(x, p), K.gt(x, z), K.ge(x, z)]
    return outs


@pytest.fixture(scope="module")
def model():
    text = module_text(
        {"B": (1, 64), "L": (1, 512)},
        [(["B", "L"], "f32"), (["L"], "f32"), (["B", 1], "f32")],
        _body,
    )
    return kiln.compile(text)


def _inputs(b, seq, seed):
    g = np.random.default_rng(seed)
    x = g.standard_normal((b, seq)).astype(np.float32) * 2
    x[:, ::3] = np.round(x[:, ::3])  # some exact integers for eq
    p = g.uniform(0.5, 2.0, (seq,)).astype(np.float32)
    z = g.standard_normal((b, 1)).astype(np.float32)
    return x, p, z


@pytest.mark.parametrize("b,seq", SHAPES)
def test_elementwise_matches_torch(model, b, seq):
    x, p, z = _inputs(b, seq, b * 1000 + seq)
    outs = model(x, p, z)
    tx, tp, tz = (torch.from_numpy(a) for a in (x, p, z))
    refs = FLOAT_OUTS + BOOL_OUTS
    assert len(outs) == len(refs)
    for (name, ref), got in zip(refs, outs):
        want = ref(tx, tp, tz).numpy()
        assert got.shape == want.shape, name
        if want.dtype == np.bool_:
            assert got.dtype == np.bool_, name
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_torch_inputs_give_torch_outputs(model):
    x, p, z = (torch.from_numpy(a) for a in _inputs(7, 33, 0))
    outs = model(x, p, z)
    assert all(isinstance(o, torch.Tensor) for o in outs)
    torch.testing.assert_close(outs[0], x + p, rtol=1e-4, atol=1e-5)


def test_one_compilation_serves_every_shape(model):
    before = compilation_count()
    for b, seq in SHAPES:
        model(*_inputs(b, seq, 1))
    assert compilation_count() == before
    assert model.compilations == 1
