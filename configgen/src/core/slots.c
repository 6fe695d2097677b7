/* core/slots.c - configgen's view of the op registry (firmware/include/qt_ops.def): the
 * slot roles, the name, class and properties (QT_OPP_*) of each op kind. The liveness planner, the schedule checks and
 * plan.txt read them; they come from the same rows as the firmware's kernel table, so the
 * two cannot disagree.
 */
#include <string.h>
#include "core/qt_cg.h"

static const char *const slots[QT_OP_COUNT] = {
#define QT_OP(e, name, cls, sl, props, check, tn, an) [QT_OP_##e] = sl,
#include "qt_ops.def"
#undef QT_OP
};

static const char *const names[QT_OP_COUNT] = {
#define QT_OP(e, name, cls, sl, props, check, tn, an) [QT_OP_##e] = #name,
#include "qt_ops.def"
#undef QT_OP
};

static const unsigned char classes[QT_OP_COUNT] = {
#define QT_OP(e, name, cls, sl, props, check, tn, an) [QT_OP_##e] = QT_OPC_##cls,
#include "qt_ops.def"
#undef QT_OP
};

static const unsigned props_of[QT_OP_COUNT] = {
#define QT_OP(e, name, cls, sl, props, check, tn, an) [QT_OP_##e] = (props),
#include "qt_ops.def"
#undef QT_OP
};

/* The roles in lower case (upper case in qt_ops.def marks an optional slot). */
const char *qt_cg_op_slots(int kind)
{
    static char lower[QT_OP_COUNT][QT_OP_MAX_T + 1];
    if (kind < 0 || kind >= QT_OP_COUNT || !slots[kind]) return "";
    if (!lower[kind][0])
        for (int i = 0; slots[kind][i] && i < QT_OP_MAX_T; i++)
            lower[kind][i] = (char)(slots[kind][i] >= 'A' && slots[kind][i] <= 'Z'
                                        ? slots[kind][i] - 'A' + 'a' : slots[kind][i]);
    return lower[kind];
}

int qt_cg_op_slot_optional(int kind, int slot)
{
    if (kind < 0 || kind >= QT_OP_COUNT || !slots[kind] || slot < 0 ||
        slot >= (int)strlen(slots[kind]))
        return 0;
    return slots[kind][slot] >= 'A' && slots[kind][slot] <= 'Z';
}

const char *qt_cg_op_name(int kind)
{
    return kind >= 0 && kind < QT_OP_COUNT && names[kind] ? names[kind] : "?";
}

int qt_cg_op_class(int kind)
{
    return kind >= 0 && kind < QT_OP_COUNT ? classes[kind] : QT_OPC_NONE;
}

unsigned qt_cg_op_props(int kind)
{
    return kind >= 0 && kind < QT_OP_COUNT ? props_of[kind] : 0u;
}
