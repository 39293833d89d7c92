"""``kiln-generate``: time generation of a random-weight LLaMA-style model with kiln.

    kiln-generate --layers 2 --hidden 256 --heads 8 --kv-heads 2 --prompt-len 64 --new-tokens 32
    kiln-generate --batch 4 --compare

Builds ``transformers.LlamaForCausalLM`` from the flags (random weights,
fp32), compiles it with :func:`kiln.compile_lm` and generates greedily from a
random prompt.  Prints the time to first token (the prefill and its token)
and the decode rate (tokens per second over the batch, median per-token
latency).  ``--compare`` also times ``transformers``' eager ``generate`` on
the same prompt and says whether the tokens are identical.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

__all__ = ["entry", "main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kiln-generate", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    p.add_argument("--hidden", type=int, default=256, help="hidden size (default 256)")
    p.add_argument("--heads", type=int, default=8, help="query heads (default 8)")
    p.add_argument("--kv-heads", type=int, default=None, help="key-value heads (default: --heads)")
    p.add_argument("--mlp", type=int, default=None, help="MLP size (default: 4 x hidden)")
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary size (default 32000)")
    p.add_argument("--prompt-len", type=int, default=32, help="prompt tokens per row (default 32)")
    p.add_argument("--new-tokens", type=int, default=32, help="tokens to generate (default 32)")
    p.add_argument("--batch", type=int, default=1, help="rows (default 1)")
    p.add_argument("--max-len", type=int, default=None, help="cache length (default: prompt + new tokens)")
    p.add_argument("--seed", type=int, default=0, help="weights and prompt seed (default 0)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs; the fastest is shown (default 3)")
    p.add_argument("--compare", action="store_true", help="also time transformers' eager generate")
    p.add_argument("--precision", choices=("fp32", "bf16", "int8-weights"), default="fp32",
                   help="kiln.compile's precision; other than fp32, the fp32 model is timed too, with the share of "
                        "greedy tokens that agree (default fp32)")
    return p


def _check(args) -> None:
    from ..errors import KilnError

    for name in ("layers", "hidden", "heads", "vocab", "prompt_len", "new_tokens", "batch"):
        if getattr(args, name) < 1:
            raise KilnError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    kv = args.kv_heads or args.heads
    if args.hidden % args.heads or args.heads % kv:
        raise KilnError(f"--hidden {args.hidden} must be a multiple of --heads {args.heads}, "
                        f"and --heads a multiple of --kv-heads {kv}")


def main(argv=None) -> int:
    """Parse ``argv``, compile, generate, print the timings; returns the exit status."""
    args = _parser().parse_args(argv)
    _check(args)
    from ..bench.torchvision_compat import define_torchvision_schemas

    define_torchvision_schemas()  # before transformers imports torchvision (docs/NOTES.md)
    import torch
    import transformers

    import kiln

    transformers.logging.set_verbosity_error()
    torch.manual_seed(args.seed)
    # No eos: every run generates --new-tokens tokens (LlamaConfig's default eos id is 2).
    config = transformers.LlamaConfig(eos_token_id=None,
        num_hidden_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads or args.heads, intermediate_size=args.mlp or 4 * args.hidden,
        vocab_size=args.vocab, max_position_embeddings=max(2048, args.prompt_len + args.new_tokens))
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    params = sum(p.numel() for p in model.parameters())
    max_len = args.max_len or args.prompt_len + args.new_tokens
    prompt = np.random.default_rng(args.seed).integers(0, args.vocab, (args.batch, args.prompt_len))
    start = time.perf_counter()
    lm = kiln.compile_lm(model, max_batch=args.batch, max_len=max_len, precision=args.precision)
    compile_s = time.perf_counter() - start
    tokens, best = _timed(lm, prompt, args)
    print(f"model: LLaMA-style, {args.layers} layers, hidden {args.hidden}, {args.heads} heads / "
          f"{args.kv_heads or args.heads} kv heads, vocab {args.vocab}, {params / 1e6:.1f} M parameters, fp32")
    print(f"kiln compile: {compile_s:.1f} s (fallback ops: {lm.report()['fallback_ops']}), "
          f"cache {lm.cache.nbytes / 2**20:.1f} MiB, precision {args.precision}")
    _print("kiln", args, *best)
    if args.precision != "fp32":
        fp32_tokens, fp32_best = _timed(kiln.compile_lm(model, max_batch=args.batch, max_len=max_len), prompt, args)
        _print("kiln fp32", args, *fp32_best)
        rates = [args.batch * len(b[1]) / sum(b[1]) if b[1] else 0.0 for b in (best, fp32_best)]
        free = tokens[:, args.prompt_len:] == fp32_tokens[:, args.prompt_len:]
        forced = _teacher_forced(lm, fp32_tokens, args.prompt_len) == fp32_tokens[:, args.prompt_len:]
        print(f"{args.precision} against fp32: decode {rates[0] / max(rates[1], 1e-12):.2f}x; greedy tokens agreeing "
              f"on {forced.mean() * 100:.1f}% of {forced.size} positions given fp32's prefix, "
              f"{free.mean() * 100:.1f}% generating freely")
    if args.compare:
        ids = torch.from_numpy(prompt)
        with torch.no_grad():
            model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0)
            eager_ttft = eager_total = float("inf")
            for _ in range(max(args.repeat, 1)):
                start = time.perf_counter()
                model.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=0)
                eager_ttft = min(eager_ttft, time.perf_counter() - start)
                start = time.perf_counter()
                want = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
                eager_total = min(eager_total, time.perf_counter() - start)
        per_token = (eager_total - eager_ttft) / max(args.new_tokens - 1, 1)
        print(f"transformers eager: time to first token {eager_ttft * 1e3:.2f} ms, decode "
              f"{args.batch / per_token:.1f} tokens/s (mean {per_token * 1e3:.2f} ms per step), total {eager_total:.3f} s")
        same = np.array_equal(want.numpy(), tokens)
        print(f"tokens identical to transformers: {'yes' if same else 'NO'}")
    return 0


def _timed(lm, prompt, args):
    """``(tokens, (ttft, steps, total))`` of the fastest of ``args.repeat`` runs (the least disturbed by other
    processes), after a warm-up (the first calls bind shapes and plan arenas)."""
    lm.generate(prompt, max_new_tokens=2)
    best = tokens = None
    for _ in range(max(args.repeat, 1)):
        start = time.perf_counter()
        tokens = lm.generate(prompt, max_new_tokens=args.new_tokens)
        total = time.perf_counter() - start
        if best is None or total < best[0]:
            best = (total, lm.timings["ttft_s"], lm.timings["decode_s"])
    return tokens, (best[1], best[2], best[0])


def _teacher_forced(lm, reference, prompt_len: int):
    """The greedy token ``lm`` picks at each generated position of ``reference`` given the reference's own
    prefix: one generation from each prefix.  Free-running tokens diverge for good after one near-tie (a
    random-weight model's logits are close), which says little about the numerics of the positions after."""
    return np.stack([lm.generate(reference[:, :t], max_new_tokens=1)[:, -1]
                     for t in range(prompt_len, reference.shape[1])], axis=1)


def _print(name, args, ttft, steps, total) -> None:
    if steps:
        median = statistics.median(steps)
        rate = args.batch * len(steps) / sum(steps)
        print(f"{name}: time to first token {ttft * 1e3:.2f} ms, decode {rate:.1f} tokens/s "
              f"(batch {args.batch}, median {median * 1e3:.2f} ms per step), total {total:.3f} s")
    else:
        print(f"{name}: time to first token {ttft * 1e3:.2f} ms, total {total:.3f} s")


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln-generate", main)


if __name__ == "__main__":
    entry()
