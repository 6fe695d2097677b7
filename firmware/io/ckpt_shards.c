/* ckpt_shards.c - qt_checkpoint_load for sharded Hugging Face checkpoints (index + shards),
 * with qtrain's optimizer state beside them (ckpt_dir.c writes both).
 *
 * Why two passes over the shards: at most QT_ST_MAX_OPEN safetensors files can be open and
 * an 80B checkpoint has ~41 shards, so the loader opens one shard at a time. Pass 1 checks
 * every shard header against the index and the plan; pass 2 reopens the shards and copies.
 * Invariants:
 *  - nothing is written into the arena before pass 1 has succeeded for every shard, and
 *    pass 1 also checks that every value it will load is finite (moments: v >= 0); so a
 *    missing, truncated or foreign shard is refused, naming the file, before any state
 *    changes;
 *  - the index and the shards agree exactly: each shard holds exactly the tensors the
 *    weight_map assigns to it (an error names the tensor, the shard and the index);
 *  - every plan piece is listed (a pipeline stage: every stage's, ckpt_pp.h; split or fused
 *    expert names, as checkpoint.c), every
 *    listed tensor is a plan piece or skippable (mtp.*, Qwen3.5 model.visual.*, and
 *    optimizer.* when the moments are not loaded);
 *  - optimizer.safetensors.index.json (same directory) is read, as part of the same weight
 *    map, only when the moments are wanted and its state hash is this plan's; the model
 *    index and it must name the same step, and so must every shard of a qtrain checkpoint
 *    (a shard of another save is refused);
 *  - on a mesh a rank checks the values of, and reads, only the pieces that overlap the
 *    global span of its own part (qt_ckpt_part_span); every shard's header is still
 *    checked by every rank, so a missing or truncated shard stops every rank;
 *  - pass 2 copies parameter by parameter, window by window (each window of rows into the
 *    staging region and from there to this rank's part on a mesh, ckpt_gather.c), so the
 *    pieces of one parameter
 *    may live in several shards; it re-checks each tensor's dtype and shape: a shard
 *    replaced between the passes is reported (QT_E_IO) instead of being read wrongly.
 * The multi-token-prediction head (docs/model.md 1.8), as checkpoint.c: a plan with the head
 * loading an index without any mtp.* tensor keeps the head as initialised (a note says so);
 * an mtp.* tensor that is not a plan piece of such a plan is refused (a save would drop it);
 * a plan carrying a head (mtp_keep_layers, ckpt_keep.c) checks its mtp.* tensors in pass 1
 * and keeps them, shard by shard in index order, after pass 2.
 * Per-entry marks (st_index.h scratch byte): QT_MARK_PLAN = a plan piece uses the entry,
 * QT_MARK_SEEN = found in the shard the index names.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "qt_io.h"
#include "qt_err.h"
#include "ckpt_map.h"
#include "ckpt_common.h"
#include "ckpt_shards.h"
#include "ckpt_keep.h"
#include "ckpt_pp.h"
#include "safetensors.h"
#include "st_index.h"
#include "qt_hash64.h"
#include "runtime/qt_ckpt_gather.h"
#include "comm/qt_coll.h"

#define QT_MARK_PLAN 1u
#define QT_MARK_SEEN 2u
#define QT_CS_MAX_PARAMS 8192   /* parameters with a recorded part span; beyond: read all */

static struct {
    char name[QT_ST_NAME_MAX + 16];
    char shard[QT_SX_PATH_MAX];    /* path of the open shard; qt_st_open keeps the pointer */
    char opt_index[QT_SX_PATH_MAX];
    int32_t n_parts;               /* 1 = parameters, 3 = with the moments */
    int32_t n_model_shards;        /* shards [0, n) are the model index's, the rest the
                                      optimizer index's */
    char note[2 * QT_SX_PATH_MAX + 256];   /* why the moments do not load: printed once the
                                              weights are known to fit */
    const char *step;              /* the index's "step" (qtrain checkpoints), or NULL */
    qt_hash64_state ident;         /* over the shards' XXH64s, in shard order (pass 1) */
    /* global element span of this rank's part of parameter i, per part (qt_ckpt_part_span):
     * pieces outside it hold nothing this rank keeps, so their data is neither checked
     * nor read (other ranks' experts and optimizer blocks) */
    int64_t lo[3][QT_CS_MAX_PARAMS], hi[3][QT_CS_MAX_PARAMS];
    int64_t n_pieces, n_skipped;
    int skip_mtp;                  /* a plan with the MTP head, an index without mtp.* */
} qt_cs;

/* Parameter i is the MTP head's and the index does not hold the head. */
static int qt_cs_skips(const qt_plan *p, int32_t i)
{
    return qt_cs.skip_mtp && !strncmp(p->params[i].name, "mtp.", 4);
}

static const char *const qt_cs_prefix[3] = {"", QT_CKPT_OPT_M, QT_CKPT_OPT_V};

/* The index file that lists shard s: messages name the optimizer index for its shards. */
static const char *qt_cs_index_of(int32_t s, const char *index)
{
    return qt_cs.n_parts == 3 && s >= qt_cs.n_model_shards ? qt_cs.opt_index : index;
}
static const int qt_cs_src[3] = {QT_CKS_PARAMS, QT_CKS_ADAM_M, QT_CKS_ADAM_V};

/* Entry of piece k of parameter i of part `part` (fused expert names when the index lists
 * them); -2 past the last piece, -1 when the index does not list it. qt_cs.name gets the
 * full name. */
static int32_t qt_cs_entry(const qt_plan *p, int32_t part, int32_t i, int32_t k,
                           qt_ckpt_piece *pc)
{
    int fused = 0;
    if (qt_cs_skips(p, i))
        return -2;
    if (qt_ckpt_is_expert(p, i)) {
        char f[QT_ST_NAME_MAX];
        qt_ckpt_fused_name(p, i, f, sizeof f);
        snprintf(qt_cs.name, sizeof qt_cs.name, "%s%s", qt_cs_prefix[part], f);
        fused = qt_sx_find(qt_cs.name) >= 0;
    }
    if (k >= qt_ckpt_count(p, i, fused))
        return -2;
    qt_ckpt_piece_at(p, i, fused, k, pc);
    snprintf(qt_cs.name, sizeof qt_cs.name, "%s%s", qt_cs_prefix[part], pc->name);
    return qt_sx_find(qt_cs.name);
}

/* 1 if piece pc of parameter i (part) may hold an element of this rank's part: row pieces
 * are tested against the span, other layouts (whole tensors, permuted rows) count whole. */
static int qt_cs_needed(const qt_ckpt_piece *pc, int32_t part, int32_t i)
{
    if (i >= QT_CS_MAX_PARAMS) return 1;
    const int64_t lo = qt_cs.lo[part][i], hi = qt_cs.hi[part][i];
    if (lo > hi) return 0;
    if (pc->kind != QT_MAP_ROWS) return 1;
    const int64_t a = pc->row0 * pc->row_len, b = a + pc->rows * pc->row_len - 1;
    return b >= lo && a <= hi;
}

/* Every plan piece must be listed (a pipeline stage: every stage's, the one-rank file's);
 * listed tensors must be plan pieces or skippable. */
static int qt_cs_check_names(const qt_plan *p, const char *index, int32_t *n_mtp,
                             int32_t *n_other)
{
    qt_ckpt_piece pc;
    char want[128];
    for (int32_t ps = 0; ps < qt_cs.n_parts * qt_ckpp_count(p); ps++) {
        const int32_t part = ps / qt_ckpp_count(p);
        const qt_plan *q = qt_ckpp_stage(p, ps % qt_ckpp_count(p));
        for (int32_t i = 0; i < q->n_params; i++)
            for (int32_t k = 0;; k++) {
                int32_t e = qt_cs_entry(q, part, i, k, &pc);
                if (e == -2)
                    break;
                if (e < 0) {
                    qt_ckpt_fmt_shape(want, sizeof want, pc.ndim, pc.shape);
                    return qt_fail(QT_E_MISMATCH, "%s: missing tensor %s (expected shape %s): "
                                   "the index's weight_map does not list it",
                                   part ? qt_cs.opt_index : index, qt_cs.name, want);
                }
                *qt_sx_mark(e) |= QT_MARK_PLAN;
            }
    }
    for (int32_t e = 0; e < qt_sx_count(); e++) {
        const char *nm = qt_sx_name(e);
        int mtp;
        if (*qt_sx_mark(e) & QT_MARK_PLAN)
            continue;
        if (!strncmp(nm, "mtp.", 4) && p->mtp_layers > 0)
            return qt_fail(QT_E_MISMATCH, "%s: tensor %s is not a parameter of plan %s, whose "
                           "multi-token-prediction head has %d depth(s) (mtp_num_layers); a "
                           "save would drop it: expected a plan with the checkpoint's depths",
                           index, nm, p->run_name ? p->run_name : "?", p->mtp_layers);
        if (qt_ckpt_skippable(p, nm, &mtp))
            *(mtp ? n_mtp : n_other) += 1;
        else if (!strncmp(nm, "optimizer.", 10) && qt_cs.n_parts == 1)
            *n_other += 1;
        else
            return qt_fail(QT_E_MISMATCH, "%s: unexpected tensor %s in shard %s (not a "
                              "parameter of plan %s)", qt_cs_index_of(qt_sx_shard(e), index), nm,
                              qt_sx_shard_name(qt_sx_shard(e)), p->run_name ? p->run_name : "?");
    }
    return QT_OK;
}

static int qt_cs_open(int32_t s, int *h)
{
    int rc = qt_sx_shard_path(s, qt_cs.shard, sizeof qt_cs.shard);
    return rc ? rc : qt_st_open(qt_cs.shard, h);
}

/* Pass 1 for shard s: its tensors are exactly those the index assigns to it, the plan
 * pieces in it have an accepted dtype and shape and finite values, and a qtrain shard was
 * written by the same save as the index. */
static int qt_cs_check_shard(const qt_plan *p, int32_t s, const char *index)
{
    qt_ckpt_piece pc;
    int h, rc;
    const int opt = qt_cs_index_of(s, index) != index;
    /* quiet: the reader's message is printed once, inside the one below that names the
     * index listing the shard (it used to come twice, bare and then quoted) */
    const int quiet = qt_set_quiet(1);
    rc = qt_cs_open(s, &h);
    qt_set_quiet(quiet);
    if (rc && opt) {
        char why[QT_SX_PATH_MAX + 256];   /* the reader's message, rewritten below */
        snprintf(why, sizeof why, "%s", qt_last_error());
        return qt_fail(rc, "%s: an optimizer shard cannot be read (%s); refusing to resume "
                       "without the optimizer state (give load_weights_only=1 to start from "
                       "the weights at step 0)", qt_cs.opt_index, why);
    }
    if (rc) {   /* the reader's message, with the index that lists the shard */
        char why[QT_SX_PATH_MAX + 256];
        snprintf(why, sizeof why, "%s", qt_last_error());
        return qt_fail(rc, "%s lists the shard %s for its tensors, and it cannot be read (%s)",
                       index, qt_sx_shard_name(s), why);
    }
    index = qt_cs_index_of(s, index);
    /* the content identity is for the run manifest, which world rank 0 writes: hashing a
     * shard reads all of it, so the other ranks (which read only their parts) skip it */
    if (p->n_ranks <= 1 || qt_comm_group_index(QT_COLL_ALL) == 0) {
        uint64_t fh = qt_st_hash(h);
        unsigned char le[8];
        for (int b = 0; b < 8; b++) le[b] = (unsigned char)(fh >> (8 * b));
        qt_hash64_update(&qt_cs.ident, le, 8);
    }
    const char *st = qt_st_meta(h, "step");
    if (qt_cs.step && (!st || strcmp(st, qt_cs.step)))
        rc = qt_fail(QT_E_MISMATCH, "%s: shard %s is from step %s, the index from step %s "
                     "(a shard of another save)", index, qt_cs.shard, st ? st : "(none)",
                     qt_cs.step);
    for (int32_t k = 0; k < qt_st_count(h) && !rc; k++) {
        const char *nm = qt_st_at(h, k)->name;
        int32_t e = qt_sx_find(nm);
        if (e < 0)
            rc = qt_fail(QT_E_MISMATCH, "%s: tensor %s is in shard %s but the index does "
                            "not list it", index, nm, qt_cs.shard);
        else if (qt_sx_shard(e) != s)
            rc = qt_fail(QT_E_MISMATCH, "%s: tensor %s is in shard %s but the index maps "
                            "it to %s", index, nm, qt_cs.shard,
                            qt_sx_shard_name(qt_sx_shard(e)));
        else
            *qt_sx_mark(e) |= QT_MARK_SEEN;
        if (!rc && !strncmp(nm, "mtp.", 4) && qt_ckpt_keep_on(p))
            rc = qt_ckpt_keep_check(p, qt_st_at(h, k), qt_cs.shard);
    }
    for (int32_t part = 0; part < qt_cs.n_parts && !rc; part++)
        for (int32_t i = 0; i < p->n_params && !rc; i++)
            for (int32_t k = 0; !rc; k++) {
                int32_t e = qt_cs_entry(p, part, i, k, &pc);
                if (e == -2)
                    break;
                if (qt_sx_shard(e) != s)
                    continue;
                const qt_st_tensor *t = qt_st_find(h, qt_cs.name);
                if (!t)
                    rc = qt_fail(QT_E_MISMATCH, "%s: the index maps tensor %s to shard %s, "
                                 "which does not contain it", index, qt_cs.name, qt_cs.shard);
                else if (!(rc = qt_ckpt_check_tensor(&pc, t, qt_cs.shard, qt_cs.name)) &&
                         qt_cs_needed(&pc, part, i))
                    rc = qt_ckpt_check_values(h, t, qt_cs.shard, qt_cs.name, part == 2);
            }
    qt_st_close(h);
    return rc;
}

/* The pieces of parameter i (part) with plan elements in rows [w0, w1) of its first
 * dimension, from whichever shard holds them, into the window win (qt_ckpt_copy_piece_window).
 * first: the parameter's first window, which counts its pieces and the skipped ones.
 * *h / *open_s: the shard kept open between pieces. */
static int qt_cs_copy_window(const qt_plan *p, const char *index, int *h, int32_t *open_s,
                             int32_t part, int32_t i, int64_t w0, int64_t w1, float *win,
                             int first)
{
    qt_ckpt_piece pc;
    const int64_t row = qt_ckpt_row_elems(p, i);
    int rc;
    for (int32_t k = 0;; k++) {
        int32_t e = qt_cs_entry(p, part, i, k, &pc);
        if (e == -2)
            break;
        if (e < 0)
            return qt_fail(QT_E_IO, "%s: index changed during the load", index);
        qt_cs.n_pieces += first;
        if (!qt_cs_needed(&pc, part, i)) {
            qt_cs.n_skipped += first;
            continue;
        }
        if (!qt_ckpt_piece_in_window(&pc, w0 * row, w1 * row))
            continue;
        if (qt_sx_shard(e) != *open_s) {
            if (*open_s >= 0)
                qt_st_close(*h);
            *open_s = -1;
            if ((rc = qt_cs_open(qt_sx_shard(e), h)))
                return rc;
            *open_s = qt_sx_shard(e);
        }
        const qt_st_tensor *t = qt_st_find(*h, qt_cs.name);
        if (qt_ckpt_check_tensor(&pc, t, qt_cs.shard, qt_cs.name))
            return qt_fail(QT_E_IO, "%s: shard %s changed during the load",
                           qt_cs_index_of(qt_sx_shard(e), index), qt_cs.shard);
        qt_ckpt_copy_piece_window(*h, t, &pc, win, w0 * row, w1 * row);
    }
    return QT_OK;
}

/* Pass 2: every parameter of every part, window by window (rows of its first dimension, as
 * many as the staging region holds: qt_ckpt_window_rows), piece by piece from whichever
 * shard holds it, then to this rank's part. *h / *open_s: the shard kept open between
 * pieces. */
static int qt_cs_copy(const qt_plan *p, const char *index, int *h, int32_t *open_s)
{
    for (int32_t part = 0; part < qt_cs.n_parts; part++)
        for (int32_t i = 0; i < p->n_params; i++) {
            if (qt_cs_skips(p, i))
                continue;
            const int64_t rows = p->tensors[p->params[i].tensor].global_shape[0];
            const int64_t wr = qt_ckpt_window_rows(p, i);
            for (int64_t w0 = 0; w0 < rows; w0 += wr) {
                const int64_t w1 = w0 + wr < rows ? w0 + wr : rows;
                float *win = qt_ckpt_scatter_rows_dst(p, qt_cs_src[part], i, w0);
                int rc = qt_cs_copy_window(p, index, h, open_s, part, i, w0, w1, win, w0 == 0);
                if (rc)
                    return rc;
                qt_ckpt_scatter_rows_done(p, qt_cs_src[part], i, w0, w1);
            }
        }
    return QT_OK;
}

/* Decide whether the moments load: optimizer.safetensors.index.json beside the index, of
 * this plan's state hash (want_optimizer QT_LOAD_RESUME_ANY, allow_state_change=1: of any
 * state hash, with a note; its absence refused) and the index's step. Appends it to the
 * weight map if so. */
static int qt_cs_optimizer(const qt_plan *p, const char *index, int want_optimizer)
{
    struct stat st;
    char mine[24];
    qt_cs.n_parts = 1;
    const char *slash = strrchr(index, '/');
    int n = slash ? snprintf(qt_cs.opt_index, sizeof qt_cs.opt_index, "%.*s/%s",
                             (int)(slash - index), index, QT_SX_OPT_INDEX_NAME)
                  : snprintf(qt_cs.opt_index, sizeof qt_cs.opt_index, "%s", QT_SX_OPT_INDEX_NAME);
    if (n < 0 || n >= (int)sizeof qt_cs.opt_index)
        return qt_fail(QT_E_ARG, "%s: path too long", index);
    if (want_optimizer == QT_LOAD_WEIGHTS)
        return QT_OK;
    if (stat(qt_cs.opt_index, &st) != 0) {
        const char *fmt = qt_sx_meta(0, "format");
        if (want_optimizer == QT_LOAD_RESUME_ANY)
            return qt_fail(QT_E_MISMATCH, "%s: allow_state_change=1, but %s is missing (no "
                           "optimizer state): there are no Adam moments or step to resume "
                           "(without allow_state_change=1 %s)", index, qt_cs.opt_index,
                           qt_ckpt_no_state_hint(fmt));
        if (fmt && !strcmp(fmt, QT_CKPT_FORMAT))
            return qt_fail(QT_E_MISMATCH, "%s: a qtrain checkpoint (format %s) without its "
                           "optimizer state: %s is missing; refusing to resume from the "
                           "weights alone, which would restart at step 0 (give "
                           "load_weights_only=1 to start from its weights at step 0 with "
                           "fresh Adam moments)", index, QT_CKPT_FORMAT, qt_cs.opt_index);
        snprintf(qt_cs.note, sizeof qt_cs.note, "%s: no %s beside it (no optimizer state); "
                 "Adam moments not loaded, starting at step 0", index, QT_SX_OPT_INDEX_NAME);
        return QT_OK;
    }
    snprintf(mine, sizeof mine, "0x%016llx", (unsigned long long)qt_ckpt_state_hash(p));
    int rc = qt_sx_append(qt_cs.opt_index);
    if (rc)
        return rc;
    const char *fs = qt_sx_meta(1, "state_hash"), *ms = qt_sx_meta(0, "step"),
               *os = qt_sx_meta(1, "step");
    if ((!fs || strcmp(fs, mine)) && want_optimizer == QT_LOAD_RESUME_ANY) {
        qt_ckpt_state_change(qt_cs.opt_index, "state hash", fs ? fs : "(none)", mine,
                             qt_cs.note, sizeof qt_cs.note);
    } else if (!fs || strcmp(fs, mine)) {
        snprintf(qt_cs.note, sizeof qt_cs.note, "%s: optimizer state was saved for state hash "
                 "%s (model, optimizer, schedule, global batch, objective), this plan's is %s; loading "
                 "the weights only, from step 0", qt_cs.opt_index, fs ? fs : "(none)", mine);
        return qt_sx_open(index);
    }
    if (!ms || !os || strcmp(ms, os))
        return qt_fail(QT_E_MISMATCH, "%s: optimizer state of step %s, but the model index "
                       "%s is of step %s (files of two saves)", qt_cs.opt_index,
                       os ? os : "(none)", index, ms ? ms : "(none)");
    qt_cs.n_parts = 3;
    return QT_OK;
}

/* The carried head (ckpt_keep.c): every mtp.* tensor of the model shards, shard by shard,
 * each in its header's order (after pass 1 checked them all). */
static int qt_cs_keep(const qt_plan *p)
{
    qt_ckpt_keep_begin(p);
    for (int32_t s = 0; s < qt_cs.n_model_shards && qt_ckpt_keep_on(p); s++) {
        int any = 0, h, rc;
        for (int32_t e = 0; e < qt_sx_count() && !any; e++)
            any = qt_sx_shard(e) == s && !strncmp(qt_sx_name(e), "mtp.", 4);
        if (!any)
            continue;
        if ((rc = qt_cs_open(s, &h)))
            return rc;
        for (int32_t k = 0; k < qt_st_count(h); k++)
            if (!strncmp(qt_st_at(h, k)->name, "mtp.", 4))
                qt_ckpt_keep_add(p, h, qt_st_at(h, k));
        qt_st_close(h);
    }
    return QT_OK;
}

/* The start-up notes of a load that passed (world rank 0 says them once). */
static void qt_cs_notes(const qt_plan *p, const char *index, int32_t n_mtp, int32_t n_other)
{
    if (p->n_ranks > 1 && qt_comm_group_index(QT_COLL_ALL) != 0)
        return;
    if (qt_cs.note[0])
        qt_note("%s", qt_cs.note);
    if (n_mtp && qt_ckpt_keep_on(p))
        qt_note("%s: keeps %d mtp.* tensors (the multi-token-prediction head, mtp_keep_layers "
                "%d: not trained, written unchanged into every save)", index, (int)n_mtp,
                p->mtp_keep_layers);
    else if (n_mtp)
        qt_note("%s: skipped %d mtp.* tensors (multi-token prediction is not trained; "
                "mtp_keep_layers: 1 carries them into saves)", index, (int)n_mtp);
    if (qt_cs.skip_mtp)
        qt_note("%s: holds no mtp.* tensors: the multi-token-prediction head (%d depth(s)) "
                "starts from its initialisation", index, p->mtp_layers);
    if (n_other)
        qt_note("%s: skipped %d vision-tower or optimizer tensors", index, (int)n_other);
}

int qt_ckpt_load_index(const qt_plan *p, const char *index, int want_optimizer,
                       int64_t *step_out, int64_t *data_pos_out)
{
    int32_t n_mtp = 0, n_other = 0, open_s = -1;
    int rc, h = -1;
    int64_t step = 0, data_pos = 0;
    qt_cs.note[0] = 0;
    qt_cs.n_parts = 1;
    if ((rc = qt_sx_open(index)))
        return rc;
    qt_cs.n_model_shards = qt_sx_shards();
    int has_mtp = 0;
    for (int32_t e = 0; e < qt_sx_count(); e++)
        has_mtp |= !strncmp(qt_sx_name(e), "mtp.", 4);
    qt_cs.skip_mtp = p->mtp_layers > 0 && !has_mtp;
    qt_ckpt_keep_check_start();
    if ((rc = qt_cs_optimizer(p, index, want_optimizer)))
        return rc;
    const char *fmt = qt_sx_meta(0, "format");
    qt_cs.step = fmt && !strcmp(fmt, QT_CKPT_FORMAT) ? qt_sx_meta(0, "step") : NULL;
    if (qt_cs.n_parts == 3 &&
        ((rc = qt_ckpt_meta_int(index, "step", qt_sx_meta(0, "step"), &step)) ||
         (rc = qt_ckpt_meta_int(index, "data_pos", qt_sx_meta(0, "data_pos"), &data_pos))))
        return rc;
    if ((rc = qt_cs_check_names(p, index, &n_mtp, &n_other)))
        return rc;
    for (int32_t part = 0; part < qt_cs.n_parts; part++)
        for (int32_t i = 0; i < p->n_params && i < QT_CS_MAX_PARAMS; i++)
            qt_ckpt_part_span(p, qt_cs_src[part], i, &qt_cs.lo[part][i], &qt_cs.hi[part][i]);
    qt_cs.n_pieces = qt_cs.n_skipped = 0;
    qt_hash64_init(&qt_cs.ident);
    for (int32_t s = 0; s < qt_sx_shards(); s++)
        if ((rc = qt_cs_check_shard(p, s, index)))
            return rc;
    for (int32_t e = 0; e < qt_sx_count(); e++)
        if (!(*qt_sx_mark(e) & QT_MARK_SEEN)) {
            qt_sx_shard_path(qt_sx_shard(e), qt_cs.shard, sizeof qt_cs.shard);
            return qt_fail(QT_E_MISMATCH, "%s: the index maps tensor %s to shard %s, which "
                              "does not contain it", qt_cs_index_of(qt_sx_shard(e), index),
                              qt_sx_name(e), qt_cs.shard);
        }
    qt_cs_notes(p, index, n_mtp, n_other);
    rc = qt_cs_copy(p, index, &h, &open_s);
    if (open_s >= 0)
        qt_st_close(h);
    if (!rc)
        rc = qt_cs_keep(p);
    if (!rc && qt_cs.n_skipped)
        qt_note("%s: %lld of %lld tensors hold only other ranks' parts (experts, optimizer "
                "blocks): not read", index, (long long)qt_cs.n_skipped,
                (long long)qt_cs.n_pieces);
    if (!rc)
        rc = qt_ckpt_meta_int(index, "data_holdout", qt_sx_meta(0, "data_holdout"),
                              &qt_ckpt_ident_mut()->data_holdout);
    if (!rc) {
        qt_ckpt_ident *id = qt_ckpt_ident_mut();
        const char *dh = qt_sx_meta(0, "data_hash");
        snprintf(id->data_hash, sizeof id->data_hash, "%s", dh ? dh : "");
        const char *dt = qt_sx_meta(0, "dtype");
        snprintf(id->dtype, sizeof id->dtype, "%s", dt ? dt : "");
        const char *mb = qt_sx_meta(0, "moe_buffer");
        snprintf(id->moe_buffer, sizeof id->moe_buffer, "%s", mb ? mb : "");
        id->content_hash = qt_hash64_final(&qt_cs.ident);
        id->n_files = qt_sx_shards();
        id->loaded = 1;
    }
    if (!rc && step_out)
        *step_out = step;
    if (!rc && data_pos_out)
        *data_pos_out = data_pos;
    return rc;
}
