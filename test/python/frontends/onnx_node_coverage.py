"""ONNX backend node cases for CNN / transformer inference ops, imported into kiln.

Used by ``test_import_onnx.py`` (which asserts a floor on the share) and runnable as a
script to print the measured numbers::

    python test/python/frontends/onnx_node_coverage.py [-v]

A case is *in scope* when every node of its model is one of ``INFERENCE_OPS``.
Small integer graph inputs (shapes, axes, pads, slice bounds) are frozen into
initializers from the case's first data set, as they are constants in real
models.  A case *passes* when it imports with 0 fallbacks.
"""

from __future__ import annotations

import sys
import warnings

INFERENCE_OPS = {
    # elementwise and activations
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid",
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Gelu",
    "Erf", "Clip", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
    "Not", "And", "Or", "Xor", "Sign", "Mish", "Identity", "Dropout",
    # contractions, conv, pooling, normalization
    "MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "BatchNormalization", "LayerNormalization", "InstanceNormalization", "LRN", "RMSNormalization",
    # reductions, softmax
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "Softmax", "LogSoftmax",
    # data movement
    "Reshape", "Transpose", "Concat", "Slice", "Gather", "Expand", "Pad", "Squeeze", "Unsqueeze", "Where",
    "Cast", "CastLike", "Flatten", "Shape", "Constant", "ConstantOfShape", "Split", "Tile", "Range", "Trilu",
}

# kiln has no unsigned, 4-bit or 8-bit float types; cases on them are out of scope.
_KILN_ELEM_TYPES = {1, 3, 5, 6, 7, 9, 10, 11, 16}


def _freeze_small_int_inputs(case):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    if not case.data_sets:
        return case.model
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    inputs = case.data_sets[0][0]
    keep = []
    for value, inp in zip(inputs, list(model.graph.input)):
        arr = np.asarray(value) if not isinstance(value, (list, dict)) else None
        if arr is not None and arr.dtype in (np.int64, np.int32) and arr.size <= 16:
            model.graph.initializer.append(numpy_helper.from_array(arr, inp.name))
        else:
            keep.append(inp)
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model


def _in_scope(case) -> bool:
    model = case.model
    if not all(n.op_type in INFERENCE_OPS and n.domain in ("", "ai.onnx") for n in model.graph.node):
        return False
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type") or vi.type.tensor_type.elem_type not in _KILN_ELEM_TYPES:
            return False
    return True


def cases():
    """The in-scope node test cases."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return [c for c in collect_testcases() if _in_scope(c)]


def measure(verbose=False):
    """``(passed, total, failures)`` where failures maps case name -> reason."""
    import kiln

    passed, failures = 0, {}
    selected = cases()
    for case in selected:
        try:
            _, report = kiln.import_onnx(_freeze_small_int_inputs(case), with_report=True)
            if report.fallbacks == 0:
                passed += 1
                continue
            name, _, why = report.unsupported[0]
            failures[case.name] = f"fallback {name}: {why}"
        except kiln.KilnError as e:
            failures[case.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    if verbose:
        for k, v in sorted(failures.items()):
            print(f"{k}: {v}")
    return passed, len(selected), failures


if __name__ == "__main__":
    p, n, _ = measure("-v" in sys.argv)
    print(f"{p}/{n} in-scope ONNX node cases import with 0 fallbacks ({p / n:.1%})")


def check_numerics(case, rtol=1e-3, atol=1e-4) -> None:
    """Compile the (frozen) case with kiln.compile and compare its first data set."""
    import numpy as np

    import kiln

    model = _freeze_small_int_inputs(case)
    frozen = {i.name for i in model.graph.initializer}
    inputs, outputs = case.data_sets[0]
    compiled = kiln.compile(model)
    feed = [np.asarray(v) for v, inp in zip(inputs, case.model.graph.input) if inp.name not in frozen]
    got = compiled(*feed)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(outputs)
    for g, w in zip(got, outputs):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol, err_msg=case.name)
