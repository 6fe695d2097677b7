/* qt_ckpt_gather.h - one parameter of a flat region in its GLOBAL layout, for checkpoint IO
 * on any mesh (ckpt_gather.c).
 *
 * Checkpoint files hold every parameter, its Adam moments and (dump_grads=) its gradient in
 * the global row-major layout of one rank. On a mesh a rank holds:
 *  - params: a compute copy of every parameter, of its LOCAL shape (a shard for tensors
 *    sharded over mesh axes, e.g. routed experts over `expert`);
 *  - Adam m / v and the normalised gradient: only its optimizer block of each flat range
 *    (qt_step_block), over its local flat layout.
 * Local element j of parameter i is global element qt_global_index(plan, tensor, j).
 *
 * Windows (issue 21): a tensor moves in windows of whole rows of its first dimension
 * (experts of a fused expert tensor, rows of an embedding), global rows [r0, r1), the
 * window's elements being global elements [r0 x row, r1 x row) (row = the product of the
 * other dims); qt_ckpt_window_rows gives the rows per window the staging region holds (all
 * of them on one rank or when it holds the whole tensor), so staging is sized for a
 * window, not for the largest parameter.
 * Save (qt_ckpt_gather_rows, collective): the members of group M = D | O hold disjoint parts
 * that together cover the tensor exactly once, where D = the mesh axes the tensor is
 * sharded over (spec bits of its sharded dims) and O = the optimizer axes of its flat range
 * (O = 0 for params). Each member writes its elements of the window at their global indices
 * into a zeroed staging copy and the group sums the copies as uint64 words
 * (qt_coll_sum_u64): exactly one member contributes each float, so the sum reproduces its
 * bits exactly (a 32-bit half never carries). Two check words (element count and a sum of
 * mixed global indices) make a mapping that leaves a gap or an overlap an error instead of
 * a silently wrong file. When M = 0 the rank already holds the global tensor and the
 * window is returned in place.
 * Load (qt_ckpt_scatter_rows_dst / _done, local): the reader writes the window of the global
 * tensor to the returned address; _done copies this rank's elements of it (j <- global
 * index of j) to their place.
 *
 * Invariants: no heap, no I/O; one-rank plans (n_ranks <= 1) never call a collective and
 * address the regions at each parameter's flat offset, exactly as before meshes existed;
 * multi-rank plans need plan->staging_elems >= one row of the first dimension of every
 * parameter + 5 (checked by qt_ckpt_dist_check, which every caller runs first); a gather's
 * result is valid until the next gather or scatter. Every rank calls qt_ckpt_gather_rows
 * for the same (src, i, r0, r1) sequence (SPMD), also ranks that do not write the file.
 */
#ifndef QT_CKPT_GATHER_H
#define QT_CKPT_GATHER_H

#include <stdint.h>
#include "qt_plan.h"

enum qt_ckpt_src {
    QT_CKS_PARAMS = 0,   /* parameter region (compute copy) */
    QT_CKS_GRADS,        /* gradient region (normalised, this rank's optimizer blocks) */
    QT_CKS_ADAM_M,       /* Adam regions (this rank's optimizer blocks) */
    QT_CKS_ADAM_V,
    QT_CKS_COUNT
};

/* Checks that the plan's layout can be gathered: staging large enough, every parameter
 * inside one flat range, its shard axes disjoint from the range's optimizer axes. QT_OK, or
 * QT_E_PLAN with a message naming the parameter (deterministic: every rank agrees). */
int qt_ckpt_dist_check(const qt_plan *p);

/* Rows of the first dimension of parameter i per window: all of them on one rank or when
 * the staging region holds the whole tensor, else as many as it holds (>= 1). The same on
 * every rank (plan data only). */
int64_t qt_ckpt_window_rows(const qt_plan *p, int32_t i);

/* Save side, collective on multi-rank plans over the group of (src, i) (see above). *out
 * receives global rows [r0, r1) of parameter i of region src (0 <= r0 < r1 <= rows,
 * r1 - r0 <= qt_ckpt_window_rows): global element r0 x row + x at (*out)[x]. QT_OK, QT_E_COMM
 * (a silent peer: the caller must abort the job), or QT_E_PLAN (the ranks' parts do not
 * cover the window exactly once). Reads the region; writes the staging region. */
int qt_ckpt_gather_rows(const qt_plan *p, int src, int32_t i, int64_t r0, int64_t r1,
                        const float **out);

/* Load side, local. Where global rows [r0, r1) of parameter i of region src (QT_CKS_PARAMS,
 * _ADAM_M, _ADAM_V) are to be written (global element r0 x row + x at [x]): the region
 * itself when this rank holds the tensor globally, else the staging region. Then call
 * qt_ckpt_scatter_rows_done with the same rows, which copies this rank's elements of the
 * window from the staging region to its part (nothing when held globally). */
float *qt_ckpt_scatter_rows_dst(const qt_plan *p, int src, int32_t i, int64_t r0);
void qt_ckpt_scatter_rows_done(const qt_plan *p, int src, int32_t i, int64_t r0, int64_t r1);
/* The smallest (*lo) and largest (*hi) global element index of this rank's part of
 * (src, i): a loader need not read file data outside [lo, hi]. The whole tensor when the
 * rank holds it globally; *lo > *hi when it holds none of it. One pass over the part. */
void qt_ckpt_part_span(const qt_plan *p, int src, int32_t i, int64_t *lo, int64_t *hi);

#endif
