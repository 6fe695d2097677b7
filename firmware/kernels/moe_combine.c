/* moe_combine.c - MoE output combine: out_t = sum over slots of p * expert output.
 *
 * Invariants: slots are added in increasing order (docs/design.md s.6: combine in (token, slot)
 * order); the dp dot product runs over i increasing; rows never mix across tokens. With token
 * dropping (kidx given) a dropped slot (kidx < 0) is skipped entirely: the kept slots add in
 * the same order, so a plan without drops has the plain kernels' bits.
 */
#include "moe_combine.h"
#include "qt_real.h"

void QT_FN(qt_moe_combine_kept_fwd)(qt_real *out, const qt_real *p, const qt_real *y,
                                    const int32_t *kidx, int64_t T, int64_t k, int64_t d)
{
    for (int64_t t = 0; t < T; t++) {
        qt_real *o = out + t * d;
        for (int64_t i = 0; i < d; i++) o[i] = 0;
        for (int64_t s = 0; s < k; s++) {
            if (kidx && kidx[t * k + s] < 0) continue;
            const qt_real w = p[t * k + s];
            const qt_real *yr = y + (t * k + s) * d;
            for (int64_t i = 0; i < d; i++) o[i] += w * yr[i];
        }
    }
}

void QT_FN(qt_moe_combine_kept_bwd)(qt_real *dp, qt_real *dy, const qt_real *dout,
                                    const qt_real *p, const qt_real *y, const int32_t *kidx,
                                    int64_t T, int64_t k, int64_t d)
{
    for (int64_t t = 0; t < T; t++) {
        const qt_real *g = dout + t * d;
        for (int64_t s = 0; s < k; s++) {
            if (kidx && kidx[t * k + s] < 0) continue;
            const qt_real w = p[t * k + s];
            const qt_real *yr = y + (t * k + s) * d;
            qt_real *dyr = dy + (t * k + s) * d;
            qt_real acc = 0;
            for (int64_t i = 0; i < d; i++) {
                acc += g[i] * yr[i];
                dyr[i] += w * g[i];
            }
            dp[t * k + s] += acc;
        }
    }
}

void QT_FN(qt_moe_combine_fwd)(qt_real *out, const qt_real *p, const qt_real *y, int64_t T,
                               int64_t k, int64_t d)
{
    QT_FN(qt_moe_combine_kept_fwd)(out, p, y, 0, T, k, d);
}

void QT_FN(qt_moe_combine_bwd)(qt_real *dp, qt_real *dy, const qt_real *dout, const qt_real *p,
                               const qt_real *y, int64_t T, int64_t k, int64_t d)
{
    QT_FN(qt_moe_combine_kept_bwd)(dp, dy, dout, p, y, 0, T, k, d);
}
