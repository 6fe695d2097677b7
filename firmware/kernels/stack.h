/* stack.h - parts stacked per block (QT_OP_STACK, STACK_BWD, SPLIT, SPLIT_BWD in qt_ops.def;
 * the multi-token-prediction head, docs/model.md 1.8). A stacked tensor y [nb, n, rows, w]
 * holds, for each of nb blocks, n parts of rows x w elements one after another; part j is
 * a tensor x_j [nb, rows, w]. Copies move values bit for bit; the accumulating forms add
 * each element once. A NULL part is skipped. Both precisions declared (*_f64: the
 * -DQT_REAL_DOUBLE build).
 */
#ifndef QT_KERNEL_STACK_H
#define QT_KERNEL_STACK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most parts of a stack (qt_ops.def: slots x0..x7). */
#define QT_STACK_MAX_PARTS 8

/* y[b][j][r][:] = x[j][b][r][:] (writes y; x[j] may be NULL: that part is left as is). */
void qt_stack(float *y, const float *const *x, int64_t nb, int64_t rows, int64_t w, int64_t n);
/* x[j][b][r][:] = y[b][j][r][:] (writes each non-NULL x[j]). */
void qt_split(float *const *x, const float *y, int64_t nb, int64_t rows, int64_t w, int64_t n);
/* x[j][b][r][:] += y[b][j][r][:] (accumulates into each non-NULL x[j]: STACK_BWD). */
void qt_split_acc(float *const *x, const float *y, int64_t nb, int64_t rows, int64_t w,
                  int64_t n);
/* y[b][j][r][:] += x[j][b][r][:] (accumulates into y for each non-NULL x[j]: SPLIT_BWD). */
void qt_stack_acc(float *y, const float *const *x, int64_t nb, int64_t rows, int64_t w,
                  int64_t n);

void qt_stack_f64(double *y, const double *const *x, int64_t nb, int64_t rows, int64_t w,
                  int64_t n);
void qt_split_f64(double *const *x, const double *y, int64_t nb, int64_t rows, int64_t w,
                  int64_t n);
void qt_split_acc_f64(double *const *x, const double *y, int64_t nb, int64_t rows, int64_t w,
                      int64_t n);
void qt_stack_acc_f64(double *y, const double *const *x, int64_t nb, int64_t rows, int64_t w,
                      int64_t n);

#ifdef __cplusplus
}
#endif

#endif
