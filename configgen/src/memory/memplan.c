/* memory/memplan.c - arena layout and the liveness-based activation planner.
 *
 * Layout (bytes, every region and tensor 64-byte aligned):
 *   params | adam_m | adam_v | tree level 0..n-1 (level n-1 = grads) | leaf scratch |
 *   comm scratch | activations
 * The params and tree regions are flat parameter regions of n_flat floats: parameter p sits
 * at the same element offset (flat_offset, a multiple of 16 so every tensor stays 64-byte
 * aligned) in each of them; padding elements between parameters and up to n_flat (a
 * multiple of 16 x the batch group's size, so every group block is equal and aligned) are
 * never read as parameters and stay zero. The Adam regions hold this rank's block of the
 * optimizer group: n_flat / |opt group| floats. The comm scratch (1 MiB, meshes only) is
 * the reduce-scatter's receive buffer. n_tree_levels = bit length of the sequences this rank processes per step
 * (micro_batch * grad_accum). The gradient region is the top tree level itself: that level
 * is written only by the last carry of the step's tree and stays occupied from then on, so
 * the runtime completes the total in place there (qt_tree.h) and no separate region is
 * needed. The leaf scratch holds the parameters of the largest WGRAD op (at most two). Activations, saved statistics, gradients of activations, inputs,
 * losses, the rotary table and kernel scratch get offsets from a greedy planner: lifetime =
 * [first, last] op index in the microbatch schedule (whole schedule for tokens, targets,
 * loss_seq, lb_seq and the table); tensors are placed largest first (ties by id) at the
 * lowest offset that overlaps no placed tensor with an overlapping lifetime. The arena is
 * rounded up to 2 MiB. Invariants are re-checked by qt_cg_check_plan.
 * Bounds: every tensor is <= 2^56 elements (config/settings.c, qt_cg_add_tensor); the flat
 * region is refused above 2^54 elements and the activations above 2^60 bytes, so no offset
 * sum here can wrap a signed 64-bit integer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"

#define ALIGN_UP(x, a) ((((x) + (a) - 1) / (a)) * (a))
/* Receive buffer of the reduce-scatter (floats): large enough that MPICH moves big
 * messages, small next to any model's gradient. */
#define QT_CG_COMM_SCRATCH (1 << 18)

static int64_t bytes_of(const qt_tensor *t)
{
    return ALIGN_UP(t->numel * 4, (int64_t)QT_TENSOR_ALIGN);
}

static int planned(const qt_cg_tensor *t)
{
    return t->t.role != QT_ROLE_PARAM && t->t.role != QT_ROLE_GRAD &&
           t->t.role != QT_ROLE_ADAM_M && t->t.role != QT_ROLE_ADAM_V;
}

static void lifetimes(qt_cg_graph *g)
{
    for (int i = 0; i < g->nt; i++) g->ts[i].first = g->ts[i].last = -1;
    for (int o = 0; o < g->nmb; o++)
        for (int s = 0; s < QT_OP_MAX_T; s++) {
            int32_t id = g->mb[o].t[s];
            if (id < 0) continue;
            qt_cg_tensor *t = &g->ts[id];
            if (t->first < 0) t->first = o;
            t->last = o;
        }
    for (int i = 0; i < g->nt; i++)
        if (planned(&g->ts[i]) && (g->ts[i].whole || g->ts[i].first < 0)) {
            g->ts[i].first = 0;
            g->ts[i].last = g->nmb > 0 ? g->nmb - 1 : 0;
        }
    /* a gather window lives until the last read of the parameters that point into it */
    for (int i = 0; i < g->nt; i++) {
        const qt_cg_tensor *t = &g->ts[i];
        if (t->alias_of >= 0 && t->last > g->ts[t->alias_of].last)
            g->ts[t->alias_of].last = t->last;
    }
}

typedef struct qt_cg_iv {
    int64_t lo, hi;
} qt_cg_iv;

static int cmp_iv(const void *a, const void *b)
{
    const qt_cg_iv *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : (x->hi < y->hi ? -1 : x->hi > y->hi);
}

typedef struct qt_cg_sortkey {
    int64_t bytes;
    int32_t id;
} qt_cg_sortkey;

static int cmp_size(const void *a, const void *b)
{
    const qt_cg_sortkey *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int overlap_life(const qt_cg_tensor *a, const qt_cg_tensor *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* Segment of parameter p for the flat ranges: everything in one segment, or with per-layer
 * reduction its decoder layer, and a segment of its own for each parameter outside the
 * layers (embedding, final norm, head: their gradients complete at different times). */
static int64_t segment_of(const qt_cg_graph *g, int p)
{
    if (!g->layer_reduce) return 0;
    return g->ps[p].layer >= 0 ? g->ps[p].layer : g->s->m.n_layers + p;
}

static qt_flat_range *new_range(qt_cg_graph *g)
{
    g->ranges = qt_cg_grow(g->ranges, &g->capranges, g->n_ranges + 1, sizeof *g->ranges);
    qt_flat_range *r = &g->ranges[g->n_ranges++];
    memset(r, 0, sizeof *r);
    return r;
}

/* Per-layer reduction: right after the last WGRAD op of each flat range's parameters, the
 * range's leaf-tree total (GRAD_MB_TOTAL), its reduce-scatter over the range's reduction
 * group (a COLLECTIVE whose a0 is -1 - range until qt_cg_step_schedule creates it) and
 * its push into the microbatch tree (GRAD_MB_PUSH). STEP ops left by an earlier call are
 * dropped first. live[2r], live[2r+1]: the op indices (new schedule) of the range's first
 * WGRAD and of its push: the window of its leaf-tree levels is busy in between. */
static void insert_range_reduces(qt_cg_graph *g, int64_t *live)
{
    int n = 0;
    for (int o = 0; o < g->nmb; o++)
        if (qt_cg_op_class(g->mb[o].kind) != QT_OPC_STEP) g->mb[n++] = g->mb[o];
    g->nmb = n;
    int *last = qt_cg_alloc((size_t)g->n_ranges * sizeof *last);
    int *range_of = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *range_of);
    for (int r = 0; r < g->n_ranges; r++) last[r] = -1;
    for (int p = 0; p < g->np; p++) range_of[p] = qt_cg_range_of(g, p);
    for (int o = 0; o < n; o++) {
        if (!(g->mb[o].flags & QT_OPF_WGRAD)) continue;
        for (int k = 0; k < 2; k++)
            if (g->mb[o].a[8 + k] >= 0) last[range_of[g->mb[o].a[8 + k]]] = o;
    }
    qt_op *old = g->mb;
    int cap = n + 3 * g->n_ranges;
    g->mb = qt_cg_alloc((size_t)cap * sizeof *g->mb);
    g->capmb = cap;
    g->nmb = 0;
    for (int r = 0; r < 2 * g->n_ranges; r++) live[r] = -1;
    for (int o = 0; o < n; o++) {
        g->mb[g->nmb++] = old[o];
        if (old[o].flags & QT_OPF_WGRAD)
            for (int k = 0; k < 2; k++) {
                const int64_t pi = old[o].a[8 + k];
                if (pi >= 0 && live[2 * range_of[pi]] < 0) live[2 * range_of[pi]] = g->nmb - 1;
            }
        for (int r = 0; r < g->n_ranges; r++) {
            if (last[r] != o) continue;
            const int kinds[3] = {QT_OP_GRAD_MB_TOTAL, QT_OP_COLLECTIVE, QT_OP_GRAD_MB_PUSH};
            for (int k = 0; k < 3; k++) {
                if (kinds[k] == QT_OP_COLLECTIVE && !g->ranges[r].reduce_mask) continue;
                qt_op *q = &g->mb[g->nmb++];
                qt_cg_op_blank(q, kinds[k]);
                q->a[0] = kinds[k] == QT_OP_COLLECTIVE ? -1 - r : r;
                q->a[1] = kinds[k] == QT_OP_COLLECTIVE ? 0 : r + 1;
            }
            live[2 * r + 1] = g->nmb - 1;
        }
    }
    free(old);
    free(last);
    free(range_of);
}

/* A COLLECTIVE placeholder for the all-gather of gather window `win` (range r), resolved
 * by qt_cg_step_schedule: a0 = -1 - k, a1 = 1. */
static void gather_collective(qt_cg_graph *g, qt_op *q, int32_t win, int r)
{
    g->gather_win = qt_cg_grow(g->gather_win, &g->cap_gather_win, 2 * g->n_gather_win + 2,
                               sizeof *g->gather_win);
    g->gather_win[2 * g->n_gather_win] = win;
    g->gather_win[2 * g->n_gather_win + 1] = r;
    qt_cg_op_blank(q, QT_OP_COLLECTIVE);
    q->a[0] = -1 - g->n_gather_win++;
    q->a[1] = 1;
}

/* A gather window: the compute copy of flat range r (n floats, replicated layout). */
static int32_t gather_window(qt_cg_graph *g, int r, const char *when)
{
    char name[96];
    snprintf(name, sizeof name, "gather.range%d.%s", r, when);
    const int64_t shape[1] = {g->ranges[r].n};
    const uint8_t axes[1] = {0};
    return qt_cg_add_tensor(g, name, QT_ROLE_ACT, QT_F32, 1, shape, axes);
}

/* A backward clone of parameter tensor id ("<name>~g"): the same parameter, read from the
 * backward's gather window. */
static int32_t param_clone(qt_cg_graph *g, int32_t id)
{
    const int32_t c = qt_cg_clone_tensor(g, id, "~g");
    g->ts[c].param = g->ts[id].param;
    return c;
}

/* Per-layer parameter gathers (params_compact): before the first forward op that reads a
 * parameter of flat range r, PARAM_GATHER into r's forward window and its all-gather over
 * r's optimizer axes; likewise before the first backward op (remat copies included) that
 * reads one, into a backward window, which the backward's parameter slots read through
 * clones. The parameter tensors point into the windows (alias_of); the windows are planned
 * like activations, so a layer's compute copy lives only around its forward and its
 * backward. Runs once per graph (the clones rewrite the backward). */
static void insert_param_gathers(qt_cg_graph *g)
{
    const int nr = g->n_ranges;
    int *ffirst = qt_cg_alloc((size_t)(2 * nr) * sizeof *ffirst), *bfirst = ffirst + nr;
    int32_t *win = qt_cg_alloc((size_t)(2 * nr) * sizeof *win);
    int32_t *clone = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *clone);
    int *range_of = qt_cg_alloc((size_t)(g->np ? g->np : 1) * sizeof *range_of);
    for (int r = 0; r < 2 * nr; r++) ffirst[r] = -1, win[r] = QT_NONE;
    for (int p = 0; p < g->np; p++) {
        clone[p] = QT_NONE;
        range_of[p] = qt_cg_range_of(g, p);
    }
    for (int o = 0; o < g->nmb; o++) {
        const char *slots = qt_cg_op_slots(g->mb[o].kind);
        for (int k = 0; slots[k]; k++) {
            const int32_t id = g->mb[o].t[k];
            if ((slots[k] | 32) != 'p' || id < 0 || g->ts[id].param < 0) continue;
            int *first = o < g->n_fwd ? ffirst : bfirst;
            if (first[range_of[g->ts[id].param]] < 0) first[range_of[g->ts[id].param]] = o;
        }
    }
    for (int r = 0; r < nr; r++) {
        if (ffirst[r] >= 0) win[r] = gather_window(g, r, "fwd");
        if (bfirst[r] >= 0) win[nr + r] = gather_window(g, r, "bwd");
    }
    for (int p = 0; p < g->np; p++) {
        const int r = range_of[p];
        const int32_t id = g->ps[p].tensor;
        const int64_t off = 4 * (g->ps[p].flat_offset - g->ranges[r].lo);
        if (win[nr + r] != QT_NONE) {
            clone[p] = param_clone(g, id);
            g->ts[clone[p]].alias_of = win[nr + r];
            g->ts[clone[p]].alias_off = off;
        }
        g->ts[id].alias_of = win[r];
        g->ts[id].alias_off = off;
    }
    qt_op *old = g->mb;
    const int n = g->nmb;
    g->mb = qt_cg_alloc((size_t)(n + 4 * nr) * sizeof *g->mb);
    g->capmb = n + 4 * nr;
    g->nmb = 0;
    int n_fwd = -1;  /* the forward grows by its gathers */
    for (int o = 0; o < n; o++) {
        if (o == g->n_fwd) n_fwd = g->nmb;
        for (int r = 0; r < 2 * nr; r++) {
            if (ffirst[r] != o) continue;
            qt_op *q = &g->mb[g->nmb++];
            qt_cg_op_blank(q, QT_OP_PARAM_GATHER);
            q->t[0] = win[r];
            q->a[0] = r % nr;
            if (g->ranges[r % nr].opt_mask) gather_collective(g, &g->mb[g->nmb++], win[r], r % nr);
        }
        qt_op op = old[o];
        if (o >= g->n_fwd) {
            const char *slots = qt_cg_op_slots(op.kind);
            for (int k = 0; slots[k]; k++)
                if ((slots[k] | 32) == 'p' && op.t[k] >= 0 && g->ts[op.t[k]].param >= 0 &&
                    clone[g->ts[op.t[k]].param] != QT_NONE)
                    op.t[k] = clone[g->ts[op.t[k]].param];
        }
        g->mb[g->nmb++] = op;
    }
    g->n_fwd = n_fwd >= 0 ? n_fwd : g->nmb;
    free(old);
    free(ffirst);
    free(win);
    free(clone);
    free(range_of);
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

int qt_cg_memplan(qt_cg_graph *g, char *err, size_t errlen)
{
    /* Flat parameter ranges, one per holding pattern: the mesh axes along which ranks hold
     * different slices of a parameter (routed experts over `expert`, heads and the shared
     * expert's width over `tensor`); parameters every rank holds whole come first. Their
     * gradients reduce over the batch axes minus the holding axes. Each range is padded to
     * equal, 64-byte aligned blocks of its reduction group. One range (and the parameters in
     * index order) on meshes without expert or tensor parallelism. With per-layer reduction
     * the ranges are per (segment, holding pattern), segments in order of first parameter. */
    const qt_cg_settings *st = g->s;
    uint8_t *hold_of = qt_cg_alloc((size_t)(g->np ? g->np : 1));
    for (int p = 0; p < g->np; p++) {
        const qt_tensor *t = &g->ts[g->ps[p].tensor].t;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] != t->global_shape[d]) hold_of[p] |= t->spec[d];
    }
    int64_t off = 0;
    g->n_ranges = 0;
    for (int p0 = 0; p0 < g->np || (p0 == 0 && g->np == 0); p0++) {
        /* a segment starts at its first parameter */
        int first = 1;
        for (int q = 0; q < p0 && first; q++) first = segment_of(g, q) != segment_of(g, p0);
        if (!first) continue;
        const int64_t seg = g->np ? segment_of(g, p0) : 0;
        for (int hold = 0; hold < 256; hold++) {
            int any = 0;
            for (int p = 0; p < g->np && !any; p++) any = hold_of[p] == hold && segment_of(g, p) == seg;
            if (!any && (hold || g->layer_reduce)) continue;
            int64_t lo = off;
            for (int p = 0; p < g->np; p++) {
                if (hold_of[p] != hold || segment_of(g, p) != seg) continue;
                g->ps[p].flat_offset = off;
                off += ALIGN_UP(g->ps[p].numel, 16);
                if (off > ((int64_t)1 << 54)) {
                    free(hold_of);
                    return qt_cg_fail(err, errlen, "the parameters need more than 2^54 elements "
                                      "(at %s), where the arena's byte offsets would overflow; "
                                      "expected smaller model sizes", g->ts[g->ps[p].tensor].t.name);
                }
            }
            qt_flat_range *r = new_range(g);
            r->reduce_mask = (uint8_t)(st->batch_mask & ~hold);
            r->opt_mask = (uint8_t)(st->opt_mask & r->reduce_mask);
            r->hold_mask = (uint8_t)hold;
            r->lo = lo;
            off = lo + ALIGN_UP(off - lo, 16 * qt_cg_group_size(st, r->reduce_mask));
            r->n = off - lo;
            r->leaf_lo = lo;
        }
    }
    free(hold_of);
    /* the leaf-tree levels: the flat vector, or with per-layer reduction the ranges'
     * windows (the reduce ops go into the schedule first: they bound the windows' use) */
    g->leaf_elems = off;
    if (g->layer_reduce) {
        int64_t *live = qt_cg_alloc((size_t)(2 * g->n_ranges) * sizeof *live);
        insert_range_reduces(g, live);
        g->leaf_elems = place_windows(g, live);
        free(live);
    }
    if (g->params_compact) {
        if (!g->layer_reduce || g->n_gather_win)
            return qt_cg_fail(err, errlen, "per-layer parameter gathers need per-layer reduction "
                              "and are planned once (internal error)");
        insert_param_gathers(g);
    }
    for (int p = 0; p < g->np; p++) {
        const qt_flat_range *r = &g->ranges[qt_cg_range_of(g, p)];
        g->ps[p].leaf_offset = r->leaf_lo + g->ps[p].flat_offset - r->lo;
    }
    g->n_param_elems = 0;
    for (int p = 0; p < g->np; p++)
        if (g->ps[p].flat_offset + ALIGN_UP(g->ps[p].numel, 16) > g->n_param_elems)
            g->n_param_elems = g->ps[p].flat_offset + ALIGN_UP(g->ps[p].numel, 16);
    g->n_flat = off;
    g->adam_elems = 0;
    for (int i = 0; i < g->n_ranges; i++) {
        g->ranges[i].adam_lo = g->adam_elems;
        g->adam_elems += g->ranges[i].n / qt_cg_group_size(st, g->ranges[i].opt_mask);
    }
    int64_t region = g->n_flat * 4, adam = g->adam_elems * 4;
    /* with per-layer gathers the parameter region holds the rank's blocks, as Adam does */
    const int64_t pregion = g->params_compact ? adam : region;
    g->params_offset = 0;
    g->adam_m_offset = pregion;
    g->adam_v_offset = pregion + adam;
    const int64_t flat0 = pregion + 2 * adam; /* first tree level */
    /* Trees: one over the step's leaves; on a mesh with batch axes, one over a microbatch's
     * leaves followed by one over the microbatches (their totals reduce-scattered first). */
    const int64_t G = g->s->tr.grad_accum;
    g->n_mb_levels = 0;
    if (g->s->batch_mask && g->reduce_per_mb)
        while (G >> g->n_mb_levels) g->n_mb_levels++;
    int64_t seqs = 0, lv = 0;
    for (int p = 0; p < g->np; p++) {
        const int64_t n = g->n_mb_levels ? g->ps[p].leaves / G : g->ps[p].leaves;
        if (n > seqs) seqs = n;
    }
    while (seqs >> lv) lv++;
    lv += g->n_mb_levels;
    if (lv < 1 || lv > QT_MAX_TREE_LEVELS)
        return qt_cg_fail(err, errlen, "%lld sequences per step need %lld tree levels (1..%d)",
                          (long long)seqs, (long long)lv, QT_MAX_TREE_LEVELS);
    g->n_tree_levels = (int32_t)lv;
    /* Leaf scratch: the interpreter places one WGRAD op's parameter leaves back to back, so
     * it needs the largest per-op sum (not the two largest parameters overall) - over the
     * ops whose trees have more than one leaf: a tree's only leaf is even, and even leaves
     * are computed in place in level 0 (qt_tree.h). */
    int64_t leaf_need = 0;
    for (int i = 0; i < g->nmb; i++) {
        const qt_op *op = &g->mb[i];
        if (!(op->flags & QT_OPF_WGRAD) || qt_cg_tree_leaves(g, op->a[8]) < 2) continue;
        int64_t n = g->ps[op->a[8]].numel + (op->a[9] >= 0 ? g->ps[op->a[9]].numel : 0);
        if (n > leaf_need) leaf_need = n;
    }
    /* The microbatch tree's levels below its top only ever hold this rank's reduce block
     * of each range (the reduce-scatter leaves nothing else): compact, 1/|group| each. The
     * top level - the gradient region - is compact too when no rank needs more of the
     * gradient than its reduce blocks (every range's optimizer group is its reduction
     * group); else it stays whole, addressed by flat index. */
    g->mb_elems = 0;
    g->grads_compact = g->n_mb_levels > 0;
    for (int i = 0; i < g->n_ranges; i++) {
        g->ranges[i].mb_lo = g->mb_elems;
        g->mb_elems += g->ranges[i].n / qt_cg_group_size(g->s, g->ranges[i].reduce_mask);
        if (g->ranges[i].opt_mask != g->ranges[i].reduce_mask) g->grads_compact = 0;
    }
    int64_t at = flat0;
    for (int i = 0; i < QT_MAX_TREE_LEVELS; i++) {
        g->tree_offset[i] = i < lv ? at : 0;
        if (i < lv) at += ALIGN_UP(4 * qt_cg_tree_level_elems(g, i), (int64_t)QT_TENSOR_ALIGN);
    }
    g->grads_offset = g->tree_offset[lv - 1];
    g->leaf_scratch_offset = at;
    g->leaf_scratch_elems = ALIGN_UP(leaf_need, 16);
    g->comm_scratch_offset = ALIGN_UP(g->leaf_scratch_offset + 4 * g->leaf_scratch_elems,
                                      (int64_t)QT_TENSOR_ALIGN);
    g->comm_scratch_elems = g->s->n_ranks > 1 ? QT_CG_COMM_SCRATCH : 0;
    /* Checkpoint staging (multi-rank plans only, so one-rank plans keep their layout): the
     * largest parameter in its global layout, plus 16 floats for the gather's cover check
     * (firmware/runtime/ckpt_gather.c). */
    int64_t stage_need = 0;
    for (int p = 0; p < g->np; p++) {
        const qt_tensor *t = &g->ts[g->ps[p].tensor].t;
        int64_t gn = 1;
        for (int d = 0; d < t->ndim; d++) gn *= t->global_shape[d];
        if (gn > stage_need) stage_need = gn;
    }
    g->staging_offset = ALIGN_UP(g->comm_scratch_offset + 4 * g->comm_scratch_elems,
                                 (int64_t)QT_TENSOR_ALIGN);
    g->staging_elems = g->s->n_ranks > 1 ? ALIGN_UP(stage_need, 16) + 16 : 0;
    g->act_offset = ALIGN_UP(g->staging_offset + 4 * g->staging_elems,
                             (int64_t)QT_TENSOR_ALIGN);
    for (int p = 0; p < g->np; p++)
        g->ts[g->ps[p].tensor].t.offset = g->params_offset + 4 * g->ps[p].flat_offset;
    for (int i = 0; i < g->nt; i++)  /* parameters in gather windows: placed below */
        if (g->ts[i].alias_of >= 0) g->ts[i].t.offset = -1;

    /* activations */
    lifetimes(g);
    qt_cg_sortkey *order = qt_cg_alloc((size_t)g->nt * sizeof *order);
    int n = 0;
    for (int i = 0; i < g->nt; i++)
        if (planned(&g->ts[i])) order[n++] = (qt_cg_sortkey){bytes_of(&g->ts[i].t), i};
    qsort(order, (size_t)n, sizeof *order, cmp_size);
    qt_cg_iv *busy = qt_cg_alloc((size_t)(n ? n : 1) * sizeof *busy);
    int64_t *rel = qt_cg_alloc((size_t)g->nt * sizeof *rel);
    int64_t peak = 0;
    for (int a = 0; a < n; a++) {
        const qt_cg_tensor *t = &g->ts[order[a].id];
        int nb = 0;
        for (int b = 0; b < a; b++) {
            const qt_cg_tensor *u = &g->ts[order[b].id];
            if (overlap_life(t, u))
                busy[nb++] = (qt_cg_iv){rel[order[b].id], rel[order[b].id] + order[b].bytes};
        }
        qsort(busy, (size_t)nb, sizeof *busy, cmp_iv);
        int64_t cand = 0;
        for (int b = 0; b < nb; b++) {
            if (cand + order[a].bytes <= busy[b].lo) break;
            if (busy[b].hi > cand) cand = busy[b].hi;
        }
        rel[order[a].id] = cand;
        if (cand + order[a].bytes > peak) peak = cand + order[a].bytes;
        if (peak > ((int64_t)1 << 60)) {
            const char *nm = t->t.name;
            free(order);
            free(busy);
            free(rel);
            return qt_cg_fail(err, errlen, "the activations need more than 2^60 bytes (at %s), "
                              "where the arena's byte offsets would overflow; expected smaller "
                              "batch or model sizes", nm);
        }
    }
    for (int a = 0; a < n; a++) g->ts[order[a].id].t.offset = g->act_offset + rel[order[a].id];
    for (int i = 0; i < g->nt; i++)
        if (g->ts[i].alias_of >= 0)
            g->ts[i].t.offset = g->ts[g->ts[i].alias_of].t.offset + g->ts[i].alias_off;
    g->act_peak = peak;
    g->arena_bytes = ALIGN_UP(g->act_offset + peak, (int64_t)QT_ARENA_ALIGN);
    free(order);
    free(busy);
    free(rel);
    return 0;
}

int qt_cg_range_of(const qt_cg_graph *g, int p)
{
    for (int r = 0; r < g->n_ranges; r++)
        if (g->ps[p].flat_offset >= g->ranges[r].lo &&
            g->ps[p].flat_offset < g->ranges[r].lo + g->ranges[r].n)
            return r;
    return -1;
}

int64_t qt_cg_tree_leaves(const qt_cg_graph *g, int p)
{
    return g->n_mb_levels ? g->ps[p].leaves / g->s->tr.grad_accum : g->ps[p].leaves;
}

int qt_cg_tree_level_compact(const qt_cg_graph *g, int l)
{
    return qt_tree_level_compact(g->n_tree_levels, g->n_mb_levels, g->grads_compact, l);
}

int64_t qt_cg_tree_level_elems(const qt_cg_graph *g, int l)
{
    if (qt_cg_tree_level_compact(g, l)) return g->mb_elems;
    return l < g->n_tree_levels - g->n_mb_levels ? g->leaf_elems : g->n_flat;
}

/* The flat regions: the tree levels the step's leaf count needs, the gradient region being
 * the top one, and params, Adam moments, levels and leaf scratch pairwise disjoint, below
 * the activations. */
static int check_regions(const qt_cg_graph *g, char *err, size_t errlen)
{
    int64_t seqs = 0, lv = 0;
    const int64_t G = g->s->tr.grad_accum;
    for (int p = 0; p < g->np; p++) {
        const int64_t n = g->n_mb_levels ? g->ps[p].leaves / G : g->ps[p].leaves;
        if (n > seqs) seqs = n;
    }
    while (seqs >> lv) lv++;
    lv += g->n_mb_levels;
    if (g->n_tree_levels != lv || lv < 1 || lv > QT_MAX_TREE_LEVELS)
        return qt_cg_fail(err, errlen, "%d tree levels, %lld sequences per step need %lld",
                          g->n_tree_levels, (long long)seqs, (long long)lv);
    if (g->grads_offset != g->tree_offset[lv - 1])
        return qt_cg_fail(err, errlen, "gradient region at %lld is not the top tree level "
                          "(%lld)", (long long)g->grads_offset,
                          (long long)g->tree_offset[lv - 1]);
    enum { NREG = 6 + QT_MAX_TREE_LEVELS };
    int64_t lo[NREG], hi[NREG];
    const int64_t pb = 4 * g->n_flat, ab = 4 * g->adam_elems;
    const int64_t params_b = g->params_compact ? ab : pb;
    int64_t cover = 0, adam_sum = 0;
    for (int i = 0; i < g->n_ranges; i++) {
        const qt_flat_range *r = &g->ranges[i];
        if (r->lo != cover || r->n % (16 * qt_cg_group_size(g->s, r->reduce_mask)) ||
            (r->opt_mask & ~r->reduce_mask) || r->adam_lo != adam_sum)
            return qt_cg_fail(err, errlen, "flat range %d [%lld, +%lld) does not split over its "
                              "groups", i, (long long)r->lo, (long long)r->n);
        cover += r->n;
        adam_sum += r->n / qt_cg_group_size(g->s, r->opt_mask);
    }
    if (g->n_ranges < 1 || cover != g->n_flat || g->n_flat < g->n_param_elems ||
        adam_sum != g->adam_elems)
        return qt_cg_fail(err, errlen, "flat ranges cover %lld of %lld elements (Adam %lld of "
                          "%lld)", (long long)cover, (long long)g->n_flat, (long long)adam_sum,
                          (long long)g->adam_elems);
    int n = 0;
    lo[n] = g->params_offset, hi[n] = lo[n] + params_b, n++;
    lo[n] = g->adam_m_offset, hi[n] = lo[n] + ab, n++;
    lo[n] = g->adam_v_offset, hi[n] = lo[n] + ab, n++;
    lo[n] = g->leaf_scratch_offset, hi[n] = lo[n] + 4 * g->leaf_scratch_elems, n++;
    lo[n] = g->comm_scratch_offset, hi[n] = lo[n] + 4 * g->comm_scratch_elems, n++;
    lo[n] = g->staging_offset, hi[n] = lo[n] + 4 * g->staging_elems, n++;
    for (int l = 0; l < lv; l++)
        lo[n] = g->tree_offset[l], hi[n] = lo[n] + 4 * qt_cg_tree_level_elems(g, l), n++;
    for (int i = 0; i < n; i++) {
        if (lo[i] < 0 || lo[i] % QT_TENSOR_ALIGN || hi[i] > g->act_offset)
            return qt_cg_fail(err, errlen, "flat region [%lld, %lld) misaligned or not below "
                              "the activations (%lld)", (long long)lo[i], (long long)hi[i],
                              (long long)g->act_offset);
        for (int j = i + 1; j < n; j++)
            if (lo[i] < hi[j] && lo[j] < hi[i])
                return qt_cg_fail(err, errlen, "flat regions [%lld, %lld) and [%lld, %lld) "
                                  "overlap", (long long)lo[i], (long long)hi[i],
                                  (long long)lo[j], (long long)hi[j]);
    }
    return 0;
}

/* Per-layer reduction: every range is totalled, (reduce-scattered) and pushed exactly once
 * per microbatch, after the last WGRAD of its parameters; the leaf windows of two ranges
 * whose uses (first WGRAD .. push) overlap share no element. */
static int check_windows(const qt_cg_graph *g, char *err, size_t errlen)
{
    if (!g->layer_reduce) return 0;
    int64_t *live = qt_cg_alloc((size_t)(2 * g->n_ranges) * sizeof *live);
    int rc = 0;
    for (int r = 0; r < g->n_ranges; r++) live[2 * r] = live[2 * r + 1] = -1;
    for (int o = 0; o < g->nmb && !rc; o++) {
        const qt_op *op = &g->mb[o];
        if (op->kind == QT_OP_GRAD_MB_PUSH) {
            const int64_t r = op->a[0];
            if (op->a[1] != r + 1 || r < 0 || r >= g->n_ranges || live[2 * r + 1] >= 0)
                rc = qt_cg_fail(err, errlen, "microbatch op %d pushes ranges [%lld, %lld): "
                                "expected one range, once", o, (long long)op->a[0],
                                (long long)op->a[1]);
            else live[2 * r + 1] = o;
        }
        if (!(op->flags & QT_OPF_WGRAD)) continue;
        for (int k = 0; k < 2 && !rc; k++) {
            const int64_t pi = op->a[8 + k];
            if (pi < 0) continue;
            const int r = qt_cg_range_of(g, (int)pi);
            if (live[2 * r + 1] >= 0)
                rc = qt_cg_fail(err, errlen, "WGRAD op %d of %s runs after its range %d was "
                                "pushed", o, g->ps[pi].name, r);
            if (live[2 * r] < 0) live[2 * r] = o;
        }
    }
    for (int r = 0; r < g->n_ranges && !rc; r++) {
        if (live[2 * r + 1] < 0)
            rc = qt_cg_fail(err, errlen, "flat range %d is never pushed into the microbatch tree", r);
        for (int q = 0; q < r && !rc; q++) {
            const qt_flat_range *a = &g->ranges[q], *b = &g->ranges[r];
            if (live[2 * q] <= live[2 * r + 1] && live[2 * r] <= live[2 * q + 1] &&
                a->leaf_lo < b->leaf_lo + b->n && b->leaf_lo < a->leaf_lo + a->n)
                rc = qt_cg_fail(err, errlen, "the leaf windows of flat ranges %d and %d overlap "
                                "while both are in use", q, r);
        }
    }
    free(live);
    return rc;
}

int qt_cg_check_plan(const qt_cg_graph *g, char *err, size_t errlen)
{
    if (g->arena_bytes % QT_ARENA_ALIGN)
        return qt_cg_fail(err, errlen, "arena size %lld is not a multiple of 2 MiB",
                          (long long)g->arena_bytes);
    int rc = check_regions(g, err, errlen);
    if (!rc) rc = check_windows(g, err, errlen);
    if (rc) return rc;
    for (int i = 0; i < g->nt; i++) {
        const qt_tensor *t = &g->ts[i].t;
        int64_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
        if (n != t->numel)
            return qt_cg_fail(err, errlen, "tensor %s: numel %lld != product of shape %lld",
                              t->name, (long long)t->numel, (long long)n);
        if (t->offset % QT_TENSOR_ALIGN)
            return qt_cg_fail(err, errlen, "tensor %s: offset %lld not 64-byte aligned", t->name,
                              (long long)t->offset);
        if (t->offset < 0 || t->offset + t->numel * 4 > g->arena_bytes)
            return qt_cg_fail(err, errlen, "tensor %s: [%lld, +%lld) outside the arena", t->name,
                              (long long)t->offset, (long long)(t->numel * 4));
        if (planned(&g->ts[i]) && t->offset < g->act_offset)
            return qt_cg_fail(err, errlen, "tensor %s: below the activation region", t->name);
    }
    for (int p = 0; p < g->np; p++) {
        const qt_param *q = &g->ps[p];
        const qt_tensor *t = &g->ts[q->tensor].t;
        const qt_cg_tensor *ct = &g->ts[q->tensor];
        const int64_t want = ct->alias_of >= 0
            ? g->ts[ct->alias_of].t.offset + 4 * (q->flat_offset - g->ranges[qt_cg_range_of(g, p)].lo)
            : g->params_offset + 4 * q->flat_offset;
        if (t->offset != want || q->numel != t->numel)
            return qt_cg_fail(err, errlen, "param %s: not at its flat offset (or its place in its "
                              "gather window)", q->name);
        if (q->flat_offset % 16)
            return qt_cg_fail(err, errlen, "param %s: flat offset not 16-element aligned", q->name);
        for (int o = 0; o < p; o++) {
            const qt_param *u = &g->ps[o];
            if (q->flat_offset < u->flat_offset + u->numel && u->flat_offset < q->flat_offset + q->numel)
                return qt_cg_fail(err, errlen, "param %s overlaps %s", q->name, u->name);
        }
        if (q->flat_offset + q->numel > g->n_param_elems)
            return qt_cg_fail(err, errlen, "param %s outside the flat region", q->name);
        if (qt_cg_tree_leaves(g, p) > 1 && q->numel > g->leaf_scratch_elems)
            return qt_cg_fail(err, errlen, "param %s larger than the leaf scratch", q->name);
    }
    for (int i = 0; i < g->nt; i++) {
        const qt_cg_tensor *a = &g->ts[i];
        if (!planned(a)) continue;
        for (int j = i + 1; j < g->nt; j++) {
            const qt_cg_tensor *b = &g->ts[j];
            if (!planned(b) || !overlap_life(a, b)) continue;
            if (a->t.offset < b->t.offset + b->t.numel * 4 &&
                b->t.offset < a->t.offset + a->t.numel * 4)
                return qt_cg_fail(err, errlen, "tensors %s [ops %d..%d] and %s [ops %d..%d] are "
                                  "live together and share bytes", a->t.name, a->first, a->last,
                                  b->t.name, b->first, b->last);
        }
    }
    return 0;
}
