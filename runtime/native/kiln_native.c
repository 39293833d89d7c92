/*
 * kiln's native runtime: what JIT-compiled CPU kernels call beyond the
 * ExecutionEngine (DESIGN.md, "The native side").
 *
 *   - a parallel-for over a small pool of worker threads (the wheel's MLIR
 *     has no OpenMP or async runtime);
 *   - kiln_sgemm_small: C = A B (+ C) for row-major f32 with few rows of A,
 *     where OpenBLAS packs all of B on every call (16 MiB for a 1024x4096
 *     weight at M = 8) and runs below memory speed.  Here B is streamed
 *     once per block of rows, in column panels split over the threads;
 *   - kiln_sgemm_wa and kiln_conv2d: a constant A (a weight) times
 *     activations, and convolutions with the im2col gathered per panel
 *     (the weight-A GEMM section below).
 *
 * Built on first use by kiln/runtime/native.py (cc -O3 -march=native) and
 * loaded into the ExecutionEngine as a shared library.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ pool */

typedef void (*kiln_task_fn)(void *ctx, int64_t lo, int64_t hi);

#define KILN_MAX_THREADS 64
/* Workers spin this long after a job before sleeping: kernels of one call
 * come back to back, and a condition-variable wake costs tens of µs.  After
 * the first microseconds they spin with sched_yield, so a runnable thread
 * of someone else (OpenBLAS's workers, another process) gets the core. */
#define KILN_SPIN_NS 200000
#define KILN_PAUSE_NS 5000

/* A job is `parts` parts that any thread may claim.  job_word holds the
 * job's generation (high 32 bits), its part count (bits 16..31) and the next
 * unclaimed part (bits 0..15); a part is claimed by a compare-and-swap on
 * it, so a claim can only succeed on the job the word names, and the caller
 * claims whatever no worker has taken: a worker that is not running (both
 * cores busy elsewhere) costs nothing, instead of a scheduler slice. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond = PTHREAD_COND_INITIALIZER;
static int pool_threads = 0; /* workers, not counting the caller */
static _Atomic uint64_t job_word = 0;
static atomic_llong job_done = 0; /* parts of the current job finished */
static uint32_t job_gen = 0;      /* the caller's copy (under pool_lock) */
static kiln_task_fn job_fn;
static void *job_ctx;
static int64_t job_n, job_parts;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* A part of job `gen` claimed, or -1 when that job has none left (or is over). */
static int64_t claim(uint32_t gen) {
  uint64_t w = atomic_load_explicit(&job_word, memory_order_acquire);
  for (;;) {
    if ((uint32_t)(w >> 32) != gen || (w & 0xffff) >= ((w >> 16) & 0xffff)) return -1;
    if (atomic_compare_exchange_weak_explicit(&job_word, &w, w + 1, memory_order_acq_rel, memory_order_acquire))
      return (int64_t)(w & 0xffff);
  }
}

/* Claim and run parts of job `gen` until none is left. */
static void work(uint32_t gen) {
  for (int64_t part; (part = claim(gen)) >= 0;) {
    int64_t lo = job_n * part / job_parts, hi = job_n * (part + 1) / job_parts;
    if (lo < hi) job_fn(job_ctx, lo, hi);
    atomic_fetch_add_explicit(&job_done, 1, memory_order_release);
  }
}

static uint32_t current_gen(void) { return (uint32_t)(atomic_load_explicit(&job_word, memory_order_acquire) >> 32); }

static void *worker(void *arg) {
  (void)arg;
  uint32_t seen = 0;
  for (;;) {
    int64_t start = now_ns();
    for (;;) {
      if (current_gen() != seen) break;
      int64_t waited = now_ns() - start;
      if (waited > KILN_SPIN_NS) {
        pthread_mutex_lock(&wake_lock);
        while (current_gen() == seen) pthread_cond_wait(&wake_cond, &wake_lock);
        pthread_mutex_unlock(&wake_lock);
        break;
      }
      if (waited > KILN_PAUSE_NS)
        sched_yield();
      else
        cpu_relax();
    }
    seen = current_gen();
    work(seen);
  }
  return NULL;
}

/* Start `threads - 1` workers (the caller is the last thread); idempotent. */
int kiln_pool_init(int threads) {
  pthread_mutex_lock(&pool_lock);
  if (threads > KILN_MAX_THREADS) threads = KILN_MAX_THREADS;
  for (int i = pool_threads + 1; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) break;
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
  atomic_store_explicit(&job_done, 0, memory_order_relaxed);
  uint32_t gen = ++job_gen;
  atomic_store_explicit(&job_word, ((uint64_t)gen << 32) | ((uint64_t)parts << 16), memory_order_release);
  pthread_mutex_lock(&wake_lock);
  pthread_cond_broadcast(&wake_cond);
  pthread_mutex_unlock(&wake_lock);
  work(gen);
  /* Only parts a worker claimed and is still running are waited for. */
  while (atomic_load_explicit(&job_done, memory_order_acquire) < parts) cpu_relax();
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
  int64_t kind;  /* PACK_B (this file's small GEMM) or PACK_A (the weight-A GEMM below) */
  int64_t bytes; /* of data[] */
  float data[];
} packed_t;

enum { PACK_B = 0, PACK_A = 1 };

static atomic_llong packed_total = 0;

int64_t kiln_packed_bytes(void) { return atomic_load(&packed_total); }

void kiln_free_packed(int64_t p) {
  packed_t *pb = (packed_t *)p;
  if (pb == NULL) return;
  atomic_fetch_sub(&packed_total, pb->bytes);
  free(pb);
}

/* The slot's packed copy of `src` (rows x cols, leading dim ld) in layout
 * `kind`, packing it on the first call; NULL when the slot holds another
 * matrix or memory ran out (callers then take an unpacked path). */
static const float *slot_packed(int64_t slot, int64_t kind, const float *src, int64_t rows, int64_t cols,
                                int64_t ld, int64_t floats, void (*pack)(float *, const float *, int64_t, int64_t,
                                                                         int64_t)) {
  if (slot == 0) return NULL;
  _Atomic(packed_t *) *s = (_Atomic(packed_t *) *)slot;
  packed_t *pb = atomic_load_explicit(s, memory_order_acquire);
  if (pb == NULL) {
    size_t bytes = sizeof(packed_t) + (size_t)floats * sizeof(float);
    packed_t *fresh = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (fresh == NULL) return NULL;
    fresh->src = src;
    fresh->K = rows;
    fresh->N = cols;
    fresh->ldb = ld;
    fresh->kind = kind;
    fresh->bytes = floats * (int64_t)sizeof(float);
    pack(fresh->data, src, rows, cols, ld);
    atomic_fetch_add(&packed_total, fresh->bytes);
    packed_t *expected = NULL;
    if (atomic_compare_exchange_strong(s, &expected, fresh)) {
      pb = fresh;
    } else { /* another thread packed it first */
      kiln_free_packed((int64_t)fresh);
      pb = expected;
    }
  }
  /* A slot is one constant of one shape; anything else takes the unpacked path. */
  return pb->src == src && pb->K == rows && pb->N == cols && pb->ldb == ld && pb->kind == kind ? pb->data : NULL;
}

/* src (element (k, n) at src[k * sk + n * sn], k < K, n < N) as panels of
 * `width` n's, each [K][width] with zeros past N: the layout both packed
 * GEMM operands use (B's column panels, A's row blocks). */
static inline __attribute__((always_inline)) void pack_panels(float *dst, const float *src, int64_t K, int64_t N,
                                                              int64_t width, int64_t sk, int64_t sn) {
  int64_t np = (N + width - 1) / width;
  for (int64_t q = 0; q < np; q++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < width; j++) {
        int64_t n = q * width + j;
        dst[(q * K + k) * width + j] = n < N ? src[k * sk + n * sn] : 0.0f;
      }
}

/* B (K x N) as panels of NR columns, K rows each contiguous. */
static void pack_b_panels(float *dst, const float *B, int64_t K, int64_t N, int64_t ldb) {
  pack_panels(dst, B, K, N, NR, ldb, 1);
}

static const float *packed_for(int64_t slot, const float *B, int64_t K, int64_t N, int64_t ldb) {
  return slot_packed(slot, PACK_B, B, K, N, ldb, (N + NR - 1) / NR * NR * K, pack_b_panels);
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
    /* The streamed panel 32 rows ahead: with several rows of A the FMAs fall
     * behind the hardware prefetcher (bench MLP at M = 8: 2.4-2.9 -> 1.8-1.9
     * ms); one row only streams, and the extra requests slowed it. */
    if (mr > 1) __builtin_prefetch(bk + 32 * bstride);
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

/* ---------------------------------------------------- weight-A GEMM, conv
 *
 * C[b] = A B[b] (+ C[b]) where A (M x K) is a constant of the JIT module (a
 * convolution's or a weight-first product's weight) and B[b] (K x N) is an
 * activation: the im2col matrix of a convolution, or an im2col it gathers
 * itself from the (padded) NCHW input.  OpenBLAS packs A and B on every call
 * and runs these small products on one thread per image; here A is packed
 * once into the slot, and the work is split over images, column panels and,
 * when those are few, row blocks, on every thread of the pool.
 *
 * Register block: WMR rows of A times WNR = 2 vectors of columns; 8 x 32
 * with AVX-512 (16 accumulators of 32), 6 x 16 with AVX2.  K runs in blocks
 * of KC rows so a block of the packed B panel (KC x WNR) stays in L1. */

#if defined(__AVX512F__)
#define VW 16
#define WMR 8
#else
#define VW 8
#define WMR 6
#endif
#define WNR (2 * VW)
#define KC 384 /* at most; K is split into equal blocks */

typedef float vw __attribute__((vector_size(VW * 4)));

static inline vw loadw(const float *p) {
  vw v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

/* A (M x K) as blocks of WMR rows, each [K][WMR] (zero rows pad the last). */
static void pack_a_blocks(float *dst, const float *A, int64_t M, int64_t K, int64_t lda) {
  pack_panels(dst, A, K, M, WMR, 1, lda);
}

/* max(x, 0) lane by lane, NaN kept (as torch.relu and the generated select do). */
static inline vw relu_w(vw x) {
  typedef int32_t vwi __attribute__((vector_size(VW * 4)));
  vwi neg = x < (vw){0};
  return (vw)((vwi)x & ~neg);
}

/* c[0 .. mr, 0 .. nr] (leading dim ldc) = or += a[kc][WMR] . b[kc][WNR],
 * starting from bias[m] for row m when bias is not NULL, plus res (same
 * layout as c; the first block of K only, so res may be c itself); `relu`
 * (the last block of K only) applies max(., 0) to what is stored. */
static inline __attribute__((always_inline)) void micro_w(int mr, const float *a, const float *b, int64_t kc,
                                                           float *c, int64_t ldc, int64_t nr, int add,
                                                           const float *bias, const float *res, int relu) {
  vw acc[WMR][2];
  for (int m = 0; m < WMR; m++) {
    float b0 = bias && m < mr ? bias[m] : 0.0f;
    acc[m][0] = acc[m][1] = (vw){0} + b0;
  }
  for (int64_t k = 0; k < kc; k++) {
    vw b0 = loadw(b + k * WNR), b1 = loadw(b + k * WNR + VW);
    const float *ak = a + k * WMR;
    for (int m = 0; m < WMR; m++) {
      acc[m][0] += ak[m] * b0;
      acc[m][1] += ak[m] * b1;
    }
  }
  for (int m = 0; m < mr; m++) {
    float *cm = c + m * ldc;
    if (nr == WNR) {
      vw c0 = acc[m][0], c1 = acc[m][1];
      if (add) {
        c0 += loadw(cm);
        c1 += loadw(cm + VW);
      }
      if (res) {
        c0 += loadw(res + m * ldc);
        c1 += loadw(res + m * ldc + VW);
      }
      if (relu) {
        c0 = relu_w(c0);
        c1 = relu_w(c1);
      }
      __builtin_memcpy(cm, &c0, sizeof c0);
      __builtin_memcpy(cm + VW, &c1, sizeof c1);
    } else {
      float out[WNR];
      __builtin_memcpy(out, &acc[m][0], sizeof acc[m][0]);
      __builtin_memcpy(out + VW, &acc[m][1], sizeof acc[m][1]);
      for (int64_t j = 0; j < nr; j++) {
        float y = add ? cm[j] + out[j] : out[j];
        y = res ? y + res[m * ldc + j] : y;
        cm[j] = relu && y < 0.0f ? 0.0f : y;
      }
    }
  }
}

/* Where the columns of B come from: a matrix, or the im2col of an NCHW
 * image (row k = (c, kh, kw), column p = (oh, ow)). */
typedef struct {
  int64_t batch, M, N, K;
  const float *A;
  int64_t lda;
  const float *Ap; /* A packed by pack_a_blocks, or NULL */
  const float *B;
  int64_t ldb, sb; /* matrix source: row stride, image stride */
  int64_t H, W, KH, KW, sh, sw, dh, dw, OW, pt, pl; /* im2col source (B: the images, sb their stride) */
  int im2col;
  float *C;
  int64_t ldc, sc;
  int accumulate;
  const float *bias; /* per row of C, added once (with accumulate 0), or NULL */
  const float *res;  /* added to C once (laid out as C), or NULL */
  int relu;          /* max(., 0) on the final C */
  int64_t panels, mchunks, mblocks;
  int64_t kstep;   /* rows of K per block: K split into equal blocks of at most KC */
  float *packed_b; /* every panel of B packed once (row chunks share it), or NULL: each task packs its own */
} wgemm_args;

/* A run of a panel's im2col columns: `len` outputs of one output row, from
 * column j0 of the panel, reading input row ih and columns iw, iw + sw, ...
 * (before the kernel offsets; either may be in the padding).  For kernel
 * column kw < RUN_KW, outputs [lo[kw], hi[kw]) of the run read inside the
 * input row (computed once per panel: divisions per row of K cost as much
 * as the copies). */
#define RUN_KW 16
typedef struct {
  int64_t j0, len, ih, iw;
  int32_t lo[RUN_KW], hi[RUN_KW];
} run_t;

static void run_bounds(const wgemm_args *g, int64_t iw, int64_t len, int64_t *lo, int64_t *hi) {
  int64_t sw = g->sw;
  *lo = iw < 0 ? (-iw + sw - 1) / sw : 0;
  *hi = iw < g->W ? (g->W - iw + sw - 1) / sw : 0;
  if (*hi > len) *hi = len;
  if (*lo > *hi) *lo = *hi;
}

static int panel_runs(const wgemm_args *g, int64_t n0, int64_t nr, run_t *runs) {
  int n = 0;
  for (int64_t j = 0; j < nr;) {
    int64_t p = n0 + j, oh = p / g->OW, ow = p % g->OW;
    int64_t len = g->OW - ow < nr - j ? g->OW - ow : nr - j;
    run_t *u = &runs[n++];
    u->j0 = j, u->len = len, u->ih = oh * g->sh - g->pt, u->iw = ow * g->sw - g->pl;
    for (int64_t kw = 0; kw < g->KW && kw < RUN_KW; kw++) {
      int64_t lo, hi;
      run_bounds(g, u->iw + kw * g->dw, len, &lo, &hi);
      u->lo[kw] = (int32_t)lo, u->hi[kw] = (int32_t)hi;
    }
    j += len;
  }
  return n;
}

/* The KC x WNR block of rows [k0, k0 + kc) of B[b]'s panel at column n0
 * (im2col: from the runs; zeros in the padding and past nr). */
static void pack_block(const wgemm_args *g, const float *src, int64_t n0, int64_t nr, int64_t k0, int64_t kc,
                       const run_t *runs, int nruns, float *dst) {
  if (!g->im2col) {
    for (int64_t k = 0; k < kc; k++) {
      const float *row = src + (k0 + k) * g->ldb + n0;
      float *d = dst + k * WNR;
      if (nr == WNR) {
        __builtin_memcpy(d, row, WNR * sizeof(float));
      } else {
        for (int64_t j = 0; j < WNR; j++) d[j] = j < nr ? row[j] : 0.0f;
      }
    }
    return;
  }
  /* Row k0 + k of the im2col is (c, kh, kw); stepped, not divided, per row. */
  int64_t khw = g->KH * g->KW, c = k0 / khw, kh = k0 % khw / g->KW, kw = k0 % g->KW;
  for (int64_t k = 0; k < kc; k++) {
    const float *xc = src + c * g->H * g->W;
    int64_t dy = kh * g->dh, dx = kw * g->dw;
    float *d = dst + k * WNR;
    for (int i = 0; i < nruns; i++) {
      const run_t *u = &runs[i];
      float *o = d + u->j0;
      int64_t ih = u->ih + dy, iw = u->iw + dx, sw = g->sw;
      if ((uint64_t)ih >= (uint64_t)g->H) {
        for (int64_t t = 0; t < u->len; t++) o[t] = 0.0f;
        continue;
      }
      const float *x = xc + ih * g->W + iw;
      int64_t lo, hi;
      if (kw < RUN_KW)
        lo = u->lo[kw], hi = u->hi[kw];
      else
        run_bounds(g, iw, u->len, &lo, &hi);
      for (int64_t t = 0; t < lo; t++) o[t] = 0.0f;
      if (sw == 1)
        memcpy(o + lo, x + lo, (hi - lo) * sizeof(float));
      else if (sw == 2) /* a constant stride: vectorized with shuffles */
        for (int64_t t = lo; t < hi; t++) o[t] = x[2 * t];
      else
        for (int64_t t = lo; t < hi; t++) o[t] = x[t * sw];
      for (int64_t t = hi; t < u->len; t++) o[t] = 0.0f;
    }
    for (int64_t j = nr; j < WNR; j++) d[j] = 0.0f;
    if (++kw == g->KW) {
      kw = 0;
      if (++kh == g->KH) kh = 0, c++;
    }
  }
}

/* Tasks [lo, hi) of packing B into g->packed_b: task t is (image, column
 * panel, K block), written where wgemm_tasks reads it. */
static void pack_b_tasks(void *ctx, int64_t lo, int64_t hi) {
  const wgemm_args *g = ctx;
  run_t runs[WNR];
  int64_t kblocks = (g->K + g->kstep - 1) / g->kstep;
  for (int64_t t = lo; t < hi; t++) {
    int64_t kb = t % kblocks, q = (t / kblocks) % g->panels, b = t / (kblocks * g->panels);
    int64_t n0 = q * WNR, nr = g->N - n0 < WNR ? g->N - n0 : WNR;
    int64_t k0 = kb * g->kstep, kc = g->K - k0 < g->kstep ? g->K - k0 : g->kstep;
    int nruns = g->im2col ? panel_runs(g, n0, nr, runs) : 0;
    float *dst = g->packed_b + ((b * g->panels + q) * g->K + k0) * WNR;
    pack_block(g, g->B + b * g->sb, n0, nr, k0, kc, runs, nruns, dst);
  }
}

/* Tasks [lo, hi): task t is (image, column panel, chunk of row blocks). */
static void wgemm_tasks(void *ctx, int64_t lo, int64_t hi) {
  const wgemm_args *g = ctx;
  float bp[KC * WNR] __attribute__((aligned(64)));
  float ap[KC * WMR] __attribute__((aligned(64)));
  run_t runs[WNR];
  for (int64_t t = lo; t < hi; t++) {
    int64_t chunk = t % g->mchunks, q = (t / g->mchunks) % g->panels, b = t / (g->mchunks * g->panels);
    int64_t n0 = q * WNR, nr = g->N - n0 < WNR ? g->N - n0 : WNR;
    int64_t mb0 = g->mblocks * chunk / g->mchunks, mb1 = g->mblocks * (chunk + 1) / g->mchunks;
    const float *src = g->B + b * g->sb;
    float *cb = g->C + b * g->sc;
    const float *shared = g->packed_b ? g->packed_b + (b * g->panels + q) * g->K * WNR : NULL;
    int nruns = g->im2col && !shared ? panel_runs(g, n0, nr, runs) : 0;
    int64_t kstep = g->kstep;
    for (int64_t k0 = 0; k0 < g->K; k0 += kstep) {
      int64_t kc = g->K - k0 < kstep ? g->K - k0 : kstep;
      const float *bk = bp;
      if (shared)
        bk = shared + k0 * WNR;
      else
        pack_block(g, src, n0, nr, k0, kc, runs, nruns, bp);
      int add = g->accumulate || k0 > 0;
      for (int64_t mb = mb0; mb < mb1; mb++) {
        int64_t m0 = mb * WMR;
        const float *a = g->Ap + (mb * g->K + k0) * WMR;
        if (g->Ap == NULL) { /* no slot, or no memory for the packed copy: this block, packed here */
          for (int64_t k = 0; k < kc; k++)
            for (int64_t i = 0; i < WMR; i++)
              ap[k * WMR + i] = m0 + i < g->M ? g->A[(m0 + i) * g->lda + k0 + k] : 0.0f;
          a = ap;
        }
        float *c = cb + m0 * g->ldc + n0;
        int64_t mr = g->M - m0 < WMR ? g->M - m0 : WMR;
        const float *bias = g->bias && k0 == 0 ? g->bias + m0 : NULL;
        int relu = g->relu && k0 + kc == g->K;
        const float *res = g->res && k0 == 0 ? g->res + b * g->sc + m0 * g->ldc + n0 : NULL;
        if (mr == WMR)
          micro_w(WMR, a, bk, kc, c, g->ldc, nr, add, bias, res, relu);
        else
          micro_w((int)mr, a, bk, kc, c, g->ldc, nr, add, bias, res, relu);
      }
    }
  }
}

/* Tasks [lo, hi) when B is packed once (g->packed_b): task t is (image,
 * chunk of row blocks), over every panel.  Each block of A is read once
 * and used for all panels while in L1; with the panels outside (as in
 * wgemm_tasks), a late ResNet layer (512 x 4608 weight, 2 panels) streamed
 * its 9 MiB weight once per panel. */
static void wgemm_rows_tasks(void *ctx, int64_t lo, int64_t hi) {
  const wgemm_args *g = ctx;
  float ap[KC * WMR] __attribute__((aligned(64)));
  for (int64_t t = lo; t < hi; t++) {
    int64_t chunk = t % g->mchunks, b = t / g->mchunks;
    int64_t mb0 = g->mblocks * chunk / g->mchunks, mb1 = g->mblocks * (chunk + 1) / g->mchunks;
    float *cb = g->C + b * g->sc;
    const float *shared = g->packed_b + b * g->panels * g->K * WNR;
    for (int64_t k0 = 0; k0 < g->K; k0 += g->kstep) {
      int64_t kc = g->K - k0 < g->kstep ? g->K - k0 : g->kstep;
      int add = g->accumulate || k0 > 0, relu = g->relu && k0 + kc == g->K;
      for (int64_t mb = mb0; mb < mb1; mb++) {
        int64_t m0 = mb * WMR, mr = g->M - m0 < WMR ? g->M - m0 : WMR;
        const float *a = g->Ap + (mb * g->K + k0) * WMR;
        if (g->Ap == NULL) {
          for (int64_t k = 0; k < kc; k++)
            for (int64_t i = 0; i < WMR; i++)
              ap[k * WMR + i] = m0 + i < g->M ? g->A[(m0 + i) * g->lda + k0 + k] : 0.0f;
          a = ap;
        }
        const float *bias = g->bias && k0 == 0 ? g->bias + m0 : NULL;
        for (int64_t q = 0; q < g->panels; q++) {
          int64_t n0 = q * WNR, nr = g->N - n0 < WNR ? g->N - n0 : WNR;
          const float *bk = shared + (q * g->K + k0) * WNR;
          float *c = cb + m0 * g->ldc + n0;
          const float *res = g->res && k0 == 0 ? g->res + b * g->sc + m0 * g->ldc + n0 : NULL;
          if (mr == WMR)
            micro_w(WMR, a, bk, kc, c, g->ldc, nr, add, bias, res, relu);
          else
            micro_w((int)mr, a, bk, kc, c, g->ldc, nr, add, bias, res, relu);
        }
      }
    }
  }
}

static const float *packed_a_for(int64_t slot, const float *A, int64_t M, int64_t K, int64_t lda) {
  return slot_packed(slot, PACK_A, A, M, K, lda, (M + WMR - 1) / WMR * WMR * K, pack_a_blocks);
}

static void wgemm_run(wgemm_args *g, int64_t A, int64_t lda, int32_t threads, int64_t slot) {
  g->A = (const float *)A;
  g->lda = lda;
  g->Ap = packed_a_for(slot, g->A, g->M, g->K, lda);
  g->panels = (g->N + WNR - 1) / WNR;
  g->mblocks = (g->M + WMR - 1) / WMR;
  /* Enough tasks to balance the pool; extra row chunks repack B, so only as needed. */
  int64_t want = 4 * (int64_t)threads, have = g->batch * g->panels;
  g->mchunks = have >= want ? 1 : (want + have - 1) / have;
  if (g->mchunks > g->mblocks) g->mchunks = g->mblocks;
  int64_t kblocks = (g->K + KC - 1) / KC;
  g->kstep = (g->K + kblocks - 1) / kblocks;
  /* With several row chunks per panel, each chunk would gather (or copy) the
   * same panel of B again: for a late ResNet layer (2 panels, 4 chunks) the
   * gathers cost as much as the products.  Then B is packed once, every
   * (image, panel, K block) a task, into a buffer at most `want` panels big. */
  float *packed = NULL;
  if (g->mchunks > 1) packed = aligned_alloc(64, (size_t)(have * g->K * WNR * sizeof(float) + 63) / 64 * 64);
  if (packed != NULL) {
    g->packed_b = packed;
    kiln_parallel_for(pack_b_tasks, g, have * kblocks, have * kblocks < threads ? have * kblocks : threads);
    /* Then the row chunks span every panel: as many per image as balance the pool. */
    g->mchunks = (want + g->batch - 1) / g->batch;
    if (g->mchunks > g->mblocks) g->mchunks = g->mblocks;
    int64_t tasks = g->batch * g->mchunks;
    kiln_parallel_for(wgemm_rows_tasks, g, tasks, tasks < threads ? tasks : threads);
  } else {
    int64_t tasks = have * g->mchunks;
    kiln_parallel_for(wgemm_tasks, g, tasks, tasks < threads ? tasks : threads);
  }
  g->packed_b = NULL;
  free(packed);
}

/* C[b] = A B[b] (beta 0) or += (beta 1) for b < batch; A a constant with a
 * packing slot (or slot 0: A's blocks are packed per task); B[b] at
 * B + b * sb (row stride ldb), C[b] at C + b * sc (ldc); strides in elements. */
void kiln_sgemm_wa(int64_t batch, int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int64_t B,
                      int64_t ldb, int64_t sb, float beta, int64_t C, int64_t ldc, int64_t sc, int32_t threads,
                      int64_t slot) {
  wgemm_args g = {0};
  g.batch = batch, g.M = M, g.N = N, g.K = K;
  g.B = (const float *)B, g.ldb = ldb, g.sb = sb;
  g.C = (float *)C, g.ldc = ldc, g.sc = sc;
  g.accumulate = beta != 0.0f;
  wgemm_run(&g, A, lda, threads, slot);
}

/* Y[n, f, oh, ow] = bias[f] (0 if bias is 0) + R[n, f, oh, ow] (0 if res is
 * 0) + sum over (c, kh, kw) of
 * Wt[f, c, kh, kw] * X[n, c, oh * sh - pt + kh * dh, ow * sw - pl + kw * dw]
 * (beta 1: Y += all that), then max(., 0) when relu is 1, zero outside X: a
 * convolution of the contiguous X
 * [batch, C, H, W] (padded by pt rows on top, pl columns on the left, and as
 * far as OH, OW reach) by the weight Wt [F, C*KH*KW] into contiguous
 * Y [batch, F, OH, OW], the im2col gathered per panel; slot as for
 * kiln_sgemm_wa. */
void kiln_conv2d(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,
                 int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl,
                 int64_t X, int64_t Wt, int64_t bias, int64_t res, float beta, int32_t relu, int64_t Y,
                 int32_t threads, int64_t slot) {
  wgemm_args g = {0};
  g.batch = batch, g.M = F, g.N = OH * OW, g.K = C * KH * KW;
  g.B = (const float *)X, g.sb = C * H * W, g.im2col = 1;
  g.H = H, g.W = W, g.KH = KH, g.KW = KW, g.sh = sh, g.sw = sw, g.dh = dh, g.dw = dw, g.OW = OW;
  g.pt = pt, g.pl = pl;
  g.C = (float *)Y, g.ldc = g.N, g.sc = F * g.N;
  g.accumulate = beta != 0.0f;
  g.bias = (const float *)bias;
  g.res = (const float *)res; /* R is laid out as Y (a residual; it may be Y itself) */
  g.relu = relu != 0;
  wgemm_run(&g, Wt, g.K, threads, slot);
}
