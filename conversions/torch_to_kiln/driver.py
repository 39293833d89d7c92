"""The torch -> kiln conversion driver: types, values, legality, fallback.

The conversion walks each function's ops in order (a use always follows its
definition) and hands every torch op to its pattern, a small function looked
up by op name in a table (``PATTERNS``).  Patterns build kiln ops and return
one *value* per result of the torch op (a tuple when it has several):

- a kiln tensor (``ir.Value``),
- a folded scalar or list (Python ``int``/``float``/``bool``/``None``/``str``,
  a symbolic :class:`~kiln.dialects.dims.Dim`, or a list of those): torch's
  ``constant.*``, ``prim.ListConstruct`` and ``aten.size.int`` chains, and the
  ONNX shape arithmetic (``Shape -> Gather -> Concat -> Reshape``) become kiln
  attributes this way, never runtime values;
- a :class:`Known` tensor whose contents are known at import time (small
  integer constants, shape tensors); it becomes a ``kiln.constant`` only if a
  kiln op needs it as an operand.

Why not MLIR's ``apply_partial_conversion``: the dims of a result depend on
folded scalar values (a ``view`` whose sizes are ``size.int`` products), which
a per-op type converter cannot see; and kiln's shape functions already infer
every result type as ops are built in order.  The pieces of a Dialect
Conversion are still here and explicit: :class:`KilnTypeConverter` maps
``!torch.vtensor`` to ``!kiln.tensor`` with the bound symbols, the legality
rule is "every ``torch.*`` op is illegal, kiln/func/builtin legal" and is
checked at the end (:func:`check_legal`), and an op without a pattern (or
whose pattern declines) becomes ``kiln.fallback`` — or, with
``fallback=False``, an :class:`~kiln.errors.UnsupportedError` listing every
such op with its location.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..._mlir import ir
from ...dialects.dims import SYMBOL_MAX, Dim, dim
from ...dialects.kiln import MAX_VARIADIC, FallbackOp, create_op, tensor_info, tensor_type
from ...errors import ConversionError, KilnError, UnsupportedError, VerifyError
from ...locations import location_text
from ...module import ops_where
from ...transforms._graph import NUMPY_DTYPES
from ...transforms._resources import resource_bytes
from .values import _IDENTIFIER, Decline, KilnTypeConverter, Known, affine_dims, describe_type, is_tensor_type

# Decline, Known, KilnTypeConverter, describe_type and is_tensor_type live in values.py; patterns import them
# from here too.

__all__ = ["ConversionStats", "Decline", "Known", "KilnTypeConverter", "TorchToKiln", "convert_torch_to_kiln"]


#: Module attribute listing what the shape contract checks per call for the
#: imported ops to mean what the source's did, one string per check:
#: ``bounds|<where>|<start>|<end>|<size>`` (dim texts; see OpContext.check_bounds).
CHECKS_ATTR = "kiln.checks"


#: Functions ``hook(conv, op, name, cx) -> bool`` tried on every source op
#: before the patterns; True when the hook converted the op.  Kernels and
#: decompositions registered from user code install one
#: (:mod:`kiln.backends.user`: the backends depend on the conversions, not
#: the other way round).
IMPORT_HOOKS: list = []


# ----------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------


@dataclass
class ConversionStats:
    """What happened to each source op type: converted directly, decomposed
    into several kiln ops, or fell back; plus FLOPs per category where known."""

    converted: Counter = field(default_factory=Counter)
    decomposed: Counter = field(default_factory=Counter)
    fallback: Counter = field(default_factory=Counter)
    flops: dict = field(default_factory=lambda: defaultdict(float))
    unsupported: list = field(default_factory=list)  # (op name, location, reason)
    fresh_symbols: list = field(default_factory=list)


# Source ops that are bookkeeping, not computation: not counted in the report.
STRUCTURAL = {
    "torch.constant.int", "torch.constant.float", "torch.constant.bool", "torch.constant.none",
    "torch.constant.str", "torch.constant.device", "torch.prim.ListConstruct", "torch.vtensor.literal",
    "torch.aten.size.int", "torch.aten.mul.int", "torch.aten.add.int", "torch.aten.sub.int",
    "torch.aten.floordiv.int", "torch.aten.Int.bool", "torch.aten.sym_size.int", "torch.symbolic_int",
    "torch.bind_symbolic_shape", "onnx.Constant", "func.return", "torch.constant.number",
    "torch.prim.TupleConstruct", "torch.prim.ListUnpack", "torch.aten._assert_tensor_metadata",
    "torch.aten._assert_scalar", "torch.aten.sym_constrain_range_for_size",
}


# ----------------------------------------------------------------------------
# The per-op context handed to patterns
# ----------------------------------------------------------------------------


class OpContext:
    """One torch op being converted: typed access to its operands and attributes,
    and builders for kiln ops at its location."""

    def __init__(self, conv: TorchToKiln, op: ir.Operation, name: str):
        self.conv = conv
        self.op = op
        self.name = name
        self.loc = op.location
        self.kiln_ops = 0
        self.opset = conv.opset
        self.checks: list[str] = []  # see check_bounds; kept when the pattern succeeds

    def check_bounds(self, start, end, size) -> None:
        """Record that ``0 <= start <= end <= size`` must hold for the kiln ops
        built here to be this op (a slice by run-time bounds): the shape
        contract checks it per call (see :data:`CHECKS_ATTR`)."""
        where = f"{self.name} at {location_text(self.loc)}"
        self.checks.append("|".join(["bounds", where, str(start), str(end), str(size)]))

    # -- operands --------------------------------------------------------

    @property
    def num_operands(self) -> int:
        return len(self.op.operands)

    def value(self, i: int):
        """The converted value of operand ``i`` (kiln Value, scalar, list, Known)."""
        if i >= len(self.op.operands):
            return None
        return self.conv.lookup(self.op.operands[i])

    def has(self, i: int) -> bool:
        """True when operand ``i`` exists and is not ``none``."""
        return i < len(self.op.operands) and self.value(i) is not None

    def tensor(self, i: int) -> ir.Value:
        """Operand ``i`` as a kiln tensor (materializing a known constant)."""
        v = self.value(i)
        if isinstance(v, Known) and v.is_symbolic:  # shape values as data: computed at run time
            from .onnx_fold import symbolic_tensor

            return symbolic_tensor(self, v)
        if isinstance(v, Known):
            return self.conv.materialize(v, self.loc)
        if isinstance(v, ir.Value):
            return v
        raise Decline(f"operand #{i} is not a tensor")

    def known(self, i: int) -> Known:
        """Operand ``i`` as an import-time known tensor; Decline if it is not."""
        v = self.value(i)
        if isinstance(v, Known):
            return v
        raise Decline(f"operand #{i} must be a constant")

    def scalar(self, i: int, default=None):
        v = self.value(i) if i < self.num_operands else default
        if isinstance(v, Known):
            flat = v.ints() if v.dtype.startswith("i") else np.asarray(v.data).reshape(-1).tolist()
            if len(flat) != 1:
                raise Decline(f"operand #{i} is not a scalar")
            return flat[0]
        if isinstance(v, (ir.Value, list)):
            raise Decline(f"operand #{i} must be a constant scalar")
        return v

    def int(self, i: int, default=None) -> int:
        v = self.scalar(i, default)
        if v is None:
            return default
        if isinstance(v, Dim):
            if not v.is_static:
                raise Decline(f"operand #{i} is symbolic ({v})")
            return v.value
        return int(v)

    def ints(self, i: int, default=None) -> list:
        """Operand ``i`` as a list of ints or Dims."""
        v = self.value(i) if i < self.num_operands else default
        if v is None:
            return default
        if isinstance(v, Known):
            return v.ints()
        if isinstance(v, list):
            return v
        if isinstance(v, (int, Dim)):
            return [v]
        raise Decline(f"operand #{i} must be a constant list")

    # -- attributes (torch.operator "onnx.*") ------------------------------

    def attr(self, name: str, default=None):
        a = self.op.attributes
        key = f"torch.onnx.{name}"
        if key not in a:
            return default
        return decode(a[key])

    # -- types -------------------------------------------------------------

    def result_dtype(self, i: int = 0) -> str:
        return self.conv.types.parse(self.op.results[i].type)[1]

    def result_dims(self, i: int = 0) -> list:
        """Dims of result ``i`` as the torch type (refined by bindings) says."""
        r = self.op.results[i]
        base, _ = self.conv.types.parse(r.type)
        bound = self.conv.bound.get(r)
        if bound is not None and len(bound) == len(base):
            base = [b if not b.is_unknown else d for b, d in zip(base, bound)]
        return base

    # -- building ----------------------------------------------------------

    def build(self, name: str, *operands, results=None, **attrs):
        """Create ``kiln.<name>`` at this op's location; returns its result."""
        from ...dialects.kiln import op_class

        cls = op_class(name)
        named = {k: attrs.pop(k) for k in list(attrs) if k not in cls.ATTRS}
        try:
            op = create_op(cls, operands, attrs=attrs, results=results, loc=self.loc, **named)
        except VerifyError as e:
            raise Decline(e.message) from None
        self.kiln_ops += 1
        return op.operation.results[0]

    def const(self, value, dtype: str, shape=()):
        """A ``kiln.constant`` splat of ``value`` with kiln ``dtype``."""
        return self.conv.splat(value, dtype, shape, self.loc)

    def like(self, value, x: ir.Value):
        """A rank-0 constant with the dtype of tensor ``x``."""
        return self.const(value, str(tensor_info(x.type).dtype))

    def cast(self, x: ir.Value, dtype: str) -> ir.Value:
        info = tensor_info(x.type)
        if str(info.dtype) == dtype:
            return x
        return self.build("cast", x, results=[tensor_type(info.dims, dtype)])


def decode(a: ir.Attribute):
    """A Python value for an ONNX attribute as the importer stores it."""
    if isinstance(a, ir.ArrayAttr):
        return [decode(x) for x in a]
    if isinstance(a, ir.BoolAttr):
        return a.value
    if isinstance(a, ir.IntegerAttr):
        return a.value
    if isinstance(a, ir.FloatAttr):
        return a.value
    if isinstance(a, ir.StringAttr):
        return a.value
    return a


# ----------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------


class TorchToKiln:
    """Converts one module from the torch dialect to kiln in place.

    ``symbol_names`` renames torch's symbols (``s77`` -> ``B``);
    ``resources`` maps dense-resource names to numpy arrays, so that small
    integer constants (ONNX shapes, axes) can be folded; ``patterns`` is the
    op-name -> function table.  ``arg_dims`` ({argument index: dims}) and
    ``symbol_ranges`` ({name: (min, max)}) name the dims of function
    arguments the importer left as ``?`` (ONNX ``dim_param``).
    """

    def __init__(self, module_op, patterns, *, fallback=True, symbol_names=None, resources=None,
                 arg_dims=None, symbol_ranges=None):
        self.module_op = module_op
        self.patterns = patterns
        self.fallback = fallback
        self.symbol_names = dict(symbol_names or {})
        self.resources = resources or {}
        self.types = KilnTypeConverter()
        self.values: dict = {}
        self.bound: dict = {}
        self.symbols: dict[str, tuple[int, int]] = dict(symbol_ranges or {})
        self.arg_dims = dict(arg_dims or {})
        self.stats = ConversionStats()
        self.checks: list[str] = []  # the ops' check_bounds records
        self._loc_text: dict[str, str] = {}  # printed location -> location_text (see _fallback)
        self.opset = 0
        self._fresh = 0
        self._blobs_read = False
        self._op = None  # the op being converted (see _holder)

    # -- values ------------------------------------------------------------

    def lookup(self, v: ir.Value):
        try:
            return self.values[v]
        except KeyError:
            raise Decline("operand was not converted") from None

    def resource(self, attr):
        """The numpy data of a dense-resource attribute, when the frontend gave it."""
        m = re.match(r"dense_resource<([^>]+)>", str(attr))
        if not m:
            return None
        name = m.group(1)
        blob = self.resources.get(name)
        if blob is None:  # the frontend's record of it (FastLiterals), asked first: no print at all
            raw = resource_bytes(attr)
            blob = None if raw is None else memoryview(raw)
        if blob is None and not self._blobs_read:
            # The small blobs of one print of the whole module (an ONNX
            # model's; 3 s for BERT-base's torch module, whose weights the
            # record has); a large blob is elided there.
            self._read_small_blobs()
            blob = self.resources.get(name)
        if blob is None:  # a print of the op being converted alone, when the attribute is that op's
            raw = resource_bytes(attr, self._holder(attr))
            blob = None if raw is None else memoryview(raw)
        if isinstance(blob, (bytes, memoryview)):
            t = ir.RankedTensorType(attr.type)
            el = str(t.element_type)
            np_type = {"si64": np.int64, "i64": np.int64, "si32": np.int32, "i32": np.int32, "i1": np.bool_,
                       "si8": np.int8, "ui8": np.uint8, "si16": np.int16, "f16": np.float16,
                       "f32": np.float32, "f64": np.float64}.get(el)
            if np_type is None:
                return None
            blob = np.frombuffer(blob, dtype=np_type).reshape(t.shape)
            self.resources[name] = blob
        return blob

    def _holder(self, attr) -> ir.Operation | None:
        """The op being converted when ``attr`` is one of its attributes (so a
        print of that op alone holds its blob), else None."""
        op = self._op
        if op is None:
            return None
        for a in op.attributes:  # names in these bindings, NamedAttributes in others
            if (op.attributes[a] if isinstance(a, str) else a.attr) == attr:
                return op
        return None

    def _read_small_blobs(self) -> None:
        """Read the small dense resources (shape-like integer tensors) from the
        module's printed form: the bindings give no access to a blob's bytes.
        Large blobs are elided in that print, so this stays cheap."""
        self._blobs_read = True
        text = self.module_op.get_asm(large_resource_limit=4096)
        start = text.rfind("dialect_resources")
        if start < 0:
            return
        for name, hexdata in re.findall(r'([\w.$-]+): "0x([0-9A-Fa-f]+)"', text[start:]):
            # The first 4 bytes of a printed blob hold its alignment.
            self.resources.setdefault(name, bytes.fromhex(hexdata)[4:])

    def splat(self, value, dtype: str, shape, loc):
        t = ir.Type.parse(dtype)
        if dtype.startswith("f") or dtype == "bf16":
            el = ir.FloatAttr.get(t, float(value))
        else:
            el = ir.IntegerAttr.get(t, int(value))
        attr = ir.DenseElementsAttr.get_splat(ir.RankedTensorType.get(list(shape), t), el)
        return create_op("constant", attrs={"value": attr}, loc=loc).operation.results[0]

    def materialize(self, k: Known, loc) -> ir.Value:
        arr = k.array()
        if k.dtype == "i1":
            arr = arr.astype(np.bool_)
        else:
            arr = arr.astype(NUMPY_DTYPES.get(k.dtype, arr.dtype))
        t = ir.Type.parse(k.dtype)
        attr = ir.DenseElementsAttr.get(np.ascontiguousarray(arr), type=t, shape=list(arr.shape))
        return create_op("constant", attrs={"value": attr}, loc=loc).operation.results[0]

    def fresh_symbol(self) -> str:
        name = f"d{self._fresh}"
        while name in self.symbols:
            self._fresh += 1
            name = f"d{self._fresh}"
        self._fresh += 1
        self.symbols[name] = (1, SYMBOL_MAX)
        self.stats.fresh_symbols.append(name)
        return name

    # -- the walk ----------------------------------------------------------

    def run(self) -> ConversionStats:
        body = self.module_op.regions[0].blocks[0]
        funcs = [op for op in body.operations if op.operation.name == "func.func"]
        for f in funcs:
            self._prescan(f.operation)
        for f in funcs:
            self._convert_func(f.operation)
        self._declare_symbols(body)
        if self.stats.unsupported and not self.fallback:
            lines = [f"  {name} at {self._loc_text.get(loc, loc)}: {why}" for name, loc, why in self.stats.unsupported]
            raise UnsupportedError(
                f"{len(lines)} op(s) kiln cannot convert (fallback disabled):\n" + "\n".join(lines)
            )
        check_legal(self.module_op)
        return self.stats

    def _prescan(self, f) -> None:
        """Read symbols and shape bindings; drop the symbolic-shape ops."""
        syms: dict = {}
        block = f.regions[0].blocks[0]
        for op in block.operations:
            name = op.operation.name
            if name == "torch.symbolic_int":
                raw = ir.StringAttr(op.attributes["symbol_name"]).value
                if not _IDENTIFIER.fullmatch(raw):
                    # A derived Dim (``2*L``, ``L+1``) is an expression of its
                    # root's symbol, named by torch's text ("2*s27"): a value,
                    # not a symbol of its own (its range follows from the root's).
                    syms[op.operation.results[0]] = self._derived(raw)
                    continue
                sym = self.symbol_names.get(raw, raw)
                lo = ir.IntegerAttr(op.attributes["min_val"]).value
                hi = ir.IntegerAttr(op.attributes["max_val"]).value
                if lo > hi:
                    raise KilnError(f"symbol '{sym}' has min {lo} > max {hi}")
                prev = self.symbols.get(sym)
                self.symbols[sym] = (max(lo, 1 if prev is None else prev[0]), hi if prev is None else min(hi, prev[1]))
                syms[op.operation.results[0]] = sym
        for op in block.operations:
            if op.operation.name == "torch.bind_symbolic_shape":
                value = op.operation.operands[0]
                names = [syms.get(s, "?") for s in list(op.operation.operands)[1:]]
                amap = ir.AffineMapAttr(op.attributes["shape_expressions"]).value
                self.bound[value] = affine_dims(amap, names)
        for op in reversed(list(block.operations)):
            if op.operation.name == "torch.bind_symbolic_shape":
                op.operation.erase()
        for op in reversed(list(block.operations)):
            if op.operation.name == "torch.symbolic_int":
                for r in op.operation.results:
                    self.values[r] = syms[r] if isinstance(syms[r], Dim) else dim(syms[r])
                # Remaining uses (if any) are in ops we convert; keep the op until the end.

    def _derived(self, text: str) -> Dim:
        """The dim of a derived symbol's torch text (``"2*s27"``, ``"s38 + 1"``),
        over the user's symbol names."""
        renamed = _IDENTIFIER.sub(lambda m: self.symbol_names.get(m.group(0), m.group(0)), text)
        try:
            return dim(renamed)
        except KilnError as e:
            raise ConversionError(f"derived symbol '{text}' is not a kiln dim expression: {e.message}") from None

    def _convert_func(self, f) -> None:
        block = f.regions[0].blocks[0]
        attrs = f.attributes
        self.opset = ir.IntegerAttr(attrs["torch.onnx_meta.opset_version"]).value if (
            "torch.onnx_meta.opset_version" in attrs) else 0
        for i, arg in enumerate(block.arguments):
            if not is_tensor_type(arg.type):
                raise UnsupportedError(f"function argument #{i} has type {arg.type}: kiln takes tensors only")
            dims = self.bound.get(arg)
            if i in self.arg_dims:
                dims = [dim(d) for d in self.arg_dims[i]]
            try:
                base, _ = self.types.parse(arg.type)
                if any(d.is_unknown for d in base) and dims is None:
                    dims = [d if not d.is_unknown else dim(self.fresh_symbol()) for d in base]
                arg.set_type(self.types.convert(arg.type, dims))
            except Decline as e:
                raise UnsupportedError(f"function argument #{i}: {e}") from None
            self.values[arg] = arg
        ops = list(block.operations)
        for op in ops:
            op = op.operation
            if op.name == "func.return":
                self._convert_return(f, op)
                continue
            if op.name == "torch.symbolic_int":
                continue
            self._convert_op(op)
        for op in reversed(ops):
            op = op.operation
            if op.name.startswith("torch."):
                op.erase()

    def _convert_return(self, f, op) -> None:
        results = []
        for i, v in enumerate(op.operands):
            new = self.values.get(v)
            if isinstance(new, Known):
                ip = ir.InsertionPoint(op)
                with ip:
                    new = self.materialize(new, op.location)
            if not isinstance(new, ir.Value):
                raise UnsupportedError(f"result #{i} of @{ir.StringAttr(f.attributes['sym_name']).value} "
                                       f"({describe_type(v.type)}) is not a tensor kiln can return")
            op.operands[i] = new
            results.append(new.type)
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        inputs = [a.type for a in f.regions[0].blocks[0].arguments]
        f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
        del ftype

    def op_name(self, op) -> str:
        if op.name == "torch.operator":
            return ir.StringAttr(op.attributes["name"]).value
        return op.name

    def _convert_op(self, op) -> None:
        name = self.op_name(op)
        fn = self.patterns.get(name)
        cx = OpContext(self, op, name)
        self._op = op
        reason = "no kiln pattern for this op"
        if name == "torch.vtensor.literal" and str(op.results[0].type).endswith(",ui8>"):
            try:
                self._record(op, name, cx, (self._unsigned_literal(op),))
                return
            except Decline as e:
                reason = str(e)
        with ir.InsertionPoint(op), op.location:
            if any(hook(self, op, name, cx) for hook in IMPORT_HOOKS):  # registered from user code
                return
            if name.startswith("onnx."):  # all operands known at import: evaluated here (onnx_fold)
                from .onnx_fold import fold_known

                folded = fold_known(cx)
                if folded is not None:
                    self._record(op, name, cx, folded)
                    return
            if fn is not None:
                try:
                    out = fn(cx)
                    if not isinstance(out, tuple):  # a list is one (folded) value
                        out = (out,)
                    if len(out) != len(op.results):
                        raise Decline(f"pattern produced {len(out)} results for {len(op.results)}")
                    self._record(op, name, cx, out)
                    return
                except Decline as e:
                    reason = str(e)
                except KilnError as e:  # a DimError / VerifyError while folding: decline too
                    reason = e.message
            self._fallback(op, name, reason)

    def _unsigned_literal(self, op) -> Known:
        """A ``ui8`` literal as a known tensor of a dtype kiln has.

        torch-mlir imports every ``bool`` tensor (GPT-Neo's causal-mask
        buffer) as a ``ui8`` literal converted to ``i1``; kiln has no unsigned
        dtypes.  Data of only 0 and 1 (a mask) becomes ``i1``, other data
        ``i16``, which holds every uint8 value: the consumer (the conversion to
        ``i1``, a cast, a slice) sees the same values.  Arithmetic *in* uint8
        (wrapping at 256) still has no kiln form: its result type stops it."""
        value = op.attributes["value"]
        arr = self.resource(value)
        if arr is None and isinstance(value, ir.DenseElementsAttr):
            shape = ir.RankedTensorType(value.type).shape
            if value.is_splat:
                arr = np.full(shape, int(ir.IntegerAttr(value.get_splat_value()).value) & 0xFF, dtype=np.uint8)
            else:
                arr = np.array(value).astype(np.uint8).reshape(shape)
        if arr is None:
            raise Decline("ui8 constant without data")
        arr = np.asarray(arr, dtype=np.uint8)
        if arr.size and arr.max() <= 1:
            return Known(arr.astype(np.bool_), "i1")
        return Known(arr.astype(np.int16), "i16")

    def _record(self, op, name, cx, out) -> None:
        self.checks.extend(cx.checks)
        for r, v in zip(op.results, out):
            if isinstance(v, ir.Value):
                v = self._refine(r, v)
            self.values[r] = v
        if name in STRUCTURAL:
            return
        (self.stats.decomposed if cx.kiln_ops > 1 else self.stats.converted)[name] += 1
        self.stats.flops["converted"] += _flops(name, op, out)

    def _refine(self, r: ir.Value, v: ir.Value) -> ir.Value:
        """Fill ``?`` dims of a kiln result from the torch type or its binding."""
        if not is_tensor_type(r.type):
            return v
        info = tensor_info(v.type)
        if not any(d.is_unknown for d in info.dims):
            return v
        try:
            base, _ = self.types.parse(r.type)
        except Decline:
            return v
        bound = self.bound.get(r) or base
        if len(bound) != len(info.dims):
            return v
        dims = [b if d.is_unknown else d for d, b in zip(info.dims, bound)]
        if v.owner is not None and len(v.owner.results) == 1:
            v.set_type(tensor_type(dims, info.dtype))
        return v

    def _fallback(self, op, name, reason) -> None:
        loc = str(op.location)
        self._loc_text[loc] = location_text(op.location)  # what messages print (file:line, node 'x')
        self.stats.unsupported.append((name, loc, reason))
        if not self.fallback:
            op.location.emit_error(f"unsupported op '{name.removeprefix('torch.')}': {reason}")
        self.stats.fallback[name] += 1
        if self.fallback and name.startswith("onnx."):  # no torch.ops twin: a one-node model for ONNX Runtime
            from .onnx_fallback import onnx_fallback

            onnx_fallback(self, op, name, reason)
            return
        operands, attrs, listed = [], {}, {}
        for i, v in enumerate(op.operands):
            val = self.values.get(v)
            if isinstance(val, Known):
                try:
                    val = self.materialize(val, op.location)
                except Decline:  # a symbolic shape tensor: keep it as dims
                    val = val.data
            if isinstance(val, ir.Value):
                operands.append(val)
            elif isinstance(val, list) and any(isinstance(x, (ir.Value, Known)) for x in val):
                listed[i] = val  # a list of tensors (aten.index's indices): after the direct operands
            else:
                attrs[f"operand{i}"] = _scalar_attr(val)
        for i, val in listed.items():
            # Each tensor of the list becomes an operand; the attribute holds
            # "%operand<k>" markers (and None) in the list's order.
            items = []
            for x in val:
                if isinstance(x, Known):
                    x = self.materialize(x, op.location)
                if isinstance(x, ir.Value):
                    items.append(ir.StringAttr.get(f"%operand{len(operands)}"))
                    operands.append(x)
                else:
                    items.append(_scalar_attr(x))
            attrs[f"operand{i}"] = ir.ArrayAttr.get(items)
        for a in op.attributes:
            key = a if isinstance(a, str) else a.name
            if key != "name":
                attrs[key] = op.attributes[key]
        results = []
        for i, r in enumerate(op.results):
            # A result kiln has no type for (a sequence, a string, a dtype
            # such as ui8) cannot be a kiln.fallback result either: kiln
            # lacks the feature, wherever in the graph it is.
            if not is_tensor_type(r.type):
                raise UnsupportedError(f"{name} at {self._loc_text[loc]}: result #{i} has {describe_type(r.type)}, which kiln does "
                                       f"not support (kiln values are tensors; {reason})")
            try:
                dims = OpContext(self, op, name).result_dims(i)
            except Decline as e:
                raise UnsupportedError(f"{name} at {self._loc_text[loc]}: result #{i}: {e}") from None
            dims = [d if not d.is_unknown else dim(self.fresh_symbol()) for d in dims]
            results.append(self.types.convert(r.type, dims))
        if len(operands) > MAX_VARIADIC or len(results) > FallbackOp.MAX_RESULTS:
            raise ConversionError(f"{name} at {self._loc_text[loc]}: too many operands/results for kiln.fallback ({reason})")
        fb = create_op(
            "fallback", operands, results=results, loc=op.location,
            attrs={"op_name": name.removeprefix("torch."), "attrs": ir.DictAttr.get(attrs) if attrs else None},
        )
        for r, v in zip(op.results, fb.operation.results):
            self.values[r] = v

    def _declare_symbols(self, body) -> None:
        first = body.operations[0] if len(body.operations) else None
        ip = ir.InsertionPoint(first) if first is not None else ir.InsertionPoint(body)
        with ip, ir.Location.unknown():
            for name, (lo, hi) in self.symbols.items():
                create_op("symbol", attrs={"sym_name": name, "min": lo, "max": hi})
            if self.checks:
                self.module_op.attributes[CHECKS_ATTR] = ir.ArrayAttr.get(
                    [ir.StringAttr.get(c) for c in self.checks])


def _scalar_attr(v) -> ir.Attribute:
    if v is None:
        return ir.UnitAttr.get()
    if isinstance(v, bool):
        return ir.BoolAttr.get(v)
    if isinstance(v, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
    if isinstance(v, float):
        return ir.FloatAttr.get(ir.F64Type.get(), v)
    if isinstance(v, Dim):
        return ir.StringAttr.get(str(v))
    if isinstance(v, (list, tuple)):
        return ir.ArrayAttr.get([_scalar_attr(x) for x in v])
    return ir.StringAttr.get(str(v))


def _flops(name, op, out) -> float:
    """Rough FLOPs of a converted op with symbols at 1 (0 when unknown)."""
    return 0.0


def check_legal(module_op) -> None:
    """The conversion target: no ``torch.*`` op may remain."""
    left = [f"{op.name} at {op.location}" for op in ops_where(module_op, lambda op: op.name.startswith("torch."))]
    if left:
        raise ConversionError("torch ops left after conversion to kiln:\n  " + "\n  ".join(left[:20]))


def convert_torch_to_kiln(module_op, patterns, **kw) -> ConversionStats:
    """Convert ``module_op`` in place; returns the statistics."""
    return TorchToKiln(module_op, patterns, **kw).run()
