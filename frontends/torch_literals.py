"""Fast weight literals for torch-mlir's FX importer.

torch-mlir turns each weight of an exported program into a
``torch.vtensor.literal`` holding a ``dense_resource`` blob, and reads the
tensor's data as ``np.array(tensor.tolist())``: a Python float per element,
0.45 s for the 8 M weights of the bench MLP.  :class:`FastLiterals` is an
importer hook that builds the very same attribute (same blob name, type and
bytes) from a copy of the tensor's memory instead.  Tensors it does not
handle (fake or subclassed tensors, one-element tensors, dtypes numpy lacks)
go down torch-mlir's own path unchanged.

The data is copied, as torch-mlir's path does: the blob must not change
when the caller later updates the module's weights in place.
"""

from __future__ import annotations

import numpy as np
from torch_mlir.extras.fx_importer import FxImporterHooks

from .._mlir import ir
from ..transforms._resources import register_resource

__all__ = ["FastLiterals"]


def _numpy_dtypes():
    import torch

    # The dtypes whose bytes numpy holds as torch does (torch-mlir's
    # TORCH_DTYPE_TO_NPY_TYPE, less the ones numpy cannot view directly).
    return {
        torch.uint8: np.uint8, torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32,
        torch.int64: np.int64, torch.float16: np.float16, torch.float32: np.float32,
        torch.float64: np.float64,
    }


class FastLiterals(FxImporterHooks):
    """An :class:`FxImporterHooks` whose ``resolve_literal`` imports plain CPU
    tensors by copying their memory (see the module docstring).

    Like torch-mlir's ``RefTracker``, one tensor object gets one attribute
    however often the graph uses it; the tensors are held until the hook is
    dropped, so an ``id`` is never reused while it is a key.
    """

    def __init__(self):
        import torch

        self._torch = torch
        self._dtypes = _numpy_dtypes()
        self._attrs: dict[int, tuple[object, ir.Attribute]] = {}

    def resolve_literal(self, gni, literal, info):
        """The ``torch.vtensor.literal`` value of ``literal``, or None for torch-mlir's path."""
        torch = self._torch
        # Exact types only: FakeTensor, FunctionalTensor and other subclasses
        # may not have real storage behind them.
        if type(literal) not in (torch.Tensor, torch.nn.Parameter):
            return None
        entry = self._attrs.get(id(literal))
        if entry is None:
            attr = self._attribute(literal)
            if attr is None:
                return None
            entry = self._attrs[id(literal)] = (literal, attr)
        vtensor_type = gni._cc.tensor_to_vtensor_type(literal)
        return ir.Operation.create("torch.vtensor.literal", results=[vtensor_type],
                                   attributes={"value": entry[1]}).result

    def _attribute(self, tensor) -> ir.Attribute | None:
        torch = self._torch
        npy = self._dtypes.get(tensor.dtype)
        # One-element tensors become splat DenseElementsAttrs on torch-mlir's
        # path; they are cheap there.
        if npy is None or tensor.numel() <= 1 or tensor.layout != torch.strided or tensor.device.type != "cpu":
            return None
        try:
            with torch.no_grad():
                view = tensor.detach().resolve_conj().resolve_neg().numpy()
        except (RuntimeError, TypeError):  # under a fake mode, or storage numpy cannot see
            return None
        array = np.array(view, dtype=npy, order="C", copy=True)
        array.flags.writeable = False
        shape = list(tensor.shape)
        # torch-mlir's blob name and type: MLIR uniquifies repeated names in
        # creation order, so the printed module is the same as its path's.
        name = f"torch_tensor_{'_'.join(str(d) for d in shape)}_{tensor.dtype}"
        from torch_mlir.extras.fx_importer import create_mlir_tensor_type

        attr = ir.DenseResourceElementsAttr.get_from_buffer(array, name, create_mlir_tensor_type(tensor))
        register_resource(attr, array)
        return attr
