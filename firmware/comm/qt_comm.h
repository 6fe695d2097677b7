/* qt_comm.h - the communication layer's process-level interface.
 *
 * Two back ends with one interface: comm_mpi.c (glibc build, MPICH) and comm_local.c
 * (musl static build, exactly one rank). Collectives of later issues are plan ops that
 * call into this layer; nothing here reduces floats with MPI_SUM (design.md section 6).
 */
#ifndef QT_COMM_H
#define QT_COMM_H

/* Initialise; returns 0 and fills rank/size, or a negative QT_E* code. */
int qt_comm_init(int *argc, char ***argv, int *rank, int *size);
void qt_comm_finalize(void);
/* Abort every rank with exit code `code` (used by main only). */
void qt_comm_abort(int code);
/* Name of the back end for the start-up banner ("mpich 4.0.2", "local"). */
const char *qt_comm_backend(void);

#endif
