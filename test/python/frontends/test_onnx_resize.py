"""ONNX Resize (opsets 10-19) and Upsample through kiln, against ONNX Runtime and ONNX's reference.

Several Resize nodes share one model (one compile) where they can: each
output is checked on its own.  Symbolic dims are checked at several values.
Where ONNX Runtime and ONNX's reference implementation disagree (the float
output width of ``align_corners`` / ``tf_crop_and_resize`` when ``scale *
size`` is not an integer), kiln follows the reference, which the ONNX
conformance cases were generated with.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.errors import UnsupportedError

ort = pytest.importorskip("onnxruntime")


def _model(shape, specs, opset=19, dtype=TensorProto.FLOAT, op="Resize", extra_nodes=(), extra_inits=()):
    """One model: input ``X`` of ``shape`` (str = dim_param), a Resize per spec.

    A spec is ``dict(scales=..., sizes=..., roi=..., attrs=...)``; ``sizes``
    may name a graph value (str) instead of holding constants."""
    nodes, inits, outs = list(extra_nodes), list(extra_inits), []
    for k, sp in enumerate(specs):
        ins = ["X"]

        def const(name, arr, t):
            inits.append(numpy_helper.from_array(np.asarray(arr, dtype=t), name))
            return name

        if op == "Upsample" or opset < 11:
            ins.append(const(f"s{k}", sp["scales"], np.float32))
        else:
            ins.append(const(f"r{k}", sp["roi"], np.float32) if "roi" in sp else "")
            ins.append(const(f"s{k}", sp["scales"], np.float32) if "scales" in sp else "")
            if "sizes" in sp:
                sizes = sp["sizes"]
                ins.append(sizes if isinstance(sizes, str) else const(f"z{k}", sizes, np.int64))
        nodes.append(helper.make_node(op, ins, [f"Y{k}"], **sp.get("attrs", {})))
        outs.append(helper.make_tensor_value_info(f"Y{k}", dtype, [None] * len(shape)))
    graph = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("X", dtype, shape)], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _expected(model, x, which):
    if which == "ort":
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, {"X": x})
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {"X": x})


def _check(model, shapes, which="ort", dtype=np.float32, seed=0):
    """Compile once, run at every input shape, compare every output."""
    compiled = kiln.compile(model, device="cpu", fallback=False)
    rng = np.random.default_rng(seed)
    for shape in shapes:
        x = (rng.random(shape) * 20 - 10).astype(dtype)
        got = compiled(x)
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        want = _expected(model, x, which)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            g = np.asarray(g)
            assert g.shape == w.shape, (shape, i, g.shape, w.shape)
            if np.issubdtype(w.dtype, np.integer):
                np.testing.assert_array_equal(g, w, err_msg=f"output {i} at {shape}")
            else:
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"output {i} at {shape}")
    return compiled


def _nearest(coord, rule):
    return dict(mode="nearest", coordinate_transformation_mode=coord, nearest_mode=rule)


def test_static_modes_match_onnxruntime():
    """Every mode, coordinate mode and nearest rounding on static dims, up and down."""
    specs = [
        dict(scales=[1, 1, 2.0, 0.5], attrs=_nearest("half_pixel", "round_prefer_floor")),
        dict(scales=[1, 1, 0.6, 1.7], attrs=_nearest("asymmetric", "round_prefer_ceil")),
        dict(scales=[1, 1, 1.5, 0.75], attrs=_nearest("pytorch_half_pixel", "floor")),
        dict(sizes=[2, 3, 9, 4], attrs=_nearest("align_corners", "ceil")),
        dict(scales=[1, 1, 1.5, 0.6], attrs=dict(mode="linear")),
        dict(sizes=[2, 3, 3, 11], attrs=dict(mode="linear", coordinate_transformation_mode="align_corners")),
        dict(scales=[1, 1, 0.5, 2.0], attrs=dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric")),
        dict(scales=[1, 1, 1.5, 0.5], attrs=dict(mode="cubic", coordinate_transformation_mode="asymmetric")),
        dict(scales=[1, 1, 2.0, 0.75], attrs=dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)),
        dict(scales=[1, 1, 0.6, 0.25], attrs=dict(mode="linear", antialias=1)),  # 0.25: a dense filter
        dict(sizes=[2, 3, 3, 3], attrs=dict(mode="cubic", antialias=1)),
        dict(scales=[0.5], attrs=dict(mode="linear", axes=[-1])),
    ]
    _check(_model([2, 3, 6, 8], specs), [(2, 3, 6, 8)])


def test_reference_semantics_crop_aspect_axes():
    """tf_crop_and_resize with extrapolation, opset-18 axes, keep_aspect_ratio_policy."""
    specs = [
        dict(roi=[0.2, -0.1, 0.9, 1.3], sizes=[5, 4], attrs=dict(
            mode="linear", axes=[2, 3], coordinate_transformation_mode="tf_crop_and_resize",
            extrapolation_value=7.0)),
        dict(roi=[-0.2, 0.1, 1.2, 0.8], scales=[0.5, 2.0], attrs=dict(
            mode="nearest", axes=[3, 2], coordinate_transformation_mode="tf_crop_and_resize")),
        dict(sizes=[4, 9], attrs=dict(mode="nearest", axes=[2, 3], keep_aspect_ratio_policy="not_larger")),
        dict(sizes=[4, 9], attrs=dict(mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_smaller")),
        dict(scales=[1, 1, 0.6, 0.6], attrs=dict(mode="linear", coordinate_transformation_mode="align_corners")),
    ]
    _check(_model([1, 2, 6, 8], specs), [(1, 2, 6, 8)], which="reference")


def test_symbolic_batch_cnn_upsample():
    """A CNN's 2x upsample as torch exports it (nearest: asymmetric + floor;
    bilinear, align_corners=False: pytorch_half_pixel) with a symbolic batch."""
    specs = [
        dict(scales=[1, 1, 2, 2], attrs=_nearest("asymmetric", "floor")),
        dict(scales=[1, 1, 2, 2], attrs=dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel")),
    ]
    _check(_model(["N", 4, 5, 7], specs), [(1, 4, 5, 7), (3, 4, 5, 7), (8, 4, 5, 7)])


def test_symbolic_spatial_dims():
    """Scales over symbolic H and W: output dims 2*H, W/2, index tables built from kiln ops."""
    specs = [
        dict(scales=[1, 1, 2.0, 0.5], attrs=dict(mode="nearest")),
        dict(scales=[1, 1, 0.5, 1.5], attrs=dict(mode="cubic", coordinate_transformation_mode="half_pixel",
                                                 exclude_outside=1)),
        dict(scales=[1, 1, 2.0, 2.0], attrs=dict(mode="linear", coordinate_transformation_mode="align_corners")),
    ]
    model = _model(["N", 2, "H", "W"], specs)
    compiled = _check(model, [(1, 2, 3, 4), (2, 2, 8, 7), (1, 2, 13, 10), (1, 2, 5, 16)])
    assert [str(d) for d in compiled.outputs[0].dims] == ["N", "2", "2*H", "W/2"]


def test_symbolic_sizes_from_shape_arithmetic():
    """``sizes = concat(shape[:2], shape[2:] * 2)`` (a dynamic-shape export) and ``shape[2:] + 2``: symbolic sizes."""
    i64 = TensorProto.INT64
    nodes = [
        helper.make_node("Shape", ["X"], ["shp"]),
        helper.make_node("Slice", ["shp", "c0", "c2"], ["nc"]),
        helper.make_node("Slice", ["shp", "c2", "c4"], ["hw"]),
        helper.make_node("Mul", ["hw", "two"], ["hw2"]),
        helper.make_node("Concat", ["nc", "hw2"], ["sz"], axis=0),
        helper.make_node("Add", ["hw", "two"], ["hw3"]),
        helper.make_node("Concat", ["nc", "hw3"], ["sz3"], axis=0),
    ]
    inits = [helper.make_tensor(n, i64, [1], [v]) for n, v in (("c0", 0), ("c2", 2), ("c4", 4))]
    inits.append(helper.make_tensor("two", i64, [2], [2, 2]))
    # sizes 2*H (a constant scale) and H + 2 (a scale known only at run time: (H+2)/H)
    specs = [dict(sizes="sz", attrs=dict(mode="linear", coordinate_transformation_mode="align_corners")),
             dict(sizes="sz3", attrs=dict(mode="linear"))]
    _check(_model(["N", 2, "H", "W"], specs, extra_nodes=nodes, extra_inits=inits), [(1, 2, 3, 5), (2, 2, 6, 4)])


def test_resize10_and_upsample():
    """Resize-10 and Upsample-9: asymmetric coordinates, nearest rounds down
    when upsampling and up when downsampling (as ONNX Runtime does)."""
    specs = [dict(scales=[1, 1, 0.6, 1.7], attrs=dict(mode="nearest")),
             dict(scales=[1, 1, 2.5, 0.35], attrs=dict(mode="linear"))]
    _check(_model([1, 2, 5, 10], specs, opset=10), [(1, 2, 5, 10)])
    up = [dict(scales=[1, 1, 2.0, 1.7], attrs=dict(mode="nearest")), dict(scales=[1, 1, 1.5, 2.5], attrs=dict(mode="linear"))]
    _check(_model([1, 2, 5, 10], up, opset=9, op="Upsample"), [(1, 2, 5, 10)])


def test_integer_input():
    """An int32 tensor: nearest gathers; linear rounds half to even and saturates (ONNX's reference)."""
    specs = [dict(scales=[1, 1, 2.0, 1.5], attrs=dict(mode="nearest")),
             dict(scales=[1, 1, 2.0, 0.5], attrs=dict(mode="linear"))]
    _check(_model([1, 2, 4, 6], specs, dtype=TensorProto.INT32), [(1, 2, 4, 6)], which="reference", dtype=np.int32)


@pytest.mark.parametrize("spec, reason", [
    (dict(scales=[1, 1, 0.6, 1]), "floor(H * 0.6) is not a kiln dim expression"),
    (dict(sizes=[2, 2], attrs=dict(axes=[2, 3], keep_aspect_ratio_policy="not_larger")),
     "keep_aspect_ratio_policy 'not_larger' over symbolic dims"),
    (dict(sizes=[1, 2, 3, 3], attrs=dict(mode="linear", antialias=1)), "antialias to a symbolic size"),
])
def test_unsupported_is_a_clear_error(spec, reason):
    spec.setdefault("attrs", {}).setdefault("mode", "nearest")
    with pytest.raises(UnsupportedError, match="Resize") as e:
        kiln.compile(_model([1, 2, "H", 4], [spec]), device="cpu", fallback=False)
    assert reason in str(e.value)


def test_models_are_valid_onnx():
    onnx.checker.check_model(_model(["N", 2, "H", "W"], [dict(scales=[1, 1, 2, 2])]))
