"""Every implementation of every kiln op agrees with its numpy reference (issue 40).

:func:`kiln.implementations.table` lays out, per op family, where each op's
semantics are registered: the numpy evaluator (the reference here), the
generated CPU code (kiln -> linalg -> LLVM), the native library kernels the
CPU path chooses (and the epilogue steps their calls apply), the Triton
backend's kernels and the PyTorch kernels its schedules run.  Each family's
ops are compiled into one function of independent ops (or chains: an
epilogue family) over a batch symbol ``B``, once per implementation, with
the cases whose ops that implementation has, and every result is compared
with numpy at the smallest, a middle and the largest ``B``.  The elementwise
and reduction families draw their other dims at random (``KILN_TEST_SEED``,
default 0; the drawn sizes are in the test id).

The table is the contract: every op with an implementation needs a numpy
reference and a case here; every native entry the table lists for an op
must be chosen for one of its cases (read from the compiled IR), so each
is checked against numpy.
"""

from __future__ import annotations

import os
import re

os.environ["TRITON_INTERPRET"] = "1"  # the Triton kernels run on the CPU (before triton is imported)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import kiln  # noqa: E402
from kiln.context import make_context  # noqa: E402
from kiln.implementations import implementations, table  # noqa: E402
from kiln.module import parse_module  # noqa: E402
from kiln.transforms.fold_constants import EVALUATORS, evaluate  # noqa: E402
from kiln.validate import TOLERANCES  # noqa: E402

B_MAX = 4
B_VALUES = (1, 3, B_MAX)
SEED = int(os.environ.get("KILN_TEST_SEED", "0"))

# (op, operand types, attribute text, result element type, input domain).
# Operand types are the text inside !kiln.tensor<...>, or "^k": the result of
# case k of the same family (then not returned itself); "pos" draws inputs in
# [0.5, 2) (log, sqrt, pow), "int" small integers, "index6" indices of a dim
# of 6 (negative ones too), "quant" values past the int8 range and positive
# scales, "w8" activations and int8 weight scales; i1 operands are random booleans.
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
        ("kiln.conv2d", ['["B", 4, 9, 9], f32', "[4, 1, 3, 3], f32", "[4], f32"],
         "{strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 2, 1>, dilations = array<i64: 1, 2>, groups = 4 : i64, "
         "operandSegmentSizes = array<i32: 1, 1, 1>}", R(4, F), None),  # depthwise: native.conv2d_depthwise
        ("kiln.max_pool2d", ['["B", 3, 9, 9], f32'], "{kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, "
         "pads = array<i64: 1, 1, 1, 1>, ceil_mode = true}", R(4, F), None),
        ("kiln.max_pool2d", ['["B", 3, 9, 9], f32'], "{kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, "
         "pads = array<i64: 1, 1, 1, 1>}", R(4, F), None),  # native.max_pool2d (not ceil_mode)
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
        ("kiln.rms_norm", ['["B", 5, 16], f32', "[16], f32"],
         "{epsilon = 1.0e-06 : f64, operandSegmentSizes = array<i32: 1, 1>}", R(3, F), None),
        ("kiln.attention", ['["B", 2, 7, 8], f32', '["B", 2, 9, 8], f32', '["B", 2, 9, 8], f32', '["B", 1, 7, 9], f32'],
         "{scale = 0.25 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1>}", R(4, F), None),
        ("kiln.matmul", ['["B", 5, 16], f16', "[16, 24], f16"], "", R(3, "f16"), None),  # native.matmul_lowp
        ("kiln.conv2d", ['["B", 3, 9, 9], f16', "[5, 3, 3, 3], f16", "[5], f16"],
         "{strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 2, 1>, dilations = array<i64: 1, 2>, "
         "operandSegmentSizes = array<i32: 1, 1, 1>}", R(4, "f16"), None),  # native.conv2d_lowp: an im2col copy
        ("kiln.conv2d", ['["B", 3, 8, 8], f16', "[5, 3, 1, 1], f16"], "{operandSegmentSizes = array<i32: 1, 1, 0>}",
         R(4, "f16"), None),  # native.conv2d_lowp: pointwise, the input read in place
        ("kiln.packed_attention", ['["B", 5, 24], f32'], "{causal = true, heads = 2 : i64}", R(3, F), None),
    ],
    "quant": [
        ("kiln.quantize", ['["B", 6], f32', "[6], f32", "[6], i8"], "{axis = 1 : i64}", R(2, "i8"), "quant"),
        ("kiln.quantize", ['["B", 6], f32', "[], f32", "[], ui8"], "", R(2, "ui8"), "quant"),
        ("kiln.dequantize", ['["B", 6], i8', "[6], f32", "[6], i8"], "{axis = 1 : i64}", R(2, F), "quant"),
        ("kiln.matmul_w8", ['["B", 5, 64], f32', "[24, 64], i8", "[24, 2], f32"], "{group_size = 32 : i64}", R(3, F),
         "w8"),  # 5B rows: the widened-block path
        ("kiln.matmul_w8", ['["B", 37], f32', "[9, 37], i8", "[9, 5], f32"], "{group_size = 8 : i64}", R(2, F),
         "w8"),  # B <= 4 rows (the GEMV), groups not a vector, a short last group
        ("kiln.matmul_integer", ['["B", 5, 64], ui8', "[64, 70], i8", "[], ui8", "[], i8"], "", R(3, "i32"),
         None),  # ui8 x i8 (ONNX Runtime's dynamic quantization), N past a panel
        ("kiln.matmul_integer", ['["B", 37], i8', "[37, 9], ui8", "[], i8", "[], ui8"], "", R(2, "i32"),
         None),  # i8 x ui8, K not a multiple of 4
        ("kiln.matmul_integer", ['["B", 2, 300], ui8', "[300, 8], i8", "[], ui8", "[], i8"], "", R(3, "i32"),
         None),  # K past one exact f32 chunk (the Triton decomposition's 256)
    ],
    "data": [
        ("kiln.transpose", ['["B", 5, 6], f32'], "{perm = array<i64: 2, 0, 1>}", R(3, F), None),
        ("kiln.transpose", ['["B", 5, 6], f32'], "{perm = array<i64: 1, 0, 2>}", R(3, F), None),  # native.permute
        ("kiln.reshape", ['["B", 5, 6], f32'], '{shape = ["B*5", 6]}', R(2, F), None),
        ("kiln.expand", ['["B", 1, 6], f32'], '{shape = ["B", 4, 6]}', R(3, F), None),
        ("kiln.concat", ['["B", 5], f32', '["B", 3], f32'], "{axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>}", R(2, F), None),
        ("kiln.slice", ['["B", 9], f32'], "{axes = array<i64: 1>, starts = array<i64: 1>, ends = array<i64: 8>, "
         "steps = array<i64: 2>}", R(2, F), None),
        ("kiln.pad", ['["B", 5], f32'], "{pads = array<i64: 0, 1, 0, 2>}", R(2, F), None),
        ("kiln.gather", ['["B", 6], f32', "[4], i64"], "{axis = 1 : i64}", R(2, F), "index6"),
        ("kiln.gather", ['["B", 6], f32', "[2, 3], i64"], "{axis = 1 : i64}", R(3, F), "index6"),
        ("kiln.update_slice", ['["B", 6], f32', '["B", 2], f32'], '{axis = 1 : i64, offset = [3]}', R(2, F), None),
        ("kiln.gather_elements", ['["B", 6], f32', '["B", 4], i64'], "{axis = 1 : i64}", R(2, F), "index6"),
        ("kiln.scatter_nd", ["[6, \"B\"], f32", "[3, 1], i64", '[3, "B"], f32'], '{reduction = "add"}', R(2, F),
         "index6"),  # duplicate rows accumulate
        ("kiln.range", [], '{shape = ["B"], start = 1.5 : f64, step = -2.0 : f64}', R(1, F), None),
    ],
    # A product's and a convolution's epilogue steps, each a chain ("^k": case k's result,
    # which is then not returned) that the native call applies when it is chosen.
    "epilogues": [
        ("kiln.matmul", ['["B", 5, 16], f32', "[16, 24], f32"], "", R(3, F), None),
        ("kiln.add", ["^0", "[24], f32"], "", R(3, F), None),  # bias
        ("kiln.gelu", ["^1"], "", R(3, F), None),
        ("kiln.add", ["^2", '["B", 5, 24], f32'], "", R(3, F), None),  # residual
        ("kiln.matmul", ['["B", 16], f32', "[16, 8], f32"], "", R(2, F), None),
        ("kiln.relu", ["^4"], "", R(2, F), None),
        ("kiln.conv2d", ['["B", 3, 8, 8], f32', "[4, 3, 3, 3], f32"], "{pads = array<i64: 1, 1, 1, 1>, "
         "operandSegmentSizes = array<i32: 1, 1, 0>}", R(4, F), None),
        ("kiln.add", ["^6", '["B", 4, 8, 8], f32'], "", R(4, F), None),  # residual
        ("kiln.relu", ["^7"], "", R(4, F), None),
        ("kiln.reduce_mean", ["^8"], "{axes = array<i64: 2, 3>, keepdims = true}", R(4, F), None),
        ("kiln.conv2d", ['["B", 3, 8, 8], f32', "[4, 3, 1, 1], f32"], "{operandSegmentSizes = array<i32: 1, 1, 0>}",
         R(4, F), None),
        ("kiln.reduce_sum", ["^10"], "{axes = array<i64: 2, 3>}", R(2, F), None),
    ],
}

#: Families whose static dims 5 and 6 are drawn at random (their cases have no other constraint).
RANDOM_DIMS = {"elementwise", "reductions"}
#: The test's own family: chains whose steps the native calls apply (the table's "(epilogue)" entries).
EPILOGUES = "epilogues"
#: Ops of the table with no semantics of their own to check, and why.
EXEMPT = {
    "kiln.constant": "the operand of every folding, checked by kiln-fold-constants' tests",
    "kiln.custom": "a user kernel: its registration's tests (test/python/extend) check it against its reference",
    "kiln.fallback": "runs the PyTorch op it names",
    "kiln.symbol": "declares a symbol; computes nothing",
    "kiln.fused": "a group of other ops",
    "kiln.yield": "the terminator of kiln.fused",
}


def _sizes(family: str) -> dict[str, int]:
    """The drawn sizes of dims 5 and 6 in ``family`` (identity where it draws none)."""
    if family not in RANDOM_DIMS:
        return {"5": 5, "6": 6}
    rng = np.random.default_rng([SEED, sorted(CASES).index(family)])
    return {"5": int(rng.integers(1, 10)), "6": int(rng.integers(1, 14))}


def _resized(t: str, sizes: dict[str, int]) -> str:
    return re.sub(r"\b[56]\b", lambda m: str(sizes[m.group(0)]), t)


def _family_cases(family: str, impl: str | None = None):
    """``[(index, op, types, attrs, result type, domain)]`` of ``family`` that
    ``impl`` runs (all for None): a step after one it cannot run is left out too."""
    sizes = _sizes(family)
    out, dropped = [], set()
    for i, (op, types, attrs, rtype, domain) in enumerate(CASES[family]):
        refs = {int(t[1:]) for t in types if t.startswith("^")}
        if (impl is not None and not _runs(op, impl)) or refs & dropped:
            dropped.add(i)
            continue
        out.append((i, op, [t if t.startswith("^") else _resized(t, sizes) for t in types], attrs, rtype, domain))
    return out


def _runs(op: str, impl: str) -> bool:
    """Whether implementation ``impl`` (a key of IMPLEMENTATIONS) runs ``op`` itself."""
    row = implementations(op)
    if impl == "cpu":
        return bool(row.generated or row.native)
    if impl == "cpu-generated":
        return bool(row.generated)
    return bool(row.triton or row.torch or row.decompose)  # triton: a kernel, a torch kernel or primitives


def _module_text(cases) -> tuple[str, list[tuple[list[str], str | None]], list[int]]:
    """One function of the cases: each case's operands are arguments of their own (or
    an earlier case's result); returns the text, the argument types with their domains,
    and the indices of the returned cases."""
    args, body, operands = [], [], []
    used = {int(t[1:]) for _, _, types, *_ in cases for t in types if t.startswith("^")}
    rtypes = {}
    for i, op, types, attrs, rtype, domain in cases:
        names, in_types, mine = [], [], []
        for j, t in enumerate(types):
            if t.startswith("^"):
                names.append(f"%r{t[1:]}")
                in_types.append(rtypes[int(t[1:])])
                continue
            names.append(f"%a{i}_{j}")
            args.append(f"%a{i}_{j}: !kiln.tensor<{t}>")
            in_types.append(f"!kiln.tensor<{t}>")
            mine.append(t)
        rtypes[i] = f"!kiln.tensor<{rtype}>"
        body.append(f'  %r{i} = "{op}"({", ".join(names)}) {attrs} : ({", ".join(in_types)}) -> {rtypes[i]}')
        operands.append((mine, domain))
    returned = [i for i, *_ in cases if i not in used]
    results = ", ".join(rtypes[i] for i in returned)
    text = (f'"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = {B_MAX} : i64}} : () -> ()\n'
            + f"func.func @ops({', '.join(args)}) -> ({results}) {{\n"
            + "\n".join(body) + f"\n  return {', '.join(f'%r{i}' for i in returned)} : {results}\n}}\n")
    return text, operands, returned


_NUMPY = {"f32": np.float32, "f16": np.float16, "i64": np.int64, "i32": np.int32}


def _domain(rng, shape, dtype, domain, first: bool):
    if dtype == "i1":
        return rng.random(shape) < 0.5
    if dtype in ("i8", "ui8"):
        lo, hi = (-128, 128) if dtype == "i8" else (0, 256)
        return rng.integers(lo, hi, size=shape).astype(np.int8 if dtype == "i8" else np.uint8)
    if domain == "quant":  # x: values past the int8 range too (saturation); then positive scales
        x = rng.standard_normal(shape) * 40 if first else rng.uniform(0.05, 0.5, size=shape)
        return x.astype(np.float32)
    if domain == "w8":  # x, then weight scales as absmax / 127 gives them (sums of terms ~ 1, not ~ 100)
        x = rng.standard_normal(shape) if first else rng.uniform(0.005, 0.02, size=shape)
        return x.astype(np.float32)
    if dtype == "i64" or domain == "int":
        if domain == "index6":
            return rng.integers(-6, 6, size=shape, dtype=np.int64)
        return rng.integers(-3, 4, size=shape, dtype=np.int64)
    if domain == "pos":
        return rng.uniform(0.5, 2.0, size=shape).astype(_NUMPY[dtype])
    return rng.standard_normal(shape).astype(_NUMPY[dtype])


def _inputs(operands, b: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for types, domain in operands:
        for j, t in enumerate(types):
            dims_text, dtype = t.rsplit(",", 1)
            inner = dims_text.strip()[1:-1]
            dims = [b if d.strip() == '"B"' else int(d) for d in inner.split(",")] if inner else []
            out.append(_domain(rng, tuple(dims), dtype.strip(), domain, j == 0))
    return out


def _compare(got, want, what):
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        tol = TOLERANCES["f16" if want.dtype == np.float16 else "f32"]
        np.testing.assert_allclose(np.asarray(got, np.float32), want.astype(np.float32), rtol=tol.rtol,
                                   atol=tol.atol, err_msg=what)


def _references(text, args, b: int, indices: list[int]):
    """numpy's value of each op (by case index), from the evaluator constant folding uses."""
    with make_context():
        module = parse_module(text, "<ops>")
        func = next(op for op in module.body.operations if op.operation.name == "func.func")
        block = func.regions[0].blocks[0]
        values = {str(a.get_name()): x for a, x in zip(block.arguments, args)}
        refs = {}
        ops = [op for op in block.operations if op.operation.name != "func.return"]
        for i, op in zip(indices, ops, strict=True):
            ins = [values[o.get_name()] for o in op.operands]
            values[op.results[0].get_name()] = refs[i] = _evaluate(op, ins, b)
    return refs


def _evaluate(op, ins, b: int):
    name = op.operation.name
    if name in ("kiln.reshape", "kiln.expand", "kiln.range"):  # shapes from attributes: evaluate() takes them given
        from kiln.dialects.dims import dim
        from kiln.dialects.dims import evaluate as eval_dim

        shape = tuple(int(eval_dim(dim(s), {"B": b})) for s in op.opview.attr("shape"))
        return evaluate(op, ins, shape)
    wide = [x.astype(np.float32) if x.dtype == np.float16 else x for x in ins]  # f16: exact, then rounded
    with np.errstate(all="ignore"):
        out = np.asarray(EVALUATORS[name](wide, op.opview.decoded_attrs(), op))
    return evaluate(op, wide, out.shape)


IMPLEMENTATIONS = {
    "cpu": {"fallback": False, "keep_ir": True},  # the default CPU path: library and native kernels where it picks them
    "cpu-generated": {"fallback": False, "cpu_library": False},  # kiln -> linalg -> LLVM for every op
    "triton": {"fallback": False, "device": "cuda"},  # the Triton backend's kernels (and its torch kernels)
}


@pytest.fixture(scope="module", params=sorted(CASES), ids=lambda f: f"{f}-{'x'.join(map(str, _sizes(f).values()))}")
def family(request):
    return request.param


_IMPL = re.compile(r'= "(kiln\.[a-z_0-9]+)"\(.*kiln\.impl = "([a-z_.0-9]+)"')


def _chosen(ir_text: str) -> set[tuple[str, str]]:
    """``(op, entry)`` for every op the compiled IR marks with a library entry."""
    return {(m.group(1), m.group(2)) for m in _IMPL.finditer(ir_text)}


def _required_native(family: str) -> set[tuple[str, str]]:
    """The native entries the table lists that this family's cases must reach."""
    ops = {op for _, op, *_ in _family_cases(family)}
    want = set()
    for op in ops:
        for entry in implementations(op).native:
            epilogue = entry.endswith(" (epilogue)")
            if epilogue == (family == EPILOGUES):
                want.add((op, entry.removesuffix(" (epilogue)")))
    return want


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_implementations_agree_with_numpy(family, impl, tmp_path):
    cases = _family_cases(family, impl)
    assert cases, f"no case of {family} runs on {impl}"
    text, operands, returned = _module_text(cases)
    path = tmp_path / f"{family}.mlir"
    path.write_text(text)
    model = kiln.compile(str(path), **IMPLEMENTATIONS[impl])
    ops = {i: op for i, op, *_ in cases}
    for seed, b in enumerate(B_VALUES):
        args = _inputs(operands, b, seed)
        got = model(*args)
        got = got if isinstance(got, (list, tuple)) else [got]
        refs = _references(text, args, b, list(ops))
        for i, g in zip(returned, got, strict=True):
            g = g.cpu().numpy() if hasattr(g, "cpu") else np.asarray(g)
            _compare(g, refs[i], f"{ops[i]} (case {i} of {family}, {impl}, B={b}, sizes {_sizes(family)})")
    if impl == "cpu":  # each native implementation the table lists ran in this comparison
        chosen = _chosen(model.ir["partitioned"])
        missing = _required_native(family) - chosen
        assert not missing, f"native entries of the table no case of {family} reaches: {sorted(missing)}"


def test_every_op_with_an_implementation_has_a_reference_and_a_case():
    covered = {op for cases in CASES.values() for op, *_ in cases}
    rows = [row for rows in table().values() for row in rows if row.op not in EXEMPT]
    no_reference = sorted(row.op for row in rows if not row.numpy)
    assert not no_reference, f"kiln ops with implementations and no numpy reference: {no_reference}"
    missing = sorted(row.op for row in rows if row.op not in covered)
    assert not missing, f"kiln ops with no cross-check case here: {missing}"
    assert set(CASES) - {EPILOGUES} <= set(table()), "a family of CASES that the table does not have"
    misplaced = sorted(f"{op} in {f}" for f, cases in CASES.items() if f != EPILOGUES for op, *_ in cases
                       if implementations(op).family != f)
    assert not misplaced, f"cases outside their op's family: {misplaced}"


def test_the_table_lists_what_each_layer_registers():
    from kiln.backends.registry import REGISTRY
    from kiln.backends.triton.torch_ops import TORCH_OPS
    from kiln.conversions.kiln_to_linalg import LOWERINGS

    rows = {row.op: row for rows in table().values() for row in rows}
    assert {op for op, row in rows.items() if row.generated} == set(LOWERINGS) & set(rows)
    assert {op for op, row in rows.items() if row.torch} == set(TORCH_OPS)
    natives = {(e.op, e.name) for e in REGISTRY.entries if e.device == "cpu" and e.name.startswith("native.")}
    listed = {(op, n) for op, row in rows.items() for n in row.native if not n.endswith("(epilogue)")}
    assert natives == listed
    # The conversion's list of entries whose placeholder is the op's own contraction is the registry's.
    from kiln.conversions.kiln_to_linalg.library_call import CONTRACTIONS

    contractions = {e.name for e in REGISTRY.entries if e.device == "cpu" and getattr(e.impl, "contraction", False)}
    assert contractions == CONTRACTIONS
    assert rows["kiln.add"].native == ("native.gemm (epilogue)", "native.conv2d (epilogue)")
