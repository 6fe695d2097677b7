// test_gold_basic.cpp - basic kernels against the float64 PyTorch goldens
// (tests/golden/kernels/{matmul,rmsnorm,embed,swiglu,sigmoid_gate,xent}.h, SPEC.md s.1).
//
// Two paths per golden:
//  - the double kernels (*_f64) called directly: tolerance 1e-10 relative to the tensor's
//    max |value| (SPEC.md: same math in double, only rounding-order differences);
//  - the float kernels through the op wrappers of ops_basic.c, run on a tiny hand-built
//    plan (arena + tensors table + op records laid out exactly as qt_ops.h says):
//    tolerance 2e-5 relative (SPEC.md; float rounding through short reductions).
// WGRAD goldens are the sum over sequences; the test calls the wgrad wrapper once per
// sequence on a zeroed buffer and sums the leaves in double, as the interpreter's tree does.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <vector>
#include "CppUTest/TestHarness.h"
#include "qt_test_util.h"

extern "C" {
#include "qt_ops.h"
#include "ops/qt_op_fns.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/xent.h"
}

#include "golden/kernels/embed.h"
#include "golden/kernels/matmul.h"
#include "golden/kernels/rmsnorm.h"
#include "golden/kernels/sigmoid_gate.h"
#include "golden/kernels/swiglu.h"
#include "golden/kernels/xent.h"

namespace {

const double TOL64 = 1e-10;
const double TOL32 = 2e-5;

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

alignas(64) unsigned char g_arena[1 << 20];

// A plan with only what the wrappers read: arena, tensors (offset, dtype), op records.
struct TinyPlan {
    qt_tensor t[32];
    qt_plan plan;
    qt_ctx ctx;
    int64_t off = 0;

    TinyPlan()
    {
        memset(t, 0, sizeof t);
        memset(&plan, 0, sizeof plan);
        memset(g_arena, 0xff, sizeof g_arena); // NaN fill: unwritten outputs show up
        plan.arena = g_arena;
        plan.arena_bytes = (int64_t)sizeof g_arena;
        plan.tensors = t;
        memset(&ctx, 0, sizeof ctx);
        ctx.plan = &plan;
        ctx.arena = g_arena;
    }
    int32_t add(int64_t numel, int dtype = QT_F32)
    {
        int32_t id = plan.n_tensors++;
        t[id].dtype = (uint8_t)dtype;
        t[id].ndim = 1;
        t[id].shape[0] = t[id].global_shape[0] = numel;
        t[id].numel = numel;
        t[id].offset = off;
        t[id].role = QT_ROLE_ACT;
        off += (numel * 4 + 63) / 64 * 64;
        return id;
    }
    int32_t add_f(const double *src, int64_t n)
    {
        int32_t id = add(n);
        qt_test_to_f32(f(id), src, (size_t)n);
        return id;
    }
    int32_t add_i(const double *src, int64_t n)
    {
        int32_t id = add(n, QT_I32);
        qt_test_to_i32(qt_i32(&ctx, id), src, (size_t)n);
        return id;
    }
    float *f(int32_t id) { return qt_f32(&ctx, id); }
    int32_t *i(int32_t id) { return qt_i32(&ctx, id); }
    void zero(int32_t id)
    {
        qt_op z = op(QT_OP_ZERO);
        z.t[0] = id;
        z.a[0] = t[id].numel;
        qt_op_zero(&z, &ctx);
    }
    static qt_op op(int kind)
    {
        qt_op o;
        memset(&o, 0, sizeof o);
        o.kind = (uint16_t)kind;
        for (int k = 0; k < QT_OP_MAX_T; k++) o.t[k] = QT_NONE;
        return o;
    }
};


// Calls wgrad for every sequence on a zeroed leaf and sums the leaves in double.
std::vector<double> wgrad_sum(TinyPlan &P, const qt_op &o, qt_wgrad_fn fn, int64_t nseq,
                              int64_t n)
{
    std::vector<double> sum((size_t)n, 0.0);
    std::vector<float> leaf((size_t)n);
    for (int64_t s = 0; s < nseq; s++) {
        for (auto &v : leaf) v = 0.0f;
        float *const dw[2] = {leaf.data(), nullptr};
        fn(&o, &P.ctx, s, dw);
        for (int64_t k = 0; k < n; k++) sum[(size_t)k] += leaf[(size_t)k];
    }
    return sum;
}

} // namespace

TEST_GROUP(GoldBasic) {};

TEST(GoldBasic, Matmul)
{
    const int64_t M = GOLD_MATMUL_C0_M, N = GOLD_MATMUL_C0_N, K = GOLD_MATMUL_C0_K, S = GOLD_MATMUL_C0_S;
    // double kernels
    std::vector<double> y(M * N), dx(M * K, 0.0), dw(N * K, 0.0);
    qt_matmul_fwd_f64(y.data(), gold_matmul_c0_x, gold_matmul_c0_w, M, N, K);
    qt_matmul_bwd_data_f64(dx.data(), gold_matmul_c0_dy, gold_matmul_c0_w, M, N, K);
    qt_matmul_wgrad_f64(dw.data(), gold_matmul_c0_dy, gold_matmul_c0_x, M, N, K);
    CHECK(qt_test_rel_err_f64("matmul y f64", y.data(), gold_matmul_c0_y, y.size(), TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("matmul dx f64", dx.data(), gold_matmul_c0_dx, dx.size(), TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("matmul dw f64", dw.data(), gold_matmul_c0_dw, dw.size(), TOL64) <= TOL64);

    // float kernels through the wrappers
    TinyPlan P;
    int32_t tx = P.add_f(gold_matmul_c0_x, M * K), tw = P.add_f(gold_matmul_c0_w, N * K);
    int32_t ty = P.add(M * N), tdy = P.add_f(gold_matmul_c0_dy, M * N), tdx = P.add(M * K);
    qt_op o = TinyPlan::op(QT_OP_MATMUL_FWD);
    o.t[0] = ty; o.t[1] = tx; o.t[2] = tw; o.a[0] = M; o.a[1] = N; o.a[2] = K;
    qt_op_matmul_fwd(&o, &P.ctx);
    CHECK(qt_test_rel_err_f32("matmul y", P.f(ty), gold_matmul_c0_y, (size_t)(M * N), TOL32) <= TOL32);
    P.zero(tdx);
    o = TinyPlan::op(QT_OP_MATMUL_BWD_DATA);
    o.t[0] = tdx; o.t[1] = tdy; o.t[2] = tw; o.a[0] = M; o.a[1] = N; o.a[2] = K;
    qt_op_matmul_bwd_data(&o, &P.ctx);
    CHECK(qt_test_rel_err_f32("matmul dx", P.f(tdx), gold_matmul_c0_dx, (size_t)(M * K), TOL32) <= TOL32);
    o = TinyPlan::op(QT_OP_MATMUL_WGRAD);
    o.flags = QT_OPF_WGRAD;
    o.t[0] = tdy; o.t[1] = tx; o.t[2] = tw; o.a[0] = M; o.a[1] = N; o.a[2] = K; o.a[3] = S;
    o.a[8] = 0; o.a[9] = -1;
    std::vector<double> sw = wgrad_sum(P, o, qt_op_matmul_wgrad, M / S, N * K);
    CHECK(qt_test_rel_err_f64("matmul dw", sw.data(), gold_matmul_c0_dw, sw.size(), TOL32) <= TOL32);
}

static void rmsnorm_gold(int64_t R, int64_t n, int64_t S, int flags, double eps, const double *x,
                         const double *w, const double *gy, const double *grstd, const double *dy,
                         const double *gdx, const double *gdw)
{
    std::vector<double> y(R * n), rstd(R), dx(R * n, 0.0), dw(n, 0.0);
    qt_rmsnorm_fwd_f64(y.data(), rstd.data(), x, w, R, n, n, n, flags, eps);
    qt_rmsnorm_bwd_f64(dx.data(), dy, x, w, rstd.data(), R, n, n, n, flags);
    qt_rmsnorm_wgrad_f64(dw.data(), dy, x, rstd.data(), R, n, n, n);
    CHECK(qt_test_rel_err_f64("rmsnorm y f64", y.data(), gy, y.size(), TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("rmsnorm rstd f64", rstd.data(), grstd, rstd.size(), TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("rmsnorm dx f64", dx.data(), gdx, dx.size(), TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("rmsnorm dw f64", dw.data(), gdw, dw.size(), TOL64) <= TOL64);

    TinyPlan P;
    int32_t tx = P.add_f(x, R * n), tw = P.add_f(w, n), ty = P.add(R * n), tr = P.add(R);
    int32_t tdy = P.add_f(dy, R * n), tdx = P.add(R * n);
    qt_op o = TinyPlan::op(QT_OP_RMSNORM_FWD);
    o.t[0] = ty; o.t[1] = tr; o.t[2] = tx; o.t[3] = tw;
    o.a[0] = R; o.a[1] = n; o.a[2] = n; o.a[3] = n; o.a[4] = flags; o.f[0] = (float)eps;
    qt_op_rmsnorm_fwd(&o, &P.ctx);
    CHECK(qt_test_rel_err_f32("rmsnorm y", P.f(ty), gy, (size_t)(R * n), TOL32) <= TOL32);
    CHECK(qt_test_rel_err_f32("rmsnorm rstd", P.f(tr), grstd, (size_t)R, TOL32) <= TOL32);
    P.zero(tdx);
    qt_op b = o;
    b.kind = QT_OP_RMSNORM_BWD;
    b.t[0] = tdx; b.t[1] = tdy; b.t[2] = tx; b.t[3] = tw; b.t[4] = tr;
    qt_op_rmsnorm_bwd(&b, &P.ctx);
    CHECK(qt_test_rel_err_f32("rmsnorm dx", P.f(tdx), gdx, (size_t)(R * n), TOL32) <= TOL32);
    qt_op g = o;
    g.kind = QT_OP_RMSNORM_WGRAD;
    g.flags = QT_OPF_WGRAD;
    g.t[0] = tdy; g.t[1] = tx; g.t[2] = tr; g.t[3] = tw; g.a[5] = S; g.a[8] = 0; g.a[9] = -1;
    std::vector<double> sw = wgrad_sum(P, g, qt_op_rmsnorm_wgrad, R / S, n);
    CHECK(qt_test_rel_err_f64("rmsnorm dw", sw.data(), gdw, sw.size(), TOL32) <= TOL32);
}

TEST(GoldBasic, RmsnormZeroCentred)
{
    rmsnorm_gold(GOLD_RMSNORM_C0_R, GOLD_RMSNORM_C0_N, GOLD_RMSNORM_C0_S, GOLD_RMSNORM_C0_FLAGS,
                 GOLD_RMSNORM_C0_EPS, gold_rmsnorm_c0_x, gold_rmsnorm_c0_w, gold_rmsnorm_c0_y,
                 gold_rmsnorm_c0_rstd, gold_rmsnorm_c0_dy, gold_rmsnorm_c0_dx, gold_rmsnorm_c0_dw);
}

TEST(GoldBasic, RmsnormPlain)
{
    rmsnorm_gold(GOLD_RMSNORM_C1_R, GOLD_RMSNORM_C1_N, GOLD_RMSNORM_C1_S, GOLD_RMSNORM_C1_FLAGS,
                 GOLD_RMSNORM_C1_EPS, gold_rmsnorm_c1_x, gold_rmsnorm_c1_w, gold_rmsnorm_c1_y,
                 gold_rmsnorm_c1_rstd, gold_rmsnorm_c1_dy, gold_rmsnorm_c1_dx, gold_rmsnorm_c1_dw);
}

TEST(GoldBasic, Embed)
{
    const int64_t T = GOLD_EMBED_C0_T, d = GOLD_EMBED_C0_D, V = GOLD_EMBED_C0_V, S = GOLD_EMBED_C0_S;
    std::vector<int32_t> tok((size_t)T);
    qt_test_to_i32(tok.data(), gold_embed_c0_tokens, (size_t)T);
    std::vector<double> x(T * d), dw(V * d, 0.0);
    qt_embed_fwd_f64(x.data(), tok.data(), gold_embed_c0_w, T, d, V);
    qt_embed_wgrad_f64(dw.data(), gold_embed_c0_dx, tok.data(), T, d, V);
    CHECK(qt_test_rel_err_f64("embed x f64", x.data(), gold_embed_c0_x, x.size(), TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("embed dw f64", dw.data(), gold_embed_c0_dw, dw.size(), TOL64) <= TOL64);

    TinyPlan P;
    int32_t tt = P.add_i(gold_embed_c0_tokens, T), tw = P.add_f(gold_embed_c0_w, V * d);
    int32_t tx = P.add(T * d), tdx = P.add_f(gold_embed_c0_dx, T * d);
    qt_op o = TinyPlan::op(QT_OP_EMBED_FWD);
    o.t[0] = tx; o.t[1] = tt; o.t[2] = tw; o.a[0] = T; o.a[1] = d; o.a[2] = V;
    qt_op_embed_fwd(&o, &P.ctx);
    CHECK(qt_test_rel_err_f32("embed x", P.f(tx), gold_embed_c0_x, (size_t)(T * d), 0.0) <= 0.0);
    qt_op g = TinyPlan::op(QT_OP_EMBED_WGRAD);
    g.flags = QT_OPF_WGRAD;
    g.t[0] = tdx; g.t[1] = tt; g.t[2] = tw; g.a[0] = T; g.a[1] = d; g.a[2] = V; g.a[3] = S;
    g.a[8] = 0; g.a[9] = -1;
    std::vector<double> sw = wgrad_sum(P, g, qt_op_embed_wgrad, T / S, V * d);
    CHECK(qt_test_rel_err_f64("embed dw", sw.data(), gold_embed_c0_dw, sw.size(), TOL32) <= TOL32);
}

TEST(GoldBasic, Swiglu)
{
    const int64_t n = GOLD_SWIGLU_C0_N;
    std::vector<double> h(n), da(n, 0.0), du(n, 0.0);
    qt_swiglu_fwd_f64(h.data(), gold_swiglu_c0_a, gold_swiglu_c0_u, n);
    qt_swiglu_bwd_f64(da.data(), du.data(), gold_swiglu_c0_dh, gold_swiglu_c0_a, gold_swiglu_c0_u, n);
    CHECK(qt_test_rel_err_f64("swiglu h f64", h.data(), gold_swiglu_c0_h, (size_t)n, TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("swiglu da f64", da.data(), gold_swiglu_c0_da, (size_t)n, TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("swiglu du f64", du.data(), gold_swiglu_c0_du, (size_t)n, TOL64) <= TOL64);

    TinyPlan P;
    int32_t ta = P.add_f(gold_swiglu_c0_a, n), tu = P.add_f(gold_swiglu_c0_u, n), th = P.add(n);
    int32_t tdh = P.add_f(gold_swiglu_c0_dh, n), tda = P.add(n), tdu = P.add(n);
    qt_op o = TinyPlan::op(QT_OP_SWIGLU_FWD);
    o.t[0] = th; o.t[1] = ta; o.t[2] = tu; o.a[0] = n;
    qt_op_swiglu_fwd(&o, &P.ctx);
    CHECK(qt_test_rel_err_f32("swiglu h", P.f(th), gold_swiglu_c0_h, (size_t)n, TOL32) <= TOL32);
    P.zero(tda);
    P.zero(tdu);
    qt_op b = TinyPlan::op(QT_OP_SWIGLU_BWD);
    b.t[0] = tda; b.t[1] = tdu; b.t[2] = tdh; b.t[3] = ta; b.t[4] = tu; b.a[0] = n;
    qt_op_swiglu_bwd(&b, &P.ctx);
    CHECK(qt_test_rel_err_f32("swiglu da", P.f(tda), gold_swiglu_c0_da, (size_t)n, TOL32) <= TOL32);
    CHECK(qt_test_rel_err_f32("swiglu du", P.f(tdu), gold_swiglu_c0_du, (size_t)n, TOL32) <= TOL32);
}

static void gate_gold(int64_t T, int64_t n, int mode, int64_t hd, const double *x, const double *gate,
                      size_t ng, const double *gy, const double *dy, const double *gdx,
                      const double *gdg)
{
    std::vector<double> y(T * n), dx(T * n, 0.0), dg(ng, 0.0);
    qt_sigmoid_gate_fwd_f64(y.data(), x, gate, T, n, mode, hd);
    qt_sigmoid_gate_bwd_f64(dx.data(), dg.data(), dy, x, gate, T, n, mode, hd);
    CHECK(qt_test_rel_err_f64("gate y f64", y.data(), gy, y.size(), TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("gate dx f64", dx.data(), gdx, dx.size(), TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("gate dgate f64", dg.data(), gdg, dg.size(), TOL64) <= TOL64);

    TinyPlan P;
    int32_t tx = P.add_f(x, T * n), tg = P.add_f(gate, (int64_t)ng), ty = P.add(T * n);
    int32_t tdy = P.add_f(dy, T * n), tdx = P.add(T * n), tdg = P.add((int64_t)ng);
    qt_op o = TinyPlan::op(QT_OP_SIGMOID_GATE_FWD);
    o.t[0] = ty; o.t[1] = tx; o.t[2] = tg; o.a[0] = T; o.a[1] = n; o.a[2] = mode; o.a[3] = hd;
    qt_op_sigmoid_gate_fwd(&o, &P.ctx);
    CHECK(qt_test_rel_err_f32("gate y", P.f(ty), gy, (size_t)(T * n), TOL32) <= TOL32);
    P.zero(tdx);
    P.zero(tdg);
    qt_op b = o;
    b.kind = QT_OP_SIGMOID_GATE_BWD;
    b.t[0] = tdx; b.t[1] = tdg; b.t[2] = tdy; b.t[3] = tx; b.t[4] = tg;
    qt_op_sigmoid_gate_bwd(&b, &P.ctx);
    CHECK(qt_test_rel_err_f32("gate dx", P.f(tdx), gdx, (size_t)(T * n), TOL32) <= TOL32);
    CHECK(qt_test_rel_err_f32("gate dgate", P.f(tdg), gdg, ng, TOL32) <= TOL32);
}

TEST(GoldBasic, SigmoidGateHeads)
{
    gate_gold(GOLD_SIGMOID_GATE_C0_T, GOLD_SIGMOID_GATE_C0_N, GOLD_SIGMOID_GATE_C0_MODE,
              GOLD_SIGMOID_GATE_C0_HD, gold_sigmoid_gate_c0_x, gold_sigmoid_gate_c0_gate,
              NELEM(gold_sigmoid_gate_c0_gate), gold_sigmoid_gate_c0_y, gold_sigmoid_gate_c0_dy,
              gold_sigmoid_gate_c0_dx, gold_sigmoid_gate_c0_dgate);
}

TEST(GoldBasic, SigmoidGateRow)
{
    gate_gold(GOLD_SIGMOID_GATE_C1_T, GOLD_SIGMOID_GATE_C1_N, GOLD_SIGMOID_GATE_C1_MODE, 1,
              gold_sigmoid_gate_c1_x, gold_sigmoid_gate_c1_gate, NELEM(gold_sigmoid_gate_c1_gate),
              gold_sigmoid_gate_c1_y, gold_sigmoid_gate_c1_dy, gold_sigmoid_gate_c1_dx,
              gold_sigmoid_gate_c1_dgate);
}

TEST(GoldBasic, Xent)
{
    const int64_t b = GOLD_XENT_C0_B, S = GOLD_XENT_C0_S, V = GOLD_XENT_C0_V;
    std::vector<int32_t> tg((size_t)(b * S));
    qt_test_to_i32(tg.data(), gold_xent_c0_targets, tg.size());
    std::vector<double> ls(b), dl(b * S * V);
    qt_xent_f64(ls.data(), dl.data(), gold_xent_c0_logits, tg.data(), b, S, V);
    CHECK(qt_test_rel_err_f64("xent loss f64", ls.data(), gold_xent_c0_loss_seq, ls.size(), TOL64) <= TOL64);
    CHECK(qt_test_rel_err_f64("xent dlogits f64", dl.data(), gold_xent_c0_dlogits, dl.size(), TOL64) <= TOL64);

    TinyPlan P;
    int32_t tl = P.add_f(gold_xent_c0_logits, b * S * V), tt = P.add_i(gold_xent_c0_targets, b * S);
    int32_t tls = P.add(b), tdl = P.add(b * S * V);
    qt_op o = TinyPlan::op(QT_OP_XENT);
    o.t[0] = tls; o.t[1] = tdl; o.t[2] = tl; o.t[3] = tt; o.a[0] = b; o.a[1] = S; o.a[2] = V;
    qt_op_xent(&o, &P.ctx);
    CHECK(qt_test_rel_err_f32("xent loss", P.f(tls), gold_xent_c0_loss_seq, (size_t)b, TOL32) <= TOL32);
    CHECK(qt_test_rel_err_f32("xent dlogits", P.f(tdl), gold_xent_c0_dlogits, (size_t)(b * S * V), TOL32) <= TOL32);
}
