/*
 * Products of 16-bit floats (bf16, f16) with an f32 accumulator and an f32
 * output: C[M, N] (+)= A[M, K] B[K, N] (B given as [K, N] or, tb, [N, K]).
 *
 * B is packed into panels of 32 columns whose rows hold pairs of K:
 * panel p, pair kk = 32 x (B[2kk][n], B[2kk + 1][n]) -- the operand layout of
 * AVX512-BF16's vdpbf16ps, which adds a[2i]*b[2i] + a[2i+1]*b[2i+1] into f32
 * lane i.  A row's pair is broadcast as one 32-bit value.  A constant B is
 * packed once into its slot (kiln_slot_packed), any other per call.
 *
 * Two paths over that layout:
 *  - amx: AMX-BF16 tile products (tdpbf16ps) for the whole 32-row blocks of
 *    full panels when K is a multiple of 32 (the CPU has amx_bf16 and Linux
 *    granted the tile state; KILN_BF16_AMX=0 turns it off); the rest of
 *    such a product takes the dp path;
 *  - dp: vdpbf16ps (bf16 only; the CPU has avx512_bf16, checked at run time);
 *  - generic: each element widened to f32 and two fmas in the order
 *    vdpbf16ps adds them (odd element first), for f16, for CPUs without the
 *    instruction, and when forced (KILN_BF16_DP=0 or kiln_lowp_set_generic).
 * A bf16 x bf16 (or f16 x f16) product is exact in f32, so the paths differ
 * only where vdpbf16ps flushes denormals.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_native.h"

#define LP_NR 32 /* columns of a panel: two zmm of f32 */
#define LP_MR 8  /* rows of a register tile */
#define LP_MB 64 /* rows of a task */
#define LP_PACK_KIND 48 /* kiln_slot_packed kind: + tb */

enum { LP_BF16 = 0, LP_F16 = 1 };

static int lp_generic = -1; /* 1: the generic path is forced */

/* Whether this CPU runs vdpbf16ps (AVX512-BF16). */
int kiln_lowp_cpu_has_dp(void) {
#if defined(__x86_64__) && (__GNUC__ >= 10)
  return __builtin_cpu_supports("avx512bf16");
#else
  return 0;
#endif
}

/* Force the generic path (1) or let the CPU decide (0); -1 reads KILN_BF16_DP again. */
void kiln_lowp_set_generic(int32_t on) {
  if (on < 0) {
    const char *v = getenv("KILN_BF16_DP");
    lp_generic = v && v[0] == '0';
  } else {
    lp_generic = on != 0;
  }
}

/* Whether bf16 products take the dp path now (1) or the generic one (0). */
int kiln_lowp_uses_dp(void) {
  if (lp_generic < 0) kiln_lowp_set_generic(-1);
  return !lp_generic && kiln_lowp_cpu_has_dp();
}

/* Whether this CPU has AMX-BF16 and Linux lets the process use the tile data (asked once). */
int kiln_lowp_cpu_has_amx(void) { return kiln_amx_usable(22); }

/* Whether bf16 products use AMX now: the dp path is on, AMX is there and KILN_BF16_AMX is not 0. */
int kiln_lowp_uses_amx(void) {
  const char *v = getenv("KILN_BF16_AMX");
  return kiln_lowp_uses_dp() && !(v && v[0] == '0') && kiln_lowp_cpu_has_amx();
}

static inline int64_t lp_panels(int64_t N) { return (N + LP_NR - 1) / LP_NR; }
static inline int64_t lp_pairs(int64_t K) { return (K + 1) / 2; }

static void lp_pack(uint16_t *dst, const uint16_t *B, int64_t K, int64_t N, int64_t ldb, int tb) {
  int64_t np = lp_panels(N), kh = lp_pairs(K);
  for (int64_t p = 0; p < np; p++)
    for (int64_t kk = 0; kk < kh; kk++) {
      uint16_t *row = dst + (p * kh + kk) * (2 * LP_NR);
      for (int j = 0; j < LP_NR; j++) {
        int64_t n = p * LP_NR + j;
        for (int h = 0; h < 2; h++) {
          int64_t k = 2 * kk + h;
          row[2 * j + h] = n < N && k < K ? (tb ? B[n * ldb + k] : B[k * ldb + n]) : 0;
        }
      }
    }
}

#if defined(__x86_64__) && (__GNUC__ >= 10)
#define LP_PACK_TARGET __attribute__((target("avx512f,avx512bw")))

/* lp_pack of panels [p0, p1) of a [K, N] B (not transposed): rows 2kk and
 * 2kk + 1 interleaved 32 columns at a time by two permutes (the columns
 * past N and the odd K's missing row read as 0). */
/* The permutes that interleave two rows of 32 (a, b) into a pair row of the
 * panel layout: (a[j], b[j]) for j < 16 by `lo`, for j >= 16 by `hi`. */
static LP_PACK_TARGET void lp_interleave_idx(__m512i *lo, __m512i *hi) {
  uint16_t lo_idx[32], hi_idx[32];
  for (int i = 0; i < 32; i++) {
    lo_idx[i] = (uint16_t)((i & 1) * 32 + i / 2);
    hi_idx[i] = (uint16_t)(lo_idx[i] + 16);
  }
  *lo = _mm512_loadu_si512(lo_idx);
  *hi = _mm512_loadu_si512(hi_idx);
}

static LP_PACK_TARGET void lp_pack_kn_avx512(uint16_t *dst, const uint16_t *B, int64_t K, int64_t N, int64_t ldb,
                                             int64_t p0, int64_t p1) {
  __m512i lo, hi;
  lp_interleave_idx(&lo, &hi);
  int64_t kh = lp_pairs(K);
  for (int64_t p = p0; p < p1; p++) {
    int64_t n0 = p * LP_NR, nr = N - n0 < LP_NR ? N - n0 : LP_NR;
    __mmask32 mask = nr == LP_NR ? (__mmask32)~0u : (__mmask32)((1u << nr) - 1);
    uint16_t *panel = dst + p * kh * (2 * LP_NR);
    for (int64_t kk = 0; kk < kh; kk++) {
      const uint16_t *r0 = B + 2 * kk * ldb + n0;
      __m512i a = _mm512_maskz_loadu_epi16(mask, r0);
      __m512i b = 2 * kk + 1 < K ? _mm512_maskz_loadu_epi16(mask, r0 + ldb) : _mm512_setzero_si512();
      _mm512_storeu_si512(panel + kk * (2 * LP_NR), _mm512_permutex2var_epi16(a, lo, b));
      _mm512_storeu_si512(panel + kk * (2 * LP_NR) + LP_NR, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
}

typedef struct {
  uint16_t *dst;
  const uint16_t *B;
  int64_t K, N, ldb;
} lp_pack_args;

static void lp_pack_task(void *ctx, int64_t lo, int64_t hi) {
  const lp_pack_args *g = ctx;
  lp_pack_kn_avx512(g->dst, g->B, g->K, g->N, g->ldb, lo, hi);
}
#endif

/* Whether lp_pack_kn_avx512 runs here. */
static int lp_pack_vector(void) {
#if defined(__x86_64__) && (__GNUC__ >= 10)
  static int has = -1;
  if (has < 0) has = __builtin_cpu_supports("avx512bw");
  return has;
#else
  return 0;
#endif
}

/* B [K, N] packed per call (an activation: a convolution's im2col) into
 * `dst`: vectorized where the CPU has AVX512-BW, panels over the pool when
 * there are many. */
static void lp_pack_call(uint16_t *dst, const uint16_t *B, int64_t K, int64_t N, int64_t ldb, int32_t threads) {
#if defined(__x86_64__) && (__GNUC__ >= 10)
  if (lp_pack_vector()) {
    lp_pack_args g = {dst, B, K, N, ldb};
    int64_t np = lp_panels(N);
    if (threads <= 1 || np < 2 || K * N < (1 << 16))
      lp_pack_task(&g, 0, np);
    else
      kiln_parallel_for(lp_pack_task, &g, np, kiln_parts(np, threads));
    return;
  }
#else
  (void)threads;
#endif
  lp_pack(dst, B, K, N, ldb, 0);
}

static void lp_pack_nt(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  lp_pack((uint16_t *)dst, (const uint16_t *)src, rows, cols, ld, 0);
}

static void lp_pack_t(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  lp_pack((uint16_t *)dst, (const uint16_t *)src, rows, cols, ld, 1);
}

/* The pair of A's row `a` at pair kk (the odd K's last pair: its element and 0). */
static inline uint32_t lp_pair(const uint16_t *a, int64_t kk, int64_t K) {
  if (2 * kk + 1 < K) {
    uint32_t v;
    memcpy(&v, a + 2 * kk, 4);
    return v;
  }
  return a[2 * kk];
}

static inline float lp_widen(uint16_t v, int dtype) {
  if (dtype == LP_BF16) {
    uint32_t bits = (uint32_t)v << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  _Float16 h;
  memcpy(&h, &v, 2);
  return (float)h;
}

/* Store acc (mr x nr) into C, added to beta * C. */
static inline __attribute__((always_inline)) void lp_store(float acc[][LP_NR], int mr, int64_t nr, float *C,
                                                           int64_t ldc, float beta) {
  for (int m = 0; m < mr; m++)
    for (int64_t j = 0; j < nr; j++) C[m * ldc + j] = beta != 0.0f ? acc[m][j] + beta * C[m * ldc + j] : acc[m][j];
}

static inline __attribute__((always_inline)) void lp_tile_generic(const uint16_t *A, int64_t lda, const uint16_t *P,
                                                                   int64_t K, float *C, int64_t ldc, int mr,
                                                                   int64_t nr, float beta, int dtype) {
  float acc[LP_MR][LP_NR];
  memset(acc, 0, sizeof acc);
  int64_t kh = lp_pairs(K);
  for (int64_t kk = 0; kk < kh; kk++) {
    const uint16_t *row = P + kk * (2 * LP_NR);
    float b0[LP_NR], b1[LP_NR];
    for (int j = 0; j < LP_NR; j++) {
      b0[j] = lp_widen(row[2 * j], dtype);
      b1[j] = lp_widen(row[2 * j + 1], dtype);
    }
    for (int m = 0; m < mr; m++) {
      uint32_t pr = lp_pair(A + m * lda, kk, K);
      float a0 = lp_widen((uint16_t)pr, dtype), a1 = lp_widen((uint16_t)(pr >> 16), dtype);
      for (int j = 0; j < LP_NR; j++) {
        acc[m][j] = __builtin_fmaf(a1, b1[j], acc[m][j]);
        acc[m][j] = __builtin_fmaf(a0, b0[j], acc[m][j]);
      }
    }
  }
  lp_store(acc, mr, nr, C, ldc, beta);
}

static void lp_rows_generic(const uint16_t *A, int64_t lda, const uint16_t *P, int64_t K, float *C, int64_t ldc,
                            int64_t rows, int64_t nr, float beta, int dtype) {
  int64_t m = 0;
  for (; m + LP_MR <= rows; m += LP_MR)
    lp_tile_generic(A + m * lda, lda, P, K, C + m * ldc, ldc, LP_MR, nr, beta, dtype);
  for (; m < rows; m++) lp_tile_generic(A + m * lda, lda, P, K, C + m * ldc, ldc, 1, nr, beta, dtype);
}

#if defined(__x86_64__) && (__GNUC__ >= 10)
#define LP_DP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

static inline __attribute__((always_inline)) LP_DP_TARGET void lp_tile_dp(const uint16_t *A, int64_t lda,
                                                                           const uint16_t *P, int64_t K, float *C,
                                                                           int64_t ldc, int mr, int64_t nr,
                                                                           float beta) {
  __m512 acc[LP_MR][2];
  for (int m = 0; m < mr; m++) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
  int64_t kh = lp_pairs(K), whole = K / 2; /* the pairs without the odd K's last one, tested outside the loop */
  for (int64_t kk = 0; kk < whole; kk++) {
    const uint16_t *row = P + kk * (2 * LP_NR);
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(row), b1 = (__m512bh)_mm512_loadu_si512(row + LP_NR);
    for (int m = 0; m < mr; m++) {
      int32_t pr;
      memcpy(&pr, A + m * lda + 2 * kk, 4);
      __m512bh a = (__m512bh)_mm512_set1_epi32(pr);
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], a, b0);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], a, b1);
    }
  }
  for (int64_t kk = whole; kk < kh; kk++) {
    const uint16_t *row = P + kk * (2 * LP_NR);
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(row), b1 = (__m512bh)_mm512_loadu_si512(row + LP_NR);
    for (int m = 0; m < mr; m++) {
      __m512bh a = (__m512bh)_mm512_set1_epi32((int)lp_pair(A + m * lda, kk, K));
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], a, b0);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], a, b1);
    }
  }
  if (nr == LP_NR) {
    for (int m = 0; m < mr; m++)
      for (int h = 0; h < 2; h++) {
        float *c = C + m * ldc + 16 * h;
        __m512 v = beta != 0.0f ? _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(c), acc[m][h]) : acc[m][h];
        _mm512_storeu_ps(c, v);
      }
    return;
  }
  float tmp[LP_MR][LP_NR];
  for (int m = 0; m < mr; m++) {
    _mm512_storeu_ps(tmp[m], acc[m][0]);
    _mm512_storeu_ps(tmp[m] + 16, acc[m][1]);
  }
  lp_store(tmp, mr, nr, C, ldc, beta);
}

static LP_DP_TARGET void lp_rows_dp(const uint16_t *A, int64_t lda, const uint16_t *P, int64_t K, float *C,
                                    int64_t ldc, int64_t rows, int64_t nr, float beta) {
  int64_t m = 0;
  for (; m + LP_MR <= rows; m += LP_MR) lp_tile_dp(A + m * lda, lda, P, K, C + m * ldc, ldc, LP_MR, nr, beta);
  switch (rows - m) { /* constant tile heights: the loops over m unroll, acc stays in registers */
    case 7: lp_tile_dp(A + m * lda, lda, P, K, C + m * ldc, ldc, 7, nr, beta); break;
    case 6: lp_tile_dp(A + m * lda, lda, P, K, C + m * ldc, ldc, 6, nr, beta); break;
    case 5: lp_tile_dp(A + m * lda, lda, P, K, C + m * ldc, ldc, 5, nr, beta); break;
    case 4: lp_tile_dp(A + m * lda, lda, P, K, C + m * ldc, ldc, 4, nr, beta); break;
    case 3: lp_tile_dp(A + m * lda, lda, P, K, C + m * ldc, ldc, 3, nr, beta); break;
    case 2: lp_tile_dp(A + m * lda, lda, P, K, C + m * ldc, ldc, 2, nr, beta); break;
    case 1: lp_tile_dp(A + m * lda, lda, P, K, C + m * ldc, ldc, 1, nr, beta); break;
    default: break;
  }
}
#endif

#if defined(__x86_64__) && (__GNUC__ >= 11)
#define LP_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

/* C[32 rows, 32 columns] (+)= A[32, K] times one packed panel; K a multiple of 32. */
static LP_AMX_TARGET void lp_amx_block(const uint16_t *A, int64_t lda, const uint16_t *panel, int64_t K, float *C,
                                       int64_t ldc, float beta) {
  if (beta != 0.0f) {
    _tile_loadd(0, C, ldc * 4);
    _tile_loadd(1, C + 16, ldc * 4);
    _tile_loadd(2, C + 16 * ldc, ldc * 4);
    _tile_loadd(3, C + 16 * ldc + 16, ldc * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t k = 0; k < K; k += 32) {
    const uint16_t *b = panel + (k / 2) * (2 * LP_NR); /* 16 pair rows of 128 bytes */
    _tile_loadd(4, A + k, lda * 2);
    _tile_loadd(5, A + 16 * lda + k, lda * 2);
    _tile_loadd(6, b, 2 * LP_NR * 2);
    _tile_loadd(7, b + LP_NR, 2 * LP_NR * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, C, ldc * 4);
  _tile_stored(1, C + 16, ldc * 4);
  _tile_stored(2, C + 16 * ldc, ldc * 4);
  _tile_stored(3, C + 16 * ldc + 16, ldc * 4);
}

#endif

typedef struct {
  int64_t M, N, K, lda, ldc, np;
  const uint16_t *A, *P;
  float *C;
  float beta;
  int dtype, dp, amx;
} lp_args;

/* Task t: rows [LP_MB * (t / np), ...) times panel t % np. */
static void lp_task(void *ctx, int64_t lo, int64_t hi) {
  const lp_args *g = ctx;
  int64_t kh = lp_pairs(g->K);
  int configured = 0; /* this thread's tile configuration loaded */
  for (int64_t t = lo; t < hi; t++) {
    int64_t p = t % g->np, m0 = t / g->np * LP_MB;
    int64_t rows = g->M - m0 < LP_MB ? g->M - m0 : LP_MB;
    int64_t n0 = p * LP_NR, nr = g->N - n0 < LP_NR ? g->N - n0 : LP_NR;
    const uint16_t *a = g->A + m0 * g->lda, *panel = g->P + p * kh * 2 * LP_NR;
    float *c = g->C + m0 * g->ldc + n0;
#if defined(__x86_64__) && (__GNUC__ >= 11)
    if (g->amx && nr == LP_NR) { /* whole 32-row blocks on the tiles, the rest below */
      if (!configured) {
        kiln_amx_config();
        configured = 1;
      }
      int64_t whole = rows / 32 * 32;
      for (int64_t m = 0; m < whole; m += 32)
        lp_amx_block(a + m * g->lda, g->lda, panel, g->K, c + m * g->ldc, g->ldc, g->beta);
      a += whole * g->lda;
      c += whole * g->ldc;
      rows -= whole;
    }
#endif
#if defined(__x86_64__) && (__GNUC__ >= 10)
    if (g->dp) {
      if (rows > 0) lp_rows_dp(a, g->lda, panel, g->K, c, g->ldc, rows, nr, g->beta);
      continue;
    }
#endif
    lp_rows_generic(a, g->lda, panel, g->K, c, g->ldc, rows, nr, g->beta, g->dtype);
  }
#if defined(__x86_64__) && (__GNUC__ >= 11)
  if (configured) kiln_amx_release(); /* a thread holding tile state costs every context switch */
#else
  (void)configured;
#endif
}

/* A per-call buffer of `bytes` (64-byte aligned) from the heap: kiln_alloc
 * maps 2 MiB pages of its own from 2 MiB up, which the kernel zeroes on
 * every call (a bf16 ResNet-50 spent 5% of its time in clear_page); freed
 * heap memory stays resident (KILN_MALLOC_TUNE). */
static void *lp_scratch(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 127) / 64 * 64);
  if (p == NULL) abort(); /* as the other kernels: no memory for scratch is fatal */
  return p;
}

/* The product of A [M, K] (row-major, lda) and the packed B (np panels of
 * lp_pairs(K) pair rows) into C [M, N] (ldc) on `threads` of the pool. */
static void lp_run(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, const uint16_t *P, float beta,
                   float *C, int64_t ldc, int32_t dtype, int32_t threads) {
  int64_t np = lp_panels(N);
  int dp = dtype == LP_BF16 && kiln_lowp_uses_dp();
  lp_args g = {M, N, K, lda, ldc, np, A, P, C, beta, dtype, dp,
               dp && K % 32 == 0 && M >= 32 && kiln_lowp_uses_amx()};
  int64_t tasks = (M + LP_MB - 1) / LP_MB * np;
  if (threads <= 1 || tasks == 1)
    lp_task(&g, 0, tasks);
  else
    kiln_parallel_for(lp_task, &g, tasks, kiln_parts(tasks, threads));
}

/* C (f32, ldc) = A B + beta C for 16-bit A and B (dtype 0 bf16, 1 f16; B
 * [K, N], or [N, K] when tb), on `threads` of the pool; `slot` holds B packed
 * once when it is a constant (0: packed per call). */
void kiln_lowp_gemm(int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int64_t B, int64_t ldb, int32_t tb,
                    float beta, int64_t C, int64_t ldc, int32_t dtype, int32_t threads, int64_t slot) {
  if (M <= 0 || N <= 0) return;
  int64_t np = lp_panels(N), kh = lp_pairs(K);
  int64_t halves = np * kh * 2 * LP_NR; /* uint16 elements of the packed B */
  kiln_pack_fn pack = tb ? lp_pack_t : lp_pack_nt;
  const uint16_t *P = (const uint16_t *)kiln_slot_packed(slot, LP_PACK_KIND + tb, (const float *)B, K, N, ldb,
                                                         (halves + 1) / 2, pack);
  uint16_t *own = NULL;
  if (P == NULL) {
    own = lp_scratch((size_t)halves * 2);
    if (tb)
      lp_pack(own, (const uint16_t *)B, K, N, ldb, 1);
    else
      lp_pack_call(own, (const uint16_t *)B, K, N, ldb, threads);
    P = own;
  }
  lp_run(M, N, K, (const uint16_t *)A, lda, P, beta, (float *)C, ldc, dtype, threads);
  free(own);
}

/* ---------------------------------------------------- 16-bit convolution
 *
 * kiln_lowp_conv2d: per image, the im2col of a 16-bit NCHW input (rows k =
 * (c, kh, kw), columns p = (oh, ow)) gathered straight into the pair panels
 * lp_pack would make of it -- the zero padding read as 0, no padded copy and
 * no im2col buffer -- then the weight [M, K] times it as kiln_lowp_gemm. */
typedef struct {
  const uint16_t *x; /* one image [C][H][W] */
  uint16_t *dst;     /* the packed panels */
  int64_t C, H, W, KH, KW, sh, sw, dh, dw, pt, pl, OW, N, K;
} lp_gather_args;

/* A panel's columns as runs along output rows: run r covers columns
 * [j0, j0 + len) of the panel, outputs (oh, ow .. ow + len) (before the
 * kernel offsets: input row ih, column iw of its first output). */
typedef struct {
  int64_t j0, len, ih, iw;
} lp_run_t;

/* The runs of the panel's columns [n0, n0 + nr) (at most LP_NR); their count. */
static int lp_panel_runs(const lp_gather_args *g, int64_t n0, int64_t nr, lp_run_t runs[LP_NR]) {
  int nruns = 0;
  for (int64_t j = 0, oh = n0 / g->OW, ow = n0 % g->OW; j < nr; oh++, ow = 0) {
    int64_t len = g->OW - ow < nr - j ? g->OW - ow : nr - j;
    runs[nruns++] = (lp_run_t){j, len, oh * g->sh - g->pt, ow * g->sw - g->pl};
    j += len;
  }
  return nruns;
}

/* (c, kh, kw) of the im2col's next row. */
static inline void lp_next_row(const lp_gather_args *g, int64_t *c, int64_t *kh, int64_t *kw) {
  if (++*kw < g->KW) return;
  *kw = 0;
  if (++*kh < g->KH) return;
  *kh = 0;
  ++*c;
}

/* Row (c, kh, kw) of the im2col over a panel's runs into out[32] (0 in the padding and past the panel). */
static void lp_gather_row(const lp_gather_args *g, const lp_run_t *runs, int nruns, int64_t c, int64_t kh,
                          int64_t kw, uint16_t out[LP_NR]) {
  memset(out, 0, LP_NR * sizeof(uint16_t));
  const uint16_t *xc = g->x + c * g->H * g->W;
  int64_t dy = kh * g->dh, dx = kw * g->dw, sw = g->sw;
  for (int r = 0; r < nruns; r++) {
    const lp_run_t *u = &runs[r];
    int64_t ih = u->ih + dy, iw = u->iw + dx, lo, hi;
    if ((uint64_t)ih >= (uint64_t)g->H) continue;
    kiln_run_inside(iw, sw, g->W, u->len, &lo, &hi);
    const uint16_t *xr = xc + ih * g->W + iw; /* output t of the run reads xr[t * sw] */
    if (sw == 1)
      memcpy(out + u->j0 + lo, xr + lo, (size_t)(hi - lo) * sizeof(uint16_t));
    else
      for (int64_t t = lo; t < hi; t++) out[u->j0 + t] = xr[t * sw];
  }
}

/* Two rows of 32 as one pair row of the panel layout: (a[j], b[j]) for each j. */
static void lp_interleave(const uint16_t a[LP_NR], const uint16_t b[LP_NR], uint16_t *dst) {
  for (int j = 0; j < LP_NR; j++) {
    dst[2 * j] = a[j];
    dst[2 * j + 1] = b[j];
  }
}

static void lp_gather_panels(const lp_gather_args *g, int64_t lo, int64_t hi) {
  int64_t kh2 = lp_pairs(g->K);
  uint16_t row[2][LP_NR];
  lp_run_t runs[LP_NR];
  for (int64_t p = lo; p < hi; p++) {
    int64_t n0 = p * LP_NR, nr = g->N - n0 < LP_NR ? g->N - n0 : LP_NR;
    int nruns = lp_panel_runs(g, n0, nr, runs);
    uint16_t *panel = g->dst + p * kh2 * (2 * LP_NR);
    int64_t c = 0, kh = 0, kw = 0; /* row 2kk's (c, kh, kw), stepped */
    for (int64_t kk = 0; kk < kh2; kk++) {
      lp_gather_row(g, runs, nruns, c, kh, kw, row[0]);
      lp_next_row(g, &c, &kh, &kw);
      memset(row[1], 0, sizeof row[1]);
      if (2 * kk + 1 < g->K) {
        lp_gather_row(g, runs, nruns, c, kh, kw, row[1]);
        lp_next_row(g, &c, &kh, &kw);
      }
      lp_interleave(row[0], row[1], panel + kk * (2 * LP_NR));
    }
  }
}

#if defined(__x86_64__) && (__GNUC__ >= 10)
/* Row (c, kh, kw) of the im2col over a panel's runs, as one vector of 32:
 * each run one masked load (stride 1) or two masked loads and a permute
 * picking the even elements (stride 2); lanes in the padding or past the
 * panel 0.  A masked load's address may lie before x: masked lanes do not
 * fault. */
static LP_PACK_TARGET __m512i lp_gather_vec(const lp_gather_args *g, const lp_run_t *runs, int nruns, int64_t c,
                                            int64_t kh, int64_t kw, __m512i evens) {
  __m512i v = _mm512_setzero_si512();
  const uint16_t *xc = g->x + c * g->H * g->W;
  int64_t dy = kh * g->dh, dx = kw * g->dw, sw = g->sw;
  for (int r = 0; r < nruns; r++) {
    const lp_run_t *u = &runs[r];
    int64_t ih = u->ih + dy, iw = u->iw + dx, lo, hi;
    if ((uint64_t)ih >= (uint64_t)g->H) continue;
    kiln_run_inside(iw, sw, g->W, u->len, &lo, &hi);
    if (lo == hi) continue;
    __mmask32 lanes = (__mmask32)((((uint64_t)1 << (hi - lo)) - 1) << (u->j0 + lo));
    const uint16_t *xr = xc + ih * g->W + iw; /* output t of the run reads xr[t * sw] */
    if (sw == 1) {
      v = _mm512_mask_loadu_epi16(v, lanes, xr - u->j0);
    } else { /* sw == 2: lane j reads element 2j of the 64 from xr - 2 j0 */
      const uint16_t *base = xr - 2 * u->j0;
      /* the even elements 2 (j0 + t) for t in [lo, hi): bit 2 (j0 + hi) may be 64 */
      int64_t from = 2 * (u->j0 + lo), to = 2 * (u->j0 + hi);
      uint64_t below_to = to >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << to) - 1;
      uint64_t want = (uint64_t)0x5555555555555555ull & below_to & ~(((uint64_t)1 << from) - 1);
      __m512i a = _mm512_maskz_loadu_epi16((__mmask32)want, base);
      __m512i b = _mm512_maskz_loadu_epi16((__mmask32)(want >> 32), base + 32);
      v = _mm512_mask_mov_epi16(v, lanes, _mm512_permutex2var_epi16(a, evens, b));
    }
  }
  return v;
}

/* lp_gather_panels for strides 1 and 2 on AVX512-BW: the runs found once a
 * panel, (c, kh, kw) stepped along K, each pair of rows interleaved in
 * registers as lp_pack_kn_avx512 does. */
static LP_PACK_TARGET void lp_gather_panels_avx512(const lp_gather_args *g, int64_t lo, int64_t hi) {
  uint16_t ev_idx[32];
  for (int i = 0; i < 32; i++) ev_idx[i] = (uint16_t)(2 * i);
  const __m512i evens = _mm512_loadu_si512(ev_idx);
  __m512i ilo, ihi;
  lp_interleave_idx(&ilo, &ihi);
  int64_t kh2 = lp_pairs(g->K);
  lp_run_t runs[LP_NR];
  for (int64_t p = lo; p < hi; p++) {
    int64_t n0 = p * LP_NR, nr = g->N - n0 < LP_NR ? g->N - n0 : LP_NR;
    int nruns = lp_panel_runs(g, n0, nr, runs);
    uint16_t *panel = g->dst + p * kh2 * (2 * LP_NR);
    int64_t c = 0, kh = 0, kw = 0; /* row 2kk's (c, kh, kw), stepped */
    for (int64_t kk = 0; kk < kh2; kk++) {
      __m512i a = lp_gather_vec(g, runs, nruns, c, kh, kw, evens);
      lp_next_row(g, &c, &kh, &kw);
      __m512i b = _mm512_setzero_si512();
      if (2 * kk + 1 < g->K) {
        b = lp_gather_vec(g, runs, nruns, c, kh, kw, evens);
        lp_next_row(g, &c, &kh, &kw);
      }
      _mm512_storeu_si512(panel + kk * (2 * LP_NR), _mm512_permutex2var_epi16(a, ilo, b));
      _mm512_storeu_si512(panel + kk * (2 * LP_NR) + LP_NR, _mm512_permutex2var_epi16(a, ihi, b));
    }
  }
}
#endif

static void lp_gather_task(void *ctx, int64_t lo, int64_t hi) {
  const lp_gather_args *g = ctx;
#if defined(__x86_64__) && (__GNUC__ >= 10)
  if (g->sw <= 2 && lp_pack_vector()) {
    lp_gather_panels_avx512(g, lo, hi);
    return;
  }
#endif
  lp_gather_panels(g, lo, hi);
}

/* Y[n] (f32 [M, OH * OW]) = W [M, C * KH * KW] (16-bit, row-major) times the
 * im2col of X[n] (16-bit [C, H, W], zero-padded by pt / pl at the top / left
 * and as far as the output needs at the bottom / right) + beta Y[n], for
 * each of the `batch` images; dtype 0 bf16, 1 f16. */
void kiln_lowp_conv2d(int64_t batch, int64_t M, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
                      int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, int64_t X,
                      int64_t Wt, float beta, int64_t Y, int32_t dtype, int32_t threads) {
  int64_t N = OH * OW, K = C * KH * KW;
  if (batch <= 0 || M <= 0 || N <= 0) return;
  int64_t np = lp_panels(N), kh = lp_pairs(K);
  uint16_t *P = lp_scratch((size_t)(np * kh * 2 * LP_NR) * 2);
  for (int64_t b = 0; b < batch; b++) {
    lp_gather_args g = {(const uint16_t *)X + b * C * H * W, P, C, H, W, KH, KW, sh, sw, dh, dw, pt, pl, OW, N, K};
    if (threads <= 1 || np < 2 || K * N < (1 << 14))
      lp_gather_task(&g, 0, np);
    else
      kiln_parallel_for(lp_gather_task, &g, np, kiln_parts(np, threads));
    lp_run(M, N, K, (const uint16_t *)Wt, K, P, beta, (float *)Y + b * M * N, N, dtype, threads);
  }
  free(P);
}
