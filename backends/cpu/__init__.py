"""The CPU backend: linalg on tensors → vectorized, bufferized LLVM code in an ExecutionEngine.

Stages (registered passes, see :mod:`.pipeline`): ``kiln-cpu-prepare``,
``kiln-cpu-vectorize``, ``kiln-cpu-bufferize``, ``kiln-cpu-to-llvm``, and
``kiln-cpu-lower`` for all of them.  :mod:`.jit` turns the result into
:class:`~kiln.backends.kernel.Kernel` objects.
"""

from .jit import CpuKernel, jit  # noqa: F401
from .pipeline import STAGES, CpuLower, prepare_module  # noqa: F401
