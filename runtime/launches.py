"""Native launches of generated kernels, and runs of them batched into one call.

:class:`~kiln.runtime.executor.Executor` prepares, per shape and arena, one
launch per generated kernel: ``(fn, dbuf, dynamic, packed)`` for a whole
kernel (its ctypes function and descriptor buffer), or ``(None, address,
(buf_a, buf_b), dynamic, (packed_a, packed_b))`` for a kernel split in two
halves of its leading dim (:mod:`kiln.transforms.row_split`).  :func:`batch_launches`
then joins consecutive launches into runs, each made by one native call:

- whole kernels in a run go through ``kiln_run_seq`` (one ctypes crossing,
  ~0.5 us, instead of one a kernel);
- split kernels in a run go through ``kiln_run_split_seq``: the first halves
  in order on one thread, the second halves on the other, so a half's rows
  stay in its core's caches from one kernel to the next, and the run costs
  one handoff to the pool instead of one a kernel.

Every launch of a run but the last gets ``seq = None`` appended (its
descriptors are patched, nothing is called), the last the run's call.
"""

from __future__ import annotations

import ctypes

__all__ = ["batch_launches", "idle", "native_fn", "seq_runner", "split_runner", "split_seq_runner"]

_native_fns: dict = {}


def native_fn(name: str, nargs: int, switch: str):
    """The native library's ``name`` (``nargs`` int64 arguments, no result) as
    a ctypes function, or None (no native library, or the option ``switch``
    off: ``KILN_SPLIT=0`` ...); looked up once per process."""
    if name not in _native_fns:
        from ..options import current, read_once
        from . import native

        lib = native.load() if read_once(switch, getattr(current(), switch)) else None
        fn = None
        if lib is not None:
            fn = getattr(lib, name)
            fn.argtypes = [ctypes.c_int64] * nargs
            fn.restype = None
        _native_fns[name] = fn
    return _native_fns[name]


def split_runner():
    """``kiln_run_split(fn, args, args)``, or None (``KILN_SPLIT=0``)."""
    return native_fn("kiln_run_split", 3, "split")


def seq_runner():
    """``kiln_run_seq(n, pairs)``, or None (``KILN_SEQ=0``: one ctypes call per kernel)."""
    return native_fn("kiln_run_seq", 2, "seq")


def split_seq_runner():
    """``kiln_run_split_seq(n, pairs, pairs)``, or None (``KILN_SPLIT_SEQ=0``:
    each split launch on its own)."""
    return native_fn("kiln_run_split_seq", 3, "split_seq")


def _whole(launch) -> bool:
    return launch is not None and launch[0] is not None and len(launch) == 4


def batch_launches(steps: list, reads: dict) -> list:
    """``steps`` (the executor's per-step tuples, launch last) with runs of
    consecutive whole launches and of consecutive split launches batched
    (see the module docstring); a run of one is left as it is.  Views do not
    end a run (they move no data); fallback kernels do, and so does a split
    launch that cannot join.

    ``reads[i]`` describes the split launch of step ``i``: ``(symbol, reads,
    writes)``, the symbol it splits along and, per half, the memory it reads
    and writes (``(space, start, end)`` byte ranges: see
    ``Executor._half_spans``).  A launch starts a run of its own when it
    splits along another symbol, or when one of its halves writes memory
    the run's other half touched or reads memory the other half wrote: a
    value read whole, or the memory plan giving a value the memory of one
    whose last use is over, which the other half may still be using.
    """
    run_seq, run_split_seq = seq_runner(), split_seq_runner()
    out, run = [], []
    kind = symbol = None  # the open run's: "whole" or "split", and a split run's symbol
    touched, written = ([], []), ([], [])  # per half, the memory the open split run touched and wrote

    def close():
        nonlocal kind, symbol
        if kind == "whole" and len(run) > 1:
            pairs = (ctypes.c_int64 * (2 * len(run)))()
            for k, i in enumerate(run):
                fn, _, _, packed = out[i][6][:4]
                pairs[2 * k] = ctypes.cast(fn, ctypes.c_void_p).value
                pairs[2 * k + 1] = packed
            last = out[run[-1]]
            out[run[-1]] = last[:6] + (last[6][:4] + ((run_seq, len(run), ctypes.addressof(pairs), pairs),),)
        elif kind == "split" and len(run) > 1:
            halves = [(ctypes.c_int64 * (2 * len(run)))() for _ in range(2)]
            for k, i in enumerate(run):
                _, address, _, _, packed = out[i][6][:5]
                for h in range(2):
                    halves[h][2 * k] = address
                    halves[h][2 * k + 1] = packed[h]
            last = out[run[-1]]
            seq = (run_split_seq, len(run), ctypes.addressof(halves[0]), ctypes.addressof(halves[1]), halves)
            out[run[-1]] = last[:6] + (last[6][:5] + (seq,),)
        elif len(run) == 1:  # alone: called as it is (through kiln_run_seq it took 0.2 µs more)
            i = run[0]
            out[i] = out[i][:6] + (out[i][6][:-1],)
        run.clear()
        for spans in (*touched, *written):
            spans.clear()
        kind = symbol = None

    for index, step in enumerate(steps):
        launch = step[6]
        if _whole(launch) and run_seq is not None:
            if kind != "whole":
                close()
            kind = "whole"
        elif launch is not None and launch[0] is None and run_split_seq is not None:
            split, ins, outs = reads[index]
            joins = kind == "split" and symbol == split and not any(
                _overlap(outs[h], touched[1 - h]) or _overlap(ins[h], written[1 - h]) for h in (0, 1))
            if not joins:
                close()
            kind, symbol = "split", split
            for h in (0, 1):
                touched[h].extend(ins[h] + outs[h])
                written[h].extend(outs[h])
        else:
            if step[1] is not None:  # a fallback kernel (or a launch with its runner off)
                close()
            out.append(step)
            continue
        run.append(len(out))
        out.append(step[:6] + (launch + (None,),))
    close()
    return out


def _overlap(spans, others) -> bool:
    """Whether a ``(space, start, end)`` range of ``spans`` meets one of ``others``."""
    return any(s == t and a < d and c < b for s, a, b in spans for t, c, d in others)


def idle(step) -> bool:
    """True for a step a call that is not profiled has nothing to do for: a
    batched launch before the last of its run (the run's call makes it),
    with no output to allocate and no pointer to patch.  Skipping them took
    the transformer block's walk from 9 steps to 3, 0.95 µs a call at B=1,
    L=32; small_cnn's B=1 from 4 to 2, 0.35 µs (in-process, 40 rounds)."""
    launch = step[6]
    if step[1] is None or step[4] or launch is None or launch[-1] is not None:
        return False
    if launch[0] is not None:
        return len(launch) == 5 and not launch[2]
    return len(launch) == 6 and not launch[3]
