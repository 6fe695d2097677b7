/* core/axes.c - the MaxText mesh axis vocabulary (docs/sharding.md section 1): the names the
 * logical_axis_rules may use, and which of them qtrain's mesh (enum qt_mesh_axis) has.
 * Settings parse the rules with it (config/), the sharding resolver maps them (mesh/).
 * Invariant: qt_cg_mt_axis_names has QT_CG_N_MT_AXES entries in MaxText's order; the axes
 * qtrain lacks map to -1 (their size is 1).
 */
#include <string.h>
#include "core/qt_cg.h"

const char *const qt_cg_mt_axis_names[QT_CG_N_MT_AXES] = {
    "diloco", "data", "stage", "fsdp", "fsdp_transpose", "context", "context_usp_ulysses",
    "context_autoregressive", "tensor", "tensor_sequence", "expert", "autoregressive",
};

int qt_cg_mt_to_qt(int mt_axis)
{
    switch (mt_axis) {
    case 1: return QT_MESH_DATA;
    case 3: return QT_MESH_FSDP;
    case 5: return QT_MESH_CONTEXT;
    case 8: return QT_MESH_TENSOR;
    case 10: return QT_MESH_EXPERT;
    default: return -1;
    }
}

int qt_cg_mt_axis_id(const char *name)
{
    for (int i = 0; i < QT_CG_N_MT_AXES; i++)
        if (!strcmp(qt_cg_mt_axis_names[i], name)) return i;
    return -1;
}
