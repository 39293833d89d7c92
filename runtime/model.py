"""``CompiledModel``: what :func:`kiln.compile` returns.

A call is three steps, kept separate so the runtime can grow each one
(profiles, memory planning, other schedules):

1. **check + bind shapes**: the :class:`~kiln.runtime.contract.ShapeContract`
   checks every input's rank, dtype and dims and binds the symbols; a bad
   input raises :class:`~kiln.errors.ShapeError` before any kernel runs;
2. **run the schedule**: a list of :class:`Step` ``(kernel, input value ids,
   output value ids)``; each step's outputs are allocated with the shapes
   its value infos evaluate to under the binding, then the kernel writes
   them (the :mod:`kiln.backends.kernel` contract);
3. **outputs**: the values named by ``output_ids``, as numpy arrays, or as
   torch tensors when the inputs were torch tensors (sharing memory).

Value ids ``0 .. n_inputs-1`` are the model inputs, in order.

Inputs may be given by position, by name (``model(x=a, mask=m)``) or as one
dict (``model({"x": a, "mask": m})``, which returns a dict of the outputs by
name, as ONNX Runtime's ``run`` takes and gives them); named calls map to a
positional one, whose cost stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..backends.kernel import as_numpy
from ..dialects.dims import evaluate
from ..errors import ShapeError
from .contract import InputSpec, ShapeContract, arguments_key
from .dtypes import NUMPY_DTYPES

__all__ = ["CompiledModel", "Step", "ValueInfo"]


@dataclass(frozen=True)
class ValueInfo:
    """A value of the schedule: symbolic dims and a dtype name (``"f32"``)."""

    name: str
    dims: tuple
    dtype: str

    def shape(self, binding: dict[str, int]) -> tuple[int, ...]:
        """The concrete shape under ``binding``."""
        return tuple(evaluate(d, binding) for d in self.dims)


@dataclass
class Step:
    """One kernel launch: ``kernel(values[inputs], values[outputs], binding)``."""

    kernel: object
    inputs: list[int]
    outputs: list[int]


@dataclass
class CompiledModel:
    """A compiled model; call it on numpy arrays or torch CPU tensors.

    A call on torch tensors returns torch tensors; any numpy input gives
    numpy outputs.  numpy has no bfloat16 of its own: a bf16 input may be an
    ``ml_dtypes.bfloat16`` array, and a bf16 output of a numpy call is one
    when ``ml_dtypes`` is installed, else a float32 array (exact: every
    bfloat16 is a float32).  An input in the other byte order, unaligned, or
    a torch negative or conjugate view is copied into plain memory first; one
    kiln cannot read (meta, sparse or mkldnn tensors, another device, a fake
    tensor) is a :class:`~kiln.errors.ShapeError` naming it.

    ``values`` describes every value id; ``schedule`` runs in order;
    ``output_ids`` are returned (one array, or a tuple for several), and a
    call with one dict returns ``{output name: array}`` (``output_names``:
    the source's names, ``output<j>`` where it has none).
    ``compilations`` counts JIT compilations behind this model: 1 for the
    dynamic kernels, whatever the shapes it is called with, plus one per
    profile or specialization that compiled static kernels; ``keepalive``
    holds what the kernels need alive (MLIR context, modules, engines).
    """

    inputs: list[InputSpec]
    values: list[ValueInfo]
    schedule: list[Step]
    output_ids: list[int]
    symbols: dict
    base_compilations: int = 1
    ir: dict = field(default_factory=dict)  # stage name -> IR text, when kept
    keepalive: list = field(default_factory=list)
    device: str = "cpu"
    # kiln.runtime.executor.ModelRuntime: profiles, arena, fallback kernels, metrics.
    runtime: object = None
    output_names: list = field(default_factory=list)  # one per output id; output<j> where unnamed
    # ReshapeCheck / BoundsCheck: ops of run-time values, checked when the shapes are bound.
    checks: list = field(default_factory=list)

    def __post_init__(self):
        profiles = self.runtime.profiles if self.runtime is not None else ()
        self.contract = ShapeContract(self.inputs, self.symbols, profiles, self.checks)
        self.calls = 0
        if len(self.output_names) != len(self.output_ids):
            self.output_names = [f"output{j}" for j in range(len(self.output_ids))]

    @property
    def compilations(self) -> int:
        """JIT compilations behind this model so far (see the class docstring)."""
        extra = getattr(self.runtime, "static_compilations", 0) if self.runtime is not None else 0
        return self.base_compilations + extra

    @property
    def outputs(self) -> list[ValueInfo]:
        """The infos of the returned values."""
        return [self.values[i] for i in self.output_ids]

    def bind(self, args: Sequence) -> dict[str, int]:
        """Check the inputs against the shape contract; the symbol binding."""
        return dict(self.contract.bind(args))

    def run(self, args: Sequence, binding: dict[str, int]) -> list[np.ndarray]:
        """Run the schedule on checked inputs; the output arrays.  An input
        kiln cannot read (see :func:`~kiln.runtime.contract.readable`) raises
        ShapeError; one whose memory does not hold its values as they are (a
        negative view, another byte order) is materialized first."""
        return self._run(self.contract.readable(args, self.device), binding)

    def _run(self, args: Sequence, binding: dict[str, int]) -> list[np.ndarray]:
        if self.runtime is not None:
            return self.runtime.run(args, binding, numpy_out=True)
        env: list = [None] * len(self.values)
        for i, a in enumerate(args):
            env[i] = np.ascontiguousarray(as_numpy(a))
        for step in self.schedule:
            outs = []
            for vid in step.outputs:
                info = self.values[vid]
                env[vid] = np.empty(info.shape(binding), dtype=NUMPY_DTYPES[info.dtype])
                outs.append(env[vid])
            step.kernel([env[i] for i in step.inputs], outs, binding)
        return [env[i] for i in self.output_ids]

    def positional(self, args: Sequence = (), named: Mapping | None = None) -> list:
        """The inputs of a call as a positional list: ``args`` first, then
        ``named`` (input name -> value) in their places.  ShapeError naming
        an input that the model lacks, one given twice, or ones missing."""
        names = [s.name for s in self.inputs]
        if len(args) > len(names):
            raise ShapeError(f"the model takes {len(names)} inputs ({', '.join(map(repr, names))}), "
                             f"got {len(args)} by position")
        missing = object()
        out = list(args) + [missing] * (len(names) - len(args))
        for name, value in (named or {}).items():
            try:
                i = names.index(name)
            except ValueError:
                raise ShapeError(f"the model has no input {name!r} (its inputs: "
                                 f"{', '.join(map(repr, names)) or 'none'})") from None
            if out[i] is not missing:
                raise ShapeError(f"input {name!r} is given twice (by position and by name)")
            out[i] = value
        absent = [f"'{s.name}' {s.shape_text()} {s.dtype}" for s, v in zip(self.inputs, out) if v is missing]
        if absent:
            raise ShapeError(f"missing input{'s' if len(absent) > 1 else ''}: {', '.join(absent)}")
        return out

    def _named_call(self, args, kwargs):
        """A call by name: ``model(x=a)`` returns what ``model(a)`` does;
        ``model({"x": a})`` returns ``{output name: array}``."""
        as_dict = len(args) == 1 and isinstance(args[0], Mapping)
        if as_dict:
            named = dict(args[0])
            for k, v in kwargs.items():
                if k in named:
                    raise ShapeError(f"input {k!r} is given twice (in the dict and by keyword)")
                named[k] = v
            args = ()
        else:
            named = kwargs
        results = self(*self.positional(args, named))
        if not as_dict:
            return results
        results = results if len(self.output_ids) != 1 else (results,)
        return dict(zip(self.output_names, results))

    def __call__(self, *args, **kwargs):
        if kwargs:
            return self._named_call(args, kwargs)
        runtime = self.runtime
        key = None
        if runtime is not None and runtime.fast_on:
            key = arguments_key(args)
            fast = runtime.fast(key) if key is not None else None
            results = fast(args) if fast is not None else None
            if results is not None:  # a repeat of an input key whose plan is frozen (kiln.runtime.fastcall)
                self.calls += 1
                return results[0] if len(results) == 1 else tuple(results)
        if len(args) == 1 and isinstance(args[0], Mapping):  # model({"x": a}): no array has a key
            return self._named_call(args, kwargs)
        binding = self.contract.bind(args)
        torch_out = bool(args) and all(_is_torch(a) for a in args)  # of the arguments as given
        args = self.contract.readable(args, self.device)
        self.calls += 1
        if self.runtime is None:
            results = self._run(args, binding)
            if torch_out:
                import torch

                results = [torch.from_numpy(r) for r in results]
        else:  # torch tensors out of the runtime; numpy ones unless every input was torch
            results = runtime.run(args, binding, numpy_out=not torch_out, key=key)
        return results[0] if len(results) == 1 else tuple(results)

    def report(self) -> dict:
        """What the model did: kernels (in the schedule, launched per call),
        fallback ops (count, share of ops and of measured time), arena bytes
        (planned peak vs no reuse) at the last shape, compile time,
        specializations and cache hits, per-kernel time when profiling.

        A :class:`~kiln.runtime.report.Report`: a dict (index it, ``json.dumps``
        it) that prints as :func:`kiln.format_report`'s text."""
        from .report import Report

        if self.runtime is None:
            return Report({})
        out = self.runtime.report()
        out["signature"] = self.signature()  # the inputs and outputs by name
        return Report(out)

    def save(self, directory) -> dict:
        """Write the model as an artifact directory (:func:`kiln.save`), which
        :func:`kiln.load` reads without the compiler; returns the manifest."""
        from .artifact import save

        return save(self, directory)

    def signature(self) -> dict:
        """The inputs and outputs by name, with their symbolic shapes and
        dtypes: ``{"inputs": [{"name", "shape", "dtype"}], "outputs": [...]}``."""
        def entry(name, dims, dtype):
            return {"name": name, "shape": [d.to_attr_value() if hasattr(d, "to_attr_value") else d for d in dims],
                    "dtype": dtype}

        return {"inputs": [entry(s.name, s.dims, s.dtype) for s in self.inputs],
                "outputs": [entry(n, o.dims, o.dtype) for n, o in zip(self.output_names, self.outputs)]}

    def shape_contract(self) -> dict:
        """The symbols with their ranges, the inputs' symbolic shapes, the
        profiles and the policy, as plain data."""
        return self.contract.describe(self.runtime.policy if self.runtime is not None else None)

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.shape_text()} {s.dtype}" for s in self.inputs)
        outs = ", ".join(f"{n}: [{', '.join(map(str, o.dims))}] {o.dtype}"
                         for n, o in zip(self.output_names, self.outputs))
        return f"<CompiledModel ({ins}) -> ({outs}), {len(self.schedule)} kernel(s) on {self.device}>"


def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")
