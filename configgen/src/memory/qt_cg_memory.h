/* memory/qt_cg_memory.h - stage 4, memory: the flat parameter ranges and leaf windows
 * (ranges.c), the arena and the activation planner (memplan.c), the per-rank budget
 * (budget.c), a pipeline stage's activations in flight (pipeline_mem.c). Uses mesh and
 * core. */
#ifndef QT_CG_MEMORY_H
#define QT_CG_MEMORY_H

#include "core/qt_cg.h"

/* Flat parameter ranges (memory/ranges.c): the ranges, each parameter's flat offset, n_flat;
 * the leaf-tree levels span the flat vector. 0, or -1 when the parameters need more than
 * 2^54 elements. */
int qt_cg_flat_ranges(qt_cg_graph *g, char *err, size_t errlen);
/* Per-layer reduction, after qt_cg_layer_reduces: the ranges' leaf windows (leaf_lo) and
 * leaf_elems. */
void qt_cg_leaf_windows(qt_cg_graph *g);
/* The arena (memory/memplan.c): regions, tree levels, scratch, staging and the activations'
 * offsets, after the ranges and the per-layer schedule edits. */
int qt_cg_memplan(qt_cg_graph *g, char *err, size_t errlen);
/* 1 for tensors the liveness planner places (activations, scratch, inputs; not parameters,
 * gradients or Adam moments); 1 when two tensors' op lifetimes overlap. */
int qt_cg_planned(const qt_cg_tensor *t);
int qt_cg_lives_overlap(const qt_cg_tensor *a, const qt_cg_tensor *b);
/* 1 if tree level l is a compact microbatch-tree level (below that tree's top: only this
 * rank's reduce blocks, mb_elems floats); see qt_plan.tree_offset. */
int qt_cg_tree_level_compact(const qt_cg_graph *g, int l);
/* The repeat chunk holding parameter p on a circular pipeline stage (the last PP_CHUNK
 * forward marker whose first parameter is at most p), 0 without markers. */
int qt_cg_chunk_of(const qt_cg_graph *g, int p);
/* The flat range holding parameter p (-1 before the memory plan). */
int qt_cg_range_of(const qt_cg_graph *g, int p);
/* Leaves of parameter p's leaf tree: its leaves per step, or per microbatch when a
 * microbatch tree follows (n_mb_levels > 0). */
int64_t qt_cg_tree_leaves(const qt_cg_graph *g, int p);
/* The step form's unit count q (qt_plan_fields.def grad_units), or 0; at most
 * QT_CG_MAX_UNITS units over the batch group (the firmware's fold, qt_coll.h). */
#define QT_CG_MAX_UNITS 1024
/* The tree levels the units' form may use (both forms): the bound of the 24-level table they
 * were planned against, kept when the table grew (QT_MAX_TREE_LEVELS 32) so every plan takes
 * the form it took before (a split whose units need 25..32 levels keeps the reduce-scatter,
 * plan.txt says why; tests/e2e/61_odd_ranks.sh). */
#define QT_CG_MAX_UNIT_LEVELS 24
int64_t qt_cg_grad_units(const qt_cg_graph *g);
/* The microbatch form's unit count q >= 1 (qt_plan_fields.def grad_mb_units), or 0. */
int64_t qt_cg_grad_mb_units(const qt_cg_graph *g);
/* Whether flat range r's per-layer units exchange is split in the microbatch schedule
 * (GRAD_MB_UNITS_START, collective_overlap: schedule/overlap.c). */
int qt_cg_units_split(const qt_cg_graph *g, int r);
/* The leaves of one unit of a parameter with T leaves a microbatch in a range held over
 * `hold` (qt_plan.h qt_plan_unit_leaves). */
int64_t qt_cg_unit_leaves(const qt_cg_graph *g, int64_t T, uint8_t hold);
/* With grad_mb_units: the microbatch tree's levels (bit length of the most units a range's
 * counter runs over, G R_r q_r) and *umax, the largest unit U_p of a parameter. */
int qt_cg_grad_mb_levels(const qt_cg_graph *g, int64_t *umax);
/* Floats of tree level l (qt_plan.h qt_tree_level_elems). */
int64_t qt_cg_tree_level_elems(const qt_cg_graph *g, int l);
/* The per-rank budget in bytes (0 = none) and its check: 0, or -1 with an error naming
 * the budget, the excess and the biggest consumers by category and tensor; a pipeline plan
 * with stage-local tables is checked on its largest stage's (qt_cg_pp_executed_need), the
 * error naming that stage (memory/budget.c). */
int64_t qt_cg_budget_bytes(const qt_cg_settings *s);
int qt_cg_budget_check(const qt_cg_graph *g, char *err, size_t errlen);

/* Pipeline stages (memory/pipeline_mem.c, docs/pipeline.md): bytes live across one
 * microbatch's forward/backward boundary (saved for its backward), one boundary message
 * (a microbatch's activations or their gradient: rows x hidden x the activation bytes),
 * the microbatches in flight on stage s->pp_stage under a schedule (0 gpipe: M; 1 1f1b:
 * min(S - stage, M); with R > 1 repeats the interleaved 1f1b's peak (microbatch, chunk)
 * pairs / R, rounded up), and the
 * per-rank need under a schedule: the arena, the other microbatches in flight and the
 * receive buffers. qt_cg_need_bytes is the need under the plan's schedule: the arena
 * itself without a pipeline, and for a stage's stage-local tables (pp_local: their slots
 * are in it). */
int64_t qt_cg_pp_saved_bytes(const qt_cg_graph *g);
int64_t qt_cg_pp_boundary_bytes(const qt_cg_settings *s);
int64_t qt_cg_pp_inflight(const qt_cg_settings *s, int schedule);
int64_t qt_cg_pp_need(const qt_cg_graph *g, int schedule);
int64_t qt_cg_need_bytes(const qt_cg_graph *g);

/* The need of the stage-local tables qtrain executes (driver/pipeline.c pp_local_plans):
 * the largest stage arena (its in-flight slots included: the need under both schedules),
 * *stage the stage that has it (circular repeats included: their R chunks' slots); -1
 * when the plan has none (no pipeline), and the verdict and the budget check then stay the
 * planning bound, qt_cg_need_bytes. */
int64_t qt_cg_pp_executed_need(const qt_cg_graph *g, int *stage);

#endif
