"""Shared check for the ONNX tests: a model compiled once by kiln against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime

import kiln


def check_against_ort(model, feeds_list, symbols=None, rtol=1e-5, atol=1e-6):
    """Compile ``model`` once (fallback disabled); for each feed dict compare
    every output's shape and values with ONNX Runtime's."""
    compiled = kiln.compile(model, symbols=symbols, fallback=False)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    for feeds in feeds_list:
        want = session.run(None, feeds)
        got = compiled(*feeds.values())
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(want)
        for name, g, w in zip(names, got, want):
            g = np.asarray(g)
            where = f"{name} at {[v.shape for v in feeds.values()]}"
            assert g.shape == w.shape, f"{where}: shape {g.shape}, expected {w.shape}"
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=where)
