/* expert_ffn.h - routed expert SwiGLU FFN over (token, slot) rows: forward, backward (data)
 * and the per-sequence weight gradient.
 *
 * Layouts (qt_ops.h EXPERT_FFN_*): x[T,d], idx I32[T,k], row r = t*k + slot;
 * y[T*k,d] (unweighted expert output), gu[T*k,2f] (saved pre-activations: gate columns
 * [0,f), up columns [f,2f)), W_gu[E,2f,d], W_down[E,d,f] (HF [out,in]).
 * Expert e's rows are gathered into scratch in increasing r, run through the matmul kernels
 * (matmul.h) and scattered back. Row results do not depend on which other rows share the
 * matmul (the matmul contract: a fixed K order per output element), so the batch split and
 * the scratch size never change the forward/backward bits. Scratch holds `cap` rows at a
 * time: cap = scratch_elems / (d + 2f) forward, / (d + 3f) backward and wgrad. With the
 * plan's scratch T*k*(d+f), k >= 2 and f <= d (or k >= 3), cap >= S, so a sequence's wgrad
 * never splits an expert's rows. A scratch too small for one row poisons the outputs
 * with NaN. Every kernel exists as float (name) and double (name_f64).
 */
#ifndef QT_KERNELS_EXPERT_FFN_H
#define QT_KERNELS_EXPERT_FFN_H

#include <stdint.h>
#include "qt_leaf_carry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y, gu write. Reads x, idx, w_gu, w_down. */
void qt_expert_ffn_fwd(float *y, float *gu, const float *x, const int32_t *idx,
                       const float *w_gu, const float *w_down, float *scratch,
                       int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                       int64_t scratch_elems);
void qt_expert_ffn_fwd_f64(double *y, double *gu, const double *x, const int32_t *idx,
                           const double *w_gu, const double *w_down, double *scratch,
                           int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                           int64_t scratch_elems);

/* The same with the down projection's contraction (over f) in nb canonical blocks
 * (kernels/matmul_canon.h; nb = 0: the plain chain): tensor-parallel ranks holding f/P of
 * every expert compute their subtree and add the rows across ranks. */
void qt_expert_ffn_fwd_canon(float *y, float *gu, const float *x, const int32_t *idx,
                             const float *w_gu, const float *w_down, float *scratch, int64_t T,
                             int64_t k, int64_t E, int64_t d, int64_t f, int64_t scratch_elems,
                             int64_t nb);
void qt_expert_ffn_fwd_canon_f64(double *y, double *gu, const double *x, const int32_t *idx,
                                 const double *w_gu, const double *w_down, double *scratch,
                                 int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                                 int64_t scratch_elems, int64_t nb);

/* The per-expert row lists (built once per call by the backward): list[off[e] ..
 * off[e+1]) holds expert e's rows r in increasing order, rows whose expert is outside
 * [0,E) in no list; off has E+1 entries. Row numbers are stored as floats (exact below
 * 2^24, checked by the callers) so the lists live in the float scratch without type
 * punning. Writes list[R'] (R' rows with a valid expert) and off. */
void qt_expert_ffn_lists(float *list, float *off, const int32_t *idx, int64_t R, int64_t E);
void qt_expert_ffn_lists_f64(double *list, double *off, const int32_t *idx, int64_t R,
                             int64_t E);
/* dx[T,d] accumulates; each token's slots add in increasing slot order. Expert-major (row
 * lists, weights read once) when scratch >= T*k*(d+1) + E+1 + (d+3f), else slot-major;
 * both give the same bits. Reads dy[T*k,d], x, idx, gu, w_gu, w_down. */
void qt_expert_ffn_bwd(float *dx, const float *dy, const int32_t *idx, const float *gu,
                       const float *w_gu, const float *w_down, float *scratch,
                       int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                       int64_t scratch_elems);
void qt_expert_ffn_bwd_f64(double *dx, const double *dy, const int32_t *idx,
                           const double *gu, const double *w_gu, const double *w_down,
                           double *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                           int64_t f, int64_t scratch_elems);
/* As bwd (same dx bits), and also writes dgu[T*k,2f]: row r = d(gate, up) of that row
 * (d gate = dh*u*silu'(gate), d up = dh*silu(gate), dh = dy[r] W_down[e]); rows whose
 * expert is outside [0,E) are left untouched. dgu NULL: not written. */
void qt_expert_ffn_bwd_save(float *dx, float *dgu, const float *dy, const int32_t *idx,
                            const float *gu, const float *w_gu, const float *w_down,
                            float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                            int64_t f, int64_t scratch_elems);
void qt_expert_ffn_bwd_save_f64(double *dx, double *dgu, const double *dy,
                                const int32_t *idx, const double *gu, const double *w_gu,
                                const double *w_down, double *scratch, int64_t T, int64_t k,
                                int64_t E, int64_t d, int64_t f, int64_t scratch_elems);

/* The same with the data gradient's contraction over [gate | up] (2f, two parts) in nb
 * canonical blocks per part (nb = 0: the plain chain). */
void qt_expert_ffn_bwd_save_canon(float *dx, float *dgu, const float *dy, const int32_t *idx,
                                  const float *gu, const float *w_gu, const float *w_down,
                                  float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                                  int64_t f, int64_t scratch_elems, int64_t nb);
void qt_expert_ffn_bwd_save_canon_f64(double *dx, double *dgu, const double *dy,
                                      const int32_t *idx, const double *gu, const double *w_gu,
                                      const double *w_down, double *scratch, int64_t T,
                                      int64_t k, int64_t E, int64_t d, int64_t f,
                                      int64_t scratch_elems, int64_t nb);

/* dw_gu[E,2f,d] and dw_down[E,d,f] accumulate the gradient of the T rows given (one
 * sequence: pass pointers already offset to its first token). Per expert, rows r
 * increasing (t then slot), via matmul_wgrad. Reads dy, x, idx, gu, w_down. */
void qt_expert_ffn_wgrad(float *dw_gu, float *dw_down, const float *dy, const float *x,
                         const int32_t *idx, const float *gu, const float *w_down,
                         float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                         int64_t f, int64_t scratch_elems);
void qt_expert_ffn_wgrad_f64(double *dw_gu, double *dw_down, const double *dy,
                             const double *x, const int32_t *idx, const double *gu,
                             const double *w_down, double *scratch, int64_t T, int64_t k,
                             int64_t E, int64_t d, int64_t f, int64_t scratch_elems);

/* As wgrad (same bits) but reads the backward's dgu rows instead of recomputing them
 * (one matmul fewer per expert). Reads dy, x, idx, gu, dgu (offset like dy). */
void qt_expert_ffn_wgrad_saved(float *dw_gu, float *dw_down, const float *dy, const float *x,
                               const int32_t *idx, const float *gu, const float *dgu,
                               float *scratch, int64_t T, int64_t k, int64_t E, int64_t d,
                               int64_t f, int64_t scratch_elems);
void qt_expert_ffn_wgrad_saved_f64(double *dw_gu, double *dw_down, const double *dy,
                                   const double *x, const int32_t *idx, const double *gu,
                                   const double *dgu, double *scratch, int64_t T, int64_t k,
                                   int64_t E, int64_t d, int64_t f, int64_t scratch_elems);

/* As wgrad_saved, but dw_gu and dw_down are written, not read: (+0) + each sum, and +0 for
 * experts without rows - the bits of zeroing them and calling wgrad_saved. */
void qt_expert_ffn_wgrad_saved_write(float *dw_gu, float *dw_down, const float *dy,
                                     const float *x, const int32_t *idx, const float *gu,
                                     const float *dgu, float *scratch, int64_t T, int64_t k,
                                     int64_t E, int64_t d, int64_t f, int64_t scratch_elems);
void qt_expert_ffn_wgrad_saved_write_f64(double *dw_gu, double *dw_down, const double *dy,
                                         const double *x, const int32_t *idx,
                                         const double *gu, const double *dgu, double *scratch,
                                         int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                                         int64_t scratch_elems);

/* qt_expert_ffn_wgrad_saved_write with a leaf-tree carry per weight in the matmul epilogue
 * (qt_leaf_carry.h; c_gu over dW_gu[E,2f,d], c_down over dW_down[E,d,f]): c->dst receives
 * the carry of the leaf the writing form would have written (an expert without rows: of
 * +0), the same bits as writing it and qt_tree_push. Returns 1; returns 0 and touches
 * nothing when the carrying matmul is not built, a carry is missing or the scratch holds
 * fewer than T rows (an expert's rows would span chunks). Float only. */
int qt_expert_ffn_wgrad_saved_carry(const qt_leaf_carry *c_gu, const qt_leaf_carry *c_down,
                                    const float *dy, const float *x, const int32_t *idx,
                                    const float *gu, const float *dgu, float *scratch,
                                    int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                                    int64_t scratch_elems);

/* One leaf (sequence) of qt_expert_ffn_wgrad_saved_leaves: its rows (T tokens of k slots:
 * dy, x, idx, gu, dgu offset to its first token, as for qt_expert_ffn_wgrad_saved_write) and
 * where it goes: written into dw_gu, dw_down (c_gu, c_down NULL), or the carries c_gu,
 * c_down. */
typedef struct qt_ffn_leaf {
    const float *dy, *x, *gu, *dgu;
    const int32_t *idx;
    int64_t T, k;
    float *dw_gu, *dw_down;
    const qt_leaf_carry *c_gu, *c_down;
} qt_ffn_leaf;

/* The leaves lv[0..n) of one WGRAD op in one pass (the interpreter's all-leaves offer,
 * qt_leaf_carry.h): for each expert, its slices of leaf 0, then of leaf 1, ..., each computed
 * as qt_expert_ffn_wgrad_saved_write (or _carry) computes it. An expert's slices are
 * disjoint from every other expert's in every output and tree level, and each slice sees the
 * same operations in the same order as when the leaves run one after the other, so the bits
 * are those of n calls in leaf order; the level slices a later leaf's carry reads were
 * written a moment before (an expert's gate/up slice is 2f*d floats) instead of whole levels
 * ago. Returns 1 when done; 0, with nothing written, when a leaf has neither both carries
 * (applicable, with a scratch of T rows) nor both outputs, or the scratch holds no row (the
 * caller then runs the leaves one by one). Float only. */
int qt_expert_ffn_wgrad_saved_leaves(const qt_ffn_leaf *lv, int32_t n, float *scratch,
                                     int64_t E, int64_t d, int64_t f, int64_t scratch_elems);

/* qt_expert_ffn_wgrad_saved_leaves with the form chosen: panel_rows 0 runs each expert's
 * slices leaf after leaf (the form before row panels, kept as the reference); otherwise an
 * expert whose leaves' rows fit (each leaf's rows of it in one chunk of the scratch, every
 * leaf's gathered A rows in the scratch and packed B rows in the matmul's 1 MiB panel
 * buffer at once) runs each weight slice in row panels of panel_rows rows (< 0: about 64
 * KiB of a level, in 12-row tiles), every leaf in order inside a panel; the others leaf
 * after leaf. Same bits either way (a weight row's chains and carries never read another
 * row). *paneled (when not NULL) receives the number of experts that ran in panels. */
int qt_expert_ffn_wgrad_saved_leaves_panels(const qt_ffn_leaf *lv, int32_t n, float *scratch,
                                            int64_t E, int64_t d, int64_t f,
                                            int64_t scratch_elems, int64_t panel_rows,
                                            int64_t *paneled);

/* References of the plan's three passes (kernels/expert_ffn_ref.c): one row at a time on the
 * scalar matmul references (the weight gradient in the same row chunks as above); the same
 * arguments, bits and poisoning as the kernels. Scratch: fwd 2f (+ nb*d + (1+d)*(f/nb) with
 * canonical blocks), bwd d + 3f (+ nb*d + (1+d)*(2f/nb)), wgrad as qt_expert_ffn_wgrad. */
void qt_expert_ffn_fwd_canon_ref(float *y, float *gu, const float *x, const int32_t *idx,
                                 const float *w_gu, const float *w_down, float *scratch,
                                 int64_t T, int64_t k, int64_t E, int64_t d, int64_t f,
                                 int64_t scratch_elems, int64_t nb);
void qt_expert_ffn_bwd_save_canon_ref(float *dx, float *dgu, const float *dy,
                                      const int32_t *idx, const float *gu, const float *w_gu,
                                      const float *w_down, float *scratch, int64_t T,
                                      int64_t k, int64_t E, int64_t d, int64_t f,
                                      int64_t scratch_elems, int64_t nb);
void qt_expert_ffn_wgrad_saved_write_ref(float *dw_gu, float *dw_down, const float *dy,
                                         const float *x, const int32_t *idx, const float *gu,
                                         const float *dgu, float *scratch, int64_t T,
                                         int64_t k, int64_t E, int64_t d, int64_t f,
                                         int64_t scratch_elems);
void qt_expert_ffn_fwd_canon_ref_f64(double *y, double *gu, const double *x,
                                     const int32_t *idx, const double *w_gu,
                                     const double *w_down, double *scratch, int64_t T,
                                     int64_t k, int64_t E, int64_t d, int64_t f,
                                     int64_t scratch_elems, int64_t nb);
void qt_expert_ffn_bwd_save_canon_ref_f64(double *dx, double *dgu, const double *dy,
                                          const int32_t *idx, const double *gu,
                                          const double *w_gu, const double *w_down,
                                          double *scratch, int64_t T, int64_t k, int64_t E,
                                          int64_t d, int64_t f, int64_t scratch_elems,
                                          int64_t nb);
void qt_expert_ffn_wgrad_saved_write_ref_f64(double *dw_gu, double *dw_down, const double *dy,
                                             const double *x, const int32_t *idx,
                                             const double *gu, const double *dgu,
                                             double *scratch, int64_t T, int64_t k, int64_t E,
                                             int64_t d, int64_t f, int64_t scratch_elems);

#ifdef __cplusplus
}
#endif

#endif
