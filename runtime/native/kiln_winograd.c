/*
 * kiln's native runtime: 3x3 stride-1 convolutions by Winograd's minimal
 * filtering F(2x2, 3x3) (built with kiln_native.c into one library; see
 * kiln/runtime/native).
 *
 * Each 2 x 2 block of outputs ("tile") of output channel f is
 *   Y = A^T [ sum over c of (G g[f, c] G^T) . (B^T d[c] B) ] A
 * where d[c] is the 4 x 4 input patch under the tile and `.` multiplies
 * elementwise: per tile and pair of channels 16 multiplies instead of the
 * direct path's 36.  For each of the 16 positions xi of the 4 x 4 transformed
 * domain the sum over c is a GEMM, U[xi] (F x C, the transformed weight,
 * packed once into the weight's slot) times V[xi] (C x tiles, the transformed
 * input): kiln_conv.c's register tile (kiln_wtile.h) runs it with the rows
 * of V found through an offset table.
 *
 * A task is a block of TB tiles of one image, taken in three steps while
 * its buffers stay in L2: the input rows under the block copied into their
 * even and odd columns (so the patches of VW tiles side by side are plain
 * vector loads), transformed into V; the 16 products into M; M transformed
 * back into Y with the bias, the accumulation, the residual and the ReLU.
 * With fewer blocks than threads (ResNet-50's 7 x 7 layers at batch 1 with
 * AVX2) the three steps run instead as three passes over the pool, whole
 * images.
 * Against the direct path (C harness, two threads, alternating): ResNet-50's
 * 3x3 layers at 56 / 28 / 14 / 7 wide 0.60-0.73 / 0.66 / 0.59 / 0.63x.
 *
 * The transforms only add, subtract and halve (G's 1/2), so the result
 * differs from the direct sum by rounding alone: rms 3.6-6.7e-7 against
 * float64 on ResNet-50's layers, the direct path's 4.2-4.8e-7
 * (test_native_conv.py checks it against torch at its tolerance).
 */

#include <stdint.h>
#include <string.h>

#include "kiln_native.h"
#include "kiln_wtile.h"

/* Bytes of a task's buffers (V and M, 16 floats per tile and channel) that
 * set its tile count; at least one panel of WNR tiles (-D it for A/B
 * builds: 128 KiB and 512 KiB to 1 MiB were no better). */
#ifndef WINO_TASK_BYTES
#define WINO_TASK_BYTES (256 << 10)
#endif
/* Fewer blocks of tiles than threads take three passes (the transform in,
 * the products, the transform out, each over the pool) when V and M of the
 * whole batch stay within this many bytes.  (With 4 blocks of 16 tiles on
 * two threads, 14 x 14 by 256 channels, the passes were 1.26x slower than
 * the blocks; 7 x 7 by 512 is one block.) */
#define WINO_PASSES_BYTES (4 << 20)

typedef struct {
  int64_t batch, F, C, H, W, OH, OW, pt, pl;
  int64_t tw, T;          /* tiles per tile row, tiles per image */
  int64_t TB, blocks;     /* tiles per task, tasks per image */
  int split_last;         /* banded: each image's last block (VW tiles or fewer) taken as two halves of F */
  int64_t Wq;             /* floats of a row of the even / odd column planes */
  int64_t jlo[2], jhi[2]; /* plane columns inside the input row (copy_row_s2) */
  int64_t ldv;            /* floats between rows of V (TB and the last vector's spill) */
  int64_t mblocks, kstep;
  const float *X, *U, *bias, *res;
  float *Y;
  const int64_t *off; /* row c of V[xi] at off[c] */
  int accumulate, relu;
  float *buf;         /* banded: a buffer per part (one channel's planes, V, M); else the parts' planes */
  int64_t plane_floats, part_floats;
  float *v, *m;       /* three passes: V and M of the whole batch */
  int64_t mchunks;    /* three passes: chunks of row blocks per product task */
  int64_t next_part;  /* parts started (each takes its own buffer) */
} wino_args;

/* g (3 x 3) into G g G^T (4 x 4), in double: the halves are exact, the
 * sums rounded once. */
static void wino_weight(const float *g, double u[16]) {
  double t[4][3];
  for (int j = 0; j < 3; j++) {
    double g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
    t[0][j] = g0, t[1][j] = 0.5 * (g0 + g1 + g2), t[2][j] = 0.5 * (g0 - g1 + g2), t[3][j] = g2;
  }
  for (int i = 0; i < 4; i++) {
    double g0 = t[i][0], g1 = t[i][1], g2 = t[i][2];
    u[i * 4 + 0] = g0, u[i * 4 + 1] = 0.5 * (g0 + g1 + g2), u[i * 4 + 2] = 0.5 * (g0 - g1 + g2), u[i * 4 + 3] = g2;
  }
}

/* The weight Wt (F x C*9) transformed and packed for the products: for each
 * xi, U[xi] (F x C) as blocks of WMR rows, each [C][WMR] (zero rows pad the
 * last), at dst + xi * mblocks * WMR * C.  kiln_slot_packed's pack: rows F,
 * cols C * 9, leading dim ld. */
static void pack_wino(float *dst, const float *Wt, int64_t F, int64_t cols, int64_t ld) {
  int64_t C = cols / 9, mblocks = (F + WMR - 1) / WMR, per_xi = mblocks * WMR * C;
  memset(dst, 0, (size_t)(16 * per_xi) * sizeof(float));
  for (int64_t f = 0; f < F; f++)
    for (int64_t c = 0; c < C; c++) {
      double u[16];
      wino_weight(Wt + f * ld + c * 9, u);
      for (int xi = 0; xi < 16; xi++) dst[xi * per_xi + ((f / WMR) * C + c) * WMR + f % WMR] = (float)u[xi];
    }
}

/* Channel c of the block's input rows into V (row c of each V[xi] at v):
 * tiles [t0, t1) of the image, VW tiles of a tile row at a time.  Row
 * i of p (padded input row 2 r0 + i, pitch 2 Wq) holds the row's even
 * columns, then its odd ones.  The last vector of a tile row spills past
 * it, into the next row's tiles (written after) or the slack past TB. */
static void wino_in(const wino_args *w, const float *p, int64_t r0, int64_t t0, int64_t t1, float *v) {
  int64_t tw = w->tw, Wq = w->Wq, pitch = 2 * Wq;
  for (int64_t t = t0; t < t1;) {
    int64_t r = t / tw, c0 = t % tw, c1 = r * tw + tw < t1 ? tw : t1 - r * tw;
    const float *e = p + 2 * (r - r0) * pitch, *o = e + Wq;
    for (int64_t c = c0; c < c1; c += VW) {
      /* d[i][j] for VW tiles: padded column 2 c + j is even plane column c
       * + j / 2 for even j, odd plane column c + j / 2 for odd j. */
      kiln_vec x[4][4];
      for (int i = 0; i < 4; i++) {
        x[i][0] = kiln_loadu(e + i * pitch + c), x[i][1] = kiln_loadu(o + i * pitch + c);
        x[i][2] = kiln_loadu(e + i * pitch + c + 1), x[i][3] = kiln_loadu(o + i * pitch + c + 1);
      }
      kiln_vec s[4][4]; /* d B */
      for (int i = 0; i < 4; i++) {
        s[i][0] = x[i][0] - x[i][2], s[i][1] = x[i][1] + x[i][2];
        s[i][2] = x[i][2] - x[i][1], s[i][3] = x[i][1] - x[i][3];
      }
      float *at = v + (r * tw + c - t0);
      int64_t xs = w->C * w->ldv; /* floats between V[xi] and V[xi + 1] */
      for (int j = 0; j < 4; j++) { /* B^T (d B) */
        kiln_vec u0 = s[0][j] - s[2][j], u1 = s[1][j] + s[2][j], u2 = s[2][j] - s[1][j], u3 = s[1][j] - s[3][j];
        __builtin_memcpy(at + (0 * 4 + j) * xs, &u0, sizeof u0);
        __builtin_memcpy(at + (1 * 4 + j) * xs, &u1, sizeof u1);
        __builtin_memcpy(at + (2 * 4 + j) * xs, &u2, sizeof u2);
        __builtin_memcpy(at + (3 * 4 + j) * xs, &u3, sizeof u3);
      }
    }
    t = r * tw + c1;
  }
}

/* One output row's results for VW tiles (y0: their even columns, y1: odd)
 * into y (n <= 2 VW floats) with the accumulation, the residual r and the
 * ReLU. */
static inline void wino_store(const wino_args *w, kiln_vec y0, kiln_vec y1, float *y, const float *r, int64_t n) {
  float out[2 * VW];
#if KILN_VW == 16
  kiln_vec lo = __builtin_shufflevector(y0, y1, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  kiln_vec hi = __builtin_shufflevector(y0, y1, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
#else
  kiln_vec lo = __builtin_shufflevector(y0, y1, 0, 8, 1, 9, 2, 10, 3, 11);
  kiln_vec hi = __builtin_shufflevector(y0, y1, 4, 12, 5, 13, 6, 14, 7, 15);
#endif
  if (n == 2 * VW) {
    if (w->accumulate) lo += kiln_loadu(y), hi += kiln_loadu(y + VW);
    if (r) lo += kiln_loadu(r), hi += kiln_loadu(r + VW);
    if (w->relu) lo = relu_w(lo), hi = relu_w(hi);
    __builtin_memcpy(y, &lo, sizeof lo);
    __builtin_memcpy(y + VW, &hi, sizeof hi);
    return;
  }
  __builtin_memcpy(out, &lo, sizeof lo);
  __builtin_memcpy(out + VW, &hi, sizeof hi);
  for (int64_t j = 0; j < n; j++) {
    float v = w->accumulate ? y[j] + out[j] : out[j];
    v = r ? v + r[j] : v;
    y[j] = w->relu && v < 0.0f ? 0.0f : v;
  }
}

/* M (the products of tiles [t0, t1), M[xi] F x ldm at m + xi * F * ldm)
 * back into image b's Y, output channels [f0, f1). */
static void wino_out(const wino_args *w, const float *m, int64_t ldm, int64_t b, int64_t t0, int64_t t1, int64_t f0,
                     int64_t f1) {
  int64_t tw = w->tw, xs = w->F * ldm;
  for (int64_t f = f0; f < f1; f++) {
    kiln_vec bias = kiln_splat(w->bias ? w->bias[f] : 0.0f);
    float *yf = w->Y + (b * w->F + f) * w->OH * w->OW;
    const float *rf = w->res ? w->res + (b * w->F + f) * w->OH * w->OW : NULL;
    const float *mf = m + f * ldm - t0;
    for (int64_t t = t0; t < t1;) {
      int64_t r = t / tw, c0 = t % tw, c1 = r * tw + tw < t1 ? tw : t1 - r * tw;
      for (int64_t c = c0; c < c1; c += VW) {
        const float *at = mf + r * tw + c;
        /* M past the block's last tile was not written (see wino_zero_tails). */
        int64_t tiles = c1 - c < VW ? c1 - c : VW, valid = t1 - (r * tw + c) < VW ? t1 - (r * tw + c) : VW;
        kiln_vec s[2][4]; /* A^T M */
        for (int j = 0; j < 4; j++) {
          kiln_vec m0 = kiln_loadu(at + (0 * 4 + j) * xs), m1 = kiln_loadu(at + (1 * 4 + j) * xs);
          kiln_vec m2 = kiln_loadu(at + (2 * 4 + j) * xs), m3 = kiln_loadu(at + (3 * 4 + j) * xs);
          if (valid < VW)
            m0 = first_lanes(m0, valid), m1 = first_lanes(m1, valid), m2 = first_lanes(m2, valid),
            m3 = first_lanes(m3, valid);
          s[0][j] = m0 + m1 + m2, s[1][j] = m1 - m2 - m3;
        }
        /* Columns 2 c .. of output rows 2 r, 2 r + 1; tiles past c1 (the
         * spill) and outputs past OW or OH are not stored. */
        int64_t n = 2 * tiles;
        if (2 * c + n > w->OW) n = w->OW - 2 * c;
        for (int a = 0; a < 2 && 2 * r + a < w->OH; a++) {
          kiln_vec y0 = s[a][0] + s[a][1] + s[a][2] + bias, y1 = s[a][1] - s[a][2] - s[a][3] + bias;
          int64_t at_y = (2 * r + a) * w->OW + 2 * c;
          wino_store(w, y0, y1, yf + at_y, rf ? rf + at_y : NULL, n);
        }
      }
      t = r * tw + c1;
    }
  }
}

/* The spill (tiles past a block's last, their plane columns past tw + 1)
 * is computed and dropped, but not from what the scratch held before: old
 * bytes read as floats (the direct convolution's offset table, pointers)
 * are often denormals, a microcode assist per operation on Intel cores.
 * So the planes' tails and V's columns past the tiles (to the last panel's
 * end) are zeroed, and M's past the last tile masked in wino_out.  Without
 * it, ResNet-50's 3x3 layers at 14 and 7 wide took 10-50x their time on 16
 * threads of a Xeon once their planes sat at other scratch offsets; here
 * (an AMD Zen 3, where denormal operands cost nothing extra) the zeroing
 * cost 0.99-1.01x, and the test reads MXCSR's denormal flag.  The tails: no
 * copy writes them, so once per buffer (plane_floats, rows of 2 Wq). */
__attribute__((optimize("no-tree-loop-distribute-patterns")))
static void wino_zero_tails(const wino_args *w, float *p) {
  for (int64_t i = 0; i < w->plane_floats / (2 * w->Wq); i++)
    for (int64_t j = w->tw + 1; j < w->Wq; j++) p[2 * i * w->Wq + j] = 0.0f, p[(2 * i + 1) * w->Wq + j] = 0.0f;
}

/* Image b's channels [c0, c1) under tiles [t0, t1) into V (row c of V[xi]
 * at v + c * ldv + xi * C * ldv), each channel's padded rows first split
 * into even and odd columns in p (one channel's rows, tails zeroed:
 * wino_zero_tails), V's columns the products read past the tiles zeroed
 * (none in a full block). */
static void wino_step_in(const wino_args *w, int64_t b, int64_t t0, int64_t t1, int64_t c0, int64_t c1, float *p,
                         float *v) {
  int64_t prow = 2 * w->Wq, r0 = t0 / w->tw, r1 = (t1 - 1) / w->tw;
  int64_t rows = 2 * (r1 - r0) + 4; /* padded rows 2 r0 .. 2 r1 + 3 */
  /* V's columns the products read (micro_w_cols).  (Zeroed a float at a
   * time to the whole panel, they had been 15 of the 18 us of a 4-tile
   * block's transform at 128 channels.) */
  int64_t n = t1 - t0, read = micro_w_cols(n);
  for (int64_t c = c0; c < c1; c++) {
    const float *x = w->X + (b * w->C + c) * w->H * w->W;
    for (int64_t i = 0; i < rows; i++) {
      float *e = p + i * prow, *o = e + w->Wq;
      int64_t ih = 2 * r0 + i - w->pt;
      if ((uint64_t)ih >= (uint64_t)w->H)
        memset(e, 0, (size_t)prow * sizeof(float));
      else
        copy_row_s2(x + ih * w->W, w->W, w->pl, w->tw + 1, w->jlo, w->jhi, e, o);
    }
    float *vc = v + c * w->ldv;
    for (int xi = 0; xi < 16 && read > n; xi++)
      memset(vc + xi * w->C * w->ldv + n, 0, (size_t)(read - n) * sizeof(float));
    wino_in(w, p, r0, t0, t1, vc);
  }
}

/* Products [xi0, xi1) of tiles [t0, t1), row blocks [mb0, mb1): M[xi] (F x
 * (t1 - t0), leading dim ldm, at m + xi * F * ldm) = U[xi] V[xi], K in
 * blocks of kstep. */
static void wino_step_products(const wino_args *w, const float *v, float *m, int64_t ldm, int64_t t0, int64_t t1,
                               int xi0, int xi1, int64_t mb0, int64_t mb1) {
  int64_t panels = (t1 - t0 + WNR - 1) / WNR, per_xi = w->mblocks * WMR * w->C;
  for (int xi = xi0; xi < xi1; xi++) {
    const float *vx = v + xi * w->C * w->ldv;
    float *mx = m + xi * w->F * ldm;
    for (int64_t k0 = 0; k0 < w->C; k0 += w->kstep) {
      int64_t kc = w->C - k0 < w->kstep ? w->C - k0 : w->kstep;
      for (int64_t mb = mb0; mb < mb1; mb++) {
        int64_t m0 = mb * WMR, mr = w->F - m0 < WMR ? w->F - m0 : WMR;
        const float *a = w->U + xi * per_xi + (mb * w->C + k0) * WMR;
        for (int64_t q = 0; q < panels; q++) {
          int64_t n0 = q * WNR, nr = t1 - t0 - n0 < WNR ? t1 - t0 - n0 : WNR;
          float *c = mx + m0 * ldm + n0;
          if (mr == WMR)
            micro_w(WMR, a, vx + n0, w->off + k0, WNR, kc, c, ldm, nr, k0 > 0, NULL, NULL, 0, 1);
          else
            micro_w((int)mr, a, vx + n0, w->off + k0, WNR, kc, c, ldm, nr, k0 > 0, NULL, NULL, 0, 1);
        }
      }
    }
  }
}

/* Tasks [lo, hi) of the banded path: task t is (image, block of TB tiles),
 * all three steps in this thread's buffer (one channel's planes, V, M, at
 * its kiln_worker_slot) while it stays in L2.  (A buffer per part had
 * cycled ResNet-50's 28-wide layers through 7 x 655 KB of scratch, which
 * left L2 between parts: one per thread, 128 -> 128 at 28 x 28 0.98x, 64
 * -> 64 at 56 x 56 0.98x, C harness, two threads, alternating.) */
static void wino_bands(void *ctx, int64_t lo, int64_t hi) {
  wino_args *w = ctx;
  float *p = w->buf + kiln_worker_slot() * w->part_floats, *v = p + w->plane_floats, *m = v + 16 * w->C * w->ldv;
  wino_zero_tails(w, p);
  for (int64_t task = lo; task < hi; task++) {
    int64_t b, block, mb0 = 0, mb1 = w->mblocks;
    if (!w->split_last) {
      b = task / w->blocks, block = task % w->blocks;
    } else if (task < w->batch || task >= w->batch * w->blocks) {
      /* The last blocks' halves: the first F half of every image before the
       * other blocks, the second after them, so each end of the job (the
       * caller's, the workers': kiln_parallel_for) starts with one. */
      int second = task >= w->batch;
      b = second ? task - w->batch * w->blocks : task, block = w->blocks - 1;
      mb0 = second ? w->mblocks / 2 : 0, mb1 = second ? w->mblocks : w->mblocks / 2;
    } else {
      b = (task - w->batch) / (w->blocks - 1), block = (task - w->batch) % (w->blocks - 1);
    }
    int64_t t0 = block * w->TB, t1 = t0 + w->TB < w->T ? t0 + w->TB : w->T, f1 = mb1 * WMR < w->F ? mb1 * WMR : w->F;
    wino_step_in(w, b, t0, t1, 0, w->C, p, v);
    wino_step_products(w, v, m, w->TB, t0, t1, 0, 16, mb0, mb1);
    wino_out(w, m, w->TB, b, t0, t1, mb0 * WMR, f1);
  }
}

/* The three passes (few tiles: blocks of them would leave threads idle),
 * each over the pool, V and M of the whole batch in w->buf after the
 * parts' planes.  Pass 1, task t: image t / C, channel t % C. */
static void wino_pass_in(void *ctx, int64_t lo, int64_t hi) {
  wino_args *w = ctx;
  int64_t part = __atomic_fetch_add(&w->next_part, 1, __ATOMIC_RELAXED);
  float *p = w->buf + part * w->plane_floats;
  wino_zero_tails(w, p);
  for (int64_t t = lo; t < hi; t++) {
    int64_t b = t / w->C, c = t % w->C;
    wino_step_in(w, b, 0, w->T, c, c + 1, p, w->v + b * 16 * w->C * w->ldv);
  }
}

/* Pass 2, task t: (image, xi, chunk of row blocks). */
static void wino_pass_products(void *ctx, int64_t lo, int64_t hi) {
  const wino_args *w = ctx;
  for (int64_t t = lo; t < hi; t++) {
    int64_t chunk = t % w->mchunks, xi = t / w->mchunks % 16, b = t / (16 * w->mchunks);
    int64_t mb0 = w->mblocks * chunk / w->mchunks, mb1 = w->mblocks * (chunk + 1) / w->mchunks;
    wino_step_products(w, w->v + b * 16 * w->C * w->ldv, w->m + b * 16 * w->F * w->T, w->T, 0, w->T, (int)xi,
                       (int)xi + 1, mb0, mb1);
  }
}

/* Pass 3, task t: (image, output channel). */
static void wino_pass_out(void *ctx, int64_t lo, int64_t hi) {
  const wino_args *w = ctx;
  for (int64_t t = lo; t < hi; t++) {
    int64_t b = t / w->F, f = t % w->F;
    wino_out(w, w->m + b * 16 * w->F * w->T, w->T, b, 0, w->T, f, f + 1);
  }
}

/* Input channels at most (the offset table is on the stack). */
#define WINO_MAX_C 2048
/* Tiles per image at least (below: wino_takes). */
#if KILN_VW == 16
#define WINO_MIN_TILES 64
#else
#define WINO_MIN_TILES 16
#endif

static int wino_takes(int64_t F, int64_t C, int64_t OH, int64_t OW) {
  /* Few channels: the transforms cost more than the products save (one
   * thread, against the direct path, C harness, alternating: 3 -> 32 on
   * 32 x 32 1.51x slower, 8 -> 32 1.17x, 16 -> 16 on 28 x 28 1.08x; 16 -> 32
   * on 32 x 32 0.77x, 32 -> 16 on 28 x 28 0.79x, 24 -> 32 0.81x, 32 -> 64
   * 0.83x; two threads read these small layers through the other build's
   * spinning workers).  Few
   * tiles: each tile's 16 products read the transformed weight, 16 / 9 of
   * the direct path's, for a few columns (ResNet-50's 7 x 7 layers, 16
   * tiles of 512 channels and 16 MB of U, still 0.63x at batch 1, 0.65x at
   * 4: C harness, two threads, alternating).  With AVX-512 those layers
   * go to kiln_vconv's channel-vector tiles instead, faster at any batch
   * (512 channels at 7 x 7, kiln_conv2d, two threads of a Zen 5, warm /
   * after a 96 MB sweep as in the model: batch 1 854 / 1677 -> 543 / 699
   * us, batch 4 4279 -> 2137 us warm, batch 8 7664 -> 4229).  So do
   * 14 x 14 outputs (49 tiles): alone Winograd is ahead there (256
   * channels: 421 / 605 against 555 / 642 us at batch 1, 0.77x at 2,
   * 0.78x at 4), but in ResNet-50 its five such layers made the model
   * 1.02-1.05x slower (worker pairs, 16 of 16 rounds twice; leaving 28 x 28
   * to kiln_vconv as well was 1.025x slower).  The rule reads the geometry
   * alone, not the batch: a weight's slot holds one packed layout. */
  int64_t tiles = (OH + 1) / 2 * ((OW + 1) / 2);
  return C >= 16 && F >= 16 && C * F >= 512 && C <= WINO_MAX_C && tiles >= WINO_MIN_TILES && F * C <= 512 * 512;
}

int kiln_winograd(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt,
                  int64_t pl, const float *X, const float *Wt, const float *bias, const float *res, int accumulate,
                  int relu, float *Y, int32_t threads, int64_t slot) {
  int64_t th = (OH + 1) / 2, tw = (OW + 1) / 2;
  if (!wino_takes(F, C, OH, OW)) return 0;
  int64_t mblocks = (F + WMR - 1) / WMR;
  const float *U = kiln_slot_packed(slot, KILN_PACK_W, Wt, F, C * 9, C * 9, 16 * mblocks * WMR * C, pack_wino);
  if (U == NULL) return 0;
  wino_args w = {0};
  w.batch = batch, w.F = F, w.C = C, w.H = H, w.W = W, w.OH = OH, w.OW = OW, w.pt = pt, w.pl = pl;
  w.tw = tw, w.T = th * tw;
  int64_t per_tile = 16 * (C + F) * (int64_t)sizeof(float), tb = WINO_TASK_BYTES / per_tile / WNR * WNR;
  w.TB = tb < WNR ? WNR : tb;
  if (w.TB > w.T) w.TB = w.T;
  w.blocks = (w.T + w.TB - 1) / w.TB;
  /* Fewer blocks than threads: the three passes, whole images. */
  int passes = batch * w.blocks < threads && batch * w.T * per_tile <= WINO_PASSES_BYTES;
  if (passes) w.TB = w.T, w.blocks = 1;
  /* Room for the last vector's spill, and for the last panel's columns
   * (whole panels are read: TB is one number of them, except in the passes). */
  w.ldv = (w.TB + WNR - 1) / WNR * WNR + VW;
  /* Plane columns: tiles' c + 1 + VW - 1 for the last vector of a row. */
  w.Wq = (tw + VW - 1) / VW * VW + VW;
  for (int e = 0; e < 2; e++) phase_bounds(W, pl, 2, e, tw + 1, &w.jlo[e], &w.jhi[e]);
  w.mblocks = mblocks;
  int64_t kblocks = (C + KC - 1) / KC;
  w.kstep = (C + kblocks - 1) / kblocks;
  w.X = X, w.U = U, w.bias = bias, w.res = res, w.Y = Y, w.accumulate = accumulate, w.relu = relu;
  int64_t off[WINO_MAX_C];
  for (int64_t c = 0; c < C; c++) off[c] = c * w.ldv;
  w.off = off;
  /* One channel's padded rows 2 r0 .. 2 r1 + 3 under tile rows r0 .. r1. */
  w.plane_floats = round16((2 * ((w.TB + tw - 1) / tw + 1) + 2) * 2 * w.Wq);
  if (!passes) {
    /* A last block of VW tiles or fewer (16 of ResNet-50's 784 at 56 x 56,
     * 4 of 196 at 28 x 28) reads all of U for a few columns: as one task it
     * took 73 us against a full block's 96 at 28 x 28 (U, 1 MB, from L3),
     * and the thread that drew it finished last.  Its two halves of F go
     * to both ends of the job instead (128 -> 128 at 28 x 28 0.94x, 64 ->
     * 64 at 56 x 56 0.98x, C harness, two threads; ResNet-50 0.992x,
     * worker pairs, 12 of 16 rounds). */
    w.split_last = w.blocks > 1 && w.T - (w.blocks - 1) * w.TB <= VW && mblocks >= 2;
    int64_t tasks = batch * (w.blocks + w.split_last);
    w.part_floats = round16(w.plane_floats + 16 * C * w.ldv + 16 * F * w.TB + VW);
    if ((w.buf = kiln_thread_scratch((size_t)(kiln_pool_threads() * w.part_floats) * sizeof(float))) == NULL)
      return 0;
    kiln_parallel_for(wino_bands, &w, tasks, kiln_parts(tasks, threads));
    return 1;
  }
  int64_t n_in = batch * C, parts = kiln_parts(n_in, threads);
  int64_t v_floats = batch * 16 * C * w.ldv, m_floats = batch * 16 * F * w.T + VW + WNR;
  if ((w.buf = kiln_thread_scratch((size_t)(parts * w.plane_floats + v_floats + m_floats) * sizeof(float))) == NULL)
    return 0;
  w.v = w.buf + parts * w.plane_floats, w.m = w.v + v_floats;
  kiln_parallel_for(wino_pass_in, &w, n_in, parts);
  int64_t want = 4 * (int64_t)threads, have = batch * 16;
  w.mchunks = have >= want ? 1 : (want + have - 1) / have;
  if (w.mchunks > mblocks) w.mchunks = mblocks;
  int64_t n_prod = have * w.mchunks;
  kiln_parallel_for(wino_pass_products, &w, n_prod, kiln_parts(n_prod, threads));
  int64_t n_out = batch * F;
  kiln_parallel_for(wino_pass_out, &w, n_out, kiln_parts(n_out, threads));
  return 1;
}
