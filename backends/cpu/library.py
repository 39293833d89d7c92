"""Library GEMM for the CPU backend: contractions become OpenBLAS ``sgemm`` calls in the JIT code.

MLIR_NOTES measured generated GEMM at about half of OpenBLAS even with a
tuned transform schedule, while a ``func.call`` to the OpenBLAS that numpy
bundles ran at numpy speed (both cores, OpenBLAS's own threads).  So the
stage ``kiln-cpu-library`` (after bufferization, before LLVM lowering)
finds every ``linalg.generic`` that is a matrix product in f32 —

* body ``out + a * b`` (``mulf`` then ``addf``),
* one reduction dim ``k``; the output map is the identity over the parallel
  dims, the last two of which are ``m`` and ``n``; the others are batch dims,
* ``a`` indexed by (a subset of the batch dims, in order) then ``m, k`` or
  ``k, m``; ``b`` by batch dims then ``k, n`` or ``n, k``,
* each operand's innermost stride statically 1 (else it stays generated)

— and replaces it with a call to a generated helper ``@kiln_gemm_<i>``
that reads the memrefs' strided metadata and calls
``scipy_cblas_sgemm64_`` (row major, transposes from the maps, leading
dims from the strides) once, or in ``scf.for`` loops over the batch dims.
A batch dim that ``b`` does not index is folded into ``m`` when ``a`` and
the output are contiguous (a linear layer on ``[B, L, K]`` is one GEMM).
A zero fill of the output right before the product is dropped (``beta = 0``);
otherwise ``beta = 1`` accumulates, as the generic did.

Pointers cross as ``i64`` (same registers as a pointer in the x86-64 and
AArch64 C ABIs).  The ExecutionEngine resolves the symbol from the shared
library :func:`shared_libs` names.  ``KILN_CPU_LIBRARY=0`` turns the stage
off (for measuring what it gains).
"""

from __future__ import annotations

import glob
import os
import re

from ..._mlir import ir
from ...pipelines.registry import Option, Pass, register_pass

__all__ = ["SGEMM", "CpuLibrary", "blas_library", "enabled", "rewrite_contractions", "shared_libs"]

#: The CBLAS symbol (numpy's bundled OpenBLAS, 64-bit integer interface).
SGEMM = "scipy_cblas_sgemm64_"
SGEMV = "scipy_cblas_sgemv64_"
#: OpenBLAS's per-calling-thread thread count (0.3.27+): set before each sgemm.
SET_THREADS = "openblas_set_num_threads_local"
#: Below this M*N*K a GEMM runs on one thread (OpenBLAS's own cut, 256K, is
#: lower).  The previous cut, 2^29, was chosen on a machine shared with five
#: other jobs, where OpenBLAS's second thread was often descheduled; on a
#: quiet machine two threads win from a few million multiply-adds up
#: (64x1024x4096: 9.4 ms on one thread, 4.3 ms on two).  ``KILN_BLAS_MT_MNK``
#: overrides it.
MT_MNK = 1 << 22
#: Products with at most this many rows (M) and a constant, untransposed B
#: run in ``kiln_sgemm_small`` (kiln/runtime/native): OpenBLAS packs all of
#: B on every call, which for a 8x1024x4096 product cost 1.7 ms against
#: 0.6 ms streaming a copy of B packed once, on two threads.  At M = 64 the
#: two are even (4.6 vs 4.4 ms); at 128x256x768 OpenBLAS wins (0.4 vs 1.0 ms).
#: ``KILN_SMALL_M`` overrides it.
SMALL_M = int(os.environ.get("KILN_SMALL_M", "16"))
#: The native small-M GEMM's symbol, and the one freeing a packed B.
SMALL_GEMM = "kiln_sgemm_small"
FREE_PACKED = "kiln_free_packed"
#: The function kiln-cpu-library adds to a module with packing slots: it
#: frees every packed copy (kiln.runtime.native.release_on_collect calls it).
RELEASE = "kiln_release_packed"
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def blas_library() -> str | None:
    """The path of the OpenBLAS shared library bundled with numpy, or None."""
    import numpy

    root = os.path.dirname(os.path.dirname(numpy.__file__))
    for pattern in ("numpy.libs/libscipy_openblas64_*.so*", "numpy/.dylibs/libscipy_openblas64_*.dylib"):
        found = sorted(glob.glob(os.path.join(root, pattern)))
        if found:
            return found[0]
    return None


def blas_threads() -> int:
    """The thread count multi-threaded sgemm calls use: ``KILN_BLAS_THREADS``, else OpenBLAS's own."""
    env = os.environ.get("KILN_BLAS_THREADS")
    if env:
        return max(1, int(env))
    import ctypes

    lib = blas_library()
    try:
        return max(1, int(ctypes.CDLL(lib).scipy_openblas_get_num_threads64_()))
    except (OSError, AttributeError):  # pragma: no cover - another OpenBLAS build
        return 1


def enabled() -> bool:
    """Whether library GEMM is on (``KILN_CPU_LIBRARY`` not ``0``) and a BLAS library was found."""
    return os.environ.get("KILN_CPU_LIBRARY", "1") != "0" and blas_library() is not None


def native_enabled() -> bool:
    """Whether products of at most :data:`SMALL_M` rows go to kiln's native GEMM
    (``KILN_NATIVE`` not ``0`` and the native library built)."""
    from ...runtime import native

    return native.load() is not None


def native_threads() -> int:
    """Threads the native GEMM uses (the native pool's size)."""
    from ...runtime import native

    return native.threads()


def shared_libs() -> list[str]:
    """Shared libraries the CPU ExecutionEngine loads: the BLAS library and
    kiln's native runtime, when found.

    Always passed, whether or not a module calls them: both are loaded in
    the process already, so opening them again costs nothing.
    """
    from ...runtime import native

    libs = [blas_library(), native.library() if native_enabled() else None]
    return [lib for lib in libs if lib]


# ---------------------------------------------------------------------------
# Matching
# ---------------------------------------------------------------------------


def _dims(amap) -> list[int] | None:
    out = []
    for e in amap.results:
        try:
            out.append(ir.AffineDimExpr(e).position)
        except (ValueError, TypeError):  # a constant or compound expression
            return None
    return out


def _inner_stride_one(t: ir.MemRefType, pos: int) -> bool:
    strides, _ = t.get_strides_and_offset()
    return strides[pos] == 1


def _is_contiguous(t: ir.MemRefType) -> bool:
    """Identity layout (row major, no offset)."""
    try:
        return ir.AffineMapAttr(t.layout).value == ir.AffineMap.get_identity(t.rank)
    except (ValueError, TypeError):  # a strided<...> layout
        return False


def _is_mul_add(block, args) -> bool:
    ops = list(block.operations)
    if len(ops) != 3 or [o.operation.name for o in ops] != ["arith.mulf", "arith.addf", "linalg.yield"]:
        return False
    mul, add, yld = (o.operation for o in ops)
    if not _same_set(list(mul.operands), [args[0], args[1]]):
        return False
    if not _same_set(list(add.operands), [args[2], mul.results[0]]):
        return False
    return yld.operands[0] == add.results[0]


def _same_set(values, wanted) -> bool:
    if len(values) != len(wanted):
        return False
    a, b = values
    return (a == wanted[0] and b == wanted[1]) or (a == wanted[1] and b == wanted[0])


class _Gemm:
    """A matched contraction: operand roles and positions."""

    def __init__(self, op, a, b, c, maps, batch, m, n, k):
        self.op, self.a, self.b, self.c = op, a, b, c
        self.maps, self.batch, self.m, self.n, self.k = maps, batch, m, n, k


def match(op) -> _Gemm | None:
    """A :class:`_Gemm` when ``op`` (a ``linalg.generic`` on memrefs) is an f32 matrix product."""
    if op.name != "linalg.generic" or len(op.operands) != 3 or len(op.results) != 0:
        return None
    iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    red = [i for i, s in enumerate(iters) if "reduction" in s]
    if len(red) != 1:
        return None
    k = red[0]
    maps = [_dims(ir.AffineMapAttr(a).value) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if any(m is None for m in maps):
        return None
    a, b, c = (op.operands[i] for i in range(3))
    types = [v.type for v in (a, b, c)]
    try:
        types = [ir.MemRefType(t) for t in types]
    except (ValueError, TypeError):  # tensors: not bufferized yet
        return None
    if not all(str(t.element_type) == "f32" for t in types):
        return None
    par = [i for i in range(len(iters)) if i != k]
    if maps[2] != par or len(par) < 2:
        return None
    block = op.regions[0].blocks[0]
    if not _is_mul_add(block, list(block.arguments)):
        return None
    batch, m, n = par[:-2], par[-2], par[-1]
    ma, mb = maps[0], maps[1]
    if sorted(ma[-2:]) != sorted([m, k]) or sorted(mb[-2:]) != sorted([k, n]):
        return None
    for mp in (ma, mb):
        bd = mp[:-2]
        if any(d not in batch for d in bd) or bd != sorted(bd) or len(set(mp)) != len(mp):
            return None
    if not (_inner_stride_one(types[0], len(ma) - 1) and _inner_stride_one(types[1], len(mb) - 1)
            and _inner_stride_one(types[2], len(maps[2]) - 1)):
        return None
    return _Gemm(op, a, b, c, maps, batch, m, n, k)


# ---------------------------------------------------------------------------
# Rewriting
# ---------------------------------------------------------------------------


def _zero_fill_before(op, c):
    """The op right before ``op`` when it is a generic filling ``c`` with 0.0, else None."""
    prev = None
    for o in op.block.operations:
        if o.operation == op:
            break
        prev = o.operation
    if prev is None or prev.name != "linalg.generic" or len(prev.operands) != 2:
        return None
    if prev.operands[1] != c or not isinstance(prev.operands[0].type, ir.F32Type):
        return None
    src = prev.operands[0].owner
    if not isinstance(src, (ir.Operation, ir.OpView)) or src.name != "arith.constant":
        return None
    if str(src.attributes["value"]).split(":")[0].strip() not in ("0.000000e+00", "0.0"):
        return None
    body = list(prev.regions[0].blocks[0].operations)
    if len(body) != 1:
        return None
    return prev


def _helper_text(name: str, g: _Gemm, beta: float, slot: str | None = None) -> tuple[str, bool]:
    """The helper ``@name(A, B, C)`` computing ``g`` with library calls, and
    whether it uses ``slot``: the packing slot global a constant B may get
    (see :func:`rewrite_contractions`), used when the native GEMM applies."""
    ta, tb, tc = (ir.MemRefType(v.type) for v in (g.a, g.b, g.c))
    ma, mb, mc = g.maps
    lines = [f"func.func private @{name}(%A: {ta}, %B: {tb}, %C: {tc}) {{"]
    add = lines.append
    for tag, t in (("A", ta), ("B", tb), ("C", tc)):
        r = t.rank
        idx = ", ".join(["index"] * r)
        add(f"  %b{tag}, %o{tag}, %s{tag}:{r}, %t{tag}:{r} = memref.extract_strided_metadata %{tag} : {t} -> "
            f"memref<f32>, index, {idx}, {idx}")
        add(f"  %q{tag} = memref.extract_aligned_pointer_as_index %b{tag} : memref<f32> -> index")
        add(f"  %p{tag} = arith.index_cast %q{tag} : index to i64")
    add("  %c0 = arith.constant 0 : index")
    add("  %c1 = arith.constant 1 : index")
    add("  %c4 = arith.constant 4 : i64")
    add(f"  %order = arith.constant {_ROW_MAJOR} : i32")
    trans_a = ma[-1] != g.k  # a is [.., k, m]
    trans_b = mb[-1] != g.n  # b is [.., n, k]
    add(f"  %ta = arith.constant {_TRANS if trans_a else _NO_TRANS} : i32")
    add(f"  %tb = arith.constant {_TRANS if trans_b else _NO_TRANS} : i32")
    add(f"  %tbsel = arith.constant {'true' if trans_b else 'false'}")
    add("  %zero64 = arith.constant 0 : i64")
    add("  %alpha = arith.constant 1.0 : f32")
    add(f"  %beta = arith.constant {beta:.1f} : f32")
    rc = len(mc)
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
    add(f"  %M0 = arith.index_cast %sC#{rc - 2} : index to i64")
    m_expr = "%M0"
    for j, d in enumerate(fold):
        add(f"  %Mf{j} = arith.index_cast %sC#{mc.index(d)} : index to i64")
        add(f"  %Mm{j} = arith.muli {m_expr}, %Mf{j} : i64")
        m_expr = f"%Mm{j}"
    add(f"  %N = arith.index_cast %sC#{rc - 1} : index to i64")
    add(f"  %K = arith.index_cast %sA#{ma.index(g.k)} : index to i64")
    add(f"  %lda = arith.index_cast %tA#{len(ma) - 2} : index to i64")
    add(f"  %ldb = arith.index_cast %tB#{len(mb) - 2} : index to i64")
    add(f"  %ldc = arith.index_cast %tC#{rc - 2} : index to i64")
    # One thread below MT_MNK multiply-adds per GEMM, else blas_threads().
    add(f"  %mn = arith.muli {m_expr}, %N : i64")
    add("  %mnk = arith.muli %mn, %K : i64")
    add(f"  %cut = arith.constant {int(os.environ.get('KILN_BLAS_MT_MNK', MT_MNK))} : i64")
    add("  %m1 = arith.constant 1 : i64")
    add(f"  %isvec = arith.cmpi eq, {m_expr}, %m1 : i64")
    # sgemv always on one thread: with two, OpenBLAS's M = 1 path took
    # 16 ms instead of 1.3 ms for 1x1024x4096 on this shared machine.
    add("  %big0 = arith.cmpi sge, %mnk, %cut : i64")
    add("  %true = arith.constant true")
    add("  %notvec = arith.xori %isvec, %true : i1")
    add("  %big = arith.andi %big0, %notvec : i1")
    add("  %one = arith.constant 1 : i32")
    add(f"  %many = arith.constant {blas_threads()} : i32")
    add("  %nt = arith.select %big, %many, %one : i32")
    add(f"  %prev = func.call @{SET_THREADS}(%nt) : (i32) -> i32")
    add(f"  %gv_t = arith.constant {_NO_TRANS if trans_b else _TRANS} : i32")
    add("  %gv_rows = arith.select %tbsel, %N, %K : i64")
    add("  %gv_cols = arith.select %tbsel, %K, %N : i64")
    add(f"  %incx = {'arith.addi %lda, %zero64 : i64' if trans_a else 'arith.constant 1 : i64'}")
    # Nested loops over the remaining batch dims; offsets in elements.
    offs = {"A": "%oA", "B": "%oB", "C": "%oC"}
    indent = "  "
    for j, d in enumerate(loops):
        add(f"{indent}scf.for %i{j} = %c0 to %sC#{mc.index(d)} step %c1 {{")
        indent += "  "
        for tag, mp in (("A", ma), ("B", mb), ("C", mc)):
            if d in mp:
                add(f"{indent}%m{tag}{j} = arith.muli %i{j}, %t{tag}#{mp.index(d)} : index")
                add(f"{indent}%a{tag}{j} = arith.addi {offs[tag]}, %m{tag}{j} : index")
                offs[tag] = f"%a{tag}{j}"
    for tag in ("A", "B", "C"):
        add(f"{indent}%e{tag} = arith.index_cast {offs[tag]} : index to i64")
        add(f"{indent}%x{tag} = arith.muli %e{tag}, %c4 : i64")
        add(f"{indent}%y{tag} = arith.addi %p{tag}, %x{tag} : i64")
    # Few rows times a weight (one constant B for every call): kiln's native
    # GEMM, which packs B once into the slot and runs on the native pool.
    # Products of activations stay with OpenBLAS: unpacked, a B with a long
    # K is read a page per row (16x1024x4096: 6.6 ms vs OpenBLAS's 2.0 ms).
    small = slot is not None and not trans_a and not trans_b and not any(d in mb for d in loops)
    if small:
        add(f"{indent}%smax = arith.constant {SMALL_M} : i64")
        add(f"{indent}%small = arith.cmpi sle, {m_expr}, %smax : i64")
        add(f"{indent}%nthr = arith.constant {native_threads()} : i32")
        add(f"{indent}%slotm = memref.get_global @{slot} : memref<1xi64>")
        add(f"{indent}%slotq = memref.extract_aligned_pointer_as_index %slotm : memref<1xi64> -> index")
        add(f"{indent}%slot = arith.index_cast %slotq : index to i64")
        add(f"{indent}scf.if %small {{")
        add(f"{indent}  func.call @{SMALL_GEMM}({m_expr}, %N, %K, %yA, %lda, %yB, %ldb, %beta, %yC, %ldc, %nthr, "
            "%slot) : (i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32, i64) -> ()")
        add(f"{indent}}} else {{")
        indent += "  "
    # One row (batch-1 inference): sgemv, y = B^T x (b stored [K, N]) or B x (stored [N, K]);
    # this OpenBLAS's sgemm does not forward M = 1 to gemv and ran 3x slower.
    add(f"{indent}scf.if %isvec {{")
    add(f"{indent}  func.call @{SGEMV}(%order, %gv_t, %gv_rows, %gv_cols, %alpha, %yB, %ldb, %yA, %incx, %beta, %yC, "
        "%m1) : (i32, i32, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64) -> ()")
    add(f"{indent}}} else {{")
    add(f"{indent}  func.call @{SGEMM}(%order, %ta, %tb, {m_expr}, %N, %K, %alpha, %yA, %lda, %yB, %ldb, %beta, "
        "%yC, %ldc) : (i32, i32, i32, i64, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64) -> ()")
    add(f"{indent}}}")
    if small:
        indent = indent[:-2]
        add(f"{indent}}}")
    for _ in loops:
        indent = indent[:-2]
        add(f"{indent}}}")
    add(f"  %back = func.call @{SET_THREADS}(%prev) : (i32) -> i32")  # numpy in this thread keeps its count
    add("  return")
    add("}")
    return "\n".join(lines), small


# ---------------------------------------------------------------------------
# Convolutions: im2col + sgemm
# ---------------------------------------------------------------------------

_WINDOW = re.compile(r"^d(\d)(?: \* (\d+))? \+ d(\d)(?: \* (\d+))?$")


class _Conv:
    """A matched NCHW/FCHW convolution: strides and dilations from the input map."""

    def __init__(self, op, x, w, y, strides, dilations):
        self.op, self.x, self.w, self.c = op, x, w, y
        self.strides, self.dilations = strides, dilations


def match_conv(op) -> _Conv | None:
    """A :class:`_Conv` when ``op`` is ``y[n, f, oh, ow] += x[n, c, oh*s + kh*d, ow*s + kw*d] * w[f, c, kh, kw]``
    on contiguous f32 memrefs (the generalized ``linalg.conv_2d_nchw_fchw`` on a padded input)."""
    if op.name != "linalg.generic" or len(op.operands) != 3 or len(op.results) != 0:
        return None
    iters = ["reduction" in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    if iters != [False] * 4 + [True] * 3:
        return None
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if _dims(maps[1]) != [1, 4, 5, 6] or _dims(maps[2]) != [0, 1, 2, 3]:
        return None
    xr = [str(e) for e in maps[0].results]
    if len(xr) != 4 or xr[0] != "d0" or xr[1] != "d4":
        return None
    strides, dilations = [], []
    for text, (out_d, k_d) in zip(xr[2:], ((2, 5), (3, 6))):
        m = _WINDOW.match(text)
        if m is None or int(m.group(1)) != out_d or int(m.group(3)) != k_d:
            return None
        strides.append(int(m.group(2) or 1))
        dilations.append(int(m.group(4) or 1))
    try:
        types = [ir.MemRefType(op.operands[i].type) for i in range(3)]
    except (ValueError, TypeError):
        return None
    if not all(str(t.element_type) == "f32" and _is_contiguous(t) for t in types):
        return None
    block = op.regions[0].blocks[0]
    if not _is_mul_add(block, list(block.arguments)):
        return None
    return _Conv(op, op.operands[0], op.operands[1], op.operands[2], strides, dilations)


def _conv_text(name: str, g: _Conv, beta: float) -> str:
    tx, tw, ty = (ir.MemRefType(v.type) for v in (g.x, g.w, g.c))
    (sh, sw), (dh, dw) = g.strides, g.dilations
    # A 1x1 window with stride 1 reads x[n] as the [C, H*W] matrix itself.
    direct = list(tw.shape[2:]) == [1, 1] and (sh, sw) == (1, 1) and list(tx.shape[2:]) == list(ty.shape[2:]) \
        and not any(ir.ShapedType.is_dynamic_size(d) for d in tx.shape[2:])
    lines = [f"func.func private @{name}(%X: {tx}, %W: {tw}, %Y: {ty}) {{"]
    add = lines.append
    for i in range(4):
        add(f"  %i{i} = arith.constant {i} : index")
    add("  %c0 = arith.constant 0 : index")
    add("  %c1 = arith.constant 1 : index")
    for tag, t in (("X", tx), ("W", tw), ("Y", ty)):
        for i in range(4):
            add(f"  %{tag}{i} = memref.dim %{tag}, %i{i} : {t}")
        add(f"  %q{tag} = memref.extract_aligned_pointer_as_index %{tag} : {t} -> index")
        add(f"  %p{tag} = arith.index_cast %q{tag} : index to i64")
    add("  %ck0 = arith.muli %W1, %W2 : index")
    add("  %CK = arith.muli %ck0, %W3 : index")
    add("  %P = arith.muli %Y2, %Y3 : index")
    add("  %HW = arith.muli %X2, %X3 : index")
    add("  %xs = arith.muli %X1, %HW : index")  # elements per image of x
    add("  %ys = arith.muli %Y1, %P : index")  # per image of y
    for v in ("CK", "P", "xs", "ys"):
        add(f"  %{v}64 = arith.index_cast %{v} : index to i64")
    add("  %F64 = arith.index_cast %Y1 : index to i64")
    add("  %c4 = arith.constant 4 : i64")
    add(f"  %order = arith.constant {_ROW_MAJOR} : i32")
    add(f"  %nt0 = arith.constant {_NO_TRANS} : i32")
    add("  %alpha = arith.constant 1.0 : f32")
    add(f"  %beta = arith.constant {beta:.1f} : f32")
    add("  %fp = arith.muli %F64, %P64 : i64")
    add("  %mnk = arith.muli %fp, %CK64 : i64")
    add(f"  %cut = arith.constant {int(os.environ.get('KILN_BLAS_MT_MNK', MT_MNK))} : i64")
    add("  %big = arith.cmpi sge, %mnk, %cut : i64")
    add("  %one = arith.constant 1 : i32")
    add(f"  %many = arith.constant {blas_threads()} : i32")
    add("  %nt = arith.select %big, %many, %one : i32")
    add(f"  %prev = func.call @{SET_THREADS}(%nt) : (i32) -> i32")
    if not direct:
        add("  %col = memref.alloc(%CK, %P) : memref<?x?xf32>")
        add("  %qc = memref.extract_aligned_pointer_as_index %col : memref<?x?xf32> -> index")
        add("  %pc = arith.index_cast %qc : index to i64")
    add("  scf.for %n = %c0 to %Y0 step %c1 {")
    add("    %n64 = arith.index_cast %n : index to i64")
    if direct:
        add("    %bo0 = arith.muli %n64, %xs64 : i64")
        add("    %bo = arith.muli %bo0, %c4 : i64")
        add("    %pb = arith.addi %pX, %bo : i64")
        ldb = "%P64"
    else:
        add("    scf.for %c = %c0 to %W1 step %c1 {")
        add("      scf.for %kh = %c0 to %W2 step %c1 {")
        add("        scf.for %kw = %c0 to %W3 step %c1 {")
        add("          %r0 = arith.muli %c, %W2 : index")
        add("          %r1 = arith.addi %r0, %kh : index")
        add("          %r2 = arith.muli %r1, %W3 : index")
        add("          %row = arith.addi %r2, %kw : index")
        add("          %khd = arith.muli %kh, %dh : index" if dh != 1 else "          %khd = arith.addi %kh, %c0 : index")
        add("          %kwd = arith.muli %kw, %dw : index" if dw != 1 else "          %kwd = arith.addi %kw, %c0 : index")
        add("          scf.for %oh = %c0 to %Y2 step %c1 {")
        add("            %ih0 = arith.muli %oh, %sh : index" if sh != 1 else "            %ih0 = arith.addi %oh, %c0 : index")
        add("            %ih = arith.addi %ih0, %khd : index")
        add("            %cb = arith.muli %oh, %Y3 : index")
        add("            scf.for %ow = %c0 to %Y3 step %c1 {")
        add("              %iw0 = arith.muli %ow, %sw : index" if sw != 1 else "              %iw0 = arith.addi %ow, %c0 : index")
        add("              %iw = arith.addi %iw0, %kwd : index")
        add(f"              %v = memref.load %X[%n, %c, %ih, %iw] : {tx}")
        add("              %ci = arith.addi %cb, %ow : index")
        add("              memref.store %v, %col[%row, %ci] : memref<?x?xf32>")
        add("            }")
        add("          }")
        add("        }")
        add("      }")
        add("    }")
        add("    %pb = arith.addi %pc, %c0_64 : i64")
        ldb = "%P64"
    add("    %yo0 = arith.muli %n64, %ys64 : i64")
    add("    %yo = arith.muli %yo0, %c4 : i64")
    add("    %py = arith.addi %pY, %yo : i64")
    add(f"    func.call @{SGEMM}(%order, %nt0, %nt0, %F64, %P64, %CK64, %alpha, %pW, %CK64, %pb, {ldb}, %beta, "
        "%py, %P64) : (i32, i32, i32, i64, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64) -> ()")
    add("  }")
    if not direct:
        add("  memref.dealloc %col : memref<?x?xf32>")
    add(f"  %back = func.call @{SET_THREADS}(%prev) : (i32) -> i32")
    add("  return")
    add("}")
    text = "\n".join(lines)
    consts = (f"  %sh = arith.constant {sh} : index\n  %sw = arith.constant {sw} : index\n"
              f"  %dh = arith.constant {dh} : index\n  %dw = arith.constant {dw} : index\n"
              "  %c0_64 = arith.constant 0 : i64\n")
    head, rest = text.split("\n", 1)
    return head + "\n" + consts + rest


_DECL = (f"func.func private @{SGEMM}(i32, i32, i32, i64, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64)\n"
         f"func.func private @{SGEMV}(i32, i32, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64)\n"
         f"func.func private @{SET_THREADS}(i32) -> i32")
_NATIVE_DECL = (f"func.func private @{SMALL_GEMM}(i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32, i64)\n"
                f"func.func private @{FREE_PACKED}(i64)")


def rewrite_contractions(module) -> int:
    """Replace every matched contraction in ``module`` (bufferized) with an sgemm call; the count."""
    from ..._mlir import func

    module = module.operation  # an ir.Module or its operation
    body = module.regions[0].blocks[0]
    names = {ir.StringAttr(op.operation.attributes["sym_name"]).value
             for op in body.operations if op.operation.name == "func.func"}
    found = []

    def visit(op):
        if op.name == "linalg.generic":
            g = match(op) or match_conv(op)
            if g is not None:
                found.append(g)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    if not found:
        return 0
    native = native_enabled()
    texts = []
    if SGEMM not in names:
        texts.append(_DECL)
        if native:
            texts.append(_NATIVE_DECL)
    calls, slots = [], []
    constant_globals = {
        ir.StringAttr(op.operation.attributes["sym_name"]).value
        for op in body.operations
        if op.operation.name == "memref.global" and "constant" in op.operation.attributes
    }
    for i, g in enumerate(found):
        conv = isinstance(g, _Conv)
        name = f"kiln_{'conv' if conv else 'gemm'}_{i}"
        while name in names:
            name += "_"
        names.add(name)
        fill = _zero_fill_before(g.op, g.c)
        beta = 0.0 if fill is not None else 1.0
        if conv:
            texts.append(_conv_text(name, g, beta))
        else:
            # A weight may get a slot the native GEMM packs it into once.
            slot = f"kiln_pack_{i}" if native and _constant_global(g.b) in constant_globals else None
            text, uses_slot = _helper_text(name, g, beta, slot)
            texts.append(text)
            if uses_slot:
                slots.append(slot)
        calls.append((name, g, fill))
    if slots and RELEASE not in names:
        texts.append(_release_text(slots))
    helpers = ir.Module.parse("\n".join(texts), module.context)
    first = body.operations[0]
    for op in list(helpers.body.operations):
        op.operation.move_before(first)
    for name, g, fill in calls:
        with ir.InsertionPoint(g.op), g.op.location:
            args = [g.x, g.w, g.c] if isinstance(g, _Conv) else [g.a, g.b, g.c]
            func.CallOp([], ir.FlatSymbolRefAttr.get(name), args)
        g.op.erase()
        if fill is not None:
            fill.erase()
    return len(calls)


def _constant_global(v) -> str | None:
    """The global's name when ``v`` is a ``memref.get_global`` result, else None."""
    # An op or a block (a block argument).  Not ``owner.name``: GetGlobalOp's
    # generated ``name`` accessor is the symbol, not the op name.
    op = getattr(v.owner, "operation", None)
    if op is not None and op.name == "memref.get_global":
        return ir.FlatSymbolRefAttr(op.attributes["name"]).value
    return None


def _release_text(slots: list[str]) -> str:
    """The packing slot globals and ``@kiln_release_packed`` freeing what they hold."""
    lines = [f'memref.global "private" @{s} : memref<1xi64> = dense<0>' for s in slots]
    lines.append(f"func.func @{RELEASE}() {{")
    lines.append("  %c0 = arith.constant 0 : index")
    lines.append("  %z = arith.constant 0 : i64")
    for s in slots:
        lines.append(f"  %g_{s} = memref.get_global @{s} : memref<1xi64>")
        lines.append(f"  %v_{s} = memref.load %g_{s}[%c0] : memref<1xi64>")
        lines.append(f"  func.call @{FREE_PACKED}(%v_{s}) : (i64) -> ()")
        lines.append(f"  memref.store %z, %g_{s}[%c0] : memref<1xi64>")
    lines.append("  return")
    lines.append("}")
    return "\n".join(lines)


@register_pass
class CpuLibrary(Pass):
    """Matrix products as OpenBLAS sgemm calls (bufferized modules)."""

    name = "kiln-cpu-library"
    summary = "Replace f32 matmul-like linalg.generic ops on memrefs with OpenBLAS sgemm calls"
    options = (Option("enabled", int, 1, "0: keep generated code (KILN_CPU_LIBRARY=0 does the same)"),)

    def run(self, module) -> None:
        if self.option("enabled") and enabled():
            rewrite_contractions(module)
