/* ops_ep.c - op wrappers for expert parallelism: MOE_DISPATCH_FWD/BWD, MOE_RETURN_FWD/BWD
 * (qt_ops.def). Routed rows travel between the home rank of their token and the rank of the
 * expert group that holds their expert, with all-to-all exchanges (firmware/comm/qt_coll.h)
 * whose counts derive from idx (home side) and seg (host side), so only the forward
 * dispatch exchanges counts. Rows are copied, never combined, so the arithmetic is the one
 * of the one-rank kernels (the bits do not depend on the expert degree).
 * MOE_RETURN_START / _WAIT and MOE_DISPATCH_BWD_START / _WAIT (collective_overlap: all) are
 * the two host -> home exchanges split around compute: the start op fills the count tables
 * and starts the split all-to-all-v (QT_EP_SPLIT_ID), the wait op completes it and unpacks
 * as the blocking op; the same transfers and the same unpack, so the same bits.
 * MOE_DISPATCH_FWD_START / _WAIT and MOE_RETURN_BWD_START / _WAIT split the two home -> host
 * exchanges the same way: the start op runs the blocking op up to the rows' all-to-all-v
 * (the dispatch's count and row-id exchanges stay blocking in it) and starts that one; the
 * wait op completes it (the host rows need no unpack).
 * State: the count tables of the current exchange, one static struct (so one exchange in
 * flight and no other exchange op between a start and its wait: qt_validate_ep_splits); a
 * failed exchange stores its code in *ctx->status and the interpreter stops the step.
 */
#include "qt_op_fns.h"
#include "qt_ops_bf16.h"
#include "../parallel/ep_pack.h"
#include "../comm/qt_coll.h"
#include "base/qt_err.h"

/* Largest expert group x sequences per microbatch (configgen checks it). */
#define QT_EP_MAX_CNT 65536

static struct {
    int64_t cnt[QT_EP_MAX_CNT];    /* home: rows of sequence s bound for member j: [j*b + s] */
    int64_t rcnt[QT_EP_MAX_CNT];   /* host: rows of member j's sequence s */
    int64_t fix_n[QT_EP_MAX_MEMBERS], fix_off[QT_EP_MAX_MEMBERS];
    int64_t home_n[QT_EP_MAX_MEMBERS], home_off[QT_EP_MAX_MEMBERS];  /* rows to/from member j */
    int64_t host_n[QT_EP_MAX_MEMBERS], host_off[QT_EP_MAX_MEMBERS];  /* rows of member j held here */
} qt_ep;

typedef struct qt_ep_dims {
    int64_t T, k, d, E, El, b, S, M, rmax;
    unsigned mask;
} qt_ep_dims;

/* The four exchange kinds share MOE_DISPATCH_FWD's attribute layout (qt_ops.def). */
#define QT_EP_A(op, name) QT_A(op, MOE_DISPATCH_FWD, name)

static int qt_ep_dims_of(const qt_op *op, qt_ep_dims *D)
{
    D->T = QT_EP_A(op, T), D->k = QT_EP_A(op, k), D->d = QT_EP_A(op, d);
    D->E = QT_EP_A(op, E), D->El = QT_EP_A(op, El), D->b = QT_EP_A(op, b);
    D->S = QT_EP_A(op, S), D->mask = (unsigned)QT_EP_A(op, mask), D->rmax = QT_EP_A(op, Rmax);
    D->M = qt_comm_group_size(D->mask);
    if (D->M < 1 || D->M > QT_EP_MAX_MEMBERS || D->El < 1 || D->M * D->El != D->E ||
        D->M * D->b > QT_EP_MAX_CNT)
        return qt_fail(QT_E_PLAN, "expert exchange: group of %lld rank%s, %lld experts of %lld "
                       "per rank, %lld sequences: outside the firmware's limits", (long long)D->M,
                       D->M == 1 ? "" : "s", (long long)D->E, (long long)D->El, (long long)D->b);
    return QT_OK;
}

/* Home side: rows per member (from idx) and their offsets in a packed buffer. */
static void qt_ep_home_counts(const int32_t *idx, const qt_ep_dims *D)
{
    qt_moe_count(qt_ep.cnt, idx, D->b, D->S, D->k, D->El, D->E, D->M);
    int64_t off = 0;
    for (int64_t j = 0; j < D->M; j++) {
        int64_t n = 0;
        for (int64_t s = 0; s < D->b; s++) n += qt_ep.cnt[j * D->b + s];
        qt_ep.home_n[j] = n;
        qt_ep.home_off[j] = off;
        off += n;
    }
}

/* Host side: rows of each member's sequences (from seg). */
static void qt_ep_host_counts(const int32_t *seg, const qt_ep_dims *D)
{
    for (int64_t j = 0; j < D->M; j++) {
        qt_ep.host_off[j] = seg[j * D->b];
        qt_ep.host_n[j] = seg[(j + 1) * D->b] - seg[j * D->b];
    }
}

/* Bytes per element of tensor id (rows move bit for bit: fp32 or bf16). */
static int64_t qt_ep_eb(const qt_ctx *ctx, int32_t id)
{
    return qt_dtype_bytes(ctx->plan->tensors[id].dtype);
}

static void qt_ep_status(const qt_ctx *ctx, int rc)
{
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
}

/* The split exchange's id (< 0: the plan's collectives own the ids >= 0). */
#define QT_EP_SPLIT_ID (-2)

/* How an exchange op runs: whole, started, or waited for (and unpacked). */
enum { QT_EP_WHOLE, QT_EP_START, QT_EP_WAIT };

/* Home -> host rows of the op's slots (send: the packed home rows, T*k*d floats of scratch;
 * recv: the host rows t0), over the count tables the caller filled: whole (blocking) or
 * started (split, QT_EP_SPLIT_ID). 0 or QT_E_*. */
static int qt_ep_send_rows(const qt_ep_dims *D, const void *send, void *recv, int64_t rb,
                           int split)
{
    if (split)
        return qt_coll_start_a2av(QT_EP_SPLIT_ID, D->mask, send, qt_ep.home_n, qt_ep.home_off,
                                  recv, qt_ep.host_n, qt_ep.host_off, rb);
    return qt_coll_all_to_all_v(D->mask, send, qt_ep.home_n, qt_ep.home_off, recv, qt_ep.host_n,
                                qt_ep.host_off, rb);
}

/* The wait op of a split exchange: completes it (the count tables are still the start
 * op's: nothing between touches them). 0 or QT_E_*. */
static int qt_ep_wait(const qt_op *op, qt_ep_dims *D)
{
    int rc = qt_ep_dims_of(op, D);
    return rc ? rc : qt_coll_wait_a2av(QT_EP_SPLIT_ID, D->mask);
}

/* MOE_DISPATCH_FWD whole or started: the count exchange, seg, the pack, the row ids (the
 * blocking op sends them after the rows; other buffers, so the order changes no byte), then
 * the rows (split: only started). */
static void qt_ep_dispatch(const qt_op *op, const qt_ctx *ctx, int split)
{
    qt_ep_dims D;
    int rc = qt_ep_dims_of(op, &D);
    const int32_t *idx = qt_i32(ctx, QT_T(op, MOE_DISPATCH_FWD, idx));
    float *send = qt_f32(ctx, QT_T(op, MOE_DISPATCH_FWD, scratch));
    int32_t *ids = (int32_t *)(void *)(send + D.T * D.k * D.d);
    int32_t *er = qt_i32(ctx, QT_T(op, MOE_DISPATCH_FWD, er)),
            *seg = qt_i32(ctx, QT_T(op, MOE_DISPATCH_FWD, seg));
    if (!rc) {
        qt_ep_home_counts(idx, &D);
        for (int64_t j = 0; j < D.M; j++) {
            qt_ep.fix_n[j] = D.b;
            qt_ep.fix_off[j] = j * D.b;
        }
        /* every member learns how many rows of each of our sequences it will hold */
        rc = qt_coll_all_to_all_v(D.mask, qt_ep.cnt, qt_ep.fix_n, qt_ep.fix_off, qt_ep.rcnt,
                                  qt_ep.fix_n, qt_ep.fix_off, (int64_t)sizeof(int64_t));
    }
    if (!rc) {
        seg[0] = 0;
        for (int64_t i = 0; i < D.M * D.b; i++) seg[i + 1] = (int32_t)(seg[i] + qt_ep.rcnt[i]);
        if (seg[D.M * D.b] > D.rmax)
            rc = qt_fail(QT_E_PLAN, "expert exchange: %d rows arrive, the plan holds %lld",
                         seg[D.M * D.b], (long long)D.rmax);
    }
    const int32_t x = QT_T(op, MOE_DISPATCH_FWD, x);
    const int64_t rb = D.d * qt_ep_eb(ctx, x);
    if (!rc) {
        qt_ep_host_counts(seg, &D);
        qt_moe_pack(send, ids, qt_f32(ctx, x), 1, idx, D.T, D.k, rb, D.El, D.E, qt_ep.home_off);
        if (split)
            rc = qt_coll_all_to_all_v(D.mask, ids, qt_ep.home_n, qt_ep.home_off, er,
                                      qt_ep.host_n, qt_ep.host_off, (int64_t)sizeof(int32_t));
    }
    if (!rc)
        rc = qt_ep_send_rows(&D, send, qt_f32(ctx, QT_T(op, MOE_DISPATCH_FWD, xr)), rb, split);
    if (!rc && !split)
        rc = qt_coll_all_to_all_v(D.mask, ids, qt_ep.home_n, qt_ep.home_off, er, qt_ep.host_n,
                                  qt_ep.host_off, (int64_t)sizeof(int32_t));
    if (!rc)
        for (int64_t r = seg[D.M * D.b]; r < D.rmax; r++) er[r] = -1;
    qt_ep_status(ctx, rc);
}

void qt_op_moe_dispatch_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_dispatch(op, ctx, 0);
}

void qt_op_moe_dispatch_fwd_start(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_dispatch(op, ctx, 1);
}

/* The wait op of a home -> host exchange: completion only (the host rows need no unpack). */
static void qt_ep_wait_op(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_dims D;
    qt_ep_status(ctx, qt_ep_wait(op, &D));
}

void qt_op_moe_dispatch_fwd_wait(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_wait_op(op, ctx);
}

/* The split kinds name the slots and attributes of the blocking kind they split. */
#define QT_EP_SAME(a, b, s) ((int)QT_T_##a##_##s == (int)QT_T_##b##_##s)
_Static_assert(QT_EP_SAME(MOE_RETURN_START, MOE_RETURN_FWD, y) &&
               QT_EP_SAME(MOE_RETURN_START, MOE_RETURN_FWD, scratch) &&
               QT_EP_SAME(MOE_RETURN_WAIT, MOE_RETURN_FWD, y) &&
               QT_EP_SAME(MOE_RETURN_WAIT, MOE_RETURN_FWD, scratch) &&
               QT_EP_SAME(MOE_DISPATCH_BWD, MOE_RETURN_FWD, idx) &&
               QT_EP_SAME(MOE_DISPATCH_BWD_START, MOE_DISPATCH_BWD, dx) &&
               QT_EP_SAME(MOE_DISPATCH_BWD_START, MOE_DISPATCH_BWD, scratch) &&
               QT_EP_SAME(MOE_DISPATCH_BWD_WAIT, MOE_DISPATCH_BWD, dx) &&
               QT_EP_SAME(MOE_DISPATCH_BWD_WAIT, MOE_DISPATCH_BWD, scratch) &&
               QT_EP_SAME(MOE_DISPATCH_FWD_START, MOE_DISPATCH_FWD, scratch) &&
               QT_EP_SAME(MOE_DISPATCH_FWD_WAIT, MOE_DISPATCH_FWD, scratch) &&
               QT_EP_SAME(MOE_RETURN_BWD_START, MOE_RETURN_BWD, scratch) &&
               QT_EP_SAME(MOE_RETURN_BWD_WAIT, MOE_RETURN_BWD, scratch),
               "ops_ep.c: a split expert exchange's slots differ from its blocking kind's");

/* Host -> home: every host sends back the rows it holds for each member (t1 of the op,
 * [Rmax,d]); the home receives its rows member by member into t4 (scratch), in the order it
 * sent them. Fills the count tables; split: only starts the exchange (QT_EP_SPLIT_ID).
 * 0 or QT_E_*. */
static int qt_ep_bring_home(const qt_op *op, const qt_ctx *ctx, qt_ep_dims *D, int split)
{
    int rc = qt_ep_dims_of(op, D);
    if (rc) return rc;
    /* MOE_RETURN_FWD and MOE_DISPATCH_BWD (and their split kinds) share this slot layout
     * (host rows, idx, seg, scratch): named by MOE_RETURN_FWD's row */
    qt_ep_home_counts(qt_i32(ctx, QT_T(op, MOE_RETURN_FWD, idx)), D);
    qt_ep_host_counts(qt_i32(ctx, QT_T(op, MOE_RETURN_FWD, seg)), D);
    const int32_t yr = QT_T(op, MOE_RETURN_FWD, yr);
    const int64_t rb = D->d * qt_ep_eb(ctx, yr);
    float *home = qt_f32(ctx, QT_T(op, MOE_RETURN_FWD, scratch));
    if (split)
        return qt_coll_start_a2av(QT_EP_SPLIT_ID, D->mask, qt_f32(ctx, yr), qt_ep.host_n,
                                  qt_ep.host_off, home, qt_ep.home_n, qt_ep.home_off, rb);
    return qt_coll_all_to_all_v(D->mask, qt_f32(ctx, yr), qt_ep.host_n, qt_ep.host_off, home,
                                qt_ep.home_n, qt_ep.home_off, rb);
}

/* The home rows in t4 (scratch) placed into y[T*k,d] (t0), as they were sent. */
static void qt_ep_unpack_y(const qt_op *op, const qt_ctx *ctx, const qt_ep_dims *D)
{
    qt_moe_unpack(qt_f32(ctx, QT_T(op, MOE_RETURN_FWD, y)),
                  qt_f32(ctx, QT_T(op, MOE_RETURN_FWD, scratch)),
                  qt_i32(ctx, QT_T(op, MOE_RETURN_FWD, idx)), D->T, D->k,
                  D->d * qt_ep_eb(ctx, QT_T(op, MOE_RETURN_FWD, y)), D->El, D->E,
                  qt_ep.home_off);
}

/* How a host -> home op runs its exchange: QT_EP_WHOLE, _START or _WAIT (and unpacks). */
typedef void (*qt_ep_unpack_fn)(const qt_op *op, const qt_ctx *ctx, const qt_ep_dims *D);

static void qt_ep_home_op(const qt_op *op, const qt_ctx *ctx, int how, qt_ep_unpack_fn unpack)
{
    qt_ep_dims D;
    const int rc = how == QT_EP_WAIT ? qt_ep_wait(op, &D)
                                     : qt_ep_bring_home(op, ctx, &D, how == QT_EP_START);
    if (!rc && how != QT_EP_START) unpack(op, ctx, &D);
    qt_ep_status(ctx, rc);
}

void qt_op_moe_return_fwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_home_op(op, ctx, QT_EP_WHOLE, qt_ep_unpack_y);
}

void qt_op_moe_return_start(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_home_op(op, ctx, QT_EP_START, qt_ep_unpack_y);
}

void qt_op_moe_return_wait(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_home_op(op, ctx, QT_EP_WAIT, qt_ep_unpack_y);
}

/* MOE_RETURN_BWD whole or started: the count tables, dy packed, sent to the hosts' dyr. */
static void qt_ep_return_bwd(const qt_op *op, const qt_ctx *ctx, int split)
{
    qt_ep_dims D;
    int rc = qt_ep_dims_of(op, &D);
    const int32_t *idx = qt_i32(ctx, QT_T(op, MOE_RETURN_BWD, idx));
    float *send = qt_f32(ctx, QT_T(op, MOE_RETURN_BWD, scratch));
    if (!rc) {
        qt_ep_home_counts(idx, &D);
        qt_ep_host_counts(qt_i32(ctx, QT_T(op, MOE_RETURN_BWD, seg)), &D);
        const int32_t dy = QT_T(op, MOE_RETURN_BWD, dy);
        const int64_t rb = D.d * qt_ep_eb(ctx, dy);
        qt_moe_pack(send, 0, qt_f32(ctx, dy), 0, idx, D.T, D.k, rb, D.El, D.E, qt_ep.home_off);
        rc = qt_ep_send_rows(&D, send, qt_f32(ctx, QT_T(op, MOE_RETURN_BWD, dyr)), rb, split);
    }
    qt_ep_status(ctx, rc);
}

void qt_op_moe_return_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_return_bwd(op, ctx, 0);
}

void qt_op_moe_return_bwd_start(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_return_bwd(op, ctx, 1);
}

void qt_op_moe_return_bwd_wait(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_wait_op(op, ctx);
}

/* The home rows' gradients in t4 (scratch) added into dx[T,d] (t0), each token's slots in
 * increasing slot order. */
static void qt_ep_unpack_dx(const qt_op *op, const qt_ctx *ctx, const qt_ep_dims *D)
{
    /* the host's row gradients are fp32 (a bf16 plan's too): a bf16 dx is widened, gets
     * its tokens' slots added in fp32 and is rounded once */
    const int32_t dxid = QT_T(op, MOE_DISPATCH_BWD, dx);
    float *dx = qt_op_widen_b16(ctx, dxid, qt_op_bf16_stage(ctx), D->T * D->d);
    qt_moe_unpack_tokens_acc(dx, qt_f32(ctx, QT_T(op, MOE_DISPATCH_BWD, scratch)),
                             qt_i32(ctx, QT_T(op, MOE_DISPATCH_BWD, idx)), D->T, D->k, D->d,
                             D->El, D->E, qt_ep.home_off);
    qt_op_store_b16(ctx, dxid, dx, D->T * D->d);
}

void qt_op_moe_dispatch_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_home_op(op, ctx, QT_EP_WHOLE, qt_ep_unpack_dx);
}

void qt_op_moe_dispatch_bwd_start(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_home_op(op, ctx, QT_EP_START, qt_ep_unpack_dx);
}

void qt_op_moe_dispatch_bwd_wait(const qt_op *op, const qt_ctx *ctx)
{
    qt_ep_home_op(op, ctx, QT_EP_WAIT, qt_ep_unpack_dx);
}
