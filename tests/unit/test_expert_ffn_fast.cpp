// test_expert_ffn_fast.cpp - the optimised routed expert FFN (kernels/expert_ffn.c: fused
// scatter + SwiGLU, gu rows read in place, the backward's contributions parked in list order,
// streaming stores, the 16 x 16 transposing weight pack of matmul.c) against the row-at-a-time
// references (kernels/expert_ffn_ref.c) bit for bit, for the plan's three passes, with and
// without canonical blocks, on awkward shapes: an expert with no rows, one with a single row,
// rows routed outside [0,E) (left untouched), row counts off the 12-row tiles, widths off the
// 16-float vectors (unaligned rows), scratch for the whole pass, for a few rows per chunk,
// and too small for one row (NaN poisoning, as documented in expert_ffn.h). Every leaf of a
// WGRAD op in one pass (qt_expert_ffn_wgrad_saved_leaves, expert-major) against the leaves
// one at a time on the row-at-a-time reference and qt_tree_push.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include "CppUTest/TestHarness.h"
#include "qt_test_util.h"
#include "kernels/expert_ffn.h"
extern "C" {
#include "runtime/qt_tree.h"
}

namespace {

typedef std::vector<float> vf;

vf rnd(size_t n, uint64_t seed, double scale)
{
    vf v(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)(scale * qt_test_rand(&seed));
    return v;
}

bool same_bits(const vf &a, const vf &b)
{
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool all_nan(const float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!std::isnan(p[i])) return false;
    return true;
}

struct Ffn {
    int64_t T, k, E, d, f;
    std::vector<int32_t> idx;
    vf x, wgu, wd, dy;
};

// Routing with the awkward cases: expert E-1 never chosen, expert 0 exactly once (token 1,
// slot 0), every 7th row routed to -1 or E (a dropped row: the kernels skip it).
Ffn make(int64_t T, int64_t k, int64_t E, int64_t d, int64_t f, uint64_t seed)
{
    Ffn c{T, k, E, d, f, std::vector<int32_t>(T * k), rnd(T * d, seed, 1.0),
          rnd(E * 2 * f * d, seed + 1, 0.3), rnd(E * d * f, seed + 2, 0.3),
          rnd(T * k * d, seed + 3, 1.0)};
    uint64_t s = seed + 4;
    for (int64_t r = 0; r < T * k; r++) {
        const double u = 0.5 * (qt_test_rand(&s) + 1.0);
        c.idx[r] = 1 + (int32_t)(u * (double)(E - 2)) % (int32_t)(E - 2);
        if (r % 7 == 5) c.idx[r] = r % 2 ? -1 : (int32_t)E;
    }
    if (T > 1) c.idx[1 * k + 0] = 0;
    return c;
}

// The plan's scratch (configgen: expert_scratch), enough for the expert-major backward.
int64_t plan_scratch(const Ffn &c, int64_t nb)
{
    const int64_t R = c.T * c.k, d = c.d, f = c.f;
    return R * (d + 3 * f + nb * d + (nb ? 2 * f / nb : 0)) + R + c.E + 1 + R * d +
           (nb ? d * (2 * f / nb) : 0);
}

// Fast and reference passes on the same inputs; scratch_elems sets the chunking of the fast
// kernels (the reference always goes row by row, the wgrad in the same chunks).
void check_case(const Ffn &c, int64_t nb, int64_t fwd_scr, int64_t bwd_scr, int64_t wg_scr)
{
    const int64_t R = c.T * c.k, d = c.d, f = c.f, E = c.E;
    vf big(plan_scratch(c, nb) + 64), sc(std::max(std::max(fwd_scr, bwd_scr), wg_scr) + 1);
    const float sentinel = 12345.0f; // rows of dropped (t, slot) pairs must keep it
    vf y(R * d, sentinel), gu(R * 2 * f, sentinel), yr = y, gr = gu;
    qt_expert_ffn_fwd_canon(y.data(), gu.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                            c.wd.data(), sc.data(), c.T, c.k, E, d, f, fwd_scr, nb);
    qt_expert_ffn_fwd_canon_ref(yr.data(), gr.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                                c.wd.data(), big.data(), c.T, c.k, E, d, f, big.size(), nb);
    CHECK(same_bits(y, yr));
    CHECK(same_bits(gu, gr));
    if (R > 5 && (c.idx[5] < 0 || c.idx[5] >= E)) CHECK(y[5 * d] == sentinel); // dropped row

    vf dx = rnd(c.T * d, 77, 1.0), dxr = dx, dgu(R * 2 * f, sentinel), dgr = dgu;
    qt_expert_ffn_bwd_save_canon(dx.data(), dgu.data(), c.dy.data(), c.idx.data(), gu.data(),
                                 c.wgu.data(), c.wd.data(), sc.data(), c.T, c.k, E, d, f,
                                 bwd_scr, nb);
    qt_expert_ffn_bwd_save_canon_ref(dxr.data(), dgr.data(), c.dy.data(), c.idx.data(),
                                     gr.data(), c.wgu.data(), c.wd.data(), big.data(), c.T,
                                     c.k, E, d, f, big.size(), nb);
    CHECK(same_bits(dx, dxr));
    CHECK(same_bits(dgu, dgr));
    if (R > 5 && (c.idx[5] < 0 || c.idx[5] >= E)) CHECK(dgu[5 * 2 * f] == sentinel);

    vf dwg(E * 2 * f * d, sentinel), dwd(E * d * f, sentinel), dwgr = dwg, dwdr = dwd;
    qt_expert_ffn_wgrad_saved_write(dwg.data(), dwd.data(), c.dy.data(), c.x.data(),
                                    c.idx.data(), gu.data(), dgu.data(), sc.data(), c.T, c.k,
                                    E, d, f, wg_scr);
    qt_expert_ffn_wgrad_saved_write_ref(dwgr.data(), dwdr.data(), c.dy.data(), c.x.data(),
                                        c.idx.data(), gr.data(), dgr.data(), big.data(), c.T,
                                        c.k, E, d, f, wg_scr);
    CHECK(same_bits(dwg, dwgr));
    CHECK(same_bits(dwd, dwdr));
    // experts without rows: +0 leaves (written, not left as the sentinel)
    for (int64_t e = 0; e < E; e++) {
        if (std::find(c.idx.begin(), c.idx.end(), (int32_t)e) != c.idx.end()) continue;
        for (int64_t i = 0; i < 2 * f * d; i++) CHECK(dwg[e * 2 * f * d + i] == 0.0f);
        for (int64_t i = 0; i < d * f; i++) CHECK(dwd[e * d * f + i] == 0.0f);
    }
}

} // namespace

TEST_GROUP(ExpertFfnFast) {};

// Widths off the vectors (d 33, f 12: unaligned rows, streaming stores skipped), 12-row tiles
// split unevenly, canonical blocks 0 / 2 / 4; whole-pass scratch and 5-row chunks.
TEST(ExpertFfnFast, OddShapesBitIdenticalToReference)
{
    for (int64_t nb : {0, 2, 4}) {
        Ffn c = make(29, 3, 6, 33, 12, 300 + (uint64_t)nb);
        const int64_t full = plan_scratch(c, nb), d = c.d, f = c.f;
        check_case(c, nb, full, full, full);
        // 5 rows a chunk in every pass (the wgrad then writes, then adds, per expert)
        const int64_t fwd5 = 5 * (d + 2 * f + (nb ? nb * d + f / nb : 0)) + (nb ? d * (f / nb) : 0);
        const int64_t bwd5 = 5 * (d + 3 * f + (nb ? nb * d + 2 * f / nb : 0)) +
                             (nb ? d * (2 * f / nb) : 0);
        check_case(c, nb, fwd5, bwd5, 5 * (d + 3 * f)); // the backward's slot-major order
        const int64_t R = c.T * c.k, head = R + c.E + 1 + R * d;
        check_case(c, nb, fwd5, head + bwd5, 5 * (d + 3 * f)); // expert-major, 5-row chunks
    }
}

// The bench model's widths (d 512, f 256: full 32-column strips, the transposing pack's 16 x
// 16 blocks), ~10 rows per expert, canonical 8 blocks (the plan's) and none.
TEST(ExpertFfnFast, BenchWidthsBitIdenticalToReference)
{
    for (int64_t nb : {0, 8}) {
        Ffn c = make(40, 4, 16, 512, 256, 400 + (uint64_t)nb);
        const int64_t full = plan_scratch(c, nb);
        check_case(c, nb, full, full, full);
    }
}

// The bench model's shapes with an expert's row counts of the step (one sequence of 256
// tokens, top-4 of 16: 60-90 rows per expert, several 12-row tiles and a split remainder),
// canonical 8 blocks: the down projection's and the data gradient's canonical tiles
// (matmul.c qt_mm_canon_k) at the plan's contraction, against the row-at-a-time references.
TEST(ExpertFfnFast, BenchRowsBitIdenticalToReference)
{
    Ffn c = make(256, 4, 16, 512, 256, 450);
    const int64_t full = plan_scratch(c, 8);
    check_case(c, 8, full, full, full);
}

// One token, one slot, or no valid rows at all; and scratch too small for a row: the
// documented NaN poisoning of y, dx and the leaves in both the kernels and the references.
TEST(ExpertFfnFast, DegenerateRoutingAndTinyScratch)
{
    Ffn one = make(1, 1, 3, 20, 8, 500);
    one.idx[0] = 2;
    check_case(one, 0, plan_scratch(one, 0), plan_scratch(one, 0), plan_scratch(one, 0));
    check_case(one, 2, plan_scratch(one, 2), plan_scratch(one, 2), plan_scratch(one, 2));
    Ffn none = make(6, 2, 3, 20, 8, 510);
    for (auto &e : none.idx) e = -1;
    vf y(6 * 2 * 20, 1.0f), gu(6 * 2 * 16, 1.0f), sc(plan_scratch(none, 0));
    qt_expert_ffn_fwd_canon(y.data(), gu.data(), none.x.data(), none.idx.data(), none.wgu.data(),
                            none.wd.data(), sc.data(), 6, 2, 3, 20, 8, sc.size(), 0);
    for (float v : y) CHECK(v == 1.0f);
    vf dwg(3 * 16 * 20, 1.0f), dwd(3 * 20 * 8, 1.0f);
    qt_expert_ffn_wgrad_saved_write(dwg.data(), dwd.data(), none.dy.data(), none.x.data(),
                                    none.idx.data(), gu.data(), gu.data(), sc.data(), 6, 2, 3,
                                    20, 8, sc.size());
    for (float v : dwg) CHECK(v == 0.0f);

    Ffn c = make(5, 2, 3, 20, 8, 520);
    vf tiny(20), yt(5 * 2 * 20, 0.f), gt(5 * 2 * 16, 0.f), yr = yt, gr = gt;
    qt_expert_ffn_fwd_canon(yt.data(), gt.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                            c.wd.data(), tiny.data(), 5, 2, 3, 20, 8, tiny.size(), 0);
    qt_expert_ffn_fwd_canon_ref(yr.data(), gr.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                                c.wd.data(), tiny.data(), 5, 2, 3, 20, 8, 4, 0);
    CHECK(all_nan(yt.data(), yt.size()));
    CHECK(all_nan(yr.data(), yr.size()));
    vf dx(5 * 20, 0.f), dxr = dx;
    qt_expert_ffn_bwd_save_canon(dx.data(), NULL, c.dy.data(), c.idx.data(), gt.data(),
                                 c.wgu.data(), c.wd.data(), tiny.data(), 5, 2, 3, 20, 8,
                                 tiny.size(), 0);
    qt_expert_ffn_bwd_save_canon_ref(dxr.data(), NULL, c.dy.data(), c.idx.data(), gt.data(),
                                     c.wgu.data(), c.wd.data(), tiny.data(), 5, 2, 3, 20, 8,
                                     tiny.size(), 0);
    CHECK(all_nan(dx.data(), dx.size()));
    CHECK(all_nan(dxr.data(), dxr.size()));
    vf w1(3 * 16 * 20), w2(3 * 20 * 8), w3 = w1, w4 = w2;
    qt_expert_ffn_wgrad_saved_write(w1.data(), w2.data(), c.dy.data(), c.x.data(), c.idx.data(),
                                    gt.data(), gt.data(), tiny.data(), 5, 2, 3, 20, 8,
                                    tiny.size());
    qt_expert_ffn_wgrad_saved_write_ref(w3.data(), w4.data(), c.dy.data(), c.x.data(),
                                        c.idx.data(), gt.data(), gt.data(), tiny.data(), 5, 2,
                                        3, 20, 8, tiny.size());
    CHECK(all_nan(w1.data(), w1.size()) && all_nan(w2.data(), w2.size()));
    CHECK(all_nan(w3.data(), w3.size()) && all_nan(w4.data(), w4.size()));
}

// The leaf-tree carry in the expert weight gradient's epilogue (qt_expert_ffn_wgrad_saved_carry,
// qt_leaf_carry.h) against writing the leaf and carrying it as qt_tree_push does (dst =
// L[n-1] + (... + (L[0] + r))), bit for bit, for 1..3 addends: odd widths and the bench's,
// an expert without rows (its leaf +0), contractions over 256 rows (partial sums parked in
// dst). A scratch of fewer than T rows is refused with nothing touched.
TEST(ExpertFfnFast, WgradCarryEqualsWriteThenPush)
{
    struct Shape { int64_t T, k, E, d, f; };
    for (const Shape &s : {Shape{29, 3, 6, 33, 12}, Shape{300, 2, 3, 32, 16}, Shape{40, 4, 16, 512, 256}}) {
        Ffn c = make(s.T, s.k, s.E, s.d, s.f, 600 + (uint64_t)s.d);
        const int64_t R = c.T * c.k, d = c.d, f = c.f, E = c.E, ng = E * 2 * f * d, nd = E * d * f;
        vf gu = rnd(R * 2 * f, 610, 1.0), dgu = rnd(R * 2 * f, 611, 1.0);
        vf sc(plan_scratch(c, 0));
        vf lg(ng), ld(nd); // the written leaves (the reference's path)
        qt_expert_ffn_wgrad_saved_write(lg.data(), ld.data(), c.dy.data(), c.x.data(), c.idx.data(),
                                        gu.data(), dgu.data(), sc.data(), c.T, c.k, E, d, f,
                                        (int64_t)sc.size());
        for (int32_t n = 1; n <= 3; n++) {
            std::vector<vf> ag, ad;
            for (int32_t l = 0; l < n; l++) {
                ag.push_back(rnd(ng, 620 + (uint64_t)l, 2.0));
                ad.push_back(rnd(nd, 630 + (uint64_t)l, 2.0));
            }
            qt_leaf_carry cg, cd;
            cg.n = cd.n = n;
            for (int32_t l = 0; l < n; l++) cg.add[l] = ag[l].data(), cd.add[l] = ad[l].data();
            vf dg(ng, 7.0f), dd(nd, 7.0f);
            cg.dst = dg.data(), cd.dst = dd.data();
            CHECK_EQUAL(1, qt_expert_ffn_wgrad_saved_carry(&cg, &cd, c.dy.data(), c.x.data(),
                                                           c.idx.data(), gu.data(), dgu.data(),
                                                           sc.data(), c.T, c.k, E, d, f,
                                                           (int64_t)sc.size()));
            vf wg(ng), wd(nd);
            for (int64_t e = 0; e < ng; e++) {
                float v = lg[e];
                for (int32_t l = 0; l < n; l++) v = ag[l][e] + v;
                wg[e] = v;
            }
            for (int64_t e = 0; e < nd; e++) {
                float v = ld[e];
                for (int32_t l = 0; l < n; l++) v = ad[l][e] + v;
                wd[e] = v;
            }
            CHECK(same_bits(dg, wg));
            CHECK(same_bits(dd, wd));
            // fewer than T rows of scratch: refused, nothing written
            vf dg2(ng, 7.0f);
            cg.dst = dg2.data();
            CHECK_EQUAL(0, qt_expert_ffn_wgrad_saved_carry(&cg, &cd, c.dy.data(), c.x.data(),
                                                           c.idx.data(), gu.data(), dgu.data(),
                                                           sc.data(), c.T, c.k, E, d, f,
                                                           (c.T - 1) * (d + 3 * f)));
            for (float v : dg2) CHECK(v == 7.0f);
        }
    }
}

// Every leaf of one WGRAD op at once (qt_expert_ffn_wgrad_saved_leaves: expert by expert,
// leaf after leaf) against the leaves one at a time on the reference: sequence j of the T
// tokens split into L is leaf first + j, an even leaf written into level 0 by
// qt_expert_ffn_wgrad_saved_write_ref, an odd one written by it into a scratch leaf and
// pushed with qt_tree_push. Levels hold random values (stale ones included); every level
// equal, bit for bit. A leaf with a carry but a scratch of fewer than its T rows, or with
// neither carries nor outputs, is refused with nothing written.
namespace {
// Leaf j of a WGRAD op over sequence j of c's tokens (S tokens each) as the runtime sets it
// up: with a carry into levels lg / ld when leaf `leaf` has one (cy[0] for W_gu, cy[1] for
// W_down), else written into level 0.
void set_leaf(qt_ffn_leaf &l, qt_leaf_carry *cy, const Ffn &c, const vf &gu, const vf &dgu,
              int64_t j, int64_t S, int64_t leaf, float **lg, float **ld)
{
    const int64_t t0 = j * S, k = c.k, d = c.d, f = c.f;
    l.dy = c.dy.data() + t0 * k * d, l.x = c.x.data() + t0 * d;
    l.gu = gu.data() + t0 * k * 2 * f, l.dgu = dgu.data() + t0 * k * 2 * f;
    l.idx = c.idx.data() + t0 * k, l.T = S, l.k = k;
    l.dw_gu = l.dw_down = nullptr, l.c_gu = l.c_down = nullptr;
    if (qt_tree_carry(lg, 0, leaf, &cy[0])) {
        CHECK(qt_tree_carry(ld, 0, leaf, &cy[1]));
        l.c_gu = &cy[0], l.c_down = &cy[1];
    } else {
        l.dw_gu = lg[0], l.dw_down = ld[0];
    }
}

void leaves_case(const Ffn &c, int32_t L, int64_t first, int64_t wscr, uint64_t seed)
{
    const int64_t d = c.d, f = c.f, k = c.k, E = c.E, S = c.T / L;
    const int64_t ng = E * 2 * f * d, nd = E * d * f;
    const int32_t nl = 4; // leaves first .. first + L - 1 <= 7: at most 3 addends
    const int64_t R = c.T * k;
    vf gu = rnd(R * 2 * f, seed, 1.0), dgu = rnd(R * 2 * f, seed + 1, 1.0);
    vf rg = rnd(nl * ng, seed + 2, 3.0), rd = rnd(nl * nd, seed + 3, 3.0), fg = rg, fd = rd;
    float *lrg[nl], *lrd[nl], *lfg[nl], *lfd[nl];
    for (int32_t l = 0; l < nl; l++) {
        lrg[l] = rg.data() + l * ng, lrd[l] = rd.data() + l * nd;
        lfg[l] = fg.data() + l * ng, lfd[l] = fd.data() + l * nd;
    }
    vf big(plan_scratch(c, 0)), sc(wscr > 0 ? wscr : 1), leaf_g(ng), leaf_d(nd);
    std::vector<qt_ffn_leaf> lv((size_t)L);
    std::vector<qt_leaf_carry> cy((size_t)(2 * L));
    for (int32_t j = 0; j < L; j++) {
        const int64_t t0 = j * S, leaf = first + j;
        const float *dyj = c.dy.data() + t0 * k * d, *xj = c.x.data() + t0 * d,
                    *guj = gu.data() + t0 * k * 2 * f, *dguj = dgu.data() + t0 * k * 2 * f;
        const int32_t *idj = c.idx.data() + t0 * k;
        // the reference, one leaf at a time
        float *wg = qt_tree_leaf_dest(lrg, 0, leaf_g.data(), leaf);
        float *wd = qt_tree_leaf_dest(lrd, 0, leaf_d.data(), leaf);
        qt_expert_ffn_wgrad_saved_write_ref(wg, wd, dyj, xj, idj, guj, dguj, big.data(), S, k,
                                            E, d, f, wscr);
        if (leaf % 2) {
            qt_tree_push(lrg, 0, ng, leaf_g.data(), leaf);
            qt_tree_push(lrd, 0, nd, leaf_d.data(), leaf);
        }
        set_leaf(lv[(size_t)j], &cy[(size_t)(2 * j)], c, gu, dgu, j, S, leaf, lfg, lfd);
    }
    const vf fg0 = fg, fd0 = fd;
    const bool any_carry = first % 2 || L > 1;
    if (any_carry && wscr < S * (d + 3 * f)) { // a carry needs the leaf's rows in one chunk
        CHECK_EQUAL(0, qt_expert_ffn_wgrad_saved_leaves(lv.data(), L, sc.data(), E, d, f, wscr));
        CHECK(same_bits(fg, fg0) && same_bits(fd, fd0));
        return;
    }
    CHECK_EQUAL(1, qt_expert_ffn_wgrad_saved_leaves(lv.data(), L, sc.data(), E, d, f, wscr));
    CHECK(same_bits(fg, rg));
    CHECK(same_bits(fd, rd));
}
} // namespace

TEST(ExpertFfnFast, WgradLeavesInOnePassEqualLeafByLeaf)
{
    struct Shape { int64_t T, k, E, d, f; };
    uint64_t seed = 700;
    for (const Shape &s : {Shape{24, 3, 6, 33, 12}, Shape{600, 2, 3, 32, 16}, Shape{48, 4, 16, 512, 256}}) {
        Ffn c = make(s.T, s.k, s.E, s.d, s.f, 650 + (uint64_t)s.d);
        const int64_t full = plan_scratch(c, 0);
        for (int32_t L : {2, 3, 4})
            for (int64_t first : {0, 1, 3, 5}) {
                if (first + L > 8) continue;
                if (s.d == 512 && !(L == 4 && first == 0) && !(L == 3 && first == 5))
                    continue; // the bench's widths: the bench's four leaves, and 3 addends
                leaves_case(c, L, first, full, seed++);
            }
        // one leaf (leaf 0: written, no carry) in 5-row chunks: taken; carried leaves with a
        // scratch of fewer than T rows: refused
        leaves_case(c, 1, 0, 5 * (s.d + 3 * s.f), seed++);
        leaves_case(c, 2, 0, 5 * (s.d + 3 * s.f), seed++);
    }
    // neither carries nor outputs: refused
    Ffn c = make(8, 2, 4, 16, 8, 660);
    vf sc(plan_scratch(c, 0)), gu(16 * 16, 1.0f);
    qt_ffn_leaf l = {c.dy.data(), c.x.data(), gu.data(), gu.data(), c.idx.data(), 8, 2,
                     nullptr, nullptr, nullptr, nullptr};
    CHECK_EQUAL(0, qt_expert_ffn_wgrad_saved_leaves(&l, 1, sc.data(), 4, 16, 8, (int64_t)sc.size()));
}

// Row panels through the leaves (qt_expert_ffn_wgrad_saved_leaves_panels): every leaf of an
// expert gathered once, each weight slice in row panels of pr rows with the leaves in order
// inside a panel, against the leaf-after-leaf form (panel_rows 0, the form before panels) on
// the same tree levels of random values, bit for bit, with the number of experts that ran in
// panels checked (all of them, or, with too small a scratch, fewer).
namespace {
void panels_case(const Ffn &c, int32_t L, int64_t first, int64_t wscr, int64_t pr,
                 int64_t expect_paneled, uint64_t seed)
{
    const int64_t d = c.d, f = c.f, k = c.k, E = c.E, S = c.T / L;
    const int64_t ng = E * 2 * f * d, nd = E * d * f, R = c.T * k;
    const int32_t nl = 4;
    vf gu = rnd(R * 2 * f, seed, 1.0), dgu = rnd(R * 2 * f, seed + 1, 1.0);
    vf g[2] = {rnd(nl * ng, seed + 2, 3.0), vf()}, dd[2] = {rnd(nl * nd, seed + 3, 3.0), vf()};
    g[1] = g[0], dd[1] = dd[0];
    vf sc(wscr);
    int64_t paneled[2] = {-1, -1};
    for (int form = 0; form < 2; form++) { // 0: leaf after leaf, 1: panels of pr rows
        float *lg[nl], *ld[nl];
        for (int32_t l = 0; l < nl; l++)
            lg[l] = g[form].data() + l * ng, ld[l] = dd[form].data() + l * nd;
        std::vector<qt_ffn_leaf> lv((size_t)L);
        std::vector<qt_leaf_carry> cy((size_t)(2 * L));
        for (int32_t j = 0; j < L; j++) {
            set_leaf(lv[(size_t)j], &cy[(size_t)(2 * j)], c, gu, dgu, j, S, first + j, lg, ld);
        }
        CHECK_EQUAL(1, qt_expert_ffn_wgrad_saved_leaves_panels(lv.data(), L, sc.data(), E, d, f,
                                                                wscr, form ? pr : 0,
                                                                &paneled[form]));
    }
    CHECK_EQUAL(0, paneled[0]);
    if (expect_paneled >= 0) CHECK_EQUAL(expect_paneled, paneled[1]);
    else CHECK(paneled[1] >= 0 && paneled[1] < E); // some or all experts fall back
    CHECK(same_bits(g[0], g[1]));
    CHECK(same_bits(dd[0], dd[1]));
}

// The bench model's routing: top-k of E distinct experts per token, uniformly at random.
Ffn make_uniform(int64_t T, int64_t k, int64_t E, int64_t d, int64_t f, uint64_t seed)
{
    Ffn c = make(T, k, E, d, f, seed);
    uint64_t s = seed + 9;
    for (int64_t t = 0; t < T; t++) {
        int32_t perm[64];
        for (int32_t e = 0; e < E; e++) perm[e] = e;
        for (int64_t j = 0; j < k; j++) {
            const double u = 0.5 * (qt_test_rand(&s) + 1.0);
            int64_t m = j + (int64_t)(u * (double)(E - j));
            if (m >= E) m = E - 1;
            std::swap(perm[j], perm[m]);
            c.idx[t * k + j] = perm[j];
        }
    }
    return c;
}
} // namespace

TEST(ExpertFfnFast, WgradLeavesInRowPanelsEqualLeafAfterLeaf)
{
    uint64_t seed = 900;
    // the bench model's op: 4 sequences of 256 tokens, top-4 of 16, d 512, f 256 (leaves 0
    // and 2 written, 1 carried over level 0, 3 over levels 0 and 1; 40-90 rows an expert and
    // leaf), the plan's scratch; panels of the default size, 5 and 12 rows
    {
        Ffn c = make_uniform(1024, 4, 16, 512, 256, 910);
        for (int64_t pr : {-1, 5, 12}) panels_case(c, 4, 0, 3145728, pr, 16, seed++);
    }
    // every token on each of 3 experts: 300 rows an expert and leaf (two contraction blocks
    // of the tile); with the plan's scratch all in panels, with a scratch of one leaf's rows
    // (the carries still apply) two leaves' rows do not fit it: every expert leaf after leaf
    {
        Ffn c = make_uniform(600, 3, 3, 32, 16, 915);
        panels_case(c, 2, 1, plan_scratch(c, 0), 12, 3, seed++);
        panels_case(c, 2, 1, 300 * (32 + 3 * 16), 12, -1, seed++);
    }
    // odd shapes (make(): an expert without rows, one with a single row, dropped rows, widths
    // off the vectors and strips, an expert with over 256 rows a leaf: contraction blocks),
    // 1-4 leaves from leaves 0, 1, 3, 5; the plan's scratch, panels of 5, 12 and default rows
    struct Shape { int64_t T, k, E, d, f; };
    for (const Shape &s : {Shape{24, 3, 6, 33, 12}, Shape{600, 2, 3, 32, 16},
                           Shape{96, 4, 16, 40, 24}}) {
        Ffn c = make(s.T, s.k, s.E, s.d, s.f, 920 + (uint64_t)s.d);
        const int64_t full = plan_scratch(c, 0);
        for (int32_t L : {1, 2, 4})
            for (int64_t first : {0, 1, 3, 5}) {
                if (first + L > 8 || (L == 1 && first > 1)) continue;
                for (int64_t pr : {5, 12, -1}) panels_case(c, L, first, full, pr, s.E, seed++);
            }

    }
}
