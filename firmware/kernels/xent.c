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

/* Rows [0, R) (t increasing) onto the running loss sum *acc: qt_xent's row loop. */
void QT_FN(qt_xent_chain)(qt_real *acc, qt_real *dlogits, const qt_real *logits,
                          const int32_t *targets, int64_t R, int64_t V)
{
    qt_real a = *acc;
    for (int64_t t = 0; t < R; t++) {
        const qt_real *l = logits + t * V;
        qt_real *g = dlogits + t * V;
        qt_real sum;
        qt_real lse = qt_xent_row_exp(g, &sum, l, V);
        qt_real inv = QT_R(1.0) / sum;
        for (int64_t v = 0; v < V; v++) g[v] = g[v] * inv;
        int64_t tg = targets[t];
        if (tg >= 0 && tg < V) {
            g[tg] = g[tg] - QT_R(1.0);
            a = a + (lse - l[tg]);
        } else { /* no target (a packed document's last token): no loss, no gradient */
            for (int64_t v = 0; v < V; v++) g[v] = QT_R(0.0);
        }
    }
    *acc = a;
}

void QT_FN(qt_xent)(qt_real *loss_seq, qt_real *dlogits, const qt_real *logits,
                    const int32_t *targets, int64_t b, int64_t S, int64_t V)
{
    for (int64_t s = 0; s < b; s++) {
        qt_real acc = 0;
        QT_FN(qt_xent_chain)(&acc, dlogits + s * S * V, logits + s * S * V, targets + s * S, S,
                             V);
        loss_seq[s] = acc;
    }
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
