"""``kiln-bench``: kiln against PyTorch eager, torch.compile and ONNX Runtime on the bench models.

Examples::

    kiln-bench --quick                         # the quick subset, < 2 minutes
    kiln-bench --out bench/results             # everything: JSON, markdown, PNG
    kiln-bench --workloads mlp --peers kiln,onnxruntime

Writes ``<out>/bench.json``, ``<out>/bench.md`` and ``<out>/bench.png``
(the plot needs matplotlib) and prints the markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["entry", "main"]


def _set_threads(threads: int) -> None:
    # OpenBLAS (numpy's, which kiln's library GEMM calls) reads these when it
    # is loaded, so they must be set before numpy is imported.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(prog="kiln-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick subset of rows, short measurements")
    parser.add_argument("--workloads", help="comma-separated workload names (default: all)")
    parser.add_argument("--peers", help="comma-separated peers: kiln, eager, torch.compile, onnxruntime")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for every peer (default 2)")
    parser.add_argument("--budget", type=float, help="seconds of timed calls per measurement")
    parser.add_argument("--out", default="bench/results", help="output folder (default bench/results)")
    parser.add_argument("--kiln-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a kiln.compile option (int values parsed), e.g. --kiln-option vectorize=0")
    parser.add_argument("--no-micro", action="store_true",
                        help="skip the GEMM-vs-numpy and per-call-overhead micro-benchmarks")
    parser.add_argument("--no-ceiling", action="store_true",
                        help="do not probe the machine's FMA peak and streaming rate (no floor per target)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    _set_threads(args.threads)

    from ..bench.harness import run_benchmark
    from ..bench.peers import PEERS
    from ..bench.report import markdown, plot
    from ..bench.workloads import WORKLOADS

    workloads = args.workloads.split(",") if args.workloads else None
    peers = args.peers.split(",") if args.peers else None
    for w in workloads or []:
        if w not in WORKLOADS:
            parser.error(f"unknown workload '{w}' (known: {', '.join(WORKLOADS)})")
    for p in peers or []:
        if p not in PEERS:
            parser.error(f"unknown peer '{p}' (known: {', '.join(PEERS)})")
    options = {}
    for kv in args.kiln_option:
        key, _, value = kv.partition("=")
        options[key] = int(value) if value.lstrip("-").isdigit() else value

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
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    md = markdown(result)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(md)
    if not plot(result, os.path.join(args.out, "bench.png")):
        log("matplotlib is not installed: no plot")
    print(md)
    return 0


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln-bench", main)


if __name__ == "__main__":
    entry()
