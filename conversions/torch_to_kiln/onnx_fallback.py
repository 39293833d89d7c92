"""ONNX nodes kiln cannot convert become ``kiln.fallback`` ops run by ONNX Runtime.

An ``onnx.*`` op without a kiln pattern (or whose pattern declines) has no
PyTorch twin in ``torch.ops``, so the PyTorch fallback cannot run it.  It
becomes a ``kiln.fallback`` whose payload is a serialized one-node ONNX model
(:mod:`kiln.runtime.ort_fallback` runs it):

- the node is the model's own ``NodeProto`` when the frontend handed the
  model over (:class:`OnnxNodes`: matched by its location, the node label
  :func:`~kiln.frontends.onnx_import.node_label` gave it, and by order among
  nodes of the same label), with all its attributes (subgraphs included);
  otherwise it is rebuilt from the ``torch.onnx.*`` attributes the importer
  kept (ints, floats, strings, their lists, dense tensors);
- the model's opsets, IR version and local functions;
- one graph input per operand that is a runtime tensor, typed with kiln's
  dims (a symbolic dim as its ``dim_param`` text, ``"B*16"``); operands known
  at import time (axes, ``k``, shapes) are initializers, except shape
  tensors with symbolic values, which are fed per call from the binding;
  omitted optional inputs stay omitted;
- one graph output per result the node produces.

The result types come from the op's declared result types: a dim the
importer left ``?`` is taken from ONNX shape inference of the one-node model
over kiln's input dims (dims as ``dim_param`` expressions of kiln's symbols),
else from the original model's inferred type when that names a kiln symbol.
A dim that neither gives is a function of the data, not of the input dims:
kiln preallocates every kernel's outputs, so such a node is an
UnsupportedError at import (and the report says so, as compile would).

When ONNX Runtime is installed, the one-node model is loaded once here, so a
node ONNX Runtime cannot run either (an op or a type combination it lacks)
is an UnsupportedError at import, not at the first call.
"""

from __future__ import annotations

import base64
import json
import re
from collections import defaultdict

import numpy as np

from ..._mlir import ir
from ...dialects.dims import SYMBOL_MAX, Dim, dim, evaluate
from ...dialects.kiln import MAX_VARIADIC, FallbackOp, create_op, tensor_info
from ...errors import DimError, KilnError, UnsupportedError
from ...runtime.dtypes import NUMPY_DTYPES
from ...runtime.ort_fallback import IO_ATTR, MODEL_ATTR
from .driver import Decline, Known, describe_type, is_tensor_type

__all__ = ["OnnxNodes", "onnx_fallback"]

# kiln dtype -> ONNX TensorProto element type name.
_ONNX_OF_KILN = {"f32": "FLOAT", "f16": "FLOAT16", "bf16": "BFLOAT16", "f64": "DOUBLE", "i64": "INT64",
                 "i32": "INT32", "i16": "INT16", "i8": "INT8", "ui8": "UINT8", "i1": "BOOL"}
# torch vtensor element type -> (ONNX element type name, numpy dtype) for initializers.
_ONNX_OF_TORCH = {"f32": ("FLOAT", np.float32), "f16": ("FLOAT16", np.float16), "f64": ("DOUBLE", np.float64),
                  "si64": ("INT64", np.int64), "si32": ("INT32", np.int32), "si16": ("INT16", np.int16),
                  "si8": ("INT8", np.int8), "ui8": ("UINT8", np.uint8), "ui16": ("UINT16", np.uint16),
                  "ui32": ("UINT32", np.uint32), "ui64": ("UINT64", np.uint64), "i1": ("BOOL", np.bool_),
                  "i64": ("INT64", np.int64), "i32": ("INT32", np.int32)}
_VTENSOR = re.compile(r"^!torch\.vtensor<\[(.*)\],(\w+)>$")


def _onnxruntime():
    """The onnxruntime module, or None when it is not installed (import needs it
    only to check that it can run the node; running needs it, see the runtime)."""
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime


def _symbol_name(text: str) -> str:
    # The frontend's sanitizing of a dim_param into a kiln symbol name.
    name = re.sub(r"\W", "_", text)
    return name if name and not name[0].isdigit() else f"s_{name}"


class OnnxNodes:
    """The nodes of the ONNX model an import came from, found by location.

    ``model`` is the model the importer read (node names already replaced by
    their labels, shape inference done)."""

    def __init__(self, model):
        self.model = model
        self.by_label = defaultdict(list)
        for node in model.graph.node:
            self.by_label[node.name].append(node)
        g = model.graph
        self.types = {v.name: v.type for v in [*g.input, *g.value_info, *g.output]}

    def find(self, op):
        """The ``NodeProto`` of the ``torch.operator`` ``op``, or None."""
        label = getattr(op.location, "name_str", None)
        nodes = self.by_label.get(label) if label is not None else None
        if not nodes:
            return None
        if len(nodes) == 1:
            return nodes[0]
        # Several nodes share the label: the importer emits them in graph order.
        k, loc = 0, str(op.location)
        for o in op.block.operations:
            o = o.operation
            if o == op:
                break
            if o.name == "torch.operator" and str(o.location) == loc:
                k += 1
        return nodes[k] if k < len(nodes) else None


def _where(name, op) -> str:
    from ...locations import location_text

    return f"{name} at {location_text(op.location)}"


def _node_from_attrs(op, name: str, opset: int):
    """A ``NodeProto`` rebuilt from the importer's ``torch.onnx.*`` attributes
    (when the ONNX model itself is not at hand), with its opsets."""
    import onnx
    from onnx import helper

    if len(op.regions):
        raise UnsupportedError(f"{_where(name, op)}: a node with subgraphs falls back to ONNX Runtime only when "
                               "imported from its ONNX model")
    attrs = {}
    for a in op.attributes:
        key = a if isinstance(a, str) else a.name
        if not key.startswith("torch.onnx."):
            continue
        attrs[key[len("torch.onnx."):]] = _attr_value(op.attributes[key], name, op, key)
    node = helper.make_node(name.removeprefix("onnx."), [f"x{i}" for i in range(len(op.operands))],
                            [f"y{j}" for j in range(len(op.results))], **attrs)
    return node, [helper.make_opsetid("", opset or onnx.defs.onnx_opset_version())], None, []


def _attr_value(a, name, op, key):
    if isinstance(a, ir.ArrayAttr):
        return [_attr_value(x, name, op, key) for x in a]
    if isinstance(a, ir.BoolAttr):
        return int(a.value)
    if isinstance(a, ir.IntegerAttr):
        return int(a.value)
    if isinstance(a, ir.FloatAttr):
        return float(a.value)
    if isinstance(a, ir.StringAttr):
        return a.value
    if isinstance(a, ir.DenseElementsAttr):
        from onnx import numpy_helper

        t = ir.RankedTensorType(a.type)
        arr = np.array(a) if not a.is_splat else np.full(t.shape, np.array(a).reshape(-1)[0])
        return numpy_helper.from_array(np.asarray(arr).reshape(t.shape))
    raise UnsupportedError(f"{_where(name, op)}: attribute {key} ({a}) cannot be rebuilt as an ONNX attribute "
                           "without the ONNX model")


def _outer_refs(graph, scope=()) -> set:
    """Names a subgraph reads from outside itself (outer-scope values)."""
    import onnx

    defined = set(scope) | {v.name for v in graph.input} | {t.name for t in graph.initializer}
    used = set()
    for node in graph.node:
        used.update(n for n in node.input if n and n not in defined)
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for g in subs:
                used.update(_outer_refs(g, defined))
        defined.update(node.output)
    used.update(o.name for o in graph.output if o.name not in defined)
    return used


def _value_info(name: str, elem: str, dims):
    from onnx import TensorProto, helper

    shape = [d if isinstance(d, int) else str(d) for d in dims] if dims is not None else None
    return helper.make_tensor_value_info(name, getattr(TensorProto, elem), shape)


def _dims_of(d_list) -> list:
    """kiln Dims as ONNX dims: static ones as ints, symbolic ones as their text."""
    return [None if d.is_unknown else d.value if d.is_static else str(d) for d in d_list]


def _torch_parts(t) -> tuple[list, str] | None:
    m = _VTENSOR.match(str(t))
    if not m:
        return None
    sizes, dtype = m.groups()
    return ([None if s == "?" else int(s) for s in sizes.split(",")] if sizes else []), dtype


def _known_input(conv, val, operand, name, op, i):
    """``("init", TensorProto)`` or ``("feed", dims, shape, dtype)`` for an
    operand whose value is known at import time (or symbolic)."""
    from onnx import numpy_helper

    parts = _torch_parts(operand.type)
    if parts is None or parts[1] not in _ONNX_OF_TORCH:
        raise UnsupportedError(f"{_where(name, op)}: operand #{i} has {describe_type(operand.type)}")
    sizes, tdtype = parts
    np_dtype = _ONNX_OF_TORCH[tdtype][1]
    if isinstance(val, Known):
        data, rank0 = val.data, val.rank0
    else:  # a folded Python value: a scalar, a Dim or a list of those
        data, rank0 = val, not isinstance(val, list)
        data = data if isinstance(data, list) else [data]
    flat = list(data) if isinstance(data, list) else None
    if flat is not None and any(isinstance(x, Dim) and not x.is_static for x in flat):
        shape = tuple(sizes) if None not in sizes and int(np.prod(sizes)) == len(flat) else (
            () if rank0 and len(flat) == 1 else (len(flat),))
        if tdtype not in ("si64", "si32", "i64", "i32"):
            raise UnsupportedError(f"{_where(name, op)}: operand #{i} holds symbolic values in a {tdtype} tensor")
        return ("feed", [str(x) for x in flat], shape, "i64" if "64" in tdtype else "i32")
    if flat is not None:
        arr = np.asarray([x.value if isinstance(x, Dim) else x for x in flat])
    else:
        arr = np.asarray(data)
    arr = arr.astype(np_dtype)
    if None not in sizes and int(np.prod(sizes)) == arr.size:
        arr = arr.reshape(sizes)
    elif rank0 and arr.size == 1:
        arr = arr.reshape(())
    return ("init", numpy_helper.from_array(arr, f"in{i}"))


def _infer(model) -> dict:
    """``{output name: TensorShapeProto}`` by ONNX shape inference; {} when it fails
    (inference is a help, not a requirement)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # onnx raises several types (InferenceError, ValidationError, RuntimeError)
        return {}
    return {o.name: o.type.tensor_type.shape for o in inferred.graph.output if o.type.tensor_type.HasField("shape")}


def _shape_dims(shape, rename=False) -> list:
    """The dims of a TensorShapeProto: ints, dim_param texts, or None (unknown)."""
    out = []
    for d in shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            out.append(_symbol_name(d.dim_param) if rename else d.dim_param)
        else:
            out.append(None)
    return out


# Symbol values of the concrete inference samples: distinct primes, so that
# an output dim equal to an input dim's value at every sample is that dim.
_PRIMES = (11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)


class _Samples:
    """Shape inference of the one-node model at concrete symbol values: the
    output dims ONNX cannot express over ``dim_param`` names (TopK's over a
    symbolic axis) but can compute from sizes, matched back to kiln dims."""

    def __init__(self, conv, make, outs, inputs):
        self.conv, self.make, self.outs = conv, make, outs
        self.candidates = []
        for _, _, dims, values in inputs:
            for d in [*dims, *(dim(v) for v in values or ())]:
                if not d.is_static and not d.is_unknown and d not in self.candidates:
                    self.candidates.append(d)
        for d in list(self.candidates):
            for s in sorted(d.symbols):
                if dim(s) not in self.candidates:
                    self.candidates.append(dim(s))
        self._runs = None

    def runs(self) -> list:
        if self._runs is None:
            self._runs = []
            syms = sorted({s for d in self.candidates for s in d.symbols})
            # Three prime samples to match dims by, and each range's ends: a
            # dim right at the primes but not at a minimum (x[-3:] is 3 rows
            # only while L >= 3) fails verify().
            for k in range(5):
                binding = {}
                for i, s in enumerate(syms):
                    lo, hi = self.conv.symbols.get(s, (1, SYMBOL_MAX))
                    sample = lo if k == 3 else hi if k == 4 else _PRIMES[(i * 3 + k) % len(_PRIMES)]
                    binding[s] = min(max(sample, lo), hi)
                try:
                    shapes = _infer(self.make(self.outs, binding))
                except KilnError:  # a dim not positive at these values
                    continue
                self._runs.append((binding, {n: _shape_dims(v) for n, v in shapes.items()}))
        return self._runs

    def verify(self, name: str, dims: list, where: str, j: int) -> None:
        """UnsupportedError unless ``dims`` (from whichever source) give the
        dims ONNX infers at every sample, the symbols' range ends included."""
        for binding, shapes in self.runs():
            got = shapes.get(name)
            if got is None or len(got) != len(dims):
                continue
            for a, (d, v) in enumerate(zip(dims, got)):
                if isinstance(v, int) and set(d.symbols) <= set(binding) and evaluate(d, binding) != v:
                    at = ", ".join(f"{k}={x}" for k, x in sorted(binding.items()))
                    raise UnsupportedError(
                        f"{where}: dim #{a} of result #{j} is {v} at {at}, not {d}: its size is no kiln dim "
                        "expression of the input dims, and kiln preallocates the outputs of an ONNX Runtime fallback")

    def dims(self, name: str) -> list | None:
        """Per output dim: the kiln Dim matching every sample, or None."""
        runs = [(b, shapes.get(name)) for b, shapes in self.runs()]
        runs = [(b, s) for b, s in runs if s is not None]
        if len(runs) < 2 or len({len(s) for _, s in runs}) != 1:
            return None
        out = []
        for a in range(len(runs[0][1])):
            values = [s[a] for _, s in runs]
            if any(not isinstance(v, int) for v in values):
                out.append(None)
            elif len(set(values)) == 1:
                out.append(dim(values[0]))
            else:
                out.append(next((c for c in self.candidates
                                 if all(evaluate(c, b) == v for (b, _), v in zip(runs, values))), None))
        return out


def _resolve_dims(conv, base, sources, sampled, where, reason, j) -> list[Dim]:
    """The dims of result ``j``: the torch type's static dims, else shape
    inference's over kiln's input dims, else the original model's when it
    names a kiln symbol, else inference at concrete sizes matched to an
    input dim; UnsupportedError for a dim none of them gives."""
    out = []
    for a, b in enumerate(base):
        if b is not None:
            out.append(dim(b))
            continue
        found = None
        for source in sources:
            if source is None or len(source) != len(base) or source[a] is None:
                continue
            d = source[a]
            if isinstance(d, int):
                found = dim(d)
                break
            try:
                cand = dim(d)
            except DimError:
                continue
            if set(cand.symbols) <= set(conv.symbols):
                found = cand
                break
        if found is None:
            concrete = sampled()
            if concrete is not None and len(concrete) == len(base):
                found = concrete[a]
        if found is None:
            raise UnsupportedError(
                f"{where}: {reason}; dim #{a} of result #{j} is not a function of the input dims (a data-dependent "
                "shape): kiln preallocates the outputs of an ONNX Runtime fallback, so it cannot run this node")
        out.append(found)
    return out


def onnx_fallback(conv, op, name: str, reason: str) -> None:
    """Replace the ``onnx.*`` op ``op`` (which ``conv``, the
    :class:`~kiln.conversions.torch_to_kiln.driver.TorchToKiln` driver,
    could not convert) with a ``kiln.fallback`` carrying its one-node model."""
    import onnx
    from onnx import helper

    where = _where(name, op)
    nodes = getattr(conv, "onnx_nodes", None)
    source = nodes.find(op) if nodes is not None else None
    if source is not None:
        model = nodes.model
        node = onnx.NodeProto()
        node.CopyFrom(source)
        opsets, ir_version, functions = list(model.opset_import), model.ir_version, list(model.functions)
        declared_types = nodes.types
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            refs = set().union(*(_outer_refs(g) for g in subs)) if subs else set()
            if refs:
                raise UnsupportedError(f"{where}: {reason}, and its subgraph '{a.name}' reads outer-scope values "
                                       f"({', '.join(sorted(refs)[:5])}), so it cannot run as a node of its own")
    else:
        node, opsets, ir_version, functions = _node_from_attrs(op, name, conv.opset)
        declared_types = {}
    if len(node.input) != len(op.operands) or len(node.output) != len(op.results):
        raise UnsupportedError(f"{where}: the ONNX node has {len(node.input)} inputs / {len(node.output)} outputs, "
                               f"the imported op {len(op.operands)} / {len(op.results)}")
    original_outputs = list(node.output)

    operands, feeds, inputs, inits = [], [], [], []  # inputs: (name, element type, dims or None, feed dims)
    for i, operand in enumerate(op.operands):
        val = conv.values.get(operand)
        if node.input[i] == "" or val is None:
            node.input[i] = ""
            continue
        pname = f"in{i}"
        node.input[i] = pname
        if isinstance(val, ir.Value):
            info = tensor_info(val.type)
            dtype = str(info.dtype)
            if dtype not in NUMPY_DTYPES:
                raise UnsupportedError(f"{where}: {reason}; operand #{i} is {dtype}, which cannot pass through "
                                       "ONNX Runtime's Python API")
            feeds.append({"name": pname, "operand": len(operands)})
            operands.append(val)
            inputs.append((pname, _ONNX_OF_KILN[dtype], list(info.dims), None))
            continue
        kind = _known_input(conv, val, operand, name, op, i)
        if kind[0] == "init":
            inits.append(kind[1])
        else:
            _, dims, shape, dtype = kind
            feeds.append({"name": pname, "dims": dims, "shape": list(shape), "dtype": dtype})
            inputs.append((pname, "INT64" if dtype == "i64" else "INT32", [dim(s) for s in shape], dims))

    # Result types: static dims from the importer's types, the rest from shape inference.
    parts, outs = [], []
    for j, r in enumerate(op.results):
        if original_outputs[j] == "" or str(r.type) == "!torch.none":  # an output the node omits
            node.output[j] = ""
            parts.append(None)
            continue
        if not is_tensor_type(r.type):
            raise UnsupportedError(f"{where}: result #{j} has {describe_type(r.type)}, which kiln does not support "
                                   f"(kiln values are tensors; {reason})")
        try:
            base, dtype = conv.types.parse(r.type)
        except Decline as e:
            raise UnsupportedError(f"{where}: result #{j}: {e}") from None
        if dtype not in NUMPY_DTYPES:
            raise UnsupportedError(f"{where}: {reason}; result #{j} is {dtype}, which cannot pass through "
                                   "ONNX Runtime's Python API")
        node.output[j] = f"out{j}"
        parts.append((_torch_parts(r.type)[0], dtype))
        outs.append(_value_info(f"out{j}", _ONNX_OF_KILN[dtype], None))

    def make(outputs, binding=None):
        """The one-node model; with ``binding``, every dim and fed value concrete."""
        graph_inputs, graph_inits = [], list(inits)
        for pname, elem, dims, values in inputs:
            if binding is None:
                graph_inputs.append(_value_info(pname, elem, _dims_of(dims)))
            elif values is None:
                graph_inputs.append(_value_info(pname, elem, [evaluate(d, binding) for d in dims]))
            else:
                from onnx import numpy_helper

                arr = np.asarray([evaluate(v, binding) for v in values], dtype=np.int64 if elem == "INT64"
                                 else np.int32).reshape([d.value for d in dims])
                graph_inits.append(numpy_helper.from_array(arr, pname))
        graph = helper.make_graph([node], f"kiln_fallback_{node.op_type}", graph_inputs, outputs,
                                  initializer=graph_inits)
        m = helper.make_model(graph, opset_imports=opsets, functions=functions)
        m.ir_version = ir_version or m.ir_version
        return m

    inferred = {k: _shape_dims(v) for k, v in _infer(make(outs)).items()}
    sampled = _Samples(conv, make, outs, inputs)
    results, result_types, final_outs = [], [], []
    for j, p in enumerate(parts):
        if p is None:  # an output the node omits: no kiln result
            continue
        sizes, dtype = p
        declared = declared_types.get(original_outputs[j])
        declared = _shape_dims(declared.tensor_type.shape, rename=True) if declared is not None and (
            declared.tensor_type.HasField("shape")) else None
        dims = _resolve_dims(conv, sizes, [inferred.get(f"out{j}"), declared], lambda j=j: sampled.dims(f"out{j}"),
                             where, reason, j)
        sampled.verify(f"out{j}", dims, where, j)
        results.append(f"out{j}")
        result_types.append(conv.types.convert(op.results[j].type, dims))
        final_outs.append(_value_info(f"out{j}", _ONNX_OF_KILN[dtype], _dims_of(dims)))
    payload = make(final_outs).SerializeToString()

    ort = _onnxruntime()
    if ort is not None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.log_severity_level = 4
        try:
            ort.InferenceSession(payload, so, providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT's own exception types
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UnsupportedError(f"{where}: {reason}, and ONNX Runtime cannot run it either: {first}") from None
    if len(operands) > MAX_VARIADIC or len(result_types) > FallbackOp.MAX_RESULTS:
        raise UnsupportedError(f"{where}: too many operands/results for kiln.fallback ({reason})")
    attrs = {MODEL_ATTR: ir.StringAttr.get(base64.b64encode(payload).decode("ascii")),
             IO_ATTR: ir.StringAttr.get(json.dumps({"feeds": feeds, "results": results}))}
    fb = create_op("fallback", operands, results=result_types, loc=op.location,
                   attrs={"op_name": name, "attrs": ir.DictAttr.get(attrs)})
    made = iter(fb.operation.results)
    for r, p in zip(op.results, parts):
        conv.values[r] = None if p is None else next(made)
