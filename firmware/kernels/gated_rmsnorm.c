/* gated_rmsnorm.c - RMSNorm over each value head's Dv outputs, times w, gated by silu(z)
 * (contract: gated_rmsnorm.h, qt_ops.h QT_OP_GATED_RMSNORM_*).
 *
 * Invariants: "norm before gate" as HF Qwen3NextRMSNormGated; w multiplies directly (no
 * 1+w); the backward recomputes n = o*rstd from the saved rstd with the forward's
 * expression, so n carries the forward's bits; fixed summation orders (see header). The
 * fast backward regroups the reference's loops (qt_gated_rmsnorm_bwd_ref), bit-identical.
 */
#include "qt_real.h"
#include "kernels/gated_rmsnorm.h"

static inline int64_t qt_grn_zcol(int64_t j, int64_t hk, int64_t dk, int64_t hv, int64_t dv)
{
    int64_t r = hv / hk;
    return (j / r) * (2 * dk + 2 * r * dv) + 2 * dk + r * dv + (j % r) * dv;
}

void QT_FN(qt_gated_rmsnorm_fwd)(qt_real *restrict y, qt_real *restrict rstd,
                                 const qt_real *restrict o, const qt_real *restrict qkvz,
                                 const qt_real *restrict w, int64_t T, int64_t hk,
                                 int64_t dk, int64_t hv, int64_t dv, qt_real eps)
{
    int64_t wq = hk * (2 * dk + 2 * (hv / hk) * dv);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t j = 0; j < hv; j++) {
            const qt_real *x = o + (t * hv + j) * dv;
            const qt_real *z = qkvz + t * wq + qt_grn_zcol(j, hk, dk, hv, dv);
            qt_real *yr = y + (t * hv + j) * dv;
            qt_real ss = QT_R(0.0);
            for (int64_t i = 0; i < dv; i++) ss += x[i] * x[i];
            qt_real rs = QT_R(1.0) / QT_SQRT(ss / (qt_real)dv + eps);
            rstd[t * hv + j] = rs;
            for (int64_t i = 0; i < dv; i++) yr[i] = ((x[i] * rs) * w[i]) * QT_SILU(z[i]);
        }
    }
}

void QT_FN(qt_gated_rmsnorm_bwd_ref)(qt_real *restrict d_o, qt_real *restrict dqkvz,
                                     const qt_real *restrict rstd, const qt_real *restrict dy,
                                     const qt_real *restrict o, const qt_real *restrict qkvz,
                                     const qt_real *restrict w, int64_t T, int64_t hk,
                                     int64_t dk, int64_t hv, int64_t dv)
{
    int64_t wq = hk * (2 * dk + 2 * (hv / hk) * dv);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t j = 0; j < hv; j++) {
            int64_t e0 = (t * hv + j) * dv, zc = t * wq + qt_grn_zcol(j, hk, dk, hv, dv);
            const qt_real *x = o + e0, *z = qkvz + zc, *dyr = dy + e0;
            qt_real rs = rstd[t * hv + j], dot = QT_R(0.0);
            for (int64_t i = 0; i < dv; i++) {
                qt_real n = x[i] * rs;
                qt_real sg = QT_SIGMOID(z[i]);
                qt_real sl = QT_SILU(z[i]);
                /* silu'(z) = s*(1 + z*(1-s)) */
                dqkvz[zc + i] += (dyr[i] * (n * w[i])) * (sg * (QT_R(1.0) + z[i] * (QT_R(1.0) - sg)));
                dot += n * ((dyr[i] * w[i]) * sl);
            }
            qt_real m = dot / (qt_real)dv;
            for (int64_t i = 0; i < dv; i++) {
                qt_real dn = (dyr[i] * w[i]) * QT_SILU(z[i]);
                d_o[e0 + i] += rs * (dn - (x[i] * rs) * m);
            }
        }
    }
}

/* The backward in two passes per group of QT_GRN_G heads (rows of T*Hv), the reference's
 * expressions: pass 1 per element (no reduction in the loop, so gcc vectorises it, SiLU and
 * sigmoid included) updates dz and keeps silu(z) and the dot's term n*((dy*w)*silu(z));
 * the group's dots are QT_GRN_G serial chains in increasing i side by side (each the
 * reference's chain); pass 2 writes d_o from the kept silu(z) (the reference recomputes
 * it: the same value). Dv > QT_GRN_DV runs the reference. */
#define QT_GRN_G 8
#define QT_GRN_DV 256

void QT_FN(qt_gated_rmsnorm_bwd)(qt_real *restrict d_o, qt_real *restrict dqkvz,
                                 const qt_real *restrict rstd, const qt_real *restrict dy,
                                 const qt_real *restrict o, const qt_real *restrict qkvz,
                                 const qt_real *restrict w, int64_t T, int64_t hk,
                                 int64_t dk, int64_t hv, int64_t dv)
{
    if (dv > QT_GRN_DV) {
        QT_FN(qt_gated_rmsnorm_bwd_ref)(d_o, dqkvz, rstd, dy, o, qkvz, w, T, hk, dk, hv, dv);
        return;
    }
    const int64_t wq = hk * (2 * dk + 2 * (hv / hk) * dv), R = T * hv;
    qt_real sl[QT_GRN_G][QT_GRN_DV], term[QT_GRN_G][QT_GRN_DV], dot[QT_GRN_G];
    for (int64_t r0 = 0; r0 < R; r0 += QT_GRN_G) {
        const int64_t g = R - r0 < QT_GRN_G ? R - r0 : QT_GRN_G;
        for (int64_t h = 0; h < g; h++) {
            const int64_t r = r0 + h, zc = (r / hv) * wq + qt_grn_zcol(r % hv, hk, dk, hv, dv);
            const qt_real *x = o + r * dv, *z = qkvz + zc, *dyr = dy + r * dv;
            qt_real *dz = dqkvz + zc, *slh = sl[h], *th = term[h];
            const qt_real rs = rstd[r];
            for (int64_t i = 0; i < dv; i++) {
                qt_real n = x[i] * rs;
                qt_real sg = QT_SIGMOID(z[i]);
                qt_real s = QT_SILU(z[i]);
                dz[i] += (dyr[i] * (n * w[i])) * (sg * (QT_R(1.0) + z[i] * (QT_R(1.0) - sg)));
                slh[i] = s;
                th[i] = n * ((dyr[i] * w[i]) * s);
            }
        }
        if (g == QT_GRN_G) {
            qt_real a[QT_GRN_G] = {0};
            for (int64_t i = 0; i < dv; i++)
                for (int64_t h = 0; h < QT_GRN_G; h++) a[h] += term[h][i];
            for (int64_t h = 0; h < QT_GRN_G; h++) dot[h] = a[h];
        } else {
            for (int64_t h = 0; h < g; h++) {
                qt_real a = QT_R(0.0);
                for (int64_t i = 0; i < dv; i++) a += term[h][i];
                dot[h] = a;
            }
        }
        for (int64_t h = 0; h < g; h++) {
            const int64_t r = r0 + h;
            const qt_real *x = o + r * dv, *dyr = dy + r * dv, *slh = sl[h];
            qt_real *dx = d_o + r * dv;
            const qt_real rs = rstd[r], m = dot[h] / (qt_real)dv;
            for (int64_t i = 0; i < dv; i++) {
                qt_real dn = (dyr[i] * w[i]) * slh[i];
                dx[i] += rs * (dn - (x[i] * rs) * m);
            }
        }
    }
}

void QT_FN(qt_gated_rmsnorm_wgrad)(qt_real *restrict dw, const qt_real *restrict rstd,
                                   const qt_real *restrict dy, const qt_real *restrict o,
                                   const qt_real *restrict qkvz, int64_t S, int64_t hk,
                                   int64_t dk, int64_t hv, int64_t dv)
{
    QT_FN(qt_gated_rmsnorm_wgrad_heads)(dw, rstd, dy, o, qkvz, S, hk, dk, hv, dv, 0, hv);
}

void QT_FN(qt_gated_rmsnorm_wgrad_heads)(qt_real *restrict dw, const qt_real *restrict rstd,
                                         const qt_real *restrict dy, const qt_real *restrict o,
                                         const qt_real *restrict qkvz, int64_t S, int64_t hk,
                                         int64_t dk, int64_t hv, int64_t dv, int64_t j0,
                                         int64_t j1)
{
    int64_t wq = hk * (2 * dk + 2 * (hv / hk) * dv);
    for (int64_t t = 0; t < S; t++) {
        for (int64_t j = j0; j < j1; j++) {
            int64_t e0 = (t * hv + j) * dv;
            const qt_real *z = qkvz + t * wq + qt_grn_zcol(j, hk, dk, hv, dv);
            qt_real rs = rstd[t * hv + j];
            for (int64_t i = 0; i < dv; i++)
                dw[i] += (dy[e0 + i] * (o[e0 + i] * rs)) * QT_SILU(z[i]);
        }
    }
}
