"""Text generation on kiln: a compiled LM, its preallocated KV cache, the decoding loop.

:func:`compile_lm` exports a ``transformers`` ``*ForCausalLM`` as one kiln
graph (:mod:`kiln.lm.export`): ``L`` new tokens over a past of ``P``
positions, run once over the prompt and then once per generated token
(``L = 1``).  :class:`CompiledLM` owns the cache
(:class:`KVCache`) and runs the loop: greedy decoding gives the tokens of
``transformers``' ``generate(do_sample=False)``; sampling (temperature,
top-k, top-p) draws from a seeded numpy ``Generator``.

Batched prompts of different lengths are left padded with an attention mask
(as ``transformers`` expects them); positions come from the mask exactly as
``transformers`` computes them (``cumsum(mask) - 1``, 0 on padding).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from ..errors import KilnError, ShapeError

__all__ = ["CompiledLM", "KVCache", "compile_lm", "export_step"]


class KVCache:
    """The preallocated keys and values of every layer: ``[max_batch, Hkv, max_len + 1, D]`` each.

    Allocated once per :class:`CompiledLM`.  Slot 0 is a null position
    (zeros, hidden by every mask): the graph's past is never empty, so the
    prompt runs through the decode graph with ``P = 1``.  Tokens occupy
    slots ``1 .. max_len``.  The compiled step writes each step's keys and
    values into these arrays itself, in place (``kiln.update_slice`` on
    donated inputs): :meth:`buffers` hands it the rows in use.
    """

    NULL_SLOTS = 1

    def __init__(self, layers: int, max_batch: int, kv_heads: int, max_len: int, head_dim: int, dtype=np.float32):
        shape = (max_batch, kv_heads, max_len + self.NULL_SLOTS, head_dim)
        self.keys = [np.zeros(shape, dtype) for _ in range(layers)]
        self.values = [np.zeros(shape, dtype) for _ in range(layers)]
        self.max_batch, self.max_len = max_batch, max_len

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache (keys and values of every layer)."""
        return sum(a.nbytes for a in self.keys + self.values)

    def buffers(self, batch: int) -> list[np.ndarray]:
        """Rows ``:batch`` of every layer, k_0, v_0, k_1, v_1, ...: views of the cache, no copy.

        A leading slice of a C-contiguous array is C-contiguous and
        writeable, what a donated input must be: the step writes its new
        positions into these views, so into the cache.
        """
        out = []
        for k, v in zip(self.keys, self.values):
            out += [k[:batch], v[:batch]]
        return out


def _positions(mask: np.ndarray) -> np.ndarray:
    """``transformers``' position ids from a 0/1 mask: ``cumsum - 1``, 0 on padding."""
    pos = np.cumsum(mask, axis=-1, dtype=np.int64) - 1
    return np.where(mask == 0, 0, pos)


def _process_logits(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None) -> np.ndarray:
    """Logits after temperature, top-k and top-p (the removed ones ``-inf``), in ``transformers``' order."""
    logits = logits.astype(np.float64) / temperature
    vocab = logits.shape[-1]
    if top_k is not None and 0 < top_k < vocab:
        kth = np.partition(logits, vocab - top_k, axis=-1)[:, vocab - top_k][:, None]
        logits = np.where(logits < kth, -np.inf, logits)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-logits, axis=-1, kind="stable")
        ranked = np.take_along_axis(logits, order, axis=-1)
        probs = np.exp(ranked - ranked[:, :1])
        probs /= probs.sum(-1, keepdims=True)
        before = np.cumsum(probs, axis=-1) - probs  # mass ranked above each token
        drop_ranked = before > top_p  # the first token is always kept (its mass above is 0)
        drop = np.zeros_like(drop_ranked)
        np.put_along_axis(drop, order, drop_ranked, axis=-1)
        logits = np.where(drop, -np.inf, logits)
    return logits


def _sample(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row drawn from ``softmax(logits)``."""
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    u = rng.random((logits.shape[0], 1))
    # Inverse CDF: the first token whose cumulative mass passes u (never one of mass 0).
    cdf = np.cumsum(probs, axis=-1)
    idx = (cdf < u * cdf[:, -1:]).sum(-1)
    return np.minimum(idx, logits.shape[-1] - 1).astype(np.int64)


class CompiledLM:
    """A decoder-only LM compiled by kiln, with its KV cache; see :func:`compile_lm`.

    ``step`` is the :class:`~kiln.runtime.CompiledModel` of
    :class:`kiln.lm.export.Step` (the prompt and each token); ``cache`` the
    :class:`KVCache`; ``timings`` the last run's time to first token and
    per-token decode times (seconds).
    """

    def __init__(self, step, cache: KVCache, pad_token_id: int = 0, vocab_size: int | None = None):
        self.step, self.cache = step, cache
        self.pad_token_id = pad_token_id
        self.vocab_size = vocab_size
        self.timings: dict = {}

    def report(self) -> dict:
        """The graph's report and the cache size: ``{"step": ..., "fallback_ops": n, "cache_bytes": n}``."""
        step = self.step.report()
        return {"step": step, "cache_bytes": self.cache.nbytes, "fallback_ops": step["fallback"]["ops"]}

    def _inputs(self, input_ids, attention_mask):
        ids = np.asarray(input_ids.detach().cpu().numpy() if hasattr(input_ids, "detach") else input_ids)
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise ShapeError(f"input_ids must be integer token ids [batch, length], got {ids.dtype} {ids.shape}")
        # An id past the embedding table would be read out of bounds by the compiled gather (torch raises too).
        if self.vocab_size is not None and ids.size and not 0 <= ids.min() <= ids.max() < self.vocab_size:
            bad = ids[(ids < 0) | (ids >= self.vocab_size)].flat[0]
            raise ShapeError(f"input_ids holds token id {bad}, outside the vocabulary [0, {self.vocab_size})")
        if attention_mask is None:
            mask = np.ones(ids.shape, np.int64)
        else:
            mask = np.asarray(attention_mask.detach().cpu().numpy() if hasattr(attention_mask, "detach")
                              else attention_mask)
            mask = mask[None] if mask.ndim == 1 else mask
            if mask.shape != ids.shape:
                raise ShapeError(f"attention_mask {mask.shape} must have the shape of input_ids {ids.shape}")
        return ids.astype(np.int64), (mask != 0).astype(np.int64)

    def stream(self, input_ids, max_new_tokens: int = 20, do_sample: bool = False, temperature: float = 1.0,
               top_k: int | None = None, top_p: float | None = None, eos_token_id=None, attention_mask=None,
               seed: int | None = None, generator: np.random.Generator | None = None,
               pad_token_id: int | None = None) -> Iterator[np.ndarray]:
        """Yield each step's new tokens (``[batch]`` int64) as they are produced.

        Arguments as :meth:`generate`.  A row that produced ``eos_token_id``
        continues with ``pad_token_id`` (default: the first eos id) and the
        stream ends when every row has finished or after ``max_new_tokens``.
        """
        ids, mask = self._inputs(input_ids, attention_mask)
        batch, length = ids.shape
        if batch > self.cache.max_batch:
            raise ShapeError(f"batch {batch} exceeds max_batch={self.cache.max_batch} given to kiln.compile_lm")
        if length + max_new_tokens - 1 > self.cache.max_len:
            raise ShapeError(f"prompt length {length} + max_new_tokens {max_new_tokens} exceeds "
                             f"max_len={self.cache.max_len} given to kiln.compile_lm")
        if do_sample and temperature <= 0:
            raise KilnError(f"temperature must be > 0 when sampling, got {temperature}")
        eos = [] if eos_token_id is None else [int(e) for e in np.atleast_1d(eos_token_id)]
        pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else self.pad_token_id)
        rng = generator if generator is not None else np.random.default_rng(seed)
        finished = np.zeros(batch, bool)
        self.timings = {"ttft_s": None, "decode_s": []}

        start = time.perf_counter()
        null = KVCache.NULL_SLOTS
        hidden = np.zeros((batch, null), np.int64)  # the null slot: masked for every query
        rows = self.cache.buffers(batch)  # written in place by each step at [P, P + L)
        logits = self.step(ids, hidden, mask, _positions(mask), *rows)
        mask = np.concatenate([hidden, mask], axis=1)  # past and new, as the cache holds them
        for step in range(max_new_tokens):
            if do_sample:
                token = _sample(_process_logits(logits, temperature, top_k, top_p), rng)
            else:
                token = np.argmax(logits, axis=-1).astype(np.int64)
            token = np.where(finished, pad, token)
            if eos:
                finished |= np.isin(token, eos)
            now = time.perf_counter()
            if step == 0:
                self.timings["ttft_s"] = now - start
            else:
                self.timings["decode_s"].append(now - start)
            yield token
            if finished.all() or step == max_new_tokens - 1:
                return
            start = time.perf_counter()
            new = np.ones((batch, 1), np.int64)
            positions = _positions(np.concatenate([mask, new], axis=1))[:, -1:]
            logits = self.step(token[:, None], mask, new, positions, *rows)
            mask = np.concatenate([mask, new], axis=1)

    def generate(self, input_ids, max_new_tokens: int = 20, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, eos_token_id=None, attention_mask=None,
                 seed: int | None = None, generator: np.random.Generator | None = None,
                 pad_token_id: int | None = None):
        """The prompt followed by up to ``max_new_tokens`` generated tokens, ``[batch, length + new]``.

        As ``transformers``' ``generate``: ``input_ids`` ``[batch, length]``
        (numpy or torch; the result is the same kind), ``attention_mask``
        (0 on left padding), greedy unless ``do_sample`` (then
        ``temperature``, ``top_k``, ``top_p``, drawn from ``generator`` or a
        numpy generator seeded with ``seed``), ``eos_token_id`` (an id or a
        list) ending a row, which then continues with ``pad_token_id``.
        """
        tokens = list(self.stream(input_ids, max_new_tokens, do_sample, temperature, top_k, top_p, eos_token_id,
                                  attention_mask, seed, generator, pad_token_id))
        ids, _ = self._inputs(input_ids, attention_mask)
        result = np.concatenate([ids, np.stack(tokens, axis=1)], axis=1) if tokens else ids
        if hasattr(input_ids, "detach"):
            import torch

            return torch.from_numpy(result)
        return result


def compile_lm(hf_model, max_batch: int = 8, max_len: int = 2048, **compile_options) -> CompiledLM:
    """Compile a ``transformers`` decoder-only LM for generation; returns a :class:`CompiledLM`.

    ``hf_model``: a ``*ForCausalLM`` (LLaMA, Qwen2, Mistral, GPT-2, Phi, ...)
    in eval mode.  ``max_batch`` / ``max_len`` bound the batch and the
    prompt plus generated tokens; the KV cache is allocated for them once.
    ``compile_options`` go to :func:`kiln.compile` for the step's graph.
    The step writes the cache in place: its cache inputs are donated to
    ``kiln.update_slice`` ops, so each step costs ``O(P)``, not ``O(max_len)``.
    """
    import kiln

    from . import export as lm_export

    if max_batch < 1:
        raise KilnError(f"kiln.compile_lm: max_batch must be at least 1, got {max_batch}")
    layers, kv_heads, head_dim = lm_export.cache_geometry(hf_model.config)
    ep, args, shapes = export_step(hf_model, max_batch, max_len)
    step = kiln.compile(ep, args, dynamic_shapes=shapes, **compile_options)
    np_dtype = args[-1].numpy().dtype
    cache = KVCache(layers, max_batch, kv_heads, max_len, head_dim, np_dtype)
    pad = getattr(hf_model.config, "pad_token_id", None)
    vocab = hf_model.get_input_embeddings().num_embeddings
    return CompiledLM(step, cache, pad_token_id=int(pad) if pad is not None else 0, vocab_size=vocab)


def export_step(hf_model, max_batch: int, max_len: int):
    """``(exported_program, example_args, dynamic_shapes)`` of :class:`kiln.lm.export.Step` for ``hf_model``.

    What :func:`compile_lm` compiles: the cache rows are example inputs of
    the whole preallocated length ``max_len + 1`` (static) and ``B``, ``L``,
    ``P`` are symbolic (:func:`kiln.lm.export.export_dims`).
    """
    import torch

    from . import export as lm_export

    layers, kv_heads, head_dim = lm_export.cache_geometry(hf_model.config)
    slots = max_len + KVCache.NULL_SLOTS
    batch_dim, length_dim, past_dim = lm_export.export_dims(max_batch, slots)
    dtype = next(hf_model.parameters()).dtype
    # Example dims of 2 (torch.export specializes dims seen as 0 or 1).
    ids = torch.zeros((2, 2), dtype=torch.long)
    # The cache rows: the whole preallocated length (static), written in place by the step.
    rows = tuple(torch.zeros((2, kv_heads, slots, head_dim), dtype=dtype) for _ in range(2 * layers))
    args = (ids, torch.zeros((2, 2), dtype=torch.long), torch.ones((2, 2), dtype=torch.long),
            torch.arange(2).expand(2, 2).contiguous(), *rows)
    shapes = ({0: batch_dim, 1: length_dim}, {0: batch_dim, 1: past_dim}, {0: batch_dim, 1: length_dim},
              {0: batch_dim, 1: length_dim}, tuple({0: batch_dim} for _ in rows))
    return _export(lm_export.Step(hf_model.eval()), args, shapes), args, shapes


def _export(module, args, dynamic_shapes):
    """``torch.export`` of ``module``, guards torch cannot prove kept as (later dropped) assertions."""
    import warnings

    import torch

    module = module.eval()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            # Deferred: torch cannot prove repeat_kv's contiguity guard over
            # cat(past, new) for all P (kiln.frontends.export_fixes.drop_runtime_asserts).
            ep = torch.export.export(module, args, dynamic_shapes=dynamic_shapes,
                                     prefer_deferred_runtime_asserts_over_guards=True)
    except Exception as e:  # torch raises many types; the user wants one
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise KilnError(f"kiln.compile_lm: torch.export failed for {type(module).__name__} of "
                        f"{type(module.model).__name__}: {type(e).__name__}: {first}") from None
    return ep
