/* comm_mpi.c - the MPICH back end of qt_comm.h (glibc build).
 *
 * Invariants: MPI_Init is called once, by main through qt_comm_init, before any other MPI
 * call; nothing here reduces floats (design.md s.6). MPI may allocate inside its own init,
 * which happens before training steps.
 */
#include <mpi.h>
#include <stdio.h>
#include "qt_comm.h"
#include "../io/qt_io.h"

#ifndef MPICH_VERSION
#define MPICH_VERSION "?"
#endif

static struct {
    int initialised;
} qt_comm_state;

int qt_comm_init(int *argc, char ***argv, int *rank, int *size)
{
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "comm: MPI_Init failed\n");
        return QT_E_PLAN;
    }
    qt_comm_state.initialised = 1;
    if (MPI_Comm_rank(MPI_COMM_WORLD, rank) != MPI_SUCCESS ||
        MPI_Comm_size(MPI_COMM_WORLD, size) != MPI_SUCCESS) {
        fprintf(stderr, "comm: MPI_Comm_rank/size failed\n");
        qt_comm_finalize();
        return QT_E_PLAN;
    }
    return QT_OK;
}

void qt_comm_finalize(void)
{
    if (qt_comm_state.initialised) MPI_Finalize();
    qt_comm_state.initialised = 0;
}

void qt_comm_abort(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
}

const char *qt_comm_backend(void)
{
    return "mpich " MPICH_VERSION;
}
