/* pipeline_chunks.c - a pipeline stage's repeat chunks (issue 36, docs/pipeline.md
 * "Circular repeats"): the chunk table read from a stage plan's PP_CHUNK markers (or, with
 * one repeat, from its pp_* fields), and the one-rank parameter and element indices of a
 * stage's local parameters (parameter init and the fingerprint use them).
 *
 * Invariants: reads the plan's tables only (no interpreter, no collectives, so parameter
 * init and the checkpoint code link without the pipeline driver); its one piece of state is
 * the table of the last plan asked for (qt_pp_ct), rebuilt when another plan is asked;
 * markers out of order are refused with the plan named (configgen's check_chunks proves
 * them; this re-checks what the driver relies on).
 */
#include <stdint.h>
#include "qt_pipeline.h"
#include "qt_err.h"

/* The chunk table of qt_pp_chunks, for the plan it was built for. */
static struct {
    const qt_plan *p;
    int R;
    qt_pp_chunk c[QT_PP_MAX_REPEATS];
} qt_pp_ct;

/* Chunk r from its forward marker m; ranges set by the caller. */
static void qt_pp_chunk_of(qt_pp_chunk *c, const qt_op *m)
{
    c->in = (int32_t)QT_A(m, PP_CHUNK, in);
    c->out = (int32_t)QT_A(m, PP_CHUNK, out);
    c->dout = (int32_t)QT_A(m, PP_CHUNK, dout);
    c->din = (int32_t)QT_A(m, PP_CHUNK, din);
    c->param0 = (int32_t)QT_A(m, PP_CHUNK, param0);
    c->gparam = QT_A(m, PP_CHUNK, gparam);
    c->gelem = QT_A(m, PP_CHUNK, gelem);
}

/* The microbatch-end schedule cut per chunk (the microbatch form on a circular stage): R
 * markers PP_CHUNK (bwd 2) in chunk order, the first one at op 0, each chunk's ops up to the
 * next; no ops at all (the step form): every chunk's span empty. 1 when they are not so. */
static int qt_pp_chunk_ends(const qt_plan *p, qt_pp_chunk *c, int n)
{
    int k = 0;
    for (int r = 0; r < n; r++) c[r].e0 = c[r].e1 = 0;
    for (int32_t i = 0; i < p->n_mbend_ops; i++) {
        const qt_op *o = &p->mbend_ops[i];
        if (o->kind != QT_OP_PP_CHUNK) {
            if (!k) return 1;
            c[k - 1].e1 = i + 1;
            continue;
        }
        if (k >= n || QT_A(o, PP_CHUNK, chunk) != k || QT_A(o, PP_CHUNK, bwd) != 2) return 1;
        c[k].e0 = c[k].e1 = i + 1;
        k++;
    }
    return p->n_mbend_ops > 0 && k != n;
}

const qt_pp_chunk *qt_pp_chunks(const qt_plan *p, int *R)
{
    *R = 0;
    if (p->pipeline_stages <= 1) return NULL;
    if (qt_pp_ct.p == p) {
        *R = qt_pp_ct.R;
        return qt_pp_ct.c;
    }
    qt_pp_chunk *c = qt_pp_ct.c;
    const int n = p->pp_repeats;
    if (n <= 1) { /* one chunk: the plan's fields */
        c[0] = (qt_pp_chunk){0, p->pp_fwd_ops, p->pp_fwd_ops, INT64_MAX, 0, p->n_mbend_ops,
                             p->pp_in, p->pp_out, p->pp_dout, p->pp_din, 0, p->pp_param0,
                             p->pp_elem0};
    } else {
        /* the markers: R forward ones in chunk order, then R backward end markers in
         * reverse chunk order (model/graph.c, model/autodiff.c; configgen checks that each
         * chunk's runs read only what they write: check/check.c check_chunks), and the
         * microbatch-end schedule's (schedule/step.c) */
        int nf = 0, nb = 0, bad = n > QT_PP_MAX_REPEATS;
        /* logical indices (a chunk's layer cycles may be scanned: qt_mb_cursor unrolls) */
        for (qt_mb_cursor k = qt_mb_begin(p); !bad && qt_mb_next(&k);) {
            const qt_op *o = k.op;
            const int64_t i = k.logical;
            if (o->kind != QT_OP_PP_CHUNK) continue;
            const int bwd = QT_A(o, PP_CHUNK, bwd) != 0;
            const int64_t want = bwd ? n - 1 - nb : nf;
            if (QT_A(o, PP_CHUNK, chunk) != want || (bwd ? nb >= n || nf < n : nf >= n)) {
                bad = 1;
            } else if (!bwd) {
                qt_pp_chunk_of(&c[nf], o);
                c[nf].f0 = nf ? i : 0;
                if (nf) c[nf - 1].f1 = i;
                nf++;
            } else {
                if (nb == 0) c[n - 1].f1 = p->pp_fwd_ops;
                c[want].b0 = nb ? c[want + 1].b1 + 1 : p->pp_fwd_ops;
                c[want].b1 = want ? i : INT64_MAX;
                nb++;
            }
        }
        if (!bad && nf == n && nb == n) bad = qt_pp_chunk_ends(p, c, n);
        if (bad || nf != n || nb != n) {
            qt_fail(QT_E_PLAN, "plan %s: %d repeats, but its pipeline chunk markers (PP_CHUNK) "
                    "are not %d forward ones in order and %d backward ones in reverse order "
                    "(and, with a microbatch-end schedule, %d there in order from its first "
                    "op)", p->run_name, n, n, n, n);
            return NULL;
        }
    }
    qt_pp_ct.p = p;
    qt_pp_ct.R = *R = n <= 1 ? 1 : n;
    return c;
}

/* The chunk holding local parameter i (the last whose first parameter is at most i). */
static const qt_pp_chunk *qt_pp_chunk_of_param(const qt_plan *p, int32_t i)
{
    int R;
    const qt_pp_chunk *c = qt_pp_chunks(p, &R);
    if (!c) return NULL;
    int r = 0;
    while (r + 1 < R && c[r + 1].param0 <= i) r++;
    return &c[r];
}

int64_t qt_pp_param_index(const qt_plan *p, int32_t i)
{
    const qt_pp_chunk *c = qt_pp_chunk_of_param(p, i);
    return c ? c->gparam + (i - c->param0) : i;
}

int64_t qt_pp_elem_base(const qt_plan *p, int32_t i, int64_t next)
{
    const qt_pp_chunk *c = qt_pp_chunk_of_param(p, i);
    return c && c->param0 == i ? c->gelem : next;
}
