/* rope.h - rotary position embedding (partial, rotate-half pairing) for attention heads.
 *
 * Layouts (qt_ops.h ROPE_*): x, y are [T, H, hd] rows with T = b*S, position of row t is
 * t % S, so positions restart with every sequence. table is [S, R/2, 2] holding
 * (cos, sin) of pos * theta^(-2i/R). Only the first R channels of a head rotate, pairs
 * (i, i + R/2); channels >= R pass through.
 * Every kernel exists as float (name) and double (name_f64, the -DQT_REAL_DOUBLE build).
 */
#ifndef QT_KERNELS_ROPE_H
#define QT_KERNELS_ROPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* table[S, R/2, 2] writes (cos, sin); angles and trig in double with the project's own
 * qt_exp/qt_log/qt_sin/qt_cos, rounded once to the storage type. R even, S >= 1. */
void qt_rope_table(float *table, int64_t S, int64_t R, double theta);
void qt_rope_table_f64(double *table, int64_t S, int64_t R, double theta);

/* y[T,H,hd] writes the rotation of x[T,H,hd]; reads table[S,R/2,2]. T = b*S. */
void qt_rope_fwd(float *y, const float *x, const float *table,
                 int64_t b, int64_t S, int64_t H, int64_t hd, int64_t R);
void qt_rope_fwd_f64(double *y, const double *x, const double *table,
                     int64_t b, int64_t S, int64_t H, int64_t hd, int64_t R);

/* dx[T,H,hd] accumulates (+=) the transpose rotation of dy[T,H,hd]. */
void qt_rope_bwd(float *dx, const float *dy, const float *table,
                 int64_t b, int64_t S, int64_t H, int64_t hd, int64_t R);
void qt_rope_bwd_f64(double *dx, const double *dy, const double *table,
                     int64_t b, int64_t S, int64_t H, int64_t hd, int64_t R);

/* The same with packed documents: row t rotates by position pos[t] (its position inside
 * its document, < S; pos NULL: t % S, exactly qt_rope_fwd / qt_rope_bwd). */
void qt_rope_fwd_pos(float *y, const float *x, const float *table, const int32_t *pos,
                     int64_t b, int64_t S, int64_t H, int64_t hd, int64_t R);
void qt_rope_fwd_pos_f64(double *y, const double *x, const double *table, const int32_t *pos,
                         int64_t b, int64_t S, int64_t H, int64_t hd, int64_t R);
void qt_rope_bwd_pos(float *dx, const float *dy, const float *table, const int32_t *pos,
                     int64_t b, int64_t S, int64_t H, int64_t hd, int64_t R);
void qt_rope_bwd_pos_f64(double *dx, const double *dy, const double *table,
                         const int32_t *pos, int64_t b, int64_t S, int64_t H, int64_t hd,
                         int64_t R);

#ifdef __cplusplus
}
#endif

#endif
