"""Reading an ONNX model as users have it: one ``.onnx`` file, or one with its
tensors' data in files beside it (``model.onnx`` + ``model.onnx.data``, what
``torch.onnx.export(..., dynamo=True)`` writes), or a ``ModelProto`` in memory.

External data is read from the model's own directory only: a location that
leaves it (an absolute path, a ``..`` part, a symlink pointing out), as
``onnx.checker`` rules, is a :class:`~kiln.errors.ParseError` naming the
tensor and the location, and so is a missing or short data file.

Large tensors are *deferred*: the checker and ONNX shape inference serialize
the model (protobuf's 2 GB limit) and copy it several times, but need no
weights, so the main graph's initializers above :data:`DEFER_BYTES` stay out
of the proto until :func:`attach` puts them back just before torch-mlir's
importer, which reads ``raw_data`` in memory and never serializes the model.
Meanwhile each stands in the graph as a graph input of its type (the
checker wants an initializer's data, or its external file beside the
process's working directory; an input with the same type is what both
passes need).  A ``ModelProto`` given in memory over the protobuf limit has
its large initializers taken out the same way.
"""

from __future__ import annotations

import os
import re

from ..errors import ParseError

__all__ = ["DEFER_BYTES", "PROTO_LIMIT", "attach", "read_model"]

#: Main-graph initializers whose data is larger are kept out of the proto
#: until after the checker and shape inference (small ones, shapes and axes
#: that shape inference's data propagation reads, are loaded first).
DEFER_BYTES = 1 << 16

#: A proto at or above this size cannot be serialized (protobuf's 2 GB limit,
#: less a margin for the rest of the model); in-memory models that large have
#: their big initializers taken out first.
PROTO_LIMIT = (1 << 31) - (1 << 26)

# Bytes per element of the fixed-size ONNX element types (TensorProto.DataType).
_ITEM_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2,
               17: 1, 18: 1, 19: 1, 20: 1}


class Deferred:
    """A main-graph initializer kept out of the proto: its name, element
    type and dims; ``load()`` gives its bytes.  ``stand_in``: whether
    :func:`read_model` added a graph input for it (an IR < 4 model lists
    its initializers as inputs already)."""

    def __init__(self, tensor, data: bytes | None = None, path: str | None = None,
                 offset: int = 0, length: int | None = None):
        self.name, self.data_type, self.dims = tensor.name, tensor.data_type, list(tensor.dims)
        self.data, self.path, self.offset, self.length = data, path, offset, length
        self.stand_in = False

    def load(self) -> bytes:
        """The tensor's raw bytes (read from its file now, when it has one)."""
        if self.data is not None:
            return self.data
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            return f.read(-1 if self.length is None else self.length)


def _tensors(graph, initializers: bool = True):
    """Every TensorProto of ``graph`` and its subgraphs: initializers (sparse
    ones' values and indices too; ``graph``'s own dense ones only with
    ``initializers``) and node attribute tensors."""
    import onnx

    if initializers:
        yield from graph.initializer
    for s in graph.sparse_initializer:
        yield s.values
        yield s.indices
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            elif a.type == onnx.AttributeProto.TENSORS:
                yield from a.tensors
            elif a.type == onnx.AttributeProto.SPARSE_TENSOR:
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            elif a.type == onnx.AttributeProto.GRAPH:
                yield from _tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _tensors(g)


def _all_tensors(model, initializers: bool = True):
    yield from _tensors(model.graph, initializers)
    for fn in model.functions:
        for node in fn.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t


def _is_external(t) -> bool:
    import onnx

    return t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL


def _expected_bytes(t) -> int | None:
    size = _ITEM_BYTES.get(t.data_type)
    if size is None:
        return None
    n = 1
    for d in t.dims:
        n *= d
    if t.data_type in (17, 18, 19, 20):  # 4-bit types: two per byte
        return (n + 1) // 2
    return n * size


def _locate(t, base_dir: str | None, where: str) -> Deferred:
    """Where tensor ``t``'s external data lies, checked: inside ``base_dir``,
    present, long enough."""
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    name = t.name or "<unnamed>"
    if not loc:
        raise ParseError(f"{where}: tensor '{name}' is marked as external data but names no location")
    if base_dir is None:
        raise ParseError(f"{where}: tensor '{name}' keeps its data in the external file '{loc}', but the model "
                         f"was given in memory, with no directory to read that file from: pass the model's path "
                         f"instead (kiln.compile('model.onnx')), or load its data first "
                         f"(onnx.load(path, load_external_data=True))")
    parts = re.split(r"[\\/]", loc)
    if os.path.isabs(loc) or loc[0] in "/\\" or os.path.splitdrive(loc)[0] or ".." in parts:
        raise ParseError(f"{where}: tensor '{name}' names the external data location '{loc}', which leaves "
                         f"the model's directory (locations must be relative paths inside it)")
    path = os.path.join(base_dir, loc)
    root = os.path.realpath(base_dir or ".")
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise ParseError(f"{where}: tensor '{name}' names the external data location '{loc}', a link that "
                         f"leads out of the model's directory (to {real})")
    if not os.path.isfile(real):
        raise ParseError(f"{where}: tensor '{name}' keeps its data in '{loc}', which is missing "
                         f"(looked for {path})")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise ParseError(f"{where}: tensor '{name}' has an external data offset or length that is not an "
                         f"integer ({info.get('offset')!r}, {info.get('length')!r})") from None
    if offset < 0 or (length is not None and length < 0):
        raise ParseError(f"{where}: tensor '{name}' has a negative external data offset or length")
    size = os.path.getsize(real)
    need = _expected_bytes(t)
    if length is None:
        length = max(size - offset, 0)
    if offset + length > size:
        raise ParseError(f"{where}: tensor '{name}' wants bytes {offset}..{offset + length} of '{loc}', "
                         f"which holds only {size} bytes (truncated?)")
    if need is not None and length != need:
        raise ParseError(f"{where}: tensor '{name}' of shape {list(t.dims)} needs {need} bytes, but its "
                         f"external data in '{loc}' has {length}")
    return Deferred(t, path=real, offset=offset, length=length)


def _set_raw(t, data: bytes) -> None:
    import onnx

    t.raw_data = data
    t.data_location = onnx.TensorProto.DEFAULT
    del t.external_data[:]


def _parse(data: bytes, where: str):
    import onnx

    try:
        model = onnx.load_from_string(data)
    except Exception as e:
        raise ParseError(f"{where} is not a valid ONNX model (truncated or corrupt): {type(e).__name__}: {e}") \
            from None
    return model


def read_model(model_or_path, defer_bytes: int = DEFER_BYTES):
    """``(model, where, deferred)``: the ModelProto of a path, bytes or a
    ModelProto, with every external tensor's data read in except the main
    graph's large initializers, which ``deferred`` (name -> :class:`Deferred`)
    holds for :func:`attach` (graph inputs of their types stand in for them).
    A ModelProto given is not changed (a copy is, where one is needed)."""
    import onnx

    base_dir, deferred = None, {}
    if isinstance(model_or_path, onnx.ModelProto):
        model, where = model_or_path, "<model>"
        big = model.ByteSize() >= PROTO_LIMIT
        if big or any(_is_external(t) for t in _all_tensors(model)):
            model, deferred = _copy_without_big(model, defer_bytes if big else None)
    else:
        if isinstance(model_or_path, (bytes, bytearray, memoryview)):
            data, where = bytes(model_or_path), "<bytes>"
        else:
            try:
                where = os.fspath(model_or_path)
            except TypeError:
                raise ParseError(f"cannot read an ONNX model from a {type(model_or_path).__name__} (give a path, "
                                 f"bytes or an onnx.ModelProto)") from None
            try:
                with open(where, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise ParseError(f"cannot read ONNX model {where}: {e.strerror}") from None
            base_dir = os.path.dirname(os.path.abspath(where))
        model = _parse(data, where)
    graph = model.graph
    for i in reversed(range(len(graph.initializer))):
        t = graph.initializer[i]
        if not _is_external(t):
            continue
        d = _locate(t, base_dir, where)
        if d.length > defer_bytes:
            deferred[t.name] = d
            del graph.initializer[i]
        else:
            _set_raw(t, d.load())
    for t in _all_tensors(model, initializers=False):
        if _is_external(t):
            _set_raw(t, _locate(t, base_dir, where).load())
    if not graph.node and not graph.output:
        raise ParseError(f"{where} is not a valid ONNX model: it has no graph")
    listed = {v.name for v in graph.input}
    for d in deferred.values():
        if d.name not in listed:
            stand_in = graph.input.add()
            stand_in.name = d.name
            stand_in.type.tensor_type.elem_type = d.data_type
            shape = stand_in.type.tensor_type.shape
            for n in d.dims:
                shape.dim.add().dim_value = n
            d.stand_in = True
    return model, where, deferred


def _copy_fields(src, dst, skip: str) -> None:
    """Copy every set field of message ``src`` but ``skip`` into ``dst``."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if hasattr(value, "CopyFrom"):  # a message
            getattr(dst, field.name).CopyFrom(value)
        elif hasattr(value, "extend"):  # a repeated field
            getattr(dst, field.name).extend(value)
        else:
            setattr(dst, field.name, value)


def _copy_without_big(model, defer_bytes: int | None):
    """``(copy, deferred)``: a copy of ``model``; with ``defer_bytes``, its
    main-graph initializers with more raw bytes are left out of the copy
    (their bytes in ``deferred``), so that the copy stays under the protobuf
    limit and the big tensors are never copied."""
    import onnx

    out = onnx.ModelProto()
    if defer_bytes is None:
        out.CopyFrom(model)
        return out, {}
    _copy_fields(model, out, "graph")
    _copy_fields(model.graph, out.graph, "initializer")
    deferred = {}
    for t in model.graph.initializer:
        if len(t.raw_data) > defer_bytes:
            deferred[t.name] = Deferred(t, data=t.raw_data)
        else:
            out.graph.initializer.add().CopyFrom(t)
    return out, deferred


def attach(model, deferred: dict) -> None:
    """Put the ``deferred`` initializers back into ``model`` (the one
    :func:`read_model` gave, or a copy such as shape inference's result):
    their stand-in graph inputs go, the initializers come with their data."""
    import onnx

    if not deferred:
        return
    graph = model.graph
    for i in reversed(range(len(graph.input))):
        d = deferred.get(graph.input[i].name)
        if d is not None and d.stand_in:
            del graph.input[i]
    for d in deferred.values():
        t = graph.initializer.add()
        t.name, t.data_type = d.name, d.data_type
        t.dims.extend(d.dims)
        t.data_location = onnx.TensorProto.DEFAULT
        t.raw_data = d.load()
