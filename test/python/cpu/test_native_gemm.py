"""kiln's native runtime: the small-M GEMM (packed constant weights, strided
activations) and its thread pool, through kiln.compile."""

import gc

import numpy as np
import pytest
import torch

import kiln
from kiln.backends.cpu import library
from kiln.runtime import native

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)


def weight_text(k: int, n: int, seed: int = 0, max_b: int = 64) -> tuple[str, np.ndarray]:
    """``x @ W`` with ``W`` a constant [k, n] (a weight), x: [B, k], B in 1..max_b."""
    w = np.random.default_rng(seed).standard_normal((k, n), dtype=np.float32)
    hexdata = "0x" + w.tobytes().hex().upper()
    t_in, t_out = f'!kiln.tensor<["B", {k}], f32>', f'!kiln.tensor<["B", {n}], f32>'
    text = (
        f'"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = {max_b} : i64}} : () -> ()\n'
        f"func.func @main(%x: {t_in}) -> {t_out} {{\n"
        f'  %w = "kiln.constant"() {{value = dense<"{hexdata}"> : tensor<{k}x{n}xf32>}} '
        f": () -> !kiln.tensor<[{k}, {n}], f32>\n"
        f'  %y = "kiln.matmul"(%x, %w) : ({t_in}, !kiln.tensor<[{k}, {n}], f32>) -> {t_out}\n'
        f"  return %y : {t_out}\n}}\n"
    )
    return text, w


def test_small_m_follows_the_vector_width_and_the_override(monkeypatch):
    """The native GEMM's row limit is the measured one for this build's
    vectors (AVX-512 and AVX2 differ), and KILN_SMALL_M replaces it; the
    generated code carries the limit in force at compile time."""
    monkeypatch.delenv("KILN_SMALL_M", raising=False)
    wide = native.load().kiln_vector_width() == 16
    assert library.small_m() == (library.SMALL_M_AVX512 if wide else library.SMALL_M_AVX2)
    monkeypatch.setenv("KILN_SMALL_M", "40")
    assert library.small_m() == 40
    text, _ = weight_text(16, 16)
    assert "llvm.mlir.constant(40 : i64)" in kiln.compile(text, keep_ir=True).ir["llvm"]


@pytest.mark.parametrize("k, n", [(64, 100), (33, 32), (7, 5)])  # partial panels; N below one panel
def test_constant_weight_is_packed_and_matches_numpy(k, n):
    text, w = weight_text(k, n, max_b=library.small_m() + 8)
    model = kiln.compile(text, keep_ir=True)
    llvm = model.ir["llvm"]
    assert library.SMALL_GEMM in llvm and library.RELEASE in llvm
    before = native.packed_bytes()
    rng = np.random.default_rng(1)
    # Both sides of SMALL_M: the native kernel at and below it, OpenBLAS above.
    for b in (1, 3, 4, 5, 8, 9, library.small_m(), library.small_m() + 1, library.small_m() + 8):
        x = rng.standard_normal((b, k), dtype=np.float32)
        np.testing.assert_allclose(model(x), x @ w, rtol=1e-4, atol=1e-4)
    assert native.packed_bytes() > before  # the weight was packed on the first small call
    assert model.report()["native"] == {"library": native.library(), "error": None,
                                        "packed_bytes": native.packed_bytes()}
    del model
    gc.collect()
    assert native.packed_bytes() == before  # ... and freed with the model


def test_activation_products_stay_with_openblas():
    t = lambda a, b: f'!kiln.tensor<["{a}", "{b}"], f32>'  # noqa: E731
    text = (
        '"kiln.symbol"() {sym_name = "M", min = 1 : i64, max = 64 : i64} : () -> ()\n'
        '"kiln.symbol"() {sym_name = "K", min = 1 : i64, max = 64 : i64} : () -> ()\n'
        '"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 128 : i64} : () -> ()\n'
        f"func.func @main(%a: {t('M', 'K')}, %b: {t('K', 'N')}) -> {t('M', 'N')} {{\n"
        f'  %c = "kiln.matmul"(%a, %b) : ({t("M", "K")}, {t("K", "N")}) -> {t("M", "N")}\n'
        f"  return %c : {t('M', 'N')}\n}}\n"
    )
    model = kiln.compile(text, keep_ir=True)
    assert f"llvm.call @{library.SMALL_GEMM}" not in model.ir["llvm"]
    a = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(model(a, a.T.copy()), a @ a.T, rtol=1e-5)


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (2, 64, 33), (16, 9, 128), (5, 200, 31), (40, 7, 65), (7, 33, 70),
                                     (14, 20, 40), (23, 64, 97), (12, 5, 9), (3, 8, 40),  # every remainder mod 6 and 8
                                     (20, 1000, 900),  # over PACK_A_FMAS: A packed first
                                     (300, 1024, 70), (1000, 300, 40),  # blocks of rows, A packed and in place
                                     (70, 1024, 80),  # A over a block but not over B: no row blocks
                                     (1, 300, 261),  # one row: groups of whole panels, then single and partial ones
                                     (5, 0, 40)])  # an empty reduction: C = 0 (beta 0) or C unchanged
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "strided"])
def test_kernel_directly(m, k, n, packed):
    """The C entry point on both paths (the strided one serves a slot whose
    packing failed), partial panels and row blocks included, with beta 0 and 1;
    A is read through a leading dim wider than its rows (it is packed when
    it has several row blocks)."""
    import ctypes

    f = native.load().kiln_sgemm_small
    f.argtypes = [ctypes.c_int64] * 7 + [ctypes.c_float, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
                                         ctypes.c_int64]
    rng = np.random.default_rng(m * 100 + n)
    wide = rng.standard_normal((m, k + 3), dtype=np.float32)
    a = wide[:, :k]
    b = rng.standard_normal((k, n), dtype=np.float32)
    c0 = rng.standard_normal((m, n), dtype=np.float32)
    slot = (ctypes.c_int64 * 1)(0)
    for beta in (0.0, 1.0):
        c = c0.copy()
        f(m, n, k, wide.ctypes.data, k + 3, b.ctypes.data, n, beta, c.ctypes.data, n, 2,
          ctypes.addressof(slot) if packed else 0)
        np.testing.assert_allclose(c, a @ b + beta * c0, rtol=1e-4, atol=1e-4)
    assert (slot[0] != 0) == (packed and k > 0)  # an empty reduction packs nothing
    native.load().kiln_free_packed(ctypes.c_int64(slot[0]))


@pytest.mark.parametrize("m, k, n", [(1, 768, 700), (3, 64, 130), (4, 100, 33), (5, 64, 130), (40, 96, 50),
                                     (96, 33, 17), (5, 0, 40)])
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "no-slot"])
def test_transposed_weight_directly(m, k, n, packed):
    """kiln_sgemm_small_bt: B given as B^T [N, K] (rows wider than K); up to
    4 rows the GEMV reads it as it is and nothing is packed, more rows pack
    it into the slot (a slot of 0: OpenBLAS with transB), with beta 0 and 1
    and a bias + ReLU + residual epilogue."""
    import ctypes

    assert library.native_enabled()  # registers the BLAS sgemm the no-slot path calls
    f = native.load().kiln_sgemm_small_bt
    i64 = ctypes.c_int64
    f.argtypes = [i64] * 7 + [ctypes.c_float, i64, i64, ctypes.c_int32, i64, i64, ctypes.c_int32, i64, i64]
    rng = np.random.default_rng(m * 100 + n + k)
    a = rng.standard_normal((m, k), dtype=np.float32)
    bt_wide = rng.standard_normal((n, k + 5), dtype=np.float32)
    bt = bt_wide[:, :k]
    bias = rng.standard_normal(n, dtype=np.float32)
    res = rng.standard_normal((m, n), dtype=np.float32)
    c0 = rng.standard_normal((m, n), dtype=np.float32)
    slot = (i64 * 1)(0)
    for beta in (0.0, 1.0):
        for epi in (False, True):
            c = c0.copy() if beta else np.full_like(c0, np.nan)
            f(m, n, k, a.ctypes.data, k, bt_wide.ctypes.data, k + 5, beta, c.ctypes.data, n, 2,
              ctypes.addressof(slot) if packed else 0, bias.ctypes.data if epi else 0, 1 if epi else 0,
              res.ctypes.data if epi else 0, n if epi else 0)
            want = a @ bt.T + beta * c0
            if epi:
                want = np.maximum(want + bias, 0) + res
            np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    assert (slot[0] != 0) == (packed and m > 4 and k > 0)  # GEMV rows and empty reductions pack nothing
    native.load().kiln_free_packed(ctypes.c_int64(slot[0]))


def test_native_off_keeps_to_openblas(monkeypatch):
    monkeypatch.setenv("KILN_NATIVE", "0")
    text, w = weight_text(16, 8)
    model = kiln.compile(text, keep_ir=True)
    assert library.SMALL_GEMM not in model.ir["llvm"]
    x = np.ones((2, 16), np.float32)
    np.testing.assert_allclose(model(x), x @ w, rtol=1e-4, atol=1e-4)


def test_threads_share_the_pool():
    import threading

    text, w = weight_text(256, 512)
    model = kiln.compile(text)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(30):
            x = torch.from_numpy(rng.standard_normal((1 + seed % 8, 256), dtype=np.float32))
            if not np.allclose(model(x).numpy(), x.numpy() @ w, rtol=1e-4, atol=1e-3):
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("m, n, k", [(300, 200, 40), (500, 20, 33), (7, 9, 5), (64, 1000, 3),
                                     (1, 2050, 768), (4, 130, 40), (2, 64, 15), (3, 63, 100), (1, 1, 16)])
@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_sgemm_par_splits_sgemm_over_the_pool(m, n, k, ta, tb):
    """kiln_sgemm_par: column slabs (wide C) or row slabs (narrow C), every
    transpose, beta 0 and 1, on 1 and 2 parts, against numpy; up to 4 rows
    its GEMV (weights [N, K] or [K, N]; ragged column and K tails; K below
    a vector and N below a column block go to OpenBLAS).  With beta 0, C
    starts as NaN: it must not be read."""
    import ctypes

    assert library.native_enabled()  # registers the BLAS sgemm with the native library
    f = native.load().kiln_sgemm_par
    i32, i64 = ctypes.c_int32, ctypes.c_int64
    f.argtypes = [i32, i32, i32, i64, i64, i64, ctypes.c_float, i64, i64, i64, i64, ctypes.c_float, i64, i64, i32]
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
    c0 = rng.standard_normal((m, n), dtype=np.float32)
    want = (a.T if ta else a) @ (b.T if tb else b)
    for beta in (0.0, 1.0):
        for parts in (1, 2):
            c = c0.copy() if beta else np.full_like(c0, np.nan)
            f(101, 112 if ta else 111, 112 if tb else 111, m, n, k, 1.0, a.ctypes.data, a.shape[1], b.ctypes.data,
              b.shape[1], beta, c.ctypes.data, n, parts)
            np.testing.assert_allclose(c, want + beta * c0, rtol=1e-4, atol=1e-4)


def _blas_count():
    """numpy's OpenBLAS: (get, set) of its process-wide thread count."""
    import ctypes

    blas = ctypes.CDLL(library.blas_library())
    return blas.scipy_openblas_get_num_threads64_, blas.scipy_openblas_set_num_threads64_


def test_blas_enter_leave_put_back_the_count_from_before_the_first():
    """kiln_blas_enter / kiln_blas_leave interleaved as two helpers of a split
    launch run them: the count from before the first enter comes back after
    the last leave (a save-set-restore in each left 1); a leave too many is ignored."""
    assert library.native_enabled()  # registers OpenBLAS's setter with the native library
    get, set_count = _blas_count()
    lib = native.load()
    before = get()
    try:
        set_count(2)
        assert lib.kiln_blas_enter(1) == 2  # one half
        assert lib.kiln_blas_enter(1) == 1  # the other, before the first is done
        lib.kiln_blas_leave()
        assert get() == 1  # the other half is still inside
        lib.kiln_blas_leave()
        assert get() == 2
        lib.kiln_blas_leave()
        assert get() == 2
    finally:
        set_count(before)


def test_split_launches_leave_numpys_blas_thread_count_alone():
    """A batched product of activations runs as OpenBLAS calls in the two
    halves of a split launch at once; before kiln_blas_enter each half saved,
    set and restored OpenBLAS's process-wide count, and numpy was left on one
    thread (its 1024^3 products at half speed)."""
    t = lambda *d: "!kiln.tensor<[" + ", ".join(f'"{x}"' if isinstance(x, str) else str(x) for x in d) + "], f32>"  # noqa: E731
    text = (
        '"kiln.symbol"() {sym_name = "S", min = 1 : i64, max = 64 : i64} : () -> ()\n'
        f"func.func @main(%a: {t('S', 128, 64)}, %b: {t('S', 64, 128)}) -> {t('S', 128, 128)} {{\n"
        f'  %c = "kiln.matmul"(%a, %b) : ({t("S", 128, 64)}, {t("S", 64, 128)}) -> {t("S", 128, 128)}\n'
        f"  return %c : {t('S', 128, 128)}\n}}\n")
    model = kiln.compile(text)
    get, set_count = _blas_count()
    before = get()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 128, 64), dtype=np.float32)
    b = rng.standard_normal((16, 64, 128), dtype=np.float32)
    try:
        set_count(2)
        for _ in range(50):
            c = model(a, b)
        assert get() == 2
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    finally:
        set_count(before)


def test_weights_past_the_fold_limit_are_read_transposed(monkeypatch):
    """nn.Linear's ``W^T`` for a weight kiln-fold-constants does not read (past
    its size limit, lowered here to 1 KiB so a small model takes the path):
    no transpose kernel and no transposed copy; the product calls
    kiln_sgemm_small_bt on ``W`` itself, with and without a fused bias + ReLU,
    matching eager at B from 1 (GEMV rows) to 16 (packed)."""
    from kiln.transforms import fold_constants

    monkeypatch.setattr(fold_constants, "_MAX_OPERAND_BYTES", 1 << 10)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 200, bias=False)).eval()
    batch = torch.export.Dim("B", min=1, max=16)
    compiled = kiln.compile(model, (torch.randn(2, 64),), dynamic_shapes=({0: batch},), keep_ir=True,
                            fallback=False)
    assert 'kiln.ops = ["kiln.transpose"]' not in compiled.ir["partitioned"]
    assert compiled.ir["llvm"].count("llvm.call @kiln_sgemm_small_bt(") == 2
    for b in (1, 4, 5, 16):
        x = torch.randn(b, 64)
        np.testing.assert_allclose(compiled(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_weights_past_the_inline_limit_stay_one_buffer_read_where_they_are():
    """``nn.Linear`` weights past ``inline_limit`` are neither folded
    into a transposed copy nor compiled into the object code: the runtime
    holds each once, in its own [N, K] layout, passes it to the product's
    kernel (``kiln.weights``), which reads it through the transposed map with
    a packing slot (packed once, for more than 4 rows).  Under a larger
    limit the same model inlines them; both match eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1536), torch.nn.GELU(), torch.nn.Linear(1536, 256)).eval()
    batch = torch.export.Dim("B", min=1, max=64)
    example, dynamic = (torch.randn(2, 256),), ({0: batch},)
    gc.collect()
    compiled = kiln.compile(model, example, dynamic_shapes=dynamic, keep_ir=True, fallback=False)
    held = compiled.report()["weights"]
    # Each W itself (no W^T beside it) and the two biases.
    assert held == {"runtime_count": 4, "runtime_bytes": (2 * 256 * 1536 + 1536 + 256) * 4}
    # W and the bias, in both kernels (and their C interfaces).
    assert compiled.ir["llvm"].count("kiln.weights = array<i64: 1, 2>") == 4
    assert compiled.ir["llvm"].count("llvm.call @kiln_sgemm_small_bt(") == 2
    before = native.packed_bytes()
    for b in (1, 5, 33, 64):
        x = torch.randn(b, 256)
        np.testing.assert_allclose(compiled(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)
    packed = native.packed_bytes()
    assert packed - before >= 2 * 256 * 1536 * 4  # both weights packed (5 rows and more) ...
    compiled(torch.randn(9, 256).numpy())
    assert native.packed_bytes() == packed  # ... once
    inlined = kiln.compile(model, example, dynamic_shapes=dynamic, fallback=False, inline_limit=16 << 20)
    assert inlined.report()["weights"]["runtime_count"] == 0
    x = torch.randn(7, 256)
    np.testing.assert_allclose(inlined(x.numpy()), compiled(x.numpy()), rtol=1e-5, atol=1e-5)


def test_identical_layers_share_one_kernel_and_pack_each_weight():
    """Layers that differ only in their weights (arguments past
    ``inline_limit``) compile to one kernel each kind, called with each
    layer's weights; the kernel's packing slot keeps a packed copy per
    weight, and every layer's output matches eager."""
    torch.manual_seed(0)
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(256, 1536), torch.nn.ReLU(), torch.nn.Linear(1536, 256), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).eval()
    batch = torch.export.Dim("B", min=1, max=64)
    compiled = kiln.compile(model, (torch.randn(2, 256),), dynamic_shapes=({0: batch},), keep_ir=True,
                            fallback=False)
    steps = [k["name"] for k in compiled.report()["kernels"]]
    assert len(steps) == 6
    assert compiled.ir["llvm"].count("llvm.func @_mlir_ciface_") == 2  # one per kind of layer
    before = native.packed_bytes()
    for b in (1, 9, 64):
        x = torch.randn(b, 256)
        np.testing.assert_allclose(compiled(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)
    if library.small_m() >= 9:  # 9 rows take the packed path: each of the six weights packed once
        assert native.packed_bytes() - before >= 6 * 256 * 1536 * 4
