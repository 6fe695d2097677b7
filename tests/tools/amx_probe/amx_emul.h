/* amx_emul.h - portable scalar emulations of candidate arithmetics for AMX TDPBF16PS (issue
 * 34; docs/amx.md, /work/shared/research/amx-bf16.md section (c)), and the discriminating
 * cases T1-T8 plus the further NaN / Inf / tininess cases with the bits each candidate gives.
 *
 * One TDPBF16PS on C (M x N fp32), A (M x K pairs of bf16), B (K x N pairs): for each (m, n)
 * the even products A[m][2k] B[k][2n] and the odd products A[m][2k+1] B[k][2n+1], k < K.
 * Candidates (every step rounds to nearest even; DAZ: a denormal bf16 or C reads as the zero
 * of its sign; FTZ: a result below FLT_MIN, tininess decided after rounding with an unbounded
 * exponent as x86 does, is the zero of its sign; both done on the bits, not through MXCSR):
 *  E1  the SDM: two fused chains from +0, e = fma(ae, be, e), o = fma(ao, bo, o) in
 *      ascending k; then t = e + o; then C + t.
 *  E2  the Intrinsics Guide: one fused chain from C, per k even then odd.
 *  E3  one fused chain from C, per k odd then even (VDPBF16PS's order).
 *  E4G E1 with unfused products: p = round(a b) with gradual underflow, then e = p + e.
 *  E4F E4G with the products flushed (FTZ on the product too).
 *  E5  the exact sum of C and every product, rounded once.
 *  E6  a pairwise tree: the products rounded to fp32 (FTZ) in the order e0, o0, e1, o1, ...,
 *      adjacent pairs added level by level (an odd last element moves up unchanged); C + tree.
 * Flags (variants for the T7/T8/tininess rows): QT_AMX_NO_DAZ, QT_AMX_NO_FTZ,
 * QT_AMX_TINY_BEFORE (tininess decided on the exact value, before rounding).
 * NaNs (Intel states no rule for AMX; these are this file's, reported, not claimed): a fused
 * step returns the first NaN of (a, b, acc) quieted; a product the first of (a, b); an add
 * p + acc or x + y its first operand's NaN (chains add the product first; E1 and E6 add C
 * first: C + t); E5 the first NaN of (C, ae0, be0, ao0, bo0, ae1, ...). An invalid operation
 * (inf * 0, inf - inf) gives x86's default NaN 0xffc00000 on every host.
 * Invariants: pure functions of their arguments; no heap, no static state. They use fmaf and
 * float adds for the common case, so the caller's floating-point environment must be C's
 * default (round to nearest, no flush-to-zero): the probe changes MXCSR only around the
 * hardware instruction. Results near FLT_MIN go through an exact 576-bit fixed-point sum.
 */
#ifndef QT_AMX_EMUL_H
#define QT_AMX_EMUL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { QT_AMX_E1, QT_AMX_E2, QT_AMX_E3, QT_AMX_E4G, QT_AMX_E4F, QT_AMX_E5, QT_AMX_E6,
       QT_AMX_NCAND };

#define QT_AMX_NO_DAZ 1u
#define QT_AMX_NO_FTZ 2u
#define QT_AMX_TINY_BEFORE 4u

/* The candidate's short name ("E1", ..., "E4g", "E4f", ...) and one-line description. */
const char *qt_amx_cand_name(int cand);
const char *qt_amx_cand_what(int cand);

/* One output element: C's bits c, K pairs; ae[k], be[k] the even and ao[k], bo[k] the odd
 * bf16 operands. Returns the fp32 bits. */
uint32_t qt_amx_dot(int cand, unsigned flags, uint32_t c, const uint16_t *ae, const uint16_t *ao,
                    const uint16_t *be, const uint16_t *bo, int k);

/* One instruction on a tile: c[m * ldc + n] (fp32 bits, in/out) for m < rows, n < cols, from
 * a[m * lda + 2 kk + {0, 1}] and b[kk * ldb + 2 n + {0, 1}], kk < k (k <= 64). */
void qt_amx_tile(int cand, unsigned flags, uint32_t *c, int ldc, const uint16_t *a, int lda,
                 const uint16_t *b, int ldb, int rows, int cols, int k);

/* The cases: T1-T8 of amx-bf16.md and the further ones (F1-F15). want[cand] is the bits the candidate
 * gives under flags 0; doc has bit cand set where amx-bf16.md's table states that value (the
 * others are derived by hand in amx_emul.c's comments). */
#define QT_AMX_CASE_K 4
typedef struct {
    const char *name, *what;
    int k;
    uint16_t ae[QT_AMX_CASE_K], ao[QT_AMX_CASE_K], be[QT_AMX_CASE_K], bo[QT_AMX_CASE_K];
    uint32_t c;
    uint32_t want[QT_AMX_NCAND];
    unsigned doc;
} qt_amx_case;

int qt_amx_case_count(void);
const qt_amx_case *qt_amx_case_get(int i);

#ifdef __cplusplus
}
#endif

#endif
