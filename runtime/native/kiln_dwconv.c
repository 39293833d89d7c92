/*
 * kiln's native runtime: depthwise convolutions (kiln_dwconv2d; built with
 * kiln_native.c into one library, see kiln/runtime/native).
 *
 * A depthwise convolution (one input channel per group, one output channel
 * each: MobileNet's, EfficientNet's, ConvNeXt's 3x3 to 7x7 filters) has a
 * handful of multiply-adds per output and no reduction over channels, so no
 * GEMM shape: kiln's generated code ran it as an 8-deep loop nest with a
 * padded copy of the input first.  Here each (image, channel) plane is a
 * task of the pool: the plane is copied into the thread's scratch with
 * its zero padding around it (a plane of 112 x 112 is 50 KiB: it stays in
 * L2, where the generated code padded the whole tensor in memory), then each
 * output row is computed in vectors of KILN_VW columns, each vector's sum
 * over the window's taps kept in a register and stored once, with no test
 * per tap or column (a 3x3 window keeps its nine weights in registers).
 * Bounds-checked scalar columns at the sides had cost as much as the
 * vectors on 56-wide rows.
 */

#include <stdint.h>
#include <string.h>

#include "kiln_native.h"

typedef struct {
  int64_t C, H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl;
  const float *x, *w, *bias;
  float *y;
  int32_t relu;
} dw_args;

/* KILN_VW input values r[0], r[s], r[2s], ... */
static inline kiln_vec dw_load(const float *r, int64_t s) {
  if (s == 1) return kiln_loadu(r);
#if KILN_VW == 8
  if (s == 2) { /* the even lanes of two vectors, in order (r[15] not read: it may lie past the input) */
    const __m256i seven = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, -1, 0);
    __m256 a = _mm256_loadu_ps(r), b = _mm256_maskload_ps(r + 8, seven);
    __m256 e = _mm256_shuffle_ps(a, b, 0x88); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    return (kiln_vec)_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
  }
#endif
  kiln_vec v;
  for (int i = 0; i < KILN_VW; i++) v[i] = r[i * s];
  return v;
}

/* One plane (x its input, w its KH x KW taps, b its bias) from its padded
 * copy P (Hp rows of Wp floats, the input at row pt, column pl, zeros
 * around it and past the last vector's reach): every output row in vectors,
 * the last one partial. */
static void dw_plane(const dw_args *p, const float *P, int64_t Wp, const float *w, float b, float *y) {
  const int64_t sw = p->sw, d = p->dw, KH = p->KH, KW = p->KW, OW = p->OW;
  const int three = KH == 3 && KW == 3;
  kiln_vec wv[9];
  for (int k = 0; three && k < 9; k++) wv[k] = kiln_splat(w[k]);
  for (int64_t oh = 0; oh < p->OH; oh++) {
    const float *r0 = P + oh * p->sh * Wp;
    float *yr = y + oh * OW;
    for (int64_t ow = 0; ow < OW; ow += KILN_VW) {
      kiln_vec a = kiln_splat(b);
      const float *xr = r0 + ow * sw;
      if (three) {
        for (int k = 0; k < 3; k++, xr += p->dh * Wp)
          for (int j = 0; j < 3; j++) a += wv[3 * k + j] * dw_load(xr + j * d, sw);
      } else {
        for (int64_t kh = 0; kh < KH; kh++, xr += p->dh * Wp)
          for (int64_t kw = 0; kw < KW; kw++) a += kiln_splat(w[kh * KW + kw]) * dw_load(xr + kw * d, sw);
      }
      if (p->relu) a = kiln_max(kiln_splat(0.0f), a);
      if (ow + KILN_VW <= OW)
        __builtin_memcpy(yr + ow, &a, sizeof a);
      else
        __builtin_memcpy(yr + ow, &a, (size_t)(OW - ow) * sizeof(float));
    }
  }
}

/* Planes [lo, hi) without a padded copy: each output a scalar sum over the taps inside the input. */
static void dw_planes_direct(const dw_args *p, int64_t lo, int64_t hi) {
  for (int64_t plane = lo; plane < hi; plane++) {
    int64_t c = plane % p->C;
    const float *x = p->x + plane * p->H * p->W, *w = p->w + c * p->KH * p->KW;
    float *y = p->y + plane * p->OH * p->OW;
    for (int64_t oh = 0; oh < p->OH; oh++)
      for (int64_t ow = 0; ow < p->OW; ow++) {
        float s = p->bias ? p->bias[c] : 0.0f;
        for (int64_t kh = 0; kh < p->KH; kh++) {
          int64_t ih = oh * p->sh - p->pt + kh * p->dh;
          if (ih < 0 || ih >= p->H) continue;
          for (int64_t kw = 0; kw < p->KW; kw++) {
            int64_t iw = ow * p->sw - p->pl + kw * p->dw;
            if (iw >= 0 && iw < p->W) s += w[kh * p->KW + kw] * x[ih * p->W + iw];
          }
        }
        y[oh * p->OW + ow] = p->relu && s < 0.0f ? 0.0f : s;
      }
  }
}

static void dw_planes(void *ctx, int64_t lo, int64_t hi) {
  const dw_args *p = ctx;
  /* The padded copy's size: every vector's taps inside it (the last vector of a row reaches past OW). */
  int64_t last = ((p->OW + KILN_VW - 1) / KILN_VW * KILN_VW - 1) * p->sw + (p->KW - 1) * p->dw + 1;
  int64_t Wp = last > p->pl + p->W ? last : p->pl + p->W;
  Wp += KILN_VW; /* the strided loads' whole vectors */
  int64_t rows = (p->OH - 1) * p->sh + (p->KH - 1) * p->dh + 1;
  int64_t Hp = rows > p->pt + p->H ? rows : p->pt + p->H;
  float *P = kiln_thread_scratch((size_t)(Hp * Wp) * sizeof(float));
  if (!P) { /* out of memory for the copy: tap by tap, those inside only (slow, correct) */
    dw_planes_direct(p, lo, hi);
    return;
  }
  memset(P, 0, (size_t)(Hp * Wp) * sizeof(float));
  for (int64_t plane = lo; plane < hi; plane++) {
    int64_t c = plane % p->C;
    const float *x = p->x + plane * p->H * p->W;
    for (int64_t i = 0; i < p->H; i++) memcpy(P + (p->pt + i) * Wp + p->pl, x + i * p->W, (size_t)p->W * sizeof(float));
    dw_plane(p, P, Wp, p->w + c * p->KH * p->KW, p->bias ? p->bias[c] : 0.0f, p->y + plane * p->OH * p->OW);
  }
}

/* y[n, c, oh, ow] = bias[c] + sum over the taps (kh, kw) inside x of w[c, kh, kw] * x[n, c, oh * sh - pt + kh *
 * dh, ow * sw - pl + kw * dw] (zero padding), then max(0, .) when relu: x [planes = N * C, H, W], w [C, KH, KW], bias
 * [C] or 0, y [planes, OH, OW], all contiguous f32.  Planes split over up to `threads` threads of the
 * pool. */
void kiln_dwconv2d(int64_t planes, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH, int64_t KW,
                   int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, int64_t x, int64_t w,
                   int64_t bias, int64_t relu, int64_t y, int32_t threads) {
  dw_args p = {C, H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, (const float *)x, (const float *)w,
               (const float *)bias, (float *)y, (int32_t)relu};
  int64_t work = planes * OH * OW * KH * KW;
  int64_t parts = work >= (1 << 16) ? kiln_parts(planes, threads) : 1;
  kiln_parallel_for(dw_planes, &p, planes, parts);
}
