"""Validate a model: compile it, run it across its shape range, compare against a reference.

:func:`validate` is the design's validation section as one call (and
``kiln validate MODEL`` as a command): it compiles a torch module (or a
``pkg.module:factory``) or an ONNX model, runs it at every profile's (or
else every symbol's) min / opt / max point and at random shapes in range,
runs the same random inputs through PyTorch eager or ONNX Runtime, and
checks every output against :data:`TOLERANCES`.  The
:class:`ValidationReport` holds the per-shape errors, the op coverage of the
import (source ops converted, decomposed or fallen back), and the fallback
rate and time share from the compiled model's ``report()``.

The tolerance table is the one place that says how close kiln promises to
be to an fp32 reference; tests reuse it::

    from kiln.validate import TOLERANCES
    tol = TOLERANCES["f32"]
    np.testing.assert_allclose(got, want, rtol=tol.rtol, atol=tol.atol)
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .dialects.dims import SYMBOL_MAX
from .errors import KilnError

__all__ = ["EXACT", "TOLERANCES", "OutputCheck", "ShapeCheck", "ShapePoint", "Tolerance", "ValidationReport",
           "compare", "example_ranges", "precision_of", "random_array", "random_inputs", "require_ranges",
           "shape_points", "tolerance_for", "validate"]


@dataclass(frozen=True)
class Tolerance:
    """An element passes when ``|got - want| <= atol + rtol * |want|`` (numpy's
    ``allclose`` rule; NaN only matches NaN)."""

    rtol: float
    atol: float

    def limit(self, want: np.ndarray) -> np.ndarray:
        """The largest error allowed at each element of the reference ``want``."""
        return self.atol + self.rtol * np.abs(want)


#: What kiln promises against an fp32 reference (PyTorch eager in float32, or
#: ONNX Runtime), per model precision -- the least precise float type the
#: compiled graph computes in (``int8`` for a quantized graph).  f32: kernels
#: sum in another order than the reference (blocked GEMMs, vector
#: reductions), measured at most 0.1 of this on the bench models.  f16 and
#: bf16: a few roundings to the type's epsilon (2**-11, 2**-8) between ops.
#: int8: one quantization step of a typical output scale apart, the reference
#: running the same quantized graph.  int8-weights (``precision=
#: "int8-weights"``, weight-only int8 against the fp32 model): each weight
#: within half a step of its channel's scale (max |column| / 254), about
#: bf16's relative error.  Integer and boolean outputs are compared exactly
#: (:data:`EXACT`).
TOLERANCES: dict[str, Tolerance] = {
    "f32": Tolerance(rtol=1e-4, atol=1e-5),
    "f16": Tolerance(rtol=1e-2, atol=1e-2),
    "bf16": Tolerance(rtol=5e-2, atol=5e-2),
    "int8": Tolerance(rtol=1e-1, atol=5e-2),
    "int8-weights": Tolerance(rtol=5e-2, atol=5e-2),
}

#: Integer and boolean outputs (indices, masks, counts) must match exactly.
EXACT = Tolerance(rtol=0.0, atol=0.0)

_FLOAT = ("f64", "f32", "f16", "bf16")
_INT8 = ("i8", "ui8", "si8", "u8")
# Looser precisions first: the one a model computes in is its loosest.
_ORDER = ("int8", "bf16", "f16", "f32")


def precision_of(dtypes) -> str:
    """The model precision (a key of :data:`TOLERANCES`) of a graph whose
    values have the dtype names ``dtypes``: ``int8`` when any value is an
    8-bit integer (a quantized graph), else its least precise float type."""
    found = set()
    for d in dtypes:
        d = str(d)
        if d in _INT8:
            found.add("int8")
        elif d in ("bf16", "f16"):
            found.add(d)
    return next((p for p in _ORDER if p in found), "f32")


def tolerance_for(precision: str, dtype: str, *, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """The tolerance of one output of dtype name ``dtype`` in a model of
    ``precision``; ``rtol`` / ``atol`` override the table for float outputs
    (integer and boolean outputs stay :data:`EXACT`)."""
    if str(dtype) not in _FLOAT:
        return EXACT
    if precision not in TOLERANCES:
        raise KilnError(f"unknown precision '{precision}' (known: {', '.join(TOLERANCES)})")
    base = TOLERANCES[precision]
    return Tolerance(base.rtol if rtol is None else float(rtol), base.atol if atol is None else float(atol))


# ----------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------


@dataclass
class OutputCheck:
    """One output at one shape: the errors, the tolerance and the verdict.

    ``max_rel`` is taken over the elements whose reference is larger than
    ``atol`` in magnitude (below it the absolute bound decides);
    ``worst_ratio`` is the largest error / allowed error (> 1 fails) and
    ``worst_index`` where it is.
    """

    name: str
    dtype: str
    shape: list
    tolerance: Tolerance
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst_ratio: float = 0.0
    worst_index: list | None = None
    passed: bool = True
    message: str = ""

    def to_dict(self) -> dict:
        """Plain JSON data (infinities as strings)."""
        return {"name": self.name, "dtype": self.dtype, "shape": self.shape, "rtol": self.tolerance.rtol,
                "atol": self.tolerance.atol, "max_abs": _num(self.max_abs), "max_rel": _num(self.max_rel),
                "worst_ratio": _num(self.worst_ratio), "worst_index": self.worst_index, "passed": self.passed,
                "message": self.message}


@dataclass(frozen=True)
class ShapePoint:
    """A point of the shape range: a label (``"min"``, ``"profile0 max"``,
    ``"random 2"``) and a value per symbol."""

    label: str
    binding: Mapping[str, int]

    def text(self) -> str:
        """``B=1, L=7 (min)``."""
        syms = ", ".join(f"{k}={v}" for k, v in sorted(self.binding.items())) or "static"
        return f"{syms} ({self.label})"


@dataclass
class ShapeCheck:
    """Every output at one shape point; ``error`` when kiln or the reference
    failed to run there (a failure too)."""

    point: ShapePoint
    input_shapes: list
    outputs: list[OutputCheck] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        """No error and every output within tolerance."""
        return self.error is None and all(o.passed for o in self.outputs)

    def to_dict(self) -> dict:
        """Plain JSON data."""
        return {"label": self.point.label, "binding": dict(self.point.binding), "input_shapes": self.input_shapes,
                "passed": self.passed, "error": self.error, "outputs": [o.to_dict() for o in self.outputs]}


@dataclass
class ValidationReport:
    """What :func:`validate` found (see the module docstring)."""

    source: str
    reference: str
    precision: str
    tolerance: Tolerance
    shapes: list[ShapeCheck]
    coverage: dict
    fallback: dict
    compile_time_s: float
    seed: int

    @property
    def passed(self) -> bool:
        """Every shape passed."""
        return all(s.passed for s in self.shapes)

    def failures(self) -> list[str]:
        """One line per violation: the shape, the output, the error against the tolerance."""
        lines = []
        for s in self.shapes:
            if s.error is not None:
                lines.append(f"shape {s.point.text()}: {s.error}")
            for o in s.outputs:
                if not o.passed:
                    lines.append(f"shape {s.point.text()} {o.name}: {o.message}")
        return lines

    def to_dict(self) -> dict:
        """Plain JSON data: everything the text form shows, and more."""
        return {"source": self.source, "reference": self.reference, "precision": self.precision,
                "tolerance": {"rtol": self.tolerance.rtol, "atol": self.tolerance.atol},
                "tolerances": {k: {"rtol": t.rtol, "atol": t.atol} for k, t in TOLERANCES.items()},
                "passed": self.passed, "failures": self.failures(), "seed": self.seed,
                "compile_time_s": self.compile_time_s, "coverage": self.coverage, "fallback": self.fallback,
                "shapes": [s.to_dict() for s in self.shapes]}

    def format(self) -> str:
        """The report as text: a header, one row per shape and output, coverage, verdict."""
        t = self.tolerance
        cov = self.coverage
        lines = [
            f"model: {self.source}",
            f"reference: {self.reference}; precision {self.precision}: rtol {t.rtol:g}, atol {t.atol:g} "
            f"(integer outputs exact); seed {self.seed}",
            f"compile: {self.compile_time_s:.2f} s",
            f"op coverage: {cov['lowered']} of {cov['ops']} source ops lowered by kiln ({cov['rate']:.1%}); "
            f"{cov['fallback']} fall back" + (f" ({', '.join(cov['fallback_ops'])})" if cov["fallback_ops"] else ""),
            f"fallback at run time: {self.fallback['ops']} kiln op(s), {self.fallback['share_of_ops']:.1%} of ops, "
            f"{self.fallback['share_of_time']:.1%} of measured time",
            "",
            f"{'shape':<28} {'output':<10} {'dims':<16} {'max abs':>9} {'max rel':>9} {'err/tol':>8}  result",
        ]
        for s in self.shapes:
            head = s.point.text()
            if s.error is not None:
                lines.append(f"{head:<28} error: {s.error}")
                continue
            for o in s.outputs:
                dims = "x".join(map(str, o.shape)) or "scalar"
                lines.append(f"{head:<28} {o.name:<10} {dims:<16} {o.max_abs:>9.2e} {o.max_rel:>9.2e} "
                             f"{o.worst_ratio:>8.3g}  {'ok' if o.passed else 'FAIL'}")
                head = ""
        lines.append("")
        n_out = sum(len(s.outputs) for s in self.shapes)
        if self.passed:
            lines.append(f"PASS: {len(self.shapes)} shape(s), {n_out} output check(s) within tolerance")
        else:
            fails = self.failures()
            lines.append(f"FAIL: {len(fails)} violation(s)")
            lines.extend(f"  {f}" for f in fails)
        return "\n".join(lines)


def _scalar(x) -> str:
    """One element as text: 9 significant digits (float32's round trip)."""
    x = x.item() if hasattr(x, "item") else x
    return f"{x:.9g}" if isinstance(x, float) else str(x)


def _num(x: float):
    return x if math.isfinite(x) else str(x)


# ----------------------------------------------------------------------------
# Comparison
# ----------------------------------------------------------------------------


def _as_array(x) -> np.ndarray:
    """A numpy array of ``x`` (a torch tensor, bf16 upcast; an ml_dtypes array)."""
    if hasattr(x, "detach"):
        x = x.detach()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind == "V" or a.dtype.name == "bfloat16":  # ml_dtypes bfloat16: every value is a float32
        a = a.astype(np.float32)
    return a


def compare(name: str, got, want, tol: Tolerance, dtype: str = "f32") -> OutputCheck:
    """Check kiln's output ``got`` against the reference ``want`` (see :class:`OutputCheck`)."""
    got, want = _as_array(got), _as_array(want)
    check = OutputCheck(name, dtype, list(want.shape), tol)
    if got.shape != want.shape:
        check.passed = False
        check.message = f"shape {list(got.shape)} but the reference's is {list(want.shape)}"
        check.max_abs = check.max_rel = check.worst_ratio = math.inf
        return check
    if want.size == 0:
        return check
    if want.dtype.kind in "biu" and got.dtype.kind in "biu":
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64)).astype(np.float64)
        ref = np.abs(want.astype(np.float64))
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf: handled below
            diff = np.abs(g - w)
        diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only, or inf - inf
        diff = np.where((np.isnan(g) & np.isnan(w)) | (np.isinf(g) & (g == w)), 0.0, diff)
        ref = np.abs(np.where(np.isnan(w), 0.0, w))
    limit = tol.atol + tol.rtol * ref
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, np.where(limit > 0, diff / limit, np.inf))
        big = ref > max(tol.atol, np.finfo(np.float32).tiny)
        rel = diff[big] / ref[big]
    check.max_abs = float(diff.max())
    check.max_rel = float(rel.max()) if rel.size else 0.0
    flat = ratio.reshape(-1)
    worst = int(np.argmax(flat))
    if np.isinf(flat[worst]):  # a zero tolerance: the worst is the largest error there
        worst = int(np.argmax(np.where(np.isinf(flat), diff.reshape(-1), -1.0)))
    check.worst_ratio = float(flat[worst])
    check.worst_index = [int(i) for i in np.unravel_index(worst, ratio.shape)]
    check.passed = bool(check.worst_ratio <= 1.0)
    if not check.passed:
        at = tuple(check.worst_index)
        times = f"{check.worst_ratio:.3g}x the tolerance" if math.isfinite(check.worst_ratio) else "tolerance 0"
        check.message = (f"max abs error {check.max_abs:.3g}, max rel {check.max_rel:.3g}; at {list(at)} kiln "
                         f"{_scalar(got[at])} vs reference {_scalar(want[at])} exceeds atol {tol.atol:g} + rtol "
                         f"{tol.rtol:g} * |ref| ({times})")
    return check


# ----------------------------------------------------------------------------
# Shapes and inputs
# ----------------------------------------------------------------------------



def _snap(value: int, lo: int, hi: int, multiple_of: int | None) -> int:
    """``value`` moved to a multiple of ``multiple_of`` inside ``[lo, hi]``."""
    value = max(lo, min(hi, value))
    if multiple_of and value % multiple_of:
        down = value - value % multiple_of
        value = down if down >= lo else down + multiple_of
    return value


def require_ranges(symbols: Mapping) -> None:
    """KilnError for a symbol without a declared range (its max is kiln's
    placeholder): neither its max nor random points in range can be run."""
    for name, s in sorted(symbols.items()):
        if s.max >= SYMBOL_MAX:
            raise KilnError(f"symbol '{name}' has no declared range ({s.min} <= {name} <= {s.max}): give it one "
                            f"(--symbol {name}=MIN:MAX for an ONNX model, Dim(min=, max=) in a factory)")


def shape_points(symbols: Mapping, profiles: Sequence = (), random: int = 2, seed: int = 0) -> list[ShapePoint]:
    """The points :func:`validate` runs at: min, opt and max of each profile
    (of the symbols' declared ranges when there is none), then ``random``
    points drawn uniformly in range (in a profile chosen at random), the
    duplicates dropped.  A symbol's opt is the profile's, else its declared
    ``opt``, else 8 clamped into its range (as kiln's FLOPs estimate takes it).

    ``symbols`` maps names to :class:`~kiln.module.SymbolInfo`; ``profiles``
    are :class:`~kiln.runtime.profiles.Profile` objects.  A symbol without a
    declared range is a KilnError (give its range with ``--symbol``).
    """
    require_ranges(symbols)
    boxes = []  # (prefix, {symbol: (lo, opt, hi)})
    for p in profiles or [None]:
        box = {}
        for name, s in symbols.items():
            r = p.range_map.get(name) if p is not None else None
            if r is None:
                opt = s.opt if s.opt is not None else 8
                r = (s.min, max(s.min, min(s.max, opt)), s.max)
            box[name] = r
        boxes.append(("" if p is None else f"{p.name} ", box))
    points, seen = [], set()

    def add(label, binding):
        key = tuple(sorted(binding.items()))
        if key not in seen:
            seen.add(key)
            points.append(ShapePoint(label, dict(binding)))

    for prefix, box in boxes:
        for i, which in enumerate(("min", "opt", "max")):
            add(prefix + which, {n: _snap(r[i], r[0], r[2], symbols[n].multiple_of) for n, r in box.items()})
    rng = np.random.default_rng(seed)
    for k in range(max(random, 0)):
        prefix, box = boxes[int(rng.integers(len(boxes)))]
        add(f"{prefix}random {k + 1}",
            {n: _snap(int(rng.integers(r[0], r[2] + 1)), r[0], r[2], symbols[n].multiple_of) for n, r in box.items()})
    return points


def _numpy_dtype(dtype: str):
    from .transforms._graph import NUMPY_DTYPES

    if dtype == "bf16":
        try:
            import ml_dtypes
        except ImportError:
            raise KilnError("a bf16 input needs the ml_dtypes package (pip install ml_dtypes)") from None
        return ml_dtypes.bfloat16
    t = NUMPY_DTYPES.get(dtype)
    if t is None:
        raise KilnError(f"cannot make random inputs of dtype {dtype}")
    return t


def random_array(shape: Sequence[int], dtype: str, rng: np.random.Generator,
                 int_range: tuple[int, int] | None = None) -> np.ndarray:
    """A random array of the kiln dtype name ``dtype``: standard normal for
    floats, booleans, integers in ``int_range`` (inclusive; default ``[0,
    15]``: safe as indices, token ids, counts)."""
    shape = tuple(int(d) for d in shape)
    t = _numpy_dtype(dtype)
    if dtype == "i1":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(np.dtype(t), np.integer):
        lo, hi = int_range if int_range is not None else (0, 15)
        return rng.integers(lo, hi + 1, shape).astype(t)
    return rng.standard_normal(shape).astype(np.float32).astype(t)


def random_inputs(inputs: Sequence, binding: Mapping[str, int], rng: np.random.Generator,
                  int_ranges: Sequence | None = None) -> list[np.ndarray]:
    """:func:`random_array` for each model input (an
    :class:`~kiln.runtime.contract.InputSpec`) at the symbol values
    ``binding``; ``int_ranges[i]`` is input ``i``'s integer range (or None)."""
    from .dialects.dims import evaluate

    return [random_array([evaluate(d, binding) for d in spec.dims], spec.dtype, rng,
                         int_ranges[i] if int_ranges is not None else None)
            for i, spec in enumerate(inputs)]


def example_ranges(example_args) -> list | None:
    """``(min, max)`` of each integer example argument (None for the others)."""
    if example_args is None:
        return None
    ranges = []
    for a in example_args:
        a = _as_array(a) if hasattr(a, "detach") or isinstance(a, np.ndarray) else None
        if a is not None and a.dtype.kind in "iu" and a.size:
            ranges.append((int(a.min()), int(a.max())))
        else:
            ranges.append(None)
    return ranges


# ----------------------------------------------------------------------------
# References
# ----------------------------------------------------------------------------


def _torch_reference(module, precision: str) -> tuple[Callable, str]:
    """``run(inputs) -> [arrays]`` of PyTorch eager, in float32 for a half model."""
    import copy

    import torch

    ref, what = module, "PyTorch eager"
    if precision in ("f16", "bf16"):
        try:  # the reference kiln promises against: the same weights in fp32
            ref, what = copy.deepcopy(module).float(), "PyTorch eager in float32"
        except Exception:  # noqa: BLE001 - a module that cannot be copied runs as it is
            pass

    def run(inputs):
        args = []
        for a in inputs:
            if a.dtype.name == "bfloat16":
                a = a.astype(np.float32)
            t = torch.from_numpy(np.ascontiguousarray(a))
            if ref is not module and t.is_floating_point():
                t = t.float()
            args.append(t)
        with torch.inference_mode():
            out = ref(*args)
        return [_as_array(x) for x in _leaves(out)]

    return run, what


def _leaves(out) -> list:
    if isinstance(out, Mapping):
        return [x for v in out.values() for x in _leaves(v)]
    if isinstance(out, (list, tuple)):
        return [x for v in out for x in _leaves(v)]
    return [out]


def _onnx_reference(model, names: Sequence[str]) -> tuple[Callable, str]:
    """``run(inputs) -> [arrays]`` of an ONNX Runtime CPU session; inputs fed
    by name when kiln's input names are the model's, else by position."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise KilnError("validating an ONNX model needs onnxruntime (pip install onnxruntime)") from None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    data = str(model) if isinstance(model, (str, os.PathLike)) else (
        model if isinstance(model, bytes) else model.SerializeToString())
    try:
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ONNX Runtime's own errors
        raise KilnError(f"ONNX Runtime cannot load the model: {e}") from None
    ort_names = [i.name for i in sess.get_inputs()]
    feed_names = list(names) if set(names) == set(ort_names) else ort_names

    def run(inputs):
        return [np.asarray(x) for x in sess.run(None, dict(zip(feed_names, inputs)))]

    return run, f"ONNX Runtime {ort.__version__} (CPU)"


# ----------------------------------------------------------------------------
# validate
# ----------------------------------------------------------------------------


def _import(source, example_args, dynamic_shapes, symbols, fallback: bool):
    """``(kiln ir.Module, ImportReport, kind)`` of a torch module or ONNX model."""
    from .compiler import _is_onnx, _is_torch_module
    from .frontends import import_onnx, import_torch

    if _is_torch_module(source):
        if example_args is None:
            raise KilnError("validating a torch module needs example_args")
        module, report = import_torch(source, tuple(example_args), dynamic_shapes, fallback=fallback,
                                      with_report=True)
        return module, report, "torch"
    if _is_onnx(source):
        module, report = import_onnx(source, symbols=symbols, fallback=fallback, with_report=True)
        return module, report, "onnx"
    raise KilnError("kiln validate takes a torch module (or pkg.module:factory) or an ONNX model: a kiln .mlir "
                    "file has no reference to compare against")


def _coverage(report) -> dict:
    d = report.to_dict()
    totals = d["totals"]
    ops = sum(totals.values())
    lowered = totals["converted"] + totals["decomposed"]
    fb = sorted(name for name, c in report.ops.items() if c.get("fallback"))
    return {"ops": ops, "lowered": lowered, "converted": totals["converted"], "decomposed": totals["decomposed"],
            "fallback": totals["fallback"], "fallback_ops": fb, "rate": lowered / ops if ops else 1.0,
            "fallback_rate_flops": d["fallback_rate_flops"], "per_op": d["ops"]}


def validate(source, example_args=None, dynamic_shapes=None, *, symbols=None, profiles=None, policy=None,
             shapes: int = 2, seed: int = 0, rtol: float | None = None, atol: float | None = None,
             precision: str | None = None, log: Callable[[str], None] | None = None,
             **options) -> ValidationReport:
    """Compile ``source`` and check it against its reference across its shape range.

    ``source`` is a ``torch.nn.Module`` (with ``example_args`` and
    ``dynamic_shapes``, as for :func:`kiln.compile`), a ``"pkg.module:factory"``
    string (the factory returns ``(module, example_args, dynamic_shapes)``),
    or an ONNX model or path (``symbols`` gives its dim_params' ranges,
    ``{"N": (1, 64)}``).  ``profiles`` and ``policy`` go to
    :func:`kiln.compile`, as do other ``options``.  The model runs at the
    :func:`shape_points` (``shapes`` random ones besides min / opt / max, drawn
    with ``seed``) on :func:`random_inputs` (integer inputs of a factory in
    its example arguments' value range); the reference -- PyTorch eager (in
    float32 for an f16 / bf16 model) or ONNX Runtime -- runs on the same
    inputs.  Each output is checked with :func:`compare` against
    :func:`tolerance_for` the model's precision (from its values' dtypes, or
    ``precision``), ``rtol`` / ``atol`` overriding the table.

    A shape where kiln or the reference raises is recorded as a failure and
    the run goes on; errors before any shape runs (import, compile) raise.
    """
    from .compiler import compile as kiln_compile

    say = log or (lambda _msg: None)
    label = str(source) if isinstance(source, (str, os.PathLike)) else type(source).__name__
    if isinstance(source, str) and ":" in source and not os.path.exists(source):
        from .sources import source_args  # the tools' factory loader, errors and all

        source, example_args, dynamic_shapes, _ = source_args(source, [])
    start = time.perf_counter()
    say("importing")
    module, imported, kind = _import(source, example_args, dynamic_shapes, symbols, options.get("fallback", True))
    from .module import symbols_of

    require_ranges(symbols_of(module.operation))  # before the compile, which this would waste
    say("compiling")
    opts = dict(options)
    if profiles:
        opts["profiles"] = profiles
    if policy:
        opts["policy"] = policy
    model = _compile(kiln_compile, module, opts)
    compile_s = time.perf_counter() - start
    prec = precision or precision_of(v.dtype for v in model.values)
    if prec not in TOLERANCES:
        raise KilnError(f"unknown precision '{prec}' (known: {', '.join(TOLERANCES)})")
    if kind == "torch":
        reference, ref_name = _torch_reference(source, prec)
    else:
        reference, ref_name = _onnx_reference(source, [s.name for s in model.inputs])
    points = shape_points(model.symbols, getattr(model.runtime, "profiles", ()), shapes, seed)
    int_ranges = example_ranges(example_args) if kind == "torch" else None
    rng = np.random.default_rng(seed)
    checks = []
    for point in points:
        inputs = random_inputs(model.inputs, point.binding, rng, int_ranges)
        check = ShapeCheck(point, [list(a.shape) for a in inputs])
        checks.append(check)
        say(f"shape {point.text()}")
        try:
            got = model(*inputs)
        except Exception as e:  # noqa: BLE001 - recorded: the run goes on to the other shapes
            check.error = f"kiln failed: {type(e).__name__}: {e}"
            continue
        got = list(got) if isinstance(got, tuple) else [got]
        try:
            want = reference(inputs)
        except Exception as e:  # noqa: BLE001
            check.error = f"the reference failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            continue
        if len(got) != len(want):
            check.error = f"kiln returned {len(got)} output(s), the reference {len(want)}"
            continue
        for j, (info, g, w) in enumerate(zip(model.outputs, got, want)):
            tol = tolerance_for(prec, info.dtype, rtol=rtol, atol=atol)
            check.outputs.append(compare(f"output{j}", g, w, tol, info.dtype))
    rep = model.report()
    fb = rep.get("fallback", {})
    fallback = {"ops": fb.get("ops", 0), "op_names": fb.get("op_names", []),
                "share_of_ops": fb.get("share_of_ops", 0.0), "share_of_time": fb.get("share_of_time", 0.0)}
    return ValidationReport(source=label, reference=ref_name, precision=prec,
                            tolerance=tolerance_for(prec, "f32", rtol=rtol, atol=atol), shapes=checks,
                            coverage=_coverage(imported), fallback=fallback, compile_time_s=compile_s, seed=seed)


def _compile(kiln_compile, module, options):
    """The compiled model (a seam: tests perturb what it returns)."""
    return kiln_compile(module, **options)
