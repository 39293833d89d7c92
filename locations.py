"""Source locations as a user reads them: ``model.py:42`` or ``node 'Mul_3' (Mul)``.

The importers give every op a location: torch-mlir's FX importer a file
location from ``torch.export``'s stack trace (a call-site chain when the op
was traced through several frames: the innermost first), the ONNX importer a
name location holding the node's label (:func:`kiln.frontends.onnx_import.node_label`).
:func:`location_text` turns one into the text reports and warnings print.
For a call-site chain that is the innermost frame *of the user's code*: a
frame inside torch (``torch/nn/modules/activation.py`` for an
``nn.Hardshrink`` the model calls) or torch-mlir says where the library
implements the op, not where the model uses it.  (kiln's own folders are not
skipped: its bench models and examples are model code, and its tests' models
live under it.)
"""

from __future__ import annotations

import importlib.util
import os

__all__ = ["location_text"]

#: The packages whose frames are never "the user's code".
LIBRARY_PACKAGES = ("torch", "torch_mlir")

_library_dirs: tuple[str, ...] | None = None


def _libraries() -> tuple[str, ...]:
    """The directories of :data:`LIBRARY_PACKAGES` (with a trailing separator),
    found without importing them."""
    global _library_dirs
    if _library_dirs is None:
        dirs = []
        for name in LIBRARY_PACKAGES:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            for d in (spec.submodule_search_locations or []) if spec is not None else []:
                dirs.append(os.path.join(os.path.realpath(d), ""))
        _library_dirs = tuple(dirs)
    return _library_dirs


def is_library_file(path: str) -> bool:
    """Whether ``path`` lies inside torch or torch-mlir."""
    real = os.path.realpath(path)
    return any(real.startswith(d) for d in _libraries())


def _frames(loc) -> list:
    """The file locations of ``loc``, innermost first (a call site's callee
    before its caller; a name location's child; a fused location's parts)."""
    from ._mlir import ir

    if isinstance(loc, ir.FileLineColLoc):
        return [loc]
    if isinstance(loc, ir.CallSiteLoc):
        return _frames(loc.callee) + _frames(loc.caller)
    if isinstance(loc, ir.NameLoc):
        return _frames(loc.child_loc)
    if isinstance(loc, ir.FusedLoc):
        return [f for part in loc.locations for f in _frames(part)]
    return []


def _names(loc) -> list[str]:
    from ._mlir import ir

    if isinstance(loc, ir.NameLoc):
        return [loc.name_str]
    if isinstance(loc, ir.CallSiteLoc):
        return _names(loc.callee) + _names(loc.caller)
    if isinstance(loc, ir.FusedLoc):
        return [n for part in loc.locations for n in _names(part)]
    return []


def _file_text(f) -> str:
    return f"{f.filename}:{f.start_line}" + (f":{f.start_col}" if f.start_col else "")


def location_text(loc) -> str:
    """The text of the MLIR location ``loc`` for a user: a name location's
    name (an ONNX node's label), else ``file:line`` of the innermost frame
    outside torch and torch-mlir (the innermost frame when every one is
    inside them), else the printed location (``loc(unknown)``: ``unknown``)."""
    names = [n for n in _names(loc) if n]
    if names:
        return names[0]
    frames = _frames(loc)
    if frames:
        user = [f for f in frames if not is_library_file(f.filename)]
        return _file_text(user[0] if user else frames[0])
    text = str(loc)
    return "unknown" if text == "loc(unknown)" else text
