"""``convert-kiln-to-linalg``: the Dialect Conversion from kiln to linalg on tensors.

The recipe of MLIR's Toy tutorial, in Python:

* :class:`KilnTypeConverter` maps ``!kiln.tensor<["B", "L", 256], f32>`` to
  ``tensor<?x?x256xf32>`` (other types unchanged); its callback is owned by
  the converter object, so it lives as long as the converter (MLIR_NOTES
  sharp edge 1).
* :func:`conversion_target`: the kiln dialect is illegal (passed as a class,
  sharp edge 2) except ``kiln.symbol`` and ``kiln.fallback``; linalg, tensor,
  arith, math and ``func.func`` are legal.  ``func.return`` is left
  "unknown" so its pattern rewrites kiln-typed returns.
* :func:`populate_kiln_to_linalg` adds one conversion pattern per kiln op from
  the lowering table (``lower_<op>`` functions in ``elementwise``, ``nn`` and
  ``data``).
* Function signatures are converted before the patterns run: block
  arguments get their builtin types, an ``unrealized_conversion_cast`` gives
  the kiln ops their old values, and each symbol gets one ``index`` value
  (``tensor.dim`` of the first argument dim naming it) at the function entry.
  The casts fold away (``reconcile-unrealized-casts``) once every op is
  converted.

A kiln op that ``kiln-select-kernels`` chose a library kernel for
(``kiln.impl``) lowers to that call's placeholder instead
(:mod:`.library_call`).

``kiln.fused`` ops (issue 6) are inlined first: their bodies hold ordinary
kiln ops.
"""

from __future__ import annotations

import sympy

from ..._mlir import func, ir, passmanager, rewrite
from ...context import DiagnosticCollector
from ...dialects.dims import UNKNOWN, dim
from ...dialects.kiln import OPS, FallbackOp, SymbolOp, TensorInfo, TensorType, tensor_info
from ...errors import ConversionError, Diagnostic, KilnError, diagnostic_from_mlir, location_fields
from ...module import ops_where
from ...pipelines.registry import Pass, register_pass
from .. import framework
from . import attention, data, elementwise, nn, quant, rms_norm
from .common import DimEnv, Lowering, builtin_tensor_type, const_index, storage_info
from .library_call import (
    CONTRACTIONS,
    IMPL_ATTR,
    OPERAND_TYPES,
    is_epilogue_step,
    lower_library_call,
    mark_epilogue_step,
    recorded_operand_types,
)

__all__ = ["ConvertKilnToLinalg", "KilnTypeConverter", "LOWERINGS", "conversion_target", "populate_kiln_to_linalg"]

#: kiln op name -> ``lower_<op>(Lowering) -> [result values]``.
LOWERINGS: dict = {**elementwise.table(), **nn.table(), **attention.table(), **data.table(), **rms_norm.table(),
                   **quant.table()}


def _to_builtin(t: ir.Type):
    """``!kiln.tensor`` -> ``tensor<...>``; any other type is already legal."""
    if isinstance(t, TensorType):
        return builtin_tensor_type(tensor_info(t))
    return t


class KilnTypeConverter(framework.KilnTypeConverter):
    """The kiln -> builtin tensor TypeConverter (it keeps its callback alive)."""

    def __init__(self):
        super().__init__()
        self.add(_to_builtin)


def conversion_target() -> rewrite.ConversionTarget:
    """kiln illegal (but symbols and fallbacks), linalg/tensor/arith/math legal."""
    return framework.conversion_target(
        legal=["linalg", "tensor", "arith", "math"],
        illegal=["kiln"],
        legal_ops=[SymbolOp, FallbackOp, func.FuncOp],
    )


def _as_value(v) -> ir.Value:
    """Builders return values, op views or result lists: one value each."""
    if isinstance(v, ir.Value):
        return v
    if isinstance(v, (ir.OpView, ir.Operation)):
        return v.results[0]
    if isinstance(v, ir.OpResultList):
        return v[0]
    return v


# Attributes set on ops before the conversion runs.  Patterns must not read
# the types of an op's *original* operands: the conversion may already have
# erased their producers (reading them was a use-after-free, seen as heap
# corruption), so each kiln op carries its operand types (OPERAND_TYPES).
_MARK = "kiln.convert_return"


def _operand_infos(op) -> list[TensorInfo]:
    return [_info_of_type(t) for t in recorded_operand_types(op) or []]


def _info_of_type(t) -> TensorInfo:
    if isinstance(t, TensorType):
        return tensor_info(t)
    rt = ir.RankedTensorType(t)
    return TensorInfo(tuple(UNKNOWN if ir.ShapedType.is_dynamic_size(s) else dim(s) for s in rt.shape), rt.element_type)


def _annotate(module) -> None:
    """Record operand types on kiln ops and mark the returns to convert."""

    def visit(op):
        if op.name.startswith("kiln.") and op.name not in ("kiln.symbol", "kiln.fallback"):
            op.attributes[OPERAND_TYPES] = ir.ArrayAttr.get([ir.TypeAttr.get(v.type) for v in op.operands])
        elif op.name == "func.return" and any(isinstance(v.type, TensorType) for v in op.operands):
            op.attributes[_MARK] = ir.UnitAttr.get()
        return ir.WalkResult.ADVANCE

    module.walk(visit)


def _parent_function(op):
    p = op.parent
    while p is not None and p.name != "func.func":
        p = p.parent
    return p


def _diagnostics(errors) -> list[Diagnostic]:
    """``(location, message)`` pairs as error diagnostics at those locations."""
    return [Diagnostic("error", loc, msg, **location_fields(loc)) for loc, msg in errors]


class _Driver:
    """State of one conversion run: the dim environments and the errors seen.

    A lowering builds its ops with the Python builders, which the conversion
    driver does not see.  Were a pattern to fail after building some of them,
    or the conversion to fail and roll back the rewrites it tracked, ops it
    never knew of would be left using values the rollback frees: the heap
    corruption that crashed the next compile in the process.  So each lowering
    builds into a detached staging block, whose ops are moved before the kiln
    op when it succeeds and erased when it fails; and a failed lowering still
    *replaces* its op (with an operand-less cast of the result types), so the
    conversion itself never fails on a lowering error and never rolls back.
    The errors are raised once it has finished.
    """

    def __init__(self):
        self.envs: dict[str, DimEnv] = {}
        self.errors: list[tuple[str, str]] = []
        # A detached op whose one block stages each lowering's new ops (empty between patterns).
        self._stage_op = ir.Operation.create("builtin.module", regions=1, loc=ir.Location.unknown())
        self._stage = ir.Block.create_at_start(self._stage_op.regions[0], [])

    def diagnostics(self) -> list[Diagnostic]:
        """The lowering errors, as diagnostics at their ops' locations."""
        return _diagnostics(self.errors)

    def env_of(self, op) -> DimEnv:
        fn = _parent_function(op)
        key = ir.StringAttr(fn.attributes["sym_name"]).value if fn is not None else ""
        return self.envs.get(key) or DimEnv({})

    def _staged(self) -> list:
        return list(self._stage.operations)

    def pattern(self, lower):
        def apply(op, adaptor, converter, rewriter):
            try:
                lw = Lowering(
                    op=op,
                    operands=list(adaptor.operands),
                    infos=[storage_info(i) for i in _operand_infos(op)],
                    results=[storage_info(tensor_info(r.type)) for r in op.results],
                    attrs=op.opview.decoded_attrs(),
                    env=self.env_of(op),
                )
                with ir.InsertionPoint(self._stage), op.location:
                    values = [_as_value(v) for v in _lower_chosen(lw, lower)]
            except Exception as e:  # a bug in a lowering must not crash MLIR (sharp edge 4)
                message = e.message if isinstance(e, KilnError) else (
                    f"'{op.name}' lowering failed: {type(e).__name__}: {e}")
                self.errors.append((str(op.location), message))
                for staged in reversed(self._staged()):
                    staged.erase()
                with rewriter.ip, op.location:
                    types = [converter.convert_type(r.type) or r.type for r in op.results]
                    values = ir.Operation.create("builtin.unrealized_conversion_cast", results=types).results
                rewriter.replace_op(op, list(values))
                return False
            if is_epilogue_step(op):
                mark_epilogue_step(op, self._staged())
            for staged in self._staged():
                staged.move_before(op)
            rewriter.replace_op(op, values)
            return False

        return apply

    @staticmethod
    def lower_return(op, adaptor, converter, rewriter):
        if _MARK not in op.attributes:
            return True  # a return this conversion built: already legal
        with rewriter.ip, op.location:
            func.ReturnOp(list(adaptor.operands))
        rewriter.erase_op(op)
        return False


def _lower_chosen(lw: Lowering, lower) -> list:
    """``lw``'s op lowered to its library kernel's placeholder when
    kiln-select-kernels chose one (``kiln.impl``), else by ``lower``.  A
    product's own lowering marks its contraction as the placeholder
    (:data:`CONTRACTIONS`), and an epilogue step its own loops (marked)."""
    entry = ir.StringAttr(lw.op.attributes[IMPL_ATTR]).value if IMPL_ATTR in lw.op.attributes else None
    if entry is not None and entry not in CONTRACTIONS and not is_epilogue_step(lw.op):
        return lower_library_call(lw, entry)
    return lower(lw)


def populate_kiln_to_linalg(patterns: rewrite.RewritePatternSet, converter: KilnTypeConverter, driver: _Driver) -> None:
    """Add one conversion pattern per kiln op of :data:`LOWERINGS`, and ``func.return``'s."""
    for name, lower in LOWERINGS.items():
        if name in OPS:
            patterns.add_conversion(OPS[name], driver.pattern(lower), converter.converter)
    patterns.add_conversion("func.return", driver.lower_return, converter.converter)


def _inline_fused(module) -> None:
    try:
        from ...dialects.kiln.fused import inline_fused
    except ImportError:
        return
    for op in ops_where(module, lambda op: op.name == "kiln.fused"):
        inline_fused(op)


def _functions(module):
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks):
            yield op.operation


def _convert_signature(fn, converter: KilnTypeConverter) -> DimEnv:
    """Give the entry block builtin-typed arguments and the symbols their values."""
    block = fn.regions[0].blocks[0]
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    ip = ir.InsertionPoint.at_block_begin(block)
    first_use: dict[str, tuple] = {}
    derived: list[tuple] = []  # (dim, argument, axis) of the expression dims
    converted = []
    with fn.location:
        for i, arg in enumerate(block.arguments):
            old = arg.type
            new = converter.convert(old)
            converted.append(new)
            if isinstance(old, TensorType):
                for axis, d in enumerate(tensor_info(old).dims):
                    if d.is_symbol:
                        first_use.setdefault(str(d), (i, axis))
                    elif not d.is_static and not d.is_unknown:
                        derived.append((d, i, axis))
                arg.set_type(new)
                cast = ir.Operation.create("builtin.unrealized_conversion_cast", results=[old], operands=[arg], ip=ip)
                arg.replace_all_uses_except(cast.result, cast)
        symbols = {}
        for name, (i, axis) in first_use.items():
            with ip:
                symbols[name] = _tensor_dim(block.arguments[i], axis)
        with ip:
            _solve_derived_symbols(derived, block, symbols)
    results = [converter.convert(t) for t in ftype.results]
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(converted, results))
    return DimEnv(symbols)


def _solve_derived_symbols(derived: list[tuple], block, symbols: dict[str, ir.Value]) -> None:
    """Values for symbols that no argument has as an exact dim but some argument
    dim is linear in: ``F = (d - c) / a`` for a dim ``d = a*F + c`` whose ``a``
    and ``c`` use known symbols only (``10*F`` from a derived export ``Dim``,
    ``B*L`` with ``L`` known).  Repeated while it finds more; a symbol still
    missing is reported where a lowering needs it."""
    from ..._mlir import arith

    pending = list(derived)
    while pending:
        left = []
        for d, i, axis in pending:
            unknown = [s for s in d.expr.free_symbols if s.name not in symbols]
            if len(unknown) != 1:
                if unknown:
                    left.append((d, i, axis))
                continue
            try:
                poly = sympy.Poly(d.expr, unknown[0])
            except sympy.PolynomialError:  # under a FloorDiv: not solvable here
                continue
            if poly.degree() != 1:
                continue
            a, c = poly.all_coeffs()
            env = DimEnv(symbols)
            value = _tensor_dim(block.arguments[i], axis)
            if c != 0:
                value = arith.subi(value, env.value(dim(c)))
            symbols[unknown[0].name] = value if a == 1 else arith.divsi(value, env.value(dim(a)))
        if len(left) == len(pending):
            return
        pending = left


def _tensor_dim(v: ir.Value, axis: int) -> ir.Value:
    from ..._mlir import tensor

    return tensor.dim(v, const_index(axis))


def _fallbacks(module) -> list:
    """The ``kiln.fallback`` ops of ``module``."""
    return ops_where(module, lambda op: op.name == "kiln.fallback")


def _fallback_feeds_lowered(module) -> list[tuple[str, str]]:
    """``(location, message)`` for each ``kiln.fallback`` whose result a
    lowered op (or the function's return) uses.

    A fallback stays a kiln op (it runs with PyTorch, in a kernel of its own
    after ``kiln-partition``); a lowered user of its result would need a
    cast the conversion cannot make, and MLIR's own message for that
    ("failed to legalize unresolved target materialization") names neither
    the op nor the way out.
    """
    found = []
    for op in _fallbacks(module):
        users = {use.owner.name for r in op.results for use in r.uses} - {"kiln.fallback"}
        if users:
            name = ir.StringAttr(op.attributes["op_name"]).value
            found.append((str(op.location), f"kiln.fallback '{name}' feeds {', '.join(sorted(users))}, which "
                          "convert-kiln-to-linalg lowers: run kiln-partition first (a fallback runs with "
                          "PyTorch in a kernel of its own)"))
    return found


#: Modules whose conversion failed inside MLIR (see convert_kiln_to_linalg): never freed.
_QUARANTINE: list = []


def _without_lowering(module) -> list[tuple[str, str]]:
    """``(location, message)`` for each kiln op that no ``lower_<op>`` handles."""
    kept = ("kiln.symbol", "kiln.fallback", "kiln.fused", "kiln.yield")
    return [(str(op.location), f"'{op.name}' has no lowering to linalg")
            for op in ops_where(module, lambda op: op.name.startswith("kiln.") and op.name not in kept
                                and op.name not in LOWERINGS)]


def convert_kiln_to_linalg(module) -> None:
    """Run the conversion on a ``builtin.module`` op in place; ConversionError on failure."""
    # Every way the conversion itself could fail is checked before it runs: a
    # failed conversion rolls back its tracked rewrites under the ops the
    # lowerings built (see _Driver), which corrupts the heap.
    blocked = _fallback_feeds_lowered(module) + _without_lowering(module)
    if blocked:
        raise ConversionError("convert-kiln-to-linalg failed", _diagnostics(blocked))
    _inline_fused(module)
    quant.widen_unsigned(module)  # ui8 is held as i8: signed integer ops run in i16 instead
    _annotate(module)
    converter = KilnTypeConverter()
    driver = _Driver()
    for fn in _functions(module):
        driver.envs[ir.StringAttr(fn.attributes["sym_name"]).value] = _convert_signature(fn, converter)
    patterns = rewrite.RewritePatternSet()
    populate_kiln_to_linalg(patterns, converter, driver)
    target = conversion_target()
    ctx = module.context
    with DiagnosticCollector(ctx) as collector:
        try:
            rewrite.apply_partial_conversion(module, target, patterns.freeze())
        except ir.MLIRError as e:
            # Not reached by any known input (the checks above); should it be,
            # the rollback left the lowerings' ops using freed values, and
            # destroying them would corrupt the heap: the module is kept alive
            # (leaked) rather than freed.
            _QUARANTINE.append(module)
            diags = [diagnostic_from_mlir(d) for d in e.error_diagnostics] or collector.errors
            raise ConversionError("convert-kiln-to-linalg failed", driver.diagnostics() + diags) from None
    if driver.errors:
        raise ConversionError("convert-kiln-to-linalg failed", driver.diagnostics())
    # Function results take the types of the values returned.
    for fn in _functions(module):
        ret = fn.regions[0].blocks[0].operations[len(fn.regions[0].blocks[0].operations) - 1]
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ftype.inputs), [v.type for v in ret.operands])
        )
    if not _fallbacks(module):
        pm = passmanager.PassManager.parse("builtin.module(reconcile-unrealized-casts,canonicalize,cse)", ctx)
        with DiagnosticCollector(ctx):
            try:
                pm.run(module)
            except ir.MLIRError as e:
                raise ConversionError(
                    "convert-kiln-to-linalg: cleanup failed", [diagnostic_from_mlir(d) for d in e.error_diagnostics]
                ) from None


@register_pass
class ConvertKilnToLinalg(Pass):
    """Lower every kiln op (but ``kiln.symbol`` and ``kiln.fallback``) to linalg on tensors."""

    name = "convert-kiln-to-linalg"
    summary = "Lower kiln ops to linalg/tensor/arith/math on builtin tensors with dynamic dims"

    def run(self, module) -> None:
        convert_kiln_to_linalg(module)
