/* moe_route.c - top-k routing with softmax over the selected logits, load-balance term.
 *
 * Invariants: selection is a strict total order (value descending, then index ascending),
 * found by k scans that each take the best element ranked after the previous pick, so no
 * marker array is needed and ties always go to the lower index. All sums run in a fixed
 * order: slots increasing, experts increasing, tokens increasing. The load-balance term
 * only ever reads the tokens of its own sequence. The capacity queue (qt_moe_capacity) counts
 * per sequence in (token, slot) order, integers only: its decisions never depend on floats.
 * A sequence split over context ranks continues the earlier ranks' counts (qt_moe_capacity_from's
 * base: their per-expert counts, an exclusive prefix), so every rank decides as one rank does.
 * The receive-buffer rule (qt_moe_ragged_keep) decides from the group's integer counts too:
 * a row's place in its host's buffer is the rows of earlier members, of lower experts of
 * the same member, and of earlier (t, slot) of the same expert before it.
 * The load-balance term is built from three pieces that the one-rank kernels call too
 * (qt_moe_lb_pbar, qt_moe_lb_term, qt_moe_lb_bwd), so a context rank that feeds them the
 * whole sequence's counts and the running Pbar sums of the earlier blocks (ops_moe.c) does
 * exactly one rank's operations in one rank's order.
 */
#include "moe_route.h"
#include "qt_real.h"

/* Non-finite logits make the ranking partial; the fallback keeps idx inside [0, E). */
static int32_t qt_route_pick(const qt_real *row, int64_t E, int64_t slot, int32_t prev)
{
    int32_t best = -1;
    for (int64_t e = 0; e < E; e++) {
        const int ranked_after = slot == 0 || row[e] < row[prev] ||
                                 (row[e] == row[prev] && e > prev);
        if (ranked_after && (best < 0 || row[e] > row[best])) best = (int32_t)e;
    }
    return best < 0 ? (prev < 0 ? 0 : prev) : best;
}

/* Full softmax of one row: *m the max, *z = sum_e exp(row[e] - m) with e increasing. */
static void qt_route_lse(qt_real *m, qt_real *z, const qt_real *row, int64_t E)
{
    qt_real mx = row[0], sum = 0;
    for (int64_t e = 1; e < E; e++) mx = row[e] > mx ? row[e] : mx;
    for (int64_t e = 0; e < E; e++) sum += QT_EXP(row[e] - mx);
    *m = mx;
    *z = sum;
}

void QT_FN(qt_moe_lb_pbar)(qt_real *pbar, const qt_real *logits, int64_t T, int64_t E,
                           int64_t S)
{
    for (int64_t s = 0; s < T / S; s++) {
        qt_real *ps = pbar + s * E;
        for (int64_t t = s * S; t < (s + 1) * S; t++) {
            const qt_real *row = logits + t * E;
            qt_real m, z;
            qt_route_lse(&m, &z, row, E);
            for (int64_t e = 0; e < E; e++) ps[e] += QT_EXP(row[e] - m) / z;
        }
    }
}

void QT_FN(qt_moe_lb_term)(qt_real *lb_seq, const int32_t *cnt, const qt_real *pbar, int64_t b,
                           int64_t E, int64_t Sw, qt_real c)
{
    const qt_real inv_s = QT_R(1.0) / (qt_real)Sw;
    for (int64_t s = 0; s < b; s++) {
        qt_real acc = 0;
        for (int64_t e = 0; e < E; e++)
            acc += ((qt_real)cnt[s * E + e] * inv_s) * (pbar[s * E + e] * inv_s);
        lb_seq[s] += c * acc;
    }
}

void QT_FN(qt_moe_lb_bwd)(qt_real *dlogits, const qt_real *logits, const int32_t *cnt, int64_t T,
                          int64_t E, int64_t S, int64_t Sw, qt_real c)
{
    if (E > QT_MOE_MAX_EXPERTS) {
        for (int64_t i = 0; i < T * E; i++) dlogits[i] = QT_LOG(QT_R(-1.0));
        return;
    }
    qt_real g[QT_MOE_MAX_EXPERTS], prow[QT_MOE_MAX_EXPERTS];
    const qt_real inv_s = QT_R(1.0) / (qt_real)Sw;
    for (int64_t s = 0; s < T / S; s++) {
        /* d(c sum_e f_e Pbar_e)/dP_te = c f_e / Sw, the same for every token of the sequence. */
        for (int64_t e = 0; e < E; e++)
            g[e] = (c * ((qt_real)cnt[s * E + e] * inv_s)) * inv_s;
        for (int64_t t = s * S; t < (s + 1) * S; t++) {
            const qt_real *row = logits + t * E;
            qt_real m, z, a = 0;
            qt_route_lse(&m, &z, row, E);
            for (int64_t e = 0; e < E; e++) {
                prow[e] = QT_EXP(row[e] - m) / z;
                a += prow[e] * g[e];
            }
            for (int64_t e = 0; e < E; e++) dlogits[t * E + e] += prow[e] * (g[e] - a);
        }
    }
}

void QT_FN(qt_moe_route_fwd)(int32_t *idx, qt_real *p, qt_real *lb_seq, const qt_real *logits,
                             int64_t T, int64_t E, int64_t k, int64_t S, qt_real c)
{
    for (int64_t t = 0; t < T; t++) {
        const qt_real *row = logits + t * E;
        int32_t *it = idx + t * k;
        qt_real *pt = p + t * k;
        int32_t prev = -1;
        for (int64_t s = 0; s < k; s++) it[s] = prev = qt_route_pick(row, E, s, prev);
        const qt_real m = row[it[0]];
        qt_real sum = 0;
        for (int64_t s = 0; s < k; s++) {
            pt[s] = QT_EXP(row[it[s]] - m);
            sum += pt[s];
        }
        for (int64_t s = 0; s < k; s++) pt[s] = pt[s] / sum;
    }
    if (c == 0 || !lb_seq) return;
    const int64_t b = T / S;
    if (E > QT_MOE_MAX_EXPERTS) {
        for (int64_t s = 0; s < b; s++) lb_seq[s] = QT_LOG(QT_R(-1.0));
        return;
    }
    int32_t count[QT_MOE_MAX_EXPERTS];
    qt_real pbar[QT_MOE_MAX_EXPERTS];
    for (int64_t s = 0; s < b; s++) {
        for (int64_t e = 0; e < E; e++) { count[e] = 0; pbar[e] = 0; }
        for (int64_t r = s * S * k; r < (s + 1) * S * k; r++) count[idx[r]]++;
        QT_FN(qt_moe_lb_pbar)(pbar, logits + s * S * E, S, E, S);
        QT_FN(qt_moe_lb_term)(lb_seq + s, count, pbar, 1, E, S, c);
    }
}

void QT_FN(qt_moe_route_bwd)(qt_real *dlogits, const qt_real *dp, const qt_real *logits,
                             const int32_t *idx, const qt_real *p, int64_t T, int64_t E,
                             int64_t k, int64_t S, qt_real c)
{
    for (int64_t t = 0; t < T; t++) {
        const qt_real *pt = p + t * k, *dpt = dp + t * k;
        qt_real a = 0;
        for (int64_t s = 0; s < k; s++) a += pt[s] * dpt[s];
        for (int64_t s = 0; s < k; s++) dlogits[t * E + idx[t * k + s]] += pt[s] * (dpt[s] - a);
    }
    if (c == 0) return;
    if (E > QT_MOE_MAX_EXPERTS) {
        for (int64_t i = 0; i < T * E; i++) dlogits[i] = QT_LOG(QT_R(-1.0));
        return;
    }
    int32_t count[QT_MOE_MAX_EXPERTS];
    for (int64_t s = 0; s < T / S; s++) {
        for (int64_t e = 0; e < E; e++) count[e] = 0;
        for (int64_t r = s * S * k; r < (s + 1) * S * k; r++) count[idx[r]]++;
        QT_FN(qt_moe_lb_bwd)(dlogits + s * S * E, logits + s * S * E, count, S, E, S, S, c);
    }
}

void QT_FN(qt_moe_capacity)(int32_t *kidx, int32_t *drops, const int32_t *idx, int64_t T,
                            int64_t E, int64_t k, int64_t S, int64_t C)
{
    QT_FN(qt_moe_capacity_from)(kidx, drops, idx, 0, T, E, k, S, C);
}

void QT_FN(qt_moe_capacity_from)(int32_t *kidx, int32_t *drops, const int32_t *idx,
                                 const int32_t *base, int64_t T, int64_t E, int64_t k,
                                 int64_t S, int64_t C)
{
    int64_t count[QT_MOE_MAX_EXPERTS];
    for (int64_t s = 0; s < T / S; s++) {
        int32_t dropped = 0;
        for (int64_t e = 0; e < E && e < QT_MOE_MAX_EXPERTS; e++)
            count[e] = base ? base[s * E + e] : 0;
        for (int64_t r = s * S * k; r < (s + 1) * S * k; r++) {
            const int32_t e = idx[r];
            const int keep = E <= QT_MOE_MAX_EXPERTS && e >= 0 && e < E && ++count[e] <= C;
            kidx[r] = keep ? e : -1;
            dropped += !keep;
        }
        if (drops) drops[s] += dropped;
    }
}

void QT_FN(qt_moe_capacity_counts)(int32_t *cnt, const int32_t *idx, int64_t T, int64_t E,
                                   int64_t k, int64_t S)
{
    for (int64_t i = 0; i < (T / S) * E; i++) cnt[i] = 0;
    for (int64_t r = 0; r < T * k; r++)
        if (idx[r] >= 0 && idx[r] < E) cnt[(r / (S * k)) * E + idx[r]]++;
}

void QT_FN(qt_moe_ragged_keep)(int32_t *kidx, int32_t *drops, const int32_t *idx,
                               const int32_t *cnt, int64_t T, int64_t E, int64_t k, int64_t S,
                               int64_t El, int64_t me, int64_t B)
{
    /* pos[e]: the 0-based place in host e / El's buffer of this member's next row of e */
    int64_t pos[QT_MOE_MAX_EXPERTS];
    const int ok = E <= QT_MOE_MAX_EXPERTS && El >= 1 && E % El == 0;
    for (int64_t e = 0; ok && e < E; e++) {
        const int64_t h0 = e / El * El;
        int64_t p = 0;
        for (int64_t i = 0; i < me; i++)
            for (int64_t f = h0; f < h0 + El; f++) p += cnt[i * E + f];
        for (int64_t f = h0; f < e; f++) p += cnt[me * E + f];
        pos[e] = p;
    }
    for (int64_t s = 0; s < T / S; s++) {
        int32_t dropped = 0;
        for (int64_t r = s * S * k; r < (s + 1) * S * k; r++) {
            const int32_t e = idx[r];
            const int keep = ok && e >= 0 && e < E && pos[e]++ < B;
            kidx[r] = keep ? e : -1;
            dropped += !keep;
        }
        if (drops) drops[s] += dropped;
    }
}
