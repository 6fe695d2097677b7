/* ckpt_common.c - what every checkpoint reader and writer shares (ckpt_common.h): the
 * record of the last load (qt_checkpoint_ident) and the data hash saves record, the check
 * that the plan can be mapped, the window-by-window save of a piece (qt_ckpt_save_piece),
 * the state compatibility hash, and the metadata integer parser. Below the file dispatcher (checkpoint.c), the sharded loader (ckpt_shards.c) and
 * the directory writer (ckpt_dir.c), which call it and never each other's helpers.
 *
 * Invariants: the state hash depends only on what sets the training trajectory and the
 * meaning of the optimizer state (qt_io.h), never on the mesh, the batch split or the arena
 * layout; the module's state is one static struct; no heap.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "qt_io.h"
#include "qt_err.h"
#include "qt_ops.h"
#include "ckpt_common.h"
#include "ckpt_map.h"
#include "ckpt_pp.h"
#include "safetensors.h"
#include "runtime/qt_ckpt_gather.h"

static struct {
    qt_ckpt_ident ident;                     /* what the last load read */
    int data_hash_set;
    uint64_t data_hash;                      /* recorded by saves ("data_hash") */
    int64_t data_holdout;                    /* recorded by saves when > 0 ("data_holdout") */
} qt_ckc;

const qt_ckpt_ident *qt_checkpoint_ident(void) { return &qt_ckc.ident; }
qt_ckpt_ident *qt_ckpt_ident_mut(void) { return &qt_ckc.ident; }

void qt_checkpoint_set_data_hash(uint64_t hash)
{
    qt_ckc.data_hash = hash;
    qt_ckc.data_hash_set = 1;
}

void qt_checkpoint_set_data_holdout(int64_t n) { qt_ckc.data_holdout = n; }

void qt_ckpt_state_change(const char *path, const char *kind, const char *was,
                          const char *now, char *note, size_t n)
{
    qt_ckpt_ident *id = &qt_ckc.ident;
    id->state_changed = 1;
    snprintf(id->state_kind, sizeof id->state_kind, "%s", kind);
    snprintf(id->state_was, sizeof id->state_was, "%s", was);
    snprintf(id->state_now, sizeof id->state_now, "%s", now);
    snprintf(note, n, "allow_state_change=1: %s: optimizer state was saved for %s %s, this "
             "plan's is %s (another model setting, optimizer, schedule, global batch or "
             "objective); resuming its Adam moments and step anyway: not a bit-exact resume "
             "(recorded in the run manifest)", path, kind, was, now);
}

int qt_ckpt_data_holdout(char *out)
{
    if (qt_ckc.data_holdout <= 0)
        return 0;
    snprintf(out, 24, "%lld", (long long)qt_ckc.data_holdout);
    return 1;
}

int qt_ckpt_data_hash(char *out)
{
    if (!qt_ckc.data_hash_set)
        return 0;
    snprintf(out, 24, "0x%016llx", (unsigned long long)qt_ckc.data_hash);
    return 1;
}

const char *qt_ckpt_dtype_meta(const qt_plan *p)
{
    return p->dtype == QT_BF16 ? "bfloat16" : NULL;
}

const char *qt_ckpt_no_state_hint(const char *fmt)
{
    return fmt && !strcmp(fmt, QT_CKPT_FORMAT)
               ? "load_weights_only=1 starts from its weights at step 0"
               : "its weights load, from step 0";
}

int qt_ckpt_buffer_meta(const qt_plan *p, char *out, size_t n)
{
    for (int s = 0; s < qt_ckpp_count(p); s++) {
        const qt_plan *q = qt_ckpp_stage(p, s);
        if (!q->moe_ragged) continue;
        for (qt_mb_cursor c = qt_mb_begin(q); qt_mb_next(&c);)
            if (c.op->kind == QT_OP_MOE_RAGGED) {
                const int64_t E = QT_A(c.op, MOE_RAGGED, E), El = QT_A(c.op, MOE_RAGGED, El);
                snprintf(out, n, "ep=%lld tokens=%lld rows=%lld microbatches=%lld",
                         (long long)(El > 0 ? E / El : 0), (long long)QT_A(c.op, MOE_RAGGED, T),
                         (long long)QT_A(c.op, MOE_RAGGED, B), (long long)q->train.grad_accum);
                return 1;
            }
    }
    return 0;
}

int qt_ckpt_check_plan(const qt_plan *p, const char *path)
{
    (void)path;
    /* a pipeline: every stage's plan (the writer declares them all; every rank agrees) */
    for (int s = 0; s < qt_ckpp_count(p); s++) {
        const qt_plan *q = qt_ckpp_stage(p, s);
        for (int32_t i = 0; i < q->n_params; i++)
            if (!qt_ckpt_count(q, i, 0))
                return QT_E_PLAN;
        int rc = qt_ckpt_dist_check(q);
        if (rc) return rc;
    }
    return QT_OK;
}

/* ---- saving a piece window by window ---- */

int64_t qt_ckpt_row_elems(const qt_plan *p, int32_t i)
{
    const qt_tensor *t = &p->tensors[p->params[i].tensor];
    int64_t n = 1;
    for (int d = 1; d < t->ndim; d++) n *= t->global_shape[d];
    return n;
}

/* Global elements [ga, gb) of parameter i of region src, window by window (aligned windows
 * of qt_ckpt_window_rows rows, gathered when the run leaves the one held). */
static int qt_ckpt_save_run(const qt_plan *p, int src, int32_t i, int64_t ga, int64_t gb,
                            int write, int *wrc, qt_ckpt_win *w)
{
    const int64_t row = qt_ckpt_row_elems(p, i), wr = qt_ckpt_window_rows(p, i);
    const int64_t rows = p->tensors[p->params[i].tensor].global_shape[0];
    while (ga < gb) {
        const int64_t r = ga / row;
        if (!(w->w1 > w->w0 && r >= w->w0 && r < w->w1)) {
            w->w0 = r / wr * wr;
            w->w1 = w->w0 + wr < rows ? w->w0 + wr : rows;
            int rc = qt_ckpt_gather_rows(p, src, i, w->w0, w->w1, &w->base);
            if (rc) {
                w->w1 = 0;
                return rc;
            }
        }
        const int64_t end = gb < w->w1 * row ? gb : w->w1 * row;
        if (write == QT_CKPT_SEND) {   /* a pipeline stage's data, to the writer */
            int rc = qt_ckpp_put(w->base + (ga - w->w0 * row), 4 * (end - ga));
            if (rc) return rc;
        } else if (write && !*wrc) {
            *wrc = qt_st_wwrite(w->base + (ga - w->w0 * row), 4 * (end - ga));
        }
        ga = end;
    }
    return QT_OK;
}

int qt_ckpt_save_piece(const qt_plan *p, int src, int32_t i, int32_t k, int write, int *wrc,
                       qt_ckpt_win *w)
{
    qt_ckpt_piece pc;
    qt_ckpt_piece_at(p, i, 0, k, &pc);
    const int64_t rl = pc.row_len;
    if (pc.kind == QT_MAP_IDENT || pc.kind == QT_MAP_ROWS)   /* plan rows row0 .. + rows */
        return qt_ckpt_save_run(p, src, i, pc.row0 * rl, (pc.row0 + pc.rows) * rl, write, wrc, w);
    for (int64_t r = 0; r < pc.rows; r++) {
        const int64_t g = qt_ckpt_plan_row(&pc, r) * rl;
        int rc = qt_ckpt_save_run(p, src, i, g, g + rl, write, wrc, w);
        if (rc) return rc;
    }
    return QT_OK;
}

/* ---- state compatibility hash (FNV-1a) ---- */

static void qt_sh_bytes(uint64_t *h, const void *b, size_t n)
{
    const unsigned char *c = b;
    for (size_t k = 0; k < n; k++) {
        *h ^= c[k];
        *h *= 0x100000001b3ull;
    }
}

static void qt_sh_i(uint64_t *h, int64_t v)
{
    qt_sh_bytes(h, &v, sizeof v);
}

static void qt_sh_f(uint64_t *h, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    qt_sh_i(h, u);
}

uint64_t qt_ckpt_state_hash(const qt_plan *p)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const qt_model_dims *m = &p->model;
    const qt_train_cfg *t = &p->train;
    qt_sh_bytes(&h, "qtrain-state-1", 14);
    const int64_t mi[] = {m->decoder_block, m->d, m->n_layers, m->vocab, m->cycle,
                          m->n_q_heads, m->n_kv_heads, m->head_dim, m->rotary_dim,
                          m->gdn_k_heads, m->gdn_v_heads, m->gdn_k_dim, m->gdn_v_dim,
                          m->gdn_conv, m->gdn_chunk, m->n_experts, m->top_k, m->moe_dim,
                          m->shared_dim, t->seq_len, t->global_batch, t->schedule_steps};
    for (size_t k = 0; k < sizeof mi / sizeof mi[0]; k++) qt_sh_i(&h, mi[k]);
    const float mf[] = {m->norm_eps, m->rope_theta, t->lr, t->adam_b1, t->adam_b2,
                        t->adam_eps, t->weight_decay, t->clip, t->warmup_frac,
                        t->final_frac, t->lb_weight};
    for (size_t k = 0; k < sizeof mf / sizeof mf[0]; k++) qt_sh_f(&h, mf[k]);
    if (t->lr_schedule) {  /* WSD (issue 33): only when set, so older states keep their hash */
        const int64_t w[] = {t->lr_schedule, t->wsd_cosine, t->wsd_warmup, t->wsd_decay};
        for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) qt_sh_i(&h, w[k]);
    }
    if (t->z_loss != 0.0f) qt_sh_f(&h, t->z_loss);  /* the objective (issue 33) */
    /* the parameters: a pipeline's blocks in order are the one-rank plan's (ckpt_pp.h) */
    const int S = qt_ckpp_count(p);
    /* the MTP head's weight in the objective (mtp_loss_scaling_factor, session 22), as the
     * z-loss: only when not MaxText's default 0.1, so the states of every plan with the
     * default keep their hash; read from the first stage whose plan has the head */
    for (int s = 0; s < S; s++) {
        const qt_plan *q = qt_ckpp_stage(p, s);
        if (q->mtp_layers <= 0) continue;
        if (q->mtp_factor != 0.1f) qt_sh_f(&h, q->mtp_factor);
        break;
    }
    /* the objective's data and MoE settings (session 23), as the z-loss only when not the
     * default, so every unpacked dropless plan's state keeps its hash: packing with its
     * separator (which targets have a loss, the normaliser), and token dropping (the
     * capacity C each expert keeps, or C = 0); the same on every stage. Not the receive
     * buffers' dropping (moe_ragged), whose bits depend on the expert degree (a mesh). Not
     * the compute dtype: bf16 and fp32 plans keep the same fp32 masters and moments, so
     * the state resumes across them (not bit-exactly: the checkpoint's "dtype", main.c). */
    const qt_plan *q0 = qt_ckpp_stage(p, 0);
    if (q0->packing) {
        qt_sh_bytes(&h, "packing", 8);
        qt_sh_i(&h, q0->pack_eos);
    }
    if (q0->moe_capacity > 0 || q0->moe_drop_all) {
        qt_sh_bytes(&h, "capacity", 9);
        qt_sh_i(&h, q0->moe_capacity);
        qt_sh_i(&h, q0->moe_drop_all);
    }
    int64_t n_params = 0;
    for (int s = 0; s < S; s++) n_params += qt_ckpp_stage(p, s)->n_params;
    qt_sh_i(&h, n_params);
    for (int b = 0; b < qt_ckpp_blocks(p); b++) {
        const qt_ckpp_blk *k = qt_ckpp_block(p, b);
        const qt_plan *q = qt_ckpp_stage(p, k->stage);
        for (int32_t i = k->i0; i < k->i1; i++) {
            const qt_tensor *x = &q->tensors[q->params[i].tensor];
            qt_sh_bytes(&h, q->params[i].name, strlen(q->params[i].name) + 1);
            qt_sh_i(&h, x->ndim);
            for (int d = 0; d < x->ndim; d++) qt_sh_i(&h, x->global_shape[d]);
        }
    }
    /* the init schedule's attributes (rotary tables: dims, theta, mrope sections; every
     * stage's are the one-rank plan's, stage 0's hashed) and the delta-rule algorithm
     * (recurrent and chunked round differently; the first stage with a GDN layer) */
    for (int32_t i = 0; i < q0->n_init_ops; i++) {
        qt_sh_i(&h, q0->init_ops[i].kind);
        for (int k = 0; k < QT_OP_MAX_A; k++) qt_sh_i(&h, q0->init_ops[i].a[k]);
        for (int k = 0; k < QT_OP_MAX_F; k++) qt_sh_f(&h, q0->init_ops[i].f[k]);
    }
    int algo = 0;
    for (int s = 0; s < S && !algo; s++)
        for (qt_mb_cursor c = qt_mb_begin(qt_ckpp_stage(p, s)); qt_mb_next(&c);)
            if (c.op->kind == QT_OP_GDN_CORE_FWD) {
                qt_sh_i(&h, QT_A(c.op, GDN_CORE_FWD, algo));
                algo = 1;
                break;
            }
    return h;
}

int qt_ckpt_meta_int(const char *path, const char *key, const char *v, int64_t *out)
{
    int64_t x = 0;
    *out = 0;
    if (!v)
        return QT_OK;
    if (!*v)
        return qt_fail(QT_E_FORMAT, "%s: metadata %s is empty", path, key);
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9' || x > INT64_MAX / 10 - 10)
            return qt_fail(QT_E_FORMAT, "%s: metadata %s = \"%s\" is not a "
                              "non-negative integer", path, key, v);
        x = x * 10 + (*c - '0');
    }
    *out = x;
    return QT_OK;
}
