"""The bytes of ``dense_resource`` elements attributes, read without printing
the module where kiln can.

The bindings give no accessor for a resource blob's data: reading it means
printing the attribute's op and decoding the hex (0.3 s for the 32 MiB of
the bench MLP's weights).  A frontend that creates a blob from a numpy array
records it here (:func:`register_resource`), and :func:`resource_bytes`
returns that array; other blobs (parsed from text, made by torch-mlir's
ONNX importer) are read from a print of the op alone.

The record is safe by construction: it lives exactly as long as the
attribute's context (a weak key on the ``ir.Context``), and within a context
a ``dense_resource`` attribute's text (blob name and type) names one blob
whose bytes never change (MLIR renames a second blob of the same name, see
docs/NOTES.md).
"""

from __future__ import annotations

import binascii
import threading
import weakref

import numpy as np

from .._mlir import ir

__all__ = ["register_resource", "resource_bytes"]

# ir.Context -> {attribute text: the blob's bytes (flat, read-only uint8)}.
_BLOBS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def register_resource(attr: ir.Attribute, data: np.ndarray) -> None:
    """Record that the ``dense_resource`` attribute ``attr`` holds the bytes of
    ``data`` (a C-contiguous array the caller made the blob from and will not
    change)."""
    if not data.flags.c_contiguous:
        raise ValueError("register_resource needs a C-contiguous array")
    raw = data.reshape(-1).view(np.uint8)
    raw.flags.writeable = False
    key = str(attr)
    with _lock:
        _BLOBS.setdefault(attr.context, {})[key] = raw


def resource_bytes(attr: ir.Attribute, op: ir.Operation | None = None) -> np.ndarray | None:
    """The bytes of the blob of the ``dense_resource`` attribute ``attr``
    (without the alignment prefix MLIR prints), as a read-only uint8 array.

    A blob not recorded by :func:`register_resource` is read from the printed
    form of ``op`` (the op holding ``attr``, cloned into a scratch module so
    that only its blob is printed); None if there is no ``op`` or no blob.
    """
    with _lock:
        table = _BLOBS.get(attr.context)
        raw = table.get(str(attr)) if table is not None else None
    if raw is not None or op is None:
        return raw
    return _printed_blob(op)


def _printed_blob(op: ir.Operation) -> np.ndarray | None:
    scratch = ir.Module.create(op.location)
    op.clone(ir.InsertionPoint(scratch.body))
    text = scratch.operation.get_asm(binary=True)
    at = text.find(b"dialect_resources")
    if at < 0:
        return None
    # The one blob: `name: "0x<hex>"`; str.find runs at memchr speed where a
    # regex over the hex did not.
    start = text.find(b'"0x', at)
    end = text.find(b'"', start + 3) if start >= 0 else -1
    if end < 0:
        return None
    try:
        raw = binascii.unhexlify(text[start + 3:end])[4:]  # the first 4 bytes are the alignment
    except binascii.Error:
        return None
    out = np.frombuffer(raw, dtype=np.uint8)
    return out
