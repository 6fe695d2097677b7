// test_moe_many_experts.cpp - the router kernels past one stack block of experts (issue 35:
// the 1024-expert limit lifted, firmware/kernels/moe_route.c). At E = 2500 (two whole blocks
// of 1024 and a partial one) and sequences longer than the backward's token block (256), the
// load-balance forward and backward, the context form of the backward and the capacity queue
// must give the bits of a plain reference that holds every per-expert array whole (the
// kernels' former unblocked code, on the heap here): the same values summed in the same order.
// The inputs make the blocks matter: many assignments to experts past 2048, queues that
// overflow in every block, a context base that crosses a block edge.
#include <cstdint>
#include <cstring>
#include <vector>
#include "CppUTest/TestHarness.h"
#include "kernels/moe_route.h"
extern "C" {
#include "math/qt_math.h" // qt_expf: the kernels' exp (C linkage)
}

namespace {

// the former kernels, one array per expert
void ref_lse(float *m, float *z, const float *row, int64_t E)
{
    float mx = row[0], sum = 0;
    for (int64_t e = 1; e < E; e++) mx = row[e] > mx ? row[e] : mx;
    for (int64_t e = 0; e < E; e++) sum += qt_expf(row[e] - mx);
    *m = mx;
    *z = sum;
}

void ref_lb_fwd(float *lb, const int32_t *idx, const float *logits, int64_t T, int64_t E,
                int64_t k, int64_t S, float c)
{
    std::vector<int32_t> count(E);
    std::vector<float> pbar(E);
    const float inv_s = 1.0f / (float)S;
    for (int64_t s = 0; s < T / S; s++) {
        for (int64_t e = 0; e < E; e++) count[e] = 0, pbar[e] = 0;
        for (int64_t r = s * S * k; r < (s + 1) * S * k; r++) count[idx[r]]++;
        for (int64_t t = s * S; t < (s + 1) * S; t++) {
            const float *row = logits + t * E;
            float m, z;
            ref_lse(&m, &z, row, E);
            for (int64_t e = 0; e < E; e++) pbar[e] += qt_expf(row[e] - m) / z;
        }
        float acc = 0;
        for (int64_t e = 0; e < E; e++) acc += ((float)count[e] * inv_s) * (pbar[e] * inv_s);
        lb[s] += c * acc;
    }
}

// cnt[(T/S) x E], Sw the whole sequence's tokens (qt_moe_lb_bwd)
void ref_lb_bwd(float *dl, const float *logits, const int32_t *cnt, int64_t T, int64_t E,
                int64_t S, int64_t Sw, float c)
{
    std::vector<float> g(E), prow(E);
    const float inv_s = 1.0f / (float)Sw;
    for (int64_t s = 0; s < T / S; s++) {
        for (int64_t e = 0; e < E; e++) g[e] = (c * ((float)cnt[s * E + e] * inv_s)) * inv_s;
        for (int64_t t = s * S; t < (s + 1) * S; t++) {
            const float *row = logits + t * E;
            float m, z, a = 0;
            ref_lse(&m, &z, row, E);
            for (int64_t e = 0; e < E; e++) {
                prow[e] = qt_expf(row[e] - m) / z;
                a += prow[e] * g[e];
            }
            for (int64_t e = 0; e < E; e++) dl[t * E + e] += prow[e] * (g[e] - a);
        }
    }
}

void ref_capacity(int32_t *kidx, int32_t *drops, const int32_t *idx, const int32_t *base,
                  int64_t T, int64_t E, int64_t k, int64_t S, int64_t C)
{
    std::vector<int64_t> count(E);
    for (int64_t s = 0; s < T / S; s++) {
        int32_t dropped = 0;
        for (int64_t e = 0; e < E; e++) count[e] = base ? base[s * E + e] : 0;
        for (int64_t r = s * S * k; r < (s + 1) * S * k; r++) {
            const int32_t e = idx[r];
            const int keep = e >= 0 && e < E && ++count[e] <= C;
            kidx[r] = keep ? e : -1;
            dropped += !keep;
        }
        if (drops) drops[s] += dropped;
    }
}

uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

// logits in [-3, 3): the top-k picks land in every block
std::vector<float> make_logits(int64_t T, int64_t E, uint32_t seed)
{
    std::vector<float> l((size_t)(T * E));
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < E; e++)
            l[(size_t)(t * E + e)] = (float)(lcg(&seed) % 60000) / 10000.0f - 3.0f;
    return l;
}

bool same_bits(const float *a, const float *b, size_t n)
{
    return std::memcmp(a, b, n * sizeof(float)) == 0;
}

const int64_t E = 2500, K = 4, S = 300, NS = 2, T = S * NS;

} // namespace

TEST_GROUP(MoeManyExperts){};

// routing + load-balance forward and backward at E = 2500, S = 300 > the token block
TEST(MoeManyExperts, LoadBalanceForwardAndBackwardAreTheUnblockedBits)
{
    const std::vector<float> logits = make_logits(T, E, 7);
    std::vector<int32_t> idx((size_t)(T * K));
    std::vector<float> p((size_t)(T * K)), lb(NS, 0.25f), lb_ref(NS, 0.25f);
    qt_moe_route_fwd(idx.data(), p.data(), lb.data(), logits.data(), T, E, K, S, 0.01f);
    int per_block[3] = {0, 0, 0};
    for (int32_t e : idx) per_block[e / 1024]++;
    for (int b = 0; b < 3; b++) CHECK(per_block[b] > T / 2); // every block is used
    ref_lb_fwd(lb_ref.data(), idx.data(), logits.data(), T, E, K, S, 0.01f);
    CHECK(lb[0] != 0.25f);
    CHECK(same_bits(lb.data(), lb_ref.data(), NS));

    // backward: routing rows then the term, on an accumulating dlogits
    std::vector<float> dp((size_t)(T * K)), dl((size_t)(T * E)), dl_ref;
    uint32_t seed = 99;
    for (float &v : dp) v = (float)(lcg(&seed) % 2000) / 1000.0f - 1.0f;
    for (float &v : dl) v = (float)(lcg(&seed) % 2000) / 100000.0f;
    dl_ref = dl;
    qt_moe_route_bwd(dl.data(), dp.data(), logits.data(), idx.data(), p.data(), T, E, K, S,
                     0.01f);
    for (int64_t t = 0; t < T; t++) { // the reference's routing rows
        float a = 0;
        for (int64_t s = 0; s < K; s++) a += p[t * K + s] * dp[t * K + s];
        for (int64_t s = 0; s < K; s++)
            dl_ref[t * E + idx[t * K + s]] += p[t * K + s] * (dp[t * K + s] - a);
    }
    std::vector<int32_t> cnt((size_t)(NS * E), 0);
    for (int64_t r = 0; r < T * K; r++) cnt[(r / (S * K)) * E + idx[r]]++;
    ref_lb_bwd(dl_ref.data(), logits.data(), cnt.data(), T, E, S, S, 0.01f);
    CHECK(same_bits(dl.data(), dl_ref.data(), dl.size()));
}

// the context form: this rank's blocks of S rows with the whole sequence's counts (Sw = 2 S)
TEST(MoeManyExperts, ContextBackwardWithGivenCountsIsTheUnblockedBits)
{
    const std::vector<float> logits = make_logits(T, E, 11);
    std::vector<int32_t> cnt((size_t)(NS * E));
    uint32_t seed = 5;
    for (int32_t &v : cnt) v = (int32_t)(lcg(&seed) % 3);
    std::vector<float> dl((size_t)(T * E), 0.0f), dl_ref((size_t)(T * E), 0.0f);
    qt_moe_lb_bwd(dl.data(), logits.data(), cnt.data(), T, E, S, 2 * S, 0.02f);
    ref_lb_bwd(dl_ref.data(), logits.data(), cnt.data(), T, E, S, 2 * S, 0.02f);
    CHECK(same_bits(dl.data(), dl_ref.data(), dl.size()));
    // and the forward's pieces: Pbar over all E, then the term
    std::vector<float> pbar((size_t)(NS * E), 0.0f), lb(NS, 0.0f);
    qt_moe_lb_pbar(pbar.data(), logits.data(), T, E, S);
    qt_moe_lb_term(lb.data(), cnt.data(), pbar.data(), NS, E, 2 * S, 0.02f);
    CHECK(lb[0] > 0.0f && lb[1] > 0.0f);
}

// the capacity queue: C = 1 with about 3 assignments per expert in the last block; a base
// (context prefix) that differs across the block edges; ids outside [0, E) dropped once
TEST(MoeManyExperts, CapacityQueueIsTheUnblockedQueue)
{
    const int64_t k = 8, Sq = 100, Tq = 2 * Sq;
    std::vector<int32_t> idx((size_t)(Tq * k)), base((size_t)(2 * E));
    uint32_t seed = 3;
    for (int32_t &e : idx) {
        const uint32_t r = lcg(&seed);
        e = r % 4 == 0 ? (int32_t)(r / 4 % E) : 2048 + (int32_t)(r / 4 % (E - 2048));
    }
    idx[5] = -1;
    idx[17] = (int32_t)E;
    for (int32_t &b : base) b = (int32_t)(lcg(&seed) % 3 == 0);
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *bp = pass ? base.data() : nullptr;
        std::vector<int32_t> kidx((size_t)(Tq * k), 7), kidx_ref((size_t)(Tq * k), 7);
        int32_t drops[2] = {1, 2}, drops_ref[2] = {1, 2};
        qt_moe_capacity_from(kidx.data(), drops, idx.data(), bp, Tq, E, k, Sq, 1);
        ref_capacity(kidx_ref.data(), drops_ref, idx.data(), bp, Tq, E, k, Sq, 1);
        CHECK(kidx == kidx_ref);
        LONGS_EQUAL(drops_ref[0], drops[0]);
        LONGS_EQUAL(drops_ref[1], drops[1]);
        CHECK(drops[0] > 100 && drops[1] > 100); // the queues overflow
        LONGS_EQUAL(-1, kidx[5]);
        LONGS_EQUAL(-1, kidx[17]);
    }
}
