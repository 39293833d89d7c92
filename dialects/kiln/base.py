"""The kiln dialect class, its tensor type, and the machinery every op shares.

``!kiln.tensor<[dims], dtype>`` is a parametric IRDL type with two
parameters: an array of dims (integers, or strings holding a symbol or a dim
expression, see :mod:`kiln.dialects.dims`) and the element type.

Ops are declared with the bindings' ``dialects.ext`` DSL.  They share one
verifier (:meth:`KilnOp.verify_invariants`) that checks, in this order:

1. structure: operand and result counts, every tensor a ``!kiln.tensor`` with
   well-formed dims and a supported dtype;
2. attributes against the op's ``ATTRS`` table (kind, presence, defaults);
3. the op's own rules and its **shape function**, whose result is compared with
   the declared result types (``?`` dims are compatible with anything).

Failures become MLIR diagnostics at the op's location, prefixed the way MLIR
prefixes its own (``'kiln.add' op ...``).  The verifier never raises: a bug in
a shape function is reported as an error on the op, not as a crash.
"""

# No `from __future__ import annotations`: the ext DSL reads annotations as objects.

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from ..._mlir import ext, ir
from ...errors import DimError, VerifyError
from ..dims import UNKNOWN, Dim, dim, shape_text

__all__ = [
    "ATTR",
    "Kiln",
    "KilnOp",
    "TensorInfo",
    "TensorType",
    "dtype_name",
    "is_kiln_tensor",
    "parse_dtype",
    "tensor_info",
    "tensor_type",
]


class Kiln(ext.Dialect, name="kiln"):
    """The kiln dialect: tensors with named symbolic dims, and ops over them."""


class TensorType(Kiln.Type, name="tensor"):
    """``!kiln.tensor<["B", "L", 16], f32>``: a ranked tensor with symbolic dims.

    ``shape`` is an array of integer attributes (static sizes) and string
    attributes (symbols, expressions, or ``"?"``); ``dtype`` the element type.
    """

    shape: ir.ArrayAttr
    dtype: ir.TypeAttr


# Element types kiln tensors may hold, by their MLIR spelling.
_DTYPES = ("f16", "bf16", "f32", "f64", "i1", "i8", "ui8", "i16", "i32", "i64")


def parse_dtype(name: str) -> ir.Type:
    """The MLIR type for a dtype name (``"f32"``); needs a current Context."""
    if name not in _DTYPES:
        raise VerifyError(f"unsupported dtype '{name}' (expected one of {', '.join(_DTYPES)})")
    return ir.Type.parse(name)


def dtype_name(t: ir.Type) -> str:
    """The spelling of an element type: ``"f32"``, ``"i1"``."""
    return str(t)


def is_float(t: ir.Type) -> bool:
    """True for floating-point element types."""
    return str(t) in ("f16", "bf16", "f32", "f64")


def is_integer(t: ir.Type) -> bool:
    """True for integer (signless) element types, i1 included."""
    return str(t) in ("i1", "i8", "i16", "i32", "i64")


class TensorInfo(NamedTuple):
    """The dims and dtype of a kiln tensor, as shape functions see them."""

    dims: tuple[Dim, ...]
    dtype: Optional[ir.Type]

    @property
    def rank(self) -> int:
        return len(self.dims)

    def __str__(self) -> str:
        return shape_text(self.dims)


def _i64(v: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def tensor_type(dims: Sequence, dtype: ir.Type | str) -> TensorType:
    """Build ``!kiln.tensor<dims, dtype>`` with every dim in canonical form."""
    if isinstance(dtype, str):
        dtype = parse_dtype(dtype)
    elems = []
    for d in dims:
        v = dim(d).to_attr_value()
        elems.append(_i64(v) if isinstance(v, int) else ir.StringAttr.get(v))
    return TensorType.get(ir.ArrayAttr.get(elems), dtype)


def is_kiln_tensor(t: ir.Type) -> bool:
    """True when ``t`` is a ``!kiln.tensor``."""
    return isinstance(t, TensorType)


def _decode_dims(shape_attr: ir.Attribute) -> tuple[Dim, ...]:
    if not isinstance(shape_attr, ir.ArrayAttr):
        shape_attr = ir.ArrayAttr(shape_attr)
    dims = []
    for i, a in enumerate(shape_attr):
        if isinstance(a, ir.IntegerAttr):
            dims.append(dim(a.value))
        elif isinstance(a, ir.StringAttr):
            dims.append(dim(a.value))
        else:
            raise DimError(f"dim #{i} is {a}: expected an integer or a string")
    return tuple(dims)


def _tensor_info_uncached(t: ir.Type) -> TensorInfo:
    # Not cached by type object: a cache would keep types (and so contexts)
    # alive past their context's end, which the bindings do not survive.
    # Parsing dim text is cached in kiln.dialects.dims instead.
    dims = _decode_dims(t.shape)
    dtype = ir.TypeAttr(t.dtype).value
    if str(dtype) not in _DTYPES:
        raise VerifyError(f"unsupported dtype '{dtype}' in {t}")
    return TensorInfo(dims, dtype)


def tensor_info(t: ir.Type) -> TensorInfo:
    """Dims and dtype of a kiln tensor type; VerifyError if it is malformed."""
    if not isinstance(t, TensorType):
        raise VerifyError(f"expected a !kiln.tensor, got {t}")
    try:
        return _tensor_info_uncached(t)
    except DimError as e:
        raise VerifyError(f"malformed type {t}: {e.message}") from None


# ----------------------------------------------------------------------------
# Attributes: a small typed table per op, checked by the shared verifier.
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AttrSpec:
    """How one attribute of an op is stored, checked and decoded.

    ``kind`` is one of ``int``, ``ints`` (``array<i64: ...>``), ``float``,
    ``bool``, ``str``, ``dims`` (an array of dims), ``type``, ``dict``, ``any``.
    An attribute with ``required=False`` decodes to ``default`` when absent.
    """

    kind: str
    required: bool = True
    default: Any = None


class _AttrKinds:
    """Constructors for :class:`AttrSpec`: ``ATTR.int()``, ``ATTR.ints(default=[])``."""

    def __getattr__(self, kind: str):
        def make(**kw):
            required = "default" not in kw and not kw.pop("optional", False)
            return AttrSpec(kind, required=required, default=kw.get("default"))

        return make


ATTR = _AttrKinds()


def decode_attr(spec: AttrSpec, a: ir.Attribute, name: str):
    """Decode attribute ``a`` per ``spec``; VerifyError if it has the wrong kind."""
    kind = spec.kind

    def bad(expected: str):
        return VerifyError(f"attribute '{name}' must be {expected}, got {a}")

    if kind == "int":
        if isinstance(a, ir.IntegerAttr) and not isinstance(a, ir.BoolAttr):
            return a.value
        raise bad("an integer")
    if kind == "ints":
        if isinstance(a, ir.DenseI64ArrayAttr):
            return [int(x) for x in a]
        raise bad("array<i64: ...>")
    if kind == "float":
        if isinstance(a, ir.FloatAttr):
            return a.value
        if isinstance(a, ir.IntegerAttr) and not isinstance(a, ir.BoolAttr):
            return float(a.value)
        raise bad("a float")
    if kind == "bool":
        if isinstance(a, ir.BoolAttr):
            return a.value
        raise bad("a bool")
    if kind == "str":
        if isinstance(a, ir.StringAttr):
            return a.value
        raise bad("a string")
    if kind == "dims":
        if isinstance(a, ir.ArrayAttr):
            try:
                return _decode_dims(a)
            except DimError as e:
                raise VerifyError(f"attribute '{name}': {e.message}") from None
        raise bad("an array of dims")
    if kind == "type":
        if isinstance(a, ir.TypeAttr):
            return a.value
        raise bad("a type")
    if kind == "dict":
        if isinstance(a, ir.DictAttr):
            return a
        raise bad("a dictionary")
    return a


def encode_attr(spec: AttrSpec, value) -> ir.Attribute:
    """The MLIR attribute for a Python value of ``spec``'s kind."""
    kind = spec.kind
    if isinstance(value, ir.Attribute):
        return value
    if kind == "int":
        return _i64(int(value))
    if kind == "ints":
        return ir.DenseI64ArrayAttr.get([int(v) for v in value])
    if kind == "float":
        return ir.FloatAttr.get(ir.F64Type.get(), float(value))
    if kind == "bool":
        return ir.BoolAttr.get(bool(value))
    if kind == "str":
        return ir.StringAttr.get(str(value))
    if kind == "dims":
        elems = []
        for d in value:
            v = dim(d).to_attr_value()
            elems.append(_i64(v) if isinstance(v, int) else ir.StringAttr.get(v))
        return ir.ArrayAttr.get(elems)
    if kind == "type":
        return ir.TypeAttr.get(value)
    raise VerifyError(f"cannot encode {value!r} as a '{kind}' attribute")


# ----------------------------------------------------------------------------
# Ops
# ----------------------------------------------------------------------------

# Upper bound on the operands (results) of the ops whose operand list is a
# heterogeneous variadic (concat, fallback).  IRDL unifies the types of all
# values in one variadic group, so such ops declare this many optional groups
# instead; the IR carries `operandSegmentSizes` as for any op with optional
# operands.  Frontends chain concats that exceed it.
MAX_VARIADIC = 16


def optional_fields(prefix: str, count: int, kind: str) -> dict[str, Any]:
    """Class-body fields ``{prefix}0 .. {prefix}{count-1}``: optional operands
    (kind ``"operand"``) or results (``"result"``) of kiln tensor type."""
    wrap = ext.Operand if kind == "operand" else ext.Result
    return {f"{prefix}{i}": Optional[wrap[TensorType]] for i in range(count)}


class KilnOp(Kiln.Operation):
    """Base of every kiln op: the shared verifier and generic accessors.

    Subclasses set:

    - ``ATTRS``: ``{name: AttrSpec}`` for the op's attributes;
    - ``shape(self, operands, attrs)``: returns the result ``TensorInfo`` list
      computed from the operand infos and decoded attributes, raising
      ``VerifyError`` for operands that break the op's rules.  A ``dtype`` of
      ``None`` in a returned info means "as the result type declares".
    """

    # Not annotated: the ext DSL reads every class annotation as an op field.
    ATTRS = {}

    # -- accessors ---------------------------------------------------------

    def attr(self, name: str):
        """The decoded value of attribute ``name`` (its default when absent)."""
        spec = self.ATTRS[name]
        attrs = self.operation.attributes
        if name not in attrs:
            return spec.default
        return decode_attr(spec, attrs[name], name)

    def decoded_attrs(self) -> dict[str, Any]:
        """Every declared attribute, decoded; VerifyError on a bad one."""
        attrs = self.operation.attributes
        out = {}
        for name, spec in self.ATTRS.items():
            if name in attrs:
                out[name] = decode_attr(spec, attrs[name], name)
            elif spec.required:
                raise VerifyError(f"requires attribute '{name}'")
            else:
                out[name] = spec.default
        return out

    @classmethod
    def op_name(cls) -> str:
        """The op's full name, ``kiln.add``."""
        return cls.OPERATION_NAME

    def shape(self, operands: list[TensorInfo], attrs: dict[str, Any]) -> list[TensorInfo]:
        """Result infos from operand infos; the default keeps declared results."""
        return [None] * len(self.operation.results)

    # -- verification ------------------------------------------------------

    def _tensor_operands(self) -> list[TensorInfo]:
        infos = []
        for i, v in enumerate(self.operation.operands):
            try:
                infos.append(tensor_info(v.type))
            except VerifyError as e:
                raise VerifyError(f"operand #{i}: {e.message}") from None
        return infos

    def _expected_counts(self):
        operands = results = 0
        variadic_operands = variadic_results = False
        for f in self._fields:
            if isinstance(f, ext.OperandDef):
                if f.variadicity == ext.Variadicity.single:
                    operands += 1
                else:
                    variadic_operands = True
            elif isinstance(f, ext.ResultDef):
                if f.variadicity == ext.Variadicity.single:
                    results += 1
                else:
                    variadic_results = True
        return operands, variadic_operands, results, variadic_results

    def _check_segments(self):
        """An op with optional or variadic operands (results) carries one size
        per operand (result) group in ``operandSegmentSizes``
        (``resultSegmentSizes``); without it the accessors fail deep inside
        the bindings."""
        for attr, kind, what in (("operandSegmentSizes", ext.OperandDef, "operand"),
                                 ("resultSegmentSizes", ext.ResultDef, "result")):
            groups = [f for f in self._fields if isinstance(f, kind)]
            if all(f.variadicity == ext.Variadicity.single for f in groups):
                continue
            if attr not in self.operation.attributes:
                raise VerifyError(f"needs an '{attr}' attribute: array<i32: ...> with one size per {what} group "
                                  f"({len(groups)} groups; 1 for a required {what}, 0 or 1 for an optional one)")
            a = self.operation.attributes[attr]
            if not isinstance(a, ir.DenseI32ArrayAttr):
                raise VerifyError(f"'{attr}' must be array<i32: ...>, got {a}")
            sizes = list(a)
            n = len(sizes)
            if n != len(groups):
                raise VerifyError(f"'{attr}' has {n} sizes, but the op has {len(groups)} {what} groups")
            # The accessors slice the operands (results) by these sizes: each
            # must fit its group and together they must cover every value.
            for f, size in zip(groups, sizes):
                if f.variadicity == ext.Variadicity.single and size != 1:
                    raise VerifyError(f"'{attr}' gives the required {what} '{f.name}' {size} values, not 1")
                if f.variadicity == ext.Variadicity.optional and size not in (0, 1):
                    raise VerifyError(f"'{attr}' gives the optional {what} '{f.name}' {size} values, not 0 or 1")
                if size < 0:
                    raise VerifyError(f"'{attr}' gives the {what} group '{f.name}' {size} values")
            values = self.operation.operands if kind is ext.OperandDef else self.operation.results
            if sum(sizes) != len(values):
                raise VerifyError(f"'{attr}' sizes add up to {sum(sizes)}, but the op has {len(values)} {what}s")

    def _check_counts(self):
        self._check_segments()
        n_in, var_in, n_out, var_out = self._expected_counts()
        got_in = len(self.operation.operands)
        got_out = len(self.operation.results)
        if (got_in < n_in) if var_in else (got_in != n_in):
            raise VerifyError(f"expects {'at least ' if var_in else ''}{n_in} operands, got {got_in}")
        if (got_out < n_out) if var_out else (got_out != n_out):
            raise VerifyError(f"expects {'at least ' if var_out else ''}{n_out} results, got {got_out}")

    def verify_kiln(self) -> None:
        """Run every check; raise VerifyError with the first problem found."""
        self._check_counts()
        operands = self._tensor_operands()
        results = []
        for i, r in enumerate(self.operation.results):
            try:
                results.append(tensor_info(r.type))
            except VerifyError as e:
                raise VerifyError(f"result #{i}: {e.message}") from None
        attrs = self.decoded_attrs()
        inferred = self.shape(operands, attrs)
        for i, (want, got) in enumerate(zip(inferred, results)):
            if want is None:
                continue
            check_result(i, want, got)

    def verify_invariants(self) -> bool:
        """The hook MLIR's verifier calls; emits a diagnostic on failure."""
        try:
            self.verify_kiln()
        except (VerifyError, DimError) as e:
            self.location.emit_error(f"'{self.OPERATION_NAME}' op {e.message}")
            return False
        except Exception as e:  # a bug in a shape function must not crash MLIR
            self.location.emit_error(
                f"'{self.OPERATION_NAME}' op verifier failed: {type(e).__name__}: {e}"
            )
            return False
        return True


def compatible(a: Dim, b: Dim) -> bool:
    """True when two dims may be the same size: equal, or one is ``?``."""
    return a.is_unknown or b.is_unknown or a == b


def check_result(index: int, want: TensorInfo, got: TensorInfo) -> None:
    """Compare an inferred result with the declared one (``?`` matches all)."""
    if want.dtype is not None and want.dtype != got.dtype:
        raise VerifyError(f"result #{index} has dtype {got.dtype}, but the operands give {want.dtype}")
    if len(want.dims) != len(got.dims):
        raise VerifyError(
            f"result #{index} has rank {len(got.dims)} {shape_text(got.dims)}, "
            f"but its shape function gives rank {len(want.dims)} {shape_text(want.dims)}"
        )
    for axis, (w, g) in enumerate(zip(want.dims, got.dims)):
        if not compatible(w, g):
            raise VerifyError(
                f"result #{index} dim {axis} is {g}, but its shape function gives {w} "
                f"(result {shape_text(got.dims)} vs inferred {shape_text(want.dims)})"
            )


def merge_result(want: TensorInfo, got: TensorInfo) -> TensorInfo:
    """The refined result: inferred dims where known, the declared ones else."""
    dims = tuple(g if w.is_unknown else w for w, g in zip(want.dims, got.dims))
    return TensorInfo(dims, got.dtype if want.dtype is None else want.dtype)


__all__ += ["AttrSpec", "MAX_VARIADIC", "UNKNOWN", "check_result", "compatible", "merge_result"]
