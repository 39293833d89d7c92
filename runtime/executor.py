"""Run a schedule of kernels out of one planned arena.

:class:`Executor` is the part of a compiled model that executes a bound call:
it evaluates the memory plan at the binding (cached per shape), takes an
arena of that size from the pool, gives every intermediate a view into it,
allocates the outputs (the caller keeps them), and launches the kernels in
schedule order.  Kernels follow kiln's kernel contract
(``kernel(inputs, outputs, binding)`` writing into preallocated outputs) and
receive torch CPU tensors.  Each call has its own arena, so one executor
serves several threads at once.  A generated kernel that
:mod:`kiln.transforms.row_split` marks row-independent runs as two halves of its
leading dim on two threads (``kiln_run_split`` of the native library).
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ..errors import KilnError
from . import launches
from .arena import ArenaPlan, ArenaPool, torch_dtype
from .contract import compile_expr, needs_conversion
from .fastcall import fast_enabled
from .launches import batch_launches, idle
from .report import Metrics

__all__ = ["Executor", "ModelRuntime", "Prepared", "numpy_of"]

#: Argument keys (types, shapes, dtypes) a model keeps a fast path for, each
#: with an arena of its own; the oldest goes first.
FAST_KEYS = 8

#: A splittable kernel runs as two halves only when its row-split arguments
#: hold at least this many bytes (a half-launch on the pool costs ~5 µs).
SPLIT_MIN_BYTES = 1 << 17


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
        # Values that are views of another (reshapes run without a kernel);
        # a step whose outputs are all views launches nothing.
        self.aliases = dict(getattr(plan, "aliases", {}) or {})
        # Where a view that is a slice of leading rows starts (compile_prepare.prepare's Step.view_offset).
        self._view_off = {v: compile_expr(s.view_offset)[0] for s in schedule.steps
                          if s.view_offset not in (None, "0") for v in s.outputs if v in self.aliases}
        # Donation (kiln.update_slice run in place): a value written into the
        # buffer of one of its step's inputs, and the model outputs that are
        # mutations of model inputs (not returned: written into the caller's array).
        self.inplace = dict(getattr(plan, "inplace", {}) or {})
        self.donated = dict(getattr(plan, "donated", {}) or {})
        self.pool = pool or ArenaPool()
        self.metrics = metrics or Metrics()
        self._shape = {
            v.id: [compile_expr(d)[0] for d in v.info.dims] for v in schedule.values
        }
        self._dtype = {v.id: str(v.info.dtype) for v in schedule.values}
        self._fallback = [s.kind == "fallback" for s in schedule.steps]
        self._owned_outputs = {
            v for v in schedule.outputs
            if v not in schedule.inputs and v not in self.constants and v not in self.in_arena
            and v not in self.inplace
        }
        # The per-call tables (see run): the environment with the constants
        # in place, per step (name, kernel, C entry or None, input ids, fallback?),
        # and per model output (value id, owned by the call?).
        self._env: list = [None] * len(schedule.values)
        for vid, t in self.constants.items():
            self._env[vid] = t
        self._input_ids = list(schedule.inputs)
        self._launch = [
            (step.name, k, None if fb or not hasattr(k, "entry") else k.entry(), tuple(step.inputs), fb)
            for step, k, fb in zip(schedule.steps, self.kernels, self._fallback)
        ]
        self._results = [(v, v in self._owned_outputs) for v in schedule.outputs if v not in self.donated]
        # A mutated input whose new value was not written into it in place: copied back after the call.
        self._copy_back = [(o, i) for o, i in self.donated.items() if self._root(o) != i]
        self._donated_inputs = set(self.donated.values())
        self._is_view = [bool(step.outputs) and all(v in self.aliases for v in step.outputs)
                         for step in schedule.steps]
        self._launches = self._is_view.count(False)
        self._split = [getattr(step, "split", None) for step in schedule.steps]
        self._plans: dict = {}
        self._plan_lock = threading.Lock()
        self._warm = False  # the first call is not timed (lazy JIT materialization)

    def _root(self, vid: int) -> int:
        """The value whose memory ``vid`` is (through views and in-place writes)."""
        while vid in self.inplace or vid in self.aliases:
            vid = self.inplace.get(vid, self.aliases.get(vid))
        return vid

    def shape(self, vid: int, binding: Mapping[str, int]) -> tuple[int, ...]:
        """The concrete shape of value ``vid`` under ``binding``."""
        try:
            return tuple(f(binding) for f in self._shape[vid])
        except KeyError as e:
            raise KilnError(
                f"value {vid} has a dim over symbol {e} that no input binds (a data-dependent shape)"
            ) from None

    def _call_plan(self, binding: Mapping[str, int]):
        """The launch plan at ``binding``: the arena layout and, per step,
        ``(vid, shape, torch dtype, offset or None)`` for each output.
        Computed once per bound shape, then cached (keyed by the binding's
        items in order: the contract always binds in the same order)."""
        key = tuple(binding.items())
        hit = self._plans.get(key)  # a dict read is atomic; writes take the lock
        if hit is not None:
            return hit
        layout = self.arena_plan.layout(binding)
        steps = []
        for step in self.schedule.steps:
            outs = []
            for vid in step.outputs:
                shape = self.shape(vid, binding)
                off = layout.offsets[vid][0] if vid in self.in_arena else None
                outs.append((vid, shape, torch_dtype(self._dtype[vid]), off))
            steps.append(outs)
        plan = (layout, steps)
        with self._plan_lock:
            if len(self._plans) >= 64:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = plan
        return plan

    def _bound(self, buf: torch.Tensor, key, binding: Mapping[str, int], step_outs) -> tuple:
        """Everything of a call that depends only on the arena buffer and the
        shape: the environment with constants and arena views in place, per
        step ``(name, kernel, input ids, output ids, fresh outputs,
        fallback?, prebuilt launch or None)``, and those steps without the
        idle ones (:func:`~kiln.runtime.launches.idle`), which a call that is not profiled walks.

        A prebuilt launch is a generated kernel's descriptor buffer with the
        pointers of arena views and constants written once; per call only
        the model inputs' and freshly allocated outputs' pointers are
        patched in.  With the native library, runs of such launches are
        batched into one native call each (:func:`~kiln.runtime.launches.batch_launches`).
        A step whose outputs are views (:attr:`aliases`) has no record when
        it views arena values (the views are in the environment already),
        else ``(name, None, (), (), views, False, None)`` with ``(vid, source
        vid, shape, element offset)`` per view to make per call.
        Cached on the arena tensor (by executor and shape): an arena is used
        by one call at a time, so its descriptors are too.
        """
        cache = buf.__dict__.setdefault("_kiln_bound", {})
        ckey = (id(self), key)
        hit = cache.get(ckey)
        if hit is not None:
            return hit
        from ..backends.cpu.dispatch import descriptors, layout_of  # after the hit: per call, the import cost 1.6 µs
        from .dtypes import NUMPY_DTYPES

        env = self._env.copy()
        fixed = set(self.constants)
        fresh_by_step, views_by_step, donated_by_step = [], [], []
        for outs in step_outs:
            fresh, views, donated = [], [], []
            for vid, shape, dtype, off in outs:
                if vid in self.inplace:  # written into its dest's buffer (the kernel still runs)
                    src = self.inplace[vid]
                    if src in fixed:
                        env[vid] = env[src]
                        fixed.add(vid)
                    else:  # a model input's (or a per-call value's): a whole view of it, per call
                        donated.append((vid, src, shape, 0))
                elif vid in self.aliases:
                    src = self.aliases[vid]
                    at = self._view_off[vid](binding) if vid in self._view_off else 0
                    if src in fixed:  # a view of an arena value: made once, here
                        env[vid] = _view(env[src], shape, at)
                        fixed.add(vid)
                    else:  # of a model input or a fresh output: per call
                        views.append((vid, src, shape, at))
                elif off is None:
                    # numpy allocates a call's fresh outputs where it has the dtype, shared
                    # with torch (1.55 -> 0.69 us an output: torch.empty goes through the dispatcher).
                    fresh.append((vid, shape, NUMPY_DTYPES.get(self._dtype[vid]), dtype))
                else:
                    env[vid] = buf[off : off + dtype.itemsize * math.prod(shape)].view(dtype).view(shape)
                    fixed.add(vid)
            fresh_by_step.append(tuple(fresh))
            views_by_step.append(tuple(views))
            donated_by_step.append(tuple(donated))

        def meta(vid):
            if vid in fixed:
                return layout_of(env[vid])
            shape = self.shape(vid, binding)
            strides, acc = [], 1
            for d in reversed(shape):
                strides.append(acc)
                acc *= max(d, 1)
            return shape, tuple(reversed(strides))

        steps, reads = [], {}
        for (name, kernel, entry, in_ids, is_fb), outs, fresh, views, donated, is_view, split in zip(
            self._launch, step_outs, fresh_by_step, views_by_step, donated_by_step, self._is_view, self._split
        ):
            if donated:  # the in-place outputs' views, made before the kernel writes through them
                steps.append((name, None, (), (), donated, False, None))
            if is_view:
                if views:  # nothing to do per call when the views were made above
                    steps.append((name, None, (), (), views, False, None))
                continue
            out_ids = tuple(o[0] for o in outs)
            launch = None
            if entry is not None:
                ids = in_ids + out_ids
                metas = [meta(v) for v in ids]
                launch = self._split_launch(kernel, split, ids, metas, env, fixed, binding)
                if launch is not None:
                    reads[len(steps)] = (split, self._half_spans(in_ids, split, env, fixed, binding),
                                         self._half_spans(out_ids, split, env, fixed, binding))
                else:
                    dbuf, offs, packed = descriptors(metas)
                    dynamic = []
                    for o, vid in zip(offs, ids):
                        if vid in fixed:
                            dbuf[o] = dbuf[o + 1] = env[vid].data_ptr()
                        else:
                            dynamic.append((o, vid))
                    launch = (entry, dbuf, tuple(dynamic), packed)
            steps.append((name, kernel, in_ids, out_ids, fresh, is_fb, launch))
        steps = batch_launches(steps, reads)
        if len(cache) > 16:
            cache.clear()
        hit = cache[ckey] = (env, steps, tuple(s for s in steps if not idle(s)))
        return hit

    def _half_spans(self, vids, symbol: str, env, fixed, binding) -> tuple[list, list]:
        """The memory each half of a kernel split along ``symbol`` touches
        through the values ``vids``: per half, ``(space, start, end)`` byte
        ranges, where space 0 is the arena and constants (absolute
        addresses) and a value id is the per-call memory of that value
        (offsets into it: a model input or a fresh output, views followed to
        it).  A row-split value's half is its rows of that half; any other
        value is whole in both."""
        rows = binding[symbol]
        half = rows // 2
        spans = ([], [])
        for v in vids:
            nbytes = math.prod(self.shape(v, binding)) * self._itemsize(v)
            if v in fixed:
                space, start = 0, env[v].data_ptr()
            else:
                space, start = v, 0
                while space in self.aliases:  # a per-call view: at its offset in its source
                    if space in self._view_off:
                        start += self._view_off[space](binding) * self._itemsize(space)
                    space = self.aliases[space]
            if self._leading(v, symbol):
                cut = start + nbytes // rows * half
                spans[0].append((space, start, cut))
                spans[1].append((space, cut, start + nbytes))
            else:
                spans[0].append((space, start, start + nbytes))
                spans[1].append((space, start, start + nbytes))
        return spans

    def fast_call(self, binding: Mapping[str, int], numpy_out: bool, selection: str | None, count):
        """A :class:`~kiln.runtime.fastcall.FastCall` running this executor at
        ``binding`` out of an arena of its own (given back by its ``close``),
        recording each call as :meth:`run` does (``count`` adds the
        selection's counters); None when profiling or when a step needs
        :meth:`run` (see :func:`~kiln.runtime.fastcall.build_fast_call`)."""
        from .fastcall import build_fast_call

        if self.metrics.profiling or self._copy_back:
            return None
        layout, step_outs = self._call_plan(binding)
        nbytes = layout.arena_bytes
        buf = self.pool.acquire(nbytes, keep=True)  # held until the fast path closes: counted against the cap
        _, _, active = self._bound(buf, tuple(binding.items()), binding, step_outs)
        metrics = self.metrics.fast_recorder(binding, self._launches, (nbytes, layout.no_reuse_bytes), selection)

        def record(seconds):
            count()
            metrics(seconds)

        fast = build_fast_call(self, active, numpy_out, record, lambda: self.pool.release(buf, nbytes, kept=True))
        if fast is None:
            self.pool.release(buf, nbytes, kept=True)
        return fast

    def _split_launch(self, kernel, split, ids, metas, env, fixed, binding):
        """The launch of a kernel as two halves of its leading dim ``split``
        (see :mod:`kiln.transforms.row_split`), or None to launch it whole: not
        splittable, a static kernel, fewer than two rows or too little work.

        ``(None, address, (buf, buf), dynamic, (packed, packed))``: both
        halves' descriptors, with ``(offset in the first, offset in the
        second, byte offset of the second half, value id)`` per argument
        whose pointer is patched per call.
        """
        from ..backends.cpu.dispatch import descriptors

        rows = binding.get(split) if split is not None else None
        if rows is None or rows < 2 or getattr(kernel, "static", True) or launches.split_runner() is None:
            return None
        cut = [self._leading(v, split) for v in ids]
        split_bytes = sum(math.prod(m[0]) * self._itemsize(v) for v, m, c in zip(ids, metas, cut) if c)
        if split_bytes < SPLIT_MIN_BYTES:
            return None
        half = rows // 2
        halves = []
        for first in (True, False):
            n = half if first else rows - half
            halves.append(descriptors([((n, *m[0][1:]), m[1]) if c else m for m, c in zip(metas, cut)]))
        (buf_a, offs_a, packed_a), (buf_b, offs_b, packed_b) = halves
        dynamic = []
        for v, m, c, oa, ob in zip(ids, metas, cut, offs_a, offs_b):
            skip = half * m[1][0] * self._itemsize(v) if c else 0
            if v in fixed:
                p = env[v].data_ptr()
                buf_a[oa] = buf_a[oa + 1] = p
                buf_b[ob] = buf_b[ob + 1] = p + skip
            else:
                dynamic.append((oa, ob, skip, v))
        return (None, kernel.address(), (buf_a, buf_b), tuple(dynamic), (packed_a, packed_b))

    def _leading(self, vid: int, symbol: str) -> bool:
        dims = self.schedule.values[vid].info.dims
        return bool(dims) and not dims[0].is_static and str(dims[0]) == symbol

    def _itemsize(self, vid: int) -> int:
        return torch_dtype(self._dtype[vid]).itemsize

    def run(self, inputs: Sequence, binding: Mapping[str, int], selection: str | None = None,
            numpy_out: bool = False) -> list:
        """Run one call on torch tensors or numpy arrays; returns torch tensors
        (numpy arrays with ``numpy_out``: a fresh output is returned as the
        array it was allocated as, 0.7 µs less than ``Tensor.numpy()``).

        The per-call work is a walk over tuples made once per shape and
        arena (:meth:`_bound`): copy the environment, put the inputs in,
        allocate the outputs that are not in the arena, and per generated
        kernel patch those pointers into its prebuilt descriptors and call
        it.  Fallback kernels go through the kernel contract with tensors.
        When profiling, each launch is timed as it runs.
        """
        layout, step_outs = self._call_plan(binding)
        profiling = self.metrics.profiling
        per_kernel = {} if profiling else None
        fallback_s = 0.0
        start = time.perf_counter()
        buf = self.pool.acquire(layout.arena_bytes)
        try:
            env, steps, active = self._bound(buf, tuple(binding.items()), binding, step_outs)
            if not profiling:
                steps = active
            env = env.copy()
            arrays = {}  # value id -> the numpy array a fresh output was allocated as
            for vid, x in zip(self._input_ids, inputs):
                if vid in self._donated_inputs:
                    _check_donated(x, self.schedule.values[vid])
                if isinstance(x, np.ndarray):
                    x = np.ascontiguousarray(x)
                    if x.flags.writeable:
                        x = torch.from_numpy(x)
                    else:  # read, never written: without torch's warning about writes
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", UserWarning)
                            x = torch.from_numpy(x)
                elif not x.is_contiguous():
                    x = x.contiguous()
                env[vid] = x
            for name, kernel, in_ids, out_ids, fresh, is_fb, launch in steps:
                if kernel is None:  # views of values whose memory is per call
                    for vid, src, shape, at in fresh:
                        env[vid] = _view(env[src], shape, at)
                    continue
                for vid, shape, np_dtype, dtype in fresh:
                    if np_dtype is not None:
                        arrays[vid] = a = np.empty(shape, np_dtype)
                        env[vid] = torch.from_numpy(a)
                    else:
                        env[vid] = torch.empty(shape, dtype=dtype)
                if launch is not None:
                    t0 = time.perf_counter() if profiling else 0.0
                    if launch[0] is not None:  # whole (a split launch has no ctypes function)
                        fn, dbuf, dynamic, packed = launch[:4]
                        for o, vid in dynamic:
                            dbuf[o] = dbuf[o + 1] = env[vid].data_ptr()
                        if profiling or len(launch) == 4:  # one at a time, to time each
                            fn(packed)
                        elif launch[4] is not None:  # the last of a batched run: run them all
                            run_seq, n, pairs, _ = launch[4]
                            run_seq(n, pairs)
                    else:
                        _, address, (buf_a, buf_b), dynamic, (packed_a, packed_b) = launch[:5]
                        for oa, ob, skip, vid in dynamic:
                            p = env[vid].data_ptr()
                            buf_a[oa] = buf_a[oa + 1] = p
                            buf_b[ob] = buf_b[ob + 1] = p + skip
                        if profiling or len(launch) == 5:  # alone, or timed on its own
                            launches.split_runner()(address, packed_a, packed_b)
                        elif launch[5] is not None:  # the last of a run of split launches: run them all
                            run_split_seq, n, pairs_a, pairs_b, _ = launch[5]
                            run_split_seq(n, pairs_a, pairs_b)
                    if profiling:  # timed as it runs (split in halves where it is)
                        per_kernel[name] = per_kernel.get(name, 0.0) + time.perf_counter() - t0
                    continue
                ins = [env[v] for v in in_ids]
                outs = [env[v] for v in out_ids]
                t0 = time.perf_counter()
                kernel(ins, outs, binding)
                dt = time.perf_counter() - t0
                if is_fb:
                    fallback_s += dt
                if profiling:
                    per_kernel[name] = per_kernel.get(name, 0.0) + dt
            # An output that is an input, a constant or (never, by the plan)
            # an arena view must not alias memory the caller or the next call owns.
            for o, i in self._copy_back:
                env[i].copy_(env[o])
            results = [env[v] if owned else env[v].clone() for v, owned in self._results]
            if numpy_out:
                results = [arrays[v] if owned and v in arrays else numpy_of(r)
                           for (v, owned), r in zip(self._results, results)]
        finally:
            self.pool.release(buf, layout.arena_bytes)
        total = time.perf_counter() - start
        self.metrics.record(
            binding, self._launches, total, fallback_s,
            (layout.arena_bytes, layout.no_reuse_bytes), per_kernel, selection, timed=self._warm,
        )
        self._warm = True
        return results


# ----------------------------------------------------------------------------
# What the compiler hands the runtime (made by kiln.compile_prepare.prepare,
# which runs compile passes and so lives on the compiler's side).
# ----------------------------------------------------------------------------


class Prepared:
    """A kiln module partitioned and planned for the runtime.

    ``schedule`` (detached from the IR) and ``plan`` describe the call;
    ``fallback`` maps step indices to fallback kernels
    (:func:`kiln.backends.fallback_build.fallback_kernel`: PyTorch's or, for ONNX
    nodes, ONNX Runtime's);
    ``generated`` maps step indices to the kernel function names left in the
    module for the backend to lower; ``constants`` maps value ids to tensors;
    ``text`` is the partitioned, planned IR (before the module was stripped),
    when :func:`kiln.compile_prepare.prepare` was asked to keep it.
    """

    def __init__(self, schedule, plan, fallback, generated, constants, text):
        self.schedule = schedule
        self.plan = plan
        self.fallback = fallback
        self.generated = generated
        self.constants = constants
        self.text = text

    def io(self, step_index: int):
        """``(inputs, outputs)`` TensorInfo lists of a step (dtypes as names)."""
        step = self.schedule.steps[step_index]
        vals = self.schedule.values
        return [vals[v].info for v in step.inputs], [vals[v].info for v in step.outputs]

    def kernel_names(self) -> list[str]:
        """The distinct generated kernel functions, in step order (identical
        kernels share one function: kiln.compile_prepare)."""
        return list(dict.fromkeys(self.generated.values()))

    def kernels(self, make_generated) -> list:
        """One kernel per step: fallback kernels, and ``make_generated(name,
        inputs, outputs)`` for the backend's."""
        out = []
        for i in range(len(self.schedule.steps)):
            if i in self.fallback:
                out.append(self.fallback[i])
            else:
                ins, outs = self.io(i)
                out.append(make_generated(self.generated[i], ins, outs))
        return out


def _check_donated(x, value) -> None:
    """A model input the model writes into (a mutated input, e.g. a KV
    cache) must be memory the call may write as it is: a C-contiguous,
    writeable array or a contiguous tensor (a copy would take the write)."""
    if isinstance(x, np.ndarray):
        ok = x.flags.c_contiguous and x.flags.writeable
    else:
        ok = x.is_contiguous()
    if not ok:
        raise KilnError(f"input #{value.index} is written in place by the model (a mutated input): "
                        "pass a C-contiguous, writeable array or a contiguous tensor")


def numpy_of(t: torch.Tensor) -> np.ndarray:
    """``t.numpy()``, for bfloat16 too, which numpy lacks (``Tensor.numpy``
    raises TypeError): an ``ml_dtypes.bfloat16`` array over the same bits
    when ml_dtypes is installed, else a float32 copy (exact)."""
    if t.dtype is not torch.bfloat16:
        return t.numpy()
    try:
        import ml_dtypes
    except ImportError:
        return t.float().numpy()
    return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def _view(t: torch.Tensor, shape, at: int) -> torch.Tensor:
    """``shape`` over the contiguous ``t`` from element ``at``."""
    if at == 0 and t.numel() == math.prod(shape):
        return t.view(shape)
    return t.reshape(-1)[at : at + math.prod(shape)].view(shape)


class ModelRuntime:
    """Everything a compiled model does per call after the shape check:
    pick the profile (or specialization, or the generic kernels), run the
    schedule out of a pooled arena, record metrics; and its report.

    The generic variant runs the dynamic kernels out of the plan made at the
    symbols' opt point.  Each profile and specialization gets a memory plan
    made at its own opt point and, when the backend gives ``specialize``
    (``binding -> kernels`` compiled with those dims static), the kernel
    choices of :func:`kiln.runtime.variants.choose_kernels` for that shape
    (``static_kernels``: ``"auto"`` measures, True takes every static
    kernel, False compiles none).  ``arena_pool_bytes`` caps the bytes of
    arenas kept between calls (see :class:`~kiln.runtime.arena.ArenaPool`;
    None: ``KILN_ARENA_POOL_BYTES``, else automatic).

    ``restored`` (a model loaded from an artifact, :mod:`kiln.runtime.artifact`)
    maps profile and specialization names to ``(opt binding, choices, kernels
    or None)`` made by an earlier compilation: those variants are rebuilt
    from it, with nothing compiled or timed.  The runtime keeps ``prepared``
    and its options, which :func:`kiln.save` writes out.
    """

    def __init__(self, prepared: Prepared, kernels, symbols, *, profiles=None, policy=None, budget=4,
                 profiling=False, compile_time_s=0.0, specialize=None, static_kernels="auto",
                 arena_pool_bytes=None, restored=None):
        from dataclasses import replace

        from .memplan import plan_memory
        from .profiles import ProfileSelector, normalize_profiles
        from .report import Metrics
        from .variants import ProfileVariant, choose_kernels, synthetic_inputs

        self.symbols = dict(symbols)
        self.metrics = Metrics(profiling)
        self.fast_on = fast_enabled()  # read once: os.environ costs 0.2 us a call
        self._fast: dict = {}  # arguments_key -> FastCall, or None where the ordinary path is needed
        self._fast_lock = threading.Lock()
        # Idle and fast-path arenas bounded in bytes (ArenaPool.cap): the option, KILN_ARENA_POOL_BYTES, or auto.
        self.pool = ArenaPool(max_bytes=arena_pool_bytes)
        self.compile_time_s = compile_time_s
        self.compile_stages_s: dict[str, float] = {}  # set by kiln.compile (kiln.progress.StageClock)
        self.profiles = normalize_profiles(profiles, self.symbols)
        self.policy = policy or ("error" if self.profiles else "generic")
        self.static_compilations = 0
        self.kernel_cache = None  # "hit" / "miss" / "off": the object-code cache at compile time
        self.specialize_s = 0.0  # compiling and timing static kernels (profiles up front, buckets lazily)
        # What kiln.save writes out (kiln.runtime.artifact); ``artifact``: where a loaded model came from.
        self.prepared, self.kernels, self.specialize = prepared, list(kernels), specialize
        self.budget, self.static_kernels, self.arena_pool_bytes = budget, static_kernels, arena_pool_bytes
        self.artifact: dict | None = None
        self.restored = restored = dict(restored or {})
        self.restored_info: dict = {}  # name -> the artifact's description of a restored variant
        consts = prepared.constants
        base = Executor(prepared.schedule, prepared.plan, kernels, consts, pool=self.pool, metrics=self.metrics)
        self.executor = base
        count_lock = threading.Lock()

        def build(profile):
            if profile is None:
                return base
            saved = restored.get(profile.name)
            if saved is not None:  # from an artifact: the opt point its compilation chose kernels at
                at = dict(saved[0])
            else:
                at = profile.opt_binding(self.symbols)
                at = {n: min(max(at[n], s.min), s.max) for n, s in self.symbols.items()}
            syms = {n: replace(s, opt=at[n]) for n, s in self.symbols.items()}
            plan, _ = plan_memory(base.schedule, syms, aliases=prepared.plan.aliases,
                                  inplace=prepared.plan.inplace, donated=prepared.plan.donated)

            def executor(ks, pool=self.pool, metrics=self.metrics):
                return Executor(base.schedule, plan, ks, consts, pool=pool, metrics=metrics)

            dynamic = executor(kernels)
            if saved is not None:  # its kernel choices, made (and timed) when it was compiled
                _, choices, chosen = saved
                return ProfileVariant(at, dynamic, executor(chosen) if chosen is not None else None, choices)
            if specialize is None or not prepared.generated or static_kernels is False:
                return ProfileVariant(at, dynamic)
            t0 = time.perf_counter()
            static = specialize(at)
            mode = "static" if static_kernels is True else "auto"
            chosen, choices = choose_kernels(executor, base.schedule.steps, kernels, static, at,
                                             synthetic_inputs(base, at), mode=mode)
            with count_lock:
                self.static_compilations += 1
                self.specialize_s += time.perf_counter() - t0
            if not any(c["chosen"] == "static" for c in choices.values()):
                return ProfileVariant(at, dynamic, choices=choices)
            return ProfileVariant(at, dynamic, executor(chosen), choices)

        self.selector = ProfileSelector(self.profiles, self.symbols, build, self.policy, budget)

    def run(self, args: Sequence, binding: Mapping[str, int], numpy_out: bool = False, key=None) -> list:
        """Run one checked, bound call on numpy arrays or torch tensors; torch
        outputs (numpy ones with ``numpy_out``).  With ``key`` (the
        arguments' :func:`~kiln.runtime.contract.arguments_key`), the first call
        of a key also makes its fast path (:meth:`fast`), or notes that it
        has none."""
        sel = self.selector.select(binding)
        # Numpy arrays as they are (Executor.run wraps them, contiguous);
        # a tensor that requires grad detached, so no autograd graph records
        # the call (the others as they are: detach() is 0.7 us a tensor).
        ins = [a.detach() if not isinstance(a, np.ndarray) and a.requires_grad else a for a in args]
        out = sel.variant.run(ins, binding, selection=sel.label, numpy_out=numpy_out)
        if key is not None and self.fast_on and key not in self._fast:
            self._add_fast(key, sel, binding, numpy_out)
        return out

    def fast(self, key):
        """The :class:`~kiln.runtime.fastcall.FastCall` of an argument key, or
        None (none made yet, the key's calls need the ordinary path, or
        ``KILN_FAST=0`` when the model was compiled)."""
        return self._fast.get(key)

    def _add_fast(self, key, sel, binding, numpy_out: bool) -> None:
        # Another byte order or ml_dtypes' bfloat16 is converted per call (contract.readable): the
        # fast path would hand the kernels the unconverted memory.
        count_sel = None if needs_conversion(key) else self.selector.repeat_counter(sel)
        fast = None
        if count_sel is not None:
            variant = sel.variant
            executor, count_var = variant.executor_for(binding) if hasattr(variant, "executor_for") else (variant, None)

            def count():
                count_sel()
                if count_var is not None:
                    count_var()

            fast = executor.fast_call(binding, numpy_out, sel.label, count)
        with self._fast_lock:
            if key in self._fast:  # another thread made it meanwhile
                if fast is not None:
                    fast.close()
                return
            if len(self._fast) >= FAST_KEYS:
                old = self._fast.pop(next(iter(self._fast)))
                if old is not None:
                    old.close()
            self._fast[key] = fast
            # Each fast path holds an arena; together they stay within the pool's cap (the
            # oldest go first; the newest stays, whatever its size).
            while len(self._fast) > 1 and self.pool.over_cap():
                old = self._fast.pop(next(iter(self._fast)))
                if old is not None:
                    old.close()

    def report(self) -> dict:
        """See :func:`kiln.runtime.report.build_report`."""
        from . import native
        from .report import build_report

        report = build_report(self.executor.schedule, self.metrics, compile_time_s=self.compile_time_s,
                              compile_stages_s=self.compile_stages_s,
                              selector=self.selector, arena_plan=self.executor.arena_plan,
                              static=(self.static_compilations, self.specialize_s), kernel_cache=self.kernel_cache)
        report["arena"]["pool"] = self.pool.stats()  # arenas kept between calls, against the cap
        # The constants the runtime holds and passes to kernels (weights past KILN_INLINE_LIMIT; the
        # smaller ones are inside the kernels' object code).
        consts = self.prepared.constants
        report["weights"] = {"runtime_bytes": sum(t.numel() * t.element_size() for t in consts.values()),
                             "runtime_count": len(consts)}
        # The native runtime (small GEMM, pool): where it came from, or why it is missing.
        # (The library loaded, first: a model loaded from an artifact brings its own, and asking
        # native.library() could start a build.)
        report["native"] = {"library": native.loaded_library() or native.library(), "error": native.build_error,
                            "packed_bytes": native.packed_bytes()}
        # The native pool's threads (process-wide: KILN_THREADS, kiln.compile(threads=)); 1 without it.
        report["threads"], report["pinned_workers"] = native.pool_threads() or 1, native.pool_pinned()
        if self.artifact is not None:
            report["artifact"] = dict(self.artifact)
        return report
