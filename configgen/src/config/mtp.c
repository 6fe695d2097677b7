/* config/mtp.c - the multi-token-prediction keys (docs/model.md section 1.8): validation of
 * mtp_num_layers and mtp_loss_scaling_factor into qt_cg_settings.mtp_layers / mtp_factor.
 *
 * Runs after the model, train and mesh settings are resolved (settings.c calls it last), so
 * a rule can name the value it meets. Invariants of the result: mtp_layers is 0 (no head,
 * every plan as before) or 1 .. QT_CG_MTP_MAX, and then the model has a full-attention
 * layer kind for the head's decoder layers, the sequence is longer than the head's depth,
 * and the factor is a finite float32 >= 0. Every refusal names the key, its value, where
 * it was set and what was expected. The depths share mtp.fc, the pre-fc norms and
 * mtp.norm: each of those gets one WGRAD over its depths' rows stacked per leaf
 * (model/autodiff.c). Packing is allowed: the runtime counts the
 * step's MTP positions with a loss and writes the gradient scale (qt_plan_fields.def
 * mtp_scale); so is token dropping: the head's MoE layer drops by the same capacity and
 * counts its drops in its own row after the main layers' (reported apart).
 * mtp_keep_layers (qtrain's own key, "nothing lost"): with mtp_num_layers 0, up to that
 * many depths of a loaded checkpoint's mtp.* head are carried through untrained into every
 * save; the region (qt_ckpt_keep.h) is sized here from the model's dimensions alone (a plan
 * never depends on files): the published layouts' tensor count (one tensor per routed
 * expert projection, Qwen3-Next's) and element count of that many depths, at 4 bytes an
 * element. Refused beside a trained head (its tensors are saved anyway).
 * mtp_eval_target_module (MaxText's key): 0, or a depth k of the head (1 .. mtp_num_layers)
 * whose acceptance rate each held-out eval reports (model/graph.c plans the MTP_ACCEPT op);
 * refused without a head or past its depths, ignored with a note without eval_interval (as
 * MaxText, which computes it in eval only, and as the other eval keys).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"
#include "qt_ckpt_keep.h"

/* The most MTP depths a plan stacks (qt_ops.def STACK: 8 parts, the main one included). */
#define QT_CG_MTP_MAX 7

static struct {
    const qt_cg_config *c;
    char *err;
    size_t errlen;
} qt_cg_mtp;

static const qt_cg_known *mkv(const char *key)
{
    return qt_cg_rule_key(qt_cg_mtp.c, key);
}

/* "key=value (where): message" */
static int mbad(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int mbad(const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = qt_cg_rule_vbad(qt_cg_mtp.c, qt_cg_mtp.err, qt_cg_mtp.errlen, key, fmt, ap);
    va_end(ap);
    return rc;
}

/* "key=value (where)" of another key. */
static const char *mother(const char *key, char *buf, size_t cap)
{
    const qt_cg_known *k = mkv(key);
    qt_cg_buf b = {0};
    qt_cg_val_render(k->val, &b);
    snprintf(buf, cap, "%s=%s (%s)", key, b.p, k->where);
    qt_cg_buf_free(&b);
    return buf;
}

/* The carried head's region for `keep` depths: the most tensors (the unfused expert form)
 * and the elements of the head of the published checkpoints (docs/model.md 1.8). */
static int64_t mtp_keep_bytes(const qt_model_dims *m, int64_t keep)
{
    const int64_t d = m->d, E = m->n_experts, hd = m->head_dim;
    const int64_t attn = (2 * m->n_q_heads * hd + 2 * m->n_kv_heads * hd + m->n_q_heads * hd) * d
                         + 2 * hd;
    const int64_t moe = E * d + E * 3 * m->moe_dim * d + 3 * m->shared_dim * d + d;
    const int64_t per_depth = attn + moe + 2 * d;
    const int64_t tensors = 4 + keep * (3 * E + 16);
    return QT_KEEP_BYTES(tensors, 2 * d * d + 3 * d + keep * per_depth);
}

/* mtp_keep_layers (after mtp_num_layers is known): s->mtp_keep and its region's size. */
static int mtp_keep_rules(qt_cg_settings *s, int64_t full)
{
    const char *kk = "mtp_keep_layers";
    const int64_t k = (int64_t)strtod(mkv(kk)->val->s, NULL);
    char o[400];
    s->mtp_keep = 0;
    s->mtp_keep_bytes = 0;
    if (k < 0 || k > QT_CG_MTP_MAX)
        return mbad(kk, "expected 0 (a loaded checkpoint's mtp.* head is skipped) up to %d "
                    "(the depths of a loaded head carried through untrained into every save)",
                    QT_CG_MTP_MAX);
    if (k == 0) return 0;
    if (s->mtp_layers > 0)
        return mbad(kk, "with a trained head (%s) its mtp.* tensors are saved anyway; expected "
                    "0", mother("mtp_num_layers", o, sizeof o));
    if (!full)
        return mbad(kk, "the carried head's decoder layer is one of the model's full-attention "
                    "kind, and this model (%s) has none; expected 0",
                    mother("inhomogeneous_layer_cycle_interval", o, sizeof o));
    s->mtp_keep = (int32_t)k;
    s->mtp_keep_bytes = (mtp_keep_bytes(&s->m, k) + 63) / 64 * 64;
    return 0;
}

/* mtp_eval_target_module (after mtp_num_layers is known): s->mtp_eval_k. */
static int mtp_eval_rules(qt_cg_settings *s)
{
    const char *ke = "mtp_eval_target_module";
    const char *v = mkv(ke)->val->s;
    char *end = NULL, o[400];
    const double k = strtod(v, &end);
    s->mtp_eval_k = 0;
    if (!end || end == v || *end || !(k >= 0 && k <= QT_CG_MTP_MAX && k == floor(k)))
        return mbad(ke, "expected 0 (no acceptance rate) or a whole depth of the MTP head, 1 "
                    "to mtp_num_layers (the depth whose predictions the held-out eval "
                    "compares with the main model's)");
    if (k == 0) return 0;
    if (s->mtp_layers == 0)
        return mbad(ke, "the acceptance rate compares a depth of the MTP head with the main "
                    "model, and there is no head (%s); expected 0, or mtp_num_layers >= %d",
                    mother("mtp_num_layers", o, sizeof o), (int)k);
    if (k > s->mtp_layers)
        return mbad(ke, "the head has %d depth%s (%s); expected 0 (off) or a depth 1 .. %d",
                    (int)s->mtp_layers, s->mtp_layers == 1 ? "" : "s",
                    mother("mtp_num_layers", o, sizeof o), (int)s->mtp_layers);
    if (s->tr.eval_interval <= 0) {
        qt_cg_rule_ignored(qt_cg_mtp.c, s, ke, "eval_interval is -1 (no evaluation), and "
                           "MaxText computes the acceptance rate in its eval only; set "
                           "eval_interval to the steps between evals");
        return 0;
    }
    s->mtp_eval_k = (int32_t)k;
    return 0;
}

int qt_cg_settings_mtp(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen)
{
    qt_cg_mtp.c = c;
    qt_cg_mtp.err = err;
    qt_cg_mtp.errlen = errlen;
    const char *kn = "mtp_num_layers", *kf = "mtp_loss_scaling_factor";
    const int64_t n = (int64_t)strtod(mkv(kn)->val->s, NULL);
    const double f = strtod(mkv(kf)->val->s, NULL);
    char o[400];
    s->mtp_layers = 0;
    s->mtp_factor = 0.0;
    s->mtp_eval_k = 0;
    if (!(isfinite(f) && f >= 0.0 && isfinite((float)f)))
        return mbad(kf, "expected a finite number >= 0 (the objective is the main loss plus "
                    "this factor times the MTP cross-entropy mean)");
    if (n < 0) return mbad(kn, "expected 0 (no multi-token-prediction head) or a depth >= 1");
    /* the head's decoder layer is one of the model's full-attention kind */
    const int64_t L = s->m.n_layers, cyc = s->m.cycle;
    int64_t full = 0;
    for (int64_t l = 0; l < L; l++) full += cyc > 0 && (l + 1) % cyc == 0;
    if (n == 0) return mtp_keep_rules(s, full) ? -1 : mtp_eval_rules(s);
    if (n > QT_CG_MTP_MAX)
        return mbad(kn, "expected at most %d depths (the head's parts stack with the main "
                    "model's per token block, at most %d parts: qt_ops.def STACK)",
                    QT_CG_MTP_MAX, QT_CG_MTP_MAX + 1);
    if (!full)
        return mbad(kn, "the head's decoder layer is one of the model's full-attention kind, "
                    "and this model (%s) has none; expected 0",
                    mother("inhomogeneous_layer_cycle_interval", o, sizeof o));
    if (s->tr.seq_len <= n)
        return mbad(kn, "%lld depths need sequences longer than that (%s): depth d predicts "
                    "the token d+1 places ahead", (long long)n,
                    mother("max_target_length", o, sizeof o));
    s->mtp_layers = (int32_t)n;
    s->mtp_factor = f;
    return mtp_keep_rules(s, full) ? -1 : mtp_eval_rules(s);
}
