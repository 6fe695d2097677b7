/* gated_rmsnorm.h - the GDN output norm (QT_OP_GATED_RMSNORM_*): per (token t, value head j)
 *   rstd = 1/sqrt(mean_i o[i]^2 + eps),  y[i] = ((o[i]*rstd) * w[i]) * silu(z[j][i]),
 * with o, y [T, Hv*Dv] and z read from the z columns of the grouped qkvz rows
 * (h*G + 2*Dk + r*Dv + u*Dv + i for j = h*r + u, rows Hk*G wide, G = 2*Dk + 2*r*Dv).
 * Float (qt_gated_rmsnorm_*) and double (*_f64, unit tests) versions from one source.
 */
#ifndef QT_GATED_RMSNORM_H
#define QT_GATED_RMSNORM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* fwd: writes y[T,Hv*Dv] and rstd[T*Hv] (saved); reads o, qkvz (z columns), w[Dv].
 * bwd: accumulates d_o[T,Hv*Dv] += rstd*(dn - n*mean(n.dn)) with n = o*rstd,
 *   dn = (dy*w)*silu(z), and dqkvz z columns += (dy*(n*w))*silu'(z); reads rstd, dy, o,
 *   qkvz, w. Other qkvz columns are not touched.
 * wgrad: rows of one sequence (pointers at its first row, S tokens): accumulates
 *   dw[i] += (dy*n)*silu(z) for t increasing, then j increasing; wgrad_heads only over
 *   value heads [j0, j1) (the canonical head groups of ops_gdn.c).
 * Sums over Dv run in increasing i. bwd_ref: the scalar reference of bwd (bit-identical,
 * tested). */
#define QT_GATED_RMSNORM_DECLARE(R, SFX)                                                  \
    void qt_gated_rmsnorm_fwd##SFX(R *y, R *rstd, const R *o, const R *qkvz, const R *w,   \
                                   int64_t T, int64_t hk, int64_t dk, int64_t hv,          \
                                   int64_t dv, R eps);                                     \
    void qt_gated_rmsnorm_bwd##SFX(R *d_o, R *dqkvz, const R *rstd, const R *dy,           \
                                   const R *o, const R *qkvz, const R *w, int64_t T,       \
                                   int64_t hk, int64_t dk, int64_t hv, int64_t dv);        \
    void qt_gated_rmsnorm_bwd_ref##SFX(R *d_o, R *dqkvz, const R *rstd, const R *dy,       \
                                       const R *o, const R *qkvz, const R *w, int64_t T,   \
                                       int64_t hk, int64_t dk, int64_t hv, int64_t dv);    \
    void qt_gated_rmsnorm_wgrad##SFX(R *dw, const R *rstd, const R *dy, const R *o,        \
                                     const R *qkvz, int64_t S, int64_t hk, int64_t dk,     \
                                     int64_t hv, int64_t dv);                              \
    void qt_gated_rmsnorm_wgrad_heads##SFX(R *dw, const R *rstd, const R *dy, const R *o,  \
                                           const R *qkvz, int64_t S, int64_t hk,           \
                                           int64_t dk, int64_t hv, int64_t dv, int64_t j0, \
                                           int64_t j1);

QT_GATED_RMSNORM_DECLARE(float, )
QT_GATED_RMSNORM_DECLARE(double, _f64)

#ifdef __cplusplus
}
#endif

#endif
