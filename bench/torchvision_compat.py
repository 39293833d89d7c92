"""Let the registry's torchvision wheel import (the bench's real workloads and
the tests' conftest call :func:`define_torchvision_schemas` before importing
torchvision or transformers).

That wheel is a CUDA build: its ``_C`` does not load against the CPU torch,
and ``torchvision._meta_registrations`` then registers fake kernels for
``torchvision::nms`` / ``qnms``, operators only ``_C`` defines, so
``import torchvision`` fails -- and with it every ``transformers`` model
import, since transformers imports torchvision when it is installed.
Defining the two schemas first lets the pure-Python models import; nothing
here calls them.  On a torchvision whose ``_C`` loads this does nothing.
"""

import importlib.util

import torch

_LIB = None


def define_torchvision_schemas() -> None:
    """Define ``torchvision::nms`` / ``qnms`` unless torchvision's ``_C`` can."""
    global _LIB
    if _LIB is not None or importlib.util.find_spec("torchvision") is None:
        return
    if _c_loads():
        return
    _LIB = torch.library.Library("torchvision", "FRAGMENT")  # kept: it owns the schemas
    for name in ("nms", "qnms"):
        try:
            _LIB.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:  # defined already
            pass


def _c_loads() -> bool:
    """Whether torchvision's C extension loads here (checked without importing torchvision)."""
    import os

    spec = importlib.util.find_spec("torchvision")
    folder = os.path.dirname(spec.origin)
    libs = [f for f in os.listdir(folder) if f.startswith("_C") and f.endswith((".so", ".pyd"))]
    if not libs:
        return False
    try:
        torch.ops.load_library(os.path.join(folder, libs[0]))
    except (OSError, RuntimeError):
        return False
    return True
