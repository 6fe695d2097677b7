/* rope.c - rotary table and the rotate-half rotation, forward and backward.
 *
 * Invariants: a row's rotation uses only its own position (t % S, or pos[t] for packed
 * documents: the position inside the row's document), so sequences never mix;
 * the table is computed in double whatever the kernel precision, so the float build and the
 * double build see the same angles up to the final rounding. The backward is the exact
 * transpose of the forward rotation (rotation by -angle) and accumulates.
 */
#include <stddef.h>
#include "rope.h"
#include "qt_real.h"
#include "../math/qt_math.h"

void QT_FN(qt_rope_table)(qt_real *table, int64_t S, int64_t R, double theta)
{
    const int64_t half = R / 2;
    /* theta^(-2i/R) through exp/log keeps the table free of libm pow(). */
    const double log_theta = qt_log(theta);
    for (int64_t i = 0; i < half; i++) {
        const double inv_freq = qt_exp(-((double)(2 * i) / (double)R) * log_theta);
        for (int64_t pos = 0; pos < S; pos++) {
            const double ang = (double)pos * inv_freq;
            table[(pos * half + i) * 2 + 0] = (qt_real)qt_cos(ang);
            table[(pos * half + i) * 2 + 1] = (qt_real)qt_sin(ang);
        }
    }
}

void QT_FN(qt_rope_fwd_pos)(qt_real *y, const qt_real *x, const qt_real *table,
                            const int32_t *pos, int64_t b, int64_t S, int64_t H, int64_t hd,
                            int64_t R)
{
    const int64_t half = R / 2;
    for (int64_t t = 0; t < b * S; t++) {
        const qt_real *cs = table + (pos ? (int64_t)pos[t] : t % S) * half * 2;
        for (int64_t h = 0; h < H; h++) {
            const qt_real *xr = x + (t * H + h) * hd;
            qt_real *yr = y + (t * H + h) * hd;
            for (int64_t i = 0; i < half; i++) {
                const qt_real c = cs[2 * i], s = cs[2 * i + 1];
                const qt_real x1 = xr[i], x2 = xr[i + half];
                yr[i] = x1 * c - x2 * s;
                yr[i + half] = x2 * c + x1 * s;
            }
            for (int64_t i = R; i < hd; i++) yr[i] = xr[i];
        }
    }
}

void QT_FN(qt_rope_bwd_pos)(qt_real *dx, const qt_real *dy, const qt_real *table,
                            const int32_t *pos, int64_t b, int64_t S, int64_t H, int64_t hd,
                            int64_t R)
{
    const int64_t half = R / 2;
    for (int64_t t = 0; t < b * S; t++) {
        const qt_real *cs = table + (pos ? (int64_t)pos[t] : t % S) * half * 2;
        for (int64_t h = 0; h < H; h++) {
            const qt_real *g = dy + (t * H + h) * hd;
            qt_real *d = dx + (t * H + h) * hd;
            for (int64_t i = 0; i < half; i++) {
                const qt_real c = cs[2 * i], s = cs[2 * i + 1];
                const qt_real g1 = g[i], g2 = g[i + half];
                d[i] += g1 * c + g2 * s;
                d[i + half] += g2 * c - g1 * s;
            }
            for (int64_t i = R; i < hd; i++) d[i] += g[i];
        }
    }
}

void QT_FN(qt_rope_fwd)(qt_real *y, const qt_real *x, const qt_real *table,
                        int64_t b, int64_t S, int64_t H, int64_t hd, int64_t R)
{
    QT_FN(qt_rope_fwd_pos)(y, x, table, NULL, b, S, H, hd, R);
}

void QT_FN(qt_rope_bwd)(qt_real *dx, const qt_real *dy, const qt_real *table,
                        int64_t b, int64_t S, int64_t H, int64_t hd, int64_t R)
{
    QT_FN(qt_rope_bwd_pos)(dx, dy, table, NULL, b, S, H, hd, R);
}
