/* bf16_rows.h - one-pass bf16 forms of the row kernels (rmsnorm.h, moe_combine.h,
 * elementwise.h, gated_rmsnorm.h, rope.h, xent.h): bf16 rows widened in registers, the fp32
 * kernel's arithmetic in its order, each written element rounded once on store (qt_bf16_from_f32).
 *
 * Contract: for every element, the result is bit-identical to "widen every bf16 input
 * (exact), run the fp32 kernel, round every written bf16 output" (the boundary,
 * docs/precision.md "Executing bf16 plans"); the fp32 kernels stay the reference and the
 * unit group Bf16NativeRows checks each form against the boundary at 0 ulp. Tensors named
 * qt_bf16 are bf16 rows, float ones fp32 (a norm's widened weight, the saved rstd, an fp32
 * weight-gradient leaf). Shapes, strides and what is read/written/accumulated are those of
 * the fp32 kernel of the same name. Float build only (empty under -DQT_REAL_DOUBLE).
 */
#ifndef QT_BF16_ROWS_H
#define QT_BF16_ROWS_H

#include <stdint.h>
#include "bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* qt_rmsnorm_fwd: writes y (R rows of n, ys apart) and rstd[R]; reads x (xs apart), w[n]. */
void qt_b16_rmsnorm_fwd(qt_bf16 *y, float *rstd, const qt_bf16 *x, const float *w, int64_t R,
                        int64_t n, int64_t xs, int64_t ys, int flags, float eps);
/* qt_rmsnorm_bwd: accumulates into dx (R rows of n, xs apart); reads dy (ys apart), x, w, rstd. */
void qt_b16_rmsnorm_bwd(qt_bf16 *dx, const qt_bf16 *dy, const qt_bf16 *x, const float *w,
                        const float *rstd, int64_t R, int64_t n, int64_t xs, int64_t ys,
                        int flags);
/* qt_rmsnorm_wgrad_heads (H = 1, h0 = 0, h1 = 1: qt_rmsnorm_wgrad): accumulates into the
 * fp32 dw[n], rows in increasing (t, h). */
void qt_b16_rmsnorm_wgrad_heads(float *dw, const qt_bf16 *dy, const qt_bf16 *x,
                                const float *rstd, int64_t T, int64_t H, int64_t h0, int64_t h1,
                                int64_t n, int64_t xs, int64_t ys);
/* Widest value head (Dv) of the one-pass gated norm (its backward keeps four heads' silu
 * and dot terms on the stack); wider heads take the blocks (ops_bf16_rows.c). */
#define QT_B16_GRN_DV 256
/* qt_gated_rmsnorm_fwd (gated_rmsnorm.h): writes y[T, hv*dv] and the fp32 rstd[T*hv]; reads
 * o, the z columns of qkvz (rows hk*(2dk + 2(hv/hk)dv) wide), w[dv]; dv <= QT_B16_GRN_DV. */
void qt_b16_gated_rmsnorm_fwd(qt_bf16 *y, float *rstd, const qt_bf16 *o, const qt_bf16 *qkvz,
                              const float *w, int64_t T, int64_t hk, int64_t dk, int64_t hv,
                              int64_t dv, float eps);
/* qt_gated_rmsnorm_bwd: accumulates into d_o and the z columns of dqkvz (others untouched);
 * reads rstd (fp32), dy, o, qkvz, w; dv <= QT_B16_GRN_DV. */
void qt_b16_gated_rmsnorm_bwd(qt_bf16 *d_o, qt_bf16 *dqkvz, const float *rstd,
                              const qt_bf16 *dy, const qt_bf16 *o, const qt_bf16 *qkvz,
                              const float *w, int64_t T, int64_t hk, int64_t dk, int64_t hv,
                              int64_t dv);
/* qt_gated_rmsnorm_wgrad_heads: accumulates into the fp32 dw[dv] over S tokens (pointers at
 * the sequence's first row), value heads [j0, j1), in increasing (t, j). */
void qt_b16_gated_rmsnorm_wgrad_heads(float *dw, const float *rstd, const qt_bf16 *dy,
                                      const qt_bf16 *o, const qt_bf16 *qkvz, int64_t S,
                                      int64_t hk, int64_t dk, int64_t hv, int64_t dv,
                                      int64_t j0, int64_t j1);
/* qt_moe_combine_kept_fwd: writes out[T][d]; reads p[T][k], y[T][k][d], kidx (or NULL). */
void qt_b16_moe_combine_fwd(qt_bf16 *out, const qt_bf16 *p, const qt_bf16 *y,
                            const int32_t *kidx, int64_t T, int64_t k, int64_t d);
/* qt_moe_combine_kept_bwd: accumulates into dp[T][k], dy[T][k][d]; reads dout, p, y, kidx. */
void qt_b16_moe_combine_bwd(qt_bf16 *dp, qt_bf16 *dy, const qt_bf16 *dout, const qt_bf16 *p,
                            const qt_bf16 *y, const int32_t *kidx, int64_t T, int64_t k,
                            int64_t d);
/* qt_swiglu_fwd: writes h[n]; reads a[n], u[n]. */
void qt_b16_swiglu_fwd(qt_bf16 *h, const qt_bf16 *a, const qt_bf16 *u, int64_t n);
/* qt_swiglu_bwd: accumulates into da[n], du[n]; reads dh, a, u. */
void qt_b16_swiglu_bwd(qt_bf16 *da, qt_bf16 *du, const qt_bf16 *dh, const qt_bf16 *a,
                       const qt_bf16 *u, int64_t n);
/* qt_sigmoid_gate_fwd: writes y[T][n]; reads x, gate (layout by mode, elementwise.h). */
void qt_b16_sigmoid_gate_fwd(qt_bf16 *y, const qt_bf16 *x, const qt_bf16 *gate, int64_t T,
                             int64_t n, int mode, int64_t hd);
/* qt_sigmoid_gate_bwd: accumulates into dx, dgate; reads dy, x, gate. */
void qt_b16_sigmoid_gate_bwd(qt_bf16 *dx, qt_bf16 *dgate, const qt_bf16 *dy, const qt_bf16 *x,
                             const qt_bf16 *gate, int64_t T, int64_t n, int mode, int64_t hd);
/* qt_rope_fwd_pos (bwd 0: y written from x) or qt_rope_bwd_pos (bwd 1: y = dx accumulated
 * from x = dy) on T bf16 rows of H heads of hd <= QT_B16_ROPE_HD (rope.h): row t rotates by
 * table row pos[t], or t without positions (the caller offsets the table); each head's hd
 * results computed on the widened row, then rounded. */
#define QT_B16_ROPE_HD 512
void qt_b16_rope(qt_bf16 *y, const qt_bf16 *x, const float *table, const int32_t *pos,
                 int64_t T, int64_t H, int64_t hd, int64_t R, int bwd);
/* One row of qt_xent_chain (z = 0) or qt_xent_z_chain (xent.h) on V bf16 logits l: the
 * row's loss (and z term) added onto *acc (and *zacc), dlogits rounded on store, each value
 * first multiplied by sc when sc0 (XENT_MTP's MTP runs: the fp32 wrapper's later product).
 * g: V floats (the exponentials). The max in sixteen lanes, the exponentials in eight
 * (qt_expf_v8), their sum one serial chain in increasing v, the stores sixteen lanes: the
 * fp32 kernel's values on the widened row. Returns -1, nothing written, when the row holds
 * an inf or a NaN (the caller runs the row through the fp32 kernel), else 0. */
int qt_b16_xent_row(float *acc, float *zacc, qt_bf16 *dl, const qt_bf16 *l, int32_t tg,
                    int64_t V, float z, int sc0, float sc, float *g);

#ifdef __cplusplus
}
#endif

#endif
