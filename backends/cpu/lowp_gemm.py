"""The helpers of kiln's native low-precision products: ``native.matmul_lowp``
(``kiln_lowp_gemm``, runtime/native/kiln_lowp.c), ``native.matmul_w8``
(``kiln_w8_gemm``, kiln_w8.c) and ``native.matmul_integer`` (``kiln_i8_gemm``, kiln_i8.c).

kiln-select-kernels chooses these entries on kiln IR
(:mod:`.library_kernels`: a bf16 / f16 ``kiln.matmul``, an f32
``kiln.matmul_w8``, a ``kiln.matmul_integer``), and ``convert-kiln-to-linalg``
marks the op's own contraction as the placeholder (``library_call``, the
op's attributes and dtypes).  After bufferization this stage,
``kiln-cpu-lowp-gemm`` (after ``kiln-cpu-library``, whose packing-slot
release function it extends), replaces each placeholder with a call of a
helper ``@kiln_lowp_gemm_<i>``: the memrefs' strided metadata, then the
kernel (per batch index where a batch dim does not fold into the rows).
Nothing is recognised from the loop body: the roles come from the maps
(the reduction loop, the rows and columns, the batch loops) and the chosen
op (an int8 weight's group size, an 8-bit operand's signedness).  A
placeholder the kernel cannot take as it lies (A read transposed, an
innermost stride not 1) runs as the generated contraction it is.

bf16 / f16: the product sums in f32 and a separate elementwise generic
rounds it.  The kernel packs B into vdpbf16ps's pair layout (once, into a
packing slot, for a constant B) and runs on the native pool:

* bf16 on a CPU with AMX-BF16 (and the tile state granted by Linux): whole
  32-row blocks of full panels on the tiles (``tdpbf16ps``) when K is a
  multiple of 32 (``KILN_BF16_AMX=0`` turns it off), the rest as below;
* bf16 on a CPU with AVX512-BF16: ``vdpbf16ps`` (f32 accumulation);
* otherwise -- f16, a CPU without the instruction, or ``KILN_BF16_DP=0`` /
  :func:`force_generic` -- each element widened to f32 and two FMAs per pair,
  in the order vdpbf16ps adds them (one ``logging`` warning per process when
  a bf16 product takes this path).

A bf16 / f16 convolution (``native.conv2d_lowp``) whose im2col copy
(:func:`.conv.match_im2col`) lies before its product calls
``kiln_lowp_conv2d`` instead, which gathers each image's im2col into the
GEMM's panels itself (the copy, the zero padding and their buffers go); a
pointwise stride-1 one, which reads its input in place, is a per-image
``kiln_lowp_gemm``.

An int8-weight product (A f32, the weight ``[n, k]`` int8, its scales read
at ``[n, k floordiv G]``) calls ``kiln_w8_gemm`` with the scales' row stride
and G; the weight is read as it is (no packing slot).

An integer product (A ``[batch.., m, k]``, B ``[k, n]``, the zero points
rank-0 memrefs) calls ``kiln_i8_gemm`` with the zero points loaded and
widened and the operands' signedness (``ui8``) as flags; a constant B is
packed once into a slot.
"""

from __future__ import annotations

import ctypes
import logging

from ..._mlir import ir
from ...conversions.kiln_to_linalg.library_call import CALL_ATTRS, CALL_DTYPES
from ...pipelines.registry import Option, Pass, register_pass
from .conv import add_conv_geometry, match_im2col
from .library import (
    FREE_PACKED,
    RELEASE,
    _inner_stride_one,
    _is_contiguous,
    _release_text,
    _zero_fill_before,
    add_address,
    add_pointer,
    add_slot,
    batch_loops,
    enabled,
    function_names,
    gemm_sizes,
    index_value,
    insert_helpers,
    placeholder_entry,
    pool_threads_line,
    product_parts,
    strided_pointers,
    unique_name,
    unmark,
    weight_test,
)

__all__ = ["ENTRIES", "I8_GEMM", "LOWP_GEMM", "W8_GEMM", "CpuLowpGemm", "force_generic", "from_placeholder",
           "rewrite_lowp_contractions",
           "uses_amx", "uses_avx2", "uses_dp", "uses_vnni"]

_log = logging.getLogger("kiln.backends.cpu")

LOWP_GEMM = "kiln_lowp_gemm"
#: The native product of f32 rows with int8 weight rows (runtime/native/kiln_w8.c).
W8_GEMM = "kiln_w8_gemm"
#: The native integer product of 8-bit operands with zero points (runtime/native/kiln_i8.c).
I8_GEMM = "kiln_i8_gemm"
_DTYPES = {"bf16": 0, "f16": 1}
_SIZES = {"bf16": 2, "f16": 2, "f32": 4, "i8": 1, "i32": 4}
_W8_TYPES = "(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32)"
_I8_TYPES = "(i64, i64, i64, i64, i64, i32, i64, i64, i32, i32, i32, i64, i64, i32, i64)"
#: kiln_i8_gemm's flags: which operands are unsigned.
_A_UNSIGNED, _B_UNSIGNED = 1, 2
#: The native 16-bit convolution: the im2col gathered into the GEMM's panels (runtime/native/kiln_lowp.c).
LOWP_CONV = "kiln_lowp_conv2d"
_CONV_TYPES = f"({', '.join(['i64'] * 17)}, f32, i64, i32, i32)"
_DECL = (f"func.func private @{LOWP_GEMM}(i64, i64, i64, i64, i64, i64, i64, i32, f32, i64, i64, i32, i32, i64)\n"
         f"func.func private @{LOWP_CONV}{_CONV_TYPES}\n"
         f"func.func private @{W8_GEMM}{_W8_TYPES}\n"
         f"func.func private @{I8_GEMM}{_I8_TYPES}\n"
         f"func.func private @{FREE_PACKED}(i64)")
_warned = False
_warned_int = False


def _native():
    from ...runtime.blas import native_with_blas

    return native_with_blas()


def uses_dp() -> bool:
    """Whether bf16 products run on AVX512-BF16's ``vdpbf16ps`` now (the CPU has it and it is not forced off)."""
    lib = _native()
    return bool(lib is not None and lib.kiln_lowp_uses_dp())


def uses_amx() -> bool:
    """Whether bf16 products of whole 32-row blocks run on AMX-BF16 tiles now."""
    lib = _native()
    return bool(lib is not None and lib.kiln_lowp_uses_amx())


def uses_vnni() -> bool:
    """Whether integer products run on AVX512-VNNI's ``vpdpbusd`` (and AMX-INT8 where present) now."""
    lib = _native()
    return bool(lib is not None and lib.kiln_i8_uses_vnni())


def uses_avx2() -> bool:
    """Whether integer products run on AVX2's ``vpmaddwd`` (16-bit pairs, exact) now: a CPU without VNNI."""
    lib = _native()
    return bool(lib is not None and lib.kiln_i8_uses_avx2())


def force_generic(on: bool | None) -> None:
    """Force the generic (feature-less) paths of the 16-bit and the integer
    GEMMs on (True) or off (False), or go back to ``KILN_BF16_DP`` /
    ``KILN_I8_VNNI`` and the CPU (None); takes effect at the next call of a
    compiled model, whenever it was compiled."""
    lib = _native()
    if lib is not None:
        flag = ctypes.c_int32(-1 if on is None else int(bool(on)))
        lib.kiln_lowp_set_generic(flag)
        lib.kiln_i8_set_generic(flag)


class _LowpGemm:
    """A matched 16-bit, int8-weight (dtype ``"i8"``) or integer (dtype
    ``"int"``) contraction: operands, maps and loop roles (an int8 weight's
    scales ``s`` and their group size; an integer product's zero points
    ``zps`` and signedness ``flags``)."""

    def __init__(self, op, a, b, c, maps, batch, m, n, k, dtype, s=None, group=0, zps=(), flags=0):
        self.op, self.a, self.b, self.c = op, a, b, c
        self.maps, self.batch, self.m, self.n, self.k, self.dtype = maps, batch, m, n, k, dtype
        self.s, self.group, self.zps, self.flags = s, group, tuple(zps), flags

    @property
    def operands(self) -> list:
        """The helper's arguments: A, B, the scales of an int8 weight or the zero points of an integer product, C."""
        return [self.a, self.b, *([self.s] if self.s is not None else []), *self.zps, self.c]


#: The library entries whose contraction placeholders this pass lowers, by the dtype tag of :class:`_LowpGemm`.
ENTRIES = {"native.matmul_lowp": None, "native.conv2d_lowp": None, "native.matmul_w8": "i8",
           "native.matmul_integer": "int"}


def _marks(op, entry: str) -> tuple[list[str], dict] | None:
    """A placeholder's ``kiln.call_dtypes`` (the kiln op's operands', then its result's: one per placeholder
    operand, or for a convolution's im2col product x, w, the bias if any and the result) and
    ``kiln.call_attrs`` (by name), or None when either is missing or malformed (hand-written input: the
    placeholder then stays generated code)."""
    try:
        dtypes = [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes[CALL_DTYPES])]
        attrs = {a.name: a.attr for a in ir.DictAttr(op.attributes[CALL_ATTRS])}
    except (KeyError, ValueError, TypeError):
        return None
    expected = (3, 4) if entry == "native.conv2d_lowp" else (len(op.operands),)
    return (dtypes, attrs) if len(dtypes) in expected else None


#: The element types (A, B, C) each kind's kernel takes (None: bf16 / f16 into f32).
_ELEMENTS = {"i8": ("f32", "i8", "f32"), "int": ("i8", "i8", "i32")}


def _elements_ok(kind, ta: str, tb: str, tc: str) -> bool:
    if kind is None:
        return ta == tb and ta in _DTYPES and tc == "f32"
    return (ta, tb, tc) == _ELEMENTS[kind]


def from_placeholder(op, entry: str) -> _LowpGemm | None:
    """The product a contraction placeholder of :data:`ENTRIES` (``op``, a
    ``linalg.generic`` on memrefs marked by ``convert-kiln-to-linalg``,
    naming ``entry``) stands for: its roles read from its maps (a batch, the
    rows, the columns, the reduction) and the chosen op's attributes and
    dtypes; None when the native kernel cannot take it as it lies (A read
    transposed, an innermost stride not 1, element types or marks that are
    not the entry's: it stays generated code)."""
    kind = ENTRIES[entry]
    marks = _marks(op, entry)
    if marks is None:
        return None
    dtypes, attrs = marks
    extra = {None: 0, "i8": 1, "int": 2}[kind]
    parts = product_parts(op, lambda *names: _elements_ok(kind, *names), a_transposed=False, extra_inputs=extra)
    if parts is None:
        return None
    a, b, c, maps, batch, m, n, k, names = parts
    if kind is None:
        return _LowpGemm(op, a, b, c, maps, batch, m, n, k, names[0])
    if maps[1] != ([n, k] if kind == "i8" else [k, n]):  # the weight's rows; an integer product's B
        return None
    extras = op.operands[2:2 + extra]
    try:
        extra_types = [ir.MemRefType(v.type) for v in extras]
    except (ValueError, TypeError):
        return None
    if kind == "int":
        if any(t.rank != 0 or str(t.element_type) != "i8" for t in extra_types):  # the zero points are scalars
            return None
        flags = (_A_UNSIGNED if dtypes[0] == "ui8" else 0) | (_B_UNSIGNED if dtypes[1] == "ui8" else 0)
        return _LowpGemm(op, a, b, c, maps, batch, m, n, k, "int", zps=list(extras), flags=flags)
    (st,) = extra_types
    try:
        group = ir.IntegerAttr(attrs["group_size"]).value
    except (KeyError, ValueError, TypeError):
        return None
    if str(st.element_type) != "f32" or st.rank != 2 or not _inner_stride_one(st, 1) or group < 1:
        return None
    return _LowpGemm(op, a, b, c, maps, batch, m, n, k, "i8", s=extras[0], group=group)


def lowp_text(name: str, g: _LowpGemm, beta: float, slot: str | None) -> str:
    """The helper ``@name(A, B, C)`` (``@name(A, B, S, C)`` for an int8 weight, ``@name(A, B, ZA, ZB, C)`` for
    an integer product) calling ``kiln_lowp_gemm``, ``kiln_w8_gemm`` or ``kiln_i8_gemm`` for ``g`` (in loops over
    the batch dims that do not fold into the rows)."""
    ta, tb, tc = (ir.MemRefType(v.type) for v in (g.a, g.b, g.c))
    ma, mb, mc = g.maps
    w8, integer = g.dtype == "i8", g.dtype == "int"
    types = {"A": ta, "B": tb, "S": ir.MemRefType(g.s.type), "C": tc} if w8 else {"A": ta, "B": tb, "C": tc}
    zps = {"ZA": g.zps[0].type, "ZB": g.zps[1].type} if integer else {}
    args = ", ".join(f"%{tag}: {t}" for tag, t in [*list(types.items())[:-1], *zps.items(), ("C", tc)])
    lines = [f"func.func private @{name}({args}) {{"]
    add = lines.append
    strided_pointers(add, types)
    add("  %c0 = arith.constant 0 : index")
    add("  %c1 = arith.constant 1 : index")
    trans_b = mb[-1] != g.n  # b is [.., n, k]
    if integer:
        for tag, t in zps.items():  # the zero points as i32 values
            wide = "extui" if g.flags & (_A_UNSIGNED if tag == "ZA" else _B_UNSIGNED) else "extsi"
            add(f"  %{tag}8 = memref.load %{tag}[] : {t}")
            add(f"  %{tag}32 = arith.{wide} %{tag}8 : i8 to i32")
        add(f"  %flags = arith.constant {g.flags} : i32")
        add(f"  %beta = arith.constant {0 if beta == 0.0 else 1} : i32")
    elif not w8:
        add(f"  %tb = arith.constant {1 if trans_b else 0} : i32")
        add(f"  %dt = arith.constant {_DTYPES[g.dtype]} : i32")
    if not integer:
        add(f"  %beta = arith.constant {beta:.1f} : f32")
    # Batch dims that B does not index fold into the rows when A and C are contiguous.
    fold = []
    if _is_contiguous(ta) and _is_contiguous(tc):
        for d in g.batch:
            if d not in mb and d in ma and ma.index(d) == len(fold) and mc.index(d) == len(fold):
                fold.append(d)
            else:
                break
    loops = [d for d in g.batch if d not in fold]
    if any(d in mb for d in loops):
        slot = None  # a B that a batch loop walks is not one matrix: packed per call
    add(pool_threads_line())
    if not w8:
        add_slot(add, slot)
    m_expr = gemm_sizes(add, ma, mb, mc, fold, len(ma) - 1)
    offs, indent = batch_loops(add, loops, ma, mb, mc)
    for tag, t in (("A", ta), ("B", tb), ("C", tc)):
        add_address(add, tag, offs[tag], _SIZES[str(t.element_type)], indent)
    if integer:
        add(f"{indent}func.call @{I8_GEMM}({m_expr}, %N, %K, %yA, %lda, %ZA32, %yB, %ldb, %ZB32, %flags, %beta, %yC, "
            f"%ldc, %nthr, %slot) : {_I8_TYPES} -> ()")
    elif w8:
        add_address(add, "S", "%oS", 4, indent)  # no batch loop walks the weight's scales
        add(f"{indent}%lds = arith.index_cast %tS#0 : index to i64")
        add(f"{indent}%grp = arith.constant {g.group} : i64")
        add(f"{indent}func.call @{W8_GEMM}({m_expr}, %N, %K, %yA, %lda, %yB, %ldb, %yS, %lds, %grp, %beta, %yC, "
            f"%ldc, %nthr) : {_W8_TYPES} -> ()")
    else:
        add(f"{indent}func.call @{LOWP_GEMM}({m_expr}, %N, %K, %yA, %lda, %yB, %ldb, %tb, %beta, %yC, %ldc, %dt, "
            "%nthr, %slot) : (i64, i64, i64, i64, i64, i64, i64, i32, f32, i64, i64, i32, i32, i64) -> ()")
    for _ in loops:
        indent = indent[:-2]
        add(f"{indent}}}")
    add("  return")
    add("}")
    return "\n".join(lines)


def lowp_conv_text(name: str, g: _LowpGemm, im, beta: float) -> str:
    """The helper ``@name(W, X, Y, OH, OW)`` calling ``kiln_lowp_conv2d`` for
    the convolution whose im2col product ``g`` is and whose im2col copy ``im``
    (:func:`.conv.match_im2col`) the call gathers itself: ``W`` the weight
    ``[M, C * KH * KW]``, ``X`` the unpadded input ``[N, C, H, W]``, ``Y`` the
    f32 sums ``[N, M, OH * OW]``."""
    tw, tx, ty = (ir.MemRefType(v.type) for v in (g.a, im.x, g.c))
    lines = [f"func.func private @{name}(%W: {tw}, %X: {tx}, %Y: {ty}, %OH: index, %OW: index) {{"]
    add = lines.append
    add_conv_geometry(add, tx, ty, im.kernel, im.strides, im.dilations, im.pads)
    for tag, t in (("W", tw), ("X", tx), ("Y", ty)):
        add_pointer(add, tag, t)
    add(f"  %beta = arith.constant {beta:.1f} : f32")
    add(f"  %dt = arith.constant {_DTYPES[g.dtype]} : i32")
    add(pool_threads_line())
    add(f"  func.call @{LOWP_CONV}(%Nx64, %Fx64, %Cx64, %Hx64, %Wdx64, %KH, %KW, %OH64, %OW64, %sh, %sw, %dh, %dw, "
        f"%pt, %pl, %pX, %pW, %beta, %pY, %dt, %nthr) : {_CONV_TYPES} -> ()")
    add("  return")
    add("}")
    return "\n".join(lines)


def _conv_im2col(g: _LowpGemm):
    """The im2col copy a 16-bit convolution's product ``g`` reads, when the
    native convolution can gather it itself (contiguous weight and output),
    else None (a pointwise convolution reads its input in place: the GEMM)."""
    if placeholder_entry(g.op) != "native.conv2d_lowp" or not _is_contiguous(ir.MemRefType(g.a.type)):
        return None
    return match_im2col(g, g.dtype)


def rewrite_lowp_contractions(module) -> int:
    """Replace every contraction placeholder of :data:`ENTRIES` in ``module``
    (bufferized) with a call of its native kernel; the count.  One the
    kernels cannot take as it lies, or any without kiln's native runtime,
    stays generated code (its marks dropped)."""
    from ..._mlir import func

    global _warned, _warned_int
    module = module.operation
    found = []

    lib = _native()

    def visit(op):
        entry = placeholder_entry(op)
        if entry in ENTRIES:
            g = from_placeholder(op, entry) if lib is not None else None
            if g is None:
                _log.debug("%s: the native kernel cannot take this contraction as it lies: generated code", entry)
                unmark(op)
            else:
                found.append(g)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    if not found:
        return 0
    if not _warned and any(g.dtype == "bf16" for g in found) and not lib.kiln_lowp_uses_dp():
        _warned = True
        why = "forced by KILN_BF16_DP=0" if lib.kiln_lowp_cpu_has_dp() else "this CPU has no AVX512-BF16"
        _log.warning("bf16 matrix products run on the generic path (bf16 widened to f32, FMAs): %s", why)
    if (not _warned_int and any(g.dtype == "int" for g in found) and not lib.kiln_i8_uses_vnni()
            and not lib.kiln_i8_uses_avx2()):
        _warned_int = True
        vector = lib.kiln_i8_cpu_has_vnni() or lib.kiln_i8_cpu_has_avx2()
        why = "forced by KILN_I8_VNNI=0" if vector else "this CPU has neither AVX512-VNNI nor AVX2"
        _log.warning("integer (8-bit) matrix products run on the generic path (int32 arithmetic): %s", why)
    body = module.regions[0].blocks[0]
    names = function_names(module)
    is_weight = weight_test(module)
    # The helpers are parsed alone, so they declare all they call (kiln_free_packed
    # too); a second declaration of it is dropped after the insertion.
    texts = [_DECL]
    calls, slots = [], []
    for i, g in enumerate(found):
        name = unique_name(f"kiln_lowp_gemm_{i}", names)
        fill = _zero_fill_before(g.op, g.c)
        im = _conv_im2col(g)
        if im is not None:  # the call gathers the im2col (and the padding) itself: the copy goes
            texts.append(lowp_conv_text(name, g, im, 0.0 if fill is not None else 1.0))
            calls.append((name, g, fill, [g.a, im.x, g.c, im.oh, im.ow], im.dead))
            continue
        slot = None
        if g.dtype != "i8" and is_weight(g.b):  # int8 rows are read as they are
            slot = unique_name(f"kiln_lowp_pack_{i}", names)
            slots.append(slot)
        texts.append(lowp_text(name, g, 0.0 if fill is not None else 1.0, slot))
        calls.append((name, g, fill, g.operands, []))
    release = None
    if slots:
        if RELEASE in names:  # the f32 products' release function calls this one as well
            release = unique_name(f"{RELEASE}_lowp", names)
            texts.append(_release_text(slots).replace(f"func.func @{RELEASE}(", f"func.func private @{release}("))
        else:
            texts.append(_release_text(slots))
    insert_helpers(module, texts)
    _drop_repeated_declarations(body)
    if release is not None:
        _call_from_release(body, release)
    for name, g, fill, args, dead in calls:
        with ir.InsertionPoint(g.op), g.op.location:
            func.CallOp([], ir.FlatSymbolRefAttr.get(name), [index_value(a) for a in args])
        g.op.erase()
        for op in dead:  # users first: the reshape and deallocs, the copy, then the buffer
            op.erase()
        if fill is not None:
            fill.erase()
    return len(calls)


def _call_from_release(body, callee: str) -> None:
    """Add a call of ``@callee`` before the return of the module's ``@kiln_release_packed``."""
    from ..._mlir import func

    for op in body.operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == RELEASE:
            ret = list(op.regions[0].blocks[0].operations)[-1]
            with ir.InsertionPoint(ret), ret.location:
                func.CallOp([], ir.FlatSymbolRefAttr.get(callee), [])
            return


def _drop_repeated_declarations(body) -> None:
    """Erase a declaration (a body-less ``func.func``) whose symbol an earlier function of ``body`` has."""
    seen = set()
    for op in list(body.operations):
        op = op.operation
        if op.name != "func.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if name in seen and len(op.regions[0].blocks) == 0:
            op.erase()
        seen.add(name)


@register_pass
class CpuLowpGemm(Pass):
    """bf16 / f16, int8-weight and integer matrix products as calls of kiln's native kernels (bufferized modules)."""

    name = "kiln-cpu-lowp-gemm"
    summary = ("Replace bf16 / f16 contractions into an f32 accumulator (linalg.generic on memrefs) with "
               "kiln_lowp_gemm, int8-weight ones with kiln_w8_gemm, integer ones with kiln_i8_gemm")
    options = (Option("enabled", int, 1, "0: keep generated code (KILN_CPU_LIBRARY=0 does the same)"),)

    def run(self, module) -> None:
        if self.option("enabled") and enabled():
            n = rewrite_lowp_contractions(module)
            if n:
                self.bump("products to kiln_lowp_gemm / kiln_w8_gemm / kiln_i8_gemm", n)
