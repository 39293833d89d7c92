"""Import-time evaluation of ONNX ops whose inputs are all known.

ONNX function expansions (``LayerNormalization``'s, the window functions',
``CenterCropPad``'s) and the shape code exporters emit compute shapes, axes
and pads with ordinary ops (``Shape``, ``Gather``, ``Neg``, ``Sub``,
``ConstantOfShape``, ``Range``, ``Where``, ``Max`` ...) over values known at
import time (:class:`~.driver.Known`: constants, frozen inputs, static
shapes).  Rather than one folding rule per op, the conversion driver asks
:func:`fold_known` first for every ``onnx.*`` op:

- **static**: every operand is a known array.  The node is rebuilt from its
  op name and its ``torch.onnx.*`` attributes (typed by the op's schema) as a
  one-node model and run by ONNX's reference implementation
  (``onnx.reference.ReferenceEvaluator``): the result is a ``Known`` again,
  so the next op folds too, and a shape operand that needs a constant gets
  one.  Results larger than :data:`FOLD_LIMIT` elements, random ops and ops
  with subgraphs are left to their patterns.
- **symbolic**: some operand holds symbolic dims (``Shape`` of a
  ``[B, L, 64]`` tensor is ``[B, L, 64]``).  The shape ops exporters chain
  (``Gather``, ``Slice``, ``Concat``, ``Unsqueeze``, ``Squeeze``,
  ``Reshape``, ``Cast``, integer arithmetic, comparisons and ``Where`` /
  ``Max`` that the symbols' ranges decide) are evaluated on numpy object
  arrays of :class:`~kiln.dialects.dims.Dim`, so ``Reshape``'s target comes
  out as ``[B, L, 4, 16]``: the result dims are expressions of the real
  symbols, never fresh ones.  Anything else (or a result of rank > 1)
  returns None and the op's pattern runs.

:func:`symbolic_tensor` is the way back: a symbolic shape tensor that a kiln
op needs as data (``Cast`` to float for a ``1/sqrt(L)`` scale) becomes a
tensor computed at run time from the dims (the last entry of a ``kiln.range``
of ``d + 1`` elements per symbolic element).
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import numpy as np
import sympy

from ..._mlir import ir
from ...dialects.dims import Dim, symbol
from ...errors import KilnError
from .driver import Decline, Known

__all__ = ["FOLD_LIMIT", "fold_known", "symbolic_tensor"]

#: Elements a folded result may have; a larger one is left to the op's pattern
#: (a ``ConstantOfShape`` of a big static shape stays a splat + expand).
FOLD_LIMIT = 1 << 16

# Ops never evaluated here: random values, subgraphs, and ops whose patterns
# already take known operands (ConstantOfShape: a splat constant, not a dense
# array of its value; a known integer shape folds there too).
_NEVER = frozenset({
    "Constant", "ConstantOfShape", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
    "Multinomial", "Bernoulli", "Dropout", "If", "Loop", "Scan",
})

# kiln dtype -> numpy dtype of a folded value (bf16 is not folded).
_NP = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i64": np.int64, "i32": np.int32,
       "i16": np.int16, "i8": np.int8, "ui8": np.uint8, "i1": np.bool_}

_EVALUATORS: OrderedDict = OrderedDict()
_MAX_EVALUATORS = 256


def fold_known(cx):
    """The folded results of the ``onnx.*`` op of ``cx`` (a tuple with one
    :class:`Known` per result) when its operands are all known, else None."""
    op_type = cx.name.removeprefix("onnx.")
    if "." in op_type or op_type in _NEVER or len(cx.op.regions) or not cx.num_operands:
        return None
    try:
        vals = [cx.value(i) for i in range(cx.num_operands)]
    except Decline:
        return None
    if not any(isinstance(v, Known) for v in vals) or not all(v is None or isinstance(v, Known) for v in vals):
        return None
    try:
        dtypes = [cx.result_dtype(j) for j in range(len(cx.op.results))]
    except Decline:
        return None
    if any(d not in _NP for d in dtypes) or _too_big(cx):
        return None
    if any(v is not None and v.is_symbolic for v in vals):
        return _fold_symbolic(cx, op_type, vals, dtypes)
    return _fold_static(cx, op_type, vals, dtypes)


def _too_big(cx) -> bool:
    """True when a result's declared static size exceeds :data:`FOLD_LIMIT`."""
    for r in cx.op.results:
        try:
            dims, _ = cx.conv.types.parse(r.type)
        except Decline:
            return True
        if all(d.is_static for d in dims) and int(np.prod([d.value for d in dims], dtype=np.float64)) > FOLD_LIMIT:
            return True
    return False


def _operand_shape(cx, i) -> list | None:
    """The static dims of operand ``i``'s torch type, or None."""
    try:
        dims, _ = cx.conv.types.parse(cx.op.operands[i].type)
    except Decline:
        return None
    return [d.value for d in dims] if all(d.is_static for d in dims) else None


def _array(cx, i, k: Known) -> np.ndarray:
    """Known ``k`` (operand ``i``) as a numpy array of its dtype and shape."""
    arr = k.array()
    arr = arr.astype(_NP.get(k.dtype, arr.dtype))
    shape = _operand_shape(cx, i)
    if shape is not None and int(np.prod(shape)) == arr.size:
        return arr.reshape(shape)
    if k.rank0 and arr.size == 1:
        return arr.reshape(())
    return arr


# ----------------------------------------------------------------------------
# Static: ONNX's reference implementation
# ----------------------------------------------------------------------------


def _fold_static(cx, op_type, vals, dtypes):
    try:
        feeds = {f"x{i}": _array(cx, i, v) for i, v in enumerate(vals) if v is not None}
    except (Decline, KilnError, ValueError, TypeError):
        return None
    if any(a.dtype == np.float16 for a in feeds.values()):
        return None  # the reference kernels compute some f16 ops in f32: let kiln do it
    if _result_size(op_type, [None if v is None else feeds[f"x{i}"] for i, v in enumerate(vals)]) > FOLD_LIMIT:
        return None
    try:
        node = _node(cx, op_type, vals)
    except _NoFold:
        return None
    try:
        outs = _evaluate(node, cx.opset, feeds)
    except Exception:  # the reference implementation rejects it: the pattern will say why
        return None
    if len(outs) < len(dtypes):
        return None
    results = []
    for arr, dtype in zip(outs, dtypes):
        arr = np.asarray(arr)
        if arr.dtype == object or arr.size > FOLD_LIMIT:
            return None
        results.append(Known(arr.astype(_NP[dtype]), dtype))
    return tuple(results)


def _result_size(op_type, args) -> float:
    """An estimate of the result size of the ops whose size comes from their
    operands' values (a huge ConstantOfShape is never evaluated); 0 otherwise."""
    try:
        if op_type == "ConstantOfShape":
            return float(np.prod(args[0].astype(np.float64)))
        if op_type == "Expand":
            n = max(args[0].ndim, args[1].size)
            a = [1] * (n - args[0].ndim) + list(args[0].shape)
            b = [1] * (n - args[1].size) + [float(v) for v in args[1].reshape(-1)]
            return float(np.prod([max(x, y) for x, y in zip(a, b)]))
        if op_type == "Tile":
            return float(args[0].size) * float(np.prod(args[1].astype(np.float64)))
        if op_type == "Range":
            start, limit, delta = (float(a.reshape(-1)[0]) for a in args[:3])
            return max(0.0, np.ceil((limit - start) / delta)) if delta else 0.0
    except (AttributeError, IndexError, TypeError, ValueError):
        return 0.0
    return 0.0


class _NoFold(Exception):
    """An attribute the one-node model cannot carry."""


def _node(cx, op_type, vals):
    """The op as an ONNX ``NodeProto`` over inputs ``x<i>``, outputs ``y<j>``."""
    import onnx
    from onnx import helper

    try:
        schema = onnx.defs.get_schema(op_type, max(cx.opset, 1), "")
    except Exception:
        raise _NoFold from None
    attrs = []
    for a in cx.op.attributes:
        key = a if isinstance(a, str) else a.name
        if not key.startswith("torch.onnx."):
            continue
        name = key[len("torch.onnx."):]
        spec = schema.attributes.get(name)
        if spec is None:
            raise _NoFold
        attrs.append(_attribute(cx, name, spec.type, cx.op.attributes[key]))
    inputs = [f"x{i}" if v is not None else "" for i, v in enumerate(vals)]
    while inputs and not inputs[-1]:
        inputs.pop()
    node = helper.make_node(op_type, inputs, [f"y{j}" for j in range(len(cx.op.results))])
    node.attribute.extend(attrs)
    return node


def _attribute(cx, name, kind, a):
    """An ``AttributeProto`` of schema type ``kind`` from the importer's attribute."""
    import onnx
    from onnx import helper, numpy_helper

    kinds = onnx.AttributeProto
    if kind in (kinds.TENSOR, kinds.SPARSE_TENSOR):
        arr = _dense(cx, a)
        if arr is None or kind == kinds.SPARSE_TENSOR:
            raise _NoFold
        return helper.make_attribute(name, numpy_helper.from_array(arr))
    value = _plain(a)
    if kind == kinds.INT:
        return helper.make_attribute(name, int(value), attr_type=kinds.INT)
    if kind == kinds.FLOAT:
        return helper.make_attribute(name, float(value), attr_type=kinds.FLOAT)
    if kind == kinds.STRING:
        return helper.make_attribute(name, str(value), attr_type=kinds.STRING)
    if kind == kinds.INTS:
        return helper.make_attribute(name, [int(x) for x in value], attr_type=kinds.INTS)
    if kind == kinds.FLOATS:
        return helper.make_attribute(name, [float(x) for x in value], attr_type=kinds.FLOATS)
    if kind == kinds.STRINGS:
        return helper.make_attribute(name, [str(x) for x in value], attr_type=kinds.STRINGS)
    raise _NoFold


def _plain(a):
    if isinstance(a, ir.ArrayAttr):
        return [_plain(x) for x in a]
    for cls in (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr, ir.StringAttr):
        if isinstance(a, cls):
            return a.value
    raise _NoFold


_ELEMENT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "si64": np.int64, "i64": np.int64,
            "si32": np.int32, "i32": np.int32, "si16": np.int16, "si8": np.int8, "ui8": np.uint8, "i1": np.bool_}


def _dense(cx, a) -> np.ndarray | None:
    """The data of a tensor attribute (dense or dense resource), or None."""
    try:
        t = ir.RankedTensorType(a.type)
    except (ValueError, TypeError):
        return None
    np_type = _ELEMENT.get(str(t.element_type))
    if np_type is None:
        return None
    arr = cx.conv.resource(a)
    if arr is None and isinstance(a, ir.DenseElementsAttr):
        if a.is_splat:
            v = a.get_splat_value()
            scalar = v.value if hasattr(v, "value") else float(v)
            arr = np.full(t.shape, scalar)
        else:
            try:
                arr = np.array(a)
            except Exception:
                return None
    if arr is None:
        return None
    return np.asarray(arr).astype(np_type).reshape(t.shape)


def _evaluate(node, opset, feeds) -> list:
    """Run ``node`` on ``feeds`` with ONNX's reference implementation (the
    evaluator of a node signature is built once and cached)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    types = tuple((k, str(v.dtype), v.ndim) for k, v in feeds.items())
    key = (node.SerializeToString(), opset, types)
    ev = _EVALUATORS.get(key)
    if ev is None:
        inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), None)
                  for k, v in feeds.items()]
        outputs = [helper.make_tensor_value_info(o, 0, None) for o in node.output]
        graph = helper.make_graph([node], "fold", inputs, outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 1))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ev = ReferenceEvaluator(model)
        _EVALUATORS[key] = ev
        if len(_EVALUATORS) > _MAX_EVALUATORS:
            _EVALUATORS.popitem(last=False)
    else:
        _EVALUATORS.move_to_end(key)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return list(ev.run(None, feeds))


# ----------------------------------------------------------------------------
# Symbolic: shape arithmetic over Dims
# ----------------------------------------------------------------------------


class _Unknown(Exception):
    """The symbolic value cannot be decided at import (the pattern takes over)."""


def _norm(x):
    """An element of a symbolic array: a Python int, or a symbolic Dim."""
    if isinstance(x, Dim):
        if x.is_unknown:
            raise _Unknown
        return x.value if x.is_static else x
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    raise _Unknown


def _as_dim(x) -> Dim:
    return x if isinstance(x, Dim) else Dim(sympy.Integer(int(x)))


def _objects(cx, i, k: Known) -> np.ndarray:
    """Known ``k`` as an object array of ints and Dims, in its ONNX shape."""
    if isinstance(k.data, list):
        arr = np.empty(len(k.data), dtype=object)
        arr[:] = [_norm(x) for x in k.data]
        if k.rank0 and arr.size == 1:
            return arr.reshape(())
    else:
        arr = np.asarray(k.array())
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = [_norm(x) for x in arr.reshape(-1).tolist()]
        arr = out
    shape = _operand_shape(cx, i)
    if shape is not None and int(np.prod(shape)) == arr.size:
        arr = arr.reshape(shape)
    return arr


def _sign(cx, d) -> int | None:
    """-1, 0 or 1 when the symbols' ranges decide the sign of ``d``, else None."""
    d = _norm(d)
    if not isinstance(d, Dim):
        return (d > 0) - (d < 0)
    shift = {}
    for name in d.symbols:
        lo = cx.conv.symbols.get(name, (0, None))[0]
        shift[symbol(name)] = symbol(name) + lo  # the shifted symbol is >= 0 again
    e = d.expr.xreplace(shift)
    if e.is_zero:
        return 0
    if e.is_positive:
        return 1
    if e.is_negative:
        return -1
    return None


def _arith(fn):
    """``fn`` on two elements (ints or Dims); a Dim result back to an int when static."""

    def apply(x, y):
        x, y = _norm(x), _norm(y)
        if not isinstance(x, Dim) and not isinstance(y, Dim):
            return fn(x, y)
        try:
            return _norm(fn(_as_dim(x), y))
        except KilnError:
            raise _Unknown from None

    return apply


_sub = _arith(lambda a, b: a - b)
_mul = _arith(lambda a, b: a * b)


def _binary_fns(cx) -> dict:
    """Element functions of the binary ops, deciding signs by ``cx``'s symbol ranges."""

    def sign_of_difference(x, y):
        s = _sign(cx, _sub(x, y))
        if s is None:
            raise _Unknown
        return s

    def div(x, y):
        # ONNX integer Div truncates toward zero; a symbolic divisor is not a dim expression.
        x, y = _norm(x), _norm(y)
        if isinstance(y, Dim) or y == 0:
            raise _Unknown
        if not isinstance(x, Dim):
            q = abs(x) // abs(y)
            return q if (x >= 0) == (y > 0) else -q
        if _sign(cx, x) not in (0, 1):
            raise _Unknown  # floor and truncation agree only for x >= 0
        q = x // abs(y)
        return _norm(q if y > 0 else Dim(-q.expr))

    def compare(kind):
        def apply(x, y):
            s = sign_of_difference(x, y)
            return {"eq": s == 0, "lt": s < 0, "le": s <= 0, "gt": s > 0, "ge": s >= 0}[kind]

        return apply

    def extreme(largest):
        def apply(x, y):
            return _norm(x) if (sign_of_difference(x, y) >= 0) == largest else _norm(y)

        return apply

    return {
        "Add": _arith(lambda a, b: a + b), "Sub": _sub, "Mul": _mul, "Div": div,
        "Equal": compare("eq"), "Less": compare("lt"), "LessOrEqual": compare("le"), "Greater": compare("gt"),
        "GreaterOrEqual": compare("ge"), "Max": extreme(True), "Min": extreme(False),
    }


def _abs(cx, x):
    s = _sign(cx, x)
    if s is None:
        raise _Unknown
    return _norm(x) if s >= 0 else _mul(x, -1)


def _elementwise(fn, *arrays):
    return np.frompyfunc(fn, len(arrays), 1)(*arrays)


def _ints(a) -> list[int]:
    """A static operand (axes, indices, starts) as Python ints."""
    flat = [_norm(x) for x in np.asarray(a, dtype=object).reshape(-1)]
    if any(isinstance(x, Dim) for x in flat):
        raise _Unknown
    return flat


def _axes(cx, args):
    """Squeeze / Unsqueeze axes: the attribute before opset 13, the input since."""
    if cx.opset >= 13:
        return _ints(args[1]) if len(args) > 1 and args[1] is not None else None
    return cx.attr("axes", None)


def _slice(cx, args):
    x = args[0]
    if cx.opset >= 10:
        starts, ends = _ints(args[1]), _ints(args[2])
        axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else list(range(len(starts)))
        steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else [1] * len(starts)
    else:
        starts, ends = cx.attr("starts"), cx.attr("ends")
        axes = cx.attr("axes", None) or list(range(len(starts)))
        steps = [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise _Unknown
        # Python slicing clamps like ONNX Slice; an end below -size with a
        # negative step means "through index 0" (None).
        index[a % x.ndim] = slice(s, None if (st < 0 and e < -x.shape[a % x.ndim]) else e, st)
    return [x[tuple(index)]]


def _gather(cx, args):
    x, idx = args
    axis = cx.attr("axis", 0) % max(x.ndim, 1)
    ids = np.asarray(_ints(idx), dtype=np.int64).reshape(np.shape(idx))
    size = x.shape[axis]
    ids = np.where(ids < 0, ids + size, ids)
    return [np.take(x, ids, axis=axis)]


def _unsqueeze(cx, args):
    axes = _axes(cx, args)
    out = args[0]
    n = out.ndim + len(axes)
    for a in sorted(a % n for a in axes):
        out = np.expand_dims(out, a)
    return [out]


def _squeeze(cx, args):
    axes = _axes(cx, args)
    x = args[0]
    if axes is None:
        axes = [i for i, s in enumerate(x.shape) if s == 1]
    return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


def _reshape(cx, args):
    x = args[0]
    shape = _ints(args[1]) if cx.opset >= 5 else cx.attr("shape")
    if not cx.attr("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x.reshape(shape)]


def _concat(cx, args):
    return [np.concatenate([a for a in args if a is not None], axis=cx.attr("axis", 0))]


def _cast(cx, args, dtypes):
    if dtypes[0] == "i1":
        return [_elementwise(lambda v: not _binary_fns(cx)["Equal"](v, 0), args[0])]
    if dtypes[0] not in ("i64", "i32", "i16", "i8"):
        raise _Unknown  # a symbolic value as a float: computed at run time
    return [args[0]]


def _where(cx, args):
    cond = args[0]
    flat = [_norm(x) for x in cond.reshape(-1)]
    if any(isinstance(x, Dim) for x in flat):
        raise _Unknown
    return [np.where(np.asarray(flat, dtype=bool).reshape(cond.shape), args[1], args[2])]


def _reduce(kind):
    since = 13 if kind == "sum" else 18  # axes became an input

    def apply(cx, args):
        x = args[0]
        if cx.opset >= since:
            axes = _ints(args[1]) if len(args) > 1 and args[1] is not None else None
        else:
            axes = cx.attr("axes", None)
        if not axes:
            if cx.attr("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(x.ndim))
        fn = _mul if kind == "prod" else _arith(lambda a, b: a + b)
        out = x
        for a in sorted((a % x.ndim for a in axes), reverse=True):
            moved = np.moveaxis(out, a, 0)
            acc = np.full(moved.shape[1:], 1 if kind == "prod" else 0, dtype=object)
            for k in range(moved.shape[0]):
                acc = _elementwise(fn, acc, moved[k])
            out = np.asarray(acc, dtype=object)
            if cx.attr("keepdims", 1):
                out = np.expand_dims(out, a)
        return [out]

    return apply


def _expand(cx, args):
    shape = _ints(args[1])
    x = args[0]
    n = max(x.ndim, len(shape))
    src = (1,) * (n - x.ndim) + x.shape
    shape = [1] * (n - len(shape)) + shape
    target = [s if t == 1 else t for s, t in zip(src, shape)]
    return [np.broadcast_to(x.reshape(src), target)]


def _shape(cx, args):
    start, end = cx.attr("start", 0), cx.attr("end", None)
    shape = list(args[0].shape)
    return [np.asarray(shape[start:end] if end is not None else shape[start:], dtype=object)]


_STRUCTURAL = {
    "Identity": lambda cx, args: [args[0]], "Shape": _shape,
    "Size": lambda cx, args: [np.asarray(args[0].size, dtype=object)], "Slice": _slice, "Gather": _gather, "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze, "Reshape": _reshape, "Concat": _concat, "Where": _where, "Expand": _expand,
    "ReduceProd": _reduce("prod"), "ReduceSum": _reduce("sum"),
}


def _fold_symbolic(cx, op_type, vals, dtypes):
    if any(d not in ("i64", "i32", "i16", "i8", "i1") for d in dtypes):
        return None
    binary = _binary_fns(cx)
    try:
        args = [None if v is None else _objects(cx, i, v) for i, v in enumerate(vals)]
        present = [a for a in args if a is not None]
        if op_type in ("Max", "Min", "Sum"):
            fn = binary.get(op_type) or binary["Add"]
            out = present[0]
            for a in present[1:]:
                out = _elementwise(fn, out, a)
            outs = [out]
        elif op_type in binary:
            if len(present) != 2:
                return None
            outs = [_elementwise(binary[op_type], *present)]
        elif op_type == "Neg":
            outs = [_elementwise(lambda v: _mul(v, -1), args[0])]
        elif op_type == "Abs":
            outs = [_elementwise(lambda v: _abs(cx, v), args[0])]
        elif op_type == "Cast":
            outs = _cast(cx, args, dtypes)
        elif op_type in _STRUCTURAL:
            outs = _STRUCTURAL[op_type](cx, args)
        else:
            return None
        outs = [np.asarray(o, dtype=object) for o in outs]
        if any(o.ndim > 1 and _has_symbols(o) for o in outs):
            return None  # a Known holds symbolic values in at most one dim
        return tuple(_known(o, dtype) for o, dtype in zip(outs, dtypes))
    except (_Unknown, KilnError, ValueError, IndexError, TypeError):
        return None


def _has_symbols(a) -> bool:
    return any(isinstance(x, Dim) for x in np.asarray(a, dtype=object).reshape(-1))


def _known(arr: np.ndarray, dtype: str) -> Known:
    """A result object array as a Known: a numpy array when static, else a
    list of ints and Dims (``rank0`` for a scalar)."""
    flat = [_norm(x) for x in arr.reshape(-1)]
    if not any(isinstance(x, Dim) for x in flat):
        return Known(np.asarray(flat, dtype=_NP[dtype]).reshape(arr.shape), dtype)
    return Known([x if isinstance(x, Dim) else x for x in flat], dtype, rank0=arr.ndim == 0)


# ----------------------------------------------------------------------------
# Symbolic values as run-time tensors
# ----------------------------------------------------------------------------


def symbolic_tensor(cx, k: Known) -> ir.Value:
    """A kiln tensor holding the values of the symbolic shape tensor ``k``:
    each symbolic element ``d`` is the last entry of ``range(d + 1)``,
    computed at run time; static elements are constants."""
    from ...dialects.kiln.data import SLICE_END
    from .aten import concat, tensor_type

    dtype = k.dtype if k.dtype in ("i64", "i32") else "i64"
    parts = []
    for x in k.ints():
        x = _norm(x)  # a static element may be negative (-1 in a Reshape target)
        if not isinstance(x, Dim):
            parts.append(cx.const(x, dtype, [1]))
            continue
        # The last entry of range(x + 1), not a reduction: two reductions fused
        # into one CPU kernel returned the same value (seen in onnx_resize).
        n = x + 1
        r = cx.build("range", shape=[n], start=0, step=1, results=[tensor_type([n], dtype)])
        parts.append(cx.build("slice", r, starts=[-1], ends=[SLICE_END], axes=[0], steps=[1]))
    out = parts[0] if len(parts) == 1 else concat(cx, parts, 0)
    if k.rank0 and len(parts) == 1:
        out = cx.build("reshape", out, shape=[])
    return cx.cast(out, k.dtype) if k.dtype != dtype else out
