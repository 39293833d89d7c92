"""The one place kiln imports the MLIR Python bindings from.

The bindings come from the torch-mlir wheel.  Everything else in kiln imports
``ir``, ``passmanager``, ``rewrite``, ``dialects`` and ``execution_engine``
from here, so the provider can be swapped in one place.
"""

from torch_mlir import ir, passmanager, rewrite  # noqa: F401
from torch_mlir import dialects  # noqa: F401
from torch_mlir.dialects import arith, builtin, func, linalg, math, tensor  # noqa: F401
from torch_mlir.dialects import ext  # noqa: F401

__all__ = [
    "arith",
    "builtin",
    "dialects",
    "execution_engine",
    "ext",
    "func",
    "ir",
    "linalg",
    "math",
    "passmanager",
    "rewrite",
    "tensor",
]


def __getattr__(name):
    # The execution engine loads LLVM's JIT; import it only when asked for.
    if name == "execution_engine":
        from torch_mlir import execution_engine

        return execution_engine
    raise AttributeError(name)
