"""Worker pairs: two versions or settings of kiln timed in alternating bursts.

On a shared machine a model's latency moves by 1.5x within minutes, so a
change's gain shows only when both sides run side by side: two long-lived
worker processes, each importing its own kiln (``--a-path`` / ``--b-path``: a
directory holding a ``kiln`` package, such as a ``git worktree`` of the base
commit) or running with its own environment (``--a-env`` / ``--b-env``,
``NAME=VALUE``), compile the workload once and then time bursts in turn, the
order alternating by round. Per row: each side's median of its burst medians,
and B/A as the median of the per-round ratios, with the rounds B won::

    git worktree add /tmp/base/kiln <rev>
    python -m kiln.bench.pairs transformer_block B=4,L=128 B=8,L=512 --a-path /tmp/base
    python -m kiln.bench.pairs mlp B=64 --a-env KILN_SMALL_M=4096
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Side", "main", "pair"]

# The worker: compile the workload, then for each request "<row> <calls>"
# answer with the median of that many timed calls (two untimed first).
_WORKER = r"""
import json, sys, time
import numpy as np
import kiln
from kiln.bench.peers import onnx_file
from kiln.bench.workloads import WORKLOADS
w = WORKLOADS[sys.argv[1]]
if w.factory is not None:
    module, args, dynamic = w.torch_model()
    model = kiln.compile(module, args, dynamic_shapes=dynamic)
else:
    model = kiln.compile(onnx_file(w))
inputs = {r.label: r.inputs() for r in w.rows}
print("ready", flush=True)
for line in sys.stdin:
    label, calls = line.split()
    x = inputs[label]
    model(*x), model(*x)
    times = []
    for _ in range(int(calls)):
        t0 = time.perf_counter()
        model(*x)
        times.append(time.perf_counter() - t0)
    print(json.dumps(float(np.median(times))), flush=True)
"""


@dataclass
class Side:
    """One side of a pair: where its kiln comes from and what its environment adds."""

    path: str | None = None  # a directory holding a kiln package (PYTHONPATH), or this kiln
    env: dict = field(default_factory=dict)

    def start(self, workload: str) -> subprocess.Popen:
        """A worker that has compiled ``workload`` and waits for requests."""
        env = dict(os.environ, **self.env)
        if self.path:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [self.path, env.get("PYTHONPATH")]))
        proc = subprocess.Popen([sys.executable, "-c", _WORKER, workload], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = proc.stdout.readline().strip()
        if line != "ready":
            proc.kill()
            raise RuntimeError(f"worker for {workload} ({self}) did not start: {proc.stderr.read()[-2000:]}")
        return proc


def _burst(proc: subprocess.Popen, label: str, calls: int) -> float:
    proc.stdin.write(f"{label} {calls}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


#: Seconds a burst lasts at least when its calls are not given: after each
#: gap the first calls of a burst run slow (the pool's workers asleep, the
#: cores idle), and bursts of ten 0.23 ms calls read the same code 0.43 and
#: 0.26 ms on the two sides (0.23 / 0.24 with 200 calls).
BURST_S = 0.05


def pair(workload: str, labels: list[str], a: Side, b: Side, rounds: int = 12, calls: int | None = None,
         gap_s: float = 0.05) -> list[dict]:
    """Time ``labels`` (rows of ``workload``) on both sides in alternating
    bursts of ``calls`` calls (default: enough for :data:`BURST_S` seconds,
    at least 10, from a first burst of each side); one dict per row:
    ``a_ms``, ``b_ms``, ``ratio`` (B/A, median of the rounds' ratios),
    ``b_won`` (rounds where B was faster) and ``calls``."""
    from .workloads import WORKLOADS

    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r} (one of {', '.join(WORKLOADS)})")
    known = [r.label for r in WORKLOADS[workload].rows]
    for label in labels:
        if label not in known:
            raise ValueError(f"{workload} has no row {label!r} (rows: {', '.join(known)})")
    procs = {"a": a.start(workload), "b": b.start(workload)}
    try:
        out = []
        for label in labels:
            n = calls
            if n is None:
                slowest = max(_burst(procs[side], label, 5) for side in ("a", "b"))
                n = max(10, math.ceil(BURST_S / max(slowest, 1e-6)))
            t = {"a": [], "b": []}
            for r in range(rounds):
                for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                    t[side].append(_burst(procs[side], label, n))
                    time.sleep(gap_s)  # let the other side's spinning threads settle
            ta, tb = np.array(t["a"]), np.array(t["b"])
            out.append({"row": label, "a_ms": float(np.median(ta) * 1e3), "b_ms": float(np.median(tb) * 1e3),
                        "ratio": float(np.median(tb / ta)), "b_won": int((tb < ta).sum()), "rounds": rounds,
                        "calls": n})
        return out
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def _env(items: list[str]) -> dict:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--a-env / --b-env take NAME=VALUE, got {item!r}")
        env[name] = value
    return env


def main(argv: list[str] | None = None) -> int:
    """The command line (``python -m kiln.bench.pairs --help``)."""
    p = argparse.ArgumentParser(prog="python -m kiln.bench.pairs", description=__doc__.split("\n\n")[0])
    p.add_argument("workload")
    p.add_argument("rows", nargs="+", help="row labels, e.g. B=1 or B=4,L=128")
    p.add_argument("--a-path", help="directory holding side A's kiln package (default: this kiln)")
    p.add_argument("--b-path", help="directory holding side B's kiln package (default: this kiln)")
    p.add_argument("--a-env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--b-env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--calls", type=int, default=None,
                   help=f"timed calls per burst (default: enough for {BURST_S} s, at least 10)")
    args = p.parse_args(argv)
    try:
        a, b = Side(args.a_path, _env(args.a_env)), Side(args.b_path, _env(args.b_env))
        results = pair(args.workload, args.rows, a, b, rounds=args.rounds, calls=args.calls)
    except (ValueError, RuntimeError) as e:
        print(f"pairs: error: {e}", file=sys.stderr)
        return 2
    for r in results:
        print(f"{args.workload} {r['row']}: A {r['a_ms']:.3f} ms  B {r['b_ms']:.3f} ms  "
              f"B/A {r['ratio']:.3f} (B faster in {r['b_won']}/{r['rounds']} rounds of {r['calls']} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
