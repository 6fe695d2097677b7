/* bf16_matmul.c - bf16 matmuls (contract and summation order: bf16_matmul.h).
 *
 * One generic contraction C[I,J] over P with A(i,p) = a[i*sai + p*sap] and
 * B(p,j) = b[p*sbp + j*sbj] (bf16), then a per-kernel finish (write, add, (+0) + acc; NaN
 * to 0x7fc00000). Three paths with the same bits:
 *  - scalar reference: the pair chain of bf16_matmul.h through qt_bf16_fma_ref;
 *  - AVX2+FMA emulation: A and B packed WIDENED to fp32 (per pair a hi row and a lo row),
 *    an MR x 16 register tile doing per pair the hi FMA, then the lo FMA, under
 *    MXCSR.FTZ|DAZ (x86's flush rule = the step's), restored before the finish;
 *  - AVX512_BF16: A packed as 32-bit pairs in [q][MR] micro-panels, B as [q][32] pair
 *    strips, an MR x 32 register tile of VDPBF16PS.
 * The vector paths block the contraction in KQ pairs; a block's partial chain is stored in
 * the static tile `part` as fp32 and reloaded by the next block (exact), and the finish reads
 * `part` after the last block. Odd P: the packed hi element of the last pair is +0.
 * Invariants: no heap; the panels and the partial tile are one static module struct; padded
 * rows/columns are zero and never stored; MXCSR is restored before any output is written.
 */
#ifndef QT_REAL_DOUBLE
#include "bf16_matmul.h"

#if defined(__AVX2__) && defined(__FMA__)
#define QT_BM_EMUL 1
#include <immintrin.h>
#endif
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define QT_BM_INSN 1
#endif

#define QT_BM_FIN_WRITE 0 /* out = acc */
#define QT_BM_FIN_ADD 1   /* out = out + acc */
#define QT_BM_FIN_ZADD 2  /* out = (+0) + acc */

/* *o = the finish of acc (reads *o only for the add). */
static inline void qt_bm_finish1(float *o, float acc, int fin)
{
    const float r = fin == QT_BM_FIN_ADD ? *o + acc : fin == QT_BM_FIN_ZADD ? 0.0f + acc : acc;
    *o = r != r ? qt_bf16_f32_bits(0x7fc00000u) : r;
}

/* ------------------------------------------------------------------ scalar reference */
static void qt_bm_ref(float *c, int64_t ldc, int fin, const qt_bf16 *a, int64_t sai,
                      int64_t sap, const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t I,
                      int64_t J, int64_t P)
{
    for (int64_t i = 0; i < I; i++)
        for (int64_t j = 0; j < J; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < P; p += 2) {
                const float ahi = p + 1 < P ? qt_f32_from_bf16(a[i * sai + (p + 1) * sap]) : 0.0f;
                const float bhi = p + 1 < P ? qt_f32_from_bf16(b[(p + 1) * sbp + j * sbj]) : 0.0f;
                acc = qt_bf16_fma_ref(ahi, bhi, acc);
                acc = qt_bf16_fma_ref(qt_f32_from_bf16(a[i * sai + p * sap]),
                                      qt_f32_from_bf16(b[p * sbp + j * sbj]), acc);
            }
            qt_bm_finish1(c + i * ldc + j, acc, fin);
        }
}

/* ------------------------------------------------------------------ vector paths */
#if defined(QT_BM_EMUL) || defined(QT_BM_INSN)
#define QT_BM_NC 256  /* columns per panel */
#define QT_BM_MC 192  /* rows per A block / partial tile */
#define QT_BM_KQ 256  /* pairs per contraction block */
#define QT_BM_E_MR 6  /* emulation tile: 6 x 16 (12 ymm accumulators) */
#define QT_BM_E_NR 16
#define QT_BM_I_MR 12 /* instruction tile: 12 x 32 (24 zmm accumulators) */
#define QT_BM_I_NR 32

static struct {
    float part[QT_BM_MC * QT_BM_NC];             /* partial chains between blocks */
    float ea[QT_BM_MC * QT_BM_KQ * 2];            /* emulation: A widened, [q][hi,lo][MR] */
    float eb[QT_BM_KQ * 2 * QT_BM_NC];            /* emulation: B widened, [q][hi,lo][NR] */
    uint32_t ia[QT_BM_MC * QT_BM_KQ];             /* instruction: A pairs, [q][MR] */
    uint32_t ib[QT_BM_KQ * QT_BM_NC];             /* instruction: B pairs, [q][NR] */
} qt_bm;

static int64_t qt_bm_min(int64_t x, int64_t y) { return x < y ? x : y; }

/* The bf16 of A(i, p) (0 past P). */
static inline qt_bf16 qt_bm_at(const qt_bf16 *m, int64_t s0, int64_t s1, int64_t x, int64_t p,
                               int64_t P)
{
    return p < P ? m[x * s0 + p * s1] : (qt_bf16)0;
}

/* The finish of one block's rows [0,mc) x cols [0,nc) of part into c (default MXCSR). */
static void qt_bm_finish(float *c, int64_t ldc, int fin, int64_t mc, int64_t nc)
{
    for (int64_t i = 0; i < mc; i++)
        for (int64_t j = 0; j < nc; j++)
            qt_bm_finish1(c + i * ldc + j, qt_bm.part[i * QT_BM_NC + j], fin);
}
#endif

#ifdef QT_BM_EMUL
/* Pack A rows [0,mc) of pairs [q0, q0+kq) into micro-panels ea[(ir/MR)*kq*2*MR + q*2*MR +
 * {0: hi, MR: lo} + i%MR], widened. */
static void qt_bm_e_pack_a(const qt_bf16 *a, int64_t sai, int64_t sap, int64_t mc, int64_t q0,
                           int64_t kq, int64_t P)
{
    for (int64_t ir = 0; ir < mc; ir += QT_BM_E_MR) {
        float *dst = qt_bm.ea + ir * kq * 2;
        const int64_t mr = qt_bm_min(QT_BM_E_MR, mc - ir);
        for (int64_t i = 0; i < mr; i++)
            for (int64_t q = 0; q < kq; q++) {
                const int64_t p = 2 * (q0 + q);
                dst[q * 2 * QT_BM_E_MR + i] = qt_f32_from_bf16(qt_bm_at(a, sai, sap, ir + i, p + 1, P));
                dst[q * 2 * QT_BM_E_MR + QT_BM_E_MR + i] = qt_f32_from_bf16(qt_bm_at(a, sai, sap, ir + i, p, P));
            }
    }
}

/* Pack B cols [0,nc) of pairs [q0, q0+kq) into strips eb[s*kq*2*NR + q*2*NR + {0,NR} + jj],
 * widened, zero padded. */
static void qt_bm_e_pack_b(const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t nc, int64_t q0,
                           int64_t kq, int64_t P)
{
    for (int64_t s = 0; s * QT_BM_E_NR < nc; s++) {
        float *dst = qt_bm.eb + s * kq * 2 * QT_BM_E_NR;
        for (int64_t jj = 0; jj < QT_BM_E_NR; jj++) {
            const int64_t j = s * QT_BM_E_NR + jj;
            for (int64_t q = 0; q < kq; q++) {
                const int64_t p = 2 * (q0 + q);
                dst[q * 2 * QT_BM_E_NR + jj] = j < nc ? qt_f32_from_bf16(qt_bm_at(b, sbj, sbp, j, p + 1, P)) : 0.0f;
                dst[q * 2 * QT_BM_E_NR + QT_BM_E_NR + jj] = j < nc ? qt_f32_from_bf16(qt_bm_at(b, sbj, sbp, j, p, P)) : 0.0f;
            }
        }
    }
}

/* One tile: mr rows x 16 cols of part, chain over kq pairs from part (first: from +0). */
static inline __attribute__((always_inline)) void
qt_bm_e_tile(float *pt, int first, const float *ap, const float *bp, int64_t kq, const int mr)
{
    __m256 acc[QT_BM_E_MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        acc[i][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(pt + i * QT_BM_NC);
        acc[i][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(pt + i * QT_BM_NC + 8);
    }
    for (int64_t q = 0; q < kq; q++) {
        const float *a = ap + q * 2 * QT_BM_E_MR;
        const float *b = bp + q * 2 * QT_BM_E_NR;
        const __m256 bh0 = _mm256_loadu_ps(b), bh1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const __m256 av = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(av, bh0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, bh1, acc[i][1]);
        }
        const __m256 bl0 = _mm256_loadu_ps(b + QT_BM_E_NR), bl1 = _mm256_loadu_ps(b + QT_BM_E_NR + 8);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const __m256 av = _mm256_broadcast_ss(a + QT_BM_E_MR + i);
            acc[i][0] = _mm256_fmadd_ps(av, bl0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, bl1, acc[i][1]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        _mm256_storeu_ps(pt + i * QT_BM_NC, acc[i][0]);
        _mm256_storeu_ps(pt + i * QT_BM_NC + 8, acc[i][1]);
    }
}

/* Every tile of a packed block; runs under FTZ|DAZ (set by the caller). part columns past
 * nc up to the strip width are computed from zero padding and never finished. */
__attribute__((noinline)) static void qt_bm_e_block(int first, int64_t mc, int64_t nc, int64_t kq)
{
    for (int64_t ir = 0; ir < mc; ir += QT_BM_E_MR) {
        const int mr = (int)qt_bm_min(QT_BM_E_MR, mc - ir);
        const float *ap = qt_bm.ea + ir * kq * 2;
        for (int64_t s = 0; s * QT_BM_E_NR < nc; s++) {
            float *pt = qt_bm.part + ir * QT_BM_NC + s * QT_BM_E_NR;
            const float *bp = qt_bm.eb + s * kq * 2 * QT_BM_E_NR;
            switch (mr) {
            case 1: qt_bm_e_tile(pt, first, ap, bp, kq, 1); break;
            case 2: qt_bm_e_tile(pt, first, ap, bp, kq, 2); break;
            case 3: qt_bm_e_tile(pt, first, ap, bp, kq, 3); break;
            case 4: qt_bm_e_tile(pt, first, ap, bp, kq, 4); break;
            case 5: qt_bm_e_tile(pt, first, ap, bp, kq, 5); break;
            default: qt_bm_e_tile(pt, first, ap, bp, kq, 6); break;
            }
        }
    }
}

static void qt_bm_emul(float *c, int64_t ldc, int fin, const qt_bf16 *a, int64_t sai,
                       int64_t sap, const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t I,
                       int64_t J, int64_t P)
{
    const int64_t nq = (P + 1) / 2;
    const int64_t mcb = QT_BM_MC / QT_BM_E_MR * QT_BM_E_MR;
    for (int64_t ic = 0; ic < I; ic += mcb) {
        const int64_t mc = qt_bm_min(mcb, I - ic);
        for (int64_t jc = 0; jc < J; jc += QT_BM_NC) {
            const int64_t nc = qt_bm_min(QT_BM_NC, J - jc);
            if (nq == 0)
                for (int64_t i = 0; i < mc * QT_BM_NC; i++) qt_bm.part[i] = 0.0f;
            for (int64_t qc = 0; qc < nq; qc += QT_BM_KQ) {
                const int64_t kq = qt_bm_min(QT_BM_KQ, nq - qc);
                qt_bm_e_pack_a(a + ic * sai, sai, sap, mc, qc, kq, P);
                qt_bm_e_pack_b(b + jc * sbj, sbp, sbj, nc, qc, kq, P);
                const unsigned csr = _mm_getcsr();
                _mm_setcsr(csr | 0x8040u); /* FTZ | DAZ: the step's flushing */
                qt_bm_e_block(qc == 0, mc, nc, kq);
                _mm_setcsr(csr);
            }
            qt_bm_finish(c + ic * ldc + jc, ldc, fin, mc, nc);
        }
    }
}
#endif

#ifdef QT_BM_INSN
/* Pack A rows [0,mc) of pairs [q0, q0+kq) into ia[(ir/MR)*kq*MR + q*MR + i%MR]. */
static void qt_bm_i_pack_a(const qt_bf16 *a, int64_t sai, int64_t sap, int64_t mc, int64_t q0,
                           int64_t kq, int64_t P)
{
    for (int64_t ir = 0; ir < mc; ir += QT_BM_I_MR) {
        uint32_t *dst = qt_bm.ia + ir * kq;
        const int64_t mr = qt_bm_min(QT_BM_I_MR, mc - ir);
        for (int64_t i = 0; i < mr; i++) {
            if (sap == 1 && 2 * (q0 + kq) <= P) { /* contiguous pairs: one 32-bit load each */
                const qt_bf16 *src = a + (ir + i) * sai + 2 * q0;
                for (int64_t q = 0; q < kq; q++) {
                    uint32_t v;
                    memcpy(&v, src + 2 * q, sizeof v);
                    dst[q * QT_BM_I_MR + i] = v;
                }
                continue;
            }
            for (int64_t q = 0; q < kq; q++) {
                const int64_t p = 2 * (q0 + q);
                dst[q * QT_BM_I_MR + i] = (uint32_t)qt_bm_at(a, sai, sap, ir + i, p, P) |
                                          (uint32_t)qt_bm_at(a, sai, sap, ir + i, p + 1, P) << 16;
            }
        }
    }
}

/* Pack B cols [0,nc) of pairs [q0, q0+kq) into strips ib[s*kq*NR + q*NR + jj], zero padded. */
static void qt_bm_i_pack_b(const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t nc, int64_t q0,
                           int64_t kq, int64_t P)
{
    for (int64_t s = 0; s * QT_BM_I_NR < nc; s++) {
        uint32_t *dst = qt_bm.ib + s * kq * QT_BM_I_NR;
        const int64_t j0 = s * QT_BM_I_NR, w = qt_bm_min(QT_BM_I_NR, nc - j0);
        if (sbj == 1) { /* rows contiguous in j: interleave two rows */
            for (int64_t q = 0; q < kq; q++) {
                const int64_t p = 2 * (q0 + q);
                const qt_bf16 *lo = b + p * sbp + j0, *hi = b + (p + 1) * sbp + j0;
                const int has_hi = p + 1 < P;
                int64_t jj = 0;
                for (; jj < w; jj++)
                    dst[q * QT_BM_I_NR + jj] = (uint32_t)lo[jj] | (has_hi ? (uint32_t)hi[jj] << 16 : 0u);
                for (; jj < QT_BM_I_NR; jj++) dst[q * QT_BM_I_NR + jj] = 0;
            }
            continue;
        }
        for (int64_t jj = 0; jj < QT_BM_I_NR; jj++) {
            const int64_t j = j0 + jj;
            for (int64_t q = 0; q < kq; q++) {
                const int64_t p = 2 * (q0 + q);
                dst[q * QT_BM_I_NR + jj] = jj < w ? (uint32_t)qt_bm_at(b, sbj, sbp, j, p, P) |
                                                    (uint32_t)qt_bm_at(b, sbj, sbp, j, p + 1, P) << 16
                                                  : 0u;
            }
        }
    }
}

static inline __attribute__((always_inline)) void
qt_bm_i_tile(float *pt, int first, const uint32_t *ap, const uint32_t *bp, int64_t kq, const int mr)
{
    __m512 acc[QT_BM_I_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        acc[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(pt + i * QT_BM_NC);
        acc[i][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(pt + i * QT_BM_NC + 16);
    }
    for (int64_t q = 0; q < kq; q++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * QT_BM_I_NR);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + q * QT_BM_I_NR + 16);
        const uint32_t *a = ap + q * QT_BM_I_MR;
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_ps(pt + i * QT_BM_NC, acc[i][0]);
        _mm512_storeu_ps(pt + i * QT_BM_NC + 16, acc[i][1]);
    }
}

static void qt_bm_i_block(int first, int64_t mc, int64_t nc, int64_t kq)
{
    for (int64_t ir = 0; ir < mc; ir += QT_BM_I_MR) {
        const int mr = (int)qt_bm_min(QT_BM_I_MR, mc - ir);
        const uint32_t *ap = qt_bm.ia + ir * kq;
        for (int64_t s = 0; s * QT_BM_I_NR < nc; s++) {
            float *pt = qt_bm.part + ir * QT_BM_NC + s * QT_BM_I_NR;
            const uint32_t *bp = qt_bm.ib + s * kq * QT_BM_I_NR;
#define QT_BM_CASE(h) case h: qt_bm_i_tile(pt, first, ap, bp, kq, h); break;
            switch (mr) {
            QT_BM_CASE(1) QT_BM_CASE(2) QT_BM_CASE(3) QT_BM_CASE(4) QT_BM_CASE(5) QT_BM_CASE(6)
            QT_BM_CASE(7) QT_BM_CASE(8) QT_BM_CASE(9) QT_BM_CASE(10) QT_BM_CASE(11)
            default: qt_bm_i_tile(pt, first, ap, bp, kq, 12); break;
            }
#undef QT_BM_CASE
        }
    }
}

static void qt_bm_insn(float *c, int64_t ldc, int fin, const qt_bf16 *a, int64_t sai,
                       int64_t sap, const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t I,
                       int64_t J, int64_t P)
{
    const int64_t nq = (P + 1) / 2;
    for (int64_t ic = 0; ic < I; ic += QT_BM_MC) {
        const int64_t mc = qt_bm_min(QT_BM_MC, I - ic);
        for (int64_t jc = 0; jc < J; jc += QT_BM_NC) {
            const int64_t nc = qt_bm_min(QT_BM_NC, J - jc);
            if (nq == 0)
                for (int64_t i = 0; i < mc * QT_BM_NC; i++) qt_bm.part[i] = 0.0f;
            for (int64_t qc = 0; qc < nq; qc += QT_BM_KQ) {
                const int64_t kq = qt_bm_min(QT_BM_KQ, nq - qc);
                qt_bm_i_pack_a(a + ic * sai, sai, sap, mc, qc, kq, P);
                qt_bm_i_pack_b(b + jc * sbj, sbp, sbj, nc, qc, kq, P);
                qt_bm_i_block(qc == 0, mc, nc, kq);
            }
            qt_bm_finish(c + ic * ldc + jc, ldc, fin, mc, nc);
        }
    }
}
#endif

/* ------------------------------------------------------------------ dispatch */
static int qt_bm_run(int path, float *c, int64_t ldc, int fin, const qt_bf16 *a, int64_t sai,
                     int64_t sap, const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t I,
                     int64_t J, int64_t P)
{
    switch (path) {
    case QT_BF16_PATH_REF: qt_bm_ref(c, ldc, fin, a, sai, sap, b, sbp, sbj, I, J, P); return 0;
#ifdef QT_BM_EMUL
    case QT_BF16_PATH_EMUL: qt_bm_emul(c, ldc, fin, a, sai, sap, b, sbp, sbj, I, J, P); return 0;
#endif
#ifdef QT_BM_INSN
    case QT_BF16_PATH_INSN: qt_bm_insn(c, ldc, fin, a, sai, sap, b, sbp, sbj, I, J, P); return 0;
#endif
    default: return -1;
    }
}

/* fwd: C = y[M,N], A(m,k) = x[m*K + k], B(k,n) = w[n*K + k]. */
int qt_bf16_matmul_fwd_on(int path, float *y, const qt_bf16 *x, const qt_bf16 *w, int64_t M,
                          int64_t N, int64_t K)
{
    return qt_bm_run(path, y, N, QT_BM_FIN_WRITE, x, K, 1, w, 1, K, M, N, K);
}

/* bwd_data: C = dx[M,K], A(m,n) = dy[m*N + n], B(n,k) = w[n*K + k]. */
int qt_bf16_matmul_bwd_data_on(int path, float *dx, const qt_bf16 *dy, const qt_bf16 *w,
                               int64_t M, int64_t N, int64_t K)
{
    return qt_bm_run(path, dx, K, QT_BM_FIN_ADD, dy, N, 1, w, K, 1, M, K, N);
}

/* wgrad: C = dw[N,K], A(n,m) = dy[m*N + n], B(m,k) = x[m*K + k]. */
int qt_bf16_matmul_wgrad_on(int path, float *dw, const qt_bf16 *dy, const qt_bf16 *x,
                            int64_t M, int64_t N, int64_t K)
{
    return qt_bm_run(path, dw, K, QT_BM_FIN_ZADD, dy, 1, N, x, K, 1, N, K, M);
}

void qt_bf16_matmul_fwd(float *y, const qt_bf16 *x, const qt_bf16 *w, int64_t M, int64_t N,
                        int64_t K)
{
    qt_bf16_matmul_fwd_on(qt_bf16_path(), y, x, w, M, N, K);
}

void qt_bf16_matmul_bwd_data(float *dx, const qt_bf16 *dy, const qt_bf16 *w, int64_t M,
                             int64_t N, int64_t K)
{
    qt_bf16_matmul_bwd_data_on(qt_bf16_path(), dx, dy, w, M, N, K);
}

void qt_bf16_matmul_wgrad(float *dw, const qt_bf16 *dy, const qt_bf16 *x, int64_t M,
                          int64_t N, int64_t K)
{
    qt_bf16_matmul_wgrad_on(qt_bf16_path(), dw, dy, x, M, N, K);
}
#endif
