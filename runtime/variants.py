"""What serves one profile: kernel choices made at its opt point.

A profile (or a ``"specialize"`` bucket) runs the dynamic kernels at every
shape in its range, out of a memory plan made for its opt point.  Where the
backend can compile *static* kernels (every symbol bound to the opt value),
:func:`choose_kernels` times both versions of every step at the opt shape
and keeps the static one where it is faster; :class:`ProfileVariant` runs
that mix when a call binds exactly the opt shape, the dynamic kernels
otherwise.  The choices and the number of calls each side served are in
the report.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import torch

from .arena import ArenaPool, torch_dtype
from .report import Metrics

__all__ = ["ProfileVariant", "choose_kernels", "synthetic_inputs"]

#: A static kernel replaces the dynamic one only when at least this much faster
#: (timer noise on microsecond kernels must not flip choices back and forth).
MIN_GAIN = 0.05


class ProfileVariant:
    """Runs ``static`` (an executor) at exactly ``at``, ``dynamic`` elsewhere."""

    def __init__(self, at: Mapping[str, int], dynamic, static=None, choices: Mapping | None = None):
        self.at = dict(at)
        self.dynamic = dynamic
        self.static = static
        self.choices = dict(choices or {})
        self._lock = threading.Lock()
        self.static_calls = 0
        self.dynamic_calls = 0

    def matches(self, binding: Mapping[str, int]) -> bool:
        """True when ``binding`` is the opt shape (the static kernels' shape)."""
        return all(binding.get(n, v) == v for n, v in self.at.items())

    def _pick(self, binding: Mapping[str, int]):
        """``(executor, static?)`` for a call at ``binding``."""
        static = self.static is not None and self.matches(binding)
        return (self.static if static else self.dynamic), static

    def _count(self, static: bool) -> None:
        with self._lock:
            if static:
                self.static_calls += 1
            else:
                self.dynamic_calls += 1

    def executor_for(self, binding: Mapping[str, int]):
        """``(executor, count)``: the executor a call at ``binding`` runs, and
        a function counting such a call (static or dynamic)."""
        executor, static = self._pick(binding)
        return executor, partial(self._count, static)

    def run(self, inputs: Sequence, binding: Mapping[str, int], selection: str | None = None,
            numpy_out: bool = False):
        """Run one call (see :meth:`kiln.runtime.executor.Executor.run`)."""
        executor, static = self._pick(binding)
        self._count(static)
        return executor.run(inputs, binding, selection=selection, numpy_out=numpy_out)

    @property
    def arena_plan(self):
        return self.dynamic.arena_plan

    def describe(self) -> dict:
        """The kernel choices and call counts as plain data."""
        with self._lock:
            static_calls, dynamic_calls = self.static_calls, self.dynamic_calls
        return {
            "at": dict(self.at),
            "static_kernels": sorted(n for n, c in self.choices.items() if c["chosen"] == "static"),
            "dynamic_kernels": sorted(n for n, c in self.choices.items() if c["chosen"] == "dynamic"),
            "measured_us": {n: {"static": c["static_us"], "dynamic": c["dynamic_us"]} for n, c in self.choices.items()},
            "static_calls": static_calls,
            "dynamic_calls": dynamic_calls,
        }


def synthetic_inputs(executor, binding: Mapping[str, int]) -> list[torch.Tensor]:
    """Inputs of the opt shape to time kernels with: random floats, and zeros
    for integers and booleans (always-valid indices, no data-dependent
    surprises in gathers)."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for vid in executor.schedule.inputs:
        shape = executor.shape(vid, binding)
        dtype = torch_dtype(executor._dtype[vid])
        if dtype.is_floating_point:
            out.append(torch.randn(shape, generator=gen).to(dtype))
        else:
            out.append(torch.zeros(shape, dtype=dtype))
    return out


def _kernel_times(make_executor: Callable, kernels: list, inputs, binding, repeats: int) -> dict[str, float]:
    """Seconds per call of every step, over ``repeats`` timed calls (after one untimed)."""
    metrics = Metrics(profiling=True)
    ex = make_executor(kernels, ArenaPool(), metrics)
    for _ in range(repeats + 1):  # the executor does not time its first call
        ex.run(inputs, binding)
    return {name: s / n for name, (n, s) in metrics.snapshot()["kernel_s"].items()}


_choose_lock = threading.Lock()


def choose_kernels(
    make_executor: Callable,
    steps: Sequence,
    dynamic: list,
    static: list,
    binding: Mapping[str, int],
    inputs: list,
    repeats: int = 3,
    mode: str = "auto",
) -> tuple[list, dict]:
    """Per step, the faster of ``dynamic[i]`` and ``static[i]`` at ``binding``
    (``mode="auto"``; ``"static"`` takes every static kernel, timed all the same).

    ``make_executor(kernels, pool, metrics)`` builds an executor of the
    schedule whose ``steps`` these are.  Returns the chosen kernel list and, by step name, the times
    and the choice.  Timing runs one measurement at a time in the process
    (two profiles timed at once on two cores would skew each other).
    """
    with _choose_lock:
        t_dyn = _kernel_times(make_executor, dynamic, inputs, binding, repeats)
        t_static = _kernel_times(make_executor, static, inputs, binding, repeats)
    chosen, choices = [], {}
    for step, d, s in zip(steps, dynamic, static):
        if d is s:  # a fallback kernel: nothing to choose
            chosen.append(d)
            continue
        td, ts = t_dyn.get(step.name, 0.0), t_static.get(step.name, 0.0)
        pick = "static" if mode == "static" or ts < (1.0 - MIN_GAIN) * td else "dynamic"
        chosen.append(s if pick == "static" else d)
        choices[step.name] = {"chosen": pick, "static_us": round(ts * 1e6, 2), "dynamic_us": round(td * 1e6, 2)}
    return chosen, choices
