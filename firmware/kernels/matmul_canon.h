/* matmul_canon.h - contractions with a canonical blocking, so that splitting the
 * contraction over tensor-parallel ranks does not change the bits (docs/design.md section 6).
 *
 * The contraction index (K of the forward, N of the data gradient) holds `nseg` equal
 * segments (1, or 2 for an expert's [gate | up] rows). Each segment is cut into `nb` equal
 * slices; canonical block j is the j-th slice of every segment. A block's partial is the
 * plain kernel's result over the block's indices (one fma chain per output element from +0,
 * increasing index, segment 0's slice then segment 1's: matmul.h). The nb partials are then
 * combined by the pairwise tree ((b0+b1)+(b2+b3))+((b4+b5)+(b6+b7)); nb is a power of two.
 * One rank uses the model's canonical count (QT_CANON_BLOCKS or the largest power of two
 * dividing the segment, at most that); a tensor-parallel rank of degree P holds blocks
 * [t*nb/P, (t+1)*nb/P) of every segment as its local contraction, computes their subtree
 * here with nb/P, and the ranks' subtrees are added by a fixed-pairing all-reduce: the same
 * tree, the same bits. Every kernel exists as float (name) and double (name_f64).
 */
#ifndef QT_KERNEL_MATMUL_CANON_H
#define QT_KERNEL_MATMUL_CANON_H

#include <stdint.h>

/* Most canonical blocks of a contraction: tensor-parallel degrees up to this keep the bits. */
#define QT_CANON_BLOCKS 8
/* Scratch floats the canonical kernels need. */
#define QT_CANON_FWD_SCRATCH(M, N, K, nb) ((nb) * (M) * (N) + ((M) + (N)) * ((K) / (nb)))
#define QT_CANON_BWD_SCRATCH(M, N, K, nb) ((nb) * (M) * (K) + ((M) + (K)) * ((N) / (nb)))

/* The canonical block count of a contraction of (global) length n in nseg segments: the
 * largest power of two <= QT_CANON_BLOCKS dividing n / nseg. configgen plans with it. */
static inline int64_t qt_canon_blocks(int64_t n, int64_t nseg)
{
    int64_t nb = QT_CANON_BLOCKS;
    if (nseg < 1 || n % nseg) return 1;
    while (nb > 1 && (n / nseg) % nb) nb /= 2;
    return nb;
}

#ifdef __cplusplus
extern "C" {
#endif

/* The canonical blocks' pairwise tree over nb buffers of n elements, in place (nb a power
 * of two): ((b0+b1)+(b2+b3))+...; the total ends in buf[0] (the bf16 canonical kernels use
 * it too, bf16_matmul_canon.h). */
void qt_canon_tree(float *buf, int64_t n, int64_t nb);
void qt_canon_tree_f64(double *buf, int64_t n, int64_t nb);
/* out[M,N] = tree over the nb blocks of x[M,K] w[N,K]^T (contraction over K). Writes out.
 * K = nseg * nb * slice. scratch: QT_CANON_FWD_SCRATCH(M, N, K, nb) floats. */
void qt_matmul_canon_fwd(float *out, const float *x, const float *w, int64_t M, int64_t N,
                         int64_t K, int64_t nseg, int64_t nb, float *scratch);
/* out[M,K] = tree over the nb blocks of dy[M,N] w[N,K] (contraction over N). Writes out.
 * N = nseg * nb * slice. scratch: QT_CANON_BWD_SCRATCH(M, N, K, nb) floats; with nb = nseg = 1
 * no scratch is read (out is written directly: it may be the scratch itself). */
void qt_matmul_canon_bwd_data(float *out, const float *dy, const float *w, int64_t M,
                              int64_t N, int64_t K, int64_t nseg, int64_t nb, float *scratch);
/* The references: block partials from the scalar kernels (matmul.h *_ref) on packed copies,
 * then the tree; same contract and scratch. The tests compare the kernels above to them. */
void qt_matmul_canon_fwd_ref(float *out, const float *x, const float *w, int64_t M, int64_t N,
                             int64_t K, int64_t nseg, int64_t nb, float *scratch);
void qt_matmul_canon_bwd_data_ref(float *out, const float *dy, const float *w, int64_t M,
                                  int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                  float *scratch);
void qt_matmul_canon_fwd_ref_f64(double *out, const double *x, const double *w, int64_t M,
                                 int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                 double *scratch);
void qt_matmul_canon_bwd_data_ref_f64(double *out, const double *dy, const double *w,
                                      int64_t M, int64_t N, int64_t K, int64_t nseg,
                                      int64_t nb, double *scratch);
void qt_matmul_canon_fwd_f64(double *out, const double *x, const double *w, int64_t M,
                             int64_t N, int64_t K, int64_t nseg, int64_t nb, double *scratch);
void qt_matmul_canon_bwd_data_f64(double *out, const double *dy, const double *w, int64_t M,
                                  int64_t N, int64_t K, int64_t nseg, int64_t nb,
                                  double *scratch);

#ifdef __cplusplus
}
#endif

#endif
