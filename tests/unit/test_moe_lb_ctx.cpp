// test_moe_lb_ctx.cpp - the load-balance term of a sequence split over context ranks
// (qt_ops.def MOE_ROUTE_FWD / _BWD with a context degree, ops_moe.c; issue 35), simulated in
// one process: C "ranks" each hold block r of every sequence; the counts are the blocks'
// counts summed in block order (the op's all-gather), Pbar is continued block after block
// (the op's chain), the last block adds the term. The term and the router gradient rows must
// be the whole-sequence kernel's bit for bit (the same operations in the same order); a
// gradient from the block's own counts must not be (the combination matters).
#include <cstring>
#include <vector>

#include "CppUTest/TestHarness.h"
#include "kernels/moe_route.h"
#include "qt_test_util.h"

namespace {
struct lb_case {
    int64_t b, S, E, k;
    std::vector<float> logits, dp;
    lb_case(int64_t b_, int64_t S_, int64_t E_, int64_t k_, uint64_t seed)
        : b(b_), S(S_), E(E_), k(k_), logits(b_ * S_ * E_), dp(b_ * S_ * k_)
    {
        for (float &x : logits) x = (float)(4.0 * qt_test_rand(&seed));
        for (float &x : dp) x = (float)qt_test_rand(&seed);
    }
    // rows of block r of every sequence (C blocks), contiguous as on context rank r
    template <typename V> V block(const V &x, int64_t w, int64_t C, int64_t r) const
    {
        const int64_t Sl = S / C;
        V out(b * Sl * w);
        for (int64_t s = 0; s < b; s++)
            memcpy(&out[s * Sl * w], &x[(s * S + r * Sl) * w], Sl * w * sizeof(x[0]));
        return out;
    }
};
}  // namespace

static void lb_ctx_case(const lb_case &k, int64_t C, float c, float cb)
{
    const int64_t T = k.b * k.S, Sl = k.S / C, Tl = k.b * Sl, n = k.b * k.E;
    std::vector<int32_t> idx(T * k.k);
    std::vector<float> p(T * k.k), lb(k.b, 0.5f), dl(T * k.E, 0.0f);
    qt_moe_route_fwd(idx.data(), p.data(), lb.data(), k.logits.data(), T, k.E, k.k, k.S, c);
    qt_moe_route_bwd(dl.data(), k.dp.data(), k.logits.data(), idx.data(), p.data(), T, k.E, k.k,
                     k.S, cb);

    // the ranks' routing (no term), their counts summed in block order
    std::vector<std::vector<float>> lg(C), pr(C), dpr(C);
    std::vector<std::vector<int32_t>> ir(C);
    std::vector<int32_t> tot(n, 0), cnt(n);
    for (int64_t r = 0; r < C; r++) {
        lg[r] = k.block(k.logits, k.E, C, r);
        dpr[r] = k.block(k.dp, k.k, C, r);
        ir[r].assign(Tl * k.k, 0);
        pr[r].assign(Tl * k.k, 0.0f);
        qt_moe_route_fwd(ir[r].data(), pr[r].data(), NULL, lg[r].data(), Tl, k.E, k.k, Sl, c);
        CHECK(ir[r] == k.block(idx, k.k, C, r));
        qt_moe_capacity_counts(cnt.data(), ir[r].data(), Tl, k.E, k.k, Sl);
        for (int64_t i = 0; i < n; i++) tot[i] += cnt[i];
    }
    // the Pbar chain, the term on the last rank
    std::vector<float> pbar(n, 0.0f), lbs(k.b, 0.5f);
    for (int64_t r = 0; r < C; r++) qt_moe_lb_pbar(pbar.data(), lg[r].data(), Tl, k.E, Sl);
    qt_moe_lb_term(lbs.data(), tot.data(), pbar.data(), k.b, k.E, k.S, c);
    CHECK(memcmp(lbs.data(), lb.data(), k.b * sizeof(float)) == 0);
    CHECK(lb[0] != 0.5f);  // the term is there
    // every rank's gradient rows: routing part, then the term from the whole counts
    bool local_differs = false;
    for (int64_t r = 0; r < C; r++) {
        std::vector<float> d(Tl * k.E, 0.0f), dlocal(Tl * k.E, 0.0f);
        qt_moe_route_bwd(d.data(), dpr[r].data(), lg[r].data(), ir[r].data(), pr[r].data(), Tl,
                         k.E, k.k, Sl, 0.0f);
        dlocal = d;
        qt_moe_lb_bwd(d.data(), lg[r].data(), tot.data(), Tl, k.E, Sl, k.S, cb);
        CHECK(d == k.block(dl, k.E, C, r));
        qt_moe_capacity_counts(cnt.data(), ir[r].data(), Tl, k.E, k.k, Sl);
        qt_moe_lb_bwd(dlocal.data(), lg[r].data(), cnt.data(), Tl, k.E, Sl, k.S, cb);
        local_differs = local_differs || dlocal != d;
    }
    CHECK(local_differs);
}

TEST_GROUP(MoeLbCtx){};

// 2 sequences of 12 tokens, 6 experts, top 2, split over 2, 3 and 4 context ranks
TEST(MoeLbCtx, SplitSequenceGivesTheWholeSequenceBits)
{
    lb_case k(2, 12, 6, 2, 7);
    lb_ctx_case(k, 2, 0.0025f, 0.16f);
    lb_ctx_case(k, 3, 0.0025f, 0.16f);
    lb_ctx_case(k, 4, 0.0025f, 0.16f);
}

// one sequence, top 3 of 9 experts, blocks of one token (C = S)
TEST(MoeLbCtx, OneTokenBlocks)
{
    lb_case k(1, 8, 9, 3, 8);
    lb_ctx_case(k, 8, 0.37f, 1.5f);
}
