/* qt_cg_slots.c - configgen's view of the op registry (firmware/include/qt_ops.def): the
 * slot roles and the name of each op kind. The liveness planner, the schedule checks and
 * plan.txt read them; they come from the same rows as the firmware's kernel table, so the
 * two cannot disagree.
 */
#include "qt_cg.h"

static const char *const slots[QT_OP_COUNT] = {
#define QT_OP(e, name, cls, sl) [QT_OP_##e] = sl,
#include "qt_ops.def"
#undef QT_OP
};

static const char *const names[QT_OP_COUNT] = {
#define QT_OP(e, name, cls, sl) [QT_OP_##e] = #name,
#include "qt_ops.def"
#undef QT_OP
};

static const unsigned char classes[QT_OP_COUNT] = {
#define QT_OP(e, name, cls, sl) [QT_OP_##e] = QT_OPC_##cls,
#include "qt_ops.def"
#undef QT_OP
};

const char *qt_cg_op_slots(int kind)
{
    return kind >= 0 && kind < QT_OP_COUNT && slots[kind] ? slots[kind] : "";
}

const char *qt_cg_op_name(int kind)
{
    return kind >= 0 && kind < QT_OP_COUNT && names[kind] ? names[kind] : "?";
}

int qt_cg_op_class(int kind)
{
    return kind >= 0 && kind < QT_OP_COUNT ? classes[kind] : QT_OPC_NONE;
}
