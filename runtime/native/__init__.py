"""kiln's native runtime library: built on first use, loaded into the CPU JIT.

``kiln_native.c`` holds what JIT-compiled kernels call beyond the
ExecutionEngine: a parallel-for thread pool and the GEMMs (see the file);
``kiln_conv.c`` the weight-first GEMM and the convolution, with
``kiln_vconv.c`` its paths vectorized over output channels and
``kiln_cpair.c`` two convolutions in one call (the second pooled);
``kiln_attention.c`` a flash-attention-style kernel (heads contiguous, or
strided in a packed projection);
``kiln_dispatch.c`` OpenBLAS slabs and its thread count, split and batched
kernel launches, the permuting copy, the max pool, a product's bias +
activation + residual epilogue and the layer norm on the pool.
:func:`library` compiles them into one library with the system C
compiler (``cc -O3 -march=native -falign-loops=64``: it only ever runs on the machine that
built it) into the kernel cache's ``native/`` folder, named by the hash of
the sources, the compiler and the flags, so a rebuild happens only when one
of them changes; the file is written under a temporary name and moved into
place, so concurrent processes never load half a library.

Without a C compiler (or with ``KILN_NATIVE=0``) :func:`library` returns
None and the CPU backend keeps to OpenBLAS for every product.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

__all__ = ["SOURCES", "library", "load", "packed_bytes", "release_on_collect", "threads"]

#: The C files of the library, compiled together (the others use kiln_native.c's pool).
#: (SOURCE_NAMES and FLAGS stay literals: bench/native_check.py reads them
#: from this file without importing kiln.)
SOURCE_NAMES = ("kiln_native.c", "kiln_conv.c", "kiln_dconv.c", "kiln_winograd.c", "kiln_vconv.c",
                "kiln_cpair.c", "kiln_attention.c", "kiln_dispatch.c")
SOURCES = tuple(Path(__file__).with_name(name) for name in SOURCE_NAMES)
#: What they include (part of the library's cache key, not compiled alone).
HEADERS = tuple(Path(__file__).with_name(name) for name in ("kiln_native.h", "kiln_wtile.h", "kiln_vtile.h"))
#: -falign-loops=64: each hot loop starts a cache line, so where it lands does
#: not move with unrelated edits (Winograd's product loop at 48 bytes into a
#: line had read as a 3% slowdown of a change that moved it; aligned, the
#: direct and pointwise layers ran 0.93-0.98x, same library, one thread).
#: -Bsymbolic: the library's calls of its own exported functions (kiln_conv2d
#: -> kiln_vconv, kiln_parallel_for, ...) bind to its own definitions, not to
#: those of another build of it loaded earlier into the process (an A/B of
#: two builds in one process otherwise ran the first build's callees in both).
FLAGS = ("-O3", "-march=native", "-falign-loops=64", "-fPIC", "-shared", "-pthread", "-Wl,-Bsymbolic")

_lock = threading.Lock()
_built: dict[str, str | None] = {}
_handle = None
#: Why the library could not be built, if it could not (None otherwise).
build_error: str | None = None


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def library() -> str | None:
    """The path of the built library, building it if needed; None if it cannot
    be built (:data:`build_error` says why)."""
    global build_error
    if os.environ.get("KILN_NATIVE", "1") == "0":
        return None
    cc = _compiler()
    if cc is None:
        return None
    with _lock:
        if cc in _built:
            return _built[cc]
        from ...backends.cache import default_cache_dir
        from ...backends.cpu.objcache import host_cpu

        # -march=native: the host CPU is part of the name (a cache dir shared
        # between machines must not hand one's AVX-512 build to another).
        src = b"".join(path.read_bytes() for path in SOURCES + HEADERS)
        digest = hashlib.sha256(src + cc.encode() + " ".join(FLAGS).encode() + host_cpu().encode()).hexdigest()[:20]
        out = default_cache_dir() / "native" / f"kiln_native-{digest}.so"
        path: str | None = str(out)
        if not out.exists():
            tmp = ""
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
                os.close(fd)
                subprocess.run([cc, *FLAGS, "-o", tmp, *map(str, SOURCES)], check=True, capture_output=True, timeout=120)
                os.replace(tmp, out)
            except (OSError, subprocess.SubprocessError) as e:
                build_error = f"{cc} failed: {getattr(e, 'stderr', b'') or e}"
                path = None
                if os.path.exists(tmp):
                    os.unlink(tmp)
        _built[cc] = path
        return path


def load():
    """The library loaded into this process (``ctypes.CDLL``), its pool
    started with :func:`threads` threads; None without it."""
    global _handle
    path = library()
    if path is None:
        return None
    with _lock:
        if _handle is None:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            lib.kiln_pool_init(ctypes.c_int(threads()))
            lib.kiln_packed_bytes.restype = ctypes.c_int64
            _handle = lib
        return _handle


def threads() -> int:
    """Threads of the native pool: ``KILN_THREADS``, else the CPUs this process may use."""
    env = os.environ.get("KILN_THREADS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)



def packed_bytes() -> int:
    """Bytes held by the native GEMM's packed copies of constants (0 without the library)."""
    return int(_handle.kiln_packed_bytes()) if _handle is not None else 0


def release_on_collect(owner, engine) -> None:
    """When ``owner`` is collected, free the packed weights of ``engine``'s
    module (its ``kiln_release_packed``, emitted by kiln-cpu-library when a
    product has a constant B).  Keeps ``engine`` alive until then."""
    import weakref

    address = engine.raw_lookup("kiln_release_packed")
    if address:
        weakref.finalize(owner, _release, engine, address)


def _release(engine, address) -> None:
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)(ctypes.addressof(_NO_ARGS))


_NO_ARGS = (ctypes.c_void_p * 1)()
