/*
 * kiln_vconv.c's register tiles (see its header): the arguments every tile
 * reads, the steps of a tile (over a padded copy's offset table, or over X
 * itself with the padding's taps left out), and the transposing store of a
 * finished tile.  Static inline, AVX-512 only: kiln_vconv.c alone includes
 * it, so each tile shape gets its own specialized copies.
 */
#ifndef KILN_VTILE_H
#define KILN_VTILE_H

#include <immintrin.h>
#include <stdint.h>

#include "kiln_native.h"

typedef struct {
  int64_t batch, F, C, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl;
  int64_t P, Q, tiles, groups; /* tile shape; tiles per output row; channel groups of 16Q */
  int64_t K, Hp, Wp, simg;     /* reduction steps; the padded image's rows, pitch and floats */
  int64_t rows_per_task;       /* two-pass path: output rows per product task */
  int64_t tiles_per_task;      /* two-pass path: tiles of a row per product task (tiles: whole rows) */
  int64_t kstep;               /* steps per block of a group's weight (groups outer; K: one block) */
  int64_t sub_h, sub_w;        /* a strided 1x1's strides, its copy subsampled (then sh = sw = 1); else 0 */
  int rows_outer;              /* 1: each output row for every channel group before the next row */
  int in_place;                /* 1: the padded image would be X's image itself: no copies */
  int unpadded;                /* 1: the tiles read X itself, only taps inside it (vc_steps_box) */
  int64_t kwl, kwr;            /* unpadded: taps kw < kwl miss the first tile's first pixel, kw >= kwr the
                                  last tile's last */
  const float *X, *Wv, *bias, *res;
  float *Y, *pad;
  float *pool;         /* pool mode: partial sums [pool thread][image][pool_ld], else NULL */
  int64_t pool_ld;
  const int32_t *koff; /* offset of step k = (c, kh, kw) in a padded image */
  int accumulate, relu;
} vconv_args;

/* r[0..8) (pixel p's 16 channels) so that r[i] holds channel i's 8 pixels
 * in its low half and channel i + 8's in its high half: 24 shuffles where
 * kiln_transpose16 of the same 8 rows padded with zeros takes 64.  Pairs of rows
 * interleaved, then pairs of pairs within each 128-bit lane (lane L holds
 * channels 4L..4L+3), then the lanes gathered across two registers. */
static inline void transpose8x16(__m512 r[8]) {
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  __m512 t[8], s[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) { /* s[i + k], lane L: channel 4L + k, pixels i..i+3 */
    s[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    s[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
    s[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    s[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int k = 0; k < 4; k++) {
    r[k] = _mm512_permutex2var_ps(s[k], lo, s[k + 4]);     /* channels k, k + 8 */
    r[k + 4] = _mm512_permutex2var_ps(s[k], hi, s[k + 4]); /* channels k + 4, k + 12 */
  }
}

/* One step: acc[p][q] += xk[p * SW] * wk[16q..16q+16) for pixels p in
 * [p0, p1) (all constants, so every loop unrolls into registers), and a
 * prefetch of pf into L2 (vc_pf_part). */
static inline __attribute__((always_inline)) void vc_step(kiln_vec acc[16][4], const float *xk, const float *wk,
                                                          const char *pf, const int p0, const int p1, const int Q,
                                                          const int SW) {
  __builtin_prefetch(pf, 0, 2);
  kiln_vec wq[4];
  for (int q = 0; q < Q; q++) wq[q] = kiln_loadu(wk + 16 * q);
  for (int p = p0; p < p1; p++) {
    float xb = xk[p * SW]; /* scalar x vector: one broadcast load ((vec){0} + x adds a 0.0 first) */
    for (int q = 0; q < Q; q++) acc[p][q] += xb * wq[q];
  }
}

/* acc[p][q] += sum over k < K of xp[koff[k] + p * SW] * w[k][16q..16q+16)
 * for P pixels; step k also prefetches pf + k * pfs. */
static inline __attribute__((always_inline)) void vc_steps(kiln_vec acc[16][4], const float *xp, const float *w,
                                                           const int32_t *koff, int64_t K, const char *pf,
                                                           int64_t pfs, const int P, const int Q, const int SW) {
  for (int64_t k = 0; k < K; k++, pf += pfs) vc_step(acc, xp + koff[k], w + k * 16 * Q, pf, 0, P, Q, SW);
}

/* Which of a tile's taps lie inside X (v->unpadded): rows kh in [*kh0,
 * *kh1) for output row oh; for the row's first tile, taps kw < *kwl miss
 * its first pixel, for its last, kw >= *kwr its last (kiln_vconv checks
 * that no other pixel reaches the padding, and that kwl <= 1, kwr >= 2). */
static inline void vc_box(const vconv_args *v, int64_t oh, int64_t ow0, int64_t *kh0, int64_t *kh1, int64_t *kwl,
                          int64_t *kwr) {
  int64_t top = v->pt - oh * v->sh, bottom = v->H + v->pt - oh * v->sh; /* kh * dh in [top, bottom) */
  *kh0 = top > 0 ? (top + v->dh - 1) / v->dh : 0;
  *kh1 = bottom > 0 ? (bottom + v->dh - 1) / v->dh : 0;
  if (*kh1 > v->KH) *kh1 = v->KH;
  if (*kh0 > *kh1) *kh0 = *kh1;
  *kwl = ow0 == 0 ? v->kwl : 0;
  *kwr = ow0 + v->P >= v->OW ? v->kwr : v->KW;
}

/* The taps of channels [c0, c1) inside X of a window 3 wide (vc_box), in
 * the packed weight's order (w: channel 0's first), from X itself (xp at
 * the tile's top left tap, which may lie in the padding): the padded
 * copy's sums without its zeros.  FIRST: tap 0 misses the first pixel;
 * LAST: tap 2 the last (constants, as P, Q and SW, so the three taps
 * unroll: with the taps in loops bounded at run time, ResNet-50's
 * 256-channel stride-2 layer took 1.01x the padded copy's time, one
 * thread; unrolled 0.96x). */
static inline __attribute__((always_inline)) void vc_steps_box3(kiln_vec acc[16][4], const vconv_args *v,
                                                                const float *xp, const float *w, int64_t c0,
                                                                int64_t c1, int64_t kh0, int64_t kh1,
                                                                const char *pf, int64_t pfs, const int FIRST,
                                                                const int LAST, const int P, const int Q,
                                                                const int SW) {
  const int64_t plane = v->H * v->W, rstep = v->dh * v->W, dw = v->dw;
  for (int64_t c = c0; c < c1; c++)
    for (int64_t kh = kh0; kh < kh1; kh++, pf += 3 * pfs) {
      const float *xr = xp + c * plane + kh * rstep, *wr = w + (c * v->KH + kh) * 3 * 16 * Q;
      __asm__("" : "+r"(xr)); /* see vc_tile_whole */
      vc_step(acc, xr, wr, pf, FIRST, P, Q, SW);
      vc_step(acc, xr + dw, wr + 16 * Q, pf + pfs, 0, P, Q, SW);
      vc_step(acc, xr + 2 * dw, wr + 32 * Q, pf + 2 * pfs, 0, P - LAST, Q, SW);
    }
}

/* vc_steps_box3 for the tile at output row oh, pixels from ow0 (v->unpadded). */
static inline __attribute__((always_inline)) void vc_steps_box(kiln_vec acc[16][4], const vconv_args *v,
                                                               const float *xp, const float *w, int64_t c0,
                                                               int64_t c1, int64_t oh, int64_t ow0,
                                                               const char *pf, int64_t pfs, const int P,
                                                               const int Q, const int SW) {
  int64_t kh0, kh1, kwl, kwr;
  vc_box(v, oh, ow0, &kh0, &kh1, &kwl, &kwr);
  if (kwl && kwr < 3)
    vc_steps_box3(acc, v, xp, w, c0, c1, kh0, kh1, pf, pfs, 1, 1, P, Q, SW);
  else if (kwl)
    vc_steps_box3(acc, v, xp, w, c0, c1, kh0, kh1, pf, pfs, 1, 0, P, Q, SW);
  else if (kwr < 3)
    vc_steps_box3(acc, v, xp, w, c0, c1, kh0, kh1, pf, pfs, 0, 1, P, Q, SW);
  else
    vc_steps_box3(acc, v, xp, w, c0, c1, kh0, kh1, pf, pfs, 0, 0, P, Q, SW);
}

/* Steps [k0, k0 + K) of the tile at output row oh, pixels from ow0 (xp:
 * vc_corner), w its channel group's weight: through the padded copy's
 * offset table, or unpadded over the steps' channels (K blocks are whole
 * channels there). */
static inline __attribute__((always_inline)) void vc_steps_at(kiln_vec acc[16][4], const vconv_args *v,
                                                              const float *xp, const float *w, int64_t k0, int64_t K,
                                                              int64_t oh, int64_t ow0, const char *pf, int64_t pfs,
                                                              const int P, const int Q, const int SW) {
  int64_t taps = v->KH * v->KW;
  if (v->unpadded)
    vc_steps_box(acc, v, xp, w, k0 / taps, (k0 + K) / taps, oh, ow0, pf, pfs, P, Q, SW);
  else
    vc_steps(acc, xp, w + k0 * 16 * Q, v->koff + k0, K, pf, pfs, P, Q, SW);
}

/* The top left tap of the tile at output row oh, pixels from ow0, in the
 * image img: in the padded copy, or in X itself (v->unpadded), where it
 * may lie in the padding (only taps inside X are read). */
static inline const float *vc_corner(const vconv_args *v, const float *img, int64_t oh, int64_t ow0) {
  if (v->unpadded) return img + (oh * v->sh - v->pt) * v->W + ow0 * v->sw - v->pl;
  return img + oh * v->sh * v->Wp + ow0 * v->sw;
}

/* p[o..] under mask lo and p[o8..] under mask hi, as one register. */
static inline __m512 vc_load2(const float *p, int64_t o, __mmask16 lo, int64_t o8, __mmask16 hi) {
  __m512 s = _mm512_maskz_loadu_ps(lo, p + o);
  return hi ? _mm512_mask_loadu_ps(s, hi, p + o8) : s;
}

/* Vector q of a finished tile of image n, channel group g, output row oh,
 * pixels from ow0: r[p] the sums of pixel p (rows past P zero), stored with
 * the bias (unless it is in the sums already), accumulation, residual and
 * ReLU.  The P x 16 block transposed in registers, so channel j's pixels
 * are vector j: one masked store per channel instead of P scalar ones
 * (0.94-0.99x on the layers in the header, same library, alternating).
 * Tiles of at most 8 pixels (eight, a constant) take transpose8x16, and
 * register j then holds channels j and j + 8 (the bench CNN's 32 -> 64
 * layer 0.95-0.99x, ResNet-50's 7-pixel layers 0.98-1.0x). */
static inline __attribute__((always_inline)) void vc_emit_vector(const vconv_args *v, __m512 r[16], int64_t n,
                                                                 int64_t g, int64_t q, int64_t oh, int64_t ow0,
                                                                 int with_bias, const int eight) {
  int64_t np = v->OW - ow0 < v->P ? v->OW - ow0 : v->P, plane = v->OH * v->OW;
  __mmask16 keep = (__mmask16)((1u << np) - 1);
  const __m512 zero = _mm512_setzero_ps();
  if (eight)
    transpose8x16(r);
  else
    kiln_transpose16(r);
  for (int64_t j = 0; j < (eight ? 8 : 16); j++) {
    int64_t f = g * 16 * v->Q + q * 16 + j;
    if (f >= v->F) break;
    int two = eight && f + 8 < v->F; /* the high half is channel f + 8's */
    __mmask16 lo = keep, hi = two ? (__mmask16)(keep << 8) : 0; /* eight: keep is 8 bits at most */
    int64_t o = ((n * v->F + f) * v->OH + oh) * v->OW + ow0, o8 = o + 8 * plane - 8; /* lane 8 at f + 8's o */
    __m512 s = r[j];
    if (with_bias && v->bias) {
      __m512 b = _mm512_set1_ps(v->bias[f]);
      s = _mm512_add_ps(s, two ? _mm512_mask_blend_ps(0xff00, b, _mm512_set1_ps(v->bias[f + 8])) : b);
    }
    if (v->accumulate) s = _mm512_add_ps(s, vc_load2(v->Y, o, lo, o8, hi));
    if (v->res) s = _mm512_add_ps(s, vc_load2(v->res, o, lo, o8, hi));
    if (v->relu) s = _mm512_max_ps(zero, s); /* max(0, NaN) is the NaN */
    _mm512_mask_storeu_ps(v->Y + o, lo, s);
    if (hi) _mm512_mask_storeu_ps(v->Y + o8, hi, s);
  }
}

/* Pool mode: vector q of a finished tile (r[p]: pixel p's 16 channels, with
 * the bias), ReLU'd when v->relu, summed over the tile's pixels inside the
 * row and added to this thread's partial sums of image n. */
static inline __attribute__((always_inline)) void vc_pool_vector(const vconv_args *v, const __m512 *r, int64_t n,
                                                                 int64_t g, int64_t q, int64_t ow0, const int P) {
  int64_t np = v->OW - ow0 < P ? v->OW - ow0 : P;
  __m512 s = _mm512_setzero_ps();
  for (int p = 0; p < P; p++) {
    if (p >= np) break;
    s = _mm512_add_ps(s, v->relu ? _mm512_max_ps(_mm512_setzero_ps(), r[p]) : r[p]);
  }
  float *ps = v->pool + ((int64_t)kiln_worker_slot() * v->batch + n) * v->pool_ld + (g * v->Q + q) * 16;
  _mm512_storeu_ps(ps, _mm512_add_ps(_mm512_loadu_ps(ps), s));
}

/* The bias of channels [f0, f0 + 16) (zero past F or without one). */
static inline __m512 vc_bias16(const vconv_args *v, int64_t f0) {
  if (!v->bias) return _mm512_setzero_ps();
  return _mm512_maskz_loadu_ps(v->F - f0 >= 16 ? 0xffff : (__mmask16)((1u << (v->F - f0)) - 1), v->bias + f0);
}

#endif
