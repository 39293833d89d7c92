/*
 * kiln's native runtime, dispatch side: OpenBLAS's sgemm in slabs on the
 * native pool, split and batched launches of generated kernels, and the
 * memory-bound ops kiln-cpu-library hands over whole (permuting copies,
 * max pooling); built with kiln_native.c into one library (see
 * kiln/runtime/native).
 */
#include <immintrin.h> /* _mm_sqrt_ss (sqrtf would need libm, for errno); the AVX-512 max pool */
#include <math.h>       /* INFINITY */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kiln_native.h"

/* ----------------------------------------------- OpenBLAS on the native pool
 *
 * A large product of activations stays with OpenBLAS's sgemm, but its
 * threads are not OpenBLAS's: they busy-wait for each other, and with one
 * core taken by anything else (the native pool's spinning workers, another
 * process) a 0.1 ms product took 12 ms.  kiln_sgemm_par cuts C into `parts`
 * slabs (of columns, or of rows when C is narrow) and runs one
 * single-threaded sgemm per slab on the native pool, where a part no worker
 * takes is run by the caller; each slab holds OpenBLAS at one thread
 * (kiln_blas_enter). */

typedef void (*cblas_sgemm_fn)(int32_t order, int32_t ta, int32_t tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                               int64_t ldc);
typedef int (*blas_threads_fn)(int);
static cblas_sgemm_fn blas_sgemm = NULL;
static blas_threads_fn blas_set_threads_local = NULL;

/* The BLAS sgemm (a CBLAS interface with 64-bit integers) kiln_sgemm_par
 * calls, and OpenBLAS's openblas_set_num_threads_local. */
void kiln_set_sgemm(int64_t fn, int64_t set_threads_local) {
  blas_sgemm = (cblas_sgemm_fn)fn;
  blas_set_threads_local = (blas_threads_fn)set_threads_local;
}

/* The thread count of a multi-threaded sgemm (KILN_BLAS_THREADS, else
 * OpenBLAS's own), handed over once by kiln-cpu-library and asked by the
 * generated code at run time, so a kernel compiled once serves any count
 * (0 before it is set: the pool's size). */
static atomic_int blas_threads_count = 0;

void kiln_set_blas_threads(int32_t threads) {
  atomic_store_explicit(&blas_threads_count, threads, memory_order_relaxed);
}

int32_t kiln_blas_threads(void) {
  int n = atomic_load_explicit(&blas_threads_count, memory_order_relaxed);
  return n > 0 ? n : kiln_pool_threads();
}

/* OpenBLAS's thread count around kiln's library calls.  Despite its name,
 * openblas_set_num_threads_local in numpy's (pthreads) OpenBLAS sets the
 * process-wide count and returns the previous one, so two threads that each
 * save it, set it and put it back race: the halves of a split launch, or two
 * slabs of kiln_sgemm_par, left it at one, and numpy in the same process
 * then ran its products on one thread (1024^3: 100 instead of 190 GFLOPS).
 * kiln_blas_enter sets the count for a call and kiln_blas_leave puts back
 * the count from before the first of the calls in flight, under one lock.
 * Without a registered setter both do nothing. */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int blas_depth, blas_saved;

int32_t kiln_blas_enter(int32_t threads) {
  if (!blas_set_threads_local) return 0;
  pthread_mutex_lock(&blas_lock);
  int prev = blas_set_threads_local(threads);
  if (blas_depth++ == 0) blas_saved = prev;
  pthread_mutex_unlock(&blas_lock);
  return prev;
}

void kiln_blas_leave(void) {
  if (!blas_set_threads_local) return;
  pthread_mutex_lock(&blas_lock);
  if (blas_depth > 0 && --blas_depth == 0) blas_set_threads_local(blas_saved);
  pthread_mutex_unlock(&blas_lock);
}

enum { CBLAS_TRANS = 112 };

typedef struct {
  int32_t ta, tb;
  int64_t M, N, K, lda, ldb, ldc, step;
  float alpha, beta;
  const float *A, *B;
  float *C;
  int by_rows;
} par_args;

static void par_slabs(void *ctx, int64_t lo, int64_t hi) {
  const par_args *g = ctx;
  kiln_blas_enter(1);
  for (int64_t s = lo; s < hi; s++) {
    int64_t total = g->by_rows ? g->M : g->N, a0 = s * g->step;
    int64_t len = total - a0 < g->step ? total - a0 : g->step;
    if (len <= 0) continue;
    if (g->by_rows) {
      const float *A = g->ta == CBLAS_TRANS ? g->A + a0 : g->A + a0 * g->lda;
      blas_sgemm(101, g->ta, g->tb, len, g->N, g->K, g->alpha, A, g->lda, g->B, g->ldb, g->beta,
                 g->C + a0 * g->ldc, g->ldc);
    } else {
      const float *B = g->tb == CBLAS_TRANS ? g->B + a0 * g->ldb : g->B + a0;
      blas_sgemm(101, g->ta, g->tb, g->M, len, g->K, g->alpha, g->A, g->lda, B, g->ldb, g->beta, g->C + a0,
                 g->ldc);
    }
  }
  kiln_blas_leave();
}

/* The gemv switch (KILN_GEMV, kiln.options' `gemv`): 0 sends those products back to OpenBLAS. */
static int gemv_on = -1;

/* A few rows of activations against weights stored [N, K] (a decode step's
 * projections, an LM head): C[m, n] = alpha * A[m, :] . B[n, :] + beta *
 * C[m, n] for m < M <= GEMV_ROWS, each weight row read once for every m, the
 * rows of B split over the pool.  1 x 768 against a 32000 x 768 head, called
 * directly on two parts: OpenBLAS's sgemm slabs 13.6 ms, this 3.4 ms (28.5
 * GB/s, about the probed streaming rate); one run, AVX-512 host. */
#define GEMV_ROWS KILN_GEMV_ROWS
#define GEMV_BLOCK 4 /* rows of B a task step holds: GEMV_ROWS x GEMV_BLOCK vector accumulators */

typedef struct {
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  const float *A, *B;
  float *C;
} gemv_args;

/* C[m, n] = alpha * sum + beta * C[m, n], C not read when beta is 0 (it may hold anything). */
static inline void gemv_store(const gemv_args *g, float *c, float sum) {
  *c = g->beta == 0.0f ? g->alpha * sum : g->alpha * sum + g->beta * *c;
}

/* Rows n[0 .. nr) of C for the M (a constant after inlining) rows of A:
 * the accumulators stay in registers. */
static inline __attribute__((always_inline)) void gemv_block(const gemv_args *g, const int M, const int64_t *n,
                                                              int nr) {
  const int64_t K = g->K, kv = K / KILN_VW * KILN_VW;
  kiln_vec acc[GEMV_ROWS][GEMV_BLOCK];
  for (int m = 0; m < M; m++)
    for (int r = 0; r < GEMV_BLOCK; r++) acc[m][r] = (kiln_vec){0};
  const float *b[GEMV_BLOCK];
  for (int r = 0; r < GEMV_BLOCK; r++) b[r] = g->B + n[r < nr ? r : 0] * g->ldb;
  for (int64_t k = 0; k < kv; k += KILN_VW) {
    kiln_vec w[GEMV_BLOCK];
    for (int r = 0; r < GEMV_BLOCK; r++) w[r] = kiln_loadu(b[r] + k);
    for (int m = 0; m < M; m++) {
      kiln_vec a = kiln_loadu(g->A + m * g->lda + k);
      for (int r = 0; r < GEMV_BLOCK; r++) acc[m][r] += a * w[r];
    }
  }
  for (int m = 0; m < M; m++)
    for (int r = 0; r < nr; r++) {
      float sum = kiln_hsum(acc[m][r]);
      for (int64_t k = kv; k < K; k++) sum += g->A[m * g->lda + k] * b[r][k];
      gemv_store(g, g->C + m * g->ldc + n[r], sum);
    }
}

static inline void gemv_rows(const gemv_args *g, const int64_t *n, int nr) {
  switch (g->M) {
  case 1: gemv_block(g, 1, n, nr); break;
  case 2: gemv_block(g, 2, n, nr); break;
  case 3: gemv_block(g, 3, n, nr); break;
  default: gemv_block(g, 4, n, nr); break;
  }
}

/* Blocks [lo, hi) of GEMV_BLOCK rows of B.  A block's rows are taken from
 * GEMV_BLOCK quarters of the range, not side by side: each row of the
 * block then walks its quarter, one long stream from memory, where side by
 * side each stream ended after one row (3 KB for K = 768) and the
 * prefetchers kept starting over: a decode step's M = 1 products (24 of
 * 768 x 2048 / 2048 x 768, weights from memory, two threads) ran 0.7x the
 * packed panels' speed that way. */
static void gemv_blocks(void *ctx, int64_t lo, int64_t hi) {
  const gemv_args *g = ctx;
  int64_t first = lo * GEMV_BLOCK, last = hi * GEMV_BLOCK < g->N ? hi * GEMV_BLOCK : g->N;
  int64_t q = (last - first) / GEMV_BLOCK, n[GEMV_BLOCK];
  for (int64_t s = 0; s < q; s++) {
    for (int r = 0; r < GEMV_BLOCK; r++) n[r] = first + r * q + s;
    gemv_rows(g, n, GEMV_BLOCK);
  }
  for (int64_t row = first + q * GEMV_BLOCK; row < last; row += GEMV_BLOCK) {
    int nr = last - row < GEMV_BLOCK ? (int)(last - row) : GEMV_BLOCK;
    for (int r = 0; r < GEMV_BLOCK; r++) n[r] = row + r;
    gemv_rows(g, n, nr);
  }
}

/* The same with weights stored [K, N] (a weight transposed once at compile
 * time): C[m, c0 ..) = alpha * sum_k A[m, k] * B[k, c0 ..) + beta * C, one
 * block of GEMV_COLS columns (whole vectors) per task step, B's rows read
 * GEMV_COLS floats at a time; columns past the last whole block one by one.
 * 1 x 768 against a [768, 32000] head on two parts: OpenBLAS's sgemm slabs
 * 15.1 ms, this 3.7 ms (same run as above). */
#define GEMV_VECS 4
#define GEMV_COLS (GEMV_VECS * KILN_VW)

static inline __attribute__((always_inline)) void gemv_cols_block(const gemv_args *g, const int M, int64_t c0) {
  kiln_vec acc[GEMV_ROWS][GEMV_VECS];
  for (int m = 0; m < M; m++)
    for (int u = 0; u < GEMV_VECS; u++) acc[m][u] = (kiln_vec){0};
  for (int64_t k = 0; k < g->K; k++) {
    const float *b = g->B + k * g->ldb + c0;
    kiln_vec w[GEMV_VECS];
    for (int u = 0; u < GEMV_VECS; u++) w[u] = kiln_loadu(b + u * KILN_VW);
    for (int m = 0; m < M; m++) {
      kiln_vec a = kiln_splat(g->A[m * g->lda + k]);
      for (int u = 0; u < GEMV_VECS; u++) acc[m][u] += a * w[u];
    }
  }
  for (int m = 0; m < M; m++)
    for (int u = 0; u < GEMV_VECS; u++) {
      float *c = g->C + m * g->ldc + c0 + u * KILN_VW;
      kiln_vec r = acc[m][u] * kiln_splat(g->alpha);
      if (g->beta != 0.0f) r += kiln_loadu(c) * kiln_splat(g->beta); /* beta 0: C is not read */
      __builtin_memcpy(c, &r, sizeof r);
    }
}

static void gemv_cols(void *ctx, int64_t lo, int64_t hi) {
  const gemv_args *g = ctx;
  const int64_t whole = g->N / GEMV_COLS;
  for (int64_t blk = lo; blk < hi; blk++) {
    if (blk < whole) {
      switch (g->M) {
      case 1: gemv_cols_block(g, 1, blk * GEMV_COLS); break;
      case 2: gemv_cols_block(g, 2, blk * GEMV_COLS); break;
      case 3: gemv_cols_block(g, 3, blk * GEMV_COLS); break;
      default: gemv_cols_block(g, 4, blk * GEMV_COLS); break;
      }
      continue;
    }
    for (int64_t n = whole * GEMV_COLS; n < g->N; n++) /* the last task step: the ragged columns */
      for (int64_t m = 0; m < g->M; m++) {
        float sum = 0.0f;
        for (int64_t k = 0; k < g->K; k++) sum += g->A[m * g->lda + k] * g->B[k * g->ldb + n];
        gemv_store(g, g->C + m * g->ldc + n, sum);
      }
  }
}

/* cblas_sgemm (row-major: order 101) on up to `parts` threads of the pool. */
void kiln_sgemm_par(int32_t order, int32_t ta, int32_t tb, int64_t M, int64_t N, int64_t K, float alpha, int64_t A,
                    int64_t lda, int64_t B, int64_t ldb, float beta, int64_t C, int64_t ldc, int32_t parts) {
  (void)order; /* kiln-cpu-library only emits row-major products */
  if (parts > kiln_pool_threads()) parts = kiln_pool_threads();
  if (M <= GEMV_ROWS && ta != CBLAS_TRANS && kiln_switch_on("KILN_GEMV", &gemv_on)) {
    gemv_args v = {M, N, K, lda, ldb, ldc, alpha, beta, (const float *)A, (const float *)B, (float *)C};
    if (tb == CBLAS_TRANS && K >= KILN_VW) {
      int64_t blocks = (N + GEMV_BLOCK - 1) / GEMV_BLOCK;
      kiln_parallel_for(gemv_blocks, &v, blocks, parts > 1 ? kiln_parts(blocks, parts) : 1);
      return;
    }
    if (tb != CBLAS_TRANS && N >= GEMV_COLS) {
      int64_t blocks = N / GEMV_COLS + (N % GEMV_COLS != 0);
      kiln_parallel_for(gemv_cols, &v, blocks, parts > 1 ? kiln_parts(blocks, parts) : 1);
      return;
    }
  }
  par_args g = {ta, tb, M, N, K, lda, ldb, ldc, 0, alpha, beta, (const float *)A, (const float *)B, (float *)C, 0};
  /* Slabs of whole 16-column (or 8-row) blocks, so no part gets a ragged sliver. */
  g.by_rows = N < 32 * parts && M > N;
  int64_t total = g.by_rows ? M : N, unit = g.by_rows ? 8 : 16;
  int64_t units = (total + unit - 1) / unit;
  if (parts > units) parts = (int32_t)units;
  g.step = (units + parts - 1) / parts * unit;
  if (parts <= 1) {
    blas_sgemm(101, ta, tb, M, N, K, alpha, g.A, lda, g.B, ldb, beta, g.C, ldc);
    return;
  }
  int64_t slabs = (total + g.step - 1) / g.step;
  kiln_parallel_for(par_slabs, &g, slabs, slabs);
}

/* ------------------------------------------------------- split launches
 *
 * A generated kernel whose rows are independent along its leading dim
 * (kiln/runtime/split.py) is launched as two calls of its packed C
 * interface, on the two halves of its row-split arguments: the second on a
 * worker of the pool.  Library calls inside a half find the pool busy and
 * run on that half's thread. */

typedef void (*packed_fn)(void *);

typedef struct {
  packed_fn fn;
  void *args[2];
  atomic_int taken[2];
} split_args;

/* The half of a two-part job this thread runs: the first on the caller
 * (pool slot 0), the second on a worker, or whichever is left when the other
 * thread took that one (the pool busy: the caller runs both).  The same
 * half of consecutive split kernels (and of the permuting copy below) then
 * stays on one core with the rows it wrote. */
static int pick_half(atomic_int taken[2]) {
  int mine = kiln_worker_slot() == 0 ? 0 : 1;
  if (atomic_exchange(&taken[mine], 1) == 0) return mine;
  atomic_exchange(&taken[1 - mine], 1);
  return 1 - mine;
}

static void split_halves(void *ctx, int64_t lo, int64_t hi) {
  split_args *g = ctx;
  for (int64_t i = lo; i < hi; i++) g->fn(g->args[pick_half(g->taken)]);
}

/* fn(first) and fn(second), on two threads when the pool has one free. */
void kiln_run_split(int64_t fn, int64_t first, int64_t second) {
  split_args g = {(packed_fn)fn, {(void *)first, (void *)second}, {0, 0}};
  kiln_parallel_for(split_halves, &g, 2, 2);
}

/* fn[i](args[i]) for i < n in order, pairs = {fn 0, args 0, fn 1, ...}: the
 * generated kernels of a call between two steps that need Python (a
 * fallback kernel, a split launch) in one crossing from ctypes instead of
 * one each (~0.5 us a crossing). */
void kiln_run_seq(int64_t n, int64_t pairs) {
  const int64_t *p = (const int64_t *)pairs;
  for (int64_t i = 0; i < n; i++) ((packed_fn)p[2 * i])((void *)p[2 * i + 1]);
}

/* A run of consecutive split launches: two sequences of packed calls,
 * pairs_a the first halves, pairs_b the second (each as kiln_run_seq's),
 * one on each thread.  A half's kernels read the rows its earlier kernels
 * wrote, so each core keeps its rows in its own caches from one kernel to
 * the next, and the run is one handoff to the pool instead of one a kernel. */
typedef struct {
  int64_t n, pairs[2];
  atomic_int taken[2];
} split_seq_args;

static void split_seq_halves(void *ctx, int64_t lo, int64_t hi) {
  split_seq_args *g = ctx;
  for (int64_t i = lo; i < hi; i++) kiln_run_seq(g->n, g->pairs[pick_half(g->taken)]);
}

void kiln_run_split_seq(int64_t n, int64_t pairs_a, int64_t pairs_b) {
  split_seq_args g = {n, {pairs_a, pairs_b}, {0, 0}};
  kiln_parallel_for(split_seq_halves, &g, 2, 2);
}

/* Parts for a pass over `items` (planes, rows) of `bytes`: the caller alone
 * below `from` bytes (a handoff to the pool costs more), else up to
 * `threads`, never more than the items (and at least 1). */
static int64_t parts_from(int64_t bytes, int64_t from, int64_t items, int32_t threads) {
  int64_t parts = bytes >= from ? threads : 1;
  parts = parts < items ? parts : items;
  return parts < 1 ? 1 : parts;
}

/* A memory-bound pass: from 128 KiB. */
static int64_t memory_parts(int64_t bytes, int64_t items, int32_t threads) {
  return parts_from(bytes, 128 << 10, items, threads);
}

/* ------------------------------------------------------- permuting copies */

#define PERMUTE_MAX_RANK 8

typedef struct {
  int64_t rank, elem;
  const int64_t *size, *stride; /* the output's sizes; per output dim, the input's element stride */
  const char *in;
  char *out;
  int64_t split_dim;
  atomic_int taken[2];
} permute_args;

/* Output rows [lo, hi) (every dim but the last), each one run of the
 * innermost dim copied from where the input holds it.  The row's index
 * advances like an odometer: divisions only for the first row. */
static void permute_rows(void *ctx, int64_t lo, int64_t hi) {
  const permute_args *p = ctx;
  int64_t n = p->rank - 1, run = p->size[n] * p->elem, idx[PERMUTE_MAX_RANK], off = 0;
  for (int64_t i = n - 1, rem = lo; i >= 0; i--) {
    idx[i] = rem % p->size[i];
    rem /= p->size[i];
    off += idx[i] * p->stride[i];
  }
  for (int64_t r = lo; r < hi; r++) {
    if (p->elem == 4) { /* a loop gcc vectorizes: memcpy calls on runs of 64 floats took 1.1-1.2x as long */
      const int32_t *src = (const int32_t *)(p->in + off * 4);
      int32_t *dst = (int32_t *)(p->out + r * run);
      for (int64_t j = 0; j < p->size[n]; j++) dst[j] = src[j];
    } else {
      memcpy(p->out + r * run, p->in + off * p->elem, (size_t)run);
    }
    for (int64_t i = n - 1; i >= 0; i--) {
      off += p->stride[i];
      if (++idx[i] < p->size[i]) break;
      off -= idx[i] * p->stride[i];
      idx[i] = 0;
    }
  }
}

/* The two halves of output dim split_dim (the input's outermost dim), each
 * for every index of the dims before it: a half reads the rows that the same
 * half of a split kernel before it wrote, on the same core (pick_half).  The
 * transformer block's q/k/v transpose ([B, L, 3, H, D] -> [3, B, H, L, D]
 * after the split q/k/v product; alone, warm, 25 us, in the model 71): the
 * block at (4, 128) 0.958-0.977x (worker pairs, 16 and 20 of 20 rounds), with
 * pick_half's fixed halves too 0.965x (20 of 20) and (8, 512) 0.978x. */
static void permute_halves(void *ctx, int64_t lo, int64_t hi) {
  permute_args *p = ctx;
  for (int64_t i = lo; i < hi; i++) {
    int h = pick_half(p->taken);
    int64_t j = p->split_dim, outer = 1, inner = 1;
    for (int64_t d = 0; d < j; d++) outer *= p->size[d];
    for (int64_t d = j + 1; d < p->rank - 1; d++) inner *= p->size[d];
    int64_t s = p->size[j], c0 = h ? s / 2 : 0, c1 = h ? s : s / 2;
    for (int64_t o = 0; o < outer; o++) permute_rows(p, (o * s + c0) * inner, (o * s + c1) * inner);
  }
}

/* out (contiguous, sizes meta[0 .. rank)) = in read with element strides
 * meta[rank .. 2 rank) along the output's dims, the last of them 1: a
 * transpose that keeps the innermost dim, as runs of it, its rows split
 * over up to `threads` threads of the pool (kiln-cpu-library's rewrite of
 * permuting copies, backends/cpu/permute.py). */
void kiln_permute(int64_t rank, int64_t meta, int64_t in, int64_t out, int64_t elem, int32_t threads) {
  const int64_t *m = (const int64_t *)meta;
  if (rank < 1 || rank > PERMUTE_MAX_RANK) return;
  int64_t rows = 1;
  for (int64_t i = 0; i < rank - 1; i++) rows *= m[i];
  if (rows == 0 || m[rank - 1] == 0) return;
  permute_args p = {rank, elem, m, m + rank, (const char *)in, (char *)out};
  int64_t parts = memory_parts(rows * m[rank - 1] * elem, rows, threads);
  /* The output dim j the input's outermost dim became (the largest stride):
   * on two threads, past the output's first dim, in halves (permute_halves). */
  int64_t j = 0;
  for (int64_t i = 1; i < rank - 1; i++)
    if (m[rank + i] > m[rank + j]) j = i;
  if (parts == 2 && j > 0 && m[j] >= 2) {
    p.split_dim = j;
    p.taken[0] = p.taken[1] = 0;
    kiln_parallel_for(permute_halves, &p, 2, 2);
    return;
  }
  kiln_parallel_for(permute_rows, &p, rows, parts);
}

/* ------------------------------------------------------------ max pooling */

#define MAXPOOL_KW 16
typedef struct {
  int64_t H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl;
  const float *x;
  float *y;
} maxpool_args;

/* max(m, v) that keeps a NaN of either (as torch's max pooling does). */
static inline float nan_max(float m, float v) { return v > m || v != v ? v : m; }

/* The outputs [*o0, *o1) whose tap column kw lies inside the input. */
static void maxpool_cols(const maxpool_args *p, int64_t kw, int64_t *o0, int64_t *o1) {
  int64_t c = kw * p->dw - p->pl;
  *o0 = c >= 0 ? 0 : (-c + p->sw - 1) / p->sw;
  *o1 = p->W - c > 0 ? (p->W - c + p->sw - 1) / p->sw : 0;
  if (*o1 > p->OW) *o1 = p->OW;
}

/* Each tap column over the output row yr from the input-wide row `row`:
 * yr[ow] = max(yr[ow], row[ow * sw + kw * dw - pl]) where that is inside;
 * lo / hi: maxpool_cols of the first MAXPOOL_KW columns. */
static inline __attribute__((always_inline)) void maxpool_fold_cols(const maxpool_args *p, float *restrict yr,
                                                                   const float *restrict row, const int64_t *lo,
                                                                   const int64_t *hi) {
  for (int64_t kw = 0; kw < p->KW; kw++) {
    int64_t o0, o1;
    if (kw < MAXPOOL_KW)
      o0 = lo[kw], o1 = hi[kw];
    else
      maxpool_cols(p, kw, &o0, &o1);
    const float *tr = row + kw * p->dw - p->pl; /* output ow reads tr[ow * sw] */
    if (p->sw == 2) /* a constant stride the compiler can vectorize */
      for (int64_t ow = o0; ow < o1; ow++) yr[ow] = nan_max(yr[ow], tr[2 * ow]);
    else
      for (int64_t ow = o0; ow < o1; ow++) yr[ow] = nan_max(yr[ow], tr[ow * p->sw]);
  }
}

/* Input rows wider than this are folded tap row by tap row (no row buffer on the stack). */
#define MAXPOOL_ROW 4096
/* -inf floats on each side of a stride-2 row's phases (maxpool_phases): tap
 * offsets up to this many columns past either end read them. */
#define MAXPOOL_MARGIN 16

/* Whether maxpool_phases takes p: stride 2, undilated, taps within the margin. */
static int maxpool_phased(const maxpool_args *p) {
  return p->sw == 2 && p->dw == 1 && p->W <= MAXPOOL_ROW && p->pl < 2 * MAXPOOL_MARGIN &&
         p->KW - p->pl <= 2 * MAXPOOL_MARGIN && p->KW <= MAXPOOL_KW;
}

/* Stride 2: the folded row t (W floats) split into its even and odd
 * columns, ev[j] = t[2j] and od[j] = t[2j + 1] (each from ev / od's index
 * MAXPOOL_MARGIN, -inf past the row), then tap column kw over every output
 * at once: yr[ow] = max(yr[ow], phase[(kw - pl) & 1][ow + ((kw - pl) >> 1)]),
 * contiguous, where the taps had read t at stride 2 in each of KW passes
 * (ResNet-50's 3x3 stride-2 pool, 64 x 112 x 112). */
static void maxpool_phases(const maxpool_args *p, float *restrict yr, const float *restrict t, float *ev, float *od) {
  int64_t half = p->W / 2;
  for (int64_t j = 0; j < half; j++) {
    ev[MAXPOOL_MARGIN + j] = t[2 * j];
    od[MAXPOOL_MARGIN + j] = t[2 * j + 1];
  }
  if (p->W & 1) ev[MAXPOOL_MARGIN + half] = t[p->W - 1];
  const float *src[MAXPOOL_KW];
  for (int64_t kw = 0; kw < p->KW; kw++) {
    int64_t c = kw - p->pl;
    src[kw] = (c & 1 ? od : ev) + MAXPOOL_MARGIN + (c >> 1);
  }
  if (p->KW == 3) { /* the common window: one pass, the output in registers */
    const float *a = src[0], *b = src[1], *c = src[2];
    for (int64_t ow = 0; ow < p->OW; ow++) yr[ow] = nan_max(nan_max(nan_max(yr[ow], a[ow]), b[ow]), c[ow]);
    return;
  }
  for (int64_t kw = 0; kw < p->KW; kw++)
    for (int64_t ow = 0; ow < p->OW; ow++) yr[ow] = nan_max(yr[ow], src[kw][ow]);
}

#if KILN_VW == 16
/* max(a, b), a NaN of either kept: vmaxps returns b when either is one.
 * (vrangeps's max returns the other operand for a quiet NaN on a Zen 5.) */
static inline __m512 mp_max(__m512 a, __m512 b) {
  return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}

/* Columns [c, c + 16) of the rows' vertical max, -inf outside [0, W). */
static inline __m512 mp_column_max(const float *const *rows, int nrows, int64_t c, int64_t W) {
  if (c >= 0 && c + 16 <= W) {
    __m512 v = _mm512_loadu_ps(rows[0] + c);
    for (int r = 1; r < nrows; r++) v = mp_max(v, _mm512_loadu_ps(rows[r] + c));
    return v;
  }
  __mmask16 in = 0xffff;
  if (c < 0) in &= (__mmask16)(0xffffu << (-c < 16 ? -c : 16));
  if (c + 16 > W) in &= (__mmask16)(W - c > 0 ? (1u << (W - c)) - 1 : 0);
  const __m512 none = _mm512_set1_ps(-INFINITY);
  __m512 v = _mm512_mask_loadu_ps(none, in, rows[0] + c);
  for (int r = 1; r < nrows; r++) v = mp_max(v, _mm512_mask_loadu_ps(none, in, rows[r] + c));
  return v;
}

/* A 3 x 3 window at stride 2, undilated, padding at most 1 (ResNet-50's
 * pool after its stem): per output row, the tap rows inside the input are
 * maxed 32 columns at a time in registers, split into even and odd columns
 * (output ow reads even[ow], odd[ow] and even[ow + 1]) and stored, 16
 * outputs a step; the columns outside the image are -inf.  The general
 * path below made five passes through buffers a row: 64 x 112 x 112, one
 * thread, 129 -> 21 us (C harness). */
static int mp_k3s2(const maxpool_args *p) {
  return p->KH == 3 && p->KW == 3 && p->sh == 2 && p->sw == 2 && p->dh == 1 && p->dw == 1 && p->pt >= 0 &&
         p->pt <= 1 && p->pl >= 0 && p->pl <= 1;
}

static void mp_k3s2_plane(const maxpool_args *p, const float *x, float *y) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t oh = 0; oh < p->OH; oh++) {
    const float *rows[3];
    int nrows = 0;
    for (int64_t ih = oh * 2 - p->pt; ih < oh * 2 - p->pt + 3; ih++)
      if (ih >= 0 && ih < p->H) rows[nrows++] = x + ih * p->W;
    float *yr = y + oh * p->OW;
    if (nrows == 0) {
      for (int64_t ow = 0; ow < p->OW; ow++) yr[ow] = -INFINITY;
      continue;
    }
    /* Output ow's columns start at 2 ow - pl: outputs [j, j + 16) read
     * columns [c, c + 33), c = 2 j - pl. */
    int64_t c = -p->pl;
    __m512 lo = mp_column_max(rows, nrows, c, p->W);
    for (int64_t j = 0; j < p->OW; j += 16, c += 32) {
      __m512 hi, next;
      if (nrows == 3 && c + 16 >= 0 && c + 48 <= p->W) { /* inside: three plain loads a column block */
        const float *r0 = rows[0] + c, *r1 = rows[1] + c, *r2 = rows[2] + c;
        hi = mp_max(mp_max(_mm512_loadu_ps(r0 + 16), _mm512_loadu_ps(r1 + 16)), _mm512_loadu_ps(r2 + 16));
        next = mp_max(mp_max(_mm512_loadu_ps(r0 + 32), _mm512_loadu_ps(r1 + 32)), _mm512_loadu_ps(r2 + 32));
      } else {
        hi = mp_column_max(rows, nrows, c + 16, p->W);
        next = mp_column_max(rows, nrows, c + 32, p->W);
      }
      __m512 ev = _mm512_permutex2var_ps(lo, even, hi), od = _mm512_permutex2var_ps(lo, odd, hi);
      /* even[ow + 1]: ev shifted down a lane, next's first column last. */
      __m512 ev1 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(next), _mm512_castps_si512(ev), 1));
      __m512 out = mp_max(mp_max(ev, od), ev1);
      int64_t n = p->OW - j;
      _mm512_mask_storeu_ps(yr + j, n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1), out);
      lo = next;
    }
  }
}
#endif

/* Planes [lo, hi): per output row, the tap rows inside the input folded
 * into one row t (contiguous, vectorized), then each tap column over the
 * outputs that column reaches inside the input (no padded copy: a tap
 * outside is skipped, as a -inf padding would be).  Rows first: the
 * strided column passes are KW per output row instead of KH x KW, and
 * their bounds are computed once per part (ResNet-50's 3x3 stride-2 pool,
 * 64 x 112 x 112, two threads: 0.66-0.75x with the machine loaded, 0.47-
 * 0.56 -> 0.18-0.29 ms in a quiet spell; C harness, alternating, both
 * orders; bounds hoisted alone gave 0.90-0.93x). */
static void maxpool_planes(void *ctx, int64_t lo, int64_t hi) {
  const maxpool_args *p = ctx;
  float t[MAXPOOL_ROW];
  int rows_first = p->W <= MAXPOOL_ROW, phased = maxpool_phased(p);
  int64_t o0[MAXPOOL_KW], o1[MAXPOOL_KW];
  for (int64_t kw = 0; kw < p->KW && kw < MAXPOOL_KW; kw++) maxpool_cols(p, kw, &o0[kw], &o1[kw]);
  /* The phases' margins and everything past the row stay -inf (rows only write [0, W)). */
  float ev[MAXPOOL_ROW / 2 + 4 * MAXPOOL_MARGIN], od[MAXPOOL_ROW / 2 + 4 * MAXPOOL_MARGIN];
  if (phased)
    for (int64_t j = 0; j < p->W / 2 + 4 * MAXPOOL_MARGIN && j < MAXPOOL_ROW / 2 + 4 * MAXPOOL_MARGIN; j++)
      ev[j] = od[j] = -INFINITY;
  for (int64_t plane = lo; plane < hi; plane++) {
    const float *x = p->x + plane * p->H * p->W;
    float *y = p->y + plane * p->OH * p->OW;
#if KILN_VW == 16
    if (mp_k3s2(p)) {
      mp_k3s2_plane(p, x, y);
      continue;
    }
#endif
    for (int64_t oh = 0; oh < p->OH; oh++) {
      float *yr = y + oh * p->OW;
      for (int64_t ow = 0; ow < p->OW; ow++) yr[ow] = -INFINITY;
      int rows = 0, folded = 0;
      int64_t ih0 = oh * p->sh - p->pt;
      if (rows_first && p->KH == 3 && ih0 >= 0 && ih0 + 2 * p->dh < p->H) {
        /* Three rows inside: folded in one pass (no libc copy of the first). */
        const float *r0 = x + ih0 * p->W, *r1 = r0 + p->dh * p->W, *r2 = r1 + p->dh * p->W;
        for (int64_t w = 0; w < p->W; w++) t[w] = nan_max(nan_max(r0[w], r1[w]), r2[w]);
        rows = folded = 3;
      }
      for (int64_t kh = 0; kh < p->KH && !folded; kh++) {
        int64_t ih = oh * p->sh - p->pt + kh * p->dh;
        if (ih < 0 || ih >= p->H) continue;
        const float *xr = x + ih * p->W;
        if (!rows_first)
          maxpool_fold_cols(p, yr, xr, o0, o1);
        else if (rows++ == 0)
          memcpy(t, xr, p->W * sizeof(float));
        else
          for (int64_t w = 0; w < p->W; w++) t[w] = nan_max(t[w], xr[w]);
      }
      if (rows > 0 && phased)
        maxpool_phases(p, yr, t, ev, od);
      else if (rows > 0)
        maxpool_fold_cols(p, yr, t, o0, o1);
    }
  }
}

/* y[plane, oh, ow] = max over the taps (kh, kw) inside x of x[plane, oh *
 * sh - pt + kh * dh, ow * sw - pl + kw * dw], -inf where none is (a max
 * pool with -inf padding): x [planes, H, W] and y [planes, OH, OW]
 * contiguous f32, planes split over up to `threads` threads of the pool
 * (kiln-cpu-library's rewrite of max pools, backends/cpu/pool.py). */
void kiln_maxpool2d(int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH, int64_t KW, int64_t sh,
                    int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, int64_t x, int64_t y,
                    int32_t threads) {
  maxpool_args p = {H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, (const float *)x, (float *)y};
  int64_t bytes = planes * OH * OW * (int64_t)sizeof(float);
  kiln_parallel_for(maxpool_planes, &p, planes, memory_parts(bytes, planes, threads));
}

/* ---------------------------------------------- a matrix product's epilogue */

typedef struct {
  int64_t N, ldc;
  float *C;
  const float *bias;
  int32_t act;
  const float *R; /* a residual added last, rows ldr apart, or NULL */
  int64_t ldr;
} bias_act_args;

/* Rows [lo, hi) of C: C[i, :] (+ bias), the activation, (+ R[i, :]), in
 * one sweep of each row (the tests of what is present are loop-invariant:
 * gcc unswitches them). */
static void bias_act_rows(void *ctx, int64_t lo, int64_t hi) {
  const bias_act_args *g = ctx;
  const int64_t N = g->N;
  const float *b = g->bias;
  for (int64_t i = lo; i < hi; i++) {
    float *c = g->C + i * g->ldc;
    const float *r = g->R ? g->R + i * g->ldr : NULL;
    int64_t j = 0;
    for (; j + KILN_VW <= N; j += KILN_VW) {
      kiln_vec v = kiln_epilogue_vec(kiln_loadu(c + j), b ? b + j : NULL, g->act, r ? r + j : NULL);
      __builtin_memcpy(c + j, &v, sizeof v);
    }
    for (; j < N; j++) c[j] = kiln_epilogue_float(c[j], b ? b + j : NULL, g->act, r ? r + j : NULL);
  }
}

/* C[i, :] = act(C[i, :] + bias) + R[i, :] for i < M (bias, R 0: no add; act
 * one of KILN_ACT_*): the bias add, ReLU / exact GELU and residual add after
 * a matrix product, which had been passes over C of their own on the
 * calling thread alone (the bench MLP at B=64: about 0.1 ms of GELU after a
 * 2.5 ms product), here one pass, rows over up to `threads` threads of the
 * pool (the native small GEMM applies them in its registers instead:
 * kiln_sgemm_small_epi).  C f32 with rows ldc apart, bias f32 [N], R f32
 * with rows ldr apart. */
void kiln_bias_act(int64_t M, int64_t N, int64_t C, int64_t ldc, int64_t bias, int32_t act, int64_t R, int64_t ldr,
                   int32_t threads) {
  bias_act_args g = {N, ldc, (float *)C, (const float *)bias, act, (const float *)R, ldr};
  int64_t bytes = M * N * (int64_t)sizeof(float);
  /* GELU is a few dozen operations an element: worth a handoff from 32 KiB. */
  int64_t parts = parts_from(bytes, act == KILN_ACT_GELU ? 32 << 10 : 128 << 10, M, threads);
  kiln_parallel_for(bias_act_rows, &g, M, parts);
}

/* ------------------------------------------------------------- layer norm */

typedef struct {
  int64_t N;
  const float *x, *w, *b;
  float *y;
  float eps;
} layer_norm_args;


/* The rows of a block take each pass together: a row's sums are a chain of
 * adds and a reduction, and the next rows' are independent of it (512 x
 * 256 on one thread: one row at a time, all three passes, 22 us; blocks of
 * 8 rows 20 us; each row kept in registers for its passes, 26 us). */
#define LN_BLOCK 8

/* Rows [lo, hi): the mean, the variance about it (a second pass, as the
 * generated chain computes it: no E[x^2] - mean^2 cancellation), then
 * y = (x - mean) * inv (* w) (+ b), each pass vectors then a scalar tail. */
static void layer_norm_rows(void *ctx, int64_t lo, int64_t hi) {
  const layer_norm_args *g = ctx;
  const int64_t N = g->N;
  const float *w = g->w, *b = g->b;
  float mean[LN_BLOCK], inv[LN_BLOCK];
  for (int64_t i0 = lo; i0 < hi; i0 += LN_BLOCK) {
    const int64_t nr = hi - i0 < LN_BLOCK ? hi - i0 : LN_BLOCK;
    for (int64_t r = 0; r < nr; r++) {
      const float *x = g->x + (i0 + r) * N;
      kiln_vec s0 = {0}, s1 = {0};
      int64_t j = 0;
      for (; j + 2 * KILN_VW <= N; j += 2 * KILN_VW) s0 += kiln_loadu(x + j), s1 += kiln_loadu(x + j + KILN_VW);
      for (; j + KILN_VW <= N; j += KILN_VW) s0 += kiln_loadu(x + j);
      float sum = kiln_hsum(s0 + s1);
      for (; j < N; j++) sum += x[j];
      mean[r] = sum / (float)N;
    }
    for (int64_t r = 0; r < nr; r++) {
      const float *x = g->x + (i0 + r) * N;
      const kiln_vec m = kiln_splat(mean[r]);
      kiln_vec q0 = {0}, q1 = {0};
      int64_t j = 0;
      for (; j + 2 * KILN_VW <= N; j += 2 * KILN_VW) {
        kiln_vec d0 = kiln_loadu(x + j) - m, d1 = kiln_loadu(x + j + KILN_VW) - m;
        q0 += d0 * d0, q1 += d1 * d1;
      }
      for (; j + KILN_VW <= N; j += KILN_VW) {
        kiln_vec d = kiln_loadu(x + j) - m;
        q0 += d * d;
      }
      float sq = kiln_hsum(q0 + q1);
      for (; j < N; j++) sq += (x[j] - mean[r]) * (x[j] - mean[r]);
      inv[r] = 1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(sq / (float)N + g->eps)));
    }
    for (int64_t r = 0; r < nr; r++) {
      const float *x = g->x + (i0 + r) * N;
      float *y = g->y + (i0 + r) * N;
      const kiln_vec m = kiln_splat(mean[r]), iv = kiln_splat(inv[r]);
      int64_t j = 0;
      for (; j + KILN_VW <= N; j += KILN_VW) {
        kiln_vec v = (kiln_loadu(x + j) - m) * iv;
        if (w) v *= kiln_loadu(w + j);
        if (b) v += kiln_loadu(b + j);
        __builtin_memcpy(y + j, &v, sizeof v);
      }
      for (; j < N; j++) {
        float v = (x[j] - mean[r]) * inv[r];
        if (w) v *= w[j];
        if (b) v += b[j];
        y[j] = v;
      }
    }
  }
}

/* y[i, :] = layer_norm(x[i, :]) for i < rows, over N contiguous elements a
 * row, with weight w and bias b ([N], 0: none) and epsilon eps; x and y f32,
 * contiguous (y may be x).  The generated chain had run on the calling
 * thread alone, four passes with two buffers between them; here rows go
 * over up to `threads` threads of the pool from LAYER_NORM_SPLIT_BYTES. */
#define LAYER_NORM_SPLIT_BYTES (16 << 10)
void kiln_layer_norm(int64_t rows, int64_t N, int64_t x, int64_t w, int64_t b, float eps, int64_t y,
                     int32_t threads) {
  layer_norm_args g = {N, (const float *)x, (const float *)w, (const float *)b, (float *)y, eps};
  int64_t parts = parts_from(rows * N * (int64_t)sizeof(float), LAYER_NORM_SPLIT_BYTES, rows, threads);
  kiln_parallel_for(layer_norm_rows, &g, rows, parts);
}

/* Rows [lo, hi) of an RMS norm: the mean of squares (one pass), then
 * y = x * inv (* w), inv = 1 / sqrt(mean + eps) (b unused). */
static void rms_norm_rows(void *ctx, int64_t lo, int64_t hi) {
  const layer_norm_args *g = ctx;
  const int64_t N = g->N;
  const float *w = g->w;
  float inv[LN_BLOCK];
  for (int64_t i0 = lo; i0 < hi; i0 += LN_BLOCK) {
    const int64_t nr = hi - i0 < LN_BLOCK ? hi - i0 : LN_BLOCK;
    for (int64_t r = 0; r < nr; r++) {
      const float *x = g->x + (i0 + r) * N;
      kiln_vec q0 = {0}, q1 = {0};
      int64_t j = 0;
      for (; j + 2 * KILN_VW <= N; j += 2 * KILN_VW) {
        kiln_vec a = kiln_loadu(x + j), c = kiln_loadu(x + j + KILN_VW);
        q0 += a * a, q1 += c * c;
      }
      for (; j + KILN_VW <= N; j += KILN_VW) {
        kiln_vec a = kiln_loadu(x + j);
        q0 += a * a;
      }
      float sq = kiln_hsum(q0 + q1);
      for (; j < N; j++) sq += x[j] * x[j];
      inv[r] = 1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(sq / (float)N + g->eps)));
    }
    for (int64_t r = 0; r < nr; r++) {
      const float *x = g->x + (i0 + r) * N;
      float *y = g->y + (i0 + r) * N;
      const kiln_vec iv = kiln_splat(inv[r]);
      int64_t j = 0;
      for (; j + KILN_VW <= N; j += KILN_VW) {
        kiln_vec v = kiln_loadu(x + j) * iv;
        if (w) v *= kiln_loadu(w + j);
        __builtin_memcpy(y + j, &v, sizeof v);
      }
      for (; j < N; j++) {
        float v = x[j] * inv[r];
        y[j] = w ? v * w[j] : v;
      }
    }
  }
}

/* y[i, :] = rms_norm(x[i, :]) for i < rows, over N contiguous elements a
 * row, with weight w ([N], 0: none) and epsilon eps; x and y f32,
 * contiguous (y may be x); rows over the pool as kiln_layer_norm's. */
void kiln_rms_norm(int64_t rows, int64_t N, int64_t x, int64_t w, float eps, int64_t y, int32_t threads) {
  layer_norm_args g = {N, (const float *)x, (const float *)w, 0, (float *)y, eps};
  int64_t parts = parts_from(rows * N * (int64_t)sizeof(float), LAYER_NORM_SPLIT_BYTES, rows, threads);
  kiln_parallel_for(rms_norm_rows, &g, rows, parts);
}
