"""The workloads of issue 8, each a model plus the shapes ("rows") it is timed at.

A :class:`Workload` knows how to build its PyTorch module (from
:mod:`kiln.bench.models`) or ONNX file, the inputs of each row, and the
``dynamic_shapes`` / ONNX symbols kiln compiles it with **once** for every
row.  ``light_resnet50.onnx`` ships in the onnx package's backend test data
(its weights are constants of shape, so its numbers are about speed, not
accuracy).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

__all__ = ["WORKLOADS", "Row", "Workload", "resnet50_path", "select"]


@dataclass(frozen=True)
class Row:
    """One timed shape of a workload: a label and the input shapes."""

    label: str
    shapes: tuple[tuple[int, ...], ...]
    quick: bool = True  # part of ``--quick``

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Deterministic float32 inputs of this row's shapes."""
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(s, dtype=np.float32) for s in self.shapes]


@dataclass
class Workload:
    """A model and its rows.

    ``factory`` is a :mod:`kiln.bench.models` factory name (a torch model);
    ``onnx_path`` names an ONNX model instead.  ``input_names`` and
    ``dynamic_axes`` drive the ONNX export of a torch model for ONNX Runtime.
    """

    name: str
    rows: list[Row]
    factory: str | None = None
    onnx_path: str | None = None
    input_names: tuple[str, ...] = ("x",)
    dynamic_axes: dict = field(default_factory=dict)
    gflop: object = None  # row -> GFLOP per call, for the throughput column
    floor_gflop: object = None  # row -> the GFLOP no program can skip (default: gflop), for the ceiling

    def torch_model(self):
        """``(module, example_args, dynamic_shapes)`` from the factory (kiln compiles with these)."""
        from . import models

        return models.FACTORIES[self.factory]()

    def weight_bytes(self) -> int | None:
        """Bytes of the torch model's parameters and buffers, which every call
        reads; None for an ONNX workload."""
        if self.factory is None:
            return None
        module = self.torch_model()[0]
        tensors = list(module.parameters()) + list(module.buffers())
        return int(sum(t.numel() * t.element_size() for t in tensors))

    def min_gflop(self, row: Row) -> float | None:
        """The GFLOP a call of ``row`` cannot do without (None when unknown)."""
        f = self.floor_gflop or self.gflop
        return None if f is None else f(row)

    def quick_rows(self) -> list[Row]:
        return [r for r in self.rows if r.quick]


def resnet50_path() -> str:
    """The path of ``light_resnet50.onnx`` in the installed onnx package."""
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx")


def _mlp_gflop(row: Row) -> float:
    b = row.shapes[0][0]
    return 2.0 * b * (1024 * 4096 + 4096 * 1024) / 1e9


def _block_gflop(row: Row) -> float:
    b, seq, h = row.shapes[0]
    tokens = b * seq
    linear = 2.0 * tokens * (h * 3 * h + h * h + 2 * h * 1024)
    attn = 2.0 * 2 * b * seq * seq * h  # QK^T and PV (no causal saving counted)
    return (linear + attn) / 1e9


def _block_floor_gflop(row: Row) -> float:
    """:func:`_block_gflop` with the causal mask's saving: the attention
    products over the upper triangle need not be computed."""
    b, seq, h = row.shapes[0]
    return _block_gflop(row) - 2.0 * b * seq * (seq - 1) * h / 1e9


WORKLOADS: dict[str, Workload] = {
    "mlp": Workload(
        "mlp",
        [Row("B=1", ((1, 1024),)), Row("B=8", ((8, 1024),)), Row("B=64", ((64, 1024),), quick=False)],
        factory="mlp", dynamic_axes={"x": {0: "B"}, "y": {0: "B"}}, gflop=_mlp_gflop,
    ),
    "transformer_block": Workload(
        "transformer_block",
        [Row("B=1,L=32", ((1, 32, 256),)), Row("B=4,L=128", ((4, 128, 256),), quick=False),
         Row("B=8,L=512", ((8, 512, 256),), quick=False)],
        factory="transformer_block", dynamic_axes={"x": {0: "B", 1: "L"}, "y": {0: "B", 1: "L"}},
        gflop=_block_gflop, floor_gflop=_block_floor_gflop,
    ),
    "small_cnn": Workload(
        "small_cnn",
        [Row("B=1", ((1, 3, 32, 32),)), Row("B=8", ((8, 3, 32, 32),), quick=False)],
        factory="small_cnn", dynamic_axes={"x": {0: "B"}, "y": {0: "B"}},
    ),
    "light_resnet50": Workload(
        "light_resnet50",
        [Row("B=1", ((1, 3, 224, 224),), quick=False)],
        onnx_path="<onnx>", input_names=("gpu_0/data_0",),
    ),
}


def select(names: list[str] | None, quick: bool) -> list[tuple[Workload, list[Row]]]:
    """The workloads named (all when None) with their rows (the quick subset under ``quick``)."""
    chosen = []
    for name in names or list(WORKLOADS):
        if name not in WORKLOADS:
            raise KeyError(f"unknown workload '{name}' (known: {', '.join(WORKLOADS)})")
        w = WORKLOADS[name]
        rows = w.quick_rows() if quick else w.rows
        if rows:
            chosen.append((w, rows))
    return chosen
