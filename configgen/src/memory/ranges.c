/* memory/ranges.c - the flat parameter ranges and their leaf-tree windows.
 *
 * Flat ranges (qt_plan.h qt_flat_range), one per holding pattern: the mesh axes along which
 * ranks hold different slices of a parameter (routed experts over `expert`, heads and the
 * shared expert's width over `tensor`, the GDN mixers' head weights over `context`), and
 * the axes over which a parameter's gradient is already complete (the GDN norm weight under
 * context parallelism); parameters every rank holds whole come first. Their gradients reduce
 * over the batch axes minus both. Each range is padded to
 * equal, 64-byte aligned blocks of its reduction group. One range (and the parameters in
 * index order) on meshes without expert or tensor parallelism. With per-layer reduction the
 * ranges are per (segment, holding pattern), segments in order of first parameter, and each
 * range's leaf-tree levels are a window placed first fit among the windows in use at the
 * same time (between the range's first WGRAD and its push, schedule/layer_ops.c). A
 * circular pipeline stage (PP_CHUNK markers) in the microbatch form: ranges per (repeat
 * chunk, holding pattern), so that no range spans two chunks.
 * Invariants: parameter flat offsets are multiples of 16 elements (32 in bf16 plans, so the
 * bf16 compute copy stays 64-byte aligned: qt_cg_flat_align); the flat region is
 * refused above 2^54 elements; the ranges cover [0, n_flat) in order.
 */
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"
#include "memory/qt_cg_memory.h"

#define ALIGN_UP(x, a) ((((x) + (a) - 1) / (a)) * (a))

int qt_cg_chunk_of(const qt_cg_graph *g, int p)
{
    int c = 0;
    for (int o = 0; o < g->n_fwd; o++)
        if (g->mb[o].kind == QT_OP_PP_CHUNK && QT_A(&g->mb[o], PP_CHUNK, param0) <= p)
            c = (int)QT_A(&g->mb[o], PP_CHUNK, chunk);
    return c;
}

/* Segment of parameter p for the flat ranges: everything in one segment, or with per-layer
 * reduction its decoder layer, and a segment of its own for each parameter outside the
 * layers (embedding, final norm, head: their gradients complete at different times); a
 * circular pipeline stage in the microbatch form: its repeat chunk (a chunk's gradients
 * complete at the chunk's backward, and its microbatch-end schedule pushes its ranges
 * alone: schedule/step.c). */
static int64_t segment_of(const qt_cg_graph *g, int p)
{
    if (!g->layer_reduce) return g->reduce_per_mb ? qt_cg_chunk_of(g, p) : 0;
    return g->ps[p].layer >= 0 ? g->ps[p].layer : g->s->m.n_layers + p;
}

static qt_flat_range *new_range(qt_cg_graph *g)
{
    g->ranges = qt_cg_grow(g->ranges, &g->capranges, g->n_ranges + 1, sizeof *g->ranges);
    qt_flat_range *r = &g->ranges[g->n_ranges++];
    memset(r, 0, sizeof *r);
    return r;
}

/* Places each range's window in the leaf-tree levels: first fit, in range order, avoiding
 * the windows of ranges live at the same time; returns the levels' extent. */
static int64_t place_windows(qt_cg_graph *g, const int64_t *live)
{
    int64_t extent = 0;
    for (int r = 0; r < g->n_ranges; r++) {
        int64_t cand = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int q = 0; q < r; q++) {
                const int overlap_t = live[2 * q] <= live[2 * r + 1] && live[2 * r] <= live[2 * q + 1];
                const qt_flat_range *u = &g->ranges[q];
                if (overlap_t && cand < u->leaf_lo + u->n && u->leaf_lo < cand + g->ranges[r].n) {
                    cand = u->leaf_lo + u->n;
                    moved = 1;
                }
            }
        }
        g->ranges[r].leaf_lo = cand;
        if (cand + g->ranges[r].n > extent) extent = cand + g->ranges[r].n;
    }
    return extent;
}

int qt_cg_flat_ranges(qt_cg_graph *g, char *err, size_t errlen)
{
    const qt_cg_settings *st = g->s;
    /* a parameter's pattern: its holding axes (low byte) and the axes over which its
     * gradient is already complete (high byte: qt_cg_tensor.grad_done) */
    uint16_t *hold_of = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *hold_of);
    for (int p = 0; p < g->np; p++) {
        const qt_cg_tensor *ct = &g->ts[g->ps[p].tensor];
        for (int d = 0; d < ct->t.ndim; d++)
            if (ct->t.shape[d] != ct->t.global_shape[d]) hold_of[p] |= ct->t.spec[d];
        hold_of[p] |= (uint16_t)(ct->grad_done << 8);
    }
    int64_t off = 0;
    g->n_ranges = 0;
    for (int p0 = 0; p0 < g->np || (p0 == 0 && g->np == 0); p0++) {
        /* a segment starts at its first parameter */
        int first = 1;
        for (int q = 0; q < p0 && first; q++) first = segment_of(g, q) != segment_of(g, p0);
        if (!first) continue;
        const int64_t seg = g->np ? segment_of(g, p0) : 0;
        /* the segment's patterns in increasing order (pattern 0 always, unless per layer) */
        for (int prev = -1;;) {
            int hold = prev < 0 && !g->layer_reduce ? 0 : 65536;
            for (int p = 0; p < g->np; p++)
                if (segment_of(g, p) == seg && hold_of[p] > prev && hold_of[p] < hold)
                    hold = hold_of[p];
            if (hold == 65536) break;
            prev = hold;
            int64_t lo = off;
            for (int p = 0; p < g->np; p++) {
                if (hold_of[p] != hold || segment_of(g, p) != seg) continue;
                g->ps[p].flat_offset = off;
                off += ALIGN_UP(g->ps[p].numel, qt_cg_flat_align(st));
                if (off > ((int64_t)1 << 54)) {
                    free(hold_of);
                    return qt_cg_fail(err, errlen, "the parameters need more than 2^54 elements "
                                      "(at %s), where the arena's byte offsets would overflow; "
                                      "expected smaller model sizes", g->ts[g->ps[p].tensor].t.name);
                }
            }
            qt_flat_range *r = new_range(g);
            r->reduce_mask = (uint8_t)(st->batch_mask & ~hold & ~(hold >> 8));
            r->opt_mask = (uint8_t)(st->opt_mask & r->reduce_mask);
            r->hold_mask = (uint8_t)(hold & 0xff);
            r->lo = lo;
            off = lo + ALIGN_UP(off - lo, qt_cg_flat_align(st) * qt_cg_group_size(st, r->reduce_mask));
            r->n = off - lo;
            r->leaf_lo = lo;
        }
    }
    free(hold_of);
    g->n_flat = off;
    g->leaf_elems = off;  /* the leaf-tree levels span the flat vector (no windows) */
    return 0;
}

/* Per-layer reduction: the ranges' leaf windows, placed first fit in range order among the
 * windows of ranges in use at the same time (from the range's first WGRAD op to its
 * GRAD_MB_PUSH or GRAD_MB_UNITS, schedule/layer_ops.c, or to its split units exchange's
 * GRAD_MB_UNITS_WAIT, schedule/overlap.c); the leaf-tree levels then span
 * g->leaf_elems. */
void qt_cg_leaf_windows(qt_cg_graph *g)
{
    int64_t *live = qt_cg_alloc((size_t)(2 * g->n_ranges) * sizeof *live);
    for (int r = 0; r < 2 * g->n_ranges; r++) live[r] = -1;
    for (int o = 0; o < g->nmb; o++) {
        const qt_op *op = &g->mb[o];
        if (op->kind == QT_OP_GRAD_MB_PUSH) live[2 * QT_A(op, GRAD_MB_PUSH, r0) + 1] = o;
        /* the units op, or (collective_overlap, schedule/overlap.c) its split start and the
         * wait after it: the window lives until the wait */
        if (op->kind == QT_OP_GRAD_MB_UNITS || op->kind == QT_OP_GRAD_MB_UNITS_START ||
            op->kind == QT_OP_GRAD_MB_UNITS_WAIT)
            live[2 * QT_A(op, GRAD_MB_UNITS, range) + 1] = o;
        if (!(op->flags & QT_OPF_WGRAD)) continue;
        for (int k = 0; k < 2; k++) {
            const int64_t pi = op->a[QT_A_WGRAD_PARAM + k];
            if (pi >= 0 && live[2 * qt_cg_range_of(g, (int)pi)] < 0)
                live[2 * qt_cg_range_of(g, (int)pi)] = o;
        }
    }
    g->leaf_elems = place_windows(g, live);
    free(live);
}

int qt_cg_range_of(const qt_cg_graph *g, int p)
{
    for (int r = 0; r < g->n_ranges; r++)
        if (g->ps[p].flat_offset >= g->ranges[r].lo &&
            g->ps[p].flat_offset < g->ranges[r].lo + g->ranges[r].n)
            return r;
    return -1;
}

int qt_cg_units_split(const qt_cg_graph *g, int r)
{
    for (int o = 0; o < g->nmb; o++)
        if (g->mb[o].kind == QT_OP_GRAD_MB_UNITS_START &&
            QT_A(&g->mb[o], GRAD_MB_UNITS_START, range) == r)
            return 1;
    return 0;
}
