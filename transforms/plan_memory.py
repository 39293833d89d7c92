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

from .._mlir import ir
from ..errors import KilnError
from ..module import symbols_of
from ..pipelines.registry import Option, Pass, register_pass

# The planner itself is plain Python over sympy, kept in the runtime (a
# loaded artifact plans its profiles' arenas without MLIR); this module is
# the pass that runs it on the IR and reads the plan back.
from ..runtime.memplan import Buffer, MemoryPlan, expr_text, itemsize, plan_memory  # noqa: F401
from .partition import Schedule, read_schedule

__all__ = ["Buffer", "MemoryPlan", "PlanMemory", "expr_text", "itemsize", "plan_memory", "read_plan", "schedule_function"]

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

