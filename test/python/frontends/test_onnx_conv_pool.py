"""ONNX Conv / ConvTranspose / MaxPool / AveragePool through kiln.compile against
ONNX Runtime: 1-D and 3-D forms, transposed convolution, ceil_mode's output
size, pads larger than half the kernel, dilated average pooling, MaxPool's
Indices, with symbolic batch and spatial dims at several values each.

Each test compiles one graph holding several nodes over the same inputs (one
compilation each keeps the file fast)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_compare import check_against_ort

import kiln

onnxruntime = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(36)
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


def _model(inputs, nodes, outputs, inits=()):
    """A graph of ``nodes``: ``inputs`` are ``(name, dims)`` f32 tensors,
    ``outputs`` ``(name, rank, elem)`` (dims left unknown), ``inits``
    ``(name, array)`` constants."""
    vi = [helper.make_tensor_value_info(n, F, d) for n, d in inputs]
    vo = [helper.make_tensor_value_info(n, e, [None] * r) for n, r, e in outputs]
    graph = helper.make_graph(nodes, "conv_pool", vi, vo, [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _check(model, symbols, feeds_list, rtol=1e-4, atol=1e-5):
    """Compile ``model`` once; for each feed dict compare every output (shape and values) with ONNX Runtime."""
    check_against_ort(model, feeds_list, symbols=symbols, rtol=rtol, atol=atol)


def test_2d_transposed_convolution_and_pools():
    """ConvTranspose (strides, pads, output_padding, dilations, group, SAME_LOWER,
    output_shape); AveragePool with ceil_mode, pads above half the kernel (with
    and without count_include_pad) and dilations; MaxPool whose ceil_mode drops
    the last window; MaxPool's Indices in both storage orders."""
    nodes = [
        _node("ConvTranspose", ["x", "w1", "b1"], ["ct"], strides=[2, 3], pads=[1, 0, 2, 1],
              output_padding=[1, 2], dilations=[2, 1], group=2),
        _node("ConvTranspose", ["x", "w2"], ["same"], strides=[2, 1], auto_pad="SAME_LOWER"),
        # kernel >= stride: the output phases as one convolution; kernel < stride: zero insertion
        _node("ConvTranspose", ["x", "w5", "b1"], ["phases"], strides=[2, 3], pads=[1, 2, 0, 1],
              output_padding=[1, 2], group=2),
        _node("ConvTranspose", ["x", "w6"], ["sparse"], strides=[2, 3], pads=[0, 1, 1, 0]),
        # kernel = stride: the tiles path (a 1x1 convolution and a tile layout)
        _node("ConvTranspose", ["x", "w4", "b1"], ["tiles"], strides=[2, 3], pads=[1, 0, 0, 2],
              output_padding=[1, 0], group=2),
        _node("ConvTranspose", ["x", "w4"], ["tsame"], strides=[2, 3], auto_pad="SAME_UPPER", group=2),
        _node("ConvTranspose", ["s", "w3"], ["shaped"], strides=[3, 2], output_shape=[12, 8]),
        _node("AveragePool", ["x"], ["avg0"], kernel_shape=[3, 2], strides=[3, 2], pads=[2, 1, 2, 1], ceil_mode=1),
        _node("AveragePool", ["x"], ["avg1"], kernel_shape=[3, 2], strides=[3, 2], pads=[2, 1, 2, 1], ceil_mode=1,
              count_include_pad=1),
        _node("AveragePool", ["x"], ["avgd"], kernel_shape=[2, 2], dilations=[2, 3], pads=[1, 1, 0, 1]),
        _node("MaxPool", ["x"], ["mp1"], kernel_shape=[1, 1], strides=[2, 2], ceil_mode=1),
        _node("MaxPool", ["x"], ["mpi0", "idx0"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]),
        _node("MaxPool", ["x"], ["mpi1", "idx1"], kernel_shape=[2, 2], strides=[1, 2], pads=[0, 1, 1, 0],
              storage_order=1),
    ]
    inits = [("w1", _x(4, 3, 3, 2)), ("b1", _x(6)), ("w2", _x(4, 3, 4, 3)), ("w3", _x(2, 3, 4, 3)),
             ("w4", _x(4, 3, 2, 3)), ("w5", _x(4, 3, 3, 4)), ("w6", _x(4, 2, 1, 2))]
    names = ("ct", "same", "phases", "sparse", "tiles", "tsame", "shaped", "avg0", "avg1", "avgd", "mp1", "mpi0")
    outputs = [(n, 4, F) for n in names]
    outputs += [("idx0", 4, I64), ("mpi1", 4, F), ("idx1", 4, I64)]
    model = _model([("x", ["N", 4, "H", "W"]), ("s", ["N", 2, 3, 3])], nodes, outputs, inits)
    # Every residue of H and W modulo the strides (ceil_mode's last window).
    shapes = [(1, 2, 2), (2, 3, 3), (1, 4, 5), (3, 5, 6), (2, 9, 8)]
    _check(model, {"N": (1, 3), "H": (2, 9), "W": (2, 9)},
           [{"x": _x(n, 4, h, w), "s": _x(n, 2, 3, 3)} for n, h, w in shapes])


def test_3d_convolution_and_pools():
    """Conv 3-D (strides, pads, dilations, group, bias), ConvTranspose 3-D,
    MaxPool / AveragePool 3-D with ceil_mode, pads and dilations, and 3-D
    MaxPool Indices, over symbolic N, D, H, W."""
    pool = dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[1, 0, 1, 1, 2, 0], ceil_mode=1, dilations=[2, 1, 1])
    nodes = [
        _node("Conv", ["x", "w", "b"], ["conv"], strides=[2, 1, 2], pads=[1, 0, 1, 2, 1, 0], dilations=[1, 2, 1],
              group=2),
        # 17 depth taps: more than one kiln.concat takes, so a sum of convolutions
        _node("Conv", ["x", "wd"], ["deep"], strides=[2, 1, 1], pads=[8, 0, 1, 8, 0, 1]),
        _node("ConvTranspose", ["x", "wt"], ["ct"], strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0], group=2),
        _node("ConvTranspose", ["x", "wt"], ["tiles"], strides=[2, 3, 2], pads=[1, 0, 0, 0, 1, 1]),
        _node("MaxPool", ["x"], ["mp"], **pool),
        _node("AveragePool", ["x"], ["ap"], count_include_pad=1, **pool),
        _node("AveragePool", ["x"], ["ap0"], kernel_shape=[3, 1, 2], strides=[1, 1, 2], pads=[1, 0, 1, 1, 0, 1]),
        _node("MaxPool", ["x"], ["mpi", "idx"], kernel_shape=[2, 1, 2], strides=[2, 2, 2], ceil_mode=1),
    ]
    inits = [("w", _x(6, 2, 3, 2, 3)), ("b", _x(6)), ("wt", _x(4, 1, 2, 3, 2)), ("wd", _x(3, 4, 17, 2, 3))]
    outputs = [(n, 5, F) for n in ("conv", "deep", "ct", "tiles", "mp", "ap", "ap0", "mpi")] + [("idx", 5, I64)]
    model = _model([("x", ["N", 4, "D", "H", "W"])], nodes, outputs, inits)
    _check(model, {"N": (1, 2), "D": (3, 9), "H": (3, 8), "W": (3, 8)},
           [{"x": _x(n, 4, d, h, w)} for n, d, h, w in ((1, 3, 3, 3), (2, 6, 5, 4), (1, 9, 8, 8))])


def test_1d_transposed_convolution_with_a_weight_input():
    nodes = [_node("ConvTranspose", ["x", "w"], ["y"], strides=[2], pads=[3, 1]),
             _node("ConvTranspose", ["x", "w"], ["t"], strides=[3], pads=[2, 1], output_padding=[2]),
             _node("MaxPool", ["x"], ["m", "i"], kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1)]
    model = _model([("x", ["N", 2, "L"]), ("w", [2, 3, 3])], nodes,
                   [("y", 3, F), ("t", 3, F), ("m", 3, F), ("i", 3, I64)])
    _check(model, {"N": (1, 2), "L": (2, 9)},
           [{"x": _x(n, 2, length), "w": _x(2, 3, 3)} for n, length in ((1, 2), (2, 7), (1, 9))])


def test_torch_pools_ceil_mode_shape():
    """aten.max_pool2d / avg_pool2d with ceil_mode: no window starting past the input and its low padding."""
    torch = pytest.importorskip("torch")

    class Pools(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mp = torch.nn.MaxPool2d(kernel_size=1, stride=2, ceil_mode=True)
            self.ap = torch.nn.AvgPool2d(kernel_size=2, stride=3, padding=1, ceil_mode=True)

        def forward(self, x):
            return self.mp(x), self.ap(x)

    model = Pools()
    x = torch.randn(1, 2, 4, 4)
    compiled = kiln.compile(model, (x,), fallback=False)
    got = compiled(x.numpy())
    for g, w, shape in zip(got, model(x), ((1, 2, 2, 2), (1, 2, 2, 2))):
        g = np.asarray(g)
        assert g.shape == tuple(w.shape) == shape
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)
