/* emit/emit.c - emission of plan.h, plan.c and plan_main.c.
 *
 * Output is a pure function of the plan (no dates, pointers or host state), so running
 * configgen twice gives byte-identical files. plan.c's qt_plan initializer names each field
 * of qt_plan_fields.def whose EWHEN holds, in its order, from the graph's plan view
 * (emit/hash.c); the tables are written positionally in the field order of qt_plan.h with a comment
 * naming each row, floats as round-trip decimal literals, and unused t[] slots as QT_NONE.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "emit/qt_cg_emit.h"

static const char *const role_names[QT_ROLE_COUNT] = {
    "QT_ROLE_PARAM", "QT_ROLE_GRAD", "QT_ROLE_ADAM_M", "QT_ROLE_ADAM_V", "QT_ROLE_INPUT",
    "QT_ROLE_ACT", "QT_ROLE_SAVED", "QT_ROLE_ACT_GRAD", "QT_ROLE_LOSS", "QT_ROLE_TABLE",
    "QT_ROLE_SCRATCH",
};

static const char *const init_names[QT_INIT_COUNT] = {
    "QT_INIT_ZEROS", "QT_INIT_ONES", "QT_INIT_NORMAL", "QT_INIT_TRUNC_NORMAL",
    "QT_INIT_LOG_UNIFORM",
};

static void upper(char *dst, size_t n, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++) dst[i] = (char)toupper((unsigned char)src[i]);
    dst[i] = 0;
}

static const char *flit(char *buf, float v)
{
    qt_cg_float_literal(buf, 48, v);
    return buf;
}

void qt_cg_emit_plan_h(const qt_cg_graph *g, const char *banner, qt_cg_buf *b)
{
    char up[160];
    upper(up, sizeof up, g->s->cname);
    qt_cg_buf_printf(b, "/* plan.h - %s */\n", banner);
    qt_cg_buf_printf(b, "#ifndef QT_PLAN_%s_H\n#define QT_PLAN_%s_H\n\n", up, up);
    qt_cg_buf_printf(b, "#include \"qt_plan.h\"\n\n");
    qt_cg_buf_printf(b, "#define QT_PLAN_HASH_%s 0x%016llxull\n", up, (unsigned long long)g->hash);
    qt_cg_buf_printf(b, "#define QT_PLAN_ARENA_BYTES_%s %lldll\n\n", up,
                     (long long)g->arena_bytes);
    if (!g->pp_graphs) {
        qt_cg_buf_printf(b, "extern const qt_plan qt_plan_%s;\n\n#endif\n", g->s->cname);
        return;
    }
    /* a pipeline: one plan per stage (plan_main.c picks the rank's) */
    for (int st = 0; st < g->s->pp_stages; st++)
        qt_cg_buf_printf(b, "extern const qt_plan qt_plan_%s;\n", g->pp_graphs[st].s->cname);
    qt_cg_buf_printf(b, "\n#endif\n");
}

static void emit_ops(qt_cg_buf *b, const qt_cg_graph *g, const char *tab, const qt_op *ops,
                     int n)
{
    const char *c = g->s->cname;
    if (!n) {
        qt_cg_buf_printf(b, "static const qt_op qt_%s_%s[1] = {{0}};\n\n", tab, c);
        return;
    }
    qt_cg_buf_printf(b, "static const qt_op qt_%s_%s[%d] = {\n", tab, c, n);
    for (int i = 0; i < n; i++) {
        const qt_op *o = &ops[i];
        char f0[48], f1[48];
        char kind[64];
        upper(kind, sizeof kind, qt_cg_op_name(o->kind));
        qt_cg_buf_printf(b, "    /* %d %s:", i, qt_cg_op_name(o->kind));
        for (int s = 0; s < QT_OP_MAX_T; s++)
            if (o->t[s] >= 0) qt_cg_buf_printf(b, " %s", g->ts[o->t[s]].t.name);
        qt_cg_buf_printf(b, " */\n    {QT_OP_%s, 0x%x, {", kind, (unsigned)o->flags);
        for (int s = 0; s < QT_OP_MAX_T; s++)
            qt_cg_buf_printf(b, "%s%d", s ? ", " : "", (int)o->t[s]);
        qt_cg_buf_printf(b, "}, {");
        for (int s = 0; s < QT_OP_MAX_A; s++)
            qt_cg_buf_printf(b, "%s%lldll", s ? ", " : "", (long long)o->a[s]);
        qt_cg_buf_printf(b, "}, {%s, %s}},\n", flit(f0, o->f[0]), flit(f1, o->f[1]));
    }
    qt_cg_buf_printf(b, "};\n\n");
}

/* The resolved config as one C string literal, "key=value\n" for every base.yml key in
 * base order, each value rendered as YAML flow text after all layers and overrides
 * (run_name resolved to the plan's). Escapes keep it a valid literal; '?' is escaped so
 * no trigraph can form under -std=c11. */
static void emit_config_text(const qt_cg_config *cfg, const qt_cg_settings *s, qt_cg_buf *b)
{
    qt_cg_buf_printf(b, "static const char qt_config_text_%s[] =\n", s->cname);
    for (int i = 0; i < cfg->n; i++) {
        qt_cg_buf v = {0};
        if (!strcmp(cfg->k[i].key, "run_name")) qt_cg_buf_printf(&v, "%s", s->run_name);
        else qt_cg_val_render(cfg->k[i].val, &v);
        qt_cg_buf_printf(b, "    \"%s=", cfg->k[i].key);
        for (size_t j = 0; j < v.n; j++) {
            char ch = v.p[j];
            if (ch == '"' || ch == '\\' || ch == '?') qt_cg_buf_printf(b, "\\%c", ch);
            else if ((unsigned char)ch < 0x20) qt_cg_buf_printf(b, "\\%03o", (unsigned char)ch);
            else qt_cg_buf_printf(b, "%c", ch);
        }
        qt_cg_buf_printf(b, "\\n\"\n");
        qt_cg_buf_free(&v);
    }
    qt_cg_buf_printf(b, "    \"\";\n\n");
}

static void emit_tensors(qt_cg_buf *b, const qt_cg_graph *g, const char *c)
{
    qt_cg_buf_printf(b, "static const qt_tensor qt_tensors_%s[%d] = {\n", c, g->nt);
    for (int i = 0; i < g->nt; i++) {
        const qt_tensor *t = &g->ts[i].t;
        qt_cg_buf_printf(b, "    /* %d */ {\"%s\", %s, %s, %d, {%lld, %lld, %lld, %lld}, "
                         "{%lld, %lld, %lld, %lld}, {%d, %d, %d, %d}, {%d, %d, %d, %d}, %lldll, "
                         "%lldll, {%lld, %lld, %lld}, %d},\n", i, t->name, role_names[t->role],
                         t->dtype == QT_I32 ? "QT_I32" : t->dtype == QT_BF16 ? "QT_BF16" : "QT_F32",
                         t->ndim,
                         (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2],
                         (long long)t->shape[3], (long long)t->global_shape[0],
                         (long long)t->global_shape[1], (long long)t->global_shape[2],
                         (long long)t->global_shape[3], t->axes[0], t->axes[1], t->axes[2],
                         t->axes[3], t->spec[0], t->spec[1], t->spec[2], t->spec[3],
                         (long long)t->offset, (long long)t->numel, (long long)t->seg[0],
                         (long long)t->seg[1], (long long)t->seg[2], (int)t->seg_dim);
    }
    qt_cg_buf_printf(b, "};\n\n");
}

static void emit_params(qt_cg_buf *b, const qt_cg_graph *g, const char *c)
{
    char f[3][48];
    qt_cg_buf_printf(b, "static const qt_param qt_params_%s[%d] = {\n", c, g->np);
    for (int i = 0; i < g->np; i++) {
        const qt_param *p = &g->ps[i];
        qt_cg_buf_printf(b, "    /* %d */ {\"%s\", %d, %lldll, %lldll, %s, %s, %s, %s, %d, %lldll, "
                         "%lldll},\n", i, p->name, p->tensor, (long long)p->flat_offset,
                         (long long)p->numel, init_names[p->init], flit(f[0], p->init_scale),
                         flit(f[1], p->init_lo), flit(f[2], p->init_hi), p->layer,
                         (long long)p->leaves, (long long)p->leaf_offset);
    }
    qt_cg_buf_printf(b, "};\n\n");
}

/* scan_layers: each scanned block's strides, then the scan table. */
static void emit_scans(qt_cg_buf *b, const qt_cg_graph *g, const char *c)
{
    for (int k = 0; k < g->n_scans; k++) {
        qt_cg_buf_printf(b, "static const qt_op_stride qt_scan_stride_%s_%d[%d] = {\n", c, k,
                         g->scans[k].n);
        for (int j = 0; j < g->scans[k].n; j++) {
            const qt_op_stride *st = &g->scan_stride[k][j];
            qt_cg_buf_printf(b, "    {{");
            for (int i = 0; i < QT_OP_MAX_T; i++)
                qt_cg_buf_printf(b, "%s%d", i ? ", " : "", (int)st->t[i]);
            qt_cg_buf_printf(b, "}, {");
            for (int i = 0; i < QT_OP_MAX_A; i++)
                qt_cg_buf_printf(b, "%s%lldll", i ? ", " : "", (long long)st->a[i]);
            qt_cg_buf_printf(b, "}},\n");
        }
        qt_cg_buf_printf(b, "};\n\n");
    }
    qt_cg_buf_printf(b, "static const qt_scan qt_scans_%s[%d] = {\n", c, g->n_scans);
    for (int k = 0; k < g->n_scans; k++)
        qt_cg_buf_printf(b, "    {%d, %d, %d, qt_scan_stride_%s_%d},\n", g->scans[k].lo,
                         g->scans[k].n, g->scans[k].count, c, k);
    qt_cg_buf_printf(b, "};\n\n");
}

static void emit_ranges(qt_cg_buf *b, const qt_cg_graph *g, const char *c)
{
    qt_cg_buf_printf(b, "static const qt_flat_range qt_ranges_%s[%d] = {\n", c, g->n_ranges);
    for (int i = 0; i < g->n_ranges; i++) {
        const qt_flat_range *r = &g->ranges[i];
        qt_cg_buf_printf(b, "    /* %d */ {%lldll, %lldll, 0x%x, 0x%x, 0x%x, %lldll, %lldll, %lldll},\n",
                         i, (long long)r->lo, (long long)r->n, (unsigned)r->reduce_mask,
                         (unsigned)r->opt_mask, (unsigned)r->hold_mask, (long long)r->adam_lo,
                         (long long)r->mb_lo, (long long)r->leaf_lo);
    }
    qt_cg_buf_printf(b, "};\n\n");
}

static void emit_collectives(qt_cg_buf *b, const qt_cg_graph *g, const char *c)
{
    qt_cg_buf_printf(b, "static const qt_collective qt_collectives_%s[%d] = {\n", c, g->ncoll);
    for (int i = 0; i < g->ncoll; i++) {
        const qt_collective *k = &g->coll[i];
        qt_cg_buf_printf(b, "    /* %d */ {\"%s\", %s, 0x%x, %lldll, %lldll},\n", i, k->name,
                         qt_coll_kind(k->kind)->enum_name, (unsigned)k->mask, (long long)k->offset,
                         (long long)k->bytes);
    }
    qt_cg_buf_printf(b, "};\n\n");
}

/* The value of qt_plan.model (after ".model = "), its line ending included. */
static void emit_model(qt_cg_buf *b, const qt_model_dims *m)
{
    char f[2][48];
    qt_cg_buf_printf(b, "{.decoder_block = %d, .d = %lld, .n_layers = %lld, "
                     ".vocab = %lld, .cycle = %lld,\n              .n_q_heads = %lld, "
                     ".n_kv_heads = %lld, .head_dim = %lld, .rotary_dim = %lld,\n"
                     "              .gdn_k_heads = %lld, .gdn_v_heads = %lld, .gdn_k_dim = %lld, "
                     ".gdn_v_dim = %lld, .gdn_conv = %lld, .gdn_chunk = %lld,\n"
                     "              .n_experts = %lld, .top_k = %lld, .moe_dim = %lld, "
                     ".shared_dim = %lld,\n              .norm_eps = %s, .rope_theta = %s},\n",
                     m->decoder_block, (long long)m->d, (long long)m->n_layers,
                     (long long)m->vocab, (long long)m->cycle, (long long)m->n_q_heads,
                     (long long)m->n_kv_heads, (long long)m->head_dim, (long long)m->rotary_dim,
                     (long long)m->gdn_k_heads, (long long)m->gdn_v_heads,
                     (long long)m->gdn_k_dim, (long long)m->gdn_v_dim, (long long)m->gdn_conv,
                     (long long)m->gdn_chunk, (long long)m->n_experts, (long long)m->top_k,
                     (long long)m->moe_dim, (long long)m->shared_dim, flit(f[0], m->norm_eps),
                     flit(f[1], m->rope_theta));
}

/* The value of qt_plan.train (after ".train = "), its line ending included. */
static void emit_train(qt_cg_buf *b, const qt_train_cfg *t)
{
    char f[9][48];
    qt_cg_buf_printf(b, "{.micro_batch = %lld, .seq_len = %lld, .grad_accum = %lld, "
                     ".global_batch = %lld,\n              .steps = %lld, .schedule_steps = "
                     "%lld, .lr = %s, .adam_b1 = %s, .adam_b2 = %s,\n              .adam_eps = "
                     "%s, .weight_decay = %s, .clip = %s, .warmup_frac = %s,\n"
                     "              .final_frac = %s, .lb_weight = %s",
                     (long long)t->micro_batch, (long long)t->seq_len, (long long)t->grad_accum,
                     (long long)t->global_batch, (long long)t->steps,
                     (long long)t->schedule_steps, flit(f[0], t->lr), flit(f[1], t->adam_b1),
                     flit(f[2], t->adam_b2), flit(f[3], t->adam_eps), flit(f[4], t->weight_decay),
                     flit(f[5], t->clip), flit(f[6], t->warmup_frac), flit(f[7], t->final_frac),
                     flit(f[8], t->lb_weight));
    /* the groups appended for issue 33, only when set (older plans keep their bytes) */
    if (t->lr_schedule)
        qt_cg_buf_printf(b, ",\n              .lr_schedule = %d, .wsd_cosine = %d, .wsd_warmup = "
                         "%lld, .wsd_decay = %lld", (int)t->lr_schedule, (int)t->wsd_cosine,
                         (long long)t->wsd_warmup, (long long)t->wsd_decay);
    if (t->z_loss != 0.0f)
        qt_cg_buf_printf(b, ",\n              .z_loss = %s", flit(f[0], t->z_loss));
    if (t->eval_interval > 0)
        qt_cg_buf_printf(b, ",\n              .eval_interval = %lld, .eval_start = %lld, "
                         ".eval_steps = %lld,\n              .eval_batch = %lld, .eval_fwd_ops = "
                         "%lld, .target_eval_loss = %s", (long long)t->eval_interval,
                         (long long)t->eval_start, (long long)t->eval_steps,
                         (long long)t->eval_batch, (long long)t->eval_fwd_ops,
                         flit(f[1], t->target_eval_loss));
    if (t->eval_global) /* issue 35: an eval batch whose sequences leave slots padded */
        qt_cg_buf_printf(b, ",\n              .eval_global = %lld", (long long)t->eval_global);
    qt_cg_buf_printf(b, "},\n");
}

/* How plan.c writes a field of each KIND of qt_plan_fields.def (the value after
 * "    .<name> = " and the line's end): F the field, N its row count member, c the run's
 * C name; tables and symbols are named qt_<field>_<run>. */
#define QT_CG_E_I32(F, N) qt_cg_buf_printf(b, "%d,\n", (int)p->F)
#define QT_CG_E_F32(F, N) qt_cg_buf_printf(b, "%s,\n", flit(fb, p->F))
#define QT_CG_E_I64(F, N) qt_cg_buf_printf(b, "%lldll,\n", (long long)p->F)
#define QT_CG_E_I64L QT_CG_E_I64
#define QT_CG_E_X8(F, N) qt_cg_buf_printf(b, "0x%x,\n", (unsigned)p->F)
#define QT_CG_E_U64X(F, N) qt_cg_buf_printf(b, "0x%016llxull,\n", (unsigned long long)p->F)
#define QT_CG_E_STR(F, N) qt_cg_buf_printf(b, "\"%s\",\n", p->F)
#define QT_CG_E_SYM(F, N) qt_cg_buf_printf(b, "qt_%s_%s,\n", #F, c)
#define QT_CG_E_TEXT QT_CG_E_SYM
#define QT_CG_E_ARENA QT_CG_E_SYM
#define QT_CG_E_TENSORS QT_CG_E_SYM
#define QT_CG_E_PARAMS QT_CG_E_SYM
#define QT_CG_E_RANGES QT_CG_E_SYM
#define QT_CG_E_OPS QT_CG_E_SYM
#define QT_CG_E_SCANS QT_CG_E_SYM
#define QT_CG_E_COLLS(F, N)                                                                \
    if (p->N) QT_CG_E_SYM(F, N);                                                           \
    else qt_cg_buf_printf(b, "0,\n")
#define QT_CG_E_MODEL(F, N) emit_model(b, &p->F)
#define QT_CG_E_TRAIN(F, N) emit_train(b, &p->F)
#define QT_CG_E_MESH(F, N)                                                                 \
    for (int i = 0; i < QT_MESH_COUNT; i++)                                                \
        qt_cg_buf_printf(b, "%s%d", i ? ", " : "{", (int)p->F[i]);                         \
    qt_cg_buf_printf(b, "}, /* data fsdp tensor expert context */\n")
#define QT_CG_E_LEVELS(F, N)                                                               \
    for (int i = 0; i < QT_TREE_LEVELS_KEPT(p->n_tree_levels); i++)                        \
        qt_cg_buf_printf(b, "%s%lldll", i ? ", " : "{", (long long)p->F[i]);               \
    qt_cg_buf_printf(b, "},\n")

/* const qt_plan qt_plan_<run>: every field of qt_plan_fields.def whose EWHEN holds, in
 * order, by designated initializer. */
static void emit_plan_struct(qt_cg_buf *b, const qt_plan *p, const char *c)
{
    qt_cg_buf_printf(b, "const qt_plan qt_plan_%s = {\n", c);
    char fb[48];
    (void)fb;
#define QT_PLAN_FIELD(KIND, F, N, HASH, HWHEN, EWHEN, CG)                                  \
    if (EWHEN) {                                                                           \
        qt_cg_buf_printf(b, "    .%s = ", #F);                                             \
        QT_CG_E_##KIND(F, N);                                                              \
    }
#include "qt_plan_fields.def"
#undef QT_PLAN_FIELD
    qt_cg_buf_printf(b, "};\n");
}

/* One plan's tables and its qt_plan_<c> (c: its settings' C name). */
static void emit_plan_tables(const qt_cg_graph *g, const qt_cg_config *cfg, qt_cg_buf *b)
{
    const char *c = g->s->cname;
    qt_cg_buf_printf(b, "__attribute__((section(\".bss.qt_arena\"), aligned(%u))) "
                     "static unsigned char qt_arena_%s[%lld];\n\n", QT_ARENA_ALIGN, c,
                     (long long)g->arena_bytes);
    emit_tensors(b, g, c);
    emit_params(b, g, c);
    emit_ops(b, g, "init_ops", g->init, g->ninit);
    emit_ops(b, g, "mb_ops", g->mbc ? g->mbc : g->mb, g->mbc ? g->nmbc : g->nmb);
    if (g->n_scans) emit_scans(b, g, c);
    emit_ops(b, g, "step_ops", g->step, g->nstep);
    if (g->nmbend) emit_ops(b, g, "mbend_ops", g->mbend, g->nmbend);
    emit_ranges(b, g, c);
    if (g->ncoll) emit_collectives(b, g, c);
    emit_config_text(cfg, g->s, b);
    qt_cg_plan_view v;
    qt_cg_plan_view_init(&v, g);
    emit_plan_struct(b, &v.p, c);
    qt_cg_plan_view_free(&v);
}

void qt_cg_emit_plan_c(const qt_cg_graph *g, const qt_cg_config *cfg, const char *banner,
                       qt_cg_buf *b)
{
    qt_cg_buf_printf(b, "/* plan.c - %s */\n", banner);
    qt_cg_buf_printf(b, "#include \"plan.h\"\n#include \"qt_ops.h\"\n\n");
    if (!g->pp_graphs) {
        emit_plan_tables(g, cfg, b);
        return;
    }
    /* a pipeline: every stage's stage-local plan, one after the other (each its own arena) */
    for (int st = 0; st < g->s->pp_stages; st++) {
        if (st) qt_cg_buf_printf(b, "\n");
        emit_plan_tables(&g->pp_graphs[st], cfg, b);
    }
}

void qt_cg_emit_plan_main(const qt_cg_graph *g, const char *banner, qt_cg_buf *b)
{
    qt_cg_buf_printf(b, "/* plan_main.c - %s\n * Selects this plan as the binary's plan "
                     "(qt_runtime.h: qt_main_plan). */\n", banner);
    qt_cg_buf_printf(b, "#include \"plan.h\"\n\nconst qt_plan *qt_main_plan(void);\n\n");
    if (!g->pp_graphs) {
        qt_cg_buf_printf(b, "const qt_plan *qt_main_plan(void) { return &qt_plan_%s; }\n",
                         g->s->cname);
        return;
    }
    /* a pipeline: the rank's stage, stage = rank div (ranks / S) (comm/qt_comm.h
     * qt_comm_world); a job of another size gets stage 0, whose rank check refuses it */
    const int S = g->s->pp_stages;
    qt_cg_buf_printf(b, "void qt_comm_world(int *rank, int *size);\n\n"
                     "static const qt_plan *const qt_main_stages[%d] = {", S);
    for (int st = 0; st < S; st++)
        qt_cg_buf_printf(b, "%s&qt_plan_%s", st ? ", " : "", g->pp_graphs[st].s->cname);
    qt_cg_buf_printf(b, "};\n\nconst qt_plan *qt_main_plan(void)\n{\n"
                     "    int rank = 0, size = 1;\n    qt_comm_world(&rank, &size);\n"
                     "    if (size != %d || rank < 0 || rank >= size) return qt_main_stages[0];\n"
                     "    return qt_main_stages[rank / (size / %d)];\n}\n",
                     g->s->n_ranks, S);
    /* every stage's plan by its index (checkpoints: the one-rank file of all stages) */
    qt_cg_buf_printf(b, "\nconst qt_plan *qt_main_stage_plan(int k);\n\n"
                     "const qt_plan *qt_main_stage_plan(int k)\n{\n"
                     "    return k >= 0 && k < %d ? qt_main_stages[k] : 0;\n}\n", S);
}
