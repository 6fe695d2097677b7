/* hf_config.c - the Hugging Face files of a save= directory beside its tensors: config.json
 * from the plan, and copies of the tokenizer files named by tokenizer= (contract in
 * hf_config.h).
 *
 * config.json: every value comes from the plan (qt_plan.model, .train, .dtype, the
 * parameter table) or is a constant of the architecture qtrain builds (SiLU, no attention
 * bias, untied head, every layer MoE with normalised top-k weights). Qwen3-Next gives
 * Qwen3NextConfig (model_type "qwen3_next", Qwen3NextForCausalLM; tensor names
 * model.layers.*); Qwen3.5 gives Qwen3_5MoeConfig (model_type "qwen3_5_moe",
 * Qwen3_5MoeForConditionalGeneration, the text model under text_config), the class whose
 * names are those qtrain writes (model.language_model.layers.*, lm_head.weight).
 * Reals are printed with the fewest digits that read back as the same value (the plan's
 * floats as floats: 1e-06, not 9.9999999747524271e-07), integral ones as "N.0".
 * A packed plan (packing, eos_id) adds eos_token_id, its document separator (the plan's
 * eos_id, or the token file's when the plan has none: qt_hf_eos_set; none when neither
 * gives one); bos_token_id is not written (the plan has none).
 * Invariants: no heap (static buffers), module state in qt_hf; a file appears in the
 * directory only complete (written as <name>.qtrain-tmp, fsynced, renamed); a file the
 * directory already has is never opened for writing. The one exception is asked for: a
 * config.json that disagrees with the plan, found at start-up with overwrite=1
 * (qt_hf_config_check, hf_check.c), is left out of the new directory (ckpt_dir.c) so the
 * next save writes the plan's in its place, atomically with the rest of the checkpoint.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qt_err.h"
#include "hf_config.h"

#define QT_HF_PATH 4352
#define QT_HF_JSON (1 << 16)
#define QT_HF_IO (1 << 16)

static struct {
    char *out;                       /* qt_hf_config_json's buffer */
    size_t cap, len;
    int over;                        /* it did not fit */
    const char *ind;                 /* indentation of the current object's keys */
    int has_tok, has_tok_cfg;
    int replace_cfg;                 /* the next save replaces the directory's config.json */
    int eos_set;                     /* qt_hf_eos_set: eos replaces the plan's pack_eos */
    int32_t eos;
    char tok[QT_HF_PATH], tok_cfg[QT_HF_PATH];
    char dst[QT_HF_PATH], tmp[QT_HF_PATH];
    char json[QT_HF_JSON];
    char io[QT_HF_IO];
} qt_hf;

/* ---- config.json ---- */

static void qt_hf_put(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void qt_hf_put(const char *fmt, ...)
{
    va_list ap;
    if (qt_hf.over) return;
    va_start(ap, fmt);
    int w = vsnprintf(qt_hf.out + qt_hf.len, qt_hf.cap - qt_hf.len, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= qt_hf.cap - qt_hf.len) qt_hf.over = 1;
    else qt_hf.len += (size_t)w;
}

/* sep "key": v, with v the shortest decimal that reads back as v (as a float when single);
 * a sep ending in a newline is followed by the indentation. */
static void qt_hf_real(const char *key, double v, int single, const char *sep)
{
    char s[40];
    const char *ind = sep[strlen(sep) - 1] == '\n' ? qt_hf.ind : "";
    if (!isfinite(v)) {
        qt_hf_put("%s%s\"%s\": null", sep, ind, key);
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15) {
        qt_hf_put("%s%s\"%s\": %.1f", sep, ind, key, v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (single ? strtof(s, NULL) == (float)v : strtod(s, NULL) == v) break;
    }
    qt_hf_put("%s%s\"%s\": %s", sep, ind, key, s);
}

static void qt_hf_int(const char *key, int64_t v)
{
    qt_hf_put(",\n%s\"%s\": %lld", qt_hf.ind, key, (long long)v);
}

static void qt_hf_str(const char *key, const char *v)
{
    qt_hf_put(",\n%s\"%s\": \"%s\"", qt_hf.ind, key, v);
}

static void qt_hf_bool(const char *key, int v)
{
    qt_hf_put(",\n%s\"%s\": %s", qt_hf.ind, key, v ? "true" : "false");
}

/* The per-layer mixer: full attention at (l+1) % cycle == 0 (the plan's layer cycle). */
static void qt_hf_layer_types(const qt_model_dims *m)
{
    qt_hf_put(",\n%s\"layer_types\": [", qt_hf.ind);
    for (int64_t l = 0; l < m->n_layers; l++)
        qt_hf_put("%s\"%s\"", l ? ", " : "",
                  m->cycle > 0 && (l + 1) % m->cycle == 0 ? "full_attention"
                                                          : "linear_attention");
    qt_hf_put("]");
}

/* The rotary fields: the legacy top-level keys and rope_parameters (transformers 5);
 * Qwen3.5's interleaved multimodal sections split the R/2 frequency pairs in three (text
 * positions are equal on all three, so any split gives the 1-D rotary qtrain trains). */
static void qt_hf_rope(const qt_model_dims *m, int mrope)
{
    const double prf = m->head_dim > 0 ? (double)m->rotary_dim / (double)m->head_dim : 0.0;
    const int64_t pairs = m->rotary_dim / 2;
    qt_hf_real("rope_theta", m->rope_theta, 1, ",\n");
    qt_hf_real("partial_rotary_factor", prf, 0, ",\n");
    qt_hf_put(",\n%s\"rope_parameters\": {\"rope_type\": \"default\"", qt_hf.ind);
    qt_hf_real("rope_theta", m->rope_theta, 1, ", ");
    qt_hf_real("partial_rotary_factor", prf, 0, ", ");
    if (mrope)
        qt_hf_put(", \"mrope_section\": [%lld, %lld, %lld], \"mrope_interleaved\": true",
                  (long long)((pairs + 2) / 3), (long long)((pairs + 1) / 3),
                  (long long)(pairs / 3));
    qt_hf_put("}");
}

/* The text model's fields (Qwen3NextConfig, or Qwen3_5MoeTextConfig when q35). */
static void qt_hf_text(const qt_plan *p, int q35)
{
    const qt_model_dims *m = &p->model;
    const char *dt = p->dtype == QT_BF16 ? "bfloat16" : "float32";
    qt_hf_int("vocab_size", m->vocab);
    qt_hf_int("hidden_size", m->d);
    qt_hf_int("num_hidden_layers", m->n_layers);
    qt_hf_int("num_attention_heads", m->n_q_heads);
    qt_hf_int("num_key_value_heads", m->n_kv_heads);
    qt_hf_int("head_dim", m->head_dim);
    qt_hf_int("linear_num_key_heads", m->gdn_k_heads);
    qt_hf_int("linear_num_value_heads", m->gdn_v_heads);
    qt_hf_int("linear_key_head_dim", m->gdn_k_dim);
    qt_hf_int("linear_value_head_dim", m->gdn_v_dim);
    qt_hf_int("linear_conv_kernel_dim", m->gdn_conv);
    qt_hf_int("num_experts", m->n_experts);
    qt_hf_int("num_experts_per_tok", m->top_k);
    qt_hf_int("moe_intermediate_size", m->moe_dim);
    qt_hf_int("shared_expert_intermediate_size", m->shared_dim);
    if (!q35) {
        qt_hf_bool("norm_topk_prob", 1);
        qt_hf_int("decoder_sparse_step", 1);
        qt_hf_put(",\n%s\"mlp_only_layers\": []", qt_hf.ind);
    }
    qt_hf_int("full_attention_interval", m->cycle);
    /* the MTP draft head's depth, under the name each model's loaders read (vLLM's
     * Qwen3-Next: num_nextn_predict_layers; Qwen3.5: mtp_num_hidden_layers); written only
     * with a head (docs/model.md 1.8) */
    if (p->mtp_layers > 0) qt_hf_int(q35 ? "mtp_num_hidden_layers" : "num_nextn_predict_layers",
                                     p->mtp_layers);
    qt_hf_layer_types(m);
    qt_hf_real("rms_norm_eps", m->norm_eps, 1, ",\n");
    qt_hf_rope(m, q35);
    qt_hf_int("max_position_embeddings", p->train.seq_len);
    qt_hf_str("hidden_act", "silu");
    qt_hf_bool("attention_bias", 0);
    qt_hf_real("attention_dropout", 0.0, 0, ",\n");
    qt_hf_bool("tie_word_embeddings", 0);
    qt_hf_real("router_aux_loss_coef", p->train.lb_weight, 1, ",\n");
    qt_hf_bool("output_router_logits", p->train.lb_weight > 0.0f);
    qt_hf_bool("use_cache", 1);
    qt_hf_str("torch_dtype", dt);
    qt_hf_str("dtype", dt);
    const int32_t eos = qt_hf.eos_set ? qt_hf.eos : p->pack_eos;   /* the document separator */
    if (p->packing && eos >= 0) qt_hf_int("eos_token_id", eos);
}

long qt_hf_config_json(const qt_plan *p, char *buf, size_t n)
{
    const int q35 = p->model.decoder_block == 1;
    const char *dt = p->dtype == QT_BF16 ? "bfloat16" : "float32";
    qt_hf.out = buf;
    qt_hf.cap = n;
    qt_hf.len = 0;
    qt_hf.over = n == 0;
    qt_hf.ind = "  ";
    if (!q35) {
        qt_hf_put("{\n  \"architectures\": [\"Qwen3NextForCausalLM\"],\n"
                  "  \"model_type\": \"qwen3_next\"");
        qt_hf_text(p, 0);
        qt_hf_str("transformers_version", "4.57.0");
    } else {
        qt_hf_put("{\n  \"architectures\": [\"Qwen3_5MoeForConditionalGeneration\"],\n"
                  "  \"model_type\": \"qwen3_5_moe\",\n"
                  "  \"text_config\": {\n    \"model_type\": \"qwen3_5_moe_text\"");
        qt_hf.ind = "    ";
        qt_hf_text(p, 1);
        qt_hf.ind = "  ";
        qt_hf_put("\n  },\n  \"vision_config\": {\"model_type\": \"qwen3_5_moe_vision\", "
                  "\"out_hidden_size\": %lld}", (long long)p->model.d);
        qt_hf_bool("tie_word_embeddings", 0);
        qt_hf_str("torch_dtype", dt);
        qt_hf_str("dtype", dt);
        qt_hf_str("transformers_version", "5.2.0");
    }
    qt_hf_put("\n}\n");
    return qt_hf.over ? -1 : (long)qt_hf.len;
}

/* ---- files ---- */

/* 1 if dir/name exists (any kind). */
static int qt_hf_has(const char *dir, const char *name)
{
    struct stat st;
    snprintf(qt_hf.dst, sizeof qt_hf.dst, "%s/%s", dir, name);
    return lstat(qt_hf.dst, &st) == 0;
}

static int qt_hf_write_all(int fd, const char *data, size_t n)
{
    for (size_t at = 0; at < n;) {
        ssize_t w = write(fd, data + at, n - at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return qt_fail(QT_E_IO, "%s: write failed: %s", qt_hf.tmp, strerror(errno));
        at += (size_t)w;
    }
    return QT_OK;
}

/* Creates dir/name.qtrain-tmp; returns its descriptor or a QT_E_IO code. */
static int qt_hf_create(const char *dir, const char *name)
{
    snprintf(qt_hf.dst, sizeof qt_hf.dst, "%s/%s", dir, name);
    snprintf(qt_hf.tmp, sizeof qt_hf.tmp, "%s/%s.qtrain-tmp", dir, name);
    int fd = open(qt_hf.tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return qt_fail(QT_E_IO, "%s: cannot create: %s", qt_hf.tmp, strerror(errno));
    return fd;
}

/* fsync and close fd (the temporary), then rename it to its name; on failure the
 * temporary is removed. */
static int qt_hf_finish(int fd, int rc)
{
    if (!rc && fsync(fd) != 0)
        rc = qt_fail(QT_E_IO, "%s: fsync failed: %s", qt_hf.tmp, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = qt_fail(QT_E_IO, "%s: close failed: %s", qt_hf.tmp, strerror(errno));
    if (!rc && rename(qt_hf.tmp, qt_hf.dst) != 0)
        rc = qt_fail(QT_E_IO, "%s: rename to %s failed: %s", qt_hf.tmp, qt_hf.dst,
                     strerror(errno));
    if (rc) unlink(qt_hf.tmp);
    return rc;
}

/* Copies the file src to dir/name (atomically). */
static int qt_hf_copy(const char *src, const char *dir, const char *name)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return qt_fail(QT_E_IO, "tokenizer=: cannot open %s: %s", src, strerror(errno));
    int fd = qt_hf_create(dir, name), rc = QT_OK;
    if (fd < 0) {
        close(in);
        return fd;
    }
    for (;;) {
        ssize_t r = read(in, qt_hf.io, sizeof qt_hf.io);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) rc = qt_fail(QT_E_IO, "tokenizer=: read of %s failed: %s", src,
                                strerror(errno));
        if (r <= 0 || rc) break;
        if ((rc = qt_hf_write_all(fd, qt_hf.io, (size_t)r))) break;
    }
    close(in);
    return qt_hf_finish(fd, rc);
}

void qt_hf_eos_set(int32_t eos)
{
    qt_hf.eos_set = 1;
    qt_hf.eos = eos;
}

void qt_hf_config_replace_set(int on)
{
    qt_hf.replace_cfg = on != 0;
}

int qt_hf_config_replacing(void)
{
    return qt_hf.replace_cfg;
}

int qt_hf_files_write(const qt_plan *p, const char *dir)
{
    int rc = QT_OK;
    if (!qt_hf_has(dir, "config.json")) {
        long n = qt_hf_config_json(p, qt_hf.json, sizeof qt_hf.json);
        if (n < 0)
            return qt_fail(QT_E_IO, "%s/config.json: more than %d bytes", dir, QT_HF_JSON);
        int fd = qt_hf_create(dir, "config.json");
        if (fd < 0) return fd;
        if ((rc = qt_hf_finish(fd, qt_hf_write_all(fd, qt_hf.json, (size_t)n))))
            return rc;
        qt_hf.replace_cfg = 0;   /* replaced once: from now on the directory's is the plan's */
    }
    if (qt_hf.has_tok && !qt_hf_has(dir, "tokenizer.json") &&
        (rc = qt_hf_copy(qt_hf.tok, dir, "tokenizer.json")))
        return rc;
    if (qt_hf.has_tok_cfg && !qt_hf_has(dir, "tokenizer_config.json") &&
        (rc = qt_hf_copy(qt_hf.tok_cfg, dir, "tokenizer_config.json")))
        return rc;
    return QT_OK;
}

/* ---- tokenizer= (start-up) ---- */

/* QT_OK when path is a readable non-empty regular file; else the message. */
/* A tokenizer file to copy: a readable regular file that starts (after JSON white space)
 * with '{', a JSON object as every Hugging Face tokenizer file is. The bytes are copied
 * unparsed; the first one is checked so a wrong file (tokenizer=model.safetensors, a
 * token file) is refused at start-up instead of landing in every save as tokenizer.json. */
static int qt_hf_readable(const char *path, const char *what)
{
    struct stat st;
    char buf[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   /* a FIFO: no wait */
    if (fd < 0)
        return qt_fail(QT_E_ARG, "tokenizer=: cannot open %s %s: %s", what, path,
                       strerror(errno));
    int rc = QT_OK;
    ssize_t got = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        rc = qt_fail(QT_E_ARG, "tokenizer=: %s %s is not a regular file", what, path);
    else if ((errno = 0, got = read(fd, buf, sizeof buf)) < 1)
        rc = qt_fail(QT_E_ARG, "tokenizer=: %s %s is empty or unreadable: %s", what, path,
                     errno ? strerror(errno) : "no data");
    if (rc == QT_OK) {
        ssize_t i = 0;
        while (i < got && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
            i++;
        if (i < got && buf[i] != '{')
            rc = qt_fail(QT_E_ARG, "tokenizer=: %s %s is not a Hugging Face tokenizer file (a "
                         "JSON object): its byte %lld is 0x%02x, not '{'", what, path,
                         (long long)i, (unsigned)(unsigned char)buf[i]);
    }
    close(fd);
    return rc;
}

int qt_hf_tokenizer_set(const char *path)
{
    struct stat st;
    qt_hf.has_tok = qt_hf.has_tok_cfg = 0;
    if (!path) return QT_OK;
    const int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    const char *slash = strrchr(path, '/');
    int n = is_dir ? snprintf(qt_hf.tok, sizeof qt_hf.tok, "%s/tokenizer.json", path)
                   : snprintf(qt_hf.tok, sizeof qt_hf.tok, "%s", path);
    int m = is_dir ? snprintf(qt_hf.tok_cfg, sizeof qt_hf.tok_cfg, "%s/tokenizer_config.json", path)
        : slash ? snprintf(qt_hf.tok_cfg, sizeof qt_hf.tok_cfg, "%.*s/tokenizer_config.json",
                           (int)(slash - path), path)
                : snprintf(qt_hf.tok_cfg, sizeof qt_hf.tok_cfg, "tokenizer_config.json");
    if (n < 0 || m < 0 || n >= (int)sizeof qt_hf.tok || m >= (int)sizeof qt_hf.tok_cfg)
        return qt_fail(QT_E_ARG, "tokenizer=%s: path too long", path);
    int rc = qt_hf_readable(qt_hf.tok, is_dir ? "the tokenizer file (tokenizer.json of the "
                            "directory)" : "the tokenizer file");
    if (rc) return rc;
    if (lstat(qt_hf.tok_cfg, &st) == 0 &&
        (rc = qt_hf_readable(qt_hf.tok_cfg, "the tokenizer config beside it")))
        return rc;
    qt_hf.has_tok = 1;
    qt_hf.has_tok_cfg = lstat(qt_hf.tok_cfg, &st) == 0;
    return QT_OK;
}
