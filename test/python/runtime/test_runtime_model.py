"""kiln.compile end to end with the runtime: profiles, policies, contract
messages, fallback kernels, the report, and calls from several threads."""

import threading

import numpy as np
import pytest
import torch

import kiln
from kiln.errors import ShapeError, UnsupportedError

T = '!kiln.tensor<["B", "L"], f32>'
TEXT = f'''
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 64 : i64, opt = 8 : i64}} : () -> ()
"kiln.symbol"() {{sym_name = "L", min = 1 : i64, max = 512 : i64, opt = 128 : i64}} : () -> ()
func.func @main(%x: {T} {{kiln.name = "x"}}, %mask: {T} {{kiln.name = "mask"}}) -> {T} {{
  %0 = "kiln.mul"(%x, %mask) : ({T}, {T}) -> {T}
  %1 = "kiln.relu"(%0) : ({T}) -> {T}
  %2 = "kiln.softmax"(%1) {{axis = -1 : i64}} : ({T}) -> {T}
  %3 = "kiln.add"(%2, %x) : ({T}, {T}) -> {T}
  %4 = "kiln.reduce_max"(%3) {{axes = array<i64: 1>, keepdims = true}} : ({T}) -> !kiln.tensor<["B", 1], f32>
  %5 = "kiln.sub"(%3, %4) : ({T}, !kiln.tensor<["B", 1], f32>) -> {T}
  %6 = "kiln.tanh"(%5) : ({T}) -> {T}
  return %6 : {T}
}}
'''
PROFILES = [{"name": "small", "B": (1, 4, 8), "L": (1, 64, 256)}, {"name": "large", "B": (9, 32, 64)}]


def reference(x, mask):
    h = torch.softmax(torch.relu(x * mask), -1) + x
    return torch.tanh(h - h.amax(1, keepdim=True))


def inputs(b, n, seed=0):
    g = torch.Generator().manual_seed(seed * 1000 + b * 7 + n)
    return torch.randn(b, n, generator=g), (torch.rand(b, n, generator=g) > 0.3).float()


@pytest.fixture(scope="module")
def profiled():
    return kiln.compile(TEXT, profiles=PROFILES, profiling=True)


@pytest.mark.parametrize("b, n, profile", [(1, 1, "small"), (8, 256, "small"), (9, 1, "large"), (64, 512, "large"),
                                           (33, 77, "large")])
def test_profile_selection_at_boundaries(profiled, b, n, profile):
    x, m = inputs(b, n)
    y = profiled(x, m)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, reference(x, m), rtol=1e-4, atol=1e-5)
    assert profiled.report()["last_selection"] == f"profile {profile}"


def test_numpy_in_numpy_out(profiled):
    x, m = inputs(5, 40)
    y = profiled(x.numpy(), m.numpy())
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, reference(x, m).numpy(), rtol=1e-4, atol=1e-5)


def test_contract_messages(profiled):
    with pytest.raises(ShapeError) as e:
        profiled(*inputs(65, 4))
    assert str(e.value) == (
        "input 'x' axis 0: B = 65 violates 1 <= B <= 64 (profiles: small B in [1, 8], large B in [9, 64])"
    )
    x, _ = inputs(2, 128)
    with pytest.raises(ShapeError) as e:
        profiled(x, torch.ones(2, 100))
    assert str(e.value) == "input 'mask' axis 1 is 100 but L = 128 was bound from input 'x' axis 1"


def test_policy_error_names_nearest_profile(profiled):
    with pytest.raises(ShapeError) as e:
        profiled(*inputs(4, 300))
    assert str(e.value) == (
        "shape B = 4, L = 300 is outside every profile (nearest: small B in [1, 8], L in [1, 256]); "
        "compile with policy='specialize' or 'generic' to run it"
    )


def test_shape_contract(profiled):
    c = profiled.shape_contract()
    assert c["symbols"]["L"] == {"min": 1, "max": 512, "opt": 128, "multiple_of": None}
    assert c["inputs"] == [{"name": "x", "shape": ["B", "L"], "dtype": "f32"},
                           {"name": "mask", "shape": ["B", "L"], "dtype": "f32"}]
    assert [p["name"] for p in c["profiles"]] == ["small", "large"]
    assert c["profiles"][0]["ranges"]["L"] == {"min": 1, "opt": 64, "max": 256}
    assert c["policy"] == "error"


def test_report(profiled):
    profiled(*inputs(64, 512))
    r = profiled.report()
    assert r["kernels_in_schedule"] == len(r["kernels"]) == r["kernels_launched_per_call"] >= 2
    assert r["fallback"]["ops"] == 0 and r["fallback"]["share_of_ops"] == 0.0
    arena = r["arena"]
    assert arena["at"] == {"B": 64, "L": 512}
    assert 0 < arena["planned_peak_bytes"] <= arena["no_reuse_bytes"]
    assert r["compile_time_s"] > 0
    assert set(r["kernel_time_s"]) == {k["name"] for k in r["kernels"]}
    assert r["profiles"]["profile_hits"]["large"] >= 1


def mlp_text(layers=6, width=32):
    """An MLP over B: (matmul, bias, relu) per layer, weights as constants."""
    t = lambda n: f'!kiln.tensor<["B", {n}], f32>'  # noqa: E731
    lines = ['"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64, opt = 8 : i64} : () -> ()',
             f'func.func @main(%x: {t(16)} {{kiln.name = "x"}}) -> {t(width)} {{']
    prev, pw = "%x", 16
    for i in range(layers):
        lines += [
            f'  %w{i} = "kiln.constant"() {{value = dense<{0.02 * (i + 1)}> : tensor<{pw}x{width}xf32>}} '
            f': () -> !kiln.tensor<[{pw}, {width}], f32>',
            f'  %b{i} = "kiln.constant"() {{value = dense<-0.1> : tensor<{width}xf32>}} : () -> !kiln.tensor<[{width}], f32>',
            f'  %m{i} = "kiln.matmul"({prev}, %w{i}) : ({t(pw)}, !kiln.tensor<[{pw}, {width}], f32>) -> {t(width)}',
            f'  %a{i} = "kiln.add"(%m{i}, %b{i}) : ({t(width)}, !kiln.tensor<[{width}], f32>) -> {t(width)}',
            f'  %r{i} = "kiln.relu"(%a{i}) : ({t(width)}) -> {t(width)}',
        ]
        prev, pw = f"%r{i}", width
    lines.append(f"  return {prev} : {t(width)}\n}}")
    return "\n".join(lines)


def test_mlp_arena_reuse():
    m = kiln.compile(mlp_text())
    for b in (1, 7, 64):
        x = torch.randn(b, 16, generator=torch.Generator().manual_seed(b))
        h, pw = x, 16
        for i in range(6):
            h = torch.relu(h @ torch.full((pw, 32), np.float32(0.02 * (i + 1))) - 0.1)
            pw = 32
        torch.testing.assert_close(m(x), h, rtol=1e-4, atol=1e-5)
    r = m.report()
    assert r["kernels_in_schedule"] == 6
    arena = r["arena"]
    # Five chained [B, 32] intermediates ping-pong between two slots.
    assert arena["planned_peak_bytes"] == 2 * 64 * 32 * 4
    assert arena["no_reuse_bytes"] == 5 * 64 * 32 * 4


def test_policy_specialize_and_budget():
    m = kiln.compile(TEXT, profiles=PROFILES[:1], policy="specialize", budget={"B": 1, "L": 4})
    for b, n in [(20, 5), (30, 7), (40, 5), (3, 3)]:
        x, mask = inputs(b, n)
        torch.testing.assert_close(m(x, mask), reference(x, mask), rtol=1e-4, atol=1e-5)
    r = m.report()
    # (20, 5) compiles B in [17, 32], L in [5, 8]; (30, 7) hits it; (40, 5) needs a
    # second B bucket, past the budget: generic kernels; (3, 3) is in the profile.
    assert (r["specializations"], r["cache_hits"]) == (1, 1)
    assert r["profiles"]["budget_exceeded"] == 1 and r["profiles"]["generic_calls"] == 1
    assert r["profiles"]["specialization_names"] == ["spec B in [17, 32], L in [5, 8]"]
    assert m.compilations == 1 + 1 + 1  # dynamic kernels; static ones for the profile and the specialization


def test_policy_generic():
    m = kiln.compile(TEXT, profiles=PROFILES[:1], policy="generic")
    x, mask = inputs(50, 300)
    torch.testing.assert_close(m(x, mask), reference(x, mask), rtol=1e-4, atol=1e-5)
    assert m.report()["last_selection"] == "generic"


def test_threads_with_different_shapes(profiled):
    errors = []

    def work(seed):
        try:
            for i in range(50):
                b = 1 + (seed * 13 + i * 7) % 64
                n = 1 + (seed * 31 + i * 17) % 256
                x, mask = inputs(b, n, seed)
                if not torch.allclose(profiled(x, mask), reference(x, mask), rtol=1e-4, atol=1e-5):
                    errors.append((seed, i, b, n))
        except Exception as e:  # reported by the assert below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


class Bessel(torch.nn.Module):
    """Linear -> relu -> bessel_j0 (no kiln lowering: a fallback op) -> linear."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.special.bessel_j0(torch.relu(self.a(x))))


def test_fallback_op_runs_in_pytorch():
    torch.manual_seed(0)
    model = Bessel().eval()
    dyn = {"x": {0: torch.export.Dim("B", min=1, max=64)}}
    m = kiln.compile(model, (torch.randn(4, 16),), dynamic_shapes=dyn, fallback=True, profiling=True)
    for b in (1, 7, 64):
        x = torch.randn(b, 16)
        with torch.no_grad():
            torch.testing.assert_close(m(x), model(x), rtol=1e-4, atol=1e-5)
    r = m.report()
    fb = r["fallback"]
    assert fb["ops"] == 1 and fb["op_names"] == ["aten.special_bessel_j0"]
    assert 0 < fb["share_of_ops"] < 1 and 0 < fb["share_of_time"] < 1
    assert sum(k["kind"] == "fallback" for k in r["kernels"]) == 1
    with pytest.raises(UnsupportedError, match="special_bessel_j0"):
        kiln.compile(model, (torch.randn(4, 16),), dynamic_shapes=dyn, fallback=False)


class InputAndBessel(torch.nn.Module):
    """An output that is the input (returned as a copy) beside a fallback op."""

    def forward(self, x):
        return x, torch.special.bessel_j0(x)


def test_inputs_that_require_grad_record_no_graph():
    """A call is inference: an input that requires grad gives outputs outside
    autograd (the copy of the input, the fallback op's), same values."""
    dyn = {"x": {0: torch.export.Dim("B", min=1, max=64)}}
    m = kiln.compile(InputAndBessel(), (torch.randn(4, 16),), dynamic_shapes=dyn, fallback=True)
    x = torch.randn(3, 16)
    got = m(x.clone().requires_grad_())
    for y, want in zip(got, m(x)):
        assert not y.requires_grad and y.grad_fn is None
        torch.testing.assert_close(y, want, rtol=0, atol=0)
