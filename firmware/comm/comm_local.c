/* comm_local.c - the single-process back end of qt_comm.h (musl static build).
 *
 * Invariant: always rank 0 of 1; must not include mpi.h (musl cannot see or link MPICH).
 */
#include <stdlib.h>
#include "qt_comm.h"
#include "../io/qt_io.h"

int qt_comm_init(int *argc, char ***argv, int *rank, int *size)
{
    (void)argc;
    (void)argv;
    *rank = 0;
    *size = 1;
    return QT_OK;
}

void qt_comm_finalize(void)
{
}

void qt_comm_abort(int code)
{
    /* only main calls this, as the single-rank equivalent of MPI_Abort */
    _Exit(code);
}

const char *qt_comm_backend(void)
{
    return "local";
}
