"""``kiln-plan-memory``: lifetimes, arena offsets and the arena size, symbolically.

From the schedule (see :mod:`kiln.transforms.partition`; an unpartitioned
function counts each kiln op as a step), every intermediate tensor gets a
lifetime ``[defining step, last step reading it]`` and a size in bytes, a
dim expression rounded up to ``alignment``.  Buffers whose lifetimes do not
overlap share space: they are assigned to *slots* (linear scan in schedule
order; a slot is free once its last buffer is dead), a slot is as large as
the largest buffer it holds (``max(...)``), and the slots lie one after the
other in one arena.  Offsets and the arena size are therefore expressions of
the symbols, which the runtime evaluates once per bound shape.

Model inputs, constants and outputs are not in the arena (the caller owns
them).  The plan is printed as attributes::

    %1 = call @main_k0(...) {kiln.buffers = [{live = array<i64: 0, 1>, offset = "0", size = "128*B"}]}
    func.func @main(...) attributes {kiln.arena_size = "256*B", kiln.no_reuse_size = "384*B", ...}

An output's entry is ``{output = 0 : i64, size = "..."}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from .._mlir import ir
from ..dialects.dims import FloorDiv, _DimPrinter, dim
from ..errors import KilnError
from ..module import symbols_of
from ..pipelines.registry import Option, Pass, register_pass
from .partition import Schedule, read_schedule

__all__ = ["Buffer", "MemoryPlan", "PlanMemory", "expr_text", "itemsize", "plan_memory", "read_plan", "schedule_function"]

_ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8}


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
    return _PRINTER.doprint(sympy.sympify(expr)).replace(" ", "")


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

    def sizes_at(self, binding) -> tuple[int, int]:
        """``(planned arena bytes, no-reuse bytes)`` for one binding."""
        from ..runtime.contract import compile_expr

        return compile_expr(self.arena_size)[0](binding), compile_expr(self.no_reuse_size)[0](binding)


def _opt_binding(symbols) -> dict[str, int]:
    return {n: (s.opt if s.opt is not None else s.max) for n, s in symbols.items()}


def _value_at(expr, binding) -> int:
    from ..runtime.contract import compile_expr

    return compile_expr(expr_text(expr))[0](binding)


def plan_memory(schedule: Schedule, symbols, *, alignment: int = 64, reuse: bool = True,
                aliases: dict[int, int] | None = None) -> tuple[MemoryPlan, list[Buffer]]:
    """Plan the arena of ``schedule``; returns the plan and its buffers.

    ``symbols`` (name -> SymbolInfo) gives the shape slot choices are
    compared at (each symbol's opt, else its max); any assignment is valid for
    every shape, the comparison only steers which buffers share a slot.
    ``aliases`` maps intermediates that are views of another value (a
    reshape run as a view) to that value: they get no buffer, and every use
    of a view keeps the value it views alive.
    """
    aliases = dict(aliases or {})

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
    plan = MemoryPlan(aliases=aliases)
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
    slots: list[dict] = []  # {"size": expr, "last": step, "members": [...]}
    for b in sorted(buffers, key=lambda b: (b.first, b.value)):
        size_now = _value_at(b.size, at)
        free = [i for i, s in enumerate(slots) if s["last"] < b.first] if reuse else []
        choice = None
        if free:
            fitting = [i for i in free if _value_at(slots[i]["size"], at) >= size_now]
            if fitting:
                choice = min(fitting, key=lambda i: _value_at(slots[i]["size"], at))
            else:
                choice = max(free, key=lambda i: _value_at(slots[i]["size"], at))
        if choice is None:
            slots.append({"size": b.size, "last": b.last, "members": [b]})
            b.slot = len(slots) - 1
        else:
            s = slots[choice]
            s["size"] = sympy.Max(s["size"], b.size)
            s["last"] = b.last
            s["members"].append(b)
            b.slot = choice
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


def _public_functions(module):
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "func.func" or "kiln.kernel" in op.attributes:
            continue
        if "sym_visibility" in op.attributes and ir.StringAttr(op.attributes["sym_visibility"]).value == "private":
            continue
        if len(op.regions[0].blocks):
            yield op


def _check_known_dims(schedule: Schedule) -> None:
    """Every planned tensor needs a size: a ``'?'`` dim is an error at the
    op that defines it (shape inference has not run)."""
    for v in schedule.values:
        if v.kind in ("intermediate", "output") and v.step >= 0 and any(d.is_unknown for d in v.info.dims):
            op = schedule.steps[v.step].op
            op.location.emit_error(
                f"'{op.name}' op result #{v.index} has a '?' dim: run kiln-infer-shapes before kiln-plan-memory"
            )
            raise KilnError("memory planning failed")


def _i64(v: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


@register_pass
class PlanMemory(Pass):
    """Attach the arena plan to the schedule (see the module docstring)."""

    name = "kiln-plan-memory"
    summary = "Plan intermediate buffers into one arena: lifetimes, symbolic offsets and arena size as attributes"
    options = (
        Option("alignment", int, 64, "byte alignment of every buffer"),
        Option("reuse", bool, True, "let buffers with disjoint lifetimes share space"),
    )

    def run(self, module) -> None:
        symbols = symbols_of(module)
        for fn in list(_public_functions(module)):
            name = ir.StringAttr(fn.attributes["sym_name"]).value
            schedule = read_schedule(module, name)
            _check_known_dims(schedule)
            plan, buffers = plan_memory(
                schedule, symbols, alignment=self.option("alignment"), reuse=self.option("reuse")
            )
            for step in schedule.steps:
                entries = []
                for vid in step.outputs:
                    if vid in plan.buffers:
                        b = plan.buffers[vid]
                        entries.append(ir.DictAttr.get({
                            "offset": ir.StringAttr.get(b["offset"]),
                            "size": ir.StringAttr.get(b["size"]),
                            "live": ir.DenseI64ArrayAttr.get(list(b["live"])),
                        }))
                    else:
                        entries.append(ir.DictAttr.get({
                            "output": _i64(schedule.values[vid].index),
                            "size": ir.StringAttr.get(plan.outputs[vid]),
                        }))
                step.op.attributes["kiln.buffers"] = ir.ArrayAttr.get(entries)
            fn.attributes["kiln.arena_size"] = ir.StringAttr.get(plan.arena_size)
            fn.attributes["kiln.no_reuse_size"] = ir.StringAttr.get(plan.no_reuse_size)
            fn.attributes["kiln.arena_buffers"] = _i64(len(buffers))
            self.bump("buffers planned", len(buffers))
            self.bump("arena slots", len({b.slot for b in buffers}))


def read_plan(module, function: str | None = None) -> tuple[Schedule, MemoryPlan]:
    """The schedule and the plan printed by ``kiln-plan-memory`` on ``function``.

    Raises KilnError when the function carries no plan.
    """
    schedule = read_schedule(module, function)
    fn = schedule_function(module, schedule.function)
    if "kiln.arena_size" not in fn.attributes:
        raise KilnError(f"'@{schedule.function}' has no memory plan: run kiln-plan-memory")
    plan = MemoryPlan(
        arena_size=ir.StringAttr(fn.attributes["kiln.arena_size"]).value,
        no_reuse_size=ir.StringAttr(fn.attributes["kiln.no_reuse_size"]).value,
    )
    for step in schedule.steps:
        entries = ir.ArrayAttr(step.op.attributes["kiln.buffers"])
        for vid, entry in zip(step.outputs, entries):
            entry = ir.DictAttr(entry)
            size = ir.StringAttr(entry["size"]).value
            if "output" in entry:
                plan.outputs[vid] = size
            else:
                live = [int(x) for x in ir.DenseI64ArrayAttr(entry["live"])]
                plan.buffers[vid] = {"offset": ir.StringAttr(entry["offset"]).value, "size": size, "live": tuple(live)}
    return schedule, plan


def schedule_function(module, name: str):
    """The ``func.func`` called ``name``."""
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    raise KilnError(f"no function '@{name}' in the module")

