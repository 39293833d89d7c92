"""The Kernel contract every backend implements, and the one array marshalling helper.

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

:func:`memref_descriptor` is the only code in kiln that turns arrays into
ctypes memref descriptors; it shares memory with the array (no copy), so the
array must stay alive while the descriptor is in use.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: a loaded artifact's kernels run without MLIR
    from ..dialects.kiln import TensorInfo

__all__ = ["Kernel", "as_numpy", "memref_descriptor", "memref_pointers"]


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


def memref_descriptor(array):
    """A ranked memref descriptor (ctypes struct) over ``array``'s memory.

    ``array`` must be C-contiguous (kiln's kernels use identity layouts);
    the runtime makes inputs contiguous before calling a kernel.
    """
    from torch_mlir.runtime import get_ranked_memref_descriptor

    a = as_numpy(array)
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError("memref_descriptor needs a C-contiguous array")
    return get_ranked_memref_descriptor(a)


def memref_pointers(arrays: Sequence) -> tuple[list, list]:
    """``(pointers, keepalive)``: ``pointer(pointer(descriptor))`` per array, the
    form ``ExecutionEngine.invoke`` takes, and the objects to keep alive meanwhile."""
    keep, ptrs = [], []
    for a in arrays:
        d = memref_descriptor(a)
        keep.append(d)
        ptrs.append(ctypes.pointer(ctypes.pointer(d)))
    return ptrs, keep
