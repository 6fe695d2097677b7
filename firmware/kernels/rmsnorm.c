/* rmsnorm.c - RMS normalisation forward, backward and weight gradient (see rmsnorm.h).
 * Written once against qt_real; compiled as float (firmware) and double (tests).
 * Invariants: every reduction runs in increasing index order in qt_real precision; the
 * backward recomputes x*rstd exactly as the forward did, so y and the gradients agree.
 */
#include "rmsnorm.h"
#include "qt_real.h"
#include "qt_ops.h"

static qt_real qt_rms_scale(const qt_real *w, int64_t i, int flags)
{
    return (flags & QT_RMSNORM_ZERO_CENTRED) ? QT_R(1.0) + w[i] : w[i];
}

void QT_FN(qt_rmsnorm_fwd)(qt_real *y, qt_real *rstd, const qt_real *x, const qt_real *w,
                           int64_t R, int64_t n, int64_t xs, int64_t ys, int flags, qt_real eps)
{
    for (int64_t r = 0; r < R; r++) {
        const qt_real *xr = x + r * xs;
        qt_real *yr = y + r * ys;
        qt_real ss = 0;
        for (int64_t i = 0; i < n; i++) ss = ss + xr[i] * xr[i];
        qt_real rs = QT_R(1.0) / QT_SQRT(ss / (qt_real)n + eps);
        rstd[r] = rs;
        for (int64_t i = 0; i < n; i++) yr[i] = (xr[i] * rs) * qt_rms_scale(w, i, flags);
    }
}

/* y_i = x_i r s_i with r = (sum x^2/n + eps)^-1/2 and dr/dx_j = -r^3 x_j / n, so
 * dL/dx_j = r g_j - x_j r^3 (sum_i g_i x_i) / n with g = dy * s. */
void QT_FN(qt_rmsnorm_bwd)(qt_real *dx, const qt_real *dy, const qt_real *x, const qt_real *w,
                           const qt_real *rstd, int64_t R, int64_t n, int64_t xs, int64_t ys,
                           int flags)
{
    for (int64_t r = 0; r < R; r++) {
        const qt_real *xr = x + r * xs, *dyr = dy + r * ys;
        qt_real *dxr = dx + r * xs;
        qt_real rs = rstd[r];
        qt_real dot = 0;
        for (int64_t i = 0; i < n; i++) dot = dot + (dyr[i] * qt_rms_scale(w, i, flags)) * xr[i];
        qt_real coef = ((rs * rs) * rs) * dot / (qt_real)n;
        for (int64_t i = 0; i < n; i++)
            dxr[i] = dxr[i] + (rs * (dyr[i] * qt_rms_scale(w, i, flags)) - xr[i] * coef);
    }
}

void QT_FN(qt_rmsnorm_wgrad)(qt_real *dw, const qt_real *dy, const qt_real *x,
                             const qt_real *rstd, int64_t R, int64_t n, int64_t xs, int64_t ys)
{
    for (int64_t r = 0; r < R; r++) {
        const qt_real *xr = x + r * xs, *dyr = dy + r * ys;
        qt_real rs = rstd[r];
        for (int64_t i = 0; i < n; i++) dw[i] = dw[i] + dyr[i] * (xr[i] * rs);
    }
}

void QT_FN(qt_rmsnorm_wgrad_heads)(qt_real *dw, const qt_real *dy, const qt_real *x,
                                   const qt_real *rstd, int64_t T, int64_t H, int64_t h0,
                                   int64_t h1, int64_t n, int64_t xs, int64_t ys)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = h0; h < h1; h++) {
            const int64_t r = t * H + h;
            const qt_real *xr = x + r * xs, *dyr = dy + r * ys;
            qt_real rs = rstd[r];
            for (int64_t i = 0; i < n; i++) dw[i] = dw[i] + dyr[i] * (xr[i] * rs);
        }
}
