"""The persistent object-code cache of the CPU backend.

LLVM code generation is most of a CPU compile (5.2 of 7 s for the bench's
transformer block).  :func:`jit_cached` keys a lowered LLVM-dialect module
by the hash of its printed form (weights included: ~0.5 s for 32 MiB), the
kiln / MLIR versions, the host CPU and the shared libraries it links
against.  On a miss it JIT-compiles as usual (position-independent code),
dumps the engine's object file and links it into a shared library in the
cache (``<root>/cpu/<key[:2]>/<key>.so``, written under a temporary name
and moved into place).  On a hit it loads that library instead of running
LLVM, behind the same ``lookup`` / ``raw_lookup`` interface the kernels use.
:func:`kiln.compile` keys the kernel module *before* lowering instead
(:func:`kernel_key`) and looks it up first (:func:`load`), so a hit skips
the lowering stages too.

The cache is untrusted input: every entry has a sidecar digest
(``<key>.so.sha256``, :func:`kiln.backends.cache.write_digest`: size,
sha256 and the key it was stored under), and :func:`load` reads the entry
once, checks those bytes against it and loads exactly them.  A truncated,
corrupted or swapped-in entry is deleted with a warning on the
``kiln.cache`` logger and rebuilt; it is never passed to ``dlopen``.

Each load dlopens a private copy of the checked bytes: the loader shares one
mapping per file, and two models loaded from one entry must not share the
mutable globals of the module (the native GEMM's packing slots).  The copy
is unlinked at once and closed (``dlclose``) when its :class:`SharedObjectEngine`
is collected (the last kernel holding it died).

Keys hold no path of the cache dir: libraries inside the cache (the native
runtime) count by file name (which hashes their sources and flags), and
entries do not link them by path but resolve their symbols from the copy
the process loaded (``RTLD_GLOBAL``), so a copied or moved cache still hits.
``KILN_CPU_CACHE=0`` turns the cache off; without a C compiler to link with
it is off too.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...runtime.cpu_code import SharedObjectEngine, host_cpu
from ...runtime.cpu_code import load_copy as _load_copy

__all__ = ["CODEGEN_SETTINGS", "SharedObjectEngine", "cache_key", "codegen_settings", "enabled", "host_cpu",
           "jit_cached", "kernel_key", "load", "source_digest"]

_log = logging.getLogger("kiln.cache")


def enabled() -> bool:
    """Whether compiled kernels are cached (the ``cpu_cache`` option, ``KILN_CPU_CACHE``, and a linker found)."""
    from ...options import current

    return current().cpu_cache and _linker() is not None


def _linker() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


#: Dense attributes with more elements than this are hashed from their buffer, not printed.
_ELIDE = 64


def cache_key(module, opt_level: int, shared_libs, extra=()) -> str:
    """The cache key of a lowered module (sha256 hex); ``extra`` strings are hashed after it."""
    from ..cache import versions

    # The printed form: bytecode would be faster to hash but is not
    # deterministic across contexts (use-list and numbering order).  Large
    # weights print as hex (0.25 s for the bench MLP's 32 MiB); they are
    # elided from the text and hashed from their buffers instead (0.02 s).
    # Printed as verified: every caller's module comes out of a pass pipeline,
    # which verified it; the print's own verification ran the kiln ops'
    # Python verifiers again (BERT-base: 8 s of a 30 s compile, in prepare).
    h = hashlib.sha256(_weights_elided_key(module) or module.operation.get_asm(binary=True, assume_verified=True))
    # The libraries by file name, not path: the native runtime's lives in
    # the cache dir (a moved cache must still hit), and both names hash
    # their build (the native sources and flags; numpy's OpenBLAS build).
    libs = [os.path.basename(lib) for lib in shared_libs]
    for part in (repr(sorted(versions().items())), host_cpu(), str(opt_level), *libs, *extra):
        h.update(b"\0" + part.encode())
    return h.hexdigest()


#: The settings the lowering reads, each changing the generated code: the
#: environment variable and the :mod:`.library` function giving the value
#: the lowering uses.  That value is hashed, not the variable, so setting one
#: to its default is the same entry.  Thread counts are not here: the library
#: helpers ask for them at run time (``kiln_pool_threads`` ...).  Everything
#: else is runtime only and stays out of the key: ``KILN_THREADS``,
#: ``KILN_BLAS_THREADS``, ``KILN_DEBUG``, ``KILN_VERIFY_EACH``,
#: ``KILN_FAST``, ``KILN_SPLIT`` / ``KILN_SEQ`` / ``KILN_SPLIT_SEQ``,
#: ``KILN_PIN``, ``KILN_HUGEPAGES``, ``KILN_RESHAPE_VIEWS``, the native
#: library's ``KILN_WINOGRAD`` / ``KILN_CONV_PAIR`` / ``KILN_VCONV_UNPADDED`` /
#: ``KILN_GEMV`` switches and ``KILN_CACHE_DIR``.  (``KILN_NATIVE`` also shows in the
#: shared libraries; ``KILN_CPU_CACHE=0`` means no key at all.)
CODEGEN_SETTINGS = (
    ("KILN_CPU_LIBRARY", "enabled"),
    ("KILN_NATIVE", "native_enabled"),
    ("KILN_NATIVE_WA", "weight_a_enabled"),
    ("KILN_SMALL_M", "small_m"),
    ("KILN_BLAS_MT_MNK", "mt_mnk"),
)


def codegen_settings() -> list[tuple[str, str]]:
    """``(variable, value the lowering uses)`` for each of :data:`CODEGEN_SETTINGS`."""
    from ...errors import KilnError
    from . import library

    out = []
    for name, fn in CODEGEN_SETTINGS:
        try:
            value = repr(getattr(library, fn)())
        except (ValueError, KilnError):  # a malformed setting: the lowering reports it if it reads it
            value = f"unparsed {os.environ.get(name)!r}"
        out.append((name, value))
    return out


def kernel_key(module, vectorize: int, opt_level: int = 3) -> str | None:
    """The cache key of a kernel module *before* lowering (what
    :func:`kiln.compile` lowers), or None when the cache is off.

    A hit on it skips the lowering as well as LLVM (0.7 of ResNet-50's
    1.5 s warm compile).  The lowered code also depends on what the module
    text does not show, so the key adds it: the vectorize level, the
    settings of :data:`CODEGEN_SETTINGS` (library thresholds, native
    switches) and a digest of kiln's own source (an
    edited lowering must not load stale code).
    """
    if not enabled():
        return None
    from ...runtime.blas import kernel_libraries as shared_libs

    return cache_key(module, opt_level, shared_libs(),
                     ("kiln-dialect", f"vectorize={vectorize}", repr(codegen_settings()), source_digest()))


_SOURCE: str | None = None


def source_digest() -> str:
    """sha256 of kiln's Python and C sources (tests, benchmarks and docs
    excepted), computed once per process (~7 ms)."""
    global _SOURCE
    if _SOURCE is None:
        root = Path(__file__).resolve().parents[2]
        skip = {"test", "bench", "examples", "docs", "scripts", ".venv", "__pycache__"}
        h = hashlib.sha256()
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith((".py", ".c", ".h")):
                    path = os.path.join(dirpath, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read())
        _SOURCE = h.hexdigest()
    return _SOURCE


def _weights_elided_key(module) -> bytes | None:
    """A digest of ``module``: its text with dense attributes above
    :data:`_ELIDE` elements elided, then their contents in walk order; None
    when that would miss something (an elided attribute not reached by the
    walk, or one numpy cannot read), and the caller hashes the full text."""
    import numpy as np

    from ..._mlir import ir

    text = module.operation.get_asm(binary=True, large_elements_limit=_ELIDE, assume_verified=True)
    h = hashlib.sha256(text)
    hashed, failed = [0], []

    def visit(op):
        for name in op.attributes:
            a = op.attributes[name]
            if isinstance(a, ir.DenseElementsAttr) and not a.is_splat and len(a) > _ELIDE:
                try:
                    h.update(np.ascontiguousarray(np.asarray(a)).view(np.uint8).reshape(-1).data)
                except Exception:  # noqa: BLE001 - a dtype numpy cannot view: print it all
                    failed.append(name)
                    return ir.WalkResult.INTERRUPT
                hashed[0] += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if failed or text.count(b"__elided__") != hashed[0]:
        return None
    return h.digest()


def _entry(key: str) -> Path:
    """Where the library of ``key`` is cached."""
    from ..cache import default_cache_dir

    return default_cache_dir() / "cpu" / key[:2] / f"{key}.so"


def _discard(entry: Path, why: str) -> None:
    """Delete a damaged entry (and its digest) with a warning: the caller rebuilds it."""
    from ..cache import digest_path

    _log.warning("kiln: CPU kernel cache entry %s is damaged or foreign (%s): deleted, recompiling", entry, why)
    entry.unlink(missing_ok=True)
    digest_path(entry).unlink(missing_ok=True)


_GLOBAL: set[str] = set()


def _split_libs(libs) -> tuple[list[str], list[str]]:
    """``(linked, in_process)``: the libraries an entry links by path
    (OpenBLAS, outside the cache), and kiln's native runtime, which lives in
    the cache dir (its path moves with a copied cache): an entry resolves
    its symbols from the copy this process loaded instead."""
    from ...runtime import native

    own = native.library()
    linked = [lib for lib in libs if lib != own]
    return linked, [lib for lib in libs if lib == own]


def _make_global(libs) -> None:
    """Load ``libs`` with ``RTLD_GLOBAL`` (once each): an entry's calls of the
    native runtime resolve to the copy this process loaded."""
    for lib in libs:
        if lib not in _GLOBAL:
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
            _GLOBAL.add(lib)


def load(key: str, names) -> SharedObjectEngine | None:
    """The cached library of ``key`` with ``names`` found in it, or None (a
    damaged or foreign entry is deleted, so the caller rebuilds it).

    The entry is read once; those bytes are checked against its digest (and
    the key it was stored under) before anything is loaded, and are what is
    loaded."""
    from ...runtime.blas import kernel_libraries as shared_libs
    from ..cache import digest_problem

    entry = _entry(key)
    try:
        data = entry.read_bytes()
    except FileNotFoundError:
        _log.info("CPU kernel cache miss: %s", entry)
        return None
    except OSError as e:
        _discard(entry, f"unreadable: {e.strerror or e}")
        return None
    problem = digest_problem(entry, key, data)
    if problem is not None:
        _discard(entry, problem)
        return None
    try:
        _make_global(_split_libs(shared_libs())[1])
        engine = _load_copy(data)
        for name in names:
            engine.lookup(name)
        _log.info("CPU kernel cache hit: %s", entry)
        return engine
    except (OSError, RuntimeError) as e:  # intact, but built against something else: rebuild it
        _discard(entry, f"does not load: {e}")
        return None


def jit_cached(module, names, opt_level: int = 3, key: str | None = None):
    """An engine for the LLVM-dialect ``module`` with ``names`` materialized:
    a :class:`SharedObjectEngine` from the cache, or a fresh ExecutionEngine
    (whose code is then added to the cache).  ``key``: a :func:`kernel_key`
    taken before lowering, which the caller has looked up already (with
    :func:`load`): the code is compiled and stored under it.
    ``engine.cache`` says which (``"hit"``, ``"miss"`` or ``"off"``)."""
    from ..._mlir import execution_engine
    from ...runtime.blas import kernel_libraries as shared_libs

    libs = shared_libs()
    if not enabled():
        engine = execution_engine.ExecutionEngine(module, opt_level=opt_level, shared_libs=libs)
        for name in names:
            engine.lookup(name)
        return _Tagged(engine, "off")
    if key is None:
        key = cache_key(module, opt_level, libs)
        engine = load(key, names)
        if engine is not None:
            return engine
    engine = execution_engine.ExecutionEngine(module, opt_level=opt_level, shared_libs=libs, enable_pic=True)
    for name in names:
        engine.lookup(name)
    _store(engine, _entry(key), libs, key)
    return _Tagged(engine, "miss")


def _store(engine, entry: Path, libs, key: str) -> None:
    """Link the engine's object code into ``entry`` with its digest; a
    failure only costs the next compile."""
    from ..cache import write_digest
    from ..cache_root import private_mkdir

    try:
        private_mkdir(entry.parent)
        linked, _ = _split_libs(libs)
        with tempfile.TemporaryDirectory(dir=entry.parent) as tmp:
            obj, so = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.so")
            engine.dump_to_object_file(obj)
            # Libraries outside the cache by path, with their folders as
            # rpaths; the native runtime's symbols stay undefined and bind to
            # the copy the process loaded (see _make_global).
            rpaths = [f"-Wl,-rpath,{os.path.dirname(lib)}" for lib in linked]
            subprocess.run([_linker(), "-shared", "-o", so, obj, *linked, *rpaths],
                           check=True, capture_output=True, timeout=300)
            # The digest first: a reader never finds the new entry without it.
            write_digest(entry, key, Path(so).read_bytes())
            os.replace(so, entry)
        _log.info("CPU kernel cache: stored %s", entry)
    except (OSError, subprocess.SubprocessError) as e:
        _log.info("CPU kernel cache: could not store %s (%s)", entry, e)


class _Tagged:
    """An ExecutionEngine with a ``cache`` attribute (the bindings' class takes none)."""

    def __init__(self, engine, cache: str):
        self._engine = engine
        self.cache = cache

    def __getattr__(self, name):
        return getattr(self._engine, name)
