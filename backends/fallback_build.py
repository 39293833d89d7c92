"""Fallback kernels from ``kiln.fallback`` ops: the compile-time half of
:mod:`kiln.backends.fallback`.

:func:`fallback_kernel` reads a ``kiln.fallback`` op (its recorded operands
and attributes, its tensor types) and builds the kernel that runs it:
ONNX Runtime's (:class:`~kiln.runtime.ort_fallback.OrtFallbackKernel`) for an
ONNX node imported with its one-node model, else PyTorch's
(:class:`~kiln.backends.fallback.FallbackKernel`, :func:`fallback_from_op`).
Reading the op needs MLIR, so this lives on the compiler's side; the kernels
themselves run in a loaded artifact without it (``test_layering.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .._mlir import ir
from ..dialects.dims import dim
from ..dialects.kiln import TensorInfo, tensor_info
from ..errors import DimError, KilnError, UnsupportedError
from ..runtime.ort_fallback import IO_ATTR, MODEL_ATTR, OrtFallbackKernel
from .fallback import FallbackKernel, _tensor_ref

__all__ = ["fallback_from_op", "fallback_kernel", "python_value"]


def python_value(attr):
    """A Python value for an MLIR attribute recorded by the frontend."""
    if isinstance(attr, ir.UnitAttr):
        return None
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return int(attr.value)
    if isinstance(attr, ir.FloatAttr):
        return float(attr.value)
    if isinstance(attr, ir.StringAttr):
        text = attr.value
        try:
            d = dim(text)
        except DimError:
            return text
        return d if d.symbols else text  # "B*16": a dim, evaluated per call
    if isinstance(attr, ir.ArrayAttr):
        return [python_value(a) for a in attr]
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return [int(x) for x in attr]
    if isinstance(attr, ir.TypeAttr):
        return str(attr.value)
    return str(attr)


def _info(t):
    info = tensor_info(t)
    return TensorInfo(info.dims, str(info.dtype))


def fallback_from_op(op, name: str | None = None, results: Sequence[int] | None = None) -> FallbackKernel:
    """The :class:`FallbackKernel` of a ``kiln.fallback`` op (an ``ir.Operation`` or its view);
    ``results`` the indices of the op results the kernel's outputs receive
    (default all)."""
    op = op.operation
    view = op.opview
    op_name = view.attr("op_name")
    recorded = {}
    kwargs = {}
    attrs = view.attr("attrs")
    if attrs is not None:
        for named in ir.DictAttr(attrs):
            key = named.name
            if key.startswith("operand") and key[len("operand"):].isdigit():
                recorded[int(key[len("operand"):])] = python_value(named.attr)
            else:
                kwargs[key] = python_value(named.attr)
    # Tensors inside recorded lists ("%operand<k>" markers) are the last operands.
    listed = {_tensor_ref(x) for v in recorded.values() if isinstance(v, list) for x in v} - {None}
    n_tensors = len(op.operands) - len(listed)
    positions, k = [], 0
    for pos in range(n_tensors + len(recorded)):
        if pos in recorded:
            positions.append(("value", recorded[pos]))
        else:
            positions.append(("tensor", k))
            k += 1
    if k != n_tensors:
        raise KilnError(f"fallback '{op_name}': operand positions do not add up ({k} of {n_tensors} tensors)")
    all_results = list(op.results)
    if results is None:
        results = range(len(all_results))
    try:
        return FallbackKernel(
            name or op_name,
            op_name,
            [_info(v.type) for v in op.operands],
            [_info(all_results[r].type) for r in results],
            positions,
            kwargs,
            results,
            len(all_results),
        )
    except UnsupportedError as e:  # name the source op (an ONNX node, a torch file:line)
        raise UnsupportedError(f"{e.message} (at {op.location})") from None


def fallback_kernel(op, name: str, results=None):
    """The kernel of a ``kiln.fallback`` op (``results``: the op results its
    outputs receive, default all): ONNX Runtime's for an ONNX node imported
    with its one-node model (:mod:`kiln.runtime.ort_fallback`), else PyTorch's."""
    op, attrs = op.operation, op.operation.opview.attr("attrs")
    texts = {a.name: ir.StringAttr(a.attr).value for a in (ir.DictAttr(attrs) if attrs is not None else ())
             if a.name in (MODEL_ATTR, IO_ATTR)}
    if MODEL_ATTR not in texts:
        return fallback_from_op(op, name, results)
    results = list(range(len(op.results))) if results is None else list(results)
    return OrtFallbackKernel.from_attrs(
        name, op.opview.attr("op_name"), [_info(v.type) for v in op.operands],
        [_info(op.results[r].type) for r in results], texts, results,
        getattr(op.location, "name_str", None) or str(op.location))
