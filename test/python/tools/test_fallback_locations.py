"""Fallback ops are reported and warned about with where the model uses them.

A torch model's fallback names ``file.py:LINE`` of the model's own code (the
innermost frame of the user's code in torch.export's stack trace, never a
frame inside torch), an ONNX model's the node (``node 'Det_1' (Det)``); both
in ``kiln-import --report`` / ``ImportReport``, in ``compiled.report()`` and
in the one warning a compile logs (once per compile, cache hits included,
never per call).  The compile's stages are logged at INFO.
"""

import inspect
import json
import logging
import os
import sys

import numpy as np
import onnx.helper as h
import pytest
import torch
from onnx import TensorProto as T

import kiln
from kiln._mlir import ir
from kiln.locations import location_text

_MARK = "bessel_j0"  # the op kiln has no lowering for: a PyTorch fallback


class Inner(torch.nn.Module):
    def forward(self, x):
        y = torch.special.bessel_j0(x)  # the fallback
        return y * 3


class Outer(torch.nn.Module):
    """Calls Inner: the stack trace has two frames of this file; the inner one is where the op is."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(torch.relu(x)) + 1


def _line_of(fn, text: str) -> int:
    """The line number of ``fn``'s source line holding ``text``."""
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, hits
    return hits[0]


def _where(fn) -> str:
    return f"{os.path.realpath(inspect.getsourcefile(fn))}:{_line_of(fn, _MARK)}"


def _real(loc: str) -> str:
    path, _, line = loc.rpartition(":")
    return f"{os.path.realpath(path)}:{line}"


def _fallback_warnings(caplog):
    return [r for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("kiln")
            and "fallback" in r.getMessage()]


def test_torch_fallback_reported_and_warned_once_with_the_model_line(caplog, tmp_path):
    where = _where(Inner.forward)
    dyn = {"x": {0: torch.export.Dim("B", min=1, max=16)}}
    with caplog.at_level(logging.INFO, logger="kiln"):
        compiled = kiln.compile(Outer(), (torch.randn(4, 8),), dynamic_shapes=dyn)
    warned = _fallback_warnings(caplog)
    assert len(warned) == 1, [r.getMessage() for r in warned]
    message = warned[0].getMessage()
    assert message.startswith("1 op(s) of this model run as PyTorch fallbacks, not compiled by kiln: ")
    assert _real_message(message).endswith(f": aten.special_bessel_j0 at {where}"), message
    # The stages, each logged once at INFO (kiln-compile -v, KILN_LOG=info).
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    for stage in ("torch.export of Outer: ", "torch-mlir FX import: ", "conversion to kiln: ", "import (Outer): ",
                  "graph passes (kiln-default-cpu): ", "partition + memory plan: ", "kernels: ", "compiled in "):
        assert sum(m.startswith(stage) for m in infos) == 1, (stage, infos)

    report = compiled.report()
    sites = report["fallback"]["sites"]
    assert [(s["op"], _real(s["location"]), s["runtime"]) for s in sites] == [
        ("aten.special_bessel_j0", where, "pytorch")]
    assert f"fallback aten.special_bessel_j0 at {sites[0]['location']} (runs in PyTorch)" in str(report)

    # Calls warn nothing; the fallback runs (numerics at min, middle and max of B).
    caplog.clear()
    model = Outer()
    for b in (1, 7, 16):
        x = torch.randn(b, 8)
        np.testing.assert_allclose(np.asarray(compiled(x)), model(x).numpy(), rtol=1e-5, atol=1e-6)
    assert _fallback_warnings(caplog) == []

    # A second compile (its kernels from the cache) warns once again: once per compile.
    with caplog.at_level(logging.WARNING, logger="kiln"):
        again = kiln.compile(Outer(), (torch.randn(4, 8),), dynamic_shapes=dyn)
    assert again.report().get("kernel_cache") == "hit"
    assert len(_fallback_warnings(caplog)) == 1

    # An artifact keeps the sites: a loaded model reports them too.
    kiln.save(compiled, tmp_path / "art")
    loaded = kiln.load(tmp_path / "art")
    assert loaded.report()["fallback"]["sites"] == sites


def _real_message(message: str) -> str:
    """``message`` with each ``path:line`` after `` at `` made a real path."""
    head, _, loc = message.rpartition(" at ")
    return f"{head} at {_real(loc)}"


FACTORY = '''\
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        return torch.special.bessel_j0(y) - y


def factory():
    return Model(), (torch.randn(2, 4),), ({0: torch.export.Dim("B", min=1, max=8)},)
'''


def test_kiln_import_report_lists_each_fallback_with_the_model_line(tmp_path, monkeypatch, capsys):
    from kiln.tools.kiln_import import main

    (tmp_path / "fallback_factory_43.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    import fallback_factory_43 as ff

    where = _where(ff.Model.forward)
    out = tmp_path / "report.json"
    assert main(["fallback_factory_43:factory", "-o", str(tmp_path / "m.mlir"), "--report", "--report-json",
                 str(out), "-q"]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("fallback: ")]
    assert len(lines) == 1, err
    head, _, tail = lines[0].removeprefix("fallback: aten.special_bessel_j0 at ").partition(": ")
    assert _real(head) == where and tail == "no kiln pattern for this op (runs in PyTorch)", lines
    sites = json.loads(out.read_text())["fallback_sites"]
    assert [(s["op"], _real(s["location"]), s["runtime"]) for s in sites] == [
        ("aten.special_bessel_j0", where, "pytorch")]
    sys.modules.pop("fallback_factory_43", None)


def _det_model(name):
    """Relu -> Det (no kiln pattern: ONNX Runtime runs it) -> Neg."""
    vi = h.make_tensor_value_info
    graph = h.make_graph([h.make_node("Relu", ["x"], ["r"]), h.make_node("Det", ["r"], ["d"], name=name),
                          h.make_node("Neg", ["d"], ["y"])], "g",
                         [vi("x", T.FLOAT, ["B", 3, 3])], [vi("y", T.FLOAT, ["B"])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("name,label", [("the_det", "node 'the_det' (Det)"), ("", "node 'Det_1' (Det)")])
def test_onnx_fallback_names_the_node(caplog, name, label):
    model = _det_model(name)
    _, report = kiln.import_onnx(model, symbols={"B": (1, 8)}, with_report=True)
    assert report.fallback_sites == [{"op": "onnx.Det", "location": label, "runtime": "onnxruntime",
                                      "reason": report.unsupported[0][2]}]
    assert f"fallback: onnx.Det at {label}: " in report.format()
    with caplog.at_level(logging.WARNING, logger="kiln"):
        compiled = kiln.compile(model, symbols={"B": (1, 8)})
    warned = _fallback_warnings(caplog)
    assert len(warned) == 1
    assert warned[0].getMessage() == ("1 op(s) of this model run as ONNX Runtime fallbacks, not compiled by kiln: "
                                      f"onnx.Det at {label}")
    assert compiled.report()["fallback"]["sites"] == [{"op": "onnx.Det", "location": label, "runtime": "onnxruntime"}]
    for b in (1, 4, 8):
        x = np.random.default_rng(b).standard_normal((b, 3, 3)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), -np.linalg.det(np.maximum(x, 0)), rtol=1e-4, atol=1e-5)


def test_location_text_skips_frames_inside_torch():
    import torch.nn.modules.activation as act

    user = os.path.realpath(__file__)
    with ir.Context():
        lib = ir.Location.file(act.__file__, 865, 0)
        mine = ir.Location.file(user, 10, 0)
        outer = ir.Location.file(user, 20, 0)
        # torch-mlir's shape: callsite(innermost at callsite(next at outermost)).
        assert location_text(ir.Location.callsite(lib, [mine, outer])) == f"{user}:10"
        assert location_text(ir.Location.callsite(mine, [outer])) == f"{user}:10"
        # Only torch frames: the innermost one is still better than nothing.
        assert location_text(lib) == f"{act.__file__}:865"
        assert location_text(ir.Location.name("node 'Mul_3' (Mul)", ir.Location.unknown())) == "node 'Mul_3' (Mul)"
        assert location_text(ir.Location.fused([ir.Location.unknown(), mine])) == f"{user}:10"
        assert location_text(ir.Location.unknown()) == "unknown"
