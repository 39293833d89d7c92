"""bf16 / fp16 models, ``kiln.compile(..., precision="bf16")`` and the native 16-bit GEMM (issue 38).

Every comparison is against the same model in fp32 (PyTorch eager), within
:data:`kiln.validate.TOLERANCES`' row for the model's precision, at the
batch symbol's min, a middle value and its max.
"""

import logging

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)

import kiln
from kiln.backends.cpu import lowp_gemm
from kiln.transforms.precision import bf16_bits
from kiln.validate import TOLERANCES

pytestmark = pytest.mark.native

torch.manual_seed(0)
BATCHES = (1, 3, 8)  # min, middle, max of the batch symbol


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(48, 96), torch.nn.Linear(96, 16)

    def forward(self, x):
        return self.b(F.gelu(self.a(x)))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.c1(x)), 2)
        y = F.relu(self.c2(y)).mean(dim=(2, 3))
        return self.fc(y)


class Block(torch.nn.Module):
    """A pre-norm transformer encoder layer: attention (4 heads) and an MLP, residuals."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(a)
        return x + self.down(F.gelu(self.up(self.n2(x))))


def _case(name):
    """(fp32 module, example input, dynamic_shapes) of a test model."""
    if name == "mlp":
        return MLP().eval(), torch.randn(4, 48), {"x": {0: torch.export.Dim("B", min=1, max=8)}}
    if name == "cnn":
        return CNN().eval(), torch.randn(2, 3, 16, 16), {"x": {0: torch.export.Dim("N", min=1, max=8)}}
    return Block().eval(), torch.randn(2, 16, 64), {"x": {0: torch.export.Dim("B", min=1, max=8)}}


def _input(example, batch, dtype=torch.float32):
    return torch.randn((batch,) + tuple(example.shape[1:])).to(dtype)


#: 16-bit values as the native kernels take them (dtype 0 bf16, 1 f16): bits from f32, f32 / f16 from bits.
_NARROW = {0: bf16_bits, 1: lambda a: a.astype(np.float16).view(np.uint16)}
_WIDEN = {0: lambda u: (u.astype(np.uint32) << 16).view(np.float32), 1: lambda u: u.view(np.float16)}


def _close(got, want, precision):
    tol = TOLERANCES[precision]
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64),
                               rtol=tol.rtol, atol=tol.atol)


@pytest.mark.parametrize("name", ["mlp", "cnn", "block"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_models_match_fp32(name, dtype):
    """A model converted with ``.to(bf16)`` / ``.half()`` takes and returns
    its dtype (torch tensors) and matches the fp32 model within its row."""
    ref, example, dyn = _case(name)
    low = _case(name)[0]
    low.load_state_dict(ref.state_dict())
    low = low.to(dtype)
    model = kiln.compile(low, (example.to(dtype),), dynamic_shapes=dyn)
    precision = "bf16" if dtype is torch.bfloat16 else "f16"
    for batch in BATCHES:
        x = _input(example, batch, dtype)
        out = model(x)
        assert isinstance(out, torch.Tensor) and out.dtype == dtype
        with torch.no_grad():
            want = ref(x.float())  # the fp32 model on the same (rounded) input
        _close(out.float(), want, precision)


def test_half_models_take_numpy():
    """numpy in, numpy out: float16 arrays, and ml_dtypes' bfloat16 (numpy has no bf16 of its own)."""
    ref, example, dyn = _case("mlp")
    for dtype, np_dtype, precision in ((torch.float16, np.float16, "f16"),
                                       (torch.bfloat16, ml_dtypes.bfloat16, "bf16")):
        low = MLP().eval()
        low.load_state_dict(ref.state_dict())
        model = kiln.compile(low.to(dtype), (example.to(dtype),), dynamic_shapes=dyn)
        x = _input(example, 5, dtype)
        xn = x.float().numpy().astype(np_dtype)
        out = model(xn)
        assert isinstance(out, np.ndarray) and out.dtype == np.dtype(np_dtype)
        with torch.no_grad():
            want = ref(x.float())
        _close(out.astype(np.float32), want, precision)


@pytest.mark.parametrize("name", ["mlp", "cnn", "block"])
def test_precision_bf16_matches_fp32(name):
    """``precision="bf16"``: f32 in and out, within the bf16 row of eager
    fp32; really computed in bf16 (not equal to kiln's fp32 compile), and
    the report says so for the kernels holding the products."""
    ref, example, dyn = _case(name)
    fp32 = kiln.compile(ref, (example,), dynamic_shapes=dyn)
    bf16 = kiln.compile(ref, (example,), dynamic_shapes=dyn, precision="bf16")
    differs = False
    for batch in BATCHES:
        x = _input(example, batch)
        out = bf16(x)
        assert out.dtype == torch.float32
        with torch.no_grad():
            want = ref(x)
        _close(out, want, "bf16")
        differs |= not torch.equal(out, fp32(x))
    assert differs, "precision='bf16' gave fp32's results bit for bit"
    kernels = bf16.report()["kernels"]
    products = [k for k in kernels if {"kiln.matmul", "kiln.conv2d", "kiln.attention"} & set(k["ops"])]
    assert products and all(k["precision"] == "bf16" for k in products)
    matmuls = [k for k in kernels if "kiln.matmul" in k["ops"]]  # chosen on kiln IR: kiln_lowp_gemm
    assert all("native.matmul_lowp" in (k["impl"] or "").split("+") for k in matmuls), matmuls
    convs = [k for k in kernels if "kiln.conv2d" in k["ops"]]  # one group: the same GEMM on the im2col
    assert all("native.conv2d_lowp" in (k["impl"] or "").split("+") for k in convs), convs
    assert all(k["precision"] in (None, "f32") for k in fp32.report()["kernels"])
    assert "[bf16]" in str(bf16.report())


def test_precision_option_is_checked():
    """An unknown precision names the choices."""
    ref, example, dyn = _case("mlp")
    with pytest.raises(kiln.KilnError, match="precision must be one of 'fp32', 'bf16', 'int8-weights', got 'fp8'"):
        kiln.compile(ref, (example,), dynamic_shapes=dyn, precision="fp8")


def test_generic_path_matches_dp_path(caplog, tmp_path):
    """The feature-less 16-bit GEMM (forced here) gives the default path's
    results (AMX tiles / vdpbf16ps where the CPU has them) within the bf16
    row: a bf16 product is exact in f32 and only the order of the sums
    differs, which can move an activation's bf16 rounding by one step.
    Forcing it logs one warning at compile."""
    ref, example, dyn = _case("block")
    model = kiln.compile(ref, (example,), dynamic_shapes=dyn, precision="bf16")
    xs = [_input(example, b) for b in BATCHES]
    default = [model(x) for x in xs]
    lowp_gemm.force_generic(True)
    try:
        assert not lowp_gemm.uses_dp()
        generic = [model(x) for x in xs]  # the same kernels, the other path at run time
        lowp_gemm._warned = False
        with caplog.at_level(logging.WARNING, logger="kiln.backends.cpu"):
            kiln.compile(MLP().eval(), (torch.randn(2, 48),), precision="bf16", cache_dir=str(tmp_path))
            kiln.compile(CNN().eval(), (torch.randn(2, 3, 16, 16),), precision="bf16", cache_dir=str(tmp_path))
    finally:
        lowp_gemm.force_generic(None)
    for d, g in zip(default, generic):
        _close(g, d, "bf16")
    warnings = [r for r in caplog.records if "generic path" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.parametrize("amx", ["1", "0"])
def test_native_gemm_shapes(amx, monkeypatch):
    """``kiln_lowp_gemm`` against a float64 product of the same bf16 / f16
    values: odd K, partial panels and row tiles, B transposed, beta = 1, on
    the generic and the default path, with AMX (where the CPU has it: whole
    32-row blocks when K is a multiple of 32, the rest on vdpbf16ps) and without."""
    monkeypatch.setenv("KILN_BF16_AMX", amx)  # read at each call
    import ctypes

    from kiln.runtime.blas import native_with_blas

    lib = native_with_blas()
    f = lib.kiln_lowp_gemm
    f.argtypes = [ctypes.c_int64] * 7 + [ctypes.c_int32, ctypes.c_float, ctypes.c_int64, ctypes.c_int64,
                                         ctypes.c_int32, ctypes.c_int32, ctypes.c_int64]
    rng = np.random.default_rng(1)
    try:
        for generic in (False, True):
            lowp_gemm.force_generic(generic)
            for dt in (0, 1):
                for m, n, k, tb, beta in ((1, 1, 1, 0, 0.0), (7, 33, 17, 0, 1.0), (70, 64, 64, 1, 0.0),
                                          (9, 100, 31, 1, 1.0), (96, 64, 96, 0, 1.0),
                                          (5, 300, 301, 0, 1.0)):  # B packed on the pool (a conv's im2col)
                    a = _NARROW[dt](rng.standard_normal((m, k)).astype(np.float32))
                    b = _NARROW[dt](rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32))
                    c0 = rng.standard_normal((m, n)).astype(np.float32)
                    c = c0.copy()
                    f(m, n, k, a.ctypes.data, k, b.ctypes.data, b.shape[1], tb, beta, c.ctypes.data, n, dt, 2, 0)
                    wb = _WIDEN[dt](b).astype(np.float64)
                    want = _WIDEN[dt](a).astype(np.float64) @ (wb.T if tb else wb) + beta * c0
                    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    finally:
        lowp_gemm.force_generic(None)


def test_native_conv_shapes():
    """``kiln_lowp_conv2d`` (the im2col gathered into the GEMM's pair panels,
    the padding read as 0) against a float64 convolution of the same bf16 /
    f16 values: strides, dilations, asymmetric pads, odd C * KH * KW, partial
    panels, a panel's runs across output rows, two images, beta 0 and 1, on
    the generic and the default path (the gather's vector path takes strides
    1 and 2, the scalar one stride 3)."""
    import ctypes

    from kiln.runtime.blas import native_with_blas

    f = native_with_blas().kiln_lowp_conv2d
    f.argtypes = [ctypes.c_int64] * 17 + [ctypes.c_float, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32]
    rng = np.random.default_rng(2)
    try:
        for generic in (False, True):
            lowp_gemm.force_generic(generic)
            for dt in (0, 1):
                # (N, C, H, W, M, KH, KW, stride, dilation, pads (top, left, bottom, right), beta)
                for n, c, h, w, m, kh, kw, st, dil, pads, beta in (
                        (2, 3, 9, 11, 5, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1), 0.0),
                        (1, 4, 12, 10, 9, 3, 2, (2, 1), (1, 2), (1, 0, 2, 1), 1.0),
                        (2, 8, 7, 7, 16, 1, 1, (2, 2), (1, 1), (0, 0, 0, 0), 0.0),
                        (1, 5, 20, 20, 33, 7, 7, (2, 2), (1, 1), (3, 3, 3, 3), 1.0),
                        (1, 3, 11, 40, 4, 3, 3, (1, 2), (2, 1), (1, 2, 0, 1), 0.0),
                        (2, 3, 10, 10, 4, 3, 3, (3, 3), (1, 1), (1, 1, 1, 1), 0.0)):  # stride 3: scalar
                    x = _NARROW[dt](rng.standard_normal((n, c, h, w)).astype(np.float32))
                    wt = _NARROW[dt](rng.standard_normal((m, c, kh, kw)).astype(np.float32))
                    xt = torch.from_numpy(_WIDEN[dt](x).astype(np.float64))
                    xt = F.pad(xt, (pads[1], pads[3], pads[0], pads[2]))
                    want = F.conv2d(xt, torch.from_numpy(_WIDEN[dt](wt).astype(np.float64)), stride=st,
                                    dilation=dil).numpy()
                    oh, ow = want.shape[2:]
                    y0 = rng.standard_normal(want.shape).astype(np.float32)
                    y = y0.copy()
                    f(n, m, c, h, w, kh, kw, oh, ow, st[0], st[1], dil[0], dil[1], pads[0], pads[1], x.ctypes.data,
                      wt.ctypes.data, beta, y.ctypes.data, dt, 2)
                    np.testing.assert_allclose(y, want + beta * y0, rtol=1e-5, atol=1e-5 * np.sqrt(c * kh * kw))
    finally:
        lowp_gemm.force_generic(None)


def test_bf16_constants_in_kiln_ir(tmp_path):
    """bf16 weights written in kiln IR: a ``dense<...>`` one (which the bindings cannot read back:
    copied into the kernel) and a ``dense_resource`` blob (passed to the kernel as a weight) give
    the product of their values."""
    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 16 - 2  # exact in bf16
    bits = _NARROW[0](w)
    dense = "[" + ", ".join("[" + ", ".join(f"{v:.4f}" for v in row) + "]" for row in w) + "]"
    blob = "0x02000000" + bits.astype("<u2").tobytes().hex().upper()
    text = f"""
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 8 : i64}} : () -> ()
func.func @main(%x: !kiln.tensor<["B", 8], bf16>) -> (!kiln.tensor<["B", 8], bf16>, !kiln.tensor<["B", 8], bf16>) {{
  %a = "kiln.constant"() {{value = dense<{dense}> : tensor<8x8xbf16>}} : () -> !kiln.tensor<[8, 8], bf16>
  %b = "kiln.constant"() {{value = dense_resource<w> : tensor<8x8xbf16>}} : () -> !kiln.tensor<[8, 8], bf16>
  %0 = "kiln.matmul"(%x, %a) : (!kiln.tensor<["B", 8], bf16>, !kiln.tensor<[8, 8], bf16>) -> !kiln.tensor<["B", 8], bf16>
  %1 = "kiln.matmul"(%x, %b) : (!kiln.tensor<["B", 8], bf16>, !kiln.tensor<[8, 8], bf16>) -> !kiln.tensor<["B", 8], bf16>
  return %0, %1 : !kiln.tensor<["B", 8], bf16>, !kiln.tensor<["B", 8], bf16>
}}
{{-#
  dialect_resources: {{ builtin: {{ w: "{blob}" }} }}
#-}}
"""
    path = tmp_path / "bf16.mlir"
    path.write_text(text)
    model = kiln.compile(str(path))
    for batch in BATCHES:
        x = torch.randn(batch, 8).to(torch.bfloat16)
        want = (x.float() @ torch.from_numpy(w)).to(torch.bfloat16).float()
        for got in model(x):
            _close(got.float(), want, "bf16")


def test_precision_bf16_saves_and_loads(tmp_path):
    """A saved ``precision="bf16"`` model loads with the same results and its kernels' precision in the report."""
    ref, example, dyn = _case("mlp")
    model = kiln.compile(ref, (example,), dynamic_shapes=dyn, precision="bf16")
    path = tmp_path / "mlp.kiln"
    kiln.save(model, str(path))
    loaded = kiln.load(str(path))
    for batch in BATCHES:
        x = _input(example, batch)
        assert torch.equal(loaded(x), model(x))
    assert [k["precision"] for k in loaded.report()["kernels"]] == [k["precision"] for k in model.report()["kernels"]]
    assert "bf16" in [k["precision"] for k in loaded.report()["kernels"]]
