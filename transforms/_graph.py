"""Helpers the graph passes share: walking functions, reading and making
constants, replacing values.

Constants are ``kiln.constant`` ops whose ``value`` is a dense or
dense_resource elements attribute.  :func:`constant_array` reads either into
numpy without going through Python lists: a dense attribute through the
buffer protocol, a dense_resource one through
:func:`~kiln.transforms._resources.resource_bytes` (the array a frontend
made the blob from, or the hex blob MLIR prints for it).
"""

from __future__ import annotations

import numpy as np

from .._mlir import ir
from ..dialects.kiln.shapes import matrix_transpose
from ..runtime.dtypes import NUMPY_DTYPES  # noqa: F401 (one map, kept in the runtime)
from ._resources import register_resource, resource_bytes

__all__ = [
    "EPILOGUE_ATTR",
    "IMPL_ATTR",
    "PARTS_ATTR",
    "NUMPY_DTYPES",
    "WHY_ATTR",
    "block_ops",
    "constant_array",
    "functions",
    "is_constant",
    "is_weight_transpose",
    "make_constant",
    "numpy_dtype",
    "read_by_products",
    "replace_value",
    "resource_array",
    "same_type",
    "users",
]

#: On a kiln op: the library kernel kiln-select-kernels chose for it (a
#: registry entry's name, e.g. ``native.layer_norm``; absent: generated code).
IMPL_ATTR = "kiln.impl"
#: On a kiln op: why that kernel was chosen.
WHY_ATTR = "kiln.why"
#: On a kiln op that a product's or convolution's library call applies after
#: it (its ``kiln.impl`` names that call): the step's role (``"bias"``,
#: ``"relu"``, ``"gelu"``, ``"residual"``, ``"pool"``).  The op's lowering
#: carries it onto its generics, which the call then replaces.
EPILOGUE_ATTR = "kiln.epilogue"
#: On a kiln op left to generated code: the library entry its lowering calls
#: for pieces of it (a generated f32 attention's ``q k^T`` and ``p v``
#: products: ``native.gemm``); absent: all of it is generated loops.
PARTS_ATTR = "kiln.parts"


def numpy_dtype(t: ir.Type):
    """The numpy dtype of an MLIR element type, or None (bf16)."""
    return NUMPY_DTYPES.get(str(t))


def functions(module) -> list:
    """The ``func.func`` operations of a module op, in order."""
    region = module.regions[0]
    if len(region.blocks) == 0:
        return []
    return [op.operation for op in region.blocks[0].operations if op.operation.name == "func.func"]


def block_ops(block) -> list:
    """The operations of a block, as ``ir.Operation`` objects, in order."""
    return [op.operation for op in block.operations]


def users(value) -> list:
    """The operations using ``value`` (one entry per use)."""
    return [u.owner for u in value.uses]


def same_type(a, b) -> bool:
    """True when two values (or types) have exactly the same type."""
    ta = a if isinstance(a, ir.Type) else a.type
    tb = b if isinstance(b, ir.Type) else b.type
    return ta == tb


def replace_value(old, new) -> None:
    """Replace every use of ``old`` with ``new``."""
    old.replace_all_uses_with(new)


def is_constant(value) -> bool:
    """True when ``value`` is the result of a ``kiln.constant``."""
    owner = value.owner
    return isinstance(owner, (ir.Operation, ir.OpView)) and owner.name == "kiln.constant"


def _elements(attr):
    if isinstance(attr, ir.DenseElementsAttr):
        return attr, ir.ShapedType(attr.type)
    try:
        res = ir.DenseResourceElementsAttr(attr)
    except ValueError:
        return None, None
    return res, ir.ShapedType(res.type)


def constant_nbytes(op) -> int | None:
    """Bytes of a ``kiln.constant``'s data (None for element types numpy lacks,
    unless a ``dense_resource`` blob holds them: bf16 weights, read as bits)."""
    attr, t = _elements(op.operation.attributes["value"])
    if t is None:
        return None
    dt = numpy_dtype(t.element_type)
    if dt is not None:
        itemsize = np.dtype(dt).itemsize
    elif isinstance(t.element_type, ir.FloatType) and isinstance(attr, ir.DenseResourceElementsAttr):
        itemsize = ir.FloatType(t.element_type).width // 8
    else:
        return None
    return int(np.prod(t.shape, dtype=np.int64)) * itemsize


def constant_array(value_or_op, max_bytes: int | None = None) -> np.ndarray | None:
    """The data of a ``kiln.constant`` (op or its result) as a numpy array.

    None when the element type has no numpy dtype, the data is larger than
    ``max_bytes``, or it cannot be read.  The array is read-only when it views
    the attribute's storage.
    """
    op = value_or_op.owner if isinstance(value_or_op, ir.Value) else value_or_op
    if isinstance(op, ir.Block):  # a block argument
        return None
    op = op.operation
    if op.name != "kiln.constant":
        return None
    attr, t = _elements(op.attributes["value"])
    if attr is None:
        return None
    dt = numpy_dtype(t.element_type)
    if dt is None:
        return None
    shape = tuple(t.shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
    if max_bytes is not None and nbytes > max_bytes:
        return None
    if isinstance(attr, ir.DenseElementsAttr):
        arr = np.array(attr)  # splats come back expanded
        if arr.dtype == object:
            return None
        return arr.astype(dt, copy=False).reshape(shape)
    return resource_array(op, shape, dt)


def resource_array(op, shape, dt) -> np.ndarray | None:
    """The ``dense_resource`` data of the constant ``op`` as a read-only
    array of ``shape`` and numpy dtype ``dt``; None when it cannot be read
    or its size does not match."""
    raw = resource_bytes(op.attributes["value"], op)
    if raw is None:
        return None
    if dt is np.bool_:
        return raw.astype(np.bool_).reshape(shape)
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) != count * np.dtype(dt).itemsize:
        return None
    return raw.view(dt).reshape(shape)


def _scalar_attr(t: ir.Type, v) -> ir.Attribute:
    name = str(t)
    if name.startswith("f") or name == "bf16":
        return ir.FloatAttr.get(t, float(v))
    return ir.IntegerAttr.get(t, int(bool(v)) if name == "i1" else int(v))


#: Arrays of at least this many bytes become ``dense_resource`` blobs backed
#: by the array itself (:func:`elements_attr`).
RESOURCE_BYTES = 1 << 20


def elements_attr(array: np.ndarray, element_type: ir.Type) -> ir.Attribute:
    """A dense elements attribute holding ``array`` (splat when uniform).

    From :data:`RESOURCE_BYTES` on (a folded weight: a batch norm folded into
    a convolution's), a ``dense_resource`` blob made from a private copy of
    ``array`` and recorded as its data (:func:`register_resource`), like the
    weights the frontends import: a ``DenseElementsAttr`` copies the data into
    the context, where it stays until the context goes, and every reader
    (the runtime's constants) copied it out once more.
    """
    shape = list(array.shape)
    ttype = ir.RankedTensorType.get(shape, element_type)
    if array.size > 0:
        # Compared in place: reshape(-1) of a transposed view (a folded weight
        # transpose) would copy it, and the contiguous copy below again.
        first = array.flat[0]
        if bool((array == first).all()) and not (np.issubdtype(array.dtype, np.floating) and np.isnan(first)):
            return ir.DenseElementsAttr.get_splat(ttype, _scalar_attr(element_type, first))
    dt = numpy_dtype(element_type)
    if dt is not np.bool_ and array.size * np.dtype(dt).itemsize >= RESOURCE_BYTES:
        data = np.array(array, dtype=dt, order="C", copy=True)  # kiln's own: no caller can change it
        data.flags.writeable = False
        attr = ir.DenseResourceElementsAttr.get_from_buffer(data, "kiln_constant", ttype)
        register_resource(attr, data)
        return attr
    data = np.ascontiguousarray(array.astype(dt, copy=False))
    if dt is np.bool_:
        return ir.DenseElementsAttr.get(data, type=element_type)
    return ir.DenseElementsAttr.get(data, type=element_type, shape=shape)


def make_constant(array, element_type: ir.Type | str, *, loc=None, ip=None):
    """A ``kiln.constant`` holding ``array`` (any array-like) as ``element_type``;
    returns its result value."""
    from ..dialects.kiln import ConstantOp, create_op, parse_dtype

    if isinstance(element_type, str):
        element_type = parse_dtype(element_type)
    dt = numpy_dtype(element_type)
    array = np.asarray(array, dtype=dt) if dt is not None else np.asarray(array)
    attr = elements_attr(array, element_type)
    return create_op(ConstantOp, attrs={"value": attr}, loc=loc, ip=ip).result


def scalar_constant(value: float, element_type: ir.Type, *, loc=None, ip=None):
    """A rank-0 ``kiln.constant`` (a splat, so any element type works, bf16 too)."""
    from ..dialects.kiln import ConstantOp, create_op

    attr = ir.DenseElementsAttr.get_splat(ir.RankedTensorType.get([], element_type), _scalar_attr(element_type, value))
    return create_op(ConstantOp, attrs={"value": attr}, loc=loc, ip=ip).result


def is_weight_transpose(op) -> bool:
    """A ``kiln.transpose`` of the last two dims of a constant that only
    products read (``nn.Linear``'s ``W^T``, which kiln-fold-constants leaves
    for a weight past its ``keep-transposed`` size).  kiln-partition keeps it
    out of the kernels' groups and gives each product's kernel a copy of it
    (reading its constant): the lowering reads the weight through the
    product's map (convert-kiln-to-linalg), so the weight stays one buffer
    in its own layout, with no transposed copy made at compile time or load."""
    if not isinstance(op, (ir.Operation, ir.OpView)) or op.name != "kiln.transpose":
        return False
    op = op.operation
    perm = list(op.opview.attr("perm"))
    if len(perm) < 2 or perm != matrix_transpose(len(perm)) or not is_constant(op.operands[0]):
        return False
    return all(read_by_products(u.owner, u.operand_number) for u in op.results[0].uses)


def read_by_products(user, number: int) -> bool:
    """Whether ``user``'s operand ``number`` is a product's operand: the user
    is a ``kiln.matmul``, or a ``kiln.fused`` whose body gives that operand
    to products only."""
    if user.name == "kiln.matmul":
        return True
    if user.name != "kiln.fused":
        return False
    arg = user.regions[0].blocks[0].arguments[number]
    return all(u.owner.name == "kiln.matmul" for u in arg.uses)
