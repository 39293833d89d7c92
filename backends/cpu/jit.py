"""JIT-compiled CPU kernels: an LLVM-dialect module in an ``ExecutionEngine``.

:func:`jit` compiles (or finds in the object-code cache) the engine;
:class:`CpuKernel`, re-exported from :mod:`kiln.runtime.cpu_code` (a loaded
artifact runs it without the compiler), implements the
:mod:`kiln.backends.kernel` contract for one function of a module lowered by
``kiln-cpu-lower``: its inputs come first, then one output buffer per result
(destination-passing style).  The kernel holds its engine (a function looked
up from a collected engine segfaults, MLIR_NOTES sharp edge 9) and the
engine holds the module's context alive through the module.
"""

from __future__ import annotations

from ...runtime.cpu_code import CpuKernel  # noqa: F401  (re-exported: kiln.backends.cpu.CpuKernel)

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


