"""The measured effect of ``kiln-fuse``: kernel launches per call and latency.

    python bench/fusion.py [--models mlp transformer_block] [--repeat 50]

Each bench model (bench/models.py) is imported, optimized with
``kiln-default-cpu`` and compiled by ``kiln.compile`` (CPU) in three ways:

- ``unfused``: the default pipeline without ``kiln-fuse``, and
  ``kiln-partition`` told not to fuse either: one kernel per op;
- ``partition``: without ``kiln-fuse``; ``kiln-partition``'s own greedy rule
  (elementwise ops joining the kernel before them) still applies;
- ``kiln-fuse``: the full default pipeline (``matmul + bias + gelu`` is one
  ``kiln.fused`` kernel, and so on).

Kernel launches per call are the schedule's length; latency is the median
(and the minimum) of ``--repeat`` calls after warm-up, at one mid-range shape
per model, the variants called round-robin so machine load hits them alike.  Outputs
are checked against PyTorch first.  Prints a table and writes JSON with
``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Mid-range call shapes per model (symbols within the models' ranges).
SHAPES = {
    "mlp": lambda: (torch.randn(16, 1024),),
    "transformer_block": lambda: (torch.randn(4, 128, 256),),
    "tiny_mlp": lambda: (torch.randn(16, 16),),
}

VARIANTS = ("unfused", "partition", "kiln-fuse")


@contextlib.contextmanager
def _partition_fuse(enabled: bool):
    """kiln.compile runs kiln-partition with its defaults; flip the default
    of its ``fuse`` option for the ``unfused`` variant only."""
    from kiln.pipelines.registry import Option
    from kiln.transforms.partition import Partition

    saved = Partition.options
    Partition.options = tuple(
        Option(o.name, o.type, enabled, o.help) if o.name == "fuse" else o for o in saved
    )
    try:
        yield
    finally:
        Partition.options = saved


def _optimized_text(module, variant: str) -> tuple[str, dict]:
    from kiln._mlir import ir
    from kiln.pipelines import Pipeline

    with module.context, ir.Location.unknown():
        without = [] if variant == "kiln-fuse" else ["kiln-fuse"]
        p = Pipeline.named("kiln-default-cpu", without=without)
        p.run(module)
        return str(module), p.statistics()


def _measure(models, args, repeat: int) -> list[tuple[float, float]]:
    """(median, min) seconds per call of each model; calls go round-robin
    across the models so that load on the machine affects them alike."""
    for m in models:
        for _ in range(3):
            m(*args)
    times = [[] for _ in models]
    for _ in range(repeat):
        for m, ts in zip(models, times):
            t0 = time.perf_counter()
            m(*args)
            ts.append(time.perf_counter() - t0)
    return [(statistics.median(ts), min(ts)) for ts in times]


def bench_model(name: str, repeat: int) -> list[dict]:
    """One row per variant: launches per call, latency, fused groups, max error."""
    from models import FACTORIES

    import kiln

    torch.manual_seed(0)
    mod, example, dynamic = FACTORIES[name]()
    args = SHAPES[name]()
    with torch.no_grad():
        want = mod(*args).numpy()
    np_args = [a.numpy() for a in args]
    rows, models = [], []
    for variant in VARIANTS:
        module = kiln.import_torch(mod, example, dynamic)
        text, stats = _optimized_text(module, variant)
        with _partition_fuse(variant != "unfused"):
            compiled = kiln.compile(text, optimize=False)
        got = np.asarray(compiled(*np_args))
        models.append(compiled)
        rows.append({
            "model": name,
            "variant": variant,
            "shape": [list(a.shape) for a in args],
            "launches_per_call": len(compiled.schedule),
            "fused_groups": stats.get("kiln-fuse", {}).get("groups fused", 0),
            "max_abs_error": float(np.abs(got - want).max()),
        })
    for row, (median, best) in zip(rows, _measure(models, np_args, repeat)):
        row["latency_ms"] = median * 1e3
        row["min_latency_ms"] = best * 1e3
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["mlp", "transformer_block"], choices=sorted(SHAPES))
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models:
        rows += bench_model(name, args.repeat)
    print(f"{'model':<18} {'variant':<10} {'launches':>8} {'median ms':>10} {'min ms':>9} {'groups':>6} {'max err':>9}")
    for r in rows:
        print(f"{r['model']:<18} {r['variant']:<10} {r['launches_per_call']:>8} {r['latency_ms']:>10.3f} "
              f"{r['min_latency_ms']:>9.3f} {r['fused_groups']:>6} {r['max_abs_error']:>9.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
