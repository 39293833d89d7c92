"""``kiln-bench``: kiln against PyTorch eager, torch.compile, ONNX Runtime and OpenVINO on the bench models.

Examples::

    kiln-bench --quick                         # the quick subset, < 2 minutes
    kiln-bench --workload real                 # BERT-base, GPT-2-small, a LLaMA-style decoder, ResNet-50,
                                               # MobileNetV2, ViT-S/16, the block in both spellings (long)
    kiln-bench --workload real --quick         # the same architectures in tiny configs (smoke run)
    kiln-bench --workload llm                  # text generation: TTFT, decode tokens/s, p50/p95, peak memory
    kiln-bench --workload real --workloads bert_base,resnet50 --peers kiln,onnxruntime,openvino
    kiln-bench --out bench/results             # everything: JSON, markdown, PNG
    kiln-bench --workloads mlp --peers kiln,onnxruntime
    kiln-bench --model pkg.module:factory --shape B=1 --shape B=32 [--json]
    kiln-bench --model model.onnx --symbol N=1:64 --shape N=8 --iters 200

``--workload real`` (issue 42) builds its models from transformers /
torchvision with random weights (kiln.bench.real), one compile per engine
serving every row, and adds OpenVINO (f32, and bf16 for information) to the
peers; its cold compiles start from empty caches with the export included.

``--workload llm`` (issue 37) generates greedily with a LLaMA-style
decoder of about 110 M parameters (kiln.bench.llm; ``--quick``: a tiny one)
in kiln (kiln.compile_lm), transformers eager, torch.compile with the
static cache and ONNX Runtime (the decoder exported with past inputs), each
in a process of its own, and gives each decode row its floor: the bytes a
step streams at this machine's measured streaming rate.

Writes ``<out>/bench.json``, ``<out>/bench.md`` and ``<out>/bench.png``
(the plot needs matplotlib) and prints the markdown table.

With ``--model`` it benchmarks that one model instead (a factory, an ONNX or
.mlir file, or an artifact directory; see kiln.bench.model_bench): the
compile time cold (empty temporary kernel cache) and warm, and per
``--shape`` (``B=8,L=128`` symbol values, or ``0=8x128`` / ``x=8x128`` an
input's dims) p50/p95/p99 latency of ``--iters`` calls after ``--warmup``,
calls/s and samples/s (with a batch symbol), the peak RSS while the shape
ran, the arena bytes and the kernel launches per call: a table on stdout, or
JSON with ``--json`` (also written to ``<out>/bench_model.json`` when
``--out`` is given).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import KilnError

__all__ = ["entry", "main"]


def _set_threads(threads: int) -> None:
    # OpenBLAS (numpy's, which kiln's library GEMM calls) reads these when it
    # is loaded, so they must be set before numpy is imported.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    from ..options import configure

    configure(threads=threads)  # kiln's native pool too (a bad count is a KilnError naming it)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(prog="kiln-bench", description=__doc__.replace("``", "").replace("::", ":"),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the quick subset of rows, short measurements")
    parser.add_argument("--workload", choices=("classic", "real", "llm"), default="classic",
                        help="the set of workloads: the classic bench rows (default), the real models of issue 42, "
                             "or text generation (llm)")
    parser.add_argument("--workloads", help="comma-separated workload names of the set (default: all)")
    parser.add_argument("--peers", help="comma-separated peers: kiln, kiln-bf16 (precision=\"bf16\"), eager, torch.compile, "
                                        "onnxruntime, openvino, openvino-bf16 (default: the first four; with --workload real all six; "
                                        "with --workload llm kiln, kiln-int8w, eager, torch.compile, onnxruntime)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for every peer, kiln's native pool included (default 2)")
    parser.add_argument("--budget", type=float, help="seconds of timed calls per measurement")
    parser.add_argument("--out", help="output folder (default bench/results, bench/results/real with --workload "
                                      "real; with --model: none)")
    parser.add_argument("--kiln-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a kiln.compile option (int values parsed), e.g. --kiln-option vectorize=0")
    parser.add_argument("--no-micro", action="store_true",
                        help="skip the GEMM-vs-numpy and per-call-overhead micro-benchmarks")
    parser.add_argument("--no-ceiling", action="store_true",
                        help="do not probe the machine's FMA peak and streaming rate (no floor per target)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    model = parser.add_argument_group("one model (--model)")
    model.add_argument("--model", metavar="MODEL",
                       help="benchmark this model: pkg.module:factory, model.onnx, model.mlir or an artifact dir")
    model.add_argument("--shape", action="append", default=[], metavar="SYM=N,...|INPUT=D0xD1...",
                       help="a shape to run at (repeatable): symbol values (B=8,L=128) and/or input dims "
                            "(0=8x128 or x=8x128); default: the factory's example shape, else each symbol's opt")
    model.add_argument("--symbol", action="append", default=[], metavar="NAME=MIN:MAX",
                       help="range of an ONNX dim_param symbol (repeatable)")
    model.add_argument("--iters", type=int, default=100, help="timed calls per shape (default 100)")
    model.add_argument("--warmup", type=int, default=10, help="untimed calls per shape first (default 10)")
    model.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    model.add_argument("--batch", metavar="SYM",
                       help="the batch symbol for samples/s (default: the first input's leading dim's symbol)")
    model.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    args = parser.parse_args(argv)
    _set_threads(args.threads)
    options = _options(args.kiln_option, parser)
    if args.model:
        return _bench_model(args, options)
    for flag in ("shape", "symbol"):
        if getattr(args, flag):
            parser.error(f"--{flag} needs --model")
    if args.json:
        parser.error("--json needs --model (the suite writes <out>/bench.json)")
    out = args.out or {"real": "bench/results/real", "llm": "bench/results/llm"}.get(args.workload, "bench/results")
    if args.workload == "llm":
        return _bench_llm(args, out)

    from ..bench.harness import run_benchmark
    from ..bench.peers import PEERS, REAL_PEERS
    from ..bench.report import markdown, plot
    from ..bench.workloads import WORKLOADS

    workloads = args.workloads.split(",") if args.workloads else None
    peers = args.peers.split(",") if args.peers else None
    if args.workload == "real":
        from ..bench.real import SPECS, real_workloads

        known = [s.name for s in SPECS]
        for w in workloads or []:
            if w not in known:
                parser.error(f"unknown real workload '{w}' (known: {', '.join(known)})")
        workloads = real_workloads(quick=args.quick, names=workloads)
        peers = peers or list(REAL_PEERS)
    for w in workloads or []:
        if isinstance(w, str) and w not in WORKLOADS:
            parser.error(f"unknown workload '{w}' (known: {', '.join(WORKLOADS)})")
    for p in peers or []:
        if p not in PEERS:
            parser.error(f"unknown peer '{p}' (known: {', '.join(PEERS)})")

    def log(msg):
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    result = run_benchmark(workloads, peers, quick=args.quick, threads=args.threads, budget_s=args.budget,
                           log=log, kiln_options=options, ceiling=not args.no_ceiling)
    if not args.no_micro and (peers is None or "kiln" in peers):
        from ..bench import micro

        log("== micro: GEMM vs numpy, per-call overhead")
        result["gemm"] = micro.gemm((256, 1024) if args.quick else (256, 512, 1024), budget_s=0.5 if args.quick else 1.5)
        result["overhead"] = micro.overhead(budget_s=0.5 if args.quick else 1.5)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    md = markdown(result)
    with open(os.path.join(out, "bench.md"), "w") as f:
        f.write(md)
    if not plot(result, os.path.join(out, "bench.png")):
        log("matplotlib is not installed: no plot")
    print(md)
    return 0


def _bench_llm(args, out: str) -> int:
    """``--workload llm``: the text-generation rows (kiln.bench.llm)."""
    from ..bench import llm

    if args.workloads:
        raise KilnError("--workload llm has one model: --workloads is for the other sets")
    peers = args.peers.split(",") if args.peers else list(llm.PEERS)
    for p in peers:
        if p not in llm.PEERS:
            raise KilnError(f"unknown LLM peer '{p}' (known: {', '.join(llm.PEERS)})")
    result = llm.run(quick=args.quick, peers=peers, threads=args.threads,
                     log=(lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)))
    md = llm.markdown(result)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    with open(os.path.join(out, "bench.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


def _options(pairs: list[str], parser) -> dict:
    """``--kiln-option KEY=VALUE`` as kiln.compile keywords (integer values parsed)."""
    options = {}
    for kv in pairs:
        key, eq, value = kv.partition("=")
        if not eq or not key:
            parser.error(f"--kiln-option expects KEY=VALUE, got '{kv}'")
        options[key] = int(value) if value.lstrip("-").isdigit() else value
    return options


def _bench_model(args, options: dict) -> int:
    """``kiln-bench --model``: the table (or JSON) on stdout."""
    from ..bench.model_bench import bench_model, format_table

    if args.workloads or args.peers or args.quick:
        raise KilnError("--model benchmarks one model: --workloads, --peers and --quick are for the suite")
    if args.iters < 1:
        raise KilnError(f"--iters must be at least 1, got {args.iters}")
    if args.warmup < 0:
        raise KilnError(f"--warmup must be at least 0, got {args.warmup}")

    def log(msg):
        if not args.quiet:
            print(f"kiln-bench: {msg}", file=sys.stderr, flush=True)

    result = bench_model(args.model, args.shape, symbols=args.symbol, iters=args.iters, warmup=args.warmup,
                         seed=args.seed, batch=args.batch, options=options, log=log)
    result["threads"] = args.threads
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_model.json"), "w") as f:
            f.write(text + "\n")
    print(text if args.json else format_table(result))
    return 0


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln-bench", main)


if __name__ == "__main__":
    entry()
