"""transformers' BERT (its default SDPA attention) exported by ``torch.onnx.export(dynamo=True)``: torch.onnx
writes SDPA as q and k each scaled by the scale's root, the additive mask, a softmax and the NaN guard
``where(p != p, 0, p)``.  kiln recognises each layer's attention as one ``kiln.attention`` (no softmax left)
and matches ONNX Runtime on the same file at the min, a middle and the max of B and L, without and with an
``attention_mask`` input (with one, the export builds the additive mask from ``mask[rows, cols]``: a GatherND).
"""

import numpy as np
import onnxruntime
import pytest
import torch

import kiln

transformers = pytest.importorskip("transformers")

LAYERS = 2
SHAPES = [(1, 2), (3, 17), (6, 48)]  # (B, L): min, middle, max


@pytest.fixture(scope="module", params=[False, True], ids=["no-mask", "mask"])
def exported(request, tmp_path_factory):
    from kiln.bench.torchvision_compat import define_torchvision_schemas

    define_torchvision_schemas()  # transformers imports torchvision, whose C extension does not load here
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=128)
    bert = transformers.BertModel(config).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask=None):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    masked = request.param
    path = str(tmp_path_factory.mktemp("bert") / "bert.onnx")
    b, seq = torch.export.Dim("B", min=1, max=6), torch.export.Dim("L", min=2, max=48)
    feeds = _inputs(2, 16, masked)
    torch.onnx.export(Encoder().eval(), tuple(torch.from_numpy(v) for v in feeds.values()), path, dynamo=True,
                      input_names=list(feeds), dynamic_shapes=tuple({0: b, 1: seq} for _ in feeds))
    return path, masked


def _inputs(b, seq, masked):
    rng = np.random.default_rng(b * 100 + seq)
    feeds = {"ids": rng.integers(0, 128, (b, seq)).astype(np.int64)}
    if masked:
        # Padding at the end of every row but the first (row 0 is whole).
        lengths = [seq] + list(rng.integers(1, seq + 1, b - 1))
        feeds["mask"] = (np.arange(seq)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return feeds


def test_nan_guarded_sdpa_is_attention_and_matches_ort(exported):
    exported, masked = exported
    compiled = kiln.compile(exported, symbols={"B": (1, 6), "L": (2, 48)}, fallback=False)
    ops = [op for k in compiled.report()["kernels"] for op in k["ops"]]
    assert ops.count("kiln.attention") == LAYERS and "kiln.softmax" not in ops, sorted(set(ops))
    session = onnxruntime.InferenceSession(exported, providers=["CPUExecutionProvider"])
    for b, seq in SHAPES:
        feeds = _inputs(b, seq, masked)
        want = session.run(None, feeds)[0]
        np.testing.assert_allclose(np.asarray(compiled(*feeds.values())), want, rtol=2e-4, atol=2e-4,
                                   err_msg=f"B={b} L={seq}")
