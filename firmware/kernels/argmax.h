/* argmax.h - the first index of a row's maximum, as jnp.argmax computes it (the MTP head's
 * acceptance rate in the held-out eval, qt_ops.def MTP_ACCEPT): a NaN counts as the maximum
 * (the first NaN wins), equal values keep the lower index (-0 and +0 are equal), and the
 * (value, index) winners of a row's vocabulary shards merge into the whole row's.
 *
 * Invariants: comparisons only, no arithmetic: the result is exact and the same for any
 * split of the row into shards merged in any order. Float build only (empty under
 * -DQT_REAL_DOUBLE).
 */
#ifndef QT_KERNEL_ARGMAX_H
#define QT_KERNEL_ARGMAX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The I32 scratch of MTP_ACCEPT for R rows a part (b*S), a vocabulary group of P ranks,
 * a context group of C ranks and a halo of nq sequences x kk = min(k, St) predictions:
 * the (value bits, index) pairs of both parts' rows per vocabulary rank, the merged
 * predictions of both parts, the context group's halos. */
#define QT_MTP_ACCEPT_SCRATCH(R, P, C, nq, kk) (4 * (P) * (R) + 2 * (R) + (C) * (nq) * (kk))

/* The first index of the maximum of x[0 .. n) (n >= 1); a NaN is the maximum, the first
 * NaN's index is returned. */
int64_t qt_argmax_f32(const float *x, int64_t n);
/* The same over n bf16 values (the high halves of binary32: compared as those floats). */
int64_t qt_argmax_b16(const uint16_t *x, int64_t n);
/* 1 when (w, j) precedes (v, i) as argmax's winner: w is NaN and v is not, or both NaN and
 * j < i, or neither NaN and w > v, or w == v and j < i. */
int qt_argmax_beats(float w, int64_t j, float v, int64_t i);

#ifdef __cplusplus
}
#endif

#endif
