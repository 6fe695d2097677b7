// test_ep_rounds.cpp - the rounds of the expert dispatch (parallel/ep_rounds.h), single
// process, exact (integers): for M simulated members with b blocks each and a count table G,
//  (1) the rounds cover the leaves [0, M*b) in order, every round fits R rows on every
//      host and is the longest that does (adding the next leaf overflows some host);
//  (2) the exchange tables, applied by hand (home slices -> host round buffers), give every
//      host exactly the whole dispatch's rows in its order once the rounds are concatenated,
//      each leaf's rows at the round-local offsets seg names, and every row goes back to the
//      place its home packed it;
//  (3) the edge cases: all counts zero (one round, no rows), a leaf of exactly R rows, counts
//      larger than a round (refused: -1 naming the host and its rows), uneven counts, one
//      block per member and M = 1.
// The multi-rank exchange runs under MPICH in tests/tools/coll_check.c (--ep-rounds).
#include <stdint.h>
#include <vector>
#include "CppUTest/TestHarness.h"

extern "C" {
#include "parallel/ep_rounds.h"
}

TEST_GROUP(EpRounds) {};

namespace {

// A row's identity: home i, destination j, block s, n-th row of (i, j, s).
static int64_t row_id(int64_t i, int64_t j, int64_t s, int64_t n)
{
    return ((i * 64 + j) * 64 + s) * 100000 + n;
}

// Walks every round over M simulated members, checks (1) and (2); returns the rounds.
static int64_t walk(const std::vector<int64_t> &G, int64_t M, int64_t b, int64_t R)
{
    // home i's packed buffer: member slices, blocks in order
    std::vector<std::vector<int64_t>> home(M), back(M);
    std::vector<std::vector<int64_t>> off(M, std::vector<int64_t>(M));
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < M; j++) {
            off[i][j] = (int64_t)home[i].size();
            for (int64_t s = 0; s < b; s++)
                for (int64_t n = 0; n < G[i * M * b + j * b + s]; n++)
                    home[i].push_back(row_id(i, j, s, n));
        }
        back[i].assign(home[i].size(), -1);
    }
    std::vector<std::vector<int64_t>> got(M);  // each host's rows over the rounds
    int64_t L0 = 0, rounds = 0;
    std::vector<int64_t> scnt(M), soff(M), rcnt(M), roff(M), seg(M * b + 1);
    std::vector<std::vector<int64_t>> S(M, std::vector<int64_t>(M)), SO(M, std::vector<int64_t>(M));
    while (L0 < M * b) {
        const int64_t L1 = qt_ep_round_end(G.data(), M, b, L0, R, NULL, NULL);
        CHECK(L1 > L0 && L1 <= M * b);
        // (1) fits, and is the longest
        int overflow = 0;
        for (int64_t j = 0; j < M; j++) {
            int64_t n = 0;
            for (int64_t L = L0; L < L1; L++) n += qt_ep_leaf_rows(G.data(), M, b, j, L);
            CHECK(n <= R);
            if (L1 < M * b && n + qt_ep_leaf_rows(G.data(), M, b, j, L1) > R) overflow = 1;
        }
        CHECK(L1 == M * b || overflow);
        // home tables of every member
        for (int64_t i = 0; i < M; i++) {
            qt_ep_round_tables(G.data(), M, b, i, L0, L1, off[i].data(), scnt.data(),
                               soff.data(), rcnt.data(), roff.data(), NULL);
            for (int64_t j = 0; j < M; j++) S[i][j] = scnt[j], SO[i][j] = soff[j];
        }
        // (2) each host's round buffer from the homes' slices
        for (int64_t j = 0; j < M; j++) {
            const int64_t rows = qt_ep_round_tables(G.data(), M, b, j, L0, L1, off[j].data(),
                                                    scnt.data(), soff.data(), rcnt.data(),
                                                    roff.data(), seg.data());
            std::vector<int64_t> buf(rows, -1);
            int64_t total = 0;
            for (int64_t i = 0; i < M; i++) {
                LONGS_EQUAL(S[i][j], rcnt[i]);
                LONGS_EQUAL(total, roff[i]);
                total += rcnt[i];
                for (int64_t n = 0; n < rcnt[i]; n++) buf[roff[i] + n] = home[i][SO[i][j] + n];
            }
            LONGS_EQUAL(rows, total);
            for (int64_t L = L0; L < L1; L++) {
                const int64_t i = L / b, s = L % b, n = G[i * M * b + j * b + s];
                LONGS_EQUAL(n, seg[L - L0 + 1] - seg[L - L0]);
                for (int64_t r = 0; r < n; r++)
                    LONGS_EQUAL(row_id(i, j, s, r), buf[seg[L - L0] + r]);
            }
            LONGS_EQUAL(rows, seg[L1 - L0]);
            got[j].insert(got[j].end(), buf.begin(), buf.end());
            // the way back: host j's rows to where member i packed them
            for (int64_t i = 0; i < M; i++)
                for (int64_t n = 0; n < rcnt[i]; n++) back[i][SO[i][j] + n] = buf[roff[i] + n];
        }
        L0 = L1;
        rounds++;
    }
    for (int64_t j = 0; j < M; j++) {  // the whole dispatch's order on every host
        std::vector<int64_t> want;
        for (int64_t i = 0; i < M; i++)
            for (int64_t s = 0; s < b; s++)
                for (int64_t n = 0; n < G[i * M * b + j * b + s]; n++)
                    want.push_back(row_id(i, j, s, n));
        CHECK(want == got[j]);
    }
    for (int64_t i = 0; i < M; i++) CHECK(back[i] == home[i]);  // every row went home
    return rounds;
}

}  // namespace

TEST(EpRounds, ZeroCountsOneRound)
{
    std::vector<int64_t> G(3 * 3 * 2, 0);
    LONGS_EQUAL(1, walk(G, 3, 2, 1));
}

// M = 2, b = 2: leaf rows per host (host 0 | host 1): L0 3|1, L1 2|4, L2 0|0, L3 5|1.
// R = 5: L0 + L1 = 5|5 fits, + L2 (empty) still 5|5, + L3 overflows -> [L0, L2], then [L3]
// (a leaf of exactly R rows): 2 rounds. R = 4: [L0], [L1, L2], then L3 alone is over
// (5 > 4 on host 0): refused.
TEST(EpRounds, UnevenCountsByHand)
{
    // G[i*M*b + j*b + s]: member i's block s for host j; leaf L = i*b + s
    const int64_t M = 2, b = 2;
    std::vector<int64_t> G = {3, 2, 1, 4,   // member 0: host 0 blocks (3, 2), host 1 (1, 4)
                              0, 5, 0, 1};  // member 1: host 0 (0, 5), host 1 (0, 1)
    LONGS_EQUAL(3, qt_ep_round_end(G.data(), M, b, 0, 5, NULL, NULL));
    LONGS_EQUAL(4, qt_ep_round_end(G.data(), M, b, 3, 5, NULL, NULL));
    LONGS_EQUAL(2, walk(G, M, b, 5));
    LONGS_EQUAL(1, qt_ep_round_end(G.data(), M, b, 0, 4, NULL, NULL));
    LONGS_EQUAL(3, qt_ep_round_end(G.data(), M, b, 1, 4, NULL, NULL));
    int64_t host = -1, rows = -1;
    LONGS_EQUAL(-1, qt_ep_round_end(G.data(), M, b, 3, 4, &host, &rows));
    LONGS_EQUAL(0, host);
    LONGS_EQUAL(5, rows);
    LONGS_EQUAL(1, walk(G, M, b, 1000));
}

// Counts larger than a round on some host: refused at that leaf, naming the first host.
TEST(EpRounds, CountLargerThanRoundRefused)
{
    const int64_t M = 3, b = 1;
    std::vector<int64_t> G = {0, 0, 0, 1, 9, 2, 0, 0, 0};  // member 1's block: 1, 9, 2 rows
    int64_t host = -1, rows = -1;
    LONGS_EQUAL(1, qt_ep_round_end(G.data(), M, b, 0, 8, NULL, NULL));
    LONGS_EQUAL(-1, qt_ep_round_end(G.data(), M, b, 1, 8, &host, &rows));
    LONGS_EQUAL(1, host);
    LONGS_EQUAL(9, rows);
    LONGS_EQUAL(1, walk(G, M, b, 9));
}

// Random uneven tables (zeros, rows up to R) for several M, b, R: (1) and (2) hold, and
// the rounds are more than one when the rows exceed R.
TEST(EpRounds, RandomTables)
{
    uint64_t st = 12345;
    const int64_t shapes[][3] = {{1, 4, 7}, {2, 1, 3}, {2, 3, 16}, {4, 2, 10}, {8, 1, 20}};
    for (const auto &sh : shapes) {
        const int64_t M = sh[0], b = sh[1], R = sh[2];
        for (int rep = 0; rep < 20; rep++) {
            std::vector<int64_t> G(M * M * b);
            int64_t most = 0;
            for (auto &g : G) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                const int64_t v = (int64_t)((st >> 33) % 7);
                g = v < 2 ? 0 : (int64_t)((st >> 40) % (uint64_t)(R / M + 1));
            }
            for (int64_t j = 0; j < M; j++) {
                int64_t n = 0;
                for (int64_t L = 0; L < M * b; L++) n += qt_ep_leaf_rows(G.data(), M, b, j, L);
                most = n > most ? n : most;
            }
            const int64_t rounds = walk(G, M, b, R);
            CHECK(rounds >= 1);
            if (most > R) CHECK(rounds > 1);
        }
    }
}
