"""Serving a kiln artifact on Ray Serve (``pip install 'kiln[serve]'``).

kiln compiles and runs one model in one process; spreading requests over
processes and machines is Ray Serve's job (DESIGN.md, "Artifacts and
serving").  :func:`deployment` builds a Ray Serve application whose replicas
each load the artifact once (in ``__init__``) and answer requests through
Ray Serve's request batching::

    from ray import serve
    import kiln.serve

    app = kiln.serve.deployment("mlp.kiln", num_replicas=2, max_batch_size=32)
    handle = serve.run(app)
    y = handle.remote({"input": x}).result()   # or [x], or x for a one-input model

A request is the model's inputs: a dict ``{input name: array}``, a list or
tuple of arrays in input order, or one array for a one-input model (in
the dict, nested lists of numbers are converted to the input's dtype, for
JSON clients; a list is always the list of inputs).  The
response is what calling the model gives: one numpy array, or a tuple of
them for several outputs.  A request that does not fit the model's shape
contract fails alone with the :class:`~kiln.errors.ShapeError` the model
raises; the other requests of its batch are answered.

What is batched (:class:`BatchRunner`): Ray Serve hands a replica up to
``max_batch_size`` requests that arrived within ``batch_wait_timeout_s``.
They are grouped by the profile the model picks for each request's shapes
(the first profile containing them, as the runtime's selector does; all
requests outside every profile form one more group).  Within a group, the
requests whose shapes differ only in the *batch symbol* are concatenated
along axis 0 into one model call, and its outputs are split back.  The batch
symbol is the symbol that is the first dim of every input and of every
output and appears in no other dim (``"auto"``); concatenated calls stay
within the symbol's range and within the group's profile (so the same
kernels serve them).  Every other request runs as one call of its own.  The
shapes cannot tell whether a model's rows are independent along that axis:
a model that mixes them (a reduction or a normalization over the batch)
must be deployed with ``batch_symbol=None``, which turns concatenation off.

Across machines, start a Ray cluster with Ray's own tools (``ray start
--head`` on one machine, ``ray start --address=HEAD:6379`` on the others,
or ``ray up`` with a cluster config) and run the application against it
(``ray.init(address="auto")`` then ``serve.run``, or ``serve deploy``);
the artifact path must exist on every node that may host a replica.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import KilnError, ShapeError
from .runtime.dtypes import NUMPY_DTYPES

__all__ = ["BatchRunner", "Failure", "batch_symbol_of", "deployment"]

# numpy dtypes of the model's element types, for requests that arrive as
# plain lists (JSON): the runtime's table (a replica needs no MLIR).
_NUMPY = NUMPY_DTYPES


def _load_model(path, **options):
    """The model of the artifact directory ``path``, through ``kiln.load``
    (:func:`kiln.runtime.artifact.load`): an artifact loads without the
    compiler; one of the first format (kiln IR) is compiled again, which
    that loader does where the compiler is installed (and otherwise says so).
    Serving imports nothing above the runtime (``test_layering.py``)."""
    from .runtime.artifact import load

    return load(path, **options)


def _dim(d):
    from .dialects.dims import dim

    return dim(d)


def batch_symbol_of(model) -> str | None:
    """The symbol requests to ``model`` may be concatenated along, or None.

    It must be the first dim of every input and of every output, and appear
    in no other dim of them: then concatenating requests along axis 0 adds up
    that symbol and leaves every other dim as it was.  (Whether the model
    keeps rows apart cannot be seen from the shapes: see the module docs.)
    """
    values = [v.dims for v in model.inputs] + [o.dims for o in model.outputs]
    if not model.inputs:
        return None
    name = None
    for dims in values:
        if not dims:
            return None
        first = _dim(dims[0])
        if not first.is_symbol:
            return None
        sym = str(first)
        if name is None:
            name = sym
        if sym != name or any(name in _dim(d).symbols or _dim(d).is_unknown for d in dims[1:]):
            return None
    return name


@dataclass
class Failure:
    """The error one request of a batch ended in (returned in its place by
    :meth:`BatchRunner.run`; the deployment raises it for that request)."""

    error: BaseException


@dataclass
class _Entry:
    index: int
    args: list
    binding: dict


class BatchRunner:
    """Runs a batch of requests on one model, grouped by profile, with the
    requests that differ only in the batch symbol concatenated into one call.

    ``batch_symbol`` is ``"auto"`` (:func:`batch_symbol_of`), a symbol name,
    or None (no concatenation); ``max_rows`` caps the batch symbol's value in
    a concatenated call (default: the symbol's range, or the profile's).
    ``calls`` and ``concatenated`` count model calls and the requests that
    shared one.
    """

    def __init__(self, model, batch_symbol: str | None = "auto", max_rows: int | None = None):
        self.model = model
        symbols = dict(getattr(model, "symbols", {}) or {})
        if batch_symbol == "auto":
            batch_symbol = batch_symbol_of(model)
        elif batch_symbol is not None and batch_symbol != batch_symbol_of(model):
            found = batch_symbol_of(model)
            raise KilnError(
                f"batch_symbol '{batch_symbol}' is not the first dim of every input and output alone "
                f"({'the model has none' if found is None else f'the model batches along {found!r}'})")
        if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
            raise KilnError(f"max_rows must be a whole number >= 1, got {max_rows!r}")
        self.batch_symbol = batch_symbol
        self.max_rows = max_rows
        self.symbols = symbols
        contract = getattr(model, "contract", None)
        self.profiles = list(getattr(contract, "profiles", ()) or ())
        runtime = getattr(model, "runtime", None)
        self.policy = getattr(runtime, "policy", None)
        self.calls = 0
        self.concatenated = 0

    def arguments(self, request) -> list:
        """The model's arguments of one request (a dict by input name, a list
        or tuple in input order, or one array for a one-input model)."""
        specs = self.model.inputs
        if isinstance(request, Mapping):
            names = [s.name for s in specs]
            unknown = sorted(str(n) for n in request if n not in names)
            missing = [n for n in names if n not in request]
            if unknown or missing:
                problems = ([f"names no input {', '.join(map(repr, unknown))}"] if unknown else []) + \
                    ([f"lacks input {', '.join(map(repr, missing))}"] if missing else [])
                raise ShapeError(f"the request {' and '.join(problems)} (the model takes {', '.join(map(repr, names))})")
            values = [request[n] for n in names]
        elif isinstance(request, (list, tuple)):
            values = list(request)
        else:
            values = [request]
        if len(values) != len(specs):
            raise ShapeError(f"the model takes {len(specs)} inputs, the request has {len(values)}")
        # Plain lists (a JSON body, by name) become arrays of the input's
        # dtype; arrays are left as they are: a wrong dtype is the model's ShapeError.
        return [v if hasattr(v, "shape") and hasattr(v, "dtype") else np.asarray(v, dtype=_NUMPY.get(s.dtype))
                for v, s in zip(values, specs)]

    def _profile_index(self, binding) -> int:
        """The index of the first profile containing ``binding`` (the one the
        runtime picks), or -1 outside every profile."""
        for i, p in enumerate(self.profiles):
            if p.contains(binding):
                return i
        return -1

    def _cap(self, profile_index: int) -> int:
        """The largest value of the batch symbol a concatenated call may bind."""
        sym = self.batch_symbol
        info = self.symbols.get(sym)
        if profile_index >= 0:
            cap = self.profiles[profile_index].bounds(sym, self.symbols)[1]
        else:
            cap = info.max if info is not None else 0
        return min(cap, self.max_rows) if self.max_rows is not None else cap

    def plan(self, entries: Sequence[_Entry]) -> list[list[_Entry]]:
        """The model calls for checked requests: lists of entries, one call
        each (several entries: concatenated along the batch symbol)."""
        groups: dict[int, list[_Entry]] = {}
        for e in entries:
            groups.setdefault(self._profile_index(e.binding), []).append(e)
        calls: list[list[_Entry]] = []
        sym = self.batch_symbol
        for index, group in groups.items():
            # Outside every profile under policy "error" each call fails: the
            # requests keep their own errors.
            if sym is None or (index < 0 and self.profiles and self.policy == "error"):
                calls.extend([e] for e in group)
                continue
            cap = self._cap(index)
            same: dict[tuple, list[_Entry]] = {}
            for e in group:
                rest = tuple(sorted((k, v) for k, v in e.binding.items() if k != sym))
                same.setdefault(rest, []).append(e)
            for members in same.values():
                # First fit, largest first: few calls, none past the cap.
                chunks: list[list] = []  # [rows, entries]
                for e in sorted(members, key=lambda e: -e.binding[sym]):
                    n = e.binding[sym]
                    for chunk in chunks:
                        if chunk[0] + n <= cap:
                            chunk[0] += n
                            chunk[1].append(e)
                            break
                    else:
                        chunks.append([n, [e]])
                calls.extend(entries for _, entries in chunks)
        return calls

    def _call(self, args) -> tuple:
        self.calls += 1
        out = self.model(*args)
        return out if isinstance(out, tuple) else (out,)

    def run(self, requests: Sequence) -> list:
        """The response of each request, in order: the model's output (one
        array, or a tuple), or a :class:`Failure` holding its error."""
        results: list = [None] * len(requests)
        entries = []
        for i, request in enumerate(requests):
            try:
                args = self.arguments(request)
                entries.append(_Entry(i, args, dict(self.model.bind(args))))
            except Exception as e:  # the request's own error, handed back to it alone
                results[i] = Failure(e)
        for call in self.plan(entries):
            if len(call) > 1:
                try:
                    sizes = [e.binding[self.batch_symbol] for e in call]
                    args = [np.concatenate([e.args[j] for e in call], axis=0) for j in range(len(call[0].args))]
                    outs = self._call(args)
                    splits = np.cumsum(sizes)[:-1]
                    parts = [np.split(o, splits, axis=0) for o in outs]
                    for k, e in enumerate(call):
                        got = tuple(p[k] for p in parts)
                        results[e.index] = got[0] if len(got) == 1 else got
                    self.concatenated += len(call)
                    continue
                except Exception:  # run them one by one: each request gets its own answer or error
                    pass
            for e in call:
                try:
                    got = self._call(e.args)
                    results[e.index] = got[0] if len(got) == 1 else got
                except Exception as err:
                    results[e.index] = Failure(err)
        return results


_DEPLOYMENT = None


def _deployment_class():
    """The Ray Serve deployment class (made on first use: Ray is optional)."""
    global _DEPLOYMENT
    if _DEPLOYMENT is not None:
        return _DEPLOYMENT
    try:
        from ray import serve
    except ImportError as e:
        raise KilnError(f"kiln.serve needs Ray Serve ({e}): pip install 'kiln[serve]'") from None

    @serve.deployment(name="KilnModel")
    class KilnModel:
        """One replica: the artifact loaded once, requests batched by profile."""

        def __init__(self, path, *, threads=None, pin=False, max_batch_size=32, batch_wait_timeout_s=0.005,
                     batch_symbol="auto", max_rows=None, load_options=None):
            # The replica's own process: its pool's size and pinning (replicas
            # share machines: pinned pools would take the same first CPUs).
            from .options import configure

            configure(pin=bool(pin), **({"threads": int(threads)} if threads is not None else {}))
            self.model = _load_model(path, **(load_options or {}))
            self.runner = BatchRunner(self.model, batch_symbol, max_rows)
            self._batch.set_max_batch_size(max_batch_size)
            self._batch.set_batch_wait_timeout_s(batch_wait_timeout_s)

        @serve.batch
        async def _batch(self, requests):
            import asyncio

            # In a thread: the replica's event loop keeps queueing the next
            # batch while this one runs.
            return await asyncio.to_thread(self.runner.run, requests)

        async def __call__(self, request):
            """The model's outputs for one request (see kiln.serve)."""
            result = await self._batch(request)
            if isinstance(result, Failure):
                raise result.error
            return result

        def describe(self) -> dict:
            """The model's shape contract (symbols, inputs, profiles, policy) and the batch symbol."""
            return {**self.model.shape_contract(), "batch_symbol": self.runner.batch_symbol}

        def stats(self) -> dict:
            """This replica's counts: model calls, requests that shared a call, the batch symbol."""
            return {"pid": os.getpid(), "calls": self.runner.calls, "concatenated": self.runner.concatenated,
                    "batch_symbol": self.runner.batch_symbol}

    _DEPLOYMENT = KilnModel
    return KilnModel


def deployment(artifact_path, *, num_replicas: int = 1, max_batch_size: int = 32, batch_wait_timeout_s: float = 0.005,
               threads: int | None = 1, pin: bool = False, batch_symbol: str | None = "auto",
               max_rows: int | None = None, load_options: Mapping | None = None,
               max_ongoing_requests: int | None = None, name: str = "KilnModel", ray_actor_options: Mapping | None = None):
    """A Ray Serve application serving the artifact at ``artifact_path``
    (pass it to ``serve.run``); see the module docs for requests and batching.

    ``num_replicas`` replicas each load the artifact; each runs kiln's pool
    with ``threads`` threads (None: kiln's default, the CPUs it may use) and
    asks Ray for as many CPUs; ``pin`` pins the pool's workers (off: replicas
    share machines).  ``max_batch_size`` and ``batch_wait_timeout_s`` are
    Ray Serve's batching; ``batch_symbol`` and ``max_rows`` the
    concatenation (:class:`BatchRunner`); ``load_options`` go to the loader
    (``kiln.load``'s ``policy``, ``profiling``; the profiles are the
    artifact's).  ``max_ongoing_requests`` (default: twice
    ``max_batch_size``) is how many requests a replica accepts at once: it
    must be at least ``max_batch_size`` for batches to fill.
    """
    for what, value, least in (("num_replicas", num_replicas, 1), ("max_batch_size", max_batch_size, 1),
                               ("threads", 1 if threads is None else threads, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise KilnError(f"{what} must be a whole number >= {least}, got {value!r}")
    if not isinstance(batch_wait_timeout_s, (int, float)) or batch_wait_timeout_s < 0:
        raise KilnError(f"batch_wait_timeout_s must be a number of seconds >= 0, got {batch_wait_timeout_s!r}")
    path = os.path.abspath(os.fspath(artifact_path))
    if not os.path.isdir(path):
        raise KilnError(f"'{artifact_path}' is not an artifact directory (kiln.save writes one)")
    cls = _deployment_class()
    actor = dict(ray_actor_options or {})
    actor.setdefault("num_cpus", threads if threads is not None else 1)
    ongoing = max_ongoing_requests if max_ongoing_requests is not None else 2 * max_batch_size
    return cls.options(name=name, num_replicas=num_replicas, max_ongoing_requests=ongoing,
                       ray_actor_options=actor).bind(
        path, threads=threads, pin=pin, max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s,
        batch_symbol=batch_symbol, max_rows=max_rows, load_options=dict(load_options or {}))
