// test_xent_blocked.cpp - the cross entropy with canonical vocabulary blocks (kernels/xent.h,
// qt_ops.def XENT a3 nb > 0; docs/determinism.md):
//  (a) blocked vs plain qt_xent within 1e-6 relative (the same math, another summation order);
//  (b) one block is qt_xent bit for bit;
//  (c) the per-block form bit for bit against a scalar reference written here (max, chains
//      per block, pairwise tree, lse, normalise, one-hot, per-sequence sums);
//  (d) the vocab-parallel combine by hand: P shards run stats / merge / sums / finish on
//      gathered buffers laid out as the all-gathers leave them (ops_basic.c), and every
//      shard's loss_seq and its dlogits columns equal one rank's with nb x P blocks, bit for
//      bit, for P = 2 and 4;
//  (d') the same for the z-loss finish (qt_xent_blk_finish_z, z = 0.05): loss_seq, z_seq
//      and dlogits of every shard equal one rank's qt_xent_blocked_z with nb x P blocks;
//      one block is qt_xent_z bit for bit, nb > 1 within 1e-6 relative of it;
//  (c') 3 x 2^j blocks (canonical_factor 3) against the reference's binary counter, and
//      3 shards of 1, 2, 4 blocks against one rank's 3, 6, 12, bit for bit;
//  (e) the canonical data gradient's one-block form (the vocab-parallel lm_head's, no
//      scratch) equals the plain kernel into zeros, past the fused path's contraction limit.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <vector>
#include "CppUTest/TestHarness.h"
#include "qt_test_util.h"

extern "C" {
#include "math/qt_math.h"
#include "kernels/matmul.h"
#include "kernels/matmul_canon.h"
#include "kernels/xent.h"
}

namespace {

typedef std::vector<float> vf;

struct Case {
    int64_t b, S, V;
    vf logits;
    std::vector<int32_t> tg;
};

Case make_case(int64_t b, int64_t S, int64_t V, uint64_t seed)
{
    Case c{b, S, V, vf((size_t)(b * S * V)), std::vector<int32_t>((size_t)(b * S))};
    uint64_t s = seed;
    for (auto &x : c.logits) x = (float)(4.0 * qt_test_rand(&s));
    for (int64_t t = 0; t < b * S; t++) c.tg[(size_t)t] = (int32_t)((t * 37 + 11) % V);
    c.tg[1] = -1; // a masked target (a packed document's last token): no loss, no gradient
    return c;
}

bool same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

// The blocks' tree as a binary counter (qt_tree.h's shape, written out here): partial i is
// pushed at level 0 and carried up while the level is taken (the earlier subtotal on the
// left); the levels left are added lowest first. For a power of two it is the pairwise tree
// ((p0+p1)+(p2+p3))+...; for 6 it is ((p0+p1)+(p2+p3))+(p4+p5), for 3 (p0+p1)+p2.
float counter_sum(const float *p, int64_t n)
{
    float lv[64];
    bool taken[64] = {};
    for (int64_t i = 0; i < n; i++) {
        float carry = p[i];
        int k = 0;
        for (; taken[k]; k++) {
            carry = lv[k] + carry;
            taken[k] = false;
        }
        lv[k] = carry;
        taken[k] = true;
    }
    float total = 0;
    bool any = false;
    for (int k = 0; k < 64; k++)
        if (taken[k]) {
            total = any ? lv[k] + total : lv[k];
            any = true;
        }
    return total;
}

// The scalar reference of the blocked form (xent.h), written out independently.
void ref_blocked(float *loss, float *dl, const Case &c, int64_t nb)
{
    const int64_t V = c.V, B = V / nb;
    std::vector<float> part((size_t)nb);
    for (int64_t s = 0; s < c.b; s++) {
        float acc = 0;
        for (int64_t tt = 0; tt < c.S; tt++) {
            const int64_t t = s * c.S + tt;
            const float *l = &c.logits[(size_t)(t * V)];
            float *g = dl + t * V;
            float m = l[0];
            for (int64_t v = 1; v < V; v++) m = l[v] > m ? l[v] : m;
            for (int64_t i = 0; i < nb; i++) {
                float p = 0;
                for (int64_t v = i * B; v < (i + 1) * B; v++) {
                    g[v] = qt_expf(l[v] - m);
                    p = p + g[v];
                }
                part[(size_t)i] = p;
            }
            const float sum = counter_sum(part.data(), nb), lse = m + qt_logf(sum), inv = 1.0f / sum;
            for (int64_t v = 0; v < V; v++) g[v] = g[v] * inv;
            const int32_t y = c.tg[(size_t)t];
            if (y >= 0 && y < V) {
                g[y] = g[y] - 1.0f;
                acc = acc + (lse - l[y]);
            } else {
                for (int64_t v = 0; v < V; v++) g[v] = 0.0f;
            }
        }
        loss[s] = acc;
    }
}

void run_blocked(float *loss, float *dl, const Case &c, int64_t nb)
{
    vf scr((size_t)QT_XENT_BLK_SCRATCH(c.b * c.S, nb, 1));
    qt_xent_blocked(loss, dl, c.logits.data(), c.tg.data(), c.b, c.S, c.V, nb, scr.data());
}

// P shards of V/P columns each, nb blocks a shard, combined as the op does after its
// all-gathers; checks every shard against one rank's nb x P blocks.
void sharded(const Case &c, int64_t P, int64_t nb)
{
    const int64_t R = c.b * c.S, V = c.V / P;
    vf one_loss((size_t)c.b), one_dl(c.logits.size());
    run_blocked(one_loss.data(), one_dl.data(), c, nb * P);
    std::vector<vf> shard((size_t)P, vf((size_t)(R * V))), dl((size_t)P, vf((size_t)(R * V)));
    for (int64_t j = 0; j < P; j++)
        for (int64_t r = 0; r < R; r++)
            memcpy(&shard[(size_t)j][(size_t)(r * V)], &c.logits[(size_t)(r * c.V + j * V)],
                   (size_t)V * sizeof(float));
    // each rank's gathered buffers: the stats, then the sums (identical on every rank)
    std::vector<vf> stat((size_t)P, vf((size_t)(P * 2 * R))), sums((size_t)P, vf((size_t)(P * R * nb)));
    vf all((size_t)(P * 2 * R));
    for (int64_t j = 0; j < P; j++)
        qt_xent_blk_stats(&all[(size_t)(j * 2 * R)], shard[(size_t)j].data(), c.tg.data(), R, V, j * V);
    for (int64_t j = 0; j < P; j++) {
        stat[(size_t)j] = all;
        qt_xent_blk_merge(stat[(size_t)j].data(), c.tg.data(), R, V, P);
    }
    vf allsums((size_t)(P * R * nb));
    for (int64_t j = 0; j < P; j++)
        qt_xent_blk_sums(&allsums[(size_t)(j * R * nb)], dl[(size_t)j].data(), shard[(size_t)j].data(),
                         stat[(size_t)j].data(), R, V, nb);
    for (int64_t j = 0; j < P; j++) {
        vf loss((size_t)c.b), tmp((size_t)(nb * P));
        qt_xent_blk_finish(loss.data(), dl[(size_t)j].data(), stat[(size_t)j].data(), allsums.data(),
                           c.tg.data(), c.b, c.S, V, nb, P, j * V, tmp.data());
        CHECK_TEXT(same_bits(loss.data(), one_loss.data(), (size_t)c.b), "shard loss_seq bits");
        for (int64_t r = 0; r < R; r++)
            CHECK_TEXT(same_bits(&dl[(size_t)j][(size_t)(r * V)], &one_dl[(size_t)(r * c.V + j * V)],
                                 (size_t)V),
                       "shard dlogits bits");
    }
}

void run_blocked_z(float *loss, float *zs, float *dl, const Case &c, int64_t nb, float z)
{
    vf scr((size_t)QT_XENT_BLK_SCRATCH(c.b * c.S, nb, 1));
    qt_xent_blocked_z(loss, zs, dl, c.logits.data(), c.tg.data(), c.b, c.S, c.V, nb, scr.data(),
                      z);
}

// sharded() for the z-loss finish: the same gathered stats and sums, then
// qt_xent_blk_finish_z on every shard against one rank's nb x P blocks.
void sharded_z(const Case &c, int64_t P, int64_t nb, float z)
{
    const int64_t R = c.b * c.S, V = c.V / P;
    vf one_loss((size_t)c.b), one_z((size_t)c.b), one_dl(c.logits.size());
    run_blocked_z(one_loss.data(), one_z.data(), one_dl.data(), c, nb * P, z);
    std::vector<vf> shard((size_t)P, vf((size_t)(R * V))), dl((size_t)P, vf((size_t)(R * V)));
    for (int64_t j = 0; j < P; j++)
        for (int64_t r = 0; r < R; r++)
            memcpy(&shard[(size_t)j][(size_t)(r * V)], &c.logits[(size_t)(r * c.V + j * V)],
                   (size_t)V * sizeof(float));
    vf all((size_t)(P * 2 * R)), stat, allsums((size_t)(P * R * nb));
    for (int64_t j = 0; j < P; j++)
        qt_xent_blk_stats(&all[(size_t)(j * 2 * R)], shard[(size_t)j].data(), c.tg.data(), R, V, j * V);
    stat = all;
    qt_xent_blk_merge(stat.data(), c.tg.data(), R, V, P);
    for (int64_t j = 0; j < P; j++)
        qt_xent_blk_sums(&allsums[(size_t)(j * R * nb)], dl[(size_t)j].data(), shard[(size_t)j].data(),
                         stat.data(), R, V, nb);
    for (int64_t j = 0; j < P; j++) {
        vf loss((size_t)c.b), zs((size_t)c.b), tmp((size_t)(nb * P));
        qt_xent_blk_finish_z(loss.data(), zs.data(), dl[(size_t)j].data(), stat.data(),
                             allsums.data(), c.tg.data(), c.b, c.S, V, nb, P, j * V, tmp.data(), z);
        CHECK_TEXT(same_bits(loss.data(), one_loss.data(), (size_t)c.b), "shard z loss_seq bits");
        CHECK_TEXT(same_bits(zs.data(), one_z.data(), (size_t)c.b), "shard z_seq bits");
        for (int64_t r = 0; r < R; r++)
            CHECK_TEXT(same_bits(&dl[(size_t)j][(size_t)(r * V)], &one_dl[(size_t)(r * c.V + j * V)],
                                 (size_t)V),
                       "shard z dlogits bits");
    }
}

} // namespace

TEST_GROUP(XentBlocked) {};

TEST(XentBlocked, ZLossBlockedNearPlainAndSharded)
{
    const Case c = make_case(2, 4, 256, 17);
    const float z = 0.05f;
    const size_t n = c.logits.size();
    vf l0(2), z0(2), d0(n), l1(2), z1(2), d1(n);
    qt_xent_z(l0.data(), z0.data(), d0.data(), c.logits.data(), c.tg.data(), c.b, c.S, c.V, z);
    run_blocked_z(l1.data(), z1.data(), d1.data(), c, 1, z);
    CHECK(same_bits(l0.data(), l1.data(), 2) && same_bits(z0.data(), z1.data(), 2));
    CHECK(same_bits(d0.data(), d1.data(), n));
    for (int64_t nb : {2, 4, 16}) {
        run_blocked_z(l1.data(), z1.data(), d1.data(), c, nb, z);
        double el = 0, ez = 0, ed = 0, ml = 0, mz = 0, md = 0;
        for (size_t i = 0; i < 2; i++) {
            el = fmax(el, fabs((double)l1[i] - l0[i]));
            ml = fmax(ml, fabs((double)l0[i]));
            ez = fmax(ez, fabs((double)z1[i] - z0[i]));
            mz = fmax(mz, fabs((double)z0[i]));
        }
        for (size_t i = 0; i < n; i++) {
            ed = fmax(ed, fabs((double)d1[i] - d0[i]));
            md = fmax(md, fabs((double)d0[i]));
        }
        CHECK(el <= 1e-6 * ml && ez <= 1e-6 * mz && ed <= 1e-6 * md);
    }
    // z = 0 through the plain finish is untouched: the z finish is a separate function
    vf l2(2), d2(n);
    run_blocked(l2.data(), d2.data(), c, 4);
    run_blocked_z(l1.data(), z1.data(), d1.data(), c, 4, z);
    CHECK(!same_bits(l2.data(), l1.data(), 2));
    sharded_z(c, 2, 1, z);
    sharded_z(c, 2, 2, z);
    sharded_z(c, 4, 4, z);
}

TEST(XentBlocked, NearPlain)
{
    const Case c = make_case(2, 3, 256, 5);
    vf l0(2), d0(c.logits.size()), l1(2), d1(c.logits.size());
    qt_xent(l0.data(), d0.data(), c.logits.data(), c.tg.data(), c.b, c.S, c.V);
    for (int64_t nb : {2, 4, 16}) {
        run_blocked(l1.data(), d1.data(), c, nb);
        double el = 0, ed = 0, ml = 0, md = 0;
        for (size_t i = 0; i < l0.size(); i++) {
            el = fmax(el, fabs((double)l1[i] - l0[i]));
            ml = fmax(ml, fabs((double)l0[i]));
        }
        for (size_t i = 0; i < d0.size(); i++) {
            ed = fmax(ed, fabs((double)d1[i] - d0[i]));
            md = fmax(md, fabs((double)d0[i]));
        }
        CHECK(el <= 1e-6 * ml);
        CHECK(ed <= 1e-6 * md);
    }
    // not vacuous: some block count changes some bit
    run_blocked(l1.data(), d1.data(), c, 16);
    CHECK(!same_bits(l0.data(), l1.data(), l0.size()) || !same_bits(d0.data(), d1.data(), d0.size()));
}

TEST(XentBlocked, OneBlockIsPlain)
{
    const Case c = make_case(3, 5, 96, 7);
    vf l0(3), d0(c.logits.size()), l1(3), d1(c.logits.size());
    qt_xent(l0.data(), d0.data(), c.logits.data(), c.tg.data(), c.b, c.S, c.V);
    run_blocked(l1.data(), d1.data(), c, 1);
    CHECK(same_bits(l0.data(), l1.data(), l0.size()));
    CHECK(same_bits(d0.data(), d1.data(), d0.size()));
}

TEST(XentBlocked, ScalarReferenceBits)
{
    const Case c = make_case(2, 4, 128, 9);
    for (int64_t nb : {1, 2, 4, 8, 32}) {
        vf l0(2), d0(c.logits.size()), l1(2), d1(c.logits.size());
        ref_blocked(l0.data(), d0.data(), c, nb);
        run_blocked(l1.data(), d1.data(), c, nb);
        CHECK(same_bits(l0.data(), l1.data(), l0.size()));
        CHECK(same_bits(d0.data(), d1.data(), d0.size()));
    }
}

// canonical_factor 3 (issue 35): 3 x 2^j vocabulary blocks are the counter over the blocks
// on one rank (the reference above), and tensor 3's shards of 1, 2 or 4 blocks combine to
// one rank's 3, 6 or 12, bit for bit.
TEST(XentBlocked, FactorThreeIsTheCounter)
{
    const Case c = make_case(2, 4, 96, 19);
    for (int64_t nb : {3, 6, 12, 24}) {
        vf l0(2), d0(c.logits.size()), l1(2), d1(c.logits.size());
        ref_blocked(l0.data(), d0.data(), c, nb);
        run_blocked(l1.data(), d1.data(), c, nb);
        CHECK(same_bits(l0.data(), l1.data(), l0.size()));
        CHECK(same_bits(d0.data(), d1.data(), d0.size()));
    }
    sharded(c, 3, 1);
    sharded(c, 3, 2);
    sharded(c, 3, 4);
}

TEST(XentBlocked, ShardedCombineBits)
{
    const Case c = make_case(2, 4, 256, 13);
    sharded(c, 2, 1);
    sharded(c, 2, 2);
    sharded(c, 4, 1);
    sharded(c, 4, 4);
}

TEST(XentBlocked, CanonBwdOneBlockIsPlain)
{
    const int64_t M = 3, N = 2304, K = 8; // N past the fused path's limit
    uint64_t s = 3;
    vf dy((size_t)(M * N)), w((size_t)(N * K)), a((size_t)(M * K)), b((size_t)(M * K), 0.0f);
    for (auto &x : dy) x = (float)qt_test_rand(&s);
    for (auto &x : w) x = (float)qt_test_rand(&s);
    qt_matmul_canon_bwd_data(a.data(), dy.data(), w.data(), M, N, K, 1, 1, a.data());
    qt_matmul_bwd_data(b.data(), dy.data(), w.data(), M, N, K);
    CHECK(same_bits(a.data(), b.data(), a.size()));
    vf r((size_t)QT_CANON_BWD_SCRATCH(M, N, K, 1));
    qt_matmul_canon_bwd_data_ref(r.data(), dy.data(), w.data(), M, N, K, 1, 1, r.data());
    CHECK(same_bits(a.data(), r.data(), a.size()));
}

// (f) the float build's qt_xent (four rows side by side, the exponentials eight at a time)
// against its scalar reference qt_xent_ref (one row at a time, the exponentials in the row's
// loop), bit for bit: loss_seq and dlogits. Row counts 1-9 (every tail of the groups of
// four), V with and without lane tails, logits in [-4, 4] and spread x40 (the sums' chains
// then differ in many low bits between orders), a masked and an out-of-range target, a row
// holding +0 and -0 maxima, NaNs with payloads (those rows are redone by the scalar loop:
// the lanes' exponential keeps a payload QT_EXP drops) and an infinity (inf - inf).
TEST(XentBlocked, FourRowsEqualTheScalarReference)
{
    const int64_t Vs[] = {4096, 4099, 37, 5, 1};
    int cases = 0;
    for (int64_t V : Vs) {
        for (int64_t S = 1; S <= 9; S++) {
            for (int spread = 0; spread < 2; spread++) {
                Case c = make_case(2, S, V, (uint64_t)(V * 131 + S * 7 + spread));
                if (spread)
                    for (auto &x : c.logits) x *= 40.0f;
                if (S >= 3) c.tg[2] = (int32_t)V;  // out of range: no loss, no gradient
                if (S >= 6 && V >= 5) {
                    float *r = c.logits.data() + 4 * V;
                    r[0] = -0.0f, r[1] = 0.0f;                 // equal maxima, signs differ
                    for (int64_t v = 2; v < V; v++) r[v] = -1.0f - (float)v;
                    c.logits[(size_t)(5 * V + 1)] = qt_test_float(0xffa00001u);  // payloads:
                    c.logits[(size_t)(5 * V + 3)] = NAN;  // the lanes' exp keeps them
                    c.logits[(size_t)(S * V + 3)] = INFINITY;  // sequence 1, row 0
                    if (S >= 8) c.logits[(size_t)(7 * V)] = qt_test_float(0x7fc12345u);
                }
                const size_t n = c.logits.size();
                vf g1(n, 7.0f), g2(n, 9.0f), l1(2, 5.0f), l2(2, 6.0f);
                qt_xent(l1.data(), g1.data(), c.logits.data(), c.tg.data(), 2, S, V);
                qt_xent_ref(l2.data(), g2.data(), c.logits.data(), c.tg.data(), 2, S, V);
                CHECK(same_bits(l1.data(), l2.data(), 2));
                CHECK(same_bits(g1.data(), g2.data(), n));
                cases++;
            }
        }
    }
    LONGS_EQUAL(90, cases);
}
