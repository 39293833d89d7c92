"""Small models for the tests of ``kiln validate`` and ``kiln-bench --model``:
a factory module written to a folder (for ``pkg.module:factory`` specs, in
this process and in a subprocess through PYTHONPATH) and an ONNX file."""

import pathlib
import sys

import numpy as np

#: The module name the factories are imported under.
MODULE = "kiln_tool_test_models"

FACTORIES = '''
import torch
from torch import nn
from torch.export import Dim


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class Embed(nn.Module):
    """Token ids [B, L] in [40, 89] -> [B, L, 8]: ids - 40 index a 50-row table (ids
    drawn in [0, 15] would index outside it)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.fc = nn.Linear(16, 8)

    def forward(self, ids):
        return self.fc(self.emb(ids - 40))


class Bessel(nn.Module):
    """An op kiln cannot lower (falls back to PyTorch) between two it can."""

    def forward(self, x):
        return torch.special.bessel_j0(x * 2.0) + 1.0


def mlp():
    torch.manual_seed(0)
    return Mlp().eval(), (torch.randn(4, 16),), ({0: Dim("B", min=1, max=32)},)


def embed():
    torch.manual_seed(0)
    ids = torch.arange(40, 90).reshape(2, 25)
    return Embed().eval(), (ids,), ({0: Dim("B", min=1, max=8), 1: Dim("L", min=2, max=40)},)


def bessel():
    return Bessel().eval(), (torch.randn(4, 8),), ({0: Dim("B", min=1, max=16)},)


def broken():
    raise RuntimeError("no model today")
'''


def write_factories(folder: pathlib.Path) -> str:
    """Write the factory module into ``folder``, put it on ``sys.path``; its name."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return MODULE


def write_onnx(path: pathlib.Path) -> pathlib.Path:
    """A small ONNX model with a dim_param ``N``: ``x [N, 8]`` f32 and ``ids
    [N]`` int64 (rows of a 16-row table) -> softmax(tanh((E[ids] + x) W)) ``[N, 4]``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W")
    e = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "E")
    nodes = [helper.make_node("Gather", ["E", "ids"], ["emb"], axis=0),
             helper.make_node("Add", ["emb", "x"], ["h"]),
             helper.make_node("MatMul", ["h", "W"], ["m"]),
             helper.make_node("Tanh", ["m"], ["t"]),
             helper.make_node("Softmax", ["t"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8]),
                               helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], initializer=[w, e])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


#: The repository root (the ``kiln`` package).
ROOT = pathlib.Path(__file__).resolve().parents[3]


def run_tool(module: str, args, pythonpath=None):
    """``python -m <module> <args>`` in a fresh process, as a user runs it
    (``pythonpath``: a folder to import the factories from); ``(rc, out, err)``."""
    import os
    import subprocess

    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=300)
    return r.returncode, r.stdout, r.stderr
