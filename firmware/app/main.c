/* main.c - the qtrain program: parse the command line, initialise, train, save.
 *
 * Invariants: main is the only function in the firmware that ends the process. Everything
 * that can fail (arguments, plan, data, checkpoint) is checked before the first step, and
 * files are opened before the steps so stdio never allocates during them (the metrics
 * stream gets a static buffer). Exit codes: 0 success, 2 bad arguments, 1 any other error.
 * Checkpoints are written atomically by the IO layer, so an error never leaves a file
 * that looks valid but is half-written.
 * On a mesh, a failure that only some ranks see (a local file, rank 0's metrics file, the
 * data file changing, an arena over one rank's limits) is agreed before the next collective
 * (qt_main_agree: the error flag of qt_coll.h) at the end of each phase and of each step,
 * so every rank stops at once: the failing rank with its message, the others naming it. A
 * silent peer (QT_E_COMM) leaves messages posted, so the job is aborted instead
 * (qt_main_comm_fail). A wait on a peer is bounded by start_timeout= until every rank has
 * its inputs open, by comm_timeout= from then on (qt_main_deadline).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "qt_cli.h"
#include "qt_build_info.h"
#include "comm/qt_comm.h"
#include "comm/qt_coll.h"
#include "qt_err.h"
#include "io/qt_io.h"
#include "io/hf_config.h"
#include "runtime/qt_runtime.h"
#include "runtime/qt_validate.h"
#include "runtime/qt_pipeline.h"
#include "qt_app_eval.h"

#define QT_EXIT_ERR 1
#define QT_EXIT_ARG 2
#define QT_MAIN_GO (-1)        /* a phase of main succeeded: go on to the next */
/* longest save= / dump_grads= path: the longest name a save derives from it,
 * DIR.tmp.<pid>/optimizer-0000K-of-0000N.safetensors.tmp.<pid>, is 61 bytes longer, and
 * the kernel takes 4095; at 4054 characters the run trained and then failed at the save */
#define QT_MAIN_DEST_MAX 4000

/* Collective counters of one kind of work (qt_main_coll_*). */
enum { QT_MAIN_COLL_STEPS, QT_MAIN_COLL_SAVES, QT_MAIN_COLL_FLAGS, QT_MAIN_COLL_KINDS };
typedef struct qt_main_coll {
    int64_t bytes, calls;
    double secs;
} qt_main_coll;

static struct {
    char metrics_buf[1 << 16];
    char dir_buf[4096];
    qt_data data;
    int data_open;
    FILE *metrics;
    const qt_plan *plan;       /* set once the runtime is initialised: report memory at exit */
    int rank, size;
    /* collective counters (qt_comm_stats) of the training steps, of the saves and of the
     * error flags after the steps, each the sum of the deltas around those calls, and the
     * steps' own time: the exit line reports them apart, not start-up (plan check,
     * loading) */
    int steps_run, saves;
    qt_main_coll coll[QT_MAIN_COLL_KINDS];
    double step_s;
    char note[768];            /* the run manifest's note (allow_data_change=1, a resumed
                                  learning_rate=, truncate_metrics=1), or "" */
} qt_main_state;

/* On rank 0 of a multi-rank run that trained: one line with the collective traffic of the
 * training steps. The counters are this rank's own (bytes it sent, seconds it spent inside
 * collective calls, waiting included); the plans are symmetric, so every rank of a group
 * sends about as much. */
static void qt_main_comm_print(FILE *f)
{
    if (qt_main_state.size < 2 || qt_main_state.rank != 0 || !qt_main_state.steps_run) return;
    const qt_main_coll *st = &qt_main_state.coll[QT_MAIN_COLL_STEPS];
    const qt_main_coll *sv = &qt_main_state.coll[QT_MAIN_COLL_SAVES];
    const qt_main_coll *fl = &qt_main_state.coll[QT_MAIN_COLL_FLAGS];
    const double mib = 1024.0 * 1024.0;
    double share = qt_main_state.step_s > 0.0 ? 100.0 * st->secs / qt_main_state.step_s : 0.0;
    char saves[160] = "";
    if (qt_main_state.saves)
        snprintf(saves, sizeof saves, "; saves: %lld calls, %.2f MiB, %.3f s over %d saves",
                 (long long)sv->calls, (double)sv->bytes / mib, sv->secs, qt_main_state.saves);
    fprintf(f, "qtrain: collectives: steps: %lld calls, %.2f MiB sent per rank, %.3f s (%.1f%% of "
            "the step time) over %d steps%s; error flags: %lld calls, %.3f s; rank 0's own bytes "
            "and time\n", (long long)st->calls, (double)st->bytes / mib, st->secs, share,
            qt_main_state.steps_run, saves, (long long)fl->calls, fl->secs);
}

/* Counter snapshot before a call (qt_main_coll_add adds the delta since to a kind). */
static qt_main_coll qt_main_coll_now(void)
{
    qt_main_coll c;
    qt_comm_stats(&c.bytes, &c.secs, &c.calls);
    return c;
}

static void qt_main_coll_add(int kind, qt_main_coll before)
{
    qt_main_coll now = qt_main_coll_now(), *k = &qt_main_state.coll[kind];
    k->bytes += now.bytes - before.bytes;
    k->calls += now.calls - before.calls;
    k->secs += now.secs - before.secs;
}

static int qt_main_finish(int code)
{
    if (qt_main_state.metrics) {
        if (fclose(qt_main_state.metrics) != 0 && code == 0) {
            fprintf(stderr, "qtrain: writing the metrics file failed\n");
            code = QT_EXIT_ERR;
        }
        qt_main_state.metrics = NULL;
    }
    qt_app_eval_close();
    if (qt_main_state.data_open) qt_data_close(&qt_main_state.data);
    qt_checkpoint_unlock();
    /* a pipeline plan: each stage's first rank says where its schedule's time went */
    if (qt_main_state.plan && qt_main_state.steps_run)
        qt_pp_time_print(stderr, qt_main_state.plan, qt_main_state.steps_run);
    if (qt_main_state.plan && qt_main_state.rank == 0) {
        qt_main_comm_print(stderr);
        qt_runtime_profile_print(stderr);
        qt_runtime_memory_print(stderr, qt_main_state.plan);
    }
    qt_comm_finalize();
    return code;
}

/* a and b name one file: the same device and inode when both exist; when neither does,
 * the same last component in the same directory (./x and x); else not. */
static int qt_main_same_file(const char *a, const char *b)
{
    char da[4200], db[4200];   /* the two directories (start-up only: locals) */
    struct stat sa, sb;
    const int ha = stat(a, &sa) == 0, hb = stat(b, &sb) == 0;
    if (ha || hb)
        return ha && hb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    const char *la = strrchr(a, '/'), *lb = strrchr(b, '/');
    if (strcmp(la ? la + 1 : a, lb ? lb + 1 : b)) return 0;
    snprintf(da, sizeof da, "%.*s", la ? (int)(la - a) + 1 : 1, la ? a : ".");
    snprintf(db, sizeof db, "%.*s", lb ? (int)(lb - b) + 1 : 1, lb ? b : ".");
    return stat(da, &sa) == 0 && stat(db, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* A save= file or dump_grads= path may not be a file the run reads (eval_data=, the
 * tokenizer= file, and for dump_grads= the load= file; data= is the checkpoint check's):
 * with overwrite=1 the write replaced it (dump_grads= over the loaded checkpoint, over the
 * eval data). save= naming its load= file is a resume in place and stays allowed. The same
 * path, or the same file (qt_main_same_file, as the lock check's). */
static int qt_main_dest_clash(const char *key, const char *path, const qt_cli *cli)
{
    char tok[4200];
    const char *const keys[] = {"eval_data", "tokenizer", "load"};
    const char *paths[] = {cli->eval_data, cli->tokenizer, strcmp(key, "save") ? cli->load : NULL};
    struct stat o;
    if (cli->tokenizer && stat(cli->tokenizer, &o) == 0 && S_ISDIR(o.st_mode)) {
        snprintf(tok, sizeof tok, "%s/tokenizer.json", cli->tokenizer);
        paths[1] = tok;
    }
    for (int i = 0; i < 3; i++) {
        if (!paths[i]) continue;
        const int same_path = !strcmp(paths[i], path);
        if (same_path || qt_main_same_file(paths[i], path)) {
            fprintf(stderr, "qtrain: %s=%s is the file of %s=%s%s, which this run reads; "
                    "refusing to write over it, even with overwrite=1: give another %s= path\n",
                    key, path, keys[i], paths[i], same_path ? "" : " (same device and inode)",
                    key);
            return QT_E_ARG;
        }
    }
    return QT_OK;
}

/* save=X holds X.lock from start-up to exit and removes it then (ckpt_target.c): a file the
 * run reads or writes may not be that path. Before this check, dump_grads=X.lock was
 * written and then removed with the lock (the gradients lost without a word), metrics=X.lock
 * was refused as "not a metrics line", and with overwrite=1 (which lets a save take over a
 * X.lock that is not a lock file) data=X.lock or metrics=X.lock were overwritten and
 * removed. Refused even with overwrite=1. */
static int qt_main_lock_clash(const qt_cli *cli)
{
    char lock[4200];   /* X.lock of save=X */
    static const char *const keys[] = {"data", "eval_data", "load", "tokenizer", "metrics",
                                       "dump_grads"};
    const char *const paths[] = {cli->data, cli->eval_data, cli->load, cli->tokenizer,
                                 cli->metrics, cli->dump_grads};
    if (snprintf(lock, sizeof lock, "%s.lock", cli->save) >= (int)sizeof lock) return QT_OK;
    for (int i = 0; i < (int)(sizeof paths / sizeof paths[0]); i++) {
        if (!paths[i] || !qt_main_same_file(paths[i], lock)) continue;
        fprintf(stderr, "qtrain: %s=%s is the lock file of save=%s (a job holds %s while it "
                "runs and removes it at exit), refused even with overwrite=1: give another "
                "%s= path, or another save= path\n", keys[i], paths[i], cli->save, lock,
                keys[i]);
        return QT_E_ARG;
    }
    return QT_OK;
}

/* A file that will be written after training (save=, dump_grads=) must have a writable
 * directory now, and must not be something a save would destroy (a device, a directory,
 * the data file, another kind of file unless overwrite=1): finding out after hours of
 * training is too late. Rank 0 (the writer) removes the temporaries of earlier dump_grads=
 * writes that were killed; a save= target's are removed once it is claimed (its lock). */
static int qt_main_check_dest(const char *key, const char *path, int qtrain_format,
                              const qt_cli *cli, int rank)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (!path[0] || (slash && !slash[1]) || strlen(path) > QT_MAIN_DEST_MAX) {
        fprintf(stderr, "qtrain: %s=%s: expected a path (not empty, not ending in '/', at most "
                "%d characters: a save writes longer names beside and inside it, such as "
                "PATH.tmp.<pid>/optimizer-00001-of-00001.safetensors.tmp.<pid>, and a path "
                "holds at most 4095)\n", key, path, QT_MAIN_DEST_MAX);
        return QT_E_ARG;
    }
    /* save=. (or DIR/., ..): the save's temporary DIR.tmp.<pid> would lie inside the target
     * ("..tmp.<pid>") and the save failed after training ("holds the subdirectory") */
    const char *last = slash ? slash + 1 : path;
    if (!strcmp(last, ".") || !strcmp(last, "..")) {
        fprintf(stderr, "qtrain: %s=%s: the path ends in '%s'; a save writes beside its "
                "target and then swaps it in, so it needs the target's own name: expected "
                "e.g. save=ckpt, run from the directory that holds ckpt\n", key, path, last);
        return QT_E_ARG;
    }
    /* save=$PWD: the swap leaves the process in the deleted old directory, where relative
     * paths (data=tokens.npy) no longer resolve: the run stopped at the first save with
     * "data file ... changed during the run" */
    struct stat here, target;
    if (qtrain_format && !stat(".", &here) && !stat(path, &target) && S_ISDIR(target.st_mode) &&
        here.st_dev == target.st_dev && here.st_ino == target.st_ino) {
        fprintf(stderr, "qtrain: %s=%s is the current directory; a save swaps a new directory "
                "in at that path and deletes the old one, which would leave this run's "
                "relative paths (data=, metrics=) in a deleted directory: run from another "
                "directory\n", key, path);
        return QT_E_ARG;
    }
    memcpy(qt_main_state.dir_buf, path, n);
    qt_main_state.dir_buf[n] = 0;
    const char *dir = slash ? (n ? qt_main_state.dir_buf : "/") : ".";
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "qtrain: %s=%s: directory %s does not exist or is not writable\n", key,
                path, dir);
        return QT_E_ARG;
    }
    if ((!qtrain_format || qt_checkpoint_is_file(path)) && qt_main_dest_clash(key, path, cli) != QT_OK)
        return QT_E_ARG;
    if (qt_checkpoint_check_target(key, path, qtrain_format, cli->overwrite, cli->data) != QT_OK)
        return QT_E_ARG;
    /* a save= target is claimed later (qt_checkpoint_claim: lock, then stale temporaries) */
    if (rank == 0 && !qtrain_format) qt_checkpoint_remove_stale(path);
    return QT_OK;
}

/* Appends one clause to the run manifest's note ("; " between clauses). */
static void qt_main_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void qt_main_note(const char *fmt, ...)
{
    char *n = qt_main_state.note;
    size_t len = strlen(n);
    if (len && len + 2 < sizeof qt_main_state.note) {
        memcpy(n + len, "; ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n + len, sizeof qt_main_state.note - len, fmt, ap);
    va_end(ap);
}

/* Writes one metrics line; a full disk or a closed pipe is an error, not a silent loss. */
static int qt_main_metrics(const qt_step_metrics *m, const char *path)
{
    qt_metrics_write(qt_main_state.metrics, m);
    if (fflush(qt_main_state.metrics) != 0 || ferror(qt_main_state.metrics)) {
        fprintf(stderr, "qtrain: writing the metrics file %s failed at step %lld\n", path,
                (long long)m->step);
        return QT_E_IO;
    }
    return QT_OK;
}

/* truncate_metrics=1 on a resumed run whose metrics file runs past its start step (a crash
 * after the checkpoint): cut the lines of steps >= start, say so, note it in the manifest,
 * and give the file's new last step in *last. */
static int qt_main_truncate_metrics(const char *path, int64_t start, int64_t *last)
{
    int64_t lines = 0, first = -1, end = -1;
    if (qt_metrics_truncate(path, start, &lines, &first, &end) != QT_OK ||
        qt_metrics_last_step(path, last) != QT_OK)
        return QT_E_IO;
    fprintf(stderr, "qtrain: note: truncate_metrics=1: removed %lld line(s) of metrics file %s "
            "(steps %lld..%lld, past the checkpoint's step %lld); it now ends at step %lld\n",
            (long long)lines, path, (long long)first, (long long)end, (long long)start - 1,
            (long long)*last);
    qt_main_note("truncate_metrics=1: removed %lld line(s) of steps %lld..%lld from the "
                 "metrics file", (long long)lines, (long long)first, (long long)end);
    return QT_OK;
}

/* Opens the metrics file before any training. A resumed run (start > 0) appends, and the
 * file must end at step start-1 (its "step" counts from 0), so the lines stay one run's
 * history without gaps or repeats; a fresh run refuses a file that already holds lines.
 * overwrite=1 replaces the file in both cases; truncate_metrics=1 first cuts, on a resumed
 * run, the lines of steps at or past the start (left by a run that crashed after the
 * checkpoint it resumes). */
/* metrics= may not name a file the run reads or writes otherwise (the data, the eval data,
 * a loaded checkpoint file, the tokenizer, the save=/dump_grads= file): opening it "w"
 * replaced it, overwrite=1 or not. The same path, or the same device and inode. */
static int qt_main_metrics_clash(const qt_cli *cli)
{
    static const char *const keys[] = {"data", "eval_data", "load", "tokenizer", "save",
                                       "dump_grads"};
    const char *const paths[] = {cli->data, cli->eval_data, cli->load, cli->tokenizer,
                                 cli->save, cli->dump_grads};
    struct stat m, o;
    const int have = stat(cli->metrics, &m) == 0 && S_ISREG(m.st_mode);
    for (int i = 0; i < (int)(sizeof paths / sizeof paths[0]); i++) {
        if (!paths[i]) continue;
        const int same_path = !strcmp(paths[i], cli->metrics);
        if (same_path || (have && stat(paths[i], &o) == 0 && S_ISREG(o.st_mode) &&
                          o.st_dev == m.st_dev && o.st_ino == m.st_ino)) {
            fprintf(stderr, "qtrain: metrics=%s is the file of %s=%s%s; refusing to write the "
                    "metrics over it, even with overwrite=1: give another metrics= path\n",
                    cli->metrics, keys[i], paths[i],
                    same_path ? "" : " (same device and inode)");
            return QT_E_ARG;
        }
    }
    return QT_OK;
}

static int qt_main_open_metrics(const qt_cli *cli, int64_t start)
{
    const char *path = cli->metrics, *mode = "w";
    if (qt_main_metrics_clash(cli) != QT_OK)
        return QT_E_ARG;
    if (!cli->overwrite) {
        int64_t last = -1;
        if (qt_metrics_last_step(path, &last) != QT_OK) {
            /* overwrite=1 helps only with a file that is there (not a metrics file); a path
             * that cannot be opened at all (through a file, unreadable) it would not cure */
            struct stat st;
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                fprintf(stderr, "qtrain: metrics=%s: give overwrite=1 to replace the file, or "
                        "another path\n", path);
            return QT_E_IO;
        }
        if (start > 0 && last >= start && cli->truncate_metrics &&
            qt_main_truncate_metrics(path, start, &last) != QT_OK)
            return QT_E_IO;
        if (start > 0) {
            mode = "a";
            if (last >= start) {
                fprintf(stderr, "qtrain: metrics file %s ends at step %lld, but this run "
                        "resumes at step %lld (its checkpoint's step), so its last step should "
                        "be %lld: steps %lld..%lld are from a run that went on after that "
                        "checkpoint (a crash?); give truncate_metrics=1 to cut them off "
                        "(recorded in the run manifest), overwrite=1 to replace the file, or "
                        "another path\n", path, (long long)last, (long long)start,
                        (long long)(start - 1), (long long)start, (long long)last);
                return QT_E_ARG;
            }
            if (last >= 0 && last != start - 1) {
                fprintf(stderr, "qtrain: metrics file %s ends at step %lld, but this run "
                        "resumes at step %lld, so its last step should be %lld; appending "
                        "would leave a gap or repeat steps (give overwrite=1 to replace the "
                        "file, or another path)\n", path, (long long)last, (long long)start,
                        (long long)(start - 1));
                return QT_E_ARG;
            }
        } else if (last >= 0) {
            fprintf(stderr, "qtrain: metrics file %s already holds steps up to %lld, and this "
                    "run starts at step 0; refusing to overwrite it (give overwrite=1 to "
                    "replace it, or another path)\n", path, (long long)last);
            return QT_E_ARG;
        }
    }
    errno = 0;
    qt_main_state.metrics = fopen(path, mode);
    if (!qt_main_state.metrics ||
        setvbuf(qt_main_state.metrics, qt_main_state.metrics_buf, _IOFBF,
                sizeof qt_main_state.metrics_buf) != 0) {
        /* the reason too (a read-only directory said only "cannot open") */
        fprintf(stderr, "qtrain: cannot open metrics file %s for %s: %s\n", path,
                *mode == 'a' ? "appending" : "writing", errno ? strerror(errno) : "setvbuf failed");
        return QT_E_IO;
    }
    return QT_OK;
}

/* A resumed run must train on the data its checkpoint was trained on: the checkpoint's
 * "data_hash" (XXH64 of the data file, recorded by every save) must equal this run's,
 * and its "data_holdout" (the windows eval_holdout= kept out of training; absent: 0) this
 * run's holdout, since the training windows, so the data position and the pass, depend on
 * it; unless allow_data_change=1, which the manifest then records. Every rank decides alike
 * (same file, same checkpoint, same arguments); rank 0 prints. A checkpoint without a data
 * hash (written before it was recorded) is not checked, with a note. */
static int qt_main_check_data(const qt_cli *cli, int rank)
{
    const qt_ckpt_ident *id = qt_checkpoint_ident();
    const int64_t held = qt_app_eval_holdout_windows();
    if (id->data_holdout != held) {
        if (!cli->allow_data_change) {
            char was[128], fix[64];
            if (id->data_holdout > 0) {
                snprintf(was, sizeof was, "the data's last %lld window%s held out for the eval "
                         "(eval_holdout=%lld)", (long long)id->data_holdout,
                         id->data_holdout == 1 ? "" : "s", (long long)id->data_holdout);
                snprintf(fix, sizeof fix, "give eval_holdout=%lld", (long long)id->data_holdout);
            } else {
                snprintf(was, sizeof was, "no windows held out (no eval_holdout=)");
                snprintf(fix, sizeof fix, "give eval_data=FILE instead");
            }
            if (rank == 0)
                fprintf(stderr, "qtrain: %s was trained with %s, but this run holds out %lld: "
                        "its training windows, so the data position and the passes, would "
                        "differ; refusing to resume (%s; allow_data_change=1 resumes anyway, "
                        "recorded in the run manifest)\n", cli->load, was, (long long)held, fix);
            return QT_E_MISMATCH;
        }
        if (rank == 0)
            fprintf(stderr, "qtrain: note: allow_data_change=1: resuming with %lld held-out "
                    "window%s although %s was trained with %lld\n", (long long)held,
                    held == 1 ? "" : "s", cli->load, (long long)id->data_holdout);
        qt_main_note("allow_data_change=1: checkpoint data_holdout %lld, this run's %lld",
                     (long long)id->data_holdout, (long long)held);
    }
    char mine[24];
    snprintf(mine, sizeof mine, "0x%016llx", (unsigned long long)qt_main_state.data.hash);
    const char *data = cli->data ? cli->data : "(embedded corpus)";
    if (!id->data_hash[0]) {
        if (rank == 0)
            fprintf(stderr, "qtrain: note: %s records no data hash; the data of the resumed "
                    "run is not checked\n", cli->load);
        qt_main_note("checkpoint records no data hash; data %s not checked", mine);
        return QT_OK;
    }
    if (!strcmp(id->data_hash, mine)) return QT_OK;
    if (!cli->allow_data_change) {
        if (rank == 0)
            fprintf(stderr, "qtrain: %s was trained on data of hash %s, but %s has hash %s; "
                    "refusing to resume on other data (give allow_data_change=1 to resume "
                    "anyway, recorded in the run manifest)\n", cli->load, id->data_hash,
                    data, mine);
        return QT_E_MISMATCH;
    }
    if (rank == 0)
        fprintf(stderr, "qtrain: note: allow_data_change=1: resuming on %s (data hash %s) "
                "although %s was trained on data hash %s\n", data, mine, cli->load,
                id->data_hash);
    qt_main_note("allow_data_change=1: checkpoint data_hash %s, this run's data hash %s",
                 id->data_hash, mine);
    return QT_OK;
}

/* A resume across the compute dtype (float32 <-> bfloat16; session 23): both plans keep
 * fp32 master weights and Adam moments, so the state means the same (the state hash leaves
 * the dtype out) and resumes, as a run switched to bf16 part-way should; but the steps from
 * here round otherwise than either uninterrupted run, so it is not a bit-exact resume: rank
 * 0 says so and the run manifest's note records it. The checkpoint's "dtype" metadata
 * (written by bf16 saves only) read absent is float32, which a bf16 checkpoint written
 * before it was recorded (December 2026) also reads as, with the note. */
static void qt_main_check_dtype(const qt_plan *p, const qt_cli *cli, int rank, int64_t start)
{
    const char *rec = qt_checkpoint_ident()->dtype;
    const char *was = rec[0] ? rec : "float32", *mine = p->dtype == QT_BF16 ? "bfloat16" : "float32";
    if (!strcmp(was, mine)) return;
    if (rank == 0)
        fprintf(stderr, "qtrain: note: %s was trained in dtype %s%s, this plan computes in %s: "
                "the weights and Adam moments resume (fp32 in both) at step %lld, but not "
                "bit-exactly: the steps from here differ from an uninterrupted run in either "
                "dtype (recorded in the run manifest)\n", cli->load, was,
                rec[0] ? "" : " (it records no dtype: a float32 run's, or a bfloat16 run's saved "
                "before December 2026)", mine, (long long)start);
    qt_main_note("dtype %s -> %s at step %lld: the state resumed, not bit-exactly", was, mine,
                 (long long)start);
}

/* A resume of a plan that drops past the expert hosts' receive buffers (ragged_buffer_factor
 * r > 0 on an expert group of Ep > 1 ranks), or of a checkpoint such a plan saved: which
 * rows drop depends on the expert degree, a rank's tokens a microbatch and the buffer's
 * rows, which the mesh and r set and the state hash leaves out, so the checkpoint records
 * them ("moe_buffer", qt_ckpt_buffer_meta). Another value (or one side without the
 * buffers) resumes the state, but the steps from here drop other rows than the run that
 * saved it would have: not a bit-exact resume, which rank 0 says and the run manifest's
 * note records (a checkpoint saved before it was recorded, December 2026, reads as none). */
static void qt_main_check_buffer(const qt_plan *p, const qt_cli *cli, int rank, int64_t start)
{
    char mine[96] = "";
    const char *was = qt_checkpoint_ident()->moe_buffer;
    const int on = qt_ckpt_buffer_meta(p, mine, sizeof mine);
    if (!strcmp(was, mine)) return;
    if (rank == 0)
        fprintf(stderr, "qtrain: note: %s was trained with %s%s, this plan %s%s: the state "
                "resumes at step %lld, but the steps from here drop other rows than the run "
                "that saved it: not a bit-exact resume (recorded in the run manifest)\n",
                cli->load, was[0] ? "expert receive buffers " : "no expert receive-buffer "
                "dropping", was[0] ? was : " (it records none: a run without "
                "ragged_buffer_factor, or one saved before December 2026)",
                on ? "drops past receive buffers " : "has no receive-buffer dropping", mine,
                (long long)start);
    qt_main_note("moe_buffer %s -> %s at step %lld: the state resumed, not bit-exactly",
                 was[0] ? was : "none", on ? mine : "none", (long long)start);
}

/* The run manifest, the first line this run writes to the metrics file (qt_io.h). */
static void qt_main_manifest(const qt_plan *p, const qt_cli *cli, int argc, char **argv,
                             int64_t start, int64_t end)
{
    const qt_build_info *b = qt_build_info_get();
    qt_manifest m = {
        .plan = p, .n_ranks = qt_main_state.size, .seed = cli->seed,
        .argc = argc - 1, .argv = argv + 1,
        .build_compiler = b->compiler, .build_flags = b->flags, .build_isa = b->isa,
        .build_git = b->git, .build_kind = b->kind,
        .data_path = cli->data, .data_bytes = qt_main_state.data.file_bytes,
        .data_hash = qt_main_state.data.hash,
        .data_tokens = qt_main_state.data.n_tokens,
        .data_windows = qt_main_state.data.n_windows,
        .data_passes = (double)end * (double)p->train.global_batch /
                       (double)qt_main_state.data.n_windows,
        .load = cli->load, .ckpt = qt_checkpoint_ident(),
        .start_step = start, .end_step = end,
        .note = qt_main_state.note[0] ? qt_main_state.note : NULL,
    };
    qt_app_eval_manifest(&m);
    qt_manifest_write(qt_main_state.metrics, &m);
}

/* Data position stored in checkpoints: global sequences consumed before `step`. */
static int64_t qt_main_data_pos(const qt_plan *p, int64_t step)
{
    return step * p->train.global_batch;
}

/* Data order (docs/formats.md): step i reads global sequences i*B .. i*B+B-1, sequence q
 * window q % W; pass k over the data (from 0) is sequences [k*W, (k+1)*W). Steps 0..end-1
 * read end*B windows: when that is more than W, the data is read more than once, and the
 * loss can jump where a pass restarts (the model has seen those windows). Rank 0 says so
 * once, before the first step; passes are counted from step 0, also on a resumed run. */
static void qt_main_passes_note(const qt_plan *p, const qt_cli *cli, int64_t start, int64_t end)
{
    const int64_t B = p->train.global_batch, W = qt_main_state.data.n_windows;
    const int64_t S = p->train.seq_len;
    if (end <= start || end * B <= W) return;
    char from[64] = "", per[64];
    if (start > 0)
        snprintf(from, sizeof from, " (this run resumes at step %lld)", (long long)start);
    if (W >= B && W % B == 0)
        snprintf(per, sizeof per, "a pass every %lld step%s", (long long)(W / B),
                 W / B == 1 ? "" : "s");
    else if (W >= B)
        snprintf(per, sizeof per, "a pass every %.1f steps", (double)W / (double)B);
    else
        snprintf(per, sizeof per, "each step reads it %.2f times", (double)B / (double)W);
    fprintf(stderr, "qtrain: note: steps 0..%lld%s read %lld sequences of %lld tokens (%lld "
            "tokens) from the %lld window%s of %s (%lld usable tokens): the data is read %.2f "
            "times, %s; loss may jump where a pass restarts (qtrain-audit plot marks each)\n", (long long)end - 1, from,
            (long long)(end * B), (long long)S, (long long)(end * B * S), (long long)W,
            W == 1 ? "" : "s", cli->data ? cli->data : "the embedded corpus", (long long)(W * S),
            (double)end * (double)B / (double)W, per);
}

/* Before step `step` (rank 0): when a new pass over the data begins inside it (some
 * sequence q of the step with q % W == 0, q > 0), one note naming the step as the progress
 * lines do (from 1). Only when a pass lasts at least one step (W >= B): with a smaller file
 * every step rereads it, which the start-up note says. */
static void qt_main_pass_begins(const qt_plan *p, int64_t step, int64_t end)
{
    const int64_t B = p->train.global_batch, W = qt_main_state.data.n_windows;
    const int64_t lo = step * B, hi = lo + B - 1;
    if (W < B || lo == 0 || hi / W == (lo - 1) / W) return;
    fprintf(stderr, "qtrain: note: step %lld/%lld begins pass %lld over the data (window 0 "
            "again)\n", (long long)step + 1, (long long)end, (long long)(hi / W + 1));
}

/* The bounds of a wait on a peer (qt_coll.h qt_comm_set_deadline). Start-up (start_up = 1:
 * from the plan check to the metrics file's agreement, so the arena's populate, the
 * warm-up and load= included) waits start_timeout=, by default the larger of 300 s and
 * comm_timeout=, and a timeout there says so and names the key; from then on (dump_grads=,
 * the steps, evals, saves) comm_timeout=, by default 300 s. */
static void qt_main_deadline(const qt_cli *cli, int start_up)
{
    double s = cli->comm_timeout > 0 ? cli->comm_timeout : QT_COLL_DEFAULT_DEADLINE;
    if (start_up) s = cli->start_timeout > 0 ? cli->start_timeout
                    : s > QT_COLL_DEFAULT_DEADLINE ? s : QT_COLL_DEFAULT_DEADLINE;
    qt_comm_set_deadline(s);
    qt_comm_set_timeout_hint(start_up ? "this was during start-up, which start_timeout= "
                                        "bounds: if a rank is slow to start, raise it" : NULL);
}

/* A collective failed with QT_E_COMM on a mesh (a silent peer, already named): our
 * messages are still posted and the peer may never answer, so MPI_Finalize could wait
 * forever; end the job. Returns rc otherwise. */
static int qt_main_comm_fail(int rc)
{
    if (rc == QT_E_COMM && qt_main_state.size > 1) {
        fflush(NULL);
        qt_comm_abort(QT_EXIT_ERR);
    }
    return rc;
}

/* A failure inside a step on a mesh (a silent peer, or this rank's own error, e.g. a token
 * id out of range in a data file rewritten in place): the other ranks are inside the
 * step's collectives, where no error flag reaches them, so the job ends here, after this
 * rank's message (nothing is being written during a step). */
static void qt_main_step_fail(void)
{
    if (qt_main_state.size > 1) {
        fflush(NULL);
        qt_comm_abort(QT_EXIT_ERR);
    }
}

/* The job's error flag at `what` (qt_coll_agree): QT_OK when every rank passed QT_OK,
 * else a failure code (my own, or QT_E_PEER after naming the failing rank). */
static int qt_main_agree(const char *what, int rc)
{
    if (qt_main_state.size < 2) return rc;
    return qt_main_comm_fail(qt_coll_agree(what, rc));
}

/* A checkpoint (grads = 0) or gradient dump (grads = 1): collective on a mesh, every rank
 * calls it (a directory: each rank writes its shards; one file: rank 0 writes). A silent peer leaves messages posted (qt_coll.h), so the job
 * ends here rather than in an MPI_Finalize that may never return. */
static int qt_main_save(const qt_plan *p, const char *path, int grads, int64_t step,
                        int64_t shard_bytes)
{
    const int64_t pos = qt_main_data_pos(p, step);
    char what[128];
    snprintf(what, sizeof what, "%s %.90s", grads ? "dump_grads= write of" : "checkpoint save to",
             path);
    qt_comm_set_context(what, (long long)step);
    const qt_main_coll before = qt_main_coll_now();
    int rc = grads ? qt_checkpoint_save_grads(p, path)
           : qt_checkpoint_is_file(path) ? qt_checkpoint_save(p, path, 1, step, pos)
                                         : qt_checkpoint_save_dir(p, path, shard_bytes, step, pos);
    qt_comm_set_context(NULL, -1);
    if (qt_main_state.steps_run) {           /* saves during and after the steps */
        qt_main_coll_add(QT_MAIN_COLL_SAVES, before);
        qt_main_state.saves++;
    }
    return qt_main_comm_fail(rc);
}

/* "" or "s" after a count (1 rank, 2 ranks). */
static const char *qt_main_s(long long n)
{
    return n == 1 ? "" : "s";
}

/* A job of `size` processes started a plan of another rank count: name the plan's mesh,
 * every axis with its size (the slices too) and how to start it. */
static void qt_main_wrong_size(const qt_plan *p, int size)
{
    static const char *const axis[QT_MESH_COUNT] = {"data", "fsdp", "tensor", "expert",
                                                    "context"};
    char mesh[256], how[96];
    size_t k = 0;
    for (int a = 0; a < QT_MESH_COUNT && k < sizeof mesh; a++)
        k += (size_t)snprintf(mesh + k, sizeof mesh - k, "%s%s %d", a ? " x " : "", axis[a],
                              p->mesh[a]);
    const int64_t ns = qt_mesh_slices(p->dcn);
    if (ns > 1 && k < sizeof mesh) {
        k += (size_t)snprintf(mesh + k, sizeof mesh - k, "; %lld slices: dcn", (long long)ns);
        for (int a = 0; a < QT_MESH_COUNT && k < sizeof mesh; a++)
            if (qt_mesh_dcn(p->dcn, a) > 1)
                k += (size_t)snprintf(mesh + k, sizeof mesh - k, " %s %d", axis[a],
                                      qt_mesh_dcn(p->dcn, a));
    }
    if (p->n_ranks == 1)
        snprintf(how, sizeof how, "run it without mpiexec (or with mpiexec -n 1)");
    else
        snprintf(how, sizeof how, "run it with mpiexec -n %d", p->n_ranks);
    qt_fail(QT_E_PLAN, "plan %s was generated for %d rank%s (mesh %s), but this job has %d: %s",
            p->run_name, p->n_ranks, qt_main_s(p->n_ranks), mesh, size, how);
}

/* Packed plans: the document separator (io/qt_io.h qt_data_doc_sep): the plan's eos_id, or
 * the one data= records when the plan has none; an eval_data= file must agree. Installed
 * in the runtime's fills and config.json; a separator taken from the data is noted on
 * stderr and in the run manifest. */
static int qt_main_doc_sep(const qt_plan *p, const qt_cli *cli, int rank)
{
    char from[4400];
    int32_t eos = -1;
    int rc = qt_data_doc_sep(&qt_main_state.data, "data", p->pack_eos, &eos, from, sizeof from);
    if (rc == QT_OK) rc = qt_app_eval_doc_sep(cli, eos, from);
    if (rc != QT_OK) return rc;
    qt_runtime_set_eos(eos);
    qt_hf_eos_set(eos);
    if (p->pack_eos >= 0) return QT_OK;
    if (rank == 0 && eos >= 0)
        fprintf(stderr, "qtrain: note: packing: documents end at token id %d, from %s (the "
                "plan has no eos_id)\n", (int)eos, from);
    else if (rank == 0)
        fprintf(stderr, "qtrain: note: packing: no document separator, from %s (the plan has "
                "no eos_id)\n", from);
    if (eos >= 0)
        qt_main_note("packing: eos %d from %s", (int)eos, from);
    else
        qt_main_note("packing: no separator, from %s", from);
    return QT_OK;
}

/* The pipeline driver's test hooks from the environment (docs/pipeline.md; read on every
 * rank alike): QT_PP_TEST_ORDER (refused unless a known value; a known one is noted, since it
 * changes the bits on purpose), QT_PP_PREFETCH=0, QT_PP_TRACE=1. Returns QT_OK or QT_E_ARG. */
static int qt_main_pp_hooks(int rank)
{
    const char *order = getenv("QT_PP_TEST_ORDER");  /* qt_pp_set_test_order */
    const int mode = !order || !*order ? 0 : !strcmp(order, "reverse") ? 1
                     : !strcmp(order, "lb-local") ? 2 : !strcmp(order, "mtp-drop") ? 3 : -1;
    /* a test hook that changes the bits (lb-local, mtp-drop: wrong gradients on
     * purpose): left set in a shell it silently trained another model (audit24) */
    if (mode < 0) {
        fprintf(stderr, "qtrain: QT_PP_TEST_ORDER=%s: expected reverse, lb-local or "
                "mtp-drop (a test hook of tests/e2e/63_pipeline.sh); unset it to train\n",
                order);
        return QT_E_ARG;
    }
    if (mode) {
        if (rank == 0)
            qt_note("QT_PP_TEST_ORDER=%s: a test hook (docs/pipeline.md) that changes this "
                    "run's bits on purpose; unset it to train", order);
        qt_main_note("QT_PP_TEST_ORDER=%s (a test hook: these bits are not the plan's)",
                     order);
    }
    qt_pp_set_test_order(mode);
    const char *pf = getenv("QT_PP_PREFETCH");  /* qt_pp_set_prefetch */
    qt_pp_set_prefetch(!(pf && !strcmp(pf, "0")));
    const char *tr = getenv("QT_PP_TRACE");  /* qt_pp_set_trace */
    qt_pp_set_trace(tr && !strcmp(tr, "1"));
    return QT_OK;
}

/* Start-up, up to a runtime ready to step: the command line, the save targets, the plan
 * against this job (rank count, the same plan on every rank, the mesh), the runtime (arena,
 * parameters) and the banner. Returns QT_MAIN_GO, or the exit code (0 after help=). */
static int qt_main_start(qt_cli *cli, int argc, char **argv, int rank, int size)
{
    qt_main_state.rank = rank;
    qt_main_state.size = size;
    /* a rank whose command line or save target is refused still takes part in the plan
     * check and the error flag below, so its peers stop with it instead of waiting */
    int st = qt_cli_parse(cli, argc, argv) != QT_OK ? QT_E_ARG : QT_OK;
    if (st == QT_OK && cli->help) {
        if (rank == 0) qt_cli_usage(stdout, argv[0]);
        return 0;
    }
    if (size < 2 && st != QT_OK) return QT_EXIT_ARG;
    /* start-up's deadline bounds the plan check too, the job's first collective */
    if (st == QT_OK) qt_main_deadline(cli, 1);
    if (st == QT_OK &&
        ((cli->save && (qt_main_lock_clash(cli) != QT_OK ||
                        qt_main_check_dest("save", cli->save, 1, cli, rank) != QT_OK)) ||
         (cli->dump_grads && qt_main_check_dest("dump_grads", cli->dump_grads, 0, cli, rank) != QT_OK)))
        st = QT_E_ARG;
    /* the tokenizer files: read by rank 0 alone, which writes them into each save= directory */
    if (st == QT_OK && cli->tokenizer && rank == 0 && qt_hf_tokenizer_set(cli->tokenizer) != QT_OK)
        st = QT_E_ARG;
    if (size < 2 && st != QT_OK) return QT_EXIT_ARG;
    const qt_plan *p = qt_main_plan();
    qt_err_set_rank(rank, size);
    /* a pipeline plan in a form the driver does not run is refused before anything else
     * about the job (its rank count included): every rank reads the same fields and stops
     * alike. A run with a checkpoint file spans the stages (qt_checkpoint_set_stages:
     * every stage's plan, the one-rank file) */
    if (qt_validate_pipeline(p) != QT_OK ||
        qt_checkpoint_set_stages(p, qt_main_stage_plan,
                                 cli->save ? "save" : cli->load ? "load" : cli->dump_grads
                                                                         ? "dump_grads" : NULL)
            != QT_OK)
        return QT_EXIT_ERR;
    /* every rank first checks that all ranks run the same plan on the same world (whatever
     * their plans' rank counts: `mpiexec -n 2 A : -n 2 B` is refused by all four), then the
     * world size against the plan: a wrong -n is an error on every rank, never a hang (a
     * pipeline's stages carry different tables: they agree on the hash naming them all) */
    const uint64_t job_hash = p->pipeline_stages > 1 ? p->pp_group_hash : p->hash;
    if (qt_main_comm_fail(qt_comm_check_same(job_hash)) != QT_OK) return QT_EXIT_ERR;
    if (size != p->n_ranks) {
        qt_main_wrong_size(p, size);
        return QT_EXIT_ERR;
    }
    /* a pipeline stage's mesh is its own ranks' (stage = rank div (ranks / S)) */
    int mrank = rank, msize = size;
    if (p->pipeline_stages > 1) {
        if (qt_main_pp_hooks(rank) != QT_OK) return QT_EXIT_ARG;
        msize = size / p->pipeline_stages;
        (void)qt_pp_stage_of(rank, size, p->pipeline_stages, &mrank);
    }
    if (qt_comm_mesh_init_slices(p->mesh, p->dcn, mrank, msize) != QT_OK) return QT_EXIT_ERR;
    qt_comm_mesh_set_base(rank - mrank);
    qt_err_set_rank(rank, size);
    if (qt_main_comm_fail(qt_comm_check_slices(p->mesh, p->dcn, rank, size)) != QT_OK)
        return QT_EXIT_ERR;
    /* the file-size limits of the destinations (each rank's own), agreed with the checks
     * above; then the save target's lock and shared-directory probe, a collective whose
     * verdict (rank 0's) every rank receives */
    /* a config.json beside the load= / save= checkpoint must describe this plan's model
     * (rank 0 reads it; the error flag below stops every rank) */
    if (st == QT_OK && rank == 0 &&
        ((cli->load && qt_hf_config_check(p, "load", cli->load, 0) != QT_OK) ||
         (cli->save && qt_hf_config_check(p, "save", cli->save, cli->overwrite) != QT_OK) ||
         (cli->save && !cli->overwrite &&
          qt_checkpoint_check_target_model(p, "save", cli->save) != QT_OK)))
        st = QT_E_ARG;
    if (st == QT_OK && cli->save) {
        /* every rank counts alike; rank 0 says it */
        const int was = qt_set_quiet(rank != 0);
        st = qt_checkpoint_check_shards(p, cli->save, cli->save_shard_size,
                                        cli->save_shard_size_arg ? cli->save_shard_size_arg
                                                                 : "4G (the default)")
                 ? QT_E_ARG : QT_OK;
        qt_set_quiet(was);
    }
    if (st == QT_OK && cli->save)
        st = qt_checkpoint_check_fsize(p, "save", cli->save, 1, cli->save_shard_size) ? QT_E_ARG
                                                                                       : QT_OK;
    if (st == QT_OK && cli->dump_grads)
        st = qt_checkpoint_check_fsize(p, "dump_grads", cli->dump_grads, 0, 0) ? QT_E_ARG : QT_OK;
    st = qt_main_agree("start-up checks", st);
    /* the data before the arena: a data file that cannot train (too short, an id out of
     * range) is refused before the runtime maps and prefaults the arena */
    if (st == QT_OK) {
        st = qt_data_open(&qt_main_state.data, cli->data, cli->data_dtype, p->model.vocab,
                          p->train.seq_len);
        qt_main_state.data_open = st == QT_OK;
        if (st == QT_OK) st = qt_app_eval_open(p, cli, &qt_main_state.data, rank);
        if (st == QT_OK && p->packing) st = qt_main_doc_sep(p, cli, rank);
        if (qt_main_agree("opening the data", st) != QT_OK) return QT_EXIT_ERR;
    }
    if (st == QT_OK && cli->save)
        st = qt_main_comm_fail(qt_checkpoint_claim(p, "save", cli->save, cli->overwrite))
                 ? QT_E_ARG : QT_OK;
    if (st != QT_OK) return st == QT_E_ARG ? QT_EXIT_ARG : QT_EXIT_ERR;
    qt_run_opts opts = {cli->seed, cli->learning_rate, 0, p->pipeline_stages > 1 ? mrank : rank,
                        size, cli->arena_huge /* 1: QT_ARENA_PAGES_HUGE */};
    if (qt_main_comm_fail(qt_runtime_init(p, &opts)) != QT_OK) return QT_EXIT_ERR;
    qt_main_state.plan = p;
    qt_runtime_profile_enable(cli->profile);
    if (rank == 0) qt_runtime_banner(stderr, p, qt_comm_backend());
    return QT_MAIN_GO;
}

/* A load= checkpoint: every rank reads its part, the ranks agree, and the step and data
 * position it resumes at must fit this plan and (resumed) this run's data. *start receives
 * the step to resume at. Returns QT_MAIN_GO or the exit code. */
static int qt_main_load(const qt_plan *p, const qt_cli *cli, int64_t *start)
{
    const int rank = qt_main_state.rank;
    int64_t data_pos = 0;
    /* any mesh: each rank keeps its part of the file (checkpoint.c) */
    if (rank == 0 && cli->load_weights_only)
        fprintf(stderr, "qtrain: note: load_weights_only=1: loading the weights of %s only; "
                "training starts at step 0 with fresh Adam moments\n", cli->load);
    const int want = cli->load_weights_only ? QT_LOAD_WEIGHTS
                   : cli->allow_state_change ? QT_LOAD_RESUME_ANY : QT_LOAD_RESUME;
    if (qt_main_agree("loading the checkpoint",
                      qt_checkpoint_load(p, cli->load, want, start, &data_pos)) != QT_OK)
        return QT_EXIT_ERR;
    /* bf16 plans: the compute copy from the loaded masters */
    if (qt_main_agree("publishing the loaded parameters", qt_runtime_params_changed()) != QT_OK)
        return QT_EXIT_ERR;
    if (*start < 0) {
        fprintf(stderr, "qtrain: %s: step %lld in the metadata is negative\n", cli->load,
                (long long)*start);
        return QT_EXIT_ERR;
    }
    const qt_ckpt_ident *id = qt_checkpoint_ident();
    if (data_pos != qt_main_data_pos(p, *start) && id->state_changed && *start > 0 &&
        data_pos % *start == 0) {
        /* allow_state_change=1 across a global batch change: step i reads sequences i x B
         * onwards, so the checkpoint's data position does not continue on this plan */
        if (rank == 0)
            fprintf(stderr, "qtrain: %s: allow_state_change=1 cannot resume a checkpoint of "
                    "another global batch: it was trained with %lld sequences a step (data "
                    "position %lld at step %lld), this plan trains %lld; step i reads the "
                    "data from sequence i x global batch, so the run would skip or reread "
                    "data (give load_weights_only=1 to start from its weights at step 0, or "
                    "the checkpoint's global batch)\n", cli->load,
                    (long long)(data_pos / *start), (long long)data_pos, (long long)*start,
                    (long long)p->train.global_batch);
        return QT_EXIT_ERR;
    }
    if (data_pos != qt_main_data_pos(p, *start)) {
        fprintf(stderr, "qtrain: %s: data position %lld does not match step %lld x global "
                "batch %lld\n", cli->load, (long long)data_pos, (long long)*start,
                (long long)p->train.global_batch);
        return QT_EXIT_ERR;
    }
    if (rank == 0 && *start > 0)
        fprintf(stderr, "qtrain: resuming from %s at step %lld\n", cli->load, (long long)*start);
    if (*start > 0 && qt_main_check_data(cli, rank) != QT_OK)
        return QT_EXIT_ERR;
    if (*start > 0) qt_main_check_dtype(p, cli, rank, *start);
    if (*start > 0) qt_main_check_buffer(p, cli, rank, *start);
    if (id->state_changed)
        qt_main_note("allow_state_change=1: %s %s -> %s at step %lld: the optimizer state and "
                     "step resumed, not bit-exactly", id->state_kind, id->state_was,
                     id->state_now, (long long)*start);
    else if (cli->allow_state_change && rank == 0)
        fprintf(stderr, "qtrain: note: allow_state_change=1: %s has this plan's state hash: "
                "nothing to allow (a bit-exact resume)\n", cli->load);
    if (*start > 0 && cli->learning_rate >= 0.0f) {
        if (rank == 0)
            fprintf(stderr, "qtrain: note: learning_rate=%g overrides the plan's peak learning "
                    "rate %g on this resumed run: the steps after %s (step %lld) follow "
                    "another schedule than the run that saved it (recorded in the run "
                    "manifest)\n", (double)cli->learning_rate, (double)p->train.lr, cli->load,
                    (long long)*start);
        qt_main_note("learning_rate=%g overrides the plan's %g from step %lld (resumed)",
                     (double)cli->learning_rate, (double)p->train.lr, (long long)*start);
    }
    return QT_MAIN_GO;
}

/* steps= is a total: a resumed run trains steps start .. end-1. A checkpoint past the end
 * (load= at step 5 with steps=3, which reads like "3 more") would train nothing and exit 0:
 * refused before anything is written (exit 2), naming both numbers and the steps= that
 * trains as many more. steps=0 (trains nothing: dump_grads= of the checkpoint's step, a
 * load and re-save) and steps= equal to the checkpoint's step go on with a note. Every rank
 * decides alike (same checkpoint, same arguments); rank 0 prints. */
static int qt_main_check_end(const qt_cli *cli, int64_t start, int64_t end)
{
    if (start == 0 || end > start) return QT_MAIN_GO;
    char given[64];
    if (cli->steps >= 0)
        snprintf(given, sizeof given, "steps=%lld", (long long)end);
    else
        snprintf(given, sizeof given, "the plan's steps (%lld; no steps= given)", (long long)end);
    if (end > 0 && end < start) {
        if (qt_main_state.rank == 0)
            fprintf(stderr, "qtrain: %s resumes at step %lld, but %s ends before it: steps= is "
                    "the total to train to, not the steps to add, so nothing would train; give "
                    "steps=%lld to train %lld more (steps=%lld trains none)\n", cli->load,
                    (long long)start, given, (long long)(start + end), (long long)end,
                    (long long)start);
        return QT_EXIT_ARG;
    }
    if (qt_main_state.rank == 0)
        fprintf(stderr, "qtrain: note: %s resumes at step %lld and %s: no step trains%s\n",
                cli->load, (long long)start, given,
                cli->save ? " (save= writes the loaded state)" : "");
    return QT_MAIN_GO;
}

/* The run's inputs and records, all before the first step: the token data (installed as
 * the runtime's token source), the checkpoint, the metrics file and its run manifest.
 * *start and *end receive the steps to train, [start, end). Returns QT_MAIN_GO or the exit
 * code. */
static int qt_main_inputs(const qt_plan *p, const qt_cli *cli, int argc, char **argv,
                          int64_t *start, int64_t *end)
{
    const int rank = qt_main_state.rank;
    int rc;
    qt_runtime_set_tokens(qt_data_tokens, &qt_main_state.data);
    qt_checkpoint_set_data_hash(qt_main_state.data.hash);   /* recorded by every save */
    qt_checkpoint_set_data_holdout(qt_app_eval_holdout_windows());   /* by saves, when > 0 */

    *start = 0;
    int code = cli->load ? qt_main_load(p, cli, start) : QT_MAIN_GO;
    if (code != QT_MAIN_GO) return code;
    *end = cli->steps >= 0 ? cli->steps : p->train.steps;
    if ((code = qt_main_check_end(cli, *start, *end)) != QT_MAIN_GO) return code;
    rc = cli->metrics && rank == 0 ? qt_main_open_metrics(cli, *start) : QT_OK;
    if (rank == 0 && *end > p->train.schedule_steps)
        fprintf(stderr, "qtrain: note: steps=%lld goes past the plan's learning-rate schedule "
                "(%lld steps); later steps run at learning rate 0 (set steps or "
                "learning_rate_schedule_steps in the config)\n", (long long)*end,
                (long long)p->train.schedule_steps);
    if (rank == 0) qt_main_passes_note(p, cli, *start, *end);
    if (rc == QT_OK && qt_main_state.metrics) {
        qt_main_manifest(p, cli, argc, argv, *start, *end);
        if (ferror(qt_main_state.metrics)) {
            fprintf(stderr, "qtrain: writing the metrics file %s failed (its run manifest, before "
                    "step 0)\n",
                    cli->metrics);
            rc = QT_E_IO;
        }
    }
    return qt_main_agree("opening the metrics file", rc) == QT_OK ? QT_MAIN_GO : QT_EXIT_ERR;
}

/* dump_grads=: the gradient of step `start` (no update), written before any training.
 * Returns QT_MAIN_GO or the exit code. */
static int qt_main_dump_grads(const qt_plan *p, const qt_cli *cli, int64_t start)
{
    qt_step_metrics m;
    int rc = qt_main_comm_fail(qt_runtime_grads(p, start, &m));
    if (rc == QT_OK) rc = qt_data_check(&qt_main_state.data);
    if (qt_main_agree("dump_grads= step", rc) != QT_OK)
        return QT_EXIT_ERR;
    if (qt_main_save(p, cli->dump_grads, 1, 0, 0) != QT_OK)
        return QT_EXIT_ERR;
    if (qt_main_state.rank == 0)
        fprintf(stderr, "qtrain: gradients of step %lld written to %s (loss %.9g, grad norm "
                "%.9g)\n", (long long)start, cli->dump_grads, m.loss, m.grad_norm);
    return QT_MAIN_GO;
}

/* After step `step` trained into *m (rc: this rank's data check after it): count it,
 * agree with the other ranks on whether to go on, report it (metrics line, progress) and
 * stop on a non-finite loss or norm (the periodic checkpoint follows the step's eval, in
 * qt_main_train). Returns QT_MAIN_GO, or the exit code after closing the steps' heap audit
 * window. */
static int qt_main_after_step(const qt_cli *cli, const qt_step_metrics *m, int64_t step,
                              int64_t end, int rc)
{
    qt_main_state.steps_run++;
    qt_main_state.step_s += m->step_seconds;
    if (rc != QT_OK) fprintf(stderr, "qtrain: step %lld failed\n", (long long)step);
    if (rc == QT_OK && qt_main_state.rank == 0) {
        if (qt_main_state.metrics) rc = qt_main_metrics(m, cli->metrics);
        if (rc == QT_OK) qt_progress_print(stderr, m, end, qt_main_state.size);
    }
    /* A non-finite loss or norm has already reached the parameters (AdamW ran):
     * stop rather than train on, and write no checkpoint of that state. */
    if (rc == QT_OK && (!(m->loss - m->loss == 0.0) || !(m->grad_norm - m->grad_norm == 0.0))) {
        fprintf(stderr, "qtrain: step %lld: loss %g, gradient norm %g are not finite; "
                "stopping without saving (lower learning_rate, or check the data)\n",
                (long long)step + 1, m->loss, m->grad_norm);
        rc = QT_E_RANGE;
    }
    /* the ranks agree before the next collective (a save or the next step) */
    const qt_main_coll before = qt_main_coll_now();
    rc = qt_main_agree("end of the step", rc);
    qt_main_coll_add(QT_MAIN_COLL_FLAGS, before);
    if (rc != QT_OK) {
        qt_runtime_mark_steps(0);
        return QT_EXIT_ERR;
    }
    return QT_MAIN_GO;
}

/* The training loop: steps start .. end-1, each checked against the data file before and
 * after, reported, evaluated when an eval is due and (save_every=) checkpointed, in that
 * order: a checkpoint at step s + 1 is written after everything step s reports, its eval
 * row included, so a run killed after it and resumed there (truncate_metrics=1) has every
 * row once; then one summary line. Returns QT_MAIN_GO or the exit code; a collective
 * failure on a mesh aborts the job here. */
static int qt_main_train(const qt_plan *p, const qt_cli *cli, int64_t start, int64_t *end)
{
    const int rank = qt_main_state.rank;
    double first_loss = 0.0, last_loss = 0.0;
    qt_step_metrics m;
    /* the data file must still be the one validated at open when a step starts and
     * when it ends (before its results are reported or saved) */
    qt_main_coll before = qt_main_coll_now();
    int rc = qt_main_agree("start of the training", qt_data_check(&qt_main_state.data));
    qt_main_coll_add(QT_MAIN_COLL_FLAGS, before);
    if (rc != QT_OK) {
        fprintf(stderr, "qtrain: step %lld failed\n", (long long)start);
        return QT_EXIT_ERR;
    }
    qt_runtime_mark_steps(1);
    for (int64_t step = start; step < *end; step++) {
        if (rank == 0) qt_main_pass_begins(p, step, *end);
        before = qt_main_coll_now();
        rc = qt_runtime_step(p, step, &m);
        qt_main_coll_add(QT_MAIN_COLL_STEPS, before);
        if (rc != QT_OK) {
            qt_runtime_mark_steps(0);
            fprintf(stderr, "qtrain: step %lld failed\n", (long long)step);
            qt_main_step_fail();
            return QT_EXIT_ERR;
        }
        if (step == start) first_loss = m.loss;
        last_loss = m.loss;
        if (qt_main_after_step(cli, &m, step, *end, qt_data_check(&qt_main_state.data)) !=
            QT_MAIN_GO)
            return QT_EXIT_ERR;
        int stop = 0;
        if (qt_app_eval_due(p, step) &&
            qt_app_eval_run(p, step, *end, qt_main_state.metrics, cli->metrics, &stop) != QT_OK) {
            qt_runtime_mark_steps(0);
            return QT_EXIT_ERR;
        }
        if (stop) *end = step + 1;   /* target_eval_loss reached: the final save is here */
        if (cli->save_every && (step + 1) % cli->save_every == 0 && step + 1 < *end &&
            qt_main_save(p, cli->save, 0, step + 1, cli->save_shard_size) != QT_OK) {
            qt_runtime_mark_steps(0);
            return QT_EXIT_ERR;
        }
    }
    qt_runtime_mark_steps(0);
    if (rank == 0)
        fprintf(stderr, "qtrain: trained steps %lld..%lld: loss %.6f -> %.6f\n",
                (long long)start + 1, (long long)*end, first_loss, last_loss);
    if (rank == 0) qt_app_eval_summary(stderr);
    return QT_MAIN_GO;
}

/* Start-up -> inputs -> (dump_grads) -> train -> save, each phase returning QT_MAIN_GO or
 * the exit code, which qt_main_finish returns after closing files and the job. */
int main(int argc, char **argv)
{
    int rank = 0, size = 1;
    qt_io_fsize_guard();   /* before MPI_Init, which writes shared-memory files */
    qt_checkpoint_signal_guard();   /* Ctrl-C / kill: no lock or half-written save left */
    if (qt_comm_init(&argc, &argv, &rank, &size) != QT_OK) return QT_EXIT_ERR;
    qt_cli cli;
    int code = qt_main_start(&cli, argc, argv, rank, size);
    if (code != QT_MAIN_GO) return qt_main_finish(code);
    const qt_plan *p = qt_main_state.plan;
    int64_t start = 0, end = 0;
    code = qt_main_inputs(p, &cli, argc, argv, &start, &end);
    qt_main_deadline(&cli, 0);   /* every rank is ready: the steps' deadline from here on */
    if (code == QT_MAIN_GO && cli.dump_grads) code = qt_main_dump_grads(p, &cli, start);
    if (code == QT_MAIN_GO && start < end) code = qt_main_train(p, &cli, start, &end);
    if (code != QT_MAIN_GO) return qt_main_finish(code);
    /* the final checkpoint: at `end`, or at `start` when no step ran */
    const int64_t step = start < end ? end : start;
    if (cli.save && qt_main_save(p, cli.save, 0, step, cli.save_shard_size) != QT_OK)
        return qt_main_finish(QT_EXIT_ERR);
    return qt_main_finish(0);
}
