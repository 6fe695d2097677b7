/* config/config.c - layering of config sources and key/type checking.
 *
 * base.yml defines the set of known keys and, by the form of each default, its type
 * (true/false -> bool, integer literal -> int, other number -> float, quoted or bare
 * text -> string, [...] -> list). Layers are applied in order base, models/<model>.yml,
 * the run file, command-line key=value; the last one wins. Invariants: a key not in
 * base.yml is an error naming where it was set and the nearest known key; a value of the
 * wrong type is an error naming key, value and expected type; int keys accept integral
 * numbers written as floats (2.0, 1e7) because MaxText configs do so; a bool key takes YAML's
 * core-schema spellings true/True/TRUE and false/False/FALSE (MaxText's OmegaConf reads them
 * all: its published qwen3.5-35b-a3b.yml has `norm_topk_prob: True`, its recipes pass
 * `sparse_matmul=True`), stored as true / false so the plan and its config text are those of
 * the lower-case value. Keys MaxText has and base.yml does not are looked up in
 * config/maxtext_keys.c's table before the "unknown key" error (qt_cg_config.mt). A run with no model
 * (model_name empty) must set every model key (qt_cg_model_keys) itself, so base.yml's
 * default model is never planned by accident; run_name and model_name must fit their
 * 128-byte buffers (a name cut short could make two runs share a plan directory).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

/* base.yml's "---- model shape" section, in its order (the unit tests compare them) */
const char *const qt_cg_model_keys[] = {
    "decoder_block", "base_emb_dim", "base_num_decoder_layers", "base_num_query_heads",
    "base_num_kv_heads", "head_dim", "base_mlp_dim", "base_moe_mlp_dim", "shared_expert_mlp_dim",
    "num_experts", "num_experts_per_tok", "shared_experts", "norm_topk_prob", "vocab_size",
    "normalization_layer_epsilon", "inhomogeneous_layer_cycle_interval", "gdn_conv_kernel_dim",
    "gdn_key_head_dim", "gdn_value_head_dim", "gdn_num_key_heads", "gdn_num_value_heads",
    "gdn_chunk_size", "gdn_core_algorithm", "use_qk_norm_in_gdn", "partial_rotary_factor",
    "rope_max_timescale", "rope_min_timescale", "use_mrope", "mrope_section", "enable_dropout",
    "dropout_rate", "dtype", "weight_dtype", "logits_via_embedding",
};
const int qt_cg_n_model_keys = (int)(sizeof qt_cg_model_keys / sizeof qt_cg_model_keys[0]);

static int is_number(const char *s, double *out)
{
    char *end;
    if (!*s) return 0;
    double v = strtod(s, &end);
    if (*end || !isfinite(v)) return 0;
    if (strchr(s, 'x') || strchr(s, 'X') || strchr(s, 'n') || strchr(s, 'N')) return 0;
    if (out) *out = v;
    return 1;
}

static int is_int_literal(const char *s)
{
    const char *p = s;
    if (*p == '-' || *p == '+') p++;
    if (!*p) return 0;
    for (; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

/* Keys whose base.yml value is a whole number but which MaxText also takes as a fraction
 * (per_device_batch_size, eval_per_device_batch_size: ranks that share sequences), so their type is "a number". */
static int fractional_key(const char *key)
{
    return !strcmp(key, "per_device_batch_size") || !strcmp(key, "eval_per_device_batch_size");
}

/* An integer literal with a leading zero and octal digits only ("010", "-007"): YAML 1.1
 * (PyYAML, which MaxText's OmegaConf uses on its files and its command line) reads
 * [-+]?0[0-7]+ as octal (010 is 8), YAML 1.2 and qtrain's reader as decimal (10): refused
 * (check_type), so a MaxText config never means one number there and another here. ("09"
 * is text to PyYAML, which MaxText's pydantic types then read as 9, as qtrain does: kept.)
 * Returns the octal value, or -1 when s is not such a literal. */
static long long leading_zero_octal(const char *s)
{
    const char *p = s + (*s == '-' || *s == '+');
    if (p[0] != '0' || !p[1] || !is_int_literal(p)) return -1;
    long long o = 0;
    for (p++; *p; p++) {
        if (*p > '7') return -1;
        o = o < (1LL << 58) ? o * 8 + (*p - '0') : o;
    }
    return o;
}

static int infer_type(const qt_cg_val *v)
{
    if (v->kind == QT_CG_LIST) return QT_CG_T_LIST;
    if (v->quoted) return QT_CG_T_STR;
    if (!strcmp(v->s, "true") || !strcmp(v->s, "false")) return QT_CG_T_BOOL;
    if (is_int_literal(v->s)) return QT_CG_T_INT;
    if (is_number(v->s, NULL)) return QT_CG_T_FLOAT;
    return QT_CG_T_STR;
}

static const char *type_name(int t)
{
    switch (t) {
    case QT_CG_T_BOOL: return "true or false";
    case QT_CG_T_INT: return "an integer";
    case QT_CG_T_FLOAT: return "a number";
    case QT_CG_T_STR: return "a string";
    default: return "a list [...]";
    }
}

static int check_type(const char *where, const char *key, int type, const qt_cg_val *v,
                      char *err, size_t errlen)
{
    int ok = 0;
    double d;
    if ((type == QT_CG_T_INT || type == QT_CG_T_FLOAT) && v->kind == QT_CG_SCALAR &&
        !v->quoted && leading_zero_octal(v->s) >= 0)
        return qt_cg_fail(err, errlen, "%s: %s: value %s has a leading zero: YAML 1.1 (PyYAML, "
                          "MaxText's reader) takes it as the octal number %s%lld, other YAML "
                          "readers as decimal; write the number without the leading zero",
                          where, key, v->s, *v->s == '-' ? "-" : "", leading_zero_octal(v->s));
    if (type == QT_CG_T_LIST) ok = v->kind == QT_CG_LIST;
    else if (v->kind != QT_CG_SCALAR) ok = 0;
    else if (type == QT_CG_T_STR) ok = 1;
    else if (v->quoted) ok = 0;
    else if (type == QT_CG_T_BOOL) ok = qt_cg_bool_word(v->s) >= 0;
    else if (type == QT_CG_T_FLOAT) ok = is_number(v->s, NULL);
    else ok = is_number(v->s, &d) && d == floor(d) && fabs(d) < 9007199254740992.0;
    if (ok) return 0;
    qt_cg_buf b = {0};
    qt_cg_val_render(v, &b);
    /* a whole number past 2^53 is an integer, but not one a double holds exactly */
    if (type == QT_CG_T_INT && v->kind == QT_CG_SCALAR && !v->quoted && is_number(v->s, &d) &&
        d == floor(d))
        qt_cg_fail(err, errlen, "%s: %s: value %s is out of range: expected an integer of "
                   "magnitude below 2^53 (9007199254740992)", where, key, b.p);
    else
        qt_cg_fail(err, errlen, "%s: %s: value %s is not %s%s", where, key, b.p, type_name(type),
               type == QT_CG_T_BOOL ? " (True / False and TRUE / FALSE are taken too)" : "");
    qt_cg_buf_free(&b);
    return -1;
}

const qt_cg_known *qt_cg_config_find(const qt_cg_config *c, const char *key)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->k[i].key, key)) return &c->k[i];
    return NULL;
}

static int unknown_key(const qt_cg_config *c, const char *where, const char *key, char *err,
                       size_t errlen)
{
    int best = -1, bd = 1 << 30;
    char low[128];   /* capitals as lower case: STEPS=3 is told 'steps' (base.yml's keys are) */
    snprintf(low, sizeof low, "%s", key);
    for (char *q = low; *q; q++)
        if (*q >= 'A' && *q <= 'Z') *q = (char)(*q + 32);
    for (int i = 0; i < c->n; i++) {
        int d = qt_cg_edit_distance(low, c->k[i].key);
        if (d < bd) {
            bd = d;
            best = i;
        }
    }
    if (best < 0) return qt_cg_fail(err, errlen, "%s: unknown key '%s'", where, key);
    return qt_cg_fail(err, errlen, "%s: unknown key '%s' (did you mean '%s'?)", where, key,
                      c->k[best].key);
}

static int apply(qt_cg_config *c, const char *where, const char *key, const qt_cg_val *v,
                 char *err, size_t errlen)
{
    qt_cg_known *k = (qt_cg_known *)qt_cg_config_find(c, key);
    if (!k) {
        if (qt_cg_mt_key_known(key)) return qt_cg_mt_set(c, where, key, v);
        return unknown_key(c, where, key, err, errlen);
    }
    if (check_type(where, key, k->type, v, err, errlen)) return -1;
    /* True / TRUE (False / FALSE) as true (false): the same length, rewritten in place, so
     * every later reader of the value sees the lower-case word */
    if (k->type == QT_CG_T_BOOL) {
        const int b = qt_cg_bool_word(v->s);
        memcpy(((qt_cg_val *)v)->s, b ? "true" : "false", b ? 5 : 6);
    }
    k->val = v;
    snprintf(k->where, sizeof k->where, "%s", where);
    return 0;
}

static int apply_doc(qt_cg_config *c, const qt_cg_doc *d, int is_model, char *err, size_t errlen)
{
    for (int i = 0; i < d->n; i++) {
        char where[300];
        snprintf(where, sizeof where, "%s:%d", d->file, d->e[i].line);
        if (is_model && (!strcmp(d->e[i].key, "model_name") || !strcmp(d->e[i].key, "run_name")))
            return qt_cg_fail(err, errlen, "%s: a model file may not set %s", where, d->e[i].key);
        if (apply(c, where, d->e[i].key, &d->e[i].val, err, errlen)) return -1;
    }
    return 0;
}

/* MaxText's own configs/base.yml given as the run file stops on YAML qtrain does not read
 * (`vllm_hf_overrides: {}`); its keys `base_output_directory` and `hardware` (which no
 * qtrain run file sets) say what it is, and the message then says what to give instead. */
int qt_cg_maxtext_base_text(const char *text)
{
    return strstr(text, "\nbase_output_directory:") && strstr(text, "\nhardware:");
}

static void maxtext_base_hint(const char *text, char *err, size_t errlen)
{
    if (!qt_cg_maxtext_base_text(text)) return;
    size_t m = strlen(err);
    snprintf(err + m, errlen - m, " (this looks like MaxText's own base.yml, by its "
             "base_output_directory and hardware keys; configgen has its own, MaxText's defaults "
             "for the keys qtrain plans: give configgen/configs/base.yml in its place with the "
             "same key=value arguments, e.g. configgen configgen/configs/base.yml "
             "model_name=qwen3-next-80b-a3b steps=100, or a run file of "
             "configgen/configs/runs/)");
}

static int load_doc(const char *path, qt_cg_doc *d, int is_run, char *err, size_t errlen)
{
    char *text;
    if (qt_cg_read_file(path, &text, err, errlen)) return -1;
    int r = qt_cg_yaml_parse(path, text, d, err, errlen);
    if (r && is_run) maxtext_base_hint(text, err, errlen);
    free(text);
    return r;
}

/* The value a later layer gives `key`, looking at overrides then the run file. */
static const qt_cg_val *peek(const qt_cg_config *c, const char *key)
{
    for (int i = c->n_over - 1; i >= 0; i--)
        if (!strcmp(c->over_keys[i], key)) return &c->over[i];
    for (int i = 0; i < c->run.n; i++)
        if (!strcmp(c->run.e[i].key, key)) return &c->run.e[i].val;
    return NULL;
}

/* 1 if key's value comes from base.yml */
static int is_base(const qt_cg_config *c, const qt_cg_known *k)
{
    size_t n = strlen(c->base.file);
    return !strncmp(k->where, c->base.file, n) && k->where[n] == ':';
}

/* No model file: every model key must come from the run itself. */
static int no_model(const qt_cg_config *c, const char *configs_dir, const char *run_path,
                    char *err, size_t errlen)
{
    char missing[300];
    size_t m = 0;
    int n_missing = 0;
    for (int i = 0; i < qt_cg_n_model_keys; i++) {
        const qt_cg_known *k = qt_cg_config_find(c, qt_cg_model_keys[i]);
        if (!k || !is_base(c, k)) continue;
        if (n_missing++ < 4 && m < sizeof missing)
            m += (size_t)snprintf(missing + m, sizeof missing - m, "%s%s", m ? ", " : "",
                                  k->key);
    }
    if (!n_missing) return 0;
    if (n_missing > 4 && m < sizeof missing)
        snprintf(missing + m, sizeof missing - m, " and %d more", n_missing - 4);
    const qt_cg_known *mn = qt_cg_config_find(c, "model_name");
    char head[600];
    if (is_base(c, mn))
        snprintf(head, sizeof head, "%s: no model: model_name is not set (%s gives \"\")",
                 run_path, mn->where);
    else
        snprintf(head, sizeof head, "model_name=\"%s\" (%s): no model", mn->val->s, mn->where);
    return qt_cg_fail(err, errlen, "%s, and the run does not set the model keys itself "
                      "(missing %s); expected model_name: <a file stem under %s/models/, e.g. "
                      "qwen3-next-tiny>, or every model key in the run", head, missing,
                      configs_dir);
}

/* run_name and model_name must fit the 128-byte buffers they are copied to. */
static int name_too_long(const qt_cg_known *k, size_t cap, char *err, size_t errlen)
{
    size_t n = strlen(k->val->s);
    if (n < cap) return 0;
    return qt_cg_fail(err, errlen, "%s=%.40s... (%s): %zu characters, over the limit of %zu "
                      "(it names the plan directory and C symbols); expected a shorter name",
                      k->key, k->val->s, k->where, n, cap - 1);
}

int qt_cg_config_load(qt_cg_config *c, const char *configs_dir, const char *run_path, int n_over,
                      char *const *over, char *err, size_t errlen)
{
    char path[4096];
    memset(c, 0, sizeof *c);
    snprintf(path, sizeof path, "%s/base.yml", configs_dir);
    c->files[0] = qt_cg_strdup(path);
    if (access(path, F_OK) != 0) {
        /* no base.yml where driver/pipeline.c looked: say where that is and what to do,
         * not only "cannot open" (a run file outside the tree, configgen started elsewhere) */
        char cwd[4096];
        return qt_cg_fail(err, errlen, "%s: not found: configgen takes base.yml (and models/) "
                          "from beside the run file %s (its directory or the one above it), "
                          "else from configgen/configs under the current directory %s; run "
                          "configgen from the project root, or put the run file in "
                          "configgen/configs/runs/", path, run_path,
                          getcwd(cwd, sizeof cwd) ? cwd : "(unknown)");
    }
    if (load_doc(path, &c->base, 0, err, errlen)) return -1;
    c->n = c->base.n;
    c->k = qt_cg_alloc((size_t)c->n * sizeof *c->k);
    for (int i = 0; i < c->n; i++) {
        c->k[i].key = c->base.e[i].key;
        c->k[i].type = fractional_key(c->k[i].key) ? QT_CG_T_FLOAT
                                                    : infer_type(&c->base.e[i].val);
        c->k[i].val = &c->base.e[i].val;
        snprintf(c->k[i].where, sizeof c->k[i].where, "%s:%d", c->base.file, c->base.e[i].line);
    }
    c->files[2] = qt_cg_strdup(run_path);
    /* configgen's own base.yml given as the run file (MaxText's habit: `train.py base.yml
     * model_name=X k=v`): it is the base layer already, and applying it again above the
     * model file would put base.yml's default model back over model X, key by key (a 48-layer
     * d 2048 plan for model_name=qwen3-next-tiny); so it adds no layer, as in MaxText, where
     * base.yml sits under the model file. */
    struct stat sb, sr;
    if (!stat(path, &sb) && !stat(run_path, &sr) && sb.st_dev == sr.st_dev && sb.st_ino == sr.st_ino) {
        memset(&c->run, 0, sizeof c->run);
        c->run.file = qt_cg_strdup(run_path);
    } else if (load_doc(run_path, &c->run, 1, err, errlen)) {
        return -1;
    }

    c->over = qt_cg_alloc((size_t)(n_over ? n_over : 1) * sizeof *c->over);
    c->over_keys = qt_cg_alloc((size_t)(n_over ? n_over : 1) * sizeof *c->over_keys);
    for (int i = 0; i < n_over; i++) {
        const char *eq = strchr(over[i], '=');
        if (!eq || eq == over[i])
            return qt_cg_fail(err, errlen, "command line: expected key=value, got '%s'", over[i]);
        size_t kl = (size_t)(eq - over[i]);
        c->over_keys[i] = qt_cg_alloc(kl + 1);
        memcpy(c->over_keys[i], over[i], kl);
        c->n_over = i + 1;
        char where[300];
        snprintf(where, sizeof where, "command line (%s)", c->over_keys[i]);
        if (qt_cg_yaml_parse_value(where, eq + 1, &c->over[i], err, errlen)) return -1;
    }

    /* The model file sits between base and run, so its name is looked up first. */
    const qt_cg_val *mv = peek(c, "model_name");
    if (!mv) mv = qt_cg_config_find(c, "model_name")->val;
    if (mv && mv->kind == QT_CG_SCALAR && mv->s[0]) {
        if (strchr(mv->s, '/') || strstr(mv->s, ".."))
            return qt_cg_fail(err, errlen, "model_name '%s': expected a file stem under models/",
                              mv->s);
        snprintf(path, sizeof path, "%s/models/%s.yml", configs_dir, mv->s);
        c->files[1] = qt_cg_strdup(path);
        c->have_model = 1;
        if (load_doc(path, &c->model, 0, err, errlen)) {
            size_t m = strlen(err);
            if (m + 80 < errlen)
                snprintf(err + m, errlen - m, " (model_name '%s')", mv->s);
            return -1;
        }
        if (apply_doc(c, &c->model, 1, err, errlen)) return -1;
    }
    if (apply_doc(c, &c->run, 0, err, errlen)) return -1;
    for (int i = 0; i < c->n_over; i++) {
        char where[300];
        snprintf(where, sizeof where, "command line");
        if (apply(c, where, c->over_keys[i], &c->over[i], err, errlen)) return -1;
    }
    if (!c->have_model && no_model(c, configs_dir, run_path, err, errlen)) return -1;
    const qt_cg_known *mn = qt_cg_config_find(c, "model_name");
    if (mn && name_too_long(mn, sizeof c->model_name, err, errlen)) return -1;
    if (mn) snprintf(c->model_name, sizeof c->model_name, "%s", mn->val->s);
    const qt_cg_known *rn = qt_cg_config_find(c, "run_name");
    if (rn && rn->val->s[0]) {
        if (name_too_long(rn, sizeof c->run_name, err, errlen)) return -1;
        snprintf(c->run_name, sizeof c->run_name, "%s", rn->val->s);
    } else {
        const char *b = strrchr(run_path, '/');
        b = b ? b + 1 : run_path;
        size_t n = strlen(b);
        if (n > 4 && !strcmp(b + n - 4, ".yml")) n -= 4;
        else if (n > 5 && !strcmp(b + n - 5, ".yaml")) n -= 5;
        if (n >= sizeof c->run_name)
            return qt_cg_fail(err, errlen, "%s: run_name defaults to the file's name, %.40s... "
                              "(%zu characters), over the limit of %zu; set a shorter "
                              "run_name", run_path, b, n, sizeof c->run_name - 1);
        memcpy(c->run_name, b, n);
        c->run_name[n] = 0;
    }
    return 0;
}

void qt_cg_config_free(qt_cg_config *c)
{
    for (int i = 0; i < c->n_over; i++) {
        qt_cg_val_free(&c->over[i]);
        free(c->over_keys[i]);
    }
    free(c->over);
    free(c->over_keys);
    free(c->k);
    free(c->mt);
    qt_cg_doc_free(&c->base);
    qt_cg_doc_free(&c->model);
    qt_cg_doc_free(&c->run);
    for (int i = 0; i < 3; i++) free(c->files[i]);
    memset(c, 0, sizeof *c);
}
