// test_runtime.cpp - unit tests of the firmware runtime: pairwise gradient trees (direct
// and through the interpreter for every micro_batch x grad_accum split), the exact
// accumulator, the learning-rate schedule, AdamW and clipping, parameter init statistics,
// shard-independent init, global indices of dims split over two mesh axes (segmented or
// not), the fingerprint, a whole optimizer step under different
// batch splits with a fake kernel table (no real kernels needed), and the single-rank
// build's refusal to run as one process of a multi-process job (comm_env.c).
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <algorithm>

extern "C" {
#include "qt_plan.h"
#include "qt_ops.h"
#include "runtime/qt_runtime.h"
#include "io/qt_io.h"
#include "base/qt_plan_hash.h"
#include "runtime/qt_exact.h"
#include "runtime/qt_tree.h"
#include "runtime/qt_interp.h"
#include "runtime/qt_validate.h"
#include "runtime/qt_optim.h"
#include "runtime/qt_rng.h"
#include "runtime/qt_arena.h"
#include "comm/qt_comm.h"
#include "qt_err.h"
}
#include <stdlib.h>
#include <string>

#include "CppUTest/TestHarness.h"
#include "qt_test_util.h"

// ------------------------------------------------------------------ shared helpers

static uint32_t rt_bits(float x) { return qt_test_bits(x); }

static uint64_t rt_bits_d(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

// Leaf value of sequence `id`, element k: magnitudes spread over 2^-12..2^10 so that float
// additions round and a different summation order would change bits.
static float rt_leafval(int64_t id, int64_t k)
{
    uint64_t h = qt_mix64((uint64_t)id * 1000003ull + (uint64_t)k);
    float m = (float)((int64_t)(h % 2000001) - 1000000) / 7.0f;
    int e = (int)((h >> 32) % 23) - 12;
    return ldexpf(m, e) / 1000.0f;
}

// Reference pairwise sum of leaves [lo, lo+n) for element k: a perfect binary tree for the
// largest power-of-two block on the left, then the rest, left operand = earlier leaves.
static float rt_ref_pairwise(int64_t lo, int64_t n, int64_t k)
{
    if (n == 1) return rt_leafval(lo, k);
    int64_t big = 1;
    while (big * 2 <= n) big *= 2;
    if (big == n) return rt_ref_pairwise(lo, n / 2, k) + rt_ref_pairwise(lo + n / 2, n / 2, k);
    return rt_ref_pairwise(lo, big, k) + rt_ref_pairwise(lo + big, n - big, k);
}

// ------------------------------------------------------------------ tree, direct

TEST_GROUP(RuntimeTree){};

TEST(RuntimeTree, MatchesRecursivePairwiseBitExactly)
{
    enum { NE = 7, NL = 6 };
    static float lv[NL][NE], before[NL][NE], scratch[NE];
    float *levels[NL];
    int differs_from_linear = 0;
    for (int l = 0; l < NL; l++) levels[l] = lv[l];
    for (int64_t n = 1; n <= 9; n++) {
        memset(lv, 0xff, sizeof lv);  // NaN garbage: the tree must never read a free level
        for (int64_t i = 0; i < n; i++) {
            float *dst = qt_tree_leaf_dest(levels, 0, scratch, i);
            for (int k = 0; k < NE; k++) dst[k] = rt_leafval(i, k);
            qt_tree_push(levels, 0, NE, scratch, i);
        }
        // the total is completed in place in the top level (the plans' gradient region)
        const int top = qt_tree_levels_needed(n) - 1;
        memcpy(before, lv, sizeof lv);
        qt_tree_finalize(levels, NE, n);
        for (int l = 0; l < NL; l++)  // every other level is only read
            if (l != top) CHECK(memcmp(before[l], lv[l], sizeof lv[l]) == 0);
        const float *out = lv[top];
        for (int k = 0; k < NE; k++) {
            float ref = rt_ref_pairwise(0, n, k);
            // bit-exact: the contract is identical bits, not closeness
            LONGS_EQUAL(rt_bits(ref), rt_bits(out[k]));
            float lin = 0.0f;
            for (int64_t i = 0; i < n; i++) lin = lin + rt_leafval(i, k);
            differs_from_linear |= rt_bits(lin) != rt_bits(out[k]);
        }
    }
    // the data must be able to tell a tree from a left-to-right sum, else the test is void
    CHECK(differs_from_linear);
    LONGS_EQUAL(1, qt_tree_levels_needed(1));
    LONGS_EQUAL(2, qt_tree_levels_needed(3));
    LONGS_EQUAL(3, qt_tree_levels_needed(4));
    LONGS_EQUAL(4, qt_tree_levels_needed(9));
}

TEST(RuntimeTree, StridedUnitsPushTheGlobalOrder)
{
    // qt_tree_push_units_strided (the routed experts replicated over context): R = 4 members
    // (hi 0..1 x context lo 0..1, I = 2), q = 6 units each (P = 2 exchange members x Q = 3).
    // Global leaf g = ((hi P + e) I + lo) Q + s holds value rt_leafval(g, k); member m's block
    // of unit u = e Q + s holds that leaf. The counter's total must be the pairwise tree over
    // the 24 leaves in global order, and the plain (member, unit) order must differ.
    enum { NE = 5, R = 4, I = 2, P = 2, Q = 3, q = P * Q, N = R * q, NL = 6 };
    static float ub[q][R * NE], lv[NL][NE];
    float *unit[q], *levels[NL];
    for (int u = 0; u < q; u++) unit[u] = ub[u];
    for (int l = 0; l < NL; l++) levels[l] = lv[l];
    for (int m = 0; m < R; m++)
        for (int u = 0; u < q; u++) {
            const int hi = m / I, lo = m % I, e = u / Q, sq = u % Q;
            const int64_t g = ((int64_t)(hi * P + e) * I + lo) * Q + sq;
            for (int k = 0; k < NE; k++) ub[u][m * NE + k] = rt_leafval(g, k);
        }
    memset(lv, 0xff, sizeof lv);
    qt_tree_push_units_strided(levels, 0, NE, unit, R, q, NE, 0, I, P);
    qt_tree_finalize(levels, NE, N);
    const int top = qt_tree_levels_needed(N) - 1;
    int plain_differs = 0;
    float strided[NE];
    for (int k = 0; k < NE; k++) {
        strided[k] = lv[top][k];
        LONGS_EQUAL(rt_bits(rt_ref_pairwise(0, N, k)), rt_bits(strided[k]));
    }
    memset(lv, 0xff, sizeof lv);
    qt_tree_push_units(levels, 0, NE, unit, R, q, NE, 0);
    qt_tree_finalize(levels, NE, N);
    for (int k = 0; k < NE; k++) plain_differs |= rt_bits(lv[top][k]) != rt_bits(strided[k]);
    CHECK(plain_differs);  // the order matters for these values: the test is not void
}

// A padded batch (issue 35, docs/determinism.md "Padded sequences"): N real leaves followed
// by P leaves of -0.0 (the interpreter's padded-sequence leaf) give the N-leaf tree's bits,
// for every N and P; a -0.0 total (every leaf -0.0 in an element) keeps its sign, which a
// +0.0 pad would not.
static uint32_t rt_tree_total(float (*lv)[8], float **levels, int64_t n, int64_t pads, float pad)
{
    static float scratch[8];
    memset(lv, 0xff, sizeof(float) * 8 * 8);
    for (int64_t i = 0; i < n + pads; i++) {
        float *dst = qt_tree_leaf_dest(levels, 0, scratch, i);
        for (int k = 0; k < 8; k++) dst[k] = i < n ? (k == 7 ? -0.0f : rt_leafval(i, k)) : pad;
        qt_tree_push(levels, 0, 8, scratch, i);
    }
    qt_tree_finalize(levels, 8, n + pads);
    const float *out = lv[qt_tree_levels_needed(n + pads) - 1];
    uint32_t h = 0;
    for (int k = 0; k < 8; k++) h = h * 2654435761u + rt_bits(out[k]);
    return h;
}

TEST(RuntimeTree, PaddedLeavesOfMinusZeroAreTheIdentity)
{
    static float lv[8][8];
    float *levels[8];
    for (int l = 0; l < 8; l++) levels[l] = lv[l];
    int plus_differs = 0;
    for (int64_t n = 1; n <= 40; n++) {
        const uint32_t ref = rt_tree_total(lv, levels, n, 0, 0.0f);
        CHECK(std::signbit(lv[qt_tree_levels_needed(n) - 1][7]));   // -0.0 sums to -0.0
        for (int64_t pads = 1; pads <= 9 && n + pads < 128; pads++) {
            LONGS_EQUAL(ref, rt_tree_total(lv, levels, n, pads, -0.0f));
            plus_differs |= rt_tree_total(lv, levels, n, pads, 0.0f) != ref;
        }
    }
    CHECK(plus_differs);   // the -0.0 element: a +0.0 pad turns it into +0.0
}

TEST(RuntimeTree, LargePushesStreamTheSameBits)
{
    // parameters of QT_TREE_STREAM (2^19) floats or more take the non-temporal carry
    // stores (tree.c): 5 leaves of 2^19 + 21 floats (a tail past the vector body, aligned
    // and unaligned offsets) against the plain per-element carry order
    enum { NE = (1 << 19) + 21, NL = 3 };
    static float lv[NL][NE + 27] __attribute__((aligned(64))), scratch[NE];  // rows of 64n bytes
    for (int shift = 0; shift < 2; shift++) {  // level pointers 64-byte aligned, then not
        float *levels[NL];
        for (int l = 0; l < NL; l++) levels[l] = lv[l] + (shift ? 3 : 0);
        memset(lv, 0xff, sizeof lv);
        for (int64_t i = 0; i < 5; i++) {
            float *dst = qt_tree_leaf_dest(levels, 0, scratch, i);
            for (int k = 0; k < NE; k++) dst[k] = rt_leafval(i, k);
            qt_tree_push(levels, 0, NE, scratch, i);
        }
        qt_tree_finalize(levels, NE, 5);
        int bad = 0;
        for (int k = 0; k < NE; k++) bad |= rt_bits(rt_ref_pairwise(0, 5, k)) != rt_bits(levels[2][k]);
        CHECK(!bad);
    }
}

// ------------------------------------------------------------------ a hand-built plan

enum { RT_S = 4, RT_BMAX = 9, RT_N0 = 5, RT_N1 = 3, RT_LEVELS = 6 };
enum {
    // no gradient region of its own: it is the top tree level (rt_build_plan)
    RT_OFF_PARAMS = 0, RT_OFF_M = 256, RT_OFF_V = 512, RT_OFF_SCRATCH = 768,
    RT_OFF_LEVEL0 = 1024, RT_OFF_TOKENS = RT_OFF_LEVEL0 + 256 * RT_LEVELS,
    RT_OFF_TARGETS = RT_OFF_TOKENS + 256, RT_OFF_LOSS = RT_OFF_TARGETS + 256,
    RT_ARENA_BYTES = RT_OFF_LOSS + 256
};

// The runtime checks that a plan's arena lies in the linker section, as generated plans do.
static unsigned char rt_arena[2u << 20] __attribute__((section(".bss.qt_arena"), aligned(2u << 20)));

struct rt_plan_store {
    qt_plan plan;
    qt_tensor tensors[5];
    qt_param params[2];
    qt_flat_range ranges[1];
    qt_op ops[2];
    qt_op step_ops[2];
};

static void rt_fake_loss(const qt_op *op, const qt_ctx *ctx)
{
    const int32_t *tok = qt_i32(ctx, op->t[1]);
    float *loss = qt_f32(ctx, op->t[0]);
    const float *p0 = qt_f32(ctx, op->t[2]);
    for (int64_t s = 0; s < op->a[0]; s++)
        loss[s] = (float)tok[s * op->a[1]] * 0.1f + 1.0f / 3.0f + p0[0] * p0[0];
}

// dW of sequence s: the leaf value of the sequence whose first token id is read from
// the tokens (the global sequence number, by construction of the test data), times a
// factor that depends on the current parameters so the optimizer sees a moving gradient.
static void rt_fake_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    const int32_t *tok = qt_i32(ctx, op->t[1]);
    const float *p0 = qt_f32(ctx, op->t[2]);
    int64_t id = tok[seq * op->a[1]];
    for (int k = 0; k < RT_N0; k++) dw[0][k] += rt_leafval(id, k) * (1.0f + 0.25f * p0[k]);
    for (int k = 0; k < RT_N1; k++) dw[1][k] += rt_leafval(id, 100 + k);
}

// The same leaves from a wrapper that writes them (QT_OPP_WGRAD_WRITES: leaves arrive unzeroed).
static void rt_fake_wgrad_writes(const qt_op *op, const qt_ctx *ctx, int64_t seq,
                                 float *const dw[2])
{
    const int32_t *tok = qt_i32(ctx, op->t[1]);
    const float *p0 = qt_f32(ctx, op->t[2]);
    int64_t id = tok[seq * op->a[1]];
    for (int k = 0; k < RT_N0; k++) dw[0][k] = 0.0f + rt_leafval(id, k) * (1.0f + 0.25f * p0[k]);
    for (int k = 0; k < RT_N1; k++) dw[1][k] = 0.0f + rt_leafval(id, 100 + k);
}

// The same leaves written with the leaf-tree carry the interpreter offers for odd leaves
// (qt_leaf_carry.h), as the matmul kernel's epilogue does: slot 0 always, slot 1 only when
// rt_carry_both (else that leaf goes the scratch + qt_tree_push way, as a kind without the
// fused epilogue would).
static int rt_carry_both;
static void rt_fake_wgrad_carry(const qt_op *op, const qt_ctx *ctx, int64_t seq,
                                float *const dw[2])
{
    const int32_t *tok = qt_i32(ctx, op->t[1]);
    const float *p0 = qt_f32(ctx, op->t[2]);
    int64_t id = tok[seq * op->a[1]];
    qt_wgrad_epi *epi = ctx->wgrad_epi;
    for (int slot = 0; slot < 2; slot++) {
        const int n = slot ? RT_N1 : RT_N0;
        const qt_leaf_carry *cy = epi && (slot == 0 || rt_carry_both) ? epi->carry[slot] : NULL;
        for (int k = 0; k < n; k++) {
            float v = 0.0f + (slot ? rt_leafval(id, 100 + k)
                                   : rt_leafval(id, k) * (1.0f + 0.25f * p0[k]));
            if (cy)
                for (int l = 0; l < cy->n; l++) v = cy->add[l][k] + v;
            (cy ? cy->dst : dw[slot])[k] = v;
        }
        if (cy) epi->done[slot] = 1;
    }
}

static qt_kernel_entry rt_table[QT_OP_COUNT];

static void rt_make_table(void)
{
    // the real table (step ops included), with fakes for the loss and the one WGRAD op
    memcpy(rt_table, qt_kernel_table, sizeof rt_table);
    rt_table[QT_OP_XENT].name = "fake_loss";
    rt_table[QT_OP_XENT].run = rt_fake_loss;
    rt_table[QT_OP_MATMUL_WGRAD].name = "fake_wgrad";
    rt_table[QT_OP_MATMUL_WGRAD].wgrad = rt_fake_wgrad;
    rt_table[QT_OP_MATMUL_WGRAD].props &= ~QT_OPP_WGRAD_WRITES;  // the fake accumulates into zeroed leaves
}

static void rt_build_plan(rt_plan_store *st, int64_t b, int64_t G)
{
    memset(st, 0, sizeof *st);
    qt_plan *p = &st->plan;
    p->run_name = "rt-test";
    p->generator_version = "test";
    p->hash = 0x1234;
    p->n_ranks = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++) p->mesh[a] = 1;
    p->train.micro_batch = b;
    p->train.grad_accum = G;
    p->train.seq_len = RT_S;
    p->train.global_batch = b * G;
    p->train.steps = 10;
    p->train.schedule_steps = 10;
    p->train.lr = 0.01f;
    p->train.adam_b1 = 0.9f;
    p->train.adam_b2 = 0.95f;
    p->train.adam_eps = 1e-8f;
    p->train.weight_decay = 0.1f;
    p->train.clip = 1.0f;
    p->train.warmup_frac = 0.2f;
    p->train.final_frac = 0.1f;
    p->arena = rt_arena;
    p->arena_bytes = RT_ARENA_BYTES;
    const int64_t shp[2][2] = {{1, RT_N0}, {1, RT_N1}};
    for (int i = 0; i < 2; i++) {
        qt_tensor *t = &st->tensors[i];
        t->name = i ? "p1" : "p0";
        t->role = QT_ROLE_PARAM;
        t->dtype = QT_F32;
        t->ndim = 2;
        t->shape[0] = t->global_shape[0] = shp[i][0];
        t->shape[1] = t->global_shape[1] = shp[i][1];
        t->offset = RT_OFF_PARAMS + 4 * (i ? RT_N0 : 0);
        t->numel = shp[i][1];
        qt_param *pa = &st->params[i];
        pa->name = t->name;
        pa->tensor = i;
        pa->flat_offset = pa->leaf_offset = i ? RT_N0 : 0;
        pa->numel = t->numel;
        pa->init = i ? QT_INIT_ONES : QT_INIT_NORMAL;
        pa->init_scale = 0.5f;
        pa->layer = -1;
        pa->leaves = b * G;
    }
    const char *names[3] = {"tokens", "targets", "loss_seq"};
    const int64_t offs[3] = {RT_OFF_TOKENS, RT_OFF_TARGETS, RT_OFF_LOSS};
    for (int i = 0; i < 3; i++) {
        qt_tensor *t = &st->tensors[2 + i];
        t->name = names[i];
        t->role = i < 2 ? QT_ROLE_INPUT : QT_ROLE_LOSS;
        t->dtype = i < 2 ? QT_I32 : QT_F32;
        t->ndim = 1;
        t->numel = t->shape[0] = t->global_shape[0] = i < 2 ? RT_BMAX * RT_S : RT_BMAX;
        t->offset = offs[i];
    }
    p->n_tensors = 5;
    p->tensors = st->tensors;
    p->n_params = 2;
    p->params = st->params;
    p->n_param_elems = RT_N0 + RT_N1;
    p->n_flat = RT_N0 + RT_N1;
    p->adam_elems = RT_N0 + RT_N1;
    p->n_ranges = 1;
    st->ranges[0].n = RT_N0 + RT_N1;
    p->ranges = st->ranges;
    p->leaf_elems = RT_N0 + RT_N1;
    p->params_offset = RT_OFF_PARAMS;
    p->adam_m_offset = RT_OFF_M;
    p->adam_v_offset = RT_OFF_V;
    p->n_tree_levels = qt_tree_levels_needed(b * G);
    for (int l = 0; l < p->n_tree_levels; l++) p->tree_offset[l] = RT_OFF_LEVEL0 + 256 * l;
    p->grads_offset = p->tree_offset[p->n_tree_levels - 1];
    p->leaf_scratch_offset = RT_OFF_SCRATCH;
    p->leaf_scratch_elems = RT_N0 + RT_N1;
    p->tokens = 2;
    p->targets = 3;
    p->loss_seq = 4;
    p->lb_seq = QT_NONE;
    for (int i = 0; i < 2; i++) {
        qt_op *op = &st->ops[i];
        for (int k = 0; k < QT_OP_MAX_T; k++) op->t[k] = QT_NONE;
        op->t[1] = 2;
        op->t[2] = 0;
        op->a[0] = b;
        op->a[1] = RT_S;
        op->a[9] = -1;
    }
    st->ops[0].kind = QT_OP_XENT;
    st->ops[0].t[0] = 4;
    st->ops[1].kind = QT_OP_MATMUL_WGRAD;
    st->ops[1].flags = QT_OPF_WGRAD;
    st->ops[1].a[8] = 0;
    st->ops[1].a[9] = 1;
    p->n_mb_ops = 2;
    p->mb_ops = st->ops;
    // the step schedule configgen emits: finalise b*G leaves over the step's tokens, update
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < QT_OP_MAX_T; k++) st->step_ops[i].t[k] = QT_NONE;
    st->step_ops[0].kind = QT_OP_GRAD_FINALIZE;
    st->step_ops[0].a[0] = b * G;
    st->step_ops[0].a[1] = b * G * RT_S;
    st->step_ops[1].kind = QT_OP_ADAMW;
    p->n_step_ops = 2;
    p->step_ops = st->step_ops;
}

// ------------------------------------------------------------------ tree via interpreter

TEST_GROUP(RuntimeInterp){};

TEST(RuntimeInterp, TreeThroughScheduleIsIndependentOfBatchSplit)
{
    static rt_plan_store st;
    rt_make_table();
    // the wrapper contracts: accumulate into zeroed leaves, write unzeroed ones, write them
    // with the offered leaf-tree carry for both parameters (the scratch is then never
    // written: it keeps its 0xff fill) or for the first only (the second pushed as before)
    for (int writes = 0; writes < 4; writes++)
    for (int64_t n = 1; n <= 9; n++) {
        rt_carry_both = writes == 2;
        rt_table[QT_OP_MATMUL_WGRAD].wgrad =
            writes >= 2 ? rt_fake_wgrad_carry : writes ? rt_fake_wgrad_writes : rt_fake_wgrad;
        rt_table[QT_OP_MATMUL_WGRAD].props =
            writes ? QT_OPP_WGRAD_WRITES : rt_table[QT_OP_MATMUL_WGRAD].props & ~QT_OPP_WGRAD_WRITES;
        for (int64_t b = 1; b <= n; b++) {
            if (n % b) continue;
            int64_t G = n / b;
            rt_build_plan(&st, b, G);
            const qt_plan *p = &st.plan;
            LONGS_EQUAL(0, qt_interp_validate(p, rt_table));
            memset(rt_arena, 0xff, RT_ARENA_BYTES);  // stale data must not leak into results
            memset(rt_arena + RT_OFF_PARAMS, 0, 4 * (RT_N0 + RT_N1));
            qt_ctx ctx;
            memset(&ctx, 0, sizeof ctx);
            ctx.plan = p;
            ctx.arena = p->arena;
            for (int64_t mb = 0; mb < G; mb++) {
                int32_t *tok = qt_i32(&ctx, p->tokens);
                for (int64_t s = 0; s < b; s++)
                    for (int t = 0; t < RT_S; t++) tok[s * RT_S + t] = (int32_t)(mb * b + s);
                qt_interp_run_microbatch(&ctx, rt_table, mb, NULL);
            }
            qt_interp_finalize_grads(p, 0, p->n_flat);
            if (writes == 2)
                for (int k = 0; k < 4 * (RT_N0 + RT_N1); k++)
                    LONGS_EQUAL(0xff, rt_arena[RT_OFF_SCRATCH + k]);
            const float *g = (const float *)(const void *)(rt_arena + p->grads_offset);
            for (int k = 0; k < RT_N0; k++)  // p0 = 0: factor 1, the leaves are rt_leafval
                LONGS_EQUAL(rt_bits(rt_ref_pairwise(0, n, k)), rt_bits(g[k]));
            for (int k = 0; k < RT_N1; k++) {
                float ref = 0.0f;
                {
                    // second parameter: same tree over its own leaves
                    static float lv[RT_LEVELS][RT_N1], sc[RT_N1];
                    float *lvp[RT_LEVELS];
                    for (int l = 0; l < RT_LEVELS; l++) lvp[l] = lv[l];
                    for (int64_t i = 0; i < n; i++) {
                        float *d = qt_tree_leaf_dest(lvp, 0, sc, i);
                        for (int j = 0; j < RT_N1; j++) d[j] = rt_leafval(i, 100 + j);
                        qt_tree_push(lvp, 0, RT_N1, sc, i);
                    }
                    qt_tree_finalize(lvp, RT_N1, n);
                    ref = lv[qt_tree_levels_needed(n) - 1][k];
                }
                LONGS_EQUAL(rt_bits(ref), rt_bits(g[RT_N0 + k]));
            }
        }
    }
}

TEST(RuntimeInterp, ValidateRejectsBadPlans)
{
    static rt_plan_store st;
    rt_make_table();
    rt_build_plan(&st, 2, 2);
    LONGS_EQUAL(0, qt_interp_validate(&st.plan, rt_table));
    st.ops[1].a[9] = -1;  // second param loses its gradient op
    CHECK(qt_interp_validate(&st.plan, rt_table) != 0);
    rt_build_plan(&st, 2, 2);
    st.plan.leaf_scratch_elems = RT_N0;  // no room for both leaves
    CHECK(qt_interp_validate(&st.plan, rt_table) != 0);
    rt_build_plan(&st, 4, 2);
    st.plan.n_tree_levels = 3;  // 8 leaves need 4 levels
    CHECK(qt_interp_validate(&st.plan, rt_table) != 0);
    rt_build_plan(&st, 4, 2);
    st.plan.tree_offset[4] = RT_OFF_LEVEL0 + 256 * 4;
    st.plan.n_tree_levels = 5;  // one too many: the top level would never hold the total
    st.plan.grads_offset = st.plan.tree_offset[4];
    CHECK(qt_interp_validate(&st.plan, rt_table) != 0);
    rt_build_plan(&st, 3, 2);  // 6 leaves: levels 1 and 2 hold the total at the end
    st.plan.grads_offset = st.plan.tree_offset[1];  // not the top level
    CHECK(qt_interp_validate(&st.plan, rt_table) != 0);
    rt_build_plan(&st, 2, 2);
    st.ops[0].kind = QT_OP_ROPE_FWD;
    rt_table[QT_OP_ROPE_FWD].run = NULL;  // a kind without its wrapper: refused
    CHECK(qt_interp_validate(&st.plan, rt_table) != 0);
    rt_make_table();
    // kernel limits: a delta-rule head dimension past QT_GDN_CORE_MAX_DIM; the load-balance
    // loss takes any expert count (the route kernel's accumulators are stack blocks)
    rt_table[QT_OP_GDN_CORE_FWD].name = "fake_gdn";
    rt_table[QT_OP_GDN_CORE_FWD].run = rt_fake_loss;
    rt_table[QT_OP_MOE_ROUTE_FWD].name = "fake_route";
    rt_table[QT_OP_MOE_ROUTE_FWD].run = rt_fake_loss;
    rt_build_plan(&st, 2, 2);
    st.ops[0].kind = QT_OP_GDN_CORE_FWD;
    st.ops[0].a[3] = 64;
    st.ops[0].a[5] = 64;
    st.ops[0].a[6] = 16;
    LONGS_EQUAL(0, qt_interp_validate(&st.plan, rt_table));
    st.ops[0].a[3] = 1024;
    CHECK(qt_interp_validate(&st.plan, rt_table) != 0);
    rt_build_plan(&st, 2, 2);
    st.ops[0].kind = QT_OP_MOE_ROUTE_FWD;
    st.ops[0].a[1] = 2048;
    LONGS_EQUAL(0, qt_interp_validate(&st.plan, rt_table));  // no load-balance term: fine
    st.ops[0].f[0] = 0.5f;
    LONGS_EQUAL(0, qt_interp_validate(&st.plan, rt_table));  // with it: fine too (issue 35)
}


// ------------------------------------------------------------------ split collectives

// A microbatch schedule of COLL_START / COLL_WAIT / COLLECTIVE ops over collectives 0, 1
// (reduce-scatters) and 2..6 (all-gathers): "s0" starts 0, "w0" waits for it, "c1" runs 1
// blocking.
static int rt_splits(const char *ops)
{
    static qt_collective coll[7];
    static qt_op mb[32];
    static qt_plan p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < 7; i++) {
        memset(&coll[i], 0, sizeof coll[i]);
        coll[i].name = "test";
        coll[i].kind = i < 2 ? QT_COLL_REDUCE_SCATTER : QT_COLL_ALL_GATHER;
    }
    int n = 0;
    for (const char *c = ops; c[0] && c[1]; c += 2) {
        memset(&mb[n], 0, sizeof mb[n]);
        for (int k = 0; k < QT_OP_MAX_T; k++) mb[n].t[k] = QT_NONE;
        mb[n].kind = c[0] == 's' ? QT_OP_COLL_START : c[0] == 'w' ? QT_OP_COLL_WAIT
                                                                   : QT_OP_COLLECTIVE;
        mb[n++].a[0] = c[1] - '0';
    }
    p.run_name = "split-test";
    p.collectives = coll;
    p.n_collectives = 7;
    p.mb_ops = mb;
    p.n_mb_ops = n;
    p.n_mb_logical = n;
    return qt_validate_splits(&p);
}

TEST_GROUP(RuntimeSplit){};

TEST(RuntimeSplit, PairingOfStartsAndWaitsIsValidated)
{
    LONGS_EQUAL(0, rt_splits(""));
    LONGS_EQUAL(0, rt_splits("s0s2w2s3w0s1w3w1"));      // interleaved, waited out of order
    LONGS_EQUAL(0, rt_splits("s2s3s4s0w0w2w3w4c1"));    // four in flight, then a blocking one
    qt_set_quiet(1);
    LONGS_EQUAL(QT_E_PLAN, rt_splits("w0"));            // a wait without a start
    LONGS_EQUAL(QT_E_PLAN, rt_splits("s2s2w2"));        // started twice
    LONGS_EQUAL(QT_E_PLAN, rt_splits("s0s1w0w1"));      // two reduce-scatters in flight
    LONGS_EQUAL(QT_E_PLAN, rt_splits("s0c1w0"));        // a blocking one beside it (scratch)
    LONGS_EQUAL(QT_E_PLAN, rt_splits("s2c2w2"));        // its own blocking run while in flight
    LONGS_EQUAL(QT_E_PLAN, rt_splits("s2s3s4s5s6w2w3w4w5w6"));  // more than QT_MAX_IN_FLIGHT
    LONGS_EQUAL(QT_E_PLAN, rt_splits("s0s2w0"));        // 2 never waited for
    qt_set_quiet(0);
}

// ------------------------------------------------------------------ split expert exchanges

// A microbatch schedule of expert exchange ops (qt_validate_ep_splits): "R" / "r" start /
// wait the return, "D" / "d" start / wait the dispatch backward, "F" / "f" the dispatch
// forward, "B" / "b" the return backward, "x" a blocking exchange, "m" compute, "c" a
// COLL_START; eval: the eval forward's op count (0: no eval). A host -> home start (R, D)
// names t0 QT_NONE, its wait t0 = 5; a home -> host start and wait (F, B) name t0 = 5 (the
// transport writes it), "0" after such a start names t0 QT_NONE; all t1..t4 = 1..4, unless
// "t" follows the op (t4 = 9).
static int rt_ep_splits(const char *ops, int eval)
{
    static qt_op mb[32];
    static qt_plan p;
    memset(&p, 0, sizeof p);
    int n = 0;
    for (const char *c = ops; *c; c++) {
        if (*c == 't' || *c == '0') {
            if (*c == 't') mb[n - 1].t[4] = 9;
            else mb[n - 1].t[0] = QT_NONE;
            continue;
        }
        qt_op *o = &mb[n++];
        memset(o, 0, sizeof *o);
        for (int k = 0; k < QT_OP_MAX_T; k++) o->t[k] = k >= 1 && k <= 4 ? k : QT_NONE;
        o->kind = *c == 'R' ? QT_OP_MOE_RETURN_START : *c == 'r' ? QT_OP_MOE_RETURN_WAIT
                  : *c == 'D' ? QT_OP_MOE_DISPATCH_BWD_START
                  : *c == 'd' ? QT_OP_MOE_DISPATCH_BWD_WAIT
                  : *c == 'F' ? QT_OP_MOE_DISPATCH_FWD_START
                  : *c == 'f' ? QT_OP_MOE_DISPATCH_FWD_WAIT
                  : *c == 'B' ? QT_OP_MOE_RETURN_BWD_START
                  : *c == 'b' ? QT_OP_MOE_RETURN_BWD_WAIT
                  : *c == 'x' ? QT_OP_MOE_RETURN_BWD : *c == 'c' ? QT_OP_COLL_START : QT_OP_ADD;
        if (*c == 'r' || *c == 'd' || *c == 'F' || *c == 'f' || *c == 'B' || *c == 'b') o->t[0] = 5;
    }
    p.run_name = "ep-split-test";
    p.mb_ops = mb;
    p.n_mb_ops = n;
    p.n_mb_logical = n;
    p.train.eval_interval = eval ? 1 : 0;
    p.train.eval_fwd_ops = eval;
    return qt_validate_ep_splits(&p);
}

TEST(RuntimeSplit, ExpertExchangeStartsAndWaitsAreValidated)
{
    LONGS_EQUAL(0, rt_ep_splits("", 0));
    LONGS_EQUAL(0, rt_ep_splits("xRmmrmxmDmmdm", 0));   // each start waited for, compute between
    LONGS_EQUAL(0, rt_ep_splits("Rmrmm", 3));             // closed inside the eval forward
    qt_set_quiet(1);
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("rR", 0));        // a wait before its start
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Rm", 0));        // never waited for
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("RDdr", 0));      // two in flight
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Rd", 0));        // waited by the other kind
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Rxr", 0));       // another exchange in between
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Rcr", 0));       // a split collective in between
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Rrt", 0));       // the wait names other buffers
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Rmrm", 2));      // in flight at the eval's end
    qt_set_quiet(0);
    // the home -> host kinds (session 14): the start names t0 too
    LONGS_EQUAL(0, rt_ep_splits("FmmfmRmrmBmmbmDmd", 0));  // all four kinds of a layer
    LONGS_EQUAL(0, rt_ep_splits("Fmfm", 3));                 // closed inside the eval forward
    qt_set_quiet(1);
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("F0mf", 0));       // the start does not name t0
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Fmb", 0));        // waited by another kind
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("FRrf", 0));       // two in flight
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Bxb", 0));        // another exchange in between
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Bbt", 0));        // the wait names other buffers
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Fmfm", 2));       // in flight at the eval's end
    LONGS_EQUAL(QT_E_PLAN, rt_ep_splits("Bm", 0));         // never waited for
    qt_set_quiet(0);
}

// ------------------------------------------------------------------ the microbatch form's split

// qt_validate_mb_splits (or with `all`, qt_validate_splits) over a plan whose microbatch-end
// schedule is GRAD_MB_TOTAL then COLL_START of collective 0 ("S", or "C" a blocking
// COLLECTIVE, "P" its push), or range 0's split units exchange "U" (GRAD_MB_UNITS_START; "B"
// a blocking GRAD_MB_UNITS of range 1); mb: the microbatch schedule, "m" compute, "g" a weight
// gradient, "w" / "p" / "u" the flagged wait / push / units wait (PREV_MB), "W" / "V" an
// unflagged wait / units wait; step: "w" / "p" / "u" flagged as above, "f" the finalize.
static int rt_mb_splits_in(const char *end, const char *mbs, const char *step, int G, int all)
{
    static qt_op mbend[8], mb[16], st[8];
    static qt_plan p;
    static qt_collective coll[1];
    memset(&p, 0, sizeof p);
    memset(coll, 0, sizeof coll);
    coll[0].name = "test";
    coll[0].kind = QT_COLL_REDUCE_SCATTER;
    const char *src[3] = {end, mbs, step};
    qt_op *dst[3] = {mbend, mb, st};
    int n[3] = {0, 0, 0};
    for (int s = 0; s < 3; s++)
        for (const char *c = src[s]; *c; c++) {
            qt_op *o = &dst[s][n[s]++];
            memset(o, 0, sizeof *o);
            for (int k = 0; k < QT_OP_MAX_T; k++) o->t[k] = QT_NONE;
            o->kind = *c == 'S' ? QT_OP_COLL_START : *c == 'C' ? QT_OP_COLLECTIVE
                      : *c == 'w' || *c == 'W' ? QT_OP_COLL_WAIT
                      : *c == 'p' || *c == 'P' ? QT_OP_GRAD_MB_PUSH
                      : *c == 'U' ? QT_OP_GRAD_MB_UNITS_START
                      : *c == 'u' || *c == 'V' ? QT_OP_GRAD_MB_UNITS_WAIT
                      : *c == 'B' ? QT_OP_GRAD_MB_UNITS
                      : *c == 'f' ? QT_OP_GRAD_MB_FINALIZE : *c == 'g' ? QT_OP_MATMUL_WGRAD
                      : QT_OP_ADD;
            if (*c == 'w' || *c == 'p' || *c == 'u') o->flags = QT_OPF_PREV_MB;
            if (*c == 'g') o->flags = QT_OPF_WGRAD;
            if (*c == 'B') o->a[0] = 1;
        }
    p.collectives = coll;
    p.n_collectives = 1;
    p.n_ranges = 2;
    p.run_name = "mb-split-test";
    p.mbend_ops = mbend;
    p.n_mbend_ops = n[0];
    p.mb_ops = mb;
    p.n_mb_ops = p.n_mb_logical = n[1];
    p.step_ops = st;
    p.n_step_ops = n[2];
    p.n_mb_levels = 1;
    p.train.grad_accum = G;
    return all ? qt_validate_splits(&p) : qt_validate_mb_splits(&p, qt_kernel_table);
}

static int rt_mb_splits(const char *end, const char *mbs, const char *step, int G)
{
    return rt_mb_splits_in(end, mbs, step, G, 0);
}

TEST(RuntimeSplit, MicrobatchFormSplitReduceScatterIsValidated)
{
    LONGS_EQUAL(0, rt_mb_splits("S", "mmwpgm", "wpf", 2));     // the committed shape
    LONGS_EQUAL(0, rt_mb_splits("CP", "mmgm", "f", 2));        // blocking: nothing flagged
    qt_set_quiet(1);
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("S", "mgwpm", "wpf", 2));  // after a weight gradient
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("S", "mmpm", "pf", 2));    // started, never waited
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("S", "mmwpm", "f", 2));    // the step's missing
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("S", "mmwpm", "fwp", 2));  // the step's not first
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("Sp", "mmwpm", "wpf", 2)); // flagged at the microbatch end
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("CP", "wpm", "wpf", 2));   // waits for no start
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("S", "mmwpm", "wpf", 1));  // G = 1: no next microbatch
    qt_set_quiet(0);
}

// The split units exchange (GRAD_MB_UNITS_START / _WAIT, collective_overlap all with
// grad_mb_units): the same rules, the units start last in the microbatch-end schedule, its
// wait always flagged and of its own kind; in flight, no other reduce-scatter or units
// exchange beside it (qt_validate_splits).
TEST(RuntimeSplit, MicrobatchFormSplitUnitsExchangeIsValidated)
{
    LONGS_EQUAL(0, rt_mb_splits("BU", "mmugm", "uf", 2));      // the committed shape
    LONGS_EQUAL(0, rt_mb_splits_in("BU", "mmugm", "uf", 2, 1));
    qt_set_quiet(1);
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("U", "mgum", "uf", 2));    // after a weight gradient
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("U", "mBum", "uf", 2));    // after a step op
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("UB", "mmugm", "uf", 2));  // not the end's last op
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("U", "mmwgm", "wf", 2));   // waited by a COLL_WAIT
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("S", "mmugm", "uf", 2));   // a units wait for a COLL_START
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("U", "mmVgm", "f", 2));    // an unflagged wait
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("U", "mmgm", "f", 2));     // started, never waited
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("U", "mmugm", "f", 2));    // the step's missing
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("U", "mmugm", "ufV", 2));  // an unflagged wait in the step
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("U", "Uumgm", "uf", 2));   // a start in the microbatch
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits("U", "mmugm", "uf", 1));   // G = 1
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits_in("U", "mBugm", "uf", 2, 1));  // a blocking one beside
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits_in("US", "mmuwgm", "uwf", 2, 1)); // two in flight
    LONGS_EQUAL(QT_E_PLAN, rt_mb_splits_in("U", "mmgm", "f", 2, 1));    // never waited
    qt_set_quiet(0);
}

// The per-layer form's split units exchange (collective_overlap with per-layer reduction and
// grad_mb_units, session 17): in the microbatch schedule, "U" / "X" start range 0's / 1's
// exchange (GRAD_MB_UNITS_START), "V" / "Y" wait for it (unflagged GRAD_MB_UNITS_WAIT), "B"
// range 2's blocking GRAD_MB_UNITS, "a" / "b" / "c" a weight gradient of a parameter of range
// 0 / 1 / 2, "m" compute. Range 2's leaf window is range 0's when `share` (placed over it).
static int rt_layer_units(const char *mbs, int share, int layer, int all)
{
    static qt_op mb[16];
    static qt_plan p;
    static qt_flat_range ranges[3];
    static qt_param params[3];
    memset(&p, 0, sizeof p);
    memset(ranges, 0, sizeof ranges);
    memset(params, 0, sizeof params);
    int n = 0;
    for (const char *c = mbs; *c; c++) {
        qt_op *o = &mb[n++];
        memset(o, 0, sizeof *o);
        for (int k = 0; k < QT_OP_MAX_T; k++) o->t[k] = QT_NONE;
        o->kind = *c == 'U' || *c == 'X' ? QT_OP_GRAD_MB_UNITS_START
                  : *c == 'V' || *c == 'Y' ? QT_OP_GRAD_MB_UNITS_WAIT
                  : *c == 'B' ? QT_OP_GRAD_MB_UNITS
                  : *c >= 'a' && *c <= 'c' ? QT_OP_MATMUL_WGRAD : QT_OP_ADD;
        o->a[0] = *c == 'X' || *c == 'Y' ? 1 : *c == 'B' ? 2 : 0;
        if (*c >= 'a' && *c <= 'c') {
            o->flags = QT_OPF_WGRAD;
            o->a[QT_A_WGRAD_PARAM] = *c - 'a';
            o->a[QT_A_WGRAD_PARAM + 1] = -1;
        }
    }
    for (int r = 0; r < 3; r++) {
        ranges[r].lo = 16 * r;
        ranges[r].n = 16;
        ranges[r].leaf_lo = r == 2 && share ? 0 : 16 * r;
        params[r].flat_offset = 16 * r;
    }
    p.ranges = ranges;
    p.n_ranges = 3;
    p.params = params;
    p.n_params = 3;
    p.layer_reduce = layer;
    p.run_name = "layer-units-test";
    p.mb_ops = mb;
    p.n_mb_ops = p.n_mb_logical = n;
    p.n_mb_levels = 1;
    p.train.grad_accum = 1;
    return all ? qt_validate_splits(&p) : qt_validate_mb_splits(&p, qt_kernel_table);
}

TEST(RuntimeSplit, PerLayerSplitUnitsExchangeIsValidated)
{
    LONGS_EQUAL(0, rt_layer_units("aUbmVXcYB", 0, 1, 0));   // the committed shape
    LONGS_EQUAL(0, rt_layer_units("aUbmVXcYB", 0, 1, 1));
    LONGS_EQUAL(0, rt_layer_units("aUbVcB", 1, 1, 0));      // range 2 over range 0 after the wait
    qt_set_quiet(1);
    LONGS_EQUAL(QT_E_PLAN, rt_layer_units("aUbV", 0, 0, 0));     // without per-layer reduction
    LONGS_EQUAL(QT_E_PLAN, rt_layer_units("aUaV", 0, 1, 0));     // its own weight gradient beside
    LONGS_EQUAL(QT_E_PLAN, rt_layer_units("aUcV", 1, 1, 0));     // a window over it, beside
    LONGS_EQUAL(QT_E_PLAN, rt_layer_units("aUbXVY", 0, 1, 0));   // two in flight
    LONGS_EQUAL(QT_E_PLAN, rt_layer_units("aUbY", 0, 1, 0));     // waited for as another range
    LONGS_EQUAL(QT_E_PLAN, rt_layer_units("aUbm", 0, 1, 0));     // never waited for
    LONGS_EQUAL(QT_E_PLAN, rt_layer_units("aVUb", 0, 1, 0));     // a wait before its start
    LONGS_EQUAL(QT_E_PLAN, rt_layer_units("aUbBV", 0, 1, 1));    // a blocking one beside
    qt_set_quiet(0);
    LONGS_EQUAL(0, rt_layer_units("aUcV", 0, 1, 0));        // the same, windows apart: fine
}

// ------------------------------------------------------------------ exact accumulator

TEST_GROUP(RuntimeExact){};

TEST(RuntimeExact, OrderIndependentAndEqualToExactLongDouble)
{
    enum { N = 2000 };
    static float x[N], y[N];
    uint64_t s = 42;
    long double ref = 0.0L, refp = 0.0L;
    for (int i = 0; i < N; i++) {
        // 12-bit significands, exponents in [-10, 10]: every partial sum of values and of
        // products fits the 64-bit long double significand, so `ref` is exact.
        double m = floor(qt_test_rand(&s) * 2048.0);
        int e = (int)floor((qt_test_rand(&s) + 1.0) * 10.5) - 10;
        x[i] = ldexpf((float)m, e - 11);
        y[i] = ldexpf((float)floor(qt_test_rand(&s) * 2048.0), -(i % 7));
        ref += (long double)x[i];
        refp += (long double)x[i] * (long double)y[i];
    }
    qt_exact a, b, c;
    qt_exact_clear(&a);
    qt_exact_clear(&c);
    for (int i = 0; i < N; i++) {
        qt_exact_add_f(&a, x[i]);
        qt_exact_add_prod(&c, x[i], y[i]);
    }
    double va = qt_exact_value(&a), vc = qt_exact_value(&c);
    LONGS_EQUAL(rt_bits_d((double)ref) >> 32, rt_bits_d(va) >> 32);
    CHECK(rt_bits_d((double)ref) == rt_bits_d(va));    // correctly rounded exact sum: bit-equal
    CHECK(rt_bits_d((double)refp) == rt_bits_d(vc));
    // shuffled order and a split into two merged accumulators give identical bits
    int idx[N];
    for (int i = 0; i < N; i++) idx[i] = i;
    for (int i = N - 1; i > 0; i--) std::swap(idx[i], idx[(int)(qt_mix64((uint64_t)i) % (uint64_t)(i + 1))]);
    qt_exact_clear(&a);
    qt_exact_clear(&b);
    for (int i = 0; i < N; i++) qt_exact_add_f(i % 3 ? &a : &b, x[idx[i]]);
    qt_exact_merge(&a, &b);
    CHECK(rt_bits_d(va) == rt_bits_d(qt_exact_value(&a)));
    // a plain double sum in shuffled order would generally differ: make sure it can
    double d1 = 0.0, d2 = 0.0;
    for (int i = 0; i < N; i++) { d1 += (double)x[i] * y[i]; d2 += (double)x[idx[i]] * y[idx[i]]; }
    (void)d1; (void)d2;
}

TEST(RuntimeExact, CancellationTinyValuesAndRounding)
{
    qt_exact a;
    qt_exact_clear(&a);
    qt_exact_add_f(&a, 1e30f);
    qt_exact_add_f(&a, 1.0f);
    qt_exact_add_f(&a, -1e30f);
    DOUBLES_EQUAL(1.0, qt_exact_value(&a), 0.0);  // exact: no tolerance
    qt_exact_clear(&a);
    float tiny = ldexpf(1.0f, -149);            // smallest subnormal float
    qt_exact_add_prod(&a, tiny, tiny);          // 2^-298, below any float
    qt_exact_add_prod(&a, tiny, tiny);
    qt_exact_add_prod(&a, tiny, 1.0f);
    qt_exact_add_prod(&a, -tiny, 1.0f);
    CHECK(ldexp(1.0, -297) == qt_exact_value(&a));
    // ties to even: 1 + 2^-53 rounds to 1; with a tiny extra it rounds up to 1 + 2^-52
    qt_exact_clear(&a);
    qt_exact_add_d(&a, 1.0);
    qt_exact_add_d(&a, ldexp(1.0, -53));
    CHECK(1.0 == qt_exact_value(&a));
    qt_exact_add_d(&a, ldexp(1.0, -100));
    CHECK(1.0 + ldexp(1.0, -52) == qt_exact_value(&a));
    // tie with an odd last bit rounds up to even: (1 + 2^-52) + 2^-53 -> 1 + 2^-51
    qt_exact_clear(&a);
    qt_exact_add_d(&a, 1.0 + ldexp(1.0, -52));
    qt_exact_add_d(&a, ldexp(1.0, -53));
    CHECK(1.0 + ldexp(1.0, -51) == qt_exact_value(&a));
    // negative results round symmetrically
    qt_exact_clear(&a);
    qt_exact_add_d(&a, -1.0);
    qt_exact_add_d(&a, -ldexp(1.0, -53));
    qt_exact_add_d(&a, -ldexp(1.0, -100));
    CHECK(-(1.0 + ldexp(1.0, -52)) == qt_exact_value(&a));
    // huge products: 2^254 is far beyond float range but exact here
    qt_exact_clear(&a);
    qt_exact_add_prod(&a, ldexpf(1.0f, 127), ldexpf(1.0f, 127));
    qt_exact_add_f(&a, 3.0f);
    CHECK(ldexp(1.0, 254) == qt_exact_value(&a));
    qt_exact_clear(&a);
    qt_exact_add_f(&a, INFINITY);
    qt_exact_add_f(&a, -INFINITY);
    CHECK(qt_exact_value(&a) != qt_exact_value(&a));  // +inf + -inf = NaN
    qt_exact_clear(&a);
    DOUBLES_EQUAL(0.0, qt_exact_value(&a), 0.0);
}

TEST(RuntimeExact, ManyDepositsCarryCorrectly)
{
    // 3e6 deposits of the same limb-straddling value, then their negation: exact zero and
    // exact multiple, which fails if carries are lost.
    qt_exact a;
    qt_exact_clear(&a);
    const float v = 4294967295.0f * 0.75f;
    for (int i = 0; i < 3000000; i++) qt_exact_add_f(&a, v);
    CHECK((double)v * 3e6 == qt_exact_value(&a));
    for (int i = 0; i < 3000000; i++) qt_exact_add_f(&a, -v);
    CHECK(0.0 == qt_exact_value(&a));
}

// Random float with a random sign, a full 24-bit significand and a biased exponent drawn
// from [elo, ehi] (0 gives subnormals), for adversarial exponent spreads.
static float rt_randf(uint64_t *st, int elo, int ehi)
{
    *st = qt_mix64(*st);
    uint32_t e = (uint32_t)(elo + (int)((*st >> 40) % (uint64_t)(ehi - elo + 1)));
    uint32_t b = ((uint32_t)(*st >> 63) << 31) | (e << 23) | (uint32_t)(*st & 0x7fffffu);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static double rt_sumsq_bins(const float *x, int64_t n, int64_t piece)
{
    static qt_exact_sq q;
    qt_exact a;
    qt_exact_clear(&a);
    qt_exact_sq_clear(&q);
    for (int64_t k = 0; k < n; k += piece)
        qt_exact_sq_add(&q, &a, x + k, n - k < piece ? n - k : piece);
    qt_exact_sq_flush(&q, &a);
    return qt_exact_value(&a);
}

TEST(RuntimeExact, BinnedSquaresEqualPerElementDeposits)
{
    // The binned square sum must give the same exact value, hence the same bits, as one
    // deposit per element, whatever the exponent spread and call sizes. No tolerance.
    enum { N = 300007 };
    static float x[N];
    uint64_t st = 7;
    const int ranges[4][2] = {{0, 254}, {0, 3}, {100, 140}, {250, 254}};
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < N; i++) x[i] = rt_randf(&st, ranges[r][0], ranges[r][1]);
        const uint64_t ref = rt_bits_d(qt_grads_sumsq_ref(x, N));
        CHECK(ref == rt_bits_d(qt_grads_sumsq(x, N)));
        CHECK(ref == rt_bits_d(rt_sumsq_bins(x, N, 1)));       // many tiny calls
        CHECK(ref == rt_bits_d(rt_sumsq_bins(x, N, 4093)));
        CHECK(ref == rt_bits_d(rt_sumsq_bins(x, N, 70000)));   // calls straddling flushes
    }
    // bin overflow: 2^18 largest-mantissa values of one exponent would wrap a uint64 bin
    // (2^18 * (2^24-1)^2 > 2^64) without the flush bound; exact reference: n * x^2
    const float big = ldexpf(16777215.0f, -24);  // (2^24 - 1) * 2^-24
    for (int i = 0; i < N; i++) x[i] = big;
    const int64_t n = 1 << 18;
    CHECK(rt_bits_d(qt_grads_sumsq_ref(x, n)) == rt_bits_d(qt_grads_sumsq(x, n)));
    CHECK(rt_bits_d(qt_grads_sumsq_ref(x, n)) == rt_bits_d(rt_sumsq_bins(x, n, 1)));
    // known exact value (16777215^2 * 2^18 * 2^-48 rounded once to double)
    CHECK(rt_bits_d((double)((long double)16777215.0L * 16777215.0L * 262144.0L / 281474976710656.0L)) ==
          rt_bits_d(qt_grads_sumsq(x, n)));
    // order independence: reversed input, same bits
    for (int i = 0; i < 1000; i++) x[i] = rt_randf(&st, 0, 254);
    double fwd = qt_grads_sumsq(x, 1000);
    std::reverse(x, x + 1000);
    CHECK(rt_bits_d(fwd) == rt_bits_d(qt_grads_sumsq(x, 1000)));
    // non-finite: inf gives +inf, NaN gives NaN, as the per-element path does
    x[500] = INFINITY;
    CHECK(qt_grads_sumsq(x, 1000) == INFINITY);
    x[700] = NAN;
    CHECK(qt_grads_sumsq(x, 1000) != qt_grads_sumsq(x, 1000));
    x[500] = 1.0f;
    x[700] = 2.0f;
    CHECK(rt_bits_d(qt_grads_sumsq_ref(x, 1000)) == rt_bits_d(qt_grads_sumsq(x, 1000)));
}

TEST(RuntimeExact, WindowedSquaresEqualPerElementDeposits)
{
    // The vector path's sliding 16-exponent window (exact.c): narrow spreads that stay in
    // the window, drifts and jumps that leave it (both ways), zeros, subnormals, lone
    // outliers, inf/NaN inside a window, and sizes around the 2048-element sub-chunks.
    enum { N = 200003 };
    static float x[N];
    uint64_t st = 11;
    for (int kind = 0; kind < 6; kind++) {
        for (int i = 0; i < N; i++) {
            int e = 110;
            if (kind == 1) e = 100 + (i / 3000) % 40;                 // drifting windows
            if (kind == 2) e = (i / 2048) & 1 ? 30 : 200;             // jumps
            if (kind == 3) e = 1 + (i % 5);                           // subnormals, tiny
            if (kind == 4) e = i % 97 == 0 ? 140 : 120;               // outliers above
            if (kind == 5) e = i % 89 == 0 ? 60 : 125;                // outliers below
            x[i] = i % 13 == 0 ? 0.0f : rt_randf(&st, e - (kind == 3 ? e : 3), e);
        }
        const uint64_t ref = rt_bits_d(qt_grads_sumsq_ref(x, N));
        CHECK(ref == rt_bits_d(qt_grads_sumsq(x, N)));
        CHECK(ref == rt_bits_d(rt_sumsq_bins(x, N, 17)));
        CHECK(ref == rt_bits_d(rt_sumsq_bins(x, N, 2047)));
        CHECK(ref == rt_bits_d(rt_sumsq_bins(x, N, 2064)));
    }
    for (int i = 0; i < 4096; i++) x[i] = rt_randf(&st, 125, 127);
    x[100] = INFINITY;
    CHECK(qt_grads_sumsq(x, 4096) == INFINITY);
    x[3000] = -INFINITY;  // squares to +inf as well
    CHECK(qt_grads_sumsq(x, 4096) == INFINITY);
    x[3001] = NAN;
    CHECK(qt_grads_sumsq(x, 4096) != qt_grads_sumsq(x, 4096));
}

/* The divided-squares tests' inputs, by biased exponent: kind 0 110..118 (near 1), kind 1
 * 0..254 (every finite one, subnormals included), kind 2 1..30 (tiny). */
static void rt_fill_kind(float *x, int n, int kind, uint64_t *st)
{
    for (int i = 0; i < n; i++)
        x[i] = kind == 0 ? rt_randf(st, 110, 118) : kind == 1 ? rt_randf(st, 0, 254)
                                                             : rt_randf(st, 1, 30);
}

TEST(RuntimeExact, DividedSquaresEqualDivisionThenSquares)
{
    // qt_exact_sq_add_div (and qt_grads_normalise_sumsq): the quotients written back are
    // the float divisions' bits, the square sum theirs - for divisors that are powers of two
    // (multiplied by the exact inverse) and others, subnormal quotients included.
    enum { N = 100003 };
    static float x[N], y[N];
    static qt_exact_sq q;
    const float ds[] = {1024.0f, 1000.0f, 3.0f, 1.0f, 0.5f, 0x1p-125f, 0x1p126f, 7777.0f};
    uint64_t st = 13;
    for (int kind = 0; kind < 3; kind++) {
        for (float d : ds) {
            rt_fill_kind(x, N, kind, &st);
            if (kind == 2) x[77] = NAN;
            for (int i = 0; i < N; i++) y[i] = x[i] / d;
            const double ref = qt_grads_sumsq_ref(y, N);
            qt_exact a;
            qt_exact_clear(&a);
            qt_exact_sq_clear(&q);
            for (int k = 0; k < N; k += 30011)
                qt_grads_normalise_sumsq(x + k, N - k < 30011 ? N - k : 30011, d, &q, &a);
            qt_exact_sq_flush(&q, &a);
            const double v = qt_exact_value(&a);
            CHECK(memcmp(x, y, sizeof x) == 0);
            CHECK(rt_bits_d(ref) == rt_bits_d(v) || (ref != ref && v != v));
        }
    }
}

TEST(RuntimeExact, QuotientSquaresEqualTheStoredQuotientsSquares)
{
    // qt_exact_sq_add_quot (qt_grads_sumsq_quot: the norm pass when AdamW divides) adds the
    // squares of the quotients qt_exact_sq_add_div stores - the same value, to the bit - and
    // never writes x; powers of two (the exact inverse's product) and other divisors,
    // subnormal quotients, inf / NaN, pieces with vector tails (odd lengths).
    enum { N = 100003 };
    static float x[N], x0[N], y[N];
    static qt_exact_sq q;
    const float ds[] = {1024.0f, 1000.0f, 3.0f, 1.0f, 0.5f, 0x1p-125f, 0x1p126f, 7777.0f};
    const int64_t pieces[] = {30011, 16, 15, 1};
    uint64_t st = 29;
    for (int kind = 0; kind < 3; kind++) {
        for (float d : ds) {
            rt_fill_kind(x, N, kind, &st);
            if (kind == 2) x[77] = NAN, x[78] = INFINITY;
            memcpy(x0, x, sizeof x);
            qt_exact a, b;
            for (int64_t piece : pieces) {
                const int64_t n = piece < 1000 ? 1000 : N;  // the short pieces over a prefix
                qt_exact_clear(&a);
                qt_exact_sq_clear(&q);
                memcpy(y, x, sizeof x);
                qt_grads_normalise_sumsq(y, n, d, &q, &a);
                qt_exact_sq_flush(&q, &a);
                qt_exact_clear(&b);
                qt_exact_sq_clear(&q);
                for (int64_t k = 0; k < n; k += piece)
                    qt_grads_sumsq_quot(x + k, n - k < piece ? n - k : piece, d, &q, &b);
                qt_exact_sq_flush(&q, &b);
                const double va = qt_exact_value(&a), vb = qt_exact_value(&b);
                CHECK(rt_bits_d(va) == rt_bits_d(vb) || (va != va && vb != vb));
                CHECK(memcmp(x, x0, sizeof x) == 0);  // read only
            }
        }
    }
}

// ------------------------------------------------------------------ schedule and AdamW

TEST_GROUP(RuntimeOptim){};

static double rt_sched_ref(int64_t t, double peak, int64_t T, double wf, double ff)
{
    int64_t warm = (int64_t)((double)T * wf);
    if (t >= T) return 0.0;
    if (t < warm) return peak * (double)t / (double)warm;
    double fin = peak * ff;
    int64_t s = t - warm, n = T - warm;
    return fin + (peak - fin) * 0.5 * (1.0 + cos(M_PI * (double)s / (double)(n - 1)));
}

TEST(RuntimeOptim, ScheduleMatchesFormula)
{
    const double peak = 3e-3;
    const int64_t T = 100;
    const int64_t ts[] = {0, 1, 5, 9, 10, 11, 37, 50, 98, 99, 100, 150};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        double got = qt_lr_schedule(ts[i], peak, T, 0.1, 0.1);
        // qt_cos vs libm cos: a few ulp of a value <= peak
        DOUBLES_EQUAL(rt_sched_ref(ts[i], peak, T, 0.1, 0.1), got, 1e-15);
    }
    DOUBLES_EQUAL(0.0, qt_lr_schedule(0, peak, T, 0.1, 0.1), 0.0);
    DOUBLES_EQUAL(peak, qt_lr_schedule(10, peak, T, 0.1, 0.1), 1e-18);   // end of warmup
    DOUBLES_EQUAL(peak * 0.1, qt_lr_schedule(99, peak, T, 0.1, 0.1), 1e-18);  // s = n-1
    DOUBLES_EQUAL(0.0, qt_lr_schedule(100, peak, T, 0.1, 0.1), 0.0);
    // n <= 1 guard: one step after warmup gets the peak, no division by zero
    DOUBLES_EQUAL(peak, qt_lr_schedule(9, peak, 10, 0.9, 0.1), 0.0);
    DOUBLES_EQUAL(peak, qt_lr_schedule(0, peak, 1, 0.0, 0.1), 0.0);
    DOUBLES_EQUAL(0.9 * 0.9 * 0.9, qt_powi(0.9, 3), 1e-16);
}

// MaxText's WSD schedule written as optax joins it (maxtext_utils.create_learning_rate_schedule,
// ../shared/research/maxtext-recipe.md section 4): pieces warmup (when W > 0), stable,
// decay, then 0 past L; piece i+1 is evaluated at t - boundary_i. linear_schedule(a, b, n)
// at c: (a - b) * (1 - min(c, n) / n) + b, and a when n <= 0; the cosine decay
// a * k + b * (1 - k), k = (1 + cos(pi * c / (n - 1))) / 2 (k = 1 when n <= 1).
static double rt_optax_linear(double a, double b, int64_t n, int64_t c)
{
    if (n <= 0) return a;
    double x = (double)(c < n ? c : n) / (double)n;
    return (a - b) * (1.0 - x) + b;
}

static double rt_wsd_ref(int64_t t, double lr, int64_t L, double wf, double df, double ff,
                         int cosine)
{
    const int64_t W = (int64_t)((double)L * wf), D = (int64_t)((double)L * df);
    const int64_t S = L - W - D;
    const double fin = lr * ff;
    if (t >= L) return 0.0;
    if (W > 0 && t < W) return rt_optax_linear(0.0, lr, W, t);
    if (t < W + S) return lr;
    const int64_t u = t - W - S;
    if (!cosine) return rt_optax_linear(lr, fin, D - 1, u);
    double k = D > 1 ? 0.5 * (1.0 + cos(M_PI * (double)u / (double)(D - 1))) : 1.0;
    return lr * k + fin * (1.0 - k);
}

TEST(RuntimeOptim, WsdScheduleMatchesMaxText)
{
    const double peak = 3e-3, ff = 0.1;
    // (L, warmup fraction, decay fraction): truncation, no warmup, no decay, one decay step,
    // warmup + decay = the whole schedule, a one-step schedule
    const struct { int64_t L; double wf, df; } cs[] = {
        {100, 0.1, 0.1}, {7, 0.3, 0.3}, {200, 0.05, 0.2}, {50, 0.0, 0.5}, {50, 0.2, 0.0},
        {10, 0.1, 0.1}, {10, 0.5, 0.5}, {1, 0.0, 1.0}, {33, 0.7, 0.3}, {1000, 0.01, 0.19}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        const int64_t L = cs[k].L, W = (int64_t)((double)L * cs[k].wf);
        const int64_t D = (int64_t)((double)L * cs[k].df);
        for (int cosine = 0; cosine < 2; cosine++)
            for (int64_t t = 0; t <= L + 2; t++) {
                double want = rt_wsd_ref(t, peak, L, cs[k].wf, cs[k].df, ff, cosine);
                double got = qt_lr_schedule_wsd(t, peak, L, W, D, ff, cosine);
                // qt_cos vs libm cos and the two algebraic forms: a few ulp of <= peak
                DOUBLES_EQUAL(want, got, 1e-17);
            }
    }
    // the exact points: 0 at step 0, the peak after warmup and through the stable phase,
    // the final value on the last step ((D-1) denominator), 0 from L on
    DOUBLES_EQUAL(0.0, qt_lr_schedule_wsd(0, peak, 100, 10, 10, ff, 0), 0.0);
    DOUBLES_EQUAL(peak * 5 / 10, qt_lr_schedule_wsd(5, peak, 100, 10, 10, ff, 0), 0.0);
    DOUBLES_EQUAL(peak, qt_lr_schedule_wsd(10, peak, 100, 10, 10, ff, 0), 0.0);
    DOUBLES_EQUAL(peak, qt_lr_schedule_wsd(90, peak, 100, 10, 10, ff, 0), 0.0);
    DOUBLES_EQUAL(peak * ff, qt_lr_schedule_wsd(99, peak, 100, 10, 10, ff, 0), 1e-19);
    DOUBLES_EQUAL(peak * ff, qt_lr_schedule_wsd(99, peak, 100, 10, 10, ff, 1), 1e-19);
    DOUBLES_EQUAL(0.0, qt_lr_schedule_wsd(100, peak, 100, 10, 10, ff, 1), 0.0);
    // one decay step keeps the peak (optax's zero-step transition); no warmup starts at peak
    DOUBLES_EQUAL(peak, qt_lr_schedule_wsd(9, peak, 10, 1, 1, ff, 0), 0.0);
    DOUBLES_EQUAL(peak, qt_lr_schedule_wsd(0, peak, 50, 0, 25, ff, 1), 0.0);
    // MaxText truncates in double: int(7 x 0.3) = 2 (0.3 as float32 would give the same here,
    // int(10 x 0.7) = 7 where float32's 0.699999988 gives 6): the lengths come from configgen
    CHECK_EQUAL(7, (int64_t)(10 * 0.7));
    CHECK_EQUAL(6, (int64_t)(10 * (double)0.7f));
}

TEST(RuntimeOptim, AdamWMatchesDoubleFormula)
{
    enum { N = 6 };
    float p[N] = {1.0f, -0.5f, 0.25f, 3.0f, -2.0f, 1e-3f};
    float m[N] = {0.0f, 0.1f, -0.2f, 0.01f, 0.0f, 0.3f};
    float v[N] = {0.0f, 0.01f, 0.04f, 0.5f, 1e-6f, 0.2f};
    const float g[N] = {0.5f, -0.25f, 1e-4f, 2.0f, -3.0f, 0.0f};
    double pd[N], md[N], vd[N];
    for (int i = 0; i < N; i++) { pd[i] = p[i]; md[i] = m[i]; vd[i] = v[i]; }
    const int64_t t = 4;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    qt_adamw_hp hp;
    qt_adamw_hp_make(&hp, lr, b1, b2, eps, wd, t);
    DOUBLES_EQUAL(1.0 - pow((double)b1, 5.0), hp.bc1, 1e-15);
    qt_adamw_update(p, m, v, g, N, &hp);
    for (int i = 0; i < N; i++) {
        md[i] = (double)b1 * md[i] + (1.0 - (double)b1) * g[i];
        vd[i] = (double)b2 * vd[i] + (1.0 - (double)b2) * (double)g[i] * g[i];
        double mh = md[i] / (1.0 - pow((double)b1, t + 1.0));
        double vh = vd[i] / (1.0 - pow((double)b2, t + 1.0));
        pd[i] = pd[i] - (double)lr * (mh / (sqrt(vh) + (double)eps) + (double)wd * pd[i]);
        // float path rounds ~10 times: allow 8 float ulps of the magnitudes involved
        DOUBLES_EQUAL(md[i], m[i], 8 * 6e-8 * (fabs(md[i]) + 1e-30));
        DOUBLES_EQUAL(vd[i], v[i], 8 * 6e-8 * (fabs(vd[i]) + 1e-30));
        DOUBLES_EQUAL(pd[i], p[i], 8 * 6e-8 * (fabs(pd[i]) + (double)lr));
    }
}

TEST(RuntimeOptim, VectorAdamWAndFingerprintMatchScalarBitExactly)
{
    // The vectorised update must give exactly the scalar reference's bits (same IEEE
    // operations per lane), clipped or not, for lengths with and without a scalar tail.
    enum { N = 1037 };
    static float p0[N], m0[N], v0[N], g[N], p1[N], m1[N], v1[N], p2[N], m2[N], v2[N], gc[N];
    uint64_t st = 99;
    for (int i = 0; i < N; i++) {
        p0[i] = rt_randf(&st, 100, 130);
        m0[i] = rt_randf(&st, 90, 125);
        v0[i] = fabsf(rt_randf(&st, 80, 125));
        g[i] = rt_randf(&st, i % 5 ? 95 : 0, 130);  // every 5th may be subnormal
    }
    v0[3] = 0.0f;
    g[3] = 0.0f;   // sqrt(0) + eps path
    m0[4] = -0.0f;
    qt_adamw_hp hp;
    qt_adamw_hp_make(&hp, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
    const int64_t lens[] = {N, 16, 15, 1, 0};
    for (int scaled = 0; scaled < 2; scaled++) {
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t n = lens[li];
            memcpy(p1, p0, sizeof p0); memcpy(m1, m0, sizeof m0); memcpy(v1, v0, sizeof v0);
            memcpy(p2, p0, sizeof p0); memcpy(m2, m0, sizeof m0); memcpy(v2, v0, sizeof v0);
            qt_adamw_update_scaled(p1, m1, v1, g, n, &hp, 0.37f, scaled);
            qt_adamw_update_ref(p2, m2, v2, g, n, &hp, 0.37f, scaled);
            CHECK(memcmp(p1, p2, sizeof p1) == 0);
            CHECK(memcmp(m1, m2, sizeof m1) == 0);
            CHECK(memcmp(v1, v2, sizeof v1) == 0);
        }
    }
    // folding the clip scale in equals clipping g first, then the plain update
    memcpy(gc, g, sizeof g);
    qt_grads_clip(gc, N, 2.0, 1.0);  // scale (float)(1/2)
    memcpy(p1, p0, sizeof p0); memcpy(m1, m0, sizeof m0); memcpy(v1, v0, sizeof v0);
    memcpy(p2, p0, sizeof p0); memcpy(m2, m0, sizeof m0); memcpy(v2, v0, sizeof v0);
    qt_adamw_update(p1, m1, v1, gc, N, &hp);
    qt_adamw_update_scaled(p2, m2, v2, g, N, &hp, (float)(1.0 / 2.0), 1);
    CHECK(memcmp(p1, p2, sizeof p1) == 0);
    CHECK(memcmp(p1, p0, sizeof p1) != 0);  // the update did something
    // fingerprint terms: vector == scalar for several offsets, lengths and index bases,
    // and splitting a range anywhere gives the same sum (commutative, index-keyed)
    const uint64_t bases[] = {0, 5, (1ull << 40) + 3};
    for (size_t bi = 0; bi < 3; bi++) {
        for (size_t li = 0; li < 4; li++) {
            // p0 + 1 holds N - 1 floats: n = N read one past p0 (found by ASan)
            const int64_t n = lens[li] == N ? N - 1 : lens[li];
            CHECK(qt_fp_mix(p0 + 1, n, bases[bi]) == qt_fp_mix_ref(p0 + 1, n, bases[bi]));
            // the vector form whichever form qt_fp_mix picks on this CPU
            CHECK(qt_fp_mix_vector(p0 + 1, n, bases[bi]) == qt_fp_mix_ref(p0 + 1, n, bases[bi]));
        }
        CHECK(qt_fp_mix(p0, N, bases[bi]) ==
              qt_fp_mix(p0, 517, bases[bi]) + qt_fp_mix(p0 + 517, N - 517, bases[bi] + 517));
        CHECK(qt_fp_mix(p0, N, bases[bi]) != qt_fp_mix(p0, N, bases[bi] + 1));
    }
    uint64_t one = 0;
    for (int j = 0; j < 40; j++) one += qt_mix64(((uint64_t)(9 + j) * 0x9E3779B97F4A7C15ull) ^ rt_bits(p0[j]));
    CHECK(one == qt_fp_mix(p0, 40, 9));  // the documented per-element term
}

/* AdamW tests' state and gradient: parameters, moments (v >= 0) and gradients of spread
 * exponents, every seventh gradient from the whole low range (subnormals included). */
static void rt_adamw_inputs(float *p, float *m, float *v, float *g, int n, uint64_t *st)
{
    for (int i = 0; i < n; i++) {
        p[i] = rt_randf(st, 100, 130);
        m[i] = rt_randf(st, 90, 125);
        v[i] = fabsf(rt_randf(st, 80, 125));
        g[i] = rt_randf(st, i % 7 ? 95 : 0, 130);
    }
}

TEST(RuntimeOptim, FusedAdamWFingerprintMatchesSeparatePasses)
{
    // qt_adamw_update_fp (the step's one pass: vector update, the fingerprint terms of the
    // stored p in the same loop, the index products advanced by additions) gives the bits
    // of qt_adamw_update_ref followed by qt_fp_mix_ref, for tails, index bases near 2^64
    // and lengths past its prefetch distance.
    enum { N = 3001 };
    static float p0[N], m0[N], v0[N], g[N], p1[N], m1[N], v1[N], p2[N], m2[N], v2[N];
    uint64_t st = 7;
    rt_adamw_inputs(p0, m0, v0, g, N, &st);
    qt_adamw_hp hp;
    qt_adamw_hp_make(&hp, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    const int64_t lens[] = {N, 2048, 529, 16, 15, 1, 0};
    const uint64_t bases[] = {0, 12345, 0xfffffffffffffff0ull};
    for (int scaled = 0; scaled < 2; scaled++) {
        for (int64_t n : lens) {
            for (uint64_t base : bases) {
                memcpy(p1, p0, sizeof p0); memcpy(m1, m0, sizeof m0); memcpy(v1, v0, sizeof v0);
                memcpy(p2, p0, sizeof p0); memcpy(m2, m0, sizeof m0); memcpy(v2, v0, sizeof v0);
                const uint64_t fp = qt_adamw_update_fp(p1, m1, v1, g, n, &hp, 0.37f, scaled, base, NULL);
                qt_adamw_update_ref(p2, m2, v2, g, n, &hp, 0.37f, scaled);
                CHECK(fp == qt_fp_mix_ref(p2, n, base));
                CHECK(memcmp(p1, p2, sizeof p1) == 0);
                CHECK(memcmp(m1, m2, sizeof m1) == 0);
                CHECK(memcmp(v1, v2, sizeof v1) == 0);
            }
        }
    }
}

TEST(RuntimeOptim, DividingUpdateEqualsTheNormalisedGradientsUpdate)
{
    // The update with the normalisation left to it (qt_adamw_hp_divide: the step's token
    // count; GRAD_FINALIZE / GRAD_NORMALISE then only square the quotients) on the raw
    // gradient gives the bits of the plain update on the gradient qt_grads_normalise_sumsq
    // wrote: p, m, v, the fingerprint and the bf16 copy, vector and scalar forms, clipped or
    // not, for power-of-two token counts (the exact inverse's product) and others, subnormal
    // quotients included.
    enum { N = 2085 };
    static float p0[N], m0[N], v0[N], g[N], gn[N], p1[N], m1[N], v1[N], p2[N], m2[N], v2[N];
    static qt_bf16 c1[N], c2[N];
    static qt_exact_sq q;
    uint64_t st = 17;
    rt_adamw_inputs(p0, m0, v0, g, N, &st);
    const float toks[] = {1024.0f, 1000.0f, 3.0f, 1.0f, 65536.0f};
    const int64_t lens[] = {N, 529, 16, 15, 1};
    int differs = 0;
    for (float tok : toks) {
        memcpy(gn, g, sizeof g);
        qt_exact acc;
        qt_exact_clear(&acc);
        qt_exact_sq_clear(&q);
        qt_grads_normalise_sumsq(gn, N, tok, &q, &acc);
        differs += memcmp(gn, g, sizeof g) != 0;
        qt_adamw_hp hp, hd;
        qt_adamw_hp_make(&hp, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
        hd = hp;
        qt_adamw_hp_divide(&hd, tok);
        for (int scaled = 0; scaled < 2; scaled++) {
            for (int64_t n : lens) {
                for (int form = 0; form < 3; form++) {
                    memcpy(p1, p0, sizeof p0); memcpy(m1, m0, sizeof m0); memcpy(v1, v0, sizeof v0);
                    memcpy(p2, p0, sizeof p0); memcpy(m2, m0, sizeof m0); memcpy(v2, v0, sizeof v0);
                    uint64_t f1 = 0, f2 = 0;
                    if (form == 0) {  // the step's fused pass, with the bf16 copy
                        f1 = qt_adamw_update_fp(p1, m1, v1, g, n, &hd, 0.37f, scaled, 5, c1);
                        f2 = qt_adamw_update_fp(p2, m2, v2, gn, n, &hp, 0.37f, scaled, 5, c2);
                        CHECK(memcmp(c1, c2, (size_t)n * sizeof c1[0]) == 0);
                    } else if (form == 1) {
                        qt_adamw_update_scaled(p1, m1, v1, g, n, &hd, 0.37f, scaled);
                        qt_adamw_update_scaled(p2, m2, v2, gn, n, &hp, 0.37f, scaled);
                    } else {
                        qt_adamw_update_ref(p1, m1, v1, g, n, &hd, 0.37f, scaled);
                        qt_adamw_update_ref(p2, m2, v2, gn, n, &hp, 0.37f, scaled);
                    }
                    CHECK(f1 == f2);
                    CHECK(memcmp(p1, p2, sizeof p1) == 0);
                    CHECK(memcmp(m1, m2, sizeof m1) == 0);
                    CHECK(memcmp(v1, v2, sizeof v1) == 0);
                }
            }
        }
    }
    CHECK(differs == 4);  // every token count but 1 changed the gradient
    // gdiv 0 (qt_adamw_hp_make's) reads g as it is
    qt_adamw_hp hp, hd;
    qt_adamw_hp_make(&hp, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    hd = hp;
    qt_adamw_hp_divide(&hd, 0.0f);
    CHECK(hd.gdiv == 0.0f && hp.gdiv == 0.0f);
}

TEST(RuntimeOptim, FusedAdamWWritesTheBf16CopyOfTheUpdate)
{
    // A bf16 plan's step: qt_adamw_update_fp with a compute copy writes bf16(p) of every
    // updated element in the same pass (the vector rounding: VCVTNEPS2BF16 or its integer
    // form) -- the bits of qt_adamw_update_ref then qt_bf16_from_f32_n, and the same
    // fingerprint. Pass 1: random updates; pass 2 (lr 0, wd 0: p kept) the rounding's edge
    // cases in p: ties to even both ways, just below / above a tie, denormals of both signs,
    // zeros, NaNs with payloads, infinities, the largest floats (rounding to inf), FLT_MIN.
    enum { N = 1037 };
    static float p0[N], m0[N], v0[N], g[N], p1[N], m1[N], v1[N], p2[N], m2[N], v2[N];
    static qt_bf16 c1[N + 8], c2[N];
    const uint32_t edge[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x00000001u,
                             0x807fffffu, 0x00000000u, 0x80000000u, 0x7fc01234u, 0xffa00001u,
                             0x7f800001u, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0xff7f8000u,
                             0x00800000u, 0x80800000u, 0x7f7f7fffu};
    const int n_edge = (int)(sizeof edge / sizeof edge[0]);
    uint64_t st = 11;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < N; i++) {
            p0[i] = rt_randf(&st, 100, 130);
            m0[i] = pass ? 0.0f : rt_randf(&st, 90, 125);
            v0[i] = pass ? 1.0f : fabsf(rt_randf(&st, 80, 125));
            g[i] = pass ? 0.0f : rt_randf(&st, i % 7 ? 95 : 0, 130);
            if (pass) {
                uint32_t u = i % 3 ? edge[i % n_edge] : (rt_bits(p0[i]) & 0xffff0000u) | 0x8000u;
                memcpy(&p0[i], &u, sizeof u);
            }
        }
        qt_adamw_hp hp;
        qt_adamw_hp_make(&hp, pass ? 0.0f : 1e-3f, 0.9f, 0.95f, 1e-8f, pass ? 0.0f : 0.1f, 3);
        const int64_t lens[] = {N, 529, 16, 15, 1, 0};
        for (int64_t n : lens) {
            memcpy(p1, p0, sizeof p0); memcpy(m1, m0, sizeof m0); memcpy(v1, v0, sizeof v0);
            memcpy(p2, p0, sizeof p0); memcpy(m2, m0, sizeof m0); memcpy(v2, v0, sizeof v0);
            for (int i = 0; i < N + 8; i++) c1[i] = 0xabcd;
            memset(c2, 0, sizeof c2);
            const uint64_t fp = qt_adamw_update_fp(p1, m1, v1, g, n, &hp, 0.5f, 1, 77, c1);
            qt_adamw_update_ref(p2, m2, v2, g, n, &hp, 0.5f, 1);
            qt_bf16_from_f32_n(c2, p2, n);
            CHECK(fp == qt_fp_mix_ref(p2, n, 77));
            CHECK(memcmp(p1, p2, sizeof p1) == 0);
            CHECK(memcmp(c1, c2, (size_t)n * sizeof c1[0]) == 0);
            for (int i = (int)n; i < N + 8; i++) CHECK(c1[i] == 0xabcd);  // nothing past n
        }
    }
}

TEST(RuntimeOptim, ClipNormaliseAndSumSquares)
{
    float g[4] = {3.0f, 4.0f, 0.0f, 0.0f};
    DOUBLES_EQUAL(25.0, qt_grads_sumsq(g, 4), 0.0);  // exact
    float s = qt_grads_clip(g, 4, 5.0, 1.0);
    DOUBLES_EQUAL(0.2f, s, 0.0);
    DOUBLES_EQUAL(3.0f * 0.2f, g[0], 0.0);
    float h[2] = {0.3f, 0.4f};
    DOUBLES_EQUAL(1.0f, qt_grads_clip(h, 2, 0.5, 1.0), 0.0);  // below threshold: untouched
    DOUBLES_EQUAL(0.3f, h[0], 0.0);
    DOUBLES_EQUAL(1.0f, qt_grads_clip(h, 2, 5.0, 0.0), 0.0);  // 0 disables
    qt_grads_normalise(h, 2, 3.0f);
    DOUBLES_EQUAL(0.3f / 3.0f, h[0], 0.0);
}

// ------------------------------------------------------------------ init and fingerprint

TEST_GROUP(RuntimeInit){};

static double rt_stats(const qt_param *pa, int64_t n, double *sd, double *lo, double *hi)
{
    double s = 0.0, s2 = 0.0;
    *lo = 1e300;
    *hi = -1e300;
    for (int64_t i = 0; i < n; i++) {
        double x = qt_init_value(pa, 7, 3, i);
        s += x;
        s2 += x * x;
        *lo = fmin(*lo, x);
        *hi = fmax(*hi, x);
    }
    double mean = s / (double)n;
    *sd = sqrt(s2 / (double)n - mean * mean);
    return mean;
}

TEST(RuntimeInit, DistributionsAndBounds)
{
    const int64_t n = 200000;
    qt_param pa;
    memset(&pa, 0, sizeof pa);
    double sd, lo, hi, mean;
    pa.init = QT_INIT_NORMAL;
    pa.init_scale = 0.02f;
    mean = rt_stats(&pa, n, &sd, &lo, &hi);
    // mean: 5 standard errors (0.02/sqrt(n) = 4.5e-5); sd: 1% (its standard error is 0.16%)
    DOUBLES_EQUAL(0.0, mean, 5 * 0.02 / sqrt((double)n));
    DOUBLES_EQUAL(0.02, sd, 0.02 * 0.01);
    CHECK(hi > 0.02 * 3.5 && lo < -0.02 * 3.5);  // real tails exist (P(|z|>3.5) * n ~ 93)
    pa.init = QT_INIT_TRUNC_NORMAL;
    mean = rt_stats(&pa, n, &sd, &lo, &hi);
    CHECK(lo >= -2 * 0.02 * (1 + 1e-7) && hi <= 2 * 0.02 * (1 + 1e-7));  // float rounding only
    DOUBLES_EQUAL(0.0, mean, 5 * 0.02 / sqrt((double)n));
    // sd of N(0,1) truncated to +-2 is 0.8796; 1% tolerance as above
    DOUBLES_EQUAL(0.02 * 0.87963, sd, 0.02 * 0.87963 * 0.01);
    pa.init = QT_INIT_LOG_UNIFORM;
    pa.init_lo = 1.0f;
    pa.init_hi = 16.0f;
    mean = rt_stats(&pa, n, &sd, &lo, &hi);
    CHECK(lo >= 0.0 && hi <= log(16.0) + 1e-6);
    // E[log U(1,16)] = (16 ln 16 - 15) / 15; sd of log U(1,16) ~ 0.65: 5 standard errors
    DOUBLES_EQUAL((16.0 * log(16.0) - 15.0) / 15.0, mean, 5 * 0.7 / sqrt((double)n));
    pa.init = QT_INIT_ONES;
    DOUBLES_EQUAL(1.0, qt_init_value(&pa, 1, 2, 3), 0.0);
    pa.init = QT_INIT_ZEROS;
    DOUBLES_EQUAL(0.0, qt_init_value(&pa, 1, 2, 3), 0.0);
    pa.init = QT_INIT_NORMAL;
    CHECK(qt_init_value(&pa, 1, 2, 3) == qt_init_value(&pa, 1, 2, 3));
    CHECK(qt_init_value(&pa, 1, 2, 3) != qt_init_value(&pa, 2, 2, 3));  // seed matters
    CHECK(qt_init_value(&pa, 1, 2, 3) != qt_init_value(&pa, 1, 3, 3));  // param matters
}

TEST(RuntimeInit, ShardedInitEqualsSliceOfUnsharded)
{
    // a [4,3] parameter sharded over fsdp (mesh fsdp = 2) on dim 0: rank r holds rows
    // [2r, 2r+2). Its local init must equal the unsharded init's rows.
    static rt_plan_store full, shard;
    rt_build_plan(&full, 1, 1);
    rt_build_plan(&shard, 1, 1);
    for (rt_plan_store *st : {&full, &shard}) {
        st->tensors[0].global_shape[0] = 4;
        st->tensors[0].global_shape[1] = 3;
        st->tensors[0].shape[1] = 3;
        st->params[0].init = QT_INIT_TRUNC_NORMAL;
    }
    full.tensors[0].shape[0] = 4;
    full.tensors[0].numel = full.params[0].numel = 12;
    shard.tensors[0].shape[0] = 2;
    shard.tensors[0].numel = shard.params[0].numel = 6;
    shard.tensors[0].spec[0] = 1u << QT_MESH_FSDP;
    shard.plan.mesh[QT_MESH_FSDP] = 2;
    shard.plan.n_ranks = 2;
    float ref[12];
    qt_rng_set_rank(0);
    for (int j = 0; j < 12; j++)
        ref[j] = qt_init_value(&full.params[0], 9, 0, qt_global_index(&full.plan, &full.tensors[0], j));
    for (int r = 0; r < 2; r++) {
        qt_rng_set_rank(r);
        for (int j = 0; j < 6; j++) {
            int64_t gi = qt_global_index(&shard.plan, &shard.tensors[0], j);
            LONGS_EQUAL(6 * r + j, gi);
            LONGS_EQUAL(rt_bits(ref[6 * r + j]), rt_bits(qt_init_value(&shard.params[0], 9, 0, gi)));
        }
    }
    qt_rng_set_rank(0);
}

// Local element j of a tensor whose dim 0 is split over two mesh axes (the context mesh's
// GDN head weights over tensor x context, routed experts over expert x context): the ranks'
// global indices (qt_global_index: what init, the fingerprint and the checkpoint gathers and
// scatters use) tile the global tensor exactly once per replica, the first axis of the
// spec major (shard index t * C + c), replicas over axes outside the spec alike.
static void rt_two_axis_case(qt_tensor *t, uint8_t spec0, int64_t split, const int64_t *expect_row0)
{
    qt_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.mesh[QT_MESH_DATA] = 2;           // replicas: ranks differing only in data
    plan.mesh[QT_MESH_FSDP] = 1;
    plan.mesh[QT_MESH_TENSOR] = spec0 & (1u << QT_MESH_TENSOR) ? 2 : 1;
    plan.mesh[QT_MESH_EXPERT] = spec0 & (1u << QT_MESH_EXPERT) ? 2 : 1;
    plan.mesh[QT_MESH_CONTEXT] = 2;
    plan.n_ranks = 2 * split;
    t->spec[0] = spec0;
    const int64_t inner = t->shape[1] * t->shape[2], local = t->shape[0] * inner;
    const int64_t global = t->global_shape[0] * inner;
    static int hits[4096];
    CHECK(global <= 4096);
    memset(hits, 0, sizeof hits);
    for (int r = 0; r < plan.n_ranks; r++) {
        qt_rng_set_rank(r);
        const int64_t k = r % split;       // shard index: (t or e) * 2 + c, context minor
        for (int64_t j = 0; j < local; j++) {
            const int64_t g = qt_global_index(&plan, t, j);
            CHECK(g >= 0 && g < global);
            hits[g]++;
            const int64_t row = j / inner;
            LONGS_EQUAL(expect_row0[k * t->shape[0] + row] * inner + j % inner, g);
            // the run of consecutive global indices from j (the fingerprint's vector runs):
            // every element of it consecutive, and it ends where the next one is not
            const int64_t run = qt_global_run(t, j);
            CHECK(run >= 1 && j + run <= local);
            for (int64_t i = 1; i < run; i++) LONGS_EQUAL(g + i, qt_global_index(&plan, t, j + i));
            if (j + run < local) CHECK(qt_global_index(&plan, t, j + run) != g + run);
        }
    }
    for (int64_t g = 0; g < global; g++) LONGS_EQUAL(2, hits[g]);
    qt_rng_set_rank(0);
}

TEST(RuntimeInit, GlobalIndexTilesDimsSplitOverTwoAxes)
{
    // conv1d.weight [128, 1, 4] of q, k, v channel segments 32 | 32 | 64, over tensor x
    // context (4 shards): shard k holds rows [8k, 8k+8) of q, [32+8k, 32+8k+8) of k and
    // [64+16k, 64+16k+16) of v, back to back (32 local rows)
    qt_tensor conv;
    memset(&conv, 0, sizeof conv);
    conv.ndim = 3;
    conv.shape[0] = 32, conv.shape[1] = 1, conv.shape[2] = 4;
    conv.global_shape[0] = 128, conv.global_shape[1] = 1, conv.global_shape[2] = 4;
    conv.seg[0] = 32, conv.seg[1] = 32, conv.seg[2] = 64;
    conv.seg_dim = 0;
    int64_t rows[4 * 32];
    for (int k = 0; k < 4; k++)
        for (int u = 0; u < 32; u++)
            rows[k * 32 + u] = u < 8 ? 8 * k + u : u < 16 ? 32 + 8 * k + (u - 8) : 64 + 16 * k + (u - 16);
    rt_two_axis_case(&conv, (1u << QT_MESH_TENSOR) | (1u << QT_MESH_CONTEXT), 4, rows);
    // routed experts [4, 3, 5] over expert x context: shard k = e * 2 + c holds expert k
    qt_tensor ex;
    memset(&ex, 0, sizeof ex);
    ex.ndim = 3;
    ex.shape[0] = 1, ex.shape[1] = 3, ex.shape[2] = 5;
    ex.global_shape[0] = 4, ex.global_shape[1] = 3, ex.global_shape[2] = 5;
    const int64_t erows[4] = {0, 1, 2, 3};
    rt_two_axis_case(&ex, (1u << QT_MESH_EXPERT) | (1u << QT_MESH_CONTEXT), 4, erows);
}

TEST(RuntimeInit, FingerprintIsOrderIndependent)
{
    static rt_plan_store a, b;
    rt_build_plan(&a, 1, 1);
    qt_params_init(&a.plan, 5);
    float vals[RT_N0 + RT_N1];
    memcpy(vals, rt_arena + RT_OFF_PARAMS, sizeof vals);
    uint64_t fa = qt_param_fingerprint(&a.plan);
    // same parameters stored in the opposite flat order: same fingerprint
    rt_build_plan(&b, 1, 1);
    b.params[1].flat_offset = 0;
    b.params[0].flat_offset = RT_N1;
    float *w = (float *)(void *)(rt_arena + RT_OFF_PARAMS);
    memcpy(w, vals + RT_N0, 4 * RT_N1);
    memcpy(w + RT_N1, vals, 4 * RT_N0);
    CHECK(fa == qt_param_fingerprint(&b.plan));
    // one flipped low bit changes it
    uint32_t u;
    memcpy(&u, &w[2], 4);
    u ^= 1u;
    memcpy(&w[2], &u, 4);
    CHECK(fa != qt_param_fingerprint(&b.plan));
    // swapping two values (same multiset of bits, different indices) changes it
    memcpy(w, vals + RT_N0, 4 * RT_N1);
    memcpy(w + RT_N1, vals, 4 * RT_N0);
    std::swap(w[RT_N1], w[RT_N1 + 1]);
    CHECK(fa != qt_param_fingerprint(&b.plan));
}

// ------------------------------------------------------------------ whole steps

TEST_GROUP(RuntimeStep){};

TEST(RuntimeStep, BatchSplitDoesNotChangeBits)
{
    // token stream: window w starts with token w, so the fake wgrad sees the global
    // sequence number. S = 4 tokens per window, 40 windows.
    static uint16_t toks[40 * RT_S + 1];
    for (int i = 0; i < 40 * RT_S + 1; i++) toks[i] = (uint16_t)(i % RT_S ? 1000 + i : i / RT_S);
    qt_data d;
    memset(&d, 0, sizeof d);
    d.base = toks;
    d.n_tokens = 40 * RT_S + 1;
    d.bytes_per_token = 2;
    d.n_windows = 40;
    qt_runtime_set_tokens(qt_data_tokens, &d);
    static rt_plan_store st;
    rt_make_table();
    qt_runtime_set_kernel_table(rt_table);
    const int64_t splits[3][2] = {{1, 4}, {2, 2}, {4, 1}};
    uint64_t fp[3][3];
    uint32_t loss[3][3], params[3][RT_N0 + RT_N1];
    double norm[3][3];
    for (int v = 0; v < 3; v++) {
        rt_build_plan(&st, splits[v][0], splits[v][1]);
        qt_run_opts o;
        memset(&o, 0, sizeof o);
        o.seed = 3;
        o.lr_override = -1.0f;
        o.n_ranks = 1;
        st.plan.hash = qt_plan_hash(&st.plan);
        LONGS_EQUAL(0, qt_runtime_init(&st.plan, &o));
        for (int64_t step = 0; step < 3; step++) {
            // expected loss from the fake loss op: parameters before the update, windows
            // 4*step .. 4*step+3 (first token = window index), token count 16
            const float *p0 = (const float *)(const void *)(rt_arena + RT_OFF_PARAMS);
            long double lsum = 0.0L;  // 4 floats of similar size: exact in long double
            for (int j = 0; j < 4; j++)
                lsum += (float)(4 * step + j) * 0.1f + 1.0f / 3.0f + p0[0] * p0[0];
            qt_step_metrics m;
            LONGS_EQUAL(0, qt_runtime_step(&st.plan, step, &m));
            fp[v][step] = m.fingerprint;
            loss[v][step] = rt_bits(m.loss_f32);
            norm[v][step] = m.grad_norm;
            LONGS_EQUAL(4 * RT_S, m.tokens);
            LONGS_EQUAL(rt_bits((float)((double)lsum / 16.0)), rt_bits(m.loss_f32));
            DOUBLES_EQUAL(qt_runtime_lr(&st.plan, step), m.lr, 0.0);
            if (step == 1)  // warm = (int)(10 * 0.2f) = 2: lr(1) = peak / 2 (exact in double)
                DOUBLES_EQUAL((double)0.01f / 2.0, m.lr, 0.0);
        }
        memcpy(params[v], rt_arena + RT_OFF_PARAMS, sizeof params[v]);
        CHECK(fp[v][0] != fp[v][1]);  // the optimizer moved the parameters
    }
    for (int v = 1; v < 3; v++) {
        for (int s = 0; s < 3; s++) {
            CHECK(fp[0][s] == fp[v][s]);
            LONGS_EQUAL(loss[0][s], loss[v][s]);
            CHECK(rt_bits_d(norm[0][s]) == rt_bits_d(norm[v][s]));
        }
        CHECK(memcmp(params[0], params[v], sizeof params[0]) == 0);
    }
    qt_runtime_set_kernel_table(NULL);
    qt_runtime_set_tokens(NULL, NULL);
}

TEST(RuntimeStep, InitRejectsRankMismatchAndForeignArena)
{
    static rt_plan_store st;
    static unsigned char outside[8192] __attribute__((aligned(64)));
    rt_make_table();
    qt_runtime_set_kernel_table(rt_table);
    rt_build_plan(&st, 2, 2);
    st.plan.hash = qt_plan_hash(&st.plan);
    qt_run_opts o;
    memset(&o, 0, sizeof o);
    o.n_ranks = 2;
    CHECK(qt_runtime_init(&st.plan, &o) != 0);
    o.n_ranks = 1;
    st.plan.arena = outside;
    CHECK(qt_runtime_init(&st.plan, &o) != 0);
    st.plan.arena = rt_arena;
    LONGS_EQUAL(0, qt_runtime_init(&st.plan, &o));
    // a table edited after generation no longer matches its hash: refused
    st.plan.train.lr *= 2.0f;
    CHECK(qt_runtime_init(&st.plan, &o) != 0);
    st.plan.train.lr /= 2.0f;
    LONGS_EQUAL(0, qt_runtime_init(&st.plan, &o));
    // a step schedule that finalises the wrong number of leaves: refused
    st.step_ops[0].a[0] += 1;
    st.plan.hash = qt_plan_hash(&st.plan);
    CHECK(qt_runtime_init(&st.plan, &o) != 0);
    // flat regions sharing bytes (a tree level on the second Adam moment): refused
    rt_build_plan(&st, 2, 2);
    st.plan.tree_offset[0] = RT_OFF_V;
    st.plan.hash = qt_plan_hash(&st.plan);
    CHECK(qt_runtime_init(&st.plan, &o) != 0);
    rt_build_plan(&st, 2, 2);
    st.plan.hash = qt_plan_hash(&st.plan);
    LONGS_EQUAL(0, qt_runtime_init(&st.plan, &o));
    qt_runtime_set_kernel_table(NULL);
}

// Start-up refuses a plan whose tensors' dtypes do not fit its compute dtype
// (runtime/validate_bf16.c; bf16 plans themselves run: tests/e2e/77_bf16.sh end to end,
// test_bf16_ops.cpp op by op). This hand plan's fake kernels read fp32, so it never runs in
// bf16; each case below is refused for the one reason named, and the message says which:
//  (a) an fp32 plan holding a bf16 tensor (a parameter's compute copy);
//  (b) a bf16 plan whose boundary op (the fake loss on XENT, which reads p0) must stage a
//      bf16 p0 but has no staging region (bf16_stage_elems 0);
//  (c) the same with a staging region: now refused because the native MATMUL_WGRAD reads
//      its x slot (here the int32 tokens) as bf16;
// and the fp32 plan as built is accepted.
TEST(RuntimeStep, InitRefusesMisfitDtypes)
{
    static rt_plan_store st;
    rt_make_table();
    qt_runtime_set_kernel_table(rt_table);
    qt_run_opts o;
    memset(&o, 0, sizeof o);
    o.n_ranks = 1;
    const int quiet = qt_set_quiet(1);
    rt_build_plan(&st, 2, 2);  // (a)
    st.tensors[st.params[0].tensor].dtype = QT_BF16;
    st.plan.hash = qt_plan_hash(&st.plan);
    LONGS_EQUAL(QT_E_PLAN, qt_runtime_init(&st.plan, &o));
    CHECK(strstr(qt_last_error(), "dtype float32 but 1 bf16 tensors") != NULL);
    st.plan.dtype = QT_BF16;  // (b)
    st.plan.hash = qt_plan_hash(&st.plan);
    LONGS_EQUAL(QT_E_PLAN, qt_runtime_init(&st.plan, &o));
    CHECK(strstr(qt_last_error(), "microbatch op 0 (fake_loss) stages 16 floats of bf16 "
                                  "tensors, the plan's bf16 staging region holds 0") != NULL);
    st.plan.bf16_stage_offset = RT_OFF_SCRATCH;  // (c)
    st.plan.bf16_stage_elems = 16;
    st.plan.hash = qt_plan_hash(&st.plan);
    LONGS_EQUAL(QT_E_PLAN, qt_runtime_init(&st.plan, &o));
    CHECK(strstr(qt_last_error(), "microbatch op 1 (fake_wgrad): slot t1, tensor tokens, is "
                                  "int32") != NULL);
    qt_set_quiet(quiet);
    rt_build_plan(&st, 2, 2);
    st.plan.hash = qt_plan_hash(&st.plan);
    LONGS_EQUAL(0, qt_runtime_init(&st.plan, &o));
    qt_runtime_set_kernel_table(NULL);
}

// The start-up fit test of the arena (the RLIMIT_AS branch is also run end to end under
// `ulimit -v` in tests/e2e/40_bad_input.sh; MemAvailable cannot be lowered there).
TEST(RuntimeStep, ArenaFitAgainstAddressLimitAndMemAvailable)
{
    const long long mib = 1 << 20;
    LONGS_EQUAL(0, qt_arena_check_fit("t", 82 * mib, 82 * mib, 200 * mib, -1, -1));
    LONGS_EQUAL(0, qt_arena_check_fit("t", 82 * mib, 82 * mib, 200 * mib, 300 * mib, 100 * mib));
    LONGS_EQUAL(QT_E_PLAN, qt_arena_check_fit("t", 82 * mib, 82 * mib, 250 * mib, 300 * mib, -1));
    LONGS_EQUAL(QT_E_PLAN, qt_arena_check_fit("t", 82 * mib, 82 * mib, 0, 80 * mib, -1));
    LONGS_EQUAL(QT_E_PLAN, qt_arena_check_fit("t", 82 * mib, 0, 0, -1, 81 * mib));
    // nothing to map (exec mapped it): only the prefault's MemAvailable matters
    LONGS_EQUAL(0, qt_arena_check_fit("t", 82 * mib, 0, 500 * mib, 300 * mib, 83 * mib));
}

// arena_pages=auto: huge pages while their population has taken under QT_ARENA_COMPACT_S or
// still runs at QT_ARENA_COMPACT_GBPS or more; 4 KiB pages after (the kernel compacting
// fragmented memory for each huge page ran at 0.05-0.1 GB/s on this VM).
TEST(RuntimeStep, ArenaGivesUpHugePagesOnlyAfterSlowCompaction)
{
    const long long mib = 1 << 20;
    CHECK_EQUAL(1, qt_arena_keep_huge(64 * mib, 1.9));       // slow, but under 2 s
    CHECK_EQUAL(1, qt_arena_keep_huge(2048 * mib, 3.0));     // 0.72 GB/s
    CHECK_EQUAL(1, qt_arena_keep_huge(1000000000, 2.0));     // exactly 0.5 GB/s
    CHECK_EQUAL(0, qt_arena_keep_huge(999999999, 2.0));      // just under, at 2 s
    CHECK_EQUAL(0, qt_arena_keep_huge(256 * mib, 2.2));      // 0.12 GB/s (measured)
}

// ------------------------------------------------------------------ process-manager check

// qtrain-static under `mpiexec -n 2` used to run two independent jobs writing the same
// files; comm_local.c's qt_comm_init now refuses when the environment of a process manager
// says the job has more than one process. Each variable is tried alone (the test's own
// environment is saved and restored).
TEST_GROUP(CommEnv){};

TEST(CommEnv, MultiProcessEnvironmentIsRefusedNamingTheVariable)
{
    static const char *const names[] = {"PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
                                        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                        "PMIX_RANK", "MV2_COMM_WORLD_SIZE"};
    const size_t n = sizeof names / sizeof names[0];
    std::string saved[n];
    bool had[n];
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(names[i]);
        had[i] = v != NULL;
        if (v) saved[i] = v;
        unsetenv(names[i]);
    }
    int quiet = qt_set_quiet(1);
    LONGS_EQUAL(QT_OK, qt_comm_env_check("build/x/qtrain-static"));
    // what `mpiexec -n 1` sets, and values that are not counts, are accepted
    static const struct { const char *name, *val; } ok[] = {
        {"PMI_SIZE", "1"}, {"PMI_RANK", "0"}, {"MPI_LOCALNRANKS", "1"}, {"PMIX_RANK", "0"},
        {"PMI_SIZE", "abc"}, {"OMPI_COMM_WORLD_SIZE", ""},
    };
    for (auto &c : ok) {
        setenv(c.name, c.val, 1);
        LONGS_EQUAL(QT_OK, qt_comm_env_check("build/x/qtrain-static"));
        unsetenv(c.name);
    }
    static const struct { const char *name, *val, *msg; } bad[] = {
        {"PMI_SIZE", "2", "PMI_SIZE=2: a process manager (mpiexec, srun) started this process as one of 2 processes"},
        {"PMI_RANK", "1", "PMI_RANK=1: a process manager (mpiexec, srun) started this process as rank 1 of a multi-process job"},
        {"MPI_LOCALNRANKS", "4", "MPI_LOCALNRANKS=4: "},
        {"OMPI_COMM_WORLD_SIZE", "8", "OMPI_COMM_WORLD_SIZE=8: "},
        {"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_RANK=3: "},
        {"PMIX_RANK", "1", "PMIX_RANK=1: "},
        {"MV2_COMM_WORLD_SIZE", "2", "MV2_COMM_WORLD_SIZE=2: "},
    };
    for (auto &c : bad) {
        setenv(c.name, c.val, 1);
        LONGS_EQUAL(QT_E_PLAN, qt_comm_env_check("build/x/qtrain-static"));
        unsetenv(c.name);
        if (!strstr(qt_last_error(), c.msg)) FAIL(qt_last_error());
        CHECK(strstr(qt_last_error(), "build/x/qtrain-static is the single-rank build") != NULL);
        CHECK(strstr(qt_last_error(), "run the MPI build build/x/qtrain (build/<run>/qtrain) under mpiexec") != NULL);
    }
    // no directory in argv[0]: the MPI build is named generically
    setenv("PMI_SIZE", "2", 1);
    LONGS_EQUAL(QT_E_PLAN, qt_comm_env_check("qtrain-static"));
    CHECK(strstr(qt_last_error(), "run the MPI build qtrain (build/<run>/qtrain)") != NULL);
    unsetenv("PMI_SIZE");
    qt_set_quiet(quiet);
    for (size_t i = 0; i < n; i++)
        if (had[i]) setenv(names[i], saved[i].c_str(), 1);
}
