// test_kernels_gdn_chunk.cpp - the chunked (WY) gated delta rule (gdn_chunk.c) against the
// recurrent form (gdn_core.c) in double, its backward against central finite differences,
// float against double, the goldens through the chunked path, determinism, and the
// GDN_CORE op wrappers' a7 dispatch through a hand-built plan.
//
// Cases are random but seeded: r = Hv/Hk > 1, b >= 2 sequences, S not a multiple of the
// chunk, chunk 1, chunk > S, Dk/Dv past the 8-lane blocks, g = -exp(u)*softplus(x).
// Packed documents (the *_pos forms): document starts at a chunk's first token, in the
// middle of a chunk, at its last token, two starts in one chunk and one-token documents,
// against the recurrent form with the same positions, finite differences, float, and the
// plain form's bits when the only starts are the sequences' first tokens.
#include <functional>
#include <vector>

#include "qt_test_fd.h"

#include "CppUTest/TestHarness.h"

extern "C" {
#include "ops/qt_op_fns.h"
}
#include "kernels/gdn_chunk.h"
#include "kernels/gdn_core.h"
#include "qt_test_util.h"

typedef std::vector<double> vecd;
typedef std::vector<float> vecf;

// Chunked vs recurrent in double: the two forms are the same function with different
// rounding (cumulative log-decays instead of products of decays, a triangular solve instead
// of sequential updates); a few hundred double roundings of O(1..10) values and exponent
// differences of |G| <= ~100 give ~1e-14; 1e-12 relative to the tensor's max leaves margin
// while any wrong term fails at >= 1e-3.
static const double GC_TOL_FORMS = 1e-12;
// Central differences, step 1e-5 (as test_kernels_gdn.cpp): truncation and rounding
// ~1e-10, so 1e-6 relative to the largest gradient.
static const double GC_FD_H = 1e-5, GC_FD_TOL = 1e-6;
// float chunked vs double chunked on float-representable inputs: ~1e-7 per rounding times
// a few hundred accumulations (exp(G_i - G_m) loses |G|*6e-8 when G is formed in float).
static const double GC_F32_TOL = 1e-5;
// goldens (tests/golden/SPEC.md): double 1e-10, float core 5e-5
static const double GC_GOLD64 = 1e-10, GC_GOLD32 = 5e-5;

namespace {
struct gc_dims {
    int64_t b, S, hk, dk, hv, dv, chunk;
    int64_t T() const { return b * S; }
    int64_t Cc() const { return 2 * hk * dk + hv * dv; }
    int64_t nch() const { return (S + chunk - 1) / chunk; }
    int64_t rows() const { return QT_GDN_CHUNK_ROWS(chunk, S); }
};

struct gc_case {
    gc_dims d;
    vecd c, g, beta, R;
    double qscale, eps;
    gc_case(const gc_dims &dd, uint64_t seed) : d(dd), eps((double)1e-6f)
    {
        c.resize(d.T() * d.Cc());
        for (double &x : c) x = (double)(float)qt_test_rand(&seed);
        g.resize(d.T() * d.hv);
        for (double &x : g) {
            double u = -0.5 + 1.5 * qt_test_rand(&seed), v = 3.0 * qt_test_rand(&seed);
            x = (double)(float)(-exp(u) * log1p(exp(v)));
        }
        beta.resize(d.T() * d.hv);
        for (double &x : beta) x = (double)(float)(1.0 / (1.0 + exp(-2.0 * qt_test_rand(&seed))));
        R.resize(d.T() * d.hv * d.dv);
        for (double &x : R) x = (double)(float)qt_test_rand(&seed);
        qscale = (double)(float)(1.0 / sqrt((double)d.dk));
    }
};

template <typename T> struct gc_out {
    std::vector<T> o, states, rq, rk, dc, dg, dbeta;
};
}  // namespace

template <typename T> static std::vector<T> gc_cast(const vecd &v)
{
    return std::vector<T>(v.begin(), v.end());
}

// Runs forward (and backward when bwd) of one form: chunked when chunked, else recurrent;
// pos (packed documents, one per row) selects the *_pos forms.
static gc_out<double> gc_run64(const gc_case &k, bool chunked, bool bwd,
                               const int32_t *pos = nullptr)
{
    const gc_dims &d = k.d;
    gc_out<double> r;
    r.o.assign(d.T() * d.hv * d.dv, 0.0);
    r.states.assign(d.b * d.hv * d.nch() * d.dk * d.dv, 0.0);
    r.rq.assign(d.T() * d.hk, 0.0);
    r.rk.assign(d.T() * d.hk, 0.0);
    vecd fscr(QT_GDN_CHUNK_FWD_SCRATCH(d.rows(), d.dk, d.dv), 0.0);
    if (chunked && pos)
        qt_gdn_chunk_fwd_pos_f64(r.o.data(), r.states.data(), r.rq.data(), r.rk.data(),
                                 k.c.data(), k.g.data(), k.beta.data(), pos, fscr.data(), d.b,
                                 d.S, d.hk, d.dk, d.hv, d.dv, d.chunk, k.qscale, k.eps);
    else if (pos)
        qt_gdn_core_fwd_pos_f64(r.o.data(), r.states.data(), r.rq.data(), r.rk.data(),
                                k.c.data(), k.g.data(), k.beta.data(), pos, d.b, d.S, d.hk, d.dk,
                                d.hv, d.dv, d.chunk, k.qscale, k.eps);
    else if (chunked)
        qt_gdn_chunk_fwd_f64(r.o.data(), r.states.data(), r.rq.data(), r.rk.data(), k.c.data(),
                             k.g.data(), k.beta.data(), fscr.data(), d.b, d.S, d.hk, d.dk, d.hv,
                             d.dv, d.chunk, k.qscale, k.eps);
    else
        qt_gdn_core_fwd_f64(r.o.data(), r.states.data(), r.rq.data(), r.rk.data(), k.c.data(),
                            k.g.data(), k.beta.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.chunk,
                            k.qscale, k.eps);
    if (!bwd) return r;
    r.dc.assign(k.c.size(), 0.0);
    r.dg.assign(k.g.size(), 0.0);
    r.dbeta.assign(k.beta.size(), 0.0);
    if (chunked && pos) {
        vecd scr(QT_GDN_CHUNK_BWD_SCRATCH(d.rows(), d.dk, d.dv), 0.0);
        qt_gdn_chunk_bwd_pos_f64(r.dc.data(), r.dg.data(), r.dbeta.data(), r.states.data(),
                                 r.rq.data(), r.rk.data(), k.R.data(), k.c.data(), k.g.data(),
                                 k.beta.data(), pos, scr.data(), d.b, d.S, d.hk, d.dk, d.hv,
                                 d.dv, d.chunk, k.qscale, k.eps);
    } else if (pos) {
        vecd scr(QT_GDN_CORE_SCRATCH(d.chunk, d.dk, d.dv), 0.0);
        qt_gdn_core_bwd_pos_f64(r.dc.data(), r.dg.data(), r.dbeta.data(), r.states.data(),
                                r.rq.data(), r.rk.data(), k.R.data(), k.c.data(), k.g.data(),
                                k.beta.data(), pos, scr.data(), d.b, d.S, d.hk, d.dk, d.hv,
                                d.dv, d.chunk, k.qscale);
    } else if (chunked) {
        vecd scr(QT_GDN_CHUNK_BWD_SCRATCH(d.rows(), d.dk, d.dv), 0.0);
        qt_gdn_chunk_bwd_f64(r.dc.data(), r.dg.data(), r.dbeta.data(), r.states.data(),
                             r.rq.data(), r.rk.data(), k.R.data(), k.c.data(), k.g.data(),
                             k.beta.data(), scr.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv,
                             d.chunk, k.qscale, k.eps);
    } else {
        vecd scr(QT_GDN_CORE_SCRATCH(d.chunk, d.dk, d.dv), 0.0);
        qt_gdn_core_bwd_f64(r.dc.data(), r.dg.data(), r.dbeta.data(), r.states.data(),
                            r.rq.data(), r.rk.data(), k.R.data(), k.c.data(), k.g.data(),
                            k.beta.data(), scr.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.chunk,
                            k.qscale, k.eps);
    }
    return r;
}

static gc_out<float> gc_runf(const gc_case &k, const int32_t *pos = nullptr)
{
    const gc_dims &d = k.d;
    vecf c = gc_cast<float>(k.c), g = gc_cast<float>(k.g), beta = gc_cast<float>(k.beta),
         R = gc_cast<float>(k.R);
    gc_out<float> r;
    r.o.assign(d.T() * d.hv * d.dv, 0.0f);
    r.states.assign(d.b * d.hv * d.nch() * d.dk * d.dv, 0.0f);
    r.rq.assign(d.T() * d.hk, 0.0f);
    r.rk.assign(d.T() * d.hk, 0.0f);
    vecf fscr(QT_GDN_CHUNK_FWD_SCRATCH(d.rows(), d.dk, d.dv), 0.0f);
    if (pos)
        qt_gdn_chunk_fwd_pos(r.o.data(), r.states.data(), r.rq.data(), r.rk.data(), c.data(),
                             g.data(), beta.data(), pos, fscr.data(), d.b, d.S, d.hk, d.dk, d.hv,
                             d.dv, d.chunk, (float)k.qscale, (float)k.eps);
    else
        qt_gdn_chunk_fwd(r.o.data(), r.states.data(), r.rq.data(), r.rk.data(), c.data(),
                         g.data(), beta.data(), fscr.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv,
                         d.chunk, (float)k.qscale, (float)k.eps);
    vecf scr(QT_GDN_CHUNK_BWD_SCRATCH(d.rows(), d.dk, d.dv), 0.0f);
    r.dc.assign(c.size(), 0.0f);
    r.dg.assign(g.size(), 0.0f);
    r.dbeta.assign(beta.size(), 0.0f);
    if (pos)
        qt_gdn_chunk_bwd_pos(r.dc.data(), r.dg.data(), r.dbeta.data(), r.states.data(),
                             r.rq.data(), r.rk.data(), R.data(), c.data(), g.data(), beta.data(),
                             pos, scr.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.chunk,
                             (float)k.qscale, (float)k.eps);
    else
        qt_gdn_chunk_bwd(r.dc.data(), r.dg.data(), r.dbeta.data(), r.states.data(),
                         r.rq.data(), r.rk.data(), R.data(), c.data(), g.data(), beta.data(),
                         scr.data(), d.b, d.S, d.hk, d.dk, d.hv, d.dv, d.chunk, (float)k.qscale,
                         (float)k.eps);
    return r;
}

static void gc_cmp64(const char *what, const vecd &got, const vecd &want, double tol)
{
    LONGS_EQUAL(want.size(), got.size());
    double e = qt_test_rel_err_f64(what, got.data(), want.data(), want.size(), tol);
    CHECK_TEXT(e <= tol, what);
}

static void gc_cmp32(const char *what, const vecf &got, const vecd &want, double tol)
{
    LONGS_EQUAL(want.size(), got.size());
    double e = qt_test_rel_err_f32(what, got.data(), want.data(), want.size(), tol);
    CHECK_TEXT(e <= tol, what);
}

static bool gc_same_bits(const vecf &a, const vecf &b)
{
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// forward (o, states, rq, rk) and backward (dc, dg, dbeta) of the two forms agree
static void gc_forms_agree(const gc_dims &d, uint64_t seed)
{
    gc_case k(d, seed);
    gc_out<double> a = gc_run64(k, true, true), b = gc_run64(k, false, true);
    gc_cmp64("chunk o", a.o, b.o, GC_TOL_FORMS);
    gc_cmp64("chunk states", a.states, b.states, GC_TOL_FORMS);
    gc_cmp64("chunk rq", a.rq, b.rq, 0.0);  // the same expressions: bit-equal
    gc_cmp64("chunk rk", a.rk, b.rk, 0.0);
    gc_cmp64("chunk dc", a.dc, b.dc, GC_TOL_FORMS);
    gc_cmp64("chunk dg", a.dg, b.dg, GC_TOL_FORMS);
    gc_cmp64("chunk dbeta", a.dbeta, b.dbeta, GC_TOL_FORMS);
}

TEST_GROUP(gdn_chunk){};

// b=2, r=2, S=7 with chunk 3 (partial last chunk)
TEST(gdn_chunk, matches_recurrent_grouped_heads) { gc_forms_agree({2, 7, 2, 4, 4, 3, 3}, 61); }
// b=3, r=3, S=11 with chunk 4, Dk/Dv past one 8-lane block
TEST(gdn_chunk, matches_recurrent_r3_wide) { gc_forms_agree({3, 11, 1, 10, 3, 12, 4}, 62); }
// chunk 1: every token its own chunk (no intra-chunk products)
TEST(gdn_chunk, matches_recurrent_chunk1) { gc_forms_agree({2, 5, 1, 3, 2, 4, 1}, 63); }
// chunk > S: one partial chunk holds the whole sequence
TEST(gdn_chunk, matches_recurrent_chunk_longer_than_sequence)
{
    gc_forms_agree({2, 9, 2, 3, 4, 5, 64}, 64);
}
// a long chunk (decays down to e^-100 inside it)
TEST(gdn_chunk, matches_recurrent_long_chunk) { gc_forms_agree({2, 40, 1, 9, 2, 9, 32}, 65); }


static void gc_fd(const gc_dims &d, uint64_t seed)
{
    gc_case k(d, seed);
    gc_out<double> a = gc_run64(k, true, true);
    auto loss = [&]() {
        vecd o = gc_run64(k, true, false).o;
        double s = 0.0;
        for (size_t i = 0; i < o.size(); i++) s += o[i] * k.R[i];
        return s;
    };
    gc_cmp64("chunk fd dc", a.dc, qt_test_numgrad(k.c, GC_FD_H, loss), GC_FD_TOL);
    gc_cmp64("chunk fd dg", a.dg, qt_test_numgrad(k.g, GC_FD_H, loss), GC_FD_TOL);
    gc_cmp64("chunk fd dbeta", a.dbeta, qt_test_numgrad(k.beta, GC_FD_H, loss), GC_FD_TOL);
}

TEST(gdn_chunk, backward_fd_grouped_heads) { gc_fd({2, 7, 2, 4, 4, 3, 3}, 71); }
TEST(gdn_chunk, backward_fd_r3_lanes) { gc_fd({2, 6, 1, 9, 3, 10, 4}, 72); }
TEST(gdn_chunk, backward_fd_one_chunk) { gc_fd({2, 5, 1, 3, 2, 3, 64}, 73); }

TEST(gdn_chunk, float_matches_double_and_is_deterministic)
{
    gc_case k({2, 21, 2, 12, 4, 10, 8}, 81);
    gc_out<double> a = gc_run64(k, true, true);
    gc_out<float> f = gc_runf(k), f2 = gc_runf(k);
    gc_cmp32("chunk f32 o", f.o, a.o, GC_F32_TOL);
    gc_cmp32("chunk f32 states", f.states, a.states, GC_F32_TOL);
    gc_cmp32("chunk f32 dc", f.dc, a.dc, GC_F32_TOL);
    gc_cmp32("chunk f32 dg", f.dg, a.dg, GC_F32_TOL);
    gc_cmp32("chunk f32 dbeta", f.dbeta, a.dbeta, GC_F32_TOL);
    CHECK(gc_same_bits(f.o, f2.o) && gc_same_bits(f.states, f2.states));
    CHECK(gc_same_bits(f.dc, f2.dc) && gc_same_bits(f.dg, f2.dg) &&
          gc_same_bits(f.dbeta, f2.dbeta));
}

// A sequence's results do not depend on the other sequences in the batch.
TEST(gdn_chunk, no_leak_across_sequences)
{
    gc_case k({2, 7, 1, 4, 2, 4, 3}, 91);
    gc_out<float> a = gc_runf(k);
    const size_t half_c = k.c.size() / 2;
    for (size_t i = half_c; i < k.c.size(); i++) k.c[i] = -k.c[i] * 0.5;
    gc_out<float> b = gc_runf(k);
    const size_t no = a.o.size() / 2, nc = half_c, nh = a.dg.size() / 2;
    CHECK(memcmp(a.o.data(), b.o.data(), no * sizeof(float)) == 0);
    CHECK(memcmp(a.dc.data(), b.dc.data(), nc * sizeof(float)) == 0);
    CHECK(memcmp(a.dg.data(), b.dg.data(), nh * sizeof(float)) == 0);
    CHECK(memcmp(a.dbeta.data(), b.dbeta.data(), nh * sizeof(float)) == 0);
    CHECK(memcmp(a.o.data() + no, b.o.data() + no, no * sizeof(float)) != 0);
}

// ------------------------------------------------------------------ packed documents
// Positions of b sequences of S rows from document starts: every sequence's row 0 and the
// listed local rows (the same in every sequence), as the data loader writes them.
static std::vector<int32_t> gc_positions(const gc_dims &d, std::vector<int64_t> starts)
{
    std::vector<int32_t> pos(d.T());
    for (int64_t s = 0; s < d.b; s++)
        for (int64_t t = 0; t < d.S; t++) {
            bool st = t == 0;
            for (int64_t x : starts) st = st || x == t;
            pos[s * d.S + t] = st ? 0 : pos[s * d.S + t - 1] + 1;
        }
    return pos;
}

// The chunked and the recurrent forms with the same packed documents (tolerance as for the
// plain forms: the same math, other roundings).
static void gc_pack_forms_agree(const gc_dims &d, const std::vector<int64_t> &starts,
                                uint64_t seed)
{
    gc_case k(d, seed);
    std::vector<int32_t> pos = gc_positions(d, starts);
    gc_out<double> a = gc_run64(k, true, true, pos.data()), b = gc_run64(k, false, true,
                                                                           pos.data());
    gc_cmp64("pack o", a.o, b.o, GC_TOL_FORMS);
    gc_cmp64("pack states", a.states, b.states, GC_TOL_FORMS);
    gc_cmp64("pack dc", a.dc, b.dc, GC_TOL_FORMS);
    gc_cmp64("pack dg", a.dg, b.dg, GC_TOL_FORMS);
    gc_cmp64("pack dbeta", a.dbeta, b.dbeta, GC_TOL_FORMS);
    // the restart is real: without positions the outputs differ past the first start
    gc_out<double> c = gc_run64(k, true, false);
    double worst = 0.0;
    for (size_t i = 0; i < a.o.size(); i++) worst = fmax(worst, fabs(a.o[i] - c.o[i]));
    CHECK_TEXT(worst > 1e-3, "packed positions changed nothing");
}

TEST_GROUP(gdn_chunk_pack){};

// S=13, chunk 4: starts at a chunk's first token (4), mid-chunk (6), a chunk's last token
// (11) and a one-token document (11 then 12)
TEST(gdn_chunk_pack, matches_recurrent_starts_everywhere)
{
    gc_pack_forms_agree({2, 13, 2, 4, 4, 3, 4}, {4, 6, 11, 12}, 101);
}
// two starts inside one chunk, r = 3, lanes past 8
TEST(gdn_chunk_pack, matches_recurrent_two_starts_in_a_chunk)
{
    gc_pack_forms_agree({2, 11, 1, 10, 3, 12, 8}, {2, 5, 9}, 102);
}
// chunk > S (one partial chunk) and chunk 1 (the starts only cut the carried state)
TEST(gdn_chunk_pack, matches_recurrent_one_chunk_and_chunk1)
{
    gc_pack_forms_agree({2, 9, 2, 3, 4, 5, 64}, {3, 4, 8}, 103);
    gc_pack_forms_agree({2, 7, 1, 3, 2, 4, 1}, {2, 5}, 104);
}
// a long chunk: the later documents' decays restart from 0 (exp never underflows to a
// state that should have been dropped)
TEST(gdn_chunk_pack, matches_recurrent_long_chunk)
{
    gc_pack_forms_agree({2, 40, 1, 9, 2, 9, 32}, {7, 20, 31, 32}, 105);
}

static void gc_pack_fd(const gc_dims &d, const std::vector<int64_t> &starts, uint64_t seed)
{
    gc_case k(d, seed);
    std::vector<int32_t> pos = gc_positions(d, starts);
    gc_out<double> a = gc_run64(k, true, true, pos.data());
    auto loss = [&]() {
        vecd o = gc_run64(k, true, false, pos.data()).o;
        double s = 0.0;
        for (size_t i = 0; i < o.size(); i++) s += o[i] * k.R[i];
        return s;
    };
    gc_cmp64("pack fd dc", a.dc, qt_test_numgrad(k.c, GC_FD_H, loss), GC_FD_TOL);
    gc_cmp64("pack fd dg", a.dg, qt_test_numgrad(k.g, GC_FD_H, loss), GC_FD_TOL);
    gc_cmp64("pack fd dbeta", a.dbeta, qt_test_numgrad(k.beta, GC_FD_H, loss), GC_FD_TOL);
    // a start's own g is never used: its gradient is exactly 0
    for (int64_t s = 0; s < d.b; s++)
        for (int64_t t : starts)
            for (int64_t j = 0; j < d.hv; j++) CHECK(a.dg[(s * d.S + t) * d.hv + j] == 0.0);
}

TEST(gdn_chunk_pack, backward_fd_grouped_heads) { gc_pack_fd({2, 13, 2, 4, 4, 3, 4}, {4, 6, 11, 12}, 111); }
TEST(gdn_chunk_pack, backward_fd_r3_lanes) { gc_pack_fd({2, 11, 1, 9, 3, 10, 8}, {2, 5, 9}, 112); }

TEST(gdn_chunk_pack, float_matches_double_and_is_deterministic)
{
    gc_dims d = {2, 21, 2, 12, 4, 10, 8};
    gc_case k(d, 121);
    std::vector<int32_t> pos = gc_positions(d, {5, 8, 16, 17});
    gc_out<double> a = gc_run64(k, true, true, pos.data());
    gc_out<float> f = gc_runf(k, pos.data()), f2 = gc_runf(k, pos.data());
    gc_cmp32("pack f32 o", f.o, a.o, GC_F32_TOL);
    gc_cmp32("pack f32 states", f.states, a.states, GC_F32_TOL);
    gc_cmp32("pack f32 dc", f.dc, a.dc, GC_F32_TOL);
    gc_cmp32("pack f32 dg", f.dg, a.dg, GC_F32_TOL);
    gc_cmp32("pack f32 dbeta", f.dbeta, a.dbeta, GC_F32_TOL);
    CHECK(gc_same_bits(f.o, f2.o) && gc_same_bits(f.states, f2.states));
    CHECK(gc_same_bits(f.dc, f2.dc) && gc_same_bits(f.dg, f2.dg) &&
          gc_same_bits(f.dbeta, f2.dbeta));
}

// One document per sequence (positions 0..S-1): the plain form's bits exactly (the packed
// path adds no operation when nothing is masked).
TEST(gdn_chunk_pack, one_document_is_the_plain_form_bit_for_bit)
{
    gc_dims d = {2, 21, 2, 12, 4, 10, 8};
    gc_case k(d, 131);
    std::vector<int32_t> pos = gc_positions(d, {});
    gc_out<float> a = gc_runf(k, pos.data()), b = gc_runf(k);
    CHECK(gc_same_bits(a.o, b.o) && gc_same_bits(a.states, b.states));
    CHECK(gc_same_bits(a.dc, b.dc) && gc_same_bits(a.dg, b.dg) && gc_same_bits(a.dbeta, b.dbeta));
}

// A later document's outputs and input gradients do not depend on an earlier document's
// inputs (bit for bit, float): rows [6, 21) of each sequence start a document at 6 ... and
// the upstream gradient of the earlier rows is the same.
TEST(gdn_chunk_pack, no_leak_across_documents)
{
    gc_dims d = {1, 21, 1, 4, 2, 4, 8};
    gc_case k(d, 141);
    std::vector<int32_t> pos = gc_positions(d, {6});
    gc_out<float> a = gc_runf(k, pos.data());
    for (int64_t t = 0; t < 6; t++)
        for (int64_t x = 0; x < d.Cc(); x++) k.c[t * d.Cc() + x] *= -0.75;
    gc_out<float> b = gc_runf(k, pos.data());
    const size_t ro = d.hv * d.dv, rc = d.Cc(), rh = d.hv;
    CHECK(memcmp(a.o.data() + 6 * ro, b.o.data() + 6 * ro, 15 * ro * sizeof(float)) == 0);
    CHECK(memcmp(a.dc.data() + 6 * rc, b.dc.data() + 6 * rc, 15 * rc * sizeof(float)) == 0);
    CHECK(memcmp(a.dg.data() + 6 * rh, b.dg.data() + 6 * rh, 15 * rh * sizeof(float)) == 0);
    CHECK(memcmp(a.o.data(), b.o.data(), 6 * ro * sizeof(float)) != 0);
}

// ------------------------------------------------------------------ goldens
#if __has_include("golden/kernels/gdn_core.h")
#include "golden/kernels/gdn_core.h"
#define GC_N(a) (sizeof(a) / sizeof((a)[0]))

static void gc_gold(const gc_dims &d, double qscale, double l2eps, const double *c,
                    const double *g, const double *beta, const double *d_o, const double *o,
                    const double *rq, const double *rk, const double *dc, const double *dg,
                    const double *dbeta)
{
    gc_case k(d, 1);
    size_t nc = d.T() * d.Cc(), nh = d.T() * d.hv, no = nh * d.dv, nr = d.T() * d.hk;
    k.c.assign(c, c + nc);
    k.g.assign(g, g + nh);
    k.beta.assign(beta, beta + nh);
    k.R.assign(d_o, d_o + no);
    k.qscale = qscale;
    k.eps = l2eps;
    gc_out<double> a = gc_run64(k, true, true);
    gc_out<float> f = gc_runf(k);
    vecd wo(o, o + no), wrq(rq, rq + nr), wrk(rk, rk + nr), wdc(dc, dc + nc), wdg(dg, dg + nh),
        wdb(dbeta, dbeta + nh);
    gc_cmp64("gold chunk o", a.o, wo, GC_GOLD64);
    gc_cmp64("gold chunk rq", a.rq, wrq, GC_GOLD64);
    gc_cmp64("gold chunk rk", a.rk, wrk, GC_GOLD64);
    gc_cmp64("gold chunk dc", a.dc, wdc, GC_GOLD64);
    gc_cmp64("gold chunk dg", a.dg, wdg, GC_GOLD64);
    gc_cmp64("gold chunk dbeta", a.dbeta, wdb, GC_GOLD64);
    gc_cmp32("gold chunk o f32", f.o, wo, GC_GOLD32);
    gc_cmp32("gold chunk dc f32", f.dc, wdc, GC_GOLD32);
    gc_cmp32("gold chunk dg f32", f.dg, wdg, GC_GOLD32);
    gc_cmp32("gold chunk dbeta f32", f.dbeta, wdb, GC_GOLD32);
}

#define GC_GOLD_CASE(C, c)                                                                      \
    gc_gold({GOLD_GDN_CORE_##C##_B, GOLD_GDN_CORE_##C##_S, GOLD_GDN_CORE_##C##_HK,              \
             GOLD_GDN_CORE_##C##_DK, GOLD_GDN_CORE_##C##_HV, GOLD_GDN_CORE_##C##_DV,            \
             GOLD_GDN_CORE_##C##_CHUNK},                                                        \
            GOLD_GDN_CORE_##C##_QSCALE, GOLD_GDN_CORE_##C##_L2EPS, gold_gdn_core_##c##_c,       \
            gold_gdn_core_##c##_g, gold_gdn_core_##c##_beta, gold_gdn_core_##c##_do,            \
            gold_gdn_core_##c##_o, gold_gdn_core_##c##_rq, gold_gdn_core_##c##_rk,              \
            gold_gdn_core_##c##_dc, gold_gdn_core_##c##_dg, gold_gdn_core_##c##_dbeta)

TEST(gdn_chunk, golden_c0_grouped_heads_two_sequences) { GC_GOLD_CASE(C0, c0); }
TEST(gdn_chunk, golden_c1_single_head_partial_chunk) { GC_GOLD_CASE(C1, c1); }
#endif
