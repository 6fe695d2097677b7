/* schedule/qt_cg_schedule.h - stage 5, schedule: the per-layer reduce and gather edits
 * of the microbatch schedule (layer_ops.c), the step schedule and its collectives
 * (step.c), the scanned layer cycles (scan.c). Uses memory, model, mesh and core. */
#ifndef QT_CG_SCHEDULE_H
#define QT_CG_SCHEDULE_H

#include "core/qt_cg.h"

/* A COLLECTIVE (or COLL_START / COLL_WAIT) placeholder in the microbatch schedule, until
 * qt_cg_step_schedule creates its collective: a0 (coll) = -1 - k and this attribute, a1 (configgen's only: qt_ops.def names
 * a0 alone), 1 for the all-gather of gather window k, 0 for the reduce-scatter of flat
 * range k. The resolved op has a0 = the collective and a1 = 0. */
#define QT_CG_A_COLLECTIVE_GATHER 1

/* Per-layer schedule edits (schedule/layer_ops.c), between the flat ranges and the arena:
 * each range's total, reduce-scatter and push after its last WGRAD (may run again), and
 * the per-layer parameter gathers (once; -1 on a second call or without layer_reduce). */
void qt_cg_layer_reduces(qt_cg_graph *g);
int qt_cg_layer_gathers(qt_cg_graph *g, char *err, size_t errlen);
/* collective_overlap (schedule/overlap.c): place the per-layer gathers' PARAM_GATHERs one
 * gather group early and each range's GRAD_MB_PUSH at the next range's reduce-scatter
 * (on), or back next to their collectives (off: layer_ops.c's schedule); before the leaf
 * windows and the arena are planned. */
void qt_cg_overlap_moves(qt_cg_graph *g, int on);
/* With g->overlap, before qt_cg_step_schedule resolves the per-layer placeholders: the
 * all-gather of each moved PARAM_GATHER and the reduce-scatter of each moved GRAD_MB_PUSH
 * become a COLL_START and a COLL_WAIT over the same placeholder (a0 = -1 - k, a1 as the
 * COLLECTIVE's). */
void qt_cg_overlap_split(qt_cg_graph *g);
/* collective_overlap: all, expert parallelism (schedule/ep_overlap.c): each MOE_RETURN_FWD
 * and MOE_DISPATCH_BWD of the microbatch schedule split into a start and a wait op with the
 * independent compute of its layer between (the shared expert's), every conflicting pair of
 * ops in its order (the same bits). Before the leaf windows and the arena are planned again.
 * Returns the number of exchanges split. */
int qt_cg_ep_overlap(qt_cg_graph *g);
/* The per-step schedule after the last microbatch (qt_ops.def, step section): on one rank
 * the fused gradient finalisation and the AdamW update; on a mesh the local tree total,
 * the gradient reduce-scatter (and all-gather) over the batch axes, normalisation and norm
 * over the optimizer block, AdamW on it and the parameter all-gather. Runs after the
 * memory plan (the collectives name arena ranges). */
void qt_cg_step_schedule(qt_cg_graph *g);
/* The decoder layer op o belongs to (prev: the layer of the op before it), -1 for none. */
int qt_cg_scan_op_layer(const qt_cg_graph *g, const qt_op *o, int prev);
/* With s->scan_layers: derives the stored microbatch schedule (g->mbc, g->scans) from the
 * final unrolled one, where the layer cycles repeat exactly; checks that it unrolls back
 * to g->mb. 0, or -1 with a message. */
int qt_cg_scan(qt_cg_graph *g, char *err, size_t errlen);

#endif
