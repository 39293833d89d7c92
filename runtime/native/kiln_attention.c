/*
 * kiln_attention: softmax(q k^T * scale [causal]) v for f32, flash-attention
 * style (built with kiln_native.c into one library; see kiln/runtime/native).
 *
 * The generated lowering of kiln.attention materializes the [L, S] scores
 * of every head and runs five passes over them (scale and mask, max, exp,
 * sum, divide) between two batched GEMMs: at (B, H, L) = (8, 4, 512) that
 * is 33 MB a pass, and the masked half of a causal product is computed
 * anyway.  Here one task is (head, block of QB queries): it walks the key
 * blocks a query of the block can see, keeps the block's scores (QB x KB)
 * in L1, and updates a running max, sum and output (the online softmax), so
 * scores never reach memory and a causal head does about half the work.
 *
 * Both products run on register blocks held in vector types: S = Q K^T as
 * RB rows x KB columns (K transposed once per call), O += P V as RB rows x
 * up to 4 vectors of V's columns.  exp is a degree-6 polynomial after a
 * range reduction by ln 2 (relative error about 2e-7 against expf).
 */
#include <math.h> /* INFINITY */
#include <stdint.h>
#include <string.h>

#include "kiln_native.h"

#define AW KILN_VW
typedef int32_t ai __attribute__((vector_size(AW * 4)));

#define QB 32            /* queries per task */
#define KB (2 * AW)      /* keys per block: two vectors of scores per row */
#define RB 8             /* rows per register block (QB is a multiple) */
#define MAX_HEAD_DIM 256 /* kiln-cpu-library only sends heads up to this (D and Dv) */
#define DVP (MAX_HEAD_DIM + 4 * AW)

static inline void astore(float *p, kiln_vec v) { __builtin_memcpy(p, &v, sizeof v); }

/* mask ? a : b, lane by lane (mask lanes all ones or zero). */
static inline kiln_vec aselect(ai mask, kiln_vec a, kiln_vec b) { return (kiln_vec)(((ai)a & mask) | ((ai)b & ~mask)); }

/* exp(x); below -87 (masked scores are -inf) gives 0, above 88 saturates. */
static inline kiln_vec aexp(kiln_vec x) {
  const kiln_vec lo = kiln_splat(-87.0f), hi = kiln_splat(88.0f);
  ai dead = x < lo;
  x = aselect(x < lo, lo, x);
  x = aselect(x > hi, hi, x);
  /* x = n ln2 + r, |r| <= ln2 / 2; n rounded with the 1.5 * 2^23 trick. */
  const kiln_vec magic = kiln_splat(12582912.0f);
  kiln_vec n = (x * kiln_splat(1.44269504088896341f) + magic) - magic;
  kiln_vec r = x - n * kiln_splat(0.693359375f);
  r = r - n * kiln_splat(-2.12194440e-4f);
  kiln_vec p = kiln_splat(1.9875691500e-4f);
  p = p * r + kiln_splat(1.3981999507e-3f);
  p = p * r + kiln_splat(8.3334519073e-3f);
  p = p * r + kiln_splat(4.1665795894e-2f);
  p = p * r + kiln_splat(1.6666665459e-1f);
  p = p * r + kiln_splat(5.0000001201e-1f);
  p = p * r * r + r + kiln_splat(1.0f);
  ai bits = (__builtin_convertvector(n, ai) + 127) << 23;
  kiln_vec y = p * (kiln_vec)bits;
  return aselect(dead, kiln_splat(0.0f), y);
}

static inline kiln_vec amax(kiln_vec a, kiln_vec b) { return aselect(a > b, a, b); }

/* The largest lane, in log2(AW) shuffle steps (a loop over the lanes cost
 * as much as 5% of the kernel). */
static inline float hmax(kiln_vec v) {
#if AW == 16
  v = amax(v, __builtin_shuffle(v, (ai){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7}));
  v = amax(v, __builtin_shuffle(v, (ai){4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3}));
  v = amax(v, __builtin_shuffle(v, (ai){2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1}));
  v = amax(v, __builtin_shuffle(v, (ai){1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}));
#else
  v = amax(v, __builtin_shuffle(v, (ai){4, 5, 6, 7, 0, 1, 2, 3}));
  v = amax(v, __builtin_shuffle(v, (ai){2, 3, 0, 1, 2, 3, 0, 1}));
  v = amax(v, __builtin_shuffle(v, (ai){1, 0, 1, 0, 1, 0, 1, 0}));
#endif
  return v[0];
}

static inline float hsum(kiln_vec v) {
  float s = 0.0f;
  for (int i = 0; i < AW; i++) s += v[i];
  return s;
}

typedef struct {
  int64_t heads, L, S, D, Dv;
  const float *q, *k, *v;
  float *o;
  float scale;
  int causal;
  int64_t qblocks;
  float *kt;   /* every head's K transposed, [heads][D][sp] with zero keys past S; NULL: per block */
  int64_t sp;  /* S rounded up to KB */
} attn_args;

/* Tasks [lo, hi) of the K transpose: task t is a head. */
static void transpose_k(void *ctx, int64_t lo, int64_t hi) {
  const attn_args *g = ctx;
  for (int64_t h = lo; h < hi; h++) {
    const float *k = g->k + h * g->S * g->D;
    float *kt = g->kt + h * g->D * g->sp;
    for (int64_t d = 0; d < g->D; d++) {
      float *row = kt + d * g->sp;
      for (int64_t j = 0; j < g->S; j++) row[j] = k[j * g->D + d];
      for (int64_t j = g->S; j < g->sp; j++) row[j] = 0.0f;
    }
  }
}

/* s[r][0 .. KB) = scale * q[r] . kt[., 0 .. KB) for RB rows of q (row stride D;
 * row d of kt at kt + d * kstride). */
static inline __attribute__((always_inline)) void scores_block(const float *q, int64_t D, const float *kt,
                                                                int64_t kstride, float scale, float *s) {
  kiln_vec acc[RB][2];
  for (int r = 0; r < RB; r++) acc[r][0] = acc[r][1] = (kiln_vec){0};
  for (int64_t d = 0; d < D; d++) {
    kiln_vec b0 = kiln_loadu(kt + d * kstride), b1 = kiln_loadu(kt + d * kstride + AW);
    for (int r = 0; r < RB; r++) {
      float a = q[r * D + d];
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
    }
  }
  for (int r = 0; r < RB; r++) {
    astore(s + r * KB, acc[r][0] * scale);
    astore(s + r * KB + AW, acc[r][1] * scale);
  }
}

/* acc[r][e0 .. e0 + NV * AW) += sum_j p[r][j] * vb[j][e0 ..] over j < kb, RB rows
 * (row j of vb at vb + j * vstride).  NV is at most 2: RB x 4 vectors of
 * accumulators and 4 of V are more registers than AVX-512 has (2-4% slower
 * at D = 64). */
static inline __attribute__((always_inline)) void pv_block(int nv, const float *p, const float *vb, int64_t vstride,
                                                            int64_t kb, int64_t e0, float *acc) {
  kiln_vec c[RB][2];
  for (int r = 0; r < RB; r++)
    for (int u = 0; u < nv; u++) c[r][u] = kiln_loadu(acc + r * DVP + e0 + u * AW);
  for (int64_t j = 0; j < kb; j++) {
    kiln_vec b[2];
    for (int u = 0; u < nv; u++) b[u] = kiln_loadu(vb + j * vstride + e0 + u * AW);
    for (int r = 0; r < RB; r++) {
      float a = p[r * KB + j];
      for (int u = 0; u < nv; u++) c[r][u] += a * b[u];
    }
  }
  for (int r = 0; r < RB; r++)
    for (int u = 0; u < nv; u++) astore(acc + r * DVP + e0 + u * AW, c[r][u]);
}

static void attn_tasks(void *ctx, int64_t lo, int64_t hi) {
  const attn_args *g = ctx;
  const int64_t D = g->D, Dv = g->Dv, dvp = (Dv + AW - 1) / AW * AW;
  float qp[QB * MAX_HEAD_DIM] __attribute__((aligned(64)));  /* the query block, zero rows past L */
  float kt[MAX_HEAD_DIM * KB] __attribute__((aligned(64)));  /* the key block, transposed */
  float vb[KB * DVP] __attribute__((aligned(64)));           /* the value block, rows padded */
  float acc[QB * DVP] __attribute__((aligned(64)));          /* unnormalized outputs */
  float s[QB * KB] __attribute__((aligned(64)));             /* scores, then probabilities */
  float mx[QB];
  kiln_vec sum[QB]; /* row sums by lane (summed across lanes once, at the end) */
  for (int64_t t = lo; t < hi; t++) {
    int64_t h = t / g->qblocks, l0 = t % g->qblocks * QB;
    int64_t ql = g->L - l0 < QB ? g->L - l0 : QB;
    const float *q = g->q + (h * g->L + l0) * D, *k = g->k + h * g->S * D, *v = g->v + h * g->S * Dv;
    memcpy(qp, q, ql * D * sizeof(float));
    memset(qp + ql * D, 0, (QB - ql) * D * sizeof(float));
    for (int r = 0; r < QB; r++) {
      mx[r] = -INFINITY;
      sum[r] = (kiln_vec){0};
      memset(acc + r * DVP, 0, dvp * sizeof(float));
    }
    /* A causal query i sees keys j <= i: the block needs keys up to l0 + ql - 1. */
    int64_t send = g->causal && l0 + ql < g->S ? l0 + ql : g->S;
    for (int64_t s0 = 0; s0 < send; s0 += KB) {
      int64_t kb = send - s0 < KB ? send - s0 : KB;
      /* K^T of this block: from the transpose made once per call (each query
       * block had transposed every key block it sees again), else here. */
      const float *ktb = kt;
      int64_t kstride = KB;
      if (g->kt != NULL) {
        ktb = g->kt + h * D * g->sp + s0, kstride = g->sp;
      } else {
        for (int64_t d = 0; d < D; d++)
          for (int64_t j = 0; j < KB; j++) kt[d * KB + j] = j < kb ? k[(s0 + j) * D + d] : 0.0f;
      }
      /* V's rows are read in place when whole vectors (Dv a multiple of AW). */
      const float *vbk = v + s0 * Dv;
      int64_t vstride = Dv;
      if (dvp != Dv) {
        for (int64_t j = 0; j < kb; j++) {
          memcpy(vb + j * DVP, v + (s0 + j) * Dv, Dv * sizeof(float));
          memset(vb + j * DVP + Dv, 0, (dvp - Dv) * sizeof(float));
        }
        vbk = vb, vstride = DVP;
      }
      int64_t rows = (ql + RB - 1) / RB * RB;
      for (int64_t r0 = 0; r0 < rows; r0 += RB) scores_block(qp + r0 * D, D, ktb, kstride, g->scale, s + r0 * KB);
      /* Mask (keys past the block, and after the query when causal), then the online softmax. */
      for (int64_t r = 0; r < rows; r++) {
        float *sr = s + r * KB;
        int64_t allowed = g->causal ? l0 + r - s0 + 1 : kb; /* keys of this block row r may see */
        if (allowed > kb) allowed = kb;
        if (allowed < 0) allowed = 0;
        for (int64_t j = allowed; j < KB; j++) sr[j] = -INFINITY;
        kiln_vec a0 = kiln_loadu(sr), a1 = kiln_loadu(sr + AW);
        float m = hmax(aselect(a0 > a1, a0, a1));
        float mnew = m > mx[r] ? m : mx[r];
        if (mnew == -INFINITY) { /* nothing visible yet (a padding row): probabilities 0 */
          astore(sr, kiln_splat(0.0f));
          astore(sr + AW, kiln_splat(0.0f));
          continue;
        }
        kiln_vec p0 = aexp(a0 - mnew), p1 = aexp(a1 - mnew);
        astore(sr, p0);
        astore(sr + AW, p1);
        float alpha = mnew == mx[r] ? 1.0f : aexp(kiln_splat(mx[r] - mnew))[0]; /* the max mostly holds */
        sum[r] = sum[r] * alpha + (p0 + p1);
        mx[r] = mnew;
        if (alpha != 1.0f) {
          float *ar = acc + r * DVP;
          for (int64_t e = 0; e < dvp; e += AW) astore(ar + e, kiln_loadu(ar + e) * alpha);
        }
      }
      for (int64_t r0 = 0; r0 < rows; r0 += RB)
        for (int64_t e0 = 0; e0 < dvp; e0 += 2 * AW) {
          float *ar = acc + r0 * DVP;
          const float *pr = s + r0 * KB;
          if (dvp - e0 >= 2 * AW)
            pv_block(2, pr, vbk, vstride, kb, e0, ar);
          else
            pv_block(1, pr, vbk, vstride, kb, e0, ar);
        }
    }
    float *o = g->o + (h * g->L + l0) * Dv;
    for (int64_t r = 0; r < ql; r++) {
      float inv = 1.0f / hsum(sum[r]);
      for (int64_t e = 0; e < Dv; e++) o[r * Dv + e] = acc[r * DVP + e] * inv;
    }
  }
}

/* out[h, l, :] = softmax_s(q[h, l, :] . k[h, s, :] * scale, s <= l when causal)
 * . v[h, s, :] for h < heads (every batch dim flattened), l < L, s < S; all
 * contiguous f32; on up to `threads` threads of the pool.  D and Dv must be
 * 1 .. MAX_HEAD_DIM (kiln-cpu-library matches only static head dims in that
 * range; anything else returns -1 without writing). */
int32_t kiln_attention(int64_t heads, int64_t L, int64_t S, int64_t D, int64_t Dv, int64_t q, int64_t k,
                       int64_t v, int64_t out, float scale, int32_t causal, int32_t threads) {
  if (D < 1 || Dv < 1 || D > MAX_HEAD_DIM || Dv > MAX_HEAD_DIM) return -1;
  attn_args g = {heads, L, S, D, Dv, (const float *)q, (const float *)k, (const float *)v, (float *)out,
                 scale, causal != 0, (L + QB - 1) / QB, NULL, (S + KB - 1) / KB * KB};
  /* K transposed once per call when there is scratch for it (else per block). */
  g.kt = kiln_thread_scratch((size_t)(heads * D * g.sp) * sizeof(float));
  if (g.kt != NULL) kiln_parallel_for(transpose_k, &g, heads, heads < threads ? heads : threads);
  int64_t tasks = heads * g.qblocks;
  kiln_parallel_for(attn_tasks, &g, tasks, tasks < threads ? tasks : threads);
  return 0;
}
