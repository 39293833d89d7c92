"""The arena planner: lifetimes, slots, symbolic offsets and the arena size.

:func:`plan_memory` is what the ``kiln-plan-memory`` pass
(:mod:`kiln.transforms.plan_memory`, whose docstring describes the plan)
runs on a schedule.  It is plain Python over sympy and the dim algebra, kept
in the runtime so that a model loaded from an artifact
(:mod:`kiln.runtime.artifact`) plans the arenas of its profiles without
MLIR.  A schedule is anything with ``steps`` (``inputs``, ``outputs``) and
``values`` (``id``, ``kind``, ``info.dims``, ``info.dtype``, ``step``,
``index``): the pass's :class:`~kiln.transforms.partition.Schedule` or an
artifact's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import sympy

from ..dialects.dims import FloorDiv, _DimPrinter, dim
from ..errors import KilnError

__all__ = ["Buffer", "MemoryPlan", "expr_text", "itemsize", "plan_memory"]

_ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "ui8": 1, "i16": 2, "i32": 4, "i64": 8}


def itemsize(dtype) -> int:
    """Bytes per element of a kiln dtype (an ``ir.Type`` or its name)."""
    try:
        return _ITEMSIZE[str(dtype)]
    except KeyError:
        raise KilnError(f"no element size for dtype '{dtype}'") from None


class _PlanPrinter(_DimPrinter):
    """Dim syntax plus ``max(a, b)``: what :func:`kiln.runtime.contract.compile_expr` reads."""

    def _print_Max(self, expr):  # noqa: N802 (sympy printer protocol)
        return "max(" + ", ".join(self._print(a) for a in expr.args) + ")"


_PRINTER = _PlanPrinter()


def expr_text(expr) -> str:
    """Canonical text of a size/offset expression (no spaces)."""
    return _text(sympy.sympify(expr))


@functools.lru_cache(maxsize=8192)
def _text(expr: sympy.Expr) -> str:
    # A plan prints each buffer's size and offset, and the sizes again to
    # evaluate them: the same expressions, each printed once (sympy's printer
    # was a third of a plan's time).
    return _PRINTER.doprint(expr).replace(" ", "")


def _aligned(nbytes: sympy.Expr, alignment: int) -> sympy.Expr:
    """``nbytes`` rounded up to a multiple of ``alignment``, kept readable:
    when every symbolic term is already a multiple, only the constant rounds."""
    nbytes = sympy.expand(nbytes)
    if alignment <= 1:
        return nbytes
    const, rest = nbytes.as_coeff_Add()
    coeffs = [sympy.sympify(c) for c in rest.as_coefficients_dict().values()] if rest != 0 else []
    if const.is_Integer and all(c.is_Integer and int(c) % alignment == 0 for c in coeffs):
        return rest + alignment * (-(-int(const) // alignment))
    return alignment * FloorDiv(nbytes + alignment - 1, sympy.Integer(alignment))


@dataclass
class Buffer:
    """One intermediate tensor's place in the arena."""

    value: int  # value id in the schedule
    step: int  # defining step
    result: int  # result number of that step
    first: int
    last: int
    size: sympy.Expr
    offset: sympy.Expr = sympy.Integer(0)
    slot: int = -1


@dataclass
class MemoryPlan:
    """Buffers (by value id), the arena size and the no-reuse total, as text."""

    buffers: dict[int, dict] = field(default_factory=dict)  # value id -> {offset, size, live}
    arena_size: str = "0"
    no_reuse_size: str = "0"
    outputs: dict[int, str] = field(default_factory=dict)  # value id -> size text
    aliases: dict[int, int] = field(default_factory=dict)  # value id -> the value it is a view of
    # value id -> the input of its step whose buffer it is written into (a donated
    # kiln.update_slice dest): no buffer of its own, and the step still runs.
    inplace: dict[int, int] = field(default_factory=dict)
    # model output value id -> the model input value id it mutates (torch's
    # mutated user inputs): written back into the caller's array, not returned.
    donated: dict[int, int] = field(default_factory=dict)

    def sizes_at(self, binding) -> tuple[int, int]:
        """``(planned arena bytes, no-reuse bytes)`` for one binding."""
        from ..runtime.contract import compile_expr

        return compile_expr(self.arena_size)[0](binding), compile_expr(self.no_reuse_size)[0](binding)


def _opt_binding(symbols) -> dict[str, int]:
    return {n: (s.opt if s.opt is not None else s.max) for n, s in symbols.items()}


def _value_at(expr, binding) -> int:
    from ..runtime.contract import compile_expr

    return compile_expr(expr_text(expr))[0](binding)


def _dominates(a, b) -> bool:
    """Whether ``a >= b`` for every value of the (nonnegative) symbols, by a
    cheap sufficient test: ``a - b`` expands to a polynomial in plain symbols
    whose coefficients, constant included, are all nonnegative."""
    diff = sympy.expand(a - b)
    for term, coeff in diff.as_coefficients_dict().items():
        if coeff < 0 or not all(f.is_Symbol or (f.is_Pow and f.base.is_Symbol and f.exp.is_positive)
                                for f in sympy.Mul.make_args(term) if not f.is_Number):
            return False
    return True


def _max(sizes: list) -> sympy.Expr:
    """``sympy.Max`` of ``sizes``, the ones another provably covers left
    out first (:func:`_dominates`; sympy's own pairwise comparison of every
    argument is what made large maxes slow), so that sympy compares few."""
    kept: list = []
    for e in sizes:
        if any(_dominates(k, e) for k in kept):
            continue
        kept = [k for k in kept if not _dominates(e, k)] + [e]
    return sympy.Max(*kept)


def plan_memory(schedule, symbols, *, alignment: int = 64, reuse: bool = True,
                aliases: dict[int, int] | None = None, inplace: dict[int, int] | None = None,
                donated: dict[int, int] | None = None) -> tuple[MemoryPlan, list[Buffer]]:
    """Plan the arena of ``schedule``; returns the plan and its buffers.

    ``symbols`` (name -> SymbolInfo) gives the shape slot choices are
    compared at (each symbol's opt, else its max); any assignment is valid for
    every shape, the comparison only steers which buffers share a slot.
    ``aliases`` maps intermediates that are views of another value (a
    reshape run as a view) to that value: they get no buffer, and every use
    of a view keeps the value it views alive.  ``inplace`` maps values a
    kernel writes into the buffer of one of its inputs (donation, see
    :class:`MemoryPlan`) alike: they take no space, model outputs included
    (a donated dest is the caller's input, not a temporary); ``donated`` is
    recorded for the runtime.
    """
    inplace = dict(inplace or {})
    plan = MemoryPlan(aliases=dict(aliases or {}), inplace=inplace, donated=dict(donated or {}))
    aliases = {**(aliases or {}), **inplace}

    def root(v: int) -> int:
        while v in aliases:
            v = aliases[v]
        return v

    last_use: dict[int, int] = {}
    for s_index, step in enumerate(schedule.steps):
        for v in step.inputs:
            last_use[v] = s_index
            last_use[root(v)] = s_index
    buffers: list[Buffer] = []
    for v in schedule.values:
        if v.kind not in ("intermediate", "output") or v.id in aliases:
            continue
        elems = sympy.Integer(1)
        for d in v.info.dims:
            elems = elems * dim(d).expr
        nbytes = _aligned(elems * itemsize(v.info.dtype), alignment)
        if v.kind == "output":
            plan.outputs[v.id] = expr_text(nbytes)
            continue
        buffers.append(Buffer(v.id, v.step, v.index, v.step, max(last_use.get(v.id, v.step), v.step), nbytes))

    at = _opt_binding(symbols)
    # Each slot's size is the max of its members' sizes: its value at ``at``
    # is the max of theirs, kept as a number (evaluating the growing max
    # expression at every comparison, and building it with sympy.Max at every
    # join, took 1.7 s of each plan of a 53-kernel model); the expression is
    # built once per slot below.
    slots: list[dict] = []  # {"at": size at `at`, "last": step, "members": [...]}
    for b in sorted(buffers, key=lambda b: (b.first, b.value)):
        size_now = _value_at(b.size, at)
        free = [i for i, s in enumerate(slots) if s["last"] < b.first] if reuse else []
        choice = None
        if free:
            fitting = [i for i in free if slots[i]["at"] >= size_now]
            if fitting:
                choice = min(fitting, key=lambda i: slots[i]["at"])
            else:
                choice = max(free, key=lambda i: slots[i]["at"])
        if choice is None:
            slots.append({"at": size_now, "last": b.last, "members": [b]})
            b.slot = len(slots) - 1
        else:
            s = slots[choice]
            s["at"] = max(s["at"], size_now)
            s["last"] = b.last
            s["members"].append(b)
            b.slot = choice
    for s in slots:
        s["size"] = _max([b.size for b in s["members"]])
    offset = sympy.Integer(0)
    for s in slots:
        for b in s["members"]:
            b.offset = offset
        offset = offset + s["size"]
    plan.arena_size = expr_text(offset)
    plan.no_reuse_size = expr_text(sum((b.size for b in buffers), sympy.Integer(0)))
    for b in buffers:
        plan.buffers[b.value] = {"offset": expr_text(b.offset), "size": expr_text(b.size), "live": (b.first, b.last)}
    return plan, buffers
