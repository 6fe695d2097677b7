/* matmul.c - dense matmuls (contract and determinism rule: matmul.h).
 *
 * Two implementations with identical bits:
 *  - scalar reference: one FMA chain per output element, contraction index increasing;
 *  - optimised float path (AVX-512, or AVX2+FMA): vectorises across output COLUMNS, so each
 *    SIMD lane runs exactly the scalar chain of one element. Contraction blocking stores the
 *    partial accumulator as a float and reloads it, which is exact, so blocking never
 *    changes bits. The accumulating variants keep partials in a static tile and add into the
 *    destination only after the last block (dst = dst + acc, once); the writing weight
 *    gradient (dst = (+0) + acc) keeps them in dst itself, as the forward does in y.
 * The writing weight gradient can finish each element with the leaf-tree carry of
 * qt_leaf_carry.h in the tile epilogue (add 3): the pushed tree level is stored directly,
 * with the additions of qt_tree_push in its order, and the leaf itself is never stored.
 * The same writing tiles also run row panel by row panel over B packed once per leaf
 * (qt_matmul_wgrad_panel_pack / qt_matmul_wgrad_panel, for the expert FFN's leaves).
 * The canonical-block contractions of matmul_canon.h (contraction up to 2048) run here tile
 * by tile, all blocks of a tile in one call: each block's chain in registers (its segments
 * continued in the same registers), with nb >= 2 two blocks at a time on 6-row tiles and
 * their pair summed in registers, the rest of the pairwise tree merged through a small
 * stack (same bits as the copying form there; qt_mm_canon_panel says why).
 * The double build (-DQT_REAL_DOUBLE) uses the scalar path only.
 * Each tile height 1..MR (and strips of one vector) has its own register-resident kernel,
 * in two forms: packed A micro-panels (compile-time offsets) and A rows in place (four row
 * pointers, so the twelve broadcasts need no spilled index registers); row remainders
 * between MR and 2 MR are split into two tiles of about equal height.
 * The data gradient runs each tile's chain over up to 2048 contraction steps in registers:
 * B packed once per column panel for all rows, A rows in place, and for longer contractions
 * equal chunks whose partials wait in the partial tile (384-row blocks). The accumulating
 * weight gradient blocks the contraction by 256: B strips already contiguous in the output
 * column are read in place unless their rows sit at 4 KiB multiples (then the block is
 * packed); A is packed into [kc][MR] micro-panels only where its in-place access is poor
 * (wgrad; 4 KiB row strides). None of this touches the per-element FMA order.
 * Invariants: no heap; the packed panels (256 KiB, and 1 MiB for the wide and canonical
 * panels), the partial tile and the canonical stack are one static module struct; padded
 * panel columns are zero and never stored.
 */
#include "matmul.h"
#include "matmul_canon.h"
#include "qt_real.h"

#ifdef QT_REAL_DOUBLE
#define QT_MM_FMA(a, b, c) __builtin_fma((a), (b), (c))
#else
/* The float path's bits are defined as chains of single-rounding FMAs; without the
 * instruction __builtin_fmaf becomes a libm call (and an emulated fmaf is not worth its
 * cost), so a target without FMA is refused at build time. */
#ifndef __FMA__
#error "qtrain's float kernels need the FMA instruction: build with ARCH=-march=x86-64-v3 (or newer, or -march=native on such a CPU)"
#endif
#define QT_MM_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#endif

void QT_FN(qt_matmul_fwd_ref)(qt_real *y, const qt_real *x, const qt_real *w, int64_t M,
                              int64_t N, int64_t K)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            qt_real acc = 0;
            for (int64_t k = 0; k < K; k++) acc = QT_MM_FMA(x[m * K + k], w[n * K + k], acc);
            y[m * N + n] = acc;
        }
}

void QT_FN(qt_matmul_bwd_data_ref)(qt_real *dx, const qt_real *dy, const qt_real *w, int64_t M,
                                   int64_t N, int64_t K)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            qt_real acc = 0;
            for (int64_t n = 0; n < N; n++) acc = QT_MM_FMA(dy[m * N + n], w[n * K + k], acc);
            dx[m * K + k] = dx[m * K + k] + acc;
        }
}

void QT_FN(qt_matmul_wgrad_ref)(qt_real *dw, const qt_real *dy, const qt_real *x, int64_t M,
                                int64_t N, int64_t K)
{
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            qt_real acc = 0;
            for (int64_t m = 0; m < M; m++) acc = QT_MM_FMA(dy[m * N + n], x[m * K + k], acc);
            dw[n * K + k] = dw[n * K + k] + acc;
        }
}

#if !defined(QT_REAL_DOUBLE) && (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
#define QT_MM_OPT 1
#include <immintrin.h>

#if defined(__AVX512F__)
typedef __m512 qt_vec;
#define QT_MM_VW 16
#define QT_MM_MR 12            /* 24 accumulators + 2 panel loads + broadcast of 32 zmm */
#define QT_VZERO() _mm512_setzero_ps()
#define QT_VLOAD(p) _mm512_loadu_ps(p)
#define QT_VSTORE(p, v) _mm512_storeu_ps((p), (v))
#define QT_VSTREAM(p, v) _mm512_stream_ps((p), (v)) /* p 64-byte aligned */
#define QT_VBCAST(s) _mm512_set1_ps(s)
#define QT_VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define QT_VADD(a, b) _mm512_add_ps((a), (b))
#else
typedef __m256 qt_vec;
#define QT_MM_VW 8
#define QT_MM_MR 6             /* 12 accumulators of 16 ymm */
#define QT_VZERO() _mm256_setzero_ps()
#define QT_VLOAD(p) _mm256_loadu_ps(p)
#define QT_VSTORE(p, v) _mm256_storeu_ps((p), (v))
#define QT_VSTREAM(p, v) _mm256_stream_ps((p), (v)) /* p 32-byte aligned */
#define QT_VBCAST(s) _mm256_set1_ps(s)
#define QT_VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define QT_VADD(a, b) _mm256_add_ps((a), (b))
#endif

#define QT_MM_NR (2 * QT_MM_VW)          /* panel strip width: two vectors */
#define QT_MM_KC 256                      /* contraction block */
#define QT_MM_NC (8 * QT_MM_NR)           /* columns per packed panel */
#define QT_MM_MC (16 * QT_MM_MR)          /* rows per packed A block / partial tile */
/* The canonical-block path packs B over the whole contraction P: [P][NR] strips, as many
 * strips as fit this many floats (1 MiB), at least four; longer contractions take the
 * copying path of matmul_canon.c (their blocks are long, so it costs little there). */
#define QT_MM_CANON_B (1 << 18)
#define QT_MM_CANON_PMAX (QT_MM_CANON_B / (4 * QT_MM_NR))
/* Wide panels (KC x 1024 columns, in the same 1 MiB buffer) for the forward with many rows
 * and for the writing weight gradient: each A micro-panel then serves 32 strips, and A is
 * repacked 4x less often (measured on the Xeon VM: wgrad 4096x2048x4096 81 -> 110 GFLOP/s,
 * fwd 4096x8192x2048 99 -> 112; the forward with M <= 1024 was 3-6% slower wide, so it
 * keeps NC there). */
#define QT_MM_NCW 1024
#define QT_MM_WIDE_ROWS 2048
_Static_assert(QT_MM_KC * QT_MM_NCW <= QT_MM_CANON_B, "wide panel exceeds the panel buffer");

static struct {
    float bpack[QT_MM_KC * QT_MM_NC];    /* B panel: strips of [kc][NR], zero padded */
    float apack[QT_MM_MC * QT_MM_KC];    /* A block: micro-panels of [kc][MR] */
    float part[QT_MM_MC * QT_MM_NC];     /* partial accumulators between contraction blocks */
    float edge[QT_MM_MR * QT_MM_NR];     /* staging for tiles narrower than NR */
    float bfull[QT_MM_CANON_B];          /* canonical path: B panel over the whole contraction */
    float stack[QT_CANON_BLOCKS * QT_MM_MR * QT_MM_NR]; /* canonical path: one tile per block */
} qt_mm;

/* acc[i][v] = fma chain over p < kc of a(i,p) b(p, v*VW..), a(i,p) = ap[i*sai + p*sap],
 * b(p, jj) = bp[p*ldb + jj]; mr and nv compile-time constants after inlining. Two forms:
 * packed A micro-panels (sai 1, sap MR: constant offsets) and rows in place (four row
 * pointers, so the twelve broadcasts need no spilled index registers). */
static inline __attribute__((always_inline)) void
qt_mm_chain(qt_vec acc[QT_MM_MR][2], const float *ap, int64_t sai, int64_t sap, const float *bp,
            int64_t ldb, int64_t kc, const int mr, const int nv)
{
    if (sai == 1 && sap == QT_MM_MR) { /* packed micro-panel: constant offsets */
        for (int64_t p = 0; p < kc; p++) {
            const float *a = ap + p * QT_MM_MR;
            qt_vec b0 = QT_VLOAD(bp + p * ldb);
            if (nv == 2) {
                qt_vec b1 = QT_VLOAD(bp + p * ldb + QT_MM_VW);
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    qt_vec av = QT_VBCAST(a[i]);
                    acc[i][0] = QT_VFMA(av, b0, acc[i][0]);
                    acc[i][1] = QT_VFMA(av, b1, acc[i][1]);
                }
            } else { /* nr <= VW: the second half of the strip would only compute padding */
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) acc[i][0] = QT_VFMA(QT_VBCAST(a[i]), b0, acc[i][0]);
            }
        }
    } else { /* rows in place (sap 1): four row-group pointers, rows 0, sai, 2 sai from each */
        const int64_t s3 = 3 * sai; /* added, not multiplied per row group (gcc vectorised
                                       * the four products into a slow vpmullq) */
        const float *r0 = ap, *r1 = ap, *r2 = ap, *r3 = ap;
        if (mr > 3) r1 = ap + s3;
        if (mr > 6) r2 = r1 + s3;
        if (mr > 9) r3 = r2 + s3;
        /* The pointers advance by sap and bp by ldb each step, so a row's element is
         * (r, sai, 4) or (r, sai, 8) from its group's pointer: nine live integers. With the
         * index form (r[g][(i%3)*sai + p*sap]) gcc 12 kept four bases, three indexes, the
         * counter and its bound and spilled the counter to the stack (incq (%rsp) and a
         * compare against memory every step) and two bases to xmm registers (vmovq). */
        const float *const bend = bp + kc * ldb;
        for (; bp != bend; bp += ldb, r0 += sap, r1 += sap, r2 += sap, r3 += sap) {
            const float *const r[4] = {r0, r1, r2, r3};
            qt_vec b0 = QT_VLOAD(bp);
            if (nv == 2) {
                qt_vec b1 = QT_VLOAD(bp + QT_MM_VW);
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++) {
                    qt_vec av = QT_VBCAST(r[i / 3][(i % 3) * sai]);
                    acc[i][0] = QT_VFMA(av, b0, acc[i][0]);
                    acc[i][1] = QT_VFMA(av, b1, acc[i][1]);
                }
            } else {
#pragma GCC unroll 16
                for (int i = 0; i < mr; i++)
                    acc[i][0] = QT_VFMA(QT_VBCAST(r[i / 3][(i % 3) * sai]), b0, acc[i][0]);
            }
        }
    }
}

/* One tile of mr <= MR rows by nr <= NR columns over kc contraction steps, mr a compile-time
 * constant after inlining (so the accumulators stay in registers for every edge height).
 * acc starts from cin (ld ldi, NULL: +0), then out = acc (add 0), out = out + acc (add 1),
 * out = (+0) + acc (add 2: what add 1 gives on a zeroed out, without reading it) or, add 3,
 * the leaf-tree carry of that value (qt_leaf_carry.h): v = (+0) + acc, v = add[l][e] + v for
 * l = 0..n-1, out = v, e the element's offset from cy->dst (out lies in cy->dst; the
 * addends have its layout) - the additions of qt_tree_push on the stored leaf, in its order.
 * The addends' lines are prefetched before the chain runs (in the epilogue their misses
 * would stall it), and with add 2 or 3 the destination's lines for writing (a leaf or level
 * written for the first time in a while: the stores' ownership misses stalled the next
 * tiles; docs/bench.md, the fp32 expert weight gradient in row panels); add 4 is add 3 with
 * full, aligned rows stored non-temporally when out was not read (no cin): the caller
 * fences.
 * a(i,p) = ap[i*sai + p*sap] (packed micro-panel: sai 1, sap MR); b(p, jj) = bp[p*ldb + jj], and when
 * nr < NR the strip is a zero-padded packed one (ldb = NR), so full-width loads are safe. */
static inline __attribute__((always_inline)) void
qt_mm_tile_k(float *out, int64_t ldo, int add, const float *cin, int64_t ldi, const float *ap,
             int64_t sai, int64_t sap, const float *bp, int64_t ldb, int64_t kc, const int mr, int nr,
             const int nv, const qt_leaf_carry *cy)
{
    qt_vec acc[QT_MM_MR][2];
    if (cin && nr == QT_MM_NR) {
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            acc[i][0] = QT_VLOAD(cin + i * ldi);
            acc[i][1] = QT_VLOAD(cin + i * ldi + QT_MM_VW);
        }
    } else if (cin) {
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            for (int j = 0; j < QT_MM_NR; j++)
                qt_mm.edge[i * QT_MM_NR + j] = j < nr ? cin[i * ldi + j] : 0.0f;
            acc[i][0] = QT_VLOAD(qt_mm.edge + i * QT_MM_NR);
            acc[i][1] = QT_VLOAD(qt_mm.edge + i * QT_MM_NR + QT_MM_VW);
        }
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = QT_VZERO();
    }

    if (add >= 3) /* the carry's addends: fetched while the chain runs */
        for (int i = 0; i < mr; i++)
            for (int l = 0; l < cy->n; l++) {
                const float *t = cy->add[l] + (out - cy->dst) + i * ldo;
                _mm_prefetch((const char *)t, _MM_HINT_T0);
                _mm_prefetch((const char *)(t + nr - 1), _MM_HINT_T0);
            }
    if (add == 2 || add == 3) /* the destination's lines, owned while the chain runs */
        for (int i = 0; i < mr; i++) {
            _mm_prefetch((const char *)(out + i * ldo), _MM_HINT_ET0);
            _mm_prefetch((const char *)(out + i * ldo + nr - 1), _MM_HINT_ET0);
        }
    qt_mm_chain(acc, ap, sai, sap, bp, ldb, kc, mr, nv);

    if (nr == QT_MM_NR) {
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            float *o = out + i * ldo;
            if (add == 1) {
                QT_VSTORE(o, QT_VADD(QT_VLOAD(o), acc[i][0]));
                QT_VSTORE(o + QT_MM_VW, QT_VADD(QT_VLOAD(o + QT_MM_VW), acc[i][1]));
            } else if (add >= 3) {
                qt_vec v0 = QT_VADD(QT_VZERO(), acc[i][0]), v1 = QT_VADD(QT_VZERO(), acc[i][1]);
                const int64_t e = o - cy->dst;
                for (int l = 0; l < cy->n; l++) {
                    v0 = QT_VADD(QT_VLOAD(cy->add[l] + e), v0);
                    v1 = QT_VADD(QT_VLOAD(cy->add[l] + e + QT_MM_VW), v1);
                }
                if (add == 4 && !cin && !((uintptr_t)o & (4 * QT_MM_VW - 1))) {
                    QT_VSTREAM(o, v0);
                    QT_VSTREAM(o + QT_MM_VW, v1);
                } else {
                    QT_VSTORE(o, v0);
                    QT_VSTORE(o + QT_MM_VW, v1);
                }
            } else if (add == 2) {
                QT_VSTORE(o, QT_VADD(QT_VZERO(), acc[i][0]));
                QT_VSTORE(o + QT_MM_VW, QT_VADD(QT_VZERO(), acc[i][1]));
            } else {
                QT_VSTORE(o, acc[i][0]);
                QT_VSTORE(o + QT_MM_VW, acc[i][1]);
            }
        }
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            QT_VSTORE(qt_mm.edge + i * QT_MM_NR, acc[i][0]);
            QT_VSTORE(qt_mm.edge + i * QT_MM_NR + QT_MM_VW, acc[i][1]);
            float *o = out + i * ldo;
            for (int j = 0; j < nr; j++) {
                const float e = qt_mm.edge[i * QT_MM_NR + j];
                float v = add == 1 ? o[j] + e : add >= 2 ? 0.0f + e : e;
                if (add >= 3)
                    for (int l = 0; l < cy->n; l++) v = cy->add[l][(o - cy->dst) + j] + v;
                o[j] = v;
            }
        }
    }
}

/* Dispatch on the tile height (and on strips of at most one vector) so every edge tile gets
 * its own register-resident kernel. */
static void qt_mm_tile_m(float *out, int64_t ldo, int add, const float *cin, int64_t ldi,
                         const float *ap, int64_t sai, int64_t sap, const float *bp, int64_t ldb,
                         int64_t kc, int mr, int nr,
                         const qt_leaf_carry *cy)
{
#define QT_MM_CASE(h)                                                                         \
    case h:                                                                                   \
        if (nr <= QT_MM_VW)                                                                   \
            qt_mm_tile_k(out, ldo, add, cin, ldi, ap, sai, sap, bp, ldb, kc, h, nr, 1, cy);       \
        else qt_mm_tile_k(out, ldo, add, cin, ldi, ap, sai, sap, bp, ldb, kc, h, nr, 2, cy);  \
        break;
    switch (mr) {
    QT_MM_CASE(1) QT_MM_CASE(2) QT_MM_CASE(3) QT_MM_CASE(4) QT_MM_CASE(5) QT_MM_CASE(6)
#if QT_MM_MR > 6
    QT_MM_CASE(7) QT_MM_CASE(8) QT_MM_CASE(9) QT_MM_CASE(10) QT_MM_CASE(11) QT_MM_CASE(12)
#endif
    default: break;
    }
#undef QT_MM_CASE
}

static inline void qt_mm_tile(float *out, int64_t ldo, int add, const float *cin, int64_t ldi,
                              const float *ap, int64_t sai, int64_t sap, const float *bp,
                              int64_t ldb, int64_t kc, int mr, int nr)
{
    qt_mm_tile_m(out, ldo, add, cin, ldi, ap, sai, sap, bp, ldb, kc, mr, nr, 0);
}

/* Height of the row tile that starts rem rows before the end: MR, except that a remainder
 * between MR and 2 MR is split into two tiles of about equal height (64 rows: 4 x 12 and
 * 2 x 8, not 5 x 12 and a 4-row tile running at a third of the rate). Packed A micro-panels
 * stay MR apart (tile t at apack + t*MR*kc), so a block of MC rows still fits. */
static int qt_mm_rows(int64_t rem)
{
    return rem >= 2 * QT_MM_MR || rem == QT_MM_MR ? QT_MM_MR
           : rem > QT_MM_MR                        ? (int)((rem + 1) / 2)
                                                   : (int)rem;
}

/* Pack the A block a(i,p) = a[i*sai + p*sap], i in [0,mc), p in [0,kc), into micro-panels of
 * the row tiles (qt_mm_rows): tile t of rows [i0, i0 + mr) at apack + t*MR*kc, element
 * (i, p) at p*MR + (i - i0); rows past mc are never read. Packing removes
 * the strided (same cache set, one page per row) access pattern from the inner loop. */
static void qt_mm_pack_a(const float *a, int64_t sai, int64_t sap, int64_t mc, int64_t kc)
{
    int64_t mr;
    for (int64_t ir = 0, t = 0; ir < mc; ir += mr, t++) {
        float *dst = qt_mm.apack + t * QT_MM_MR * kc;
        mr = qt_mm_rows(mc - ir);
        if (sai == 1) {
            for (int64_t p = 0; p < kc; p++)
                for (int64_t i = 0; i < mr; i++) dst[p * QT_MM_MR + i] = a[(ir + i) + p * sap];
        } else {
            for (int64_t i = 0; i < mr; i++) {
                const float *src = a + (ir + i) * sai;
                for (int64_t p = 0; p < kc; p++) dst[p * QT_MM_MR + i] = src[p * sap];
            }
        }
    }
}

/* Pack b(p, j) = b[p*sbp + j] (rows contiguous in j) for p in [0,kc), j in [0,nc) into
 * strips [kc][NR] at out + s*kc*NR, zero padded. */
static void qt_mm_pack_rows(float *out, const float *b, int64_t sbp, int64_t kc, int64_t nc)
{
    /* row by row (each source row read once, front to back, instead of strip by strip down
     * the rows), full strips as two vector copies */
    const int64_t nfull = nc / QT_MM_NR, w = nc - nfull * QT_MM_NR;
    for (int64_t p = 0; p < kc; p++) {
        const float *src = b + p * sbp;
        float *dst = out + p * QT_MM_NR;
        for (int64_t s = 0; s < nfull; s++) {
            QT_VSTORE(dst + s * kc * QT_MM_NR, QT_VLOAD(src + s * QT_MM_NR));
            QT_VSTORE(dst + s * kc * QT_MM_NR + QT_MM_VW, QT_VLOAD(src + s * QT_MM_NR + QT_MM_VW));
        }
        if (w) {
            float *d = dst + nfull * kc * QT_MM_NR;
            const float *sr = src + nfull * QT_MM_NR;
            for (int64_t j = 0; j < QT_MM_NR; j++) d[j] = j < w ? sr[j] : 0.0f;
        }
    }
}

#if defined(__AVX512F__)
/* r[i] <- column i of the 16 x 16 block whose row i was r[i] (unpack, shuffle and two
 * 128-bit lane shuffle stages). Every loop is unrolled: left as loops (gcc 12 -O2 does not
 * unroll them by itself), r and t lived on the stack and each stage was a loop of loads and
 * stores (90 stack references per 16 x 16 block); unrolled, the 32 vectors stay in registers. */
static inline __attribute__((always_inline)) void qt_mm_tr16(__m512 r[16])
{
    __m512 t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
#pragma GCC unroll 16
    for (int h = 0; h < 16; h += 8)
#pragma GCC unroll 16
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
        }
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}
#endif

/* Pack b(p, j) = b[j*sbj + p] (columns contiguous in p: the transposed weight of fwd), same
 * strip layout as qt_mm_pack_rows. With AVX-512, full strips move as 16 x 16 register
 * transposes (the scalar element loop was 14% of the bench model's expert forward); the
 * contraction's remainder (kc % 16) and a narrow last strip element by element. */
static void qt_mm_pack_cols(float *out, const float *b, int64_t sbj, int64_t kc, int64_t nc)
{
    for (int64_t s = 0; s * QT_MM_NR < nc; s++) {
        float *dst = out + s * kc * QT_MM_NR;
        int64_t p0 = 0;
#if defined(__AVX512F__)
        if ((s + 1) * QT_MM_NR <= nc) {
            const int64_t s2 = 2 * sbj, s3 = s2 + sbj, s4 = s2 + s2;
            for (; p0 + 16 <= kc; p0 += 16)
                for (int h = 0; h < QT_MM_NR; h += 16) {
                    __m512 r[16];
                    /* four row-group pointers, offsets 0, sbj, 2 sbj, 3 sbj (sixteen
                     * products would spill their index registers) */
                    const float *g0 = b + (s * QT_MM_NR + h) * sbj + p0, *g1 = g0 + s4;
                    const float *g2 = g1 + s4, *g3 = g2 + s4;
#pragma GCC unroll 4
                    for (int i = 0; i < 4; i++) {
                        const int64_t o = i == 0 ? 0 : i == 1 ? sbj : i == 2 ? s2 : s3;
                        r[i] = _mm512_loadu_ps(g0 + o), r[i + 4] = _mm512_loadu_ps(g1 + o);
                        r[i + 8] = _mm512_loadu_ps(g2 + o), r[i + 12] = _mm512_loadu_ps(g3 + o);
                        /* the next 16 steps' lines (rows of a few lines each defeat the
                         * hardware prefetchers: the loads missed L2) */
                        if (p0 + 32 <= kc) {
                            _mm_prefetch((const char *)(g0 + o + 16), _MM_HINT_T0);
                            _mm_prefetch((const char *)(g1 + o + 16), _MM_HINT_T0);
                            _mm_prefetch((const char *)(g2 + o + 16), _MM_HINT_T0);
                            _mm_prefetch((const char *)(g3 + o + 16), _MM_HINT_T0);
                        }
                    }
                    qt_mm_tr16(r);
#pragma GCC unroll 16
                    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + (p0 + i) * QT_MM_NR + h, r[i]);
                }
        }
#endif
        for (int64_t jj = 0; jj < QT_MM_NR; jj++) {
            int64_t j = s * QT_MM_NR + jj;
            if (j < nc) {
                const float *src = b + j * sbj;
                for (int64_t p = p0; p < kc; p++) dst[p * QT_MM_NR + jj] = src[p];
            } else {
                for (int64_t p = p0; p < kc; p++) dst[p * QT_MM_NR + jj] = 0.0f;
            }
        }
    }
}

static int64_t qt_mm_min(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t qt_mm_canon_cols(int64_t P);

/* fwd: y is written, so it holds the partial sums between contraction blocks itself. */
static void qt_mm_fwd_opt(float *y, const float *x, const float *w, int64_t M, int64_t N,
                          int64_t K)
{
    const int64_t ncp = M >= QT_MM_WIDE_ROWS ? QT_MM_NCW : QT_MM_NC;
    for (int64_t jc = 0; jc < N; jc += ncp) {
        int64_t nc = qt_mm_min(ncp, N - jc);
        for (int64_t pc = 0; pc < K; pc += QT_MM_KC) {
            int64_t kc = qt_mm_min(QT_MM_KC, K - pc);
            qt_mm_pack_cols(qt_mm.bfull, w + jc * K + pc, K, kc, nc);
            for (int64_t ic = 0; ic < M; ic += QT_MM_MC) {
                int64_t mc = qt_mm_min(QT_MM_MC, M - ic);
                /* x rows are contiguous in k: reading them in place measured faster than
                 * packing (12 row streams fit L1 and the prefetchers) */
                const int pk = 0;
                if (pk) qt_mm_pack_a(x + ic * K + pc, K, 1, mc, kc);
                int mr;
                for (int64_t ir = 0, t = 0; ir < mc; ir += mr, t++) {
                    mr = qt_mm_rows(mc - ir);
                    const float *ap = pk ? qt_mm.apack + t * QT_MM_MR * kc : x + (ic + ir) * K + pc;
                    for (int64_t s = 0; s * QT_MM_NR < nc; s++) {
                        int nr = (int)qt_mm_min(QT_MM_NR, nc - s * QT_MM_NR);
                        float *o = y + (ic + ir) * N + jc + s * QT_MM_NR;
                        qt_mm_tile(o, N, 0, pc ? o : 0, N, ap, pk ? 1 : K, pk ? QT_MM_MR : 1,
                                   qt_mm.bfull + s * kc * QT_MM_NR, QT_MM_NR, kc, mr, nr);
                    }
                }
            }
        }
    }
}

/* C[I,J] (ld ldc) += sum_p a(i,p) b(p,j), a(i,p) = a[i*sai + p*sap], b(p,j) = b[p*sbp + j].
 * Full-width B strips are read in place (rows already contiguous in j), unless the row
 * stride is a multiple of 4 KiB (then the whole block is packed); the last, narrower strip
 * is packed with zero padding. */
static void qt_mm_acc_opt(float *c, int64_t ldc, const float *a, int64_t sai, int64_t sap,
                          const float *b, int64_t sbp, int64_t I, int64_t J, int64_t P)
{
    for (int64_t ic = 0; ic < I; ic += QT_MM_MC) {
        int64_t mc = qt_mm_min(QT_MM_MC, I - ic);
        for (int64_t jc = 0; jc < J; jc += QT_MM_NC) {
            int64_t nc = qt_mm_min(QT_MM_NC, J - jc);
            int64_t nfull = nc / QT_MM_NR;
            for (int64_t pc = 0; pc < P; pc += QT_MM_KC) {
                int64_t kc = qt_mm_min(QT_MM_KC, P - pc);
                int last = pc + kc >= P;
                /* Pack A when it is reused by several strips and its access is bad in place:
                 * wgrad (a(i,p) = dy[p*N + i]: one row, one page per p) or row strides that
                 * are multiples of 4 KiB (every row in the same L1 set). */
                int pk = nc > QT_MM_NR && (sap != 1 || sai % 1024 == 0);
                if (pk) qt_mm_pack_a(a + ic * sai + pc * sap, sai, sap, mc, kc);
                /* B rows at 4 KiB multiples all fall in one L1 set: the block is packed
                 * (measured on a quiet VM at the 80B slice's shapes: bwd_data 40-70 ->
                 * 84-87 GFLOP/s, wgrad 56-72 -> 74-75; same bits, only the layout moves) */
                const int pkb = sbp % 1024 == 0;
                if (pkb) qt_mm_pack_rows(qt_mm.bpack, b + pc * sbp + jc, sbp, kc, nc);
                else if (nfull * QT_MM_NR < nc)
                    qt_mm_pack_rows(qt_mm.bpack, b + pc * sbp + jc + nfull * QT_MM_NR, sbp, kc,
                                    nc - nfull * QT_MM_NR);
                int mr;
                for (int64_t ir = 0, t = 0; ir < mc; ir += mr, t++) {
                    mr = qt_mm_rows(mc - ir);
                    const float *ap = pk ? qt_mm.apack + t * QT_MM_MR * kc : a + (ic + ir) * sai + pc * sap;
                    int64_t tsi = pk ? 1 : sai, tsp = pk ? QT_MM_MR : sap;
                    for (int64_t s = 0; s * QT_MM_NR < nc; s++) {
                        int nr = (int)qt_mm_min(QT_MM_NR, nc - s * QT_MM_NR);
                        float *pt = qt_mm.part + ir * QT_MM_NC + s * QT_MM_NR;
                        const float *bp = pkb ? qt_mm.bpack + s * kc * QT_MM_NR
                                          : s < nfull ? b + pc * sbp + jc + s * QT_MM_NR
                                                      : qt_mm.bpack;
                        int64_t ldb = !pkb && s < nfull ? sbp : QT_MM_NR;
                        if (last)
                            qt_mm_tile(c + (ic + ir) * ldc + jc + s * QT_MM_NR, ldc, 1,
                                       pc ? pt : 0, QT_MM_NC, ap, tsi, tsp, bp, ldb, kc, mr, nr);
                        else
                            qt_mm_tile(pt, QT_MM_NC, 0, pc ? pt : 0, QT_MM_NC, ap, tsi, tsp, bp,
                                       ldb, kc, mr, QT_MM_NR);
                    }
                }
            }
        }
    }
}

/* The accumulating data gradient: every tile runs its chain over up to QT_MM_CANON_PMAX
 * contraction steps in registers, with B packed as [P][NR] strips of as many columns as fit
 * qt_mm.bfull, A rows (contiguous in p) read in place; C = C + acc once per element. A
 * contraction up to that length is one chunk: no partial tile, B packed once per column panel
 * for all rows. Longer ones run in equal chunks of at most that length, the partial chains of
 * a block of rows in qt_mm.part between chunks (a stored float reloads exactly). */
static void qt_mm_acc_full(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                           int64_t sbp, int64_t I, int64_t J, int64_t P)
{
    const int64_t nq = (P + QT_MM_CANON_PMAX - 1) / QT_MM_CANON_PMAX, pq = (P + nq - 1) / nq;
    const int64_t ncb = qt_mm_canon_cols(pq);
    const int64_t rows = (int64_t)(sizeof qt_mm.part / sizeof(float)) / ncb / QT_MM_MR * QT_MM_MR;
    const int64_t mcb = nq == 1 ? I : rows;
    for (int64_t jc = 0; jc < J; jc += ncb) {
        const int64_t nc = qt_mm_min(ncb, J - jc);
        for (int64_t ic = 0; ic < I; ic += mcb) {
            const int64_t mc = qt_mm_min(mcb, I - ic);
            for (int64_t q = 0; q < nq; q++) {
                const int64_t pc = q * pq, kc = qt_mm_min(pq, P - pc);
                const int last = q + 1 == nq;
                qt_mm_pack_rows(qt_mm.bfull, b + pc * sbp + jc, sbp, kc, nc);
                int mr;
                for (int64_t ir = 0; ir < mc; ir += mr) {
                    mr = qt_mm_rows(mc - ir);
                    for (int64_t s = 0; s * QT_MM_NR < nc; s++) {
                        float *pt = qt_mm.part + ir * ncb + s * QT_MM_NR;
                        const float *ap = a + (ic + ir) * lda + pc;
                        const float *bp = qt_mm.bfull + s * kc * QT_MM_NR;
                        if (last)
                            qt_mm_tile(c + (ic + ir) * ldc + jc + s * QT_MM_NR, ldc, 1,
                                       q ? pt : 0, ncb, ap, lda, 1, bp, QT_MM_NR, kc, mr,
                                       (int)qt_mm_min(QT_MM_NR, nc - s * QT_MM_NR));
                        else
                            qt_mm_tile(pt, ncb, 0, q ? pt : 0, ncb, ap, lda, 1, bp, QT_MM_NR, kc,
                                       mr, QT_MM_NR);
                    }
                }
            }
        }
    }
}

/* The writing form (add 2: C = (+0) + sum, C not read before): C itself holds the partial
 * chains between contraction blocks (a stored float reloads exactly), as y does in the
 * forward, so the loop order is the forward's with wide panels: each B block is packed once
 * for all rows (the accumulating order repacks it for every MC rows) and each A block once
 * per 1024 columns, and no partial tile buffer is needed. With a leaf-tree carry cy (C =
 * cy->dst, ldc its row length) the last block's tiles store the carry of (+0) + sum instead
 * (add 3, or 4: streamed where possible, when the caller asks and fences); the partial
 * chains before it wait in cy->dst, which is free until then. */
static void qt_mm_write_opt(float *c, int64_t ldc, const float *a, int64_t sai, int64_t sap,
                            const float *b, int64_t sbp, int64_t I, int64_t J, int64_t P,
                            const qt_leaf_carry *cy, int stream)
{
    const int fin = cy ? 3 + (stream != 0) : 2;
    for (int64_t jc = 0; jc < J; jc += QT_MM_NCW) {
        const int64_t nc = qt_mm_min(QT_MM_NCW, J - jc);
        for (int64_t pc = 0; pc < P; pc += QT_MM_KC) {
            const int64_t kc = qt_mm_min(QT_MM_KC, P - pc);
            const int last = pc + kc >= P;
            qt_mm_pack_rows(qt_mm.bfull, b + pc * sbp + jc, sbp, kc, nc);
            for (int64_t ic = 0; ic < I; ic += QT_MM_MC) {
                const int64_t mc = qt_mm_min(QT_MM_MC, I - ic);
                const int pk = nc > QT_MM_NR && (sap != 1 || sai % 1024 == 0);
                if (pk) qt_mm_pack_a(a + ic * sai + pc * sap, sai, sap, mc, kc);
                int mr;
                for (int64_t ir = 0, t = 0; ir < mc; ir += mr, t++) {
                    mr = qt_mm_rows(mc - ir);
                    const float *ap = pk ? qt_mm.apack + t * QT_MM_MR * kc : a + (ic + ir) * sai + pc * sap;
                    const int64_t tsi = pk ? 1 : sai, tsp = pk ? QT_MM_MR : sap;
                    for (int64_t s = 0; s * QT_MM_NR < nc; s++) {
                        const int nr = (int)qt_mm_min(QT_MM_NR, nc - s * QT_MM_NR);
                        float *o = c + (ic + ir) * ldc + jc + s * QT_MM_NR;
                        qt_mm_tile_m(o, ldc, last ? fin : 0, pc ? o : 0, ldc, ap, tsi, tsp,
                                     qt_mm.bfull + s * kc * QT_MM_NR, QT_MM_NR, kc, mr, nr,
                                     last ? cy : 0);
                    }
                }
            }
        }
    }
}

/* The tree's merge after subtotal q of nq (a block's or a pair's) of a canonical tile's mr
 * rows in acc: as many stacked subtotals as q has trailing one bits are added on the left;
 * unless q is the last, the result is stacked and 1 is returned. */
static inline __attribute__((always_inline)) int
qt_mm_canon_merge(qt_vec acc[QT_MM_MR][2], const int mr, int64_t q, int64_t nq, int64_t *depth)
{
    const int64_t tile = QT_MM_MR * QT_MM_NR;
    int nm = 0;
    for (int64_t b = q; b & 1; b >>= 1) nm++;
    float *const mrg = qt_mm.stack + (*depth - nm) * tile;
    for (int k = nm - 1; k >= 0; k--) { /* earlier subtotals on the left */
        const float *t = mrg + k * tile;
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            acc[i][0] = QT_VADD(QT_VLOAD(t + i * QT_MM_NR), acc[i][0]);
            acc[i][1] = QT_VADD(QT_VLOAD(t + i * QT_MM_NR + QT_MM_VW), acc[i][1]);
        }
    }
    if (q + 1 == nq) return 0;
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) {
        QT_VSTORE(mrg + i * QT_MM_NR, acc[i][0]);
        QT_VSTORE(mrg + i * QT_MM_NR + QT_MM_VW, acc[i][1]);
    }
    *depth = *depth - nm + 1;
    return 1;
}

/* One tile (mr rows, nr columns of a strip) of the canonical-block contraction, every block
 * in one call: block j's chain runs in registers from +0 over segment 0's slice and then,
 * continuing in the same registers, segment 1's ... (the stored and reloaded partial of the
 * per-segment form is exact, so this is its chain), then the pairwise tree is merged through
 * qt_mm.stack (a binary counter: after block j, as many stacked subtotals as j has trailing
 * one bits are added on the left), and the last block writes out: acc, or (+0) + acc with
 * plus_zero. mr and nv compile-time after inlining (one copy per tile height). */
static inline __attribute__((always_inline)) void
qt_mm_canon_k(float *out, int64_t ldo, int plus_zero, const float *a, int64_t lda,
              const float *bs, int64_t L, int64_t sl, int64_t nseg, int64_t nb, const int mr,
              int nr, const int nv)
{
    int64_t depth = 0; /* stacked subtotals */
    for (int64_t j = 0; j < nb; j++) {
        qt_vec acc[QT_MM_MR][2];
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = QT_VZERO();
        for (int64_t g = 0; g < nseg; g++) {
            const int64_t off = g * L + j * sl;
            qt_mm_chain(acc, a + off, lda, 1, bs + off * QT_MM_NR, QT_MM_NR, sl, mr, nv);
        }
        if (qt_mm_canon_merge(acc, mr, j, nb, &depth)) continue;
        if (plus_zero) {
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                acc[i][0] = QT_VADD(QT_VZERO(), acc[i][0]);
                acc[i][1] = QT_VADD(QT_VZERO(), acc[i][1]);
            }
        }
        if (nr == QT_MM_NR) {
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                QT_VSTORE(out + i * ldo, acc[i][0]);
                QT_VSTORE(out + i * ldo + QT_MM_VW, acc[i][1]);
            }
        } else {
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++) {
                QT_VSTORE(qt_mm.edge + i * QT_MM_NR, acc[i][0]);
                QT_VSTORE(qt_mm.edge + i * QT_MM_NR + QT_MM_VW, acc[i][1]);
                for (int c = 0; c < nr; c++) out[i * ldo + c] = qt_mm.edge[i * QT_MM_NR + c];
            }
        }
    }
}

/* The canonical-block contraction (matmul_canon.h) of one column panel, tile by tile:
 * out[i, j] (ld ldo, i < I, j < nc) = tree over blocks b of the chain over block b's indices
 * (segment 0's slice, then segment 1's, ...) of a(i,p) b(p,j), a(i,p) = a[i*lda + p] read in
 * place and B packed in qt_mm.bfull as [P][NR] strips; each tile runs all its blocks in one
 * call (one noinline copy per tile height: before, every block and segment was its own
 * qt_mm_tile_m call, with the partial stored and reloaded between segments - the same
 * values, 9-13% of the bench model's expert down projection and data gradient at nb 8):
 * with nb >= 2 and a full strip the paired tile of up to 6 rows (qt_mm_canon_pk: one
 * subtotal stored per pair of blocks; the canonical forms at the bench model's expert
 * shapes 100-104 -> 108-110 GFLOP/s, the plain kernel's 111-113), else qt_mm_canon_k's
 * up to 12 rows. The last block's tile writes the total to out: with plus_zero, (+0) + total. The
 * copying path of matmul_canon.c forms (+0) + partial at every leaf instead: the same bits,
 * since a sum of two floats is -0 exactly when both are -0 (round to nearest, gradual
 * underflow), so by induction over the tree, the tree of (+0) + b_j is (+0) + the tree of
 * b_j (NaN in, NaN out). */
#define QT_MM_CANON_H(h)                                                                      \
    static __attribute__((noinline)) void qt_mm_canon_t##h(                                  \
        float *out, int64_t ldo, int plus_zero, const float *a, int64_t lda, const float *bs, \
        int64_t L, int64_t sl, int64_t nseg, int64_t nb, int nr)                               \
    {                                                                                         \
        if (nr <= QT_MM_VW)                                                                   \
            qt_mm_canon_k(out, ldo, plus_zero, a, lda, bs, L, sl, nseg, nb, h, nr, 1);        \
        else qt_mm_canon_k(out, ldo, plus_zero, a, lda, bs, L, sl, nseg, nb, h, nr, 2);       \
    }
QT_MM_CANON_H(1) QT_MM_CANON_H(2) QT_MM_CANON_H(3) QT_MM_CANON_H(4) QT_MM_CANON_H(5)
QT_MM_CANON_H(6)
#if QT_MM_MR > 6
QT_MM_CANON_H(7) QT_MM_CANON_H(8) QT_MM_CANON_H(9) QT_MM_CANON_H(10) QT_MM_CANON_H(11)
QT_MM_CANON_H(12)
#endif
#undef QT_MM_CANON_H

#if QT_MM_MR == 12
/* The paired canonical tile (nb >= 2, full 32-column strips): h <= 6 rows run blocks 2q and
 * 2q + 1 interleaved in one loop, rows i in acc[i] (block 2q) and acc[6 + i] (block 2q + 1):
 * each block's chain is the single tile's (from +0, segment after segment, index increasing),
 * and the pair's sum b(2q) + b(2q+1) - the tree's first level, earlier block on the left - is
 * formed in registers, so only one subtotal per pair is stored and merged (the tree over the
 * pairs is the tree over the blocks from its second level up). 24 accumulators and four B
 * vectors: the 12 x 32 tile's register budget. */
static inline __attribute__((always_inline)) void
qt_mm_canon_pk(float *out, int64_t ldo, int plus_zero, const float *a, int64_t lda,
               const float *bs, int64_t L, int64_t sl, int64_t nseg, int64_t nb, const int h)
{
    const int64_t db = sl * QT_MM_NR;
    int64_t depth = 0;
    for (int64_t j = 0; j < nb; j += 2) {
        qt_vec acc[QT_MM_MR][2];
#pragma GCC unroll 16
        for (int i = 0; i < QT_MM_MR; i++) acc[i][0] = acc[i][1] = QT_VZERO();
        for (int64_t g = 0; g < nseg; g++) {
            const int64_t off = g * L + j * sl;
            const float *r0 = a + off, *r1 = a + off + 3 * lda;
            const float *bp = bs + off * QT_MM_NR, *const bend = bp + db;
            for (; bp != bend; bp += QT_MM_NR, r0++, r1++) {
                const float *const r[2] = {r0, r1};
                const qt_vec b0 = QT_VLOAD(bp), b1 = QT_VLOAD(bp + QT_MM_VW);
                const qt_vec c0 = QT_VLOAD(bp + db), c1 = QT_VLOAD(bp + db + QT_MM_VW);
#pragma GCC unroll 16
                for (int i = 0; i < h; i++) {
                    const float *ri = r[i / 3] + (i % 3) * lda;
                    const qt_vec av = QT_VBCAST(ri[0]), cv = QT_VBCAST(ri[sl]);
                    acc[i][0] = QT_VFMA(av, b0, acc[i][0]);
                    acc[i][1] = QT_VFMA(av, b1, acc[i][1]);
                    acc[6 + i][0] = QT_VFMA(cv, c0, acc[6 + i][0]);
                    acc[6 + i][1] = QT_VFMA(cv, c1, acc[6 + i][1]);
                }
            }
        }
#pragma GCC unroll 16
        for (int i = 0; i < h; i++) { /* the pair: b(j) + b(j+1) */
            acc[i][0] = QT_VADD(acc[i][0], acc[6 + i][0]);
            acc[i][1] = QT_VADD(acc[i][1], acc[6 + i][1]);
        }
        if (qt_mm_canon_merge(acc, h, j / 2, nb / 2, &depth)) continue; /* over the pairs */
#pragma GCC unroll 16
        for (int i = 0; i < h; i++) {
            if (plus_zero) {
                acc[i][0] = QT_VADD(QT_VZERO(), acc[i][0]);
                acc[i][1] = QT_VADD(QT_VZERO(), acc[i][1]);
            }
            QT_VSTORE(out + i * ldo, acc[i][0]);
            QT_VSTORE(out + i * ldo + QT_MM_VW, acc[i][1]);
        }
    }
}

#define QT_MM_CANON_P(h)                                                                      \
    static __attribute__((noinline)) void qt_mm_canon_p##h(                                  \
        float *out, int64_t ldo, int plus_zero, const float *a, int64_t lda, const float *bs, \
        int64_t L, int64_t sl, int64_t nseg, int64_t nb)                                      \
    {                                                                                         \
        qt_mm_canon_pk(out, ldo, plus_zero, a, lda, bs, L, sl, nseg, nb, h);                  \
    }
QT_MM_CANON_P(1) QT_MM_CANON_P(2) QT_MM_CANON_P(3) QT_MM_CANON_P(4) QT_MM_CANON_P(5)
QT_MM_CANON_P(6)
#undef QT_MM_CANON_P
#endif

static void qt_mm_canon_panel(float *out, int64_t ldo, const float *a, int64_t lda, int64_t I,
                              int64_t nc, int64_t P, int64_t nseg, int64_t nb, int plus_zero)
{
    typedef void (*qt_mm_canon_fn)(float *, int64_t, int, const float *, int64_t, const float *,
                                   int64_t, int64_t, int64_t, int64_t, int);
    static const qt_mm_canon_fn tiles[QT_MM_MR + 1] = {
        0, qt_mm_canon_t1, qt_mm_canon_t2, qt_mm_canon_t3, qt_mm_canon_t4, qt_mm_canon_t5,
        qt_mm_canon_t6,
#if QT_MM_MR > 6
        qt_mm_canon_t7, qt_mm_canon_t8, qt_mm_canon_t9, qt_mm_canon_t10, qt_mm_canon_t11,
        qt_mm_canon_t12,
#endif
    };
    const int64_t L = P / nseg, sl = L / nb;
    int mr;
#if QT_MM_MR == 12
    if (nb >= 2) { /* paired tiles of up to 6 rows (the last strip, if narrow, unpaired) */
        typedef void (*qt_mm_pair_fn)(float *, int64_t, int, const float *, int64_t,
                                      const float *, int64_t, int64_t, int64_t, int64_t);
        static const qt_mm_pair_fn pairs[7] = {0, qt_mm_canon_p1, qt_mm_canon_p2, qt_mm_canon_p3,
                                               qt_mm_canon_p4, qt_mm_canon_p5, qt_mm_canon_p6};
        for (int64_t ir = 0; ir < I; ir += mr) {
            const int64_t rem = I - ir;
            mr = rem >= 12 || rem == 6 ? 6 : rem > 6 ? (int)((rem + 1) / 2) : (int)rem;
            for (int64_t s = 0; s * QT_MM_NR < nc; s++) {
                const int nr = (int)qt_mm_min(QT_MM_NR, nc - s * QT_MM_NR);
                if (nr == QT_MM_NR)
                    pairs[mr](out + ir * ldo + s * QT_MM_NR, ldo, plus_zero, a + ir * lda, lda,
                              qt_mm.bfull + s * P * QT_MM_NR, L, sl, nseg, nb);
                else
                    tiles[mr](out + ir * ldo + s * QT_MM_NR, ldo, plus_zero, a + ir * lda, lda,
                              qt_mm.bfull + s * P * QT_MM_NR, L, sl, nseg, nb, nr);
            }
        }
        return;
    }
#endif
    for (int64_t ir = 0; ir < I; ir += mr) {
        mr = qt_mm_rows(I - ir);
        for (int64_t s = 0; s * QT_MM_NR < nc; s++)
            tiles[mr](out + ir * ldo + s * QT_MM_NR, ldo, plus_zero, a + ir * lda, lda,
                      qt_mm.bfull + s * P * QT_MM_NR, L, sl, nseg, nb,
                      (int)qt_mm_min(QT_MM_NR, nc - s * QT_MM_NR));
    }
}

/* Columns per panel of the whole-contraction paths (canonical, and the data gradient up to
 * 2048) for a contraction of P: as many NR strips as fill qt_mm.bfull. The panel is not capped:
 * with a short contraction (in_proj_ba's 64) every extra panel is another pass over A, which
 * cost more than B leaving L1 (in_proj_ba canon8 bwd_data 4096x64x2048: 256-column panels
 * 80-91 GFLOP/s, 4096 columns 112; its plain bwd_data 84-99 -> 147). */
static int64_t qt_mm_canon_cols(int64_t P)
{
    return QT_MM_CANON_B / P / QT_MM_NR * QT_MM_NR;
}
#endif

#ifndef QT_REAL_DOUBLE
int64_t qt_matmul_canon_fused_max(void)
{
#if defined(QT_MM_OPT)
    return QT_MM_CANON_PMAX;
#else
    return 0;
#endif
}

int qt_matmul_canon_fwd_fused(float *y, const float *x, const float *w, int64_t M, int64_t N,
                              int64_t K, int64_t nseg, int64_t nb)
{
#if defined(QT_MM_OPT)
    /* the tile's counter completes the tree for a power of two of blocks only (a count
     * with another factor, canonical_factor, takes the copying path: qt_canon_tree) */
    if (K < 1 || K > QT_MM_CANON_PMAX || nb < 1 || nb > QT_CANON_BLOCKS || (nb & (nb - 1)) ||
        nseg < 1 || K % (nseg * nb))
        return 0;
    const int64_t ncb = qt_mm_canon_cols(K);
    for (int64_t jc = 0; jc < N; jc += ncb) {
        const int64_t nc = qt_mm_min(ncb, N - jc);
        qt_mm_pack_cols(qt_mm.bfull, w + jc * K, K, K, nc);
        qt_mm_canon_panel(y + jc, N, x, K, M, nc, K, nseg, nb, 0);
    }
    return 1;
#else
    (void)y, (void)x, (void)w, (void)M, (void)N, (void)K, (void)nseg, (void)nb;
    return 0;
#endif
}

int qt_matmul_canon_bwd_data_fused(float *dx, const float *dy, const float *w, int64_t M,
                                   int64_t N, int64_t K, int64_t nseg, int64_t nb)
{
#if defined(QT_MM_OPT)
    /* the tile's counter completes the tree for a power of two of blocks only (a count
     * with another factor, canonical_factor, takes the copying path: qt_canon_tree) */
    if (N < 1 || N > QT_MM_CANON_PMAX || nb < 1 || nb > QT_CANON_BLOCKS || (nb & (nb - 1)) ||
        nseg < 1 || N % (nseg * nb))
        return 0;
    const int64_t ncb = qt_mm_canon_cols(N);
    for (int64_t jc = 0; jc < K; jc += ncb) {
        const int64_t nc = qt_mm_min(ncb, K - jc);
        qt_mm_pack_rows(qt_mm.bfull, w + jc, K, N, nc);
        qt_mm_canon_panel(dx + jc, K, dy, N, M, nc, N, nseg, nb, 1);
    }
    return 1;
#else
    (void)dx, (void)dy, (void)w, (void)M, (void)N, (void)K, (void)nseg, (void)nb;
    return 0;
#endif
}
#endif

void QT_FN(qt_matmul_fwd)(qt_real *y, const qt_real *x, const qt_real *w, int64_t M, int64_t N,
                          int64_t K)
{
#ifdef QT_MM_OPT
    if (K == 0) {
        for (int64_t i = 0; i < M * N; i++) y[i] = 0.0f;
        return;
    }
    qt_mm_fwd_opt(y, x, w, M, N, K);
#else
    QT_FN(qt_matmul_fwd_ref)(y, x, w, M, N, K);
#endif
}

void QT_FN(qt_matmul_bwd_data)(qt_real *dx, const qt_real *dy, const qt_real *w, int64_t M,
                               int64_t N, int64_t K)
{
#ifdef QT_MM_OPT
    if (N == 0) { /* empty contraction: dst + 0, as the reference */
        for (int64_t i = 0; i < M * K; i++) dx[i] = dx[i] + 0.0f;
        return;
    }
    qt_mm_acc_full(dx, K, dy, N, w, K, M, K, N);
#else
    QT_FN(qt_matmul_bwd_data_ref)(dx, dy, w, M, N, K);
#endif
}

void QT_FN(qt_matmul_wgrad)(qt_real *dw, const qt_real *dy, const qt_real *x, int64_t M,
                            int64_t N, int64_t K)
{
#ifdef QT_MM_OPT
    if (M == 0) {
        for (int64_t i = 0; i < N * K; i++) dw[i] = dw[i] + 0.0f;
        return;
    }
    qt_mm_acc_opt(dw, K, dy, 1, N, x, K, N, K, M);
#else
    QT_FN(qt_matmul_wgrad_ref)(dw, dy, x, M, N, K);
#endif
}

void QT_FN(qt_matmul_wgrad_write)(qt_real *dw, const qt_real *dy, const qt_real *x, int64_t M,
                                  int64_t N, int64_t K)
{
#ifdef QT_MM_OPT
    if (M == 0) {
        for (int64_t i = 0; i < N * K; i++) dw[i] = 0.0f + 0.0f;
        return;
    }
    qt_mm_write_opt(dw, K, dy, 1, N, x, K, N, K, M, 0, 0);
#else
    for (int64_t i = 0; i < N * K; i++) dw[i] = 0;
    QT_FN(qt_matmul_wgrad)(dw, dy, x, M, N, K);
#endif
}

#ifndef QT_REAL_DOUBLE
/* Carries of weights of 2^19 floats (2 MiB) or more are stored non-temporally, as tree.c
 * streams its large carries: the level is read again only by a later leaf's carry or the
 * step's total, after at least one more leaf of the weight has passed through the caches,
 * so a cached store would mostly add the read for ownership. Smaller carries can still be
 * in the cache then. Same values either way; measured (kernel_bench carry, the bench plan's
 * weights) within noise of streaming always or never. */
#define QT_MM_CARRY_STREAM (1 << 19)
int qt_matmul_wgrad_write_carry(const qt_leaf_carry *cy, const float *dy, const float *x,
                                int64_t M, int64_t N, int64_t K)
{
#ifdef QT_MM_OPT
    if (!cy || cy->n < 1 || cy->n > QT_LEAF_CARRY_MAX) return 0;
    if (M == 0) { /* empty contraction: the leaf is (+0) + (+0) everywhere */
        for (int64_t e = 0; e < N * K; e++) {
            float v = 0.0f + 0.0f;
            for (int l = 0; l < cy->n; l++) v = cy->add[l][e] + v;
            cy->dst[e] = v;
        }
        return 1;
    }
    const int stream = N * K >= QT_MM_CARRY_STREAM;
    qt_mm_write_opt(cy->dst, K, dy, 1, N, x, K, N, K, M, cy, stream);
    if (stream) _mm_sfence(); /* the streamed stores are ordered before what follows */
    return 1;
#else
    (void)cy, (void)dy, (void)x, (void)M, (void)N, (void)K;
    return 0;
#endif
}

/* One leaf's x packed as qt_mm_write_opt packs its B blocks, but over the whole contraction
 * at once: strip s at bfull + boff + s*M*NR, [M][NR], zero padded, so block pc of strip s
 * starts pc*NR further (what qt_mm_pack_rows gives that block on its own). x NULL: only
 * the size (or -1). */
int64_t qt_matmul_wgrad_panel_pack(int64_t boff, const float *x, int64_t M, int64_t K)
{
#ifdef QT_MM_OPT
    const int64_t need = M * ((K + QT_MM_NR - 1) / QT_MM_NR) * QT_MM_NR;
    if (boff < 0 || M < 0 || K < 1 || boff > QT_MM_CANON_B || need > QT_MM_CANON_B - boff)
        return -1;
    if (M > 0 && x) qt_mm_pack_rows(qt_mm.bfull + boff, x, K, M, K);
    return need;
#else
    (void)boff, (void)x, (void)M, (void)K;
    return -1;
#endif
}

/* Rows [i0, i1) of qt_mm_write_opt's output with B packed by qt_matmul_wgrad_panel_pack:
 * the same tiles (A packed per block of MC rows, partial chains of contractions over KC
 * steps waiting in the destination) and the same epilogue (add 2, or 3 with the carry); the
 * carry is stored non-temporally (add 4: full aligned rows, fenced before return) when the
 * caller says no later leaf reads it (stream != 0), else cached (the next leaf reads it). */
int qt_matmul_wgrad_panel(float *dw, const qt_leaf_carry *cy, const float *dy, int64_t M,
                          int64_t N, int64_t K, int64_t boff, int64_t i0, int64_t i1,
                          int stream)
{
#ifdef QT_MM_OPT
    if (cy && (cy->n < 1 || cy->n > QT_LEAF_CARRY_MAX)) return 0;
    float *const c = cy ? cy->dst : dw;
    if (M == 0) { /* (+0) + (+0), carried: qt_matmul_wgrad_write(_carry)'s empty contraction */
        for (int64_t e = i0 * K; e < i1 * K; e++) {
            float v = 0.0f + 0.0f;
            if (cy)
                for (int l = 0; l < cy->n; l++) v = cy->add[l][e] + v;
            c[e] = v;
        }
        return 1;
    }
    const int fin = cy ? 3 + (stream != 0) : 2;
    for (int64_t pc = 0; pc < M; pc += QT_MM_KC) {
        const int64_t kc = qt_mm_min(QT_MM_KC, M - pc);
        const int last = pc + kc >= M;
        for (int64_t ic = i0; ic < i1; ic += QT_MM_MC) {
            const int64_t mc = qt_mm_min(QT_MM_MC, i1 - ic);
            qt_mm_pack_a(dy + ic + pc * N, 1, N, mc, kc);
            int mr;
            for (int64_t ir = 0, t = 0; ir < mc; ir += mr, t++) {
                mr = qt_mm_rows(mc - ir);
                for (int64_t s = 0; s * QT_MM_NR < K; s++) {
                    const int nr = (int)qt_mm_min(QT_MM_NR, K - s * QT_MM_NR);
                    float *o = c + (ic + ir) * K + s * QT_MM_NR;
                    qt_mm_tile_m(o, K, last ? fin : 0, pc ? o : 0, K,
                                 qt_mm.apack + t * QT_MM_MR * kc, 1, QT_MM_MR,
                                 qt_mm.bfull + boff + s * M * QT_MM_NR + pc * QT_MM_NR,
                                 QT_MM_NR, kc, mr, nr, last ? cy : 0);
                }
            }
        }
    }
    if (fin == 4) _mm_sfence(); /* the streamed stores are ordered before what follows */
    return 1;
#else
    (void)dw, (void)cy, (void)dy, (void)M, (void)N, (void)K, (void)boff, (void)i0, (void)i1;
    (void)stream;
    return 0;
#endif
}
#endif
