/* memory/memplan.c - the arena layout and the liveness-based activation planner. Runs after
 * the flat ranges (memory/ranges.c) and the per-layer schedule edits (schedule/layer_ops.c),
 * whose gather windows it plans like activations.
 *
 * Layout (bytes, every region and tensor 64-byte aligned):
 *   params | adam_m | adam_v | [compute copy] | [bf16 staging] | tree level 0..n-1
 *   (level n-1 = grads) | leaf scratch | comm scratch | staging | activations
 * In bf16 plans (s->dtype, docs/precision.md) the params region holds this rank's fp32
 * master blocks (laid out as Adam) and the compute copy is the bf16 flat vector (n_flat
 * elements of 2 bytes) the parameter tensors point into; with per-layer gathers there is no
 * compute copy region (the bf16 gather windows are activations). bf16 plans also get the
 * bf16 staging region (fp32, bf16_stage_elems floats; qt_plan_fields.def): the firmware
 * widens one op's bf16 slots into it, so it holds the largest per-op sum of bf16 tensors.
 * Every tensor is sized by its dtype (qt_dtype_bytes); the flat fp32 regions (master,
 * Adam, trees, scratch, staging) stay 4 bytes an element.
 * The params and tree regions are flat parameter regions of n_flat floats: parameter p sits
 * at the same element offset (flat_offset, a multiple of 16 so every tensor stays 64-byte
 * aligned) in each of them; padding elements between parameters and up to n_flat (a
 * multiple of 16 x the batch group's size, so every group block is equal and aligned) are
 * never read as parameters and stay zero. The Adam regions hold this rank's block of the
 * optimizer group: n_flat / |opt group| floats. The comm scratch (1 MiB, meshes only) is
 * the reduce-scatter's receive buffer. n_tree_levels = bit length of the sequences this
 * rank processes per step (micro_batch * grad_accum). The gradient region is the top tree
 * level itself: that level is written only by the last carry of the step's tree and stays
 * occupied from then on, so the runtime completes the total in place there (qt_tree.h) and
 * no separate region is needed. The leaf scratch holds the parameters of the largest WGRAD
 * op (at most two). Activations, saved statistics, gradients of activations, inputs,
 * losses, the rotary table and kernel scratch get offsets from a greedy planner: lifetime =
 * [first, last] op index in the microbatch schedule (whole schedule for tokens, targets,
 * loss_seq, lb_seq and the table); tensors are placed largest first (ties by id) at the
 * lowest offset that overlaps no placed tensor with an overlapping lifetime. The arena is
 * rounded up to 2 MiB. Invariants are re-checked by qt_cg_check_plan (check/plan.c).
 * Bounds: every tensor is <= 2^56 elements (config/settings.c, qt_cg_add_tensor); the flat
 * region is refused above 2^54 elements (memory/ranges.c) and the activations above 2^60
 * bytes, so no offset sum here can wrap a signed 64-bit integer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"
#include "memory/qt_cg_memory.h"

#define ALIGN_UP(x, a) ((((x) + (a) - 1) / (a)) * (a))
/* Receive buffer of the reduce-scatter (floats): large enough that MPICH moves big
 * messages, small next to any model's gradient. */
#define QT_CG_COMM_SCRATCH (1 << 18)
/* With collective_overlap the split reduce-scatters (and the split units exchange) get
 * scratch of their own after the blocking collectives' (qt_plan.comm_split_elems: a
 * tensor-parallel sum may run while one is in flight), and since one advances one message
 * per op boundary on each side, for the largest range, up to 16 MiB (8 MiB per message; the
 * bits never depend on its size). */
#define QT_CG_COMM_SCRATCH_SPLIT (1 << 22)

static int64_t bytes_of(const qt_tensor *t)
{
    return ALIGN_UP(t->numel * qt_dtype_bytes(t->dtype), (int64_t)QT_TENSOR_ALIGN);
}

int qt_cg_planned(const qt_cg_tensor *t)
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
        if (qt_cg_planned(&g->ts[i]) && (g->ts[i].whole || g->ts[i].first < 0)) {
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

int qt_cg_lives_overlap(const qt_cg_tensor *a, const qt_cg_tensor *b)
{
    return a->first <= b->last && b->first <= a->last;
}

/* The parameter and Adam regions: each parameter's leaf offset, the parameters' flat
 * extent and each range's Adam block; returns the byte offset of the first tree level. */
static int64_t param_regions(qt_cg_graph *g)
{
    const qt_cg_settings *st = g->s;
    for (int p = 0; p < g->np; p++) {
        const qt_flat_range *r = &g->ranges[qt_cg_range_of(g, p)];
        g->ps[p].leaf_offset = r->leaf_lo + g->ps[p].flat_offset - r->lo;
    }
    g->n_param_elems = 0;
    const int64_t al = qt_cg_flat_align(st);
    for (int p = 0; p < g->np; p++)
        if (g->ps[p].flat_offset + ALIGN_UP(g->ps[p].numel, al) > g->n_param_elems)
            g->n_param_elems = g->ps[p].flat_offset + ALIGN_UP(g->ps[p].numel, al);
    g->adam_elems = 0;
    for (int i = 0; i < g->n_ranges; i++) {
        g->ranges[i].adam_lo = g->adam_elems;
        g->adam_elems += g->ranges[i].n / qt_cg_group_size(st, g->ranges[i].opt_mask);
    }
    int64_t region = g->n_flat * 4, adam = g->adam_elems * 4;
    /* with per-layer gathers, and in bf16 plans, the parameter region holds the rank's fp32
     * master blocks, as Adam does */
    const int bf16 = st->dtype == QT_BF16;
    const int64_t pregion = g->params_compact || bf16 ? adam : region;
    g->params_offset = 0;
    g->adam_m_offset = pregion;
    g->adam_v_offset = pregion + adam;
    /* bf16: the compute copy of the whole flat vector (2 bytes an element), unless the
     * compute copies live in per-layer gather windows */
    g->compute_offset = bf16 && !g->params_compact ? pregion + 2 * adam : 0;
    if (g->compute_offset)
        return g->compute_offset + ALIGN_UP(2 * g->n_flat, (int64_t)QT_TENSOR_ALIGN);
    return pregion + 2 * adam;
}

/* Floats of one op's bf16 staging: its distinct bf16 tensors, each rounded up to 16
 * elements (64 bytes), except the parameter slots of kinds that read bf16 parameters
 * themselves or not at all (QT_OPP_BF16 without QT_OPP_BF16_PSTAGE: the kinds made
 * native later keep the size the boundary had, their row buffers live in it); STEP kinds (PARAM_GATHER's window) run in the
 * step code, never staged. */
static int64_t op_bf16_stage(const qt_cg_graph *g, const qt_op *op)
{
    const char *slots = qt_cg_op_slots(op->kind);
    const int cls = qt_cg_op_class(op->kind);
    const unsigned props = qt_cg_op_props(op->kind);
    const int skip_p = (props & QT_OPP_BF16) && !(props & QT_OPP_BF16_PSTAGE);
    if (cls == QT_OPC_STEP) return 0;
    int32_t seen[QT_OP_MAX_T];
    int n_seen = 0;
    int64_t sum = 0;
    for (int k = 0; slots[k] && k < QT_OP_MAX_T; k++) {
        const int32_t id = op->t[k];
        if (id < 0 || g->ts[id].t.dtype != QT_BF16 || (skip_p && (slots[k] | 0x20) == 'p'))
            continue;
        int dup = 0;
        for (int j = 0; j < n_seen && !dup; j++) dup = seen[j] == id;
        if (dup) continue;
        seen[n_seen++] = id;
        sum += ALIGN_UP(g->ts[id].t.numel, 16);
    }
    return sum;
}

/* bf16 plans: the bf16 staging region at byte offset at (the largest op_bf16_stage over
 * the init and microbatch schedules); returns the offset after it. fp32 plans: none, at
 * unchanged. */
static int64_t bf16_staging(qt_cg_graph *g, int64_t at)
{
    g->bf16_stage_offset = g->bf16_stage_elems = 0;
    if (g->s->dtype != QT_BF16) return at;
    int64_t need = 0;
    for (int i = 0; i < g->ninit + g->nmb; i++) {
        const int64_t n = op_bf16_stage(g, i < g->ninit ? &g->init[i] : &g->mb[i - g->ninit]);
        if (n > need) need = n;
    }
    g->bf16_stage_offset = ALIGN_UP(at, (int64_t)QT_TENSOR_ALIGN);
    g->bf16_stage_elems = need;
    return ALIGN_UP(g->bf16_stage_offset + 4 * need, (int64_t)QT_TENSOR_ALIGN);
}

/* The step form's units (qt_plan_fields.def grad_units): q = L / U when the batch ranks hold
 * L leaves each per step, L not a power of two (U its largest power-of-two divisor), every
 * parameter's tree has L leaves and every range is reduced over the whole batch group (so a
 * member's group index is its batch index: its leaves are [index * L, (index + 1) * L) of
 * the global order, docs/determinism.md); else 0 (the leaf tree's total is one subtree of
 * the one-rank tree, the plan is not in the step form, or the units would be more than
 * QT_CG_MAX_UNITS over the group or need more than QT_CG_MAX_UNIT_LEVELS levels). */
int64_t qt_cg_grad_units(const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    if (g->n_mb_levels || s->n_ranks < 2 || !s->batch_mask || g->np < 1) return 0;
    const int64_t L = g->ps[0].leaves;
    for (int p = 1; p < g->np; p++)
        if (g->ps[p].leaves != L) return 0;
    if (L < 2 || !(L & (L - 1))) return 0;
    for (int i = 0; i < g->n_ranges; i++)
        if (g->ranges[i].reduce_mask != s->batch_mask) return 0;
    const int64_t U = L & -L, q = L / U;
    int lu = 0;
    while (U >> (lu + 1)) lu++;
    if (q * qt_cg_group_size(s, s->batch_mask) > QT_CG_MAX_UNITS || lu + q > QT_CG_MAX_UNIT_LEVELS)
        return 0;
    return q;
}

/* The leaves of one unit of a parameter with T leaves a microbatch in a range held over
 * `hold` (the firmware's rule, qt_plan.h qt_plan_unit_leaves): the largest power of two
 * dividing T; a routed expert replicated over context (expert_ctx_rep) has T = E L leaves,
 * the L blocks of each of the E members of its exchange (one context index's), which lie
 * apart in the global order: the largest power of two dividing L. */
int64_t qt_cg_unit_leaves(const qt_cg_graph *g, int64_t T, uint8_t hold)
{
    const qt_cg_settings *s = g->s;
    if (s->expert_ctx_rep && (hold & (1u << QT_MESH_EXPERT))) {
        const int64_t L = s->tr.micro_batch * qt_cg_blocks(s) / qt_cg_context(s);
        return L & -L;
    }
    return T & -T;
}

/* Bit length of n (levels of a binary counter over n >= 1 leaves). */
static int bit_length(int64_t n)
{
    int l = 0;
    while (n >> l) l++;
    return l;
}

/* The microbatch form's units (qt_plan_fields.def grad_mb_units, docs/determinism.md "The
 * microbatch form's units"): q = the most units q_p of a parameter when the microbatch or
 * per-layer form would not continue the one-rank tree: a parameter's T_p leaves a microbatch
 * are not a power of two (the batch ranks' L, an expert host's over its expert group, the
 * head-split mixer weights' over a sequence's context blocks) unless they are the whole
 * microbatch of one step, or G > 1 over a batch group of R ranks that is not a power of two.
 * Every parameter's T_p leaves must be q_p units of a power of two U_p (q_p odd) covering
 * the microbatch's R L leaves over its range's reduce group (T_p R_r = R L), so a member's
 * units are those of its group index in the global (microbatch, batch index) order (the
 * context axis least significant: one sequence a microbatch, a context rank's blocks
 * contiguous). 0 otherwise, or when a range's units would be more than QT_CG_MAX_UNITS over
 * its group or need more than QT_CG_MAX_UNIT_LEVELS levels (the plan then keeps the
 * reduce-scatter and plan.txt says no). *umax: max U_p, *cmax: max over ranges of G R_r q_p
 * (the units the widest counter runs over). */
static int64_t mb_units(const qt_cg_graph *g, int64_t *umax, int64_t *cmax)
{
    const qt_cg_settings *s = g->s;
    *umax = *cmax = 1;
    if (!g->reduce_per_mb || !s->batch_mask || s->n_ranks < 2 || g->np < 1) return 0;
    const int64_t G = s->tr.grad_accum, R = qt_cg_group_size(s, s->batch_mask);
    const int64_t L = s->tr.micro_batch * qt_cg_blocks(s) / qt_cg_context(s);
    int one_rank = G == 1 || !(R & (R - 1)); /* one rank's bits already? */
    int64_t q = 1;
    for (int p = 0; p < g->np; p++) {
        const int r = qt_cg_range_of(g, p);
        const int64_t T = g->ps[p].leaves / G;
        if (r < 0 || T < 1 || T * qt_cg_group_size(s, g->ranges[r].reduce_mask) != R * L)
            return 0;
        const int64_t U = qt_cg_unit_leaves(g, T, g->ranges[r].hold_mask);
        const int64_t Rr = qt_cg_group_size(s, g->ranges[r].reduce_mask);
        if (T != U && !(G == 1 && Rr == 1)) one_rank = 0;
        if (T / U > q) q = T / U;
        if (U > *umax) *umax = U;
        if (G * Rr * (T / U) > *cmax) *cmax = G * Rr * (T / U);
        if ((T / U) * Rr > QT_CG_MAX_UNITS) return 0;
    }
    if (one_rank) return 0;
    if (bit_length(*umax) - 1 + q + bit_length(*cmax) > QT_CG_MAX_UNIT_LEVELS) return 0;
    return q;
}

int64_t qt_cg_grad_mb_units(const qt_cg_graph *g)
{
    int64_t umax, cmax;
    return mb_units(g, &umax, &cmax);
}

int qt_cg_grad_mb_levels(const qt_cg_graph *g, int64_t *umax)
{
    int64_t cmax;
    (void)mb_units(g, umax, &cmax);
    return bit_length(cmax);
}

/* The gradient trees: their levels, and which of them are compact (mb_elems floats). */
static int tree_levels(qt_cg_graph *g, char *err, size_t errlen)
{
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
    g->grad_units = (int32_t)qt_cg_grad_units(g);
    if (g->grad_units > 1) { /* log2 U levels of the units' own trees, then the q units */
        lv = 0;
        while ((seqs / g->grad_units) >> (lv + 1)) lv++;
        lv += g->grad_units;
    }
    g->grad_mb_units = (int32_t)qt_cg_grad_mb_units(g);
    /* the routed experts replicated over context: their hosts' leaves continue the one-rank
     * tree only through the units (interleaved with the other context indices') */
    if (g->s->expert_ctx_rep && g->grad_mb_units < 1)
        return qt_cg_fail(err, errlen, "the routed experts replicated over context (expert x "
                          "context does not divide num_experts, or ragged_buffer_factor > 0) "
                          "need the microbatch form's units (docs/determinism.md), and this "
                          "mesh and batch have none (over %d units or %d levels); expected "
                          "expert x context dividing num_experts, or fewer ranks or leaves",
                          QT_CG_MAX_UNITS, QT_CG_MAX_UNIT_LEVELS);
    if (g->grad_mb_units > 0) { /* log2 max U_p, the q unit levels, the units' counter */
        int64_t umax;
        g->n_mb_levels = qt_cg_grad_mb_levels(g, &umax);
        lv = bit_length(umax) - 1 + g->grad_mb_units + g->n_mb_levels;
    }
    if (lv < 1 || lv > QT_MAX_TREE_LEVELS)
        return qt_cg_fail(err, errlen, "%lld sequences per step need %lld tree levels (1..%d)",
                          (long long)seqs, (long long)lv, QT_MAX_TREE_LEVELS);
    g->n_tree_levels = (int32_t)lv;
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
    return 0;
}

/* Floats of the largest window in which a checkpoint gathers parameter p (whole rows of its
 * first dimension, firmware/runtime/ckpt_gather.c): the whole parameter when it has at most
 * checkpoint_window_floats elements, or when it is a Qwen3.5 GDN input projection (its
 * on-disk pieces permute its rows, firmware/io/ckpt_map.c), else as many whole rows as that
 * holds, one at least (issue 21: one expert of a fused expert tensor, rows of the
 * embedding). */
static int64_t ckpt_window(const qt_cg_graph *g, int p)
{
    const qt_tensor *t = &g->ts[g->ps[p].tensor].t;
    const char *nm = g->ps[p].name;
    int64_t gn = 1;
    for (int d = 0; d < t->ndim; d++) gn *= t->global_shape[d];
    const int64_t cap = g->s->ckpt_window, row = t->global_shape[0] > 0 ? gn / t->global_shape[0] : 1;
    static const char *const sfx[2] = {".linear_attn.in_proj_qkvz.weight",
                                       ".linear_attn.in_proj_ba.weight"};
    int permuted = 0;
    for (int k = 0; k < 2 && g->s->m.decoder_block == 1; k++) {
        const size_t n = strlen(nm), m = strlen(sfx[k]);
        permuted |= n >= m && !strcmp(nm + n - m, sfx[k]);
    }
    if (gn <= cap || permuted || cap <= 0) return gn;
    return cap / row > 1 ? cap / row * row : row;
}

/* From the first tree level (byte offset flat0) up: the tree levels, the leaf scratch, the
 * comm scratch and the checkpoint staging; then act_offset and the parameters' offsets. */
static void fixed_regions(qt_cg_graph *g, int64_t flat0)
{
    const int64_t lv = g->n_tree_levels;
    /* Leaf scratch: the interpreter places one WGRAD op's parameter leaves back to back, so
     * it needs the largest per-op sum (not the two largest parameters overall) - over the
     * ops whose trees have more than one leaf: a tree's only leaf is even, and even leaves
     * are computed in place in level 0 (qt_tree.h). */
    int64_t leaf_need = 0;
    for (int i = 0; i < g->nmb; i++) {
        const qt_op *op = &g->mb[i];
        const int64_t *pi = &op->a[QT_A_WGRAD_PARAM];  /* first and second parameter */
        if (!(op->flags & QT_OPF_WGRAD) || qt_cg_tree_leaves(g, pi[0]) < 2) continue;
        int64_t n = g->ps[pi[0]].numel + (pi[1] >= 0 ? g->ps[pi[1]].numel : 0);
        if (n > leaf_need) leaf_need = n;
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
    g->comm_split_elems = 0;
    for (int r = 0; r < g->n_ranges && (g->overlap || g->mb_overlap) && g->s->n_ranks > 1;
         r++) {
        /* the split reduce-scatters' own part after it: their messages up to a whole
         * range, within the cap; the split units exchange's (mb_overlap with grad_mb_units):
         * a piece of each of the range's q_r units out and in, up to its whole block of
         * n / R_r floats (so 2 q_r n / R_r), within the same cap (qt_coll.h
         * qt_coll_start_units) */
        int64_t n = g->ranges[r].n;
        if (g->grad_mb_units) {
            const qt_cg_settings *s = g->s;
            const int64_t Rr = qt_cg_group_size(s, g->ranges[r].reduce_mask);
            const int64_t T = qt_cg_group_size(s, s->batch_mask) * s->tr.micro_batch *
                              qt_cg_blocks(s) / qt_cg_context(s) / Rr;
            n = 2 * (T > 0 ? T / qt_cg_unit_leaves(g, T, g->ranges[r].hold_mask) : 1) *
                ((n + Rr - 1) / Rr);
        }
        const int64_t want = n < QT_CG_COMM_SCRATCH_SPLIT ? (n + 1) / 2 * 2
                                                          : QT_CG_COMM_SCRATCH_SPLIT;
        /* units per layer: the ranges whose exchange is split (schedule/overlap.c) */
        if (g->ranges[r].reduce_mask && want > g->comm_split_elems &&
            (!g->grad_mb_units ||
             ((g->mb_overlap || qt_cg_units_split(g, r)) &&
              qt_cg_group_size(g->s, g->ranges[r].reduce_mask) > 1)))
            g->comm_split_elems = want;
    }
    g->comm_scratch_elems += g->comm_split_elems;
    /* Checkpoint staging (multi-rank plans only, so one-rank plans keep their layout): the
     * largest window a checkpoint gathers, plus 16 floats for the gather's cover check
     * (firmware/runtime/ckpt_gather.c). */
    int64_t stage_need = 0;
    for (int p = 0; p < g->np; p++) {
        const int64_t w = ckpt_window(g, p);
        if (w > stage_need) stage_need = w;
    }
    g->staging_offset = ALIGN_UP(g->comm_scratch_offset + 4 * g->comm_scratch_elems,
                                 (int64_t)QT_TENSOR_ALIGN);
    g->staging_elems = g->s->n_ranks > 1 ? ALIGN_UP(stage_need, 16) + 16 : 0;
    g->act_offset = ALIGN_UP(g->staging_offset + 4 * g->staging_elems,
                             (int64_t)QT_TENSOR_ALIGN);
    const int64_t pbase = g->compute_offset ? g->compute_offset : g->params_offset;
    for (int p = 0; p < g->np; p++)
        g->ts[g->ps[p].tensor].t.offset = pbase + qt_cg_compute_bytes(g->s) * g->ps[p].flat_offset;
    for (int i = 0; i < g->nt; i++)  /* parameters in gather windows: placed below */
        if (g->ts[i].alias_of >= 0) g->ts[i].t.offset = -1;
}

/* The activations: the greedy liveness planner (lifetimes, largest first, lowest free
 * offset), then the parameters in gather windows and the arena's size. */
static int plan_activations(qt_cg_graph *g, char *err, size_t errlen)
{
    lifetimes(g);
    qt_cg_sortkey *order = qt_cg_alloc((size_t)g->nt * sizeof *order);
    int n = 0;
    for (int i = 0; i < g->nt; i++)
        if (qt_cg_planned(&g->ts[i])) order[n++] = (qt_cg_sortkey){bytes_of(&g->ts[i].t), i};
    qsort(order, (size_t)n, sizeof *order, cmp_size);
    qt_cg_iv *busy = qt_cg_alloc((size_t)(n ? n : 1) * sizeof *busy);
    int64_t *rel = qt_cg_alloc((size_t)g->nt * sizeof *rel);
    int64_t peak = 0;
    for (int a = 0; a < n; a++) {
        const qt_cg_tensor *t = &g->ts[order[a].id];
        int nb = 0;
        for (int b = 0; b < a; b++) {
            const qt_cg_tensor *u = &g->ts[order[b].id];
            if (qt_cg_lives_overlap(t, u))
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

int qt_cg_memplan(qt_cg_graph *g, char *err, size_t errlen)
{
    const int64_t flat0 = bf16_staging(g, param_regions(g));
    if (tree_levels(g, err, errlen)) return -1;
    fixed_regions(g, flat0);
    return plan_activations(g, err, errlen);
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
