"""What this machine can do at best: its FMA peak and its streaming rate.

A ratio target is a statement about two programs on one machine, and some
cannot be met on some machines: "kiln <= 0.5x eager" on a row that eager
already runs at 64% of the FMA peak asks kiln for 128% of it.  The report
says so per target (:func:`floor_ms`), from two probes measured in the same
run:

* ``fma_gflops``: ``threads`` threads, each running 12 independent chains of
  the widest vector FMA the compiler targets with ``-march=native``;
* ``stream_gbps``: ``threads`` threads summing the halves of a buffer of the
  workload's weight bytes (2 MiB-aligned, huge pages asked for, as kiln
  packs its weights), the best of a few sweeps.

A row's floor is the larger of its FLOPs at the peak and its weight bytes
at the streaming rate: no program computes it faster on this machine, so a
target asking for less time is out of reach here.  The probes are C,
compiled with the system compiler; without one the report leaves the floor
out.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from pathlib import Path

__all__ = ["floor_ms", "probe"]

_SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef float v16 __attribute__((vector_size(64)));
#define CHAINS 12

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
  int64_t iters;
  const float *buf;
  int64_t n;
  float out;
  double start, end;
  pthread_barrier_t *bar;
} job;

/* CHAINS independent a = a * x + y chains (contracted to FMAs): different
 * starting values, so the compiler cannot merge them. */
static void *fma_body(void *p) {
  job *j = p;
  v16 c[CHAINS], x, y;
  for (int i = 0; i < 16; i++) x[i] = 0.999999f, y[i] = 1e-7f;
  for (int k = 0; k < CHAINS; k++)
    for (int i = 0; i < 16; i++) c[k][i] = 1.0f + 0.01f * k + j->out;
  pthread_barrier_wait(j->bar);
  j->start = now();
  for (int64_t it = 0; it < j->iters; it++) {
#pragma GCC unroll 12
    for (int k = 0; k < CHAINS; k++) c[k] = c[k] * x + y;
  }
  j->end = now();
  float s = 0;
  for (int k = 0; k < CHAINS; k++)
    for (int i = 0; i < 16; i++) s += c[k][i];
  j->out = s;
  return NULL;
}

static void *sum_body(void *p) {
  job *j = p;
  v16 s[8] = {0};
  pthread_barrier_wait(j->bar);
  j->start = now();
  for (int64_t i = 0; i + 128 <= j->n; i += 128) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) s[k] += *(const v16 *)(j->buf + i + 16 * k);
  }
  j->end = now();
  float t = 0;
  for (int k = 0; k < 8; k++)
    for (int i = 0; i < 16; i++) t += s[k][i];
  j->out = t;
  return NULL;
}

/* Seconds from the first thread's start to the last one's end, for
 * `threads` threads running body at once after a barrier.  Each thread
 * times itself: the caller, waiting in join, may get a core late. */
static double together(void *(*body)(void *), job *jobs, int threads) {
  pthread_t tid[64];
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, threads);
  for (int t = 0; t < threads; t++) {
    jobs[t].bar = &bar;
    pthread_create(&tid[t], NULL, body, &jobs[t]);
  }
  double first = 1e30, last = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(tid[t], NULL);
    if (jobs[t].start < first) first = jobs[t].start;
    if (jobs[t].end > last) last = jobs[t].end;
  }
  pthread_barrier_destroy(&bar);
  return last - first;
}

/* GFLOPS of `threads` threads each doing iters x CHAINS 16-lane FMAs. */
double kiln_probe_fma(int threads, int64_t iters) {
  if (threads > 64) threads = 64;
  job jobs[64];
  memset(jobs, 0, sizeof jobs);
  for (int t = 0; t < threads; t++) jobs[t].iters = iters;
  double dt = together(fma_body, jobs, threads);
  return threads * (double)iters * CHAINS * 16 * 2 / dt / 1e9;
}

/* The best of `reps` sweeps of `threads` threads over halves of a `bytes`
 * buffer, in GB/s; 0 when the buffer cannot be had. */
double kiln_probe_stream(int threads, int64_t bytes, int reps) {
  if (threads > 64) threads = 64;
  const int64_t huge = 2 << 20;
  int64_t size = (bytes + huge - 1) / huge * huge;
  float *buf = aligned_alloc(huge, size);
  if (!buf) return 0;
#ifdef MADV_HUGEPAGE
  madvise(buf, size, MADV_HUGEPAGE);
#endif
  int64_t n = size / 4;
  for (int64_t i = 0; i < n; i++) buf[i] = 1.0f;
  job jobs[64];
  memset(jobs, 0, sizeof jobs);
  int64_t part = n / threads / 128 * 128;
  for (int t = 0; t < threads; t++) jobs[t].buf = buf + t * part, jobs[t].n = part;
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double dt = together(sum_body, jobs, threads);
    if (dt < best) best = dt;
  }
  free(buf);
  return (double)part * threads * 4 / best / 1e9;
}
"""


def _build() -> ctypes.CDLL | None:
    cc = os.environ.get("CC", "cc")
    folder = Path(tempfile.mkdtemp(prefix="kiln-ceiling-"))
    src, lib = folder / "probe.c", folder / "probe.so"
    src.write_text(_SOURCE)
    try:
        subprocess.run([cc, "-O2", "-march=native", "-ffp-contract=fast", "-fPIC", "-shared", "-pthread",
                        "-o", str(lib), str(src)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    probe_lib = ctypes.CDLL(str(lib))
    probe_lib.kiln_probe_fma.argtypes = [ctypes.c_int, ctypes.c_int64]
    probe_lib.kiln_probe_fma.restype = ctypes.c_double
    probe_lib.kiln_probe_stream.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int]
    probe_lib.kiln_probe_stream.restype = ctypes.c_double
    return probe_lib


def probe(threads: int, stream_bytes=(), fma_seconds: float = 0.2) -> dict | None:
    """``{"threads", "fma_gflops", "stream_gbps": {str(bytes): GB/s}}`` on ``threads``
    threads: the best of three FMA runs of about ``fma_seconds`` each, and
    the best sweep over a buffer of each size in ``stream_bytes``.  None
    without a C compiler."""
    lib = _build()
    if lib is None:
        return None
    calibrate = 2_000_000
    rate = lib.kiln_probe_fma(1, calibrate)  # GFLOPS of one thread, to size the real runs
    iters = max(calibrate, int(fma_seconds * rate * 1e9 / (12 * 16 * 2)))
    fma = max(lib.kiln_probe_fma(threads, iters) for _ in range(3))
    # Keys as strings: the result goes through JSON.
    stream = {str(int(b)): lib.kiln_probe_stream(threads, int(b), 20) for b in sorted(set(stream_bytes))}
    return {"threads": threads, "fma_gflops": fma, "stream_gbps": stream}


def floor_ms(ceiling: dict | None, gflop: float | None, weight_bytes: int | None) -> float | None:
    """The shortest time a row can take on the probed machine: its FLOPs at
    the FMA peak or its weights at the streaming rate, whichever is longer;
    None without a probe or without the row's FLOPs."""
    if not ceiling or gflop is None:
        return None
    floor = gflop / ceiling["fma_gflops"] * 1e3
    rate = ceiling["stream_gbps"].get(str(int(weight_bytes))) if weight_bytes else None
    if rate:
        floor = max(floor, weight_bytes / (rate * 1e9) * 1e3)
    return floor
