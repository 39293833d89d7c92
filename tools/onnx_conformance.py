"""Run ONNX's backend node and model cases through ``kiln.compile(..., fallback=False)``.

    python -m kiln.tools.onnx_conformance [--suite node|models|all] [-j N] [-k SUBSTRING] [-v] [--timeout S]

The cases ship inside the ``onnx`` package (``onnx/backend/test/data/node``):
each is a one-node model (or its function expansion, ``*_expanded``) with
input and expected output data sets.  A case is *in scope* when every node is
one of :data:`OPS` (the ai.onnx inference core kiln supports) and its graph
inputs and outputs are fp32 / uint8 / int8 / int32 / int64 / bool tensors.  A case *passes*
when it compiles with fallback disabled and every data set's outputs match
(shape exactly, values within ``rtol=1e-3, atol=1e-5``; ONNX's own backend
runner uses ``rtol=1e-3``).  Integer graph inputs are passed as they are: a
shape, axes or pads input is a *shape input* of the compiled model.

``--suite models`` runs the model cases the package ships too
(``onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple}``: a
``model.onnx`` with ``test_data_set_*/{input,output}_*.pb``), with the same
checks.  A model case is in scope when every node is in :data:`OPS` or has a
kiln pattern, and its graph inputs and outputs are tensors of a dtype kiln
has.  Every other model case is run as well and reported *out of scope* with
its reason (the op types, a sequence or string type): for those kiln must
answer with a KilnError (or pass), never a crash or a wrong result.

Each case runs in a worker process, so a crash or hang in one case is a
reported failure (``crash`` / ``timeout``), never the end of the run.
"""

from __future__ import annotations

import argparse
import glob
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
Split Squeeze Unsqueeze Flatten Expand Tile Pad Resize Trilu GatherND ScatterND Shape Size Cast CastLike Constant
ConstantOfShape Range Identity Dropout
QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger ConvInteger QLinearMatMul QLinearConv
""".split())

#: ONNX TensorProto element types in scope: FLOAT, UINT8, INT8, INT32, INT64, BOOL.
ELEM_TYPES = frozenset({1, 2, 3, 6, 7, 9})

RTOL, ATOL = 1e-3, 1e-5

#: The model suites: folders of ``onnx/backend/test/data``.
MODEL_SUITES = ("pytorch-converted", "pytorch-operator", "simple")

#: ``--suite`` choices and the suites each runs.
SUITES = {"node": ("node",), "models": MODEL_SUITES, "all": ("node", *MODEL_SUITES)}


@dataclass
class Outcome:
    """One case's result: ``status`` is pass / fail / wrong-shape / error / crash / timeout.

    ``scope`` is empty for an in-scope case, else why the case is out of
    scope (model suites only: out-of-scope cases are run and reported, not
    counted in the pass share).
    """

    name: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    scope: str = ""
    suite: str = "node"


@dataclass
class ModelCase:
    """A model case of ``onnx/backend/test/data/<suite>/<name>``: the model,
    its data sets ``[(inputs, outputs), ...]`` and, when out of scope, why."""

    name: str
    suite: str
    model: object
    data_sets: list
    scope: str = ""


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


def _node_cases() -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return sorted((c for c in collect_testcases() if _in_scope(c)), key=lambda c: c.name)


def _read_value(path: str, type_proto):
    """The value stored in ``path`` as ``type_proto`` says: an array for a
    tensor (a string tensor as an object array), a list of arrays for a
    sequence."""
    import onnx
    from onnx import numpy_helper

    with open(path, "rb") as f:
        data = f.read()
    if type_proto.WhichOneof("value") == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    return numpy_helper.to_array(onnx.load_tensor_from_string(data))


def _type_text(type_proto) -> str:
    """An ONNX type as the spec writes it: ``seq(tensor(float))``."""
    import onnx

    which = type_proto.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(type_proto, which).elem_type
        name = onnx.TensorProto.DataType.Name(elem).lower() if elem in onnx.TensorProto.DataType.values() else elem
        return f"{which[:-5]}({name})"
    if which in ("sequence_type", "optional_type"):
        return f"{which[:-5]}({_type_text(getattr(type_proto, which).elem_type)})".replace("sequence(", "seq(")
    return which or "unset"


def _kiln_type(type_proto) -> bool:
    """Whether kiln has the type: a tensor of a dtype the ONNX patterns map."""
    from ..conversions.torch_to_kiln.onnx import ONNX_DTYPES

    return type_proto.WhichOneof("value") == "tensor_type" and ONNX_DTYPES.get(type_proto.tensor_type.elem_type) is not None


def _model_scope(model) -> str:
    """Why a model case is out of scope, or ``""``: every node's op must be
    one of :data:`OPS` or have a kiln pattern, and every graph input and
    output a tensor of a dtype kiln has."""
    from ..conversions.torch_to_kiln.onnx import ONNX_PATTERNS

    graph = model.graph
    if not graph.node:
        return "an empty graph"
    ops = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in graph.node
                  if not (n.domain in ("", "ai.onnx") and (n.op_type in OPS or f"onnx.{n.op_type}" in ONNX_PATTERNS))})
    reasons = [f"op {', '.join(ops)}"] if ops else []
    inits = {t.name for t in graph.initializer}
    for role, values in (("input", [v for v in graph.input if v.name not in inits]), ("output", graph.output)):
        for v in values:
            if not _kiln_type(v.type):
                reasons.append(f"{role} '{v.name}' has type {_type_text(v.type)}")
    return "; ".join(reasons)


def _model_cases(suite: str) -> list:
    import onnx

    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", suite)
    found = []
    for name in sorted(os.listdir(root)):
        case_dir = os.path.join(root, name)
        path = os.path.join(case_dir, "model.onnx")
        if not os.path.isfile(path):
            continue
        model = onnx.load(path)
        inits = {t.name for t in model.graph.initializer}
        inputs = [v for v in model.graph.input if v.name not in inits]
        data_sets, overrides = [], False
        for ds in sorted(glob.glob(os.path.join(case_dir, "test_data_set_*"))):
            n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
            n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
            # A data set leaves out the inputs an initializer gives, or feeds
            # them all (overriding the initializers: kiln takes them as constants).
            feeds = inputs if n_in <= len(inputs) else list(model.graph.input)
            overrides |= n_in > len(inputs)
            ins = [_read_value(os.path.join(ds, f"input_{i}.pb"), feeds[i].type) for i in range(n_in)]
            outs = [_read_value(os.path.join(ds, f"output_{i}.pb"), model.graph.output[i].type)
                    for i in range(n_out)]
            data_sets.append((ins, outs))
        scope = _model_scope(model) or ("" if data_sets else "no data sets")
        if overrides:
            scope = "; ".join(filter(None, [scope, "data sets override initializers"]))
        found.append(ModelCase(name, suite, model, data_sets, scope))
    return found


def cases(substring: str | None = None, suite: str = "node") -> list:
    """The cases of ``suite`` (see :data:`SUITES`), by name: for ``node`` the
    in-scope ``onnx.backend.test.case.node`` objects; for the model suites
    every :class:`ModelCase`, out-of-scope ones included (``case.scope``)."""
    if suite not in SUITES and suite not in MODEL_SUITES:
        raise ValueError(f"suite must be one of {sorted(set(SUITES) | set(MODEL_SUITES))}, got {suite!r}")
    found = []
    for s in SUITES.get(suite, (suite,)):
        found += _node_cases() if s == "node" else _model_cases(s)
    if substring:
        found = [c for c in found if substring in c.name]
    return found


def run_case(case) -> Outcome:
    """Compile ``case`` with fallback disabled and check every data set."""
    outcome = _run_case(case)
    outcome.scope = getattr(case, "scope", "")
    outcome.suite = getattr(case, "suite", "node")
    return outcome


def _run_case(case) -> Outcome:
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
                if isinstance(w, list):  # a sequence output (out-of-scope cases only)
                    return Outcome(case.name, "fail", f"output {i}: a sequence, kiln gave {type(g).__name__}")
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
    names = [_key(c) for c in selected]
    _BY_NAME.update({_key(c): c for c in selected})
    pending = list(reversed(names))
    outcomes: list[Outcome] = []
    workers: list[dict] = []

    def start():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        return {"proc": proc, "conn": parent, "case": None, "since": 0.0}

    def finish(w, outcome):
        case = _BY_NAME[w["case"]]
        outcome.scope, outcome.suite = getattr(case, "scope", ""), getattr(case, "suite", "node")
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
                finish(w, Outcome(_BY_NAME[w["case"]].name, "timeout" if late else "crash",
                                  f"over {timeout:.0f} s" if late else f"worker exit code {code}"))
                workers[i] = start()
    for w in workers:
        w["conn"].send(None)
        w["proc"].join(timeout=10)
    order = {s: i for i, s in enumerate(SUITES["all"])}
    return sorted(outcomes, key=lambda o: (order.get(o.suite, 0), o.name))


def _key(case) -> str:
    """A case's key across suites (a model case's name may repeat a node case's)."""
    suite = getattr(case, "suite", "node")
    return case.name if suite == "node" else f"{suite}/{case.name}"


def summary(outcomes: list[Outcome]) -> str:
    """Pass count, share, and each failure with its reason, per suite; the
    out-of-scope model cases are listed with their reason and what kiln did."""
    lines = []
    for suite in SUITES["all"]:
        mine = [o for o in outcomes if o.suite == suite]
        if not mine:
            continue
        scoped = [o for o in mine if not o.scope]
        prefix = "" if suite == "node" else f"{suite}/"
        lines += [f"{prefix}{o.name}: {o.status}: {o.reason}" for o in scoped if o.status != "pass"]
        lines += [f"{prefix}{o.name}: out of scope ({o.scope}): {o.status}{': ' + o.reason if o.reason else ''}"
                  for o in mine if o.scope]
        passed = sum(o.status == "pass" for o in scoped)
        share = passed / len(scoped) if scoped else 0.0
        what = "ONNX node cases" if suite == "node" else f"ONNX {suite} model cases"
        extra = f"; {len(mine) - len(scoped)} out of scope" if len(scoped) < len(mine) else ""
        lines.append(f"{passed}/{len(scoped)} {what} pass with fallback disabled ({share:.1%}{extra})")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command-line entry: run the cases, print failures and the pass share."""
    parser = argparse.ArgumentParser(prog="python -m kiln.tools.onnx_conformance", description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="node",
                        help="node cases (default), the model cases, or all")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("-k", dest="substring", help="only cases whose name contains this")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each case as it finishes")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a case may take (default 120)")
    args = parser.parse_args(argv)
    selected = cases(args.substring, suite=args.suite)

    def progress(o, done, total):
        if args.verbose:
            name = o.name if o.suite == "node" else f"{o.suite}/{o.name}"
            print(f"[{done}/{total}] {name}: {o.status} {o.reason}", flush=True)

    start = time.perf_counter()
    outcomes = run(selected, jobs=args.jobs, timeout=args.timeout, progress=progress)
    print(summary(outcomes))
    print(f"({time.perf_counter() - start:.0f} s, {args.jobs} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
