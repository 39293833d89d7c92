"""Kernels launched as two halves of their leading dim (kiln.transforms.row_split
decides which; the executor and kiln_run_split run them)."""

import ctypes

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
import kiln.runtime.launches as launches
from kiln._mlir import ir
from kiln.context import make_context
from kiln.module import parse_module
from kiln.transforms.row_split import split_symbol

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
    # Heads packed in one projection: a leading batch dim splits, queries (rank 2) do not.
    ('%0 = "kiln.packed_attention"(%x) {causal = true, heads = 2 : i64} : '
     '(!kiln.tensor<["B", "L", 24], f32>) -> !kiln.tensor<["B", "L", 8], f32>\n'
     'return %0 : !kiln.tensor<["B", "L", 8], f32>', '%x: !kiln.tensor<["B", "L", 24], f32>',
     '!kiln.tensor<["B", "L", 8], f32>', "B"),
    ('%0 = "kiln.packed_attention"(%x) {causal = true, heads = 2 : i64} : '
     '(!kiln.tensor<["L", 24], f32>) -> !kiln.tensor<["L", 8], f32>\n'
     'return %0 : !kiln.tensor<["L", 8], f32>', '%x: !kiln.tensor<["L", 24], f32>',
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
    # A dynamic quantization's per-tensor quantize; a dequantize per channel of the last axis; one along B.
    (f'%0 = "kiln.quantize"(%x, %s, %z) : ({T}, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> '
     '!kiln.tensor<["B", "L", 8], ui8>\nreturn %0 : !kiln.tensor<["B", "L", 8], ui8>',
     f"%x: {T}, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], ui8>", '!kiln.tensor<["B", "L", 8], ui8>', "B"),
    ('%0 = "kiln.dequantize"(%x, %s, %z) {axis = 2 : i64} : (!kiln.tensor<["B", "L", 8], i8>, '
     f'!kiln.tensor<[8], f32>, !kiln.tensor<[8], i8>) -> {T}\nreturn %0 : {T}',
     '%x: !kiln.tensor<["B", "L", 8], i8>, %s: !kiln.tensor<[8], f32>, %z: !kiln.tensor<[8], i8>', T, "B"),
    ('%0 = "kiln.dequantize"(%x, %s, %z) {axis = 0 : i64} : (!kiln.tensor<["B", 8], i8>, '
     '!kiln.tensor<["B"], f32>, !kiln.tensor<["B"], i8>) -> !kiln.tensor<["B", 8], f32>\n'
     'return %0 : !kiln.tensor<["B", 8], f32>',
     '%x: !kiln.tensor<["B", 8], i8>, %s: !kiln.tensor<["B"], f32>, %z: !kiln.tensor<["B"], i8>',
     '!kiln.tensor<["B", 8], f32>', None),
    # B also as a later dim.
    ('%0 = "kiln.relu"(%x) : (!kiln.tensor<["B", "B"], f32>) -> !kiln.tensor<["B", "B"], f32>\n'
     'return %0 : !kiln.tensor<["B", "B"], f32>', '%x: !kiln.tensor<["B", "B"], f32>',
     '!kiln.tensor<["B", "B"], f32>', None),
    # A leading dim that is an expression.
    ('%0 = "kiln.relu"(%x) : (!kiln.tensor<["B*L", 8], f32>) -> !kiln.tensor<["B*L", 8], f32>\n'
     'return %0 : !kiln.tensor<["B*L", 8], f32>', '%x: !kiln.tensor<["B*L", 8], f32>',
     '!kiln.tensor<["B*L", 8], f32>', None),
], ids=["rowwise", "small-weight", "softmax-axis0", "sum-axis0", "transpose-moves-B", "attention-rows",
        "packed-heads-batch", "packed-heads-rows", "large-weight", "large-inlined-weight", "quantize-per-tensor",
        "dequantize-per-channel", "dequantize-along-B", "B-twice", "expression"])
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
    """Counts split launches: kiln_run_split calls, and kiln_run_split_seq
    calls (a run of consecutive split kernels) once per kernel."""
    calls = []

    def spying(name, count):
        real = getattr(launches, name)

        def runner():
            fn = real()
            return None if fn is None else (lambda *a: (calls.extend([a] * count(a)), fn(*a)))

        monkeypatch.setattr(launches, name, runner)

    spying("split_runner", lambda a: 1)
    spying("split_seq_runner", lambda a: a[0])
    return calls


@pytest.mark.native
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


@pytest.mark.native
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


@pytest.mark.native
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


def _split_step(name, ins, outs):
    """A step tuple with a split launch (descriptors of no real kernel: never called)."""
    return (name, object(), tuple(ins), tuple(outs), (), False, (None, 1000 + len(name), (None, None), (), (1, 2)))


_NOOP = ctypes.CFUNCTYPE(None, ctypes.c_int64)(lambda packed: None)


def _whole_step(name, outs):
    return (name, object(), (), tuple(outs), (), False, (_NOOP, None, (), 3))


@pytest.mark.native
def test_consecutive_split_launches_run_as_one_call():
    """Split launches join a run while each reads of the run's values only
    the rows its own half wrote and writes no arena memory the run touched;
    reading more (a view of other rows, a value read whole), writing such
    memory or splitting along another symbol starts a new run; whole
    launches and fallback kernels end it."""
    fallback = ("fb", object(), (), (9,), (), True, None)
    steps = [
        _split_step("a", [0], [1]),
        _split_step("b", [1], [2]),  # reads a's rows: joins
        _split_step("c", [2], [3]),  # joins
        _split_step("d", [3], [4]),  # reads c's output whole: a new run
        _split_step("e", [4], [5]),  # joins d
        _split_step("e2", [5], [11]),  # writes memory d wrote (its value dead): a new run
        _split_step("f", [0], [6]),  # splits along L: a new run of one
        _whole_step("g", [7]),
        _whole_step("h", [8]),
        fallback,
        _split_step("i", [0], [10]),
    ]
    def rows(vid, lo=0, hi=100, whole=False):
        """Value vid's memory (space vid): halves of rows [lo, hi), or all of it in both."""
        mid = (lo + hi) // 2
        return ([(vid, lo, hi)], [(vid, lo, hi)]) if whole else ([(vid, lo, mid)], [(vid, mid, hi)])

    def arena(lo, hi):  # arena memory (space 0), row-split
        return rows(0, lo, hi)

    reads = {0: ("B", rows(0), arena(0, 100)), 1: ("B", arena(0, 100), arena(100, 200)),
             2: ("B", arena(100, 200), arena(200, 300)),
             3: ("B", rows(0, 200, 300, whole=True), arena(300, 400)),  # c's rows, all of them
             4: ("B", arena(300, 400), arena(400, 500)),
             5: ("B", arena(400, 500), arena(360, 400)),  # in d's memory, its first half in d's second
             6: ("L", rows(0), rows(6)), 10: ("B", rows(0), rows(10))}
    out = launches.batch_launches(steps, reads)
    split_seq = launches.split_seq_runner()

    def role(launch):
        """"plain" (launched alone), None (in a run, not its last) or (run kind, kernels)."""
        if launch is None or len(launch) == (4 if launch[0] is not None else 5):
            return "plain"
        seq = launch[-1]
        return None if seq is None else ("split" if seq[0] is split_seq else "whole", seq[1])

    assert [(st[0], role(st[6])) for st in out] == [
        ("a", None), ("b", None), ("c", ("split", 3)), ("d", None), ("e", ("split", 2)), ("e2", "plain"),
        ("f", "plain"), ("g", None), ("h", ("whole", 2)), ("fb", "plain"), ("i", "plain")]
    assert [launches.idle(s) for s in out] == [True, True, False, True, False, False, False, True, False, False,
                                               False]
    # Each half's sequence: the run's kernels in order, with that half's descriptors.
    _, n, pairs_a, pairs_b, (arr_a, arr_b) = out[2][6][5]
    assert n == 3 and list(arr_a) == [1001, 1, 1001, 1, 1001, 1] and list(arr_b) == [1001, 2, 1001, 2, 1001, 2]
