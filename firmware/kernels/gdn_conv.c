/* gdn_conv.c - causal depthwise conv + SiLU of the GDN q/k/v channels, forward, backward
 * and per-sequence weight gradient (contract: gdn_conv.h, qt_ops.h QT_OP_GDN_CONV_*).
 *
 * Invariants: tokens mix only inside one sequence (taps before its start are skipped,
 * which equals adding 0*w for finite w); every sum has a fixed order (taps increasing for
 * a channel value, tokens increasing for the weight gradient). Channels are walked as
 * contiguous blocks (one q head, one k head or one value head) so the qkvz column of a
 * channel is block start + i.
 */
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

void QT_FN(qt_gdn_conv_fwd)(qt_real *restrict c, qt_real *restrict pre,
                            const qt_real *restrict qkvz, const qt_real *restrict w,
                            int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
                            int64_t dv, int64_t K)
{
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t t = 0; t < S; t++) {
            int64_t row = s * S + t;
            qt_real *prow = pre + row * cc;
            for (int64_t blk = 0; blk < nblk; blk++) {
                int64_t ch0, col0, width;
                qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
                for (int64_t i = 0; i < width; i++) prow[ch0 + i] = QT_R(0.0);
                for (int64_t j = 0; j < K; j++) {
                    int64_t tt = t - K + 1 + j;
                    if (tt < 0) continue;
                    const qt_real *u = qkvz + (s * S + tt) * wq + col0;
                    const qt_real *wc = w + ch0 * K + j;
                    for (int64_t i = 0; i < width; i++) prow[ch0 + i] += wc[i * K] * u[i];
                }
            }
            for (int64_t ch = 0; ch < cc; ch++) c[row * cc + ch] = QT_SILU(prow[ch]);
        }
    }
}

void QT_FN(qt_gdn_conv_bwd)(qt_real *restrict dqkvz, const qt_real *restrict pre,
                            const qt_real *restrict dc, const qt_real *restrict w,
                            int64_t b, int64_t S, int64_t hk, int64_t dk, int64_t hv,
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
                        if (t >= S) continue;
                        int64_t e = (s * S + t) * cc + ch;
                        acc += (dc[e] * qt_gdn_dsilu(pre[e])) * w[ch * K + j];
                    }
                    du[col0 + i] += acc;
                }
            }
        }
    }
}

void QT_FN(qt_gdn_conv_wgrad)(qt_real *restrict dw, const qt_real *restrict pre,
                              const qt_real *restrict dc, const qt_real *restrict qkvz,
                              int64_t S, int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                              int64_t K)
{
    int64_t r = hv / hk, wq = hk * (2 * dk + 2 * r * dv), cc = 2 * hk * dk + hv * dv;
    int64_t nblk = 2 * hk + hv;
    for (int64_t t = 0; t < S; t++) {
        for (int64_t blk = 0; blk < nblk; blk++) {
            int64_t ch0, col0, width;
            qt_gdn_conv_block(blk, hk, dk, hv, dv, &ch0, &col0, &width);
            for (int64_t i = 0; i < width; i++) {
                int64_t ch = ch0 + i;
                qt_real dp = dc[t * cc + ch] * qt_gdn_dsilu(pre[t * cc + ch]);
                for (int64_t j = 0; j < K; j++) {
                    int64_t tt = t - K + 1 + j;
                    if (tt < 0) continue;
                    dw[ch * K + j] += dp * qkvz[tt * wq + col0 + i];
                }
            }
        }
    }
}
