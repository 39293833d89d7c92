"""Convolution, pooling, attention and data-movement ops on the CPU backend vs PyTorch."""

import numpy as np
import pytest
import torch
from kbuild import K, module_text

import kiln

F = torch.nn.functional
CONV_SHAPES = [(1, 9), (3, 16), (8, 33), (2, 5), (5, 12)]


def _conv_body(x, w, b, wg, wd):
    return [
        K.conv2d(x, w, b, strides=[2, 2], pads=[1, 1, 1, 1]),
        K.conv2d(x, wg, groups=2, pads=[0, 1, 2, 1], dilations=[1, 2]),
        K.conv2d(x, wd, groups=4, pads=[1, 1, 1, 1]),
        K.max_pool2d(x, kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        K.max_pool2d(x, kernel=[2, 2], ceil_mode=True),
        K.avg_pool2d(x, kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        K.avg_pool2d(x, kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=True),
        K.avg_pool2d(x, kernel=[2, 2], strides=[2, 2], ceil_mode=True),
    ]


def _conv_refs(x, w, b, wg, wd):
    return [
        F.conv2d(x, w, b, stride=2, padding=1),
        F.conv2d(F.pad(x, (1, 1, 0, 2)), wg, groups=2, dilation=(1, 2)),
        F.conv2d(x, wd, groups=4, padding=1),
        F.max_pool2d(x, 3, 2, 1),
        F.max_pool2d(x, 2, ceil_mode=True),
        F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
        F.avg_pool2d(x, 3, 2, 1, count_include_pad=True),
        F.avg_pool2d(x, 2, 2, ceil_mode=True),
    ]


@pytest.fixture(scope="module")
def conv_model():
    text = module_text(
        {"N": (1, 8), "H": (5, 64)},
        [(["N", 4, "H", "H"], "f32"), ([6, 4, 3, 3], "f32"), ([6], "f32"), ([6, 2, 3, 3], "f32"), ([4, 1, 3, 3], "f32")],
        _conv_body,
    )
    return kiln.compile(text)


@pytest.mark.parametrize("n,h", CONV_SHAPES)
def test_conv_and_pool_match_torch(conv_model, n, h):
    g = np.random.default_rng(n * 100 + h)
    r = lambda *s: g.standard_normal(s).astype(np.float32)  # noqa: E731
    args = [r(n, 4, h, h), r(6, 4, 3, 3), r(6), r(6, 2, 3, 3), r(4, 1, 3, 3)]
    outs = conv_model(*args)
    refs = _conv_refs(*(torch.from_numpy(a) for a in args))
    for i, (got, want) in enumerate(zip(outs, refs)):
        assert got.shape == tuple(want.shape), f"output {i}"
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"output {i}")


SHAPES = [(1, 1), (7, 33), (64, 8), (2, 512), (3, 2)]


def _data_body(x, y, table, ids, row, q, k, v, mask):
    f32 = "f32"
    return [
        K.reshape(K.reshape(x, shape=["B*L", 16]), shape=["B", "L", 4, 4]),
        K.transpose(x, perm=[1, 2, 0]),
        K.concat(x, y, axis=1),
        K.slice(x, starts=[1], ends=[2**62], steps=[2], axes=[2]),
        K.slice(x, starts=[-3], ends=[2**62], axes=[2]),
        K.slice(x, starts=[15], ends=[0], steps=[-3], axes=[2]),
        K.reshape(K.slice(x, starts=[4], ends=[12], axes=[2]), shape=["B", "L*8"]),
        K.gather(table, ids, axis=0),
        K.expand(row, shape=["B", "L", 16]),
        K.pad(x, pads=[0, 1, 2, 0, 0, 3], value=1.5),
        K.pad(x, pads=[0, 0, 2, 0, 0, 3], mode="reflect"),
        K.pad(x, pads=[0, 0, 2, 0, 0, 3], mode="edge"),
        K.add(x, K.constant(value=_dense([16], f32))),
        K.attention(q, k, v, causal=True),
        K.attention(q, k, v, mask),
        K.slice(x, starts=[0], ends=[2**62], axes=[1]),
    ]


def _dense(shape, dtype):
    from kiln._mlir import ir

    t = ir.RankedTensorType.get(shape, ir.F32Type.get())
    import array

    return ir.DenseElementsAttr.get(array.array("f", [0.25 * i for i in range(int(np.prod(shape)))]), type=t)


def _data_refs(x, y, table, ids, row, q, k, v, mask):
    seq = x.shape[1]
    b = x.shape[0]
    return [
        x.reshape(b, seq, 4, 4), x.permute(1, 2, 0), torch.cat([x, y], 1), x[:, :, 1::2], x[:, :, -3:],
        x.flip(2)[:, :, 0:15:3], x[:, :, 4:12].reshape(b, seq * 8), table[ids], row.expand(b, seq, 16),
        F.pad(x, (2, 3, 1, 0, 0, 0), value=1.5),
        torch.from_numpy(np.pad(x.numpy(), [(0, 0), (0, 0), (2, 3)], mode="reflect")),
        torch.from_numpy(np.pad(x.numpy(), [(0, 0), (0, 0), (2, 3)], mode="edge")),
        x + 0.25 * torch.arange(16, dtype=torch.float32),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        x,
    ]


@pytest.fixture(scope="module")
def data_model():
    text = module_text(
        {"B": (1, 64), "L": (1, 512)},
        [(["B", "L", 16], "f32"), (["B", 1, 16], "f32"), ([50, 16], "f32"), (["B", "L"], "i64"), ([1, 1, 16], "f32"),
         (["B", 2, "L", 8], "f32"), (["B", 2, "L", 8], "f32"), (["B", 2, "L", 8], "f32"), (["L", "L"], "f32")],
        _data_body,
    )
    return kiln.compile(text)


@pytest.mark.parametrize("b,seq", SHAPES)
def test_data_and_attention_match_torch(data_model, b, seq):
    g = np.random.default_rng(b * 31 + seq)
    r = lambda *s: g.standard_normal(s).astype(np.float32)  # noqa: E731
    ids = g.integers(-50, 50, (b, seq)).astype(np.int64)
    args = [r(b, seq, 16), r(b, 1, 16), r(50, 16), ids, r(1, 1, 16), r(b, 2, seq, 8), r(b, 2, seq, 8),
            r(b, 2, seq, 8), r(seq, seq)]
    outs = data_model(*args)
    refs = _data_refs(*(torch.from_numpy(a) for a in args))
    assert len(outs) == len(refs)
    for i, (got, want) in enumerate(zip(outs, refs)):
        assert got.shape == tuple(want.shape), f"output {i}: {got.shape} vs {tuple(want.shape)}"
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"output {i}")
