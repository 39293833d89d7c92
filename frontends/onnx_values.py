"""ONNX graph inputs whose *values* decide shapes, axes or pads (TensorRT's shape tensors).

An ONNX model may take ``Reshape``'s target shape, ``Slice``'s starts, a
``Reduce*``'s axes or ``Pad``'s pads as graph inputs.  kiln's kernels are
compiled for shapes, not for values, so such an input is found here before
import and handled in one of two ways (see :mod:`kiln.runtime.value_inputs`
for the call side):

- a **shape input**: a 1-D integer input used only as the size operand of
  ops whose result dims may be symbolic (``ConstantOfShape``, ``Expand``,
  ``Tile``).
  :func:`carrier_model` replaces it by a *carrier*: an input of the same name
  whose dims are fresh symbols (``shape_0``, ``shape_1``, ...) and whose
  ``Shape`` stands in for the values.  The model is compiled once; each call
  passes a zero-stride carrier whose shape is the input's values, so the
  runtime binds and range-checks those symbols like any other;
- a **specialized input**: every other one (axes, pads, starts, ``k``,
  ``training_mode``...).  :func:`freeze` turns it into an initializer holding
  the call's values, and the runtime compiles one model per distinct value
  (cached, bounded, reported).

:func:`value_inputs` finds the inputs: every graph input from which a
value operand (:data:`VALUE_OPERANDS`) is computed, following the graph
backwards through any op except those that read only their input's shape
(``Shape``, ``Size``).
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["SHAPE_OPERANDS", "VALUE_OPERANDS", "broadcast_fixed", "carrier_model", "dim_params", "freeze", "graph_inputs",
           "input_specs", "read_graph", "shape_inputs", "symbol_names", "value_inputs", "zero_valued"]

#: ONNX op type -> the operand positions whose values (not shapes) the op
#: needs to know its result's shape or semantics.
VALUE_OPERANDS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4), "Pad": (1, 2, 3), "Split": (1,), "Squeeze": (1,), "Unsqueeze": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,),
    "Trilu": (1,), "Dropout": (1, 2), "Resize": (1, 2, 3), "Upsample": (1,), "TopK": (1,), "OneHot": (1,),
    "CumSum": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2), "DFT": (1, 2), "STFT": (1, 3),
    "BlackmanWindow": (0,), "HannWindow": (0,), "HammingWindow": (0,), "MelWeightMatrix": (0, 1, 2, 3, 4),
    "NonMaxSuppression": (2, 3, 4), "Compress": (1,),
}

#: Operand positions whose values kiln takes as symbolic dims (any value >= 1
#: gives the same kernels): a shape input may feed only these.
SHAPE_OPERANDS = {"ConstantOfShape": (0,), "Expand": (1,), "Tile": (1,), "Reshape": (1,), "Slice": (1, 2)}

# Ops that read only their input's shape: a value input is not traced through them.
_SHAPE_ONLY = {"Shape", "Size"}

_INT_TYPES = {6, 7}  # TensorProto INT32, INT64


def graph_inputs(model) -> list:
    """The graph inputs that are not initializers (the model's call arguments), in order."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def read_graph(source):
    """The ``ModelProto`` of a ModelProto, bytes or path, without its external
    data (what :func:`value_inputs` needs; a path is read without the weights)."""
    import os

    import onnx

    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray)):
        return onnx.load_from_string(bytes(source))
    return onnx.load(os.fspath(source), load_external_data=False)


def value_inputs(model) -> list[str]:
    """Names of the graph inputs whose values some op needs at compile time, in input order."""
    graph = model.graph
    inputs = [i.name for i in graph_inputs(model)]
    if not inputs:
        return []
    producer = {out: n for n in graph.node for out in n.output if out}
    wanted, seen = set(), set()
    stack = []
    for n in graph.node:
        for k in VALUE_OPERANDS.get(n.op_type, ()):
            if k < len(n.input) and n.input[k]:
                stack.append(n.input[k])
    names = set(inputs)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in names:
            wanted.add(name)
            continue
        node = producer.get(name)
        if node is None or node.op_type in _SHAPE_ONLY:
            continue
        stack.extend(i for i in node.input if i)
    return [n for n in inputs if n in wanted]


def _static_length(vi) -> int | None:
    """The length of a 1-D tensor value info with a static dim, else None."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape") or len(tt.shape.dim) != 1:
        return None
    d = tt.shape.dim[0]
    return d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None


def shape_inputs(model, candidates) -> list[str]:
    """Those of ``candidates`` that can be shape inputs: 1-D integer inputs of
    static length used only as :data:`SHAPE_OPERANDS` (and not a graph output)."""
    by_name = {i.name: i for i in graph_inputs(model)}
    outputs = {o.name for o in model.graph.output}
    out = []
    for name in candidates:
        vi = by_name.get(name)
        if vi is None or vi.type.tensor_type.elem_type not in _INT_TYPES or _static_length(vi) is None:
            continue
        if name in outputs:
            continue
        uses = _uses(model, name)
        if uses and all(k in SHAPE_OPERANDS.get(op, ()) for op, k in uses):
            out.append(name)
    return out


def zero_valued(model, names) -> list[str]:
    """Those shape inputs in ``names`` whose every value may be 0 in the
    compiled model: inputs used only as ``Slice`` starts / ends (a slice from
    0, or an empty one), unlike sizes, where 0 is a zero-size tensor that a
    specialization serves."""
    out = []
    for name in names:
        uses = _uses(model, name)
        if uses and all(op == "Slice" and k in (1, 2) for op, k in uses):
            out.append(name)
    return out


def _uses(model, name: str) -> list[tuple[str, int]]:
    """``(op type, operand position)`` of every use of the value ``name``."""
    return [(n.op_type, k) for n in model.graph.node for k, i in enumerate(n.input) if i == name]


def _sanitize(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return name if name and not name[0].isdigit() else f"s_{name}"


def symbol_names(model, names) -> dict[str, tuple[str, ...]]:
    """``{input: (symbol per value)}``: ``shape`` of length 3 -> ``shape_0,
    shape_1, shape_2`` (suffixed where a dim_param already has that name)."""
    taken = set()
    for vi in list(model.graph.input) + list(model.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                taken.add(_sanitize(d.dim_param))
    by_name = {i.name: i for i in graph_inputs(model)}
    out = {}
    for name in names:
        syms = []
        for k in range(_static_length(by_name[name])):
            base = s = f"{_sanitize(name)}_{k}"
            n = 1
            while s in taken:
                s, n = f"{base}_{n}", n + 1
            taken.add(s)
            syms.append(s)
        out[name] = tuple(syms)
    return out


def _copy(model):
    """A copy of ``model`` whose unnamed nodes are named as the importer
    labels them (``Reshape_0``), so nodes added here do not shift the labels."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for index, node in enumerate(m.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{index}"
    return m


def freeze(model, values: dict):
    """A copy of ``model`` with the graph inputs in ``values`` (name -> numpy
    array) turned into initializers holding those values."""
    from onnx import helper, numpy_helper

    m = _copy(model)
    if 0 < m.ir_version < 4:
        # IR < 4 wants every initializer listed as a graph input, and a listed
        # input would be overridable (and clash with a Constant node's output):
        # IR 4 only drops that rule, so the frozen copy is IR 4.
        m.ir_version = 4
    keep = [i for i in m.graph.input if i.name not in values]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    consts = []
    for name, arr in values.items():
        arr = np.array(arr, copy=True, order="C")  # keeps rank 0 (ascontiguousarray makes it 1-D)
        if arr.dtype == np.float32 and arr.ndim <= 1 and arr.size <= 64:
            # A float scalar (Range's start, Pad's value, Dropout's ratio) as a
            # Constant node: the conversion folds those, not float initializers.
            attr = {"value_float": float(arr)} if arr.ndim == 0 else {"value_floats": arr.tolist()}
            consts.append(helper.make_node("Constant", [], [name], name=f"{name}__frozen", **attr))
        else:
            m.graph.initializer.append(numpy_helper.from_array(arr, name))
    if consts:
        rest = list(m.graph.node)
        del m.graph.node[:]
        m.graph.node.extend(consts + rest)
    return m


def broadcast_fixed(model, names) -> dict[str, dict[int, int]]:
    """``{Expand node name: {value index: d}}``: where an Expand of shape
    input in ``names`` aligns a value with a static dim ``d != 1`` of its
    input.  ONNX allows only 1 or ``d`` there and the result has ``d``:
    :func:`carrier_model` puts 1 in the symbol's place (so the kernels stay
    valid for every value) and the runtime checks the value is 1 or ``d``."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - no shapes: no fixed dims (those Expands are specialized)
        return {}
    shapes = {t.name: list(t.dims) for t in inferred.graph.initializer}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    lengths = {i.name: _static_length(i) for i in graph_inputs(model) if i.name in names}
    out = {}
    for index, node in enumerate(model.graph.node):
        if node.op_type != "Expand" or len(node.input) < 2 or node.input[1] not in lengths:
            continue
        src, n = shapes.get(node.input[0]), lengths[node.input[1]]
        if src is None:
            continue
        fixed = {k: src[k - n + len(src)] for k in range(n)
                 if 0 <= k - n + len(src) and src[k - n + len(src)] not in (None, 1)}
        if fixed:
            out[node.name or f"{node.op_type}_{index}"] = fixed
    return out


def carrier_model(model, symbols: dict, fixed: dict | None = None, pins: dict | None = None):
    """A copy of ``model`` where each shape input ``name`` (``symbols[name]``
    its symbols) is a bool input of the same name with those symbols as dims,
    and its uses read ``Shape(name)`` instead (see the module docstring);
    ``fixed`` (:func:`broadcast_fixed`) gives the Expands that read 1 in
    place of some values; ``pins`` (``{name: {value index: value}}``) values
    the symbols do not take (Reshape's 0 and -1, a clamped Slice end) that
    every use reads as constants, the carrier holding 1 there."""
    import onnx
    from onnx import helper

    m = _copy(model)
    nodes = []
    for name, syms in symbols.items():
        value = f"{name}__values"
        pinned = (pins or {}).get(name, {})
        for node in m.graph.node:
            fix = (fixed or {}).get(node.name, {}) if node.op_type == "Expand" else {}
            consts = {**dict.fromkeys(fix, 1), **pinned}
            for k, i in enumerate(node.input):
                if i == name and consts:
                    node.input[k] = _masked(nodes, value, len(syms), consts, node.name)
                elif i == name:
                    node.input[k] = value
        nodes.insert(0, helper.make_node("Shape", [name], [value], name=f"{name}__shape"))
        dims = [1 if k in pinned else s for k, s in enumerate(syms)]
        for vi in m.graph.input:
            if vi.name == name:
                vi.CopyFrom(helper.make_tensor_value_info(name, onnx.TensorProto.BOOL, dims))
    # Value infos of the replaced input (from an earlier shape inference) would now be wrong.
    keep = [vi for vi in m.graph.value_info if vi.name not in symbols]
    del m.graph.value_info[:]
    m.graph.value_info.extend(keep)
    rest = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(nodes + rest)
    return m


def _masked(nodes: list, value: str, n: int, consts: dict, label: str) -> str:
    """``Concat`` of the ``n`` values of ``value``, ``consts[k]`` in place of
    value ``k``: appended to ``nodes``; returns its output's name."""
    from onnx import helper

    parts = []
    for k in range(n):
        out = f"{value}__{label}__{k}"
        if k in consts:
            nodes.append(helper.make_node("Constant", [], [out], value_ints=[int(consts[k])]))
        else:
            nodes.append(helper.make_node("Constant", [], [out + "_i"], value_ints=[k]))
            nodes.append(helper.make_node("Gather", [value, out + "_i"], [out]))
        parts.append(out)
    nodes.append(helper.make_node("Concat", parts, [f"{value}__{label}"], axis=0))
    return f"{value}__{label}"


def dim_params(model) -> set[str]:
    """The (sanitized) dim_param names of ``model``'s call inputs."""
    out = set()
    for vi in graph_inputs(model):
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                out.add(_sanitize(d.dim_param))
    return out


# ONNX element type -> kiln dtype name.
_KILN_DTYPES = {1: "f32", 10: "f16", 16: "bf16", 11: "f64", 7: "i64", 6: "i32", 5: "i16", 3: "i8", 9: "i1"}


def input_specs(model) -> list:
    """The call inputs as :class:`~kiln.runtime.contract.InputSpec` (dims as
    the graph declares them: a dim_param or an unnamed dim is a symbol, named
    as the importer names it); an input kiln has no dtype for is left out."""
    from ..runtime.contract import InputSpec

    specs = []
    for vi in graph_inputs(model):
        tt = vi.type.tensor_type
        dtype = _KILN_DTYPES.get(tt.elem_type)
        if dtype is None or not tt.HasField("shape"):
            continue
        dims = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(d.dim_value)
            else:
                dims.append(_sanitize(d.dim_param) if d.dim_param else _sanitize(f"{vi.name}_{axis}"))
        specs.append(InputSpec.make(vi.name, dims, dtype))
    return specs
