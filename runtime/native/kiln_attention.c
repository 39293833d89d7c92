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
 * Both products run on register blocks held in vector types.  The scores
 * are kept transposed, keys as rows and the block's queries along the
 * lanes (S^T = K Q^T: RB keys x up to 2 vectors of queries, Q transposed
 * once per task, K's rows broadcast in place), so a query's softmax runs
 * down a column: its max, exp, sum and rescale are lane-wise for AW
 * queries at once.  With queries as rows (K transposed once per call) it
 * took a horizontal max per query and per key block, a vector exp for
 * each rescale factor and a branch per row: (B, H, L) = (8, 4, 512), (4, 4,
 * 128), (1, 4, 32) at D = 64 took 1.12 / 1.23 / 1.42x as long (same
 * library, alternating).  O += P V runs as RB rows x up to 2 vectors of V's
 * columns.  exp is a degree-6 polynomial after a range reduction by ln 2
 * (relative error about 2e-7 against expf).
 */
#include <math.h> /* INFINITY */
#include <stdint.h>
#include <string.h>

#include "kiln_native.h"

#define AW KILN_VW
typedef int32_t ai __attribute__((vector_size(AW * 4)));

#define QB 32            /* queries per task */
/* Keys per block: 32 for both widths.  With AVX2 the block had been 16
 * keys (two vectors), and pv_block reloaded and stored its accumulators
 * after 16 steps; 32 keys took 0.88-0.94x as long at (H, L) = (32, 512),
 * causal, D = 64, one thread (same library otherwise, alternating). */
#define KB 32
/* Rows per register block (KB and QB are multiples).  RB x 2 vectors of
 * accumulators: 16 of AVX-512's 32 registers, but all 16 of AVX2's, where
 * gcc spilled them to the stack in the inner loops; 4 rows on AVX2.  That
 * and the shared vectors in registers (kiln_pinned) took 0.75-0.90x as
 * long at (H, L) = (32, 512), causal, one thread. */
#define RB (AW == 8 ? 4 : 8)
#define MAX_HEAD_DIM 256 /* kiln-cpu-library only sends heads up to this (D and Dv) */
#define DVP (MAX_HEAD_DIM + 4 * AW)

static inline void astore(float *p, kiln_vec v) { __builtin_memcpy(p, &v, sizeof v); }

/* mask ? a : b, lane by lane (mask lanes all ones or zero). */
static inline kiln_vec aselect(ai mask, kiln_vec a, kiln_vec b) { return (kiln_vec)(((ai)a & mask) | ((ai)b & ~mask)); }

/* exp(x); below -87 (masked scores are -inf) gives 0, above 88 saturates. */
static inline kiln_vec aexp(kiln_vec x) {
  const kiln_vec lo = kiln_splat(-87.0f);
#if AW == 16
  __mmask16 live = _mm512_cmp_ps_mask((__m512)x, (__m512)lo, _CMP_NLT_UQ); /* NaN lives on */
#else
  ai dead = x < lo;
#endif
  x = kiln_min(kiln_splat(88.0f), kiln_max(lo, x)); /* the constants first: NaN stays NaN */
  /* x = n ln2 + r, |r| <= ln2 / 2; n rounded to nearest (the 1.5 * 2^23 trick on AVX2). */
#if AW == 16
  kiln_vec n = (kiln_vec)_mm512_roundscale_ps((__m512)(x * kiln_splat(1.44269504088896341f)),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  const kiln_vec magic = kiln_splat(12582912.0f);
  kiln_vec n = (x * kiln_splat(1.44269504088896341f) + magic) - magic;
#endif
  kiln_vec r = x - n * kiln_splat(0.693359375f);
  r = r - n * kiln_splat(-2.12194440e-4f);
  kiln_vec p = kiln_splat(1.9875691500e-4f);
  p = p * r + kiln_splat(1.3981999507e-3f);
  p = p * r + kiln_splat(8.3334519073e-3f);
  p = p * r + kiln_splat(4.1665795894e-2f);
  p = p * r + kiln_splat(1.6666665459e-1f);
  p = p * r + kiln_splat(5.0000001201e-1f);
  p = p * r * r + r + kiln_splat(1.0f);
#if AW == 16 /* p 2^n in one instruction, the dead lanes zeroed by its mask */
  return (kiln_vec)_mm512_maskz_scalef_ps(live, (__m512)p, (__m512)n);
#else
  ai bits = (__builtin_convertvector(n, ai) + 127) << 23;
  return aselect(dead, kiln_splat(0.0f), p * (kiln_vec)bits);
#endif
}

/* Lane l of the new r[i] (bit h of i clear) and r[i + h] of one round of
 * atranspose: indices into the pair (a = r[i], b = r[i + h]) concatenated. */
#define TLO(h, l) (((l) & (h)) ? AW + (l) - (h) : (l))
#define THI(h, l) (((l) & (h)) ? AW + (l) : (l) + (h))
#if AW == 16
#define TMASK(M, h)                                                                                            \
  (ai) {                                                                                                       \
    M(h, 0), M(h, 1), M(h, 2), M(h, 3), M(h, 4), M(h, 5), M(h, 6), M(h, 7), M(h, 8), M(h, 9), M(h, 10),        \
        M(h, 11), M(h, 12), M(h, 13), M(h, 14), M(h, 15)                                                       \
  }
#else
#define TMASK(M, h) \
  (ai) { M(h, 0), M(h, 1), M(h, 2), M(h, 3), M(h, 4), M(h, 5), M(h, 6), M(h, 7) }
#endif

/* One round of atranspose: the off-diagonal h x h blocks of every pair of
 * rows h apart swapped. */
#define TROUND(r, h)                                                    \
  for (int i = 0; i < AW; i++)                                          \
    if (!(i & (h))) {                                                   \
      kiln_vec a = r[i], b = r[i + (h)];                                \
      r[i] = __builtin_shuffle(a, b, TMASK(TLO, h));                    \
      r[i + (h)] = __builtin_shuffle(a, b, TMASK(THI, h));              \
    }

/* r[i][j] <- r[j][i] for an AW x AW block, in log2(AW) rounds of two-register shuffles. */
static inline __attribute__((always_inline)) void atranspose(kiln_vec r[AW]) {
#if AW == 16
  TROUND(r, 8)
#endif
  TROUND(r, 4)
  TROUND(r, 2)
  TROUND(r, 1)
}

/* qt[d][r] = q[r][d] for the block's ql queries, 0 for rows ql .. QB: in
 * AW x AW tiles transposed in registers, columns past the last whole tile
 * one by one.  Element by element (a strided load and a store each) this
 * was a fifth to a third of a task at L = 128 and 32. */
static void transpose_queries(const float *q, int64_t ql, int64_t D, int64_t qrow, float *qt) {
  int64_t d0 = 0;
  for (; d0 + AW <= D; d0 += AW)
    for (int64_t r0 = 0; r0 < QB; r0 += AW) {
      kiln_vec t[AW];
      for (int i = 0; i < AW; i++) t[i] = r0 + i < ql ? kiln_loadu(q + (r0 + i) * qrow + d0) : (kiln_vec){0};
      atranspose(t);
      for (int i = 0; i < AW; i++) astore(qt + (d0 + i) * QB + r0, t[i]);
    }
  for (; d0 < D; d0++)
    for (int64_t r = 0; r < QB; r++) qt[d0 * QB + r] = r < ql ? q[r * qrow + d0] : 0.0f;
}

#define QV (QB / AW) /* vectors of queries in a block (even: 2 with AVX-512, 4 with AVX2) */

/* Where an operand's heads and rows lie: element strides between batch
 * entries, between the heads of one entry, and between rows. */
typedef struct {
  int64_t batch, head, row;
} astrides;

/* Where head hh of batch entry b starts, in elements. */
static inline int64_t head_at(astrides s, int64_t b, int64_t hh) { return b * s.batch + hh * s.head; }

typedef struct {
  int64_t heads, H, L, S, D, Dv; /* heads = batch entries x H */
  const float *q, *k, *v;
  float *o;
  astrides qs, ks, vs, os;
  float scale;
  int causal;
  int64_t qblocks;
  int64_t group; /* q entries per k / v entry (grouped-query attention; 1 otherwise) */
  /* An optional mask over the scores (kiln_attention_masked): added (f32)
   * or selecting (bool bytes, 0 masks) at element b_out * m_outer + b_in *
   * m_inner + l * m_row + s * m_col of q entry b = b_out * m_hin + b_in;
   * strides 0 where the mask broadcasts. */
  const void *mask;
  int32_t mask_kind; /* 0 none, 1 f32 added, 2 bool */
  int64_t m_hin, m_outer, m_inner, m_row, m_col;
  /* Grouped rows: a task's query block runs over the group's q entries
   * (rows r = j * L + l of q entries b0 + j, b0 = kv entry * group), which
   * share k / v.  Set for grouped-query attention with fewer queries than
   * a block and no causal mask: a decode step (L = 1) had one query in a
   * 32-query block and read each k / v head once per q head. */
  int grouped;
} attn_args;

/* st[j][v * AW ..) = scale * k[j] . qt[., v * AW ..) for RB keys (row j of
 * k at kr + j * krow) and query vectors [v0, v0 + nv) (nv 1 or 2; qt is the
 * query block transposed, [D][QB]): scores with the keys as rows, so a
 * query's softmax runs down a column, lane by lane. */
static inline __attribute__((always_inline)) void scores_block(int nv, const float *kr, int64_t krow, int64_t D,
                                                                const float *qt, int64_t v0, float scale, float *st) {
  kiln_vec acc[RB][2];
  for (int r = 0; r < RB; r++) acc[r][0] = acc[r][1] = (kiln_vec){0};
  for (int64_t d = 0; d < D; d++) {
    kiln_vec b[2];
    for (int u = 0; u < nv; u++) b[u] = kiln_pinned(kiln_loadu(qt + d * QB + (v0 + u) * AW));
    for (int r = 0; r < RB; r++) {
      float a = kr[r * krow + d];
      for (int u = 0; u < nv; u++) acc[r][u] += a * b[u];
    }
  }
  for (int r = 0; r < RB; r++)
    for (int u = 0; u < nv; u++) astore(st + r * QB + (v0 + u) * AW, acc[r][u] * scale);
}

/* acc[r][e0 .. e0 + NV * AW) += sum_j pt[j][r] * vb[j][e0 ..] over j < kb, RB rows
 * (pt the probabilities with the keys as rows, row stride QB; row j of vb at
 * vb + j * vstride).  NV is at most 2: RB x 4 vectors of accumulators and 4
 * of V are more registers than AVX-512 has (2-4% slower at D = 64). */
static inline __attribute__((always_inline)) void pv_block(int nv, const float *pt, const float *vb, int64_t vstride,
                                                            int64_t kb, int64_t e0, float *acc) {
  kiln_vec c[RB][2];
  for (int r = 0; r < RB; r++)
    for (int u = 0; u < nv; u++) c[r][u] = kiln_loadu(acc + r * DVP + e0 + u * AW);
  for (int64_t j = 0; j < kb; j++) {
    kiln_vec b[2];
    for (int u = 0; u < nv; u++) b[u] = kiln_pinned(kiln_loadu(vb + j * vstride + e0 + u * AW));
    for (int r = 0; r < RB; r++) {
      float a = pt[j * QB + r];
      for (int u = 0; u < nv; u++) c[r][u] += a * b[u];
    }
  }
  for (int r = 0; r < RB; r++)
    for (int u = 0; u < nv; u++) astore(acc + r * DVP + e0 + u * AW, c[r][u]);
}

/* The online softmax of one key block for the queries of vector v: column
 * v of the scores st (kb key rows; masked where a causal query may not see
 * the key) into probabilities, the running max mx and sum updated, and the
 * rows of acc whose max moved rescaled (rows < `rows`).  All lane-wise:
 * with the queries as rows it took a horizontal max per query and per
 * block, a scalar exp for the rescale and a branch per row. */
static void softmax_column(float *st, int64_t kb, int64_t v, int64_t s0, int64_t l0, int masked,
                           kiln_vec *mx, kiln_vec *sum, float *acc, int64_t rows, int64_t dvp) {
  const kiln_vec ninf = kiln_splat(-INFINITY);
  ai query = {0};
  for (int i = 0; i < AW; i++) query[i] = (int32_t)(l0 + v * AW + i);
  kiln_vec m = ninf;
  for (int64_t j = 0; j < kb; j++) {
    float *sj = st + j * QB + v * AW;
    kiln_vec x = kiln_loadu(sj);
    if (masked) { /* a causal query i sees keys j <= i */
      x = aselect((ai){0} + (int32_t)(s0 + j) <= query, x, ninf);
      astore(sj, x);
    }
    m = kiln_max(m, x);
  }
  kiln_vec mnew = kiln_max(*mx, m);
  ai none = mnew == ninf; /* no finite score yet (every one -inf): probabilities 0, not NaN */
  kiln_vec base = aselect(none, kiln_splat(0.0f), mnew);
  kiln_vec alpha = aselect(*mx == mnew, kiln_splat(1.0f), aexp(*mx - base));
  kiln_vec ps = (kiln_vec){0};
  for (int64_t j = 0; j < kb; j++) {
    float *sj = st + j * QB + v * AW;
    kiln_vec p = aexp(kiln_loadu(sj) - base);
    astore(sj, p);
    ps += p;
  }
  *sum = *sum * alpha + ps;
  *mx = mnew;
  for (int i = 0; i < AW; i++) {
    int64_t r = v * AW + i;
    if (alpha[i] != 1.0f && r < rows) {
      float *ar = acc + r * DVP;
      for (int64_t e = 0; e < dvp; e += AW) astore(ar + e, kiln_loadu(ar + e) * alpha[i]);
    }
  }
}

/* The mask on a block's scores st ([key][query], kb keys from s0, ql
 * query rows from l0 of q entry b, or of the group's entries from b with
 * grouped rows): added, or -inf where a bool mask is 0.  Scalar, key-major
 * as st is laid out: a padding mask (m_row 0) reads one value per key.
 * Next to the block's 2 * D multiply-adds per score it is a few percent. */
static void apply_mask(const attn_args *g, int64_t b, int64_t l0, int64_t ql, int64_t s0, int64_t kb, float *st) {
  int64_t off[QB];
  for (int64_t r = 0; r < ql; r++) {
    int64_t e = b, l = l0 + r;
    if (g->grouped) e += l / g->L, l %= g->L;
    off[r] = e / g->m_hin * g->m_outer + e % g->m_hin * g->m_inner + l * g->m_row + s0 * g->m_col;
  }
  if (g->mask_kind == 1) {
    const float *m = (const float *)g->mask;
    for (int64_t j = 0; j < kb; j++)
      for (int64_t r = 0; r < ql; r++) st[j * QB + r] += m[off[r] + j * g->m_col];
  } else {
    const uint8_t *m = (const uint8_t *)g->mask;
    for (int64_t j = 0; j < kb; j++)
      for (int64_t r = 0; r < ql; r++)
        if (!m[off[r] + j * g->m_col]) st[j * QB + r] = -INFINITY;
  }
}

static void attn_tasks(void *ctx, int64_t lo, int64_t hi) {
  const attn_args *g = ctx;
  const int64_t D = g->D, Dv = g->Dv, dvp = (Dv + AW - 1) / AW * AW;
  float qt[MAX_HEAD_DIM * QB] __attribute__((aligned(64)));  /* the query block transposed, zero past L */
  float kp[KB * MAX_HEAD_DIM] __attribute__((aligned(64)));  /* the last key block, zero rows past S */
  float vb[KB * DVP] __attribute__((aligned(64)));           /* the value block, rows padded */
  float acc[QB * DVP] __attribute__((aligned(64)));          /* unnormalized outputs */
  float st[KB * QB] __attribute__((aligned(64)));            /* scores, then probabilities: [key][query] */
  kiln_vec mx[QV], sum[QV];                                  /* per query, lane by lane */
  /* With grouped rows a task's h is a k / v entry and its rows run over the group's q entries. */
  const int64_t rows_total = g->grouped ? g->group * g->L : g->L;
  for (int64_t t = lo; t < hi; t++) {
    int64_t h = t / g->qblocks, l0 = t % g->qblocks * QB, b = h / g->H, hh = h % g->H;
    if (g->grouped) b = h * g->group, hh = 0;
    int64_t ql = rows_total - l0 < QB ? rows_total - l0 : QB;
    int64_t rows = (ql + RB - 1) / RB * RB, qvs = (ql + AW - 1) / AW; /* rows of acc, query vectors in use */
    /* Grouped rows are contiguous: q / out entry strides are L rows (kiln_attention_masked's layout). */
    const float *q = g->q + head_at(g->qs, b, hh) + l0 * g->qs.row;
    /* Grouped-query attention: q entry b reads k / v entry b / group (the
     * heads are the innermost batch dim, so b = n * Hq + h gives n * Hkv + h / group). */
    int64_t kb = b / g->group;
    const float *k = g->k + head_at(g->ks, kb, hh), *v = g->v + head_at(g->vs, kb, hh);
    transpose_queries(q, ql, D, g->qs.row, qt);
    /* The block's output rows, asked for (for writing) while the keys are
     * walked: arena memory an earlier kernel left in L3. */
    float *o = g->o + head_at(g->os, b, hh) + l0 * g->os.row;
    for (int64_t r = 0; r < ql; r++)
      for (int64_t e = 0; e < Dv; e += 64 / (int64_t)sizeof(float)) __builtin_prefetch(o + r * g->os.row + e, 1);
    for (int64_t i = 0; i < QV; i++) mx[i] = kiln_splat(-INFINITY), sum[i] = (kiln_vec){0};
    for (int64_t r = 0; r < rows; r++) memset(acc + r * DVP, 0, dvp * sizeof(float));
    /* A causal query i sees keys j <= i: the block needs keys up to l0 + ql - 1. */
    int64_t send = g->causal && l0 + ql < g->S ? l0 + ql : g->S;
    for (int64_t s0 = 0; s0 < send; s0 += KB) {
      int64_t kb = send - s0 < KB ? send - s0 : KB, krows = (kb + RB - 1) / RB * RB;
      /* K's rows are read in place, but for a last block whose register blocks reach past S. */
      const float *kr = k + s0 * g->ks.row;
      int64_t krow = g->ks.row;
      if (s0 + krows > g->S) {
        for (int64_t j = 0; j < kb; j++) memcpy(kp + j * D, kr + j * krow, D * sizeof(float));
        memset(kp + kb * D, 0, (krows - kb) * D * sizeof(float));
        kr = kp, krow = D;
      }
      /* V's rows are read in place when whole vectors (Dv a multiple of AW). */
      const float *vbk = v + s0 * g->vs.row;
      int64_t vstride = g->vs.row;
      if (dvp != Dv) {
        for (int64_t j = 0; j < kb; j++) {
          memcpy(vb + j * DVP, v + (s0 + j) * g->vs.row, Dv * sizeof(float));
          memset(vb + j * DVP + Dv, 0, (dvp - Dv) * sizeof(float));
        }
        vbk = vb, vstride = DVP;
      }
      /* A block with keys after some of its queries (causal, on the diagonal)
       * skips what every query concerned masks: the register blocks of keys
       * past a query vector's last query, those keys in the vector's softmax,
       * and the keys past a row block's last query in O += P V (seen(n): the
       * keys of the block up to the block's query n - 1).  About a third of
       * a diagonal block's work. */
      int masked = g->causal && s0 + kb - 1 > l0;
#define SEEN(n) (!masked ? kb : l0 + (n) - s0 < 0 ? 0 : l0 + (n) - s0 < kb ? l0 + (n) - s0 : kb)
      for (int64_t j0 = 0; j0 < krows; j0 += RB)
        for (int64_t v0 = 0; v0 < qvs; v0 += 2) {
          int64_t u0 = j0 < SEEN(v0 * AW + AW) ? v0 : v0 + 1; /* the first vector that sees key j0 */
          if (v0 + 2 <= qvs && u0 == v0)
            scores_block(2, kr + j0 * krow, krow, D, qt, v0, g->scale, st + j0 * QB);
          else if (u0 < qvs && u0 < v0 + 2 && j0 < SEEN(u0 * AW + AW))
            scores_block(1, kr + j0 * krow, krow, D, qt, u0, g->scale, st + j0 * QB);
        }
      if (g->mask_kind)
        apply_mask(g, b, l0, ql, s0, kb, st);
      for (int64_t i = 0; i < qvs; i++)
        softmax_column(st, SEEN(i * AW + AW), i, s0, l0, masked, &mx[i], &sum[i], acc, rows, dvp);
      for (int64_t r0 = 0; r0 < rows; r0 += RB)
        for (int64_t e0 = 0; e0 < dvp; e0 += 2 * AW) {
          if (dvp - e0 >= 2 * AW)
            pv_block(2, st + r0, vbk, vstride, SEEN(r0 + RB), e0, acc + r0 * DVP);
          else
            pv_block(1, st + r0, vbk, vstride, SEEN(r0 + RB), e0, acc + r0 * DVP);
        }
#undef SEEN
    }
    float sums[QB];
    for (int64_t i = 0; i < QV; i++) astore(sums + i * AW, sum[i]);
    for (int64_t r = 0; r < ql; r++) {
      /* A query every key of which is masked has no probabilities: its
       * output is 0 (as the generated lowering's softmax gives), not 0 / 0. */
      float inv = sums[r] > 0.0f ? 1.0f / sums[r] : 0.0f;
      for (int64_t e = 0; e < Dv; e++) o[r * g->os.row + e] = acc[r * DVP + e] * inv;
    }
  }
}

static void run_attention(attn_args *g, int32_t threads) {
  g->grouped = g->group > 1 && !g->causal && g->L < QB;
  g->qblocks = ((g->grouped ? g->group * g->L : g->L) + QB - 1) / QB;
  int64_t tasks = (g->grouped ? g->heads / g->group : g->heads) * g->qblocks;
  kiln_parallel_for(attn_tasks, g, tasks, kiln_parts(tasks, threads));
}

/* Contiguous q, k, v and out ([heads, L, D] and the like), with an optional
 * mask (mask_kind 0: none): what kiln_attention_gqa and kiln_attention_masked
 * run after checking their arguments. */
static void run_contiguous(int64_t heads, int64_t group, int64_t L, int64_t S, int64_t D, int64_t Dv, int64_t q,
                           int64_t k, int64_t v, int64_t out, float scale, int32_t causal, int64_t mask,
                           int32_t mask_kind, int64_t hin, int64_t m_outer, int64_t m_inner, int64_t m_row,
                           int64_t m_col, int32_t threads) {
  attn_args g = {heads, 1, L, S, D, Dv, (const float *)q, (const float *)k, (const float *)v, (float *)out,
                 {L * D, 0, D}, {S * D, 0, D}, {S * Dv, 0, Dv}, {L * Dv, 0, Dv}, scale, causal != 0, 0, group,
                 (const void *)mask, mask_kind, hin, m_outer, m_inner, m_row, m_col};
  run_attention(&g, threads);
}

/* kiln_attention with grouped-query attention: q has `heads` entries (every
 * batch dim flattened, the heads innermost), k and v heads / group of them,
 * and q entry h reads k / v entry h / group (transformers' repeat_kv without
 * the repeated copy).  group must divide heads. */
int32_t kiln_attention_gqa(int64_t heads, int64_t group, int64_t L, int64_t S, int64_t D, int64_t Dv, int64_t q,
                           int64_t k, int64_t v, int64_t out, float scale, int32_t causal, int32_t threads) {
  if (D < 1 || Dv < 1 || D > MAX_HEAD_DIM || Dv > MAX_HEAD_DIM || group < 1 || heads % group) return -1;
  run_contiguous(heads, group, L, S, D, Dv, q, k, v, out, scale, causal, 0, 0, 1, 0, 0, 0, 0, threads);
  return 0;
}

/* kiln_attention_gqa with a mask over the scores: mask_kind 1 adds f32
 * values, 2 keeps the scores whose bool byte is nonzero (-inf elsewhere);
 * the value for q entry b = b_out * hin + b_in, query l, key s is at
 * element b_out * m_outer + b_in * m_inner + l * m_row + s * m_col of
 * mask (see attn_args). */
int32_t kiln_attention_masked(int64_t heads, int64_t group, int64_t L, int64_t S, int64_t D, int64_t Dv,
                              int64_t q, int64_t k, int64_t v, int64_t out, float scale, int32_t causal,
                              int64_t mask, int32_t mask_kind, int64_t hin, int64_t m_outer, int64_t m_inner,
                              int64_t m_row, int64_t m_col, int32_t threads) {
  if (D < 1 || Dv < 1 || D > MAX_HEAD_DIM || Dv > MAX_HEAD_DIM || group < 1 || heads % group || hin < 1 ||
      mask_kind < 1 || mask_kind > 2 || !mask)
    return -1;
  run_contiguous(heads, group, L, S, D, Dv, q, k, v, out, scale, causal, mask, mask_kind, hin, m_outer, m_inner,
                 m_row, m_col, threads);
  return 0;
}

/* out[h, l, :] = softmax_s(q[h, l, :] . k[h, s, :] * scale, s <= l when causal)
 * . v[h, s, :] for h < heads (every batch dim flattened), l < L, s < S; all
 * contiguous f32; on up to `threads` threads of the pool.  D and Dv must be
 * 1 .. MAX_HEAD_DIM (kiln-cpu-library matches only static head dims in that
 * range; anything else returns -1 without writing). */
int32_t kiln_attention(int64_t heads, int64_t L, int64_t S, int64_t D, int64_t Dv, int64_t q, int64_t k,
                       int64_t v, int64_t out, float scale, int32_t causal, int32_t threads) {
  if (D < 1 || Dv < 1 || D > MAX_HEAD_DIM || Dv > MAX_HEAD_DIM) return -1;
  return kiln_attention_gqa(heads, 1, L, S, D, Dv, q, k, v, out, scale, causal, threads);
}

/* kiln.packed_attention: qkv [batch, L, 3, H, D] (q, k, v side by side in a
 * row, each H heads of D) gives out [batch, L, H, D], both contiguous f32:
 * the heads are read and written where they lie, strided, instead of
 * copied out of the projection into [3, batch, H, L, D] and back. */
int32_t kiln_attention_packed(int64_t batch, int64_t H, int64_t L, int64_t D, int64_t qkv, int64_t out,
                              float scale, int32_t causal, int32_t threads) {
  if (D < 1 || D > MAX_HEAD_DIM) return -1;
  const float *p = (const float *)qkv;
  astrides in = {L * 3 * H * D, D, 3 * H * D}, o = {L * H * D, D, H * D};
  attn_args g = {batch * H, H, L, L, D, D, p, p + H * D, p + 2 * H * D, (float *)out,
                 in, in, in, o, scale, causal != 0, 0, 1};
  run_attention(&g, threads);
  return 0;
}
