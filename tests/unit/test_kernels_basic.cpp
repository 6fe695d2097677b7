// test_kernels_basic.cpp - the basic kernels (matmul, rmsnorm, embed, xent, elementwise,
// the MTP head's stack / split):
//  (a) double build vs central finite differences in double,
//  (b) float build vs double build on the same float-representable inputs,
//  (c) optimised vs scalar matmul bit identity on awkward sizes and on the shapes of every
//      optimised path (skinny, packed A, half strips), plus a GFLOP/s print.
// Every backward is checked through the scalar L = sum(out * R) with random R, so dL/din is
// what the backward kernel must produce when fed dout = R.
// Tolerances:
//  - FD: 1e-6 relative to the gradient's max |value|. Central differences with h = 1e-6 have
//    truncation error ~h^2 |f'''| ~ 1e-12 and cancellation error ~1e-16 |L| / h ~ 1e-9.
//  - float vs double: 1e-5 relative to the max |value| (a few float ulps through short
//    reductions of <= 64 terms, each ~6e-8 relative).
#include <cmath>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <vector>
#include "qt_test_fd.h"
#include "CppUTest/TestHarness.h"
#include "qt_test_util.h"

extern "C" {
#include "qt_ops.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/matmul.h"
#include "kernels/matmul_canon.h"
#include "kernels/rmsnorm.h"
#include "kernels/stack.h"
#include "kernels/xent.h"
#include "runtime/qt_tree.h"
}

namespace {

typedef std::vector<double> vd;
typedef std::vector<float> vf;

const double FD_TOL = 1e-6;
const double F32_TOL = 1e-5;

// Random values rounded to float so the float kernel sees exactly the double inputs.
vd rnd(size_t n, uint64_t *s, double scale = 1.0)
{
    vd v(n);
    for (size_t i = 0; i < n; i++) v[i] = (double)(float)(scale * qt_test_rand(s));
    return v;
}

vf to_f(const vd &v)
{
    vf f(v.size());
    for (size_t i = 0; i < v.size(); i++) f[i] = (float)v[i];
    return f;
}

double dot(const vd &a, const vd &b)
{
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

// Central differences of loss() w.r.t. every element of x, compared with grad.
template <class F>
double fd_check(const char *what, F loss, vd &x, const vd &grad)
{
    vd num = qt_test_numgrad(x, 1e-6, loss);
    double e = qt_test_rel_err_f64(what, grad.data(), num.data(), num.size(), FD_TOL);
    printf("\n  %-28s FD rel err %.2e", what, e);
    return e;
}

double f32_check(const char *what, const vf &got, const vd &want)
{
    double e = qt_test_rel_err_f32(what, got.data(), want.data(), want.size(), F32_TOL);
    printf("\n  %-28s f32 vs f64 rel err %.2e", what, e);
    return e;
}

double now_s()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

} // namespace

TEST_GROUP(KernelsBasic) {};

TEST(KernelsBasic, MatmulFdAndF32)
{
    uint64_t s = 11;
    const int64_t M = 5, N = 4, K = 7;
    vd x = rnd(M * K, &s), w = rnd(N * K, &s), R = rnd(M * N, &s);
    vd y(M * N);
    auto loss = [&]() { qt_matmul_fwd_f64(y.data(), x.data(), w.data(), M, N, K); return dot(y, R); };
    // Accumulation: start from a non-zero base and subtract it afterwards.
    vd base = rnd(M * K, &s), dx = base, dw0 = rnd(N * K, &s), dw = dw0;
    qt_matmul_bwd_data_f64(dx.data(), R.data(), w.data(), M, N, K);
    qt_matmul_wgrad_f64(dw.data(), R.data(), x.data(), M, N, K);
    for (size_t i = 0; i < dx.size(); i++) dx[i] -= base[i];
    for (size_t i = 0; i < dw.size(); i++) dw[i] -= dw0[i];
    CHECK(fd_check("matmul dx", loss, x, dx) <= FD_TOL);
    CHECK(fd_check("matmul dw", loss, w, dw) <= FD_TOL);

    // float vs double, on a size that uses the vector edge paths (contraction 70)
    const int64_t M2 = 13, N2 = 37, K2 = 70;
    vd x2 = rnd(M2 * K2, &s), w2 = rnd(N2 * K2, &s), dy2 = rnd(M2 * N2, &s);
    vd y2(M2 * N2), dx2(M2 * K2, 0.0), dw2(N2 * K2, 0.0);
    qt_matmul_fwd_f64(y2.data(), x2.data(), w2.data(), M2, N2, K2);
    qt_matmul_bwd_data_f64(dx2.data(), dy2.data(), w2.data(), M2, N2, K2);
    qt_matmul_wgrad_f64(dw2.data(), dy2.data(), x2.data(), M2, N2, K2);
    vf fx = to_f(x2), fw = to_f(w2), fdy = to_f(dy2), fy(M2 * N2), fdx(M2 * K2, 0.f), fdw(N2 * K2, 0.f);
    qt_matmul_fwd(fy.data(), fx.data(), fw.data(), M2, N2, K2);
    qt_matmul_bwd_data(fdx.data(), fdy.data(), fw.data(), M2, N2, K2);
    qt_matmul_wgrad(fdw.data(), fdy.data(), fx.data(), M2, N2, K2);
    CHECK(f32_check("matmul y", fy, y2) <= F32_TOL);
    CHECK(f32_check("matmul dx", fdx, dx2) <= F32_TOL);
    CHECK(f32_check("matmul dw", fdw, dw2) <= F32_TOL);
}

// Optimised vs scalar reference: must be bit-identical (same FMA chain per element).
// Sizes straddle the vector width (16), strip (32), row tile (12) and block (256) edges.
TEST(KernelsBasic, MatmulOptimisedBitIdentical)
{
    const int64_t sz[] = {1, 3, 17, 33, 65, 100, 257, 300};
    const int ns = (int)(sizeof sz / sizeof sz[0]);
    uint64_t s = 5;
    vf A(300 * 300), B(300 * 300), C1(300 * 300), C2(300 * 300);
    for (auto &v : A) v = (float)qt_test_rand(&s);
    for (auto &v : B) v = (float)qt_test_rand(&s);
    long bad = 0, cases = 0;
    for (int a = 0; a < ns; a++)
        for (int b = 0; b < ns; b++)
            for (int c = 0; c < ns; c++) {
                int64_t M = sz[a], N = sz[b], K = sz[c];
                if (M * N * K > 4000000) continue; // keep the scalar reference quick
                qt_matmul_fwd(C1.data(), A.data(), B.data(), M, N, K);
                qt_matmul_fwd_ref(C2.data(), A.data(), B.data(), M, N, K);
                bad += memcmp(C1.data(), C2.data(), 4 * (size_t)(M * N)) != 0;
                for (int64_t i = 0; i < M * K; i++) C1[i] = C2[i] = B[i + 1];
                qt_matmul_bwd_data(C1.data(), A.data(), B.data(), M, N, K);
                qt_matmul_bwd_data_ref(C2.data(), A.data(), B.data(), M, N, K);
                bad += memcmp(C1.data(), C2.data(), 4 * (size_t)(M * K)) != 0;
                for (int64_t i = 0; i < N * K; i++) C1[i] = C2[i] = B[i + 2];
                qt_matmul_wgrad(C1.data(), A.data(), B.data(), M, N, K);
                qt_matmul_wgrad_ref(C2.data(), A.data(), B.data(), M, N, K);
                bad += memcmp(C1.data(), C2.data(), 4 * (size_t)(N * K)) != 0;
                cases += 3;
            }
    printf("\n  matmul opt vs ref: %ld cases, %ld differ", cases, bad);
    LONGS_EQUAL(0, bad);
}

// Shapes that reach the other optimised paths: skinny outputs (N or K of 1 and 16, the
// router / shared-gate / in_proj_ba widths, half-strip tiles), 4 KiB-multiple row strides
// (bwd_data packs A when N is one; bwd_data and wgrad pack the B block when K is one,
// narrow last strips included), every tile height 1..12 and several contraction blocks.

// The four fp32 matmul passes (fwd; bwd_data and wgrad accumulating into B's values at
// offsets o1 / o2; the writing wgrad on a NaN-filled destination against accumulating into
// zeros) against the scalar references: how many differ in any bit (0..4).
static long matmul_paths_differ(const std::vector<float> &A, const std::vector<float> &B,
                                std::vector<float> &C1, std::vector<float> &C2, int64_t M,
                                int64_t N, int64_t K, int64_t o1, int64_t o2)
{
    long bad = 0;
    qt_matmul_fwd(C1.data(), A.data(), B.data(), M, N, K);
    qt_matmul_fwd_ref(C2.data(), A.data(), B.data(), M, N, K);
    bad += memcmp(C1.data(), C2.data(), 4 * (size_t)(M * N)) != 0;
    for (int64_t i = 0; i < M * K; i++) C1[i] = C2[i] = B[i + o1];
    qt_matmul_bwd_data(C1.data(), A.data(), B.data(), M, N, K);
    qt_matmul_bwd_data_ref(C2.data(), A.data(), B.data(), M, N, K);
    bad += memcmp(C1.data(), C2.data(), 4 * (size_t)(M * K)) != 0;
    for (int64_t i = 0; i < N * K; i++) C1[i] = C2[i] = B[i + o2];
    qt_matmul_wgrad(C1.data(), A.data(), B.data(), M, N, K);
    qt_matmul_wgrad_ref(C2.data(), A.data(), B.data(), M, N, K);
    bad += memcmp(C1.data(), C2.data(), 4 * (size_t)(N * K)) != 0;
    for (int64_t i = 0; i < N * K; i++) C1[i] = NAN, C2[i] = 0.0f;
    qt_matmul_wgrad_write(C1.data(), A.data(), B.data(), M, N, K);
    qt_matmul_wgrad_ref(C2.data(), A.data(), B.data(), M, N, K);
    bad += memcmp(C1.data(), C2.data(), 4 * (size_t)(N * K)) != 0;
    return bad;
}

TEST(KernelsBasic, MatmulOptimisedPathsBitIdentical)
{
    const int64_t sh[][3] = {{13, 1024, 40}, {25, 2048, 70}, {7, 1024, 200}, {100, 16, 300},
                             {300, 1, 257}, {5, 4096, 48}, {47, 16, 513}, {64, 512, 16},
                             {11, 33, 1}, {512, 1, 512}, {1, 1, 600}, {29, 1024, 16},
                             {13, 40, 1024}, {25, 70, 2048}, {20, 100, 1024}, {7, 33, 2048},
                             {3, 257, 1024}, {2100, 40, 260}, {2048, 1100, 24}, {30, 2100, 300}};
    const size_t cap = 3000000;
    std::vector<float> A(cap), B(cap), C1(cap), C2(cap);
    uint64_t s = 6;
    for (auto &v : A) v = (float)qt_test_rand(&s);
    for (auto &v : B) v = (float)qt_test_rand(&s);
    long bad = 0;
    for (auto &d : sh) {
        CHECK((size_t)(d[0] * d[1] + d[0] * d[2] + d[1] * d[2]) < cap);
        bad += matmul_paths_differ(A, B, C1, C2, d[0], d[1], d[2], 1, 2);
    }
    // M = 0 (no rows): the writing form gives +0 everywhere
    for (int64_t i = 0; i < 64; i++) C1[i] = NAN;
    qt_matmul_wgrad_write(C1.data(), A.data(), B.data(), 0, 8, 8);
    for (int64_t i = 0; i < 64; i++) bad += !(C1[i] == 0.0f && !std::signbit(C1[i]));
    // underflowing products: chains ending at -0 must come out as (+0) + (-0) = +0
    std::vector<float> Ta(4096), Tb(4096);
    for (size_t i = 0; i < Ta.size(); i++) Ta[i] = A[i] * 1e-25f, Tb[i] = B[i] * 1e-25f;
    for (int64_t i = 0; i < 40 * 50; i++) C1[i] = NAN, C2[i] = 0.0f;
    qt_matmul_wgrad_write(C1.data(), Ta.data(), Tb.data(), 30, 40, 50);
    qt_matmul_wgrad_ref(C2.data(), Ta.data(), Tb.data(), 30, 40, 50);
    bad += memcmp(C1.data(), C2.data(), 4 * 40 * 50) != 0;
    LONGS_EQUAL(0, bad);
}

// The bench model's matmul shapes (configgen/configs/runs/bench.yml; generated/bench/plan.txt:
// rows of 1024 tokens, hidden 512; in_proj_qkvz 1536 wide, q_proj 1024, the shared expert and
// out_proj 512, in_proj_ba / router 16, the shared gate 1) on 100 rows (seven 12-row tiles and
// a remainder of 16 split 8 + 8, as the step's 1024 rows end): the four plain passes and the
// plan's canonical forms (nb 8, one segment; the expert FFN's data gradient: two segments of
// 256), against the scalar references at 0 ulp. These are the row-pointer chains of matmul.c
// (A rows read in place: the forward, the data gradient, the canonical panels) at the
// contraction the step runs.
TEST(KernelsBasic, MatmulBenchShapesBitIdentical)
{
    const int64_t M = 100, K = 512, Ns[] = {1536, 1024, 512, 16, 1};
    const size_t cap = 1 << 21;
    std::vector<float> A(cap), B(cap), C1(cap), C2(cap), S(cap);
    uint64_t s = 71;
    for (auto &v : A) v = (float)qt_test_rand(&s);
    for (auto &v : B) v = (float)qt_test_rand(&s);
    long bad = 0;
    for (int64_t N : Ns) {
        CHECK((size_t)(M * N + M * K + N * K + 8) < cap);
        bad += matmul_paths_differ(A, B, C1, C2, M, N, K, 1, 2);
    }
    for (int64_t nseg = 1; nseg <= 2; nseg++) {
        CHECK((size_t)QT_CANON_FWD_SCRATCH(M, 512, K, 8) < cap);
        CHECK((size_t)QT_CANON_BWD_SCRATCH(M, K, 512, 8) < cap);
        qt_matmul_canon_fwd(C1.data(), A.data(), B.data(), M, 512, K, nseg, 8, S.data());
        qt_matmul_canon_fwd_ref(C2.data(), A.data(), B.data(), M, 512, K, nseg, 8, S.data());
        bad += memcmp(C1.data(), C2.data(), 4 * (size_t)(M * 512)) != 0;
        qt_matmul_canon_bwd_data(C1.data(), A.data(), B.data(), M, K, 512, nseg, 8, S.data());
        qt_matmul_canon_bwd_data_ref(C2.data(), A.data(), B.data(), M, K, 512, nseg, 8, S.data());
        bad += memcmp(C1.data(), C2.data(), 4 * (size_t)(M * 512)) != 0;
    }
    printf("\n  matmul bench shapes: %ld of 24 differ", bad);
    LONGS_EQUAL(0, bad);
}

// The bench model's expert FFN contractions through the canonical tile (every block of a
// tile in one call, segments continued in registers: qt_mm_canon_k): the down projection
// (an expert's rows x d 512 over f 256, one segment) and the data gradient of [gate | up]
// (rows x d 512 over 2f 512, two segments), nb 1, 2, 4 and 8, at an expert's row counts
// (256 = 21 x 12 + 2 x 2, 269, 64 = 4 x 12 + 2 x 8, 1), operands of unit scale and tiny ones
// whose block partials underflow to -0, against the copying references at 0 ulp.
TEST(KernelsBasic, MatmulCanonicalExpertShapesBitIdentical)
{
    const int64_t Ms[] = {256, 269, 64, 1};
    const size_t cap = 1 << 21;
    std::vector<float> X(cap), W(cap), O1(cap), O2(cap), S(cap);
    uint64_t s = 53;
    long bad = 0, cases = 0;
    for (int tiny = 0; tiny < 2; tiny++) {
        for (auto &v : X) v = (float)qt_test_rand(&s) * (tiny ? 1e-25f : 1.0f);
        for (auto &v : W) v = (float)qt_test_rand(&s) * (tiny ? 1e-25f : 1.0f);
        for (int64_t M : Ms)
            for (int64_t nb = 1; nb <= 8; nb *= 2) {
                CHECK((size_t)QT_CANON_FWD_SCRATCH(M, 512, 256, nb) < cap);
                CHECK((size_t)QT_CANON_BWD_SCRATCH(M, 512, 512, nb) < cap);
                qt_matmul_canon_fwd(O1.data(), X.data(), W.data(), M, 512, 256, 1, nb, S.data());
                qt_matmul_canon_fwd_ref(O2.data(), X.data(), W.data(), M, 512, 256, 1, nb, S.data());
                bad += memcmp(O1.data(), O2.data(), 4 * (size_t)(M * 512)) != 0;
                qt_matmul_canon_bwd_data(O1.data(), X.data(), W.data(), M, 512, 512, 2, nb, S.data());
                qt_matmul_canon_bwd_data_ref(O2.data(), X.data(), W.data(), M, 512, 512, 2, nb, S.data());
                bad += memcmp(O1.data(), O2.data(), 4 * (size_t)(M * 512)) != 0;
                cases += 2;
            }
    }
    printf("\n  canonical expert shapes: %ld cases, %ld differ", cases, bad);
    LONGS_EQUAL(64, cases);
    LONGS_EQUAL(0, bad);
}

// Odd shapes against the scalar references, 0 ulp: M, N, K off every tile (12 rows, 16 and 32
// columns, 256-step blocks), N of 1, 63, 64, 65 (in_proj_ba's width and its neighbours), K of 1
// and 2048 + 7, and data-gradient contractions past 2048 (chunked whole-register chains:
// 2055 in two chunks, 4101 in three), row counts whose last tiles are split (64, 100).
TEST(KernelsBasic, MatmulOddShapesBitIdentical)
{
    const int64_t Ms[] = {1, 13, 64, 100}, Ns[] = {1, 63, 64, 65}, Ks[] = {1, 2055};
    const int64_t big[][3] = {{13, 2055, 65}, {64, 2055, 33}, {7, 4101, 40}, {25, 2048, 7},
                              {100, 64, 2055}, {1, 4101, 1}};
    const size_t cap = 1 << 20;
    std::vector<float> A(cap), B(cap), C1(cap), C2(cap);
    uint64_t s = 29;
    for (auto &v : A) v = (float)qt_test_rand(&s);
    for (auto &v : B) v = (float)qt_test_rand(&s);
    long bad = 0, cases = 0;
    auto run = [&](int64_t M, int64_t N, int64_t K) {
        CHECK((size_t)(M * N + M * K + N * K + 8) < cap);
        bad += matmul_paths_differ(A, B, C1, C2, M, N, K, 3, 5);
        cases += 4;
    };
    for (int64_t M : Ms)
        for (int64_t N : Ns)
            for (int64_t K : Ks) run(M, N, K);
    for (auto &d : big) run(d[0], d[1], d[2]);
    printf("\n  matmul odd shapes: %ld cases, %ld differ", cases, bad);
    LONGS_EQUAL(0, bad);
}

// The writing weight gradient with the leaf-tree carry in its epilogue
// (qt_matmul_wgrad_write_carry, qt_leaf_carry.h) against writing the leaf into the scratch
// and pushing it (qt_tree_push), 0 ulp: for 1..9 leaves every level region is compared after
// every leaf (even leaves are written into level 0 by both; the fused path has no scratch),
// and the totals must agree. Shapes off every tile (12 rows, 16 and 32 columns),
// contractions of one block, of several (partial sums held in the destination level: 257,
// 300, 513) and of none (M = 0), a panel boundary (K past 1024), a parameter at an odd
// offset, weights large enough for streamed carries, and tiny operands whose products underflow, so that chains end at -0 (the leaf
// is (+0) + sum, and the carry adds the levels to that value).
TEST(KernelsBasic, MatmulWgradCarryEqualsWriteThenPush)
{
    struct { int64_t M, N, K, off; } sh[] = {
        {13, 33, 65, 0}, {256, 100, 47, 3}, {300, 25, 70, 0}, {1, 1, 1, 1}, {0, 8, 8, 0},
        {257, 13, 1100, 16}, {64, 64, 64, 5}, {513, 12, 33, 0}, {7, 1, 300, 2},
        // weights of 2^19 floats or more: streamed carries (rows 64-byte aligned, rows of
        // 520 floats aligned or not in turn, a parameter at an odd offset: none aligned)
        {256, 512, 1024, 0}, {256, 1031, 520, 0}, {200, 520, 1024, 3}};
    const int NL = 4; // 9 leaves: levels 0..3
    const size_t cap = 1 << 19;
    std::vector<float> A(cap), B(cap);
    uint64_t s = 41;
    long bad = 0, negzero = 0;
    for (int tiny = 0; tiny < 2; tiny++) {
        for (auto &v : A) v = (float)qt_test_rand(&s) * (tiny ? 1e-25f : 1.0f);
        for (auto &v : B) v = (float)qt_test_rand(&s) * (tiny ? 1e-25f : 1.0f);
        for (auto &d : sh) {
            // levels 64-byte aligned, as the arena's (the streamed stores need it)
            const int64_t n = d.N * d.K, len = (n + d.off + 15) / 16 * 16;
            CHECK((size_t)(d.M * (d.N + d.K) + 9 * 64) < cap);
            std::vector<float> rbuf((size_t)(NL * len + 16)), fbuf((size_t)(NL * len + 16));
            std::vector<float> sref((size_t)n);
            float *ref = rbuf.data() + (16 - ((uintptr_t)rbuf.data() / 4) % 16) % 16;
            float *fus = fbuf.data() + (16 - ((uintptr_t)fbuf.data() / 4) % 16) % 16;
            for (int64_t nl = 1; nl <= 9; nl++) {
                for (int64_t i = 0; i < NL * len; i++) ref[i] = fus[i] = NAN; // stale
                float *lr[NL], *lf[NL];
                for (int l = 0; l < NL; l++) lr[l] = ref + l * len, lf[l] = fus + l * len;
                for (int64_t i = 0; i < nl; i++) {
                    const float *dy = A.data() + i * 64, *x = A.data() + i * 64 + d.M * d.N;
                    if (i & 1) x = B.data() + i * 32; // leaves differ in both operands
                    qt_matmul_wgrad_write(qt_tree_leaf_dest(lr, d.off, sref.data(), i), dy, x,
                                          d.M, d.N, d.K);
                    qt_tree_push(lr, d.off, n, sref.data(), i);
                    qt_leaf_carry cy;
                    if (qt_tree_carry(lf, d.off, i, &cy)) {
                        LONGS_EQUAL((int)(1 + (i == 3 || i == 7) + (i == 7)), cy.n);
                        bad += !qt_matmul_wgrad_write_carry(&cy, dy, x, d.M, d.N, d.K);
                    } else {
                        qt_matmul_wgrad_write(lf[0] + d.off, dy, x, d.M, d.N, d.K);
                    }
                    bad += memcmp(ref, fus, 4 * (size_t)(NL * len)) != 0;
                }
                const int top = qt_tree_levels_needed(nl) - 1;
                qt_tree_finalize_range(lr, d.off, n, nl);
                qt_tree_finalize_range(lf, d.off, n, nl);
                bad += memcmp(lr[top] + d.off, lf[top] + d.off, 4 * (size_t)n) != 0;
            }
            if (tiny) { // chains of leaf 1 that end at -0: -0 + chain keeps the sign then
                std::vector<float> t((size_t)n, -0.0f);
                qt_matmul_wgrad_ref(t.data(), A.data() + 64, B.data() + 32, d.M, d.N, d.K);
                for (auto v : t) negzero += v == 0.0f && std::signbit(v);
            }
        }
    }
    LONGS_EQUAL(0, bad);
    CHECK(negzero > 0); // the tiny case had leaf chains ending at -0
    qt_leaf_carry none;
    CHECK(!qt_tree_carry(nullptr, 0, 4, &none)); // even leaf: nothing to carry
    LONGS_EQUAL(0, none.n);
    none.n = 0; // and a carry without addends is refused, not applied
    CHECK(!qt_matmul_wgrad_write_carry(&none, A.data(), B.data(), 1, 1, 1));
}

// The canonical-block contractions (matmul_canon.h) against their reference (block partials
// from the scalar kernels on packed copies, then the tree), 0 ulp: the copy-free tile path for
// contractions up to 2048 (checked to have run), the copying path beyond. Shapes cover edge
// tiles (M 1..25 rows, N not a multiple of 32), blocks of 1 to 256 indices, 1 and 2
// segments, nb 1..8, and tiny operands whose products underflow, so block chains end at -0
// (the data gradient's partial is (+0) + acc there: a missing normalisation fails this).
TEST(KernelsBasic, MatmulCanonicalFusedBitIdentical)
{
    struct { int64_t M, N, K, nseg, nb; } sh[] = {
        {13, 100, 512, 1, 8}, {25, 512, 64, 1, 8}, {1, 33, 256, 2, 8}, {12, 257, 1024, 2, 4},
        {7, 64, 16, 2, 8}, {30, 96, 2048, 1, 8}, {5, 40, 4096, 1, 8}, {11, 512, 24, 1, 2},
        {24, 32, 8, 1, 1}, {3, 300, 1536, 2, 8},
        // narrow contractions (in_proj_ba's 64 in 8 blocks of 8, and 7, 1 and 16 per block),
        // odd widths and the balanced row tiles (64 = 4 x 12 + 2 x 8, 100, 13)
        {100, 2055, 64, 1, 8}, {64, 63, 64, 1, 8}, {13, 65, 56, 1, 8}, {1, 1, 8, 1, 8},
        {64, 64, 64, 2, 4}, {25, 33, 64, 2, 2}};
    const size_t cap = 1 << 21;
    std::vector<float> X(cap), W(cap), O1(cap), O2(cap), S(cap);
    uint64_t s = 17;
    long bad = 0, fused = 0, expect_fused = 0;
    for (auto &d : sh) expect_fused += 2 * (d.K <= qt_matmul_canon_fused_max()); // 2 scales
    for (int tiny = 0; tiny < 2; tiny++) {
        for (auto &v : X) v = (float)qt_test_rand(&s) * (tiny ? 1e-25f : 1.0f);
        for (auto &v : W) v = (float)qt_test_rand(&s) * (tiny ? 1e-25f : 1.0f);
        for (auto &d : sh) {
            CHECK((size_t)(d.M * d.N + d.M * d.K + d.N * d.K) < cap);
            CHECK((size_t)QT_CANON_FWD_SCRATCH(d.M, d.N, d.K, d.nb) < cap);
            CHECK((size_t)QT_CANON_BWD_SCRATCH(d.M, d.N, d.K, d.nb) < cap);
            // forward: contraction over K
            qt_matmul_canon_fwd(O1.data(), X.data(), W.data(), d.M, d.N, d.K, d.nseg, d.nb, S.data());
            qt_matmul_canon_fwd_ref(O2.data(), X.data(), W.data(), d.M, d.N, d.K, d.nseg, d.nb, S.data());
            bad += memcmp(O1.data(), O2.data(), 4 * (size_t)(d.M * d.N)) != 0;
            // data gradient: out[M,K'] with the contraction over N' (here N' = d.K, K' = d.N)
            qt_matmul_canon_bwd_data(O1.data(), X.data(), W.data(), d.M, d.K, d.N, d.nseg, d.nb, S.data());
            qt_matmul_canon_bwd_data_ref(O2.data(), X.data(), W.data(), d.M, d.K, d.N, d.nseg, d.nb, S.data());
            bad += memcmp(O1.data(), O2.data(), 4 * (size_t)(d.M * d.N)) != 0;
            fused += qt_matmul_canon_fwd_fused(O1.data(), X.data(), W.data(), d.M, d.N, d.K, d.nseg, d.nb);
            if (tiny) { // some partials must have underflowed to -0 for the case to mean anything
                qt_matmul_fwd_ref(O2.data(), X.data(), W.data(), d.M, d.N, d.K / (d.nseg * d.nb));
                for (int64_t i = 0; i < d.M * d.N; i++) fused += 1000 * (O2[i] == 0.0f && std::signbit(O2[i]));
            }
        }
    }
    LONGS_EQUAL(0, bad);
    CHECK(fused >= 1000);           // underflowed -0 partials occurred
    // every shape within the path's range ran copy-free (AVX-512: 9 shapes with P <= 2048;
    // AVX2, whose tiles are half as wide: all 10), at both operand scales
    CHECK(expect_fused >= 18);
    LONGS_EQUAL(expect_fused, fused % 1000);
}

// canonical_factor (issue 35, configgen config/canon.c): block counts 3 x 2^j. The fused tile
// path declines them (its stack completes the tree only for a power of two), the kernels
// equal their references (the counter tree qt_canon_tree, 0 ulp), and P = 3 ranks holding
// nb/3 blocks each, summing their subtrees and then the three subtotals in the counter's
// shape ((r0 + r1) + r2), give the one-rank bits: tensor 3's identity at kernel level.
TEST(KernelsBasic, MatmulCanonicalFactorThreeIsTheCounterTree)
{
    struct { int64_t M, N, K, nb; } sh[] = {{13, 40, 48, 6}, {5, 33, 96, 3}, {24, 48, 36, 6},
                                            {1, 7, 6, 6}};
    uint64_t s = 23;
    long bad = 0, other = 0;
    for (auto &d : sh) {
        std::vector<float> X((size_t)(d.M * d.K)), W((size_t)(d.N * d.K)), O1((size_t)(d.M * d.N)),
            O2((size_t)(d.M * d.N)), S((size_t)QT_CANON_FWD_SCRATCH(d.M, d.N, d.K, d.nb));
        for (auto &v : X) v = (float)qt_test_rand(&s);
        for (auto &v : W) v = (float)qt_test_rand(&s);
        LONGS_EQUAL(0, qt_matmul_canon_fwd_fused(O1.data(), X.data(), W.data(), d.M, d.N, d.K, 1, d.nb));
        qt_matmul_canon_fwd(O1.data(), X.data(), W.data(), d.M, d.N, d.K, 1, d.nb, S.data());
        qt_matmul_canon_fwd_ref(O2.data(), X.data(), W.data(), d.M, d.N, d.K, 1, d.nb, S.data());
        bad += memcmp(O1.data(), O2.data(), 4 * (size_t)(d.M * d.N)) != 0;
        // three ranks, each with K/3 contiguous indices = nb/3 canonical blocks
        const int64_t Kr = d.K / 3;
        std::vector<float> part((size_t)(3 * d.M * d.N)), Xr((size_t)(d.M * Kr)), Wr((size_t)(d.N * Kr));
        for (int64_t t = 0; t < 3; t++) {
            for (int64_t i = 0; i < d.M; i++)
                for (int64_t k = 0; k < Kr; k++) Xr[(size_t)(i * Kr + k)] = X[(size_t)(i * d.K + t * Kr + k)];
            for (int64_t j = 0; j < d.N; j++)
                for (int64_t k = 0; k < Kr; k++) Wr[(size_t)(j * Kr + k)] = W[(size_t)(j * d.K + t * Kr + k)];
            qt_matmul_canon_fwd(part.data() + t * d.M * d.N, Xr.data(), Wr.data(), d.M, d.N, Kr, 1,
                                d.nb / 3, S.data());
        }
        for (int64_t i = 0; i < d.M * d.N; i++) {
            const float r = (part[(size_t)i] + part[(size_t)(d.M * d.N + i)]) + part[(size_t)(2 * d.M * d.N + i)];
            bad += memcmp(&r, &O1[(size_t)i], 4) != 0;
            // another order of the same three subtotals differs somewhere (not vacuous)
            const float o = part[(size_t)i] + (part[(size_t)(d.M * d.N + i)] + part[(size_t)(2 * d.M * d.N + i)]);
            other += memcmp(&o, &O1[(size_t)i], 4) != 0;
        }
    }
    LONGS_EQUAL(0, bad);
    CHECK(other > 0);
}

// Not a timed test: prints GFLOP/s (best of 3) for the shapes named in the brief.
TEST(KernelsBasic, MatmulBenchPrint)
{
    const int64_t sh[][3] = {{256, 512, 512}, {1024, 512, 512}, {1024, 512, 2048}, {1024, 4096, 512},
                             {256, 4096, 512}, {1024, 16, 512}, {1024, 1, 512}};
    static float A[1024 * 4096], B[4096 * 2048], C[1024 * 4096];
    uint64_t s = 9;
    for (auto &v : A) v = (float)qt_test_rand(&s);
    for (auto &v : B) v = (float)qt_test_rand(&s);
    for (auto &d : sh) {
        int64_t M = d[0], N = d[1], K = d[2];
        double fl = 2.0 * (double)(M * N * K), best[3] = {1e9, 1e9, 1e9};
        for (int r = 0; r < 3; r++) {
            double t0 = now_s();
            qt_matmul_fwd(C, A, B, M, N, K);
            double t1 = now_s();
            qt_matmul_bwd_data(A, C, B, M, N, K);
            double t2 = now_s();
            qt_matmul_wgrad(B, C, A, M, N, K);
            double t3 = now_s();
            best[0] = fmin(best[0], t1 - t0);
            best[1] = fmin(best[1], t2 - t1);
            best[2] = fmin(best[2], t3 - t2);
            for (int64_t i = 0; i < M * K; i++) A[i] = (float)qt_test_rand(&s); // keep finite
            for (int64_t i = 0; i < N * K; i++) B[i] = (float)qt_test_rand(&s);
        }
        printf("\n  matmul M=%ld N=%ld K=%ld: fwd %.1f, bwd_data %.1f, wgrad %.1f GFLOP/s",
               (long)M, (long)N, (long)K, fl / best[0] * 1e-9, fl / best[1] * 1e-9,
               fl / best[2] * 1e-9);
        CHECK(best[0] > 0.0);
    }
}

static void rmsnorm_case(int flags)
{
    uint64_t s = 21 + (uint64_t)flags;
    const int64_t R = 4, n = 6, xs = 8, ys = 7; // strided rows, gaps must stay untouched
    const double eps = 1e-6;
    vd x = rnd(R * xs, &s), w = rnd(n, &s), Rw = rnd(R * ys, &s);
    vd y(R * ys, 0.0), rstd(R);
    auto loss = [&]() {
        qt_rmsnorm_fwd_f64(y.data(), rstd.data(), x.data(), w.data(), R, n, xs, ys, flags, eps);
        double L = 0;
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = 0; i < n; i++) L += y[r * ys + i] * Rw[r * ys + i];
        return L;
    };
    loss();
    vd dy(R * ys, 0.0);
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < n; i++) dy[r * ys + i] = Rw[r * ys + i];
    vd base = rnd(R * xs, &s), dx = base, dw(n, 0.0);
    qt_rmsnorm_bwd_f64(dx.data(), dy.data(), x.data(), w.data(), rstd.data(), R, n, xs, ys, flags);
    qt_rmsnorm_wgrad_f64(dw.data(), dy.data(), x.data(), rstd.data(), R, n, xs, ys);
    for (size_t i = 0; i < dx.size(); i++) dx[i] -= base[i];
    // FD over the whole strided buffer: gap elements must have zero gradient on both sides
    CHECK(fd_check(flags ? "rmsnorm(zc) dx" : "rmsnorm dx", loss, x, dx) <= FD_TOL);
    CHECK(fd_check(flags ? "rmsnorm(zc) dw" : "rmsnorm dw", loss, w, dw) <= FD_TOL);

    vf fx = to_f(x), fw = to_f(w), fdy = to_f(dy), fy(R * ys, 0.f), frstd(R), fdx(R * xs, 0.f), fdw(n, 0.f);
    vd y2(R * ys, 0.0), dx2(R * xs, 0.0);
    qt_rmsnorm_fwd_f64(y2.data(), rstd.data(), x.data(), w.data(), R, n, xs, ys, flags, (double)1e-6f);
    qt_rmsnorm_bwd_f64(dx2.data(), dy.data(), x.data(), w.data(), rstd.data(), R, n, xs, ys, flags);
    qt_rmsnorm_fwd(fy.data(), frstd.data(), fx.data(), fw.data(), R, n, xs, ys, flags, 1e-6f);
    qt_rmsnorm_bwd(fdx.data(), fdy.data(), fx.data(), fw.data(), frstd.data(), R, n, xs, ys, flags);
    qt_rmsnorm_wgrad(fdw.data(), fdy.data(), fx.data(), frstd.data(), R, n, xs, ys);
    CHECK(f32_check("rmsnorm y", fy, y2) <= F32_TOL);
    CHECK(f32_check("rmsnorm rstd", frstd, rstd) <= F32_TOL);
    CHECK(f32_check("rmsnorm dx", fdx, dx2) <= F32_TOL);
    CHECK(f32_check("rmsnorm dw", fdw, dw) <= F32_TOL);
}

TEST(KernelsBasic, RmsnormFdAndF32) { rmsnorm_case(0); }
TEST(KernelsBasic, RmsnormZeroCentredFdAndF32) { rmsnorm_case(QT_RMSNORM_ZERO_CENTRED); }

TEST(KernelsBasic, EmbedFdAndF32)
{
    uint64_t s = 31;
    const int64_t T = 7, d = 5, V = 6;
    const int32_t tok[T] = {3, 1, 3, 0, 5, 3, 1}; // repeats exercise the scatter-add
    vd w = rnd(V * d, &s), Rw = rnd(T * d, &s), x(T * d);
    auto loss = [&]() { qt_embed_fwd_f64(x.data(), tok, w.data(), T, d, V); return dot(x, Rw); };
    vd dw(V * d, 0.0);
    qt_embed_wgrad_f64(dw.data(), Rw.data(), tok, T, d, V);
    CHECK(fd_check("embed dw", loss, w, dw) <= FD_TOL);
    vf fw = to_f(w), fR = to_f(Rw), fx(T * d), fdw(V * d, 0.f);
    loss();
    qt_embed_fwd(fx.data(), tok, fw.data(), T, d, V);
    qt_embed_wgrad(fdw.data(), fR.data(), tok, T, d, V);
    CHECK(f32_check("embed x", fx, x) <= 0.0);      // a gather is exact
    CHECK(f32_check("embed dw", fdw, dw) <= F32_TOL);
}

TEST(KernelsBasic, XentFdAndF32)
{
    uint64_t s = 41;
    const int64_t b = 2, S = 3, V = 9;
    const int32_t tg[b * S] = {0, 8, 4, 4, 2, 7};
    vd l = rnd(b * S * V, &s, 6.0), dl(b * S * V), ls(b);
    auto loss = [&]() {
        vd g(b * S * V);
        qt_xent_f64(ls.data(), g.data(), l.data(), tg, b, S, V);
        return ls[0] + ls[1];
    };
    qt_xent_f64(ls.data(), dl.data(), l.data(), tg, b, S, V);
    // loss value against an independent direct formula
    for (int64_t q = 0; q < b; q++) {
        double want = 0;
        for (int64_t t = q * S; t < (q + 1) * S; t++) {
            double z = 0;
            for (int64_t v = 0; v < V; v++) z += exp(l[t * V + v]);
            want += log(z) - l[t * V + tg[t]];
        }
        DOUBLES_EQUAL(want, ls[q], 1e-12 * fabs(want)); // double rounding only
    }
    CHECK(fd_check("xent dlogits", loss, l, dl) <= FD_TOL);
    vf fl = to_f(l), fdl(b * S * V), fls(b);
    qt_xent(fls.data(), fdl.data(), fl.data(), tg, b, S, V);
    CHECK(f32_check("xent loss", fls, ls) <= F32_TOL);
    CHECK(f32_check("xent dlogits", fdl, dl) <= F32_TOL);
    // stability: huge logits must not overflow
    float big[4] = {1000.f, 999.f, -1000.f, 998.f}, g[4], lsum;
    int32_t t1 = 1;
    qt_xent(&lsum, g, big, &t1, 1, 1, 4);
    CHECK(isfinite(lsum) && isfinite(g[0]));
    // lse ~ 1000.4 is rounded to float (ulp 6.1e-5) before subtracting 999: 2 ulp there
    DOUBLES_EQUAL(1.0 + log(1.0 + exp(-1.0) + exp(-2.0)), lsum, 1.25e-4);
}

// The z-loss form (issue 33, MaxText's z_loss_multiplier): loss_t = lse - l[target] +
// z lse^2, z_seq the z terms; dlogits against central differences in double; a masked row
// (target -1) adds nothing; the float build within F32_TOL; z sums are part of the loss.
TEST(KernelsBasic, XentZLossFdAndF32)
{
    uint64_t s = 43;
    const int64_t b = 2, S = 3, V = 9;
    const double z = 0.05;
    const int32_t tg[b * S] = {0, 8, -1, 4, 2, 7};
    vd l = rnd(b * S * V, &s, 6.0), dl(b * S * V), ls(b), zs(b);
    auto loss = [&]() {
        vd g(b * S * V), zz(b);
        qt_xent_z_f64(ls.data(), zz.data(), g.data(), l.data(), tg, b, S, V, z);
        return ls[0] + ls[1];
    };
    qt_xent_z_f64(ls.data(), zs.data(), dl.data(), l.data(), tg, b, S, V, z);
    for (int64_t q = 0; q < b; q++) {
        double want = 0, wz = 0;
        for (int64_t t = q * S; t < (q + 1) * S; t++) {
            if (tg[t] < 0) continue;
            double e = 0;
            for (int64_t v = 0; v < V; v++) e += exp(l[t * V + v]);
            want += log(e) - l[t * V + tg[t]] + z * log(e) * log(e);
            wz += z * log(e) * log(e);
        }
        DOUBLES_EQUAL(want, ls[q], 1e-12 * fabs(want));
        DOUBLES_EQUAL(wz, zs[q], 1e-12 * fabs(wz));
    }
    for (int64_t v = 0; v < V; v++) CHECK(dl[2 * V + v] == 0.0);  // the masked row
    CHECK(fd_check("xent z dlogits", loss, l, dl) <= FD_TOL);
    vf fl = to_f(l), fdl(b * S * V), fls(b), fzs(b);
    qt_xent_z(fls.data(), fzs.data(), fdl.data(), fl.data(), tg, b, S, V, (float)z);
    CHECK(f32_check("xent z loss", fls, ls) <= F32_TOL);
    CHECK(f32_check("xent z sums", fzs, zs) <= F32_TOL);
    CHECK(f32_check("xent z dlogits", fdl, dl) <= F32_TOL);
}

// The blocked z-loss (canonical vocabulary blocks, qt_xent_blocked_z; issue 33): in double,
// the same losses, z sums and dlogits as the plain z form within 1e-12 relative, dlogits
// against central differences of its own loss, and the float build within F32_TOL.
TEST(KernelsBasic, XentZLossBlockedFdAndF32)
{
    uint64_t s = 47;
    const int64_t b = 2, S = 3, V = 16, nb = 4, R = b * S;
    const double z = 0.05;
    const int32_t tg[b * S] = {0, 15, -1, 4, 9, 7};
    vd l = rnd(b * S * V, &s, 6.0), dl(b * S * V), ls(b), zs(b), pdl(b * S * V), pls(b), pzs(b);
    vd scr(QT_XENT_BLK_SCRATCH(R, nb, 1));
    auto loss = [&]() {
        vd g(b * S * V), zz(b), sc(QT_XENT_BLK_SCRATCH(R, nb, 1));
        qt_xent_blocked_z_f64(ls.data(), zz.data(), g.data(), l.data(), tg, b, S, V, nb, sc.data(), z);
        return ls[0] + ls[1];
    };
    qt_xent_z_f64(pls.data(), pzs.data(), pdl.data(), l.data(), tg, b, S, V, z);
    qt_xent_blocked_z_f64(ls.data(), zs.data(), dl.data(), l.data(), tg, b, S, V, nb, scr.data(), z);
    for (int64_t q = 0; q < b; q++) {
        DOUBLES_EQUAL(pls[q], ls[q], 1e-12 * fabs(pls[q]));
        DOUBLES_EQUAL(pzs[q], zs[q], 1e-12 * fabs(pzs[q]));
    }
    for (int64_t i = 0; i < b * S * V; i++) DOUBLES_EQUAL(pdl[i], dl[i], 1e-12);
    for (int64_t v = 0; v < V; v++) CHECK(dl[2 * V + v] == 0.0);  // the masked row
    CHECK(fd_check("xent blocked z dlogits", loss, l, dl) <= FD_TOL);
    qt_xent_blocked_z_f64(ls.data(), zs.data(), dl.data(), l.data(), tg, b, S, V, nb, scr.data(), z);
    vf fl = to_f(l), fdl(b * S * V), fls(b), fzs(b), fscr(QT_XENT_BLK_SCRATCH(R, nb, 1));
    qt_xent_blocked_z(fls.data(), fzs.data(), fdl.data(), fl.data(), tg, b, S, V, nb, fscr.data(),
                      (float)z);
    CHECK(f32_check("xent blocked z loss", fls, ls) <= F32_TOL);
    CHECK(f32_check("xent blocked z sums", fzs, zs) <= F32_TOL);
    CHECK(f32_check("xent blocked z dlogits", fdl, dl) <= F32_TOL);
}

TEST(KernelsBasic, SwigluFdAndF32)
{
    uint64_t s = 51;
    const int64_t n = 11;
    vd a = rnd(n, &s, 4.0), u = rnd(n, &s, 2.0), Rw = rnd(n, &s), h(n);
    auto loss = [&]() { qt_swiglu_fwd_f64(h.data(), a.data(), u.data(), n); return dot(h, Rw); };
    vd b1 = rnd(n, &s), b2 = rnd(n, &s), da = b1, du = b2;
    qt_swiglu_bwd_f64(da.data(), du.data(), Rw.data(), a.data(), u.data(), n);
    for (int64_t i = 0; i < n; i++) { da[i] -= b1[i]; du[i] -= b2[i]; }
    CHECK(fd_check("swiglu da", loss, a, da) <= FD_TOL);
    CHECK(fd_check("swiglu du", loss, u, du) <= FD_TOL);
    loss();
    vf fa = to_f(a), fu = to_f(u), fR = to_f(Rw), fh(n), fda(n, 0.f), fdu(n, 0.f);
    qt_swiglu_fwd(fh.data(), fa.data(), fu.data(), n);
    qt_swiglu_bwd(fda.data(), fdu.data(), fR.data(), fa.data(), fu.data(), n);
    CHECK(f32_check("swiglu h", fh, h) <= F32_TOL);
    CHECK(f32_check("swiglu da", fda, da) <= F32_TOL);
    CHECK(f32_check("swiglu du", fdu, du) <= F32_TOL);
}

// The eight-lane SwiGLU backward (sig and silu from one exponential) against the scalar
// reference, 0 ulp: the bench model's shared-expert shape (524288 elements), a length with a
// tail of 1..7, and the special values (0, -0, the exp clamps at +-150, +-inf, NaN-free
// saturation at +-200); accumulated onto nonzero values; da and du one array.
TEST(KernelsBasic, SwigluBwdFastBitIdenticalToReference)
{
    const float edge[] = {0.0f, -0.0f, 150.0f, -150.0f, 151.0f, -151.0f, 200.0f, -200.0f,
                          INFINITY, -INFINITY, 88.7f, -103.9f, 1e-45f, -1e-45f, 20.0f, -20.0f};
    for (int64_t n : {(int64_t)524288, (int64_t)13, (int64_t)16 + 7}) {
        uint64_t s = 71 + (uint64_t)n;
        vd a = rnd(n, &s, 8.0), u = rnd(n, &s, 2.0), dh = rnd(n, &s), b1 = rnd(n, &s),
           b2 = rnd(n, &s);
        vf fa = to_f(a), fu = to_f(u), fdh = to_f(dh);
        for (int64_t i = 0; i < n && i < 16; i++) fa[i] = edge[i];
        vf da = to_f(b1), du = to_f(b2), db = da, dv = du;
        qt_swiglu_bwd(da.data(), du.data(), fdh.data(), fa.data(), fu.data(), n);
        qt_swiglu_bwd_ref(db.data(), dv.data(), fdh.data(), fa.data(), fu.data(), n);
        CHECK_TRUE_TEXT(memcmp(da.data(), db.data(), n * sizeof(float)) == 0,
                        "swiglu bwd da: fast != reference");
        CHECK_TRUE_TEXT(memcmp(du.data(), dv.data(), n * sizeof(float)) == 0,
                        "swiglu bwd du: fast != reference");
        // one accumulator for both (da == du): both increments, the reference's order
        vf d1 = to_f(b1), d2 = d1;
        qt_swiglu_bwd(d1.data(), d1.data(), fdh.data(), fa.data(), fu.data(), n);
        qt_swiglu_bwd_ref(d2.data(), d2.data(), fdh.data(), fa.data(), fu.data(), n);
        CHECK_TRUE_TEXT(memcmp(d1.data(), d2.data(), n * sizeof(float)) == 0,
                        "swiglu bwd da == du: fast != reference");
    }
}

static void gate_case(int mode)
{
    uint64_t s = 61 + (uint64_t)mode;
    const int64_t T = 3, H = 2, hd = 3, n = H * hd;
    const int64_t ng = mode == QT_GATE_HEADS ? T * 2 * n : T;
    vd x = rnd(T * n, &s), g = rnd(ng, &s, 4.0), Rw = rnd(T * n, &s), y(T * n);
    auto loss = [&]() {
        qt_sigmoid_gate_fwd_f64(y.data(), x.data(), g.data(), T, n, mode, hd);
        return dot(y, Rw);
    };
    vd b1 = rnd(T * n, &s), b2 = rnd(ng, &s), dx = b1, dg = b2;
    qt_sigmoid_gate_bwd_f64(dx.data(), dg.data(), Rw.data(), x.data(), g.data(), T, n, mode, hd);
    for (size_t i = 0; i < dx.size(); i++) dx[i] -= b1[i];
    for (size_t i = 0; i < dg.size(); i++) dg[i] -= b2[i];
    // In HEADS mode the q half of the gate source must get exactly zero gradient.
    CHECK(fd_check(mode ? "gate(row) dx" : "gate(heads) dx", loss, x, dx) <= FD_TOL);
    CHECK(fd_check(mode ? "gate(row) dgate" : "gate(heads) dgate", loss, g, dg) <= FD_TOL);
    loss();
    vf fx = to_f(x), fg = to_f(g), fR = to_f(Rw), fy(T * n), fdx(T * n, 0.f), fdg(ng, 0.f);
    qt_sigmoid_gate_fwd(fy.data(), fx.data(), fg.data(), T, n, mode, hd);
    qt_sigmoid_gate_bwd(fdx.data(), fdg.data(), fR.data(), fx.data(), fg.data(), T, n, mode, hd);
    CHECK(f32_check("gate y", fy, y) <= F32_TOL);
    CHECK(f32_check("gate dx", fdx, dx) <= F32_TOL);
    CHECK(f32_check("gate dgate", fdg, dg) <= F32_TOL);
}

TEST(KernelsBasic, SigmoidGateHeadsFdAndF32) { gate_case(QT_GATE_HEADS); }
TEST(KernelsBasic, SigmoidGateRowFdAndF32) { gate_case(QT_GATE_ROW); }

TEST(KernelsBasic, ZeroAddAcc)
{
    uint64_t s = 71;
    vd a = rnd(9, &s), b = rnd(9, &s);
    vf fa = to_f(a), fb = to_f(b), y(9, 7.f), d = fa;
    qt_add(y.data(), fa.data(), fb.data(), 9);
    qt_acc(d.data(), fb.data(), 9);
    for (int i = 0; i < 9; i++) {
        DOUBLES_EQUAL((double)(fa[i] + fb[i]), y[i], 0.0); // one float add, exact match
        DOUBLES_EQUAL((double)(fa[i] + fb[i]), d[i], 0.0);
    }
    qt_zero(y.data(), 9);
    int32_t iz[3] = {1, 2, 3};
    qt_zero_i32(iz, 3);
    for (int i = 0; i < 9; i++) DOUBLES_EQUAL(0.0, y[i], 0.0);
    LONGS_EQUAL(0, iz[0] | iz[1] | iz[2]);
}

// qt_zero from 4 MiB on (the streamed form, elementwise.c): every element +0.0 and nothing
// written outside, for starts off the 64-byte line by 0-17 floats and lengths around the
// threshold (the line-alignment head, the 16-float body, the tail; thr - 1: the plain loop).
TEST(KernelsBasic, ZeroStreamsLargeBuffersExactly)
{
    const int64_t thr = (4ll << 20) / 4;
    const int64_t lens[] = {thr - 1, thr, thr + 7, thr + 33};
    std::vector<float> buf((size_t)(thr + 160), 0.0f);
    float *base = buf.data();
    while ((uintptr_t)base & 63u) base++;
    base += 16;  // a line before it for the guard
    int checked = 0;
    for (int64_t n : lens) {
        for (int off = 0; off <= 17; off += (off < 3 ? 1 : 7)) {
            memset(buf.data(), 0xab, buf.size() * sizeof(float));
            float *y = base + off;
            qt_zero(y, n);
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) bad += qt_test_bits(y[i]) != 0u;
            LONGS_EQUAL(0, bad);
            LONGS_EQUAL(0xababababu, qt_test_bits(y[-1]));
            LONGS_EQUAL(0xababababu, qt_test_bits(y[n]));
            checked++;
        }
    }
    LONGS_EQUAL(24, checked);
}

// The MTP head's stacking kernels (kernels/stack.h, qt_ops.def STACK .. SPLIT_BWD): STACK's
// backward (split_acc) and SPLIT's backward (stack_acc) against finite differences of
// L = sum(out * R) in double, accumulating onto non-zero bases, a skipped (NULL) part, and
// the float build copying bit for bit.
TEST(KernelsBasic, StackSplitFdAndBits)
{
    uint64_t s = 31;
    const int64_t nb = 3, rows = 4, w = 5, n = 3, part = nb * rows * w;
    std::vector<vd> x(n);
    for (auto &v : x) v = rnd(part, &s);
    vd y(nb * n * rows * w), R = rnd(nb * n * rows * w, &s);
    auto stack_loss = [&]() {
        const double *xp[3] = {x[0].data(), x[1].data(), x[2].data()};
        qt_stack_f64(y.data(), xp, nb, rows, w, n);
        return dot(y, R);
    };
    std::vector<vd> base(n), dx(n);
    for (int64_t j = 0; j < n; j++) dx[j] = base[j] = rnd(part, &s);
    double *dp[3] = {dx[0].data(), dx[1].data(), dx[2].data()};
    qt_split_acc_f64(dp, R.data(), nb, rows, w, n);
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i = 0; i < part; i++) dx[j][i] -= base[j][i];
        CHECK(fd_check("stack dx_j", stack_loss, x[j], dx[j]) <= FD_TOL);
    }
    // SPLIT: y -> parts; L = sum_j sum(x_j * R_j); its backward adds R_j into part j of dy
    vd yy = rnd(nb * n * rows * w, &s);
    std::vector<vd> Rj(n), out(n, vd(part));
    for (auto &v : Rj) v = rnd(part, &s);
    auto split_loss = [&]() {
        double *op[3] = {out[0].data(), out[1].data(), out[2].data()};
        qt_split_f64(op, yy.data(), nb, rows, w, n);
        return dot(out[0], Rj[0]) + dot(out[1], Rj[1]) + dot(out[2], Rj[2]);
    };
    vd ybase = rnd(yy.size(), &s), dy = ybase;
    const double *rp[3] = {Rj[0].data(), Rj[1].data(), Rj[2].data()};
    qt_stack_acc_f64(dy.data(), rp, nb, rows, w, n);
    for (size_t i = 0; i < dy.size(); i++) dy[i] -= ybase[i];
    CHECK(fd_check("split dy", split_loss, yy, dy) <= FD_TOL);
    // a NULL part: skipped (STACK_BWD's absent gradients), the others unchanged
    vd keep = dx[1];
    double *dq[3] = {dx[0].data(), NULL, dx[2].data()};
    qt_split_acc_f64(dq, R.data(), nb, rows, w, n);
    CHECK(memcmp(keep.data(), dx[1].data(), keep.size() * sizeof(double)) == 0);
    // float: copies are bit for bit, and split(stack(x)) == x
    std::vector<vf> fx(n);
    for (int64_t j = 0; j < n; j++) fx[j] = to_f(x[j]);
    vf fy(y.size()), back(part);
    const float *fxp[3] = {fx[0].data(), fx[1].data(), fx[2].data()};
    qt_stack(fy.data(), fxp, nb, rows, w, n);
    for (int64_t j = 0; j < n; j++) {
        float *bp[3] = {NULL, NULL, NULL};
        bp[j] = back.data();
        qt_split(bp, fy.data(), nb, rows, w, n);
        CHECK(memcmp(back.data(), fx[j].data(), back.size() * sizeof(float)) == 0);
    }
    CHECK(memcmp(fy.data() + (1 * n + 2) * rows * w, fx[2].data() + rows * w,
                 rows * w * sizeof(float)) == 0);
}
