/* tensors.c - `qtrain-audit ckpt A B` and `qtrain-audit grads A B`: two safetensors
 * checkpoints (or dump_grads= files) compared tensor by tensor, under their HF names.
 *
 * A side is a single .safetensors file, a checkpoint directory (its
 * model.safetensors.index.json plus qtrain's optimizer.safetensors.index.json when present)
 * or an *.index.json; the firmware's own readers parse them (firmware/io/st_read.c,
 * st_index.c), so the tool accepts exactly what qtrain loads. The index reader keeps one
 * index at a time, so each side's weight map is copied out (name -> shard path) first.
 * Per tensor present on both sides: equal (every element's float32 bits), or the count of
 * differing elements, the max ulp distance, the max absolute and relative difference and
 * the first differing element (flat index and its index per dimension). Tensors present
 * on one side only, or with another shape, make the checkpoints differ.
 * Invariant: exit 0 only when both sides hold the same tensor names with bit-identical
 * values (dtype conversions to float32 are exact for F32/BF16/F16).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "qt_audit.h"
#include "qt_err.h"
#include "io/safetensors.h"
#include "io/st_index.h"

typedef struct qt_side {
    const char *arg;
    int n;
    char **name, **file;       /* tensor name, the safetensors file that holds it */
    char step[32], data_hash[24], kind[16];
    char format[16], content[16];  /* __metadata__ format / content ("" if absent) */
    int h;                     /* open reader handle, -1 */
    const char *open_file;
} qt_side;

static void qt_side_add(qt_side *s, const char *name, const char *file)
{
    s->name = realloc(s->name, (size_t)(s->n + 1) * sizeof *s->name);
    s->file = realloc(s->file, (size_t)(s->n + 1) * sizeof *s->file);
    s->name[s->n] = strdup(name);
    s->file[s->n] = strdup(file);
    s->n++;
}

static void qt_side_meta(qt_side *s, const char *step, const char *dh, const char *format,
                         const char *content)
{
    snprintf(s->step, sizeof s->step, "%s", step ? step : "-");
    snprintf(s->data_hash, sizeof s->data_hash, "%s", dh ? dh : "-");
    snprintf(s->format, sizeof s->format, "%s", format ? format : "");
    snprintf(s->content, sizeof s->content, "%s", content ? content : "");
}

/* A side of the wrong kind for the command: a gradient dump (dump_grads=, __metadata__
 * content "gradients") given to ckpt, or a qtrain checkpoint (format qtrain-1) given to
 * grads; their tensors share names, so a comparison would only report differences. */
static int qt_side_kind_ok(const qt_side *s, const char *what)
{
    const int grads = !strcmp(what, "gradients");
    if (!grads && !strcmp(s->content, "gradients")) {
        fprintf(stderr, "qtrain-audit: ckpt: %s is a gradient dump (dump_grads=; __metadata__ "
                "content \"gradients\"), not a checkpoint: compare gradient dumps with "
                "qtrain-audit grads\n", s->arg);
        return QT_AUDIT_ERR;
    }
    if (grads && strcmp(s->content, "gradients") && !strcmp(s->format, "qtrain-1")) {
        fprintf(stderr, "qtrain-audit: grads: %s is a qtrain checkpoint (__metadata__ format "
                "\"qtrain-1\"), not a gradient dump (dump_grads=): compare checkpoints with "
                "qtrain-audit ckpt\n", s->arg);
        return QT_AUDIT_ERR;
    }
    return 0;
}

static int qt_side_open(qt_side *s, const char *arg)
{
    static char path[QT_SX_PATH_MAX], shard[QT_SX_PATH_MAX];
    int is_index, h;
    memset(s, 0, sizeof *s);
    s->arg = arg;
    s->h = -1;
    if (qt_sx_resolve(arg, path, sizeof path, &is_index)) return QT_AUDIT_ERR;
    if (!is_index) {
        if (qt_st_open(path, &h)) return QT_AUDIT_ERR;
        for (int32_t i = 0; i < qt_st_count(h); i++) qt_side_add(s, qt_st_at(h, i)->name, path);
        qt_side_meta(s, qt_st_meta(h, "step"), qt_st_meta(h, "data_hash"),
                     qt_st_meta(h, "format"), qt_st_meta(h, "content"));
        snprintf(s->kind, sizeof s->kind, "file");
        qt_st_close(h);
        return 0;
    }
    if (qt_sx_open(path)) return QT_AUDIT_ERR;
    /* qtrain's optimizer index beside a model index: the moments are part of the state */
    char opt[QT_SX_PATH_MAX + 64];
    const char *slash = strrchr(path, '/');
    snprintf(opt, sizeof opt, "%.*s%s%s", slash ? (int)(slash - path) : 0, path,
             slash ? "/" : "", QT_SX_OPT_INDEX_NAME);
    struct stat st;
    if (strstr(path, QT_SX_INDEX_NAME) && stat(opt, &st) == 0 && qt_sx_append(opt))
        return QT_AUDIT_ERR;
    for (int32_t e = 0; e < qt_sx_count(); e++) {
        if (qt_sx_shard_path(qt_sx_shard(e), shard, sizeof shard)) return QT_AUDIT_ERR;
        qt_side_add(s, qt_sx_name(e), shard);
    }
    qt_side_meta(s, qt_sx_meta(0, "step"), qt_sx_meta(0, "data_hash"), qt_sx_meta(0, "format"),
                 qt_sx_meta(0, "content"));
    snprintf(s->kind, sizeof s->kind, "%d shards", (int)qt_sx_shards());
    return 0;
}

static void qt_side_free(qt_side *s)
{
    if (s->h >= 0) qt_st_close(s->h);
    for (int i = 0; i < s->n; i++) {
        free(s->name[i]);
        free(s->file[i]);
    }
    free(s->name);
    free(s->file);
}

static int qt_side_find(const qt_side *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name)) return i;
    return -1;
}

/* The tensor entry i of side s, its file opened (one file per side at a time). */
static const qt_st_tensor *qt_side_tensor(qt_side *s, int i)
{
    if (!s->open_file || strcmp(s->open_file, s->file[i])) {
        if (s->h >= 0) qt_st_close(s->h);
        s->h = -1;
        s->open_file = NULL;
        if (qt_st_open(s->file[i], &s->h)) return NULL;
        s->open_file = s->file[i];
    }
    const qt_st_tensor *t = qt_st_find(s->h, s->name[i]);
    if (!t) fprintf(stderr, "qtrain-audit: %s: tensor %s is not in %s\n", s->arg, s->name[i], s->file[i]);
    return t;
}

static float *qt_read(qt_side *s, const qt_st_tensor *t)
{
    float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    if (!v || qt_st_read_f32(s->h, t, 0, t->numel, v)) {
        fprintf(stderr, "qtrain-audit: %s: tensor %s has dtype %s; expected F32, BF16, F16 or "
                "F64\n", s->arg, t->name, qt_st_dtype_name(t->dtype));
        free(v);
        return NULL;
    }
    return v;
}

static void qt_shape(const qt_st_tensor *t, char *out, size_t n)
{
    size_t k = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}

/* "layers.N." in a name: N, else -1 (embeddings, final norm, lm head). */
static int qt_layer(const char *name)
{
    const char *l = strstr(name, "layers.");
    return l ? atoi(l + 7) : -1;
}

typedef struct qt_cmp {
    int64_t n_diff, first;
    uint64_t max_ulp;
    double max_abs, max_rel;
} qt_cmp;

static void qt_compare(const float *x, const float *y, int64_t n, qt_cmp *c)
{
    memset(c, 0, sizeof *c);
    c->first = -1;
    for (int64_t k = 0; k < n; k++) {
        uint32_t a, b;
        memcpy(&a, &x[k], 4);
        memcpy(&b, &y[k], 4);
        if (a == b) continue;
        if (c->first < 0) c->first = k;
        c->n_diff++;
        uint64_t u = qt_audit_ulp32(a, b);
        double d = (double)x[k] - (double)y[k], m;
        if (d < 0) d = -d;
        m = x[k] < 0 ? -(double)x[k] : (double)x[k];
        double m2 = y[k] < 0 ? -(double)y[k] : (double)y[k];
        if (m2 > m) m = m2;
        double r = m > 0 ? d / m : 0.0;
        if (u > c->max_ulp) c->max_ulp = u;
        if (d > c->max_abs || d != d) c->max_abs = d;
        if (r > c->max_rel || r != r) c->max_rel = r;
    }
}

/* Index per dimension of flat element k of t: "[i,j]". */
static void qt_index(const qt_st_tensor *t, int64_t k, char *out, size_t n)
{
    int64_t idx[QT_ST_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->shape[d] ? k % t->shape[d] : 0;
        k = t->shape[d] ? k / t->shape[d] : 0;
    }
    size_t w = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < t->ndim && w < n; d++)
        w += (size_t)snprintf(out + w, n - w, "%s%lld", d ? "," : "", (long long)idx[d]);
    if (w < n) snprintf(out + w, n - w, "]");
}

int qt_audit_tensors(int argc, char **argv, const char *what)
{
    int all;
    const char *pa, *pb;
    if (qt_audit_two_args(argc, argv, !strcmp(what, "gradients") ? "grads A B" : "ckpt A B",
                          &pa, &pb, &all))
        return QT_AUDIT_ERR;
    qt_side a, b;
    if (qt_side_open(&a, pa)) return QT_AUDIT_ERR;
    if (qt_side_open(&b, pb) || qt_side_kind_ok(&a, what) || qt_side_kind_ok(&b, what)) {
        qt_side_free(&a);
        qt_side_free(&b);
        return QT_AUDIT_ERR;
    }
    printf("A: %s (%s, %d tensors, step %s, data_hash %s)\n", pa, a.kind, a.n, a.step, a.data_hash);
    printf("B: %s (%s, %d tensors, step %s, data_hash %s)\n", pb, b.kind, b.n, b.step, b.data_hash);
    printf("  %-56s %-14s %10s %10s %10s %10s  %s\n", "tensor", "shape", "differing", "max ulp",
           "max abs", "max rel", "first differing element");
    int rc = QT_AUDIT_SAME, n_equal = 0, n_differ = 0, only = 0, earliest = -2;
    const char *earliest_name = NULL;
    char shape[96], at[128];
    for (int i = 0; i < a.n && rc != QT_AUDIT_ERR; i++) {
        int j = qt_side_find(&b, a.name[i]);
        if (j < 0) {
            printf("  %-56s only in A\n", a.name[i]);
            only++;
            continue;
        }
        const qt_st_tensor *ta = qt_side_tensor(&a, i), *tb = qt_side_tensor(&b, j);
        if (!ta || !tb) { rc = QT_AUDIT_ERR; break; }
        qt_shape(ta, shape, sizeof shape);
        int same_shape = ta->ndim == tb->ndim && ta->numel == tb->numel;
        for (int d = 0; same_shape && d < ta->ndim; d++) same_shape = ta->shape[d] == tb->shape[d];
        if (!same_shape) {
            char sb[96];
            qt_shape(tb, sb, sizeof sb);
            printf("  %-56s %-14s shape differs: B has %s\n", a.name[i], shape, sb);
            n_differ++;
            continue;
        }
        float *x = qt_read(&a, ta), *y = x ? qt_read(&b, tb) : NULL;
        if (!x || !y) { free(x); rc = QT_AUDIT_ERR; break; }
        qt_cmp c;
        qt_compare(x, y, ta->numel, &c);
        free(x);
        free(y);
        if (!c.n_diff) {
            n_equal++;
            if (all) printf("  %-56s %-14s %10s\n", a.name[i], shape, "equal");
            continue;
        }
        n_differ++;
        int layer = qt_layer(a.name[i]);
        if (earliest == -2 || layer < earliest) { earliest = layer; earliest_name = a.name[i]; }
        qt_index(ta, c.first, at, sizeof at);
        printf("  %-56s %-14s %10lld %10llu %10.3g %10.3g  %s (flat %lld)\n", a.name[i], shape,
               (long long)c.n_diff, (unsigned long long)c.max_ulp, c.max_abs, c.max_rel, at,
               (long long)c.first);
    }
    for (int j = 0; j < b.n && rc != QT_AUDIT_ERR; j++)
        if (qt_side_find(&a, b.name[j]) < 0) {
            printf("  %-56s only in B\n", b.name[j]);
            only++;
        }
    if (rc != QT_AUDIT_ERR) {
        if (!all && n_equal) printf("  (%d equal tensors not listed; --all lists them)\n", n_equal);
        if (earliest != -2 && !strcmp(what, "gradients"))
            printf("earliest differing layer: %s (%s)\n",
                   earliest >= 0 ? (snprintf(at, sizeof at, "%d", earliest), at) : "outside the layers",
                   earliest_name);
        if (n_differ || only) {
            printf("%s differ: %d of %d common tensors differ, %d equal, %d only on one side\n",
                   what, n_differ, n_differ + n_equal, n_equal, only);
            rc = QT_AUDIT_DIFF;
        } else {
            printf("bit-identical: %d tensors\n", n_equal);
        }
    }
    qt_side_free(&a);
    qt_side_free(&b);
    return rc;
}
