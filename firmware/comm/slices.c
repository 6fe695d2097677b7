/* slices.c - the start-up check that a multi-slice plan's slices are machines
 * (qt_comm_check_slices, qt_coll.h).
 *
 * A slice's ranks are consecutive (qt_plan.h qt_mesh_coords: slice-major) and its ici axes
 * are meant to run on one machine's fast links, the dcn axes across machines. The launcher
 * decides where ranks run, so qtrain can only look: every rank hashes its host name, the
 * hashes are all-gathered over the world, and rank 0 notes a slice whose ranks run on
 * several hosts (its fast collectives then cross the network) or several slices on one
 * host (fine for a test on one machine). Notes, never errors: the bits do not depend on
 * where ranks run. Invariants: no heap; one static struct; at most QT_SLICES_MAX_RANKS
 * ranks are checked (above that the check is skipped with a note).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qt_coll.h"
#include "qt_err.h"
#include "qt_hash64.h"

#define QT_SLICES_MAX_RANKS 4096

static struct {
    uint64_t host[QT_SLICES_MAX_RANKS];  /* host-name hash by world group index */
    char name[256];
} qt_sl;

/* The world group index of world rank r (QT_COLL_ALL numbers members by coordinates). */
static int qt_slices_index(const int32_t *mesh, const int32_t *dcn, int r)
{
    int32_t c[QT_MESH_COUNT];
    qt_mesh_coords(mesh, dcn, r, c);
    int64_t gi = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++) gi = gi * mesh[a] + c[a];
    return (int)gi;
}

/* Rank 0's notes over the gathered hashes: slices spanning hosts, hosts holding slices. */
static void qt_slices_notes(const int32_t *mesh, const int32_t *dcn, int size, int64_t ns)
{
    const int per = (int)(size / ns);
    int shared = -1;
    for (int s = 0; s < ns; s++) {
        const uint64_t h0 = qt_sl.host[qt_slices_index(mesh, dcn, s * per)];
        for (int r = s * per + 1; r < (s + 1) * per; r++)
            if (qt_sl.host[qt_slices_index(mesh, dcn, r)] != h0) {
                qt_note("slice %d (ranks %d..%d) runs on more than one machine (ranks %d and %d "
                        "on different hosts): its ici axes then cross the network; give each "
                        "machine the ranks of one slice, in order (README \"Several "
                        "machines\")", s, s * per, (s + 1) * per - 1, s * per, r);
                break;
            }
        for (int t = 0; t < s && shared < 0; t++)
            if (qt_sl.host[qt_slices_index(mesh, dcn, t * per)] == h0) shared = s;
    }
    if (shared >= 0)
        qt_note("%lld slices of %d rank%s, and some share a machine (rank 0 runs on %s): the "
                "dcn axes then run over that machine's links (fine for a test on one machine)",
                (long long)ns, per, per == 1 ? "" : "s", qt_sl.name);
}

int qt_comm_check_slices(const int32_t *mesh, const int32_t *dcn, int rank, int size)
{
    const int64_t ns = qt_mesh_slices(dcn);
    if (ns <= 1 || size <= 1) return QT_OK;
    if (size > QT_SLICES_MAX_RANKS) {
        if (rank == 0)
            qt_note("%d ranks: the check that each slice runs on one machine is skipped "
                    "(it covers up to %d ranks)", size, QT_SLICES_MAX_RANKS);
        return QT_OK;
    }
    if (gethostname(qt_sl.name, sizeof qt_sl.name - 1) != 0) snprintf(qt_sl.name, 2, "?");
    qt_sl.name[sizeof qt_sl.name - 1] = 0;
    memset(qt_sl.host, 0, sizeof(uint64_t) * (size_t)size);
    const int me = qt_comm_group_index(QT_COLL_ALL);
    if (me < 0) return me;
    qt_sl.host[me] = qt_hash64(qt_sl.name, strlen(qt_sl.name));
    int rc = qt_coll_all_gather(QT_COLL_ALL, qt_sl.host, (int64_t)sizeof(uint64_t));
    if (rc) return rc;
    if (rank == 0) qt_slices_notes(mesh, dcn, size, ns);
    return QT_OK;
}
