/* attention.c - causal GQA softmax attention (blocked and tiled, one row's order per row).
 *
 * Forward: scores s_ij = (q_i . k_j) * scale for j <= i, m = max_j s_ij,
 * lse_i = m + log(sum_j exp(s_ij - m)) (j increasing), o_i = sum_j exp(s_ij - lse_i) v_j
 * (j increasing). The backward recomputes p_ij = exp(s_ij - lse_i) from the saved lse, so
 * nothing of size S*S is ever stored.
 * The bit contract (attention.h, qt_ops.def ATTN_*): every multiply-add of a dot product or
 * of a P V / gradient sum is ONE fused multiply-add (a single rounding), written out
 * (QT_ATTN_FMA and the vector forms qt_attn_fma8 / qt_attn_fma16: the build's
 * -ffp-contract=off never fuses on its own); everything else (the score's "* scale", the
 * exponent's "- lse", ds = scale * (p * (dp - D))) stays separately rounded.
 * Invariants: one fixed summation order per quantity (documented at each loop); no state
 * crosses sequences; the result never depends on whether scratch was supplied.
 * The fast paths compute many dots at once: qt_attn_dot8 (eight keys, eight lane chains
 * each in a 256-bit vector) and qt_attn_dot4x8 (eight packed rows against four others, two
 * dots per AVX-512 register), each followed by one transposing add tree for the final
 * pairwise combines. Every dot keeps qt_attn_dot's exact operation tree and every sum its
 * order, so they are bit-identical to the scalar *_ref versions (qt_attn_dot_ref,
 * qt_attn_axpy_ref: the contract spelled out one fmaf at a time; tested); the softmax
 * exponentials are taken in separate, vectorised passes (qt_expf_v8: the same bits).
 * Paths, fastest first: the tiled forward (qt_attn_fwd_tiled: hd % 16 == 0, hd <= 512,
 * S <= 16384) and the key-block backward (qt_attn_bwd_keyblocks: the planned scratch, S >= 256,
 * hd <= 512); the 8-row forward and 4-row backward blocks; the one-row forms.
 * Static buffers (not thread-safe, like matmul.c's packing buffer): the forward's block
 * scores (512 KiB) and packed rows (64 KiB), the backward's packed key block (256 KiB) and
 * update rows (32 KiB); twice that in the double build.
 * Before 2026-12-02 the contract had no FMA (multiply, then add: two instructions on the
 * two FP ports), which capped every loop here at half the FMA peak (docs/bench.md,
 * "Attention: the FMA contract"); the change of bits was deliberate (issue 22).
 */
#include "attention.h"
#include <string.h>
#include "qt_real.h"
#if !defined(QT_REAL_DOUBLE)
/* The float contract is defined by single-rounding FMAs; without the instruction
 * __builtin_fmaf would become a libm call, so a target without FMA is refused (as in
 * matmul.c; x86-64-v3 is the oldest supported target). */
#ifndef __FMA__
#error "qtrain's float kernels need the FMA instruction: build with ARCH=-march=x86-64-v3 (or newer, or -march=native on such a CPU)"
#endif
#include <immintrin.h>
#define QT_ATTN_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define QT_ATTN_FMA(a, b, c) __builtin_fma((a), (b), (c))
#endif

/* Eight lanes, eight elements wide: lane l sums elements l, l+8, ... of the full blocks
 * (one vector add per block, no contraction), the tail element n8+u goes to lane u, then
 * ((0+1)+(2+3))+((4+5)+(6+7)). A fixed order that the vector unit can run directly; the
 * GNU vector extension only spells out what the scalar definition already says. */
typedef qt_real qt_attn_v8 __attribute__((vector_size(8 * sizeof(qt_real))));

static inline qt_attn_v8 qt_attn_load8(const qt_real *p)
{
    qt_attn_v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* a * b + c per lane, one rounding (QT_ATTN_FMA on every lane: the AVX2/AVX-512 VFMADD and
 * __builtin_fma(f) are the same IEEE operation, so every build gives the same bits). */
static inline qt_attn_v8 qt_attn_fma8(qt_attn_v8 a, qt_attn_v8 b, qt_attn_v8 c)
{
#ifndef QT_REAL_DOUBLE
    return (qt_attn_v8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    qt_attn_v8 r;
    for (int u = 0; u < 8; u++) r[u] = QT_ATTN_FMA(a[u], b[u], c[u]);
    return r;
#endif
}

/* Sixteen-wide elementwise slices for the accumulations (no sum crosses lanes there, so the
 * width is free; 16 floats fill one AVX-512 register). */
typedef qt_real qt_attn_v16 __attribute__((vector_size(16 * sizeof(qt_real))));

static inline qt_attn_v16 qt_attn_load16(const qt_real *p)
{
    qt_attn_v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* a * b + c per lane, one rounding: one AVX-512 VFMADD, two AVX2 ones on the halves (the
 * x86-64-v3 build), QT_ATTN_FMA per lane in double. */
static inline qt_attn_v16 qt_attn_fma16(qt_attn_v16 a, qt_attn_v16 b, qt_attn_v16 c)
{
#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__)
    return (qt_attn_v16)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif !defined(QT_REAL_DOUBLE)
    const qt_attn_v8 lo = qt_attn_fma8(__builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7),
                                       __builtin_shufflevector(b, b, 0, 1, 2, 3, 4, 5, 6, 7),
                                       __builtin_shufflevector(c, c, 0, 1, 2, 3, 4, 5, 6, 7));
    const qt_attn_v8 hi = qt_attn_fma8(
        __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15),
        __builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15),
        __builtin_shufflevector(c, c, 8, 9, 10, 11, 12, 13, 14, 15));
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    qt_attn_v16 r;
    for (int u = 0; u < 16; u++) r[u] = QT_ATTN_FMA(a[u], b[u], c[u]);
    return r;
#endif
}

/* p * b + c per lane, one rounding (p broadcast). */
static inline qt_attn_v16 qt_attn_fma16s(qt_real p, qt_attn_v16 b, qt_attn_v16 c)
{
    qt_attn_v16 pv;
    for (int u = 0; u < 16; u++) pv[u] = p;
    return qt_attn_fma16(pv, b, c);
}

static inline qt_real qt_attn_dot(const qt_real *a, const qt_real *b, int64_t n)
{
    qt_attn_v8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i += 8)
        acc = qt_attn_fma8(qt_attn_load8(a + i), qt_attn_load8(b + i), acc);
    for (int64_t i = n8; i < n; i++) acc[i - n8] = QT_ATTN_FMA(a[i], b[i], acc[i - n8]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* qt_attn_dot as the contract states it, one scalar fmaf at a time (the *_ref paths use
 * this, the fast paths the vector forms; the tests compare them bit for bit). */
static qt_real qt_attn_dot_ref(const qt_real *a, const qt_real *b, int64_t n)
{
    qt_real acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i++) acc[i % 8] = QT_ATTN_FMA(a[i], b[i], acc[i % 8]);
    for (int64_t i = n8; i < n; i++) acc[i - n8] = QT_ATTN_FMA(a[i], b[i], acc[i - n8]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* out[m] = qt_attn_dot(a, b + m*stride, n) for m = 0..7, bit for bit: the same lane sums,
 * then the same ((0+1)+(2+3))+((4+5)+(6+7)) tree per dot, evaluated for the eight dots at
 * once by pairing lanes across vectors (IEEE addition is commutative, so only the grouping
 * matters, and that is unchanged). */
static inline __attribute__((always_inline)) void
qt_attn_dot8(qt_real *out, const qt_real *a, const qt_real *b, int64_t stride, int64_t n)
{
    qt_attn_v8 acc[8];
    for (int m = 0; m < 8; m++) acc[m] = (qt_attn_v8){0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t n8 = n & ~(int64_t)7;
    /* unrolled, so the eight sums stay in registers (gcc -O2 kept the rolled loop's acc[]
     * on the stack: a load, add and store per step, ~13 GFLOP/s for the whole kernel) */
    for (int64_t i = 0; i < n8; i += 8) {
        const qt_attn_v8 av = qt_attn_load8(a + i);
#pragma GCC unroll 8
        for (int m = 0; m < 8; m++)
            acc[m] = qt_attn_fma8(av, qt_attn_load8(b + m * stride + i), acc[m]);
    }
    for (int64_t i = n8; i < n; i++)
        for (int m = 0; m < 8; m++)
            acc[m][i - n8] = QT_ATTN_FMA(a[i], b[m * stride + i], acc[m][i - n8]);
    /* Each stage adds even and odd lanes of a vector pair: stage 1 leaves lane sums
     * (0+1),(2+3),(4+5),(6+7) of two dots, stage 2 (01+23),(45+67) of four, stage 3 the
     * totals of all eight in order. The index vectors are the same for every stage. */
#define QT_ATTN_PAIRSUM(x, y)                                                               \
    (__builtin_shufflevector((x), (y), 0, 2, 4, 6, 8, 10, 12, 14) +                          \
     __builtin_shufflevector((x), (y), 1, 3, 5, 7, 9, 11, 13, 15))
    qt_attn_v8 p[4], q[2];
    for (int m = 0; m < 4; m++) p[m] = QT_ATTN_PAIRSUM(acc[2 * m], acc[2 * m + 1]);
    for (int m = 0; m < 2; m++) q[m] = QT_ATTN_PAIRSUM(p[2 * m], p[2 * m + 1]);
    const qt_attn_v8 r = QT_ATTN_PAIRSUM(q[0], q[1]);
#undef QT_ATTN_PAIRSUM
    memcpy(out, &r, sizeof r);
}

/* y[i] = fma(a, x[i], y[i]); elementwise, so the vector form has the scalar bits. */
static inline void qt_attn_axpy(qt_real *y, qt_real a, const qt_real *x, int64_t n)
{
    const int64_t n8 = n & ~(int64_t)7;
    qt_attn_v8 av;
    for (int u = 0; u < 8; u++) av[u] = a;
    for (int64_t i = 0; i < n8; i += 8) {
        const qt_attn_v8 r = qt_attn_fma8(av, qt_attn_load8(x + i), qt_attn_load8(y + i));
        memcpy(y + i, &r, sizeof r);
    }
    for (int64_t i = n8; i < n; i++) y[i] = QT_ATTN_FMA(a, x[i], y[i]);
}

/* qt_attn_axpy one scalar fmaf at a time (the *_ref paths). */
static void qt_attn_axpy_ref(qt_real *y, qt_real a, const qt_real *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = QT_ATTN_FMA(a, x[i], y[i]);
}

/* Two dots per 16-lane vector: qt_attn_dot's eight lanes fill half of an AVX-512 register,
 * so two dots share one (lanes 0-7 one dot's lane sums, 8-15 another's) and one multiply
 * and one add advance both by a chunk of eight elements; in 256-bit vectors (qt_attn_dot8)
 * the same multiply-then-add chains run at most 3/4 as fast, and the 16-wide form is what
 * can reach the no-FMA bound of half the FMA peak. A group of eight rows (queries, or the
 * output gradients) is packed once as four row pairs (qt_attn_pack8); a key's chunk is
 * loaded into both halves. Every lane keeps qt_attn_dot's chain 0 + a_l b_l +
 * a_{l+8} b_{l+8} + ... and every dot the same ((0+1)+(2+3))+((4+5)+(6+7)) combine, so the
 * bits are qt_attn_dot's. The packed rows live in static buffers (not thread-safe, like
 * matmul.c's packing buffer) of QT_ATTN_PACK_HD elements per row; larger head dims take
 * the paths without packing. */
#define QT_ATTN_PACK_HD 512
#define QT_ATTN_G 8 /* rows per packed group */

/* [p0..p7, p0..p7]. With AVX-512DQ one broadcasting load (VBROADCASTF32X8 runs on a load
 * port; gcc spells the generic shuffle as a load plus a VSHUFF32X4 on the FP ports). */
static inline qt_attn_v16 qt_attn_bcast8(const qt_real *p)
{
#if !defined(QT_REAL_DOUBLE) && defined(__AVX512F__) && defined(__AVX512DQ__)
    return (qt_attn_v16)_mm512_broadcast_f32x8(_mm256_loadu_ps(p));
#else
    const qt_attn_v8 h = qt_attn_load8(p);
    return __builtin_shufflevector(h, h, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
#endif
}

/* qp[(c*4 + p)*16 + 8u + e] = a_{2p+u}[8c + e] (row r = a + r*stride) for rows r < rr,
 * zero for the rows rr..7 (their dots are computed and never used); hd % 8 == 0. */
static void qt_attn_pack8(qt_real *qp, const qt_real *a, int64_t stride, int rr, int64_t hd)
{
    for (int r = 0; r < QT_ATTN_G; r++)
        for (int64_t c = 0; c < hd / 8; c++) {
            qt_real *dst = qp + (c * 4 + r / 2) * 16 + (r & 1) * 8;
            if (r < rr) memcpy(dst, a + r * stride + 8 * c, 8 * sizeof *dst);
            else memset(dst, 0, 8 * sizeof *dst);
        }
}

/* out[t*8 + r] = qt_attn_dot(a_r, x[t], hd) for the four rows x[t] and the eight packed
 * rows a_r of qp, bit for bit (hd % 8 == 0; either side may be the keys). acc[t*4 + p]
 * holds a_{2p}, a_{2p+1} against x[t]; the combine pairs lanes across vectors as
 * qt_attn_dot8 does, three stages, and leaves x[0] and x[1] (against a_0..a_7 each) in the
 * first result, x[2] and x[3] in the second. */
static inline __attribute__((always_inline)) void
qt_attn_dot4x8(qt_real *out, const qt_real *qp, const qt_real *const *x, int64_t hd)
{
    qt_attn_v16 acc[16];
#pragma GCC unroll 16
    for (int n = 0; n < 16; n++) acc[n] = (qt_attn_v16){0};
    for (int64_t c = 0; c < hd / 8; c++) {
        const qt_real *qc = qp + c * 64;
        const qt_attn_v16 a0 = qt_attn_load16(qc), a1 = qt_attn_load16(qc + 16),
                          a2 = qt_attn_load16(qc + 32), a3 = qt_attn_load16(qc + 48);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const qt_attn_v16 xb = qt_attn_bcast8(x[t] + 8 * c);
            acc[t * 4 + 0] = qt_attn_fma16(a0, xb, acc[t * 4 + 0]);
            acc[t * 4 + 1] = qt_attn_fma16(a1, xb, acc[t * 4 + 1]);
            acc[t * 4 + 2] = qt_attn_fma16(a2, xb, acc[t * 4 + 2]);
            acc[t * 4 + 3] = qt_attn_fma16(a3, xb, acc[t * 4 + 3]);
        }
    }
#define QT_ATTN_PAIRSUM16(x, y)                                                             \
    (__builtin_shufflevector((x), (y), 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,    \
                             28, 30) +                                                       \
     __builtin_shufflevector((x), (y), 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27,    \
                             29, 31))
    qt_attn_v16 w[8], z[4];
#pragma GCC unroll 8
    for (int m = 0; m < 8; m++) w[m] = QT_ATTN_PAIRSUM16(acc[2 * m], acc[2 * m + 1]);
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) z[m] = QT_ATTN_PAIRSUM16(w[2 * m], w[2 * m + 1]);
    const qt_attn_v16 y0 = QT_ATTN_PAIRSUM16(z[0], z[1]), y1 = QT_ATTN_PAIRSUM16(z[2], z[3]);
#undef QT_ATTN_PAIRSUM16
    memcpy(out, &y0, sizeof y0);
    memcpy(out + 16, &y1, sizeof y1);
}

static void QT_FN(qt_attn_fwd_ref_ld)(qt_real *o, qt_real *lse, const qt_real *q, const qt_real *k,
                        const qt_real *v, qt_real *scratch, int64_t b, int64_t S, int64_t ldl, int64_t Hq,
                        int64_t Hkv, int64_t hd, qt_real scale)
{
    const int64_t group = Hq / Hkv;
    const int64_t kstride = Hkv * hd;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h / group;
            const qt_real *kb = k + s * S * kstride + g * hd;
            const qt_real *vb = v + s * S * kstride + g * hd;
            for (int64_t i = 0; i < S; i++) {
                const qt_real *qi = q + ((s * S + i) * Hq + h) * hd;
                qt_real *oi = o + ((s * S + i) * Hq + h) * hd;
                qt_real m, sum = 0, l;
                if (scratch) {
                    for (int64_t j = 0; j <= i; j++)
                        scratch[j] = qt_attn_dot_ref(qi, kb + j * kstride, hd) * scale;
                    m = scratch[0];
                    for (int64_t j = 1; j <= i; j++) m = scratch[j] > m ? scratch[j] : m;
                    for (int64_t j = 0; j <= i; j++) sum += QT_EXP(scratch[j] - m);
                } else {
                    m = qt_attn_dot_ref(qi, kb, hd) * scale;
                    for (int64_t j = 1; j <= i; j++) {
                        const qt_real sj = qt_attn_dot_ref(qi, kb + j * kstride, hd) * scale;
                        m = sj > m ? sj : m;
                    }
                    for (int64_t j = 0; j <= i; j++)
                        sum += QT_EXP(qt_attn_dot_ref(qi, kb + j * kstride, hd) * scale - m);
                }
                l = m + QT_LOG(sum);
                lse[(s * Hq + h) * ldl + i] = l;
                for (int64_t d = 0; d < hd; d++) oi[d] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const qt_real sj = scratch ? scratch[j]
                                               : qt_attn_dot_ref(qi, kb + j * kstride, hd) * scale;
                    qt_attn_axpy_ref(oi, QT_EXP(sj - l), vb + j * kstride, hd);
                }
            }
        }
    }
}

static void QT_FN(qt_attn_bwd_ref_ld)(qt_real *dq, qt_real *dk, qt_real *dv, const qt_real *dout,
                        const qt_real *q, const qt_real *k, const qt_real *v, const qt_real *o,
                        const qt_real *lse, qt_real *scratch, int64_t b, int64_t S, int64_t ldl, int64_t Hq,
                        int64_t Hkv, int64_t hd, qt_real scale)
{
    const int64_t group = Hq / Hkv;
    const int64_t kstride = Hkv * hd;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h / group;
            const int64_t kvoff = s * S * kstride + g * hd;
            const qt_real *kb = k + kvoff, *vb = v + kvoff;
            qt_real *dkb = dk + kvoff, *dvb = dv + kvoff;
            for (int64_t i = 0; i < S; i++) {
                const int64_t qoff = ((s * S + i) * Hq + h) * hd;
                const qt_real *qi = q + qoff, *doi = dout + qoff;
                qt_real *dqi = dq + qoff;
                const qt_real l = lse[(s * Hq + h) * ldl + i];
                /* D_i = do_i . o_i is the softmax-Jacobian's row term. */
                const qt_real D = qt_attn_dot_ref(doi, o + qoff, hd);
                for (int64_t j = 0; j <= i; j++) {
                    const qt_real p = QT_EXP(qt_attn_dot_ref(qi, kb + j * kstride, hd) * scale - l);
                    qt_attn_axpy_ref(dvb + j * kstride, p, doi, hd);
                    const qt_real dp = qt_attn_dot_ref(doi, vb + j * kstride, hd);
                    scratch[j] = scale * (p * (dp - D));
                }
                for (int64_t j = 0; j <= i; j++) {
                    qt_attn_axpy_ref(dqi, scratch[j], kb + j * kstride, hd);
                    qt_attn_axpy_ref(dkb + j * kstride, scratch[j], qi, hd);
                }
            }
        }
    }
}

/* Scaled scores of query row qi against keys 0..i: sc[j] = dot(qi, k_j) * scale - off
 * (off = 0: raw scaled scores; off = lse: the exponent of p_ij). */
static void qt_attn_scores(qt_real *sc, const qt_real *qi, const qt_real *kb, int64_t kstride,
                           int64_t i, int64_t hd, qt_real scale, qt_real off)
{
    qt_real d8[8];
    int64_t j = 0;
    for (; j + 8 <= i + 1; j += 8) {
        qt_attn_dot8(d8, qi, kb + j * kstride, kstride, hd);
        for (int m = 0; m < 8; m++) sc[j + m] = d8[m] * scale - off;
    }
    for (; j <= i; j++) sc[j] = qt_attn_dot(qi, kb + j * kstride, hd) * scale - off;
}

/* Forward blocking: up to QT_ATTN_FWD_ROWS consecutive query rows of one (sequence, head)
 * at a time, so every key and value row read serves all of them (one row at a time, a long
 * sequence streams its kv head's keys and values from memory once per query row: at
 * S = 4096, hd = 256 that is 4 MiB each, beyond L2, and the kernel ran at ~5 GFLOP/s).
 * The block's scores live in a static module buffer (not thread-safe, like matmul.c's
 * packing buffer; the plan's scratch holds one row): rows = QT_ATTN_FWD_CAP / S, at most
 * QT_ATTN_FWD_ROWS; longer sequences run one row at a time in the caller's scratch. Since
 * the tiled forward below, this path runs only where that one cannot (S > QT_ATTN_FWD_CAP / 8
 * or hd > QT_ATTN_PACK_HD). Per
 * row every quantity has the one-row path's operation tree: each score is qt_attn_dot's
 * (qt_attn_dot8 gives the same bits), max / sum / lse / exp in j order, and o_i's elements
 * the chain 0 + p_0 v_0 + p_1 v_1 ... */
#define QT_ATTN_FWD_ROWS 8
#define QT_ATTN_FWD_CAP 131072
static qt_real qt_attn_fwd_sc[QT_ATTN_FWD_CAP];

/* sc[r*ld + j] = dot(q_{i0+r}, k_j) * scale - off[r] for j <= i0 + r, r < R: key blocks of
 * eight outermost, so a block of keys (8 rows of hd) is read once for all R rows. */
static inline __attribute__((always_inline)) void
qt_attn_block_scores(qt_real *sc, int64_t ld, const qt_real *qb, int64_t qstride,
                     const qt_real *kb, int64_t kstride, int64_t i0, const int R, int64_t hd,
                     qt_real scale, const qt_real *off)
{
    qt_real d8[8];
    const int64_t n = i0 + R; /* keys seen by the block's last row */
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        for (int r = 0; r < R; r++) {
            const int64_t i = i0 + r;
            qt_real *sr = sc + r * ld;
            if (j + 8 <= i + 1) {
                qt_attn_dot8(d8, qb + r * qstride, kb + j * kstride, kstride, hd);
                for (int m = 0; m < 8; m++) sr[j + m] = d8[m] * scale - off[r];
            } else {
                for (int64_t jj = j; jj <= i; jj++)
                    sr[jj] = qt_attn_dot(qb + r * qstride, kb + jj * kstride, hd) * scale - off[r];
            }
        }
    }
    for (; j < n; j++)
        for (int r = (int)(j > i0 ? j - i0 : 0); r < R; r++)
            sc[r * ld + j] = qt_attn_dot(qb + r * qstride, kb + j * kstride, hd) * scale - off[r];
}

/* Rows i0..i0+R-1: softmax of the block's scores in place (p_ij), lse, then o. */
static inline __attribute__((always_inline)) void
qt_attn_fwd_block(qt_real *ob, qt_real *lseb, const qt_real *qb, const qt_real *kb,
                  const qt_real *vb, qt_real *sc, int64_t ld, int64_t qstride, int64_t kstride,
                  int64_t i0, const int R, int64_t hd, qt_real scale)
{
    static const qt_real zero[QT_ATTN_FWD_ROWS] = {0};
    /* x * scale - 0 == x * scale exactly (also for -0: -0 - 0 = -0) */
    qt_attn_block_scores(sc, ld, qb, qstride, kb, kstride, i0, R, hd, scale, zero);
    for (int r = 0; r < R; r++) {
        qt_real *sr = sc + r * ld;
        const int64_t i = i0 + r;
        qt_real m = sr[0], sum = 0;
        for (int64_t j = 1; j <= i; j++) m = sr[j] > m ? sr[j] : m;
        for (int64_t j = 0; j <= i; j++) sum += QT_EXP(sr[j] - m);
        const qt_real l = m + QT_LOG(sum);
        lseb[r] = l;
        for (int64_t j = 0; j <= i; j++) sr[j] = QT_EXP(sr[j] - l);
    }
    /* o rows slice by slice, the R slices held in registers across j: per element the same
     * chain 0 + p_0 v_0 + p_1 v_1 ... as one row alone; key j reaches rows i0+r >= j */
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
        qt_attn_v16 acc[QT_ATTN_FWD_ROWS];
#pragma GCC unroll 8
        for (int r = 0; r < QT_ATTN_FWD_ROWS; r++) acc[r] = (qt_attn_v16){0};
        for (int64_t j = 0; j <= i0; j++) { /* keys every row of the block sees */
            const qt_attn_v16 vj = qt_attn_load16(vb + j * kstride + d0);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r] = qt_attn_fma16s(sc[r * ld + j], vj, acc[r]);
        }
        for (int64_t j = i0 + 1; j < i0 + R; j++) { /* the diagonal: rows i0+r >= j */
            const qt_attn_v16 vj = qt_attn_load16(vb + j * kstride + d0);
#pragma GCC unroll 8
            for (int r = 1; r < R; r++)
                if (j <= i0 + r) acc[r] = qt_attn_fma16s(sc[r * ld + j], vj, acc[r]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) memcpy(ob + r * qstride + d0, &acc[r], sizeof acc[r]);
    }
}

/* ---- The tiled forward: blocks of up to QT_ATTN_FB query rows as packed groups of eight.
 * Per block: (1) every score of the block, key tiles of four outermost (each tile is read
 * once for all groups; qt_attn_dot4x8), into qt_attn_fwd_sc key-major per group
 * (st[g*8*S + j*8 + r]); (2) the softmax of each group with its eight rows in the lanes of
 * one vector, so the rows' sequential max and sum chains run side by side (one row at a
 * time the sum is one latency-bound chain), p in place of the scores; (3) o = P V in
 * register tiles of 8 rows x 32 (or 16) elements, key tiles of QT_ATTN_FKV outermost so
 * the tile's values stay in L2 while the groups pass; a partial o is stored and reloaded
 * between key tiles (exact). Per row every quantity keeps the one-row path's operation
 * tree: each score is qt_attn_dot's times scale, m and the sum over j = 0..i increasing
 * (lanes of a row past its diagonal are masked out of both), lse = m + log(sum),
 * p = exp(s - lse), and o's elements the chain 0 + p_0 v_0 + p_1 v_1 ... (keys past a row's
 * diagonal are skipped, not added as zeros). */
#define QT_ATTN_FB 32  /* query rows per forward block */
#define QT_ATTN_FKV 128 /* keys per value tile of the forward's P V */
static qt_real qt_attn_fwd_qp[QT_ATTN_FB * QT_ATTN_PACK_HD]; /* the block's packed rows */

#ifdef QT_REAL_DOUBLE
typedef int64_t qt_attn_ireal;
#else
typedef int32_t qt_attn_ireal;
#endif
typedef qt_attn_ireal qt_attn_m8 __attribute__((vector_size(8 * sizeof(qt_real))));

/* c ? a : b per lane (c from a vector comparison: all ones or zero) */
static inline qt_attn_v8 qt_attn_sel8(qt_attn_m8 c, qt_attn_v8 a, qt_attn_v8 b)
{
    return (qt_attn_v8)((c & (qt_attn_m8)a) | (~c & (qt_attn_m8)b));
}

/* QT_EXP on eight lanes (float: qt_expf_v8, the same bits as qt_expf_inline) */
static inline qt_attn_v8 qt_attn_exp8(qt_attn_v8 x)
{
#ifdef QT_REAL_DOUBLE
    qt_attn_v8 y;
    for (int u = 0; u < 8; u++) y[u] = QT_EXP(x[u]);
    return y;
#else
    return (qt_attn_v8)qt_expf_v8((qt_mi_f8)x);
#endif
}

/* The block's scores: st[g*8*S + j*8 + r] = qt_attn_dot(q_i, k_j) * scale for the rows
 * i = i0 + 8g + r < i0 + R and keys j <= i (four-key tiles may also fill entries past a
 * row's diagonal: never read as scores of that row). */
static void qt_attn_fwd_scores(qt_real *st, int64_t S, const qt_real *qp, const qt_real *qb,
                               int64_t qstride, const qt_real *kb, int64_t kstride, int64_t i0,
                               int R, int64_t hd, qt_real scale)
{
    qt_real d[32];
    const int G = (R + QT_ATTN_G - 1) / QT_ATTN_G;
    for (int64_t j = 0; j < i0 + R; j += 4) {
        for (int g = 0; g < G; g++) {
            const int rg = R - g * QT_ATTN_G < QT_ATTN_G ? R - g * QT_ATTN_G : QT_ATTN_G;
            const int64_t ig = i0 + g * QT_ATTN_G, ng = ig + rg;
            qt_real *sg = st + g * QT_ATTN_G * S;
            if (j + 4 <= ng) {
                const qt_real *kt[4] = {kb + j * kstride, kb + (j + 1) * kstride,
                                        kb + (j + 2) * kstride, kb + (j + 3) * kstride};
                qt_attn_dot4x8(d, qp + g * QT_ATTN_G * hd, kt, hd);
                for (int u = 0; u < 32; u++) sg[j * QT_ATTN_G + u] = d[u] * scale;
                continue;
            }
            for (int64_t jj = j; jj < ng; jj++)
                for (int r = (int)(jj > ig ? jj - ig : 0); r < rg; r++)
                    sg[jj * QT_ATTN_G + r] =
                        qt_attn_dot(qb + (g * QT_ATTN_G + r) * qstride, kb + jj * kstride, hd) *
                        scale;
        }
    }
}

/* Softmax of one group's rows i = ig + r (lane r; rows r >= rg are padding, computed and
 * never stored): scores sg[j*8 + r] -> p_ij in place for j < ig + rg, lse to lseg[r]. */
static void qt_attn_fwd_softmax8(qt_real *sg, qt_real *lseg, int64_t ig, int rg)
{
    const qt_attn_v8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    const int64_t n = ig + rg;
    qt_attn_v8 m = qt_attn_load8(sg), sum = {0, 0, 0, 0, 0, 0, 0, 0}, l;
    for (int64_t j = 1; j < n; j++) {
        const qt_attn_v8 s = qt_attn_load8(sg + j * QT_ATTN_G);
        qt_attn_m8 c = s > m;
        if (j > ig) c &= lane >= (qt_real)(j - ig); /* row r sees j <= ig + r */
        m = qt_attn_sel8(c, s, m);
    }
    for (int64_t j = 0; j < n; j++) {
        const qt_attn_v8 e = qt_attn_exp8(qt_attn_load8(sg + j * QT_ATTN_G) - m);
        sum = j > ig ? qt_attn_sel8(lane >= (qt_real)(j - ig), sum + e, sum) : sum + e;
    }
    for (int u = 0; u < QT_ATTN_G; u++) l[u] = m[u] + QT_LOG(sum[u]);
    for (int r = 0; r < rg; r++) lseg[r] = l[r];
    for (int64_t j = 0; j < n; j++) {
        const qt_attn_v8 p = qt_attn_exp8(qt_attn_load8(sg + j * QT_ATTN_G) - l);
        memcpy(sg + j * QT_ATTN_G, &p, sizeof p);
    }
}

/* o rows ig + r (r < rg), elements [d0, d0 + 16 W): += p_ij v_j for keys j in [ja, jb)
 * with j <= ig + r, j increasing; first: the sums start at 0, else at the stored o. */
static inline __attribute__((always_inline)) void
qt_attn_fwd_pv(qt_real *og, int64_t qstride, const qt_real *pg, const qt_real *vb,
               int64_t kstride, int64_t ig, int rg, int64_t ja, int64_t jb, int first,
               const int W)
{
    qt_attn_v16 acc[QT_ATTN_G][2];
#pragma GCC unroll 8
    for (int r = 0; r < QT_ATTN_G; r++)
        for (int w = 0; w < W; w++)
            acc[r][w] = first || r >= rg ? (qt_attn_v16){0}
                                         : qt_attn_load16(og + r * qstride + 16 * w);
    const int64_t jf = jb < ig + 1 ? jb : ig + 1; /* keys every row of the group sees */
    int64_t j = ja;
    for (; j < jf; j++) {
        qt_attn_v16 vj[2];
        for (int w = 0; w < W; w++) vj[w] = qt_attn_load16(vb + j * kstride + 16 * w);
#pragma GCC unroll 8
        for (int r = 0; r < QT_ATTN_G; r++) {
            const qt_real p = pg[j * QT_ATTN_G + r];
            for (int w = 0; w < W; w++) acc[r][w] = qt_attn_fma16s(p, vj[w], acc[r][w]);
        }
    }
    for (; j < jb; j++) { /* the diagonal: rows ig + r >= j */
        qt_attn_v16 vj[2];
        for (int w = 0; w < W; w++) vj[w] = qt_attn_load16(vb + j * kstride + 16 * w);
#pragma GCC unroll 8
        for (int r = 1; r < QT_ATTN_G; r++) {
            if (j > ig + r) continue;
            const qt_real p = pg[j * QT_ATTN_G + r];
            for (int w = 0; w < W; w++) acc[r][w] = qt_attn_fma16s(p, vj[w], acc[r][w]);
        }
    }
    for (int r = 0; r < rg; r++)
        for (int w = 0; w < W; w++) memcpy(og + r * qstride + 16 * w, &acc[r][w], sizeof acc[r][w]);
}

/* Rows i0..i0+R-1 of one (sequence, head), R <= QT_ATTN_FB; hd % 16 == 0,
 * hd <= QT_ATTN_PACK_HD and R / 8 groups of S scores fit qt_attn_fwd_sc. */
static void qt_attn_fwd_tiled(qt_real *ob, qt_real *lseb, const qt_real *qb, const qt_real *kb,
                              const qt_real *vb, int64_t S, int64_t qstride, int64_t kstride,
                              int64_t i0, int R, int64_t hd, qt_real scale)
{
    const int G = (R + QT_ATTN_G - 1) / QT_ATTN_G;
    qt_real *st = qt_attn_fwd_sc;
    for (int g = 0; g < G; g++) {
        const int rg = R - g * QT_ATTN_G < QT_ATTN_G ? R - g * QT_ATTN_G : QT_ATTN_G;
        qt_attn_pack8(qt_attn_fwd_qp + g * QT_ATTN_G * hd, qb + g * QT_ATTN_G * qstride,
                      qstride, rg, hd);
    }
    qt_attn_fwd_scores(st, S, qt_attn_fwd_qp, qb, qstride, kb, kstride, i0, R, hd, scale);
    for (int g = 0; g < G; g++) {
        const int rg = R - g * QT_ATTN_G < QT_ATTN_G ? R - g * QT_ATTN_G : QT_ATTN_G;
        qt_attn_fwd_softmax8(st + g * QT_ATTN_G * S, lseb + g * QT_ATTN_G, i0 + g * QT_ATTN_G, rg);
    }
    for (int64_t ja = 0; ja < i0 + R; ja += QT_ATTN_FKV) {
        for (int g = 0; g < G; g++) {
            const int rg = R - g * QT_ATTN_G < QT_ATTN_G ? R - g * QT_ATTN_G : QT_ATTN_G;
            const int64_t ig = i0 + g * QT_ATTN_G, ng = ig + rg;
            if (ja >= ng) continue;
            const int64_t jb = ja + QT_ATTN_FKV < ng ? ja + QT_ATTN_FKV : ng;
            qt_real *og = ob + g * QT_ATTN_G * qstride;
            const qt_real *pg = st + g * QT_ATTN_G * S;
            int64_t d0 = 0;
            for (; d0 + 32 <= hd; d0 += 32)
                qt_attn_fwd_pv(og + d0, qstride, pg, vb + d0, kstride, ig, rg, ja, jb, ja == 0, 2);
            if (d0 < hd)
                qt_attn_fwd_pv(og + d0, qstride, pg, vb + d0, kstride, ig, rg, ja, jb, ja == 0, 1);
        }
    }
}

static void QT_FN(qt_attn_fwd_ld)(qt_real *o, qt_real *lse, const qt_real *q, const qt_real *k,
                        const qt_real *v, qt_real *scratch, int64_t b, int64_t S, int64_t ldl, int64_t Hq,
                        int64_t Hkv, int64_t hd, qt_real scale)
{
    if (!scratch) {
        QT_FN(qt_attn_fwd_ref_ld)(o, lse, q, k, v, scratch, b, S, ldl, Hq, Hkv, hd, scale);
        return;
    }
    const int64_t group = Hq / Hkv;
    const int64_t kstride = Hkv * hd, qstride = Hq * hd;
    if (hd % 16) {
        for (int64_t s = 0; s < b; s++) {
            for (int64_t h = 0; h < Hq; h++) {
                const int64_t g = h / group;
                const qt_real *kb = k + s * S * kstride + g * hd;
                const qt_real *vb = v + s * S * kstride + g * hd;
                for (int64_t i = 0; i < S; i++) {
                    const qt_real *qi = q + ((s * S + i) * Hq + h) * hd;
                    qt_real *oi = o + ((s * S + i) * Hq + h) * hd;
                    qt_attn_scores(scratch, qi, kb, kstride, i, hd, scale, QT_R(0.0));
                    qt_real m = scratch[0], sum = 0;
                    for (int64_t j = 1; j <= i; j++) m = scratch[j] > m ? scratch[j] : m;
                    for (int64_t j = 0; j <= i; j++) sum += QT_EXP(scratch[j] - m);
                    const qt_real l = m + QT_LOG(sum);
                    lse[(s * Hq + h) * ldl + i] = l;
                    for (int64_t d = 0; d < hd; d++) oi[d] = 0;
                    for (int64_t j = 0; j <= i; j++)
                        qt_attn_axpy(oi, QT_EXP(scratch[j] - l), vb + j * kstride, hd);
                }
            }
        }
        return;
    }
    if (hd <= QT_ATTN_PACK_HD && QT_ATTN_FWD_CAP / S >= QT_ATTN_G) {
        int64_t fb = QT_ATTN_FWD_CAP / S / QT_ATTN_G * QT_ATTN_G;
        if (fb > QT_ATTN_FB) fb = QT_ATTN_FB;
        for (int64_t s = 0; s < b; s++)
            for (int64_t h = 0; h < Hq; h++) {
                const int64_t kvoff = s * S * kstride + h / group * hd;
                for (int64_t i0 = 0; i0 < S; i0 += fb) {
                    const int64_t off = ((s * S + i0) * Hq + h) * hd;
                    qt_attn_fwd_tiled(o + off, lse + (s * Hq + h) * ldl + i0, q + off,
                                      k + kvoff, v + kvoff, S, qstride, kstride, i0,
                                      (int)(S - i0 < fb ? S - i0 : fb), hd, scale);
                }
            }
        return;
    }
    int64_t rows = QT_ATTN_FWD_CAP / S;
    qt_real *sc = qt_attn_fwd_sc;
    if (rows > QT_ATTN_FWD_ROWS) rows = QT_ATTN_FWD_ROWS;
    if (rows < 1) rows = 1, sc = scratch; /* one row fits the plan's scratch */
    for (int64_t s = 0; s < b; s++) {
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h / group;
            const qt_real *kb = k + s * S * kstride + g * hd;
            const qt_real *vb = v + s * S * kstride + g * hd;
            for (int64_t i0 = 0; i0 < S; i0 += rows) {
                const int64_t off = ((s * S + i0) * Hq + h) * hd;
                qt_real *lseb = lse + (s * Hq + h) * ldl + i0;
                if (rows == QT_ATTN_FWD_ROWS && i0 + QT_ATTN_FWD_ROWS <= S)
                    qt_attn_fwd_block(o + off, lseb, q + off, kb, vb, sc, S, qstride, kstride,
                                      i0, QT_ATTN_FWD_ROWS, hd, scale);
                else
                    qt_attn_fwd_block(o + off, lseb, q + off, kb, vb, sc, S, qstride, kstride,
                                      i0, (int)(S - i0 < rows ? S - i0 : rows), hd, scale);
            }
        }
    }
}

/* Backward blocking: QT_ATTN_BWD_ROWS query rows share every k_j / dk_j / dv_j load, with
 * their dq slices held in registers. Their p and ds rows live in the caller's scratch
 * (QT_ATTN_BWD_SCRATCH(S) elements: P rows then DS rows, each S long), so no S bound. */
#define QT_ATTN_R QT_ATTN_BWD_ROWS

/* Row i's softmax probabilities P[j] = exp(s_ij - lse_i) and scaled score gradients
 * DS[j] = scale * (p_ij (do_i.v_j - do_i.o_i)), j = 0..i. Writes no gradient. */
static void qt_attn_bwd_row(qt_real *P, qt_real *DS, const qt_real *qi, const qt_real *doi,
                            const qt_real *oi, const qt_real *kb, const qt_real *vb,
                            int64_t kstride, int64_t i, int64_t hd, qt_real scale, qt_real l)
{
    qt_real d8[8];
    /* D_i = do_i . o_i is the softmax-Jacobian's row term. */
    const qt_real D = qt_attn_dot(doi, oi, hd);
    qt_attn_scores(P, qi, kb, kstride, i, hd, scale, l);
    for (int64_t j = 0; j <= i; j++) P[j] = QT_EXP(P[j]);
    int64_t j = 0;
    for (; j + 8 <= i + 1; j += 8) {
        qt_attn_dot8(d8, doi, vb + j * kstride, kstride, hd);
        for (int m = 0; m < 8; m++) DS[j + m] = scale * (P[j + m] * (d8[m] - D));
    }
    for (; j <= i; j++) DS[j] = scale * (P[j] * (qt_attn_dot(doi, vb + j * kstride, hd) - D));
}

/* qt_attn_bwd_row for the QT_ATTN_R rows i0.. at once (same bits): the key and value
 * blocks are the outer loops, so each block of eight k_j / v_j is read once for all rows
 * instead of once per row. */
static void qt_attn_bwd_rows(qt_real *P, qt_real *DS, int64_t ld, const qt_real *qb,
                             const qt_real *dob, const qt_real *ob, int64_t qstride,
                             const qt_real *kb, const qt_real *vb, int64_t kstride, int64_t i0,
                             int64_t hd, qt_real scale, const qt_real *l)
{
    qt_real D[QT_ATTN_R], d8[8];
    /* D_i = do_i . o_i is the softmax-Jacobian's row term. */
    for (int r = 0; r < QT_ATTN_R; r++) D[r] = qt_attn_dot(dob + r * qstride, ob + r * qstride, hd);
    qt_attn_block_scores(P, ld, qb, qstride, kb, kstride, i0, QT_ATTN_R, hd, scale, l);
    for (int r = 0; r < QT_ATTN_R; r++)
        for (int64_t j = 0; j <= i0 + r; j++) P[r * ld + j] = QT_EXP(P[r * ld + j]);
    const int64_t n = i0 + QT_ATTN_R;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        for (int r = 0; r < QT_ATTN_R; r++) {
            const int64_t i = i0 + r;
            const qt_real *pr = P + r * ld;
            qt_real *dsr = DS + r * ld;
            if (j + 8 <= i + 1) {
                qt_attn_dot8(d8, dob + r * qstride, vb + j * kstride, kstride, hd);
                for (int m = 0; m < 8; m++) dsr[j + m] = scale * (pr[j + m] * (d8[m] - D[r]));
            } else {
                for (int64_t jj = j; jj <= i; jj++)
                    dsr[jj] = scale * (pr[jj] * (qt_attn_dot(dob + r * qstride, vb + jj * kstride,
                                                             hd) - D[r]));
            }
        }
    }
    for (; j < n; j++)
        for (int r = (int)(j > i0 ? j - i0 : 0); r < QT_ATTN_R; r++)
            DS[r * ld + j] = scale * (P[r * ld + j] *
                                      (qt_attn_dot(dob + r * qstride, vb + j * kstride, hd) - D[r]));
}

/* Rows i0..i0+R-1 (all of one (sequence, head)): dv_j += p_ij do_i and dk_j += ds_ij q_i for
 * i increasing, dq_i += ds_ij k_j for j increasing, one 16-wide slice of hd at a time. */
static void qt_attn_bwd_block(qt_real *dqb, qt_real *dkb, qt_real *dvb, const qt_real *qb,
                              const qt_real *dob, const qt_real *kb, const qt_real *P,
                              const qt_real *DS, int64_t ld, int64_t qstride, int64_t kstride,
                              int64_t i0, int64_t hd)
{
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
        qt_attn_v16 qv[QT_ATTN_R], dov[QT_ATTN_R], dqv[QT_ATTN_R];
        for (int r = 0; r < QT_ATTN_R; r++) {
            qv[r] = qt_attn_load16(qb + r * qstride + d0);
            dov[r] = qt_attn_load16(dob + r * qstride + d0);
            dqv[r] = qt_attn_load16(dqb + r * qstride + d0);
        }
        /* key j is seen by rows i0+r >= j: all of them below the diagonal block (the r
         * loops are unrolled so qv, dov and dqv stay in registers; same order) */
        for (int64_t j = 0; j < i0 + QT_ATTN_R; j++) {
            const qt_attn_v16 kj = qt_attn_load16(kb + j * kstride + d0);
            qt_attn_v16 dvj = qt_attn_load16(dvb + j * kstride + d0);
            qt_attn_v16 dkj = qt_attn_load16(dkb + j * kstride + d0);
#pragma GCC unroll 8
            for (int r = 0; r < QT_ATTN_R; r++) {
                if (j > i0 + r) continue;
                dvj = qt_attn_fma16s(P[r * ld + j], dov[r], dvj);
                dkj = qt_attn_fma16s(DS[r * ld + j], qv[r], dkj);
                dqv[r] = qt_attn_fma16s(DS[r * ld + j], kj, dqv[r]);
            }
            memcpy(dvb + j * kstride + d0, &dvj, sizeof dvj);
            memcpy(dkb + j * kstride + d0, &dkj, sizeof dkj);
        }
        for (int r = 0; r < QT_ATTN_R; r++) memcpy(dqb + r * qstride + d0, &dqv[r], sizeof dqv[r]);
    }
}

/* Key-block order for long sequences: keys in blocks of QT_ATTN_BWD_KEYS are the outer loop
 * and query blocks of QT_ATTN_QB rows (those that see the key block) the inner one, so the
 * block's k, v, dk and dv rows (4 x 64 rows of hd) stay in L2 while every query row passes
 * once; in the query-outer order every block of R rows streamed all of dk and dv through
 * memory (at S = 4096, hd = 256: 8 MiB per R rows, ~11 GFLOP/s). Every sum keeps its order: dv_j
 * and dk_j take rows i increasing (query blocks ascend inside a key block), dq_i takes keys
 * j increasing (key blocks ascend, keys ascend inside one; dq_i is stored and reloaded
 * between key blocks, which is exact), and p_ij, ds_ij are the same expressions as in
 * qt_attn_bwd_rows. Scratch: D_i = do_i.o_i for the sequence's rows at [0, S), the block's
 * P and DS tiles (QT_ATTN_QB x QT_ATTN_BWD_KEYS each) from R*S on (R = QT_ATTN_BWD_ROWS, so
 * the planned QT_ATTN_BWD_SCRATCH holds them from S = 256 on: 4 S + 1024 <= 8 S); used when
 * that fits.
 * 8-row query blocks measured 31.6 GFLOP/s at S 4096, hd 256 against 28.2 for 4 and 22.3
 * for 2. */
#define QT_ATTN_BWD_KEYS 64
#define QT_ATTN_QB 8 /* query rows per block of the key-block order */
_Static_assert(QT_ATTN_QB == QT_ATTN_G, "the key-block order's row blocks are packed groups");
#define QT_ATTN_BWD_KB_SCRATCH(S) (QT_ATTN_R * (S) + 2 * QT_ATTN_QB * QT_ATTN_BWD_KEYS)

/* The key-block tiles are row-major: P[QT_ATTN_PIX(r, j - j0)] = p_ij and
 * DS[QT_ATTN_PIX(r, j - j0)] = scale * (p_ij (do_i.v_j - D_i)). */
#define QT_ATTN_PIX(r, jj) ((r) * QT_ATTN_BWD_KEYS + (jj))

/* P and DS for rows i = i0 + r, r < rr, and keys j in [j0, j1) with j <= i. kp and vp are
 * the key block's k and v rows packed by qt_attn_pack8 in groups of eight keys (zero past
 * j1), so whole groups of eight keys run through qt_attn_dot4x8 against four rows at a
 * time; entries with j > i, j >= j1 or r >= rr (rows past rr repeat row rr - 1) are filled
 * with values that are never used. Every used value is the same expression as in
 * qt_attn_bwd_rows (qt_attn_dot4x8's dots are qt_attn_dot's). */
static void qt_attn_bwd_tile(qt_real *P, qt_real *DS, const qt_real *kp, const qt_real *vp,
                             const qt_real *qb, const qt_real *dob, int64_t qstride, int64_t i0,
                             int rr, int64_t j0, int64_t j1, int64_t hd, qt_real scale,
                             const qt_real *l, const qt_real *D)
{
    const int64_t je = j1 < i0 + rr ? j1 : i0 + rr; /* keys the block's last row sees */
    qt_real lv[32], Dv[32], s[32], dp[32];
    for (int r0 = 0; r0 < rr; r0 += 4) {
        const qt_real *xq[4], *xd[4];
        for (int t = 0; t < 4; t++) {
            const int rt = r0 + t < rr ? r0 + t : rr - 1;
            xq[t] = qb + rt * qstride, xd[t] = dob + rt * qstride;
            for (int e = 0; e < 8; e++) lv[t * 8 + e] = l[rt], Dv[t * 8 + e] = D[rt];
        }
        for (int64_t j = j0; j < je; j += 8) {
            qt_attn_dot4x8(s, kp + (j - j0) * hd, xq, hd);
            qt_attn_dot4x8(dp, vp + (j - j0) * hd, xd, hd);
            for (int u = 0; u < 32; u += 8) {
                const qt_attn_v8 x = qt_attn_load8(s + u) * scale - qt_attn_load8(lv + u);
                const qt_attn_v8 p = qt_attn_exp8(x);
                memcpy(s + u, &p, sizeof p);
            }
            for (int u = 0; u < 32; u++) dp[u] = scale * (s[u] * (dp[u] - Dv[u]));
            for (int t = 0; t < 4; t++) {
                memcpy(P + QT_ATTN_PIX(r0 + t, j - j0), s + 8 * t, 8 * sizeof *s);
                memcpy(DS + QT_ATTN_PIX(r0 + t, j - j0), dp + 8 * t, 8 * sizeof *dp);
            }
        }
    }
}

/* Key j's share of a tile's updates on the slice [d0, d0 + 16): rows r < rr with
 * i0 + r >= j (all of them when full) in increasing order: dv_j += p_ij do_i,
 * dk_j += ds_ij q_i, dq_i += ds_ij k_j. */
static inline __attribute__((always_inline)) void
qt_attn_bwd_key_update(qt_attn_v16 *dqv, const qt_attn_v16 *qv, const qt_attn_v16 *dov,
                       qt_real *dkb, qt_real *dvb, const qt_real *kb, const qt_real *P,
                       const qt_real *DS, int64_t kstride, int64_t d0, int64_t j, int64_t j0,
                       int64_t i0, int rr, const int full)
{
    const qt_attn_v16 kj = qt_attn_load16(kb + j * kstride + d0);
    qt_attn_v16 dvj = qt_attn_load16(dvb + j * kstride + d0);
    qt_attn_v16 dkj = qt_attn_load16(dkb + j * kstride + d0);
#pragma GCC unroll 8
    for (int r = 0; r < QT_ATTN_G; r++) {
        if (!full && (r >= rr || j > i0 + r)) continue;
        const qt_real p = P[QT_ATTN_PIX(r, j - j0)], ds = DS[QT_ATTN_PIX(r, j - j0)];
        dvj = qt_attn_fma16s(p, dov[r], dvj);
        dkj = qt_attn_fma16s(ds, qv[r], dkj);
        dqv[r] = qt_attn_fma16s(ds, kj, dqv[r]);
    }
    memcpy(dvb + j * kstride + d0, &dvj, sizeof dvj);
    memcpy(dkb + j * kstride + d0, &dkj, sizeof dkj);
}

/* A full tile (eight rows, every key j <= i0, a multiple of four keys, hd % 32 == 0) in two
 * register-tiled passes with the same per-element orders as the fused form below:
 * dv_j += p_ij do_i and dk_j += ds_ij q_i with four keys x 32 elements of dv and dk in
 * registers while the rows pass in increasing order, then dq_i += ds_ij k_j with eight
 * rows x 32 elements of dq in registers while the keys pass in increasing order.
 * The eight rows' do and q are first copied into qt_attn_upk as [hd/32][8 rows][32], so the
 * row loop walks one pointer (the rows in place at their stride took sixteen pointers,
 * which gcc kept on the stack: a reload per row load; ~35 instructions per 16 FMAs). */
static qt_real qt_attn_upk[2][QT_ATTN_G * QT_ATTN_PACK_HD];
static void qt_attn_bwd_tile_update_full(qt_real *dqb, qt_real *dkb, qt_real *dvb,
                                         const qt_real *qb, const qt_real *dob,
                                         const qt_real *kb, const qt_real *P, const qt_real *DS,
                                         int64_t qstride, int64_t kstride, int64_t j0,
                                         int64_t j1, int64_t hd)
{
    for (int r = 0; r < QT_ATTN_G; r++)
        for (int64_t d0 = 0; d0 < hd; d0 += 32) {
            memcpy(qt_attn_upk[0] + d0 * QT_ATTN_G + r * 32, dob + r * qstride + d0,
                   32 * sizeof(qt_real));
            memcpy(qt_attn_upk[1] + d0 * QT_ATTN_G + r * 32, qb + r * qstride + d0,
                   32 * sizeof(qt_real));
        }
    for (int64_t d0 = 0; d0 < hd; d0 += 32) {
        const qt_real *dop = qt_attn_upk[0] + d0 * QT_ATTN_G, *qp = qt_attn_upk[1] + d0 * QT_ATTN_G;
        for (int64_t j = j0; j < j1; j += 4) {
            qt_attn_v16 av[4][2], ak[4][2];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                for (int w = 0; w < 2; w++) {
                    av[t][w] = qt_attn_load16(dvb + (j + t) * kstride + d0 + 16 * w);
                    ak[t][w] = qt_attn_load16(dkb + (j + t) * kstride + d0 + 16 * w);
                }
            for (int r = 0; r < QT_ATTN_G; r++) {
                const qt_attn_v16 do0 = qt_attn_load16(dop + r * 32),
                                  do1 = qt_attn_load16(dop + r * 32 + 16),
                                  q0 = qt_attn_load16(qp + r * 32),
                                  q1 = qt_attn_load16(qp + r * 32 + 16);
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    const qt_real p = P[QT_ATTN_PIX(r, j - j0 + t)],
                                  ds = DS[QT_ATTN_PIX(r, j - j0 + t)];
                    av[t][0] = qt_attn_fma16s(p, do0, av[t][0]);
                    av[t][1] = qt_attn_fma16s(p, do1, av[t][1]);
                    ak[t][0] = qt_attn_fma16s(ds, q0, ak[t][0]);
                    ak[t][1] = qt_attn_fma16s(ds, q1, ak[t][1]);
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                for (int w = 0; w < 2; w++) {
                    memcpy(dvb + (j + t) * kstride + d0 + 16 * w, &av[t][w], sizeof av[t][w]);
                    memcpy(dkb + (j + t) * kstride + d0 + 16 * w, &ak[t][w], sizeof ak[t][w]);
                }
        }
        qt_attn_v16 aq[QT_ATTN_G][2];
#pragma GCC unroll 8
        for (int r = 0; r < QT_ATTN_G; r++)
            for (int w = 0; w < 2; w++) aq[r][w] = qt_attn_load16(dqb + r * qstride + d0 + 16 * w);
        for (int64_t j = j0; j < j1; j++) {
            const qt_attn_v16 k0 = qt_attn_load16(kb + j * kstride + d0),
                              k1 = qt_attn_load16(kb + j * kstride + d0 + 16);
#pragma GCC unroll 8
            for (int r = 0; r < QT_ATTN_G; r++) {
                const qt_real ds = DS[QT_ATTN_PIX(r, j - j0)];
                aq[r][0] = qt_attn_fma16s(ds, k0, aq[r][0]);
                aq[r][1] = qt_attn_fma16s(ds, k1, aq[r][1]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < QT_ATTN_G; r++)
            for (int w = 0; w < 2; w++)
                memcpy(dqb + r * qstride + d0 + 16 * w, &aq[r][w], sizeof aq[r][w]);
    }
}

/* The tile's gradient updates, one 16-wide slice of hd at a time: for keys j in [j0, j1)
 * increasing, rows r < rr with i0 + r >= j increasing: dv_j += p_ij do_i, dk_j += ds_ij q_i,
 * dq_i += ds_ij k_j (the rows' q, do and dq slices in registers). */
static void qt_attn_bwd_tile_update(qt_real *dqb, qt_real *dkb, qt_real *dvb, const qt_real *qb,
                                    const qt_real *dob, const qt_real *kb, const qt_real *P,
                                    const qt_real *DS, int64_t qstride, int64_t kstride,
                                    int64_t i0, int rr, int64_t j0, int64_t j1, int64_t hd)
{
    if (rr == QT_ATTN_QB && j1 <= i0 + 1 && (j1 - j0) % 4 == 0 && hd % 32 == 0) {
        qt_attn_bwd_tile_update_full(dqb, dkb, dvb, qb, dob, kb, P, DS, qstride, kstride, j0, j1,
                                     hd);
        return;
    }
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
        qt_attn_v16 qv[QT_ATTN_QB], dov[QT_ATTN_QB], dqv[QT_ATTN_QB];
        for (int r = 0; r < QT_ATTN_QB; r++) {
            if (r >= rr) { qv[r] = dov[r] = dqv[r] = (qt_attn_v16){0}; continue; }
            qv[r] = qt_attn_load16(qb + r * qstride + d0);
            dov[r] = qt_attn_load16(dob + r * qstride + d0);
            dqv[r] = qt_attn_load16(dqb + r * qstride + d0);
        }
        /* keys every row sees (a full block, j <= i0) without per-row tests, then the rest */
        const int64_t jf = rr < QT_ATTN_QB ? j0 : j1 < i0 + 1 ? j1 : i0 + 1;
        int64_t j = j0;
        for (; j < jf; j++)
            qt_attn_bwd_key_update(dqv, qv, dov, dkb, dvb, kb, P, DS, kstride, d0, j, j0, i0,
                                   QT_ATTN_QB, 1);
        for (; j < j1; j++)
            qt_attn_bwd_key_update(dqv, qv, dov, dkb, dvb, kb, P, DS, kstride, d0, j, j0, i0, rr,
                                   0);
        for (int r = 0; r < rr; r++) memcpy(dqb + r * qstride + d0, &dqv[r], sizeof dqv[r]);
    }
}

/* One (sequence, head) in key-block order (see above). */
static qt_real qt_attn_kvp[2][QT_ATTN_BWD_KEYS * QT_ATTN_PACK_HD]; /* packed key block */
static void qt_attn_bwd_keyblocks(qt_real *dq, qt_real *dkb, qt_real *dvb, const qt_real *dout,
                                  const qt_real *q, const qt_real *o, const qt_real *kb,
                                  const qt_real *vb, const qt_real *lse, qt_real *scratch,
                                  int64_t S, int64_t qstride, int64_t kstride, int64_t hd,
                                  qt_real scale)
{
    qt_real *D = scratch, *P = scratch + QT_ATTN_R * S, *DS = P + QT_ATTN_QB * QT_ATTN_BWD_KEYS;
    /* D_i = do_i . o_i is the softmax-Jacobian's row term. */
    for (int64_t i = 0; i < S; i++) D[i] = qt_attn_dot(dout + i * qstride, o + i * qstride, hd);
    for (int64_t j0 = 0; j0 < S; j0 += QT_ATTN_BWD_KEYS) {
        const int64_t j1 = S - j0 < QT_ATTN_BWD_KEYS ? S : j0 + QT_ATTN_BWD_KEYS;
        for (int64_t g = j0; g < j1; g += QT_ATTN_G) {
            const int ng = (int)(j1 - g < QT_ATTN_G ? j1 - g : QT_ATTN_G);
            qt_attn_pack8(qt_attn_kvp[0] + (g - j0) * hd, kb + g * kstride, kstride, ng, hd);
            qt_attn_pack8(qt_attn_kvp[1] + (g - j0) * hd, vb + g * kstride, kstride, ng, hd);
        }
        /* the query blocks that see a key of [j0, j1): rows from j0 (a multiple of QB) on */
        for (int64_t i0 = j0; i0 < S; i0 += QT_ATTN_QB) {
            const int rr = (int)(S - i0 < QT_ATTN_QB ? S - i0 : QT_ATTN_QB);
            const int64_t qo = i0 * qstride;
            qt_attn_bwd_tile(P, DS, qt_attn_kvp[0], qt_attn_kvp[1], q + qo, dout + qo, qstride,
                             i0, rr, j0, j1, hd, scale, lse + i0, D + i0);
            qt_attn_bwd_tile_update(dq + qo, dkb, dvb, q + qo, dout + qo, kb, P, DS, qstride,
                                    kstride, i0, rr, j0, j1, hd);
        }
    }
}

static void QT_FN(qt_attn_bwd_n_ld)(qt_real *dq, qt_real *dk, qt_real *dv, const qt_real *dout,
                          const qt_real *q, const qt_real *k, const qt_real *v,
                          const qt_real *o, const qt_real *lse, qt_real *scratch,
                          int64_t scratch_n, int64_t b, int64_t S, int64_t ldl, int64_t Hq, int64_t Hkv,
                          int64_t hd, qt_real scale)
{
    if (hd % 16 || scratch_n < QT_ATTN_BWD_SCRATCH(S)) {
        QT_FN(qt_attn_bwd_ref_ld)(dq, dk, dv, dout, q, k, v, o, lse, scratch, b, S, ldl, Hq,
                                  Hkv, hd, scale);
        return;
    }
    const int64_t group = Hq / Hkv;
    const int64_t kstride = Hkv * hd, qstride = Hq * hd;
    qt_real *P = scratch, *DS = scratch + QT_ATTN_R * S;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h / group;
            const int64_t kvoff = s * S * kstride + g * hd;
            const qt_real *kb = k + kvoff, *vb = v + kvoff;
            qt_real *dkb = dk + kvoff, *dvb = dv + kvoff;
            if (scratch_n >= QT_ATTN_BWD_KB_SCRATCH(S) && hd <= QT_ATTN_PACK_HD) {
                const int64_t qoff = (s * S * Hq + h) * hd;
                qt_attn_bwd_keyblocks(dq + qoff, dkb, dvb, dout + qoff, q + qoff, o + qoff, kb,
                                      vb, lse + (s * Hq + h) * ldl, scratch, S, qstride, kstride,
                                      hd, scale);
                continue;
            }
            int64_t i = 0;
            for (; i + QT_ATTN_R <= S; i += QT_ATTN_R) {
                const int64_t qoff = ((s * S + i) * Hq + h) * hd;
                qt_attn_bwd_rows(P, DS, S, q + qoff, dout + qoff, o + qoff, qstride, kb, vb,
                                 kstride, i, hd, scale, lse + (s * Hq + h) * ldl + i);
                qt_attn_bwd_block(dq + qoff, dkb, dvb, q + qoff, dout + qoff, kb, P, DS, S,
                                  qstride, kstride, i, hd);
            }
            for (; i < S; i++) { /* the last S % R rows, one at a time */
                const int64_t qoff = ((s * S + i) * Hq + h) * hd;
                const qt_real *qi = q + qoff, *doi = dout + qoff;
                qt_real *dqi = dq + qoff;
                qt_attn_bwd_row(P, DS, qi, doi, o + qoff, kb, vb, kstride, i, hd, scale,
                                lse[(s * Hq + h) * ldl + i]);
                for (int64_t j = 0; j <= i; j++) qt_attn_axpy(dvb + j * kstride, P[j], doi, hd);
                for (int64_t j = 0; j <= i; j++) {
                    qt_attn_axpy(dqi, DS[j], kb + j * kstride, hd);
                    qt_attn_axpy(dkb + j * kstride, DS[j], qi, hd);
                }
            }
        }
    }
}

void QT_FN(qt_attn_bwd)(qt_real *dq, qt_real *dk, qt_real *dv, const qt_real *dout,
                        const qt_real *q, const qt_real *k, const qt_real *v, const qt_real *o,
                        const qt_real *lse, qt_real *scratch, int64_t b, int64_t S, int64_t Hq,
                        int64_t Hkv, int64_t hd, qt_real scale)
{
    QT_FN(qt_attn_bwd_n_ld)(dq, dk, dv, dout, q, k, v, o, lse, scratch, S, b, S, S, Hq, Hkv,
                            hd, scale);
}

/* The public forms over whole sequences: the lse row stride is S. */
void QT_FN(qt_attn_fwd_ref)(qt_real *o, qt_real *lse, const qt_real *q, const qt_real *k,
                            const qt_real *v, qt_real *scratch, int64_t b, int64_t S,
                            int64_t Hq, int64_t Hkv, int64_t hd, qt_real scale)
{
    QT_FN(qt_attn_fwd_ref_ld)(o, lse, q, k, v, scratch, b, S, S, Hq, Hkv, hd, scale);
}

void QT_FN(qt_attn_bwd_ref)(qt_real *dq, qt_real *dk, qt_real *dv, const qt_real *dout,
                            const qt_real *q, const qt_real *k, const qt_real *v,
                            const qt_real *o, const qt_real *lse, qt_real *scratch, int64_t b,
                            int64_t S, int64_t Hq, int64_t Hkv, int64_t hd, qt_real scale)
{
    QT_FN(qt_attn_bwd_ref_ld)(dq, dk, dv, dout, q, k, v, o, lse, scratch, b, S, S, Hq, Hkv, hd,
                              scale);
}

void QT_FN(qt_attn_fwd)(qt_real *o, qt_real *lse, const qt_real *q, const qt_real *k,
                        const qt_real *v, qt_real *scratch, int64_t b, int64_t S, int64_t Hq,
                        int64_t Hkv, int64_t hd, qt_real scale)
{
    QT_FN(qt_attn_fwd_ld)(o, lse, q, k, v, scratch, b, S, S, Hq, Hkv, hd, scale);
}

void QT_FN(qt_attn_bwd_n)(qt_real *dq, qt_real *dk, qt_real *dv, const qt_real *dout,
                          const qt_real *q, const qt_real *k, const qt_real *v,
                          const qt_real *o, const qt_real *lse, qt_real *scratch,
                          int64_t scratch_n, int64_t b, int64_t S, int64_t Hq, int64_t Hkv,
                          int64_t hd, qt_real scale)
{
    QT_FN(qt_attn_bwd_n_ld)(dq, dk, dv, dout, q, k, v, o, lse, scratch, scratch_n, b, S, S, Hq,
                            Hkv, hd, scale);
}

/* Packed documents: the length of the document that starts at row a of a sequence of S
 * rows (it runs until the next row whose position is 0). */
static int64_t qt_attn_doc_len(const int32_t *pos, int64_t a, int64_t S)
{
    int64_t L = 1;
    while (a + L < S && pos[a + L] != 0) L++;
    return L;
}

void QT_FN(qt_attn_fwd_docs)(qt_real *o, qt_real *lse, const qt_real *q, const qt_real *k,
                             const qt_real *v, qt_real *scratch, const int32_t *pos, int64_t b,
                             int64_t S, int64_t Hq, int64_t Hkv, int64_t hd, qt_real scale)
{
    if (!pos) {
        QT_FN(qt_attn_fwd_ld)(o, lse, q, k, v, scratch, b, S, S, Hq, Hkv, hd, scale);
        return;
    }
    const int64_t qs = Hq * hd, ks = Hkv * hd;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t a = 0, L; a < S; a += L) {
            const int64_t r = s * S + a;
            L = qt_attn_doc_len(pos + s * S, a, S);
            QT_FN(qt_attn_fwd_ld)(o + r * qs, lse + s * Hq * S + a, q + r * qs, k + r * ks,
                                  v + r * ks, scratch, 1, L, S, Hq, Hkv, hd, scale);
        }
    }
}

void QT_FN(qt_attn_bwd_docs)(qt_real *dq, qt_real *dk, qt_real *dv, const qt_real *dout,
                             const qt_real *q, const qt_real *k, const qt_real *v,
                             const qt_real *o, const qt_real *lse, const int32_t *pos,
                             qt_real *scratch, int64_t scratch_n, int64_t b, int64_t S,
                             int64_t Hq, int64_t Hkv, int64_t hd, qt_real scale)
{
    if (!pos) {
        QT_FN(qt_attn_bwd_n_ld)(dq, dk, dv, dout, q, k, v, o, lse, scratch, scratch_n, b, S, S,
                                Hq, Hkv, hd, scale);
        return;
    }
    const int64_t qs = Hq * hd, ks = Hkv * hd;
    for (int64_t s = 0; s < b; s++) {
        for (int64_t a = 0, L; a < S; a += L) {
            const int64_t r = s * S + a;
            L = qt_attn_doc_len(pos + s * S, a, S);
            QT_FN(qt_attn_bwd_n_ld)(dq + r * qs, dk + r * ks, dv + r * ks, dout + r * qs,
                                    q + r * qs, k + r * ks, v + r * ks, o + r * qs,
                                    lse + s * Hq * S + a, scratch, scratch_n, 1, L, S, Hq, Hkv,
                                    hd, scale);
        }
    }
}
