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
 * A load= directory or *.index.json (Hugging Face sharded checkpoint) goes to
 * ckpt_shards.c, which keeps the same all-or-nothing contract over several files.
 * Sharded plans (a parameter whose local shape differs from its global shape) are refused
 * with QT_E_PLAN: qt_plan.h carries no per-rank shard offsets yet.
 * Checkpoints with optimizer state carry "format":"qtrain-1"; weight-only files carry
 * "format":"pt" because transformers refuses safetensors files with another format.
 * qt_checkpoint_check_target vets a save=/dump_grads= destination before training: it
 * never lets a save replace a non-regular file or the training data, and replaces another
 * kind of file only when asked to (overwrite); it only reads.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "qt_io.h"
#include "qt_err.h"
#include "ckpt_map.h"
#include "safetensors.h"
#include "st_index.h"
#include "ckpt_shards.h"

#define QT_CKPT_FORMAT "qtrain-1"
#define QT_OPT_M "optimizer.m."
#define QT_OPT_V "optimizer.v."

static struct {
    unsigned char used[QT_ST_MAX_TENSORS];   /* file tensor consumed by the plan */
    char name[QT_ST_NAME_MAX + 16];
    char path[QT_SX_PATH_MAX];               /* load= argument resolved (st_index.c) */
} qt_ck;

int qt_ckpt_check_plan(const qt_plan *p, const char *path)
{
    for (int32_t i = 0; i < p->n_params; i++) {
        const qt_tensor *t = &p->tensors[p->params[i].tensor];
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] != t->global_shape[d])
                return qt_fail(QT_E_PLAN, "%s: parameter %s is sharded on this rank; "
                                  "checkpoint IO of sharded plans is not supported", path,
                                  p->params[i].name);
        if (!qt_ckpt_count(p, i, 0))
            return QT_E_PLAN;
    }
    return QT_OK;
}

float *qt_ckpt_region(const qt_plan *p, int64_t region_offset, int32_t i)
{
    return (float *)(void *)(p->arena + region_offset) + p->params[i].flat_offset;
}

/* ---- save ---- */

static int qt_save_declare(const qt_plan *p, const char *prefix)
{
    qt_ckpt_piece pc;
    int rc;
    for (int32_t i = 0; i < p->n_params; i++)
        for (int32_t k = 0, n = qt_ckpt_count(p, i, 0); k < n; k++) {
            qt_ckpt_piece_at(p, i, 0, k, &pc);
            snprintf(qt_ck.name, sizeof qt_ck.name, "%s%s", prefix, pc.name);
            if ((rc = qt_st_wadd(qt_ck.name, QT_ST_F32, pc.ndim, pc.shape)))
                return rc;
        }
    return QT_OK;
}

static int qt_save_data(const qt_plan *p, int64_t region_offset)
{
    qt_ckpt_piece pc;
    int rc;
    for (int32_t i = 0; i < p->n_params; i++) {
        const float *base = qt_ckpt_region(p, region_offset, i);
        for (int32_t k = 0, n = qt_ckpt_count(p, i, 0); k < n; k++) {
            qt_ckpt_piece_at(p, i, 0, k, &pc);
            if (pc.kind == QT_MAP_IDENT) {
                if ((rc = qt_st_wwrite(base, 4 * pc.rows * pc.row_len)))
                    return rc;
                continue;
            }
            for (int64_t r = 0; r < pc.rows; r++)
                if ((rc = qt_st_wwrite(base + qt_ckpt_plan_row(&pc, r) * pc.row_len,
                                       4 * pc.row_len)))
                    return rc;
        }
    }
    return QT_OK;
}

static int qt_save(const qt_plan *p, const char *path, int with_opt, int64_t region,
                   int64_t step, int64_t data_pos)
{
    char num[32];
    int rc;
    if ((rc = qt_ckpt_check_plan(p, path)) || (rc = qt_st_wopen(path)))
        return rc;
    rc = qt_st_wmeta("format", with_opt ? QT_CKPT_FORMAT : "pt");
    if (!rc) {
        snprintf(num, sizeof num, "%lld", (long long)step);
        rc = qt_st_wmeta("step", num);
    }
    if (!rc) {
        snprintf(num, sizeof num, "%lld", (long long)data_pos);
        rc = qt_st_wmeta("data_pos", num);
    }
    if (!rc) {
        snprintf(num, sizeof num, "0x%016llx", (unsigned long long)p->hash);
        rc = qt_st_wmeta("plan_hash", num);
    }
    if (!rc)
        rc = qt_st_wmeta("run_name", p->run_name ? p->run_name : "");
    if (!rc)
        rc = qt_save_declare(p, "");
    if (!rc && with_opt && !(rc = qt_save_declare(p, QT_OPT_M)))
        rc = qt_save_declare(p, QT_OPT_V);
    if (!rc)
        rc = qt_st_wbegin();
    if (!rc)
        rc = qt_save_data(p, region);
    if (!rc && with_opt && !(rc = qt_save_data(p, p->adam_m_offset)))
        rc = qt_save_data(p, p->adam_v_offset);
    if (rc) {
        qt_st_wabort();
        return rc;
    }
    return qt_st_wcommit();
}

int qt_checkpoint_save(const qt_plan *p, const char *path, int with_optimizer, int64_t step,
                       int64_t data_pos)
{
    return qt_save(p, path, with_optimizer, p->params_offset, step, data_pos);
}

int qt_checkpoint_save_grads(const qt_plan *p, const char *path)
{
    return qt_save(p, path, 0, p->grads_offset, 0, 0);
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

int qt_checkpoint_check_target(const char *key, const char *path, int qtrain_format,
                               int overwrite, const char *data_path)
{
    struct stat st, ds;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return QT_OK;
        return qt_fail(QT_E_ARG, "%s=%s: cannot stat: %s", key, path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return qt_fail(QT_E_ARG, "%s=%s exists and is %s; expected the path of a file to "
                          "write (new, or a %s file to replace)", key, path,
                          qt_file_kind(st.st_mode),
                          qtrain_format ? "qtrain checkpoint" : "safetensors");
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
        static char why[512];   /* the reader's message, copied: it is rewritten below */
        snprintf(why, sizeof why, "%s", qt_last_error());
        return qt_fail(QT_E_ARG, "%s=%s exists and is not a %s (%s); give overwrite=1 to "
                          "replace it", key, path, qtrain_format ? "qtrain checkpoint" :
                          "safetensors file", why);
    }
    const char *fmt = qt_st_meta(h, "format");
    int ok = !qtrain_format || (fmt && !strcmp(fmt, QT_CKPT_FORMAT));
    if (!ok)
        rc = qt_fail(QT_E_ARG, "%s=%s exists and is not a qtrain checkpoint (__metadata__ "
                        "format is %s%s%s, expected \"%s\"); give overwrite=1 to replace it",
                        key, path, fmt ? "\"" : "", fmt ? fmt : "absent", fmt ? "\"" : "",
                        QT_CKPT_FORMAT);
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

/* Check every piece of every parameter under `prefix` and mark the file tensors used. */
static int qt_load_check(const qt_plan *p, int h, const char *path, const char *prefix)
{
    qt_ckpt_piece pc;
    for (int32_t i = 0; i < p->n_params; i++) {
        int fused = qt_fused_in_file(p, h, i, prefix);
        for (int32_t k = 0, n = qt_ckpt_count(p, i, fused); k < n; k++) {
            qt_ckpt_piece_at(p, i, fused, k, &pc);
            snprintf(qt_ck.name, sizeof qt_ck.name, "%s%s", prefix, pc.name);
            const qt_st_tensor *t = qt_st_find(h, qt_ck.name);
            int rc = qt_ckpt_check_tensor(&pc, t, path, qt_ck.name);
            /* values too, before anything is written: a NaN weight or moment, or a
             * negative second moment, would load "successfully" and train on NaN */
            if (!rc)
                rc = qt_ckpt_check_values(h, t, path, qt_ck.name, !strcmp(prefix, QT_OPT_V));
            if (rc)
                return rc;
            qt_ck.used[t - qt_st_at(h, 0)] = 1;
        }
    }
    return QT_OK;
}

static void qt_load_copy(const qt_plan *p, int h, const char *prefix, int64_t region)
{
    qt_ckpt_piece pc;
    for (int32_t i = 0; i < p->n_params; i++) {
        int fused = qt_fused_in_file(p, h, i, prefix);
        float *base = qt_ckpt_region(p, region, i);
        for (int32_t k = 0, n = qt_ckpt_count(p, i, fused); k < n; k++) {
            qt_ckpt_piece_at(p, i, fused, k, &pc);
            snprintf(qt_ck.name, sizeof qt_ck.name, "%s%s", prefix, pc.name);
            qt_ckpt_copy_piece(h, qt_st_find(h, qt_ck.name), &pc, base);
        }
    }
}

static int qt_meta_int(int h, const char *path, const char *key, int64_t *out)
{
    const char *v = qt_st_meta(h, key);
    int64_t x = 0;
    *out = 0;
    if (!v)
        return QT_OK;
    if (!*v)
        return qt_fail(QT_E_FORMAT, "%s: __metadata__ %s is empty", path, key);
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9' || x > INT64_MAX / 10 - 10)
            return qt_fail(QT_E_FORMAT, "%s: __metadata__ %s = \"%s\" is not a "
                              "non-negative integer", path, key, v);
        x = x * 10 + (*c - '0');
    }
    *out = x;
    return QT_OK;
}

static int qt_load_validate(const qt_plan *p, int h, const char *path, int want_opt,
                            int *load_opt)
{
    int rc, has_opt = 0;
    int32_t n = qt_st_count(h), skipped_mtp = 0, skipped_other = 0;
    memset(qt_ck.used, 0, (size_t)n);
    for (int32_t k = 0; k < n; k++)
        if (!strncmp(qt_st_at(h, k)->name, "optimizer.", 10))
            has_opt = 1;
    *load_opt = want_opt && has_opt;
    if (*load_opt) {
        const char *fh = qt_st_meta(h, "plan_hash");
        char mine[24];
        snprintf(mine, sizeof mine, "0x%016llx", (unsigned long long)p->hash);
        if (!fh || strcmp(fh, mine)) {
            /* Another plan's Adam state (other batch split, schedule or run) does not resume
             * this plan bit-exactly; its weights are still good, so they load alone. */
            qt_note("%s: optimizer state was saved for plan hash %s, this plan's hash is %s; "
                       "loading the weights only, from step 0", path, fh ? fh : "(none)", mine);
            *load_opt = 0;
        }
    } else if (want_opt) {
        qt_note("%s: no optimizer state in the file; Adam moments not loaded", path);
    }
    if ((rc = qt_load_check(p, h, path, "")))
        return rc;
    if (*load_opt && ((rc = qt_load_check(p, h, path, QT_OPT_M)) ||
                      (rc = qt_load_check(p, h, path, QT_OPT_V))))
        return rc;
    for (int32_t k = 0; k < n; k++) {
        const char *name = qt_st_at(h, k)->name;
        if (qt_ck.used[k])
            continue;
        if (!strncmp(name, "mtp.", 4)) {
            skipped_mtp++;
        } else if ((p->model.decoder_block == 1 && !strncmp(name, "model.visual.", 13)) ||
                   (!*load_opt && !strncmp(name, "optimizer.", 10))) {
            skipped_other++;
        } else {
            return qt_fail(QT_E_MISMATCH, "%s: unexpected tensor %s (not a parameter of "
                              "plan %s)", path, name, p->run_name ? p->run_name : "?");
        }
    }
    if (skipped_mtp)
        qt_note("%s: skipped %d mtp.* tensors (multi-token prediction is not trained)",
                   path, (int)skipped_mtp);
    if (skipped_other)
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
    if ((rc = qt_ckpt_check_plan(p, arg)) ||
        (rc = qt_sx_resolve(arg, qt_ck.path, sizeof qt_ck.path, &is_index)))
        return rc;
    if (is_index)
        return qt_ckpt_load_index(p, path, want_optimizer);
    if ((rc = qt_st_open(path, &h)))
        return rc;
    rc = qt_load_validate(p, h, path, want_optimizer, &load_opt);
    if (!rc)
        rc = qt_meta_int(h, path, "step", &step);
    if (!rc)
        rc = qt_meta_int(h, path, "data_pos", &data_pos);
    if (!rc) {
        qt_load_copy(p, h, "", p->params_offset);
        if (load_opt) {
            qt_load_copy(p, h, QT_OPT_M, p->adam_m_offset);
            qt_load_copy(p, h, QT_OPT_V, p->adam_v_offset);
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
