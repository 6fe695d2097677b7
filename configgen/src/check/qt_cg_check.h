/* check/qt_cg_check.h - stage 6, checks of the finished plan: the schedules
 * (check.c), the memory plan (plan.c), the bf16 partial sums (dtype.c), the layout type
 * check (layout.c). They read the graph only. Uses memory, mesh and core. */
#ifndef QT_CG_CHECK_H
#define QT_CG_CHECK_H

#include "core/qt_cg.h"

/* Check the schedules (check/check.c): every slot a kind uses is set and no other; a tensor
 * read or accumulated into was written earlier (parameters, inputs and the init-written
 * table count as written); 'p' slots hold parameters; WGRAD ops carry QT_OPF_WGRAD and
 * name their parameters in a[8]/a[9]; each parameter has exactly one WGRAD producer; with
 * evaluation, microbatch ops [0, n_fwd) end with XENT (XENT_MTP with the MTP head), hold
 * no WGRAD or step op but the parameter gathers and their collectives, and wait for every
 * collective they start. */
int qt_cg_check_schedule(const qt_cg_graph *g, char *err, size_t errlen);

/* Check the plan invariants (alignment, bounds, no overlap of live tensors, flat regions);
 * returns 0 or -1 with the first violation in err. */
int qt_cg_check_plan(const qt_cg_graph *g, char *err, size_t errlen);

/* bf16 plans (check/dtype.c): no ALL_REDUCE buffer, canonical-block scratch or
 * MOE_DISPATCH_BWD dxr is bf16; every ROUND_BF16 writes bf16 from fp32 with n equal to
 * both element counts; after an ALL_REDUCE only its ROUND_BF16 (and MOE_DISPATCH_BWD's
 * dxr slot) name the buffer. 0 for fp32 plans. Run by qt_cg_check_plan. */
int qt_cg_check_dtypes(const qt_cg_graph *g, char *err, size_t errlen);

/* The layout type check (check/layout.c): every activation's execution layout equals the
 * layout its logical axes declare (t.spec), unless its layer declared the reshard.
 * shard_mode=explicit: an undeclared difference is an error naming the layer, op, tensor,
 * declared and executed layouts; auto: differences are propagated, and counted in
 * *n_reshards (may be NULL). */
int qt_cg_layout_check(const qt_cg_graph *g, int *n_reshards, char *err, size_t errlen);

#endif
