/* qt_cg_check.c - structural checks of the emitted schedules, run on every plan before
 * anything is written (and by the unit tests): slot usage per qt_cg_op_slots, def-before-
 * use, parameter slots and the one-WGRAD-per-parameter rule the gradient trees rely on.
 */
#include <stdlib.h>
#include <string.h>
#include "qt_cg.h"

static int is_wgrad_kind(int k)
{
    return k == QT_OP_EMBED_WGRAD || k == QT_OP_RMSNORM_WGRAD || k == QT_OP_MATMUL_WGRAD ||
           k == QT_OP_GDN_CONV_WGRAD || k == QT_OP_GDN_GATES_WGRAD ||
           k == QT_OP_GATED_RMSNORM_WGRAD || k == QT_OP_EXPERT_FFN_WGRAD;
}

static int check_ops(const qt_cg_graph *g, const qt_op *ops, int n, const char *which,
                     unsigned char *written, int *wgrad_count, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        const qt_op *o = &ops[i];
        const char *sl = qt_cg_op_slots(o->kind);
        int ns = (int)strlen(sl), np = 0;
        int32_t pslot[2] = {QT_NONE, QT_NONE};
        if (o->kind == QT_OP_NOP || o->kind >= QT_OP_COUNT)
            return qt_cg_fail(err, errlen, "%s op %d: invalid kind %d", which, i, o->kind);
        for (int s = 0; s < QT_OP_MAX_T; s++) {
            int32_t id = o->t[s];
            if (s >= ns) {
                if (id != QT_NONE)
                    return qt_cg_fail(err, errlen, "%s op %d (%s): slot t%d set but unused", which,
                                      i, qt_cg_op_name(o->kind), s);
                continue;
            }
            if (id == QT_NONE) {
                if (o->kind == QT_OP_MOE_ROUTE_FWD && s == 2) continue;
                return qt_cg_fail(err, errlen, "%s op %d (%s): slot t%d unset", which, i,
                                  qt_cg_op_name(o->kind), s);
            }
            if (id < 0 || id >= g->nt)
                return qt_cg_fail(err, errlen, "%s op %d: tensor id %d out of range", which, i, id);
            const qt_tensor *t = &g->ts[id].t;
            char r = sl[s];
            if ((r == 'p') != (t->role == QT_ROLE_PARAM))
                return qt_cg_fail(err, errlen, "%s op %d (%s): slot t%d holds %s, %s", which, i,
                                  qt_cg_op_name(o->kind), s, t->name,
                                  r == 'p' ? "expected a parameter" : "a parameter is read-only");
            if (r == 'p' && np < 2) pslot[np++] = id;
            if ((r == 'r' || r == 'a') && !written[id])
                return qt_cg_fail(err, errlen, "%s op %d (%s): reads %s before it is written",
                                  which, i, qt_cg_op_name(o->kind), t->name);
            if (r == 's' && t->role != QT_ROLE_SCRATCH)
                return qt_cg_fail(err, errlen, "%s op %d: scratch slot holds %s", which, i, t->name);
        }
        for (int s = 0; s < ns; s++)
            if (o->t[s] >= 0 && (sl[s] == 'w' || sl[s] == 'a' || sl[s] == 's')) written[o->t[s]] = 1;
        int wk = is_wgrad_kind(o->kind);
        if (wk != !!(o->flags & QT_OPF_WGRAD))
            return qt_cg_fail(err, errlen, "%s op %d (%s): QT_OPF_WGRAD flag mismatch", which, i,
                              qt_cg_op_name(o->kind));
        if (!wk) continue;
        for (int k = 0; k < 2; k++) {
            int64_t p = o->a[8 + k];
            if (k == 1 && pslot[1] == QT_NONE) {
                if (p != -1)
                    return qt_cg_fail(err, errlen, "%s op %d: a9 must be -1", which, i);
                continue;
            }
            if (p < 0 || p >= g->np || g->ps[p].tensor != pslot[k])
                return qt_cg_fail(err, errlen, "%s op %d (%s): a%d=%lld does not name the "
                                  "parameter in its slot", which, i, qt_cg_op_name(o->kind),
                                  8 + k, (long long)p);
            wgrad_count[p]++;
        }
    }
    return 0;
}

int qt_cg_check_schedule(const qt_cg_graph *g, char *err, size_t errlen)
{
    unsigned char *written = qt_cg_alloc((size_t)g->nt);
    int *count = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *count);
    for (int i = 0; i < g->nt; i++) {
        int r = g->ts[i].t.role;
        written[i] = r == QT_ROLE_PARAM || r == QT_ROLE_INPUT;
    }
    int rc = check_ops(g, g->init, g->ninit, "init", written, count, err, errlen);
    if (!rc) rc = check_ops(g, g->mb, g->nmb, "microbatch", written, count, err, errlen);
    for (int p = 0; !rc && p < g->np; p++)
        if (count[p] != 1)
            rc = qt_cg_fail(err, errlen, "param %s has %d WGRAD producers, expected 1",
                            g->ps[p].name, count[p]);
    free(written);
    free(count);
    return rc;
}
