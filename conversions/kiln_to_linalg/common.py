"""Helpers shared by the kiln → linalg lowerings.

* :class:`DimEnv` turns kiln dims into ``index`` SSA values: each symbol is
  one value per function (``tensor.dim`` of the first argument dim naming
  it, created at the function entry); expressions (``"B*L"``, ``"(H-3)/2+1"``)
  become ``arith`` on those values at the point of use, so equal dims are
  built from the same values and stay provably equal.
* :class:`Lowering` is what each ``lower_<op>`` function receives: the op,
  its converted operands, the kiln infos of operands and results, the
  decoded attributes and the dim environment.
* :func:`generic` builds a ``linalg.generic`` from maps, iterator kinds and a
  Python function that emits the scalar body.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy

from ..._mlir import arith, ir, linalg, tensor
from ...dialects.dims import Dim, FloorDiv, dim
from ...dialects.kiln import TensorInfo, is_float
from ...errors import ConversionError

DYN = ir.ShapedType.get_dynamic_size()


def index_type() -> ir.Type:
    return ir.IndexType.get()


def const_index(v: int) -> ir.Value:
    return arith.constant(index_type(), int(v))


def storage_info(info: TensorInfo) -> TensorInfo:
    """``info`` with the element type linalg holds it in: ``ui8`` as ``i8``
    (``arith`` takes signless integers only; the lowerings that care about
    signedness read the kiln dtype from the op)."""
    if str(info.dtype) == "ui8":
        return TensorInfo(info.dims, ir.IntegerType.get_signless(8))
    return info


def builtin_tensor_type(info: TensorInfo) -> ir.RankedTensorType:
    """``tensor<?x?x256xf32>`` for ``["B", "L", 256], f32``: every non-static dim is ``?``."""
    info = storage_info(info)
    return ir.RankedTensorType.get([d.value if d.is_static else DYN for d in info.dims], info.dtype)


class DimEnv:
    """Symbols of one function as ``index`` values, and dim expressions built on them."""

    def __init__(self, symbol_values: dict[str, ir.Value]):
        self.symbols = symbol_values

    def value(self, d) -> ir.Value:
        """An ``index`` value for dim ``d``, built at the current insertion point."""
        d = dim(d)
        if d.is_unknown:
            raise ConversionError("cannot lower a '?' dim: run kiln-infer-shapes first")
        return self._expr(d.expr)

    def values(self, dims: Sequence) -> list[ir.Value]:
        return [self.value(d) for d in dims]

    def _expr(self, e) -> ir.Value:
        if e.is_Integer:
            return const_index(int(e))
        if e.is_Symbol:
            if e.name not in self.symbols:
                raise ConversionError(
                    f"symbol '{e.name}' is not the exact dim of any function argument, so it has no value"
                )
            return self.symbols[e.name]
        if isinstance(e, sympy.Add):
            terms = [self._expr(a) for a in e.args]
            out = terms[0]
            for t in terms[1:]:
                out = arith.addi(out, t)
            return out
        if isinstance(e, sympy.Mul):
            factors = [self._expr(a) for a in e.args]
            out = factors[0]
            for f in factors[1:]:
                out = arith.muli(out, f)
            return out
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
            base = self._expr(e.base)
            out = base
            for _ in range(int(e.exp) - 1):
                out = arith.muli(out, base)
            return out
        if isinstance(e, FloorDiv):
            return arith.floordivsi(self._expr(e.args[0]), self._expr(e.args[1]))
        raise ConversionError(f"cannot lower dim expression '{Dim(e)}'")


@dataclass
class Lowering:
    """Everything a ``lower_<op>`` function needs about one kiln op."""

    op: ir.Operation
    operands: list[ir.Value]  # converted (builtin tensor) operands
    infos: list[TensorInfo]  # kiln infos of the operands
    results: list[TensorInfo]  # kiln infos of the results
    attrs: dict
    env: DimEnv

    @property
    def name(self) -> str:
        return self.op.name

    def result_type(self, i: int = 0) -> ir.RankedTensorType:
        return builtin_tensor_type(self.results[i])

    def empty(self, dims: Sequence, dtype: ir.Type) -> ir.Value:
        """``tensor.empty`` with the dynamic dims of ``dims`` as operands."""
        return empty_tensor(dims, dtype, self.env)

    def error(self, message: str) -> ConversionError:
        return ConversionError(f"'{self.name}' op {message}")


def empty_tensor(dims: Sequence, dtype: ir.Type, env: DimEnv) -> ir.Value:
    sizes = []
    for d in dims:
        d = dim(d)
        sizes.append(d.value if d.is_static else env.value(d))
    return tensor.empty(sizes, dtype)


_ITER = {}


def iterator(kind: str) -> ir.Attribute:
    return ir.Attribute.parse(f"#linalg.iterator_type<{kind}>")


def affine_map(n_dims: int, exprs: Sequence) -> ir.AffineMap:
    """An affine map from ``n_dims`` loop dims; ``exprs`` holds ints (dim
    positions), ``("c", k)`` constants, or ready AffineExprs."""
    out = []
    for e in exprs:
        if isinstance(e, int):
            out.append(ir.AffineDimExpr.get(e))
        elif isinstance(e, tuple) and e[0] == "c":
            out.append(ir.AffineConstantExpr.get(e[1]))
        else:
            out.append(e)
    return ir.AffineMap.get(n_dims, 0, out)


def generic(
    inputs: Sequence[ir.Value],
    inits: Sequence[ir.Value],
    maps: Sequence[ir.AffineMap],
    iterators: Sequence[str],
    body: Callable,
) -> list[ir.Value]:
    """A ``linalg.generic``; ``body(*block_args)`` returns the yielded value(s)."""
    op = linalg.GenericOp(
        [v.type for v in inits],
        list(inputs),
        list(inits),
        ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
        ir.ArrayAttr.get([iterator(k) for k in iterators]),
    )
    types = [ir.RankedTensorType(v.type).element_type for v in list(inputs) + list(inits)]
    block = op.regions[0].blocks.append(*types)
    with ir.InsertionPoint(block):
        out = body(*block.arguments)
        linalg.YieldOp(list(out) if isinstance(out, (list, tuple)) else [out])
    return list(op.results)


def loop_index(i: int) -> ir.Value:
    """``linalg.index i`` inside a generic body."""
    return linalg.IndexOp(i).result


def broadcast_map(operand_type: ir.RankedTensorType, out_dims: Sequence[Dim], n_loops: int | None = None) -> ir.AffineMap:
    """Numpy broadcasting of an operand into the result's iteration space.

    Dims are right-aligned; an operand dim that is a static 1 where the
    result dim is not reads index 0.
    """
    rank = len(out_dims)
    n_loops = rank if n_loops is None else n_loops
    shape = operand_type.shape
    exprs = []
    for k, size in enumerate(shape):
        axis = k + rank - len(shape)
        if size == 1 and not (out_dims[axis].is_static and out_dims[axis].value == 1):
            exprs.append(("c", 0))
        else:
            exprs.append(axis)
    return affine_map(n_loops, exprs)


def identity_map(rank: int) -> ir.AffineMap:
    return affine_map(rank, list(range(rank)))


def elementwise(
    operands: Sequence[ir.Value], out_dims: Sequence[Dim], out_dtype: ir.Type, env: DimEnv, body: Callable
) -> ir.Value:
    """A parallel generic over ``out_dims`` reading the broadcast operands."""
    rank = len(out_dims)
    init = empty_tensor(out_dims, out_dtype, env)
    maps = [broadcast_map(ir.RankedTensorType(v.type), out_dims) for v in operands] + [identity_map(rank)]
    return generic(operands, [init], maps, ["parallel"] * rank, lambda *a: body(*a[:-1]))[0]


def fill(value: ir.Value, init: ir.Value) -> ir.Value:
    """``linalg.fill`` of ``init`` with a scalar."""
    return linalg.fill(value, outs=[init])


# -- scalar helpers ------------------------------------------------------------


def scalar_const(t: ir.Type, value) -> ir.Value:
    """A scalar constant of element type ``t`` (floats, ints, i1)."""
    if is_float(t):
        return arith.constant(t, float(value))
    if str(t) == "i1":
        return arith.constant(t, ir.IntegerAttr.get(t, 1 if value else 0))
    return arith.constant(t, int(value))


def lowest(t: ir.Type) -> ir.Value:
    """The identity of ``max``: -inf for floats, the minimum for integers."""
    if is_float(t):
        return arith.constant(t, float("-inf"))
    bits = ir.IntegerType(t).width
    return arith.constant(t, -(2 ** (bits - 1)))


def to_float(v: ir.Value, t: ir.Type) -> ir.Value:
    """An ``index`` value as a float of type ``t``."""
    i64 = arith.index_cast(ir.IntegerType.get_signless(64), v)
    return arith.sitofp(t, i64)


def copy_contiguous(x: ir.Value) -> ir.Value:
    """A fresh contiguous copy of ``x`` (a generic reading ``x`` with ``tensor.extract``).

    Not ``linalg.copy``: canonicalization erases a copy on tensors, and
    bufferization then copies a strided view with ``memref.copy``, whose
    runtime function the wheel lacks (MLIR_NOTES sharp edge 16).
    """
    xt = ir.RankedTensorType(x.type)
    sizes = [s if s != DYN else tensor.dim(x, const_index(i)) for i, s in enumerate(xt.shape)]
    init = tensor.empty(sizes, xt.element_type)
    rank = xt.rank
    return generic([], [init], [identity_map(rank)], ["parallel"] * rank,
                   lambda _: tensor.extract(x, [loop_index(i) for i in range(rank)]))[0]


# -- constants -----------------------------------------------------------------


def _resource(attr: ir.Attribute):
    """``attr`` as a DenseResourceElementsAttr, or None."""
    try:
        return ir.DenseResourceElementsAttr(attr)
    except (ValueError, TypeError):
        return None


def needs_dense_data(attr: ir.Attribute) -> bool:
    """True for a ``dense_resource`` elements attribute the LLVM lowering
    cannot take: one of rank 0, or of ``i1`` elements.

    Upstream ``finalize-memref-to-llvm`` cannot lower a rank-0
    ``memref.global`` initialized from a resource: it asks the attribute for
    its single element through an iteration interface a resource does not
    provide, and loops printing "ElementsAttr does not provide iteration
    facilities" forever.  The translation to LLVM IR rejects an ``i1``
    resource global ("no known conversion for innermost element type": a
    boolean initializer of an ONNX file, such as the attention mask torch's
    exporter folds into one).  Such constants are given a plain dense
    attribute (:func:`dense_of_resource`) before they reach either.
    """
    res = _resource(attr)
    if res is None:
        return False
    st = ir.ShapedType(res.type)
    return st.rank == 0 or str(st.element_type) == "i1"


def dense_of_resource(attr: ir.Attribute, holder: ir.Operation) -> ir.DenseElementsAttr:
    """A plain dense elements attribute with the data of the ``dense_resource``
    ``attr``, which ``holder`` (an op with no operands) carries.

    Element types of 8, 16, 32 or 64 bits (packed in the blob) and ``i1``
    (one byte per element in the blob).  ConversionError, naming the
    op, when the blob is missing or its size does not match the type.
    """
    from ...transforms._resources import resource_bytes

    res = _resource(attr)
    st = ir.ShapedType(res.type)
    et, shape = st.element_type, list(st.shape)
    count = 1
    for s in shape:
        count *= s
    raw = resource_bytes(attr, holder)
    name = holder.name
    if raw is None:
        raise ConversionError(f"'{name}' op: the blob of {_resource_name(attr)} has no data")
    width = 8 if str(et) == "i1" else _bit_width(et)  # an i1 blob holds one byte per element
    if width not in (8, 16, 32, 64):
        raise ConversionError(f"'{name}' op: cannot read a {et} resource constant")
    if len(raw) != count * width // 8:
        raise ConversionError(f"'{name}' op: the blob of {_resource_name(attr)} holds {len(raw)} bytes, "
                              f"not the {count * width // 8} of {st}")
    if str(et) == "i1":
        return ir.DenseElementsAttr.get(raw.astype(bool).reshape(shape), type=et)
    # The bits as unsigned integers of the element's width, reinterpreted as ``et``.
    return ir.DenseElementsAttr.get(raw.view(f"u{width // 8}").reshape(shape), type=et, shape=shape)


def _resource_name(attr: ir.Attribute) -> str:
    text = str(attr)
    return text.split(" : ", 1)[0]


def _bit_width(t: ir.Type) -> int:
    for cls in (ir.IntegerType, ir.FloatType):
        try:
            return cls(t).width
        except (ValueError, TypeError):
            continue
    if isinstance(t, ir.IndexType):
        return 64
    return 0


def densify_resources(root: ir.Operation) -> int:
    """Give every rank-0 or ``i1`` ``dense_resource`` constant under ``root``
    (the ``value`` of ``arith.constant`` and ``kiln.constant``, the
    ``initial_value`` of ``memref.global``) a plain dense attribute; the
    number rewritten.  See :func:`needs_dense_data` for why."""
    fields = {"arith.constant": "value", "kiln.constant": "value", "memref.global": "initial_value"}
    found = []

    def visit(op):
        key = fields.get(op.name)
        if key is not None and key in op.attributes and needs_dense_data(op.attributes[key]):
            found.append((op, key))
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    for op, key in found:
        op.attributes[key] = dense_of_resource(op.attributes[key], op)
    return len(found)
