// test_gold_attn_moe.cpp - rope, attention, moe_route, expert_ffn and moe_combine kernels
// against the float64 PyTorch reference goldens (tests/golden/kernels/*.h, SPEC.md).
// Tolerances (relative to each tensor's max |value|, SPEC.md section 1): double kernels
// 1e-10 (same math in float64, different summation orders); float kernels 2e-5, attention
// 5e-5 (float32 rounding through exp/log and length-S sums). Gradients use L = sum(out*d<out>)
// (+ sum(lb_seq)); weight gradients sum the per-sequence WGRAD calls as the interpreter does.
#include <vector>
#include "CppUTest/TestHarness.h"
#include "qt_test_util.h"
#include "kernels/rope.h"
#include "kernels/attention.h"
#include "kernels/moe_route.h"
#include "kernels/expert_ffn.h"
#include "kernels/moe_combine.h"
#include "golden/kernels/rope.h"
#include "golden/kernels/attn.h"
#include "golden/kernels/moe_route.h"
#include "golden/kernels/expert_ffn.h"
#include "golden/kernels/moe_combine.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define TOL64 1e-10
#define TOL32 2e-5
#define TOL32_ATTN 5e-5

typedef std::vector<double> vd;
typedef std::vector<float> vf;
typedef std::vector<int32_t> vi;

static vf gf(const double *a, size_t n)
{
    vf v(n);
    qt_test_to_f32(v.data(), a, n);
    return v;
}
static vi gi(const double *a, size_t n)
{
    vi v(n);
    qt_test_to_i32(v.data(), a, n);
    return v;
}

#define CHECK64(what, got, gold) \
    CHECK(qt_test_rel_err_f64(what, (got).data(), gold, N_OF(gold), TOL64) <= TOL64)
#define CHECK32(what, got, gold, tol) \
    CHECK(qt_test_rel_err_f32(what, (got).data(), gold, N_OF(gold), tol) <= tol)

TEST_GROUP(GoldAttnMoe) {};

TEST(GoldAttnMoe, Rope)
{
    const int64_t b = GOLD_ROPE_C0_B, S = GOLD_ROPE_C0_S, H = GOLD_ROPE_C0_H,
                  hd = GOLD_ROPE_C0_HD, R = GOLD_ROPE_C0_R;
    const size_t n = N_OF(gold_rope_c0_x);
    LONGS_EQUAL(b * S * H * hd, n);
    vd t64(S * R), y64(n), dx64(n, 0.0);
    qt_rope_table_f64(t64.data(), S, R, GOLD_ROPE_C0_THETA);
    CHECK64("rope table f64", t64, gold_rope_c0_table);
    qt_rope_fwd_f64(y64.data(), gold_rope_c0_x, t64.data(), b, S, H, hd, R);
    qt_rope_bwd_f64(dx64.data(), gold_rope_c0_dy, t64.data(), b, S, H, hd, R);
    CHECK64("rope y f64", y64, gold_rope_c0_y);
    CHECK64("rope dx f64", dx64, gold_rope_c0_dx);

    vf t32(S * R), x = gf(gold_rope_c0_x, n), dy = gf(gold_rope_c0_dy, n), y32(n), dx32(n, 0.f);
    qt_rope_table(t32.data(), S, R, GOLD_ROPE_C0_THETA);
    CHECK32("rope table f32", t32, gold_rope_c0_table, TOL32);
    qt_rope_fwd(y32.data(), x.data(), t32.data(), b, S, H, hd, R);
    qt_rope_bwd(dx32.data(), dy.data(), t32.data(), b, S, H, hd, R);
    CHECK32("rope y f32", y32, gold_rope_c0_y, TOL32);
    CHECK32("rope dx f32", dx32, gold_rope_c0_dx, TOL32);
}

TEST(GoldAttnMoe, Attention)
{
    const int64_t b = GOLD_ATTN_C0_B, S = GOLD_ATTN_C0_S, Hq = GOLD_ATTN_C0_HQ,
                  Hkv = GOLD_ATTN_C0_HKV, hd = GOLD_ATTN_C0_HD;
    const size_t nq = N_OF(gold_attn_c0_q), nk = N_OF(gold_attn_c0_k);
    LONGS_EQUAL(b * S * Hq * hd, nq);
    LONGS_EQUAL(b * S * Hkv * hd, nk);
    vd o(nq), lse(b * Hq * S), sc(2 * S), dq(nq, 0.), dk(nk, 0.), dv(nk, 0.);
    qt_attn_fwd_f64(o.data(), lse.data(), gold_attn_c0_q, gold_attn_c0_k, gold_attn_c0_v,
                    sc.data(), b, S, Hq, Hkv, hd, GOLD_ATTN_C0_SCALE);
    CHECK64("attn o f64", o, gold_attn_c0_o);
    CHECK64("attn lse f64", lse, gold_attn_c0_lse);
    qt_attn_bwd_f64(dq.data(), dk.data(), dv.data(), gold_attn_c0_do, gold_attn_c0_q,
                    gold_attn_c0_k, gold_attn_c0_v, o.data(), lse.data(), sc.data(), b, S, Hq,
                    Hkv, hd, GOLD_ATTN_C0_SCALE);
    CHECK64("attn dq f64", dq, gold_attn_c0_dq);
    CHECK64("attn dk f64", dk, gold_attn_c0_dk);
    CHECK64("attn dv f64", dv, gold_attn_c0_dv);

    vf q = gf(gold_attn_c0_q, nq), k = gf(gold_attn_c0_k, nk), v = gf(gold_attn_c0_v, nk),
       d_o = gf(gold_attn_c0_do, nq), of(nq), lf(lse.size()), scf(2 * S), dqf(nq, 0.f),
       dkf(nk, 0.f), dvf(nk, 0.f);
    qt_attn_fwd(of.data(), lf.data(), q.data(), k.data(), v.data(), scf.data(), b, S, Hq, Hkv,
                hd, (float)GOLD_ATTN_C0_SCALE);
    CHECK32("attn o f32", of, gold_attn_c0_o, TOL32_ATTN);
    CHECK32("attn lse f32", lf, gold_attn_c0_lse, TOL32_ATTN);
    qt_attn_bwd(dqf.data(), dkf.data(), dvf.data(), d_o.data(), q.data(), k.data(), v.data(),
                of.data(), lf.data(), scf.data(), b, S, Hq, Hkv, hd, (float)GOLD_ATTN_C0_SCALE);
    CHECK32("attn dq f32", dqf, gold_attn_c0_dq, TOL32_ATTN);
    CHECK32("attn dk f32", dkf, gold_attn_c0_dk, TOL32_ATTN);
    CHECK32("attn dv f32", dvf, gold_attn_c0_dv, TOL32_ATTN);
}

// Case c1: head dim 32, a multiple of 16, so qt_attn_fwd (given scratch) accumulates o in
// 16-wide register slices and qt_attn_bwd_n (given QT_ATTN_BWD_SCRATCH(S)) runs the 4-row
// blocked backward; S = 9 adds a one-row tail and rows of >= 8 keys (the eight-key score
// batches). Tolerances as case c0: 1e-10 in double, 5e-5 in float (TOL32_ATTN), relative to
// each tensor's max |value|.
TEST(GoldAttnMoe, AttentionRegisterPath)
{
    const int64_t b = GOLD_ATTN_C1_B, S = GOLD_ATTN_C1_S, Hq = GOLD_ATTN_C1_HQ,
                  Hkv = GOLD_ATTN_C1_HKV, hd = GOLD_ATTN_C1_HD;
    const size_t nq = N_OF(gold_attn_c1_q), nk = N_OF(gold_attn_c1_k);
    LONGS_EQUAL(0, hd % 16);  // the condition that selects the register paths
    LONGS_EQUAL(b * S * Hq * hd, nq);
    LONGS_EQUAL(b * S * Hkv * hd, nk);
    CHECK(S % QT_ATTN_BWD_ROWS != 0 && S > QT_ATTN_BWD_ROWS && S >= 9);
    const int64_t nsc = QT_ATTN_BWD_SCRATCH(S);
    vd o(nq), lse(b * Hq * S), sc(nsc), dq(nq, 0.), dk(nk, 0.), dv(nk, 0.);
    qt_attn_fwd_f64(o.data(), lse.data(), gold_attn_c1_q, gold_attn_c1_k, gold_attn_c1_v,
                    sc.data(), b, S, Hq, Hkv, hd, GOLD_ATTN_C1_SCALE);
    CHECK64("attn c1 o f64", o, gold_attn_c1_o);
    CHECK64("attn c1 lse f64", lse, gold_attn_c1_lse);
    qt_attn_bwd_n_f64(dq.data(), dk.data(), dv.data(), gold_attn_c1_do, gold_attn_c1_q,
                      gold_attn_c1_k, gold_attn_c1_v, o.data(), lse.data(), sc.data(), nsc, b,
                      S, Hq, Hkv, hd, GOLD_ATTN_C1_SCALE);
    CHECK64("attn c1 dq f64", dq, gold_attn_c1_dq);
    CHECK64("attn c1 dk f64", dk, gold_attn_c1_dk);
    CHECK64("attn c1 dv f64", dv, gold_attn_c1_dv);

    vf q = gf(gold_attn_c1_q, nq), k = gf(gold_attn_c1_k, nk), v = gf(gold_attn_c1_v, nk),
       d_o = gf(gold_attn_c1_do, nq), of(nq), lf(lse.size()), scf(nsc), dqf(nq, 0.f),
       dkf(nk, 0.f), dvf(nk, 0.f);
    qt_attn_fwd(of.data(), lf.data(), q.data(), k.data(), v.data(), scf.data(), b, S, Hq, Hkv,
                hd, (float)GOLD_ATTN_C1_SCALE);
    CHECK32("attn c1 o f32", of, gold_attn_c1_o, TOL32_ATTN);
    CHECK32("attn c1 lse f32", lf, gold_attn_c1_lse, TOL32_ATTN);
    qt_attn_bwd_n(dqf.data(), dkf.data(), dvf.data(), d_o.data(), q.data(), k.data(), v.data(),
                  of.data(), lf.data(), scf.data(), nsc, b, S, Hq, Hkv, hd,
                  (float)GOLD_ATTN_C1_SCALE);
    CHECK32("attn c1 dq f32", dqf, gold_attn_c1_dq, TOL32_ATTN);
    CHECK32("attn c1 dk f32", dkf, gold_attn_c1_dk, TOL32_ATTN);
    CHECK32("attn c1 dv f32", dvf, gold_attn_c1_dv, TOL32_ATTN);
}

// One routing case; lb (gold lb_seq) is NULL when the case has no load-balance term.
static void check_route(const char *name, const double *logits, const double *g_idx,
                        const double *g_p, const double *g_lb, const double *g_dp,
                        const double *g_dl, int64_t T, int64_t E, int64_t k, int64_t S,
                        double c)
{
    const int64_t b = T / S;
    char what[64];
    vi idx(T * k), idxf(T * k), want = gi(g_idx, T * k);
    vd p(T * k), lb(b, 0.0), dl(T * E, 0.0);
    qt_moe_route_fwd_f64(idx.data(), p.data(), g_lb ? lb.data() : NULL, logits, T, E, k, S, c);
    CHECK(idx == want);
    snprintf(what, sizeof what, "%s p f64", name);
    CHECK(qt_test_rel_err_f64(what, p.data(), g_p, T * k, TOL64) <= TOL64);
    if (g_lb) {
        snprintf(what, sizeof what, "%s lb f64", name);
        CHECK(qt_test_rel_err_f64(what, lb.data(), g_lb, b, TOL64) <= TOL64);
    }
    qt_moe_route_bwd_f64(dl.data(), g_dp, logits, idx.data(), p.data(), T, E, k, S, c);
    snprintf(what, sizeof what, "%s dlogits f64", name);
    CHECK(qt_test_rel_err_f64(what, dl.data(), g_dl, T * E, TOL64) <= TOL64);

    vf lf = gf(logits, T * E), dpf = gf(g_dp, T * k), pf(T * k), lbf(b, 0.f), dlf(T * E, 0.f);
    qt_moe_route_fwd(idxf.data(), pf.data(), g_lb ? lbf.data() : NULL, lf.data(), T, E, k, S,
                     (float)c);
    CHECK(idxf == want);
    snprintf(what, sizeof what, "%s p f32", name);
    CHECK(qt_test_rel_err_f32(what, pf.data(), g_p, T * k, TOL32) <= TOL32);
    if (g_lb) {
        snprintf(what, sizeof what, "%s lb f32", name);
        CHECK(qt_test_rel_err_f32(what, lbf.data(), g_lb, b, TOL32) <= TOL32);
    }
    qt_moe_route_bwd(dlf.data(), dpf.data(), lf.data(), idxf.data(), pf.data(), T, E, k, S,
                     (float)c);
    snprintf(what, sizeof what, "%s dlogits f32", name);
    CHECK(qt_test_rel_err_f32(what, dlf.data(), g_dl, T * E, TOL32) <= TOL32);
}

TEST(GoldAttnMoe, MoeRouteNoLoadBalance)
{
    check_route("route c0", gold_moe_route_c0_logits, gold_moe_route_c0_idx,
                gold_moe_route_c0_p, NULL, gold_moe_route_c0_dp, gold_moe_route_c0_dlogits,
                GOLD_MOE_ROUTE_C0_T, GOLD_MOE_ROUTE_C0_E, GOLD_MOE_ROUTE_C0_K,
                GOLD_MOE_ROUTE_C0_S, GOLD_MOE_ROUTE_C0_C);
}

TEST(GoldAttnMoe, MoeRouteLoadBalance)
{
    check_route("route c1", gold_moe_route_c1_logits, gold_moe_route_c1_idx,
                gold_moe_route_c1_p, gold_moe_route_c1_lb_seq, gold_moe_route_c1_dp,
                gold_moe_route_c1_dlogits, GOLD_MOE_ROUTE_C1_T, GOLD_MOE_ROUTE_C1_E,
                GOLD_MOE_ROUTE_C1_K, GOLD_MOE_ROUTE_C1_S, GOLD_MOE_ROUTE_C1_C);
}

TEST(GoldAttnMoe, ExpertFfn)
{
    const int64_t T = GOLD_EXPERT_FFN_C0_T, k = GOLD_EXPERT_FFN_C0_K, E = GOLD_EXPERT_FFN_C0_E,
                  d = GOLD_EXPERT_FFN_C0_D, f = GOLD_EXPERT_FFN_C0_F, S = GOLD_EXPERT_FFN_C0_S;
    const int64_t ny = T * k * d, ngu = T * k * 2 * f, nsc = T * k * (d + f);
    LONGS_EQUAL(ny, N_OF(gold_expert_ffn_c0_y));
    vi idx = gi(gold_expert_ffn_c0_idx, T * k);
    vd y(ny), gu(ngu), sc(nsc), dx(T * d, 0.), dwg(N_OF(gold_expert_ffn_c0_w_gu), 0.),
       dwd(N_OF(gold_expert_ffn_c0_w_down), 0.);
    qt_expert_ffn_fwd_f64(y.data(), gu.data(), gold_expert_ffn_c0_x, idx.data(),
                          gold_expert_ffn_c0_w_gu, gold_expert_ffn_c0_w_down, sc.data(), T, k,
                          E, d, f, nsc);
    CHECK64("ffn y f64", y, gold_expert_ffn_c0_y);
    CHECK64("ffn gu f64", gu, gold_expert_ffn_c0_gu);
    qt_expert_ffn_bwd_f64(dx.data(), gold_expert_ffn_c0_dy, idx.data(), gu.data(),
                          gold_expert_ffn_c0_w_gu, gold_expert_ffn_c0_w_down, sc.data(), T, k,
                          E, d, f, nsc);
    CHECK64("ffn dx f64", dx, gold_expert_ffn_c0_dx);
    for (int64_t s = 0; s < T / S; s++) {
        vd g0(dwg.size(), 0.), g1(dwd.size(), 0.);
        qt_expert_ffn_wgrad_f64(g0.data(), g1.data(), gold_expert_ffn_c0_dy + s * S * k * d,
                                gold_expert_ffn_c0_x + s * S * d, idx.data() + s * S * k,
                                gu.data() + s * S * k * 2 * f, gold_expert_ffn_c0_w_down,
                                sc.data(), S, k, E, d, f, nsc);
        for (size_t i = 0; i < g0.size(); i++) dwg[i] += g0[i];
        for (size_t i = 0; i < g1.size(); i++) dwd[i] += g1[i];
    }
    CHECK64("ffn dw_gu f64", dwg, gold_expert_ffn_c0_dw_gu);
    CHECK64("ffn dw_down f64", dwd, gold_expert_ffn_c0_dw_down);

    vf x = gf(gold_expert_ffn_c0_x, T * d), wg = gf(gold_expert_ffn_c0_w_gu, dwg.size()),
       wd = gf(gold_expert_ffn_c0_w_down, dwd.size()), dy = gf(gold_expert_ffn_c0_dy, ny),
       yf(ny), guf(ngu), scf(nsc), dxf(T * d, 0.f), dwgf(dwg.size(), 0.f), dwdf(dwd.size(), 0.f);
    qt_expert_ffn_fwd(yf.data(), guf.data(), x.data(), idx.data(), wg.data(), wd.data(),
                      scf.data(), T, k, E, d, f, nsc);
    CHECK32("ffn y f32", yf, gold_expert_ffn_c0_y, TOL32);
    CHECK32("ffn gu f32", guf, gold_expert_ffn_c0_gu, TOL32);
    qt_expert_ffn_bwd(dxf.data(), dy.data(), idx.data(), guf.data(), wg.data(), wd.data(),
                      scf.data(), T, k, E, d, f, nsc);
    CHECK32("ffn dx f32", dxf, gold_expert_ffn_c0_dx, TOL32);
    for (int64_t s = 0; s < T / S; s++) {
        vf g0(dwg.size(), 0.f), g1(dwd.size(), 0.f);
        qt_expert_ffn_wgrad(g0.data(), g1.data(), dy.data() + s * S * k * d,
                            x.data() + s * S * d, idx.data() + s * S * k,
                            guf.data() + s * S * k * 2 * f, wd.data(), scf.data(), S, k, E, d,
                            f, nsc);
        for (size_t i = 0; i < g0.size(); i++) dwgf[i] += g0[i];
        for (size_t i = 0; i < g1.size(); i++) dwdf[i] += g1[i];
    }
    CHECK32("ffn dw_gu f32", dwgf, gold_expert_ffn_c0_dw_gu, TOL32);
    CHECK32("ffn dw_down f32", dwdf, gold_expert_ffn_c0_dw_down, TOL32);
}

TEST(GoldAttnMoe, MoeCombine)
{
    const int64_t T = GOLD_MOE_COMBINE_C0_T, k = GOLD_MOE_COMBINE_C0_K, d = GOLD_MOE_COMBINE_C0_D;
    vd out(T * d), dp(T * k, 0.), dy(T * k * d, 0.);
    qt_moe_combine_fwd_f64(out.data(), gold_moe_combine_c0_p, gold_moe_combine_c0_y, T, k, d);
    CHECK64("combine out f64", out, gold_moe_combine_c0_out);
    qt_moe_combine_bwd_f64(dp.data(), dy.data(), gold_moe_combine_c0_dout, gold_moe_combine_c0_p,
                           gold_moe_combine_c0_y, T, k, d);
    CHECK64("combine dp f64", dp, gold_moe_combine_c0_dp);
    CHECK64("combine dy f64", dy, gold_moe_combine_c0_dy);

    vf p = gf(gold_moe_combine_c0_p, T * k), y = gf(gold_moe_combine_c0_y, T * k * d),
       dout = gf(gold_moe_combine_c0_dout, T * d), of(T * d), dpf(T * k, 0.f),
       dyf(T * k * d, 0.f);
    qt_moe_combine_fwd(of.data(), p.data(), y.data(), T, k, d);
    CHECK32("combine out f32", of, gold_moe_combine_c0_out, TOL32);
    qt_moe_combine_bwd(dpf.data(), dyf.data(), dout.data(), p.data(), y.data(), T, k, d);
    CHECK32("combine dp f32", dpf, gold_moe_combine_c0_dp, TOL32);
    CHECK32("combine dy f32", dyf, gold_moe_combine_c0_dy, TOL32);
}
