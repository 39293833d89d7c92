"""``register_kernel`` / ``register_decomposition`` on the Triton path, in the interpreter (issue 40).

The registry chooses a user kernel per Triton kernel: for a custom op
(imported as ``kiln.custom``) and over kiln's generated Triton kernel for
a built-in op.  Registered functions get torch tensors.  Numbers vs eager
at B = 1, 4, 9.
"""

from __future__ import annotations

import pytest
import torch

import kiln
from kiln.backends.registry import REGISTRY
from kiln.backends.user import unregister_decomposition
from kiln.errors import KilnError

B = torch.export.Dim("B", min=1, max=9)
SIZES = (1, 4, 9)


@torch.library.custom_op("kiln_ext_triton::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x, scale):
    return torch.empty_like(x)


class M(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(scaled_tanh(x + 1, 3.0) * 2, -1)


@pytest.fixture
def registered():
    names, ops = [], []
    yield names, ops
    for name in names:
        REGISTRY.unregister(name, "cuda")
    for op in ops:
        unregister_decomposition(op)


def check(compiled):
    for b in SIZES:
        x = torch.randn(b, 16, generator=torch.Generator().manual_seed(b))
        torch.testing.assert_close(compiled(x), M()(x), atol=1e-5, rtol=1e-5)


def chosen(compiled) -> list:
    return [c.entry.name if c is not None else None for c in compiled.program.choices]


def test_custom_op_kernel_and_builtin_override_on_triton(registered):
    names, _ = registered
    calls = []

    def torch_tanh(inputs, outputs, binding, attrs):
        calls.append("tanh")
        outputs[0].copy_(torch.tanh(inputs[0]) * attrs["operand1"])

    def torch_softmax(inputs, outputs, binding, attrs):
        calls.append("softmax")
        outputs[0].copy_(torch.softmax(inputs[0], attrs["axis"]))

    kiln.register_kernel(scaled_tanh, torch_tanh, device="cuda", dtypes=["f32"], shape_fn=lambda x: x,
                         name="torch_tanh")
    kiln.register_kernel("kiln.softmax", torch_softmax, device="cuda", dtypes=["f32"], name="torch_softmax")
    names += ["torch_tanh", "torch_softmax"]
    compiled = kiln.compile(M(), (torch.randn(2, 16),), {"x": {0: B}}, device="cuda")
    picked = chosen(compiled)
    assert "torch_tanh" in picked and "torch_softmax" in picked
    check(compiled)
    assert calls.count("tanh") == calls.count("softmax") == len(SIZES)


def test_decomposition_on_triton(registered):
    _, ops = registered
    kiln.register_decomposition(
        scaled_tanh, lambda cx: cx.build("mul", cx.build("tanh", cx.tensor(0)), cx.like(cx.scalar(1), cx.tensor(0))))
    ops.append("kiln_ext_triton::scaled_tanh")
    compiled = kiln.compile(M(), (torch.randn(2, 16),), {"x": {0: B}}, device="cuda")
    assert all(name is None or name.startswith("triton") for name in chosen(compiled)), chosen(compiled)
    check(compiled)


def test_kernel_that_raises_on_triton(registered):
    names, _ = registered

    def broken(inputs, outputs, binding):
        raise RuntimeError("launch failed")

    kiln.register_kernel(scaled_tanh, broken, device="cuda", shape_fn=lambda x: x, name="broken_tanh")
    names.append("broken_tanh")
    compiled = kiln.compile(M(), (torch.randn(2, 16),), {"x": {0: B}}, device="cuda")
    with pytest.raises(KilnError, match=r"'user.broken_tanh' registered for 'kiln_ext_triton::scaled_tanh' failed"
                                        r".*RuntimeError: launch failed"):
        compiled(torch.randn(3, 16))
