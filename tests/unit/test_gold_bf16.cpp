// test_gold_bf16.cpp - the bf16 kernels (firmware/kernels/bf16.h, bf16_matmul.h) against the
// PyTorch goldens of tests/golden/kernels/bf16.h (tests/reference/gold_bf16.py, issue 17).
//
//  (a) fp32 -> bf16: qt_bf16_from_f32 (and the n-element conversion, and VCVTNEPS2BF16 when
//      built) give torch's `.to(torch.bfloat16)` bits exactly on 512 normal values (random,
//      every exponent, 84 exact ties); the generator asserts torch is round-to-nearest-even.
//      Denormals (case dn) are where the two differ: torch rounds them (no flush), qtrain
//      gives the zero of their sign as VCVTNEPS2BF16 does; the test pins both behaviours.
//  (b) the three bf16 matmuls on every built path against torch in float64 from the same
//      bf16 values, within the chain bound of bf16_matmul.h:
//          |q - exact| <= (P + 2) 2^-24 (sum_p |a_p b_p| + |dx0|)
//      (P fp32 roundings of relative size <= 2^-24 each in a chain from +0, plus the final
//      add of bwd_data; the golden's own float64 error, <= P 2^-53 sum|ab|, is negligible).
//  (c) the same outputs against torch's own bf16 matmul (bf16 operands, output rounded to
//      bf16 by torch), within
//          |q - t| <= 2^-8 |t| + (P + 2) (2^-24 + 2^-ACC) sum_p |a_p b_p|
//      t = RNE_bf16(s'), s' torch's accumulation: |t - s'| <= 2^-8 |t| (half a bf16 ulp, 8
//      significant bits); q within (P + 2) 2^-24 sum|ab| of the exact sum (b), s' within
//      (P + 2) 2^-ACC sum|ab|, ACC the golden's <SLOT>_TORCH_ACC: 24 where torch
//      accumulates in fp32 (oneDNN, M*N*K > 16^3, and its fp32 dot for x @ w.t()), 8 where
//      Debian's torch 1.13 adds every product into the bf16 output (its native gemm for
//      dy @ w and dy.t() @ x at M*N*K <= 16^3: cases c0, c1; gold_bf16.py asserts which).
//      With ACC 24 that is 2^-8 |t| + 2 (P + 2) 2^-24 sum|ab|.
//      (b) is the tight check, about 2^16 times tighter than (c) (ACC 24) for sums without
//      cancellation: (c) is dominated by torch's bf16 rounding of its output, (b) has only
//      fp32 rounding, so (b) pins qtrain's arithmetic and (c) checks that qtrain's operands
//      and layouts mean what a PyTorch user means by x W^T, dy W and dy^T x, at the
//      precision a PyTorch bf16 user gets. bwd_data is compared with torch from dx0 = 0
//      (torch returns dy W alone).
//      Where torch accumulates in fp32 (ACC 24), also bit for bit: bf16(q) == t whenever no
//      bf16 rounding boundary (a midpoint between neighbouring bf16) lies within
//      (P + 2) 2^-24 sum|ab| of the exact sum, since q and torch's s' both lie in that
//      interval and round the same way.
// QT_GOLD_BF16_REPORT=1 in the environment prints the measured maxima. Mutations that fail
// these checks (conversion truncating, an operand read transposed, the odd last element
// dropped, a tolerance without its ACC or 2^-8 |t| term) are recorded in docs/precision.md.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "CppUTest/TestHarness.h"

extern "C" {
#include "kernels/bf16.h"
#include "kernels/bf16_matmul.h"
}

#include "golden/kernels/bf16.h"

namespace {

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

bool report() { return getenv("QT_GOLD_BF16_REPORT") != NULL; }

// A golden bf16 value (a double holding a bf16-representable number) as its bits.
qt_bf16 golden_bf16(double v)
{
    const uint32_t u = qt_bf16_bits_f32((float)v);
    if ((double)(float)v != v || (u & 0xffffu) != 0)
        FAIL(StringFromFormat("golden %.17g is not a bf16 value", v).asCharString());
    return (qt_bf16)(u >> 16);
}

std::vector<qt_bf16> golden_bf16_n(const double *src, size_t n)
{
    std::vector<qt_bf16> r(n);
    for (size_t i = 0; i < n; i++) r[i] = golden_bf16(src[i]);
    return r;
}

} // namespace

TEST_GROUP(GoldBf16) {};

// (a) torch's conversion bit for bit on normal values and zeros.
TEST(GoldBf16, ConvertEqualsTorch)
{
    const int n = GOLD_BF16_CVT_N;
    CHECK(GOLD_BF16_CVT_TIES > 0);
    std::vector<float> x(n);
    std::vector<qt_bf16> want(n), got(n, 0xdead);
    for (int i = 0; i < n; i++) {
        x[i] = (float)gold_bf16_cvt_x[i];
        CHECK((double)x[i] == gold_bf16_cvt_x[i]); // the golden inputs are fp32 values
        want[i] = golden_bf16(gold_bf16_cvt_y[i]);
        if (qt_bf16_from_f32(x[i]) != want[i])
            FAIL(StringFromFormat("cvt [%d] 0x%08x: qtrain 0x%04x, torch 0x%04x", i,
                                  qt_bf16_bits_f32(x[i]), qt_bf16_from_f32(x[i]), want[i])
                     .asCharString());
    }
    qt_bf16_from_f32_n(got.data(), x.data(), n);
    for (int i = 0; i < n; i++) LONGS_EQUAL(want[i], got[i]);
    std::vector<qt_bf16> insn(n, 0xdead);
    if (qt_bf16_from_f32_insn(insn.data(), x.data(), n) == 0)
        for (int i = 0; i < n; i++) LONGS_EQUAL(want[i], insn[i]);
}

// (a) denormals: torch rounds them to nearest even (bf16 denormals, or FLT_MIN from the
// largest), VCVTNEPS2BF16 / qtrain flush them to the zero of their sign.
TEST(GoldBf16, DenormalsFlushedWhereTorchRounds)
{
    int nonzero = 0;
    for (int i = 0; i < GOLD_BF16_DN_N; i++) {
        const float x = (float)gold_bf16_dn_x[i];
        const uint32_t u = qt_bf16_bits_f32(x);
        CHECK((u & 0x7f800000u) == 0 && (u & 0x7fffffu) != 0); // a denormal
        const qt_bf16 t = golden_bf16(gold_bf16_dn_y[i]);
        // torch: the plain nearest-even rounding of the bits, no flush
        LONGS_EQUAL((u + 0x7fffu + ((u >> 16) & 1u)) >> 16, t);
        nonzero += (t & 0x7fff) != 0;
        // qtrain (= VCVTNEPS2BF16): the zero of the sign
        LONGS_EQUAL((u >> 16) & 0x8000u, qt_bf16_from_f32(x));
    }
    LONGS_EQUAL(GOLD_BF16_DN_NONZERO, nonzero);
    CHECK(nonzero > 0); // so the two conversions really differ on these inputs
}

namespace {

struct MmCase {
    const char *name;
    int64_t M, N, K;
    int acc[3]; // torch's accumulator bits for y, dx, dw (24 fp32, 8 bf16)
    const double *x, *w, *dy, *dx0, *y, *dx, *dw, *y_t, *dx_t, *dw_t;
};

const MmCase MM_CASES[] = {
#define MM(c, C)                                                                           \
    {#c, GOLD_BF16_##C##_M, GOLD_BF16_##C##_N, GOLD_BF16_##C##_K,                         \
     {GOLD_BF16_##C##_Y_TORCH_ACC, GOLD_BF16_##C##_DX_TORCH_ACC,                            \
      GOLD_BF16_##C##_DW_TORCH_ACC},                                                         \
     gold_bf16_##c##_x,                                                                      \
     gold_bf16_##c##_w, gold_bf16_##c##_dy, gold_bf16_##c##_dx0, gold_bf16_##c##_y,        \
     gold_bf16_##c##_dx, gold_bf16_##c##_dw, gold_bf16_##c##_y_torch,                      \
     gold_bf16_##c##_dx_torch, gold_bf16_##c##_dw_torch}
    MM(c0, C0), MM(c1, C1), MM(c2, C2),
#undef MM
};

struct Worst {
    double f64_ratio = 0, f64_rel = 0, t_ratio = 0, t_rel = 0;
    int same_bf16 = 0, n = 0, decided = 0;
};

// v rounded to 8 significant bits, nearest even, in double (no range limits: the goldens'
// values are far from bf16 overflow and underflow).
double rne8(double v)
{
    if (v == 0) return v;
    int e;
    const double f = frexp(v, &e); // v = f 2^e, 0.5 <= |f| < 1
    return ldexp(nearbyint(ldexp(f, 8)), e - 8);
}

// One kernel's output q[n] against the float64 golden e[n] (bound (b), with the magnitude
// sums mag[n] and |dx0|) and against torch's bf16 output t[n] (bound (c), q0 = q - dx0
// for bwd_data, computed from dx0 = 0 by the caller).
void mm_compare(const char *what, const std::vector<float> &q, const double *e,
                const std::vector<float> &q0, const double *t, const std::vector<double> &mag,
                const std::vector<double> &dx0abs, int64_t P, int acc, Worst *wst,
                const double *e0)
{
    for (size_t i = 0; i < q.size(); i++) {
        const double chain = (double)(P + 2) * 0x1p-24;
        const double chain_t = (double)(P + 2) * ldexp(1.0, -acc);
        const double b64 = chain * (mag[i] + dx0abs[i]);
        const double err = fabs((double)q[i] - e[i]);
        if (!(err <= b64))
            FAIL(StringFromFormat("%s [%zu]: %.9g vs float64 %.17g: |err| %.3g > bound %.3g",
                                  what, i, (double)q[i], e[i], err, b64).asCharString());
        const double bt = 0x1p-8 * fabs(t[i]) + (chain + chain_t) * mag[i];
        const double errt = fabs((double)q0[i] - t[i]);
        if (!(errt <= bt))
            FAIL(StringFromFormat("%s [%zu]: %.9g vs torch bf16 %.9g: |err| %.3g > bound %.3g",
                                  what, i, (double)q0[i], t[i], errt, bt).asCharString());
        // bit for bit where decidable (fp32 accumulation only); e0 = exact sum without dx0
        const double d = chain * mag[i];
        if (acc == 24 && rne8(e0[i] - d) == rne8(e0[i] + d)) {
            wst->decided++;
            if ((double)qt_f32_from_bf16(qt_bf16_from_f32(q0[i])) != t[i])
                FAIL(StringFromFormat("%s [%zu]: bf16(%.9g) != torch bf16 %.9g (exact %.17g)",
                                      what, i, (double)q0[i], t[i], e0[i]).asCharString());
        }
        if (b64 > 0) wst->f64_ratio = fmax(wst->f64_ratio, err / b64);
        if (mag[i] > 0) wst->f64_rel = fmax(wst->f64_rel, err / (mag[i] + dx0abs[i]));
        if (bt > 0) wst->t_ratio = fmax(wst->t_ratio, errt / bt);
        if (t[i] != 0) wst->t_rel = fmax(wst->t_rel, errt / fabs(t[i]));
        wst->same_bf16 += (double)qt_f32_from_bf16(qt_bf16_from_f32(q0[i])) == t[i];
        wst->n++;
    }
}

typedef int (*mm_fn)(int, float *, const qt_bf16 *, const qt_bf16 *, int64_t, int64_t, int64_t);

// (b) and (c) for one case on one path; returns -1 when the build lacks the path.
int mm_case(const MmCase &c, int path, Worst w3[3])
{
    const int64_t M = c.M, N = c.N, K = c.K;
    const std::vector<qt_bf16> x = golden_bf16_n(c.x, (size_t)(M * K));
    const std::vector<qt_bf16> w = golden_bf16_n(c.w, (size_t)(N * K));
    const std::vector<qt_bf16> dy = golden_bf16_n(c.dy, (size_t)(M * N));
    std::vector<float> dx0((size_t)(M * K));
    for (size_t i = 0; i < dx0.size(); i++) dx0[i] = (float)c.dx0[i];
    // magnitude sums of the bounds, in double from the golden inputs
    std::vector<double> my((size_t)(M * N)), mdx((size_t)(M * K)), mdw((size_t)(N * K));
    std::vector<double> zy(my.size()), adx0(mdx.size()), zw(mdw.size());
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) {
                my[m * N + n] += fabs(c.x[m * K + k] * c.w[n * K + k]);
                mdx[m * K + k] += fabs(c.dy[m * N + n] * c.w[n * K + k]);
                mdw[n * K + k] += fabs(c.dy[m * N + n] * c.x[m * K + k]);
            }
    for (size_t i = 0; i < adx0.size(); i++) adx0[i] = fabs((double)dx0[i]);

    std::vector<float> y(my.size(), -7.0f), dx(dx0), dxz(mdx.size(), 0.0f), dw(mdw.size(), 3.0f);
    const mm_fn fns[3] = {qt_bf16_matmul_fwd_on, qt_bf16_matmul_bwd_data_on,
                          qt_bf16_matmul_wgrad_on};
    if (fns[0](path, y.data(), x.data(), w.data(), M, N, K) != 0) return -1;
    CHECK_EQUAL(0, fns[1](path, dx.data(), dy.data(), w.data(), M, N, K));
    CHECK_EQUAL(0, fns[1](path, dxz.data(), dy.data(), w.data(), M, N, K));
    CHECK_EQUAL(0, fns[2](path, dw.data(), dy.data(), x.data(), M, N, K));
    char what[96];
    snprintf(what, sizeof what, "%s fwd path %d", c.name, path);
    mm_compare(what, y, c.y, y, c.y_t, my, zy, K, c.acc[0], &w3[0], c.y);
    snprintf(what, sizeof what, "%s bwd_data path %d", c.name, path);
    std::vector<double> edx0(mdx.size()); // the float64 dy W alone (dx - dx0: exact, the
    for (size_t i = 0; i < edx0.size(); i++) edx0[i] = c.dx[i] - c.dx0[i]; // golden's sum)
    mm_compare(what, dx, c.dx, dxz, c.dx_t, mdx, adx0, N, c.acc[1], &w3[1], edx0.data());
    snprintf(what, sizeof what, "%s wgrad path %d", c.name, path);
    mm_compare(what, dw, c.dw, dw, c.dw_t, mdw, zw, M, c.acc[2], &w3[2], c.dw);
    return 0;
}

} // namespace

// (b) + (c) on every case and every path this build has (the firmware's own path included).
TEST(GoldBf16, MatmulsAgainstTorch)
{
    const int paths[4] = {QT_BF16_PATH_REF, QT_BF16_PATH_EMUL, QT_BF16_PATH_INSN,
                          QT_BF16_PATH_WIDE};
    const char *kn[3] = {"fwd", "bwd_data", "wgrad"};
    int ran_firmware_path = 0;
    for (const MmCase &c : MM_CASES) {
        for (int p = 0; p < 4; p++) {
            Worst w3[3];
            if (mm_case(c, paths[p], w3) != 0) continue;
            ran_firmware_path |= paths[p] == qt_bf16_mm_path();
            if (report())
                for (int k = 0; k < 3; k++)
                    printf("\nbf16 gold %s %s path %d: f64 max|err|/bound %.3g "
                           "(max|err|/sum|ab| %.3g); torch (ACC %d) max|err|/bound %.3g "
                           "(max|err|/|t| %.3g), bf16(q) == t on %d/%d (%d decidable)",
                           c.name, kn[k], paths[p], w3[k].f64_ratio, w3[k].f64_rel, c.acc[k],
                           w3[k].t_ratio, w3[k].t_rel, w3[k].same_bf16, w3[k].n, w3[k].decided);
        }
    }
    CHECK(ran_firmware_path);
}
