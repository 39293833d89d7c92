"""Every generated kernel kind vs PyTorch, in the Triton interpreter.

Shapes use several values per symbol, including ones that are not
multiples of the block sizes (block sizes are >= 16), so masked tails run.
"""

import pytest
import torch
from helpers import TORCH, check, compile_text, symbols, t

F = torch.nn.functional


def fn(args: dict, body: str, result: str, syms=None) -> str:
    """A kiln module with one function ``@f(args) -> result``."""
    decl = symbols(**(syms or {"B": (1, 64, 8)}))
    sig = ", ".join(f"%{n}: {t(s)}" for n, s in args.items())
    return f"{decl}\nfunc.func @f({sig}) -> {t(result)} {{\n{body}\n}}"


def op(res, name, operands, types, out, attrs=""):
    ins = ", ".join(f"%{o}" for o in operands)
    tys = ", ".join(t(x) for x in types)
    a = f" {{{attrs}}}" if attrs else ""
    return f'  %{res} = "kiln.{name}"({ins}){a} : ({tys}) -> {t(out)}'


def ret(v, ty):
    return f"  return %{v} : {t(ty)}"


def gen(*shape, dtype="f32"):
    return torch.randn(*shape, generator=GEN).to(TORCH.get(dtype, torch.float32))


GEN = torch.Generator().manual_seed(7)


def test_pointwise_chain_broadcast_views():
    """add with a broadcast row, a transposed operand, then every unary op kind in one kernel."""
    x, xt, b = "B,20:f32", "20,B:f32", "20:f32"
    unary = ["neg", "abs", "exp", "sigmoid", "tanh", "silu", "relu", "erf", "sqrt", "rsqrt", "log"]
    body = [op("t", "transpose", ["y"], [xt], x, "perm = array<i64: 1, 0>"), op("v0", "add", ["x", "t"], [x, x], x)]
    body.append(op("v1", "mul", ["v0", "b"], [x, b], x))
    prev = "v1"
    for i, u in enumerate(unary[:8]):
        body.append(op(f"u{i}", u, [prev], [x], x))
        prev = f"u{i}"
    body.append(op("a", "abs", [prev], [x], x))
    body.append(op("s", "sqrt", ["a"], [x], x))
    body.append(op("e", "add", ["s"], [x], x).replace('"kiln.add"(%s)', '"kiln.add"(%s, %b)').replace(
        f"({t(x)})", f"({t(x)}, {t(b)})"))
    body.append(op("r", "rsqrt", ["e"], [x], x))
    body.append(op("l", "log", ["r"], [x], x))
    body.append(op("z", "sub", ["l", "b"], [x, b], x))
    body.append(ret("z", x))
    prog = compile_text(fn({"x": x, "y": xt, "b": b}, "\n".join(body), x))
    assert [k.kind for k in prog.kernels] == ["pointwise"]
    for n in (1, 7, 300):
        xv, yv, bv = gen(n, 20), gen(20, n), gen(20).abs() + 0.5
        h = (xv + yv.t()) * bv
        for f_ in (torch.neg, torch.abs, torch.exp, torch.sigmoid, torch.tanh, F.silu, torch.relu, torch.erf):
            h = f_(h)
        e = h.abs().sqrt() + bv
        check(prog(xv, yv, bv), e.rsqrt().log() - bv, "f32")


def test_pointwise_where_compare_cast_pow_batchnorm():
    x, c = "N,3,H,5:f32", "3:f32"
    body = "\n".join([
        op("bn", "batch_norm", ["x", "s", "bb", "m", "v"], [x, c, c, c, c], x, "epsilon = 1.0e-05 : f64"),
        op("g", "gt", ["bn", "x"], [x, x], "N,3,H,5:i1"),
        op("p", "pow", ["bn", "two"], [x, "1:f32"], x),
        op("w", "where", ["g", "p", "x"], ["N,3,H,5:i1", x, x], x),
        op("h", "cast", ["w"], [x], "N,3,H,5:f16"),
        op("o", "gelu", ["h"], ["N,3,H,5:f16"], "N,3,H,5:f16", 'approximate = "tanh"'),
        ret("o", "N,3,H,5:f16"),
    ])
    args = {"x": x, "s": c, "bb": c, "m": c, "v": c, "two": "1:f32"}
    prog = compile_text(fn(args, body, "N,3,H,5:f16", {"N": (1, 8, 2), "H": (1, 64, 4)}))
    assert [k.kind for k in prog.kernels] == ["pointwise"]
    for n, h in ((1, 1), (2, 17), (3, 6)):
        xv, s, bb, m = gen(n, 3, h, 5), gen(3), gen(3), gen(3)
        v, two = gen(3).abs() + 0.1, torch.tensor([2.0])
        bn = F.batch_norm(xv, m, v, s, bb, eps=1e-5)
        want = F.gelu(torch.where(bn > xv, bn**2, xv).half().float(), approximate="tanh")
        check(prog(xv, s, bb, m, v, two), want, "f16")


@pytest.mark.parametrize("axes,keep,kind", [("1", "true", "sum"), ("0, 2", "false", "mean"), ("-1", "false", "max")])
def test_reductions(axes, keep, kind):
    x = "B,L,12:f32"
    red = [int(a) % 3 for a in axes.split(",")]
    dims = ["B", "L", "12"]
    out = ",".join(("1" if i in red else d) for i, d in enumerate(dims) if keep == "true" or i not in red)
    body = op("r", f"reduce_{kind}", ["x"], [x], f"{out}:f32", f"axes = array<i64: {axes}>, keepdims = {keep}")
    prog = compile_text(fn({"x": x}, body + "\n" + ret("r", f"{out}:f32"), f"{out}:f32",
                           {"B": (1, 8, 2), "L": (1, 512, 16)}))
    for b, n in ((1, 1), (3, 21), (2, 300)):
        xv = gen(b, n, 12)
        if kind == "max":
            want = xv.amax(dim=red, keepdim=keep == "true")
        else:
            want = getattr(xv, kind)(dim=red, keepdim=keep == "true")
        check(prog(xv), want, "f32")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_softmax_layer_norm_with_epilogue(dtype):
    """softmax over a middle axis; layer_norm (weight and bias) + residual add + relu fused."""
    x, w = f"B,L,24:{dtype}", f"24:{dtype}"
    body = "\n".join([
        op("s", "softmax", ["x"], [x], x, "axis = 1 : i64"),
        op("n", "layer_norm", ["s", "g", "b"], [x, w, w], x,
           "axis = -1 : i64, epsilon = 1.0e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>"),
        op("a", "add", ["n", "x"], [x, x], x),
        op("r", "relu", ["a"], [x], x),
        ret("r", x),
    ])
    prog = compile_text(fn({"x": x, "g": w, "b": w}, body, x, {"B": (1, 8, 2), "L": (1, 512, 16)}))
    assert [k.kind for k in prog.kernels] == ["softmax", "layer_norm"]
    for b, n in ((1, 1), (2, 19), (1, 70)):
        xv, g, bb = gen(b, n, 24, dtype=dtype), gen(24, dtype=dtype), gen(24, dtype=dtype)
        s = torch.softmax(xv.float(), 1).to(xv.dtype).float()
        want = torch.relu(F.layer_norm(s, (24,), g.float(), bb.float(), 1e-5) + xv.float())
        check(prog(xv, g, bb), want, dtype)


def test_layer_norm_without_affine_two_axes():
    x = "B,5,L:f32"
    body = op("n", "layer_norm", ["x"], [x], x, "axis = 1 : i64, operandSegmentSizes = array<i32: 1, 0, 0>")
    prog = compile_text(fn({"x": x}, body + "\n" + ret("n", x), x, {"B": (1, 8, 2), "L": (1, 512, 16)}))
    for b, n in ((1, 1), (2, 33), (3, 300)):
        xv = gen(b, 5, n) * 3 + 1
        check(prog(xv), F.layer_norm(xv, (5, n)), "f32")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_matmul_bias_gelu_epilogue(dtype):
    x, w, b, y = f"B,40:{dtype}", f"40,24:{dtype}", f"24:{dtype}", f"B,24:{dtype}"
    body = "\n".join([
        op("m", "matmul", ["x", "w"], [x, w], y), op("a", "add", ["m", "b"], [y, b], y),
        op("g", "gelu", ["a"], [y], y), ret("g", y),
    ])
    prog = compile_text(fn({"x": x, "w": w, "b": b}, body, y))
    assert [(k.kind, len(k.spec.nodes)) for k in prog.kernels] == [("matmul", 3)]
    for n in (1, 17, 64):
        xv, wv, bv = gen(n, 40, dtype=dtype), gen(40, 24, dtype=dtype), gen(24, dtype=dtype)
        want = F.gelu(xv.float() @ wv.float() + bv.float())
        check(prog(xv, wv, bv), want, dtype)


def test_batched_matmul_broadcast_and_vectors():
    """[B, H, L, 16] x [16, L2] with broadcast batch; [B, L, 16] x transposed [.., 16]; matrix x vector."""
    a, bm, o = "B,3,L,16:f32", "16,20:f32", "B,3,L,20:f32"
    body = "\n".join([
        op("m", "matmul", ["a", "b"], [a, bm], o),
        op("q", "matmul", ["m", "c"], [o, "B,3,20,L:f32"], "B,3,L,L:f32"),
        op("v", "matmul", ["q", "vec"], ["B,3,L,L:f32", "L:f32"], "B,3,L:f32"),
        ret("v", "B,3,L:f32"),
    ])
    prog = compile_text(fn({"a": a, "b": bm, "c": "B,3,20,L:f32", "vec": "L:f32"}, body, "B,3,L:f32",
                           {"B": (1, 4, 2), "L": (1, 64, 8)}))
    assert [k.kind for k in prog.kernels] == ["matmul"] * 3
    for bb, n in ((1, 1), (2, 5), (1, 33)):
        av, bv, cv, vv = gen(bb, 3, n, 16), gen(16, 20), gen(bb, 3, 20, n), gen(n)
        check(prog(av, bv, cv, vv), ((av @ bv) @ cv) @ vv, "f32")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_conv2d_implicit_gemm_bias_relu(dtype):
    """3x3 pad 1 stride 1 + relu; 3x3 stride 2 grouped, no padding; 1x1 with bias."""
    x = f"N,4,H,W:{dtype}"
    body = "\n".join([
        op("c", "conv2d", ["x", "w", "b"], [x, f"8,4,3,3:{dtype}", f"8:{dtype}"], f"N,8,H,W:{dtype}",
           "pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>"),
        op("r", "relu", ["c"], [f"N,8,H,W:{dtype}"], f"N,8,H,W:{dtype}"),
        op("g", "conv2d", ["r", "w2"], [f"N,8,H,W:{dtype}", f"6,4,3,3:{dtype}"], f"N,6,(H-3)/2+1,(W-3)/2+1:{dtype}",
           "strides = array<i64: 2, 2>, groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0>"),
        ret("g", f"N,6,(H-3)/2+1,(W-3)/2+1:{dtype}"),
    ])
    args = {"x": x, "w": f"8,4,3,3:{dtype}", "b": f"8:{dtype}", "w2": f"6,4,3,3:{dtype}"}
    prog = compile_text(fn(args, body, f"N,6,(H-3)/2+1,(W-3)/2+1:{dtype}",
                           {"N": (1, 4, 1), "H": (3, 64, 8), "W": (3, 64, 8)}))
    assert [(k.kind, len(k.spec.nodes)) for k in prog.kernels] == [("conv2d", 2), ("conv2d", 1)]
    for n, h, w in ((1, 3, 3), (2, 9, 6), (1, 17, 12)):
        xv, wv, bv, w2 = gen(n, 4, h, w, dtype=dtype), gen(8, 4, 3, 3, dtype=dtype), gen(8, dtype=dtype), \
            gen(6, 4, 3, 3, dtype=dtype)
        r = torch.relu(F.conv2d(xv.float(), wv.float(), bv.float(), padding=1))
        want = F.conv2d(r.to(xv.dtype).float(), w2.float(), stride=2, groups=2)
        check(prog(xv, wv, bv, w2), want, dtype)


def test_pooling():
    x = "N,3,H,H:f32"
    body = "\n".join([
        op("m", "max_pool2d", ["x"], [x], "N,3,(H-1)/2+1,(H-1)/2+1:f32",
           "kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>"),
        op("a", "avg_pool2d", ["m"], ["N,3,(H-1)/2+1,(H-1)/2+1:f32"], "N,3,(H-1)/2+1,(H-1)/2+1:f32",
           "kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>"),
        ret("a", "N,3,(H-1)/2+1,(H-1)/2+1:f32"),
    ])
    prog = compile_text(fn({"x": x}, body, "N,3,(H-1)/2+1,(H-1)/2+1:f32", {"N": (1, 4, 1), "H": (2, 64, 8)}))
    for n, h in ((1, 2), (2, 9), (1, 16)):
        xv = gen(n, 3, h, h)
        m = F.max_pool2d(xv, 3, 2, 1)
        check(prog(xv), F.avg_pool2d(m, 3, 1, 1, count_include_pad=False), "f32")


def test_torch_kernels_for_data_movement():
    """concat and gather have no generated kernel: they run in PyTorch, counted as fallbacks."""
    x = "B,4:f32"
    body = "\n".join([
        op("c", "concat", ["x", "x"], [x, x], "B,8:f32", "axis = 1 : i64, operandSegmentSizes = array<i32: "
           + ", ".join(["1", "1"] + ["0"] * 14) + ">"),
        op("e", "exp", ["c"], ["B,8:f32"], "B,8:f32"),
        ret("e", "B,8:f32"),
    ])
    prog = compile_text(fn({"x": x}, body, "B,8:f32"))
    assert [k.kind for k in prog.kernels] == ["torch", "pointwise"]
    assert getattr(prog.kernels[0], "is_fallback", False)
    xv = gen(3, 4)
    check(prog(xv), torch.cat([xv, xv], 1).exp(), "f32")


def test_row_kernels_fuse_an_elementwise_prologue():
    """x*x -> reduce_mean (RMS statistics) and x*s + m -> softmax: one kernel each, the prologue
    evaluated while loading (the intermediate never stored)."""
    x, r = "B,L:f32", "B,1:f32"
    body = "\n".join([
        op("sq", "mul", ["x", "x"], [x, x], x),
        op("ms", "reduce_mean", ["sq"], [x], r, "axes = array<i64: 1>, keepdims = true"),
        op("sc", "mul", ["x", "s"], [x, "1:f32"], x),
        op("mk", "add", ["sc", "m"], [x, "L:f32"], x),
        op("sm", "softmax", ["mk"], [x], x, "axis = -1 : i64"),
        op("o", "mul", ["sm", "ms"], [x, r], x),
        ret("o", x),
    ])
    prog = compile_text(fn({"x": x, "s": "1:f32", "m": "L:f32"}, body, x, {"B": (1, 8, 2), "L": (1, 512, 16)}))
    assert [(k.kind, k.spec.prologue) for k in prog.kernels] == [("reduce", 1), ("softmax", 2)]
    for b, n in ((1, 1), (3, 20), (2, 300)):
        xv, s, m = gen(b, n), torch.tensor([0.5]), gen(n)
        want = torch.softmax(xv * 0.5 + m, -1) * (xv * xv).mean(1, keepdim=True)
        check(prog(xv, s, m), want, "f32")


def test_kernel_contract_numpy_and_shape_check():
    """Kernels follow kiln's Kernel contract: symbolic infos, numpy or torch buffers, checked shapes."""
    import numpy as np

    from kiln.backends.kernel import Kernel
    from kiln.errors import ShapeError

    x = "B,20:f32"
    prog = compile_text(fn({"x": x}, op("e", "exp", ["x"], [x], x) + "\n" + ret("e", x), x))
    (k,) = prog.kernels
    assert isinstance(k, Kernel) and [str(d) for d in k.inputs[0].dims] == ["B", "20"] and k.outputs[0].dtype == "f32"
    a = np.random.default_rng(0).standard_normal((3, 20)).astype(np.float32)
    out = np.empty_like(a)
    k([a], [out], {"B": 3})
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-5)
    with pytest.raises(ShapeError, match="input #0 has shape"):
        k([a], [out], {"B": 4})
