"""The Triton kernel object: generated source, loading, launching.

Every kernel follows kiln's kernel contract: ``name``, ``inputs`` and
``outputs`` (``TensorInfo`` lists with symbolic dims; dtypes as names), and
``__call__(inputs, outputs, binding)`` writing into preallocated outputs.

A subclass per kernel kind supplies :meth:`TritonKernel.generate` (the Triton
source of a function named ``kernel``) and :meth:`TritonKernel.launch` (grid,
positional arguments and constexprs for concrete tensors).  Source goes into
the kernel cache's content-addressed ``src/`` folder and is imported from
there: Triton reads a kernel's source with ``inspect``, so it must be a file.
``triton.jit`` in that file yields an interpreted function under
``TRITON_INTERPRET=1`` (torch CPU tensors) and a GPU kernel otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import KilnError, ShapeError, UnsupportedError
from ..cache import KernelCache, default_cache
from ..kernel import Kernel
from .spec import KernelSpec

__all__ = ["LaunchRecord", "TritonKernel", "interpreting", "load_source"]

_MODULES: dict[str, Any] = {}


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def load_source(text: str, cache: KernelCache | None = None):
    """Import generated source (through the cache's ``src/`` folder); returns the module."""
    cache = cache or default_cache()
    path = cache.source_file(text)
    key = str(path)
    mod = _MODULES.get(key)
    if mod is None:
        if not interpreting():
            os.environ.setdefault("TRITON_CACHE_DIR", str(cache.triton_dir()))
        name = f"kiln_triton_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # Triton resolves globals through the module
        spec.loader.exec_module(mod)
        _MODULES[key] = mod
    return mod


class LaunchRecord:
    """What a launch passed: enough to compile the same kernel for a GPU target."""

    def __init__(self, path: str, signature: dict[str, str], constexprs: dict[str, Any]):
        self.path = path
        self.signature = signature
        self.constexprs = constexprs

    def as_json(self) -> dict:
        return {"path": self.path, "signature": self.signature, "constexprs": self.constexprs}


def _arg_type(v) -> str:
    import torch

    if isinstance(v, torch.Tensor):
        return "*" + {
            torch.float16: "fp16",
            torch.bfloat16: "bf16",
            torch.float32: "fp32",
            torch.float64: "fp64",
            torch.bool: "i1",
            torch.int8: "i8",
            torch.uint8: "u8",
            torch.int16: "i16",
            torch.int32: "i32",
            torch.int64: "i64",
        }[v.dtype]
    if isinstance(v, bool):
        return "i1"
    if isinstance(v, int):
        return "i32" if -(2**31) <= v < 2**31 else "i64"
    if isinstance(v, float):
        return "fp32"
    raise UnsupportedError(f"cannot pass {type(v).__name__} to a Triton kernel")


def as_torch(a):
    """A torch view of a numpy array (shared memory); torch tensors pass through."""
    import numpy as np

    if isinstance(a, np.ndarray):
        import torch

        return torch.from_numpy(a)
    return a


class TritonKernel(Kernel):
    """Base of the generated kernels (see the module docstring).

    ``config`` holds the kernel's constexprs (block sizes) plus optional
    ``num_warps`` / ``num_stages`` launch options.
    """

    kind = "triton"
    #: Launch options that are not kernel arguments.
    LAUNCH_OPTIONS = ("num_warps", "num_stages")

    def __init__(self, spec: KernelSpec, config: Mapping[str, Any] | None = None, *, cache: KernelCache | None = None):
        self.spec = spec
        self.name = spec.name
        self.inputs = [i.base.info() for i in spec.inputs]
        self.outputs = [s.info() for s in spec.output_specs]
        self.config = dict(config or self.default_config(spec, {}))
        self.cache = cache or default_cache()
        self.source = self.generate()
        self._fn = None
        self._path: str | None = None
        self.last_launch: LaunchRecord | None = None

    # -- subclass hooks ----------------------------------------------------

    @classmethod
    def configs(cls, spec: KernelSpec) -> list[dict[str, Any]]:
        """Candidate configurations (block sizes) for autotuning."""
        return [cls.default_config(spec, {})]

    @classmethod
    def default_config(cls, spec: KernelSpec, binding: Mapping[str, int]) -> dict[str, Any]:
        """The heuristic configuration for shapes near ``binding``."""
        return {}

    def generate(self) -> str:
        """Triton source defining ``kernel``."""
        raise NotImplementedError

    def launch(self, inputs: list, outputs: list, binding: Mapping[str, int]):
        """``(grid, args, constexprs)`` for viewed inputs and outputs."""
        raise NotImplementedError

    # -- running -----------------------------------------------------------

    @property
    def fn(self):
        """The ``triton.jit`` function (loaded on first use)."""
        if self._fn is None:
            mod = load_source(self.source, self.cache)
            self._fn = mod.kernel
            self._path = mod.__file__
        return self._fn

    def check(self, inputs: Sequence, outputs: Sequence, binding: Mapping[str, int]) -> None:
        """Shape checks a caller's mistake must not turn into a wrong answer."""
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise ShapeError(
                f"kernel '{self.name}' takes {len(self.inputs)} inputs and {len(self.outputs)} outputs, "
                f"got {len(inputs)} and {len(outputs)}"
            )
        for what, specs, ts in (("input", self.spec.inputs, inputs), ("output", self.spec.output_specs, outputs)):
            for k, (s, t) in enumerate(zip(specs, ts)):
                base = s.base if what == "input" else s
                want = base.shape(binding)
                if tuple(t.shape) != want:
                    raise ShapeError(
                        f"kernel '{self.name}' {what} #{k} has shape {tuple(t.shape)}, expected {want} "
                        f"for {base.text()} with {dict(binding)}"
                    )

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: Mapping[str, int]) -> None:
        """Run the kernel on torch tensors (or numpy arrays, on CPU under the
        interpreter), writing ``outputs`` (contiguous)."""
        inputs = [as_torch(a) for a in inputs]
        outputs = [as_torch(a) for a in outputs]
        self.check(inputs, outputs, binding)
        viewed = [i.apply(t, binding) for i, t in zip(self.spec.inputs, inputs)]
        if any(o.numel() == 0 for o in outputs):
            return
        grid, args, constexprs = self.launch(viewed, list(outputs), binding)
        fn = self.fn
        opts = {}
        if not interpreting():
            opts = {k: self.config[k] for k in self.LAUNCH_OPTIONS if k in self.config}
        try:
            fn[grid](*args, **constexprs, **opts)
        except Exception as e:  # Triton's compile/launch errors, reported as kiln errors naming the kernel
            raise KilnError(
                f"Triton kernel '{self.name}' ({self.spec.pattern}, config {self.config}) failed: "
                f"{type(e).__name__}: {str(e)[:2000]}"
            ) from e
        names = [n for n in fn.arg_names if n not in constexprs]
        self.last_launch = LaunchRecord(self._path, {n: _arg_type(a) for n, a in zip(names, args)}, dict(constexprs))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.spec.pattern} {self.config}>"


def next_pow2(v: int) -> int:
    """Smallest power of two >= v (1 for v <= 1)."""
    return 1 if v <= 1 else 1 << (int(v) - 1).bit_length()


def bcast_strides(t, shape: Sequence[int]) -> list[int]:
    """Strides of ``t`` broadcast to ``shape`` (0 along broadcast dims)."""
    rank = len(shape)
    if t.dim() < rank:
        t = t.reshape((1,) * (rank - t.dim()) + tuple(t.shape))
    return list(t.expand(tuple(shape)).stride())
