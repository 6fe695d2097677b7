// test_bf16_ops.cpp - executing bf16 plans, op by op, on small hand-made plans, at 0 ulp
// (every comparison is of bits):
//  (1) the boundary (runtime/interp_bf16.c) on RUN kinds without QT_OPP_BF16: running the op
//      in a bf16 plan equals widening its bf16 tensors, running the fp32 kernel and rounding
//      what it wrote with qt_bf16_from_f32; an accumulating slot is rounded once per op; a
//      tensor named by two slots shares one staging; an fp32 plan calls the wrapper itself;
//  (2) the boundary on WGRAD kinds (the GDN gates read their parameters: staged for them);
//  (3) qt_bf16_stage_need against an independent count;
//  (4) the native bf16 wrappers (ops_bf16.c, EMBED_WGRAD in ops_basic.c) against the bf16
//      kernels plus one rounding;
//  (5) qt_validate_bf16's refusals and acceptance;
//  (6) the step ops' rounding of the masters into the bf16 compute copy (publish, ADAMW,
//      PARAM_GATHER into a bf16 window);
//  (7) the native row-block forms (ops_bf16_rows.c) against the boundary run on the same
//      kind: every byte of every tensor (and every leaf) equal, on random data with special
//      values (signed zeros, bf16 denormals, infinities, NaN, huge and tiny values), odd
//      sizes, strides with gaps, blocks that end inside a row set.
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <set>
#include <vector>
#include "CppUTest/TestHarness.h"

extern "C" {
#include "qt_plan.h"
#include "qt_ops.h"
#include "qt_err.h"
#include "ops/qt_op_fns.h"
#include "ops/qt_ops_bf16.h"
#include "runtime/qt_interp_bf16.h"
#include "runtime/qt_validate.h"
#include "runtime/qt_step.h"
#include "kernels/bf16.h"
#include "kernels/bf16_matmul.h"
#include "kernels/bf16_matmul_canon.h"
#include "kernels/bf16_rows.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/gdn_chunk.h"
#include "kernels/gdn_core.h"
#include "kernels/attention.h"
#include "kernels/gdn_gates.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/stack.h"
#include "kernels/xent.h"
}

#include "qt_test_util.h"

namespace {

typedef std::vector<float> vecf;

enum { ARENA = 1 << 20, STAGE_OFF = 1 << 19, STAGE_ELEMS = 1 << 16, MAX_T = 40 };
alignas(64) unsigned char g_a16[ARENA];
alignas(64) unsigned char g_a32[ARENA];

uint32_t bits(float f) { return qt_test_bits(f); }

uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// A float with 24 random significant bits in +-[2^-3, 2^3), so sums round in fp32 and bf16.
float rndf(uint64_t *s)
{
    const uint64_t r = xs(s);
    const float m = 1.0f + (float)(r & 0x7fffffu) / 8388608.0f;
    return ldexpf((r >> 40) & 1 ? -m : m, (int)((r >> 24) % 7) - 3);
}

// The runtime's fallback for the native row kinds (qt_ctx.bf16_boundary): the boundary of
// the op's kind.
static void hand_boundary(const qt_op *op, const qt_ctx *ctx)
{
    qt_bf16_boundary_run(&qt_kernel_table[op->kind], op, ctx);
}

static void hand_boundary_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    qt_bf16_boundary_wgrad(&qt_kernel_table[op->kind], op, ctx, seq, dw);
}

// A hand-made plan: tensors laid out from byte 0 of its arena (64-byte aligned), the fp32
// staging region at STAGE_OFF; unwritten bytes hold 0xff (NaN bits) so stray reads show.
struct Hand {
    qt_tensor t[MAX_T];
    qt_plan plan;
    qt_ctx ctx;
    unsigned char *arena;
    int64_t off = 0;

    Hand(unsigned dtype, unsigned char *a) : arena(a)
    {
        memset(t, 0, sizeof t);
        memset(&plan, 0, sizeof plan);
        memset(arena, 0xff, ARENA);
        plan.run_name = "bf16-ops-hand";
        plan.dtype = (uint8_t)dtype;
        plan.arena = arena;
        plan.arena_bytes = ARENA;
        plan.tensors = t;
        plan.n_ranks = 1;
        if (dtype == QT_BF16) {
            plan.bf16_stage_offset = STAGE_OFF;
            plan.bf16_stage_elems = STAGE_ELEMS;
        }
        memset(&ctx, 0, sizeof ctx);
        ctx.plan = &plan;
        ctx.arena = arena;
        ctx.bf16_boundary = hand_boundary;  // as the runtime sets them (runtime.c)
        ctx.bf16_boundary_wgrad = hand_boundary_wgrad;
        ctx.n_ranks = 1;
    }
    Hand(const Hand &) = delete;
    int32_t add(int64_t n, unsigned dtype, const char *name = "t")
    {
        const int32_t id = plan.n_tensors++;
        t[id].name = name;
        t[id].dtype = (uint8_t)dtype;
        t[id].role = QT_ROLE_ACT;
        t[id].ndim = 1;
        t[id].shape[0] = t[id].global_shape[0] = t[id].numel = n;
        t[id].offset = off;
        off += (n * qt_dtype_bytes(dtype) + 63) / 64 * 64;
        return id;
    }
    uint16_t *b(int32_t id) { return qt_b16(&ctx, id); }
    float *f(int32_t id) { return (float *)(void *)(arena + t[id].offset); }
    int32_t *i(int32_t id) { return qt_i32(&ctx, id); }
    // a bf16 tensor of random values (bf16 of rndf), or an fp32 one
    int32_t rand_b16(int64_t n, uint64_t *s, const char *name = "t")
    {
        const int32_t id = add(n, QT_BF16, name);
        for (int64_t k = 0; k < n; k++) b(id)[k] = qt_bf16_from_f32(rndf(s));
        return id;
    }
    int32_t rand_f32(int64_t n, uint64_t *s, const char *name = "t")
    {
        const int32_t id = add(n, QT_F32, name);
        for (int64_t k = 0; k < n; k++) f(id)[k] = rndf(s);
        return id;
    }
    // the tensor's values as fp32 (widened when bf16)
    vecf get(int32_t id)
    {
        vecf v((size_t)t[id].numel);
        for (int64_t k = 0; k < t[id].numel; k++)
            v[(size_t)k] = t[id].dtype == QT_BF16 ? qt_f32_from_bf16(b(id)[k]) : f(id)[k];
        return v;
    }
};

// The fp32 twin of a bf16 hand plan: the same tensor ids, every bf16 tensor fp32 holding
// its widened values (int32 tensors copied).
void make_twin(Hand &h16, Hand &h32)
{
    for (int32_t id = 0; id < h16.plan.n_tensors; id++) {
        const qt_tensor &s = h16.t[id];
        const int32_t j = h32.add(s.numel, s.dtype == QT_I32 ? QT_I32 : QT_F32, s.name);
        if (s.dtype == QT_I32) memcpy(h32.i(j), h16.i(id), (size_t)s.numel * 4u);
        else {
            vecf v = h16.get(id);
            memcpy(h32.f(j), v.data(), v.size() * sizeof(float));
        }
    }
}

// Every widened tensor of the plan (the reference's starting values).
std::vector<vecf> widened(Hand &h)
{
    std::vector<vecf> r;
    for (int32_t id = 0; id < h.plan.n_tensors; id++) r.push_back(h.get(id));
    return r;
}

// Elements of tensor id that differ from the reference: a bf16 tensor must hold
// qt_bf16_from_f32(ref), an fp32 (or int32) one ref's bits. Prints the first difference.
int64_t diff_tensor(const char *what, Hand &h, int32_t id, const vecf &ref)
{
    int64_t bad = 0;
    for (int64_t k = 0; k < h.t[id].numel; k++) {
        const float r = ref[(size_t)k];
        const uint32_t got = h.t[id].dtype == QT_BF16 ? h.b(id)[k] : bits(h.f(id)[k]);
        const uint32_t want = h.t[id].dtype == QT_BF16 ? qt_bf16_from_f32(r) : bits(r);
        if (got != want && !bad++)
            fprintf(stderr, "%s: tensor %d (%s) [%lld]: got 0x%08x want 0x%08x\n", what, id,
                    h.t[id].name, (long long)k, got, want);
    }
    return bad;
}

// Every tensor of the plan against its reference (read-only ones: their widened start).
int64_t diff_all(const char *what, Hand &h, const std::vector<vecf> &ref)
{
    int64_t bad = 0;
    for (int32_t id = 0; id < h.plan.n_tensors; id++) bad += diff_tensor(what, h, id, ref[(size_t)id]);
    return bad;
}

qt_op make_op(unsigned kind)
{
    qt_op o;
    memset(&o, 0, sizeof o);
    o.kind = (uint16_t)kind;
    for (int k = 0; k < QT_OP_MAX_T; k++) o.t[k] = QT_NONE;
    return o;
}

// Runs op through qt_interp_call_run in the bf16 plan and in its fp32 twin; the bf16 plan
// must equal ref rounded, the twin ref itself (an fp32 plan: the plain fp32 wrapper).
void run_both(const char *what, Hand &h16, const qt_op &op, const std::vector<vecf> &ref)
{
    Hand h32(QT_F32, g_a32);
    make_twin(h16, h32);
    const qt_kernel_entry *e = &qt_kernel_table[op.kind];
    qt_interp_call_run(e, &op, &h16.ctx);
    qt_interp_call_run(e, &op, &h32.ctx);
    char name[128];
    snprintf(name, sizeof name, "%s (bf16 plan)", what);
    LONGS_EQUAL(0, diff_all(name, h16, ref));
    snprintf(name, sizeof name, "%s (fp32 plan)", what);
    for (int32_t id = 0; id < h32.plan.n_tensors; id++) {
        int64_t bad = 0;
        for (int64_t k = 0; k < h32.t[id].numel; k++)
            if (h32.t[id].dtype != QT_I32 && bits(h32.f(id)[k]) != bits(ref[(size_t)id][(size_t)k]))
                bad++;
        if (bad) fprintf(stderr, "%s: tensor %d: %lld elements differ\n", name, id, (long long)bad);
        LONGS_EQUAL(0, bad);
    }
}

} // namespace

// ------------------------------------------------------------------ (1) the boundary, RUN

TEST_GROUP(Bf16Boundary) {};

// RMSNORM_FWD (y 'w' strided with gaps, rstd fp32 'w', x 'r', w 'p', zero-centred): bf16 plan
// == bf16(fp32 kernel on widened x, w); rstd the kernel's fp32 bits; gaps of y keep their
// bits; x and w untouched; the fp32 plan gives the kernel's bits.
TEST(Bf16Boundary, RmsnormFwdIsTheFp32KernelRoundedOnce)
{
    const int64_t R = 3, n = 37, xs_ = 41, ys = 40;
    uint64_t s = 11;
    Hand h(QT_BF16, g_a16);
    const int32_t y = h.rand_b16(R * ys, &s, "y"), rstd = h.rand_f32(R, &s, "rstd"),
                  x = h.rand_b16(R * xs_, &s, "x"), w = h.rand_b16(n, &s, "w");
    qt_op o = make_op(QT_OP_RMSNORM_FWD);
    o.t[0] = y, o.t[1] = rstd, o.t[2] = x, o.t[3] = w;
    o.a[0] = R, o.a[1] = n, o.a[2] = xs_, o.a[3] = ys, o.a[4] = QT_RMSNORM_ZERO_CENTRED;
    o.f[0] = 1e-6f;
    std::vector<vecf> ref = widened(h);
    qt_rmsnorm_fwd(ref[y].data(), ref[rstd].data(), ref[x].data(), ref[w].data(), R, n, xs_, ys,
                   QT_RMSNORM_ZERO_CENTRED, 1e-6f);
    run_both("rmsnorm_fwd", h, o, ref);
}

// RMSNORM_BWD: the accumulating dx (nonzero old values, +0 and -0 among them) starts from its
// widened old value and is rounded once: bf16(kernel(widen(dx0), ...)); rstd read as fp32.
TEST(Bf16Boundary, RmsnormBwdAccumulatesFromWidenedOldValueAndRoundsOnce)
{
    const int64_t R = 4, n = 19;
    uint64_t s = 12;
    Hand h(QT_BF16, g_a16);
    const int32_t dx = h.rand_b16(R * n, &s, "dx"), dy = h.rand_b16(R * n, &s, "dy"),
                  x = h.rand_b16(R * n, &s, "x"), w = h.rand_b16(n, &s, "w"),
                  rstd = h.rand_f32(R, &s, "rstd");
    for (int64_t k = 0; k < R * n; k += 5) h.b(dx)[k] = (k / 5) % 2 ? 0x8000 : 0x0000;
    // a zero dy row with -0 old dx: -0 + (+0 products) shows the sign rules survive
    for (int64_t k = 0; k < n; k++) h.b(dy)[k] = 0x0000;
    qt_op o = make_op(QT_OP_RMSNORM_BWD);
    o.t[0] = dx, o.t[1] = dy, o.t[2] = x, o.t[3] = w, o.t[4] = rstd;
    o.a[0] = R, o.a[1] = n, o.a[2] = n, o.a[3] = n, o.a[4] = 0;
    std::vector<vecf> ref = widened(h);
    qt_rmsnorm_bwd(ref[dx].data(), ref[dy].data(), ref[x].data(), ref[w].data(),
                   ref[rstd].data(), R, n, n, n, 0);
    run_both("rmsnorm_bwd", h, o, ref);
}

// SWIGLU_BWD with da and du the same tensor: both accumulating slots share one staging, so
// every element gets two fp32 adds and ONE rounding, bf16((d + inc_a) + inc_u); rounding
// after each add would give other bits on these data (checked, so the test can tell).
TEST(Bf16Boundary, SwigluBwdRepeatedAccumulatorSharesStagingRoundsOnce)
{
    const int64_t n = 301;
    uint64_t s = 13;
    Hand h(QT_BF16, g_a16);
    const int32_t d = h.rand_b16(n, &s, "d"), dh = h.rand_b16(n, &s, "dh"),
                  a = h.rand_b16(n, &s, "a"), u = h.rand_b16(n, &s, "u");
    qt_op o = make_op(QT_OP_SWIGLU_BWD);
    o.t[0] = d, o.t[1] = d, o.t[2] = dh, o.t[3] = a, o.t[4] = u;
    o.a[0] = n;
    LONGS_EQUAL(4 * 304, qt_bf16_stage_need(&h.plan, &qt_kernel_table[QT_OP_SWIGLU_BWD], &o));
    std::vector<vecf> ref = widened(h);
    qt_swiglu_bwd(ref[d].data(), ref[d].data(), ref[dh].data(), ref[a].data(), ref[u].data(), n);
    // the increments alone, and the twice-rounded alternative
    vecf ia((size_t)n, 0.0f), iu((size_t)n, 0.0f);
    qt_swiglu_bwd(ia.data(), iu.data(), ref[dh].data(), ref[a].data(), ref[u].data(), n);
    int twice_differs = 0;
    for (int64_t k = 0; k < n; k++) {
        const float d0 = qt_f32_from_bf16(h.b(d)[k]);
        CHECK_EQUAL(bits((d0 + ia[k]) + iu[k]), bits(ref[d][k]));
        const qt_bf16 twice = qt_bf16_from_f32(qt_f32_from_bf16(qt_bf16_from_f32(d0 + ia[k])) + iu[k]);
        twice_differs += twice != qt_bf16_from_f32(ref[d][k]);
    }
    CHECK(twice_differs > 0);
    run_both("swiglu_bwd da == du", h, o, ref);
}

// SWIGLU_BWD with distinct accumulators (the ordinary case) and ADD in place (y is a: a 'w'
// and an 'r' slot share the staging, the fp32 add reads the widened old y).
TEST(Bf16Boundary, SwigluBwdAndAddInPlace)
{
    const int64_t n = 77;
    uint64_t s = 14;
    {
        Hand h(QT_BF16, g_a16);
        const int32_t da = h.rand_b16(n, &s, "da"), du = h.rand_b16(n, &s, "du"),
                      dh = h.rand_b16(n, &s, "dh"), a = h.rand_b16(n, &s, "a"),
                      u = h.rand_b16(n, &s, "u");
        qt_op o = make_op(QT_OP_SWIGLU_BWD);
        o.t[0] = da, o.t[1] = du, o.t[2] = dh, o.t[3] = a, o.t[4] = u;
        o.a[0] = n;
        std::vector<vecf> ref = widened(h);
        qt_swiglu_bwd(ref[da].data(), ref[du].data(), ref[dh].data(), ref[a].data(),
                      ref[u].data(), n);
        run_both("swiglu_bwd", h, o, ref);
    }
    {
        Hand h(QT_BF16, g_a16);
        const int32_t y = h.rand_b16(n, &s, "y"), b = h.rand_b16(n, &s, "b");
        qt_op o = make_op(QT_OP_ADD);
        o.t[0] = y, o.t[1] = y, o.t[2] = b;
        o.a[0] = n;
        LONGS_EQUAL(80 + 80, qt_bf16_stage_need(&h.plan, &qt_kernel_table[QT_OP_ADD], &o));
        std::vector<vecf> ref = widened(h);
        qt_add(ref[y].data(), ref[y].data(), ref[b].data(), n);
        run_both("add in place", h, o, ref);
    }
}

namespace {
const qt_ctx *g_seen;
qt_stage_map g_seen_map;
int g_seen_staged;
void spy_add(const qt_op *op, const qt_ctx *ctx)
{
    g_seen = ctx;
    g_seen_staged = ctx->stage != NULL;
    if (ctx->stage) g_seen_map = *ctx->stage;
    qt_op_add(op, ctx);
}
} // namespace

// Which wrapper runs: an fp32 plan calls the kind's wrapper with the caller's context (no
// stage map); a bf16 plan calls a kind without QT_OPP_BF16 through the boundary (a copy of the
// context whose stage map lists the op's distinct bf16 tensors in slot order, at 16-float
// steps from the staging region's start), and a QT_OPP_BF16 kind directly.
TEST(Bf16Boundary, CallsTheWrapperOrTheBoundaryByPlanDtypeAndKind)
{
    qt_kernel_entry e = qt_kernel_table[QT_OP_ADD];
    e.run = spy_add;
    e.props &= ~(QT_OPP_BF16 | QT_OPP_BF16_PSTAGE);  // a kind without a native form
    const int64_t n = 17;
    uint64_t s = 15;
    {
        Hand h(QT_F32, g_a32);
        const int32_t y = h.rand_f32(n, &s), a = h.rand_f32(n, &s), b = h.rand_f32(n, &s);
        qt_op o = make_op(QT_OP_ADD);
        o.t[0] = y, o.t[1] = a, o.t[2] = b, o.a[0] = n;
        vecf ref = h.get(a);
        qt_add(ref.data(), ref.data(), h.get(b).data(), n);
        g_seen = NULL;
        qt_interp_call_run(&e, &o, &h.ctx);
        CHECK(g_seen == &h.ctx);
        LONGS_EQUAL(0, g_seen_staged);
        LONGS_EQUAL(0, diff_tensor("fp32 add", h, y, ref));
    }
    Hand h(QT_BF16, g_a16);
    const int32_t y = h.rand_b16(n, &s), a = h.rand_b16(n, &s), b = h.rand_b16(n, &s);
    qt_op o = make_op(QT_OP_ADD);
    o.t[0] = y, o.t[1] = b, o.t[2] = a, o.a[0] = n;
    g_seen = NULL;
    qt_interp_call_run(&e, &o, &h.ctx);
    CHECK(g_seen != NULL && g_seen != &h.ctx);
    LONGS_EQUAL(1, g_seen_staged);
    LONGS_EQUAL(3, g_seen_map.n);
    const float *stage = (const float *)(const void *)(g_a16 + STAGE_OFF);
    const int32_t order[3] = {y, b, a};
    for (int i = 0; i < 3; i++) {
        LONGS_EQUAL(order[i], g_seen_map.id[i]);
        CHECK(g_seen_map.at[i] == stage + 32 * i);
    }
    e.props |= QT_OPP_BF16;  // as a native kind: no boundary (the wrapper sees the caller's ctx)
    g_seen = NULL;
    qt_op z = make_op(QT_OP_ADD);
    z.t[0] = h.add(n, QT_F32), z.t[1] = h.add(n, QT_F32), z.t[2] = z.t[1], z.a[0] = n;
    qt_interp_call_run(&e, &z, &h.ctx);
    CHECK(g_seen == &h.ctx);
    LONGS_EQUAL(0, g_seen_staged);
}

// ------------------------------------------------------------------ (2) the boundary, WGRAD

// GDN_GATES_WGRAD reads its parameters (A_log, dt_bias): in a bf16 plan they are staged (the
// stage need counts all four tensors) and every sequence's leaves equal the fp32 kernel on the
// widened rows and parameters; RMSNORM_WGRAD likewise (its w slot staged, not read).
TEST(Bf16Boundary, WgradKindsReadWidenedRowsAndStagedParameters)
{
    const int64_t b = 3, S = 5, hk = 2, hv = 4, T = b * S;
    uint64_t s = 16;
    Hand h(QT_BF16, g_a16);
    const int32_t dg = h.rand_b16(T * hv, &s, "dg"), ba = h.rand_b16(T * 2 * hv, &s, "ba"),
                  al = h.rand_b16(hv, &s, "A_log"), dt = h.rand_b16(hv, &s, "dt_bias");
    qt_op o = make_op(QT_OP_GDN_GATES_WGRAD);
    o.flags = QT_OPF_WGRAD;
    o.t[0] = dg, o.t[1] = ba, o.t[2] = al, o.t[3] = dt;
    o.a[0] = T, o.a[1] = hk, o.a[2] = hv, o.a[3] = S, o.a[8] = 0, o.a[9] = 1;
    const qt_kernel_entry *e = &qt_kernel_table[QT_OP_GDN_GATES_WGRAD];
    LONGS_EQUAL(64 + 128 + 16 + 16, qt_bf16_stage_need(&h.plan, e, &o));
    std::vector<vecf> ref = widened(h);
    for (int64_t q = 0; q < b; q++) {
        vecf l0((size_t)hv, 0.0f), l1((size_t)hv, 0.0f), r0((size_t)hv, 0.0f), r1((size_t)hv, 0.0f);
        float *const dw[2] = {l0.data(), l1.data()};
        qt_interp_call_wgrad(e, &o, &h.ctx, q, dw);
        qt_gdn_gates_wgrad(r0.data(), r1.data(), ref[dg].data() + q * S * hv,
                           ref[ba].data() + q * S * 2 * hv, ref[al].data(), ref[dt].data(), S,
                           hk, hv);
        for (int64_t k = 0; k < hv; k++) {
            CHECK_EQUAL(bits(r0[k]), bits(l0[k]));
            CHECK_EQUAL(bits(r1[k]), bits(l1[k]));
        }
    }
    LONGS_EQUAL(0, diff_all("gdn_gates_wgrad inputs", h, ref));  // nothing written back
    // RMSNORM_WGRAD: rows of sequence q, w (param) staged but not read
    const int64_t n = 6, rps = 3;
    Hand g(QT_BF16, g_a16);
    const int32_t dy = g.rand_b16(2 * rps * n, &s), x = g.rand_b16(2 * rps * n, &s),
                  rs = g.rand_f32(2 * rps, &s), w = g.rand_b16(n, &s);
    qt_op r = make_op(QT_OP_RMSNORM_WGRAD);
    r.flags = QT_OPF_WGRAD;
    r.t[0] = dy, r.t[1] = x, r.t[2] = rs, r.t[3] = w;
    r.a[0] = 2 * rps, r.a[1] = n, r.a[2] = n, r.a[3] = n, r.a[5] = rps, r.a[8] = 0, r.a[9] = -1;
    e = &qt_kernel_table[QT_OP_RMSNORM_WGRAD];
    LONGS_EQUAL(48 + 48 + 16, qt_bf16_stage_need(&g.plan, e, &r));
    std::vector<vecf> gr = widened(g);
    for (int64_t q = 0; q < 2; q++) {
        vecf l0((size_t)n, 0.0f), r0((size_t)n, 0.0f);
        float *const dw[2] = {l0.data(), NULL};
        qt_interp_call_wgrad(e, &r, &g.ctx, q, dw);
        qt_rmsnorm_wgrad(r0.data(), gr[dy].data() + q * rps * n, gr[x].data() + q * rps * n,
                         gr[rs].data() + q * rps, rps, n, n, n);
        for (int64_t k = 0; k < n; k++) CHECK_EQUAL(bits(r0[k]), bits(l0[k]));
    }
}

// ------------------------------------------------------------------ (3) qt_bf16_stage_need

TEST_GROUP(Bf16StageNeed) {};

// For every kind of the table and random slot fillings (bf16 tensors of sizes around
// multiples of 16, fp32 and int32 tensors, QT_NONE, repeated ids, bf16 tensors in slots past
// the kind's slot string): qt_bf16_stage_need == the distinct bf16 tensor ids of the kind's
// slots, each rounded up to 16 floats, 'p' slots left out only for QT_OPP_BF16 kinds, and 0
// for STEP kinds. Plus hand-counted cases.
TEST(Bf16StageNeed, EqualsAnIndependentCount)
{
    Hand h(QT_BF16, g_a16);
    const int64_t sizes[] = {1, 15, 16, 17, 32, 33, 100};
    std::vector<int32_t> pool;
    for (int64_t n : sizes) pool.push_back(h.add(n, QT_BF16));
    pool.push_back(h.add(20, QT_F32));
    pool.push_back(h.add(20, QT_I32));
    pool.push_back(QT_NONE);
    uint64_t s = 17;
    int64_t nonzero = 0;
    for (int kind = 0; kind < QT_OP_COUNT; kind++) {
        const qt_kernel_entry *e = &qt_kernel_table[kind];
        const int ns = e->slots ? (int)strlen(e->slots) : 0;
        for (int trial = 0; trial < 40; trial++) {
            qt_op o = make_op((unsigned)kind);
            for (int k = 0; k < QT_OP_MAX_T; k++) o.t[k] = pool[xs(&s) % pool.size()];
            std::set<int32_t> ids;
            int64_t want = 0;
            for (int k = 0; k < ns && e->cls != QT_OPC_STEP; k++) {
                const int32_t id = o.t[k];
                if (id == QT_NONE || h.t[id].dtype != QT_BF16) continue;
                if (tolower((unsigned char)e->slots[k]) == 'p' && (e->props & QT_OPP_BF16) &&
                    !(e->props & QT_OPP_BF16_PSTAGE))
                    continue;
                if (ids.insert(id).second) want += (h.t[id].numel + 15) / 16 * 16;
            }
            const int64_t got = qt_bf16_stage_need(&h.plan, e, &o);
            if (got != want)
                FAIL(StringFromFormat("%s trial %d: stage need %lld, counted %lld", e->name,
                                      trial, (long long)got, (long long)want).asCharString());
            nonzero += got > 0;
        }
    }
    CHECK(nonzero > 1000);
    // by hand: RMSNORM_FWD y = x (17 floats: 32 once), w (5: 16), rstd fp32: 48
    Hand g(QT_BF16, g_a16);
    const int32_t v17 = g.add(17, QT_BF16), v5 = g.add(5, QT_BF16), f4 = g.add(4, QT_F32);
    qt_op o = make_op(QT_OP_RMSNORM_FWD);
    o.t[0] = v17, o.t[1] = f4, o.t[2] = v17, o.t[3] = v5;
    LONGS_EQUAL(48, qt_bf16_stage_need(&g.plan, &qt_kernel_table[QT_OP_RMSNORM_FWD], &o));
    // MATMUL_FWD (native): y 17 -> 32, x 5 -> 16, w not counted ('p'), scratch fp32
    o = make_op(QT_OP_MATMUL_FWD);
    o.t[0] = v17, o.t[1] = v5, o.t[2] = g.add(64, QT_BF16), o.t[3] = f4;
    LONGS_EQUAL(48, qt_bf16_stage_need(&g.plan, &qt_kernel_table[QT_OP_MATMUL_FWD], &o));
    // a 'p' tensor also read through an 'r' slot of a native kind is counted (once)
    o.t[1] = o.t[2];
    LONGS_EQUAL(32 + 64, qt_bf16_stage_need(&g.plan, &qt_kernel_table[QT_OP_MATMUL_FWD], &o));
    // PARAM_GATHER (STEP) with a bf16 window: nothing
    o = make_op(QT_OP_PARAM_GATHER);
    o.t[0] = v17;
    LONGS_EQUAL(0, qt_bf16_stage_need(&g.plan, &qt_kernel_table[QT_OP_PARAM_GATHER], &o));
}

// ------------------------------------------------------------------ (4) native wrappers

TEST_GROUP(Bf16Native) {};

namespace {
vecf run_matmul_fwd(Hand &h, int32_t y, int32_t x, int32_t w, int32_t scr, int64_t M, int64_t N,
                    int64_t K, int64_t nb, int64_t segs)
{
    qt_op o = make_op(QT_OP_MATMUL_FWD);
    o.t[0] = y, o.t[1] = x, o.t[2] = w, o.t[3] = scr;
    o.a[0] = M, o.a[1] = N, o.a[2] = K, o.a[3] = nb, o.a[4] = segs;
    vecf ref((size_t)(M * N));
    if (nb <= 0) qt_bf16_matmul_fwd(ref.data(), h.b(x), h.b(w), M, N, K);
    else {
        vecf scratch((size_t)QT_CANON_FWD_SCRATCH(M, N, K, nb));
        qt_bf16_matmul_canon_fwd(ref.data(), h.b(x), h.b(w), M, N, K, segs, nb, scratch.data());
    }
    qt_interp_call_run(&qt_kernel_table[QT_OP_MATMUL_FWD], &o, &h.ctx);
    return ref;
}
} // namespace

// MATMUL_FWD: plain == bf16(qt_bf16_matmul_fwd(x, w)); canonical nb = 2 and 4 (2 segments) ==
// bf16(qt_bf16_matmul_canon_fwd(...)), the scratch fp32; x and w untouched.
TEST(Bf16Native, MatmulFwdPlainAndCanonicalAreTheBf16KernelsRoundedOnce)
{
    uint64_t s = 21;
    const int64_t M = 5, N = 7;
    const int64_t cases[3][3] = {{9, 0, 0}, {24, 2, 2}, {24, 4, 2}}; // K, nb, segs
    for (auto &c : cases) {
        const int64_t K = c[0], nb = c[1], segs = c[2];
        Hand h(QT_BF16, g_a16);
        const int32_t y = h.add(M * N, QT_BF16, "y"), x = h.rand_b16(M * K, &s, "x"),
                      w = h.rand_b16(N * K, &s, "w");
        const int32_t scr = nb ? h.add(QT_CANON_FWD_SCRATCH(M, N, K, nb), QT_F32, "scratch") : QT_NONE;
        std::vector<vecf> before = widened(h);
        vecf ref = run_matmul_fwd(h, y, x, w, scr, M, N, K, nb, segs);
        LONGS_EQUAL(0, diff_tensor("matmul_fwd y", h, y, ref));
        LONGS_EQUAL(0, diff_tensor("matmul_fwd x", h, x, before[x]));
        LONGS_EQUAL(0, diff_tensor("matmul_fwd w", h, w, before[w]));
    }
}

// MATMUL_BWD_DATA on a bf16 dx holding nonzero values: plain == bf16(chain into widen(dx))
// (bf16_matmul.h adds the chain to dx once), canonical nb = 2 == bf16(widen(dx) + tree total);
// each rounded once: rounding the product first gives other bits on these data.
TEST(Bf16Native, MatmulBwdDataAddsIntoWidenedDxAndRoundsOnce)
{
    uint64_t s = 22;
    const int64_t M = 6, K = 11;
    const int64_t cases[2][3] = {{13, 0, 0}, {16, 2, 2}}; // N, nb, segs
    for (auto &c : cases) {
        const int64_t N = c[0], nb = c[1], segs = c[2];
        Hand h(QT_BF16, g_a16);
        const int32_t dx = h.rand_b16(M * K, &s, "dx"), dy = h.rand_b16(M * N, &s, "dy"),
                      w = h.rand_b16(N * K, &s, "w");
        h.b(dx)[3] = 0x8000;
        const int32_t scr = nb ? h.add(QT_CANON_BWD_SCRATCH(M, N, K, nb), QT_F32, "scratch") : QT_NONE;
        vecf dx0 = h.get(dx), ref = dx0, prod((size_t)(M * K), 0.0f);
        if (nb <= 0) {
            qt_bf16_matmul_bwd_data(ref.data(), h.b(dy), h.b(w), M, N, K);
            qt_bf16_matmul_bwd_data(prod.data(), h.b(dy), h.b(w), M, N, K);
        } else {
            vecf scratch((size_t)QT_CANON_BWD_SCRATCH(M, N, K, nb));
            qt_bf16_matmul_canon_bwd_data(prod.data(), h.b(dy), h.b(w), M, N, K, segs, nb,
                                          scratch.data());
            for (int64_t k = 0; k < M * K; k++) ref[k] = dx0[k] + prod[k];
        }
        int twice_differs = 0;
        for (int64_t k = 0; k < M * K; k++) {
            CHECK_EQUAL(bits(dx0[k] + prod[k]), bits(ref[k]));
            twice_differs += qt_bf16_from_f32(dx0[k] + qt_f32_from_bf16(qt_bf16_from_f32(prod[k]))) !=
                             qt_bf16_from_f32(ref[k]);
        }
        CHECK(twice_differs > 0);
        qt_op o = make_op(QT_OP_MATMUL_BWD_DATA);
        o.t[0] = dx, o.t[1] = dy, o.t[2] = w, o.t[3] = scr;
        o.a[0] = M, o.a[1] = N, o.a[2] = K, o.a[3] = nb, o.a[4] = segs;
        qt_interp_call_run(&qt_kernel_table[QT_OP_MATMUL_BWD_DATA], &o, &h.ctx);
        LONGS_EQUAL(0, diff_tensor("matmul_bwd_data dx", h, dx, ref));
    }
}

// MATMUL_WGRAD: the leaf of sequence q == qt_bf16_matmul_wgrad over the sequence's rows of dy
// and x, written whole (the leaf starts as NaN bits: WGRAD_WRITES, not zeroed).
TEST(Bf16Native, MatmulWgradLeafIsTheBf16ChainOverTheSequenceRows)
{
    uint64_t s = 23;
    const int64_t rps = 5, nseq = 3, M = rps * nseq, N = 4, K = 9;
    Hand h(QT_BF16, g_a16);
    const int32_t dy = h.rand_b16(M * N, &s), x = h.rand_b16(M * K, &s), w = h.rand_b16(N * K, &s);
    qt_op o = make_op(QT_OP_MATMUL_WGRAD);
    o.flags = QT_OPF_WGRAD;
    o.t[0] = dy, o.t[1] = x, o.t[2] = w;
    o.a[0] = M, o.a[1] = N, o.a[2] = K, o.a[3] = rps, o.a[8] = 0, o.a[9] = -1;
    for (int64_t q = 0; q < nseq; q++) {
        vecf leaf((size_t)(N * K), qt_test_float(0xffffffffu)), ref((size_t)(N * K));
        float *const dw[2] = {leaf.data(), NULL};
        qt_interp_call_wgrad(&qt_kernel_table[QT_OP_MATMUL_WGRAD], &o, &h.ctx, q, dw);
        qt_bf16_matmul_wgrad(ref.data(), h.b(dy) + q * rps * N, h.b(x) + q * rps * K, rps, N, K);
        for (int64_t k = 0; k < N * K; k++) CHECK_EQUAL(bits(ref[k]), bits(leaf[k]));
    }
}

// ZERO on a bf16 tensor writes 0x0000 to exactly its first a0 elements (the rest, and the
// next tensor, keep their bits).
TEST(Bf16Native, ZeroWritesExactlyNBf16Zeros)
{
    Hand h(QT_BF16, g_a16);
    const int32_t z = h.add(40, QT_BF16), next = h.add(8, QT_BF16);
    for (int k = 0; k < 40; k++) h.b(z)[k] = 0xabcd;
    for (int k = 0; k < 8; k++) h.b(next)[k] = 0x1234;
    qt_op o = make_op(QT_OP_ZERO);
    o.t[0] = z, o.a[0] = 37;
    qt_interp_call_run(&qt_kernel_table[QT_OP_ZERO], &o, &h.ctx);
    for (int k = 0; k < 40; k++) LONGS_EQUAL(k < 37 ? 0x0000 : 0xabcd, h.b(z)[k]);
    for (int k = 0; k < 8; k++) LONGS_EQUAL(0x1234, h.b(next)[k]);
}

// ROUND_BF16 fp32 -> bf16 tensor: hand-worked encodings (ties to even, denormals to signed
// zero, overflow to inf, NaN quieted) and qt_bf16_from_f32 on a random sweep.
TEST(Bf16Native, RoundBf16StoresTheNearestEvenEncoding)
{
    static const uint32_t cases[][2] = {
        {0x3f808000u, 0x3f80u}, {0x3f818000u, 0x3f82u}, {0x3f808001u, 0x3f81u},
        {0xbf818000u, 0xbf82u}, {0x80000000u, 0x8000u}, {0x007fffffu, 0x0000u},
        {0x807fffffu, 0x8000u}, {0x7f7fffffu, 0x7f80u}, {0xff800000u, 0xff80u},
        {0x7f800001u, 0x7fc0u},
    };
    const int64_t nc = sizeof cases / sizeof cases[0], n = nc + 500;
    uint64_t s = 24;
    Hand h(QT_BF16, g_a16);
    const int32_t y = h.add(n, QT_BF16), x = h.add(n, QT_F32);
    for (int64_t k = 0; k < n; k++)
        h.f(x)[k] = k < nc ? qt_test_float(cases[k][0]) : qt_test_float((uint32_t)xs(&s));
    qt_op o = make_op(QT_OP_ROUND_BF16);
    o.t[0] = y, o.t[1] = x, o.a[0] = n;
    qt_interp_call_run(&qt_kernel_table[QT_OP_ROUND_BF16], &o, &h.ctx);
    for (int64_t k = 0; k < n; k++)
        LONGS_EQUAL(k < nc ? cases[k][1] : qt_bf16_from_f32(h.f(x)[k]), h.b(y)[k]);
}

// EMBED_FWD: rows of the bf16 table copied bit for bit (any bits, NaN patterns included);
// tokens -1 and V give rows of 0x0000.
TEST(Bf16Native, EmbedFwdCopiesRowsBitForBitAndZeroesOutOfRangeTokens)
{
    const int64_t T = 7, d = 9, V = 5;
    uint64_t s = 25;
    Hand h(QT_BF16, g_a16);
    const int32_t x = h.add(T * d, QT_BF16), tok = h.add(T, QT_I32), w = h.add(V * d, QT_BF16);
    for (int64_t k = 0; k < V * d; k++) h.b(w)[k] = (uint16_t)xs(&s);
    const int32_t toks[T] = {3, -1, 0, 4, 5, 3, 1};
    memcpy(h.i(tok), toks, sizeof toks);
    qt_op o = make_op(QT_OP_EMBED_FWD);
    o.t[0] = x, o.t[1] = tok, o.t[2] = w, o.a[0] = T, o.a[1] = d, o.a[2] = V;
    qt_interp_call_run(&qt_kernel_table[QT_OP_EMBED_FWD], &o, &h.ctx);
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < d; k++)
            LONGS_EQUAL(toks[t] < 0 || toks[t] >= V ? 0 : h.b(w)[toks[t] * d + k], h.b(x)[t * d + k]);
}

// EMBED_WGRAD in a bf16 plan: each sequence's leaf == the fp32 kernel on the widened dx rows
// (the table, NaN bits here, is not read).
TEST(Bf16Native, EmbedWgradIsTheFp32KernelOnWidenedRows)
{
    const int64_t S = 4, nseq = 3, T = S * nseq, d = 6, V = 5;
    uint64_t s = 26;
    Hand h(QT_BF16, g_a16);
    const int32_t dx = h.rand_b16(T * d, &s), tok = h.add(T, QT_I32), w = h.add(V * d, QT_BF16);
    for (int64_t t = 0; t < T; t++) h.i(tok)[t] = (int32_t)(xs(&s) % 3);  // repeats: adds round
    qt_op o = make_op(QT_OP_EMBED_WGRAD);
    o.flags = QT_OPF_WGRAD;
    o.t[0] = dx, o.t[1] = tok, o.t[2] = w;
    o.a[0] = T, o.a[1] = d, o.a[2] = V, o.a[3] = S, o.a[8] = 0, o.a[9] = -1;
    vecf rows = h.get(dx);
    for (int64_t q = 0; q < nseq; q++) {
        vecf leaf((size_t)(V * d), 0.0f), ref((size_t)(V * d), 0.0f);
        float *const dw[2] = {leaf.data(), NULL};
        qt_interp_call_wgrad(&qt_kernel_table[QT_OP_EMBED_WGRAD], &o, &h.ctx, q, dw);
        qt_embed_wgrad(ref.data(), rows.data() + q * S * d, h.i(tok) + q * S, S, d, V);
        for (int64_t k = 0; k < V * d; k++) CHECK_EQUAL(bits(ref[k]), bits(leaf[k]));
    }
}

// ------------------------------------------------------------------ (5) validate_bf16

TEST_GROUP(Bf16Validate) {};

namespace {
bool said(const char *needle) { return strstr(qt_last_error(), needle) != NULL; }
} // namespace

// A bf16 plan of two microbatch ops (RMSNORM_FWD needing 80 staged floats: native since
// issue 34, its staging still planned as for the boundary, QT_OPP_BF16_PSTAGE; MATMUL_FWD
// needing 48): accepted with a staging region of exactly the larger need; one float less is
// refused naming the op, its kind and both figures; MATMUL_FWD reading an fp32 x, or
// RMSNORM_FWD writing a bf16 rstd, is refused naming the slot and the tensor; an fp32 plan
// holding a bf16 tensor is refused.
TEST(Bf16Validate, StagingSlotDtypesAndPlanDtype)
{
    Hand h(QT_BF16, g_a16);
    const int32_t y = h.add(24, QT_BF16, "y"), rstd = h.add(2, QT_F32, "rstd"),
                  x = h.add(24, QT_BF16, "x"), w = h.add(12, QT_BF16, "norm.w"),
                  my = h.add(6, QT_BF16, "my"), mx = h.add(24, QT_BF16, "mx"),
                  mw = h.add(72, QT_BF16, "mw"), fx = h.add(24, QT_F32, "mx_f32");
    qt_op ops[2] = {make_op(QT_OP_RMSNORM_FWD), make_op(QT_OP_MATMUL_FWD)};
    ops[0].t[0] = y, ops[0].t[1] = rstd, ops[0].t[2] = x, ops[0].t[3] = w;
    ops[0].a[0] = 2, ops[0].a[1] = 12, ops[0].a[2] = 12, ops[0].a[3] = 12;
    ops[1].t[0] = my, ops[1].t[1] = mx, ops[1].t[2] = mw;
    ops[1].a[0] = 2, ops[1].a[1] = 3, ops[1].a[2] = 12;
    h.plan.mb_ops = ops;
    h.plan.n_mb_ops = 2;
    LONGS_EQUAL(32 + 32 + 16, qt_bf16_stage_need(&h.plan, &qt_kernel_table[QT_OP_RMSNORM_FWD], &ops[0]));
    LONGS_EQUAL(16 + 32, qt_bf16_stage_need(&h.plan, &qt_kernel_table[QT_OP_MATMUL_FWD], &ops[1]));
    const int quiet = qt_set_quiet(1);
    h.plan.bf16_stage_elems = 80;
    LONGS_EQUAL(QT_OK, qt_validate_bf16(&h.plan, qt_kernel_table));
    h.plan.bf16_stage_elems = 79;
    LONGS_EQUAL(QT_E_PLAN, qt_validate_bf16(&h.plan, qt_kernel_table));
    CHECK(said("microbatch op 0 (rmsnorm_fwd) stages 80 floats") && said("holds 79"));
    h.plan.bf16_stage_elems = 80;
    ops[1].t[1] = fx;
    LONGS_EQUAL(QT_E_PLAN, qt_validate_bf16(&h.plan, qt_kernel_table));
    CHECK(said("microbatch op 1 (matmul_fwd): slot t1, tensor mx_f32, is fp32") && said("as bf16"));
    ops[1].t[1] = mx;
    LONGS_EQUAL(QT_OK, qt_validate_bf16(&h.plan, qt_kernel_table));
    ops[0].t[1] = my;
    h.plan.bf16_stage_elems = 200;
    LONGS_EQUAL(QT_E_PLAN, qt_validate_bf16(&h.plan, qt_kernel_table));
    CHECK(said("microbatch op 0 (rmsnorm_fwd): slot t1, tensor my, is bf16") && said("as fp32"));
    ops[0].t[1] = rstd;
    h.plan.bf16_stage_elems = 80;
    LONGS_EQUAL(QT_OK, qt_validate_bf16(&h.plan, qt_kernel_table));
    // the same tables as an fp32 plan: its bf16 tensors are refused
    h.plan.dtype = QT_F32;
    LONGS_EQUAL(QT_E_PLAN, qt_validate_bf16(&h.plan, qt_kernel_table));
    CHECK(said("dtype float32 but 6 bf16 tensors"));
    for (int32_t id = 0; id < h.plan.n_tensors; id++)
        if (h.t[id].dtype == QT_BF16) h.t[id].dtype = QT_F32;
    LONGS_EQUAL(QT_OK, qt_validate_bf16(&h.plan, qt_kernel_table));
    qt_set_quiet(quiet);
}

// ------------------------------------------------------------------ (6) step ops

TEST_GROUP(Bf16Step) {};

namespace {
// A one-rank bf16 plan with two flat ranges of 16 (parameters of 5 and 7 elements, padding
// after each): fp32 masters at params_offset (laid out as the Adam regions), the bf16 compute
// copy at compute_offset with the parameter tensors in it, grads and Adam m/v; the copy and
// 16 bf16 after it hold 0xffff.
struct StepPlan {
    Hand h{QT_BF16, g_a16};
    qt_param params[2];
    qt_flat_range ranges[2];
    enum { NF = 32 };
    StepPlan()
    {
        memset(params, 0, sizeof params);
        memset(ranges, 0, sizeof ranges);
        qt_plan &p = h.plan;
        const int32_t masters = h.add(NF, QT_F32, "masters"), grads = h.add(NF, QT_F32, "grads"),
                      m = h.add(NF, QT_F32, "m"), v = h.add(NF, QT_F32, "v"),
                      copy = h.add(NF + 16, QT_BF16, "copy");
        p.params_offset = h.t[masters].offset;
        p.grads_offset = h.t[grads].offset;
        p.adam_m_offset = h.t[m].offset;
        p.adam_v_offset = h.t[v].offset;
        p.compute_offset = h.t[copy].offset;
        const int64_t pn[2] = {5, 7};
        for (int i = 0; i < 2; i++) {
            const int32_t id = h.add(pn[i], QT_BF16, i ? "p1" : "p0");
            h.t[id].role = QT_ROLE_PARAM;
            h.t[id].offset = p.compute_offset + 2 * 16 * i;
            params[i].name = h.t[id].name;
            params[i].tensor = id;
            params[i].flat_offset = params[i].leaf_offset = 16 * i;
            params[i].numel = pn[i];
            params[i].layer = -1;
            ranges[i].lo = ranges[i].adam_lo = ranges[i].leaf_lo = 16 * i;
            ranges[i].n = 16;
        }
        p.n_params = 2, p.params = params, p.n_ranges = 2, p.ranges = ranges;
        p.n_param_elems = 12, p.n_flat = NF, p.adam_elems = NF;
        p.train.lr = 0.01f, p.train.adam_b1 = 0.9f, p.train.adam_b2 = 0.95f;
        p.train.adam_eps = 1e-8f, p.train.weight_decay = 0.1f, p.train.clip = 1.0f;
        uint64_t s = 31;
        for (int k = 0; k < NF; k++) {
            const bool pad = (k % 16) >= pn[k / 16];
            h.f(masters)[k] = pad ? 0.0f : rndf(&s);
            h.f(grads)[k] = pad ? 0.0f : rndf(&s);
            h.f(m)[k] = h.f(v)[k] = 0.0f;
        }
        h.f(masters)[1] = qt_test_float(0x3f808000u);  // a tie: to even
        h.f(masters)[2] = qt_test_float(0x80000001u);  // a denormal: -0
        for (int k = 0; k < NF + 16; k++) h.b(copy)[k] = 0xffff;
    }
    float *masters() { return h.f(0); }
    uint16_t *copy() { return h.b(4); }
    // the copy is bf16(masters) for all NF elements (padding 0x0000), untouched after
    int64_t check_copy(const char *what)
    {
        int64_t bad = 0;
        for (int k = 0; k < NF + 16; k++) {
            const uint16_t want = k < NF ? qt_bf16_from_f32(masters()[k]) : 0xffff;
            if (copy()[k] != want && !bad++)
                fprintf(stderr, "%s: copy[%d] 0x%04x want 0x%04x\n", what, k, copy()[k], want);
        }
        return bad;
    }
};
} // namespace

// qt_step_publish_params makes the compute copy bf16(masters) for every flat element, the
// padding 0x0000, and writes nothing past n_flat; the parameter tensors read that copy.
TEST(Bf16Step, PublishParamsRoundsEveryMasterIntoTheComputeCopy)
{
    StepPlan sp;
    LONGS_EQUAL(QT_OK, qt_step_publish_params(&sp.h.ctx, 0));
    LONGS_EQUAL(0, sp.check_copy("publish"));
    LONGS_EQUAL(0x3f80, sp.copy()[1]);
    LONGS_EQUAL(0x8000, sp.copy()[2]);
    LONGS_EQUAL(0x0000, sp.copy()[5]);
    LONGS_EQUAL(qt_bf16_from_f32(sp.masters()[16 + 6]), sp.h.b(6)[6]);  // p1's last element
}

// ADAMW in a bf16 plan updates the fp32 masters and rounds each updated block into the
// compute copy: the copy equals bf16(updated masters), padding 0x0000.
TEST(Bf16Step, AdamwLeavesTheComputeCopyEqualToTheRoundedMasters)
{
    StepPlan sp;
    qt_step_init(&sp.h.plan);
    std::vector<float> before(sp.masters(), sp.masters() + StepPlan::NF);
    qt_step_metrics m;
    memset(&m, 0, sizeof m);
    m.lr = 0.01;
    m.grad_norm = 0.5;
    qt_step_state st = {0, 0, &m, 0, 0, 0.0f};
    qt_op o = make_op(QT_OP_ADAMW);
    LONGS_EQUAL(QT_OK, qt_kernel_table[QT_OP_ADAMW].step(&o, &sp.h.ctx, &st));
    int moved = 0;
    for (int k = 0; k < StepPlan::NF; k++) moved += bits(before[k]) != bits(sp.masters()[k]);
    CHECK(moved >= 10);
    LONGS_EQUAL(0, sp.check_copy("adamw"));
}

// GRAD_NORMALISE then ADAMW with the division left to the update (st.update_next, as the
// runtime's step walk sets it) and without (the grads-only walk's form, then the update):
// the same masters, Adam moments, compute copy, norm and fingerprint; the gradient region is
// only read in the first (it keeps the step's sum) and normalised in the second. Token
// counts 4 (a power of two: the exact inverse's product) and 3 (the division), clipped and not.
TEST(Bf16Step, NormaliseLeftToAdamwGivesTheSameStep)
{
    const int64_t toks[] = {4, 3};
    const float clips[] = {1.0f, 0.05f, 0.0f};
    int clipped = 0;
    for (int64_t tok : toks) {
        for (float clip : clips) {
            std::vector<float> out[2];
            std::vector<uint16_t> cc[2];
            double norm[2];
            uint64_t fp[2];
            for (int defer = 0; defer < 2; defer++) {
                StepPlan sp;
                sp.h.plan.train.clip = clip;
                qt_step_init(&sp.h.plan);
                const float *g = sp.h.f(1);
                const std::vector<float> g0(g, g + StepPlan::NF);
                qt_step_metrics m;
                memset(&m, 0, sizeof m);
                m.lr = 0.01;
                qt_step_state st = {0, 0, &m, 0, defer, 0.0f};
                qt_op o = make_op(QT_OP_GRAD_NORMALISE);
                o.a[0] = tok;
                LONGS_EQUAL(QT_OK, qt_kernel_table[QT_OP_GRAD_NORMALISE].step(&o, &sp.h.ctx, &st));
                CHECK(st.gdiv == (defer ? (float)tok : 0.0f));
                for (int k = 0; k < StepPlan::NF; k++)  // read only, or the quotients stored
                    LONGS_EQUAL(bits(defer ? g0[k] : g0[k] / (float)tok), bits(g[k]));
                o = make_op(QT_OP_ADAMW);
                st.update_next = 0;
                LONGS_EQUAL(QT_OK, qt_kernel_table[QT_OP_ADAMW].step(&o, &sp.h.ctx, &st));
                CHECK(st.gdiv == 0.0f);  // consumed
                for (int r : {0, 2, 3})  // masters, Adam m, v
                    out[defer].insert(out[defer].end(), sp.h.f(r), sp.h.f(r) + StepPlan::NF);
                cc[defer].assign(sp.copy(), sp.copy() + StepPlan::NF + 16);
                norm[defer] = m.grad_norm;
                fp[defer] = m.fingerprint;
                LONGS_EQUAL(0, sp.check_copy("adamw after normalise"));
            }
            clipped += clip > 0.0f && norm[0] > (double)clip;
            CHECK(norm[0] > 0.0);
            CHECK(memcmp(&norm[0], &norm[1], sizeof norm[0]) == 0);
            CHECK(fp[0] == fp[1]);
            CHECK(cc[0] == cc[1]);
            for (int k = 0; k < 3 * StepPlan::NF; k++) LONGS_EQUAL(bits(out[0][k]), bits(out[1][k]));
        }
    }
    CHECK(clipped >= 2);  // both token counts ran the clip scale too
}

// PARAM_GATHER into a bf16 window: this rank's block of the range is bf16(masters).
TEST(Bf16Step, ParamGatherRoundsTheMastersIntoABf16Window)
{
    StepPlan sp;
    const int32_t win = sp.h.add(16, QT_BF16, "window");
    for (int k = 0; k < 16; k++) sp.h.b(win)[k] = 0xffff;
    qt_op o = make_op(QT_OP_PARAM_GATHER);
    o.t[0] = win, o.a[0] = 1;
    qt_step_state st = {0, 0, NULL, 0, 0, 0.0f};
    LONGS_EQUAL(QT_OK, qt_kernel_table[QT_OP_PARAM_GATHER].step(&o, &sp.h.ctx, &st));
    for (int k = 0; k < 16; k++) LONGS_EQUAL(qt_bf16_from_f32(sp.masters()[16 + k]), sp.h.b(win)[k]);
}

// ------------------------------------------------------------------ (7) native vs boundary

TEST_GROUP(Bf16NativeRows) {};

namespace {
// 0: no special values; N: one value in N is special (each test runs with both).
int g_sp;
// 1: the specials are finite (+-0 for +-inf and the NaN), so the one-pass forms
// (kernels/bf16_rows.h) run on them; 0: with inf and NaN, which take the blocks.
int g_fin;

// A bf16 value of rndf, or (one in g_sp) a special one: +-0, a bf16 denormal, +-inf, the
// quiet NaN, the largest finite, FLT_MIN's bf16, a tiny normal (products underflow) or a
// huge one (sums overflow).
qt_bf16 rnd_special(uint64_t *s)
{
    static const qt_bf16 sp[] = {0x0000, 0x8000, 0x0001, 0x8045, 0x7f80, 0xff80, 0x7fc0,
                                 0x7f7f, 0xff7f, 0x0080, 0x8080, 0x0d00, 0x8d37, 0x7e00, 0xfe55};
    const uint64_t r = xs(s);
    if (g_sp && r % (uint64_t)g_sp == 0) {
        const qt_bf16 v = sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
        // g_fin: finite specials only (the one-pass forms run; inf/NaN take the blocks)
        return g_fin && (v & 0x7f80) == 0x7f80 ? (qt_bf16)(v & 0x8000) : v;
    }
    return qt_bf16_from_f32(rndf(s));
}

// A bf16 tensor of n elements, with special values.
int32_t rand_sp(Hand &h, int64_t n, uint64_t *s, const char *name = "t")
{
    const int32_t id = h.add(n, QT_BF16, name);
    for (int64_t k = 0; k < n; k++) h.b(id)[k] = rnd_special(s);
    return id;
}

// A bf16 tensor of values an op could have stored (rand_sp rounded again: no denormal), for
// written slots with gaps, which the boundary rounds back whole and a native form leaves.
int32_t rand_stored(Hand &h, int64_t n, uint64_t *s, const char *name = "t")
{
    const int32_t id = rand_sp(h, n, s, name);
    for (int64_t k = 0; k < n; k++) h.b(id)[k] = qt_bf16_from_f32(qt_f32_from_bf16(h.b(id)[k]));
    return id;
}

// A copy of hand plan src in arena a (tensors, layout and bytes below the staging region).
void clone(Hand &src, Hand &dst)
{
    CHECK(src.off <= STAGE_OFF);
    for (int32_t id = 0; id < src.plan.n_tensors; id++) {
        const qt_tensor &t = src.t[id];
        const int32_t j = dst.add(t.numel, t.dtype, t.name);
        LONGS_EQUAL(id, j);
        dst.t[j].role = t.role;
    }
    dst.plan.train = src.plan.train;
    dst.plan.context_blocks = src.plan.context_blocks;
    dst.plan.packing = src.plan.packing;
    dst.plan.positions = src.plan.positions;
    memcpy(dst.arena, src.arena, (size_t)src.off);
}

// Bytes of the two plans' tensors that differ (prints the first tensor and element).
// Elements [dead_from, numel) of tensor dead (-1: none) are kernel scratch, dead after the op
// and laid out by each form as it likes (not compared).
int64_t diff_arenas(const char *what, Hand &a, Hand &b, int32_t dead = -1, int64_t dead_from = 0)
{
    int64_t bad = 0;
    for (int32_t id = 0; id < a.plan.n_tensors; id++) {
        const size_t eb = (size_t)qt_dtype_bytes(a.t[id].dtype);
        const unsigned char *pa = a.arena + a.t[id].offset, *pb = b.arena + b.t[id].offset;
        for (int64_t k = 0; k < (id == dead ? dead_from : a.t[id].numel); k++)
            if (memcmp(pa + (size_t)k * eb, pb + (size_t)k * eb, eb) && !bad++)
                fprintf(stderr, "%s: tensor %d (%s) [%lld] differs: boundary 0x%04x, native 0x%04x\n",
                        what, id, a.t[id].name, (long long)k,
                        eb == 2 ? a.b(id)[k] : (unsigned)bits(a.f(id)[k]),
                        eb == 2 ? b.b(id)[k] : (unsigned)bits(b.f(id)[k]));
    }
    return bad;
}

// Runs op natively in h (the interpreter's call: the kind is QT_OPP_BF16) and through the
// boundary in a clone; every tensor byte must agree, and the run must have changed some
// written tensor (so a wrapper that does nothing cannot pass).
void native_vs_boundary(const char *what, Hand &h, const qt_op &op, int32_t dead = -1,
                        int64_t dead_from = 0)
{
    const qt_kernel_entry *e = &qt_kernel_table[op.kind];
    CHECK(e->props & QT_OPP_BF16);
    // the boundary must fit the harness's staging region, as configgen sizes a plan's (a
    // case beyond it lets the reference write past the region: T 7, k 9, d 1100 did)
    CHECK(qt_bf16_stage_need(&h.plan, e, &op) <= STAGE_ELEMS);
    Hand r(QT_BF16, g_a32);
    clone(h, r);
    std::vector<unsigned char> before(h.arena, h.arena + h.off);
    qt_bf16_boundary_run(e, &op, &r.ctx);
    qt_interp_call_run(e, &op, &h.ctx);
    LONGS_EQUAL(0, diff_arenas(what, r, h, dead, dead_from));
    CHECK(memcmp(before.data(), h.arena, (size_t)h.off) != 0);
}

// The same for a WGRAD kind over every sequence: leaves (nl of them, n floats each, from a
// nonzero start as a leaf tree's carry could be) equal bit for bit; nothing written.
// n1 > 0: a second leaf of n1 floats (dw[1]: the GDN gates' dt_bias), checked the same way.
void native_vs_boundary_wgrad(const char *what, Hand &h, const qt_op &op, int64_t seqs,
                              int64_t n, int64_t n1 = 0)
{
    const qt_kernel_entry *e = &qt_kernel_table[op.kind];
    CHECK(e->props & QT_OPP_BF16);
    // the boundary must fit the harness's staging region, as configgen sizes a plan's (a
    // case beyond it lets the reference write past the region: T 7, k 9, d 1100 did)
    CHECK(qt_bf16_stage_need(&h.plan, e, &op) <= STAGE_ELEMS);
    Hand r(QT_BF16, g_a32);
    clone(h, r);
    const int64_t nl = n1 > 0 ? 2 : 1, len[2] = {n, n1};
    for (int64_t q = 0; q < seqs; q++) {
        vecf a[2], b[2];
        for (int64_t l = 0; l < nl; l++) {
            a[l].assign((size_t)len[l], 0.0f);
            for (int64_t k = 0; k < len[l]; k++) a[l][(size_t)k] = (float)(k % 3) * 0.25f;
            b[l] = a[l];
        }
        float *const da[2] = {a[0].data(), nl > 1 ? a[1].data() : NULL},
                     *const db[2] = {b[0].data(), nl > 1 ? b[1].data() : NULL};
        qt_bf16_boundary_wgrad(e, &op, &r.ctx, q, da);
        qt_interp_call_wgrad(e, &op, &h.ctx, q, db);
        for (int64_t l = 0; l < nl; l++) {
            int64_t bad = 0, changed = 0;
            for (int64_t k = 0; k < len[l]; k++) {
                const float x = a[l][(size_t)k], y = b[l][(size_t)k];
                if (bits(x) != bits(y) && !bad++)
                    fprintf(stderr, "%s seq %lld: leaf %lld [%lld] boundary 0x%08x native 0x%08x\n",
                            what, (long long)q, (long long)l, (long long)k, bits(x), bits(y));
                changed += bits(x) != bits((float)(k % 3) * 0.25f);
            }
            LONGS_EQUAL(0, bad);
            CHECK(changed > 0);
        }
    }
    LONGS_EQUAL(0, diff_arenas(what, r, h));
}
} // namespace

// ADD, ACC, SWIGLU_FWD / BWD on sizes around the block (2048): 1, 37, 2047, 2048, 2049, 5000.
static void body_ElementwiseKindsEqualTheBoundary()
{
    const int64_t sizes[] = {1, 37, 2047, 2048, 2049, 5000};
    uint64_t s = 71;
    for (int64_t n : sizes) {
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_ADD);
            o.t[0] = rand_sp(h, n, &s, "y"), o.t[1] = rand_sp(h, n, &s, "a"),
            o.t[2] = rand_sp(h, n, &s, "b"), o.a[0] = n;
            native_vs_boundary("add", h, o);
        }
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_ACC);
            o.t[0] = rand_sp(h, n, &s, "dst"), o.t[1] = rand_sp(h, n, &s, "src"), o.a[0] = n;
            native_vs_boundary("acc", h, o);
        }
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_SWIGLU_FWD);
            o.t[0] = rand_sp(h, n, &s, "h"), o.t[1] = rand_sp(h, n, &s, "a"),
            o.t[2] = rand_sp(h, n, &s, "u"), o.a[0] = n;
            native_vs_boundary("swiglu_fwd", h, o);
        }
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_SWIGLU_BWD);
            for (int k = 0; k < 5; k++) o.t[k] = rand_sp(h, n, &s, k < 2 ? "dacc" : "in");
            o.a[0] = n;
            native_vs_boundary("swiglu_bwd", h, o);
        }
    }
    // an fp32 input slot in a bf16 plan (read in place) and ADD in place (y is a: the
    // boundary's shared staging, taken as is)
    Hand h(QT_BF16, g_a16);
    qt_op o = make_op(QT_OP_ADD);
    o.t[0] = rand_sp(h, 3001, &s, "y"), o.t[1] = h.rand_f32(3001, &s, "a32"),
    o.t[2] = rand_sp(h, 3001, &s, "b"), o.a[0] = 3001;
    native_vs_boundary("add fp32 a", h, o);
    Hand g(QT_BF16, g_a16);
    o.t[0] = o.t[1] = rand_sp(g, 3001, &s, "y"), o.t[2] = rand_sp(g, 3001, &s, "b");
    native_vs_boundary("add in place", g, o);
}

// SIGMOID_GATE_FWD / BWD: HEADS mode (gate halves of a [T, 2n] source; the q halves of dgate
// rounded back unchanged) and ROW mode (one gate per row, dgate summing over the row), with
// blocks of several rows and a short last block.

static void body_SigmoidGateEqualsTheBoundary()
{
    uint64_t s = 72;
    const int64_t cases[3][4] = {{200, 21, QT_GATE_HEADS, 7}, {9, 300, QT_GATE_ROW, 0},
                                 {3, 2100, QT_GATE_HEADS, 35}};  // T, n, mode, hd
    for (auto &c : cases) {
        const int64_t T = c[0], n = c[1], gw = c[2] == QT_GATE_ROW ? 1 : 2 * n;
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_SIGMOID_GATE_FWD);
            o.t[0] = rand_sp(h, T * n, &s, "y"), o.t[1] = rand_sp(h, T * n, &s, "x"),
            o.t[2] = rand_sp(h, T * gw, &s, "gate");
            o.a[0] = T, o.a[1] = n, o.a[2] = c[2], o.a[3] = c[3];
            native_vs_boundary("sigmoid_gate_fwd", h, o);
        }
        Hand h(QT_BF16, g_a16);
        qt_op o = make_op(QT_OP_SIGMOID_GATE_BWD);
        o.t[0] = rand_sp(h, T * n, &s, "dx"), o.t[1] = rand_stored(h, T * gw, &s, "dgate"),
        o.t[2] = rand_sp(h, T * n, &s, "dy"), o.t[3] = rand_sp(h, T * n, &s, "x"),
        o.t[4] = rand_sp(h, T * gw, &s, "gate");
        o.a[0] = T, o.a[1] = n, o.a[2] = c[2], o.a[3] = c[3];
        native_vs_boundary("sigmoid_gate_bwd", h, o);
    }
}

// RMSNORM_FWD / BWD: strided rows with gaps (xs 41, ys 40 for n 37: per-head norms inside
// wider rows), contiguous rows, rows wider than a block (n 3000), both scale flags; rstd
// fp32 (written in place by FWD, read by BWD).

static void body_RmsnormFwdBwdEqualTheBoundary()
{
    uint64_t s = 73;
    const int64_t cases[4][5] = {{100, 37, 41, 40, QT_RMSNORM_ZERO_CENTRED},
                                 {70, 64, 64, 64, 0},
                                 {3, 3000, 3000, 3000, QT_RMSNORM_ZERO_CENTRED},
                                 {1, 5, 5, 7, 0}};  // R, n, xs, ys, flags
    for (auto &c : cases) {
        const int64_t R = c[0], n = c[1], xs_ = c[2], ys = c[3];
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_RMSNORM_FWD);
            o.t[0] = h.rand_b16(R * ys, &s, "y"), o.t[1] = h.rand_f32(R, &s, "rstd"),
            o.t[2] = rand_sp(h, R * xs_, &s, "x"), o.t[3] = rand_sp(h, n, &s, "w");
            o.a[0] = R, o.a[1] = n, o.a[2] = xs_, o.a[3] = ys, o.a[4] = c[4];
            o.f[0] = 1e-6f;
            native_vs_boundary("rmsnorm_fwd", h, o);
        }
        Hand h(QT_BF16, g_a16);
        qt_op o = make_op(QT_OP_RMSNORM_BWD);
        o.t[0] = rand_stored(h, R * xs_, &s, "dx"), o.t[1] = rand_sp(h, R * ys, &s, "dy"),
        o.t[2] = rand_sp(h, R * xs_, &s, "x"), o.t[3] = rand_sp(h, n, &s, "w"),
        o.t[4] = h.rand_f32(R, &s, "rstd");
        o.a[0] = R, o.a[1] = n, o.a[2] = xs_, o.a[3] = ys, o.a[4] = c[4];
        native_vs_boundary("rmsnorm_bwd", h, o);
    }
}

// RMSNORM_WGRAD: plain rows of 3 leaves (blocks inside a leaf), and per-head norms in 2 and
// 4 canonical head groups (rows (t, head), strided inside wider rows).

static void body_RmsnormWgradEqualsTheBoundary()
{
    uint64_t s = 74;
    {
        const int64_t n = 37, rps = 120, b = 3;
        Hand h(QT_BF16, g_a16);
        qt_op o = make_op(QT_OP_RMSNORM_WGRAD);
        o.flags = QT_OPF_WGRAD;
        o.t[0] = rand_sp(h, b * rps * n, &s, "dy"), o.t[1] = rand_sp(h, b * rps * n, &s, "x"),
        o.t[2] = h.rand_f32(b * rps, &s, "rstd"), o.t[3] = rand_sp(h, n, &s, "w");
        o.a[0] = b * rps, o.a[1] = n, o.a[2] = n, o.a[3] = n, o.a[5] = rps, o.a[8] = 0,
        o.a[9] = -1;
        native_vs_boundary_wgrad("rmsnorm_wgrad", h, o, b, n);
    }
    for (int64_t groups : {2, 4}) {
        const int64_t n = 12, S = 90, H = 4, b = 2, xs_ = 2 * n, ys = n, rps = S * H;
        Hand h(QT_BF16, g_a16);
        h.plan.train.seq_len = S;
        qt_op o = make_op(QT_OP_RMSNORM_WGRAD);
        o.flags = QT_OPF_WGRAD;
        o.t[0] = rand_sp(h, b * rps * ys, &s, "dy"), o.t[1] = rand_sp(h, b * rps * xs_, &s, "x"),
        o.t[2] = h.rand_f32(b * rps, &s, "rstd"), o.t[3] = rand_sp(h, n, &s, "w");
        o.a[0] = b * rps, o.a[1] = n, o.a[2] = xs_, o.a[3] = ys, o.a[5] = rps, o.a[6] = groups,
        o.a[8] = 0, o.a[9] = -1;
        native_vs_boundary_wgrad("rmsnorm_wgrad heads", h, o, b, n);
    }
}

// GATED_RMSNORM_FWD / BWD / WGRAD (Hk 2, Dk 3, Hv 4, Dv 5: qkvz rows of 32; and a wide case
// with rows past a block), WGRAD plain and in 2 value-head groups. One pass (finite inputs,
// Dv <= QT_B16_GRN_DV): T*Hv rows a multiple of 4 and not (15 rows: the backward's tail of
// 3), the bench model's heads (Hk 2 of 4 value heads each, Dv 64); Dv 300 takes the blocks.

static void body_GatedRmsnormEqualsTheBoundary()
{
    uint64_t s = 75;
    const int64_t cases[5][5] = {{70, 2, 3, 4, 5},  {3, 2, 64, 8, 160}, {5, 1, 4, 3, 7},
                                 {9, 2, 16, 8, 64}, {3, 1, 8, 2, 300}};  // T, Hk, Dk, Hv, Dv
    for (auto &c : cases) {
        const int64_t T = c[0], hk = c[1], dk = c[2], hv = c[3], dv = c[4],
                      wq = hk * (2 * dk + 2 * (hv / hk) * dv);
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_GATED_RMSNORM_FWD);
            o.t[0] = rand_sp(h, T * hv * dv, &s, "y"), o.t[1] = h.rand_f32(T * hv, &s, "rstd"),
            o.t[2] = rand_sp(h, T * hv * dv, &s, "o"), o.t[3] = rand_sp(h, T * wq, &s, "qkvz"),
            o.t[4] = rand_sp(h, dv, &s, "w");
            o.a[0] = T, o.a[1] = hk, o.a[2] = dk, o.a[3] = hv, o.a[4] = dv;
            o.f[0] = 1e-6f;
            native_vs_boundary("gated_rmsnorm_fwd", h, o);
        }
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_GATED_RMSNORM_BWD);
            o.t[0] = rand_sp(h, T * hv * dv, &s, "do"), o.t[1] = rand_stored(h, T * wq, &s, "dqkvz"),
            o.t[2] = rand_sp(h, T * hv * dv, &s, "dy"), o.t[3] = rand_sp(h, T * hv * dv, &s, "o"),
            o.t[4] = rand_sp(h, T * wq, &s, "qkvz"), o.t[5] = rand_sp(h, dv, &s, "w"),
            o.t[6] = h.rand_f32(T * hv, &s, "rstd");
            o.a[0] = T, o.a[1] = hk, o.a[2] = dk, o.a[3] = hv, o.a[4] = dv;
            native_vs_boundary("gated_rmsnorm_bwd", h, o);
        }
        for (int64_t groups : {0, 2}) {
            const int64_t b = 2;
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_GATED_RMSNORM_WGRAD);
            o.flags = QT_OPF_WGRAD;
            o.t[0] = rand_sp(h, b * T * hv * dv, &s, "dy"),
            o.t[1] = rand_sp(h, b * T * hv * dv, &s, "o"),
            o.t[2] = rand_sp(h, b * T * wq, &s, "qkvz"), o.t[3] = h.rand_f32(b * T * hv, &s, "rstd"),
            o.t[4] = rand_sp(h, dv, &s, "w");
            o.a[0] = b * T, o.a[1] = hk, o.a[2] = dk, o.a[3] = hv, o.a[4] = dv, o.a[5] = T,
            o.a[6] = groups, o.a[8] = 0, o.a[9] = -1;
            native_vs_boundary_wgrad("gated_rmsnorm_wgrad", h, o, b, dv);
        }
    }
}

// MOE_COMBINE_FWD / BWD: k 3, d 11 over 300 tokens (blocks of 62 tokens), k 6 and 9, d 13
// and 600, with and without dropped slots (kidx -1: their dy rows and dp untouched; stored
// values, which round back unchanged).

static void body_MoeCombineEqualsTheBoundary()
{
    uint64_t s = 76;
    // {T, k, d}: k 6 and 9 take the one-pass backward's four-slot sums (and its tail),
    // d 600 the forward's 512-column passes
    const int64_t cases[3][3] = {{300, 3, 11}, {100, 6, 13}, {3, 9, 600}};
    for (auto &c : cases)
        for (int drop = 0; drop < 2; drop++) {
            const int64_t T = c[0], k = c[1], d = c[2];
            {
                Hand h(QT_BF16, g_a16);
                qt_op o = make_op(QT_OP_MOE_COMBINE_FWD);
                o.t[0] = rand_sp(h, T * d, &s, "out"), o.t[1] = rand_sp(h, T * k, &s, "p"),
                o.t[2] = rand_sp(h, T * k * d, &s, "y");
                if (drop) {
                    o.t[3] = h.add(T * k, QT_I32, "kidx");
                    for (int64_t q = 0; q < T * k; q++) h.i(o.t[3])[q] = xs(&s) % 4 == 0 ? -1 : 1;
                }
                o.a[0] = T, o.a[1] = k, o.a[2] = d;
                native_vs_boundary("moe_combine_fwd", h, o);
            }
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_MOE_COMBINE_BWD);
            o.t[0] = rand_stored(h, T * k, &s, "dp"), o.t[1] = rand_stored(h, T * k * d, &s, "dy"),
            o.t[2] = rand_sp(h, T * d, &s, "dout"), o.t[3] = rand_sp(h, T * k, &s, "p"),
            o.t[4] = rand_sp(h, T * k * d, &s, "y");
            if (drop) {
                o.t[5] = h.add(T * k, QT_I32, "kidx");
                for (int64_t q = 0; q < T * k; q++) h.i(o.t[5])[q] = xs(&s) % 4 == 0 ? -1 : 1;
            }
            o.a[0] = T, o.a[1] = k, o.a[2] = d;
            native_vs_boundary("moe_combine_bwd", h, o);
        }
}

// Packed documents for b sequences of S tokens: positions restarting at a few tokens.
static void pack_docs(Hand &h, int64_t b, int64_t S, uint64_t *s)
{
    const int32_t id = h.add(b * S, QT_I32, "positions");
    for (int64_t q = 0; q < b; q++) {
        int32_t p = 0;
        for (int64_t t = 0; t < S; t++) {
            if (t && xs(s) % 5 == 0) p = 0;
            h.i(id)[q * S + t] = p++;
        }
    }
    h.plan.packing = 1;
    h.plan.positions = id;
}

// GDN_CONV_FWD / BWD / WGRAD (Hk 2, Dk 4, Hv 4, Dv 8, K 4: 48 channels, qkvz rows of 80) on
// 3 sequences, one at a time natively; plain, packed documents, and the WGRAD's leaves as
// 2 token blocks per sequence (context_blocks 2).
static void body_GdnConvEqualsTheBoundary()
{
    uint64_t s = 77;
    const int64_t b = 3, S = 14, hk = 2, dk = 4, hv = 4, dv = 8, K = 4, cc = 48, wq = 80, T = b * S;
    for (int mode = 0; mode < 3; mode++) {  // 0 plain, 1 packed, 2 context blocks
        const int64_t a[7] = {b, S, hk, dk, hv, dv, K};
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_GDN_CONV_FWD);
            o.t[0] = rand_sp(h, T * cc, &s, "c"), o.t[1] = h.rand_f32(T * cc, &s, "pre"),
            o.t[2] = rand_sp(h, T * wq, &s, "qkvz"), o.t[3] = rand_sp(h, cc * K, &s, "w");
            for (int i = 0; i < 7; i++) o.a[i] = a[i];
            if (mode == 1) pack_docs(h, b, S, &s);
            native_vs_boundary("gdn_conv_fwd", h, o);
        }
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_GDN_CONV_BWD);
            o.t[0] = rand_sp(h, T * wq, &s, "dqkvz"), o.t[1] = rand_sp(h, T * cc, &s, "dc"),
            o.t[2] = h.rand_f32(T * cc, &s, "pre"), o.t[3] = rand_sp(h, cc * K, &s, "w");
            for (int i = 0; i < 7; i++) o.a[i] = a[i];
            if (mode == 1) pack_docs(h, b, S, &s);
            native_vs_boundary("gdn_conv_bwd", h, o);
        }
        Hand h(QT_BF16, g_a16);
        qt_op o = make_op(QT_OP_GDN_CONV_WGRAD);
        o.flags = QT_OPF_WGRAD;
        o.t[0] = rand_sp(h, T * cc, &s, "dc"), o.t[1] = h.rand_f32(T * cc, &s, "pre"),
        o.t[2] = rand_sp(h, T * wq, &s, "qkvz"), o.t[3] = rand_sp(h, cc * K, &s, "w");
        for (int i = 0; i < 7; i++) o.a[i] = a[i];
        o.a[8] = 0, o.a[9] = -1;
        if (mode == 1) pack_docs(h, b, S, &s);
        if (mode == 2) h.plan.context_blocks = 2;
        native_vs_boundary_wgrad("gdn_conv_wgrad", h, o, mode == 2 ? 2 * b : b, cc * K);
    }
}

// GDN_CORE_FWD / BWD, recurrent and chunked, each plain and packed, Dv 64 (the blocked paths) and
// 8 (the scalar ones), 3 sequences of 10 tokens in chunks of 4: one sequence at a time
// natively; o, dc, dg, dbeta rounded, states, rq, rk fp32 in place.
static void body_GdnCoreEqualsTheBoundary()
{
    uint64_t s = 78;
    const int64_t b = 3, S = 10, hk = 2, dk = 8, hv = 4, chunk = 4, T = b * S, nch = 3;
    for (int64_t dv : {64, 8})
        for (int algo = 0; algo < 2; algo++)
            for (int packed = 0; packed < 2; packed++) {
                const int64_t cc = 2 * hk * dk + hv * dv, C = chunk < S ? chunk : S;
                const int64_t a[8] = {b, S, hk, dk, hv, dv, chunk, algo};
                const int64_t sf = algo ? QT_GDN_CHUNK_FWD_SCRATCH(C, dk, dv) : 1,
                              sb = algo ? QT_GDN_CHUNK_BWD_SCRATCH(C, dk, dv)
                                        : QT_GDN_CORE_SCRATCH(chunk, dk, dv);
                {
                    Hand h(QT_BF16, g_a16);
                    qt_op o = make_op(QT_OP_GDN_CORE_FWD);
                    o.t[0] = rand_sp(h, T * hv * dv, &s, "o"),
                    o.t[1] = h.rand_f32(b * hv * nch * dk * dv, &s, "states"),
                    o.t[2] = h.rand_f32(T * hk, &s, "rq"), o.t[3] = h.rand_f32(T * hk, &s, "rk"),
                    o.t[4] = rand_sp(h, T * cc, &s, "c"), o.t[5] = rand_sp(h, T * hv, &s, "g"),
                    o.t[6] = rand_sp(h, T * hv, &s, "beta"), o.t[7] = h.add(sf, QT_F32, "scratch");
                    for (int64_t k = 0; k < T * hv; k++)  // decays: g <= 0 (as the gates give)
                        h.b(o.t[5])[k] |= g_sp ? 0 : 0x8000;
                    for (int i = 0; i < 8; i++) o.a[i] = a[i];
                    o.f[0] = 0.35f, o.f[1] = 1e-6f;
                    if (packed) pack_docs(h, b, S, &s);
                    native_vs_boundary("gdn_core_fwd", h, o);
                }
                Hand h(QT_BF16, g_a16);
                qt_op o = make_op(QT_OP_GDN_CORE_BWD);
                o.t[0] = rand_sp(h, T * cc, &s, "dc"), o.t[1] = rand_sp(h, T * hv, &s, "dg"),
                o.t[2] = rand_sp(h, T * hv, &s, "dbeta"), o.t[3] = rand_sp(h, T * hv * dv, &s, "do"),
                o.t[4] = rand_sp(h, T * cc, &s, "c"), o.t[5] = rand_sp(h, T * hv, &s, "g"),
                o.t[6] = rand_sp(h, T * hv, &s, "beta"),
                o.t[7] = h.rand_f32(b * hv * nch * dk * dv, &s, "states"),
                o.t[8] = h.rand_f32(T * hk, &s, "rq"), o.t[9] = h.rand_f32(T * hk, &s, "rk"),
                o.t[10] = h.add(sb, QT_F32, "scratch");
                for (int64_t k = 0; k < T * hv; k++) h.b(o.t[5])[k] |= g_sp ? 0 : 0x8000;
                for (int i = 0; i < 8; i++) o.a[i] = a[i];
                o.f[0] = 0.35f, o.f[1] = 1e-6f;
                if (packed) pack_docs(h, b, S, &s);
                native_vs_boundary("gdn_core_bwd", h, o);
            }
}

// GDN_GATES_FWD / BWD / WGRAD (ops_bf16_seq.c, token blocks): Hk 2, Hv 8 over 300 tokens
// (blocks of 128 rows and a short last one) and Hk 1, Hv 3 over 5 (one block); the WGRAD's
// two leaves (dA_log, ddt_bias) over 3 sequences, the parameters widened once.
static void body_GdnGatesEqualTheBoundary()
{
    uint64_t s = 79;
    const int64_t cases[2][3] = {{300, 2, 8}, {5, 1, 3}};  // T (per sequence for WGRAD), Hk, Hv
    for (auto &c : cases) {
        const int64_t T = c[0], hk = c[1], hv = c[2];
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_GDN_GATES_FWD);
            o.t[0] = rand_sp(h, T * hv, &s, "beta"), o.t[1] = rand_sp(h, T * hv, &s, "g"),
            o.t[2] = rand_sp(h, T * 2 * hv, &s, "ba"), o.t[3] = rand_sp(h, hv, &s, "A_log"),
            o.t[4] = rand_sp(h, hv, &s, "dt_bias");
            o.a[0] = T, o.a[1] = hk, o.a[2] = hv;
            native_vs_boundary("gdn_gates_fwd", h, o);
        }
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_GDN_GATES_BWD);
            o.t[0] = rand_sp(h, T * 2 * hv, &s, "dba"), o.t[1] = rand_sp(h, T * hv, &s, "dbeta"),
            o.t[2] = rand_sp(h, T * hv, &s, "dg"), o.t[3] = rand_sp(h, T * 2 * hv, &s, "ba"),
            o.t[4] = rand_sp(h, hv, &s, "A_log"), o.t[5] = rand_sp(h, hv, &s, "dt_bias");
            o.a[0] = T, o.a[1] = hk, o.a[2] = hv;
            native_vs_boundary("gdn_gates_bwd", h, o);
        }
        const int64_t b = 3;
        Hand h(QT_BF16, g_a16);
        qt_op o = make_op(QT_OP_GDN_GATES_WGRAD);
        o.flags = QT_OPF_WGRAD;
        o.t[0] = rand_sp(h, b * T * hv, &s, "dg"), o.t[1] = rand_sp(h, b * T * 2 * hv, &s, "ba"),
        o.t[2] = rand_sp(h, hv, &s, "A_log"), o.t[3] = rand_sp(h, hv, &s, "dt_bias");
        o.a[0] = b * T, o.a[1] = hk, o.a[2] = hv, o.a[3] = T, o.a[8] = 0, o.a[9] = 1;
        native_vs_boundary_wgrad("gdn_gates_wgrad", h, o, b, hv, hv);
    }
}

// ROPE_FWD / BWD (token blocks inside each sequence): rows of 4 x 70 (blocks of 7 rows, a
// short last one per sequence of 37) rotating 64 channels, and rows of 3 x 8 (one block per
// sequence) rotating all 8; plain (table offset per block) and packed documents (positions
// offset with the rows). The table is fp32, as planned.
static void body_RopeEqualsTheBoundary()
{
    uint64_t s = 80;
    const int64_t cases[2][5] = {{3, 37, 4, 70, 64}, {2, 5, 3, 8, 8}};  // b, S, H, hd, R
    for (auto &c : cases)
        for (int packed = 0; packed < 2; packed++) {
            const int64_t b = c[0], S = c[1], H = c[2], hd = c[3], R = c[4], n = b * S * H * hd;
            for (int bwd = 0; bwd < 2; bwd++) {
                Hand h(QT_BF16, g_a16);
                qt_op o = make_op(bwd ? QT_OP_ROPE_BWD : QT_OP_ROPE_FWD);
                o.t[0] = rand_sp(h, n, &s, bwd ? "dx" : "y"), o.t[1] = rand_sp(h, n, &s, "x");
                o.t[2] = h.rand_f32(S * R, &s, "table");
                for (int i = 0; i < 5; i++) o.a[i] = c[i];
                if (packed) pack_docs(h, b, S, &s);
                native_vs_boundary(bwd ? "rope_bwd" : "rope_fwd", h, o);
            }
        }
}

// ATTN_FWD / BWD (one sequence at a time): 3 sequences of 9 tokens, Hq 4 over Hkv 2, hd 16
// (the blocked backward with QT_ATTN_BWD_SCRATCH(S)) and hd 5 (the reference paths, a
// backward scratch of S floats); plain and packed documents. lse and the scratch are fp32.
static void body_AttnEqualsTheBoundary()
{
    uint64_t s = 81;
    const int64_t b = 3, S = 9, hq = 4, hkv = 2, T = b * S;
    for (int64_t hd : {16, 5})
        for (int packed = 0; packed < 2; packed++) {
            const int64_t a[5] = {b, S, hq, hkv, hd};
            {
                Hand h(QT_BF16, g_a16);
                qt_op o = make_op(QT_OP_ATTN_FWD);
                o.t[0] = rand_sp(h, T * hq * hd, &s, "o"), o.t[1] = h.rand_f32(b * hq * S, &s, "lse"),
                o.t[2] = rand_sp(h, T * hq * hd, &s, "q"), o.t[3] = rand_sp(h, T * hkv * hd, &s, "k"),
                o.t[4] = rand_sp(h, T * hkv * hd, &s, "v"), o.t[5] = h.add(S, QT_F32, "scratch");
                h.t[o.t[5]].role = QT_ROLE_SCRATCH;
                for (int i = 0; i < 5; i++) o.a[i] = a[i];
                o.f[0] = 0.25f;
                if (packed) pack_docs(h, b, S, &s);
                native_vs_boundary("attn_fwd", h, o);
            }
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_ATTN_BWD);
            o.t[0] = rand_sp(h, T * hq * hd, &s, "dq"), o.t[1] = rand_sp(h, T * hkv * hd, &s, "dk"),
            o.t[2] = rand_sp(h, T * hkv * hd, &s, "dv"), o.t[3] = rand_sp(h, T * hq * hd, &s, "do"),
            o.t[4] = rand_sp(h, T * hq * hd, &s, "q"), o.t[5] = rand_sp(h, T * hkv * hd, &s, "k"),
            o.t[6] = rand_sp(h, T * hkv * hd, &s, "v"), o.t[7] = rand_sp(h, T * hq * hd, &s, "o"),
            o.t[8] = h.rand_f32(b * hq * S, &s, "lse");
            o.t[9] = h.add(hd == 16 ? QT_ATTN_BWD_SCRATCH(S) : S, QT_F32, "scratch");
            h.t[o.t[9]].role = QT_ROLE_SCRATCH;
            for (int i = 0; i < 5; i++) o.a[i] = a[i];
            o.f[0] = 0.25f;
            if (packed) pack_docs(h, b, S, &s);
            native_vs_boundary("attn_bwd", h, o);
        }
}

// MOE_ROUTE_FWD / BWD (one sequence at a time): 3 sequences of 50 tokens, E 16, k 4, with
// the load-balance term (lb_seq fp32, accumulated; the backward's coefficient) and without
// it (no lb_seq, c = 0); the backward's idx random in [0, E).
static void body_MoeRouteEqualsTheBoundary()
{
    uint64_t s = 82;
    const int64_t b = 3, S = 50, E = 16, k = 4, T = b * S;
    for (int lb = 0; lb < 2; lb++) {
        {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_MOE_ROUTE_FWD);
            o.t[0] = h.add(T * k, QT_I32, "idx"), o.t[1] = rand_sp(h, T * k, &s, "p");
            if (lb) o.t[2] = h.rand_f32(b, &s, "lb_seq");
            o.t[3] = rand_sp(h, T * E, &s, "logits");
            o.a[0] = T, o.a[1] = E, o.a[2] = k, o.a[3] = S;
            o.f[0] = lb ? 0.01f : 0.0f;
            native_vs_boundary("moe_route_fwd", h, o);
        }
        Hand h(QT_BF16, g_a16);
        qt_op o = make_op(QT_OP_MOE_ROUTE_BWD);
        o.t[0] = rand_sp(h, T * E, &s, "dlogits"), o.t[1] = rand_sp(h, T * k, &s, "dp"),
        o.t[2] = rand_sp(h, T * E, &s, "logits"), o.t[3] = h.add(T * k, QT_I32, "idx"),
        o.t[4] = rand_sp(h, T * k, &s, "p");
        for (int64_t q = 0; q < T * k; q++) h.i(o.t[3])[q] = (int32_t)(xs(&s) % (uint64_t)E);
        o.a[0] = T, o.a[1] = E, o.a[2] = k, o.a[3] = S;
        o.f[0] = lb ? 0.3f : 0.0f;
        native_vs_boundary("moe_route_bwd", h, o);
    }
}

// XENT, plain form (row blocks, each sequence's sums continued across them): V 2100 (one
// row per block, past the block size) and V 300 (6 rows per block, a short last one), 2
// sequences of 7 rows, targets in range, -1 and V (no loss, zero rows); with and without the
// z-loss (z_seq fp32).
static void body_XentEqualsTheBoundary()
{
    uint64_t s = 83;
    const int64_t b = 2, S = 7, T = b * S;
    for (int64_t V : {2100, 300})
        for (int zl = 0; zl < 2; zl++) {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_XENT);
            o.t[0] = h.rand_f32(b, &s, "loss_seq"), o.t[1] = rand_sp(h, T * V, &s, "dlogits"),
            o.t[2] = rand_sp(h, T * V, &s, "logits"), o.t[3] = h.add(T, QT_I32, "targets");
            for (int64_t t = 0; t < T; t++)
                h.i(o.t[3])[t] = t == 3 ? -1 : t == 9 ? (int32_t)V : (int32_t)(xs(&s) % (uint64_t)V);
            if (zl) o.t[5] = h.rand_f32(b, &s, "z_seq");
            o.a[0] = b, o.a[1] = S, o.a[2] = V;
            o.f[0] = zl ? 1e-4f : 0.0f;
            native_vs_boundary(zl ? "xent z" : "xent", h, o);
        }
}

// Targets of T rows over V columns: random, with -1 at row 3 and V at row 9 (no loss, zero
// rows) when there are that many rows.
static void xent_targets(Hand &h, int32_t id, int64_t T, int64_t V, uint64_t *s)
{
    for (int64_t t = 0; t < T; t++)
        h.i(id)[t] = t == 3 ? -1 : t == 9 ? (int32_t)V : (int32_t)(xs(s) % (uint64_t)V);
}

// XENT with canonical vocabulary blocks (nb > 0, one rank: the phases over row blocks, the
// exponentials kept in the staging region): V 2100 in 4 blocks (a row per block, past the
// block size) and V 300 in 3 (6 rows per block, a short last one), 2 sequences of 7 rows,
// with and without the z-loss; the scratch fp32 QT_XENT_BLK_SCRATCH(T, nb, 1).
static void body_XentBlockedEqualsTheBoundary()
{
    uint64_t s = 84;
    const int64_t b = 2, S = 7, T = b * S;
    const int64_t cases[2][2] = {{2100, 4}, {300, 3}};
    for (auto &c : cases)
        for (int zl = 0; zl < 2; zl++) {
            const int64_t V = c[0], nb = c[1];
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(QT_OP_XENT);
            o.t[0] = h.rand_f32(b, &s, "loss_seq"), o.t[1] = rand_sp(h, T * V, &s, "dlogits"),
            o.t[2] = rand_sp(h, T * V, &s, "logits"), o.t[3] = h.add(T, QT_I32, "targets");
            xent_targets(h, o.t[3], T, V, &s);
            o.t[4] = h.rand_f32(QT_XENT_BLK_SCRATCH(T, nb, 1), &s, "scratch");
            if (zl) o.t[5] = h.rand_f32(b, &s, "z_seq");
            o.a[0] = b, o.a[1] = S, o.a[2] = V, o.a[3] = nb;
            o.f[0] = zl ? 1e-4f : 0.0f;
            native_vs_boundary(zl ? "xent blocked z" : "xent blocked", h, o);
        }
}

// XENT_MTP: 2 blocks x 3 parts (the main rows and 2 MTP depths) of 5 rows, V 300, plain and
// in 3 vocabulary blocks, with and without the z-loss (main runs only), the scale from f0 and
// from the runtime's t6 tensor. The scratch past the b x n entries is the blocked form's
// (laid out per run by the boundary's z path: not compared).
static void body_XentMtpEqualsTheBoundary()
{
    uint64_t s = 85;
    const int64_t b = 2, n = 3, S = 5, V = 300, T = b * n * S;
    for (int64_t nb : {0, 3})
        for (int zl = 0; zl < 2; zl++)
            for (int tsc = 0; tsc < 2; tsc++) {
                Hand h(QT_BF16, g_a16);
                qt_op o = make_op(QT_OP_XENT_MTP);
                o.t[0] = h.rand_f32(b, &s, "loss_seq"), o.t[1] = h.rand_f32(b, &s, "mtp_loss_seq"),
                o.t[2] = rand_sp(h, T * V, &s, "dlogits"), o.t[3] = rand_sp(h, T * V, &s, "logits"),
                o.t[4] = h.add(T, QT_I32, "targets");
                xent_targets(h, o.t[4], T, V, &s);
                const int64_t ns = b * n + (nb ? QT_XENT_BLK_SCRATCH(T, nb, 1) : 0);
                o.t[5] = h.rand_f32(ns, &s, "scratch");
                if (tsc) o.t[6] = h.rand_f32(1, &s, "scale");
                if (zl) o.t[7] = h.rand_f32(b, &s, "z_seq");
                o.a[0] = b, o.a[1] = S, o.a[2] = V, o.a[3] = nb, o.a[5] = n;
                o.f[0] = 0.37f, o.f[1] = zl ? 1e-4f : 0.0f;
                native_vs_boundary("xent_mtp", h, o, o.t[5], b * n);
            }
}

// STACK, SPLIT, STACK_BWD, SPLIT_BWD: 3 blocks of 3 parts of 4 rows x 37, every part given,
// and with part 2's slot empty (STACK leaves that part of y and SPLIT_BWD that of dy, which
// the boundary rounds back whole: the native form rounds them onto themselves).
static void body_MtpStackEqualsTheBoundary()
{
    uint64_t s = 86;
    const int64_t nb = 3, n = 3, rows = 4, w = 37, part = rows * w;
    const unsigned kinds[4] = {QT_OP_STACK, QT_OP_SPLIT, QT_OP_STACK_BWD, QT_OP_SPLIT_BWD};
    for (unsigned kind : kinds)
        for (int gap = 0; gap < 2; gap++) {
            Hand h(QT_BF16, g_a16);
            qt_op o = make_op(kind);
            o.t[0] = rand_sp(h, nb * n * part, &s, "y");
            for (int64_t j = 0; j < n; j++)
                if (!(gap && j == 2)) o.t[1 + j] = rand_sp(h, nb * part, &s, "x");
            o.a[0] = nb, o.a[1] = rows, o.a[2] = w, o.a[3] = n;
            native_vs_boundary(qt_kernel_table[kind].name, h, o);
        }
}

// The one-pass gated norm kernels (kernels/bf16_rows.h) against the fp32 kernels on the
// widened rows, each written bf16 element rounded once, at the bench model's shape (T 1024,
// Hk 4, Dk 64, Hv 8, Dv 64: 2^19 outputs, so even an fp32 difference of one ulp in a
// fraction of them shows through the rounding) and 300 times at T 1, Hv 3, Dv 256 (3 rows:
// the backward's tail, fewer than four rows, 2.3e5 outputs in all). Every byte equal
// (tolerance 0): y, rstd (fp32), d_o, all of dqkvz (other columns untouched), the fp32
// weight gradient (all heads, and heads [1, 3)).
TEST(Bf16NativeRows, GatedRmsnormKernelsEqualTheFp32KernelsAtScale)
{
    // T, Hk, Dk, Hv, Dv, repeats
    const int64_t cases[2][6] = {{1024, 4, 64, 8, 64, 1}, {1, 1, 5, 3, 256, 300}};
    uint64_t s = 91;
    for (auto &c : cases)
    for (int64_t rep = 0; rep < c[5]; rep++) {
        const int64_t T = c[0], hk = c[1], dk = c[2], hv = c[3], dv = c[4],
                      wq = hk * (2 * dk + 2 * (hv / hk) * dv), no = T * hv * dv;
        std::vector<qt_bf16> o(no), dy(no), z(T * wq), y(no), d_o(no), dz(T * wq);
        vecf w(dv), of(no), dyf(no), zf(T * wq), yf(no), rs(T * hv), rsf(T * hv), dof(no),
            dzf(T * wq), dw(dv, 0.5f), dwf(dv, 0.5f);
        auto fill = [&](std::vector<qt_bf16> &b, vecf &f) {
            for (size_t k = 0; k < b.size(); k++) {
                b[k] = qt_bf16_from_f32(rndf(&s));
                f[k] = qt_f32_from_bf16(b[k]);
            }
        };
        fill(o, of), fill(dy, dyf), fill(z, zf), fill(d_o, dof), fill(dz, dzf);
        for (auto &v : w) v = qt_f32_from_bf16(qt_bf16_from_f32(rndf(&s)));
        qt_b16_gated_rmsnorm_fwd(y.data(), rs.data(), o.data(), z.data(), w.data(), T, hk, dk, hv,
                                 dv, 1e-6f);
        qt_gated_rmsnorm_fwd(yf.data(), rsf.data(), of.data(), zf.data(), w.data(), T, hk, dk, hv,
                             dv, 1e-6f);
        int64_t bad = 0;
        for (int64_t k = 0; k < no; k++) bad += y[k] != qt_bf16_from_f32(yf[k]);
        for (int64_t k = 0; k < T * hv; k++) bad += bits(rs[k]) != bits(rsf[k]);
        LONGS_EQUAL(0, bad);
        qt_b16_gated_rmsnorm_bwd(d_o.data(), dz.data(), rs.data(), dy.data(), o.data(), z.data(),
                                 w.data(), T, hk, dk, hv, dv);
        qt_gated_rmsnorm_bwd(dof.data(), dzf.data(), rsf.data(), dyf.data(), of.data(), zf.data(),
                             w.data(), T, hk, dk, hv, dv);
        for (int64_t k = 0; k < no; k++) bad += d_o[k] != qt_bf16_from_f32(dof[k]);
        for (int64_t k = 0; k < T * wq; k++) bad += dz[k] != qt_bf16_from_f32(dzf[k]);
        LONGS_EQUAL(0, bad);
        for (int64_t j0 : {0, 1}) {
            const int64_t j1 = j0 ? (hv < 3 ? hv : 3) : hv;
            qt_b16_gated_rmsnorm_wgrad_heads(dw.data(), rs.data(), dy.data(), o.data(), z.data(), T,
                                             hk, dk, hv, dv, j0, j1);
            qt_gated_rmsnorm_wgrad_heads(dwf.data(), rsf.data(), dyf.data(), of.data(), zf.data(),
                                         T, hk, dk, hv, dv, j0, j1);
            for (int64_t i = 0; i < dv; i++) bad += bits(dw[i]) != bits(dwf[i]);
        }
        LONGS_EQUAL(0, bad);
    }
}

// Each body above with no special values, with one in 64 and with one in 5.
TEST(Bf16NativeRows, ElementwiseKindsEqualTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_ElementwiseKindsEqualTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, SigmoidGateEqualsTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_SigmoidGateEqualsTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, RmsnormFwdBwdEqualTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_RmsnormFwdBwdEqualTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, RmsnormWgradEqualsTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_RmsnormWgradEqualsTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, GatedRmsnormEqualsTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_GatedRmsnormEqualsTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, MoeCombineEqualsTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_MoeCombineEqualsTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, GdnConvEqualsTheBoundary)
{
    for (int sp : {0, 64, 5}) {
        g_sp = sp;
        body_GdnConvEqualsTheBoundary();
    }
}

TEST(Bf16NativeRows, GdnCoreEqualsTheBoundary)
{
    for (int sp : {0, 64, 5}) {
        g_sp = sp;
        body_GdnCoreEqualsTheBoundary();
    }
}

TEST(Bf16NativeRows, GdnGatesEqualTheBoundary)
{
    for (int sp : {0, 64, 5}) {
        g_sp = sp;
        body_GdnGatesEqualTheBoundary();
    }
}

TEST(Bf16NativeRows, RopeEqualsTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_RopeEqualsTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, AttnEqualsTheBoundary)
{
    for (int sp : {0, 64, 5}) {
        g_sp = sp;
        body_AttnEqualsTheBoundary();
    }
}

TEST(Bf16NativeRows, MoeRouteEqualsTheBoundary)
{
    for (int sp : {0, 64, 5}) {
        g_sp = sp;
        body_MoeRouteEqualsTheBoundary();
    }
}

TEST(Bf16NativeRows, XentEqualsTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_XentEqualsTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, XentBlockedEqualsTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_XentBlockedEqualsTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, XentMtpEqualsTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_XentMtpEqualsTheBoundary();
        }
    g_fin = 0;
}

TEST(Bf16NativeRows, MtpStackEqualsTheBoundary)
{
    for (int fin : {0, 1})
        for (int sp : {0, 64, 5}) {
            g_sp = sp, g_fin = fin;
            body_MtpStackEqualsTheBoundary();
        }
    g_fin = 0;
}

// qt_bf16_copy_n (sixteen lanes where built) against its scalar form on all 2^16 bf16
// inputs, out of place and in place, at an offset that leaves a scalar tail.
TEST(Bf16NativeRows, CopyEqualsItsScalarFormOnAllInputs)
{
    std::vector<qt_bf16> src(65536 + 7), a(src.size()), r(src.size());
    for (size_t k = 0; k < src.size(); k++) src[k] = (qt_bf16)(k * 40503u);
    qt_bf16_copy_n(a.data(), src.data(), (int64_t)src.size());
    qt_bf16_copy_n_ref(r.data(), src.data(), (int64_t)src.size());
    CHECK(a == r);
    std::set<qt_bf16> seen(src.begin(), src.end());
    LONGS_EQUAL(65536, (long)seen.size());
    for (size_t k = 0; k < src.size(); k++)
        LONGS_EQUAL(qt_bf16_from_f32(qt_f32_from_bf16(src[k])), r[k]);
    std::vector<qt_bf16> in(src);
    qt_bf16_copy_n(in.data() + 3, in.data() + 3, (int64_t)in.size() - 3);
    for (size_t k = 0; k < 3; k++) LONGS_EQUAL(src[k], in[k]);
    for (size_t k = 3; k < src.size(); k++) LONGS_EQUAL(r[k], in[k]);
}

// The one-pass cross entropy row (kernels/bf16_rows.h qt_b16_xent_row) against qt_xent_chain /
// qt_xent_z_chain on the widened rows, each dlogit rounded once (times the MTP scale first
// where given), at the bench model's vocabulary (V 4096, 48 rows: 2e5 outputs) and at V 37
// (the sixteen-lane loops' tails): every byte of dlogits and the loss / z sums' bits equal;
// a row with an inf or a NaN is refused with nothing written.
TEST(Bf16NativeRows, XentRowKernelEqualsTheFp32Kernel)
{
    uint64_t s = 92;
    for (int64_t V : {4096, 37})
        for (int mode = 0; mode < 4; mode++) {  // bit 0: z-loss, bit 1: scaled
            const int64_t T = 48;
            const float z = (mode & 1) ? 1e-4f : 0.0f, sc = 0.37f;
            std::vector<qt_bf16> l(T * V), dl(T * V);
            vecf lf(T * V), g(V), gf(T * V);
            std::vector<int32_t> tg(T);
            for (int64_t k = 0; k < T * V; k++) {
                l[k] = qt_bf16_from_f32(4.0f * rndf(&s));
                lf[k] = qt_f32_from_bf16(l[k]);
            }
            for (int64_t t = 0; t < T; t++)
                tg[t] = t % 11 == 5 ? -1 : (int32_t)(xs(&s) % (uint64_t)V);
            float acc = 0.25f, zacc = 0.5f, accf = 0.25f, zaccf = 0.5f;
            for (int64_t t = 0; t < T; t++)
                LONGS_EQUAL(0, qt_b16_xent_row(&acc, &zacc, &dl[t * V], &l[t * V], tg[t], V, z,
                                               mode >> 1, sc, g.data()));
            if (z != 0.0f) qt_xent_z_chain(&accf, &zaccf, gf.data(), lf.data(), tg.data(), T, V, z);
            else qt_xent_chain(&accf, gf.data(), lf.data(), tg.data(), T, V);
            int64_t bad = 0;
            for (int64_t k = 0; k < T * V; k++)
                bad += dl[k] != qt_bf16_from_f32((mode >> 1) ? gf[k] * sc : gf[k]);
            LONGS_EQUAL(0, bad);
            LONGS_EQUAL(bits(accf), bits(acc));
            LONGS_EQUAL(bits(zaccf), bits(zacc));
            std::vector<qt_bf16> keep(dl);
            l[3] = 0x7fc0;
            CHECK(qt_b16_xent_row(&acc, &zacc, &dl[0], &l[0], tg[0], V, z, 0, sc, g.data()) != 0);
            CHECK(dl == keep);
            LONGS_EQUAL(bits(accf), bits(acc));
        }
}

// The one-pass rotation (qt_b16_rope) against qt_rope_fwd_pos / qt_rope_bwd_pos on the
// widened rows, rounded once: 64 rows of 8 heads of 64 rotating all 64 and 32 of them,
// 3 heads of 10 rotating 6, plain (rows t) and with positions.
TEST(Bf16NativeRows, RopeKernelEqualsTheFp32Kernel)
{
    uint64_t s = 93;
    const int64_t cases[3][4] = {{64, 8, 64, 64}, {64, 8, 64, 32}, {5, 3, 10, 6}};  // T, H, hd, R
    for (auto &c : cases)
        for (int usepos = 0; usepos < 2; usepos++)
            for (int bwd = 0; bwd < 2; bwd++) {
                const int64_t T = c[0], H = c[1], hd = c[2], R = c[3], n = T * H * hd;
                std::vector<qt_bf16> x(n), y(n);
                vecf xf(n), yf(n), tab(T * R);
                std::vector<int32_t> pos(T);
                for (int64_t k = 0; k < n; k++) {
                    x[k] = qt_bf16_from_f32(rndf(&s)), y[k] = qt_bf16_from_f32(rndf(&s));
                    xf[k] = qt_f32_from_bf16(x[k]), yf[k] = qt_f32_from_bf16(y[k]);
                }
                for (auto &v : tab) v = rndf(&s);
                for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)(xs(&s) % (uint64_t)T);
                const int32_t *p = usepos ? pos.data() : NULL;
                qt_b16_rope(y.data(), x.data(), tab.data(), p, T, H, hd, R, bwd);
                if (bwd) qt_rope_bwd_pos(yf.data(), xf.data(), tab.data(), p, 1, T, H, hd, R);
                else qt_rope_fwd_pos(yf.data(), xf.data(), tab.data(), p, 1, T, H, hd, R);
                int64_t bad = 0;
                for (int64_t k = 0; k < n; k++) bad += y[k] != qt_bf16_from_f32(yf[k]);
                LONGS_EQUAL(0, bad);
            }
}
