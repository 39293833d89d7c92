"""Library GEMM for the CPU backend: contractions become OpenBLAS ``sgemm`` calls in the JIT code.

MLIR_NOTES measured generated GEMM at about half of OpenBLAS even with a
tuned transform schedule, while a ``func.call`` to the OpenBLAS that numpy
bundles ran at numpy speed (both cores, OpenBLAS's own threads).  So the
stage ``kiln-cpu-library`` (after bufferization, before LLVM lowering)
takes every placeholder of the library GEMM: a ``linalg.generic``
contraction marked ``library_call = "native.gemm"`` by
``convert-kiln-to-linalg`` (an f32 ``kiln.matmul`` that kiln-select-kernels
gave ``native.gemm``, and the f32 products of a generated attention), or
``"native.conv2d"`` (an f32 ``kiln.conv2d``'s im2col product).  Its body is not inspected; its maps give the roles --

* one reduction dim ``k``; the output map is the identity over the parallel
  dims, the last two of which are ``m`` and ``n``; the others are batch dims,
* ``a`` indexed by (a subset of the batch dims, in order) then ``m, k`` or
  ``k, m``; ``b`` by batch dims then ``k, n`` or ``n, k``,
* each operand's innermost stride statically 1 (else the placeholder runs
  as the generated contraction it is)

— and replaces it with a call to a generated helper ``@kiln_gemm_<i>``
(its text: :mod:`.gemm_text`) that reads the memrefs' strided metadata and calls
``scipy_cblas_sgemm64_`` (row major, transposes from the maps, leading
dims from the strides) once, or in ``scf.for`` loops over the batch dims.
A batch dim that ``b`` does not index is folded into ``m`` when ``a`` and
the output are contiguous (a linear layer on ``[B, L, K]`` is one GEMM).
A zero fill of the output right before the product is dropped (``beta = 0``);
otherwise ``beta = 1`` accumulates, as the generic did.

With kiln's native runtime (:mod:`kiln.runtime.native`) three kinds of
product leave OpenBLAS: few rows times a constant B (``kiln_sgemm_small``,
B packed once into a slot), a constant A times activations
(``kiln_sgemm_wa``, A packed once, all of the batch in one call on the
native pool), and convolutions (``kiln_conv2d``, see :mod:`.conv`: the
im2col copy, the zero padding, the bias init and a residual / ReLU / pool
epilogue are folded into the call).  What a call takes over besides its
placeholder is marked as its part (``kiln.call_part``): the epilogue steps
chosen on kiln IR (:mod:`.epilogues`) and a convolution's own pieces; no
loop is recognised by its body.  (Attention, layer / RMS norm, strided max
pools and transposes: kiln-select-kernels chooses their native kernels on
kiln IR, :mod:`.library_kernels`, and kiln-cpu-library-calls calls them.)
The products left to OpenBLAS run as single-threaded slabs on the native
pool (``kiln_sgemm_par``), not on OpenBLAS's own threads.  A bias add, a
ReLU / exact GELU and a residual add chosen as a product's epilogue steps
and rewriting its output right after it are applied in the native small
GEMM's registers (``kiln_sgemm_small_epi``) or by one ``kiln_bias_act``
call after the other paths (:mod:`.gemm_epilogue`).

This module holds what the helpers share (symbols, thread-count lines,
strided metadata, packing slots) and the placeholders' reading; the
stage's driver and pass are :mod:`.contractions`.

Pointers cross as ``i64`` (same registers as a pointer in the x86-64 and
AArch64 C ABIs).  The ExecutionEngine resolves the symbol from the shared
library :func:`shared_libs` names.  ``KILN_CPU_LIBRARY=0`` turns the stage
off (for measuring what it gains).
"""

from __future__ import annotations

from ..._mlir import ir
from ...conversions.kiln_to_linalg.library_call import CALL_ATTRS, CALL_DTYPES, CONV2D, GEMM, LIBRARY_CALL
from ...runtime.blas import (
    SET_THREADS,
    SGEMM,
    blas_library,
    blas_threads,  # noqa: F401  (re-exported: the backend's own name for it)
)
from ...transforms.partition import WEIGHTS_ATTR
from .buffers import indexing_maps, view_root

__all__ = ["SGEMM", "blas_library", "enabled", "gemm_of", "is_gemm_placeholder", "placeholder_entry", "shared_libs",
           "unmark", "weight_a_enabled", "weight_test"]

SGEMV = "scipy_cblas_sgemv64_"
# SGEMM (numpy's bundled OpenBLAS, 64-bit integer interface) and SET_THREADS,
# OpenBLAS's thread-count setter (0.3.27+; it returns the previous count), are
# the runtime's (kiln.runtime.blas).  In numpy's pthreads build SET_THREADS
# sets the process-wide count, not the calling thread's, so with the native
# runtime helpers go through BLAS_ENTER / BLAS_LEAVE instead
# (:func:`blas_threads_lines`).
#: kiln_dispatch.c: set OpenBLAS's count for one helper's products, and put
#: back the count from before the first helper in flight, under one lock.
BLAS_ENTER, BLAS_LEAVE = "kiln_blas_enter", "kiln_blas_leave"
#: kiln_dispatch.c: a product's bias add and activation (:mod:`.gemm_epilogue`).
BIAS_ACT = "kiln_bias_act"
#: Thread counts are asked at run time, never baked into the generated code,
#: so a kernel compiled (and cached) under one ``KILN_THREADS`` serves any
#: pool size: the native pool's size (kiln_native.c), the count a
#: multi-threaded sgemm uses with the native runtime (kiln_dispatch.c:
#: ``KILN_BLAS_THREADS`` or OpenBLAS's own, handed over by
#: :func:`kiln.runtime.blas.native_with_blas`), and OpenBLAS's own count without it.
POOL_THREADS, BLAS_THREADS = "kiln_pool_threads", "kiln_blas_threads"
BLAS_GET_THREADS = "scipy_openblas_get_num_threads64_"
_GETTERS = (POOL_THREADS, BLAS_THREADS, BLAS_GET_THREADS)
#: Below this M*N*K a GEMM runs on one thread (OpenBLAS's own cut, 256K, is
#: lower).  The previous cut, 2^29, was chosen on a machine shared with five
#: other jobs, where OpenBLAS's second thread was often descheduled; on a
#: quiet machine two threads win from a few million multiply-adds up
#: (64x1024x4096: 9.4 ms on one thread, 4.3 ms on two).  ``KILN_BLAS_MT_MNK``
#: overrides it.
MT_MNK = 1 << 22


def mt_mnk() -> int:
    """:data:`MT_MNK`, or the ``blas_mt_mnk`` option (``KILN_BLAS_MT_MNK``) when set."""
    from ...options import current

    return current().blas_mt_mnk

#: Products with at most :func:`small_m` rows (M) and a constant, untransposed
#: B run in ``kiln_sgemm_small`` (kiln/runtime/native): OpenBLAS packs all of
#: B on every call, which for a 8x1024x4096 product cost 1.7 ms against
#: 0.6 ms streaming a copy of B packed once, on two threads.  Once the
#: kernel prefetched its panels and packed A, it also beat OpenBLAS (as
#: kiln_sgemm_par slabs, or on one thread in a split kernel's half) from
#: 64 up to 512 rows: 96..512 x 256 x 768 0.84-0.95x, 128 x 1024 x 4096
#: 0.73x, 256 x 256 x 1024 on one thread 0.87x; the transformer block at
#: (2, 128) / (4, 128) / (1, 256) ran 0.86 / 0.92 / 0.89x (worker pairs,
#: SMALL_M 64 -> 512).  At 2048 rows the two were even (0.93-1.02x), and
#: at 4096 OpenBLAS was ahead (1.07-1.12x) until the kernel stored its
#: panels from registers: then the transformer block at (8, 512) and (2,
#: 512), M = 4096 and 1024, ran 0.966-0.979 / 0.976x with SMALL_M 512 ->
#: 8192 (worker pairs).  4096: the most rows the bench measures (the kernel
#: packed A then, M x K floats of scratch; since the twenty-third session
#: it reads A in place, and larger products are not measured).
#: All of that was on AVX-512 (AMD Zen 4); see :func:`small_m` for AVX2.
SMALL_M_AVX512 = 4096
#: On AVX2 (8-float vectors: an AMD Zen 3, 2026-12-03) OpenBLAS's kernel
#: wins from about 64 rows, even as it packs B on every call: OpenBLAS
#: slabs (kiln_sgemm_par) against the native GEMM, alternating, two
#: threads, 128 / 512 / 4096 x 256 x 768..1024 0.83 / 0.83-0.85 / 0.74x,
#: 128 x 1024 x 4096 0.87x, 64 x 256 x 768 0.91x; the native one is ahead at
#: 96 x 1024 x 4096 (1.10x with OpenBLAS), 64 x 1024 x 4096 (1.14x) and 32
#: rows (0.96-1.19x), and far ahead at 1 and 8 (2.5x, 1.75x).  Once the
#: native GEMM stopped prefetching in every row block on AVX2, the two were
#: within 8% of each other from 128 to 4096 rows (OpenBLAS / native 0.92-1.07)
#: and the transformer block at (4, 128) / (8, 512) ran 1.04 / 1.02x with
#: the native one (worker pairs, KILN_SMALL_M 96 vs 4096): a tie, kept.
SMALL_M_AVX2 = 96


def small_m() -> int:
    """Products with at most this many rows (M) and a constant, untransposed
    B run in ``kiln_sgemm_small``: :data:`SMALL_M_AVX512` or
    :data:`SMALL_M_AVX2` by the native library's vector width;
    the ``small_m`` option (``KILN_SMALL_M``) overrides it."""
    from ...options import current

    if current().small_m is not None:
        return current().small_m
    from ...runtime import native

    lib = native.load()
    return SMALL_M_AVX512 if lib is not None and lib.kiln_vector_width() == 16 else SMALL_M_AVX2

#: The native small-M GEMM's symbol, and the one freeing a packed B.
SMALL_GEMM = "kiln_sgemm_small"
#: The same with a product's epilogue (bias, activation, residual) applied in its registers.
SMALL_GEMM_EPI = "kiln_sgemm_small_epi"
#: The same (with the epilogue's arguments) for a constant B given transposed (``[N, K]``).
SMALL_GEMM_BT = "kiln_sgemm_small_bt"
FREE_PACKED = "kiln_free_packed"
#: Products whose A is a constant (a convolution's weight times its im2col)
#: run in the native weight-A GEMM, over all images at once on the native
#: pool; a convolution whose im2col comes from a copy kernel gathers it in
#: ``kiln_conv2d`` itself instead (no im2col buffer).  ``KILN_NATIVE_WA=0``
#: keeps them with OpenBLAS.
WEIGHT_A_GEMM = "kiln_sgemm_wa"
NATIVE_CONV = "kiln_conv2d"
#: A convolution whose output only feeds a global average / sum pool (kiln_vconv.c).
NATIVE_CONV_MEAN = "kiln_conv2d_mean"
#: Two convolutions, the second pooled, in one call (kiln_cpair.c; conv_pair.py).
NATIVE_CONV_PAIR = "kiln_conv2d_pair"
#: OpenBLAS's sgemm in single-threaded slabs on the native pool (its own
#: threads busy-wait for each other, and stall when a core is taken).
SGEMM_PAR = "kiln_sgemm_par"
#: The function kiln-cpu-library adds to a module with packing slots: it
#: frees every packed copy (kiln.runtime.native.release_on_collect calls it).
RELEASE = "kiln_release_packed"
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def enabled() -> bool:
    """Whether library GEMM is on (the ``cpu_library`` option, ``KILN_CPU_LIBRARY``) and a BLAS library was found."""
    from ...options import current

    return current().cpu_library and blas_library() is not None


def native_enabled() -> bool:
    """Whether products of at most :func:`small_m` rows go to kiln's native GEMM
    (``KILN_NATIVE`` not ``0`` and the native library built); loading it hands
    it the BLAS sgemm (``kiln_sgemm_par`` calls it), with the thread count
    multi-threaded sgemm calls use (:func:`blas_threads`)."""
    from ...runtime.blas import native_with_blas

    return native_with_blas() is not None


def weight_a_enabled() -> bool:
    """Whether products with a constant A and convolutions go to the native
    weight-A GEMM and ``kiln_conv2d`` (native runtime on, the ``native_wa`` option, ``KILN_NATIVE_WA``)."""
    from ...options import current

    return current().native_wa and native_enabled()


def native_threads() -> int:
    """The native pool's size in this process (the ``threads`` option).  Not read by
    code generation: the helpers ask the pool at run time (:func:`pool_threads_line`)."""
    from ...runtime import native

    return native.threads()


def shared_libs() -> list[str]:
    """Shared libraries the CPU ExecutionEngine loads: the BLAS library and
    kiln's native runtime, when found (:func:`kiln.runtime.blas.kernel_libraries`)."""
    from ...runtime.blas import kernel_libraries

    return kernel_libraries()


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


def add_pointer(add, tag: str, t, arg: str | None = None, indent: str = "  ") -> None:
    """Emit ``%p<tag>``, the aligned pointer of memref ``%<arg>`` (default
    ``%<tag>``) of type ``t`` as an i64 (what the native calls take), or 0
    when ``t`` is None (an optional argument left out)."""
    if t is None:
        add(f"{indent}%p{tag} = arith.constant 0 : i64")
        return
    add(f"{indent}%q{tag} = memref.extract_aligned_pointer_as_index %{arg or tag} : {t} -> index")
    add(f"{indent}%p{tag} = arith.index_cast %q{tag} : index to i64")


def batch_loops(add, loops, ma, mb, mc) -> tuple[dict[str, str], str]:
    """Open an ``scf.for`` per batch dim of a product (``loops``, extents
    ``%sC#i``) and add each operand's stride (``%tA#i`` ...) times the
    induction variable to its offset; returns the offsets in elements by
    tag (``A``, ``B``, ``C``; from ``%oA`` ...) and the indentation inside.
    The caller closes the loops."""
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
    return offs, indent


def gemm_sizes(add, ma, mb, mc, fold, k_pos: int) -> str:
    """``%N``, ``%K`` (A's dim ``k_pos``), ``%lda`` / ``%ldb`` / ``%ldc`` of a
    product from its operands' sizes and strides (``%sA#i``, ``%tA#i``, ...),
    and its rows: C's second-to-last dim times the batch dims ``fold`` folded
    into them; returns the rows' SSA name."""
    rc = len(mc)
    add(f"  %M0 = arith.index_cast %sC#{rc - 2} : index to i64")
    m_expr = "%M0"
    for j, d in enumerate(fold):
        add(f"  %Mf{j} = arith.index_cast %sC#{mc.index(d)} : index to i64")
        add(f"  %Mm{j} = arith.muli {m_expr}, %Mf{j} : i64")
        m_expr = f"%Mm{j}"
    add(f"  %N = arith.index_cast %sC#{rc - 1} : index to i64")
    add(f"  %K = arith.index_cast %sA#{k_pos} : index to i64")
    add(f"  %lda = arith.index_cast %tA#{len(ma) - 2} : index to i64")
    add(f"  %ldb = arith.index_cast %tB#{len(mb) - 2} : index to i64")
    add(f"  %ldc = arith.index_cast %tC#{rc - 2} : index to i64")
    return m_expr


def strided_pointers(add, types: dict) -> None:
    """Emit, per memref argument ``%<tag>`` of ``types`` (tag -> MemRefType),
    its strided metadata (offset ``%o<tag>``, sizes ``%s<tag>#i``, strides
    ``%t<tag>#i``) and its aligned pointer as an i64 (``%p<tag>``)."""
    for tag, t in types.items():
        r, el = t.rank, t.element_type
        idx = ", ".join(["index"] * r)
        if r == 0:  # a scalar (an attention's mask of one value): no sizes, no strides
            add(f"  %b{tag}, %o{tag} = memref.extract_strided_metadata %{tag} : {t} -> memref<{el}>, index")
        else:
            add(f"  %b{tag}, %o{tag}, %s{tag}:{r}, %t{tag}:{r} = memref.extract_strided_metadata %{tag} : {t} -> "
                f"memref<{el}>, index, {idx}, {idx}")
        add(f"  %q{tag} = memref.extract_aligned_pointer_as_index %b{tag} : memref<{el}> -> index")
        add(f"  %p{tag} = arith.index_cast %q{tag} : index to i64")


def add_address(add, tag: str, offset: str, size: int, indent: str = "  ") -> None:
    """Emit ``%y<tag>``, the byte address of memref ``%<tag>``'s element at
    ``offset`` (an index value, in elements of ``size`` bytes) from its
    pointer ``%p<tag>`` (:func:`strided_pointers`)."""
    add(f"{indent}%e{tag} = arith.index_cast {offset} : index to i64")
    add(f"{indent}%z{tag} = arith.constant {size} : i64")
    add(f"{indent}%x{tag} = arith.muli %e{tag}, %z{tag} : i64")
    add(f"{indent}%y{tag} = arith.addi %p{tag}, %x{tag} : i64")


def pool_threads_line(var: str = "%nthr", indent: str = "  ") -> str:
    """The line setting ``var`` (an i32) to the native pool's size, asked at
    run time (:data:`POOL_THREADS`; :func:`insert_helpers` declares it)."""
    return f"{indent}{var} = func.call @{POOL_THREADS}() : () -> i32"


def blas_threads_value(var: str, native: bool, indent: str = "  ") -> str:
    """The line setting ``var`` (an i32) to the thread count of a
    multi-threaded sgemm, asked at run time: the native library's
    :data:`BLAS_THREADS` with the native runtime, else OpenBLAS's own count."""
    return f"{indent}{var} = func.call @{BLAS_THREADS if native else BLAS_GET_THREADS}() : () -> i32"


def add_slot(add, slot: str | None, suffix: str = "", indent: str = "  ") -> None:
    """Emit ``%slot<suffix>``, the address of the packing slot global ``slot``
    as an i64, or 0 when ``slot`` is None (the weight packed per call)."""
    if slot is None:
        add(f"{indent}%slot{suffix} = arith.constant 0 : i64")
        return
    add(f"{indent}%slotm{suffix} = memref.get_global @{slot} : memref<1xi64>")
    add(f"{indent}%slotq{suffix} = memref.extract_aligned_pointer_as_index %slotm{suffix} : memref<1xi64> -> index")
    add(f"{indent}%slot{suffix} = arith.index_cast %slotq{suffix} : index to i64")


def index_value(v):
    """``v`` (an int or an index value) as an index value at the current insertion point."""
    from ..._mlir import arith

    return arith.ConstantOp(ir.IndexType.get(), v).result if isinstance(v, int) else v


def contiguous_f32(value, rank: int | None = None, element: str = "f32") -> bool:
    """Whether ``value`` is an f32 (or ``element``) memref with the identity
    layout (of ``rank`` dims, when given): what the native calls take."""
    try:
        t = ir.MemRefType(value.type)
    except (ValueError, TypeError):  # a tensor, a scalar
        return False
    return (rank is None or t.rank == rank) and str(t.element_type) == element and _is_contiguous(t)


class _Gemm:
    """A matched contraction: operand roles and positions."""

    def __init__(self, op, a, b, c, maps, batch, m, n, k):
        self.op, self.a, self.b, self.c = op, a, b, c
        self.maps, self.batch, self.m, self.n, self.k = maps, batch, m, n, k


def product_parts(op, dtypes_ok, a_transposed: bool = True, extra_inputs: int = 0):
    """``(a, b, c, maps, batch, m, n, k, element types)`` of a product's
    placeholder ``op`` (a ``linalg.generic`` on memrefs marked by
    ``convert-kiln-to-linalg``: its body is never inspected) when its maps
    are those of a batched matrix product ``c += a b`` whose operands' last
    dims are contiguous, ``dtypes_ok(a, b, c element type names)`` holds,
    and (unless ``a_transposed``) ``a`` is not transposed; None otherwise
    (the native calls cannot take it as it lies).  ``extra_inputs``: inputs
    after ``a`` and ``b`` (a weight's scales) the caller checks itself."""
    if op.name != "linalg.generic" or len(op.operands) != 3 + extra_inputs or len(op.results) != 0:
        return None
    iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    red = [i for i, s in enumerate(iters) if "reduction" in s]
    if len(red) != 1:
        return None
    k = red[0]
    picked = (0, 1, 2 + extra_inputs)
    all_maps = indexing_maps(op)
    maps = [_dims(all_maps[i]) for i in picked]
    if any(m is None for m in maps):
        return None
    a, b, c = (op.operands[i] for i in picked)
    try:
        types = [ir.MemRefType(v.type) for v in (a, b, c)]
    except (ValueError, TypeError):  # tensors: not bufferized yet
        return None
    names = [str(t.element_type) for t in types]
    if not dtypes_ok(*names):
        return None
    par = [i for i in range(len(iters)) if i != k]
    if maps[2] != par or len(par) < 2:
        return None
    batch, m, n = par[:-2], par[-2], par[-1]
    ma, mb = maps[0], maps[1]
    a_ok = sorted(ma[-2:]) == sorted([m, k]) if a_transposed else ma[-2:] == [m, k]
    if not a_ok or sorted(mb[-2:]) != sorted([k, n]):
        return None
    for mp in (ma, mb):
        bd = mp[:-2]
        if any(d not in batch for d in bd) or bd != sorted(bd) or len(set(mp)) != len(mp):
            return None
    if not all(_inner_stride_one(t, len(mp) - 1) for t, mp in zip(types, maps)):
        return None
    return a, b, c, maps, batch, m, n, k, names


def gemm_of(op) -> _Gemm | None:
    """The f32 product a :data:`GEMM` placeholder (``op``) stands for, or
    None when the library calls cannot take it as it lies."""
    parts = product_parts(op, lambda *names: all(t == "f32" for t in names))
    return None if parts is None else _Gemm(op, *parts[:-1])


def placeholder_entry(op) -> str | None:
    """The library entry a ``linalg.generic`` placeholder names (``library_call``), or None."""
    if op.name != "linalg.generic" or LIBRARY_CALL not in op.attributes:
        return None
    return ir.StringAttr(op.attributes[LIBRARY_CALL]).value


def is_gemm_placeholder(op) -> bool:
    """Whether ``op`` is a ``linalg.generic`` marked as a :data:`GEMM` or a
    :data:`CONV2D` placeholder (a convolution's im2col product: a GEMM whose
    im2col copy the native convolution may take over)."""
    return placeholder_entry(op) in (GEMM, CONV2D)


def unmark(op) -> None:
    """Drop a placeholder's marks: it runs as the generated contraction it is."""
    for attr in (LIBRARY_CALL, CALL_ATTRS, CALL_DTYPES):
        if attr in op.attributes:
            del op.attributes[attr]


# ---------------------------------------------------------------------------
# Rewriting
# ---------------------------------------------------------------------------


def _zero_fill_before(op, c):
    """The op right before ``op`` when it is a generic filling ``c`` with 0.0 (0 for an i32 ``c``), else None."""
    prev = None
    for o in op.block.operations:
        if o.operation == op:
            break
        prev = o.operation
    if prev is None or prev.name != "linalg.generic" or len(prev.operands) != 2:
        return None
    if prev.operands[1] != c or str(prev.operands[0].type) not in ("f32", "i32"):
        return None
    src = prev.operands[0].owner
    if not isinstance(src, (ir.Operation, ir.OpView)) or src.name != "arith.constant":
        return None
    if str(src.attributes["value"]).split(":")[0].strip() not in ("0.000000e+00", "0.0", "0"):
        return None
    body = list(prev.regions[0].blocks[0].operations)
    if len(body) != 1:
        return None
    return prev


_DECL = (f"func.func private @{SGEMM}(i32, i32, i32, i64, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64)\n"
         f"func.func private @{SGEMV}(i32, i32, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64)\n"
         f"func.func private @{SET_THREADS}(i32) -> i32")
_NATIVE_DECL = (f"func.func private @{SMALL_GEMM}(i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32, i64)\n"
                f"func.func private @{SMALL_GEMM_EPI}(i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32, i64, "
                "i64, i32, i64, i64)\n"
                f"func.func private @{SMALL_GEMM_BT}(i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32, i64, "
                "i64, i32, i64, i64)\n"
                f"func.func private @{FREE_PACKED}(i64)\n"
                f"func.func private @{WEIGHT_A_GEMM}(i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i64, "
                "i32, i64)\n"
                f"func.func private @{NATIVE_CONV}({', '.join(['i64'] * 19)}, f32, i32, i64, i32, i64)\n"
                f"func.func private @{NATIVE_CONV_MEAN}({', '.join(['i64'] * 19)}, f32, i32, i64, i32, i64, f32)\n"
                f"func.func private @{NATIVE_CONV_PAIR}({', '.join(['i64'] * 25)}, i32, i64, i64, i32, i64, i32, i64, "
                "i64, f32)\n"
                f"func.func private @{SGEMM_PAR}(i32, i32, i32, i64, i64, i64, f32, i64, i64, i64, i64, f32, i64, i64, "
                "i32)\n"
                f"func.func private @{BLAS_ENTER}(i32) -> i32\n"
                f"func.func private @{BLAS_LEAVE}()\n"
                f"func.func private @{BIAS_ACT}(i64, i64, i64, i64, i64, i32, i64, i64, i32)")


def blas_threads_lines(threads: str, native: bool) -> tuple[str, str]:
    """A helper's first and last lines around its OpenBLAS calls: set the
    thread count to ``threads`` (an i32 value), then put the previous count
    back.  With the native runtime two helpers can run at once (the halves of
    a split launch), and a save-set-restore of OpenBLAS's process-wide count
    from each would leave it at whichever ran last, so they go through
    kiln_blas_enter / kiln_blas_leave; without it, OpenBLAS's setter itself."""
    if native:
        return (f"  %prev = func.call @{BLAS_ENTER}({threads}) : (i32) -> i32",
                f"  func.call @{BLAS_LEAVE}() : () -> ()")
    return (f"  %prev = func.call @{SET_THREADS}({threads}) : (i32) -> i32",
            f"  %back = func.call @{SET_THREADS}(%prev) : (i32) -> i32")


def function_names(module) -> set[str]:
    """The symbol names of the functions of ``module`` (an operation)."""
    return {ir.StringAttr(op.operation.attributes["sym_name"]).value
            for op in module.regions[0].blocks[0].operations if op.operation.name == "func.func"}


def unique_name(base: str, names: set[str]) -> str:
    """``base``, with underscores appended until it is not in ``names``; added to them."""
    name = base
    while name in names:
        name += "_"
    names.add(name)
    return name


def insert_helpers(module, texts: list[str]) -> None:
    """Parse ``texts`` (function definitions and declarations) and put them
    first in ``module`` (an operation), with a declaration of each run-time
    thread-count getter (:data:`POOL_THREADS` ...) they call that ``module``
    does not declare yet (each pass's helpers may call them: declared once)."""
    text = "\n".join(texts)
    # The texts are parsed (and verified) alone, so they declare every getter
    # they call; one ``module`` declares already stays behind.
    used = [g for g in _GETTERS if f"@{g}()" in text]
    have = function_names(module) & set(used)
    helpers = ir.Module.parse("\n".join([*(f"func.func private @{g}() -> i32" for g in used), text]),
                              module.context)
    first = module.regions[0].blocks[0].operations[0]
    for op in list(helpers.body.operations):
        if op.operation.name == "func.func" and ir.StringAttr(op.operation.attributes["sym_name"]).value in have:
            continue
        op.operation.move_before(first)


def weight_test(module):
    """A test of whether a buffer of ``module`` (bufferized) is a weight: the
    same data on every call, which a packing slot may keep packed.  It is
    when it views a constant ``memref.global`` (an inlined constant) or an
    argument its function lists in ``kiln.weights`` (a constant of the
    schedule past kiln-partition's ``inline-limit``: the runtime passes the
    same buffer every call, and a slot checks the pointer anyway)."""
    body = module.regions[0].blocks[0]
    constant_globals = {
        ir.StringAttr(op.operation.attributes["sym_name"]).value
        for op in body.operations
        if op.operation.name == "memref.global" and "constant" in op.operation.attributes
    }

    def is_weight(v) -> bool:
        name = _constant_global(v)
        if name is not None:
            return name in constant_globals
        root = view_root(v)
        if not isinstance(root.owner, ir.Block):  # an op's result
            return False
        root = ir.BlockArgument(root)
        fn = root.owner.owner.operation  # (an OpView's .name is a func's symbol)
        if fn.name != "func.func" or WEIGHTS_ATTR not in fn.attributes:
            return False
        return root.arg_number in list(ir.DenseI64ArrayAttr(fn.attributes[WEIGHTS_ATTR]))

    return is_weight


def _constant_global(v) -> str | None:
    """The global's name when ``v`` is a ``memref.get_global`` result (or a
    reshape of one), else None."""
    # An op or a block (a block argument).  Not ``owner.name``: GetGlobalOp's
    # generated ``name`` accessor is the symbol, not the op name.
    op = getattr(view_root(v).owner, "operation", None)
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
