/* bf16_expert_ffn.h - the routed expert SwiGLU FFN on bf16 operands (docs/precision.md,
 * "EXPERT_FFN_*" rows of "Executing bf16 plans"): forward, backward (data, optional dgu
 * save) and the per-sequence weight gradient.
 *
 * Layouts and row order exactly as expert_ffn.h: x[T,d], idx I32[T,k], row r = t*k + slot,
 * gu[T*k,2f] (gate columns [0,f), up [f,2f)), W_gu[E,2f,d], W_down[E,d,f]; rows whose
 * expert id is outside [0,E) are skipped (their gu / dgu / y rows untouched, no dx add);
 * expert e's rows are taken in increasing r.
 * Precision (the one rule): the fp32 kernel's computation, in its order, on widened bf16
 * values, except that (1) every contraction is the VDPBF16PS chain of bf16_matmul.h (the
 * canonical blocks of bf16_matmul_canon.h where the fp32 kernel uses matmul_canon.h), and
 * (2) matmul operands produced inside the kernel are rounded with qt_bf16_from_f32. The
 * rounding points, and nothing else is rounded:
 *   fwd:   gu = bf16(x W_gu[e]^T chain)          (stored; the widened stored value is used)
 *          h  = bf16(silu(gate) * up)            (fp32 expression of the fp32 kernel)
 *          y  = h W_down[e]^T chain / canonical tree, fp32 (written; not rounded here)
 *   bwd:   dh = (+0) + dy W_down[e] chain, fp32 (not rounded)
 *          dgu = bf16(d gate, d up)              (the fp32 kernel's formulas on dh and the
 *                                                 widened gu; stored if dgu != NULL)
 *          dx row = dgu W_gu[e] (plain: (+0) + chain; nb > 0: canonical, nseg = 2), fp32;
 *          dx[t] += row, fp32, for the token's valid slots in increasing slot order
 *   wgrad: h and dgu as above (dgu read when saved, else recomputed: the same bits);
 *          dW_down[e] = (+0) + chain over the expert's rows (pairs of rows in increasing r)
 *          of dy^T h, dW_gu[e] = (+0) + chain of dgu^T x; fp32 leaves written whole
 *          (+0 for experts without rows).
 * Rows never depend on other rows in fwd and bwd, so the rows-per-chunk cap never changes
 * bits. The wgrad chain runs over all of an expert's rows: when they exceed the cap the
 * chain is continued across chunks in the fp32 leaf (the step chain of bf16.h, pair by
 * pair, the same bits as one matmul).
 * Scratch (floats, fp32 storage; bf16 rows take half a float per element): the plan's
 * size for the fp32 kernel (>= max(T*k*(d+f), S*(d+3f)), qt_ops.def) suffices. Too small
 * for one row (two for a wgrad whose expert rows exceed the cap) or T*k > 2^24: the fp32
 * outputs are NaN. Float build only; not thread-safe (bf16_matmul.h).
 */
#ifndef QT_KERNEL_BF16_EXPERT_FFN_H
#define QT_KERNEL_BF16_EXPERT_FFN_H

#include <stdint.h>
#include "bf16.h"
#include "qt_leaf_carry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[T*k,d] (fp32) and gu[T*k,2f] (bf16) written for rows with a valid expert. Reads
 * x[T,d], idx[T,k], w_gu[E,2f,d], w_down[E,d,f] (bf16). nb: canonical blocks of the down
 * contraction over f (0: the plain chain). */
void qt_bf16_expert_ffn_fwd(float *y, qt_bf16 *gu, const qt_bf16 *x, const int32_t *idx,
                            const qt_bf16 *w_gu, const qt_bf16 *w_down, float *scratch,
                            int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                            int64_t scratch_elems, int64_t nb);
/* dx[T,d] (fp32) accumulates; dgu[T*k,2f] (bf16, NULL: not written) written for rows with a
 * valid expert. Reads dy[T*k,d], idx, gu, w_gu, w_down (bf16). nb: canonical blocks per part
 * of the data gradient's contraction over [gate | up] (0: plain). Expert-major (row lists,
 * weights read once) when scratch >= T*k*(d+1) + E+1 + one row, else slot-major: same bits.
 * On an expert host: k = 1, T = Rmax rows, local ids, dx the fp32 host rows. */
void qt_bf16_expert_ffn_bwd(float *dx, qt_bf16 *dgu, const qt_bf16 *dy, const int32_t *idx,
                            const qt_bf16 *gu, const qt_bf16 *w_gu, const qt_bf16 *w_down,
                            float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                            int64_t f, int64_t scratch_elems, int64_t nb);
/* dw_gu[E,2f,d] and dw_down[E,d,f] (fp32 leaves) written whole from the T tokens given (one
 * sequence: pointers offset to its first token). Reads dy, x, idx, gu, dgu (bf16; NULL:
 * recomputed from dy, gu and w_down, same bits), w_down (read only when dgu is NULL). */
void qt_bf16_expert_ffn_wgrad(float *dw_gu, float *dw_down, const qt_bf16 *dy,
                              const qt_bf16 *x, const int32_t *idx, const qt_bf16 *gu,
                              const qt_bf16 *dgu, const qt_bf16 *w_down, float *scratch,
                              int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                              int64_t scratch_elems);
/* qt_bf16_expert_ffn_wgrad with a leaf-tree carry per weight in the finish (qt_leaf_carry.h;
 * c_gu over dW_gu[E,2f,d], c_down over dW_down[E,d,f]): c->dst receives the carry of the
 * leaf the writing form would have written, with the additions of qt_tree_push in its order
 * (an expert without rows: the carry of +0; an expert whose rows exceed the cap: its chain
 * continued in c->dst, then finished with the carry). Returns 1 when applied, 0 (nothing
 * written) when a carry is missing or has no addends, or the scratch cannot hold a pair of
 * rows. The _on form: 0 / -1 (also for a path this build lacks). */
int qt_bf16_expert_ffn_wgrad_carry(const qt_leaf_carry *c_gu, const qt_leaf_carry *c_down,
                                   const qt_bf16 *dy, const qt_bf16 *x, const int32_t *idx,
                                   const qt_bf16 *gu, const qt_bf16 *dgu, const qt_bf16 *w_down,
                                   float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                                   int64_t f, int64_t scratch_elems);

/* One leaf (sequence) of qt_bf16_expert_ffn_wgrad_leaves: its rows (T tokens of k slots:
 * dy, x, idx, gu, dgu offset to its first token, as for qt_bf16_expert_ffn_wgrad) and where
 * it goes: written into dw_gu, dw_down (c_gu, c_down NULL), or the carries c_gu, c_down. */
typedef struct qt_bf16_ffn_leaf {
    const qt_bf16 *dy, *x, *gu, *dgu;
    const int32_t *idx;
    int64_t T, k;
    float *dw_gu, *dw_down;
    const qt_leaf_carry *c_gu, *c_down;
} qt_bf16_ffn_leaf;

/* The leaves lv[0..n) of one call in one pass: for each expert, its slices of leaf 0, then
 * of leaf 1, ... each computed as qt_bf16_expert_ffn_wgrad (or _carry) computes it. An
 * expert's slices are disjoint from every other expert's in every output and tree level, and
 * each slice sees the same operations in the same order as when the leaves run one after
 * the other, so the bits are those of n calls in leaf order; the levels a later leaf's carry
 * reads are an expert's slices, still in the caches (only the last leaf's carry streams).
 * Returns 1 when done, 0 (nothing written) when a leaf has neither a whole carry pair nor
 * both outputs, or the scratch cannot hold a pair of rows of some leaf's expert (the
 * caller then runs the leaves one by one). The _on form: 0 / -1. */
int qt_bf16_expert_ffn_wgrad_leaves(const qt_bf16_ffn_leaf *lv, int32_t n,
                                    const qt_bf16 *w_down, float *scratch, int64_t E, int64_t d,
                                    int64_t f, int64_t scratch_elems);
int qt_bf16_expert_ffn_wgrad_leaves_on(int path, const qt_bf16_ffn_leaf *lv, int32_t n,
                                       const qt_bf16 *w_down, float *scratch, int64_t E,
                                       int64_t d, int64_t f, int64_t scratch_elems);

/* The same on a chosen path (QT_BF16_PATH_*), for the tests: 0, or -1 (nothing written)
 * when this build lacks the path. */
int qt_bf16_expert_ffn_fwd_on(int path, float *y, qt_bf16 *gu, const qt_bf16 *x,
                              const int32_t *idx, const qt_bf16 *w_gu, const qt_bf16 *w_down,
                              float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                              int64_t f, int64_t scratch_elems, int64_t nb);
int qt_bf16_expert_ffn_bwd_on(int path, float *dx, qt_bf16 *dgu, const qt_bf16 *dy,
                              const int32_t *idx, const qt_bf16 *gu, const qt_bf16 *w_gu,
                              const qt_bf16 *w_down, float *scratch, int64_t T, int64_t k,
                              int64_t E, int64_t d, int64_t f, int64_t scratch_elems,
                              int64_t nb);
int qt_bf16_expert_ffn_wgrad_on(int path, float *dw_gu, float *dw_down, const qt_bf16 *dy,
                                const qt_bf16 *x, const int32_t *idx, const qt_bf16 *gu,
                                const qt_bf16 *dgu, const qt_bf16 *w_down, float *scratch,
                                int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                                int64_t scratch_elems);
int qt_bf16_expert_ffn_wgrad_carry_on(int path, const qt_leaf_carry *c_gu,
                                      const qt_leaf_carry *c_down, const qt_bf16 *dy,
                                      const qt_bf16 *x, const int32_t *idx, const qt_bf16 *gu,
                                      const qt_bf16 *dgu, const qt_bf16 *w_down, float *scratch,
                                      int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                                      int64_t scratch_elems);

#ifdef __cplusplus
}
#endif

#endif
