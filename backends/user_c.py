"""C kernels registered from user code: source kiln compiles, or a symbol of a shared library.

``kiln.register_kernel(op, kiln.CKernel("my_kernel", source=C_TEXT), ...)``
(or ``library="/path/libmine.so"``) registers a C function as a kernel; it
is a Python callable with kiln's kernel contract, so the CPU runtime (and
the Triton path on CPU tensors, under ``TRITON_INTERPRET=1``) runs it like
any registered function.  The C function follows one ABI::

    typedef struct { void *data; int64_t rank; const int64_t *shape; } kiln_tensor;
    int my_kernel(const kiln_tensor *inputs, int64_t n_inputs,
                  kiln_tensor *outputs, int64_t n_outputs);

Every tensor is contiguous and row-major, of the op's dtypes; the function
writes the outputs and returns 0 (anything else is a KilnError naming the op,
the kernel and the code).  Source is compiled once per text (``cc -O3
-shared -fPIC``, the ``kiln_tensor`` definition above prepended as
``KILN_KERNEL_H``) into the kernel cache's ``user_c`` folder, keyed by the
text's sha256; a compile error is a KilnError with the compiler's message.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence

from ..errors import KilnError

__all__ = ["KILN_KERNEL_H", "CKernel"]

#: What kiln prepends to C source it compiles (the ABI's one type).
KILN_KERNEL_H = """#include <stdint.h>
typedef struct { void *data; int64_t rank; const int64_t *shape; } kiln_tensor;
"""

_lock = threading.Lock()


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("rank", ctypes.c_int64), ("shape", ctypes.POINTER(ctypes.c_int64))]


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _build(symbol: str, source: str) -> str:
    """The shared library for ``source`` (compiled now unless cached); its path."""
    from .cache import default_cache_dir

    text = KILN_KERNEL_H + source
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    folder = default_cache_dir() / "user_c"
    path = folder / f"{digest}.so"
    if path.exists():
        return str(path)
    cc = _compiler()
    if cc is None:
        raise KilnError(f"C kernel '{symbol}': no C compiler found (set CC, or install cc / gcc)")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kiln-user-c-") as tmp:
        src = os.path.join(tmp, "kernel.c")
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        out = os.path.join(tmp, "kernel.so")
        done = subprocess.run([cc, "-O3", "-fPIC", "-shared", "-o", out, src], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            first = "\n".join(done.stderr.strip().splitlines()[:6])
            raise KilnError(f"C kernel '{symbol}' does not compile:\n{first}")
        os.replace(out, path)  # atomic: another process may be writing the same one
    return str(path)


class CKernel:
    """A C function as a registered kernel (see the module docstring).

    ``symbol`` is the function's name; ``source`` its C text (kiln compiles
    it), or ``library`` a shared library that exports it.  Compiled and
    loaded on first use (a missing symbol or a compile error is a
    KilnError then, and at registration when ``eager=True``, the default).
    """

    def __init__(self, symbol: str, source: str | None = None, library: str | os.PathLike | None = None,
                 eager: bool = True):
        if (source is None) == (library is None):
            raise KilnError(f"CKernel('{symbol}'): give the C source or the shared library, one of them")
        if not symbol.isidentifier():
            raise KilnError(f"CKernel: '{symbol}' is not a C function name")
        self.symbol = symbol
        self.__name__ = symbol
        self.source = source
        self.library = os.fspath(library) if library is not None else None
        self._fn = None
        if eager:
            self._load()

    def _load(self):
        with _lock:
            if self._fn is not None:
                return self._fn
            path = self.library if self.library is not None else _build(self.symbol, self.source)
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise KilnError(f"C kernel '{self.symbol}': cannot load {path}: {e}") from None
            try:
                fn = getattr(lib, self.symbol)
            except AttributeError:
                raise KilnError(f"C kernel '{self.symbol}': {path} has no symbol '{self.symbol}'") from None
            fn.argtypes = [ctypes.POINTER(_Tensor), ctypes.c_int64, ctypes.POINTER(_Tensor), ctypes.c_int64]
            fn.restype = ctypes.c_int
            self._lib, self._fn = lib, fn
            return fn

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: Mapping[str, int]) -> None:
        """Call the C function on contiguous ``inputs`` / ``outputs`` (numpy arrays or CPU torch tensors)."""
        from .kernel import as_numpy

        fn = self._fn or self._load()
        ins = [as_numpy(x) for x in inputs]
        outs = [as_numpy(o) for o in outputs]
        for k, a in enumerate(ins + outs):
            if not a.flags["C_CONTIGUOUS"]:
                raise ValueError(f"tensor #{k} is not contiguous")  # the caller's KilnError names the op
        keep = []

        def table(arrays):
            arr = (_Tensor * max(len(arrays), 1))()
            for i, a in enumerate(arrays):
                shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
                keep.append(shape)
                arr[i] = _Tensor(a.ctypes.data, a.ndim, shape)
            return arr

        code = fn(table(ins), len(ins), table(outs), len(outs))
        if code != 0:
            raise RuntimeError(f"C function '{self.symbol}' returned {code}")

    def __repr__(self) -> str:
        return f"<CKernel {self.symbol} from {'source' if self.source is not None else self.library}>"
