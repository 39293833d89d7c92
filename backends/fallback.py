"""PyTorch-eager kernels for ``kiln.fallback`` ops.

A ``kiln.fallback`` op keeps an op kiln cannot lower under its original name
(``aten.special_bessel_j0.default``, or an overload packet such as
``aten.special_bessel_j0``).  :class:`FallbackKernel` runs it through
``torch.ops`` and follows kiln's kernel contract: ``name``, ``inputs`` and
``outputs`` (:class:`~kiln.dialects.kiln.TensorInfo` lists with symbolic dims,
dtypes as names) and ``__call__(inputs, outputs, binding)`` writing into the
preallocated ``outputs``.

Tensors are passed without copies: numpy arrays become torch tensors with
``torch.from_numpy`` (shared memory), torch tensors are passed as they are,
and a single result is written straight into its output with the op's
``.out`` overload when it has one (otherwise the result is copied in).
Non-tensor operands the frontend recorded as ``operand<i>`` attributes are
put back at their positions; a string that is a dim expression
(``"B*16"``) is evaluated under the call's binding.

An op with several results (``aten.sort``, ``aten.topk``,
``aten.native_group_norm``) whose step keeps only some of them (the others
unused, so kiln-partition gives the step no output for them) names the kept
ones in ``results``: output ``k`` receives the op's result ``results[k]``.

Building a kernel from its ``kiln.fallback`` op reads MLIR:
:mod:`kiln.backends.fallback_build` (compile time) does it; this module is
what a loaded artifact runs, without MLIR.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..dialects.dims import Dim, dim, evaluate
from ..errors import DimError, KilnError, UnsupportedError

if TYPE_CHECKING:
    from ..dialects.kiln import TensorInfo

__all__ = ["FallbackKernel", "resolve_torch_op"]


def resolve_torch_op(op_name: str):
    """The ``torch.ops`` callable for ``aten.foo`` / ``aten.foo.default``.

    Returns ``(callable, packet)``; UnsupportedError when torch has no such op
    (an ONNX op name, say).
    """
    parts = op_name.split(".")
    if len(parts) < 2:
        raise UnsupportedError(f"fallback op '{op_name}' is not a torch op name (expected 'namespace.op[.overload]')")
    try:
        packet = getattr(getattr(torch.ops, parts[0]), parts[1])
        target = packet
        for p in parts[2:]:
            target = getattr(target, p)
    except (AttributeError, RuntimeError):
        raise UnsupportedError(f"fallback op '{op_name}' has no PyTorch implementation in torch.ops") from None
    return target, packet


def _tensor_ref(value) -> int | None:
    """The operand index of a ``"%operand<k>"`` marker in a recorded list, else None."""
    if isinstance(value, str) and value.startswith("%operand") and value[len("%operand"):].isdigit():
        return int(value[len("%operand"):])
    return None


def _schema_split(fn):
    """``(number of positional parameters, keyword-only names)`` of a torch op,
    or ``(None, [])`` when it has no single schema to read."""
    target = getattr(fn, "default", fn)
    schema = getattr(target, "_schema", None)
    if schema is None:
        return None, []
    args = list(schema.arguments)
    return sum(1 for a in args if not a.kwarg_only), [a.name for a in args if a.kwarg_only and a.name != "out"]


def _bind_value(value, binding):
    if isinstance(value, Dim):
        return evaluate(value, binding)
    if isinstance(value, list):
        return [_bind_value(v, binding) for v in value]
    return value


def _info_json(info) -> dict:
    return {"dims": [str(d) for d in info.dims], "dtype": str(info.dtype)}


def _value_json(value):
    """A recorded operand as JSON: a dim (evaluated per call) tagged, lists element-wise."""
    if isinstance(value, Dim):
        return {"dim": str(value)}
    if isinstance(value, (list, tuple)):
        return [_value_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise KilnError(f"cannot store the fallback operand {value!r} ({type(value).__name__})")


def _value_from_json(value):
    if isinstance(value, dict):
        if set(value) != {"dim"} or not isinstance(value["dim"], str):
            raise ValueError(f"operand {value!r}")
        return dim(value["dim"])
    if isinstance(value, list):
        return [_value_from_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"operand {value!r}")


def _as_torch(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    raise KilnError(f"fallback kernels take numpy arrays or torch tensors, got {type(x).__name__}")


class FallbackKernel:
    """One ``kiln.fallback`` op run in PyTorch eager (see the module docstring).

    ``positions`` lists, for each positional argument of the torch op, either
    ``("tensor", k)`` (the k-th input) or ``("value", v)`` (a recorded scalar).
    ``results`` lists, per output, the index of the op's result it receives
    (default: all results in order); ``num_results`` is how many the op has.
    """

    kind = "fallback"

    def __init__(
        self,
        name: str,
        op_name: str,
        inputs: Sequence[TensorInfo],
        outputs: Sequence[TensorInfo],
        positions: Sequence[tuple[str, object]] | None = None,
        kwargs: Mapping[str, object] | None = None,
        results: Sequence[int] | None = None,
        num_results: int | None = None,
    ):
        self.name = name
        self.op_name = op_name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.positions = list(positions) if positions is not None else [("tensor", k) for k in range(len(inputs))]
        self.kwargs = dict(kwargs or {})
        self.results = [int(r) for r in results] if results is not None else list(range(len(self.outputs)))
        self.num_results = int(num_results) if num_results is not None else len(self.outputs)
        if len(self.results) != len(self.outputs) or any(not 0 <= r < self.num_results for r in self.results):
            raise KilnError(
                f"fallback kernel '{name}' ({op_name}): results {self.results} do not fit "
                f"{len(self.outputs)} outputs of an op with {self.num_results} results"
            )
        self._fn, self._packet = resolve_torch_op(op_name)
        self._positional, self._kwarg_only = _schema_split(self._fn)
        # out= writes one result in place; an op with several results has no such form.
        self._use_out = self.num_results == 1 and len(self.outputs) == 1 and "out" in self._packet.overloads()
        self._lock = threading.Lock()

    def to_json(self) -> dict:
        """The kernel as plain data (what an artifact stores, :mod:`kiln.runtime.artifact`):
        names, tensor infos (dims as text) and the recorded operands, dims tagged."""
        return {
            "name": self.name,
            "op_name": self.op_name,
            "inputs": [_info_json(i) for i in self.inputs],
            "outputs": [_info_json(o) for o in self.outputs],
            "positions": [[kind, _value_json(v) if kind == "value" else v] for kind, v in self.positions],
            "kwargs": {k: _value_json(v) for k, v in self.kwargs.items()},
            "results": list(self.results),
            "num_results": self.num_results,
        }

    @classmethod
    def from_json(cls, data: Mapping, make_info) -> FallbackKernel:
        """The kernel :meth:`to_json` described; ``make_info(dims, dtype)``
        builds a tensor info from dim texts and a dtype name.  Malformed data
        is a KilnError."""
        try:
            positions = []
            for kind, v in data["positions"]:
                if kind not in ("tensor", "value"):
                    raise ValueError(f"operand kind {kind!r}")
                positions.append((kind, int(v) if kind == "tensor" else _value_from_json(v)))
            return cls(
                str(data["name"]),
                str(data["op_name"]),
                [make_info(i["dims"], i["dtype"]) for i in data["inputs"]],
                [make_info(o["dims"], o["dtype"]) for o in data["outputs"]],
                positions,
                {str(k): _value_from_json(v) for k, v in dict(data["kwargs"]).items()},
                # Absent in artifacts saved before multi-result fallbacks: all results.
                [int(r) for r in data["results"]] if "results" in data else None,
                int(data["num_results"]) if "num_results" in data else None,
            )
        except (KeyError, TypeError, ValueError, DimError) as e:
            raise KilnError(f"malformed fallback kernel description: {type(e).__name__}: {e}") from None

    def _args(self, inputs, binding):
        args = []
        for kind, v in self.positions:
            if kind == "tensor":
                args.append(_as_torch(inputs[v]))
            elif isinstance(v, list):
                args.append([_as_torch(inputs[_tensor_ref(x)]) if _tensor_ref(x) is not None else _bind_value(x, binding)
                             for x in v])
            else:
                args.append(_bind_value(v, binding))
        kwargs = {k: _bind_value(v, binding) for k, v in self.kwargs.items()}
        if self._positional is not None and len(args) > self._positional:
            # The frontend records every operand by position; keyword-only
            # parameters (aten.gather's sparse_grad) must go by name.
            extra = args[self._positional:]
            args = args[: self._positional]
            kwargs.update({k: v for k, v in zip(self._kwarg_only, extra) if k not in kwargs})
        return args, kwargs

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: Mapping[str, int]) -> None:
        """Run the op on ``inputs`` and write its results into ``outputs``."""
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise KilnError(
                f"fallback kernel '{self.name}' takes {len(self.inputs)} inputs and {len(self.outputs)} outputs, "
                f"got {len(inputs)} and {len(outputs)}"
            )
        args, kwargs = self._args(inputs, binding)
        outs = [_as_torch(o) for o in outputs]
        if self._use_out:
            out = outs[0]
            ptr, shape = out.data_ptr(), tuple(out.shape)
            try:
                self._packet.out(*args, **kwargs, out=out)
            except (RuntimeError, TypeError):
                with self._lock:
                    self._use_out = False  # this op's out= form does not fit: copy from now on
            else:
                if out.data_ptr() == ptr and tuple(out.shape) == shape:
                    return
                raise KilnError(f"fallback '{self.op_name}' resized its output from {shape} to {tuple(out.shape)}")
        try:
            with torch.no_grad():
                result = self._fn(*args, **kwargs)
        except (RuntimeError, TypeError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise KilnError(f"fallback op '{self.op_name}' failed in PyTorch: {first}") from None
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(results) < self.num_results:
            raise KilnError(f"fallback '{self.op_name}' returned {len(results)} results, expected {self.num_results}")
        for o, k in zip(outs, self.results):
            r = results[k]
            if tuple(r.shape) != tuple(o.shape):
                raise KilnError(
                    f"fallback '{self.op_name}' result #{k} has shape {tuple(r.shape)}, "
                    f"but the kiln types give {tuple(o.shape)}"
                )
            o.copy_(r)

    def __repr__(self) -> str:
        return f"<FallbackKernel {self.name} {self.op_name}>"
