/* ops_xent_sums.c - XENT_MTP's per-sequence sums (loss_seq and mtp_loss_seq from the b x n
 * per-run cross entropies, in a fixed order), shared by the fp32 wrapper (ops_basic.c) and
 * the bf16 form (ops_bf16_xent.c), declared in qt_ops_bf16.h. In its own file so that
 * neither depends on the other (tests/layers.txt: no circle).
 */
#include "qt_op_fns.h"
#include "qt_ops_bf16.h"

/* XENT_MTP's sums from the b x n entries ent[s*n + j]: loss_seq[s] = entry (s, 0),
 * mtp_loss_seq[s] = entry (s, 1) + entry (s, 2) + ... (j increasing). */
void qt_op_xent_mtp_sums(const qt_op *op, const qt_ctx *ctx, const float *ent)
{
    const int64_t b = QT_A(op, XENT_MTP, b), n = QT_A(op, XENT_MTP, n);
    float *ls = qt_f32(ctx, QT_T(op, XENT_MTP, loss_seq));
    float *ms = qt_f32(ctx, QT_T(op, XENT_MTP, mtp_loss_seq));
    for (int64_t s = 0; s < b; s++) {
        ls[s] = ent[s * n];
        float m = ent[s * n + 1];
        for (int64_t j = 2; j < n; j++) m += ent[s * n + j];
        ms[s] = m;
    }
}
