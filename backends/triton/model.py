"""``kiln.compile(..., device="cuda")``: a CompiledModel whose kernels are Triton's.

:func:`compile_cuda` loads the model the way the CPU path does
(:func:`kiln.compiler.load_source`), runs shape inference (and ``kiln-fuse``
when asked), compiles the entry function with :func:`.program.compile_function`
and wraps the result in a :class:`TritonModel`: the runtime's
:class:`~kiln.runtime.model.CompiledModel` (same shape contract, same
schedule of ``(kernel, input ids, output ids)`` steps) with a ``run`` that
keeps values as torch tensors on the device — CUDA on a GPU, CPU under
``TRITON_INTERPRET=1``.  Calls take torch tensors (returned as torch
tensors on the same device) or numpy arrays (returned as numpy arrays).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..._mlir import ir
from ...dialects.kiln import ONE_ANCHOR_KINDS
from ...errors import KilnError
from ...runtime.model import CompiledModel, Step, ValueInfo
from .emit import torch_dtype
from .kernel import interpreting
from .program import compile_function

__all__ = ["TritonModel", "compile_cuda"]

_OPTIONS = {"autotune", "opt", "fuse", "keep_ir", "max_configs", "cache", "fallback"}


class TritonModel(CompiledModel):
    """A CompiledModel running Triton kernels on torch tensors."""

    def _device(self, args):
        import torch

        for a in args:
            if isinstance(a, torch.Tensor):
                return a.device
        if interpreting() or not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda")

    def run(self, args: Sequence, binding: dict[str, int]) -> list:
        """Run the schedule; the output tensors (on the inputs' device)."""
        import torch

        device = self._device(args)
        env: list = [None] * len(self.values)
        for i, a in enumerate(args):
            t = a if isinstance(a, torch.Tensor) else torch.from_numpy(a)
            env[i] = t.to(device)
        consts = self._constants.get(str(device))
        if consts is None:
            consts = {vid: arr.to(device) for vid, arr in self._constant_arrays.items()}
            self._constants[str(device)] = consts
        for vid, t in consts.items():
            env[vid] = t
        for step in self.schedule:
            outs = []
            for vid in step.outputs:
                info = self.values[vid]
                env[vid] = torch.empty(info.shape(binding), dtype=torch_dtype(info.dtype), device=device)
                outs.append(env[vid])
            step.kernel([env[i] for i in step.inputs], outs, binding)
        return [env[i] for i in self.output_ids]

    def __call__(self, *args, **kwargs):
        import torch

        if kwargs or (len(args) == 1 and isinstance(args[0], dict)):  # by name: CompiledModel._named_call
            return self._named_call(args, kwargs)
        binding = self.bind(args)
        results = self.run(args, binding)
        self.calls += 1
        if not (args and all(isinstance(a, torch.Tensor) for a in args)):
            results = [r.cpu().numpy() for r in results]
        return results[0] if len(results) == 1 else tuple(results)


def compile_cuda(source, example_args=None, dynamic_shapes=None, symbols=None, **options) -> TritonModel:
    """Compile ``source`` (anything :func:`kiln.compile` takes) for the Triton backend.

    Options: ``autotune`` (measure candidates at the opt shape), ``opt``
    (symbol -> size, overriding the declared opt points), ``fuse`` (run
    ``kiln-fuse`` first; the backend's own grouping runs either way),
    ``max_configs``, ``cache`` (a :class:`~kiln.backends.cache.KernelCache`),
    ``keep_ir``, ``fallback`` (as the CPU path's: False makes a source op kiln
    cannot import an UnsupportedError instead of a fallback kernel).
    """
    from ...compiler import _entry, _signature, fallback_sites, load_source, warn_fallbacks
    from ...module import symbols_of
    from ...pipelines import Pipeline

    unknown = set(options) - _OPTIONS
    if unknown:
        raise KilnError(f"unknown kiln.compile option(s) for device 'cuda': {', '.join(sorted(unknown))}")
    if not interpreting():
        os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    module = load_source(source, example_args, dynamic_shapes, symbols, fallback=options.get("fallback", True))
    with module.context, ir.Location.unknown():
        warn_fallbacks(fallback_sites(module))  # once per compile, as the CPU path's
        syms = symbols_of(module.operation)
        _, inputs, outputs = _signature(module)
        from ..select_kernels import select_user_kernels

        select_user_kernels(module, "cuda")  # user functions for kiln ops: the op stands alone (kiln.custom)
        # The Triton graph passes (fold, simplify: attention however it is
        # written becomes kiln.attention, CSE, DCE); kiln-fuse only when asked.
        p = Pipeline.named("kiln-default-triton", without=["kiln-fuse"])
        if options.get("fuse"):
            p.add("kiln-fuse", kinds=list(ONE_ANCHOR_KINDS))  # one anchor a kernel
        p.run(module)
        kept = {"kiln": str(module)} if options.get("keep_ir") else {}
        prog = compile_function(
            _entry(module),
            opt=options.get("opt"),
            autotune=bool(options.get("autotune")),
            cache=options.get("cache"),
            max_configs=options.get("max_configs"),
        )
    # Value ids: inputs, constants, then every step's outputs, as the runtime numbers them.
    ids: dict[str, int] = {}
    values = [ValueInfo(s.name, s.dims, s.dtype) for s in inputs]
    for i in range(len(inputs)):
        ids[f"arg{i}"] = i
    program = prog.program
    constant_arrays = {}
    for vid, arr in program.constants.items():
        ids[vid] = len(values)
        constant_arrays[ids[vid]] = arr
        values.append(ValueInfo(vid, tuple(arr.shape), _dtype_name(arr)))  # arr: a torch tensor
    schedule = []
    for step, kernel in zip(program.steps, prog.kernels):
        out_ids = []
        for vid, spec in zip(step.outputs, step.spec.output_specs):
            ids[vid] = len(values)
            values.append(ValueInfo(vid, spec.dims, spec.dtype))
            out_ids.append(ids[vid])
        schedule.append(Step(kernel, [ids[v] for v in step.inputs], out_ids))
    model = TritonModel(
        inputs=inputs,
        values=values,
        schedule=schedule,
        output_ids=[ids[r] for r in program.results],
        symbols=syms,
        ir=kept,
        keepalive=[],  # nothing MLIR outlives compilation: kernels are plain Python + Triton
        device="cuda",
    )
    model._constant_arrays = constant_arrays
    model._constants = {}
    model.program = prog
    del outputs
    return model


def _dtype_name(arr) -> str:
    return {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32", "torch.float64": "f64",
            "torch.bool": "i1", "torch.int8": "i8", "torch.int16": "i16", "torch.int32": "i32",
            "torch.int64": "i64"}[str(arr.dtype)]
