"""CPU object code at run time: what a compiled or loaded model calls.

:class:`CpuKernel` implements the :mod:`kiln.backends.kernel` contract for
one function of a kernel library (an ``ExecutionEngine`` the compiler made,
or a :class:`SharedObjectEngine`: a library loaded with ``dlopen`` from the
object-code cache or an artifact); :func:`host_cpu` names the CPU code is
compiled for.  They live in ``runtime/`` because a loaded artifact runs them
without the compiler; the compiler's halves (``jit``, the object-code
cache's keys and stores) are in :mod:`kiln.backends.cpu.jit` and
:mod:`kiln.backends.cpu.objcache`, which re-export these names.
"""

from __future__ import annotations

import ctypes
import os
import platform
import tempfile
import weakref
from collections.abc import Sequence

from ..backends.kernel import Kernel
from ..errors import KilnError

__all__ = ["CpuKernel", "SharedObjectEngine", "host_cpu", "load_copy"]


_HOST: str | None = None


def host_cpu() -> str:
    """The host CPU as the JIT sees it: machine, model and feature flags."""
    global _HOST
    if _HOST is None:
        text = platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("model name", "flags", "Features")):
                        text += "|" + line.strip()
                        if line.startswith(("flags", "Features")):
                            break
        except OSError:  # pragma: no cover - not Linux
            text += platform.processor()
        _HOST = text
    return _HOST


class SharedObjectEngine:
    """A cached kernel library loaded with ``dlopen``: what :class:`CpuKernel`
    needs of an ``ExecutionEngine`` (``lookup``, ``raw_lookup``).

    The library is closed (``dlclose``) when this object is collected: whatever
    calls into it (kernels, their callers, the packed-weight release) must
    hold the engine (MLIR_NOTES sharp edge 9), as they do an ExecutionEngine.
    """

    cache = "hit"

    def __init__(self, path: str):
        self.path = path
        self._lib = ctypes.CDLL(path)
        # Not at exit: the process unmaps everything then, and a finalizer
        # still to run (a model's packed-weight release) may call into it.
        weakref.finalize(self, _dlclose, self._lib._handle).atexit = False

    def raw_lookup(self, name: str) -> int:
        """The address of the packed wrapper of ``name`` (as ExecutionEngine.raw_lookup), or 0."""
        try:
            return ctypes.cast(getattr(self._lib, "_mlir_" + name), ctypes.c_void_p).value or 0
        except AttributeError:
            return 0

    def lookup(self, name: str) -> int:
        """Like ``ExecutionEngine.lookup``: raises for a function the library lacks."""
        address = self.raw_lookup(name)
        if not address:
            raise RuntimeError(f"Unknown function {name}")
        return address


def _dlclose(handle: int) -> None:
    import _ctypes

    try:
        _ctypes.dlclose(handle)
    except OSError:  # pragma: no cover - the loader refused: the mapping just stays
        pass


def load_copy(data: bytes) -> SharedObjectEngine:
    """``data`` (checked bytes of an entry) loaded from a private file: each
    load has its own mapping, and the file is gone once it is mapped."""
    fd, tmp = tempfile.mkstemp(suffix=".so", prefix="kiln-kernels-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return SharedObjectEngine(tmp)
    finally:
        os.unlink(tmp)  # the mapping stays valid; nothing is left on disk


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
            from ..backends.cpu.dispatch import entry

            fn = self._entry = entry(self.engine, self.name)
        return fn

    def address(self) -> int:
        """The packed C-interface wrapper's address (for ``kiln_run_split``)."""
        return ctypes.cast(self.entry(), ctypes.c_void_p).value

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: dict[str, int]) -> None:
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            # The code would read a missing argument's descriptor from beyond the list: a crash.
            raise KilnError(f"kernel '{self.name}' takes {len(self.inputs)} input(s) and {len(self.outputs)} "
                            f"output(s), got {len(inputs)} and {len(outputs)}")
        call = self.__dict__.get("_call")
        if call is None:  # looked up once: engine.invoke cost ~100 µs a launch (kiln.backends.cpu.dispatch)
            from ..backends.cpu.dispatch import make_caller

            call = self._call = make_caller(self.engine, self.name)
        call(list(inputs) + list(outputs))
