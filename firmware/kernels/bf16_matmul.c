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
 *    strips, an MR x 32 register tile of VDPBF16PS;
 *  - AVX-512F wide emulation (QT_BF16_PATH_WIDE): the emulation's arithmetic (per pair the hi
 *    FMA, then the lo FMA, under MXCSR.FTZ|DAZ) on 16-lane FMAs, A widened into [q][hi,lo][MR]
 *    micro-panels, B widened into [q][hi 32 | lo 32] strips packed once per column panel, a
 *    12 x 32 register tile. Where VDPBF16PS issues at half the FMA rate (the Xeons here:
 *    docs/bench.md), this runs at the FMA rate: same bits, about twice the speed.
 * The vector paths block the contraction in KQ pairs; a block's partial chain is stored in
 * the static tile `part` as fp32 and reloaded by the next block (exact), and the finish reads
 * `part` after the last block (the instruction path finishes the last block in its tiles'
 * registers instead: the same operations per element). Odd P: the packed hi element of the
 * last pair is +0.
 * The writing weight gradient can store the leaf-tree carry of qt_leaf_carry.h in its finish
 * (every path): after (+0) + chain and the NaN fix, the levels are added with qt_tree_push's
 * operations in its order and the level is stored, the leaf never. On the instruction path
 * it also computes every leaf of an op in one pass (qt_bf16_matmul_wgrad_leaves: per tile
 * the leaves in order, each element's operations those of the calls in order).
 * The instruction path also finishes fwd and bwd_data into a bf16 output (qt_bm_v_fin16h:
 * the same finish, then bf16.h's qt_bf16_round16, the rounding of the pass it replaces).
 * The instruction path reads A's rows in place unless they lie a multiple of 4 KiB apart
 * (then each contraction block's rows are copied to padded rows first: the same words).
 * The weight gradient with a caller's store (qt_bf16_matmul_wgrad_ws_on) packs its A there
 * once for every column panel instead of once per panel (the same words).
 * The canonical blocked contractions of bf16_matmul_canon.h with an even slice run fused on
 * the instruction path (qt_bf16_mm_canon_insn): each block's chain in registers, the
 * pairwise tree merged in the tile epilogue through a small stack per 32-column strip, no
 * packed copies; a row panel runs block after block and, inside a block, strip after strip
 * (the block's A stays in L1 across the strips).
 * Invariants: no heap; the panels and the partial tile (also the canonical stacks) are one
 * static module struct; padded rows/columns are zero and never stored; MXCSR is restored
 * before any output is written.
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
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__FMA__)
#define QT_BM_WIDE 1
#endif
#if defined(QT_BM_INSN) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(QT_BF16_HAVE_V16)
#define QT_BM_I16 1 /* the instruction path's bf16 outputs (qt_bf16_matmul_fwd16_ld_on) */
#endif

#define QT_BM_FIN_WRITE 0 /* out = acc */
#define QT_BM_FIN_ADD 1   /* out = out + acc */
#define QT_BM_FIN_ZADD 2  /* out = (+0) + acc */
#define QT_BM_FIN_CARRY 3 /* out = the leaf-tree carry of the ZADD value (out in cy->dst) */

/* *o = the finish of acc (reads *o only for the add). The carry (cy, fin CARRY): the leaf
 * value r = (+0) + acc with its NaN fixed, then r = add[l][e] + r for l = 0..n-1 (e the
 * element's offset from cy->dst): qt_tree_push's additions on the stored leaf, in its order. */
static inline void qt_bm_finish1(float *o, float acc, int fin, const qt_leaf_carry *cy)
{
    float r = fin == QT_BM_FIN_ADD ? *o + acc : fin >= QT_BM_FIN_ZADD ? 0.0f + acc : acc;
    r = r != r ? qt_bf16_f32_bits(0x7fc00000u) : r;
    if (fin == QT_BM_FIN_CARRY)
        for (int32_t l = 0; l < cy->n; l++) r = cy->add[l][o - cy->dst] + r;
    *o = r;
}

/* ------------------------------------------------------------------ scalar reference */
static void qt_bm_ref(float *c, int64_t ldc, int fin, const qt_leaf_carry *cy,
                      const qt_bf16 *a, int64_t sai, int64_t sap, const qt_bf16 *b, int64_t sbp,
                      int64_t sbj, int64_t I, int64_t J, int64_t P)
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
            qt_bm_finish1(c + i * ldc + j, acc, fin, cy);
        }
}

/* ------------------------------------------------------------------ vector paths */
#if defined(QT_BM_EMUL) || defined(QT_BM_INSN) || defined(QT_BM_WIDE)
#define QT_BM_NC 256  /* columns per panel */
#define QT_BM_MC 192  /* rows per A block / partial tile */
#define QT_BM_KQ 256  /* pairs per contraction block */
#define QT_BM_E_MR 6  /* emulation tile: 6 x 16 (12 ymm accumulators) */
#define QT_BM_E_NR 16
#define QT_BM_I_MR 12 /* instruction tile: 12 x 32 (24 zmm accumulators) */
#define QT_BM_I_NR 32
#define QT_BM_I_PANEL (1 << 19) /* u32 pairs of the instruction path's B panel (2 MiB) */
#define QT_BM_I_APAD 16          /* pairs of padding per row of A's copied rows (64 bytes) */
#define QT_BM_W_MR 12 /* wide emulation tile: 12 x 32 (24 zmm accumulators) */
#define QT_BM_W_NR 32
#define QT_BM_W_PANEL (1 << 20) /* floats of the wide path's widened B panel (4 MiB) */
#define QT_BM_CANON_LOG 6        /* the fused canonical tiles: nb <= 2^6 blocks */
_Static_assert(QT_BM_NC / QT_BM_I_NR * (QT_BM_CANON_LOG + 1) * QT_BM_I_MR * QT_BM_I_NR <=
                   QT_BM_MC * QT_BM_NC,
               "a canonical stack per strip fits the partial tile");

static struct {
    float part[QT_BM_MC * QT_BM_NC];             /* partial chains between blocks; the fused
                                                    canonical tiles' stacks of subtotals */
    float ea[QT_BM_MC * QT_BM_KQ * 2];            /* emulations: A widened, [q][hi,lo][MR] */
    float eb[QT_BM_KQ * 2 * QT_BM_NC];            /* emulation: B widened, [q][hi,lo][NR] */
    uint32_t ia[QT_BM_MC * (QT_BM_KQ + QT_BM_I_APAD)]; /* instruction: A pairs, [q][mc], or
                                                    A's rows copied (qt_bm_i_copy_a) */
    uint32_t ib[QT_BM_I_PANEL];                   /* instruction: B panel, [s][q][NR] */
    int carry_stream;                             /* the carry's finish streams (wgrad_carry) */
    int mm_path, mm_path_chosen;                  /* qt_bf16_mm_path's choice, once made */
#ifdef QT_BM_WIDE
    float wb[QT_BM_W_PANEL];                      /* wide: B widened, [s][q][hi NR, lo NR] */
#endif
} qt_bm;

static int64_t qt_bm_min(int64_t x, int64_t y) { return x < y ? x : y; }

/* The bf16 of A(i, p) (0 past P). */
static inline qt_bf16 qt_bm_at(const qt_bf16 *m, int64_t s0, int64_t s1, int64_t x, int64_t p,
                               int64_t P)
{
    return p < P ? m[x * s0 + p * s1] : (qt_bf16)0;
}

/* The finish of one block's rows [0,mc) x cols [0,nc) of part into c (default MXCSR). */
static void qt_bm_finish(float *c, int64_t ldc, int fin, const qt_leaf_carry *cy, int64_t mc,
                         int64_t nc)
{
    for (int64_t i = 0; i < mc; i++)
        for (int64_t j = 0; j < nc; j++)
            qt_bm_finish1(c + i * ldc + j, qt_bm.part[i * QT_BM_NC + j], fin, cy);
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

static void qt_bm_emul(float *c, int64_t ldc, int fin, const qt_leaf_carry *cy,
                       const qt_bf16 *a, int64_t sai,
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
                _mm_setcsr(QT_BF16_EMUL_CSR(csr)); /* the step's flushing, RNE */
                qt_bm_e_block(qc == 0, mc, nc, kq);
                _mm_setcsr(csr);
            }
            qt_bm_finish(c + ic * ldc + jc, ldc, fin, cy, mc, nc);
        }
    }
}
#endif

#if defined(QT_BM_INSN) || defined(QT_BM_WIDE)
/* The finish of rows [0,mc) x cols [0,nc) of part into c (row stride ldc), 16 columns at a
 * time: the bits of qt_bm_finish1 (one IEEE add in the default MXCSR, NaN -> 0x7fc00000;
 * the carry's additions after it, vector for vector the scalar ones). A carry of a weight of
 * QT_BM_CARRY_STREAM floats or more stores its full aligned vectors non-temporally (as
 * matmul.c and tree.c do: the level is read again only after more leaves have passed
 * through the caches); the caller fences. Reads part (c for the add, the carry's addends);
 * writes c. */
/* l + r with l the instruction's first source: x86 returns the first source's NaN when both
 * are NaNs, and C lets the compiler commute a float +, so the operand order is pinned here.
 * qt_canon_tree's compiled loops (and qt_vec_add's) put the left operand first too; the
 * fused canonical tree keeps that, so a NaN meeting a NaN keeps the copying path's payload. */
static inline __m512 qt_bm_add_lr(__m512 l, __m512 r)
{
    __m512 o;
    __asm__("vaddps %2, %1, %0" : "=v"(o) : "v"(l), "v"(r));
    return o;
}

static inline __attribute__((always_inline)) void
qt_bm_v_fin16(float *o, __m512 r, __mmask16 m, int fin, const qt_leaf_carry *cy)
{
    if (!m) return;
    if (fin == QT_BM_FIN_ADD) r = _mm512_add_ps(_mm512_maskz_loadu_ps(m, o), r);
    else if (fin >= QT_BM_FIN_ZADD) r = _mm512_add_ps(_mm512_setzero_ps(), r);
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), r,
                             _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
    if (fin == QT_BM_FIN_CARRY) {
        const int64_t e = o - cy->dst;
        for (int32_t l = 0; l < cy->n; l++)
            r = qt_bm_add_lr(_mm512_maskz_loadu_ps(m, cy->add[l] + e), r);
        if (qt_bm.carry_stream && m == 0xffff && !((uintptr_t)o & 63)) {
            _mm512_stream_ps(o, r);
            return;
        }
    }
    _mm512_mask_storeu_ps(o, m, r);
}

/* The lanes [0, n) of a 16-lane vector (n clamped to [0, 16]). */
static inline __mmask16 qt_bm_lanes(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

#ifdef QT_BM_I16
/* The finish of 16 lanes into a bf16 output (the instruction path's bf16 forms): fin WRITE
 * or ADD (o's bf16 widened: exact), the NaN fix, then bf16.h's qt_bf16_round16 (the rounding
 * of qt_bf16_from_f32_n, the pass it replaces: VCVTNEPS2BF16), stored to lanes m of o. The
 * operations of qt_bm_v_fin16 on the widened output, then the rounding, per element. */
static inline __attribute__((always_inline)) void
qt_bm_v_fin16h(qt_bf16 *o, __m512 r, __mmask16 m, int fin)
{
    if (!m) return;
    if (fin == QT_BM_FIN_ADD) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, o));
        r = _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(h, 16)), r);
    }
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), r,
                             _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
    _mm256_mask_storeu_epi16(o, m, qt_bf16_round16(r));
}
#endif

static void qt_bm_v_finish(float *c, int64_t ldc, int fin, const qt_leaf_carry *cy,
                           int64_t mc, int64_t nc)
{
    for (int64_t i = 0; i < mc; i++) {
        float *o = c + i * ldc;
        const float *pr = qt_bm.part + i * QT_BM_NC;
        for (int64_t j = 0; j < nc; j += 16) {
            const __mmask16 m = qt_bm_lanes(nc - j);
            qt_bm_v_fin16(o + j, _mm512_maskz_loadu_ps(m, pr + j), m, fin, cy);
        }
    }
}

#endif

#ifdef QT_BM_INSN
/* Pack A rows [0,mc) of pairs [q0, q0+kq) into ia[q*mc + i] (32-bit pairs, lo | hi << 16;
 * past P: 0). Used where A's pairs are not contiguous in memory (wgrad: sai == 1, rows p and
 * p+1 interleaved, mc elements at a time) and for the block holding an odd P's last pair.
 * Reads a, writes ia[kq*mc] (qt_bm_i_pack_a_to: dst[kq*mc], a part of ia). */
static void qt_bm_i_pack_a_to(uint32_t *ia, const qt_bf16 *a, int64_t sai, int64_t sap,
                              int64_t mc, int64_t q0, int64_t kq, int64_t P)
{
    const int64_t qfull = qt_bm_min(kq, P / 2 - q0); /* pairs of the block with both halves */
    int64_t qs = 0;
    if (sai == 1) {
        for (int64_t q = 0; q < qfull; q++) {
            const qt_bf16 *lo = a + 2 * (q0 + q) * sap, *hi = lo + sap;
            uint32_t *d = ia + q * mc;
            for (int64_t i = 0; i < mc; i++) d[i] = (uint32_t)lo[i] | (uint32_t)hi[i] << 16;
        }
        qs = qfull;
    } else if (sap == 1) {
        for (int64_t i = 0; i < mc; i++) {
            const qt_bf16 *src = a + i * sai + 2 * q0;
            for (int64_t q = 0; q < qfull; q++) memcpy(ia + q * mc + i, src + 2 * q, 4);
        }
        qs = qfull;
    }
    for (int64_t q = qs; q < kq; q++) /* the rest: element by element */
        for (int64_t i = 0; i < mc; i++) {
            const int64_t p = 2 * (q0 + q);
            ia[q * mc + i] = (uint32_t)qt_bm_at(a, sai, sap, i, p, P) |
                             (uint32_t)qt_bm_at(a, sai, sap, i, p + 1, P) << 16;
        }
}

static void qt_bm_i_pack_a(const qt_bf16 *a, int64_t sai, int64_t sap, int64_t mc, int64_t q0,
                           int64_t kq, int64_t P)
{
    qt_bm_i_pack_a_to(qt_bm.ia, a, sai, sap, mc, q0, kq, P);
}

/* Whether A's rows, read in place by a tile, would all fall into one L1 set: a row stride
 * of a multiple of 4 KiB (the 12 rows of a tile then compete for the 8 ways of one set with
 * each step's B lines; measured 0.67x the speed at the bench model's lm_head data gradient,
 * dy rows of 4096 bf16). */
static int qt_bm_i_aliased(int64_t sai) { return sai >= 2048 && sai % 2048 == 0; }

/* Copy A's rows [0,mc), pairs [q0, q0+kq) (all with both halves: sap == 1), into ia as rows of
 * kq + QT_BM_I_APAD pairs (the row stride breaks the aliasing; the pairs are A's own words,
 * so the tile reads the same values). Returns the copy's row stride in bf16 units. */
static int64_t qt_bm_i_copy_a(const qt_bf16 *a, int64_t sai, int64_t mc, int64_t q0, int64_t kq)
{
    const int64_t lda = 2 * (kq + QT_BM_I_APAD);
    qt_bf16 *d = (qt_bf16 *)qt_bm.ia;
    for (int64_t i = 0; i < mc; i++) memcpy(d + i * lda, a + i * sai + 2 * q0, (size_t)kq * 4u);
    return lda;
}

/* Pack B cols [0,nc) of pairs [q0, q0+kq) into strips ib[s*kq*NR + q*NR + jj] (32-bit pairs,
 * lo | hi << 16; past P and past nc: 0). Reads b, writes ib[ceil(nc/NR)*kq*NR]
 * (qt_bm_i_pack_b_to: into a part of ib). */
static void qt_bm_i_pack_b_to(uint32_t *ib, const qt_bf16 *b, int64_t sbp, int64_t sbj,
                              int64_t nc, int64_t q0, int64_t kq, int64_t P)
{
    const int64_t qfull = qt_bm_min(kq, P / 2 - q0);
    const int64_t qs = qfull > 0 ? qfull : 0;
    for (int64_t s = 0; s * QT_BM_I_NR < nc; s++) {
        uint32_t *dst = ib + s * kq * QT_BM_I_NR;
        const int64_t j0 = s * QT_BM_I_NR, w = qt_bm_min(QT_BM_I_NR, nc - j0);
        if (sbj == 1) { /* rows contiguous in j: interleave rows p and p+1 */
            for (int64_t q = 0; q < qs; q++) {
                const qt_bf16 *lo = b + 2 * (q0 + q) * sbp + j0, *hi = lo + sbp;
                uint32_t *d = dst + q * QT_BM_I_NR;
                for (int64_t jj = 0; jj < w; jj++) d[jj] = (uint32_t)lo[jj] | (uint32_t)hi[jj] << 16;
            }
        } else if (sbp == 1) { /* pairs contiguous along p: a 32-bit load each (a transpose) */
            for (int64_t jj = 0; jj < w; jj++) {
                const qt_bf16 *src = b + (j0 + jj) * sbj + 2 * q0;
                for (int64_t q = 0; q < qs; q++) memcpy(dst + q * QT_BM_I_NR + jj, src + 2 * q, 4);
            }
        }
        const int64_t qr = sbj == 1 || sbp == 1 ? qs : 0;
        for (int64_t jj = 0; jj < QT_BM_I_NR; jj++) /* the rest, and the zero padding */
            for (int64_t q = jj < w ? qr : 0; q < kq; q++) {
                const int64_t p = 2 * (q0 + q);
                dst[q * QT_BM_I_NR + jj] = jj < w ? (uint32_t)qt_bm_at(b, sbj, sbp, j0 + jj, p, P) |
                                                    (uint32_t)qt_bm_at(b, sbj, sbp, j0 + jj, p + 1, P) << 16
                                                  : 0u;
            }
    }
}

static void qt_bm_i_pack_b(const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t nc, int64_t q0,
                           int64_t kq, int64_t P)
{
    qt_bm_i_pack_b_to(qt_bm.ib, b, sbp, sbj, nc, q0, kq, P);
}

/* The register tile's chains continued over kq pairs: acc[i][h] (rows i < mr, columns
 * 16h..16h+15) += VDPBF16PS of A's pair (i, q) at ap + q*asq + i*asi (bf16 units) and B's
 * pairs bp[q*32 + jj]. Inlined into each tile, so acc stays in registers. */
static inline __attribute__((always_inline)) void
qt_bm_i_chain(__m512 acc[QT_BM_I_MR][2], const qt_bf16 *ap, int64_t asq, int64_t asi,
              const uint32_t *bp, int64_t kq, const int mr)
{
    for (int64_t q = 0; q < kq; q++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * QT_BM_I_NR);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + q * QT_BM_I_NR + 16);
        const qt_bf16 *a = ap + q * asq;
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            uint32_t v;
            memcpy(&v, a + i * asi, sizeof v);
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)v);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
        }
    }
}

/* One tile: mr rows x 32 cols of part (row stride QT_BM_NC), the chain over kq pairs
 * continued from part (first: from +0). A's pair (i, q) is the 32-bit word at
 * ap + q*asq + i*asi (bf16 units: the packed micro-panel, or A's rows in place); B's pairs
 * are bp[q*32 + jj]. Reads ap, bp, part; writes part, or, the last contraction block
 * (out != NULL), the finish of its nr <= 32 valid columns straight from the registers into
 * out (row stride ldo; qt_bm_v_fin16: the bits of qt_bm_v_finish, without the round trip
 * through part). o16 != NULL instead of out: the last block's finish into bf16 (fin WRITE
 * or ADD; qt_bm_v_fin16h, row stride ldo). */
static inline __attribute__((always_inline)) void
qt_bm_i_tile_h(float *pt, int first, const qt_bf16 *ap, int64_t asq, int64_t asi,
               const uint32_t *bp, int64_t kq, const int mr, float *out, qt_bf16 *o16,
               int64_t ldo, int fin, const qt_leaf_carry *cy, int64_t nr, const int64_t pts)
{
    __m512 acc[QT_BM_I_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        acc[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(pt + i * pts);
        acc[i][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(pt + i * pts + 16);
    }
    if (out) { /* the finish's lines (the carry's addends, the output): fetched while the chain runs */
        const int64_t nl = nr < QT_BM_I_NR ? nr : QT_BM_I_NR;
        for (int i = 0; i < mr; i++) {
            const float *t = out + i * ldo;
            __builtin_prefetch(t, 1, 3);
            __builtin_prefetch(t + nl - 1, 1, 3);
        }
        if (fin == QT_BM_FIN_CARRY)
            for (int i = 0; i < mr; i++)
                for (int32_t l = 0; l < cy->n; l++) {
                    const float *t = cy->add[l] + (out - cy->dst) + i * ldo;
                    _mm_prefetch((const char *)t, _MM_HINT_T0);
                    _mm_prefetch((const char *)(t + nl - 1), _MM_HINT_T0);
                }
    }
#ifdef QT_BM_I16
    if (o16) {
        const int64_t nl = nr < QT_BM_I_NR ? nr : QT_BM_I_NR;
        for (int i = 0; i < mr; i++) {
            __builtin_prefetch(o16 + i * ldo, 1, 3);
            __builtin_prefetch(o16 + i * ldo + nl - 1, 1, 3);
        }
    }
#endif
    qt_bm_i_chain(acc, ap, asq, asi, bp, kq, mr);
#ifdef QT_BM_I16
    if (o16) {
        const __mmask16 m0 = qt_bm_lanes(nr), m1 = qt_bm_lanes(nr - 16);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            qt_bm_v_fin16h(o16 + i * ldo, acc[i][0], m0, fin);
            qt_bm_v_fin16h(o16 + i * ldo + 16, acc[i][1], m1, fin);
        }
        return;
    }
#else
    (void)o16;
#endif
    if (out) {
        const __mmask16 m0 = qt_bm_lanes(nr), m1 = qt_bm_lanes(nr - 16);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            qt_bm_v_fin16(out + i * ldo, acc[i][0], m0, fin, cy);
            qt_bm_v_fin16(out + i * ldo + 16, acc[i][1], m1, fin, cy);
        }
        return;
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_ps(pt + i * pts, acc[i][0]);
        _mm512_storeu_ps(pt + i * pts + 16, acc[i][1]);
    }
}

/* Every tile of rows [0,mc) x cols [0,nc) of part for kq pairs: A as for qt_bm_i_tile_h, row
 * micro-panel ir at ap + ir*apr; B's strip s at bp + s*bps (u32). Reads A, B, part; writes
 * part (columns past nc up to the strip width come from zero padding, never finished), or
 * finishes into c (fp32) or c16 (bf16, qt_bm_i_tile_h), whichever is not NULL. */
static void qt_bm_i_block_h(int first, int64_t mc, int64_t nc, int64_t kq, const qt_bf16 *ap,
                            int64_t apr, int64_t asq, int64_t asi, const uint32_t *bp,
                            int64_t bps, float *c, qt_bf16 *c16, int64_t ldc, int fin,
                            const qt_leaf_carry *cy)
{
    for (int64_t ir = 0; ir < mc; ir += QT_BM_I_MR) {
        const int mr = (int)qt_bm_min(QT_BM_I_MR, mc - ir);
        const qt_bf16 *a = ap + ir * apr;
        for (int64_t s = 0; s * QT_BM_I_NR < nc; s++) {
            float *pt = qt_bm.part + ir * QT_BM_NC + s * QT_BM_I_NR;
            const uint32_t *b = bp + s * bps;
            float *o = c ? c + ir * ldc + s * QT_BM_I_NR : 0;
            qt_bf16 *o16 = c16 ? c16 + ir * ldc + s * QT_BM_I_NR : 0;
            const int64_t nr = nc - s * QT_BM_I_NR;
#define QT_BM_CASE(h) case h: qt_bm_i_tile_h(pt, first, a, asq, asi, b, kq, h, o, o16, ldc, fin, cy, nr, QT_BM_NC); break;
            switch (mr) {
            QT_BM_CASE(1) QT_BM_CASE(2) QT_BM_CASE(3) QT_BM_CASE(4) QT_BM_CASE(5) QT_BM_CASE(6)
            QT_BM_CASE(7) QT_BM_CASE(8) QT_BM_CASE(9) QT_BM_CASE(10) QT_BM_CASE(11)
            default: qt_bm_i_tile_h(pt, first, a, asq, asi, b, kq, 12, o, o16, ldc, fin, cy, nr, QT_BM_NC); break;
            }
#undef QT_BM_CASE
        }
    }
}

static void qt_bm_i_block(int first, int64_t mc, int64_t nc, int64_t kq, const qt_bf16 *ap,
                          int64_t apr, int64_t asq, int64_t asi, const uint32_t *bp, int64_t bps,
                          float *c, int64_t ldc, int fin, const qt_leaf_carry *cy)
{
    qt_bm_i_block_h(first, mc, nc, kq, ap, apr, asq, asi, bp, bps, c, 0, ldc, fin, cy);
}

/* The instruction path. Loops: column panels of ncw columns (whole 32-column strips); B's
 * panel is packed ONCE for the whole contraction when ncw*nq pairs fit ib (else per row
 * block and contraction block); then row blocks of MC rows, contraction blocks of KQ pairs.
 * A is read in place where its pairs are contiguous (sap == 1: fwd, bwd_data), except the
 * block with an odd P's last pair (its hi element must be +0), which is packed; wgrad's A is
 * packed per block, or, with a caller's store pa of pa_n >= I*nq words (wgrad: the expert
 * FFN's free scratch), ONCE for every column panel: block (ic, qc) at pa + ic*nq + qc*mc,
 * the words qt_bm_i_pack_a would write for it (the tiles read the same values). Reads a, b
 * (and c for the add); writes c (and pa). qt_bm_insn_h: c16 != NULL (c NULL, fin WRITE or
 * ADD, sap == 1, P > 0) finishes into bf16 instead (qt_bm_i_tile_h). */
static void qt_bm_insn_h(float *c, qt_bf16 *c16, int64_t ldc, int fin, const qt_leaf_carry *cy,
                         const qt_bf16 *a, int64_t sai, int64_t sap, const qt_bf16 *b,
                         int64_t sbp, int64_t sbj, int64_t I, int64_t J, int64_t P, uint32_t *pa,
                         int64_t pa_n)
{
    const int64_t nq = (P + 1) / 2;
    const int64_t jw = (J + QT_BM_I_NR - 1) / QT_BM_I_NR * QT_BM_I_NR; /* J in whole strips */
    if (sap != 1 && nq > 0 && nq <= QT_BM_KQ && jw * nq <= QT_BM_I_PANEL / 4) {
        /* A packed (wgrad), one contraction block, B whole in a quarter of the panel (512
         * KiB: it stays in L2 across the row blocks): B packed once, then per row block A
         * packed once for every column panel (the loops below pack A again for each panel).
         * The same tiles, each finished in its registers. */
        qt_bm_i_pack_b(b, sbp, sbj, J, 0, nq, P);
        for (int64_t ic = 0; ic < I; ic += QT_BM_MC) {
            const int64_t mc = qt_bm_min(QT_BM_MC, I - ic);
            qt_bm_i_pack_a(a + ic * sai, sai, sap, mc, 0, nq, P);
            for (int64_t jc = 0; jc < J; jc += QT_BM_NC)
                qt_bm_i_block(1, mc, qt_bm_min(QT_BM_NC, J - jc), nq, (const qt_bf16 *)qt_bm.ia,
                              2, 2 * mc, 2, qt_bm.ib + jc * nq, nq * QT_BM_I_NR,
                              c + ic * ldc + jc, ldc, fin, cy);
        }
        return;
    }
    int64_t ncw = QT_BM_NC;
    while (ncw > QT_BM_I_NR && ncw * nq > QT_BM_I_PANEL) ncw -= QT_BM_I_NR;
    const int cached = ncw * nq <= QT_BM_I_PANEL;
    const int prepacked = pa && sap != 1 && nq > 0 && I * nq <= pa_n && J > ncw;
    if (prepacked) /* A once for every column panel */
        for (int64_t ic = 0; ic < I; ic += QT_BM_MC) {
            const int64_t mc = qt_bm_min(QT_BM_MC, I - ic);
            for (int64_t qc = 0; qc < nq; qc += QT_BM_KQ)
                qt_bm_i_pack_a_to(pa + ic * nq + qc * mc, a + ic * sai, sai, sap, mc, qc,
                                  qt_bm_min(QT_BM_KQ, nq - qc), P);
        }
    for (int64_t jc = 0; jc < J; jc += ncw) {
        const int64_t nc = qt_bm_min(ncw, J - jc);
        if (cached && nq > 0) qt_bm_i_pack_b(b + jc * sbj, sbp, sbj, nc, 0, nq, P);
        for (int64_t ic = 0; ic < I; ic += QT_BM_MC) {
            const int64_t mc = qt_bm_min(QT_BM_MC, I - ic);
            if (nq == 0)
                for (int64_t i = 0; i < mc * QT_BM_NC; i++) qt_bm.part[i] = 0.0f;
            for (int64_t qc = 0; qc < nq; qc += QT_BM_KQ) {
                const int64_t kq = qt_bm_min(QT_BM_KQ, nq - qc);
                const uint32_t *bp = qt_bm.ib + (cached ? qc * QT_BM_I_NR : 0);
                const int64_t bps = (cached ? nq : kq) * QT_BM_I_NR;
                if (!cached) qt_bm_i_pack_b(b + jc * sbj, sbp, sbj, nc, qc, kq, P);
                /* the last block finishes in the tiles' registers */
                const int last = qc + kq >= nq;
                float *o = last && c ? c + ic * ldc + jc : 0;
                qt_bf16 *o16 = last && c16 ? c16 + ic * ldc + jc : 0;
                if (sap == 1 && 2 * (qc + kq) <= P && qt_bm_i_aliased(sai)) { /* A's rows copied */
                    const int64_t lda = qt_bm_i_copy_a(a + ic * sai, sai, mc, qc, kq);
                    qt_bm_i_block_h(qc == 0, mc, nc, kq, (const qt_bf16 *)qt_bm.ia, lda, 2, lda,
                                    bp, bps, o, o16, ldc, fin, cy);
                } else if (sap == 1 && 2 * (qc + kq) <= P) /* A in place */
                    qt_bm_i_block_h(qc == 0, mc, nc, kq, a + ic * sai + 2 * qc, sai, 2, sai, bp,
                                    bps, o, o16, ldc, fin, cy);
                else if (prepacked) /* A packed above */
                    qt_bm_i_block(qc == 0, mc, nc, kq, (const qt_bf16 *)(pa + ic * nq + qc * mc),
                                  2, 2 * mc, 2, bp, bps, o, ldc, fin, cy);
                else {
                    qt_bm_i_pack_a(a + ic * sai, sai, sap, mc, qc, kq, P);
                    qt_bm_i_block_h(qc == 0, mc, nc, kq, (const qt_bf16 *)qt_bm.ia, 2, 2 * mc,
                                    2, bp, bps, o, o16, ldc, fin, cy);
                }
            }
            if (nq == 0) qt_bm_v_finish(c + ic * ldc + jc, ldc, fin, cy, mc, nc);
        }
    }
}

static void qt_bm_insn(float *c, int64_t ldc, int fin, const qt_leaf_carry *cy,
                       const qt_bf16 *a, int64_t sai, int64_t sap, const qt_bf16 *b, int64_t sbp,
                       int64_t sbj, int64_t I, int64_t J, int64_t P, uint32_t *pa, int64_t pa_n)
{
    qt_bm_insn_h(c, 0, ldc, fin, cy, a, sai, sap, b, sbp, sbj, I, J, P, pa, pa_n);
}
#endif

#ifdef QT_BM_INSN
/* Every leaf of a weight gradient in one pass on the instruction path (bf16_matmul.h,
 * qt_bf16_matmul_wgrad_leaves_on): leaf s's chain of dy[s] and x[s] over M rows, finished
 * into dw[s] ((+0) + chain) or, cy[s] != NULL, by its carry. B of every leaf is packed once,
 * A of every leaf once per row block of mcl rows; then per register tile (12 rows x 32
 * columns) the leaves in order 0..n-1, each the tile of its own call (the same chain, the
 * same finish), so a level element written by leaf s is read by a later leaf's carry while
 * it is still in L1, and every element sees the operations of the calls leaf after leaf.
 * Only the last leaf's carry streams (an earlier level is read again). Returns 0, or -1
 * (nothing written) when the shape does not fit the panels (one contraction block, every
 * leaf's B in ib, A of 12 rows or more per leaf in ia) or the weight is under
 * QT_BM_LEAVES_MIN elements (measured no faster: its levels stay cached leaf by leaf). */
#define QT_BM_LEAVES_MIN (1 << 16) /* smaller weights' levels stay cached one leaf at a time */
static int qt_bm_i_leaves(int n, float *const *dw, const qt_leaf_carry *const *cy,
                          const qt_bf16 *const *dy, const qt_bf16 *const *x, int64_t M,
                          int64_t N, int64_t K, int stream)
{
    const int64_t nq = (M + 1) / 2, jw = (K + QT_BM_I_NR - 1) / QT_BM_I_NR * QT_BM_I_NR;
    const int64_t ia_n = (int64_t)(sizeof qt_bm.ia / sizeof qt_bm.ia[0]);
    int64_t mcl = nq > 0 ? ia_n / (n * nq) : 0;
    mcl = qt_bm_min(mcl, QT_BM_MC) / QT_BM_I_MR * QT_BM_I_MR;
    if (n < 1 || nq < 1 || nq > QT_BM_KQ || n * jw * nq > QT_BM_I_PANEL || mcl < QT_BM_I_MR ||
        N * K < QT_BM_LEAVES_MIN)
        return -1;
    for (int s = 0; s < n; s++) /* C = dw[N,K], A(n,m) = dy[m*N + n], B(m,k) = x[m*K + k] */
        qt_bm_i_pack_b_to(qt_bm.ib + s * jw * nq, x[s], K, 1, K, 0, nq, M);
    for (int64_t ic = 0; ic < N; ic += mcl) {
        const int64_t mc = qt_bm_min(mcl, N - ic);
        for (int s = 0; s < n; s++)
            qt_bm_i_pack_a_to(qt_bm.ia + s * mc * nq, dy[s] + ic, 1, N, mc, 0, nq, M);
        for (int64_t j0 = 0; j0 < K; j0 += QT_BM_I_NR) /* the leaves' B strips stay in L2 */
            for (int64_t ir = 0; ir < mc; ir += QT_BM_I_MR)
                for (int s = 0; s < n; s++) {
                    float *o = (cy[s] ? cy[s]->dst : dw[s]) + (ic + ir) * K + j0;
                    qt_bm.carry_stream = cy[s] && s == n - 1 && stream;
                    qt_bm_i_block(1, qt_bm_min(QT_BM_I_MR, mc - ir), qt_bm_min(QT_BM_I_NR, K - j0),
                                  nq, (const qt_bf16 *)(qt_bm.ia + s * mc * nq) + 2 * ir, 2,
                                  2 * mc, 2, qt_bm.ib + s * jw * nq + j0 * nq, nq * QT_BM_I_NR,
                                  o, K, cy[s] ? QT_BM_FIN_CARRY : QT_BM_FIN_ZADD, cy[s]);
                }
    }
    if (qt_bm.carry_stream) _mm_sfence();
    qt_bm.carry_stream = 0;
    return 0;
}
#endif

#ifdef QT_BM_INSN
/* One block of one tile of the fused canonical contraction (bf16_matmul_canon.h): mr rows x
 * 32 columns, block j's chain from +0 in the tile's registers over the block's pairs
 * (segment after segment: the same chain continued), its partial (plus: (+0) + chain; NaN
 * 0x7fc00000, as the copying path's per-block kernel finish), then the pairwise tree merged
 * as the blocks finish (a binary counter over this strip's stack stk, depth subtotals on it
 * before block j: after block j, as many stacked subtotals as j has trailing one bits, nm,
 * are added on the left, so ((b0+b1)+(b2+b3))+... keeps qt_canon_tree's pairs and order),
 * straight from the registers; the last block stores the total's nr <= 32 valid columns
 * into out row i at orow[i] + col (orow[i] a pointer to the row's first column). A's pair
 * (i, q) of the whole contraction at ap + 2q + i*asi (rows in place); B's at bp[q*32 + jj]. */
static inline __attribute__((always_inline)) void
qt_bm_c_block(float *const *orow, int64_t col, int64_t nr, const qt_bf16 *ap, int64_t asi,
              const uint32_t *bp, int64_t nseg, int64_t L, int64_t nb, int64_t sl, int plus,
              int64_t j, float *stk, int64_t depth, int nm, const int mr)
{
    const int64_t tile = QT_BM_I_MR * QT_BM_I_NR;
    const __m512 qnan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
    __m512 acc[QT_BM_I_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    if (j + 1 == nb) { /* the output's lines: fetched (for writing) while the chain runs */
        const int64_t nl = nr < QT_BM_I_NR ? nr : QT_BM_I_NR;
        for (int i = 0; i < mr; i++) {
            __builtin_prefetch(orow[i] + col, 1, 3);
            __builtin_prefetch(orow[i] + col + nl - 1, 1, 3);
        }
    }
    for (int64_t g = 0; g < nseg; g++) {
        const int64_t q0 = (g * L + j * sl) / 2;
        qt_bm_i_chain(acc, ap + 2 * q0, 2, asi, bp + q0 * QT_BM_I_NR, sl / 2, mr);
    }
    float *pj = stk + depth * tile;
    /* each step over the whole tile (branches per block, not per register): per element
     * the same operations in the same order */
    /* the partial's finish in one instruction per register: (+0) + chain when plus, and the
     * NaN fix: VFIXUPIMMPS with the input's class choosing the response (QNaN, SNaN: the
     * destination operand, 0x7fc00000; zero: +0 when plus, else the input; +1, infinities,
     * other values: the input). The bits of the add, the compare and the blend on every
     * one of the 2^32 inputs, both forms (the chain's output is never a denormal: the
     * instruction flushes it, so MXCSR.DAZ never changes the class either). */
    {
        const __m512i tbl = _mm512_set1_epi32(plus ? 0x11111800 : 0x11111100);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                acc[i][h] = _mm512_fixupimm_ps(qnan, acc[i][h], tbl, 0);
    }
    for (int k = 1; k <= nm; k++) {
        const float *sk = pj - k * tile;
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                acc[i][h] = qt_bm_add_lr(_mm512_loadu_ps(sk + i * QT_BM_I_NR + 16 * h), acc[i][h]);
    }
    if (j + 1 < nb) {
        float *dst = pj - nm * tile;
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            _mm512_storeu_ps(dst + i * QT_BM_I_NR, acc[i][0]);
            _mm512_storeu_ps(dst + i * QT_BM_I_NR + 16, acc[i][1]);
        }
    } else {
        const __mmask16 m0 = qt_bm_lanes(nr), m1 = qt_bm_lanes(nr - 16);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            _mm512_mask_storeu_ps(orow[i] + col, m0, acc[i][0]);
            _mm512_mask_storeu_ps(orow[i] + col + 16, m1, acc[i][1]);
        }
    }
}

/* mr rows x nc columns (a column panel: its 32-column strips) of the fused canonical
 * contraction: block after block, and inside a block strip after strip, so the block's A
 * (mr rows x kb pairs) stays in L1 while the strips' B streams (block-major: A read once
 * per block instead of once per strip; each strip keeps its own stack of subtotals in
 * qt_bm.part). Per output element the operations of qt_bm_c_block in block order. B's strip
 * s at bp + s*bps. Inlined into one noinline function per mr (qt_bm_c_panel1..12), so
 * the chain's twelve A pointers and the loop state stay in registers. */
static inline __attribute__((always_inline)) void
qt_bm_c_panel(float *const *orow, int64_t nc, const qt_bf16 *ap, int64_t asi,
              const uint32_t *bp, int64_t bps, int64_t nseg, int64_t L, int64_t nb, int64_t sl,
              int plus, const int mr)
{
    const int64_t stks = (QT_BM_CANON_LOG + 1) * QT_BM_I_MR * QT_BM_I_NR;
    int64_t depth = 0;
    for (int64_t j = 0; j < nb; j++) {
        int nm = 0;
        for (int64_t q = j; q & 1; q >>= 1) nm++;
        { /* A's next block (the next row panel's first after the last): its lines fetched
           * while this block's strips run */
            const int64_t jn = j + 1 < nb ? j + 1 : 0;
            const qt_bf16 *an = j + 1 < nb ? ap : ap + mr * asi;
            for (int i = 0; i < mr; i++)
                for (int64_t g = 0; g < nseg; g++) {
                    const qt_bf16 *p = an + i * asi + g * L + jn * sl;
                    for (int64_t e = 0; e < sl; e += 32) __builtin_prefetch(p + e, 0, 3);
                    __builtin_prefetch(p + sl - 1, 0, 3);
                }
        }
        for (int64_t s = 0; s * QT_BM_I_NR < nc; s++)
            qt_bm_c_block(orow, s * QT_BM_I_NR, nc - s * QT_BM_I_NR, ap, asi, bp + s * bps,
                          nseg, L, nb, sl, plus, j, qt_bm.part + s * stks, depth, nm, mr);
        depth = depth - nm + 1;
    }
}

#define QT_BM_C_PANEL(h)                                                                    \
    __attribute__((noinline)) static void qt_bm_c_panel##h(                                 \
        float *const *orow, int64_t nc, const qt_bf16 *ap, int64_t asi, const uint32_t *bp, \
        int64_t bps, int64_t nseg, int64_t L, int64_t nb, int64_t sl, int plus)             \
    {                                                                                       \
        qt_bm_c_panel(orow, nc, ap, asi, bp, bps, nseg, L, nb, sl, plus, h);                \
    }
QT_BM_C_PANEL(1) QT_BM_C_PANEL(2) QT_BM_C_PANEL(3) QT_BM_C_PANEL(4) QT_BM_C_PANEL(5)
QT_BM_C_PANEL(6) QT_BM_C_PANEL(7) QT_BM_C_PANEL(8) QT_BM_C_PANEL(9) QT_BM_C_PANEL(10)
QT_BM_C_PANEL(11) QT_BM_C_PANEL(12)
#undef QT_BM_C_PANEL

/* The fused canonical contraction on the instruction path: C[I,J] (row i at c + i*ldc, or,
 * orow != NULL, at c + orow[i]*ldc: orow holds row numbers as floats, exact below 2^24) =
 * tree over nb blocks of A(i,p) = a[i*sai + p] (rows in place) and B(p,j) = b[p*sbp + j*sbj],
 * the contraction P = nseg * L, L = nb * sl, sl even (a block's pairs are pairs of the whole
 * contraction: its pairs are the copying path's, none spans a segment); plus: the block
 * partials are (+0) + chain (the data gradient's). B's column panels are packed once for
 * the whole contraction. Returns 0, or -1 (nothing written) when the shape does not fit
 * (the caller copies). */
int qt_bf16_mm_canon_insn(float *c, int64_t ldc, const float *orow, const qt_bf16 *a,
                          int64_t sai, const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t I,
                          int64_t J, int64_t nseg, int64_t nb, int64_t sl, int plus)
{
    const int64_t L = nb * sl, P = nseg * L, nq = P / 2;
    if (sl < 2 || sl % 2 || nb < 2 || nb > (1 << QT_BM_CANON_LOG) || (nb & (nb - 1)) ||
        nq * QT_BM_I_NR > QT_BM_I_PANEL)
        return -1;
    int64_t ncw = QT_BM_NC;
    while (ncw > QT_BM_I_NR && ncw * nq > QT_BM_I_PANEL) ncw -= QT_BM_I_NR;
    for (int64_t jc = 0; jc < J; jc += ncw) {
        const int64_t nc = qt_bm_min(ncw, J - jc);
        qt_bm_i_pack_b(b + jc * sbj, sbp, sbj, nc, 0, nq, P);
        for (int64_t ir = 0; ir < I; ir += QT_BM_I_MR) {
            const int mr = (int)qt_bm_min(QT_BM_I_MR, I - ir);
            float *rows[QT_BM_I_MR];
            for (int i = 0; i < mr; i++)
                rows[i] = c + (orow ? (int64_t)orow[ir + i] : ir + i) * ldc + jc;
            const qt_bf16 *ap = a + ir * sai;
            const int64_t bps = nq * QT_BM_I_NR;
#define QT_BM_CASE(h) case h: qt_bm_c_panel##h(rows, nc, ap, sai, qt_bm.ib, bps, nseg, L, nb, sl, plus); break;
            switch (mr) {
            QT_BM_CASE(1) QT_BM_CASE(2) QT_BM_CASE(3) QT_BM_CASE(4) QT_BM_CASE(5)
            QT_BM_CASE(6) QT_BM_CASE(7) QT_BM_CASE(8) QT_BM_CASE(9) QT_BM_CASE(10)
            QT_BM_CASE(11)
            default: qt_bm_c_panel12(rows, nc, ap, sai, qt_bm.ib, bps, nseg, L, nb, sl, plus); break;
            }
#undef QT_BM_CASE
        }
    }
    return 0;
}
#else
int qt_bf16_mm_canon_insn(float *c, int64_t ldc, const float *orow, const qt_bf16 *a,
                          int64_t sai, const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t I,
                          int64_t J, int64_t nseg, int64_t nb, int64_t sl, int plus)
{
    (void)c, (void)ldc, (void)orow, (void)a, (void)sai, (void)b, (void)sbp, (void)sbj, (void)I, (void)J;
    (void)nseg, (void)nb, (void)sl, (void)plus;
    return -1;
}
#endif

#ifdef QT_BM_WIDE
/* 16 bf16 -> 16 fp32 (exact: a shift), from n <= 16 elements at src (the rest +0). */
static inline __m512 qt_bm_w_widen16(const qt_bf16 *src, int64_t n)
{
    const __mmask16 m = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
    const __m256i h = _mm256_maskz_loadu_epi16(m, src);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Pack A rows [0,mc) of pairs [q0, q0+kq), widened, into ea:
 *  rows layout (sap == 1: a row's pairs contiguous; returns 1): row i at ea + i*2*KQ, pair q
 *    as (hi, lo) at [2q], [2q+1] (the pair halves swapped as they are read);
 *  micro-panel layout (otherwise; returns 0): ea[ir*kq*2 + q*2*MR + {0: hi, MR: lo} + i%MR],
 *    contiguous loads when sai == 1 (wgrad: a pair's rows are rows of dy).
 * Past P: +0. Reads a; writes ea. */
static int qt_bm_w_pack_a(const qt_bf16 *a, int64_t sai, int64_t sap, int64_t mc, int64_t q0,
                          int64_t kq, int64_t P)
{
    const int64_t qfull = qt_bm_min(kq, P / 2 - q0 > 0 ? P / 2 - q0 : 0);
    if (sap == 1) {
        const __m512i swap = _mm512_set_epi32(14, 15, 12, 13, 10, 11, 8, 9, 6, 7, 4, 5, 2, 3, 0, 1);
        for (int64_t i = 0; i < mc; i++) {
            const qt_bf16 *src = a + i * sai + 2 * q0;
            float *dst = qt_bm.ea + i * 2 * QT_BM_KQ;
            int64_t q = 0;
            for (; q + 8 <= qfull; q += 8) /* 8 pairs: lo, hi in memory -> hi, lo */
                _mm512_storeu_ps(dst + 2 * q,
                                 _mm512_permutexvar_ps(swap, qt_bm_w_widen16(src + 2 * q, 16)));
            for (; q < kq; q++) {
                const int64_t p = 2 * (q0 + q);
                dst[2 * q] = qt_f32_from_bf16(qt_bm_at(a, sai, sap, i, p + 1, P));
                dst[2 * q + 1] = qt_f32_from_bf16(qt_bm_at(a, sai, sap, i, p, P));
            }
        }
        return 1;
    }
    for (int64_t ir = 0; ir < mc; ir += QT_BM_W_MR) {
        float *dst = qt_bm.ea + ir * kq * 2;
        const int64_t mr = qt_bm_min(QT_BM_W_MR, mc - ir);
        const __mmask16 m = (__mmask16)((1u << mr) - 1u);
        int64_t q = 0;
        if (sai == 1)
            for (; q < qfull; q++) {
                const qt_bf16 *lo = a + ir + 2 * (q0 + q) * sap;
                _mm512_mask_storeu_ps(dst + q * 2 * QT_BM_W_MR, m, qt_bm_w_widen16(lo + sap, mr));
                _mm512_mask_storeu_ps(dst + q * 2 * QT_BM_W_MR + QT_BM_W_MR, m,
                                      qt_bm_w_widen16(lo, mr));
            }
        for (; q < kq; q++)
            for (int64_t i = 0; i < mr; i++) {
                const int64_t p = 2 * (q0 + q);
                dst[q * 2 * QT_BM_W_MR + i] = qt_f32_from_bf16(qt_bm_at(a, sai, sap, ir + i, p + 1, P));
                dst[q * 2 * QT_BM_W_MR + QT_BM_W_MR + i] =
                    qt_f32_from_bf16(qt_bm_at(a, sai, sap, ir + i, p, P));
            }
    }
    return 0;
}

/* Pack B cols [0,nc) of pairs [q0, q0+kq), widened, into strips wb[s*kq*2*NR + q*2*NR +
 * {0: hi, NR: lo} + jj] (past P and past nc: +0). Rows contiguous in j (sbj == 1: bwd_data,
 * wgrad) widen 16 at a time; otherwise element by element (fwd's w[n,K] is a transpose; the
 * panel is packed once per column panel and reused by every row block). Reads b; writes wb. */
static void qt_bm_w_pack_b(const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t nc, int64_t q0,
                           int64_t kq, int64_t P)
{
    for (int64_t s = 0; s * QT_BM_W_NR < nc; s++) {
        float *dst = qt_bm.wb + s * kq * 2 * QT_BM_W_NR;
        const int64_t j0 = s * QT_BM_W_NR, w = qt_bm_min(QT_BM_W_NR, nc - j0);
        if (sbj == 1) {
            for (int64_t q = 0; q < kq; q++) {
                const int64_t p = 2 * (q0 + q);
                const qt_bf16 *lo = b + p * sbp + j0;
                float *d = dst + q * 2 * QT_BM_W_NR;
                for (int64_t h = 0; h < 2; h++) { /* 0: hi (row p+1), 1: lo (row p) */
                    const int64_t row = h ? p : p + 1;
                    for (int64_t jj = 0; jj < QT_BM_W_NR; jj += 16) {
                        const int64_t n = row < P ? qt_bm_min(16, w - jj > 0 ? w - jj : 0) : 0;
                        _mm512_storeu_ps(d + h * QT_BM_W_NR + jj,
                                         qt_bm_w_widen16(h ? lo + jj : lo + sbp + jj, n));
                    }
                }
            }
            continue;
        }
        for (int64_t jj = 0; jj < QT_BM_W_NR; jj++)
            for (int64_t q = 0; q < kq; q++) {
                const int64_t p = 2 * (q0 + q);
                float *d = dst + q * 2 * QT_BM_W_NR + jj;
                d[0] = jj < w ? qt_f32_from_bf16(qt_bm_at(b, sbj, sbp, j0 + jj, p + 1, P)) : 0.0f;
                d[QT_BM_W_NR] = jj < w ? qt_f32_from_bf16(qt_bm_at(b, sbj, sbp, j0 + jj, p, P)) : 0.0f;
            }
    }
}

/* One tile: mr rows x 32 cols of part (row stride QT_BM_NC), the chain over kq pairs
 * continued from part (first: from +0), per pair the hi FMA then the lo FMA. Row i's pair q
 * is hi = ap[q*qs + i*is], lo = hi's + hs (constants per layout: one moving pointer, fixed
 * displacements); B's pair q is bp[q*64 + {0: hi, 32: lo} + jj]. Runs under FTZ|DAZ. */
static inline __attribute__((always_inline)) void
qt_bm_w_tile(float *pt, int first, const float *ap, const int qs, const int is, const int hs,
             const float *bp, int64_t kq, const int mr)
{
    __m512 acc[QT_BM_W_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        acc[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(pt + i * QT_BM_NC);
        acc[i][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(pt + i * QT_BM_NC + 16);
    }
    for (int64_t q = 0; q < kq; q++) {
        const float *a = ap + q * qs;
        const float *b = bp + q * 2 * QT_BM_W_NR;
        const __m512 bh0 = _mm512_loadu_ps(b), bh1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            const __m512 av = _mm512_set1_ps(a[i * is]);
            acc[i][0] = _mm512_fmadd_ps(av, bh0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, bh1, acc[i][1]);
        }
        const __m512 bl0 = _mm512_loadu_ps(b + QT_BM_W_NR), bl1 = _mm512_loadu_ps(b + QT_BM_W_NR + 16);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            const __m512 av = _mm512_set1_ps(a[i * is + hs]);
            acc[i][0] = _mm512_fmadd_ps(av, bl0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, bl1, acc[i][1]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_ps(pt + i * QT_BM_NC, acc[i][0]);
        _mm512_storeu_ps(pt + i * QT_BM_NC + 16, acc[i][1]);
    }
}

/* Every tile of rows [0,mc) x cols [0,nc) of part for kq pairs, A in ea (rows layout when
 * `rows`, else micro-panels), B's strip s at bp + s*bps. Runs under FTZ|DAZ (the caller's). */
__attribute__((noinline)) static void qt_bm_w_block(int first, int64_t mc, int64_t nc,
                                                    int64_t kq, int rows, const float *bp,
                                                    int64_t bps)
{
    for (int64_t ir = 0; ir < mc; ir += QT_BM_W_MR) {
        const int mr = (int)qt_bm_min(QT_BM_W_MR, mc - ir);
        const float *a = qt_bm.ea + (rows ? ir * 2 * QT_BM_KQ : ir * kq * 2);
        for (int64_t s = 0; s * QT_BM_W_NR < nc; s++) {
            float *pt = qt_bm.part + ir * QT_BM_NC + s * QT_BM_W_NR;
            const float *b = bp + s * bps;
#define QT_BM_CASE(h)                                                                 \
    case h:                                                                           \
        if (rows) qt_bm_w_tile(pt, first, a, 2, 2 * QT_BM_KQ, 1, b, kq, h);           \
        else qt_bm_w_tile(pt, first, a, 2 * QT_BM_W_MR, 1, QT_BM_W_MR, b, kq, h);     \
        break;
            switch (mr) {
            QT_BM_CASE(1) QT_BM_CASE(2) QT_BM_CASE(3) QT_BM_CASE(4) QT_BM_CASE(5) QT_BM_CASE(6)
            QT_BM_CASE(7) QT_BM_CASE(8) QT_BM_CASE(9) QT_BM_CASE(10) QT_BM_CASE(11)
            default: QT_BM_CASE(12)
            }
#undef QT_BM_CASE
        }
    }
}

/* The wide path: column panels of ncw columns with B's panel widened ONCE for the whole
 * contraction when it fits wb (else per row block and contraction block); row blocks of MC
 * rows (a multiple of MR), contraction blocks of KQ pairs with A widened per block. Reads a,
 * b (and c for the add); writes c. */
static void qt_bm_wide(float *c, int64_t ldc, int fin, const qt_leaf_carry *cy,
                       const qt_bf16 *a, int64_t sai,
                       int64_t sap, const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t I,
                       int64_t J, int64_t P)
{
    const int64_t nq = (P + 1) / 2;
    int64_t ncw = QT_BM_NC;
    while (ncw > QT_BM_W_NR && ncw * nq * 2 > QT_BM_W_PANEL) ncw -= QT_BM_W_NR;
    const int cached = ncw * nq * 2 <= QT_BM_W_PANEL;
    for (int64_t jc = 0; jc < J; jc += ncw) {
        const int64_t nc = qt_bm_min(ncw, J - jc);
        if (cached && nq > 0) qt_bm_w_pack_b(b + jc * sbj, sbp, sbj, nc, 0, nq, P);
        for (int64_t ic = 0; ic < I; ic += QT_BM_MC) {
            const int64_t mc = qt_bm_min(QT_BM_MC, I - ic);
            if (nq == 0)
                for (int64_t i = 0; i < mc * QT_BM_NC; i++) qt_bm.part[i] = 0.0f;
            for (int64_t qc = 0; qc < nq; qc += QT_BM_KQ) {
                const int64_t kq = qt_bm_min(QT_BM_KQ, nq - qc);
                const float *bp = qt_bm.wb + (cached ? qc * 2 * QT_BM_W_NR : 0);
                const int64_t bps = (cached ? nq : kq) * 2 * QT_BM_W_NR;
                if (!cached) qt_bm_w_pack_b(b + jc * sbj, sbp, sbj, nc, qc, kq, P);
                const int rows = qt_bm_w_pack_a(a + ic * sai, sai, sap, mc, qc, kq, P);
                const unsigned csr = _mm_getcsr();
                _mm_setcsr(QT_BF16_EMUL_CSR(csr)); /* the step's flushing, RNE */
                qt_bm_w_block(qc == 0, mc, nc, kq, rows, bp, bps);
                _mm_setcsr(csr);
            }
            qt_bm_v_finish(c + ic * ldc + jc, ldc, fin, cy, mc, nc);
        }
    }
}
#endif

/* ------------------------------------------------------------------ dispatch */
static int qt_bm_run(int path, float *c, int64_t ldc, int fin, const qt_leaf_carry *cy,
                     const qt_bf16 *a, int64_t sai, int64_t sap, const qt_bf16 *b, int64_t sbp,
                     int64_t sbj, int64_t I, int64_t J, int64_t P)
{
    switch (path) {
    case QT_BF16_PATH_REF: qt_bm_ref(c, ldc, fin, cy, a, sai, sap, b, sbp, sbj, I, J, P); return 0;
#ifdef QT_BM_EMUL
    case QT_BF16_PATH_EMUL: qt_bm_emul(c, ldc, fin, cy, a, sai, sap, b, sbp, sbj, I, J, P); return 0;
#endif
#ifdef QT_BM_INSN
    case QT_BF16_PATH_INSN: qt_bm_insn(c, ldc, fin, cy, a, sai, sap, b, sbp, sbj, I, J, P, 0, 0); return 0;
#endif
#ifdef QT_BM_WIDE
    case QT_BF16_PATH_WIDE: qt_bm_wide(c, ldc, fin, cy, a, sai, sap, b, sbp, sbj, I, J, P); return 0;
#endif
    default: return -1;
    }
}

/* fwd: C = y[M,N] (row stride ldy), A(m,k) = x[m*ldx + k], B(k,n) = w[n*K + k]. */
int qt_bf16_matmul_fwd_ld_on(int path, float *y, int64_t ldy, const qt_bf16 *x, int64_t ldx,
                             const qt_bf16 *w, int64_t M, int64_t N, int64_t K)
{
    return qt_bm_run(path, y, ldy, QT_BM_FIN_WRITE, 0, x, ldx, 1, w, 1, K, M, N, K);
}

int qt_bf16_matmul_fwd_on(int path, float *y, const qt_bf16 *x, const qt_bf16 *w, int64_t M,
                          int64_t N, int64_t K)
{
    return qt_bf16_matmul_fwd_ld_on(path, y, N, x, K, w, M, N, K);
}

/* bwd_data: C = dx[M,K] (row stride lddx), A(m,n) = dy[m*lddy + n], B(n,k) = w[n*K + k]. */
int qt_bf16_matmul_bwd_data_ld_on(int path, float *dx, int64_t lddx, const qt_bf16 *dy,
                                  int64_t lddy, const qt_bf16 *w, int64_t M, int64_t N,
                                  int64_t K)
{
    return qt_bm_run(path, dx, lddx, QT_BM_FIN_ADD, 0, dy, lddy, 1, w, K, 1, M, K, N);
}

/* bwd_data writing dx = (+0) + chain: the bits of zeroing dx and accumulating (FIN_ADD on
 * a +0 reads +0: the same one addition), without the zeroing pass and the load. */
int qt_bf16_matmul_bwd_data_z_ld_on(int path, float *dx, int64_t lddx, const qt_bf16 *dy,
                                    int64_t lddy, const qt_bf16 *w, int64_t M, int64_t N,
                                    int64_t K)
{
    return qt_bm_run(path, dx, lddx, QT_BM_FIN_ZADD, 0, dy, lddy, 1, w, K, 1, M, K, N);
}

int qt_bf16_matmul_bwd_data_on(int path, float *dx, const qt_bf16 *dy, const qt_bf16 *w,
                               int64_t M, int64_t N, int64_t K)
{
    return qt_bf16_matmul_bwd_data_ld_on(path, dx, K, dy, N, w, M, N, K);
}

/* The bf16 outputs (bf16_matmul.h): the instruction path only, P > 0; else -1. */
static int qt_bm_run16(int path, qt_bf16 *c, int64_t ldc, int fin, const qt_bf16 *a,
                       int64_t sai, const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t I,
                       int64_t J, int64_t P)
{
#ifdef QT_BM_I16
    if (path == QT_BF16_PATH_INSN && P > 0) {
        qt_bm_insn_h(0, c, ldc, fin, 0, a, sai, 1, b, sbp, sbj, I, J, P, 0, 0);
        return 0;
    }
#endif
    (void)path, (void)c, (void)ldc, (void)fin, (void)a, (void)sai, (void)b, (void)sbp;
    (void)sbj, (void)I, (void)J, (void)P;
    return -1;
}

int qt_bf16_matmul_fwd16_ld_on(int path, qt_bf16 *y, int64_t ldy, const qt_bf16 *x,
                               int64_t ldx, const qt_bf16 *w, int64_t M, int64_t N, int64_t K)
{
    return qt_bm_run16(path, y, ldy, QT_BM_FIN_WRITE, x, ldx, w, 1, K, M, N, K);
}

int qt_bf16_matmul_bwd_data16_ld_on(int path, qt_bf16 *dx, int64_t lddx, const qt_bf16 *dy,
                                    int64_t lddy, const qt_bf16 *w, int64_t M, int64_t N,
                                    int64_t K)
{
    return qt_bm_run16(path, dx, lddx, QT_BM_FIN_ADD, dy, lddy, w, K, 1, M, K, N);
}

int qt_bf16_matmul_fwd16(qt_bf16 *y, const qt_bf16 *x, const qt_bf16 *w, int64_t M, int64_t N,
                         int64_t K)
{
    return qt_bf16_matmul_fwd16_ld_on(qt_bf16_mm_path(), y, N, x, K, w, M, N, K);
}

int qt_bf16_matmul_bwd_data16(qt_bf16 *dx, const qt_bf16 *dy, const qt_bf16 *w, int64_t M,
                              int64_t N, int64_t K)
{
    return qt_bf16_matmul_bwd_data16_ld_on(qt_bf16_mm_path(), dx, K, dy, N, w, M, N, K);
}

/* wgrad: C = dw[N,K], A(n,m) = dy[m*N + n], B(m,k) = x[m*K + k]. */
int qt_bf16_matmul_wgrad_on(int path, float *dw, const qt_bf16 *dy, const qt_bf16 *x,
                            int64_t M, int64_t N, int64_t K)
{
    return qt_bm_run(path, dw, K, QT_BM_FIN_ZADD, 0, dy, 1, N, x, K, 1, N, K, M);
}

/* Carries of weights of 2^19 floats (2 MiB) or more are streamed (qt_bm_v_finish), as
 * matmul.c's QT_MM_CARRY_STREAM. */
#define QT_BM_CARRY_STREAM (1 << 19)

/* wgrad with the carry: C = cy->dst (partial chains wait in qt_bm.part, not in dst).
 * stream: -1 decide by the weight's size N*K, else as given (a slice of a larger weight). */
int qt_bf16_matmul_wgrad_carry_s_on(int path, const qt_leaf_carry *cy, const qt_bf16 *dy,
                                    const qt_bf16 *x, int64_t M, int64_t N, int64_t K,
                                    int stream)
{
    if (!cy || cy->n < 1 || cy->n > QT_LEAF_CARRY_MAX) return -1;
#if defined(QT_BM_INSN) || defined(QT_BM_WIDE) || defined(QT_BM_EMUL)
    qt_bm.carry_stream = stream < 0 ? N * K >= QT_BM_CARRY_STREAM : stream != 0;
#else
    (void)stream;
#endif
    const int rc = qt_bm_run(path, cy->dst, K, QT_BM_FIN_CARRY, cy, dy, 1, N, x, K, 1, N, K, M);
#if defined(QT_BM_INSN) || defined(QT_BM_WIDE)
    if (qt_bm.carry_stream) _mm_sfence(); /* the streamed stores before what follows */
    qt_bm.carry_stream = 0;
#endif
    return rc;
}

/* The weight gradient (cy NULL: dw written, as qt_bf16_matmul_wgrad_on; else the carry, as
 * qt_bf16_matmul_wgrad_carry_s_on with stream) with a caller's store ws of ws_n floats for
 * A packed once (the instruction path's pa; other paths ignore it): the same bits. */
int qt_bf16_matmul_wgrad_ws_on(int path, float *dw, const qt_leaf_carry *cy, const qt_bf16 *dy,
                               const qt_bf16 *x, int64_t M, int64_t N, int64_t K, int stream,
                               float *ws, int64_t ws_n)
{
#ifdef QT_BM_INSN
    if (path == QT_BF16_PATH_INSN && ws && ws_n > 0) {
        if (cy && (cy->n < 1 || cy->n > QT_LEAF_CARRY_MAX)) return -1;
        uint32_t *pa = (uint32_t *)(void *)ws;
        qt_bm.carry_stream = cy && (stream < 0 ? N * K >= QT_BM_CARRY_STREAM : stream != 0);
        qt_bm_insn(cy ? cy->dst : dw, K, cy ? QT_BM_FIN_CARRY : QT_BM_FIN_ZADD, cy, dy, 1, N, x,
                   K, 1, N, K, M, pa, ws_n);
        if (qt_bm.carry_stream) _mm_sfence();
        qt_bm.carry_stream = 0;
        return 0;
    }
#endif
    (void)ws, (void)ws_n;
    return cy ? qt_bf16_matmul_wgrad_carry_s_on(path, cy, dy, x, M, N, K, stream)
              : qt_bf16_matmul_wgrad_on(path, dw, dy, x, M, N, K);
}

int qt_bf16_mm_path(void)
{
    if (!qt_bm.mm_path_chosen) {
        int path = qt_bf16_path();
#ifdef QT_BM_WIDE
        int amd = 0;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
        __builtin_cpu_init();
        amd = __builtin_cpu_is("amd");
#endif
        if (!(amd && path == QT_BF16_PATH_INSN)) path = QT_BF16_PATH_WIDE;
#endif
        qt_bm.mm_path = path;
        qt_bm.mm_path_chosen = 1;
    }
    return qt_bm.mm_path;
}

void qt_bf16_matmul_fwd(float *y, const qt_bf16 *x, const qt_bf16 *w, int64_t M, int64_t N,
                        int64_t K)
{
    qt_bf16_matmul_fwd_on(qt_bf16_mm_path(), y, x, w, M, N, K);
}

void qt_bf16_matmul_bwd_data(float *dx, const qt_bf16 *dy, const qt_bf16 *w, int64_t M,
                             int64_t N, int64_t K)
{
    qt_bf16_matmul_bwd_data_on(qt_bf16_mm_path(), dx, dy, w, M, N, K);
}

void qt_bf16_matmul_wgrad(float *dw, const qt_bf16 *dy, const qt_bf16 *x, int64_t M,
                          int64_t N, int64_t K)
{
    qt_bf16_matmul_wgrad_on(qt_bf16_mm_path(), dw, dy, x, M, N, K);
}

int qt_bf16_matmul_wgrad_carry_on(int path, const qt_leaf_carry *cy, const qt_bf16 *dy,
                                  const qt_bf16 *x, int64_t M, int64_t N, int64_t K)
{
    return qt_bf16_matmul_wgrad_carry_s_on(path, cy, dy, x, M, N, K, -1);
}

int qt_bf16_matmul_wgrad_leaves_on(int path, int n, float *const *dw,
                                   const qt_leaf_carry *const *cy, const qt_bf16 *const *dy,
                                   const qt_bf16 *const *x, int64_t M, int64_t N, int64_t K)
{
    if (n < 1 || n > QT_BF16_WGRAD_LEAVES_MAX) return -1;
    for (int s = 0; s < n; s++)
        if (cy[s] ? cy[s]->n < 1 || cy[s]->n > QT_LEAF_CARRY_MAX : !dw[s]) return -1;
#ifdef QT_BM_INSN
    if (path == QT_BF16_PATH_INSN)
        return qt_bm_i_leaves(n, dw, cy, dy, x, M, N, K, N * K >= QT_BM_CARRY_STREAM);
#endif
    (void)path, (void)dy, (void)x, (void)M, (void)N, (void)K;
    return -1;
}

int qt_bf16_matmul_wgrad_leaves(int n, float *const *dw, const qt_leaf_carry *const *cy,
                                const qt_bf16 *const *dy, const qt_bf16 *const *x, int64_t M,
                                int64_t N, int64_t K)
{
    return qt_bf16_matmul_wgrad_leaves_on(qt_bf16_mm_path(), n, dw, cy, dy, x, M, N, K) == 0;
}

int qt_bf16_matmul_wgrad_carry_stream(int64_t numel)
{
    return numel >= QT_BM_CARRY_STREAM;
}

int qt_bf16_matmul_wgrad_carry(const qt_leaf_carry *cy, const qt_bf16 *dy, const qt_bf16 *x,
                               int64_t M, int64_t N, int64_t K)
{
    return qt_bf16_matmul_wgrad_carry_on(qt_bf16_mm_path(), cy, dy, x, M, N, K) == 0;
}
#endif
