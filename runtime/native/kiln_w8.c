/*
 * Products with an int8 weight (weight-only quantization, kiln.matmul_w8):
 * C[M, N] = A[M, K] D^T (+ beta C), A and C f32, D[n, k] = W[n, k] *
 * S[n, k / G]: W int8 rows, one per output channel, S f32 scales for
 * groups of G consecutive k (G >= K: one scale per row).
 *
 *  - M <= W8_GEMV_MAX (an LLM's decode step: W8_ROWS rows of A a pass):
 *    each weight row is read once a pass,
 *    widened KILN_VW bytes at a time (vpmovsxbd + vcvtdq2ps) and multiplied
 *    into every row of A, the rows of W split over the pool: a quarter of
 *    the bytes an f32 weight streams, which is what a decode step waits on.
 *  - larger M (a prompt): a panel of KILN_NR rows of W at a time widened
 *    (and scaled) into the thread's scratch in kiln's packed-panel layout,
 *    then kiln's panel GEMM against all of A: widening costs K * N
 *    conversions against M * K * N products.
 */
#include <stdlib.h>

#include "kiln_native.h"

#define W8_ROWS 4  /* rows of A a GEMV pass takes */
/* Up to this many rows of A run as GEMV passes (a decode step at B <= 8), more on panels: against a
 * [2048, 768] weight, two threads, M = 5 / 8 / 16: GEMV passes 0.18 / 0.23 / 0.82 ms, panels 0.35 / 0.39 /
 * 0.56 ms (numpy's f32 product 0.56 / 0.44 / 0.52 ms; one run). */
#define W8_GEMV_MAX 8
#define W8_BLOCK 4 /* rows of W a GEMV task step holds: W8_ROWS x W8_BLOCK vector accumulators */
#define W8_PREFETCH 16 /* rows ahead the GEMV prefetches */

typedef struct {
  int64_t M, N, K, lda, ldw, lds, G, ldc;
  float beta;
  const float *A;
  const int8_t *W;
  const float *S;
  float *C;
} w8_args;

/* KILN_VW int8 from p as floats: one sign extension and one conversion
 * (gcc 12 scalarized __builtin_convertvector of an int8 vector here). */
static inline kiln_vec w8_load(const int8_t *p) {
#if KILN_VW == 16
  return (kiln_vec)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
#else
  return (kiln_vec)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
#endif
}

static inline void w8_store(const w8_args *g, float *c, float sum) {
  *c = g->beta == 0.0f ? sum : sum + g->beta * *c; /* beta 0: C is not read (it may hold anything) */
}

/* Rows [n0, n0 + nr) of W (nr <= R) against the M rows of A (M and R constants after inlining): each
 * group's products are summed apart and multiplied by the group's scale once (against a multiply per weight
 * vector: the same or a little faster, within this host's noise).  The prefetch 16 rows ahead took the
 * 32000 x 768 LM head from 8.5 to 16-22 GB/s of int8.  (8 rows of W for one row of A measured no faster.) */
static inline __attribute__((always_inline)) void w8_gemv_block(const w8_args *g, const int M, const int R,
                                                                 int64_t n0, int64_t nr) {
  const int64_t K = g->K;
  kiln_vec acc[W8_ROWS][W8_BLOCK];
  float tail[W8_ROWS][W8_BLOCK];
  for (int m = 0; m < M; m++)
    for (int r = 0; r < R; r++) acc[m][r] = (kiln_vec){0}, tail[m][r] = 0.0f;
  const int8_t *w[W8_BLOCK];
  const float *s[W8_BLOCK];
  for (int r = 0; r < R; r++) {
    int64_t n = n0 + (r < nr ? r : 0);
    w[r] = g->W + n * g->ldw;
    s[r] = g->S + n * g->lds;
  }
  for (int64_t g0 = 0, gi = 0; g0 < K; g0 += g->G, gi++) {
    int64_t end = g0 + g->G < K ? g0 + g->G : K, kv = g0 + (end - g0) / KILN_VW * KILN_VW;
    kiln_vec part[W8_ROWS][W8_BLOCK];
    for (int m = 0; m < M; m++)
      for (int r = 0; r < R; r++) part[m][r] = (kiln_vec){0};
    for (int64_t k = g0; k < kv; k += KILN_VW) {
      kiln_vec wv[W8_BLOCK];
      if ((k & 63) == 0) /* the next rows' line: a row is a few lines, too short for the streamer to ramp up */
        for (int r = 0; r < R; r++) __builtin_prefetch(w[r] + k + W8_PREFETCH * g->ldw);
      for (int r = 0; r < R; r++) wv[r] = w8_load(w[r] + k);
      for (int m = 0; m < M; m++) {
        kiln_vec a = kiln_loadu(g->A + m * g->lda + k);
        for (int r = 0; r < R; r++) part[m][r] += a * wv[r];
      }
    }
    for (int r = 0; r < R; r++) {
      kiln_vec sc = kiln_splat(s[r][gi]);
      for (int m = 0; m < M; m++) acc[m][r] += part[m][r] * sc;
    }
    for (int64_t k = kv; k < end; k++)
      for (int r = 0; r < R; r++) {
        float d = (float)w[r][k] * s[r][gi];
        for (int m = 0; m < M; m++) tail[m][r] += g->A[m * g->lda + k] * d;
      }
  }
  for (int m = 0; m < M; m++)
    for (int64_t r = 0; r < nr; r++) w8_store(g, g->C + m * g->ldc + n0 + r, kiln_hsum(acc[m][r]) + tail[m][r]);
}

/* Task blk: rows [W8_BLOCK * blk, ...) of W, R rows at a time (2 for 4 rows of A: 16 partial and 16 total
 * accumulators fill the registers). */
static void w8_gemv(void *ctx, int64_t lo, int64_t hi) {
  const w8_args *g = ctx;
  for (int64_t blk = lo; blk < hi; blk++) {
    int64_t end = (blk + 1) * W8_BLOCK < g->N ? (blk + 1) * W8_BLOCK : g->N;
    for (int64_t n0 = blk * W8_BLOCK; n0 < end;) {
      int64_t left = end - n0;
      switch (g->M) {
      case 1: w8_gemv_block(g, 1, 4, n0, left < 4 ? left : 4); n0 += 4; break;
      case 2: w8_gemv_block(g, 2, 4, n0, left < 4 ? left : 4); n0 += 4; break;
      case 3: w8_gemv_block(g, 3, 2, n0, left < 2 ? left : 2); n0 += 2; break;
      default: w8_gemv_block(g, 4, 2, n0, left < 2 ? left : 2); n0 += 2; break;
      }
    }
  }
}

/* Panel rows [k0, k0 + kc) of rows [n0, n0 + nr) of W (nr <= KILN_NR, kc <= KILN_VW), widened and scaled:
 * in registers, 16 x 16 at a time, where the block is whole and in one group (AVX-512); else a float at a
 * time (the whole weight that way cost about 1 ms per 1.5 M weights: as much as the product at M = 16). */
static inline void w8_panel_rows(const w8_args *g, float *panel, int64_t n0, int64_t nr, int64_t k0, int64_t kc) {
#if KILN_VW == 16
  if (kc == 16 && nr == KILN_NR && k0 / g->G == (k0 + 15) / g->G) {
    for (int half = 0; half < 2; half++) {
      __m512 r[16];
      for (int j = 0; j < 16; j++) {
        int64_t n = n0 + half * 16 + j;
        r[j] = (__m512)(w8_load(g->W + n * g->ldw + k0) * kiln_splat(g->S[n * g->lds + k0 / g->G]));
      }
      kiln_transpose16(r);
      for (int k = 0; k < 16; k++) _mm512_storeu_ps(panel + (k0 + k) * KILN_NR + half * 16, r[k]);
    }
    return;
  }
#endif
  for (int64_t k = 0; k < kc; k++)
    for (int64_t j = 0; j < KILN_NR; j++) {
      int64_t n = n0 + j, kk = k0 + k;
      panel[kk * KILN_NR + j] = j < nr ? (float)g->W[n * g->ldw + kk] * g->S[n * g->lds + kk / g->G] : 0.0f;
    }
}

/* Panels [lo, hi) of C: rows [q KILN_NR, ...) of W widened and scaled into one packed panel in the
 * thread's scratch ([K][KILN_NR], zeros past N: kiln's packed-panel layout), then kiln's panel GEMM against
 * every row of A while the panel is in L2. */
static void w8_panels(void *ctx, int64_t lo, int64_t hi) {
  const w8_args *g = ctx;
  const int64_t K = g->K;
  float *panel = kiln_thread_scratch((size_t)K * KILN_NR * sizeof(float));
  if (panel == NULL) abort(); /* as the other kernels: no memory for scratch is fatal */
  for (int64_t q = lo; q < hi; q++) {
    int64_t n0 = q * KILN_NR, nr = g->N - n0 < KILN_NR ? g->N - n0 : KILN_NR;
    for (int64_t k0 = 0; k0 < K; k0 += KILN_VW)
      w8_panel_rows(g, panel, n0, nr, k0, K - k0 < KILN_VW ? K - k0 : KILN_VW);
    kiln_sgemm_panel(g->M, nr, K, g->A, g->lda, panel, g->beta != 0.0f, g->C + n0, g->ldc);
  }
}

/* C (f32, ldc) = A D^T + beta C for D[n, k] = W[n, k] * S[n, k / G], W int8 [N, K] (ldw), S f32 [N, ceil(K /
 * G)] (lds), on `threads` of the pool. */
void kiln_w8_gemm(int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int64_t W, int64_t ldw, int64_t S,
                  int64_t lds, int64_t G, float beta, int64_t C, int64_t ldc, int32_t threads) {
  if (M <= 0 || N <= 0) return;
  if (G < 1) G = K > 0 ? K : 1;
  w8_args g = {M, N, K, lda, ldw, lds, G, ldc, beta, (const float *)A, (const int8_t *)W, (const float *)S, (float *)C};
  if (threads > kiln_pool_threads()) threads = kiln_pool_threads();
  if (K == 0) { /* an empty sum */
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) w8_store(&g, g.C + m * ldc + n, 0.0f);
    return;
  }
  if (M <= W8_GEMV_MAX) { /* W8_ROWS rows at a time, W streamed once each (from L2 or L3 after the first) */
    int64_t blocks = (N + W8_BLOCK - 1) / W8_BLOCK;
    for (int64_t m0 = 0; m0 < M; m0 += W8_ROWS) {
      w8_args rows = g;
      rows.M = M - m0 < W8_ROWS ? M - m0 : W8_ROWS;
      rows.A = g.A + m0 * lda;
      rows.C = g.C + m0 * ldc;
      kiln_parallel_for(w8_gemv, &rows, blocks, threads > 1 ? kiln_parts(blocks, threads) : 1);
    }
    return;
  }
  /* Widening 256 rows at a time for an OpenBLAS sgemm each (B transposed) ran 2-3x numpy's f32 product. */
  int64_t np = (N + KILN_NR - 1) / KILN_NR;
  kiln_parallel_for(w8_panels, &g, np, threads > 1 ? kiln_parts(np, threads) : 1);
}
