// test_kernels_attn_moe.cpp - attention and MoE kernels (rope, attention, moe_route,
// expert_ffn, moe_combine): every backward of the double kernels against central finite
// differences of L = sum(out * w) in double, float vs double agreement, top-k tie-breaking,
// no leak across sequences, scratch-independence of the bits, and the op wrappers run
// through a tiny hand-built plan/ctx (bit-identical to direct kernel calls).
#include <vector>
#include <functional>
#include <algorithm>
#include <cmath>
#include <limits>
#include "CppUTest/TestHarness.h"
#include "qt_test_util.h"
#include "kernels/rope.h"
#include "kernels/attention.h"
#include "kernels/moe_route.h"
#include "kernels/expert_ffn.h"
#include "kernels/moe_combine.h"
extern "C" {   // qt_op_fns.h and qt_math.h have no C++ guards of their own
#include "ops/qt_op_fns.h"
#include "math/qt_math.h"
}

typedef std::vector<double> vd;
typedef std::vector<float> vf;

static vd rand_vec(size_t n, uint64_t seed, double scale = 1.0)
{
    vd v(n);
    for (size_t i = 0; i < n; i++) v[i] = scale * qt_test_rand(&seed);
    return v;
}

static vf to_f(const vd &v)
{
    vf f(v.size());
    for (size_t i = 0; i < v.size(); i++) f[i] = (float)v[i];
    return f;
}

static double dot(const vd &a, const vd &b)
{
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

// Central finite differences of loss() with respect to every element of x, compared with
// the analytic gradient `grad`. Returns the worst error relative to max|grad|.
static double fd_check(const char *what, vd &x, const vd &grad, double h,
                       const std::function<double()> &loss, double tol)
{
    vd num(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        const double x0 = x[i];
        x[i] = x0 + h;
        const double lp = loss();
        x[i] = x0 - h;
        const double lm = loss();
        x[i] = x0;
        num[i] = (lp - lm) / (2 * h);
    }
    return qt_test_rel_err_f64(what, grad.data(), num.data(), num.size(), tol);
}

static bool bits_equal(const vf &a, const vf &b)
{
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_GROUP(RopeKernel) {};

TEST(RopeKernel, TableMatchesLibmAndFloatIsRoundedDouble)
{
    const int64_t S = 7, R = 6;
    vd t64(S * R);
    vf t32(S * R);
    qt_rope_table_f64(t64.data(), S, R, 10000.0);
    qt_rope_table(t32.data(), S, R, 10000.0);
    double worst = 0;
    for (int64_t p = 0; p < S; p++)
        for (int64_t i = 0; i < R / 2; i++) {
            const double ang = p * pow(10000.0, -2.0 * i / R);
            worst = fmax(worst, fabs(t64[(p * R / 2 + i) * 2] - cos(ang)));
            worst = fmax(worst, fabs(t64[(p * R / 2 + i) * 2 + 1] - sin(ang)));
        }
    // 1e-13: the table is computed in double with qt_exp/qt_log/qt_sin/qt_cos, each a few ulp.
    CHECK(worst < 1e-13);
    // The float table is the double table rounded once: exact.
    for (size_t i = 0; i < t32.size(); i++) CHECK_EQUAL((float)t64[i], t32[i]);
}

TEST(RopeKernel, BackwardMatchesFiniteDifferences)
{
    const int64_t b = 2, S = 5, H = 3, hd = 8, R = 4, n = b * S * H * hd;
    vd table(S * R);
    qt_rope_table_f64(table.data(), S, R, 10000.0);
    vd x = rand_vec(n, 1), w = rand_vec(n, 2), base = rand_vec(n, 3), y(n);
    vd dx = base;
    qt_rope_bwd_f64(dx.data(), w.data(), table.data(), b, S, H, hd, R);
    for (int64_t i = 0; i < n; i++) dx[i] -= base[i];   // accumulation check: base must survive
    auto loss = [&]() {
        qt_rope_fwd_f64(y.data(), x.data(), table.data(), b, S, H, hd, R);
        return dot(y, w);
    };
    // Linear op: the central difference is exact up to rounding (~1e-16/h).
    CHECK(fd_check("rope dx", x, dx, 1e-3, loss, 1e-10) <= 1e-10);
}

TEST(RopeKernel, SequencesDoNotLeakAndPositionsRestart)
{
    const int64_t S = 6, H = 2, hd = 8, R = 8, row = H * hd;
    vf table(S * R);
    qt_rope_table(table.data(), S, R, 10000.0f);
    vf x = to_f(rand_vec(2 * S * row, 4)), y2(2 * S * row), y1(S * row);
    qt_rope_fwd(y2.data(), x.data(), table.data(), 2, S, H, hd, R);
    qt_rope_fwd(y1.data(), x.data() + S * row, table.data(), 1, S, H, hd, R);
    CHECK(memcmp(y1.data(), y2.data() + S * row, S * row * sizeof(float)) == 0);
    // Position 0 of the second sequence: cos 1, sin 0, so the row passes unchanged.
    for (int64_t i = 0; i < row; i++) CHECK_EQUAL(x[S * row + i], y2[S * row + i]);
}

TEST(RopeKernel, FloatMatchesDouble)
{
    const int64_t b = 2, S = 9, H = 2, hd = 16, R = 8, n = b * S * H * hd;
    vd t64(S * R), x = rand_vec(n, 5), y64(n), dx64(n, 0.0);
    vf t32(S * R), xf = to_f(x), y32(n), dx32(n, 0.0f);
    qt_rope_table_f64(t64.data(), S, R, 1e6);
    qt_rope_table(t32.data(), S, R, 1e6);
    qt_rope_fwd_f64(y64.data(), x.data(), t64.data(), b, S, H, hd, R);
    qt_rope_fwd(y32.data(), xf.data(), t32.data(), b, S, H, hd, R);
    qt_rope_bwd_f64(dx64.data(), x.data(), t64.data(), b, S, H, hd, R);
    qt_rope_bwd(dx32.data(), xf.data(), t32.data(), b, S, H, hd, R);
    // 1e-6: a handful of float roundings on O(1) values.
    CHECK(qt_test_rel_err_f32("rope y f32", y32.data(), y64.data(), n, 1e-6) <= 1e-6);
    CHECK(qt_test_rel_err_f32("rope dx f32", dx32.data(), dx64.data(), n, 1e-6) <= 1e-6);
}

// ------------------------------------------------------------------------------ attention

// Naive double attention, written independently of the kernel (full softmax per row).
static void naive_attn(vd &o, vd &lse, const vd &q, const vd &k, const vd &v, int64_t b,
                       int64_t S, int64_t Hq, int64_t Hkv, int64_t hd, double scale)
{
    for (int64_t s = 0; s < b; s++)
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h / (Hq / Hkv);
            for (int64_t i = 0; i < S; i++) {
                vd sc(i + 1);
                double m = -1e300, z = 0;
                for (int64_t j = 0; j <= i; j++) {
                    double a = 0;
                    for (int64_t d = 0; d < hd; d++)
                        a += q[((s * S + i) * Hq + h) * hd + d] * k[((s * S + j) * Hkv + g) * hd + d];
                    sc[j] = a * scale;
                    m = fmax(m, sc[j]);
                }
                for (int64_t j = 0; j <= i; j++) z += exp(sc[j] - m);
                lse[(s * Hq + h) * S + i] = m + log(z);
                for (int64_t d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= i; j++)
                        acc += exp(sc[j] - m) / z * v[((s * S + j) * Hkv + g) * hd + d];
                    o[((s * S + i) * Hq + h) * hd + d] = acc;
                }
            }
        }
}

TEST_GROUP(AttnKernel) {};

TEST(AttnKernel, ForwardMatchesNaive)
{
    const int64_t b = 2, S = 7, Hq = 4, Hkv = 2, hd = 13;   // hd exercises lanes and tail
    vd q = rand_vec(b * S * Hq * hd, 10), k = rand_vec(b * S * Hkv * hd, 11),
       v = rand_vec(b * S * Hkv * hd, 12);
    vd o(q.size()), lse(b * Hq * S), on(q.size()), lsen(lse.size()), sc(S);
    qt_attn_fwd_f64(o.data(), lse.data(), q.data(), k.data(), v.data(), sc.data(), b, S, Hq,
                    Hkv, hd, 0.7);
    naive_attn(on, lsen, q, k, v, b, S, Hq, Hkv, hd, 0.7);
    // 1e-13: both double, different summation orders.
    CHECK(qt_test_rel_err_f64("attn o", o.data(), on.data(), o.size(), 1e-13) <= 1e-13);
    CHECK(qt_test_rel_err_f64("attn lse", lse.data(), lsen.data(), lse.size(), 1e-13) <= 1e-13);
}

TEST(AttnKernel, BackwardMatchesFiniteDifferences)
{
    const int64_t b = 2, S = 5, Hq = 4, Hkv = 2, hd = 9;
    const double scale = 0.6;
    vd q = rand_vec(b * S * Hq * hd, 20), k = rand_vec(b * S * Hkv * hd, 21),
       v = rand_vec(b * S * Hkv * hd, 22), w = rand_vec(q.size(), 23);
    vd o(q.size()), lse(b * Hq * S), sc(2 * S);
    qt_attn_fwd_f64(o.data(), lse.data(), q.data(), k.data(), v.data(), sc.data(), b, S, Hq,
                    Hkv, hd, scale);
    vd dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
    qt_attn_bwd_f64(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(),
                    o.data(), lse.data(), sc.data(), b, S, Hq, Hkv, hd, scale);
    vd ot(q.size()), lt(lse.size());
    auto loss = [&]() {
        qt_attn_fwd_f64(ot.data(), lt.data(), q.data(), k.data(), v.data(), sc.data(), b, S,
                        Hq, Hkv, hd, scale);
        return dot(ot, w);
    };
    // h = 1e-5: truncation ~h^2 * |f'''| ~ 1e-10, rounding ~1e-16/h ~ 1e-11; tol 1e-8.
    CHECK(fd_check("attn dq", q, dq, 1e-5, loss, 1e-8) <= 1e-8);
    CHECK(fd_check("attn dk", k, dk, 1e-5, loss, 1e-8) <= 1e-8);
    CHECK(fd_check("attn dv", v, dv, 1e-5, loss, 1e-8) <= 1e-8);
}

TEST(AttnKernel, BackwardAccumulates)
{
    const int64_t b = 1, S = 4, Hq = 2, Hkv = 1, hd = 8;
    vf q = to_f(rand_vec(S * Hq * hd, 30)), k = to_f(rand_vec(S * hd, 31)),
       v = to_f(rand_vec(S * hd, 32)), w = to_f(rand_vec(q.size(), 33));
    vf o(q.size()), lse(Hq * S), sc(2 * S);
    qt_attn_fwd(o.data(), lse.data(), q.data(), k.data(), v.data(), sc.data(), b, S, Hq, Hkv,
                hd, 0.5f);
    vf dq0(q.size(), 0.0f), dk0(k.size(), 0.0f), dv0(v.size(), 0.0f);
    qt_attn_bwd(dq0.data(), dk0.data(), dv0.data(), w.data(), q.data(), k.data(), v.data(),
                o.data(), lse.data(), sc.data(), b, S, Hq, Hkv, hd, 0.5f);
    vf dq1(q.size(), 1.0f), dk1(k.size(), 1.0f), dv1(v.size(), 1.0f);
    qt_attn_bwd(dq1.data(), dk1.data(), dv1.data(), w.data(), q.data(), k.data(), v.data(),
                o.data(), lse.data(), sc.data(), b, S, Hq, Hkv, hd, 0.5f);
    // 1e-6 absolute: the second run adds the same terms onto 1.0 (different rounding).
    for (size_t i = 0; i < dq0.size(); i++) DOUBLES_EQUAL(dq0[i] + 1.0, dq1[i], 1e-6);
    for (size_t i = 0; i < dk0.size(); i++) DOUBLES_EQUAL(dk0[i] + 1.0, dk1[i], 1e-6);
    for (size_t i = 0; i < dv0.size(); i++) DOUBLES_EQUAL(dv0[i] + 1.0, dv1[i], 1e-6);
}

TEST(AttnKernel, SequencesDoNotLeakAndCausal)
{
    const int64_t S = 6, Hq = 4, Hkv = 2, hd = 16, qr = Hq * hd, kr = Hkv * hd;
    vf q = to_f(rand_vec(2 * S * qr, 40)), k = to_f(rand_vec(2 * S * kr, 41)),
       v = to_f(rand_vec(2 * S * kr, 42));
    vf o2(q.size()), l2(2 * Hq * S), o1(S * qr), l1(Hq * S), sc(S);
    qt_attn_fwd(o2.data(), l2.data(), q.data(), k.data(), v.data(), sc.data(), 2, S, Hq, Hkv,
                hd, 0.35f);
    qt_attn_fwd(o1.data(), l1.data(), q.data() + S * qr, k.data() + S * kr,
                v.data() + S * kr, sc.data(), 1, S, Hq, Hkv, hd, 0.35f);
    CHECK(memcmp(o1.data(), o2.data() + S * qr, o1.size() * sizeof(float)) == 0);
    CHECK(memcmp(l1.data(), l2.data() + Hq * S, l1.size() * sizeof(float)) == 0);
    // Changing key/value at position 3 of sequence 0 leaves rows 0..2 and sequence 1 alone.
    vf k2 = k, v2 = v, o3(q.size()), l3(l2.size());
    for (int64_t i = 0; i < kr; i++) { k2[3 * kr + i] += 1.0f; v2[3 * kr + i] -= 1.0f; }
    qt_attn_fwd(o3.data(), l3.data(), q.data(), k2.data(), v2.data(), sc.data(), 2, S, Hq,
                Hkv, hd, 0.35f);
    CHECK(memcmp(o3.data(), o2.data(), 3 * qr * sizeof(float)) == 0);
    CHECK(memcmp(o3.data() + S * qr, o2.data() + S * qr, S * qr * sizeof(float)) == 0);
    CHECK(memcmp(o3.data() + 3 * qr, o2.data() + 3 * qr, qr * sizeof(float)) != 0);
    // Backward of sequence 1 alone equals its slice of the two-sequence backward.
    vf w = to_f(rand_vec(q.size(), 43)), dq2(q.size(), 0.f), dk2(k.size(), 0.f),
       dv2(v.size(), 0.f), dq1(S * qr, 0.f), dk1(S * kr, 0.f), dv1(S * kr, 0.f), sc2(QT_ATTN_BWD_SCRATCH(S));
    // hd 16 and full scratch: the blocked backward (one 4-row block, two leftover rows).
    qt_attn_bwd_n(dq2.data(), dk2.data(), dv2.data(), w.data(), q.data(), k.data(), v.data(),
                  o2.data(), l2.data(), sc2.data(), (int64_t)sc2.size(), 2, S, Hq, Hkv, hd,
                  0.35f);
    qt_attn_bwd_n(dq1.data(), dk1.data(), dv1.data(), w.data() + S * qr, q.data() + S * qr,
                  k.data() + S * kr, v.data() + S * kr, o1.data(), l1.data(), sc2.data(),
                  (int64_t)sc2.size(), 1, S, Hq, Hkv, hd, 0.35f);
    CHECK(memcmp(dq1.data(), dq2.data() + S * qr, dq1.size() * sizeof(float)) == 0);
    CHECK(memcmp(dk1.data(), dk2.data() + S * kr, dk1.size() * sizeof(float)) == 0);
    CHECK(memcmp(dv1.data(), dv2.data() + S * kr, dv1.size() * sizeof(float)) == 0);
}

TEST(AttnKernel, ScratchFreePathGivesSameBits)
{
    const int64_t b = 2, S = 9, Hq = 2, Hkv = 1, hd = 20;
    vf q = to_f(rand_vec(b * S * Hq * hd, 50)), k = to_f(rand_vec(b * S * hd, 51)),
       v = to_f(rand_vec(b * S * hd, 52));
    vf oa(q.size()), la(b * Hq * S), ob(q.size()), lb(la.size()), sc(S);
    qt_attn_fwd(oa.data(), la.data(), q.data(), k.data(), v.data(), sc.data(), b, S, Hq, Hkv,
                hd, 0.2f);
    qt_attn_fwd(ob.data(), lb.data(), q.data(), k.data(), v.data(), NULL, b, S, Hq, Hkv, hd,
                0.2f);
    CHECK(bits_equal(oa, ob));
    CHECK(bits_equal(la, lb));
}

// Shape of an attention check: batch, sequence, q heads, kv heads, head dim.
struct AttnShape { int64_t b, S, Hq, Hkv, hd; };

// The fast forward and backward (scratch sa; filled with NaN before the backward when
// nan_fill, so the caller can tell which path wrote it) against the one-dot-at-a-time
// references, bit for bit, in float; the backward accumulates into g0..g2 and must move dq.
static void attn_paths_f32(const AttnShape &c, double scale, vf &sa, const vd &q, const vd &k,
                           const vd &v, const vd &w, const vd &g0, const vd &g1, const vd &g2,
                           bool nan_fill)
{
    const int64_t nq = c.b * c.S * c.Hq * c.hd;
    vf qf = to_f(q), kf = to_f(k), vv = to_f(v), wf = to_f(w), oa(nq), ob(nq),
       la(c.b * c.Hq * c.S), lb(la.size()), sb(c.S);
    qt_attn_fwd(oa.data(), la.data(), qf.data(), kf.data(), vv.data(), sa.data(), c.b, c.S, c.Hq,
                c.Hkv, c.hd, (float)scale);
    qt_attn_fwd_ref(ob.data(), lb.data(), qf.data(), kf.data(), vv.data(), sb.data(), c.b, c.S,
                    c.Hq, c.Hkv, c.hd, (float)scale);
    CHECK(bits_equal(oa, ob));
    CHECK(bits_equal(la, lb));
    vf dqa = to_f(g0), dka = to_f(g1), dva = to_f(g2), dqb = dqa, dkb = dka, dvb = dva;
    if (nan_fill) std::fill(sa.begin(), sa.end(), std::numeric_limits<float>::quiet_NaN());
    qt_attn_bwd_n(dqa.data(), dka.data(), dva.data(), wf.data(), qf.data(), kf.data(), vv.data(),
                  oa.data(), la.data(), sa.data(), (int64_t)sa.size(), c.b, c.S, c.Hq, c.Hkv,
                  c.hd, (float)scale);
    qt_attn_bwd_ref(dqb.data(), dkb.data(), dvb.data(), wf.data(), qf.data(), kf.data(),
                    vv.data(), oa.data(), la.data(), sb.data(), c.b, c.S, c.Hq, c.Hkv, c.hd,
                    (float)scale);
    CHECK(bits_equal(dqa, dqb));
    CHECK(bits_equal(dka, dkb));
    CHECK(bits_equal(dva, dvb));
    CHECK(!bits_equal(dqa, to_f(g0)));   // the backward did something
}

// The same in double (the k64 build of the kernels).
static void attn_paths_f64(const AttnShape &c, double scale, vd &sa, const vd &q, const vd &k,
                           const vd &v, const vd &w, const vd &g0, const vd &g1, const vd &g2,
                           bool nan_fill)
{
    const int64_t nq = c.b * c.S * c.Hq * c.hd, nk = c.b * c.S * c.Hkv * c.hd;
    vd oa(nq), ob(nq), la(c.b * c.Hq * c.S), lb(la.size()), sb(c.S);
    qt_attn_fwd_f64(oa.data(), la.data(), q.data(), k.data(), v.data(), sa.data(), c.b, c.S,
                    c.Hq, c.Hkv, c.hd, scale);
    qt_attn_fwd_ref_f64(ob.data(), lb.data(), q.data(), k.data(), v.data(), sb.data(), c.b, c.S,
                        c.Hq, c.Hkv, c.hd, scale);
    CHECK(memcmp(oa.data(), ob.data(), nq * sizeof(double)) == 0);
    CHECK(memcmp(la.data(), lb.data(), la.size() * sizeof(double)) == 0);
    vd dqa = g0, dka = g1, dva = g2, dqb = g0, dkb = g1, dvb = g2;
    if (nan_fill) std::fill(sa.begin(), sa.end(), std::numeric_limits<double>::quiet_NaN());
    qt_attn_bwd_n_f64(dqa.data(), dka.data(), dva.data(), w.data(), q.data(), k.data(), v.data(),
                      oa.data(), la.data(), sa.data(), (int64_t)sa.size(), c.b, c.S, c.Hq,
                      c.Hkv, c.hd, scale);
    qt_attn_bwd_ref_f64(dqb.data(), dkb.data(), dvb.data(), w.data(), q.data(), k.data(),
                        v.data(), oa.data(), la.data(), sb.data(), c.b, c.S, c.Hq, c.Hkv, c.hd,
                        scale);
    CHECK(memcmp(dqa.data(), dqb.data(), nq * sizeof(double)) == 0);
    CHECK(memcmp(dka.data(), dkb.data(), nk * sizeof(double)) == 0);
    CHECK(memcmp(dva.data(), dvb.data(), nk * sizeof(double)) == 0);
}

// The batched fast paths (eight keys' dots at once, exponentials in a separate pass; the
// forward takes the tiled path at these shapes, TiledPathsBitIdenticalToReference) must
// reproduce the one-dot-at-a-time references bit for bit, float and double: S and hd with
// and without multiples of 8 (dot8 blocks, tails, lane tails), GQA groups of 1 and 2,
// non-zero gradient buffers (the backward accumulates). hd 64 and 16 take the blocked
// 16-wide fast paths (with S % 4 leftover rows), hd 12 and 5 the fallbacks; S 1500 and 2048
// the blocked backward beyond the old 1024 stack-tile bound (its tiles now live in scratch).
// small = 1: one element less scratch than QT_ATTN_BWD_SCRATCH(S), so the backward must fall
// back to the reference path, with the same bits. Which path ran is observed through the
// scratch: it is filled with NaN first, the blocked path writes its DS tile at offset
// QT_ATTN_BWD_ROWS*S, the reference path touches only [0, S).
TEST(AttnKernel, BatchedDotsBitIdenticalToReference)
{
    struct { int64_t b, S, Hq, Hkv, hd; int small; } cases[] = {
        {2, 37, 4, 2, 64, 0},   {1, 24, 2, 2, 12, 0},  {2, 7, 2, 1, 5, 0},
        {2, 10, 2, 1, 16, 0},   {1, 1500, 2, 1, 64, 0}, {1, 2048, 2, 1, 64, 0},
        {2, 37, 4, 2, 64, 1},   {1, 1500, 2, 1, 64, 1}};
    for (auto &c : cases) {
        const int64_t T = c.b * c.S, nq = T * c.Hq * c.hd, nk = T * c.Hkv * c.hd;
        const uint64_t sd = 70 + (uint64_t)c.S;
        const size_t nsa = (size_t)(QT_ATTN_BWD_SCRATCH(c.S) - c.small);
        const bool blocked = c.hd % 16 == 0 && !c.small;
        const size_t probe = (size_t)(QT_ATTN_BWD_ROWS * c.S);   // DS row 0, key 0
        vd q = rand_vec(nq, sd, 2.0), k = rand_vec(nk, sd + 1, 2.0), v = rand_vec(nk, sd + 2),
           w = rand_vec(nq, sd + 3), g0 = rand_vec(nq, sd + 4), g1 = rand_vec(nk, sd + 5),
           g2 = rand_vec(nk, sd + 6);
        const double scale = 0.125;
        const AttnShape sh = {c.b, c.S, c.Hq, c.Hkv, c.hd};
        vf sa(nsa);
        attn_paths_f32(sh, scale, sa, q, k, v, w, g0, g1, g2, true);
        CHECK(blocked ? !std::isnan(sa[probe]) : std::isnan(sa[probe]));
        vd sd64(nsa);
        attn_paths_f64(sh, scale, sd64, q, k, v, w, g0, g1, g2, true);
        CHECK(blocked ? !std::isnan(sd64[probe]) : std::isnan(sd64[probe]));
    }
}

// The tiled paths (the forward in blocks of 32 rows with four-key score tiles and 8 x 32
// P V tiles; the backward in key blocks of 64 with packed keys and register-tiled
// updates) against the one-dot-at-a-time references, bit for bit, float and double, on the
// planned scratch QT_ATTN_BWD_SCRATCH(S): head dims 64, 128, 256 and 48 (a 16-wide last
// slice, the backward's general update), GQA ratios 1, 2 and 8, S not a multiple of 8, 32
// or 64 (partial row groups, partial key groups, the last forward block of 5 or 12 rows),
// S below 256 (the 4-row backward), and packed documents (qt_attn_*_docs: every document
// must equal the reference run on it alone; documents of 1, 45 and 270 rows, each taking
// the key-block backward inside the sequence's scratch). hd 528 is past the packing
// buffers (QT_ATTN_PACK_HD): the 8-row forward blocks and the 4-row backward, which the
// tiled forward replaced at every other shape here.
TEST(AttnKernel, TiledPathsBitIdenticalToReference)
{
    struct { int64_t b, S, Hq, Hkv, hd; } cases[] = {
        {1, 300, 2, 2, 256}, {2, 77, 4, 2, 128}, {1, 261, 8, 1, 64}, {1, 333, 2, 1, 48},
        {1, 517, 2, 1, 128}, {1, 37, 2, 1, 528}};
    const double scale = 0.0625;
    for (auto &c : cases) {
        const int64_t T = c.b * c.S, nq = T * c.Hq * c.hd, nk = T * c.Hkv * c.hd;
        const uint64_t sd = 900 + (uint64_t)(c.S + c.hd);
        vd q = rand_vec(nq, sd, 2.0), k = rand_vec(nk, sd + 1, 2.0), v = rand_vec(nk, sd + 2),
           w = rand_vec(nq, sd + 3), g0 = rand_vec(nq, sd + 4), g1 = rand_vec(nk, sd + 5),
           g2 = rand_vec(nk, sd + 6);
        const AttnShape sh = {c.b, c.S, c.Hq, c.Hkv, c.hd};
        vf sa(QT_ATTN_BWD_SCRATCH(c.S));
        attn_paths_f32(sh, scale, sa, q, k, v, w, g0, g1, g2, false);
        vd sd64(QT_ATTN_BWD_SCRATCH(c.S));
        attn_paths_f64(sh, scale, sd64, q, k, v, w, g0, g1, g2, false);
    }
    {   // packed documents (float): each document against the reference on it alone
        const int64_t S = 316, Hq = 4, Hkv = 2, hd = 64, qw = Hq * hd, kw = Hkv * hd;
        const int64_t starts[] = {0, 45, 46, S};   // documents of 45, 1 and 270 rows
        std::vector<int32_t> pos(S);
        for (int d = 0; d < 3; d++)
            for (int64_t i = starts[d]; i < starts[d + 1]; i++) pos[i] = (int32_t)(i - starts[d]);
        vf q = to_f(rand_vec(S * qw, 950, 2.0)), k = to_f(rand_vec(S * kw, 951, 2.0)),
           v = to_f(rand_vec(S * kw, 952)), w = to_f(rand_vec(S * qw, 953)), o(S * qw),
           lse(Hq * S), sc(QT_ATTN_BWD_SCRATCH(S)), dq(S * qw, 0.f), dk(S * kw, 0.f),
           dv(S * kw, 0.f);
        qt_attn_fwd_docs(o.data(), lse.data(), q.data(), k.data(), v.data(), sc.data(),
                         pos.data(), 1, S, Hq, Hkv, hd, 0.125f);
        qt_attn_bwd_docs(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(),
                         v.data(), o.data(), lse.data(), pos.data(), sc.data(),
                         (int64_t)sc.size(), 1, S, Hq, Hkv, hd, 0.125f);
        for (int d = 0; d < 3; d++) {
            const int64_t a = starts[d], L = starts[d + 1] - a;
            vf od(L * qw), ld(Hq * L), sd(L), dqd(L * qw, 0.f), dkd(L * kw, 0.f),
               dvd(L * kw, 0.f);
            qt_attn_fwd_ref(od.data(), ld.data(), q.data() + a * qw, k.data() + a * kw,
                            v.data() + a * kw, sd.data(), 1, L, Hq, Hkv, hd, 0.125f);
            qt_attn_bwd_ref(dqd.data(), dkd.data(), dvd.data(), w.data() + a * qw,
                            q.data() + a * qw, k.data() + a * kw, v.data() + a * kw, od.data(),
                            ld.data(), sd.data(), 1, L, Hq, Hkv, hd, 0.125f);
            CHECK(memcmp(od.data(), o.data() + a * qw, L * qw * sizeof(float)) == 0);
            for (int64_t h = 0; h < Hq; h++)
                CHECK(memcmp(ld.data() + h * L, lse.data() + h * S + a, L * sizeof(float)) == 0);
            CHECK(memcmp(dqd.data(), dq.data() + a * qw, L * qw * sizeof(float)) == 0);
            CHECK(memcmp(dkd.data(), dk.data() + a * kw, L * kw * sizeof(float)) == 0);
            CHECK(memcmp(dvd.data(), dv.data() + a * kw, L * kw * sizeof(float)) == 0);
        }
    }
}

// The float bit contract of attention.h written out here, independently of the kernels:
// one multiply-add = one std::fmaf (fused), or the pre-2026-12-02 form c + a*b with two
// roundings (fused = false; this file is built with -ffp-contract=off, so it stays two).
static float attn_mad(float a, float b, float c, bool fused)
{
    return fused ? std::fmaf(a, b, c) : c + a * b;
}

// Eight lane chains (lane l: elements l, l+8, ... of the full blocks, then tail element
// n8 + u into lane u), combined ((0+1)+(2+3))+((4+5)+(6+7)).
static float attn_contract_dot(const float *a, const float *b, int64_t n, bool fused)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n; i++) {
        const int l = (int)(i < n8 ? i % 8 : i - n8);
        acc[l] = attn_mad(a[i], b[i], acc[l], fused);
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Forward and backward of the contract (the backward accumulates into dq, dk, dv and reads
// o and lse as given): s = dot * scale, m and the exp sum over j increasing,
// lse = m + log(sum), o = chain over j of p_ij v_j from +0; per (sequence, head h
// increasing, row i increasing): D = dot(do_i, o_i), for j: p = exp(dot(q_i, k_j) * scale
// - lse), dv_j chain += p do_i, ds_j = scale * (p * (dot(do_i, v_j) - D)); then for j:
// dq_i += ds_j k_j, dk_j += ds_j q_i. exp / log: the firmware's own (qt_expf, qt_logf).
static void attn_contract(vf &o, vf &lse, vf &dq, vf &dk, vf &dv, const vf &q, const vf &k,
                          const vf &v, const vf &w, const vf &ob, const vf &lb,
                          const AttnShape &c, float scale, bool fused)
{
    const int64_t kw = c.Hkv * c.hd;
    std::vector<float> sc(c.S), ds(c.S);
    for (int64_t s = 0; s < c.b; s++)
        for (int64_t h = 0; h < c.Hq; h++) {
            const int64_t g = h / (c.Hq / c.Hkv);
            const float *kb = k.data() + s * c.S * kw + g * c.hd;
            const float *vb = v.data() + s * c.S * kw + g * c.hd;
            float *dkb = dk.data() + s * c.S * kw + g * c.hd;
            float *dvb = dv.data() + s * c.S * kw + g * c.hd;
            for (int64_t i = 0; i < c.S; i++) {
                const int64_t qo = ((s * c.S + i) * c.Hq + h) * c.hd;
                const float *qi = q.data() + qo, *doi = w.data() + qo;
                for (int64_t j = 0; j <= i; j++)
                    sc[j] = attn_contract_dot(qi, kb + j * kw, c.hd, fused) * scale;
                float m = sc[0], sum = 0;
                for (int64_t j = 1; j <= i; j++) m = sc[j] > m ? sc[j] : m;
                for (int64_t j = 0; j <= i; j++) sum += qt_expf(sc[j] - m);
                const float l = m + qt_logf(sum);
                lse[(s * c.Hq + h) * c.S + i] = l;
                for (int64_t d = 0; d < c.hd; d++) o[qo + d] = 0;
                for (int64_t j = 0; j <= i; j++)
                    for (int64_t d = 0; d < c.hd; d++)
                        o[qo + d] = attn_mad(qt_expf(sc[j] - l), vb[j * kw + d], o[qo + d], fused);
                const float lg = lb[(s * c.Hq + h) * c.S + i];
                const float D = attn_contract_dot(doi, ob.data() + qo, c.hd, fused);
                for (int64_t j = 0; j <= i; j++) {
                    const float sj = attn_contract_dot(qi, kb + j * kw, c.hd, fused) * scale;
                    const float p = qt_expf(sj - lg);
                    for (int64_t d = 0; d < c.hd; d++)
                        dvb[j * kw + d] = attn_mad(p, doi[d], dvb[j * kw + d], fused);
                    ds[j] = scale * (p * (attn_contract_dot(doi, vb + j * kw, c.hd, fused) - D));
                }
                for (int64_t j = 0; j <= i; j++)
                    for (int64_t d = 0; d < c.hd; d++) {
                        dq[qo + d] = attn_mad(ds[j], kb[j * kw + d], dq[qo + d], fused);
                        dkb[j * kw + d] = attn_mad(ds[j], qi[d], dkb[j * kw + d], fused);
                    }
            }
        }
}

// The kernels follow the FMA contract, not the old multiply-then-add one: every fast path
// (the tiled forward and key-block backward at S 300, hd 32; the 4-row backward at S 70,
// hd 48; the one-row forward and reference backward at hd 24, with a lane tail at 13) gives
// the bits of attn_contract with std::fmaf, and on each case the multiply-then-add form
// differs from it in o, lse, dq, dk and dv, so a kernel without FMA fails here.
TEST(AttnKernel, FmaContractMatchesExplicitFmaf)
{
    const AttnShape cases[] = {{1, 300, 2, 1, 32}, {2, 70, 4, 2, 48}, {1, 21, 2, 1, 24},
                               {1, 19, 2, 2, 13}};
    const float scale = 0.25f;
    for (const AttnShape &c : cases) {
        const int64_t T = c.b * c.S, nq = T * c.Hq * c.hd, nk = T * c.Hkv * c.hd;
        const uint64_t sd = 1300 + (uint64_t)(c.S + c.hd);
        const vf q = to_f(rand_vec(nq, sd, 2.0)), k = to_f(rand_vec(nk, sd + 1, 2.0)),
                 v = to_f(rand_vec(nk, sd + 2)), w = to_f(rand_vec(nq, sd + 3));
        const vf g0 = to_f(rand_vec(nq, sd + 4)), g1 = to_f(rand_vec(nk, sd + 5)),
                 g2 = to_f(rand_vec(nk, sd + 6));
        vf o(nq), lse(c.b * c.Hq * c.S), sa(QT_ATTN_BWD_SCRATCH(c.S));
        qt_attn_fwd(o.data(), lse.data(), q.data(), k.data(), v.data(), sa.data(), c.b, c.S,
                    c.Hq, c.Hkv, c.hd, scale);
        vf dq = g0, dk = g1, dv = g2;
        qt_attn_bwd_n(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(),
                      o.data(), lse.data(), sa.data(), (int64_t)sa.size(), c.b, c.S, c.Hq,
                      c.Hkv, c.hd, scale);
        vf oc[2], lc[2], dqc[2] = {g0, g0}, dkc[2] = {g1, g1}, dvc[2] = {g2, g2};
        for (int f = 0; f < 2; f++) {
            oc[f].resize(nq), lc[f].resize(lse.size());
            // the backward reads the kernel's o and lse: each part is checked on its own
            attn_contract(oc[f], lc[f], dqc[f], dkc[f], dvc[f], q, k, v, w, o, lse, c, scale,
                          f == 1);
        }
        CHECK(bits_equal(o, oc[1]));
        CHECK(bits_equal(lse, lc[1]));
        CHECK(bits_equal(dq, dqc[1]));
        CHECK(bits_equal(dk, dkc[1]));
        CHECK(bits_equal(dv, dvc[1]));
        CHECK(!bits_equal(oc[0], oc[1]));
        CHECK(!bits_equal(lc[0], lc[1]));
        CHECK(!bits_equal(dqc[0], dqc[1]));
        CHECK(!bits_equal(dkc[0], dkc[1]));
        CHECK(!bits_equal(dvc[0], dvc[1]));
    }
}

TEST(AttnKernel, FloatMatchesDouble)
{
    const int64_t b = 2, S = 33, Hq = 4, Hkv = 2, hd = 64;
    const double scale = 0.125;
    vd q = rand_vec(b * S * Hq * hd, 60, 2.0), k = rand_vec(b * S * Hkv * hd, 61, 2.0),
       v = rand_vec(b * S * Hkv * hd, 62), w = rand_vec(q.size(), 63);
    vd o(q.size()), lse(b * Hq * S), sc(2 * S), dq(q.size(), 0.), dk(k.size(), 0.),
       dv(v.size(), 0.);
    vf qf = to_f(q), kf = to_f(k), vf_ = to_f(v), wf = to_f(w), of(q.size()),
       lf(lse.size()), scf(2 * S), dqf(q.size(), 0.f), dkf(k.size(), 0.f), dvf(v.size(), 0.f);
    qt_attn_fwd_f64(o.data(), lse.data(), q.data(), k.data(), v.data(), sc.data(), b, S, Hq,
                    Hkv, hd, scale);
    qt_attn_fwd(of.data(), lf.data(), qf.data(), kf.data(), vf_.data(), scf.data(), b, S, Hq,
                Hkv, hd, (float)scale);
    qt_attn_bwd_f64(dq.data(), dk.data(), dv.data(), w.data(), q.data(), k.data(), v.data(),
                    o.data(), lse.data(), sc.data(), b, S, Hq, Hkv, hd, scale);
    qt_attn_bwd(dqf.data(), dkf.data(), dvf.data(), wf.data(), qf.data(), kf.data(),
                vf_.data(), of.data(), lf.data(), scf.data(), b, S, Hq, Hkv, hd, (float)scale);
    // 1e-5 relative to the tensor's max: float sums of <= 33*64 terms with exp/log at 1 ulp.
    CHECK(qt_test_rel_err_f32("attn o f32", of.data(), o.data(), o.size(), 1e-5) <= 1e-5);
    CHECK(qt_test_rel_err_f32("attn lse f32", lf.data(), lse.data(), lse.size(), 1e-5) <= 1e-5);
    CHECK(qt_test_rel_err_f32("attn dq f32", dqf.data(), dq.data(), dq.size(), 1e-5) <= 1e-5);
    CHECK(qt_test_rel_err_f32("attn dk f32", dkf.data(), dk.data(), dk.size(), 1e-5) <= 1e-5);
    CHECK(qt_test_rel_err_f32("attn dv f32", dvf.data(), dv.data(), dv.size(), 1e-5) <= 1e-5);
}

// ------------------------------------------------------------------------------ moe_route

// Logits whose values are distinct by >= 0.1 within each row (a random permutation of a
// spaced grid plus noise < 0.05), so a +-1e-6 probe never changes the top-k selection.
static vd spaced_logits(int64_t T, int64_t E, uint64_t seed)
{
    vd l(T * E);
    for (int64_t t = 0; t < T; t++) {
        std::vector<int> perm(E);
        for (int64_t e = 0; e < E; e++) perm[e] = (int)e;
        for (int64_t e = E - 1; e > 0; e--) {
            const int64_t j = (int64_t)((qt_test_rand(&seed) + 1.0) * 0.5 * (double)(e + 1)) % (e + 1);
            std::swap(perm[e], perm[j]);
        }
        for (int64_t e = 0; e < E; e++)
            l[t * E + e] = 0.3 * perm[e] - 1.0 + 0.04 * qt_test_rand(&seed);
    }
    return l;
}

TEST_GROUP(MoeRouteKernel) {};

TEST(MoeRouteKernel, TopKTiesGoToLowerIndex)
{
    const double l[3 * 5] = {1, 3, 3, 2, 3,   0, 0, 0, 0, 0,   -1, 5, -2, 5, 4};
    vd p(9);
    std::vector<int32_t> idx(9);
    qt_moe_route_fwd_f64(idx.data(), p.data(), NULL, l, 3, 5, 3, 3, 0.0);
    const int32_t want[9] = {1, 2, 4, 0, 1, 2, 1, 3, 4};
    for (int i = 0; i < 9; i++) LONGS_EQUAL(want[i], idx[i]);
    // Equal logits give equal probabilities (exactly: same exp input).
    CHECK_EQUAL(p[0], p[1]);
    CHECK_EQUAL(p[1], p[2]);
    DOUBLES_EQUAL(1.0, p[3] + p[4] + p[5], 1e-15);   // sum of three thirds: 1 ulp
    vf lf(l, l + 15), pf(9);
    std::vector<int32_t> idxf(9);
    qt_moe_route_fwd(idxf.data(), pf.data(), NULL, lf.data(), 3, 5, 3, 3, 0.0f);
    for (int i = 0; i < 9; i++) LONGS_EQUAL(want[i], idxf[i]);
}

TEST(MoeRouteKernel, BackwardMatchesFiniteDifferences)
{
    const int64_t T = 8, E = 6, k = 3, S = 4, b = T / S;
    const double c = 0.37;
    vd l = spaced_logits(T, E, 70), w = rand_vec(T * k, 71), base = rand_vec(T * E, 72);
    vd p(T * k), lb(b, 0.0), dl = base;
    std::vector<int32_t> idx(T * k), idx0(T * k);
    qt_moe_route_fwd_f64(idx0.data(), p.data(), lb.data(), l.data(), T, E, k, S, c);
    qt_moe_route_bwd_f64(dl.data(), w.data(), l.data(), idx0.data(), p.data(), T, E, k, S, c);
    for (int64_t i = 0; i < T * E; i++) dl[i] -= base[i];
    bool same_route = true;
    auto loss = [&]() {
        vd pp(T * k), lbb(b, 0.0);
        qt_moe_route_fwd_f64(idx.data(), pp.data(), lbb.data(), l.data(), T, E, k, S, c);
        same_route = same_route && idx == idx0;
        return dot(pp, w) + lbb[0] + lbb[1];
    };
    // h = 1e-6 on margins >= 0.06: the selection is constant (checked); tol 1e-8.
    CHECK(fd_check("route dlogits", l, dl, 1e-6, loss, 1e-8) <= 1e-8);
    CHECK(same_route);
    // The lb term actually contributed (a wrong c path cannot pass silently).
    CHECK(lb[0] > 0 && lb[1] > 0);
}

TEST(MoeRouteKernel, LoadBalanceValueMatchesDefinition)
{
    const int64_t T = 6, E = 4, k = 2, S = 3;
    vd l = spaced_logits(T, E, 80), p(T * k), lb(2, 0.25);
    std::vector<int32_t> idx(T * k);
    qt_moe_route_fwd_f64(idx.data(), p.data(), lb.data(), l.data(), T, E, k, S, 0.5);
    for (int64_t s = 0; s < 2; s++) {
        double want = 0;
        for (int64_t e = 0; e < E; e++) {
            double f = 0, pb = 0;
            for (int64_t t = s * S; t < (s + 1) * S; t++) {
                for (int64_t j = 0; j < k; j++) f += idx[t * k + j] == e;
                double z = 0;
                for (int64_t u = 0; u < E; u++) z += exp(l[t * E + u]);
                pb += exp(l[t * E + e]) / z;
            }
            want += (f / S) * (pb / S);
        }
        // 1e-14: double, different order; 0.25 checks the accumulation.
        DOUBLES_EQUAL(0.25 + 0.5 * want, lb[s], 1e-14);
    }
}

TEST(MoeRouteKernel, FloatMatchesDouble)
{
    const int64_t T = 12, E = 16, k = 4, S = 6;
    vd l = spaced_logits(T, E, 90), w = rand_vec(T * k, 91), p(T * k), lb(2, 0.), dl(T * E, 0.);
    vf lf = to_f(l), wf = to_f(w), pf(T * k), lbf(2, 0.f), dlf(T * E, 0.f);
    std::vector<int32_t> idx(T * k), idxf(T * k);
    qt_moe_route_fwd_f64(idx.data(), p.data(), lb.data(), l.data(), T, E, k, S, 0.37);
    qt_moe_route_fwd(idxf.data(), pf.data(), lbf.data(), lf.data(), T, E, k, S, 0.37f);
    CHECK(idx == idxf);
    qt_moe_route_bwd_f64(dl.data(), w.data(), l.data(), idx.data(), p.data(), T, E, k, S, 0.37);
    qt_moe_route_bwd(dlf.data(), wf.data(), lf.data(), idxf.data(), pf.data(), T, E, k, S, 0.37f);
    // 1e-5: short float sums of exp (1 ulp) values.
    CHECK(qt_test_rel_err_f32("route p f32", pf.data(), p.data(), p.size(), 1e-5) <= 1e-5);
    CHECK(qt_test_rel_err_f32("route lb f32", lbf.data(), lb.data(), 2, 1e-5) <= 1e-5);
    CHECK(qt_test_rel_err_f32("route dl f32", dlf.data(), dl.data(), dl.size(), 1e-5) <= 1e-5);
}

// ------------------------------------------------------------------------------ expert_ffn

struct FfnCase {
    int64_t T, k, E, d, f, S;
    vd x, wgu, wdown;
    std::vector<int32_t> idx;
};

static FfnCase ffn_case(int64_t T, int64_t k, int64_t E, int64_t d, int64_t f, int64_t S,
                        uint64_t seed)
{
    FfnCase c{T, k, E, d, f, S, rand_vec(T * d, seed), rand_vec(E * 2 * f * d, seed + 1, 0.7),
              rand_vec(E * d * f, seed + 2, 0.7), std::vector<int32_t>(T * k)};
    vd l = spaced_logits(T, E, seed + 3), p(T * k);
    qt_moe_route_fwd_f64(c.idx.data(), p.data(), NULL, l.data(), T, E, k, S, 0.0);
    return c;
}

static int64_t ffn_scratch(const FfnCase &c)
{
    return c.T * c.k * (c.d + c.f);   // the plan's size (qt_ops.h)
}

TEST_GROUP(ExpertFfnKernel) {};

TEST(ExpertFfnKernel, ForwardMatchesNaive)
{
    FfnCase c = ffn_case(7, 2, 3, 5, 4, 7, 100);
    vd y(c.T * c.k * c.d), gu(c.T * c.k * 2 * c.f), sc(ffn_scratch(c));
    qt_expert_ffn_fwd_f64(y.data(), gu.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                          c.wdown.data(), sc.data(), c.T, c.k, c.E, c.d, c.f, sc.size());
    vd yn(y.size());
    for (int64_t r = 0; r < c.T * c.k; r++) {
        const int64_t e = c.idx[r], t = r / c.k;
        vd h(c.f);
        for (int64_t i = 0; i < c.f; i++) {
            double a = 0, u = 0;
            for (int64_t j = 0; j < c.d; j++) {
                a += c.wgu[(e * 2 * c.f + i) * c.d + j] * c.x[t * c.d + j];
                u += c.wgu[(e * 2 * c.f + c.f + i) * c.d + j] * c.x[t * c.d + j];
            }
            // gu must hold the pre-activations.
            DOUBLES_EQUAL(a, gu[r * 2 * c.f + i], 1e-14);
            DOUBLES_EQUAL(u, gu[r * 2 * c.f + c.f + i], 1e-14);
            h[i] = a / (1 + exp(-a)) * u;
        }
        for (int64_t j = 0; j < c.d; j++) {
            double acc = 0;
            for (int64_t i = 0; i < c.f; i++) acc += c.wdown[(e * c.d + j) * c.f + i] * h[i];
            yn[r * c.d + j] = acc;
        }
    }
    // 1e-14: double, short sums.
    CHECK(qt_test_rel_err_f64("ffn y", y.data(), yn.data(), y.size(), 1e-14) <= 1e-14);
}

TEST(ExpertFfnKernel, BackwardAndWgradMatchFiniteDifferences)
{
    FfnCase c = ffn_case(8, 2, 3, 5, 4, 4, 110);   // two sequences of 4 tokens
    const int64_t n_y = c.T * c.k * c.d, b = c.T / c.S;
    vd w = rand_vec(n_y, 115), y(n_y), gu(c.T * c.k * 2 * c.f), sc(ffn_scratch(c));
    qt_expert_ffn_fwd_f64(y.data(), gu.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                          c.wdown.data(), sc.data(), c.T, c.k, c.E, c.d, c.f, sc.size());
    vd base = rand_vec(c.T * c.d, 116), dx = base;
    qt_expert_ffn_bwd_f64(dx.data(), w.data(), c.idx.data(), gu.data(), c.wgu.data(),
                          c.wdown.data(), sc.data(), c.T, c.k, c.E, c.d, c.f, sc.size());
    for (size_t i = 0; i < dx.size(); i++) dx[i] -= base[i];
    vd dwgu(c.wgu.size(), 0.0), dwdown(c.wdown.size(), 0.0);
    for (int64_t s = 0; s < b; s++) {   // as the interpreter: one call per sequence, summed
        const int64_t t0 = s * c.S;
        vd lgu(dwgu.size(), 0.0), ldown(dwdown.size(), 0.0);
        qt_expert_ffn_wgrad_f64(lgu.data(), ldown.data(), w.data() + t0 * c.k * c.d,
                                c.x.data() + t0 * c.d, c.idx.data() + t0 * c.k,
                                gu.data() + t0 * c.k * 2 * c.f, c.wdown.data(), sc.data(),
                                c.S, c.k, c.E, c.d, c.f, sc.size());
        for (size_t i = 0; i < lgu.size(); i++) dwgu[i] += lgu[i];
        for (size_t i = 0; i < ldown.size(); i++) dwdown[i] += ldown[i];
    }
    vd yt(n_y), gt(gu.size());
    auto loss = [&]() {
        qt_expert_ffn_fwd_f64(yt.data(), gt.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                              c.wdown.data(), sc.data(), c.T, c.k, c.E, c.d, c.f, sc.size());
        return dot(yt, w);
    };
    // h = 1e-5: truncation ~1e-10, rounding ~1e-11; tol 1e-8.
    CHECK(fd_check("ffn dx", c.x, dx, 1e-5, loss, 1e-8) <= 1e-8);
    CHECK(fd_check("ffn dw_gu", c.wgu, dwgu, 1e-5, loss, 1e-8) <= 1e-8);
    CHECK(fd_check("ffn dw_down", c.wdown, dwdown, 1e-5, loss, 1e-8) <= 1e-8);
}

TEST(ExpertFfnKernel, ScratchSizeAndBatchDoNotChangeBits)
{
    FfnCase c = ffn_case(12, 3, 4, 8, 6, 6, 120);
    vf x = to_f(c.x), wgu = to_f(c.wgu), wdown = to_f(c.wdown);
    const int64_t n_y = c.T * c.k * c.d;
    vf big(ffn_scratch(c)), small(c.d + 3 * c.f);   // one row at a time
    vf ya(n_y), ga(c.T * c.k * 2 * c.f), yb(n_y), gb(ga.size());
    qt_expert_ffn_fwd(ya.data(), ga.data(), x.data(), c.idx.data(), wgu.data(), wdown.data(),
                      big.data(), c.T, c.k, c.E, c.d, c.f, big.size());
    qt_expert_ffn_fwd(yb.data(), gb.data(), x.data(), c.idx.data(), wgu.data(), wdown.data(),
                      small.data(), c.T, c.k, c.E, c.d, c.f, small.size());
    CHECK(bits_equal(ya, yb));
    CHECK(bits_equal(ga, gb));
    vf dy = to_f(rand_vec(n_y, 125)), dxa(c.T * c.d, 0.f), dxb(c.T * c.d, 0.f);
    qt_expert_ffn_bwd(dxa.data(), dy.data(), c.idx.data(), ga.data(), wgu.data(), wdown.data(),
                      big.data(), c.T, c.k, c.E, c.d, c.f, big.size());
    qt_expert_ffn_bwd(dxb.data(), dy.data(), c.idx.data(), ga.data(), wgu.data(), wdown.data(),
                      small.data(), c.T, c.k, c.E, c.d, c.f, small.size());
    CHECK(bits_equal(dxa, dxb));
    // The second sequence alone (b = 1) gives the same bits as inside the b = 2 batch.
    const int64_t t0 = c.S;
    vf y1(c.S * c.k * c.d), g1(c.S * c.k * 2 * c.f), dx1(c.S * c.d, 0.f);
    qt_expert_ffn_fwd(y1.data(), g1.data(), x.data() + t0 * c.d, c.idx.data() + t0 * c.k,
                      wgu.data(), wdown.data(), big.data(), c.S, c.k, c.E, c.d, c.f, big.size());
    CHECK(memcmp(y1.data(), ya.data() + t0 * c.k * c.d, y1.size() * sizeof(float)) == 0);
    qt_expert_ffn_bwd(dx1.data(), dy.data() + t0 * c.k * c.d, c.idx.data() + t0 * c.k,
                      g1.data(), wgu.data(), wdown.data(), big.data(), c.S, c.k, c.E, c.d,
                      c.f, big.size());
    CHECK(memcmp(dx1.data(), dxa.data() + t0 * c.d, dx1.size() * sizeof(float)) == 0);
}

// The backward has two orders: expert-major (row lists, weights read once; needs the [T*k,d]
// contribution buffer in scratch) and slot-major (fallback). Dimensions large enough for the
// matmul vector tiles; scratch sizes pick: expert-major in one chunk, expert-major split into
// 5-row chunks, slot-major one row at a time. Bits must agree exactly (same per-row FMA
// chains, same per-token slot order).
TEST(ExpertFfnKernel, BackwardOrdersAndChunksAgreeBitwise)
{
    FfnCase c = ffn_case(40, 3, 4, 40, 24, 40, 160);
    vf x = to_f(c.x), wgu = to_f(c.wgu), wdown = to_f(c.wdown);
    const int64_t R = c.T * c.k, row = c.d + 3 * c.f, head = R + c.E + 1 + R * c.d;
    vf big(R * row), mid(head + 5 * row), small(row);
    vf y(R * c.d), gu(R * 2 * c.f);
    qt_expert_ffn_fwd(y.data(), gu.data(), x.data(), c.idx.data(), wgu.data(), wdown.data(),
                      big.data(), c.T, c.k, c.E, c.d, c.f, big.size());
    vf dy = to_f(rand_vec(R * c.d, 165)), base = to_f(rand_vec(c.T * c.d, 166));
    vf dxa = base, dxb = base, dxc = base;
    qt_expert_ffn_bwd(dxa.data(), dy.data(), c.idx.data(), gu.data(), wgu.data(), wdown.data(),
                      big.data(), c.T, c.k, c.E, c.d, c.f, big.size());
    qt_expert_ffn_bwd(dxb.data(), dy.data(), c.idx.data(), gu.data(), wgu.data(), wdown.data(),
                      mid.data(), c.T, c.k, c.E, c.d, c.f, mid.size());
    qt_expert_ffn_bwd(dxc.data(), dy.data(), c.idx.data(), gu.data(), wgu.data(), wdown.data(),
                      small.data(), c.T, c.k, c.E, c.d, c.f, small.size());
    CHECK(!bits_equal(dxa, base)); // the backward did something
    CHECK(bits_equal(dxa, dxb));
    CHECK(bits_equal(dxa, dxc));
}

// Issue 21: configgen sizes the canonical forward / backward scratch of an op with more
// rows than expert_chunk_rows for that many rows (no row lists when k = 1, an expert host's
// packed rows: the backward takes the slot path). Whole-rows scratch and chunks of 3 rows
// must give the same bits, k = 1 (host) and k = 3 (one rank), with canonical blocks.
TEST(ExpertFfnKernel, CanonicalChunksOfConfiggenSizeAgreeBitwise)
{
    for (int64_t k : {1, 3}) {
        FfnCase c = ffn_case(40, k, 4, 40, 24, 40, 170 + k);
        vf x = to_f(c.x), wgu = to_f(c.wgu), wdown = to_f(c.wdown);
        const int64_t nb = 2, R = c.T * c.k, C = 3;
        const int64_t row = c.d + 3 * c.f + nb * c.d + 2 * c.f / nb, fix = c.d * (2 * c.f / nb);
        const int64_t head = k > 1 ? R + c.E + 1 + R * c.d : 0;
        vf big(R * row + R + c.E + 1 + R * c.d + fix), chunk(C * row + fix + head);
        vf ya(R * c.d), ga(R * 2 * c.f), yb(ya.size()), gb(ga.size());
        qt_expert_ffn_fwd_canon(ya.data(), ga.data(), x.data(), c.idx.data(), wgu.data(),
                                wdown.data(), big.data(), c.T, c.k, c.E, c.d, c.f, big.size(), nb);
        qt_expert_ffn_fwd_canon(yb.data(), gb.data(), x.data(), c.idx.data(), wgu.data(),
                                wdown.data(), chunk.data(), c.T, c.k, c.E, c.d, c.f,
                                chunk.size(), nb);
        CHECK(bits_equal(ya, yb));
        CHECK(bits_equal(ga, gb));
        vf dy = to_f(rand_vec(R * c.d, 175)), base = to_f(rand_vec(c.T * c.d, 176));
        vf dxa = base, dxb = base, dga(ga.size()), dgb(ga.size());
        qt_expert_ffn_bwd_save_canon(dxa.data(), dga.data(), dy.data(), c.idx.data(), ga.data(),
                                     wgu.data(), wdown.data(), big.data(), c.T, c.k, c.E, c.d,
                                     c.f, big.size(), nb);
        qt_expert_ffn_bwd_save_canon(dxb.data(), dgb.data(), dy.data(), c.idx.data(), ga.data(),
                                     wgu.data(), wdown.data(), chunk.data(), c.T, c.k, c.E, c.d,
                                     c.f, chunk.size(), nb);
        CHECK(!bits_equal(dxa, base));
        CHECK(bits_equal(dxa, dxb));
        CHECK(bits_equal(dga, dgb));
    }
}

// The backward can park d(gu) for the wgrad (qt_expert_ffn_bwd_save / _wgrad_saved). All
// three backward orders must park the same bits, dx must not change, and the saved wgrad must
// equal the recomputing one bit for bit per sequence (float and double): the saved rows are
// the same FMA chains as the recomputed ones by the matmul row contract.
TEST(ExpertFfnKernel, SavedDguWgradBitIdenticalToRecompute)
{
    FfnCase c = ffn_case(40, 3, 4, 40, 24, 20, 170);   // two sequences of 20 tokens
    vf x = to_f(c.x), wgu = to_f(c.wgu), wdown = to_f(c.wdown);
    const int64_t R = c.T * c.k, row = c.d + 3 * c.f, head = R + c.E + 1 + R * c.d;
    const int64_t b = c.T / c.S;
    vf big(R * row + head), mid(head + 5 * row), small(row);
    vf y(R * c.d), gu(R * 2 * c.f);
    qt_expert_ffn_fwd(y.data(), gu.data(), x.data(), c.idx.data(), wgu.data(), wdown.data(),
                      big.data(), c.T, c.k, c.E, c.d, c.f, big.size());
    vf dy = to_f(rand_vec(R * c.d, 175)), base = to_f(rand_vec(c.T * c.d, 176));
    vf dx0 = base, dxa = base, dxb = base, dxc = base;
    vf dga(R * 2 * c.f, 0.f), dgb = dga, dgc = dga;
    qt_expert_ffn_bwd(dx0.data(), dy.data(), c.idx.data(), gu.data(), wgu.data(), wdown.data(),
                      big.data(), c.T, c.k, c.E, c.d, c.f, big.size());
    qt_expert_ffn_bwd_save(dxa.data(), dga.data(), dy.data(), c.idx.data(), gu.data(),
                           wgu.data(), wdown.data(), big.data(), c.T, c.k, c.E, c.d, c.f,
                           big.size());
    qt_expert_ffn_bwd_save(dxb.data(), dgb.data(), dy.data(), c.idx.data(), gu.data(),
                           wgu.data(), wdown.data(), mid.data(), c.T, c.k, c.E, c.d, c.f,
                           mid.size());
    qt_expert_ffn_bwd_save(dxc.data(), dgc.data(), dy.data(), c.idx.data(), gu.data(),
                           wgu.data(), wdown.data(), small.data(), c.T, c.k, c.E, c.d, c.f,
                           small.size());
    CHECK(bits_equal(dx0, dxa));
    CHECK(bits_equal(dx0, dxb));
    CHECK(bits_equal(dx0, dxc));
    CHECK(bits_equal(dga, dgb));
    CHECK(bits_equal(dga, dgc));
    for (int64_t s = 0; s < b; s++) {
        const int64_t t0 = s * c.S;
        vf g0(wgu.size(), 0.f), g1(wdown.size(), 0.f), r0 = g0, r1 = g1;
        qt_expert_ffn_wgrad(r0.data(), r1.data(), dy.data() + t0 * c.k * c.d,
                            x.data() + t0 * c.d, c.idx.data() + t0 * c.k,
                            gu.data() + t0 * c.k * 2 * c.f, wdown.data(), big.data(), c.S,
                            c.k, c.E, c.d, c.f, big.size());
        qt_expert_ffn_wgrad_saved(g0.data(), g1.data(), dy.data() + t0 * c.k * c.d,
                                  x.data() + t0 * c.d, c.idx.data() + t0 * c.k,
                                  gu.data() + t0 * c.k * 2 * c.f,
                                  dga.data() + t0 * c.k * 2 * c.f, big.data(), c.S, c.k, c.E,
                                  c.d, c.f, big.size());
        CHECK(bits_equal(r0, g0));
        CHECK(bits_equal(r1, g1));
        double mx = 0;
        for (float g : g0) mx = fmax(mx, fabs(g));
        CHECK(mx > 0);
    }
    // double: the same identity on the _f64 kernels
    vd yd(R * c.d), gud(R * 2 * c.f), scd(big.size()), dyd = rand_vec(R * c.d, 177);
    qt_expert_ffn_fwd_f64(yd.data(), gud.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                          c.wdown.data(), scd.data(), c.T, c.k, c.E, c.d, c.f, scd.size());
    vd dxd(c.T * c.d, 0.0), dgd(R * 2 * c.f, 0.0);
    qt_expert_ffn_bwd_save_f64(dxd.data(), dgd.data(), dyd.data(), c.idx.data(), gud.data(),
                               c.wgu.data(), c.wdown.data(), scd.data(), c.T, c.k, c.E, c.d,
                               c.f, scd.size());
    vd q0(c.wgu.size(), 0.0), q1(c.wdown.size(), 0.0), p0 = q0, p1 = q1;
    qt_expert_ffn_wgrad_f64(p0.data(), p1.data(), dyd.data(), c.x.data(), c.idx.data(),
                            gud.data(), c.wdown.data(), scd.data(), c.S, c.k, c.E, c.d, c.f,
                            scd.size());
    qt_expert_ffn_wgrad_saved_f64(q0.data(), q1.data(), dyd.data(), c.x.data(), c.idx.data(),
                                  gud.data(), dgd.data(), scd.data(), c.S, c.k, c.E, c.d, c.f,
                                  scd.size());
    CHECK(memcmp(p0.data(), q0.data(), p0.size() * sizeof(double)) == 0);
    CHECK(memcmp(p1.data(), q1.data(), p1.size() * sizeof(double)) == 0);
}

TEST(ExpertFfnKernel, FloatMatchesDouble)
{
    FfnCase c = ffn_case(10, 2, 4, 16, 8, 5, 130);
    const int64_t n_y = c.T * c.k * c.d;
    vd y(n_y), gu(c.T * c.k * 2 * c.f), sc(ffn_scratch(c)), dy = rand_vec(n_y, 135),
       dx(c.T * c.d, 0.), dwg(c.wgu.size(), 0.), dwd(c.wdown.size(), 0.);
    vf xf = to_f(c.x), wgf = to_f(c.wgu), wdf = to_f(c.wdown), yf(n_y), guf(gu.size()),
       scf(sc.size()), dyf = to_f(dy), dxf(dx.size(), 0.f), dwgf(dwg.size(), 0.f),
       dwdf(dwd.size(), 0.f);
    qt_expert_ffn_fwd_f64(y.data(), gu.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                          c.wdown.data(), sc.data(), c.T, c.k, c.E, c.d, c.f, sc.size());
    qt_expert_ffn_fwd(yf.data(), guf.data(), xf.data(), c.idx.data(), wgf.data(), wdf.data(),
                      scf.data(), c.T, c.k, c.E, c.d, c.f, scf.size());
    qt_expert_ffn_bwd_f64(dx.data(), dy.data(), c.idx.data(), gu.data(), c.wgu.data(),
                          c.wdown.data(), sc.data(), c.T, c.k, c.E, c.d, c.f, sc.size());
    qt_expert_ffn_bwd(dxf.data(), dyf.data(), c.idx.data(), guf.data(), wgf.data(), wdf.data(),
                      scf.data(), c.T, c.k, c.E, c.d, c.f, scf.size());
    qt_expert_ffn_wgrad_f64(dwg.data(), dwd.data(), dy.data(), c.x.data(), c.idx.data(),
                            gu.data(), c.wdown.data(), sc.data(), c.T, c.k, c.E, c.d, c.f,
                            sc.size());
    qt_expert_ffn_wgrad(dwgf.data(), dwdf.data(), dyf.data(), xf.data(), c.idx.data(),
                        guf.data(), wdf.data(), scf.data(), c.T, c.k, c.E, c.d, c.f, scf.size());
    // 1e-5 relative to max: float dot products of 8..16 terms, silu/sigmoid at ~1 ulp.
    CHECK(qt_test_rel_err_f32("ffn y f32", yf.data(), y.data(), n_y, 1e-5) <= 1e-5);
    CHECK(qt_test_rel_err_f32("ffn dx f32", dxf.data(), dx.data(), dx.size(), 1e-5) <= 1e-5);
    CHECK(qt_test_rel_err_f32("ffn dwg f32", dwgf.data(), dwg.data(), dwg.size(), 1e-5) <= 1e-5);
    CHECK(qt_test_rel_err_f32("ffn dwd f32", dwdf.data(), dwd.data(), dwd.size(), 1e-5) <= 1e-5);
}

TEST(ExpertFfnKernel, TooSmallScratchPoisons)
{
    FfnCase c = ffn_case(3, 2, 3, 4, 3, 3, 140);
    vf x = to_f(c.x), wgu = to_f(c.wgu), wdown = to_f(c.wdown), y(c.T * c.k * c.d),
       gu(c.T * c.k * 2 * c.f), sc(4);
    qt_expert_ffn_fwd(y.data(), gu.data(), x.data(), c.idx.data(), wgu.data(), wdown.data(),
                      sc.data(), c.T, c.k, c.E, c.d, c.f, sc.size());
    CHECK(y[0] != y[0]);
}

// ------------------------------------------------------------------------------ moe_combine

TEST_GROUP(MoeCombineKernel) {};

TEST(MoeCombineKernel, BackwardMatchesFiniteDifferencesAndFloat)
{
    const int64_t T = 5, k = 3, d = 7;
    vd p = rand_vec(T * k, 150), y = rand_vec(T * k * d, 151), w = rand_vec(T * d, 152),
       out(T * d), bp = rand_vec(T * k, 153), by = rand_vec(T * k * d, 154);
    vd dp = bp, dy = by;
    qt_moe_combine_bwd_f64(dp.data(), dy.data(), w.data(), p.data(), y.data(), T, k, d);
    for (size_t i = 0; i < dp.size(); i++) dp[i] -= bp[i];
    for (size_t i = 0; i < dy.size(); i++) dy[i] -= by[i];
    auto loss = [&]() {
        qt_moe_combine_fwd_f64(out.data(), p.data(), y.data(), T, k, d);
        return dot(out, w);
    };
    // Bilinear: central differences exact up to rounding; tol 1e-9.
    CHECK(fd_check("combine dp", p, dp, 1e-4, loss, 1e-9) <= 1e-9);
    CHECK(fd_check("combine dy", y, dy, 1e-4, loss, 1e-9) <= 1e-9);
    vf pf = to_f(p), yf = to_f(y), of(T * d);
    qt_moe_combine_fwd_f64(out.data(), p.data(), y.data(), T, k, d);
    qt_moe_combine_fwd(of.data(), pf.data(), yf.data(), T, k, d);
    // 1e-6: three float products and sums.
    CHECK(qt_test_rel_err_f32("combine f32", of.data(), out.data(), out.size(), 1e-6) <= 1e-6);
}

// ------------------------------------------------------------------------------ op wrappers

// A tiny hand-built plan: tensors packed into a static arena, 64-byte aligned.
struct MiniPlan {
    alignas(64) unsigned char arena[1 << 16];
    qt_tensor tensors[24];
    qt_plan plan;
    qt_ctx ctx;
    int32_t n = 0;
    int64_t off = 0;
    void reset()
    {
        n = 0;
        off = 0;
        memset(arena, 0, sizeof arena);
        memset(&plan, 0, sizeof plan);
        plan.tensors = tensors;
        plan.arena = arena;
        plan.arena_bytes = sizeof arena;
        memset(&ctx, 0, sizeof ctx);
        ctx.plan = &plan;
        ctx.arena = arena;
    }
    int32_t add(int64_t numel, uint8_t role = QT_ROLE_ACT, uint8_t dtype = QT_F32)
    {
        qt_tensor t;
        memset(&t, 0, sizeof t);
        t.role = role;
        t.dtype = dtype;
        t.ndim = 1;
        t.shape[0] = t.global_shape[0] = numel;
        t.numel = numel;
        t.offset = off;
        off += (numel * 4 + 63) / 64 * 64;
        tensors[n] = t;
        plan.n_tensors = n + 1;
        return n++;
    }
    float *f(int32_t id) { return qt_f32(&ctx, id); }
    int32_t *i(int32_t id) { return qt_i32(&ctx, id); }
    void fill(int32_t id, uint64_t seed)
    {
        vd v = rand_vec(tensors[id].numel, seed);
        for (int64_t j = 0; j < tensors[id].numel; j++) f(id)[j] = (float)v[j];
    }
};

// File scope: the arena is too large for the stack and must not be heap (leak detector).
static MiniPlan g_mini;

static qt_op make_op(uint16_t kind)
{
    qt_op op;
    memset(&op, 0, sizeof op);
    op.kind = kind;
    for (int j = 0; j < QT_OP_MAX_T; j++) op.t[j] = QT_NONE;
    return op;
}

TEST_GROUP(AttnMoeWrappers) {};

TEST(AttnMoeWrappers, RopeAndAttentionSlots)
{
    MiniPlan &m = g_mini;
    m.reset();
    const int64_t b = 2, S = 5, Hq = 4, Hkv = 2, hd = 8, R = 4, T = b * S;
    const int32_t tab = m.add(S * R, QT_ROLE_TABLE), q = m.add(T * Hq * hd),
                  k = m.add(T * Hkv * hd), v = m.add(T * Hkv * hd), qr = m.add(T * Hq * hd),
                  o = m.add(T * Hq * hd), lse = m.add(b * Hq * S, QT_ROLE_SAVED),
                  dq = m.add(T * Hq * hd), dk = m.add(T * Hkv * hd), dv = m.add(T * Hkv * hd),
                  sc = m.add(2 * S, QT_ROLE_SCRATCH), dqr = m.add(T * Hq * hd);
    m.fill(q, 1); m.fill(k, 2); m.fill(v, 3);
    qt_op op = make_op(QT_OP_ROPE_TABLE);
    op.t[0] = tab; op.a[0] = S; op.a[1] = R; op.f[0] = 10000.0f;
    qt_op_rope_table(&op, &m.ctx);
    vf tab_ref(S * R);
    qt_rope_table(tab_ref.data(), S, R, 10000.0);
    CHECK(memcmp(tab_ref.data(), m.f(tab), tab_ref.size() * 4) == 0);

    op = make_op(QT_OP_ROPE_FWD);
    op.t[0] = qr; op.t[1] = q; op.t[2] = tab;
    op.a[0] = b; op.a[1] = S; op.a[2] = Hq; op.a[3] = hd; op.a[4] = R;
    qt_op_rope_fwd(&op, &m.ctx);
    vf ref(T * Hq * hd);
    qt_rope_fwd(ref.data(), m.f(q), tab_ref.data(), b, S, Hq, hd, R);
    CHECK(memcmp(ref.data(), m.f(qr), ref.size() * 4) == 0);

    op = make_op(QT_OP_ATTN_FWD);
    op.t[0] = o; op.t[1] = lse; op.t[2] = qr; op.t[3] = k; op.t[4] = v;
    op.a[0] = b; op.a[1] = S; op.a[2] = Hq; op.a[3] = Hkv; op.a[4] = hd; op.f[0] = 0.35f;
    qt_op_attn_fwd(&op, &m.ctx);
    vf o_ref(T * Hq * hd), l_ref(b * Hq * S), s_ref(2 * S);
    qt_attn_fwd(o_ref.data(), l_ref.data(), m.f(qr), m.f(k), m.f(v), NULL, b, S, Hq, Hkv, hd,
                0.35f);
    CHECK(memcmp(o_ref.data(), m.f(o), o_ref.size() * 4) == 0);
    CHECK(memcmp(l_ref.data(), m.f(lse), l_ref.size() * 4) == 0);

    op = make_op(QT_OP_ATTN_BWD);
    op.t[0] = dq; op.t[1] = dk; op.t[2] = dv; op.t[3] = o; op.t[4] = qr; op.t[5] = k;
    op.t[6] = v; op.t[7] = o; op.t[8] = lse; op.t[9] = sc;   // do = o: any upstream works
    op.a[0] = b; op.a[1] = S; op.a[2] = Hq; op.a[3] = Hkv; op.a[4] = hd; op.f[0] = 0.35f;
    qt_op_attn_bwd(&op, &m.ctx);
    vf dq_ref(T * Hq * hd, 0.f), dk_ref(T * Hkv * hd, 0.f), dv_ref(T * Hkv * hd, 0.f);
    qt_attn_bwd(dq_ref.data(), dk_ref.data(), dv_ref.data(), o_ref.data(), m.f(qr), m.f(k),
                m.f(v), o_ref.data(), l_ref.data(), s_ref.data(), b, S, Hq, Hkv, hd, 0.35f);
    CHECK(memcmp(dq_ref.data(), m.f(dq), dq_ref.size() * 4) == 0);
    CHECK(memcmp(dk_ref.data(), m.f(dk), dk_ref.size() * 4) == 0);
    CHECK(memcmp(dv_ref.data(), m.f(dv), dv_ref.size() * 4) == 0);

    op = make_op(QT_OP_ROPE_BWD);
    op.t[0] = dqr; op.t[1] = dq; op.t[2] = tab;
    op.a[0] = b; op.a[1] = S; op.a[2] = Hq; op.a[3] = hd; op.a[4] = R;
    qt_op_rope_bwd(&op, &m.ctx);
    vf dqr_ref(T * Hq * hd, 0.f);
    qt_rope_bwd(dqr_ref.data(), dq_ref.data(), tab_ref.data(), b, S, Hq, hd, R);
    CHECK(memcmp(dqr_ref.data(), m.f(dqr), dqr_ref.size() * 4) == 0);
}

TEST(AttnMoeWrappers, MoeSlots)
{
    MiniPlan &m = g_mini;
    m.reset();
    const int64_t b = 2, S = 4, T = b * S, E = 4, k = 2, d = 6, f = 3;
    const int32_t logits = m.add(T * E), idx = m.add(T * k, QT_ROLE_SAVED, QT_I32),
                  p = m.add(T * k), lb = m.add(b, QT_ROLE_LOSS), x = m.add(T * d),
                  wgu = m.add(E * 2 * f * d, QT_ROLE_PARAM), wd = m.add(E * d * f, QT_ROLE_PARAM),
                  y = m.add(T * k * d), gu = m.add(T * k * 2 * f, QT_ROLE_SAVED),
                  sc = m.add(T * k * (d + f), QT_ROLE_SCRATCH), out = m.add(T * d),
                  dp = m.add(T * k), dy = m.add(T * k * d), dx = m.add(T * d),
                  dl = m.add(T * E);
    m.fill(logits, 5); m.fill(x, 6); m.fill(wgu, 7); m.fill(wd, 8); m.fill(out, 9);
    const float c = 0.37f;
    qt_op op = make_op(QT_OP_MOE_ROUTE_FWD);
    op.t[0] = idx; op.t[1] = p; op.t[2] = lb; op.t[3] = logits;
    op.a[0] = T; op.a[1] = E; op.a[2] = k; op.a[3] = S; op.f[0] = c;
    qt_op_moe_route_fwd(&op, &m.ctx);
    std::vector<int32_t> idx_r(T * k);
    vf p_r(T * k), lb_r(b, 0.f);
    qt_moe_route_fwd(idx_r.data(), p_r.data(), lb_r.data(), m.f(logits), T, E, k, S, c);
    CHECK(memcmp(idx_r.data(), m.i(idx), idx_r.size() * 4) == 0);
    CHECK(memcmp(p_r.data(), m.f(p), p_r.size() * 4) == 0);
    CHECK(memcmp(lb_r.data(), m.f(lb), lb_r.size() * 4) == 0);

    op = make_op(QT_OP_EXPERT_FFN_FWD);
    op.t[0] = y; op.t[1] = gu; op.t[2] = x; op.t[3] = idx; op.t[4] = wgu; op.t[5] = wd;
    op.t[6] = sc; op.a[0] = T; op.a[1] = k; op.a[2] = E; op.a[3] = d; op.a[4] = f;
    qt_op_expert_ffn_fwd(&op, &m.ctx);
    vf y_r(T * k * d), gu_r(T * k * 2 * f), sc_r(T * k * (d + f));
    qt_expert_ffn_fwd(y_r.data(), gu_r.data(), m.f(x), idx_r.data(), m.f(wgu), m.f(wd),
                      sc_r.data(), T, k, E, d, f, sc_r.size());
    CHECK(memcmp(y_r.data(), m.f(y), y_r.size() * 4) == 0);
    CHECK(memcmp(gu_r.data(), m.f(gu), gu_r.size() * 4) == 0);

    // Combine backward with upstream `out` (random) into dp and dy.
    op = make_op(QT_OP_MOE_COMBINE_BWD);
    op.t[0] = dp; op.t[1] = dy; op.t[2] = out; op.t[3] = p; op.t[4] = y;
    op.a[0] = T; op.a[1] = k; op.a[2] = d;
    qt_op_moe_combine_bwd(&op, &m.ctx);
    vf dp_r(T * k, 0.f), dy_r(T * k * d, 0.f);
    qt_moe_combine_bwd(dp_r.data(), dy_r.data(), m.f(out), p_r.data(), y_r.data(), T, k, d);
    CHECK(memcmp(dp_r.data(), m.f(dp), dp_r.size() * 4) == 0);
    CHECK(memcmp(dy_r.data(), m.f(dy), dy_r.size() * 4) == 0);

    op = make_op(QT_OP_MOE_COMBINE_FWD);
    op.t[0] = out; op.t[1] = p; op.t[2] = y; op.a[0] = T; op.a[1] = k; op.a[2] = d;
    qt_op_moe_combine_fwd(&op, &m.ctx);
    vf out_r(T * d);
    qt_moe_combine_fwd(out_r.data(), p_r.data(), y_r.data(), T, k, d);
    CHECK(memcmp(out_r.data(), m.f(out), out_r.size() * 4) == 0);

    op = make_op(QT_OP_EXPERT_FFN_BWD);
    op.t[0] = dx; op.t[1] = dy; op.t[2] = x; op.t[3] = idx; op.t[4] = gu; op.t[5] = wgu;
    op.t[6] = wd; op.t[7] = sc; op.a[0] = T; op.a[1] = k; op.a[2] = E; op.a[3] = d; op.a[4] = f;
    qt_op_expert_ffn_bwd(&op, &m.ctx);
    vf dx_r(T * d, 0.f);
    qt_expert_ffn_bwd(dx_r.data(), dy_r.data(), idx_r.data(), gu_r.data(), m.f(wgu), m.f(wd),
                      sc_r.data(), T, k, E, d, f, sc_r.size());
    CHECK(memcmp(dx_r.data(), m.f(dx), dx_r.size() * 4) == 0);

    op = make_op(QT_OP_EXPERT_FFN_WGRAD);
    op.flags = QT_OPF_WGRAD;
    op.t[0] = dy; op.t[1] = x; op.t[2] = idx; op.t[3] = gu; op.t[4] = wgu; op.t[5] = wd;
    op.t[6] = sc; op.a[0] = T; op.a[1] = k; op.a[2] = E; op.a[3] = d; op.a[4] = f; op.a[5] = S;
    op.a[8] = 0; op.a[9] = 1;
    for (int64_t s = 0; s < b; s++) {
        // the wrapper writes its leaves (QT_OPP_WGRAD_WRITES): they arrive unzeroed (NaN here)
        vf g0(E * 2 * f * d, NAN), g1(E * d * f, NAN), r0(g0.size(), 0.f), r1(g1.size(), 0.f);
        float *const dw[2] = {g0.data(), g1.data()};
        qt_op_expert_ffn_wgrad(&op, &m.ctx, s, dw);
        qt_expert_ffn_wgrad(r0.data(), r1.data(), dy_r.data() + s * S * k * d,
                            m.f(x) + s * S * d, idx_r.data() + s * S * k,
                            gu_r.data() + s * S * k * 2 * f, m.f(wd), sc_r.data(), S, k, E, d,
                            f, sc_r.size());
        CHECK(bits_equal(r0, g0));
        CHECK(bits_equal(r1, g1));
        double mx = 0;
        for (float g : g0) mx = fmax(mx, fabs(g));
        CHECK(mx > 0);   // the sequence really produced a gradient
    }

    // With the optional dgu slots (BWD t8 writes, WGRAD t7 reads): same dx, same dw bits.
    const int32_t dg = m.add(T * k * 2 * f, QT_ROLE_SAVED), dx2 = m.add(T * d);
    op = make_op(QT_OP_EXPERT_FFN_BWD);
    op.t[0] = dx2; op.t[1] = dy; op.t[2] = x; op.t[3] = idx; op.t[4] = gu; op.t[5] = wgu;
    op.t[6] = wd; op.t[7] = sc; op.t[8] = dg;
    op.a[0] = T; op.a[1] = k; op.a[2] = E; op.a[3] = d; op.a[4] = f;
    qt_op_expert_ffn_bwd(&op, &m.ctx);
    CHECK(memcmp(dx_r.data(), m.f(dx2), dx_r.size() * 4) == 0);
    op = make_op(QT_OP_EXPERT_FFN_WGRAD);
    op.flags = QT_OPF_WGRAD;
    op.t[0] = dy; op.t[1] = x; op.t[2] = idx; op.t[3] = gu; op.t[4] = wgu; op.t[5] = wd;
    op.t[6] = sc; op.t[7] = dg;
    op.a[0] = T; op.a[1] = k; op.a[2] = E; op.a[3] = d; op.a[4] = f; op.a[5] = S;
    op.a[8] = 0; op.a[9] = 1;
    for (int64_t s = 0; s < b; s++) {
        // the wrapper writes its leaves (QT_OPP_WGRAD_WRITES): they arrive unzeroed (NaN here)
        vf g0(E * 2 * f * d, NAN), g1(E * d * f, NAN), r0(g0.size(), 0.f), r1(g1.size(), 0.f);
        float *const dw[2] = {g0.data(), g1.data()};
        qt_op_expert_ffn_wgrad(&op, &m.ctx, s, dw);
        qt_expert_ffn_wgrad(r0.data(), r1.data(), dy_r.data() + s * S * k * d,
                            m.f(x) + s * S * d, idx_r.data() + s * S * k,
                            gu_r.data() + s * S * k * 2 * f, m.f(wd), sc_r.data(), S, k, E, d,
                            f, sc_r.size());
        CHECK(bits_equal(r0, g0));
        CHECK(bits_equal(r1, g1));
    }

    op = make_op(QT_OP_MOE_ROUTE_BWD);
    op.t[0] = dl; op.t[1] = dp; op.t[2] = logits; op.t[3] = idx; op.t[4] = p;
    op.a[0] = T; op.a[1] = E; op.a[2] = k; op.a[3] = S; op.f[0] = c;
    qt_op_moe_route_bwd(&op, &m.ctx);
    vf dl_r(T * E, 0.f);
    qt_moe_route_bwd(dl_r.data(), dp_r.data(), m.f(logits), idx_r.data(), p_r.data(), T, E, k,
                     S, c);
    CHECK(memcmp(dl_r.data(), m.f(dl), dl_r.size() * 4) == 0);
}
