/* config/settings.c - validation of a layered config and its resolution into plan values.
 *
 * Every rule refuses a config configgen cannot honour, with a message that names the
 * key(s), the value(s), where they were set and what was expected, so a bad combination
 * fails at generation time. Invariants of a resolved qt_cg_settings: all sizes positive,
 * head counts divide, rotary dim even and > 0, weight_dtype float32, AdamW, any layer count
 * (layer l is full attention iff (l+1) % cycle == 0), an MoE with one shared expert and
 * normalised top-k weights (other values of shared_experts and norm_topk_prob are ignored
 * with a note, as MaxText ignores them: s->ignored; the MoE form and capacity:
 * config/moe.c; the schedule, objective and eval: config/train_rules.c), and the mesh: -1
 * axes resolve from num_ranks, the product must
 * be num_ranks, tensor and context powers of two times an odd factor of canonical_factor,
 * which the config may leave to the axes to imply (then s->canon_implied; mesh_canon)
 * (data, fsdp and expert any size that divides what they split); data, fsdp, tensor,
 * expert and context execute;
 * pipeline stages are planned (config/pipeline.c) and executed (docs/pipeline.md).
 * A message about a relation between keys blames the key the user set (its value not from
 * base.yml; qt_cg_known.where) and names the value it meets, with where that was set.
 * Sizes: every product of keys that sizes a tensor is computed with overflow checks and
 * must stay <= 2^56 elements (2^58 bytes, the safetensors bound), so no 64-bit size or
 * offset can wrap (base_emb_dim = vocab_size = 2^40 would give a 0-element embedding).
 * Floats: the plan stores float32, so every float key's float32 value must be finite, a
 * nonzero value must stay a normal float32 (1e-50 is 0), and a value that must be < 1
 * (Adam betas, warmup fraction) must still be < 1 in float32.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "../../firmware/kernels/matmul_canon.h"

typedef struct qt_cg_vctx {
    const qt_cg_config *c;
    char *err;
    size_t errlen;
} qt_cg_vctx;

static const qt_cg_known *kv(const qt_cg_vctx *v, const char *key)
{
    const qt_cg_known *k = qt_cg_config_find(v->c, key);
    if (!k) {
        fprintf(stderr, "configgen: internal error: base.yml lacks key '%s'\n", key);
        abort();
    }
    return k;
}

static int64_t geti(const qt_cg_vctx *v, const char *key)
{
    return (int64_t)strtod(kv(v, key)->val->s, NULL);
}

static double getf(const qt_cg_vctx *v, const char *key)
{
    return strtod(kv(v, key)->val->s, NULL);
}

static const char *gets_(const qt_cg_vctx *v, const char *key)
{
    return kv(v, key)->val->s;
}

static int getb(const qt_cg_vctx *v, const char *key)
{
    return !strcmp(kv(v, key)->val->s, "true");
}

/* "key=value (where): message" */
static int bad(const qt_cg_vctx *v, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(const qt_cg_vctx *v, const char *key, const char *fmt, ...)
{
    const qt_cg_known *k = kv(v, key);
    qt_cg_buf b = {0};
    qt_cg_val_render(k->val, &b);
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    qt_cg_fail(v->err, v->errlen, "%s=%s (%s): %s", key, b.p, k->where, msg);
    qt_cg_buf_free(&b);
    return -1;
}

/* 1 if key's value comes from base.yml (the user did not set it). */
static int from_base(const qt_cg_vctx *v, const char *key)
{
    const char *w = kv(v, key)->where, *b = v->c->base.file;
    return b && !strncmp(w, b, strlen(b)) && w[strlen(b)] == ':';
}

/* "key=value (where)" of another key, for a message that blames one key and names the
 * value it meets (configgen records where each value was set: qt_cg_known.where). */
static const char *other(const qt_cg_vctx *v, const char *key, char *buf, size_t cap)
{
    const qt_cg_known *k = kv(v, key);
    qt_cg_buf b = {0};
    qt_cg_val_render(k->val, &b);
    snprintf(buf, cap, "%s=%s (%s)", key, b.p, k->where);
    qt_cg_buf_free(&b);
    return buf;
}

static int positive(const qt_cg_vctx *v, const char *key, int64_t *out)
{
    int64_t x = geti(v, key);
    if (x <= 0) return bad(v, key, "must be a positive integer");
    *out = x;
    return 0;
}

/* Every float-typed key (base.yml) as float32: finite, and normal when nonzero. */
static int check_floats(const qt_cg_vctx *v)
{
    for (int i = 0; i < v->c->n; i++) {
        const qt_cg_known *k = &v->c->k[i];
        if (k->type != QT_CG_T_FLOAT || k->val->kind != QT_CG_SCALAR) continue;
        double x = strtod(k->val->s, NULL);
        float f = (float)x;
        if (!isfinite(f))
            return bad(v, k->key, "is %s in float32 (the plan stores float32); expected a "
                       "magnitude below 3.4e38", f > 0 ? "inf" : "-inf");
        if (x != 0.0 && !isnormal(f))
            return bad(v, k->key, "becomes %s in float32 (below the smallest normal float32, "
                       "1.18e-38; the plan stores float32); expected a magnitude of at least 1.18e-38",
                       f == 0.0f ? "0" : "a subnormal");
    }
    static const char *const below_one[] = {"adam_b1", "adam_b2", "warmup_steps_fraction"};
    for (size_t i = 0; i < sizeof below_one / sizeof below_one[0]; i++) {
        double x = getf(v, below_one[i]);
        if (x < 1.0 && (float)x >= 1.0f)
            return bad(v, below_one[i], "rounds to 1 in float32 (the plan stores float32); "
                       "expected a value below 1 - 6e-8");
    }
    return 0;
}

#define QT_CG_MAX_ELEMS ((int64_t)1 << 56)
#define QT_CG_MAX_LAYERS 1024   /* base_num_decoder_layers (check_shape) */

/* The product of n (key, value) factors (key NULL: a constant factor) sizes `what`; it
 * must not exceed QT_CG_MAX_ELEMS, with overflow-checked arithmetic. The message names every
 * key and value of the product. */
static int prod_ok(const qt_cg_vctx *v, const char *what, int n, ...)
{
    const char *keys[8], *first = NULL;
    int64_t vals[8], p = 1;
    int over = 0;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 8; i++) {
        keys[i] = va_arg(ap, const char *);
        vals[i] = va_arg(ap, int64_t);
        if (keys[i] && !first) first = keys[i];
        if (!over && (__builtin_mul_overflow(p, vals[i], &p) || p > QT_CG_MAX_ELEMS)) over = 1;
    }
    va_end(ap);
    if (!over) return 0;
    char msg[600];
    size_t m = 0;
    for (int i = 0; i < n && i < 8 && m < sizeof msg; i++)
        m += (size_t)snprintf(msg + m, sizeof msg - m, "%s%s%s%lld", i ? " x " : "",
                              keys[i] ? keys[i] : "", keys[i] ? "=" : "", (long long)vals[i]);
    return bad(v, first, "%s (%s) exceeds 2^56 elements, where 64-bit byte sizes and offsets "
               "would overflow; expected smaller sizes", msg, what);
}

/* The tensor sizes of the model and batch, as products of keys (model/graph.c shapes; a
 * sum inside a shape is bounded by a constant times its largest term). */
static int check_sizes(const qt_cg_vctx *v, const qt_cg_settings *s)
{
    const qt_model_dims *m = &s->m;
    const int64_t b = s->tr.micro_batch, S = s->tr.seq_len;
    const char *B = "per_device_batch_size", *SL = "max_target_length", *D = "base_emb_dim";
    return prod_ok(v, "embedding and lm_head", 2, D, m->d, "vocab_size", m->vocab) ||
           prod_ok(v, "logits", 3, B, b, SL, S, "vocab_size", m->vocab) ||
           prod_ok(v, "activations", 4, B, b, SL, S, D, m->d, NULL, (int64_t)4) ||
           prod_ok(v, "q_proj", 4, D, m->d, "base_num_query_heads", m->n_q_heads, "head_dim",
                   m->head_dim, NULL, (int64_t)2) ||
           prod_ok(v, "k_proj and v_proj", 3, D, m->d, "base_num_kv_heads", m->n_kv_heads,
                   "head_dim", m->head_dim) ||
           prod_ok(v, "attention probabilities", 4, B, b, "base_num_query_heads",
                   m->n_q_heads, SL, S, SL, S) ||
           prod_ok(v, "attention activations", 4, B, b, SL, S, "base_num_query_heads",
                   m->n_q_heads, "head_dim", m->head_dim) ||
           prod_ok(v, "GDN in_proj_qkvz", 4, D, m->d, "gdn_num_key_heads", m->gdn_k_heads,
                   "gdn_key_head_dim", m->gdn_k_dim, NULL, (int64_t)4) ||
           prod_ok(v, "GDN in_proj_qkvz", 4, D, m->d, "gdn_num_value_heads", m->gdn_v_heads,
                   "gdn_value_head_dim", m->gdn_v_dim, NULL, (int64_t)4) ||
           prod_ok(v, "GDN activations", 5, B, b, SL, S, "gdn_num_value_heads",
                   m->gdn_v_heads, "gdn_value_head_dim", m->gdn_v_dim, NULL, (int64_t)4) ||
           prod_ok(v, "GDN state checkpoints", 5, B, b, SL, S, "gdn_num_value_heads",
                   m->gdn_v_heads, "gdn_key_head_dim", m->gdn_k_dim, "gdn_value_head_dim",
                   m->gdn_v_dim) ||
           prod_ok(v, "GDN conv weight", 3, "gdn_num_value_heads", m->gdn_v_heads,
                   "gdn_value_head_dim", m->gdn_v_dim, "gdn_conv_kernel_dim", m->gdn_conv) ||
           prod_ok(v, "MoE router logits", 3, B, b, SL, S, "num_experts", m->n_experts) ||
           prod_ok(v, "routed expert activations", 5, B, b, SL, S, "num_experts_per_tok",
                   m->top_k, "base_moe_mlp_dim", m->moe_dim, NULL, (int64_t)2) ||
           prod_ok(v, "shared expert", 3, D, m->d, "shared_expert_mlp_dim", m->shared_dim,
                   NULL, (int64_t)2) ||
           prod_ok(v, "all layers' expert weights", 5, "base_num_decoder_layers", m->n_layers,
                   "num_experts", m->n_experts, "base_moe_mlp_dim", m->moe_dim, D, m->d, NULL,
                   (int64_t)3) ||
           prod_ok(v, "all layers' projections", 5, "base_num_decoder_layers", m->n_layers,
                   D, m->d, "base_num_query_heads", m->n_q_heads, "head_dim", m->head_dim,
                   NULL, (int64_t)4);
}

/* The decoder's kind and shape: sizes positive, head counts dividing, kernel limits. */
static int check_shape(const qt_cg_vctx *v, qt_cg_settings *s)
{
    qt_model_dims *m = &s->m;
    const char *db = gets_(v, "decoder_block");
    if (!strcmp(db, "qwen3_next")) m->decoder_block = 0;
    else if (!strcmp(db, "qwen3_5")) m->decoder_block = 1;
    else return bad(v, "decoder_block", "expected qwen3_next or qwen3_5");
    const char *ga = gets_(v, "gdn_core_algorithm");
    if (!strcmp(ga, "chunked")) s->gdn_chunked = 1;
    else if (!strcmp(ga, "recurrent")) s->gdn_chunked = 0;
    else return bad(v, "gdn_core_algorithm", "expected chunked or recurrent");
    static const struct { const char *key; size_t off; } sizes[] = {
        {"base_emb_dim", offsetof(qt_model_dims, d)},
        {"base_num_decoder_layers", offsetof(qt_model_dims, n_layers)},
        {"vocab_size", offsetof(qt_model_dims, vocab)},
        {"inhomogeneous_layer_cycle_interval", offsetof(qt_model_dims, cycle)},
        {"base_num_query_heads", offsetof(qt_model_dims, n_q_heads)},
        {"base_num_kv_heads", offsetof(qt_model_dims, n_kv_heads)},
        {"head_dim", offsetof(qt_model_dims, head_dim)},
        {"gdn_num_key_heads", offsetof(qt_model_dims, gdn_k_heads)},
        {"gdn_num_value_heads", offsetof(qt_model_dims, gdn_v_heads)},
        {"gdn_key_head_dim", offsetof(qt_model_dims, gdn_k_dim)},
        {"gdn_value_head_dim", offsetof(qt_model_dims, gdn_v_dim)},
        {"gdn_conv_kernel_dim", offsetof(qt_model_dims, gdn_conv)},
        {"gdn_chunk_size", offsetof(qt_model_dims, gdn_chunk)},
        {"num_experts", offsetof(qt_model_dims, n_experts)},
        {"num_experts_per_tok", offsetof(qt_model_dims, top_k)},
        {"base_moe_mlp_dim", offsetof(qt_model_dims, moe_dim)},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (positive(v, sizes[i].key, (int64_t *)(void *)((char *)m + sizes[i].off))) return -1;
    /* configgen plans every layer one by one: its time grows with the square of the layer
     * count (0.5 s at 60 layers, 7 s at 240, about 2 minutes at 1024) and its memory with
     * the count; base_num_decoder_layers=2147483648 ended in "out of memory" (an abort)
     * and 1000000 took 21 GB before the kernel killed it */
    if (m->n_layers > QT_CG_MAX_LAYERS)
        return bad(v, "base_num_decoder_layers", "expected 1..%d (configgen plans every layer: "
                   "its time grows with the square of the count, about 2 minutes at %d; the "
                   "largest Qwen3-Next / Qwen3.5 model has 60)", QT_CG_MAX_LAYERS,
                   QT_CG_MAX_LAYERS);
    int64_t mlp;
    if (positive(v, "base_mlp_dim", &mlp)) return -1;
    int64_t sh = geti(v, "shared_expert_mlp_dim");
    if (sh == -1) sh = m->moe_dim;
    else if (sh <= 0) return bad(v, "shared_expert_mlp_dim", "must be a positive integer or -1 "
                                 "(= base_moe_mlp_dim)");
    m->shared_dim = sh;
    if (m->gdn_v_heads % m->gdn_k_heads) {
        char msg[200];
        snprintf(msg, sizeof msg, "gdn_num_value_heads must be divisible by gdn_num_key_heads "
                 "(gdn_num_key_heads=%lld)", (long long)m->gdn_k_heads);
        return bad(v, "gdn_num_value_heads", "%s", msg);
    }
    if (m->n_q_heads % m->n_kv_heads)
        return bad(v, "base_num_query_heads", "must be divisible by base_num_kv_heads=%lld",
                   (long long)m->n_kv_heads);
    /* a layer count that is not a multiple of the cycle is built whole: layer l is full
     * attention iff (l+1) % cycle == 0, as MaxText's unscanned decoder (with scan_layers
     * MaxText builds int(L / cycle) blocks and drops the rest; qtrain scans the whole
     * cycles and runs the rest unrolled: docs/refusals.md) */
    if (m->top_k > m->n_experts)
        return bad(v, "num_experts_per_tok", "must be <= num_experts=%lld",
                   (long long)m->n_experts);
    /* Kernel limits: per-step GDN vectors live on the stack (gdn_core.h). (moe_route's
     * per-expert accumulators are stack blocks: any num_experts, moe_route.h.) */
    if (m->gdn_k_dim > 512)
        return bad(v, "gdn_key_head_dim", "must be <= 512 (QT_GDN_CORE_MAX_DIM)");
    if (m->gdn_v_dim > 512)
        return bad(v, "gdn_value_head_dim", "must be <= 512 (QT_GDN_CORE_MAX_DIM)");
    /* MaxText's qwen3_next / qwen3_5 MoE block builds one gated shared expert whatever
     * shared_experts says (its base.yml default is 0) */
    if (geti(v, "shared_experts") != 1)
        qt_cg_rule_ignored(v->c, s, "shared_experts", "the qwen3_next / qwen3_5 MoE block has "
                           "exactly one gated shared expert, as MaxText's");
    return 0;
}

/* The rotary embedding: the rotary dim (even, > 0) and, with use_mrope, mrope_section. */
static int check_rotary(const qt_cg_vctx *v, qt_cg_settings *s)
{
    qt_model_dims *m = &s->m;
    double prf = getf(v, "partial_rotary_factor");
    if (!(prf > 0.0 && prf <= 1.0)) return bad(v, "partial_rotary_factor", "expected 0 < f <= 1");
    int64_t rot = (int64_t)((double)m->head_dim * prf);
    if (rot <= 0 || rot % 2)
        return bad(v, "partial_rotary_factor",
                   "Calculated rotary dimension (%lld) must be a multiple of 2 and > 0 "
                   "(head_dim=%lld)", (long long)rot, (long long)m->head_dim);
    m->rotary_dim = rot;
    s->use_mrope = getb(v, "use_mrope");
    if (s->use_mrope) {
        const qt_cg_val *ms = kv(v, "mrope_section")->val;
        long long sum = 0;
        for (int i = 0; i < ms->n; i++) {
            double d;
            char *end;
            if (ms->items[i].kind != QT_CG_SCALAR || ms->items[i].quoted)
                return bad(v, "mrope_section", "expected a list of non-negative integers");
            d = strtod(ms->items[i].s, &end);
            if (*end || d < 0 || d != floor(d))
                return bad(v, "mrope_section", "expected a list of non-negative integers");
            /* checked before the conversion: 1e39 does not fit a long long (found by
             * fuzz_yaml), and no entry can exceed the sum it must reach */
            if (d > (double)(rot / 2))
                return bad(v, "mrope_section",
                           "entry %s exceeds rotary_dim/2 = %lld, which the entries must sum to",
                           ms->items[i].s, (long long)(rot / 2));
            sum += (long long)d;
        }
        if (sum != rot / 2)
            return bad(v, "mrope_section",
                       "use_mrope=true needs sum(mrope_section) == rotary_dim/2 = %lld "
                       "(sum is %lld)", (long long)(rot / 2), sum);
    }
    return 0;
}

/* Numerics and the features the decoders do not have (tied embeddings, dropout, bf16). */
static int check_numerics(const qt_cg_vctx *v, qt_cg_settings *s)
{
    qt_model_dims *m = &s->m;
    double eps = getf(v, "normalization_layer_epsilon");
    if (!(eps > 0)) return bad(v, "normalization_layer_epsilon", "must be > 0");
    m->norm_eps = (float)eps;
    double theta = getf(v, "rope_max_timescale");
    if (!(theta > 1)) return bad(v, "rope_max_timescale", "must be > 1");
    m->rope_theta = (float)theta;
    if (getf(v, "rope_min_timescale") != 1.0)
        return bad(v, "rope_min_timescale", "only 1 is supported (frequencies theta^(-2i/R))");
    if (!getb(v, "use_qk_norm_in_gdn"))
        return bad(v, "use_qk_norm_in_gdn", "the GDN kernel always l2-normalises q and k; "
                   "expected true");
    /* MaxText's router softmaxes over the selected k logits whatever norm_topk_prob says
     * (its base.yml default is false): the weights are normalised either way */
    if (!getb(v, "norm_topk_prob"))
        qt_cg_rule_ignored(v->c, s, "norm_topk_prob", "the routing weights are the softmax over "
                           "the selected k logits (normalised), as MaxText's router computes "
                           "them for either value");
    if (getb(v, "logits_via_embedding"))
        return bad(v, "logits_via_embedding", "tied embeddings are not supported; expected "
                   "false (separate lm_head)");
    if (getb(v, "enable_dropout") || getf(v, "dropout_rate") != 0.0)
        return bad(v, getb(v, "enable_dropout") ? "enable_dropout" : "dropout_rate",
                   "dropout is not supported; expected enable_dropout=false, dropout_rate=0");
    /* dtype: the activations' and matmul operands' dtype (docs/precision.md); weight_dtype:
     * the master weights, Adam and the gradients, fp32 only (as MaxText trains these) */
    const char *dt = gets_(v, "dtype");
    if (!strcmp(dt, "float32")) s->dtype = QT_F32;
    else if (!strcmp(dt, "bfloat16")) s->dtype = QT_BF16;
    else return bad(v, "dtype", "expected float32 or bfloat16");
    if (strcmp(gets_(v, "weight_dtype"), "float32"))
        return bad(v, "weight_dtype", "the master weights, Adam moments and gradients are kept "
                   "in float32 (dtype=bfloat16 sets the compute dtype); expected float32");
    return 0;
}

static int check_model(const qt_cg_vctx *v, qt_cg_settings *s)
{
    return check_shape(v, s) || check_rotary(v, s) || check_numerics(v, s) ? -1 : 0;
}

/* canonical_factor as a message names it: "canonical_factor=3 (where)", or the factor the
 * tensor / context axes imply when the config leaves the key unset (mesh_canon). */
static const char *factor_txt(const qt_cg_vctx *v, const qt_cg_settings *s, char *buf,
                              size_t cap)
{
    char o[400];
    if (!s->canon_implied) return other(v, "canonical_factor", buf, cap);
    snprintf(buf, cap, "canonical_factor %d (implied by the tensor / context axes: %s)",
             s->canon_factor, other(v, "canonical_factor", o, sizeof o));
    return buf;
}

/* context_blocks: the canonical token blocks per sequence (docs/context.md): a power of two,
 * at least the context degree (0 = that degree), dividing max_target_length (with
 * canonical_factor f > 1: a factor of f x a power of two, the context degree x a power of
 * two); the gradient trees then take micro_batch x grad_accum x blocks leaves per step. */
static int context_blocks(const qt_cg_vctx *v, qt_cg_settings *s)
{
    const int64_t nb = geti(v, "context_blocks"), cp = s->mesh[QT_MESH_CONTEXT];
    const int64_t n = nb == 0 ? cp : nb, S = s->tr.seq_len;
    char o[400];
    /* the context ranks split each sequence into equal token blocks (the head side needs no
     * more: the mixers run on whole sequences) */
    if (cp > 1 && S % cp)
        return bad(v, "max_target_length", "%lld is not a multiple of the context degree %lld "
                   "(%s): each context rank holds an equal share of every sequence",
                   (long long)S, (long long)cp, other(v, "ici_context_parallelism", o, sizeof o));
    if (s->canon_factor <= 1 && (n < 1 || (n & (n - 1)) || n < cp || n > S || S % n))
        return bad(v, "context_blocks", "%lld: expected 0 (= the context degree %lld) or a "
                   "power of two >= it that divides %s", (long long)nb, (long long)cp,
                   other(v, "max_target_length", o, sizeof o));
    /* with canonical_factor f: f' x 2^k blocks, f' a factor of f, each context rank's share
     * a power of two (aligned: a node of the one-rank tree; docs/determinism.md) */
    const int64_t share = n / cp;
    if (s->canon_factor > 1 && (n < 1 || s->canon_factor % (n / (n & -n)) || n < cp ||
                                n % cp || (cp > 1 && (share & (share - 1))) || n > S || S % n)) {
        char o2[400];
        return bad(v, "context_blocks", "%lld: expected 0 (= the context degree %lld) or a "
                   "power of two times a factor of %s, a multiple of the context degree by a "
                   "power of two, that divides %s", (long long)nb, (long long)cp,
                   factor_txt(v, s, o2, sizeof o2), other(v, "max_target_length", o, sizeof o));
    }
    const int64_t leaves = s->tr.micro_batch * s->tr.grad_accum * n;
    if (leaves >= (1ll << (QT_MAX_TREE_LEVELS - 1)))
        return bad(v, "context_blocks", "%lld blocks x %lld sequences per step = %lld gradient "
                   "leaves exceed the %lld that the %d tree levels hold", (long long)n,
                   (long long)(s->tr.micro_batch * s->tr.grad_accum), (long long)leaves,
                   (1ll << (QT_MAX_TREE_LEVELS - 1)) - 1, QT_MAX_TREE_LEVELS);
    s->context_blocks = (int32_t)n;
    return 0;
}

/* per_device_batch_size for c sequences on R ranks (int(R x it) = c): c/R as %g when that
 * reads back to c, else the fraction "c/R" (1/3 printed 0.333333 would give int() = 0). */
static const char *pdbs_for(int64_t c, int32_t R, char *buf, size_t cap)
{
    snprintf(buf, cap, "%g", (double)c / (double)R);
    if ((int64_t)(strtod(buf, NULL) * (double)R) != c)
        snprintf(buf, cap, "%lld/%d", (long long)c, (int)R);
    return buf;
}

/* The counts that would split evenly over the G batch groups, for a refusal: "a multiple
 * of G sequences: lo (per_device_batch_size x) or hi (y)", lo left out when 0. */
static const char *even_counts(int64_t n, int64_t G, int32_t R, char *buf, size_t cap)
{
    char a[40], b[40];
    const int64_t lo = n / G * G, hi = lo + G;
    if (lo > 0)
        snprintf(buf, cap, "a multiple of %lld sequences: %lld (per_device_batch_size %s) or "
                 "%lld (%s)", (long long)G, (long long)lo, pdbs_for(lo, R, a, sizeof a),
                 (long long)hi, pdbs_for(hi, R, b, sizeof b));
    else
        snprintf(buf, cap, "a multiple of %lld sequences: %lld (per_device_batch_size %s)",
                 (long long)G, (long long)hi, pdbs_for(hi, R, b, sizeof b));
    return buf;
}

/* MaxText: per_device_batch_size x ranks x G sequences per step; the batch is split over
 * the data, fsdp and expert axes (tensor ranks share their sequences), so a rank processes
 * its batch group's sequences, its own and its tensor peers': per_device_batch_size x
 * tensor, a whole number (a fraction of a sequence per rank is allowed when the tensor peers
 * together hold whole ones: TP2 with 0.5 trains one sequence). Otherwise MaxText trains
 * n = int(ranks x per_device_batch_size) sequences a microbatch (qt_cg_group_batch): taken
 * when they split evenly over the batch groups (one rank with 2.5 trains 2). When they do
 * not (docs/refusals.md, MaxText's source cited there):
 *  - per_device_batch_size < 1: MaxText loads one sequence per device and trains the first
 *    n of them, sharded unevenly inside its step (its MoE and GDN replicate such a batch
 *    without expert parallelism): each group takes ceil(n / groups) slots, the slots past
 *    the n sequences padded with masked sequences (batch_padded; the runtime keeps them out
 *    of every sum). With expert parallelism or pipeline stages MaxText's shard_maps refuse
 *    an uneven batch, and so does qtrain; n = 0 trains nothing there: refused.
 *  - per_device_batch_size >= 1: MaxText's input pipelines assert the loaded n divisible by
 *    the devices: refused, naming the counts that split. */
static int batch_split(const qt_cg_vctx *v, qt_cg_settings *s)
{
    const int32_t tp = s->mesh[QT_MESH_TENSOR], cp = s->mesh[QT_MESH_CONTEXT];
    char o[400], o2[400], mt[300] = "";
    /* pipeline: the batch group (its S stages' ranks) takes per_device_batch_size x tensor
     * x context x S sequences per accumulation step, cut into M microbatches of B / M
     * (MaxText); to a stage they are M accumulation microbatches (config/pipeline.c) */
    const int64_t S = s->pp_stages > 1 ? s->pp_stages : 1;
    int64_t total;
    double b = qt_cg_group_batch(s->per_device_batch, s->n_ranks, tp, cp, (int32_t)S, &total);
    s->batch_maxtext = total;
    s->batch_padded = 0;
    const int64_t groups = s->n_ranks / tp / cp / S, G0 = s->tr.grad_accum;
    const double t = (double)s->n_ranks * s->per_device_batch;
    const int64_t n = t < 9e15 ? (int64_t)t : 0;
    const int uneven = (b < 1 || b != floor(b)) && t < 9e15 && n >= 1;
    if (uneven && S == 1 && s->per_device_batch < 1.0 && s->mesh[QT_MESH_EXPERT] == 1) {
        /* padded: ceil(n / groups) slots a group, the last ones masked */
        b = (double)((n + groups - 1) / groups);
        s->batch_maxtext = n;
        s->batch_padded = (int64_t)b * groups - n;
    }
    if (S > 1 && b >= 1 && b == floor(b)) {   /* else refused below, naming MaxText's rule */
        if (qt_cg_pipeline_rules(v->c, s, b, v->err, v->errlen)) return -1;
        b = (double)(s->pp_batch / s->pp_micro);
        s->tr.grad_accum *= s->pp_micro;
    }
    if ((b < 1 || b != floor(b)) && t < 9e15 && n < 1) {
        char f[40];
        return bad(v, "per_device_batch_size", "%g sequences per rank x %d rank%s = %.10g: "
                   "MaxText trains int() = 0 sequences a microbatch (its loss_fn keeps the "
                   "first int(devices x per_device_batch_size) rows of the loaded batch: none, "
                   "a loss of 0); expected per_device_batch_size >= %s (int(%d x it) >= 1 "
                   "sequence)", s->per_device_batch, s->n_ranks, qt_cg_s(s->n_ranks), t,
                   pdbs_for(1, s->n_ranks, f, sizeof f), s->n_ranks);
    }
    if (b < 1 || b != floor(b)) {
        char e[200];
        even_counts(n, groups, s->n_ranks, e, sizeof e);
        if (s->per_device_batch >= 1.0)
            snprintf(mt, sizeof mt, "MaxText refuses them too (its input pipelines assert "
                     "the loaded batch divisible by the %d devices)", s->n_ranks);
        else if (S > 1)
            snprintf(mt, sizeof mt, "with pipeline stages (%s) MaxText refuses them too (its "
                     "pipeline shard_maps each microbatch's batch over the data axes)",
                     other(v, "ici_pipeline_parallelism", o2, sizeof o2));
        else
            snprintf(mt, sizeof mt, "with expert parallelism (%s) MaxText refuses them too "
                     "(its MoE replicates an uneven batch only without it)",
                     other(v, "ici_expert_parallelism", o2, sizeof o2));
        if (tp > 1 || cp > 1)
            snprintf(o, sizeof o, " (the tensor x context ranks of a group share its "
                     "sequences: %d x %d)", tp, cp);
        else
            o[0] = 0;
        return bad(v, "per_device_batch_size", "int(%d rank%s x %g) = %lld sequences a "
                   "microbatch do not split evenly over the %lld batch group%s%s; %s; expected "
                   "%s", s->n_ranks, qt_cg_s(s->n_ranks), s->per_device_batch, (long long)n,
                   (long long)groups, qt_cg_s(groups), o, mt, e);
    }
    s->tr.micro_batch = (int64_t)b;
    /* context: each rank's token blocks must be one aligned subtree of the microbatch's leaf
     * tree, which holds for one sequence per batch group and microbatch (docs/context.md):
     * b sequences per batch group run as b microbatches of one (the same sum, the same bits
     * as any split; the activations of one sequence at a time) */
    if (cp > 1 && b > 1) {
        int64_t g;
        if (__builtin_mul_overflow(s->tr.grad_accum, (int64_t)b, &g) ||
            g >= (1ll << (QT_MAX_TREE_LEVELS - 1)))
            return bad(v, "per_device_batch_size", "%g x %d tensor x %d context ranks = %g "
                       "sequences per batch group, run as microbatches of one sequence each, "
                       "x gradient_accumulation_steps=%lld exceed the %d gradient tree levels",
                       s->per_device_batch, tp, cp, b, (long long)s->tr.grad_accum,
                       QT_MAX_TREE_LEVELS);
        s->tr.grad_accum = g;
        s->tr.micro_batch = 1;
        s->ctx_seq_split = (int32_t)b;
    }
    s->tr.global_batch = s->tr.micro_batch * s->tr.grad_accum * (s->n_ranks / tp / cp / S);
    /* padded: the real sequences, n a microbatch (the windows a step reads, every
     * normaliser's count); the slots past them are masked (firmware: qt_runtime_pads) */
    if (s->batch_padded) s->tr.global_batch = s->batch_maxtext * G0;
    return context_blocks(v, s);
}

static int check_train(const qt_cg_vctx *v, qt_cg_settings *s)
{
    qt_train_cfg *t = &s->tr;
    double pdb = getf(v, "per_device_batch_size");
    if (!(pdb > 0) || !(pdb <= (double)(1ll << 40)))
        return bad(v, "per_device_batch_size", "expected > 0 (sequences per rank; a fraction "
                   "when tensor ranks share sequences)");
    s->per_device_batch = pdb;
    /* until the mesh is known (batch_split): at least one sequence */
    t->micro_batch = pdb < 1 ? 1 : (int64_t)ceil(pdb);
    t->seq_len = geti(v, "max_target_length");
    if (t->seq_len < 1 || t->seq_len > 65536)
        return bad(v, "max_target_length", "expected 1..65536");
    t->grad_accum = geti(v, "gradient_accumulation_steps");
    if (t->grad_accum < 1) return bad(v, "gradient_accumulation_steps", "expected >= 1");
    int64_t seqs;
    if (__builtin_mul_overflow(t->micro_batch, t->grad_accum, &seqs) ||
        seqs >= (1ll << (QT_MAX_TREE_LEVELS - 1))) {
        /* blame the factor the user set (the larger one when both are set) */
        const char *B = "per_device_batch_size", *G = "gradient_accumulation_steps";
        int blame_g = from_base(v, B) ||
                      (!from_base(v, G) && t->grad_accum > t->micro_batch);
        char o[400];
        return bad(v, blame_g ? G : B, "with %s, %s x %s = %lld x %lld sequences per step "
                   "exceed the %lld that the %d gradient tree levels hold",
                   other(v, blame_g ? B : G, o, sizeof o), B, G, (long long)t->micro_batch,
                   (long long)t->grad_accum, (1ll << (QT_MAX_TREE_LEVELS - 1)) - 1,
                   QT_MAX_TREE_LEVELS);
    }
    t->steps = geti(v, "steps");
    int64_t ss = geti(v, "learning_rate_schedule_steps");
    /* MaxText (configs/types.py, C. "SET PRIMARY DEPENDENCIES"): steps -1 is the schedule's
     * length, learning_rate_schedule_steps -1 the steps; both -1 is no length at all */
    if (t->steps == -1 && ss >= 1) t->steps = ss;
    else if (t->steps == -1)
        return bad(v, "steps", "-1 takes learning_rate_schedule_steps (as MaxText), which is %lld; "
                   "expected steps >= 1 or learning_rate_schedule_steps >= 1", (long long)ss);
    if (t->steps < 1) return bad(v, "steps", "expected >= 1 (or -1: = learning_rate_schedule_steps)");
    if (ss == -1) ss = t->steps;
    else if (ss < 1) return bad(v, "learning_rate_schedule_steps", "expected -1 (= steps) or >= 1");
    t->schedule_steps = ss;
    double lr = getf(v, "learning_rate");
    if (!(lr >= 0)) return bad(v, "learning_rate", "expected >= 0");
    t->lr = (float)lr;
    double b1 = getf(v, "adam_b1"), b2 = getf(v, "adam_b2");
    if (!(b1 >= 0 && b1 < 1)) return bad(v, "adam_b1", "expected 0 <= b1 < 1");
    if (!(b2 >= 0 && b2 < 1)) return bad(v, "adam_b2", "expected 0 <= b2 < 1");
    t->adam_b1 = (float)b1;
    t->adam_b2 = (float)b2;
    double eps = getf(v, "adam_eps");
    if (!(eps > 0)) return bad(v, "adam_eps", "expected > 0");
    t->adam_eps = (float)eps;
    if (getf(v, "adam_eps_root") != 0.0) return bad(v, "adam_eps_root", "only 0 is supported");
    double wd = getf(v, "adam_weight_decay");
    if (!(wd >= 0)) return bad(v, "adam_weight_decay", "expected >= 0");
    t->weight_decay = (float)wd;
    double clip = getf(v, "gradient_clipping_threshold");
    if (!(clip >= 0)) return bad(v, "gradient_clipping_threshold", "expected >= 0 (0 disables)");
    t->clip = (float)clip;
    double wf = getf(v, "warmup_steps_fraction"), ff = getf(v, "learning_rate_final_fraction");
    if (!(wf >= 0 && wf < 1)) return bad(v, "warmup_steps_fraction", "expected 0 <= f < 1");
    if (!(ff >= 0 && ff <= 1)) return bad(v, "learning_rate_final_fraction", "expected 0..1");
    t->warmup_frac = (float)wf;
    t->final_frac = (float)ff;
    double lb = getf(v, "load_balance_loss_weight");
    if (!(lb >= 0)) return bad(v, "load_balance_loss_weight", "expected >= 0");
    s->lb_weight = lb;
    t->lb_weight = (float)lb;
    if (strcmp(gets_(v, "opt_type"), "adamw"))
        return bad(v, "opt_type", "only adamw is supported");
    /* lr_schedule_type, z_loss_multiplier, eval_*: config/train_rules.c;
     * sparse_matmul, capacity_factor, ragged_buffer_factor: config/moe.c */
    return 0;
}

/* MaxText's compile_topology names: <generation>-<N>. v4 and v5p count TensorCores (two
 * per device), v5e and v6e count chips; HBM per device as the TPU docs give it. */
static const struct qt_cg_topo {
    const char *gen;
    int per_device;        /* N / per_device = devices */
    double gib;            /* memory per device */
} qt_cg_topos[] = {
    {"v4", 2, 32.0}, {"v5p", 2, 95.0}, {"v5e", 1, 16.0}, {"v5litepod", 1, 16.0},
    {"v6e", 1, 32.0},
};

/* compile_topology sets num_ranks (a num_ranks the user gave must agree) and the budget
 * (device_memory_gib, when the user gave one, wins). */
static int check_topology(const qt_cg_vctx *v, qt_cg_settings *s, int64_t *n_ranks)
{
    const char *t = gets_(v, "compile_topology");
    s->budget_gib = getf(v, "device_memory_gib");
    *n_ranks = geti(v, "num_ranks");
    if (s->budget_gib < 0 || s->budget_gib > 1e6)
        return bad(v, "device_memory_gib", "expected a number of GiB in [0, 1e6] (0 = no budget)");
    /* a positive budget below 1 MiB would round to 0 bytes, which means "no budget" */
    if (s->budget_gib > 0 && s->budget_gib < 1.0 / 1024.0)
        return bad(v, "device_memory_gib", "a budget below 1 MiB (2^-10 GiB, %.4g GiB) is "
                   "smaller than any arena; expected 0 (no budget) or a number of GiB in "
                   "[2^-10, 1e6]", 1.0 / 1024.0);
    if (!*t) return 0;
    const char *dash = strrchr(t, '-');
    const struct qt_cg_topo *tp = NULL;
    for (size_t i = 0; dash && i < sizeof qt_cg_topos / sizeof qt_cg_topos[0]; i++)
        if (strlen(qt_cg_topos[i].gen) == (size_t)(dash - t) &&
            !strncmp(t, qt_cg_topos[i].gen, (size_t)(dash - t)))
            tp = &qt_cg_topos[i];
    char *end = NULL;
    long long n = dash ? strtoll(dash + 1, &end, 10) : 0;
    if (!tp || !end || *end || end == dash + 1 || n < 1 || n > (1 << 20) || n % tp->per_device)
        return bad(v, "compile_topology", "expected <generation>-<cores or chips>: v4-N or "
                   "v5p-N (N TensorCores, N/2 devices: v5p-512 = 256 devices of 95 GiB, v4 "
                   "32 GiB), v5e-N or v6e-N (N chips of 16 / 32 GiB)");
    const int64_t devices = n / tp->per_device;
    if (!from_base(v, "num_ranks") && *n_ranks != devices)
        return bad(v, "num_ranks", "compile_topology=%s has %lld devices; expected num_ranks "
                   "unset or %lld", t, (long long)devices, (long long)devices);
    snprintf(s->topology, sizeof s->topology, "%s", t);
    *n_ranks = devices;
    if (from_base(v, "device_memory_gib")) s->budget_gib = tp->gib;
    return 0;
}

/* The mesh keys as read: ici_* and dcn_* per axis (data, fsdp, tensor, expert, context,
 * pipeline), the ici axis to fill (-1) and the others' product, the rank count and the key
 * that set it, and the key to blame for each resolved axis. */
/* The mesh axes of the ici_* and dcn_* keys, in MaxText's key order. */
/* The last, MaxText's Ulysses axis (context_usp_ulysses), executes as part of the context
 * axis: qtrain's context parallelism is the Ulysses head exchange (docs/context.md). */
#define QT_CG_NAX 7
static const char *const axes[QT_CG_NAX] = {"data",     "fsdp",   "tensor",
                                            "expert",   "context", "pipeline",
                                            "context_usp_ulysses"};

typedef struct qt_cg_axes {
    char ici[QT_CG_NAX][48], dcn[QT_CG_NAX][48];
    int64_t iv[QT_CG_NAX], dv[QT_CG_NAX], n_ranks, ici_prod, dcn_prod;
    int ici_fill, set_axis;
    const char *rk;            /* "num_ranks" or "compile_topology" */
    char rks[400];             /* "num_ranks=N (where)" for messages */
    const char *key[QT_CG_NAX];
} qt_cg_axes;

/* Reads the ici_* and dcn_* keys: at most one -1 of each kind, the others >= 1. A -1 dcn
 * axis is 1 (MaxText fills it from the slice count, which qtrain reads from the dcn keys
 * the user sets: the slices are their product). */
static int mesh_read_axes(const qt_cg_vctx *v, qt_cg_axes *x)
{
    char (*ici)[48] = x->ici, (*dcn)[48] = x->dcn;
    int64_t *iv = x->iv, *dv = x->dv;
    int ici_fill = -1, dcn_fill = -1;
    int64_t ici_prod = 1, dcn_prod = 1;
    for (int i = 0; i < QT_CG_NAX; i++) {
        snprintf(ici[i], sizeof ici[i], "ici_%s_parallelism", axes[i]);
        snprintf(dcn[i], sizeof dcn[i], "dcn_%s_parallelism", axes[i]);
        iv[i] = geti(v, ici[i]);
        dv[i] = geti(v, dcn[i]);
        if (iv[i] == -1) {
            if (ici_fill >= 0) {
                /* blame the -1 the user set, naming the other */
                int j = from_base(v, ici[i]) ? ici_fill : i, o = j == i ? ici_fill : i;
                return bad(v, ici[j], "only one ici_*_parallelism may be -1 (%s is -1 too)",
                           ici[o]);
            }
            ici_fill = i;
        } else if (iv[i] < 1) return bad(v, ici[i], "expected -1 (fill) or >= 1");
        else if (__builtin_mul_overflow(ici_prod, iv[i], &ici_prod))
            return bad(v, ici[i], "the product of the ici_* axes overflows");
        if (dv[i] == -1) {
            if (dcn_fill >= 0) {
                int j = from_base(v, dcn[i]) ? dcn_fill : i, o = j == i ? dcn_fill : i;
                return bad(v, dcn[j], "only one dcn_*_parallelism may be -1 (%s is -1 too)",
                           dcn[o]);
            }
            dcn_fill = i;
        } else if (dv[i] < 1) return bad(v, dcn[i], "expected -1 (fill) or >= 1");
        else if (__builtin_mul_overflow(dcn_prod, dv[i], &dcn_prod))
            return bad(v, dcn[i], "the product of the dcn_* axes overflows");
    }
    if (dcn_fill >= 0) dv[dcn_fill] = 1;
    x->ici_fill = ici_fill;
    x->ici_prod = ici_prod;
    x->dcn_prod = dcn_prod;
    return 0;
}

/* Fills the -1 ici axis from the rank count and checks that the axes multiply to it. */
static int mesh_fill(const qt_cg_vctx *v, const qt_cg_settings *s, qt_cg_axes *x)
{
    char (*ici)[48] = x->ici;
    int64_t *iv = x->iv, *dv = x->dv;
    const int64_t n_ranks = x->n_ranks, ici_prod = x->ici_prod;
    const int ici_fill = x->ici_fill;
    /* Messages about the product blame the key the user set: the first ici axis set above 1
     * (base.yml's axes are 1 or -1), else the rank count if the user set it. rk names that
     * count: num_ranks, or compile_topology when a preset set it. */
    const char *rk = x->rk = s->topology[0] ? "compile_topology" : "num_ranks";
    char *rks = x->rks, o[400];
    if (s->topology[0]) {
        const qt_cg_known *t = kv(v, rk);
        snprintf(rks, sizeof x->rks, "num_ranks=%lld (compile_topology=%s, %s)", (long long)n_ranks,
                 t->val->s, t->where);
    } else {
        snprintf(rks, sizeof x->rks, "num_ranks=%lld (%s)", (long long)n_ranks, kv(v, rk)->where);
    }
    /* the first axis key above 1 that the user set: ici first, then dcn (slices) */
    int set_axis = -1;
    const char *set_key = NULL;
    for (int i = 0; i < QT_CG_NAX && set_axis < 0; i++)
        if (iv[i] > 1 && !from_base(v, ici[i])) set_axis = i, set_key = ici[i];
    for (int i = 0; i < QT_CG_NAX && !set_key; i++)
        if (dv[i] > 1 && !from_base(v, x->dcn[i])) set_key = x->dcn[i];
    if (ici_fill >= 0) {
        /* the -1 ici axis fills each slice: ranks / slices / the other ici axes */
        const int64_t per = ici_prod * x->dcn_prod;
        if (n_ranks % per) {
            if (set_key)
                return bad(v, set_key, "%s cannot be filled: %s is not a multiple of the "
                           "other ici axes' product x the slices (dcn) = %lld",
                           other(v, ici[ici_fill], o, sizeof o), rks, (long long)per);
            return bad(v, from_base(v, rk) ? ici[ici_fill] : rk, "-1 cannot be filled: "
                       "num_ranks=%lld is not a multiple of the other ici axes' product x "
                       "the slices (dcn) = %lld", (long long)n_ranks, (long long)per);
        }
        iv[ici_fill] = n_ranks / per;
    }
    int64_t prod = 1;
    for (int i = 0; i < QT_CG_NAX; i++)
        if (__builtin_mul_overflow(prod, iv[i] * dv[i], &prod))
            return bad(v, set_key ? set_key : rk, "the mesh product of ici_*/dcn_* "
                       "parallelism overflows");
    if (prod != n_ranks) {
        if (set_key || from_base(v, rk))
            return bad(v, set_key ? set_key : "num_ranks", "the mesh product of "
                       "ici_*/dcn_* parallelism is %lld but %s; expected them equal",
                       (long long)prod, rks);
        return bad(v, rk, "the mesh product of ici_*/dcn_* parallelism is %lld and no ici_* "
                   "axis is -1 to fill from %s%lld%s; expected axes multiplying to %lld, or "
                   "one ici_* axis of -1", (long long)prod, s->topology[0] ? "its " :
                   "num_ranks=", (long long)n_ranks, s->topology[0] ? " devices" : "",
                   (long long)n_ranks);
    }
    x->set_axis = set_axis;
    return 0;
}

/* Tensor and context split canonical counts (the contraction blocks and head groups;
 * context_blocks), powers of two times canonical_factor f on one rank too (config/canon.c;
 * docs/determinism.md "Axes of any size"), at most QT_CANON_BLOCKS of them, so the odd
 * part of their sizes must divide f and tensor x context must divide the counts. Without
 * the key (base.yml's 1) the axes imply both (issue 35): f becomes the least common
 * multiple of their odd parts (3 for tensor 3 or 6 and context 3 or 6, 5 for tensor 5),
 * and a tensor x context group over QT_CANON_BLOCKS ranks raises the cap to its size
 * (s->canon_max: tensor 12 or 16, context 16, tensor 3 x context 5); s->canon_implied
 * says so. The plan's bits are then those of one rank with canonical_factor: f when the
 * cap stays, its own when it is raised (no one-rank plan has those counts); plan.txt's
 * "one-rank bits:" line states which. Refused: a factor the user set that lacks an axis's
 * odd part (it asks for that factor's bits, which the axis cannot split). */
static int mesh_canon(const qt_cg_vctx *v, qt_cg_settings *s, const char *const *axis_key)
{
    static const int ax[2] = {2, 4}, qa[2] = {QT_MESH_TENSOR, QT_MESH_CONTEXT};
    const int64_t tc = (int64_t)s->mesh[QT_MESH_TENSOR] * s->mesh[QT_MESH_CONTEXT];
    int64_t need = 1;
    for (int k = 0; k < 2; k++) {
        const int64_t size = s->mesh[qa[k]], odd = size / (size & -size);
        need = need / qt_cg_gcd(need, odd) * odd;
        if (!from_base(v, "canonical_factor") && s->canon_factor % odd) {
            char o[400], hint[96];
            snprintf(hint, sizeof hint, "; set canonical_factor: %lld or leave it unset (the "
                     "axes then imply it)", (long long)odd);
            return bad(v, axis_key[ax[k]], "resolves the %s mesh axis to %lld; expected a "
                       "power of two, or a power of two times an odd factor of %s: %s, powers "
                       "of two times canonical_factor on one rank too (config/canon.c), which "
                       "%lld ranks do not split (docs/determinism.md \"Axes of any size\")%s",
                       k ? "context" : "tensor", (long long)size,
                       other(v, "canonical_factor", o, sizeof o),
                       k ? "the context ranks split context_blocks and the GDN norm's "
                           "canonical head groups"
                         : "a tensor rank holds its share of the canonical contraction "
                           "blocks, head groups and vocabulary blocks",
                       (long long)size, odd < QT_CANON_BLOCKS ? hint : "");
        }
    }
    if (!from_base(v, "canonical_factor")) return 0;
    /* need <= tc, so the raised cap holds the implied factor */
    if (need > 1) s->canon_factor = (int32_t)need;
    s->canon_max = tc > QT_CANON_BLOCKS ? (int32_t)tc : 0;
    s->canon_implied = need > 1 || s->canon_max > 0;
    return 0;
}

/* The resolved axes into s->mesh: data, fsdp, tensor, expert and context execute, tensor
 * and context each a power of two times an odd factor of canonical_factor, set or implied
 * (mesh_canon; data, fsdp, expert any size); pipeline (any size) into s->pp_stages. */
static int mesh_execute(const qt_cg_vctx *v, qt_cg_settings *s, qt_cg_axes *x)
{
    char (*ici)[48] = x->ici, (*dcn)[48] = x->dcn;
    int64_t *iv = x->iv, *dv = x->dv;
    const char *rk = x->rk;
    const int ici_fill = x->ici_fill;
    const int64_t n_ranks = x->n_ranks;
    static const int qt_of[5] = {QT_MESH_DATA, QT_MESH_FSDP, QT_MESH_TENSOR, QT_MESH_EXPERT,
                                 QT_MESH_CONTEXT};
    /* an axis's key, or the rank count the user set when the axis is base.yml's -1 that
     * was filled from it */
    const char **axis_key = x->key;
    for (int i = 0; i < QT_CG_NAX; i++) {
        axis_key[i] = iv[i] > 1 ? ici[i] : dcn[i];
        if (i == ici_fill && iv[i] > 1 && from_base(v, ici[i]) && !from_base(v, rk))
            axis_key[i] = rk;
    }
    /* the Ulysses axis joins context (messages about context name the key that set it) */
    const int uly = QT_CG_NAX - 1;
    if (iv[uly] * dv[uly] > 1) {
        if (iv[4] * dv[4] == 1) axis_key[4] = axis_key[uly];
        iv[4] *= iv[uly];
        dv[4] *= dv[uly];
        iv[uly] = dv[uly] = 1;
    }
    for (int i = 0; i < QT_CG_NAX - 1; i++) {
        int64_t size = iv[i] * dv[i];
        if (i < 5) s->mesh[qt_of[i]] = (int32_t)size, s->dcn[qt_of[i]] = (int32_t)dv[i];
        /* data, fsdp, tensor, expert and context execute (context by the head exchange,
         * docs/context.md, in both shard modes); pipeline stages (config/pipeline.c,
         * docs/pipeline.md) are planned ahead of time, any size: the ranks multiply, each
         * stage's ranks hold the mesh of the other axes */
        if (i == 5) {
            s->pp_stages = (int32_t)size;
            s->pp_dcn = (int32_t)dv[i];
            snprintf(s->pp_key, sizeof s->pp_key, "%s", axis_key[i]);
            continue;
        }
        /* data, fsdp and expert may have any size (issue 35): they split the batch, whose
         * reduce-scatter over a group that is not a power of two sums in the one-rank
         * tree's binary-counter shape (qt_coll.h), the flat optimizer vector (padded to
         * equal blocks, memory/ranges.c) and whole experts (mesh_splits); plan.txt's
         * "one-rank bits:" line says when the leaves a rank make that one rank's tree.
         * Tensor and context: mesh_canon */
    }
    s->n_ranks = (int32_t)n_ranks;
    return mesh_canon(v, s, axis_key);
}

/* Tensor and expert parallelism must divide what they split. */
static int mesh_splits(const qt_cg_vctx *v, qt_cg_settings *s, const qt_cg_axes *x)
{
    const int32_t ep = s->mesh[QT_MESH_EXPERT], tp = s->mesh[QT_MESH_TENSOR];
    const char *const *axis_key = x->key, *tkey = axis_key[2];
    if (tp > 1) {
        /* every split count, and every canonical block count of a split contraction or
         * head-group sum, must divide by the tensor degree (kernels/matmul_canon.h) */
        const qt_model_dims *m = &s->m;
        const struct { const char *what; int64_t n; } split[] = {
            {"base_num_query_heads", m->n_q_heads}, {"base_num_kv_heads", m->n_kv_heads},
            {"gdn_num_key_heads", m->gdn_k_heads}, {"gdn_num_value_heads", m->gdn_v_heads},
            {"shared_expert_mlp_dim", m->shared_dim}, {"base_moe_mlp_dim", m->moe_dim},
            {"the canonical blocks of the experts' down contraction", qt_cg_canon(s, m->moe_dim)},
            {"the canonical blocks of o_proj's contraction (heads x head_dim)",
             qt_cg_canon(s, m->n_q_heads * m->head_dim)},
            {"the canonical blocks of out_proj's contraction (GDN value heads x dim)",
             qt_cg_canon(s, m->gdn_v_heads * m->gdn_v_dim)},
            {"the canonical blocks of the shared expert's down contraction",
             qt_cg_canon(s, m->shared_dim)},
            {"the canonical blocks of q_proj's outputs", qt_cg_canon(s, 2 * m->n_q_heads * m->head_dim)},
            {"the canonical blocks of k_proj's outputs", qt_cg_canon(s, m->n_kv_heads * m->head_dim)},
            {"the canonical head groups of q_norm", qt_cg_canon(s, m->n_q_heads)},
            {"the canonical head groups of k_norm", qt_cg_canon(s, m->n_kv_heads)},
            {"the canonical head groups of the GDN norm", qt_cg_canon(s, m->gdn_v_heads)},
            {"head_dim", m->head_dim}, {"gdn_value_head_dim", m->gdn_v_dim},
            {"base_emb_dim", m->d},
        };
        for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
            if (split[i].n % tp)
                return bad(v, tkey, "tensor parallelism %d does not divide %s (%lld)", tp,
                           split[i].what, (long long)split[i].n);
    }
    const int32_t cp = s->mesh[QT_MESH_CONTEXT];
    if (cp > 1) {
        /* the head exchange gives each of the tensor x context ranks whole sequences of its
         * share of the mixers' heads (docs/context.md); heads that do not divide are owned
         * unevenly (model/context.c: attention's a kv head with its query heads a unit, the
         * GDN layers' key heads with their value heads and whole canonical groups), so no
         * head count is refused here */
        /* the expert group spans expert x context (an expert host receives every block of
         * its sequences); where that does not divide num_experts but the expert axis does,
         * the experts split over `expert` alone, replicated over context (MaxText's
         * default rules): each context index exchanges over the expert axis */
        s->expert_ctx_rep = ep > 1 && s->m.n_experts % ((int64_t)ep * cp) != 0 &&
                            s->m.n_experts % ep == 0;
    }
    if (ep > 1 && s->m.n_experts % ep)
        return bad(v, axis_key[3], "expert parallelism %d does not divide "
                   "num_experts=%lld (each rank must hold the same number of experts)", ep,
                   (long long)s->m.n_experts);
    return 0;
}

static int check_mesh(const qt_cg_vctx *v, qt_cg_settings *s)
{
    qt_cg_axes x;
    memset(&x, 0, sizeof x);
    if (check_topology(v, s, &x.n_ranks)) return -1;
    if (x.n_ranks < 1) return bad(v, "num_ranks", "expected >= 1");
    /* canonical_factor (config/canon.c): an odd factor of every canonical count */
    const int64_t cf = geti(v, "canonical_factor");
    if (cf < 1 || cf % 2 == 0 || cf > QT_CANON_BLOCKS)
        return bad(v, "canonical_factor", "%lld: expected an odd number from 1 to %d (the "
                   "canonical blocks and head groups are it x a power of two, at most %d)",
                   (long long)cf, QT_CANON_BLOCKS, QT_CANON_BLOCKS);
    s->canon_factor = (int32_t)cf;
    return mesh_read_axes(v, &x) || mesh_fill(v, s, &x) || mesh_execute(v, s, &x) ||
           mesh_splits(v, s, &x) ? -1 : 0;
}

/* The memory and execution policies: shard_mode, ZeRO-1 (shard_optimizer_over_data),
 * scan_layers, gradient_reduce, param_gather and remat_policy, with the combinations that
 * cannot keep the bits (after the mesh: they depend on expert parallelism). */
static int check_policies(const qt_cg_vctx *v, qt_cg_settings *s)
{
    const char *sm = gets_(v, "shard_mode");
    if (!strcmp(sm, "auto")) s->shard_mode = 0;
    else if (!strcmp(sm, "explicit")) s->shard_mode = 1;
    else return bad(v, "shard_mode", "expected auto or explicit");
    s->zero1 = getb(v, "shard_optimizer_over_data");
    s->scan_layers = getb(v, "scan_layers");
    const char *gr = gets_(v, "gradient_reduce");
    if (!strcmp(gr, "auto")) s->grad_reduce = QT_CG_REDUCE_AUTO;
    else if (!strcmp(gr, "step")) s->grad_reduce = QT_CG_REDUCE_STEP;
    else if (!strcmp(gr, "microbatch")) s->grad_reduce = QT_CG_REDUCE_MICROBATCH;
    else if (!strcmp(gr, "layer")) s->grad_reduce = QT_CG_REDUCE_LAYER;
    else return bad(v, "gradient_reduce", "expected auto, step, microbatch or layer");
    if (s->grad_reduce == QT_CG_REDUCE_STEP && s->mesh[QT_MESH_CONTEXT] > 1)
        return bad(v, "gradient_reduce", "step with context parallelism %d: a rank's token "
                   "blocks of a whole step are not one contiguous block of leaves, so the bits "
                   "would depend on the split; expected microbatch, layer or auto",
                   (int)s->mesh[QT_MESH_CONTEXT]);
    if (s->grad_reduce == QT_CG_REDUCE_STEP && s->mesh[QT_MESH_EXPERT] > 1)
        return bad(v, "gradient_reduce", "step with expert parallelism %d: an expert host's "
                   "leaves of a whole step are every peer's sequences, not one contiguous "
                   "block, so the bits would depend on the split; expected microbatch, layer or auto",
                   (int)s->mesh[QT_MESH_EXPERT]);
    const char *pg = gets_(v, "param_gather");
    if (!strcmp(pg, "auto")) s->param_gather = QT_CG_GATHER_AUTO;
    else if (!strcmp(pg, "step")) s->param_gather = QT_CG_GATHER_STEP;
    else if (!strcmp(pg, "layer")) s->param_gather = QT_CG_GATHER_LAYER;
    else return bad(v, "param_gather", "expected auto, step or layer");
    if (s->param_gather == QT_CG_GATHER_LAYER &&
        (s->grad_reduce == QT_CG_REDUCE_STEP || s->grad_reduce == QT_CG_REDUCE_MICROBATCH))
        return bad(v, "param_gather", "layer with gradient_reduce=%s: a layer's gathered "
                   "weights are dropped after its backward, so its gradient must be reduced "
                   "there too; expected gradient_reduce=layer or auto",
                   s->grad_reduce == QT_CG_REDUCE_STEP ? "step" : "microbatch");
    const char *co = gets_(v, "collective_overlap");
    if (!strcmp(co, "auto")) s->overlap = QT_CG_OVERLAP_AUTO;
    else if (!strcmp(co, "on")) s->overlap = QT_CG_OVERLAP_ON;
    else if (!strcmp(co, "off")) s->overlap = QT_CG_OVERLAP_OFF;
    else if (!strcmp(co, "all")) s->overlap = QT_CG_OVERLAP_ALL;
    else return bad(v, "collective_overlap", "expected auto, on, off or all");
    const char *rp = gets_(v, "remat_policy");
    if (!strcmp(rp, "none")) s->remat = QT_CG_REMAT_NONE;
    else if (!strcmp(rp, "full")) s->remat = QT_CG_REMAT_FULL;
    else if (!strcmp(rp, "save_dot")) s->remat = QT_CG_REMAT_SAVE_DOT;
    else return bad(v, "remat_policy", "expected none, full or save_dot");
    const int64_t cr = geti(v, "expert_chunk_rows");
    if (cr < 1 || cr > ((int64_t)1 << 24))
        return bad(v, "expert_chunk_rows", "%lld: expected 1 .. 16777216 rows", (long long)cr);
    s->expert_chunk_rows = cr;
    const int64_t cw = geti(v, "checkpoint_window_floats");
    if (cw < 1)
        return bad(v, "checkpoint_window_floats", "%lld: expected a positive float count",
                   (long long)cw);
    s->ckpt_window = cw;
    return 0;
}

static int check_rules(const qt_cg_vctx *v, qt_cg_settings *s)
{
    const qt_cg_val *r = kv(v, "logical_axis_rules")->val;
    s->rules = qt_cg_alloc((size_t)(r->n ? r->n : 1) * sizeof *s->rules);
    for (int i = 0; i < r->n; i++) {
        const qt_cg_val *e = &r->items[i];
        if (e->kind != QT_CG_LIST || e->n != 2 || e->items[0].kind != QT_CG_SCALAR)
            return bad(v, "logical_axis_rules", "entry %d: expected [logical_name, mesh_axis "
                       "or [mesh_axes...]]", i);
        qt_cg_rule *ru = &s->rules[s->n_rules++];
        ru->name = e->items[0].s;
        const qt_cg_val *m = &e->items[1];
        int n = m->kind == QT_CG_LIST ? m->n : 1;
        if (n > QT_CG_MAX_RULE_AXES)
            return bad(v, "logical_axis_rules", "entry %d ('%s'): too many mesh axes", i, ru->name);
        for (int a = 0; a < n; a++) {
            const qt_cg_val *x = m->kind == QT_CG_LIST ? &m->items[a] : m;
            int id = x->kind == QT_CG_SCALAR ? qt_cg_mt_axis_id(x->s) : -1;
            if (id < 0)
                return bad(v, "logical_axis_rules", "entry %d ('%s'): unknown mesh axis '%s' "
                           "(known: data, stage, fsdp, fsdp_transpose, context, "
                           "context_usp_ulysses, context_autoregressive, tensor, "
                           "tensor_sequence, expert, autoregressive, diloco)", i, ru->name,
                           x->kind == QT_CG_SCALAR ? x->s : "[...]");
            ru->axes[ru->n++] = id;
        }
    }
    return 0;
}

static void note_unused(const qt_cg_vctx *v, qt_cg_settings *s)
{
    size_t n = 0;
    for (int i = 0; i < v->c->n; i++) {
        const qt_cg_known *k = &v->c->k[i];
        if (!strstr(k->key, "vit") && strcmp(k->key, "vision_encoder_block")) continue;
        const qt_cg_val *x = k->val;
        int set = x->kind == QT_CG_LIST ? x->n > 0 : (x->s[0] && strcmp(x->s, "0"));
        if (set && n + strlen(k->key) + 3 < sizeof s->unused)
            n += (size_t)snprintf(s->unused + n, sizeof s->unused - n, "%s%s", n ? ", " : "",
                                  k->key);
    }
}

/* packing (MaxText's key) and eos_id (qtrain's: the document separator in the token
 * stream, docs/data.md): documents restart rotary positions, attention, the GDN conv and
 * the delta rule, and no loss is taken across a boundary. Both delta-rule forms restart
 * mid-sequence: the chunked one masks the pairs of different documents inside a chunk and
 * drops the carried state at a start (kernels/gdn_chunk.c). eos_id -1 (unset) plans -1:
 * qtrain takes the separator the token file records at start-up (firmware/io/data.c
 * qt_data_doc_sep; plan.txt says so). */
static int check_packing(const qt_cg_vctx *v, qt_cg_settings *s)
{
    s->packing = getb(v, "packing");
    const int64_t eos = geti(v, "eos_id");
    if (!s->packing) return 0;
    if (eos < -1 || eos >= s->m.vocab)
        return bad(v, "eos_id", "%lld with packing: true: expected the document separator's "
                   "token id in 0..%lld (vocab_size - 1; 151643 is <|endoftext|> of the Qwen "
                   "vocabulary), or -1: the id the token file records", (long long)eos,
                   (long long)s->m.vocab - 1);
    s->eos_id = (int32_t)eos;
    return 0;
}

/* vocab_parallel and vocab_blocks (docs/sharding.md "Logits", docs/determinism.md): the
 * logits split over tensor need canonical vocabulary blocks, a power of two of them per tensor
 * rank, so that every rank's shard is whole blocks, a node of the blocks' tree (the cross
 * entropy's, xent.h, and the lm_head data gradient's, matmul_canon.h: both the binary
 * counter for any count), and the tree over the blocks is one rank's. The count is a power
 * of two, or with canonical_factor f a power of two times a factor of f (config/canon.c):
 * tensor 3 with f 3 takes 3 or 6 blocks, as one rank with f 3 and the same count. A tensor
 * axis whose odd part f lacks is refused by check_mesh, naming canonical_factor. */
static int check_vocab(const qt_cg_vctx *v, qt_cg_settings *s)
{
    const int64_t tp = s->mesh[QT_MESH_TENSOR], V = s->m.vocab, nb = geti(v, "vocab_blocks");
    const int par = getb(v, "vocab_parallel") && tp > 1;
    const int64_t n = nb == 0 ? (par ? tp : 1) : nb, f = s->canon_factor > 1 ? s->canon_factor : 1;
    const int64_t odd = n > 0 ? n / (n & -n) : 0, share = par && n % tp == 0 ? n / tp : 0;
    char o[400];
    if (f == 1 && (n < 1 || odd != 1 || V % n))
        return bad(v, "vocab_blocks", "%lld: expected 0 (= the tensor degree with "
                   "vocab_parallel, else 1) or a power of two dividing %s", (long long)nb,
                   other(v, "vocab_size", o, sizeof o));
    if (f > 1 && (n < 1 || f % odd || V % n)) {
        char o2[400];
        return bad(v, "vocab_blocks", "%lld: expected 0 (= the tensor degree with "
                   "vocab_parallel, else 1) or a power of two times a factor of %s dividing "
                   "%s", (long long)nb, factor_txt(v, s, o2, sizeof o2),
                   other(v, "vocab_size", o, sizeof o));
    }
    if (par && (n < tp || n % tp || (share & (share - 1))))
        return bad(v, "vocab_blocks", "%lld with vocab_parallel: true on %lld tensor ranks (%s): "
                   "expected a multiple of the tensor degree by a power of two (each rank's "
                   "vocabulary shard is whole canonical blocks, a power of two of them)",
                   (long long)n, (long long)tp, other(v, "ici_tensor_parallelism", o, sizeof o));
    s->vocab_parallel = par;
    s->vocab_blocks = (int32_t)n;
    return 0;
}

int qt_cg_settings_resolve(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen)
{
    qt_cg_vctx v = {c, err, errlen};
    memset(s, 0, sizeof *s);
    snprintf(s->run_name, sizeof s->run_name, "%s", c->run_name);
    snprintf(s->model_name, sizeof s->model_name, "%s", c->model_name);
    if (!s->run_name[0]) return qt_cg_fail(err, errlen, "run_name is empty");
    /* The name becomes a directory under -o and a C identifier: letters, digits, '-' and
     * '_' only, starting with a letter or digit, so it can never climb out of the output
     * directory ("..") or hide (".x"). */
    for (size_t i = 0; s->run_name[i]; i++) {
        char ch = s->run_name[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (((!ok && !strchr("-_", ch)) || (i == 0 && !ok)) && from_base(&v, "run_name"))
            /* unset: the name is the run file's (config.c), which the message must show */
            return qt_cg_fail(err, errlen, "run_name defaults to the run file's name, '%s' (%s), "
                              "which has '%c': expected letters, digits, '-' or '_', starting "
                              "with a letter or digit (it names the output directory and a C "
                              "symbol); set run_name in the run file or rename it",
                              s->run_name, c->files[2] ? c->files[2] : "the run file", ch);
        if ((!ok && !strchr("-_", ch)) || (i == 0 && !ok))
            return bad(&v, "run_name", "expected letters, digits, '-' or '_', starting with a "
                       "letter or digit (it names the output directory and a C symbol)");
        s->cname[i] = ok ? ch : '_';
    }
    if (check_floats(&v) || check_model(&v, s) || check_train(&v, s) || check_sizes(&v, s) ||
        check_mesh(&v, s) || check_policies(&v, s) || check_rules(&v, s) ||
        check_packing(&v, s))
        return -1;
    if (batch_split(&v, s) || check_vocab(&v, s) || qt_cg_train_rules(c, s, err, errlen))
        return -1;
    if (qt_cg_moe_rules(c, s, err, errlen)) return -1;
    if (qt_cg_dispatch_rules(c, s, err, errlen)) return -1;
    if (qt_cg_settings_mtp(c, s, err, errlen)) return -1;
    if (qt_cg_maxtext_rules(c, s, err, errlen)) return -1;
    s->batch_mask = 0;
    s->opt_mask = 0;
    /* the batch axes, in rank order: context last, the least significant (its ranks hold
     * the blocks of one sequence: docs/context.md) */
    static const int batch_axes[4] = {QT_MESH_DATA, QT_MESH_FSDP, QT_MESH_EXPERT,
                                      QT_MESH_CONTEXT};
    for (int i = 0; i < 4; i++)
        if (s->mesh[batch_axes[i]] > 1) s->batch_mask |= (uint8_t)(1u << batch_axes[i]);
    /* the optimizer state (and the update) is split over fsdp, and over data with ZeRO-1
     * (docs/design.md section 5: data is the minor sub-axis of the fsdp shard) */
    if (s->mesh[QT_MESH_FSDP] > 1) s->opt_mask |= (uint8_t)(1u << QT_MESH_FSDP);
    /* MaxText shards the embed dims over expert as well (fsdp-like for dense weights) */
    if (s->mesh[QT_MESH_EXPERT] > 1) s->opt_mask |= (uint8_t)(1u << QT_MESH_EXPERT);
    /* and over context (MaxText's embed rules: fsdp-like) */
    if (s->mesh[QT_MESH_CONTEXT] > 1) s->opt_mask |= (uint8_t)(1u << QT_MESH_CONTEXT);
    if (s->zero1 && s->mesh[QT_MESH_DATA] > 1) s->opt_mask |= (uint8_t)(1u << QT_MESH_DATA);
    if (s->param_gather == QT_CG_GATHER_LAYER && !s->opt_mask)
        return bad(&v, "param_gather", "layer on a mesh whose optimizer state is not split "
                   "(no fsdp or expert axis, no ZeRO-1 over data): every rank holds every "
                   "parameter, nothing to gather; expected step or auto");
    note_unused(&v, s);
    return 0;
}

void qt_cg_settings_free(qt_cg_settings *s)
{
    free(s->rules);
    memset(s, 0, sizeof *s);
}
