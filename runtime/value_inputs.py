"""Models whose input *values* decide shapes: shape inputs and value specializations.

:func:`kiln.compile` returns a :class:`ValueInputModel` for an ONNX model
with graph inputs whose values an op needs (see
:mod:`kiln.frontends.onnx_values`).  Its inputs are of two kinds:

- **shape inputs** (``ConstantOfShape``'s, ``Expand``'s, ``Tile``'s or
  ``Reshape``'s sizes, ``Slice``'s starts and ends as an input):
  the model is compiled once, with the input's values as symbols
  (``shape`` of length 3 -> ``shape_0``, ``shape_1``, ``shape_2``).  A call
  reads the values on the host and passes the compiled model a zero-stride
  *carrier* array whose shape is those values, so the symbols are bound and
  range-checked as any dim is: a value outside a range given with
  ``symbols=`` is a :class:`~kiln.errors.ShapeError` naming the input and the
  symbol.  A value the symbols cannot take (Reshape's 0 and -1, a negative
  or "to the end" Slice bound) is *pinned*: compiled as a constant in a
  model whose other values stay symbolic, one per pattern of pinned values
  (where that fails, or a slice's bounds leave its axis, the call's values
  are specialized);
- **specialized inputs** (axes, pads, steps, ``k``, ``training_mode``...):
  the model is compiled for the call's values, the input frozen as a
  constant.  Specializations are cached by those values (at most
  ``capacity``, least recently used dropped first), logged on
  ``kiln.runtime`` when compiled, and counted in :meth:`ValueInputModel.report`.

This module needs no compiler: the compilations are a ``build`` callback
handed in by :mod:`kiln.compiler`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..dialects.dims import SYMBOL_MAX  # larger values than a symbol may take are pinned
from ..errors import KilnError, ShapeError
from .contract import BoundsError
from .report import Report

__all__ = ["ValueInputModel", "ValueReport"]

_log = logging.getLogger("kiln.runtime")

#: Elements a specialized input may have: its values are a cache key and a constant.
MAX_SPECIALIZED_ELEMENTS = 4096



def _host(value, name: str) -> np.ndarray:
    """An input's values as a numpy array (a torch tensor is copied to the host)."""
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch"):
        try:
            return value.detach().cpu().numpy()
        except (RuntimeError, TypeError) as e:
            raise ShapeError(f"input '{name}': kiln reads its values on the host and cannot: {e}") from None
    if isinstance(value, (int, float, bool, np.generic, list, tuple)):
        return np.asarray(value)
    raise ShapeError(f"input '{name}' is a {type(value).__name__}, not a numpy array or a torch tensor")


def _carrier(values: Sequence[int], torch_like: bool):
    """A zero-stride bool array of shape ``values``: one byte of memory, any size."""
    if torch_like:
        import torch

        return torch.zeros(1, dtype=torch.bool).reshape([1] * len(values)).expand(*values)
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=np.bool_), shape=tuple(values),
                                           strides=(0,) * len(values))


class ValueReport(Report):
    """The report of a :class:`ValueInputModel`: the value inputs' section
    (``report["value_inputs"]``), then the report of the model that served
    the last call."""

    __slots__ = ()

    def __str__(self) -> str:
        v = self.get("value_inputs", {})
        lines = []
        for name, syms in v.get("shape_inputs", {}).items():
            lines.append(f"shape input '{name}': symbols {', '.join(syms)}")
        for name in v.get("specialized_inputs", []):
            lines.append(f"input '{name}' specialized on its values")
        lines.append(f"value specializations: {v.get('specializations', 0)} compiled, "
                     f"{v.get('cached', 0)} cached (at most {v.get('capacity', 0)}), {v.get('cache_hits', 0)} "
                     f"cache hit(s), {v.get('dynamic_calls', 0)} call(s) of the shape-input model")
        if v.get("dynamic_error"):
            lines.append(f"shape inputs specialized instead: {v['dynamic_error']}")
        rest = {k: x for k, x in self.items() if k != "value_inputs"}
        if rest:
            lines.append(str(Report(rest)))
        return "\n".join(lines)


class ValueInputModel:
    """A compiled model some of whose inputs' values decide shapes (see the module docstring).

    ``input_names`` are the call's inputs in order; ``shape_inputs`` maps each
    shape input to its symbols, ``ranges`` gives declared ``(min, max)`` per
    symbol; ``specialized`` names the inputs frozen per call.  ``build(frozen,
    dynamic, pins)`` compiles the model with the inputs in ``frozen`` (name ->
    array) made constants and, when ``dynamic``, the shape inputs as
    carriers with the values in ``pins`` (``{name: {index: value}}``) as
    constants (else they are in ``frozen`` too); it returns a
    :class:`~kiln.runtime.CompiledModel` whose inputs are the remaining ones
    in order.
    """

    def __init__(self, input_names: Sequence[str], shape_inputs: Mapping[str, Sequence[str]],
                 specialized: Sequence[str], build: Callable, ranges: Mapping | None = None,
                 capacity: int = 16, inputs: Sequence | None = None, broadcasts: Mapping | None = None,
                 floors: Mapping | None = None):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise KilnError(f"value_specializations must be an integer >= 1, got {capacity!r}")
        self.input_names = list(input_names)
        #: The call's inputs as :class:`~kiln.runtime.contract.InputSpec` (as the
        #: source declares them), for tools that make inputs; may be empty.
        self.inputs = list(inputs or [])
        self.shape_inputs = {n: tuple(s) for n, s in shape_inputs.items()}
        self.specialized = list(specialized)
        self.ranges = dict(ranges or {})
        #: {shape input: [(value index, d, node)]}: an Expand broadcasts a dim
        #: of size d there, so the value must be 1 or d (the kernels take d).
        self.broadcasts = {n: list(v) for n, v in (broadcasts or {}).items()}
        #: {symbol: lowest value}: where the compiled model takes values below 1
        #: (Slice bounds take 0); a symbol not named here takes 1 and up.
        self.floors = dict(floors or {})
        self.capacity = capacity
        self._build = build
        self._lock = threading.Lock()
        self._cache: OrderedDict = OrderedDict()
        self._unpinnable: set = set()  # dynamic-model keys whose pinned values failed to compile
        self.dynamic_error: str | None = None  # why shape inputs could not be compiled once
        self.specializations = 0
        self.shape_input_models = 0  # compiled with the shape inputs symbolic (once per specialized values)
        self.cache_hits = 0
        self.dynamic_calls = 0
        self.evicted = 0
        self.calls = 0
        self._last = None
        self._index = {n: i for i, n in enumerate(self.input_names)}
        if self.shape_inputs and not self.specialized:
            self._dynamic_model({}, {})  # compiled now: once, for every value

    # -- compiling --------------------------------------------------------

    def _dynamic_model(self, frozen: dict, pins: dict):
        """The shape-input model for specialized values ``frozen`` and pinned
        shape-input values ``pins`` (``{input: {index: value}}``, see
        :meth:`_check_values`); None when shape inputs cannot be compiled
        symbolically (then specialized)."""
        if self.dynamic_error is not None:
            return None
        key = ("dynamic", _key(frozen), _pins_key(pins))
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            if key in self._unpinnable:
                return None
        try:
            model = self._compile(key, frozen, True, pins)
        except KilnError as e:
            reason = f"{type(e).__name__}: {' '.join(str(e).split())}"
            if pins:
                # These pinned values have no symbolic form (a negative Slice
                # start): calls with them are specialized, others stay dynamic.
                with self._lock:
                    self._unpinnable.add(key)
                _log.info("shape input values %s are specialized: %s", _pins_key(pins), reason)
                return None
            # A shape input feeds an op whose symbolic form kiln lacks (an
            # Expand of a dim that may be 1 or not): per-value it is.
            self.dynamic_error = reason
            _log.info("shape inputs %s are specialized on their values: %s", ", ".join(self.shape_inputs),
                      self.dynamic_error)
            return None
        return model

    def _compile(self, key, frozen: dict, dynamic: bool, pins: dict | None = None):
        start = time.perf_counter()
        model = self._build(frozen, dynamic, pins or {})
        what = ", ".join(f"{n}={v.tolist()}" for n, v in frozen.items()) or "no specialized values"
        if pins:
            what += "; pinned " + ", ".join(f"{n}[{k}]={v}" for n, p in pins.items() for k, v in sorted(p.items()))
        _log.info("value specialization compiled (%s%s) in %.3f s", what,
                  "; shape inputs symbolic" if dynamic else "", time.perf_counter() - start)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            self._cache[key] = model
            if dynamic:
                self.shape_input_models += 1
            else:
                self.specializations += 1
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
                self.evicted += 1
        return model

    def _static_model(self, frozen: dict):
        key = ("static", _key(frozen))
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.cache_hits += 1
                return hit
        return self._compile(key, frozen, False)

    # -- calling ----------------------------------------------------------

    def _check_values(self, name: str, arr: np.ndarray) -> tuple[list[int], dict[int, int]]:
        """The shape input's values, and ``{index: value}`` of those its
        symbols cannot take (0 or negative, or past a symbol's default
        maximum, with no declared range): those are *pinned*, compiled as
        constants in a model whose other values stay symbolic."""
        syms = self.shape_inputs[name]
        if arr.ndim != 1 or arr.shape[0] != len(syms) or arr.dtype.kind not in "iu":
            raise ShapeError(f"input '{name}' must be a 1-D integer tensor of {len(syms)} values "
                             f"(a shape input), got {arr.dtype} of shape {list(arr.shape)}")
        values = [int(v) for v in arr]
        for k, d, node in self.broadcasts.get(name, ()):
            if values[k] not in (1, d):
                raise ShapeError(f"input '{name}' value #{k} is {values[k]}, but {node} broadcasts a dim of "
                                 f"size {d} there (the value must be 1 or {d})")
        pinned = {}
        for k, (sym, v) in enumerate(zip(syms, values)):
            rng = self.ranges.get(sym)
            if rng is not None:
                if not rng[0] <= v <= rng[1]:
                    raise ShapeError(f"input '{name}' value #{k}: {sym} = {v} violates "
                                     f"{rng[0]} <= {sym} <= {rng[1]}")
            elif not self.floors.get(sym, 1) <= v <= SYMBOL_MAX:
                pinned[k] = v  # 0, -1, a "to the end" INT64_MAX: values no dim takes
        return values, pinned

    def _positional(self, args: Sequence, named: Mapping) -> list:
        """A call's inputs by position: ``args`` first, then ``named`` in their places."""
        missing = object()
        if len(args) > len(self.input_names):
            return list(args)  # the count check below names the problem
        out = list(args) + [missing] * (len(self.input_names) - len(args))
        for name, value in named.items():
            if name not in self._index:
                raise ShapeError(f"the model has no input {name!r} (its inputs: "
                                 f"{', '.join(map(repr, self.input_names))})")
            if out[self._index[name]] is not missing:
                raise ShapeError(f"input {name!r} is given twice")
            out[self._index[name]] = value
        absent = [n for n, v in zip(self.input_names, out) if v is missing]
        if absent:
            raise ShapeError(f"missing input{'s' if len(absent) > 1 else ''}: {', '.join(map(repr, absent))}")
        return out

    def __call__(self, *args, **kwargs):
        """Run on the inputs by position, by name (``model(x=a)``), or as one
        dict (``model({"x": a})``, which returns ``{output name: array}``)."""
        as_dict = len(args) == 1 and isinstance(args[0], Mapping)
        if as_dict or kwargs:
            named = {**(dict(args[0]) if as_dict else {}), **kwargs}
            results = self._run(*self._positional(() if as_dict else args, named))
            if not as_dict:
                return results
            results = results if isinstance(results, tuple) else (results,)
            names = list(getattr(self._last, "output_names", None) or [])
            if len(names) != len(results):
                names = [f"output{j}" for j in range(len(results))]
            return dict(zip(names, results))
        return self._run(*args)

    def _run(self, *args):
        if len(args) != len(self.input_names):
            names = ", ".join(f"'{n}'" for n in self.input_names)
            raise ShapeError(f"the model takes {len(self.input_names)} inputs ({names}), got {len(args)}")
        frozen = {}
        for name in self.specialized:
            arr = _host(args[self._index[name]], name)
            if arr.size > MAX_SPECIALIZED_ELEMENTS:
                raise ShapeError(f"input '{name}' has {arr.size} values; kiln specializes the model on this "
                                 f"input's values, which is for inputs of at most {MAX_SPECIALIZED_ELEMENTS}")
            frozen[name] = np.array(arr, copy=True)
        shapes, pins = {}, {}
        for name in self.shape_inputs:
            arr = _host(args[self._index[name]], name)
            values, pinned = self._check_values(name, arr)
            shapes[name] = (arr, [1 if k in pinned else v for k, v in enumerate(values)])
            if pinned:
                pins[name] = pinned
        model = self._dynamic_model(frozen, pins) if self.shape_inputs else None
        torch_like = bool(args) and all(type(a).__module__.startswith("torch") for a in args)
        if model is not None:
            inner = []
            for i, name in enumerate(self.input_names):
                if name in frozen:
                    continue
                inner.append(_carrier(shapes[name][1], torch_like) if name in shapes else args[i])
            try:
                out = model(*inner)
            except BoundsError as e:
                # Slice bounds the symbolic kernels do not take (past the
                # axis, end before start): the source clamps them, and a
                # specialization for these values does the same.
                _log.info("shape input values specialized: %s", e)
            else:
                with self._lock:
                    self.dynamic_calls += 1
                self._last = model
                self.calls += 1
                return out
        for name, (arr, _) in shapes.items():
            frozen[name] = np.array(arr, copy=True)
        model = self._static_model(frozen)
        inner = [a for a, n in zip(args, self.input_names) if n not in frozen]
        self._last = model
        self.calls += 1
        return model(*inner)

    # -- reporting --------------------------------------------------------

    @property
    def compilations(self) -> int:
        """JIT compilations behind the models this one has compiled (those still cached)."""
        with self._lock:
            return sum(getattr(m, "compilations", 0) for m in self._cache.values())

    def describe(self) -> dict:
        """The value inputs' section of the report, as plain data."""
        with self._lock:
            return {
                "shape_inputs": {n: list(s) for n, s in self.shape_inputs.items()},
                "specialized_inputs": list(self.specialized) + (
                    list(self.shape_inputs) if self.dynamic_error else []),
                "specializations": self.specializations,
                "shape_input_models": self.shape_input_models,
                "cached": len(self._cache),
                "capacity": self.capacity,
                "evicted": self.evicted,
                "cache_hits": self.cache_hits,
                "dynamic_calls": self.dynamic_calls,
                "dynamic_error": self.dynamic_error,
            }

    def report(self) -> ValueReport:
        """Which inputs are shape inputs or specialized, how many
        specializations exist, then the report of the model that served the
        last call (:meth:`kiln.runtime.CompiledModel.report`)."""
        inner = dict(self._last.report()) if self._last is not None else {}
        return ValueReport({"value_inputs": self.describe(), **inner})

    def save(self, directory):
        """Not supported: raises KilnError (see :func:`kiln.save`)."""
        raise KilnError(self.save_error())

    def save_error(self) -> str:
        """Why :func:`kiln.save` cannot write this model."""
        kinds = []
        if self.shape_inputs:
            kinds.append(f"shape inputs {', '.join(self.shape_inputs)}")
        if self.specialized:
            kinds.append(f"inputs specialized on their values ({', '.join(self.specialized)})")
        return (f"kiln.save cannot write a model with {' and '.join(kinds)}: artifacts hold one compiled model. "
                "Make those inputs initializers (constants) of the ONNX model to save it")

    def __repr__(self) -> str:
        return (f"<ValueInputModel ({', '.join(self.input_names)}); shape inputs: "
                f"{', '.join(self.shape_inputs) or 'none'}; specialized: {', '.join(self.specialized) or 'none'}; "
                f"{self.specializations} specialization(s)>")


def _pins_key(pins: Mapping[str, Mapping[int, int]]) -> tuple:
    return tuple((n, tuple(sorted(p.items()))) for n, p in sorted(pins.items()))


def _key(frozen: Mapping[str, np.ndarray]) -> tuple:
    return tuple((n, str(a.dtype), a.shape, a.tobytes()) for n, a in sorted(frozen.items()))
