/* bf16_matmul_canon.h - the canonical blocked contractions of matmul_canon.h on bf16
 * operands (docs/precision.md, "MATMUL_* canonical").
 *
 * Block structure as matmul_canon.h: the contraction (K of the forward, N of the data
 * gradient) holds `nseg` equal segments of length L; each is cut into `nb` slices of
 * sl = L / nb; canonical block j is the j-th slice of every segment, packed segment 0's
 * slice then segment 1's (kb = nseg * sl indices). Block j's partial is the bf16 matmul
 * (bf16_matmul.h) over the packed block: one VDPBF16PS chain per output from +0, in pairs
 * (2q, 2q+1) of the packed block's indices, hi element first; an odd kb pads the block's own
 * last pair's hi element with +0 (for nseg = 1 that is the slice's own last pair; for
 * nseg = 2 and odd sl a pair spans the end of segment 0's slice and the start of segment 1's,
 * exactly as the plain chain over the packed indices does). Partials are fp32 (the forward:
 * the chain; the data gradient: (+0) + chain); they are combined by the pairwise fp32 tree
 * ((b0+b1)+(b2+b3))+... in place into partial 0 and copied to out.
 * Invariants: nb = 1 gives the plain bf16 matmul's bits (fwd: qt_bf16_matmul_fwd; bwd_data:
 * qt_bf16_matmul_bwd_data into +0); a tensor-parallel rank t of P holding blocks
 * [t*nb/P, (t+1)*nb/P) of every segment computes its subtree with nb/P, and the P subtrees
 * added pairwise give the nb result bit for bit; the path (reference / emulation /
 * instruction) never changes a bit. nb is a power of two dividing L. On the instruction path
 * an even slice runs fused (bf16_matmul.h qt_bf16_mm_canon_insn: no packed copies, partials
 * or tree pass; the scratch is not touched), with these bits.
 * Scratch: QT_CANON_FWD_SCRATCH / QT_CANON_BWD_SCRATCH floats of matmul_canon.h: nb*M*N
 * (nb*M*K) fp32 partials, then the bf16 packs of the block's operands, which take half the
 * room the macro reserves for fp32 packs. Float build only; not thread-safe (bf16_matmul.h).
 */
#ifndef QT_KERNEL_BF16_MATMUL_CANON_H
#define QT_KERNEL_BF16_MATMUL_CANON_H

#include <stdint.h>
#include "bf16.h"
#include "matmul_canon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[M,N] = tree over the nb blocks of x[M,K] w[N,K]^T (bf16 x, w; contraction over K,
 * K = nseg * nb * sl). Writes out (fp32). scratch: QT_CANON_FWD_SCRATCH(M, N, K, nb) floats
 * (written). */
void qt_bf16_matmul_canon_fwd(float *out, const qt_bf16 *x, const qt_bf16 *w, int64_t M,
                              int64_t N, int64_t K, int64_t nseg, int64_t nb, float *scratch);
/* out[M,K] = tree over the nb blocks of dy[M,N] w[N,K] (bf16 dy, w; contraction over N,
 * N = nseg * nb * sl). Writes out (fp32: the tree total, out is not read).
 * scratch: QT_CANON_BWD_SCRATCH(M, N, K, nb) floats (written). */
void qt_bf16_matmul_canon_bwd_data(float *out, const qt_bf16 *dy, const qt_bf16 *w, int64_t M,
                                   int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                   float *scratch);
/* The references: block partials from the scalar reference path of bf16_matmul.h; same
 * contract, scratch and bits. */
void qt_bf16_matmul_canon_fwd_ref(float *out, const qt_bf16 *x, const qt_bf16 *w, int64_t M,
                                  int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                  float *scratch);
void qt_bf16_matmul_canon_bwd_data_ref(float *out, const qt_bf16 *dy, const qt_bf16 *w,
                                       int64_t M, int64_t N, int64_t K, int64_t nseg,
                                       int64_t nb, float *scratch);
/* The same on a chosen path (QT_BF16_PATH_*): 0, or -1 (nothing written) when the build
 * lacks the path. */
int qt_bf16_matmul_canon_fwd_on(int path, float *out, const qt_bf16 *x, const qt_bf16 *w,
                                int64_t M, int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                float *scratch);
int qt_bf16_matmul_canon_bwd_data_on(int path, float *out, const qt_bf16 *dy,
                                     const qt_bf16 *w, int64_t M, int64_t N, int64_t K,
                                     int64_t nseg, int64_t nb, float *scratch);
/* The same with row strides and an optional row map: out row m at out + orow[m] * ldo
 * (orow: row numbers as floats, exact below 2^24; NULL: out + m * ldo), the left operand's
 * row m at x + m * ldx (dy + m * lddy); strides >= the rows' widths. The same bits for every
 * stride and map (the expert FFN's padded gathered rows and its rows written in place).
 * Scratch as above (with nb <= 1 and a map the rows are computed there, then placed). */
int qt_bf16_matmul_canon_fwd_ld_on(int path, float *out, int64_t ldo, const float *orow,
                                   const qt_bf16 *x, int64_t ldx, const qt_bf16 *w, int64_t M,
                                   int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                   float *scratch);
int qt_bf16_matmul_canon_bwd_data_ld_on(int path, float *out, int64_t ldo, const float *orow,
                                        const qt_bf16 *dy, int64_t lddy, const qt_bf16 *w,
                                        int64_t M, int64_t N, int64_t K, int64_t nseg,
                                        int64_t nb, float *scratch);

/* 1 when this build has bf16 path `path` (QT_BF16_PATH_*), else 0. */
int qt_bf16_path_built(int path);

#ifdef __cplusplus
}
#endif

#endif
