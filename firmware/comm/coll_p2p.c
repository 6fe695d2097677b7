/* coll_p2p.c - the pipeline's point-to-point messages (issue 36, docs/pipeline.md): a
 * stage's output activations to the next stage and its input's gradients to the one
 * before, as non-blocking sends of bytes (qt_coll.def SEND_RECV: no reduction, so no order
 * question), receives waited for just before use; and the exact all-gather of a few bytes
 * over an explicit list of world ranks (the stages' scalars).
 *
 * Invariants: every wait runs under the collectives' deadline (a silent peer is named, as
 * for the other collectives); sends stay posted until qt_coll_p2p_flush, so their buffers
 * must not change before it; messages of one channel between two ranks match in posting
 * order (MPI's pairwise FIFO), which both sides take from the same schedule table; no heap:
 * the pending sends are this file's static list.
 */
#include "qt_coll.h"
#include "qt_comm.h"
#include "qt_err.h"
#include "coll_int.h"

static struct {
    int id[QT_COMM_P2P_MAX];     /* the sends posted and not yet flushed */
    int peer[QT_COMM_P2P_MAX];
    int n;
} qt_p2p_s;

/* Polls request id until done, under the deadline; peer names a silent rank. */
static int qt_coll_p2p_wait(int id, int peer, const char *op)
{
    const double t0 = qt_coll_now(), d = qt_coll_deadline_s();
    for (;;) {
        int done = 0;
        int rc = qt_comm_p2p_test(id, &done);
        if (rc) return rc;
        if (done) {
            qt_coll_count(0, qt_coll_now() - t0, 0);
            return QT_OK;
        }
        const double now = qt_coll_now();
        if (d > 0 && now - t0 > d) {
            qt_coll_note(op, 0, -1);
            return qt_coll_silent(peer);
        }
        qt_comm_idle(now - t0);
    }
}

int qt_coll_p2p_send(int peer, int tag, const void *buf, int64_t bytes)
{
    if (qt_p2p_s.n == QT_COMM_P2P_MAX)
        return qt_fail(QT_E_PLAN, "pipeline: more than %d sends in flight", QT_COMM_P2P_MAX);
    int id;
    int rc = qt_comm_p2p_post(peer, tag, (void *)buf, bytes, 1, &id);
    if (rc) return rc;
    qt_p2p_s.id[qt_p2p_s.n] = id;
    qt_p2p_s.peer[qt_p2p_s.n++] = peer;
    qt_coll_count(bytes, 0.0, 1);
    return QT_OK;
}

int qt_coll_p2p_post_recv(int peer, int tag, void *buf, int64_t bytes, int *id)
{
    int rc = qt_comm_p2p_post(peer, tag, buf, bytes, 0, id);
    if (!rc) qt_coll_count(0, 0.0, 1);
    return rc;
}

int qt_coll_p2p_wait_recv(int id, int peer)
{
    return qt_coll_p2p_wait(id, peer, "pipeline receive");
}

int qt_coll_p2p_recv(int peer, int tag, void *buf, int64_t bytes)
{
    int id;
    int rc = qt_coll_p2p_post_recv(peer, tag, buf, bytes, &id);
    return rc ? rc : qt_coll_p2p_wait_recv(id, peer);
}

int qt_coll_p2p_flush(void)
{
    int rc = QT_OK;
    for (int i = 0; i < qt_p2p_s.n && !rc; i++)
        rc = qt_coll_p2p_wait(qt_p2p_s.id[i], qt_p2p_s.peer[i], "pipeline send");
    qt_p2p_s.n = 0;
    return rc;
}

int qt_coll_p2p_allgather(const int *ranks, int n, int me, void *blocks, int64_t blk)
{
    unsigned char *b = blocks;
    const double t0 = qt_coll_now(), d = qt_coll_deadline_s();
    /* shift schedule: at step k send my block to (me + k) mod n, receive (me - k) mod n's */
    for (int k = 1; k < n; k++) {
        const int to = (me + k) % n, from = (me - k + n) % n;
        int silent = -1;
        int rc = qt_comm_sendrecv(ranks[to], b + (int64_t)me * blk, blk, ranks[from],
                                  b + (int64_t)from * blk, blk, d > 0 ? t0 + d : 0, &silent);
        if (rc && silent >= 0) {
            qt_coll_note("pipeline all-gather", 0, -1);
            return qt_coll_silent(silent);
        }
        if (rc) return rc;
        qt_coll_count(blk, 0.0, 1);
    }
    qt_coll_count(0, qt_coll_now() - t0, 0);
    return QT_OK;
}
