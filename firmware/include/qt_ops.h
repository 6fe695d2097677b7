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
 *  - WGRAD ops compute a weight gradient for ONE leaf: one canonical token block of one
 *    sequence (the plan's context_blocks nbt blocks of S/nbt tokens per sequence, 1 block
 *    = the whole sequence in plans without them; docs/context.md). The interpreter calls
 *    the wgrad wrapper once per leaf s of the microbatch (b x nbt leaves, in (sequence,
 *    block) order: sequence s / nbt, block s % nbt) and pushes each result as a leaf into
 *    that parameter's pairwise tree (docs/design.md s.6). a[7] > 0 overrides the number of
 *    leaves per microbatch (an expert host computes the leaves of every block of its
 *    expert group's sequences); leaf = microbatch * count + s. A wgrad wrapper therefore
 *    reads the rows of its block only: its rows-per-leaf attribute is the block's (the
 *    GDN convolution, whose causal window reaches the K-1 tokens of its sequence before
 *    the block, and the per-head norms read nbt and S from the plan). Kinds with
 *    QT_OPP_WGRAD_WRITES in their row (the dense and
 *    expert matmuls: nearly all parameters) write every element of dW (the interpreter
 *    does not zero it); the others (embedding rows, norm, conv and gate weights) accumulate
 *    into a dW the interpreter zeroed. WGRAD ops carry QT_OPF_WGRAD and name their
 *    parameters in t[] slots listed below; the parameter index (into plan->params) of
 *    slot p is in a[8] (first) and a[9] (second, or -1): QT_A_WGRAD_SEQS = 7,
 *    QT_A_WGRAD_PARAM = 8 (+ 1 for the second).
 *  - Reductions run in a fixed, documented order (noted per op) so bits never depend on
 *    anything but the inputs. Where a row says a multiply-add is fused (the matmuls, and
 *    attention's dots and sums since 2026-12-02: ATTN_FWD / ATTN_BWD), it is one FMA with a
 *    single rounding, written out in the kernel (the builds use -ffp-contract=off, so no
 *    other multiply and add is ever fused).
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
#include "qt_leaf_carry.h"

#define QT_OPF_WGRAD 0x1u
#define QT_OPF_MOVED 0x2u  /* configgen only (schedule/overlap.c): a PARAM_GATHER issued one
                              layer early or a GRAD_MB_PUSH one layer late, so that their
                              collectives overlap compute; scan_layers counts it in the layer
                              of the op before it. The firmware ignores it. */
#define QT_OPF_PREV_MB 0x4u /* a COLL_WAIT or GRAD_MB_PUSH completing the previous
                              microbatch's split microbatch-end reduce-scatter, or a
                              GRAD_MB_UNITS_WAIT its split units exchange (collective_
                              overlap all, docs/overlap.md): in the microbatch schedule skipped
                              in microbatch 0 and run for microbatch mb - 1; in the step
                              schedule run for the last microbatch G - 1 */
#define QT_RMSNORM_ZERO_CENTRED 0x1   /* a[4] flag: scale by (1 + w) instead of w */
#define QT_GATE_HEADS 0               /* SIGMOID_GATE a[2]: gate interleaved in q_proj output */
#define QT_GATE_ROW 1                 /* SIGMOID_GATE a[2]: one gate scalar per row */

/* What the interpreter calls for a kind (qt_ops.def CLASS column). */
enum qt_op_class { QT_OPC_NONE = 0, QT_OPC_RUN, QT_OPC_WGRAD, QT_OPC_STEP };

/* Per-kind properties (qt_ops.def PROPS column). */
#define QT_OPP_WGRAD_WRITES 0x01u /* WGRAD: the wrapper writes its leaves (none zeroed) */
#define QT_OPP_RANGE 0x02u        /* a0, a1: flat ranges [a0, a1) (a1 = 0: every range) */
#define QT_OPP_SCAN_RANGE 0x04u   /* scan_layers: belongs to the layer of flat range a0 */
#define QT_OPP_SCAN_PREV 0x08u    /* scan_layers: belongs to the layer of the op before it */
#define QT_OPP_NORM 0x10u         /* step: the gradient normalisation (one per schedule) */
#define QT_OPP_UPDATE 0x20u       /* step: the optimizer update (one per step) */
#define QT_OPP_BF16 0x40u         /* bf16 plans: the wrapper handles bf16 slots (native) */
#define QT_OPP_BF16_PSTAGE 0x80u  /* with BF16: the parameter slots still count in the bf16
                                     staging size, as for the boundary (the native form takes
                                     its row buffers from that region; plans keep their size) */

/* The attributes every WGRAD kind shares (see above). */
#define QT_A_WGRAD_SEQS 7
#define QT_A_WGRAD_PARAM 8

/* The op kinds, one per row of qt_ops.def (read it for each kind's slots and attributes). */
enum qt_op_kind {
#define QT_OP(e, name, cls, slots, props, check, tn, an) QT_OP_##e,
#include "qt_ops.def"
#undef QT_OP
    QT_OP_COUNT
};

/* The kinds that run nothing: NOP, and the circular pipeline's chunk markers (PP_CHUNK,
 * read by firmware/runtime/pipeline.c). */
static inline int qt_op_inert(unsigned kind)
{
    return kind == QT_OP_NOP || kind == QT_OP_PP_CHUNK;
}

/* Named slots and attributes. For each row, QT_T_<ENUM>_<slot> and QT_A_<ENUM>_<attribute>
 * are the indices of its named slots and attributes, in row order; use them through
 *     QT_T(op, MATMUL_FWD, x)    the tensor id in slot x of a MATMUL_FWD op (an lvalue)
 *     QT_A(op, MATMUL_FWD, K)    its attribute K (an lvalue)
 * which configgen writes and the wrappers read, so a slot has one name on both sides. */
#define QT_T(op, e, slot) ((op)->t[QT_T_##e##_##slot])
#define QT_A(op, e, attr) ((op)->a[QT_A_##e##_##attr])

/* Preprocessor helpers: QT_PP_NARG counts its arguments (0..12), QT_PP_MAP(m, p, ...)
 * expands to m(p, x) for each argument x. */
#define QT_PP_NARG(...) QT_PP_NARG_(__VA_ARGS__ __VA_OPT__(,) 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define QT_PP_NARG_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, n, ...) n
#define QT_PP_CAT(a, b) QT_PP_CAT_(a, b)
#define QT_PP_CAT_(a, b) a##b
#define QT_PP_ID(...) __VA_ARGS__
#define QT_PP_MAP(m, p, ...) QT_PP_CAT(QT_PP_MAP_, QT_PP_NARG(__VA_ARGS__))(m, p, __VA_ARGS__)
#define QT_PP_MAP_0(m, p, ...)
#define QT_PP_MAP_1(m, p, x) m(p, x)
#define QT_PP_MAP_2(m, p, x, ...) m(p, x) QT_PP_MAP_1(m, p, __VA_ARGS__)
#define QT_PP_MAP_3(m, p, x, ...) m(p, x) QT_PP_MAP_2(m, p, __VA_ARGS__)
#define QT_PP_MAP_4(m, p, x, ...) m(p, x) QT_PP_MAP_3(m, p, __VA_ARGS__)
#define QT_PP_MAP_5(m, p, x, ...) m(p, x) QT_PP_MAP_4(m, p, __VA_ARGS__)
#define QT_PP_MAP_6(m, p, x, ...) m(p, x) QT_PP_MAP_5(m, p, __VA_ARGS__)
#define QT_PP_MAP_7(m, p, x, ...) m(p, x) QT_PP_MAP_6(m, p, __VA_ARGS__)
#define QT_PP_MAP_8(m, p, x, ...) m(p, x) QT_PP_MAP_7(m, p, __VA_ARGS__)
#define QT_PP_MAP_9(m, p, x, ...) m(p, x) QT_PP_MAP_8(m, p, __VA_ARGS__)
#define QT_PP_MAP_10(m, p, x, ...) m(p, x) QT_PP_MAP_9(m, p, __VA_ARGS__)
#define QT_PP_MAP_11(m, p, x, ...) m(p, x) QT_PP_MAP_10(m, p, __VA_ARGS__)
#define QT_PP_MAP_12(m, p, x, ...) m(p, x) QT_PP_MAP_11(m, p, __VA_ARGS__)
#define QT_PP_TNAME(e, n) QT_T_##e##_##n,
#define QT_PP_ANAME(e, n) QT_A_##e##_##n,
#define QT_OP(e, name, cls, slots, props, check, tn, an) \
    enum { QT_PP_MAP(QT_PP_TNAME, e, QT_PP_ID tn) QT_T_##e##_COUNT_ }; \
    enum { QT_PP_MAP(QT_PP_ANAME, e, QT_PP_ID an) QT_A_##e##_COUNT_ };
#include "qt_ops.def"
#undef QT_OP

/* Every row's slot string fits an op record and names each of its slots; its attributes
 * fit too, and a WGRAD kind's stop before the common a7. */
#ifdef __cplusplus
#define QT_STATIC_ASSERT static_assert
#else
#define QT_STATIC_ASSERT _Static_assert
#endif
#define QT_OP(e, name, cls, slots, props, check, tn, an) \
    QT_STATIC_ASSERT(sizeof(slots) - 1 <= QT_OP_MAX_T, "qt_ops.def: too many slots for " #e); \
    QT_STATIC_ASSERT(sizeof(slots) - 1 == QT_T_##e##_COUNT_, "qt_ops.def: slot names of " #e); \
    QT_STATIC_ASSERT(QT_A_##e##_COUNT_ <= (QT_OPC_##cls == QT_OPC_WGRAD ? QT_A_WGRAD_SEQS \
                                                                        : QT_OP_MAX_A),     \
                     "qt_ops.def: too many attributes for " #e);
#include "qt_ops.def"
#undef QT_OP

/* The step state that STEP wrappers read and write (firmware/runtime/qt_step.h). */
typedef struct qt_step_state qt_step_state;

/* Op wrappers. `run` executes a forward, backward or init op. `wgrad` computes the weight
 * gradient(s) of one sequence `seq` of the microbatch into dw[0] (and dw[1]): without
 * QT_OPP_WGRAD_WRITES in the kind's props the caller has zeroed them and the wrapper
 * accumulates; with it the caller has not, and the wrapper writes every element with the
 * bits accumulating into zeros would give ((+0) + sum, +0 where nothing contributes).
 * A writing wrapper may also find, in ctx->wgrad_epi, the leaf-tree carry of an odd leaf
 * offered per slot (qt_leaf_carry.h): applying it stores the pushed tree level instead of
 * dw[k] (and sets done[k]); ignoring it is always correct. Before the op's first sequence
 * the offer may also hold every leaf of the op (qt_wgrad_epi.leaves): a wrapper that writes
 * them all in that call sets leaves->done and is not called for the other sequences.
 * `step` runs a step-schedule op and returns 0 or a negative QT_E_* code (qt_err.h);
 * collectives can fail (a silent peer). `check` (CHECK kinds) is called once per op of the
 * plan at start-up, before anything runs: 0 when the op fits the plan and the kernel's
 * limits, else nonzero with the reason in st->why; it reads the plan and the op and
 * writes only *st (the counters of the schedule being checked). */
typedef void (*qt_run_fn)(const qt_op *op, const qt_ctx *ctx);
typedef void (*qt_wgrad_fn)(const qt_op *op, const qt_ctx *ctx, int64_t seq, float *const dw[2]);
typedef int (*qt_step_fn)(const qt_op *op, const qt_ctx *ctx, qt_step_state *st);

/* What a check hook reports back (reset by the caller per schedule, `why` per op). */
typedef struct qt_check_state {
    int32_t n_norm, n_update;   /* QT_OPP_NORM / QT_OPP_UPDATE ops seen */
    uint8_t *pushed;            /* per flat range: microbatch-tree pushes (saturating) */
    char why[200];              /* the reason an op does not fit */
} qt_check_state;
typedef int (*qt_check_fn)(const qt_plan *p, const qt_op *op, qt_check_state *st);

typedef struct qt_kernel_entry {
    const char *name;
    uint8_t cls;          /* enum qt_op_class */
    qt_run_fn run;        /* RUN kinds only */
    qt_wgrad_fn wgrad;    /* WGRAD kinds only */
    qt_step_fn step;      /* STEP kinds only */
    qt_check_fn check;    /* CHECK kinds only */
    uint32_t props;       /* QT_OPP_* */
    const char *slots;    /* the slot letters of the kind's qt_ops.def row */
} qt_kernel_entry;

/* Indexed by enum qt_op_kind (firmware/runtime/op_table.c, generated from qt_ops.def). */
extern const qt_kernel_entry qt_kernel_table[QT_OP_COUNT];

#endif
