"""Graph passes keep numerics: each pass and each named pipeline, run on
small models written the way frontends emit them, computes the same values
(numpy reference interpreter) at several values per symbol.  Also checks the
reference semantics against PyTorch and the Python pipeline API."""

import numpy as np
import pytest
import torch

from kiln._mlir import ir
from kiln.context import make_context
from kiln.errors import PipelineError
from kiln.module import parse_module
from kiln.pipelines import Pipeline
from kiln.transforms._graph import functions
from kiln.transforms.fold_constants import interpret

RNG = np.random.default_rng(0)


def dense(arr) -> str:
    """MLIR text of a dense attribute (the attribute prints itself)."""
    with ir.Context():
        return str(ir.DenseElementsAttr.get(np.ascontiguousarray(arr, dtype=np.float32)))


def tensor(dims) -> str:
    return "!kiln.tensor<[" + ", ".join(f'"{d}"' if isinstance(d, str) else str(d) for d in dims) + "], f32>"


def _mlp_text() -> str:
    """An MLP as a frontend decomposes it: transposed weights, GELU as erf,
    a constant scale computed in the graph, layer norm and softmax as
    primitives, an identity multiply and a dead branch."""
    t = tensor
    w1t, b1 = RNG.standard_normal((32, 16)) * 0.3, RNG.standard_normal(32) * 0.1
    w2, b2 = RNG.standard_normal((32, 8)) * 0.3, RNG.standard_normal(8) * 0.1
    g, bb = RNG.standard_normal(8), RNG.standard_normal(8)
    return f"""
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 64 : i64}} : () -> ()
func.func @main(%x: {t(["B", 16])}) -> {t(["B", 8])} {{
  %w1t = "kiln.constant"() {{value = {dense(w1t)}}} : () -> {t([32, 16])}
  %w1 = "kiln.transpose"(%w1t) {{perm = array<i64: 1, 0>}} : ({t([32, 16])}) -> {t([16, 32])}
  %b1 = "kiln.constant"() {{value = {dense(b1)}}} : () -> {t([32])}
  %w2 = "kiln.constant"() {{value = {dense(w2)}}} : () -> {t([32, 8])}
  %b2 = "kiln.constant"() {{value = {dense(b2)}}} : () -> {t([8])}
  %g = "kiln.constant"() {{value = {dense(g)}}} : () -> {t([8])}
  %bb = "kiln.constant"() {{value = {dense(bb)}}} : () -> {t([8])}
  %half = "kiln.constant"() {{value = dense<0.5> : tensor<f32>}} : () -> {t([])}
  %one = "kiln.constant"() {{value = dense<1.0> : tensor<f32>}} : () -> {t([])}
  %rt = "kiln.constant"() {{value = dense<0.70710678> : tensor<f32>}} : () -> {t([])}
  %two = "kiln.constant"() {{value = dense<2.0> : tensor<f32>}} : () -> {t([])}
  %three = "kiln.constant"() {{value = dense<3.0> : tensor<f32>}} : () -> {t([])}
  %eps = "kiln.constant"() {{value = dense<1.0e-5> : tensor<f32>}} : () -> {t([])}
  %h = "kiln.matmul"(%x, %w1) : ({t(["B", 16])}, {t([16, 32])}) -> {t(["B", 32])}
  %hb = "kiln.add"(%h, %b1) : ({t(["B", 32])}, {t([32])}) -> {t(["B", 32])}
  %s = "kiln.mul"(%hb, %rt) : ({t(["B", 32])}, {t([])}) -> {t(["B", 32])}
  %e = "kiln.erf"(%s) : ({t(["B", 32])}) -> {t(["B", 32])}
  %e1 = "kiln.add"(%e, %one) : ({t(["B", 32])}, {t([])}) -> {t(["B", 32])}
  %gx = "kiln.mul"(%hb, %e1) : ({t(["B", 32])}, {t(["B", 32])}) -> {t(["B", 32])}
  %ge = "kiln.mul"(%gx, %half) : ({t(["B", 32])}, {t([])}) -> {t(["B", 32])}
  %ge1 = "kiln.mul"(%ge, %one) : ({t(["B", 32])}, {t([])}) -> {t(["B", 32])}
  %o = "kiln.matmul"(%ge1, %w2) : ({t(["B", 32])}, {t([32, 8])}) -> {t(["B", 8])}
  %ob = "kiln.add"(%o, %b2) : ({t(["B", 8])}, {t([8])}) -> {t(["B", 8])}
  %six = "kiln.mul"(%two, %three) : ({t([])}, {t([])}) -> {t([])}
  %sc = "kiln.div"(%ob, %six) : ({t(["B", 8])}, {t([])}) -> {t(["B", 8])}
  %mean = "kiln.reduce_mean"(%sc) {{axes = array<i64: -1>, keepdims = true}} : ({t(["B", 8])}) -> {t(["B", 1])}
  %d = "kiln.sub"(%sc, %mean) : ({t(["B", 8])}, {t(["B", 1])}) -> {t(["B", 8])}
  %sq = "kiln.mul"(%d, %d) : ({t(["B", 8])}, {t(["B", 8])}) -> {t(["B", 8])}
  %var = "kiln.reduce_mean"(%sq) {{axes = array<i64: -1>, keepdims = true}} : ({t(["B", 8])}) -> {t(["B", 1])}
  %ve = "kiln.add"(%var, %eps) : ({t(["B", 1])}, {t([])}) -> {t(["B", 1])}
  %rs = "kiln.rsqrt"(%ve) : ({t(["B", 1])}) -> {t(["B", 1])}
  %n = "kiln.mul"(%d, %rs) : ({t(["B", 8])}, {t(["B", 1])}) -> {t(["B", 8])}
  %nw = "kiln.mul"(%n, %g) : ({t(["B", 8])}, {t([8])}) -> {t(["B", 8])}
  %nb = "kiln.add"(%nw, %bb) : ({t(["B", 8])}, {t([8])}) -> {t(["B", 8])}
  %m = "kiln.reduce_max"(%nb) {{axes = array<i64: 1>, keepdims = true}} : ({t(["B", 8])}) -> {t(["B", 1])}
  %z = "kiln.sub"(%nb, %m) : ({t(["B", 8])}, {t(["B", 1])}) -> {t(["B", 8])}
  %ex = "kiln.exp"(%z) : ({t(["B", 8])}) -> {t(["B", 8])}
  %sum = "kiln.reduce_sum"(%ex) {{axes = array<i64: 1>, keepdims = true}} : ({t(["B", 8])}) -> {t(["B", 1])}
  %p = "kiln.div"(%ex, %sum) : ({t(["B", 8])}, {t(["B", 1])}) -> {t(["B", 8])}
  %dead = "kiln.tanh"(%p) : ({t(["B", 8])}) -> {t(["B", 8])}
  return %p : {t(["B", 8])}
}}
"""


def _block_text() -> str:
    """An attention block over ["B", "L", 8]: projections, heads split by
    reshape/transpose, attention (causal with static L is decomposable; with
    dynamic L it is kept), residual, layer_norm and a ReLU MLP."""
    t = tensor
    wq, wk, wv = (RNG.standard_normal((8, 8)) * 0.3 for _ in range(3))
    w1, b1 = RNG.standard_normal((8, 16)) * 0.3, RNG.standard_normal(16) * 0.1
    g = RNG.standard_normal(8)
    return f"""
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 64 : i64}} : () -> ()
"kiln.symbol"() {{sym_name = "L", min = 1 : i64, max = 64 : i64}} : () -> ()
func.func @main(%x: {t(["B", "L", 8])}) -> {t(["B", "L", 16])} {{
  %wq = "kiln.constant"() {{value = {dense(wq)}}} : () -> {t([8, 8])}
  %wk = "kiln.constant"() {{value = {dense(wk)}}} : () -> {t([8, 8])}
  %wv = "kiln.constant"() {{value = {dense(wv)}}} : () -> {t([8, 8])}
  %w1 = "kiln.constant"() {{value = {dense(w1)}}} : () -> {t([8, 16])}
  %b1 = "kiln.constant"() {{value = {dense(b1)}}} : () -> {t([16])}
  %g = "kiln.constant"() {{value = {dense(g)}}} : () -> {t([8])}
  %q = "kiln.matmul"(%x, %wq) : ({t(["B", "L", 8])}, {t([8, 8])}) -> {t(["B", "L", 8])}
  %k = "kiln.matmul"(%x, %wk) : ({t(["B", "L", 8])}, {t([8, 8])}) -> {t(["B", "L", 8])}
  %v = "kiln.matmul"(%x, %wv) : ({t(["B", "L", 8])}, {t([8, 8])}) -> {t(["B", "L", 8])}
  %q4 = "kiln.reshape"(%q) {{shape = ["B", "L", 2, 4]}} : ({t(["B", "L", 8])}) -> {t(["B", "L", 2, 4])}
  %k4 = "kiln.reshape"(%k) {{shape = ["B", "L", 2, 4]}} : ({t(["B", "L", 8])}) -> {t(["B", "L", 2, 4])}
  %v4 = "kiln.reshape"(%v) {{shape = ["B", "L", 2, 4]}} : ({t(["B", "L", 8])}) -> {t(["B", "L", 2, 4])}
  %qh = "kiln.transpose"(%q4) {{perm = array<i64: 0, 2, 1, 3>}} : ({t(["B", "L", 2, 4])}) -> {t(["B", 2, "L", 4])}
  %kh = "kiln.transpose"(%k4) {{perm = array<i64: 0, 2, 1, 3>}} : ({t(["B", "L", 2, 4])}) -> {t(["B", 2, "L", 4])}
  %vh = "kiln.transpose"(%v4) {{perm = array<i64: 0, 2, 1, 3>}} : ({t(["B", "L", 2, 4])}) -> {t(["B", 2, "L", 4])}
  %a = "kiln.attention"(%qh, %kh, %vh) {{causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>}} : ({t(["B", 2, "L", 4])}, {t(["B", 2, "L", 4])}, {t(["B", 2, "L", 4])}) -> {t(["B", 2, "L", 4])}
  %at = "kiln.transpose"(%a) {{perm = array<i64: 0, 2, 1, 3>}} : ({t(["B", 2, "L", 4])}) -> {t(["B", "L", 2, 4])}
  %ar = "kiln.reshape"(%at) {{shape = ["B", "L", 8]}} : ({t(["B", "L", 2, 4])}) -> {t(["B", "L", 8])}
  %r = "kiln.add"(%x, %ar) : ({t(["B", "L", 8])}, {t(["B", "L", 8])}) -> {t(["B", "L", 8])}
  %n = "kiln.layer_norm"(%r, %g) {{operandSegmentSizes = array<i32: 1, 1, 0>}} : ({t(["B", "L", 8])}, {t([8])}) -> {t(["B", "L", 8])}
  %h = "kiln.matmul"(%n, %w1) : ({t(["B", "L", 8])}, {t([8, 16])}) -> {t(["B", "L", 16])}
  %hb = "kiln.add"(%h, %b1) : ({t(["B", "L", 16])}, {t([16])}) -> {t(["B", "L", 16])}
  %y = "kiln.relu"(%hb) : ({t(["B", "L", 16])}) -> {t(["B", "L", 16])}
  return %y : {t(["B", "L", 16])}
}}
"""


MODELS = {
    "mlp": (_mlp_text(), [lambda b, n: (b, 16)]),
    "block": (_block_text(), [lambda b, n: (b, n, 8)]),
    # the same block with a static L: causal attention decomposes
    "block_static": (_block_text().replace('"kiln.symbol"() {sym_name = "L"', '// ').replace('"L"', "5"), [lambda b, n: (b, 5, 8)]),
}

PIPELINES = [
    "builtin.module(kiln-fold-constants)",
    "builtin.module(kiln-simplify)",
    "builtin.module(kiln-fold-constants,kiln-simplify,kiln-dce)",
    "builtin.module(kiln-decompose)",
    "builtin.module(kiln-fuse)",
    "builtin.module(kiln-decompose,kiln-fuse)",
    "builtin.module(kiln-default-cpu)",
    "builtin.module(kiln-default-triton)",
]

# Several values per symbol: the minimum, a middle value, the maximum.
SIZES = [(1, 1), (7, 5), (64, 33)]


def _run(text, inputs):
    module = parse_module(text)  # keep the module alive while its function runs
    return interpret(functions(module.operation)[0], inputs)


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("model", list(MODELS))
def test_pipeline_keeps_numerics(ctx, model, pipeline):
    text, shapes = MODELS[model]
    module = parse_module(text)
    Pipeline.parse(pipeline).run(module)
    after = str(module)
    for b, length in SIZES:
        inputs = [RNG.standard_normal(s(b, length)).astype(np.float32) for s in shapes]
        want = _run(text, inputs)
        got = _run(after, inputs)
        for w, g in zip(want, got):
            assert w.shape == g.shape
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6, err_msg=f"{model} {pipeline} B={b} L={length}")


def test_default_pipeline_shape_of_the_result(ctx):
    """What the default pipeline makes of the decomposed MLP: folded weights,
    recognized layer_norm (with weight and bias) and softmax, no dead code
    (cse already erases the dead tanh), and two matmul_epilogue kernels; the
    layer_norm and the softmax are two reductions, so each stays a kernel."""
    module = parse_module(MODELS["mlp"][0])
    p = Pipeline.named("kiln-default-cpu")
    p.run(module)
    text = str(module)
    assert "kiln.transpose" not in text and "kiln.tanh" not in text
    assert text.count('"kiln.layer_norm"') == 1 and text.count('"kiln.softmax"') == 1
    kinds = [op.opview.attr("kind") for op in functions(module.operation)[0].regions[0].blocks[0].operations if op.name == "kiln.fused"]
    assert kinds == ["matmul_epilogue", "matmul_epilogue"]
    stats = p.statistics()
    assert stats["kiln-fold-constants"]["ops folded"] == 2  # transpose(w1t) and 2*3
    assert stats["kiln-simplify"] == {"mul-one": 1, "layer-norm": 1, "layer-norm-weight": 1, "layer-norm-bias": 1, "softmax": 1,
                                      "gelu": 1}
    assert "kiln-dce" not in stats
    assert stats["kiln-fuse"]["groups fused"] == 2


def test_reference_semantics_match_torch(ctx):
    """The evaluators (numpy reference semantics) agree with PyTorch."""
    t = tensor
    text = f"""
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 64 : i64}} : () -> ()
func.func @main(%x: {t(["B", 2, 6, 4])}, %g: {t([4])}) -> ({t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}) {{
  %a = "kiln.gelu"(%x) : ({t(["B", 2, 6, 4])}) -> {t(["B", 2, 6, 4])}
  %b = "kiln.gelu"(%x) {{approximate = "tanh"}} : ({t(["B", 2, 6, 4])}) -> {t(["B", 2, 6, 4])}
  %c = "kiln.softmax"(%x) {{axis = 2 : i64}} : ({t(["B", 2, 6, 4])}) -> {t(["B", 2, 6, 4])}
  %d = "kiln.layer_norm"(%x, %g) {{operandSegmentSizes = array<i32: 1, 1, 0>}} : ({t(["B", 2, 6, 4])}, {t([4])}) -> {t(["B", 2, 6, 4])}
  %e = "kiln.attention"(%x, %x, %x) {{causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>}} : ({t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}) -> {t(["B", 2, 6, 4])}
  return %a, %b, %c, %d, %e : {t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}, {t(["B", 2, 6, 4])}
}}
"""
    F = torch.nn.functional  # noqa: N806
    for b in (1, 3):
        x = RNG.standard_normal((b, 2, 6, 4)).astype(np.float32)
        g = RNG.standard_normal(4).astype(np.float32)
        got = _run(text, [x, g])
        tx = torch.from_numpy(x)
        want = [
            F.gelu(tx), F.gelu(tx, approximate="tanh"), F.softmax(tx, dim=2),
            F.layer_norm(tx, (4,), weight=torch.from_numpy(g)),
            F.scaled_dot_product_attention(tx, tx, tx, is_causal=True),
        ]
        for w, o in zip(want, got):
            np.testing.assert_allclose(o, w.numpy(), rtol=1e-5, atol=1e-6)


def test_fold_reads_dense_resource_constants(ctx):
    """A dense_resource weight (as importers store large tensors) is read with
    numpy and folded: the transpose of a weight becomes a constant."""
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    module = parse_module(f"""
func.func @main() -> {tensor([4, 3])} {{
  %w = "kiln.constant"() {{value = dense_resource<w0> : tensor<3x4xf32>}} : () -> {tensor([3, 4])}
  %t = "kiln.transpose"(%w) {{perm = array<i64: 1, 0>}} : ({tensor([3, 4])}) -> {tensor([4, 3])}
  return %t : {tensor([4, 3])}
}}
{{-#
  dialect_resources: {{ builtin: {{ w0: "0x04000000{w.tobytes().hex()}" }} }}
#-}}
""")
    p = Pipeline.parse("builtin.module(kiln-fold-constants)")
    p.run(module)
    assert p.statistics() == {"kiln-fold-constants": {"ops folded": 1, "constants erased": 1}}
    (got,) = interpret(functions(module.operation)[0], [])
    np.testing.assert_array_equal(got, w.T)


def test_pipeline_builder_forms_agree(ctx):
    parsed = Pipeline.parse("builtin.module(kiln-fold-constants{max-bytes=64},kiln-fuse)")
    built = Pipeline().add("kiln-fold-constants", max_bytes=64).add("kiln-fuse")
    assert str(parsed) == str(built) == "builtin.module(kiln-fold-constants{max-bytes=64},kiln-fuse)"
    assert str(Pipeline.parse(str(built))) == str(built)
    named = Pipeline.named("kiln-default-triton")
    assert named.names == [
        "kiln-infer-shapes", "kiln-fold-constants", "kiln-simplify", "kiln-decompose", "cse", "kiln-dce", "kiln-fuse",
    ]
    assert str(Pipeline.parse("builtin.module(kiln-default-triton)")) == str(named)
    assert "kiln-fuse" not in Pipeline.named("kiln-default-cpu", without=["kiln-fuse"]).names


def test_stop_after_and_errors(ctx):
    module = parse_module(MODELS["mlp"][0])
    p = Pipeline.named("kiln-default-cpu", stop_after="kiln-dce")
    p.run(module)
    assert "kiln.fused" not in str(module) and "kiln-fuse" not in p.statistics()
    with pytest.raises(PipelineError, match="no named pipeline 'kiln-default-gpu'"):
        Pipeline.named("kiln-default-gpu")
    with pytest.raises(PipelineError, match="has no stage kiln-bogus"):
        Pipeline.named("kiln-default-cpu", without=["kiln-bogus"])
    with pytest.raises(PipelineError, match="unknown pattern"):
        Pipeline.parse("builtin.module(kiln-simplify{disable=bogus})").run(module)
    with pytest.raises(PipelineError, match="expects int"):
        Pipeline.parse("builtin.module(kiln-fold-constants{max-bytes=lots})")


def test_max_bytes_caps_folding():
    with make_context(), ir.Location.unknown():
        text = f"""
func.func @main() -> {tensor([64, 64])} {{
  %a = "kiln.constant"() {{value = dense<2.0> : tensor<f32>}} : () -> {tensor([])}
  %e = "kiln.expand"(%a) {{shape = [64, 64]}} : ({tensor([])}) -> {tensor([64, 64])}
  return %e : {tensor([64, 64])}
}}
"""
        for cap, folded in ((1024, False), (1 << 20, True)):
            module = parse_module(text)
            p = Pipeline().add("kiln-fold-constants", max_bytes=cap)
            p.run(module)
            assert ("kiln.expand" not in str(module)) == folded
            assert p.statistics()["kiln-fold-constants"] == ({"ops folded": 1, "constants erased": 1} if folded else {"ops left (max-bytes)": 1})
