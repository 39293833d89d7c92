"""The import report: what each source op type became, and the fallback rate.

Per source op type (``aten.linear``, ``onnx.Conv``): how many ops were
converted directly (one kiln op), decomposed (several kiln ops), or fell back
(``kiln.fallback``).  The fallback rate is given as a share of ops and as a
share of FLOPs.  FLOPs are estimated on the kiln IR with every symbol bound to
its ``opt`` point (or 8, clamped into its range): matmul ``2*M*N*K``, conv
``2*N*O*OH*OW*C/groups*KH*KW``, attention from its two products, everything
else one FLOP per output element (data movement none); a fallback op counts one per
output element.

The report agrees with what :func:`kiln.compile` does with the module: every
op it counts as a fallback is a ``kiln.fallback`` that the runtime runs, in
PyTorch (``torch.ops``) or, for an ONNX node, in ONNX Runtime (a one-node
model, :mod:`kiln.runtime.ort_fallback`); ``fallback_runtimes`` says which
per op type.  An op neither can run is an error at import, as it would be at
compile.  When ONNX Runtime fallbacks need the ``onnxruntime`` extra and it
is not installed, a note says so (compile then fails naming the extra).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from .. import progress
from .._mlir import ir
from ..context import DiagnosticCollector
from ..conversions.torch_to_kiln import convert_module
from ..dialects.dims import SYMBOL_MAX, evaluate
from ..dialects.kiln import tensor_info
from ..errors import ConversionError, KilnError, VerifyError
from ..module import symbols_of, verify_module

__all__ = ["ImportReport", "fallback_locations", "fallback_runtimes", "finish"]

#: Stage times at INFO (kiln.compile's first stages), as the ONNX importer's.
_log = logging.getLogger("kiln.import")


@dataclass
class ImportReport:
    """Counts per source op type, FLOPs, symbols and notes of one import."""

    source: str = ""
    ops: dict = field(default_factory=dict)  # op type -> {"converted": n, "decomposed": n, "fallback": n}
    flops: dict = field(default_factory=lambda: {"converted": 0.0, "fallback": 0.0})
    symbols: dict = field(default_factory=dict)  # name -> [min, max]
    notes: list = field(default_factory=list)
    unsupported: list = field(default_factory=list)  # [op type, location, reason]
    runtimes: dict = field(default_factory=dict)  # fallback op type -> "pytorch" / "onnxruntime"

    def total(self, kind: str | None = None) -> int:
        """Number of counted source ops (of one kind, or all)."""
        kinds = [kind] if kind else ["converted", "decomposed", "fallback"]
        return sum(c.get(k, 0) for c in self.ops.values() for k in kinds)

    @property
    def fallbacks(self) -> int:
        """Number of source ops that became ``kiln.fallback``."""
        return self.total("fallback")

    @property
    def fallback_rate(self) -> float:
        """Share of counted source ops that fell back."""
        n = self.total()
        return self.fallbacks / n if n else 0.0

    @property
    def fallback_flops_rate(self) -> float:
        """Share of estimated FLOPs in fallback ops."""
        total = self.flops["converted"] + self.flops["fallback"]
        return self.flops["fallback"] / total if total else 0.0

    @property
    def fallback_sites(self) -> list[dict]:
        """One ``{"op", "location", "runtime", "reason"}`` per fallback op:
        where the model uses it (``model.py:42``, ``node 'Mul_3' (Mul)``) and
        what runs it (``"pytorch"`` or ``"onnxruntime"``)."""
        return [{"op": name, "location": loc, "runtime": self.runtimes.get(name, "pytorch"), "reason": why}
                for name, loc, why in self.unsupported]

    def to_dict(self) -> dict:
        """The report as plain JSON data."""
        return {
            "source": self.source,
            "ops": self.ops,
            "totals": {k: self.total(k) for k in ("converted", "decomposed", "fallback")},
            "fallback_rate_ops": self.fallback_rate,
            "flops": self.flops,
            "fallback_rate_flops": self.fallback_flops_rate,
            "symbols": self.symbols,
            "notes": self.notes,
            "unsupported": self.unsupported,
            "fallback_runtimes": self.runtimes,
            "fallback_sites": self.fallback_sites,
        }

    def to_json(self) -> str:
        """The report as indented JSON text (:meth:`to_dict`)."""
        return json.dumps(self.to_dict(), indent=2)

    def format(self) -> str:
        """A table: one row per op type, then totals, rates, symbols and notes."""
        rows = [f"{'op':<40} {'converted':>9} {'decomposed':>10} {'fallback':>8}"]
        for name in sorted(self.ops):
            c = self.ops[name]
            rows.append(f"{name:<40} {c.get('converted', 0):>9} {c.get('decomposed', 0):>10} {c.get('fallback', 0):>8}")
        rows.append(
            f"{'total':<40} {self.total('converted'):>9} {self.total('decomposed'):>10} {self.total('fallback'):>8}"
        )
        rows.append(f"fallback rate: {self.fallback_rate:.1%} of ops, {self.fallback_flops_rate:.1%} of FLOPs")
        for name, (lo, hi) in self.symbols.items():
            rows.append(f"symbol {name}: {lo} <= {name} <= {hi}")
        rows.extend(f"note: {n}" for n in self.notes)
        for name, loc, why in self.unsupported:
            runs = _RUNS_IN.get(self.runtimes.get(name), "")
            rows.append(f"fallback: {name} at {loc}: {why}" + (f" (runs in {runs})" if runs else ""))
        return "\n".join(rows)


_RUNS_IN = {"pytorch": "PyTorch", "onnxruntime": "ONNX Runtime"}


def fallback_runtimes(module_op) -> dict:
    """``{op name: "pytorch" | "onnxruntime"}`` for the ``kiln.fallback`` ops of
    a kiln module: ONNX Runtime runs those carrying a one-node ONNX model."""
    from ..runtime.ort_fallback import MODEL_ATTR

    out = {}

    def visit(op):
        if op.name == "kiln.fallback":
            attrs = op.attributes["attrs"] if "attrs" in op.attributes else None
            ort = attrs is not None and MODEL_ATTR in ir.DictAttr(attrs)
            out[ir.StringAttr(op.attributes["op_name"]).value] = "onnxruntime" if ort else "pytorch"
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    return out


def fallback_locations(module_op) -> dict:
    """``{printed location: user's text}`` (:func:`kiln.locations.location_text`)
    of the ``kiln.fallback`` ops of a kiln module."""
    from ..locations import location_text

    out = {}

    def visit(op):
        if op.name == "kiln.fallback":
            out[str(op.location)] = location_text(op.location)
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    return out


def _binding(symbols) -> dict:
    out = {}
    for name, info in symbols.items():
        v = info.opt if info.opt is not None else 8
        out[name] = max(info.min, min(info.max, v))
    return out


def _numel(t, binding) -> float:
    try:
        info = tensor_info(t)
        n = 1
        for d in info.dims:
            n *= evaluate(d, binding)
        return float(n)
    except Exception:
        return 0.0


def _dimval(d, binding) -> float:
    try:
        return float(evaluate(d, binding))
    except Exception:
        return 0.0


# Data movement: no arithmetic, so no FLOPs.
_NO_FLOPS = {"kiln.symbol", "kiln.constant", "kiln.transpose", "kiln.reshape", "kiln.slice", "kiln.expand",
             "kiln.concat", "kiln.pad", "kiln.gather", "kiln.cast"}


def estimate_flops(module_op) -> dict:
    """``{"converted": flops, "fallback": flops}`` of a kiln module (see module docstring)."""
    binding = _binding(symbols_of(module_op))
    out = {"converted": 0.0, "fallback": 0.0}

    def visit(op):
        name = op.name
        if not name.startswith("kiln.") or name in _NO_FLOPS:
            return ir.WalkResult.ADVANCE
        res = list(op.results)
        if not res:
            return ir.WalkResult.ADVANCE
        n = _numel(res[0].type, binding)
        if name == "kiln.matmul":
            a = tensor_info(op.operands[0].type).dims
            n *= 2 * _dimval(a[-1], binding)
        elif name == "kiln.conv2d":
            w = tensor_info(op.operands[1].type).dims
            n *= 2 * _dimval(w[1], binding) * _dimval(w[2], binding) * _dimval(w[3], binding)
        elif name == "kiln.attention":
            k = tensor_info(op.operands[1].type).dims
            n *= 4 * _dimval(k[-2], binding)  # q k^T and p v, head dims alike
        out["fallback" if name == "kiln.fallback" else "converted"] += n
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    return out


def finish(mod: ir.Module, *, fallback=True, symbol_names=None, resources=None, source="", notes=(),
           arg_dims=None, symbol_ranges=None, named=(), onnx_model=None) -> ImportReport:
    """Convert the torch-dialect ``mod`` to kiln in place, verify it, and report.

    ``onnx_model`` is the ONNX model ``mod`` was imported from (its nodes
    become the payload of ONNX Runtime fallbacks).  Raises KilnError
    subclasses (never returns a partial module as success).
    """
    progress.stage("conversion to kiln")
    start = time.perf_counter()
    with DiagnosticCollector(mod.context) as diags:
        try:
            stats = convert_module(mod.operation, fallback=fallback, symbol_names=symbol_names,
                                   resources=resources, arg_dims=arg_dims, symbol_ranges=symbol_ranges,
                                   onnx_model=onnx_model)
        except KilnError:
            raise
        except Exception as e:  # a bug in a pattern must not reach the user as a traceback
            raise ConversionError(f"conversion to kiln failed: {type(e).__name__}: {e}") from None
    if diags.errors:
        raise VerifyError("conversion to kiln emitted errors", diags.errors)
    verify_module(mod.operation)
    _log.info("conversion to kiln: %.3f s (%d op(s) converted, %d decomposed, %d fallback)",
              time.perf_counter() - start, sum(stats.converted.values()), sum(stats.decomposed.values()),
              sum(stats.fallback.values()))
    report = ImportReport(source=source, notes=list(notes))
    for kind in ("converted", "decomposed", "fallback"):
        for name, n in getattr(stats, kind).items():
            key = name.removeprefix("torch.")
            report.ops.setdefault(key, {"converted": 0, "decomposed": 0, "fallback": 0})[kind] += n
    # Where each fallback is, as the user reads it (the model's file:line, an
    # ONNX node's label): the conversion records the printed location, its
    # kiln.fallback keeps the location itself.
    texts = fallback_locations(mod.operation)
    report.unsupported = [[n.removeprefix("torch."), texts.get(loc, loc), why] for n, loc, why in stats.unsupported]
    report.runtimes = fallback_runtimes(mod.operation)
    ort_ops = sorted(n for n, r in report.runtimes.items() if r == "onnxruntime")
    if ort_ops:
        from ..runtime.ort_fallback import EXTRA

        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            report.notes.append(f"{', '.join(ort_ops)} run(s) in ONNX Runtime, which is not installed: "
                                f"kiln.compile will fail until it is (pip install '{EXTRA}')")
    syms = symbols_of(mod.operation)
    report.symbols = {name: [info.min, info.max] for name, info in syms.items()}
    for name, info in syms.items():
        if info.max == SYMBOL_MAX and name not in set(named):
            report.notes.append(f"symbol '{name}' has no declared range: 1 <= {name} <= {SYMBOL_MAX}")
    try:
        report.flops = estimate_flops(mod.operation)
    except KilnError:
        pass
    return report
