/* qt_ops.h - the op kinds of a plan and the exact meaning of every slot of an op record.
 *
 * This file and the registry it includes (qt_ops.def: one row per kind with its slot
 * roles and the exact meaning of every slot and attribute) are the contract between
 * configgen (which emits op records), the firmware (which executes them) and the PyTorch
 * reference (which produces golden values for each op with the same layouts). Change them
 * only together with all three.
 *
 * Conventions
 *  - b = sequences in the microbatch, S = sequence length, T = b*S token rows. Row t belongs
 *    to sequence t / S at position t % S. Every op that mixes tokens (conv, delta rule,
 *    attention, rotary positions) does so only inside one sequence.
 *  - Weights use the Hugging Face layout [out, in]: a projection is y = x W^T.
 *  - "writes" overwrites the output; "accumulates" adds (+=) into it. Every backward
 *    (BWD) op accumulates into activation gradients; configgen zeroes each gradient buffer
 *    with QT_OP_ZERO before its first writer.
 *  - WGRAD ops compute a weight gradient for ONE sequence: the interpreter calls the
 *    wgrad wrapper once per sequence s of the microbatch with zeroed destination buffers,
 *    and pushes each result as a leaf into that parameter's pairwise tree (docs/design.md s.6).
 *    a[7] > 0 overrides the number of sequences per microbatch (an expert host computes
 *    the leaves of every sequence of its expert group); leaf = microbatch * count + s.
 *    A wgrad wrapper therefore reads rows [s*S, (s+1)*S) only and accumulates into dW.
 *    WGRAD ops carry QT_OPF_WGRAD and name their parameters in t[] slots listed below;
 *    the parameter index (into plan->params) of slot p is in a[8] (first) and a[9] (second,
 *    or -1).
 *  - Reductions run in a fixed, documented order (noted per op) so bits never depend on
 *    anything but the inputs.
 *  - r = Hv/Hk (GDN value heads per key head); G = 2*Dk + 2*r*Dv is the width of one key
 *    head group in in_proj_qkvz; Cc = 2*Hk*Dk + Hv*Dv conv channels.
 *  - GDN grouped layouts (exactly HF Qwen3-Next):
 *      qkvz column of q[h][i]      = h*G + i
 *      qkvz column of k[h][i]      = h*G + Dk + i
 *      qkvz column of v[j][i]      = h*G + 2*Dk + u*Dv + i          (j = h*r + u)
 *      qkvz column of z[j][i]      = h*G + 2*Dk + r*Dv + u*Dv + i
 *      ba column of b[j]           = h*2r + u,   of a[j] = h*2r + r + u
 *      conv channel of q[h][i] = h*Dk + i; k[h][i] = Hk*Dk + h*Dk + i;
 *      v[j][i] = 2*Hk*Dk + j*Dv + i.   Value head j reads key head h = j / r.
 *  - Attention q_proj output row is per head [q (hd) | gate (hd)]: q[t][h][i] at
 *    qg[t*Hq*2hd + h*2hd + i], gate at ... + hd + i.
 */
#ifndef QT_OPS_H
#define QT_OPS_H

#include "qt_plan.h"

#define QT_OPF_WGRAD 0x1u
#define QT_RMSNORM_ZERO_CENTRED 0x1   /* a[4] flag: scale by (1 + w) instead of w */
#define QT_GATE_HEADS 0               /* SIGMOID_GATE a[2]: gate interleaved in q_proj output */
#define QT_GATE_ROW 1                 /* SIGMOID_GATE a[2]: one gate scalar per row */

/* The op kinds, one per row of qt_ops.def (read it for each kind's slots and attributes). */
enum qt_op_kind {
#define QT_OP(e, name, cls, slots) QT_OP_##e,
#include "qt_ops.def"
#undef QT_OP
    QT_OP_COUNT
};

/* Every row's slot string fits an op record. */
#ifdef __cplusplus
#define QT_STATIC_ASSERT static_assert
#else
#define QT_STATIC_ASSERT _Static_assert
#endif
#define QT_OP(e, name, cls, slots) \
    QT_STATIC_ASSERT(sizeof(slots) - 1 <= QT_OP_MAX_T, "qt_ops.def: too many slots for " #e);
#include "qt_ops.def"
#undef QT_OP

/* What the interpreter calls for a kind (qt_ops.def CLASS column). */
enum qt_op_class { QT_OPC_NONE = 0, QT_OPC_RUN, QT_OPC_WGRAD, QT_OPC_STEP };

/* The step state that STEP wrappers read and write (firmware/runtime/qt_step.h). */
typedef struct qt_step_state qt_step_state;

/* Op wrappers. `run` executes a forward, backward or init op. `wgrad` computes the weight
 * gradient(s) of one sequence `seq` of the microbatch into dw[0] (and dw[1]): when the kind's
 * `wgrad_writes` is 0 the caller has zeroed them and the wrapper accumulates; when it is 1
 * the caller has not, and the wrapper writes every element with the bits accumulating into
 * zeros would give ((+0) + sum, +0 where nothing contributes). `step` runs a step-schedule
 * op and returns 0 or a negative QT_E_* code (qt_err.h); collectives can fail (a silent
 * peer). */
typedef void (*qt_run_fn)(const qt_op *op, const qt_ctx *ctx);
typedef void (*qt_wgrad_fn)(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
typedef int (*qt_step_fn)(const qt_op *op, const qt_ctx *ctx, qt_step_state *st);

typedef struct qt_kernel_entry {
    const char *name;
    uint8_t cls;          /* enum qt_op_class */
    qt_run_fn run;        /* RUN kinds only */
    qt_wgrad_fn wgrad;    /* WGRAD kinds only */
    qt_step_fn step;      /* STEP kinds only */
    uint8_t wgrad_writes; /* WGRAD kinds: 1 when the wrapper writes its leaves (see above) */
} qt_kernel_entry;

/* Indexed by enum qt_op_kind (firmware/ops/op_table.c, generated from qt_ops.def). */
extern const qt_kernel_entry qt_kernel_table[QT_OP_COUNT];

#endif
