/* ckpt_keep.c - the carried multi-token-prediction head (ckpt_keep.h; region layout in
 * qt_ckpt_keep.h): plans with mtp_keep_layers > 0 keep a loaded checkpoint's mtp.* tensors
 * byte for byte (name, dtype, shape and data as the file holds them, in its order) and
 * write them unchanged into every later save, so fine-tuning a published checkpoint without
 * training its draft head does not drop it.
 *
 * Invariants: the region is touched only after a load was checked in full (all-or-nothing,
 * as the rest of the load); a record holds at most 4 bytes an element (F32, BF16, F16) and
 * its data is padded to 8 bytes, so the region configgen sized for the head's elements at
 * 4 bytes each always holds a head of the plan's depths; every rank of a mesh holds the
 * same copy (each reads the file itself), and rank 0 writes it. Module state: the bytes the
 * current check has counted (one static struct); no heap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_keep.h"
#include "qt_ckpt_keep.h"
#include "qt_err.h"

static struct {
    int64_t need;      /* bytes of the records counted by the current load's check */
} qt_keep;

#define QT_KEEP_PAD(n) (((n) + 7) / 8 * 8)

static unsigned char *qt_keep_base(const qt_plan *p)
{
    return p->arena + p->tensors[p->mtp_keep].offset;
}

static int64_t qt_keep_cap(const qt_plan *p)
{
    return p->tensors[p->mtp_keep].numel * 4;
}

int qt_ckpt_keep_on(const qt_plan *p)
{
    return p->mtp_keep_layers > 0 && p->mtp_layers == 0;
}

void qt_ckpt_keep_check_start(void)
{
    qt_keep.need = (int64_t)sizeof(int64_t);
}

int qt_ckpt_keep_check(const qt_plan *p, const qt_st_tensor *t, const char *path)
{
    int64_t depth = 0;
    if (!strncmp(t->name, "mtp.layers.", 11)) {
        char *end = NULL;
        depth = strtoll(t->name + 11, &end, 10);
        if (end == t->name + 11 || *end != '.') depth = -1;
    }
    if (depth < 0 || depth >= p->mtp_keep_layers)
        return qt_fail(QT_E_MISMATCH, "%s: tensor %s: plan %s carries %d depth(s) of a "
                       "checkpoint's multi-token-prediction head (mtp_keep_layers); a save "
                       "would drop it: expected a plan with mtp_keep_layers above its depth",
                       path, t->name, p->run_name ? p->run_name : "?", p->mtp_keep_layers);
    const int es = qt_st_dtype_size(t->dtype);
    if (es < 2 || es > 4 || t->dtype == QT_ST_I16 || t->dtype == QT_ST_U16 ||
        t->dtype == QT_ST_I32 || t->dtype == QT_ST_U32 || strlen(t->name) >= QT_KEEP_NAME_MAX)
        return qt_fail(QT_E_MISMATCH, "%s: tensor %s: dtype %s; the carried head keeps F32, "
                       "BF16 or F16 tensors", path, t->name, qt_st_dtype_name(t->dtype));
    const int64_t nb = t->end - t->begin;
    qt_keep.need += (int64_t)sizeof(qt_keep_rec) + QT_KEEP_PAD(nb);
    if (qt_keep.need > qt_keep_cap(p))
        return qt_fail(QT_E_MISMATCH, "%s: tensor %s: the file's mtp.* tensors need more than "
                       "the %lld bytes plan %s reserves for a head of %d depth(s) of this "
                       "model (mtp_keep_layers): its head does not have this model's shapes",
                       path, t->name, (long long)qt_keep_cap(p),
                       p->run_name ? p->run_name : "?", p->mtp_keep_layers);
    return QT_OK;
}

void qt_ckpt_keep_begin(const qt_plan *p)
{
    if (!qt_ckpt_keep_on(p)) return;
    int64_t zero = 0;
    memcpy(qt_keep_base(p), &zero, sizeof zero);
}

/* The byte offset of record i (walks the records before it). */
static int64_t qt_keep_off(const qt_plan *p, int32_t i)
{
    const unsigned char *b = qt_keep_base(p);
    int64_t off = (int64_t)sizeof(int64_t);
    for (int32_t k = 0; k < i; k++) {
        qt_keep_rec r;
        memcpy(&r, b + off, sizeof r);
        off += (int64_t)sizeof r + QT_KEEP_PAD(r.nbytes);
    }
    return off;
}

int32_t qt_ckpt_keep_count(const qt_plan *p)
{
    if (!qt_ckpt_keep_on(p)) return 0;
    int64_t n;
    memcpy(&n, qt_keep_base(p), sizeof n);
    return (int32_t)n;
}

void qt_ckpt_keep_add(const qt_plan *p, int h, const qt_st_tensor *t)
{
    unsigned char *b = qt_keep_base(p);
    const int32_t n = qt_ckpt_keep_count(p);
    const int64_t off = qt_keep_off(p, n);
    qt_keep_rec r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "%s", t->name);
    r.dtype = t->dtype;
    r.ndim = t->ndim;
    for (int d = 0; d < t->ndim && d < QT_KEEP_MAX_DIMS; d++) r.shape[d] = t->shape[d];
    r.nbytes = t->end - t->begin;
    memcpy(b + off, &r, sizeof r);
    memcpy(b + off + (int64_t)sizeof r, qt_st_data(h, t), (size_t)r.nbytes);
    memset(b + off + (int64_t)sizeof r + r.nbytes, 0, (size_t)(QT_KEEP_PAD(r.nbytes) - r.nbytes));
    const int64_t c = n + 1;
    memcpy(b, &c, sizeof c);
}

const char *qt_ckpt_keep_at(const qt_plan *p, int32_t i, int32_t *dtype, int32_t *ndim,
                            const int64_t **shape, const void **bytes, int64_t *nbytes)
{
    unsigned char *b = qt_keep_base(p);
    const int64_t off = qt_keep_off(p, i);
    qt_keep_rec *r = (qt_keep_rec *)(void *)(b + off);
    *dtype = r->dtype;
    *ndim = r->ndim;
    *shape = r->shape;
    *nbytes = r->nbytes;
    *bytes = b + off + (int64_t)sizeof *r;
    return r->name;
}

int qt_ckpt_keep_declare(const qt_plan *p)
{
    for (int32_t i = 0, n = qt_ckpt_keep_count(p); i < n; i++) {
        int32_t dt, nd;
        const int64_t *sh;
        const void *by;
        int64_t nb;
        const char *name = qt_ckpt_keep_at(p, i, &dt, &nd, &sh, &by, &nb);
        int rc = qt_st_wadd(name, dt, nd, sh);
        if (rc) return rc;
    }
    return QT_OK;
}

int qt_ckpt_keep_write(const qt_plan *p)
{
    for (int32_t i = 0, n = qt_ckpt_keep_count(p); i < n; i++) {
        int32_t dt, nd;
        const int64_t *sh;
        const void *by;
        int64_t nb;
        qt_ckpt_keep_at(p, i, &dt, &nd, &sh, &by, &nb);
        int rc = qt_st_wwrite(by, nb);
        if (rc) return rc;
    }
    return QT_OK;
}
