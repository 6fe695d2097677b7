/* comm_local.c - the single-process back end of qt_comm.h (musl static build).
 *
 * Invariant: always rank 0 of 1; must not include mpi.h (musl cannot see or link MPICH).
 * Started by a process manager as one of several processes (mpiexec -n 2), qt_comm_init
 * refuses (comm_env.c) instead of letting every process train alone.
 * Every mesh group therefore has size 1 and the collectives of coll.c return before they
 * transfer anything; a transfer that reaches qt_comm_sendrecv with a peer is an error.
 */
#include <stdlib.h>
#include "qt_comm.h"
#include "qt_err.h"

int qt_comm_init(int *argc, char ***argv, int *rank, int *size)
{
    (void)argc;
    *rank = 0;
    *size = 1;
    return qt_comm_env_check(argv && *argv ? (*argv)[0] : NULL);
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

void qt_comm_world(int *rank, int *size)
{
    *rank = 0;
    *size = 1;
}

int qt_comm_sendrecv(int dst, const void *send, int64_t sbytes, int src, void *recv,
                     int64_t rbytes, double deadline, int *silent)
{
    (void)send;
    (void)recv;
    (void)deadline;
    *silent = -1;
    if ((dst < 0 || sbytes == 0) && (src < 0 || rbytes == 0)) return QT_OK;
    return qt_fail(QT_E_COMM, "comm: the single-rank back end has no peer (send %lld bytes "
                   "to rank %d, receive %lld bytes from rank %d)", (long long)sbytes, dst,
                   (long long)rbytes, src);
}

int qt_comm_warm(int peer, const void *send, void *recv, int64_t big, double deadline,
                 int *silent)
{
    *silent = -1;
    (void)send;
    (void)recv;
    (void)big;
    (void)deadline;
    /* one rank has no peer to warm up with */
    return qt_fail(QT_E_PLAN, "comm: warm-up with rank %d on a one-rank build", peer);
}

int qt_comm_probe_silent(int waited, double window, int *n_silent)
{
    (void)waited;
    (void)window;
    *n_silent = 0;                   /* one rank: nobody else to ask */
    return -1;
}

int qt_comm_post(int slot, int dst, const void *send, int64_t sbytes, int src, void *recv,
                 int64_t rbytes)
{
    (void)slot;
    (void)send;
    (void)recv;
    if ((dst < 0 || sbytes == 0) && (src < 0 || rbytes == 0)) return QT_OK;
    return qt_fail(QT_E_COMM, "comm: the single-rank back end has no peer (split transfer: "
                   "send %lld bytes to rank %d, receive %lld bytes from rank %d)",
                   (long long)sbytes, dst, (long long)rbytes, src);
}

int qt_comm_test(int slot, int *done, int *waiting)
{
    (void)slot;
    *done = 1;                       /* nothing is ever posted here */
    *waiting = -1;
    return QT_OK;
}

void qt_comm_idle(double waited_s)
{
    (void)waited_s;
}

int qt_comm_p2p_post(int peer, int tag, void *buf, int64_t bytes, int send, int *id)
{
    (void)tag;
    (void)buf;
    *id = -1;
    return qt_fail(QT_E_COMM, "comm: the single-rank back end has no peer (pipeline %s of %lld "
                   "bytes, rank %d)", send ? "send" : "receive", (long long)bytes, peer);
}

int qt_comm_p2p_test(int id, int *done)
{
    (void)id;
    *done = 1;                       /* nothing is ever posted here */
    return QT_OK;
}
