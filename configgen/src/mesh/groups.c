/* mesh/groups.c - groups of the plan's mesh: a group is a bitmask of enum qt_mesh_axis (the
 * ranks that differ only along those axes); its size and its printable name.
 * Invariant: a mask names only axes of qtrain's mesh; the empty mask is the group of one
 * rank (size 1, name "-").
 */
#include <stdio.h>
#include "core/qt_cg.h"
#include "mesh/qt_cg_mesh.h"

int64_t qt_cg_group_size(const qt_cg_settings *s, unsigned mask)
{
    int64_t r = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1u << a)) r *= s->mesh[a];
    return r;
}

const char *qt_cg_mask_name(unsigned mask, char *buf, size_t n)
{
    static const char *const names[QT_MESH_COUNT] = {"data", "fsdp", "tensor", "expert",
                                                     "context"};
    size_t k = 0;
    buf[0] = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if (mask & (1u << a) && k < n)
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? "," : "", names[a]);
    if (!k) snprintf(buf, n, "-");
    return buf;
}
