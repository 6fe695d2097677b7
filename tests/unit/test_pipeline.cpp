// test_pipeline.cpp - the pipeline driver's schedules (firmware/runtime/pipeline.c
// qt_pp_action) and the point-to-point registry row (qt_coll.def SEND_RECV). The schedules
// are docs/pipeline.md's tables (gpipe; 1f1b for S 2, M 4: stage 0 F0 F1 B0 F2 B1 F3 B2 B3,
// stage 1 F0 B0 F1 B1 ...); on every stage of S 2..6 and M S..3S, each microbatch is
// forwarded once, then backwarded once, the backwards come in increasing microbatch order
// (the one-rank gradient tree's leaf order, docs/pipeline.md "The bits"), and 1f1b holds at
// most min(S - s, M) microbatches in flight (Megatron's bound) where gpipe holds M (its last
// stage 1: F j B j as each input arrives).
#include <string>

#include "CppUTest/TestHarness.h"

extern "C" {
#include "qt_plan.h"
#include "runtime/qt_pipeline.h"
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
