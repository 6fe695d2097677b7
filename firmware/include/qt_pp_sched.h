/* qt_pp_sched.h - Megatron's interleaved 1F1B schedule (forward_backward_pipelining_with_
 * interleaving; docs/pipeline.md "Schedules"), shared by configgen (plan.txt's table, the
 * planning bound's in-flight count) and the firmware driver (runtime/pipeline.c), so both
 * read the one order.
 *
 * A stage holds R chunks (its repeats); a group of M microbatches is M R (microbatch, chunk)
 * pairs, walked as "virtual microbatches" k = 0 .. M R - 1 in blocks of S R: inside a block,
 * S microbatches (j = block x S + k mod S) on chunk (k mod S R) div S, so forwards take the
 * chunks ascending and backwards (the same k) the chunks descending, R - 1 - that. Stage s
 * runs w warm-up forwards (M R when M = S: every forward first, Megatron's special case;
 * else min(2 (S - s - 1) + (R - 1) S, M R)), then M R - w pairs (forward k = w + i, backward
 * k = i), then the w remaining backwards.
 *
 * Invariants (tests/unit/test_pipeline.cpp): M a multiple of S (configgen's rule for every
 * pipeline); every (j, r) is forwarded once and then backwarded once on every stage; every
 * chunk's backwards come in increasing j (its parameters' one-rank leaf order); the forward
 * order, and the backward order, of the pairs is the same on every stage, so the boundary
 * messages pair in posting order, and no stage waits on a message not yet sent (the
 * simulation of the unit test, S 2..5, R 2..4, M S..3S). No state: pure functions.
 *
 * Input slots (qt_pp_intl_slots): a pair's received input is kept in a slot from its forward
 * to its backward; walking the order, each forward takes the lowest free slot and each
 * backward frees its pair's, so no two pairs in flight share a slot and the slots used are
 * exactly the order's peak (qt_pp_intl_inflight): a forward finds a free slot below the
 * pairs then in flight. configgen sizes the stage's tables with that count and the driver
 * walks the same function, so both hold the one assignment.
 */
#ifndef QT_PP_SCHED_H
#define QT_PP_SCHED_H

/* The most (microbatch, chunk) pairs of a group the driver's slot table holds. */
#define QT_PP_MAX_PAIRS 4096

/* The warm-up forwards of stage st (0 .. S - 1) of S with R chunks and M microbatches. */
static inline int qt_pp_intl_warmup(int S, int st, int M, int R)
{
    const int total = M * R, w = 2 * (S - st - 1) + (R - 1) * S;
    return M == S || w > total ? total : w;
}

/* Virtual microbatch k's microbatch *j and chunk *r (bwd: the backward's chunk). */
static inline void qt_pp_intl_pair(int S, int R, int k, int bwd, int *j, int *r)
{
    const int c = k % (S * R) / S;
    *r = bwd ? R - 1 - c : c;
    *j = k / (S * R) * S + k % S;
}

/* Action i (0 .. 2 M R - 1) of stage st: *j the microbatch, *r the chunk; 1 for a backward,
 * 0 for a forward. */
static inline int qt_pp_action_intl(int S, int st, int M, int R, int i, int *j, int *r)
{
    const int total = M * R, w = qt_pp_intl_warmup(S, st, M, R);
    int k, bwd;
    if (i < w) {
        k = i;
        bwd = 0;
    } else if (i < w + 2 * (total - w)) {
        bwd = (i - w) % 2;
        k = bwd ? (i - w) / 2 : w + (i - w) / 2;
    } else {
        bwd = 1;
        k = total - w + (i - w - 2 * (total - w));
    }
    qt_pp_intl_pair(S, R, k, bwd, j, r);
    return bwd;
}

/* The most (microbatch, chunk) pairs stage st holds between their forward and backward:
 * w + 1 after the first steady forward (w = M R: all of them). */
static inline int qt_pp_intl_inflight(int S, int st, int M, int R)
{
    const int w = qt_pp_intl_warmup(S, st, M, R);
    return w < M * R ? w + 1 : M * R;
}

/* The input slot of every action of stage st (slot[i], i = 0 .. 2 M R - 1: a forward's slot
 * taken, a backward's freed), with the caller's scratch held[M R] (pair r M + j's slot) and
 * used[M R] (1: a slot holds a pair in flight); returns the slots used, the order's peak. */
static inline int qt_pp_intl_slots(int S, int st, int M, int R, int *slot, int *held,
                                   int *used)
{
    const int total = M * R;
    int n = 0;
    for (int q = 0; q < total; q++) used[q] = 0;
    for (int i = 0; i < 2 * total; i++) {
        int j, r, x = 0;
        const int bwd = qt_pp_action_intl(S, st, M, R, i, &j, &r);
        if (bwd) {
            x = held[r * M + j];
            used[x] = 0;
        } else {
            while (used[x]) x++;
            used[x] = 1;
            held[r * M + j] = x;
            if (x + 1 > n) n = x + 1;
        }
        slot[i] = x;
    }
    return n;
}

#endif
