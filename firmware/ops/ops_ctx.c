/* ops_ctx.c - op wrappers of context parallelism's head exchange (Ulysses all-to-all):
 * CTX_TO_HEADS, CTX_TO_HEADS_BWD, CTX_TO_TOKENS, CTX_TO_TOKENS_BWD (qt_ops.def), and their
 * start-up check. Each packs this rank's send blocks into the first half of its scratch
 * (parallel/cp_pack.h), exchanges them with one fixed-size all-to-all over the context group
 * (comm/qt_coll.h) into the second half, and unpacks the received blocks into place,
 * written or (BWD) accumulated; with a6 u > 0 the heads are owned unevenly (runs of units,
 * padded blocks: cp_pack.h). Rows move bit for bit in the tensors' dtype (fp32 or bf16:
 * these kinds are native in bf16 plans), so the bits never depend on the context degree.
 * A group of one rank is a plain copy or add (no scratch used). A failed exchange stores
 * its code in *ctx->status and the interpreter stops the step. Also the replica chains of
 * kv heads shared by several context ranks (CTX_CHAIN_RECV / CTX_CHAIN_SEND: point to point
 * inside the context group, one member after another).
 */
#include <stdio.h>
#include "qt_op_fns.h"
#include "../parallel/cp_pack.h"
#include "../comm/qt_coll.h"
#include "base/qt_err.h"

/* The four kinds share CTX_TO_HEADS's slot and attribute layout (qt_ops.def). */
#define QT_CP_A(op, name) QT_A(op, CTX_TO_HEADS, name)
#define QT_CP_SAME(e)                                                                          \
    _Static_assert(QT_T_##e##_COUNT_ == 3 && QT_A_##e##_COUNT_ == 7 &&                         \
                   (int)QT_A_##e##_mask == (int)QT_A_CTX_TO_HEADS_mask &&                      \
                   (int)QT_A_##e##_C == (int)QT_A_CTX_TO_HEADS_C &&                            \
                   (int)QT_A_##e##_u == (int)QT_A_CTX_TO_HEADS_u &&                            \
                   (int)QT_T_##e##_scratch == (int)QT_T_CTX_TO_HEADS_scratch,                  \
                   "qt_ops.def: " #e " differs from CTX_TO_HEADS's layout")
QT_CP_SAME(CTX_TO_HEADS_BWD);
QT_CP_SAME(CTX_TO_TOKENS);
QT_CP_SAME(CTX_TO_TOKENS_BWD);
#define QT_CP_OUT 0 /* t0: y or dx */
#define QT_CP_IN 1  /* t1: x or dy */

/* The op's shape (the element width from t0's dtype) and group, checked against the
 * kernel's rules and the mesh. 0 or QT_E_PLAN with a message. */
static int qt_cp_shape_of(const qt_op *op, const qt_ctx *ctx, qt_cp_shape *sh, unsigned *mask)
{
    sh->b = QT_CP_A(op, b), sh->S = QT_CP_A(op, S), sh->G = QT_CP_A(op, G);
    sh->w = QT_CP_A(op, w), sh->C = QT_CP_A(op, C), sh->u = QT_CP_A(op, u);
    sh->eb = qt_dtype_bytes(ctx->plan->tensors[op->t[QT_CP_OUT]].dtype);
    *mask = (unsigned)QT_CP_A(op, mask);
    int rc = qt_cp_shape_check(sh);
    if (rc) return rc;
    const int R = qt_comm_group_size(*mask);
    if (R < 0) return R;
    if (R != sh->C)
        return qt_fail(QT_E_PLAN, "context exchange: group mask 0x%x has %d rank%s, the op's "
                       "context degree is %lld", *mask, R, R == 1 ? "" : "s", (long long)sh->C);
    return QT_OK;
}

/* One exchange of t1 into t0: to_heads (to_heads = 1) or to_tokens, written or accumulated. */
static void qt_cp_run(const qt_op *op, const qt_ctx *ctx, int to_heads, int acc)
{
    qt_cp_shape sh;
    unsigned mask;
    int rc = qt_cp_shape_of(op, ctx, &sh, &mask);
    if (!rc) {
        void *dst = qt_f32(ctx, op->t[QT_CP_OUT]);
        const void *src = qt_f32(ctx, op->t[QT_CP_IN]);
        const void *from = src;
        if (sh.C > 1) {
            /* send blocks in the first half of the scratch, received ones in the second */
            unsigned char *send = (unsigned char *)qt_f32(ctx, QT_T(op, CTX_TO_HEADS, scratch));
            const int64_t blk = qt_cp_block_bytes(&sh);
            if (to_heads) qt_cp_pack_tokens(&sh, send, src);
            else qt_cp_pack_heads(&sh, send, src);
            rc = qt_coll_all_to_all(mask, send, send + sh.C * blk, blk);
            from = send + sh.C * blk;
        }
        if (!rc && to_heads) qt_cp_unpack_heads(&sh, dst, from, acc);
        if (!rc && !to_heads) qt_cp_unpack_tokens(&sh, dst, from, acc);
    }
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
}

void qt_op_ctx_to_heads(const qt_op *op, const qt_ctx *ctx)
{
    qt_cp_run(op, ctx, 1, 0);
}

void qt_op_ctx_to_heads_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_cp_run(op, ctx, 0, 1);
}

void qt_op_ctx_to_tokens(const qt_op *op, const qt_ctx *ctx)
{
    qt_cp_run(op, ctx, 0, 0);
}

void qt_op_ctx_to_tokens_bwd(const qt_op *op, const qt_ctx *ctx)
{
    qt_cp_run(op, ctx, 1, 1);
}

static const char *qt_cp_name(const qt_tensor *t)
{
    return t->name ? t->name : "?";
}

/* The start-up check (the plan only, before the mesh exists): the group's size from the
 * plan's mesh equals C, the kernel's rules (S, G multiples of C), t0 and t1 of one element
 * dtype (fp32 or bf16) holding n = b*(S/C)*G*w elements each, the scratch at least
 * QT_CP_SCRATCH_FLOATS. Writes st->why on a misfit. */
static int qt_check_cp(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t b = QT_CP_A(op, b), S = QT_CP_A(op, S), G = QT_CP_A(op, G);
    const int64_t w = QT_CP_A(op, w), C = QT_CP_A(op, C), mask = QT_CP_A(op, mask),
                  u = QT_CP_A(op, u);
    int64_t R = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1ll << a)) R *= p->mesh[a];
    if (mask < 0 || mask >= (1ll << QT_MESH_COUNT) || C != R || b < 1 || S < 1 || G < 1 ||
        w < 1 || u < 0 || S % C || (u > 0 ? G % u : G % C && C % G)) {
        snprintf(st->why, sizeof st->why, "context exchange b=%lld S=%lld G=%lld w=%lld u=%lld "
                 "mask 0x%llx (%lld rank%s) C=%lld: needs C = the group's size, sizes >= 1, S "
                 "a multiple of C, G a multiple or a divisor of C (u > 0: of u)",
                 (long long)b, (long long)S, (long long)G, (long long)w, (long long)u,
                 (long long)mask, (long long)R, R == 1 ? "" : "s", (long long)C);
        return 1;
    }
    /* the token side holds b*(S/C)*G*w elements, the head side b*S*Gl*w (equal unless the
     * groups are shared, G < C, or owned unevenly, u > 0: Gl slots with padding) */
    const int64_t nt = QT_CP_ELEMS(b, S, G, w, C), nh = QT_CP_HEAD_ELEMS_U(b, S, G, w, C, u),
                  need = QT_CP_SCRATCH_FLOATS_U(b, S, G, w, C, u);
    const int heads_out = op->kind == QT_OP_CTX_TO_HEADS || op->kind == QT_OP_CTX_TO_TOKENS_BWD;
    const int64_t n_out = heads_out ? nh : nt, n_in = heads_out ? nt : nh;
    for (int k = 0; k < 3; k++)
        if (op->t[k] < 0 || op->t[k] >= p->n_tensors) {
            snprintf(st->why, sizeof st->why, "slot t%d = %d is not a tensor id", k, op->t[k]);
            return 1;
        }
    const qt_tensor *y = &p->tensors[op->t[QT_CP_OUT]], *x = &p->tensors[op->t[QT_CP_IN]];
    const qt_tensor *scr = &p->tensors[op->t[QT_T_CTX_TO_HEADS_scratch]];
    if (y->dtype != x->dtype || (y->dtype != QT_F32 && y->dtype != QT_BF16) ||
        y->numel != n_out || x->numel != n_in || scr->numel < need) {
        snprintf(st->why, sizeof st->why, "context exchange: t0 %s (%lld elements, expected "
                 "%lld) and t1 %s (%lld, expected %lld) must be both fp32 or both bf16, "
                 "scratch %s %lld floats of >= %lld", qt_cp_name(y), (long long)y->numel,
                 (long long)n_out, qt_cp_name(x), (long long)x->numel, (long long)n_in,
                 qt_cp_name(scr), (long long)scr->numel, (long long)need);
        return 1;
    }
    return 0;
}

/* ---- the replica chains of shared kv heads (CTX_CHAIN_RECV, CTX_CHAIN_SEND) ---- */

/* This rank's place q in its chain of rho members of group `mask`, and the group index c;
 * 0 or QT_E_PLAN. */
static int qt_chain_place(const qt_op *op, int64_t *q, int *c)
{
    const unsigned mask = (unsigned)QT_A(op, CTX_CHAIN_RECV, mask);
    const int64_t rho = QT_A(op, CTX_CHAIN_RECV, rho);
    *c = qt_comm_group_index(mask);
    if (*c < 0) return *c;
    *q = *c % rho;
    return QT_OK;
}

/* dk and dv from the chain's previous member (overwritten), unless this rank starts it. */
void qt_op_ctx_chain_recv(const qt_op *op, const qt_ctx *ctx)
{
    int64_t q;
    int c, rc = qt_chain_place(op, &q, &c);
    const int64_t bytes = QT_A(op, CTX_CHAIN_RECV, n) * (int64_t)sizeof(float);
    const unsigned mask = (unsigned)QT_A(op, CTX_CHAIN_RECV, mask);
    for (int k = 0; k < 2 && !rc && q > 0; k++)
        rc = qt_coll_pass(mask, -1, NULL, 0, c - 1, qt_f32(ctx, op->t[k]), bytes);
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
}

/* dk and dv to the chain's next member, unless this rank ends it. */
void qt_op_ctx_chain_send(const qt_op *op, const qt_ctx *ctx)
{
    int64_t q;
    int c, rc = qt_chain_place(op, &q, &c);
    const int64_t bytes = QT_A(op, CTX_CHAIN_SEND, n) * (int64_t)sizeof(float);
    const unsigned mask = (unsigned)QT_A(op, CTX_CHAIN_SEND, mask);
    for (int k = 0; k < 2 && !rc && q < QT_A(op, CTX_CHAIN_SEND, rho) - 1; k++)
        rc = qt_coll_pass(mask, c + 1, qt_f32(ctx, op->t[k]), bytes, -1, NULL, 0);
    if (rc && ctx->status && !*ctx->status) *ctx->status = rc;
}

/* Start-up: the group's size a multiple of rho, dk and dv fp32 of n elements. */
static int qt_check_chain(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    const int64_t n = QT_A(op, CTX_CHAIN_RECV, n), mask = QT_A(op, CTX_CHAIN_RECV, mask),
                  rho = QT_A(op, CTX_CHAIN_RECV, rho);
    int64_t R = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1ll << a)) R *= p->mesh[a];
    int bad = mask < 0 || mask >= (1ll << QT_MESH_COUNT) || rho < 1 || R % rho || n < 0;
    for (int k = 0; k < 2 && !bad; k++) {
        const int32_t id = op->t[k];
        bad = id < 0 || id >= p->n_tensors || p->tensors[id].dtype != QT_F32 ||
              p->tensors[id].numel != n;
    }
    if (bad)
        snprintf(st->why, sizeof st->why, "kv chain of %lld members over mask 0x%llx (%lld "
                 "rank%s): needs the group's size a multiple of the chain's, t0 and t1 fp32 "
                 "tensors of n = %lld elements", (long long)rho, (long long)mask,
                 (long long)R, R == 1 ? "" : "s", (long long)n);
    return bad;
}

int qt_check_ctx_chain_recv(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_chain(p, op, st);
}

int qt_check_ctx_chain_send(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_chain(p, op, st);
}

int qt_check_ctx_to_heads(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_cp(p, op, st);
}

int qt_check_ctx_to_heads_bwd(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_cp(p, op, st);
}

int qt_check_ctx_to_tokens(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_cp(p, op, st);
}

int qt_check_ctx_to_tokens_bwd(const qt_plan *p, const qt_op *op, qt_check_state *st)
{
    return qt_check_cp(p, op, st);
}
