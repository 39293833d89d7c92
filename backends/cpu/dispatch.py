"""A cheap call path into JIT-compiled kernels.

``ExecutionEngine.invoke`` plus torch-mlir's ``get_ranked_memref_descriptor``
cost ~100 µs per kernel launch with four arrays here: the descriptor helper
builds a new ctypes *class* per array per call, and ``invoke`` looks the
function up again every time.  :func:`make_caller` does the lookup once,
keeps one descriptor class per rank, and per call only fills a descriptor
per array (pointer, sizes, element strides) and calls the packed wrapper.

The layout is MLIR's C interface for ranked memrefs:
``{T* allocated; T* aligned; int64 offset; int64 sizes[R]; int64 strides[R]}``;
the packed wrapper ``void f(void** args)`` takes, per argument, a pointer to
the argument — here a pointer to the descriptor.  The call releases the GIL
(ctypes), so several threads can run kernels at once.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

__all__ = ["descriptor_class", "make_caller"]

_CLASSES: dict[int, type] = {}
_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def descriptor_class(rank: int) -> type:
    """The ctypes structure of a rank-``rank`` memref descriptor (cached)."""
    cls = _CLASSES.get(rank)
    if cls is None:
        cls = type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": [
            ("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64),
            ("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]})
        _CLASSES[rank] = cls
    return cls


def make_caller(engine, name: str):
    """A function ``call(arrays)`` running kernel ``name`` of ``engine`` on numpy
    arrays / torch CPU tensors (inputs then outputs, C-contiguous or strided).

    All descriptors, the per-argument slots and the packed argument array of
    one call live in a single ``int64`` buffer, written with one slice
    assignment (its layout depends only on the ranks, cached per rank tuple).
    The caller must keep ``engine`` alive (MLIR_NOTES sharp edge 9)."""
    address = engine.raw_lookup("_mlir_ciface_" + name)
    if not address:
        raise RuntimeError(f"Unknown function {name}")
    fn = _PACKED(address)
    layouts: dict[tuple, tuple] = {}

    def layout(ranks: tuple) -> tuple:
        offs, at = [], 0
        for r in ranks:
            offs.append(at)
            at += 3 + 2 * r
        n = len(ranks)
        return ctypes.c_int64 * (at + 2 * n), offs, at, at + n

    def call(arrays: Sequence) -> None:
        values = []
        ranks = []
        for a in arrays:
            if isinstance(a, np.ndarray):
                ptr, shape = a.ctypes.data, a.shape
                strides = [st // a.itemsize for st in a.strides]
            else:  # a torch CPU tensor
                ptr, shape, strides = a.data_ptr(), a.shape, a.stride()
            values += (ptr, ptr, 0, *shape, *strides)
            ranks.append(len(shape))
        key = tuple(ranks)
        lay = layouts.get(key)
        if lay is None:
            lay = layouts[key] = layout(key)
        buf_type, offs, slots, packed = lay
        buf = buf_type()
        base = ctypes.addressof(buf)
        values += [base + 8 * o for o in offs]
        values += [base + 8 * (slots + i) for i in range(len(offs))]
        buf[:] = values
        fn(base + 8 * packed)  # buf stays alive until the kernel returned

    return call
