/* ckpt_target.c - what a save= target needs at start-up beyond the checks of checkpoint.c
 * (contracts in qt_io.h): the owner lock (one job per target), the probe that every rank of
 * a mesh sees the same checkpoint directory, and the file-size limit (RLIMIT_FSIZE).
 *
 * Owner lock: "<path>.lock" beside the target (never inside a checkpoint directory, which a
 * save swaps out), held with flock(LOCK_EX | LOCK_NB) by rank 0 for the whole job and
 * holding "host pid\n" for the messages. The kernel releases a flock when its process ends
 * (exit, kill -9, crash; a zombie holds nothing), so a lock whose owner no longer runs is
 * taken over, the rule of the ".tmp.<pid>" temporaries (st_dir.c), and two jobs that start
 * together cannot both win it. Release unlinks the file while still holding the lock; a
 * taker that locked an unlinked file sees that its path no longer names that inode and
 * retries, so at most one process ever holds the lock of a path.
 * Claim (qt_checkpoint_claim, collective): rank 0 takes the lock, removes the temporaries
 * of dead writers, and on a mesh with a save= directory writes the probe; its status goes
 * to every rank with the probe's bytes, so a refusal on rank 0 stops every rank at once.
 * A pipeline (one file, written by world rank 0: ckpt_pp.h) has no probe; world rank 0
 * takes the lock and its status goes to every rank of every stage.
 * Probe: rank 0 writes "<path>.tmp.<pid>" (a name the stale-temporary rule removes if the
 * job dies in between) with its host, pid and clock, fsyncs it and broadcasts the bytes;
 * every rank reads the file back and compares; the ranks sum their verdicts, so all of them
 * return the same code; rank 0 removes the probe.
 * A "<path>.lock" that exists but holds anything else than a lock's "host pid" line (a
 * file of the user's) is refused unless overwrite=1: a job truncates its lock and removes
 * it at exit.
 * Signals (qt_checkpoint_signal_guard): SIGINT, SIGTERM and SIGHUP (Ctrl-C, kill, a batch
 * system's time limit, a closed terminal) used to end the job at once, leaving its lock and
 * a half-written "<path>.tmp.<pid>" (a checkpoint directory of any size) until a later job
 * on the same target removed them. The handler removes this process's temporaries (the
 * save directory's, st_write.c's file, the probe) and, on rank 0, the lock, says so in one
 * line and re-raises the signal, so the exit status stays the signal's (130, 143). Only
 * system calls on names fixed before the signal: async-signal-safe; a signal the kernel
 * hands to another thread (MPICH's) is sent on to the main thread, which does the writes,
 * so a temporary cannot appear after the handler looked. A disposition that was
 * SIG_IGN at start (nohup, a background job of a non-interactive shell) is kept. On a mesh
 * hydra passes the signal to every rank and kills the others once one rank has died, so a
 * rank > 0 waits half a second before dying, for rank 0 to remove the lock.
 * Invariants: no heap (one static struct), every failure names the key, the path and what
 * was expected; nothing here writes anything but the lock and probe files.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"
#include "ckpt_map.h"
#include "ckpt_dir.h"
#include "ckpt_pp.h"
#include "safetensors.h"
#include "st_index.h"
#include "comm/qt_coll.h"

#define QT_CT_TRIES 8          /* lock attempts when the file is unlinked under us */
#define QT_CT_PROBE 240        /* probe bytes */

static struct {
    int fd;                    /* the lock file, valid only while held */
    int held;
    char path[QT_SX_PATH_MAX + 8];
    char owner[256];
    char host[128];
    char probe[QT_SX_PATH_MAX + 32];
    volatile int probe_live;   /* rank 0 wrote the probe file and has not removed it */
    volatile int follower;     /* a rank > 0 of a mesh job with a save= target */
    char said[2 * QT_SX_PATH_MAX + 300];   /* the signal handler's line */
    size_t said_len;
    char bcast[8 + QT_CT_PROBE];     /* int64 status, then the probe bytes */
    char got[QT_CT_PROBE];
} qt_ct;

static void qt_ct_host(void)
{
    if (gethostname(qt_ct.host, sizeof qt_ct.host - 1) != 0)
        snprintf(qt_ct.host, sizeof qt_ct.host, "?");
    qt_ct.host[sizeof qt_ct.host - 1] = 0;
}

/* The owner recorded in the open lock file fd, as "process P on host H", into qt_ct.owner;
 * "" when the file is empty. */
static void qt_ct_read_owner(int fd)
{
    char buf[200];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    long pid = 0;
    char host[160];
    qt_ct.owner[0] = 0;
    if (n <= 0)
        return;
    buf[n] = 0;
    if (sscanf(buf, "%159s %ld", host, &pid) == 2)
        snprintf(qt_ct.owner, sizeof qt_ct.owner, "process %ld on host %s", pid, host);
    else
        snprintf(qt_ct.owner, sizeof qt_ct.owner, "an unknown owner (the file holds no "
                 "\"host pid\")");
}

/* 1 when the existing lock path holds what a qtrain lock holds: nothing (a lock being
 * taken) or one line "host pid"; 0 for a file of someone else's (or unreadable). */
static int qt_ct_is_lock_file(void)
{
    char buf[200], host[160], nl = 0;
    long pid = 0;
    int fd = open(qt_ct.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    struct stat st;
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, buf, sizeof buf - 1) : -1;
    close(fd);
    if (n < 0)
        return 0;
    buf[n] = 0;
    return n == 0 || (sscanf(buf, "%159s %ld%c", host, &pid, &nl) == 3 && nl == '\n' &&
                      pid > 0 && (ssize_t)strlen(buf) == n && strchr(buf, '\n') == buf + n - 1);
}

int qt_checkpoint_lock(const char *key, const char *path, int overwrite)
{
    struct stat a, b;
    if (snprintf(qt_ct.path, sizeof qt_ct.path, "%s.lock", path) >= (int)sizeof qt_ct.path)
        return qt_fail(QT_E_ARG, "%s=%s: path too long", key, path);
    qt_ct_host();
    if (lstat(qt_ct.path, &a) == 0 && !overwrite && !qt_ct_is_lock_file())
        return qt_fail(QT_E_ARG, "%s=%s: %s exists and is not a qtrain lock file (one line "
                       "\"host pid\"); a job keeps its lock at that path and removes it at "
                       "exit: move the file away, or give overwrite=1 to replace it", key,
                       path, qt_ct.path);
    for (int t = 0; t < QT_CT_TRIES; t++) {
        int fd = open(qt_ct.path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
            return qt_fail(QT_E_ARG, "%s=%s: cannot create its lock file %s: %s", key, path,
                           qt_ct.path, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e == EWOULDBLOCK) {
                qt_ct_read_owner(fd);
                close(fd);
                return qt_fail(QT_E_ARG, "%s=%s is in use by another job: %s holds its lock "
                               "%s; wait for that job to end (its lock goes with it), or "
                               "give another %s= path", key, path,
                               qt_ct.owner[0] ? qt_ct.owner : "a process", qt_ct.path, key);
            }
            close(fd);
            qt_note("%s=%s: cannot lock %s (%s: the file system has no flock?); the target "
                    "is not protected against a second job saving to it", key, path,
                    qt_ct.path, strerror(e));
            return QT_OK;
        }
        /* the path must still name the inode we locked (a releasing owner unlinks it) */
        if (fstat(fd, &a) != 0 || stat(qt_ct.path, &b) != 0 || a.st_dev != b.st_dev ||
            a.st_ino != b.st_ino) {
            close(fd);
            continue;
        }
        qt_ct_read_owner(fd);
        if (qt_ct.owner[0])
            qt_note("%s=%s: took over its lock %s from %s, which no longer runs (a job that "
                    "did not finish)", key, path, qt_ct.path, qt_ct.owner);
        char line[200];
        int n = snprintf(line, sizeof line, "%s %ld\n", qt_ct.host, (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
            int e = errno;
            close(fd);
            return qt_fail(QT_E_ARG, "%s=%s: cannot write its lock file %s: %s", key, path,
                           qt_ct.path, strerror(e));
        }
        qt_ct.fd = fd;
        qt_ct.held = 1;
        return QT_OK;
    }
    return qt_fail(QT_E_ARG, "%s=%s: its lock file %s kept being replaced while locking; is "
                   "another job starting on it?", key, path, qt_ct.path);
}

void qt_checkpoint_unlock(void)
{
    if (!qt_ct.held)
        return;
    unlink(qt_ct.path);
    close(qt_ct.fd);
    qt_ct.held = 0;
}

/* ---- the shared-directory probe ---- */

static int64_t qt_ct_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Rank 0: write the probe file and its bytes into qt_ct.bcast. QT_OK or QT_E_ARG. */
static int qt_ct_probe_write(const char *key, const char *path)
{
    char *bytes = qt_ct.bcast + 8;
    memset(bytes, 0, QT_CT_PROBE);
    snprintf(qt_ct.probe, sizeof qt_ct.probe, "%s.tmp.%ld", path, (long)getpid());
    snprintf(bytes, QT_CT_PROBE, "qtrain probe of %s=%s: host %s pid %ld time %lld\n", key,
             path, qt_ct.host, (long)getpid(), (long long)qt_ct_now_ns());
    const size_t n = strlen(bytes);
    int fd = open(qt_ct.probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return qt_fail(QT_E_ARG, "%s=%s: cannot create the probe file %s: %s", key, path,
                       qt_ct.probe, strerror(errno));
    qt_ct.probe_live = 1;
    int ok = write(fd, bytes, n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    if (!ok) {
        unlink(qt_ct.probe);
        qt_ct.probe_live = 0;
        return qt_fail(QT_E_ARG, "%s=%s: cannot write the probe file %s: %s", key, path,
                       qt_ct.probe, strerror(e));
    }
    return QT_OK;
}

/* Ranks > 0: 1 (with a message) when the probe file is missing or differs. */
static int64_t qt_ct_probe_read(const char *key, const char *path, long pid0)
{
    const char *want = qt_ct.bcast + 8;
    snprintf(qt_ct.probe, sizeof qt_ct.probe, "%s.tmp.%ld", path, pid0);
    int fd = open(qt_ct.probe, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        qt_fail(QT_E_ARG, "%s=%s: this rank (host %s) does not see the probe file %s that "
                "rank 0 wrote (%s): its %s= directory is not rank 0's", key, path, qt_ct.host,
                qt_ct.probe, strerror(errno), key);
        return 1;
    }
    ssize_t n = read(fd, qt_ct.got, sizeof qt_ct.got);
    close(fd);
    if (n != (ssize_t)strlen(want) || memcmp(qt_ct.got, want, (size_t)n)) {
        qt_fail(QT_E_ARG, "%s=%s: this rank (host %s) reads other bytes in the probe file %s "
                "than rank 0 wrote: its %s= directory is not rank 0's", key, path, qt_ct.host,
                qt_ct.probe, key);
        return 1;
    }
    return 0;
}

/* Rank 0's bcast bytes (QT_COLL_ALL, or every stage's ranks: ckpt_pp.h) to every rank. */
static int qt_ct_bcast(const qt_plan *p, void *buf, int64_t bytes)
{
    return qt_ckpp_on(p) ? qt_ckpp_bcast(buf, bytes) : qt_coll_broadcast(QT_COLL_ALL, buf, bytes, 0);
}

int qt_checkpoint_claim(const qt_plan *p, const char *key, const char *path, int overwrite)
{
    const int n = p->n_ranks > 1 ? p->n_ranks : 1;
    const int me = n == 1 ? 0 : qt_ckpp_on(p) ? !qt_ckpp_writer() : qt_comm_group_index(QT_COLL_ALL);
    const int probe = n > 1 && !qt_checkpoint_is_file(path) && !qt_ckpp_on(p);
    int rc;
    int64_t st = QT_OK, pid0 = (int64_t)getpid();
    qt_ct_host();
    qt_ct.follower = me != 0;
    if (me == 0) {
        st = qt_checkpoint_lock(key, path, overwrite);
        if (st == QT_OK)
            qt_st_remove_stale(path);   /* ours now: a dead writer's temporaries go */
        if (st == QT_OK && probe)
            st = qt_ct_probe_write(key, path);
    }
    if (n == 1)
        return (int)st;
    memcpy(qt_ct.bcast, &st, 8);
    if ((rc = qt_ct_bcast(p, qt_ct.bcast, (int64_t)sizeof qt_ct.bcast)) ||
        (rc = qt_ct_bcast(p, &pid0, (int64_t)sizeof pid0)))
        return rc;
    memcpy(&st, qt_ct.bcast, 8);
    if (st != QT_OK) {   /* rank 0 said why; every rank stops with it */
        if (me != 0)
            qt_fail(QT_E_ARG, "%s=%s: refused by rank 0 (see its message)", key, path);
        return QT_E_ARG;
    }
    if (!probe)
        return QT_OK;
    int64_t bad = me == 0 ? 0 : qt_ct_probe_read(key, path, (long)pid0);
    rc = qt_coll_sum_i64(QT_COLL_ALL, &bad, 1);
    if (me == 0) {
        unlink(qt_ct.probe);
        qt_ct.probe_live = 0;
    }
    if (rc)
        return rc;
    if (!bad)
        return QT_OK;
    if (me == 0)
        qt_fail(QT_E_ARG, "%s=%s: %lld of the %d ranks %s not see the directory rank 0 (host "
                "%s) sees (see their messages): a sharded checkpoint directory is written by "
                "every rank, so %s= must be on a file system that every rank shares, at the "
                "same path (or give a path ending in .safetensors: one file, written by rank "
                "0 alone)", key, path, (long long)bad, n, bad == 1 ? "does" : "do", qt_ct.host,
                key);
    return QT_E_ARG;
}

/* ---- SIGINT, SIGTERM, SIGHUP ---- */

/* Appends n bytes of s to the handler's line (cut at its end). */
static void qt_ct_say(const char *s, size_t n)
{
    if (n > sizeof qt_ct.said - 1 - qt_ct.said_len)
        n = sizeof qt_ct.said - 1 - qt_ct.said_len;
    memcpy(qt_ct.said + qt_ct.said_len, s, n);
    qt_ct.said_len += n;
}
#define QT_CT_SAY(lit) qt_ct_say(lit, sizeof lit - 1)

static void qt_ct_on_signal(int sig)
{
    /* MPICH runs a thread of its own, and the kernel may hand the signal to it while the
     * main thread goes on and opens a new temporary: the main thread handles it */
    const pid_t pid = getpid();
    if ((pid_t)syscall(SYS_gettid) != pid) {
        syscall(SYS_tgkill, pid, pid, sig);
        return;
    }
    const char *nm = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
    const int unfinished = qt_ckpt_dir_signal() | qt_st_wsignal();
    if (qt_ct.probe_live)
        unlink(qt_ct.probe);
    QT_CT_SAY("qtrain: stopped by ");
    qt_ct_say(nm, strlen(nm));
    if (unfinished)
        QT_CT_SAY("; removed the unfinished write of this process");
    if (qt_ct.held) {
        unlink(qt_ct.path);
        QT_CT_SAY("; removed the lock ");
        qt_ct_say(qt_ct.path, strlen(qt_ct.path));
        QT_CT_SAY(" (save=");
        qt_ct_say(qt_ct.path, strlen(qt_ct.path) - 5);   /* "<path>.lock" */
        QT_CT_SAY(" keeps the last checkpoint this job completed, or the one it found)");
    }
    QT_CT_SAY("\n");
    ssize_t w = write(2, qt_ct.said, qt_ct.said_len);   /* one write: ranks' lines stay whole */
    (void)w;
    /* mpiexec passes the signal to every rank and kills the rest once one has died: a rank
     * > 0 gives rank 0 half a second to remove the lock first (it was left 1 time in 3) */
    if (qt_ct.follower) {
        const struct timespec half = {0, 500000000};
        nanosleep(&half, NULL);
    }
    signal(sig, SIG_DFL);
    raise(sig);   /* delivered when the handler returns: the exit status is the signal's */
}

void qt_checkpoint_signal_guard(void)
{
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa, old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
            continue;   /* nohup, a background job: stays ignored */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = qt_ct_on_signal;
        sigfillset(&sa.sa_mask);   /* one handler at a time */
        sigaction(sigs[i], &sa, NULL);
    }
}

/* ---- the file-size limit ---- */

/* Tensor data bytes of one region (parameters, or one Adam moment) in a file (a
 * pipeline's: every stage's). */
static int64_t qt_ct_region_bytes(const qt_plan *p)
{
    int64_t total = 0;
    for (int b = 0; b < qt_ckpp_blocks(p); b++) total += qt_ckpp_block_bytes(p, b);
    return total;
}

int qt_checkpoint_check_fsize(const qt_plan *p, const char *key, const char *path,
                              int qtrain_format, int64_t shard_bytes)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return QT_OK;
    int64_t biggest;
    const char *what;
    if (qtrain_format && !qt_checkpoint_is_file(path)) {
        biggest = qt_ckpt_dir_largest(p, shard_bytes);
        what = "its largest shard";
    } else {
        biggest = qt_ct_region_bytes(p) * (qtrain_format ? 3 : 1);
        what = "the file";
    }
    if (biggest < 0 || (uint64_t)biggest <= (uint64_t)rl.rlim_cur)
        return QT_OK;
    return qt_fail(QT_E_ARG, "%s=%s: %s would hold %lld bytes of tensor data, but the "
                   "file-size limit RLIMIT_FSIZE (ulimit -f) is %llu bytes (%llu KiB); raise "
                   "ulimit -f to at least %lld KiB%s", key, path, what, (long long)biggest,
                   (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_cur / 1024,
                   (long long)(biggest / 1024 + 1024),
                   qtrain_format && !qt_checkpoint_is_file(path) ?
                   ", or give a smaller save_shard_size=" : "");
}
