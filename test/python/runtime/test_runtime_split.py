"""Kernels launched as two halves of their leading dim (kiln.runtime.split
decides which; the executor and kiln_run_split run them)."""

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
import kiln.runtime.executor as executor
from kiln._mlir import ir
from kiln.context import make_context
from kiln.module import parse_module
from kiln.runtime import native
from kiln.runtime.split import split_symbol

SYMBOLS = ('"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()\n'
           '"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()\n')


def _symbol(body: str, args: str, result: str):
    """split_symbol of ``func.func @k(args) -> result { body }``."""
    text = SYMBOLS + f"func.func @k({args}) -> {result} {{\n{body}\n}}\n"
    with make_context(), ir.Location.unknown():
        module = parse_module(text, "<split>")
        fn = next(op.operation for op in module.body.operations if op.operation.name == "func.func")
        return split_symbol(fn)


T = '!kiln.tensor<["B", "L", 8], f32>'


@pytest.mark.parametrize("body, args, result, want", [
    # Row-wise ops along B: elementwise with a broadcast row, layer_norm, a transpose keeping dim 0.
    (f'%0 = "kiln.layer_norm"(%x) {{operandSegmentSizes = array<i32: 1, 0, 0>}} : ({T}) -> {T}\n'
     f'%1 = "kiln.add"(%0, %b) : ({T}, !kiln.tensor<[8], f32>) -> {T}\n'
     f'%2 = "kiln.transpose"(%1) {{perm = array<i64: 0, 2, 1>}} : ({T}) -> !kiln.tensor<["B", 8, "L"], f32>\n'
     'return %2 : !kiln.tensor<["B", 8, "L"], f32>', f"%x: {T}, %b: !kiln.tensor<[8], f32>",
     '!kiln.tensor<["B", 8, "L"], f32>', "B"),
    # A product with a small weight.
    (f'%0 = "kiln.matmul"(%x, %w) : ({T}, !kiln.tensor<[8, 4], f32>) -> !kiln.tensor<["B", "L", 4], f32>\n'
     'return %0 : !kiln.tensor<["B", "L", 4], f32>', f"%x: {T}, %w: !kiln.tensor<[8, 4], f32>",
     '!kiln.tensor<["B", "L", 4], f32>', "B"),
    # Mixing rows: softmax over B, a sum over B, a transpose moving B.
    (f'%0 = "kiln.softmax"(%x) {{axis = 0 : i64}} : ({T}) -> {T}\nreturn %0 : {T}', f"%x: {T}", T, None),
    (f'%0 = "kiln.reduce_sum"(%x) {{axes = array<i64: 0>, keepdims = true}} : ({T}) -> '
     '!kiln.tensor<[1, "L", 8], f32>\nreturn %0 : !kiln.tensor<[1, "L", 8], f32>', f"%x: {T}",
     '!kiln.tensor<[1, "L", 8], f32>', None),
    (f'%0 = "kiln.transpose"(%x) {{perm = array<i64: 1, 0, 2>}} : ({T}) -> !kiln.tensor<["L", "B", 8], f32>\n'
     'return %0 : !kiln.tensor<["L", "B", 8], f32>', f"%x: {T}", '!kiln.tensor<["L", "B", 8], f32>', None),
    # Attention over the leading dim (rows of q see every key): not a batch dim.
    ('%0 = "kiln.attention"(%q, %q, %q) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : '
     '(!kiln.tensor<["L", 8], f32>, !kiln.tensor<["L", 8], f32>, !kiln.tensor<["L", 8], f32>) -> '
     '!kiln.tensor<["L", 8], f32>\nreturn %0 : !kiln.tensor<["L", 8], f32>', '%q: !kiln.tensor<["L", 8], f32>',
     '!kiln.tensor<["L", 8], f32>', None),
    # A shared weight too large to read twice (8 MiB), as an argument or inlined in the kernel.
    ('%0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 1024], f32>, !kiln.tensor<[1024, 2048], f32>) -> '
     '!kiln.tensor<["B", 2048], f32>\nreturn %0 : !kiln.tensor<["B", 2048], f32>',
     '%x: !kiln.tensor<["B", 1024], f32>, %w: !kiln.tensor<[1024, 2048], f32>', '!kiln.tensor<["B", 2048], f32>',
     None),
    ('%w = "kiln.constant"() {value = dense<1.0> : tensor<1024x2048xf32>} : () -> !kiln.tensor<[1024, 2048], f32>\n'
     '%0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 1024], f32>, !kiln.tensor<[1024, 2048], f32>) -> '
     '!kiln.tensor<["B", 2048], f32>\nreturn %0 : !kiln.tensor<["B", 2048], f32>',
     '%x: !kiln.tensor<["B", 1024], f32>', '!kiln.tensor<["B", 2048], f32>', None),
    # B also as a later dim.
    ('%0 = "kiln.relu"(%x) : (!kiln.tensor<["B", "B"], f32>) -> !kiln.tensor<["B", "B"], f32>\n'
     'return %0 : !kiln.tensor<["B", "B"], f32>', '%x: !kiln.tensor<["B", "B"], f32>',
     '!kiln.tensor<["B", "B"], f32>', None),
    # A leading dim that is an expression.
    ('%0 = "kiln.relu"(%x) : (!kiln.tensor<["B*L", 8], f32>) -> !kiln.tensor<["B*L", 8], f32>\n'
     'return %0 : !kiln.tensor<["B*L", 8], f32>', '%x: !kiln.tensor<["B*L", 8], f32>',
     '!kiln.tensor<["B*L", 8], f32>', None),
], ids=["rowwise", "small-weight", "softmax-axis0", "sum-axis0", "transpose-moves-B", "attention-rows",
        "large-weight", "large-inlined-weight", "B-twice", "expression"])
def test_split_symbol(body, args, result, want):
    assert _symbol(body, args, result) == want


class _Block(torch.nn.Module):
    """Row-wise kernels (layer_norm, GELU, a transpose of the last two dims) around a small linear layer."""

    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(64)
        self.fc = torch.nn.Linear(64, 64)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.fc(self.ln(x)))
        return y.transpose(1, 2) * 2.0


@pytest.fixture
def spy(monkeypatch):
    """Counts split launches (kiln_run_split calls)."""
    calls = []
    real = executor._split_runner

    def runner():
        fn = real()
        return None if fn is None else (lambda *a: (calls.append(a), fn(*a)))

    monkeypatch.setattr(executor, "_split_runner", runner)
    return calls


@pytest.mark.skipif(native.load() is None, reason="no C compiler: the native library is not built")
def test_split_kernels_match_torch_at_every_batch(spy):
    torch.manual_seed(0)
    net = _Block().eval()
    model = kiln.compile(net, (torch.randn(2, 600, 64),), dynamic_shapes=({0: Dim("B", min=1, max=64)},))
    assert [k["split"] for k in model.report()["kernels"] if "kiln.layer_norm" in k["ops"]] == ["B"]
    for b, rows in ((1, 0), (5, 1), (64, 1)):  # B=1 cannot split; B=5 halves 2 + 3
        x = torch.randn(b, 600, 64)
        before = len(spy)
        with torch.no_grad():
            np.testing.assert_allclose(model(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-4)
        assert (len(spy) > before) == bool(rows)


@pytest.mark.skipif(native.load() is None, reason="no C compiler: the native library is not built")
def test_profiling_times_kernels_as_they_run(spy):
    """With profiling on, split kernels still run split, and their time is reported."""
    torch.manual_seed(0)
    net = _Block().eval()
    model = kiln.compile(net, (torch.randn(2, 600, 64),), dynamic_shapes=({0: Dim("B", min=1, max=64)},),
                         profiling=True)
    split = [k["name"] for k in model.report()["kernels"] if k["split"]]
    assert split
    x = torch.randn(8, 600, 64)
    with torch.no_grad():
        for _ in range(2):  # the first call is not timed
            np.testing.assert_allclose(model(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-4)
    assert len(spy) >= 2 * len(split)
    times = model.report()["kernel_time_s"]
    assert all(times[name]["mean_s"] > 0 for name in split)


@pytest.mark.skipif(native.load() is None, reason="no C compiler: the native library is not built")
def test_static_kernels_never_split(spy):
    """A kernel compiled with B bound reads no size from its arguments: halving them would be wrong."""
    torch.manual_seed(0)
    net = _Block().eval()
    model = kiln.compile(net, (torch.randn(2, 600, 64),), dynamic_shapes=({0: Dim("B", min=1, max=64)},),
                         profiles=[{"B": (1, 8, 64)}], static_kernels=True)
    spy.clear()  # compiling timed the dynamic kernels as they run: split
    x = torch.randn(8, 600, 64)  # the opt point: static kernels only
    with torch.no_grad():
        np.testing.assert_allclose(model(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-4)
    assert model.report()["profiles"]["variants"]
    assert not spy
