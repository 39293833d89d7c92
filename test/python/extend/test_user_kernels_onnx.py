"""Kernels and decompositions registered from user code for ONNX custom-domain ops (issue 40).

``com.kiln_test::ScaleShift`` (y = alpha * x + beta, attributes) has no
ONNX Runtime implementation, so without a registration the model cannot
compile at all; with a registered CPU kernel it imports as ``kiln.custom``
and with a registered decomposition as kiln ops, both compiled with
``fallback=False`` and compared with numpy at N = 1, 13, 32.  The
registration matches the node's domain: the same op type in another domain
is not taken.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.backends.registry import REGISTRY
from kiln.backends.user import unregister_decomposition
from kiln.errors import KilnError, UnsupportedError

SYMBOLS = {"N": (1, 32)}
NS = (1, 13, 32)  # min, middle, max


def model(op_type="ScaleShift", domain="com.kiln_test", alpha=2.5, beta=-1.0):
    """x [N, 8] -> ScaleShift -> Relu -> MatMul by a [8, 4] weight."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    t = helper.make_tensor_value_info("t", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    w = np.arange(32, dtype=np.float32).reshape(8, 4) / 32
    nodes = [
        helper.make_node(op_type, ["x"], ["t"], domain=domain, alpha=alpha, beta=beta, name="scale0"),
        helper.make_node("Relu", ["t"], ["r"], name="relu0"),
        helper.make_node("MatMul", ["r", "w"], ["y"], name="mm0"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], value_info=[t],
                              initializer=[helper.make_tensor("w", TensorProto.FLOAT, [8, 4], w.reshape(-1))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
    return m, w


def reference(x, w, alpha=2.5, beta=-1.0):
    return np.maximum(alpha * x + beta, 0) @ w


@pytest.fixture
def registered():
    names, ops = [], []
    yield names, ops
    for name in names:
        REGISTRY.unregister(name, "cpu")
    for op in ops:
        unregister_decomposition(op)


def check(compiled, w):
    rng = np.random.default_rng(0)
    for n in NS:
        x = rng.standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), reference(x, w), atol=1e-5, rtol=1e-5)


def test_without_registration_it_cannot_compile():
    m, _ = model()
    with pytest.raises(UnsupportedError, match="ScaleShift"):
        kiln.compile(m, symbols=SYMBOLS, fallback=False)


def test_custom_domain_op_with_a_registered_cpu_kernel(registered):
    names, _ = registered
    calls = []

    def scale_shift(inputs, outputs, binding, attrs):
        calls.append(binding["N"])
        np.multiply(inputs[0], attrs["alpha"], out=outputs[0])
        outputs[0] += attrs["beta"]

    kiln.register_kernel("com.kiln_test::ScaleShift", scale_shift, device="cpu", dtypes=["f32"],
                         shape_fn=lambda x: x, name="np_scale_shift")
    names.append("np_scale_shift")
    m, w = model()
    compiled = kiln.compile(m, symbols=SYMBOLS, fallback=False)
    report = compiled.report()
    assert report["fallback"]["ops"] == 0
    assert [k["impl"] for k in report["kernels"]].count("user.np_scale_shift") == 1
    check(compiled, w)
    assert calls == list(NS)


def test_custom_domain_op_decomposed_into_kiln_ops(registered):
    _, ops = registered

    def scale_shift(cx):
        x = cx.tensor(0)
        return cx.build("add", cx.build("mul", x, cx.like(cx.attr("alpha"), x)), cx.like(cx.attr("beta"), x))

    kiln.register_decomposition("com.kiln_test::ScaleShift", scale_shift)
    ops.append("com.kiln_test::ScaleShift")
    m, w = model()
    compiled = kiln.compile(m, symbols=SYMBOLS, fallback=False)
    report = compiled.report()
    assert report["fallback"]["ops"] == 0
    assert not [k for k in report["kernels"] if "user." in k["impl"]]  # kiln's own code (its library GEMM too)
    check(compiled, w)


def test_registration_matches_the_domain(registered):
    _, ops = registered
    kiln.register_decomposition("com.other::ScaleShift", lambda cx: cx.tensor(0))
    ops.append("com.other::ScaleShift")
    m, _ = model()
    with pytest.raises(UnsupportedError, match="ScaleShift"):
        kiln.compile(m, symbols=SYMBOLS, fallback=False)


def test_decomposition_that_raises_names_the_op(registered):
    _, ops = registered

    def broken(cx):
        return cx.attr("alpha") / 0

    kiln.register_decomposition("com.kiln_test::ScaleShift", broken)
    ops.append("com.kiln_test::ScaleShift")
    m, _ = model()
    with pytest.raises(KilnError, match=r"decomposition of 'com.kiln_test::ScaleShift' \(.*broken\) failed at "
                                        r"node 'scale0'.*ZeroDivisionError"):
        kiln.compile(m, symbols=SYMBOLS, fallback=False)
