/* comm_mpi.c - the MPICH back end of qt_comm.h (glibc build): process set-up and the one
 * transport primitive, qt_comm_sendrecv, on which coll.c builds every collective.
 *
 * Invariants: MPI_Init is called once, by main through qt_comm_init, before any other MPI
 * call; nothing here reduces anything (docs/design.md s.6). MPI may allocate inside its own init
 * (and here MPI_Comm_dup / MPI_Comm_split_type run once, at init); after that this file
 * only posts MPI_Isend/MPI_Irecv of contiguous bytes on the private communicator
 * qt_comm_state.comm, in pieces of at most QT_COMM_CHUNK_BYTES, and polls them with MPI_Test
 * (never a blocking MPI call, so a deadline can always fire). With more ranks on the node
 * than CPUs, polls are spaced by nanosleep(20 us) from the start (docs/toolchain.md 1: MPICH's
 * busy-polling otherwise costs 16-108 ms per call); otherwise the first 200 us spin.
 * Liveness probes (qt_comm_probe_silent): one receive of tag QT_PING_TAG from any rank is
 * posted at init; every wait that lasts longer than QT_COMM_SERVE_S answers a probe that
 * arrived (a send of tag QT_PONG_TAG, freed at once: its buffer is a constant), so a rank
 * that waits for someone else is seen to be alive, and only a stopped or hung rank is named.
 * Probes are sent only after a deadline passed, so a healthy run exchanges none; an abort
 * lingers QT_COMM_LINGER_S answering them, so every rank that timed out reports.
 */
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "qt_comm.h"
#include "qt_err.h"

#ifndef MPICH_VERSION
#define MPICH_VERSION "?"
#endif

#define QT_COMM_TAG 0x5174           /* every qtrain message; pairwise FIFO order matches them */
#define QT_COMM_SPIN_S 200e-6        /* busy-poll this long before sleeping (not oversubscribed) */
#define QT_COMM_SLEEP_NS 20000L
#define QT_PING_TAG (QT_COMM_TAG + 8)   /* liveness probe (qt_comm_probe_silent) */
#define QT_PONG_TAG (QT_COMM_TAG + 9)   /* its answer */
#define QT_COMM_SERVE_S 0.05            /* a wait this long starts answering probes */
#define QT_PROBE_MAX 1024               /* ranks probed (the lowest ones and `waited`, past that) */
#define QT_SLOT_TAG (QT_COMM_TAG + 16)  /* + slot: the split transfers (qt_comm_post) */
#define QT_P2P_TAG (QT_COMM_TAG + 32)   /* + channel: the pipeline's messages (qt_comm_p2p_post) */

#define QT_WARM_SMALL 64                  /* warm-up (qt_comm_warm): eager messages each way */
#define QT_WARM_BIG 8                     /* and rendezvous ones */
#define QT_WARM_SMALL_BYTES 64
#define QT_WARM_TAG (QT_COMM_TAG + 1)

static struct {
    int initialised;
    int rank, size;
    MPI_Comm comm;                   /* duplicate of MPI_COMM_WORLD, errors returned */
    double spin_s;                   /* 0 when the node is oversubscribed */
    MPI_Request ping_req;             /* the posted probe receive, or MPI_REQUEST_NULL */
    int ping_in;
    /* the split transfers' slots (qt_comm_post / qt_comm_test): one piece each way per slot */
    struct qt_comm_slots {
        MPI_Request sreq[QT_COMM_SLOTS], rreq[QT_COMM_SLOTS];
        int dst[QT_COMM_SLOTS], src[QT_COMM_SLOTS], rn[QT_COMM_SLOTS];
    } slots;
    /* the liveness probes in flight (qt_comm_probe_silent) */
    struct qt_comm_probe {
        MPI_Request req[QT_PROBE_MAX];
        int in[QT_PROBE_MAX], done[QT_PROBE_MAX];
        int rank[QT_PROBE_MAX];          /* the rank probed in each slot */
    } probe;
    /* the warm-up's messages (qt_comm_warm) */
    struct qt_comm_warm {
        char small_out[QT_WARM_SMALL][QT_WARM_SMALL_BYTES];
        char small_in[QT_WARM_SMALL][QT_WARM_SMALL_BYTES];
        MPI_Request req[2 * (QT_WARM_SMALL + QT_WARM_BIG)];
        MPI_Status st[2 * (QT_WARM_SMALL + QT_WARM_BIG)];
    } warm;
    /* the pipeline's non-blocking messages (qt_comm_p2p_post): a fixed pool of requests */
    struct qt_comm_p2p {
        MPI_Request req[QT_COMM_P2P_MAX];
        int peer[QT_COMM_P2P_MAX], bytes[QT_COMM_P2P_MAX], send[QT_COMM_P2P_MAX];
        int used[QT_COMM_P2P_MAX];
    } p2p;
} qt_comm_state = {
    .rank = 0, .size = 1, .comm = MPI_COMM_NULL, .spin_s = QT_COMM_SPIN_S,
    .ping_req = MPI_REQUEST_NULL,
    .slots = {
        .sreq = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL},
        .rreq = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL},
    },
};
_Static_assert(QT_COMM_SLOTS == 4, "comm_mpi.c: the slots' initialisers list 4 slots");

static const int qt_pong_value = 1;

static double qt_comm_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int qt_comm_init(int *argc, char ***argv, int *rank, int *size)
{
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "comm: MPI_Init failed\n");
        return QT_E_PLAN;
    }
    qt_comm_state.initialised = 1;
    MPI_Comm node = MPI_COMM_NULL;
    int node_size = 1;
    if (MPI_Comm_rank(MPI_COMM_WORLD, rank) != MPI_SUCCESS ||
        MPI_Comm_size(MPI_COMM_WORLD, size) != MPI_SUCCESS ||
        MPI_Comm_dup(MPI_COMM_WORLD, &qt_comm_state.comm) != MPI_SUCCESS ||
        MPI_Comm_set_errhandler(qt_comm_state.comm, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
            MPI_SUCCESS ||
        MPI_Comm_size(node, &node_size) != MPI_SUCCESS) {
        fprintf(stderr, "comm: MPI_Comm_rank/size/dup/split_type failed\n");
        qt_comm_finalize();
        return QT_E_PLAN;
    }
    MPI_Comm_free(&node);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    qt_comm_state.spin_s = cpus > 0 && node_size > cpus ? 0.0 : QT_COMM_SPIN_S;
    qt_comm_state.rank = *rank;
    qt_comm_state.size = *size;
    qt_err_set_rank(*rank, *size);
    if (*size > 1 && MPI_Irecv(&qt_comm_state.ping_in, 1, MPI_INT, MPI_ANY_SOURCE, QT_PING_TAG,
                               qt_comm_state.comm, &qt_comm_state.ping_req) != MPI_SUCCESS) {
        fprintf(stderr, "comm: MPI_Irecv of the liveness probe failed\n");
        qt_comm_finalize();
        return QT_E_PLAN;
    }
    return QT_OK;
}

void qt_comm_finalize(void)
{
    if (qt_comm_state.initialised) {
        if (qt_comm_state.ping_req != MPI_REQUEST_NULL) {
            MPI_Cancel(&qt_comm_state.ping_req);
            MPI_Request_free(&qt_comm_state.ping_req);
        }
        if (qt_comm_state.comm != MPI_COMM_NULL) MPI_Comm_free(&qt_comm_state.comm);
        MPI_Finalize();
    }
    qt_comm_state.initialised = 0;
}

/* Defined below: answer the liveness probes that arrived. */
static void qt_comm_serve(void);

/* Before MPI_Abort, linger this long answering probes: the other ranks that timed out on
 * the same silent rank finish their own probe and print their own message (each naming
 * it), instead of being killed by this abort first. */
#define QT_COMM_LINGER_S 1.5

void qt_comm_abort(int code)
{
    const double until = qt_comm_now() + (qt_comm_state.size > 1 ? QT_COMM_LINGER_S : 0.0);
    while (qt_comm_now() < until) {
        qt_comm_serve();
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    MPI_Abort(MPI_COMM_WORLD, code);
}

const char *qt_comm_backend(void)
{
    return "mpich " MPICH_VERSION;
}

void qt_comm_world(int *rank, int *size)
{
    *rank = qt_comm_state.rank;
    *size = qt_comm_state.size;
}

/* Answer the liveness probes that arrived (qt_comm_probe_silent), then post the receive
 * again. Only called from waits that already lasted QT_COMM_SERVE_S, and before an abort. */
static void qt_comm_serve(void)
{
    for (int k = 0; k < 64 && qt_comm_state.ping_req != MPI_REQUEST_NULL; k++) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Test(&qt_comm_state.ping_req, &flag, &st) != MPI_SUCCESS || !flag) return;
        MPI_Request r = MPI_REQUEST_NULL;
        if (MPI_Isend(&qt_pong_value, 1, MPI_INT, st.MPI_SOURCE, QT_PONG_TAG, qt_comm_state.comm,
                      &r) == MPI_SUCCESS)
            MPI_Request_free(&r);    /* completes on its own; the buffer is a constant */
        if (MPI_Irecv(&qt_comm_state.ping_in, 1, MPI_INT, MPI_ANY_SOURCE, QT_PING_TAG,
                      qt_comm_state.comm, &qt_comm_state.ping_req) != MPI_SUCCESS)
            qt_comm_state.ping_req = MPI_REQUEST_NULL;
    }
}

int qt_comm_probe_silent(int waited, double window, int *n_silent)
{
    struct qt_comm_probe *const pr = &qt_comm_state.probe;
    const int me = qt_comm_state.rank, size = qt_comm_state.size;
    *n_silent = 0;
    if (!qt_comm_state.initialised || size < 2) return -1;
    /* the slots: every rank but this one, the lowest ones when there are more than
     * QT_PROBE_MAX, and always `waited` (in the last slot when it is beyond them) */
    int n = 0;
    for (int r = 0; r < size && n < QT_PROBE_MAX; r++)
        if (r != me) pr->rank[n++] = r;
    if (waited >= 0 && waited < size && waited != me && waited > pr->rank[n - 1])
        pr->rank[n - 1] = waited;
    for (int i = 0; i < n; i++) {
        pr->req[i] = MPI_REQUEST_NULL;
        pr->done[i] = 0;
        MPI_Request s = MPI_REQUEST_NULL;
        if (MPI_Irecv(&pr->in[i], 1, MPI_INT, pr->rank[i], QT_PONG_TAG,
                      qt_comm_state.comm, &pr->req[i]) != MPI_SUCCESS ||
            MPI_Isend(&qt_pong_value, 1, MPI_INT, pr->rank[i], QT_PING_TAG,
                      qt_comm_state.comm, &s) != MPI_SUCCESS)
            return -1;
        MPI_Request_free(&s);
    }
    const double until = qt_comm_now() + window;
    int left = n;
    while (left > 0 && qt_comm_now() < until) {
        qt_comm_serve();
        for (int i = 0; i < n; i++) {
            int flag = 0;
            if (pr->done[i] || MPI_Test(&pr->req[i], &flag, MPI_STATUS_IGNORE) !=
                                        MPI_SUCCESS || !flag)
                continue;
            pr->done[i] = 1;
            left--;
        }
        struct timespec ts = {0, QT_COMM_SLEEP_NS};
        nanosleep(&ts, NULL);
    }
    int first = -1;
    for (int i = 0; i < n; i++)
        if (!pr->done[i]) {
            if (first < 0 || pr->rank[i] < first) first = pr->rank[i];
            ++*n_silent;
        }
    return first;
}

/* Test the (up to) two requests of one piece once: *sdone / *rdone set when each completed
 * (rn: bytes the receive must deliver). 0 or QT_E_COMM with a message. */
static int qt_comm_test_pair(MPI_Request *sreq, MPI_Request *rreq, int *sdone, int *rdone,
                             int dst, int src, int rn)
{
    MPI_Status st;
    if (!*sdone && MPI_Test(sreq, sdone, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return qt_fail(QT_E_COMM, "comm: MPI_Test of a send to rank %d failed", dst);
    if (!*rdone) {
        if (MPI_Test(rreq, rdone, &st) != MPI_SUCCESS)
            return qt_fail(QT_E_COMM, "comm: receive from rank %d failed (a longer message "
                           "than the %d bytes expected?)", src, rn);
        if (*rdone) {
            int got = -1;
            MPI_Get_count(&st, MPI_BYTE, &got);
            if (got != rn)
                return qt_fail(QT_E_COMM, "comm: rank %d sent %d bytes, %d expected "
                               "(collective called with other sizes?)", src, got, rn);
        }
    }
    return QT_OK;
}

void qt_comm_idle(double waited_s)
{
    if (waited_s >= QT_COMM_SERVE_S) qt_comm_serve();
    if (waited_s >= qt_comm_state.spin_s) {
        struct timespec ts = {0, QT_COMM_SLEEP_NS};
        nanosleep(&ts, NULL);
    }
}

/* Poll the (up to) two requests of one piece until both complete or the deadline passes.
 * rn: bytes the receive must deliver. */
static int qt_comm_wait(MPI_Request *sreq, MPI_Request *rreq, int dst, int src, int rn,
                        double deadline, int *silent)
{
    int sdone = *sreq == MPI_REQUEST_NULL, rdone = *rreq == MPI_REQUEST_NULL;
    const double t0 = qt_comm_now();
    for (;;) {
        int rc = qt_comm_test_pair(sreq, rreq, &sdone, &rdone, dst, src, rn);
        if (rc) return rc;
        if (sdone && rdone) return QT_OK;
        const double now = qt_comm_now();
        if (deadline > 0 && now > deadline) {
            *silent = rdone ? dst : src;
            return QT_E_COMM;
        }
        qt_comm_idle(now - t0);
    }
}

int qt_comm_sendrecv(int dst, const void *send, int64_t sbytes, int src, void *recv,
                     int64_t rbytes, double deadline, int *silent)
{
    *silent = -1;
    if (dst < 0) sbytes = 0;
    if (src < 0) rbytes = 0;
    if (!qt_comm_state.initialised || sbytes < 0 || rbytes < 0 || dst >= qt_comm_state.size ||
        src >= qt_comm_state.size || (sbytes && dst == qt_comm_state.rank) ||
        (rbytes && src == qt_comm_state.rank) || (sbytes && !send) || (rbytes && !recv))
        return qt_fail(QT_E_PLAN, "comm: bad transfer (send %lld bytes to %d, "
                       "receive %lld bytes from %d, %d ranks)",
                       (long long)sbytes, dst, (long long)rbytes, src, qt_comm_state.size);
    int64_t soff = 0, roff = 0;
    while (soff < sbytes || roff < rbytes) {
        MPI_Request sreq = MPI_REQUEST_NULL, rreq = MPI_REQUEST_NULL;
        int sn = 0, rn = 0;
        if (roff < rbytes) {
            rn = (int)(rbytes - roff < QT_COMM_CHUNK_BYTES ? rbytes - roff : QT_COMM_CHUNK_BYTES);
            if (MPI_Irecv((char *)recv + roff, rn, MPI_BYTE, src, QT_COMM_TAG,
                          qt_comm_state.comm, &rreq) != MPI_SUCCESS)
                return qt_fail(QT_E_COMM, "comm: MPI_Irecv from rank %d failed",
                               src);
        }
        if (soff < sbytes) {
            sn = (int)(sbytes - soff < QT_COMM_CHUNK_BYTES ? sbytes - soff : QT_COMM_CHUNK_BYTES);
            if (MPI_Isend((const char *)send + soff, sn, MPI_BYTE, dst, QT_COMM_TAG,
                          qt_comm_state.comm, &sreq) != MPI_SUCCESS)
                return qt_fail(QT_E_COMM, "comm: MPI_Isend to rank %d failed",
                               dst);
        }
        int rc = qt_comm_wait(&sreq, &rreq, dst, src, rn, deadline, silent);
        if (rc) return rc;
        soff += sn;
        roff += rn;
    }
    return QT_OK;
}

int qt_comm_post(int slot, int dst, const void *send, int64_t sbytes, int src, void *recv,
                 int64_t rbytes)
{
    struct qt_comm_slots *const sl = &qt_comm_state.slots;
    if (dst < 0) sbytes = 0;
    if (src < 0) rbytes = 0;
    if (!qt_comm_state.initialised || slot < 0 || slot >= QT_COMM_SLOTS ||
        sl->sreq[slot] != MPI_REQUEST_NULL || sl->rreq[slot] != MPI_REQUEST_NULL ||
        sbytes < 0 || rbytes < 0 || sbytes > QT_COMM_CHUNK_BYTES ||
        rbytes > QT_COMM_CHUNK_BYTES || dst >= qt_comm_state.size ||
        src >= qt_comm_state.size || (sbytes && dst == qt_comm_state.rank) ||
        (rbytes && src == qt_comm_state.rank) || (sbytes && !send) || (rbytes && !recv))
        return qt_fail(QT_E_PLAN, "comm: bad split transfer on slot %d (send %lld bytes to %d, "
                       "receive %lld bytes from %d, %d ranks)", slot, (long long)sbytes, dst,
                       (long long)rbytes, src, qt_comm_state.size);
    sl->dst[slot] = dst;
    sl->src[slot] = src;
    sl->rn[slot] = (int)rbytes;
    if (rbytes && MPI_Irecv(recv, (int)rbytes, MPI_BYTE, src, QT_SLOT_TAG + slot,
                            qt_comm_state.comm, &sl->rreq[slot]) != MPI_SUCCESS)
        return qt_fail(QT_E_COMM, "comm: MPI_Irecv from rank %d failed", src);
    if (sbytes && MPI_Isend(send, (int)sbytes, MPI_BYTE, dst, QT_SLOT_TAG + slot,
                            qt_comm_state.comm, &sl->sreq[slot]) != MPI_SUCCESS)
        return qt_fail(QT_E_COMM, "comm: MPI_Isend to rank %d failed", dst);
    return QT_OK;
}

int qt_comm_test(int slot, int *done, int *waiting)
{
    struct qt_comm_slots *const sl = &qt_comm_state.slots;
    *done = 0;
    *waiting = -1;
    if (slot < 0 || slot >= QT_COMM_SLOTS)
        return qt_fail(QT_E_PLAN, "comm: test of slot %d (%d slots)", slot, QT_COMM_SLOTS);
    int sdone = sl->sreq[slot] == MPI_REQUEST_NULL;
    int rdone = sl->rreq[slot] == MPI_REQUEST_NULL;
    int rc = qt_comm_test_pair(&sl->sreq[slot], &sl->rreq[slot], &sdone, &rdone,
                               sl->dst[slot], sl->src[slot], sl->rn[slot]);
    if (rc) return rc;
    *done = sdone && rdone;
    if (!*done) *waiting = rdone ? sl->dst[slot] : sl->src[slot];
    return QT_OK;
}

/* Warm-up (qt_comm.h): QT_WARM_SMALL eager and QT_WARM_BIG rendezvous messages each way,
 * sent before the matching receives are posted (after a pause, so they arrive unexpected):
 * UCX grows its request and unexpected-message pools to this depth now, not in a step. */
int qt_comm_warm(int peer, const void *send, void *recv, int64_t big, double deadline,
                 int *silent)
{
    struct qt_comm_warm *const wm = &qt_comm_state.warm;
    *silent = -1;
    if (!qt_comm_state.initialised || peer < 0 || peer >= qt_comm_state.size ||
        peer == qt_comm_state.rank || big < 0 || big > QT_COMM_CHUNK_BYTES)
        return qt_fail(QT_E_PLAN, "comm: bad warm-up with rank %d (%lld bytes)", peer,
                       (long long)big);
    int n = 0;
    for (int i = 0; i < QT_WARM_SMALL; i++)
        if (MPI_Isend(wm->small_out[i], QT_WARM_SMALL_BYTES, MPI_BYTE, peer, QT_WARM_TAG,
                      qt_comm_state.comm, &wm->req[n++]) != MPI_SUCCESS)
            return qt_fail(QT_E_COMM, "comm: warm-up send to rank %d failed", peer);
    for (int i = 0; big > 0 && i < QT_WARM_BIG; i++)
        if (MPI_Isend((const char *)send + i * big, (int)big, MPI_BYTE, peer, QT_WARM_TAG,
                      qt_comm_state.comm, &wm->req[n++]) != MPI_SUCCESS)
            return qt_fail(QT_E_COMM, "comm: warm-up send to rank %d failed", peer);
    /* drive the progress engine for a while without matching anything, so the peer's
     * messages are taken in as unexpected ones (probing another tag matches nothing) */
    const double until = qt_comm_now() + 0.03;
    while (qt_comm_now() < until) {
        int flag = 0;
        MPI_Iprobe(peer, QT_WARM_TAG + 1, qt_comm_state.comm, &flag, MPI_STATUS_IGNORE);
        struct timespec ts = {0, QT_COMM_SLEEP_NS};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < QT_WARM_SMALL; i++)
        if (MPI_Irecv(wm->small_in[i], QT_WARM_SMALL_BYTES, MPI_BYTE, peer, QT_WARM_TAG,
                      qt_comm_state.comm, &wm->req[n++]) != MPI_SUCCESS)
            return qt_fail(QT_E_COMM, "comm: warm-up receive from rank %d failed", peer);
    for (int i = 0; big > 0 && i < QT_WARM_BIG; i++)
        if (MPI_Irecv((char *)recv + i * big, (int)big, MPI_BYTE, peer, QT_WARM_TAG,
                      qt_comm_state.comm, &wm->req[n++]) != MPI_SUCCESS)
            return qt_fail(QT_E_COMM, "comm: warm-up receive from rank %d failed", peer);
    for (;;) {
        int done = 0;
        if (MPI_Testall(n, wm->req, &done, wm->st) != MPI_SUCCESS)
            return qt_fail(QT_E_COMM, "comm: warm-up with rank %d failed", peer);
        if (done) return QT_OK;
        if (deadline > 0 && qt_comm_now() > deadline) {
            *silent = peer;
            return QT_E_COMM;
        }
        qt_comm_serve();
        struct timespec ts = {0, QT_COMM_SLEEP_NS};
        nanosleep(&ts, NULL);
    }
}

int qt_comm_p2p_post(int peer, int tag, void *buf, int64_t bytes, int send, int *id)
{
    struct qt_comm_p2p *const pp = &qt_comm_state.p2p;
    *id = -1;
    if (!qt_comm_state.initialised || peer < 0 || peer >= qt_comm_state.size ||
        peer == qt_comm_state.rank || tag < 0 || tag > 7 || bytes <= 0 ||
        bytes > QT_COMM_CHUNK_BYTES || !buf)
        return qt_fail(QT_E_PLAN, "comm: bad pipeline message (%s %lld bytes, rank %d of %d, "
                       "channel %d)", send ? "send" : "receive", (long long)bytes, peer,
                       qt_comm_state.size, tag);
    int k = 0;
    while (k < QT_COMM_P2P_MAX && pp->used[k]) k++;
    if (k == QT_COMM_P2P_MAX)
        return qt_fail(QT_E_PLAN, "comm: more than %d pipeline messages in flight",
                       QT_COMM_P2P_MAX);
    int rc = send ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, QT_P2P_TAG + tag,
                              qt_comm_state.comm, &pp->req[k])
                  : MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, QT_P2P_TAG + tag,
                              qt_comm_state.comm, &pp->req[k]);
    if (rc != MPI_SUCCESS)
        return qt_fail(QT_E_COMM, "comm: MPI_%s %s rank %d failed", send ? "Isend" : "Irecv",
                       send ? "to" : "from", peer);
    pp->used[k] = 1;
    pp->peer[k] = peer;
    pp->bytes[k] = (int)bytes;
    pp->send[k] = send;
    *id = k;
    return QT_OK;
}

int qt_comm_p2p_test(int id, int *done)
{
    struct qt_comm_p2p *const pp = &qt_comm_state.p2p;
    *done = 0;
    if (id < 0 || id >= QT_COMM_P2P_MAX || !pp->used[id])
        return qt_fail(QT_E_PLAN, "comm: pipeline message %d is not in flight", id);
    MPI_Status st;
    if (MPI_Test(&pp->req[id], done, &st) != MPI_SUCCESS)
        return qt_fail(QT_E_COMM, "comm: pipeline %s rank %d failed", pp->send[id] ? "send to"
                       : "receive from (a longer message than expected?)", pp->peer[id]);
    if (!*done) return QT_OK;
    pp->used[id] = 0;
    if (!pp->send[id]) {
        int got = -1;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (got != pp->bytes[id])
            return qt_fail(QT_E_COMM, "comm: rank %d sent a pipeline message of %d bytes, %d "
                           "expected", pp->peer[id], got, pp->bytes[id]);
    }
    return QT_OK;
}
