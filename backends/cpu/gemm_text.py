"""The helpers ``kiln-cpu-library`` calls in place of a matrix product, as MLIR text.

:func:`gemm_text` emits ``@kiln_gemm_<i>(A, B, C)``: the memrefs' strided
metadata, then the library call for the product's shape (kiln's native
small-M GEMM for few rows times a packed constant B, sgemv for one row,
OpenBLAS's sgemm (in slabs on the native pool) otherwise), in loops over
the batch dims that do not fold into the rows, and a product's bias +
activation epilogue (:mod:`.gemm_epilogue`).  :func:`weight_a_text` emits the
call of the native weight-A GEMM (a constant A times activations).  Called by
:mod:`.contractions` (the stage's driver); the helpers' pieces are :mod:`.library`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._mlir import ir
from .library import (
    _NO_TRANS,
    _ROW_MAJOR,
    _TRANS,
    BIAS_ACT,
    SGEMM,
    SGEMM_PAR,
    SGEMV,
    SMALL_GEMM,
    SMALL_GEMM_BT,
    SMALL_GEMM_EPI,
    WEIGHT_A_GEMM,
    _Gemm,
    _is_contiguous,
    add_address,
    add_slot,
    batch_loops,
    blas_threads_lines,
    blas_threads_value,
    gemm_sizes,
    mt_mnk,
    pool_threads_line,
    small_m,
    strided_pointers,
)

if TYPE_CHECKING:
    from .gemm_epilogue import Epilogue

__all__ = ["gemm_text", "weight_a_ok", "weight_a_text"]


def gemm_text(name: str, g: _Gemm, beta: float, slot: str | None = None, pool: bool = False,
              epi: Epilogue | None = None) -> tuple[str, bool, bool]:
    """The helper ``@name(A, B, C)`` computing ``g`` with library calls,
    whether it uses ``slot`` (the packing slot global a constant B may get,
    see :func:`.contractions.rewrite_contractions`, used when the native GEMM applies) and
    whether it applies ``epi``.  ``pool``: a multi-threaded sgemm runs as
    single-threaded slabs on the native pool (``kiln_sgemm_par``) instead of
    on OpenBLAS's threads.  ``epi`` (native runtime only): the bias add,
    activation and residual add after the product, when its batch dims all
    fold into its rows: applied in the native small GEMM's registers
    (``kiln_sgemm_small_epi``), or by one ``kiln_bias_act`` call after
    sgemv / sgemm; the bias and the residual are the helper's arguments
    after ``C`` (``%E``, ``%R``), each when present."""
    ta, tb, tc = (ir.MemRefType(v.type) for v in (g.a, g.b, g.c))
    ma, mb, mc = g.maps
    lines = [f"func.func private @{name}(%A: {ta}, %B: {tb}, %C: {tc}) {{"]
    add = lines.append
    strided_pointers(add, {"A": ta, "B": tb, "C": tc})
    add("  %c0 = arith.constant 0 : index")
    add("  %c1 = arith.constant 1 : index")
    add(f"  %order = arith.constant {_ROW_MAJOR} : i32")
    trans_a = ma[-1] != g.k  # a is [.., k, m]
    trans_b = mb[-1] != g.n  # b is [.., n, k]
    add(f"  %ta = arith.constant {_TRANS if trans_a else _NO_TRANS} : i32")
    add(f"  %tb = arith.constant {_TRANS if trans_b else _NO_TRANS} : i32")
    add(f"  %tbsel = arith.constant {'true' if trans_b else 'false'}")
    add("  %zero64 = arith.constant 0 : i64")
    add("  %alpha = arith.constant 1.0 : f32")
    add(f"  %beta = arith.constant {beta:.1f} : f32")
    if pool or slot is not None or epi is not None:  # the native calls' pool size, asked at run time
        add(pool_threads_line())
    # Fold batch dims that b does not index into m: a and c contiguous,
    # a not transposed, and the folded dims lead both a and c.
    fold = []
    if not trans_a and _is_contiguous(ta) and _is_contiguous(tc):
        for d in g.batch:
            if d not in mb and d in ma and ma.index(d) == len(fold) and mc.index(d) == len(fold):
                fold.append(d)
            else:
                break
    loops = [d for d in g.batch if d not in fold]
    fused = epi is not None and not loops
    if fused:  # the epilogue's operands, as pointers: %yE (bias), %yR (residual) and %ldr, 0 when absent
        extra = {tag: ir.MemRefType(v.type) for tag, v in (("E", epi.bias), ("R", epi.residual)) if v is not None}
        lines[0] = lines[0][:-3] + "".join(f", %{tag}: {t}" for tag, t in extra.items()) + ") {"
        strided_pointers(add, extra)
        for tag in ("E", "R"):
            if tag in extra:
                add_address(add, tag, f"%o{tag}", 4)
            else:
                add(f"  %y{tag} = arith.constant 0 : i64")
        add(f"  %ldr = arith.index_cast %tR#{extra['R'].rank - 2} : index to i64" if "R" in extra
            else "  %ldr = arith.constant 0 : i64")
        add(f"  %act = arith.constant {epi.code} : i32")
    m_expr = gemm_sizes(add, ma, mb, mc, fold, ma.index(g.k))
    # One thread below MT_MNK multiply-adds per GEMM, else the count a
    # multi-threaded sgemm uses (asked at run time: blas_threads_value).
    add(f"  %mn = arith.muli {m_expr}, %N : i64")
    add("  %mnk = arith.muli %mn, %K : i64")
    add(f"  %cut = arith.constant {mt_mnk()} : i64")
    # With the native pool, one row goes to kiln_sgemm_par too, whose GEMV
    # (up to 4 rows, A not transposed) streams the weights on the pool's
    # threads: OpenBLAS's sgemv on one thread took 7.7 ms for 1 x 768 against
    # a [768, 32000] LM head, the GEMV 2.3-2.5 ms on two (torch 2.5-3.1).
    pool_vec = pool and not trans_a
    # sgemv always on one thread: with two, OpenBLAS's M = 1 path took
    # 16 ms instead of 1.3 ms for 1x1024x4096 on this shared machine.
    if pool_vec:
        add("  %big = arith.cmpi sge, %mnk, %cut : i64")
    else:
        add("  %m1 = arith.constant 1 : i64")
        add(f"  %isvec = arith.cmpi eq, {m_expr}, %m1 : i64")
        add("  %big0 = arith.cmpi sge, %mnk, %cut : i64")
        add("  %true = arith.constant true")
        add("  %notvec = arith.xori %isvec, %true : i1")
        add("  %big = arith.andi %big0, %notvec : i1")
    add("  %one = arith.constant 1 : i32")
    add(blas_threads_value("%many", pool))
    add("  %nt = arith.select %big, %many, %one : i32")
    enter, leave = blas_threads_lines("%one" if pool else "%nt", pool)
    add(enter)
    if not pool_vec:  # sgemv's operands
        add(f"  %gv_t = arith.constant {_NO_TRANS if trans_b else _TRANS} : i32")
        add("  %gv_rows = arith.select %tbsel, %N, %K : i64")
        add("  %gv_cols = arith.select %tbsel, %K, %N : i64")
        add(f"  %incx = {'arith.addi %lda, %zero64 : i64' if trans_a else 'arith.constant 1 : i64'}")
    offs, indent = batch_loops(add, loops, ma, mb, mc)  # the remaining batch dims; offsets in elements
    for tag in ("A", "B", "C"):
        add_address(add, tag, offs[tag], 4, indent)
    # Few rows times a weight (one constant B for every call): kiln's native
    # GEMM, which packs B once into the slot and runs on the native pool.
    # Products of activations stay with OpenBLAS: unpacked, a B with a long
    # K is read a page per row (16x1024x4096: 6.6 ms vs OpenBLAS's 2.0 ms).
    # A constant B given transposed has an entry of its own (its GEMV rows
    # read it unpacked; more rows pack it).
    small = slot is not None and not trans_a and not any(d in mb for d in loops)
    if small:
        add(f"{indent}%smax = arith.constant {small_m()} : i64")
        add(f"{indent}%small = arith.cmpi sle, {m_expr}, %smax : i64")
        add_slot(add, slot, indent=indent)
        add(f"{indent}scf.if %small {{")
        if fused or trans_b:  # the epilogue in the tiles' registers (none: null operands)
            epi_args = "%yE, %act, %yR, %ldr"
            if not fused:
                add(f"{indent}  %no_epi = arith.constant 0 : i64")
                add(f"{indent}  %no_act = arith.constant 0 : i32")
                epi_args = "%no_epi, %no_act, %no_epi, %no_epi"
            add(f"{indent}  func.call @{SMALL_GEMM_BT if trans_b else SMALL_GEMM_EPI}({m_expr}, %N, %K, %yA, %lda, "
                f"%yB, %ldb, %beta, %yC, %ldc, %nthr, %slot, {epi_args}) : (i64, i64, i64, i64, i64, i64, i64, f32, "
                "i64, i64, i32, i64, i64, i32, i64, i64) -> ()")
        else:
            add(f"{indent}  func.call @{SMALL_GEMM}({m_expr}, %N, %K, %yA, %lda, %yB, %ldb, %beta, %yC, %ldc, "
                "%nthr, %slot) : (i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32, i64) -> ()")
        add(f"{indent}}} else {{")
        indent += "  "
    # One row (batch-1 inference): sgemv, y = B^T x (b stored [K, N]) or B x (stored [N, K]);
    # this OpenBLAS's sgemm does not forward M = 1 to gemv and ran 3x slower.
    if not pool_vec:
        add(f"{indent}scf.if %isvec {{")
        add(f"{indent}  func.call @{SGEMV}(%order, %gv_t, %gv_rows, %gv_cols, %alpha, %yB, %ldb, %yA, %incx, %beta, "
            "%yC, %m1) : (i32, i32, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64) -> ()")
        add(f"{indent}}} else {{")
    if pool:
        add(f"{indent}  func.call @{SGEMM_PAR}(%order, %ta, %tb, {m_expr}, %N, %K, %alpha, %yA, %lda, %yB, %ldb, "
            "%beta, %yC, %ldc, %nt) : (i32, i32, i32, i64, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64, i32) -> ()")
    else:
        add(f"{indent}  func.call @{SGEMM}(%order, %ta, %tb, {m_expr}, %N, %K, %alpha, %yA, %lda, %yB, %ldb, %beta, "
            "%yC, %ldc) : (i32, i32, i32, i64, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64) -> ()")
    if not pool_vec:
        add(f"{indent}}}")
    if fused:  # after sgemv / sgemm: one pass over C (in the small GEMM's branch when there is one)
        add(f"{indent}func.call @{BIAS_ACT}({m_expr}, %N, %yC, %ldc, %yE, %act, %yR, %ldr, %nthr) : "
            "(i64, i64, i64, i64, i64, i32, i64, i64, i32) -> ()")
    if small:
        indent = indent[:-2]
        add(f"{indent}}}")
    for _ in loops:
        indent = indent[:-2]
        add(f"{indent}}}")
    add(leave)  # numpy keeps its count
    add("  return")
    add("}")
    return "\n".join(lines), small, fused


def weight_a_ok(g: _Gemm) -> bool:
    """Whether the weight-A GEMM computes ``g``: A is ``[M, K]`` (no batch
    dims, not transposed), B not transposed, at most one batch dim, in B and C."""
    ma, mb, mc = g.maps
    return ma == [g.m, g.k] and mb[-1] == g.n and len(g.batch) <= 1 and all(d in mb for d in g.batch)


def weight_a_text(name: str, g: _Gemm, beta: float, slot: str) -> str:
    """The helper ``@name(A, B, C)`` calling ``kiln_sgemm_wa`` once for all of C's batch."""
    ta, tb, tc = (ir.MemRefType(v.type) for v in (g.a, g.b, g.c))
    mb, mc = g.maps[1], g.maps[2]
    lines = [f"func.func private @{name}(%A: {ta}, %B: {tb}, %C: {tc}) {{"]
    add = lines.append
    strided_pointers(add, {"A": ta, "B": tb, "C": tc})
    for tag in ("A", "B", "C"):
        add_address(add, tag, f"%o{tag}", 4)
    rc = len(mc)
    values = {"M": f"%sC#{rc - 2}", "N": f"%sC#{rc - 1}", "K": "%sA#1", "lda": "%tA#0",
              "ldb": f"%tB#{len(mb) - 2}", "ldc": f"%tC#{rc - 2}"}
    if g.batch:
        d = g.batch[0]
        values.update(nb=f"%sC#{mc.index(d)}", sb=f"%tB#{mb.index(d)}", sc=f"%tC#{mc.index(d)}")
    else:
        add("  %one = arith.constant 1 : index")
        add("  %zero = arith.constant 0 : index")
        values.update(nb="%one", sb="%zero", sc="%zero")
    for v, src in values.items():
        add(f"  %{v} = arith.index_cast {src} : index to i64")
    add(f"  %beta = arith.constant {beta:.1f} : f32")
    add(pool_threads_line())
    add_slot(add, slot)
    add(f"  func.call @{WEIGHT_A_GEMM}(%nb, %M, %N, %K, %yA, %lda, %yB, %ldb, %sb, %beta, %yC, %ldc, %sc, %nthr, "
        "%slot) : (i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i64, i32, i64) -> ()")
    add("  return")
    add("}")
    return "\n".join(lines)
