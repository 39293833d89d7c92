"""The Triton GPU backend: kernels generated from kiln ops, run by Triton.

Kernels are generated from the kiln ops' semantics (see :mod:`.spec` for the
grouping and :mod:`.emit` for the elementwise rules).  Under
``TRITON_INTERPRET=1`` the same kernels run on CPU with torch tensors.
"""

from __future__ import annotations

KINDS = {
    "pointwise": "kiln.backends.triton.pointwise:PointwiseKernel",
    "matmul": "kiln.backends.triton.matmul:MatmulKernel",
    "conv2d": "kiln.backends.triton.matmul:Conv2dKernel",
    "softmax": "kiln.backends.triton.reduction:SoftmaxKernel",
    "layer_norm": "kiln.backends.triton.reduction:LayerNormKernel",
    "reduce": "kiln.backends.triton.reduction:ReduceKernel",
    "pool": "kiln.backends.triton.pool:PoolKernel",
    "attention": "kiln.backends.triton.attention:AttentionKernel",
    "torch": "kiln.backends.triton.torch_ops:TorchKernel",
}


def kernel_class(kind: str):
    """The generated-kernel class of a kernel kind."""
    import importlib

    mod, _, name = KINDS[kind].partition(":")
    return getattr(importlib.import_module(mod), name)


def build_kernel(spec, config=None, *, cache=None):
    """The default (generated) kernel for a :class:`~.spec.KernelSpec`."""
    return kernel_class(spec.kind)(spec, config, cache=cache)


PASS_MODULES = ()
