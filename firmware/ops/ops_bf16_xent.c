/* ops_bf16_xent.c - the native bf16 forms of the cross entropy: XENT in both forms (plain,
 * and canonical vocabulary blocks, vocab-parallel over the tensor group) and XENT_MTP
 * (qt_ops_bf16.h; docs/precision.md, "Executing bf16 plans", pattern (B)).
 *
 * Both kinds are one cross entropy over nq runs of S rows (XENT: the b sequences; XENT_MTP:
 * the b x n (block, part) runs), each run's loss (and z) sum a chain over its rows in
 * increasing t, the kernels of kernels/xent.h on widened row blocks (qt_r16.h):
 *  - plain (nb <= 0): bf16 logits and dlogits one row at a time in one pass
 *    (kernels/bf16_rows.h qt_b16_xent_row: the max and the stores in sixteen lanes, the
 *    exponentials in eight, their sum serial; the rounding in the last pass), a row with an
 *    inf or a NaN, or an fp32 slot, through the fp32 kernels (qt_xent_chain / _z_chain) on
 *    widened row blocks, each continuing the run's sums;
 *  - vocabulary blocks (nb > 0): the fp32 wrapper's three phases (ops_basic.c
 *    qt_op_xent_rows) with its exchanges, each phase over row blocks of the widened logits:
 *    stats; all-gather, merge; block sums, the exponentials kept as fp32 rows in the staging
 *    region (the finish scales them after the sums' all-gather); finish, continued per run
 *    (qt_xent_blk_finish_chain / _z_chain), each finished block rounded into dlogits.
 * XENT_MTP's MTP runs (part j >= 1) have their dlogits multiplied by the scale before the
 * rounding (the fp32 wrapper multiplies the fp32 rows after the cross entropy: the same
 * product per element), and the z-loss on its main runs only.
 * Every phase is row-local and every sum is the kernel's own chain in its order, so the
 * blocks give the fp32 wrappers' values on the widened logits, rounded once: the
 * boundary's bits (runtime/interp_bf16.c), checked per kind at 0 ulp (test_bf16_ops.cpp,
 * Bf16NativeRows). Runs through the boundary (the same bits): an fp32 loss / z / entry /
 * scratch slot that is bf16, a bf16 slot of vocabulary blocks that is not, a staging region
 * too small. A failed exchange stops the step (ctx->status), as in fp32.
 * No state, no heap, no VLAs.
 */
#include "qt_r16.h"
#include "../comm/qt_coll.h"
#include "kernels/bf16.h"
#include "kernels/bf16_rows.h"
#include "kernels/xent.h"

/* One cross entropy over nq runs of S rows of V logits (this rank's columns). */
typedef struct {
    const int32_t *tg; /* targets[nq * S] */
    float *loss;       /* loss[q]: run q's loss sum (written) */
    float *zsum;       /* zsum[q / zevery] for the runs with the z term (written), or NULL */
    float z;           /* the z-loss multiplier of runs q % zevery == 0 (0: none) */
    int64_t zevery;
    float c;           /* dlogits of runs q % cevery != 0 times c (cevery 0: none) */
    int64_t cevery;
    int64_t nq, S, V, nb;
    unsigned mask;     /* the vocab-parallel group (0: one rank) */
    float *scratch;    /* nb > 0: QT_XENT_BLK_SCRATCH(nq * S, nb, P) floats */
} qt_x16;

static float qt_x16_z(const qt_x16 *x, int64_t q)
{
    return x->z != 0.0f && q % x->zevery == 0 ? x->z : 0.0f;
}

static int qt_x16_sc(const qt_x16 *x, int64_t q)
{
    return x->cevery && q % x->cevery != 0;
}

/* Run q's finished rows (n values at g) times the MTP scale where the run takes it. */
static void qt_x16_scale(const qt_x16 *x, int64_t q, float *g, int64_t n)
{
    if (!qt_x16_sc(x, q)) return;
    for (int64_t i = 0; i < n; i++) g[i] *= x->c;
}

/* Rows [t0, t0 + nr) of run q through the fp32 kernels on the widened block (b: slot 0
 * dlogits, slot 1 logits), dlogits rounded back. */
static void qt_x16_block(const qt_r16 *rb, const qt_x16 *x, int64_t q, int64_t t0, int64_t nr,
                         float *acc, float *zacc)
{
    const qt_r16 b = *rb;
    const float z = qt_x16_z(x, q);
    float *g = QT_R16_G(0, t0, nr);
    if (z != 0.0f) qt_xent_z_chain(acc, zacc, g, QT_R16_G(1, t0, nr), x->tg + t0, nr, x->V, z);
    else qt_xent_chain(acc, g, QT_R16_G(1, t0, nr), x->tg + t0, nr, x->V);
    qt_x16_scale(x, q, g, nr * x->V);
    qt_r16_put_all(&b, t0, nr);
}

/* The plain form: slot 0 dlogits (written), slot 1 logits, blocks of rows inside each run.
 * Both bf16: one row at a time in one pass (qt_b16_xent_row: the rounding in the last
 * pass, the exponentials in slot 0's buffer), a row with an inf or a NaN through the fp32
 * kernel as a block of one row. */
static int qt_x16_plain(const qt_ctx *ctx, const qt_x16 *x, int32_t did, int32_t lid)
{
    const int64_t S = x->S, V = x->V, rows = qt_r16_rows(V, S);
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, did, 0, V, V, 0, 1);
    qt_r16_add(&b, lid, 0, V, V, 1, 0);
    if (qt_r16_plan(&b, rows)) return -1;
    const int one = qt_is_b16(ctx, did) && qt_is_b16(ctx, lid);
    for (int64_t q = 0; q < x->nq; q++) {
        const float z = qt_x16_z(x, q);
        float acc = 0.0f, zacc = 0.0f;
        for (int64_t t = q * S; one && t < (q + 1) * S; t++)
            if (qt_b16_xent_row(&acc, &zacc, qt_b16(ctx, did) + t * V, qt_b16(ctx, lid) + t * V,
                                x->tg[t], V, z, qt_x16_sc(x, q), x->c, b.sl[0].buf))
                qt_x16_block(&b, x, q, t, 1, &acc, &zacc);
        for (int64_t q0 = 0; !one && q0 < S; q0 += rows)
            qt_x16_block(&b, x, q, q * S + q0, qt_r16_min(rows, S - q0), &acc, &zacc);
        x->loss[q] = acc;
        if (z != 0.0f) x->zsum[q / x->zevery] = zacc;
    }
    return 0;
}

static int qt_x16_fail(const qt_ctx *ctx, int rc)
{
    if (ctx->status && !*ctx->status) *ctx->status = rc;
    return 0;
}

/* The vocabulary blocks (ops_basic.c qt_op_xent_rows' phases and exchanges): slot 0 the
 * logits (read in row blocks, three times), the exponentials in e[R x V] (staging), dlogits
 * bf16 (each finished block rounded into it). */
static int qt_x16_blocked(const qt_ctx *ctx, const qt_x16 *x, int32_t did, int32_t lid)
{
    const int64_t S = x->S, V = x->V, nb = x->nb, R = x->nq * S, rows = qt_r16_rows(V, S);
    const int64_t P = x->mask ? qt_comm_group_size(x->mask) : 1;
    const int64_t v0 = x->mask ? qt_comm_group_index(x->mask) * V : 0, me = v0 / V;
    if (!qt_is_b16(ctx, did) || P < 1 || v0 < 0) return -1;
    qt_r16 b = {ctx, 0, {{0}}};
    qt_r16_add(&b, lid, 0, V, V, 1, 0);
    float *e = qt_r16_plan(&b, rows) ? 0 : qt_r16_extra(&b, rows, R * V);
    if (!e) return -1;
    float *stat = x->scratch, *sums = stat + P * 2 * R, *tmp = sums + P * R * nb;
    for (int64_t t0 = 0; t0 < R; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, R - t0);
        qt_xent_blk_stats(stat + me * 2 * R + 2 * t0, QT_R16_G(0, t0, nr), x->tg + t0, nr, V, v0);
    }
    int rc = P > 1 ? qt_coll_all_gather(x->mask, stat, 2 * R * (int64_t)sizeof(float)) : 0;
    if (rc) return qt_x16_fail(ctx, rc);
    qt_xent_blk_merge(stat, x->tg, R, V, P);
    for (int64_t t0 = 0; t0 < R; t0 += rows) {
        const int64_t nr = qt_r16_min(rows, R - t0);
        qt_xent_blk_sums(sums + me * R * nb + t0 * nb, e + t0 * V, QT_R16_G(0, t0, nr),
                         stat + 2 * t0, nr, V, nb);
    }
    rc = P > 1 ? qt_coll_all_gather(x->mask, sums, R * nb * (int64_t)sizeof(float)) : 0;
    if (rc) return qt_x16_fail(ctx, rc);
    qt_bf16 *dl = qt_b16(ctx, did);
    for (int64_t q = 0; q < x->nq; q++) {
        const float z = qt_x16_z(x, q);
        float acc = 0.0f, zacc = 0.0f;
        for (int64_t q0 = 0; q0 < S; q0 += rows) {
            const int64_t nr = qt_r16_min(rows, S - q0), t0 = q * S + q0;
            float *g = e + t0 * V;
            if (z != 0.0f)
                qt_xent_blk_finish_z_chain(&acc, &zacc, g, stat, sums, x->tg, t0, nr, R, V, nb, P,
                                           v0, tmp, z);
            else qt_xent_blk_finish_chain(&acc, g, stat, sums, x->tg, t0, nr, R, V, nb, P, v0, tmp);
            qt_x16_scale(x, q, g, nr * V);
            qt_bf16_from_f32_n(dl + t0 * V, g, nr * V);
        }
        x->loss[q] = acc;
        if (z != 0.0f) x->zsum[q / x->zevery] = zacc;
    }
    return 0;
}

/* The cross entropy of x into dlogits did from logits lid: 0, or -1 (nothing done: the
 * caller runs the boundary). */
static int qt_x16_run(const qt_ctx *ctx, const qt_x16 *x, int32_t did, int32_t lid)
{
    if (did == lid) return -1;
    return x->nb > 0 ? qt_x16_blocked(ctx, x, did, lid) : qt_x16_plain(ctx, x, did, lid);
}

/* An fp32 slot the form writes in place: set and not bf16. */
static int qt_x16_f32(const qt_ctx *ctx, int32_t id)
{
    return id != QT_NONE && ctx->plan->tensors[id].dtype != QT_BF16;
}

/* XENT: runs = sequences; the z term on every run (f0), into z_seq[s]. */
void qt_op16_xent(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t nb = QT_A(op, XENT, nb), nseq = QT_A(op, XENT, b), S = QT_A(op, XENT, S);
    const int32_t lid = QT_T(op, XENT, loss_seq), zid = QT_T(op, XENT, z_seq),
                  sid = QT_T(op, XENT, scratch);
    const float z = op->f[0];
    const int ok = qt_x16_f32(ctx, lid) && (z == 0.0f || qt_x16_f32(ctx, zid)) &&
                   (nb <= 0 || qt_x16_f32(ctx, sid));
    const qt_x16 x = {qt_i32(ctx, QT_T(op, XENT, targets)), ok ? qt_f32(ctx, lid) : 0,
                      ok && z != 0.0f ? qt_f32(ctx, zid) : 0, z, 1, 0.0f, 0, nseq, S,
                      QT_A(op, XENT, V), nb, (unsigned)QT_A(op, XENT, mask),
                      ok && nb > 0 ? qt_f32(ctx, sid) : 0};
    if (!ok || qt_x16_run(ctx, &x, QT_T(op, XENT, dlogits), QT_T(op, XENT, logits)))
        qt_r16_boundary(op, ctx);
}

/* XENT_MTP: runs (s, j) = r = s*n + j into the entries ent[r] (the scratch's first b*n
 * floats); the MTP runs' dlogits times the scale; the z term on the main runs (f1) into
 * z_seq[s]; then the fp32 wrapper's loss_seq / mtp_loss_seq sums (ops_basic.c). */
void qt_op16_xent_mtp(const qt_op *op, const qt_ctx *ctx)
{
    const int64_t b = QT_A(op, XENT_MTP, b), n = QT_A(op, XENT_MTP, n),
                  nb = QT_A(op, XENT_MTP, nb);
    const int32_t sid = QT_T(op, XENT_MTP, scratch), zid = QT_T(op, XENT_MTP, z_seq),
                  cid = QT_T(op, XENT_MTP, scale), lid = QT_T(op, XENT_MTP, loss_seq),
                  mid = QT_T(op, XENT_MTP, mtp_loss_seq);
    const float z = op->f[1];
    const int ok = qt_x16_f32(ctx, sid) && qt_x16_f32(ctx, lid) && qt_x16_f32(ctx, mid) &&
                   (z == 0.0f || qt_x16_f32(ctx, zid)) && (cid == QT_NONE || qt_x16_f32(ctx, cid));
    float *ent = ok ? qt_f32(ctx, sid) : 0;
    const float c = !ok ? 0.0f : cid == QT_NONE ? op->f[0] : *qt_f32(ctx, cid);
    const qt_x16 x = {qt_i32(ctx, QT_T(op, XENT_MTP, targets)), ent,
                      ok && z != 0.0f ? qt_f32(ctx, zid) : 0, z, n, c, n, b * n,
                      QT_A(op, XENT_MTP, S), QT_A(op, XENT_MTP, V), nb,
                      (unsigned)QT_A(op, XENT_MTP, mask), ent ? ent + b * n : 0};
    if (!ok || qt_x16_run(ctx, &x, QT_T(op, XENT_MTP, dlogits), QT_T(op, XENT_MTP, logits))) {
        qt_r16_boundary(op, ctx);
        return;
    }
    qt_op_xent_mtp_sums(op, ctx, ent);
}
