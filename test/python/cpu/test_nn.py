"""Contractions, reductions, softmax and norms on the CPU backend vs PyTorch."""

import numpy as np
import pytest
import torch
from kbuild import K, module_text

import kiln

SHAPES = [(1, 1), (7, 33), (64, 5), (2, 512), (5, 9)]
F = torch.nn.functional


def _body(x, w, v, bm, g, beta, c):
    return [
        K.matmul(x, w),  # [B, L, 16] x [16, 8]: batch-broadcast generic
        K.matmul(x, v),  # [B, L, 16] x [16]: matrix-vector
        K.matmul(K.reduce_sum(x, axes=[1]), w),  # [B, 16] x [16, 8]: linalg.matmul
        K.matmul(x, bm),  # [B, L, 16] x [B, 16, 8]: batched
        K.reduce_sum(x, axes=[1], keepdims=True),
        K.reduce_mean(x, axes=[-1]),
        K.reduce_max(x, axes=[0]),
        K.reduce_sum(x),
        K.softmax(x, axis=-1),
        K.softmax(x, axis=1),
        K.layer_norm(x, g, beta, epsilon=1e-5),
        K.layer_norm(x, epsilon=1e-6),
        K.layer_norm(x, g, epsilon=1e-5),
        K.batch_norm(c, K.reduce_mean(c, axes=[0, 2]), beta[:0] if False else K.reduce_max(c, axes=[0, 2]),
                     K.reduce_sum(c, axes=[0, 2]), K.exp(K.reduce_mean(c, axes=[0, 2])), epsilon=1e-5),
        # adjacent reduced dims, lowered as one loop (one of them a symbol)
        K.reduce_mean(x, axes=[1, 2]),
        K.reduce_max(x, axes=[0, 1], keepdims=True),
        K.reduce_sum(c, axes=[1, 2]),
    ]


def _refs(x, w, v, bm, g, beta, c):
    cm, cx, cs, ce = c.mean((0, 2)), c.amax((0, 2)), c.sum((0, 2)), c.mean((0, 2)).exp()
    return [
        x @ w, x @ v, x.sum(1) @ w, x @ bm,
        x.sum(1, keepdim=True), x.mean(-1), x.amax(0), x.sum(),
        x.softmax(-1), x.softmax(1),
        F.layer_norm(x, (16,), g, beta, 1e-5), F.layer_norm(x, (16,), eps=1e-6), F.layer_norm(x, (16,), g, None, 1e-5),
        F.batch_norm(c, cs, ce, cm, cx, False, 0.0, 1e-5),
        x.mean((1, 2)), x.amax((0, 1), keepdim=True), c.sum((1, 2)),
    ]


@pytest.fixture(scope="module")
def model():
    text = module_text(
        {"B": (1, 64), "L": (1, 512)},
        [(["B", "L", 16], "f32"), ([16, 8], "f32"), ([16], "f32"), (["B", 16, 8], "f32"), ([16], "f32"),
         ([16], "f32"), (["B", 6, "L"], "f32")],
        _body,
    )
    return kiln.compile(text)


def _inputs(b, seq, seed):
    g = np.random.default_rng(seed)
    r = lambda *s: g.standard_normal(s).astype(np.float32)  # noqa: E731
    return [r(b, seq, 16), r(16, 8), r(16), r(b, 16, 8), r(16), r(16), r(b, 6, seq)]


@pytest.mark.parametrize("b,seq", SHAPES)
def test_nn_ops_match_torch(model, b, seq):
    args = _inputs(b, seq, b * 7 + seq)
    outs = model(*args)
    refs = _refs(*(torch.from_numpy(a) for a in args))
    assert len(outs) == len(refs)
    for i, (got, want) in enumerate(zip(outs, refs)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4 if i in (7, 16) else 1e-5, err_msg=f"output {i}")
