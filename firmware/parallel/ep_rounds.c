/* ep_rounds.c - the rounds of the round-based expert dispatch (see ep_rounds.h).
 * Invariant: every loop visits leaves in increasing L and members in increasing index, the
 * order of the whole dispatch's packed buffers, so a round's tables are contiguous runs of
 * them.
 */
#include "ep_rounds.h"
#include "ep_pack.h"

int64_t qt_ep_leaf_rows(const int64_t *G, int64_t M, int64_t b, int64_t j, int64_t L)
{
    const int64_t i = L / b, s = L % b;
    return G[i * M * b + j * b + s];
}

int64_t qt_ep_round_end(const int64_t *G, int64_t M, int64_t b, int64_t L0, int64_t R,
                        int64_t *host, int64_t *rows)
{
    for (int64_t j = 0; j < M; j++) {
        const int64_t n = qt_ep_leaf_rows(G, M, b, j, L0);
        if (n > R) {
            if (host) *host = j;
            if (rows) *rows = n;
            return -1;
        }
    }
    /* the hosts' running rows of [L0, L1) (M <= QT_EP_MAX_MEMBERS: the callers check) */
    int64_t acc[QT_EP_MAX_MEMBERS];
    for (int64_t j = 0; j < M; j++) acc[j] = qt_ep_leaf_rows(G, M, b, j, L0);
    int64_t L1 = L0 + 1;
    for (; L1 < M * b; L1++) {
        int fits = 1;
        for (int64_t j = 0; j < M && fits; j++)
            fits = acc[j] + qt_ep_leaf_rows(G, M, b, j, L1) <= R;
        if (!fits) break;
        for (int64_t j = 0; j < M; j++) acc[j] += qt_ep_leaf_rows(G, M, b, j, L1);
    }
    return L1;
}

int64_t qt_ep_round_tables(const int64_t *G, int64_t M, int64_t b, int64_t me, int64_t L0,
                           int64_t L1, const int64_t *home_off, int64_t *scnt, int64_t *soff,
                           int64_t *rcnt, int64_t *roff, int64_t *seg)
{
    /* my blocks in the round: s in [s0, s1) */
    int64_t s0 = L0 - me * b, s1 = L1 - me * b;
    s0 = s0 < 0 ? 0 : s0 > b ? b : s0;
    s1 = s1 < 0 ? 0 : s1 > b ? b : s1;
    for (int64_t j = 0; j < M; j++) {
        const int64_t *row = G + me * M * b + j * b;
        int64_t before = 0, n = 0;
        for (int64_t s = 0; s < s0; s++) before += row[s];
        for (int64_t s = s0; s < s1; s++) n += row[s];
        scnt[j] = n;
        soff[j] = home_off[j] + before;
    }
    int64_t at = 0;
    for (int64_t i = 0; i < M; i++) {
        rcnt[i] = 0;
        roff[i] = at;
        for (int64_t s = 0; s < b; s++) {
            const int64_t L = i * b + s;
            if (L < L0 || L >= L1) continue;
            if (seg) seg[L - L0] = at;
            const int64_t n = G[i * M * b + me * b + s];
            rcnt[i] += n;
            at += n;
        }
    }
    if (seg) seg[L1 - L0] = at;
    return at;
}
