/* base/plan_hash.c - 64-bit FNV-1a over a canonical serialisation of a plan (qt_plan_hash.h).
 *
 * Integers are serialised as 8 little-endian bytes, floats by their IEEE bits, strings as
 * length + bytes, field by field in the order of the HASH column of qt_plan_fields.def, so
 * equal plans hash equally on every host and compiler. Never covers banners, file names,
 * the arena address or the hash field. Compiled into both configgen and the firmware: one
 * definition of "the same plan". Base layer: it reads the plan tables and nothing else.
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

/* The groups of qt_train_cfg appended later (issue 33: the WSD schedule, the z-loss, the
 * held-out evaluation; issue 35: the eval batch's real sequences), each only when set, so
 * older plans keep their hashes. */
static void qt_ph_train_more(qt_fnv *f, const qt_train_cfg *t)
{
    if (t->lr_schedule) {
        const int64_t w[] = {t->lr_schedule, t->wsd_cosine, t->wsd_warmup, t->wsd_decay};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) qt_fnv_i(f, w[i]);
    }
    if (t->z_loss != 0.0f) qt_fnv_f(f, t->z_loss);
    if (t->eval_interval > 0) {
        const int64_t e[] = {t->eval_interval, t->eval_start, t->eval_steps, t->eval_batch,
                             t->eval_fwd_ops};
        for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) qt_fnv_i(f, e[i]);
        qt_fnv_f(f, t->target_eval_loss);
    }
    if (t->eval_global) qt_fnv_i(f, t->eval_global);   /* issue 35, only when set */
}

uint64_t qt_plan_hash(const qt_plan *p)
{
    qt_fnv f = {14695981039346656037ull};
    qt_fnv_s(&f, "qtrain-plan-v2");
    /* How each KIND of qt_plan_fields.def is hashed: field F, row count in member N. */
#define QT_PH_I32(F, N) qt_fnv_i(&f, p->F)
#define QT_PH_F32(F, N) qt_fnv_f(&f, p->F)
#define QT_PH_I64(F, N) qt_fnv_i(&f, p->F)
#define QT_PH_X8(F, N) qt_fnv_i(&f, p->F)
#define QT_PH_STR(F, N) qt_fnv_s(&f, p->F)
#define QT_PH_TEXT(F, N) (void)0
#define QT_PH_U64X(F, N) (void)0
#define QT_PH_ARENA(F, N) (void)0
#define QT_PH_I64L(F, N)                                                                   \
    qt_fnv_i(&f, p->F);                                                                    \
    for (int32_t i = 0; i < p->n_params; i++) qt_fnv_i(&f, p->params[i].leaf_offset)
#define QT_PH_MESH(F, N) for (int i = 0; i < QT_MESH_COUNT; i++) qt_fnv_i(&f, p->F[i])
#define QT_PH_LEVELS(F, N)                                                                 \
    for (int i = 0; i < QT_TREE_LEVELS_KEPT(p->n_tree_levels); i++) qt_fnv_i(&f, p->F[i])
#define QT_PH_MODEL(F, N)                                                                  \
    const qt_model_dims *m = &p->F;                                                        \
    const int64_t mi[] = {m->decoder_block, m->d, m->n_layers, m->vocab, m->cycle,         \
                          m->n_q_heads, m->n_kv_heads, m->head_dim, m->rotary_dim,         \
                          m->gdn_k_heads, m->gdn_v_heads, m->gdn_k_dim, m->gdn_v_dim,      \
                          m->gdn_conv, m->gdn_chunk, m->n_experts, m->top_k, m->moe_dim,   \
                          m->shared_dim};                                                  \
    for (size_t i = 0; i < sizeof mi / sizeof mi[0]; i++) qt_fnv_i(&f, mi[i]);             \
    qt_fnv_f(&f, m->norm_eps);                                                             \
    qt_fnv_f(&f, m->rope_theta)
#define QT_PH_TRAIN(F, N)                                                                  \
    const qt_train_cfg *t = &p->F;                                                         \
    const int64_t ti[] = {t->micro_batch, t->seq_len, t->grad_accum, t->global_batch,      \
                          t->steps, t->schedule_steps};                                    \
    for (size_t i = 0; i < sizeof ti / sizeof ti[0]; i++) qt_fnv_i(&f, ti[i]);             \
    const float tf[] = {t->lr, t->adam_b1, t->adam_b2, t->adam_eps, t->weight_decay,       \
                        t->clip, t->warmup_frac, t->final_frac, t->lb_weight};             \
    for (size_t i = 0; i < sizeof tf / sizeof tf[0]; i++) qt_fnv_f(&f, tf[i]);            \
    qt_ph_train_more(&f, t)
#define QT_PH_TENSORS(F, N)                                                                \
    for (int32_t i = 0; i < p->N; i++) {                                                   \
        const qt_tensor *x = &p->F[i];                                                     \
        qt_fnv_s(&f, x->name);                                                             \
        const int64_t xi[] = {x->role, x->dtype, x->ndim};                                 \
        for (int k = 0; k < 3; k++) qt_fnv_i(&f, xi[k]);                                   \
        for (int d = 0; d < QT_MAX_DIMS; d++) {                                            \
            const int64_t di[] = {x->shape[d], x->global_shape[d], x->axes[d], x->spec[d]}; \
            for (int k = 0; k < 4; k++) qt_fnv_i(&f, di[k]);                               \
        }                                                                                  \
        qt_fnv_i(&f, x->offset);                                                           \
        qt_fnv_i(&f, x->numel);                                                            \
        for (int k = 0; k < QT_MAX_SEGS; k++) qt_fnv_i(&f, x->seg[k]);                     \
        qt_fnv_i(&f, x->seg_dim);                                                          \
    }
#define QT_PH_PARAMS(F, N) /* leaf_offset: see I64L */                                     \
    for (int32_t i = 0; i < p->N; i++) {                                                   \
        const qt_param *q = &p->F[i];                                                      \
        qt_fnv_s(&f, q->name);                                                             \
        const int64_t qi[] = {q->tensor, q->flat_offset, q->numel, q->init};               \
        for (int k = 0; k < 4; k++) qt_fnv_i(&f, qi[k]);                                   \
        qt_fnv_f(&f, q->init_scale);                                                       \
        qt_fnv_f(&f, q->init_lo);                                                          \
        qt_fnv_f(&f, q->init_hi);                                                          \
        qt_fnv_i(&f, q->layer);                                                            \
        qt_fnv_i(&f, q->leaves);                                                           \
    }
#define QT_PH_RANGES(F, N) /* leaf_lo only with per-layer reduction */                     \
    for (int32_t i = 0; i < p->N && p->F; i++) {                                           \
        const qt_flat_range *r = &p->F[i];                                                 \
        const int64_t rv[] = {r->lo, r->n, r->reduce_mask, r->opt_mask, r->hold_mask,      \
                              r->adam_lo, r->mb_lo};                                       \
        for (size_t k = 0; k < sizeof rv / sizeof rv[0]; k++) qt_fnv_i(&f, rv[k]);         \
        if (p->layer_reduce) qt_fnv_i(&f, r->leaf_lo);                                     \
    }
#define QT_PH_OPS(F, N) for (int32_t i = 0; i < p->N; i++) qt_fnv_op(&f, &p->F[i])
#define QT_PH_SCANS(F, N)                                                                  \
    for (int32_t k = 0; k < p->N && k < QT_MAX_SCANS; k++) {                               \
        const qt_scan *sc = &p->F[k];                                                      \
        qt_fnv_i(&f, sc->lo);                                                              \
        qt_fnv_i(&f, sc->n);                                                               \
        qt_fnv_i(&f, sc->count);                                                           \
        for (int32_t i = 0; i < sc->n && sc->stride; i++) {                                \
            for (int j = 0; j < QT_OP_MAX_T; j++) qt_fnv_i(&f, sc->stride[i].t[j]);        \
            for (int j = 0; j < QT_OP_MAX_A; j++) qt_fnv_i(&f, sc->stride[i].a[j]);        \
        }                                                                                  \
    }
#define QT_PH_COLLS(F, N)                                                                  \
    for (int32_t i = 0; i < p->N; i++) {                                                   \
        const qt_collective *c = &p->F[i];                                                 \
        qt_fnv_s(&f, c->name);                                                             \
        const int64_t ci[] = {c->kind, c->mask, c->offset, c->bytes};                      \
        for (int k = 0; k < 4; k++) qt_fnv_i(&f, ci[k]);                                   \
    }
    /* The fields in their fixed hash order (qt_plan_fields.def HASH), each only when its
     * HWHEN holds (groups added later are hashed only when present). */
    for (int place = 0; place < QT_PLAN_N_HASHED; place++) {
        switch (place) {
#define QT_PLAN_FIELD(KIND, F, N, HASH, HWHEN, EWHEN, CG)                                  \
        case HASH:                                                                         \
            if (HWHEN) { QT_PH_##KIND(F, N); }                                             \
            break;
#include "qt_plan_fields.def"
#undef QT_PLAN_FIELD
        default:
            break;
        }
    }
    return f.h;
}
