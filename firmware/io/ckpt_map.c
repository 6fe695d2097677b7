/* ckpt_map.c - plan parameter <-> on-disk tensor names, shapes and row permutations.
 * Invariant: for every parameter the pieces partition its rows exactly once (checked by
 * the round-trip tests for both decoders); see ckpt_map.h for the layouts.
 */
#include <stdio.h>
#include <string.h>

#include "qt_io.h"
#include "qt_err.h"
#include "ckpt_map.h"

#define QT_SUF_GU ".mlp.experts.gate_up_proj"
#define QT_SUF_DOWN ".mlp.experts.down_proj"
#define QT_SUF_QKVZ ".linear_attn.in_proj_qkvz.weight"
#define QT_SUF_BA ".linear_attn.in_proj_ba.weight"
#define QT_SUF_CONV ".linear_attn.conv1d.weight"

static struct {
    float buf[1 << 14];   /* qt_ckpt_check_values' read window */
} qt_cmap;

static int qt_ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static const qt_tensor *qt_ckpt_tensor(const qt_plan *p, int32_t i)
{
    return &p->tensors[p->params[i].tensor];
}

/* Canonical name with the decoder's prefix, with the last `cut` characters replaced by
 * `tail` (cut 0, tail "" = whole name). */
static void qt_ckpt_name(const qt_plan *p, int32_t i, size_t cut, const char *tail, char *out,
                         size_t n)
{
    const char *c = p->params[i].name;
    size_t len = strlen(c) - cut;
    const char *pre = "";
    if (p->model.decoder_block == 1 && !strncmp(c, "model.", 6)) {
        pre = "model.language_model.";
        c += 6;
        len -= 6;
    }
    snprintf(out, n, "%s%.*s%s", pre, (int)len, c, tail);
}

int qt_ckpt_is_expert(const qt_plan *p, int32_t i)
{
    const char *c = p->params[i].name;
    return qt_ends_with(c, QT_SUF_GU) || qt_ends_with(c, QT_SUF_DOWN);
}

void qt_ckpt_fused_name(const qt_plan *p, int32_t i, char *out, size_t n)
{
    qt_ckpt_name(p, i, 0, "", out, n);
}

static int qt_ckpt_gdn_ok(const qt_plan *p, const qt_tensor *t, int32_t i)
{
    const qt_model_dims *m = &p->model;
    int64_t hk = m->gdn_k_heads, hv = m->gdn_v_heads, dk = m->gdn_k_dim, dv = m->gdn_v_dim;
    int64_t want = qt_ends_with(p->params[i].name, QT_SUF_QKVZ) ? 2 * hk * dk + 2 * hv * dv
                                                                 : 2 * hv;
    if (hk <= 0 || hv % hk || t->ndim != 2 || t->global_shape[0] != want) {
        qt_fail(QT_E_PLAN, "plan parameter %s: shape does not match the GDN dims "
                   "(Hk %lld, Hv %lld, Dk %lld, Dv %lld)", p->params[i].name, (long long)hk,
                   (long long)hv, (long long)dk, (long long)dv);
        return 0;
    }
    return 1;
}

int32_t qt_ckpt_count(const qt_plan *p, int32_t i, int fused)
{
    const qt_tensor *t = qt_ckpt_tensor(p, i);
    const char *c = p->params[i].name;
    if (qt_ckpt_is_expert(p, i)) {
        if (t->ndim != 3) {
            qt_fail(QT_E_PLAN, "plan parameter %s: expected 3 dims [E,rows,cols]", c);
            return 0;
        }
        if (fused)
            return 1;
        if (qt_ends_with(c, QT_SUF_GU) && t->global_shape[1] % 2) {
            qt_fail(QT_E_PLAN, "plan parameter %s: odd gate_up rows", c);
            return 0;
        }
        return (int32_t)(qt_ends_with(c, QT_SUF_GU) ? 2 * t->global_shape[0]
                                                    : t->global_shape[0]);
    }
    if (p->model.decoder_block == 1 && (qt_ends_with(c, QT_SUF_QKVZ) || qt_ends_with(c, QT_SUF_BA)))
        return qt_ckpt_gdn_ok(p, t, i) ? 2 : 0;
    if (t->ndim < 1) {
        qt_fail(QT_E_PLAN, "plan parameter %s: zero-dimensional", c);
        return 0;
    }
    return 1;
}

void qt_ckpt_piece_at(const qt_plan *p, int32_t i, int fused, int32_t k, qt_ckpt_piece *pc)
{
    const qt_tensor *t = qt_ckpt_tensor(p, i);
    const qt_model_dims *m = &p->model;
    const char *c = p->params[i].name;
    char tail[96];
    memset(pc, 0, sizeof *pc);
    pc->kind = QT_MAP_IDENT;
    pc->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++)
        pc->shape[d] = t->global_shape[d];
    pc->row_len = t->global_shape[t->ndim - 1];
    pc->rows = 1;
    for (int d = 0; d + 1 < t->ndim; d++)
        pc->rows *= t->global_shape[d];
    qt_ckpt_name(p, i, 0, "", pc->name, sizeof pc->name);

    if (qt_ckpt_is_expert(p, i) && !fused) {
        int gu = qt_ends_with(c, QT_SUF_GU);
        int64_t e = gu ? k / 2 : k, rows = gu ? t->global_shape[1] / 2 : t->global_shape[1];
        snprintf(tail, sizeof tail, ".mlp.experts.%lld.%s.weight", (long long)e,
                 !gu ? "down_proj" : (k % 2 ? "up_proj" : "gate_proj"));
        qt_ckpt_name(p, i, strlen(gu ? QT_SUF_GU : QT_SUF_DOWN), tail, pc->name, sizeof pc->name);
        pc->kind = QT_MAP_ROWS;
        pc->ndim = 2;
        pc->shape[0] = pc->rows = rows;
        pc->shape[1] = pc->row_len = t->global_shape[2];
        pc->row0 = gu ? e * 2 * rows + (k % 2) * rows : e * rows;
        return;
    }
    if (m->decoder_block == 1 && (qt_ends_with(c, QT_SUF_QKVZ) || qt_ends_with(c, QT_SUF_BA))) {
        int qkvz = qt_ends_with(c, QT_SUF_QKVZ);
        static const char *const names[4] = { "in_proj_qkv", "in_proj_z", "in_proj_b",
                                                "in_proj_a" };
        int which = (qkvz ? 0 : 2) + k;
        pc->hk = m->gdn_k_heads;
        pc->dk = m->gdn_k_dim;
        pc->hv = m->gdn_v_heads;
        pc->dv = m->gdn_v_dim;
        snprintf(tail, sizeof tail, ".linear_attn.%s.weight", names[which]);
        qt_ckpt_name(p, i, strlen(qkvz ? QT_SUF_QKVZ : QT_SUF_BA), tail, pc->name,
                     sizeof pc->name);
        pc->kind = QT_MAP_QKV + which;
        pc->rows = which == 0 ? 2 * pc->hk * pc->dk + pc->hv * pc->dv
                   : which == 1 ? pc->hv * pc->dv : pc->hv;
        pc->ndim = 2;
        pc->shape[0] = pc->rows;
        pc->shape[1] = pc->row_len;
        return;
    }
    if (qt_ends_with(c, QT_SUF_CONV) && t->ndim == 2) {
        pc->alt_ndim = 2;
        pc->alt_shape[0] = t->global_shape[0];
        pc->alt_shape[1] = t->global_shape[1];
        pc->ndim = 3;
        pc->shape[1] = 1;
        pc->shape[2] = t->global_shape[1];
    } else if (qt_ends_with(c, QT_SUF_CONV) && t->ndim == 3 && t->global_shape[1] == 1) {
        pc->alt_ndim = 2;
        pc->alt_shape[0] = t->global_shape[0];
        pc->alt_shape[1] = t->global_shape[2];
    }
}

int64_t qt_ckpt_plan_row(const qt_ckpt_piece *pc, int64_t r)
{
    int64_t rr = pc->hv / (pc->hk ? pc->hk : 1);        /* value heads per key head */
    int64_t g = 2 * pc->dk + 2 * rr * pc->dv;          /* rows of one key-head group */
    int64_t j, i;
    switch (pc->kind) {
    case QT_MAP_ROWS:
        return pc->row0 + r;
    case QT_MAP_QKV:
        if (r < pc->hk * pc->dk)
            return (r / pc->dk) * g + r % pc->dk;
        if (r < 2 * pc->hk * pc->dk) {
            r -= pc->hk * pc->dk;
            return (r / pc->dk) * g + pc->dk + r % pc->dk;
        }
        r -= 2 * pc->hk * pc->dk;
        j = r / pc->dv;
        i = r % pc->dv;
        return (j / rr) * g + 2 * pc->dk + (j % rr) * pc->dv + i;
    case QT_MAP_Z:
        j = r / pc->dv;
        i = r % pc->dv;
        return (j / rr) * g + 2 * pc->dk + rr * pc->dv + (j % rr) * pc->dv + i;
    case QT_MAP_B:
        return (r / rr) * 2 * rr + r % rr;
    case QT_MAP_A:
        return (r / rr) * 2 * rr + rr + r % rr;
    default:
        return r;
    }
}

void qt_ckpt_fmt_shape(char *out, size_t n, int32_t ndim, const int64_t *s)
{
    size_t at = (size_t)snprintf(out, n, "[");
    for (int32_t d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(out + at, n - at, "%s%lld", d ? "," : "", (long long)s[d]);
    if (at < n)
        snprintf(out + at, n - at, "]");
}

static int qt_shape_eq(int32_t n, const int64_t *a, int32_t m, const int64_t *b)
{
    if (n != m)
        return 0;
    for (int32_t d = 0; d < n; d++)
        if (a[d] != b[d])
            return 0;
    return 1;
}

int qt_ckpt_check_tensor(const qt_ckpt_piece *pc, const qt_st_tensor *t, const char *file,
                         const char *name)
{
    char want[128], got[128];
    qt_ckpt_fmt_shape(want, sizeof want, pc->ndim, pc->shape);
    if (!t)
        return qt_fail(QT_E_MISMATCH, "%s: missing tensor %s (expected shape %s)", file,
                          name, want);
    if (t->dtype != QT_ST_F32 && t->dtype != QT_ST_BF16 && t->dtype != QT_ST_F16)
        return qt_fail(QT_E_MISMATCH, "%s: tensor %s: unsupported dtype %s (expected "
                          "F32, BF16 or F16)", file, name, qt_st_dtype_name(t->dtype));
    if (!qt_shape_eq(pc->ndim, pc->shape, t->ndim, t->shape) &&
        !(pc->alt_ndim && qt_shape_eq(pc->alt_ndim, pc->alt_shape, t->ndim, t->shape))) {
        qt_ckpt_fmt_shape(got, sizeof got, t->ndim, t->shape);
        return qt_fail(QT_E_MISMATCH, "%s: tensor %s: wrong shape: expected %s, file has %s",
                          file, name, want, got);
    }
    return QT_OK;
}

int qt_ckpt_skippable(const qt_plan *p, const char *name, int *is_mtp)
{
    *is_mtp = !strncmp(name, "mtp.", 4);
    return *is_mtp || (p->model.decoder_block == 1 && !strncmp(name, "model.visual.", 13));
}

int qt_ckpt_piece_in_window(const qt_ckpt_piece *pc, int64_t ga, int64_t gb)
{
    const int64_t rl = pc->row_len;
    if (pc->kind == QT_MAP_IDENT || pc->kind == QT_MAP_ROWS)
        return pc->row0 * rl < gb && (pc->row0 + pc->rows) * rl > ga;
    for (int64_t r = 0; r < pc->rows; r++) {
        const int64_t g = qt_ckpt_plan_row(pc, r) * rl;
        if (g < gb && g + rl > ga) return 1;
    }
    return 0;
}

int64_t qt_ckpt_copy_piece_window(int h, const qt_st_tensor *t, const qt_ckpt_piece *pc,
                                  float *win, int64_t ga, int64_t gb)
{
    const int64_t rl = pc->row_len;
    if (pc->kind == QT_MAP_IDENT || pc->kind == QT_MAP_ROWS) {
        /* plan elements [row0 x rl, (row0 + rows) x rl) are the disk tensor's, in order */
        const int64_t p0 = pc->row0 * rl, lo = ga > p0 ? ga : p0;
        const int64_t hi = gb < p0 + pc->rows * rl ? gb : p0 + pc->rows * rl;
        if (lo >= hi) return 0;
        qt_st_read_f32(h, t, lo - p0, hi - lo, win + (lo - ga));
        return hi - lo;
    }
    int64_t n = 0;
    for (int64_t r = 0; r < pc->rows; r++) {
        const int64_t g = qt_ckpt_plan_row(pc, r) * rl;
        if (g < ga || g + rl > gb) continue;
        qt_st_read_f32(h, t, r * rl, rl, win + (g - ga));
        n += rl;
    }
    return n;
}

int qt_ckpt_check_values(int h, const qt_st_tensor *t, const char *file, const char *name,
                         int nonneg)
{
    float *const buf = qt_cmap.buf;
    const int64_t chunk = (int64_t)(sizeof qt_cmap.buf / sizeof qt_cmap.buf[0]);
    for (int64_t k0 = 0; k0 < t->numel; k0 += chunk) {
        int64_t n = t->numel - k0 < chunk ? t->numel - k0 : chunk;
        if (qt_st_read_f32(h, t, k0, n, buf) != 0)
            return qt_fail(QT_E_MISMATCH, "%s: tensor %s: unsupported dtype", file, name);
        for (int64_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &buf[i], 4);
            int inf_nan = ((b >> 23) & 0xffu) == 0xffu;
            if (inf_nan || (nonneg && (b >> 31) && (b & 0x7fffffffu)))
                return qt_fail(QT_E_FORMAT, "%s: tensor %s: element %lld is %g; expected "
                                  "finite values%s (nothing was loaded)", file, name,
                                  (long long)(k0 + i), (double)buf[i],
                                  nonneg ? " >= 0 (a second Adam moment)" : "");
        }
    }
    return QT_OK;
}
