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
/* qt_xent's scalar reference: one row at a time, the exponentials in the row's one loop (the
 * float build of qt_xent takes four rows side by side, the exponentials eight at a time:
 * the same operations per row, the same bits; tested against this). */
void qt_xent_ref(float *loss_seq, float *dlogits, const float *logits, const int32_t *targets,
                 int64_t b, int64_t S, int64_t V);
void qt_xent_ref_f64(double *loss_seq, double *dlogits, const double *logits,
                     const int32_t *targets, int64_t b, int64_t S, int64_t V);

/* The row loops of qt_xent and qt_xent_z on R rows (t increasing), continuing the running
 * sums *acc (and *zacc: the z terms) instead of starting them at 0, so a sequence's rows can
 * be fed in consecutive blocks with the bits of one call (qt_xent is these from acc = 0 over
 * the sequence's S rows). Writes dlogits[R, V]; reads logits, targets[R]. */
void qt_xent_chain(float *acc, float *dlogits, const float *logits, const int32_t *targets,
                   int64_t R, int64_t V);
void qt_xent_chain_f64(double *acc, double *dlogits, const double *logits,
                       const int32_t *targets, int64_t R, int64_t V);
void qt_xent_z_chain(float *acc, float *zacc, float *dlogits, const float *logits,
                     const int32_t *targets, int64_t R, int64_t V, float z);
void qt_xent_z_chain_f64(double *acc, double *zacc, double *dlogits, const double *logits,
                         const int32_t *targets, int64_t R, int64_t V, double z);

/* MaxText's z-loss (z_loss_multiplier z != 0; issue 33), the plain form only: as qt_xent
 * with loss_t = lse - l[target] + z lse^2 and dlogits[t, v] = softmax_v (1 + 2 z lse) -
 * [v == target] (T5X's cross_entropy_with_logits); rows without a target add nothing.
 * Also writes z_seq[b]: the per-sequence sums of z lse^2 (the metrics' z_loss). */
void qt_xent_z(float *loss_seq, float *z_seq, float *dlogits, const float *logits,
               const int32_t *targets, int64_t b, int64_t S, int64_t V, float z);
void qt_xent_z_f64(double *loss_seq, double *z_seq, double *dlogits, const double *logits,
                   const int32_t *targets, int64_t b, int64_t S, int64_t V, double z);

/* The blocked form (canonical vocabulary blocks; qt_ops.def XENT with a3 = nb > 0). The
 * V columns of a row are nb equal blocks; the sum of exponentials is one chain per block
 * (v increasing, from 0) and the blocks' partials combine by the pairwise tree
 * ((p0+p1)+(p2+p3))+... over the global block order (the binary counter when nb*P is not a
 * power of two: 3 x 2^j blocks with canonical_factor 3), so nb = 1 is qt_xent's bits. A
 * vocab-parallel row is P shards of V columns (shard j = columns [j*V, (j+1)*V), nb blocks
 * each, global blocks j*nb .. j*nb+nb-1); the firmware runs the phases with an all-gather
 * over the tensor group after stats and after sums (ops_basic.c):
 *   stats:  stat[2r] = this shard's row max, stat[2r+1] = l[target - v0] when the target is
 *           in the shard, else 0 (R = b*S rows);
 *   merge:  P gathered stat blocks (2R floats each) -> block 0: the global max (exact in any
 *           order; the first of equal maxima in vocabulary order) and the owner's target logit;
 *   sums:   dlogits = exp(l - m) (as qt_xent), sums[r*nb + i] = block i's chain;
 *   finish: P gathered sums blocks (R*nb floats each): per row the tree over the nb*P global
 *           blocks, lse = m + log(sum), dlogits *= 1/sum, the target's owner subtracts 1,
 *           loss_seq[s] = sum over its S rows (t increasing) of lse - l[target]: every rank
 *           computes the same losses. tmp: nb*P floats.
 * qt_xent_blocked: one rank (P = 1), scratch QT_XENT_BLK_SCRATCH(R, nb, 1) floats. */
#define QT_XENT_BLK_SCRATCH(R, nb, P) ((P) * (R) * (2 + (nb)) + (nb) * (P))
void qt_xent_blk_stats(float *stat, const float *logits, const int32_t *targets, int64_t R,
                       int64_t V, int64_t v0);
void qt_xent_blk_merge(float *stat, const int32_t *targets, int64_t R, int64_t V, int64_t P);
void qt_xent_blk_sums(float *sums, float *dlogits, const float *logits, const float *stat,
                      int64_t R, int64_t V, int64_t nb);
void qt_xent_blk_finish(float *loss_seq, float *dlogits, const float *stat, const float *sums,
                        const int32_t *targets, int64_t b, int64_t S, int64_t V, int64_t nb,
                        int64_t P, int64_t v0, float *tmp);
/* The blocked z-loss (z != 0): the same phases, then qt_xent_blk_finish_z instead of
 * qt_xent_blk_finish: per row with a target, loss_t = (lse - l[target]) + z lse^2 and the
 * softmax times (1 + 2 z lse), as qt_xent_z; z_seq[b] the per-sequence sums of z lse^2.
 * Same values as qt_xent_z within rounding (the sum of exponentials is the blocked one);
 * P shards of nb blocks are one rank's nb*P blocks, bit for bit. */
void qt_xent_blk_finish_z(float *loss_seq, float *z_seq, float *dlogits, const float *stat,
                          const float *sums, const int32_t *targets, int64_t b, int64_t S,
                          int64_t V, int64_t nb, int64_t P, int64_t v0, float *tmp, float z);
/* The finishes' row loops on rows [t0, t0 + nr) of the R = b*S (global row indices into
 * stat, sums, targets; dlogits at row t0), continuing *acc (and *zacc) as qt_xent_chain does:
 * qt_xent_blk_finish(_z) is these from 0 over each sequence's S rows. */
void qt_xent_blk_finish_chain(float *acc, float *dlogits, const float *stat, const float *sums,
                              const int32_t *targets, int64_t t0, int64_t nr, int64_t R,
                              int64_t V, int64_t nb, int64_t P, int64_t v0, float *tmp);
void qt_xent_blk_finish_chain_f64(double *acc, double *dlogits, const double *stat,
                                  const double *sums, const int32_t *targets, int64_t t0,
                                  int64_t nr, int64_t R, int64_t V, int64_t nb, int64_t P,
                                  int64_t v0, double *tmp);
void qt_xent_blk_finish_z_chain(float *acc, float *zacc, float *dlogits, const float *stat,
                                const float *sums, const int32_t *targets, int64_t t0,
                                int64_t nr, int64_t R, int64_t V, int64_t nb, int64_t P,
                                int64_t v0, float *tmp, float z);
void qt_xent_blk_finish_z_chain_f64(double *acc, double *zacc, double *dlogits,
                                    const double *stat, const double *sums,
                                    const int32_t *targets, int64_t t0, int64_t nr, int64_t R,
                                    int64_t V, int64_t nb, int64_t P, int64_t v0, double *tmp,
                                    double z);
void qt_xent_blocked_z(float *loss_seq, float *z_seq, float *dlogits, const float *logits,
                       const int32_t *targets, int64_t b, int64_t S, int64_t V, int64_t nb,
                       float *scratch, float z);
void qt_xent_blocked_z_f64(double *loss_seq, double *z_seq, double *dlogits,
                           const double *logits, const int32_t *targets, int64_t b, int64_t S,
                           int64_t V, int64_t nb, double *scratch, double z);
void qt_xent_blocked(float *loss_seq, float *dlogits, const float *logits,
                     const int32_t *targets, int64_t b, int64_t S, int64_t V, int64_t nb,
                     float *scratch);
void qt_xent_blocked_f64(double *loss_seq, double *dlogits, const double *logits,
                         const int32_t *targets, int64_t b, int64_t S, int64_t V, int64_t nb,
                         double *scratch);

#ifdef __cplusplus
}
#endif

#endif
