"""The one place kiln imports the MLIR Python bindings from.

The bindings come from the torch-mlir wheel.  Everything else in kiln imports
``ir``, ``passmanager``, ``rewrite``, ``dialects`` and ``execution_engine``
from here, so the provider can be swapped in one place.
"""

from torch_mlir import (  # noqa: F401
    dialects,  # noqa: F401
    ir,
    passmanager,
    rewrite,
)
from torch_mlir.dialects import (  # noqa: F401
    arith,
    builtin,
    ext,  # noqa: F401
    func,
    linalg,
    math,
    tensor,
)

__all__ = [
    "arith",
    "builtin",
    "dialects",
    "ext",
    "func",
    "ir",
    "linalg",
    "math",
    "passmanager",
    "rewrite",
    "tensor",
]


# `execution_engine` is available too, loaded lazily by __getattr__.


def __getattr__(name):
    # The execution engine loads LLVM's JIT; import it only when asked for.
    if name == "execution_engine":
        from torch_mlir import execution_engine

        return execution_engine
    raise AttributeError(name)
