/*
 * kiln's native runtime: convolutions vectorized over output channels
 * (stride 2; stride 1 on small outputs; pointwise ones over few pixels;
 * built with kiln_native.c into one library; see kiln/runtime/native).
 *
 * kiln_conv2d's other paths put pixels in the vector lanes, so a stride-2
 * convolution must first deinterleave its input: an im2col gathered panel
 * by panel, or the direct path's phase planes plus a "wide" result with
 * dropped columns.  Here the lanes hold output channels instead: a tile is
 * P pixels of one output row times Q vectors of channels, each step of the
 * reduction (c, kh, kw) loads Q vectors of the packed weight and broadcasts
 * P input values straight from a zero-padded copy of the image, whatever
 * the stride (the same idea as ONNX Runtime's NCHWc kernels, without
 * changing the layout between layers).  The price is a transposing store:
 * each tile's P x 16Q results go to Q * 16 output rows of P pixels.
 *
 * Register tiles (P x Q, 28 or 16 accumulators of AVX-512's 32): 14 x 2,
 * 7 x 4, 8 x 2 and 16 x 1, picked by the output width (ResNet-50's 112,
 * 28 and 14 are multiples of 14, its 7 takes 7 x 4; 14 x 2 first: 7 x 4's
 * 28 accumulators, 4 weight vectors and a broadcast are 33 registers, and
 * gcc reads one weight vector from memory in each of its FMAs; 14 x 2
 * keeps both in registers.  ResNet-50's 14-wide pointwise layers 0.75-0.83x,
 * its stride-2 layers 0.79-0.92x, the 3x3 at 14 0.92x, same C harness,
 * two threads; the model 0.941x, worker pairs, 12 of 12 rounds.  Pinning
 * 7 x 4's weights instead made its 3x3 layers 1.07x slower.  The bench
 * CNN's 16 takes 8 x 2, which
 * broadcasts half as many inputs a step as 16 x 1: its 32 -> 64 layer one
 * thread 0.90x at batch 1 and 8, two threads 1.00x and 0.93x, 4 x 4 1.8x
 * slower and 6 x 4 1.1x, same C harness on a Zen 5).  AVX-512 builds only:
 * with AVX2's 16 registers the tiles would be a third as big.
 *
 * Against kiln_conv2d's other paths (same library, alternating, two
 * threads): the bench CNN's 32 -> 64 layer at batch 1 / 3 / 4 / 8 0.94 /
 * 0.82 / 0.77 / 0.78x; ResNet-50's stride-2 3x3 layers 0.99 / 0.79 /
 * 0.57x, its stride-2 1x1 ones 0.87 / 0.95 / 0.32x; whole models (worker
 * pairs, with the vector store and padding copy below) small_cnn B=1
 * 0.89x, B=8 0.76x, ResNet-50 0.93x.  At stride 1 (ResNet-50's 3x3 layers
 * at 28, 14, 7 wide: 0.87, 0.82, 0.66x here) it first gained nothing in
 * the model, where a group's weight (1.2 MiB at 512 channels) streamed
 * from L3 once per output row; with the weight in blocks of 256 KiB, each
 * used for every tile of the group's rows while in L2 (vc_group_kblocked),
 * ResNet-50 0.94-0.96x (worker pairs, 16 rounds; the blocks alone, on the
 * stride-2 layers, 0.97x).
 *
 * A pointwise convolution over few pixels comes here as one row of H * W
 * (kiln_conv2d: when 32-column panels would waste a tenth): ResNet-50's
 * 7 x 7 layers 0.70-0.72x against the GEMM's panels (49 of 64 columns
 * used), the whole model 0.97-0.98x (worker pairs); at 14 x 14 0.94-0.98x;
 * at 28 and 56 1.0-1.15x, which the panel rule leaves out.  A strided 1x1
 * runs at stride 1 on a subsampled copy of its input.
 *
 * With `pool` (kiln_conv2d_mean: a convolution whose only reader is a
 * global average or sum pool) nothing is stored: a tile's vector q holds
 * 16 channels of each of its P pixels, so their sum over the pixels
 * (after the bias and ReLU) is P - 1 vector adds, added to the calling
 * thread's partial sums of the image; no transpose, no output. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_native.h"

#if KILN_VW == 16
#include <immintrin.h>

#define VC_MAXK 8192 /* reduction steps (C * KH * KW) the offset table holds */
#define VC_MINK 256
/* Padded images up to this size take the banded path when whole images do
 * not share the pool (see kiln_vconv). */
#define VC_BAND_BYTES (256 << 10)
/* A channel group's weight is used in blocks of at most this many bytes
 * (groups outer), and the tiles' sums between blocks take at most VC_SUMS
 * floats (else the steps run in one block). */
#define VC_KBLOCK_BYTES (256 << 10)
#define VC_SUMS 16384

#include "kiln_vtile.h"

/* Image x (C x H x W) into its zero-padded copy dst (C x Hp x Wp): input
 * row i at row i + pt, column j at j + pl; rows and columns no tap reaches
 * are left out.  Each 16-float chunk of a copied row is one masked load
 * (lanes outside [pl, pl + len) read nothing and come back 0) and one
 * (masked at the row's end) store: rows are a few dozen floats, where a
 * scalar loop's peeling and memset / memcpy calls cost more than the copy
 * (the bench CNN's 32 -> 64 layer spent 9% of its time in the copy). */
static void vc_pad_rows(const vconv_args *v, const float *x, float *dst, int64_t r0, int64_t r1) {
  const int64_t Wp = v->Wp, W = v->W, H = v->H, pt = v->pt, pl = v->pl;
  const int64_t len = W < Wp - pl ? W : Wp - pl, chunks = (Wp + 15) / 16;
  __mmask16 load[64]; /* per chunk: the lanes that hold input (the same in every copied row) */
  if (chunks > 64) {  /* rows past 1024 floats: plain loops */
    for (int64_t r = r0; r < r1; r++) {
      float *row = dst + r * Wp;
      int64_t i = r - pt, j = 0;
      if (i >= 0 && i < H && len > 0)
        for (const float *xr = x + i * W - pl; j < pl + len; j++) row[j] = j < pl ? 0.0f : xr[j];
      for (; j < Wp; j++) row[j] = 0.0f;
    }
    return;
  }
  for (int64_t c = 0; c < chunks; c++) {
    int64_t a = pl - 16 * c, b = pl + len - 16 * c; /* lanes [a, b) */
    a = a < 0 ? 0 : a > 16 ? 16 : a, b = b < 0 ? 0 : b > 16 ? 16 : b;
    load[c] = a < b ? (__mmask16)(((1u << b) - 1) & ~((1u << a) - 1)) : 0;
  }
  const __mmask16 last = (__mmask16)((1u << (Wp - 16 * (chunks - 1))) - 1);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t r = r0; r < r1; r++) {
    float *row = dst + r * Wp;
    int64_t i = r - pt;
    int copy = i >= 0 && i < H && len > 0;
    /* xr[j]: input column j - pl, read only inside the masks (a masked-off lane reads nothing) */
    const float *xr = copy ? x + i * W - pl : x;
    /* Whole stores but the row's last: what passes its end is the next
     * row's, stored after it; the range's last row ends masked. */
    for (int64_t c = 0; c + 1 < chunks; c++)
      _mm512_storeu_ps(row + 16 * c, copy ? _mm512_maskz_loadu_ps(load[c], xr + 16 * c) : zero);
    __m512 s = copy ? _mm512_maskz_loadu_ps(load[chunks - 1], xr + 16 * (chunks - 1)) : zero;
    if (r + 1 < r1)
      _mm512_storeu_ps(row + 16 * (chunks - 1), s);
    else
      _mm512_mask_storeu_ps(row + 16 * (chunks - 1), last, s);
  }
}

/* Rows [r0, r1) of image x's copy dst: padded (vc_pad_rows) or, for a
 * strided 1x1 convolution, subsampled: row r holds input row r * sub_h at
 * columns 0, sub_w, 2 sub_w, ... (the only ones a tap reads), zeros past OW. */
__attribute__((optimize("no-tree-loop-distribute-patterns")))
static void vc_copy_rows(const vconv_args *v, const float *x, float *dst, int64_t r0, int64_t r1) {
  if (!v->sub_h) {
    vc_pad_rows(v, x, dst, r0, r1);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    float *row = dst + r * v->Wp;
    const float *xr = x + r * v->sub_h * v->W;
    int64_t j = 0;
    if (v->sub_w == 2) /* a constant stride the compiler can shuffle */
      for (; j < v->OW; j++) row[j] = xr[2 * j];
    else
      for (; j < v->OW; j++) row[j] = xr[j * v->sub_w];
    for (; j < v->Wp; j++) row[j] = 0.0f;
  }
}

static void vc_pad_channel(const vconv_args *v, const float *x, float *dst) { vc_copy_rows(v, x, dst, 0, v->Hp); }


/* One tile's partial sums: out[p][16Q] = (out[p][16Q] if add, else 0) +
 * the steps [k0, k0 + K) (vc_steps_at, w the group's weight). */
static inline __attribute__((always_inline)) void vc_tile(const vconv_args *v, const float *xp, const float *w,
                                                          int64_t k0, int64_t K, int64_t oh, int64_t ow0, float *out,
                                                          int add, const char *pf, int64_t pfs, const int P,
                                                          const int Q, const int SW) {
  kiln_vec acc[16][4];
  for (int p = 0; p < P; p++)
    for (int q = 0; q < Q; q++)
      if (add)
        __builtin_memcpy(&acc[p][q], out + (p * Q + q) * 16, sizeof acc[p][q]);
      else
        acc[p][q] = (kiln_vec){0};
  vc_steps_at(acc, v, xp, w, k0, K, oh, ow0, pf, pfs, P, Q, SW);
  for (int p = 0; p < P; p++)
    for (int q = 0; q < Q; q++) __builtin_memcpy(out + (p * Q + q) * 16, &acc[p][q], sizeof acc[p][q]);
}

/* f(args..., P, Q, SW) for v's tile shape and stride: one instance of f
 * per shape and stride, so its loops unroll into registers. */
#define VC_BY_SHAPE(v, f, ...)                                                     \
  do {                                                                             \
    if ((v)->P == 7)                                                               \
      (v)->sw == 1 ? f(__VA_ARGS__, 7, 4, 1) : f(__VA_ARGS__, 7, 4, 2);           \
    else if ((v)->P == 14)                                                         \
      (v)->sw == 1 ? f(__VA_ARGS__, 14, 2, 1) : f(__VA_ARGS__, 14, 2, 2);         \
    else if ((v)->P == 8)                                                          \
      (v)->sw == 1 ? f(__VA_ARGS__, 8, 2, 1) : f(__VA_ARGS__, 8, 2, 2);           \
    else                                                                           \
      (v)->sw == 1 ? f(__VA_ARGS__, 16, 1, 1) : f(__VA_ARGS__, 16, 1, 2);         \
  } while (0)

/* Steps [k0, k0 + kc) of the tile of channel group g, output row oh,
 * pixels from ow0, into (add: onto) out[P][16Q]. */
static void vc_tile_steps(const vconv_args *v, const float *img, int64_t g, int64_t oh, int64_t ow0, int64_t k0,
                          int64_t kc, float *out, int add, const char *pf, int64_t pfs) {
  const float *w = v->Wv + g * v->K * 16 * v->Q;
  VC_BY_SHAPE(v, vc_tile, v, vc_corner(v, img, oh, ow0), w, k0, kc, oh, ow0, out, add, pf, pfs);
}


/* The finished tile out[P][16Q] (sums without the bias) stored (vc_emit_vector). */
static void vc_tile_emit(const vconv_args *v, const float *out, int64_t n, int64_t g, int64_t oh, int64_t ow0) {
  if (v->pool) {
    for (int64_t q = 0; q < v->Q; q++) {
      __m512 r[16], b = vc_bias16(v, g * 16 * v->Q + 16 * q);
      for (int64_t p = 0; p < v->P; p++) r[p] = _mm512_add_ps(_mm512_load_ps(out + (p * v->Q + q) * 16), b);
      vc_pool_vector(v, r, n, g, q, ow0, (int)v->P); /* r holds P pixels, not 16 */
    }
    return;
  }
  for (int64_t q = 0; q < v->Q; q++) {
    __m512 r[16];
    for (int64_t p = 0; p < 16; p++) r[p] = p < v->P ? _mm512_load_ps(out + (p * v->Q + q) * 16) : _mm512_setzero_ps();
    if (v->P <= 8)
      vc_emit_vector(v, r, n, g, q, oh, ow0, 1, 1);
    else
      vc_emit_vector(v, r, n, g, q, oh, ow0, 1, 0);
  }
}

/* The lines this tile's store will write (and its residual's, read),
 * fetched before its steps, which take long enough to hide them: a tile
 * stores a few pixels into each of 16Q channel planes, a pattern the
 * hardware prefetchers do not follow (cold outputs, C harness, two
 * threads: ResNet-50's 256 -> 1024 + residual at 14 x 14 265 -> 227 us, its
 * strided 256 -> 512 at 56 605 -> 549; the others within 1%; either
 * prefetch alone gained little or lost; the model 0.99x, worker pairs). */
static inline __attribute__((always_inline)) void vc_prefetch_out(const vconv_args *v, int64_t n, int64_t g,
                                                                  int64_t oh, int64_t ow0, const int P, const int Q) {
  int64_t last = (v->OW - ow0 < P ? v->OW - ow0 : P) - 1;
  for (int64_t f = g * 16 * Q, f1 = f + 16 * Q < v->F ? f + 16 * Q : v->F; f < f1; f++) {
    int64_t o = ((n * v->F + f) * v->OH + oh) * v->OW + ow0;
    if (v->res) __builtin_prefetch(v->res + o), __builtin_prefetch(v->res + o + last);
    __builtin_prefetch(v->Y + o, 1), __builtin_prefetch(v->Y + o + last, 1);
  }
}

/* The whole tile (every step) in registers, from the bias, and stored from
 * them (no round trip through memory between the sums and the transpose). */
static inline __attribute__((always_inline)) void vc_tile_whole(const vconv_args *v, const float *img, int64_t n,
                                                                int64_t g, int64_t oh, int64_t ow0, const char *pf,
                                                                int64_t pfs, const int P, const int Q, const int SW) {
  kiln_vec acc[16][4];
  for (int q = 0; q < Q; q++) {
    __m512 b = vc_bias16(v, g * 16 * Q + 16 * q);
    for (int p = 0; p < P; p++) acc[p][q] = (kiln_vec)b;
  }
  const float *xp = vc_corner(v, img, oh, ow0);
  /* Opaque to the optimizer: else gcc folds the pixel offsets p * SW into
   * the row's index arithmetic, one register per pixel (1.17x the time). */
  __asm__("" : "+r"(xp));
  if (!v->pool) vc_prefetch_out(v, n, g, oh, ow0, P, Q);
  vc_steps_at(acc, v, xp, v->Wv + g * v->K * 16 * Q, 0, v->K, oh, ow0, pf, pfs, P, Q, SW);
  if (v->pool) {
    for (int q = 0; q < Q; q++) {
      __m512 r[16];
      for (int p = 0; p < P; p++) r[p] = (__m512)acc[p][q];
      vc_pool_vector(v, r, n, g, q, ow0, P);
    }
    return;
  }
  for (int q = 0; q < Q; q++) {
    __m512 r[16];
    for (int p = 0; p < 16; p++) r[p] = p < P ? (__m512)acc[p][q] : _mm512_setzero_ps();
    vc_emit_vector(v, r, n, g, q, oh, ow0, 0, P <= 8);
  }
}

/* The whole tile, stored (vc_tile_whole for this tile shape and stride). */
static void vc_tile_store(const vconv_args *v, const float *img, int64_t n, int64_t g, int64_t oh, int64_t ow0,
                          const char *pf, int64_t pfs) {
  VC_BY_SHAPE(v, vc_tile_whole, v, img, n, g, oh, ow0, pf, pfs);
}

/* Tile i of n's share of the weight block [next, next + bytes) to fetch
 * into L2 over its steps steps: *pf its start, *pfs the bytes a step; with
 * no next block, a line the tile reads anyway (w) and no stride.  In a
 * model the weights (ResNet-50's 100 MB) come from memory, and a block's
 * first tile waited for them (512 -> 2048 at 7 x 7 took 228 us warm, 307
 * with its 4 MB cold: 228 + 4 MB at 50 GB/s); one prefetch a step spread
 * over the tiles before keeps that stream beside the FMAs (cold C harness,
 * two threads: 0.83x there, 0.92x for 2048 -> 512, 0.94x for 1024 -> 512 at
 * 14 and the strided 512 -> 1024; warm 1.00-1.02x; all at once before a
 * tile, hundreds of prefetches gained nothing). */
static inline void vc_pf_part(const float *next, int64_t bytes, int64_t i, int64_t n, int64_t steps, const float *w,
                              const char **pf, int64_t *pfs) {
  if (next == NULL || n <= 0 || steps <= 0) {
    *pf = (const char *)w, *pfs = 0;
    return;
  }
  int64_t share = (bytes + n - 1) / n;
  *pf = (const char *)next + share * i, *pfs = (share + steps - 1) / steps;
}

/* The weight block tiles read after group g's steps [k0, k0 + kc): the
 * group's next block, else the next group's first (the next task's, on
 * this thread when the groups are shared out in ranges); NULL after the
 * last.  *bytes its size. */
static const float *vc_next_weight(const vconv_args *v, int64_t g, int64_t k0, int64_t kc, int64_t *bytes) {
  int64_t width = 16 * v->Q, k = k0 + kc;
  if (k >= v->K) {
    if (++g >= v->groups) return NULL;
    k = 0;
  }
  *bytes = (v->K - k < v->kstep ? v->K - k : v->kstep) * width * (int64_t)sizeof(float);
  return v->Wv + (g * v->K + k) * width;
}

/* Channel group g's tiles of rows [r0, r1) with the steps in blocks of
 * v->kstep: each block of the group's weight is used for every tile while
 * in L2 (whole, a 3x3 512-channel group's 1.2 MiB came from L3 once per
 * output row), the tiles' sums kept in sums between blocks. */
static void vc_group_kblocked(const vconv_args *v, const float *img, int64_t n, int64_t g, int64_t r0, int64_t r1,
                              int64_t t0, int64_t t1, float *sums) {
  int64_t tile = v->P * 16 * v->Q, nt = t1 - t0;
  for (int64_t k0 = 0; k0 < v->K; k0 += v->kstep) {
    int64_t kc = v->K - k0 < v->kstep ? v->K - k0 : v->kstep, bytes = 0, i = 0, tiles = (r1 - r0) * nt;
    const float *next = vc_next_weight(v, g, k0, kc, &bytes);
    for (int64_t oh = r0; oh < r1; oh++)
      for (int64_t t = t0; t < t1; t++, i++) {
        const char *pf;
        int64_t pfs;
        vc_pf_part(next, bytes, i, tiles, kc, v->Wv, &pf, &pfs);
        vc_tile_steps(v, img, g, oh, t * v->P, k0, kc, sums + ((oh - r0) * nt + t - t0) * tile, k0 > 0, pf, pfs);
      }
  }
  for (int64_t oh = r0; oh < r1; oh++)
    for (int64_t t = t0; t < t1; t++)
      vc_tile_emit(v, sums + ((oh - r0) * nt + t - t0) * tile, n, g, oh, t * v->P);
}

/* The tiles [t0, t1) of each output row in [r0, r1) of image n (padded
 * copy img), channel groups [g0, g1).  Rows outer when the image is the
 * bigger operand (it is then read once, the weight once per row), groups
 * outer otherwise. */
static void vc_tiles(const vconv_args *v, const float *img, int64_t n, int64_t g0, int64_t g1, int64_t r0,
                     int64_t r1, int64_t t0, int64_t t1) {
  if (v->rows_outer) {
    for (int64_t oh = r0; oh < r1; oh++)
      for (int64_t g = g0; g < g1; g++)
        for (int64_t t = t0; t < t1; t++) vc_tile_store(v, img, n, g, oh, t * v->P, (const char *)v->Wv, 0);
  } else if (v->kstep < v->K && (r1 - r0) * (t1 - t0) * v->P * 16 * v->Q <= VC_SUMS) {
    float sums[VC_SUMS] __attribute__((aligned(64)));
    for (int64_t g = g0; g < g1; g++) vc_group_kblocked(v, img, n, g, r0, r1, t0, t1, sums);
  } else {
    for (int64_t g = g0; g < g1; g++) {
      int64_t bytes = 0, i = 0, nt = (r1 - r0) * (t1 - t0);
      const float *next = vc_next_weight(v, g, 0, v->K, &bytes);
      for (int64_t oh = r0; oh < r1; oh++)
        for (int64_t t = t0; t < t1; t++, i++) {
          const char *pf;
          int64_t pfs;
          vc_pf_part(next, bytes, i, nt, v->K, v->Wv, &pf, &pfs);
          vc_tile_store(v, img, n, g, oh, t * v->P, pf, pfs);
        }
    }
  }
}

/* The image the tiles of image n read: in place, X's own (there is no
 * v->pad); else its copy's rows [p0, p1), every channel, made in this
 * thread's buffer (at its kiln_worker_slot, so it stays in L2). */
static const float *vc_image(const vconv_args *v, int64_t n, int64_t p0, int64_t p1) {
  if (v->in_place || v->unpadded) return v->X + n * v->simg;
  float *copy = v->pad + kiln_worker_slot() * v->simg;
  for (int64_t c = 0; c < v->C; c++)
    vc_copy_rows(v, v->X + (n * v->C + c) * v->H * v->W, copy + c * v->Hp * v->Wp, p0, p1);
  return copy;
}

/* Per-image path, tasks [lo, hi): image t copied whole (vc_image), then all
 * of its tiles. */
static void vc_images(void *ctx, int64_t lo, int64_t hi) {
  const vconv_args *v = ctx;
  for (int64_t n = lo; n < hi; n++) vc_tiles(v, vc_image(v, n, 0, v->Hp), n, 0, v->groups, 0, v->OH, 0, v->tiles);
}

/* Two-pass path, first pass, tasks [lo, hi): task t is (image, channel). */
static void vc_pad_tasks(void *ctx, int64_t lo, int64_t hi) {
  const vconv_args *v = ctx;
  for (int64_t t = lo; t < hi; t++) vc_pad_channel(v, v->X + t * v->H * v->W, v->pad + t * v->Hp * v->Wp);
}

/* Two-pass path, second pass, tasks [lo, hi): task t is (image, channel
 * group or, rows outer, all of them, chunk of rows_per_task output rows,
 * chunk of tiles_per_task tiles of each). */
static void vc_row_tasks(void *ctx, int64_t lo, int64_t hi) {
  const vconv_args *v = ctx;
  int64_t chunks = (v->OH + v->rows_per_task - 1) / v->rows_per_task, gtasks = v->rows_outer ? 1 : v->groups;
  int64_t tchunks = (v->tiles + v->tiles_per_task - 1) / v->tiles_per_task;
  for (int64_t t = lo; t < hi; t++) {
    int64_t tc = t % tchunks, chunk = t / tchunks % chunks, g = t / (tchunks * chunks) % gtasks;
    int64_t n = t / (tchunks * chunks * gtasks);
    int64_t r0 = chunk * v->rows_per_task, r1 = r0 + v->rows_per_task < v->OH ? r0 + v->rows_per_task : v->OH;
    int64_t t0 = tc * v->tiles_per_task, t1 = t0 + v->tiles_per_task < v->tiles ? t0 + v->tiles_per_task : v->tiles;
    const float *img = (v->in_place || v->unpadded ? v->X : v->pad) + n * v->simg;
    vc_tiles(v, img, n, v->rows_outer ? 0 : g, v->rows_outer ? v->groups : g + 1, r0, r1, t0, t1);
  }
}

/* Banded path, tasks [lo, hi): task t is (image, chunk of rows_per_task
 * output rows); the padded rows its tiles read (vc_image), then the tiles
 * of every group. */
static void vc_band_tasks(void *ctx, int64_t lo, int64_t hi) {
  const vconv_args *v = ctx;
  int64_t chunks = (v->OH + v->rows_per_task - 1) / v->rows_per_task;
  for (int64_t t = lo; t < hi; t++) {
    int64_t n = t / chunks, r0 = t % chunks * v->rows_per_task;
    int64_t r1 = r0 + v->rows_per_task < v->OH ? r0 + v->rows_per_task : v->OH;
    int64_t p0 = r0 * v->sh, p1 = (r1 - 1) * v->sh + (v->KH - 1) * v->dh + 1;
    vc_tiles(v, vc_image(v, n, p0, p1), n, 0, v->groups, r0, r1, 0, v->tiles);
  }
}

/* Whether the planes of C channels, plane_bytes apart, crowd L1's sets:
 * their offsets modulo 4 KiB (a way of a 64-set L1) take 4096 / gcd(plane
 * bytes, 4096) values, and a tile reads each of its rows in every channel,
 * so more than 8 channels an offset overfill the sets of their lines.  The
 * bench CNN's 32 x 32 planes (4 KiB): its 32 -> 64 layer took 1.07x the
 * time unpadded that it takes on the padded copy (whose rows are 33 wide),
 * while on 28 x 28 planes it took 0.87x. */
static int vc_crowded(int64_t C, int64_t plane_bytes) {
  int64_t a = 4096, b = plane_bytes % 4096;
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return C > 8 * (4096 / a);
}

/* The weight (F x K) as groups of 16Q channels, each [K][16Q]. */
static void vc_pack1(float *dst, const float *w, int64_t K, int64_t F, int64_t ld) { pack_panels(dst, w, K, F, 16, 1, ld); }
static void vc_pack2(float *dst, const float *w, int64_t K, int64_t F, int64_t ld) { pack_panels(dst, w, K, F, 32, 1, ld); }
static void vc_pack4(float *dst, const float *w, int64_t K, int64_t F, int64_t ld) { pack_panels(dst, w, K, F, 64, 1, ld); }

/* The tile shape for an output of width OW and F channels: the one whose
 * tiles waste the least (pixels past OW, channels past F), 14 x 2 first;
 * 0 when even that wastes a quarter.  From the geometry alone, so one
 * weight always takes one path (its packing slot holds one layout). */
static int vc_shape(int64_t OW, int64_t F, int64_t *P, int64_t *Q) {
  static const int shapes[4][2] = {{14, 2}, {7, 4}, {8, 2}, {16, 1}};
  double best = 0.0;
  for (int i = 0; i < 4; i++) {
    int64_t p = shapes[i][0], q = shapes[i][1];
    double used = (double)OW / ((OW + p - 1) / p * p) * F / ((F + 16 * q - 1) / (16 * q) * 16 * q);
    if (used > best + 1e-9) best = used, *P = p, *Q = q;
  }
  return best >= 0.75;
}

int kiln_vconv(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
               int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, const float *X,
               const float *Wt, const float *bias, const float *res, int accumulate, int relu, float *Y,
               int32_t threads, int64_t slot, float *pool) {
  vconv_args v = {0};
  /* Pool mode sums ReLU(conv + bias) alone: no residual, no accumulation. */
  if (pool && (res || accumulate)) return 0;
  v.K = C * KH * KW;
  /* Stride 2, and K of at least VC_MINK, below which the transposing store
   * weighs too much (ResNet-50's 7x7 stem, K = 147: 1.19x the direct path).
   * Stride 1 when the direct path's wide grid, in whole 32-column panels,
   * computes a tenth more than the outputs (ResNet-50's 3x3 layers at 28,
   * 14 and 7 wide: 1.10, 1.14, 1.31; at 56 1.04), and the weight is the
   * bigger operand (groups outer, so its blocks stay in L2: below). */
  int flat = KH == 1 && KW == 1 && sh == 1 && sw == 1 && H == 1 && OH == 1 && pt == 0 && pl == 0;
  int64_t wide = (OH * (OW + (KW - 1) * dw) + 31) / 32 * 32;
  int s1 = !flat && sh == 1 && sw == 1 && (double)wide > 1.1 * (double)(OH * OW);
  if ((!flat && !s1 && (sh != 2 || sw != 2)) || v.K < VC_MINK || v.K > VC_MAXK || !vc_shape(OW, F, &v.P, &v.Q))
    return 0;
  v.tiles = (OW + v.P - 1) / v.P;
  /* A strided 1x1 reads a quarter of its input: its copy holds only that,
   * and the tiles run on it at stride 1 (ResNet-50's 1x1 stride-2 layers
   * 0.88-0.96x, same-library C harness; the model 0.955x, worker pairs). */
  if (KH == 1 && KW == 1 && pt == 0 && pl == 0 && (sh > 1 || sw > 1)) {
    v.sub_h = sh, v.sub_w = sw;
    sh = sw = 1;
  }
  /* The last tile of a row reads up to P - 1 pixels past OW: the pitch covers them. */
  v.Hp = (OH - 1) * sh + (KH - 1) * dh + 1;
  v.Wp = (v.tiles * v.P - 1) * sw + (KW - 1) * dw + 1;
  v.simg = C * v.Hp * v.Wp;
  /* The offsets are 32-bit, and the padded copies need memory: both are
   * checked before the weight is packed, since a slot packed in this layout
   * leaves the other paths unpacked.  Whole images per thread when they
   * share the pool evenly.  Else, for a small image whose tasks take every
   * group (rows outer), bands of rows: each task pads the rows its tiles
   * read into its part's buffer (vc_band_tasks; the bench CNN's 32 -> 64
   * layer at batch 1 60 -> 54 us, at batch 3 0.94x: one handoff to the pool
   * fewer, and no padded rows crossing between the cores' caches; ResNet-50's
   * 1.6 MiB images were 1.01-1.07x, so they keep the next way).  Else every
   * image padded first and the tiles split over (image, group, rows). */
  if (v.simg > INT32_MAX) return 0;
  /* Stride 1 gains only with the weight in blocks: it is taken when the
   * weight is the bigger operand (groups outer).  A flattened pointwise
   * convolution (one row) whose image is the bigger one runs its chunks of
   * tiles through every group (ResNet-50's 512 -> 128 at 28 x 28). */
  v.rows_outer = v.simg > F * v.K;
  if (s1 && v.rows_outer) return 0;
  /* No padding, no subsampling and no pitch past W (the flattened pointwise
   * convolutions: ResNet-50's 14 x 14 and 7 x 7 ones are whole tiles of 7):
   * the tiles read X itself.  So they do, unpadded, for a stride-2 3-wide
   * window whose padding reaches no pixel of a tile but the row's first and
   * last, with whole tiles of one or two channel vectors a row (14 x 2,
   * 8 x 2, 16 x 1; vc_steps_box: each tile
   * takes only its taps inside X) on planes that do not crowd L1
   * (vc_crowded): no copy, and no pass over the pool to make it.  ResNet-50's
   * 128-channel layer at 56 -> 28 wide, one thread, 0.95x; in the model
   * 525-544 -> 491-496 us, its 256-channel one at 28 0.96x alone, even in
   * the model; the model 0.988x (worker pairs, 15 of 16 rounds).  Left
   * padded: 7 x 4 tiles (the 512-channel layer at 14 took 1.09x: 28
   * accumulators and the boundary variants' FMAs left gcc short of
   * registers) and stride 1 (256 channels at 14 x 14 1.05x: its small
   * copy keeps the rows close together).  KILN_VCONV_UNPADDED=0 keeps the
   * copy everywhere. */
  static int unpadded_on = -1;
  v.in_place = pt == 0 && pl == 0 && !v.sub_h && v.Hp == H && v.Wp == W;
  /* Taps kw < kwl miss the row's first pixel, kw >= kwr its last. */
  v.kwl = (pl + dw - 1) / dw, v.kwr = (W + pl - (OW - 1) * sw + dw - 1) / dw;
  v.kwl = v.kwl < KW ? v.kwl : KW, v.kwr = v.kwr < 0 ? 0 : v.kwr < KW ? v.kwr : KW;
  v.unpadded = !v.in_place && !s1 && KW == 3 && v.Q <= 2 && v.kwl <= 1 && v.kwr >= 2 && v.tiles * v.P == OW &&
               sw >= pl && (KW - 1) * dw - pl < W && (OW - 1) * sw >= pl && (OW - 2) * sw - pl + (KW - 1) * dw < W &&
               !vc_crowded(C, H * W * (int64_t)sizeof(float)) && kiln_switch_on("KILN_VCONV_UNPADDED", &unpadded_on);
  if (v.unpadded) v.Hp = H, v.Wp = W, v.simg = C * H * W;
  int64_t kblocks = (v.K * 16 * v.Q * (int64_t)sizeof(float) + VC_KBLOCK_BYTES - 1) / VC_KBLOCK_BYTES;
  v.kstep = (v.K + kblocks - 1) / kblocks;
  /* Unpadded, a block of the steps is whole channels (vc_steps_box). */
  if (v.unpadded) v.kstep = (C + kblocks - 1) / kblocks * KH * KW;
  int per_image = batch >= 2 * threads || batch % threads == 0;
  /* (A flattened row has nothing to pad: its chunks of tiles take the row tasks.) */
  int banded = !per_image && !flat && !v.unpadded && v.rows_outer &&
               v.simg * (int64_t)sizeof(float) <= VC_BAND_BYTES;
  /* Else per image and banded, a padded copy per pool thread (kiln_worker_slot); else one per image. */
  int64_t copies = v.in_place || v.unpadded ? 0 : per_image || banded ? kiln_pool_threads() : batch;
  if (copies && (v.pad = kiln_thread_scratch((size_t)(copies * v.simg) * sizeof(float))) == NULL) return 0;
  kiln_pack_fn pack = v.Q == 4 ? vc_pack4 : v.Q == 2 ? vc_pack2 : vc_pack1;
  int64_t width = 16 * v.Q;
  v.groups = (F + width - 1) / width;
  v.Wv = kiln_slot_packed(slot, KILN_PACK_V + v.Q, Wt, v.K, F, v.K, v.groups * width * v.K, pack);
  if (v.Wv == NULL) return 0;
  v.batch = batch, v.F = F, v.C = C, v.H = H, v.W = W, v.KH = KH, v.KW = KW, v.OH = OH, v.OW = OW;
  v.sh = sh, v.sw = sw, v.dh = dh, v.dw = dw, v.pt = pt, v.pl = pl;
  v.X = X, v.bias = bias, v.res = res, v.Y = Y, v.accumulate = accumulate, v.relu = relu;
  v.pool = pool, v.pool_ld = kiln_pool_ld(F);
  int32_t koff[VC_MAXK];
  for (int64_t c = 0, k = 0; c < C && !v.unpadded; c++)
    for (int64_t kh = 0; kh < KH; kh++)
      for (int64_t kw = 0; kw < KW; kw++, k++) koff[k] = (int32_t)((c * v.Hp + kh * dh) * v.Wp + kw * dw);
  v.koff = koff;
  if (per_image) {
    kiln_parallel_for(vc_images, &v, batch, kiln_parts(batch, threads));
    return 1;
  }
  /* Bands of rows two a thread, not four: each band pads the rows its taps
   * reach, (rows - 1) * stride + KH of them, so short bands copy more (the
   * bench CNN's 32 -> 64 layer at batch 1: 0.94-0.975x, three runs). */
  int64_t want = (banded ? 2 : 4) * (int64_t)threads, have = batch * (v.rows_outer ? 1 : v.groups);
  v.rows_per_task = have >= want ? OH : OH * have / want > 0 ? OH * have / want : 1;
  int64_t row_tasks = have * ((OH + v.rows_per_task - 1) / v.rows_per_task);
  /* A flattened pointwise convolution is one row: its tasks are chunks of
   * tiles (ResNet-50's 1024 -> 256 at 14 x 14 had been 4 tasks, one per
   * channel group: on 16 threads of a Xeon 590-640 -> 245 us). */
  int64_t tchunks = OH == 1 && row_tasks < want ? (want + row_tasks - 1) / row_tasks : 1;
  if (tchunks > v.tiles) tchunks = v.tiles;
  v.tiles_per_task = (v.tiles + tchunks - 1) / tchunks;
  int64_t tasks = row_tasks * ((v.tiles + v.tiles_per_task - 1) / v.tiles_per_task);
  if (banded) {
    kiln_parallel_for(vc_band_tasks, &v, tasks, kiln_parts(tasks, threads));
    return 1;
  }
  /* Rows: one range per thread, whose consecutive tasks share a channel
   * group's weight (in kiln_parts ranges the Xeon's stride-2 3x3 at 56 wide
   * took 290-300 -> 360-385 us); chunks of tiles in kiln_parts ranges, as
   * measured above. */
  if (!v.in_place && !v.unpadded) kiln_parallel_for(vc_pad_tasks, &v, batch * C, batch * C < threads ? batch * C : threads);
  int64_t parts = tchunks > 1 ? kiln_parts(tasks, threads) : tasks < threads ? tasks : threads;
  kiln_parallel_for(vc_row_tasks, &v, tasks, parts);
  return 1;
}

#else

int kiln_vconv(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
               int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, const float *X,
               const float *Wt, const float *bias, const float *res, int accumulate, int relu, float *Y,
               int32_t threads, int64_t slot, float *pool) {
  (void)pool, (void)batch, (void)F, (void)C, (void)H, (void)W, (void)KH, (void)KW, (void)OH, (void)OW, (void)sh, (void)sw;
  (void)dh, (void)dw, (void)pt, (void)pl, (void)X, (void)Wt, (void)bias, (void)res, (void)accumulate, (void)relu;
  (void)Y, (void)threads, (void)slot;
  return 0;
}

#endif

/* Y[n, f] = (sum over the output pixels of kiln_conv2d's output [n, f]) /
 * divisor: a convolution (+ bias, ReLU, residual) whose only reader is a
 * global average (divisor OH * OW) or sum (1) pool, Y [batch, F]
 * contiguous; beta must be 0.  Where kiln_conv2d's dispatch hands the
 * geometry to the channel-vector tiles (above) without a residual, the tiles
 * sum their pixels in registers and nothing else is stored (the bench
 * CNN's 32 -> 64 layer and its pool); otherwise the convolution's output
 * goes to this thread's second buffer (kept across calls) and is summed
 * from there. */
void kiln_conv2d_mean(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,
                      int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt,
                      int64_t pl, int64_t X, int64_t Wt, int64_t bias, int64_t res, float beta, int32_t relu,
                      int64_t Y, int32_t threads, int64_t slot, float divisor) {
  float *out = (float *)Y;
  if (beta == 0.0f && res == 0) {
    int64_t ld = kiln_pool_ld(F), parts = kiln_pool_threads();
    float *sums = calloc((size_t)(parts * batch * ld), sizeof(float));
    if (sums != NULL && kiln_conv2d_into(batch, F, C, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl, X, Wt, bias, 0,
                                         0.0f, relu, 0, threads, slot, sums)) {
      for (int64_t n = 0; n < batch; n++)
        for (int64_t f = 0; f < F; f++) {
          float s = 0.0f;
          for (int64_t t = 0; t < parts; t++) s += sums[(t * batch + n) * ld + f];
          out[n * F + f] = s / divisor;
        }
      free(sums);
      return;
    }
    free(sums);
  }
  /* The whole batch at once, else (no memory for that) an image at a time. */
  int64_t plane = OH * OW, step = batch;
  float *full = kiln_thread_buffer(1, (size_t)(batch * F * plane) * sizeof(float));
  if (full == NULL) full = kiln_thread_buffer(1, (size_t)(F * plane) * sizeof(float)), step = 1;
  if (full == NULL) {
    fputs("kiln_conv2d_mean: out of memory for the convolution's output\n", stderr);
    abort(); /* as a failed allocation in the generated code would, but with a message */
  }
  for (int64_t n0 = 0; n0 < batch; n0 += step) {
    int64_t xs = C * H * W * n0, ys = F * plane * n0;
    kiln_conv2d_into(step, F, C, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl, X + xs * (int64_t)sizeof(float), Wt,
                     bias, res ? res + ys * (int64_t)sizeof(float) : 0, beta, relu, (int64_t)full, threads, slot, NULL);
    for (int64_t i = 0; i < step * F; i++) {
      const float *p = full + i * plane;
      kiln_vec acc = {0};
      int64_t j = 0;
      for (; j + KILN_VW <= plane; j += KILN_VW) acc += kiln_loadu(p + j);
      float s = 0.0f;
      for (int l = 0; l < KILN_VW; l++) s += acc[l];
      for (; j < plane; j++) s += p[j];
      out[n0 * F + i] = s / divisor;
    }
  }
}
