/* matmul.h - dense matmuls in the Hugging Face [out, in] weight layout.
 *
 * Determinism: every output element is the dot product over the contraction index in
 * increasing order, evaluated as a chain of fused multiply-adds starting from +0
 * (acc = fma(a, b, acc)); the accumulating variants then do dst = dst + acc once. The
 * result therefore depends neither on blocking nor on ISA: the AVX-512 / AVX2 paths are
 * bit-identical to the scalar reference (*_ref), which the tests check.
 * Both precisions are declared: the float names are the firmware kernels, the *_f64 names
 * come from compiling matmul.c with -DQT_REAL_DOUBLE (scalar path only).
 * Not thread-safe: the optimised path packs panels into one static module buffer.
 */
#ifndef QT_KERNEL_MATMUL_H
#define QT_KERNEL_MATMUL_H

#include <stdint.h>
#include "qt_leaf_carry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[M,N] = x[M,K] w[N,K]^T. Writes y. */
void qt_matmul_fwd(float *y, const float *x, const float *w, int64_t M, int64_t N, int64_t K);
/* dx[M,K] += dy[M,N] w[N,K] (contraction over n increasing). Accumulates into dx. */
void qt_matmul_bwd_data(float *dx, const float *dy, const float *w, int64_t M, int64_t N,
                        int64_t K);
/* dw[N,K] += sum_m dy[m,n] x[m,k], m increasing. Accumulates into dw. */
void qt_matmul_wgrad(float *dw, const float *dy, const float *x, int64_t M, int64_t N,
                     int64_t K);

/* The canonical-block contractions of matmul_canon.h (same contract and bits: out written,
 * contraction of P = K (fwd) or N (bwd_data) in nseg segments x nb blocks) computed tile by
 * tile with no copies and no scratch. They return 0 and do nothing when the optimised path
 * is not built or P is outside their range (P > qt_matmul_canon_fused_max(): 2048 with
 * AVX-512 tiles, 4096 with AVX2's narrower ones; long blocks, where the copying path of
 * matmul_canon.c costs little); matmul_canon.c calls them first. Float only. */
int64_t qt_matmul_canon_fused_max(void); /* the longest P they take; 0 without the path */
int qt_matmul_canon_fwd_fused(float *y, const float *x, const float *w, int64_t M, int64_t N,
                              int64_t K, int64_t nseg, int64_t nb);
int qt_matmul_canon_bwd_data_fused(float *dx, const float *dy, const float *w, int64_t M,
                                   int64_t N, int64_t K, int64_t nseg, int64_t nb);

/* dw[N,K] = (+0) + sum_m dy[m,n] x[m,k]: the bits of zeroing dw and calling qt_matmul_wgrad,
 * without reading dw (a weight gradient's first and only contribution to its leaf). Writes
 * dw. */
void qt_matmul_wgrad_write(float *dw, const float *dy, const float *x, int64_t M, int64_t N,
                           int64_t K);
void qt_matmul_wgrad_write_f64(double *dw, const double *dy, const double *x, int64_t M,
                               int64_t N, int64_t K);
/* The writing weight gradient with a leaf-tree carry in its epilogue (qt_leaf_carry.h):
 * for every element e of dW[N,K], as soon as r = (+0) + sum_m dy[m,n] x[m,k] is final,
 * cy->dst[e] = cy->add[n-1][e] + (... + (cy->add[0][e] + r)) - the bits of
 * qt_matmul_wgrad_write into a buffer and qt_tree_push of it. Reads cy->add[l][0, N*K),
 * writes cy->dst[0, N*K) (also its partial sums before that when M > 256: it must overlap
 * no addend and no input). Returns 1; returns 0 and touches nothing when the optimised path
 * is not built or cy has no addends (then write the leaf and push it). Float only. */
int qt_matmul_wgrad_write_carry(const qt_leaf_carry *cy, const float *dy, const float *x,
                                int64_t M, int64_t N, int64_t K);

/* Row panels of writing weight gradients (the expert FFN's leaves in panels, expert_ffn.c):
 * qt_matmul_wgrad_panel_pack packs x[M,K] (rows contiguous) as the B operand of one leaf at
 * float offset boff of the kernel's 1 MiB panel buffer and returns the floats it takes, or
 * -1 (nothing packed) when it does not fit there or the optimised path is not built (x
 * NULL: only that answer);
 * qt_matmul_wgrad_panel then computes rows [i0, i1) of dW[N,K] from dy[M,N] and that packed
 * x, each element exactly as qt_matmul_wgrad_write (cy NULL: writes dw) or
 * qt_matmul_wgrad_write_carry (cy: stores the carry in cy->dst, dw unused) computes it: the
 * same chain and epilogue per element, so running a weight's rows panel by panel, leaf after
 * leaf inside a panel, gives the bits of the whole calls in leaf order. Packs made for
 * several leaves stay valid until a call of another matmul entry (which reuse the buffer).
 * qt_matmul_wgrad_panel returns 1; 0 with nothing written when the optimised path is not
 * built or cy has no addends. M may be 0 (the empty contraction's (+0) + (+0)). stream != 0:
 * the carry's full aligned rows are stored non-temporally (for a level nothing reads again
 * soon; fenced before return); values identical either way. Float only. */
int64_t qt_matmul_wgrad_panel_pack(int64_t boff, const float *x, int64_t M, int64_t K);
int qt_matmul_wgrad_panel(float *dw, const qt_leaf_carry *cy, const float *dy, int64_t M,
                          int64_t N, int64_t K, int64_t boff, int64_t i0, int64_t i1,
                          int stream);

/* Scalar references with the same contract (used by the tests for bit identity). */
void qt_matmul_fwd_ref(float *y, const float *x, const float *w, int64_t M, int64_t N,
                       int64_t K);
void qt_matmul_bwd_data_ref(float *dx, const float *dy, const float *w, int64_t M, int64_t N,
                            int64_t K);
void qt_matmul_wgrad_ref(float *dw, const float *dy, const float *x, int64_t M, int64_t N,
                         int64_t K);

void qt_matmul_fwd_f64(double *y, const double *x, const double *w, int64_t M, int64_t N,
                       int64_t K);
void qt_matmul_bwd_data_f64(double *dx, const double *dy, const double *w, int64_t M,
                            int64_t N, int64_t K);
void qt_matmul_wgrad_f64(double *dw, const double *dy, const double *x, int64_t M, int64_t N,
                         int64_t K);
void qt_matmul_fwd_ref_f64(double *y, const double *x, const double *w, int64_t M, int64_t N,
                           int64_t K);
void qt_matmul_bwd_data_ref_f64(double *dx, const double *dy, const double *w, int64_t M,
                                int64_t N, int64_t K);
void qt_matmul_wgrad_ref_f64(double *dw, const double *dy, const double *x, int64_t M,
                             int64_t N, int64_t K);

#ifdef __cplusplus
}
#endif

#endif
