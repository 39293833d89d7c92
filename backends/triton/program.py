"""Compile a kiln function for the Triton backend and run it.

:func:`compile_function` partitions a ``func.func`` (:mod:`.spec`), asks the
kernel registry for each kernel (heuristic or autotuned at the profile's opt
shape, choices cached), and returns a :class:`TritonProgram`: kernels in
schedule order plus the value ids they read and write.  Calling it binds the
symbols from the inputs' shapes, allocates every intermediate, and launches
the kernels — on CUDA tensors on a GPU, on CPU tensors under
``TRITON_INTERPRET=1``.

This is the backend's own driver (what ``kiln.compile(..., device="cuda")``
builds on); the full runtime adds profiles, memory planning and metrics.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import ShapeError, UnsupportedError
from ..cache import KernelCache, default_cache
from ..registry import REGISTRY, KernelRegistry
from .emit import torch_dtype
from .kernel import interpreting
from .spec import Program, partition_function

__all__ = ["TritonProgram", "compile_function", "compile_module", "target_name"]


def target_name() -> str:
    """The cache's target string: ``interpreter``, or ``cuda:<sm>`` on a GPU."""
    if interpreting():
        return "interpreter"
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"cuda:{major}{minor}"
    return "cuda:none"


@dataclass
class TritonProgram:
    """A partitioned function with one chosen kernel per step."""

    program: Program
    kernels: list[Any]
    choices: list[Any]
    compile_seconds: float
    cache_stats: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.program.name

    def bind(self, args: Sequence) -> dict[str, int]:
        """Symbol values from the arguments' shapes; ShapeError on a mismatch."""
        from ...dialects.dims import evaluate

        binding: dict[str, int] = {}
        specs = self.program.arg_specs
        if len(args) != len(specs):
            raise ShapeError(f"'{self.name}' takes {len(specs)} inputs, got {len(args)}")
        for i, (spec, t) in enumerate(zip(specs, args)):
            if t.dim() != spec.rank:
                raise ShapeError(f"input #{i} of '{self.name}' has rank {t.dim()}, expected {spec.rank} ({spec.text()})")
            for d, n in zip(spec.dims, t.shape):
                if d.is_symbol and str(d) not in binding:
                    binding[str(d)] = int(n)
        for i, (spec, t) in enumerate(zip(specs, args)):
            for axis, (d, n) in enumerate(zip(spec.dims, t.shape)):
                want = evaluate(d, binding)
                if want != n:
                    raise ShapeError(f"input #{i} of '{self.name}' dim {axis} is {n}, but {d} = {want}")
            if torch_dtype(spec.dtype) != t.dtype:
                raise ShapeError(f"input #{i} of '{self.name}' has dtype {t.dtype}, expected {spec.dtype}")
        return binding

    def __call__(self, *args):
        """Run on torch tensors; returns the results (a tuple when several)."""
        import torch

        binding = self.bind(args)
        device = args[0].device if args else torch.device("cpu")
        values: dict[str, Any] = {f"arg{i}": t for i, t in enumerate(args)}
        for vid, const in self.program.constants.items():
            values[vid] = const.to(device)
        for step, kernel in zip(self.program.steps, self.kernels):
            outs = [
                torch.empty(s.shape(binding), dtype=torch_dtype(s.dtype), device=device)
                for s in step.spec.output_specs
            ]
            kernel([values[v] for v in step.inputs], outs, binding)
            for v, o in zip(step.outputs, outs):
                values[v] = o
        results = tuple(values[r] for r in self.program.results)
        return results[0] if len(results) == 1 else results


def compile_function(
    func_op,
    *,
    opt: Mapping[str, int] | None = None,
    autotune: bool = False,
    cache: KernelCache | None = None,
    registry: KernelRegistry | None = None,
    device: str = "cuda",
    max_configs: int | None = None,
) -> TritonProgram:
    """Compile a kiln ``func.func`` for the Triton backend.

    ``opt`` is the profile's opt shape (symbol -> size; missing symbols use
    the declared ``opt``, else ``min``, from the module).
    """
    start = time.perf_counter()
    cache = cache or default_cache()
    registry = registry or REGISTRY
    program = partition_function(func_op)
    binding = dict(_declared_opt(func_op))
    binding.update(opt or {})
    before = (cache.stats.hits, cache.stats.misses, cache.stats.corrupt)
    kernels, choices = [], []
    target = target_name()
    for step in program.steps:
        spec = step.spec
        if spec.kind == "torch":
            from .torch_ops import TorchKernel

            kernels.append(TorchKernel(spec, {}, cache=cache))
            choices.append(None)
            continue
        choice = registry.select(spec, device, binding, autotune=autotune, cache=cache, target=target,
                                 max_configs=max_configs)
        if hasattr(choice.kernel, "generate") and choice.kernel.source:
            choice.kernel.fn  # noqa: B018 (load the generated module now, through the cache)
        kernels.append(choice.kernel)
        choices.append(choice)
    stats = {
        "hits": cache.stats.hits - before[0],
        "misses": cache.stats.misses - before[1],
        "corrupt": cache.stats.corrupt - before[2],
    }
    return TritonProgram(program, kernels, choices, time.perf_counter() - start, stats)


def _declared_opt(func_op) -> dict[str, int]:
    from ...module import symbols_of

    module = func_op.parent
    while module is not None and module.name != "builtin.module":
        module = module.parent
    if module is None:
        return {}
    return {n: (s.opt if s.opt is not None else s.min) for n, s in symbols_of(module).items()}


def compile_module(module, func: str | None = None, **kw) -> TritonProgram:
    """:func:`compile_function` for function ``func`` (default: the first) of an ``ir.Module``."""
    from ..._mlir import ir

    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    for f in funcs:
        if func is None or ir.StringAttr(f.attributes["sym_name"]).value == func:
            return compile_function(f.operation, **kw)
    raise UnsupportedError(f"no function '{func}' in the module" if func else "the module has no function")
