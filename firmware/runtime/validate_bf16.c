/* validate_bf16.c - start-up checks of a plan's compute dtype (qt_validate.h): an fp32 plan
 * holds no bf16 tensor; a bf16 plan's staging region holds every op's boundary staging
 * (interp_bf16.c), and the slots the native bf16 wrappers read as bf16 (or, for partial
 * sums, as fp32) have those dtypes (qt_ops.def, "bf16 plans" lines).
 *
 * Invariants: reads the plan only; one line naming the plan, the op and the slot on the
 * first misfit, QT_E_PLAN.
 */
#include <stdio.h>
#include "qt_validate.h"
#include "qt_interp_bf16.h"
#include "qt_err.h"

/* A slot whose dtype a native bf16 wrapper relies on. */
typedef struct {
    uint16_t kind;
    int8_t slot;
    uint8_t dtype;
} qt_vb_slot;

#define QT_VB(ENUM, s, dt) {QT_OP_##ENUM, QT_T_##ENUM##_##s, dt}
static const qt_vb_slot qt_vb_slots[] = {
    QT_VB(MATMUL_FWD, y, QT_BF16),         QT_VB(MATMUL_BWD_DATA, dx, QT_BF16),
    QT_VB(MATMUL_FWD, x, QT_BF16),         QT_VB(MATMUL_FWD, w, QT_BF16),
    QT_VB(MATMUL_BWD_DATA, dy, QT_BF16),   QT_VB(MATMUL_BWD_DATA, w, QT_BF16),
    QT_VB(MATMUL_WGRAD, dy, QT_BF16),      QT_VB(MATMUL_WGRAD, x, QT_BF16),
    QT_VB(EMBED_FWD, x, QT_BF16),          QT_VB(EMBED_FWD, w, QT_BF16),
    QT_VB(EXPERT_FFN_FWD, gu, QT_BF16),    QT_VB(EXPERT_FFN_FWD, x, QT_BF16),
    QT_VB(EXPERT_FFN_FWD, w_gu, QT_BF16),  QT_VB(EXPERT_FFN_FWD, w_down, QT_BF16),
    QT_VB(EXPERT_FFN_BWD, dy, QT_BF16),    QT_VB(EXPERT_FFN_BWD, gu, QT_BF16),
    QT_VB(EXPERT_FFN_BWD, w_gu, QT_BF16),  QT_VB(EXPERT_FFN_BWD, w_down, QT_BF16),
    QT_VB(EXPERT_FFN_BWD, dgu, QT_BF16),   QT_VB(EXPERT_FFN_WGRAD, dy, QT_BF16),
    QT_VB(EXPERT_FFN_WGRAD, x, QT_BF16),   QT_VB(EXPERT_FFN_WGRAD, gu, QT_BF16),
    QT_VB(EXPERT_FFN_WGRAD, dgu, QT_BF16), QT_VB(MOE_DISPATCH_FWD, xr, QT_BF16),
    QT_VB(MOE_DISPATCH_FWD, x, QT_BF16),   QT_VB(MOE_RETURN_FWD, y, QT_BF16),
    QT_VB(MOE_RETURN_FWD, yr, QT_BF16),    QT_VB(MOE_RETURN_BWD, dyr, QT_BF16),
    QT_VB(MOE_RETURN_BWD, dy, QT_BF16),    QT_VB(MOE_DISPATCH_BWD, dx, QT_BF16),
    QT_VB(MOE_DISPATCH_BWD, dxr, QT_F32),  QT_VB(ALL_REDUCE, buf, QT_F32),
    QT_VB(CTX_TO_HEADS, y, QT_BF16),       QT_VB(CTX_TO_HEADS, x, QT_BF16),
    QT_VB(CTX_TO_HEADS_BWD, dx, QT_BF16),  QT_VB(CTX_TO_HEADS_BWD, dy, QT_BF16),
    QT_VB(CTX_TO_TOKENS, y, QT_BF16),      QT_VB(CTX_TO_TOKENS, x, QT_BF16),
    QT_VB(CTX_TO_TOKENS_BWD, dx, QT_BF16), QT_VB(CTX_TO_TOKENS_BWD, dy, QT_BF16),
    /* kernel scratch the native wrappers hand to fp32 kernels as floats */
    QT_VB(MATMUL_FWD, scratch, QT_F32),    QT_VB(MATMUL_BWD_DATA, scratch, QT_F32),
    QT_VB(EXPERT_FFN_FWD, scratch, QT_F32), QT_VB(EXPERT_FFN_BWD, scratch, QT_F32),
    QT_VB(EXPERT_FFN_WGRAD, scratch, QT_F32), QT_VB(MOE_DISPATCH_FWD, scratch, QT_F32),
    QT_VB(MOE_RETURN_FWD, scratch, QT_F32), QT_VB(MOE_RETURN_BWD, scratch, QT_F32),
    QT_VB(MOE_DISPATCH_BWD, scratch, QT_F32), QT_VB(CTX_TO_HEADS, scratch, QT_F32),
    QT_VB(CTX_TO_HEADS_BWD, scratch, QT_F32), QT_VB(CTX_TO_TOKENS, scratch, QT_F32),
    QT_VB(CTX_TO_TOKENS_BWD, scratch, QT_F32),
    /* the split expert exchanges: the slots of the kind they split */
    QT_VB(MOE_RETURN_START, yr, QT_BF16),
    QT_VB(MOE_RETURN_WAIT, y, QT_BF16),    QT_VB(MOE_RETURN_WAIT, yr, QT_BF16),
    QT_VB(MOE_DISPATCH_BWD_START, dxr, QT_F32),
    QT_VB(MOE_DISPATCH_BWD_WAIT, dx, QT_BF16), QT_VB(MOE_DISPATCH_BWD_WAIT, dxr, QT_F32),
    QT_VB(MOE_RETURN_START, scratch, QT_F32), QT_VB(MOE_RETURN_WAIT, scratch, QT_F32),
    QT_VB(MOE_DISPATCH_BWD_START, scratch, QT_F32), QT_VB(MOE_DISPATCH_BWD_WAIT, scratch, QT_F32),
    QT_VB(MOE_DISPATCH_FWD_START, xr, QT_BF16), QT_VB(MOE_DISPATCH_FWD_START, x, QT_BF16),
    QT_VB(MOE_DISPATCH_FWD_WAIT, xr, QT_BF16), QT_VB(MOE_DISPATCH_FWD_WAIT, x, QT_BF16),
    QT_VB(MOE_RETURN_BWD_START, dyr, QT_BF16), QT_VB(MOE_RETURN_BWD_START, dy, QT_BF16),
    QT_VB(MOE_RETURN_BWD_WAIT, dyr, QT_BF16), QT_VB(MOE_RETURN_BWD_WAIT, dy, QT_BF16),
    QT_VB(MOE_DISPATCH_FWD_START, scratch, QT_F32), QT_VB(MOE_DISPATCH_FWD_WAIT, scratch, QT_F32),
    QT_VB(MOE_RETURN_BWD_START, scratch, QT_F32), QT_VB(MOE_RETURN_BWD_WAIT, scratch, QT_F32),
    /* the row-block forms (ops_bf16_rows.c) read and write each activation slot in its own
     * dtype; the saved statistics are fp32, written and read in place */
    QT_VB(RMSNORM_FWD, rstd, QT_F32),      QT_VB(RMSNORM_BWD, rstd, QT_F32),
    QT_VB(RMSNORM_WGRAD, rstd, QT_F32),    QT_VB(GATED_RMSNORM_FWD, rstd, QT_F32),
    QT_VB(GATED_RMSNORM_BWD, rstd, QT_F32), QT_VB(GATED_RMSNORM_WGRAD, rstd, QT_F32),
    /* the delta rule's saved norms (read in place by the backward) and scratch */
    QT_VB(GDN_CORE_BWD, rq, QT_F32),       QT_VB(GDN_CORE_BWD, rk, QT_F32),
    QT_VB(GDN_CORE_FWD, scratch, QT_F32),  QT_VB(GDN_CORE_BWD, scratch, QT_F32),
};
#undef QT_VB

static const char *qt_vb_name(unsigned dtype)
{
    return dtype == QT_BF16 ? "bf16" : dtype == QT_I32 ? "int32" : "fp32";
}

/* One op of a bf16 plan: its staging fits, its native slots have their dtypes. */
static int qt_vb_op(const qt_plan *p, const qt_kernel_entry *table, const qt_op *op,
                    int32_t i, const char *sched)
{
    if (op->kind >= QT_OP_COUNT || qt_op_inert(op->kind)) return QT_OK; /* interp.c reports */
    const qt_kernel_entry *e = &table[op->kind];
    for (int k = 0; k < QT_OP_MAX_T; k++)
        if (op->t[k] != QT_NONE && (op->t[k] < 0 || op->t[k] >= p->n_tensors)) return QT_OK;
    const int64_t need = qt_bf16_stage_need(p, e, op);
    if (need > p->bf16_stage_elems)
        return qt_fail(QT_E_PLAN, "plan %s: %s op %d (%s) stages %lld floats of bf16 tensors, "
                       "the plan's bf16 staging region holds %lld", p->run_name, sched, i,
                       e->name, (long long)need, (long long)p->bf16_stage_elems);
    for (size_t j = 0; j < sizeof qt_vb_slots / sizeof qt_vb_slots[0]; j++) {
        const qt_vb_slot *v = &qt_vb_slots[j];
        const int32_t id = v->kind == op->kind ? op->t[v->slot] : QT_NONE;
        if (id != QT_NONE && p->tensors[id].dtype != v->dtype)
            return qt_fail(QT_E_PLAN, "plan %s: %s op %d (%s): slot t%d, tensor %s, is %s; the "
                           "bf16 form of the kind reads it as %s (qt_ops.def)", p->run_name,
                           sched, i, e->name, v->slot, p->tensors[id].name,
                           qt_vb_name(p->tensors[id].dtype), qt_vb_name(v->dtype));
    }
    return QT_OK;
}

int qt_validate_bf16(const qt_plan *p, const qt_kernel_entry *table)
{
    int32_t n_bf16 = 0;
    for (int32_t i = 0; i < p->n_tensors; i++) n_bf16 += p->tensors[i].dtype == QT_BF16;
    if (p->dtype == QT_F32) {
        if (!n_bf16) return QT_OK;
        return qt_fail(QT_E_PLAN, "plan %s: dtype float32 but %d bf16 tensors", p->run_name,
                       (int)n_bf16);
    }
    if (p->dtype != QT_BF16)
        return qt_fail(QT_E_PLAN, "plan %s: compute dtype %d (expected float32 or bfloat16)",
                       p->run_name, (int)p->dtype);
    int rc = QT_OK;
    for (int32_t i = 0; i < p->n_init_ops && !rc; i++)
        rc = qt_vb_op(p, table, &p->init_ops[i], i, "init");
    for (qt_mb_cursor c = qt_mb_begin(p); !rc && qt_mb_next(&c);)
        rc = qt_vb_op(p, table, c.op, c.logical, "microbatch");
    return rc;
}
