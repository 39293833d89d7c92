"""ONNX frontend: ``onnx`` model -> torch-mlir's ONNX importer -> kiln.

The model is loaded (a path, bytes, or a ``ModelProto``), checked, run
through ONNX shape inference (so the importer sees every intermediate type),
imported as ``torch.operator "onnx.*"`` ops, and converted by
``convert-torch-to-kiln``.  Input dims with a ``dim_param`` become kiln
symbols of that name; ``symbols={"B": (1, 64)}`` gives their ranges, and a
symbol without one gets ``1 <= s <= 2**31-1`` (the report notes it).
Initializers stay dense resource attributes; the conversion reads the small
integer ones (shapes, axes) back from the module so that shape computations
fold.  (Not from the ONNX protos: unnamed constants all sanitize to ``_``,
and MLIR renames the blobs ``_``, ``__1``, ...)
"""

from __future__ import annotations

import logging
import re
import time
import warnings

from .. import progress
from .._mlir import ir
from ..context import make_context
from ..dialects.dims import SYMBOL_MAX
from ..errors import ConversionError, KilnError, ParseError, UnsupportedError
from .names import name_signature
from .onnx_external import attach, read_model
from .report import finish

__all__ = ["import_onnx", "load_model"]

_log = logging.getLogger("kiln.import")

# The oldest default-domain opset whose ops the patterns were written for.
MIN_OPSET = 1


def load_model(model_or_path):
    """``(model, where)``: the ``onnx.ModelProto`` of a path, bytes or a
    ModelProto, with its external data (files beside the model, as
    ``torch.onnx.export(..., dynamo=True)`` writes them) read in; ParseError
    if unreadable, or if an external location leaves the model's directory
    or is missing (see :mod:`kiln.frontends.onnx_external`)."""
    model, where, deferred = read_model(model_or_path)
    attach(model, deferred)
    return model, where


def _opset(model, where) -> int:
    import onnx

    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise UnsupportedError(f"{where}: the model imports no default-domain ONNX opset")
    v = versions[0]
    newest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= v <= newest:
        raise UnsupportedError(f"{where}: ONNX opset {v} is not supported (this importer reads opsets "
                               f"{MIN_OPSET}..{newest})")
    return v


def _symbol_name(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return name if name and not name[0].isdigit() else f"s_{name}"


def _check_symbols(symbols) -> dict:
    """``{name: (min, max)}`` from the user's ``symbols``: a KilnError naming
    the symbol and the value for anything but two integers with
    ``0 <= min <= max`` (``int()`` took ``(1.5, 16.7)`` as ``(1, 16)`` and
    ``True`` as 1; a string was read digit by digit)."""
    import numbers
    from collections.abc import Mapping

    if symbols is None:
        return {}
    if not isinstance(symbols, Mapping):
        raise KilnError(f"symbols must be a dict of name -> (min, max), got {symbols!r}")
    out = {}
    for name, rng in symbols.items():
        if not isinstance(name, str) or not name:
            raise KilnError(f"symbol names must be non-empty strings, got {name!r}")
        try:
            if isinstance(rng, (str, bytes, Mapping)):
                raise TypeError
            lo, hi = rng
        except (TypeError, ValueError):
            raise KilnError(f"symbol '{name}': range must be (min, max), got {rng!r}") from None
        for what, v in (("min", lo), ("max", hi)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise KilnError(f"symbol '{name}': {what} must be an integer, got {v!r} (range {rng!r})")
        lo, hi = int(lo), int(hi)
        if lo > hi:
            raise KilnError(f"symbol '{name}' has min {lo} > max {hi}")
        if lo < 0:
            raise KilnError(f"symbol '{name}' has min {lo} < 0")
        out[name] = (lo, hi)
    return out


# ONNX tensor element types kiln has a dtype for (torch_to_kiln's _DTYPE).
_KILN_ELEM_TYPES = {"FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE", "INT64", "INT32", "INT16", "INT8", "UINT8", "BOOL"}


def _elem_name(elem: int) -> str:
    import onnx

    if elem in onnx.TensorProto.DataType.values():
        return onnx.TensorProto.DataType.Name(elem).lower()
    return f"element type {elem}"


def _type_text(type_proto) -> str:
    """An ONNX type as the ONNX spec writes it: ``seq(tensor(float))``."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        return f"tensor({_elem_name(type_proto.tensor_type.elem_type)})"
    if which == "sparse_tensor_type":
        return f"sparse_tensor({_elem_name(type_proto.sparse_tensor_type.elem_type)})"
    if which == "sequence_type":
        return f"seq({_type_text(type_proto.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({_type_text(type_proto.optional_type.elem_type)})"
    if which == "map_type":
        m = type_proto.map_type
        return f"map({_elem_name(m.key_type)}, {_type_text(m.value_type)})"
    return which or "an unset type"


def _value_kind(type_proto) -> str | None:
    """What kiln lacks to take an ONNX value of ``type_proto`` (``"sequence
    type seq(tensor(float))"``, ``"dtype uint8"``), or None when it is a
    tensor kiln supports (or a tensor of unset element type)."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        elem = type_proto.tensor_type.elem_type
        if elem == 0 or _elem_name(elem).upper() in _KILN_ELEM_TYPES:
            return None
        return f"dtype {_elem_name(elem)}"
    kinds = {"sequence_type": "sequence type", "optional_type": "optional type", "map_type": "map type",
             "sparse_tensor_type": "sparse tensor type"}
    return f"{kinds.get(which, 'type')} {_type_text(type_proto)}"


def _check_value_types(model, where) -> None:
    """UnsupportedError naming the first graph input or output whose type
    kiln lacks (a sequence, an optional, a map, a string or unsigned tensor)."""
    inits = {t.name for t in model.graph.initializer}
    for role, values in (("input", [v for v in model.graph.input if v.name not in inits]),
                         ("output", model.graph.output)):
        for v in values:
            kind = _value_kind(v.type)
            if kind is not None:
                raise UnsupportedError(f"{where}: graph {role} '{v.name}' has {kind}, which kiln does not support")


def _check_node_types(model, where) -> None:
    """UnsupportedError naming the first node (and value) of the main graph
    that makes a value kiln cannot hold: a sequence, map or optional value
    (ONNX shape inference's type for it), or a string tensor (an output, a
    constant attribute or an initializer).  torch-mlir's importer would
    fail on a string constant without naming the type, and the conversion
    spells a sequence in torch's types."""
    import onnx

    string = onnx.TensorProto.STRING
    for t in model.graph.initializer:
        if t.data_type == string:
            raise UnsupportedError(f"{where}: initializer '{t.name}' has type tensor(string), which kiln does not "
                                   f"support")
    types = {v.name: v.type for v in model.graph.value_info}
    for index, node in enumerate(model.graph.node):
        for a in node.attribute:
            tensors = [a.t] if a.type == onnx.AttributeProto.TENSOR else \
                list(a.tensors) if a.type == onnx.AttributeProto.TENSORS else []
            if any(t.data_type == string for t in tensors):
                raise UnsupportedError(f"{where}: {node_label(node, index)} has attribute '{a.name}' of type "
                                       f"tensor(string), which kiln does not support")
        for out in node.output:
            tp = types.get(out) if out else None
            if tp is None:
                continue
            which = tp.WhichOneof("value")
            if which in ("sequence_type", "map_type", "optional_type", "sparse_tensor_type") or \
                    (which == "tensor_type" and tp.tensor_type.elem_type == string):
                raise UnsupportedError(f"{where}: {node_label(node, index)} output '{out}' has "
                                       f"{_value_kind(tp)}, which kiln does not support")


def node_label(node, index: int) -> str:
    """How errors name an ONNX node: ``node 'Mul_3' (Mul)``.

    A node without a name is called by its op type and its index in its
    graph (``Mul_3`` is the graph's fourth node).  The importer gives each op
    a name location of this text, so every diagnostic about an op (a
    verifier, a conversion, a lowering) points at the node, as the torch
    path's ``file:line`` does (the bare node name printed ``loc("")`` for
    the many nodes exporters leave unnamed).
    """
    name = node.name or f"{node.op_type}_{index}"
    return f"node '{name}' ({node.op_type})"


def _label_nodes(graph) -> None:
    """Rename every node of ``graph`` (and of its subgraphs) to its
    :func:`node_label`; node names are only read for locations."""
    import onnx

    for index, node in enumerate(graph.node):
        node.name = node_label(node, index)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _label_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _label_nodes(g)


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _input_dims(model, ranges):
    """``{arg index: dims}`` for the graph inputs (initializers excluded) and
    the symbols they name."""
    inits = {t.name for t in model.graph.initializer}
    arg_dims, named = {}, []
    inputs = [i for i in model.graph.input if i.name not in inits]
    for idx, inp in enumerate(inputs):
        tt = inp.type.tensor_type
        if not tt.HasField("shape"):
            continue
        dims = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(d.dim_value)
            elif d.HasField("dim_param") and d.dim_param:
                name = _symbol_name(d.dim_param)
                dims.append(name)
                if name not in named:
                    named.append(name)
            else:
                name = _symbol_name(f"{inp.name}_{axis}")
                dims.append(name)
                named.append(name)
        arg_dims[idx] = dims
    return arg_dims, named


def _failing_node(tb):
    """The innermost ONNX node torch-mlir's importer was importing in
    traceback ``tb`` (its ``import_node(node)`` frames), or None."""
    node = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "import_node" and hasattr(frame.f_locals.get("node"), "op_type"):
            node = frame.f_locals["node"]
        tb = tb.tb_next
    return node


def import_onnx(model_or_path, symbols=None, fallback=True, *, with_report=False):
    """Import an ONNX model (path, bytes or ``onnx.ModelProto``) into kiln.

    ``symbols`` maps dim_param names to ``(min, max)`` ranges.  Ops kiln
    cannot lower become ``kiln.fallback`` unless ``fallback=False``, which
    raises :class:`~kiln.errors.UnsupportedError` listing them.  Bad input (a
    truncated file, an unreadable opset, ``min > max``) raises a KilnError
    subclass naming the cause.

    Returns the verified kiln ``ir.Module`` (``module.context`` is its
    context, made by ``make_context(torch=True)``); with ``with_report=True``
    returns ``(module, ImportReport)``.
    """
    import onnx
    from torch_mlir.extras import onnx_importer

    ranges = _check_symbols(symbols)
    progress.stage("import", detail="ONNX checker and shape inference")
    start = time.perf_counter()
    # Large initializers stay out of the proto through the checker and shape
    # inference (they serialize it: protobuf's 2 GB limit) until attach().
    model, where, deferred = read_model(model_or_path)
    _opset(model, where)
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        first = str(e).strip().splitlines()[0]
        # An op deprecated at the model's opset (GroupNormalization-18) is
        # still a valid model, one ONNX Runtime runs: kiln's patterns read
        # the op at its own version, so only that checker complaint is let through.
        if "is deprecated in domain_version" not in first:
            raise ParseError(f"{where} fails the ONNX checker: {first}") from None
        _log.warning("%s: %s (imported at its opset's semantics)", where, first)
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:
        raise ParseError(f"{where}: ONNX shape inference failed: {str(e).strip().splitlines()[0]}") from None

    attach(model, deferred)
    _check_value_types(model, where)
    _check_node_types(model, where)
    arg_dims, named = _input_dims(model, ranges)
    unknown = sorted(set(ranges) - set(named))
    if unknown:
        raise KilnError(f"symbols {', '.join(unknown)} are not dim_params of the model's inputs "
                        f"(inputs name: {', '.join(named) or 'none'})")
    symbol_ranges = {n: ranges.get(n, (1, SYMBOL_MAX)) for n in named}
    notes = [f"symbol '{n}' has no range given: 1 <= {n} <= {SYMBOL_MAX}" for n in named if n not in ranges]

    _label_nodes(model.graph)  # a copy: infer_shapes returned a new model
    _log.info("%s read, checked and shape-inferred: %.3f s", where, time.perf_counter() - start)
    progress.stage("import", detail="torch-mlir ONNX importer")
    start = time.perf_counter()
    ctx = make_context(torch=True)
    with ctx, ir.Location.unknown():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                info = onnx_importer.ModelInfo(model)
                mod = info.create_module(context=ctx)
                imp = onnx_importer.NodeImporter.define_function(info.main_graph, mod.operation)
                imp.import_all()
        except Exception as e:
            node = _failing_node(e.__traceback__)
            at = f" at {node.name}" if node is not None else ""
            # The importer's own "unsupported"/"unhandled" error: a feature
            # (a string or complex constant, say) that the import path lacks.
            cls = UnsupportedError if type(e).__name__ == "OnnxImportError" else ConversionError
            raise cls(f"torch-mlir's ONNX importer failed on {where}{at}: {type(e).__name__}: "
                      f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}") from None
        _log.info("torch-mlir ONNX import: %.3f s", time.perf_counter() - start)
        report = finish(mod, fallback=fallback, source=where, notes=notes,
                        arg_dims=arg_dims, symbol_ranges=symbol_ranges, named=named, onnx_model=model)
        inits = {t.name for t in model.graph.initializer}
        name_signature(mod, [i.name for i in model.graph.input if i.name not in inits],
                       [o.name for o in model.graph.output])
    return (mod, report) if with_report else mod
