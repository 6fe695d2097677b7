/* ckpt_gather.c - parameters of the flat regions in their global layout, for checkpoint IO
 * on any mesh (contract and invariants in qt_ckpt_gather.h).
 *
 * Invariants: no heap, no I/O, no recursion; the staging region is the only scratch; the
 * only collective is one qt_coll_sum_u64 per gathered window (rows of the first dimension),
 * over the group of ranks whose parts make up the tensor, so groups that hold the same parts
 * run in parallel and all of them end with the same global window (the exact integer sum
 * does not depend on order).
 */
#include <string.h>
#include "qt_ckpt_gather.h"
#include "qt_rng.h"
#include "qt_blocks.h"
#include "qt_err.h"
#include "comm/qt_coll.h"

#define QT_CKG_CHECK_WORDS 2                     /* element count, sum of mixed indices */
#define QT_CKG_SUM_CHUNK ((int64_t)1 << 26)      /* words per qt_coll_sum_u64 call (int n) */

static const char *const qt_ckg_names[QT_CKS_COUNT] = {"params", "gradient", "adam m",
                                                        "adam v"};

static float *qt_ckg_f32(const qt_plan *p, int64_t byte_off)
{
    return (float *)(void *)(p->arena + byte_off);
}

static int64_t qt_ckg_region(const qt_plan *p, int src)
{
    switch (src) {
    case QT_CKS_GRADS: return p->grads_offset;
    case QT_CKS_ADAM_M: return p->adam_m_offset;
    case QT_CKS_ADAM_V: return p->adam_v_offset;
    default: return p->params_offset;
    }
}

/* Mesh axes tensor t is sharded over: the spec bits of its dims whose local size differs
 * from the global one. */
static unsigned qt_ckg_shard_axes(const qt_tensor *t)
{
    unsigned d_axes = 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != t->global_shape[d]) d_axes |= t->spec[d];
    return d_axes;
}

/* Flat range holding parameter i, or -1. */
static int32_t qt_ckg_range(const qt_plan *p, int32_t i)
{
    const qt_param *pa = &p->params[i];
    for (int32_t r = 0; r < p->n_ranges; r++)
        if (pa->flat_offset >= p->ranges[r].lo &&
            pa->flat_offset + pa->numel <= p->ranges[r].lo + p->ranges[r].n)
            return r;
    return -1;
}

static int64_t qt_ckg_global_numel(const qt_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->global_shape[d];
    return n;
}

/* Elements of one row of the first dimension of parameter i (global layout, >= 1). */
static int64_t qt_ckg_row_elems(const qt_tensor *t)
{
    return t->global_shape[0] > 0 ? qt_ckg_global_numel(t) / t->global_shape[0] : 1;
}

int qt_ckpt_dist_check(const qt_plan *p)
{
    if (p->n_ranks <= 1) return QT_OK;
    for (int32_t i = 0; i < p->n_params; i++) {
        const qt_tensor *t = &p->tensors[p->params[i].tensor];
        const int32_t r = qt_ckg_range(p, i);
        const int64_t row = qt_ckg_row_elems(t);
        if (p->staging_elems < row + 2 * QT_CKG_CHECK_WORDS + 1)
            return qt_fail(QT_E_PLAN, "plan %s: checkpoint staging holds %lld floats, parameter "
                           "%s needs %lld for one row of its first dimension (regenerate the "
                           "plan)", p->run_name, (long long)p->staging_elems, p->params[i].name,
                           (long long)(row + 2 * QT_CKG_CHECK_WORDS + 1));
        if (r < 0)
            return qt_fail(QT_E_PLAN, "plan %s: parameter %s (flat %lld, +%lld) is not inside "
                           "one flat range", p->run_name, p->params[i].name,
                           (long long)p->params[i].flat_offset, (long long)p->params[i].numel);
        if (qt_ckg_shard_axes(t) & p->ranges[r].opt_mask)
            return qt_fail(QT_E_PLAN, "plan %s: parameter %s is sharded over mesh axes 0x%x that "
                           "also split its optimizer state (0x%x); checkpoints cannot gather it",
                           p->run_name, p->params[i].name, qt_ckg_shard_axes(t),
                           (unsigned)p->ranges[r].opt_mask);
    }
    return QT_OK;
}

/* Group whose members' parts of (src, i) tile the tensor: its shard axes, plus the
 * optimizer axes of its range for the regions held in optimizer blocks. 0 on one rank. */
static unsigned qt_ckg_mask(const qt_plan *p, int src, int32_t i)
{
    if (p->n_ranks <= 1) return 0;
    unsigned m = qt_ckg_shard_axes(&p->tensors[p->params[i].tensor]);
    if (src != QT_CKS_PARAMS || qt_plan_masters_compact(p))
        m |= p->ranges[qt_ckg_range(p, i)].opt_mask;
    return m;
}

/* The parameter in place, for a rank that holds it globally (mask 0). */
static float *qt_ckg_in_place(const qt_plan *p, int src, int32_t i)
{
    const qt_param *pa = &p->params[i];
    float *base = qt_ckg_f32(p, qt_ckg_region(p, src));
    if (p->n_ranks <= 1) return base + pa->flat_offset;
    if (src == QT_CKS_PARAMS) return qt_step_param_at(p, qt_ckg_range(p, i), pa->flat_offset);
    if (src == QT_CKS_GRADS) return qt_step_grad_at(p, qt_ckg_range(p, i), pa->flat_offset);
    /* Adam on a mesh: the range's block is the whole range (no optimizer axes here) */
    const qt_flat_range *r = &p->ranges[qt_ckg_range(p, i)];
    return base + r->adam_lo + (pa->flat_offset - r->lo);
}

/* This rank's part of (src, i) as local element j0 .. j0+n of the parameter, at *at
 * (elements consecutive). Params: the whole local tensor; otherwise the intersection of the
 * rank's optimizer block with the parameter (n may be 0). */
static void qt_ckg_part(const qt_plan *p, int src, int32_t i, int64_t *j0, int64_t *n,
                        float **at)
{
    const qt_param *pa = &p->params[i];
    float *base = qt_ckg_f32(p, qt_ckg_region(p, src));
    if (src == QT_CKS_PARAMS && !qt_plan_masters_compact(p)) {
        *j0 = 0;
        *n = pa->numel;
        *at = base + pa->flat_offset;
        return;
    }
    const int32_t r = qt_ckg_range(p, i);
    int64_t blo, bn;
    qt_step_block(p, r, &blo, &bn);
    const int64_t a = blo > pa->flat_offset ? blo : pa->flat_offset;
    const int64_t e = blo + bn < pa->flat_offset + pa->numel ? blo + bn
                                                              : pa->flat_offset + pa->numel;
    *j0 = a - pa->flat_offset;
    *n = e > a ? e - a : 0;
    /* gradient: flat addressing (or compact, qt_step_grad_at); compact parameters and Adam:
     * the block is stored from adam_lo */
    *at = src == QT_CKS_GRADS ? qt_step_grad_at(p, r, a) : base + p->ranges[r].adam_lo + (a - blo);
}

int64_t qt_ckpt_window_rows(const qt_plan *p, int32_t i)
{
    const qt_tensor *t = &p->tensors[p->params[i].tensor];
    const int64_t rows = t->global_shape[0], room = p->staging_elems - 2 * QT_CKG_CHECK_WORDS - 1;
    if (p->n_ranks <= 1 || room >= qt_ckg_global_numel(t)) return rows;
    const int64_t w = room / qt_ckg_row_elems(t);
    return w < 1 ? 1 : w > rows ? rows : w;
}

/* Every element of this rank's part of (src, i) whose global row (first dimension) is in
 * [r0, r1), local rows in increasing order: scatter 0 writes it to stg[g - r0 x row] (g its
 * global index) and adds qt_mix64(g) to *mix; scatter 1 reads it back from there. Returns
 * the count. A local element's global row depends only on its local row (qt_global_index
 * maps each dim apart), so rows outside the window cost one index each. */
static int64_t qt_ckg_each(const qt_plan *p, int src, int32_t i, int64_t r0, int64_t r1,
                           float *stg, int scatter, uint64_t *mix)
{
    const qt_tensor *t = &p->tensors[p->params[i].tensor];
    const int64_t lrow = t->shape[0] > 0 ? p->params[i].numel / t->shape[0] : 1;
    const int64_t grow = qt_ckg_row_elems(t), g0 = r0 * grow;
    int64_t j0, n, cnt = 0;
    float *part;
    qt_ckg_part(p, src, i, &j0, &n, &part);
    for (int64_t c = 0; c < t->shape[0]; c++) {
        const int64_t a = c * lrow > j0 ? c * lrow : j0;
        const int64_t b = (c + 1) * lrow < j0 + n ? (c + 1) * lrow : j0 + n;
        if (a >= b) continue;
        const int64_t gr = qt_global_index(p, t, c * lrow) / grow;
        if (gr < r0 || gr >= r1) continue;
        for (int64_t j = a; j < b; j++) {
            const int64_t g = qt_global_index(p, t, j);
            if (scatter) {
                part[j - j0] = stg[g - g0];
            } else {
                stg[g - g0] = part[j - j0];
                *mix += qt_mix64((uint64_t)g);
            }
        }
        cnt += b - a;
    }
    return cnt;
}

int qt_ckpt_gather_rows(const qt_plan *p, int src, int32_t i, int64_t r0, int64_t r1,
                        const float **out)
{
    const unsigned mask = qt_ckg_mask(p, src, i);
    const qt_tensor *t = &p->tensors[p->params[i].tensor];
    const int64_t grow = qt_ckg_row_elems(t);
    if (!mask) {
        *out = qt_ckg_in_place(p, src, i) + r0 * grow;
        return QT_OK;
    }
    const int64_t gn = (r1 - r0) * grow, words = (gn + 1) / 2;
    if (r0 < 0 || r1 > t->global_shape[0] || r0 >= r1 ||
        2 * (words + QT_CKG_CHECK_WORDS) > p->staging_elems)
        return qt_fail(QT_E_PLAN, "checkpoint gather of %s %s: rows %lld..%lld do not fit the "
                       "staging region of %lld floats", qt_ckg_names[src], p->params[i].name,
                       (long long)r0, (long long)r1, (long long)p->staging_elems);
    float *stg = qt_ckg_f32(p, p->staging_offset);
    memset(stg, 0, (size_t)(8 * (words + QT_CKG_CHECK_WORDS)));
    uint64_t chk[QT_CKG_CHECK_WORDS] = {0, 0};
    chk[0] = (uint64_t)qt_ckg_each(p, src, i, r0, r1, stg, 0, &chk[1]);
    uint64_t *w = (uint64_t *)(void *)stg;
    memcpy(w + words, chk, sizeof chk);
    int rc = QT_OK;
    for (int64_t c = 0; c < words + QT_CKG_CHECK_WORDS && !rc; c += QT_CKG_SUM_CHUNK) {
        const int64_t cn = words + QT_CKG_CHECK_WORDS - c < QT_CKG_SUM_CHUNK
                               ? words + QT_CKG_CHECK_WORDS - c : QT_CKG_SUM_CHUNK;
        rc = qt_coll_sum_u64(mask, w + c, (int)cn);
    }
    if (rc) return rc;
    memcpy(chk, w + words, sizeof chk);
    uint64_t want = 0;
    for (int64_t g = r0 * grow; g < r1 * grow; g++) want += qt_mix64((uint64_t)g);
    if (chk[0] != (uint64_t)gn || chk[1] != want)
        return qt_fail(QT_E_PLAN, "checkpoint gather of %s %s (rows %lld..%lld) over mesh axes "
                       "0x%x: the ranks' parts hold %llu of %lld elements%s (shard mapping and "
                       "plan disagree)", qt_ckg_names[src], p->params[i].name, (long long)r0,
                       (long long)r1, mask, (unsigned long long)chk[0], (long long)gn,
                       chk[0] == (uint64_t)gn ? ", with overlaps" : "");
    *out = stg;
    return QT_OK;
}

void qt_ckpt_part_span(const qt_plan *p, int src, int32_t i, int64_t *lo, int64_t *hi)
{
    const qt_tensor *t = &p->tensors[p->params[i].tensor];
    *lo = 0;
    *hi = qt_ckg_global_numel(t) - 1;
    if (!qt_ckg_mask(p, src, i)) return;
    int64_t j0, n;
    float *part;
    qt_ckg_part(p, src, i, &j0, &n, &part);
    *lo = INT64_MAX;
    *hi = -1;
    for (int64_t j = 0; j < n; j++) {
        const int64_t g = qt_global_index(p, t, j0 + j);
        if (g < *lo) *lo = g;
        if (g > *hi) *hi = g;
    }
}

float *qt_ckpt_scatter_rows_dst(const qt_plan *p, int src, int32_t i, int64_t r0)
{
    if (qt_ckg_mask(p, src, i)) return qt_ckg_f32(p, p->staging_offset);
    return qt_ckg_in_place(p, src, i) + r0 * qt_ckg_row_elems(&p->tensors[p->params[i].tensor]);
}

void qt_ckpt_scatter_rows_done(const qt_plan *p, int src, int32_t i, int64_t r0, int64_t r1)
{
    if (!qt_ckg_mask(p, src, i)) return;
    qt_ckg_each(p, src, i, r0, r1, qt_ckg_f32(p, p->staging_offset), 1, 0);
}
