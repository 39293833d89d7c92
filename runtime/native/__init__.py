"""kiln's native runtime library: built at setup (``kiln build-native``) or on first use, loaded into the CPU JIT.

``kiln_native.c`` holds what JIT-compiled kernels call beyond the
ExecutionEngine: a parallel-for thread pool and the GEMMs (see the file);
``kiln_conv.c`` the weight-first GEMM and the convolution, with
``kiln_vconv.c`` its paths vectorized over output channels and
``kiln_cpair.c`` two convolutions in one call (the second pooled);
``kiln_attention.c`` a flash-attention-style kernel (heads contiguous, or
strided in a packed projection);
``kiln_dispatch.c`` OpenBLAS slabs and its thread count, split and batched
kernel launches, the permuting copy, the max pool, a product's bias +
activation + residual epilogue and the layer norm on the pool;
``kiln_lowp.c`` the bf16 / f16 GEMM and ``kiln_w8.c`` products with int8
weights (``kiln.matmul_w8``).
They are compiled into one library with the system C compiler (``cc -O3
-march=native -falign-loops=64``: it only ever runs on the machine that built
it), named by the hash of the sources, the compiler, the flags and the host
CPU, so a rebuild happens only when one of them changes.

``kiln build-native`` (run by ``scripts/setup.sh`` and CMake's ``kiln-native``
target) builds it ahead of use, printing its progress, into :func:`build_dir`:
``$KILN_NATIVE_DIR``, else ``build/`` beside these sources when that is
writable, else the kernel cache's ``native/`` folder.  :func:`library` looks
there (and in the cache's ``native/``); when the library is missing it builds
it on first use (logged on the ``kiln.native`` logger) unless
``KILN_NATIVE_BUILD=0``.  Builds run in their own process groups and are
killed whole on a timeout (``KILN_NATIVE_BUILD_TIMEOUT``, default 600 s); a
failed build is not retried by every new process (see :mod:`.build`).

A library is loaded only after its size and sha256 match the digest written
beside it when it was built: a damaged one (truncated, zero-filled, flipped
bytes, no digest) is deleted and rebuilt with a warning, and one that still
fails to load leaves kiln running without it.

Without the library (``KILN_NATIVE=0``, no C compiler, a failed build, or a
host that is not x86: ``kiln_native.h`` uses x86 intrinsics) :func:`library`
returns None, :data:`build_error` says why, and the CPU backend keeps to
OpenBLAS and generated code for everything.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import sys
import threading
from pathlib import Path

from ...errors import KilnError
from . import build

__all__ = ["SOURCES", "adopt", "build_dir", "build_library", "library", "load", "loaded_library", "packed_bytes",
           "release_on_collect", "threads", "x86_host"]

#: The C files of the library, compiled together (the others use kiln_native.c's pool).
#: (SOURCE_NAMES and FLAGS stay literals: bench/native_check.py reads them
#: from this file without importing kiln.)
SOURCE_NAMES = ("kiln_native.c", "kiln_conv.c", "kiln_dconv.c", "kiln_winograd.c", "kiln_vconv.c",
                "kiln_cpair.c", "kiln_attention.c", "kiln_dispatch.c", "kiln_lowp.c", "kiln_w8.c", "kiln_i8.c",
                "kiln_dwconv.c")
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
#: The library loaded into this process: its path (a build's, or the artifact file it was copied from).
_loaded_path: str | None = None
#: Why the library could not be built or loaded, if it could not (None otherwise).
build_error: str | None = None
#: The messages already logged by this process (each is logged once).
_said: set[str] = set()

logger = logging.getLogger("kiln.native")

#: Machines whose compilers know kiln_native.h's x86 intrinsics.
X86_MACHINES = frozenset({"x86_64", "amd64", "x64", "i386", "i486", "i586", "i686", "x86"})
#: Seconds a build may take before it is killed (``kiln build-native --timeout`` overrides).
DEFAULT_TIMEOUT_S = 600.0


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def x86_host() -> bool:
    """Whether this machine can build the library (its header includes x86 intrinsics)."""
    return platform.machine().lower() in X86_MACHINES


def not_x86_message() -> str:
    """Why a non-x86 host runs without the library."""
    return (f"the native library is x86-only (kiln_native.h uses x86 intrinsics) and this host is "
            f"{platform.machine() or 'unknown'}: kiln runs without it (OpenBLAS and generated code)")


def _say(level: int, message: str) -> None:
    if message not in _said:
        _said.add(message)
        logger.log(level, message)


def build_dir() -> Path:
    """Where the library is built: ``$KILN_NATIVE_DIR``, else ``build/`` beside
    the sources when that folder can be written, else the cache's ``native/``."""
    env = _options().native_dir
    if env:
        return Path(env)
    here = Path(__file__).with_name("build")
    try:
        here.mkdir(exist_ok=True)
        if os.access(here, os.W_OK):
            return here
    except OSError:
        pass
    return _cache_native_dir()


def _cache_native_dir() -> Path:
    from ...backends.cache import default_cache_dir

    return default_cache_dir() / "native"


def _search_dirs() -> list[Path]:
    """The folders a built library is looked for in, first match wins."""
    if _options().native_dir:
        return [Path(_options().native_dir)]
    dirs = [Path(__file__).with_name("build"), _cache_native_dir()]
    return list(dict.fromkeys(dirs + [build_dir()]))


def library_name(cc: str) -> str:
    """The library's file name for compiler ``cc`` on this host: ``kiln_native-<digest>.so``."""
    from ..cpu_code import host_cpu

    # -march=native: the host CPU is part of the name (a cache dir shared
    # between machines must not hand one's AVX-512 build to another).
    src = b"".join(path.read_bytes() for path in SOURCES + HEADERS)
    digest = hashlib.sha256(src + cc.encode() + " ".join(FLAGS).encode() + host_cpu().encode()).hexdigest()[:20]
    return f"kiln_native-{digest}.so"


def _find(name: str) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The first whole library called ``name``, and the damaged ones met before it."""
    damaged = []
    for folder in _search_dirs():
        path = folder / name
        if not path.exists():
            continue
        problem = build.verify(path)
        if problem is None:
            return path, damaged
        damaged.append((path, problem))
    return None, damaged


def _jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def build_library(*, force: bool = False, timeout: float | None = None, jobs: int | None = None,
                  out_dir: Path | None = None, progress=None) -> Path:
    """Build the library now (what ``kiln build-native`` runs) and return its path.

    A whole library already in place is kept unless ``force``; a failed
    build's marker is ignored (this always tries).  ``progress`` gets one line
    per step.  Raises :class:`KilnError` on a non-x86 host, without a C
    compiler, or with the compiler's error when the build fails."""
    if not x86_host():
        raise KilnError(not_x86_message())
    cc = _compiler()
    if cc is None:
        raise KilnError("no C compiler to build the native library with: install cc or gcc, or set CC")
    say = progress or (lambda _msg: None)
    name = library_name(cc)
    out = (out_dir or build_dir()) / name
    with build.lock(out):
        if not force:
            problem = build.verify(out)
            if problem is None:
                say(f"the native library is up to date: {out}")
                return out
            if out.exists():
                say(f"{out} {problem}: rebuilding it")
        build.remove(out)
        jobs = jobs or _jobs()
        limit = DEFAULT_TIMEOUT_S if timeout is None else timeout
        say(f"building the native library with {cc} {' '.join(FLAGS)}")
        say(f"  {len(SOURCES)} sources from {SOURCES[0].parent}, {jobs} at a time, into {out} "
            f"(time limit {limit:g} s)")
        try:
            took = build.compile_library(cc, FLAGS, SOURCES, out, timeout=limit, jobs=jobs, progress=say)
        except KilnError as e:
            build.record_failure(out, str(e))
            raise
        say(f"built {out} in {took:.1f} s")
    stale = _prune(out)
    if stale:
        say(f"removed {stale} older build(s) of other sources from {out.parent}")
    return out


#: A build of other sources is kept this long after its last change (a
#: process started before an edit of the C files may still load it).
STALE_AFTER_S = 24 * 3600.0


def _prune(keep: Path) -> int:
    """Delete the libraries (and their digest, lock and failure files) in
    ``keep``'s folder built from other sources more than a day ago; returns
    how many libraries went."""
    import time

    n = 0
    for lib in keep.parent.glob("kiln_native-*.so"):
        try:
            old = time.time() - lib.stat().st_mtime > STALE_AFTER_S
        except FileNotFoundError:
            continue
        if lib.name == keep.name or not old:
            continue
        build.remove(lib)
        for extra in (build.failed_marker(lib), lib.with_name(lib.name + ".lock")):
            extra.unlink(missing_ok=True)
        n += 1
    return n


def _timeout_from_env() -> float:
    return _options().native_build_timeout  # KILN_NATIVE_BUILD_TIMEOUT, DEFAULT_TIMEOUT_S by default


def library() -> str | None:
    """The path of the built library, building it if needed; None if it is
    not there and cannot be built (:data:`build_error` says why)."""
    with _lock:
        return _library_locked()


def _library_locked() -> str | None:
    global build_error
    if not _options().native:
        return None
    if not x86_host():
        build_error = not_x86_message()
        _say(logging.INFO, build_error)
        return None
    cc = _compiler()
    if cc is None:
        build_error = "no C compiler (cc, gcc or $CC) to build the native library with"
        _say(logging.WARNING, f"{build_error}: kiln runs without it")
        return None
    if cc in _built:
        return _built[cc]
    name = library_name(cc)
    path, damaged = _find(name)
    if path is None:
        path = _rebuild(cc, name, damaged)
    _built[cc] = str(path) if path is not None else None
    return _built[cc]


def _rebuild(cc: str, name: str, damaged: list[tuple[Path, str]]) -> Path | None:
    """Delete the damaged copies and build the library on first use (None if that is off or fails)."""
    global build_error
    out = build_dir() / name
    with build.lock(out):
        # Another process may have built (or already deleted) it while this one waited.
        path, damaged = _find(name)
        if path is not None:
            return path
        for bad, problem in damaged:
            logger.warning("the native library %s %s: deleting it and building it again", bad, problem)
            build.remove(bad)
        if not _options().native_build:
            build_error = (f"the native library is not built (KILN_NATIVE_BUILD=0 keeps kiln from building it "
                           f"at run time): run `kiln build-native` (scripts/setup.sh does) to build {out}")
            _say(logging.WARNING, f"{build_error}; kiln runs without it")
            return None
        failed = build.recent_failure(out)
        if failed is not None:
            build_error = f"the native library is not built: {failed}"
            _say(logging.WARNING, f"{build_error}; kiln runs without it")
            return None
        logger.warning("building the native library (one time, about a minute; `kiln build-native` "
                       "does it ahead) into %s", out)
        try:
            build.compile_library(cc, FLAGS, SOURCES, out, timeout=_timeout_from_env(), jobs=_jobs(),
                                  progress=logger.info)
        except KilnError as e:
            build_error = str(e)
            build.record_failure(out, build_error)
            logger.warning("%s\nkiln runs without the native library; `kiln build-native` retries", e)
            return None
        build_error = None
        return out


def load():
    """The library loaded into this process (``ctypes.CDLL``), its pool
    started with :func:`threads` threads; None without it.  A library that
    fails to load is deleted and built once more; if that one fails too,
    kiln runs without it (:data:`build_error` says why)."""
    global _handle, build_error
    if not _options().native:  # read at every call: a test may turn it off for one compile
        return None
    if _handle is not None:
        return _handle
    with _lock:
        if _handle is not None:
            return _handle
        lib = None
        for attempt in range(2):
            path = _library_locked()
            if path is None:
                return None
            n = threads()  # a bad KILN_THREADS is an error before anything is loaded
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError as e:
                _built.clear()
                build.remove(Path(path))
                if attempt == 0:
                    logger.warning("the native library %s does not load (%s): deleting it and building it again",
                                   path, e)
                    continue
                # Built twice and still not loadable: no process retries it for a while.
                build_error = f"the native library {path} does not load: {e}"
                build.record_failure(Path(path), build_error)
                logger.warning("%s; kiln runs without it", build_error)
                _built[_compiler() or ""] = None
                return None
        _start(lib, n)
        _tune_malloc()
        lib.kiln_packed_bytes.restype = ctypes.c_int64
        _handle = lib
        _set_loaded(path)
        return _handle


#: glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _tune_malloc() -> None:
    """Keep freed memory in glibc's malloc (``KILN_MALLOC_TUNE``, on by default).

    Generated kernels allocate their temporaries with malloc on every call.
    With glibc's dynamic mmap threshold, whether a temporary of a few MiB is
    a fresh mapping (page faults on every call, the pages zeroed by the
    kernel) depends on what other kernels freed before it: MobileNetV2's
    16 -> 96 expand kernel ran 78 ms instead of 19 at one thread when the
    next kernel's allocations changed.  A fixed 32 MiB threshold (glibc's
    largest) and no trimming keep the pages resident; the whole model at
    B = 8, two threads, AVX2 EPYC, alternating processes: 174 / 240 / 178
    -> 157 / 148 / 163 ms (the same settings as MALLOC_* variables from the
    process's start: 118-130 ms).  The process keeps its peak heap instead
    of returning it to the system."""
    if not _options().malloc_tune or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)


def _set_loaded(path: str) -> None:
    global _loaded_path
    _loaded_path = str(path)


def loaded_library() -> str | None:
    """The path of the library loaded into this process (for one an artifact
    brought, the artifact's file), None before one is loaded."""
    return _loaded_path if _handle is not None else None


def adopt(data: bytes, origin: str):
    """Load ``data``, the checked bytes of the library at ``origin`` (an
    artifact's copy, :mod:`kiln.runtime.artifact`), as this process's
    library: no build, no C compiler.  Returns the handle (its pool started,
    as :func:`load` does).

    A process that has a library loaded already keeps it when it is the same
    build (same name: same sources, flags and host); another build is a
    KilnError, since the artifact's kernels would call its functions.  The
    bytes are loaded from a private file, unlinked once mapped."""
    global _handle
    import tempfile

    with _lock:
        name = Path(origin).name
        if _handle is not None:
            if Path(_loaded_path or "").name == name:
                return _handle
            raise KilnError(f"this process has kiln's native library {Path(_loaded_path or '?').name} loaded, and "
                            f"the artifact's kernels were built against {name}: load the artifact in a fresh process")
        n = threads()
        fd, tmp = tempfile.mkstemp(suffix=".so", prefix="kiln-native-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            lib = ctypes.CDLL(tmp, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise KilnError(f"the artifact's native library {name} does not load here: {e}") from None
        finally:
            os.unlink(tmp)
        _start(lib, n)
        lib.kiln_packed_bytes.restype = ctypes.c_int64
        _handle = lib
        _set_loaded(origin)
        return _handle


def threads() -> int:
    """Threads of the native pool: the ``threads`` option (``KILN_THREADS``,
    ``kiln.compile(threads=)``), else the CPUs this process may use."""
    return _options().threads or _jobs()


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


def _options():
    from ...options import current

    return current()


#: The library's switches kiln.options hands over when it loads (each read once per process).
SWITCHES = {"hugepages": b"KILN_HUGEPAGES", "winograd": b"KILN_WINOGRAD", "conv_pair": b"KILN_CONV_PAIR",
            "vconv_unpadded": b"KILN_VCONV_UNPADDED", "gemv": b"KILN_GEMV"}


def _start(lib, n: int) -> None:
    """Hand the options' switches to the freshly loaded ``lib``, then start
    its pool with ``n`` threads, pinned as the ``pin`` option says.  (A
    library from an artifact built before these entry points keeps reading
    the variables, and its pool only grows.)"""
    from ...options import read_once

    opts = _options()
    if hasattr(lib, "kiln_set_switch"):
        for name, variable in SWITCHES.items():
            lib.kiln_set_switch(ctypes.c_char_p(variable), ctypes.c_int(int(read_once(name, getattr(opts, name)))))
    if hasattr(lib, "kiln_pool_start"):
        lib.kiln_pool_start(ctypes.c_int(n), ctypes.c_int(int(opts.pin)))
    else:
        lib.kiln_pool_init(ctypes.c_int(n))


def start_pool() -> int:
    """Resize or rebind the running pool to the ``threads`` and ``pin``
    options (what ``kiln.compile(threads=, pin=)`` and
    :func:`kiln.options.configure` do); returns its threads.  Without the
    library loaded, nothing runs now: :func:`load` starts the pool so.  A
    library without ``kiln_pool_start`` (an older artifact's) is a KilnError
    when the size would shrink or the binding change."""
    with _lock:
        if _handle is None:
            return threads()
        n, pin = threads(), _options().pin
        if hasattr(_handle, "kiln_pool_start"):
            return int(_handle.kiln_pool_start(ctypes.c_int(n), ctypes.c_int(int(pin))))
        live = int(_handle.kiln_pool_threads())
        if n < live or pin:
            raise KilnError(f"threads={n}, pin={pin}: the native library loaded ({loaded_library()}) cannot "
                            f"resize its pool of {live} threads; start a fresh process")
        return int(_handle.kiln_pool_init(ctypes.c_int(n)))


def pool_threads() -> int | None:
    """The native pool's threads (the caller included), None without the library loaded."""
    return int(_handle.kiln_pool_threads()) if _handle is not None else None


def pool_pinned() -> int:
    """How many of the pool's workers are bound to a CPU (0 without the library
    or with ``pin`` off)."""
    if _handle is None or not hasattr(_handle, "kiln_pool_pinned"):
        return 0
    return int(_handle.kiln_pool_pinned())
