/* ops_ctx_units.c - op wrappers of the GDN heads owned unevenly over context (issue 35,
 * qt_ops.def CTX_OWN_UNITS, GDN_CONV_WGRAD_U, GDN_GATES_WGRAD_U, GATED_RMSNORM_WGRAD_U;
 * docs/context.md "GDN heads owned unevenly"): a tensor rank's units of key heads (with
 * their value heads) split in uneven runs over the context group (parallel/cp_units.h).
 * CTX_OWN_UNITS copies a member's units of a parameter kept whole over context into its
 * head side's padded copy; the WGRAD kinds compute the leaf of the member's own units with
 * the even kinds' kernels (GDN_CONV_WGRAD, GDN_GATES_WGRAD, the gated norm's per-group
 * partials) and complete it on every member: an all-gather of the members' rows, placed by
 * owner (conv, gates), or of every canonical group's partial, summed by the one-rank
 * pairwise tree over all groups (the norm). Each leaf is then exactly one rank's.
 * Invariants: slot and attribute meanings are those of qt_ops.def; the WGRAD wrappers
 * accumulate into the zeroed dw only what the even kernels would (the rest is copies); a
 * failed all-gather stores its code in *ctx->status (the interpreter stops the step). In
 * bf16 plans the WGRAD kinds run through the boundary (fp32 slots here). No module state.
 */
#include <stdio.h>
#include <string.h>
#include "qt_op_fns.h"
#include "../parallel/cp_units.h"
#include "../comm/qt_coll.h"
#include "../kernels/gated_rmsnorm.h"
#include "base/qt_err.h"

_Static_assert((int)QT_A_GDN_CONV_WGRAD_U_S == (int)QT_A_GDN_CONV_WGRAD_S &&
                   (int)QT_A_GDN_CONV_WGRAD_U_K == (int)QT_A_GDN_CONV_WGRAD_K &&
                   (int)QT_T_GDN_CONV_WGRAD_U_w == (int)QT_T_GDN_CONV_WGRAD_w &&
                   (int)QT_A_GDN_GATES_WGRAD_U_S == (int)QT_A_GDN_GATES_WGRAD_S &&
                   (int)QT_T_GDN_GATES_WGRAD_U_dt_bias == (int)QT_T_GDN_GATES_WGRAD_dt_bias,
               "qt_ops.def: the _U kinds extend the even kinds' layouts");

/* The mesh axes of mask the plan splits (a group of one rank needs no exchange). */
static unsigned qt_cpu_split(const qt_plan *p, unsigned mask)
{
    unsigned split = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if ((mask & (1u << a)) && p->mesh[a] > 1) split |= 1u << a;
    return split;
}

static void qt_cpu_status(const qt_ctx *ctx, int rc)
{
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
}

/* CTX_OWN_UNITS's shape (element width from t0). */
static void qt_cpu_shape_of(const qt_plan *p, const qt_op *op, qt_cpu_shape *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->U = QT_A(op, CTX_OWN_UNITS, U);
    sh->C = QT_A(op, CTX_OWN_UNITS, C);
    const int64_t w[3] = {QT_A(op, CTX_OWN_UNITS, w0), QT_A(op, CTX_OWN_UNITS, w1),
                          QT_A(op, CTX_OWN_UNITS, w2)};
    for (int i = 0; i < 3 && w[i] > 0; i++) sh->w[sh->nseg++] = w[i];
    const int32_t y = QT_T(op, CTX_OWN_UNITS, y);
    sh->eb = y >= 0 && y < p->n_tensors ? qt_dtype_bytes(p->tensors[y].dtype) : 0;
}

void qt_op_ctx_own_units(const qt_op *op, const qt_ctx *ctx)
{
    qt_cpu_shape sh;
    qt_cpu_shape_of(ctx->plan, op, &sh);
    const unsigned mask = qt_cpu_split(ctx->plan, (unsigned)QT_A(op, CTX_OWN_UNITS, mask));
    const int c = mask ? qt_comm_group_index(mask) : 0;
    if (c < 0) {
        qt_cpu_status(ctx, c);
        return;
    }
    qt_cpu_select(&sh, c, qt_f32(ctx, QT_T(op, CTX_OWN_UNITS, y)),
                  qt_f32(ctx, QT_T(op, CTX_OWN_UNITS, x)));
}

/* Start-up: a valid shape, the group's size C, y a slot block and x the whole parameter,
 * both of one dtype. */
int qt_check_ctx_own_units(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    qt_cpu_shape sh;
    qt_cpu_shape_of(p, op, &sh);
    const int64_t mask = QT_A(op, CTX_OWN_UNITS, mask);
    int64_t R = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1ll << a)) R *= p->mesh[a];
    const int32_t y = QT_T(op, CTX_OWN_UNITS, y), x = QT_T(op, CTX_OWN_UNITS, x);
    int bad = qt_cpu_check(&sh) || mask < 0 || mask >= (1ll << QT_MESH_COUNT) || R != sh.C ||
              x < 0 || x >= p->n_tensors;
    if (!bad)
        bad = p->tensors[y].numel != qt_cpu_block_elems(&sh) ||
              p->tensors[x].numel != qt_cpu_whole_elems(&sh) ||
              p->tensors[x].dtype != p->tensors[y].dtype;
    if (bad)
        snprintf(st->why, sizeof st->why, "own units: %lld units over a context group of %lld "
                 "(mask 0x%llx: %lld ranks), segments of %lld/%lld/%lld elements a unit: needs "
                 "t0 the slot block and t1 the whole parameter, one dtype", (long long)sh.U,
                 (long long)sh.C, (long long)mask, (long long)R, (long long)sh.w[0],
                 (long long)sh.w[1], (long long)sh.w[2]);
    return bad;
}

/* The leaf's own-unit rows, stored at the start of each of the n dw[] (k elements each),
 * gathered over the context group and placed by owner into every dw[] (units of w
 * elements): whole leaves on every member. */
static void qt_cpu_complete(const qt_ctx *ctx, float *const dw[2], int n, const qt_cpu_shape *sh,
                            float *scratch)
{
    const int64_t blk = qt_cpu_block_elems(sh), stride = n * blk;
    const unsigned mask = qt_cpu_split(ctx->plan, 1u << QT_MESH_CONTEXT);
    const int c = mask ? qt_comm_group_index(mask) : 0;
    if (c < 0) {
        qt_cpu_status(ctx, c);
        return;
    }
    for (int k = 0; k < n; k++)
        memcpy(scratch + c * stride + k * blk, dw[k], (size_t)blk * sizeof(float));
    const int rc = mask ? qt_coll_all_gather(mask, scratch, stride * (int64_t)sizeof(float)) : 0;
    if (rc) {
        qt_cpu_status(ctx, rc);
        return;
    }
    for (int k = 0; k < n; k++) qt_cpu_place(sh, dw[k], scratch + k * blk, stride);
}

void qt_op_gdn_conv_wgrad_u(const qt_op *op, const qt_ctx *ctx, int64_t leaf, float *const dw[2])
{
    qt_op e = *op;
    e.kind = QT_OP_GDN_CONV_WGRAD;
    e.a[QT_A_GDN_CONV_WGRAD_b] = 1;
    e.t[QT_T_GDN_CONV_WGRAD_U_scratch] = QT_NONE;
    qt_op_gdn_conv_wgrad(&e, ctx, leaf, dw);
    const int64_t U = QT_A(op, GDN_CONV_WGRAD_U, U), C = qt_plan_context(ctx->plan),
                  L = qt_cpu_slots(U, C), hk = QT_A(op, GDN_CONV_WGRAD_U, Hk),
                  hv = QT_A(op, GDN_CONV_WGRAD_U, Hv), K = QT_A(op, GDN_CONV_WGRAD_U, K),
                  dk = QT_A(op, GDN_CONV_WGRAD_U, Dk), dv = QT_A(op, GDN_CONV_WGRAD_U, Dv);
    qt_cpu_shape sh = {U, C, 3, {hk / L * dk * K, hk / L * dk * K, hv / L * dv * K}, 4};
    qt_cpu_complete(ctx, dw, 1, &sh, qt_f32(ctx, QT_T(op, GDN_CONV_WGRAD_U, scratch)));
}

void qt_op_gdn_gates_wgrad_u(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2])
{
    qt_op e = *op;
    e.kind = QT_OP_GDN_GATES_WGRAD;
    e.t[QT_T_GDN_GATES_WGRAD_A_log] = QT_T(op, GDN_GATES_WGRAD_U, A_log_h);
    e.t[QT_T_GDN_GATES_WGRAD_dt_bias] = QT_T(op, GDN_GATES_WGRAD_U, dt_bias_h);
    for (int k = QT_T_GDN_GATES_WGRAD_U_A_log_h; k < QT_OP_MAX_T; k++) e.t[k] = QT_NONE;
    e.a[QT_A_GDN_GATES_WGRAD_U_U] = 0;
    qt_op_gdn_gates_wgrad(&e, ctx, seq, dw);
    const int64_t U = QT_A(op, GDN_GATES_WGRAD_U, U), C = qt_plan_context(ctx->plan),
                  L = qt_cpu_slots(U, C), hv = QT_A(op, GDN_GATES_WGRAD_U, Hv);
    qt_cpu_shape sh = {U, C, 1, {hv / L, 0, 0}, 4};
    qt_cpu_complete(ctx, dw, 2, &sh, qt_f32(ctx, QT_T(op, GDN_GATES_WGRAD_U, scratch)));
}

void qt_op_gated_rmsnorm_wgrad_u(const qt_op *op, const qt_ctx *ctx, int64_t seq,
                                 float *const dw[2])
{
    const qt_plan *p = ctx->plan;
    const int64_t S = QT_A(op, GATED_RMSNORM_WGRAD_U, S), hk = QT_A(op, GATED_RMSNORM_WGRAD_U, Hk),
                  dk = QT_A(op, GATED_RMSNORM_WGRAD_U, Dk), hv = QT_A(op, GATED_RMSNORM_WGRAD_U, Hv),
                  dv = QT_A(op, GATED_RMSNORM_WGRAD_U, Dv), G = QT_A(op, GATED_RMSNORM_WGRAD_U, groups),
                  U = QT_A(op, GATED_RMSNORM_WGRAD_U, U), C = qt_plan_context(p),
                  L = qt_cpu_slots(U, C), gpu = G / L, hpg = hv / G, wq = hk * (2 * dk + 2 * (hv / hk) * dv);
    const unsigned mask = qt_cpu_split(p, (1u << QT_MESH_TENSOR) | (1u << QT_MESH_CONTEXT));
    const int j = mask ? qt_comm_group_index(mask) : 0;
    const int64_t R = mask ? qt_comm_group_size(mask) : 1, blk = G * dv;
    if (j < 0 || R < 1) {
        qt_cpu_status(ctx, j < 0 ? j : QT_E_PLAN);
        return;
    }
    /* this member's own groups' partials, each group's rows in increasing (t, j) as the even
     * kind sums them; the padding slots' blocks stay zero */
    float *scr = qt_f32(ctx, QT_T(op, GATED_RMSNORM_WGRAD_U, scratch)), *mine = scr + j * blk;
    memset(mine, 0, (size_t)blk * sizeof(float));
    const float *rstd = qt_f32(ctx, QT_T(op, GATED_RMSNORM_WGRAD_U, rstd)) + seq * S * hv,
                *dy = qt_f32(ctx, QT_T(op, GATED_RMSNORM_WGRAD_U, dy)) + seq * S * hv * dv,
                *o = qt_f32(ctx, QT_T(op, GATED_RMSNORM_WGRAD_U, o)) + seq * S * hv * dv,
                *qkvz = qt_f32(ctx, QT_T(op, GATED_RMSNORM_WGRAD_U, qkvz)) + seq * S * wq;
    const int64_t own = qt_cpu_count(U, C, j % C) * gpu;
    for (int64_t gi = 0; gi < own; gi++)
        qt_gated_rmsnorm_wgrad_heads(mine + gi * dv, rstd, dy, o, qkvz, S, hk, dk, hv, dv,
                                     gi * hpg, (gi + 1) * hpg);
    const int rc = R > 1 ? qt_coll_all_gather(mask, scr, blk * (int64_t)sizeof(float)) : 0;
    if (rc) {
        qt_cpu_status(ctx, rc);
        return;
    }
    /* the groups in global order (member t*C + c: tensor rank t's units from c*U/C) */
    int64_t n = 0;
    for (int64_t m = 0; m < R; m++) {
        const int64_t k = qt_cpu_count(U, C, m % C) * gpu * dv;
        memmove(scr + n, scr + m * blk, (size_t)k * sizeof(float));
        n += k;
    }
    /* the canonical groups' pairwise tree over every group (qt_op_group_finish's) */
    const int64_t groups = n / dv;
    for (int64_t s = 1; s < groups; s *= 2)
        for (int64_t q = 0; q + s < groups; q += 2 * s) {
            float *a = scr + q * dv;
            const float *b = scr + (q + s) * dv;
            for (int64_t i = 0; i < dv; i++) a[i] = a[i] + b[i];
        }
    for (int64_t i = 0; i < dv; i++) dw[0][i] += scr[i];
}

/* Start-up checks of the WGRAD kinds: U >= 1 units, the head side's heads and groups whole
 * slots of them, the parameters the whole tensor rank's U units, the scratch what the
 * wrapper gathers into. */
static int qt_cpu_numel_ok(const qt_plan *p, int32_t id, int64_t need, int exact)
{
    if (id < 0 || id >= p->n_tensors) return 0;
    return exact ? p->tensors[id].numel == need : p->tensors[id].numel >= need;
}

static int qt_cpu_param_numel(const qt_plan *p, const qt_op *op, int k, int64_t need)
{
    const int64_t pi = op->a[QT_A_WGRAD_PARAM + k];
    return pi >= 0 && pi < p->n_params && p->params[pi].numel == need;
}

static int qt_cpu_why(qt_check_state *st, const char *what, int64_t U, int64_t C)
{
    snprintf(st->why, sizeof st->why, "%s: U = %lld units over a context group of %lld: the "
             "head side's heads or groups are not whole unit slots, or a parameter or the "
             "scratch does not hold what the leaf needs", what, (long long)U, (long long)C);
    return 1;
}

int qt_check_gdn_conv_wgrad_u(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t U = QT_A(op, GDN_CONV_WGRAD_U, U), C = qt_plan_context(p),
                  hk = QT_A(op, GDN_CONV_WGRAD_U, Hk), hv = QT_A(op, GDN_CONV_WGRAD_U, Hv),
                  dk = QT_A(op, GDN_CONV_WGRAD_U, Dk), dv = QT_A(op, GDN_CONV_WGRAD_U, Dv),
                  K = QT_A(op, GDN_CONV_WGRAD_U, K), L = U >= 1 ? qt_cpu_slots(U, C) : 1,
                  head = (2 * hk * dk + hv * dv) * K;
    const int ok = U >= 1 && hk >= L && hk % L == 0 && hv % hk == 0 && dk >= 1 && dv >= 1 &&
                   K >= 1 && qt_cpu_param_numel(p, op, 0, U * (head / L)) &&
                   qt_cpu_numel_ok(p, QT_T(op, GDN_CONV_WGRAD_U, scratch), C * head, 0);
    return ok ? 0 : qt_cpu_why(st, "GDN_CONV_WGRAD_U", U, C);
}

int qt_check_gdn_gates_wgrad_u(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t U = QT_A(op, GDN_GATES_WGRAD_U, U), C = qt_plan_context(p),
                  hv = QT_A(op, GDN_GATES_WGRAD_U, Hv), L = U >= 1 ? qt_cpu_slots(U, C) : 1;
    const int ok = U >= 1 && hv >= L && hv % L == 0 && qt_cpu_param_numel(p, op, 0, U * (hv / L)) &&
                   qt_cpu_param_numel(p, op, 1, U * (hv / L)) &&
                   qt_cpu_numel_ok(p, QT_T(op, GDN_GATES_WGRAD_U, A_log_h), hv, 1) &&
                   qt_cpu_numel_ok(p, QT_T(op, GDN_GATES_WGRAD_U, dt_bias_h), hv, 1) &&
                   qt_cpu_numel_ok(p, QT_T(op, GDN_GATES_WGRAD_U, scratch), 2 * C * hv, 0);
    return ok ? 0 : qt_cpu_why(st, "GDN_GATES_WGRAD_U", U, C);
}

int qt_check_gated_rmsnorm_wgrad_u(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t U = QT_A(op, GATED_RMSNORM_WGRAD_U, U), C = qt_plan_context(p),
                  tp = p->mesh[QT_MESH_TENSOR] > 1 ? p->mesh[QT_MESH_TENSOR] : 1,
                  hv = QT_A(op, GATED_RMSNORM_WGRAD_U, Hv), dv = QT_A(op, GATED_RMSNORM_WGRAD_U, Dv),
                  G = QT_A(op, GATED_RMSNORM_WGRAD_U, groups), L = U >= 1 ? qt_cpu_slots(U, C) : 1;
    const int ok = U >= 1 && G >= L && G % L == 0 && hv % G == 0 && dv >= 1 &&
                   qt_cpu_param_numel(p, op, 0, dv) &&
                   qt_cpu_numel_ok(p, QT_T(op, GATED_RMSNORM_WGRAD_U, scratch), tp * C * G * dv, 0);
    return ok ? 0 : qt_cpu_why(st, "GATED_RMSNORM_WGRAD_U", U, C);
}
