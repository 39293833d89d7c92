"""Data-movement ops (reshape, transpose, concat, slice, gather, expand, pad),
constants, symbols and the fallback op."""

# No `from __future__ import annotations`: the ext DSL reads annotations as objects.

from ..._mlir import ext, ir
from ...errors import VerifyError
from ..dims import Dim, dim, shape_text, symbol
from .base import ATTR, MAX_VARIADIC, KilnOp, TensorInfo, TensorType, is_integer, optional_fields, tensor_info
from .shapes import broadcast_dims, norm_axis, product, same_dtype

# Slice ends at or past this value mean "to the end of the axis".
SLICE_END = 2**62


class ReshapeOp(KilnOp, name="reshape", traits=[ext.Pure]):
    """Reshape to the dims in ``shape`` (symbols and expressions allowed); the
    element counts must be provably equal, or, with ``checked``, are compared
    when the symbols are bound (a target of run-time values: an ONNX shape
    input), see :func:`checked_reshapes`.

    ``%r = "kiln.reshape"(%x) {shape = ["B*L", 16]} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B*L", 16], f32>``
    """

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"shape": ATTR.dims(), "checked": ATTR.bool(default=False)}

    def shape(self, operands, attrs):
        (x,) = operands
        target = attrs["shape"]
        if any(d.is_unknown for d in target):
            raise VerifyError("attribute 'shape' must not contain '?'")
        src, dst = product(x.dims), product(target)
        if attrs["checked"] and not src.is_unknown and not _unequal(src, dst):
            return [TensorInfo(tuple(target), x.dtype)]  # decided per call: see checked_reshapes
        if not src.is_unknown and src != dst:
            raise VerifyError(
                f"cannot reshape {shape_text(x.dims)} ({src} elements) to "
                f"{shape_text(target)} ({dst} elements)"
            )
        return [TensorInfo(tuple(target), x.dtype)]


def _unequal(a: Dim, b: Dim) -> bool:
    """Whether ``a != b`` for every positive value of their symbols (as sympy
    proves it: ``12*B`` and ``24*B`` are, ``12*B`` and ``s0*s1`` are not)."""
    import sympy

    e = (a - b).expr
    return e.subs({s: sympy.Symbol(s.name, positive=True, integer=True) for s in e.free_symbols}).is_zero is False


class TransposeOp(KilnOp, name="transpose", traits=[ext.Pure]):
    """Permute dims: result dim ``i`` is input dim ``perm[i]``.

    ``%r = "kiln.transpose"(%x) {perm = array<i64: 1, 0>} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<[16, "B"], f32>``
    """

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"perm": ATTR.ints()}

    def shape(self, operands, attrs):
        (x,) = operands
        perm = attrs["perm"]
        if sorted(perm) != list(range(x.rank)):
            raise VerifyError(f"attribute 'perm' {perm} is not a permutation of {x.rank} dims")
        return [TensorInfo(tuple(x.dims[p] for p in perm), x.dtype)]


class ConcatOp(KilnOp, name="concat", traits=[ext.Pure]):
    """Concatenate up to 16 tensors along ``axis``; other dims must agree.

    ``%r = "kiln.concat"(%a, %b) {axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, ...>} : (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", "L+1"], f32>``
    """

    # Heterogeneous variadic operands: see MAX_VARIADIC.
    __annotations__ = {"res": ext.Result[TensorType], **optional_fields("input", MAX_VARIADIC, "operand")}
    locals().update(dict.fromkeys(optional_fields("input", MAX_VARIADIC, "operand")))
    ATTRS = {"axis": ATTR.int()}

    def shape(self, operands, attrs):
        if not operands:
            raise VerifyError("needs at least one operand")
        first = operands[0]
        dtype = same_dtype(operands)
        axis = norm_axis(attrs["axis"], first.rank)
        total = dim(0)
        for i, o in enumerate(operands):
            if o.rank != first.rank:
                raise VerifyError(f"operand #{i} has rank {o.rank}, operand #0 has rank {first.rank}")
            for k, (a, b) in enumerate(zip(first.dims, o.dims)):
                if k != axis and not (a.is_unknown or b.is_unknown or a == b):
                    raise VerifyError(f"operand #{i} dim {k} is {b}, operand #0 has {a}")
            total = total + o.dims[axis]
        dims = list(first.dims)
        dims[axis] = total
        return [TensorInfo(tuple(dims), dtype)]


def _slice_extent(size: Dim, start: int, end: int, step: int, axis: int) -> Dim:
    if step == 0:
        raise VerifyError(f"slice step on axis {axis} is 0")
    if size.is_static:
        n = size.value
        return dim(len(range(n)[slice(start, end if end < SLICE_END else None, step)]))
    if step < 0:
        raise VerifyError(f"a negative step on axis {axis} needs a static dim, got {size}")
    lo = start if start >= 0 else size + start
    hi = size if end >= SLICE_END else (end if end >= 0 else size + end)
    return (dim(hi) - lo + (step - 1)) // step


class SliceOp(KilnOp, name="slice", traits=[ext.Pure]):
    """Strided slice with numpy semantics on each listed axis.

    ``starts``/``ends``/``steps``/``axes`` have one entry per sliced axis;
    negative indices count from the end, and an end of 2**62 or more means
    "to the end".

    ``%r = "kiln.slice"(%x) {starts = array<i64: 1>, ends = array<i64: 4611686018427387904>, steps = array<i64: 1>, axes = array<i64: 1>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L-1"], f32>``
    """

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {
        "starts": ATTR.ints(),
        "ends": ATTR.ints(),
        "axes": ATTR.ints(),
        "steps": ATTR.ints(optional=True),
    }

    def shape(self, operands, attrs):
        (x,) = operands
        starts, ends, axes = attrs["starts"], attrs["ends"], attrs["axes"]
        steps = attrs["steps"] if attrs["steps"] is not None else [1] * len(axes)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise VerifyError("attributes 'starts', 'ends', 'axes' and 'steps' must have the same length")
        dims = list(x.dims)
        seen = set()
        for s, e, a, st in zip(starts, ends, axes, steps):
            a = norm_axis(a, x.rank)
            if a in seen:
                raise VerifyError(f"axis {a} is sliced twice")
            seen.add(a)
            dims[a] = _slice_extent(dims[a], s, e, st, a)
        return [TensorInfo(tuple(dims), x.dtype)]


def _require_index_dtype(indices: TensorInfo) -> None:
    if not is_integer(indices.dtype) or str(indices.dtype) == "i1":
        raise VerifyError(f"indices must have an integer dtype, got {indices.dtype}")


class GatherOp(KilnOp, name="gather", traits=[ext.Pure]):
    """Take entries of ``data`` along ``axis`` at integer ``indices``
    (``numpy.take``): the result dims are ``data[:axis] + indices + data[axis+1:]``.

    ``%r = "kiln.gather"(%table, %ids) {axis = 0 : i64} : (!kiln.tensor<[50000, 256], f32>, !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L", 256], f32>``
    """

    data: ext.Operand[TensorType]
    indices: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"axis": ATTR.int(default=0)}

    def shape(self, operands, attrs):
        data, idx = operands
        _require_index_dtype(idx)
        axis = norm_axis(attrs["axis"], data.rank)
        dims = data.dims[:axis] + idx.dims + data.dims[axis + 1 :]
        return [TensorInfo(dims, data.dtype)]


class GatherElementsOp(KilnOp, name="gather_elements", traits=[ext.Pure]):
    """Take entries of ``data`` along ``axis`` at ``indices`` of the same rank
    (``numpy.take_along_axis``, ``torch.gather``): ``r[i][j] = data[i][indices[i][j]]``
    for ``axis = 1``.  The result has the dims of ``indices``; on the other axes
    ``indices`` may be smaller than ``data``, not larger.

    ``%r = "kiln.gather_elements"(%d, %i) {axis = 1 : i64} : (!kiln.tensor<["B", 128], i64>, !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64>``
    """

    data: ext.Operand[TensorType]
    indices: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"axis": ATTR.int(default=0)}

    def shape(self, operands, attrs):
        data, idx = operands
        _require_index_dtype(idx)
        if idx.rank != data.rank:
            raise VerifyError(f"indices must have the rank of data ({data.rank}), got {shape_text(idx.dims)}")
        norm_axis(attrs["axis"], data.rank)
        return [TensorInfo(idx.dims, data.dtype)]


class RangeOp(KilnOp, name="range", traits=[ext.Pure]):
    """``[start, start + step, ...]``: a 1-D tensor of ``shape = [n]`` values, where
    ``n`` may be symbolic (``torch.arange(L)``); the result type gives the dtype.

    ``%r = "kiln.range"() {shape = ["L"], start = 0 : i64, step = 1 : i64} : () -> !kiln.tensor<["L"], i64>``
    """

    res: ext.Result[TensorType]
    ATTRS = {"shape": ATTR.dims(), "start": ATTR.float(default=0.0), "step": ATTR.float(default=1.0)}

    def shape(self, operands, attrs):
        target = tuple(attrs["shape"])
        if len(target) != 1 or target[0].is_unknown:
            raise VerifyError(f"attribute 'shape' must hold one known dim, got {shape_text(target)}")
        if attrs["step"] == 0:
            raise VerifyError("attribute 'step' must not be 0")
        return [TensorInfo(target, None)]


class ExpandOp(KilnOp, name="expand", traits=[ext.Pure]):
    """Broadcast ``x`` to the dims in ``shape`` (numpy broadcasting rules).

    ``%r = "kiln.expand"(%x) {shape = ["B", "L", 16]} : (!kiln.tensor<[1, 1, 16], f32>) -> !kiln.tensor<["B", "L", 16], f32>``
    """

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"shape": ATTR.dims()}

    def shape(self, operands, attrs):
        (x,) = operands
        target = tuple(attrs["shape"])
        got = broadcast_dims([x.dims, target], "operand and target shape")
        if len(got) != len(target) or any(g != t for g, t in zip(got, target)):
            raise VerifyError(f"cannot expand {shape_text(x.dims)} to {shape_text(target)}")
        return [TensorInfo(target, x.dtype)]


class PadOp(KilnOp, name="pad", traits=[ext.Pure]):
    """Pad with a constant: ``pads`` is ``[begin_0, ..., begin_n, end_0, ..., end_n]``
    (non-negative).

    ``%r = "kiln.pad"(%x) {pads = array<i64: 0, 1, 0, 1>, value = 0.0 : f64} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L+2"], f32>``
    """

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"pads": ATTR.ints(), "value": ATTR.float(default=0.0), "mode": ATTR.str(default="constant")}

    def shape(self, operands, attrs):
        (x,) = operands
        pads = attrs["pads"]
        if len(pads) != 2 * x.rank:
            raise VerifyError(f"attribute 'pads' must have {2 * x.rank} values for rank {x.rank}, got {len(pads)}")
        if any(p < 0 for p in pads):
            raise VerifyError(f"attribute 'pads' {pads} must be non-negative")
        if attrs["mode"] not in ("constant", "reflect", "edge"):
            raise VerifyError(f"attribute 'mode' must be \"constant\", \"reflect\" or \"edge\", got \"{attrs['mode']}\"")
        dims = tuple(d + pads[i] + pads[i + x.rank] for i, d in enumerate(x.dims))
        return [TensorInfo(dims, x.dtype)]


def elements_type(value: ir.Attribute):
    """The tensor type of a dense or dense_resource elements attribute, else None."""
    if isinstance(value, ir.DenseElementsAttr):
        return ir.ShapedType(value.type)
    try:
        # dense_resource attributes come back as plain Attributes: cast explicitly.
        return ir.ShapedType(ir.DenseResourceElementsAttr(value).type)
    except ValueError:
        return None


class ConstantOp(KilnOp, name="constant", traits=[ext.Pure]):
    """A constant tensor; ``value`` is a dense or dense_resource elements attribute
    whose shape and element type match the (static) result.

    ``%c = "kiln.constant"() {value = dense<1.0> : tensor<16xf32>} : () -> !kiln.tensor<[16], f32>``
    """

    res: ext.Result[TensorType]
    ATTRS = {"value": ATTR.any()}

    def shape(self, operands, attrs):
        value = attrs["value"]
        t = elements_type(value)
        if t is None or not t.has_static_shape:
            raise VerifyError(f"attribute 'value' must be a dense or dense_resource elements attribute, got {value}")
        return [TensorInfo(tuple(dim(s) for s in t.shape), t.element_type)]


class FallbackOp(KilnOp, name="fallback"):
    """An op kiln cannot lower, kept for the runtime to run in PyTorch.

    ``op_name`` is the original op (``aten.foo.default``, ``onnx.Foo``);
    ``attrs`` (optional) its attributes; operand and result types as imported.
    Up to 16 operands and 4 results.

    ``%r = "kiln.fallback"(%x) {op_name = "aten.special_bessel_j0.default", operandSegmentSizes = array<i32: 1, 0, ...>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>``
    """

    MAX_RESULTS = 4
    # Heterogeneous variadic operands and results: see MAX_VARIADIC.
    __annotations__ = {
        **optional_fields("input", MAX_VARIADIC, "operand"),
        **optional_fields("output", MAX_RESULTS, "result"),
    }
    locals().update(dict.fromkeys(__annotations__))
    ATTRS = {"op_name": ATTR.str(), "attrs": ATTR.dict(optional=True)}

    def shape(self, operands, attrs):
        if not attrs["op_name"]:
            raise VerifyError("attribute 'op_name' must not be empty")
        for i, r in enumerate(self.operation.results):
            if any(d.is_unknown for d in tensor_info(r.type).dims):
                raise VerifyError(f"result #{i} must have known dims (a fallback op has no shape function)")
        return [None] * len(self.operation.results)


class CustomOp(KilnOp, name="custom"):
    """An op run by a kernel registered from user code (:func:`kiln.register_kernel`).

    ``op_name`` is the op it stands for: a custom op of the source
    (``mylib::flash_attention``, ``com.example::MyOp``) or a kiln op whose
    registered kernel was chosen over kiln's generated code (``kiln.softmax``);
    ``kernel`` the registered kernel's name; ``attrs`` (optional) the op's
    non-tensor arguments, passed to the kernel.  Result types come from the
    kernel's shape function at import (kiln cannot infer them).  Up to 16
    operands and 4 results.

    ``%r = "kiln.custom"(%q, %k, %v) {op_name = "mylib::flash_attention", kernel = "flash", operandSegmentSizes = array<i32: 1, 1, 1, 0, ...>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (...) -> !kiln.tensor<["B", 4, "L", 16], f32>``
    """

    MAX_RESULTS = 4
    # Heterogeneous variadic operands and results: see MAX_VARIADIC.
    __annotations__ = {
        **optional_fields("input", MAX_VARIADIC, "operand"),
        **optional_fields("output", MAX_RESULTS, "result"),
    }
    locals().update(dict.fromkeys(__annotations__))
    ATTRS = {"op_name": ATTR.str(), "kernel": ATTR.str(), "attrs": ATTR.dict(optional=True)}

    def shape(self, operands, attrs):
        for key in ("op_name", "kernel"):
            if not attrs[key]:
                raise VerifyError(f"attribute '{key}' must not be empty")
        if not self.operation.results:
            raise VerifyError("a custom op must have at least one result")
        for i, r in enumerate(self.operation.results):
            if any(d.is_unknown for d in tensor_info(r.type).dims):
                raise VerifyError(f"result #{i} must have known dims (they come from the kernel's shape function)")
        return [None] * len(self.operation.results)


class SymbolOp(KilnOp, name="symbol"):
    """Declares a dim symbol with its range and optional optimization point.

    ``"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64, opt = 8 : i64} : () -> ()``

    ``multiple_of`` (optional) records a divisibility the frontend proved.
    """

    ATTRS = {
        "sym_name": ATTR.str(),
        "min": ATTR.int(),
        "max": ATTR.int(),
        "opt": ATTR.int(optional=True),
        "multiple_of": ATTR.int(optional=True),
    }

    def shape(self, operands, attrs):
        name, lo, hi, opt = attrs["sym_name"], attrs["min"], attrs["max"], attrs["opt"]
        try:
            symbol(name)
        except Exception:
            raise VerifyError(f"'{name}' is not a valid symbol name") from None
        if lo < 0:
            raise VerifyError(f"symbol '{name}' has min {lo} < 0")
        if lo > hi:
            raise VerifyError(f"symbol '{name}' has min {lo} > max {hi}")
        if opt is not None and not lo <= opt <= hi:
            raise VerifyError(f"symbol '{name}' has opt {opt} outside [{lo}, {hi}]")
        m = attrs["multiple_of"]
        if m is not None and m <= 0:
            raise VerifyError(f"symbol '{name}' has multiple_of {m} <= 0")
        parent = self.operation.parent
        if parent is None or parent.operation.name != "builtin.module":
            raise VerifyError("must be at module level")
        return []


SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


class ScatterNDOp(KilnOp, name="scatter_nd", traits=[ext.Pure]):
    """A copy of ``data`` with slices replaced (or combined) by ``updates``
    (ONNX ``ScatterND``): ``indices`` is ``[i_0, ..., i_{q-2}, k]``, each of
    its rows the position of a slice ``data[p_0, ..., p_{k-1}, ...]``
    (negative values count from the end), and ``updates`` is
    ``indices.dims[:-1] + data.dims[k:]``.  ``reduction`` (``none``, ``add``,
    ``mul``, ``max``, ``min``) combines an update with the value already
    there; rows apply in order, so duplicate positions accumulate.

    ``%r = "kiln.scatter_nd"(%d, %i, %u) {reduction = "add"} : (!kiln.tensor<[4, "L"], f32>, !kiln.tensor<[2, 1], i64>, !kiln.tensor<[2, "L"], f32>) -> !kiln.tensor<[4, "L"], f32>``
    """

    data: ext.Operand[TensorType]
    indices: ext.Operand[TensorType]
    updates: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"reduction": ATTR.str(default="none")}

    def shape(self, operands, attrs):
        data, idx, upd = operands
        _require_index_dtype(idx)
        same_dtype([data, upd], "data and updates")
        if attrs["reduction"] not in SCATTER_REDUCTIONS:
            raise VerifyError(f"attribute 'reduction' must be one of {', '.join(SCATTER_REDUCTIONS)}, "
                              f"got \"{attrs['reduction']}\"")
        if idx.rank < 1:
            raise VerifyError("indices must have rank >= 1")
        k = idx.dims[-1]
        if not k.is_static or k.value > data.rank:
            raise VerifyError(f"the last dim of indices must be a static size <= the rank of data ({data.rank}), "
                              f"got {k}")
        want = tuple(idx.dims[:-1]) + tuple(data.dims[k.value:])
        if len(want) != upd.rank or any(not (a.is_unknown or b.is_unknown or a == b) for a, b in zip(want, upd.dims)):
            raise VerifyError(f"updates must have shape {shape_text(want)}, got {shape_text(upd.dims)}")
        return [data]


def checked_reshapes(module_op) -> list:
    """The ``checked`` reshapes of a module as
    :class:`~kiln.runtime.contract.ReshapeCheck`\\ s: their element counts are
    compared when the shape contract binds the symbols, before any kernel
    runs (a reshape to run-time values that do not fit is a ShapeError naming
    it, never a kernel reading past its input)."""
    from ...locations import location_text
    from ...runtime.contract import ReshapeCheck

    out = []

    def visit(op):
        if op.name == "kiln.reshape" and op.opview.attr("checked"):
            src = tensor_info(op.operands[0].type).dims
            dst = tensor_info(op.results[0].type).dims
            out.append(ReshapeCheck(location_text(op.location), tuple(map(str, src)), tuple(map(str, dst))))
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    return out


def module_checks(module_op) -> list:
    """The module's ``kiln.checks`` (recorded by the importer: slices by
    run-time bounds) as :class:`~kiln.runtime.contract.BoundsCheck`\\ s."""
    from ...runtime.contract import parse_checks

    attrs = module_op.attributes
    if "kiln.checks" not in attrs:
        return []
    return parse_checks(ir.StringAttr(a).value for a in ir.ArrayAttr(attrs["kiln.checks"]))


class UpdateSliceOp(KilnOp, name="update_slice", traits=[ext.Pure]):
    """``dest`` with ``update`` written at ``[offset, offset + L)`` along
    ``axis`` (``L`` = update's dim there; every other dim equal to dest's):
    ``r = dest; r[..., offset:offset+L, ...] = update``.  ``offset`` is one
    dim (an integer, a symbol or an expression such as ``"P"``).  The result
    has dest's type.  Lowered to a strided copy of the ``L`` positions only;
    when the memory plan donates dest's buffer to the result (a KV cache:
    a model input torch.export records as mutated, or an intermediate read
    by nothing later), the op is marked ``in_place = true`` and its kernel writes
    into dest's buffer: nothing else of dest is copied.  ``offset + L <=
    dest`` is checked here when provable, else per call by the shape
    contract (the importer records a ``kiln.checks`` bound).

    ``%r = "kiln.update_slice"(%cache, %new) {axis = 2 : i64, offset = ["P"]} : (!kiln.tensor<["B", 4, 2048, 64], f32>, !kiln.tensor<["B", 4, "L", 64], f32>) -> !kiln.tensor<["B", 4, 2048, 64], f32>``
    """

    dest: ext.Operand[TensorType]
    update: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    ATTRS = {"axis": ATTR.int(), "offset": ATTR.dims(), "in_place": ATTR.bool(default=False)}

    def shape(self, operands, attrs):
        dest, upd = operands
        if dest.rank != upd.rank:
            raise VerifyError(f"update has rank {upd.rank}, dest has rank {dest.rank}")
        same_dtype([dest, upd], "dest and update")
        axis = norm_axis(attrs["axis"], dest.rank)
        offset = attrs["offset"]
        if len(offset) != 1 or offset[0].is_unknown:
            raise VerifyError(f"attribute 'offset' must hold one known dim, got {shape_text(offset)}")
        off = offset[0]
        for k, (a, b) in enumerate(zip(dest.dims, upd.dims)):
            if k != axis and not (a.is_unknown or b.is_unknown or a == b):
                raise VerifyError(f"update dim {k} is {b}, dest has {a}")
        n, size = upd.dims[axis], dest.dims[axis]
        if not (n.is_unknown or size.is_unknown) and _unequal(off + n, size) and _provably_over(off + n, size):
            raise VerifyError(f"update [{off}, {off + n}) on axis {axis} does not fit in dest dim {size}")
        return [dest]


def _provably_over(end: Dim, size: Dim) -> bool:
    """Whether ``end > size`` for every positive value of their symbols."""
    import sympy

    e = (end - size).expr
    e = e.subs({s: sympy.Symbol(s.name, positive=True, integer=True) for s in e.free_symbols})
    return bool(e.is_positive)
