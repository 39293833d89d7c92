"""A kiln op chosen for a library kernel, lowered to its destination-passing placeholder.

``kiln-select-kernels`` marks the op with ``kiln.impl`` (the registry
entry's name, e.g. ``native.layer_norm``).  Its lowering here is not the
op's loops but one ``linalg.generic`` that stands for the call:

- its ``library_call`` names the entry, ``kiln.call_args`` the op's
  operands present and its results (by their names in the op's
  definition), ``kiln.call_attrs`` the op's attributes with their defaults;
- its operands are the op's, its inits empty tensors of the results' types;
- each operand gets loop dims of its own (inputs' as ``reduction``,
  results' as ``parallel``), so the maps are valid for any ranks and no
  canonicalization can drop an operand, and the payload (never run) uses
  every operand, so bufferization knows the call reads them.

Bufferization places its output like any other destination-passing op's;
``kiln-cpu-library-calls`` then replaces it with the entry's native call
(:mod:`kiln.backends.cpu.calls`).

A product (an entry of :data:`CONTRACTIONS`: ``kiln.matmul``, ``kiln.matmul_w8``,
``kiln.matmul_integer``, ``kiln.conv2d``'s im2col product) is lowered by
its own lowering instead, and its contraction -- a ``linalg.generic`` whose
maps say which loop is a batch, the rows, the columns and the reduction --
is the placeholder (:func:`mark_contraction`: ``library_call``,
``kiln.call_attrs``, ``kiln.call_dtypes``).  It stays runnable code: the
native GEMM helpers read the operands' roles and layouts from its maps,
and where they cannot take it (a transposed A, a strided row) it runs as
generated loops.

An op the chosen call applies after a product or convolution (a bias add,
an activation, a residual add, a pool: ``kiln.epilogue`` names its role,
:mod:`kiln.backends.cpu.epilogues`) is lowered by its own lowering too, and
each linalg op it builds carries the role as its ``kiln.call_part``
(:func:`mark_epilogue_step`); a convolution's lowering marks its own zero
padding, bias init and im2col copy the same way (:func:`mark_part`).  The
call takes those ops over, or they run as the loops they are.
"""

from __future__ import annotations

from ..._mlir import arith, ir
from ...dialects.kiln import is_float
from ...transforms._graph import EPILOGUE_ATTR, IMPL_ATTR, WHY_ATTR
from .common import Lowering, affine_map, generic

__all__ = ["CALL_ARGS", "CALL_ATTRS", "CALL_DTYPES", "CALL_PART", "CONTRACTIONS", "CONV2D", "GEMM", "IMPL_ATTR", "LIBRARY_CALL",
           "WHY_ATTR", "chosen", "is_epilogue_step", "lower_library_call", "mark_contraction", "mark_epilogue_step",
           "mark_part", "op_attributes", "recorded_operand_types"]

#: On a placeholder: the names of its operands (the kiln op's operands present, then its results).
CALL_ARGS = "kiln.call_args"
#: On a placeholder: the kiln op's attributes, defaults filled in.
CALL_ATTRS = "kiln.call_attrs"
#: The placeholder's attribute naming the entry (upstream linalg's own).
LIBRARY_CALL = "library_call"
#: On a contraction placeholder: the kiln dtypes of the op's operands, then of its result
#: (``ui8`` and ``i8`` are both ``i8`` in memref types).
CALL_DTYPES = "kiln.call_dtypes"
#: The library GEMM (OpenBLAS sgemm, kiln's native GEMMs; kiln-cpu-library): the
#: entry of an f32 kiln.matmul, and of the f32 products inside the generated
#: code of an attention (``kiln.parts``).
GEMM = "native.gemm"
#: The library convolution: an f32 ``kiln.conv2d``'s im2col contraction, which
#: kiln-cpu-library calls as the native convolution (its im2col gathered in the call)
#: or as the library GEMM.
CONV2D = "native.conv2d"
#: On a linalg op that a chosen op's call takes over: its part -- the role of
#: an epilogue step (``"bias"``, ``"relu"``, ...: :func:`mark_epilogue_step`), or
#: a piece of the op's own lowering (a convolution's ``"pad"``, ``"init"``,
#: ``"im2col"``: :func:`mark_part`).  kiln-cpu-library reads it, never a body.
CALL_PART = "kiln.call_part"
#: On a kiln op before the conversion (set by it): its operands' types.
OPERAND_TYPES = "kiln.operand_types"
#: Library entries that take their op's own contraction as the placeholder
#: (:attr:`~kiln.backends.cpu.calls.LibraryCall.contraction`; the test of
#: the op table checks the two agree): the products of ``kiln.matmul``,
#: ``kiln.matmul_w8``, ``kiln.matmul_integer`` and a ``kiln.conv2d``'s im2col
#: product (f32, or bf16 / f16).  Any other chosen entry (a depthwise convolution's too) gets
#: one placeholder for the whole op (:func:`lower_library_call`).
CONTRACTIONS = frozenset({GEMM, CONV2D, "native.matmul_lowp", "native.conv2d_lowp", "native.matmul_w8",
                          "native.matmul_integer"})

_SEGMENTS = ("operandSegmentSizes", "resultSegmentSizes")


def op_attributes(op) -> dict:
    """The kiln op's attributes, declared defaults filled in (kiln's own
    annotations such as ``kiln.impl`` left out; ``operandSegmentSizes`` as i64s)."""
    from ...dialects.kiln import encode_attr

    view = op.opview
    out = {}
    for name, spec in getattr(view, "ATTRS", {}).items():
        if name in op.attributes:
            out[name] = op.attributes[name]
        elif spec.default is not None:
            out[name] = encode_attr(spec, spec.default)
    for a in op.attributes:  # present but undeclared (kept as they are)
        key = a if isinstance(a, str) else a.name
        if key == "operandSegmentSizes":  # which optional operands are there (layer_norm's weight, bias)
            out[key] = ir.DenseI64ArrayAttr.get([int(n) for n in ir.DenseI32ArrayAttr(op.attributes[key])])
        elif key not in out and key not in _SEGMENTS and not key.startswith("kiln."):  # kiln's own annotations
            out[key] = op.attributes[key]
    return out


def chosen(lw: Lowering) -> str | None:
    """The library kernel kiln-select-kernels chose for ``lw``'s op (``kiln.impl``), or None."""
    return ir.StringAttr(lw.op.attributes[IMPL_ATTR]).value if IMPL_ATTR in lw.op.attributes else None


def mark_contraction(lw: Lowering, value: ir.Value, entry: str | None = None) -> ir.Value:
    """Make the ``linalg.generic`` that computes ``value`` (``lw``'s op's
    contraction) the placeholder of the library kernel chosen for the op,
    when there is one (or of ``entry``: :data:`GEMM` for the f32 products
    inside an op lowered to generated code); ``value``."""
    entry = entry or chosen(lw)
    if entry is not None:
        from ...dialects.kiln import tensor_info

        op = value.owner
        op.attributes[LIBRARY_CALL] = ir.StringAttr.get(entry)
        op.attributes[CALL_ATTRS] = ir.DictAttr.get(op_attributes(lw.op))
        # The operands' kiln types as recorded before the conversion (their
        # producers may be gone by now: never read the original operands).
        types = recorded_operand_types(lw.op)
        types = types if types is not None else [v.type for v in lw.op.operands]
        dtypes = [str(tensor_info(t).dtype) for t in [*types, *(r.type for r in lw.op.results)]]
        op.attributes[CALL_DTYPES] = ir.ArrayAttr.get([ir.StringAttr.get(d) for d in dtypes])
    return value


def recorded_operand_types(op) -> list | None:
    """The types of ``op``'s operands recorded before the conversion
    (:data:`OPERAND_TYPES`), or None outside it."""
    if OPERAND_TYPES not in op.attributes:
        return None
    return [ir.TypeAttr(t).value for t in ir.ArrayAttr(op.attributes[OPERAND_TYPES])]


def is_epilogue_step(op) -> bool:
    """Whether ``op`` is a step a chosen call applies after its product (lowered by its own lowering)."""
    return EPILOGUE_ATTR in op.attributes


def mark_epilogue_step(op, built) -> None:
    """Give each linalg op in ``built`` (what ``op``'s lowering built) the
    epilogue role kiln-select-kernels gave ``op``, as its :data:`CALL_PART`."""
    role = op.attributes[EPILOGUE_ATTR]
    for new in built:
        if new.name.startswith("linalg."):
            new.attributes[CALL_PART] = role


def mark_part(lw: Lowering, value: ir.Value, part: str) -> ir.Value:
    """When ``lw``'s op was chosen for a library kernel, mark the linalg op
    computing ``value`` (a piece of the op's own lowering that the call
    takes over) as that :data:`CALL_PART`; ``value``."""
    if chosen(lw) is not None:
        value.owner.attributes[CALL_PART] = ir.StringAttr.get(part)
    return value


def _operand_names(view) -> list[str]:
    """The names of ``view``'s operands present, in order, then of its results."""
    operands, results = [], []
    for f in type(view)._fields:
        kind = type(f).__name__
        if kind == "OperandDef" and (f.variadicity.name != "optional" or getattr(view, f.name) is not None):
            operands.append(f.name)
        elif kind == "ResultDef":
            results.append(f.name)
    return operands + results


def _payload(inputs, outputs) -> list:
    """``out + in * 0`` for every input and output: never run (the call
    replaces it), but every block argument used, so one-shot bufferization
    sees the call *read* each operand (an operand whose argument the payload
    ignores counts as not read, and a write in place into its buffer before
    the call would go unseen).  ``x * 0.0`` does not fold without
    ``nnan``/``nsz``, which nothing adds here."""
    out = []
    for o in outputs:
        t = o.type
        zero = arith.constant(t, 0.0)
        acc = o
        for v in inputs:
            if v.type != t:
                v = arith.extf(t, v) if is_float(v.type) and _width(v.type) < _width(t) else \
                    arith.truncf(t, v) if is_float(v.type) else arith.uitofp(t, v)
            acc = arith.addf(acc, arith.mulf(v, zero))
        out.append(acc)
    return out


def _width(t) -> int:
    return ir.FloatType(t).width


def lower_library_call(lw: Lowering, entry: str) -> list[ir.Value]:
    """The placeholder standing for ``lw``'s op computed by library kernel ``entry``."""
    names = _operand_names(lw.op.opview)
    inits = [lw.empty(r.dims, r.dtype) for r in lw.results]
    if len(names) != len(lw.operands) + len(inits):
        raise lw.error(f"has operands the library call '{entry}' cannot name ({names})")
    ranks = [ir.RankedTensorType(v.type).rank for v in [*lw.operands, *inits]]
    loops, maps, first = sum(ranks), [], 0
    for r in ranks:
        maps.append(affine_map(loops, list(range(first, first + r))))
        first += r
    n_in = sum(ranks[:len(lw.operands)])
    iterators = ["reduction"] * n_in + ["parallel"] * (loops - n_in)
    for r in lw.results:
        if not is_float(r.dtype):
            raise lw.error(f"library call '{entry}' has a {r.dtype} result: placeholders hold float results only")
    res = generic(lw.operands, inits, maps, iterators, lambda *args: _payload(args[:len(lw.operands)],
                                                                                  args[len(lw.operands):]))
    op = res[0].owner
    op.attributes[LIBRARY_CALL] = ir.StringAttr.get(entry)
    op.attributes[CALL_ARGS] = ir.ArrayAttr.get([ir.StringAttr.get(n) for n in names])
    op.attributes[CALL_ATTRS] = ir.DictAttr.get(op_attributes(lw.op))
    return res

