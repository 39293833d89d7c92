"""Reshape kernels run as views: no launch, no arena space, and the viewed
value stays alive as long as its views are used."""

import numpy as np
import pytest
import torch

import kiln
from kiln.runtime.executor import view_aliases

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
