/* ckpt_dir.c - qt_checkpoint_save_dir: a checkpoint as a Hugging Face sharded directory,
 * written by every rank in parallel (contract in qt_io.h).
 *
 * Layout of DIR (file names and index as transformers writes them):
 *   model-0000K-of-0000N.safetensors       parameters under HF names (ckpt_map.c pieces),
 *                                          F32, __metadata__ {"format":"pt","step":S}
 *   model.safetensors.index.json           {"metadata":{"total_size":B,"format":"qtrain-1",
 *                                          "step","data_pos","plan_hash","state_hash",
 *                                          "run_name"},"weight_map":{name:file,..}}
 *   optimizer-0000K-of-0000M.safetensors   optimizer.m.<name>, then optimizer.v.<name>,
 *                                          __metadata__ {"format":"qtrain-1","step":S}
 *   optimizer.safetensors.index.json       the same metadata and its weight_map
 *   a carried MTP head (mtp_keep_layers, ckpt_keep.c): its mtp.* tensors, byte for byte as
 *   loaded (name, dtype, shape, data), in one more model shard after the others (model-
 *   0000N-of-0000N with N counting it), written by rank 0 and listed in the model index
 *   config.json, tokenizer files           added by hf_config.c where DIR has none
 * Packing: the file tensors in file order (parameters, then m, then v; pieces in ckpt_map.c
 * order) fill shards greedily up to shard_bytes (a bigger tensor gets a shard of its own);
 * parameters and moments never share a shard. The packing reads only global shapes, so the
 * same state saved on any mesh gives the same files, byte for byte (the index metadata
 * differs in plan hash and run name only).
 * Writers: shard s (model shards first, then optimizer shards) is written by world rank
 * s mod n_ranks. Every rank walks the same tensors in file order and receives each one
 * window by window through qt_ckpt_save_piece (one collective per window of rows over the
 * ranks holding its parts, as for single files), so no rank ever holds more than one window
 * beyond its own state.
 * A pipeline plan (ckpt_pp.h): the file tensors are every stage's, block after block (the
 * stages' repeat chunks) in each part (the one-rank order); world rank 0 writes every
 * shard, its own stage's tensors gathered over its stage's mesh and the other stages'
 * received from their first ranks, which gather them over their stage's mesh; the
 * directory is the one-rank directory.
 * Commit: rank 0 creates DIR.tmp.<pid> and broadcasts <pid>; each rank writes its shards in
 * it (each one atomically, st_write.c); when every rank reports success, rank 0 writes the
 * optimizer index, then the model index, carries the user's files of the previous DIR over
 * (hard links), adds config.json and the tokenizer= files where DIR had none
 * (hf_config.c), fsyncs the directory and swaps it with DIR by one
 * renameat2(RENAME_EXCHANGE) (a plain rename when DIR does not exist), then deletes the old
 * checkpoint, which now has the temporary name. So DIR is, at every instant, the previous
 * complete checkpoint or the new complete one; a crash leaves DIR.tmp.<pid>, which
 * qt_st_remove_stale deletes at the next start. A failure anywhere removes the temporary
 * directory and every rank returns an error.
 * SIGINT / SIGTERM / SIGHUP during a save: ckpt_target.c's handler removes DIR.tmp.<pid>
 * through qt_ckpt_dir_signal (every rank; `active` while the name is this save's), so DIR
 * stays the previous checkpoint (before the swap) or the new one (after it).
 * Invariants: no heap (static buffers), the index writer uses write(2) on a static buffer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"
#include "ckpt_map.h"
#include "ckpt_common.h"
#include "ckpt_dir.h"
#include "ckpt_keep.h"
#include "ckpt_pp.h"
#include "hf_config.h"
#include "safetensors.h"
#include "st_index.h"
#include "comm/qt_coll.h"
#include "runtime/qt_ckpt_gather.h"

#define QT_CD_RENAME_EXCHANGE (1u << 1)   /* linux/fs.h; musl has no renameat2 wrapper */
#define QT_CD_BUF (1 << 16)

enum { QT_CD_PARAMS = 0, QT_CD_M, QT_CD_V, QT_CD_PARTS };

/* A file tensor: piece k of local parameter i of block b of the one-rank order (ckpt_pp.h:
 * a pipeline stage's repeat chunk; 0 without a pipeline) in part (params, m, v). */
typedef struct qt_cd_cur {
    int32_t part, b, i, k;
} qt_cd_cur;

typedef struct qt_cd_shard {
    qt_cd_cur first;        /* its first file tensor */
    int64_t n, bytes;       /* file tensors, data bytes */
} qt_cd_shard;

static struct {
    int32_t n_shards, n_model;                  /* all shards; the first n_model are model-* */
    int32_t keep;                               /* 1: one more model shard, the carried head */
    qt_cd_shard shard[QT_SX_MAX_SHARDS];
    char dir[QT_SX_PATH_MAX], tmp[QT_SX_PATH_MAX], file[QT_SX_PATH_MAX + QT_ST_NAME_MAX + 32];
    char name[QT_ST_NAME_MAX + 16];
    int fd;                                     /* index being written */
    int64_t blen;
    int failed;
    int drop_single;                            /* overwrite=1 on a DIR with model.safetensors */
    volatile int active;                        /* 1 while tmp names this save's directory */
    char buf[QT_CD_BUF];
} qt_cd;

static const char *const qt_cd_prefix[QT_CD_PARTS] = {"", QT_CKPT_OPT_M, QT_CKPT_OPT_V};
static const int qt_cd_src[QT_CD_PARTS] = {QT_CKS_PARAMS, QT_CKS_ADAM_M, QT_CKS_ADAM_V};

/* ---- file tensors in file order ---- */

/* Advance c to the next file tensor of parts [0, n_parts); 0 at the end. */
static int qt_cd_next(const qt_plan *p, qt_cd_cur *c, int32_t n_parts)
{
    const qt_ckpp_blk *k = qt_ckpp_block(p, c->b);
    if (++c->k < qt_ckpt_count(qt_ckpp_stage(p, k->stage), c->i, 0))
        return 1;
    c->k = 0;
    if (++c->i < k->i1)
        return 1;
    if (++c->b >= qt_ckpp_blocks(p))
        c->b = 0;
    c->i = qt_ckpp_block(p, c->b)->i0;
    return c->b > 0 || ++c->part < n_parts;
}

/* The piece at c (*pc) and its bytes. */
static int64_t qt_cd_bytes(const qt_plan *p, const qt_cd_cur *c, qt_ckpt_piece *pc)
{
    qt_ckpt_piece_at(qt_ckpp_stage(p, qt_ckpp_block(p, c->b)->stage), c->i, 0, c->k, pc);
    return 4 * pc->rows * pc->row_len;
}

/* Shard s's file name: model-0000K-of-0000N.safetensors or optimizer-... */
static void qt_cd_shard_name(int32_t s, char *out, size_t n)
{
    const int model = s < qt_cd.n_model;
    snprintf(out, n, "%s-%05d-of-%05d.safetensors", model ? "model" : "optimizer",
             (int)(model ? s + 1 : s - qt_cd.n_model + 1),
             (int)(model ? qt_cd.n_model + qt_cd.keep : qt_cd.n_shards - qt_cd.n_model));
}

/* The carried head's shard: the last model shard. */
static void qt_cd_keep_name(char *out, size_t n)
{
    snprintf(out, n, "model-%05d-of-%05d.safetensors", (int)(qt_cd.n_model + 1),
             (int)(qt_cd.n_model + 1));
}

/* Bytes of the carried head's tensors. */
static int64_t qt_cd_keep_bytes(const qt_plan *p)
{
    int64_t total = 0;
    for (int32_t i = 0, n = qt_ckpt_keep_count(p); i < n; i++) {
        int32_t dt, nd;
        const int64_t *sh;
        const void *by;
        int64_t nb;
        qt_ckpt_keep_at(p, i, &dt, &nd, &sh, &by, &nb);
        total += nb;
    }
    return total;
}

/* Rank 0: the carried head's shard, its tensors in record order, unchanged. */
static int qt_cd_keep_write(const qt_plan *p, int64_t step)
{
    char num[32];
    int rc;
    qt_cd_keep_name(qt_cd.name, sizeof qt_cd.name);
    snprintf(qt_cd.file, sizeof qt_cd.file, "%s/%s", qt_cd.tmp, qt_cd.name);
    snprintf(num, sizeof num, "%lld", (long long)step);
    if ((rc = qt_st_wopen(qt_cd.file)) || (rc = qt_st_wmeta("format", "pt")) ||
        (rc = qt_st_wmeta("step", num)) || (rc = qt_ckpt_keep_declare(p)) ||
        (rc = qt_st_wbegin()) || (rc = qt_ckpt_keep_write(p)) || (rc = qt_st_wcommit())) {
        qt_st_wabort();
        return rc;
    }
    return QT_OK;
}

static int qt_cd_pack(const qt_plan *p, int32_t n_parts, int64_t limit, const char *dir)
{
    qt_ckpt_piece pc;
    qt_cd_cur c = {0, 0, 0, 0};
    qt_cd.n_shards = 0;
    qt_cd.n_model = 0;
    do {
        const int64_t b = qt_cd_bytes(p, &c, &pc);
        qt_cd_shard *s = qt_cd.n_shards ? &qt_cd.shard[qt_cd.n_shards - 1] : NULL;
        const int new_kind = s && (s->first.part == QT_CD_PARAMS) != (c.part == QT_CD_PARAMS);
        if (!s || new_kind || s->bytes + b > limit) {
            if (qt_cd.n_shards >= QT_SX_MAX_SHARDS)
                return qt_fail(QT_E_ARG, "save=%s: more than %d shards of at most %lld bytes; "
                               "give a larger save_shard_size=", dir, QT_SX_MAX_SHARDS,
                               (long long)limit);
            s = &qt_cd.shard[qt_cd.n_shards++];
            s->first = c;
            s->n = 0;
            s->bytes = 0;
        }
        s->n++;
        s->bytes += b;
        if (c.part == QT_CD_PARAMS)
            qt_cd.n_model = qt_cd.n_shards;
    } while (qt_cd_next(p, &c, n_parts));
    return QT_OK;
}

/* Shards qt_cd_pack makes with shards of at most `limit` bytes (the same rule, counted
 * only: no table, no bound), and the tensor bytes of all of them into *total. Next-fit in a
 * fixed order with fixed breaks (the parameters, then the moments): a larger limit never
 * makes more shards, so the smallest accepted limit can be searched for. */
static int64_t qt_cd_count(const qt_plan *p, int64_t limit, int64_t *total)
{
    qt_ckpt_piece pc;
    qt_cd_cur c = {0, 0, 0, 0};
    int64_t n = 0, bytes = 0, all = 0;
    int prev_params = -1;
    do {
        const int64_t b = qt_cd_bytes(p, &c, &pc);
        const int params = c.part == QT_CD_PARAMS;
        if (!n || params != prev_params || bytes + b > limit) {
            n++;
            bytes = 0;
        }
        bytes += b;
        all += b;
        prev_params = params;
    } while (qt_cd_next(p, &c, QT_CD_PARTS));
    if (total) *total = all;
    return n;
}

int qt_checkpoint_check_shards(const qt_plan *p, const char *path, int64_t shard_bytes,
                               const char *given)
{
    if (qt_checkpoint_is_file(path) || qt_ckpt_check_plan(p, ""))
        return QT_OK;   /* one file; a plan the save cannot map is refused by the save */
    int64_t total = 0;
    const int64_t n = qt_cd_count(p, shard_bytes > 0 ? shard_bytes : 1, &total);
    if (n <= QT_SX_MAX_SHARDS)
        return QT_OK;
    int64_t lo = shard_bytes > 0 ? shard_bytes : 1, hi = total > lo ? total : lo + 1;
    while (hi - lo > 1) {   /* count(lo) > max >= count(hi) */
        const int64_t mid = lo + (hi - lo) / 2;
        if (qt_cd_count(p, mid, NULL) > QT_SX_MAX_SHARDS) lo = mid; else hi = mid;
    }
    char alt[48] = "";
    if (hi >= 1024)
        snprintf(alt, sizeof alt, " (save_shard_size=%lldK or more)",
                 (long long)((hi + 1023) / 1024));
    return qt_fail(QT_E_ARG, "save_shard_size=%s: save=%s would need %lld shard files of at "
                   "most %lld bytes for the parameters and Adam moments (%lld bytes), more "
                   "than the %d a checkpoint directory may hold (QT_SX_MAX_SHARDS); the "
                   "smallest accepted save_shard_size is %lld bytes%s", given, path,
                   (long long)n, (long long)shard_bytes, (long long)total, QT_SX_MAX_SHARDS,
                   (long long)hi, alt);
}

int64_t qt_ckpt_dir_largest(const qt_plan *p, int64_t shard_bytes)
{
    int64_t big = 0;
    int was = qt_set_quiet(1);
    int rc = qt_ckpt_check_plan(p, "") || qt_cd_pack(p, QT_CD_PARTS,
                                                     shard_bytes > 0 ? shard_bytes : 1, "");
    qt_set_quiet(was);
    if (rc)
        return -1;
    for (int32_t s = 0; s < qt_cd.n_shards; s++)
        if (qt_cd.shard[s].bytes > big)
            big = qt_cd.shard[s].bytes;
    return big;
}

/* ---- one shard ---- */

static int qt_cd_shard_open(const qt_plan *p, int32_t s, int64_t step)
{
    qt_ckpt_piece pc;
    char num[32];
    int rc;
    qt_cd_shard_name(s, qt_cd.name, sizeof qt_cd.name);
    snprintf(qt_cd.file, sizeof qt_cd.file, "%s/%s", qt_cd.tmp, qt_cd.name);
    snprintf(num, sizeof num, "%lld", (long long)step);
    if ((rc = qt_st_wopen(qt_cd.file)) ||
        (rc = qt_st_wmeta("format", s < qt_cd.n_model ? "pt" : QT_CKPT_FORMAT)) ||
        (rc = qt_st_wmeta("step", num)))
        return rc;
    qt_cd_cur c = qt_cd.shard[s].first;
    for (int64_t t = 0; t < qt_cd.shard[s].n; t++, qt_cd_next(p, &c, QT_CD_PARTS)) {
        qt_cd_bytes(p, &c, &pc);
        snprintf(qt_cd.name, sizeof qt_cd.name, "%s%s", qt_cd_prefix[c.part], pc.name);
        if ((rc = qt_st_wadd(qt_cd.name, QT_ST_F32, pc.ndim, pc.shape)))
            return rc;
    }
    return qt_st_wbegin();
}

/* One file tensor (c) of the walk: this rank's stage gathers it (the shard's owner, mine,
 * writes it; a later pipeline stage's first rank streams it to the writer, ending the
 * block's region with the stream's last chunk); another stage's is received by the owner
 * (world rank 0 on a pipeline). Returns a gather or stream failure. */
static int qt_cd_tensor(const qt_plan *p, const qt_cd_cur *c, int mine, qt_ckpt_win *w,
                        int *wrc)
{
    const qt_ckpp_blk *k = qt_ckpp_block(p, c->b);
    const qt_plan *q = qt_ckpp_stage(p, k->stage);
    qt_ckpt_piece pc;
    if (k->stage != qt_ckpp_mine(p)) {
        if (!mine)
            return QT_OK;
        if (c->i == k->i0 && c->k == 0)
            qt_ckpp_take_begin(p, c->b);
        return qt_ckpp_take_n(qt_cd_bytes(p, c, &pc), wrc);
    }
    const int write = mine ? 1 : k->stage > 0 && qt_ckpp_sender() ? QT_CKPT_SEND : 0;
    int rc = qt_ckpt_save_piece(q, qt_cd_src[c->part], c->i, c->k, write, wrc, w);
    if (!rc && write == QT_CKPT_SEND && c->i + 1 == k->i1 &&
        c->k + 1 == qt_ckpt_count(q, c->i, 0))
        rc = qt_ckpp_put_end();
    return rc;
}

/* The collective walk: every tensor gathered in file order; this rank writes the shards
 * it owns. Returns a gather failure (the job must stop); write errors go to *wrc, after
 * which the walk goes on so the other ranks' collectives are matched. */
static int qt_cd_walk(const qt_plan *p, int32_t n_parts, int me, int n_ranks, int64_t step,
                      int *wrc)
{
    int32_t s = 0;
    int64_t left = qt_cd.shard[0].n;
    qt_cd_cur c = {0, 0, 0, 0};
    qt_ckpt_win w = {0, 0, 0};
    do {
        const int mine = s % n_ranks == me;
        if (mine && !*wrc && left == qt_cd.shard[s].n)
            *wrc = qt_cd_shard_open(p, s, step);
        if (c.k == 0)
            w = (qt_ckpt_win){0, 0, 0};
        int rc = qt_cd_tensor(p, &c, mine, &w, wrc);
        if (rc)
            return rc;
        if (--left == 0) {
            if (mine && !*wrc)
                *wrc = qt_st_wcommit();
            if (mine && *wrc)
                qt_st_wabort();
            if (++s < qt_cd.n_shards)
                left = qt_cd.shard[s].n;
        }
    } while (qt_cd_next(p, &c, n_parts));
    return QT_OK;
}

/* ---- index files (rank 0) ---- */

static void qt_cd_flush(void)
{
    for (int64_t at = 0; at < qt_cd.blen && !qt_cd.failed;) {
        ssize_t w = write(qt_cd.fd, qt_cd.buf + at, (size_t)(qt_cd.blen - at));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            qt_fail(QT_E_IO, "%s: write failed: %s", qt_cd.file, strerror(errno));
            qt_cd.failed = 1;
        }
        at += w > 0 ? w : 0;
    }
    qt_cd.blen = 0;
}

/* Append strings (our names and values never need JSON escapes: ckpt_map.c names, hex,
 * decimal; run names are checked by configgen). */
static void qt_cd_put(const char *a, const char *b, const char *c)
{
    const char *parts[3] = {a, b, c};
    for (int k = 0; k < 3; k++) {
        if (!parts[k])
            continue;
        size_t n = strlen(parts[k]);
        if (qt_cd.blen + (int64_t)n > QT_CD_BUF)
            qt_cd_flush();
        if (n > QT_CD_BUF) {
            qt_cd.failed = 1;
            return;
        }
        memcpy(qt_cd.buf + qt_cd.blen, parts[k], n);
        qt_cd.blen += (int64_t)n;
    }
}

static void qt_cd_meta(const char *key, const char *val, int last)
{
    qt_cd_put("\"", key, "\":\"");
    qt_cd_put(val, last ? "\"" : "\",", NULL);
}

/* Writes <tmp>/<index_name> for shards [s0, s1) of the parts they hold. */
static int qt_cd_index(const qt_plan *p, const char *index_name, int32_t s0, int32_t s1,
                       int64_t step, int64_t data_pos)
{
    qt_ckpt_piece pc;
    char num[32], shard[64];
    int64_t total = 0;
    for (int32_t s = s0; s < s1; s++) total += qt_cd.shard[s].bytes;
    const int keep = s0 == 0 && qt_cd.keep;   /* the model index lists the carried head */
    if (keep)
        total += qt_cd_keep_bytes(p);
    snprintf(qt_cd.file, sizeof qt_cd.file, "%s/%s", qt_cd.tmp, index_name);
    qt_cd.fd = open(qt_cd.file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (qt_cd.fd < 0)
        return qt_fail(QT_E_IO, "%s: cannot create: %s", qt_cd.file, strerror(errno));
    qt_cd.blen = 0;
    qt_cd.failed = 0;
    snprintf(num, sizeof num, "%lld", (long long)total);
    qt_cd_put("{\n  \"metadata\": {\"total_size\":", num, ",");
    qt_cd_meta("format", QT_CKPT_FORMAT, 0);
    snprintf(num, sizeof num, "%lld", (long long)step);
    qt_cd_meta("step", num, 0);
    snprintf(num, sizeof num, "%lld", (long long)data_pos);
    qt_cd_meta("data_pos", num, 0);
    if (qt_ckpt_data_hash(num))
        qt_cd_meta("data_hash", num, 0);
    if (qt_ckpt_data_holdout(num))
        qt_cd_meta("data_holdout", num, 0);
    if (qt_ckpt_dtype_meta(p))
        qt_cd_meta("dtype", qt_ckpt_dtype_meta(p), 0);
    char buf[96];
    if (qt_ckpt_buffer_meta(p, buf, sizeof buf))
        qt_cd_meta("moe_buffer", buf, 0);
    snprintf(num, sizeof num, "0x%016llx", (unsigned long long)p->hash);
    qt_cd_meta("plan_hash", num, 0);
    snprintf(num, sizeof num, "0x%016llx", (unsigned long long)qt_ckpt_state_hash(p));
    qt_cd_meta("state_hash", num, 0);
    qt_cd_meta("run_name", p->run_name ? p->run_name : "", 1);
    qt_cd_put("},\n  \"weight_map\": {", NULL, NULL);
    for (int32_t s = s0; s < s1; s++) {
        qt_cd_shard_name(s, shard, sizeof shard);
        qt_cd_cur c = qt_cd.shard[s].first;
        for (int64_t t = 0; t < qt_cd.shard[s].n; t++, qt_cd_next(p, &c, QT_CD_PARTS)) {
            qt_cd_bytes(p, &c, &pc);
            qt_cd_put(s == s0 && t == 0 ? "\n    \"" : ",\n    \"", qt_cd_prefix[c.part],
                      pc.name);
            qt_cd_put("\": \"", shard, "\"");
        }
    }
    if (keep) {
        qt_cd_keep_name(shard, sizeof shard);
        for (int32_t i = 0, n = qt_ckpt_keep_count(p); i < n; i++) {
            int32_t dt, nd;
            const int64_t *sh;
            const void *by;
            int64_t nb;
            qt_cd_put(",\n    \"", qt_ckpt_keep_at(p, i, &dt, &nd, &sh, &by, &nb), "\": \"");
            qt_cd_put(shard, "\"", NULL);
        }
    }
    qt_cd_put("\n  }\n}\n", NULL, NULL);
    qt_cd_flush();
    int rc = QT_OK;
    if (!qt_cd.failed && fsync(qt_cd.fd) != 0)
        rc = qt_fail(QT_E_IO, "%s: fsync failed: %s", qt_cd.file, strerror(errno));
    if (close(qt_cd.fd) != 0 && !rc && !qt_cd.failed)
        rc = qt_fail(QT_E_IO, "%s: close failed: %s", qt_cd.file, strerror(errno));
    return qt_cd.failed ? QT_E_IO : rc;
}

/* ---- the temporary directory (rank 0) ---- */

/* The process's umask, with the owner's bits cleared (its own directory stays rwx for it). */
static mode_t qt_cd_umask(void)
{
    const mode_t m = umask(022);
    umask(m);
    return m & 077;
}

static int qt_cd_fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return qt_fail(QT_E_IO, "%s: cannot open directory to fsync: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    return rc ? qt_fail(QT_E_IO, "%s: fsync of directory failed: %s", path, strerror(errno))
              : QT_OK;
}

/* Parent directory of qt_cd.dir into out. */
static void qt_cd_parent(char *out, size_t n)
{
    snprintf(out, n, "%s", qt_cd.dir);
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == out) out[1] = 0;
    else *slash = 0;
}

/* 1 for the names a save writes (indexes, model-/optimizer- shards); the rest of a
 * checkpoint directory (config.json, tokenizer files, notes) belongs to the user. */
static int qt_cd_ours(const char *name)
{
    size_t n = strlen(name);
    if (!strcmp(name, QT_SX_INDEX_NAME) || !strcmp(name, QT_SX_OPT_INDEX_NAME))
        return 1;
    return (!strncmp(name, "model-", 6) || !strncmp(name, "optimizer-", 10)) &&
           strstr(name, "-of-") && n > 12 && !strcmp(name + n - 12, ".safetensors");
}

/* A single-file model.safetensors beside a sharded index: transformers' from_pretrained(DIR)
 * takes it before model.safetensors.index.json, so it would load those weights instead of
 * the checkpoint a save writes (a published model's directory used as load= and save=). */
#define QT_CD_SINGLE "model.safetensors"

/* The user's files of the previous checkpoint move into the new one as hard links (same
 * inodes), so a save never deletes them; a subdirectory cannot, and fails the save. */
static int qt_cd_carry(void *ctx, const char *name, int is_dir)
{
    (void)ctx;
    if (is_dir)
        return qt_fail(QT_E_IO, "save=%s: holds the subdirectory %s, which a save cannot "
                       "carry into the new checkpoint; move it elsewhere", qt_cd.dir, name);
    if (qt_cd_ours(name) || (!strcmp(name, "config.json") && qt_hf_config_replacing()) ||
        (!strcmp(name, QT_CD_SINGLE) && qt_cd.drop_single))
        return QT_OK;   /* ours are rewritten; a disagreeing config.json (overwrite=1) too,
                           and model.safetensors (overwrite=1) is left out */
    char from[QT_SX_PATH_MAX + 300];
    snprintf(from, sizeof from, "%s/%s", qt_cd.dir, name);
    snprintf(qt_cd.file, sizeof qt_cd.file, "%s/%s", qt_cd.tmp, name);
    if (link(from, qt_cd.file) != 0)
        return qt_fail(QT_E_IO, "save=%s: cannot keep %s in the new checkpoint (hard link "
                       "to %s): %s", qt_cd.dir, from, qt_cd.file, strerror(errno));
    return QT_OK;
}

/* Swap the finished temporary directory in for DIR, then delete the old checkpoint. The
 * user's files carried over, config.json and the tokenizer files are added where missing
 * (hf_config.c) before the swap. */
static int qt_cd_commit(const qt_plan *p)
{
    char parent[QT_SX_PATH_MAX];
    struct stat st;
    int exists = stat(qt_cd.dir, &st) == 0, rc;
    /* -1: the directory could not be opened; qt_cd_carry's own failures (QT_E_IO, already
     * printed) are returned as they are, not followed by "cannot list: Success" */
    if (exists && (rc = qt_st_dir_each(qt_cd.dir, qt_cd_carry, NULL)))
        return rc == -1 ? qt_fail(QT_E_IO, "save=%s: cannot list: %s", qt_cd.dir,
                                  strerror(errno)) : rc;
    if ((rc = qt_hf_files_write(p, qt_cd.tmp)) || (rc = qt_cd_fsync_path(qt_cd.tmp)))
        return rc;
    if (!exists) {
        if (rename(qt_cd.tmp, qt_cd.dir) != 0)
            return qt_fail(QT_E_IO, "%s: rename to %s failed: %s", qt_cd.tmp, qt_cd.dir,
                           strerror(errno));
    } else if (syscall(SYS_renameat2, AT_FDCWD, qt_cd.tmp, AT_FDCWD, qt_cd.dir,
                       QT_CD_RENAME_EXCHANGE) != 0) {
        return qt_fail(QT_E_IO, "save=%s: cannot swap in the new checkpoint %s: %s (the "
                       "file system must support renameat2 RENAME_EXCHANGE to replace a "
                       "checkpoint directory atomically; the previous checkpoint is intact)",
                       qt_cd.dir, qt_cd.tmp, strerror(errno));
    }
    qt_cd_parent(parent, sizeof parent);
    rc = qt_cd_fsync_path(parent);
    if (exists)
        qt_st_remove_dir(qt_cd.tmp);   /* the previous checkpoint; a failure is only a note */
    return rc;
}

/* ---- destination check (before training) ---- */

int qt_checkpoint_is_file(const char *path)
{
    size_t n = strlen(path);
    return n >= 12 && !strcmp(path + n - 12, ".safetensors");
}

typedef struct qt_cd_scan {
    int subdir, ours, single;
    char first_sub[256];
} qt_cd_scan;

static int qt_cd_scan_entry(void *ctx, const char *name, int is_dir)
{
    qt_cd_scan *sc = ctx;
    if (is_dir && !sc->subdir++)
        snprintf(sc->first_sub, sizeof sc->first_sub, "%s", name);
    sc->ours += qt_cd_ours(name);
    sc->single += !is_dir && !strcmp(name, QT_CD_SINGLE);
    return 0;
}

int qt_ckpt_check_dir_target(const char *key, const char *path, int overwrite)
{
    struct stat st;
    qt_cd_scan sc = {0, 0, 0, ""};
    char index[QT_SX_PATH_MAX];
    if (stat(path, &st) != 0)
        return errno == ENOENT ? QT_OK : qt_fail(QT_E_ARG, "%s=%s: cannot stat: %s", key,
                                                 path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return qt_fail(QT_E_ARG, "%s=%s exists and is %s, not a directory; a %s= path that "
                       "does not end in .safetensors is written as a sharded checkpoint "
                       "directory", key, path, S_ISREG(st.st_mode) ? "a regular file" :
                       S_ISCHR(st.st_mode) ? "a character device" : S_ISBLK(st.st_mode) ?
                       "a block device" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a special file",
                       key);
    if (qt_st_dir_each(path, qt_cd_scan_entry, &sc) < 0)
        return qt_fail(QT_E_ARG, "%s=%s: cannot list the directory: %s", key, path,
                       strerror(errno));
    if (sc.subdir)
        return qt_fail(QT_E_ARG, "%s=%s holds the subdirectory %s; a save replaces the whole "
                       "directory and keeps only its plain files: give a directory without "
                       "subdirectories", key, path, sc.first_sub);
    if (sc.single && !overwrite)
        return qt_fail(QT_E_ARG, "%s=%s holds %s, which transformers' from_pretrained(%s) "
                       "would load instead of the sharded checkpoint a save writes (it takes "
                       "%s before %s): move it out of the directory, or give overwrite=1 to "
                       "leave it out of the new checkpoint", key, path, QT_CD_SINGLE, path,
                       QT_CD_SINGLE, QT_SX_INDEX_NAME);
    qt_cd.drop_single = sc.single && overwrite;
    if (!sc.ours || overwrite)
        return QT_OK;
    if (snprintf(index, sizeof index, "%s/%s", path, QT_SX_INDEX_NAME) >= (int)sizeof index)
        return qt_fail(QT_E_ARG, "%s=%s: path too long", key, path);
    int was = qt_set_quiet(1);
    int rc = qt_sx_open(index);
    qt_set_quiet(was);
    const char *fmt = rc ? NULL : qt_sx_meta(0, "format");
    if (!fmt || strcmp(fmt, QT_CKPT_FORMAT))
        return qt_fail(QT_E_ARG, "%s=%s holds checkpoint files but no qtrain checkpoint (%s "
                       "%s); give overwrite=1 to replace them", key, path, index,
                       rc ? "is missing or unreadable" : "has no metadata format \"qtrain-1\"");
    return QT_OK;
}

/* ---- the collective save ---- */

/* Rank 0's bytes of buf to every rank (QT_COLL_ALL, or every stage's ranks: ckpt_pp.h). */
static int qt_cd_bcast(const qt_plan *p, void *buf, int64_t bytes)
{
    return qt_ckpp_on(p) ? qt_ckpp_bcast(buf, bytes) : qt_coll_broadcast(QT_COLL_ALL, buf, bytes, 0);
}

/* qt_checkpoint_save_dir once DIR.tmp.<pid> exists: the shards, the indexes, the swap. */
static int qt_cd_save_rest(const qt_plan *p, const char *dir, int me, int n_ranks, int multi,
                           int64_t step, int64_t data_pos)
{
    int rc, wrc = QT_OK;
    if ((rc = qt_cd_walk(p, QT_CD_PARTS, me, n_ranks, step, &wrc)))
        return rc;
    if (me == 0 && !wrc && qt_cd.keep)
        wrc = qt_cd_keep_write(p, step);
    int64_t bad = wrc != QT_OK;
    if (multi && (rc = qt_coll_sum_i64(QT_COLL_ALL, &bad, 1)))
        return rc;
    int64_t res = bad ? QT_E_IO : QT_OK;
    if (me == 0) {
        if (!res && !(res = qt_cd_index(p, "optimizer.safetensors.index.json", qt_cd.n_model,
                                        qt_cd.n_shards, step, data_pos)))
            res = qt_cd_index(p, QT_SX_INDEX_NAME, 0, qt_cd.n_model, step, data_pos);
        if (!res)
            res = qt_cd_commit(p);
        if (res) {
            if (bad && !wrc)
                qt_fail(QT_E_IO, "save=%s: a shard could not be written on %lld rank(s) (see "
                        "their messages); the previous checkpoint is intact", dir,
                        (long long)bad);
            qt_st_remove_dir(qt_cd.tmp);
        }
    }
    if (multi && (rc = qt_cd_bcast(p, &res, (int64_t)sizeof res)))
        return rc;
    return (int)res;
}

int qt_checkpoint_save_dir(const qt_plan *p, const char *dir, int64_t shard_bytes,
                           int64_t step, int64_t data_pos)
{
    /* a pipeline: world rank 0 writes every shard (me 0, the others 1, as if of one rank) */
    const int multi = p->n_ranks > 1, pp = qt_ckpp_on(p);
    const int n_ranks = multi && !pp ? p->n_ranks : 1;
    const int me = pp ? !qt_ckpp_writer() : multi ? qt_comm_group_index(QT_COLL_ALL) : 0;
    int rc, wrc = QT_OK;
    if (strlen(dir) + 32 >= sizeof qt_cd.dir)
        return qt_fail(QT_E_ARG, "save=%s: path too long", dir);
    snprintf(qt_cd.dir, sizeof qt_cd.dir, "%s", dir);
    /* the same verdicts on every rank: plan and packing read only the plan */
    if ((rc = qt_ckpt_check_plan(p, dir)) ||
        (rc = qt_cd_pack(p, QT_CD_PARTS, shard_bytes > 0 ? shard_bytes : 1, dir)))
        return rc;
    qt_cd.keep = qt_ckpt_keep_count(p) > 0;
    int64_t pid = (int64_t)getpid();
    if (me == 0) {
        snprintf(qt_cd.tmp, sizeof qt_cd.tmp, "%s.tmp.%lld", dir, (long long)pid);
        qt_cd.active = 1;   /* before the mkdir: a signal delivered as it returns finds it */
        /* owner rwx whatever the umask: under umask 0277 the directory was r-x, so the run
         * trained and then failed at the save, leaving it (audit24); the files keep the
         * umask's modes */
        if (mkdir(qt_cd.tmp, 0755) != 0 || chmod(qt_cd.tmp, 0755 & ~qt_cd_umask()) != 0) {
            qt_cd.active = 0;
            wrc = qt_fail(QT_E_IO, "%s: cannot create the temporary directory: %s",
                          qt_cd.tmp, strerror(errno));
        }
    }
    int64_t hdr[2] = {wrc, pid};
    if (multi && (rc = qt_cd_bcast(p, hdr, (int64_t)sizeof hdr)))
        return rc;
    if (hdr[0])
        return me == 0 ? wrc : QT_E_IO;
    if (me != 0) {   /* rank 0's name; set before it is marked active */
        snprintf(qt_cd.tmp, sizeof qt_cd.tmp, "%s.tmp.%lld", dir, (long long)hdr[1]);
        qt_cd.active = 1;
    }
    rc = qt_cd_save_rest(p, dir, me, n_ranks, multi, step, data_pos);
    qt_cd.active = 0;
    return rc;
}

int qt_ckpt_dir_signal(void)
{
    return qt_cd.active && qt_st_remove_dir_signal(qt_cd.tmp) == 0;
}
