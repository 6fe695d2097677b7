/* plan_hash.c - 64-bit FNV-1a over a canonical serialisation of a plan (qt_plan_hash.h).
 *
 * Integers are serialised as 8 little-endian bytes, floats by their IEEE bits, strings as
 * length + bytes, in the fixed field order below, so equal plans hash equally on every host
 * and compiler. Never covers banners, file names, the arena address or the hash field.
 * Compiled into both configgen and the firmware: one definition of "the same plan".
 */
#include <string.h>
#include "qt_plan_hash.h"

typedef struct qt_fnv {
    uint64_t h;
} qt_fnv;

static void qt_fnv_bytes(qt_fnv *f, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        f->h ^= b[i];
        f->h *= 1099511628211ull;
    }
}

static void qt_fnv_i(qt_fnv *f, int64_t v)
{
    unsigned char b[8];
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(u >> (8 * i));
    qt_fnv_bytes(f, b, 8);
}

static void qt_fnv_f(qt_fnv *f, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    qt_fnv_i(f, (int64_t)u);
}

static void qt_fnv_s(qt_fnv *f, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    qt_fnv_i(f, (int64_t)n);
    qt_fnv_bytes(f, s ? s : "", n);
}

static void qt_fnv_op(qt_fnv *f, const qt_op *o)
{
    qt_fnv_i(f, o->kind);
    qt_fnv_i(f, o->flags);
    for (int i = 0; i < QT_OP_MAX_T; i++) qt_fnv_i(f, o->t[i]);
    for (int i = 0; i < QT_OP_MAX_A; i++) qt_fnv_i(f, o->a[i]);
    for (int i = 0; i < QT_OP_MAX_F; i++) qt_fnv_f(f, o->f[i]);
}

uint64_t qt_plan_hash(const qt_plan *p)
{
    qt_fnv f = {14695981039346656037ull};
    const qt_model_dims *m = &p->model;
    const qt_train_cfg *t = &p->train;
    qt_fnv_s(&f, "qtrain-plan-v2");
    qt_fnv_s(&f, p->run_name);
    qt_fnv_s(&f, p->generator_version);
    qt_fnv_i(&f, p->n_ranks);
    for (int i = 0; i < QT_MESH_COUNT; i++) qt_fnv_i(&f, p->mesh[i]);
    qt_fnv_i(&f, p->shard_mode);
    qt_fnv_i(&f, p->zero1);
    const int64_t mi[] = {m->decoder_block, m->d, m->n_layers, m->vocab, m->cycle,
                          m->n_q_heads, m->n_kv_heads, m->head_dim, m->rotary_dim,
                          m->gdn_k_heads, m->gdn_v_heads, m->gdn_k_dim, m->gdn_v_dim,
                          m->gdn_conv, m->gdn_chunk, m->n_experts, m->top_k, m->moe_dim,
                          m->shared_dim};
    for (size_t i = 0; i < sizeof mi / sizeof mi[0]; i++) qt_fnv_i(&f, mi[i]);
    qt_fnv_f(&f, m->norm_eps);
    qt_fnv_f(&f, m->rope_theta);
    const int64_t ti[] = {t->micro_batch, t->seq_len, t->grad_accum, t->global_batch, t->steps,
                          t->schedule_steps};
    for (size_t i = 0; i < sizeof ti / sizeof ti[0]; i++) qt_fnv_i(&f, ti[i]);
    const float tf[] = {t->lr, t->adam_b1, t->adam_b2, t->adam_eps, t->weight_decay, t->clip,
                        t->warmup_frac, t->final_frac, t->lb_weight};
    for (size_t i = 0; i < sizeof tf / sizeof tf[0]; i++) qt_fnv_f(&f, tf[i]);
    qt_fnv_i(&f, p->arena_bytes);
    qt_fnv_i(&f, p->n_tensors);
    for (int32_t i = 0; i < p->n_tensors; i++) {
        const qt_tensor *x = &p->tensors[i];
        qt_fnv_s(&f, x->name);
        qt_fnv_i(&f, x->role);
        qt_fnv_i(&f, x->dtype);
        qt_fnv_i(&f, x->ndim);
        for (int d = 0; d < QT_MAX_DIMS; d++) {
            qt_fnv_i(&f, x->shape[d]);
            qt_fnv_i(&f, x->global_shape[d]);
            qt_fnv_i(&f, x->axes[d]);
            qt_fnv_i(&f, x->spec[d]);
        }
        qt_fnv_i(&f, x->offset);
        qt_fnv_i(&f, x->numel);
        for (int k = 0; k < QT_MAX_SEGS; k++) qt_fnv_i(&f, x->seg[k]);
        qt_fnv_i(&f, x->seg_dim);
    }
    qt_fnv_i(&f, p->n_params);
    for (int32_t i = 0; i < p->n_params; i++) {
        const qt_param *q = &p->params[i];
        qt_fnv_s(&f, q->name);
        qt_fnv_i(&f, q->tensor);
        qt_fnv_i(&f, q->flat_offset);
        qt_fnv_i(&f, q->numel);
        qt_fnv_i(&f, q->init);
        qt_fnv_f(&f, q->init_scale);
        qt_fnv_f(&f, q->init_lo);
        qt_fnv_f(&f, q->init_hi);
        qt_fnv_i(&f, q->layer);
        qt_fnv_i(&f, q->leaves);
    }
    const int64_t lay[] = {p->n_param_elems, p->params_offset, p->grads_offset,
                           p->adam_m_offset, p->adam_v_offset, p->n_tree_levels,
                           p->leaf_scratch_offset, p->leaf_scratch_elems, p->tokens,
                           p->targets, p->loss_seq, p->lb_seq, p->n_flat, p->batch_mask,
                           p->opt_mask, p->adam_elems, p->comm_scratch_offset,
                           p->comm_scratch_elems};
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) qt_fnv_i(&f, lay[i]);
    /* checkpoint staging: hashed only when present, so one-rank hashes are unchanged */
    if (p->staging_elems) {
        qt_fnv_i(&f, p->staging_offset);
        qt_fnv_i(&f, p->staging_elems);
    }
    for (int i = 0; i < QT_MAX_TREE_LEVELS; i++) qt_fnv_i(&f, p->tree_offset[i]);
    qt_fnv_i(&f, p->mb_elems);
    qt_fnv_i(&f, p->n_ranges);
    for (int32_t i = 0; i < p->n_ranges && p->ranges; i++) {
        const qt_flat_range *r = &p->ranges[i];
        const int64_t rv[] = {r->lo, r->n, r->reduce_mask, r->opt_mask, r->hold_mask, r->adam_lo,
                              r->mb_lo};
        for (size_t k = 0; k < sizeof rv / sizeof rv[0]; k++) qt_fnv_i(&f, rv[k]);
        if (p->layer_reduce) qt_fnv_i(&f, r->leaf_lo);
    }
    /* per-layer reduction and the compact gradient: hashed only when on, so the hashes of
     * every other plan are unchanged (their leaf windows are the flat offsets) */
    if (p->layer_reduce || p->grads_compact || p->params_compact) {
        qt_fnv_i(&f, p->layer_reduce);
        qt_fnv_i(&f, p->grads_compact);
        if (p->params_compact) qt_fnv_i(&f, p->params_compact);
        qt_fnv_i(&f, p->leaf_elems);
        for (int32_t i = 0; i < p->n_params; i++) qt_fnv_i(&f, p->params[i].leaf_offset);
    }
    qt_fnv_i(&f, p->n_init_ops);
    for (int32_t i = 0; i < p->n_init_ops; i++) qt_fnv_op(&f, &p->init_ops[i]);
    qt_fnv_i(&f, p->n_mb_ops);
    for (int32_t i = 0; i < p->n_mb_ops; i++) qt_fnv_op(&f, &p->mb_ops[i]);
    /* scan_layers: hashed only when present, so unrolled plans keep their hashes */
    if (p->n_scans > 0 && p->scans) {
        qt_fnv_i(&f, p->n_scans);
        qt_fnv_i(&f, p->n_mb_logical);
        for (int32_t k = 0; k < p->n_scans && k < QT_MAX_SCANS; k++) {
            const qt_scan *sc = &p->scans[k];
            qt_fnv_i(&f, sc->lo);
            qt_fnv_i(&f, sc->n);
            qt_fnv_i(&f, sc->count);
            for (int32_t i = 0; i < sc->n && sc->stride; i++) {
                for (int j = 0; j < QT_OP_MAX_T; j++) qt_fnv_i(&f, sc->stride[i].t[j]);
                for (int j = 0; j < QT_OP_MAX_A; j++) qt_fnv_i(&f, sc->stride[i].a[j]);
            }
        }
    }
    qt_fnv_i(&f, p->n_mb_levels);
    qt_fnv_i(&f, p->n_mbend_ops);
    for (int32_t i = 0; i < p->n_mbend_ops; i++) qt_fnv_op(&f, &p->mbend_ops[i]);
    qt_fnv_i(&f, p->n_step_ops);
    for (int32_t i = 0; i < p->n_step_ops; i++) qt_fnv_op(&f, &p->step_ops[i]);
    qt_fnv_i(&f, p->n_collectives);
    for (int32_t i = 0; i < p->n_collectives; i++) {
        const qt_collective *c = &p->collectives[i];
        qt_fnv_s(&f, c->name);
        qt_fnv_i(&f, c->kind);
        qt_fnv_i(&f, c->mask);
        qt_fnv_i(&f, c->offset);
        qt_fnv_i(&f, c->bytes);
    }
    return f.h;
}
