/* embed.h - token embedding gather and its per-sequence scatter-add weight gradient
 * (QT_OP_EMBED_FWD / QT_OP_EMBED_WGRAD). Both precisions declared (*_f64: double build).
 * Token ids are validated by the data loader; an id outside [0, V) is treated as a zero
 * row (forward) and skipped (gradient) so a bad id can never write outside the table.
 */
#ifndef QT_KERNEL_EMBED_H
#define QT_KERNEL_EMBED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[t, :] = w[tok[t], :] for t in [0,T); w is [V, d]. Writes x[T, d]. */
void qt_embed_fwd(float *x, const int32_t *tok, const float *w, int64_t T, int64_t d,
                  int64_t V);
/* dw[tok[t], :] += dx[t, :] for t increasing over the T rows given (one sequence).
 * Accumulates into dw[V, d]. */
void qt_embed_wgrad(float *dw, const float *dx, const int32_t *tok, int64_t T, int64_t d,
                    int64_t V);

void qt_embed_fwd_f64(double *x, const int32_t *tok, const double *w, int64_t T, int64_t d,
                      int64_t V);
void qt_embed_wgrad_f64(double *dw, const double *dx, const int32_t *tok, int64_t T, int64_t d,
                        int64_t V);

#ifdef __cplusplus
}
#endif

#endif
