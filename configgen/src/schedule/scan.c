/* schedule/scan.c - scan_layers: the stored microbatch schedule runs the repeated layer cycles
 * from one stored copy (qt_plan.h qt_scan), instead of listing every layer.
 *
 * Everything else in configgen works on the unrolled schedule (g->mb: the checks, the
 * memory plan, plan.txt); this file only derives the stored form from it, after the last
 * change to g->mb, and only where it is exact:
 *  - each op gets the decoder layer it belongs to (qt_cg_scan_op_layer): the highest layer
 *    among the tensors and parameters it names ("L<n>." activations, parameters by their
 *    layer), the layer of the flat range a0 for the kinds with QT_OPP_SCAN_RANGE (per-layer
 *    reduction and gather ops), or the layer of the op before it for the kinds with
 *    QT_OPP_SCAN_PREV (a collective, an accumulator's zeroing) - qt_ops.def's PROPS;
 *  - in the forward part [0, n_fwd) and in the backward part, the ops of each layer cycle
 *    (inhomogeneous_layer_cycle_interval layers) must be one contiguous block, the blocks
 *    back to back in schedule order (cycles increasing in the forward, decreasing in the
 *    backward);
 *  - the longest run of consecutive blocks whose ops differ from one block to the next by
 *    the same per-op, per-slot and per-attribute differences (kinds, flags, float
 *    attributes and unused slots equal) becomes one qt_scan: the run's first block stored
 *    once, count = the run's length, stride = that difference. The unrolled schedule is
 *    then exactly what qt_mb_cursor produces; qt_cg_scan checks that by walking both.
 * A part whose cycles do not form such a run (one cycle, or the first cycle reading the
 * embedding where the others read the previous cycle's output, or the partial last cycle of
 * a layer count that is not a multiple of the cycle) simply stays unrolled there; the bits
 * never depend on the form (same ops, same order).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "schedule/qt_cg_schedule.h"

/* Layer of tensor id: "L<n>." activations (and their clones and gradients), parameters by
 * their layer; -1 for everything else. */
static int tensor_layer(const qt_cg_graph *g, int32_t id)
{
    const qt_cg_tensor *t = &g->ts[id];
    if (t->param >= 0) return g->ps[t->param].layer;
    const char *n = t->t.name;
    while (n[0] == 'd' && n[1] == '.') n += 2;  /* gradients: "d.<name>" */
    if (n[0] != 'L' || n[1] < '0' || n[1] > '9') return -1;
    int l = 0, k = 1;
    while (n[k] >= '0' && n[k] <= '9') l = 10 * l + (n[k++] - '0');
    return n[k] == '.' ? l : -1;
}

/* Layer of flat range r: its first parameter's (a range holds one segment and starts with
 * a parameter, memory/memplan.c). */
/* The flat range a QT_OPP_SCAN_RANGE op belongs to is its attribute a0 (qt_ops.h): r0 of
 * GRAD_MB_TOTAL and GRAD_MB_PUSH, range of GRAD_MB_UNITS (and its split start) and
 * PARAM_GATHER. */
#define QT_CG_A_SCAN_RANGE 0
_Static_assert(QT_A_GRAD_MB_TOTAL_r0 == QT_CG_A_SCAN_RANGE &&
               QT_A_GRAD_MB_PUSH_r0 == QT_CG_A_SCAN_RANGE &&
               QT_A_GRAD_MB_UNITS_range == QT_CG_A_SCAN_RANGE &&
               QT_A_GRAD_MB_UNITS_START_range == QT_CG_A_SCAN_RANGE &&
               QT_A_PARAM_GATHER_range == QT_CG_A_SCAN_RANGE,
               "scan.c: a SCAN_RANGE kind's range is not its a0");

static int range_layer(const qt_cg_graph *g, int64_t r)
{
    for (int p = 0; p < g->np; p++)
        if (g->ps[p].flat_offset == g->ranges[r].lo) return g->ps[p].layer;
    return -1;
}

int qt_cg_scan_op_layer(const qt_cg_graph *g, const qt_op *o, int prev)
{
    /* a layer's reduction and gather ops, or those of the embedding, final norm and head
     * (no layer) that sit where their weight gradient or first reader is */
    const unsigned props = qt_cg_op_props(o->kind);
    /* moved one layer away from the layer it serves (schedule/overlap.c) */
    if (o->flags & QT_OPF_MOVED) return prev;
    if (props & QT_OPP_SCAN_RANGE) {
        const int l = range_layer(g, o->a[QT_CG_A_SCAN_RANGE]);
        return l >= 0 ? l : prev;
    }
    /* a collective, or the zeroing of an accumulator (the next layer down's input
     * gradient is zeroed inside the layer's backward), belongs to the op before it */
    if (props & QT_OPP_SCAN_PREV) return prev;
    int l = -1;
    for (int k = 0; k < QT_OP_MAX_T; k++)
        if (o->t[k] >= 0) {
            const int tl = tensor_layer(g, o->t[k]);
            if (tl > l) l = tl;
        }
    return l;
}

/* The difference between ops x and y (slots unused in both count 0); 0 when they are not
 * the same op up to their tensors and integer attributes. */
static int op_diff(const qt_op *x, const qt_op *y, qt_op_stride *d)
{
    if (x->kind != y->kind || x->flags != y->flags || memcmp(x->f, y->f, sizeof x->f) != 0)
        return 0;
    for (int k = 0; k < QT_OP_MAX_T; k++) {
        if ((x->t[k] == QT_NONE) != (y->t[k] == QT_NONE)) return 0;
        d->t[k] = x->t[k] == QT_NONE ? 0 : y->t[k] - x->t[k];
    }
    for (int k = 0; k < QT_OP_MAX_A; k++) d->a[k] = y->a[k] - x->a[k];
    return 1;
}

/* The scan of ops [lo, hi): the blocks are the maximal runs of ops of one layer cycle
 * (cyc[], -1 outside the layers); the longest run of adjacent blocks of equal length whose
 * ops differ from one block to the next by the same stride becomes *sc (sc->count = 0:
 * none), with the stride in *stride. */
static void find_scan(const qt_cg_graph *g, const int *cyc, int lo, int hi, qt_scan *sc,
                      qt_op_stride **stride)
{
    sc->count = 0;
    int *b0 = qt_cg_alloc((size_t)(hi - lo + 1) * sizeof *b0), *bl;
    int n = 0;
    for (int o = lo; o < hi; o++)
        if (cyc[o] >= 0 && (o == lo || cyc[o] != cyc[o - 1])) b0[n++] = o;
    bl = qt_cg_alloc((size_t)(n ? n : 1) * sizeof *bl);
    for (int i = 0; i < n; i++) {
        int e = b0[i];
        while (e < hi && cyc[e] == cyc[b0[i]]) e++;
        bl[i] = e - b0[i];
    }
    /* link i: block i is block i-1 moved by one stride (adjacent, same length, same ops up
     * to tensors and integer attributes); its stride in strides[i] */
    qt_op_stride **strides = qt_cg_alloc((size_t)(n ? n : 1) * sizeof *strides);
    for (int i = 1; i < n; i++) {
        if (b0[i] != b0[i - 1] + bl[i - 1] || bl[i] != bl[i - 1]) continue;
        strides[i] = qt_cg_alloc((size_t)bl[i] * sizeof **strides);
        for (int j = 0; j < bl[i] && strides[i]; j++)
            if (!op_diff(&g->mb[b0[i - 1] + j], &g->mb[b0[i] + j], &strides[i][j])) {
                free(strides[i]);
                strides[i] = NULL;
            }
    }
    /* the longest run a..b: every link in (a, b] present, all with the stride of link a+1 */
    int best_a = 0, best_len = 0;
    for (int a = 0; a < n; a++) {
        int b = a;
        while (b + 1 < n && strides[b + 1] &&
               (b == a || memcmp(strides[b + 1], strides[a + 1],
                                 (size_t)bl[a] * sizeof **strides) == 0))
            b++;
        if (b - a + 1 > best_len) {
            best_len = b - a + 1;
            best_a = a;
        }
    }
    for (int i = 0; i < n; i++) free(strides[i]);
    free(strides);
    if (best_len >= 2) {
        const int P = bl[best_a];
        qt_op_stride *d = qt_cg_alloc((size_t)P * sizeof *d);
        for (int j = 0; j < P; j++) op_diff(&g->mb[b0[best_a] + j], &g->mb[b0[best_a + 1] + j], &d[j]);
        sc->lo = b0[best_a];  /* unrolled index for now; qt_cg_scan makes it stored */
        sc->n = P;
        sc->count = best_len;
        *stride = d;
    }
    free(b0);
    free(bl);
}

static int op_equal(const qt_op *x, const qt_op *y)
{
    return x->kind == y->kind && x->flags == y->flags &&
           memcmp(x->t, y->t, sizeof x->t) == 0 && memcmp(x->a, y->a, sizeof x->a) == 0 &&
           memcmp(x->f, y->f, sizeof x->f) == 0;
}

int qt_cg_scan(qt_cg_graph *g, char *err, size_t errlen)
{
    g->n_scans = 0;
    free(g->mbc);
    g->mbc = NULL;
    g->nmbc = 0;
    for (int k = 0; k < QT_MAX_SCANS; k++) {
        free(g->scan_stride[k]);
        g->scan_stride[k] = NULL;
    }
    const int64_t cyc_len = g->s->m.cycle > 0 ? g->s->m.cycle : 1;
    const int n_cycles = (int)(g->s->m.n_layers / cyc_len);
    /* a partial last cycle (layers not a multiple of the cycle) is a shorter block: it
     * links to no other, so it stays unrolled */
    if (!g->s->scan_layers || n_cycles < 2) return 0;
    int *cyc = qt_cg_alloc((size_t)(g->nmb ? g->nmb : 1) * sizeof *cyc);
    int prev = -1;
    for (int o = 0; o < g->nmb; o++) {
        prev = qt_cg_scan_op_layer(g, &g->mb[o], prev);
        cyc[o] = prev >= 0 ? (int)(prev / cyc_len) : -1;
    }
    qt_scan found[QT_MAX_SCANS];
    qt_op_stride *st[QT_MAX_SCANS] = {NULL, NULL};
    find_scan(g, cyc, 0, g->n_fwd, &found[0], &st[0]);
    find_scan(g, cyc, g->n_fwd, g->nmb, &found[1], &st[1]);
    free(cyc);
    /* the stored schedule: every op outside the runs' repeated blocks */
    g->mbc = qt_cg_alloc((size_t)(g->nmb ? g->nmb : 1) * sizeof *g->mbc);
    int o = 0;
    for (int k = 0; k < QT_MAX_SCANS; k++) {
        if (found[k].count < 2) continue;
        while (o < found[k].lo) g->mbc[g->nmbc++] = g->mb[o++];
        qt_scan *sc = &g->scans[g->n_scans];
        *sc = found[k];
        sc->lo = g->nmbc;
        for (int j = 0; j < found[k].n; j++) g->mbc[g->nmbc++] = g->mb[o + j];
        o += found[k].n * found[k].count;
        g->scan_stride[g->n_scans++] = st[k];
        st[k] = NULL;
    }
    while (o < g->nmb) g->mbc[g->nmbc++] = g->mb[o++];
    free(st[0]);
    free(st[1]);
    /* the stored form must unroll to exactly the schedule every check ran on */
    qt_plan p;
    memset(&p, 0, sizeof p);
    qt_scan scans[QT_MAX_SCANS];
    for (int k = 0; k < g->n_scans; k++) {
        scans[k] = g->scans[k];
        scans[k].stride = g->scan_stride[k];
    }
    p.n_mb_ops = g->nmbc;
    p.mb_ops = g->mbc;
    p.n_scans = g->n_scans;
    p.scans = scans;
    int n = 0;
    for (qt_mb_cursor c = qt_mb_begin(&p); qt_mb_next(&c); n++)
        if (n >= g->nmb || !op_equal(c.op, &g->mb[n]))
            return qt_cg_fail(err, errlen, "scan_layers: the stored schedule differs from the "
                              "unrolled one at op %d (internal error)", n);
    if (n != g->nmb)
        return qt_cg_fail(err, errlen, "scan_layers: the stored schedule unrolls to %d ops, "
                          "expected %d (internal error)", n, g->nmb);
    if (!g->n_scans) {
        free(g->mbc);
        g->mbc = NULL;
        g->nmbc = 0;
    }
    return 0;
}
