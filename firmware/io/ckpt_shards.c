/* ckpt_shards.c - qt_checkpoint_load for sharded Hugging Face checkpoints (index + shards).
 *
 * Why two passes over the shards: at most QT_ST_MAX_OPEN safetensors files can be open and
 * an 80B checkpoint has ~41 shards, so the loader opens one shard at a time. Pass 1 checks
 * every shard header against the index and the plan; pass 2 reopens each shard and copies.
 * Invariants:
 *  - nothing is written into the arena before pass 1 has succeeded for every shard, and
 *    pass 1 also checks that every value it will load is finite;
 *  - the index and the shards agree exactly: each shard holds exactly the tensors the
 *    weight_map assigns to it (an error names the tensor, the shard and the index);
 *  - every plan piece is listed (split or fused expert names, as checkpoint.c), every
 *    listed tensor is a plan piece or skippable (mtp.*, Qwen3.5 model.visual.*, and
 *    optimizer.*, which sharded checkpoints never restore);
 *  - pass 2 re-checks each tensor's dtype and shape: a shard replaced between the passes
 *    is reported (QT_E_IO) instead of being read with the wrong layout.
 * Per-entry marks (st_index.h scratch byte): QT_MARK_PLAN = a plan piece uses the entry,
 * QT_MARK_SEEN = found in the shard the index names.
 */
#include <stdio.h>
#include <string.h>

#include "qt_io.h"
#include "qt_err.h"
#include "ckpt_map.h"
#include "ckpt_shards.h"
#include "safetensors.h"
#include "st_index.h"

#define QT_MARK_PLAN 1u
#define QT_MARK_SEEN 2u

static struct {
    char name[QT_ST_NAME_MAX];
    char shard[QT_SX_PATH_MAX];    /* path of the open shard; qt_st_open keeps the pointer */
} qt_cs;

/* Entry of piece k of parameter i (fused expert names when the index lists them). */
static int32_t qt_cs_entry(const qt_plan *p, int32_t i, int32_t k, qt_ckpt_piece *pc)
{
    int fused = 0;
    if (qt_ckpt_is_expert(p, i)) {
        qt_ckpt_fused_name(p, i, qt_cs.name, sizeof qt_cs.name);
        fused = qt_sx_find(qt_cs.name) >= 0;
    }
    if (k >= qt_ckpt_count(p, i, fused))
        return -2;
    qt_ckpt_piece_at(p, i, fused, k, pc);
    return qt_sx_find(pc->name);
}

/* Every plan piece must be listed; listed tensors must be plan pieces or skippable. */
static int qt_cs_check_names(const qt_plan *p, const char *index, int32_t *n_mtp,
                             int32_t *n_other)
{
    qt_ckpt_piece pc;
    char want[128];
    for (int32_t i = 0; i < p->n_params; i++)
        for (int32_t k = 0;; k++) {
            int32_t e = qt_cs_entry(p, i, k, &pc);
            if (e == -2)
                break;
            if (e < 0) {
                qt_ckpt_fmt_shape(want, sizeof want, pc.ndim, pc.shape);
                return qt_fail(QT_E_MISMATCH, "%s: missing tensor %s (expected shape %s): "
                                  "the index's weight_map does not list it", index, pc.name,
                                  want);
            }
            *qt_sx_mark(e) |= QT_MARK_PLAN;
        }
    for (int32_t e = 0; e < qt_sx_count(); e++) {
        const char *nm = qt_sx_name(e);
        int mtp;
        if (*qt_sx_mark(e) & QT_MARK_PLAN)
            continue;
        if (qt_ckpt_skippable(p, nm, &mtp))
            *(mtp ? n_mtp : n_other) += 1;
        else if (!strncmp(nm, "optimizer.", 10))
            *n_other += 1;
        else
            return qt_fail(QT_E_MISMATCH, "%s: unexpected tensor %s in shard %s (not a "
                              "parameter of plan %s)", index, nm,
                              qt_sx_shard_name(qt_sx_shard(e)), p->run_name ? p->run_name : "?");
    }
    return QT_OK;
}

static int qt_cs_open(int32_t s, int *h)
{
    int rc = qt_sx_shard_path(s, qt_cs.shard, sizeof qt_cs.shard);
    return rc ? rc : qt_st_open(qt_cs.shard, h);
}

/* Check (copy == 0) or copy (copy != 0) the plan pieces that live in open shard s. */
static int qt_cs_pieces(const qt_plan *p, int h, int32_t s, const char *index, int copy)
{
    qt_ckpt_piece pc;
    int rc;
    for (int32_t i = 0; i < p->n_params; i++) {
        float *base = qt_ckpt_region(p, p->params_offset, i);
        for (int32_t k = 0;; k++) {
            int32_t e = qt_cs_entry(p, i, k, &pc);
            if (e == -2)
                break;
            if (qt_sx_shard(e) != s)
                continue;
            const qt_st_tensor *t = qt_st_find(h, pc.name);
            if (!t)
                return qt_fail(QT_E_MISMATCH, "%s: the index maps tensor %s to shard %s, "
                                  "which does not contain it", index, pc.name, qt_cs.shard);
            if ((rc = qt_ckpt_check_tensor(&pc, t, qt_cs.shard, pc.name)))
                return copy ? qt_fail(QT_E_IO, "%s: shard changed during the load", index)
                            : rc;
            if (!copy && (rc = qt_ckpt_check_values(h, t, qt_cs.shard, pc.name, 0)))
                return rc;
            if (copy) qt_ckpt_copy_piece(h, t, &pc, base);
        }
    }
    return QT_OK;
}

/* Pass 1 for shard s: its tensors are exactly those the index assigns to it. */
static int qt_cs_check_shard(const qt_plan *p, int32_t s, const char *index)
{
    int h, rc;
    if ((rc = qt_cs_open(s, &h)))
        return rc;
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
    }
    if (!rc)
        rc = qt_cs_pieces(p, h, s, index, 0);
    qt_st_close(h);
    return rc;
}

int qt_ckpt_load_index(const qt_plan *p, const char *index, int want_optimizer)
{
    int32_t n_mtp = 0, n_other = 0;
    int rc, h;
    if ((rc = qt_sx_open(index)) || (rc = qt_cs_check_names(p, index, &n_mtp, &n_other)))
        return rc;
    for (int32_t s = 0; s < qt_sx_shards(); s++)
        if ((rc = qt_cs_check_shard(p, s, index)))
            return rc;
    for (int32_t e = 0; e < qt_sx_count(); e++)
        if (!(*qt_sx_mark(e) & QT_MARK_SEEN)) {
            qt_sx_shard_path(qt_sx_shard(e), qt_cs.shard, sizeof qt_cs.shard);
            return qt_fail(QT_E_MISMATCH, "%s: the index maps tensor %s to shard %s, which "
                              "does not contain it", index, qt_sx_name(e), qt_cs.shard);
        }
    if (want_optimizer)
        qt_note("%s: sharded checkpoint: optimizer state is only restored from single-file "
                   "qtrain checkpoints; Adam moments not loaded, starting at step 0", index);
    if (n_mtp)
        qt_note("%s: skipped %d mtp.* tensors (multi-token prediction is not trained)",
                   index, (int)n_mtp);
    if (n_other)
        qt_note("%s: skipped %d vision-tower or optimizer tensors", index, (int)n_other);
    for (int32_t s = 0; s < qt_sx_shards(); s++) {
        if ((rc = qt_cs_open(s, &h)))
            return rc;
        rc = qt_cs_pieces(p, h, s, index, 1);
        qt_st_close(h);
        if (rc)
            return rc;
    }
    return QT_OK;
}
