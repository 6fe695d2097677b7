/* interp.c - walks the init and microbatch schedules of a plan (see qt_interp.h).
 *
 * Invariants: ops run strictly in schedule order on one thread (between two ops, and between
 * the sequences of a weight gradient, the collectives in flight are progressed:
 * qt_coll_progress, docs/overlap.md); per-sequence weight
 * gradients are reduced only through qt_tree (never summed across sequences by a kernel),
 * so gradient bits depend only on the leaves and their count, not on the batch split; an
 * odd leaf of a writing kind is offered to its wrapper as a carry (qt_tree_carry), which
 * the kernel stores in its epilogue with qt_tree_push's additions, else it is pushed here;
 * before the first sequence a writing kind's wrapper is also offered every leaf of the op at
 * once (qt_wgrad_leaves: the loop's own dests and carries), and when it takes the offer the
 * loop ends there (the leaves' additions per element are the same, in the same order).
 * No heap: the level pointer table lives on the stack with a fixed bound. With units
 * (plan->grad_units q > 1: the step form on a mesh whose ranks hold a number of leaves that
 * is not a power of two) leaf i goes to unit i / U as leaf i % U of a tree whose top is that
 * unit's level, so every unit is a subtree of the one-rank tree (GRAD_UNITS folds them); the
 * microbatch form's units (grad_mb_units q) do the same with a microbatch's leaves and U per
 * parameter (the largest power of two dividing its leaves a microbatch T, q_p = T / U <= q
 * units: the routed experts' are E times the others'),
 * GRAD_MB_UNITS pushing them into the microbatch tree.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>
#include "qt_interp.h"
#include "qt_interp_bf16.h"
#include "qt_tree.h"
#include "qt_step.h"
#include "qt_err.h"
#include "comm/qt_coll.h"

static struct {
    uint8_t wgrad_uses[QT_INTERP_MAX_PARAMS];  /* validation scratch: WGRAD slots per param */
    qt_interp_prof *prof;                      /* NULL: no timing at all */
    qt_wgrad_leaves leaves;                    /* the all-leaves offer of qt_interp_wgrad */
} qt_interp_state;

void qt_interp_set_profile(qt_interp_prof *prof)
{
    qt_interp_state.prof = prof;
}

double qt_interp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Levels of the leaf tree: all of the plan's, or the first n_tree_levels - n_mb_levels
 * when a microbatch tree follows (qt_plan.h). */
static int qt_interp_leaf_levels(const qt_plan *p)
{
    return p->n_tree_levels - p->n_mb_levels;
}

/* Leaves of parameter pa's leaf tree: all its leaves of the step, or one microbatch's. */
static int64_t qt_interp_tree_leaves(const qt_plan *p, const qt_param *pa)
{
    return p->n_mb_levels > 0 ? pa->leaves / p->train.grad_accum : pa->leaves;
}

/* The level pointers of a tree over `leaves` leaves: its own levels are the top ones of
 * the leaf tree's, so that its top level is the leaf tree's top (the gradient region, or
 * the microbatch total) whatever its leaf count. */
static void qt_interp_levels(const qt_plan *p, int64_t leaves, float **levels)
{
    const int nl = qt_interp_leaf_levels(p);
    const int shift = nl - qt_tree_levels_needed(leaves);
    for (int l = 0; l < QT_MAX_TREE_LEVELS; l++) {
        const int g = l + (shift > 0 ? shift : 0);
        levels[l] = g < nl ? (float *)(void *)(p->arena + p->tree_offset[g]) : NULL;
    }
}

/* Units a rank and reduction (the step form's grad_units q > 1, the microbatch form's
 * grad_mb_units q >= 1), or 0: the top q leaf-tree levels are then the unit levels. */
static int qt_interp_units(const qt_plan *p)
{
    return p->grad_units > 1 ? p->grad_units : p->grad_mb_units > 0 ? p->grad_mb_units : 0;
}

/* The leaves of one unit of parameter pa with T leaves a microbatch (qt_plan.h
 * qt_plan_unit_leaves over its range's holding axes). */
static int64_t qt_interp_unit_leaves(const qt_plan *p, const qt_param *pa, int64_t T)
{
    const int32_t r = qt_plan_range_of(p, pa->flat_offset);
    return qt_plan_unit_leaves(p, T, r >= 0 ? p->ranges[r].hold_mask : 0u);
}

/* The level pointers of a units' tree of U leaves (U a power of two): levels 0 .. log2(U)-1
 * are the plan's, level log2(U) is set per leaf (its unit's level), the rest NULL. */
static void qt_interp_unit_levels(const qt_plan *p, int64_t U, float **levels)
{
    const int lu = qt_tree_levels_needed(U) - 1;
    for (int l = 0; l < QT_MAX_TREE_LEVELS; l++)
        levels[l] = l < lu ? (float *)(void *)(p->arena + p->tree_offset[l]) : NULL;
}

/* Op i of schedule `sched` (in_mb: the microbatch schedule) against the table and the
 * kernels' limits. */
static int qt_interp_check_op(const qt_plan *p, const qt_kernel_entry *table, const qt_op *op,
                              int32_t i, const char *sched, int in_mb)
{
    if (op->kind >= QT_OP_COUNT) {
        return qt_fail(QT_E_PLAN, "plan %s: %s op %d has kind %u (>= %d)", p->run_name, sched, i,
                       op->kind, QT_OP_COUNT);
    }
    if (qt_op_inert(op->kind)) return QT_OK;
    int is_w = (op->flags & QT_OPF_WGRAD) != 0;
    /* STEP ops inside the microbatch schedule: per-layer reduction (qt_plan.h), or the
     * previous microbatch's split reduce-scatter (QT_OPF_PREV_MB, validate_mb.c) */
    if (!is_w && table[op->kind].step && (p->layer_reduce || (op->flags & QT_OPF_PREV_MB)) &&
        in_mb)
        return QT_OK;
    if ((is_w && !table[op->kind].wgrad) || (!is_w && !table[op->kind].run)) {
        return qt_fail(QT_E_PLAN, "plan %s: %s op %d (%s) has no %s wrapper", p->run_name, sched, i,
                       table[op->kind].name ? table[op->kind].name : "?", is_w ? "wgrad" : "run");
    }
    /* the kind's own check (qt_ops.def CHECK): kernel limits a kernel cannot report from
     * inside a step */
    qt_check_state cs;
    memset(&cs, 0, sizeof cs);
    if (table[op->kind].check && table[op->kind].check(p, op, &cs)) {
        return qt_fail(QT_E_PLAN, "plan %s: %s op %d: %s", p->run_name, sched, i, cs.why);
    }
    for (int k = 0; k < QT_OP_MAX_T; k++) {
        if (op->t[k] != QT_NONE && (op->t[k] < 0 || op->t[k] >= p->n_tensors)) {
            return qt_fail(QT_E_PLAN, "plan %s: %s op %d slot t%d = %d is not a tensor id",
                           p->run_name, sched, i, k, op->t[k]);
        }
    }
    return QT_OK;
}

/* The tree levels a plan needs (its leaf levels, the step or microbatch form's units, and
 * its microbatch levels) into *mbl_out / *need_out, and the widest leaf count into
 * *leaves_out; QT_E_PLAN when the plan's units do not fit its parameters. */
static int qt_interp_levels_needed(const qt_plan *p, int *mbl_out, int *need_out,
                                   int64_t *leaves_out)
{
    int64_t leaves = 0;
    for (int32_t i = 0; i < p->n_params; i++)
        if (qt_interp_tree_leaves(p, &p->params[i]) > leaves)
            leaves = qt_interp_tree_leaves(p, &p->params[i]);
    int mbl = p->n_mb_levels > 0 ? qt_tree_levels_needed(p->train.grad_accum) : 0;
    int need = qt_tree_levels_needed(leaves) + mbl;
    if (p->grad_units > 1) {
        /* units (step form): q of U leaves, every parameter's tree over all L = q U */
        const int64_t U = leaves / p->grad_units;
        for (int32_t i = 0; i < p->n_params; i++)
            if (qt_interp_tree_leaves(p, &p->params[i]) != leaves)
                return qt_fail(QT_E_PLAN, "plan %s: grad_units needs every parameter's tree "
                               "over the same leaves", p->run_name);
        if (mbl || U < 1 || U * p->grad_units != leaves || (U & (U - 1)) ||
            (leaves / U) % 2 == 0)
            return qt_fail(QT_E_PLAN, "plan %s: grad_units %d does not fit %lld leaves per step",
                           p->run_name, p->grad_units, (long long)leaves);
        need = qt_tree_levels_needed(U) - 1 + p->grad_units;
    }
    if (p->grad_mb_units > 0) {
        /* units (microbatch form): every parameter's T_p leaves a microbatch q units of a
         * power of two U_p; levels: log2 max U_p, the q unit levels, and the counter over the
         * step's G R q units (R the batch group; a range's reduce group is checked by its
         * GRAD_MB_UNITS) */
        const int64_t q = p->grad_mb_units;
        int64_t umax = 1, qmax = 1, cmax = 1;
        for (int32_t i = 0; i < p->n_params; i++) {
            const int64_t T = qt_interp_tree_leaves(p, &p->params[i]),
                          U = qt_interp_unit_leaves(p, &p->params[i], T);
            if (T < 1 || T / U > q)
                return qt_fail(QT_E_PLAN, "plan %s: grad_mb_units %d does not fit parameter %s's "
                               "%lld leaves a microbatch", p->run_name, p->grad_mb_units,
                               p->params[i].name, (long long)T);
            if (U > umax) umax = U;
            if (T / U > qmax) qmax = T / U;
        }
        for (int32_t i = 0; i < p->n_ranges; i++) {
            int64_t cnt;
            (void)qt_plan_range_mb_units(p, i, &cnt);
            if (cnt > cmax) cmax = cnt;
        }
        if (!mbl || p->grad_units > 1 || qmax != q)
            return qt_fail(QT_E_PLAN, "plan %s: grad_mb_units %d without the microbatch form, "
                           "with the step form's units, or not the most units of a parameter "
                           "(%lld)", p->run_name, p->grad_mb_units, (long long)qmax);
        mbl = qt_tree_levels_needed(cmax);
        need = qt_tree_levels_needed(umax) - 1 + (int)q + mbl;
    }
    *mbl_out = mbl;
    *need_out = need;
    *leaves_out = leaves;
    return QT_OK;
}

int qt_interp_validate(const qt_plan *p, const qt_kernel_entry *table)
{
    int rc = QT_OK;
    for (int32_t i = 0; i < p->n_init_ops && !rc; i++)
        rc = qt_interp_check_op(p, table, &p->init_ops[i], i, "init", 0);
    for (qt_mb_cursor c = qt_mb_begin(p); !rc && qt_mb_next(&c);)
        rc = qt_interp_check_op(p, table, c.op, c.logical, "microbatch", 1);
    if (rc) return rc;
    if (p->n_params < 0 || p->n_params > QT_INTERP_MAX_PARAMS) {
        return qt_fail(QT_E_PLAN,
                       "plan %s: %d params (firmware limit %d)", p->run_name, p->n_params,
                       QT_INTERP_MAX_PARAMS);
    }
    int mbl = 0, need = 0;
    int64_t leaves = 0;
    rc = qt_interp_levels_needed(p, &mbl, &need, &leaves);
    if (rc) return rc;
    /* exactly: the gradient region is the top level, which only the last carry fills */
    if (p->n_mb_levels < 0 || p->n_mb_levels != mbl || p->n_tree_levels != need ||
        need > QT_MAX_TREE_LEVELS) {
        return qt_fail(QT_E_PLAN,
                       "plan %s: %d tree levels (%d of microbatches), %lld leaves per tree "
                       "and %lld microbatches need exactly %d (max %d)", p->run_name,
                       p->n_tree_levels, p->n_mb_levels, (long long)leaves,
                       (long long)p->train.grad_accum, need, QT_MAX_TREE_LEVELS);
    }
    if (p->grads_offset != p->tree_offset[need - 1]) {
        return qt_fail(QT_E_PLAN,
                       "plan %s: gradient region at byte %lld is not the top tree level (level "
                       "%d at byte %lld)", p->run_name, (long long)p->grads_offset, need - 1,
                       (long long)p->tree_offset[need - 1]);
    }
    /* the leaf-tree levels: every parameter inside them, at its flat offset unless the plan
     * reduces per layer (windows, qt_plan.h) */
    for (int32_t i = 0; i < p->n_params; i++) {
        const qt_param *pa = &p->params[i];
        if (pa->leaf_offset < 0 || pa->numel > p->leaf_elems ||
            pa->leaf_offset > p->leaf_elems - pa->numel ||
            (!p->layer_reduce && pa->leaf_offset != pa->flat_offset)) {
            return qt_fail(QT_E_PLAN,
                           "plan %s: parameter %s at leaf-tree offset %lld (+%lld) outside the "
                           "%lld-float leaf levels, or not at its flat offset %lld", p->run_name,
                           pa->name, (long long)pa->leaf_offset, (long long)pa->numel,
                           (long long)p->leaf_elems, (long long)pa->flat_offset);
        }
    }
    if (p->layer_reduce && p->n_mb_levels < 1) {
        return qt_fail(QT_E_PLAN,
                       "plan %s: per-layer reduction without a microbatch tree", p->run_name);
    }
    memset(qt_interp_state.wgrad_uses, 0, sizeof qt_interp_state.wgrad_uses);
    for (qt_mb_cursor c = qt_mb_begin(p); qt_mb_next(&c);) {
        const qt_op *op = c.op;
        const int32_t i = c.logical;
        if (!(op->flags & QT_OPF_WGRAD)) continue;
        const int64_t per_mb =
            op->a[QT_A_WGRAD_SEQS] > 0 ? op->a[QT_A_WGRAD_SEQS] : qt_plan_leaves_per_mb(p);
        int64_t need_scratch = 0;
        for (int k = 0; k < 2; k++) {
            int64_t pi = op->a[QT_A_WGRAD_PARAM + k];
            if (k == 1 && pi == -1) break;
            if (pi < 0 || pi >= p->n_params) {
                return qt_fail(QT_E_PLAN,
                               "plan %s: WGRAD op %d (%s) a%d = %lld is not a parameter index",
                               p->run_name, i, table[op->kind].name, 8 + k, (long long)pi);
            }
            if (qt_interp_state.wgrad_uses[pi] < 255) qt_interp_state.wgrad_uses[pi]++;
            need_scratch += p->params[pi].numel;
            if (p->params[pi].leaves != per_mb * p->train.grad_accum) {
                return qt_fail(QT_E_PLAN,
                               "plan %s: parameter %s has %lld leaves per step, its WGRAD op %d "
                               "makes %lld", p->run_name, p->params[pi].name,
                               (long long)p->params[pi].leaves, i,
                               (long long)(per_mb * p->train.grad_accum));
            }
        }
        /* a tree with one leaf per microbatch never uses the scratch (leaf 0 is even) */
        if (need_scratch > p->leaf_scratch_elems &&
            qt_interp_tree_leaves(p, &p->params[op->a[QT_A_WGRAD_PARAM]]) > 1) {
            return qt_fail(QT_E_PLAN,
                           "plan %s: WGRAD op %d needs %lld leaf scratch floats, plan has %lld",
                           p->run_name, i, (long long)need_scratch,
                           (long long)p->leaf_scratch_elems);
        }
    }
    for (int32_t pi = 0; pi < p->n_params; pi++) {
        if (qt_interp_state.wgrad_uses[pi] != 1) {
            return qt_fail(QT_E_PLAN,
                           "plan %s: parameter %s is named by %u WGRAD ops (expected exactly 1)",
                           p->run_name, p->params[pi].name, qt_interp_state.wgrad_uses[pi]);
        }
    }
    return QT_OK;
}

void qt_interp_run_init(const qt_ctx *ctx, const qt_kernel_entry *table)
{
    const qt_plan *p = ctx->plan;
    for (int32_t i = 0; i < p->n_init_ops; i++) {
        const qt_op *op = &p->init_ops[i];
        if (!qt_op_inert(op->kind)) qt_interp_call_run(&table[op->kind], op, ctx);
    }
}

/* Advance the collectives in flight (qt_ops.def COLL_START) between two ops: no cost when
 * none is; a failure stops the step as a failed collective op does. */
static void qt_interp_progress(const qt_ctx *ctx)
{
    const int rc = qt_coll_progress();
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
}

/* Offers the wrapper of a writing kind the carry of odd leaf `leaf` (qt_leaf_carry.h) for
 * each of its parameters (pb may be NULL): wctx->wgrad_epi = epi, or NULL when there is
 * nothing to offer (an even leaf, which the kernel writes into level 0 itself, or a kind
 * that accumulates into a zeroed leaf). The wrapper marks what it applied in epi->done. */
static void qt_interp_offer_carry(float *const *levels, const qt_param *pa, const qt_param *pb,
                                  int64_t leaf, int writes, qt_leaf_carry cy[2],
                                  qt_wgrad_epi *epi, qt_ctx *wctx)
{
    memset(epi, 0, sizeof *epi);
    wctx->wgrad_epi = NULL;
    if (!writes || !qt_tree_carry(levels, pa->leaf_offset, leaf, &cy[0])) return;
    epi->carry[0] = &cy[0];
    if (pb && qt_tree_carry(levels, pb->leaf_offset, leaf, &cy[1])) epi->carry[1] = &cy[1];
    wctx->wgrad_epi = epi;
}

/* The all-leaves offer (qt_leaf_carry.h) of a writing kind's op: for s = 0..per_mb-1 the
 * leaf numbers, unit levels and carries the per-sequence loop below computes, in its
 * order (levels[ul] moved per leaf as there; the loop sets it again before each use). NULL
 * (no offer) for one leaf, or more than QT_WGRAD_LEAVES_MAX. */
static qt_wgrad_leaves *qt_interp_leaves(const qt_plan *p, const qt_param *pa, const qt_param *pb,
                                         float **levels, int64_t per_mb, int64_t mb, int64_t U,
                                         int lu, int ul)
{
    qt_wgrad_leaves *all = &qt_interp_state.leaves;
    if (per_mb < 2 || per_mb > QT_WGRAD_LEAVES_MAX) return NULL;
    memset(all, 0, sizeof *all);
    all->n = (int32_t)per_mb;
    for (int64_t s = 0; s < per_mb; s++) {
        int64_t leaf = p->n_mb_levels > 0 ? s : mb * per_mb + s;
        if (U) {
            levels[ul] = (float *)(void *)(p->arena + p->tree_offset[lu + leaf / U]);
            leaf %= U;
        }
        if (qt_tree_carry(levels, pa->leaf_offset, leaf, &all->carry[s][0])) {
            all->carried[s] = 1;
            if (pb) (void)qt_tree_carry(levels, pb->leaf_offset, leaf, &all->carry[s][1]);
        } else { /* an even leaf: computed in level 0 (qt_tree_leaf_dest) */
            all->dw[s][0] = qt_tree_leaf_dest(levels, pa->leaf_offset, NULL, leaf);
            if (pb) all->dw[s][1] = qt_tree_leaf_dest(levels, pb->leaf_offset, NULL, leaf);
        }
    }
    return all;
}

/* A padded sequence's leaf (issue 35): -0.0 in every element, the identity of the tree's
 * additions (x + -0.0 is x for every x, -0.0 included), so the tree over the real leaves
 * followed by padded ones is the one-rank tree over the real leaves, bit for bit
 * (docs/determinism.md "Padded sequences"); pushed as the loop below pushes a leaf. */
static void qt_interp_pad_leaf(float **levels, const qt_param *pa, float *scratch, int64_t leaf)
{
    float *dw = qt_tree_leaf_dest(levels, pa->leaf_offset, scratch, leaf);
    for (int64_t i = 0; i < pa->numel; i++) dw[i] = -0.0f;
    qt_tree_push(levels, pa->leaf_offset, pa->numel, scratch, leaf);
}

static void qt_interp_wgrad(const qt_plan *p, const qt_kernel_entry *table, const qt_op *op,
                            const qt_ctx *ctx, int64_t mb, int64_t pads)
{
    float *scratch = (float *)(void *)(p->arena + p->leaf_scratch_offset);
    const qt_param *pa = &p->params[op->a[QT_A_WGRAD_PARAM]];
    const qt_param *pb =
        op->a[QT_A_WGRAD_PARAM + 1] >= 0 ? &p->params[op->a[QT_A_WGRAD_PARAM + 1]] : NULL;
    const int writes = (table[op->kind].props & QT_OPP_WGRAD_WRITES) != 0;
    qt_interp_prof *prof = qt_interp_state.prof;
    double t0 = 0.0, t1 = 0.0, t2 = 0.0;
    /* leaves per microbatch: this rank's token blocks (micro_batch x context_blocks), or
     * every block of an expert group's sequences */
    const int64_t per_mb =
        op->a[QT_A_WGRAD_SEQS] > 0 ? op->a[QT_A_WGRAD_SEQS] : qt_plan_leaves_per_mb(p);
    float *levels[QT_MAX_TREE_LEVELS];
    qt_interp_levels(p, qt_interp_tree_leaves(p, pa), levels);
    /* units (q = qt_interp_units): leaf i is leaf i % U of unit i / U's tree (U = the largest
     * power of two dividing this parameter's leaves), whose levels are the first log2 U and whose top is unit level
     * i / U (the leaf tree's level lu + i / U) */
    const int q = qt_interp_units(p);
    const int64_t T = qt_interp_tree_leaves(p, pa), U = q ? qt_interp_unit_leaves(p, pa, T) : 0;
    const int lu = qt_interp_leaf_levels(p) - q, ul = U ? qt_tree_levels_needed(U) - 1 : 0;
    if (U) qt_interp_unit_levels(p, U, levels);
    qt_stage_map map;
    qt_ctx wctx;
    qt_interp_wgrad_ctx(&table[op->kind], op, ctx, &map, &wctx);
    /* padded sequences (pads > 0, the last of the microbatch): their leaves from `real` on,
     * each sequence's blocks contiguous. Without expert parallelism (validate.c refuses
     * padding with it) an op's leaves are its own group's micro_batch sequences in
     * (sequence, block) order, the expert group's and the head side's included (one
     * member, or every block of the sequences: autodiff.c) */
    const int64_t real = pads > 0 ? per_mb - pads * (per_mb / p->train.micro_batch) : per_mb;
    qt_wgrad_leaves *all = writes && real == per_mb
                               ? qt_interp_leaves(p, pa, pb, levels, per_mb, mb, U, lu, ul)
                               : NULL;
    for (int64_t s = 0; s < per_mb; s++) {
        /* one tree over the step's leaves, or one per microbatch */
        int64_t leaf = p->n_mb_levels > 0 ? s : mb * per_mb + s;
        if (U) {
            levels[ul] = (float *)(void *)(p->arena + p->tree_offset[lu + leaf / U]);
            leaf %= U;
        }
        if (s >= real) {
            qt_interp_pad_leaf(levels, pa, scratch, leaf);
            if (pb) qt_interp_pad_leaf(levels, pb, scratch + pa->numel, leaf);
            continue;
        }
        float *dw[2] = {NULL, NULL};
        qt_leaf_carry cy[2];
        qt_wgrad_epi epi;
        if (prof) t0 = qt_interp_now();
        qt_interp_offer_carry(levels, pa, pb, leaf, writes, cy, &epi, &wctx);
        if (s == 0 && all) { /* every leaf at once, if the wrapper can */
            epi.leaves = all;
            wctx.wgrad_epi = &epi;
        }
        dw[0] = qt_tree_leaf_dest(levels, pa->leaf_offset, scratch, leaf);
        if (!writes) memset(dw[0], 0, (size_t)pa->numel * sizeof(float));
        if (pb) {
            dw[1] = qt_tree_leaf_dest(levels, pb->leaf_offset, scratch + pa->numel, leaf);
            if (!writes)
                memset(dw[1], 0, (size_t)pb->numel * sizeof(float));
        }
        if (prof) t1 = qt_interp_now();
        table[op->kind].wgrad(op, &wctx, s, dw);
        qt_interp_progress(ctx);
        if (prof) t2 = qt_interp_now();
        if (s == 0 && all && all->done) { /* every leaf is in the tree already */
            if (prof) {
                prof->leaf_zero_s += t1 - t0;
                prof->wgrad_s[op->kind] += t2 - t1;
                prof->wgrad_calls[op->kind] += per_mb;
            }
            return;
        }
        /* a leaf whose carry the kernel stored is in the tree already */
        if (!epi.done[0]) qt_tree_push(levels, pa->leaf_offset, pa->numel, scratch, leaf);
        if (pb && !epi.done[1])
            qt_tree_push(levels, pb->leaf_offset, pb->numel, scratch + pa->numel, leaf);
        if (prof) {
            double t3 = qt_interp_now();
            prof->leaf_zero_s += t1 - t0;
            prof->wgrad_s[op->kind] += t2 - t1;
            prof->wgrad_calls[op->kind]++;
            prof->tree_push_s += t3 - t2;
        }
    }
}

void qt_interp_run_microbatch(const qt_ctx *c, const qt_kernel_entry *table, int64_t mb,
                              qt_step_state *st)
{
    qt_interp_run_range(c, table, 0, INT64_MAX, mb, st);  /* every op, scans unrolled */
}

void qt_interp_run_range(const qt_ctx *c, const qt_kernel_entry *table, int64_t lo, int64_t hi,
                         int64_t mb, qt_step_state *st)
{
    const qt_plan *p = c->plan;
    const qt_ctx ctx = *c;
    qt_interp_prof *prof = qt_interp_state.prof;
    for (qt_mb_cursor cur = qt_mb_begin(p); qt_mb_next(&cur) && cur.logical < hi;) {
        const qt_op *op = cur.op;
        if (cur.logical < lo || qt_op_inert(op->kind)) continue;
        /* the previous microbatch's split reduce-scatter: none before microbatch 0 */
        if ((op->flags & QT_OPF_PREV_MB) && mb == 0) continue;
        if (ctx.status && *ctx.status) return;  /* a collective failed: the step stops */
        if (op->flags & QT_OPF_WGRAD) {
            qt_interp_wgrad(p, table, op, &ctx, mb, st ? st->pads : 0);
        } else if (table[op->kind].step) {
            /* per-layer reduction: a range's total, its reduce-scatter, its push; or the
             * previous microbatch's wait and push (QT_OPF_PREV_MB) */
            double t0 = prof ? qt_interp_now() : 0.0;
            qt_step_state prev, *sp = st;
            if (op->flags & QT_OPF_PREV_MB) {
                prev = *st;
                prev.mb = mb - 1;
                sp = &prev;
            }
            int rc = table[op->kind].step(op, &ctx, sp);
            if (rc && ctx.status) *ctx.status = rc;
            if (rc) return;
            if (prof) {
                prof->run_s[op->kind] += qt_interp_now() - t0;
                prof->run_calls[op->kind]++;
            }
        } else if (prof) {
            double t0 = qt_interp_now();
            qt_interp_call_run(&table[op->kind], op, &ctx);
            prof->run_s[op->kind] += qt_interp_now() - t0;
            prof->run_calls[op->kind]++;
        } else {
            qt_interp_call_run(&table[op->kind], op, &ctx);
        }
        qt_interp_progress(&ctx);
    }
}

void qt_interp_run_forward(const qt_ctx *c, const qt_kernel_entry *table, int64_t n_ops,
                           qt_step_state *st)
{
    qt_interp_run_forward_range(c, table, 0, n_ops, st);
}

void qt_interp_run_forward_range(const qt_ctx *c, const qt_kernel_entry *table, int64_t lo,
                                 int64_t hi, qt_step_state *st)
{
    const qt_ctx ctx = *c;
    for (qt_mb_cursor cur = qt_mb_begin(c->plan); qt_mb_next(&cur) && cur.logical < hi;) {
        const qt_op *op = cur.op;
        if (cur.logical < lo || qt_op_inert(op->kind) ||
            (op->flags & (QT_OPF_WGRAD | QT_OPF_PREV_MB)))
            continue;
        if (ctx.status && *ctx.status) return;  /* a collective failed: the eval stops */
        if (table[op->kind].step) {
            int rc = table[op->kind].step(op, &ctx, st);
            if (rc && ctx.status) *ctx.status = rc;
            if (rc) return;
        } else {
            qt_interp_call_run(&table[op->kind], op, &ctx);
        }
        qt_interp_progress(&ctx);
    }
}

void qt_interp_finalize_grads_range(const qt_plan *p, int64_t off, int64_t n)
{
    float *levels[QT_MAX_TREE_LEVELS];
    qt_interp_levels(p, qt_plan_leaves_per_mb(p) * p->train.grad_accum, levels);
    qt_tree_finalize_range(levels, off, n, qt_plan_leaves_per_mb(p) * p->train.grad_accum);
}

void qt_interp_finalize_grads(const qt_plan *p, int64_t lo, int64_t hi)
{
    float *levels[QT_MAX_TREE_LEVELS];
    for (int32_t i = 0; i < p->n_params; i++) {
        const qt_param *pa = &p->params[i];
        if (pa->flat_offset < lo || pa->flat_offset >= hi) continue;
        const int64_t n = qt_interp_tree_leaves(p, pa);
        qt_interp_levels(p, n, levels);
        qt_tree_finalize_range(levels, pa->leaf_offset, pa->numel, n);
    }
}
