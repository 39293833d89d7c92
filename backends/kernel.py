"""The Kernel contract every backend implements, and its array helper.

A **kernel** is an object with

* ``name``: a string (the JIT symbol, or a library kernel's name);
* ``inputs`` / ``outputs``: lists of :class:`~kiln.dialects.kiln.TensorInfo`
  whose dims are symbolic (``("B", "L", 256)``, dtype);
* ``__call__(inputs, outputs, binding)``: compute, writing the results into
  the preallocated ``outputs`` (destination-passing style: buffers the
  kernel allocates are never handed out, MLIR_NOTES sharp edge 17).
  ``inputs`` and ``outputs`` are sequences of numpy arrays or torch CPU
  tensors, shaped as ``inputs``/``outputs`` evaluate under ``binding``
  (``{"B": 7, "L": 33}``); the caller (the runtime) has checked them.

Kernels get their ctypes argument descriptors from
:mod:`kiln.backends.cpu.dispatch` (no torch-mlir: a loaded artifact runs
without it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: a loaded artifact's kernels run without MLIR
    from ..dialects.kiln import TensorInfo

__all__ = ["Kernel", "as_numpy"]


class Kernel:
    """Base class of kernels (see the module docstring for the contract)."""

    name: str = ""
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: dict[str, int]) -> None:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        ins = ", ".join(str(i) for i in self.inputs)
        outs = ", ".join(str(o) for o in self.outputs)
        return f"<{type(self).__name__} {self.name}({ins}) -> ({outs})>"


def as_numpy(array) -> np.ndarray:
    """A numpy view of a numpy array or a torch CPU tensor (no copy)."""
    if isinstance(array, np.ndarray):
        return array
    numpy = getattr(array, "numpy", None)
    if numpy is not None:  # torch.Tensor: shares its storage
        return array.detach().numpy()
    return np.asarray(array)
