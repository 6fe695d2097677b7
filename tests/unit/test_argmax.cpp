// test_argmax.cpp - the argmax kernels (kernels/argmax.h) and the MTP_ACCEPT op on one rank
// (ops/ops_mtp_accept.c; mtp_eval_target_module, docs/model.md 1.8).
//  (a) qt_argmax_f32 / qt_argmax_b16 against jnp.argmax's rule written out plainly: the first
//      index of the maximum, a NaN the maximum (the first NaN wins), -0 == +0; hand rows
//      (ties, NaNs first / middle / last, infinities, signed zeros, one element) and random
//      rows with many ties (values from a set of 5);
//  (b) the vocabulary-shard merge: every split of a row into P = 1..4 shards at every
//      boundary, each shard's (max, first index) merged in group order with
//      qt_argmax_beats and in reverse order, equals the whole row's argmax (exact: no
//      arithmetic, so no tolerance anywhere in this file);
//  (c) the op on a hand-made plan (two sequences of two token blocks of 3 rows, three parts,
//      depth k = 2, so t + k crosses into the next block, with targets -1 at the sequence
//      end and at a packed document end): its counts equal a direct count over the
//      sequences, fp32 and bf16 logits; in a training microbatch (ctx.eval 0) it writes
//      nothing.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <vector>
#include "CppUTest/TestHarness.h"
#include "qt_test_util.h"

extern "C" {
#include "qt_ops.h"
#include "kernels/argmax.h"
#include "kernels/bf16.h"
#include "ops/qt_op_fns.h"
}

namespace {

// jnp.argmax's rule, written out: a NaN anywhere wins at its first index; else the first
// index whose value no other exceeds.
int64_t ref_argmax(const std::vector<float> &x)
{
    for (size_t i = 0; i < x.size(); i++)
        if (x[i] != x[i]) return (int64_t)i;
    size_t best = 0;
    for (size_t i = 1; i < x.size(); i++)
        if (x[i] > x[best]) best = i;
    return (int64_t)best;
}

int64_t argmax_both(const std::vector<float> &x)
{
    const int64_t a = qt_argmax_f32(x.data(), (int64_t)x.size());
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); i++) h[i] = (uint16_t)(qt_test_bits(x[i]) >> 16);
    const int64_t b = qt_argmax_b16(h.data(), (int64_t)h.size());
    // the values below are bf16-exact, so both forms see the same row
    LONGS_EQUAL(a, b);
    return a;
}

// The merged argmax of x split at the sorted cut points (P = cuts + 1 shards), in group
// order or in reverse.
int64_t merged(const std::vector<float> &x, const std::vector<size_t> &cut, bool reverse)
{
    std::vector<size_t> lo(1, 0);
    for (size_t c : cut) lo.push_back(c);
    std::vector<size_t> hi(lo.begin() + 1, lo.end());
    hi.push_back(x.size());
    const size_t P = lo.size();
    float v = 0.0f;
    int64_t idx = -1;
    for (size_t q = 0; q < P; q++) {
        const size_t s = reverse ? P - 1 - q : q;
        const int64_t i = (int64_t)lo[s] + qt_argmax_f32(x.data() + lo[s], (int64_t)(hi[s] - lo[s]));
        if (idx < 0 || qt_argmax_beats(x[(size_t)i], i, v, idx)) {
            v = x[(size_t)i];
            idx = i;
        }
    }
    return idx;
}

void check_row(const std::vector<float> &x)
{
    const int64_t want = ref_argmax(x);
    LONGS_EQUAL(want, argmax_both(x));
    const size_t n = x.size();
    // every split into 2 and 3 shards, and some into 4
    for (size_t a = 1; a < n; a++) {
        LONGS_EQUAL(want, merged(x, {a}, false));
        LONGS_EQUAL(want, merged(x, {a}, true));
        for (size_t b = a + 1; b < n; b++) {
            LONGS_EQUAL(want, merged(x, {a, b}, false));
            LONGS_EQUAL(want, merged(x, {a, b}, true));
            if (b + 1 < n) LONGS_EQUAL(want, merged(x, {a, b, b + 1}, false));
        }
    }
}

} // namespace

TEST_GROUP(Argmax){};

TEST(Argmax, HandRows)
{
    const float nan = NAN, inf = INFINITY;
    check_row({1.0f});
    check_row({nan});
    check_row({2.0f, 2.0f, 1.0f});                 // a tie: the first
    check_row({1.0f, 3.0f, 3.0f, 3.0f});
    check_row({-0.0f, 0.0f});                      // equal: the first (-0)
    check_row({0.0f, -0.0f, -1.0f});
    check_row({1.0f, nan, 5.0f, nan});             // the first NaN, though 5 is larger
    check_row({nan, 7.0f, nan});
    check_row({1.0f, 2.0f, inf, nan});             // NaN beats +inf
    check_row({-inf, -inf, -inf});
    check_row({-inf, -1.0f, -inf, -1.0f});
    check_row({3.0f, 1.0f, 2.0f, 3.0f, inf, inf, -0.0f});
    LONGS_EQUAL(3, ref_argmax({1.0f, 2.0f, 2.0f, nan, nan}));
    // the beats rule itself
    CHECK(qt_argmax_beats(nan, 9, 1e30f, 0));
    CHECK(!qt_argmax_beats(1e30f, 0, nan, 9));
    CHECK(qt_argmax_beats(nan, 2, nan, 3));
    CHECK(!qt_argmax_beats(nan, 3, nan, 2));
    CHECK(qt_argmax_beats(1.0f, 5, 1.0f, 6));
    CHECK(!qt_argmax_beats(1.0f, 6, 1.0f, 5));
    CHECK(!qt_argmax_beats(-0.0f, 6, 0.0f, 5));
    CHECK(qt_argmax_beats(0.0f, 4, -0.0f, 5));
}

TEST(Argmax, RandomRowsWithTies)
{
    uint64_t s = 0x5eed;
    const float vals[5] = {-1.0f, 0.0f, 0.5f, 2.0f, NAN};
    for (int r = 0; r < 300; r++) {
        const size_t n = 1 + (size_t)((qt_test_rand(&s) + 1.0) * 5.5);
        const int with_nan = r % 4 == 0;
        std::vector<float> x(n);
        for (size_t i = 0; i < n; i++)
            x[i] = vals[(size_t)((qt_test_rand(&s) + 1.0) * 0.5 * (4 + with_nan))];
        check_row(x);
    }
}

namespace {

// A hand-made one-rank plan for the op (tensors from byte 0 of a static arena).
const int64_t NB = 2, BLK = 2, S = 3, N = 3, V = 5, K = 2; // 2 sequences x 2 blocks of 3 rows
unsigned char g_arena[1 << 16] __attribute__((aligned(64)));

struct AccPlan {
    qt_tensor t[4];
    qt_plan plan;
    qt_ctx ctx;
    qt_op op;
    int64_t off = 0;
    int32_t add(int64_t n, unsigned dtype)
    {
        const int32_t id = plan.n_tensors++;
        t[id].name = "t";
        t[id].dtype = (uint8_t)dtype;
        t[id].ndim = 1;
        t[id].shape[0] = t[id].global_shape[0] = t[id].numel = n;
        t[id].offset = off;
        off += (n * 4 + 63) / 64 * 64;
        return id;
    }
    explicit AccPlan(unsigned dtype)
    {
        memset(t, 0, sizeof t);
        memset(&plan, 0, sizeof plan);
        memset(g_arena, 0xff, sizeof g_arena);
        plan.run_name = "argmax-hand";
        plan.dtype = (uint8_t)dtype;
        plan.arena = g_arena;
        plan.arena_bytes = sizeof g_arena;
        plan.tensors = t;
        plan.n_ranks = 1;
        memset(&ctx, 0, sizeof ctx);
        ctx.plan = &plan;
        ctx.arena = g_arena;
        ctx.n_ranks = 1;
        const int64_t R = NB * BLK * S;
        memset(&op, 0, sizeof op);
        op.kind = QT_OP_MTP_ACCEPT;
        for (int i = 0; i < QT_OP_MAX_T; i++) op.t[i] = QT_NONE;
        QT_T(&op, MTP_ACCEPT, acc) = add(2, QT_I32);
        QT_T(&op, MTP_ACCEPT, logits) = add(R * N * V, dtype);
        QT_T(&op, MTP_ACCEPT, targets) = add(R * N, QT_I32);
        QT_T(&op, MTP_ACCEPT, scratch) = add(QT_MTP_ACCEPT_SCRATCH(R, 1, 1, NB, K), QT_I32);
        QT_A(&op, MTP_ACCEPT, b) = NB * BLK;
        QT_A(&op, MTP_ACCEPT, S) = S;
        QT_A(&op, MTP_ACCEPT, V) = V;
        QT_A(&op, MTP_ACCEPT, n) = N;
        QT_A(&op, MTP_ACCEPT, k) = K;
        QT_A(&op, MTP_ACCEPT, St) = BLK * S;
    }
};

} // namespace

TEST(Argmax, MtpAcceptOpOneRank)
{
    for (unsigned dtype : {(unsigned)QT_F32, (unsigned)QT_BF16}) {
        AccPlan h(dtype);
        const int64_t St = BLK * S;
        uint64_t s = 99 + dtype;
        // logits: small integers (bf16-exact, many ties); rows [block][part][row]
        std::vector<float> lg((size_t)(NB * BLK * N * S * V));
        for (float &v : lg) v = (float)(int)(qt_test_rand(&s) * 3.0);
        int32_t *tg = qt_i32(&h.ctx, QT_T(&h.op, MTP_ACCEPT, targets));
        const int32_t lid = QT_T(&h.op, MTP_ACCEPT, logits);
        for (size_t i = 0; i < lg.size(); i++) {
            if (dtype == QT_BF16) qt_b16(&h.ctx, lid)[i] = (uint16_t)(qt_test_bits(lg[i]) >> 16);
            else qt_f32(&h.ctx, lid)[i] = lg[i];
        }
        // targets: depth j has one at local position u when u + j + 1 <= St - 1 + 1 (the
        // window's last token), except sequence 1's position 1 (a document end)
        for (int64_t q = 0; q < NB; q++)
            for (int64_t u = 0; u < St; u++)
                for (int64_t j = 0; j < N; j++) {
                    const int64_t blk = q * BLK + u / S;
                    int32_t v = u + j < St ? 1 : -1;
                    if (q == 1 && u == 1 && j > 0) v = -1;
                    tg[(blk * N + j) * S + u % S] = v;
                }
        int32_t *acc = qt_i32(&h.ctx, QT_T(&h.op, MTP_ACCEPT, acc));
        acc[0] = acc[1] = 12345;
        qt_op_mtp_accept(&h.op, &h.ctx);   // a training microbatch: nothing
        LONGS_EQUAL(12345, acc[0]);
        LONGS_EQUAL(12345, acc[1]);
        h.ctx.eval = 1;
        qt_op_mtp_accept(&h.op, &h.ctx);
        // the direct count over the sequences
        auto row = [&](int64_t q, int64_t u, int64_t j) {
            const int64_t blk = q * BLK + u / S;
            const float *x = lg.data() + ((blk * N + j) * S + u % S) * V;
            return ref_argmax(std::vector<float>(x, x + V));
        };
        int64_t hit = 0, valid = 0;
        for (int64_t q = 0; q < NB; q++)
            for (int64_t u = 0; u < St; u++) {
                const int64_t blk = q * BLK + u / S;
                if (tg[(blk * N + K) * S + u % S] < 0) continue;
                valid++;
                hit += row(q, u, K) == row(q, u + K, 0);
            }
        LONGS_EQUAL(2 * (St - K) - 1, valid);
        LONGS_EQUAL(valid, acc[1]);
        LONGS_EQUAL(hit, acc[0]);
        CHECK(hit > 0 && hit < valid);   // the case tells matches from misses
    }
}
