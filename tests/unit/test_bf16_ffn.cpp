// test_bf16_ffn.cpp - the bf16 kernels the runtime calls for bf16 plans:
// firmware/kernels/bf16_matmul_canon.h (canonical blocked matmuls on bf16) and
// bf16_expert_ffn.h (the routed expert SwiGLU FFN on bf16), on the machine at hand.
//  (a) each kernel against an independent scalar reference written here (explicit
//      VDPBF16PS chains through qt_bf16_fma_ref, explicit bf16 roundings, explicit pairwise
//      trees, per-token slot adds) at 0 ulp, on odd and even d, f, T, k = 1, 2, 4, experts
//      without rows, invalid expert ids (-1 and E), nb = 0, 1, 2, 4, several scratch sizes
//      (expert-major and slot-major backward, the wgrad chain continued across chunks);
//  (b) every built path (scalar reference, AVX2 emulation, VDPBF16PS) and the build's
//      default give the same bits;
//  (c) the wgrad with the backward's saved dgu and with dgu recomputed: the same bits;
//  (d) tensor parallelism: canonical matmuls split over P = 2, 4, 8 ranks, and the FFN with
//      f split over P = 2 (y partials, dx partials with k = 1) combined by the pairwise tree
//      over ranks equal the one-rank bits; nb = 1 equals the plain bf16 matmul;
//  (e) float64 sanity: within stated loose tolerances of a double computation on the same
//      bf16 inputs;
//  (f) the wgrad with the leaf-tree carry in its finish (qt_bf16_expert_ffn_wgrad_carry,
//      qt_leaf_carry.h) against the written leaves pushed by qt_tree_push, 0 ulp, on every
//      path and scratch size of (a) (whole experts, experts without rows, chains continued
//      across chunks in the carry's destination), 1, 2 and 3 addends holding infinities,
//      signed zeros and denormals, saved and recomputed dgu; a scratch below a pair of rows
//      is refused;
//  (g) every leaf of a call at once (qt_bf16_expert_ffn_wgrad_leaves, expert-major) against
//      the leaves one by one (written into level 0 or carried), 2 to 4 sequences from an
//      even and an odd first leaf, on every path and scratch size, saved and recomputed dgu.
// Mutations tried by hand (not committed) are recorded in docs/precision.md.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <vector>
#include "CppUTest/TestHarness.h"

extern "C" {
#include "kernels/bf16.h"
#include "kernels/bf16_matmul.h"
#include "kernels/bf16_matmul_canon.h"
#include "kernels/bf16_expert_ffn.h"
#include "math/qt_math.h"
#include "runtime/qt_tree.h"
}

namespace {

typedef std::vector<float> vf;
typedef std::vector<qt_bf16> vb;

uint32_t bits(float f) { return qt_bf16_bits_f32(f); }
float wid(qt_bf16 h) { return qt_f32_from_bf16(h); }
float nanfix(float v) { return v != v ? qt_bf16_f32_bits(0x7fc00000u) : v; }

uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// uniform in [-scale, scale), rounded to bf16
qt_bf16 rb(uint64_t *s, float scale)
{
    const double u = (double)(xs(s) >> 11) * 0x1p-53 * 2.0 - 1.0;
    return qt_bf16_from_f32((float)(u * scale));
}

vb rbv(size_t n, uint64_t *s, float scale)
{
    vb v(n);
    for (auto &h : v) h = rb(s, scale);
    return v;
}

// One VDPBF16PS chain from +0 over P elements in pairs, the odd (hi) element first; odd P:
// the last pair's hi element is +0 on both sides. a(p), b(p): the widened operands.
template <class FA, class FB> float chain(int64_t P, FA a, FB b)
{
    float acc = 0.0f;
    for (int64_t q = 0; 2 * q < P; q++) {
        const int hi = 2 * q + 1 < P;
        acc = qt_bf16_fma_ref(hi ? a(2 * q + 1) : 0.0f, hi ? b(2 * q + 1) : 0.0f, acc);
        acc = qt_bf16_fma_ref(a(2 * q), b(2 * q), acc);
    }
    return acc;
}

// The pairwise tree ((p0+p1)+(p2+p3))+..., written recursively (nb a power of two).
float tree(const float *p, int64_t n)
{
    if (n == 1) return p[0];
    return tree(p, n / 2) + tree(p + n / 2, n / 2);
}

// nan_any: any two NaNs compare equal (trees where a NaN meets a NaN: canon_case).
int diff(const char *what, const float *got, const float *want, size_t n, int nan_any = 0)
{
    for (size_t i = 0; i < n; i++)
        if (bits(got[i]) != bits(want[i]) && !(nan_any && got[i] != got[i] && want[i] != want[i])) {
            fprintf(stderr, "\n%s: [%zu] got 0x%08x (%.9g) want 0x%08x (%.9g)\n", what, i,
                    bits(got[i]), (double)got[i], bits(want[i]), (double)want[i]);
            return 1;
        }
    return 0;
}

int diffb(const char *what, const qt_bf16 *got, const qt_bf16 *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "\n%s: [%zu] got 0x%04x want 0x%04x\n", what, i, got[i], want[i]);
            return 1;
        }
    return 0;
}

const int PATHS[4] = {QT_BF16_PATH_REF, QT_BF16_PATH_EMUL, QT_BF16_PATH_INSN, QT_BF16_PATH_WIDE};
const char *PATH_NAME[4] = {"ref", "emul", "insn", "wide"};

// ---------------------------------------------------------------- canonical matmuls
// Independent canonical references: block j = slice j of every segment, one chain over the
// block's packed indices, fwd partial = chain, bwd partial = (+0) + chain, then the tree.
vf canon_fwd_ref(const vb &x, const vb &w, int64_t M, int64_t N, int64_t K, int64_t nseg,
                 int64_t nb)
{
    const int64_t nbb = nb < 1 ? 1 : nb, L = K / nseg, sl = L / nbb;
    auto col = [&](int64_t j, int64_t p) { return (p / sl) * L + j * sl + p % sl; };
    vf out((size_t)(M * N)), part((size_t)nbb);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            for (int64_t j = 0; j < nbb; j++)
                part[j] = nanfix(chain(nseg * sl, [&](int64_t p) { return wid(x[m * K + col(j, p)]); },
                                       [&](int64_t p) { return wid(w[n * K + col(j, p)]); }));
            out[m * N + n] = tree(part.data(), nbb);
        }
    return out;
}

vf canon_bwd_ref(const vb &dy, const vb &w, int64_t M, int64_t N, int64_t K, int64_t nseg,
                 int64_t nb)
{
    const int64_t nbb = nb < 1 ? 1 : nb, L = N / nseg, sl = L / nbb;
    auto row = [&](int64_t j, int64_t p) { return (p / sl) * L + j * sl + p % sl; };
    vf out((size_t)(M * K)), part((size_t)nbb);
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < K; c++) {
            for (int64_t j = 0; j < nbb; j++)
                part[j] = nanfix(0.0f + chain(nseg * sl,
                                              [&](int64_t p) { return wid(dy[m * N + row(j, p)]); },
                                              [&](int64_t p) { return wid(w[row(j, p) * K + c]); }));
            out[m * K + c] = tree(part.data(), nbb);
        }
    return out;
}

// Columns of block range [j0, j1) of every segment of a [rows, nseg*L] matrix (a rank's
// local contraction), as the rank holds them.
vb take_blocks(const vb &a, int64_t rows, int64_t nseg, int64_t L, int64_t nb, int64_t j0,
               int64_t j1)
{
    const int64_t sl = L / nb, w = nseg * (j1 - j0) * sl;
    vb out((size_t)(rows * w));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t s = 0; s < nseg; s++)
            for (int64_t i = 0; i < (j1 - j0) * sl; i++)
                out[r * w + s * (j1 - j0) * sl + i] = a[r * nseg * L + s * L + j0 * sl + i];
    return out;
}

// Rows of block range [j0, j1) of every segment of a [nseg*L, cols] matrix.
vb take_block_rows(const vb &a, int64_t cols, int64_t nseg, int64_t L, int64_t nb, int64_t j0,
                   int64_t j1)
{
    const int64_t sl = L / nb, h = (j1 - j0) * sl;
    vb out((size_t)(nseg * h * cols));
    for (int64_t s = 0; s < nseg; s++)
        for (int64_t i = 0; i < h; i++)
            for (int64_t c = 0; c < cols; c++)
                out[(s * h + i) * cols + c] = a[(s * L + j0 * sl + i) * cols + c];
    return out;
}

// The P ranks' outputs combined by the pairwise tree over ranks.
vf tree_ranks(const std::vector<vf> &parts)
{
    vf out(parts[0].size());
    vf p(parts.size());
    for (size_t i = 0; i < out.size(); i++) {
        for (size_t t = 0; t < parts.size(); t++) p[t] = parts[t][i];
        out[i] = tree(p.data(), (int64_t)parts.size());
    }
    return out;
}

// fwd: out[M,N] = x[M,K] w[N,K]^T; bwd: out[M,N] = dy[M,K] wb[K,N] (contraction K in both).
// mode 0: ordinary operands; 1: one element in 13 of x and dy an infinity, a NaN, a
// denormal or a signed zero (NaN block partials, inf - inf in the tree); 2: x and dy tiny
// (products flush: block chains end at -0, so the data gradient's (+0) + chain shows).
void canon_case(int64_t M, int64_t N, int64_t K, int64_t nseg, int64_t nb, uint64_t *s,
                int mode = 0)
{
    char what[160];
    snprintf(what, sizeof what, "canon M%lld N%lld K%lld nseg%lld nb%lld mode %d", (long long)M,
             (long long)N, (long long)K, (long long)nseg, (long long)nb, mode);
    vb x = rbv((size_t)(M * K), s, 1.0f), w = rbv((size_t)(N * K), s, 1.0f);
    vb dy = rbv((size_t)(M * K), s, 1.0f), wb = rbv((size_t)(K * N), s, 1.0f);
    static const qt_bf16 sp[] = {0x7f80, 0xff80, 0x7fc1, 0x0001, 0x8000, 0x0000};
    for (size_t i = 0; i < x.size(); i++) {
        if (mode == 1 && i % 13 == 5) x[i] = sp[i % 6], dy[i] = sp[(i / 13) % 6];
        if (mode == 2) x[i] = qt_bf16_from_f32(wid(x[i]) * 1e-25f), dy[i] = qt_bf16_from_f32(wid(dy[i]) * 1e-25f);
    }
    vf sf((size_t)QT_CANON_FWD_SCRATCH(M, N, K, nb)), sb((size_t)QT_CANON_BWD_SCRATCH(M, K, N, nb));
    vf rf = canon_fwd_ref(x, w, M, N, K, nseg, nb);
    vf rbw = canon_bwd_ref(dy, wb, M, K, N, nseg, nb);
    const size_t no = (size_t)(M * N);
    // mode 1: where a NaN meets a NaN in a tree, which payload survives is the compiler's
    // choice of operand order for a commutative + (qt_canon_tree's compiled vector body and
    // tail differ; docs/precision.md), so NaNs compare as NaNs, every other value bit for bit
    const int nan_any = mode == 1;
    for (int pi = 0; pi < 4; pi++) {
        vf of(no, -3.0f), ob(no, 5.0f);
        if (qt_bf16_matmul_canon_fwd_on(PATHS[pi], of.data(), x.data(), w.data(), M, N, K, nseg,
                                        nb, sf.data()) != 0) continue;
        CHECK_EQUAL(0, qt_bf16_matmul_canon_bwd_data_on(PATHS[pi], ob.data(), dy.data(),
                                                        wb.data(), M, K, N, nseg, nb, sb.data()));
        CHECK_EQUAL(0, diff(what, of.data(), rf.data(), no, nan_any));
        CHECK_EQUAL(0, diff(what, ob.data(), rbw.data(), no, nan_any));
    }
    // the strided / row-mapped forms (the expert FFN's padded gathered rows, rows written in
    // place): left rows at a stride of K + 3 (odd: pairs off their natural alignment), out
    // row m at row orow[m] = 2 (M - 1 - m) + 1 of a buffer with stride N + 5 (bwd N + 7),
    // and without a map at those strides; the same bits, every other element untouched
    for (int pi = 0; pi < 4; pi++) {
        const int64_t lx = K + 3, lyb = K + 3, lo = N + 5, lob = N + 7, rows = 2 * M + 1;
        vb xs_((size_t)(M * lx), 0x7fc1), dys((size_t)(M * lyb), 0x7fc1);
        for (int64_t m = 0; m < M; m++) {
            memcpy(&xs_[(size_t)(m * lx)], &x[(size_t)(m * K)], (size_t)K * sizeof(qt_bf16));
            memcpy(&dys[(size_t)(m * lyb)], &dy[(size_t)(m * K)], (size_t)K * sizeof(qt_bf16));
        }
        vf orow((size_t)M);
        for (int64_t m = 0; m < M; m++) orow[(size_t)m] = (float)(2 * (M - 1 - m) + 1);
        for (int map = 0; map < 2; map++) {
            vf of((size_t)(rows * lo), -3.0f), ob((size_t)(rows * lob), 5.0f);
            if (qt_bf16_matmul_canon_fwd_ld_on(PATHS[pi], of.data(), lo, map ? orow.data() : 0,
                                               xs_.data(), lx, w.data(), M, N, K, nseg, nb,
                                               sf.data()) != 0) break;
            CHECK_EQUAL(0, qt_bf16_matmul_canon_bwd_data_ld_on(PATHS[pi], ob.data(), lob,
                                                               map ? orow.data() : 0, dys.data(),
                                                               lyb, wb.data(), M, K, N, nseg, nb,
                                                               sb.data()));
            vf ef((size_t)(rows * lo), -3.0f), eb((size_t)(rows * lob), 5.0f);
            for (int64_t m = 0; m < M; m++) {
                const int64_t r = map ? (int64_t)orow[(size_t)m] : m;
                memcpy(&ef[(size_t)(r * lo)], &rf[(size_t)(m * N)], (size_t)N * sizeof(float));
                memcpy(&eb[(size_t)(r * lob)], &rbw[(size_t)(m * N)], (size_t)N * sizeof(float));
            }
            char w2[200];
            snprintf(w2, sizeof w2, "%s ld %s map %d", what, PATH_NAME[pi], map);
            CHECK_EQUAL(0, diff(w2, of.data(), ef.data(), of.size(), nan_any));
            CHECK_EQUAL(0, diff(w2, ob.data(), eb.data(), ob.size(), nan_any));
        }
        // the plain strided matmuls (fwd writes, bwd_data adds into +0 here)
        if (nb == 1) {
            vf pf((size_t)(M * lo), -3.0f), pb((size_t)(M * lob), 0.0f);
            CHECK_EQUAL(0, qt_bf16_matmul_fwd_ld_on(PATHS[pi], pf.data(), lo, xs_.data(), lx,
                                                    w.data(), M, N, K));
            CHECK_EQUAL(0, qt_bf16_matmul_bwd_data_ld_on(PATHS[pi], pb.data(), lob, dys.data(),
                                                         lyb, wb.data(), M, K, N));
            // the writing form (+0) + chain over a dx it never reads (filled with -5)
            vf pz((size_t)(M * lob), -5.0f);
            CHECK_EQUAL(0, qt_bf16_matmul_bwd_data_z_ld_on(PATHS[pi], pz.data(), lob, dys.data(),
                                                           lyb, wb.data(), M, K, N));
            for (int64_t m = 0; m < M; m++) {
                CHECK_EQUAL(0, diff(what, &pf[(size_t)(m * lo)], &rf[(size_t)(m * N)], (size_t)N, nan_any));
                CHECK_EQUAL(0, diff(what, &pb[(size_t)(m * lob)], &rbw[(size_t)(m * N)], (size_t)N, nan_any));
                CHECK_EQUAL(0, diff(what, &pz[(size_t)(m * lob)], &rbw[(size_t)(m * N)], (size_t)N, nan_any));
                for (int64_t i = N; i < lo; i++) CHECK(pf[(size_t)(m * lo + i)] == -3.0f);
                for (int64_t i = N; i < lob; i++) CHECK(pb[(size_t)(m * lob + i)] == 0.0f);
                for (int64_t i = N; i < lob; i++) CHECK(pz[(size_t)(m * lob + i)] == -5.0f);
            }
        }
    }
    vf of(no), ob(no);
    qt_bf16_matmul_canon_fwd(of.data(), x.data(), w.data(), M, N, K, nseg, nb, sf.data());
    qt_bf16_matmul_canon_bwd_data(ob.data(), dy.data(), wb.data(), M, K, N, nseg, nb, sb.data());
    CHECK_EQUAL(0, diff(what, of.data(), rf.data(), no, nan_any));
    CHECK_EQUAL(0, diff(what, ob.data(), rbw.data(), no, nan_any));
    qt_bf16_matmul_canon_fwd_ref(of.data(), x.data(), w.data(), M, N, K, nseg, nb, sf.data());
    qt_bf16_matmul_canon_bwd_data_ref(ob.data(), dy.data(), wb.data(), M, K, N, nseg, nb,
                                      sb.data());
    CHECK_EQUAL(0, diff(what, of.data(), rf.data(), no, nan_any));
    CHECK_EQUAL(0, diff(what, ob.data(), rbw.data(), no, nan_any));
    if (nb == 1) { // nb = 1: the plain bf16 matmul's bits (bwd: into +0)
        vf pf(no), pb(no, 0.0f);
        qt_bf16_matmul_fwd(pf.data(), x.data(), w.data(), M, N, K);
        qt_bf16_matmul_bwd_data(pb.data(), dy.data(), wb.data(), M, K, N);
        CHECK_EQUAL(0, diff(what, pf.data(), rf.data(), no, nan_any));
        CHECK_EQUAL(0, diff(what, pb.data(), rbw.data(), no, nan_any));
    }
    for (int64_t P = 2; P <= nb; P *= 2) { // rank t holds blocks [t nb/P, (t+1) nb/P)
        std::vector<vf> yf, yb;
        for (int64_t t = 0; t < P; t++) {
            const int64_t j0 = t * nb / P, j1 = (t + 1) * nb / P;
            const vb xl = take_blocks(x, M, nseg, K / nseg, nb, j0, j1);
            const vb wl = take_blocks(w, N, nseg, K / nseg, nb, j0, j1);
            const vb dyl = take_blocks(dy, M, nseg, K / nseg, nb, j0, j1);
            const vb wbl = take_block_rows(wb, N, nseg, K / nseg, nb, j0, j1);
            vf a(no), b(no);
            qt_bf16_matmul_canon_fwd(a.data(), xl.data(), wl.data(), M, N, K / P, nseg, nb / P,
                                     sf.data());
            qt_bf16_matmul_canon_bwd_data(b.data(), dyl.data(), wbl.data(), M, K / P, N, nseg,
                                          nb / P, sb.data());
            yf.push_back(a), yb.push_back(b);
        }
        const vf tf = tree_ranks(yf), tb = tree_ranks(yb);
        CHECK_EQUAL(0, diff(what, tf.data(), rf.data(), no, nan_any));
        CHECK_EQUAL(0, diff(what, tb.data(), rbw.data(), no, nan_any));
    }
}

} // namespace

TEST_GROUP(Bf16Canon) {};

// Shapes: contraction = nseg * nb * slice with odd and even slices (3, 1, 5, 2, 7), odd
// and even M, N; nb 1..8 (the TP splits P = 2..nb run inside).
TEST(Bf16Canon, MatchesScalarReferencePathsAndSplits)
{
    uint64_t s = 0x5b3c1d2e9f807162ull;
    const int64_t shapes[][5] = {
        {3, 5, 24, 2, 4}, {4, 6, 24, 1, 8}, {5, 7, 8, 1, 8}, {2, 3, 28, 2, 2},
        {7, 9, 10, 2, 1}, {6, 4, 7, 1, 1}, {13, 17, 56, 2, 4}, {1, 33, 40, 1, 8},
        {9, 11, 70, 2, 1}, {12, 32, 64, 2, 8}, {25, 40, 65, 1, 1}, {3, 2, 112, 2, 8},
        // even slices: the fused canonical tiles of the instruction path (edge rows past 12,
        // columns past 32 and past a 256-column panel, nb 2..64, one and two segments)
        {25, 70, 64, 1, 4}, {13, 300, 128, 2, 8}, {40, 33, 96, 2, 2}, {7, 45, 256, 1, 64},
        {1, 1, 4, 1, 2}, {12, 32, 512, 2, 16},
        // the bench model's data gradient over [gate | up] (2f = 512 in two segments, nb 8:
        // blocks of 32 pairs), two full 256-column panels of eight strips, each strip with
        // its own stack of subtotals (block-major tiles), and an edge row panel
        {37, 512, 512, 2, 8},
        // the bench model's forward down projection (f = 256 in one segment, nb 8: blocks of
        // 16 pairs) into d = 512 columns (two 256-column panels), an edge row panel
        {37, 512, 256, 1, 8},
        // the 80B slice's data gradient over [gate | up] (2f = 1024 in two segments, nb 8:
        // blocks of 64 pairs) into d = 2048 columns (eight 256-column panels), a full row
        // panel and an edge row (the output lines fetched at the last block, the next
        // block's A rows while a block's strips run)
        {13, 1024, 2048, 2, 8},
    };
    for (const auto &sh : shapes)
        for (int mode = 0; mode < 3; mode++) canon_case(sh[0], sh[1], sh[2], sh[3], sh[4], &s, mode);
}

namespace {

// ---------------------------------------------------------------- expert FFN
struct Ffn {
    int64_t T, k, E, d, f;
    vb x, wgu, wdn, dy;
    std::vector<int32_t> idx;
    vf dx0;
};

// Token t's k distinct experts from [0, E-1) (expert E-1 never has rows), one row in 7 -1
// and one in 11 E (invalid: skipped).
Ffn make_ffn(int64_t T, int64_t k, int64_t E, int64_t d, int64_t f, uint64_t *s)
{
    Ffn c;
    c.T = T, c.k = k, c.E = E, c.d = d, c.f = f;
    c.x = rbv((size_t)(T * d), s, 2.0f);
    c.wgu = rbv((size_t)(E * 2 * f * d), s, 1.5f / sqrtf((float)d));
    c.wdn = rbv((size_t)(E * d * f), s, 1.5f / sqrtf((float)f));
    c.dy = rbv((size_t)(T * k * d), s, 1.0f);
    c.dx0.resize((size_t)(T * d));
    for (auto &v : c.dx0) v = wid(rb(s, 0.5f)) * 1.0009765625f; // not a bf16 value
    c.idx.resize((size_t)(T * k));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++) {
            int32_t e;
            for (;;) {
                e = (int32_t)(xs(s) % (uint64_t)(E - 1));
                int dup = 0;
                for (int64_t i = 0; i < j; i++) dup |= c.idx[t * k + i] == e;
                if (!dup) break;
            }
            c.idx[t * k + j] = e;
        }
    for (size_t r = 0; r < c.idx.size(); r++) {
        if (r % 7 == 3) c.idx[r] = -1;
        if (r % 11 == 5) c.idx[r] = (int32_t)E;
    }
    return c;
}

bool valid(const Ffn &c, int64_t r) { return c.idx[r] >= 0 && c.idx[r] < c.E; }

// Reference forward: gu = bf16(chain x.W_gu), h = bf16(silu(gate) up), y = chain / tree.
// y rows of invalid experts keep -7, gu rows 0x7777.
void ref_fwd(const Ffn &c, int64_t nb, vf &y, vb &gu)
{
    const int64_t d = c.d, f = c.f, nbb = nb < 1 ? 1 : nb, sl = f / nbb;
    y.assign((size_t)(c.T * c.k * d), -7.0f);
    gu.assign((size_t)(c.T * c.k * 2 * f), 0x7777);
    vb h((size_t)f);
    vf part((size_t)nbb);
    for (int64_t r = 0; r < c.T * c.k; r++) {
        if (!valid(c, r)) continue;
        const int64_t e = c.idx[r], t = r / c.k;
        for (int64_t j = 0; j < 2 * f; j++)
            gu[r * 2 * f + j] = qt_bf16_from_f32(nanfix(chain(
                d, [&](int64_t i) { return wid(c.x[t * d + i]); },
                [&](int64_t i) { return wid(c.wgu[(e * 2 * f + j) * d + i]); })));
        for (int64_t i = 0; i < f; i++)
            h[i] = qt_bf16_from_f32(qt_siluf(wid(gu[r * 2 * f + i])) * wid(gu[r * 2 * f + f + i]));
        for (int64_t o = 0; o < d; o++) {
            for (int64_t j = 0; j < nbb; j++)
                part[j] = nanfix(chain(sl, [&](int64_t i) { return wid(h[j * sl + i]); },
                                       [&](int64_t i) { return wid(c.wdn[(e * d + o) * f + j * sl + i]); }));
            y[r * d + o] = tree(part.data(), nbb);
        }
    }
}

// Reference d(gu) of row r (fp32 dh, the fp32 kernel's formulas, rounded).
void ref_dgu_row(const Ffn &c, const vb &gu, int64_t r, qt_bf16 *dg)
{
    const int64_t d = c.d, f = c.f, e = c.idx[r];
    for (int64_t i = 0; i < f; i++) {
        const float dh = nanfix(0.0f + chain(d, [&](int64_t o) { return wid(c.dy[r * d + o]); },
                                             [&](int64_t o) { return wid(c.wdn[(e * d + o) * f + i]); }));
        const float a = wid(gu[r * 2 * f + i]), u = wid(gu[r * 2 * f + f + i]);
        const float sg = qt_sigmoidf(a);
        dg[i] = qt_bf16_from_f32((dh * u) * (sg * (1.0f + a * (1.0f - sg))));
        dg[f + i] = qt_bf16_from_f32(dh * qt_siluf(a));
    }
}

// Reference backward: dgu rows (0x7777 for invalid rows), dx = dx0 + slot rows in order.
void ref_bwd(const Ffn &c, const vb &gu, int64_t nb, vf &dx, vb &dgu)
{
    const int64_t d = c.d, f = c.f, k = c.k, nbb = nb < 1 ? 1 : nb, sl = f / nbb;
    dgu.assign((size_t)(c.T * k * 2 * f), 0x7777);
    dx = c.dx0;
    vf part((size_t)nbb);
    for (int64_t t = 0; t < c.T; t++)
        for (int64_t slot = 0; slot < k; slot++) {
            const int64_t r = t * k + slot;
            if (!valid(c, r)) continue;
            const int64_t e = c.idx[r];
            qt_bf16 *dg = &dgu[r * 2 * f];
            ref_dgu_row(c, gu, r, dg);
            auto gi = [&](int64_t j, int64_t p) { return (p / sl) * f + j * sl + p % sl; };
            for (int64_t o = 0; o < d; o++) {
                for (int64_t j = 0; j < nbb; j++)
                    part[j] = nanfix(0.0f + chain(2 * sl, [&](int64_t p) { return wid(dg[gi(j, p)]); },
                                                  [&](int64_t p) { return wid(c.wgu[(e * 2 * f + gi(j, p)) * d + o]); }));
                dx[t * d + o] += tree(part.data(), nbb);
            }
        }
}

// Reference wgrad: per expert, one chain over its rows (increasing r) per leaf element.
void ref_wgrad(const Ffn &c, const vb &gu, const vb &dgu, vf &dwg, vf &dwd)
{
    const int64_t d = c.d, f = c.f, k = c.k;
    dwg.assign((size_t)(c.E * 2 * f * d), 0.0f);
    dwd.assign((size_t)(c.E * d * f), 0.0f);
    for (int64_t e = 0; e < c.E; e++) {
        std::vector<int64_t> rows;
        for (int64_t r = 0; r < c.T * k; r++)
            if (c.idx[r] == e) rows.push_back(r);
        const int64_t n = (int64_t)rows.size();
        auto hval = [&](int64_t r, int64_t i) {
            return wid(qt_bf16_from_f32(qt_siluf(wid(gu[r * 2 * f + i])) * wid(gu[r * 2 * f + f + i])));
        };
        for (int64_t o = 0; o < d; o++)
            for (int64_t i = 0; i < f; i++)
                dwd[(e * d + o) * f + i] = nanfix(0.0f + chain(n, [&](int64_t m) { return wid(c.dy[rows[m] * d + o]); },
                                                               [&](int64_t m) { return hval(rows[m], i); }));
        for (int64_t j = 0; j < 2 * f; j++)
            for (int64_t o = 0; o < d; o++)
                dwg[(e * 2 * f + j) * d + o] = nanfix(0.0f + chain(n, [&](int64_t m) { return wid(dgu[rows[m] * 2 * f + j]); },
                                                                   [&](int64_t m) { return wid(c.x[rows[m] / k * d + o]); }));
    }
}

// Scratch sizes (floats) {fwd, bwd, wgrad}: the plan's rules (bwd: expert-major); the
// bwd just below its expert-major need (slot-major); small ones (a few rows a chunk; the
// wgrad's cap 3 and 5 rows, so an expert's rows exceed it and its chains continue across
// chunks of 2 and 4 rows, the last one odd or even).
struct Sizes {
    int64_t fwd, bwd, wgrad;
};

std::vector<Sizes> scratch_sizes(const Ffn &c, int64_t nb)
{
    const int64_t R = c.T * c.k, d = c.d, f = c.f, nbg = nb > 0 ? nb : 1;
    int64_t esz = R * (d + f);
    if (c.T * (d + 3 * f) > esz) esz = c.T * (d + 3 * f);
    const int64_t bsz = R * (d + 3 * f + nbg * d + 2 * f / nbg) + R + c.E + 1 + R * d +
                        d * (2 * f / nbg);
    const int64_t head = R + c.E + 1 + R * d + d * (2 * f / nbg);
    const int64_t small = 3 * (2 * d + 4 * f + nbg * d + 2 * f / nbg + 2) + 2 * d * f + 2 * d;
    const int64_t wrow = 1 + (d + 1) / 2 + (f + 1) / 2 + 2 * f, wfix = 2 * (d > f ? d : f);
    return {{esz, bsz > esz ? bsz : esz, esz},
            {esz, head, esz},
            {small, small, wfix + 3 * wrow},
            {small, small, wfix + 5 * wrow + wrow / 2}};
}

// A tree level's value: about 1, or (one in 8) an infinity, +-FLT_MAX, a signed zero or a
// denormal (no NaN: test_bf16.cpp's level_value says why).
float level_value(uint64_t *s)
{
    static const uint32_t sp[] = {0x7f7fffffu, 0xff7ffffeu, 0x7f800000u, 0xff800000u,
                                  0x80000000u, 0x00000000u, 0x00000003u, 0x807fffffu};
    const uint64_t r = xs(s);
    if (r % 8 == 0) return qt_bf16_f32_bits(sp[(r >> 8) % 8]);
    return (float)((double)(int64_t)(r >> 11) * 0x1p-52 - 1.0);
}

// (f) on one path (-1: the build's default): the leaves lg, ld (written by the same path)
// pushed with qt_tree_push into levels of random values as leaf 2^n - 1 (n addends) against
// the carries stored by the kernel, on the whole level buffers.
void ffn_carry_case(const char *what, int path, const Ffn &c, const vb &gu, const qt_bf16 *dgu,
                    vf &sc, int64_t wscr, const vf &lg, const vf &ld, int32_t n, uint64_t *s)
{
    const int64_t ng = (int64_t)lg.size(), nd = (int64_t)ld.size(), leaf = (1 << n) - 1;
    vf rg((size_t)((n + 1) * ng)), rd((size_t)((n + 1) * nd));
    for (auto &v : rg) v = level_value(s);
    for (auto &v : rd) v = level_value(s);
    vf fg(rg), fd(rd);
    float *lrg[4], *lrd[4], *lfg[4], *lfd[4];
    for (int32_t l = 0; l <= n; l++) {
        lrg[l] = rg.data() + l * ng, lrd[l] = rd.data() + l * nd;
        lfg[l] = fg.data() + l * ng, lfd[l] = fd.data() + l * nd;
    }
    qt_tree_push(lrg, 0, ng, lg.data(), leaf);
    qt_tree_push(lrd, 0, nd, ld.data(), leaf);
    qt_leaf_carry cg, cd;
    CHECK(qt_tree_carry(lfg, 0, leaf, &cg));
    CHECK(qt_tree_carry(lfd, 0, leaf, &cd));
    LONGS_EQUAL(n, cg.n);
    if (path >= 0)
        CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_carry_on(path, &cg, &cd, c.dy.data(), c.x.data(), c.idx.data(), gu.data(), dgu, c.wdn.data(), sc.data(), c.T, c.k, c.E, c.d, c.f, wscr));
    else
        CHECK_EQUAL(1, qt_bf16_expert_ffn_wgrad_carry(&cg, &cd, c.dy.data(), c.x.data(), c.idx.data(), gu.data(), dgu, c.wdn.data(), sc.data(), c.T, c.k, c.E, c.d, c.f, wscr));
    char w2[260];
    snprintf(w2, sizeof w2, "%s carry n%d %s", what, (int)n, dgu ? "saved" : "recomputed");
    CHECK_EQUAL(0, diff(w2, fg.data(), rg.data(), fg.size()));
    CHECK_EQUAL(0, diff(w2, fd.data(), rd.data(), fd.size()));
}

// (g) the leaves of one call at once (qt_bf16_expert_ffn_wgrad_leaves: expert-major) against
// the same leaves one by one (leaf first + j of the T tokens split into L sequences of T / L:
// an even leaf written into level 0, an odd one by its carry), on level buffers holding
// random values (stale levels included): every level equal, 0 ulp.
void ffn_leaves_case(const char *what, int path, const Ffn &c, const vb &gu, const qt_bf16 *dgu,
                     vf &sc, int64_t wscr, int32_t L, int64_t first, uint64_t *s)
{
    const int64_t d = c.d, f = c.f, k = c.k, E = c.E, S = c.T / L;
    const int64_t ng = E * 2 * f * d, nd = E * d * f;
    const int32_t nl = 4; // levels: leaves first .. first + L - 1 <= 7
    vf rg((size_t)(nl * ng)), rd((size_t)(nl * nd));
    for (auto &v : rg) v = level_value(s);
    for (auto &v : rd) v = level_value(s);
    vf fg(rg), fd(rd);
    float *lrg[nl], *lrd[nl], *lfg[nl], *lfd[nl];
    for (int32_t l = 0; l < nl; l++) {
        lrg[l] = rg.data() + l * ng, lrd[l] = rd.data() + l * nd;
        lfg[l] = fg.data() + l * ng, lfd[l] = fd.data() + l * nd;
    }
    std::vector<qt_bf16_ffn_leaf> lv((size_t)L);
    std::vector<qt_leaf_carry> cy((size_t)(2 * L));
    for (int32_t j = 0; j < L; j++) {
        const int64_t t0 = j * S, leaf = first + j;
        const qt_bf16 *dyj = c.dy.data() + t0 * k * d, *xj = c.x.data() + t0 * d,
                      *guj = gu.data() + t0 * k * 2 * f, *dguj = dgu ? dgu + t0 * k * 2 * f : nullptr;
        const int32_t *idj = c.idx.data() + t0 * k;
        qt_leaf_carry cg, cd;
        if (qt_tree_carry(lrg, 0, leaf, &cg)) { // the reference: one call per leaf
            CHECK(qt_tree_carry(lrd, 0, leaf, &cd));
            CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_carry_on(path, &cg, &cd, dyj, xj, idj, guj, dguj, c.wdn.data(), sc.data(), S, k, E, d, f, wscr));
        } else {
            CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_on(path, lrg[0], lrd[0], dyj, xj, idj, guj, dguj, c.wdn.data(), sc.data(), S, k, E, d, f, wscr));
        }
        qt_bf16_ffn_leaf &l = lv[(size_t)j];
        l.dy = dyj, l.x = xj, l.gu = guj, l.dgu = dguj, l.idx = idj, l.T = S, l.k = k;
        l.dw_gu = l.dw_down = nullptr, l.c_gu = l.c_down = nullptr;
        if (qt_tree_carry(lfg, 0, leaf, &cy[(size_t)(2 * j)])) {
            CHECK(qt_tree_carry(lfd, 0, leaf, &cy[(size_t)(2 * j + 1)]));
            l.c_gu = &cy[(size_t)(2 * j)], l.c_down = &cy[(size_t)(2 * j + 1)];
        } else {
            l.dw_gu = lfg[0], l.dw_down = lfd[0];
        }
    }
    CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_leaves_on(path, lv.data(), L, c.wdn.data(), sc.data(), E, d, f, wscr));
    char w2[260];
    snprintf(w2, sizeof w2, "%s leaves L%d first %lld %s", what, (int)L, (long long)first, dgu ? "saved" : "recomputed");
    CHECK_EQUAL(0, diff(w2, fg.data(), rg.data(), fg.size()));
    CHECK_EQUAL(0, diff(w2, fd.data(), rd.data(), fd.size()));
}

void ffn_case(int64_t T, int64_t k, int64_t E, int64_t d, int64_t f, int64_t nb, uint64_t *s)
{
    char what[200];
    const Ffn c = make_ffn(T, k, E, d, f, s);
    vf ry, rdx, rdwg, rdwd;
    vb rgu, rdgu;
    ref_fwd(c, nb, ry, rgu);
    ref_bwd(c, rgu, nb, rdx, rdgu);
    ref_wgrad(c, rgu, rdgu, rdwg, rdwd);
    for (const Sizes &sz : scratch_sizes(c, nb))
        for (int pi = 0; pi < 5; pi++) { // the four paths, then the build's default
            snprintf(what, sizeof what,
                     "ffn T%lld k%lld E%lld d%lld f%lld nb%lld scratch %lld/%lld/%lld %s",
                     (long long)T, (long long)k, (long long)E, (long long)d, (long long)f,
                     (long long)nb, (long long)sz.fwd, (long long)sz.bwd, (long long)sz.wgrad,
                     pi < 4 ? PATH_NAME[pi] : "default");
            const int path = pi < 4 ? PATHS[pi] : qt_bf16_mm_path();
            if (!qt_bf16_path_built(path)) continue;
            vf sc((size_t)(sz.fwd > sz.bwd ? sz.fwd : sz.bwd) + (size_t)sz.wgrad), y((size_t)(T * k * d), -7.0f), dx(c.dx0);
            vb gu((size_t)(T * k * 2 * f), 0x7777), dgu((size_t)(T * k * 2 * f), 0x7777);
            vf dwg((size_t)(E * 2 * f * d), 9.0f), dwd((size_t)(E * d * f), 9.0f);
            vf dwg2(dwg), dwd2(dwd);
            if (pi < 4) {
                CHECK_EQUAL(0, qt_bf16_expert_ffn_fwd_on(path, y.data(), gu.data(), c.x.data(), c.idx.data(), c.wgu.data(), c.wdn.data(), sc.data(), T, k, E, d, f, sz.fwd, nb));
                CHECK_EQUAL(0, qt_bf16_expert_ffn_bwd_on(path, dx.data(), dgu.data(), c.dy.data(), c.idx.data(), gu.data(), c.wgu.data(), c.wdn.data(), sc.data(), T, k, E, d, f, sz.bwd, nb));
                CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_on(path, dwg.data(), dwd.data(), c.dy.data(), c.x.data(), c.idx.data(), gu.data(), dgu.data(), c.wdn.data(), sc.data(), T, k, E, d, f, sz.wgrad));
                CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_on(path, dwg2.data(), dwd2.data(), c.dy.data(), c.x.data(), c.idx.data(), gu.data(), nullptr, c.wdn.data(), sc.data(), T, k, E, d, f, sz.wgrad));
            } else {
                qt_bf16_expert_ffn_fwd(y.data(), gu.data(), c.x.data(), c.idx.data(), c.wgu.data(), c.wdn.data(), sc.data(), T, k, E, d, f, sz.fwd, nb);
                qt_bf16_expert_ffn_bwd(dx.data(), dgu.data(), c.dy.data(), c.idx.data(), gu.data(), c.wgu.data(), c.wdn.data(), sc.data(), T, k, E, d, f, sz.bwd, nb);
                qt_bf16_expert_ffn_wgrad(dwg.data(), dwd.data(), c.dy.data(), c.x.data(), c.idx.data(), gu.data(), dgu.data(), c.wdn.data(), sc.data(), T, k, E, d, f, sz.wgrad);
                qt_bf16_expert_ffn_wgrad(dwg2.data(), dwd2.data(), c.dy.data(), c.x.data(), c.idx.data(), gu.data(), nullptr, c.wdn.data(), sc.data(), T, k, E, d, f, sz.wgrad);
            }
            CHECK_EQUAL(0, diff(what, y.data(), ry.data(), y.size()));
            CHECK_EQUAL(0, diffb(what, gu.data(), rgu.data(), gu.size()));
            CHECK_EQUAL(0, diff(what, dx.data(), rdx.data(), dx.size()));
            CHECK_EQUAL(0, diffb(what, dgu.data(), rdgu.data(), dgu.size()));
            CHECK_EQUAL(0, diff(what, dwg.data(), rdwg.data(), dwg.size()));
            CHECK_EQUAL(0, diff(what, dwd.data(), rdwd.data(), dwd.size()));
            // (c) saved dgu and recomputed dgu: the same leaves
            CHECK_EQUAL(0, diff(what, dwg2.data(), rdwg.data(), dwg2.size()));
            CHECK_EQUAL(0, diff(what, dwd2.data(), rdwd.data(), dwd2.size()));
            // (f) the carry, 1..3 addends, saved and recomputed dgu
            for (int32_t n = 1; n <= 3; n++)
                ffn_carry_case(what, pi < 4 ? path : -1, c, gu, n == 2 ? nullptr : dgu.data(),
                               sc, sz.wgrad, dwg, dwd, n, s);
            // (g) every leaf at once: 2..4 sequences starting at an even and an odd leaf
            for (int32_t L = 2; L <= 4 && pi < 4; L++)
                if (T % L == 0)
                    for (int64_t first = 0; first <= 3; first += 3)
                        ffn_leaves_case(what, path, c, gu, L == 3 ? nullptr : dgu.data(), sc,
                                        sz.wgrad, L, first, s);
        }
    // (f) a scratch below a pair of rows, with an expert of more than one row: refused,
    // nothing written
    const int64_t wfix = 2 * (d > f ? d : f), wrow = 1 + (d + 1) / 2 + (f + 1) / 2 + 2 * f;
    int64_t most = 0;
    for (int32_t e = 0; e < E; e++) {
        int64_t ne = 0;
        for (int64_t r = 0; r < T * k; r++) ne += c.idx[r] == e;
        most = ne > most ? ne : most;
    }
    if (most > 1) {
        vf sc((size_t)(wfix + wrow)), g((size_t)(2 * E * 2 * f * d), 5.0f), dd((size_t)(2 * E * d * f), 5.0f);
        float *lg[2] = {g.data(), g.data() + E * 2 * f * d}, *ld[2] = {dd.data(), dd.data() + E * d * f};
        qt_leaf_carry cg, cd;
        CHECK(qt_tree_carry(lg, 0, 1, &cg));
        CHECK(qt_tree_carry(ld, 0, 1, &cd));
        CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_carry(&cg, &cd, c.dy.data(), c.x.data(), c.idx.data(), rgu.data(), rdgu.data(), c.wdn.data(), sc.data(), T, k, E, d, f, wfix + wrow));
        for (float v : g) CHECK(v == 5.0f);
        for (float v : dd) CHECK(v == 5.0f);
    }
}

} // namespace

TEST_GROUP(Bf16Ffn) {};

// (a), (b), (c): shapes {T, k, E, d, f, nb}; odd and even d, f, T; d = 1024 and f = 512 (the
// padded row strides of the gathered rows); f/nb odd slices
// (f = 6, nb = 2; f = 20, nb = 4; f = 12, nb = 4); k = 1, 2, 4; E - 1 used experts, so the
// last never has rows (and with T*k small some others neither).
TEST(Bf16Ffn, MatchesScalarReferenceOnEveryPath)
{
    uint64_t s = 0x1f2e3d4c5b6a7988ull;
    const int64_t shapes[][6] = {
        {5, 1, 3, 7, 6, 0}, {6, 2, 4, 8, 8, 2}, {7, 4, 6, 9, 12, 4}, {4, 2, 5, 16, 4, 1},
        {9, 2, 3, 5, 10, 2}, {3, 4, 8, 6, 8, 4}, {11, 1, 2, 13, 6, 2}, {8, 2, 9, 33, 20, 4},
        {13, 4, 7, 12, 5, 0}, {16, 2, 3, 40, 24, 2},
        // widths of a multiple of 1024 (d; 2f): the gathered rows padded by a line
        {6, 2, 3, 1024, 6, 2}, {16, 2, 3, 64, 512, 4}, {3, 1, 2, 1024, 512, 0},
    };
    for (const auto &sh : shapes) ffn_case(sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], &s);
}

namespace {

// Rank t of P of a tensor-parallel split of f: W_gu[e] gate rows [t fl, (t+1) fl) and up
// rows [f + t fl, f + (t+1) fl), W_down[e] columns [t fl, (t+1) fl).
Ffn rank_of(const Ffn &c, int64_t P, int64_t t)
{
    Ffn r = c;
    const int64_t f = c.f, fl = f / P, d = c.d;
    r.f = fl;
    r.wgu.assign((size_t)(c.E * 2 * fl * d), 0);
    r.wdn.assign((size_t)(c.E * d * fl), 0);
    for (int64_t e = 0; e < c.E; e++) {
        for (int64_t part = 0; part < 2; part++)
            for (int64_t i = 0; i < fl; i++)
                for (int64_t o = 0; o < d; o++)
                    r.wgu[((e * 2 + part) * fl + i) * d + o] =
                        c.wgu[(e * 2 * f + part * f + t * fl + i) * d + o];
        for (int64_t o = 0; o < d; o++)
            for (int64_t i = 0; i < fl; i++)
                r.wdn[(e * d + o) * fl + i] = c.wdn[(e * d + o) * f + t * fl + i];
    }
    return r;
}

struct Run {
    vf y, dx;
    vb gu, dgu;
};

// fwd then bwd (dx from +0) on the build's path with the plan's scratch sizes.
Run run_ffn(const Ffn &c, int64_t nb)
{
    const int64_t R = c.T * c.k;
    const Sizes sz = scratch_sizes(c, nb)[0];
    Run o;
    vf sc((size_t)(sz.bwd > sz.fwd ? sz.bwd : sz.fwd));
    o.y.assign((size_t)(R * c.d), 0.0f), o.dx.assign((size_t)(c.T * c.d), 0.0f);
    o.gu.assign((size_t)(R * 2 * c.f), 0), o.dgu.assign((size_t)(R * 2 * c.f), 0);
    qt_bf16_expert_ffn_fwd(o.y.data(), o.gu.data(), c.x.data(), c.idx.data(), c.wgu.data(),
                           c.wdn.data(), sc.data(), c.T, c.k, c.E, c.d, c.f, sz.fwd, nb);
    qt_bf16_expert_ffn_bwd(o.dx.data(), o.dgu.data(), c.dy.data(), c.idx.data(), o.gu.data(),
                           c.wgu.data(), c.wdn.data(), sc.data(), c.T, c.k, c.E, c.d, c.f,
                           sz.bwd, nb);
    return o;
}

} // namespace

// (d) f split over P ranks (canonical nb, each rank nb/P): every rank's gu and dgu are the
// one-rank columns bit for bit; the ranks' y rows, added by the pairwise tree over ranks,
// are the one-rank y bits; with k = 1 the same holds for the dx partials (each rank adds
// its partial row into a zero dx, then the tree over ranks). With k > 1 a rank sums its
// slots before the ranks are added, which is another order than one rank's (ranks, then
// slots): the test counts those differences and prints them (not asserted).
TEST(Bf16Ffn, TensorParallelSplitOfF)
{
    uint64_t s = 0x77aa55cc33ee1100ull;
    const int64_t shapes[][6] = {
        {6, 1, 4, 9, 8, 2}, {7, 1, 5, 12, 12, 4}, {5, 1, 6, 7, 20, 4}, {8, 1, 3, 10, 6, 2},
        {9, 2, 4, 11, 16, 4}, {6, 4, 6, 8, 8, 8},
    };
    for (const auto &sh : shapes) {
        const Ffn c = make_ffn(sh[0], sh[1], sh[2], sh[3], sh[4], &s);
        const int64_t nb = sh[5], R = c.T * c.k, d = c.d, f = c.f;
        const Run one = run_ffn(c, nb);
        for (int64_t P = 2; P <= nb && P <= 4; P *= 2) {
            const int64_t fl = f / P;
            std::vector<vf> ys, dxs;
            for (int64_t t = 0; t < P; t++) {
                const Run rk = run_ffn(rank_of(c, P, t), nb / P);
                for (int64_t r = 0; r < R; r++)
                    for (int64_t part = 0; part < 2; part++)
                        for (int64_t i = 0; i < fl; i++) {
                            const size_t a = (size_t)(r * 2 * fl + part * fl + i);
                            const size_t b = (size_t)(r * 2 * f + part * f + t * fl + i);
                            CHECK_EQUAL(one.gu[b], rk.gu[a]);
                            CHECK_EQUAL(one.dgu[b], rk.dgu[a]);
                        }
                ys.push_back(rk.y), dxs.push_back(rk.dx);
            }
            const vf y = tree_ranks(ys), dx = tree_ranks(dxs);
            for (int64_t r = 0; r < R; r++)
                if (valid(c, r)) CHECK_EQUAL(0, diff("tp y", &y[r * d], &one.y[r * d], (size_t)d));
            if (c.k == 1) {
                CHECK_EQUAL(0, diff("tp dx", dx.data(), one.dx.data(), dx.size()));
            } else {
                int64_t nd = 0;
                for (size_t i = 0; i < dx.size(); i++) nd += bits(dx[i]) != bits(one.dx[i]);
                printf("\n  tp dx k=%lld P=%lld: %lld of %zu elements differ from one rank "
                       "(rank-local slot sums)", (long long)c.k, (long long)P, (long long)nd,
                       dx.size());
            }
        }
    }
}

// (e) float64 sanity on T = 24, k = 2, E = 5, d = 96, f = 40, nb = 2, against double
// computations from the same bf16 inputs (x, weights, dy; the kernel's stored gu and dgu
// where a step's input is the stored tensor). Tolerances, each with its reason:
//  gu: 2^-8 |g| + (d+4) 2^-24 sum|x w|: one bf16 rounding (2^-9 relative) of an fp32 chain
//      (the chain bound (P+2) 2^-24 sum|a b| of docs/precision.md);
//  y (from x, all in double, no intermediate rounding): 2^-7 sum_i |w_i| (|a_i u_i| + |h_i|):
//      gate/up rounded (2^-9 relative; silu' <= 1.1) and h rounded (2^-9 |h|), doubled for
//      the fp32 chains and silu;
//  dx (dgu from double dh and the stored gu): 2^-7 sum |dgu w| + 2^-16 sum_j |w_j|
//      (|u| + |a| + 1) sum_o |dy w|: dgu rounded (2^-9) plus the fp32 dh chain's error
//      (<= (d+2) 2^-24 sum|dy w| << 2^-16) carried by the SwiGLU derivative;
//  dW_down (h in double from the stored gu): 2^-8 sum |dy h|: h rounded (2^-9);
//  dW_gu (from the stored dgu): the plain chain bound (n+2) 2^-24 sum |dgu x|.
// The weight gradient's matmuls with dy^T / dgu^T packed once into the scratch past the
// chunk's rows (qt_bf16_matmul_wgrad_ws_on; the 80B slice: 8 and 2 column panels) against
// the vector emulation (which packs per panel and is checked against the reference in (a)),
// 0 ulp: about 535 rows an expert (two contraction blocks, the last short), dW_gu 528 x 300
// and dW_down 300 x 264 (several row blocks and column panels, the last short); 4x the
// plan's scratch (both packed once), the plan's (dW_down packed once) and one whose free
// tail is too short for the largest expert (it packs per panel),
// saved and recomputed dgu, written and carried, and the leaves of a call (2 sequences).
TEST(Bf16Ffn, WgradPackedOnceEqualsTheEmulation)
{
    uint64_t s = 0x5ac4ed0cefa11ull;
    const int64_t T = 700, k = 2, E = 3, d = 300, f = 264, R = T * k;
    const Ffn c = make_ffn(T, k, E, d, f, &s);
    int emul = QT_BF16_PATH_WIDE;
    if (!qt_bf16_path_built(QT_BF16_PATH_INSN)) return;
    if (!qt_bf16_path_built(emul)) emul = QT_BF16_PATH_EMUL;
    const vb gu = rbv((size_t)(R * 2 * f), &s, 2.0f), dgu = rbv((size_t)(R * 2 * f), &s, 1.0f);
    int64_t most = 0;
    for (int32_t e = 0; e < E; e++) {
        int64_t ne = 0;
        for (int64_t r = 0; r < R; r++) ne += c.idx[(size_t)r] == e;
        most = ne > most ? ne : most;
    }
    CHECK(most > 512);
    const int64_t wrow = 1 + (d + 1) / 2 + (f + 1) / 2 + 2 * f, wfix = 2 * (d > f ? d : f);
    const int64_t plan = scratch_sizes(c, 0)[0].wgrad, sizes[3] = {4 * plan, plan, wfix + most * wrow + 100};
    const int64_t ng = E * 2 * f * d, nd = E * d * f;
    char what[160];
    for (int64_t wscr : sizes)
        for (int saved = 0; saved < 2; saved++) {
            const qt_bf16 *dg = saved ? dgu.data() : nullptr;
            vf sc((size_t)wscr);
            vf ig((size_t)ng, 9.0f), id((size_t)nd, 9.0f), eg(ig), ed(id);
            snprintf(what, sizeof what, "wgrad packed once scratch %lld %s", (long long)wscr,
                     saved ? "saved" : "recomputed");
            CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_on(QT_BF16_PATH_INSN, ig.data(), id.data(), c.dy.data(), c.x.data(), c.idx.data(), gu.data(), dg, c.wdn.data(), sc.data(), T, k, E, d, f, wscr));
            CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_on(emul, eg.data(), ed.data(), c.dy.data(), c.x.data(), c.idx.data(), gu.data(), dg, c.wdn.data(), sc.data(), T, k, E, d, f, wscr));
            CHECK_EQUAL(0, diff(what, ig.data(), eg.data(), ig.size()));
            CHECK_EQUAL(0, diff(what, id.data(), ed.data(), id.size()));
            // the carry (one addend; stale level values), both paths
            vf lv((size_t)(2 * (ng + nd)));
            for (auto &v : lv) v = level_value(&s);
            vf lw(lv);
            for (int pi = 0; pi < 2; pi++) {
                float *b = pi ? lw.data() : lv.data();
                qt_leaf_carry cg, cd;
                cg.n = 1, cg.add[0] = b, cg.dst = b + ng;
                cd.n = 1, cd.add[0] = b + 2 * ng, cd.dst = b + 2 * ng + nd;
                CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_carry_on(pi ? emul : QT_BF16_PATH_INSN, &cg, &cd, c.dy.data(), c.x.data(), c.idx.data(), gu.data(), dg, c.wdn.data(), sc.data(), T, k, E, d, f, wscr));
            }
            CHECK_EQUAL(0, diff(what, lv.data(), lw.data(), lv.size()));
            // the leaves of two sequences (leaf 0 written, leaf 1 carried onto it)
            for (int pi = 0; pi < 2; pi++) {
                float *b = pi ? lw.data() : lv.data();
                qt_leaf_carry cg, cd;
                cg.n = 1, cg.add[0] = b, cg.dst = b + ng;
                cd.n = 1, cd.add[0] = b + 2 * ng, cd.dst = b + 2 * ng + nd;
                qt_bf16_ffn_leaf l2[2];
                for (int j = 0; j < 2; j++) {
                    const int64_t t0 = j * (T / 2);
                    l2[j].dy = c.dy.data() + t0 * k * d, l2[j].x = c.x.data() + t0 * d;
                    l2[j].gu = gu.data() + t0 * k * 2 * f, l2[j].dgu = dg ? dg + t0 * k * 2 * f : nullptr;
                    l2[j].idx = c.idx.data() + t0 * k, l2[j].T = T / 2, l2[j].k = k;
                    l2[j].dw_gu = j ? nullptr : b, l2[j].dw_down = j ? nullptr : b + 2 * ng;
                    l2[j].c_gu = j ? &cg : nullptr, l2[j].c_down = j ? &cd : nullptr;
                }
                CHECK_EQUAL(0, qt_bf16_expert_ffn_wgrad_leaves_on(pi ? emul : QT_BF16_PATH_INSN, l2, 2, c.wdn.data(), sc.data(), E, d, f, wscr));
            }
            CHECK_EQUAL(0, diff(what, lv.data(), lw.data(), lv.size()));
        }
}

TEST(Bf16Ffn, Float64Sanity)
{
    uint64_t s = 0x0123456789abcdefull;
    const int64_t T = 24, k = 2, E = 5, d = 96, f = 40, nb = 2, R = T * k;
    const Ffn c = make_ffn(T, k, E, d, f, &s);
    const Run o = run_ffn(c, nb);
    vf sc((size_t)scratch_sizes(c, nb)[0].wgrad), dwg((size_t)(E * 2 * f * d)), dwd((size_t)(E * d * f));
    qt_bf16_expert_ffn_wgrad(dwg.data(), dwd.data(), c.dy.data(), c.x.data(), c.idx.data(),
                             o.gu.data(), o.dgu.data(), c.wdn.data(), sc.data(), T, k, E, d, f,
                             (int64_t)sc.size());
    auto W = [](qt_bf16 h) { return (double)wid(h); };
    auto silu = [](double a) { return a / (1.0 + exp(-a)); };
    std::vector<double> dx64(c.dx0.size(), 0.0), dxtol(c.dx0.size(), 0.0);
    std::vector<double> dwd64(dwd.size(), 0.0), dwdm(dwd.size(), 0.0), dwg64(dwg.size(), 0.0),
        dwgm(dwg.size(), 0.0), ne((size_t)E, 0.0);
    for (int64_t r = 0; r < R; r++) {
        if (!valid(c, r)) continue;
        const int64_t e = c.idx[r], t = r / k;
        ne[e] += 1;
        std::vector<double> a((size_t)f), u((size_t)f), h((size_t)f), sh((size_t)f), dg((size_t)(2 * f)), q((size_t)(2 * f));
        for (int64_t j = 0; j < 2 * f; j++) { // gu
            double g = 0, m = 0;
            for (int64_t i = 0; i < d; i++) {
                const double p = W(c.x[t * d + i]) * W(c.wgu[(e * 2 * f + j) * d + i]);
                g += p, m += fabs(p);
            }
            const double tol = 0x1p-8 * fabs(g) + (double)(d + 4) * 0x1p-24 * m;
            if (!(fabs(W(o.gu[r * 2 * f + j]) - g) <= tol))
                FAIL(StringFromFormat("gu r%lld j%lld: %.9g vs %.17g", (long long)r, (long long)j, W(o.gu[r * 2 * f + j]), g).asCharString());
            (j < f ? a[j] : u[j - f]) = g;
        }
        for (int64_t i = 0; i < f; i++) {
            h[i] = silu(a[i]) * u[i];
            const double as = W(o.gu[r * 2 * f + i]), us = W(o.gu[r * 2 * f + f + i]);
            sh[i] = silu(as) * us; // h from the stored gu
        }
        for (int64_t oo = 0; oo < d; oo++) { // y
            double yv = 0, m = 0;
            for (int64_t i = 0; i < f; i++) {
                const double w = W(c.wdn[(e * d + oo) * f + i]);
                yv += h[i] * w, m += fabs(w) * (fabs(a[i] * u[i]) + fabs(h[i]));
            }
            if (!(fabs((double)o.y[r * d + oo] - yv) <= 0x1p-7 * m))
                FAIL(StringFromFormat("y r%lld o%lld: %.9g vs %.17g (tol %.3g)", (long long)r, (long long)oo, (double)o.y[r * d + oo], yv, 0x1p-7 * m).asCharString());
        }
        for (int64_t i = 0; i < f; i++) { // dgu from double dh and the stored gu
            double dh = 0, m = 0;
            for (int64_t oo = 0; oo < d; oo++) {
                const double p = W(c.dy[r * d + oo]) * W(c.wdn[(e * d + oo) * f + i]);
                dh += p, m += fabs(p);
            }
            const double as = W(o.gu[r * 2 * f + i]), us = W(o.gu[r * 2 * f + f + i]);
            const double sg = 1.0 / (1.0 + exp(-as));
            dg[i] = dh * us * sg * (1.0 + as * (1.0 - sg)), dg[f + i] = dh * silu(as);
            q[i] = q[f + i] = (fabs(us) + fabs(as) + 1.0) * m;
        }
        for (int64_t oo = 0; oo < d; oo++)
            for (int64_t j = 0; j < 2 * f; j++) {
                const double w = W(c.wgu[(e * 2 * f + j) * d + oo]);
                dx64[t * d + oo] += dg[j] * w;
                dxtol[t * d + oo] += 0x1p-7 * fabs(dg[j] * w) + 0x1p-16 * fabs(w) * q[j];
            }
        for (int64_t oo = 0; oo < d; oo++)
            for (int64_t i = 0; i < f; i++) {
                const double p = W(c.dy[r * d + oo]) * sh[i];
                dwd64[(e * d + oo) * f + i] += p, dwdm[(e * d + oo) * f + i] += fabs(p);
            }
        for (int64_t j = 0; j < 2 * f; j++)
            for (int64_t oo = 0; oo < d; oo++) {
                const double p = W(o.dgu[r * 2 * f + j]) * W(c.x[t * d + oo]);
                dwg64[(e * 2 * f + j) * d + oo] += p, dwgm[(e * 2 * f + j) * d + oo] += fabs(p);
            }
    }
    for (size_t i = 0; i < dx64.size(); i++)
        if (!(fabs((double)o.dx[i] - dx64[i]) <= dxtol[i]))
            FAIL(StringFromFormat("dx [%zu]: %.9g vs %.17g (tol %.3g)", i, (double)o.dx[i], dx64[i], dxtol[i]).asCharString());
    for (size_t i = 0; i < dwd.size(); i++)
        if (!(fabs((double)dwd[i] - dwd64[i]) <= 0x1p-8 * dwdm[i]))
            FAIL(StringFromFormat("dW_down [%zu]: %.9g vs %.17g", i, (double)dwd[i], dwd64[i]).asCharString());
    for (size_t i = 0; i < dwg.size(); i++) {
        const double n = ne[i / (size_t)(2 * f * d)];
        if (!(fabs((double)dwg[i] - dwg64[i]) <= (n + 2) * 0x1p-24 * dwgm[i]))
            FAIL(StringFromFormat("dW_gu [%zu]: %.9g vs %.17g", i, (double)dwg[i], dwg64[i]).asCharString());
    }
}

// Every block chain ends at -0 (each product a negative value below the normal range,
// flushed): the data gradient's block partials are (+0) + chain = +0, so the canonical total
// is +0 on every path (without the (+0) the tree would add -0s into -0).
TEST(Bf16Canon, DataGradientBlocksEndingAtMinusZero)
{
    const int64_t M = 13, K = 64, N = 40, nseg = 2, nb = 8;
    const vb dy((size_t)(M * K), qt_bf16_from_f32(-0x1p-70f)), wb((size_t)(K * N), qt_bf16_from_f32(0x1p-70f));
    vf sb((size_t)QT_CANON_BWD_SCRATCH(M, K, N, nb));
    for (int pi = 0; pi < 4; pi++) {
        vf ob((size_t)(M * N), -5.0f);
        if (qt_bf16_matmul_canon_bwd_data_on(PATHS[pi], ob.data(), dy.data(), wb.data(), M, K, N,
                                             nseg, nb, sb.data()) != 0)
            continue;
        for (size_t i = 0; i < ob.size(); i++) LONGS_EQUAL(0x00000000u, bits(ob[i]));
    }
}

// One block of every output holds a NaN (a quiet NaN with a payload, 0xffe5, in one column
// of dy and one row of x): that block's partial is the canonical 0x7fc00000 and no NaN meets
// another in the tree, so every path's total is exactly 0x7fc00000 (the fused tile's finish
// by VFIXUPIMMPS: a response keeping the chain's NaN, e.g. QNaN(src), fails here; the random
// shapes above compare NaNs as NaNs, and a block partial's NaN there often meets another).
TEST(Bf16Canon, OneNaNBlockGivesTheCanonicalNaN)
{
    const int64_t M = 13, K = 128, N = 40, nseg = 2, nb = 8; // sl 8: blocks of 8 pairs
    uint64_t s = 0x2f6e1d0c3b4a5968ull;
    vb dy = rbv((size_t)(M * K), &s, 1.0f), x = rbv((size_t)(M * K), &s, 1.0f);
    const vb w = rbv((size_t)(K * N), &s, 1.0f);
    for (int64_t m = 0; m < M; m++) dy[(size_t)(m * K + 70)] = 0xffe5; // segment 1, block 0
    for (int64_t i = 0; i < K; i++) x[(size_t)(5 * K + i)] = i == 3 ? 0xffe5 : x[(size_t)(5 * K + i)];
    vf sb((size_t)QT_CANON_BWD_SCRATCH(M, K, N, nb)), sf((size_t)QT_CANON_FWD_SCRATCH(M, N, K, nb));
    for (int pi = 0; pi < 4; pi++) {
        vf ob((size_t)(M * N), -5.0f), of((size_t)(M * N), -5.0f);
        if (qt_bf16_matmul_canon_bwd_data_on(PATHS[pi], ob.data(), dy.data(), w.data(), M, K, N,
                                             nseg, nb, sb.data()) != 0)
            continue;
        for (size_t i = 0; i < ob.size(); i++) LONGS_EQUAL(0x7fc00000u, bits(ob[i]));
        // forward: x[M,K] w^T with w as [N,K]: row 5 of the output is the NaN's
        CHECK_EQUAL(0, qt_bf16_matmul_canon_fwd_on(PATHS[pi], of.data(), x.data(), w.data(), M, N,
                                                   K, nseg, nb, sf.data()));
        for (int64_t j = 0; j < N; j++) LONGS_EQUAL(0x7fc00000u, bits(of[(size_t)(5 * N + j)]));
    }
}
