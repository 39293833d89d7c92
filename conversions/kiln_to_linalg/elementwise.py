"""Lowerings of the elementwise kiln ops to one broadcasting ``linalg.generic`` each.

Each op is a scalar function in :data:`SCALAR` (float and integer forms);
:func:`lower_elementwise` wraps it in a parallel generic whose indexing maps
implement numpy broadcasting (a static 1 reads index 0).
"""

from __future__ import annotations

import importlib
import math as pymath

from ..._mlir import arith, dialects, ir, math
from ...dialects.kiln import is_float
from .common import Lowering, elementwise, lowest, scalar_const
from .quant import cast_unsigned


def _f(pred: str):
    return getattr(arith.CmpFPredicate, pred.upper())


def _i(pred: str):
    return getattr(arith.CmpIPredicate, pred)


def _is_f32(x) -> bool:
    return str(x.type) == "f32"


def _horner(x, coefs, c):
    """``((coefs[0] x + coefs[1]) x + ...)`` with each step a multiply-add LLVM
    may fuse (``fastmath<contract>``): one FMA a step instead of two ops."""
    contract = ir.Attribute.parse("#arith.fastmath<contract>")
    p = c(coefs[0])
    for coef in coefs[1:]:
        p = arith.addf(arith.mulf(p, x, fastmath=contract), c(coef), fastmath=contract)
    return p


def exp(x):
    """``e**x``; for f32 an ``arith`` polynomial (Cephes ``expf``, relative error
    about 2e-7) instead of ``math.exp``, which becomes a scalar ``expf`` call
    that keeps LLVM from vectorizing the loop (MLIR_NOTES: 4 vs 21 GB/s)."""
    if not _is_f32(x):
        return math.exp(x)
    t = x.type
    c = lambda v: scalar_const(t, v)  # noqa: E731
    x = arith.minimumf(arith.maximumf(x, c(-87.3365)), c(88.3762))
    # n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two for accuracy)
    n = math.floor(arith.addf(arith.mulf(x, c(1.44269504088896341)), c(0.5)))
    r = arith.subf(x, arith.mulf(n, c(0.693359375)))
    r = arith.subf(r, arith.mulf(n, c(-2.12194440e-4)))
    p = _horner(r, (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                    5.0000001201e-1), c)
    p = arith.addf(arith.addf(arith.mulf(arith.mulf(p, r), r), r), c(1.0))
    # 2**n from the exponent bits (n is in [-126, 127] after the clamp)
    i32 = ir.IntegerType.get_signless(32)
    bits = arith.shli(arith.addi(arith.fptosi(i32, n), arith.constant(i32, 127)), arith.constant(i32, 23))
    return arith.mulf(p, arith.bitcast(t, bits))


def erf(x):
    """The error function; for f32 a rational approximation on [-4, 4] (the
    numerator odd of degree 13, the denominator even of degree 8, as in
    Eigen's and XLA's f32 erf; error below 5e-7 absolute and relative, one
    division and no ``exp``), so the loop vectorizes.  It halved the cost of
    exact GELU over Abramowitz-Stegun 7.1.26 on the polynomial :func:`exp`,
    whose relative error near 0 was 2e-4."""
    if not _is_f32(x):
        return math.erf(x)
    t = x.type
    c = lambda v: scalar_const(t, v)  # noqa: E731
    x = arith.minimumf(arith.maximumf(x, c(-4.0)), c(4.0))  # erf is +-1 in f32 beyond
    x2 = arith.mulf(x, x)
    p = _horner(x2, (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                     -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02), c)
    q = _horner(x2, (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
                     -1.42647390514189e-02), c)
    return arith.divf(arith.mulf(x, p), q)


def tanh(x):
    """``tanh``; for f32 ``1 - 2 / (exp(2x) + 1)`` on the polynomial :func:`exp`
    (absolute error about 1e-7), odd by construction."""
    if not _is_f32(x):
        return math.tanh(x)
    t = x.type
    one = scalar_const(t, 1.0)
    a = math.absf(x)
    y = arith.subf(one, arith.divf(scalar_const(t, 2.0), arith.addf(exp(arith.addf(a, a)), one)))
    return math.copysign(y, x)


def _sigmoid(x):
    one = scalar_const(x.type, 1.0)
    return arith.divf(one, arith.addf(one, exp(arith.negf(x))))


def _gelu(x, approximate: str):
    t = x.type
    half = scalar_const(t, 0.5)
    one = scalar_const(t, 1.0)
    if approximate == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        x3 = arith.mulf(arith.mulf(x, x), x)
        inner = arith.mulf(scalar_const(t, pymath.sqrt(2.0 / pymath.pi)),
                           arith.addf(x, arith.mulf(scalar_const(t, 0.044715), x3)))
        return arith.mulf(arith.mulf(half, x), arith.addf(one, tanh(inner)))
    e = erf(arith.mulf(x, scalar_const(t, 1.0 / pymath.sqrt(2.0))))
    return arith.mulf(arith.mulf(half, x), arith.addf(one, e))


def _binary(fop, iop):
    def body(a, b, attrs):
        return fop(a, b) if is_float(a.type) else iop(a, b)

    return body


def _compare(fpred, ipred):
    def body(a, b, attrs):
        if is_float(a.type):
            return arith.cmpf(_f(fpred), a, b)
        return arith.cmpi(_i(ipred), a, b)

    return body


def _scf():
    # scf is reached through the bindings' dialects package (kiln/_mlir.py
    # re-exports the dialects kiln uses everywhere; this one only here).
    return importlib.import_module(f"{dialects.__name__}.scf")


def _int_pow(a, b):
    """``a ** b`` for integers, by repeated squaring in an ``scf.while``
    (``math.ipowi`` has no lowering to LLVM here, and upstream's
    ``convert-math-to-funcs`` divides by zero for ``0 ** -n``).  Products
    wrap on overflow.  A negative exponent gives what ONNX Runtime's
    ``pow`` in double, truncated, gives on x86: 1 for base 1, +-1 for base -1
    (by the exponent's parity), the type's minimum for base 0 (the cast of an
    infinite double), 0 otherwise."""
    scf = _scf()
    t = a.type
    one, zero = scalar_const(t, 1), scalar_const(t, 0)

    def odd(v):
        return arith.cmpi(_i("ne"), arith.andi(v, one), zero)

    loop = scf.WhileOp([t, t, t], [one, a, b])
    before = loop.before.blocks.append(t, t, t)
    with ir.InsertionPoint(before):
        acc, base, e = before.arguments
        scf.ConditionOp(arith.cmpi(_i("sgt"), e, zero), [acc, base, e])
    after = loop.after.blocks.append(t, t, t)
    with ir.InsertionPoint(after):
        acc, base, e = after.arguments
        acc = arith.select(odd(e), arith.muli(acc, base), acc)
        scf.YieldOp([acc, arith.muli(base, base), arith.shrui(e, one)])
    minus_one = scalar_const(t, -1)
    negative = arith.select(
        arith.cmpi(_i("eq"), a, one), one,
        arith.select(arith.cmpi(_i("eq"), a, minus_one), arith.select(odd(b), minus_one, one),
                     arith.select(arith.cmpi(_i("eq"), a, zero), lowest(t), zero)))
    return arith.select(arith.cmpi(_i("slt"), b, zero), negative, loop.results[0])


def _neg(x, attrs):
    return arith.negf(x) if is_float(x.type) else arith.subi(scalar_const(x.type, 0), x)


def _abs(x, attrs):
    return math.absf(x) if is_float(x.type) else math.absi(x)


def _relu(x, attrs):
    if is_float(x.type):
        # select keeps NaN as NaN, as torch.relu does
        zero = scalar_const(x.type, 0.0)
        return arith.select(arith.cmpf(_f("olt"), x, zero), zero, x)
    return arith.maxsi(x, scalar_const(x.type, 0))


def _rsqrt(x, attrs):
    return arith.divf(scalar_const(x.type, 1.0), math.sqrt(x))


#: kiln op name -> scalar body ``fn(*scalars, attrs)``.
SCALAR = {
    "kiln.add": _binary(arith.addf, arith.addi),
    "kiln.sub": _binary(arith.subf, arith.subi),
    "kiln.mul": _binary(arith.mulf, arith.muli),
    "kiln.div": _binary(arith.divf, arith.divsi),
    "kiln.pow": _binary(math.powf, _int_pow),
    "kiln.maximum": _binary(arith.maximumf, arith.maxsi),
    "kiln.minimum": _binary(arith.minimumf, arith.minsi),
    "kiln.eq": _compare("oeq", "eq"),
    "kiln.ne": _compare("une", "ne"),
    "kiln.lt": _compare("olt", "slt"),
    "kiln.le": _compare("ole", "sle"),
    "kiln.gt": _compare("ogt", "sgt"),
    "kiln.ge": _compare("oge", "sge"),
    "kiln.neg": _neg,
    "kiln.abs": _abs,
    "kiln.exp": lambda x, a: exp(x),
    "kiln.log": lambda x, a: math.log(x),
    "kiln.sqrt": lambda x, a: math.sqrt(x),
    "kiln.rsqrt": _rsqrt,
    "kiln.tanh": lambda x, a: tanh(x),
    "kiln.sigmoid": lambda x, a: _sigmoid(x),
    "kiln.relu": _relu,
    "kiln.gelu": lambda x, a: _gelu(x, a.get("approximate", "none")),
    "kiln.silu": lambda x, a: arith.mulf(x, _sigmoid(x)),
    "kiln.erf": lambda x, a: erf(x),
    "kiln.cos": lambda x, a: math.cos(x),
    "kiln.sin": lambda x, a: math.sin(x),
    "kiln.floor": lambda x, a: math.floor(x),
    "kiln.ceil": lambda x, a: math.ceil(x),
    "kiln.where": lambda c, x, y, a: arith.select(c, x, y),
}


def cast_scalar(x: ir.Value, dst: ir.Type) -> ir.Value:
    """Convert one scalar between kiln dtypes (C/numpy semantics; to i1 is ``!= 0``)."""
    src = x.type
    if src == dst:
        return x
    if str(dst) == "i1":
        zero = scalar_const(src, 0)
        return arith.cmpf(_f("une"), x, zero) if is_float(src) else arith.cmpi(_i("ne"), x, zero)
    if is_float(src) and is_float(dst):
        wider = ir.FloatType(dst).width > ir.FloatType(src).width
        return arith.extf(dst, x) if wider else arith.truncf(dst, x)
    if is_float(src):
        return arith.fptosi(dst, x)
    if is_float(dst):
        return arith.uitofp(dst, x) if str(src) == "i1" else arith.sitofp(dst, x)
    sw, dw = ir.IntegerType(src).width, ir.IntegerType(dst).width
    if dw > sw:
        return arith.extui(dst, x) if sw == 1 else arith.extsi(dst, x)
    return arith.trunci(dst, x)


def lower_elementwise(lw: Lowering) -> list[ir.Value]:
    """Any op of :data:`SCALAR`: one broadcasting parallel generic."""
    body = SCALAR[lw.name]
    out = lw.results[0]
    return [elementwise(lw.operands, out.dims, out.dtype, lw.env, lambda *s: body(*s, lw.attrs))]


def lower_cast(lw: Lowering) -> list[ir.Value]:
    unsigned = cast_unsigned(lw)  # from or to ui8: unsigned conversions on i8 storage
    if unsigned is not None:
        return unsigned
    out = lw.results[0]
    return [elementwise(lw.operands, out.dims, out.dtype, lw.env, lambda x: cast_scalar(x, out.dtype))]


def table() -> dict:
    """The elementwise part of the lowering table."""
    t = {name: lower_elementwise for name in SCALAR}
    t["kiln.cast"] = lower_cast
    return t
