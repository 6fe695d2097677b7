/* moe_combine.c - MoE output combine: out_t = sum over slots of p * expert output.
 *
 * Invariants: slots are added in increasing order (docs/design.md s.6: combine in (token, slot)
 * order); the dp dot product runs over i increasing; rows never mix across tokens.
 */
#include "moe_combine.h"
#include "qt_real.h"

void QT_FN(qt_moe_combine_fwd)(qt_real *out, const qt_real *p, const qt_real *y, int64_t T,
                               int64_t k, int64_t d)
{
    for (int64_t t = 0; t < T; t++) {
        qt_real *o = out + t * d;
        for (int64_t i = 0; i < d; i++) o[i] = 0;
        for (int64_t s = 0; s < k; s++) {
            const qt_real w = p[t * k + s];
            const qt_real *yr = y + (t * k + s) * d;
            for (int64_t i = 0; i < d; i++) o[i] += w * yr[i];
        }
    }
}

void QT_FN(qt_moe_combine_bwd)(qt_real *dp, qt_real *dy, const qt_real *dout, const qt_real *p,
                               const qt_real *y, int64_t T, int64_t k, int64_t d)
{
    for (int64_t t = 0; t < T; t++) {
        const qt_real *g = dout + t * d;
        for (int64_t s = 0; s < k; s++) {
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
