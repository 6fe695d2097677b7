/* driver/qt_cg_driver.h - stage 8, driver: the pipeline (pipeline.c), the configgen
 * command (generate.c, main.c) and the plan diff (diff.c). Uses every stage. */
#ifndef QT_CG_DRIVER_H
#define QT_CG_DRIVER_H

#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

/* ---- pipeline (driver/pipeline.c), command (driver/generate.c) ------------------------------------------------------- */

/* Everything up to (not including) writing files; fills c, s and g (free with
 * qt_cg_plan_free). configs_dir NULL: found from the run file (../base.yml, ./base.yml) or
 * configgen/configs. */
int qt_cg_plan_build(const char *configs_dir, const char *run_path, int n_over,
                     char *const *over, qt_cg_config *c, qt_cg_settings *s, qt_cg_graph *g,
                     char *err, size_t errlen);
void qt_cg_plan_free(qt_cg_config *c, qt_cg_settings *s, qt_cg_graph *g);
/* The command line: argv[0] ignored, [-o outdir] <run.yml> [key=value ...]. */
int qt_cg_generate(int argc, char **argv, char *err, size_t errlen);
/* The same; on success, when summary is not NULL, appends the line configgen prints: the
 * plan directory written, the ranks and mesh, the plan hash and the per-rank arena against
 * the budget (or that none was checked). */
int qt_cg_generate_summary(int argc, char **argv, qt_cg_buf *summary, char *err,
                           size_t errlen);

/* ---- plan diff (driver/diff.c) --------------------------------------------------------- */

/* `configgen --diff A B`: compares two plans, each a run .yml (built in memory), a generated
 * plan directory or a plan.txt, and appends what differs to out (sections, tensors by name,
 * ops by index and kind, collectives, arena size). *differs = 1 when anything but the names
 * and the plan hash differs, else 0. Returns -1 with a message when an input cannot be
 * read or generated. */
int qt_cg_diff(const char *a, const char *b, qt_cg_buf *out, int *differs, char *err,
               size_t errlen);

#endif
