"""The fast path of a call: the dispatch plan of one input shape, frozen.

After a call has run the ordinary way (bind, select, plan, arena, walk of
the steps; :meth:`kiln.runtime.executor.Executor.run`), a model whose every
step is a generated kernel launch gets a :class:`FastCall` for that input
key (types, shapes and dtypes of the arguments): an arena of its own, the
kernels' descriptors with the arena's and the constants' pointers written
once, and the list of places each call writes the pointers of its inputs
and fresh outputs into.  A repeat of the key then allocates the outputs,
writes those pointers and makes the native calls, with nothing else to
decide: small_cnn at B=1 (four kernels) spent 7.9 us of Python around 31 us
of kernels the ordinary way.

A call returns None instead of running (and the caller takes the ordinary
path) when an input is not a C-contiguous, aligned numpy array or a
contiguous, strided CPU tensor of an exact type that is no negative view,
or when another thread holds this
fast path (each has one arena).  The counters the ordinary path keeps
(calls, selections, timings) are kept alike, and ``fast_calls`` counts the
calls served here.  ``KILN_FAST=0`` turns the fast path off.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable

import numpy as np
import torch

from . import launches

__all__ = ["FastCall", "build_fast_call", "fast_enabled"]

_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer
_perf = time.perf_counter
_ndarray = np.ndarray
_Tensor = torch.Tensor


def fast_enabled() -> bool:
    """Whether calls may take the fast path (the ``fast`` option, ``KILN_FAST``)."""
    from ..options import current

    return current().fast


def _pointer(x) -> int | None:
    """The data pointer of an argument the kernels may read as it is, else None."""
    if type(x) is _ndarray:
        flags = x.flags
        if not flags.carray:  # C-contiguous, aligned and writeable: one flag read for the common case
            if not (flags.c_contiguous and flags.aligned):  # the ordinary path copies it
                return None
            return x.ctypes.data if x.size else None  # read-only: from_buffer wants a writable buffer
        try:
            return _addressof(_from_buffer(x))  # 0.2 us; torch.from_numpy(x).data_ptr() 0.5, x.ctypes.data 0.8
        except ValueError:  # an empty array (no buffer to point at)
            return None
    if type(x) is _Tensor:
        # A meta, sparse or mkldnn tensor has the key of a plain one (type, shape, dtype), and so does a
        # negative view (torch._neg_view: its memory holds -x): the ordinary path rejects or resolves them.
        # Meta is not is_cpu; sparse is not contiguous, and CSR's is_contiguous() and mkldnn's data_ptr()
        # raise (cheaper than reading x.layout on every call).  A conjugate view is complex: no model takes one.
        if x.is_cpu and not x.is_neg():
            try:
                return x.data_ptr() if x.is_contiguous() else None
            except RuntimeError:
                return None
    return None


class FastCall:
    """One input key's frozen call (see the module docstring); built by
    :func:`build_fast_call`, called with the arguments."""

    def __init__(self, n_inputs, outputs, patches, calls, results, numpy_out, record, release, keep=(),
                 written=()):
        self._n_inputs = n_inputs
        # Inputs the model writes (donated: a mutated input): a read-only array takes the ordinary path (an error).
        self._written = written
        self._outputs = outputs  # (shape, numpy dtype) per fresh output, in slot order after the inputs
        self._patches = patches  # (descriptor buffer, index, slot, byte offset)
        self._calls = calls  # (ctypes function, args) in schedule order
        self._results = results  # slot of each model output
        self._numpy_out = numpy_out
        self._record = record  # record(seconds): the counters of an ordinary call
        self._release = release  # gives the arena back (close)
        # The launches the calls' addresses point into (descriptor buffers, runs' pairs): kept
        # alive here, not only by Executor._bound's cache on the arena.
        self._keep = keep
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, args) -> list | None:
        """The call's outputs, or None when it must take the ordinary path."""
        if not self._lock.acquire(False):
            return None
        try:
            if self._closed:
                return None
            t0 = _perf()
            ptrs = []
            for x in args:
                p = _pointer(x)
                if p is None:
                    return None
                ptrs.append(p)
            for i in self._written:
                if type(args[i]) is _ndarray and not args[i].flags.writeable:
                    return None
            arrays = []
            for shape, dtype in self._outputs:  # none empty (build_fast_call)
                a = np.empty(shape, dtype)
                arrays.append(a)
                ptrs.append(_addressof(_from_buffer(a)))
            for dbuf, o, slot, off in self._patches:
                p = ptrs[slot] + off
                dbuf[o] = p
                dbuf[o + 1] = p
            for fn, fargs in self._calls:
                fn(*fargs)
            n = self._n_inputs
            if self._numpy_out:
                results = [arrays[s - n] for s in self._results]
            else:
                results = [torch.from_numpy(arrays[s - n]) for s in self._results]
            self._record(_perf() - t0)
            return results
        finally:
            self._lock.release()

    def close(self) -> None:
        """Give the arena back; later calls return None (waits for a running call)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._release()


def build_fast_call(executor, steps, numpy_out: bool, record: Callable[[float], None],
                    release: Callable[[], None]) -> FastCall | None:
    """A :class:`FastCall` for ``executor`` from the steps a call that is
    not profiled walks at one binding (``Executor._bound``'s third item, made
    for an arena the fast path keeps), or None when some step needs the
    ordinary path: a fallback kernel, a kernel without a native entry, a
    fresh output numpy has no dtype for, or a model output that is not a
    fresh output of its own (an input, a constant, a view).

    Slots: the model inputs, then the fresh outputs in schedule order; a
    per-call view is its source's slot at a byte offset.
    """
    n_in = len(executor._input_ids)
    where = {vid: (i, 0) for i, vid in enumerate(executor._input_ids)}
    fresh_slot = {}  # value id -> slot, for the fresh outputs themselves (not views of them)
    outputs, patches, calls = [], [], []
    for _name, kernel, _in_ids, _out_ids, fresh, is_fb, launch in steps:
        if kernel is None:  # views of per-call values: (vid, source vid, shape, element offset)
            for vid, src, _shape, at in fresh:
                slot, off = where[src]
                where[vid] = (slot, off + at * executor._itemsize(vid))
            continue
        if is_fb or launch is None:
            return None
        for vid, shape, np_dtype, _dtype in fresh:
            if np_dtype is None or 0 in shape:  # torch allocates it, or there is no buffer to point at
                return None
            where[vid] = (n_in + len(outputs), 0)
            fresh_slot[vid] = n_in + len(outputs)
            outputs.append((tuple(shape), np.dtype(np_dtype)))
        if launch[0] is not None:  # whole: (fn, dbuf, dynamic, packed[, seq])
            fn, dbuf, dynamic, packed = launch[:4]
            for o, vid in dynamic:
                patches.append((dbuf, o, *where[vid]))
            if len(launch) == 4:
                calls.append((fn, (packed,)))
            elif launch[4] is not None:  # the last of a batched run
                run_seq, n, pairs, _ = launch[4]
                calls.append((run_seq, (n, pairs)))
        else:  # split in halves: (None, address, (buf_a, buf_b), dynamic, (packed_a, packed_b)[, seq])
            _, address, (buf_a, buf_b), dynamic, (packed_a, packed_b) = launch[:5]
            for oa, ob, skip, vid in dynamic:
                slot, off = where[vid]
                patches.append((buf_a, oa, slot, off))
                patches.append((buf_b, ob, slot, off + skip))
            if len(launch) == 5:
                calls.append((launches.split_runner(), (address, packed_a, packed_b)))
            elif launch[5] is not None:  # the last of a run of split launches
                run_split_seq, n, pairs_a, pairs_b, _ = launch[5]
                calls.append((run_split_seq, (n, pairs_a, pairs_b)))
    if not all(owned and vid in fresh_slot for vid, owned in executor._results):
        return None
    results = [fresh_slot[vid] for vid, _ in executor._results]
    written = tuple(i for i, vid in enumerate(executor._input_ids) if vid in executor._donated_inputs)
    return FastCall(n_in, outputs, patches, calls, results, numpy_out, record, release, keep=tuple(steps),
                    written=written)
