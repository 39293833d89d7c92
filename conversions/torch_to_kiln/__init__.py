"""torch dialect -> kiln: the ``convert-torch-to-kiln`` pass and its pattern tables.

``convert_module(module_op, ...)`` converts a module from torch-mlir's
importers (``torch.aten.*`` from the FX importer, ``torch.operator "onnx.*"``
from the ONNX importer) into kiln in place.  Symbols come from
``torch.symbolic_int`` ops (renamed with ``symbol_names``) and dims from
``torch.bind_symbolic_shape``; see :mod:`.driver` for how values, types,
legality and fallback work, :mod:`.aten`, :mod:`.aten_nn`, :mod:`.onnx` and :mod:`.onnx_data` for the patterns.
"""

from __future__ import annotations

from ...pipelines.registry import Option, Pass, register_pass
from . import (
    aten_nn,  # noqa: F401  (registers torch's contraction and NN patterns)
    aten_quant,  # noqa: F401  (registers PT2E's quantized_decomposed quantize / dequantize)
    aten_update,  # noqa: F401  (registers slice_scatter / index_put / copy -> kiln.update_slice)
    onnx_data,  # noqa: F401  (registers the data-movement patterns)
    onnx_nn,  # noqa: F401  (registers the convolution and pooling patterns)
    onnx_ops,  # noqa: F401  (registers ArgMax, ScatterND, GroupNormalization, ...)
    onnx_quant,  # noqa: F401  (registers QuantizeLinear, QLinearMatMul, ...)
    onnx_resize,  # noqa: F401  (registers Resize / Upsample)
)
from .aten import ATEN_PATTERNS
from .driver import ConversionStats, KilnTypeConverter, TorchToKiln, check_legal
from .onnx import ONNX_PATTERNS

__all__ = ["PATTERNS", "ConversionStats", "ConvertTorchToKiln", "KilnTypeConverter", "check_legal", "convert_module"]

#: Every pattern, by source op name (``torch.aten.mm``, ``onnx.Conv``).
PATTERNS = {**ATEN_PATTERNS, **ONNX_PATTERNS}


def convert_module(module_op, *, fallback=True, symbol_names=None, resources=None, arg_dims=None,
                   symbol_ranges=None, onnx_model=None) -> ConversionStats:
    """Convert ``module_op`` (a ``builtin.module`` in the torch dialect) to kiln in place.

    ``fallback=False`` raises :class:`~kiln.errors.UnsupportedError` listing
    every op without a kiln lowering instead of emitting ``kiln.fallback``.
    ``onnx_model`` is the ONNX model the module was imported from: an ONNX
    node that falls back keeps its own ``NodeProto`` (see :mod:`.onnx_fallback`).
    Returns per-op-type statistics (converted / decomposed / fallback).
    """
    conv = TorchToKiln(
        module_op, PATTERNS, fallback=fallback, symbol_names=symbol_names, resources=resources,
        arg_dims=arg_dims, symbol_ranges=symbol_ranges,
    )
    if onnx_model is not None:
        from .onnx_fallback import OnnxNodes

        conv.onnx_nodes = OnnxNodes(onnx_model)
    return conv.run()


@register_pass
class ConvertTorchToKiln(Pass):
    """Convert torch-dialect IR (from the FX or ONNX importer) to the kiln dialect."""

    name = "convert-torch-to-kiln"
    summary = "Convert torch.aten / torch.operator \"onnx.*\" ops to kiln (unsupported ops -> kiln.fallback)"
    options = (Option("fallback", bool, True, "emit kiln.fallback for unsupported ops (else: error)"),)

    def run(self, module) -> None:
        stats = convert_module(module, fallback=self.option("fallback"))
        for kind in ("converted", "decomposed", "fallback"):
            self.bump(kind, sum(getattr(stats, kind).values()))
