/* emit/qt_cg_emit.h - stage 7, emission: the plan hash (hash.c), plan.h / plan.c /
 * plan_main.c (emit.c) and plan.txt (report.c; its FLOP and MTP head sections:
 * report_flops.c; its pipeline section: pipeline_report.c). Uses config, mesh, memory,
 * schedule and core. */
#ifndef QT_CG_EMIT_H
#define QT_CG_EMIT_H

#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

/* The graph viewed as the qt_plan plan.c defines (hash.c): p's fields come from
 * qt_plan_fields.def's CG column; its tables are the graph's (the tensor records and the
 * scans copied into the view). Valid while the graph is and the view is not moved;
 * config_text and arena are NULL (plan.c names its own). */
typedef struct qt_cg_plan_view {
    qt_plan p;
    qt_tensor *tensors;                /* owned */
    qt_scan scans[QT_MAX_SCANS];
} qt_cg_plan_view;
void qt_cg_plan_view_init(qt_cg_plan_view *v, const qt_cg_graph *g);
void qt_cg_plan_view_free(qt_cg_plan_view *v);
/* qt_plan_hash of the graph's plan view. */
uint64_t qt_cg_hash(const qt_cg_graph *g);
void qt_cg_emit_plan_h(const qt_cg_graph *g, const char *banner, qt_cg_buf *b);
/* plan.c: every table, and the resolved config (cfg) as qt_plan.config_text. */
void qt_cg_emit_plan_c(const qt_cg_graph *g, const qt_cg_config *cfg, const char *banner,
                       qt_cg_buf *b);
void qt_cg_emit_plan_main(const qt_cg_graph *g, const char *banner, qt_cg_buf *b);
void qt_cg_emit_report(const qt_cg_graph *g, const qt_cg_config *c, qt_cg_buf *b);
/* plan.txt's "model FLOPs" section (model/flops.c's count per part, per token, step and
 * rank) and its "MTP head" section (the head's parameters, activations and FLOPs; nothing
 * without a head): appended to b (report_flops.c). */
void qt_cg_report_flops(const qt_cg_graph *g, qt_cg_buf *b);
void qt_cg_report_mtp(const qt_cg_graph *g, qt_cg_buf *b);
/* plan.txt's pipeline section (emit/pipeline_report.c); nothing without pipeline stages. */
void qt_cg_report_pipeline(const qt_cg_graph *g, qt_cg_buf *b);
/* The collectives section's lines of a pipeline plan: one per stage boundary (bytes per
 * microbatch, messages per step); nothing without pipeline stages. */
void qt_cg_report_pp_boundaries(const qt_cg_graph *g, qt_cg_buf *b);

#endif
