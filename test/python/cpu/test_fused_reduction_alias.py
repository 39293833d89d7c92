"""Two same-shape reductions / contractions fused into one CPU kernel each
return their own value (issue 36, found by h5).

CSE merges the identical inits (the zero / -inf fills, a bias broadcast) of
two results; eliminate-empty-tensors then computed one result in the other's
output buffer and the copy-out overwrote it: both came back equal.  Every
pair below is one kernel, compared with numpy at several values of ``N``.
"""

import numpy as np
import pytest

import kiln

HEAD = '''"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 64 : i64} : () -> ()
'''
X = '!kiln.tensor<["N", 6], f32>'
COL = '!kiln.tensor<["N", 1], f32>'
P = '!kiln.tensor<["N", 4], f32>'
W = "!kiln.tensor<[6, 4], f32>"
B = "!kiln.tensor<[4], f32>"


def _fused(body: str, rt: str) -> str:
    """``main`` running ``body`` (reading %x, %y, %w, %b; defining %0, %1 of
    type ``rt``) as ONE ``kiln.fused`` op: one kernel, as ``kiln-fuse`` never
    groups two anchors itself."""
    seg = ", ".join(["1"] * 4 + ["0"] * 12)
    return HEAD + f'''func.func @main(%fx: {X}, %fy: {X}, %fw: {W}, %fb: {B}) -> ({rt}, {rt}) {{
  %r:2 = "kiln.fused"(%fx, %fy, %fw, %fb) ({{
  ^bb0(%x: {X}, %y: {X}, %w: {W}, %b: {B}):
  %xy = "kiln.add"(%x, %y) : ({X}, {X}) -> {X}
{body}
    "kiln.yield"(%0, %1) {{operandSegmentSizes = array<i32: 1, 1, 0, 0>}} : ({rt}, {rt}) -> ()
  }}) {{kind = "reduction", operandSegmentSizes = array<i32: {seg}>, resultSegmentSizes = array<i32: 1, 1, 0, 0>}}
      : ({X}, {X}, {W}, {B}) -> ({rt}, {rt})
  return %r#0, %r#1 : {rt}, {rt}
}}'''


def _reduce(op: str) -> str:
    """``op`` over the last axis of ``x`` and of ``x + y``, in one kernel."""
    return _fused(f'''  %0 = "kiln.{op}"(%x) {{axes = array<i64: 1>, keepdims = true}} : ({X}) -> {COL}
  %1 = "kiln.{op}"(%xy) {{axes = array<i64: 1>, keepdims = true}} : ({X}) -> {COL}''', COL)


def _unary_pair(body0: str, body1: str, rt: str) -> str:
    return _fused(body0 + "\n" + body1, rt)


def _np_ln(v):
    m = v.mean(-1, keepdims=True)
    return (v - m) / np.sqrt(((v - m) ** 2).mean(-1, keepdims=True) + 1e-5)


def _np_softmax(v):
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


CASES = {
    "sum": (_reduce("reduce_sum"), lambda x, y, w, b: [x.sum(1, keepdims=True), y.sum(1, keepdims=True)]),
    "max": (_reduce("reduce_max"), lambda x, y, w, b: [x.max(1, keepdims=True), y.max(1, keepdims=True)]),
    "min": (_reduce("reduce_min"), lambda x, y, w, b: [x.min(1, keepdims=True), y.min(1, keepdims=True)]),
    "mean": (_reduce("reduce_mean"), lambda x, y, w, b: [x.mean(1, keepdims=True), y.mean(1, keepdims=True)]),
    "prod": (_reduce("reduce_prod"), lambda x, y, w, b: [x.prod(1, keepdims=True), y.prod(1, keepdims=True)]),
    "matmul": (_unary_pair(f'  %0 = "kiln.matmul"(%x, %w) : ({X}, !kiln.tensor<[6, 4], f32>) -> {P}',
                           f'  %1 = "kiln.matmul"(%xy, %w) : ({X}, !kiln.tensor<[6, 4], f32>) -> {P}', P),
               lambda x, y, w, b: [x @ w, y @ w]),
    "matmul_bias": (_unary_pair(
        f'  %m0 = "kiln.matmul"(%x, %w) : ({X}, !kiln.tensor<[6, 4], f32>) -> {P}\n'
        f'  %0 = "kiln.add"(%m0, %b) : ({P}, !kiln.tensor<[4], f32>) -> {P}',
        f'  %m1 = "kiln.matmul"(%xy, %w) : ({X}, !kiln.tensor<[6, 4], f32>) -> {P}\n'
        f'  %1 = "kiln.add"(%m1, %b) : ({P}, !kiln.tensor<[4], f32>) -> {P}', P),
        lambda x, y, w, b: [x @ w + b, y @ w + b]),
    "softmax": (_unary_pair(f'  %0 = "kiln.softmax"(%x) {{axis = 1 : i64}} : ({X}) -> {X}',
                            f'  %1 = "kiln.softmax"(%xy) {{axis = 1 : i64}} : ({X}) -> {X}', X),
                lambda x, y, w, b: [_np_softmax(x), _np_softmax(y)]),
    "layer_norm": (_unary_pair(
        f'  %0 = "kiln.layer_norm"(%x) {{axis = 1 : i64, epsilon = 1.0e-05 : f64, '
        f'operandSegmentSizes = array<i32: 1, 0, 0>}} : ({X}) -> {X}',
        f'  %1 = "kiln.layer_norm"(%xy) {{axis = 1 : i64, epsilon = 1.0e-05 : f64, '
        f'operandSegmentSizes = array<i32: 1, 0, 0>}} : ({X}) -> {X}', X),
        lambda x, y, w, b: [_np_ln(x), _np_ln(y)]),
}

# h5's repro: sums of ones over two symbolic dims (Resize computed run-time
# dim values this way) -- one fill shared by both sums.
ONES = '''"kiln.symbol"() {sym_name = "W", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "H", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @main(%x: !kiln.tensor<["H", "W"], f32>) -> (!kiln.tensor<[1], f64>, !kiln.tensor<[1], f64>) {
  %c = "kiln.constant"() {value = dense<1.000000e+00> : tensor<f64>} : () -> !kiln.tensor<[], f64>
  %e0 = "kiln.expand"(%c) {shape = ["H"]} : (!kiln.tensor<[], f64>) -> !kiln.tensor<["H"], f64>
  %s0 = "kiln.reduce_sum"(%e0) {axes = array<i64: 0>, keepdims = true} : (!kiln.tensor<["H"], f64>) -> !kiln.tensor<[1], f64>
  %e1 = "kiln.expand"(%c) {shape = ["W"]} : (!kiln.tensor<[], f64>) -> !kiln.tensor<["W"], f64>
  %s1 = "kiln.reduce_sum"(%e1) {axes = array<i64: 0>, keepdims = true} : (!kiln.tensor<["W"], f64>) -> !kiln.tensor<[1], f64>
  return %s0, %s1 : !kiln.tensor<[1], f64>, !kiln.tensor<[1], f64>
}
'''


@pytest.mark.parametrize("name", sorted(CASES))
def test_pair_in_one_kernel(name):
    """Both results of a fused pair match numpy at N = 1, 5, 33."""
    text, ref = CASES[name]
    cm = kiln.compile(text, device="cpu")
    assert "1 kernel(s)" in repr(cm)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    for n in (1, 5, 33):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        y = rng.standard_normal((n, 6)).astype(np.float32) * 3 + 1
        got = [np.asarray(g) for g in cm(x, y, w, b)]
        for g, want in zip(got, ref(x, x + y, w, b)):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} at N={n}")


def test_sums_of_ones_over_two_dims():
    """h5's repro: the two sums are H and W, not H twice."""
    cm = kiln.compile(ONES, device="cpu")
    for h, w in ((13, 7), (1, 64), (5, 5), (2, 9)):
        got = [float(np.asarray(v)[0]) for v in cm(np.zeros((h, w), np.float32))]
        assert got == [h, w]
