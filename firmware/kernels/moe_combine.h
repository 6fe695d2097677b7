/* moe_combine.h - weighted sum of the k expert outputs of each token, forward and backward.
 *
 * Layouts (qt_ops.h MOE_COMBINE_*): p[T,k], y[T*k,d] (row t*k+slot), out[T,d].
 * Every kernel exists as float (name) and double (name_f64).
 */
#ifndef QT_KERNELS_MOE_COMBINE_H
#define QT_KERNELS_MOE_COMBINE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out writes sum_slot p[t,slot] * y[t*k+slot] (slot increasing). Reads p, y. */
void qt_moe_combine_fwd(float *out, const float *p, const float *y, int64_t T, int64_t k,
                        int64_t d);
void qt_moe_combine_fwd_f64(double *out, const double *p, const double *y, int64_t T,
                            int64_t k, int64_t d);

/* dp[T,k] accumulates dout_t . y_{t,slot} (i increasing); dy[T*k,d] accumulates
 * p[t,slot] * dout_t. Reads dout, p, y. */
void qt_moe_combine_bwd(float *dp, float *dy, const float *dout, const float *p,
                        const float *y, int64_t T, int64_t k, int64_t d);
void qt_moe_combine_bwd_f64(double *dp, double *dy, const double *dout, const double *p,
                            const double *y, int64_t T, int64_t k, int64_t d);

/* The same over the kept slots (token dropping, qt_ops.def MOE_CAPACITY): a slot with
 * kidx[t,slot] < 0 is skipped (fwd: adds nothing, its y row is not read; bwd: dp and dy of
 * it untouched). kidx NULL: every slot, the plain kernels' bits. */
void qt_moe_combine_kept_fwd(float *out, const float *p, const float *y, const int32_t *kidx,
                             int64_t T, int64_t k, int64_t d);
void qt_moe_combine_kept_fwd_f64(double *out, const double *p, const double *y,
                                 const int32_t *kidx, int64_t T, int64_t k, int64_t d);
void qt_moe_combine_kept_bwd(float *dp, float *dy, const float *dout, const float *p,
                             const float *y, const int32_t *kidx, int64_t T, int64_t k,
                             int64_t d);
void qt_moe_combine_kept_bwd_f64(double *dp, double *dy, const double *dout, const double *p,
                                 const double *y, const int32_t *kidx, int64_t T, int64_t k,
                                 int64_t d);

#ifdef __cplusplus
}
#endif

#endif
