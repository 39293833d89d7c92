/*
 * What kiln_conv.c and kiln_winograd.c share: the register tile of the
 * weight-first GEMM (WMR rows of a packed A times two vectors of columns of
 * B, rows of B found through an offset table or one after another) and the
 * copy of an input row into its even and odd columns.  Static inline: each
 * file gets its own specialized copies.
 */
#ifndef KILN_WTILE_H
#define KILN_WTILE_H

#include <stdint.h>
#include <string.h>

#include "kiln_native.h"

#if KILN_VW == 16
#include <immintrin.h>
#endif

#define VW KILN_VW
#define WMR KILN_MR /* the small GEMM's register block (kiln_native.h) */
#define WNR (2 * VW)
#define KC 384 /* at most; K is split into equal blocks */

/* A vector's lanes as integers, for selecting lanes bitwise (no
 * floating-point operation touches them). */
typedef int32_t kiln_lanes __attribute__((vector_size(VW * 4)));

/* max(x, 0) lane by lane, NaN kept (as torch.relu and the generated select do). */
static inline kiln_vec relu_w(kiln_vec x) {
  kiln_lanes neg = x < (kiln_vec){0};
  return (kiln_vec)((kiln_lanes)x & ~neg);
}

/* x with its lanes from n on zeroed. */
static inline kiln_vec first_lanes(kiln_vec x, int64_t n) {
  kiln_lanes index;
  for (int i = 0; i < VW; i++) index[i] = i;
  return (kiln_vec)((kiln_lanes)x & (index < (int32_t)n));
}

/* Row m of a finished tile: acc (two vectors, from micro_w) plus c's row
 * when add, plus res's, ReLU'd when relu, into c's row (nr columns). */
static inline __attribute__((always_inline)) void micro_w_row(const kiln_vec acc[2], float *cm, const float *rm,
                                                               int64_t nr, int add, int relu) {
  /* Both vectors' loads before either store: one helper per vector, each
   * store before the next vector's loads and its own tests of add and rm,
   * made the bench CNN's 3 -> 32 layer 1.08x slower (C harness). */
  if (nr == WNR) {
    kiln_vec c0 = acc[0], c1 = acc[1];
    if (add) {
      c0 += kiln_loadu(cm);
      c1 += kiln_loadu(cm + VW);
    }
    if (rm) {
      c0 += kiln_loadu(rm);
      c1 += kiln_loadu(rm + VW);
    }
    if (relu) {
      c0 = relu_w(c0);
      c1 = relu_w(c1);
    }
    __builtin_memcpy(cm, &c0, sizeof c0);
    __builtin_memcpy(cm + VW, &c1, sizeof c1);
  } else if (nr == VW) { /* a narrow panel's whole vector */
    kiln_vec c0 = acc[0];
    if (add) c0 += kiln_loadu(cm);
    if (rm) c0 += kiln_loadu(rm);
    if (relu) c0 = relu_w(c0);
    __builtin_memcpy(cm, &c0, sizeof c0);
  } else {
    float out[WNR];
    __builtin_memcpy(out, &acc[0], sizeof acc[0]);
    __builtin_memcpy(out + VW, &acc[1], sizeof acc[1]);
    for (int64_t j = 0; j < nr; j++) {
      float y = add ? cm[j] + out[j] : out[j];
      y = rm ? y + rm[j] : y;
      cm[j] = relu && y < 0.0f ? 0.0f : y;
    }
  }
}

/* One K step of a tile: acc += column a[0 .. WMR] times row bk[0 .. nv
 * VW) (nv, a constant: 2, or 1 for a panel of VW columns or fewer).  The
 * row's vectors pinned in registers (kiln_pinned): in the GEMM's tasks gcc
 * had folded the second into each of its six FMAs, 13 loads a step; pinned,
 * ResNet-50's pointwise layers 0.86-0.88x on two threads, 0.86x on one (C
 * harness, alternating). */
static inline __attribute__((always_inline)) void micro_w_step(kiln_vec acc[WMR][2], const float *bk,
                                                                const float *ak, const int nv) {
  kiln_vec b0 = kiln_pinned(kiln_loadu(bk)), b1 = nv == 2 ? kiln_pinned(kiln_loadu(bk + VW)) : b0;
  for (int m = 0; m < WMR; m++) {
    acc[m][0] += ak[m] * b0;
    if (nv == 2) acc[m][1] += ak[m] * b1;
  }
}

/* Steps [0, kc) of micro_w (nv: micro_w_step), row k of b at b + off[k]
 * or, off NULL, at b + k * stride.  Two loops, not `off ? b + off[k] : ...` in
 * one: gcc kept that test and a longer address computation in each K step
 * (the bench CNN's 32 -> 64 layer 0.926-0.946x, ResNet-50's 3x3 at 56 / 14
 * 0.934 / 0.916x on one thread, same library, alternating; small_cnn
 * 0.945-0.963x, worker pairs). */
static inline __attribute__((always_inline)) void micro_w_steps(kiln_vec acc[WMR][2], const float *a, const float *b,
                                                                 const int64_t *off, int64_t stride, int64_t kc,
                                                                 const int nv) {
  if (off)
    for (int64_t k = 0; k < kc; k++) micro_w_step(acc, b + off[k], a + k * WMR, nv);
  else
    for (int64_t k = 0; k < kc; k++) micro_w_step(acc, b + k * stride, a + k * WMR, nv);
}

/* Columns of B the tiles read for n columns of output: whole panels of
 * WNR, but a last panel of VW columns or fewer reads one vector (micro_w). */
static inline int64_t micro_w_cols(int64_t n) {
  int64_t last = n % WNR;
  return n - last + (last == 0 ? 0 : last <= VW ? VW : WNR);
}

/* c[0 .. mr, 0 .. nr] (leading dim ldc) = or += a[kc][WMR] . b[kc][WNR]
 * (row k of b at b + off[k] when off is not NULL, else at b + k * stride:
 * WNR for a packed panel),
 * starting from bias[m] for row m when bias is not NULL, plus res (same
 * layout as c; the first block of K only, so res may be c itself); `relu`
 * (the last block of K only) applies max(., 0) to what is stored.  With
 * `unrolled` (a constant) the stores are unrolled, so acc stays in
 * registers: a loop indexes it in memory, 16 stores and loads a tile (the
 * bench CNN's 3 -> 32 layer 0.81-0.91x, ResNet-50's 1x1 layers at 56 and
 * 28 0.92-0.98x, same library, alternating); the wide result's tiles
 * (dconv_block) keep the loop, unrolled 1.04-1.06x on ResNet-50's 3x3 at 56. */
static inline __attribute__((always_inline)) void micro_w(int mr, const float *a, const float *b, const int64_t *off,
                                                           int64_t stride, int64_t kc, float *c, int64_t ldc, int64_t nr, int add,
                                                           const float *bias, const float *res, int relu,
                                                           const int unrolled) {
  kiln_vec acc[WMR][2];
  for (int m = 0; m < WMR; m++) {
    float b0 = bias && m < mr ? bias[m] : 0.0f;
    acc[m][0] = acc[m][1] = kiln_splat(b0);
  }
  /* A panel of VW columns or fewer (a Winograd block's last: 16 of
   * ResNet-50's 784 tiles at 56 x 56, 4 of 196 at 28 x 28) takes one
   * vector of B a step: half the FMAs of a whole panel, which had made
   * those blocks as long as the others and left a thread waiting. */
  if (nr <= VW)
    micro_w_steps(acc, a, b, off, stride, kc, 1);
  else
    micro_w_steps(acc, a, b, off, stride, kc, 2);
  if (unrolled) {
#pragma GCC unroll 16
    for (int m = 0; m < mr; m++) micro_w_row(acc[m], c + m * ldc, res ? res + m * ldc : NULL, nr, add, relu);
  } else {
    for (int m = 0; m < mr; m++) micro_w_row(acc[m], c + m * ldc, res ? res + m * ldc : NULL, nr, add, relu);
  }
}

typedef float v8f __attribute__((vector_size(32)));

/* Row[0 .. lo) and row[hi .. n) zeroed, by a vector over each end where
 * that reaches (what lies inside is written after): loops of a float or two
 * had become memset calls, a fifth of the time of the stride-2 copy. */
static inline void zero_ends(float *row, int64_t lo, int64_t hi, int64_t n) {
  if (n >= 8 && lo <= 8 && n - hi <= 8) {
    v8f z = {0};
    if (lo > 0) __builtin_memcpy(row, &z, sizeof z);
    if (hi < n) __builtin_memcpy(row + n - 8, &z, sizeof z);
  } else {
    memset(row, 0, lo * sizeof(float));
    memset(row + hi, 0, (n - hi) * sizeof(float));
  }
}

/* The packing slot's copy of the constant A (M x K, leading dim lda) in
 * blocks of WMR rows, [K][WMR] each, for micro_w (kiln_conv.c); NULL when
 * memory ran out. */
const float *kiln_packed_a(int64_t slot, const float *A, int64_t M, int64_t K, int64_t lda);

/* n rounded up to a multiple of 16 floats (64 bytes). */
static inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

/* Columns [*lo, *hi) of column phase e of stride s (out[j] = xr[j * s + e -
 * pl], n columns) that lie inside an input row of W floats. */
static inline void phase_bounds(int64_t W, int64_t pl, int64_t s, int64_t e, int64_t n, int64_t *lo, int64_t *hi) {
  int64_t l = pl - e > 0 ? (pl - e + s - 1) / s : 0, h = W + pl - e > 0 ? (W + pl - e + s - 1) / s : 0;
  *hi = h < n ? h : n;
  *lo = l < *hi ? l : *hi;
}

/* Input row xr (W floats) into the two column phases of stride 2 at once:
 * out[e][j] = xr[2j + e - pl] for j < Wq, zero outside the row (inside it
 * for j in [jlo[e], jhi[e])).  One pass that splits 2 VW floats into their
 * even and odd columns per step (two strided gathers, one per phase, read
 * the row twice in short loops; with the memset calls above, the copy had
 * been a sixth of the bench CNN's 32 -> 64 layer).  Input column x goes to
 * phase (x + pl) & 1 at index (x + pl) >> 1: the even columns all to one
 * plane, the odd to the other, so both destinations are fixed per row; the
 * row's last columns are one masked step with AVX-512 (ResNet-50's 28 x 28
 * Winograd layers, whose 56-float rows had ended in 8 scalar stores, each
 * picking its plane: 0.96x, C harness, two threads, alternating; its 7x7
 * stem and 56 x 56 layers 0.99-1.01x). */
static inline void copy_row_s2(const float *xr, int64_t W, int64_t pl, int64_t Wq, const int64_t jlo[2],
                               const int64_t jhi[2], float *out0, float *out1) {
  float *out[2] = {out0, out1};
  for (int e = 0; e < 2; e++) zero_ends(out[e], jlo[e], jhi[e], Wq);
  /* Input columns past 2 Wq - pl land past the planes' rows. */
  int64_t xend = 2 * Wq - pl < W ? 2 * Wq - pl : W, x = 0;
  float *ev = out[pl & 1] + (pl >> 1), *od = out[(pl + 1) & 1] + ((pl + 1) >> 1); /* xr[2i] to ev[i], xr[2i + 1] to od[i] */
#if KILN_VW == 16
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (; x + 32 <= xend; x += 32) {
    __m512 lo = _mm512_loadu_ps(xr + x), hi = _mm512_loadu_ps(xr + x + 16);
    _mm512_storeu_ps(ev + x / 2, _mm512_permutex2var_ps(lo, even, hi));
    _mm512_storeu_ps(od + x / 2, _mm512_permutex2var_ps(lo, odd, hi));
  }
  if (x < xend) { /* n < 32 columns left: (n + 1) / 2 even, n / 2 odd */
    int64_t n = xend - x;
    __mmask16 mlo = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1), mhi = (__mmask16)(n > 16 ? (1u << (n - 16)) - 1 : 0);
    __m512 lo = _mm512_maskz_loadu_ps(mlo, xr + x), hi = _mm512_maskz_loadu_ps(mhi, xr + x + 16);
    _mm512_mask_storeu_ps(ev + x / 2, (__mmask16)((1u << ((n + 1) / 2)) - 1), _mm512_permutex2var_ps(lo, even, hi));
    _mm512_mask_storeu_ps(od + x / 2, (__mmask16)((1u << (n / 2)) - 1), _mm512_permutex2var_ps(lo, odd, hi));
  }
#else
  for (; x + 16 <= xend; x += 16) {
    v8f lo, hi;
    __builtin_memcpy(&lo, xr + x, sizeof lo);
    __builtin_memcpy(&hi, xr + x + 8, sizeof hi);
    v8f e8 = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14);
    v8f o8 = __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15);
    __builtin_memcpy(ev + x / 2, &e8, sizeof e8);
    __builtin_memcpy(od + x / 2, &o8, sizeof o8);
  }
  for (; x + 1 < xend; x += 2) ev[x / 2] = xr[x], od[x / 2] = xr[x + 1];
  if (x < xend) ev[x / 2] = xr[x];
#endif
}

#endif
