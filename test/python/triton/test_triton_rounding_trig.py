"""kiln.floor / ceil / sin / cos in a generated pointwise kernel (Triton interpreter) vs PyTorch."""

import torch
from helpers import check, compile_text, symbols, t


def test_pointwise_floor_ceil_sin_cos():
    x = "B,20:f32"

    def op(res, name, operands):
        ins = ", ".join(f"%{o}" for o in operands)
        tys = ", ".join(t(x) for _ in operands)
        return f'  %{res} = "kiln.{name}"({ins}) : ({tys}) -> {t(x)}'

    body = "\n".join([
        op("a", "floor", ["x"]), op("b", "ceil", ["x"]), op("s", "sin", ["a"]), op("c", "cos", ["b"]),
        op("z", "add", ["s", "c"]), f"  return %z : {t(x)}",
    ])
    text = f'{symbols(B=(1, 64, 8))}\nfunc.func @f(%x: {t(x)}) -> {t(x)} {{\n{body}\n}}'
    prog = compile_text(text)
    assert {k.kind for k in prog.kernels} == {"pointwise"}  # no torch fallback kernel
    gen = torch.Generator().manual_seed(5)
    for n in (1, 7, 300):
        xv = torch.randn(n, 20, generator=gen) * 4
        check(prog(xv), torch.sin(torch.floor(xv)) + torch.cos(torch.ceil(xv)), "f32")
