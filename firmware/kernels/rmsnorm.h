/* rmsnorm.h - row RMS normalisation with optional zero-centred (1 + w) scale
 * (QT_OP_RMSNORM_* in qt_ops.h). Rows are strided (xs, ys) so the same kernels serve the
 * decoder norms (stride d) and the per-head q/k norms (stride hd inside a wider row).
 * Both precisions are declared; *_f64 comes from the -DQT_REAL_DOUBLE build.
 */
#ifndef QT_KERNEL_RMSNORM_H
#define QT_KERNEL_RMSNORM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rows r in [0,R): x_r = x + r*xs, y_r = y + r*ys (n values each).
 * Writes y_r[i] = (x_r[i]*rstd_r) * s[i] (s = 1 + w if flags & QT_RMSNORM_ZERO_CENTRED,
 * else w) and rstd[r] = 1/sqrt(sum_i x_r[i]^2 / n + eps), sum in increasing i. */
void qt_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t R,
                    int64_t n, int64_t xs, int64_t ys, int flags, float eps);
/* dx_r[i] += rstd*(dy_i s_i) - x_i * (rstd^3 * sum_j dy_j s_j x_j / n); dx stride xs,
 * dy stride ys. Reads x, w, rstd (saved by fwd). Accumulates into dx. */
void qt_rmsnorm_bwd(float *dx, const float *dy, const float *x, const float *w,
                    const float *rstd, int64_t R, int64_t n, int64_t xs, int64_t ys, int flags);
/* dw[i] += dy_r[i] * (x_r[i]*rstd_r) for rows r increasing (same for both flag values,
 * d(1+w)/dw = 1). Accumulates into dw[n]. */
void qt_rmsnorm_wgrad(float *dw, const float *dy, const float *x, const float *rstd, int64_t R,
                      int64_t n, int64_t xs, int64_t ys);
/* The same over the rows r = t*H + h of tokens t < T and heads h in [h0, h1) only, t then h
 * increasing (a canonical head group of a per-head norm, ops_basic.c). Accumulates dw[n]. */
void qt_rmsnorm_wgrad_heads(float *dw, const float *dy, const float *x, const float *rstd,
                            int64_t T, int64_t H, int64_t h0, int64_t h1, int64_t n, int64_t xs,
                            int64_t ys);
void qt_rmsnorm_wgrad_heads_f64(double *dw, const double *dy, const double *x,
                                const double *rstd, int64_t T, int64_t H, int64_t h0, int64_t h1,
                                int64_t n, int64_t xs, int64_t ys);

void qt_rmsnorm_fwd_f64(double *y, double *rstd, const double *x, const double *w, int64_t R,
                        int64_t n, int64_t xs, int64_t ys, int flags, double eps);
void qt_rmsnorm_bwd_f64(double *dx, const double *dy, const double *x, const double *w,
                        const double *rstd, int64_t R, int64_t n, int64_t xs, int64_t ys,
                        int flags);
void qt_rmsnorm_wgrad_f64(double *dw, const double *dy, const double *x, const double *rstd,
                          int64_t R, int64_t n, int64_t xs, int64_t ys);

#ifdef __cplusplus
}
#endif

#endif
