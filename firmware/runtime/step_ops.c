/* step_ops.c - the STEP wrappers of qt_ops.def: what runs after each microbatch (the
 * microbatch-end schedule of mesh plans: leaf-tree totals, their reduce-scatter, the push
 * into the microbatch tree) and once per optimizer step after the last microbatch
 * (gradient totals, collectives, normalisation and norm, AdamW; GRAD_UNITS: the step
 * form's units exchanged and folded in the one-rank tree's shape; GRAD_MB_UNITS: the
 * microbatch form's units exchanged and pushed into a counter over the step's units, or
 * split: GRAD_MB_UNITS_START starts the exchange beside the next microbatch's forward and
 * GRAD_MB_UNITS_WAIT completes and pushes it), see qt_step.h.
 *
 * Invariants: no heap, no syscalls but the collectives' own; the parameter-sized passes
 * are fused (tree total per cache-sized chunk -> normalise + exact square sum in one pass;
 * clip + AdamW + fingerprint in one pass), each stage keeping the exact per-element
 * operations of the unfused version, so fusion changes speed, never bits. When ADAMW runs
 * right after the normalising op (GRAD_FINALIZE / GRAD_NORMALISE: every shipped step
 * schedule), the normalising pass squares the quotients g / n_tokens without storing them
 * and the update computes the same quotients as it reads g (qt_adamw_hp_divide): one write
 * of the gradient less, the same bits; the gradient region then ends the step holding the
 * gradient sum, not the normalised gradient (the grads-only walk still stores that). A rank
 * works on its blocks of each flat range (qt_step_block); padding elements between and
 * after the parameters hold zeros, so normalising, squaring or updating them changes
 * nothing, and the fingerprint visits parameter elements only. Collectives that fail (a
 * silent peer) return their QT_E_COMM code up the walk; nothing here exits.
 */
#include <stdio.h>
#include <string.h>
#include "qt_step.h"
#include "qt_pipeline.h"
#include "ops/qt_op_fns.h"
#include "qt_blocks.h"
#include "qt_interp.h"
#include "qt_tree.h"
#include "qt_optim.h"
#include "qt_rng.h"
#include "qt_runtime.h"
#include "qt_err.h"
#include "comm/qt_coll.h"
#include "math/qt_math.h"
#include "kernels/bf16.h"

/* Chunk of the fused passes over the parameter-sized regions: 64 KiB per stream, so a
 * chunk written by one stage is still in L2 when the next stage reads it. */
#define QT_STEP_CHUNK 16384
/* Largest group whose exact accumulators are merged through a static buffer. */
#define QT_STEP_MAX_GROUP 1024

static struct {
    int flat_in_order;           /* params lie in [0, n_param_elems) in index order, apart
                                  * (zero padding may sit between them) */
    qt_exact_sq sq;              /* bins of the squared-norm pass */
    qt_exact gathered[QT_STEP_MAX_GROUP];
} qt_step_s;

static float *qt_step_region(const qt_plan *p, int64_t off)
{
    return (float *)(void *)(p->arena + off);
}

void qt_step_init(const qt_plan *p)
{
    int64_t cursor = 0;
    int in_order = 1;
    for (int32_t i = 0; i < p->n_params && in_order; i++) {
        in_order = p->params[i].flat_offset >= cursor;
        cursor = p->params[i].flat_offset + p->params[i].numel;
    }
    qt_step_s.flat_in_order = in_order && cursor <= p->n_param_elems;
}

/* Whether this rank's block of range r is the one copy counted in world-wide sums (the
 * norm, the fingerprint): ranks that hold the same block differ only on axes outside the
 * range's optimizer and holding axes; the one with coordinate 0 on all of them counts. */
static int qt_step_primary(const qt_ctx *ctx, const qt_flat_range *r)
{
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (!((r->opt_mask | r->hold_mask) & (1u << a)) && ctx->coord[a] != 0) return 0;
    return 1;
}

int qt_step_exact_merge(unsigned mask, qt_exact *a)
{
    const int r = mask ? qt_comm_group_size(mask) : 1;
    if (r <= 1) return QT_OK;
    if (r > QT_STEP_MAX_GROUP)
        return qt_fail(QT_E_PLAN, "exact merge over a group of %d ranks (limit %d)", r,
                       QT_STEP_MAX_GROUP);
    const int me = qt_comm_group_index(mask);
    qt_step_s.gathered[me] = *a;
    int rc = qt_coll_all_gather(mask, qt_step_s.gathered, (int64_t)sizeof(qt_exact));
    if (rc) return rc;
    qt_exact_clear(a);
    for (int i = 0; i < r; i++) qt_exact_merge(a, &qt_step_s.gathered[i]);
    return QT_OK;
}

/* Divide the gradient elements flat [lo, lo+n), which sit at g, by n_tok and add their
 * squares to *sq, per chunk; with `tree_total` the chunk's tree total is completed first
 * (one-rank fused path); with `keep` the quotients are squared but not stored (the update
 * divides: qt_adamw_hp_divide). */
static void qt_step_normalise_range(const qt_plan *p, float *g, int64_t lo, int64_t n,
                                    float n_tok, int tree_total, int keep, qt_exact *sq)
{
    qt_exact_sq_clear(&qt_step_s.sq);
    for (int64_t j = 0; j < n; j += tree_total ? QT_STEP_CHUNK : n) {
        int64_t c = !tree_total || n - j < QT_STEP_CHUNK ? n - j : QT_STEP_CHUNK;
        if (tree_total) qt_interp_finalize_grads_range(p, lo + j, c);
        if (keep) qt_grads_sumsq_quot(g + j, c, n_tok, &qt_step_s.sq, sq);
        else qt_grads_normalise_sumsq(g + j, c, n_tok, &qt_step_s.sq, sq);
    }
    qt_exact_sq_flush(&qt_step_s.sq, sq);
}

/* The gradient's normaliser: the op's token count (the global batch's targets), or the
 * step's count of targets with a loss when packed documents mask some (at least 1). */
static float qt_step_tokens(const qt_plan *p, int64_t tokens, const qt_step_state *st)
{
    if (!p->packing) return (float)tokens;
    return st->m->loss_tokens > 1 ? (float)st->m->loss_tokens : 1.0f;
}

int qt_step_grad_finalize(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    qt_exact sq;
    qt_exact_clear(&sq);
    const float n_tok = qt_step_tokens(p, op->a[QT_A_GRAD_FINALIZE_tokens], st);
    qt_step_normalise_range(p, qt_step_region(p, p->grads_offset), 0, p->n_param_elems, n_tok,
                            1, st->update_next, &sq);
    st->gdiv = st->update_next ? n_tok : 0.0f;
    /* a pipeline stage: the squares of every stage's parameters, exactly */
    int rc = qt_pp_exact_merge(p, &sq);
    if (rc) return rc;
    st->m->grad_norm = qt_sqrt(qt_exact_value(&sq));
    return QT_OK;
}

int qt_step_grad_tree_total(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    (void)op;
    (void)st;
    qt_interp_finalize_grads(ctx->plan, 0, ctx->plan->n_flat);
    return QT_OK;
}

/* Zeroes the elements of range i in the tree level at `level` (addressed by leaf offset)
 * that no parameter covers: per-layer reduction, the leaf tree's top level (its window held
 * another range's values before); units (GRAD_UNITS), each unit level (a kernel's vector
 * tail may store past a small parameter into the padding of the level it writes, harmless
 * where only parameter elements are carried on, not where the whole level is exchanged).
 * The parameters of a range have increasing flat offsets in index order (checked at
 * start-up, runtime.c). */
static void qt_step_zero_gaps_at(const qt_plan *p, int32_t i, float *level)
{
    const qt_flat_range *r = &p->ranges[i];
    int64_t cursor = r->leaf_lo;
    for (int32_t k = 0; k < p->n_params; k++) {
        const qt_param *pa = &p->params[k];
        if (pa->flat_offset < r->lo || pa->flat_offset >= r->lo + r->n) continue;
        if (pa->leaf_offset > cursor)
            memset(level + cursor, 0, (size_t)(pa->leaf_offset - cursor) * sizeof(float));
        cursor = pa->leaf_offset + pa->numel;
    }
    if (r->leaf_lo + r->n > cursor)
        memset(level + cursor, 0, (size_t)(r->leaf_lo + r->n - cursor) * sizeof(float));
}

static void qt_step_zero_gaps(const qt_plan *p, int32_t i)
{
    qt_step_zero_gaps_at(p, i,
                         qt_step_region(p, p->tree_offset[p->n_tree_levels - p->n_mb_levels - 1]));
}

int qt_step_grad_units(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    const qt_flat_range *r = &p->ranges[QT_A(op, GRAD_UNITS, range)];
    const int q = p->grad_units, lu = p->n_tree_levels - q;
    float *unit[QT_MAX_TREE_LEVELS];
    for (int u = 0; u < q; u++) {
        qt_step_zero_gaps_at(p, (int32_t)QT_A(op, GRAD_UNITS, range),
                             qt_step_region(p, p->tree_offset[lu + u]));
        unit[u] = qt_step_region(p, p->tree_offset[lu + u]) + r->leaf_lo;
    }
    char what[96];
    snprintf(what, sizeof what, "gradient units of range %lld",
             (long long)QT_A(op, GRAD_UNITS, range));
    qt_comm_set_context(what, (long long)st->step);
    int64_t se;
    float *scratch = qt_plan_comm_scratch(p, 0, &se);
    const int R = qt_comm_group_size(r->reduce_mask);
    if (R < 1) return R;
    return qt_coll_reduce_units_f32(r->reduce_mask, unit, q, r->n / R,
                                    qt_step_region(p, p->grads_offset) + r->lo, scratch, se);
}

/* For flat range i (n_mb_levels > 0): *leaf_top = the leaf tree's top level at the rank's
 * reduce block (inside the range's leaf window), mb[l] = microbatch-tree level l at the
 * same block (the compact levels at the range's mb_lo, a whole top level - the gradient
 * region - at the block's flat index), and the block's size in *n. Every pointer addresses
 * element 0 of the block. */
static void qt_step_trees(const qt_plan *p, int32_t i, float **leaf_top, float **mb,
                          int64_t *n)
{
    const int nl = p->n_tree_levels - p->n_mb_levels;
    const qt_flat_range *r = &p->ranges[i];
    int64_t lo;
    qt_step_reduce_block(p, i, &lo, n);
    *leaf_top = qt_step_region(p, p->tree_offset[nl - 1]) + r->leaf_lo + (lo - r->lo);
    for (int l = 0; l < QT_MAX_TREE_LEVELS; l++) {
        float *base = l < p->n_mb_levels ? qt_step_region(p, p->tree_offset[nl + l]) : NULL;
        const int compact =
            qt_tree_level_compact(p->n_tree_levels, p->n_mb_levels, p->grads_compact, nl + l);
        mb[l] = !base ? NULL : compact ? base + r->mb_lo : base + lo;
    }
}

/* The flat ranges a GRAD_MB_TOTAL / GRAD_MB_PUSH names: [r0, r1), or all when r1 = 0 (the
 * two kinds share the attribute layout: QT_OPP_RANGE). */
static void qt_step_span(const qt_plan *p, const qt_op *op, int32_t *r0, int32_t *r1)
{
    const int64_t a0 = QT_A(op, GRAD_MB_TOTAL, r0), a1 = QT_A(op, GRAD_MB_TOTAL, r1);
    *r0 = a1 ? (int32_t)a0 : 0;
    *r1 = a1 ? (int32_t)a1 : p->n_ranges;
}

int qt_step_grad_mb_total(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    (void)st;
    const qt_plan *p = ctx->plan;
    int32_t r0, r1;
    qt_step_span(p, op, &r0, &r1);
    qt_interp_finalize_grads(p, p->ranges[r0].lo, p->ranges[r1 - 1].lo + p->ranges[r1 - 1].n);
    if (p->layer_reduce)
        for (int32_t i = r0; i < r1; i++) qt_step_zero_gaps(p, i);
    return QT_OK;
}

int qt_step_grad_mb_push(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    float *top, *mb[QT_MAX_TREE_LEVELS];
    int32_t r0, r1;
    qt_step_span(p, op, &r0, &r1);
    for (int32_t i = r0; i < r1; i++) {
        int64_t n;
        qt_step_trees(p, i, &top, mb, &n);
        /* an even leaf must sit in level 0 (qt_tree.h); an odd one is read where it is */
        if (!(st->mb & 1)) memcpy(mb[0], top, (size_t)n * sizeof(float));
        qt_tree_push(mb, 0, n, top, st->mb);
    }
    return QT_OK;
}

/* The microbatch form's units (grad_mb_units q): range i's counter runs over the step's
 * G R_r q units (R_r its reduce group's size) in the top levels of the microbatch tree, so
 * that its top is the gradient region; *count = G R_r q, and the result is the index of the
 * counter's level 0 among the microbatch-tree levels. Without units: the G microbatches,
 * from level 0. */
static int qt_step_mb_counter(const qt_plan *p, int32_t i, int64_t *count)
{
    *count = p->train.grad_accum;
    if (p->grad_mb_units < 1) return 0;
    (void)qt_plan_range_mb_units(p, i, count);
    return p->n_mb_levels - qt_tree_levels_needed(*count);
}

/* Range i's q_r unit windows (the lowest q_r of the grad_mb_units unit levels, at the
 * range's leaf_lo) into unit[], with `zero` their padding zeroed (before the exchange); *R
 * its reduce group's size, *blk the floats of a block. QT_OK or the group lookup's error. */
static int qt_step_mb_units_of(const qt_plan *p, int32_t i, int zero, float **unit, int *q,
                               int *R, int64_t *blk)
{
    const qt_flat_range *r = &p->ranges[i];
    int64_t cnt;
    *q = (int)qt_plan_range_mb_units(p, i, &cnt);
    const int lu = p->n_tree_levels - p->n_mb_levels - p->grad_mb_units;
    for (int u = 0; u < *q; u++) {
        unit[u] = qt_step_region(p, p->tree_offset[lu + u]);
        if (zero) qt_step_zero_gaps_at(p, i, unit[u]);
        unit[u] += r->leaf_lo;
    }
    *R = r->reduce_mask ? qt_comm_group_size(r->reduce_mask) : 1;
    if (*R < 1) return *R;
    *blk = r->n / *R;
    return QT_OK;
}

/* How range i's units interleave in the global order (qt_tree_push_units_strided): the
 * routed experts replicated over context (expert_ctx_rep, a range held over `expert` and
 * reduced over context): a member's units are pieces of its exchange's *P members,
 * interleaved with the other *I context indices'; else *I = *P = 1 (member, unit). */
static void qt_step_units_interleave(const qt_plan *p, int32_t i, int *I, int *P)
{
    const qt_flat_range *r = &p->ranges[i];
    const int ilv = p->expert_ctx_rep && (r->hold_mask & (1u << QT_MESH_EXPERT)) &&
                    (r->reduce_mask & (1u << QT_MESH_CONTEXT));
    *I = ilv ? p->mesh[QT_MESH_CONTEXT] : 1;
    *P = ilv ? p->mesh[QT_MESH_EXPERT] : 1;
}

/* Range i's exchanged units (unit[], as qt_step_mb_units_of left them, without zeroing)
 * pushed by the owner in the order (m, u) as leaves mb R q + m q + u of its counter. */
static void qt_step_mb_units_push(const qt_plan *p, int32_t i, float *const *unit, int q, int R,
                                  int64_t blk, int64_t mb)
{
    float *top, *mbl[QT_MAX_TREE_LEVELS];
    int64_t n, count;
    qt_step_trees(p, i, &top, mbl, &n);
    const int l0 = qt_step_mb_counter(p, i, &count);
    int I, P;
    qt_step_units_interleave(p, i, &I, &P);
    qt_tree_push_units_strided(mbl + l0, 0, n, unit, R, q, blk, mb * R * q, I, P);
}

/* The comm context of range i's units exchange. */
static void qt_step_mb_units_context(int32_t i, const qt_step_state *st)
{
    char what[96];
    snprintf(what, sizeof what, "microbatch gradient units of range %d", (int)i);
    qt_comm_set_context(what, (long long)st->step);
}

/* The split units exchange of range i: its id among the split collectives (< 0, below the
 * experts' -2; qt_coll.h qt_coll_start_units). */
static int64_t qt_step_units_id(int32_t i)
{
    return -16 - (int64_t)i;
}

/* Range i's units after a microbatch: blocking (`wait` 0: padding zeroed, exchanged through
 * the blocking comm scratch), or the split exchange's completion (`wait` 1: started by
 * GRAD_MB_UNITS_START); then pushed for microbatch st->mb. */
static int qt_step_mb_units_end(const qt_plan *p, int32_t i, int wait, qt_step_state *st)
{
    float *unit[QT_MAX_TREE_LEVELS];
    int q, R;
    int64_t blk = 0;
    int rc = qt_step_mb_units_of(p, i, !wait, unit, &q, &R, &blk);
    if (rc) return rc;
    if (R > 1) {
        qt_step_mb_units_context(i, st);
        int64_t se;
        float *scratch = qt_plan_comm_scratch(p, 0, &se);
        const unsigned mask = p->ranges[i].reduce_mask;
        rc = wait ? qt_coll_wait_units(qt_step_units_id(i), mask, blk)
                  : qt_coll_exchange_units_f32(mask, unit, q, blk, scratch, se);
        if (rc) return rc;
    }
    qt_step_mb_units_push(p, i, unit, q, R, blk, st->mb);
    return QT_OK;
}

int qt_step_grad_mb_units(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    return qt_step_mb_units_end(ctx->plan, (int32_t)QT_A(op, GRAD_MB_UNITS, range), 0, st);
}

int qt_step_grad_mb_units_start(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    const int32_t i = (int32_t)QT_A(op, GRAD_MB_UNITS_START, range);
    float *unit[QT_MAX_TREE_LEVELS];
    int q, R;
    int64_t blk = 0;
    int rc = qt_step_mb_units_of(p, i, 1, unit, &q, &R, &blk);
    if (rc || R == 1) return rc;
    qt_step_mb_units_context(i, st);
    int64_t se;
    float *scratch = qt_plan_comm_scratch(p, 1, &se);  /* its own: blocking ones run beside */
    return qt_coll_start_units(qt_step_units_id(i), p->ranges[i].reduce_mask, unit, q, blk,
                               scratch, se);
}

int qt_step_grad_mb_units_wait(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    return qt_step_mb_units_end(ctx->plan, (int32_t)QT_A(op, GRAD_MB_UNITS_WAIT, range), 1, st);
}

int qt_step_grad_mb_finalize(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    (void)st;
    (void)op;
    const qt_plan *p = ctx->plan;
    float *top, *mb[QT_MAX_TREE_LEVELS];
    for (int32_t i = 0; i < p->n_ranges; i++) {
        int64_t n, count;
        qt_step_trees(p, i, &top, mb, &n);
        const int l0 = qt_step_mb_counter(p, i, &count);
        qt_tree_finalize_range(mb + l0, 0, n, count);
    }
    return QT_OK;
}

int qt_step_grad_normalise(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    qt_exact sq, none;
    qt_exact_clear(&sq);
    const float n_tok = qt_step_tokens(p, op->a[QT_A_GRAD_NORMALISE_tokens], st);
    for (int32_t i = 0; i < p->n_ranges; i++) {
        int64_t lo, n;
        qt_step_block(p, i, &lo, &n);
        qt_exact_clear(&none);
        /* every block is normalised (or left to ADAMW, which updates the same blocks); only
         * the counted copy adds to the norm */
        qt_step_normalise_range(p, qt_step_grad_at(p, i, lo), lo, n, n_tok, 0, st->update_next,
                                qt_step_primary(ctx, &p->ranges[i]) ? &sq : &none);
    }
    st->gdiv = st->update_next ? n_tok : 0.0f;
    int rc = p->n_ranks > 1 ? qt_step_exact_merge(QT_COLL_ALL, &sq) : QT_OK;
    if (!rc) rc = qt_pp_exact_merge(p, &sq);  /* over the pipeline's stages */
    if (rc) return rc;
    st->m->grad_norm = qt_sqrt(qt_exact_value(&sq));
    return QT_OK;
}

/* Fingerprint of the parameter elements in flat [lo, hi). */
static uint64_t qt_step_fp_range(const qt_plan *p, int64_t lo, int64_t hi)
{
    uint64_t fp = 0;
    int64_t gbase = p->pp_elem0;  /* a pipeline stage's: its one-rank index */
    for (int32_t i = 0; i < p->n_params; i++) {
        gbase = qt_pp_elem_base(p, i, gbase);  /* a circular stage's chunk restarts it */
        const int64_t off = p->params[i].flat_offset, n = p->params[i].numel;
        const int64_t a = off > lo ? off : lo, b = off + n < hi ? off + n : hi;
        if (a < b) fp += qt_param_fp_chunk(p, i, gbase, a - off, b - a);
        gbase += qt_param_global_numel(p, i);
    }
    return fp;
}

/* Clip + AdamW + fingerprint over flat [lo, lo+n); w, g, mo and vo hold the elements from lo
 * on; cc (bf16 plans with a flat compute copy, else NULL) receives bf16(w) of every element
 * updated. With the parameters in flat index order, one pass per run of consecutive global
 * indices: the fingerprint and the rounding take the freshly updated vector from registers. */
static uint64_t qt_step_update(const qt_plan *p, int64_t lo, int64_t n, float *w,
                               const float *g, float *mo, float *vo, qt_bf16 *cc,
                               const qt_adamw_hp *hp, float gscale, int scaled)
{
    const int64_t hi = lo + n;
    if (!qt_step_s.flat_in_order) {
        qt_adamw_update_scaled(w, mo, vo, g, n, hp, gscale, scaled);
        if (cc) qt_bf16_from_f32_n(cc, w, n);
        return qt_step_fp_range(p, lo, hi);
    }
    /* the padding between and after the parameters is never updated (it stays zero, as
     * updating it would leave it) */
    uint64_t fp = 0;
    int64_t gbase = p->pp_elem0;  /* a pipeline stage's: its one-rank index */
    for (int32_t i = 0; i < p->n_params; i++) {
        gbase = qt_pp_elem_base(p, i, gbase);  /* a circular stage's chunk restarts it */
        const int64_t off = p->params[i].flat_offset, pn = p->params[i].numel;
        const int64_t a = off > lo ? off : lo, b = off + pn < hi ? off + pn : hi;
        /* one fused pass per run of consecutive global indices (the whole chunk when the
         * parameter is not sharded: global index = local index), writing the compute copy's
         * rounding too in bf16 plans */
        const qt_tensor *t = &p->tensors[p->params[i].tensor];
        for (int64_t j = a; j < b;) {
            int64_t run = qt_global_run(t, j - off);
            if (run > b - j) run = b - j;
            const int64_t gi = qt_global_index(p, t, j - off);
            fp += qt_adamw_update_fp(w + (j - lo), mo + (j - lo), vo + (j - lo), g + (j - lo),
                                     run, hp, gscale, scaled, (uint64_t)(gbase + gi),
                                     cc ? cc + (j - lo) : NULL);
            j += run;
        }
        gbase += qt_param_global_numel(p, i);
    }
    return fp;
}

/* bf16 plans with a flat compute copy: the copy's element at flat index lo, else NULL. */
static qt_bf16 *qt_step_copy_at(const qt_plan *p, int64_t lo)
{
    if (p->dtype != QT_BF16 || !p->compute_offset) return NULL;
    return (qt_bf16 *)(void *)(p->arena + p->compute_offset) + lo;
}

/* This rank's block of range i of the compute copy becomes the bf16 rounding of its master
 * block (the parameter all-gathers of the step schedule then fill the other ranks'
 * blocks); padding rounds +0 to 0x0000. AdamW rounds what it updates itself. */
static void qt_step_round_block(const qt_plan *p, int32_t i)
{
    int64_t lo, n;
    qt_step_block(p, i, &lo, &n);
    qt_bf16 *cc = qt_step_copy_at(p, lo);
    if (cc) qt_bf16_from_f32_n(cc, qt_step_param_at(p, i, lo), n);
}

int qt_step_publish_params(const qt_ctx *ctx, int64_t step)
{
    const qt_plan *p = ctx->plan;
    if (p->dtype != QT_BF16 || !p->compute_offset) return QT_OK;
    for (int32_t i = 0; i < p->n_ranges; i++) qt_step_round_block(p, i);
    qt_step_state st = {step, 0, NULL, 0, 0, 0.0f};
    const int64_t lo = p->compute_offset, hi = lo + 2 * p->n_flat;
    for (int32_t i = 0; i < p->n_step_ops; i++) {
        const qt_op *op = &p->step_ops[i];
        if (op->kind != QT_OP_COLLECTIVE) continue;
        const int64_t c = QT_A(op, COLLECTIVE, coll);
        if (c < 0 || c >= p->n_collectives || p->collectives[c].offset < lo ||
            p->collectives[c].offset >= hi)
            continue;
        int rc = qt_step_collective(op, ctx, &st);
        if (rc) return rc;
    }
    return QT_OK;
}

int qt_step_adamw(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    (void)op;
    const qt_plan *p = ctx->plan;
    qt_step_metrics *m = st->m;
    /* global-norm clipping: g * (float)(clip/norm), folded into the update */
    const double clip = (double)p->train.clip;
    const int scaled = clip > 0.0 && m->grad_norm > clip;
    const float gscale = scaled ? (float)(clip / m->grad_norm) : 1.0f;
    qt_adamw_hp hp;
    qt_adamw_hp_make(&hp, (float)m->lr, p->train.adam_b1, p->train.adam_b2, p->train.adam_eps,
                     p->train.weight_decay, st->step);
    /* the normalising op right before left its division to the update */
    qt_adamw_hp_divide(&hp, st->gdiv);
    st->gdiv = 0.0f;
    uint64_t fp = 0;
    for (int32_t i = 0; i < p->n_ranges; i++) {
        int64_t lo, n;
        qt_step_block(p, i, &lo, &n);
        float *mo = qt_step_region(p, p->adam_m_offset) + p->ranges[i].adam_lo;
        float *vo = qt_step_region(p, p->adam_v_offset) + p->ranges[i].adam_lo;
        uint64_t f = qt_step_update(p, lo, n, qt_step_param_at(p, i, lo),
                                    qt_step_grad_at(p, i, lo), mo, vo, qt_step_copy_at(p, lo), &hp,
                                    gscale, scaled);
        if (qt_step_primary(ctx, &p->ranges[i])) fp += f;
    }
    if (p->n_ranks > 1) {
        int rc = qt_coll_sum_u64(QT_COLL_ALL, &fp, 1);
        if (!rc) rc = qt_pp_sum_u64(p, &fp, 1);  /* over the pipeline's stages */
        if (rc) return rc;
    }
    m->fingerprint = fp;
    return QT_OK;
}

uint64_t qt_step_fingerprint(const qt_ctx *ctx, int *rc)
{
    const qt_plan *p = ctx->plan;
    uint64_t fp = 0;
    *rc = QT_OK;
    for (int32_t i = 0; i < p->n_ranges; i++) {
        int64_t lo, n;
        qt_step_block(p, i, &lo, &n);
        if (qt_step_primary(ctx, &p->ranges[i])) fp += qt_step_fp_range(p, lo, lo + n);
    }
    if (p->n_ranks > 1) *rc = qt_coll_sum_u64(QT_COLL_ALL, &fp, 1);
    return fp;
}

int qt_step_param_gather(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    (void)st;
    const qt_plan *p = ctx->plan;
    const int32_t r = (int32_t)QT_A(op, PARAM_GATHER, range);
    int64_t lo, n;
    qt_step_block(p, r, &lo, &n);
    const int32_t w = QT_T(op, PARAM_GATHER, window);
    /* a bf16 window holds the rounding of the masters: the same bits as a flat compute copy */
    if (qt_is_b16(ctx, w))
        qt_bf16_from_f32_n(qt_b16(ctx, w) + (lo - p->ranges[r].lo), qt_step_param_at(p, r, lo), n);
    else
        memcpy(qt_f32(ctx, w) + (lo - p->ranges[r].lo), qt_step_param_at(p, r, lo),
               (size_t)n * sizeof(float));
    return QT_OK;
}

int qt_step_collective(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    const int64_t i = QT_A(op, COLLECTIVE, coll);
    if (i < 0 || i >= p->n_collectives)
        return qt_fail(QT_E_PLAN, "plan %s: collective %lld does not exist", p->run_name,
                       (long long)i);
    const qt_collective *c = &p->collectives[i];
    qt_comm_set_context(c->name, (long long)st->step);
    /* the kind's range function (qt_coll.def) */
    int64_t se;
    float *scratch = qt_plan_comm_scratch(p, 0, &se);
    return qt_coll_run_range(c, p->arena + c->offset, scratch, se);
}

/* Collective a0 of a COLL_START / COLL_WAIT (the same attribute as COLLECTIVE's), or NULL
 * after a message. */
static const qt_collective *qt_step_split_coll(const qt_op *op, const qt_plan *p)
{
    const int64_t i = QT_A(op, COLL_START, coll);
    if (i >= 0 && i < p->n_collectives) return &p->collectives[i];
    qt_fail(QT_E_PLAN, "plan %s: collective %lld does not exist", p->run_name, (long long)i);
    return NULL;
}

int qt_step_coll_start(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    const qt_collective *c = qt_step_split_coll(op, p);
    if (!c) return QT_E_PLAN;
    qt_comm_set_context(c->name, (long long)st->step);
    int64_t se;
    float *scratch = qt_plan_comm_scratch(p, 1, &se);  /* its own: blocking ones run beside */
    return qt_coll_start_range(QT_A(op, COLL_START, coll), c, p->arena + c->offset, scratch, se);
}

int qt_step_coll_wait(const qt_op *op, const qt_ctx *ctx, qt_step_state *st)
{
    const qt_plan *p = ctx->plan;
    const qt_collective *c = qt_step_split_coll(op, p);
    if (!c) return QT_E_PLAN;
    qt_comm_set_context(c->name, (long long)st->step);
    return qt_coll_wait_range(QT_A(op, COLL_WAIT, coll), c);
}

/* ---- start-up checks of the step ops (qt_ops.def CHECK; validate.c's qt_validate_step_op
 * calls them for every op of the step, microbatch-end and per-layer schedules). Each reads
 * the plan and its op and returns nonzero when the op does not fit the plan. */

static int64_t qt_check_leaves(const qt_plan *p)
{
    return qt_plan_leaves_per_mb(p) * p->train.grad_accum;
}

static int64_t qt_check_tokens(const qt_plan *p)
{
    return p->train.global_batch * p->train.seq_len;
}

int qt_check_grad_finalize(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    (void)st;
    return QT_A(op, GRAD_FINALIZE, leaves) != qt_check_leaves(p) ||
           QT_A(op, GRAD_FINALIZE, tokens) != qt_check_tokens(p);
}

int qt_check_grad_tree_total(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    (void)st;
    return QT_A(op, GRAD_TREE_TOTAL, leaves) != qt_check_leaves(p);
}

int qt_check_grad_units(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    (void)st;
    const int64_t i = QT_A(op, GRAD_UNITS, range);
    return p->grad_units < 2 || p->n_mb_levels || i < 0 || i >= p->n_ranges ||
           p->n_tree_levels < p->grad_units || !p->ranges[i].reduce_mask;
}

/* Ranks of group `mask` in plan p (the product of its axes' sizes; 1 for no axis). */
static int64_t qt_check_group(const qt_plan *p, unsigned mask)
{
    int64_t n = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1u << a)) n *= p->mesh[a];
    return n;
}

/* GRAD_MB_UNITS (and its split form's start and wait): a range of the plan whose
 * parameters' T_p leaves a microbatch are q units and, over its reduce group, cover the batch
 * group's leaves of a microbatch (T_p R_r = R L), with its counter inside the microbatch
 * levels; 0 when it fits. */
static int qt_check_mb_units_range(const qt_plan *p, int64_t i)
{
    if (p->grad_mb_units < 1 || !p->n_mb_levels || i < 0 || i >= p->n_ranges) return 1;
    const qt_flat_range *r = &p->ranges[i];
    const int64_t Rr = qt_check_group(p, r->reduce_mask), G = p->train.grad_accum;
    const int64_t RL = qt_check_group(p, p->batch_mask) * qt_plan_leaves_per_mb(p);
    int64_t cnt;
    const int64_t q = qt_plan_range_mb_units(p, (int32_t)i, &cnt);
    int I, P;
    qt_step_units_interleave(p, (int32_t)i, &I, &P);
    if (q < 1 || q > p->grad_mb_units || qt_tree_levels_needed(cnt) > p->n_mb_levels ||
        r->n % Rr || I < 1 || P < 1 || Rr % I || q % P)
        return 1;
    for (int32_t k = 0; k < p->n_params; k++) {
        const qt_param *pa = &p->params[k];
        if (pa->flat_offset < r->lo || pa->flat_offset >= r->lo + r->n) continue;
        const int64_t T = pa->leaves / G;
        if (T * G != pa->leaves || T != qt_plan_unit_leaves(p, T, r->hold_mask) * q ||
            T * Rr != RL)
            return 1;
    }
    return 0;
}

/* ... counted as pushed (as GRAD_MB_PUSH). */
int qt_check_grad_mb_units(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t i = QT_A(op, GRAD_MB_UNITS, range);
    if (qt_check_mb_units_range(p, i)) return 1;
    if (st->pushed && st->pushed[i] < 255) st->pushed[i]++;
    return 0;
}

/* The split start: and, when its group moves anything, the comm scratch's split part holds
 * a piece of each unit out and in (2 q floats at least). Pushes nothing. */
int qt_check_grad_mb_units_start(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    (void)st;
    const int64_t i = QT_A(op, GRAD_MB_UNITS_START, range);
    if (qt_check_mb_units_range(p, i)) return 1;
    int64_t cnt;
    const int64_t q = qt_plan_range_mb_units(p, (int32_t)i, &cnt);
    return qt_check_group(p, p->ranges[i].reduce_mask) > 1 && p->comm_split_elems < 2 * q;
}

/* The split wait: the push (counted). */
int qt_check_grad_mb_units_wait(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    _Static_assert((int)QT_A_GRAD_MB_UNITS_WAIT_range == (int)QT_A_GRAD_MB_UNITS_range,
                   "step_ops.c: the units wait names its range as GRAD_MB_UNITS does");
    return qt_check_grad_mb_units(p, op, st);
}

int qt_check_grad_mb_finalize(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    (void)st;
    return QT_A(op, GRAD_MB_FINALIZE, leaves) != p->train.grad_accum || !p->n_mb_levels;
}

/* The flat ranges [r0, r1) of a QT_OPP_RANGE op (r1 = 0: every range) lie in the plan's. */
static int qt_check_span(const qt_plan *p, const qt_op *op, int64_t *r0, int64_t *r1)
{
    *r0 = QT_A(op, GRAD_MB_TOTAL, r1) ? QT_A(op, GRAD_MB_TOTAL, r0) : 0;
    *r1 = QT_A(op, GRAD_MB_TOTAL, r1) ? QT_A(op, GRAD_MB_TOTAL, r1) : p->n_ranges;
    return !p->n_mb_levels || *r0 < 0 || *r0 >= *r1 || *r1 > p->n_ranges;
}

int qt_check_grad_mb_total(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    int64_t r0, r1;
    (void)st;
    return qt_check_span(p, op, &r0, &r1);
}

/* ... and counts the pushes of each range (a microbatch tree receives each range once). */
int qt_check_grad_mb_push(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    int64_t r0, r1;
    if (qt_check_span(p, op, &r0, &r1)) return 1;
    for (int64_t r = r0; r < r1 && st->pushed; r++)
        if (st->pushed[r] < 255) st->pushed[r]++;
    return 0;
}

int qt_check_grad_normalise(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    (void)st;
    return QT_A(op, GRAD_NORMALISE, tokens) != qt_check_tokens(p);
}

int qt_check_param_gather(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t r = QT_A(op, PARAM_GATHER, range);
    const int32_t w = QT_T(op, PARAM_GATHER, window);
    (void)st;
    return !p->params_compact || r < 0 || r >= p->n_ranges || w < 0 || w >= p->n_tensors ||
           p->tensors[w].numel < p->ranges[r].n;
}

/* The collective exists and fits its qt_coll.def row: a range form, inside the arena, with
 * elements (and blocks) its group can split evenly. */
int qt_check_collective(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t i = QT_A(op, COLLECTIVE, coll);
    (void)st;
    if (i < 0 || i >= p->n_collectives) return 1;
    return qt_coll_range_check(&p->collectives[i], p->arena_bytes) != QT_OK;
}

/* A split collective: as COLLECTIVE, and of a kind with a split form. Their pairing (each
 * START waited once, later, in the same schedule; at most QT_MAX_IN_FLIGHT in flight; one
 * reduce-scatter at a time) is checked over whole schedules (validate.c). */
_Static_assert((int)QT_A_COLL_START_coll == (int)QT_A_COLLECTIVE_coll &&
               (int)QT_A_COLL_WAIT_coll == (int)QT_A_COLLECTIVE_coll,
               "step_ops.c: COLL_START / COLL_WAIT name their collective as COLLECTIVE does");

int qt_check_coll_start(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t i = QT_A(op, COLL_START, coll);
    if (qt_check_collective(p, op, st)) return 1;
    return p->collectives[i].kind != QT_COLL_REDUCE_SCATTER &&
           p->collectives[i].kind != QT_COLL_ALL_GATHER;
}

int qt_check_coll_wait(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_coll_start(p, op, st);
}
