// test_ctx_exchange.cpp - context parallelism's head exchange (qt_ops.def CTX_TO_HEADS,
// CTX_TO_HEADS_BWD, CTX_TO_TOKENS, CTX_TO_TOKENS_BWD; parallel/cp_pack.h, ops/ops_ctx.c),
// single process, at 0 ulp (every comparison is of bytes):
//  (1) the layout permutation for C = 1, 2, 4 simulated ranks (every simulated rank's pack,
//      an all-to-all done by hand, every rank's unpack) against the layouts' index formula
//      written out here and against the firmware's element-by-element reference, fp32 and
//      bf16 elements; to_tokens(to_heads(x)) = x and to_heads(to_tokens(y)) = y;
//  (2) the accumulating unpacks add exactly once per element (fp32 add; bf16 widened, added
//      in fp32, rounded once);
//  (3) the wrappers through the kernel table on one rank (a group of one: copy and add),
//      fp32 and bf16 plans, and the registry rows (appended kinds, BF16, CHECK);
//  (4) the refusals: the kernel's shape check (S % C, G % C) and the start-up check hook
//      (C against the plan's mesh, dtypes, element counts, scratch), and a wrapper whose C
//      differs from its group's size stores QT_E_PLAN in ctx->status;
//  (5) uneven ownership (u > 0): runs of units, zero padding slots, both ways.
// The multi-rank exchange itself runs under MPICH in tests/tools/coll_check.c (--ctx).
#include <stdint.h>
#include <string.h>
#include <vector>
#include "CppUTest/TestHarness.h"

extern "C" {
#include "qt_plan.h"
#include "qt_ops.h"
#include "qt_err.h"
#include "ops/qt_op_fns.h"
#include "parallel/cp_pack.h"
#include "comm/qt_coll.h"
#include "kernels/bf16.h"
}

#include "qt_test_util.h"

namespace {

typedef std::vector<unsigned char> bytes;

uint64_t cx_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// n random finite elements of eb bytes: fp32 with 24 random significant bits in +-[2^-3,
// 2^4), or their bf16 encodings (so fp32 and bf16 sums round).
bytes cx_random(int64_t n, int64_t eb, uint64_t *s)
{
    bytes v((size_t)(n * eb));
    for (int64_t i = 0; i < n; i++) {
        const uint64_t r = cx_next(s);
        const float m = 1.0f + (float)(r & 0x7fffffu) / 8388608.0f;
        const float f = ldexpf((r >> 40) & 1 ? -m : m, (int)((r >> 24) % 7) - 3);
        if (eb == 4) {
            memcpy(&v[(size_t)(i * 4)], &f, 4);
        } else {
            const qt_bf16 h = qt_bf16_from_f32(f);
            memcpy(&v[(size_t)(i * 2)], &h, 2);
        }
    }
    return v;
}

// One element's bytes of a buffer.
bool cx_same(const bytes &a, int64_t ai, const bytes &b, int64_t bi, int64_t eb)
{
    return memcmp(&a[(size_t)(ai * eb)], &b[(size_t)(bi * eb)], (size_t)eb) == 0;
}

// The all-to-all of C simulated ranks: recv[c] block j = send[j] block c.
std::vector<bytes> cx_exchange(const std::vector<bytes> &send, int64_t blk)
{
    const size_t C = send.size();
    std::vector<bytes> recv(C, bytes(send[0].size(), 0xEE));
    for (size_t c = 0; c < C; c++)
        for (size_t j = 0; j < C; j++)
            memcpy(&recv[c][j * (size_t)blk], &send[j][c * (size_t)blk], (size_t)blk);
    return recv;
}

struct Shapes {
    qt_cp_shape sh;
    int64_t Sl, Gl, n;
    Shapes(int64_t b, int64_t S, int64_t G, int64_t w, int64_t C, int64_t eb)
    {
        sh = {b, S, G, w, C, eb, 0};
        Sl = S / C;
        Gl = G / C;
        n = QT_CP_ELEMS(b, S, G, w, C);
    }
};

// to_heads of every simulated rank through pack, exchange, unpack.
std::vector<bytes> cx_to_heads(const Shapes &z, const std::vector<bytes> &xs)
{
    std::vector<bytes> send;
    for (size_t c = 0; c < xs.size(); c++) {
        send.push_back(bytes((size_t)(z.n * z.sh.eb), 0xCC));
        qt_cp_pack_tokens(&z.sh, send[c].data(), xs[c].data());
    }
    std::vector<bytes> recv = cx_exchange(send, qt_cp_block_bytes(&z.sh)), ys;
    for (size_t c = 0; c < xs.size(); c++) {
        ys.push_back(bytes((size_t)(z.n * z.sh.eb), 0xDD));
        qt_cp_unpack_heads(&z.sh, ys[c].data(), recv[c].data(), 0);
    }
    return ys;
}

std::vector<bytes> cx_to_tokens(const Shapes &z, const std::vector<bytes> &ys)
{
    std::vector<bytes> send;
    for (size_t c = 0; c < ys.size(); c++) {
        send.push_back(bytes((size_t)(z.n * z.sh.eb), 0xCC));
        qt_cp_pack_heads(&z.sh, send[c].data(), ys[c].data());
    }
    std::vector<bytes> recv = cx_exchange(send, qt_cp_block_bytes(&z.sh)), xs;
    for (size_t c = 0; c < ys.size(); c++) {
        xs.push_back(bytes((size_t)(z.n * z.sh.eb), 0xDD));
        qt_cp_unpack_tokens(&z.sh, xs[c].data(), recv[c].data(), 0);
    }
    return xs;
}

// The brief's formula: Y_c[s][t][g][i] = X_{t/Sl}[s][t%Sl][c*Gl+g][i], every element.
long cx_bad_heads(const Shapes &z, const std::vector<bytes> &xs, const std::vector<bytes> &ys)
{
    const int64_t b = z.sh.b, S = z.sh.S, G = z.sh.G, w = z.sh.w, eb = z.sh.eb;
    long bad = 0;
    for (int64_t c = 0; c < z.sh.C; c++)
        for (int64_t s = 0; s < b; s++)
            for (int64_t t = 0; t < S; t++)
                for (int64_t g = 0; g < z.Gl; g++)
                    for (int64_t i = 0; i < w; i++)
                        bad += !cx_same(ys[(size_t)c], ((s * S + t) * z.Gl + g) * w + i,
                                        xs[(size_t)(t / z.Sl)],
                                        ((s * z.Sl + t % z.Sl) * G + c * z.Gl + g) * w + i, eb);
    return bad;
}

const int64_t kC[] = {1, 2, 4};
const int64_t kEb[] = {4, 2};

}  // namespace

TEST_GROUP(CtxExchange) {};

// (1) pack + exchange + unpack = the index formula (and the firmware's reference), both
// ways, for 1, 2 and 4 simulated ranks, fp32 and bf16 elements; round trips are identities.
TEST(CtxExchange, PermutationMatchesTheIndexFormulaAndInverts)
{
    uint64_t seed = 0x1234567;
    for (int64_t C : kC)
        for (int64_t eb : kEb) {
            const Shapes z(3, 8, 4, 5, C, eb);
            std::vector<bytes> xs, ys_in;
            for (int64_t c = 0; c < C; c++) {
                xs.push_back(cx_random(z.n, eb, &seed));
                ys_in.push_back(cx_random(z.n, eb, &seed));
            }
            std::vector<bytes> ys = cx_to_heads(z, xs);
            LONGS_EQUAL(0, cx_bad_heads(z, xs, ys));
            std::vector<const void *> xp, yp;
            for (int64_t c = 0; c < C; c++) {
                xp.push_back(xs[(size_t)c].data());
                yp.push_back(ys_in[(size_t)c].data());
            }
            for (int64_t c = 0; c < C; c++) {
                bytes ref((size_t)(z.n * eb), 0x55);
                qt_cp_ref_to_heads(&z.sh, c, ref.data(), xp.data());
                CHECK(ref == ys[(size_t)c]);
            }
            // round trips: to_tokens inverts to_heads, and the other way round
            std::vector<bytes> back = cx_to_tokens(z, ys);
            for (int64_t c = 0; c < C; c++) CHECK(back[(size_t)c] == xs[(size_t)c]);
            std::vector<bytes> toks = cx_to_tokens(z, ys_in);
            LONGS_EQUAL(0, cx_bad_heads(z, toks, ys_in));  // ys_in = to_heads(toks)
            for (int64_t c = 0; c < C; c++) {
                bytes ref((size_t)(z.n * eb), 0x55);
                qt_cp_ref_to_tokens(&z.sh, c, ref.data(), yp.data());
                CHECK(ref == toks[(size_t)c]);
            }
            std::vector<bytes> again = cx_to_heads(z, toks);
            for (int64_t c = 0; c < C; c++) CHECK(again[(size_t)c] == ys_in[(size_t)c]);
            // not vacuous: with C > 1 some rank's output differs from its own input
            if (C > 1) CHECK(ys[1] != xs[1]);
        }
}

// (2) The accumulating unpacks: every element gets exactly one add of the value the
// writing unpack would place there (fp32: d + v; bf16: bf16(f32(d) + f32(v))).
TEST(CtxExchange, AccumulatingUnpacksAddExactlyOnce)
{
    uint64_t seed = 99;
    for (int64_t C : kC)
        for (int64_t eb : kEb) {
            const Shapes z(2, 4, 4, 3, C, eb);
            const bytes packed = cx_random(z.n, eb, &seed), d0 = cx_random(z.n, eb, &seed);
            for (int heads = 0; heads < 2; heads++) {
                bytes put(d0.size()), acc = d0;
                if (heads) {
                    qt_cp_unpack_heads(&z.sh, put.data(), packed.data(), 0);
                    qt_cp_unpack_heads(&z.sh, acc.data(), packed.data(), 1);
                } else {
                    qt_cp_unpack_tokens(&z.sh, put.data(), packed.data(), 0);
                    qt_cp_unpack_tokens(&z.sh, acc.data(), packed.data(), 1);
                }
                long bad = 0, moved = 0;
                for (int64_t i = 0; i < z.n; i++) {
                    if (eb == 4) {
                        float d, v, got;
                        memcpy(&d, &d0[(size_t)(4 * i)], 4);
                        memcpy(&v, &put[(size_t)(4 * i)], 4);
                        memcpy(&got, &acc[(size_t)(4 * i)], 4);
                        bad += qt_test_bits(got) != qt_test_bits(d + v);
                        moved += qt_test_bits(got) != qt_test_bits(d);
                    } else {
                        qt_bf16 d, v, got;
                        memcpy(&d, &d0[(size_t)(2 * i)], 2);
                        memcpy(&v, &put[(size_t)(2 * i)], 2);
                        memcpy(&got, &acc[(size_t)(2 * i)], 2);
                        bad += got != qt_bf16_from_f32(qt_f32_from_bf16(d) + qt_f32_from_bf16(v));
                        moved += got != d;
                    }
                }
                LONGS_EQUAL(0, bad);
                CHECK(moved > z.n / 2);
            }
        }
}

// (4, kernel) S a multiple of C, G a multiple or a divisor of C; sizes >= 1; elements of
// 2 or 4 bytes.
TEST(CtxExchange, ShapeCheckRefusesWhatDoesNotSplit)
{
    qt_set_quiet(1);
    const qt_cp_shape ok = {2, 8, 4, 3, 4, 2, 0}, s_bad = {2, 6, 4, 3, 4, 2, 0},
                      g_bad = {2, 8, 6, 3, 4, 4, 0}, eb_bad = {2, 8, 4, 3, 4, 8, 0},
                      zero = {0, 8, 4, 3, 4, 4, 0};
    LONGS_EQUAL(QT_OK, qt_cp_shape_check(&ok));
    LONGS_EQUAL(QT_E_PLAN, qt_cp_shape_check(&s_bad));
    STRCMP_CONTAINS("S = 6 tokens must be a multiple of the context degree C = 4, and G = 4 "
                    "head groups a multiple or a divisor of it", qt_last_error());
    LONGS_EQUAL(QT_E_PLAN, qt_cp_shape_check(&g_bad));
    STRCMP_CONTAINS("G = 6 head groups", qt_last_error());
    LONGS_EQUAL(QT_E_PLAN, qt_cp_shape_check(&eb_bad));
    LONGS_EQUAL(QT_E_PLAN, qt_cp_shape_check(&zero));
    qt_set_quiet(0);
}

namespace {

enum { CX_ARENA = 1 << 16 };
alignas(64) unsigned char cx_arena[CX_ARENA];

// A hand-made one-rank plan with the three tensors of an exchange op (y or dx, x or dy,
// scratch), unwritten bytes 0xff.
struct CxPlan {
    qt_tensor t[3];
    qt_plan plan;
    qt_ctx ctx;
    qt_op op;
    int status = 0;
    CxPlan(unsigned kind, unsigned dtype, int64_t b, int64_t S, int64_t G, int64_t w,
           unsigned mask, int64_t C, int context_axis = 1)
    {
        memset(t, 0, sizeof t);
        memset(&plan, 0, sizeof plan);
        memset(cx_arena, 0xff, sizeof cx_arena);
        const int64_t n = QT_CP_ELEMS(b, S, G, w, C);
        static const char *const names[3] = {"out", "in", "scratch"};
        int64_t off = 0;
        for (int k = 0; k < 3; k++) {
            t[k].name = names[k];
            t[k].dtype = (uint8_t)(k == 2 ? (unsigned)QT_F32 : dtype);
            t[k].role = k == 2 ? QT_ROLE_SCRATCH : QT_ROLE_ACT;
            t[k].ndim = 1;
            t[k].numel = t[k].shape[0] = k == 2 ? QT_CP_SCRATCH_FLOATS(b, S, G, w, C) : n;
            t[k].offset = off;
            off += (t[k].numel * qt_dtype_bytes(t[k].dtype) + 63) / 64 * 64;
        }
        plan.run_name = "ctx-exchange-hand";
        plan.dtype = (uint8_t)dtype;
        plan.arena = cx_arena;
        plan.arena_bytes = CX_ARENA;
        plan.tensors = t;
        plan.n_tensors = 3;
        plan.n_ranks = 1;
        for (int a = 0; a < QT_MESH_COUNT; a++) plan.mesh[a] = 1;
        plan.mesh[QT_MESH_CONTEXT] = context_axis;
        memset(&ctx, 0, sizeof ctx);
        ctx.plan = &plan;
        ctx.arena = cx_arena;
        ctx.n_ranks = 1;
        ctx.status = &status;
        memset(&op, 0, sizeof op);
        for (int k = 0; k < QT_OP_MAX_T; k++) op.t[k] = QT_NONE;
        op.kind = (uint16_t)kind;
        QT_T(&op, CTX_TO_HEADS, y) = 0;
        QT_T(&op, CTX_TO_HEADS, x) = 1;
        QT_T(&op, CTX_TO_HEADS, scratch) = 2;
        QT_A(&op, CTX_TO_HEADS, b) = b;
        QT_A(&op, CTX_TO_HEADS, S) = S;
        QT_A(&op, CTX_TO_HEADS, G) = G;
        QT_A(&op, CTX_TO_HEADS, w) = w;
        QT_A(&op, CTX_TO_HEADS, mask) = mask;
        QT_A(&op, CTX_TO_HEADS, C) = C;
    }
    unsigned char *at(int k) { return cx_arena + t[k].offset; }
    int64_t bytes_of(int k) { return t[k].numel * qt_dtype_bytes(t[k].dtype); }
    int check()
    {
        qt_check_state cs;
        memset(&cs, 0, sizeof cs);
        return qt_kernel_table[op.kind].check(&plan, &op, &cs);
    }
};

const unsigned kKinds[] = {QT_OP_CTX_TO_HEADS, QT_OP_CTX_TO_HEADS_BWD, QT_OP_CTX_TO_TOKENS,
                           QT_OP_CTX_TO_TOKENS_BWD};

}  // namespace

// (3) The rows: appended after ROUND_BF16 in this order, RUN, native bf16, checked at
// start-up, slots "wrs" / "ars".
TEST(CtxExchange, RegistryRows)
{
    LONGS_EQUAL(QT_OP_ROUND_BF16 + 1, QT_OP_CTX_TO_HEADS);
    LONGS_EQUAL(QT_OP_ROUND_BF16 + 4, QT_OP_CTX_TO_TOKENS_BWD);
    LONGS_EQUAL(QT_OP_CTX_CHAIN_SEND + 1, QT_OP_COLL_START);  // the split collectives follow
    for (unsigned k : kKinds) {
        const qt_kernel_entry *e = &qt_kernel_table[k];
        LONGS_EQUAL(QT_OPC_RUN, e->cls);
        CHECK(e->run != NULL && e->check != NULL);
        CHECK(e->props & QT_OPP_BF16);
        const bool bwd = k == QT_OP_CTX_TO_HEADS_BWD || k == QT_OP_CTX_TO_TOKENS_BWD;
        STRCMP_EQUAL(bwd ? "ars" : "wrs", e->slots);
    }
    CHECK(qt_kernel_table[QT_OP_CTX_TO_HEADS].run == qt_op_ctx_to_heads);
    CHECK(qt_kernel_table[QT_OP_CTX_TO_TOKENS_BWD].check == qt_check_ctx_to_tokens_bwd);
    LONGS_EQUAL(5, QT_A_CTX_TO_TOKENS_BWD_C);
}

// (3) One rank (mask 0, and the context axis of size 1): the forward kinds copy bit for
// bit, the BWD kinds add once per element; fp32 and bf16 plans; nothing past t0 written.
TEST(CtxExchange, WrappersOnOneRankCopyAndAdd)
{
    const int32_t mesh[QT_MESH_COUNT] = {1, 1, 1, 1, 1};
    LONGS_EQUAL(0, qt_comm_mesh_init(mesh, 0, 1));
    uint64_t seed = 7;
    for (unsigned dtype : {QT_F32, QT_BF16})
        for (unsigned mask : {0u, 1u << QT_MESH_CONTEXT})
            for (unsigned k : kKinds) {
                CxPlan h(k, dtype, 2, 6, 3, 4, mask, 1);
                const int64_t eb = qt_dtype_bytes(dtype), n = h.t[0].numel;
                LONGS_EQUAL(0, h.check());
                const bytes x = cx_random(n, eb, &seed), d = cx_random(n, eb, &seed);
                memcpy(h.at(1), x.data(), x.size());
                memcpy(h.at(0), d.data(), d.size());
                const bytes scratch0(h.at(2), h.at(2) + h.bytes_of(2));
                qt_kernel_table[k].run(&h.op, &h.ctx);
                LONGS_EQUAL(0, h.status);
                const bytes got(h.at(0), h.at(0) + h.bytes_of(0));
                bytes want = x;
                if (k == QT_OP_CTX_TO_HEADS_BWD || k == QT_OP_CTX_TO_TOKENS_BWD) {
                    want = d;
                    qt_cp_add(want.data(), x.data(), n, eb);
                    CHECK(want != d && want != x);
                }
                CHECK(got == want);
                CHECK(memcmp(h.at(2), scratch0.data(), scratch0.size()) == 0);
                CHECK(memcmp(h.at(1), x.data(), x.size()) == 0);
            }
}

// (4, start-up) The check hook refuses C against the plan's mesh, S or G not multiples of
// C, unequal or integer dtypes, wrong element counts and a short scratch; and the wrapper,
// run anyway with a C its group does not have, stores QT_E_PLAN in ctx->status.
TEST(CtxExchange, StartUpCheckAndWrapperRefusals)
{
    const unsigned cp = 1u << QT_MESH_CONTEXT;
    for (unsigned k : kKinds) {
        CxPlan ok(k, QT_F32, 2, 8, 4, 3, cp, 2, 2);  // context axis 2 on the plan's mesh
        LONGS_EQUAL(0, ok.check());
        CxPlan c_mesh(k, QT_F32, 2, 8, 4, 3, cp, 4, 2);  // C = 4 on a context axis of 2
        LONGS_EQUAL(1, c_mesh.check());
        CxPlan g_bad(k, QT_F32, 2, 8, 4, 3, cp, 2, 2);
        QT_A(&g_bad.op, CTX_TO_HEADS, G) = 5;
        LONGS_EQUAL(1, g_bad.check());
        CxPlan s_bad(k, QT_BF16, 2, 8, 4, 3, cp, 2, 2);
        QT_A(&s_bad.op, CTX_TO_HEADS, S) = 7;
        LONGS_EQUAL(1, s_bad.check());
        qt_check_state cs;
        memset(&cs, 0, sizeof cs);
        LONGS_EQUAL(1, qt_kernel_table[k].check(&s_bad.plan, &s_bad.op, &cs));
        STRCMP_CONTAINS("S a multiple of C, G a multiple or a divisor of C", cs.why);
        CxPlan dt(k, QT_F32, 2, 8, 4, 3, cp, 2, 2);
        dt.t[1].dtype = QT_BF16;
        LONGS_EQUAL(1, dt.check());
        dt.t[0].dtype = dt.t[1].dtype = QT_I32;
        LONGS_EQUAL(1, dt.check());
        CxPlan cnt(k, QT_F32, 2, 8, 4, 3, cp, 2, 2);
        cnt.t[0].numel -= 1;
        LONGS_EQUAL(1, cnt.check());
        CxPlan scr(k, QT_F32, 2, 8, 4, 3, cp, 2, 2);
        scr.t[2].numel -= 1;
        LONGS_EQUAL(1, scr.check());
        CxPlan id(k, QT_F32, 2, 8, 4, 3, cp, 2, 2);
        id.op.t[2] = 3;
        LONGS_EQUAL(1, id.check());
    }
    const int32_t mesh[QT_MESH_COUNT] = {1, 1, 1, 1, 1};
    LONGS_EQUAL(0, qt_comm_mesh_init(mesh, 0, 1));
    qt_set_quiet(1);
    CxPlan run(QT_OP_CTX_TO_HEADS, QT_F32, 2, 8, 4, 3, cp, 2, 2);
    qt_kernel_table[QT_OP_CTX_TO_HEADS].run(&run.op, &run.ctx);
    LONGS_EQUAL(QT_E_PLAN, run.status);
    STRCMP_CONTAINS("context degree is 2", qt_last_error());
    CxPlan split(QT_OP_CTX_TO_TOKENS, QT_F32, 2, 8, 4, 3, cp, 1, 1);
    QT_A(&split.op, CTX_TO_HEADS, G) = 0;
    qt_kernel_table[QT_OP_CTX_TO_TOKENS].run(&split.op, &split.ctx);
    LONGS_EQUAL(QT_E_PLAN, split.status);
    qt_set_quiet(0);
}

// (5) Groups shared by a replica chain (G < C, the kv heads of context parallelism with
// fewer kv heads than ranks): to_heads gives member c the group c*G/C over all tokens (rho =
// C/G members hold each group); to_tokens takes each group from the chain's last member
// only (the others' head-side values never reach the token side).
TEST(CtxExchange, SharedGroupsGoToEveryReplicaAndComeBackFromTheLast)
{
    uint64_t seed = 4242;
    for (int64_t G : {1, 2})
        for (int64_t eb : kEb) {
            const int64_t b = 2, S = 8, w = 3, C = 4, rho = C / G, Sl = S / C;
            const qt_cp_shape sh = {b, S, G, w, C, eb, 0};
            LONGS_EQUAL(QT_OK, qt_cp_shape_check(&sh));
            const int64_t nt = QT_CP_ELEMS(b, S, G, w, C), nh = QT_CP_HEAD_ELEMS(b, S, G, w, C);
            LONGS_EQUAL(b * S * w, nh);
            const int64_t blk = qt_cp_block_bytes(&sh);
            std::vector<bytes> xs, send, ys;
            for (int64_t c = 0; c < C; c++) {
                xs.push_back(cx_random(nt, eb, &seed));
                send.push_back(bytes((size_t)(C * blk), 0xCC));
                qt_cp_pack_tokens(&sh, send[(size_t)c].data(), xs[(size_t)c].data());
            }
            std::vector<bytes> recv = cx_exchange(send, blk);
            long bad = 0;
            for (int64_t c = 0; c < C; c++) {
                ys.push_back(bytes((size_t)(nh * eb), 0xDD));
                qt_cp_unpack_heads(&sh, ys[(size_t)c].data(), recv[(size_t)c].data(), 0);
                for (int64_t s = 0; s < b; s++)
                    for (int64_t t = 0; t < S; t++)
                        for (int64_t i = 0; i < w; i++)
                            bad += !cx_same(ys[(size_t)c], (s * S + t) * w + i,
                                            xs[(size_t)(t / Sl)],
                                            ((s * Sl + t % Sl) * G + c / rho) * w + i, eb);
            }
            LONGS_EQUAL(0, bad);
            // back: the chains' first members hold garbage; the last ones' values return
            for (int64_t c = 0; c < C; c++)
                if (c % rho != rho - 1) ys[(size_t)c] = cx_random(nh, eb, &seed);
            std::vector<bytes> back_send, back;
            for (int64_t c = 0; c < C; c++) {
                back_send.push_back(bytes((size_t)(C * blk), 0xCC));
                qt_cp_pack_heads(&sh, back_send[(size_t)c].data(), ys[(size_t)c].data());
            }
            std::vector<bytes> back_recv = cx_exchange(back_send, blk);
            std::vector<const void *> yp;
            for (int64_t c = 0; c < C; c++) yp.push_back(ys[(size_t)c].data());
            for (int64_t c = 0; c < C; c++) {
                back.push_back(bytes((size_t)(nt * eb), 0xDD));
                qt_cp_unpack_tokens(&sh, back[(size_t)c].data(), back_recv[(size_t)c].data(), 0);
                CHECK(back[(size_t)c] == xs[(size_t)c]);
                bytes ref((size_t)(nt * eb), 0x55);
                qt_cp_ref_to_tokens(&sh, c, ref.data(), yp.data());
                CHECK(ref == xs[(size_t)c]);
            }
        }
}

// (5) Uneven ownership (a6 u > 0, issue 35): the G groups are U = G/u units, member c owns
// the units [c*U/C, (c+1)*U/C) (runs differing by at most one, possibly none) and its head
// side has ceil(U/C)*u slots, the ones past its run zeros. Checked against that formula
// written out here and the firmware's reference, both ways, fp32 and bf16, with runs of
// 0/1/1, 1/1/2, 1/2/2 and 0/1/1/1 units; to_tokens(to_heads(x)) = x; the accumulating
// unpack into zeros gives the written one.
TEST(CtxExchange, UnevenRunsOfUnitsPadAndInvert)
{
    const int64_t cases[][3] = {{4, 2, 3}, {8, 2, 3}, {5, 1, 3}, {3, 1, 4}, {16, 8, 3}};
    uint64_t seed = 0xABCDEF;
    for (const auto &k : cases)
        for (int64_t eb : kEb) {
            const int64_t G = k[0], u = k[1], C = k[2], U = G / u, b = 2, S = 2 * C, w = 3;
            const qt_cp_shape sh = {b, S, G, w, C, eb, u};
            LONGS_EQUAL(QT_OK, qt_cp_shape_check(&sh));
            const int64_t Sl = S / C, P = QT_CP_SLOTS(G, C, u), nt = b * Sl * G * w,
                          nh = QT_CP_HEAD_ELEMS_U(b, S, G, w, C, u),
                          blk = qt_cp_block_bytes(&sh);
            LONGS_EQUAL((U + C - 1) / C * u, P);
            LONGS_EQUAL(b * S * P * w, nh);
            LONGS_EQUAL(b * Sl * P * w * eb, blk);
            CHECK(2 * C * blk <= QT_CP_SCRATCH_FLOATS_U(b, S, G, w, C, u) * 4);
            int padded = 0;
            for (int64_t c = 0; c < C; c++) {
                LONGS_EQUAL(c * U / C * u, qt_cp_first(&sh, c));
                LONGS_EQUAL(((c + 1) * U / C - c * U / C) * u, qt_cp_count(&sh, c));
                padded += qt_cp_count(&sh, c) < P;
            }
            CHECK(padded > 0);
            std::vector<bytes> xs, send, ys;
            for (int64_t c = 0; c < C; c++) {
                xs.push_back(cx_random(nt, eb, &seed));
                send.push_back(bytes((size_t)(2 * C * blk), 0xCC));
                qt_cp_pack_tokens(&sh, send[(size_t)c].data(), xs[(size_t)c].data());
            }
            std::vector<bytes> recv = cx_exchange(send, blk);
            std::vector<const void *> xp, yp;
            for (int64_t c = 0; c < C; c++) {
                ys.push_back(bytes((size_t)(nh * eb), 0xDD));
                qt_cp_unpack_heads(&sh, ys[(size_t)c].data(), recv[(size_t)c].data(), 0);
                xp.push_back(xs[(size_t)c].data());
            }
            const bytes zero((size_t)eb, 0);
            long bad = 0;
            for (int64_t c = 0; c < C; c++) {
                const int64_t k0 = c * U / C, n = ((c + 1) * U / C - k0) * u;
                for (int64_t s = 0; s < b; s++)
                    for (int64_t t = 0; t < S; t++)
                        for (int64_t g = 0; g < P; g++)
                            for (int64_t i = 0; i < w; i++) {
                                const int64_t yi = ((s * S + t) * P + g) * w + i;
                                if (g >= n) {
                                    bad += !cx_same(ys[(size_t)c], yi, zero, 0, eb);
                                    continue;
                                }
                                bad += !cx_same(ys[(size_t)c], yi, xs[(size_t)(t / Sl)],
                                                ((s * Sl + t % Sl) * G + k0 * u + g) * w + i, eb);
                            }
                bytes ref((size_t)(nh * eb), 0x55);
                qt_cp_ref_to_heads(&sh, c, ref.data(), xp.data());
                CHECK(ref == ys[(size_t)c]);
                yp.push_back(ys[(size_t)c].data());
            }
            LONGS_EQUAL(0, bad);
            // back: pack_heads, exchange, unpack_tokens (written, and added into zeros)
            std::vector<bytes> send2;
            for (int64_t c = 0; c < C; c++) {
                send2.push_back(bytes((size_t)(2 * C * blk), 0xCC));
                qt_cp_pack_heads(&sh, send2[(size_t)c].data(), ys[(size_t)c].data());
            }
            std::vector<bytes> recv2 = cx_exchange(send2, blk);
            for (int64_t c = 0; c < C; c++) {
                bytes back((size_t)(nt * eb), 0x77), acc((size_t)(nt * eb), 0);
                qt_cp_unpack_tokens(&sh, back.data(), recv2[(size_t)c].data(), 0);
                CHECK(back == xs[(size_t)c]);
                qt_cp_unpack_tokens(&sh, acc.data(), recv2[(size_t)c].data(), 1);
                CHECK(acc == xs[(size_t)c]);
                bytes ref((size_t)(nt * eb), 0x55);
                qt_cp_ref_to_tokens(&sh, c, ref.data(), yp.data());
                CHECK(ref == xs[(size_t)c]);
            }
        }
    // the shape check: u > 0 needs G a multiple of u (not of C); u = 0 keeps the old rule
    qt_set_quiet(1);
    const qt_cp_shape odd = {1, 3, 5, 2, 3, 4, 2}, even_rule = {1, 3, 5, 2, 3, 4, 0};
    LONGS_EQUAL(QT_E_PLAN, qt_cp_shape_check(&odd));
    LONGS_EQUAL(QT_E_PLAN, qt_cp_shape_check(&even_rule));
    qt_set_quiet(0);
}
