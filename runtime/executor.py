"""Run a schedule of kernels out of one planned arena.

:class:`Executor` is the part of a compiled model that executes a bound call:
it evaluates the memory plan at the binding (cached per shape), takes an
arena of that size from the pool, gives every intermediate a view into it,
allocates the outputs (the caller keeps them), and launches the kernels in
schedule order.  Kernels follow kiln's kernel contract
(``kernel(inputs, outputs, binding)`` writing into preallocated outputs) and
receive torch CPU tensors.  Each call has its own arena, so one executor
serves several threads at once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ..errors import KilnError
from .arena import ArenaPlan, ArenaPool, CallArena, torch_dtype
from .contract import compile_expr
from .report import Metrics

__all__ = ["Executor", "constant_tensor"]


def constant_tensor(op) -> torch.Tensor:
    """The data of a ``kiln.constant`` op as a torch tensor (a splat is expanded)."""
    from .._mlir import ir

    attr = op.operation.attributes["value"]
    if not isinstance(attr, ir.DenseElementsAttr):
        raise KilnError(f"cannot read constant data from {type(attr).__name__} (only dense attributes)")
    t = ir.RankedTensorType(attr.type)
    shape = tuple(t.shape)
    if attr.is_splat:
        value = np.array(attr.get_splat_value().value if hasattr(attr.get_splat_value(), "value") else attr.get_splat_value())
        return torch.from_numpy(np.full(shape, value, dtype=_np_dtype(str(t.element_type))))
    return torch.from_numpy(np.array(attr).reshape(shape).copy())


def _np_dtype(name: str):
    return {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i1": np.bool_, "i8": np.int8,
            "i16": np.int16, "i32": np.int32, "i64": np.int64}[name]


class Executor:
    """Executes ``schedule`` with ``kernels[i]`` for step ``i`` (see the module docstring).

    ``constants`` maps value ids of ``kiln.constant`` values to tensors;
    ``plan`` is a :class:`~kiln.transforms.plan_memory.MemoryPlan`.
    """

    def __init__(
        self,
        schedule,
        plan,
        kernels: Sequence,
        constants: Mapping[int, torch.Tensor] | None = None,
        *,
        pool: ArenaPool | None = None,
        metrics: Metrics | None = None,
    ):
        if len(kernels) != len(schedule.steps):
            raise KilnError(f"{len(kernels)} kernels for a schedule of {len(schedule.steps)} steps")
        self.schedule = schedule = schedule.detached()
        self.kernels = list(kernels)
        self.constants = dict(constants or {})
        self.arena_plan = ArenaPlan.from_plan(plan)
        self.in_arena = set(plan.buffers)
        self.pool = pool or ArenaPool()
        self.metrics = metrics or Metrics()
        self._shape = {
            v.id: [compile_expr(d)[0] for d in v.info.dims] for v in schedule.values
        }
        self._dtype = {v.id: str(v.info.dtype) for v in schedule.values}
        self._fallback = [s.kind == "fallback" for s in schedule.steps]

    def shape(self, vid: int, binding: Mapping[str, int]) -> tuple[int, ...]:
        """The concrete shape of value ``vid`` under ``binding``."""
        try:
            return tuple(f(binding) for f in self._shape[vid])
        except KeyError as e:
            raise KilnError(
                f"value {vid} has a dim over symbol {e} that no input binds (a data-dependent shape)"
            ) from None

    def run(self, inputs: Sequence, binding: Mapping[str, int], selection: str | None = None) -> list[torch.Tensor]:
        """Run one call on torch tensors or numpy arrays; returns torch tensors."""
        sched = self.schedule
        layout = self.arena_plan.layout(binding)
        profiling = self.metrics.profiling
        per_kernel = {} if profiling else None
        env: dict[int, torch.Tensor] = {}
        for vid, x in zip(sched.inputs, inputs):
            env[vid] = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
        env.update(self.constants)
        fallback_s = 0.0
        start = time.perf_counter()
        with CallArena(self.pool, layout) as arena:
            for step, kernel, is_fb in zip(sched.steps, self.kernels, self._fallback):
                outs = []
                for vid in step.outputs:
                    shape = self.shape(vid, binding)
                    if vid in self.in_arena:
                        t = arena.view(vid, shape, self._dtype[vid])
                    else:
                        t = torch.empty(shape, dtype=torch_dtype(self._dtype[vid]))
                    env[vid] = t
                    outs.append(t)
                ins = [env[v] for v in step.inputs]
                if is_fb or profiling:
                    t0 = time.perf_counter()
                    kernel(ins, outs, binding)
                    dt = time.perf_counter() - t0
                    if is_fb:
                        fallback_s += dt
                    if profiling:
                        per_kernel[step.name] = per_kernel.get(step.name, 0.0) + dt
                else:
                    kernel(ins, outs, binding)
            results = []
            for vid in sched.outputs:
                t = env[vid]
                # An output that is an input, a constant or (never, by the
                # plan) an arena view must not alias memory the caller or the
                # next call owns.
                if vid not in sched.inputs and vid not in self.constants and vid not in self.in_arena:
                    results.append(t)
                else:
                    results.append(t.clone())
        total = time.perf_counter() - start
        self.metrics.record(
            binding, len(sched.steps), total, fallback_s,
            (layout.arena_bytes, layout.no_reuse_bytes), per_kernel, selection,
        )
        return results
