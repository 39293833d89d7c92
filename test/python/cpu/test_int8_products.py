"""Integer products of 8-bit operands (``kiln.matmul_integer``, ONNX ``MatMulInteger``; issue 38).

The native ``kiln_i8_gemm`` is checked against numpy's exact int64 product
(wrapped to int32) over ragged shapes, every signedness, zero points that are
and are not 0, strides, beta and threads, on each path the CPU has (AMX-INT8,
VNNI, and the generic one forced); then ONNX models through kiln.compile
against ONNX Runtime: a MatMulInteger graph at several batch sizes, and
``quantize_dynamic``'s output of an MLP with the integer kernel present in
the compiled code.
"""

import ctypes

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.backends.cpu import lowp_gemm
from kiln.validate import TOLERANCES

pytestmark = pytest.mark.native


def _i8_gemm():
    from kiln.runtime.blas import native_with_blas

    lib = native_with_blas()
    fn = lib.kiln_i8_gemm
    i64, i32 = ctypes.c_int64, ctypes.c_int32
    fn.argtypes = [i64, i64, i64, i64, i64, i32, i64, i64, i32, i32, i32, i64, i64, i32, i64]
    fn.restype = None
    return lib, fn


def _operand(rng, shape, unsigned):
    lo, hi = (0, 256) if unsigned else (-128, 128)
    return rng.integers(lo, hi, shape).astype(np.uint8 if unsigned else np.int8)


def _paths(lib):
    """(name, force generic) for each path this CPU can take: the vector path (VNNI / AMX, or AVX2 without
    VNNI) where it has one."""
    paths = [("generic", True)]
    if lib.kiln_i8_cpu_has_vnni():
        paths.append(("vnni", False))
    elif lib.kiln_i8_cpu_has_avx2():
        paths.append(("avx2", False))
    return paths


@pytest.mark.parametrize("m", [1, 3, 8, 9, 33, 70])
@pytest.mark.parametrize("k", [1, 6, 64, 130, 768])
@pytest.mark.parametrize("flags", [0, 1, 2, 3])
def test_native_i8_gemm_matches_numpy(m, k, flags):
    """Exact int32 results: K not a multiple of the quad (A's last bytes read without running past the row), N
    past a panel of 32, lda / ldb / ldc wider than the rows, zero points 0 and not, beta 0 (C not read: filled
    with a sentinel) and 1, 1 and 2 threads, every path; AMX-INT8 takes the 32-row blocks when K % 64 == 0."""
    lib, fn = _i8_gemm()
    rng = np.random.default_rng(m * 1000 + k * 10 + flags)
    a_u, b_u = bool(flags & 1), bool(flags & 2)
    n = 70
    a = _operand(rng, (m, k + 3), a_u)
    b = _operand(rng, (k, n + 5), b_u)
    for za, zb in ((0, 0), (int(a[0, 0]), int(b[0, 1]))):
        want = ((a[:, :k].astype(np.int64) - za) @ (b[:, :n].astype(np.int64) - zb)).astype(np.int32)
        for name, generic in _paths(lib):
            lib.kiln_i8_set_generic(ctypes.c_int32(int(generic)))
            try:
                for beta, threads in ((0, 2), (1, 1)):
                    c = np.full((m, n + 2), -7 if beta == 0 else 5, np.int32)
                    fn(m, n, k, a.ctypes.data, k + 3, za, b.ctypes.data, n + 5, zb, flags, beta, c.ctypes.data,
                       n + 2, threads, 0)
                    expect = want + (5 if beta else 0)
                    np.testing.assert_array_equal(c[:, :n], expect, err_msg=f"{name} beta {beta} za {za} zb {zb}")
                    assert np.all(c[:, n:] == (5 if beta else -7)), "wrote past N"
            finally:
                lib.kiln_i8_set_generic(ctypes.c_int32(-1))


def test_native_i8_gemm_wraps_like_int32():
    """Sums past 2**31 wrap as int32 accumulation does (ONNX's int32 output), on every path."""
    lib, fn = _i8_gemm()
    m, k, n = 32, 70000, 32  # 70000 * 255 * 128 > 2**31
    a = np.full((m, k), 255, np.uint8)
    b = np.full((k, n), -128, np.int8)
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    assert np.abs(a.astype(np.int64) @ b.astype(np.int64)).max() > 2 ** 31, "no sum wraps: the test could not fail"
    for name, generic in _paths(lib):
        lib.kiln_i8_set_generic(ctypes.c_int32(int(generic)))
        try:
            c = np.zeros((m, n), np.int32)
            fn(m, n, k, a.ctypes.data, k, 0, b.ctypes.data, n, 0, 1, 0, c.ctypes.data, n, 2, 0)
            np.testing.assert_array_equal(c, want, err_msg=name)
        finally:
            lib.kiln_i8_set_generic(ctypes.c_int32(-1))


def test_uses_vnni_follows_the_switch():
    lib, _ = _i8_gemm()
    lowp_gemm.force_generic(True)
    try:
        assert not lowp_gemm.uses_vnni() and not lowp_gemm.uses_avx2()
    finally:
        lowp_gemm.force_generic(None)
    assert lowp_gemm.uses_vnni() == bool(lib.kiln_i8_cpu_has_vnni())
    # AVX2 is the vector path only where there is no VNNI.
    assert lowp_gemm.uses_avx2() == bool(lib.kiln_i8_cpu_has_avx2() and not lib.kiln_i8_cpu_has_vnni())


class _Encoder(torch.nn.Module):
    """Linears whose K is a multiple of 64 (AMX-INT8's blocks) and not (40), 2-D and 3-D activations."""

    def __init__(self):
        super().__init__()
        self.up, self.down, self.head = torch.nn.Linear(128, 256), torch.nn.Linear(256, 40), torch.nn.Linear(40, 24)

    def forward(self, x):
        return self.head(torch.relu(self.down(torch.nn.functional.gelu(self.up(x)))))


BATCHES = (1, 3, 8)  # min, middle, max of B; 16 rows a batch: 3 and 8 make 32-row (AMX) blocks


@pytest.fixture(scope="module")
def dynamic_model(tmp_path_factory):
    """An encoder MLP exported with a dynamic batch, then ``quantize_dynamic`` (int8 weights, uint8
    activations: DynamicQuantizeLinear + MatMulInteger, ONNX Runtime's default for transformers)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = tmp_path_factory.mktemp("i8")
    torch.manual_seed(0)
    src, out = str(root / "enc.onnx"), str(root / "enc-int8.onnx")
    torch.onnx.export(_Encoder().eval(), (torch.randn(2, 16, 128),), src, dynamo=True, input_names=["x"],
                      dynamic_shapes=({0: torch.export.Dim("B", min=1, max=8)},))
    quantize_dynamic(src, out, weight_type=QuantType.QInt8)
    ops = {n.op_type for n in onnx.load(out).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, sorted(ops)
    return out


def test_dynamic_quantized_model_matches_ort_on_each_path(dynamic_model):
    """kiln against ONNX Runtime on the same int8 file at B = 1, 3, 8, the integer products in kiln_i8_gemm
    (their constant B packed: the native packed bytes grow) and reported as int8; the generic path (forced)
    gives the same bits."""
    from kiln.runtime.native import packed_bytes

    session = onnxruntime.InferenceSession(dynamic_model, providers=["CPUExecutionProvider"])
    compiled = kiln.compile(dynamic_model, symbols={"B": (1, 8)}, fallback=False)
    products = [k for k in compiled.report()["kernels"] if "kiln.matmul_integer" in k["ops"]]
    assert len(products) == 3 and all(k["precision"] == "int8" for k in products)
    assert all("native.matmul_integer" in k["impl"].split("+") for k in products), products
    tol = TOLERANCES["int8"]
    before = packed_bytes()
    for b in BATCHES:
        x = np.random.default_rng(b).standard_normal((b, 16, 128)).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = np.asarray(compiled(x))
        np.testing.assert_allclose(got, want, rtol=tol.rtol, atol=tol.atol, err_msg=f"B={b}")
        lowp_gemm.force_generic(True)
        try:
            np.testing.assert_array_equal(np.asarray(compiled(x)), got, err_msg=f"generic path, B={b}")
        finally:
            lowp_gemm.force_generic(None)
    assert packed_bytes() > before, "no integer product packed its weight: kiln_i8_gemm did not run"


def test_per_column_zero_points_keep_the_exact_path():
    """A MatMulInteger with a zero point per column of B (not kiln.matmul_integer's per-tensor form) still
    compiles, as exact f32 chunks, and matches numpy's integers."""
    k, n = 40, 6
    rng = np.random.default_rng(0)
    w = rng.integers(0, 256, (k, n)).astype(np.uint8)
    zb = rng.integers(0, 256, (n,)).astype(np.uint8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w", "za", "zb"], ["y"], name="per_column")], "mmi",
        [helper.make_tensor_value_info("a", TensorProto.INT8, ["B", k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["B", n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(-3, np.int8), "za"),
         numpy_helper.from_array(zb, "zb")])
    compiled = kiln.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                            symbols={"B": (1, 8)}, fallback=False)
    assert not any("kiln.matmul_integer" in k["ops"] for k in compiled.report()["kernels"])
    for b in BATCHES:
        a = rng.integers(-128, 128, (b, k)).astype(np.int8)
        want = (a.astype(np.int64) + 3) @ (w.astype(np.int64) - zb)
        np.testing.assert_array_equal(np.asarray(compiled(a)), want.astype(np.int32), err_msg=f"B={b}")


def test_without_the_library_integer_products_are_exact_f32_chunks():
    """``cpu_library=False`` (no native kernel to call): kiln.matmul_integer lowers as its exact f32 GEMM chunks
    (K = 600: three chunks) and gives numpy's integers at B = 1, 3, 8."""
    k, n = 600, 40
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    w[:, 0] = -127  # with a row of 255s: |sums| past 2**24 (600 * 246 * 127)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w", "za"], ["y"], name="mmi")], "mmi",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, ["B", k]),
         helper.make_tensor_value_info("za", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["B", n])],
        [numpy_helper.from_array(w, "w")])
    compiled = kiln.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                            symbols={"B": (1, 8)}, fallback=False, cpu_library=False)
    for b in BATCHES:
        a = rng.integers(0, 256, (b, k)).astype(np.uint8)
        a[0] = 255
        want = (a.astype(np.int64) - 9) @ w.astype(np.int64)
        assert np.abs(want).max() > 2 ** 24, "no sum past f32's exact integers: the test could not fail"
        np.testing.assert_array_equal(np.asarray(compiled(a, np.array(9, np.uint8))), want.astype(np.int32))
