// test_registry.cpp - unit tests of the two registries (firmware/include/qt_ops.def and
// qt_coll.def) through what they generate, and of the kind and the collective added through
// them: ROUND_BF16 (fp32 -> bf16 round to nearest even, for bf16 mixed precision) against
// hand-computed encodings and an independent reference, through its kernel-table entry;
// MAX_I64 (the agreed error flag of a mesh) through its combine, its row, its start-up
// check and the COLLECTIVE step op on one rank. The multi-rank maximum itself is checked
// by tests/tools/coll_check.c under MPICH (e2e 60_collectives.sh).
#include <math.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "qt_plan.h"
#include "qt_ops.h"
#include "ops/qt_op_fns.h"
#include "kernels/elementwise.h"
#include "runtime/qt_step.h"
#include "comm/qt_coll.h"
#include "qt_err.h"
}

#include "CppUTest/TestHarness.h"
#include "qt_test_util.h"

static uint32_t bits_of(float f) { return qt_test_bits(f); }
static float float_of(uint32_t u) { return qt_test_float(u); }

static uint32_t round_one(uint32_t u)
{
    float x = float_of(u), y;
    qt_round_bf16(&y, &x, 1);
    return bits_of(y);
}

TEST_GROUP(Registry) {};

// Encodings worked by hand: the 16 dropped bits below, at and above half of the kept
// lowest bit, with the kept bit even and odd; both signs; subnormals; the overflow to
// infinity; infinities; NaNs (a signalling NaN whose payload lies only in the dropped bits
// must stay a NaN, not become an infinity).
TEST(Registry, RoundBf16Encodings)
{
    static const uint32_t cases[][2] = {
        {0x3f800000u, 0x3f800000u},  // 1
        {0x3f807fffu, 0x3f800000u},  // below half: down
        {0x3f808000u, 0x3f800000u},  // tie, kept bit even: stays
        {0x3f808001u, 0x3f810000u},  // above half: up
        {0x3f818000u, 0x3f820000u},  // tie, kept bit odd: up to even
        {0xbf818000u, 0xbf820000u},  // the same, negative
        {0xbf807fffu, 0xbf800000u},
        {0x80000000u, 0x80000000u},  // -0
        {0x00008000u, 0x00000000u},  // subnormals give the zero of their sign (VCVTNEPS2BF16)
        {0x00018000u, 0x00000000u},
        {0x007fffffu, 0x00000000u},
        {0x807fffffu, 0x80000000u},
        {0x7f7f7fffu, 0x7f7f0000u},  // below half under the largest finite bf16
        {0x7f7f8000u, 0x7f800000u},  // tie above the largest finite bf16 (odd): +inf
        {0x7f7fffffu, 0x7f800000u},  // FLT_MAX: +inf
        {0xff7fffffu, 0xff800000u},  // -FLT_MAX: -inf
        {0x7f800000u, 0x7f800000u},  // +inf
        {0xff800000u, 0xff800000u},  // -inf
        {0x7f800001u, 0x7fc00000u},  // signalling NaN, payload in the dropped bits: quiet NaN
        {0xff800001u, 0xffc00000u},  // the same, negative
        {0x7fc00000u, 0x7fc00000u},  // quiet NaN
        {0x7fa12345u, 0x7fe10000u},  // NaN with a high payload: kept, made quiet
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint32_t got = round_one(cases[i][0]);
        if (got != cases[i][1])
            FAIL(StringFromFormat("bf16(0x%08x) = 0x%08x, expected 0x%08x", cases[i][0], got,
                                  cases[i][1]).asCharString());
    }
}

// Every finite float of a sweep against a reference in double: the result is a bf16 value
// (low 16 bits zero) and the nearer of the two bf16 neighbours of x, the even one on a tie.
TEST(Registry, RoundBf16NearestEvenSweep)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 200000; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        const uint32_t u = (uint32_t)s;
        if ((u & 0x7f800000u) == 0x7f800000u) continue;  // inf and NaN: the encodings test
        if ((u & 0x7f800000u) == 0) continue;  // zeros and subnormals: the encodings test
        const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
        const double x = float_of(u), dlo = fabs(x - (double)float_of(lo));
        // hi may be the infinity of x's sign: its distance is that of 2^128
        const double vhi = (hi & 0x7fffffffu) == 0x7f800000u ? copysign(ldexp(1.0, 128), x)
                                                              : (double)float_of(hi);
        const double dhi = fabs(vhi - x);
        const uint32_t want = dlo < dhi ? lo : dhi < dlo ? hi : ((lo >> 16) & 1u) ? hi : lo;
        const uint32_t got = round_one(u);
        if (got != want)
            FAIL(StringFromFormat("bf16(0x%08x) = 0x%08x, expected 0x%08x", u, got, want)
                     .asCharString());
    }
}

// The new kind through what its row generates: the table entry (class, name, wrapper, no
// check hook, the native bf16 property), the named slots in row order, and the wrapper on
// an arena, in place too.
TEST(Registry, RoundBf16ThroughTheKernelTable)
{
    const qt_kernel_entry *k = &qt_kernel_table[QT_OP_ROUND_BF16];
    STRCMP_EQUAL("round_bf16", k->name);
    LONGS_EQUAL(QT_OPC_RUN, k->cls);
    CHECK(k->run == qt_op_round_bf16 && !k->wgrad && !k->step && !k->check && k->props == QT_OPP_BF16);
    LONGS_EQUAL(0, QT_T_ROUND_BF16_y);
    LONGS_EQUAL(1, QT_T_ROUND_BF16_x);
    LONGS_EQUAL(0, QT_A_ROUND_BF16_n);

    alignas(64) static unsigned char arena[256];
    qt_tensor ts[2];
    memset(ts, 0, sizeof ts);
    ts[0].offset = 0;
    ts[1].offset = 64;
    ts[0].numel = ts[1].numel = 5;
    qt_plan p;
    memset(&p, 0, sizeof p);
    p.n_tensors = 2;
    p.tensors = ts;
    p.arena = arena;
    qt_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.plan = &p;
    ctx.arena = arena;
    const float in[5] = {1.0f, float_of(0x3f818000u), -3.14159f, 65504.0f, float_of(0x7f7fffffu)};
    memcpy(arena + 64, in, sizeof in);
    qt_op op;
    memset(&op, 0, sizeof op);
    for (int i = 0; i < QT_OP_MAX_T; i++) op.t[i] = QT_NONE;
    op.kind = QT_OP_ROUND_BF16;
    QT_T(&op, ROUND_BF16, y) = 0;
    QT_T(&op, ROUND_BF16, x) = 1;
    QT_A(&op, ROUND_BF16, n) = 5;
    k->run(&op, &ctx);
    for (int i = 0; i < 5; i++) {
        float y;
        memcpy(&y, arena + 4 * i, 4);
        LONGS_EQUAL(round_one(bits_of(in[i])), bits_of(y));
        UNSIGNED_LONGS_EQUAL(0u, bits_of(y) & 0xffffu);
    }
    QT_T(&op, ROUND_BF16, y) = 1;  // in place
    k->run(&op, &ctx);
    CHECK(memcmp(arena, arena + 64, 20) == 0);
}

// Per-kind behaviour is data: the WGRAD kinds that write their leaves are exactly the
// dense and expert matmuls, and the check hooks sit where the rows say.
TEST(Registry, OpPropsAndHooksFromTheRows)
{
    for (int k = 0; k < QT_OP_COUNT; k++) {
        const qt_kernel_entry *e = &qt_kernel_table[k];
        const int writes = (e->props & QT_OPP_WGRAD_WRITES) != 0;
        CHECK_EQUAL(k == QT_OP_MATMUL_WGRAD || k == QT_OP_EXPERT_FFN_WGRAD ||
                        k == QT_OP_MOE_ROUNDS_WGRAD,
                    writes);
        if (writes) LONGS_EQUAL(QT_OPC_WGRAD, e->cls);
    }
    CHECK(qt_kernel_table[QT_OP_GDN_CORE_FWD].check == qt_check_gdn_core_fwd);
    CHECK(qt_kernel_table[QT_OP_COLLECTIVE].check == qt_check_collective);
    CHECK(qt_kernel_table[QT_OP_ADAMW].check == NULL);
    CHECK(qt_kernel_table[QT_OP_ADAMW].props & QT_OPP_UPDATE);
    LONGS_EQUAL(7, QT_A_GDN_CORE_FWD_algo);
    LONGS_EQUAL(10, QT_T_GDN_CORE_BWD_scratch);
}

// The expert dispatch in rounds (issue 35): three kinds appended after GRAD_MB_UNITS (kind
// numbers are in the plan hash), the two RUN kinds and the WGRAD kind sharing a0..a7 (the
// wrappers read them through MOE_ROUNDS_FWD's names; a7 is the WGRAD's leaf count), the
// WGRAD writing its leaves and naming its parameters in t3, t4.
TEST(Registry, MoeRoundsRows)
{
    LONGS_EQUAL(QT_OP_GRAD_MB_UNITS + 1, QT_OP_MOE_ROUNDS_FWD);
    LONGS_EQUAL(QT_OP_GRAD_MB_UNITS + 2, QT_OP_MOE_ROUNDS_BWD);
    LONGS_EQUAL(QT_OP_GRAD_MB_UNITS + 3, QT_OP_MOE_ROUNDS_WGRAD);
    LONGS_EQUAL(QT_OPC_RUN, qt_kernel_table[QT_OP_MOE_ROUNDS_FWD].cls);
    LONGS_EQUAL(QT_OPC_RUN, qt_kernel_table[QT_OP_MOE_ROUNDS_BWD].cls);
    LONGS_EQUAL(QT_OPC_WGRAD, qt_kernel_table[QT_OP_MOE_ROUNDS_WGRAD].cls);
    STRCMP_EQUAL("wrrppsssss", qt_kernel_table[QT_OP_MOE_ROUNDS_FWD].slots);
    STRCMP_EQUAL("arrrppssssss", qt_kernel_table[QT_OP_MOE_ROUNDS_BWD].slots);
    STRCMP_EQUAL("rrrppssssss", qt_kernel_table[QT_OP_MOE_ROUNDS_WGRAD].slots);
    LONGS_EQUAL(QT_A_MOE_ROUNDS_FWD_R, QT_A_MOE_ROUNDS_BWD_R);
    LONGS_EQUAL(QT_A_MOE_ROUNDS_FWD_R, QT_A_MOE_ROUNDS_WGRAD_R);
    LONGS_EQUAL(QT_A_MOE_ROUNDS_FWD_nb, QT_A_MOE_ROUNDS_WGRAD_nb);
    LONGS_EQUAL(QT_A_WGRAD_SEQS, QT_A_MOE_ROUNDS_FWD_leaves);
    LONGS_EQUAL(QT_A_WGRAD_SEQS, QT_A_MOE_ROUNDS_BWD_leaves);
    CHECK(qt_kernel_table[QT_OP_MOE_ROUNDS_WGRAD].props & QT_OPP_WGRAD_WRITES);
}

// The microbatch form's split units exchange (issue 35): two STEP kinds appended after the
// last kind before them (kind numbers are in the plan hash), naming their range in a0 as
// GRAD_MB_UNITS does, each with its own start-up check; the wait belongs to the op before it
// under scan_layers (it sits first in the backward).
TEST(Registry, SplitUnitsRows)
{
    LONGS_EQUAL(QT_OP_MOE_RETURN_BWD_WAIT + 1, QT_OP_GRAD_MB_UNITS_START);
    LONGS_EQUAL(QT_OP_MOE_RETURN_BWD_WAIT + 2, QT_OP_GRAD_MB_UNITS_WAIT);
    LONGS_EQUAL(QT_OPC_STEP, qt_kernel_table[QT_OP_GRAD_MB_UNITS_START].cls);
    LONGS_EQUAL(QT_OPC_STEP, qt_kernel_table[QT_OP_GRAD_MB_UNITS_WAIT].cls);
    LONGS_EQUAL(QT_A_GRAD_MB_UNITS_range, QT_A_GRAD_MB_UNITS_START_range);
    LONGS_EQUAL(QT_A_GRAD_MB_UNITS_range, QT_A_GRAD_MB_UNITS_WAIT_range);
    CHECK(qt_kernel_table[QT_OP_GRAD_MB_UNITS_START].check == qt_check_grad_mb_units_start);
    CHECK(qt_kernel_table[QT_OP_GRAD_MB_UNITS_WAIT].check == qt_check_grad_mb_units_wait);
    CHECK(qt_kernel_table[QT_OP_GRAD_MB_UNITS_WAIT].props & QT_OPP_SCAN_PREV);
}

// MAX_I64's combine: signed order at the extremes and between signs (an unsigned or a
// summing combine fails here), every element, nothing past n.
TEST(Registry, MaxI64Merge)
{
    int64_t acc[6] = {-1, INT64_MIN, 5, INT64_MAX, 0, 77};
    const int64_t in[6] = {1, INT64_MIN + 1, -5, 0, -1, -99};
    qt_coll_merge_max_i64(acc, in, 5);
    const int64_t want[6] = {1, INT64_MIN + 1, 5, INT64_MAX, 0, 77};
    for (int i = 0; i < 6; i++) CHECK(acc[i] == want[i]);
}

// MAX_I64's row and its plan form: 8-byte elements, whole range on every member, the tree's
// bytes sent; the start-up check wants whole elements inside the arena; a COLLECTIVE step op
// naming it runs through the registry's dispatch (one rank: the range is already the
// maximum, unchanged), and ALL_TO_ALL, which has no range form, is refused.
TEST(Registry, MaxI64ThroughThePlan)
{
    const qt_coll_kind_info *k = qt_coll_kind(QT_COLL_MAX_I64);
    CHECK(k != NULL);
    STRCMP_EQUAL("QT_COLL_MAX_I64", k->enum_name);
    STRCMP_EQUAL("max-i64", k->text);
    LONGS_EQUAL(8, k->unit);
    LONGS_EQUAL(0, k->split);
    LONGS_EQUAL(2 * 64, k->sent(4, 64));
    LONGS_EQUAL(3 * 64, k->sent(5, 64));
    CHECK(qt_coll_kind(QT_COLL_KIND_COUNT) == NULL);

    const int32_t mesh[QT_MESH_COUNT] = {1, 1, 1, 1, 1};
    LONGS_EQUAL(0, qt_comm_mesh_init(mesh, 0, 1));
    alignas(64) static unsigned char arena[128];
    qt_collective c[2] = {{"error flag", QT_COLL_MAX_I64, 1u << QT_MESH_DATA, 64, 16},
                          {"a2a", QT_COLL_ALL_TO_ALL, 0, 0, 16}};
    LONGS_EQUAL(QT_OK, qt_coll_range_check(&c[0], 128));
    c[0].bytes = 12;  // not whole int64 values
    CHECK(qt_coll_range_check(&c[0], 128) != QT_OK);
    c[0].bytes = 72;  // past the arena
    CHECK(qt_coll_range_check(&c[0], 128) != QT_OK);
    c[0].bytes = 16;
    CHECK(qt_coll_range_check(&c[1], 128) != QT_OK);

    qt_plan p;
    memset(&p, 0, sizeof p);
    p.run_name = "registry";
    p.arena = arena;
    p.arena_bytes = 128;
    p.n_collectives = 2;
    p.collectives = c;
    qt_op op;
    memset(&op, 0, sizeof op);
    op.kind = QT_OP_COLLECTIVE;
    QT_A(&op, COLLECTIVE, coll) = 0;
    qt_check_state cs;
    memset(&cs, 0, sizeof cs);
    LONGS_EQUAL(0, qt_kernel_table[QT_OP_COLLECTIVE].check(&p, &op, &cs));
    const int64_t flags[2] = {-7, 3};
    memcpy(arena + 64, flags, sizeof flags);
    qt_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.plan = &p;
    ctx.arena = arena;
    qt_step_state st;
    memset(&st, 0, sizeof st);
    LONGS_EQUAL(QT_OK, qt_kernel_table[QT_OP_COLLECTIVE].step(&op, &ctx, &st));
    CHECK(memcmp(arena + 64, flags, sizeof flags) == 0);
    QT_A(&op, COLLECTIVE, coll) = 1;
    CHECK(qt_kernel_table[QT_OP_COLLECTIVE].check(&p, &op, &cs) != 0);
}
