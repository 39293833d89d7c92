"""A cheap call path into JIT-compiled kernels.

``ExecutionEngine.invoke`` plus torch-mlir's ``get_ranked_memref_descriptor``
cost ~100 µs per kernel launch with four arrays here: the descriptor helper
builds a new ctypes *class* per array per call, and ``invoke`` looks the
function up again every time.  :func:`make_caller` does the lookup once,
keeps the descriptors of each layout it has seen, and per call only writes
the data pointers and calls the packed wrapper.

The layout is MLIR's C interface for ranked memrefs:
``{T* allocated; T* aligned; int64 offset; int64 sizes[R]; int64 strides[R]}``;
the packed wrapper ``void f(void** args)`` takes, per argument, a pointer to
the argument — here a pointer to the descriptor.  The call releases the GIL
(ctypes), so several threads can run kernels at once.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence

import numpy as np

__all__ = ["descriptors", "entry", "layout_of", "make_caller", "pointer_of"]

_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def entry(engine, name: str):
    """The packed C-interface wrapper of kernel ``name``: ``f(void** args)`` as a ctypes function."""
    address = engine.raw_lookup("_mlir_ciface_" + name)
    if not address:
        raise RuntimeError(f"Unknown function {name}")
    return _PACKED(address)


def descriptors(metas: Sequence) -> tuple:
    """``(buf, offsets, packed)`` for one call of arrays with layouts ``metas``
    (per array: ``(shape, element strides)``).

    ``buf`` is one ``int64`` buffer holding every descriptor, the
    per-argument slots and the packed argument array, filled in except the
    data pointers: array ``i``'s go to ``buf[offsets[i]]`` and
    ``buf[offsets[i] + 1]`` (allocated and aligned pointer).  ``packed`` is
    the address to call the wrapper with; ``buf`` must outlive the call.
    """
    offs, at = [], 0
    for shape, _ in metas:
        offs.append(at)
        at += 3 + 2 * len(shape)
    n = len(metas)
    buf = (ctypes.c_int64 * (at + 2 * n))()
    base = ctypes.addressof(buf)
    values = []
    for shape, strides in metas:
        values += (0, 0, 0, *shape, *strides)
    values += [base + 8 * o for o in offs]
    values += [base + 8 * (at + i) for i in range(n)]
    buf[:] = values
    return buf, offs, base + 8 * (at + n)


def layout_of(a) -> tuple:
    """``(shape, element strides)`` of a numpy array or torch CPU tensor."""
    if isinstance(a, np.ndarray):
        return tuple(a.shape), tuple(st // a.itemsize for st in a.strides)
    return tuple(a.shape), tuple(a.stride())


def pointer_of(a) -> int:
    """The data address of a numpy array or torch CPU tensor."""
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data_ptr()


def make_caller(engine, name: str):
    """A function ``call(arrays)`` running kernel ``name`` of ``engine`` on numpy
    arrays / torch CPU tensors (inputs then outputs, C-contiguous or strided).

    The :func:`descriptors` are kept per thread and per layout: a call with
    a layout seen before on this thread only writes the data pointers (a
    kernel does not keep its descriptors, so reusing them is safe).
    The caller must keep ``engine`` alive (MLIR_NOTES sharp edge 9)."""
    fn = entry(engine, name)
    local = threading.local()

    def call(arrays: Sequence) -> None:
        metas = tuple(layout_of(a) for a in arrays)
        cache = local.__dict__
        hit = cache.get(metas)
        if hit is None:
            if len(cache) > 64:
                cache.clear()
            hit = cache[metas] = descriptors(metas)
        buf, offs, packed = hit
        for o, a in zip(offs, arrays):
            buf[o] = buf[o + 1] = pointer_of(a)
        fn(packed)

    return call
