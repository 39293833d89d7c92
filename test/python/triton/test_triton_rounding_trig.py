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


def _fn(args: dict, body: list, result: str, syms: str) -> str:
    sig = ", ".join(f"%{n}: {t(s)}" for n, s in args.items())
    return f"{syms}\nfunc.func @f({sig}) -> {t(result)} {{\n" + "\n".join(body) + "\n}"


def test_reduce_min_kernel():
    """kiln.reduce_min as a generated reduce kernel (a masked tail reads +inf)."""
    x, y = "B,37:f32", "B:f32"
    body = [f'  %r = "kiln.reduce_min"(%x) {{axes = array<i64: 1>}} : ({t(x)}) -> {t(y)}', f"  return %r : {t(y)}"]
    prog = compile_text(_fn({"x": x}, body, y, symbols(B=(1, 64, 8))))
    assert [k.kind for k in prog.kernels] == ["reduce"]
    gen = torch.Generator().manual_seed(6)
    for n in (1, 5, 64):
        xv = torch.randn(n, 37, generator=gen) + 3.0
        check(prog(xv), xv.amin(dim=1), "f32")


def test_torch_kernels_for_index_ops():
    """argmax (last index), reduce_prod, gather_elements (negative indices) and
    scatter_nd (add, duplicate rows) run as torch kernels, matching torch."""
    x, xi, i, u = "B,6:f32", "B,1:i64", "K,1:i64", "K,6:f32"
    body = [
        f'  %a = "kiln.argmax"(%x) {{axis = 1 : i64, select_last_index = true}} : ({t(x)}) -> {t(xi)}',
        f'  %p = "kiln.reduce_prod"(%x) {{axes = array<i64: 1>, keepdims = true}} : ({t(x)}) -> {t("B,1:f32")}',
        f'  %g = "kiln.gather_elements"(%x, %a) {{axis = 1 : i64}} : ({t(x)}, {t(xi)}) -> {t("B,1:f32")}',
        f'  %m = "kiln.mul"(%p, %g) : ({t("B,1:f32")}, {t("B,1:f32")}) -> {t("B,1:f32")}',
        f'  %e = "kiln.expand"(%m) {{shape = ["B", 6]}} : ({t("B,1:f32")}) -> {t(x)}',
        f'  %s = "kiln.scatter_nd"(%e, %i, %u) {{reduction = "add"}} : ({t(x)}, {t(i)}, {t(u)}) -> {t(x)}',
        f"  return %s : {t(x)}",
    ]
    prog = compile_text(_fn({"x": x, "i": i, "u": u}, body, x, symbols(B=(1, 16, 4), K=(1, 16, 4))))
    for n, k in ((1, 1), (4, 3), (9, 6)):
        xv = torch.randint(-2, 3, (n, 6)).float()
        iv = torch.randint(-n, n, (k, 1))
        uv = torch.randn(k, 6)
        a = 5 - torch.flip(xv, [1]).argmax(dim=1, keepdim=True)
        want = (xv.prod(dim=1, keepdim=True) * torch.gather(xv, 1, a)).expand(n, 6).clone()
        for row, upd in zip(iv[:, 0].tolist(), uv):
            want[row % n] += upd
        check(prog(xv, iv, uv), want, "f32")
