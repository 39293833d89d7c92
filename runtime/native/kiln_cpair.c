/*
 * kiln's native runtime: two convolutions in one call, the second ending in
 * a global pool (kiln_conv2d_pair; built with kiln_native.c into one
 * library; see kiln/runtime/native).
 *
 * A small CNN's last two convolutions (the bench CNN's 3 -> 32 at 32 x 32,
 * ReLU, 32 -> 64 stride 2, ReLU, mean) ran as two calls: the first wrote
 * its output (128 KB an image) as NCHW planes, the second copied it into a
 * zero-padded image and ran channel-vector tiles over the copy (kiln_vconv,
 * pool mode).  Here the first writes each image straight into the layout
 * the second reads: a zero-bordered grid of pixels, each pixel's channels
 * contiguous (NHWC), in this thread's scratch, where it stays in L2 until
 * the second reads it.  No NCHW output, no padded copy; and the first
 * convolution's tiles are channel vectors too (P pixels of a row times 32
 * channels), whose results are already in that layout: no transposing
 * store.  Against the two calls (same library, one thread, 4 images:
 * what each of two threads does at batch 8): 191 -> 168 us, the first
 * convolution 36 -> 28, the second with no copy 144 (95% of the core's FMA
 * peak).
 *
 * The second convolution's steps run in kiln_vconv's order (c, kh, kw) over
 * the same packed weight, so its sums are those of the two calls' second
 * one; the first's may differ in the last bits from kiln_conv2d's paths.
 * Geometries it does not take (and builds without AVX-512) run as the two
 * calls, through this thread's buffer 2. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_native.h"

void kiln_conv2d(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
                 int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, int64_t X,
                 int64_t Wt, int64_t bias, int64_t res, float beta, int32_t relu, int64_t Y, int32_t threads,
                 int64_t slot);
void kiln_conv2d_mean(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,
                      int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt,
                      int64_t pl, int64_t X, int64_t Wt, int64_t bias, int64_t res, float beta, int32_t relu,
                      int64_t Y, int32_t threads, int64_t slot, float divisor);

#if KILN_VW == 16
#include <immintrin.h>

#define CP_P 8        /* pixels a tile: 8 x 2 vectors, 16 accumulators */
#define CP_MAXK 4096  /* steps (C * KH * KW) an offset table holds */
#define CP_MAXF 1024  /* the second convolution's channels (its sums live on the stack) */
#define CP_COPY_BYTES (8 << 20) /* a thread's padded input and grid, at most */

typedef struct {
  int64_t C, H, W, F1, KH1, KW1, OH1, OW1, sh1, sw1, pt1, pl1, Hp1, Wp1, K1;
  int64_t F2, KH2, KW2, OH2, OW2, sh2, sw2, K2;
  int64_t pt2, pl2, Ht, Wt, rows1; /* the grid: Ht x Wt pixels, the first's rows1 rows from (pt2, pl2) */
  const float *X, *W1, *W2, *b1, *b2;
  int relu1, relu2;
  float *Y, inv;
  int32_t koff1[CP_MAXK], koff2[CP_MAXK];
  float *scratch;
  int64_t xfloats, copy; /* floats of a thread's padded input, and of it + the grid */
  /* Row tasks (an image split over the threads): rows a task, each thread's partial sums. */
  int64_t rows_a, rows_b;
  float *part;
} cpair_args;

/* A thread's buffers: the padded input, then the grid. */
static float *cp_grid(const cpair_args *a, float *buf) { return buf + a->xfloats; }

/* Image n of X into its zero-padded copy [C][Hp1][Wp1]. */
static void cp_pad_input(const cpair_args *a, int64_t n, float *xp) {
  for (int64_t c = 0; c < a->C; c++)
    for (int64_t i = 0; i < a->Hp1; i++) {
      float *row = xp + (c * a->Hp1 + i) * a->Wp1;
      int64_t r = i - a->pt1;
      if (r < 0 || r >= a->H) {
        memset(row, 0, (size_t)a->Wp1 * sizeof(float));
        continue;
      }
      int64_t left = a->pl1, len = a->W < a->Wp1 - left ? a->W : a->Wp1 - left;
      memset(row, 0, (size_t)left * sizeof(float));
      memcpy(row + left, a->X + ((n * a->C + c) * a->H + r) * a->W, (size_t)len * sizeof(float));
      memset(row + left + len, 0, (size_t)(a->Wp1 - left - len) * sizeof(float));
    }
}

/* The grid's pixels the first convolution does not write, zeroed: the
 * second's padding. */
static void cp_zero_border(const cpair_args *a, float *grid) {
  size_t px = (size_t)a->F1 * sizeof(float);
  memset(grid, 0, (size_t)(a->pt2 * a->Wt) * px);
  for (int64_t i = a->pt2; i < a->pt2 + a->rows1; i++) {
    float *row = grid + i * a->Wt * a->F1;
    memset(row, 0, (size_t)a->pl2 * px);
    memset(row + (a->pl2 + a->OW1) * a->F1, 0, (size_t)(a->Wt - a->pl2 - a->OW1) * px);
  }
  memset(grid + (a->pt2 + a->rows1) * a->Wt * a->F1, 0, (size_t)((a->Ht - a->pt2 - a->rows1) * a->Wt) * px);
}

/* Tile (oh, ow0) of the first convolution's channel group g (32 channels):
 * P pixels of the padded input xp at stride SW, into the grid (bias, ReLU). */
/* acc[p] = bias (32 channels, or 0) + sum over the K taps of w[k] times the
 * input at xb + koff[k] + p * PS, for CP_P pixels p: both convolutions' tile.
 * xb is hidden from the optimizer so the pixel offsets p * PS stay
 * immediates (see kiln_vconv.c). */
static inline __attribute__((always_inline)) void cp_accumulate(__m512 acc[CP_P][2], const float *bias,
                                                                const float *w, int64_t K, const int32_t *koff,
                                                                const float *xb, const int PS) {
  __m512 b0 = _mm512_setzero_ps(), b1 = b0;
  if (bias) b0 = _mm512_loadu_ps(bias), b1 = _mm512_loadu_ps(bias + 16);
  for (int p = 0; p < CP_P; p++) acc[p][0] = b0, acc[p][1] = b1;
  __asm__("" : "+r"(xb));
  for (int64_t k = 0; k < K; k++, w += 32) {
    __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16);
    const float *xr = xb + koff[k];
    for (int p = 0; p < CP_P; p++) {
      __m512 x = _mm512_set1_ps(xr[p * PS]);
      acc[p][0] = _mm512_fmadd_ps(x, w0, acc[p][0]);
      acc[p][1] = _mm512_fmadd_ps(x, w1, acc[p][1]);
    }
  }
}

static inline __attribute__((always_inline)) void cp_tile1(const cpair_args *a, const float *xp, float *grid,
                                                           int64_t g, int64_t oh, int64_t ow0, const int SW) {
  __m512 acc[CP_P][2];
  cp_accumulate(acc, a->b1 ? a->b1 + 32 * g : NULL, a->W1 + g * a->K1 * 32, a->K1, a->koff1,
                xp + oh * a->sh1 * a->Wp1 + ow0 * SW, SW);
  float *out = grid + ((a->pt2 + oh) * a->Wt + a->pl2 + ow0) * a->F1 + 32 * g;
  __m512 z = _mm512_setzero_ps();
  for (int p = 0; p < CP_P; p++) {
    __m512 r0 = acc[p][0], r1 = acc[p][1];
    if (a->relu1) r0 = _mm512_max_ps(z, r0), r1 = _mm512_max_ps(z, r1);
    _mm512_storeu_ps(out + p * a->F1, r0);
    _mm512_storeu_ps(out + p * a->F1 + 16, r1);
  }
}

/* Tile (oh, ow0) of the second convolution's group g: P pixels PS floats
 * apart in the grid; their (ReLU'd) sum added to sums[32g .. 32g + 32). */
static inline __attribute__((always_inline)) void cp_tile2(const cpair_args *a, const float *grid, int64_t g,
                                                           int64_t oh, int64_t ow0, float *sums, const int PS) {
  __m512 acc[CP_P][2];
  cp_accumulate(acc, a->b2 ? a->b2 + 32 * g : NULL, a->W2 + g * a->K2 * 32, a->K2, a->koff2,
                grid + (oh * a->sh2 * a->Wt + ow0 * a->sw2) * a->F1, PS);
  __m512 z = _mm512_setzero_ps(), s0 = z, s1 = z;
  for (int p = 0; p < CP_P; p++) {
    __m512 r0 = acc[p][0], r1 = acc[p][1];
    if (a->relu2) r0 = _mm512_max_ps(z, r0), r1 = _mm512_max_ps(z, r1);
    s0 = _mm512_add_ps(s0, r0), s1 = _mm512_add_ps(s1, r1);
  }
  float *s = sums + 32 * g;
  _mm512_storeu_ps(s, _mm512_add_ps(_mm512_loadu_ps(s), s0));
  _mm512_storeu_ps(s + 16, _mm512_add_ps(_mm512_loadu_ps(s + 16), s1));
}

/* The first convolution's output rows [r0, r1), every tile and group. */
static void cp_rows1(const cpair_args *a, const float *xp, float *grid, int64_t r0, int64_t r1) {
  for (int64_t oh = r0; oh < r1; oh++)
    for (int64_t ow0 = 0; ow0 < a->OW1; ow0 += CP_P)
      for (int64_t g = 0; g < a->F1 / 32; g++) {
        if (a->sw1 == 1)
          cp_tile1(a, xp, grid, g, oh, ow0, 1);
        else
          cp_tile1(a, xp, grid, g, oh, ow0, 2);
      }
}

/* The second convolution's output rows [r0, r1) summed into sums[F2]. */
static void cp_rows2(const cpair_args *a, const float *grid, int64_t r0, int64_t r1, float *sums) {
  int64_t ps = a->sw2 * a->F1;
  for (int64_t oh = r0; oh < r1; oh++)
    for (int64_t ow0 = 0; ow0 < a->OW2; ow0 += CP_P)
      for (int64_t g = 0; g < a->F2 / 32; g++) {
        if (ps == 32)
          cp_tile2(a, grid, g, oh, ow0, sums, 32);
        else if (ps == 64)
          cp_tile2(a, grid, g, oh, ow0, sums, 64);
        else
          cp_tile2(a, grid, g, oh, ow0, sums, 128);
      }
}

static void cp_store(const cpair_args *a, int64_t n, const float *sums) {
  for (int64_t f = 0; f < a->F2; f++) a->Y[n * a->F2 + f] = sums[f] * a->inv;
}

/* Whole images, each on one thread in its slot's buffers. */
static void cp_images(void *ctx, int64_t lo, int64_t hi) {
  const cpair_args *a = ctx;
  float *buf = a->scratch + kiln_worker_slot() * a->copy;
  float *xp = buf, *grid = cp_grid(a, buf);
  float sums[CP_MAXF] __attribute__((aligned(64)));
  cp_zero_border(a, grid);
  for (int64_t n = lo; n < hi; n++) {
    cp_pad_input(a, n, xp);
    cp_rows1(a, xp, grid, 0, a->rows1);
    memset(sums, 0, (size_t)a->F2 * sizeof(float));
    cp_rows2(a, grid, 0, a->OH2, sums);
    cp_store(a, n, sums);
  }
}

/* Row tasks of an image in the caller's buffers: the first convolution's... */
static void cp_tasks1(void *ctx, int64_t lo, int64_t hi) {
  const cpair_args *a = ctx;
  int64_t r0 = lo * a->rows_a, r1 = hi * a->rows_a < a->rows1 ? hi * a->rows_a : a->rows1;
  cp_rows1(a, a->scratch, cp_grid(a, a->scratch), r0, r1);
}

/* ... and the second's, each thread's sums in its row of a->part. */
static void cp_tasks2(void *ctx, int64_t lo, int64_t hi) {
  const cpair_args *a = ctx;
  int64_t r0 = lo * a->rows_b, r1 = hi * a->rows_b < a->OH2 ? hi * a->rows_b : a->OH2;
  cp_rows2(a, cp_grid(a, a->scratch), r0, r1, a->part + kiln_worker_slot() * a->F2);
}

static void cp_pack2(float *dst, const float *w, int64_t K, int64_t F, int64_t ld) { pack_panels(dst, w, K, F, 32, 1, ld); }

#define CP_GEOMETRY_PARAMS                                                                                      \
  int64_t C, int64_t H, int64_t W, int64_t F1, int64_t KH1, int64_t KW1, int64_t OH1, int64_t OW1, int64_t sh1,   \
      int64_t sw1, int64_t pt1, int64_t pl1, int64_t F2, int64_t KH2, int64_t KW2, int64_t OH2, int64_t OW2,       \
      int64_t sh2, int64_t sw2, int64_t pt2, int64_t pl2
#define CP_GEOMETRY_ARGS C, H, W, F1, KH1, KW1, OH1, OW1, sh1, sw1, pt1, pl1, F2, KH2, KW2, OH2, OW2, sh2, sw2, pt2, pl2

/* a's geometry (and the grid's); 0 when the fast path does not take it:
 * whole tiles of 8 pixels and groups of 32 channels, the grid's pixel pitch
 * one the tiles were instantiated for (F1 32 or 64, stride 1 or 2). */
static int cp_setup(cpair_args *a, CP_GEOMETRY_PARAMS) {
  static int on = -1;
  if (F2 % 32 || F2 > CP_MAXF || OW1 % CP_P || OW2 % CP_P || (F1 != 32 && F1 != 64) || sw1 < 1 || sw1 > 2 ||
      sw2 < 1 || sw2 > 2 || sh1 < 1 || sh2 < 1 || C * KH1 * KW1 > CP_MAXK || F1 * KH2 * KW2 > CP_MAXK || pt1 < 0 ||
      pl1 < 0 || pt2 < 0 || pl2 < 0 || !kiln_switch_on("KILN_CONV_PAIR", &on))
    return 0;
  a->C = C, a->H = H, a->W = W, a->F1 = F1, a->KH1 = KH1, a->KW1 = KW1, a->OH1 = OH1, a->OW1 = OW1;
  a->sh1 = sh1, a->sw1 = sw1, a->pt1 = pt1, a->pl1 = pl1, a->K1 = C * KH1 * KW1;
  a->Hp1 = (OH1 - 1) * sh1 + KH1, a->Wp1 = (OW1 - 1) * sw1 + KW1;
  a->F2 = F2, a->KH2 = KH2, a->KW2 = KW2, a->OH2 = OH2, a->OW2 = OW2, a->sh2 = sh2, a->sw2 = sw2;
  a->K2 = F1 * KH2 * KW2, a->pt2 = pt2, a->pl2 = pl2;
  /* The grid covers what the second convolution reads, and the first's
   * whole rows (rows below what the second reads are not computed). */
  int64_t hp2 = (OH2 - 1) * sh2 + KH2, wp2 = (OW2 - 1) * sw2 + KW2;
  a->rows1 = hp2 - pt2 < OH1 ? hp2 - pt2 : OH1;
  a->Ht = hp2 > pt2 + a->rows1 ? hp2 : pt2 + a->rows1;
  a->Wt = wp2 > pl2 + OW1 ? wp2 : pl2 + OW1;
  a->xfloats = (C * a->Hp1 * a->Wp1 + 15) / 16 * 16;
  a->copy = a->xfloats + a->Ht * a->Wt * F1;
  return a->rows1 >= 1 && pt1 < a->Hp1 && pl1 < a->Wp1 && a->copy * (int64_t)sizeof(float) <= CP_COPY_BYTES;
}

/* The fast path; 0 (nothing written) when it does not take the geometry or
 * memory ran out. */
static int cp_run(int64_t batch, CP_GEOMETRY_PARAMS, const float *X, const float *W1, const float *B1, int relu1,
                  const float *W2, const float *B2, int relu2, float *Y, int32_t threads, int64_t slot1,
                  int64_t slot2, float divisor) {
  cpair_args *a = calloc(1, sizeof *a);
  if (a == NULL || !cp_setup(a, CP_GEOMETRY_ARGS)) {
    free(a);
    return 0;
  }
  for (int64_t c = 0, k = 0; c < C; c++)
    for (int64_t kh = 0; kh < KH1; kh++)
      for (int64_t kw = 0; kw < KW1; kw++, k++) a->koff1[k] = (int32_t)((c * a->Hp1 + kh) * a->Wp1 + kw);
  for (int64_t c = 0, k = 0; c < F1; c++)
    for (int64_t kh = 0; kh < KH2; kh++)
      for (int64_t kw = 0; kw < KW2; kw++, k++) a->koff2[k] = (int32_t)((kh * a->Wt + kw) * F1 + c);
  int per_image = batch >= 2 * threads || batch % threads == 0;
  int64_t copies = per_image ? kiln_pool_threads() : 1;
  a->scratch = kiln_thread_scratch((size_t)(copies * a->copy) * sizeof(float));
  a->W1 = kiln_slot_packed(slot1, KILN_PACK_V + 2, W1, a->K1, F1, a->K1, F1 * a->K1, cp_pack2);
  a->W2 = kiln_slot_packed(slot2, KILN_PACK_V + 2, W2, a->K2, F2, a->K2, F2 * a->K2, cp_pack2);
  if (a->scratch == NULL || a->W1 == NULL || a->W2 == NULL) {
    free(a);
    return 0;
  }
  a->X = X, a->b1 = B1, a->b2 = B2, a->relu1 = relu1, a->relu2 = relu2, a->Y = Y, a->inv = 1.0f / divisor;
  if (per_image) {
    kiln_parallel_for(cp_images, a, batch, kiln_parts(batch, threads));
  } else {
    /* Too few images to share: each split over the threads, the first
     * convolution's rows and then the second's, two tasks a thread. */
    int64_t t = kiln_pool_threads(), want = 2 * (threads < t ? threads : t);
    if ((a->part = malloc((size_t)(t * F2) * sizeof(float))) == NULL) {
      free(a);
      return 0;
    }
    a->rows_a = (a->rows1 + want - 1) / want, a->rows_b = (OH2 + want - 1) / want;
    float *grid = cp_grid(a, a->scratch);
    cp_zero_border(a, grid);
    for (int64_t n = 0; n < batch; n++) {
      cp_pad_input(a, n, a->scratch);
      memset(a->part, 0, (size_t)(t * F2) * sizeof(float));
      int64_t n1 = (a->rows1 + a->rows_a - 1) / a->rows_a, n2 = (OH2 + a->rows_b - 1) / a->rows_b;
      kiln_parallel_for(cp_tasks1, a, n1, n1 < threads ? n1 : threads);
      kiln_parallel_for(cp_tasks2, a, n2, n2 < threads ? n2 : threads);
      float sums[CP_MAXF];
      for (int64_t f = 0; f < F2; f++) {
        float s = 0.0f;
        for (int64_t i = 0; i < t; i++) s += a->part[i * F2 + f];
        sums[f] = s;
      }
      cp_store(a, n, sums);
    }
    free(a->part);
  }
  free(a);
  return 1;
}

#endif

/* Whether kiln_conv2d_pair takes the geometry (its arguments without the
 * batch) on its own path, not as the two calls (for tests). */
int kiln_conv2d_pair_takes(int64_t C, int64_t H, int64_t W, int64_t F1, int64_t KH1, int64_t KW1, int64_t OH1,
                           int64_t OW1, int64_t sh1, int64_t sw1, int64_t pt1, int64_t pl1, int64_t F2, int64_t KH2,
                           int64_t KW2, int64_t OH2, int64_t OW2, int64_t sh2, int64_t sw2, int64_t pt2,
                           int64_t pl2) {
#if KILN_VW == 16
  cpair_args *a = calloc(1, sizeof *a);
  int takes = a != NULL && cp_setup(a, CP_GEOMETRY_ARGS);
  free(a);
  return takes;
#else
  (void)C, (void)H, (void)W, (void)F1, (void)KH1, (void)KW1, (void)OH1, (void)OW1, (void)sh1, (void)sw1, (void)pt1;
  (void)pl1, (void)F2, (void)KH2, (void)KW2, (void)OH2, (void)OW2, (void)sh2, (void)sw2, (void)pt2, (void)pl2;
  return 0;
#endif
}

/* Y [batch, F2] = mean (sum / divisor) over the pixels of
 * act2(conv2(act1(conv1(X) + B1)) + B2): conv1 F1 x C x KH1 x KW1 at stride
 * (sh1, sw1), padding (pt1, pl1) (the bottom and right up to the output
 * size), conv2 F2 x F1 x KH2 x KW2 likewise, undilated, act a ReLU where
 * relu1 / relu2, B1 / B2 biases or 0 (none); X [batch, C, H, W], the
 * weights OIHW, all contiguous.  slot1 / slot2 are the weights' packing
 * slots (kiln_slot_packed). */
void kiln_conv2d_pair(int64_t batch, int64_t C, int64_t H, int64_t W, int64_t F1, int64_t KH1, int64_t KW1,
                      int64_t OH1, int64_t OW1, int64_t sh1, int64_t sw1, int64_t pt1, int64_t pl1, int64_t F2,
                      int64_t KH2, int64_t KW2, int64_t OH2, int64_t OW2, int64_t sh2, int64_t sw2, int64_t pt2,
                      int64_t pl2, int64_t X, int64_t W1, int64_t B1, int32_t relu1, int64_t W2, int64_t B2,
                      int32_t relu2, int64_t Y, int32_t threads, int64_t slot1, int64_t slot2, float divisor) {
#if KILN_VW == 16
  if (cp_run(batch, CP_GEOMETRY_ARGS, (const float *)X, (const float *)W1, (const float *)B1, relu1, (const float *)W2, (const float *)B2,
             relu2, (float *)Y, threads, slot1, slot2, divisor))
    return;
#endif
  /* The two calls, the first's output in this thread's buffer 2. */
  float *mid = kiln_thread_buffer(2, (size_t)(batch * F1 * OH1 * OW1) * sizeof(float));
  if (mid == NULL) {
    fputs("kiln_conv2d_pair: out of memory for the first convolution's output\n", stderr);
    abort(); /* as a failed allocation in the generated code would, but with a message */
  }
  kiln_conv2d(batch, F1, C, H, W, KH1, KW1, OH1, OW1, sh1, sw1, 1, 1, pt1, pl1, X, W1, B1, 0, 0.0f, relu1,
              (int64_t)mid, threads, slot1);
  kiln_conv2d_mean(batch, F2, F1, OH1, OW1, KH2, KW2, OH2, OW2, sh2, sw2, 1, 1, pt2, pl2, (int64_t)mid, W2, B2, 0,
                   0.0f, relu2, Y, threads, slot2, divisor);
}
