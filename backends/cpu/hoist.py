"""Run the kernels that depend only on constants once, at compile time.

A kernel whose only inputs are constants (a weight's transpose that
kiln-fold-constants left, past its size limit, and that something besides
products reads: the partitioner gives it a kernel of its own) would compute
the same value on every call (two 16 MiB transposes per MLP call were once
100+ ms of the naive 115 ms at B=1).  A transpose only products read goes
into their kernels instead, read through the product's map.
:func:`hoist_constant_steps` runs such kernels once after the JIT, turns
their outputs into constants of the schedule, drops the steps and re-plans
the arena (the hoisted buffers no longer take arena space).
"""

from __future__ import annotations

import torch

__all__ = ["hoist_constant_steps"]


def hoist_constant_steps(prepared, kernels: list, symbols) -> list:
    """Evaluate the constant-only generated steps of ``prepared`` (in place); the remaining kernels.

    A step is hoisted when it is a generated kernel, every input is a
    constant (or a hoisted value), every output has static dims and none is
    a model output.  ``prepared.schedule``, ``.plan`` and ``.constants`` are
    updated; the returned list is parallel to the new schedule's steps.
    """
    from ...dialects.dims import dim, evaluate
    from ...runtime.arena import torch_dtype
    from ...transforms.partition import Schedule
    from ...transforms.plan_memory import plan_memory

    sched = prepared.schedule
    consts = prepared.constants
    values = sched.values
    keep_steps, keep_kernels, new_index = [], [], {}
    hoisted = 0
    for i, (step, kernel) in enumerate(zip(sched.steps, kernels)):
        outs = [values[v] for v in step.outputs]
        if (step.kind == "generated" and all(v in consts for v in step.inputs)
                and all(o.kind == "intermediate" and all(dim(d).is_static for d in o.info.dims) for o in outs)):
            tensors = [torch.empty(tuple(evaluate(d, {}) for d in o.info.dims), dtype=torch_dtype(str(o.info.dtype)))
                       for o in outs]
            kernel([consts[v] for v in step.inputs], tensors, {})
            for o, t in zip(outs, tensors):
                consts[o.id] = t
                o.kind, o.step, o.index = "constant", -1, 0
            hoisted += 1
            continue
        new_index[i] = len(keep_steps)
        keep_steps.append(step)
        keep_kernels.append(kernel)
    if not hoisted:
        return kernels
    for v in values:
        if v.step >= 0:
            v.step = new_index[v.step]
    prepared.schedule = Schedule(sched.function, values, keep_steps, sched.inputs, sched.outputs, {})
    # The donations stand (value ids, which hoisting keeps): without them a
    # mutated input (an LLM's KV cache) came back as an extra output.
    prepared.plan, _ = plan_memory(prepared.schedule, symbols, inplace=prepared.plan.inplace,
                                   donated=prepared.plan.donated)
    prepared.generated = {new_index[i]: n for i, n in prepared.generated.items() if i in new_index}
    prepared.fallback = {new_index[i]: k for i, k in prepared.fallback.items() if i in new_index}
    return keep_kernels
