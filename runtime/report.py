"""What a compiled model did: metrics collected per call, and its report.

:class:`Metrics` is updated by every call (thread-safe): the shape bound,
the kernels launched, the time spent in fallback kernels and in the whole
schedule, and -- when profiling is on -- the time of every kernel.
:func:`build_report` turns it, the schedule, the memory plan and the profile
selector's counters into plain data; :func:`format_report` (``kiln.format_report``)
prints that the way ``kiln-run --report`` shows it, and prints an import
report (:class:`~kiln.frontends.ImportReport`) as ``kiln-import --report`` does.
``CompiledModel.report()`` returns a :class:`Report`: a dict whose ``str``
is the formatted text, so ``print(compiled.report())`` reads as a report while
``report()["kernels"]`` and ``json.dumps(report())`` keep working.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from ..progress import format_stages

__all__ = ["Metrics", "Report", "build_report", "format_report"]


class Metrics:
    """Per-call counters of one compiled model (see the module docstring)."""

    def __init__(self, profiling: bool = False):
        self.profiling = profiling
        self._lock = threading.Lock()
        self.calls = 0
        self.timed_calls = 0
        self.fast_calls = 0  # calls served by a frozen dispatch plan (kiln.runtime.fastcall)
        self.last_binding: dict[str, int] | None = None
        self.last_launched = 0
        self.last_arena: tuple[int, int] | None = None  # (planned, no reuse) bytes
        self.last_selection: str | None = None
        self.total_s = 0.0
        self.fallback_s = 0.0
        self.kernel_s: dict[str, list] = {}  # name -> [calls, seconds]

    def record(
        self,
        binding: Mapping[str, int],
        launched: int,
        total_s: float,
        fallback_s: float,
        arena: tuple[int, int] | None = None,
        per_kernel: Mapping[str, float] | None = None,
        selection: str | None = None,
        timed: bool = True,
    ) -> None:
        """Add one call's numbers; ``timed=False`` counts the call but not its
        times (a first call, which pays for lazy JIT materialization).  The
        fast path records through :meth:`fast_recorder`."""
        with self._lock:
            self.calls += 1
            self.last_binding = dict(binding)
            self.last_launched = launched
            if timed:
                self.timed_calls += 1
                self.total_s += total_s
                self.fallback_s += fallback_s
            if arena is not None:
                self.last_arena = arena
            if selection is not None:
                self.last_selection = selection
            for name, s in (per_kernel or {}).items() if timed else ():
                entry = self.kernel_s.setdefault(name, [0, 0.0])
                entry[0] += 1
                entry[1] += s

    def fast_recorder(self, binding: Mapping[str, int], launched: int, arena: tuple[int, int], selection: str | None):
        """``record(seconds)`` for the calls of one fast path: :meth:`record`
        of a timed call without fallback or per-kernel times, with what does
        not change between its calls bound once (0.7 -> 0.3 us a call)."""
        lock = self._lock

        def record(seconds: float) -> None:
            with lock:
                self.calls += 1
                self.fast_calls += 1
                self.timed_calls += 1
                self.total_s += seconds
                self.last_binding = binding
                self.last_launched = launched
                self.last_arena = arena
                self.last_selection = selection

        return record

    def snapshot(self) -> dict:
        """The counters as plain data."""
        with self._lock:
            return {
                "calls": self.calls,
                "timed_calls": self.timed_calls,
                "fast_calls": self.fast_calls,
                "last_binding": dict(self.last_binding or {}),
                "last_launched": self.last_launched,
                "last_arena": self.last_arena,
                "last_selection": self.last_selection,
                "total_s": self.total_s,
                "fallback_s": self.fallback_s,
                "kernel_s": {k: tuple(v) for k, v in self.kernel_s.items()},
            }


def build_report(schedule, metrics: Metrics, *, compile_time_s: float = 0.0, selector=None, arena_plan=None,
                 static: tuple[int, float] = (0, 0.0), kernel_cache: str | None = None,
                 compile_stages_s: Mapping[str, float] | None = None) -> dict:
    """The report of a model: kernels, fallback share, arena bytes, compile
    time, specializations and cache hits, per-kernel time (when profiling).

    ``schedule`` is a :class:`~kiln.transforms.partition.Schedule`;
    ``selector`` a :class:`~kiln.runtime.profiles.ProfileSelector` (optional);
    ``arena_plan`` an :class:`~kiln.runtime.arena.ArenaPlan`, used when no
    call has run yet (the arena at the symbols' opt point is not known then,
    so the bytes are reported as ``None``); ``static`` is ``(compilations,
    seconds)`` of the static kernels compiled and timed for profiles;
    ``kernel_cache`` whether the object-code cache served the compile;
    ``compile_stages_s`` the seconds of each stage of the compile (export,
    import, graph passes, partition, lowering, LLVM, ...; empty for a loaded
    artifact).
    """
    m = metrics.snapshot()
    steps = schedule.steps
    total_ops = sum(len(s.ops) for s in steps)
    fallback_steps = [s for s in steps if s.kind == "fallback"]
    fallback_ops = sum(len(s.ops) for s in fallback_steps)
    planned, no_reuse = m["last_arena"] if m["last_arena"] else (None, None)
    report = {
        # split: the symbol a dynamic kernel may run split along, on two threads (kiln.transforms.row_split).
        # impl: "generated", "fallback", "user.<name>" for a kernel registered from user code, or the
        # library kernels kiln-select-kernels chose for its ops ("native.layer_norm", "generated+native.rms_norm").
        "kernels": [{"name": s.name, "kind": s.kind, "ops": list(s.ops), "split": getattr(s, "split", None),
                     "impl": getattr(s, "impl", None) or s.kind,
                     # the float type its arithmetic ran in (kiln.transforms.precision.kernel_precisions)
                     "precision": getattr(s, "precision", None)} for s in steps],
        "kernels_in_schedule": len(steps),
        "kernels_launched_per_call": m["last_launched"],
        "fallback": {
            "ops": fallback_ops,
            "op_names": sorted({n for s in fallback_steps for n in (s.torch_ops or s.ops)}),
            "share_of_ops": (fallback_ops / total_ops) if total_ops else 0.0,
            "share_of_time": (m["fallback_s"] / m["total_s"]) if m["total_s"] > 0 else 0.0,
            # Each fallback op, where the model uses it (model.py:42, node 'Mul_3' (Mul)), what runs it.
            "sites": [{"op": op, "location": loc, "runtime": rt}
                      for s in fallback_steps for op, loc, rt in getattr(s, "sites", ())],
        },
        "arena": {
            "planned_peak_bytes": planned,
            "no_reuse_bytes": no_reuse,
            "at": m["last_binding"],
            "expressions": dict(arena_plan.texts) if arena_plan is not None else None,
        },
        "compile_time_s": compile_time_s,
        "compile_stages_s": dict(compile_stages_s or {}),
        "kernel_cache": kernel_cache,
        "static_compilations": static[0],
        "static_compile_time_s": static[1],
        "calls": m["calls"],
        "timed_calls": m["timed_calls"],
        "fast_calls": m["fast_calls"],
        "last_selection": m["last_selection"],
    }
    if selector is not None:
        d = selector.describe()
        report["profiles"] = d
        report["specializations"] = d["specializations"]
        report["cache_hits"] = d["cache_hits"]
    else:
        report["specializations"] = 0
        report["cache_hits"] = 0
    if metrics.profiling:
        report["kernel_time_s"] = {
            name: {"calls": n, "total_s": s, "mean_s": s / n if n else 0.0} for name, (n, s) in m["kernel_s"].items()
        }
    return report


_RUNS_IN = {"pytorch": "PyTorch", "onnxruntime": "ONNX Runtime"}


def _bytes(n) -> str:
    if n is None:
        return "-"
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit} ({n} B)"
    return f"{n} B"


def _native_line(native: Mapping | None, threads: int | None = None, pinned: int = 0) -> str:
    if not native:
        return "native runtime: -"
    if native.get("library"):
        pinned = f", {pinned} worker(s) pinned" if pinned else ""
        pool = f", pool of {threads} thread(s){pinned}" if threads else ""
        return f"native runtime: {native['library']} (packed weights {_bytes(native.get('packed_bytes', 0))}{pool})"
    return f"native runtime: off ({native.get('error') or 'KILN_NATIVE=0 or no C compiler'})"


class Report(dict):
    """A compiled model's report (:func:`build_report`'s data) that prints as text.

    It is a plain ``dict`` in every other way: index it, ``json.dumps`` it,
    compare it; ``str(report)`` (and so ``print``) is :func:`format_report`'s
    text, while ``repr`` stays the dict's, for debugging.  One edited until
    it no longer has a report's keys prints as the dict does.
    """

    __slots__ = ()

    def __str__(self) -> str:
        try:
            return format_report(self)
        except (KeyError, TypeError, ValueError):
            return dict.__repr__(self)


def format_report(report) -> str:
    """The report as text, one fact per line.

    ``report`` is a compiled model's report (``compiled.report()``: kernels,
    launches, fallback share, arena bytes, compile time, profiles, schedule)
    or an import report (:class:`~kiln.frontends.ImportReport`: one row per
    source op type, then fallback rates, symbols and notes).  A model built
    without a runtime has an empty report, printed as one line saying so.
    """
    if not isinstance(report, Mapping):
        formatter = getattr(report, "format", None)
        if not callable(formatter):
            raise TypeError(f"format_report takes a model's report (a dict) or an ImportReport, "
                            f"not {type(report).__name__}")
        return formatter()
    if not report:
        return "no report: this model runs without kiln's runtime (nothing is counted)"
    fb = report["fallback"]
    arena = report["arena"]
    at = ", ".join(f"{k}={v}" for k, v in sorted((arena.get("at") or {}).items())) or "-"
    lines = [
        f"kernels in schedule: {report['kernels_in_schedule']} "
        f"({sum(1 for k in report['kernels'] if k['kind'] == 'fallback')} fallback)",
        f"kernels launched per call: {report['kernels_launched_per_call']}",
        f"fallback ops: {fb['ops']} ({fb['share_of_ops']:.1%} of ops, {fb['share_of_time']:.1%} of measured time)"
        + (f": {', '.join(fb['op_names'])}" if fb["op_names"] else ""),
        *(f"  fallback {x['op']} at {x['location']} (runs in {_RUNS_IN.get(x['runtime'], x['runtime'])})"
          for x in fb.get("sites", ())),
        f"arena at {at}: planned peak {_bytes(arena['planned_peak_bytes'])}, no reuse {_bytes(arena['no_reuse_bytes'])}",
        *([f"weights held by the runtime: {_bytes(report['weights']['runtime_bytes'])} in "
           f"{report['weights']['runtime_count']} constant(s) passed to kernels (smaller ones are in the kernels' code)"]
          if "weights" in report else []),
        f"compile time: {report['compile_time_s']:.3f} s"
        + (f" (kernel cache {report['kernel_cache']})" if report.get("kernel_cache") else "")
        + (f" (+ {report['static_compile_time_s']:.3f} s for {report['static_compilations']} static kernel set(s))"
           if report.get("static_compilations") else ""),
        *([f"compile stages: {format_stages(report['compile_stages_s'])}"] if report.get("compile_stages_s") else []),
        f"specializations: {report['specializations']}, cache hits: {report['cache_hits']}",
        _native_line(report.get("native"), report.get("threads"), report.get("pinned_workers", 0)),
        f"calls: {report['calls']} ({report['timed_calls']} timed; a first call per variant is not; "
        f"{report.get('fast_calls', 0)} by the fast path)" + (f" (last served by {report['last_selection']})" if report.get("last_selection") else ""),
    ]
    if "profiles" in report:
        hits = report["profiles"]["profile_hits"]
        if hits:
            lines.append("profile hits: " + ", ".join(f"{k}={v}" for k, v in hits.items()))
        if report["profiles"]["generic_calls"]:
            lines.append(f"generic calls: {report['profiles']['generic_calls']}")
        for name, v in report["profiles"].get("variants", {}).items():
            at = ", ".join(f"{k}={x}" for k, x in sorted(v["at"].items()))
            lines.append(
                f"{name} at {at}: {len(v['static_kernels'])} static kernel(s), {len(v['dynamic_kernels'])} dynamic "
                f"by measurement; calls {v['static_calls']} at {at}, {v['dynamic_calls']} elsewhere"
            )
    lines.append("schedule:")
    times = report.get("kernel_time_s", {})
    for k in report["kernels"]:
        t = times.get(k["name"])
        timing = f"  {t['mean_s'] * 1e6:.1f} us/call" if t else ""
        split = f"  (split along {k['split']})" if k.get("split") else ""
        prec = f"  [{k['precision']}]" if k.get("precision") else ""
        # The library kernels kiln-select-kernels chose for its ops (native.attention), or a user kernel.
        impl = f"  ({k['impl']})" if k.get("impl") not in (None, k["kind"]) else ""
        lines.append(f"  {k['name']:<16} {k['kind']:<9} {' + '.join(k['ops'])}{impl}{prec}{split}{timing}")
    return "\n".join(lines)
