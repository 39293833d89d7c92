"""The real workloads of issue 42: models users bring, at real sizes (``kiln-bench --workload real``).

The table :data:`SPECS` is data: each :class:`RealSpec` names a constructor
(``"module:attr"``, from ``transformers``, ``torchvision`` or the bench's own
models), its keyword arguments at full size and in ``--quick`` (a tiny
config of the same architecture, for a smoke run), the input kind and the
rows.  :func:`real_workloads` turns it into :class:`~kiln.bench.workloads.Workload`
objects the harness runs like the classic ones.  Every model is built the
way a user would build it, with random weights (seeded), then made
meaningful by two general steps, never per model:

- BatchNorm statistics calibrated: running mean / variance reset and
  accumulated over a few batches of random inputs (``momentum=None``: their
  plain average), so a random network's activations neither vanish nor
  explode through 50 layers;
- a weight initialised to all zeros (torchvision ViT's classification head)
  drawn at random instead (std 0.02), since a zero layer makes the output
  constant and any engine fast on it.

Inputs: ``tokens`` (``input_ids`` [B, L], int64 ids below the vocabulary),
``image`` ([B, 3, S, S] float) or ``hidden`` ([B, L, hidden] float).  The
dims a row varies are dynamic (B always, L for sequences): one compile of
each engine serves every row.  A model's output is its first tensor
(``last_hidden_state`` / logits).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import numpy as np

from .workloads import Row, Workload

__all__ = ["SPECS", "RealRow", "RealSpec", "RealWorkload", "real_workloads"]

#: Largest batch and sequence length the dynamic dims declare.
MAX_B, MAX_L = 16, 512
#: Random batches the BatchNorm statistics are averaged over.
CALIBRATION_BATCHES = 4


@dataclass(frozen=True)
class RealRow(Row):
    """A row whose first input may be token ids (``vocab``: ids drawn in ``[0, vocab)``, int64)."""

    vocab: int | None = None

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Deterministic inputs: int64 token ids when ``vocab`` is set, float32 normals otherwise."""
        if self.vocab is None:
            return super().inputs(seed)
        rng = np.random.default_rng(seed)
        return [rng.integers(0, self.vocab, size=s, dtype=np.int64) for s in self.shapes]


@dataclass(frozen=True)
class RealSpec:
    """One real workload as data (see the module docstring).

    ``rows`` are (B, L) for ``tokens`` / ``hidden`` inputs and (B,) for
    ``image``; ``call_kwargs`` go to every forward call (``use_cache=False``
    for decoders).  ``config`` set: ``ctor`` is a transformers model class and
    ``config`` the keyword arguments of ``config_cls``; otherwise ``kwargs`` go
    to ``ctor`` itself (string values ``"module:attr"`` resolved).
    """

    name: str
    ctor: str
    inputs: str  # "tokens" | "image" | "hidden"
    rows: tuple
    quick_rows: tuple
    kwargs: dict = field(default_factory=dict)
    quick_kwargs: dict = field(default_factory=dict)
    config_cls: str | None = None
    config: dict = field(default_factory=dict)
    quick_config: dict = field(default_factory=dict)
    call_kwargs: dict = field(default_factory=dict)
    image: int = 224
    quick_image: int = 32
    hidden: int | None = None  # the feature size of a "hidden" input
    quick_hidden: int | None = None
    vocab: int | None = None  # the vocabulary of a "tokens" input (also passed as the config's vocab_size)
    quick_vocab: int | None = None
    description: str = ""


_TF = "transformers:"
_TV = "torchvision.models"

SPECS: list[RealSpec] = [
    RealSpec("bert_base", _TF + "BertModel", "tokens", ((1, 128), (8, 128), (1, 512)), ((1, 16), (2, 32)),
             config_cls=_TF + "BertConfig", vocab=30522, quick_vocab=512,
             config=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
             quick_config=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
             description="BERT-base encoder (768 hidden, 12 layers), last_hidden_state"),
    RealSpec("gpt2_small", _TF + "GPT2Model", "tokens", ((1, 64), (4, 256)), ((1, 16), (2, 32)),
             config_cls=_TF + "GPT2Config", vocab=50257, quick_vocab=512, call_kwargs={"use_cache": False},
             config=dict(n_embd=768, n_layer=12, n_head=12),
             quick_config=dict(n_embd=64, n_layer=2, n_head=4),
             description="GPT-2-small decoder (768 hidden, 12 layers), last_hidden_state"),
    RealSpec("llama_style", _TF + "LlamaModel", "tokens", ((1, 128), (4, 512)), ((1, 16), (2, 32)),
             config_cls=_TF + "LlamaConfig", vocab=32000, quick_vocab=512, call_kwargs={"use_cache": False},
             config=dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2,
                         intermediate_size=1408, max_position_embeddings=2048),
             quick_config=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=176, max_position_embeddings=2048),
             description="LLaMA-style decoder (512 hidden, 8 layers, 8 q / 2 kv heads, MLP 1408), last_hidden_state"),
    RealSpec("resnet50", _TV + ":resnet50", "image", ((1,), (8,)), ((1,), (2,)),
             quick_kwargs={"_ctor": _TV + ".resnet:ResNet", "block": _TV + ".resnet:Bottleneck",
                           "layers": [1, 1, 1, 1]},
             description="torchvision ResNet-50, 224 x 224, logits"),
    RealSpec("mobilenet_v2", _TV + ":mobilenet_v2", "image", ((1,), (8,)), ((1,), (2,)),
             quick_kwargs={"width_mult": 0.25,
                           "inverted_residual_setting": [[1, 16, 1, 1], [6, 24, 1, 2], [6, 32, 1, 2]]},
             description="torchvision MobileNetV2, 224 x 224, logits"),
    RealSpec("vit_s16", _TV + ".vision_transformer:VisionTransformer", "image", ((1,), (8,)), ((1,), (2,)),
             kwargs=dict(image_size=224, patch_size=16, num_layers=12, num_heads=6, hidden_dim=384, mlp_dim=1536),
             quick_kwargs=dict(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=32, mlp_dim=64),
             description="ViT-S/16 (torchvision VisionTransformer: 384 hidden, 12 layers, 6 heads), 224 x 224, logits"),
    RealSpec("block_sdpa", "kiln.bench.models:TransformerBlock", "hidden", ((1, 32), (4, 128), (8, 512)),
             ((1, 16), (2, 32)), hidden=256, quick_hidden=64,
             quick_kwargs=dict(hidden=64, heads=4, mlp_hidden=128),
             description="the bench transformer block, attention by F.scaled_dot_product_attention"),
    RealSpec("block_written_out", "kiln.bench.models:TransformerBlockWrittenOut", "hidden",
             ((1, 32), (4, 128), (8, 512)), ((1, 16), (2, 32)), hidden=256, quick_hidden=64,
             quick_kwargs=dict(hidden=64, heads=4, mlp_hidden=128),
             description="the bench transformer block, attention written out (matmul, masked_fill, softmax)"),
]


def _resolve(value):
    """``"module:attr"`` strings as the object they name; other values as they are."""
    if isinstance(value, str) and ":" in value and not value.startswith(":"):
        module, _, attr = value.partition(":")
        if module.startswith(("torchvision", "transformers")):
            _prepare_imports(transformers=module.startswith("transformers"))
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
    return value


def _prepare_imports(transformers: bool) -> None:
    """torchvision's registry wheel needs its two C schemas defined before it
    (or transformers, which imports it) is imported; transformers' warnings off."""
    from .torchvision_compat import define_torchvision_schemas

    define_torchvision_schemas()
    if transformers:
        import transformers as t

        t.logging.set_verbosity_error()


def _first_output_class():
    import torch

    class FirstTensor(torch.nn.Module):
        """``model(x, **call_kwargs)``'s first tensor (``last_hidden_state`` / logits); one input."""

        def __init__(self, model, call_kwargs):
            super().__init__()
            self.model = model
            self.call_kwargs = dict(call_kwargs)

        def forward(self, x):
            out = self.model(x, **self.call_kwargs)
            return out if isinstance(out, torch.Tensor) else out[0]

    return FirstTensor


def _calibrate_and_fill(module, example_shape, seed: int) -> None:
    """The two general fixes of the module docstring: zero weights drawn at
    random, BatchNorm statistics averaged over random batches."""
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() >= 2 and not torch.any(p):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        if norms:
            for m in norms:
                m.reset_running_stats()
                m.momentum = None  # a cumulative average of the batches
            module.train()
            for _ in range(CALIBRATION_BATCHES):
                module(torch.randn(example_shape, generator=gen))
    module.eval()


class RealWorkload(Workload):
    """A :class:`Workload` built from a :class:`RealSpec` (full size, or tiny with ``quick``).

    The model is built once and shared by the peers of the run
    (:meth:`release` drops it when the harness is done with the workload).
    Compiles are timed cold (empty caches, export included) and warm
    (``cold_warm``)."""

    cold_warm = True
    onnx_dynamo_fallback = True  # models the TorchScript ONNX exporter fails on: torch.export-based exporter

    def __init__(self, spec: RealSpec, quick: bool = False, seed: int = 0):
        self.spec, self.quick, self.seed = spec, quick, seed
        vocab = (spec.quick_vocab if quick else spec.vocab) if spec.inputs == "tokens" else None
        rows = []
        for r in spec.quick_rows if quick else spec.rows:
            if spec.inputs == "image":
                size = spec.quick_image if quick else spec.image
                rows.append(RealRow(f"B={r[0]}", ((r[0], 3, size, size),)))
            elif spec.inputs == "tokens":
                rows.append(RealRow(f"B={r[0]},L={r[1]}", ((r[0], r[1]),), vocab=vocab))
            else:
                rows.append(RealRow(f"B={r[0]},L={r[1]}", ((r[0], r[1], self._hidden()),)))
        seq = spec.inputs != "image"
        name = {"tokens": "input_ids", "image": "pixels", "hidden": "x"}[spec.inputs]
        axes = {0: "B", 1: "L"} if seq else {0: "B"}
        super().__init__(spec.name, rows, factory=f"real:{spec.name}", input_names=(name,),
                         dynamic_axes={name: axes, "y": dict(axes)}, gflop=self.count_gflop)
        self._built = None
        self._gflop: dict[str, float] = {}

    def _hidden(self) -> int:
        return self.spec.quick_hidden if self.quick else self.spec.hidden

    def example_shape(self) -> tuple[int, ...]:
        """The shape the model is exported at (B = 2; L = 16 for sequences)."""
        spec = self.spec
        if spec.inputs == "image":
            size = spec.quick_image if self.quick else spec.image
            return (2, 3, size, size)
        return (2, 16) if spec.inputs == "tokens" else (2, 16, self._hidden())

    def build_module(self):
        """The model as a user builds it (random weights, seeded), calibrated, in eval mode."""
        import torch

        spec = self.spec
        torch.manual_seed(self.seed)
        if spec.config_cls is not None:
            config = dict(spec.quick_config if self.quick else spec.config)
            vocab = spec.quick_vocab if self.quick else spec.vocab
            if vocab is not None:
                config["vocab_size"] = vocab
            model = _resolve(spec.ctor)(_resolve(spec.config_cls)(**config))
        else:
            kwargs = {k: _resolve(v) for k, v in (spec.quick_kwargs if self.quick else spec.kwargs).items()}
            ctor = _resolve(kwargs.pop("_ctor", spec.ctor))
            model = ctor(**kwargs)
        module = _first_output_class()(model, spec.call_kwargs)
        if spec.inputs != "tokens":
            _calibrate_and_fill(module, self.example_shape(), self.seed)
        return module.eval()

    def torch_model(self):
        """``(module, example_args, dynamic_shapes)``; B (and L) dynamic."""
        if self._built is None:
            import torch
            from torch.export import Dim

            module = self.build_module()
            row = RealRow("example", (self.example_shape(),), vocab=self.rows[0].vocab if self.rows else None)
            args = tuple(torch.from_numpy(x) for x in row.inputs(seed=self.seed + 7))
            dims = {0: Dim("B", min=1, max=MAX_B)}
            if self.spec.inputs != "image":
                dims[1] = Dim("L", min=2, max=MAX_L)
            self._built = (module, args, (dims,))
        return self._built

    def count_gflop(self, row: Row) -> float:
        """GFLOP of one call at ``row``, counted by PyTorch's ``FlopCounterMode``
        on an eager call (what it counts: matmuls and convolutions, not
        elementwise ops, not always the attention): a lower bound, for the
        GFLOPS column and, with the machine's FMA peak, the row's floor.
        Counted once per row."""
        if row.label not in self._gflop:
            import torch
            from torch.utils.flop_counter import FlopCounterMode

            module = self.torch_model()[0]
            counter = FlopCounterMode(display=False)
            with torch.no_grad(), counter:
                module(*[torch.from_numpy(x) for x in row.inputs()])
            self._gflop[row.label] = counter.get_total_flops() / 1e9
        return self._gflop[row.label]

    def weight_bytes(self) -> int:
        """Bytes of the parameters and buffers a call reads in full: an
        embedding table's rows are gathered, not streamed (GPT-2's is 147 MiB
        of its 475), so tables are left out -- the floor must stay a lower bound."""
        import torch

        module = self.torch_model()[0]
        skip = {id(m.weight) for m in module.modules() if isinstance(m, torch.nn.Embedding)}
        tensors = [t for t in list(module.parameters()) + list(module.buffers()) if id(t) not in skip]
        return int(sum(t.numel() * t.element_size() for t in tensors))

    def entry_info(self, row: Row) -> dict:
        """What the report needs of a row beyond its shapes: the suite, and
        B * L for sequence models (the tighter target applies from 512)."""
        shape = row.shapes[0]
        return {"suite": "real", "tokens": shape[0] * shape[1] if self.spec.inputs != "image" else None}

    def release(self) -> None:
        """Drop the built model (the harness calls this after the workload's rows)."""
        self._built = None


def real_workloads(quick: bool = False, names=None) -> list[RealWorkload]:
    """The real workloads (full size, or tiny configs with ``quick``), those in ``names`` when given."""
    known = {s.name: s for s in SPECS}
    for n in names or []:
        if n not in known:
            raise KeyError(f"unknown real workload '{n}' (known: {', '.join(known)})")
    return [RealWorkload(s, quick=quick) for s in SPECS if names is None or s.name in names]
