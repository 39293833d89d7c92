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
