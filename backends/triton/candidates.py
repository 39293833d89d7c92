"""The Triton backend's entries in the kernel registry.

Generated kernels (priority 0) for every kernel kind on ``cuda``; a library
GEMM (cuBLAS through ``torch.matmul``, priority -1: measured by autotuning,
never the heuristic's first pick); and the FlashAttention-style kernel,
registered through the public :func:`kiln.register_kernel` API in
:mod:`.attention`.
"""

from __future__ import annotations

from . import KINDS, kernel_class

FLOAT = ("f16", "bf16", "f32")


def library_matmul(inputs, outputs, binding):
    """``torch.matmul`` (cuBLAS on a GPU) for a plain ``kiln.matmul``."""
    import torch

    torch.matmul(inputs[0], inputs[1], out=outputs[0])


def register_builtins(registry) -> None:
    """Add the Triton backend's candidates to ``registry``."""
    from ..registry import KernelEntry
    from .attention import register

    for kind in KINDS:
        if kind == "attention":
            continue
        dtypes = None if kind in ("pointwise", "torch") else FLOAT
        registry.register(
            KernelEntry(op=kind, device="cuda", impl=kernel_class(kind), name=f"triton_{kind}", dtypes=dtypes)
        )
    registry.register(
        KernelEntry(op="kiln.matmul", device="cuda", impl=library_matmul, name="library_matmul", dtypes=FLOAT,
                    priority=-1)
    )
    register(registry)
