// test_moe_ragged.cpp - token dropping by the expert hosts' receive buffers (qt_ops.def
// MOE_RAGGED, issue 35: ragged_buffer_factor > 0 with sparse_matmul): qt_moe_ragged_keep
// against MaxText's own construction, written out here as MaxText computes it
// (src/maxtext/layers/moe.py: permute's stable argsort by expert, the all-gathered
// [source shard, target shard] traffic matrix, _truncate_matrix's prefix sum clamped to the
// buffer along the sources, ragged_all_to_all sending each source's first send_sizes rows of
// its target's run): a row is kept iff it is received. Random routings on 2 and 4 members,
// buffers from 0 rows to more than any host gets; one hand-made case pins the order
// (source, then expert, then token) and the drop counts per sequence.
#include <cstdint>
#include <cstring>
#include <vector>
#include "CppUTest/TestHarness.h"
#include "kernels/moe_route.h"

TEST_GROUP(MoeRagged){};

// Every member's kidx by MaxText's construction: kept[member][r] for r = t*k + slot.
static std::vector<std::vector<int>> maxtext_kept(const std::vector<std::vector<int32_t>> &idx,
                                                  int64_t T, int64_t k, int64_t E, int64_t M,
                                                  int64_t B)
{
    const int64_t El = E / M;
    // traffic[i][j]: rows of source i bound for target j
    std::vector<std::vector<int64_t>> traffic(M, std::vector<int64_t>(M, 0));
    for (int64_t i = 0; i < M; i++)
        for (int64_t r = 0; r < T * k; r++) traffic[i][idx[i][r] / El]++;
    // _truncate_matrix: per target (column) the cumsum over sources clamped to B, diffed
    std::vector<std::vector<int64_t>> send(M, std::vector<int64_t>(M, 0));
    for (int64_t j = 0; j < M; j++) {
        int64_t cum = 0, prev = 0;
        for (int64_t i = 0; i < M; i++) {
            cum += traffic[i][j];
            const int64_t cl = cum < B ? cum : B;
            send[i][j] = cl - prev;
            prev = cl;
        }
    }
    std::vector<std::vector<int>> kept(M, std::vector<int>(T * k, 0));
    for (int64_t i = 0; i < M; i++) {
        // permute: a stable argsort of the flattened (t, slot) expert ids
        std::vector<int64_t> order;
        for (int64_t e = 0; e < E; e++)
            for (int64_t r = 0; r < T * k; r++)
                if (idx[i][r] == e) order.push_back(r);
        // target j's run of the sorted rows starts after the lower targets' runs; the
        // ragged all-to-all sends its first send[i][j] rows
        int64_t start = 0;
        for (int64_t j = 0; j < M; j++) {
            for (int64_t q = 0; q < send[i][j]; q++) kept[i][order[start + q]] = 1;
            start += traffic[i][j];
        }
    }
    return kept;
}

static uint64_t qt_rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32()
{
    qt_rng_state ^= qt_rng_state << 13, qt_rng_state ^= qt_rng_state >> 7,
        qt_rng_state ^= qt_rng_state << 17;
    return (uint32_t)(qt_rng_state >> 11);
}

// Random top-k routings (k distinct experts per token, skewed towards low ids so that some
// hosts overflow), M members of T tokens, buffers B from 0 to beyond the worst case.
TEST(MoeRagged, KeepsExactlyWhatMaxTextsTruncatedExchangeReceives)
{
    // {M, E, k, T, S, trials}; the last two pass the kernel's stack block of 1024 experts
    // (a host's experts straddling a block boundary: 1300 a host of 2600, 768 of 3072)
    const int64_t cases[][6] = {{2, 4, 2, 8, 4, 20},      {4, 8, 2, 6, 3, 20},
                                {2, 8, 3, 10, 5, 20},     {4, 4, 1, 12, 4, 20},
                                {2, 2600, 4, 150, 50, 3}, {4, 3072, 3, 100, 25, 2}};
    int64_t dropped_somewhere = 0, checked = 0;
    for (const auto &c : cases) {
        const int64_t M = c[0], E = c[1], k = c[2], T = c[3], S = c[4];
        for (int trial = 0; trial < c[5]; trial++) {
            std::vector<std::vector<int32_t>> idx(M, std::vector<int32_t>(T * k));
            for (int64_t i = 0; i < M; i++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t s = 0; s < k; s++) {
                        int32_t e;
                        bool dup;
                        do {
                            const int64_t u = next_u32() % E, v = next_u32() % E;
                            e = (int32_t)(u < v ? u : v);
                            dup = false;
                            for (int64_t q = 0; q < s; q++) dup |= idx[i][t * k + q] == e;
                        } while (dup);
                        idx[i][t * k + s] = e;
                    }
            std::vector<int32_t> cnt(M * E, 0);
            for (int64_t i = 0; i < M; i++)
                qt_moe_capacity_counts(cnt.data() + i * E, idx[i].data(), T, E, k, T);
            for (int64_t B : {(int64_t)0, (int64_t)1, T * k / 2, T * k, T * k + 3, M * T * k}) {
                const auto want = maxtext_kept(idx, T, k, E, M, B);
                for (int64_t i = 0; i < M; i++) {
                    std::vector<int32_t> kidx(T * k), drops(T / S, 0);
                    qt_moe_ragged_keep(kidx.data(), drops.data(), idx[i].data(), cnt.data(), T,
                                       E, k, S, E / M, i, B);
                    std::vector<int32_t> dwant(T / S, 0);
                    for (int64_t r = 0; r < T * k; r++) {
                        LONGS_EQUAL(want[i][r] ? idx[i][r] : -1, kidx[r]);
                        dwant[r / (S * k)] += !want[i][r];
                        dropped_somewhere += !want[i][r] && B > 0;
                        checked++;
                    }
                    for (int64_t s = 0; s < T / S; s++) LONGS_EQUAL(dwant[s], drops[s]);
                }
            }
        }
    }
    CHECK(checked > 10000);
    CHECK(dropped_somewhere > 100); // the buffers really overflow in these cases
}

// Two members, E = 4 (member 0 hosts experts 0, 1; member 1 hosts 2, 3), T = 4 tokens in
// sequences of S = 2, k = 1, B = 4. Host 0 receives member 0's rows of expert 0 (tokens 1,
// 3), then of expert 1 (token 0), then member 1's (expert 0: token 2; expert 1: token 0):
// 5 rows, the last drops: member 1's token 0, although it comes before its kept token 2 in
// token order (expert before token). Host 1 receives member 0's token 2 (expert 3) and
// member 1's tokens 1, 3 (expert 2): 3 rows, all kept.
TEST(MoeRagged, OrderIsSourceThenExpertThenToken)
{
    const int32_t idx0[4] = {1, 0, 3, 0}, idx1[4] = {1, 2, 0, 2};
    int32_t cnt[8];
    qt_moe_capacity_counts(cnt, idx0, 4, 4, 1, 4);
    qt_moe_capacity_counts(cnt + 4, idx1, 4, 4, 1, 4);
    int32_t kidx[4], drops[2] = {0, 0};
    qt_moe_ragged_keep(kidx, drops, idx0, cnt, 4, 4, 1, 2, 2, 0, 4);
    const int32_t want0[4] = {1, 0, 3, 0};
    for (int r = 0; r < 4; r++) LONGS_EQUAL(want0[r], kidx[r]);
    LONGS_EQUAL(0, drops[0] + drops[1]);
    qt_moe_ragged_keep_f64(kidx, drops, idx1, cnt, 4, 4, 1, 2, 2, 1, 4);
    const int32_t want1[4] = {-1, 2, 0, 2};
    for (int r = 0; r < 4; r++) LONGS_EQUAL(want1[r], kidx[r]);
    LONGS_EQUAL(1, drops[0]); // token 0 (sequence 0)
    LONGS_EQUAL(0, drops[1]);
    // one buffer row less: host 0 drops member 1's token 2 too; host 1 still keeps its 3
    qt_moe_ragged_keep(kidx, drops, idx1, cnt, 4, 4, 1, 2, 2, 1, 3);
    const int32_t want2[4] = {-1, 2, -1, 2};
    for (int r = 0; r < 4; r++) LONGS_EQUAL(want2[r], kidx[r]);
    LONGS_EQUAL(2, drops[0]); // accumulates
    LONGS_EQUAL(1, drops[1]);
    // two rows: host 1 drops member 1's token 3 (its last row)
    drops[0] = drops[1] = 0;
    qt_moe_ragged_keep(kidx, drops, idx1, cnt, 4, 4, 1, 2, 2, 1, 2);
    const int32_t want3[4] = {-1, 2, -1, -1};
    for (int r = 0; r < 4; r++) LONGS_EQUAL(want3[r], kidx[r]);
    LONGS_EQUAL(1, drops[0]);
    LONGS_EQUAL(2, drops[1]);
}
