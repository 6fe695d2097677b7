/* xent.h - fused cross-entropy: per-sequence loss sums and dlogits in one pass over the
 * logits (QT_OP_XENT). Seed 1 on the un-normalised sum: the runtime divides by the global
 * token count later. Both precisions declared (*_f64: double build).
 */
#ifndef QT_KERNEL_XENT_H
#define QT_KERNEL_XENT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* For row t of logits[b*S, V]: m = max_v l, sum = sum_v exp(l_v - m) (v increasing),
 * lse = m + log(sum), loss_t = lse - l[target_t]; dlogits[t, v] = exp(l_v - m) * (1/sum)
 * - [v == target_t]. A target outside [0, V) (never produced by the data loader) contributes
 * no loss and no one-hot term. loss_seq[s] = sum of loss_t over the S rows of sequence s (t increasing,
 * from 0). Writes loss_seq[b] and dlogits[b*S, V] (may not alias logits). */
void qt_xent(float *loss_seq, float *dlogits, const float *logits, const int32_t *targets,
             int64_t b, int64_t S, int64_t V);

void qt_xent_f64(double *loss_seq, double *dlogits, const double *logits,
                 const int32_t *targets, int64_t b, int64_t S, int64_t V);

#ifdef __cplusplus
}
#endif

#endif
