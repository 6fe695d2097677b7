/* qt_cg_hash.c - the plan hash: 64-bit FNV-1a over a canonical serialisation of every
 * table and scalar of the plan (never over banners or file names), so the firmware can
 * check at start-up that it runs the plan its tables came from. Integers are serialised
 * as 8 little-endian bytes, floats by their IEEE bits, strings as length + bytes; the
 * order of fields is fixed here, so equal plans hash equally on every host.
 */
#include <string.h>
#include "qt_cg.h"

typedef struct qt_cg_fnv {
    uint64_t h;
} qt_cg_fnv;

static void put_bytes(qt_cg_fnv *f, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        f->h ^= b[i];
        f->h *= 1099511628211ull;
    }
}

static void put_i(qt_cg_fnv *f, int64_t v)
{
    unsigned char b[8];
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(u >> (8 * i));
    put_bytes(f, b, 8);
}

static void put_f(qt_cg_fnv *f, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    put_i(f, (int64_t)u);
}

static void put_s(qt_cg_fnv *f, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    put_i(f, (int64_t)n);
    put_bytes(f, s ? s : "", n);
}

static void put_op(qt_cg_fnv *f, const qt_op *o)
{
    put_i(f, o->kind);
    put_i(f, o->flags);
    for (int i = 0; i < QT_OP_MAX_T; i++) put_i(f, o->t[i]);
    for (int i = 0; i < QT_OP_MAX_A; i++) put_i(f, o->a[i]);
    for (int i = 0; i < QT_OP_MAX_F; i++) put_f(f, o->f[i]);
}

uint64_t qt_cg_hash(const qt_cg_graph *g)
{
    qt_cg_fnv f = {14695981039346656037ull};
    const qt_cg_settings *s = g->s;
    const qt_model_dims *m = &s->m;
    const qt_train_cfg *t = &s->tr;
    put_s(&f, "qtrain-plan-v1");
    put_s(&f, s->run_name);
    put_s(&f, QT_CG_VERSION);
    put_i(&f, s->n_ranks);
    for (int i = 0; i < QT_MESH_COUNT; i++) put_i(&f, s->mesh[i]);
    put_i(&f, s->shard_mode);
    put_i(&f, s->zero1);
    int64_t mi[] = {m->decoder_block, m->d, m->n_layers, m->vocab, m->cycle, m->n_q_heads,
                    m->n_kv_heads, m->head_dim, m->rotary_dim, m->gdn_k_heads, m->gdn_v_heads,
                    m->gdn_k_dim, m->gdn_v_dim, m->gdn_conv, m->gdn_chunk, m->n_experts,
                    m->top_k, m->moe_dim, m->shared_dim};
    for (size_t i = 0; i < sizeof mi / sizeof mi[0]; i++) put_i(&f, mi[i]);
    put_f(&f, m->norm_eps);
    put_f(&f, m->rope_theta);
    int64_t ti[] = {t->micro_batch, t->seq_len, t->grad_accum, t->global_batch, t->steps,
                    t->schedule_steps};
    for (size_t i = 0; i < sizeof ti / sizeof ti[0]; i++) put_i(&f, ti[i]);
    float tf[] = {t->lr, t->adam_b1, t->adam_b2, t->adam_eps, t->weight_decay, t->clip,
                  t->warmup_frac, t->final_frac, t->lb_weight};
    for (size_t i = 0; i < sizeof tf / sizeof tf[0]; i++) put_f(&f, tf[i]);
    put_i(&f, g->arena_bytes);
    put_i(&f, g->nt);
    for (int i = 0; i < g->nt; i++) {
        const qt_tensor *x = &g->ts[i].t;
        put_s(&f, x->name);
        put_i(&f, x->role);
        put_i(&f, x->dtype);
        put_i(&f, x->ndim);
        for (int d = 0; d < QT_MAX_DIMS; d++) {
            put_i(&f, x->shape[d]);
            put_i(&f, x->global_shape[d]);
            put_i(&f, x->axes[d]);
            put_i(&f, x->spec[d]);
        }
        put_i(&f, x->offset);
        put_i(&f, x->numel);
    }
    put_i(&f, g->np);
    for (int i = 0; i < g->np; i++) {
        const qt_param *p = &g->ps[i];
        put_s(&f, p->name);
        put_i(&f, p->tensor);
        put_i(&f, p->flat_offset);
        put_i(&f, p->numel);
        put_i(&f, p->init);
        put_f(&f, p->init_scale);
        put_f(&f, p->init_lo);
        put_f(&f, p->init_hi);
        put_i(&f, p->layer);
    }
    int64_t lay[] = {g->n_param_elems, g->params_offset, g->grads_offset, g->adam_m_offset,
                     g->adam_v_offset, g->n_tree_levels, g->leaf_scratch_offset,
                     g->leaf_scratch_elems, g->tokens, g->targets, g->loss_seq, g->lb_seq};
    for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) put_i(&f, lay[i]);
    for (int i = 0; i < QT_MAX_TREE_LEVELS; i++) put_i(&f, g->tree_offset[i]);
    put_i(&f, g->ninit);
    for (int i = 0; i < g->ninit; i++) put_op(&f, &g->init[i]);
    put_i(&f, g->nmb);
    for (int i = 0; i < g->nmb; i++) put_op(&f, &g->mb[i]);
    return f.h;
}
