// test_packing.cpp - the packed-document kernels (docs/data.md "Packed documents"): rope,
// attention, GDN conv and GDN core with a positions array (pos[t] = position of row t in its
// document, 0 where a document starts).
//   (a) a packed call equals running every document as a sequence of its own (separate
//       buffers, b = 1, S = the document's length, a fresh zero state), bit for bit:
//       rope fwd/bwd, attention fwd (o and lse) / bwd (dq, dk, dv), conv fwd / bwd (data);
//       the conv weight gradient sums over all the rows of a sequence, so it equals the
//       per-document calls accumulated into one buffer in document order (the same chain of
//       additions) bit for bit, and fresh per-document buffers summed afterwards to 1e-12
//       (a different summation order only); the GDN core's reset is a zero decay (0*S
//       instead of a fresh zero state), which can differ from the separate run only in the
//       sign of a zero, and the outputs accumulate into zeroed buffers (+0 + -0 = +0), so
//       o, rq, rk, dc, dg, dbeta are compared with memcmp (the saved chunk states are not
//       compared: a packed checkpoint may hold the previous document's state, which the
//       zero decay then drops);
//   (b) the _f64 backward of attention, conv (data and weights) and core against central
//       finite differences with packed positions (relative error < 1e-6), and the g of a
//       document's first token gets an exact zero gradient;
//   (c) pos = NULL and a single document per sequence (pos[t] = t) give the bits of the
//       plain entry points.
// Documents: lengths 1 and 2 and 3 (shorter than the conv kernel K = 4), documents longer
// than the attention's 8-row forward block and the GDN checkpoint chunk, chunk boundaries
// that do not fall on document starts.
#include <algorithm>
#include <functional>
#include <vector>

#include "qt_test_fd.h"

#include "CppUTest/TestHarness.h"

#include "kernels/attention.h"
#include "kernels/gdn_conv.h"
#include "kernels/gdn_core.h"
#include "kernels/rope.h"
#include "qt_test_util.h"

namespace {  // test-local names: no clash with other test files in the same binary

typedef std::vector<double> vd;
typedef std::vector<float> vf;
typedef std::vector<int32_t> vi;

const double FD_H = 1e-5;   // as test_kernels_gdn.cpp: truncation and rounding ~1e-10
const double FD_TOL = 1e-6;

vd rnd(uint64_t *s, size_t n, double scale)
{
    vd v(n);
    for (size_t i = 0; i < n; i++) v[i] = (double)(float)(scale * qt_test_rand(s));
    return v;
}

vf tof(const vd &v)
{
    return vf(v.begin(), v.end());
}

template <class T> bool same(const std::vector<T> &a, const std::vector<T> &b)
{
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// rows [r0, r0+n) of a row-major array of rows w wide
template <class T> std::vector<T> rows(const std::vector<T> &v, int64_t r0, int64_t n, int64_t w)
{
    return std::vector<T>(v.begin() + r0 * w, v.begin() + (r0 + n) * w);
}

template <class T> void put_rows(std::vector<T> &dst, const std::vector<T> &src, int64_t r0, int64_t w)
{
    std::copy(src.begin(), src.end(), dst.begin() + r0 * w);
}

// documents (lengths summing to S per sequence) -> pos[b*S]
struct docs_t {
    int64_t b, S;
    std::vector<std::vector<int64_t>> lens;
    vi pos() const
    {
        vi p;
        for (const auto &seq : lens)
            for (int64_t L : seq)
                for (int64_t i = 0; i < L; i++) p.push_back((int32_t)i);
        return p;
    }
    // visits (row of the document's first token, length)
    void each(const std::function<void(int64_t, int64_t)> &f) const
    {
        for (int64_t s = 0; s < b; s++) {
            int64_t a = 0;
            for (int64_t L : lens[s]) { f(s * S + a, L); a += L; }
        }
    }
};

// b = 2, S = 13: lengths 1, 2, 5, 4, 1 and 3, 1, 9
const docs_t DOCS13 = {2, 13, {{1, 2, 5, 4, 1}, {3, 1, 9}}};
// b = 2, S = 23 (attention: a 17-row document spans two 8-row forward blocks)
const docs_t DOCS23 = {2, 23, {{2, 17, 1, 3}, {1, 1, 4, 10, 7}}};


double g_worst_fd = 0.0;  // the largest FD error of the current test (report_fd prints it)

void report_fd(const char *what)
{
    fprintf(stderr, "\n%s: worst finite-difference error %.3g (tolerance %.0g)\n", what,
            g_worst_fd, FD_TOL);
    g_worst_fd = 0.0;
}

void check_fd(const char *what, const vd &analytic, vd &x, const std::function<double()> &loss)
{
    vd num = qt_test_numgrad(x, FD_H, loss);
    double e = qt_test_rel_err_f64(what, analytic.data(), num.data(), num.size(), FD_TOL);
    g_worst_fd = std::max(g_worst_fd, e);
    CHECK_TRUE_TEXT(e <= FD_TOL, what);
}

double dot(const vd &a, const vd &b)
{
    double s = 0.0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

}  // namespace

// ------------------------------------------------------------------ rope
TEST_GROUP(packing_rope){};

TEST(packing_rope, documents_equal_separate_sequences_and_null_equals_plain)
{
    const docs_t &D = DOCS13;
    const int64_t T = D.b * D.S, H = 3, hd = 8, R = 6, w = H * hd;
    uint64_t seed = 501;
    vf x = tof(rnd(&seed, T * w, 1.0)), dy = tof(rnd(&seed, T * w, 1.0));
    vf table(D.S * (R / 2) * 2);
    qt_rope_table(table.data(), D.S, R, 10000.0);
    vi pos = D.pos();
    vf y(T * w), dx(T * w, 0.0f), ys(T * w), dxs(T * w, 0.0f);
    qt_rope_fwd_pos(y.data(), x.data(), table.data(), pos.data(), D.b, D.S, H, hd, R);
    qt_rope_bwd_pos(dx.data(), dy.data(), table.data(), pos.data(), D.b, D.S, H, hd, R);
    D.each([&](int64_t r0, int64_t L) {
        vf xs = rows(x, r0, L, w), g = rows(dy, r0, L, w), o(L * w), d(L * w, 0.0f);
        qt_rope_fwd(o.data(), xs.data(), table.data(), 1, L, H, hd, R);
        qt_rope_bwd(d.data(), g.data(), table.data(), 1, L, H, hd, R);
        put_rows(ys, o, r0, w);
        put_rows(dxs, d, r0, w);
    });
    CHECK_TRUE_TEXT(same(y, ys), "rope fwd: packed != separate documents");
    CHECK_TRUE_TEXT(same(dx, dxs), "rope bwd: packed != separate documents");
    // not vacuous: the packed rotation differs from the unpacked one
    vf yu(T * w);
    qt_rope_fwd(yu.data(), x.data(), table.data(), D.b, D.S, H, hd, R);
    CHECK_TRUE_TEXT(!same(y, yu), "rope fwd: packing changed nothing");

    // (c) NULL and one document per sequence give the plain bits
    vi ident(T);
    for (int64_t t = 0; t < T; t++) ident[t] = (int32_t)(t % D.S);
    vf yn(T * w), yi(T * w), dxu(T * w, 0.0f), dxn(T * w, 0.0f), dxi(T * w, 0.0f);
    qt_rope_fwd_pos(yn.data(), x.data(), table.data(), nullptr, D.b, D.S, H, hd, R);
    qt_rope_fwd_pos(yi.data(), x.data(), table.data(), ident.data(), D.b, D.S, H, hd, R);
    qt_rope_bwd(dxu.data(), dy.data(), table.data(), D.b, D.S, H, hd, R);
    qt_rope_bwd_pos(dxn.data(), dy.data(), table.data(), nullptr, D.b, D.S, H, hd, R);
    qt_rope_bwd_pos(dxi.data(), dy.data(), table.data(), ident.data(), D.b, D.S, H, hd, R);
    CHECK_TRUE(same(yu, yn) && same(yu, yi));
    CHECK_TRUE(same(dxu, dxn) && same(dxu, dxi));
}

// ------------------------------------------------------------------ attention
TEST_GROUP(packing_attn){};

namespace {
struct attn_case {
    int64_t Hq, Hkv, hd;
};

// (a) and (c) for one shape, float; hd 16 takes the blocked paths, hd 8 the reference rows.
void attn_separate(const docs_t &D, const attn_case &c, uint64_t seed)
{
    const int64_t T = D.b * D.S, qw = c.Hq * c.hd, kw = c.Hkv * c.hd;
    const float scale = 1.0f / sqrtf((float)c.hd);
    vf q = tof(rnd(&seed, T * qw, 1.5)), k = tof(rnd(&seed, T * kw, 1.5));
    vf v = tof(rnd(&seed, T * kw, 1.0)), dout = tof(rnd(&seed, T * qw, 1.0));
    const int64_t sn = 4 * QT_ATTN_BWD_SCRATCH(D.S) + 4096;  // room for every fast path
    vf scratch(sn);
    vi pos = D.pos();
    vf o(T * qw), lse(D.b * c.Hq * D.S), dq(T * qw, 0.0f), dk(T * kw, 0.0f), dv(T * kw, 0.0f);
    qt_attn_fwd_docs(o.data(), lse.data(), q.data(), k.data(), v.data(), scratch.data(),
                     pos.data(), D.b, D.S, c.Hq, c.Hkv, c.hd, scale);
    qt_attn_bwd_docs(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                     v.data(), o.data(), lse.data(), pos.data(), scratch.data(), sn, D.b, D.S,
                     c.Hq, c.Hkv, c.hd, scale);
    vf os(o.size()), lses(lse.size()), dqs(dq.size(), 0.0f), dks(dk.size(), 0.0f),
        dvs(dv.size(), 0.0f);
    D.each([&](int64_t r0, int64_t L) {
        vf qs = rows(q, r0, L, qw), ks = rows(k, r0, L, kw), vs = rows(v, r0, L, kw);
        vf ds = rows(dout, r0, L, qw), od(L * qw), ld(c.Hq * L), a(L * qw, 0.0f),
           b(L * kw, 0.0f), e(L * kw, 0.0f);
        qt_attn_fwd(od.data(), ld.data(), qs.data(), ks.data(), vs.data(), scratch.data(), 1, L,
                    c.Hq, c.Hkv, c.hd, scale);
        qt_attn_bwd_n(a.data(), b.data(), e.data(), ds.data(), qs.data(), ks.data(), vs.data(),
                      od.data(), ld.data(), scratch.data(), sn, 1, L, c.Hq, c.Hkv, c.hd, scale);
        put_rows(os, od, r0, qw);
        put_rows(dqs, a, r0, qw);
        put_rows(dks, b, r0, kw);
        put_rows(dvs, e, r0, kw);
        const int64_t s = r0 / D.S, t0 = r0 % D.S;
        for (int64_t h = 0; h < c.Hq; h++)
            for (int64_t i = 0; i < L; i++) lses[(s * c.Hq + h) * D.S + t0 + i] = ld[h * L + i];
    });
    CHECK_TRUE_TEXT(same(o, os), "attn fwd o: packed != separate documents");
    CHECK_TRUE_TEXT(same(lse, lses), "attn fwd lse: packed != separate documents");
    CHECK_TRUE_TEXT(same(dq, dqs), "attn bwd dq: packed != separate documents");
    CHECK_TRUE_TEXT(same(dk, dks), "attn bwd dk: packed != separate documents");
    CHECK_TRUE_TEXT(same(dv, dvs), "attn bwd dv: packed != separate documents");

    // (c) NULL and one document per sequence == the plain entry points
    vi ident(T);
    for (int64_t t = 0; t < T; t++) ident[t] = (int32_t)(t % D.S);
    vf ou(o.size()), lu(lse.size()), on(o.size()), ln(lse.size()), oi(o.size()), li(lse.size());
    qt_attn_fwd(ou.data(), lu.data(), q.data(), k.data(), v.data(), scratch.data(), D.b, D.S,
                c.Hq, c.Hkv, c.hd, scale);
    qt_attn_fwd_docs(on.data(), ln.data(), q.data(), k.data(), v.data(), scratch.data(),
                     nullptr, D.b, D.S, c.Hq, c.Hkv, c.hd, scale);
    qt_attn_fwd_docs(oi.data(), li.data(), q.data(), k.data(), v.data(), scratch.data(),
                     ident.data(), D.b, D.S, c.Hq, c.Hkv, c.hd, scale);
    CHECK_TRUE_TEXT(same(ou, on) && same(lu, ln), "attn fwd: pos NULL != plain");
    CHECK_TRUE_TEXT(same(ou, oi) && same(lu, li), "attn fwd: one document != plain");
    CHECK_TRUE_TEXT(!same(ou, o), "attn fwd: packing changed nothing");
    vf g[9];
    for (int i = 0; i < 9; i++) g[i].assign(i % 3 == 0 ? T * qw : T * kw, 0.0f);
    qt_attn_bwd_n(g[0].data(), g[1].data(), g[2].data(), dout.data(), q.data(), k.data(),
                  v.data(), ou.data(), lu.data(), scratch.data(), sn, D.b, D.S, c.Hq, c.Hkv,
                  c.hd, scale);
    qt_attn_bwd_docs(g[3].data(), g[4].data(), g[5].data(), dout.data(), q.data(), k.data(),
                     v.data(), ou.data(), lu.data(), nullptr, scratch.data(), sn, D.b, D.S,
                     c.Hq, c.Hkv, c.hd, scale);
    qt_attn_bwd_docs(g[6].data(), g[7].data(), g[8].data(), dout.data(), q.data(), k.data(),
                     v.data(), ou.data(), lu.data(), ident.data(), scratch.data(), sn, D.b,
                     D.S, c.Hq, c.Hkv, c.hd, scale);
    for (int i = 0; i < 3; i++) {
        CHECK_TRUE_TEXT(same(g[i], g[3 + i]), "attn bwd: pos NULL != plain");
        CHECK_TRUE_TEXT(same(g[i], g[6 + i]), "attn bwd: one document != plain");
    }
}
}  // namespace

TEST(packing_attn, documents_equal_separate_sequences_and_null_equals_plain)
{
    attn_separate(DOCS13, {4, 2, 16}, 601);
    attn_separate(DOCS23, {4, 2, 16}, 602);
    attn_separate(DOCS23, {2, 1, 8}, 603);
    attn_separate(DOCS13, {3, 3, 8}, 604);
}

TEST(packing_attn, backward_f64_matches_finite_differences)
{
    const docs_t &D = DOCS13;
    const int64_t Hq = 4, Hkv = 2, hd = 16, T = D.b * D.S, qw = Hq * hd, kw = Hkv * hd;
    const double scale = 1.0 / sqrt((double)hd);
    uint64_t seed = 611;
    vd q = rnd(&seed, T * qw, 1.0), k = rnd(&seed, T * kw, 1.0), v = rnd(&seed, T * kw, 1.0);
    vd R = rnd(&seed, T * qw, 1.0);
    const int64_t sn = 4 * QT_ATTN_BWD_SCRATCH(D.S) + 4096;
    vd scratch(sn), o(T * qw), lse(D.b * Hq * D.S);
    vi pos = D.pos();
    auto loss = [&]() {
        qt_attn_fwd_docs_f64(o.data(), lse.data(), q.data(), k.data(), v.data(),
                             scratch.data(), pos.data(), D.b, D.S, Hq, Hkv, hd, scale);
        return dot(o, R);
    };
    loss();
    vd dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
    qt_attn_bwd_docs_f64(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(),
                         v.data(), o.data(), lse.data(), pos.data(), scratch.data(), sn, D.b,
                         D.S, Hq, Hkv, hd, scale);
    check_fd("packed attn dq", dq, q, loss);
    check_fd("packed attn dk", dk, k, loss);
    check_fd("packed attn dv", dv, v, loss);
    report_fd("packed attention");
}

// ------------------------------------------------------------------ gdn conv
TEST_GROUP(packing_conv){};

namespace {
struct conv_dims {
    int64_t hk, dk, hv, dv, K;
    int64_t r() const { return hv / hk; }
    int64_t W() const { return hk * (2 * dk + 2 * r() * dv); }
    int64_t Cc() const { return 2 * hk * dk + hv * dv; }
};
}  // namespace

TEST(packing_conv, documents_equal_separate_sequences_and_null_equals_plain)
{
    // widths above one 64-channel tile in the second case (the tiled bwd and wgrad)
    const conv_dims cases[] = {{2, 3, 4, 2, 4}, {1, 70, 2, 9, 4}, {2, 5, 4, 3, 5}};
    for (const conv_dims &d : cases) {
        for (const docs_t *Dp : {&DOCS13, &DOCS23}) {
            const docs_t &D = *Dp;
            const int64_t T = D.b * D.S, W = d.W(), C = d.Cc();
            uint64_t seed = 700 + (uint64_t)d.dk + (uint64_t)D.S;
            vf u = tof(rnd(&seed, T * W, 1.0)), w = tof(rnd(&seed, C * d.K, 0.7));
            vf dc = tof(rnd(&seed, T * C, 1.0));
            vi pos = D.pos();
            vf c(T * C), pre(T * C), dq(T * W, 0.0f), dqr(T * W, 0.0f);
            qt_gdn_conv_fwd_pos(c.data(), pre.data(), u.data(), w.data(), pos.data(), D.b, D.S,
                                d.hk, d.dk, d.hv, d.dv, d.K);
            qt_gdn_conv_bwd_pos(dq.data(), pre.data(), dc.data(), w.data(), pos.data(), D.b,
                                D.S, d.hk, d.dk, d.hv, d.dv, d.K);
            qt_gdn_conv_bwd_ref_pos(dqr.data(), pre.data(), dc.data(), w.data(), pos.data(),
                                    D.b, D.S, d.hk, d.dk, d.hv, d.dv, d.K);
            CHECK_TRUE_TEXT(same(dq, dqr), "conv bwd_pos tiled != ref");
            // the weight gradient of each sequence (rows over the whole sequence)
            vf dw(C * d.K, 0.0f), dwr(C * d.K, 0.0f);
            for (int64_t s = 0; s < D.b; s++) {
                const int64_t o = s * D.S;
                qt_gdn_conv_wgrad_rows_pos(dw.data(), pre.data() + o * C, dc.data() + o * C,
                                           u.data() + o * W, pos.data() + o, 0, D.S, d.hk,
                                           d.dk, d.hv, d.dv, d.K);
                qt_gdn_conv_wgrad_rows_ref_pos(dwr.data(), pre.data() + o * C,
                                               dc.data() + o * C, u.data() + o * W,
                                               pos.data() + o, 0, D.S, d.hk, d.dk, d.hv, d.dv,
                                               d.K);
            }
            CHECK_TRUE_TEXT(same(dw, dwr), "conv wgrad_rows_pos tiled != ref");

            vf cs(c.size()), ps(pre.size()), dqs(dq.size(), 0.0f), dwc(dw.size(), 0.0f);
            vd dwsum(dw.size(), 0.0);
            D.each([&](int64_t r0, int64_t L) {
                vf us = rows(u, r0, L, W), gs = rows(dc, r0, L, C), co(L * C), po(L * C),
                   dd(L * W, 0.0f), fresh(dw.size(), 0.0f);
                qt_gdn_conv_fwd(co.data(), po.data(), us.data(), w.data(), 1, L, d.hk, d.dk,
                                d.hv, d.dv, d.K);
                qt_gdn_conv_bwd(dd.data(), po.data(), gs.data(), w.data(), 1, L, d.hk, d.dk,
                                d.hv, d.dv, d.K);
                qt_gdn_conv_wgrad(dwc.data(), po.data(), gs.data(), us.data(), L, d.hk, d.dk,
                                  d.hv, d.dv, d.K);
                qt_gdn_conv_wgrad(fresh.data(), po.data(), gs.data(), us.data(), L, d.hk, d.dk,
                                  d.hv, d.dv, d.K);
                for (size_t i = 0; i < fresh.size(); i++) dwsum[i] += fresh[i];
                put_rows(cs, co, r0, C);
                put_rows(ps, po, r0, C);
                put_rows(dqs, dd, r0, W);
            });
            CHECK_TRUE_TEXT(same(c, cs) && same(pre, ps), "conv fwd: packed != separate");
            CHECK_TRUE_TEXT(same(dq, dqs), "conv bwd: packed != separate");
            CHECK_TRUE_TEXT(same(dw, dwc), "conv wgrad: packed != chained per-document calls");
            double worst = 0.0, scale = 0.0;
            for (size_t i = 0; i < dw.size(); i++) {
                worst = std::max(worst, std::fabs(dw[i] - dwsum[i]));
                scale = std::max(scale, std::fabs(dwsum[i]));
            }
            // float sums of up to S products in another order: a few ulp of the largest term
            CHECK_TRUE_TEXT(worst <= 1e-5 * scale, "conv wgrad: packed != sum of documents");

            // (c) NULL and one document per sequence == the plain entry points; packed differs
            vi ident(T);
            for (int64_t t = 0; t < T; t++) ident[t] = (int32_t)(t % D.S);
            vf cu(c.size()), pu(c.size()), cn(c.size()), pn(c.size()), ci(c.size()), pi(c.size());
            qt_gdn_conv_fwd(cu.data(), pu.data(), u.data(), w.data(), D.b, D.S, d.hk, d.dk,
                            d.hv, d.dv, d.K);
            qt_gdn_conv_fwd_pos(cn.data(), pn.data(), u.data(), w.data(), nullptr, D.b, D.S,
                                d.hk, d.dk, d.hv, d.dv, d.K);
            qt_gdn_conv_fwd_pos(ci.data(), pi.data(), u.data(), w.data(), ident.data(), D.b,
                                D.S, d.hk, d.dk, d.hv, d.dv, d.K);
            CHECK_TRUE(same(cu, cn) && same(cu, ci) && same(pu, pi));
            CHECK_TRUE_TEXT(!same(cu, c), "conv fwd: packing changed nothing");
            vf bu(dq.size(), 0.0f), bn(dq.size(), 0.0f), bi(dq.size(), 0.0f);
            qt_gdn_conv_bwd(bu.data(), pu.data(), dc.data(), w.data(), D.b, D.S, d.hk, d.dk,
                            d.hv, d.dv, d.K);
            qt_gdn_conv_bwd_pos(bn.data(), pu.data(), dc.data(), w.data(), nullptr, D.b, D.S,
                                d.hk, d.dk, d.hv, d.dv, d.K);
            qt_gdn_conv_bwd_pos(bi.data(), pu.data(), dc.data(), w.data(), ident.data(), D.b,
                                D.S, d.hk, d.dk, d.hv, d.dv, d.K);
            CHECK_TRUE(same(bu, bn) && same(bu, bi));
            vf wu(dw.size(), 0.0f), wn(dw.size(), 0.0f), wi(dw.size(), 0.0f);
            for (int64_t s = 0; s < D.b; s++) {
                const int64_t o = s * D.S;
                qt_gdn_conv_wgrad(wu.data(), pu.data() + o * C, dc.data() + o * C,
                                  u.data() + o * W, D.S, d.hk, d.dk, d.hv, d.dv, d.K);
                qt_gdn_conv_wgrad_rows_pos(wn.data(), pu.data() + o * C, dc.data() + o * C,
                                           u.data() + o * W, nullptr, 0, D.S, d.hk, d.dk, d.hv,
                                           d.dv, d.K);
                qt_gdn_conv_wgrad_rows_pos(wi.data(), pu.data() + o * C, dc.data() + o * C,
                                           u.data() + o * W, ident.data() + o, 0, D.S, d.hk,
                                           d.dk, d.hv, d.dv, d.K);
            }
            CHECK_TRUE(same(wu, wn) && same(wu, wi));
        }
    }
}

TEST(packing_conv, backward_f64_matches_finite_differences)
{
    const docs_t &D = DOCS13;
    const conv_dims d = {2, 3, 4, 2, 4};
    const int64_t T = D.b * D.S, W = d.W(), C = d.Cc();
    uint64_t seed = 711;
    vd u = rnd(&seed, T * W, 1.0), w = rnd(&seed, C * d.K, 0.7), R = rnd(&seed, T * C, 1.0);
    vd c(T * C), pre(T * C);
    vi pos = D.pos();
    auto loss = [&]() {
        qt_gdn_conv_fwd_pos_f64(c.data(), pre.data(), u.data(), w.data(), pos.data(), D.b, D.S,
                                d.hk, d.dk, d.hv, d.dv, d.K);
        return dot(c, R);
    };
    loss();
    vd du(u.size(), 0.0), dw(w.size(), 0.0);
    qt_gdn_conv_bwd_pos_f64(du.data(), pre.data(), R.data(), w.data(), pos.data(), D.b, D.S,
                            d.hk, d.dk, d.hv, d.dv, d.K);
    for (int64_t s = 0; s < D.b; s++)  // two token blocks per sequence (a block leaf each)
        for (int64_t t0 : {(int64_t)0, (int64_t)6}) {
            const int64_t o = s * D.S;
            qt_gdn_conv_wgrad_rows_pos_f64(dw.data(), pre.data() + o * C, R.data() + o * C,
                                           u.data() + o * W, pos.data() + o, t0,
                                           t0 ? D.S : 6, d.hk, d.dk, d.hv, d.dv, d.K);
        }
    check_fd("packed conv dqkvz", du, u, loss);
    check_fd("packed conv dw", dw, w, loss);
    report_fd("packed gdn conv");
}

// ------------------------------------------------------------------ gdn core
TEST_GROUP(packing_core){};

namespace {
struct core_dims {
    int64_t hk, dk, hv, dv, chunk;
    int64_t Cc() const { return 2 * hk * dk + hv * dv; }
};

struct core_out {
    std::vector<double> o, states, rq, rk, dc, dg, dbeta;
};

// g = -exp(u) * softplus(x) as test_kernels_gdn.cpp
vd real_g(uint64_t *s, size_t n)
{
    vd g(n);
    for (size_t i = 0; i < n; i++) {
        double u = -0.5 + 1.5 * qt_test_rand(s), x = 3.0 * qt_test_rand(s);
        g[i] = (double)(float)(-exp(u) * log1p(exp(x)));
    }
    return g;
}

vd real_beta(uint64_t *s, size_t n)
{
    vd b(n);
    for (size_t i = 0; i < n; i++) b[i] = (double)(float)(1.0 / (1.0 + exp(-2.0 * qt_test_rand(s))));
    return b;
}

// fwd + bwd of the float core on b sequences of S rows (pos may be NULL; plain: the plain names)
template <class R>
void core_run(bool plain, const std::vector<R> &c, const std::vector<R> &g,
              const std::vector<R> &beta, const std::vector<R> &d_o, const int32_t *pos,
              int64_t b, int64_t S, const core_dims &d, std::vector<R> out[7]);

template <>
void core_run<float>(bool plain, const vf &c, const vf &g, const vf &beta, const vf &d_o,
                     const int32_t *pos, int64_t b, int64_t S, const core_dims &d, vf out[7])
{
    const int64_t T = b * S, nch = (S + d.chunk - 1) / d.chunk;
    const float qs = 1.0f / sqrtf((float)d.dk), eps = 1e-6f;
    out[0].assign(T * d.hv * d.dv, 0.0f);
    out[1].assign(b * d.hv * nch * d.dk * d.dv, 0.0f);
    out[2].assign(T * d.hk, 0.0f);
    out[3].assign(T * d.hk, 0.0f);
    out[4].assign(T * d.Cc(), 0.0f);
    out[5].assign(T * d.hv, 0.0f);
    out[6].assign(T * d.hv, 0.0f);
    vf scratch(QT_GDN_CORE_SCRATCH(d.chunk, d.dk, d.dv));
    if (plain) {
        qt_gdn_core_fwd(out[0].data(), out[1].data(), out[2].data(), out[3].data(), c.data(),
                        g.data(), beta.data(), b, S, d.hk, d.dk, d.hv, d.dv, d.chunk, qs, eps);
        qt_gdn_core_bwd(out[4].data(), out[5].data(), out[6].data(), out[1].data(),
                        out[2].data(), out[3].data(), d_o.data(), c.data(), g.data(),
                        beta.data(), scratch.data(), b, S, d.hk, d.dk, d.hv, d.dv, d.chunk, qs,
                        eps);
    } else {
        qt_gdn_core_fwd_pos(out[0].data(), out[1].data(), out[2].data(), out[3].data(),
                            c.data(), g.data(), beta.data(), pos, b, S, d.hk, d.dk, d.hv, d.dv,
                            d.chunk, qs, eps);
        qt_gdn_core_bwd_pos(out[4].data(), out[5].data(), out[6].data(), out[1].data(),
                            out[2].data(), out[3].data(), d_o.data(), c.data(), g.data(),
                            beta.data(), pos, scratch.data(), b, S, d.hk, d.dk, d.hv, d.dv,
                            d.chunk, qs);
    }
}
}  // namespace

TEST(packing_core, documents_equal_separate_sequences_and_null_equals_plain)
{
    const core_dims cases[] = {{2, 4, 4, 3, 3}, {1, 8, 2, 8, 4}, {2, 5, 2, 16, 64}};
    const char *names[] = {"o", "states", "rq", "rk", "dc", "dg", "dbeta"};
    for (const core_dims &d : cases) {
        for (const docs_t *Dp : {&DOCS13, &DOCS23}) {
            const docs_t &D = *Dp;
            const int64_t T = D.b * D.S, C = d.Cc();
            const int64_t wdt[7] = {d.hv * d.dv, 0, d.hk, d.hk, C, d.hv, d.hv};
            uint64_t seed = 800 + (uint64_t)d.dv + (uint64_t)D.S;
            vf c = tof(rnd(&seed, T * C, 1.0)), g = tof(real_g(&seed, T * d.hv));
            vf beta = tof(real_beta(&seed, T * d.hv)), d_o = tof(rnd(&seed, T * d.hv * d.dv, 1.0));
            vi pos = D.pos();
            vf P[7], Sep[7];
            core_run<float>(false, c, g, beta, d_o, pos.data(), D.b, D.S, d, P);
            for (int i = 0; i < 7; i++) Sep[i].assign(P[i].size(), 0.0f);
            D.each([&](int64_t r0, int64_t L) {
                vf o1[7];
                core_run<float>(true, rows(c, r0, L, C), rows(g, r0, L, d.hv),
                                rows(beta, r0, L, d.hv), rows(d_o, r0, L, d.hv * d.dv),
                                nullptr, 1, L, d, o1);
                for (int i = 0; i < 7; i++)
                    if (i != 1) put_rows(Sep[i], o1[i], r0, wdt[i]);
            });
            for (int i = 0; i < 7; i++) {
                if (i == 1) continue;  // the saved chunk states (see the file comment)
                if (!same(P[i], Sep[i]))
                    fprintf(stderr, "core %s: packed != separate (chunk %lld, S %lld)\n",
                            names[i], (long long)d.chunk, (long long)D.S);
                CHECK_TRUE_TEXT(same(P[i], Sep[i]), names[i]);
            }
            // the g of every document's first token has an exact zero gradient
            for (int64_t t = 0; t < T; t++)
                if (pos[t] == 0)
                    for (int64_t j = 0; j < d.hv; j++) CHECK_TRUE(P[5][t * d.hv + j] == 0.0f);

            // (c) NULL and one document per sequence == the plain entry points
            vi ident(T);
            for (int64_t t = 0; t < T; t++) ident[t] = (int32_t)(t % D.S);
            vf U[7], N[7], I[7];
            core_run<float>(true, c, g, beta, d_o, nullptr, D.b, D.S, d, U);
            core_run<float>(false, c, g, beta, d_o, nullptr, D.b, D.S, d, N);
            core_run<float>(false, c, g, beta, d_o, ident.data(), D.b, D.S, d, I);
            for (int i = 0; i < 7; i++) {
                CHECK_TRUE_TEXT(same(U[i], N[i]), names[i]);
                CHECK_TRUE_TEXT(same(U[i], I[i]), names[i]);
            }
            CHECK_TRUE_TEXT(!same(U[0], P[0]), "core: packing changed nothing");
        }
    }
}

TEST(packing_core, backward_f64_matches_finite_differences)
{
    const docs_t &D = DOCS13;
    const core_dims d = {2, 3, 4, 2, 4};
    const int64_t T = D.b * D.S, C = d.Cc(), nch = (D.S + d.chunk - 1) / d.chunk;
    uint64_t seed = 811;
    vd c = rnd(&seed, T * C, 1.0), g = real_g(&seed, T * d.hv), beta = real_beta(&seed, T * d.hv);
    vd R = rnd(&seed, T * d.hv * d.dv, 1.0);
    vd o(T * d.hv * d.dv), states(D.b * d.hv * nch * d.dk * d.dv), rq(T * d.hk), rk(T * d.hk);
    const double qs = 1.0 / sqrt((double)d.dk), eps = 1e-6;
    vi pos = D.pos();
    auto loss = [&]() {
        qt_gdn_core_fwd_pos_f64(o.data(), states.data(), rq.data(), rk.data(), c.data(),
                                g.data(), beta.data(), pos.data(), D.b, D.S, d.hk, d.dk, d.hv,
                                d.dv, d.chunk, qs, eps);
        return dot(o, R);
    };
    loss();
    vd dc(c.size(), 0.0), dg(g.size(), 0.0), db(beta.size(), 0.0);
    vd scratch(QT_GDN_CORE_SCRATCH(d.chunk, d.dk, d.dv));
    qt_gdn_core_bwd_pos_f64(dc.data(), dg.data(), db.data(), states.data(), rq.data(),
                            rk.data(), R.data(), c.data(), g.data(), beta.data(), pos.data(),
                            scratch.data(), D.b, D.S, d.hk, d.dk, d.hv, d.dv, d.chunk, qs);
    for (int64_t t = 0; t < T; t++)
        if (pos[t] == 0)
            for (int64_t j = 0; j < d.hv; j++) CHECK_TRUE(dg[t * d.hv + j] == 0.0);
    check_fd("packed core dc", dc, c, loss);
    check_fd("packed core dg", dg, g, loss);
    check_fd("packed core dbeta", db, beta, loss);
    report_fd("packed gdn core");
}
