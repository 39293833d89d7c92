"""Reshape kernels, and slices of leading rows, run as views: no launch, no
arena space, and the viewed value stays alive as long as its views are used."""

import numpy as np
import pytest
import torch

import kiln
from kiln.compile_prepare import view_aliases

T = lambda *d: "!kiln.tensor<[" + ", ".join(f'"{x}"' if isinstance(x, str) else str(x) for x in d) + "], f32>"  # noqa: E731

# %r views %a, and is used after three more steps whose buffers would take
# %a's place if %a died at the reshape.
TEXT = f'''
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 64 : i64}} : () -> ()
func.func @main(%x: {T("B", 16)} {{kiln.name = "x"}}) -> {T("B", 4, 4)} {{
  %a = "kiln.relu"(%x) : ({T("B", 16)}) -> {T("B", 16)}
  %r = "kiln.reshape"(%a) {{shape = ["B", 4, 4]}} : ({T("B", 16)}) -> {T("B", 4, 4)}
  %b = "kiln.tanh"(%x) : ({T("B", 16)}) -> {T("B", 16)}
  %c = "kiln.softmax"(%b) {{axis = -1 : i64}} : ({T("B", 16)}) -> {T("B", 16)}
  %d = "kiln.reshape"(%c) {{shape = ["B", 4, 4]}} : ({T("B", 16)}) -> {T("B", 4, 4)}
  %e = "kiln.reduce_max"(%d) {{axes = array<i64: 2>, keepdims = true}} : ({T("B", 4, 4)}) -> {T("B", 4, 1)}
  %f = "kiln.sub"(%d, %e) : ({T("B", 4, 4)}, {T("B", 4, 1)}) -> {T("B", 4, 4)}
  %g = "kiln.add"(%f, %r) : ({T("B", 4, 4)}, {T("B", 4, 4)}) -> {T("B", 4, 4)}
  return %g : {T("B", 4, 4)}
}}
'''


def reference(x):
    r = torch.relu(x).reshape(-1, 4, 4)
    d = torch.softmax(torch.tanh(x), -1).reshape(-1, 4, 4)
    return d - d.amax(2, keepdim=True) + r


@pytest.mark.parametrize("fused", [True, False], ids=["optimized", "unoptimized"])
def test_views_keep_their_source_alive(fused, monkeypatch):
    model = kiln.compile(TEXT, optimize=fused)
    sched = model.runtime.executor.schedule
    aliases = view_aliases(sched)
    assert all(s.view_offset is None for s in sched.steps)  # reshapes only: no views from an offset
    reshapes = [s for s in sched.steps if list(s.ops) == ["kiln.reshape"]]
    assert len(aliases) == len(reshapes) >= 1
    for b in (1, 7, 64):
        x = torch.randn(b, 16, generator=torch.Generator().manual_seed(b))
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-6)
    r = model.report()
    assert r["kernels_launched_per_call"] == r["kernels_in_schedule"] - len(reshapes)

    monkeypatch.setenv("KILN_RESHAPE_VIEWS", "0")  # the same model with copying reshapes
    copying = kiln.compile(TEXT, optimize=fused)
    x = torch.randn(5, 16)
    np.testing.assert_array_equal(model(x).numpy(), copying(x).numpy())
    assert copying.report()["kernels_launched_per_call"] == r["kernels_in_schedule"]


def test_view_of_a_model_input_is_made_per_call():
    text = f'''
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 64 : i64}} : () -> ()
func.func @main(%x: {T("B", 16)} {{kiln.name = "x"}}) -> {T("B", 4, 4)} {{
  %r = "kiln.reshape"(%x) {{shape = ["B", 4, 4]}} : ({T("B", 16)}) -> {T("B", 4, 4)}
  %y = "kiln.softmax"(%r) {{axis = -1 : i64}} : ({T("B", 4, 4)}) -> {T("B", 4, 4)}
  return %y : {T("B", 4, 4)}
}}
'''
    model = kiln.compile(text, optimize=False)
    assert view_aliases(model.runtime.executor.schedule)
    for b in (1, 3, 3, 64):  # a shape seen before reuses the launch plan with new input pointers
        x = torch.randn(b, 16)
        torch.testing.assert_close(model(x), torch.softmax(x.reshape(-1, 4, 4), -1))


SLICES = f'''
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 64 : i64}} : () -> ()
func.func @main(%x: {T("B", 3, 8)} {{kiln.name = "x"}}, %s: {T(3, "B", 8)} {{kiln.name = "s"}}) -> ({T("B", 8)}, {T("B", 8)}, {T("B", 3, 4)}, {T(2, "B", 8)}) {{
  %t = "kiln.transpose"(%x) {{perm = array<i64: 1, 0, 2>}} : ({T("B", 3, 8)}) -> {T(3, "B", 8)}
  %k = "kiln.slice"(%t) {{starts = array<i64: 1>, ends = array<i64: 2>, axes = array<i64: 0>}} : ({T(3, "B", 8)}) -> {T(1, "B", 8)}
  %kr = "kiln.reshape"(%k) {{shape = ["B", 8]}} : ({T(1, "B", 8)}) -> {T("B", 8)}
  %y = "kiln.tanh"(%kr) : ({T("B", 8)}) -> {T("B", 8)}
  %v = "kiln.slice"(%s) {{starts = array<i64: 2>, ends = array<i64: 3>, axes = array<i64: 0>}} : ({T(3, "B", 8)}) -> {T(1, "B", 8)}
  %vr = "kiln.reshape"(%v) {{shape = ["B", 8]}} : ({T(1, "B", 8)}) -> {T("B", 8)}
  %z = "kiln.exp"(%vr) : ({T("B", 8)}) -> {T("B", 8)}
  %a = "kiln.slice"(%x) {{starts = array<i64: 2>, ends = array<i64: 6>, axes = array<i64: 2>}} : ({T("B", 3, 8)}) -> {T("B", 3, 4)}
  %w0 = "kiln.neg"(%a) : ({T("B", 3, 4)}) -> {T("B", 3, 4)}
  %w1 = "kiln.exp"(%a) : ({T("B", 3, 4)}) -> {T("B", 3, 4)}
  %w = "kiln.add"(%w0, %w1) : ({T("B", 3, 4)}, {T("B", 3, 4)}) -> {T("B", 3, 4)}
  %p = "kiln.slice"(%t) {{starts = array<i64: 1>, ends = array<i64: 3>, axes = array<i64: 0>}} : ({T(3, "B", 8)}) -> {T(2, "B", 8)}
  %q0 = "kiln.relu"(%p) : ({T(2, "B", 8)}) -> {T(2, "B", 8)}
  %q1 = "kiln.tanh"(%p) : ({T(2, "B", 8)}) -> {T(2, "B", 8)}
  %q = "kiln.mul"(%q0, %q1) : ({T(2, "B", 8)}, {T(2, "B", 8)}) -> {T(2, "B", 8)}
  return %y, %z, %w, %q : {T("B", 8)}, {T("B", 8)}, {T("B", 3, 4)}, {T(2, "B", 8)}
}}
'''


def test_slices_of_leading_rows_are_views_from_an_offset(monkeypatch):
    """Rows 1 of an intermediate [3, B, 8] and 2 of an input (made per call),
    and rows 1..2 (extent 2), are views; a slice of the last dim under a
    leading B is not contiguous and stays a kernel."""
    model = kiln.compile(SLICES, optimize=False)
    monkeypatch.setenv("KILN_RESHAPE_VIEWS", "0")
    copying = kiln.compile(SLICES, optimize=False)
    for b in (1, 7, 64, 7):
        x = torch.randn(b, 3, 8, generator=torch.Generator().manual_seed(b))
        s = torch.randn(3, b, 8, generator=torch.Generator().manual_seed(b + 1))
        t = x.transpose(0, 1)
        a, p = x[:, :, 2:6], t[1:3]
        want = (torch.tanh(t[1]), torch.exp(s[2]), -a + torch.exp(a), torch.relu(p) * torch.tanh(p))
        got = model(x, s)
        for g, w, c in zip(got, want, copying(x, s)):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(g.numpy(), c.numpy())
    r, rc = model.report(), copying.report()
    # Two slices are kernels of their own (the others are fused into their
    # consumers by kiln-partition): both run as views.
    assert sum(k["ops"] == ["kiln.slice"] for k in r["kernels"]) == 2
    assert rc["kernels_launched_per_call"] - r["kernels_launched_per_call"] == 2


@pytest.mark.parametrize("src, dst, attrs, want", [
    ((3, "B", 8), (1, "B", 8), "starts = array<i64: 1>, ends = array<i64: 2>, axes = array<i64: 0>", "8*B"),
    ((3, "B", 8), (2, "B", 8), "starts = array<i64: 1>, ends = array<i64: 3>, axes = array<i64: 0>", "8*B"),
    ((3, "B", 8), (3, "B", 8), "starts = array<i64: 0>, ends = array<i64: 3>, axes = array<i64: 0>", "0"),
    ((1, 3, "B", 8), (1, 1, "B", 8), "starts = array<i64: 2>, ends = array<i64: 3>, axes = array<i64: 1>", "16*B"),
    (("B", 3, 8), ("B", 3, 4), "starts = array<i64: 2>, ends = array<i64: 6>, axes = array<i64: 2>", None),
    (("B", 3, 8), ("B", 1, 8), "starts = array<i64: 1>, ends = array<i64: 2>, axes = array<i64: 1>", None),
    ((4, "B", 8), (2, "B", 8), "starts = array<i64: 0>, ends = array<i64: 4>, axes = array<i64: 0>, "
                               "steps = array<i64: 2>", None),
    ((3, "B", 8), (1, "B", 8), "starts = array<i64: -1>, ends = array<i64: 3>, axes = array<i64: 0>", None),
])
def test_which_slices_are_contiguous_runs(src, dst, attrs, want):
    """Rows after leading 1s, whole trailing dims, step 1: a view from start x
    the inner extent; anything else (a cut under a leading B, a step, a
    negative start) stays a kernel."""
    from kiln._mlir import ir
    from kiln.compile_prepare import _slice_offset
    from kiln.module import parse_module

    text = f'''
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 64 : i64}} : () -> ()
func.func @k(%x: {T(*src)}) -> {T(*dst)} {{
  %0 = "kiln.slice"(%x) {{{attrs}}} : ({T(*src)}) -> {T(*dst)}
  return %0 : {T(*dst)}
}}
'''
    from kiln.context import make_context

    with make_context(), ir.Location.unknown():
        module = parse_module(text, "<test>")
        func = next(op.operation for op in module.body.operations if op.operation.name == "func.func")
        got = _slice_offset(func, src, dst)
    assert (got.replace(" ", "") if got else got) == want
