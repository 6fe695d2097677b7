/* coll.c - the collectives of qt_coll.h, written once for both back ends on top of
 * qt_comm_sendrecv (qt_comm.h): mesh and group arithmetic, the deadline and context of
 * timeout messages, the counters, and the algorithms: the reduce-scatter and all-gather
 * driven with blocking transfers over their step cursors (coll_steps.c, shared with the
 * split collectives of coll_async.c), the units' pairwise exchange (a cursor too, with or
 * without the step form's fold), binomial broadcast, exact integer sums,
 * shift-schedule all-to-all, plan check.
 *
 * Invariants:
 *  - floats are only ever added in coll_steps.c (the fixed pairing of
 *    qt_coll_reduce_scatter_f32, a perfect pairwise tree over group indices); message
 *    sizes and scratch size change how data moves, never which additions happen;
 *  - every member of a group runs the same sequence of qt_comm_sendrecv calls with matching
 *    sizes, so pairwise FIFO order matches the messages (no tags per call);
 *  - no heap, no VLAs, no recursion; all state is qt_coll_s; scratch is the caller's
 *    (floats) or the fixed qt_coll_s.u64 buffer (integer reductions, chunked);
 *  - each public collective runs under one absolute deadline set at its start; a timeout's
 *    message is written in one place (qt_coll_silent), the hint last.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "qt_coll.h"
#include "qt_comm.h"
#include "qt_err.h"
#include "coll_int.h"
#include "coll_steps.h"

#define QT_COLL_MASKS (1u << QT_MESH_COUNT)
#define QT_COLL_U64_CHUNK 1024                        /* integer reduction scratch, values */
#define QT_COLL_CHECK_LANES 6                          /* lanes of qt_comm_check_same */
#define QT_COLL_PROBE_S 1.5                            /* liveness probe window, seconds */

typedef void (*qt_coll_combine)(uint64_t *acc, const uint64_t *in, int n);

static struct {
    int ready;                              /* qt_comm_mesh_init succeeded */
    int rank, size;
    int base;                   /* world rank of the mesh's rank 0 (qt_comm_mesh_set_base) */
    int32_t mesh[QT_MESH_COUNT];
    int32_t dcn[QT_MESH_COUNT];             /* slices per axis (qt_mesh_coords) */
    int32_t coord[QT_MESH_COUNT];
    int32_t gsize[QT_COLL_MASKS], gindex[QT_COLL_MASKS];
    int deadline_set;                       /* 0: default deadline */
    double deadline_s;
    char hint[160];                         /* qt_comm_set_timeout_hint, or "" */
    char what[128];
    long long step;
    /* the collective in progress, for messages */
    const char *op;
    unsigned op_mask;
    int op_world, op_stage;
    double t_start, t_deadline;
    /* counters */
    int64_t bytes_sent, calls;
    double seconds;
    uint64_t u64[QT_COLL_U64_CHUNK];        /* received values of integer reductions */
} qt_coll_s = {.step = -1};

static const char *const qt_coll_axis_name[QT_MESH_COUNT] = {
    "data", "fsdp", "tensor", "expert", "context"};

double qt_coll_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- mesh ------------------------------------------------------------------------------- */

int qt_comm_mesh_init(const int32_t mesh[QT_MESH_COUNT], int rank, int size)
{
    return qt_comm_mesh_init_slices(mesh, NULL, rank, size);
}

int qt_comm_mesh_init_slices(const int32_t mesh[QT_MESH_COUNT], const int32_t *dcn, int rank,
                             int size)
{
    qt_coll_s.ready = 0;
    int64_t prod = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++) {
        if (mesh[a] < 1)
            return qt_fail(QT_E_PLAN, "mesh: %s axis has size %d (must be >= 1)",
                           qt_coll_axis_name[a], mesh[a]);
        prod *= mesh[a];
        if (prod > (int64_t)1 << 30)
            return qt_fail(QT_E_PLAN, "mesh: more than 2^30 ranks");
    }
    if (prod != size || rank < 0 || rank >= size)
        return qt_fail(QT_E_PLAN, "mesh %dx%dx%dx%dx%d (data x fsdp x tensor x expert x "
                       "context) has %lld rank%s, but this job has %d (rank %d)", mesh[0],
                       mesh[1], mesh[2], mesh[3], mesh[4], (long long)prod,
                       prod == 1 ? "" : "s", size, rank);
    for (int a = 0; a < QT_MESH_COUNT; a++) {
        const int32_t nd = qt_mesh_dcn(dcn, a);
        if (mesh[a] % nd)
            return qt_fail(QT_E_PLAN, "mesh: axis %s of %d rank%s cannot hold %d slices",
                           qt_coll_axis_name[a], mesh[a], mesh[a] == 1 ? "" : "s", nd);
        qt_coll_s.mesh[a] = mesh[a];
        qt_coll_s.dcn[a] = nd;
    }
    qt_mesh_coords(mesh, qt_coll_s.dcn, rank, qt_coll_s.coord);
    for (unsigned m = 0; m < QT_COLL_MASKS; m++) {
        int32_t gs = 1, gi = 0;
        for (int a = 0; a < QT_MESH_COUNT; a++) {
            if (!(m & (1u << a))) continue;
            gs *= mesh[a];
            gi = gi * mesh[a] + qt_coll_s.coord[a];
        }
        qt_coll_s.gsize[m] = gs;
        qt_coll_s.gindex[m] = gi;
    }
    qt_coll_s.rank = rank;
    qt_coll_s.size = size;
    qt_coll_s.base = 0;
    qt_coll_s.ready = 1;
    qt_err_set_rank(rank, size);
    return QT_OK;
}

static int qt_coll_mask_ok(unsigned mask)
{
    return qt_coll_s.ready && mask < QT_COLL_MASKS;
}

int qt_comm_group_size(unsigned mask)
{
    return qt_coll_mask_ok(mask) ? qt_coll_s.gsize[mask] : QT_E_PLAN;
}

int qt_comm_group_index(unsigned mask)
{
    return qt_coll_mask_ok(mask) ? qt_coll_s.gindex[mask] : QT_E_PLAN;
}

int qt_comm_group_rank(unsigned mask, int index)
{
    if (!qt_coll_mask_ok(mask) || index < 0 || index >= qt_coll_s.gsize[mask]) return QT_E_PLAN;
    int32_t c[QT_MESH_COUNT];
    for (int a = QT_MESH_COUNT - 1; a >= 0; a--) {
        c[a] = qt_coll_s.coord[a];
        if (mask & (1u << a)) {
            c[a] = index % qt_coll_s.mesh[a];
            index /= qt_coll_s.mesh[a];
        }
    }
    return qt_coll_s.base + (int)qt_mesh_rank(qt_coll_s.mesh, qt_coll_s.dcn, c);
}

void qt_comm_mesh_set_base(int base)
{
    qt_coll_s.base = base;
}

/* ---- deadline, context, counters -------------------------------------------------------- */

void qt_comm_set_deadline(double seconds)
{
    qt_coll_s.deadline_set = 1;
    qt_coll_s.deadline_s = seconds;
}

void qt_comm_set_timeout_hint(const char *hint)
{
    snprintf(qt_coll_s.hint, sizeof qt_coll_s.hint, "%s", hint ? hint : "");
}

void qt_comm_set_context(const char *what, long long step)
{
    snprintf(qt_coll_s.what, sizeof qt_coll_s.what, "%s", what ? what : "");
    qt_coll_s.step = step;
}

void qt_comm_stats(int64_t *bytes_sent, double *seconds, int64_t *calls)
{
    if (bytes_sent) *bytes_sent = qt_coll_s.bytes_sent;
    if (seconds) *seconds = qt_coll_s.seconds;
    if (calls) *calls = qt_coll_s.calls;
}

/* Writes "what, step N, op over axes (R ranks)[, stage s]" into out[cap]; the axes are
 * those of the mask with more than one rank. */
static void qt_coll_context(char *out, size_t cap)
{
    char axes[64] = "";
    size_t used = 0;
    int ranks = 1;
    if (qt_coll_s.op_world) {
        int me;
        qt_comm_world(&me, &ranks);
        snprintf(axes, sizeof axes, "all ranks");
    } else {
        for (int a = 0; a < QT_MESH_COUNT; a++) {
            if (!(qt_coll_s.op_mask & (1u << a)) || qt_coll_s.mesh[a] < 2) continue;
            ranks *= qt_coll_s.mesh[a];
            int w = snprintf(axes + used, sizeof axes - used, "%s%s", used ? "+" : "",
                             qt_coll_axis_name[a]);
            if (w > 0 && (size_t)w < sizeof axes - used) used += (size_t)w;
        }
    }
    char step[32] = "";
    if (qt_coll_s.step >= 0) snprintf(step, sizeof step, "step %lld, ", qt_coll_s.step);
    char stage[24] = "";
    if (qt_coll_s.op_stage >= 0) snprintf(stage, sizeof stage, ", stage %d", qt_coll_s.op_stage);
    snprintf(out, cap, "%s%s%s%s over %s (%d rank%s)%s", qt_coll_s.what,
             qt_coll_s.what[0] ? ", " : "", step, qt_coll_s.op ? qt_coll_s.op : "?", axes, ranks,
             ranks == 1 ? "" : "s", stage);
}

double qt_coll_deadline_s(void)
{
    return qt_coll_s.deadline_set ? qt_coll_s.deadline_s : QT_COLL_DEFAULT_DEADLINE;
}

/* Start of a public collective: counts it, starts the clock and the deadline. */
static void qt_coll_begin(const char *op, unsigned mask, int world)
{
    qt_coll_s.op = op;
    qt_coll_s.op_mask = mask;
    qt_coll_s.op_world = world;
    qt_coll_s.op_stage = -1;
    qt_coll_s.calls++;
    qt_coll_s.t_start = qt_coll_now();
    double d = qt_coll_deadline_s();
    qt_coll_s.t_deadline = d > 0 ? qt_coll_s.t_start + d : 0;
}

/* End of a public collective: adds its time; returns rc. */
static int qt_coll_end(int rc)
{
    qt_coll_s.seconds += qt_coll_now() - qt_coll_s.t_start;
    return rc;
}

/* Resolve mask into g (or the world when world != 0) for collective `op`. */
int qt_coll_group(const char *op, unsigned mask, int world, qt_grp *g)
{
    g->mask = mask;
    g->world = world;
    g->size = 1;
    g->index = 0;
    if (world) {
        qt_comm_world(&g->index, &g->size);
        return QT_OK;
    }
    if (!qt_coll_s.ready)
        return qt_fail(QT_E_PLAN, "%s: called before qt_comm_mesh_init", op);
    if (mask >= QT_COLL_MASKS)
        return qt_fail(QT_E_PLAN, "%s: mask 0x%x has bits beyond the %d mesh axes", op, mask,
                       QT_MESH_COUNT);
    g->size = qt_coll_s.gsize[mask];
    g->index = qt_coll_s.gindex[mask];
    return QT_OK;
}

int qt_coll_member(const qt_grp *g, int index)
{
    return g->world ? index : qt_comm_group_rank(g->mask, index);
}

/* After a deadline passed waiting for world rank `silent` in the collective named by
 * qt_coll_s.op (its context): the rank I waited for may itself wait for a stopped one, so
 * every rank is asked and each live rank names the same, truly silent one; the message
 * ends with the timeout hint, if any. QT_E_COMM. */
int qt_coll_silent(int silent)
{
    char ctx[256], more[48] = "", why[128] = "";
    qt_coll_context(ctx, sizeof ctx);
    int n_silent = 0;
    int who = qt_comm_probe_silent(silent, QT_COLL_PROBE_S, &n_silent);
    if (who < 0) {
        who = silent;
        snprintf(why, sizeof why, " (it answers a liveness probe: it is busy, or in another "
                 "collective)");
    } else if (who != silent || n_silent != 1) {
        if (n_silent > 1) snprintf(more, sizeof more, " and %d other rank(s)", n_silent - 1);
        snprintf(why, sizeof why, " (silent to a liveness probe; rank %d, which this rank "
                 "waited for, %s)", silent, who == silent ? "is one of them" : "answers it");
    }
    return qt_fail(QT_E_COMM, "%s: no answer from rank %d%s within %g s%s%s%s", ctx, who, more,
                   qt_coll_deadline_s(), why, qt_coll_s.hint[0] ? "; " : "", qt_coll_s.hint);
}

void qt_coll_note(const char *op, unsigned mask, int stage)
{
    qt_coll_s.op = op;
    qt_coll_s.op_mask = mask;
    qt_coll_s.op_world = 0;
    qt_coll_s.op_stage = stage;
}

void qt_coll_count(int64_t bytes_sent, double seconds, int64_t calls)
{
    qt_coll_s.bytes_sent += bytes_sent;
    qt_coll_s.seconds += seconds;
    qt_coll_s.calls += calls;
}

/* One transfer step with group members (indices; -1 = none) under the collective's
 * deadline; counts the bytes; names the silent rank on timeout. */
static int qt_coll_xfer(const qt_grp *g, int dst, const void *s, int64_t sb, int src, void *r,
                        int64_t rb)
{
    int dst_rank = dst >= 0 ? qt_coll_member(g, dst) : -1;
    int src_rank = src >= 0 ? qt_coll_member(g, src) : -1;
    int silent = -1;
    int rc = qt_comm_sendrecv(dst_rank, s, sb, src_rank, r, rb, qt_coll_s.t_deadline, &silent);
    if (rc == QT_OK) {
        if (dst_rank >= 0) qt_coll_s.bytes_sent += sb;
        return QT_OK;
    }
    if (rc == QT_E_COMM && silent >= 0) return qt_coll_silent(silent);
    return rc;
}


/* ---- reduce-scatter, all-gather (coll_steps.c) -------------------------------------- */

/* Drive cursor c to its end with blocking transfers over group g. */
static int qt_coll_run_cursor(const qt_grp *g, qt_coll_cursor *c)
{
    int rc = QT_OK;
    while (rc == QT_OK && qt_coll_cursor_next(c)) {
        qt_coll_s.op_stage = c->stage;
        rc = qt_coll_xfer(g, c->x.dst, c->x.s, c->x.sb, c->x.src, c->x.r, c->x.rb);
        if (rc == QT_OK) qt_coll_cursor_done(c);
    }
    return rc;
}

int qt_coll_reduce_scatter_f32(unsigned mask, float *buf, int64_t blk, float *tmp,
                               int64_t tmp_elems)
{
    static const char op[] = "reduce_scatter";
    qt_grp g;
    int rc = qt_coll_group(op, mask, 0, &g);
    if (rc) return rc;
    if (!qt_coll_pow2(g.size) && g.size > QT_COLL_MAX_ANY)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: group of %d ranks; a group that is not "
                       "a power of two may have at most %d", op, mask, g.size, QT_COLL_MAX_ANY);
    if (g.size == 1 || blk == 0) return QT_OK;
    const int need = qt_coll_pow2(g.size) ? 2 : g.size - 1;
    if (!buf || blk < 0 || !tmp || tmp_elems < need)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: bad buffers (blk %lld, scratch %lld "
                       "floats, need >= %d)", op, mask, (long long)blk, (long long)tmp_elems,
                       need);
    qt_coll_begin(op, mask, 0);
    qt_coll_cursor c;
    qt_coll_cursor_rs(&c, g.size, g.index, buf, blk, tmp, tmp_elems);
    return qt_coll_end(qt_coll_run_cursor(&g, &c));
}

/* The units' arguments (qt_coll_reduce_units_f32, qt_coll_exchange_units_f32, the split
 * qt_coll_start_units) and their exchange's cursor: see coll_int.h. */
int qt_coll_units_setup(const char *op, unsigned mask, float *const *unit, int q, int64_t blk,
                        float *tmp, int64_t tmp_elems, qt_grp *g, qt_coll_cursor *cur)
{
    int rc = qt_coll_group(op, mask, 0, g);
    if (rc) return rc;
    const int R = g->size;
    if (q < 1 || q > QT_COLL_MAX_UNITS || (int64_t)q * R > QT_COLL_MAX_ANY || !unit || blk < 0)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: %d units in a group of %d (at most %d "
                       "units a member and %d over the group), blk %lld", op, mask, q, R,
                       QT_COLL_MAX_UNITS, QT_COLL_MAX_ANY, (long long)blk);
    for (int u = 0; u < q; u++)
        if (!unit[u]) return qt_fail(QT_E_PLAN, "%s over mask 0x%x: unit %d missing", op, mask, u);
    if (blk == 0 || R == 1) return QT_OK;
    /* per message: up to c floats of each of the q units out, as many in */
    int64_t c = tmp_elems / (2 * (int64_t)q);
    if (c > QT_COMM_CHUNK_BYTES / 4 / q) c = QT_COMM_CHUNK_BYTES / 4 / q;
    if (!tmp || c < 1)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: %lld floats of scratch for %d units "
                       "(need >= %d)", op, mask, (long long)tmp_elems, q, 2 * q);
    qt_coll_cursor_units(cur, R, g->index, unit, q, blk, tmp, c);
    return QT_OK;
}

/* The units' exchange runs its cursor (coll_steps.h qt_coll_cursor_units): round k pairs
 * members whose indices add up to k (mod R), so each pair meets once, both sides in the same
 * round, and each sends the other its units of the other's block and receives the other's
 * units of its own into the same place, chunk by chunk (packed before it is overwritten).
 * Copies only. */

int qt_coll_reduce_units_f32(unsigned mask, float *const *unit, int q, int64_t blk, float *out,
                             float *tmp, int64_t tmp_elems)
{
    static const char op[] = "reduce_units";
    qt_grp g;
    qt_coll_cursor c;
    if (!out) return qt_fail(QT_E_PLAN, "%s over mask 0x%x: no output", op, mask);
    int rc = qt_coll_units_setup(op, mask, unit, q, blk, tmp, tmp_elems, &g, &c);
    if (rc || blk == 0) return rc;
    qt_coll_begin(op, mask, 0);
    if (g.size > 1) rc = qt_coll_run_cursor(&g, &c);
    if (rc == QT_OK) qt_coll_fold_units(unit, g.size, q, blk, g.index, out);
    return qt_coll_end(rc);
}

int qt_coll_exchange_units_f32(unsigned mask, float *const *unit, int q, int64_t blk,
                               float *tmp, int64_t tmp_elems)
{
    static const char op[] = "exchange_units";
    qt_grp g;
    qt_coll_cursor c;
    int rc = qt_coll_units_setup(op, mask, unit, q, blk, tmp, tmp_elems, &g, &c);
    if (rc || blk == 0 || g.size == 1) return rc;
    qt_coll_begin(op, mask, 0);
    return qt_coll_end(qt_coll_run_cursor(&g, &c));
}

/* ---- all-gather, broadcast -------------------------------------------------------------- */

/* The bits of group `mask`'s index that are slice digits (the top bits of each masked axis's
 * digit field when that axis has several slices, qt_mesh_coords); 0 on one slice. Power-of-
 * two axes only (the caller's case). */
int64_t qt_coll_slice_bits(unsigned mask)
{
    int64_t bits = 0;
    int shift = 0;
    for (int a = QT_MESH_COUNT - 1; a >= 0; a--) {
        if (!(mask & (1u << a))) continue;
        int lm = 0, ld = 0;
        while ((1 << lm) < qt_coll_s.mesh[a]) lm++;
        while ((1 << ld) < qt_coll_s.dcn[a]) ld++;
        for (int k = lm - ld; k < lm; k++) bits |= (int64_t)1 << (shift + k);
        shift += lm;
    }
    return bits;
}

int qt_coll_all_gather(unsigned mask, void *buf, int64_t blk_bytes)
{
    static const char op[] = "all_gather";
    qt_grp g;
    int rc = qt_coll_group(op, mask, 0, &g);
    if (rc) return rc;
    if (g.size == 1 || blk_bytes == 0) return QT_OK;
    if (!buf || blk_bytes < 0)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: bad buffer (%lld bytes per block)", op,
                       mask, (long long)blk_bytes);
    qt_coll_begin(op, mask, 0);
    qt_coll_cursor c;
    qt_coll_cursor_ag(&c, g.size, g.index, buf, blk_bytes,
                      qt_coll_pow2(g.size) ? qt_coll_slice_bits(mask) : 0);
    return qt_coll_end(qt_coll_run_cursor(&g, &c));
}

/* Binomial-tree broadcast of bytes at buf from index root inside an open collective. */
static int qt_coll_bcast_tree(const qt_grp *g, void *buf, int64_t bytes, int root)
{
    const int R = g->size, rel = (g->index - root + R) % R;
    int rc = QT_OK;
    for (int m = 1; m < R && rc == QT_OK; m <<= 1) {
        qt_coll_s.op_stage++;
        if (rel < m) {
            if (rel + m < R) rc = qt_coll_xfer(g, (rel + m + root) % R, buf, bytes, -1, NULL, 0);
        } else if (rel < 2 * m) {
            rc = qt_coll_xfer(g, -1, NULL, 0, (rel - m + root) % R, buf, bytes);
        }
    }
    return rc;
}

int qt_coll_broadcast(unsigned mask, void *buf, int64_t bytes, int root)
{
    static const char op[] = "broadcast";
    qt_grp g;
    int rc = qt_coll_group(op, mask, 0, &g);
    if (rc) return rc;
    if (root < 0 || root >= g.size)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: root %d outside the group of %d", op,
                       mask, root, g.size);
    if (g.size == 1 || bytes == 0) return QT_OK;
    if (!buf || bytes < 0)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: bad buffer (%lld bytes)", op, mask,
                       (long long)bytes);
    qt_coll_begin(op, mask, 0);
    return qt_coll_end(qt_coll_bcast_tree(&g, buf, bytes, root));
}

/* ---- exact integer reductions ----------------------------------------------------------- */

static void qt_coll_add_u64(uint64_t *acc, const uint64_t *in, int n)
{
    for (int i = 0; i < n; i++) acc[i] += in[i];
}

/* Combine v[0..n) over g with an associative, commutative `f`, inside an open collective:
 * recursive doubling for a power of two, else a binomial reduce to index 0 and a binomial
 * broadcast. Pieces of QT_COLL_U64_CHUNK values through qt_coll_s.u64. */
static int qt_coll_allreduce_u64(const qt_grp *g, uint64_t *v, int n, qt_coll_combine f)
{
    const int R = g->size, idx = g->index;
    int rc = QT_OK;
    for (int c0 = 0; c0 < n && rc == QT_OK; c0 += QT_COLL_U64_CHUNK) {
        const int cn = n - c0 < QT_COLL_U64_CHUNK ? n - c0 : QT_COLL_U64_CHUNK;
        const int64_t bytes = (int64_t)cn * 8;
        uint64_t *x = v + c0;
        qt_coll_s.op_stage = -1;
        if (qt_coll_pow2(R)) {
            for (int bit = 1; bit < R && rc == QT_OK; bit <<= 1) {
                qt_coll_s.op_stage++;
                rc = qt_coll_xfer(g, idx ^ bit, x, bytes, idx ^ bit, qt_coll_s.u64, bytes);
                if (rc == QT_OK) f(x, qt_coll_s.u64, cn);
            }
            continue;
        }
        for (int m = 1; m < R && rc == QT_OK; m <<= 1) {
            qt_coll_s.op_stage++;
            if (idx & m) {
                rc = qt_coll_xfer(g, idx - m, x, bytes, -1, NULL, 0);
                break;
            }
            if (idx + m < R) {
                rc = qt_coll_xfer(g, -1, NULL, 0, idx + m, qt_coll_s.u64, bytes);
                if (rc == QT_OK) f(x, qt_coll_s.u64, cn);
            }
        }
        if (rc == QT_OK) rc = qt_coll_bcast_tree(g, x, bytes, 0);
    }
    return rc;
}

/* An all-reduce of n uint64 lanes over the group `mask` with `merge` (the integer
 * reductions: exact, so any order gives the same values). */
static int qt_coll_reduce_u64(const char *op, unsigned mask, uint64_t *v, int n,
                              qt_coll_combine merge)
{
    qt_grp g;
    int rc = qt_coll_group(op, mask, 0, &g);
    if (rc) return rc;
    if (g.size == 1 || n == 0) return QT_OK;
    if (!v || n < 0)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: bad buffer (%d values)", op, mask, n);
    qt_coll_begin(op, mask, 0);
    return qt_coll_end(qt_coll_allreduce_u64(&g, v, n, merge));
}

int qt_coll_sum_u64(unsigned mask, uint64_t *v, int n)
{
    return qt_coll_reduce_u64("sum_u64", mask, v, n, qt_coll_add_u64);
}

int qt_coll_sum_i64(unsigned mask, int64_t *v, int n)
{
    /* int64_t and uint64_t may alias (C11 6.5p7); wrapping add is two's-complement add */
    return qt_coll_sum_u64(mask, (uint64_t *)v, n);
}

void qt_coll_merge_max_i64(int64_t *acc, const int64_t *in, int n)
{
    for (int i = 0; i < n; i++)
        if (in[i] > acc[i]) acc[i] = in[i];
}

/* The same on the integer reductions' uint64 lanes (signed and unsigned variants may alias,
 * C11 6.5p7). */
static void qt_coll_max_u64_signed(uint64_t *acc, const uint64_t *in, int n)
{
    qt_coll_merge_max_i64((int64_t *)acc, (const int64_t *)in, n);
}

int qt_coll_max_i64(unsigned mask, int64_t *v, int n)
{
    /* int64_t and uint64_t may alias (C11 6.5p7) */
    return qt_coll_reduce_u64("max_i64", mask, (uint64_t *)v, n, qt_coll_max_u64_signed);
}

/* ---- all-to-all ------------------------------------------------------------------------- */

int qt_coll_all_to_all_counts(unsigned mask, const int64_t *send_counts, int64_t *recv_counts)
{
    static const char op[] = "all_to_all_counts";
    qt_grp g;
    int rc = qt_coll_group(op, mask, 0, &g);
    if (rc) return rc;
    if (!send_counts || !recv_counts)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: NULL counts", op, mask);
    const int R = g.size, idx = g.index;
    recv_counts[idx] = send_counts[idx];
    if (R == 1) return QT_OK;
    qt_coll_begin(op, mask, 0);
    for (int k = 1; k < R && rc == QT_OK; k++) {
        const int dst = (idx + k) % R, src = (idx - k + R) % R;
        qt_coll_s.op_stage = k;
        rc = qt_coll_xfer(&g, dst, &send_counts[dst], 8, src, &recv_counts[src], 8);
    }
    return qt_coll_end(rc);
}

int qt_coll_a2av_setup(const char *op, unsigned mask, const void *send,
                       const int64_t *send_counts, const int64_t *send_offs, void *recv,
                       const int64_t *recv_counts, const int64_t *recv_offs,
                       int64_t elem_bytes, qt_grp *gp, qt_coll_cursor *c)
{
    qt_grp g;
    int rc = qt_coll_group(op, mask, 0, &g);
    if (rc) return rc;
    const int R = g.size, idx = g.index;
    if (!send_counts || !send_offs || !recv_counts || !recv_offs || elem_bytes <= 0)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: NULL counts/offsets or element size "
                       "%lld", op, mask, (long long)elem_bytes);
    for (int j = 0; j < R; j++)
        if (send_counts[j] < 0 || recv_counts[j] < 0 || send_offs[j] < 0 || recv_offs[j] < 0 ||
            (send_counts[j] && !send) || (recv_counts[j] && !recv))
            return qt_fail(QT_E_PLAN, "%s over mask 0x%x: block %d: send %lld at %lld, "
                           "receive %lld at %lld", op, mask, j, (long long)send_counts[j],
                           (long long)send_offs[j], (long long)recv_counts[j],
                           (long long)recv_offs[j]);
    if (send_counts[idx] != recv_counts[idx])
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: my own block: send %lld, receive %lld",
                       op, mask, (long long)send_counts[idx], (long long)recv_counts[idx]);
    qt_coll_cursor_a2av(c, R, idx, send, send_counts, send_offs, recv, recv_counts, recv_offs,
                        elem_bytes);
    *gp = g;
    return QT_OK;
}

int qt_coll_all_to_all_v(unsigned mask, const void *send, const int64_t *send_counts,
                         const int64_t *send_offs, void *recv, const int64_t *recv_counts,
                         const int64_t *recv_offs, int64_t elem_bytes)
{
    static const char op[] = "all_to_all_v";
    qt_grp g;
    qt_coll_cursor c;
    int rc = qt_coll_a2av_setup(op, mask, send, send_counts, send_offs, recv, recv_counts,
                                recv_offs, elem_bytes, &g, &c);
    if (rc || g.size == 1) return rc;
    qt_coll_begin(op, mask, 0);
    return qt_coll_end(qt_coll_run_cursor(&g, &c));
}

int qt_coll_all_to_all(unsigned mask, const void *send, void *recv, int64_t blk_bytes)
{
    static const char op[] = "all_to_all";
    qt_grp g;
    int rc = qt_coll_group(op, mask, 0, &g);
    if (rc) return rc;
    const int R = g.size, idx = g.index;
    if (blk_bytes < 0 || (blk_bytes && (!send || !recv)))
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: blocks of %lld bytes, send %s, receive %s",
                       op, mask, (long long)blk_bytes, send ? "set" : "NULL",
                       recv ? "set" : "NULL");
    const uintptr_t s0 = (uintptr_t)send, r0 = (uintptr_t)recv, n = (uintptr_t)(R * blk_bytes);
    if (blk_bytes && s0 < r0 + n && r0 < s0 + n)
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: send and receive buffers of %d x %lld "
                       "bytes overlap", op, mask, R, (long long)blk_bytes);
    const char *s = send;
    char *r = recv;
    if (blk_bytes) memcpy(r + idx * blk_bytes, s + idx * blk_bytes, (size_t)blk_bytes);
    if (R == 1) return QT_OK;
    qt_coll_begin(op, mask, 0);
    for (int k = 1; k < R && rc == QT_OK; k++) {
        const int dst = (idx + k) % R, src = (idx - k + R) % R;
        qt_coll_s.op_stage = k;
        rc = qt_coll_xfer(&g, dst, s + dst * blk_bytes, blk_bytes, src, r + src * blk_bytes,
                          blk_bytes);
    }
    return qt_coll_end(rc);
}

int qt_coll_pass(unsigned mask, int dst, const void *send, int64_t sbytes, int src, void *recv,
                 int64_t rbytes)
{
    static const char op[] = "pass";
    qt_grp g;
    int rc = qt_coll_group(op, mask, 0, &g);
    if (rc) return rc;
    if (dst >= g.size || src >= g.size || (dst >= 0 && (!send || sbytes < 0)) ||
        (src >= 0 && (!recv || rbytes < 0)))
        return qt_fail(QT_E_PLAN, "%s over mask 0x%x: to member %d (%lld bytes), from member "
                       "%d (%lld bytes) in a group of %d", op, mask, dst, (long long)sbytes, src,
                       (long long)rbytes, g.size);
    if (dst < 0 && src < 0) return QT_OK;
    qt_coll_begin(op, mask, 0);
    rc = qt_coll_xfer(&g, dst, send, dst >= 0 ? sbytes : 0, src, recv, src >= 0 ? rbytes : 0);
    return qt_coll_end(rc);
}

/* ---- plan check, raw exchange ----------------------------------------------------------- */

/* Lanes: [0] lowest hash, [1] lowest rank holding it, [2] highest hash, [3] lowest rank
 * holding it, [4] smallest world size, [5] largest. Associative and commutative. */
static void qt_coll_check_combine(uint64_t *acc, const uint64_t *in, int n)
{
    (void)n;
    if (in[0] < acc[0] || (in[0] == acc[0] && in[1] < acc[1])) { acc[0] = in[0]; acc[1] = in[1]; }
    if (in[2] > acc[2] || (in[2] == acc[2] && in[3] < acc[3])) { acc[2] = in[2]; acc[3] = in[3]; }
    if (in[4] < acc[4]) acc[4] = in[4];
    if (in[5] > acc[5]) acc[5] = in[5];
}

int qt_comm_check_same(uint64_t plan_hash)
{
    static const char op[] = "plan check";
    qt_grp g;
    int rc = qt_coll_group(op, 0, 1, &g);
    if (rc) return rc;
    if (g.size == 1) return QT_OK;
    qt_err_set_rank(g.index, g.size);
    uint64_t v[QT_COLL_CHECK_LANES] = {plan_hash, (uint64_t)g.index, plan_hash,
                                       (uint64_t)g.index, (uint64_t)g.size, (uint64_t)g.size};
    qt_coll_begin(op, 0, 1);
    rc = qt_coll_end(qt_coll_allreduce_u64(&g, v, QT_COLL_CHECK_LANES, qt_coll_check_combine));
    if (rc) return rc;
    if (v[4] != v[5])
        return qt_fail(QT_E_MISMATCH, "plan check: ranks see world sizes from %llu to %llu "
                       "(this rank: %d)", (unsigned long long)v[4], (unsigned long long)v[5],
                       g.size);
    if (v[0] != v[2]) {
        const int other_lo = plan_hash != v[0];
        return qt_fail(QT_E_MISMATCH, "plan check: this rank runs plan 0x%016llx but rank "
                       "%llu runs plan 0x%016llx (world of %d ranks)",
                       (unsigned long long)plan_hash,
                       (unsigned long long)(other_lo ? v[1] : v[3]),
                       (unsigned long long)(other_lo ? v[0] : v[2]), g.size);
    }
    return QT_OK;
}

int qt_coll_warm(int peer, const void *send, void *recv, int64_t big)
{
    static const char op[] = "warm-up";
    qt_grp g;
    int rc = qt_coll_group(op, 0, 1, &g);
    if (rc) return rc;
    qt_coll_begin(op, 0, 1);
    int silent = -1;
    rc = qt_comm_warm(peer, send, recv, big, qt_coll_s.t_deadline, &silent);
    if (rc == QT_E_COMM && silent >= 0) rc = qt_coll_silent(silent);
    return qt_coll_end(rc);
}

/* Lanes of qt_coll_agree: 0 = ok; else (world size - rank) << 16 | -status, so the
 * maximum names the lowest failing rank and carries its code. */
int qt_coll_agree(const char *what, int status)
{
    static const char op[] = "error flag";
    qt_grp g;
    int rc = qt_coll_group(op, 0, 1, &g);
    if (rc) return rc;
    if (g.size == 1) return status;
    const int64_t mine = status < 0 ? ((int64_t)(g.size - g.index) << 16) | (-status & 0xffff) : 0;
    int64_t v = mine;
    const char *was = qt_coll_s.what;
    char keep[sizeof qt_coll_s.what];
    const long long keep_step = qt_coll_s.step;
    snprintf(keep, sizeof keep, "%s", was);
    qt_comm_set_context(what, keep_step);
    qt_coll_begin(op, 0, 1);
    /* int64_t and uint64_t may alias (C11 6.5p7) */
    rc = qt_coll_end(qt_coll_allreduce_u64(&g, (uint64_t *)&v, 1, qt_coll_max_u64_signed));
    qt_comm_set_context(keep, keep_step);
    if (rc) return rc;
    if (v == 0) return QT_OK;
    if (status < 0) return status;
    return qt_fail(QT_E_PEER, "%s: stopping: rank %d/%d failed (its message says why)",
                   what, g.size - (int)(v >> 16), g.size);
}

int qt_comm_exchange(int peer, const void *send, int64_t sbytes, void *recv, int64_t rbytes)
{
    static const char op[] = "exchange";
    qt_grp g;
    int rc = qt_coll_group(op, 0, 1, &g);
    if (rc) return rc;
    if (peer < 0 || peer >= g.size || sbytes < 0 || rbytes < 0 ||
        (peer == g.index && sbytes != rbytes))
        return qt_fail(QT_E_PLAN, "%s: peer %d of %d ranks, %lld bytes out, %lld in", op, peer,
                       g.size, (long long)sbytes, (long long)rbytes);
    if (peer == g.index) {
        if (sbytes) memmove(recv, send, (size_t)sbytes);
        return QT_OK;
    }
    qt_coll_begin(op, 0, 1);
    return qt_coll_end(qt_coll_xfer(&g, peer, send, sbytes, peer, recv, rbytes));
}
