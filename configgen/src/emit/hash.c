/* emit/hash.c - the plan view of a graph and its hash: the graph's tables are viewed as the
 * qt_plan the emitter writes (every field from its CG column in qt_plan_fields.def), and
 * hashed by qt_plan_hash (firmware/base/plan_hash.c), the same function the firmware runs
 * at start-up, so "the same plan" has one definition. The view borrows the graph's tables
 * (only the tensor records are copied) and is valid while the graph is.
 */
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "emit/qt_cg_emit.h"
#include "qt_plan_hash.h"

/* How a field takes its CG value: arrays element by element, the rest by assignment. */
#define QT_CG_VIEW_SET(F, CG) v->p.F = (CG)
#define QT_CG_VIEW_SET_ARRAY(F, CG)                                                        \
    for (size_t i = 0; i < sizeof v->p.F / sizeof v->p.F[0]; i++) v->p.F[i] = (CG)[i]
#define QT_CG_VIEW_I32 QT_CG_VIEW_SET
#define QT_CG_VIEW_F32 QT_CG_VIEW_SET
#define QT_CG_VIEW_I64 QT_CG_VIEW_SET
#define QT_CG_VIEW_I64L QT_CG_VIEW_SET
#define QT_CG_VIEW_X8 QT_CG_VIEW_SET
#define QT_CG_VIEW_U64X QT_CG_VIEW_SET
#define QT_CG_VIEW_STR QT_CG_VIEW_SET
#define QT_CG_VIEW_TEXT QT_CG_VIEW_SET
#define QT_CG_VIEW_ARENA QT_CG_VIEW_SET
#define QT_CG_VIEW_MESH QT_CG_VIEW_SET_ARRAY
#define QT_CG_VIEW_LEVELS QT_CG_VIEW_SET_ARRAY
#define QT_CG_VIEW_MODEL QT_CG_VIEW_SET
#define QT_CG_VIEW_TRAIN QT_CG_VIEW_SET
#define QT_CG_VIEW_TENSORS QT_CG_VIEW_SET
#define QT_CG_VIEW_PARAMS QT_CG_VIEW_SET
#define QT_CG_VIEW_RANGES QT_CG_VIEW_SET
#define QT_CG_VIEW_OPS QT_CG_VIEW_SET
#define QT_CG_VIEW_SCANS QT_CG_VIEW_SET
#define QT_CG_VIEW_COLLS QT_CG_VIEW_SET

/* The plan's train record: the settings' with the eval's forward length (the microbatch
 * schedule's forward ops [0, n_fwd)) when evaluation is on. */
static qt_train_cfg qt_cg_train_view(const qt_cg_graph *g)
{
    qt_train_cfg t = g->s->tr;
    if (t.eval_interval > 0) t.eval_fwd_ops = g->n_fwd;
    return t;
}

void qt_cg_plan_view_init(qt_cg_plan_view *v, const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    memset(v, 0, sizeof *v);
    v->tensors = calloc((size_t)(g->nt ? g->nt : 1), sizeof *v->tensors);
    if (!v->tensors) abort(); /* host tool: out of memory for a few thousand records is fatal */
    for (int i = 0; i < g->nt; i++) v->tensors[i] = g->ts[i].t;
    for (int k = 0; k < g->n_scans; k++) {
        v->scans[k] = g->scans[k];
        v->scans[k].stride = g->scan_stride[k];
    }
#define QT_PLAN_FIELD(KIND, F, N, HASH, HWHEN, EWHEN, CG) QT_CG_VIEW_##KIND(F, CG);
#include "qt_plan_fields.def"
#undef QT_PLAN_FIELD
}

void qt_cg_plan_view_free(qt_cg_plan_view *v)
{
    free(v->tensors);
    memset(v, 0, sizeof *v);
}

uint64_t qt_cg_hash(const qt_cg_graph *g)
{
    qt_cg_plan_view v;
    qt_cg_plan_view_init(&v, g);
    uint64_t h = qt_plan_hash(&v.p);
    qt_cg_plan_view_free(&v);
    return h;
}
