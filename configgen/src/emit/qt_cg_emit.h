/* emit/qt_cg_emit.h - stage 7, emission: the plan hash (hash.c), plan.h / plan.c /
 * plan_main.c (emit.c) and plan.txt (report.c). Uses config, mesh, memory, schedule and
 * core. */
#ifndef QT_CG_EMIT_H
#define QT_CG_EMIT_H

#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

uint64_t qt_cg_hash(const qt_cg_graph *g);
void qt_cg_emit_plan_h(const qt_cg_graph *g, const char *banner, qt_cg_buf *b);
/* plan.c: every table, and the resolved config (cfg) as qt_plan.config_text. */
void qt_cg_emit_plan_c(const qt_cg_graph *g, const qt_cg_config *cfg, const char *banner,
                       qt_cg_buf *b);
void qt_cg_emit_plan_main(const qt_cg_graph *g, const char *banner, qt_cg_buf *b);
void qt_cg_emit_report(const qt_cg_graph *g, const qt_cg_config *c, qt_cg_buf *b);

#endif
