"""Kernels and decompositions registered from user code, torch frontend, CPU (issue 40).

A ``torch.library`` custom op with a registered CPU kernel imports as
``kiln.custom`` and runs the registered function: no fallback, even with
``fallback=False``; a registered decomposition turns a custom op into kiln
ops (generated code); a kernel registered for a built-in kiln op is chosen
over kiln's own and really called.  Numbers vs eager at the min, a middle
and the max of each symbol.  Errors name the op and the registered kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln
from kiln.backends.registry import REGISTRY
from kiln.backends.user import unregister_decomposition
from kiln.errors import KilnError, ShapeError, UnsupportedError

B = torch.export.Dim("B", min=1, max=6)
L = torch.export.Dim("L", min=2, max=48)
SHAPES = [(1, 2), (3, 23), (6, 48)]  # (B, L): min, middle, max


@torch.library.custom_op("kiln_ext_test::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=causal)


@attention.register_fake
def _(q, k, v, scale, causal):
    return q.new_empty(q.shape[:-1] + v.shape[-1:])


@torch.library.custom_op("kiln_ext_test::swish_beta", mutates_args=())
def swish_beta(x: torch.Tensor, beta: float) -> torch.Tensor:
    return x * torch.sigmoid(beta * x)


@swish_beta.register_fake
def _(x, beta):
    return torch.empty_like(x)


@torch.library.custom_op("kiln_ext_test::widen", mutates_args=())
def widen(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, x], -1)


@widen.register_fake
def _(x):
    return x.new_empty(x.shape[:-1] + (2 * x.shape[-1],))


class Attn(torch.nn.Module):
    """Projections around the custom attention op, causal, scale 1/4."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, q, k, v):
        return self.proj(attention(q, k, v, 0.25, True))


def attn_args(b, n):
    g = torch.Generator().manual_seed(b * 100 + n)
    return tuple(torch.randn(b, 2, n, 16, generator=g) for _ in range(3))


ATTN_DYN = {"q": {0: B, 2: L}, "k": {0: B, 2: L}, "v": {0: B, 2: L}}
CALLS: list[str] = []


def np_attention(inputs, outputs, binding, attrs):
    """Causal scaled-dot-product attention in numpy (the registered CPU kernel)."""
    CALLS.append("attention")
    q, k, v = inputs
    s = q @ k.swapaxes(-1, -2) * attrs["operand3"]
    if attrs["operand4"]:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    outputs[0][...] = (s / s.sum(-1, keepdims=True)) @ v


@pytest.fixture
def registered():
    """Names registered by a test, unregistered after it (the registry is process-wide)."""
    names: list[tuple[str, str]] = []
    ops: list[str] = []
    CALLS.clear()
    yield names, ops
    for name, device in names:
        REGISTRY.unregister(name, device)
    for op in ops:
        unregister_decomposition(op)


def check(model, compiled, make_args, shapes=SHAPES, atol=2e-5):
    """The compiled model against eager at each shape."""
    for shape in shapes:
        args = make_args(*shape)
        want = model(*args).detach().numpy()
        got = compiled(*args)
        got = got.numpy() if isinstance(got, torch.Tensor) else got
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=atol, rtol=1e-5)


def test_custom_op_without_registration_is_a_fallback():
    # What the registration changes: without it, fallback=False refuses the op.
    with pytest.raises(UnsupportedError, match="kiln_ext_test.attention"):
        kiln.compile(Attn(), attn_args(2, 8), ATTN_DYN, fallback=False)


def test_custom_torch_op_runs_its_registered_cpu_kernel(registered):
    names, _ = registered
    kiln.register_kernel(attention, np_attention, device="cpu", dtypes=["f32"],
                         shape_fn=lambda q, k, v: (*q[:-1], v[-1]), name="np_attention")
    names.append(("np_attention", "cpu"))
    model = Attn().eval()
    compiled = kiln.compile(model, attn_args(2, 8), ATTN_DYN, fallback=False)
    report = compiled.report()
    assert report["fallback"]["ops"] == 0
    impls = [k["impl"] for k in report["kernels"]]
    assert impls.count("user.np_attention") == 1
    assert any(not i.startswith("user.") for i in impls)  # the projection around it is kiln's (its GEMM + bias)
    check(model, compiled, attn_args)
    assert CALLS.count("attention") == len(SHAPES)


def test_string_name_and_returned_result(registered):
    # "namespace::name" as a string; a kernel may return its result instead of writing it.
    names, _ = registered
    kiln.register_kernel("kiln_ext_test::swish_beta", lambda i, o, b, attrs: i[0] / (1 + np.exp(-attrs["operand1"] * i[0])),
                         device="cpu", shape_fn=lambda x: x, name="np_swish")
    names.append(("np_swish", "cpu"))

    class M(torch.nn.Module):
        def forward(self, x):
            return swish_beta(x * 2, 1.5) - 1

    compiled = kiln.compile(M(), (torch.randn(2, 8),), {"x": {0: B}}, fallback=False)
    assert compiled.report()["fallback"]["ops"] == 0
    check(M(), compiled, lambda b, n: (torch.randn(b, 8),), shapes=[(1, 0), (3, 0), (6, 0)])


def test_decomposition_of_a_custom_torch_op(registered):
    _, ops = registered

    @kiln.register_decomposition("kiln_ext_test::swish_beta")
    def swish(cx):
        x = cx.tensor(0)
        beta = cx.scalar(1)
        return cx.build("mul", x, cx.build("sigmoid", cx.build("mul", x, cx.like(beta, x))))

    ops.append("kiln_ext_test::swish_beta")

    class M(torch.nn.Module):
        def forward(self, x):
            return swish_beta(x + 1, 0.75) * 3

    compiled = kiln.compile(M(), (torch.randn(2, 5, 8),), {"x": {0: B, 1: L}}, fallback=False)
    report = compiled.report()
    assert report["fallback"]["ops"] == 0
    assert not [k for k in report["kernels"] if "user." in k["impl"]]  # kiln's own code (its library GEMM too)
    assert "kiln.sigmoid" in {op for k in report["kernels"] for op in k["ops"]}
    check(M(), compiled, lambda b, n: (torch.randn(b, n, 8),))


def test_registered_kernel_for_a_builtin_op_is_chosen_and_called(registered):
    names, _ = registered

    def np_softmax(inputs, outputs, binding, attrs):
        CALLS.append("softmax")
        x, axis = inputs[0], attrs["axis"]
        e = np.exp(x - x.max(axis, keepdims=True))
        outputs[0][...] = e / e.sum(axis, keepdims=True)

    kiln.register_kernel("kiln.softmax", np_softmax, device="cpu", dtypes=["f32"], name="np_softmax")
    names.append(("np_softmax", "cpu"))

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x * 2, -1) + 1

    compiled = kiln.compile(M(), (torch.randn(2, 8, 8),), {"x": {0: B, 1: L}}, fallback=False)
    impls = [k["impl"] for k in compiled.report()["kernels"]]
    assert impls.count("user.np_softmax") == 1
    assert compiled.report()["fallback"]["ops"] == 0
    check(M(), compiled, lambda b, n: (torch.randn(b, n, 8),))
    assert CALLS.count("softmax") == len(SHAPES)


def test_bad_op_name():
    with pytest.raises(KilnError, match="'kiln.sofmax' is neither a kiln op"):
        kiln.register_kernel("kiln.sofmax", np_attention, device="cpu")
    with pytest.raises(KilnError, match="'flash_attention' is neither"):
        kiln.register_decomposition("flash_attention", lambda cx: None)


def test_shape_fn_that_disagrees_with_the_source(registered):
    names, _ = registered
    kiln.register_kernel(widen, lambda i, o, b: None, device="cpu", shape_fn=lambda x: x, name="bad_shape")
    names.append(("bad_shape", "cpu"))

    class M(torch.nn.Module):
        def forward(self, x):
            return widen(x)

    with pytest.raises(ShapeError, match=r"kiln_ext_test::widen.*'bad_shape' gives \[B, 8\].*gives \[B, 16\]"):
        kiln.compile(M(), (torch.randn(2, 8),), {"x": {0: B}}, fallback=False)


def test_kernel_that_raises_at_run_time(registered):
    names, _ = registered

    def broken(inputs, outputs, binding):
        raise ValueError("out of registers")

    kiln.register_kernel(widen, broken, device="cpu", shape_fn=lambda x: (*x[:-1], 2 * x[-1]), name="broken_widen")
    names.append(("broken_widen", "cpu"))

    class M(torch.nn.Module):
        def forward(self, x):
            return widen(x)

    compiled = kiln.compile(M(), (torch.randn(2, 8),), {"x": {0: B}}, fallback=False)
    with pytest.raises(KilnError, match=r"'user.broken_widen' registered for 'kiln_ext_test::widen' failed.*"
                                        r"ValueError: out of registers"):
        compiled(torch.randn(3, 8))


def test_custom_op_with_a_cuda_kernel_only_on_cpu(registered):
    names, _ = registered
    kiln.register_kernel(widen, lambda i, o, b: None, device="cuda", shape_fn=lambda x: (*x[:-1], 2 * x[-1]),
                         name="cuda_widen")
    names.append(("cuda_widen", "cuda"))

    class M(torch.nn.Module):
        def forward(self, x):
            return widen(x)

    with pytest.raises(UnsupportedError, match=r"no CPU kernel is registered for 'kiln_ext_test::widen'.*cuda_widen"):
        kiln.compile(M(), (torch.randn(2, 8),), {"x": {0: B}}, fallback=False)


def test_save_refuses_a_python_kernel(registered, tmp_path):
    names, _ = registered
    kiln.register_kernel(widen, lambda i, o, b: np.concatenate([i[0], i[0]], -1), device="cpu",
                         shape_fn=lambda x: (*x[:-1], 2 * x[-1]), name="np_widen")
    names.append(("np_widen", "cpu"))

    class M(torch.nn.Module):
        def forward(self, x):
            return widen(x) + 1

    compiled = kiln.compile(M(), (torch.randn(2, 8),), {"x": {0: B}}, fallback=False)
    x = torch.randn(4, 8)
    np.testing.assert_allclose(compiled(x).numpy(), M()(x).numpy())
    with pytest.raises(KilnError, match=r"kiln.save: .*'user.np_widen'.*'kiln_ext_test::widen'"):
        kiln.save(compiled, tmp_path / "artifact")


def softmax_as_exp_sum(cx):
    """kiln.softmax decomposed: exp(x - max) / sum, over the op's axis."""
    x, axis = cx.tensor(0), cx.attr("axis")
    m = cx.build("reduce_max", x, axes=[axis], keepdims=True)
    e = cx.build("exp", cx.build("sub", x, m))
    return cx.build("div", e, cx.build("reduce_sum", e, axes=[axis], keepdims=True))


def test_decomposition_of_a_kiln_op(registered):
    _, ops = registered
    kiln.register_decomposition("kiln.softmax", softmax_as_exp_sum)
    ops.append("kiln.softmax")

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x * 2, 1) + 1

    compiled = kiln.compile(M(), (torch.randn(2, 8, 8),), {"x": {0: B, 1: L}}, fallback=False)
    report = compiled.report()
    kernel_ops = {op for k in report["kernels"] for op in k["ops"]}
    assert not [k for k in report["kernels"] if "user." in k["impl"]]  # kiln's own code (its library GEMM too)
    assert "kiln.softmax" not in kernel_ops and {"kiln.reduce_max", "kiln.exp", "kiln.reduce_sum"} <= kernel_ops
    check(M(), compiled, lambda b, n: (torch.randn(b, n, 8),))
