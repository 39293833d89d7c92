"""numpy's OpenBLAS as the runtime sees it: where it is, and handing its
``sgemm`` to kiln's native library.

The CPU backend (:mod:`kiln.backends.cpu.library`) links its kernels
against this library and registers its sgemm with the native pool when it
compiles; a model loaded from an artifact (:mod:`kiln.runtime.artifact`)
does the same here, without the compiler's modules (they import MLIR).
"""

from __future__ import annotations

import ctypes
import glob
import os

__all__ = ["SET_THREADS", "SGEMM", "blas_library", "blas_threads", "kernel_libraries", "native_with_blas",
           "register_sgemm"]

#: The CBLAS symbol (numpy's bundled OpenBLAS, 64-bit integer interface).
SGEMM = "scipy_cblas_sgemm64_"
#: OpenBLAS's thread-count setter the native library calls around its slabs.
SET_THREADS = "openblas_set_num_threads_local"

_registered: set[int] = set()


def blas_library() -> str | None:
    """The path of the OpenBLAS shared library bundled with numpy, or None."""
    import numpy

    root = os.path.dirname(os.path.dirname(numpy.__file__))
    for pattern in ("numpy.libs/libscipy_openblas64_*.so*", "numpy/.dylibs/libscipy_openblas64_*.dylib"):
        found = sorted(glob.glob(os.path.join(root, pattern)))
        if found:
            return found[0]
    return None


def blas_threads(blas=None) -> int:
    """The thread count multi-threaded sgemm calls use with the native
    runtime: the ``blas_threads`` option (``KILN_BLAS_THREADS``), else
    OpenBLAS's own count (``blas``: the loaded library, else numpy's)."""
    from ..options import current

    if current().blas_threads is not None:  # a malformed KILN_BLAS_THREADS is a KilnError naming it
        return current().blas_threads
    try:
        if blas is None:
            blas = ctypes.CDLL(blas_library())
        return max(1, int(blas.scipy_openblas_get_num_threads64_()))
    except (OSError, TypeError, AttributeError):  # pragma: no cover - no or another OpenBLAS build
        return 1


def register_sgemm(lib, path: str) -> None:
    """Load the BLAS library at ``path`` into the process's global scope (the
    kernels' calls of sgemm resolve to it) and hand its sgemm and thread
    setter to the native library ``lib`` (None: no native library), once."""
    blas = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    if lib is None or id(lib) in _registered:
        return
    from ..options import read_once

    count = read_once("blas_threads", blas_threads(blas))  # handed over once per process
    sgemm, threads = (ctypes.cast(getattr(blas, s), ctypes.c_void_p).value for s in (SGEMM, SET_THREADS))
    lib.kiln_set_sgemm(ctypes.c_int64(sgemm), ctypes.c_int64(threads))
    try:
        lib.kiln_set_blas_threads(ctypes.c_int32(count))
    except AttributeError:  # a native library built before the BLAS count was handed over
        pass
    _registered.add(id(lib))


def native_with_blas():
    """kiln's native library, loaded, with the BLAS sgemm handed to it
    (:func:`register_sgemm`); None without it (``KILN_NATIVE=0`` or not built)."""
    from . import native

    lib = native.load()
    if lib is None:
        return None
    path = blas_library()
    if path is not None:
        register_sgemm(lib, path)
    return lib


def kernel_libraries() -> list[str]:
    """Shared libraries CPU kernels are linked and loaded with: the BLAS
    library and kiln's native runtime, when found.

    Always passed, whether or not a module calls them: both are loaded in
    the process already, so opening them again costs nothing.  Here, not in
    the CPU backend's library.py: the runtime's kernel loader needs it, and
    library.py imports MLIR.
    """
    from . import native

    libs = [blas_library(), native.library() if native_with_blas() is not None else None]
    return [lib for lib in libs if lib]
