// test_pipeline.cpp - the pipeline driver's schedules (firmware/runtime/pipeline.c
// qt_pp_action) and the point-to-point registry row (qt_coll.def SEND_RECV). The schedules
// are docs/pipeline.md's tables (gpipe; 1f1b for S 2, M 4: stage 0 F0 F1 B0 F2 B1 F3 B2 B3,
// stage 1 F0 B0 F1 B1 ...); on every stage of S 2..6 and M S..3S, each microbatch is
// forwarded once, then backwarded once, the backwards come in increasing microbatch order
// (the one-rank gradient tree's leaf order, docs/pipeline.md "The bits"), and 1f1b holds at
// most min(S - s, M) microbatches in flight (Megatron's bound) where gpipe holds M (its last
// stage 1: F j B j as each input arrives).
#include <string.h>
#include <string>

#include "CppUTest/TestHarness.h"

extern "C" {
#include "qt_plan.h"
#include "runtime/qt_pipeline.h"
#include "qt_pp_sched.h"
}

TEST_GROUP(Pipeline){};

static std::string order(int schedule, int S, int st, int M)
{
    std::string o;
    for (int i = 0; i < 2 * M; i++) {
        int j = -1;
        const int b = qt_pp_action(schedule, S, st, M, i, &j);
        o += (i ? " " : "") + std::string(b ? "B" : "F") + std::to_string(j);
    }
    return o;
}

TEST(Pipeline, SchedulesAreTheDocsTables)
{
    STRCMP_EQUAL("F0 F1 F2 F3 B0 B1 B2 B3", order(0, 2, 0, 4).c_str());
    // gpipe's last stage computes each microbatch as it arrives (its forward runs at B)
    STRCMP_EQUAL("F0 B0 F1 B1 F2 B2 F3 B3", order(0, 2, 1, 4).c_str());
    STRCMP_EQUAL("F0 F1 B0 F2 B1 F3 B2 B3", order(1, 2, 0, 4).c_str());
    STRCMP_EQUAL("F0 B0 F1 B1 F2 B2 F3 B3", order(1, 2, 1, 4).c_str());
    // 4 stages, 4 microbatches: stage 0 warms up with 3 forwards
    STRCMP_EQUAL("F0 F1 F2 F3 B0 B1 B2 B3", order(1, 4, 0, 4).c_str());
    STRCMP_EQUAL("F0 F1 F2 B0 F3 B1 B2 B3", order(1, 4, 1, 4).c_str());
}

TEST(Pipeline, EveryMicrobatchOnceBackwardsInOrderInFlightBounded)
{
    for (int sch = 0; sch < 2; sch++)
        for (int S = 2; S <= 6; S++)
            for (int M = S; M <= 3 * S; M++)
                for (int st = 0; st < S; st++) {
                    int fwd[64] = {0}, bwd[64] = {0}, next_b = 0, live = 0, peak = 0;
                    for (int i = 0; i < 2 * M; i++) {
                        int j = -1;
                        const int b = qt_pp_action(sch, S, st, M, i, &j);
                        CHECK(j >= 0 && j < M);
                        if (b) {
                            CHECK(fwd[j] == 1 && bwd[j] == 0);
                            LONGS_EQUAL(next_b, j);  // backwards in forward order
                            next_b++;
                            bwd[j]++;
                            live--;
                        } else {
                            CHECK(fwd[j] == 0);
                            fwd[j]++;
                            if (++live > peak) peak = live;
                        }
                    }
                    LONGS_EQUAL(M, next_b);
                    const int bound = sch ? (S - st < M ? S - st : M) : st == S - 1 ? 1 : M;
                    LONGS_EQUAL(bound, peak);
                }
}

// gpipe with circular repeats (MaxText's): the forwards repeat by repeat, the backwards with
// the repeats descending; every (microbatch, repeat) once each way, forward before backward,
// and each repeat's backwards in increasing microbatch order (its chunk's parameters get
// their leaves in the one-rank order); R = 1 is qt_pp_action's gpipe.
static std::string circ(int M, int R)
{
    std::string o;
    for (int i = 0; i < 2 * M * R; i++) {
        int j = -1, r = -1;
        const int b = qt_pp_action_circ(M, R, i, &j, &r);
        o += (i ? " " : "") + std::string(b ? "B" : "F") + std::to_string(j) + "/" +
             std::to_string(r);
    }
    return o;
}

TEST(Pipeline, CircularGpipeIsMaxTexts)
{
    STRCMP_EQUAL("F0/0 F1/0 F0/1 F1/1 B0/1 B1/1 B0/0 B1/0", circ(2, 2).c_str());
    for (int M = 1; M <= 8; M++) {
        int j = -1;
        for (int i = 0; i < 2 * M; i++) {
            int jc = -1, r = -1;
            LONGS_EQUAL(qt_pp_action(0, 2, 0, M, i, &j), qt_pp_action_circ(M, 1, i, &jc, &r));
            LONGS_EQUAL(j, jc);
            LONGS_EQUAL(0, r);
        }
    }
    for (int M = 2; M <= 6; M++)
        for (int R = 1; R <= 5; R++) {
            int fwd[8][8] = {{0}}, bwd[8][8] = {{0}}, next_b[8] = {0}, last_r = R;
            for (int i = 0; i < 2 * M * R; i++) {
                int j = -1, r = -1;
                const int b = qt_pp_action_circ(M, R, i, &j, &r);
                CHECK(j >= 0 && j < M && r >= 0 && r < R);
                if (b) {
                    CHECK(fwd[r][j] == 1 && bwd[r][j] == 0);
                    LONGS_EQUAL(next_b[r], j);
                    CHECK(r <= last_r);  // repeats descending
                    last_r = r;
                    next_b[r]++;
                    bwd[r][j]++;
                } else {
                    CHECK(fwd[r][j] == 0);
                    fwd[r][j]++;
                }
            }
            for (int r = 0; r < R; r++) LONGS_EQUAL(M, next_b[r]);
        }
}

// Megatron's interleaved 1F1B (qt_pp_sched.h), written out by hand from its definition:
// virtual microbatch k in blocks of S R, chunk (k mod S R) div S (backward: R - 1 - that),
// microbatch block x S + k mod S; w = min(2 (S - s - 1) + (R - 1) S, M R) warm-up forwards
// (M R when M = S), then forward k = w + i with backward k = i, then the rest.
static std::string intl(int S, int st, int M, int R)
{
    std::string o;
    for (int i = 0; i < 2 * M * R; i++) {
        int j = -1, r = -1;
        const int b = qt_pp_action_intl(S, st, M, R, i, &j, &r);
        o += (i ? " " : "") + std::string(b ? "B" : "F") + std::to_string(j) + "/" +
             std::to_string(r);
    }
    return o;
}

TEST(Pipeline, InterleavedIsMegatrons)
{
    // S 2, R 2, M 4: warm-up 4 on stage 0, 2 on stage 1
    STRCMP_EQUAL("F0/0 F1/0 F0/1 F1/1 F2/0 B0/1 F3/0 B1/1 F2/1 B0/0 F3/1 B1/0 B2/1 B3/1 B2/0 B3/0",
                 intl(2, 0, 4, 2).c_str());
    STRCMP_EQUAL("F0/0 F1/0 F0/1 B0/1 F1/1 B1/1 F2/0 B0/0 F3/0 B1/0 F2/1 B2/1 F3/1 B3/1 B2/0 B3/0",
                 intl(2, 1, 4, 2).c_str());
    // S 4, R 2, M 8: warm-up 10, 8, 6, 4
    STRCMP_EQUAL("F0/0 F1/0 F2/0 F3/0 F0/1 F1/1 F2/1 F3/1 F4/0 F5/0 "
                 "F6/0 B0/1 F7/0 B1/1 F4/1 B2/1 F5/1 B3/1 F6/1 B0/0 F7/1 B1/0 "
                 "B2/0 B3/0 B4/1 B5/1 B6/1 B7/1 B4/0 B5/0 B6/0 B7/0",
                 intl(4, 0, 8, 2).c_str());
    STRCMP_EQUAL("F0/0 F1/0 F2/0 F3/0 F0/1 F1/1 F2/1 F3/1 "
                 "F4/0 B0/1 F5/0 B1/1 F6/0 B2/1 F7/0 B3/1 F4/1 B0/0 F5/1 B1/0 F6/1 B2/0 F7/1 B3/0 "
                 "B4/1 B5/1 B6/1 B7/1 B4/0 B5/0 B6/0 B7/0",
                 intl(4, 1, 8, 2).c_str());
    STRCMP_EQUAL("F0/0 F1/0 F2/0 F3/0 F0/1 F1/1 "
                 "F2/1 B0/1 F3/1 B1/1 F4/0 B2/1 F5/0 B3/1 F6/0 B0/0 F7/0 B1/0 F4/1 B2/0 F5/1 B3/0 "
                 "F6/1 B4/1 F7/1 B5/1 "
                 "B6/1 B7/1 B4/0 B5/0 B6/0 B7/0",
                 intl(4, 2, 8, 2).c_str());
    STRCMP_EQUAL("F0/0 F1/0 F2/0 F3/0 "
                 "F0/1 B0/1 F1/1 B1/1 F2/1 B2/1 F3/1 B3/1 F4/0 B0/0 F5/0 B1/0 F6/0 B2/0 F7/0 B3/0 "
                 "F4/1 B4/1 F5/1 B5/1 F6/1 B6/1 F7/1 B7/1 "
                 "B4/0 B5/0 B6/0 B7/0",
                 intl(4, 3, 8, 2).c_str());
    // M = S: every forward first (Megatron's all-warm-up case)
    STRCMP_EQUAL("F0/0 F1/0 F0/1 F1/1 B0/1 B1/1 B0/0 B1/0", intl(2, 1, 2, 2).c_str());
    LONGS_EQUAL(11, qt_pp_intl_inflight(4, 0, 8, 2));
    LONGS_EQUAL(5, qt_pp_intl_inflight(4, 3, 8, 2));
    LONGS_EQUAL(4, qt_pp_intl_inflight(2, 1, 2, 2));
}

// Every (microbatch, chunk) once each way, forward first, each chunk's backwards in increasing
// microbatch order, the peak in flight qt_pp_intl_inflight; and the S stages run to the end
// when each action waits only for the messages it receives (the driver: sends never wait,
// receives are waited for in action order): F(j, r) on stage s for F(j, r) on s - 1 (stage
// 0's r > 0: the last stage's F(j, r - 1), the wrap-around), B(j, r) for B(j, r) on s + 1
// (the last stage's r < R - 1: stage 0's B(j, r + 1)). With unit forwards and backwards of 2
// the run ends at 3 M R + 3 (S - 1) time units: the bubble (S - 1) / (R M + S - 1).
TEST(Pipeline, InterleavedRunsToTheEndWithoutDeadlock)
{
    for (int S = 2; S <= 5; S++)
        for (int R = 2; R <= 4; R++)
            for (int M = S; M <= 3 * S; M += S) {
                const int n = 2 * M * R;
                static int done[5][4][16][2];  // [stage][chunk][microbatch][bwd]: end time + 1
                memset(done, 0, sizeof done);
                int pos[5] = {0}, t[5] = {0};
                for (int st = 0; st < S; st++) {
                    int fwd[4][16] = {{0}}, next_b[4] = {0}, live = 0, peak = 0;
                    for (int i = 0; i < n; i++) {
                        int j = -1, r = -1;
                        const int b = qt_pp_action_intl(S, st, M, R, i, &j, &r);
                        CHECK(j >= 0 && j < M && r >= 0 && r < R);
                        if (b) {
                            CHECK(fwd[r][j] == 1);
                            LONGS_EQUAL(next_b[r], j);
                            next_b[r]++;
                            live--;
                        } else {
                            CHECK(fwd[r][j] == 0);
                            fwd[r][j] = 1;
                            if (++live > peak) peak = live;
                        }
                    }
                    for (int r = 0; r < R; r++) LONGS_EQUAL(M, next_b[r]);
                    LONGS_EQUAL(qt_pp_intl_inflight(S, st, M, R), peak);
                }
                for (int progress = 1; progress;) {
                    progress = 0;
                    for (int st = 0; st < S; st++) {
                        if (pos[st] == n) continue;
                        int j = -1, r = -1;
                        const int b = qt_pp_action_intl(S, st, M, R, pos[st], &j, &r);
                        int ps = -1, pr = r;  // the producer of the message it waits for
                        if (!b && (st > 0 || r > 0)) {
                            ps = st > 0 ? st - 1 : S - 1;
                            pr = st > 0 ? r : r - 1;
                        } else if (b && (st < S - 1 || r < R - 1)) {
                            ps = st < S - 1 ? st + 1 : 0;
                            pr = st < S - 1 ? r : r + 1;
                        }
                        if (ps >= 0 && !done[ps][pr][j][b]) continue;
                        int t0 = t[st];
                        if (ps >= 0 && done[ps][pr][j][b] - 1 > t0) t0 = done[ps][pr][j][b] - 1;
                        t[st] = t0 + (b ? 2 : 1);
                        done[st][r][j][b] = t[st] + 1;
                        pos[st]++;
                        progress = 1;
                    }
                }
                int end = 0;
                for (int st = 0; st < S; st++) {
                    LONGS_EQUAL(n, pos[st]);
                    if (t[st] > end) end = t[st];
                }
                LONGS_EQUAL(3 * M * R + 3 * (S - 1), end);
            }
}

// The input slots of interleaved 1F1B (qt_pp_intl_slots, what configgen sizes and the driver
// walks): replaying the order, a forward's slot holds no pair in flight, a backward frees
// the slot its pair's forward took, every slot is below the count, and the count is the
// order's peak in flight (the 397B plan's S 4, R 15, M 8: 63 / 61 / 59 / 57 of 120).
static void check_slots(int S, int M, int R, int st, int peak)
{
    static int slot[2 * 8 * 15 * 4], held[8 * 15 * 4], used[8 * 15 * 4], owner[8 * 15 * 4];
    const int n = qt_pp_intl_slots(S, st, M, R, slot, held, used);
    LONGS_EQUAL(qt_pp_intl_inflight(S, st, M, R), n);
    if (peak) LONGS_EQUAL(peak, n);
    for (int q = 0; q < M * R; q++) owner[q] = -1;
    int live = 0, most = 0;
    for (int i = 0; i < 2 * M * R; i++) {
        int j = -1, r = -1;
        const int b = qt_pp_action_intl(S, st, M, R, i, &j, &r), x = slot[i];
        CHECK(x >= 0 && x < n);
        if (b) {
            LONGS_EQUAL(r * M + j, owner[x]);
            owner[x] = -1;
            live--;
        } else {
            LONGS_EQUAL(-1, owner[x]);
            owner[x] = r * M + j;
            if (++live > most) most = live;
        }
    }
    LONGS_EQUAL(most, n);
}

TEST(Pipeline, InterleavedSlotsHoldOnlyThePeak)
{
    for (int S = 2; S <= 5; S++)
        for (int R = 2; R <= 4; R++)
            for (int M = S; M <= 3 * S; M += S)
                for (int st = 0; st < S; st++) check_slots(S, M, R, st, 0);
    const int peak397[4] = {63, 61, 59, 57};
    for (int st = 0; st < 4; st++) check_slots(4, 8, 15, st, peak397[st]);
}

TEST(Pipeline, SendRecvRegistryRow)
{
    const qt_coll_kind_info *k = qt_coll_kind(QT_COLL_SEND_RECV);
    CHECK(k != NULL);
    STRCMP_EQUAL("QT_COLL_SEND_RECV", k->enum_name);
    STRCMP_EQUAL("send-recv", k->text);
    LONGS_EQUAL(0, k->split);
    // one message to one peer: its bytes, whatever the group
    LONGS_EQUAL(4096, k->sent(2, 4096));
    LONGS_EQUAL(4096, k->sent(7, 4096));
    // the kinds before it keep their numbers (they are part of every plan hash)
    LONGS_EQUAL(4, QT_COLL_MAX_I64);
    LONGS_EQUAL(5, QT_COLL_SEND_RECV);
}
