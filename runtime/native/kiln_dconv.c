/*
 * kiln's native runtime: convolutions computed directly, without an im2col
 * (kiln_dconv; built with kiln_native.c into one library, see
 * kiln/runtime/native).  kiln_conv2d (kiln_conv.c) hands it the geometries
 * Winograd and the channel-vector tiles leave.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_native.h"
#include "kiln_wtile.h"

/* The same product as kiln_conv2d without an im2col: the input is copied
 * once per call, padded and, for stride s, split into s x s phase planes
 * (plane (a, b) of channel c holds the padded X[c][i * sh + a][j * sw + b],
 * Hq x Wq).  Over a "wide" output grid of OH rows of Wq >= OW columns, row
 * (c, kh, kw) of the im2col is then that copy shifted: B[k][q] =
 * buf[off[k] + q], so the micro kernel loads its 32 columns straight from
 * the copy and nothing is gathered per panel (the gather cost as much as
 * a third of the FMAs when F is 64).  The Wq - OW extra columns of each
 * row are computed and dropped when the wide result is copied into Y,
 * which is also where the residual, beta and the ReLU are applied.  When
 * whole panels tile an output row within Wq columns (OW = 32 of 34: the
 * bench CNN's 3 -> 32 layer), panels are rows instead and go straight into
 * Y (dconv_rows): that layer at batch 8 128 -> 114 us, batch 4 83 -> 62.
 *
 * The work is cut into bands of R output rows of one image (R = OH: whole
 * images, when they fit), and a thread copies a band in, multiplies it and
 * copies it out before the next, so its planes and wide result stay in L2.
 * Three passes over the whole batch (copy, products, copy out, each split
 * over the pool) are left for an image too small to split while its weight
 * is bigger than L2.  Bands against the three passes, same library,
 * alternating, two threads: the bench CNN's 32 -> 64 stride-2 layer at
 * batch 8 0.76-0.97x (its time moved 480-930 us with the machine's
 * spells), at batch 4 / 64 0.74x; ResNet-50's 7x7 stem 0.94-0.96x, its
 * 128-channel stride-2 3x3 0.74-0.98x, the 3 -> 32 layer at batch 8
 * 0.95-1.06x. */

#define DCONV_MAX_STRIDE 64
/* Below this many FMAs, from 64 output channels, the im2col path is faster
 * than the wide result: the copy in and out and the handoffs to the pool
 * cost more than the gathers they save (two threads: 24 -> 28 us for a
 * 3 -> 32 channel 3x3 on 32 x 32, 0.9 M FMAs; 80 -> 100 us for 32 -> 64
 * stride 2, 4.7 M; at batch 8, 7.1 M, direct is 5% faster, and 8-24% on
 * ResNet-50's 3x3 and 7x7 layers; measured before the copy in got faster,
 * and now only kept from 64 channels: see dconv_run).  The rows path
 * (dconv_rows: no wide result, no copy out) has no such bound: that 3 -> 32
 * layer 23-27 -> 22 us, a 16 -> 16 one on 32 x 32 48 -> 35 us.  -D it huge
 * to build a library without the wide path from 64 channels for A/B runs. */
#ifndef KILN_DCONV_MIN_FMAS
#define KILN_DCONV_MIN_FMAS 6e6
#endif

typedef struct {
  int64_t batch, F, C, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl;
  int64_t Hq, Wq;       /* rows and columns of a phase plane */
  int64_t N, K;         /* wide outputs per image (OH * Wq), rows of B */
  int64_t panels, mblocks, mchunks, kstep, qspan; /* qspan: panels per task */
  const float *X, *Ap, *bias, *res;
  float *buf, *wide, *Y;
  int64_t sbuf;         /* floats of one image's planes */
  const int64_t *off;   /* K offsets into an image's planes */
  int accumulate, relu;
  int64_t bands, band_rows; /* banded path: bands per image, output rows per band (R) */
  int64_t cpr;          /* rows path: panels per output row (0: the wide result and its copy out) */
  int flat;             /* no extra columns (Wq == OW: a 1x1 window): panels over a band's rows as one */
  int direct;           /* cpr or flat: the products store into Y (dconv_rows), no wide result */
  int64_t part_floats, wide_at; /* banded path: floats of a part's buffers; its wide result's offset */
  uint64_t phases[DCONV_MAX_STRIDE]; /* bit e of phases[a]: plane (a, e) is read */
  int64_t jlo[DCONV_MAX_STRIDE], jhi[DCONV_MAX_STRIDE]; /* see dconv_copy_in */
} dconv_args;

/* One input channel x into its phase planes at dst; only the planes some
 * kernel tap reads are written (one of four for a 1x1 stride 2).  Row j of
 * plane column phase e reads input column j * sw + e - pl, inside the input
 * for j in [jlo[e], jhi[e]) (bounds computed once per call: the divisions
 * cost more than a row of 17 floats). */
static void dconv_copy_in(const dconv_args *d, const float *x, int64_t i0, float *dst) {
  int64_t sw = d->sw, Wq = d->Wq;
  for (int64_t a = 0; a < d->sh; a++) {
    if (sw == 2 && d->phases[a] == 3) { /* both column phases: split each row once */
      float *p0 = dst + a * 2 * d->Hq * Wq, *p1 = p0 + d->Hq * Wq;
      for (int64_t i = 0; i < d->Hq; i++) {
        int64_t ih = (i0 + i) * d->sh + a - d->pt;
        if ((uint64_t)ih >= (uint64_t)d->H) {
          memset(p0 + i * Wq, 0, Wq * sizeof(float));
          memset(p1 + i * Wq, 0, Wq * sizeof(float));
        } else {
          copy_row_s2(x + ih * d->W, d->W, d->pl, Wq, d->jlo, d->jhi, p0 + i * Wq, p1 + i * Wq);
        }
      }
      continue;
    }
    for (int64_t e = 0; e < sw; e++) {
      if (!(d->phases[a] >> e & 1)) continue;
      int64_t jlo = d->jlo[e], jhi = d->jhi[e];
      for (int64_t i = 0; i < d->Hq; i++) {
        float *row = dst + ((a * sw + e) * d->Hq + i) * Wq;
        int64_t ih = (i0 + i) * d->sh + a - d->pt;
        if ((uint64_t)ih >= (uint64_t)d->H) {
          memset(row, 0, Wq * sizeof(float));
          continue;
        }
        const float *xr = x + ih * d->W + e - d->pl; /* column j reads xr[j * sw] */
        zero_ends(row, jlo, jhi, Wq);
        if (sw == 1)
          memcpy(row + jlo, xr + jlo, (jhi - jlo) * sizeof(float));
        else if (sw == 2) /* a constant stride the compiler can shuffle */
          for (int64_t j = jlo; j < jhi; j++) row[j] = xr[2 * j];
        else
          for (int64_t j = jlo; j < jhi; j++) row[j] = xr[j * sw];
      }
    }
  }
}

/* Tasks [lo, hi) of the copy: task t is (image, channel). */
static void dconv_prepare(void *ctx, int64_t lo, int64_t hi) {
  const dconv_args *d = ctx;
  for (int64_t t = lo; t < hi; t++) {
    int64_t b = t / d->C, c = t % d->C;
    dconv_copy_in(d, d->X + t * d->H * d->W, 0, d->buf + b * d->sbuf + c * d->sh * d->sw * d->Hq * d->Wq);
  }
}

/* Rows [0, kc) of a panel (row k at b + off[k], WNR floats) into dst, one
 * after another. */
static inline void pack_panel(const float *b, const int64_t *off, int64_t kc, float *dst) {
  for (int64_t k = 0; k < kc; k++) {
    kiln_vec v0 = kiln_loadu(b + off[k]), v1 = kiln_loadu(b + off[k] + VW);
    __builtin_memcpy(dst + k * WNR, &v0, sizeof v0);
    __builtin_memcpy(dst + k * WNR + VW, &v1, sizeof v1);
  }
}

/* From this many rows in a K block, the direct products read a panel's rows
 * packed one after another (DCONV_GROUP panels at a time, each packed once
 * for all row blocks) instead of through the offset table.  Scattered over
 * the planes, a panel's 288+ rows of 64 bytes mostly straddle two lines and
 * left L1 between row blocks: one thread, alternating builds, stride-2 3x3
 * layers 32 -> 64 on 32 x 32 0.96x (0.89x at batch 8, two threads),
 * ResNet-50's at 56 / 28 wide 0.87 / 0.84x; with 27 or 144 rows (3- and
 * 16-channel 3x3 layers) the copy cost 6-7% and is left out. */
#define DCONV_PACK_K 256
#define DCONV_GROUP 4

/* Where row k of a panel's K block starts: at b + off[k] (the planes
 * through the offset table), or at b + k * WNR (a packed copy, off NULL). */
typedef struct {
  const float *b;
  const int64_t *off;
} dconv_panel;

/* Where panel q starts in the planes: WNR columns apart along a wide grid
 * (cpr 0), or row q / cpr of the band, columns from (q % cpr) * WNR. */
static inline int64_t dconv_panel_col(const dconv_args *d, int64_t q, int64_t cpr) {
  return cpr ? q / cpr * d->Wq + q % cpr * WNR : q * WNR;
}

/* The group of panels [g0, returned end) that a K block's row blocks take
 * together: DCONV_GROUP of them, each packed into bp, when the block has
 * DCONV_PACK_K rows or more; else all of [g0, q1), read in place. */
static int64_t dconv_group(const dconv_args *d, const float *src, int64_t cpr, int64_t k0, int64_t kc, int64_t g0,
                           int64_t q1, float *bp) {
  if (kc < DCONV_PACK_K) return q1;
  int64_t g1 = g0 + DCONV_GROUP < q1 ? g0 + DCONV_GROUP : q1;
  for (int64_t q = g0; q < g1; q++)
    pack_panel(src + dconv_panel_col(d, q, cpr), d->off + k0, kc, bp + (q - g0) * kc * WNR);
  return g1;
}

/* Panel q of the group from g0 (dconv_group) in the K block (k0, kc). */
static inline dconv_panel dconv_panel_at(const dconv_args *d, const float *src, int64_t cpr, const float *bp,
                                         int64_t q, int64_t g0, int64_t k0, int64_t kc) {
  if (kc >= DCONV_PACK_K) return (dconv_panel){bp + (q - g0) * kc * WNR, NULL};
  return (dconv_panel){src + dconv_panel_col(d, q, cpr), d->off + k0};
}

/* The products of row blocks [mb0, mb1) and panels [q0, q1) of one image:
 * planes src into its wide result cb.  Each block of A is used for every
 * panel of a group while in L1. */
static void dconv_block(const dconv_args *d, const float *src, float *cb, int64_t mb0, int64_t mb1, int64_t q0,
                        int64_t q1) {
  float bp[DCONV_GROUP * KC * WNR] __attribute__((aligned(64)));
  for (int64_t k0 = 0; k0 < d->K; k0 += d->kstep) {
    int64_t kc = d->K - k0 < d->kstep ? d->K - k0 : d->kstep;
    for (int64_t g0 = q0, g1; g0 < q1; g0 = g1) {
      g1 = dconv_group(d, src, 0, k0, kc, g0, q1, bp);
      for (int64_t mb = mb0; mb < mb1; mb++) {
        int64_t m0 = mb * WMR, mr = d->F - m0 < WMR ? d->F - m0 : WMR;
        const float *a = d->Ap + (mb * d->K + k0) * WMR;
        const float *bias = d->bias && k0 == 0 ? d->bias + m0 : NULL;
        for (int64_t q = g0; q < g1; q++) {
          int64_t n0 = q * WNR, nr = d->N - n0 < WNR ? d->N - n0 : WNR;
          float *c = cb + m0 * d->N + n0;
          dconv_panel p = dconv_panel_at(d, src, 0, bp, q, g0, k0, kc);
          if (mr == WMR)
            micro_w(WMR, a, p.b, p.off, WNR, kc, c, d->N, nr, k0 > 0, bias, NULL, 0, 0);
          else
            micro_w((int)mr, a, p.b, p.off, WNR, kc, c, d->N, nr, k0 > 0, bias, NULL, 0, 0);
        }
      }
    }
  }
}

/* The rows path of dconv_block: panel q of the band of `rows` output rows
 * from r0 of image b is (row q / cpr, WNR columns from (q % cpr) * WNR),
 * or of a flat band the WNR outputs from q * WNR, computed from planes src
 * straight into Y with the bias, beta, residual and ReLU applied as it is
 * stored (no wide result, no copy out). */
static void dconv_rows(const dconv_args *d, const float *src, int64_t b, int64_t r0, int64_t rows, int64_t mb0,
                       int64_t mb1, int64_t q0, int64_t q1) {
  float bp[DCONV_GROUP * KC * WNR] __attribute__((aligned(64)));
  int64_t width = d->flat ? rows * d->OW : d->OW, nrows = d->flat ? 1 : rows;
  int64_t cpr = d->flat ? (width + WNR - 1) / WNR : d->cpr, ldc = d->OH * d->OW;
  if (q1 > nrows * cpr) q1 = nrows * cpr;
  for (int64_t k0 = 0; k0 < d->K; k0 += d->kstep) {
    int64_t kc = d->K - k0 < d->kstep ? d->K - k0 : d->kstep;
    int add = d->accumulate || k0 > 0, relu = d->relu && k0 + kc == d->K;
    for (int64_t g0 = q0, g1; g0 < q1; g0 = g1) {
      g1 = dconv_group(d, src, cpr, k0, kc, g0, q1, bp);
      for (int64_t mb = mb0; mb < mb1; mb++) {
        int64_t m0 = mb * WMR, mr = d->F - m0 < WMR ? d->F - m0 : WMR;
        const float *a = d->Ap + (mb * d->K + k0) * WMR;
        const float *bias = d->bias && k0 == 0 ? d->bias + m0 : NULL;
        for (int64_t q = g0; q < g1; q++) {
          int64_t r = q / cpr, j = q % cpr * WNR, nr = width - j < WNR ? width - j : WNR;
          int64_t at = ((b * d->F + m0) * d->OH + r0 + r) * d->OW + j;
          const float *res = d->res && k0 == 0 ? d->res + at : NULL;
          dconv_panel p = dconv_panel_at(d, src, cpr, bp, q, g0, k0, kc);
          if (mr == WMR)
            micro_w(WMR, a, p.b, p.off, WNR, kc, d->Y + at, ldc, nr, add, bias, res, relu, 1);
          else
            micro_w((int)mr, a, p.b, p.off, WNR, kc, d->Y + at, ldc, nr, add, bias, res, relu, 1);
        }
      }
    }
  }
}

/* Tasks [lo, hi) of the product: task t is (image, span of qspan panels,
 * chunk of row blocks). */
static void dconv_tasks(void *ctx, int64_t lo, int64_t hi) {
  const dconv_args *d = ctx;
  int64_t spans = (d->panels + d->qspan - 1) / d->qspan;
  for (int64_t t = lo; t < hi; t++) {
    int64_t chunk = t % d->mchunks, span = (t / d->mchunks) % spans, b = t / (d->mchunks * spans);
    int64_t mb0 = d->mblocks * chunk / d->mchunks, mb1 = d->mblocks * (chunk + 1) / d->mchunks;
    int64_t q0 = span * d->qspan, q1 = q0 + d->qspan < d->panels ? q0 + d->qspan : d->panels;
    if (d->direct)
      dconv_rows(d, d->buf + b * d->sbuf, b, 0, d->OH, mb0, mb1, q0, q1);
    else
      dconv_block(d, d->buf + b * d->sbuf, d->wide + b * d->F * d->N, mb0, mb1, q0, q1);
  }
}

/* Rows [r0, r0 + rows) of output channel t = (image, channel) from its wide
 * result w into Y. */
static void dconv_copy_out(const dconv_args *d, const float *w, int64_t t, int64_t r0, int64_t rows) {
  float *y = d->Y + t * d->OH * d->OW + r0 * d->OW;
  const float *r = d->res ? d->res + t * d->OH * d->OW + r0 * d->OW : NULL;
  for (int64_t oh = 0; oh < rows; oh++)
    for (int64_t ow = 0; ow < d->OW; ow++) {
      int64_t o = oh * d->OW + ow;
      float v = w[oh * d->Wq + ow];
      if (d->accumulate) v += y[o];
      if (r) v += r[o];
      y[o] = d->relu && v < 0.0f ? 0.0f : v;
    }
}

/* Tasks [lo, hi) of the copy out: task t is (image, output channel). */
static void dconv_finish(void *ctx, int64_t lo, int64_t hi) {
  const dconv_args *d = ctx;
  for (int64_t t = lo; t < hi; t++) dconv_copy_out(d, d->wide + t * d->N, t, 0, d->OH);
}

/* Tasks [lo, hi) of the banded path: task t is (image, band of R output
 * rows), copied in, multiplied and copied out by this thread alone, in
 * buffers of its own (the part_floats at d->buf + slot * part_floats, its
 * kiln_worker_slot:
 * planes of the band's Hq = R + halo rows, slack, wide result) that stay in
 * L2 from one step to the next; the three passes over the whole batch go
 * through L3. */
static void dconv_bands(void *ctx, int64_t lo, int64_t hi) {
  dconv_args *d = ctx;
  float *buf = d->buf + kiln_worker_slot() * d->part_floats, *wide = buf + d->wide_at;
  memset(buf + d->sbuf, 0, (size_t)(d->wide_at - d->sbuf) * sizeof(float)); /* the slack */
  int64_t plane = d->sh * d->sw * d->Hq * d->Wq, R = d->band_rows;
  for (int64_t t = lo; t < hi; t++) {
    int64_t b = t / d->bands, r0 = t % d->bands * R, rows = d->OH - r0 < R ? d->OH - r0 : R;
    for (int64_t c = 0; c < d->C; c++) dconv_copy_in(d, d->X + (b * d->C + c) * d->H * d->W, r0, buf + c * plane);
    for (int64_t q0 = 0; q0 < d->panels; q0 += d->qspan) {
      int64_t q1 = q0 + d->qspan < d->panels ? q0 + d->qspan : d->panels;
      if (d->direct)
        dconv_rows(d, buf, b, r0, rows, 0, d->mblocks, q0, q1);
      else
        dconv_block(d, buf, wide, 0, d->mblocks, q0, q1);
    }
    if (!d->direct)
      for (int64_t f = 0; f < d->F; f++) dconv_copy_out(d, wide + f * d->N, b * d->F + f, r0, rows);
  }
}

/* A band part's buffers (planes, wide result) are kept to half of L2 (1 MiB here). */
#define DCONV_BAND_BYTES (512 << 10)

/* Bytes of a band part's buffers with R output rows per band. */
static int64_t band_bytes(const dconv_args *d, int64_t R) {
  int64_t halo = (d->KH - 1) * d->dh / d->sh;
  return 4 * d->Wq * (d->C * d->sh * d->sw * (R + halo) + (d->direct ? 0 : d->F * R));
}

/* Bands per image for the banded path, or 0 to take the three passes: as
 * few as keep a part's buffers within DCONV_BAND_BYTES, then as many more
 * as make the tasks a multiple of the threads (each takes whole parts). */
static int64_t choose_bands(const dconv_args *d, int64_t threads) {
  int64_t nb = 1;
  while (nb < d->OH && band_bytes(d, (d->OH + nb - 1) / nb) > DCONV_BAND_BYTES) nb++;
  while (nb < d->OH && (d->batch * nb) % threads != 0) nb++;
  if (d->batch * nb < threads) return 0;
  /* Each band reads the whole weight: where one image is split across the
   * threads, a weight over L2 goes the three-pass way (whose tasks split
   * its rows). */
  if (d->batch < threads && d->F * d->K * 4 > (1 << 20)) return 0;
  return nb;
}

/* kiln_dconv for d (see kiln_native.h). */
static int dconv_run(dconv_args *d, const float *Wt, int32_t threads, int64_t slot) {
  if (d->sh > DCONV_MAX_STRIDE || d->sw > DCONV_MAX_STRIDE) return 0;
  int64_t halo = (d->KH - 1) * d->dh / d->sh;
  d->Wq = d->OW + (d->KW - 1) * d->dw / d->sw;
  d->K = d->C * d->KH * d->KW;
  d->mblocks = (d->F + WMR - 1) / WMR;
  int64_t kblocks = (d->K + KC - 1) / KC;
  d->kstep = (d->K + kblocks - 1) / kblocks;
  /* Output rows whose panels tile them with no more columns than the wide
   * grid's (OW = 32 of Wq = 34 with AVX-512) go straight into Y: see
   * dconv_rows.  A last panel of VW columns or fewer reads one vector
   * (micro_w_cols), so only its VW columns count: ResNet-50's stem, 112 = 3
   * x 32 + 16 of Wq = 115, had taken the wide result and its copy out (C
   * harness, two threads: 517-633 -> 477-510 us warm, 615-715 -> 534-576
   * with the caches swept). */
  int64_t cpr = (d->OW + WNR - 1) / WNR;
  d->cpr = micro_w_cols(d->OW) <= d->Wq ? cpr : 0;
  /* With no extra columns (a window no wider than the stride, as a 2x2
   * stride 2; strided 1x1 windows now take the GEMM, see kiln_conv2d) the
   * wide grid is Y's own layout: its panels go straight into Y too, with no
   * copy out (ResNet-50's strided 1x1 layers at 28 / 14 / 7 wide had taken
   * 0.83 / 0.95 / 0.97x, C harness, alternating). */
  d->flat = !d->cpr && d->Wq == d->OW;
  d->direct = d->cpr || d->flat;
  /* Below KILN_DCONV_MIN_FMAS only a few output channels: the im2col
   * gather is paid once per panel for all F rows, so with few rows it
   * outweighs the copy in and the wide grid's extra columns (this session's
   * faster copy; two threads, alternating builds: 16 channels on 28 x 28
   * 0.56x, 32 0.70x, 8 / 16 / 48 at stride 2 on 15 x 15 0.39 / 0.64 /
   * 0.75x, 24 from 3 channels 0.81x; but 64 channels 1.06 / 1.23x). */
  if (!d->cpr && d->F >= 64 && (double)d->batch * d->F * d->K * d->OH * d->OW < KILN_DCONV_MIN_FMAS) return 0;
  d->Ap = kiln_packed_a(slot, Wt, d->F, d->K, d->K);
  if (d->Ap == NULL) return 0;
  /* Bands of R output rows, each copied in, multiplied and copied out by
   * one part while its buffers stay in L2 (dconv_bands); or, when that
   * leaves a thread idle, the batch's copy, products and copy out as three
   * passes, each split over the pool. */
  d->bands = choose_bands(d, threads);
  d->band_rows = d->bands ? (d->OH + d->bands - 1) / d->bands : d->OH;
  d->bands = d->bands ? (d->OH + d->band_rows - 1) / d->band_rows : 0;
  d->Hq = d->band_rows + halo;
  d->N = d->band_rows * d->Wq;
  d->sbuf = d->C * d->sh * d->sw * d->Hq * d->Wq;
  d->panels = d->cpr ? d->band_rows * d->cpr : (d->N + WNR - 1) / WNR;
  /* Each task one panel: the whole weight is read once per panel (from L2
   * when it fits there), a panel's rows of B stay in L1.  Each task every
   * panel: a block of A stays in L1, an image's planes are read once per
   * block.  A weight in L2 takes the first.  A bigger one the second: on
   * two threads ResNet-50's 512 x 4608 3x3 weights at 7 x 7 took 3.2 ->
   * 2.3 ms, at stride 2 4.5 -> 2.2 ms, the 1x1 stride 2 2048 x 1024 one
   * 3.2 -> 2.0 ms (choosing by bytes read had kept it per panel). */
  d->qspan = d->F * d->K * 4 <= (512 << 10) ? 1 : d->panels;
  /* The last wide row reads up to Wq - OW + WNR floats past the planes: a zeroed slack. */
  int64_t slack = d->Wq + WNR, tasks = d->batch * d->bands, parts = kiln_parts(tasks, threads);
  size_t floats;
  if (d->bands) {
    d->wide_at = round16(d->sbuf + slack);
    d->part_floats = d->wide_at + (d->direct ? 0 : round16(d->F * d->N));
    floats = (size_t)(kiln_pool_threads() * d->part_floats);
  } else {
    floats = (size_t)(round16(d->batch * d->sbuf + slack) + (d->direct ? 0 : d->batch * d->F * d->N));
  }
  float *buf = kiln_thread_scratch(floats * sizeof(float) + (size_t)d->K * sizeof(int64_t));
  if (buf == NULL) return 0;
  int64_t *off = (int64_t *)(buf + floats);
  /* Row k = (c, kh, kw) of B starts at off[k] in an image's planes: the
   * offsets of channel 0, then channel c's are c planes further (stepped,
   * not divided per row: 288 rows' divisions were 3% of a 32 -> 64 layer
   * at batch 1). */
  int64_t taps = d->KH * d->KW, cstep = d->sh * d->sw * d->Hq * d->Wq;
  for (int64_t kh = 0; kh < d->KH; kh++)
    for (int64_t kw = 0; kw < d->KW; kw++) {
      int64_t y = kh * d->dh, x = kw * d->dw;
      off[kh * d->KW + kw] = ((y % d->sh) * d->sw + x % d->sw) * d->Hq * d->Wq + y / d->sh * d->Wq + x / d->sw;
      d->phases[y % d->sh] |= 1ull << (x % d->sw);
    }
  for (int64_t k = taps; k < d->K; k++) off[k] = off[k - taps] + cstep;
  for (int64_t e = 0; e < d->sw; e++) phase_bounds(d->W, d->pl, d->sw, e, d->Wq, &d->jlo[e], &d->jhi[e]);
  d->buf = buf, d->off = off;
  if (d->bands) {
    kiln_parallel_for(dconv_bands, d, tasks, parts);
    return 1;
  }
  d->wide = buf + round16(d->batch * d->sbuf + slack);
  memset(buf + d->batch * d->sbuf, 0, (size_t)slack * sizeof(float));
  int64_t n = d->batch * d->C;
  kiln_parallel_for(dconv_prepare, d, n, kiln_parts(n, threads));
  int64_t want = 8 * (int64_t)threads;
  int64_t spans = (d->panels + d->qspan - 1) / d->qspan, have = d->batch * spans;
  d->mchunks = have >= want ? 1 : (want + have - 1) / have;
  if (d->mchunks > d->mblocks) d->mchunks = d->mblocks;
  tasks = have * d->mchunks;
  kiln_parallel_for(dconv_tasks, d, tasks, kiln_parts(tasks, threads));
  if (d->direct) return 1;
  n = d->batch * d->F;
  kiln_parallel_for(dconv_finish, d, n, kiln_parts(n, threads));
  return 1;
}

/* See kiln_native.h. */
int kiln_dconv(int64_t batch, int64_t F, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
               int64_t OW, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, const float *X,
               const float *Wt, const float *bias, const float *res, int accumulate, int relu, float *Y,
               int32_t threads, int64_t slot) {
  dconv_args d = {0};
  d.batch = batch, d.F = F, d.C = C, d.H = H, d.W = W, d.KH = KH, d.KW = KW, d.OH = OH, d.OW = OW;
  d.sh = sh, d.sw = sw, d.dh = dh, d.dw = dw, d.pt = pt, d.pl = pl;
  d.X = X, d.bias = bias, d.res = res, d.Y = Y, d.accumulate = accumulate, d.relu = relu;
  return dconv_run(&d, Wt, threads, slot);
}
