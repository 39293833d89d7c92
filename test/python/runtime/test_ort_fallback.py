"""ONNX nodes kiln cannot compile run as one-node ONNX Runtime sessions (issue 36).

Each model mixes converted ops around a node with no kiln pattern (or whose
pattern declines) and no PyTorch twin: it compiles with fallback=True,
matches ONNX Runtime on the whole model at three values of each symbol, is
counted in report() (fallback ops, share of ops and of time), survives
kiln.save / kiln.load, and the import report (kiln.import_onnx and
kiln-import --report-json) agrees with what compile does, op by op.
"""

from __future__ import annotations

import json
import sys
import threading
import warnings
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import kiln
from kiln.conversions.torch_to_kiln import PATTERNS
from kiln.conversions.torch_to_kiln.driver import Decline
from kiln.errors import KilnError, UnsupportedError
from kiln.runtime.artifact import MANIFEST
from kiln.runtime.ort_fallback import EXTRA, OrtFallbackKernel

VALUES = ({"B": 1, "L": 2, "C": 3}, {"B": 5, "L": 9, "C": 6}, {"B": 16, "L": 33, "C": 13})


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def _vi(name, elem, dims):
    return h.make_tensor_value_info(name, elem, dims)


def det_model():
    """Relu -> Det (no pattern) -> Neg: Det's result dim B comes from shape inference."""
    return _model([h.make_node("Relu", ["x"], ["r"]), h.make_node("Det", ["r"], ["d"]),
                   h.make_node("Neg", ["d"], ["y"])],
                  [_vi("x", T.FLOAT, ["B", 3, 3])], [_vi("y", T.FLOAT, ["B"])])


def mixed_model():
    """Hardmax (attribute), TopK (a constant input, two results), CumSum
    (a constant axis, attributes) and Mod of a Shape (a shape tensor whose
    values are symbolic: fed from the binding per call) among converted ops."""
    k = nh.from_array(np.array([2], np.int64), "k")
    axis = nh.from_array(np.array(1, np.int64), "axis")
    three = nh.from_array(np.array([3], np.int64), "three")
    nodes = [
        h.make_node("Mul", ["x", "x"], ["sq"]),
        h.make_node("Hardmax", ["sq"], ["hm"], axis=1),
        h.make_node("Add", ["hm", "x"], ["a"]),
        h.make_node("TopK", ["a", "k"], ["v", "i"], axis=-1, largest=1),
        h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
        h.make_node("Add", ["v", "fi"], ["top"]),
        h.make_node("Sigmoid", ["x"], ["s"]),
        h.make_node("CumSum", ["s", "axis"], ["cs"], exclusive=1, reverse=1),
        h.make_node("Sub", ["cs", "x"], ["cum"]),
        h.make_node("Shape", ["x"], ["shape"]),
        h.make_node("Mod", ["shape", "three"], ["mod"]),
    ]
    return _model(nodes, [_vi("x", T.FLOAT, ["B", "L"])],
                  [_vi("top", T.FLOAT, ["B", 2]), _vi("cum", T.FLOAT, ["B", "L"]), _vi("mod", T.INT64, [2])],
                  [k, axis, three])


def lstm_model():
    """LSTM with omitted optional inputs ("") and an omitted first output."""
    rng = np.random.default_rng(0)
    hidden, size = 5, 4
    w = nh.from_array(rng.standard_normal((1, 4 * hidden, size)).astype(np.float32), "W")
    r = nh.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32), "R")
    b = nh.from_array(rng.standard_normal((1, 8 * hidden)).astype(np.float32), "Bias")
    return _model([h.make_node("Relu", ["x"], ["r"]),
                   h.make_node("LSTM", ["r", "W", "R", "Bias", "", ""], ["", "yh"], hidden_size=hidden),
                   h.make_node("Sigmoid", ["yh"], ["y"])],
                  [_vi("x", T.FLOAT, ["L", "B", size])], [_vi("y", T.FLOAT, [1, "B", hidden])], [w, r, b])


def einsum_model():
    """Einsum with a rank-0 input and a rank-0 result (the runtime may hand a
    rank-0 value as one element of rank 1: ONNX Runtime must see rank 0)."""
    return _model([h.make_node("Relu", ["v"], ["r"]), h.make_node("Einsum", ["r", "s"], ["e"], equation="i,->i"),
                   h.make_node("Einsum", ["e"], ["t"], equation="i->"), h.make_node("Neg", ["t"], ["y"])],
                  [_vi("v", T.FLOAT, ["B"]), _vi("s", T.FLOAT, [])], [_vi("y", T.FLOAT, [])])


def lrn_model():
    """LRN over a symbolic channel count (its pattern may decline it)."""
    return _model([h.make_node("Relu", ["x"], ["r"]), h.make_node("LRN", ["r"], ["n"], size=3),
                   h.make_node("Tanh", ["n"], ["y"])],
                  [_vi("x", T.FLOAT, ["B", "C", 4, 4])], [_vi("y", T.FLOAT, ["B", "C", 4, 4])])


def declined_model():
    """Softsign -> Det: the test makes the Softsign pattern decline."""
    return _model([h.make_node("Softsign", ["x"], ["s"]), h.make_node("Relu", ["s"], ["r"]),
                   h.make_node("Det", ["r"], ["y"])],
                  [_vi("x", T.FLOAT, ["B", 2, 2])], [_vi("y", T.FLOAT, ["B"])])


def nonzero_model():
    """NonZero: a data-dependent result shape, which kiln cannot preallocate."""
    return _model([h.make_node("Relu", ["x"], ["r"]), h.make_node("NonZero", ["r"], ["y"])],
                  [_vi("x", T.FLOAT, ["B", 3])], [_vi("y", T.INT64, [2, "N"])])


def custom_op_model():
    """An op of a domain ONNX Runtime does not know: nobody can run it."""
    graph = h.make_graph([h.make_node("Relu", ["x"], ["r"]), h.make_node("Foo", ["r"], ["y"], domain="com.example")],
                         "g", [_vi("x", T.FLOAT, ["B", 3])], [_vi("y", T.FLOAT, ["B", 3])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.example", 1)])


def _inputs(model, values, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for v in model.graph.input:
        shape = [d.dim_value or values[d.dim_param] for d in v.type.tensor_type.shape.dim]
        out[v.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _check_against_ort(model, compiled):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for values in VALUES:
        feeds = _inputs(model, values)
        got = compiled(*feeds.values())
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        want = sess.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            g = np.asarray(g)
            assert g.shape == w.shape and g.dtype == w.dtype, (values, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _compiled_fallbacks(compiled) -> Counter:
    """Fallback op name -> count in the compiled schedule."""
    steps = compiled.runtime.prepared.schedule.steps
    return Counter(n for s in steps if s.kind == "fallback" for n in (s.torch_ops or s.ops))


def _reported_fallbacks(report) -> Counter:
    return Counter({name: c["fallback"] for name, c in report.ops.items() if c.get("fallback")})


@pytest.mark.parametrize("make, ops", [
    (det_model, {"onnx.Det": 1}),
    (mixed_model, {"onnx.Hardmax": 1, "onnx.TopK": 1, "onnx.CumSum": 1, "onnx.Mod": 1}),
    (lstm_model, {"onnx.LSTM": 1}),
    (einsum_model, {"onnx.Einsum": 2}),
])
def test_onnx_fallbacks_match_onnxruntime_and_are_counted(make, ops):
    model = make()
    _, report = kiln.import_onnx(model, with_report=True)
    assert _reported_fallbacks(report) == Counter(ops)
    assert all(report.runtimes[name] == "onnxruntime" for name in ops)
    compiled = kiln.compile(model, fallback=True)
    assert _compiled_fallbacks(compiled) == Counter(ops)
    kernels = [k for k in compiled.runtime.kernels if isinstance(k, OrtFallbackKernel)]
    assert Counter(k.op_name for k in kernels) == Counter(ops)
    _check_against_ort(model, compiled)
    fb = compiled.report()["fallback"]
    assert fb["ops"] == sum(ops.values()) and sorted(fb["op_names"]) == sorted(ops)
    assert 0 < fb["share_of_ops"] < 1
    assert 0 < fb["share_of_time"] <= 1  # the ONNX Runtime calls were timed as fallback time
    assert "ONNX Runtime" in report.format()


def test_fallback_survives_save_and_load(tmp_path):
    model = mixed_model()
    compiled = kiln.compile(model)
    kiln.save(compiled, tmp_path / "a")
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert sorted(d["op_name"] for d in manifest["fallback"].values() if d.get("runtime") == "onnxruntime") == [
        "onnx.CumSum", "onnx.Hardmax", "onnx.Mod", "onnx.TopK"]
    loaded = kiln.load(tmp_path / "a")
    assert sum(isinstance(k, OrtFallbackKernel) for k in loaded.runtime.kernels) == 4
    for values in VALUES:
        feeds = _inputs(model, values, seed=1)
        for a, b in zip(compiled(*feeds.values()), loaded(*feeds.values())):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    _check_against_ort(model, loaded)


def _import_cli(model, tmp_path, name):
    from kiln.tools.kiln_import import main

    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    out = tmp_path / f"{name}.json"
    rc = main([str(path), "-o", str(tmp_path / f"{name}.mlir"), "--report-json", str(out)])
    return rc, (json.loads(out.read_text()) if rc == 0 else None)


@pytest.fixture
def softsign_declines(monkeypatch):
    """The Softsign pattern declines (as a pattern does for an attribute or
    shape it does not handle): the op must fall back to ONNX Runtime."""
    def decline(cx):
        raise Decline("declined for the test")

    monkeypatch.setitem(PATTERNS, "onnx.Softsign", decline)


@pytest.mark.parametrize("make", [det_model, mixed_model, lstm_model, lrn_model, declined_model, nonzero_model,
                                  custom_op_model])
def test_import_report_agrees_with_compile(make, tmp_path, softsign_declines):
    """For every op: fallback in the import report (API and kiln-import) iff
    a fallback kernel in the compiled model; converted ops compile; a node
    nothing can run is an error in both."""
    model = make()
    rc, cli = _import_cli(model, tmp_path, make.__name__)
    try:
        _, report = kiln.import_onnx(model, with_report=True)
    except UnsupportedError as e:
        assert rc == 1
        with pytest.raises(UnsupportedError) as err:
            kiln.compile(model)
        assert str(err.value) == str(e)
        return
    assert rc == 0
    compiled = kiln.compile(model)
    fallbacks = _compiled_fallbacks(compiled)
    assert _reported_fallbacks(report) == fallbacks
    assert Counter({k: v["fallback"] for k, v in cli["ops"].items() if v["fallback"]}) == fallbacks
    assert cli["totals"]["fallback"] == sum(fallbacks.values()) == compiled.report()["fallback"]["ops"]
    assert cli["fallback_runtimes"] == {name: "onnxruntime" for name in fallbacks}
    for name, counts in report.ops.items():
        if counts["fallback"] == 0:
            assert name not in fallbacks
    if make is declined_model:
        assert fallbacks == {"onnx.Softsign": 1, "onnx.Det": 1}
        assert any(n == "onnx.Softsign" and "declined for the test" in why for n, _, why in report.unsupported)
    _check_against_ort(model, compiled)


def test_unrunnable_nodes_are_errors_naming_the_node():
    with pytest.raises(UnsupportedError, match=r"onnx.NonZero at .*NonZero_1.*data-dependent"):
        kiln.import_onnx(nonzero_model())
    with pytest.raises(UnsupportedError, match=r"onnx.Foo at .*ONNX Runtime cannot run it either"):
        kiln.compile(custom_op_model())


def test_fallback_false_still_lists_the_op():
    with pytest.raises(UnsupportedError, match=r"onnx.Det at .*no kiln pattern"):
        kiln.compile(det_model(), fallback=False)


def test_missing_onnxruntime_is_an_error_naming_the_extra(monkeypatch, tmp_path):
    model = det_model()
    compiled = kiln.compile(model)
    kiln.save(compiled, tmp_path / "a")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    _, report = kiln.import_onnx(model, with_report=True)
    assert any(EXTRA in n and "onnx.Det" in n for n in report.notes)
    with pytest.raises(KilnError, match=r"onnx.Det.*ONNX Runtime, which is not installed.*kiln\[onnxruntime\]"):
        kiln.compile(model)
    with pytest.raises(KilnError, match=r"kiln\[onnxruntime\]"):
        kiln.load(tmp_path / "a")


def test_concurrent_first_calls_share_one_session():
    model = det_model()
    compiled = kiln.compile(model)
    (kernel,) = [k for k in compiled.runtime.kernels if isinstance(k, OrtFallbackKernel)]
    assert kernel._session is None  # created on the first call, not before
    xs = [np.random.default_rng(i).standard_normal((i + 1, 3, 3)).astype(np.float32) for i in range(6)]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    results, errors = {}, []
    barrier = threading.Barrier(len(xs))

    def call(i):
        try:
            barrier.wait()
            results[i] = compiled(xs[i])
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, x in enumerate(xs):
        np.testing.assert_allclose(results[i], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    first = kernel._session
    compiled(xs[0])
    assert kernel._session is first


def _det_kernel(outputs=None, inputs=None):
    compiled = kiln.compile(det_model())
    (k,) = [k for k in compiled.runtime.kernels if isinstance(k, OrtFallbackKernel)]
    data = k.to_json()
    if outputs is not None:
        data["outputs"] = outputs
    if inputs is not None:
        data["inputs"] = inputs
    from kiln.runtime.artifact import _spec

    return OrtFallbackKernel.from_json(data, _spec)


def test_a_result_shape_other_than_the_types_give_is_an_error():
    k = _det_kernel(outputs=[{"dims": ["B+1"], "dtype": "f32"}])
    x = np.ones((4, 3, 3), np.float32)
    with pytest.raises(KilnError, match=r"Det.*ONNX Runtime returned shape \[4\].*kiln's types give \[5\]"):
        k([x], [np.empty(5, np.float32)], {"B": 4})


def test_inputs_and_results_are_dtype_checked():
    k = _det_kernel()
    with pytest.raises(KilnError, match=r"input #0 is f64, the node takes f32"):
        k([np.ones((2, 3, 3))], [np.empty(2, np.float32)], {"B": 2})
    k = _det_kernel(outputs=[{"dims": ["B"], "dtype": "f64"}])
    with pytest.raises(KilnError, match=r"ONNX Runtime returned f32 .* kiln's types give f64"):
        k([np.ones((2, 3, 3), np.float32)], [np.empty(2, np.float64)], {"B": 2})


def test_malformed_kernel_data_is_a_kiln_error():
    from kiln.runtime.artifact import _spec

    with pytest.raises(KilnError, match="malformed ONNX Runtime fallback"):
        OrtFallbackKernel.from_json({"runtime": "onnxruntime", "name": "x", "op_name": "onnx.Det",
                                     "inputs": [], "outputs": [], "model": "!!", "feeds": [],
                                     "result_names": [], "results": []}, _spec)


def test_torch_import_report_agrees_with_compile():
    """The torch path: a PyTorch fallback is reported as one, with its runtime."""
    import torch

    class Bessel(torch.nn.Module):
        def forward(self, x):
            return torch.relu(torch.special.bessel_j0(x * 2.0))

    dyn = {"x": {0: torch.export.Dim("B", min=1, max=64)}}
    args = (torch.randn(4, 8),)
    _, report = kiln.import_torch(Bessel(), args, dyn, with_report=True)
    compiled = kiln.compile(Bessel(), args, dynamic_shapes=dyn)
    assert _reported_fallbacks(report) == _compiled_fallbacks(compiled) == {"aten.special_bessel_j0": 1}
    assert report.runtimes == {"aten.special_bessel_j0": "pytorch"}


def test_a_node_rebuilt_from_its_attributes_runs_without_the_onnx_model():
    """convert-torch-to-kiln on torch-dialect IR (no ONNX model at hand, as
    kiln-opt runs it) rebuilds each node from the importer's attributes; an
    omitted output (a !torch.none result) stays omitted."""
    from torch_mlir.extras import onnx_importer

    from kiln._mlir import ir
    from kiln.context import make_context
    from kiln.conversions.torch_to_kiln import convert_module
    from kiln.frontends.onnx_import import _input_dims, _label_nodes

    for make in (mixed_model, lstm_model):
        model = onnx.shape_inference.infer_shapes(make(), data_prop=True)
        _label_nodes(model.graph)
        ctx = make_context(torch=True)
        with ctx, ir.Location.unknown():
            with warnings.catch_warnings():  # the importer warns about the omitted LSTM output
                warnings.simplefilter("ignore")
                info = onnx_importer.ModelInfo(model)
                module = info.create_module(context=ctx)
                onnx_importer.NodeImporter.define_function(info.main_graph, module.operation).import_all()
            arg_dims, named = _input_dims(model, {})
            convert_module(module.operation, arg_dims=arg_dims, symbol_ranges={n: (1, 64) for n in named})
            text = str(module)
        assert "onnx_model" in text
        _check_against_ort(make(), kiln.compile(text))
