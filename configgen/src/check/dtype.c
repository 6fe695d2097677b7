/* check/dtype.c - the bf16 plans' partial-sum invariants (docs/precision.md, "Executing
 * bf16 plans", step 0 and Determinism): a sum that crosses ranks or blocks must not be
 * rounded before it is complete, and its bf16 consumers must read one rounding of the
 * complete sum, as on one rank. Re-derived from the final schedule:
 *  - no ALL_REDUCE buffer, no canonical-block scratch (".canon_scratch") and no
 *    MOE_DISPATCH_BWD dxr (the expert hosts' row gradients) is bf16;
 *  - every ROUND_BF16 writes a bf16 y from an fp32 x, n = numel(y) = numel(x);
 *  - after an ALL_REDUCE, its buffer is named only by a ROUND_BF16 (x) or by
 *    MOE_DISPATCH_BWD (dxr, which adds the fp32 rows itself): every other op reads the
 *    ROUND_BF16's copy.
 * Invariant: reads the graph only; fp32 plans pass untouched; the first violation is the
 * error, naming the op and the tensor. */
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "check/qt_cg_check.h"

/* ROUND_BF16 op i of schedule `which`: y bf16, x fp32, n equal to both element counts. */
static int check_round(const qt_cg_graph *g, const qt_op *o, int i, const char *which,
                       char *err, size_t errlen)
{
    const int32_t y = QT_T(o, ROUND_BF16, y), x = QT_T(o, ROUND_BF16, x);
    const int64_t n = QT_A(o, ROUND_BF16, n);
    if (y < 0 || x < 0)
        return qt_cg_fail(err, errlen, "bf16 plan: %s op %d (round_bf16) has no y or x", which, i);
    const qt_tensor *ty = &g->ts[y].t, *tx = &g->ts[x].t;
    if (ty->dtype != QT_BF16 || tx->dtype != QT_F32)
        return qt_cg_fail(err, errlen, "bf16 plan: %s op %d (round_bf16) writes %s (%s) from %s "
                          "(%s): expected a bf16 y from an fp32 x", which, i, ty->name,
                          ty->dtype == QT_BF16 ? "bf16" : "not bf16", tx->name,
                          tx->dtype == QT_F32 ? "fp32" : "not fp32");
    if (n != ty->numel || n != tx->numel)
        return qt_cg_fail(err, errlen, "bf16 plan: %s op %d (round_bf16): n %lld, but %s has %lld "
                          "and %s %lld elements", which, i, (long long)n, ty->name,
                          (long long)ty->numel, tx->name, (long long)tx->numel);
    return 0;
}

/* Microbatch op i names tensor slot k: allowed after the tensor's ALL_REDUCE? */
/* MOE_DISPATCH_BWD or one of its split ops (the same slots). */
static int dispatch_bwd(int kind)
{
    return kind == QT_OP_MOE_DISPATCH_BWD || kind == QT_OP_MOE_DISPATCH_BWD_START ||
           kind == QT_OP_MOE_DISPATCH_BWD_WAIT;
}
_Static_assert((int)QT_T_MOE_DISPATCH_BWD_START_dxr == (int)QT_T_MOE_DISPATCH_BWD_dxr &&
               (int)QT_T_MOE_DISPATCH_BWD_WAIT_dxr == (int)QT_T_MOE_DISPATCH_BWD_dxr,
               "dtype.c: the split dispatch backward's dxr slot moved");

static int reads_reduced_ok(const qt_op *o, int k)
{
    return (o->kind == QT_OP_ROUND_BF16 && k == QT_T_ROUND_BF16_x) ||
           (dispatch_bwd(o->kind) && k == QT_T_MOE_DISPATCH_BWD_dxr);
}

/* The microbatch schedule: partial-sum buffers fp32, and no consumer of a reduced buffer
 * other than its ROUND_BF16 (or the fp32 row-gradient sum). */
static int check_partials(const qt_cg_graph *g, uint8_t *reduced, char *err, size_t errlen)
{
    for (int i = 0; i < g->nmb; i++) {
        const qt_op *o = &g->mb[i];
        int32_t fp = QT_NONE;
        if (o->kind == QT_OP_ALL_REDUCE) fp = QT_T(o, ALL_REDUCE, buf);
        else if (dispatch_bwd(o->kind)) fp = QT_T(o, MOE_DISPATCH_BWD, dxr);
        if (fp >= 0 && g->ts[fp].t.dtype == QT_BF16)
            return qt_cg_fail(err, errlen, "bf16 plan: microbatch op %d (%s): %s is bf16, a partial "
                              "sum rounded before the cross-rank sum; expected fp32", i,
                              qt_cg_op_name(o->kind), g->ts[fp].t.name);
        if (o->kind == QT_OP_ROUND_BF16 && check_round(g, o, i, "microbatch", err, errlen))
            return -1;
        if (o->kind == QT_OP_ALL_REDUCE) {
            reduced[fp] = 1;
            continue;
        }
        for (int k = 0; k < QT_OP_MAX_T; k++)
            if (o->t[k] >= 0 && reduced[o->t[k]] && !reads_reduced_ok(o, k))
                return qt_cg_fail(err, errlen, "bf16 plan: microbatch op %d (%s) slot t%d reads %s "
                                  "after its all_reduce: the fp32 partial sum; expected the "
                                  "bf16 copy its ROUND_BF16 writes", i, qt_cg_op_name(o->kind),
                                  k, g->ts[o->t[k]].t.name);
    }
    return 0;
}

int qt_cg_check_dtypes(const qt_cg_graph *g, char *err, size_t errlen)
{
    if (g->s->dtype != QT_BF16) return 0;
    for (int i = 0; i < g->nt; i++)
        if (g->ts[i].t.dtype == QT_BF16 && strstr(g->ts[i].t.name, ".canon_scratch"))
            return qt_cg_fail(err, errlen, "bf16 plan: %s is bf16: the canonical blocks' fp32 "
                              "partials need 4-byte elements", g->ts[i].t.name);
    for (int i = 0; i < g->ninit; i++)
        if (g->init[i].kind == QT_OP_ROUND_BF16 && check_round(g, &g->init[i], i, "init", err, errlen))
            return -1;
    uint8_t *reduced = qt_cg_alloc((size_t)(g->nt ? g->nt : 1));
    const int rc = check_partials(g, reduced, err, errlen);
    free(reduced);
    return rc;
}
