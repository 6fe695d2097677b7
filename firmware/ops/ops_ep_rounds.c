/* ops_ep_rounds.c - the expert dispatch in rounds: MOE_ROUNDS_FWD, MOE_ROUNDS_BWD and
 * MOE_ROUNDS_WGRAD (qt_ops.def), and the round exchanges they share (qt_ep_rounds.h).
 *
 * Each op exchanges the group's row counts first (an all-gather of M*M*b int64), packs its
 * home rows once as MOE_DISPATCH_FWD does (member slices, (t, slot) order), then walks the
 * rounds of parallel/ep_rounds.h: per round the host's rows arrive in the whole dispatch's
 * order (leaf after leaf), run through the same expert FFN kernels (k = 1, local expert
 * ids, T = R rows with id -1 past the round's rows, which the kernels skip) and, forward
 * and backward, go back to the place their home packed them. After the last round the home
 * places them as MOE_RETURN_FWD / MOE_DISPATCH_BWD do (the slot order of the token sums).
 * So every row and every leaf is computed from the same inputs in the same order as the
 * whole dispatch: the same bits, with host buffers of R rows.
 * bf16 plans (QT_OPP_BF16, native): x, dy and y rows move as bf16 (2 bytes an element, bit
 * for bit, as MOE_DISPATCH_FWD / MOE_RETURN_* move them), the host runs the bf16 expert FFN
 * kernels (bf16_expert_ffn.h: rows never depend on other rows; d(gu) recomputed, the same
 * bits as the saved one), y rows are rounded to bf16 once on the host (as EXPERT_FFN_FWD
 * stores ep_y) and the data gradient's rows go home fp32 and are added to the widened dx,
 * rounded once (as MOE_DISPATCH_BWD): the whole dispatch's bits in bf16. The round buffers
 * are fp32 scratch (R x d or R x 2f floats); bf16 rows use their first half, and the FWD's
 * rounded y rows the second half of xr's.
 * Tensor parallelism (a8 tmask): a host's tensor ranks hold the same rows (the expert group
 * runs along the expert and context axes), so they walk the same rounds; each round's y and
 * data-gradient rows are partial sums over the rank's share of f and are summed across the
 * tensor group (qt_op_sum_across, the whole dispatch's ALL_REDUCE) before they go home, the
 * weight gradient is per rank's slice as before.
 * State: the current round (one static record; ops run one at a time) and, for the WGRAD,
 * the round that its leaf calls are in. A failed exchange stores its code in *ctx->status.
 */
#include <string.h>
#include "qt_op_fns.h"
#include "qt_ep_rounds.h"
#include "../parallel/ep_rounds.h"
#include "../kernels/expert_ffn.h"
#include "../kernels/bf16_expert_ffn.h"
#include "qt_ops_bf16.h"
#include "../comm/qt_coll.h"
#include "base/qt_err.h"

/* Largest M x b (leaves of one op; configgen checks it, as ops_ep.c's QT_EP_MAX_CNT). */
#define QT_ER_MAX_LEAVES 65536

int qt_ep_rounds_counts(unsigned mask, const int32_t *idx, int64_t T, int64_t k, int64_t E,
                        int64_t El, int64_t b, int64_t *G, qt_ep_round *rd)
{
    const int64_t M = qt_comm_group_size(mask), me = qt_comm_group_index(mask);
    int64_t *mine = G + me * M * b;
    qt_moe_count(mine, idx, b, T / b, k, El, E, M);
    int64_t off = 0;
    for (int64_t j = 0; j < M; j++) {
        rd->home_off[j] = off;
        for (int64_t s = 0; s < b; s++) off += mine[j * b + s];
    }
    rd->L0 = rd->L1 = rd->rows = 0;
    return qt_coll_all_gather(mask, G, M * b * (int64_t)sizeof(int64_t));
}

int qt_ep_rounds_next(unsigned mask, const int64_t *G, int64_t b, int64_t R, qt_ep_round *rd,
                      int64_t *seg)
{
    const int64_t M = qt_comm_group_size(mask), me = qt_comm_group_index(mask);
    if (rd->L1 >= M * b) return 0;
    int64_t host = 0, rows = 0;
    const int64_t L0 = rd->L1, L1 = qt_ep_round_end(G, M, b, L0, R, &host, &rows);
    if (L1 < 0)
        return qt_fail(QT_E_PLAN, "expert dispatch in rounds: leaf %lld (member %lld, block "
                       "%lld) brings %lld rows to member %lld, a round holds %lld",
                       (long long)L0, (long long)(L0 / b), (long long)(L0 % b), (long long)rows,
                       (long long)host, (long long)R);
    rd->L0 = L0;
    rd->L1 = L1;
    rd->rows = qt_ep_round_tables(G, M, b, me, L0, L1, rd->home_off, rd->scnt, rd->soff,
                                  rd->rcnt, rd->roff, seg);
    return 1;
}

int qt_ep_round_send(unsigned mask, const qt_ep_round *rd, const void *home, void *host,
                     int64_t eb)
{
    return qt_coll_all_to_all_v(mask, home, rd->scnt, rd->soff, host, rd->rcnt, rd->roff, eb);
}

int qt_ep_round_back(unsigned mask, const qt_ep_round *rd, const void *host, void *home,
                     int64_t eb)
{
    return qt_coll_all_to_all_v(mask, host, rd->rcnt, rd->roff, home, rd->scnt, rd->soff, eb);
}

/* The tensors of a MOE_ROUNDS_* op by role (QT_NONE: the kind has none; the BWD's dxr
 * takes the forward's output yr; out: the FWD's y, the BWD's dx). */
typedef struct qt_er_slots {
    int32_t idx, x, dy, w_gu, w_down, xr, dyr, yr, gu, scratch, home, out;
} qt_er_slots;

/* A MOE_ROUNDS_* op's dimensions (the three kinds share a0..a7: QT_ER_A), its tensors and
 * its home scratch's parts (ep_rounds.h QT_EP_ROUNDS_HOME_FLOATS). */
typedef struct qt_er_dims {
    int64_t T, k, d, f, E, El, M, b, R, nb;
    int64_t eb; /* bytes of an x, dy or y element: 4, or 2 in a bf16 plan (b16) */
    int b16;
    unsigned tmask; /* FWD / BWD: the tensor group the round's host rows are summed over */
    unsigned mask;
    const int32_t *idx;
    const float *x, *dy, *wg, *wd;
    float *xr, *dyr, *yr, *gu;
    int64_t *G;
    float *xs, *dys, *ret, *fscr;
    int32_t *ids, *er;
    int64_t fscr_n;
} qt_er_dims;

#define QT_ER_A(op, name) QT_A(op, MOE_ROUNDS_FWD, name)
#define QT_ER_SAME(e, a) ((int)QT_A_##e##_##a == (int)QT_A_MOE_ROUNDS_FWD_##a)
_Static_assert(QT_ER_SAME(MOE_ROUNDS_BWD, T) && QT_ER_SAME(MOE_ROUNDS_BWD, k) &&
                   QT_ER_SAME(MOE_ROUNDS_BWD, E) && QT_ER_SAME(MOE_ROUNDS_BWD, El) &&
                   QT_ER_SAME(MOE_ROUNDS_BWD, mask) && QT_ER_SAME(MOE_ROUNDS_BWD, R) &&
                   QT_ER_SAME(MOE_ROUNDS_BWD, nb) && QT_ER_SAME(MOE_ROUNDS_BWD, leaves) &&
                   QT_ER_SAME(MOE_ROUNDS_BWD, tmask) &&
                   QT_ER_SAME(MOE_ROUNDS_WGRAD, T) && QT_ER_SAME(MOE_ROUNDS_WGRAD, k) &&
                   QT_ER_SAME(MOE_ROUNDS_WGRAD, E) && QT_ER_SAME(MOE_ROUNDS_WGRAD, El) &&
                   QT_ER_SAME(MOE_ROUNDS_WGRAD, mask) && QT_ER_SAME(MOE_ROUNDS_WGRAD, R) &&
                   QT_ER_SAME(MOE_ROUNDS_WGRAD, nb) &&
                   QT_A_MOE_ROUNDS_FWD_leaves == QT_A_WGRAD_SEQS,
               "ops_ep_rounds.c: the MOE_ROUNDS kinds' attributes differ");

static struct {
    qt_ep_round rd;
    int64_t seg[QT_ER_MAX_LEAVES + 1]; /* the current round's leaves' first host rows */
} qt_er;

static float *qt_er_f32(const qt_ctx *ctx, int32_t id)
{
    return id == QT_NONE ? NULL : qt_f32(ctx, id);
}

/* Resolves op's dimensions and tensors (sl) into D. 0 or QT_E_PLAN (with a message). */
static int qt_er_open(const qt_op *op, const qt_ctx *ctx, const qt_er_slots *sl, qt_er_dims *D)
{
    const qt_plan *p = ctx->plan;
    const int ndy = sl->dy != QT_NONE;
    D->T = QT_ER_A(op, T), D->k = QT_ER_A(op, k), D->E = QT_ER_A(op, E);
    D->El = QT_ER_A(op, El), D->mask = (unsigned)QT_ER_A(op, mask), D->R = QT_ER_A(op, R);
    D->nb = QT_ER_A(op, nb);
    const int64_t leaves = op->a[QT_A_WGRAD_SEQS];
    D->M = qt_comm_group_size(D->mask);
    D->b = D->M > 0 ? leaves / D->M : 0;
    D->d = D->R > 0 ? p->tensors[sl->xr].numel / D->R : 0;
    D->f = D->R > 0 ? p->tensors[sl->gu].numel / (2 * D->R) : 0;
    D->b16 = p->dtype == QT_BF16;
    /* a8 is the WGRAD's first parameter: only the RUN kinds have a tensor group */
    D->tmask = op->kind == QT_OP_MOE_ROUNDS_WGRAD ? 0u : (unsigned)QT_ER_A(op, tmask);
    D->eb = D->b16 ? 2 : 4;
    /* the rows a bf16 plan moves are bf16; the round buffers fp32 scratch */
    int dt_ok = p->dtype == QT_F32 || D->b16;
    const int32_t rows16[] = {sl->x, sl->dy, sl->out}, bufs[] = {sl->xr, sl->dyr, sl->yr, sl->gu};
    for (int i = 0; i < 3; i++)
        dt_ok = dt_ok && (rows16[i] == QT_NONE || p->tensors[rows16[i]].dtype == p->dtype);
    for (int i = 0; i < 4; i++)
        dt_ok = dt_ok && (bufs[i] == QT_NONE || p->tensors[bufs[i]].dtype == QT_F32);
    if (D->M < 1 || D->M > QT_EP_MAX_MEMBERS || D->El < 1 || D->M * D->El != D->E || D->b < 1 ||
        D->M * D->b != leaves || leaves > QT_ER_MAX_LEAVES || D->T % D->b || D->d < 1 ||
        D->f < 1 || !dt_ok ||
        p->tensors[sl->home].numel <
            QT_EP_ROUNDS_HOME_FLOATS(D->T, D->k, D->d, D->M, D->b, D->R, ndy))
        return qt_fail(QT_E_PLAN, "expert dispatch in rounds: group of %lld rank%s, %lld "
                       "experts of %lld per rank, %lld leaves, %lld rows per round: outside "
                       "the firmware's limits or the plan's buffers", (long long)D->M,
                       D->M == 1 ? "" : "s", (long long)D->El, (long long)D->E,
                       (long long)leaves, (long long)D->R);
    D->idx = qt_i32(ctx, sl->idx);
    D->x = qt_f32(ctx, sl->x), D->dy = qt_er_f32(ctx, sl->dy);
    D->wg = qt_f32(ctx, sl->w_gu), D->wd = qt_f32(ctx, sl->w_down);
    D->xr = qt_f32(ctx, sl->xr), D->dyr = qt_er_f32(ctx, sl->dyr);
    D->yr = qt_f32(ctx, sl->yr), D->gu = qt_f32(ctx, sl->gu);
    float *h = qt_f32(ctx, sl->home);
    const int64_t n = D->T * D->k;
    D->G = (int64_t *)(void *)h;
    D->xs = h + 2 * D->M * D->M * D->b;
    D->ids = (int32_t *)(void *)(D->xs + n * D->d);
    D->ret = (float *)(void *)(D->ids + n);
    D->dys = ndy ? D->ret + n * D->d : NULL;
    D->er = (int32_t *)(void *)(D->ret + n * D->d * (1 + ndy));
    D->fscr = qt_f32(ctx, sl->scratch);
    D->fscr_n = p->tensors[sl->scratch].numel;
    return QT_OK;
}

static void qt_er_status(const qt_ctx *ctx, int rc)
{
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
}

/* Counts, then my rows packed (x per token with their local ids; with dy also the row
 * gradients dy[T*k,d] per row). 0 or QT_E_*. */
static int qt_er_start(const qt_er_dims *D)
{
    int rc = qt_ep_rounds_counts(D->mask, D->idx, D->T, D->k, D->E, D->El, D->b, D->G, &qt_er.rd);
    if (rc) return rc;
    const int64_t rb = D->d * D->eb;
    qt_moe_pack(D->xs, D->ids, D->x, 1, D->idx, D->T, D->k, rb, D->El, D->E, qt_er.rd.home_off);
    if (D->dys)
        qt_moe_pack(D->dys, 0, D->dy, 0, D->idx, D->T, D->k, rb, D->El, D->E, qt_er.rd.home_off);
    return QT_OK;
}

/* The expert FFN forward over the round's R host rows (yr fp32, gu; ids -1 past the
 * round's rows are skipped): the fp32 kernel, or the bf16 one on bf16 rows (gu bf16). */
static void qt_er_ffn_fwd(const qt_er_dims *D)
{
    if (D->b16)
        qt_bf16_expert_ffn_fwd(D->yr, (qt_bf16 *)(void *)D->gu, (const qt_bf16 *)(void *)D->xr,
                               D->er, (const qt_bf16 *)(const void *)D->wg,
                               (const qt_bf16 *)(const void *)D->wd, D->fscr, D->R, 1, D->El,
                               D->d, D->f, D->fscr_n, D->nb);
    else
        qt_expert_ffn_fwd_canon(D->yr, D->gu, D->xr, D->er, D->wg, D->wd, D->fscr, D->R, 1,
                                D->El, D->d, D->f, D->fscr_n, D->nb);
}

/* The next round (seg: its leaves' first rows, may be NULL), its x rows (and dy rows into
 * dyr) and expert ids to their hosts, then the expert FFN forward over them (yr, gu).
 * 1 when a round ran, 0 after the last, or QT_E_*. */
static int qt_er_round_in(const qt_er_dims *D, int64_t *seg)
{
    const qt_ep_round *rd = &qt_er.rd;
    int rc = qt_ep_rounds_next(D->mask, D->G, D->b, D->R, &qt_er.rd, seg);
    if (rc <= 0) return rc;
    rc = qt_ep_round_send(D->mask, rd, D->xs, D->xr, D->d * D->eb);
    if (!rc) rc = qt_ep_round_send(D->mask, rd, D->ids, D->er, (int64_t)sizeof(int32_t));
    if (!rc && D->dys) rc = qt_ep_round_send(D->mask, rd, D->dys, D->dyr, D->d * D->eb);
    if (rc) return rc;
    for (int64_t r = rd->rows; r < D->R; r++) D->er[r] = -1;
    qt_er_ffn_fwd(D);
    return 1;
}

/* The round's host rows in `rows` (eb bytes an element) back to where their homes packed
 * them (D->ret). */
static int qt_er_round_out(const qt_er_dims *D, const void *rows, int64_t eb)
{
    return qt_ep_round_back(D->mask, &qt_er.rd, rows, D->ret, D->d * eb);
}

void qt_op_moe_rounds_fwd(const qt_op *op, const qt_ctx *ctx)
{
#define S_(n) QT_T(op, MOE_ROUNDS_FWD, n)
    const qt_er_slots sl = {S_(idx), S_(x), QT_NONE, S_(w_gu), S_(w_down), S_(xr), QT_NONE,
                            S_(yr), S_(gu), S_(scratch), S_(home), S_(y)};
#undef S_
    qt_er_dims D;
    int rc = qt_er_open(op, ctx, &sl, &D);
    if (!rc) rc = qt_er_start(&D);
    while (!rc && (rc = qt_er_round_in(&D, NULL)) == 1) {
        /* tensor parallelism: the rows' down projections are partial sums over this rank's
         * f/tp, summed across the tensor group before the one rounding (as ALL_REDUCE) */
        if (D.tmask && (rc = qt_op_sum_across(ctx, D.yr, D.R * D.d, D.tmask))) break;
        if (!D.b16) {
            rc = qt_er_round_out(&D, D.yr, 4);
            continue;
        }
        /* bf16: the rows rounded once on the host (as EXPERT_FFN_FWD stores ep_y), into the
         * second half of xr (its first half holds the round's bf16 x rows) */
        qt_bf16 *y16 = (qt_bf16 *)(void *)D.xr + D.R * D.d;
        qt_bf16_from_f32_n(y16, D.yr, D.R * D.d);
        rc = qt_er_round_out(&D, y16, 2);
    }
    if (!rc)
        qt_moe_unpack(qt_f32(ctx, sl.out), D.ret, D.idx, D.T, D.k, D.d * D.eb, D.El, D.E,
                      qt_er.rd.home_off);
    qt_er_status(ctx, rc);
}

void qt_op_moe_rounds_bwd(const qt_op *op, const qt_ctx *ctx)
{
#define S_(n) QT_T(op, MOE_ROUNDS_BWD, n)
    /* gu is recomputed from the round's x rows; the forward's output parks in dxr */
    const qt_er_slots sl = {S_(idx), S_(x), S_(dy), S_(w_gu), S_(w_down), S_(xr), S_(dyr),
                            S_(dxr), S_(gu), S_(scratch), S_(home), S_(dx)};
#undef S_
    qt_er_dims D;
    int rc = qt_er_open(op, ctx, &sl, &D);
    if (!rc) rc = qt_er_start(&D);
    while (!rc && (rc = qt_er_round_in(&D, NULL)) == 1) {
        /* the rows' data gradients (fp32, a bf16 plan's too): each row's one slot added to
         * +0, as into the whole dispatch's zeroed d.ep_x */
        memset(D.yr, 0, (size_t)(D.R * D.d) * sizeof(float));
        if (D.b16)
            qt_bf16_expert_ffn_bwd(D.yr, NULL, (const qt_bf16 *)(void *)D.dyr, D.er,
                                   (const qt_bf16 *)(void *)D.gu,
                                   (const qt_bf16 *)(const void *)D.wg,
                                   (const qt_bf16 *)(const void *)D.wd, D.fscr, D.R, 1, D.El,
                                   D.d, D.f, D.fscr_n, D.nb);
        else
            qt_expert_ffn_bwd_save_canon(D.yr, NULL, D.dyr, D.er, D.gu, D.wg, D.wd, D.fscr,
                                         D.R, 1, D.El, D.d, D.f, D.fscr_n, D.nb);
        /* tensor parallelism: partial sums over the rank's [gate | up] share, summed */
        if (D.tmask && (rc = qt_op_sum_across(ctx, D.yr, D.R * D.d, D.tmask))) break;
        rc = qt_er_round_out(&D, D.yr, 4);
    }
    if (!rc) {
        /* a bf16 dx is widened, gets its tokens' slots added in fp32 and is rounded once
         * (as MOE_DISPATCH_BWD) */
        float *dx = qt_op_widen_b16(ctx, sl.out, qt_op_bf16_stage(ctx), D.T * D.d);
        qt_moe_unpack_tokens_acc(dx, D.ret, D.idx, D.T, D.k, D.d, D.El, D.E, qt_er.rd.home_off);
        qt_op_store_b16(ctx, sl.out, dx, D.T * D.d);
    }
    qt_er_status(ctx, rc);
}

/* Leaf `seq` of the experts' weight gradient (QT_OPP_WGRAD_WRITES: dw written whole). At
 * leaf 0 the counts and the packed rows; at the first leaf of each round the round's rows
 * and gu. A failure leaves +0 leaves and the step stops. */
void qt_op_moe_rounds_wgrad(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
#define S_(n) QT_T(op, MOE_ROUNDS_WGRAD, n)
    const qt_er_slots sl = {S_(idx), S_(x), S_(dy), S_(w_gu), S_(w_down), S_(xr), S_(dyr),
                            S_(yr), S_(gu), S_(scratch), S_(home), QT_NONE};
#undef S_
    /* the recomputing kernel accumulates: the leaves start at +0 */
    const qt_plan *p = ctx->plan;
    memset(dw[0], 0, (size_t)p->params[op->a[QT_A_WGRAD_PARAM]].numel * sizeof(float));
    memset(dw[1], 0, (size_t)p->params[op->a[QT_A_WGRAD_PARAM + 1]].numel * sizeof(float));
    if (ctx->status && *ctx->status) return; /* an earlier leaf's exchange failed */
    qt_er_dims D;
    int rc = qt_er_open(op, ctx, &sl, &D);
    if (!rc && seq == 0) rc = qt_er_start(&D);
    if (!rc && seq >= qt_er.rd.L1) {
        rc = qt_er_round_in(&D, qt_er.seg);
        if (rc == 1 && qt_er.rd.L0 == seq) rc = QT_OK;
        else if (rc >= 0)
            rc = qt_fail(QT_E_PLAN, "expert dispatch in rounds: leaf %lld outside the rounds",
                         (long long)seq);
    }
    if (rc) {
        qt_er_status(ctx, rc);
        return;
    }
    const int64_t r0 = qt_er.seg[seq - qt_er.rd.L0], n = qt_er.seg[seq - qt_er.rd.L0 + 1] - r0;
    if (D.b16) /* d(gu) recomputed from dy, gu and W_down: the saved one's bits */
        qt_bf16_expert_ffn_wgrad(dw[0], dw[1], (const qt_bf16 *)(void *)D.dyr + r0 * D.d,
                                 (const qt_bf16 *)(void *)D.xr + r0 * D.d, D.er + r0,
                                 (const qt_bf16 *)(void *)D.gu + r0 * 2 * D.f, NULL,
                                 (const qt_bf16 *)(const void *)D.wd, D.fscr, n, 1, D.El, D.d,
                                 D.f, D.fscr_n);
    else
        qt_expert_ffn_wgrad(dw[0], dw[1], D.dyr + r0 * D.d, D.xr + r0 * D.d, D.er + r0,
                            D.gu + r0 * 2 * D.f, D.wd, D.fscr, n, 1, D.El, D.d, D.f, D.fscr_n);
}
