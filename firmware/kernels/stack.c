/* stack.c - parts stacked per block (stack.h; qt_ops.def STACK, STACK_BWD, SPLIT, SPLIT_BWD).
 * Invariants: every element of a part is read or written exactly once, in increasing
 * (block, part, row, column) order of the stacked tensor; the accumulating forms do one
 * add per element, so the results never depend on anything but the inputs.
 */
#include <string.h>
#include "qt_real.h"
#include "stack.h"

void QT_FN(qt_stack)(qt_real *y, const qt_real *const *x, int64_t nb, int64_t rows, int64_t w,
                     int64_t n)
{
    const int64_t part = rows * w;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < n; j++)
            if (x[j]) memcpy(y + (b * n + j) * part, x[j] + b * part, (size_t)part * sizeof *y);
}

void QT_FN(qt_split)(qt_real *const *x, const qt_real *y, int64_t nb, int64_t rows, int64_t w,
                     int64_t n)
{
    const int64_t part = rows * w;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < n; j++)
            if (x[j]) memcpy(x[j] + b * part, y + (b * n + j) * part, (size_t)part * sizeof *y);
}

void QT_FN(qt_split_acc)(qt_real *const *x, const qt_real *y, int64_t nb, int64_t rows,
                         int64_t w, int64_t n)
{
    const int64_t part = rows * w;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < n; j++) {
            if (!x[j]) continue;
            qt_real *d = x[j] + b * part;
            const qt_real *s = y + (b * n + j) * part;
            for (int64_t i = 0; i < part; i++) d[i] += s[i];
        }
}

void QT_FN(qt_stack_acc)(qt_real *y, const qt_real *const *x, int64_t nb, int64_t rows,
                         int64_t w, int64_t n)
{
    const int64_t part = rows * w;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < n; j++) {
            if (!x[j]) continue;
            qt_real *d = y + (b * n + j) * part;
            const qt_real *s = x[j] + b * part;
            for (int64_t i = 0; i < part; i++) d[i] += s[i];
        }
}
