"""Run ONNX's backend node cases through ``kiln.compile(..., fallback=False)``.

    python -m kiln.tools.onnx_conformance [-j N] [-k SUBSTRING] [-v] [--timeout S]

The cases ship inside the ``onnx`` package (``onnx/backend/test/data/node``):
each is a one-node model (or its function expansion, ``*_expanded``) with
input and expected output data sets.  A case is *in scope* when every node is
one of :data:`OPS` (the ai.onnx inference core kiln supports) and its graph
inputs and outputs are fp32 / int32 / int64 / bool tensors.  A case *passes*
when it compiles with fallback disabled and every data set's outputs match
(shape exactly, values within ``rtol=1e-3, atol=1e-5``; ONNX's own backend
runner uses ``rtol=1e-3``).  Integer graph inputs are passed as they are: a
shape, axes or pads input is a *shape input* of the compiled model.

Each case runs in a worker process, so a crash or hang in one case is a
reported failure (``crash`` / ``timeout``), never the end of the run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import traceback
import warnings
from dataclasses import dataclass

#: The ai.onnx op types of the inference core (issue 36's list).
OPS = frozenset("""
Add Sub Mul Div Pow Sqrt Reciprocal Neg Abs Exp Log Erf Sin Cos Floor Ceil Min Max Sum Mean Clip Equal Less
Greater LessOrEqual GreaterOrEqual Not And Or Where Relu LeakyRelu PRelu Sigmoid Tanh Elu Selu Gelu HardSigmoid
HardSwish Softplus MatMul Gemm Conv ConvTranspose MaxPool AveragePool GlobalAveragePool GlobalMaxPool
BatchNormalization InstanceNormalization LayerNormalization GroupNormalization LRN ReduceMean ReduceSum ReduceMax
ReduceMin ReduceProd ReduceL2 ArgMax ArgMin Softmax LogSoftmax Reshape Transpose Concat Slice Gather GatherElements
Split Squeeze Unsqueeze Flatten Expand Tile Pad Resize Trilu ScatterND Shape Size Cast CastLike Constant
ConstantOfShape Range Identity Dropout
""".split())

#: ONNX TensorProto element types in scope: FLOAT, INT32, INT64, BOOL.
ELEM_TYPES = frozenset({1, 6, 7, 9})

RTOL, ATOL = 1e-3, 1e-5


@dataclass
class Outcome:
    """One case's result: ``status`` is pass / fail / wrong-shape / error / crash / timeout."""

    name: str
    status: str
    reason: str = ""
    seconds: float = 0.0


def _in_scope(case) -> bool:
    graph = case.model.graph
    if not graph.node:
        return False
    if not all(n.op_type in OPS and n.domain in ("", "ai.onnx") for n in graph.node):
        return False
    for vi in list(graph.input) + list(graph.output):
        if not vi.type.HasField("tensor_type") or vi.type.tensor_type.elem_type not in ELEM_TYPES:
            return False
    return bool(case.data_sets)


def cases(substring: str | None = None) -> list:
    """The in-scope node cases (``onnx.backend.test.case.node`` objects), by name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        found = [c for c in collect_testcases() if _in_scope(c)]
    if substring:
        found = [c for c in found if substring in c.name]
    return sorted(found, key=lambda c: c.name)


def run_case(case) -> Outcome:
    """Compile ``case`` with fallback disabled and check every data set."""
    import numpy as np

    import kiln

    start = time.perf_counter()
    try:
        compiled = kiln.compile(case.model, device="cpu", fallback=False)
        for inputs, expected in case.data_sets:
            got = compiled(*[np.asarray(v) for v in inputs])
            got = list(got) if isinstance(got, (list, tuple)) else [got]
            if len(got) != len(expected):
                return Outcome(case.name, "fail", f"{len(got)} outputs, expected {len(expected)}")
            for i, (g, w) in enumerate(zip(got, expected)):
                g, w = np.asarray(g), np.asarray(w)
                if g.shape != w.shape:
                    return Outcome(case.name, "wrong-shape", f"output {i}: shape {g.shape}, expected {w.shape}")
                if w.dtype == bool or np.issubdtype(w.dtype, np.integer):
                    ok = np.array_equal(g, w)
                else:
                    ok = np.allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True)
                if not ok:
                    err = np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))) if g.size else 0.0
                    return Outcome(case.name, "fail", f"output {i}: values differ (max abs error {err:.3g})")
    except kiln.KilnError as e:
        lines = str(e).strip().splitlines() or [""]
        # "N op(s) kiln cannot convert" lists the ops on the next lines: name the first.
        first = lines[1].strip() if len(lines) > 1 and "cannot convert" in lines[0] else lines[0]
        return Outcome(case.name, "error", f"{type(e).__name__}: {first[:200]}")
    except Exception as e:  # noqa: BLE001 - a bug in kiln, reported as such
        tb = traceback.extract_tb(e.__traceback__)[-1]
        where = f"{os.path.basename(tb.filename)}:{tb.lineno}"
        return Outcome(case.name, "error", f"bug: {type(e).__name__} at {where}: {str(e)[:160]}")
    return Outcome(case.name, "pass", seconds=time.perf_counter() - start)


_BY_NAME: dict = {}  # the cases, set before the workers fork (they inherit it)


def _worker(conn):
    warnings.simplefilter("ignore")
    while True:
        name = conn.recv()
        if name is None:
            return
        outcome = run_case(_BY_NAME[name])
        conn.send(outcome)


def run(selected, jobs: int = 1, timeout: float = 120.0, progress=None) -> list[Outcome]:
    """Run ``selected`` cases over ``jobs`` worker processes; a worker that dies
    or exceeds ``timeout`` on a case is replaced and the case reported."""
    ctx = mp.get_context("fork")
    names = [c.name for c in selected]
    _BY_NAME.update({c.name: c for c in selected})
    pending = list(reversed(names))
    outcomes: list[Outcome] = []
    workers: list[dict] = []

    def start():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        return {"proc": proc, "conn": parent, "case": None, "since": 0.0}

    def finish(w, outcome):
        outcomes.append(outcome)
        w["case"] = None
        if progress:
            progress(outcome, len(outcomes), len(names))

    for _ in range(max(1, min(jobs, len(names)))):
        workers.append(start())
    while pending or any(w["case"] for w in workers):
        for i, w in enumerate(workers):
            if w["case"] is None and pending:
                w["case"], w["since"] = pending.pop(), time.monotonic()
                w["conn"].send(w["case"])
            if w["case"] is None:
                continue
            if w["conn"].poll(0.01):
                try:
                    finish(w, w["conn"].recv())
                    continue
                except EOFError:
                    pass
            dead = not w["proc"].is_alive()
            late = time.monotonic() - w["since"] > timeout
            if dead or late:
                if late:
                    w["proc"].kill()
                w["proc"].join()
                code = w["proc"].exitcode
                finish(w, Outcome(w["case"], "timeout" if late else "crash",
                                  f"over {timeout:.0f} s" if late else f"worker exit code {code}"))
                workers[i] = start()
    for w in workers:
        w["conn"].send(None)
        w["proc"].join(timeout=10)
    return sorted(outcomes, key=lambda o: o.name)


def summary(outcomes: list[Outcome]) -> str:
    """Pass count, share, and each failure with its reason."""
    passed = sum(o.status == "pass" for o in outcomes)
    lines = [f"{o.name}: {o.status}: {o.reason}" for o in outcomes if o.status != "pass"]
    share = passed / len(outcomes) if outcomes else 0.0
    lines.append(f"{passed}/{len(outcomes)} ONNX node cases pass with fallback disabled ({share:.1%})")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command-line entry: run the cases, print failures and the pass share."""
    parser = argparse.ArgumentParser(prog="python -m kiln.tools.onnx_conformance", description=__doc__.split("\n")[0])
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("-k", dest="substring", help="only cases whose name contains this")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each case as it finishes")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a case may take (default 120)")
    args = parser.parse_args(argv)
    selected = cases(args.substring)

    def progress(o, done, total):
        if args.verbose:
            print(f"[{done}/{total}] {o.name}: {o.status} {o.reason}", flush=True)

    start = time.perf_counter()
    outcomes = run(selected, jobs=args.jobs, timeout=args.timeout, progress=progress)
    print(summary(outcomes))
    print(f"({time.perf_counter() - start:.0f} s, {args.jobs} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
