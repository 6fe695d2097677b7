/* elementwise.h - element-wise kernels: zero, add, accumulate, SwiGLU, the sigmoid output
 * gate and bf16 rounding (QT_OP_ZERO, ADD, ACC, SWIGLU_FWD/BWD, SIGMOID_GATE_FWD/BWD,
 * ROUND_BF16 in qt_ops.h). Both precisions declared
 * (*_f64: the -DQT_REAL_DOUBLE build). Backward kernels accumulate (+=).
 */
#ifndef QT_KERNEL_ELEMENTWISE_H
#define QT_KERNEL_ELEMENTWISE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[n] = 0 (writes). */
void qt_zero(float *y, int64_t n);
/* y[n] = 0 for int32 tensors (writes). */
void qt_zero_i32(int32_t *y, int64_t n);
/* y[n] = a + b (writes; y may alias a or b). */
void qt_add(float *y, const float *a, const float *b, int64_t n);
/* dst[n] = dst + src (accumulates). */
void qt_acc(float *dst, const float *src, int64_t n);
/* h[n] = silu(a) * u (writes). */
void qt_swiglu_fwd(float *h, const float *a, const float *u, int64_t n);
/* da += dh * u * silu'(a), silu'(a) = sig(a) (1 + a sig(-a)); du += dh * silu(a).
 * Accumulates into da[n], du[n]. */
void qt_swiglu_bwd(float *da, float *du, const float *dh, const float *a, const float *u,
                   int64_t n);
/* The scalar reference of qt_swiglu_bwd (bit-identical; the tests compare them). */
void qt_swiglu_bwd_ref(float *da, float *du, const float *dh, const float *a, const float *u,
                       int64_t n);
/* y[T,n] = x * sigmoid(gate) (writes). mode QT_GATE_HEADS: n = H*hd, the gate of
 * x[t][h*hd+i] is gate[t*2n + h*2hd + hd + i] (q_proj output); QT_GATE_ROW: gate[t]. */
void qt_sigmoid_gate_fwd(float *y, const float *x, const float *gate, int64_t T, int64_t n,
                         int mode, int64_t hd);
/* dx += dy * sig(g); dgate += dy * x * sig(g) sig(-g) at the gate's position (HEADS), or
 * dgate[t] += (sum_i dy_i x_i, i increasing) * sig(g_t) sig(-g_t) (ROW).
 * Accumulates into dx[T,n] and dgate (layout of the gate source). */
void qt_sigmoid_gate_bwd(float *dx, float *dgate, const float *dy, const float *x,
                         const float *gate, int64_t T, int64_t n, int mode, int64_t hd);
/* y[n] = x rounded to bfloat16, held as floats (QT_OP_ROUND_BF16: round to nearest, ties
 * to even; past the largest finite bf16 to +-inf; a NaN stays a quiet NaN of its sign; a
 * denormal x gives the zero of its sign: VCVTNEPS2BF16, bf16.h).
 * Reads x, writes y (y may be x). Float build only. */
void qt_round_bf16(float *y, const float *x, int64_t n);

void qt_zero_f64(double *y, int64_t n);
void qt_add_f64(double *y, const double *a, const double *b, int64_t n);
void qt_acc_f64(double *dst, const double *src, int64_t n);
void qt_swiglu_fwd_f64(double *h, const double *a, const double *u, int64_t n);
void qt_swiglu_bwd_f64(double *da, double *du, const double *dh, const double *a,
                       const double *u, int64_t n);
void qt_swiglu_bwd_ref_f64(double *da, double *du, const double *dh, const double *a,
                           const double *u, int64_t n);
void qt_sigmoid_gate_fwd_f64(double *y, const double *x, const double *gate, int64_t T,
                             int64_t n, int mode, int64_t hd);
void qt_sigmoid_gate_bwd_f64(double *dx, double *dgate, const double *dy, const double *x,
                             const double *gate, int64_t T, int64_t n, int mode, int64_t hd);

#ifdef __cplusplus
}
#endif

#endif
