"""Frontends of kiln: PyTorch (``torch.export``) and ONNX into the kiln dialect.

- :func:`import_torch(module, example_args, dynamic_shapes=None, fallback=True) <import_torch>`
- :func:`import_onnx(model_or_path, symbols=None, fallback=True) <import_onnx>`

Both return a verified kiln ``ir.Module``; its ``.context`` (made by
``make_context(torch=True)``) owns everything in it.  Pass
``with_report=True`` to get ``(module, ImportReport)``.
"""

from .onnx_import import import_onnx
from .report import ImportReport
from .torch_import import import_torch

__all__ = ["ImportReport", "import_onnx", "import_torch"]
