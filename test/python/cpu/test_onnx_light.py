"""ONNX light CNNs (shipped with the onnx package) compiled for the CPU vs ONNX Runtime."""

import os

import numpy as np
import pytest

import kiln

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
# The fastest to compile and run here; the others are exercised by bench/.
MODELS = ["squeezenet", "shufflenet"]


@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_onnxruntime(name):
    path = os.path.join(LIGHT, f"light_{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not shipped with this onnx")
    model = kiln.compile(path)
    m = onnx.load(path)
    inits = {t.name for t in m.graph.initializer}
    feed = [g.name for g in m.graph.input if g.name not in inits][0]
    shape = [d.value for d in model.inputs[0].dims]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = model(x)
    got = got[0] if isinstance(got, tuple) else got
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {feed: x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
