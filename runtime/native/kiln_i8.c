/*
 * Integer products of 8-bit operands with zero points (ONNX MatMulInteger,
 * kiln.matmul_integer): C[M, N] (+)= (A - a_zp)(B - b_zp) in int32, wrapping
 * as int32 accumulation does, for A [M, K] (u8 or s8, rows lda apart) and
 * B [K, N] (s8 or u8, rows ldb apart).
 *
 * B is packed into panels of 32 columns whose rows hold quads of K:
 * panel p, quad q = 32 x int32 words, word j the four bytes B[4q .. 4q + 3][n]
 * as s8 (a u8 B is stored as B - 128: its zero point becomes b_zp - 128) --
 * the operand layout of VNNI's vpdpbusd (u8 x s8, four products summed into
 * int32 lane i) and of AMX-INT8's tile products -- then the panel's 32 column
 * sums.  A row's quad is broadcast as one 32-bit value.  A constant B is
 * packed once into its slot (kiln_slot_packed), any other per call.
 *
 * With b' the packed B and zb its zero point,
 *   sum_k (a - a_zp)(b' - zb) = sum a b' - a_zp colsum(b')[n] - zb rowsum(a)[m] + K a_zp zb;
 * vpdpbusd multiplies u8 by s8, so an s8 A is read as a + 128 (its top bits
 * flipped), which adds 128 colsum(b')[n] to the sums: the column sums' factor
 * is then a_zp + 128.  Every term is taken mod 2^32, so the result is the
 * exact product mod 2^32 whatever the path.
 *
 * Paths over that layout:
 *  - amx: AMX-INT8 tiles (tdpbusd / tdpbssd) for the whole 32-row blocks of
 *    full panels when K is a multiple of 64 (the CPU has amx_int8 and Linux
 *    granted the tile state; KILN_I8_AMX=0 turns it off);
 *  - vnni: vpdpbusd on 8 x 32 register tiles (the CPU has avx512_vnni);
 *  - avx2: for CPUs with AVX2 but no VNNI (AMD Zen 2 / 3, older Intel): B
 *    packed as int16 instead (panel = 4 chunks of 8 columns, each chunk's
 *    quads contiguous: [kq][8][4] int16, then the 32 column sums), A's rows
 *    widened to int16 once per tile, and vpmaddwd (pairs of 16-bit products
 *    summed into int32: exact, unlike vpmaddubsw's saturating 16-bit sums)
 *    on 6 x 8 register tiles;
 *  - generic: plain int32 arithmetic, for other CPUs and when forced
 *    (KILN_I8_VNNI=0 or kiln_i8_set_generic).
 */
#include <stdlib.h>
#include <string.h>

#include "kiln_native.h"

#define I8_NR 32 /* columns of a panel: two zmm of int32 */
#define I8_MR 8  /* rows of a register tile */
#define I8_MB 64 /* rows of a task */
#define I8_AVX2_MR 6 /* rows of an avx2 tile: 6 x 2 accumulators, 2 B registers and A's quad fill 15 of 16 ymm */
#define I8_PACK_KIND 80 /* kiln_slot_packed kind: + 1 for a u8 B, + 2 for the avx2 path's int16 layout */

enum { I8_A_UNSIGNED = 1, I8_B_UNSIGNED = 2 };

static int i8_generic = -1; /* 1: the generic path is forced */

/* Whether this CPU runs vpdpbusd on 512-bit vectors (AVX512-VNNI). */
int kiln_i8_cpu_has_vnni(void) {
#if defined(__x86_64__) && (__GNUC__ >= 10)
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
  return 0;
#endif
}

/* Force the generic path (1) or let the CPU decide (0); -1 reads KILN_I8_VNNI again. */
void kiln_i8_set_generic(int32_t on) {
  if (on < 0) {
    const char *v = getenv("KILN_I8_VNNI");
    i8_generic = v && v[0] == '0';
  } else {
    i8_generic = on != 0;
  }
}

/* Whether integer products take the vnni (or amx) path now (1) or the generic one (0). */
int kiln_i8_uses_vnni(void) {
  if (i8_generic < 0) kiln_i8_set_generic(-1);
  return !i8_generic && kiln_i8_cpu_has_vnni();
}

/* Whether this CPU has AVX2 (the avx2 path, taken where there is no VNNI). */
int kiln_i8_cpu_has_avx2(void) {
#if defined(__x86_64__) && (__GNUC__ >= 10)
  return __builtin_cpu_supports("avx2");
#else
  return 0;
#endif
}

/* Whether integer products take the avx2 path now (no VNNI, AVX2 there, the generic path not forced). */
int kiln_i8_uses_avx2(void) {
  if (i8_generic < 0) kiln_i8_set_generic(-1);
  return !i8_generic && !kiln_i8_cpu_has_vnni() && kiln_i8_cpu_has_avx2();
}

/* Whether this CPU has AMX-INT8 and Linux lets the process use the tile data (asked once). */
int kiln_i8_cpu_has_amx(void) { return kiln_amx_usable(25); }

/* Whether integer products of whole 32-row blocks use AMX now: vnni is on, AMX is there, KILN_I8_AMX is not 0. */
int kiln_i8_uses_amx(void) {
  const char *v = getenv("KILN_I8_AMX");
  return kiln_i8_uses_vnni() && !(v && v[0] == '0') && kiln_i8_cpu_has_amx();
}

static inline int64_t i8_panels(int64_t N) { return (N + I8_NR - 1) / I8_NR; }
static inline int64_t i8_quads(int64_t K) { return (K + 3) / 4; }
/* int32 words of one packed panel: the quads, then the column sums. */
static inline int64_t i8_panel_words(int64_t K) { return (i8_quads(K) + 1) * I8_NR; }

/* int32 words of one panel in the avx2 path's int16 layout: 4 chunks of kq x 8 x 4 int16, then the column sums. */
static inline int64_t i8_panel16_words(int64_t K) { return i8_quads(K) * I8_NR * 2 + I8_NR; }

/* B's panels with their column sums: int8 quad rows (32 columns x 4 of K each), or with `wide` the avx2
 * path's int16 chunks of 8 columns ([kq][8][4] each, one after the other). */
static void i8_pack_panels(void *dst, const uint8_t *B, int64_t K, int64_t N, int64_t ldb, int b_unsigned,
                           int wide) {
  int64_t np = i8_panels(N), kq = i8_quads(K);
  int64_t bytes = (wide ? i8_panel16_words(K) : i8_panel_words(K)) * 4;
  uint8_t flip = b_unsigned ? 0x80 : 0;
  for (int64_t p = 0; p < np; p++) {
    char *panel = (char *)dst + p * bytes;
    int32_t sums[I8_NR] = {0};
    for (int64_t q = 0; q < kq; q++)
      for (int h = 0; h < 4; h++) {
        int64_t k = 4 * q + h;
        for (int j = 0; j < I8_NR; j++) {
          int64_t n = p * I8_NR + j;
          int8_t v = n < N && k < K ? (int8_t)(B[k * ldb + n] ^ flip) : 0;
          if (wide)
            ((int16_t *)panel)[(j / 8 * kq + q) * 32 + 4 * (j % 8) + h] = v;
          else
            ((int8_t *)panel)[q * I8_NR * 4 + 4 * j + h] = v;
          sums[j] += v;
        }
      }
    memcpy(panel + kq * I8_NR * 4 * (wide ? 2 : 1), sums, sizeof sums);
  }
}

static void i8_pack_s(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  i8_pack_panels(dst, (const uint8_t *)src, rows, cols, ld, 0, 0);
}

static void i8_pack_u(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  i8_pack_panels(dst, (const uint8_t *)src, rows, cols, ld, 1, 0);
}

static void i8_pack16_s(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  i8_pack_panels(dst, (const uint8_t *)src, rows, cols, ld, 0, 1);
}

static void i8_pack16_u(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  i8_pack_panels(dst, (const uint8_t *)src, rows, cols, ld, 1, 1);
}

/* Row a's quad q as a little-endian word (the bytes past K: 0), each byte xor `flip`. */
static inline uint32_t i8_quad(const uint8_t *a, int64_t q, int64_t K, uint32_t flip) {
  uint32_t v = 0;
  if (4 * q + 4 <= K) {
    memcpy(&v, a + 4 * q, 4);
    return v ^ flip;
  }
  memcpy(&v, a + 4 * q, (size_t)(K - 4 * q));
  return v ^ (flip >> (8 * (4 * q + 4 - K))); /* the padding stays 0 */
}

typedef struct {
  int64_t M, N, K, lda, ldc, mbs; /* mbs: row blocks of I8_MB */
  int64_t pw;                     /* int32 words of a packed panel (the avx2 path's layout or the others') */
  const uint8_t *A;
  const int8_t *P;
  int32_t *C;
  const int32_t *rowsum; /* sum of each row of A (NULL when zb is 0) */
  uint32_t zc, zb, kzz;   /* the factor of the column sums, B's zero point, K a_zp zb (mod 2^32) */
  int32_t beta;
  uint32_t flip; /* xor of A's bytes as the product reads them (0x80808080 for s8 A on vpdpbusd) */
  int vnni, amx, avx2, a_signed;
} i8_args;

/* Store acc (mr x nr, the raw sums) into C corrected for the zero points, added to C when beta. */
static inline __attribute__((always_inline)) void i8_store(const i8_args *g, int32_t acc[][I8_NR], int mr,
                                                           int64_t nr, const int32_t *colsum, int64_t m0, int32_t *C) {
  for (int m = 0; m < mr; m++) {
    uint32_t rz = g->rowsum ? g->zb * (uint32_t)g->rowsum[m0 + m] : 0;
    for (int64_t j = 0; j < nr; j++) {
      uint32_t v = (uint32_t)acc[m][j] - g->zc * (uint32_t)colsum[j] - rz + g->kzz;
      int32_t *c = C + m * g->ldc + j;
      *c = (int32_t)(g->beta ? v + (uint32_t)*c : v);
    }
  }
}

static inline __attribute__((always_inline)) void i8_tile_generic(const i8_args *g, const uint8_t *A,
                                                                   const int8_t *panel, int64_t m0, int32_t *C,
                                                                   int mr, int64_t nr) {
  int32_t acc[I8_MR][I8_NR];
  memset(acc, 0, sizeof acc);
  int64_t kq = i8_quads(g->K);
  for (int64_t q = 0; q < kq; q++) {
    const int8_t *row = panel + q * I8_NR * 4;
    for (int m = 0; m < mr; m++) {
      uint32_t w = i8_quad(A + m * g->lda, q, g->K, g->flip);
      for (int j = 0; j < I8_NR; j++) {
        int32_t s = 0;
        for (int h = 0; h < 4; h++) {
          uint8_t ab = (uint8_t)(w >> (8 * h));
          s += (g->a_signed && !g->flip ? (int32_t)(int8_t)ab : (int32_t)ab) * row[4 * j + h];
        }
        acc[m][j] = (int32_t)((uint32_t)acc[m][j] + (uint32_t)s);
      }
    }
  }
  i8_store(g, acc, mr, nr, (const int32_t *)(panel + kq * I8_NR * 4), m0, C);
}

static void i8_rows_generic(const i8_args *g, const uint8_t *A, const int8_t *panel, int64_t m0, int32_t *C,
                            int64_t rows, int64_t nr) {
  int64_t m = 0;
  for (; m + I8_MR <= rows; m += I8_MR)
    i8_tile_generic(g, A + m * g->lda, panel, m0 + m, C + m * g->ldc, I8_MR, nr);
  for (; m < rows; m++) i8_tile_generic(g, A + m * g->lda, panel, m0 + m, C + m * g->ldc, 1, nr);
}

#if defined(__x86_64__) && (__GNUC__ >= 10)
#define I8_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

/* i8_store for whole panels (nr = I8_NR), vectorized: the tiles' raw sums T (rows of I8_NR) corrected and
 * stored (added to C when beta). */
static I8_VNNI_TARGET void i8_store_full(const i8_args *g, const int32_t (*T)[I8_NR], int64_t rows,
                                         const int32_t *colsum, int64_t m0, int32_t *C) {
  __m512i zc = _mm512_set1_epi32((int32_t)g->zc), kzz = _mm512_set1_epi32((int32_t)g->kzz);
  __m512i base[2] = {_mm512_sub_epi32(kzz, _mm512_mullo_epi32(zc, _mm512_loadu_si512(colsum))),
                     _mm512_sub_epi32(kzz, _mm512_mullo_epi32(zc, _mm512_loadu_si512(colsum + 16)))};
  for (int64_t m = 0; m < rows; m++) {
    __m512i rz = _mm512_set1_epi32(g->rowsum ? (int32_t)(g->zb * (uint32_t)g->rowsum[m0 + m]) : 0);
    for (int h = 0; h < 2; h++) {
      int32_t *c = C + m * g->ldc + 16 * h;
      __m512i v = _mm512_sub_epi32(_mm512_add_epi32(_mm512_loadu_si512(T[m] + 16 * h), base[h]), rz);
      if (g->beta) v = _mm512_add_epi32(v, _mm512_loadu_si512(c));
      _mm512_storeu_si512(c, v);
    }
  }
}

/* mr (a constant at every call site: the loops over m unroll, acc stays in registers) rows of A times one
 * panel; `flipped` (a constant too) when A's bytes are read xor 0x80 (an s8 A on vpdpbusd). */
static inline __attribute__((always_inline)) I8_VNNI_TARGET void i8_tile_vnni(const i8_args *g, const uint8_t *A,
                                                                               const int8_t *panel, int64_t m0,
                                                                               int32_t *C, int mr, int64_t nr,
                                                                               int flipped) {
  __m512i acc[I8_MR][2];
  for (int m = 0; m < mr; m++) acc[m][0] = acc[m][1] = _mm512_setzero_si512();
  const __m512i flip = _mm512_set1_epi32((int)0x80808080u);
  int64_t kq = i8_quads(g->K), whole = g->K / 4; /* the whole quads: broadcast from memory, no test in the loop */
  for (int64_t q = 0; q < whole; q++) {
    const int8_t *row = panel + q * I8_NR * 4;
    __m512i b0 = _mm512_loadu_si512(row), b1 = _mm512_loadu_si512(row + 64);
    for (int m = 0; m < mr; m++) {
      int32_t w;
      memcpy(&w, A + m * g->lda + 4 * q, 4);
      __m512i a = _mm512_set1_epi32(w);
      if (flipped) a = _mm512_xor_si512(a, flip);
      acc[m][0] = _mm512_dpbusd_epi32(acc[m][0], a, b0);
      acc[m][1] = _mm512_dpbusd_epi32(acc[m][1], a, b1);
    }
  }
  for (int64_t q = whole; q < kq; q++) { /* a short last quad: its bytes past K read as 0 */
    const int8_t *row = panel + q * I8_NR * 4;
    __m512i b0 = _mm512_loadu_si512(row), b1 = _mm512_loadu_si512(row + 64);
    for (int m = 0; m < mr; m++) {
      __m512i a = _mm512_set1_epi32((int)i8_quad(A + m * g->lda, q, g->K, g->flip));
      acc[m][0] = _mm512_dpbusd_epi32(acc[m][0], a, b0);
      acc[m][1] = _mm512_dpbusd_epi32(acc[m][1], a, b1);
    }
  }
  int32_t tmp[I8_MR][I8_NR];
  for (int m = 0; m < mr; m++) {
    _mm512_storeu_si512(tmp[m], acc[m][0]);
    _mm512_storeu_si512(tmp[m] + 16, acc[m][1]);
  }
  const int32_t *colsum = (const int32_t *)(panel + kq * I8_NR * 4);
  if (nr == I8_NR)
    i8_store_full(g, tmp, mr, colsum, m0, C);
  else
    i8_store(g, tmp, mr, nr, colsum, m0, C);
}

static inline __attribute__((always_inline)) I8_VNNI_TARGET void i8_rows_vnni_as(
    const i8_args *g, const uint8_t *A, const int8_t *panel, int64_t m0, int32_t *C, int64_t rows, int64_t nr,
    int flipped) {
  int64_t m = 0;
  for (; m + I8_MR <= rows; m += I8_MR)
    i8_tile_vnni(g, A + m * g->lda, panel, m0 + m, C + m * g->ldc, I8_MR, nr, flipped);
  const uint8_t *a = A + m * g->lda;
  int32_t *c = C + m * g->ldc;
  switch (rows - m) { /* constant tile heights */
    case 7: i8_tile_vnni(g, a, panel, m0 + m, c, 7, nr, flipped); break;
    case 6: i8_tile_vnni(g, a, panel, m0 + m, c, 6, nr, flipped); break;
    case 5: i8_tile_vnni(g, a, panel, m0 + m, c, 5, nr, flipped); break;
    case 4: i8_tile_vnni(g, a, panel, m0 + m, c, 4, nr, flipped); break;
    case 3: i8_tile_vnni(g, a, panel, m0 + m, c, 3, nr, flipped); break;
    case 2: i8_tile_vnni(g, a, panel, m0 + m, c, 2, nr, flipped); break;
    case 1: i8_tile_vnni(g, a, panel, m0 + m, c, 1, nr, flipped); break;
    default: break;
  }
}

static I8_VNNI_TARGET void i8_rows_vnni(const i8_args *g, const uint8_t *A, const int8_t *panel, int64_t m0,
                                        int32_t *C, int64_t rows, int64_t nr) {
  if (g->flip)
    i8_rows_vnni_as(g, A, panel, m0, C, rows, nr, 1);
  else
    i8_rows_vnni_as(g, A, panel, m0, C, rows, nr, 0);
}
#endif

#if defined(__x86_64__) && (__GNUC__ >= 10)
#define I8_AVX2_TARGET __attribute__((target("avx2")))

/* Rows [0, rows) of A widened to int16, K padded with zeros to whole quads (kq * 4 per row). */
static I8_AVX2_TARGET void i8_widen_rows(const i8_args *g, const uint8_t *A, int64_t rows, int16_t *W) {
  int64_t kq4 = i8_quads(g->K) * 4;
  for (int64_t m = 0; m < rows; m++) {
    const uint8_t *a = A + m * g->lda;
    int16_t *w = W + m * kq4;
    int64_t k = 0;
    for (; k + 16 <= g->K; k += 16) {
      __m128i v = _mm_loadu_si128((const __m128i *)(a + k));
      _mm256_storeu_si256((__m256i *)(w + k), g->a_signed ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v));
    }
    for (; k < g->K; k++) w[k] = g->a_signed ? (int16_t)(int8_t)a[k] : (int16_t)a[k];
    for (; k < kq4; k++) w[k] = 0;
  }
}

/* mr (a constant at every call site) widened rows W times one int16 panel: per chunk of 8 columns, two
 * registers of B (4 columns x a quad each) against each row's quad broadcast; lane pairs hold a column's two
 * halves of the quad, added at the end. */
static inline __attribute__((always_inline)) I8_AVX2_TARGET void i8_tile_avx2(const i8_args *g, const int16_t *W,
                                                                               const int16_t *panel, int64_t m0,
                                                                               int32_t *C, int mr, int64_t nr) {
  int64_t kq = i8_quads(g->K), kq4 = kq * 4;
  int32_t T[I8_AVX2_MR][I8_NR];
  for (int64_t c8 = 0; c8 < nr; c8 += 8) {
    __m256i acc[I8_AVX2_MR][2];
    for (int m = 0; m < mr; m++) acc[m][0] = acc[m][1] = _mm256_setzero_si256();
    const int16_t *b = panel + c8 / 8 * kq * 32;
    for (int64_t q = 0; q < kq; q++, b += 32) {
      __m256i b0 = _mm256_loadu_si256((const __m256i *)b), b1 = _mm256_loadu_si256((const __m256i *)(b + 16));
      for (int m = 0; m < mr; m++) {
        int64_t quad;
        memcpy(&quad, W + m * kq4 + 4 * q, 8);
        __m256i a = _mm256_set1_epi64x(quad);
        acc[m][0] = _mm256_add_epi32(acc[m][0], _mm256_madd_epi16(b0, a));
        acc[m][1] = _mm256_add_epi32(acc[m][1], _mm256_madd_epi16(b1, a));
      }
    }
    for (int m = 0; m < mr; m++) { /* [c0 c1 c4 c5 | c2 c3 c6 c7] -> columns in order */
      __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[m][0], acc[m][1]), 0xD8);
      _mm256_storeu_si256((__m256i *)(T[m] + c8), s);
    }
  }
  i8_store(g, T, mr, nr, (const int32_t *)(panel + 4 * kq * 32), m0, C);
}

/* rows of A (widened into W, room for I8_AVX2_MR rows) times one panel. */
static I8_AVX2_TARGET void i8_rows_avx2(const i8_args *g, const uint8_t *A, const int16_t *panel, int64_t m0,
                                        int32_t *C, int64_t rows, int64_t nr, int16_t *W) {
  for (int64_t m = 0; m < rows; m += I8_AVX2_MR) {
    int64_t mr = rows - m < I8_AVX2_MR ? rows - m : I8_AVX2_MR;
    i8_widen_rows(g, A + m * g->lda, mr, W);
    int32_t *c = C + m * g->ldc;
    switch (mr) { /* constant tile heights */
      case 6: i8_tile_avx2(g, W, panel, m0 + m, c, 6, nr); break;
      case 5: i8_tile_avx2(g, W, panel, m0 + m, c, 5, nr); break;
      case 4: i8_tile_avx2(g, W, panel, m0 + m, c, 4, nr); break;
      case 3: i8_tile_avx2(g, W, panel, m0 + m, c, 3, nr); break;
      case 2: i8_tile_avx2(g, W, panel, m0 + m, c, 2, nr); break;
      default: i8_tile_avx2(g, W, panel, m0 + m, c, 1, nr); break;
    }
  }
}
#endif

#if defined(__x86_64__) && (__GNUC__ >= 11)
#define I8_AMX_TARGET __attribute__((target("amx-tile,amx-int8")))

/* The raw sums of A[32, K] (its bytes as they are: tdpbssd for s8, tdpbusd for u8) times one packed panel into
 * T[32][I8_NR]; K a multiple of 64. */
static I8_AMX_TARGET void i8_amx_block(const uint8_t *A, int64_t lda, const int8_t *panel, int64_t K, int a_signed,
                                       int32_t *T) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t k = 0; k < K; k += 64) {
    const int8_t *b = panel + (k / 4) * I8_NR * 4; /* 16 quad rows of 128 bytes */
    if (k + 64 < K) /* the next step's A rows (tile loads of lines from L2 stall the tiles) */
      for (int r = 0; r < 32; r++) _mm_prefetch((const char *)(A + r * lda + k + 64), _MM_HINT_T0);
    _tile_loadd(4, A + k, lda);
    _tile_loadd(5, A + 16 * lda + k, lda);
    _tile_loadd(6, b, I8_NR * 4);
    _tile_loadd(7, b + 64, I8_NR * 4);
    if (a_signed) {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    } else {
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 4, 7);
      _tile_dpbusd(2, 5, 6);
      _tile_dpbusd(3, 5, 7);
    }
  }
  _tile_stored(0, T, I8_NR * 4);
  _tile_stored(1, T + 16, I8_NR * 4);
  _tile_stored(2, T + 16 * I8_NR, I8_NR * 4);
  _tile_stored(3, T + 16 * I8_NR + 16, I8_NR * 4);
}

#endif

/* Task t: rows [I8_MB * (t % mbs), ...) times panel t / mbs: consecutive tasks share a panel (in L1) while A's
 * row blocks stream from L2 (the panel-fastest order measured the same within this host's noise). */
static void i8_task(void *ctx, int64_t lo, int64_t hi) {
  const i8_args *g = ctx;
  int64_t words = g->pw;
  int configured = 0; /* this thread's tile configuration loaded */
  int16_t *W = NULL;  /* the avx2 path's widened rows of A */
  if (g->avx2) {
    W = malloc((size_t)I8_AVX2_MR * (size_t)i8_quads(g->K) * 4 * sizeof(int16_t) + 32);
    if (W == NULL) abort();
  }
  for (int64_t t = lo; t < hi; t++) {
    int64_t p = t / g->mbs, m0 = t % g->mbs * I8_MB;
    int64_t rows = g->M - m0 < I8_MB ? g->M - m0 : I8_MB;
    int64_t n0 = p * I8_NR, nr = g->N - n0 < I8_NR ? g->N - n0 : I8_NR;
    const uint8_t *a = g->A + m0 * g->lda;
    const int8_t *panel = g->P + p * words * 4;
    int32_t *c = g->C + m0 * g->ldc + n0;
#if defined(__x86_64__) && (__GNUC__ >= 11)
    if (g->amx && nr == I8_NR) { /* whole 32-row blocks on the tiles (A's bytes as they are), the rest below */
      if (!configured) {
        kiln_amx_config();
        configured = 1;
      }
      i8_args amx = *g;
      amx.flip = 0;
      amx.zc -= g->flip ? 128u : 0u;
      const int32_t *colsum = (const int32_t *)(panel + i8_quads(g->K) * I8_NR * 4);
      int64_t whole = rows / 32 * 32;
      for (int64_t m = 0; m < whole; m += 32) {
        int32_t T[32][I8_NR];
        i8_amx_block(a + m * g->lda, g->lda, panel, g->K, g->a_signed, &T[0][0]);
        i8_store_full(&amx, (const int32_t(*)[I8_NR])T, 32, colsum, m0 + m, c + m * g->ldc);
      }
      a += whole * g->lda;
      c += whole * g->ldc;
      m0 += whole;
      rows -= whole;
    }
#endif
#if defined(__x86_64__) && (__GNUC__ >= 10)
    if (g->vnni) {
      if (rows > 0) i8_rows_vnni(g, a, panel, m0, c, rows, nr);
      continue;
    }
    if (g->avx2) {
      i8_rows_avx2(g, a, (const int16_t *)panel, m0, c, rows, nr, W);
      continue;
    }
#endif
    i8_rows_generic(g, a, panel, m0, c, rows, nr);
  }
  free(W);
#if defined(__x86_64__) && (__GNUC__ >= 11)
  if (configured) kiln_amx_release(); /* a thread holding tile state costs every context switch */
#else
  (void)configured;
#endif
}

/* C (int32, ldc) (+)= (A - a_zp)(B - b_zp) (beta 1 adds, 0 overwrites) for A [M, K] and B [K, N] of 8-bit
 * integers (flags: I8_A_UNSIGNED, I8_B_UNSIGNED; zero points given as int32 values), on `threads` of the pool;
 * `slot` holds B packed once when it is a constant (0: packed per call). */
void kiln_i8_gemm(int64_t M, int64_t N, int64_t K, int64_t A, int64_t lda, int32_t a_zp, int64_t B, int64_t ldb,
                  int32_t b_zp, int32_t flags, int32_t beta, int64_t C, int64_t ldc, int32_t threads, int64_t slot) {
  if (M <= 0 || N <= 0) return;
  int b_unsigned = (flags & I8_B_UNSIGNED) != 0, a_signed = !(flags & I8_A_UNSIGNED);
  int vnni = kiln_i8_uses_vnni(), avx2 = kiln_i8_uses_avx2(); /* never both */
  int64_t mbs = (M + I8_MB - 1) / I8_MB, pw = avx2 ? i8_panel16_words(K) : i8_panel_words(K);
  int64_t words = i8_panels(N) * pw;
  kiln_pack_fn pack = avx2 ? (b_unsigned ? i8_pack16_u : i8_pack16_s) : (b_unsigned ? i8_pack_u : i8_pack_s);
  const int8_t *P = (const int8_t *)kiln_slot_packed(slot, I8_PACK_KIND + 2 * avx2 + b_unsigned, (const float *)B,
                                                     K, N, ldb, words, pack);
  int8_t *own = NULL;
  if (P == NULL) {
    own = kiln_alloc((size_t)words * 4 + 64);
    if (own == NULL) abort(); /* as the other kernels: no memory for scratch is fatal */
    pack((float *)own, (const float *)B, K, N, ldb);
    P = own;
  }
  /* vpdpbusd multiplies u8 by s8: an s8 A is read as a + 128 (its top bits flipped). */
  uint32_t flip = vnni && a_signed ? 0x80808080u : 0;
  uint32_t zb = (uint32_t)b_zp - (b_unsigned ? 128u : 0u);
  int32_t *rowsum = NULL;
  if (zb != 0) {
    rowsum = malloc((size_t)M * sizeof(int32_t));
    if (rowsum == NULL) abort();
    for (int64_t m = 0; m < M; m++) {
      const uint8_t *a = (const uint8_t *)A + m * lda;
      uint32_t s = 0;
      for (int64_t k = 0; k < K; k++) s += a_signed ? (uint32_t)(int32_t)(int8_t)a[k] : a[k];
      rowsum[m] = (int32_t)s;
    }
  }
  int amx = vnni && K % 64 == 0 && M >= 32 && kiln_i8_uses_amx();
  i8_args g = {M, N, K, lda, ldc, mbs, pw, (const uint8_t *)A, P, (int32_t *)C, rowsum,
               (uint32_t)a_zp + (flip ? 128u : 0u), zb, (uint32_t)K * (uint32_t)a_zp * zb, beta != 0, flip, vnni,
               amx, avx2, a_signed};
  int64_t tasks = mbs * i8_panels(N);
  if (threads <= 1 || tasks == 1)
    i8_task(&g, 0, tasks);
  else
    kiln_parallel_for(i8_task, &g, tasks, kiln_parts(tasks, threads));
  free(rowsum);
  if (own) kiln_free(own);
}
