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
 * Any expert count: the per-expert counters and accumulators live on the stack in blocks of
 * QT_MOE_EXPERT_BLOCK experts; past one block the kernels take the experts block by block
 * (rescanning rows and recomputing the same softmax values) so every sum keeps the unblocked
 * order (e increasing, one accumulator) and the bits do not depend on the block size.
 */
#include "moe_route.h"
#include "qt_real.h"

/* Stack blocks: experts per block (up to this many, one block: each row's softmax cached),
 * and the tokens whose max, sum and dot product the many-expert backward keeps. */
#define QT_MOE_EXPERT_BLOCK 1024
#define QT_MOE_TOKEN_BLOCK 256

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

/* The routed (t, slot) count of experts e0..e0+n-1 over `rows` entries of idx (ids outside
 * the block are not counted). */
static void qt_route_block_counts(int32_t *cnt, const int32_t *idx, int64_t rows, int64_t e0,
                                  int64_t n)
{
    for (int64_t j = 0; j < n; j++) cnt[j] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t j = (int64_t)idx[r] - e0;
        if (j >= 0 && j < n) cnt[j]++;
    }
}

/* ps[j] (j < n) accumulates, over `rows` rows of logits, softmax over all E logits of the row
 * at expert e0 + j, rows increasing. */
static void qt_route_pbar_rows(qt_real *ps, const qt_real *logits, int64_t rows, int64_t E,
                               int64_t e0, int64_t n)
{
    for (int64_t t = 0; t < rows; t++) {
        const qt_real *row = logits + t * E;
        qt_real m, z;
        qt_route_lse(&m, &z, row, E);
        for (int64_t j = 0; j < n; j++) ps[j] += QT_EXP(row[e0 + j] - m) / z;
    }
}

void QT_FN(qt_moe_lb_pbar)(qt_real *pbar, const qt_real *logits, int64_t T, int64_t E,
                           int64_t S)
{
    for (int64_t s = 0; s < T / S; s++)
        qt_route_pbar_rows(pbar + s * E, logits + s * S * E, S, E, 0, E);
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

/* g[j] = c f_e / Sw for the experts e = e0 + j (j < n) of one sequence: f_e from the
 * sequence's counts row cnt[E] when given, else counted from its `rows` entries of idx. */
static void qt_route_block_g(qt_real *g, const int32_t *cnt, const int32_t *idx, int64_t rows,
                             int64_t e0, int64_t n, qt_real c, qt_real inv_s)
{
    int32_t own[QT_MOE_EXPERT_BLOCK];
    if (!cnt) qt_route_block_counts(own, idx, rows, e0, n);
    const int32_t *f = cnt ? cnt + e0 : own;
    for (int64_t j = 0; j < n; j++) g[j] = (c * ((qt_real)f[j] * inv_s)) * inv_s;
}

/* The load-balance gradient of one sequence's S rows (qt_moe_lb_bwd, g_e from cnt or idx as
 * qt_route_block_g). Up to QT_MOE_EXPERT_BLOCK experts: g once, each row's P cached. More:
 * tokens in blocks of QT_MOE_TOKEN_BLOCK (their max, sum and running dot product kept), the
 * experts in blocks twice (the dot product over all e first, then the adds), g and P
 * recomputed by the same expressions: the same values, sums in the same order. */
static void qt_route_lb_bwd_seq(qt_real *dl, const qt_real *logits, const int32_t *cnt,
                                const int32_t *idx, int64_t rows, int64_t S, int64_t E,
                                qt_real c, qt_real inv_s)
{
    qt_real g[QT_MOE_EXPERT_BLOCK];
    if (E <= QT_MOE_EXPERT_BLOCK) {
        qt_real prow[QT_MOE_EXPERT_BLOCK];
        qt_route_block_g(g, cnt, idx, rows, 0, E, c, inv_s);
        for (int64_t t = 0; t < S; t++) {
            const qt_real *row = logits + t * E;
            qt_real m, z, a = 0;
            qt_route_lse(&m, &z, row, E);
            for (int64_t e = 0; e < E; e++) {
                prow[e] = QT_EXP(row[e] - m) / z;
                a += prow[e] * g[e];
            }
            for (int64_t e = 0; e < E; e++) dl[t * E + e] += prow[e] * (g[e] - a);
        }
        return;
    }
    qt_real mt[QT_MOE_TOKEN_BLOCK], zt[QT_MOE_TOKEN_BLOCK], at[QT_MOE_TOKEN_BLOCK];
    qt_real pb[QT_MOE_EXPERT_BLOCK];
    for (int64_t t0 = 0; t0 < S; t0 += QT_MOE_TOKEN_BLOCK) {
        const int64_t nt = S - t0 < QT_MOE_TOKEN_BLOCK ? S - t0 : QT_MOE_TOKEN_BLOCK;
        for (int64_t i = 0; i < nt; i++) {
            qt_route_lse(&mt[i], &zt[i], logits + (t0 + i) * E, E);
            at[i] = 0;
        }
        for (int pass = 0; pass < 2; pass++)
            for (int64_t e0 = 0; e0 < E; e0 += QT_MOE_EXPERT_BLOCK) {
                const int64_t n = E - e0 < QT_MOE_EXPERT_BLOCK ? E - e0 : QT_MOE_EXPERT_BLOCK;
                qt_route_block_g(g, cnt, idx, rows, e0, n, c, inv_s);
                for (int64_t i = 0; i < nt; i++) {
                    const qt_real *row = logits + (t0 + i) * E + e0;
                    for (int64_t j = 0; j < n; j++) pb[j] = QT_EXP(row[j] - mt[i]) / zt[i];
                    if (pass == 0) {
                        qt_real a = at[i];
                        for (int64_t j = 0; j < n; j++) a += pb[j] * g[j];
                        at[i] = a;
                    } else {
                        qt_real *d = dl + (t0 + i) * E + e0;
                        const qt_real a = at[i];
                        for (int64_t j = 0; j < n; j++) d[j] += pb[j] * (g[j] - a);
                    }
                }
            }
    }
}

void QT_FN(qt_moe_lb_bwd)(qt_real *dlogits, const qt_real *logits, const int32_t *cnt, int64_t T,
                          int64_t E, int64_t S, int64_t Sw, qt_real c)
{
    /* d(c sum_e f_e Pbar_e)/dP_te = c f_e / Sw, the same for every token of the sequence. */
    const qt_real inv_s = QT_R(1.0) / (qt_real)Sw;
    for (int64_t s = 0; s < T / S; s++)
        qt_route_lb_bwd_seq(dlogits + s * S * E, logits + s * S * E, cnt + s * E, 0, 0, S, E, c,
                            inv_s);
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
    /* per sequence, the experts in blocks: counts and Pbar of a block, then its share of the
     * sum over e (one accumulator, e increasing: qt_moe_lb_term's order); each block rescans
     * the sequence's rows for their max and sum (the same values every time). */
    int32_t count[QT_MOE_EXPERT_BLOCK];
    qt_real pbar[QT_MOE_EXPERT_BLOCK];
    const qt_real inv_s = QT_R(1.0) / (qt_real)S;
    for (int64_t s = 0; s < T / S; s++) {
        qt_real acc = 0;
        for (int64_t e0 = 0; e0 < E; e0 += QT_MOE_EXPERT_BLOCK) {
            const int64_t n = E - e0 < QT_MOE_EXPERT_BLOCK ? E - e0 : QT_MOE_EXPERT_BLOCK;
            qt_route_block_counts(count, idx + s * S * k, S * k, e0, n);
            for (int64_t j = 0; j < n; j++) pbar[j] = 0;
            qt_route_pbar_rows(pbar, logits + s * S * E, S, E, e0, n);
            for (int64_t j = 0; j < n; j++)
                acc += ((qt_real)count[j] * inv_s) * (pbar[j] * inv_s);
        }
        lb_seq[s] += c * acc;
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
    const qt_real inv_s = QT_R(1.0) / (qt_real)S;
    for (int64_t s = 0; s < T / S; s++)
        qt_route_lb_bwd_seq(dlogits + s * S * E, logits + s * S * E, 0, idx + s * S * k, S * k,
                            S, E, c, inv_s);
}

void QT_FN(qt_moe_capacity)(int32_t *kidx, int32_t *drops, const int32_t *idx, int64_t T,
                            int64_t E, int64_t k, int64_t S, int64_t C)
{
    QT_FN(qt_moe_capacity_from)(kidx, drops, idx, 0, T, E, k, S, C);
}

/* Each expert's queue is its own: the experts in blocks, each block rescanning the sequence's
 * assignments for its own experts (ids outside [0, E) are dropped by the first block). */
void QT_FN(qt_moe_capacity_from)(int32_t *kidx, int32_t *drops, const int32_t *idx,
                                 const int32_t *base, int64_t T, int64_t E, int64_t k,
                                 int64_t S, int64_t C)
{
    int64_t count[QT_MOE_EXPERT_BLOCK];
    for (int64_t s = 0; s < T / S; s++) {
        int32_t dropped = 0;
        for (int64_t e0 = 0; e0 < E; e0 += QT_MOE_EXPERT_BLOCK) {
            const int64_t n = E - e0 < QT_MOE_EXPERT_BLOCK ? E - e0 : QT_MOE_EXPERT_BLOCK;
            for (int64_t j = 0; j < n; j++) count[j] = base ? base[s * E + e0 + j] : 0;
            for (int64_t r = s * S * k; r < (s + 1) * S * k; r++) {
                const int32_t e = idx[r];
                if (e0 == 0 && (e < 0 || e >= E)) {
                    kidx[r] = -1;
                    dropped++;
                } else if (e >= e0 && e - e0 < n) {
                    const int keep = ++count[e - e0] <= C;
                    kidx[r] = keep ? e : -1;
                    dropped += !keep;
                }
            }
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
    const int ok = El >= 1 && E % El == 0;
    /* rows of no expert of [0, E) (or a layout that is not whole hosts): dropped, counted
     * here once */
    for (int64_t s = 0; s < T / S; s++) {
        int32_t dropped = 0;
        for (int64_t r = s * S * k; r < (s + 1) * S * k; r++)
            if (!ok || idx[r] < 0 || idx[r] >= E) kidx[r] = -1, dropped++;
        if (drops) drops[s] += dropped;
    }
    if (!ok) return;
    /* the experts in stack blocks, block after block: a row's place depends only on the rows
     * of its own expert before it, so the blocks change no decision (integers only) */
    int64_t pos[QT_MOE_EXPERT_BLOCK]; /* the 0-based place in host e / El's buffer of this
                                         member's next row of expert e0 + i */
    for (int64_t e0 = 0; e0 < E; e0 += QT_MOE_EXPERT_BLOCK) {
        const int64_t n = E - e0 < QT_MOE_EXPERT_BLOCK ? E - e0 : QT_MOE_EXPERT_BLOCK;
        for (int64_t e = e0; e < e0 + n; e++) {
            const int64_t h0 = e / El * El;
            int64_t p = 0;
            for (int64_t i = 0; i < me; i++)
                for (int64_t f = h0; f < h0 + El; f++) p += cnt[i * E + f];
            for (int64_t f = h0; f < e; f++) p += cnt[me * E + f];
            pos[e - e0] = p;
        }
        for (int64_t s = 0; s < T / S; s++) {
            int32_t dropped = 0;
            for (int64_t r = s * S * k; r < (s + 1) * S * k; r++) {
                const int32_t e = idx[r];
                if (e < e0 || e >= e0 + n) continue;
                const int keep = pos[e - e0]++ < B;
                kidx[r] = keep ? e : -1;
                dropped += !keep;
            }
            if (drops) drops[s] += dropped;
        }
    }
}
