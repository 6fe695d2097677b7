/* qt_real.h - one kernel source, two precisions.
 *
 * Kernels in firmware/kernels/ are written once against `qt_real` and the QT_* math
 * macros. The firmware compiles them as float (the training path, the project's own
 * math functions, no libm). The unit tests compile the same sources a second time with
 * -DQT_REAL_DOUBLE, which renames every public kernel with QT_FN(name) -> name_f64 and
 * maps the math to libm in double, so the backward passes can be checked against finite
 * differences in double and against the float64 PyTorch reference at ~1e-12.
 */
#ifndef QT_REAL_H
#define QT_REAL_H

#ifdef QT_REAL_DOUBLE
#include <math.h>
typedef double qt_real;
#define QT_FN(name) name##_f64
#define QT_EXP(x) exp(x)
#define QT_LOG(x) log(x)
#define QT_SQRT(x) sqrt(x)
#define QT_SIGMOID(x) (1.0 / (1.0 + exp(-(x))))
#define QT_SOFTPLUS(x) ((x) > 20.0 ? (x) : log1p(exp(x)))
#define QT_SILU(x) ((x) / (1.0 + exp(-(x))))
#define QT_R(x) (x)
#else
#include "../math/qt_math.h"
typedef float qt_real;
#define QT_FN(name) name
/* The inline forms (qt_math_inline.h) give the same bits as the out-of-line API and let
 * gcc vectorise the kernels' elementwise loops. */
#define QT_EXP(x) qt_expf_inline(x)
#define QT_LOG(x) qt_logf_inline(x)
#define QT_SQRT(x) qt_sqrtf(x)
#define QT_SIGMOID(x) qt_sigmoidf_inline(x)
#define QT_SOFTPLUS(x) qt_softplusf_inline(x)
#define QT_SILU(x) qt_siluf_inline(x)
#define QT_R(x) (x##f)
#endif

#endif
