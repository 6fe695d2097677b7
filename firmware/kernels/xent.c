/* xent.c - fused, numerically stable cross-entropy forward + backward (see xent.h).
 * Invariants: the max is subtracted before exponentiating (no overflow for any finite
 * logits); the exponentials are computed once, parked in dlogits, and normalised in place;
 * all sums run in increasing index order. A target outside [0, V) (-1: masked, see io/data.c
 * qt_data_pack) adds no loss and leaves a zero gradient row. The blocked form
 * (canonical vocabulary blocks, vocab-parallel shards: xent.h) computes the same values
 * with the sum of exponentials chained per block and the blocks added by a pairwise tree;
 * its phases take no communication (the op wrapper all-gathers between them). The z-loss
 * form (qt_xent_z, MaxText's z_loss_multiplier) is a separate function, so qt_xent's bits
 * do not depend on it; so is the blocked form's z finish (qt_xent_blk_finish_z, after the
 * same stats, merge and sums), so qt_xent_blk_finish's bits do not either.
 */
#include <string.h>
#include "xent.h"
#include "qt_real.h"

/* One row of V logits l: g[v] = exp(l[v] - m) with m the row's max, *sum their sum in
 * increasing v; returns lse = m + log(sum). Shared by qt_xent and qt_xent_z (same bits). */
static inline qt_real qt_xent_row_exp(qt_real *g, qt_real *sum, const qt_real *l, int64_t V)
{
    qt_real m = l[0];
    for (int64_t v = 1; v < V; v++) m = l[v] > m ? l[v] : m;
    qt_real s = 0;
    for (int64_t v = 0; v < V; v++) {
        qt_real e = QT_EXP(l[v] - m);
        g[v] = e;
        s = s + e;
    }
    *sum = s;
    return m + QT_LOG(s);
}

/* The rest of a row after its exponentials g (sum, lse): normalised in place, the one-hot
 * term subtracted; returns the running loss a with the row's loss added. */
static inline qt_real qt_xent_row_finish(qt_real a, qt_real *g, const qt_real *l, qt_real sum,
                                         qt_real lse, int64_t tg, int64_t V)
{
    qt_real inv = QT_R(1.0) / sum;
    for (int64_t v = 0; v < V; v++) g[v] = g[v] * inv;
    if (tg >= 0 && tg < V) {
        g[tg] = g[tg] - QT_R(1.0);
        a = a + (lse - l[tg]);
    } else { /* no target (a packed document's last token): no loss, no gradient */
        for (int64_t v = 0; v < V; v++) g[v] = QT_R(0.0);
    }
    return a;
}

#ifndef QT_REAL_DOUBLE
/* qt_xent_row_exp on four consecutive rows (l, g: row r at + r V) side by side: per row its
 * operations in its order - the max chain and the sum chain each in increasing v - the
 * exponentials eight at a time through qt_expf_v8 (QT_EXP's bits lane by lane for every
 * input but NaN, whose payload it keeps where QT_EXP may not: a row whose sum is NaN is
 * redone by the caller), the four rows' serial chains interleaved so their latencies overlap
 * (one row's max and sum chains alone are latency-bound: ~2 and ~3 cycles an element).
 * Writes sum[4], lse[4], g. */
static void qt_xent_rows4_exp(float *g, float *sum, float *lse, const float *l, int64_t V)
{
    const float *l0 = l, *l1 = l + V, *l2 = l + 2 * V, *l3 = l + 3 * V;
    float *g0 = g, *g1 = g + V, *g2 = g + 2 * V, *g3 = g + 3 * V;
    float m0 = l0[0], m1 = l1[0], m2 = l2[0], m3 = l3[0];
    for (int64_t v = 1; v < V; v++) {
        m0 = l0[v] > m0 ? l0[v] : m0;
        m1 = l1[v] > m1 ? l1[v] : m1;
        m2 = l2[v] > m2 ? l2[v] : m2;
        m3 = l3[v] > m3 ? l3[v] : m3;
    }
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t v = 0;
    for (; v + 8 <= V; v += 8) {
        qt_mi_f8 x0, x1, x2, x3;
        memcpy(&x0, l0 + v, sizeof x0);
        memcpy(&x1, l1 + v, sizeof x1);
        memcpy(&x2, l2 + v, sizeof x2);
        memcpy(&x3, l3 + v, sizeof x3);
        x0 = qt_expf_v8(x0 - m0);
        x1 = qt_expf_v8(x1 - m1);
        x2 = qt_expf_v8(x2 - m2);
        x3 = qt_expf_v8(x3 - m3);
        memcpy(g0 + v, &x0, sizeof x0);
        memcpy(g1 + v, &x1, sizeof x1);
        memcpy(g2 + v, &x2, sizeof x2);
        memcpy(g3 + v, &x3, sizeof x3);
        for (int u = 0; u < 8; u++) {
            s0 = s0 + x0[u];
            s1 = s1 + x1[u];
            s2 = s2 + x2[u];
            s3 = s3 + x3[u];
        }
    }
    for (; v < V; v++) {
        const float e0 = QT_EXP(l0[v] - m0), e1 = QT_EXP(l1[v] - m1);
        const float e2 = QT_EXP(l2[v] - m2), e3 = QT_EXP(l3[v] - m3);
        g0[v] = e0, g1[v] = e1, g2[v] = e2, g3[v] = e3;
        s0 = s0 + e0, s1 = s1 + e1, s2 = s2 + e2, s3 = s3 + e3;
    }
    sum[0] = s0, sum[1] = s1, sum[2] = s2, sum[3] = s3;
    lse[0] = m0 + QT_LOG(s0), lse[1] = m1 + QT_LOG(s1);
    lse[2] = m2 + QT_LOG(s2), lse[3] = m3 + QT_LOG(s3);
}
#endif

/* Rows [0, R) (t increasing) onto the running loss sum *acc: qt_xent's row loop; `ref`: row
 * by row through qt_xent_row_exp (qt_xent_ref), else (float build) four rows at a time
 * through qt_xent_rows4_exp, the rows' losses still added in increasing t. */
static void QT_FN(qt_xent_chain_on)(qt_real *acc, qt_real *dlogits, const qt_real *logits,
                                    const int32_t *targets, int64_t R, int64_t V, int ref)
{
    qt_real a = *acc;
    int64_t t = 0;
#ifndef QT_REAL_DOUBLE
    for (; !ref && t + 4 <= R; t += 4) {
        float sum[4], lse[4];
        qt_xent_rows4_exp(dlogits + t * V, sum, lse, logits + t * V, V);
        for (int r = 0; r < 4; r++) {
            float *g = dlogits + (t + r) * V;
            const float *l = logits + (t + r) * V;
            /* a NaN reached the row's sum (a NaN logit, or inf - inf): again through the
             * scalar loop, whose exponential keeps another NaN payload than the lanes' */
            if (sum[r] != sum[r]) lse[r] = qt_xent_row_exp(g, &sum[r], l, V);
            a = qt_xent_row_finish(a, g, l, sum[r], lse[r], targets[t + r], V);
        }
    }
#else
    (void)ref;
#endif
    for (; t < R; t++) {
        const qt_real *l = logits + t * V;
        qt_real *g = dlogits + t * V;
        qt_real sum;
        qt_real lse = qt_xent_row_exp(g, &sum, l, V);
        a = qt_xent_row_finish(a, g, l, sum, lse, targets[t], V);
    }
    *acc = a;
}

void QT_FN(qt_xent_chain)(qt_real *acc, qt_real *dlogits, const qt_real *logits,
                          const int32_t *targets, int64_t R, int64_t V)
{
    QT_FN(qt_xent_chain_on)(acc, dlogits, logits, targets, R, V, 0);
}

/* qt_xent's sequence loop; `ref` picks the scalar reference rows (qt_xent_chain_on). */
static void QT_FN(qt_xent_seqs)(qt_real *loss_seq, qt_real *dlogits, const qt_real *logits,
                                const int32_t *targets, int64_t b, int64_t S, int64_t V,
                                int ref)
{
    for (int64_t s = 0; s < b; s++) {
        qt_real acc = 0;
        QT_FN(qt_xent_chain_on)(&acc, dlogits + s * S * V, logits + s * S * V, targets + s * S,
                                S, V, ref);
        loss_seq[s] = acc;
    }
}

void QT_FN(qt_xent)(qt_real *loss_seq, qt_real *dlogits, const qt_real *logits,
                    const int32_t *targets, int64_t b, int64_t S, int64_t V)
{
    QT_FN(qt_xent_seqs)(loss_seq, dlogits, logits, targets, b, S, V, 0);
}

void QT_FN(qt_xent_ref)(qt_real *loss_seq, qt_real *dlogits, const qt_real *logits,
                        const int32_t *targets, int64_t b, int64_t S, int64_t V)
{
    QT_FN(qt_xent_seqs)(loss_seq, dlogits, logits, targets, b, S, V, 1);
}

/* The z-loss form (z != 0; qt_xent's bits are untouched: the op calls it only then). Per
 * row the same m, exponentials, sum and lse as qt_xent; zt = z * lse * lse; loss_t = (lse -
 * l[target]) + zt; dlogits[t, v] = (exp(l_v - m) * (1/sum)) * (1 + 2 z lse) - [v ==
 * target]. A row without a target has no loss, no z term and a zero gradient row (MaxText
 * masks both). z_seq[s] = sum over the rows of sequence s (t increasing) of zt. */
/* Rows [0, R) onto the running sums *acc (loss) and *zacc (z terms): qt_xent_z's row loop. */
void QT_FN(qt_xent_z_chain)(qt_real *acc, qt_real *zacc, qt_real *dlogits,
                            const qt_real *logits, const int32_t *targets, int64_t R,
                            int64_t V, qt_real z)
{
    qt_real a = *acc, za = *zacc;
    for (int64_t t = 0; t < R; t++) {
        const qt_real *l = logits + t * V;
        qt_real *g = dlogits + t * V;
        qt_real sum;
        const qt_real lse = qt_xent_row_exp(g, &sum, l, V);
        const qt_real inv = QT_R(1.0) / sum;
        const qt_real c = QT_R(1.0) + QT_R(2.0) * z * lse;
        int64_t tg = targets[t];
        if (tg >= 0 && tg < V) {
            for (int64_t v = 0; v < V; v++) g[v] = (g[v] * inv) * c;
            g[tg] = g[tg] - QT_R(1.0);
            const qt_real zt = z * lse * lse;
            a = a + ((lse - l[tg]) + zt);
            za = za + zt;
        } else {
            for (int64_t v = 0; v < V; v++) g[v] = QT_R(0.0);
        }
    }
    *acc = a;
    *zacc = za;
}

void QT_FN(qt_xent_z)(qt_real *loss_seq, qt_real *z_seq, qt_real *dlogits,
                      const qt_real *logits, const int32_t *targets, int64_t b, int64_t S,
                      int64_t V, qt_real z)
{
    for (int64_t s = 0; s < b; s++) {
        qt_real acc = 0, zacc = 0;
        QT_FN(qt_xent_z_chain)(&acc, &zacc, dlogits + s * S * V, logits + s * S * V,
                               targets + s * S, S, V, z);
        loss_seq[s] = acc;
        z_seq[s] = zacc;
    }
}

/* ---- the blocked form (canonical vocabulary blocks, xent.h) ---- */

void QT_FN(qt_xent_blk_stats)(qt_real *stat, const qt_real *logits, const int32_t *targets,
                              int64_t R, int64_t V, int64_t v0)
{
    for (int64_t r = 0; r < R; r++) {
        const qt_real *l = logits + r * V;
        qt_real m = l[0];
        for (int64_t v = 1; v < V; v++) m = l[v] > m ? l[v] : m;
        const int64_t tg = targets[r];
        stat[2 * r] = m;
        stat[2 * r + 1] = tg >= v0 && tg < v0 + V ? l[tg - v0] : QT_R(0.0);
    }
}

void QT_FN(qt_xent_blk_merge)(qt_real *stat, const int32_t *targets, int64_t R, int64_t V,
                              int64_t P)
{
    for (int64_t r = 0; r < R; r++) {
        /* shards in increasing vocabulary order: the first of equal maxima, as one chain */
        qt_real m = stat[2 * r];
        for (int64_t j = 1; j < P; j++) {
            const qt_real x = stat[j * 2 * R + 2 * r];
            m = x > m ? x : m;
        }
        const int64_t tg = targets[r];
        const int64_t own = tg >= 0 && tg < V * P ? tg / V : 0;
        stat[2 * r + 1] = stat[own * 2 * R + 2 * r + 1];
        stat[2 * r] = m;
    }
}

void QT_FN(qt_xent_blk_sums)(qt_real *sums, qt_real *dlogits, const qt_real *logits,
                             const qt_real *stat, int64_t R, int64_t V, int64_t nb)
{
    const int64_t B = V / nb;
    for (int64_t r = 0; r < R; r++) {
        const qt_real *l = logits + r * V;
        qt_real *g = dlogits + r * V;
        const qt_real m = stat[2 * r];
        for (int64_t i = 0; i < nb; i++) {
            qt_real sum = 0;
            for (int64_t v = i * B; v < (i + 1) * B; v++) {
                qt_real e = QT_EXP(l[v] - m);
                g[v] = e;
                sum = sum + e;
            }
            sums[r * nb + i] = sum;
        }
    }
}

/* The pairwise tree over n partials in place ((p0+p1)+(p2+p3))+...: the total in p[0]. For
 * n not a power of two (3 x 2^j blocks with canonical_factor 3) it is the binary counter
 * (qt_tree.h's shape, config/canon.c): the last incomplete group is carried up and added
 * once its left neighbour is complete, e.g. 6: ((p0+p1)+(p2+p3))+(p4+p5), 3: (p0+p1)+p2. */
static qt_real QT_FN(qt_xent_tree)(qt_real *p, int64_t n)
{
    for (int64_t s = 1; s < n; s *= 2)
        for (int64_t j = 0; j + s < n; j += 2 * s) p[j] = p[j] + p[j + s];
    return p[0];
}

/* Row t's sum of exponentials (*sum, the pairwise tree over its nb x P canonical blocks,
 * global block j * nb + i being block i of shard j, gathered into tmp) and its lse (the
 * merged max stat[2t] + log(sum)). Shared by both finishes (same bits). */
static qt_real QT_FN(qt_xent_blk_lse)(qt_real *sum, qt_real *tmp, const qt_real *stat,
                                      const qt_real *sums, int64_t t, int64_t R, int64_t nb,
                                      int64_t P)
{
    for (int64_t j = 0; j < P; j++)
        for (int64_t i = 0; i < nb; i++) tmp[j * nb + i] = sums[j * R * nb + t * nb + i];
    *sum = QT_FN(qt_xent_tree)(tmp, nb * P);
    return stat[2 * t] + QT_LOG(*sum);
}

/* Rows [t0, t0 + nr) of the finish (global row indices into stat, sums and targets; dlogits
 * at row t0) onto the running loss sum *acc: qt_xent_blk_finish's row loop, so a sequence's
 * rows can be fed in consecutive blocks with the bits of one call. */
void QT_FN(qt_xent_blk_finish_chain)(qt_real *acc, qt_real *dlogits, const qt_real *stat,
                                     const qt_real *sums, const int32_t *targets, int64_t t0,
                                     int64_t nr, int64_t R, int64_t V, int64_t nb, int64_t P,
                                     int64_t v0, qt_real *tmp)
{
    const int64_t Vg = V * P;
    qt_real a = *acc;
    for (int64_t tt = 0; tt < nr; tt++) {
        const int64_t t = t0 + tt;
        qt_real *g = dlogits + tt * V;
        qt_real sum;
        const qt_real lse = QT_FN(qt_xent_blk_lse)(&sum, tmp, stat, sums, t, R, nb, P);
        const qt_real inv = QT_R(1.0) / sum;
        for (int64_t v = 0; v < V; v++) g[v] = g[v] * inv;
        const int64_t tg = targets[t];
        if (tg >= 0 && tg < Vg) {
            if (tg >= v0 && tg < v0 + V) g[tg - v0] = g[tg - v0] - QT_R(1.0);
            a = a + (lse - stat[2 * t + 1]);
        } else { /* no target: no loss, no gradient (as qt_xent) */
            for (int64_t v = 0; v < V; v++) g[v] = QT_R(0.0);
        }
    }
    *acc = a;
}

void QT_FN(qt_xent_blk_finish)(qt_real *loss_seq, qt_real *dlogits, const qt_real *stat,
                               const qt_real *sums, const int32_t *targets, int64_t b,
                               int64_t S, int64_t V, int64_t nb, int64_t P, int64_t v0,
                               qt_real *tmp)
{
    const int64_t R = b * S;
    for (int64_t s = 0; s < b; s++) {
        qt_real acc = 0;
        QT_FN(qt_xent_blk_finish_chain)(&acc, dlogits + s * S * V, stat, sums, targets, s * S, S,
                                        R, V, nb, P, v0, tmp);
        loss_seq[s] = acc;
    }
}

/* The z-loss finish (z != 0; qt_xent_blk_finish's bits are untouched: the op calls this
 * only then). Per row the same tree sum, lse and 1/sum as qt_xent_blk_finish; with a
 * target, zt = z * lse * lse, dlogits = (e * (1/sum)) * (1 + 2 z lse), the owner subtracts
 * 1, loss_t = (lse - l[target]) + zt, as qt_xent_z per row; z_seq[s] = the sum of zt over
 * the rows of sequence s (t increasing). Every rank computes the same loss_seq and z_seq.
 * The chain form: rows [t0, t0 + nr) onto *acc and *zacc (as qt_xent_blk_finish_chain). */
void QT_FN(qt_xent_blk_finish_z_chain)(qt_real *acc, qt_real *zacc, qt_real *dlogits,
                                       const qt_real *stat, const qt_real *sums,
                                       const int32_t *targets, int64_t t0, int64_t nr,
                                       int64_t R, int64_t V, int64_t nb, int64_t P, int64_t v0,
                                       qt_real *tmp, qt_real z)
{
    const int64_t Vg = V * P;
    qt_real a = *acc, za = *zacc;
    for (int64_t tt = 0; tt < nr; tt++) {
        const int64_t t = t0 + tt;
        qt_real *g = dlogits + tt * V;
        qt_real sum;
        const qt_real lse = QT_FN(qt_xent_blk_lse)(&sum, tmp, stat, sums, t, R, nb, P);
        const qt_real inv = QT_R(1.0) / sum;
        const qt_real c = QT_R(1.0) + QT_R(2.0) * z * lse;
        const int64_t tg = targets[t];
        if (tg >= 0 && tg < Vg) {
            for (int64_t v = 0; v < V; v++) g[v] = (g[v] * inv) * c;
            if (tg >= v0 && tg < v0 + V) g[tg - v0] = g[tg - v0] - QT_R(1.0);
            const qt_real zt = z * lse * lse;
            a = a + ((lse - stat[2 * t + 1]) + zt);
            za = za + zt;
        } else {
            for (int64_t v = 0; v < V; v++) g[v] = QT_R(0.0);
        }
    }
    *acc = a;
    *zacc = za;
}

void QT_FN(qt_xent_blk_finish_z)(qt_real *loss_seq, qt_real *z_seq, qt_real *dlogits,
                                 const qt_real *stat, const qt_real *sums,
                                 const int32_t *targets, int64_t b, int64_t S, int64_t V,
                                 int64_t nb, int64_t P, int64_t v0, qt_real *tmp, qt_real z)
{
    const int64_t R = b * S;
    for (int64_t s = 0; s < b; s++) {
        qt_real acc = 0, zacc = 0;
        QT_FN(qt_xent_blk_finish_z_chain)(&acc, &zacc, dlogits + s * S * V, stat, sums, targets,
                                          s * S, S, R, V, nb, P, v0, tmp, z);
        loss_seq[s] = acc;
        z_seq[s] = zacc;
    }
}

void QT_FN(qt_xent_blocked)(qt_real *loss_seq, qt_real *dlogits, const qt_real *logits,
                            const int32_t *targets, int64_t b, int64_t S, int64_t V, int64_t nb,
                            qt_real *scratch)
{
    const int64_t R = b * S;
    qt_real *stat = scratch, *sums = stat + 2 * R, *tmp = sums + R * nb;
    QT_FN(qt_xent_blk_stats)(stat, logits, targets, R, V, 0);
    QT_FN(qt_xent_blk_merge)(stat, targets, R, V, 1);
    QT_FN(qt_xent_blk_sums)(sums, dlogits, logits, stat, R, V, nb);
    QT_FN(qt_xent_blk_finish)(loss_seq, dlogits, stat, sums, targets, b, S, V, nb, 1, 0, tmp);
}

void QT_FN(qt_xent_blocked_z)(qt_real *loss_seq, qt_real *z_seq, qt_real *dlogits,
                              const qt_real *logits, const int32_t *targets, int64_t b,
                              int64_t S, int64_t V, int64_t nb, qt_real *scratch, qt_real z)
{
    const int64_t R = b * S;
    qt_real *stat = scratch, *sums = stat + 2 * R, *tmp = sums + R * nb;
    QT_FN(qt_xent_blk_stats)(stat, logits, targets, R, V, 0);
    QT_FN(qt_xent_blk_merge)(stat, targets, R, V, 1);
    QT_FN(qt_xent_blk_sums)(sums, dlogits, logits, stat, R, V, nb);
    QT_FN(qt_xent_blk_finish_z)(loss_seq, z_seq, dlogits, stat, sums, targets, b, S, V, nb, 1, 0,
                                tmp, z);
}
