/*
 * What the C files of kiln's native runtime share (kiln_native.c defines
 * these; see kiln/runtime/native).
 */
#ifndef KILN_NATIVE_H
#define KILN_NATIVE_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* The pool: fn(ctx, lo, hi) over [0, n) in `parts` ranges. */
typedef void (*kiln_task_fn)(void *ctx, int64_t lo, int64_t hi);
void kiln_parallel_for(kiln_task_fn fn, void *ctx, int64_t n, int64_t parts);
int kiln_pool_threads(void);
/* The calling thread's place in the pool: 0 for the thread that called
 * kiln_parallel_for (or any thread outside the pool), 1 .. threads - 1 for
 * the workers.  A task that needs a buffer of its own takes the one of its
 * slot (kiln_pool_threads() of them), which stays in that core's cache from
 * one range to the next, so the ranges can be many (kiln_parts). */
int kiln_worker_slot(void);

/* Whether the switch `name` (a KILN_* variable) is on: as kiln_set_switch
 * set it, else unless the variable starts with '0'.  Read once into
 * *cached (start it at -1). */
int kiln_switch_on(const char *name, int *cached);
int kiln_set_switch(const char *name, int on);

/* Memory for large buffers (packed weights, scratch): 64-byte aligned, in
 * huge pages from 2 MiB up (fresh mappings); kiln_free releases it. */
void *kiln_alloc(size_t bytes);
void kiln_free(void *p);

/* The calling thread's scratch buffer, at least `bytes` (kept and grown
 * across calls, freed when the thread exits); NULL when memory ran out. */
float *kiln_thread_scratch(size_t bytes);
/* Buffer `which` (< KILN_SCRATCHES) of the calling thread, as
 * kiln_thread_scratch (which is buffer 0): buffer 1 holds what a caller of
 * a scratch-using kernel keeps across that call (kiln_conv2d_mean's
 * convolution output), buffer 2 what a caller of that keeps
 * (kiln_conv2d_pair's first convolution's output). */
#define KILN_SCRATCHES 3
float *kiln_thread_buffer(int which, size_t bytes);
/* kiln_native.c's GEMM on one packed panel B ([K][KILN_NR], zeros past nr <= KILN_NR): C[M, nr] = A B
 * (accumulate 0) or C += A B, on the calling thread. */
void kiln_sgemm_panel(int64_t M, int64_t nr, int64_t K, const float *A, int64_t lda, const float *panel_b,
                      int accumulate, float *C, int64_t ldc);
/* Ranges for kiln_parallel_for over `tasks` on `threads`: a few per thread. */
int64_t kiln_parts(int64_t tasks, int64_t threads);

/* AMX tiles (kiln_native.c), shared by the bf16 and int8 GEMMs: whether the CPU has the tile unit and the
 * feature `cpuid_edx_bit` (CPUID.7.0:EDX; 22 AMX-BF16, 25 AMX-INT8) and Linux lets the process use the tile
 * data (asked once); the calling thread's tiles configured as 8 tiles of 16 rows x 64 bytes; their release
 * (a thread holding tile state costs every context switch). */
int kiln_amx_usable(int cpuid_edx_bit);
void kiln_amx_config(void);
void kiln_amx_release(void);

/* Packing slots of constant GEMM operands: the slot's packed copy of src
 * (rows x cols, leading dim ld; `floats` long, laid out by `pack`), packed
 * on the first call; NULL when the slot is 0, holds another matrix, or
 * memory ran out. */
enum {
  KILN_PACK_B = 0,
  KILN_PACK_A = 1,
  KILN_PACK_V = 2, /* + Q: kiln_vconv.c's groups of 16Q channels */
  KILN_PACK_W = 16, /* kiln_winograd.c's transformed 3x3 weight */
  KILN_PACK_BT = 32 /* B given transposed ([N, K]), packed as KILN_PACK_B */
};
typedef void (*kiln_pack_fn)(float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld);
const float *kiln_slot_packed(int64_t slot, int64_t kind, const float *src, int64_t rows, int64_t cols, int64_t ld,
                              int64_t floats, kiln_pack_fn pack);

/* kiln_conv2d's contract (kiln_conv.c), vectorized over output channels
 * (kiln_vconv.c: stride 2, stride 1 on small outputs, a pointwise
 * convolution passed as one row of pixels); 0 when it does not take the
 * geometry or memory ran out (nothing written).  With `pool` (not NULL; no
 * residual, no accumulation) Y is not written: each output's ReLU'd sum
 * over its pixels is added to pool[(kiln_worker_slot() * batch + image) *
 * kiln_pool_ld(F) + channel], which the caller zeroes and sums over the
 * pool's threads. */
int kiln_vconv(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
               int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, const float *X,
               const float *Wt, const float *bias, const float *res, int accumulate, int relu, float *Y,
               int32_t threads, int64_t slot, float *pool);

/* kiln_conv2d (kiln_conv.c), returning 1; with `pool` (beta 0, no
 * residual) only where its dispatch hands the geometry to kiln_vconv and
 * that takes it in pool mode (Y unused), else 0 with nothing written. */
int kiln_conv2d_into(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
                     int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, int64_t X,
                     int64_t Wt, int64_t bias, int64_t res, float beta, int32_t relu, int64_t Y, int32_t threads,
                     int64_t slot, float *pool);

/* An im2col run: outputs t in [0, len) reading input column iw + t * sw;
 * [*lo, *hi) are those inside a row of W columns (lo <= hi; the rest is
 * padding).  Shared by the f32 and 16-bit convolutions' gathers. */
static inline void kiln_run_inside(int64_t iw, int64_t sw, int64_t W, int64_t len, int64_t *lo, int64_t *hi) {
  *lo = iw < 0 ? (-iw + sw - 1) / sw : 0;
  *hi = iw < W ? (W - iw + sw - 1) / sw : 0;
  if (*hi > len) *hi = len;
  if (*lo > *hi) *lo = *hi;
}

/* Floats per image in kiln_vconv's pool sums: F rounded up to whole groups of 64 channels. */
static inline int64_t kiln_pool_ld(int64_t F) { return (F + 63) / 64 * 64; }

/* kiln_conv2d's contract computed directly (kiln_dconv.c): the input copied
 * once per call into padded phase planes, the products read from them
 * through an offset table; 0 when memory for the copies ran out or the
 * geometry is not one it takes (nothing written: kiln_conv2d takes the
 * im2col path). */
int kiln_dconv(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
               int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, const float *X,
               const float *Wt, const float *bias, const float *res, int accumulate, int relu, float *Y,
               int32_t threads, int64_t slot);

/* kiln_conv2d's contract for a 3x3 stride-1 undilated convolution, by
 * Winograd's F(2x2, 3x3) (kiln_winograd.c), when it takes the channels and
 * output size (wino_takes); 0 when it does not or memory ran out (nothing
 * written).  The choice depends on neither the batch nor the threads: a
 * weight's slot holds the same packing at every batch (a weight used at
 * output sizes on both sides of the bound keeps its first call's packing;
 * the other side runs unpacked). */
int kiln_winograd(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt,
                  int64_t pl, const float *X, const float *Wt, const float *bias, const float *res, int accumulate,
                  int relu, float *Y, int32_t threads, int64_t slot);

/* The vector the kernels compute in (KILN_VW floats: one register) and the
 * rows of A in the GEMMs' register block (KILN_MR rows x two vectors of
 * accumulators: 16 of AVX-512's 32 registers, 12 of AVX2's 16).  8 x 32
 * against 6 x 16 on AVX-512 (same library, interleaved, two threads, 1024 x
 * 4096 and 4096 x 1024 weights): M = 8 0.89 -> 0.64 ms, M = 64 4.7 -> 3.4
 * ms, M = 1 no slower. */
#if defined(__AVX512F__)
#define KILN_VW 16
#define KILN_MR 8
#else
#define KILN_VW 8
#define KILN_MR 6
#endif
typedef float kiln_vec __attribute__((vector_size(KILN_VW * 4)));
/* Columns of a packed GEMM panel (two vectors; kiln_native.c's NR). */
#define KILN_NR (2 * KILN_VW)

/* KILN_VW floats from p, unaligned (strided panels, shifted rows). */
static inline kiln_vec kiln_loadu(const float *p) {
  kiln_vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

/* v, kept in a register.  Where a tile leaves registers free, gcc folds the
 * load of a vector that several FMAs share into each of them (a vector load
 * per FMA, beside the broadcasts: more loads than Zen 3 issues a cycle);
 * the empty asm makes the loaded value an opaque register operand. */
static inline kiln_vec kiln_pinned(kiln_vec v) {
  __asm__("" : "+x"(v));
  return v;
}

/* x in every lane: one broadcast.  (kiln_vec){0} + x is not the same code:
 * 0.0 + x is not x for x = -0.0, so the compiler adds before it broadcasts. */
static inline kiln_vec kiln_splat(float x) {
#if KILN_VW == 16
  return (kiln_vec){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#else
  return (kiln_vec){x, x, x, x, x, x, x, x};
#endif
}

/* The sum of v's lanes, as a tree of shuffles (a row's mean waits on it;
 * a loop over the lanes went through the stack). */
static inline float kiln_hsum(kiln_vec v) {
#if KILN_VW == 16
  return _mm512_reduce_add_ps((__m512)v);
#else
  __m256 x = (__m256)v;
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
#endif
}

#if KILN_VW == 16
/* r[i][j] <- r[j][i] (16 x 16 floats): pairs of rows interleaved by floats,
 * then by pairs, then 128-bit lanes exchanged in two rounds. */
static inline void kiln_transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}
#endif

/* a > b ? a : b and a < b ? a : b, lane by lane, in one max / min
 * instruction (a compare and a select were two): b where either is NaN, so
 * a clamp with the constant first, kiln_max(lo, x), keeps a NaN x. */
#if KILN_VW == 16
static inline kiln_vec kiln_max(kiln_vec a, kiln_vec b) { return (kiln_vec)_mm512_max_ps((__m512)a, (__m512)b); }
static inline kiln_vec kiln_min(kiln_vec a, kiln_vec b) { return (kiln_vec)_mm512_min_ps((__m512)a, (__m512)b); }
#else
static inline kiln_vec kiln_max(kiln_vec a, kiln_vec b) { return (kiln_vec)_mm256_max_ps((__m256)a, (__m256)b); }
static inline kiln_vec kiln_min(kiln_vec a, kiln_vec b) { return (kiln_vec)_mm256_min_ps((__m256)a, (__m256)b); }
#endif

/* src (element (k, n) at src[k * sk + n * sn], k < K, n < N) as panels of
 * `width` n's, each [K][width] with zeros past N: the layout both packed
 * GEMM operands use (B's column panels, A's row blocks). */
static inline __attribute__((always_inline)) void pack_panels(float *dst, const float *src, int64_t K, int64_t N,
                                                              int64_t width, int64_t sk, int64_t sn) {
  int64_t np = (N + width - 1) / width;
  for (int64_t q = 0; q < np; q++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < width; j++) {
        int64_t n = q * width + j;
        dst[(q * K + k) * width + j] = n < N ? src[k * sk + n * sn] : 0.0f;
      }
}

/* ------------------------------------------- a matrix product's epilogue */

/* The activations of a product's epilogue (kiln_bias_act, kiln_sgemm_small_epi;
 * backends/cpu/gemm_epilogue.py). */
enum { KILN_ACT_NONE = 0, KILN_ACT_RELU = 1, KILN_ACT_GELU = 2 };

/* GELU with erf as the generated code computes it (conversions/
 * kiln_to_linalg/elementwise.py: x / sqrt(2) clamped to [-4, 4], an odd
 * degree-13 numerator over an even degree-8 denominator), so a fused
 * epilogue gives the generic's values; a NaN stays NaN (the clamps keep
 * it).  Written once for vectors (a row's body) and once for floats (its
 * tail).  About 17 vector operations for 16 floats, 15 of them on the
 * multiply / FMA pipes: 262K elements take 80 us on one thread of the Zen 4
 * host (95 with each clamp a compare and a select, the same values; 85
 * with the division replaced by a product: the division is not the cost). */
#define GELU_BODY(T, SPLAT, MAX, MIN)                                                         \
  static inline T gelu_##T(T x) {                                                            \
    T z = x * SPLAT(0.70710678118654752f);                                                   \
    z = MIN(SPLAT(4.0f), MAX(SPLAT(-4.0f), z));                                              \
    T z2 = z * z;                                                                            \
    T p = SPLAT(-2.72614225801306e-10f);                                                     \
    p = p * z2 + SPLAT(2.77068142495902e-08f);                                               \
    p = p * z2 + SPLAT(-2.10102402082508e-06f);                                              \
    p = p * z2 + SPLAT(-5.69250639462346e-05f);                                              \
    p = p * z2 + SPLAT(-7.34990630326855e-04f);                                              \
    p = p * z2 + SPLAT(-2.95459980854025e-03f);                                              \
    p = p * z2 + SPLAT(-1.60960333262415e-02f);                                              \
    T q = SPLAT(-1.45660718464996e-05f);                                                     \
    q = q * z2 + SPLAT(-2.13374055278905e-04f);                                              \
    q = q * z2 + SPLAT(-1.68282697438203e-03f);                                              \
    q = q * z2 + SPLAT(-7.37332916720468e-03f);                                              \
    q = q * z2 + SPLAT(-1.42647390514189e-02f);                                              \
    return (SPLAT(0.5f) * x) * (SPLAT(1.0f) + z * p / q);                                    \
  }
#define SCALAR_SPLAT(v) (v)
#define SCALAR_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SCALAR_MIN(a, b) ((a) < (b) ? (a) : (b))
GELU_BODY(float, SCALAR_SPLAT, SCALAR_MAX, SCALAR_MIN)
GELU_BODY(kiln_vec, kiln_splat, kiln_max, kiln_min)

/* A product's epilogue on one vector (or float) of a row: + bias, the
 * activation (a ReLU keeps a NaN, as torch.relu), + the residual r; bias
 * and r NULL when there is none (nothing added: a -0 keeps its sign). */
static inline kiln_vec kiln_epilogue_vec(kiln_vec v, const float *bias, int act, const float *r) {
  if (bias) v += kiln_loadu(bias);
  if (act == KILN_ACT_RELU)
    v = kiln_max(kiln_splat(0.0f), v);
  else if (act == KILN_ACT_GELU)
    v = gelu_kiln_vec(v);
  if (r) v += kiln_loadu(r);
  return v;
}

static inline float kiln_epilogue_float(float v, const float *bias, int act, const float *r) {
  if (bias) v += *bias;
  if (act == KILN_ACT_RELU)
    v = v < 0.0f ? 0.0f : v;
  else if (act == KILN_ACT_GELU)
    v = gelu_float(v);
  if (r) v += *r;
  return v;
}

/* cblas_sgemm (row-major) on up to `parts` threads of the pool; up to
 * KILN_GEMV_ROWS rows (A not transposed) a GEMV of its own (kiln_dispatch.c). */
#define KILN_GEMV_ROWS 4
void kiln_sgemm_par(int32_t order, int32_t ta, int32_t tb, int64_t M, int64_t N, int64_t K, float alpha, int64_t A,
                    int64_t lda, int64_t B, int64_t ldb, float beta, int64_t C, int64_t ldc, int32_t parts);

/* C[i, :] = act(C[i, :] + bias) + R[i, :] for i < M (kiln_dispatch.c). */
void kiln_bias_act(int64_t M, int64_t N, int64_t C, int64_t ldc, int64_t bias, int32_t act, int64_t R, int64_t ldr,
                   int32_t threads);

#endif
