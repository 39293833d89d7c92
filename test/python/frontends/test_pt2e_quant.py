"""A small CNN quantized with PT2E (``prepare_pt2e`` / ``convert_pt2e`` with
the X86 inductor quantizer, from torchao: torch 2.13 moved PT2E there), then
exported with ``torch.export``, compiled with fallback disabled: matches the
quantized torch model at the min, a middle and the max of the batch dim.

The graph holds ``quantized_decomposed.quantize_per_tensor`` /
``dequantize_per_tensor`` around activations and ``dequantize_per_channel``
of the int8 weights (see :mod:`kiln.conversions.torch_to_kiln.aten_quant`).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

# PT2E lives in torchao (the test extra installs it; a missing one fails, not skips).
import torchao.quantization.pt2e.quantize_pt2e as pt2e
import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq

import kiln
from kiln.validate import TOLERANCES

BATCHES = (1, 6, 16)


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = torch.relu(self.c2(y))
        return self.fc(y.mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def quantized():
    torch.manual_seed(0)
    net = _CNN().eval()
    b = torch.export.Dim("B", min=1, max=16)
    example = (torch.randn(4, 3, 12, 12),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = torch.export.export(net, example, dynamic_shapes=({0: b},)).module()
        quantizer = xiq.X86InductorQuantizer()
        quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
        prepared = pt2e.prepare_pt2e(graph, quantizer)
        for i in range(4):  # calibration
            prepared(torch.randn(4, 3, 12, 12, generator=torch.Generator().manual_seed(i)))
        converted = pt2e.convert_pt2e(prepared)
    return converted, example, b


def test_pt2e_cnn_matches_quantized_torch(quantized):
    model, example, b = quantized
    exported = torch.export.export(model, example, dynamic_shapes=({0: b},))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    # The export really is quantized (else the comparison proves nothing).
    assert {"quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default",
            "quantized_decomposed.dequantize_per_channel.default"} <= targets, sorted(targets)
    compiled = kiln.compile(model, example, dynamic_shapes=({0: b},), fallback=False)
    tol = TOLERANCES["int8"]
    for batch in BATCHES:
        x = torch.randn(batch, 3, 12, 12, generator=torch.Generator().manual_seed(100 + batch))
        want = model(x).detach().numpy()
        got = np.asarray(compiled(x.numpy()))
        assert got.shape == want.shape
        print(f"PT2E CNN B={batch}: max |kiln - torch| = {np.max(np.abs(got - want)):.3g}")
        np.testing.assert_allclose(got, want, rtol=tol.rtol, atol=tol.atol, err_msg=f"B={batch}")


@pytest.mark.native
def test_pt2e_linear_is_an_integer_product(quantized):
    """kiln-fold-qdq: the quantized Linear (per-channel weight, its int64 zero points cast to int8) runs as
    kiln.matmul_integer, no f32 product left (the values are checked above)."""
    model, example, b = quantized
    compiled = kiln.compile(model, example, dynamic_shapes=({0: b},), fallback=False)
    ops = [op for k in compiled.report()["kernels"] for op in k["ops"]]
    assert ops.count("kiln.matmul_integer") == 1 and "kiln.matmul" not in ops, sorted(set(ops))
