/* ops_mtp_accept.c - the op wrapper of MTP_ACCEPT (qt_ops.def; docs/model.md 1.8): the MTP
 * head's acceptance counts in the held-out eval, MaxText's calculate_mtp_acceptance_rate
 * (mtp_eval_target_module k): depth k's prediction at position t (the first index of the
 * maximum of its logits row, jnp.argmax) against the main model's at t + k, over the
 * positions where depth k has a loss.
 *
 * Invariants: exact on every mesh: the predictions are comparisons of the logits only
 * (kernels/argmax.h), the vocabulary shards' (max, index) pairs and the context ranks'
 * halos are all-gathered copies merged in group order, the counts are integers (the
 * runtime sums them over the batch axes); every rank of a vocabulary group computes the
 * same counts. A training microbatch (ctx->eval 0) skips the op: no work, no collective.
 * A failed exchange stores its code in ctx->status. The plan is trusted (configgen sizes
 * the scratch: QT_MTP_ACCEPT_SCRATCH).
 */
#include <string.h>
#include "qt_op_fns.h"
#include "../comm/qt_coll.h"
#include "kernels/argmax.h"

/* The winner of row `row` of the logits on this rank: (value, global index v0 + i). */
static void qt_mtp_accept_local(const qt_ctx *ctx, int32_t lid, int64_t row, int64_t V,
                                int64_t v0, int32_t *pair)
{
    float v;
    int64_t i;
    if (qt_is_b16(ctx, lid) && !ctx->stage) {
        const uint16_t *x = qt_b16(ctx, lid) + row * V;
        i = qt_argmax_b16(x, V);
        const uint32_t u = (uint32_t)x[i] << 16;
        memcpy(&v, &u, sizeof v);
    } else {
        const float *x = qt_f32(ctx, lid) + row * V;
        i = qt_argmax_f32(x, V);
        v = x[i];
    }
    memcpy(&pair[0], &v, sizeof v);
    pair[1] = (int32_t)(v0 + i);
}

/* The merged prediction of row r from the P ranks' pairs (rank s's at pairs + s * blk),
 * in group order: the first index of the whole row's maximum. */
static int32_t qt_mtp_accept_merge(const int32_t *pairs, int64_t r, int64_t blk, int64_t P)
{
    float v;
    memcpy(&v, &pairs[2 * r], sizeof v);
    int32_t i = pairs[2 * r + 1];
    for (int64_t s = 1; s < P; s++) {
        const int32_t *q = pairs + s * blk + 2 * r;
        float w;
        memcpy(&w, &q[0], sizeof w);
        if (qt_argmax_beats(w, q[1], v, i)) {
            v = w;
            i = q[1];
        }
    }
    return i;
}

static void qt_mtp_accept_fail(const qt_ctx *ctx, int rc)
{
    if (ctx->status && !*ctx->status) *ctx->status = rc;
}

/* MTP_ACCEPT: t0 acc I32[2] (matches, positions); t1 logits; t2 targets; t3 scratch. */
void qt_op_mtp_accept(const qt_op *op, const qt_ctx *ctx)
{
    if (!ctx->eval) return;
    const int64_t nbk = QT_A(op, MTP_ACCEPT, b), S = QT_A(op, MTP_ACCEPT, S),
                  V = QT_A(op, MTP_ACCEPT, V), n = QT_A(op, MTP_ACCEPT, n),
                  k = QT_A(op, MTP_ACCEPT, k), St = QT_A(op, MTP_ACCEPT, St);
    const unsigned vm = (unsigned)QT_A(op, MTP_ACCEPT, mask),
                   cm = (unsigned)QT_A(op, MTP_ACCEPT, cmask);
    const int32_t lid = QT_T(op, MTP_ACCEPT, logits);
    const int32_t *tg = qt_i32(ctx, QT_T(op, MTP_ACCEPT, targets));
    const int64_t R = nbk * S, nq = R / St, kk = k < St ? k : St;
    const int64_t P = vm ? qt_comm_group_size(vm) : 1, me = vm ? qt_comm_group_index(vm) : 0;
    const int64_t C = cm ? qt_comm_group_size(cm) : 1, c = cm ? qt_comm_group_index(cm) : 0;
    int32_t *pairs = qt_i32(ctx, QT_T(op, MTP_ACCEPT, scratch));
    int32_t *pred = pairs + 4 * P * R, *halo = pred + 2 * R;
    /* rows r < R: part 0's row r (block r / S, row r % S); r >= R: part k's row r - R */
    for (int64_t r = 0; r < 2 * R; r++) {
        const int64_t rr = r < R ? r : r - R, part = r < R ? 0 : k;
        const int64_t row = (rr / S * n + part) * S + rr % S;
        qt_mtp_accept_local(ctx, lid, row, V, me * V, pairs + me * 4 * R + 2 * r);
    }
    int rc = P > 1 ? qt_coll_all_gather(vm, pairs, 4 * R * (int64_t)sizeof *pairs) : 0;
    if (rc) {
        qt_mtp_accept_fail(ctx, rc);
        return;
    }
    for (int64_t r = 0; r < 2 * R; r++) pred[r] = qt_mtp_accept_merge(pairs, r, 4 * R, P);
    /* part 0's row of local position u of sequence q is q * St + u (its blocks are
     * consecutive); the halo: this rank's first kk of each sequence, at context index c */
    for (int64_t q = 0; q < nq; q++)
        for (int64_t j = 0; j < kk; j++) halo[(c * nq + q) * kk + j] = pred[q * St + j];
    rc = C > 1 ? qt_coll_all_gather(cm, halo, nq * kk * (int64_t)sizeof *halo) : 0;
    if (rc) {
        qt_mtp_accept_fail(ctx, rc);
        return;
    }
    int64_t hit = 0, valid = 0;
    for (int64_t q = 0; q < nq; q++)
        for (int64_t u = 0; u < St; u++) {
            const int64_t r = q * St + u;
            if (tg[(r / S * n + k) * S + r % S] < 0) continue;
            valid++;
            /* a target of depth k at u is the token u + k + 1 of the sequence, so u + k lies
             * inside it: here, or on context rank cr > c at its position j < kk */
            const int64_t w = u + k, g = c * St + w, cr = g / St, j = g % St;
            int32_t main_pred = -1;
            if (w < St) main_pred = pred[q * St + w];
            else if (cr < C && j < kk) main_pred = halo[(cr * nq + q) * kk + j];
            hit += main_pred >= 0 && pred[R + r] == main_pred;
        }
    int32_t *acc = qt_i32(ctx, QT_T(op, MTP_ACCEPT, acc));
    acc[0] = (int32_t)hit;
    acc[1] = (int32_t)valid;
}
