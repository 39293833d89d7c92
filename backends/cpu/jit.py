"""JIT-compiled CPU kernels: an LLVM-dialect module in an ``ExecutionEngine``.

:class:`CpuKernel` implements the :mod:`kiln.backends.kernel` contract for
one function of a module lowered by ``kiln-cpu-lower``: its inputs come
first, then one output buffer per result (destination-passing style).  The
kernel holds its engine (a function looked up from a collected engine
segfaults, MLIR_NOTES sharp edge 9) and the engine holds the module's
context alive through the module.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from ..kernel import Kernel

__all__ = ["CpuKernel", "jit", "remember_key"]


def jit(module, opt_level: int = 3, names=(), key: str | None = None):
    """An engine for an LLVM-dialect module (opt level 3) with the functions
    ``names`` materialized: from the object-code cache when the same module
    was compiled before (:mod:`kiln.backends.cpu.objcache`), else a fresh
    ``ExecutionEngine``.  The BLAS and native libraries resolve the calls of
    kiln-cpu-library.  ``key``: the cache key to store the code under, one
    the caller has looked up already
    (:func:`~kiln.backends.cpu.objcache.kernel_key`; default: the lowered
    module's own, looked up here).  The engine remembers its key
    (``engine.kiln_key``, None with the cache off): :func:`kiln.save` reads
    the object code back from that entry."""
    from . import objcache

    if key is None and objcache.enabled():
        from ...runtime.blas import kernel_libraries

        key = objcache.cache_key(module, opt_level, kernel_libraries())
        engine = objcache.load(key, names)
        if engine is not None:
            return remember_key(engine, key)
    return remember_key(objcache.jit_cached(module, names, opt_level, key), key)


def remember_key(engine, key: str | None):
    """``engine`` with ``engine.kiln_key = key`` (the object-code cache entry
    holding its code, for :func:`kiln.save`); returns it."""
    engine.kiln_key = key if getattr(engine, "cache", None) != "off" else None
    return engine


class CpuKernel(Kernel):
    """One JIT-compiled function: ``kernel(inputs, outputs, binding)`` writes ``outputs``."""

    def __init__(self, name: str, inputs, outputs, engine, module=None, static: bool = False):
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.engine = engine
        self._module = module  # keeps the module (and its context) alive with the engine
        #: Compiled with its dims bound (kiln.backends.cpu.specialize): it
        #: reads no size from its arguments, so it never runs split.
        self.static = static

    def entry(self):
        """The packed C-interface wrapper as a ctypes function (for prebuilt
        descriptors: :func:`kiln.backends.cpu.dispatch.descriptors`)."""
        fn = self.__dict__.get("_entry")
        if fn is None:
            from .dispatch import entry

            fn = self._entry = entry(self.engine, self.name)
        return fn

    def address(self) -> int:
        """The packed C-interface wrapper's address (for ``kiln_run_split``)."""
        return ctypes.cast(self.entry(), ctypes.c_void_p).value

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: dict[str, int]) -> None:
        call = self.__dict__.get("_call")
        if call is None:  # looked up once: engine.invoke cost ~100 µs a launch (kiln.backends.cpu.dispatch)
            from .dispatch import make_caller

            call = self._call = make_caller(self.engine, self.name)
        call(list(inputs) + list(outputs))
