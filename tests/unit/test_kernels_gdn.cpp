// test_kernels_gdn.cpp - Gated DeltaNet kernels (gdn_conv, gdn_gates, gdn_core,
// gated_rmsnorm) without goldens: backward of the double kernels against central finite
// differences, float against double, chunk-size invariance and no leak across sequences,
// and the op wrappers (ops_gdn.c) against direct kernel calls through a hand-built plan.
//
// Cases are random but seeded, with r = Hv/Hk > 1, b >= 2 sequences, sequence lengths that
// are not multiples of the chunk, and g = -exp(U)*softplus(x) in its realistic range.
#include <functional>
#include <vector>

#include "qt_test_fd.h"

#include "CppUTest/TestHarness.h"

extern "C" {
#include "ops/qt_op_fns.h"
}
#include "kernels/gated_rmsnorm.h"
#include "kernels/gdn_conv.h"
#include "kernels/gdn_core.h"
#include "kernels/gdn_gates.h"
extern "C" {
#include "math/qt_math.h"  // qt_expf: the kernels' exp (C linkage)
}
#include "qt_test_util.h"

typedef std::vector<double> vecd;
typedef std::vector<float> vecf;

// Central differences with step 1e-5 in double: truncation ~h^2*|f'''| ~ 1e-10 and
// rounding ~1e-16*|L|/h ~ 1e-10 for these O(1..10) losses, so 1e-6 relative to the largest
// gradient leaves four orders of margin while any wrong term (>= 1e-3) fails.
static const double FD_H = 1e-5;
static const double FD_TOL = 1e-6;
// float kernels against the double kernels on the same (float-representable) inputs:
// a few hundred float roundings of O(1) values, 1e-5 relative to the tensor's max.
static const double F32_TOL = 1e-5;

static vecd rand_vec(uint64_t *s, size_t n, double scale)
{
    vecd v(n);
    for (size_t i = 0; i < n; i++) v[i] = (double)(float)(scale * qt_test_rand(s));
    return v;
}

static vecf to_f(const vecd &v)
{
    vecf f(v.size());
    for (size_t i = 0; i < v.size(); i++) f[i] = (float)v[i];
    return f;
}

static double dot(const vecd &a, const vecd &b)
{
    double s = 0.0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

// Numerical gradient of loss() with respect to every element of x.

static void check_fd(const char *what, const vecd &analytic, vecd &x,
                     const std::function<double()> &loss)
{
    vecd num = qt_test_numgrad(x, FD_H, loss);
    double e = qt_test_rel_err_f64(what, analytic.data(), num.data(), num.size(), FD_TOL);
    CHECK_TRUE_TEXT(e <= FD_TOL, what);
}

static void check_f32(const char *what, const vecf &got, const vecd &want, double tol)
{
    double e = qt_test_rel_err_f32(what, got.data(), want.data(), want.size(), tol);
    CHECK_TRUE_TEXT(e <= tol, what);
}

static bool same_bits(const vecf &a, const vecf &b)
{
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// g = -exp(u) * softplus(x), u in [-2, 1], x in [-3, 3]: decays exp(g) from ~0.9 to ~e^-9.
static vecd realistic_g(uint64_t *s, size_t n)
{
    vecd g(n);
    for (size_t i = 0; i < n; i++) {
        double u = -0.5 + 1.5 * qt_test_rand(s), x = 3.0 * qt_test_rand(s);
        g[i] = (double)(float)(-exp(u) * log1p(exp(x)));
    }
    return g;
}

static vecd rand_beta(uint64_t *s, size_t n)
{
    vecd b(n);
    for (size_t i = 0; i < n; i++) b[i] = (double)(float)(1.0 / (1.0 + exp(-2.0 * qt_test_rand(s))));
    return b;
}

namespace {  // test-local types: no clash with other test files in the same binary
struct gdn_dims {
    int64_t b, S, hk, dk, hv, dv, K, chunk;
    int64_t T() const { return b * S; }
    int64_t r() const { return hv / hk; }
    int64_t G() const { return 2 * dk + 2 * r() * dv; }
    int64_t W() const { return hk * G(); }
    int64_t Cc() const { return 2 * hk * dk + hv * dv; }
    int64_t nch() const { return (S + chunk - 1) / chunk; }
    bool is_z_col(int64_t col) const { return col % G() >= 2 * dk + r() * dv; }
};
}  // namespace

// ------------------------------------------------------------------ gdn_conv
TEST_GROUP(gdn_conv){};

TEST(gdn_conv, backward_matches_finite_differences)
{
    gdn_dims d = {2, 5, 2, 3, 4, 2, 4, 1};
    uint64_t seed = 11;
    vecd qkvz = rand_vec(&seed, d.T() * d.W(), 1.0), w = rand_vec(&seed, d.Cc() * d.K, 0.7);
    vecd R = rand_vec(&seed, d.T() * d.Cc(), 1.0);
    vecd c(R.size()), pre(R.size());
    auto loss = [&]() {
        qt_gdn_conv_fwd_f64(c.data(), pre.data(), qkvz.data(), w.data(), d.b, d.S, d.hk, d.dk,
                            d.hv, d.dv, d.K);
        return dot(c, R);
    };
    loss();
    vecd dqkvz(qkvz.size(), 0.0), dw(w.size(), 0.0);
    qt_gdn_conv_bwd_f64(dqkvz.data(), pre.data(), R.data(), w.data(), d.b, d.S, d.hk, d.dk,
                        d.hv, d.dv, d.K);
    for (int64_t s = 0; s < d.b; s++)
        qt_gdn_conv_wgrad_f64(dw.data(), pre.data() + s * d.S * d.Cc(),
                              R.data() + s * d.S * d.Cc(), qkvz.data() + s * d.S * d.W(),
                              d.S, d.hk, d.dk, d.hv, d.dv, d.K);
    for (int64_t t = 0; t < d.T(); t++)
        for (int64_t col = 0; col < d.W(); col++)
            if (d.is_z_col(col)) DOUBLES_EQUAL(0.0, dqkvz[t * d.W() + col], 0.0);  // untouched
    check_fd("conv dqkvz", dqkvz, qkvz, loss);
    check_fd("conv dw", dw, w, loss);
}

TEST(gdn_conv, float_matches_double_and_no_leak_across_sequences)
{
    gdn_dims d = {3, 6, 2, 4, 6, 3, 4, 1};
    uint64_t seed = 12;
    vecd qkvz = rand_vec(&seed, d.T() * d.W(), 1.0), w = rand_vec(&seed, d.Cc() * d.K, 0.7);
    vecd R = rand_vec(&seed, d.T() * d.Cc(), 1.0);
    size_t nc = d.T() * d.Cc();
    vecd c(nc), pre(nc), dq(qkvz.size(), 0.0), dw(w.size(), 0.0);
    qt_gdn_conv_fwd_f64(c.data(), pre.data(), qkvz.data(), w.data(), d.b, d.S, d.hk, d.dk, d.hv,
                        d.dv, d.K);
    qt_gdn_conv_bwd_f64(dq.data(), pre.data(), R.data(), w.data(), d.b, d.S, d.hk, d.dk, d.hv,
                        d.dv, d.K);
    qt_gdn_conv_wgrad_f64(dw.data(), pre.data(), R.data(), qkvz.data(), d.S, d.hk, d.dk, d.hv,
                          d.dv, d.K);
    vecf qf = to_f(qkvz), wf = to_f(w), Rf = to_f(R), cf(nc), pf(nc), dqf(qkvz.size(), 0.0f),
         dwf(w.size(), 0.0f);
    qt_gdn_conv_fwd(cf.data(), pf.data(), qf.data(), wf.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv,
                    d.K);
    qt_gdn_conv_bwd(dqf.data(), pf.data(), Rf.data(), wf.data(), d.b, d.S, d.hk, d.dk, d.hv,
                    d.dv, d.K);
    qt_gdn_conv_wgrad(dwf.data(), pf.data(), Rf.data(), qf.data(), d.S, d.hk, d.dk, d.hv, d.dv,
                      d.K);
    check_f32("conv c f32", cf, c, F32_TOL);
    check_f32("conv dqkvz f32", dqf, dq, F32_TOL);
    check_f32("conv dw f32 (seq 0)", dwf, dw, F32_TOL);

    // change sequence 1 only: sequences 0 and 2 keep every output bit
    vecf q2 = qf;
    for (int64_t i = d.S * d.W(); i < 2 * d.S * d.W(); i++) q2[i] = q2[i] * 1.5f + 0.25f;
    vecf c2(nc), p2(nc);
    qt_gdn_conv_fwd(c2.data(), p2.data(), q2.data(), wf.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv,
                    d.K);
    size_t seq = d.S * d.Cc();
    CHECK(memcmp(c2.data(), cf.data(), seq * sizeof(float)) == 0);
    CHECK(memcmp(c2.data() + 2 * seq, cf.data() + 2 * seq, seq * sizeof(float)) == 0);
    CHECK(memcmp(c2.data() + seq, cf.data() + seq, seq * sizeof(float)) != 0);
}

// The tiled bwd / wgrad must reproduce the untiled references bit for bit (same terms in the
// same order per element): widths above one 64-channel tile, S spanning several token tiles
// (tile = 96 - (K-1) rows), K = 1, 4 and 5, and non-zero gradient buffers (they accumulate).
TEST(gdn_conv, tiled_bwd_and_wgrad_bit_identical_to_reference)
{
    const gdn_dims cases[] = {{2, 201, 1, 70, 2, 9, 4, 1}, {3, 97, 2, 5, 4, 66, 5, 1},
                              {1, 40, 2, 3, 2, 4, 1, 1}};
    for (const gdn_dims &d : cases) {
        uint64_t seed = 15 + (uint64_t)d.S;
        size_t nc = d.T() * d.Cc();
        vecd qkvz = rand_vec(&seed, d.T() * d.W(), 1.0), w = rand_vec(&seed, d.Cc() * d.K, 0.7);
        vecd R = rand_vec(&seed, nc, 1.0), dq0 = rand_vec(&seed, qkvz.size(), 0.5);
        vecd dw0 = rand_vec(&seed, w.size(), 0.5);
        vecf qf = to_f(qkvz), wf = to_f(w), Rf = to_f(R), cf(nc), pf(nc);
        qt_gdn_conv_fwd(cf.data(), pf.data(), qf.data(), wf.data(), d.b, d.S, d.hk, d.dk, d.hv,
                        d.dv, d.K);
        vecf dqa = to_f(dq0), dqb = dqa, dwa = to_f(dw0), dwb = dwa;
        qt_gdn_conv_bwd(dqa.data(), pf.data(), Rf.data(), wf.data(), d.b, d.S, d.hk, d.dk, d.hv,
                        d.dv, d.K);
        qt_gdn_conv_bwd_ref(dqb.data(), pf.data(), Rf.data(), wf.data(), d.b, d.S, d.hk, d.dk,
                            d.hv, d.dv, d.K);
        CHECK_TRUE_TEXT(same_bits(dqa, dqb), "conv bwd tiled != ref (float)");
        CHECK_TRUE_TEXT(!same_bits(dqa, to_f(dq0)), "conv bwd added nothing");
        for (int64_t s = 0; s < d.b; s++) {
            size_t o = s * d.S * d.Cc(), oq = s * d.S * d.W();
            qt_gdn_conv_wgrad(dwa.data(), pf.data() + o, Rf.data() + o, qf.data() + oq, d.S,
                              d.hk, d.dk, d.hv, d.dv, d.K);
            qt_gdn_conv_wgrad_ref(dwb.data(), pf.data() + o, Rf.data() + o, qf.data() + oq, d.S,
                                  d.hk, d.dk, d.hv, d.dv, d.K);
        }
        CHECK_TRUE_TEXT(same_bits(dwa, dwb), "conv wgrad tiled != ref (float)");
        CHECK_TRUE_TEXT(!same_bits(dwa, to_f(dw0)), "conv wgrad added nothing");

        vecd c(nc), pre(nc), da = dq0, db = dq0, wa = dw0, wb = dw0;
        qt_gdn_conv_fwd_f64(c.data(), pre.data(), qkvz.data(), w.data(), d.b, d.S, d.hk, d.dk,
                            d.hv, d.dv, d.K);
        qt_gdn_conv_bwd_f64(da.data(), pre.data(), R.data(), w.data(), d.b, d.S, d.hk, d.dk,
                            d.hv, d.dv, d.K);
        qt_gdn_conv_bwd_ref_f64(db.data(), pre.data(), R.data(), w.data(), d.b, d.S, d.hk, d.dk,
                                d.hv, d.dv, d.K);
        CHECK_TRUE_TEXT(memcmp(da.data(), db.data(), da.size() * sizeof(double)) == 0,
                        "conv bwd tiled != ref (double)");
        qt_gdn_conv_wgrad_f64(wa.data(), pre.data(), R.data(), qkvz.data(), d.S, d.hk, d.dk,
                              d.hv, d.dv, d.K);
        qt_gdn_conv_wgrad_ref_f64(wb.data(), pre.data(), R.data(), qkvz.data(), d.S, d.hk,
                                  d.dk, d.hv, d.dv, d.K);
        CHECK_TRUE_TEXT(memcmp(wa.data(), wb.data(), wa.size() * sizeof(double)) == 0,
                        "conv wgrad tiled != ref (double)");
    }
}

// A token block's weight-gradient leaf (context_blocks, docs/context.md): wgrad_rows over
// [t0, t1) reads the K-1 tokens before t0, so in double the block leaves of a sequence add
// up to its whole-sequence gradient (to 1e-12 relative: only the summation order differs);
// in float the tiled rows path equals the rows reference bit for bit; the first block
// equals the whole-sequence kernel on its rows (no halo at t0 = 0).
TEST(gdn_conv, block_leaves_sum_to_the_sequence_and_tiled_equals_reference)
{
    const gdn_dims d = {1, 24, 2, 5, 4, 6, 4, 1};
    uint64_t seed = 77;
    size_t nc = d.T() * d.Cc();
    vecd qkvz = rand_vec(&seed, d.T() * d.W(), 1.0), w = rand_vec(&seed, d.Cc() * d.K, 0.7);
    vecd R = rand_vec(&seed, nc, 1.0), c(nc), pre(nc);
    qt_gdn_conv_fwd_f64(c.data(), pre.data(), qkvz.data(), w.data(), d.b, d.S, d.hk, d.dk, d.hv,
                        d.dv, d.K);
    vecd whole(w.size(), 0.0), sum(w.size(), 0.0);
    qt_gdn_conv_wgrad_f64(whole.data(), pre.data(), R.data(), qkvz.data(), d.S, d.hk, d.dk,
                          d.hv, d.dv, d.K);
    for (int64_t nbt : {2, 4, 8}) {
        std::fill(sum.begin(), sum.end(), 0.0);
        const int64_t L = d.S / nbt;
        for (int64_t blk = 0; blk < nbt; blk++) {
            vecd leaf(w.size(), 0.0);
            qt_gdn_conv_wgrad_rows_f64(leaf.data(), pre.data(), R.data(), qkvz.data(), blk * L,
                                       (blk + 1) * L, d.hk, d.dk, d.hv, d.dv, d.K);
            for (size_t i = 0; i < sum.size(); i++) sum[i] += leaf[i];
        }
        double worst = 0.0, scale = 0.0;
        for (size_t i = 0; i < sum.size(); i++) {
            worst = std::max(worst, std::fabs(sum[i] - whole[i]));
            scale = std::max(scale, std::fabs(whole[i]));
        }
        CHECK_TRUE_TEXT(worst <= 1e-12 * scale, "block leaves do not add up to the sequence");
    }
    vecf qf = to_f(qkvz), wf = to_f(w), Rf = to_f(R), cf(nc), pf(nc);
    qt_gdn_conv_fwd(cf.data(), pf.data(), qf.data(), wf.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv,
                    d.K);
    for (int64_t t0 : {0, 3, 8, 20}) {
        vecf a(w.size(), 0.0f), b(w.size(), 0.0f);
        qt_gdn_conv_wgrad_rows(a.data(), pf.data(), Rf.data(), qf.data(), t0, d.S, d.hk, d.dk,
                               d.hv, d.dv, d.K);
        qt_gdn_conv_wgrad_rows_ref(b.data(), pf.data(), Rf.data(), qf.data(), t0, d.S, d.hk,
                                   d.dk, d.hv, d.dv, d.K);
        CHECK_TRUE_TEXT(same_bits(a, b), "conv wgrad rows tiled != ref (float)");
    }
    vecf first(w.size(), 0.0f), head(w.size(), 0.0f);
    qt_gdn_conv_wgrad_rows(first.data(), pf.data(), Rf.data(), qf.data(), 0, 6, d.hk, d.dk,
                           d.hv, d.dv, d.K);
    qt_gdn_conv_wgrad(head.data(), pf.data(), Rf.data(), qf.data(), 6, d.hk, d.dk, d.hv, d.dv,
                      d.K);
    CHECK_TRUE_TEXT(same_bits(first, head), "first block != whole-sequence kernel on its rows");
}

// ------------------------------------------------------------------ gdn_gates
// The fast fwd / bwd / wgrad_rows (row by row over channel chunks, eight lanes, the lane
// forms of SiLU and sigmoid) against the scalar references, 0 ulp, float and double: the
// bench model's shape (Hk 4, Dk 64, Hv 8, Dv 64, K 4: one chunk of 1024 channels, 1024
// tokens), odd widths (lane tails of 1..7 channels), several chunks (K 5 at Cc 946: a
// chunk boundary inside a block; K 32: chunks of 128 channels), more blocks than a chunk's
// 64 pieces (Dk = Dv = 1, 160 blocks), K 1 and K 33 (the reference fallback); every case
// with and without packed documents (pos: documents of 1..40 tokens), the weight gradient
// over a whole sequence and over a block of rows (t0 > 0), outputs accumulated onto
// nonzero values, and inputs scaled so that some pre-activations pass the exp clamps.
TEST(gdn_conv, fast_paths_bit_identical_to_reference)
{
    const gdn_dims cases[] = {{4, 256, 4, 64, 8, 64, 4, 1}, {2, 67, 3, 5, 6, 9, 4, 1},
                              {1, 50, 2, 70, 6, 111, 5, 1}, {2, 41, 2, 96, 4, 80, 32, 1},
                              {1, 30, 32, 1, 96, 1, 3, 1}, {2, 23, 1, 7, 2, 3, 1, 1},
                              {1, 45, 1, 9, 2, 6, 33, 1}};
    for (const gdn_dims &d : cases) {
        for (int packed = 0; packed < 2; packed++) {
            uint64_t seed = 901 + (uint64_t)d.S * 7 + (uint64_t)packed;
            const size_t nc = d.T() * d.Cc();
            std::vector<int32_t> pos(d.T());
            for (int64_t s = 0; s < d.b; s++) {
                int64_t start = 0, len = 1 + (int64_t)(40.0 * fabs(qt_test_rand(&seed)));
                for (int64_t t = 0; t < d.S; t++) {
                    if (t - start >= len) {
                        start = t;
                        len = 1 + (int64_t)(40.0 * fabs(qt_test_rand(&seed)));
                    }
                    pos[s * d.S + t] = (int32_t)(t - start);
                }
            }
            const int32_t *P = packed ? pos.data() : nullptr;
            vecd qkvz = rand_vec(&seed, d.T() * d.W(), d.S == 256 ? 1.5 : 60.0);
            vecd w = rand_vec(&seed, d.Cc() * d.K, 0.9), R = rand_vec(&seed, nc, 1.0);
            vecd dq0 = rand_vec(&seed, qkvz.size(), 0.5), dw0 = rand_vec(&seed, w.size(), 0.5);
            const int64_t t0 = d.S / 3, S = d.S;
            {  // float
                vecf qf = to_f(qkvz), wf = to_f(w), Rf = to_f(R);
                vecf ca(nc), pa(nc), cb(nc), pb(nc);
                qt_gdn_conv_fwd_pos(ca.data(), pa.data(), qf.data(), wf.data(), P, d.b, S, d.hk,
                                    d.dk, d.hv, d.dv, d.K);
                qt_gdn_conv_fwd_ref_pos(cb.data(), pb.data(), qf.data(), wf.data(), P, d.b, S,
                                        d.hk, d.dk, d.hv, d.dv, d.K);
                CHECK_TRUE_TEXT(same_bits(pa, pb), "conv fwd pre fast != ref (float)");
                CHECK_TRUE_TEXT(same_bits(ca, cb), "conv fwd silu fast != ref (float)");
                vecf da = to_f(dq0), db = da;
                qt_gdn_conv_bwd_pos(da.data(), pa.data(), Rf.data(), wf.data(), P, d.b, S, d.hk,
                                    d.dk, d.hv, d.dv, d.K);
                qt_gdn_conv_bwd_ref_pos(db.data(), pa.data(), Rf.data(), wf.data(), P, d.b, S,
                                        d.hk, d.dk, d.hv, d.dv, d.K);
                CHECK_TRUE_TEXT(same_bits(da, db), "conv bwd fast != ref (float)");
                CHECK_TRUE_TEXT(!same_bits(da, to_f(dq0)), "conv bwd added nothing");
                for (int64_t lo : {(int64_t)0, t0}) {
                    vecf wa = to_f(dw0), wb = wa;
                    for (int64_t s = 0; s < d.b; s++) {
                        const size_t o = s * S * d.Cc(), oq = s * S * d.W();
                        const int32_t *Ps = P ? P + s * S : nullptr;
                        qt_gdn_conv_wgrad_rows_pos(wa.data(), pa.data() + o, Rf.data() + o,
                                                   qf.data() + oq, Ps, lo, S, d.hk, d.dk, d.hv,
                                                   d.dv, d.K);
                        qt_gdn_conv_wgrad_rows_ref_pos(wb.data(), pa.data() + o, Rf.data() + o,
                                                       qf.data() + oq, Ps, lo, S, d.hk, d.dk,
                                                       d.hv, d.dv, d.K);
                    }
                    CHECK_TRUE_TEXT(same_bits(wa, wb), "conv wgrad rows fast != ref (float)");
                    CHECK_TRUE_TEXT(!same_bits(wa, to_f(dw0)), "conv wgrad added nothing");
                }
            }
            {  // double (the _f64 build of the same source)
                vecd ca(nc), pa(nc), cb(nc), pb(nc);
                qt_gdn_conv_fwd_pos_f64(ca.data(), pa.data(), qkvz.data(), w.data(), P, d.b, S,
                                        d.hk, d.dk, d.hv, d.dv, d.K);
                qt_gdn_conv_fwd_ref_pos_f64(cb.data(), pb.data(), qkvz.data(), w.data(), P, d.b,
                                            S, d.hk, d.dk, d.hv, d.dv, d.K);
                CHECK_TRUE_TEXT(memcmp(pa.data(), pb.data(), nc * sizeof(double)) == 0 &&
                                    memcmp(ca.data(), cb.data(), nc * sizeof(double)) == 0,
                                "conv fwd fast != ref (double)");
                vecd da = dq0, db = dq0;
                qt_gdn_conv_bwd_pos_f64(da.data(), pa.data(), R.data(), w.data(), P, d.b, S,
                                        d.hk, d.dk, d.hv, d.dv, d.K);
                qt_gdn_conv_bwd_ref_pos_f64(db.data(), pa.data(), R.data(), w.data(), P, d.b, S,
                                            d.hk, d.dk, d.hv, d.dv, d.K);
                CHECK_TRUE_TEXT(memcmp(da.data(), db.data(), da.size() * sizeof(double)) == 0,
                                "conv bwd fast != ref (double)");
                vecd wa = dw0, wb = dw0;
                qt_gdn_conv_wgrad_rows_pos_f64(wa.data(), pa.data(), R.data(), qkvz.data(), P, t0,
                                               S, d.hk, d.dk, d.hv, d.dv, d.K);
                qt_gdn_conv_wgrad_rows_ref_pos_f64(wb.data(), pa.data(), R.data(), qkvz.data(), P,
                                                   t0, S, d.hk, d.dk, d.hv, d.dv, d.K);
                CHECK_TRUE_TEXT(memcmp(wa.data(), wb.data(), wa.size() * sizeof(double)) == 0,
                                "conv wgrad rows fast != ref (double)");
            }
        }
    }
}

TEST_GROUP(gdn_gates){};

TEST(gdn_gates, backward_matches_finite_differences_and_float)
{
    const int64_t b = 2, S = 3, T = b * S, hk = 2, hv = 6;
    uint64_t seed = 21;
    vecd ba = rand_vec(&seed, T * 2 * hv, 3.0);
    vecd a_log(hv), dt(hv);
    for (int64_t j = 0; j < hv; j++) {
        a_log[j] = (double)(float)log(1.0 + 7.5 * (1.0 + qt_test_rand(&seed)));  // log U(1,16)
        dt[j] = (double)(float)(1.0 + 0.3 * qt_test_rand(&seed));
    }
    vecd Rb = rand_vec(&seed, T * hv, 1.0), Rg = rand_vec(&seed, T * hv, 1.0);
    vecd beta(T * hv), g(T * hv);
    auto loss = [&]() {
        qt_gdn_gates_fwd_f64(beta.data(), g.data(), ba.data(), a_log.data(), dt.data(), T, hk, hv);
        return dot(beta, Rb) + dot(g, Rg);
    };
    loss();
    vecd dba(ba.size(), 0.0), dal(hv, 0.0), ddt(hv, 0.0);
    qt_gdn_gates_bwd_f64(dba.data(), Rb.data(), Rg.data(), ba.data(), a_log.data(), dt.data(), T,
                         hk, hv);
    for (int64_t s = 0; s < b; s++)
        qt_gdn_gates_wgrad_f64(dal.data(), ddt.data(), Rg.data() + s * S * hv,
                               ba.data() + s * S * 2 * hv, a_log.data(), dt.data(), S, hk, hv);
    check_fd("gates dba", dba, ba, loss);
    check_fd("gates dA_log", dal, a_log, loss);
    check_fd("gates ddt_bias", ddt, dt, loss);
    loss();  // the finite differences left beta, g at a perturbed input

    vecf baf = to_f(ba), alf = to_f(a_log), dtf = to_f(dt), Rbf = to_f(Rb), Rgf = to_f(Rg);
    vecf bf(T * hv), gf(T * hv), dbaf(ba.size(), 0.0f), dalf(hv, 0.0f), ddtf(hv, 0.0f);
    qt_gdn_gates_fwd(bf.data(), gf.data(), baf.data(), alf.data(), dtf.data(), T, hk, hv);
    qt_gdn_gates_bwd(dbaf.data(), Rbf.data(), Rgf.data(), baf.data(), alf.data(), dtf.data(), T,
                     hk, hv);
    for (int64_t s = 0; s < b; s++)
        qt_gdn_gates_wgrad(dalf.data(), ddtf.data(), Rgf.data() + s * S * hv,
                           baf.data() + s * S * 2 * hv, alf.data(), dtf.data(), S, hk, hv);
    check_f32("gates beta f32", bf, beta, F32_TOL);
    check_f32("gates g f32", gf, g, F32_TOL);
    check_f32("gates dba f32", dbaf, dba, F32_TOL);
    check_f32("gates dA_log f32", dalf, dal, F32_TOL);
    check_f32("gates ddt_bias f32", ddtf, ddt, F32_TOL);
}

// ------------------------------------------------------------------ gdn_core
namespace {
struct core_case {
    gdn_dims d;
    vecd c, g, beta, R;
    double qscale, eps;
    core_case(const gdn_dims &dd, uint64_t seed) : d(dd), eps((double)1e-6f)
    {
        c = rand_vec(&seed, d.T() * d.Cc(), 1.0);
        g = realistic_g(&seed, d.T() * d.hv);
        beta = rand_beta(&seed, d.T() * d.hv);
        R = rand_vec(&seed, d.T() * d.hv * d.dv, 1.0);
        qscale = (double)(float)(1.0 / sqrt((double)d.dk));
    }
};

struct core_out64 {
    vecd o, states, rq, rk, dc, dg, dbeta;
};

static core_out64 core_run64(const core_case &k, bool bwd)
{
    const gdn_dims &d = k.d;
    core_out64 r;
    r.o.assign(d.T() * d.hv * d.dv, 0.0);
    r.states.assign(d.b * d.hv * d.nch() * d.dk * d.dv, 0.0);
    r.rq.assign(d.T() * d.hk, 0.0);
    r.rk.assign(d.T() * d.hk, 0.0);
    qt_gdn_core_fwd_f64(r.o.data(), r.states.data(), r.rq.data(), r.rk.data(), k.c.data(),
                        k.g.data(), k.beta.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.chunk,
                        k.qscale, k.eps);
    if (!bwd) return r;
    vecd scratch(QT_GDN_CORE_SCRATCH(d.chunk, d.dk, d.dv), 0.0);
    r.dc.assign(k.c.size(), 0.0);
    r.dg.assign(k.g.size(), 0.0);
    r.dbeta.assign(k.beta.size(), 0.0);
    qt_gdn_core_bwd_f64(r.dc.data(), r.dg.data(), r.dbeta.data(), r.states.data(), r.rq.data(),
                        r.rk.data(), k.R.data(), k.c.data(), k.g.data(), k.beta.data(),
                        scratch.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.chunk, k.qscale,
                        k.eps);
    return r;
}

struct core_outf {
    vecf o, states, rq, rk, dc, dg, dbeta;
};
}  // namespace

// ref: through the *_ref kernels (the scalar step only) instead of the kernels.
static core_outf core_runf(const core_case &k, int64_t chunk, bool ref = false)
{
    const gdn_dims &d = k.d;
    int64_t nch = (d.S + chunk - 1) / chunk;
    vecf c = to_f(k.c), g = to_f(k.g), beta = to_f(k.beta), R = to_f(k.R);
    core_outf r;
    r.o.assign(d.T() * d.hv * d.dv, 0.0f);
    r.states.assign(d.b * d.hv * nch * d.dk * d.dv, 0.0f);
    r.rq.assign(d.T() * d.hk, 0.0f);
    r.rk.assign(d.T() * d.hk, 0.0f);
    (ref ? qt_gdn_core_fwd_ref : qt_gdn_core_fwd)(r.o.data(), r.states.data(), r.rq.data(),
                                                  r.rk.data(), c.data(), g.data(), beta.data(),
                                                  d.b, d.S, d.hk, d.dk, d.hv, d.dv, chunk,
                                                  (float)k.qscale, (float)k.eps);
    vecf scratch(QT_GDN_CORE_SCRATCH(chunk, d.dk, d.dv), 0.0f);
    r.dc.assign(c.size(), 0.0f);
    r.dg.assign(g.size(), 0.0f);
    r.dbeta.assign(beta.size(), 0.0f);
    (ref ? qt_gdn_core_bwd_ref : qt_gdn_core_bwd)(r.dc.data(), r.dg.data(), r.dbeta.data(),
                                                  r.states.data(), r.rq.data(), r.rk.data(),
                                                  R.data(), c.data(), g.data(), beta.data(),
                                                  scratch.data(), d.b, d.S, d.hk, d.dk, d.hv,
                                                  d.dv, chunk, (float)k.qscale, (float)k.eps);
    return r;
}

static void core_fd(const gdn_dims &d, uint64_t seed)
{
    core_case k(d, seed);
    core_out64 a = core_run64(k, true);
    auto loss = [&]() { return dot(core_run64(k, false).o, k.R); };
    check_fd("core dc", a.dc, k.c, loss);
    check_fd("core dg", a.dg, k.g, loss);
    check_fd("core dbeta", a.dbeta, k.beta, loss);
}

TEST_GROUP(gdn_core){};

// b=2, r=2, S=7 with chunk 3 (partial last chunk)
TEST(gdn_core, backward_fd_grouped_heads) { core_fd({2, 7, 2, 4, 4, 3, 0, 3}, 31); }
// b=3, r=3, one key head, S=5 with chunk 2
TEST(gdn_core, backward_fd_r3) { core_fd({3, 5, 1, 3, 3, 2, 0, 2}, 32); }
// r=1, S=9 with chunk 4: single head, Dk != Dv
TEST(gdn_core, backward_fd_r1) { core_fd({1, 9, 1, 5, 1, 4, 0, 4}, 33); }
// Dv = 10: one full 8-lane block plus a tail in the backward's lane sums
TEST(gdn_core, backward_fd_lane_block_and_tail) { core_fd({2, 5, 1, 3, 2, 10, 0, 2}, 39); }
// chunk larger than the sequence (one partial chunk)
TEST(gdn_core, backward_fd_one_chunk) { core_fd({2, 4, 1, 3, 2, 3, 0, 64}, 34); }

TEST(gdn_core, double_forward_matches_naive_recurrence)
{
    // independent straight-line recurrence (no checkpoints), to pin the forward itself
    gdn_dims d = {2, 6, 2, 3, 4, 2, 0, 4};
    core_case k(d, 35);
    core_out64 a = core_run64(k, false);
    vecd want(a.o.size(), 0.0);
    for (int64_t s = 0; s < d.b; s++)
        for (int64_t j = 0; j < d.hv; j++) {
            int64_t h = j / d.r();
            vecd St(d.dk * d.dv, 0.0);
            for (int64_t t = 0; t < d.S; t++) {
                const double *row = &k.c[(s * d.S + t) * d.Cc()];
                const double *q = row + h * d.dk, *kk = row + d.hk * d.dk + h * d.dk;
                const double *v = row + 2 * d.hk * d.dk + j * d.dv;
                double sq = 0, sk = 0;
                for (int64_t i = 0; i < d.dk; i++) { sq += q[i] * q[i]; sk += kk[i] * kk[i]; }
                double rq = 1.0 / sqrt(sq + k.eps), rk = 1.0 / sqrt(sk + k.eps);
                double al = exp(k.g[(s * d.S + t) * d.hv + j]), bt = k.beta[(s * d.S + t) * d.hv + j];
                for (double &x : St) x *= al;
                for (int64_t x = 0; x < d.dv; x++) {
                    double pred = 0;
                    for (int64_t i = 0; i < d.dk; i++) pred += St[i * d.dv + x] * kk[i] * rk;
                    double delta = bt * (v[x] - pred);
                    for (int64_t i = 0; i < d.dk; i++) St[i * d.dv + x] += kk[i] * rk * delta;
                }
                for (int64_t x = 0; x < d.dv; x++) {
                    double o = 0;
                    for (int64_t i = 0; i < d.dk; i++) o += St[i * d.dv + x] * q[i] * rq * k.qscale;
                    want[(s * d.S + t) * d.hv * d.dv + j * d.dv + x] = o;
                }
            }
        }
    double e = qt_test_rel_err_f64("core o vs naive", a.o.data(), want.data(), want.size(), 1e-13);
    CHECK(e <= 1e-13);  // same math, different rounding order: a few ulp
}

// The vector paths (AVX-512, Dv a multiple of 64: the blocked forward and recomputation,
// the backward's passes at Dv 64 and 128) against the scalar step, 0 ulp in every output of
// the forward and the backward; Dv 64, 128 and 192 take the vector paths, Dv 40 the scalar
// one in both. The model's shapes (Dk = Dv = 64 and 128) with several S: shorter than a
// chunk, whole chunks, a partial last chunk, one token; the last two run the backward's
// recomputation in sub-chunks (gdn_core.c qt_gdn_bwd_sub: 16 and 32 tokens there, the
// chunk not a multiple of them); odd Dk (13, 7: the backward's row pairs and 8-row groups
// end with a single row).
TEST(gdn_core, vector_step_bit_identical_to_scalar)
{
    const gdn_dims ds[] = {{2, 9, 2, 16, 4, 64, 0, 4},    {1, 7, 1, 24, 2, 128, 0, 3},
                           {1, 5, 1, 8, 1, 192, 0, 8},    {1, 6, 1, 8, 2, 40, 0, 4},
                           {2, 37, 2, 64, 4, 64, 0, 16},  {1, 48, 1, 64, 2, 64, 0, 16},
                           {1, 41, 1, 128, 2, 128, 0, 8}, {2, 11, 1, 128, 1, 128, 0, 64},
                           {1, 1, 1, 64, 2, 128, 0, 4},   {1, 20, 2, 128, 2, 64, 0, 6},
                           {1, 70, 1, 128, 2, 128, 0, 40}, {1, 100, 1, 128, 1, 64, 0, 48},
                           {1, 9, 1, 13, 2, 64, 0, 4},    {1, 12, 1, 7, 1, 128, 0, 5},
                           // the bench model's heads (Dk = Dv = 64, chunk 64) over two whole
                           // chunks and a partial one; the 80B's (128) over a chunk boundary
                           // with a one-token last chunk (the sweeps' accumulators in registers)
                           {2, 130, 2, 64, 4, 64, 0, 64}, {1, 129, 1, 128, 2, 128, 0, 64}};
    uint64_t seed = 41;
    for (const gdn_dims &d : ds) {
        core_case k(d, seed++);
        core_outf v = core_runf(k, d.chunk), r = core_runf(k, d.chunk, true);
        auto same = [](const vecf &a, const vecf &b) {
            return a.size() == b.size() && memcmp(a.data(), b.data(), 4 * a.size()) == 0;
        };
        CHECK(same(v.o, r.o));
        CHECK(same(v.states, r.states));
        CHECK(same(v.dc, r.dc));
        CHECK(same(v.dg, r.dg));
        CHECK(same(v.dbeta, r.dbeta));
    }
}

// The FMA contract (gdn_core.h), pinned in the float kernels: a straight-line forward here
// with the contract's operations spelled out (S' = a*S; pred = fma(S', kh, pred) over kk
// increasing; S = fma(kh, delta, S'); o = fma(S, qh, o) over kk increasing), and the same
// recurrence with a separate multiply and add (the contract before the change). The case
// must tell the two apart (most outputs differ), and both the kernel (the AVX-512 paths at
// Dv 64 and 128) and its scalar reference must give the fma recurrence's bits: a fast path
// in the old mul/add form (or one the compiler fused differently) fails here.
static vecf core_contract_fwd(const core_case &k, const vecf &rq, const vecf &rk, bool fused)
{
    const gdn_dims &d = k.d;
    vecf c = to_f(k.c), g = to_f(k.g), beta = to_f(k.beta), o(d.T() * d.hv * d.dv, 0.0f);
    const float qs = (float)k.qscale;
    auto madd = [fused](float x, float y, float z) {
        if (fused) return __builtin_fmaf(x, y, z);
        volatile float p = x * y;  // rounded on its own
        return p + z;
    };
    for (int64_t s = 0; s < d.b; s++)
        for (int64_t j = 0; j < d.hv; j++) {
            const int64_t h = j / d.r();
            vecf St(d.dk * d.dv, 0.0f), kh(d.dk), qh(d.dk), pred(d.dv), del(d.dv);
            for (int64_t t = 0; t < d.S; t++) {
                const int64_t row = s * d.S + t;
                const float *cr = &c[row * d.Cc()];
                for (int64_t i = 0; i < d.dk; i++) {
                    qh[i] = (cr[h * d.dk + i] * rq[row * d.hk + h]) * qs;
                    kh[i] = cr[d.hk * d.dk + h * d.dk + i] * rk[row * d.hk + h];
                }
                const float a = qt_expf(g[row * d.hv + j]), bt = beta[row * d.hv + j];
                const float *v = cr + 2 * d.hk * d.dk + j * d.dv;
                for (int64_t x = 0; x < d.dv; x++) pred[x] = 0.0f;
                for (int64_t i = 0; i < d.dk; i++)
                    for (int64_t x = 0; x < d.dv; x++)
                        pred[x] = madd(a * St[i * d.dv + x], kh[i], pred[x]);
                for (int64_t x = 0; x < d.dv; x++) del[x] = bt * (v[x] - pred[x]);
                float *orow = &o[row * d.hv * d.dv + j * d.dv];
                for (int64_t i = 0; i < d.dk; i++)
                    for (int64_t x = 0; x < d.dv; x++) {
                        float &e = St[i * d.dv + x];
                        e = madd(kh[i], del[x], a * e);
                        orow[x] = madd(e, qh[i], orow[x]);
                    }
            }
        }
    return o;
}

TEST(gdn_core, fma_contract_pinned_in_fast_and_reference_paths)
{
    const gdn_dims ds[] = {{1, 9, 1, 16, 2, 64, 0, 4}, {1, 5, 1, 24, 1, 128, 0, 64},
                           {1, 7, 1, 5, 1, 10, 0, 3}};
    uint64_t seed = 91;
    for (const gdn_dims &d : ds) {
        core_case k(d, seed++);
        core_outf v = core_runf(k, d.chunk), r = core_runf(k, d.chunk, true);
        vecf of = core_contract_fwd(k, v.rq, v.rk, true);
        vecf om = core_contract_fwd(k, v.rq, v.rk, false);
        int64_t differ = 0;
        for (size_t i = 0; i < of.size(); i++) differ += memcmp(&of[i], &om[i], 4) != 0;
        CHECK_TEXT(differ > (int64_t)of.size() / 4, "the case tells fma from mul+add");
        CHECK_TEXT(same_bits(v.o, of), "kernel o == the fma recurrence");
        CHECK_TEXT(same_bits(r.o, of), "reference o == the fma recurrence");
        CHECK_TEXT(!same_bits(v.o, om), "kernel o != the mul+add recurrence");
    }
}

TEST(gdn_core, float_matches_double)
{
    gdn_dims d = {2, 40, 2, 8, 4, 8, 0, 16};
    core_case k(d, 36);
    core_out64 a = core_run64(k, true);
    core_outf f = core_runf(k, d.chunk);
    check_f32("core o f32", f.o, a.o, F32_TOL);
    check_f32("core rq f32", f.rq, a.rq, F32_TOL);
    check_f32("core rk f32", f.rk, a.rk, F32_TOL);
    check_f32("core dc f32", f.dc, a.dc, F32_TOL);
    check_f32("core dg f32", f.dg, a.dg, F32_TOL);
    check_f32("core dbeta f32", f.dbeta, a.dbeta, F32_TOL);
}

TEST(gdn_core, chunk_size_does_not_change_bits)
{
    gdn_dims d = {2, 13, 2, 5, 4, 3, 0, 13};
    core_case k(d, 37);
    core_outf ref = core_runf(k, 13);
    const int64_t chunks[] = {1, 2, 3, 4, 5, 7, 12, 64};
    for (int64_t ch : chunks) {
        core_outf f = core_runf(k, ch);
        CHECK_TEXT(same_bits(f.o, ref.o), "o");
        CHECK_TEXT(same_bits(f.rq, ref.rq) && same_bits(f.rk, ref.rk), "rq/rk");
        CHECK_TEXT(same_bits(f.dc, ref.dc), "dc");
        CHECK_TEXT(same_bits(f.dg, ref.dg), "dg");
        CHECK_TEXT(same_bits(f.dbeta, ref.dbeta), "dbeta");
    }
    // checkpoints are the states at chunk starts: chunk 1 stores every state, so the
    // chunk-4 checkpoints must equal every 4th of them
    core_outf one = core_runf(k, 1), four = core_runf(k, 4);
    int64_t n1 = 13, n4 = 4, dkdv = d.dk * d.dv;
    for (int64_t sj = 0; sj < d.b * d.hv; sj++)
        for (int64_t n = 0; n < n4; n++)
            CHECK(memcmp(&four.states[(sj * n4 + n) * dkdv], &one.states[(sj * n1 + 4 * n) * dkdv],
                         dkdv * sizeof(float)) == 0);
}

TEST(gdn_core, no_leak_across_sequences)
{
    gdn_dims d = {3, 6, 1, 3, 2, 2, 0, 4};
    core_case k(d, 38);
    core_outf ref = core_runf(k, d.chunk);
    core_case k2 = k;
    int64_t s1 = d.S * d.Cc(), sg = d.S * d.hv;
    for (int64_t i = s1; i < 2 * s1; i++) k2.c[i] = (double)(float)(k2.c[i] * 0.5 + 0.3);
    for (int64_t i = sg; i < 2 * sg; i++) k2.g[i] = (double)(float)(k2.g[i] * 0.5);
    core_outf f = core_runf(k2, d.chunk);
    int64_t so = d.S * d.hv * d.dv;
    for (int64_t s = 0; s < d.b; s += 2) {  // sequences 0 and 2 are untouched
        CHECK(memcmp(&f.o[s * so], &ref.o[s * so], so * sizeof(float)) == 0);
        CHECK(memcmp(&f.dc[s * s1], &ref.dc[s * s1], s1 * sizeof(float)) == 0);
        CHECK(memcmp(&f.dg[s * sg], &ref.dg[s * sg], sg * sizeof(float)) == 0);
    }
    CHECK(memcmp(&f.o[so], &ref.o[so], so * sizeof(float)) != 0);
}

// ------------------------------------------------------------------ gated_rmsnorm
TEST_GROUP(gated_rmsnorm){};

// The regrouped backward (heads in groups of 8, dots side by side) against the scalar
// reference, 0 ulp, float and double: the bench model's shape (T 1024, Hk 4, Dk 64, Hv 8,
// Dv 64), a row count that is not a multiple of the group (T*Hv = 21) with an odd Dv,
// Dv 256 (the largest the tile takes) and Dv 257 (the reference fallback); z scaled so some
// values pass the exp clamps; outputs accumulated onto nonzero values.
TEST(gated_rmsnorm, fast_backward_bit_identical_to_reference)
{
    const gdn_dims cases[] = {{1, 1024, 4, 64, 8, 64, 0, 1}, {1, 7, 1, 3, 3, 5, 0, 1},
                              {1, 9, 1, 2, 2, 256, 0, 1}, {1, 5, 1, 2, 1, 257, 0, 1}};
    for (const gdn_dims &d : cases) {
        const int64_t T = d.T(), n = T * d.hv * d.dv;
        uint64_t seed = 4321 + (uint64_t)d.dv;
        vecd o = rand_vec(&seed, n, 2.0), qkvz = rand_vec(&seed, T * d.W(), d.dv == 64 ? 4.0 : 200.0);
        vecd w = rand_vec(&seed, d.dv, 1.0), dy = rand_vec(&seed, n, 1.0);
        vecd do0 = rand_vec(&seed, n, 0.5), dq0 = rand_vec(&seed, qkvz.size(), 0.5);
        vecd y(n), rstd(T * d.hv);
        qt_gated_rmsnorm_fwd_f64(y.data(), rstd.data(), o.data(), qkvz.data(), w.data(), T, d.hk,
                                 d.dk, d.hv, d.dv, (double)1e-6f);
        vecf of = to_f(o), qf = to_f(qkvz), wf = to_f(w), dyf = to_f(dy), yf(n), rf(T * d.hv);
        qt_gated_rmsnorm_fwd(yf.data(), rf.data(), of.data(), qf.data(), wf.data(), T, d.hk, d.dk,
                             d.hv, d.dv, 1e-6f);
        vecf da = to_f(do0), db = da, qa = to_f(dq0), qb = qa;
        qt_gated_rmsnorm_bwd(da.data(), qa.data(), rf.data(), dyf.data(), of.data(), qf.data(),
                             wf.data(), T, d.hk, d.dk, d.hv, d.dv);
        qt_gated_rmsnorm_bwd_ref(db.data(), qb.data(), rf.data(), dyf.data(), of.data(),
                                 qf.data(), wf.data(), T, d.hk, d.dk, d.hv, d.dv);
        CHECK_TRUE_TEXT(same_bits(da, db), "gated norm bwd d_o fast != ref (float)");
        CHECK_TRUE_TEXT(same_bits(qa, qb), "gated norm bwd dz fast != ref (float)");
        CHECK_TRUE_TEXT(!same_bits(da, to_f(do0)) && !same_bits(qa, to_f(dq0)),
                        "gated norm bwd added nothing");
        vecd xa = do0, xb = do0, za = dq0, zb = dq0;
        qt_gated_rmsnorm_bwd_f64(xa.data(), za.data(), rstd.data(), dy.data(), o.data(),
                                 qkvz.data(), w.data(), T, d.hk, d.dk, d.hv, d.dv);
        qt_gated_rmsnorm_bwd_ref_f64(xb.data(), zb.data(), rstd.data(), dy.data(), o.data(),
                                     qkvz.data(), w.data(), T, d.hk, d.dk, d.hv, d.dv);
        CHECK_TRUE_TEXT(memcmp(xa.data(), xb.data(), n * sizeof(double)) == 0 &&
                            memcmp(za.data(), zb.data(), za.size() * sizeof(double)) == 0,
                        "gated norm bwd fast != ref (double)");
    }
}

TEST(gated_rmsnorm, backward_matches_finite_differences_and_float)
{
    gdn_dims d = {2, 3, 2, 3, 4, 4, 0, 1};
    const int64_t T = d.T(), n = T * d.hv * d.dv;
    const double eps = (double)1e-6f;
    uint64_t seed = 41;
    vecd o = rand_vec(&seed, n, 1.0), qkvz = rand_vec(&seed, T * d.W(), 2.0);
    vecd w = rand_vec(&seed, d.dv, 1.0), R = rand_vec(&seed, n, 1.0);
    vecd y(n), rstd(T * d.hv);
    auto loss = [&]() {
        qt_gated_rmsnorm_fwd_f64(y.data(), rstd.data(), o.data(), qkvz.data(), w.data(), T, d.hk,
                                 d.dk, d.hv, d.dv, eps);
        return dot(y, R);
    };
    loss();
    vecd d_o(n, 0.0), dq(qkvz.size(), 0.0), dw(d.dv, 0.0);
    qt_gated_rmsnorm_bwd_f64(d_o.data(), dq.data(), rstd.data(), R.data(), o.data(), qkvz.data(),
                             w.data(), T, d.hk, d.dk, d.hv, d.dv);
    for (int64_t s = 0; s < d.b; s++)
        qt_gated_rmsnorm_wgrad_f64(dw.data(), rstd.data() + s * d.S * d.hv,
                                   R.data() + s * d.S * d.hv * d.dv,
                                   o.data() + s * d.S * d.hv * d.dv,
                                   qkvz.data() + s * d.S * d.W(), d.S, d.hk, d.dk, d.hv, d.dv);
    for (int64_t t = 0; t < T; t++)
        for (int64_t col = 0; col < d.W(); col++)
            if (!d.is_z_col(col)) DOUBLES_EQUAL(0.0, dq[t * d.W() + col], 0.0);  // untouched
    check_fd("gated_rmsnorm do", d_o, o, loss);
    check_fd("gated_rmsnorm dqkvz", dq, qkvz, loss);
    check_fd("gated_rmsnorm dw", dw, w, loss);
    loss();  // the finite differences left y, rstd at a perturbed input

    vecf of = to_f(o), qf = to_f(qkvz), wf = to_f(w), Rf = to_f(R), yf(n), rf(T * d.hv),
         dof(n, 0.0f), dqf(qkvz.size(), 0.0f), dwf(d.dv, 0.0f);
    qt_gated_rmsnorm_fwd(yf.data(), rf.data(), of.data(), qf.data(), wf.data(), T, d.hk, d.dk,
                         d.hv, d.dv, 1e-6f);
    qt_gated_rmsnorm_bwd(dof.data(), dqf.data(), rf.data(), Rf.data(), of.data(), qf.data(),
                         wf.data(), T, d.hk, d.dk, d.hv, d.dv);
    for (int64_t s = 0; s < d.b; s++)
        qt_gated_rmsnorm_wgrad(dwf.data(), rf.data() + s * d.S * d.hv,
                               Rf.data() + s * d.S * d.hv * d.dv,
                               of.data() + s * d.S * d.hv * d.dv, qf.data() + s * d.S * d.W(),
                               d.S, d.hk, d.dk, d.hv, d.dv);
    check_f32("gated_rmsnorm y f32", yf, y, F32_TOL);
    check_f32("gated_rmsnorm rstd f32", rf, rstd, F32_TOL);
    check_f32("gated_rmsnorm do f32", dof, d_o, F32_TOL);
    check_f32("gated_rmsnorm dqkvz f32", dqf, dq, F32_TOL);
    check_f32("gated_rmsnorm dw f32", dwf, dw, F32_TOL);
}

// ------------------------------------------------------------------ op wrappers
// A hand-built plan: each tensor gets a 64-byte aligned region of a static arena.
namespace {
struct mini_plan {
    static const int64_t BYTES = 1 << 20;
    std::vector<qt_tensor> ts;
    std::vector<unsigned char> arena;
    qt_plan plan;
    qt_ctx ctx;
    int64_t used;
    mini_plan() : arena(BYTES + 64, 0), plan(), used(0) {}
    int32_t add(const vecf &init)
    {
        qt_tensor t = qt_tensor();
        t.dtype = QT_F32;
        t.ndim = 1;
        t.shape[0] = t.global_shape[0] = t.numel = (int64_t)init.size();
        t.offset = used;
        used += ((int64_t)init.size() * 4 + 63) / 64 * 64;
        ts.push_back(t);
        memcpy(base() + t.offset, init.data(), init.size() * sizeof(float));
        return (int32_t)ts.size() - 1;
    }
    unsigned char *base()
    {
        uintptr_t p = (uintptr_t)arena.data();
        return arena.data() + ((64 - p % 64) % 64);
    }
    const qt_ctx *finish()
    {
        plan.tensors = ts.data();
        plan.n_tensors = (int32_t)ts.size();
        memset(&ctx, 0, sizeof ctx);
        ctx.plan = &plan;
        ctx.arena = base();
        return &ctx;
    }
    vecf get(int32_t id) const
    {
        const float *p = qt_f32(&ctx, id);
        return vecf(p, p + ts[id].numel);
    }
};
}  // namespace

TEST_GROUP(gdn_ops){};

TEST(gdn_ops, wrappers_read_slots_and_sequences_as_the_contract)
{
    gdn_dims d = {2, 5, 2, 3, 4, 2, 4, 3};
    uint64_t seed = 51;
    const int64_t T = d.T(), nch = d.nch();
    const float qscale = 0.5f, eps = 1e-6f;
    vecf qkvz = to_f(rand_vec(&seed, T * d.W(), 1.0)), w = to_f(rand_vec(&seed, d.Cc() * d.K, 0.7));
    vecf ba = to_f(rand_vec(&seed, T * 2 * d.hv, 2.0)), alog = to_f(rand_vec(&seed, d.hv, 1.0));
    vecf dtb = to_f(rand_vec(&seed, d.hv, 1.0)), nw = to_f(rand_vec(&seed, d.dv, 1.0));
    vecf dy = to_f(rand_vec(&seed, T * d.hv * d.dv, 1.0));
    size_t nc = T * d.Cc(), nh = T * d.hv, no = T * d.hv * d.dv;

    // direct kernel calls: the expected bits
    vecf c(nc), pre(nc), beta(nh), g(nh), o(no), st(d.b * d.hv * nch * d.dk * d.dv), rq(T * d.hk),
        rk(T * d.hk), y(no), rs(nh);
    qt_gdn_conv_fwd(c.data(), pre.data(), qkvz.data(), w.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.K);
    qt_gdn_gates_fwd(beta.data(), g.data(), ba.data(), alog.data(), dtb.data(), T, d.hk, d.hv);
    qt_gdn_core_fwd(o.data(), st.data(), rq.data(), rk.data(), c.data(), g.data(), beta.data(), d.b,
                    d.S, d.hk, d.dk, d.hv, d.dv, d.chunk, qscale, eps);
    qt_gated_rmsnorm_fwd(y.data(), rs.data(), o.data(), qkvz.data(), nw.data(), T, d.hk, d.dk, d.hv,
                         d.dv, eps);
    vecf d_o(no, 0.0f), dqkvz(qkvz.size(), 0.0f), dnw(d.dv, 0.0f), dc(nc, 0.0f), dg(nh, 0.0f),
        dbeta(nh, 0.0f), dba(ba.size(), 0.0f), dal(d.hv, 0.0f), ddt(d.hv, 0.0f), dw(w.size(), 0.0f);
    vecf scratch(QT_GDN_CORE_SCRATCH(d.chunk, d.dk, d.dv), 0.0f);
    qt_gated_rmsnorm_bwd(d_o.data(), dqkvz.data(), rs.data(), dy.data(), o.data(), qkvz.data(),
                         nw.data(), T, d.hk, d.dk, d.hv, d.dv);
    qt_gdn_core_bwd(dc.data(), dg.data(), dbeta.data(), st.data(), rq.data(), rk.data(), d_o.data(),
                    c.data(), g.data(), beta.data(), scratch.data(), d.b, d.S, d.hk, d.dk, d.hv,
                    d.dv, d.chunk, qscale, eps);
    qt_gdn_gates_bwd(dba.data(), dbeta.data(), dg.data(), ba.data(), alog.data(), dtb.data(), T,
                     d.hk, d.hv);
    qt_gdn_conv_bwd(dqkvz.data(), pre.data(), dc.data(), w.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.K);
    // weight gradients of sequence 1 only
    int64_t s = 1;
    qt_gated_rmsnorm_wgrad(dnw.data(), rs.data() + s * d.S * d.hv, dy.data() + s * d.S * d.hv * d.dv,
                           o.data() + s * d.S * d.hv * d.dv, qkvz.data() + s * d.S * d.W(), d.S,
                           d.hk, d.dk, d.hv, d.dv);
    qt_gdn_gates_wgrad(dal.data(), ddt.data(), dg.data() + s * d.S * d.hv,
                       ba.data() + s * d.S * 2 * d.hv, alog.data(), dtb.data(), d.S, d.hk, d.hv);
    qt_gdn_conv_wgrad(dw.data(), pre.data() + s * d.S * d.Cc(), dc.data() + s * d.S * d.Cc(),
                      qkvz.data() + s * d.S * d.W(), d.S, d.hk, d.dk, d.hv, d.dv, d.K);

    // the same through the wrappers
    mini_plan mp;
    vecf z_nc(nc, 0.0f), z_nh(nh, 0.0f), z_no(no, 0.0f);
    int32_t tq = mp.add(qkvz), tw = mp.add(w), tba = mp.add(ba), tal = mp.add(alog),
            tdt = mp.add(dtb), tnw = mp.add(nw), tdy = mp.add(dy), tc = mp.add(z_nc),
            tpre = mp.add(z_nc), tbeta = mp.add(z_nh), tg = mp.add(z_nh), to = mp.add(z_no),
            tst = mp.add(vecf(st.size(), 0.0f)), trq = mp.add(vecf(rq.size(), 0.0f)),
            trk = mp.add(vecf(rk.size(), 0.0f)), ty = mp.add(z_no), trs = mp.add(z_nh),
            tdo = mp.add(z_no), tdq = mp.add(vecf(qkvz.size(), 0.0f)), tdc = mp.add(z_nc),
            tdg = mp.add(z_nh), tdb = mp.add(z_nh), tdba = mp.add(vecf(ba.size(), 0.0f)),
            tscr = mp.add(vecf(scratch.size(), 0.0f));
    const qt_ctx *ctx = mp.finish();
    auto mk = [](std::initializer_list<int32_t> t, std::initializer_list<int64_t> a) {
        qt_op op = qt_op();
        for (int i = 0; i < QT_OP_MAX_T; i++) op.t[i] = QT_NONE;
        int i = 0;
        for (int32_t x : t) op.t[i++] = x;
        i = 0;
        for (int64_t x : a) op.a[i++] = x;
        return op;
    };
    qt_op conv_f = mk({tc, tpre, tq, tw}, {d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.K});
    qt_op gates_f = mk({tbeta, tg, tba, tal, tdt}, {T, d.hk, d.hv});
    qt_op core_f = mk({to, tst, trq, trk, tc, tg, tbeta}, {d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.chunk});
    core_f.f[0] = qscale;
    core_f.f[1] = eps;
    qt_op grn_f = mk({ty, trs, to, tq, tnw}, {T, d.hk, d.dk, d.hv, d.dv});
    grn_f.f[0] = eps;
    qt_op grn_b = mk({tdo, tdq, tdy, to, tq, tnw, trs}, {T, d.hk, d.dk, d.hv, d.dv});
    qt_op core_b = mk({tdc, tdg, tdb, tdo, tc, tg, tbeta, tst, trq, trk, tscr},
                      {d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.chunk});
    core_b.f[0] = qscale;
    core_b.f[1] = eps;
    qt_op gates_b = mk({tdba, tdb, tdg, tba, tal, tdt}, {T, d.hk, d.hv});
    qt_op conv_b = mk({tdq, tdc, tpre, tw}, {d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.K});
    qt_op grn_w = mk({tdy, to, tq, trs, tnw}, {T, d.hk, d.dk, d.hv, d.dv, d.S});
    qt_op gates_w = mk({tdg, tba, tal, tdt}, {T, d.hk, d.hv, d.S});
    qt_op conv_w = mk({tdc, tpre, tq, tw}, {d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.K});

    qt_op_gdn_conv_fwd(&conv_f, ctx);
    qt_op_gdn_gates_fwd(&gates_f, ctx);
    qt_op_gdn_core_fwd(&core_f, ctx);
    qt_op_gated_rmsnorm_fwd(&grn_f, ctx);
    qt_op_gated_rmsnorm_bwd(&grn_b, ctx);
    qt_op_gdn_core_bwd(&core_b, ctx);
    qt_op_gdn_gates_bwd(&gates_b, ctx);
    qt_op_gdn_conv_bwd(&conv_b, ctx);
    vecf wn(d.dv, 0.0f), wal(d.hv, 0.0f), wdt(d.hv, 0.0f), wcw(w.size(), 0.0f);
    float *const dw_grn[2] = {wn.data(), 0};
    float *const dw_gates[2] = {wal.data(), wdt.data()};
    float *const dw_conv[2] = {wcw.data(), 0};
    qt_op_gated_rmsnorm_wgrad(&grn_w, ctx, s, dw_grn);
    qt_op_gdn_gates_wgrad(&gates_w, ctx, s, dw_gates);
    qt_op_gdn_conv_wgrad(&conv_w, ctx, s, dw_conv);

    CHECK(same_bits(mp.get(tc), c) && same_bits(mp.get(tpre), pre));
    CHECK(same_bits(mp.get(tbeta), beta) && same_bits(mp.get(tg), g));
    CHECK(same_bits(mp.get(to), o) && same_bits(mp.get(tst), st));
    CHECK(same_bits(mp.get(trq), rq) && same_bits(mp.get(trk), rk));
    CHECK(same_bits(mp.get(ty), y) && same_bits(mp.get(trs), rs));
    CHECK(same_bits(mp.get(tdo), d_o) && same_bits(mp.get(tdq), dqkvz));
    CHECK(same_bits(mp.get(tdc), dc) && same_bits(mp.get(tdg), dg) && same_bits(mp.get(tdb), dbeta));
    CHECK(same_bits(mp.get(tdba), dba));
    CHECK(same_bits(wn, dnw) && same_bits(wal, dal) && same_bits(wdt, ddt) && same_bits(wcw, dw));
}
