/* qt_comm.h - the communication layer's process-level interface and its one transport
 * primitive.
 *
 * Two back ends with one interface: comm_mpi.c (glibc build, MPICH) and comm_local.c
 * (musl static build, exactly one rank; comm_env.c holds its start-up check that no
 * process manager started it as one of several processes). The collectives (qt_coll.h,
 * coll.c) are written once on top of qt_comm_sendrecv; nothing here reduces floats with
 * MPI_SUM (docs/design.md
 * section 6). Neither back end allocates heap memory after qt_comm_init (MPICH itself may,
 * inside its own calls).
 */
#ifndef QT_COMM_H
#define QT_COMM_H

#include <stdint.h>

/* Initialise; returns 0 and fills rank/size, or a negative QT_E* code. */
int qt_comm_init(int *argc, char ***argv, int *rank, int *size);
/* The single-rank back end's start-up check (comm_env.c): QT_E_PLAN, with a message naming
 * the variable, when a process manager's environment (PMI_SIZE, PMI_RANK, MPI_LOCALNRANKS,
 * OMPI_COMM_WORLD_SIZE, ...) says this process is one of several; else QT_OK. argv0 (may
 * be NULL) locates the MPI build to suggest instead. */
int qt_comm_env_check(const char *argv0);
void qt_comm_finalize(void);
/* Abort every rank with exit code `code` (used by main only), after lingering 1.5 s on a
 * mesh answering liveness probes (qt_comm_probe_silent), so the other ranks that timed out
 * print their own message first. */
void qt_comm_abort(int code);
/* Name of the back end for the start-up banner ("mpich 4.0.2", "local"). */
const char *qt_comm_backend(void);

/* World rank and size after qt_comm_init (0 and 1 before it, and in the local back end). */
void qt_comm_world(int *rank, int *size);

/* Largest single message; longer transfers are split into pieces of at most this size
 * (MPICH mallocs per call for big messages, docs/toolchain.md section 0). */
#define QT_COMM_CHUNK_BYTES ((int64_t)16 << 20)

/* Point-to-point step: send sbytes from `send` to world rank dst and, concurrently, receive
 * exactly rbytes into `recv` from world rank src. dst < 0 or sbytes == 0: nothing is sent;
 * src < 0 or rbytes == 0: nothing is received (both sides of a transfer must agree on its
 * size, zero included). dst/src must not be my own rank. Transfers go in pieces of at most
 * QT_COMM_CHUNK_BYTES, polled with MPI_Test and short sleeps, until done or until the
 * absolute CLOCK_MONOTONIC time `deadline` (seconds; <= 0 = none) passes.
 * Returns 0; or QT_E_COMM with *silent = the rank that did not answer (src if my receive is
 * incomplete, else dst) on timeout, the pending requests left posted (the caller aborts);
 * or QT_E_COMM with *silent = -1 after printing a message (MPI error, received size differs
 * from rbytes, no peer in the local back end); QT_E_PLAN for bad arguments. */
int qt_comm_sendrecv(int dst, const void *send, int64_t sbytes, int src, void *recv,
                     int64_t rbytes, double deadline, int *silent);

/* Who is really silent, asked after a transfer with world rank `waited` timed out: every
 * other rank gets a liveness probe, which a live rank answers from inside any wait of
 * qt_comm_sendrecv (or its own probe) even while it waits for someone else; a stopped or
 * hung rank does not (beyond 1024 ranks: the lowest 1023 others and `waited`, always).
 * Waits up to `window` seconds (while answering the others' probes).
 * Returns the lowest rank that did not answer (*n_silent: how many did not), or -1 when
 * every rank answered (then `waited` is alive but not in this collective, or busy). The
 * probes to silent ranks stay posted: the caller aborts the job. -1 in the local back end. */
int qt_comm_probe_silent(int waited, double window, int *n_silent);

/* Start-up warm-up with world rank `peer` (both call it for each other, each rank visiting
 * its peers in increasing rank order): many small and QT_WARM_BIG (8) messages of `big`
 * bytes each way, sent before their receives are posted, so the library connects the pair
 * and sizes its request pools before the steps (which must not allocate). send and recv
 * hold 8 * big bytes each. 0; QT_E_COMM with *silent = peer, no message, past the absolute
 * deadline (seconds of the monotonic clock, 0 = none; the caller names the peer, as after
 * qt_comm_sendrecv: qt_coll_warm); QT_E_COMM with *silent = -1 after a message (MPI error),
 * QT_E_PLAN for bad arguments. */
int qt_comm_warm(int peer, const void *send, void *recv, int64_t big, double deadline,
                 int *silent);

/* ---- split transfers (coll_async.c): a collective that runs beside compute ------------- */

/* Independent transfer slots; each carries its own tag, so messages of collectives in
 * flight at the same time never match each other's (or those of qt_comm_sendrecv). */
#define QT_COMM_SLOTS 4

/* Post one piece on slot `slot` (0 <= slot < QT_COMM_SLOTS, idle): send sbytes from `send`
 * to world rank dst and receive exactly rbytes into `recv` from world rank src (each at
 * most QT_COMM_CHUNK_BYTES; dst < 0 / src < 0 or 0 bytes: none), and return at once.
 * 0, QT_E_COMM after a message (MPI error; the local back end has no peer), QT_E_PLAN for
 * bad arguments or a slot still busy. */
int qt_comm_post(int slot, int dst, const void *send, int64_t sbytes, int src, void *recv,
                 int64_t rbytes);

/* Test slot `slot` once: *done = 1 when its piece completed both ways (the slot is idle
 * again), else 0 and *waiting = the world rank it still waits for (src while the receive
 * is incomplete, else dst). 0, or QT_E_COMM after a message (MPI error, a received size
 * that differs from the posted one). */
int qt_comm_test(int slot, int *done, int *waiting);

/* One pause of a wait that has lasted waited_s seconds: answers liveness probes once it
 * lasts QT_COMM_SERVE_S (qt_comm_probe_silent), and sleeps briefly unless spinning is
 * cheaper on this node (not oversubscribed, within the first 200 us). */
void qt_comm_idle(double waited_s);

/* ---- pipeline point-to-point (coll_p2p.c; docs/pipeline.md) ------------------------------ */

/* Requests of the pipeline's non-blocking messages in flight at once (a stage's sends of one
 * accumulation step: at most 2 M, waited for before the slots are reused). */
#define QT_COMM_P2P_MAX 256

/* Post one non-blocking message of `bytes` (at most QT_COMM_CHUNK_BYTES) on channel `tag`
 * (0 .. 7; messages of one channel between two ranks match in order): a send of buf to world
 * rank peer (send = 1) or a receive into buf from it (send = 0), and return at once; *id
 * names the request for qt_comm_p2p_test. 0, QT_E_PLAN for bad arguments or a full pool,
 * QT_E_COMM after a message (MPI error; the single-rank back end has no peer). */
int qt_comm_p2p_post(int peer, int tag, void *buf, int64_t bytes, int send, int *id);

/* Test request id once: *done = 1 when it completed (its slot is free again; a receive
 * delivered exactly the posted bytes, else QT_E_COMM with a message), else 0. */
int qt_comm_p2p_test(int id, int *done);

#endif
