/* bf16_matmul.h - dense matmuls on bf16 operands with fp32 outputs, in the Hugging Face
 * [out, in] weight layout: the shapes and roles of matmul.h, the arithmetic of the
 * VDPBF16PS step (bf16.h).
 *
 * Summation order (the bit contract). Every output element is one chain over its
 * contraction index p in [0, P), taken in PAIRS q = 0, 1, ..., ceil(P/2) - 1:
 *     acc = +0
 *     for q:  acc = step(A[2q+1], B[2q+1], acc)     (hi: the odd element first)
 *             acc = step(A[2q],   B[2q],   acc)     (lo)
 * where step is bf16.h's (DAZ, RNE FMA, FTZ with x86 tininess). For odd P the last pair's
 * hi element is +0 (both operands), so its step turns an acc of -0 into +0 and changes
 * nothing else. This is exactly VDPBF16PS with the pair (2q, 2q+1) in one 32-bit lane.
 * The pairs are formed along the contraction of each kernel:
 *     fwd       p = k, pairs (x[m,2q], x[m,2q+1]) with (w[n,2q], w[n,2q+1])
 *     bwd_data  p = n, pairs (dy[m,2q], dy[m,2q+1]) with (w[2q,k], w[2q+1,k])
 *     wgrad     p = m, pairs (dy[2q,n], dy[2q+1,n]) with (x[2q,k], x[2q+1,k])
 * Then the output: fwd y = acc; bwd_data dx = dx + acc (one IEEE fp32 addition, gradual
 * underflow, as the fp32 kernels); wgrad dw = (+0) + acc (writes: the bits of zeroing dw and
 * accumulating, as qt_matmul_wgrad_write). Every NaN these kernels write is 0x7fc00000 (the
 * NaN-ness of an output depends only on the values; the payload of a NaN would depend on
 * operand order inside FMA encodings, so it is fixed here).
 * The result depends neither on blocking (partial chains are stored as fp32 and reloaded,
 * exact) nor on the path: the scalar reference (*_ref), the AVX2+FMA emulation and the
 * AVX512_BF16 path give the same bits (tests/unit/test_bf16.cpp checks all three).
 * The AVX-512F wide emulation (QT_BF16_PATH_WIDE) gives them too, at the FMA rate: the
 * matmuls take it (qt_bf16_mm_path) where VDPBF16PS is not the faster instruction.
 * A row's result does not depend on the other rows (as matmul.h), so expert-parallel and
 * split batches keep the bits.
 * Not thread-safe: the vector paths pack panels into one static module buffer.
 * Float build only (absent under -DQT_REAL_DOUBLE).
 */
#ifndef QT_KERNEL_BF16_MATMUL_H
#define QT_KERNEL_BF16_MATMUL_H

#include <stdint.h>
#include "bf16.h"
#include "qt_leaf_carry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[M,N] = x[M,K] w[N,K]^T, x and w bf16. Writes y (fp32). */
void qt_bf16_matmul_fwd(float *y, const qt_bf16 *x, const qt_bf16 *w, int64_t M, int64_t N,
                        int64_t K);
/* dx[M,K] += dy[M,N] w[N,K], dy and w bf16 (contraction over n in pairs). Accumulates into
 * dx (fp32). */
void qt_bf16_matmul_bwd_data(float *dx, const qt_bf16 *dy, const qt_bf16 *w, int64_t M,
                             int64_t N, int64_t K);
/* dw[N,K] = (+0) + sum_m dy[m,n] x[m,k] over the M rows given (one sequence's), m in pairs;
 * dy and x bf16. Writes dw (fp32; dw is not read). */
void qt_bf16_matmul_wgrad(float *dw, const qt_bf16 *dy, const qt_bf16 *x, int64_t M,
                          int64_t N, int64_t K);

/* The path the firmware's bf16 matmuls take (bf16_matmul_canon.h's and the bf16 expert
 * FFN's too): QT_BF16_PATH_INSN on AMD CPUs when built with it (Zen 5 issues VDPBF16PS at
 * twice the fp32 FMA rate), else QT_BF16_PATH_WIDE when built (AVX-512F/BW/VL: Intel's
 * VDPBF16PS runs at half the FMA rate, measured in docs/bench.md), else qt_bf16_path().
 * Every path gives the same bits, so the choice moves time only. */
int qt_bf16_mm_path(void);

/* The same on a chosen path (QT_BF16_PATH_REF / _EMUL / _INSN / _WIDE of bf16.h), for the
 * tests and the bench: return 0, or -1 (nothing written) when this build lacks the path. */
int qt_bf16_matmul_fwd_on(int path, float *y, const qt_bf16 *x, const qt_bf16 *w, int64_t M,
                          int64_t N, int64_t K);
int qt_bf16_matmul_bwd_data_on(int path, float *dx, const qt_bf16 *dy, const qt_bf16 *w,
                               int64_t M, int64_t N, int64_t K);
int qt_bf16_matmul_wgrad_on(int path, float *dw, const qt_bf16 *dy, const qt_bf16 *x,
                            int64_t M, int64_t N, int64_t K);
/* fwd and bwd_data with row strides (ld*: elements between rows, >= the row's width): the
 * same chains and bits for every stride (the expert FFN pads gathered rows so that 12 rows
 * of a tile never share one L1 set). */
int qt_bf16_matmul_fwd_ld_on(int path, float *y, int64_t ldy, const qt_bf16 *x, int64_t ldx,
                             const qt_bf16 *w, int64_t M, int64_t N, int64_t K);
int qt_bf16_matmul_bwd_data_ld_on(int path, float *dx, int64_t lddx, const qt_bf16 *dy,
                                  int64_t lddy, const qt_bf16 *w, int64_t M, int64_t N,
                                  int64_t K);
/* bwd_data into a dx of zeros without reading it: dx = (+0) + chain (every NaN 0x7fc00000),
 * the bits of zeroing dx and calling qt_bf16_matmul_bwd_data_ld_on (the expert FFN's dh). */
int qt_bf16_matmul_bwd_data_z_ld_on(int path, float *dx, int64_t lddx, const qt_bf16 *dy,
                                    int64_t lddy, const qt_bf16 *w, int64_t M, int64_t N,
                                    int64_t K);
/* fwd and bwd_data with a bf16 output, rounded in the tile's finish: y = bf16(the fwd's y)
 * and dx = bf16(fp32(dx) + chain), the bits of the fp32 call followed by qt_bf16_from_f32_n
 * (dx widened first) - per element the same chain, the same finish (NaN 0x7fc00000) and
 * bf16.h's qt_bf16_round16, the rounding that pass makes, without the fp32 output's store,
 * reload and second pass. Only the instruction path (QT_BF16_PATH_INSN, built with
 * AVX-512BW/VL) has them: 0 when done, -1 (nothing written) on any other path or for P = 0
 * (K for fwd, N for bwd_data), where the caller takes the fp32 call and the rounding pass.
 * qt_bf16_matmul_fwd16 / _bwd_data16: on qt_bf16_mm_path(), rows contiguous. */
int qt_bf16_matmul_fwd16_ld_on(int path, qt_bf16 *y, int64_t ldy, const qt_bf16 *x,
                               int64_t ldx, const qt_bf16 *w, int64_t M, int64_t N, int64_t K);
int qt_bf16_matmul_bwd_data16_ld_on(int path, qt_bf16 *dx, int64_t lddx, const qt_bf16 *dy,
                                    int64_t lddy, const qt_bf16 *w, int64_t M, int64_t N,
                                    int64_t K);
int qt_bf16_matmul_fwd16(qt_bf16 *y, const qt_bf16 *x, const qt_bf16 *w, int64_t M, int64_t N,
                         int64_t K);
int qt_bf16_matmul_bwd_data16(qt_bf16 *dx, const qt_bf16 *dy, const qt_bf16 *w, int64_t M,
                              int64_t N, int64_t K);

/* The weight gradient with the leaf-tree carry of qt_leaf_carry.h in its finish: instead of
 * the leaf dw = (+0) + chain (NaN 0x7fc00000), cy->dst[e] = add[n-1][e] + (... + (add[0][e] +
 * leaf[e])), the additions of qt_tree_push on the stored leaf in its order: the same bits in
 * the same level, the leaf never stored. cy covers [N, K] row-major; dst may overlap no
 * addend. Every path carries (the vector paths in the tile finish, after a row block's last
 * contraction block; carries of 2^19 floats or more stored non-temporally, then fenced).
 * qt_bf16_matmul_wgrad_carry: on qt_bf16_mm_path(); 1 when applied, 0 (nothing written)
 * for a carry without addends or over QT_LEAF_CARRY_MAX. _on: 0, or -1 (nothing written)
 * for such a carry or a path this build lacks. */
int qt_bf16_matmul_wgrad_carry(const qt_leaf_carry *cy, const qt_bf16 *dy, const qt_bf16 *x,
                               int64_t M, int64_t N, int64_t K);
int qt_bf16_matmul_wgrad_carry_on(int path, const qt_leaf_carry *cy, const qt_bf16 *dy,
                                  const qt_bf16 *x, int64_t M, int64_t N, int64_t K);
/* The same for a slice of a larger weight (the expert FFN's experts): stream 1 / 0 stores the
 * carry non-temporally or not whatever N*K (-1: by N*K); qt_bf16_matmul_wgrad_carry_stream
 * says whether a weight of numel floats streams (2^19 or more). Same values either way. */
int qt_bf16_matmul_wgrad_carry_s_on(int path, const qt_leaf_carry *cy, const qt_bf16 *dy,
                                    const qt_bf16 *x, int64_t M, int64_t N, int64_t K,
                                    int stream);
int qt_bf16_matmul_wgrad_carry_stream(int64_t numel);
/* The weight gradient written (cy NULL: as qt_bf16_matmul_wgrad_on) or carried (as
 * qt_bf16_matmul_wgrad_carry_s_on with stream) with the caller's store ws of ws_n floats
 * (no addend's, dw's, dy's or x's): the instruction path packs dy^T there once for every
 * 256-column panel of x when N * ceil(M/2) words fit (else per panel, as without it); the
 * same bits either way. 0, or -1 as the calls it stands for. */
int qt_bf16_matmul_wgrad_ws_on(int path, float *dw, const qt_leaf_carry *cy, const qt_bf16 *dy,
                               const qt_bf16 *x, int64_t M, int64_t N, int64_t K, int stream,
                               float *ws, int64_t ws_n);

/* Every leaf of one weight gradient in one call (the interpreter's all-leaves offer,
 * qt_leaf_carry.h): leaf s < n from dy[s] and x[s] (M rows each) into dw[s], as
 * qt_bf16_matmul_wgrad, or, cy[s] != NULL, stored by its carry, as qt_bf16_matmul_wgrad_carry;
 * per output tile the leaves in order 0..n-1, so every element of every level sees the
 * operations of the n calls made in order: the same bits (a later leaf's carry reads a level
 * an earlier leaf wrote a moment before, in L1). The dw and carry regions overlap no dy or
 * x. _on: 0, or -1 (nothing written) when the path or the shape is not handled (the
 * instruction path, M <= 512, every leaf's packed x in the B panel) or an argument is out of
 * range (n in 1..QT_BF16_WGRAD_LEAVES_MAX, each carry's n in 1..QT_LEAF_CARRY_MAX, else a
 * dw); then the caller makes the calls one by one. qt_bf16_matmul_wgrad_leaves: on
 * qt_bf16_mm_path(), 1 when done. */
#define QT_BF16_WGRAD_LEAVES_MAX 16
int qt_bf16_matmul_wgrad_leaves_on(int path, int n, float *const *dw,
                                   const qt_leaf_carry *const *cy, const qt_bf16 *const *dy,
                                   const qt_bf16 *const *x, int64_t M, int64_t N, int64_t K);
int qt_bf16_matmul_wgrad_leaves(int n, float *const *dw, const qt_leaf_carry *const *cy,
                                const qt_bf16 *const *dy, const qt_bf16 *const *x, int64_t M,
                                int64_t N, int64_t K);

/* The canonical blocked contraction of bf16_matmul_canon.h fused on the instruction path
 * (its implementation; not a public entry): C[I,J] (row i at c + i*ldc, or with orow at
 * c + orow[i]*ldc, orow the row numbers as floats) = the pairwise tree over
 * nb blocks of the block chains of A(i,p) = a[i*sai + p] and B(p,j) = b[p*sbp + j*sbj], the
 * contraction nseg segments of nb slices of sl; plus: block partials (+0) + chain (the data
 * gradient's). The copying path's bits. Returns 0, or -1 (nothing written) when the build
 * lacks the instruction or the shape is not handled (sl odd, nb not a power of two up to 64,
 * a contraction over 2^14 pairs). */
int qt_bf16_mm_canon_insn(float *c, int64_t ldc, const float *orow, const qt_bf16 *a,
                          int64_t sai, const qt_bf16 *b, int64_t sbp, int64_t sbj, int64_t I,
                          int64_t J, int64_t nseg, int64_t nb, int64_t sl, int plus);

#ifdef __cplusplus
}
#endif

#endif
