/* qt_math.h - the project's own elementary functions (no libm in the numerics path).
 *
 * Results depend only on the input bits: plain C arithmetic compiled with
 * -ffp-contract=off, no table lookups that differ by libc, no FMA unless written as one.
 * Accuracy targets (measured in tests/unit/test_math.cpp over dense sweeps against libm in
 * double): expf, logf, sigmoid, silu, softplus <= 1 ulp (not correctly rounded).
 *
 * The float functions exist twice with identical bits: out of line here (the API) and as
 * static inline qt_*f_inline in qt_math_inline.h, for kernels whose inner loops should
 * inline or vectorise them. The out-of-line ones are defined as the inline ones.
 */
#ifndef QT_MATH_H
#define QT_MATH_H

#include "qt_math_inline.h"

float qt_expf(float x);          /* e^x; 0 below -103.97, +inf above 88.73 */
float qt_logf(float x);          /* natural log; -inf at 0, NaN below 0 */
float qt_sqrtf(float x);         /* correctly rounded (IEEE sqrt instruction) */
float qt_sigmoidf(float x);      /* 1/(1+e^-x), stable for both signs */
float qt_softplusf(float x);     /* log(1+e^x); x for x > 20 (as PyTorch) */
float qt_siluf(float x);         /* x * sigmoid(x) */
double qt_exp(double x);         /* double versions for tables and schedules */
double qt_log(double x);
double qt_sin(double x);
double qt_cos(double x);
double qt_sqrt(double x);

#endif
