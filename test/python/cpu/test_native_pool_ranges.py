"""kiln_parallel_for's ranges: with more ranges than threads (kiln_parts) every
task runs exactly once, the threads claiming ranges until none is left."""

import ctypes
import os
import subprocess
import sys
import threading

import pytest

from kiln.runtime import native

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)

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


_BOUND = """
import os
from kiln.runtime import native
native.load()
main = os.getpid()
for tid in os.listdir("/proc/self/task"):
    if int(tid) != main:
        print(len(os.sched_getaffinity(int(tid))))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: there is no worker to bind")
@pytest.mark.parametrize("pin, threads", [("1", None), ("0", None), ("1", "1+")],
                         ids=["whole-machine", "KILN_PIN=0", "fewer-threads-than-cpus"])
def test_workers_are_bound_to_one_cpu_only_when_the_pool_takes_every_cpu(pin, threads):
    cpus = len(os.sched_getaffinity(0))
    if threads is not None and cpus < 3:
        pytest.skip("a pool of one thread fewer than the CPUs has a worker from 3 CPUs on")
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_PIN", "KILN_THREADS")}
    env["KILN_PIN"] = pin
    if threads is not None:
        env["KILN_THREADS"] = str(cpus - 1)
    out = subprocess.run([sys.executable, "-c", _BOUND], env=env, capture_output=True, text=True, check=True)
    widths = [int(w) for w in out.stdout.split()]
    bound = [w for w in widths if w == 1]
    assert len(bound) == (cpus - 1 if pin == "1" and threads is None else 0), (widths, out.stderr)


_UNSHARE = """
import ctypes, os
from kiln.runtime import native
lib = native.load()
main = os.getpid()
workers = [int(t) for t in os.listdir("/proc/self/task")
           if int(t) != main and len(os.sched_getaffinity(int(t))) == 1]
before = os.sched_getaffinity(workers[0])
os.sched_setaffinity(0, before)  # the caller onto the worker's CPU
TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
lib.kiln_parallel_for.argtypes = [TASK, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
lib.kiln_parallel_for(TASK(lambda ctx, lo, hi: None), None, 2, 2)
print(sorted(before)[0], sorted(os.sched_getaffinity(workers[0]))[0], os.sched_getaffinity(0) == before)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: there is no worker to bind")
def test_a_job_moves_the_worker_off_the_callers_cpu():
    # Pinning is off unless asked (kiln.options' pin): ask, so workers are bound.
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_PIN", "KILN_THREADS")}
    env["KILN_PIN"] = "1"
    out = subprocess.run([sys.executable, "-c", _UNSHARE], env=env, capture_output=True, text=True, check=True)
    before, after, caller_kept = out.stdout.split()
    free = min(os.sched_getaffinity(0))  # the CPU no worker was bound to (the caller's)
    assert int(before) != free and (int(after), caller_kept) == (free, "True"), out.stdout


def test_the_caller_claims_from_the_front_and_workers_from_the_back():
    lib = native.load()
    if lib.kiln_pool_threads() < 2:
        pytest.skip("one thread: the caller runs every part")
    lib.kiln_parallel_for.argtypes = [TASK, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    lib.kiln_worker_slot.restype = ctypes.c_int
    n, by_caller, lock = 64, [], threading.Lock()

    def task(ctx, lo, hi):
        if lib.kiln_worker_slot() == 0:
            with lock:
                by_caller.extend(range(lo, hi))

    cb = TASK(task)
    for _ in range(20):  # whatever share each thread gets, the caller's is a prefix
        by_caller.clear()
        lib.kiln_parallel_for(cb, None, n, 16)
        assert sorted(by_caller) == list(range(len(by_caller))), by_caller
