"""What this machine can do at best: its FMA peak and its streaming rate.

A ratio target is a statement about two programs on one machine, and some
cannot be met on some machines: "kiln <= 0.5x eager" on a row that eager
already runs at 64% of the FMA peak asks kiln for 128% of it.  The report
says so per target (:func:`floor_ms`), from two probes measured in the same
run:

* ``fma_gflops``: ``threads`` threads, each running 12 independent chains of
  vector FMAs as wide as the registers ``-march=native`` targets (16
  lanes with AVX-512, else 8);
* ``stream_gbps``: ``threads`` threads summing the halves of a buffer of the
  row's weight bytes (2 MiB-aligned, huge pages asked for, as kiln packs
  its weights), swept between the row's rounds, the best sweep kept.

A row's floor is the larger of its FLOPs at the peak and its weight bytes
at the streaming rate: no program computes it faster on this machine, so a
target asking for less time is out of reach here (the report also caps it
at the fastest call any peer made).  The probes are C, compiled with the
system compiler; without one the report leaves the floor out.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from pathlib import Path

__all__ = ["Ceiling", "floor_ms"]

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
/* The FMA chains' width: the machine's vector registers.  With 16 lanes on
 * AVX2 the 12 chains took 24 ymm of 16 and spilled: the probe read 10.8
 * GFLOPS on two Zen cores whose GEMMs ran at 125. */
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
typedef float vf __attribute__((vector_size(LANES * 4)));

int kiln_probe_lanes(void) { return LANES; }

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
  vf c[CHAINS], x, y;
  for (int i = 0; i < LANES; i++) x[i] = 0.999999f, y[i] = 1e-7f;
  for (int k = 0; k < CHAINS; k++)
    for (int i = 0; i < LANES; i++) c[k][i] = 1.0f + 0.01f * k + j->out;
  pthread_barrier_wait(j->bar);
  j->start = now();
  for (int64_t it = 0; it < j->iters; it++) {
#pragma GCC unroll 12
    for (int k = 0; k < CHAINS; k++) c[k] = c[k] * x + y;
  }
  j->end = now();
  float s = 0;
  for (int k = 0; k < CHAINS; k++)
    for (int i = 0; i < LANES; i++) s += c[k][i];
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

/* GFLOPS of `threads` threads each doing iters x CHAINS LANES-lane FMAs. */
double kiln_probe_fma(int threads, int64_t iters) {
  if (threads > 64) threads = 64;
  job jobs[64];
  memset(jobs, 0, sizeof jobs);
  for (int t = 0; t < threads; t++) jobs[t].iters = iters;
  double dt = together(fma_body, jobs, threads);
  return threads * (double)iters * CHAINS * LANES * 2 / dt / 1e9;
}

/* A buffer of `bytes` (rounded up to 2 MiB), 2 MiB-aligned with huge pages
 * asked for (as kiln packs its weights) and written once; NULL if none. */
float *kiln_probe_buffer(int64_t bytes) {
  const int64_t huge = 2 << 20;
  int64_t size = (bytes + huge - 1) / huge * huge;
  float *buf = aligned_alloc(huge, size);
  if (!buf) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(buf, size, MADV_HUGEPAGE);
#endif
  for (int64_t i = 0; i < size / 4; i++) buf[i] = 1.0f;
  return buf;
}

void kiln_probe_free(float *buf) { free(buf); }

/* GB/s of the best of `reps` sweeps of `threads` threads, each summing its
 * share of the first `bytes` of buf. */
double kiln_probe_sweep(int threads, const float *buf, int64_t bytes, int reps) {
  if (threads > 64) threads = 64;
  job jobs[64];
  memset(jobs, 0, sizeof jobs);
  int64_t part = bytes / 4 / threads / 128 * 128;
  for (int t = 0; t < threads; t++) jobs[t].buf = buf + t * part, jobs[t].n = part;
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double dt = together(sum_body, jobs, threads);
    if (dt < best) best = dt;
  }
  return (double)part * threads * 4 / best / 1e9;
}
"""


def _build() -> ctypes.CDLL | None:
    """The probes compiled into a shared library and loaded (the files go
    once loaded); None without a working C compiler."""
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory(prefix="kiln-ceiling-") as folder:
        src, lib = Path(folder) / "probe.c", Path(folder) / "probe.so"
        src.write_text(_SOURCE)
        try:
            subprocess.run([cc, "-O2", "-march=native", "-ffp-contract=fast", "-fPIC", "-shared", "-pthread",
                            "-o", str(lib), str(src)], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            return None
        probe_lib = ctypes.CDLL(str(lib))  # the mapping outlives the file
    probe_lib.kiln_probe_fma.argtypes = [ctypes.c_int, ctypes.c_int64]
    probe_lib.kiln_probe_fma.restype = ctypes.c_double
    probe_lib.kiln_probe_lanes.restype = ctypes.c_int
    probe_lib.kiln_probe_buffer.argtypes = [ctypes.c_int64]
    probe_lib.kiln_probe_buffer.restype = ctypes.c_void_p
    probe_lib.kiln_probe_free.argtypes = [ctypes.c_void_p]
    probe_lib.kiln_probe_sweep.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    probe_lib.kiln_probe_sweep.restype = ctypes.c_double
    return probe_lib


class Ceiling:
    """The probes of one machine, compiled once (:meth:`build`).

    The FMA peak is steady; the streaming rate is not: on a shared host
    it moved 2x within minutes with the neighbours' traffic, so the harness
    sweeps a row's weight bytes between the row's rounds
    (:meth:`stream_gbps`, buffers kept per size) and keeps the best.
    """

    def __init__(self, lib: ctypes.CDLL, threads: int):
        self.lib, self.threads = lib, threads
        self._buffers: dict[int, int] = {}

    @classmethod
    def build(cls, threads: int) -> Ceiling | None:
        """The probes for ``threads`` threads; None without a C compiler."""
        lib = _build()
        return None if lib is None else cls(lib, threads)

    def fma_gflops(self, seconds: float = 0.2) -> float:
        """The best of three runs of about ``seconds`` each."""
        calibrate = 2_000_000
        rate = self.lib.kiln_probe_fma(1, calibrate)  # one thread's GFLOPS, to size the real runs
        iters = max(calibrate, int(seconds * rate * 1e9 / (12 * self.lib.kiln_probe_lanes() * 2)))
        return max(self.lib.kiln_probe_fma(self.threads, iters) for _ in range(3))

    def stream_gbps(self, nbytes: int, reps: int = 5) -> float:
        """The best of ``reps`` sweeps over a buffer of ``nbytes`` (0 when
        none could be allocated)."""
        nbytes = int(nbytes)
        if nbytes not in self._buffers:
            self._buffers[nbytes] = self.lib.kiln_probe_buffer(nbytes) or 0
        buf = self._buffers[nbytes]
        return self.lib.kiln_probe_sweep(self.threads, buf, nbytes, reps) if buf else 0.0

    def close(self) -> None:
        """Free the sweep buffers."""
        for buf in self._buffers.values():
            if buf:
                self.lib.kiln_probe_free(buf)
        self._buffers.clear()


def floor_ms(fma_gflops: float | None, gflop: float | None, weight_bytes: int | None = None,
             stream_gbps: float | None = None) -> float | None:
    """The shortest time a row can take: its FLOPs at the FMA peak or its
    weights at the streaming rate, whichever is longer; None without the
    peak or the row's FLOPs."""
    if not fma_gflops or gflop is None:
        return None
    floor = gflop / fma_gflops * 1e3
    if weight_bytes and stream_gbps:
        floor = max(floor, weight_bytes / (stream_gbps * 1e9) * 1e3)
    return floor
