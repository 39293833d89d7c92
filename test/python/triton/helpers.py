"""Shared helpers of the Triton backend tests: build kiln IR, compile, compare."""

from __future__ import annotations

import torch

from kiln._mlir import ir
from kiln.backends.triton.program import compile_module
from kiln.context import make_context
from kiln.module import parse_module

#: Absolute / relative tolerance per dtype (fp32 accumulation everywhere).
TOLERANCE = {
    "f32": (1e-4, 1e-4),
    "f16": (2e-2, 2e-2),
    "bf16": (8e-2, 5e-2),
}
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def symbols(**ranges) -> str:
    """``kiln.symbol`` declarations: ``symbols(B=(1, 64, 8))``."""
    out = []
    for name, (lo, hi, opt) in ranges.items():
        out.append(
            f'"kiln.symbol"() {{sym_name = "{name}", min = {lo} : i64, max = {hi} : i64, opt = {opt} : i64}} : () -> ()'
        )
    return "\n".join(out)


def compile_text(text: str, **kw):
    """Parse a kiln module and compile its first function for the Triton backend."""
    with make_context(), ir.Location.unknown():
        module = parse_module(text)
        return compile_module(module, **kw)


def check(got, want, dtype: str) -> None:
    """Compare with the dtype's tolerance (in fp32)."""
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol)


def t(s: str) -> str:
    """A kiln tensor type from a compact ``"B,16:f32"`` spelling."""
    dims, dtype = s.split(":")
    parts = [d if d.isdigit() else f'"{d}"' for d in dims.split(",")] if dims else []
    return f"!kiln.tensor<[{', '.join(parts)}], {dtype}>"
