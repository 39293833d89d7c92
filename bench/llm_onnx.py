"""A ``transformers`` decoder exported to ONNX with past inputs, for the
ONNX Runtime peer of ``kiln-bench --workload llm``.

Two files, the form Optimum exports a decoder in: ``prefill.onnx``
(``input_ids``, ``attention_mask`` -> last position's ``logits`` and every
layer's ``present`` key / value) and ``decode.onnx`` (one new token, the
mask over ``past + 1`` positions and the past keys / values -> the same
outputs).  The cache crosses the boundary as plain tensors; inside, the
wrapper hands the model a ``DynamicCache`` built from them.
"""

from __future__ import annotations

import os

__all__ = ["export_decoder"]


def _wrappers(model):
    import torch
    from transformers import DynamicCache

    layers = model.config.num_hidden_layers

    def presents(cache):
        return [t for layer in cache.layers for t in (layer.keys, layer.values)]

    class Prefill(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
                             past_key_values=DynamicCache(config=self.model.config))
            return (out.logits[:, -1], *presents(out.past_key_values))

    class Decode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, *past):
            cache = DynamicCache(config=self.model.config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            position_ids = (attention_mask.sum(-1, keepdim=True) - 1)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)
            return (out.logits[:, -1], *presents(out.past_key_values))

    return Prefill().eval(), Decode().eval()


def export_decoder(model, folder: str) -> tuple[str, str]:
    """Write ``prefill.onnx`` and ``decode.onnx`` for ``model`` into
    ``folder``; returns their paths.  Batch, prompt and past lengths are
    dynamic."""
    import torch
    from torch.export import Dim

    cfg = model.config
    layers, kv = cfg.num_hidden_layers, cfg.num_key_value_heads
    head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    prefill, decode = _wrappers(model)
    names = [f"{kind}.{i}" for i in range(layers) for kind in ("key", "value")]
    b, n, p = Dim("B", min=1, max=64), Dim("L", min=2, max=4096), Dim("P", min=1, max=4096)
    ids = torch.zeros(2, 8, dtype=torch.int64)
    paths = os.path.join(folder, "prefill.onnx"), os.path.join(folder, "decode.onnx")
    with torch.inference_mode(False), torch.no_grad():
        torch.onnx.export(prefill, (ids, torch.ones_like(ids)), paths[0], dynamo=True,
                          input_names=["input_ids", "attention_mask"],
                          output_names=["logits", *(f"present.{n}" for n in names)],
                          dynamic_shapes=({0: b, 1: n}, {0: b, 1: n}), external_data=True)
        past = [torch.randn(2, kv, 8, head) for _ in names]
        token = torch.zeros(2, 1, dtype=torch.int64)
        torch.onnx.export(decode, (token, torch.ones(2, 9, dtype=torch.int64), *past), paths[1], dynamo=True,
                          input_names=["input_ids", "attention_mask", *(f"past.{n}" for n in names)],
                          output_names=["logits", *(f"present.{n}" for n in names)],
                          dynamic_shapes=({0: b}, {0: b, 1: p + 1}, tuple({0: b, 2: p} for _ in names)),  # *past: one group
                          external_data=True)
    return paths
