// test_moe_capacity.cpp - token dropping by capacity (qt_ops.def MOE_CAPACITY, issue 32): the
// queue order (token, then top-k slot; per sequence), the kept-slot combine, and the router
// gradient through the chain route -> capacity -> combine (+ the load-balance term from the
// pre-drop counts) against central finite differences in double (1e-7 relative to the
// largest gradient; the routing is held fixed: logits with margins >> h).
#include "qt_test_fd.h"
#include <cmath>
#include "CppUTest/TestHarness.h"
#include "kernels/moe_route.h"
#include "kernels/moe_combine.h"

TEST_GROUP(MoeCapacity){};

// Two sequences of S = 4 tokens, k = 2 of E = 3 experts, C = 2. Sequence 0: expert 0 is
// picked by tokens 0, 1, 2 (slot 0) and 3 (slot 1): its 3rd and 4th assignments drop;
// expert 1 by tokens 0, 1, 2 (slot 1): the 3rd drops. Sequence 1 restarts the counts; its
// token 7 loses expert 0 (slot 0) to earlier tokens' slot-1 picks while its slot 1 is
// kept: a top-k rank never outranks an earlier token.
TEST(MoeCapacity, QueueTakesTokenThenSlotOrderPerSequence)
{
    const int32_t idx[16] = {0, 1, 0, 1, 0, 1, 2, 0, /* seq 1: */ 2, 0, 2, 0, 1, 2, 0, 1};
    const int32_t want[16] = {0, 1, 0, 1, -1, -1, 2, -1, 2, 0, 2, 0, 1, -1, -1, 1};
    int32_t kidx[16], drops[2] = {5, 0};
    qt_moe_capacity(kidx, drops, idx, 8, 3, 2, 4, 2);
    for (int i = 0; i < 16; i++) LONGS_EQUAL(want[i], kidx[i]);
    LONGS_EQUAL(5 + 3, drops[0]); // accumulates
    LONGS_EQUAL(2, drops[1]);
    // C >= S: nothing drops, kidx == idx, the double build's entry point is the same code
    qt_moe_capacity_f64(kidx, NULL, idx, 8, 3, 2, 4, 4);
    for (int i = 0; i < 16; i++) LONGS_EQUAL(idx[i], kidx[i]);
}

// The chain of one MoE block's router side: L = sum(out * dout) + sum(lb_seq), out =
// combine over the kept slots of softmax-over-k weights, lb from the pre-drop counts.
static double chain_loss(const std::vector<double> &logits, const std::vector<double> &y,
                         const std::vector<double> &dout, int64_t T, int64_t E, int64_t k,
                         int64_t S, int64_t C, double c, std::vector<int32_t> *idx_out,
                         std::vector<int32_t> *kidx_out, std::vector<double> *p_out)
{
    std::vector<int32_t> idx(T * k), kidx(T * k);
    std::vector<double> p(T * k), lb(T / S, 0.0), out(T * 3);
    qt_moe_route_fwd_f64(idx.data(), p.data(), lb.data(), logits.data(), T, E, k, S, c);
    qt_moe_capacity_f64(kidx.data(), NULL, idx.data(), T, E, k, S, C);
    qt_moe_combine_kept_fwd_f64(out.data(), p.data(), y.data(), kidx.data(), T, k, 3);
    double L = 0;
    for (size_t i = 0; i < out.size(); i++) L += out[i] * dout[i];
    for (double v : lb) L += v;
    if (idx_out) *idx_out = idx;
    if (kidx_out) *kidx_out = kidx;
    if (p_out) *p_out = p;
    return L;
}

TEST(MoeCapacity, RouterGradientThroughKeptWeightsMatchesFiniteDifferences)
{
    const int64_t T = 12, E = 4, k = 2, S = 6, C = 2, d = 3;
    const double c = 0.37;
    std::vector<double> logits(T * E), y(T * k * d), dout(T * d);
    // well separated logits (routing stable under the probes), skewed to expert 0 and 1
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < E; e++)
            logits[t * E + e] = 0.7 * (double)((t * 7 + e * 5) % 11) - 0.9 * (double)e;
    for (size_t i = 0; i < y.size(); i++) y[i] = std::sin(0.37 * (double)i + 0.1);
    for (size_t i = 0; i < dout.size(); i++) dout[i] = std::cos(0.23 * (double)i);
    std::vector<int32_t> idx, kidx;
    std::vector<double> p;
    chain_loss(logits, y, dout, T, E, k, S, C, c, &idx, &kidx, &p);
    int dropped = 0;
    for (int32_t e : kidx) dropped += e < 0;
    CHECK(dropped > 0); // the case really drops
    // analytic: combine backward over the kept slots, then the router backward with the
    // pre-drop idx (softmax over k, and the load-balance term)
    std::vector<double> dp(T * k, 0.0), dy(T * k * d, 0.0), dl(T * E, 0.0);
    qt_moe_combine_kept_bwd_f64(dp.data(), dy.data(), dout.data(), p.data(), y.data(),
                                kidx.data(), T, k, d);
    for (int64_t r = 0; r < T * k; r++)
        if (kidx[r] < 0) {
            DOUBLES_EQUAL(0.0, dp[r], 0.0); // a dropped slot: no weight gradient ...
            for (int64_t i = 0; i < d; i++) DOUBLES_EQUAL(0.0, dy[r * d + i], 0.0); // ... no expert gradient
        }
    qt_moe_route_bwd_f64(dl.data(), dp.data(), logits.data(), idx.data(), p.data(), T, E, k, S, c);
    std::vector<double> num = qt_test_numgrad(logits, 1e-6, [&]() {
        return chain_loss(logits, y, dout, T, E, k, S, C, c, NULL, NULL, NULL);
    });
    double mx = 0, err = 0;
    for (size_t i = 0; i < dl.size(); i++) {
        mx = std::fmax(mx, std::fabs(num[i]));
        err = std::fmax(err, std::fabs(num[i] - dl[i]));
    }
    CHECK(mx > 0);
    if (err > 1e-7 * mx) fprintf(stderr, "router gradient: max err %g of %g\n", err, mx);
    CHECK(err <= 1e-7 * mx);
    // the expert path: dy matches finite differences in y (kept slots p*dout, dropped 0)
    std::vector<double> numy = qt_test_numgrad(y, 1e-6, [&]() {
        return chain_loss(logits, y, dout, T, E, k, S, C, c, NULL, NULL, NULL);
    });
    for (size_t i = 0; i < dy.size(); i++) DOUBLES_EQUAL(numy[i], dy[i], 1e-8);
}

// Without drops the kept-slot kernels are the plain ones, bit for bit (float build).
TEST(MoeCapacity, KeptCombineWithoutDropsHasThePlainBits)
{
    const int64_t T = 5, k = 3, d = 7;
    std::vector<float> p(T * k), y(T * k * d), g(T * d), o1(T * d), o2(T * d);
    std::vector<float> dp1(T * k, 0.f), dp2(T * k, 0.f), dy1(T * k * d, 0.f), dy2(T * k * d, 0.f);
    std::vector<int32_t> kidx(T * k, 1);
    for (size_t i = 0; i < p.size(); i++) p[i] = 0.1f + 0.05f * (float)i;
    for (size_t i = 0; i < y.size(); i++) y[i] = std::sin(0.7f * (float)i);
    for (size_t i = 0; i < g.size(); i++) g[i] = std::cos(0.3f * (float)i);
    qt_moe_combine_fwd(o1.data(), p.data(), y.data(), T, k, d);
    qt_moe_combine_kept_fwd(o2.data(), p.data(), y.data(), kidx.data(), T, k, d);
    qt_moe_combine_bwd(dp1.data(), dy1.data(), g.data(), p.data(), y.data(), T, k, d);
    qt_moe_combine_kept_bwd(dp2.data(), dy2.data(), g.data(), p.data(), y.data(), kidx.data(),
                            T, k, d);
    MEMCMP_EQUAL(o1.data(), o2.data(), o1.size() * sizeof(float));
    MEMCMP_EQUAL(dp1.data(), dp2.data(), dp1.size() * sizeof(float));
    MEMCMP_EQUAL(dy1.data(), dy2.data(), dy1.size() * sizeof(float));
}
