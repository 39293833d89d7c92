"""Schedule + arena + fallback kernels: numerics, arena reuse, report, threads."""

import threading

import numpy as np
import pytest
import torch

from kiln.errors import ShapeError

T = '!kiln.tensor<["B", {n}], f32>'


def _fb(name, args, n, out="%{r}"):
    segs = ", ".join(["1"] * len(args) + ["0"] * (16 - len(args)))
    types = ", ".join(t for _, t in args)
    vals = ", ".join(v for v, _ in args)
    return (
        f'"kiln.fallback"({vals}) {{op_name = "{name}", operandSegmentSizes = array<i32: {segs}>, '
        f"resultSegmentSizes = array<i32: 1, 0, 0, 0>}} : ({types}) -> {T.format(n=n)}"
    )


def mlp_text(layers=4, width=32, fallback_relu=False):
    """An MLP: (matmul, add, relu) x layers; weights as constants."""
    lines = ['"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64, opt = 8 : i64} : () -> ()',
             f'func.func @main(%x: {T.format(n=16)}) -> {T.format(n=width)} {{']
    prev, pw = "%x", 16
    for i in range(layers):
        lines.append(f'  %w{i} = "kiln.constant"() {{value = dense<{0.01 * (i + 1)}> : tensor<{pw}x{width}xf32>}} '
                     f': () -> !kiln.tensor<[{pw}, {width}], f32>')
        lines.append(f'  %b{i} = "kiln.constant"() {{value = dense<-0.05> : tensor<{width}xf32>}} : () -> !kiln.tensor<[{width}], f32>')
        lines.append(f'  %m{i} = "kiln.matmul"({prev}, %w{i}) : ({T.format(n=pw)}, !kiln.tensor<[{pw}, {width}], f32>) -> {T.format(n=width)}')
        lines.append(f'  %a{i} = "kiln.add"(%m{i}, %b{i}) : ({T.format(n=width)}, !kiln.tensor<[{width}], f32>) -> {T.format(n=width)}')
        if fallback_relu and i == 1:
            lines.append(f'  %r{i} = ' + _fb("aten.special_bessel_j0.default", [(f"%a{i}", T.format(n=width))], width))
        else:
            lines.append(f'  %r{i} = "kiln.relu"(%a{i}) : ({T.format(n=width)}) -> {T.format(n=width)}')
        prev, pw = f"%r{i}", width
    lines.append(f"  return {prev} : {T.format(n=width)}\n}}")
    return "\n".join(lines)


def mlp_reference(x, layers=4, width=32, fallback_relu=False):
    h, pw = x, 16
    for i in range(layers):
        h = h @ torch.full((pw, width), np.float32(0.01 * (i + 1))) - 0.05
        h = torch.special.bessel_j0(h) if (fallback_relu and i == 1) else torch.relu(h)
        pw = width
    return h


@pytest.mark.parametrize("b", [1, 7, 64])
def test_mlp_arena_reuse_outputs_unchanged(b, build_executor):
    x = torch.randn(b, 16, generator=torch.Generator().manual_seed(b))
    # Weights as schedule constants (passed to the kernels as arguments).
    reuse, contract, _, plan = build_executor(mlp_text(), fuse=False, inline_constants=False)
    assert len(reuse.constants) == 8
    fresh, _, _, plan_nr = build_executor(mlp_text(), fuse=False, reuse=False)
    binding = contract.bind([x])
    (y1,) = reuse.run([x], binding)
    (y2,) = fresh.run([x], binding)
    torch.testing.assert_close(y1, mlp_reference(x), rtol=1e-5, atol=1e-6)
    assert torch.equal(y1, y2)
    planned, total = plan.sizes_at(binding)
    assert planned < total  # buffers share space
    assert planned * 3 <= total  # 11 chained intermediates fit in a few slots
    assert plan_nr.sizes_at(binding)[0] == total


def test_layout_cached_per_shape_and_pool_reuses_arenas(build_executor):
    ex, contract, _, _ = build_executor(mlp_text(), fuse=False)
    for b in (3, 5, 3, 3, 5):
        x = torch.randn(b, 16)
        ex.run([x], contract.bind([x]))
    assert ex.arena_plan.evaluations == 2
    stats = ex.pool.stats()
    assert stats["allocations"] == 2 and stats["reuses"] == 3


def test_fallback_model_runs_and_reports_share(build_executor):
    ex, contract, text, _ = build_executor(mlp_text(fallback_relu=True), profiling=True)
    assert text.count('kiln.kernel = "fallback"') == 1
    for b in (1, 9, 64):
        x = torch.randn(b, 16)
        (y,) = ex.run([x], contract.bind([x]), selection="generic")
        torch.testing.assert_close(y, mlp_reference(x, fallback_relu=True), rtol=1e-5, atol=1e-6)
    from kiln.runtime.report import build_report, format_report

    r = build_report(ex.schedule, ex.metrics, compile_time_s=0.5)
    assert r["kernels_in_schedule"] == 5  # 4 fused matmul kernels (second split by the fallback) + 1 fallback
    assert r["fallback"]["ops"] == 1 and r["fallback"]["share_of_ops"] == pytest.approx(1 / 12)
    assert 0 < r["fallback"]["share_of_time"] < 1
    assert r["arena"]["at"] == {"B": 64} and r["arena"]["planned_peak_bytes"] < r["arena"]["no_reuse_bytes"]
    assert set(r["kernel_time_s"]) == {k["name"] for k in r["kernels"]}
    text = format_report(r)
    assert "fallback ops: 1 (8.3% of ops" in text and "aten.special_bessel_j0.default" in text
    assert "kernels launched per call: 5" in text


def test_contract_before_kernels(build_executor):
    ex, contract, _, _ = build_executor(mlp_text(), fuse=False)
    with pytest.raises(ShapeError, match=r"input 'arg0' axis 0: B = 65 violates 1 <= B <= 64"):
        contract.bind([torch.randn(65, 16)])
    assert ex.metrics.calls == 0


def test_threads_with_different_shapes(build_executor):
    ex, contract, _, _ = build_executor(mlp_text(fallback_relu=True))
    errors = []

    def work(seed):
        g = torch.Generator().manual_seed(seed)
        try:
            for i in range(50):
                b = 1 + (seed * 7 + i * 13) % 64
                x = torch.randn(b, 16, generator=g)
                (y,) = ex.run([x], contract.bind([x]))
                if not torch.allclose(y, mlp_reference(x, fallback_relu=True), rtol=1e-5, atol=1e-6):
                    errors.append((seed, i, b))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert ex.metrics.calls == 400



@pytest.mark.native
@pytest.mark.parametrize("batched", [True, False], ids=["kiln_run_seq", "one-call-each"])
def test_generated_kernels_between_fallbacks_run_as_one_native_call(monkeypatch, batched):
    """The CPU backend's kernels before and after a fallback kernel are two
    runs: one ``kiln_run_seq`` call each (both kernels of each), or one
    ctypes call per kernel without it; the results are the same."""
    import kiln
    from kiln.runtime import launches

    calls = []
    real = launches.seq_runner()

    def runner():
        return (lambda n, pairs: (calls.append(n), real(n, pairs))) if batched else None

    monkeypatch.setattr(launches, "seq_runner", runner)
    model = kiln.compile("module {\n" + mlp_text(fallback_relu=True) + "\n}")
    assert model.report()["kernels_in_schedule"] == 5  # k0 k1 | fallback | k2 k3
    for b in (1, 9, 64):
        x = torch.randn(b, 16)
        before = len(calls)
        torch.testing.assert_close(model(x), mlp_reference(x, fallback_relu=True), rtol=1e-5, atol=1e-5)
        assert calls[before:] == ([2, 2] if batched else [])
