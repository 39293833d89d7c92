"""Importer and conversion hardening (issue 35): rank-0 resource constants
compile (they used to hang the LLVM lowering), ONNX errors name the node,
and a feature kiln lacks is an UnsupportedError wherever it is found.

The compiles that used to hang run in a subprocess under a timeout, with
stderr to a file: the hang printed hundreds of megabytes to stderr.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

REPO_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
ONNX_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
TIMEOUT = 150


def _run_script(code: str, timeout: int = TIMEOUT) -> str:
    """Run ``code`` in a fresh Python; its stdout.  Fails on a timeout or a
    non-zero exit, with the tail of stderr."""
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                                  stderr=err, timeout=timeout, cwd=REPO_PARENT)
        except subprocess.TimeoutExpired:
            proc = None
        err.seek(max(0, err.seek(0, 2) - 2000))
        tail = err.read().decode(errors="replace")
    if proc is None:
        pytest.fail(f"timed out after {timeout} s; stderr tail: {tail}")
    assert proc.returncode == 0, f"exit {proc.returncode}; stderr tail: {tail}"
    return proc.stdout.decode()


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


# -- rank-0 resource constants ----------------------------------------------------

# (numpy dtype, ONNX type, op): Y = op(X, s) with a rank-0 initializer s
# (stored as raw data, so the importer makes it a dense_resource blob).
SCALAR_CASES = {
    "f32": (np.float32, TensorProto.FLOAT, "Mul"),
    "f64": (np.float64, TensorProto.DOUBLE, "Mul"),
    "f16": (np.float16, TensorProto.FLOAT16, "Mul"),
    "i64": (np.int64, TensorProto.INT64, "Add"),
    "i32": (np.int32, TensorProto.INT32, "Add"),
    "i1": (np.bool_, TensorProto.BOOL, "Xor"),
}


def _scalar_model(name):
    dt, tp, op = SCALAR_CASES[name]
    s = numpy_helper.from_array(np.array(True if dt is np.bool_ else 3, dtype=dt), "s")
    assert s.HasField("raw_data")
    return _model([helper.make_node(op, ["X", "s"], ["Y"], name="the_op")], [("X", tp, [3, 4])],
                  [("Y", tp, [3, 4])], [s])


def test_rank0_initializers_of_every_dtype_compile_and_match_onnxruntime(tmp_path):
    for name in SCALAR_CASES:
        onnx.save(_scalar_model(name), str(tmp_path / f"{name}.onnx"))
    out = _run_script(f"""
        import numpy as np, onnxruntime as ort, kiln
        rng = np.random.default_rng(0)
        for name, dt in {[(n, np.dtype(c[0]).name) for n, c in SCALAR_CASES.items()]!r}:
            path = {str(tmp_path)!r} + "/" + name + ".onnx"
            x = (rng.random((3, 4)) > 0.5) if dt == "bool" else (rng.standard_normal((3, 4)) * 4).astype(dt)
            got = np.asarray(kiln.compile(path)(x))
            want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {{"X": x}})[0]
            assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
            np.testing.assert_allclose(got, want, rtol=1e-3)
            print("ok", name)
    """)
    assert out.split() == [w for n in SCALAR_CASES for w in ("ok", n)]


def test_boolean_initializer_compiles(tmp_path):
    """A bool initializer of rank >= 1 (raw data: a dense_resource blob) -- what torch.onnx makes of a BERT's
    folded attention mask, [1, 1, 128, 1] -- failed the LLVM translation of its global ("no known conversion
    for innermost element type")."""
    rng = np.random.default_rng(0)
    mask = numpy_helper.from_array(rng.random((1, 1, 128, 1)) > 0.5, "m")
    assert mask.HasField("raw_data")
    model = _model([helper.make_node("Where", ["m", "X", "Y"], ["Z"], name="select")],
                   [("X", TensorProto.FLOAT, [2, 3, 128, 8]), ("Y", TensorProto.FLOAT, [2, 3, 128, 8])],
                   [("Z", TensorProto.FLOAT, [2, 3, 128, 8])], [mask])
    path = tmp_path / "where.onnx"
    onnx.save(model, str(path))
    x, y = rng.standard_normal((2, 2, 3, 128, 8)).astype(np.float32)
    got = np.asarray(kiln.compile(str(path))(x, y))
    np.testing.assert_array_equal(got, np.where(numpy_helper.to_array(mask), x, y))


@pytest.mark.parametrize("case", ["pytorch-converted/test_Softsign", "pytorch-operator/test_operator_addconstant"])
def test_node_suite_models_with_scalar_constants_compile(case):
    folder = os.path.join(ONNX_DATA, case)
    if not os.path.isdir(folder):
        pytest.skip(f"{folder} is not shipped with this onnx")
    out = _run_script(f"""
        import glob, numpy as np, onnx, kiln
        from onnx import numpy_helper
        folder = {folder!r}
        load = lambda pattern: [numpy_helper.to_array(onnx.load_tensor(p))
                                for p in sorted(glob.glob(folder + "/test_data_set_0/" + pattern))]
        got = kiln.compile(folder + "/model.onnx")(*load("input_*.pb"))
        np.testing.assert_allclose(np.asarray(got), load("output_*.pb")[0], rtol=1e-5, atol=1e-6)
        print("ok")
    """)
    assert out.strip() == "ok"


def test_quickstart_block_exported_to_onnx_compiles(tmp_path):
    """The quickstart block with is_causal=False, exported at opset 17 (its
    attention scale became a rank-0 constant), with dynamic B and L."""
    out = _run_script(f"""
        import sys, numpy as np, onnxruntime as ort, torch
        from torch import nn
        import kiln
        from kiln.examples.quickstart import Block

        class NonCausal(Block):
            def forward(self, x):
                b, seq, h = x.shape
                q, k, v = self.qkv(self.ln1(x)).reshape(b, seq, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
                a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False)
                x = x + self.proj(a.transpose(1, 2).reshape(b, seq, h))
                return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

        torch.manual_seed(0)
        path = {str(tmp_path / "block.onnx")!r}
        torch.onnx.export(NonCausal().eval(), (torch.randn(2, 8, 64),), path, input_names=["x"],
                          output_names=["y"], dynamo=False, opset_version=17,
                          dynamic_axes={{"x": {{0: "B", 1: "L"}}}})
        compiled = kiln.compile(path, symbols={{"B": (1, 16), "L": (1, 64)}})
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        for shape in [(1, 1, 64), (3, 17, 64)]:
            x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(compiled(x), session.run(None, {{"x": x}})[0], rtol=1e-4, atol=1e-5)
        print("ok")
    """, timeout=240)
    assert out.strip().endswith("ok")


# -- ONNX errors name the node -----------------------------------------------------


def _unary(op_type, dtype=TensorProto.FLOAT, name="", **attrs):
    return _model([helper.make_node(op_type, ["x"], ["y"], name=name, **attrs)], [("x", dtype, [2, 3])],
                  [("y", dtype, [2, 3])])


def test_an_unnamed_node_is_named_by_op_type_and_index():
    with pytest.raises(kiln.UnsupportedError) as e:
        kiln.import_onnx(_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Round", ["r"], ["y"])],
                                [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])]),
                         fallback=False)
    assert "onnx.Round at node 'Round_1' (Round): no kiln pattern for this op" in str(e.value)
    assert 'loc("")' not in str(e.value)


def test_every_op_of_an_unnamed_graph_has_its_node_location():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "x"], ["m"]),
             helper.make_node("Tanh", ["m"], ["y"])]
    module = kiln.import_onnx(_model(nodes, [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])]))
    locs = {}
    for op in module.body.operations[-1].regions[0].blocks[0].operations:
        if op.operation.name.startswith("kiln."):
            locs[op.operation.name] = str(op.operation.location)
    assert locs == {"kiln.relu": "loc(\"node 'Relu_0' (Relu)\")", "kiln.mul": "loc(\"node 'Mul_1' (Mul)\")",
                    "kiln.tanh": "loc(\"node 'Tanh_2' (Tanh)\")"}


def test_a_shape_mismatch_names_the_node():
    model = _model([helper.make_node("Add", ["x", "z"], ["y"], name="Add_7")],
                   [("x", TensorProto.FLOAT, [2, 3]), ("z", TensorProto.FLOAT, [4, 5])],
                   [("y", TensorProto.FLOAT, [2, 3])])
    with pytest.raises(kiln.UnsupportedError) as e:
        kiln.import_onnx(model, fallback=False)
    assert ("onnx.Add at node 'Add_7' (Add): 'kiln.add' op operands are not broadcast-compatible: "
            "cannot broadcast [2, 3] with [4, 5]") in str(e.value)


def test_an_onnx_fallback_that_cannot_run_names_the_node():
    # An ONNX op kiln lacks runs in ONNX Runtime (kiln.runtime.ort_fallback);
    # one of a domain ONNX Runtime does not know either is an error at import.
    model = _unary("Foo", name="custom", domain="com.example")
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(kiln.UnsupportedError) as e:
        kiln.compile(model)
    assert str(e.value).startswith("onnx.Foo at node 'custom' (Foo): no kiln pattern for this op, "
                                   "and ONNX Runtime cannot run it either: ")
    assert "com.example:Foo" in str(e.value)


def test_an_importer_failure_names_the_node_and_is_unsupported():
    const = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.STRING, [1], [b"a"]))
    model = _model([const, helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])],
                   [("y", TensorProto.FLOAT, [2])])
    with pytest.raises(kiln.UnsupportedError) as e:
        kiln.import_onnx(model)
    assert str(e.value) == ("<model>: node 'Constant_0' (Constant) has attribute 'value' of type tensor(string), "
                            "which kiln does not support")


# -- a missing feature is an UnsupportedError wherever it is found --------------------


def test_an_unsupported_dtype_inside_the_graph_is_unsupported():
    # (uint8 is supported since quantized models are: uint16 is not.)
    model = _model([helper.make_node("Cast", ["x"], ["c"], to=TensorProto.UINT16, name="to_u16"),
                    helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)],
                   [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])])
    with pytest.raises(kiln.UnsupportedError) as e:
        kiln.import_onnx(model)
    assert str(e.value) == "onnx.Cast at node 'to_u16' (Cast): result #0: dtype ui16 is not supported by kiln"


@pytest.mark.parametrize("value_type, text", [
    (helper.make_tensor_type_proto(TensorProto.UINT16, [2, 3]), "dtype uint16"),
    (helper.make_tensor_type_proto(TensorProto.STRING, [2]), "dtype string"),
    (helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3])),
     "sequence type seq(tensor(float))"),
    (helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3])),
     "optional type optional(tensor(float))"),
])
def test_an_unsupported_graph_input_is_named(value_type, text):
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g",
                              [helper.make_value_info("x", value_type), helper.make_tensor_value_info(
                                  "w", TensorProto.FLOAT, [2])], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(kiln.UnsupportedError) as e:
        kiln.import_onnx(model)
    assert str(e.value) == f"<model>: graph input 'x' has {text}, which kiln does not support"


def test_a_sequence_inside_the_graph_is_unsupported():
    model = _model([helper.make_node("SequenceConstruct", ["x", "x"], ["s"], name="seq"),
                    helper.make_node("SequenceAt", ["s", "i"], ["y"])],
                   [("x", TensorProto.FLOAT, [2, 3]), ("i", TensorProto.INT64, [])], [("y", TensorProto.FLOAT, [2, 3])])
    with pytest.raises(kiln.UnsupportedError) as e:
        kiln.import_onnx(model)
    assert str(e.value) == ("<model>: node 'seq' (SequenceConstruct) output 's' has sequence type "
                            "seq(tensor(float)), which kiln does not support")


@pytest.mark.parametrize("tp, dt", [(TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64)])
def test_integer_pow_matches_onnxruntime(tp, dt):
    import onnxruntime

    model = _model([helper.make_node("Pow", ["x", "e"], ["y"])], [("x", tp, [4, 6]), ("e", tp, [6])],
                   [("y", tp, [4, 6])])
    x = np.array([[2, -3, 0, 1, -1, 7], [1, -1, 2, -2, 3, 0], [-1, -1, 1, 1, 5, -4], [2, 2, 10, -10, 0, 0]], dt)
    e = np.array([3, -1, 0, -5, 7, 2], dt)  # negative exponents, 0 ** 0, (-1) ** odd
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = kiln.compile(model)
    for xs, es in ((x, e), (np.zeros_like(x), -np.ones_like(e))):  # 0 ** -1: the x86 cast of inf
        want = session.run(None, {"x": xs, "e": es})[0]
        got = compiled(xs, es)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_integer_base_to_a_float_power_matches_onnxruntime():
    import onnxruntime

    model = _model([helper.make_node("Pow", ["x", "e"], ["y"])],
                   [("x", TensorProto.INT32, [4]), ("e", TensorProto.FLOAT, [4])], [("y", TensorProto.INT32, [4])])
    x, e = np.array([4, 9, 2, 27], np.int32), np.array([0.5, 0.5, 3.0, 1 / 3], np.float32)
    want = onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, {"x": x, "e": e})[0]
    np.testing.assert_array_equal(kiln.compile(model)(x, e), want)


def test_an_op_the_llvm_lowering_lacks_is_named_with_its_types():
    from kiln._mlir import ir
    from kiln.backends.cpu.pipeline import TO_LLVM, run_upstream
    from kiln.context import make_context

    with make_context():
        module = ir.Module.parse("func.func @f(%a: i32, %b: i32) -> i32 {\n"
                                 "  %0 = math.ipowi %a, %b : i32 loc(\"node 'p' (Pow)\")\n  return %0 : i32\n}")
        with pytest.raises(kiln.UnsupportedError) as e:
            run_upstream(module.operation, TO_LLVM, "kiln-cpu-to-llvm")
    assert e.value.message == "the CPU backend cannot lower 'math.ipowi' on (i32, i32) -> i32 at loc(\"node 'p' (Pow)\")"
