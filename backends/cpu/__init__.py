"""The CPU backend: linalg on tensors → vectorized, bufferized LLVM code in an ExecutionEngine.

Stages (registered passes, see :mod:`.pipeline`): ``kiln-cpu-prepare``,
``kiln-cpu-vectorize``, ``kiln-cpu-bufferize``, ``kiln-cpu-library-calls``
(the library kernels chosen on kiln IR, :mod:`.library_kernels`),
``kiln-cpu-library``, ``kiln-cpu-to-llvm``, and ``kiln-cpu-lower`` for all of
them.  :mod:`.jit` turns the result into
:class:`~kiln.backends.kernel.Kernel` objects.
"""

from .jit import CpuKernel, jit  # noqa: F401

# The lowering (MLIR) loads on first use: a model loaded from an artifact
# runs CpuKernels without it (kiln.runtime.artifact).
_PIPELINE = ("STAGES", "CpuLower", "prepare_module")


def __getattr__(name):
    if name in _PIPELINE:
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
