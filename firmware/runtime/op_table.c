/* runtime/op_table.c - the kernel table: op kind -> wrapper, generated from qt_ops.def.
 * Invariant: each kind has exactly the wrapper its CLASS names (run, wgrad or step) and
 * no other; NOP has none; CHECK kinds have their check hook (qt_check_<name>) and the
 * others none; every kind carries its qt_ops.def props. RUN and WGRAD wrappers live in
 * firmware/ops/, STEP wrappers in runtime/step_ops.c (they own the step's state), so the
 * table is the runtime's: it names wrappers of its own layer and of the layer below. The
 * interpreter refuses a plan that uses a kind without the wrapper its slot in the schedule
 * needs.
 */
#include "../ops/qt_op_fns.h"

#define QT_OPE_NONE(name) 0, 0, 0
#define QT_OPE_RUN(name) qt_op_##name, 0, 0
#define QT_OPE_WGRAD(name) 0, qt_op_##name, 0
#define QT_OPE_STEP(name) 0, 0, qt_step_##name
#define QT_OPK_CHECK(name) qt_check_##name
#define QT_OPK_NOCHECK(name) 0

const qt_kernel_entry qt_kernel_table[QT_OP_COUNT] = {
#define QT_OP(e, name, cls, slots, props, check, tn, an) \
    [QT_OP_##e] = {#name, QT_OPC_##cls, QT_OPE_##cls(name), QT_OPK_##check(name), (props), \
                    slots},
#include "../include/qt_ops.def"
#undef QT_OP
};

/* One row per kind: the designated initialisers above cannot leave a gap unnoticed. */
enum {
#define QT_OP(e, name, cls, slots, props, check, tn, an) QT_OPROW_##e,
#include "../include/qt_ops.def"
#undef QT_OP
    QT_OPROW_COUNT
};
_Static_assert((int)QT_OPROW_COUNT == (int)QT_OP_COUNT, "qt_ops.def rows and enum qt_op_kind differ");
_Static_assert(sizeof qt_kernel_table / sizeof qt_kernel_table[0] == QT_OP_COUNT,
               "kernel table size");
