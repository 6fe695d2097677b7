/* coll_async.c - split collectives: a plan's reduce-scatter or all-gather started by one op
 * (qt_coll_start_range), an all-to-all-v (qt_coll_start_a2av) or the microbatch form's
 * units exchange (qt_coll_start_units), advanced between the ops that follow
 * (qt_coll_progress, called by the interpreter) and completed by a later op
 * (qt_coll_wait_range / qt_coll_wait_a2av / qt_coll_wait_units), so its transfers run beside
 * compute (docs/overlap.md).
 *
 * Invariants:
 *  - a split collective walks the same cursor (coll_steps.c) as the blocking one, so it
 *    moves the same bytes and adds the same operands in the same order: same bits;
 *  - at most QT_COMM_SLOTS collectives are in flight; the one started k-th takes the lowest
 *    free slot, and slot s's messages carry their own tag (qt_comm_post), so they match only
 *    the peers' same collective: every rank runs the same schedule, so every member of a
 *    group gives that collective the same slot;
 *  - MPI moves bytes only inside MPI calls: progress is one test of each busy slot and,
 *    for a finished step, its local work (the reduce-scatter's adds, the units exchange's
 *    unpack of what arrived and pack of the next piece) and the next step's post; no thread;
 *  - a units job sends from and receives into the scratch only (its cursor packs a piece
 *    before its post and unpacks it after its completion), never the units themselves;
 *  - no heap: the jobs are this file's one static struct; the buffers are the plan's.
 */
#include "qt_coll.h"
#include "qt_comm.h"
#include "qt_err.h"
#include "coll_int.h"
#include "coll_steps.h"

_Static_assert(QT_COMM_SLOTS >= QT_MAX_IN_FLIGHT, "coll_async.c: fewer transfer slots than a plan "
               "may have collectives in flight");

typedef struct qt_coll_job {
    int busy;                /* started and not yet waited */
    int running;             /* steps left (0: complete, waiting for its wait) */
    int posted;              /* a piece of the current step is posted on the slot */
    int64_t id;              /* the plan's collective index; < 0: a split all-to-all-v */
    const char *op;          /* "reduce_scatter" / "all_gather" / "all_to_all_v" /
                                "exchange_units", for messages */
    qt_grp g;
    qt_coll_cursor cur;
    int64_t soff, roff, sn, rn;
} qt_coll_job;

static struct {
    qt_coll_job job[QT_COMM_SLOTS];
    int n_running;
} qt_async;

/* Post the next piece of job j's current step on slot `slot`. */
static int qt_async_post(qt_coll_job *j, int slot)
{
    const qt_coll_step *x = &j->cur.x;
    j->sn = x->sb - j->soff < QT_COMM_CHUNK_BYTES ? x->sb - j->soff : QT_COMM_CHUNK_BYTES;
    j->rn = x->rb - j->roff < QT_COMM_CHUNK_BYTES ? x->rb - j->roff : QT_COMM_CHUNK_BYTES;
    const int dst = x->dst >= 0 && j->sn > 0 ? qt_coll_member(&j->g, x->dst) : -1;
    const int src = x->src >= 0 && j->rn > 0 ? qt_coll_member(&j->g, x->src) : -1;
    qt_coll_note(j->op, j->g.mask, j->cur.stage);
    int rc = qt_comm_post(slot, dst, x->s + j->soff, j->sn, src, x->r + j->roff, j->rn);
    j->posted = rc == QT_OK;
    return rc;
}

/* Advance job j (slot `slot`) as far as its transfers allow without waiting; *waiting: the
 * world rank its posted piece still waits for (-1: none). */
static int qt_async_advance(qt_coll_job *j, int slot, int *waiting)
{
    *waiting = -1;
    while (j->running) {
        if (j->posted) {
            int done = 0, rc = qt_comm_test(slot, &done, waiting);
            if (rc) return rc;
            if (!done) return QT_OK;
            j->posted = 0;
            j->soff += j->sn;
            j->roff += j->rn;
            if (j->soff < j->cur.x.sb || j->roff < j->cur.x.rb) {
                rc = qt_async_post(j, slot);
                if (rc) return rc;
                continue;
            }
            if (j->cur.x.dst >= 0) qt_coll_count(j->cur.x.sb, 0.0, 0);
            qt_coll_cursor_done(&j->cur);
        }
        if (!qt_coll_cursor_next(&j->cur)) {
            j->running = 0;
            qt_async.n_running--;
            return QT_OK;
        }
        j->soff = j->roff = 0;
        int rc = qt_async_post(j, slot);
        if (rc) return rc;
    }
    return QT_OK;
}

static int qt_async_slot_of(int64_t id);

/* The lowest free slot into *slot: 0, or QT_E_PLAN naming collective `name`. */
static int qt_async_free_slot(const char *name, int *slot)
{
    int s = 0;
    while (s < QT_COMM_SLOTS && qt_async.job[s].busy) s++;
    if (s == QT_COMM_SLOTS)
        return qt_fail(QT_E_PLAN, "collective %s: %d collectives already in flight", name,
                       QT_COMM_SLOTS);
    *slot = s;
    return QT_OK;
}

/* Job `slot` (its group and cursor set) runs from here: its first post. t0: the start's
 * clock, for the counters. */
static int qt_async_launch(int slot, double t0)
{
    qt_coll_job *j = &qt_async.job[slot];
    j->busy = j->running = 1;
    qt_async.n_running++;
    int waiting;
    int rc = qt_async_advance(j, slot, &waiting);
    qt_coll_count(0, qt_coll_now() - t0, 1);
    return rc;
}

int qt_coll_start_range(int64_t id, const qt_collective *c, unsigned char *base, float *scratch,
                        int64_t scratch_elems)
{
    const int reduce = c->kind == QT_COLL_REDUCE_SCATTER;
    const char *op = reduce ? "reduce_scatter" : "all_gather";
    if (!reduce && c->kind != QT_COLL_ALL_GATHER)
        return qt_fail(QT_E_PLAN, "collective %s: kind %u has no split form (reduce-scatter "
                       "and all-gather have)", c->name, c->kind);
    qt_grp g;
    int rc = qt_coll_group(op, c->mask, 0, &g);
    if (rc) return rc;
    if (g.size == 1 || c->bytes == 0) return QT_OK;   /* nothing moves: nothing in flight */
    int slot = 0;
    rc = qt_async_free_slot(c->name, &slot);
    if (rc) return rc;
    const int64_t blk = c->bytes / g.size;
    if (reduce && ((!qt_coll_pow2(g.size) && g.size > QT_COLL_MAX_ANY) || !scratch ||
                   scratch_elems < (qt_coll_pow2(g.size) ? 2 : g.size - 1)))
        return qt_fail(QT_E_PLAN, "collective %s: group of %d, scratch %lld floats", c->name,
                       g.size, (long long)scratch_elems);
    const double t0 = qt_coll_now();
    qt_coll_job *j = &qt_async.job[slot];
    *j = (qt_coll_job){.id = id, .op = op, .g = g};
    if (reduce)
        qt_coll_cursor_rs(&j->cur, g.size, g.index, (float *)(void *)base, blk / 4, scratch,
                          scratch_elems);
    else
        qt_coll_cursor_ag(&j->cur, g.size, g.index, base, blk,
                          qt_coll_pow2(g.size) ? qt_coll_slice_bits(c->mask) : 0);
    return qt_async_launch(slot, t0);
}

int qt_coll_start_a2av(int64_t id, unsigned mask, const void *send, const int64_t *send_counts,
                       const int64_t *send_offs, void *recv, const int64_t *recv_counts,
                       const int64_t *recv_offs, int64_t elem_bytes)
{
    static const char op[] = "all_to_all_v";
    if (id >= 0)
        return qt_fail(QT_E_PLAN, "split %s over mask 0x%x: id %lld, expected < 0 (the plan's "
                       "collectives own the ids >= 0)", op, mask, (long long)id);
    const double t0 = qt_coll_now();
    qt_grp g;
    qt_coll_cursor c;
    int rc = qt_coll_a2av_setup(op, mask, send, send_counts, send_offs, recv, recv_counts,
                                recv_offs, elem_bytes, &g, &c);
    if (rc || g.size == 1) return rc;                 /* one member: copied, nothing in flight */
    int slot = 0;
    rc = qt_async_free_slot(op, &slot);
    if (rc) return rc;
    qt_async.job[slot] = (qt_coll_job){.id = id, .op = op, .g = g, .cur = c};
    return qt_async_launch(slot, t0);
}

int qt_coll_start_units(int64_t id, unsigned mask, float *const *unit, int q, int64_t blk,
                        float *tmp, int64_t tmp_elems)
{
    static const char op[] = "exchange_units";
    if (id >= 0)
        return qt_fail(QT_E_PLAN, "split %s over mask 0x%x: id %lld, expected < 0 (the plan's "
                       "collectives own the ids >= 0)", op, mask, (long long)id);
    if (qt_async_slot_of(id) >= 0)
        return qt_fail(QT_E_PLAN, "split %s over mask 0x%x: id %lld is in flight already", op,
                       mask, (long long)id);
    const double t0 = qt_coll_now();
    qt_grp g;
    qt_coll_cursor c;
    int rc = qt_coll_units_setup(op, mask, unit, q, blk, tmp, tmp_elems, &g, &c);
    if (rc || g.size == 1 || blk == 0) return rc;     /* nothing moves: nothing in flight */
    int slot = 0;
    rc = qt_async_free_slot(op, &slot);
    if (rc) return rc;
    qt_async.job[slot] = (qt_coll_job){.id = id, .op = op, .g = g, .cur = c};
    return qt_async_launch(slot, t0);
}

int qt_coll_progress(void)
{
    if (!qt_async.n_running) return QT_OK;
    const double t0 = qt_coll_now();
    int rc = QT_OK, waiting;
    for (int s = 0; s < QT_COMM_SLOTS && rc == QT_OK; s++)
        if (qt_async.job[s].running) rc = qt_async_advance(&qt_async.job[s], s, &waiting);
    qt_coll_count(0, qt_coll_now() - t0, 0);
    return rc;
}

/* The slot of the job with id `id` in flight, or -1. */
static int qt_async_slot_of(int64_t id)
{
    for (int s = 0; s < QT_COMM_SLOTS; s++)
        if (qt_async.job[s].busy && qt_async.job[s].id == id) return s;
    return -1;
}

/* Complete the job on `slot`, progressing every job in flight, under the deadline. */
static int qt_async_wait(int slot)
{
    qt_coll_job *j = &qt_async.job[slot];
    const double t0 = qt_coll_now(), d = qt_coll_deadline_s();
    int rc = QT_OK;
    for (;;) {
        int waiting = -1;
        rc = qt_async_advance(j, slot, &waiting);
        /* the others too: a peer may wait for one of them */
        for (int s = 0; s < QT_COMM_SLOTS && rc == QT_OK; s++) {
            int w;
            if (s != slot && qt_async.job[s].running) rc = qt_async_advance(&qt_async.job[s], s, &w);
        }
        if (rc || !j->running) break;
        const double now = qt_coll_now();
        if (d > 0 && now > t0 + d) {
            qt_coll_note(j->op, j->g.mask, j->cur.stage);
            rc = qt_coll_silent(waiting);
            break;
        }
        qt_comm_idle(now - t0);
    }
    if (rc == QT_OK) j->busy = 0;
    qt_coll_count(0, qt_coll_now() - t0, 0);
    return rc;
}

int qt_coll_wait_range(int64_t id, const qt_collective *c)
{
    const int slot = qt_async_slot_of(id);
    if (slot < 0) {
        /* a group of one (or an empty range) never starts a job */
        if (qt_comm_group_size(c->mask) == 1 || c->bytes == 0) return QT_OK;
        return qt_fail(QT_E_PLAN, "collective %s: waited for, but not in flight", c->name);
    }
    return qt_async_wait(slot);
}

int qt_coll_wait_a2av(int64_t id, unsigned mask)
{
    const int slot = qt_async_slot_of(id);
    if (slot < 0) {
        if (qt_comm_group_size(mask) == 1) return QT_OK;   /* a group of one starts nothing */
        return qt_fail(QT_E_PLAN, "split all_to_all_v %lld over mask 0x%x: waited for, but not "
                       "in flight", (long long)id, mask);
    }
    return qt_async_wait(slot);
}

int qt_coll_wait_units(int64_t id, unsigned mask, int64_t blk)
{
    const int slot = qt_async_slot_of(id);
    if (slot < 0) {
        if (qt_comm_group_size(mask) == 1 || blk == 0) return QT_OK;  /* nothing started */
        return qt_fail(QT_E_PLAN, "split exchange_units %lld over mask 0x%x: waited for, but "
                       "not in flight", (long long)id, mask);
    }
    return qt_async_wait(slot);
}

int qt_coll_in_flight(void)
{
    int n = 0;
    for (int s = 0; s < QT_COMM_SLOTS; s++) n += qt_async.job[s].busy;
    return n;
}
