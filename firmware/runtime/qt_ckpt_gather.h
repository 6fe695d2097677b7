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
 * Save (qt_ckpt_gather, collective): the members of group M = D | O hold disjoint parts
 * that together cover the tensor exactly once, where D = the mesh axes the tensor is
 * sharded over (spec bits of its sharded dims) and O = the optimizer axes of its flat range
 * (O = 0 for params). Each member writes its elements at their global indices into a zeroed
 * staging copy and the group sums the copies as uint64 words (qt_coll_sum_u64): exactly one
 * member contributes each float, so the sum reproduces its bits exactly (a 32-bit half never
 * carries). Two check words (element count and a sum of mixed global indices) make a
 * mapping that leaves a gap or an overlap an error instead of a silently wrong file.
 * When M = 0 the rank already holds the global tensor and it is returned in place.
 * Load (qt_ckpt_scatter_dst / _done, local): the reader writes the global tensor to the
 * returned address; _done copies this rank's elements (j <- global index of j) to its place.
 *
 * Invariants: no heap, no I/O; one-rank plans (n_ranks <= 1) never call a collective and
 * address the regions at each parameter's flat offset, exactly as before meshes existed;
 * multi-rank plans need plan->staging_elems >= the largest global parameter + 16 (checked
 * by qt_ckpt_dist_check, which every caller runs first); a gather's result is valid until
 * the next gather or scatter. Every rank calls qt_ckpt_gather for the same (src, i)
 * sequence (SPMD), also ranks that do not write the file.
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

/* Save side, collective on multi-rank plans over the group of (src, i) (see above).
 * *out receives parameter i of region src in its global layout (numel = global numel).
 * QT_OK, QT_E_COMM (a silent peer: the caller must abort the job), or QT_E_PLAN (the ranks'
 * parts do not cover the tensor exactly once). */
int qt_ckpt_gather(const qt_plan *p, int src, int32_t i, const float **out);

/* Load side, local. Where the global tensor of parameter i of region src (QT_CKS_PARAMS,
 * _ADAM_M, _ADAM_V) is to be written: the region itself when this rank holds it globally,
 * else the staging region. Then call qt_ckpt_scatter_done. */
float *qt_ckpt_scatter_dst(const qt_plan *p, int src, int32_t i);
/* The smallest (*lo) and largest (*hi) global element index of this rank's part of
 * (src, i): a loader need not read file data outside [lo, hi]. The whole tensor when the
 * rank holds it globally; *lo > *hi when it holds none of it. One pass over the part. */
void qt_ckpt_part_span(const qt_plan *p, int src, int32_t i, int64_t *lo, int64_t *hi);
void qt_ckpt_scatter_done(const qt_plan *p, int src, int32_t i);

#endif
