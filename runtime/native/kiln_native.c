/*
 * kiln's native runtime: what JIT-compiled CPU kernels call beyond the
 * ExecutionEngine (DESIGN.md, "The native side").
 *
 *   - a parallel-for over a small pool of worker threads (the wheel's MLIR
 *     has no OpenMP or async runtime);
 *   - kiln_sgemm_small: C = A B (+ C) for row-major f32 with few rows of A,
 *     where OpenBLAS packs all of B on every call (16 MiB for a 1024x4096
 *     weight at M = 8) and runs below memory speed.  Here B is streamed
 *     once per block of rows, in column panels split over the threads.
 *
 * Built on first use by kiln/runtime/native.py (cc -O3 -march=native) and
 * loaded into the ExecutionEngine as a shared library.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ pool */

typedef void (*kiln_task_fn)(void *ctx, int64_t lo, int64_t hi);

#define KILN_MAX_THREADS 64
/* Workers spin this long after a job before sleeping: kernels of one call
 * come back to back, and a condition-variable wake costs tens of µs. */
#define KILN_SPIN_NS 200000

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond = PTHREAD_COND_INITIALIZER;
static int pool_threads = 0; /* workers, not counting the caller */
static atomic_long job_gen = 0;
static atomic_int job_pending = 0;
static kiln_task_fn job_fn;
static void *job_ctx;
static int64_t job_n, job_parts;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void run_part(int64_t part) {
  int64_t lo = job_n * part / job_parts, hi = job_n * (part + 1) / job_parts;
  if (lo < hi) job_fn(job_ctx, lo, hi);
}

static void *worker(void *arg) {
  int64_t me = (int64_t)(intptr_t)arg; /* part index: 1 .. pool_threads */
  long seen = 0;
  for (;;) {
    int64_t spin_until = now_ns() + KILN_SPIN_NS;
    while (atomic_load_explicit(&job_gen, memory_order_acquire) == seen) {
      if (now_ns() > spin_until) {
        pthread_mutex_lock(&wake_lock);
        while (atomic_load(&job_gen) == seen) pthread_cond_wait(&wake_cond, &wake_lock);
        pthread_mutex_unlock(&wake_lock);
        break;
      }
    }
    seen = atomic_load_explicit(&job_gen, memory_order_acquire);
    if (me < job_parts) run_part(me);
    atomic_fetch_sub_explicit(&job_pending, 1, memory_order_acq_rel);
  }
  return NULL;
}

/* Start `threads - 1` workers (the caller is the last thread); idempotent. */
int kiln_pool_init(int threads) {
  pthread_mutex_lock(&pool_lock);
  if (threads > KILN_MAX_THREADS) threads = KILN_MAX_THREADS;
  for (int i = pool_threads + 1; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, (void *)(intptr_t)i) != 0) break;
    pthread_detach(t);
    pool_threads = i;
  }
  int n = pool_threads + 1;
  pthread_mutex_unlock(&pool_lock);
  return n;
}

int kiln_pool_threads(void) { return pool_threads + 1; }

/* fn(ctx, lo, hi) over [0, n) in `parts` ranges, on the pool and the caller.
 * A caller that finds the pool busy (another thread's kernel) runs it all. */
void kiln_parallel_for(kiln_task_fn fn, void *ctx, int64_t n, int64_t parts) {
  if (parts > pool_threads + 1) parts = pool_threads + 1;
  if (parts <= 1 || n <= 1 || pthread_mutex_trylock(&pool_lock) != 0) {
    fn(ctx, 0, n);
    return;
  }
  job_fn = fn;
  job_ctx = ctx;
  job_n = n;
  job_parts = parts;
  atomic_store(&job_pending, pool_threads);
  pthread_mutex_lock(&wake_lock);
  atomic_fetch_add_explicit(&job_gen, 1, memory_order_acq_rel);
  pthread_cond_broadcast(&wake_cond);
  pthread_mutex_unlock(&wake_lock);
  run_part(0);
  while (atomic_load_explicit(&job_pending, memory_order_acquire) > 0) {
  }
  pthread_mutex_unlock(&pool_lock);
}

/* ------------------------------------------------------------ small GEMM */

#include <stdlib.h>

#define MR 6  /* rows of A per register block */
#define NR 16 /* columns of B per panel: two 8-float vectors */

/* 8 floats: one AVX2 register (AVX-512 machines use the lower half); the
 * accumulators of a 6 x 16 block are 12 of them, held in registers. */
typedef float v8 __attribute__((vector_size(32)));

static inline v8 load8(const float *p) {
  v8 v;
  __builtin_memcpy(&v, p, sizeof v); /* unaligned: strided panels of B */
  return v;
}

/* A product whose B is a constant of the JIT module (a weight) gets a slot:
 * a mutable i64 global of that module, 0 until the first call packs B into
 * panels of NR columns, K rows each contiguous (one sequential stream per
 * panel instead of K rows a page apart) and stores the packed copy there.
 * The module's kiln_release_packed() frees every packed copy of its slots
 * (the runtime calls it when the model dies). */
typedef struct {
  const float *src;
  int64_t K, N, ldb;
  float data[];
} packed_b;

static atomic_llong packed_total = 0;

int64_t kiln_packed_bytes(void) { return atomic_load(&packed_total); }

void kiln_free_packed(int64_t p) {
  packed_b *pb = (packed_b *)p;
  if (pb == NULL) return;
  atomic_fetch_sub(&packed_total, ((pb->N + NR - 1) / NR) * NR * pb->K * (int64_t)sizeof(float));
  free(pb);
}

static const float *packed_for(int64_t slot, const float *B, int64_t K, int64_t N, int64_t ldb) {
  if (slot == 0) return NULL;
  _Atomic(packed_b *) *s = (_Atomic(packed_b *) *)slot;
  packed_b *pb = atomic_load_explicit(s, memory_order_acquire);
  if (pb == NULL) {
    int64_t np = (N + NR - 1) / NR;
    size_t bytes = sizeof(packed_b) + (size_t)(np * NR * K) * sizeof(float);
    packed_b *fresh = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (fresh == NULL) return NULL;
    fresh->src = B;
    fresh->K = K;
    fresh->N = N;
    fresh->ldb = ldb;
    for (int64_t q = 0; q < np; q++)
      for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < NR; j++) {
          int64_t n = q * NR + j;
          fresh->data[(q * K + k) * NR + j] = n < N ? B[k * ldb + n] : 0.0f;
        }
    atomic_fetch_add(&packed_total, np * NR * K * (int64_t)sizeof(float));
    packed_b *expected = NULL;
    if (atomic_compare_exchange_strong(s, &expected, fresh)) {
      pb = fresh;
    } else { /* another thread packed it first */
      kiln_free_packed((int64_t)fresh);
      pb = expected;
    }
  }
  /* A slot is one constant of one shape; anything else takes the strided path. */
  return pb->src == B && pb->K == K && pb->N == N && pb->ldb == ldb ? pb->data : NULL;
}

typedef struct {
  int64_t M, N, K, lda, ldb, ldc;
  const float *A, *B;
  const float *P; /* packed B, or NULL */
  float *C;
  int accumulate;
} gemm_args;

/* C[m0 .. m0 + mr, panel] (nr <= NR columns of it) over all K, from a panel
 * whose row k starts at b + k * bstride; mr is a compile-time constant at
 * every call site, so the loops over it unroll and acc stays in registers. */
static inline __attribute__((always_inline)) void micro(const gemm_args *g, int mr, int64_t m0, const float *b,
                                                         int64_t bstride, float *c, int64_t nr) {
  v8 acc[MR][2];
  for (int m = 0; m < mr; m++) acc[m][0] = acc[m][1] = (v8){0};
  const float *A = g->A + m0 * g->lda;
  for (int64_t k = 0; k < g->K; k++) {
    const float *bk = b + k * bstride;
    v8 b0 = load8(bk), b1 = load8(bk + 8);
    for (int m = 0; m < mr; m++) {
      float a = A[m * g->lda + k];
      acc[m][0] += a * b0;
      acc[m][1] += a * b1;
    }
  }
  for (int m = 0; m < mr; m++) {
    float out[NR];
    __builtin_memcpy(out, &acc[m][0], sizeof acc[m][0]);
    __builtin_memcpy(out + 8, &acc[m][1], sizeof acc[m][1]);
    float *cm = c + m * g->ldc;
    if (g->accumulate)
      for (int64_t j = 0; j < nr; j++) cm[j] += out[j];
    else
      for (int64_t j = 0; j < nr; j++) cm[j] = out[j];
  }
}

static void panel(const gemm_args *g, int64_t q, const float *b, int64_t bstride, int64_t nr) {
  int64_t n0 = q * NR;
  int64_t m0 = 0;
  for (; m0 + MR <= g->M; m0 += MR) micro(g, MR, m0, b, bstride, g->C + m0 * g->ldc + n0, nr);
  switch (g->M - m0) {
    case 5: micro(g, 5, m0, b, bstride, g->C + m0 * g->ldc + n0, nr); break;
    case 4: micro(g, 4, m0, b, bstride, g->C + m0 * g->ldc + n0, nr); break;
    case 3: micro(g, 3, m0, b, bstride, g->C + m0 * g->ldc + n0, nr); break;
    case 2: micro(g, 2, m0, b, bstride, g->C + m0 * g->ldc + n0, nr); break;
    case 1: micro(g, 1, m0, b, bstride, g->C + m0 * g->ldc + n0, nr); break;
    default: break;
  }
}

/* Panels [lo, hi) of NR columns. */
static void panels(void *ctx, int64_t lo, int64_t hi) {
  const gemm_args *g = ctx;
  float tail[64 * NR]; /* the last, partial panel of an unpacked B: copied so micro reads NR columns */
  for (int64_t q = lo; q < hi; q++) {
    int64_t n0 = q * NR, nr = g->N - n0 < NR ? g->N - n0 : NR;
    if (g->P) {
      panel(g, q, g->P + q * g->K * NR, NR, nr);
    } else if (nr == NR) {
      panel(g, q, g->B + n0, g->ldb, nr);
    } else {
      for (int64_t k0 = 0; k0 < g->K; k0 += 64) { /* a partial panel, K in chunks of 64 rows */
        int64_t kc = g->K - k0 < 64 ? g->K - k0 : 64;
        for (int64_t k = 0; k < kc; k++)
          for (int64_t j = 0; j < NR; j++) tail[k * NR + j] = j < nr ? g->B[(k0 + k) * g->ldb + n0 + j] : 0.0f;
        gemm_args part = *g;
        part.K = kc;
        part.A = g->A + k0;
        part.accumulate = g->accumulate || k0 > 0;
        panel(&part, q, tail, NR, nr);
      }
    }
  }
}

/* C[M, N] = A[M, K] B[K, N] (beta = 0) or C += A B (beta = 1); row-major,
 * leading dims in elements, on up to `threads` threads of the pool; `slot`
 * is the address of B's packing slot (B a constant) or 0.  Pointers cross
 * as int64 like the sgemm calls of kiln-cpu-library. */
void kiln_sgemm_small(int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int64_t B, int64_t ldb,
                      float beta, int64_t C, int64_t ldc, int32_t threads, int64_t slot) {
  gemm_args g = {M, N, K, lda, ldb, ldc, (const float *)A, (const float *)B, NULL, (float *)C, beta != 0.0f};
  g.P = packed_for(slot, g.B, K, N, ldb);
  int64_t np = (N + NR - 1) / NR;
  kiln_parallel_for(panels, &g, np, threads);
}
