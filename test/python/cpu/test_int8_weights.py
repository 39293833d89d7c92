"""``kiln.compile(..., precision="int8-weights")``: weight-only int8 products (issue 38).

The exact reference is the same model with each Linear weight replaced by its
int8 rows times their group scales (:func:`kiln.transforms.precision.int8_rows`):
kiln must match it within the f32 row of the tolerance table (only the order
of the sums differs), and the fp32 model within the ``int8-weights`` row, at
the batch symbol's min, a middle value and its max.  The native product
(``kiln_w8_gemm``) is checked directly over ragged shapes, and against the
generated code.
"""

import copy
import ctypes

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)

import kiln
from kiln.transforms.precision import GROUP_SIZE, int8_rows
from kiln.validate import TOLERANCES

pytestmark = pytest.mark.native

BATCHES = (1, 3, 8)  # min, middle, max of the batch symbol


class MLP(torch.nn.Module):
    """K = 200 (b): a group of 128 and a short one; K = 48 (a): one group."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(48, 200), torch.nn.Linear(200, 20)

    def forward(self, x):
        return self.b(F.gelu(self.a(x)))


class Block(torch.nn.Module):
    """A pre-norm transformer layer (4 heads): every product but attention's has a weight."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d, bias=False)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(a)
        return x + self.down(F.gelu(self.up(self.n2(x))))


def _case(name):
    torch.manual_seed(0)
    if name == "mlp":
        return MLP().eval(), torch.randn(3, 48), {"x": {0: torch.export.Dim("B", min=1, max=8)}}
    return Block().eval(), torch.randn(3, 5, 64), {"x": {0: torch.export.Dim("B", min=1, max=8)}}


def _dequantized(model):
    """``model`` with each Linear weight as int8 rows times their group scales (what kiln computes with)."""
    ref = copy.deepcopy(model)
    for m in ref.modules():
        if isinstance(m, torch.nn.Linear):
            k = m.weight.shape[1]
            w, scale = int8_rows(m.weight.detach().numpy().T, min(GROUP_SIZE, k))
            per_k = np.repeat(scale, min(GROUP_SIZE, k), axis=1)[:, :k]
            m.weight.data = torch.from_numpy(w.astype(np.float32) * per_k)
    return ref


@pytest.fixture(scope="module", params=["mlp", "block"])
def compiled(request):
    model, example, dyn = _case(request.param)
    return request.param, model, example, kiln.compile(model, (example,), dynamic_shapes=dyn,
                                                       precision="int8-weights")


def test_matches_the_dequantized_model_and_fp32(compiled):
    name, model, example, c8 = compiled
    exact, f32, i8 = _dequantized(model), TOLERANCES["f32"], TOLERANCES["int8-weights"]
    for b in BATCHES:
        x = torch.randn(b, *example.shape[1:])
        got = np.asarray(c8(x.numpy()))
        with torch.no_grad():
            want, fp32 = exact(x).numpy(), model(x).numpy()
        np.testing.assert_allclose(got, want, rtol=f32.rtol, atol=f32.atol, err_msg=f"{name} B={b}")
        np.testing.assert_allclose(got, fp32, rtol=i8.rtol, atol=i8.atol, err_msg=f"{name} B={b} vs fp32")
        assert np.abs(got - fp32).max() > 1e-6, "no product ran with int8 weights: the test could not fail"


def test_report_names_the_precision(compiled):
    name, _, _, c8 = compiled
    kernels = c8.report()["kernels"]
    products = [k for k in kernels if "kiln.matmul_w8" in k["ops"]]
    assert products and all(k["precision"] == "int8-weights" for k in products)
    assert all("native.matmul_w8" in k["impl"].split("+") for k in products), products
    linears = 2 if name == "mlp" else 4
    assert sum(k["ops"].count("kiln.matmul_w8") for k in kernels) == linears
    assert "[int8-weights]" in str(c8.report())


def test_generated_code_matches_the_native_product(compiled):
    """``cpu_library=False``: the contraction runs as generated code instead of ``kiln_w8_gemm``."""
    name, model, example, c8 = compiled
    _, _, dyn = _case(name)
    gen = kiln.compile(model, (example,), dynamic_shapes=dyn, precision="int8-weights", cpu_library=False)
    tol = TOLERANCES["f32"]
    for b in BATCHES:
        x = np.random.default_rng(b).standard_normal((b, *example.shape[1:])).astype(np.float32)
        np.testing.assert_allclose(np.asarray(c8(x)), np.asarray(gen(x)), rtol=tol.rtol, atol=tol.atol)


def test_saves_and_loads(compiled, tmp_path):
    """A saved int8-weights model (int8 constants, kiln_w8_gemm calls) loads with the same results and its
    kernels' precision in the report."""
    name, _, example, c8 = compiled
    path = tmp_path / f"{name}.kiln"
    kiln.save(c8, str(path))
    loaded = kiln.load(str(path))
    for b in BATCHES:
        x = np.random.default_rng(b).standard_normal((b, *example.shape[1:])).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(c8(x)))
    assert [k["precision"] for k in loaded.report()["kernels"]] == [k["precision"] for k in c8.report()["kernels"]]


def test_unfolded_linear_weight(monkeypatch):
    """A weight too large to fold stays ``transpose(W)`` (nn.Linear's [N, K]): its rows are quantized as they are."""
    from kiln.transforms import fold_constants

    monkeypatch.setattr(fold_constants, "_MAX_OPERAND_BYTES", 1024)
    model, example, dyn = _case("mlp")
    c8 = kiln.compile(model, (example,), dynamic_shapes=dyn, precision="int8-weights")
    assert sum(k["ops"].count("kiln.matmul_w8") for k in c8.report()["kernels"]) == 2
    x = torch.randn(5, 48)
    tol = TOLERANCES["f32"]
    with torch.no_grad():
        want = _dequantized(model)(x).numpy()
    np.testing.assert_allclose(np.asarray(c8(x.numpy())), want, rtol=tol.rtol, atol=tol.atol)


def test_int8_rows():
    """Symmetric per output channel and group: |w| <= 127, a group's peak maps to 127, a zero group has scale 1,
    every weight within half a step of its group's scale."""
    weight = np.array([[1.0, -2.0, 0.0], [0.5, 4.0, 0.0], [-0.25, 1.0, 0.0]], np.float32)
    w, scale = int8_rows(weight, 3)
    assert w.dtype == np.int8 and w.shape == (3, 3) and scale.shape == (3, 1)
    np.testing.assert_array_equal(w, [[127, 64, -32], [-64, 127, 32], [0, 0, 0]])
    np.testing.assert_allclose(scale[:, 0], [1 / 127, 4 / 127, 1.0], rtol=1e-7)
    big = np.random.default_rng(0).standard_normal((300, 7)).astype(np.float32)
    w, scale = int8_rows(big, 128)
    assert scale.shape == (7, 3)
    per_k = np.repeat(scale, 128, axis=1)[:, :300]
    assert np.all(np.abs(w.astype(np.float32) * per_k - big.T) <= per_k / 2 + 1e-7)
    assert np.abs(w).max() == 127


def _w8_gemm():
    from kiln.runtime.blas import native_with_blas

    fn = native_with_blas().kiln_w8_gemm
    fn.argtypes = [ctypes.c_int64] * 10 + [ctypes.c_float, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32]
    fn.restype = None
    return fn


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 17])
@pytest.mark.parametrize("k", [0, 1, 15, 16, 33, 768])
@pytest.mark.parametrize("group", [16, 24, 0])
def test_native_w8_gemm_shapes(m, k, group):
    """``kiln_w8_gemm`` against numpy: the GEMV (m <= 8, 4 rows a pass) and widened-panel paths, K not a
    multiple of the vector, groups of a vector, not of one, and one group (0), N past a panel, leading dims
    wider than the rows, beta 0 (C not read) and 1, 1 and 2 threads."""
    fn = _w8_gemm()
    rng = np.random.default_rng(m * 1000 + k)
    n, g = 300, group or max(k, 1)
    groups = max(-(-k // g), 1)
    a = rng.standard_normal((m, k + 3)).astype(np.float32)  # lda = k + 3
    w = rng.integers(-127, 128, (n, k + 5)).astype(np.int8)  # ldw = k + 5
    s = rng.uniform(0.01, 0.1, (n, groups + 1)).astype(np.float32)  # lds = groups + 1
    d = w[:, :k].astype(np.float32) * np.repeat(s[:, :groups], g, axis=1)[:, :k]
    want = a[:, :k] @ d.T
    for beta, threads in ((0.0, 2), (1.0, 1)):
        c = np.full((m, n + 2), np.nan if beta == 0 else 0.5, np.float32)  # ldc = n + 2; NaN: C must not be read
        fn(m, n, k, a.ctypes.data, k + 3, w.ctypes.data, k + 5, s.ctypes.data, groups + 1, group, beta,
           c.ctypes.data, n + 2, threads)
        expect = want + (0.5 if beta else 0.0)
        np.testing.assert_allclose(c[:, :n], expect, rtol=1e-5, atol=1e-5 * max(1.0, np.sqrt(k)))
        assert np.all(c[:, n:] == 0.5) if beta else np.isnan(c[:, n:]).all(), "wrote past N"


def test_compile_lm_int8_weights_matches_dequantized_transformers():
    """A LLaMA-style model's greedy tokens with int8 weights: those of transformers running the same model with
    each Linear weight dequantized (the projections and the LM head are quantized; the embedding is not)."""
    import transformers as t

    t.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = t.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                           intermediate_size=128, vocab_size=128, max_position_embeddings=128, initializer_range=0.2)
    model = t.LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    lm = kiln.compile_lm(model, max_batch=2, max_len=48, precision="int8-weights")
    assert lm.report()["fallback_ops"] == 0
    ids = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = _dequantized(model).generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=0)
    got = lm.generate(ids, max_new_tokens=24)
    assert len(set(want[0, 6:].tolist())) > 2, "the reference repeats a token: the test could not fail"
    assert got.tolist() == want.tolist()
