/* ep_rounds.h - the rounds of the round-based expert dispatch (qt_ops.def MOE_ROUNDS_*;
 * docs/context.md "Expert dispatch in rounds").
 *
 * Pure index arithmetic on the expert group's exchanged counts, no communication. The
 * group has M members, each holding b token blocks (the WGRAD leaves). After the counts'
 * all-gather every member holds the table G[i*M*b + j*b + s] = rows of member i's block s
 * bound for member j (qt_moe_count's table of member i). On host j, leaf L = i*b + s
 * (member i's block s) owns G[i][j][s] rows; the whole dispatch (MOE_DISPATCH_FWD) lays a
 * host's rows out leaf after leaf, each leaf in (t, slot) order.
 *
 * A round is a run of whole leaves [L0, L1) chosen the same on every member (so every
 * member takes part in the same exchanges): the longest run from L0 whose rows fit R on
 * every host. Inside a round a host's rows keep the whole dispatch's order, so the rows a
 * host computes, their order and every leaf's rows are the whole dispatch's, cut between
 * leaves only. Invariants: rounds cover [0, M*b) in increasing order, each non-empty; a
 * leaf with more than R rows on some host has no round (the caller's error).
 */
#ifndef QT_PARALLEL_EP_ROUNDS_H
#define QT_PARALLEL_EP_ROUNDS_H

#include <stdint.h>

/* Floats of a MOE_ROUNDS_* op's home scratch (t9 of the FWD, t11 of the BWD, t10 of the
 * WGRAD): the count table (M*M*b int64), the packed send rows (T*k*d), their local expert
 * ids (T*k int32), the returned rows (T*k*d), ndy more packed rows (the backward's row
 * gradients: ndy = 1, else 0) and a host's local expert ids of one round (R int32). */
#define QT_EP_ROUNDS_HOME_FLOATS(T, k, d, M, b, R, ndy)                                      \
    (2 * (M) * (M) * (b) + (T) * (k) * (d) * (2 + (ndy)) + (T) * (k) + (R))

#ifdef __cplusplus
extern "C" {
#endif

/* Rows host j holds of leaf L (member L / b's block L % b). Reads G. */
int64_t qt_ep_leaf_rows(const int64_t *G, int64_t M, int64_t b, int64_t j, int64_t L);

/* The end of the round starting at leaf L0 (0 <= L0 < M*b): the largest L1 <= M*b such
 * that every host's rows of leaves [L0, L1) are at most R. Returns L1 > L0, or -1 when
 * leaf L0 alone holds more than R rows on some host (*host, *rows: the first such host and
 * its rows; either pointer may be NULL). Reads G. */
int64_t qt_ep_round_end(const int64_t *G, int64_t M, int64_t b, int64_t L0, int64_t R,
                        int64_t *host, int64_t *rows);

/* The exchange tables of round [L0, L1) on member `me`. Home side: scnt[j] rows of my
 * blocks in the round go to member j, from row soff[j] of my packed buffer, whose member-j
 * slice (all my rows for j, block after block) starts at row home_off[j]. Host side:
 * rcnt[i] rows arrive from member i, at row roff[i] of the round buffer (leaf order);
 * seg (NULL: not written) receives seg[L - L0] = the round-local first row of leaf L for
 * L0 <= L <= L1 (seg[L1 - L0] = the round's rows). Returns the rows I hold in the round.
 * Writes scnt, soff, rcnt, roff (M entries each) and seg. */
int64_t qt_ep_round_tables(const int64_t *G, int64_t M, int64_t b, int64_t me, int64_t L0,
                           int64_t L1, const int64_t *home_off, int64_t *scnt, int64_t *soff,
                           int64_t *rcnt, int64_t *roff, int64_t *seg);

#ifdef __cplusplus
}
#endif

#endif
