"""transformers' BERT (its default SDPA attention) exported by ``torch.onnx.export(dynamo=True)``: torch.onnx
writes SDPA as q and k each scaled by the scale's root, the additive mask, a softmax and the NaN guard
``where(p != p, 0, p)``.  kiln recognises each layer's attention as one ``kiln.attention`` (no softmax left)
and matches ONNX Runtime on the same file at the min, a middle and the max of B and L.  (No attention-mask
input: with one, the export builds the mask with a GatherND, which kiln does not import yet.)
"""

import numpy as np
import onnxruntime
import pytest
import torch

import kiln

transformers = pytest.importorskip("transformers")

LAYERS = 2
SHAPES = [(1, 2), (3, 17), (6, 48)]  # (B, L): min, middle, max


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
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

        def forward(self, ids):
            return self.bert(input_ids=ids).last_hidden_state

    path = str(tmp_path_factory.mktemp("bert") / "bert.onnx")
    b, seq = torch.export.Dim("B", min=1, max=6), torch.export.Dim("L", min=2, max=48)
    torch.onnx.export(Encoder().eval(), (torch.from_numpy(_inputs(2, 16)),), path, dynamo=True,
                      input_names=["ids"], dynamic_shapes=({0: b, 1: seq},))
    return path


def _inputs(b, seq):
    return np.random.default_rng(b * 100 + seq).integers(0, 128, (b, seq)).astype(np.int64)


def test_nan_guarded_sdpa_is_attention_and_matches_ort(exported):
    compiled = kiln.compile(exported, symbols={"B": (1, 6), "L": (2, 48)}, fallback=False)
    ops = [op for k in compiled.report()["kernels"] for op in k["ops"]]
    assert ops.count("kiln.attention") == LAYERS and "kiln.softmax" not in ops, sorted(set(ops))
    session = onnxruntime.InferenceSession(exported, providers=["CPUExecutionProvider"])
    for b, seq in SHAPES:
        ids = _inputs(b, seq)
        want = session.run(None, {"ids": ids})[0]
        np.testing.assert_allclose(np.asarray(compiled(ids)), want, rtol=2e-4, atol=2e-4, err_msg=f"B={b} L={seq}")
