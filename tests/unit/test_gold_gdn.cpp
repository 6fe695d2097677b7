// test_gold_gdn.cpp - the GDN kernels against the float64 PyTorch reference goldens
// (tests/golden/kernels/{gdn_conv,gdn_gates,gdn_core,gated_rmsnorm}.h, names per
// tests/golden/SPEC.md). Golden gradients are of L = sum(out * d<out>) over the whole
// batch, so weight gradients are the sum of the per-sequence WGRAD calls.
//
// Tolerances (relative to the tensor's max |value|, SPEC.md s.1): double kernels 1e-10
// (same math in float64, only rounding order differs: ~1e-15 expected); float kernels 2e-5,
// 5e-5 for gdn_core (its outputs and gradients are sums over the whole recurrence).
#include <vector>

#include "CppUTest/TestHarness.h"

#include "kernels/gated_rmsnorm.h"
#include "kernels/gdn_conv.h"
#include "kernels/gdn_core.h"
#include "kernels/gdn_gates.h"
#include "qt_test_util.h"

typedef std::vector<double> vecd;
typedef std::vector<float> vecf;

static const double TOL64 = 1e-10;
static const double TOL32 = 2e-5;
static const double TOL32_CORE = 5e-5;

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define VD(a) vecd((a), (a) + NELEM(a))

static vecf to_f(const vecd &v)
{
    vecf f(v.size());
    qt_test_to_f32(f.data(), v.data(), v.size());
    return f;
}

static void cmp64(const char *what, const vecd &got, const double *want, size_t n, double tol)
{
    LONGS_EQUAL(n, got.size());
    double e = qt_test_rel_err_f64(what, got.data(), want, n, tol);
    CHECK_TRUE_TEXT(e <= tol, what);
}

static void cmp32(const char *what, const vecf &got, const double *want, size_t n, double tol)
{
    LONGS_EQUAL(n, got.size());
    double e = qt_test_rel_err_f32(what, got.data(), want, n, tol);
    CHECK_TRUE_TEXT(e <= tol, what);
}

// ------------------------------------------------------------------ gdn_conv
#if __has_include("golden/kernels/gdn_conv.h")
#include "golden/kernels/gdn_conv.h"
TEST_GROUP(gold_gdn_conv){};

TEST(gold_gdn_conv, c0_double_and_float)
{
    const int64_t b = GOLD_GDN_CONV_C0_B, S = GOLD_GDN_CONV_C0_S, hk = GOLD_GDN_CONV_C0_HK,
                  dk = GOLD_GDN_CONV_C0_DK, hv = GOLD_GDN_CONV_C0_HV, dv = GOLD_GDN_CONV_C0_DV,
                  K = GOLD_GDN_CONV_C0_K, cc = GOLD_GDN_CONV_C0_CC,
                  wq = hk * GOLD_GDN_CONV_C0_G;
    vecd qkvz = VD(gold_gdn_conv_c0_qkvz), w = VD(gold_gdn_conv_c0_w), dc = VD(gold_gdn_conv_c0_dc);
    vecd c(b * S * cc), pre(b * S * cc), dq(qkvz.size(), 0.0), dw(w.size(), 0.0);
    qt_gdn_conv_fwd_f64(c.data(), pre.data(), qkvz.data(), w.data(), b, S, hk, dk, hv, dv, K);
    qt_gdn_conv_bwd_f64(dq.data(), pre.data(), dc.data(), w.data(), b, S, hk, dk, hv, dv, K);
    for (int64_t s = 0; s < b; s++)
        qt_gdn_conv_wgrad_f64(dw.data(), pre.data() + s * S * cc, dc.data() + s * S * cc,
                              qkvz.data() + s * S * wq, S, hk, dk, hv, dv, K);
    cmp64("conv c", c, gold_gdn_conv_c0_c, NELEM(gold_gdn_conv_c0_c), TOL64);
    cmp64("conv pre", pre, gold_gdn_conv_c0_pre, NELEM(gold_gdn_conv_c0_pre), TOL64);
    cmp64("conv dqkvz", dq, gold_gdn_conv_c0_dqkvz, NELEM(gold_gdn_conv_c0_dqkvz), TOL64);
    cmp64("conv dw", dw, gold_gdn_conv_c0_dw, NELEM(gold_gdn_conv_c0_dw), TOL64);

    vecf qf = to_f(qkvz), wf = to_f(w), dcf = to_f(dc), cf(c.size()), pf(c.size()),
         dqf(qkvz.size(), 0.0f), dwf(w.size(), 0.0f);
    qt_gdn_conv_fwd(cf.data(), pf.data(), qf.data(), wf.data(), b, S, hk, dk, hv, dv, K);
    qt_gdn_conv_bwd(dqf.data(), pf.data(), dcf.data(), wf.data(), b, S, hk, dk, hv, dv, K);
    for (int64_t s = 0; s < b; s++)
        qt_gdn_conv_wgrad(dwf.data(), pf.data() + s * S * cc, dcf.data() + s * S * cc,
                          qf.data() + s * S * wq, S, hk, dk, hv, dv, K);
    cmp32("conv c f32", cf, gold_gdn_conv_c0_c, NELEM(gold_gdn_conv_c0_c), TOL32);
    cmp32("conv pre f32", pf, gold_gdn_conv_c0_pre, NELEM(gold_gdn_conv_c0_pre), TOL32);
    cmp32("conv dqkvz f32", dqf, gold_gdn_conv_c0_dqkvz, NELEM(gold_gdn_conv_c0_dqkvz), TOL32);
    cmp32("conv dw f32", dwf, gold_gdn_conv_c0_dw, NELEM(gold_gdn_conv_c0_dw), TOL32);
}
#else
TEST_GROUP(gold_gdn_conv){};
TEST(gold_gdn_conv, golden_missing) { FAIL("tests/golden/kernels/gdn_conv.h missing: make goldens"); }
#endif

// ------------------------------------------------------------------ gdn_gates
#if __has_include("golden/kernels/gdn_gates.h")
#include "golden/kernels/gdn_gates.h"
TEST_GROUP(gold_gdn_gates){};

TEST(gold_gdn_gates, c0_double_and_float)
{
    const int64_t T = GOLD_GDN_GATES_C0_T, hk = GOLD_GDN_GATES_C0_HK, hv = GOLD_GDN_GATES_C0_HV,
                  S = GOLD_GDN_GATES_C0_S;
    vecd ba = VD(gold_gdn_gates_c0_ba), al = VD(gold_gdn_gates_c0_a_log),
         dt = VD(gold_gdn_gates_c0_dt_bias), dbeta = VD(gold_gdn_gates_c0_dbeta),
         dg = VD(gold_gdn_gates_c0_dg);
    vecd beta(T * hv), g(T * hv), dba(ba.size(), 0.0), dal(hv, 0.0), ddt(hv, 0.0);
    qt_gdn_gates_fwd_f64(beta.data(), g.data(), ba.data(), al.data(), dt.data(), T, hk, hv);
    qt_gdn_gates_bwd_f64(dba.data(), dbeta.data(), dg.data(), ba.data(), al.data(), dt.data(), T,
                         hk, hv);
    for (int64_t s = 0; s < T / S; s++)
        qt_gdn_gates_wgrad_f64(dal.data(), ddt.data(), dg.data() + s * S * hv,
                               ba.data() + s * S * 2 * hv, al.data(), dt.data(), S, hk, hv);
    cmp64("gates beta", beta, gold_gdn_gates_c0_beta, NELEM(gold_gdn_gates_c0_beta), TOL64);
    cmp64("gates g", g, gold_gdn_gates_c0_g, NELEM(gold_gdn_gates_c0_g), TOL64);
    cmp64("gates dba", dba, gold_gdn_gates_c0_dba, NELEM(gold_gdn_gates_c0_dba), TOL64);
    cmp64("gates dA_log", dal, gold_gdn_gates_c0_da_log, NELEM(gold_gdn_gates_c0_da_log), TOL64);
    cmp64("gates ddt_bias", ddt, gold_gdn_gates_c0_ddt_bias, NELEM(gold_gdn_gates_c0_ddt_bias),
          TOL64);

    vecf baf = to_f(ba), alf = to_f(al), dtf = to_f(dt), dbf = to_f(dbeta), dgf = to_f(dg);
    vecf bf(T * hv), gf(T * hv), dbaf(ba.size(), 0.0f), dalf(hv, 0.0f), ddtf(hv, 0.0f);
    qt_gdn_gates_fwd(bf.data(), gf.data(), baf.data(), alf.data(), dtf.data(), T, hk, hv);
    qt_gdn_gates_bwd(dbaf.data(), dbf.data(), dgf.data(), baf.data(), alf.data(), dtf.data(), T,
                     hk, hv);
    for (int64_t s = 0; s < T / S; s++)
        qt_gdn_gates_wgrad(dalf.data(), ddtf.data(), dgf.data() + s * S * hv,
                           baf.data() + s * S * 2 * hv, alf.data(), dtf.data(), S, hk, hv);
    cmp32("gates beta f32", bf, gold_gdn_gates_c0_beta, NELEM(gold_gdn_gates_c0_beta), TOL32);
    cmp32("gates g f32", gf, gold_gdn_gates_c0_g, NELEM(gold_gdn_gates_c0_g), TOL32);
    cmp32("gates dba f32", dbaf, gold_gdn_gates_c0_dba, NELEM(gold_gdn_gates_c0_dba), TOL32);
    cmp32("gates dA_log f32", dalf, gold_gdn_gates_c0_da_log, NELEM(gold_gdn_gates_c0_da_log),
          TOL32);
    cmp32("gates ddt_bias f32", ddtf, gold_gdn_gates_c0_ddt_bias,
          NELEM(gold_gdn_gates_c0_ddt_bias), TOL32);
}
#else
TEST_GROUP(gold_gdn_gates){};
TEST(gold_gdn_gates, golden_missing) { FAIL("tests/golden/kernels/gdn_gates.h missing: make goldens"); }
#endif

// ------------------------------------------------------------------ gdn_core
#if __has_include("golden/kernels/gdn_core.h")
#include "golden/kernels/gdn_core.h"

namespace {
struct gold_core {
    int64_t b, S, hk, dk, hv, dv, chunk;
    double qscale, l2eps;
    const double *c, *g, *beta, *o, *rq, *rk, *d_o, *dc, *dg, *dbeta;
};
}  // namespace

static void run_gold_core(const gold_core &k)
{
    const int64_t T = k.b * k.S, cc = 2 * k.hk * k.dk + k.hv * k.dv;
    const int64_t nch = (k.S + k.chunk - 1) / k.chunk;
    const size_t nc = T * cc, nh = T * k.hv, no = T * k.hv * k.dv, nr = T * k.hk;
    vecd c(k.c, k.c + nc), g(k.g, k.g + nh), beta(k.beta, k.beta + nh), d_o(k.d_o, k.d_o + no);
    vecd o(no), st(k.b * k.hv * nch * k.dk * k.dv), rq(nr), rk(nr), dc(nc, 0.0), dg(nh, 0.0),
        dbeta(nh, 0.0), scr(QT_GDN_CORE_SCRATCH(k.chunk, k.dk, k.dv));
    qt_gdn_core_fwd_f64(o.data(), st.data(), rq.data(), rk.data(), c.data(), g.data(),
                        beta.data(), k.b, k.S, k.hk, k.dk, k.hv, k.dv, k.chunk, k.qscale, k.l2eps);
    qt_gdn_core_bwd_f64(dc.data(), dg.data(), dbeta.data(), st.data(), rq.data(), rk.data(),
                        d_o.data(), c.data(), g.data(), beta.data(), scr.data(), k.b, k.S, k.hk,
                        k.dk, k.hv, k.dv, k.chunk, k.qscale, k.l2eps);
    cmp64("core o", o, k.o, no, TOL64);
    cmp64("core rq", rq, k.rq, nr, TOL64);
    cmp64("core rk", rk, k.rk, nr, TOL64);
    cmp64("core dc", dc, k.dc, nc, TOL64);
    cmp64("core dg", dg, k.dg, nh, TOL64);
    cmp64("core dbeta", dbeta, k.dbeta, nh, TOL64);

    vecf cf = to_f(c), gf = to_f(g), bf = to_f(beta), dof = to_f(d_o);
    vecf of(no), stf(st.size()), rqf(nr), rkf(nr), dcf(nc, 0.0f), dgf(nh, 0.0f), dbf(nh, 0.0f),
        scrf(scr.size());
    qt_gdn_core_fwd(of.data(), stf.data(), rqf.data(), rkf.data(), cf.data(), gf.data(), bf.data(),
                    k.b, k.S, k.hk, k.dk, k.hv, k.dv, k.chunk, (float)k.qscale, (float)k.l2eps);
    qt_gdn_core_bwd(dcf.data(), dgf.data(), dbf.data(), stf.data(), rqf.data(), rkf.data(),
                    dof.data(), cf.data(), gf.data(), bf.data(), scrf.data(), k.b, k.S, k.hk, k.dk,
                    k.hv, k.dv, k.chunk, (float)k.qscale, (float)k.l2eps);
    cmp32("core o f32", of, k.o, no, TOL32_CORE);
    cmp32("core rq f32", rqf, k.rq, nr, TOL32_CORE);
    cmp32("core rk f32", rkf, k.rk, nr, TOL32_CORE);
    cmp32("core dc f32", dcf, k.dc, nc, TOL32_CORE);
    cmp32("core dg f32", dgf, k.dg, nh, TOL32_CORE);
    cmp32("core dbeta f32", dbf, k.dbeta, nh, TOL32_CORE);
}

TEST_GROUP(gold_gdn_core){};

#define GOLD_CORE_CASE(C, c)                                                                   \
    gold_core k = {GOLD_GDN_CORE_##C##_B, GOLD_GDN_CORE_##C##_S, GOLD_GDN_CORE_##C##_HK,       \
                   GOLD_GDN_CORE_##C##_DK, GOLD_GDN_CORE_##C##_HV, GOLD_GDN_CORE_##C##_DV,     \
                   GOLD_GDN_CORE_##C##_CHUNK, GOLD_GDN_CORE_##C##_QSCALE,                       \
                   GOLD_GDN_CORE_##C##_L2EPS, gold_gdn_core_##c##_c, gold_gdn_core_##c##_g,   \
                   gold_gdn_core_##c##_beta, gold_gdn_core_##c##_o, gold_gdn_core_##c##_rq,   \
                   gold_gdn_core_##c##_rk, gold_gdn_core_##c##_do, gold_gdn_core_##c##_dc,    \
                   gold_gdn_core_##c##_dg, gold_gdn_core_##c##_dbeta}

TEST(gold_gdn_core, c0_grouped_heads_two_sequences)
{
    GOLD_CORE_CASE(C0, c0);
    LONGS_EQUAL(k.b * k.S * (2 * k.hk * k.dk + k.hv * k.dv), NELEM(gold_gdn_core_c0_c));
    run_gold_core(k);
}

TEST(gold_gdn_core, c1_single_head_partial_chunk)
{
    GOLD_CORE_CASE(C1, c1);
    LONGS_EQUAL(k.b * k.S * (2 * k.hk * k.dk + k.hv * k.dv), NELEM(gold_gdn_core_c1_c));
    run_gold_core(k);
}
#else
TEST_GROUP(gold_gdn_core){};
TEST(gold_gdn_core, golden_missing) { FAIL("tests/golden/kernels/gdn_core.h missing: make goldens"); }
#endif

// ------------------------------------------------------------------ gated_rmsnorm
#if __has_include("golden/kernels/gated_rmsnorm.h")
#include "golden/kernels/gated_rmsnorm.h"
TEST_GROUP(gold_gated_rmsnorm){};

TEST(gold_gated_rmsnorm, c0_double_and_float)
{
    const int64_t T = GOLD_GATED_RMSNORM_C0_T, hk = GOLD_GATED_RMSNORM_C0_HK,
                  dk = GOLD_GATED_RMSNORM_C0_DK, hv = GOLD_GATED_RMSNORM_C0_HV,
                  dv = GOLD_GATED_RMSNORM_C0_DV, S = GOLD_GATED_RMSNORM_C0_S,
                  wq = hk * GOLD_GATED_RMSNORM_C0_G;
    const double eps = GOLD_GATED_RMSNORM_C0_EPS;
    vecd o = VD(gold_gated_rmsnorm_c0_o), qkvz = VD(gold_gated_rmsnorm_c0_qkvz),
         w = VD(gold_gated_rmsnorm_c0_w), dy = VD(gold_gated_rmsnorm_c0_dy);
    const size_t n = o.size(), nh = T * hv;
    vecd y(n), rs(nh), d_o(n, 0.0), dq(qkvz.size(), 0.0), dw(dv, 0.0);
    qt_gated_rmsnorm_fwd_f64(y.data(), rs.data(), o.data(), qkvz.data(), w.data(), T, hk, dk, hv,
                             dv, eps);
    qt_gated_rmsnorm_bwd_f64(d_o.data(), dq.data(), rs.data(), dy.data(), o.data(), qkvz.data(),
                             w.data(), T, hk, dk, hv, dv);
    for (int64_t s = 0; s < T / S; s++)
        qt_gated_rmsnorm_wgrad_f64(dw.data(), rs.data() + s * S * hv, dy.data() + s * S * hv * dv,
                                   o.data() + s * S * hv * dv, qkvz.data() + s * S * wq, S, hk,
                                   dk, hv, dv);
    cmp64("grn y", y, gold_gated_rmsnorm_c0_y, NELEM(gold_gated_rmsnorm_c0_y), TOL64);
    cmp64("grn rstd", rs, gold_gated_rmsnorm_c0_rstd, NELEM(gold_gated_rmsnorm_c0_rstd), TOL64);
    cmp64("grn do", d_o, gold_gated_rmsnorm_c0_do, NELEM(gold_gated_rmsnorm_c0_do), TOL64);
    cmp64("grn dqkvz", dq, gold_gated_rmsnorm_c0_dqkvz, NELEM(gold_gated_rmsnorm_c0_dqkvz), TOL64);
    cmp64("grn dw", dw, gold_gated_rmsnorm_c0_dw, NELEM(gold_gated_rmsnorm_c0_dw), TOL64);

    vecf of = to_f(o), qf = to_f(qkvz), wf = to_f(w), dyf = to_f(dy), yf(n), rf(nh),
         dof(n, 0.0f), dqf(qkvz.size(), 0.0f), dwf(dv, 0.0f);
    qt_gated_rmsnorm_fwd(yf.data(), rf.data(), of.data(), qf.data(), wf.data(), T, hk, dk, hv, dv,
                         (float)eps);
    qt_gated_rmsnorm_bwd(dof.data(), dqf.data(), rf.data(), dyf.data(), of.data(), qf.data(),
                         wf.data(), T, hk, dk, hv, dv);
    for (int64_t s = 0; s < T / S; s++)
        qt_gated_rmsnorm_wgrad(dwf.data(), rf.data() + s * S * hv, dyf.data() + s * S * hv * dv,
                               of.data() + s * S * hv * dv, qf.data() + s * S * wq, S, hk, dk, hv,
                               dv);
    cmp32("grn y f32", yf, gold_gated_rmsnorm_c0_y, NELEM(gold_gated_rmsnorm_c0_y), TOL32);
    cmp32("grn rstd f32", rf, gold_gated_rmsnorm_c0_rstd, NELEM(gold_gated_rmsnorm_c0_rstd), TOL32);
    cmp32("grn do f32", dof, gold_gated_rmsnorm_c0_do, NELEM(gold_gated_rmsnorm_c0_do), TOL32);
    cmp32("grn dqkvz f32", dqf, gold_gated_rmsnorm_c0_dqkvz, NELEM(gold_gated_rmsnorm_c0_dqkvz),
          TOL32);
    cmp32("grn dw f32", dwf, gold_gated_rmsnorm_c0_dw, NELEM(gold_gated_rmsnorm_c0_dw), TOL32);
}
#else
TEST_GROUP(gold_gated_rmsnorm){};
TEST(gold_gated_rmsnorm, golden_missing) { FAIL("tests/golden/kernels/gated_rmsnorm.h missing: make goldens"); }
#endif
