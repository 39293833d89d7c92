"""Text generation rows (``kiln-bench --workload llm``, issue 37).

One LLaMA-style decoder nobody will mistake for a toy (:data:`FULL`: 12
layers, hidden 768, 12 query / 4 key-value heads, MLP 2048, vocabulary
32000, about 110 M parameters, random weights, fp32), or its tiny twin
with ``--quick``, generated greedily by each peer:

- ``kiln``: :func:`kiln.compile_lm` and its ``stream``;
- ``eager``: ``transformers`` ``generate`` (its dynamic cache);
- ``torch.compile``: ``generate`` with transformers' static cache and the
  model's ``forward`` under ``torch.compile``;
- ``onnxruntime``: the decoder exported to ONNX twice (prefill without a
  past; decode with past key / value inputs and present outputs, the form
  Optimum exports), driven by the same greedy loop.

Rows: time to first token for prompts of 128 and 512 tokens at B = 1;
decode tokens/s at B = 1 and B = 8 over 128 new tokens after a 128-token
prompt, with p50 / p95 per-token latency.  Each peer runs in a process of
its own, so its peak resident memory (``ru_maxrss``) is its own; the row
gives it next to the bytes of the weights and of a full KV cache.

Each decode row has a floor: the bytes one step must stream (every weight
once, the embedding table aside, plus the keys and values of the past, at
the middle of the generated span) at the streaming rate measured on this
machine in the same run (:mod:`kiln.bench.ceiling`; probed before the
first peer and after each, the best kept).  No engine decodes a token much
faster than that on this machine (the last-level cache holds a little of
the weights).
"""

from __future__ import annotations

import multiprocessing
import resource
import time
from dataclasses import asdict, dataclass

import numpy as np

from .model_bench import rss_bytes

__all__ = ["FULL", "QUICK", "LlmSpec", "PEERS", "markdown", "run"]


@dataclass(frozen=True)
class LlmSpec:
    """The decoder's shape and the rows' sizes."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    mlp: int
    vocab: int
    prompts: tuple[int, ...]  # time-to-first-token rows, B = 1
    batches: tuple[int, ...]  # decode rows
    decode_prompt: int
    new_tokens: int

    @classmethod
    def from_dict(cls, data: dict) -> LlmSpec:
        """The spec from :func:`dataclasses.asdict` (or its JSON: lists back to tuples)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    @property
    def max_len(self) -> int:
        """Positions the caches must hold: the longest prompt or a decode row's whole sequence."""
        return max(*self.prompts, self.decode_prompt + self.new_tokens) + 2  # + a warm-up's 2 tokens

    def config(self):
        """The ``transformers`` ``LlamaConfig``."""
        import transformers

        return transformers.LlamaConfig(
            num_hidden_layers=self.layers, hidden_size=self.hidden, num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads, intermediate_size=self.mlp, vocab_size=self.vocab,
            max_position_embeddings=max(2048, self.max_len), tie_word_embeddings=False)

    def kv_bytes(self, batch: int, positions: int) -> int:
        """Bytes of the keys and values of ``positions`` past tokens (fp32)."""
        return 2 * self.layers * batch * self.kv_heads * (self.hidden // self.heads) * positions * 4


FULL = LlmSpec(12, 768, 12, 4, 2048, 32000, prompts=(128, 512), batches=(1, 8), decode_prompt=128, new_tokens=128)
QUICK = LlmSpec(2, 64, 4, 2, 128, 512, prompts=(16, 32), batches=(1, 3), decode_prompt=16, new_tokens=8)

#: Repetitions of each time-to-first-token measurement (the median is kept).
TTFT_REPS = 3


def build_model(spec: LlmSpec, seed: int = 0):
    """The model with seeded random weights, in eval mode."""
    import torch

    from .torchvision_compat import define_torchvision_schemas

    define_torchvision_schemas()  # before transformers imports the registry's torchvision wheel
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(spec.config()).eval()
    global _model_rss_mb
    rss = rss_bytes()
    _model_rss_mb = rss / 2**20 if rss is not None else None
    return model


#: The process's resident MiB right after :func:`build_model` last built a model.
_model_rss_mb: float | None = None


def prompt_ids(spec: LlmSpec, batch: int, length: int, seed: int = 1) -> np.ndarray:
    """Deterministic prompts (int64 token ids)."""
    return np.random.default_rng(seed).integers(0, spec.vocab, size=(batch, length), dtype=np.int64)


# --- the peers: each turns prompts into a stream of greedy tokens -------------------------------


class _TimedStreamer:
    """A ``transformers`` streamer that timestamps each generated token
    (``generate`` puts the prompt first, then one token per step)."""

    def __init__(self):
        self.times: list[float] = []
        self.tokens: list[np.ndarray] = []
        self._prompt_seen = False

    def put(self, value):
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter())
        self.tokens.append(value.reshape(-1).numpy().copy())

    def end(self):
        pass


class _HfPeer:
    """``transformers`` ``generate``, eager or with the static cache compiled."""

    def __init__(self, spec: LlmSpec, compiled: bool):
        import torch

        self.model = build_model(spec)
        self.torch = torch
        self.kwargs = {}
        if compiled:
            self.model.forward = torch.compile(self.model.forward)
            self.kwargs = {"cache_implementation": "static"}

    def generate(self, ids: np.ndarray, new_tokens: int):
        """Yield ``(time, tokens [B])`` per generated token."""
        from transformers.generation.streamers import BaseStreamer

        streamer = type("Streamer", (_TimedStreamer, BaseStreamer), {})()
        x = self.torch.from_numpy(ids)
        with self.torch.inference_mode():
            self.model.generate(x, attention_mask=self.torch.ones_like(x), max_new_tokens=new_tokens,
                                min_new_tokens=new_tokens, do_sample=False, streamer=streamer,
                                pad_token_id=0, **self.kwargs)
        yield from zip(streamer.times, streamer.tokens)


class _KilnPeer:
    """:func:`kiln.compile_lm` (at ``precision``) and its token stream."""

    def __init__(self, spec: LlmSpec, precision: str = "fp32"):
        import kiln

        self.lm = kiln.compile_lm(build_model(spec), max_batch=max(spec.batches), max_len=spec.max_len,
                                  precision=precision)

    def generate(self, ids: np.ndarray, new_tokens: int):
        for tokens in self.lm.stream(ids, max_new_tokens=new_tokens):  # no eos id: every row runs to the end
            yield time.perf_counter(), np.asarray(tokens).reshape(-1)


class _OrtPeer:
    """ONNX Runtime on the decoder exported with past inputs, a greedy loop
    in numpy around it (the present keys / values fed back as the past)."""

    def __init__(self, spec: LlmSpec, threads: int):
        import tempfile

        import onnxruntime as ort

        from .llm_onnx import export_decoder

        folder = tempfile.mkdtemp(prefix="kiln-bench-llm-")
        self.prefill_path, self.decode_path = export_decoder(build_model(spec), folder)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.prefill = ort.InferenceSession(self.prefill_path, opts, providers=["CPUExecutionProvider"])
        self.decode = ort.InferenceSession(self.decode_path, opts, providers=["CPUExecutionProvider"])

    def generate(self, ids: np.ndarray, new_tokens: int):
        b, n = ids.shape
        mask = np.ones((b, n), np.int64)
        logits, *past = self.prefill.run(None, {"input_ids": ids, "attention_mask": mask})
        names = [i.name for i in self.decode.get_inputs()]
        for step in range(new_tokens):
            token = logits.argmax(-1).astype(np.int64)
            yield time.perf_counter(), token
            if step == new_tokens - 1:
                break
            mask = np.ones((b, n + step + 1), np.int64)
            feed = dict(zip(names, [token[:, None], mask, *past]))
            logits, *past = self.decode.run(None, feed)


#: "kiln-int8w": kiln with ``precision="int8-weights"`` (weight-only int8; its tokens differ from fp32's
#: where logits nearly tie, so its rows are not in the "kiln / best peer" ratio).
PEERS = ("kiln", "kiln-int8w", "eager", "torch.compile", "onnxruntime")


def _make_peer(name: str, spec: LlmSpec, threads: int):
    if name == "kiln":
        return _KilnPeer(spec)
    if name == "kiln-int8w":
        return _KilnPeer(spec, precision="int8-weights")
    if name in ("eager", "torch.compile"):
        return _HfPeer(spec, compiled=name == "torch.compile")
    if name == "onnxruntime":
        return _OrtPeer(spec, threads)
    raise ValueError(f"unknown LLM peer '{name}' (known: {', '.join(PEERS)})")


# --- one peer's measurements, in a process of its own -------------------------------------------


def _timed(peer, ids: np.ndarray, new_tokens: int) -> tuple[float, list[float], np.ndarray]:
    """(time to first token in s, per-token step times in s, tokens [B, n])."""
    start = time.perf_counter()
    stamps, tokens = [], []
    for t, tok in peer.generate(ids, new_tokens):
        stamps.append(t)
        tokens.append(tok)
    steps = np.diff([start, *stamps]).tolist()
    return steps[0], steps[1:], np.stack(tokens, axis=1)


def _peer_main(name: str, spec_d: dict, threads: int, conn) -> None:
    spec = LlmSpec.from_dict(spec_d)
    out = {"peer": name}
    try:
        import torch

        torch.set_num_threads(threads)
        import os

        os.environ.setdefault("KILN_THREADS", str(threads))
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        peer = _make_peer(name, spec, threads)
        out["setup_s"] = time.perf_counter() - t
        # Every row runs once untimed first: torch.compile compiles per
        # shape, kiln may specialise, ONNX Runtime plans its first calls.
        ttft = {}
        for n in spec.prompts:
            ids = prompt_ids(spec, 1, n)
            _timed(peer, ids, 2)
            ttft[n] = float(np.median([_timed(peer, ids, 1)[0] for _ in range(TTFT_REPS)]))
        out["ttft_s"] = ttft
        decode = {}
        for b in spec.batches:
            ids = prompt_ids(spec, b, spec.decode_prompt)
            _timed(peer, ids, spec.new_tokens)
            _, steps, tokens = _timed(peer, ids, spec.new_tokens)
            steps_arr = np.asarray(steps)
            decode[b] = {"tokens_per_s": b * len(steps) / steps_arr.sum(), "p50_ms": float(np.percentile(steps_arr, 50)) * 1e3,
                         "p95_ms": float(np.percentile(steps_arr, 95)) * 1e3, "tokens": tokens.tolist()}
        out["decode"] = decode
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out["rss_before_mb"] = rss0 / 1024
        out["model_rss_mb"] = _model_rss_mb  # with the torch model built, before the peer's own work
        if isinstance(peer, _KilnPeer):  # what kiln holds: the weights it passes, packed copies, the cache
            r = peer.lm.report()
            out["held_mb"] = (r["step"]["weights"]["runtime_bytes"] + r["step"]["native"]["packed_bytes"]
                              + r["cache_bytes"]) / 2**20
    except Exception as e:  # noqa: BLE001 (a peer's failure is a cell of the table, not the run's end)
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    conn.send(out)
    conn.close()


def _run_peer(name: str, spec: LlmSpec, threads: int, timeout_s: float) -> dict:
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_peer_main, args=(name, asdict(spec), threads, send))
    proc.start()
    send.close()
    out = recv.recv() if recv.poll(timeout_s) else {"peer": name, "error": f"timed out after {timeout_s:.0f} s"}
    proc.join(5)
    if proc.is_alive():
        proc.kill()
    return out


def run(*, quick: bool = False, peers=None, threads: int = 2, timeout_s: float = 3600, log=print) -> dict:
    """Every peer's rows, the machine's streaming rate and each decode row's floor."""
    spec = QUICK if quick else FULL
    peers = list(peers or PEERS)
    model = build_model(spec)
    params = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()
    streamed = (params - embed) * 4  # one step reads every weight but the embedding table (B rows of it)
    del model
    result = {"spec": asdict(spec), "threads": threads, "parameters": params, "weight_bytes": params * 4,
              "streamed_bytes": streamed, "peers": {}}
    from .ceiling import Ceiling

    # The streaming rate before the first peer and after each (a shared
    # host's rate moves: one probe read 8.3 GB/s where the next read 17.8,
    # which made the floor no floor); the best is the machine's.
    probes = Ceiling.build(threads)
    rates = result["stream_gbps_probes"] = []
    if probes is not None:
        rates.append(probes.stream_gbps(streamed))
    for name in peers:
        log(f"== llm: {name}")
        result["peers"][name] = _run_peer(name, spec, threads, timeout_s)
        if "error" in result["peers"][name]:
            log(f"   {name}: {result['peers'][name]['error']}")
        if probes is not None:
            rates.append(probes.stream_gbps(streamed))
    if probes is not None:
        probes.close()
        result["stream_gbps"] = max(rates)
    gbps = result.get("stream_gbps")
    mid = spec.decode_prompt + spec.new_tokens // 2
    result["floor_tokens_per_s"] = {
        b: b / ((streamed + spec.kv_bytes(b, mid)) / (gbps * 1e9)) for b in spec.batches} if gbps else {}
    ref = result["peers"].get("eager", {}).get("decode")
    for peer in result["peers"].values():  # greedy tokens agreeing with eager's, per decode row
        for b, row in (peer.get("decode") or {}).items():
            if ref and b in ref:
                row["agree_with_eager"] = float(np.mean(np.asarray(row["tokens"]) == np.asarray(ref[b]["tokens"])))
    return result


def markdown(result: dict) -> str:
    """The rows as a table, with ratios of kiln to each peer and to the floor."""
    spec = LlmSpec.from_dict(result["spec"])
    peers = result["peers"]
    lines = [f"LLaMA-style decoder: {spec.layers} layers, hidden {spec.hidden}, {spec.heads}/{spec.kv_heads} heads, "
             f"MLP {spec.mlp}, vocab {spec.vocab} ({result['parameters'] / 1e6:.0f} M parameters, fp32), "
             f"{result['threads']} threads; streaming rate "
             + (f"{result['stream_gbps']:.1f} GB/s" if result.get("stream_gbps") else "not measured"), ""]
    lines += ["| row | " + " | ".join(peers) + " | kiln / best peer | floor |",
              "|---|" + "---|" * (len(peers) + 2)]

    def cell(v, fmt):
        return "error" if v is None else fmt.format(v)

    for n in spec.prompts:
        vals = {p: (r.get("ttft_s") or {}).get(n) for p, r in peers.items()}
        vals = {p: None if v is None else v * 1e3 for p, v in vals.items()}
        lines.append(f"| TTFT ms, prompt {n}, B=1 | " + " | ".join(cell(v, "{:.1f}") for v in vals.values())
                     + f" | {_ratio(vals, lower=True)} | |")
    floors = result.get("floor_tokens_per_s") or {}
    for b in spec.batches:
        rows = {p: (r.get("decode") or {}).get(b) for p, r in peers.items()}
        tps = {p: None if r is None else r["tokens_per_s"] for p, r in rows.items()}
        floor = floors.get(b)
        lines.append(f"| decode tok/s, B={b} | " + " | ".join(cell(v, "{:.1f}") for v in tps.values())
                     + f" | {_ratio(tps, lower=False)} | " + (f"{floor:.1f}" if floor else "") + " |")
        for q in ("p50_ms", "p95_ms"):
            vals = {p: None if r is None else r[q] for p, r in rows.items()}
            lines.append(f"| {q[:3]} ms/token, B={b} | " + " | ".join(cell(v, "{:.1f}") for v in vals.values())
                         + f" | {_ratio(vals, lower=True)} | |")
    mem = {p: r.get("peak_rss_mb") for p, r in peers.items()}
    kv = spec.kv_bytes(max(spec.batches), spec.max_len) / 2**20
    lines.append("| peak RSS MiB | " + " | ".join(cell(v, "{:.0f}") for v in mem.values())
                 + f" | | weights {result['weight_bytes'] / 2**20:.0f} + cache {kv:.0f} |")
    over = {p: None if r.get("peak_rss_mb") is None or r.get("model_rss_mb") is None
            else r["peak_rss_mb"] - r["model_rss_mb"] for p, r in peers.items()}
    lines.append("| peak RSS over the built torch model MiB | " + " | ".join(cell(v, "{:.0f}") for v in over.values())
                 + " | | |")
    held = {p: r.get("held_mb") for p, r in peers.items()}
    if any(v is not None for v in held.values()):
        lines.append("| held by kiln MiB (weights passed, packed copies, KV cache) | "
                     + " | ".join("" if v is None else f"{v:.0f}" for v in held.values()) + " | | |")
    errors = [f"- {p}: {r['error']}" for p, r in peers.items() if r.get("error")]
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def _ratio(vals: dict, lower: bool) -> str:
    """kiln's value over the best other peer's (a time: lower is better; a rate: kiln / best); kiln's own
    variants (another precision) are not peers."""
    mine = vals.get("kiln")
    others = [v for p, v in vals.items() if not p.startswith("kiln") and v is not None]
    if mine is None or not others:
        return ""
    best = min(others) if lower else max(others)
    return f"{mine / best:.2f}x"
