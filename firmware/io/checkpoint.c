/* checkpoint.c - qt_checkpoint_load / _save / _save_grads (qt_io.h) over safetensors.
 *
 * Invariants:
 *  - saving is atomic (st_write.c): <path> is either the old file or the complete new one;
 *  - loading is all-or-nothing: the whole header is checked against the plan (every
 *    expected tensor present with an accepted dtype and shape, nothing unexpected, plan
 *    hash of optimizer state), and every loaded value (weights, Adam m and v) is finite,
 *    with v >= 0, before the first byte is written into the arena;
 *  - tensor order on disk is plan parameter order, pieces in ckpt_map.c order, regions
 *    params then optimizer.m then optimizer.v, so equal arenas give identical files.
 * A load= directory or *.index.json (Hugging Face sharded checkpoint, qtrain's save=DIR
 * with its optimizer index beside it) goes to ckpt_shards.c, which keeps the same
 * all-or-nothing contract over several files, on any mesh; a save= directory is written by
 * ckpt_dir.c (every rank writes its shards), a save= *.safetensors file here.
 * Checkpoints with optimizer state carry "format":"qtrain-1"; weight-only files carry
 * "format":"pt" because transformers refuses safetensors files with another format.
 *
 * Meshes (n_ranks > 1). A file is the same on every mesh: global shapes, one copy of each
 * tensor. Saving is collective: every rank walks the same tensors in file order and
 * gathers each one, window by window (rows of its first dimension, as many as the staging
 * region holds), through firmware/runtime/ckpt_gather.c (params from the compute copies
 * or expert shards, m / v / gradients from the optimizer blocks); only world rank 0 opens,
 * writes and renames the file, and rank 0's result is broadcast so every rank returns the
 * same code. A save that finds the ranks' parts inconsistent fails without a file. Loading
 * is local: every rank reads the file itself and keeps its part (qt_ckpt_scatter_*).
 * Optimizer state resumes when the file's "state_hash" (qt_ckpt_state_hash: everything
 * that sets the training trajectory, nothing that only sets the mesh or the batch split)
 * equals the plan's; files without one (older qtrain-1) fall back to the whole-plan hash.
 * Pipeline meshes (ckpt_pp.h): the file is the one-rank file of every stage's parameters,
 * block after block (the stages' repeat chunks in the one-rank order); world rank 0 writes
 * it and receives the other stages' tensors from their first ranks; a load checks every
 * stage's tensors and each stage keeps its own.
 *
 * Layering: this file is the dispatcher (file or directory, load or save) and the
 * single-file reader and writer; it calls ckpt_shards.c (sharded load), ckpt_dir.c
 * (directory save and its target check) and ckpt_common.c (load record, data hash, state
 * hash, plan check), and none of them calls back.
 *
 * qt_checkpoint_check_target vets a save=/dump_grads= destination before training: it
 * never lets a save replace a non-regular file, a symbolic link or the training data, and
 * replaces another kind of file only when asked to (overwrite); it only reads. A gradient
 * dump carries __metadata__ "content":"gradients", so a later dump_grads= replaces only a
 * file qtrain wrote as one (not weights of the same layout).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"
#include "ckpt_map.h"
#include "safetensors.h"
#include "st_index.h"
#include "ckpt_common.h"
#include "ckpt_dir.h"
#include "ckpt_shards.h"
#include "ckpt_keep.h"
#include "ckpt_pp.h"
#include "comm/qt_coll.h"
#include "runtime/qt_ckpt_gather.h"
#include "qt_ops.h"


static struct {
    unsigned char used[QT_ST_MAX_TENSORS];   /* file tensor consumed by the plan */
    char name[QT_ST_NAME_MAX + 16];
    char path[QT_SX_PATH_MAX];               /* load= argument resolved (st_index.c) */
    char note[QT_SX_PATH_MAX + 512];         /* why the moments do not load, printed once
                                                the weights are known to fit */
    int skip_mtp;                            /* a plan with the MTP head loading a file
                                                without mtp.*: the head keeps its init */
    char buf[96];                            /* a save's "moe_buffer" value */
} qt_ck;

/* Parameter i is the MTP head's and the file does not hold the head (qt_load_validate). */
static int qt_load_skips(const qt_plan *p, int32_t i)
{
    return qt_ck.skip_mtp && !strncmp(p->params[i].name, "mtp.", 4);
}

/* ---- ranks ---- */

/* World rank 0 writes files; on one rank that is this process (a pipeline: stage 0's
 * first rank, not every stage's). */
static int qt_ckpt_root(const qt_plan *p)
{
    if (qt_ckpp_on(p))
        return qt_ckpp_writer();
    return p->n_ranks <= 1 || qt_comm_group_index(QT_COLL_ALL) == 0;
}

/* Every rank takes rank 0's *code. Returns the collective's own result (QT_E_COMM: abort). */
static int qt_ckpt_agree(const qt_plan *p, int *code)
{
    if (p->n_ranks <= 1)
        return QT_OK;
    int64_t v = *code;
    int rc = qt_ckpp_on(p) ? qt_ckpp_bcast(&v, (int64_t)sizeof v)
                           : qt_coll_broadcast(QT_COLL_ALL, &v, (int64_t)sizeof v, 0);
    *code = (int)v;
    return rc;
}

/* ---- save ---- */

/* Every stage's parameters (a pipeline's blocks in order: the one-rank file). */
static int qt_save_declare(const qt_plan *p, const char *prefix)
{
    qt_ckpt_piece pc;
    int rc;
    for (int b = 0; b < qt_ckpp_blocks(p); b++) {
        const qt_ckpp_blk *k = qt_ckpp_block(p, b);
        const qt_plan *q = qt_ckpp_stage(p, k->stage);
        for (int32_t i = k->i0; i < k->i1; i++)
            for (int32_t j = 0, n = qt_ckpt_count(q, i, 0); j < n; j++) {
                qt_ckpt_piece_at(q, i, 0, j, &pc);
                snprintf(qt_ck.name, sizeof qt_ck.name, "%s%s", prefix, pc.name);
                if ((rc = qt_st_wadd(qt_ck.name, QT_ST_F32, pc.ndim, pc.shape)))
                    return rc;
            }
    }
    return QT_OK;
}

/* Every parameter of region src, piece by piece in file order, each gathered window by
 * window (collective on a mesh: every rank walks the same pieces); the root writes unless a
 * write already failed (*wrc), and the walk goes on so the other ranks' collectives are
 * matched. A pipeline: each stage walks its own blocks over its mesh; the root writes
 * stage 0's and receives the other stages' from their first ranks (ckpt_pp.c), in block
 * order. Returns a gather or stream failure; write errors go to *wrc. */
static int qt_save_data(const qt_plan *p, int src, int root, int *wrc)
{
    const int me = qt_ckpp_mine(p);
    for (int b = 0; b < qt_ckpp_blocks(p); b++) {
        const qt_ckpp_blk *k = qt_ckpp_block(p, b);
        if (k->stage != me) {
            int rc = root ? qt_ckpp_take(p, b, wrc) : QT_OK;
            if (rc)
                return rc;
            continue;
        }
        const int write = k->stage > 0 ? (qt_ckpp_sender() ? QT_CKPT_SEND : 0) : root;
        for (int32_t i = k->i0; i < k->i1; i++) {
            qt_ckpt_win w = {0, 0, 0};
            for (int32_t j = 0, n = qt_ckpt_count(p, i, 0); j < n; j++) {
                int rc = qt_ckpt_save_piece(p, src, i, j, write, wrc, &w);
                if (rc)
                    return rc;
            }
        }
        if (write == QT_CKPT_SEND) {
            int rc = qt_ckpp_put_end();
            if (rc)
                return rc;
        }
    }
    return QT_OK;
}

/* Root only: open the temporary, write the metadata and the whole header. */
static int qt_save_header(const qt_plan *p, const char *path, int with_opt, int src,
                          int64_t step, int64_t data_pos)
{
    char num[32];
    int rc;
    if ((rc = qt_st_wopen(path)))
        return rc;
    rc = qt_st_wmeta("format", with_opt ? QT_CKPT_FORMAT : "pt");
    if (!rc && src == QT_CKS_GRADS)   /* what a later dump_grads= may replace */
        rc = qt_st_wmeta("content", QT_CKPT_GRADS_CONTENT);
    if (!rc) {
        snprintf(num, sizeof num, "%lld", (long long)step);
        rc = qt_st_wmeta("step", num);
    }
    if (!rc) {
        snprintf(num, sizeof num, "%lld", (long long)data_pos);
        rc = qt_st_wmeta("data_pos", num);
    }
    if (!rc && qt_ckpt_data_hash(num))
        rc = qt_st_wmeta("data_hash", num);
    if (!rc && qt_ckpt_data_holdout(num))
        rc = qt_st_wmeta("data_holdout", num);
    if (!rc && with_opt && qt_ckpt_dtype_meta(p))
        rc = qt_st_wmeta("dtype", qt_ckpt_dtype_meta(p));
    if (!rc && with_opt && qt_ckpt_buffer_meta(p, qt_ck.buf, sizeof qt_ck.buf))
        rc = qt_st_wmeta("moe_buffer", qt_ck.buf);
    if (!rc) {
        snprintf(num, sizeof num, "0x%016llx", (unsigned long long)p->hash);
        rc = qt_st_wmeta("plan_hash", num);
    }
    if (!rc && with_opt) {
        snprintf(num, sizeof num, "0x%016llx", (unsigned long long)qt_ckpt_state_hash(p));
        rc = qt_st_wmeta("state_hash", num);
    }
    if (!rc)
        rc = qt_st_wmeta("run_name", p->run_name ? p->run_name : "");
    if (!rc)
        rc = qt_save_declare(p, "");
    if (!rc && src == QT_CKS_PARAMS)   /* the carried MTP head, unchanged (ckpt_keep.c) */
        rc = qt_ckpt_keep_declare(p);
    if (!rc && with_opt && !(rc = qt_save_declare(p, QT_CKPT_OPT_M)))
        rc = qt_save_declare(p, QT_CKPT_OPT_V);
    if (!rc)
        rc = qt_st_wbegin();
    return rc;
}

static int qt_save(const qt_plan *p, const char *path, int with_opt, int src, int64_t step,
                   int64_t data_pos)
{
    const int root = qt_ckpt_root(p);
    int wrc = QT_OK, rc = qt_ckpt_check_plan(p, path);   /* same verdict on every rank */
    if (rc)
        return rc;
    if (root)
        wrc = qt_save_header(p, path, with_opt, src, step, data_pos);
    if ((rc = qt_ckpt_agree(p, &wrc)) || wrc)
        goto out;
    rc = qt_save_data(p, src, root, &wrc);
    if (!rc && root && !wrc && src == QT_CKS_PARAMS)
        wrc = qt_ckpt_keep_write(p);
    if (!rc && with_opt &&
        !(rc = qt_save_data(p, QT_CKS_ADAM_M, root, &wrc)))
        rc = qt_save_data(p, QT_CKS_ADAM_V, root, &wrc);
    if (rc)
        goto out;
    if (root)
        wrc = wrc ? wrc : qt_st_wcommit();    /* commit aborts by itself on failure */
    if (!(rc = qt_ckpt_agree(p, &wrc)))
        return wrc;
out:
    if (root)
        qt_st_wabort();
    return rc ? rc : wrc;
}

int qt_checkpoint_save(const qt_plan *p, const char *path, int with_optimizer, int64_t step,
                       int64_t data_pos)
{
    return qt_save(p, path, with_optimizer, QT_CKS_PARAMS, step, data_pos);
}

int qt_checkpoint_save_grads(const qt_plan *p, const char *path)
{
    return qt_save(p, path, 0, QT_CKS_GRADS, 0, 0);
}

/* ---- destinations ---- */

static const char *qt_file_kind(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* A destination that is a symbolic link: a save renames its new file over the path, or
 * swaps a new directory in at the path and deletes the old one (ckpt_dir.c), which would
 * replace the link itself and, for a directory, empty the one it points to (its files
 * moved to the link's place; across file systems the save failed after training).
 * Refused whatever overwrite says, naming where it points; QT_OK when path is no link. */
static int qt_refuse_link(const char *key, const char *path, int is_dir)
{
    char to[PATH_MAX];
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode))
        return QT_OK;
    if (!realpath(path, to)) {   /* dangling: the link's own text */
        ssize_t n = readlink(path, to, sizeof to - 1);
        to[n > 0 ? n : 0] = 0;
    }
    return qt_fail(QT_E_ARG, "%s=%s is a symbolic link (to %s); a save %s, so it would "
                   "replace the link, not write to %s%s: give %s=%s (the path it points to) "
                   "or another path", key, path, to,
                   is_dir ? "swaps a new directory in at the path and deletes the old one"
                          : "renames its new file over the path",
                   to, is_dir ? ", and empty the directory it points to" : "", key, to);
}

int qt_checkpoint_check_target(const char *key, const char *path, int qtrain_format,
                               int overwrite, const char *data_path)
{
    struct stat st, ds;
    if (qtrain_format && !qt_checkpoint_is_file(path)) {
        int rc = qt_ckpt_check_dir_target(key, path, overwrite);
        return rc != QT_OK ? rc : qt_refuse_link(key, path, 1);
    }
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return qt_refuse_link(key, path, 0);   /* a dangling link */
        return qt_fail(QT_E_ARG, "%s=%s: cannot stat: %s", key, path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return qt_fail(QT_E_ARG, "%s=%s exists and is %s; expected the path of a file to "
                          "write (new, or a %s file to replace)", key, path,
                          qt_file_kind(st.st_mode),
                          qtrain_format ? "qtrain checkpoint" : "safetensors");
    if (qt_refuse_link(key, path, 0) != QT_OK)
        return QT_E_ARG;
    if (data_path && stat(data_path, &ds) == 0 && ds.st_dev == st.st_dev &&
        ds.st_ino == st.st_ino)
        return qt_fail(QT_E_ARG, "%s=%s is the data file data=%s (same device and inode); "
                          "refusing to write over the training data", key, path, data_path);
    if (overwrite)
        return QT_OK;
    int h, was = qt_set_quiet(1);
    int rc = qt_st_open(path, &h);
    qt_set_quiet(was);
    if (rc) {
        char why[512];   /* the reader's message, copied: it is rewritten below */
        snprintf(why, sizeof why, "%s", qt_last_error());
        return qt_fail(QT_E_ARG, "%s=%s exists and is not a %s (%s); give overwrite=1 to "
                          "replace it", key, path, qtrain_format ? "qtrain checkpoint" :
                          "safetensors file", why);
    }
    const char *fmt = qt_st_meta(h, "format"), *what = qt_st_meta(h, "content");
    int ok = qtrain_format ? fmt && !strcmp(fmt, QT_CKPT_FORMAT)
                           : what && !strcmp(what, QT_CKPT_GRADS_CONTENT);
    if (!ok && qtrain_format)
        rc = qt_fail(QT_E_ARG, "%s=%s exists and is not a qtrain checkpoint (__metadata__ "
                        "format is %s%s%s, expected \"%s\"); give overwrite=1 to replace it",
                        key, path, fmt ? "\"" : "", fmt ? fmt : "absent", fmt ? "\"" : "",
                        QT_CKPT_FORMAT);
    else if (!ok)
        rc = qt_fail(QT_E_ARG, "%s=%s exists and is not a qtrain gradient dump (__metadata__ "
                     "content is %s%s%s, expected \"%s\"); give overwrite=1 to replace it",
                     key, path, what ? "\"" : "", what ? what : "absent", what ? "\"" : "",
                     QT_CKPT_GRADS_CONTENT);
    qt_st_close(h);
    return rc;
}

void qt_checkpoint_remove_stale(const char *path)
{
    qt_st_remove_stale(path);
}

/* ---- load ---- */

static int qt_fused_in_file(const qt_plan *p, int h, int32_t i, const char *prefix)
{
    char fused[QT_ST_NAME_MAX];
    if (!qt_ckpt_is_expert(p, i))
        return 0;
    qt_ckpt_fused_name(p, i, fused, sizeof fused);
    snprintf(qt_ck.name, sizeof qt_ck.name, "%s%s", prefix, fused);
    return qt_st_find(h, qt_ck.name) != NULL;
}

/* Check every piece of every parameter under `prefix` and mark the file tensors used. A
 * pipeline stage checks every stage's pieces (the file is the one-rank file) and the
 * values of its own (the other stages check theirs). */
static int qt_load_check(const qt_plan *p, int h, const char *path, const char *prefix)
{
    qt_ckpt_piece pc;
    for (int s = 0; s < qt_ckpp_count(p); s++) {
        const qt_plan *q = qt_ckpp_stage(p, s);
        for (int32_t i = 0; i < q->n_params; i++) {
            if (qt_load_skips(q, i)) continue;
            int fused = qt_fused_in_file(q, h, i, prefix);
            for (int32_t k = 0, n = qt_ckpt_count(q, i, fused); k < n; k++) {
                qt_ckpt_piece_at(q, i, fused, k, &pc);
                snprintf(qt_ck.name, sizeof qt_ck.name, "%s%s", prefix, pc.name);
                const qt_st_tensor *t = qt_st_find(h, qt_ck.name);
                int rc = qt_ckpt_check_tensor(&pc, t, path, qt_ck.name);
                /* values too, before anything is written: a NaN weight or moment, or a
                 * negative second moment, would load "successfully" and train on NaN */
                if (!rc && q == p)
                    rc = qt_ckpt_check_values(h, t, path, qt_ck.name,
                                              !strcmp(prefix, QT_CKPT_OPT_V));
                if (rc)
                    return rc;
                qt_ck.used[t - qt_st_at(h, 0)] = 1;
            }
        }
    }
    return QT_OK;
}

/* The tensors of the plan's parameters (names and shapes; not their values) in an existing
 * qtrain checkpoint file h: QT_OK, or the first mismatch (quiet: the caller words it). The
 * MTP head's are not asked for: a plan with the head loads a file without it (its head
 * keeps its initialisation), so that file is the same model's. */
static int qt_target_model_check(const qt_plan *p, int h, const char *path)
{
    qt_ckpt_piece pc;
    for (int s = 0; s < qt_ckpp_count(p); s++) {
        const qt_plan *q = qt_ckpp_stage(p, s);
        for (int32_t i = 0; i < q->n_params; i++) {
            if (!strncmp(q->params[i].name, "mtp.", 4)) continue;
            int fused = qt_fused_in_file(q, h, i, "");
            for (int32_t k = 0, n = qt_ckpt_count(q, i, fused); k < n; k++) {
                qt_ckpt_piece_at(q, i, fused, k, &pc);
                int rc = qt_ckpt_check_tensor(&pc, qt_st_find(h, pc.name), path, pc.name);
                if (rc) return rc;
            }
        }
    }
    return QT_OK;
}

int qt_checkpoint_check_target_model(const qt_plan *p, const char *key, const char *path)
{
    struct stat st;
    if (!qt_checkpoint_is_file(path) || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return QT_OK;
    char run[160], why[512];
    int h, was = qt_set_quiet(1);
    if (qt_st_open(path, &h) != QT_OK) {   /* not safetensors: qt_checkpoint_check_target's */
        qt_set_quiet(was);
        return QT_OK;
    }
    const char *fmt = qt_st_meta(h, "format"), *rn = qt_st_meta(h, "run_name");
    snprintf(run, sizeof run, "%s", rn ? rn : "(unnamed)");
    int rc = fmt && !strcmp(fmt, QT_CKPT_FORMAT) ? qt_target_model_check(p, h, path) : QT_OK;
    if (rc) snprintf(why, sizeof why, "%s", qt_last_error());
    qt_set_quiet(was);
    qt_st_close(h);
    if (rc)
        return qt_fail(QT_E_ARG, "%s=%s is a qtrain checkpoint of another model (run %s; %s); "
                       "a save would replace it: give another path, or overwrite=1 to "
                       "replace it", key, path, run, why);
    return QT_OK;
}

/* Each parameter's global tensor goes to its place in the region, or window by window
 * (rows of its first dimension) to the staging region and from there to this rank's part
 * (ckpt_gather.c). */
static void qt_load_copy(const qt_plan *p, int h, const char *prefix, int src)
{
    qt_ckpt_piece pc;
    for (int32_t i = 0; i < p->n_params; i++) {
        if (qt_load_skips(p, i)) continue;
        int fused = qt_fused_in_file(p, h, i, prefix);
        const int64_t rows = p->tensors[p->params[i].tensor].global_shape[0];
        const int64_t wr = qt_ckpt_window_rows(p, i), row = qt_ckpt_row_elems(p, i);
        for (int64_t w0 = 0; w0 < rows; w0 += wr) {
            const int64_t w1 = w0 + wr < rows ? w0 + wr : rows;
            float *win = qt_ckpt_scatter_rows_dst(p, src, i, w0);
            for (int32_t k = 0, n = qt_ckpt_count(p, i, fused); k < n; k++) {
                qt_ckpt_piece_at(p, i, fused, k, &pc);
                if (!qt_ckpt_piece_in_window(&pc, w0 * row, w1 * row))
                    continue;
                snprintf(qt_ck.name, sizeof qt_ck.name, "%s%s", prefix, pc.name);
                qt_ckpt_copy_piece_window(h, qt_st_find(h, qt_ck.name), &pc, win, w0 * row,
                                          w1 * row);
            }
            qt_ckpt_scatter_rows_done(p, src, i, w0, w1);
        }
    }
}

/* Whether the moments load with the weights: *load_opt, and the note that says why not
 * into qt_ck.note (printed only once the weights are known to fit, so a checkpoint of
 * another model is refused without first announcing "the weights only"). A qtrain
 * checkpoint (format qtrain-1) always holds its optimizer state: without it, a resume is
 * refused (QT_E_MISMATCH) unless the caller wants the weights only (want_opt
 * QT_LOAD_WEIGHTS, load_weights_only=1). want_opt QT_LOAD_RESUME_ANY (allow_state_change=1)
 * loads the moments under another state hash too (the note says so, the load record keeps
 * both hashes) and refuses a file without them. */
static int qt_load_opt_decision(const qt_plan *p, int h, const char *path, int want_opt,
                                int has_opt, int *load_opt)
{
    char mine[24];
    const char *fs = qt_st_meta(h, "state_hash"), *fmt = qt_st_meta(h, "format");
    qt_ck.note[0] = 0;
    *load_opt = want_opt != QT_LOAD_WEIGHTS && has_opt;
    if (want_opt == QT_LOAD_RESUME_ANY && !has_opt)
        return qt_fail(QT_E_MISMATCH, "%s: allow_state_change=1, but the file holds no "
                       "optimizer state (no optimizer.* tensors): there are no Adam moments "
                       "or step to resume (without allow_state_change=1 %s)", path,
                       qt_ckpt_no_state_hint(fmt));
    if (*load_opt && fs) {
        /* Same model, optimizer, schedule and global batch: the moments resume this plan
         * bit-exactly whatever mesh or batch split saved them. */
        snprintf(mine, sizeof mine, "0x%016llx", (unsigned long long)qt_ckpt_state_hash(p));
        if (strcmp(fs, mine) && want_opt == QT_LOAD_RESUME_ANY) {
            qt_ckpt_state_change(path, "state hash", fs, mine, qt_ck.note, sizeof qt_ck.note);
        } else if (strcmp(fs, mine)) {
            snprintf(qt_ck.note, sizeof qt_ck.note, "%s: optimizer state was saved for state "
                     "hash %s (model, optimizer, schedule, global batch, objective), this plan's is %s; "
                     "loading the weights only, from step 0", path, fs, mine);
            *load_opt = 0;
        }
    } else if (*load_opt) {
        /* a file without a state hash: the old rule, the whole plan must be the same */
        const char *fh = qt_st_meta(h, "plan_hash");
        snprintf(mine, sizeof mine, "0x%016llx", (unsigned long long)p->hash);
        if ((!fh || strcmp(fh, mine)) && want_opt == QT_LOAD_RESUME_ANY) {
            qt_ckpt_state_change(path, "plan hash", fh ? fh : "(none)", mine, qt_ck.note,
                                 sizeof qt_ck.note);
        } else if (!fh || strcmp(fh, mine)) {
            /* Another plan's Adam state (other batch split, schedule or run) does not resume
             * this plan bit-exactly; its weights are still good, so they load alone. */
            snprintf(qt_ck.note, sizeof qt_ck.note, "%s: optimizer state was saved for plan "
                     "hash %s, this plan's hash is %s; loading the weights only, from step 0",
                     path, fh ? fh : "(none)", mine);
            *load_opt = 0;
        }
    } else if (want_opt != QT_LOAD_WEIGHTS && fmt && !strcmp(fmt, QT_CKPT_FORMAT)) {
        return qt_fail(QT_E_MISMATCH, "%s: a qtrain checkpoint (format %s) without its "
                       "optimizer state (no optimizer.* tensors): refusing to resume from the "
                       "weights alone, which would restart at step 0 (give load_weights_only=1 "
                       "to start from its weights at step 0 with fresh Adam moments)", path,
                       QT_CKPT_FORMAT);
    } else if (want_opt != QT_LOAD_WEIGHTS) {
        snprintf(qt_ck.note, sizeof qt_ck.note, "%s: no optimizer state in the file; Adam "
                 "moments not loaded", path);
    }
    return QT_OK;
}

static int qt_load_validate(const qt_plan *p, int h, const char *path, int want_opt,
                            int *load_opt)
{
    int rc, has_opt = 0;
    int32_t n = qt_st_count(h), skipped_mtp = 0, skipped_other = 0, has_mtp = 0, kept = 0;
    memset(qt_ck.used, 0, (size_t)n);
    qt_ckpt_keep_check_start();
    for (int32_t k = 0; k < n; k++) {
        if (!strncmp(qt_st_at(h, k)->name, "optimizer.", 10))
            has_opt = 1;
        has_mtp |= !strncmp(qt_st_at(h, k)->name, "mtp.", 4);
    }
    /* the MTP head (docs/model.md 1.8): a file without any mtp.* tensor leaves the plan's
     * head as initialised (its Adam moments zero); a file with part of it is checked in
     * full below, so a missing depth or a shape that disagrees is an error */
    qt_ck.skip_mtp = p->mtp_layers > 0 && !has_mtp;
    if ((rc = qt_load_opt_decision(p, h, path, want_opt, has_opt, load_opt)))
        return rc;
    if ((rc = qt_load_check(p, h, path, "")))
        return rc;
    if (*load_opt && ((rc = qt_load_check(p, h, path, QT_CKPT_OPT_M)) ||
                      (rc = qt_load_check(p, h, path, QT_CKPT_OPT_V))))
        return rc;
    for (int32_t k = 0; k < n; k++) {
        const char *name = qt_st_at(h, k)->name;
        if (qt_ck.used[k])
            continue;
        if (!strncmp(name, "mtp.", 4) && p->mtp_layers > 0) {
            return qt_fail(QT_E_MISMATCH, "%s: tensor %s is not a parameter of plan %s, whose "
                           "multi-token-prediction head has %d depth(s) (mtp_num_layers); a "
                           "save would drop it: expected a plan with the checkpoint's depths",
                           path, name, p->run_name ? p->run_name : "?", p->mtp_layers);
        } else if (!strncmp(name, "mtp.", 4) && qt_ckpt_keep_on(p)) {
            if ((rc = qt_ckpt_keep_check(p, qt_st_at(h, k), path)))
                return rc;
            kept++;
        } else if (!strncmp(name, "mtp.", 4)) {
            skipped_mtp++;
        } else if ((p->model.decoder_block == 1 && !strncmp(name, "model.visual.", 13)) ||
                   (!*load_opt && !strncmp(name, "optimizer.", 10))) {
            skipped_other++;
        } else {
            return qt_fail(QT_E_MISMATCH, "%s: unexpected tensor %s (not a parameter of "
                              "plan %s)", path, name, p->run_name ? p->run_name : "?");
        }
    }
    /* the same on every rank of a mesh: world rank 0 says it once */
    const int root = qt_ckpt_root(p);
    if (root && qt_ck.note[0])
        qt_note("%s", qt_ck.note);
    if (root && skipped_mtp)
        qt_note("%s: skipped %d mtp.* tensors (multi-token prediction is not trained; "
                "mtp_keep_layers: 1 carries them into saves)", path, (int)skipped_mtp);
    if (root && qt_ckpt_keep_on(p))
        qt_note("%s: keeps %d mtp.* tensors (the multi-token-prediction head, mtp_keep_layers "
                "%d: not trained, written unchanged into every save)", path, (int)kept,
                p->mtp_keep_layers);
    if (root && qt_ck.skip_mtp)
        qt_note("%s: holds no mtp.* tensors: the multi-token-prediction head (%d depth(s)) "
                "starts from its initialisation", path, p->mtp_layers);
    if (root && skipped_other)
        qt_note("%s: skipped %d vision-tower or optimizer tensors", path,
                   (int)skipped_other);
    return QT_OK;
}

int qt_checkpoint_load(const qt_plan *p, const char *arg, int want_optimizer,
                       int64_t *step_out, int64_t *data_pos_out)
{
    int h, rc, load_opt = 0, is_index;
    int64_t step = 0, data_pos = 0;
    const char *path = qt_ck.path;
    if (step_out)
        *step_out = 0;
    if (data_pos_out)
        *data_pos_out = 0;
    qt_ckpt_ident *id = qt_ckpt_ident_mut();
    memset(id, 0, sizeof *id);
    if ((rc = qt_ckpt_check_plan(p, arg)) ||
        (rc = qt_sx_resolve(arg, qt_ck.path, sizeof qt_ck.path, &is_index)))
        return rc;
    if (is_index)
        return qt_ckpt_load_index(p, path, want_optimizer, step_out, data_pos_out);
    if ((rc = qt_st_open(path, &h)))
        return rc;
    rc = qt_load_validate(p, h, path, want_optimizer, &load_opt);
    if (!rc)
        rc = qt_ckpt_meta_int(path, "step", qt_st_meta(h, "step"), &step);
    if (!rc)
        rc = qt_ckpt_meta_int(path, "data_pos", qt_st_meta(h, "data_pos"), &data_pos);
    if (!rc)
        rc = qt_ckpt_meta_int(path, "data_holdout", qt_st_meta(h, "data_holdout"),
                              &id->data_holdout);
    if (!rc) {
        const char *dh = qt_st_meta(h, "data_hash");
        snprintf(id->data_hash, sizeof id->data_hash, "%s", dh ? dh : "");
        const char *dt = qt_st_meta(h, "dtype");
        snprintf(id->dtype, sizeof id->dtype, "%s", dt ? dt : "");
        const char *mb = qt_st_meta(h, "moe_buffer");
        snprintf(id->moe_buffer, sizeof id->moe_buffer, "%s", mb ? mb : "");
        id->content_hash = qt_st_hash(h);
        id->n_files = 1;
        id->loaded = 1;
        qt_load_copy(p, h, "", QT_CKS_PARAMS);
        qt_ckpt_keep_begin(p);
        for (int32_t k = 0; k < qt_st_count(h) && qt_ckpt_keep_on(p); k++)
            if (!strncmp(qt_st_at(h, k)->name, "mtp.", 4))
                qt_ckpt_keep_add(p, h, qt_st_at(h, k));
        if (load_opt) {
            qt_load_copy(p, h, QT_CKPT_OPT_M, QT_CKS_ADAM_M);
            qt_load_copy(p, h, QT_CKPT_OPT_V, QT_CKS_ADAM_V);
        }
        /* The step resumes only together with the moments it belongs to: a weights-only
         * load starts the schedule at step 0. */
        if (step_out)
            *step_out = load_opt ? step : 0;
        if (data_pos_out)
            *data_pos_out = load_opt ? data_pos : 0;
    }
    qt_st_close(h);
    return rc;
}
