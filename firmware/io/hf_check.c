/* hf_check.c - qt_hf_config_check: the config.json a load= or save= checkpoint directory
 * already holds, against the plan's own (qt_hf_config_json), at start-up (contract in
 * hf_config.h).
 *
 * Compared: the keys that set the model's math and tensor shapes, at the top level for
 * Qwen3-Next (qwen3_next) and under text_config for Qwen3.5 (qwen3_5_moe), model_type at the
 * top level for both. The shape keys (vocab_size, hidden_size, layers, heads, head dims, GDN
 * heads and dims, conv kernel, experts, top-k, expert and shared-expert widths) must be
 * present. The others are compared with transformers' default when the file lacks them
 * (norm_topk_prob true, decoder_sparse_step 1, mlp_only_layers [], full_attention_interval 4,
 * rms_norm_eps 1e-06, hidden_act silu, attention_bias and tie_word_embeddings false), or only
 * when present (layer_types, partial_rotary_factor, rope_parameters' rope_type, rope_theta and
 * partial_rotary_factor); rope_theta must be present at the top level or in rope_parameters.
 * Not compared (they do not change the math): architectures, dtype, torch_dtype,
 * transformers_version, use_cache, max_position_embeddings, router_aux_loss_coef,
 * output_router_logits, bos/eos ids, vision_config, keys qtrain does not write. A key the
 * plan's config.json does not have (norm_topk_prob for Qwen3.5) is skipped.
 * Values: two numbers are equal when they are as doubles or as floats (1e-6 == 1e-06 ==
 * 9.9999999747524271e-07); other values are compared as text with the blanks outside strings
 * removed.
 * Invariants: no heap, no recursion (the JSON walk skips nested values by bracket depth),
 * module state in qt_hc; only reads files; a refusal names the file, the key, both values
 * and what to do.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"
#include "hf_config.h"

#define QT_HC_USER (1 << 20)     /* largest config.json read (published ones: a few KiB) */
#define QT_HC_PLAN (1 << 16)
#define QT_HC_SHOW 72            /* value characters shown in a message */

/* A compared key: dflt NULL = must be present, "" = compared only when present, else
 * transformers' default (JSON text) when absent. text: under text_config for Qwen3.5. */
typedef struct qt_hc_key {
    const char *name, *dflt;
    int text;
} qt_hc_key;

static const qt_hc_key qt_hc_keys[] = {
    {"model_type", NULL, 0},
    {"vocab_size", NULL, 1}, {"hidden_size", NULL, 1}, {"num_hidden_layers", NULL, 1},
    {"num_attention_heads", NULL, 1}, {"num_key_value_heads", NULL, 1}, {"head_dim", NULL, 1},
    {"linear_num_key_heads", NULL, 1}, {"linear_num_value_heads", NULL, 1},
    {"linear_key_head_dim", NULL, 1}, {"linear_value_head_dim", NULL, 1},
    {"linear_conv_kernel_dim", NULL, 1}, {"num_experts", NULL, 1},
    {"num_experts_per_tok", NULL, 1}, {"moe_intermediate_size", NULL, 1},
    {"shared_expert_intermediate_size", NULL, 1},
    {"norm_topk_prob", "true", 1}, {"decoder_sparse_step", "1", 1},
    {"mlp_only_layers", "[]", 1}, {"full_attention_interval", "4", 1},
    {"layer_types", "", 1}, {"rms_norm_eps", "1e-06", 1}, {"rope_theta", "", 1},
    {"partial_rotary_factor", "", 1}, {"rope_parameters.rope_type", "", 1},
    {"rope_parameters.rope_theta", "", 1}, {"rope_parameters.partial_rotary_factor", "", 1},
    {"hidden_act", "\"silu\"", 1}, {"attention_bias", "false", 1},
    {"tie_word_embeddings", "false", 1}, {"tie_word_embeddings", "false", 0},
    {"text_config.model_type", "", 0},
};

static struct {
    char user[QT_HC_USER + 1];
    char plan[QT_HC_PLAN];
    char file[4096 + 32];
    char path[160];
    char a[QT_HC_SHOW + 4], b[QT_HC_SHOW + 4];
    long user_len, plan_len;
} qt_hc;

/* ---- a JSON walk over [p, e) ---- */

static const char *qt_hc_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* End of the JSON value at p (after blanks), or NULL when malformed. */
static const char *qt_hc_skip(const char *p, const char *e)
{
    long depth = 0;
    p = qt_hc_ws(p, e);
    if (p >= e) return NULL;
    do {
        if (p >= e) return NULL;
        if (*p == '"') {
            for (p++; p < e && *p != '"'; p++)
                if (*p == '\\') p++;
            if (p >= e) return NULL;
            p++;
        } else if (*p == '{' || *p == '[') {
            depth++;
            p++;
        } else if (*p == '}' || *p == ']') {
            if (--depth < 0) return NULL;
            p++;
        } else if (depth == 0) {
            const char *s = p;
            while (p < e && !strchr(",}] \t\r\n", *p)) p++;
            if (p == s) return NULL;
        } else {
            p++;
        }
    } while (depth > 0);
    return p;
}

/* Member `name` (n bytes) of the object at p: 1 with its value in [*v, *ve) (the last one
 * when repeated, as Python reads it), 0 when absent, -1 when p is not a well-formed object. */
static int qt_hc_member(const char *p, const char *e, const char *name, size_t n,
                        const char **v, const char **ve)
{
    int found = 0;
    p = qt_hc_ws(p, e);
    if (p >= e || *p++ != '{') return -1;
    p = qt_hc_ws(p, e);
    if (p < e && *p == '}') return 0;
    for (;;) {
        const char *k = qt_hc_ws(p, e), *ke = qt_hc_skip(k, e);
        if (!ke || *k != '"') return -1;
        p = qt_hc_ws(ke, e);
        if (p >= e || *p++ != ':') return -1;
        const char *vs = qt_hc_ws(p, e), *vend = qt_hc_skip(vs, e);
        if (!vend) return -1;
        if ((size_t)(ke - k) == n + 2 && !memcmp(k + 1, name, n)) {
            *v = vs;
            *ve = vend;
            found = 1;
        }
        p = qt_hc_ws(vend, e);
        if (p < e && *p == ',') { p++; continue; }
        if (p < e && *p == '}') return found;
        return -1;
    }
}

/* The value at the dotted path in the JSON text [s, e): 1 and its span, 0 when absent, -1
 * when malformed on the way. */
static int qt_hc_get(const char *s, const char *e, const char *path, const char **v,
                     const char **ve)
{
    const char *p = s, *pe = e;
    for (;;) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        int r = qt_hc_member(p, pe, path, n, v, ve);
        if (r <= 0 || !dot) return r;
        p = *v;
        pe = *ve;
        path = dot + 1;
    }
}

/* ---- values ---- */

/* [v, ve) as a NUL-terminated display string in out (QT_HC_SHOW characters at most). */
static const char *qt_hc_show(const char *v, const char *ve, char *out)
{
    size_t n = (size_t)(ve - v);
    if (n > QT_HC_SHOW) {
        memcpy(out, v, QT_HC_SHOW - 3);
        memcpy(out + QT_HC_SHOW - 3, "...", 4);
    } else {
        memcpy(out, v, n);
        out[n] = 0;
    }
    return out;
}

/* The number [v, ve) in *x: 1 when the whole span is one. */
static int qt_hc_num(const char *v, const char *ve, double *x)
{
    char buf[64], *end;
    size_t n = (size_t)(ve - v);
    if (n == 0 || n >= sizeof buf || !strchr("-0123456789", *v)) return 0;
    memcpy(buf, v, n);
    buf[n] = 0;
    *x = strtod(buf, &end);
    return *end == 0;
}

/* The next character of [*p, e) that counts (blanks outside strings skipped; *in and *esc
 * track strings and escapes), or -1 at the end. */
static int qt_hc_next(const char **p, const char *e, int *in, int *esc)
{
    while (*p < e && !*in && strchr(" \t\r\n", **p)) (*p)++;
    if (*p >= e) return -1;
    const char c = *(*p)++;
    if (*esc) *esc = 0;
    else if (c == '\\' && *in) *esc = 1;
    else if (c == '"') *in = !*in;
    return (unsigned char)c;
}

/* Equal JSON values: numbers as doubles or floats, the rest as text without the blanks
 * outside strings. */
static int qt_hc_same(const char *a, const char *ae, const char *b, const char *be)
{
    double x, y;
    if (qt_hc_num(a, ae, &x) && qt_hc_num(b, be, &y))
        return x == y || (float)x == (float)y;
    int ia = 0, ea = 0, ib = 0, eb = 0;
    for (;;) {
        int ca = qt_hc_next(&a, ae, &ia, &ea), cb = qt_hc_next(&b, be, &ib, &eb);
        if (ca != cb) return 0;
        if (ca < 0) return 1;
    }
}

/* ---- the check ---- */

/* The refusal of one disagreeing key. has: the file holds it (mine is its value), else
 * mine is transformers' default for it or "" (none). */
static int qt_hc_refuse(const char *key, int overwrite, const char *name, int has,
                        const char *mine, const char *want)
{
    char what[QT_HC_SHOW + 48];
    if (has) snprintf(what, sizeof what, "is %s", mine);
    else if (*mine) snprintf(what, sizeof what, "is missing (transformers' default: %s)", mine);
    else snprintf(what, sizeof what, "is missing");
    if (strcmp(key, "save"))
        return qt_fail(QT_E_ARG, "%s=%s: %s %s, but the plan (and the weights) have %s; fix "
                       "or remove config.json", key, qt_hc.file, name, what, want);
    if (overwrite) {
        qt_note("%s=%s: %s %s, but the plan has %s; overwrite=1: the save replaces it with "
                "the plan's config.json", key, qt_hc.file, name, what, want);
        qt_hf_config_replace_set(1);
        return QT_OK;
    }
    return qt_fail(QT_E_ARG, "%s=%s: %s %s, but the plan has %s; a save would keep it beside "
                   "weights with %s %s: fix or remove it, or give overwrite=1 to replace it "
                   "with the plan's config.json", key, qt_hc.file, name, what, want, name, want);
}

/* Reads qt_hc.file into qt_hc.user: 1 when read, 0 when there is none, or a QT_E_ARG
 * code after a message. A symbolic link is followed (the Hugging Face hub cache keeps a
 * snapshot's files as links into its blobs); what it names must be a regular file, so a
 * FIFO or a device is refused before it is opened (an open would wait). */
static int qt_hc_read(const char *key)
{
    struct stat st;
    if (stat(qt_hc.file, &st) != 0)
        return errno == ENOENT ? 0 : qt_fail(QT_E_ARG, "%s=%s: cannot stat: %s", key,
                                             qt_hc.file, strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_size > QT_HC_USER)
        return qt_fail(QT_E_ARG, "%s=%s: %s; expected the model's config.json (a regular file "
                       "of at most %d bytes): fix or remove it", key, qt_hc.file,
                       S_ISREG(st.st_mode) ? "too large" : "not a regular file", QT_HC_USER);
    int fd = open(qt_hc.file, O_RDONLY | O_CLOEXEC);
    long n = 0, r = 1;
    if (fd >= 0)
        while (n < QT_HC_USER && (r = read(fd, qt_hc.user + n, QT_HC_USER - n)) > 0) n += r;
    if (fd < 0 || r < 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return qt_fail(QT_E_ARG, "%s=%s: cannot read: %s", key, qt_hc.file, strerror(e));
    }
    close(fd);
    qt_hc.user_len = n;
    return 1;
}

/* The directory of a load= / save= argument that may hold a config.json into qt_hc.file
 * (as DIR/config.json): 1, or 0 when the argument names none (a .safetensors file, a path
 * that does not exist). */
static int qt_hc_dir(const char *key, const char *arg)
{
    struct stat st;
    size_t n = strlen(arg);
    const int dir = stat(arg, &st) == 0 && S_ISDIR(st.st_mode);
    const int index = !strcmp(key, "load") && n > 11 && !strcmp(arg + n - 11, ".index.json");
    if (!dir && !index) return 0;
    const char *slash = index ? strrchr(arg, '/') : NULL;
    int w = dir ? snprintf(qt_hc.file, sizeof qt_hc.file, "%s/config.json", arg)
          : slash ? snprintf(qt_hc.file, sizeof qt_hc.file, "%.*s/config.json",
                             (int)(slash - arg), arg)
                  : snprintf(qt_hc.file, sizeof qt_hc.file, "config.json");
    return w > 0 && w < (int)sizeof qt_hc.file;
}

int qt_hf_config_check(const qt_plan *p, const char *key, const char *arg, int overwrite)
{
    const char *ue, *pe, *uv, *uve, *pv, *pve;
    int rc, q35 = p->model.decoder_block == 1;
    if (!qt_hc_dir(key, arg) || (rc = qt_hc_read(key)) == 0) return QT_OK;
    if (rc < 0) return rc;
    qt_hc.plan_len = qt_hf_config_json(p, qt_hc.plan, sizeof qt_hc.plan);
    if (qt_hc.plan_len < 0) return qt_fail(QT_E_ARG, "the plan's config.json does not fit");
    ue = qt_hc.user + qt_hc.user_len;
    pe = qt_hc.plan + qt_hc.plan_len;
    const char *end = qt_hc_skip(qt_hc.user, ue);
    if (!end || qt_hc_ws(end, ue) != ue || qt_hc_member(qt_hc.user, ue, "", 0, &uv, &uve) < 0)
        return qt_fail(QT_E_ARG, "%s=%s: not a JSON object; fix or remove config.json", key,
                       qt_hc.file);
    int theta = 0;
    for (size_t i = 0; i < sizeof qt_hc_keys / sizeof qt_hc_keys[0]; i++) {
        const qt_hc_key *k = &qt_hc_keys[i];
        snprintf(qt_hc.path, sizeof qt_hc.path, "%s%s", k->text && q35 ? "text_config." : "",
                 k->name);
        if (qt_hc_get(qt_hc.plan, pe, qt_hc.path, &pv, &pve) != 1) continue;
        int has = qt_hc_get(qt_hc.user, ue, qt_hc.path, &uv, &uve) == 1;
        theta += has && strstr(k->name, "rope_theta") != NULL;
        if (!has && k->dflt && !*k->dflt) continue;
        if (!has && k->dflt) uve = (uv = k->dflt) + strlen(k->dflt);
        if (has || k->dflt ? qt_hc_same(uv, uve, pv, pve) : 0) continue;
        return qt_hc_refuse(key, overwrite, qt_hc.path, has,
                            has || k->dflt ? qt_hc_show(uv, uve, qt_hc.a) : "",
                            qt_hc_show(pv, pve, qt_hc.b));
    }
    if (!theta && qt_hc_get(qt_hc.plan, pe, q35 ? "text_config.rope_theta" : "rope_theta", &pv,
                            &pve) == 1)
        return qt_hc_refuse(key, overwrite, q35 ? "text_config.rope_theta" : "rope_theta", 0,
                            "", qt_hc_show(pv, pve, qt_hc.b));
    return QT_OK;
}
