"""kiln_parallel_for's ranges: with more ranges than threads (kiln_parts) every
task runs exactly once, the threads claiming ranges until none is left."""

import ctypes
import threading

import pytest

from kiln.runtime import native

pytestmark = pytest.mark.skipif(native.load() is None, reason="no C compiler: the native library is not built")

TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def _parts(tasks, threads):
    f = native.load().kiln_parts
    f.argtypes = [ctypes.c_int64, ctypes.c_int64]
    f.restype = ctypes.c_int64
    return f(tasks, threads)


def test_parts_are_a_few_per_thread_and_never_more_than_the_tasks():
    assert _parts(100, 2) == 8
    assert _parts(5, 2) == 5
    assert _parts(1, 2) == 1


@pytest.mark.parametrize("n, parts", [(10, 8), (37, 8), (8, 8), (3, 3), (1000, 300)])
def test_every_task_runs_once_over_more_ranges_than_threads(n, parts):
    lib = native.load()
    lib.kiln_parallel_for.argtypes = [TASK, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    lib.kiln_parallel_for.restype = None
    counts, ranges, lock = [0] * n, [], threading.Lock()

    def task(_ctx, lo, hi):
        with lock:
            ranges.append((lo, hi))
            for i in range(lo, hi):
                counts[i] += 1

    cb = TASK(task)  # kept alive for the call
    lib.kiln_parallel_for(cb, None, n, parts)
    assert counts == [1] * n
    if lib.kiln_pool_threads() > 1:  # with one thread the caller runs [0, n) itself
        assert len(ranges) == parts
