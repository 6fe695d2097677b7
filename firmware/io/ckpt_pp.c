/* ckpt_pp.c - checkpoints of a pipeline plan (ckpt_pp.h; docs/pipeline.md "Checkpoints"):
 * the stages' plans, the one-rank order of their parameters (blocks), and the stream of a
 * stage's file data to the writer.
 *
 * A pipeline stage's plan holds one stage's parameters, under their one-rank names, in
 * chunks (one per circular repeat; one without repeats), and chunk r of stage k holds the
 * one-rank parameters [gparam, gparam + its count) (runtime/pipeline_chunks.c). The blocks
 * are the stages' chunks sorted by gparam, and they tile the one-rank parameters without a
 * gap (qt_checkpoint_set_stages checks it): without repeats stage 0, stage 1, ...; with R
 * repeats (stage 0, chunk 0), (stage 1, chunk 0), ..., (stage S - 1, chunk R - 1). So the
 * one-rank file of a save is, in every region (parameters, Adam m, Adam v, or the
 * gradient), the blocks' tensors in block order: world rank 0 writes the header from every
 * stage's plan and its own stage's blocks, and receives each other block from its stage's
 * first rank, which gathers it over its stage's mesh window by window (ckpt_gather.c) as a
 * one-stage save would.
 *
 * Invariants: no heap, one static chunk buffer and the static block table; the stream of
 * one region of a block is the concatenation of its pieces' bytes in file order, cut into
 * chunks of QT_CKPP_CHUNK bytes (the last one shorter), sent by the block's stage's first
 * rank and received by world rank 0 in the same cut (both take the total from the stage's
 * plan: qt_ckpp_block_bytes); every send is waited for before the buffer is refilled; one
 * channel (QT_CKPP_TAG) between each pair, so the messages match in posting order.
 */
#include <string.h>

#include "qt_io.h"
#include "qt_err.h"
#include "ckpt_pp.h"
#include "ckpt_map.h"
#include "safetensors.h"
#include "comm/qt_coll.h"
#include "comm/qt_comm.h"
#include "runtime/qt_pipeline.h"

#define QT_CKPP_CHUNK (1 << 18)   /* bytes per stream message */
#define QT_CKPP_TAG 4             /* p2p channel (pipeline.c: 0 .. 3) */

#define QT_CKPP_MAX_BLOCKS (QT_PP_MAX_STAGES * QT_PP_MAX_REPEATS)

static struct {
    const qt_plan *stage[QT_PP_MAX_STAGES];
    int S, mine, rank, n, local;
    int nblk;                      /* blocks, in the one-rank parameter order */
    qt_ckpp_blk blk[QT_CKPP_MAX_BLOCKS];
    int64_t gparam[QT_CKPP_MAX_BLOCKS], gelem[QT_CKPP_MAX_BLOCKS]; /* each block's first
                                      one-rank parameter and element */
    int64_t fill;                  /* sender: bytes buffered */
    int from;                      /* writer: the stage being received */
    int64_t left, at;              /* writer: its region's bytes not yet received; bytes of
                                      buf consumed (fill: received) */
    unsigned char buf[QT_CKPP_CHUNK];
    qt_ckpp_blk whole;             /* qt_ckpp_block without a pipeline: the plan's parameters */
} qt_ckpp;

/* Adds stage k's chunks (plan q) to the block table, each at its place in the one-rank
 * order (insertion by gparam). */
static int qt_ckpp_add_blocks(const qt_plan *q, int k)
{
    int R;
    const qt_pp_chunk *c = qt_pp_chunks(q, &R);
    if (!c) return QT_E_PLAN;
    for (int r = 0; r < R; r++) {
        int b = qt_ckpp.nblk++;
        for (; b > 0 && qt_ckpp.gparam[b - 1] > c[r].gparam; b--) {
            qt_ckpp.blk[b] = qt_ckpp.blk[b - 1];
            qt_ckpp.gparam[b] = qt_ckpp.gparam[b - 1];
            qt_ckpp.gelem[b] = qt_ckpp.gelem[b - 1];
        }
        const int32_t i1 = r + 1 < R ? c[r + 1].param0 : q->n_params;
        qt_ckpp.blk[b] = (qt_ckpp_blk){k, r, c[r].param0, i1};
        qt_ckpp.gparam[b] = c[r].gparam;
        qt_ckpp.gelem[b] = c[r].gelem;
    }
    return QT_OK;
}

int qt_checkpoint_set_stages(const qt_plan *p, const qt_plan *(*stage)(int k), const char *key)
{
    const int S = p->pipeline_stages;
    qt_ckpp.S = qt_ckpp.nblk = 0;
    if (S <= 1 || !key)   /* no checkpoint file in this run: the stages are not needed */
        return QT_OK;
    if (!stage || S > QT_PP_MAX_STAGES)
        return qt_fail(QT_E_PLAN, "%s: plan %s has %d pipeline stages, but the binary does not "
                       "list them (rebuild it from its plan_main.c)", key, p->run_name, S);
    for (int k = 0; k < S; k++) {
        const qt_plan *q = stage(k);
        if (!q || q->pipeline_stages != S || q->pp_stage != k ||
            q->pp_repeats != p->pp_repeats || p->pp_repeats > QT_PP_MAX_REPEATS)
            return qt_fail(QT_E_PLAN, "%s: plan %s: the binary's pipeline stage %d is not a "
                           "stage %d of %d with %d repeats (rebuild it from its plan_main.c)",
                           key, p->run_name, k, k, S, (int)p->pp_repeats);
        qt_ckpp.stage[k] = q;
        int rc = qt_ckpp_add_blocks(q, k);
        if (rc) return rc;
    }
    /* the blocks tile the one-rank parameters and their elements, in order */
    int64_t param0 = 0, elem0 = 0;
    for (int b = 0; b < qt_ckpp.nblk; b++) {
        const qt_ckpp_blk *k = &qt_ckpp.blk[b];
        const qt_plan *q = qt_ckpp.stage[k->stage];
        if (qt_ckpp.gparam[b] != param0 || qt_ckpp.gelem[b] != elem0 || k->i1 <= k->i0)
            return qt_fail(QT_E_PLAN, "%s: plan %s: pipeline stage %d's repeat chunk %d does not "
                           "hold the one-rank parameters after the chunk before it in the "
                           "one-rank order (first parameter %lld, element %lld; expected "
                           "%lld, %lld; %d local parameters): checkpoints need the stages' "
                           "chunks to tile the one-rank parameters", key, p->run_name,
                           k->stage, k->chunk, (long long)qt_ckpp.gparam[b],
                           (long long)qt_ckpp.gelem[b],
                           (long long)param0, (long long)elem0, (int)(k->i1 - k->i0));
        param0 += k->i1 - k->i0;
        for (int32_t i = k->i0; i < k->i1; i++) {
            const qt_tensor *t = &q->tensors[q->params[i].tensor];
            int64_t numel = 1;
            for (int d = 0; d < t->ndim; d++) numel *= t->global_shape[d];
            elem0 += numel;
        }
    }
    qt_comm_world(&qt_ckpp.rank, &qt_ckpp.n);
    qt_ckpp.mine = qt_pp_stage_of(qt_ckpp.rank, qt_ckpp.n, S, &qt_ckpp.local);
    if (qt_ckpp.stage[qt_ckpp.mine] != p)
        return qt_fail(QT_E_PLAN, "%s: plan %s: rank %d runs stage %d's plan %s", key, p->run_name,
                       qt_ckpp.rank, qt_ckpp.mine, qt_ckpp.stage[qt_ckpp.mine]->run_name);
    qt_ckpp.S = S;
    qt_ckpp.fill = 0;
    int R;   /* the chunk table cached for this rank's own plan again (the driver's) */
    return qt_pp_chunks(p, &R) ? QT_OK : QT_E_PLAN;
}

int qt_ckpp_on(const qt_plan *p)
{
    return p->pipeline_stages > 1 && qt_ckpp.S == p->pipeline_stages;
}

int qt_ckpp_count(const qt_plan *p)
{
    return qt_ckpp_on(p) ? qt_ckpp.S : 1;
}

const qt_plan *qt_ckpp_stage(const qt_plan *p, int k)
{
    return qt_ckpp_on(p) ? qt_ckpp.stage[k] : p;
}

int qt_ckpp_mine(const qt_plan *p)
{
    return qt_ckpp_on(p) ? qt_ckpp.mine : 0;
}

int qt_ckpp_blocks(const qt_plan *p)
{
    return qt_ckpp_on(p) ? qt_ckpp.nblk : 1;
}

const qt_ckpp_blk *qt_ckpp_block(const qt_plan *p, int b)
{
    if (qt_ckpp_on(p)) return &qt_ckpp.blk[b];
    qt_ckpp.whole = (qt_ckpp_blk){0, 0, 0, p->n_params};
    return &qt_ckpp.whole;
}

int qt_ckpp_writer(void)
{
    return qt_ckpp.rank == 0;
}

int qt_ckpp_sender(void)
{
    return qt_ckpp.mine > 0 && qt_ckpp.local == 0;
}

int64_t qt_ckpp_block_bytes(const qt_plan *p, int b)
{
    const qt_ckpp_blk *k = qt_ckpp_block(p, b);
    const qt_plan *q = qt_ckpp_stage(p, k->stage);
    qt_ckpt_piece pc;
    int64_t total = 0;
    for (int32_t i = k->i0; i < k->i1; i++)
        for (int32_t k = 0, n = qt_ckpt_count(q, i, 0); k < n; k++) {
            qt_ckpt_piece_at(q, i, 0, k, &pc);
            total += 4 * pc.rows * pc.row_len;
        }
    return total;
}

/* Sends the buffered bytes to world rank 0 and waits for the send. */
static int qt_ckpp_send(void)
{
    int rc = QT_OK;
    if (qt_ckpp.fill > 0 && !(rc = qt_coll_p2p_send(0, QT_CKPP_TAG, qt_ckpp.buf, qt_ckpp.fill)))
        rc = qt_coll_p2p_flush();
    qt_ckpp.fill = 0;
    return rc;
}

int qt_ckpp_put(const void *b, int64_t n)
{
    const unsigned char *c = b;
    while (n > 0) {
        int64_t k = QT_CKPP_CHUNK - qt_ckpp.fill;
        if (k > n) k = n;
        memcpy(qt_ckpp.buf + qt_ckpp.fill, c, (size_t)k);
        qt_ckpp.fill += k;
        c += k;
        n -= k;
        if (qt_ckpp.fill == QT_CKPP_CHUNK) {
            int rc = qt_ckpp_send();
            if (rc) return rc;
        }
    }
    return QT_OK;
}

int qt_ckpp_put_end(void)
{
    return qt_ckpp_send();
}

void qt_ckpp_take_begin(const qt_plan *p, int b)
{
    qt_ckpp.from = qt_ckpp_block(p, b)->stage;
    qt_ckpp.left = qt_ckpp_block_bytes(p, b);
    qt_ckpp.at = qt_ckpp.fill = 0;
}

int qt_ckpp_take_n(int64_t n, int *wrc)
{
    const int per = qt_ckpp.n / qt_ckpp.S;
    while (n > 0) {
        if (qt_ckpp.at == qt_ckpp.fill) {   /* the next chunk, cut as the sender cut it */
            const int64_t c = qt_ckpp.left < QT_CKPP_CHUNK ? qt_ckpp.left : QT_CKPP_CHUNK;
            if (c <= 0)
                return qt_fail(QT_E_PLAN, "checkpoint stream of pipeline stage %d: more bytes "
                               "asked than its region holds", qt_ckpp.from);
            int rc = qt_coll_p2p_recv(qt_ckpp.from * per, QT_CKPP_TAG, qt_ckpp.buf, c);
            if (rc) return rc;
            qt_ckpp.left -= c;
            qt_ckpp.at = 0;
            qt_ckpp.fill = c;
        }
        const int64_t k = n < qt_ckpp.fill - qt_ckpp.at ? n : qt_ckpp.fill - qt_ckpp.at;
        if (!*wrc) *wrc = qt_st_wwrite(qt_ckpp.buf + qt_ckpp.at, k);
        qt_ckpp.at += k;
        n -= k;
    }
    return QT_OK;
}

int qt_ckpp_take(const qt_plan *p, int b, int *wrc)
{
    qt_ckpp_take_begin(p, b);
    return qt_ckpp_take_n(qt_ckpp.left, wrc);
}

int qt_ckpp_bcast(void *buf, int64_t bytes)
{
    if (qt_ckpp.rank != 0)
        return qt_coll_p2p_recv(0, QT_CKPP_TAG, buf, bytes);
    for (int r = 1; r < qt_ckpp.n; r++) {
        int rc = qt_coll_p2p_send(r, QT_CKPP_TAG, buf, bytes);
        if (!rc) rc = qt_coll_p2p_flush();
        if (rc) return rc;
    }
    return QT_OK;
}
