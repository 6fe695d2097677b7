/* coll_range.c - the plan's collectives (qt_plan.h qt_collective) on their arena ranges:
 * one range function per row of qt_coll.def, the dispatch table generated from it and the
 * start-up check of a collective against its row (qt_coll.h).
 *
 * A range function reads and writes only [base, base + bytes) and the scratch; it is
 * collective over group `mask` (every member calls it with the same kind, mask and bytes).
 */
#include "qt_coll.h"
#include "qt_err.h"

typedef int (*qt_coll_range_fn)(unsigned mask, unsigned char *base, int64_t bytes,
                                 float *scratch, int64_t scratch_elems);

static int qt_coll_range_all_gather(unsigned mask, unsigned char *base, int64_t bytes,
                                    float *scratch, int64_t scratch_elems)
{
    (void)scratch;
    (void)scratch_elems;
    return qt_coll_all_gather(mask, base, bytes / qt_comm_group_size(mask));
}

static int qt_coll_range_reduce_scatter(unsigned mask, unsigned char *base, int64_t bytes,
                                        float *scratch, int64_t scratch_elems)
{
    const int64_t blk = bytes / (int64_t)sizeof(float) / qt_comm_group_size(mask);
    return qt_coll_reduce_scatter_f32(mask, (float *)(void *)base, blk, scratch, scratch_elems);
}

static int qt_coll_range_broadcast(unsigned mask, unsigned char *base, int64_t bytes,
                                   float *scratch, int64_t scratch_elems)
{
    (void)scratch;
    (void)scratch_elems;
    return qt_coll_broadcast(mask, base, bytes, 0);
}

static int qt_coll_range_max_i64(unsigned mask, unsigned char *base, int64_t bytes,
                                 float *scratch, int64_t scratch_elems)
{
    (void)scratch;
    (void)scratch_elems;
    if (bytes / 8 > 0x7fffffff)
        return qt_fail(QT_E_PLAN, "max_i64 over mask 0x%x: %lld bytes (limit 2^31 values)", mask,
                       (long long)bytes);
    return qt_coll_max_i64(mask, (int64_t *)(void *)base, (int)(bytes / 8));
}

#define QT_COLLR_RANGE(name) qt_coll_range_##name
#define QT_COLLR_NONE(name) 0
static const struct {
    qt_coll_range_fn run;
    int32_t unit, split;
} qt_coll_rows[QT_COLL_KIND_COUNT] = {
#define QT_COLL(e, name, text, unit, split, sent, run) [QT_COLL_##e] = {QT_COLLR_##run(name), unit, split},
#include "qt_coll.def"
#undef QT_COLL
};

int qt_coll_range_check(const qt_collective *c, int64_t arena_bytes)
{
    if (c->kind >= QT_COLL_KIND_COUNT || !qt_coll_rows[c->kind].run) return QT_E_PLAN;
    const int64_t r = qt_comm_group_size(c->mask);
    const int64_t unit = qt_coll_rows[c->kind].unit * (qt_coll_rows[c->kind].split ? r : 1);
    if (c->offset < 0 || c->bytes < 0 || c->offset + c->bytes > arena_bytes || r < 1 ||
        c->bytes % unit != 0)
        return QT_E_PLAN;
    return QT_OK;
}

int qt_coll_run_range(const qt_collective *c, unsigned char *base, float *scratch,
                      int64_t scratch_elems)
{
    if (c->kind >= QT_COLL_KIND_COUNT || !qt_coll_rows[c->kind].run)
        return qt_fail(QT_E_PLAN, "collective %s: kind %u has no range form", c->name, c->kind);
    return qt_coll_rows[c->kind].run(c->mask, base, c->bytes, scratch, scratch_elems);
}
