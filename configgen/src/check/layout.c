/* check/layout.c - the layout type check (docs/design.md section 4; the layouts themselves are
 * mesh/layout.c's): every activation's execution layout equals the layout its logical
 * axes declare, unless its layer declared the reshard. shard_mode=explicit: an undeclared
 * difference is an error naming the layer, op, tensor, declared and executed layouts;
 * auto: differences are propagated and counted (g->n_reshards, listed in plan.txt).
 * Invariant: reads the graph only; it runs before anything is written.
 */
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"
#include "check/qt_cg_check.h"

int qt_cg_layout_check(const qt_cg_graph *g, int *n_reshards, char *err, size_t errlen)
{
    int count = 0;
    for (int32_t i = 0; i < g->nt; i++) {
        const qt_cg_tensor *ct = &g->ts[i];
        const qt_tensor *t = &ct->t;
        if (!qt_cg_held_otherwise(ct)) continue;
        count++;
        if (g->s->shard_mode != 1 || ct->reshard) continue;
        char want[160], got[160];
        qt_cg_layout_name(t->spec, t->ndim, want, sizeof want);
        qt_cg_layout_name(ct->exec, t->ndim, got, sizeof got);
        const int op = ct->first;
        return qt_cg_fail(err, errlen, "shard_mode=explicit: tensor %s (op %d, %s): its "
                          "logical axes declare the layout [%s] but it is held as [%s], and "
                          "its layer declares no reshard (declare one, or use "
                          "shard_mode=auto)", t->name, op,
                          op >= 0 ? qt_cg_op_name(g->mb[op].kind) : "unused", want, got);
    }
    if (n_reshards) *n_reshards = count;
    return 0;
}
