/* gdn_conv.c - causal depthwise conv + SiLU of the GDN q/k/v channels, forward, backward
 * and weight gradient of a sequence or of a block of its tokens (contract: gdn_conv.h, qt_ops.h QT_OP_GDN_CONV_*).
 *
 * Invariants: tokens mix only inside one sequence, and inside one document of it when pos
 * is given (packed documents: taps before the document's first token, t - pos[t], are
 * skipped like taps before the sequence start;
 * which equals adding 0*w for finite w); every sum has a fixed order (taps increasing for
 * a channel value, tokens increasing for the weight gradient). Channels are walked as
 * contiguous blocks (one q head, one k head or one value head) so the qkvz column of a
 * channel is block start + i.
 * bwd / wgrad are tiled (QT_GDN_CONV_CW channels x a window of tokens held in a fixed
 * stack tile) so dpre = dc * silu'(pre) is evaluated once per element instead of once per
 * tap, and the inner loops run contiguously over channels. Each output element still sees
 * exactly the expression chain of the *_ref versions (same terms, same order), so the
 * tiled and reference paths are bit-identical (tested); K too large for the tile falls back
 * to the reference.
 */
#include <stddef.h>
#include "qt_real.h"
#include "kernels/gdn_conv.h"

/* Block b of 2*Hk + Hv: q heads, then k heads, then v heads (conv channel order). */
static void qt_gdn_conv_block(int64_t blk, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                              int64_t *ch0, int64_t *col0, int64_t *width)
{
    int64_t r = hv / hk, g = 2 * dk + 2 * r * dv;
    if (blk < hk) {
        *ch0 = blk * dk;
        *col0 = blk * g;
        *width = dk;
    } else if (blk < 2 * hk) {
        int64_t h = blk - hk;
        *ch0 = hk * dk + h * dk;
        *col0 = h * g + dk;
        *width = dk;
    } else {
        int64_t j = blk - 2 * hk;
        *ch0 = 2 * hk * dk + j * dv;
        *col0 = (j / r) * g + 2 * dk + (j % r) * dv;
        *width = dv;
    }
}

/* d silu(x)/dx written so forward and backward share QT_SIGMOID's bits. */
static inline qt_real qt_gdn_dsilu(qt_real x)
{
    qt_real s = QT_SIGMOID(x);
    return s * (QT_R(1.0) + x * (QT_R(1.0) - s));
}

void QT_FN(qt_gdn_conv_fwd_pos)(qt_real *restrict c, qt_real *restrict pre,
                                const qt_real *restrict qkvz, const qt_real *restrict w,
                                const int32_t *restrict pos, int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                            int64_t dv, int64_t K)
{
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t t = 0; t < S; t++) {
            int64_t row = s * S + t;
            int64_t lo = pos ? t - pos[row] : 0; /* the first token of t's document */
            qt_real *prow = pre + row * cc;
            for (int64_t blk = 0; blk < nblk; blk++) {
                int64_t ch0, col0, width;
                qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
                for (int64_t i = 0; i < width; i++) prow[ch0 + i] = QT_R(0.0);
                for (int64_t j = 0; j < K; j++) {
                    int64_t tt = t - K + 1 + j;
                    if (tt < lo) continue;
                    const qt_real *u = qkvz + (s * S + tt) * wq + col0;
                    const qt_real *wc = w + ch0 * K + j;
                    for (int64_t i = 0; i < width; i++) prow[ch0 + i] += wc[i * K] * u[i];
                }
            }
            for (int64_t ch = 0; ch < cc; ch++) c[row * cc + ch] = QT_SILU(prow[ch]);
        }
    }
}

void QT_FN(qt_gdn_conv_bwd_ref_pos)(qt_real *restrict dqkvz, const qt_real *restrict pre,
                                    const qt_real *restrict dc, const qt_real *restrict w,
                                    const int32_t *restrict pos, int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                            int64_t dv, int64_t K)
{
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t tu = 0; tu < S; tu++) {
            qt_real *du = dqkvz + (s * S + tu) * wq;
            for (int64_t blk = 0; blk < nblk; blk++) {
                int64_t ch0, col0, width;
                qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
                for (int64_t i = 0; i < width; i++) {
                    int64_t ch = ch0 + i;
                    qt_real acc = QT_R(0.0);
                    /* output token t = tu + K-1-j saw this input through tap j */
                    for (int64_t j = 0; j < K; j++) {
                        int64_t t = tu + K - 1 - j;
                        if (t >= S || (pos && t - pos[s * S + t] > tu)) continue;
                        int64_t e = (s * S + t) * cc + ch;
                        acc += (dc[e] * qt_gdn_dsilu(pre[e])) * w[ch * K + j];
                    }
                    du[col0 + i] += acc;
                }
            }
        }
    }
}

void QT_FN(qt_gdn_conv_wgrad_rows_ref_pos)(qt_real *restrict dw, const qt_real *restrict pre,
                                       const qt_real *restrict dc,
                                       const qt_real *restrict qkvz,
                                       const int32_t *restrict pos, int64_t t0, int64_t t1, int64_t hk, int64_t dk,
                                   int64_t hv, int64_t dv, int64_t K)
{
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv;
    for (int64_t t = t0; t < t1; t++) {
        for (int64_t blk = 0; blk < nblk; blk++) {
            int64_t ch0, col0, width;
            qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
            for (int64_t i = 0; i < width; i++) {
                int64_t ch = ch0 + i;
                qt_real dp = dc[t * cc + ch] * qt_gdn_dsilu(pre[t * cc + ch]);
                int64_t lo = pos ? t - pos[t] : 0;
                for (int64_t j = 0; j < K; j++) {
                    int64_t tt = t - K + 1 + j;
                    if (tt < lo) continue;
                    dw[ch * K + j] += dp * qkvz[tt * wq + col0 + i];
                }
            }
        }
    }
}

/* Tile geometry: CW channels by ROWS token rows of dpre (the K-1 halo included); K taps
 * of transposed weights / accumulators. 24 KiB float, fits L1 next to the streams. */
#define QT_GDN_CONV_CW 64
#define QT_GDN_CONV_ROWS 96
#define QT_GDN_CONV_KMAX 32

/* dp[r*CW + i] = dc * silu'(pre) for rows [t0, t1) of one sequence, channels ch..ch+cw. */
static void qt_gdn_conv_dpre_rows(qt_real *restrict dp, const qt_real *restrict pre,
                                  const qt_real *restrict dc, int64_t t0, int64_t t1,
                                  int64_t cc, int64_t ch, int64_t cw)
{
    for (int64_t t = t0; t < t1; t++) {
        const qt_real *p = pre + t * cc + ch, *g = dc + t * cc + ch;
        qt_real *d = dp + (t - t0) * QT_GDN_CONV_CW;
        for (int64_t i = 0; i < cw; i++) d[i] = g[i] * qt_gdn_dsilu(p[i]);
    }
}

void QT_FN(qt_gdn_conv_bwd_pos)(qt_real *restrict dqkvz, const qt_real *restrict pre,
                                const qt_real *restrict dc, const qt_real *restrict w,
                                const int32_t *restrict pos, int64_t b, int64_t S,
                                int64_t hk, int64_t dk, int64_t hv, int64_t dv, int64_t K)
{
    if (K < 1 || K > QT_GDN_CONV_KMAX) {
        QT_FN(qt_gdn_conv_bwd_ref_pos)(dqkvz, pre, dc, w, pos, b, S, hk, dk, hv, dv, K);
        return;
    }
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv, tt = QT_GDN_CONV_ROWS - (K - 1);
    qt_real dp[QT_GDN_CONV_ROWS * QT_GDN_CONV_CW];
    qt_real wt[QT_GDN_CONV_KMAX * QT_GDN_CONV_CW];
    qt_real acc[QT_GDN_CONV_CW];
    for (int64_t s = 0; s < b; s++) {
        const qt_real *ps = pre + s * S * cc, *gs = dc + s * S * cc;
        const int32_t *pp = pos ? pos + s * S : NULL;
        for (int64_t t0 = 0; t0 < S; t0 += tt) {
            int64_t t1 = t0 + tt < S ? t0 + tt : S;
            int64_t te = t1 + K - 1 < S ? t1 + K - 1 : S;
            for (int64_t blk = 0; blk < nblk; blk++) {
                int64_t ch0, col0, width;
                qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
                for (int64_t i0 = 0; i0 < width; i0 += QT_GDN_CONV_CW) {
                    int64_t cw = width - i0 < QT_GDN_CONV_CW ? width - i0 : QT_GDN_CONV_CW;
                    int64_t ch = ch0 + i0;
                    for (int64_t j = 0; j < K; j++)
                        for (int64_t i = 0; i < cw; i++)
                            wt[j * QT_GDN_CONV_CW + i] = w[(ch + i) * K + j];
                    qt_gdn_conv_dpre_rows(dp, ps, gs, t0, te, cc, ch, cw);
                    for (int64_t tu = t0; tu < t1; tu++) {
                        for (int64_t i = 0; i < cw; i++) acc[i] = QT_R(0.0);
                        /* output token t = tu + K-1-j saw this input through tap j */
                        for (int64_t j = 0; j < K; j++) {
                            int64_t t = tu + K - 1 - j;
                            if (t >= S || (pp && t - pp[t] > tu)) continue;
                            const qt_real *d = dp + (t - t0) * QT_GDN_CONV_CW;
                            const qt_real *wj = wt + j * QT_GDN_CONV_CW;
                            for (int64_t i = 0; i < cw; i++) acc[i] += d[i] * wj[i];
                        }
                        qt_real *du = dqkvz + (s * S + tu) * wq + col0 + i0;
                        for (int64_t i = 0; i < cw; i++) du[i] += acc[i];
                    }
                }
            }
        }
    }
}

void QT_FN(qt_gdn_conv_wgrad_rows_pos)(qt_real *restrict dw, const qt_real *restrict pre,
                                       const qt_real *restrict dc,
                                       const qt_real *restrict qkvz,
                                       const int32_t *restrict pos, int64_t t0, int64_t t1,
                                       int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                       int64_t K)
{
    if (K < 1 || K > QT_GDN_CONV_KMAX) {
        QT_FN(qt_gdn_conv_wgrad_rows_ref_pos)(dw, pre, dc, qkvz, pos, t0, t1, hk, dk, hv, dv,
                                              K);
        return;
    }
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv;
    qt_real dp[QT_GDN_CONV_CW];
    /* acc[j*CW + i] carries dw[ch+i, j] through the token loop: the same chain of += as
     * adding into dw directly, t increasing. */
    qt_real acc[QT_GDN_CONV_KMAX * QT_GDN_CONV_CW];
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t ch0, col0, width;
        qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
        for (int64_t i0 = 0; i0 < width; i0 += QT_GDN_CONV_CW) {
            int64_t cw = width - i0 < QT_GDN_CONV_CW ? width - i0 : QT_GDN_CONV_CW;
            int64_t ch = ch0 + i0;
            for (int64_t j = 0; j < K; j++)
                for (int64_t i = 0; i < cw; i++) acc[j * QT_GDN_CONV_CW + i] = dw[(ch + i) * K + j];
            for (int64_t t = t0; t < t1; t++) {
                qt_gdn_conv_dpre_rows(dp, pre, dc, t, t + 1, cc, ch, cw);
                const int64_t lo = pos ? t - pos[t] : 0;
                for (int64_t j = 0; j < K; j++) {
                    int64_t tu = t - K + 1 + j;
                    if (tu < lo) continue;
                    const qt_real *u = qkvz + tu * wq + col0 + i0;
                    qt_real *a = acc + j * QT_GDN_CONV_CW;
                    for (int64_t i = 0; i < cw; i++) a[i] += dp[i] * u[i];
                }
            }
            for (int64_t j = 0; j < K; j++)
                for (int64_t i = 0; i < cw; i++) dw[(ch + i) * K + j] = acc[j * QT_GDN_CONV_CW + i];
        }
    }
}

/* The whole sequence: rows [0, S). */
void QT_FN(qt_gdn_conv_wgrad)(qt_real *restrict dw, const qt_real *restrict pre,
                              const qt_real *restrict dc, const qt_real *restrict qkvz,
                              int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                              int64_t K)
{
    QT_FN(qt_gdn_conv_wgrad_rows)(dw, pre, dc, qkvz, 0, S, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_wgrad_ref)(qt_real *restrict dw, const qt_real *restrict pre,
                                  const qt_real *restrict dc, const qt_real *restrict qkvz,
                                  int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                  int64_t K)
{
    QT_FN(qt_gdn_conv_wgrad_rows_ref)(dw, pre, dc, qkvz, 0, S, hk, dk, hv, dv, K);
}

/* The unpacked entry points: every token of a sequence is one document (pos NULL). */
void QT_FN(qt_gdn_conv_fwd)(qt_real *restrict c, qt_real *restrict pre,
                            const qt_real *restrict qkvz, const qt_real *restrict w,
                            int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                            int64_t dv, int64_t K)
{
    QT_FN(qt_gdn_conv_fwd_pos)(c, pre, qkvz, w, NULL, b, S, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_bwd)(qt_real *restrict dqkvz, const qt_real *restrict pre,
                            const qt_real *restrict dc, const qt_real *restrict w,
                            int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                            int64_t dv, int64_t K)
{
    QT_FN(qt_gdn_conv_bwd_pos)(dqkvz, pre, dc, w, NULL, b, S, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_bwd_ref)(qt_real *restrict dqkvz, const qt_real *restrict pre,
                                const qt_real *restrict dc, const qt_real *restrict w,
                                int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                                int64_t dv, int64_t K)
{
    QT_FN(qt_gdn_conv_bwd_ref_pos)(dqkvz, pre, dc, w, NULL, b, S, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_wgrad_rows)(qt_real *restrict dw, const qt_real *restrict pre,
                                   const qt_real *restrict dc, const qt_real *restrict qkvz,
                                   int64_t t0, int64_t t1, int64_t hk, int64_t dk,
                                   int64_t hv, int64_t dv, int64_t K)
{
    QT_FN(qt_gdn_conv_wgrad_rows_pos)(dw, pre, dc, qkvz, NULL, t0, t1, hk, dk, hv, dv, K);
}

void QT_FN(qt_gdn_conv_wgrad_rows_ref)(qt_real *restrict dw, const qt_real *restrict pre,
                                       const qt_real *restrict dc,
                                       const qt_real *restrict qkvz, int64_t t0, int64_t t1,
                                       int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                       int64_t K)
{
    QT_FN(qt_gdn_conv_wgrad_rows_ref_pos)(dw, pre, dc, qkvz, NULL, t0, t1, hk, dk, hv, dv, K);
}
