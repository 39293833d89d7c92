"""Every implementation of every kiln op agrees with its numpy reference (issue 40).

An op's semantics live in several places: the numpy evaluator constant
folding uses (``kiln.transforms.fold_constants.EVALUATORS``, the reference
here), the linalg lowering (generated CPU code), the native library kernels
the CPU path chooses for products, convolutions, attention and norms, and
the Triton backend's kernels (run by the interpreter).  Each family's ops
are compiled into one function of independent ops over a batch symbol
``B``, once per implementation, and every result is compared with numpy at
the smallest, a middle and the largest ``B``.  :data:`CASES` must name every
op with a numpy evaluator, so a new op comes with its cross-check.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # the Triton kernels run on the CPU (before triton is imported)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import kiln  # noqa: E402
from kiln.context import make_context  # noqa: E402
from kiln.dialects.kiln import OPS  # noqa: E402
from kiln.module import parse_module  # noqa: E402
from kiln.transforms.fold_constants import EVALUATORS, evaluate  # noqa: E402
from kiln.validate import TOLERANCES  # noqa: E402

B_MAX = 4
B_VALUES = (1, 3, B_MAX)

# (op, operand types, attribute text, result element type, input domain).
# Operand types are the text inside !kiln.tensor<...>; "pos" draws inputs in
# [0.5, 2) (log, sqrt, pow), "int" small integers, "index6" indices of a
# dim of 6 (negative ones too); i1 operands are random booleans.
F = "f32"


def R(rank: int, dtype: str) -> str:  # noqa: N802 (a result type, read like the operand types)
    """A result type of ``rank`` unknown dims (kiln-infer-shapes fills them in)."""
    unknown = ", ".join(['"?"'] * rank)
    return f"[{unknown}], {dtype}"


CASES: dict[str, list[tuple[str, list[str], str, str, str | None]]] = {
    "elementwise": [
        ("kiln.add", ['["B", 6], f32', "[6], f32"], "", R(2, F), None),
        ("kiln.sub", ['["B", 6], f32', '["B", 1], f32'], "", R(2, F), None),
        ("kiln.mul", ['["B", 6], f32', "[6], f32"], "", R(2, F), None),
        ("kiln.div", ['["B", 6], f32', "[6], f32"], "", R(2, F), "pos"),
        ("kiln.pow", ['["B", 6], f32', "[6], f32"], "", R(2, F), "pos"),
        ("kiln.maximum", ['["B", 6], f32', "[6], f32"], "", R(2, F), None),
        ("kiln.minimum", ['["B", 6], f32', "[6], f32"], "", R(2, F), None),
        ("kiln.eq", ['["B", 6], i64', "[6], i64"], "", R(2, "i1"), "int"),
        ("kiln.ne", ['["B", 6], i64', "[6], i64"], "", R(2, "i1"), "int"),
        ("kiln.lt", ['["B", 6], f32', "[6], f32"], "", R(2, "i1"), None),
        ("kiln.le", ['["B", 6], i64', "[6], i64"], "", R(2, "i1"), "int"),
        ("kiln.gt", ['["B", 6], f32', "[6], f32"], "", R(2, "i1"), None),
        ("kiln.ge", ['["B", 6], i64', "[6], i64"], "", R(2, "i1"), "int"),
        ("kiln.abs", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.neg", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.exp", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.log", ['["B", 6], f32'], "", R(2, F), "pos"),
        ("kiln.sqrt", ['["B", 6], f32'], "", R(2, F), "pos"),
        ("kiln.rsqrt", ['["B", 6], f32'], "", R(2, F), "pos"),
        ("kiln.tanh", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.sigmoid", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.relu", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.erf", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.sin", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.cos", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.floor", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.ceil", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.silu", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.gelu", ['["B", 6], f32'], "", R(2, F), None),
        ("kiln.gelu", ['["B", 6], f32'], '{approximate = "tanh"}', R(2, F), None),
        ("kiln.quantize", ['["B", 6], f32', "[6], f32", "[6], i8"], "{axis = 1 : i64}", R(2, "i8"), "quant"),
        ("kiln.quantize", ['["B", 6], f32', "[], f32", "[], ui8"], "", R(2, "ui8"), "quant"),
        ("kiln.dequantize", ['["B", 6], i8', "[6], f32", "[6], i8"], "{axis = 1 : i64}", R(2, F), "quant"),
        ("kiln.cast", ['["B", 6], f32'], "", R(2, "i64"), None),
        ("kiln.cast", ['["B", 6], i64'], "", R(2, F), "int"),
        ("kiln.where", ['["B", 6], i1', '["B", 6], f32', "[6], f32"], "", R(2, F), None),
    ],
    "reductions": [
        ("kiln.reduce_sum", ['["B", 5, 6], f32'], "{axes = array<i64: -1>, keepdims = true}", R(3, F), None),
        ("kiln.reduce_mean", ['["B", 5, 6], f32'], "{axes = array<i64: 1>}", R(2, F), None),
        ("kiln.reduce_max", ['["B", 5, 6], f32'], "{axes = array<i64: 0, 2>}", R(1, F), None),
        ("kiln.reduce_min", ['["B", 5, 6], f32'], "{axes = array<i64: -1>}", R(2, F), None),
        ("kiln.reduce_prod", ['["B", 5, 6], f32'], "{axes = array<i64: -1>}", R(2, F), "pos"),
        ("kiln.argmax", ['["B", 5, 6], f32'], "{axis = -1 : i64}", R(3, "i64"), None),
        ("kiln.argmin", ['["B", 5, 6], f32'], "{axis = 1 : i64, keepdims = false}", R(2, "i64"), None),
        ("kiln.cumsum", ['["B", 5, 6], i64'], "{axis = 1 : i64}", R(3, "i64"), "int"),
        ("kiln.cumsum", ['["B", 5, 6], f32'], "{axis = -1 : i64}", R(3, F), None),
        ("kiln.softmax", ['["B", 5, 6], f32'], "{axis = -1 : i64}", R(3, F), None),
    ],
    "nn": [
        ("kiln.matmul", ['["B", 5, 16], f32', "[16, 24], f32"], "", R(3, F), None),
        ("kiln.matmul", ['["B", 5, 16], f32', '["B", 16, 7], f32'], "", R(3, F), None),
        ("kiln.layer_norm", ['["B", 5, 16], f32', "[16], f32", "[16], f32"],
         "{epsilon = 1.0e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>}", R(3, F), None),
        ("kiln.batch_norm", ['["B", 4, 5, 5], f32', "[4], f32", "[4], f32", "[4], f32", "[4], f32"],
         "{epsilon = 1.0e-03 : f64}", R(4, F), "pos"),
        ("kiln.conv2d", ['["B", 4, 9, 9], f32', "[6, 2, 3, 3], f32", "[6], f32"],
         "{strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 2, 1>, dilations = array<i64: 1, 2>, groups = 2 : i64, "
         "operandSegmentSizes = array<i32: 1, 1, 1>}", R(4, F), None),
        ("kiln.conv2d", ['["B", 3, 8, 8], f32', "[5, 3, 1, 1], f32"], "{operandSegmentSizes = array<i32: 1, 1, 0>}",
         R(4, F), None),
        ("kiln.max_pool2d", ['["B", 3, 9, 9], f32'], "{kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, "
         "pads = array<i64: 1, 1, 1, 1>, ceil_mode = true}", R(4, F), None),
        ("kiln.avg_pool2d", ['["B", 3, 9, 9], f32'], "{kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, "
         "pads = array<i64: 1, 1, 1, 1>, ceil_mode = true, count_include_pad = true}", R(4, F), None),
        ("kiln.avg_pool2d", ['["B", 3, 8, 8], f32'], "{kernel = array<i64: 2, 3>, pads = array<i64: 0, 1, 0, 1>}",
         R(4, F), None),
        ("kiln.attention", ['["B", 2, 7, 8], f32', '["B", 2, 7, 8], f32', '["B", 2, 7, 8], f32'],
         "{causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>}", R(4, F), None),
        ("kiln.attention", ['["B", 2, 3, 8], f32', '["B", 2, 9, 8], f32', '["B", 2, 9, 8], f32'],
         "{causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>}", R(4, F), None),  # torch's top-left causal
        ("kiln.attention", ['["B", 4, 5, 8], f32', '["B", 2, 5, 8], f32', '["B", 2, 5, 8], f32'],
         "{causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>}", R(4, F), None),  # grouped-query
        ("kiln.attention", ['["B", 2, 5, 8], f32', '["B", 2, 5, 8], f32', '["B", 2, 5, 8], f32', '["B", 1, 5, 5], i1'],
         "{operandSegmentSizes = array<i32: 1, 1, 1, 1>}", R(4, F), None),  # boolean mask, some rows all masked
        ("kiln.matmul_w8", ['["B", 5, 64], f32', "[24, 64], i8", "[24, 2], f32"], "{group_size = 32 : i64}", R(3, F),
         None),  # 5B rows: the widened-block path
        ("kiln.matmul_w8", ['["B", 37], f32', "[9, 37], i8", "[9, 5], f32"], "{group_size = 8 : i64}", R(2, F),
         None),  # B <= 4 rows (the GEMV), groups not a vector, a short last group
        ("kiln.matmul_integer", ['["B", 5, 64], ui8', "[64, 70], i8", "[], ui8", "[], i8"], "", R(3, "i32"),
         None),  # ui8 x i8 (ONNX Runtime's dynamic quantization), N past a panel
        ("kiln.matmul_integer", ['["B", 37], i8', "[37, 9], ui8", "[], i8", "[], ui8"], "", R(2, "i32"),
         None),  # i8 x ui8, K not a multiple of 4
        ("kiln.matmul_integer", ['["B", 2, 300], ui8', "[300, 8], i8", "[], ui8", "[], i8"], "", R(3, "i32"),
         None),  # K past one exact f32 chunk (the Triton decomposition's 256)
        ("kiln.rms_norm", ['["B", 5, 16], f32', "[16], f32"],
         "{epsilon = 1.0e-06 : f64, operandSegmentSizes = array<i32: 1, 1>}", R(3, F), None),
        ("kiln.attention", ['["B", 2, 7, 8], f32', '["B", 2, 9, 8], f32', '["B", 2, 9, 8], f32', '["B", 1, 7, 9], f32'],
         "{scale = 0.25 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1>}", R(4, F), None),
    ],
    "data": [
        ("kiln.transpose", ['["B", 5, 6], f32'], "{perm = array<i64: 2, 0, 1>}", R(3, F), None),
        ("kiln.reshape", ['["B", 5, 6], f32'], '{shape = ["B*5", 6]}', R(2, F), None),
        ("kiln.expand", ['["B", 1, 6], f32'], '{shape = ["B", 4, 6]}', R(3, F), None),
        ("kiln.concat", ['["B", 5], f32', '["B", 3], f32'], "{axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>}", R(2, F), None),
        ("kiln.slice", ['["B", 9], f32'], "{axes = array<i64: 1>, starts = array<i64: 1>, ends = array<i64: 8>, "
         "steps = array<i64: 2>}", R(2, F), None),
        ("kiln.pad", ['["B", 5], f32'], "{pads = array<i64: 0, 1, 0, 2>}", R(2, F), None),
        ("kiln.gather", ['["B", 6], f32', "[4], i64"], "{axis = 1 : i64}", R(2, F), "index6"),
        ("kiln.update_slice", ['["B", 6], f32', '["B", 2], f32'], '{axis = 1 : i64, offset = [3]}', R(2, F), None),
    ],
}

#: Ops with a numpy evaluator that need no case of their own: built by
#: other ops' rewrites only, or covered through another op.
EXEMPT = {"kiln.constant": "the operand of every folding, checked by kiln-fold-constants' tests"}


def _domain(rng, shape, dtype, domain):
    if dtype == "i1":
        return rng.random(shape) < 0.5
    if dtype in ("i8", "ui8"):
        lo, hi = (-128, 128) if dtype == "i8" else (0, 256)
        return rng.integers(lo, hi, size=shape).astype(np.int8 if dtype == "i8" else np.uint8)
    if domain == "quant" and shape != (6,) and shape:  # x: values past the int8 range too (saturation)
        return (rng.standard_normal(shape) * 40).astype(np.float32)
    if domain == "quant":  # scales
        return rng.uniform(0.05, 0.5, size=shape).astype(np.float32)
    if dtype == "i64" or domain == "int":
        if domain == "index6":
            return rng.integers(-6, 6, size=shape, dtype=np.int64)
        return rng.integers(-3, 4, size=shape, dtype=np.int64)
    if domain == "pos":
        return rng.uniform(0.5, 2.0, size=shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def _module_text(cases) -> tuple[str, list[tuple[list[str], str | None]]]:
    """One function of independent ops: each case's operands are arguments of their own."""
    args, body, results, operands = [], [], [], []
    for i, (op, types, attrs, rtype, domain) in enumerate(cases):
        names = []
        for j, t in enumerate(types):
            names.append(f"%a{i}_{j}")
            args.append(f"%a{i}_{j}: !kiln.tensor<{t}>")
        rt = f"!kiln.tensor<{rtype}>"
        in_types = ", ".join(f"!kiln.tensor<{t}>" for t in types)
        body.append(f'  %r{i} = "{op}"({", ".join(names)}) {attrs} : ({in_types}) -> {rt}')
        results.append((f"%r{i}", rt))
        operands.append((types, domain))
    text = (f'"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = {B_MAX} : i64}} : () -> ()\n'
            + f"func.func @ops({', '.join(args)}) -> ({', '.join(t for _, t in results)}) {{\n"
            + "\n".join(body) + f"\n  return {', '.join(n for n, _ in results)} : "
            + f"{', '.join(t for _, t in results)}\n}}\n")
    return text, operands


def _inputs(operands, b: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for types, domain in operands:
        for t in types:
            dims_text, dtype = t.rsplit(",", 1)
            inner = dims_text.strip()[1:-1]
            dims = [b if d.strip() == '"B"' else int(d) for d in inner.split(",")] if inner else []
            out.append(_domain(rng, tuple(dims), dtype.strip(), domain))
    return out


def _compare(got, want, what):
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        tol = TOLERANCES["f32"]
        np.testing.assert_allclose(got, want, rtol=tol.rtol, atol=tol.atol, err_msg=what)


def _references(text, args):
    """numpy's value of each op, from the evaluator constant folding uses."""
    with make_context():
        module = parse_module(text, "<ops>")
        func = next(op for op in module.body.operations if op.operation.name == "func.func")
        block = func.regions[0].blocks[0]
        values = {str(a.get_name()): x for a, x in zip(block.arguments, args)}
        refs = []
        for op in block.operations:
            if op.operation.name == "func.return":
                continue
            ins = [values[o.get_name()] for o in op.operands]
            refs.append(_evaluate(op, ins))
    return refs


def _evaluate(op, ins):
    fn = EVALUATORS[op.operation.name]
    with np.errstate(all="ignore"):
        out = np.asarray(fn(ins, op.opview.decoded_attrs(), op)) if op.operation.name not in (
            "kiln.reshape", "kiln.expand") else None
    if out is None:  # shapes from attributes: evaluate() takes them given
        from kiln.dialects.dims import dim
        from kiln.dialects.dims import evaluate as eval_dim

        b = ins[0].shape[0]
        shape = tuple(int(eval_dim(dim(s), {"B": b})) for s in op.opview.attr("shape"))
        return evaluate(op, ins, shape)
    return evaluate(op, ins, out.shape)


IMPLEMENTATIONS = {
    "cpu": {"fallback": False},  # the default CPU path: library and native kernels where it picks them
    "cpu-generated": {"fallback": False, "cpu_library": False},  # kiln -> linalg -> LLVM for every op
    "triton": {"fallback": False, "device": "cuda"},  # the Triton backend's kernels (and its torch kernels for data movement)
}


@pytest.fixture(scope="module", params=sorted(CASES))
def family(request):
    text, operands = _module_text(CASES[request.param])
    return request.param, text, operands


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_cpu_implementations_agree_with_numpy(family, impl, tmp_path):
    name, text, operands = family
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    model = kiln.compile(str(path), **IMPLEMENTATIONS[impl])
    for seed, b in enumerate(B_VALUES):
        args = _inputs(operands, b, seed)
        got = model(*args)
        got = got if isinstance(got, (list, tuple)) else [got]
        for (op, *_), g, want in zip(CASES[name], got, _references(text, args), strict=True):
            g = g.cpu().numpy() if hasattr(g, "cpu") else np.asarray(g)
            _compare(g, want, f"{op} ({impl}, B={b})")


def test_every_op_with_a_numpy_evaluator_has_a_case():
    covered = {op for cases in CASES.values() for op, *_ in cases}
    missing = sorted(set(EVALUATORS) & set(OPS) - covered - set(EXEMPT))
    assert not missing, f"kiln ops with a numpy evaluator and no cross-check case here: {missing}"
