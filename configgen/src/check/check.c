/* check/check.c - structural checks of the emitted schedules, run on every plan before
 * anything is written (and by the unit tests): slot usage per qt_cg_op_slots, def-before-
 * use, parameter slots, the one-WGRAD-per-parameter rule the gradient trees rely on, and
 * that the sizes in op attributes agree with the tensors they name (qt_plan.h invariant).
 */
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "check/qt_cg_check.h"
#include "../../firmware/kernels/gdn_core.h"
#include "../../firmware/kernels/gdn_chunk.h"
#include "../../firmware/kernels/attention.h"

/* numel(t[slot]) must equal want (exact) or be at least want (at_least). */
static int need(const qt_cg_graph *g, const qt_op *o, int i, const char *which, int slot,
                int64_t want, int at_least, char *err, size_t errlen)
{
    int32_t id = o->t[slot];
    if (id == QT_NONE) return 0;
    int64_t have = g->ts[id].t.numel;
    if (at_least ? have >= want : have == want) return 0;
    return qt_cg_fail(err, errlen, "%s op %d (%s): slot t%d %s has %lld elements, the "
                      "attributes need %s%lld", which, i, qt_cg_op_name(o->kind), slot,
                      g->ts[id].t.name, (long long)have, at_least ? ">= " : "", (long long)want);
}

/* Attribute/shape agreement for the kinds whose sizes are plain products (qt_ops.h). */
static int check_sizes(const qt_cg_graph *g, const qt_op *o, int i, const char *which,
                       char *err, size_t errlen)
{
    const int64_t *a = o->a;
#define NEED(slot, n) do { if (need(g, o, i, which, slot, n, 0, err, errlen)) return -1; } while (0)
#define ATLEAST(slot, n) do { if (need(g, o, i, which, slot, n, 1, err, errlen)) return -1; } while (0)
    switch (o->kind) {
    case QT_OP_ZERO: case QT_OP_ACC:
        NEED(0, a[0]);
        if (o->kind == QT_OP_ACC) NEED(1, a[0]);
        break;
    case QT_OP_ADD: NEED(0, a[0]); NEED(1, a[0]); NEED(2, a[0]); break;
    case QT_OP_MATMUL_FWD: NEED(0, a[0] * a[1]); NEED(1, a[0] * a[2]); NEED(2, a[1] * a[2]); break;
    case QT_OP_MATMUL_BWD_DATA: NEED(0, a[0] * a[2]); NEED(1, a[0] * a[1]); NEED(2, a[1] * a[2]); break;
    case QT_OP_MATMUL_WGRAD: NEED(0, a[0] * a[1]); NEED(1, a[0] * a[2]); NEED(2, a[1] * a[2]); break;
    case QT_OP_RMSNORM_FWD:
        NEED(1, a[0]); NEED(3, a[1]);
        ATLEAST(0, (a[0] - 1) * a[3] + a[1]); ATLEAST(2, (a[0] - 1) * a[2] + a[1]);
        break;
    case QT_OP_EMBED_FWD: NEED(0, a[0] * a[1]); NEED(1, a[0]); NEED(2, a[2] * a[1]); break;
    case QT_OP_XENT: NEED(0, a[0]); NEED(1, a[0] * a[1] * a[2]); NEED(2, a[0] * a[1] * a[2]); NEED(3, a[0] * a[1]); break;
    case QT_OP_ATTN_FWD:
        NEED(0, a[0] * a[1] * a[2] * a[4]); NEED(1, a[0] * a[2] * a[1]);
        NEED(2, a[0] * a[1] * a[2] * a[4]); NEED(3, a[0] * a[1] * a[3] * a[4]);
        NEED(4, a[0] * a[1] * a[3] * a[4]); ATLEAST(5, a[1]);
        break;
    case QT_OP_MOE_ROUTE_FWD: NEED(0, a[0] * a[2]); NEED(1, a[0] * a[2]); NEED(3, a[0] * a[1]); break;
    case QT_OP_EXPERT_FFN_FWD: {
        int64_t S = g->s->tr.seq_len, scr = a[0] * a[1] * (a[3] + a[4]);
        if (S * (a[3] + 3 * a[4]) > scr) scr = S * (a[3] + 3 * a[4]);
        NEED(0, a[0] * a[1] * a[3]); NEED(1, a[0] * a[1] * 2 * a[4]); NEED(2, a[0] * a[3]);
        NEED(3, a[0] * a[1]); NEED(4, a[2] * 2 * a[4] * a[3]); NEED(5, a[2] * a[3] * a[4]);
        ATLEAST(6, scr);
        break;
    }
    case QT_OP_MOE_COMBINE_FWD: NEED(0, a[0] * a[2]); NEED(1, a[0] * a[1]); NEED(2, a[0] * a[1] * a[2]); break;
    case QT_OP_GDN_CORE_BWD: {
        int64_t C = QT_GDN_CHUNK_ROWS(a[6], a[1]);
        ATLEAST(10, a[7] ? QT_GDN_CHUNK_BWD_SCRATCH(C, a[3], a[5])
                         : QT_GDN_CORE_SCRATCH(a[6], a[3], a[5]));
        break;
    }
    case QT_OP_ATTN_BWD:
        NEED(0, a[0] * a[1] * a[2] * a[4]); NEED(1, a[0] * a[1] * a[3] * a[4]);
        NEED(2, a[0] * a[1] * a[3] * a[4]); NEED(3, a[0] * a[1] * a[2] * a[4]);
        NEED(8, a[0] * a[2] * a[1]); ATLEAST(9, QT_ATTN_BWD_SCRATCH(a[1]));
        break;
    case QT_OP_EXPERT_FFN_BWD: case QT_OP_EXPERT_FFN_WGRAD: {
        /* the forward's scratch rule, and d(gu) shaped like gu when it is planned */
        int64_t S = g->s->tr.seq_len, scr = a[0] * a[1] * (a[3] + a[4]);
        if (S * (a[3] + 3 * a[4]) > scr) scr = S * (a[3] + 3 * a[4]);
        int bwd = o->kind == QT_OP_EXPERT_FFN_BWD;
        ATLEAST(bwd ? 7 : 6, scr);
        NEED(bwd ? 8 : 7, a[0] * a[1] * 2 * a[4]);
        break;
    }
    case QT_OP_GDN_CORE_FWD: {
        int64_t nch = (a[1] + a[6] - 1) / a[6];
        if (a[7]) ATLEAST(7, QT_GDN_CHUNK_FWD_SCRATCH(QT_GDN_CHUNK_ROWS(a[6], a[1]), a[3], a[5]));
        NEED(0, a[0] * a[1] * a[4] * a[5]); NEED(1, a[0] * a[4] * nch * a[3] * a[5]);
        NEED(2, a[0] * a[1] * a[2]); NEED(3, a[0] * a[1] * a[2]);
        NEED(4, a[0] * a[1] * (2 * a[2] * a[3] + a[4] * a[5]));
        NEED(5, a[0] * a[1] * a[4]); NEED(6, a[0] * a[1] * a[4]);
        break;
    }
    default: break;
    }
#undef NEED
#undef ATLEAST
    return 0;
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
                /* optional slots (upper case in qt_ops.def) */
                if (qt_cg_op_slot_optional(o->kind, s)) continue;
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
        if (check_sizes(g, o, i, which, err, errlen)) return -1;
        for (int s = 0; s < ns; s++)
            if (o->t[s] >= 0 && (sl[s] == 'w' || sl[s] == 'a' || sl[s] == 's')) written[o->t[s]] = 1;
        int wk = qt_cg_op_class(o->kind) == QT_OPC_WGRAD;
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
            /* the slot holds the parameter's tensor, or its backward gather clone */
            if (p < 0 || p >= g->np || pslot[k] < 0 || g->ts[pslot[k]].param != p)
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
