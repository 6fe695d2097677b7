/* check/qt_cg_check.h - stage 6, checks of the finished plan: the schedules
 * (check.c), the memory plan (plan.c), the layout type check (layout.c). They read the
 * graph only. Uses memory, mesh and core. */
#ifndef QT_CG_CHECK_H
#define QT_CG_CHECK_H

#include "core/qt_cg.h"

/* Check the schedules (check/check.c): every slot a kind uses is set and no other; a tensor
 * read or accumulated into was written earlier (parameters, inputs and the init-written
 * table count as written); 'p' slots hold parameters; WGRAD ops carry QT_OPF_WGRAD and
 * name their parameters in a[8]/a[9]; each parameter has exactly one WGRAD producer. */
int qt_cg_check_schedule(const qt_cg_graph *g, char *err, size_t errlen);

/* Check the plan invariants (alignment, bounds, no overlap of live tensors, flat regions);
 * returns 0 or -1 with the first violation in err. */
int qt_cg_check_plan(const qt_cg_graph *g, char *err, size_t errlen);

/* The layout type check (check/layout.c): every activation's execution layout equals the
 * layout its logical axes declare (t.spec), unless its layer declared the reshard.
 * shard_mode=explicit: an undeclared difference is an error naming the layer, op, tensor,
 * declared and executed layouts; auto: differences are propagated, and counted in
 * *n_reshards (may be NULL). */
int qt_cg_layout_check(const qt_cg_graph *g, int *n_reshards, char *err, size_t errlen);

#endif
