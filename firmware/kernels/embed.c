/* embed.c - embedding gather / scatter-add (see embed.h).
 * Invariant: the gradient adds rows in increasing t, so repeated tokens within a sequence
 * always sum in the same order.
 */
#include "embed.h"
#include "qt_real.h"

void QT_FN(qt_embed_fwd)(qt_real *x, const int32_t *tok, const qt_real *w, int64_t T,
                         int64_t d, int64_t V)
{
    for (int64_t t = 0; t < T; t++) {
        int64_t id = tok[t];
        qt_real *xt = x + t * d;
        if (id < 0 || id >= V) {
            for (int64_t i = 0; i < d; i++) xt[i] = 0;
            continue;
        }
        const qt_real *wr = w + id * d;
        for (int64_t i = 0; i < d; i++) xt[i] = wr[i];
    }
}

void QT_FN(qt_embed_wgrad)(qt_real *dw, const qt_real *dx, const int32_t *tok, int64_t T,
                           int64_t d, int64_t V)
{
    for (int64_t t = 0; t < T; t++) {
        int64_t id = tok[t];
        if (id < 0 || id >= V) continue;
        qt_real *wr = dw + id * d;
        const qt_real *g = dx + t * d;
        for (int64_t i = 0; i < d; i++) wr[i] = wr[i] + g[i];
    }
}
