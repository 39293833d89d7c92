"""import_onnx: the onnx package's light CNN models, the backend node cases,
dim_param symbols and ranges, shape folding, locations, fallback, bad input,
and numerics against ONNX Runtime through kiln.compile."""

import glob
import os

import numpy as np
import onnx
import pytest
from kiln_ir_helpers import kiln_ops, result_dims
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln._mlir import ir
from kiln.module import symbols_of, verify_module

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(LIGHT, "light_*.onnx")))


def test_the_light_models_ship_with_onnx():
    names = {"resnet50", "squeezenet", "inception_v1", "inception_v2", "densenet121", "shufflenet", "zfnet512",
             "bvlc_alexnet"}
    assert names <= {m[len("light_"):-len(".onnx")] for m in LIGHT_MODELS}


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_imports_without_fallback(name):
    path = os.path.join(LIGHT, name)
    module, report = kiln.import_onnx(path, with_report=True)
    verify_module(module.operation)
    assert report.fallbacks == 0, report.unsupported[:3]
    assert not any(op.name == "kiln.fallback" for op in kiln_ops(module))
    want = [[str(d.dim_value) for d in o.type.tensor_type.shape.dim] for o in onnx.load(path).graph.output]
    assert result_dims(module) == want
    assert report.ops["onnx.Conv"]["converted"] > 0


def _cnn(dim_param="N"):
    """Conv -> BatchNorm -> Relu -> MaxPool -> GlobalAveragePool -> Flatten -> Gemm -> Softmax."""
    rng = np.random.default_rng(0)

    def init(name, *shape, positive=False):
        a = rng.standard_normal(shape).astype(np.float32)
        return numpy_helper.from_array(np.abs(a) + 0.5 if positive else a, name)

    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], name="bn", epsilon=1e-5),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1),
    ]
    inits = [init("w", 8, 3, 3, 3), init("b", 8), init("s", 8), init("bb", 8), init("m", 8),
             init("v", 8, positive=True), init("fw", 10, 8), init("fb", 10)]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim_param, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim_param, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dim_param_becomes_a_symbol_with_the_given_range():
    module, report = kiln.import_onnx(_cnn(), symbols={"N": (1, 16)}, with_report=True)
    assert {s: (i.min, i.max) for s, i in symbols_of(module.operation).items()} == {"N": (1, 16)}
    assert result_dims(module) == [["N", "10"]]
    assert report.fallbacks == 0 and not report.notes
    assert report.ops["onnx.Gemm"] == {"converted": 0, "decomposed": 1, "fallback": 0}
    ops = kiln_ops(module)
    for op in ops:
        assert str(op.location).startswith('loc("'), str(op.location)  # the ONNX node name
    assert {str(op.location) for op in ops if op.name == "kiln.conv2d"} == {'loc("node \'conv\' (Conv)")'}
    for op in ops:
        if op.name == "kiln.constant" and "[8, 3, 3, 3]" in str(op.results[0].type):
            ir.DenseResourceElementsAttr(op.attributes["value"])  # the initializer, not a Python list


def test_unset_range_is_reported():
    module, report = kiln.import_onnx(_cnn(), with_report=True)
    assert symbols_of(module.operation)["N"].max == 2**31 - 1
    assert report.notes == ["symbol 'N' has no range given: 1 <= N <= 2147483647"]


def test_cnn_numerics_against_onnxruntime():
    import onnxruntime

    model = _cnn()
    compiled = kiln.compile(model, symbols={"N": (1, 16)})
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for n in (1, 7, 16):
        x = rng.standard_normal((n, 3, 8, 8)).astype(np.float32)
        (want,) = session.run(None, {"x": x})
        np.testing.assert_allclose(np.asarray(compiled(x)), want, rtol=1e-4, atol=1e-5)


def _reshape_by_shape_subgraph():
    """y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) with x: [N, 3, 4]."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Constant", [], ["zero"], name="zero", value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Gather", ["shape", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Constant", [], ["ax"], name="ax", value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"], name="unsqueeze"),
        helper.make_node("Constant", [], ["m1"], name="m1", value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Concat", ["n1", "m1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_subgraph_folds_into_reshape_attribute():
    module, report = kiln.import_onnx(_reshape_by_shape_subgraph(), symbols={"N": (1, 64)}, with_report=True)
    assert report.fallbacks == 0
    assert [op.name for op in kiln_ops(module)] == ["kiln.reshape"]
    assert result_dims(module) == [["N", "12"]]


def _single(op_type, **attrs):
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], ["y"], name="the_node", **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_unsupported_onnx_op_falls_back_or_raises():
    module, report = kiln.import_onnx(_single("Round"), with_report=True)
    fb = [op for op in kiln_ops(module) if op.name == "kiln.fallback"]
    assert len(fb) == 1 and fb[0].opview.attr("op_name") == "onnx.Round"
    assert report.ops == {"onnx.Round": {"converted": 0, "decomposed": 0, "fallback": 1}}
    with pytest.raises(kiln.UnsupportedError) as e:
        kiln.import_onnx(_single("Round"), fallback=False)
    assert "onnx.Round at node 'the_node' (Round): no kiln pattern for this op" in str(e.value)


def test_truncated_file_is_a_parse_error(tmp_path):
    data = open(os.path.join(LIGHT, "light_squeezenet.onnx"), "rb").read()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[:200])
    with pytest.raises(kiln.ParseError, match="is not a valid ONNX model"):
        kiln.import_onnx(str(path))


def test_missing_file_is_a_parse_error(tmp_path):
    with pytest.raises(kiln.ParseError, match="cannot read ONNX model .*missing.onnx"):
        kiln.import_onnx(str(tmp_path / "missing.onnx"))


def test_unreadable_opset_is_unsupported():
    model = _single("Relu")
    model.opset_import[0].version = 99
    with pytest.raises(kiln.UnsupportedError, match=r"ONNX opset 99 is not supported \(this importer reads opsets 1\.\.\d+\)"):
        kiln.import_onnx(model)


def test_bad_symbol_ranges():
    with pytest.raises(kiln.KilnError, match="symbol 'N' has min 10 > max 2"):
        kiln.import_onnx(_cnn(), symbols={"N": (10, 2)})
    with pytest.raises(kiln.KilnError, match="symbols M are not dim_params of the model's inputs"):
        kiln.import_onnx(_cnn(), symbols={"M": (1, 2)})


def test_isnan_isinf_match_onnxruntime():
    """IsNaN / IsInf (what torch's dynamo exporter emits for masked attention) compile, NaN and -inf included."""
    import onnxruntime as ort

    nodes = [helper.make_node("IsNaN", ["x"], ["nan"]), helper.make_node("IsInf", ["x"], ["inf"]),
             helper.make_node("IsInf", ["x"], ["pos"], detect_negative=0),
             helper.make_node("IsInf", ["x"], ["neg"], detect_positive=0)]
    outs = [helper.make_tensor_value_info(n, TensorProto.BOOL, ["N"]) for n in ("nan", "inf", "pos", "neg")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    compiled = kiln.compile(model, fallback=False, symbols={"N": (1, 64)})
    sess = ort.InferenceSession(model.SerializeToString())
    base = np.array([1, np.nan, np.inf, -np.inf, 0, -2], np.float32)
    for n in (1, 6, 64):
        x = np.resize(base, n)
        for got, want in zip(compiled(x), sess.run(None, {"x": x})):
            np.testing.assert_array_equal(np.asarray(got), want)


def test_an_op_deprecated_at_the_models_opset_imports():
    """GroupNormalization-18 (deprecated by -21; ONNX Runtime runs it) fails onnx.checker, and only that complaint is let through."""
    import onnxruntime as ort

    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-5)
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [vi("x", TensorProto.FLOAT, ["N", 4, 3])], [vi("y", TensorProto.FLOAT, ["N", 4, 3])],
                              [numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "s"),
                               numpy_helper.from_array(np.array([1.0, -1.0], np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    compiled = kiln.compile(model, fallback=False, symbols={"N": (1, 8)})
    sess = ort.InferenceSession(model.SerializeToString())
    for n in (1, 5, 8):
        x = np.random.default_rng(n).standard_normal((n, 4, 3)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_a_rank0_value_input_stays_rank0():
    """A scalar value input (HannWindow's size) is frozen as a rank-0 constant per call, not a 1-element vector."""
    import onnxruntime as ort

    nodes = [helper.make_node("HannWindow", ["size"], ["w"]), helper.make_node("Mul", ["x", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("size", TensorProto.INT64, []),
                     helper.make_tensor_value_info("x", TensorProto.FLOAT, ["W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["W"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.compile(model, symbols={"W": (1, 64)})
    sess = ort.InferenceSession(model.SerializeToString())
    for w in (4, 9):
        feeds = {"size": np.array(w, np.int64), "x": np.linspace(1, 2, w, dtype=np.float32)}
        np.testing.assert_allclose(compiled(**feeds), sess.run(None, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stage", ["kiln-cpu-prepare", "kiln-cpu-bufferize", "kiln-cpu-to-llvm"])
def test_named_results_survive_every_cpu_stage(tmp_path, stage):
    """Output names are result attributes; kiln-cpu-prepare turns results into output arguments, and
    their names move along (a res_attrs left behind made every later stage's IR invalid)."""
    import subprocess
    import sys

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    run = subprocess.run([sys.executable, "-m", "kiln.tools.kiln_compile", str(path), f"--stop-after={stage}"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert 'kiln.name = "x"' in run.stdout and 'kiln.name = "y"' in run.stdout
