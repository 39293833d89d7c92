/*
 * kiln's native runtime, convolution side: a constant A (a weight) times
 * activations, and convolutions (built with kiln_native.c into one
 * library; see kiln/runtime/native).
 *
 * ---------------------------------------------------- weight-A GEMM, conv
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
 * of KC rows so a block of the packed B panel (KC x WNR) stays in L1.
 * kiln_conv2d (the end of this file) dispatches a convolution to Winograd
 * (kiln_winograd.c), the channel-vector tiles (kiln_vconv.c), the direct
 * path (kiln_dconv.c) or this GEMM on a gathered im2col. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_native.h"
#include "kiln_wtile.h"

/* A (M x K) as blocks of WMR rows, each [K][WMR] (zero rows pad the last). */
static void pack_a_blocks(float *dst, const float *A, int64_t M, int64_t K, int64_t lda) {
  pack_panels(dst, A, K, M, WMR, 1, lda);
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
  int in_place; /* B (not an im2col) read in place, whole panels (wgemm_tasks) */
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
  kiln_run_inside(iw, g->sw, g->W, len, lo, hi);
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
      int64_t stride = WNR;
      if (shared)
        bk = shared + k0 * WNR;
      else if (g->in_place && nr == WNR)
        bk = src + k0 * g->ldb + n0, stride = g->ldb;
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
          micro_w(WMR, a, bk, NULL, stride, kc, c, g->ldc, nr, add, bias, res, relu, 1);
        else
          micro_w((int)mr, a, bk, NULL, stride, kc, c, g->ldc, nr, add, bias, res, relu, 1);
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
            micro_w(WMR, a, bk, NULL, WNR, kc, c, g->ldc, nr, add, bias, res, relu, 1);
          else
            micro_w((int)mr, a, bk, NULL, WNR, kc, c, g->ldc, nr, add, bias, res, relu, 1);
        }
      }
    }
  }
}

/* See kiln_wtile.h. */
const float *kiln_packed_a(int64_t slot, const float *A, int64_t M, int64_t K, int64_t lda) {
  return kiln_slot_packed(slot, KILN_PACK_A, A, M, K, lda, (M + WMR - 1) / WMR * WMR * K, pack_a_blocks);
}

/* Whether B (not an im2col) is packed once and the row blocks run over
 * every panel (wgemm_rows_tasks) though the panels alone would balance the
 * pool: for an output bigger than half of L2 from a B that L2 nearly holds.
 * Panel by panel, each task writes (and reads the residual of) a sliver of
 * every output row, more streams than the prefetchers follow once the
 * output has left the caches; by rows, a task's rows are written in order.
 * ResNet-50's 64 -> 256 pointwise layers at 56 x 56 with the residual, the
 * output out of cache: 1.28-1.53 -> 0.91 ms (same-library C harness); in
 * cache no change; with a 3.2 MB B (256 -> 64) 1.6x slower, so left out.
 * ResNet-50 0.982x (worker pairs, 16 rounds). */
static int rows_first(const wgemm_args *g) {
  int64_t b_bytes = g->K * g->N * (int64_t)sizeof(float);
  int subsample = g->im2col && g->KH == 1 && g->KW == 1; /* a strided 1x1: packed as cheaply */
  return (!g->im2col || subsample) && g->M * g->N * (int64_t)sizeof(float) >= (512 << 10) && b_bytes <= (2 << 20) &&
         g->batch * b_bytes <= (8 << 20);
}

/* Whether rows ldb floats apart start on at least 4 of L1's 64 sets
 * (lines of 64 bytes, sets 4 KiB apart). */
static int rows_spread(int64_t ldb) {
  uint64_t seen = 0;
  for (int64_t k = 0; k < 64; k++) seen |= 1ull << ((k * ldb * (int64_t)sizeof(float) >> 6) & 63);
  return __builtin_popcountll(seen) >= 4;
}

static void wgemm_run(wgemm_args *g, int64_t A, int64_t lda, int32_t threads, int64_t slot) {
  g->A = (const float *)A;
  g->lda = lda;
  g->Ap = kiln_packed_a(slot, g->A, g->M, g->K, lda);
  g->panels = (g->N + WNR - 1) / WNR;
  g->mblocks = (g->M + WMR - 1) / WMR;
  /* A pointwise convolution's whole panels are read in place (row k of a K
   * block ldb floats after row k - 1) rather than gathered into a panel
   * first: the gather had been a tenth of the time, and the tiles read the
   * rows from L1 or L2 about as fast.  ResNet-50's 256 -> 64 and 256 -> 128
   * at 56 x 56 0.93x and 0.98x warm, 0.91x and 0.95x with X read back after a
   * sweep of the caches; 256 -> 64 at 48 x 48 (rows on 4 sets) 0.89x.  Not
   * on planes whose rows all start on one L1 set (32 x 32 and 64 x 64:
   * 1.18x, 1.17x); C harness, two threads.  ResNet-50 1.001x (worker pairs,
   * 6 of 12 rounds: its three such layers gain ~60 us of 17 ms). */
  g->in_place = !g->im2col && rows_spread(g->ldb);
  /* Enough tasks to balance the pool; extra row chunks repack B, so only as needed. */
  int64_t want = 4 * (int64_t)threads, have = g->batch * g->panels;
  g->mchunks = have >= want ? 1 : (want + have - 1) / have;
  if (g->mchunks > g->mblocks) g->mchunks = g->mblocks;
  int64_t kblocks = (g->K + KC - 1) / KC;
  g->kstep = (g->K + kblocks - 1) / kblocks;
  /* With several row chunks per panel, each chunk would gather (or copy) the
   * same panel of B again: for a late ResNet layer (2 panels, 4 chunks) the
   * gathers cost as much as the products.  Then, and by rows_first, B is
   * packed once, every (image, panel, K block) a task, into the caller's
   * scratch (at most `want` panels, or 8 MiB by rows_first; kept for the
   * next call rather than allocated and faulted in per call). */
  float *packed = NULL;
  if (g->mchunks > 1 || rows_first(g)) packed = kiln_thread_scratch((size_t)have * g->K * WNR * sizeof(float));
  if (packed != NULL) {
    g->packed_b = packed;
    kiln_parallel_for(pack_b_tasks, g, have * kblocks, kiln_parts(have * kblocks, threads));
    /* Then the row chunks span every panel: as many per image as balance the pool. */
    g->mchunks = (want + g->batch - 1) / g->batch;
    if (g->mchunks > g->mblocks) g->mchunks = g->mblocks;
    int64_t tasks = g->batch * g->mchunks;
    kiln_parallel_for(wgemm_rows_tasks, g, tasks, kiln_parts(tasks, threads));
  } else {
    int64_t tasks = have * g->mchunks;
    kiln_parallel_for(wgemm_tasks, g, tasks, kiln_parts(tasks, threads));
  }
  g->packed_b = NULL;
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

/* Whether 3x3 stride-1 convolutions may take kiln_winograd.c (KILN_WINOGRAD=0
 * turns it off for A/B runs). */
static int winograd_enabled(void) {
  static int enabled = -1;
  return kiln_switch_on("KILN_WINOGRAD", &enabled);
}

/* Y[n, f, oh, ow] = bias[f] (0 if bias is 0) + R[n, f, oh, ow] (0 if res is
 * 0) + sum over (c, kh, kw) of
 * Wt[f, c, kh, kw] * X[n, c, oh * sh - pt + kh * dh, ow * sw - pl + kw * dw]
 * (beta 1: Y += all that), then max(., 0) when relu is 1, zero outside X: a
 * convolution of the contiguous X
 * [batch, C, H, W] (padded by pt rows on top, pl columns on the left, and as
 * far as OH, OW reach) by the weight Wt [F, C*KH*KW] into contiguous
 * Y [batch, F, OH, OW], the im2col gathered per panel; slot as for
 * kiln_sgemm_wa.  A stride-2 convolution is vectorized over output
 * channels (kiln_vconv.c) when that takes it; otherwise computed directly
 * (kiln_dconv.c) when the weight has a slot and memory for the copies is there,
 * as a GEMM on X itself for a pointwise convolution, else with the im2col
 * gathered per panel. */
void kiln_conv2d(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,
                 int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl,
                 int64_t X, int64_t Wt, int64_t bias, int64_t res, float beta, int32_t relu, int64_t Y,
                 int32_t threads, int64_t slot) {
  kiln_conv2d_into(batch, F, C, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl, X, Wt, bias, res, beta, relu, Y, threads,
                   slot, NULL);
}

int kiln_conv2d_into(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,
                     int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl,
                     int64_t X, int64_t Wt, int64_t bias, int64_t res, float beta, int32_t relu, int64_t Y,
                     int32_t threads, int64_t slot, float *pool) {
  wgemm_args g = {0};
  g.batch = batch, g.M = F, g.N = OH * OW, g.K = C * KH * KW;
  g.B = (const float *)X, g.sb = C * H * W, g.im2col = 1;
  if (KH == 1 && KW == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH == H && OW == W) {
    g.im2col = 0, g.ldb = H * W; /* a pointwise convolution: X[n] is B itself (C x HW) */
    /* Few pixels, whose 32-column panels would waste a tenth (ResNet-50's
     * 7 x 7 and 14 x 14 layers: 49 of 64, 196 of 224), go to the
     * channel-vector tiles as one row of H * W pixels (kiln_vconv.c; the
     * 14 x 14 ones added 0.985x to ResNet-50, worker pairs, 2 x 16 rounds).
     * So do those up to 28 x 28 (whole panels; kiln_vconv takes them from
     * 256 input channels): with 14 x 2 tiles ResNet-50's 512 -> 128 and
     * 512 -> 256 at 28 x 28 0.85 / 0.92x, its 256 -> 64 and 256 -> 128 at
     * 56 x 56 1.03 / 1.12x (same C harness, two threads). */
    int64_t n = H * W, cols = (n + WNR - 1) / WNR * WNR;
    /* (Pool mode, not measured on pointwise layers, leaves them the output.) */
    if (!pool && (n < 0.9 * cols || n <= 28 * 28) &&
        kiln_vconv(batch, F, C, 1, n, 1, 1, 1, n, 1, 1, 1, 1, 0, 0, (const float *)X, (const float *)Wt,
                   (const float *)bias, (const float *)res, beta != 0.0f, relu != 0, (float *)Y, threads, slot, NULL))
      return 1;
  } else {
    const float *x = (const float *)X, *w = (const float *)Wt, *b = (const float *)bias, *r = (const float *)res;
    float *y = (float *)Y;
    int acc = beta != 0.0f, rl = relu != 0;
    if (KH == 3 && KW == 3 && sh == 1 && sw == 1 && dh == 1 && dw == 1 && winograd_enabled()) {
      if (pool) return 0; /* Winograd's geometries keep it: nothing sums in its tiles */
      if (kiln_winograd(batch, F, C, H, W, OH, OW, pt, pl, x, w, b, r, acc, rl, y, threads, slot))
        return 1;
    }
    if (kiln_vconv(batch, F, C, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl, x, w, b, r, acc, rl, y, threads, slot,
                   pool))
      return 1;
    /* A strided 1x1 window's im2col is a subsample, packed once like a
     * pointwise convolution's B (rows_first): ResNet-50's projections at 28
     * / 14 / 7 wide 0.91 / 0.87 / 0.81x against the direct path's flat grid,
     * 0.84x at batch 4 (C harness, two threads, alternating). */
    if (!pool && !(KH == 1 && KW == 1) &&
        kiln_dconv(batch, F, C, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl, x, w, b, r, acc, rl, y, threads, slot))
      return 1;
  }
  if (pool) return 0;
  g.H = H, g.W = W, g.KH = KH, g.KW = KW, g.sh = sh, g.sw = sw, g.dh = dh, g.dw = dw, g.OW = OW;
  g.pt = pt, g.pl = pl;
  g.C = (float *)Y, g.ldc = g.N, g.sc = F * g.N;
  g.accumulate = beta != 0.0f;
  g.bias = (const float *)bias;
  g.res = (const float *)res; /* R is laid out as Y (a residual; it may be Y itself) */
  g.relu = relu != 0;
  wgemm_run(&g, Wt, g.K, threads, slot);
  return 1;
}
