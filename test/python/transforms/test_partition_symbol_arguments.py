"""A kernel over a symbol none of its inputs carries gets the argument that does (kiln-partition)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln

# kiln.range over B between two fallback kernels: nothing to merge with, so
# before the fix convert-kiln-to-linalg failed ("symbol 'B' is not the exact
# dim of any function argument") - how a decoder called with use_cache=False
# failed (a position range over B beside cumsum / index fallbacks).
RANGE_BETWEEN_FALLBACKS = """
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32> {
  %f = "kiln.fallback"(%x) {op_name = "aten.special_bessel_j0.default", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  %r = "kiln.range"() {shape = ["B"], start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> !kiln.tensor<["B"], f32>
  %r2 = "kiln.reshape"(%r) {shape = ["B", 1]} : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B", 1], f32>
  %g = "kiln.fallback"(%r2) {op_name = "aten.special_bessel_j0.default", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", 1], f32>
  %s = "kiln.add"(%g, %f) : (!kiln.tensor<["B", 1], f32>, !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  return %s : !kiln.tensor<["B", "L"], f32>
}
"""


@pytest.mark.parametrize("b, length", [(1, 1), (5, 33), (64, 512)])
def test_a_range_over_a_symbol_only_the_model_input_carries(b, length):
    model = kiln.compile(RANGE_BETWEEN_FALLBACKS, optimize=False)
    x = np.random.default_rng(b).standard_normal((b, length), dtype=np.float32)
    ref = torch.special.bessel_j0(torch.arange(b, dtype=torch.float32)[:, None]) + torch.special.bessel_j0(
        torch.from_numpy(x))
    np.testing.assert_allclose(model(x), ref.numpy(), rtol=1e-5, atol=1e-6)
