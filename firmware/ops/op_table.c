/* op_table.c - the kernel table: op kind -> wrapper, generated from qt_ops.def.
 * Invariant: each kind has exactly the wrapper its CLASS names (run, wgrad or step) and
 * no other; NOP has none. RUN and WGRAD wrappers live in firmware/ops/, STEP wrappers in
 * firmware/runtime/step_ops.c (they own the step's state). The interpreter refuses a plan
 * that uses a kind without the wrapper its slot in the schedule needs.
 */
#include "qt_op_fns.h"

/* Whether each WGRAD wrapper writes its leaves (qt_ops.h): the interpreter then skips
 * zeroing them. Every WGRAD kind must say (a missing row does not compile). The sparse or
 * row-wise ones (embedding rows, norm and conv weights) accumulate into zeroed leaves; the
 * dense and expert matmuls, nearly all of the parameters, write theirs. */
#define QT_WGRAD_WRITES_embed_wgrad 0
#define QT_WGRAD_WRITES_rmsnorm_wgrad 0
#define QT_WGRAD_WRITES_matmul_wgrad 1
#define QT_WGRAD_WRITES_gdn_conv_wgrad 0
#define QT_WGRAD_WRITES_gdn_gates_wgrad 0
#define QT_WGRAD_WRITES_gated_rmsnorm_wgrad 0
#define QT_WGRAD_WRITES_expert_ffn_wgrad 1

#define QT_OPE_NONE(name) {#name, QT_OPC_NONE, 0, 0, 0, 0}
#define QT_OPE_RUN(name) {#name, QT_OPC_RUN, qt_op_##name, 0, 0, 0}
#define QT_OPE_WGRAD(name) {#name, QT_OPC_WGRAD, 0, qt_op_##name, 0, QT_WGRAD_WRITES_##name}
#define QT_OPE_STEP(name) {#name, QT_OPC_STEP, 0, 0, qt_step_##name, 0}

const qt_kernel_entry qt_kernel_table[QT_OP_COUNT] = {
#define QT_OP(e, name, cls, slots) [QT_OP_##e] = QT_OPE_##cls(name),
#include "../include/qt_ops.def"
#undef QT_OP
};

/* One row per kind: the designated initialisers above cannot leave a gap unnoticed. */
enum {
#define QT_OP(e, name, cls, slots) QT_OPROW_##e,
#include "../include/qt_ops.def"
#undef QT_OP
    QT_OPROW_COUNT
};
_Static_assert((int)QT_OPROW_COUNT == (int)QT_OP_COUNT, "qt_ops.def rows and enum qt_op_kind differ");
_Static_assert(sizeof qt_kernel_table / sizeof qt_kernel_table[0] == QT_OP_COUNT,
               "kernel table size");
