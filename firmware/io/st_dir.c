/* st_dir.c - the directory helpers of the checkpoint writers (safetensors.h): every entry
 * of a directory (qt_st_dir_each), removing a directory of files (qt_st_remove_dir) and the
 * stale temporaries of killed writers (qt_st_remove_stale).
 *
 * A writer killed mid-save (st_write.c, ckpt_dir.c) leaves its "<path>.tmp.<pid>";
 * qt_st_remove_stale deletes such files at the next start-up when process <pid> no longer
 * exists (kill(pid, 0) fails with ESRCH) or is a zombie, and never touches one whose writer
 * may still be running.
 * qt_st_remove_dir_signal is the same removal from a signal handler: system calls only
 * (open, getdents64 into a buffer of its own, unlinkat, rmdir), no stdio, no message.
 * Invariants: no heap: a directory is read with getdents64 into a static buffer (opendir
 * would allocate), one buffer per function, since qt_st_remove_stale's walk calls
 * qt_st_remove_dir, whose walk must not reuse the outer walk's buffers; nothing outside the
 * named directory is removed, and only one level of it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "qt_err.h"
#include "safetensors.h"

#define QT_SD_PATH_MAX 4096

static struct {
    unsigned char each_buf[1 << 15], remove_buf[1 << 15], stale_buf[1 << 15];
    unsigned char signal_buf[1 << 12];   /* qt_st_remove_dir_signal's own */
    char unlink_full[2 * QT_SD_PATH_MAX], stale_full[2 * QT_SD_PATH_MAX];
    char stale_dir[QT_SD_PATH_MAX];
} qt_sd;

struct qt_sd_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Every entry of dir but "." and "..", read with getdents64 into buf (n bytes), until fn
 * returns non-zero. Callers that nest walks pass different buffers. */
static int qt_sd_walk(const char *dir, unsigned char *buf, size_t n,
                      int (*fn)(void *ctx, const char *name, int is_dir), void *ctx)
{
    struct stat st;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
    if (fd < 0)
        return -1;
    for (long got; !rc && (got = syscall(SYS_getdents64, fd, buf, n)) > 0;)
        for (long off = 0; off < got && !rc;) {
            const struct qt_sd_dirent64 *e = (const void *)(buf + off);
            off += e->d_reclen;
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            int is_dir = e->d_type == 4;   /* DT_DIR; DT_UNKNOWN (0): ask the inode */
            if (e->d_type == 0 && fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                is_dir = S_ISDIR(st.st_mode);
            rc = fn(ctx, e->d_name, is_dir);
        }
    close(fd);
    return rc;
}

int qt_st_dir_each(const char *dir, int (*fn)(void *ctx, const char *name, int is_dir),
                   void *ctx)
{
    return qt_sd_walk(dir, qt_sd.each_buf, sizeof qt_sd.each_buf, fn, ctx);
}

/* remove_dir: unlink one entry of the directory in ctx. */
static int qt_sd_unlink_entry(void *ctx, const char *name, int is_dir)
{
    char *const full = qt_sd.unlink_full;
    (void)is_dir;
    snprintf(full, sizeof qt_sd.unlink_full, "%s/%s", (const char *)ctx, name);
    return unlink(full) != 0 && errno != ENOENT ? -2 : 0;
}

int qt_st_remove_dir(const char *path)
{
    int rc = qt_sd_walk(path, qt_sd.remove_buf, sizeof qt_sd.remove_buf, qt_sd_unlink_entry,
                        (void *)path);
    if (rc == -1 && errno == ENOENT)
        return 0;
    if (rmdir(path) != 0 && errno != ENOENT) rc = -1;
    if (rc)
        qt_note("could not remove %s completely: %s", path, strerror(errno));
    return rc ? -1 : 0;
}

int qt_st_remove_dir_signal(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    for (long got; (got = syscall(SYS_getdents64, fd, qt_sd.signal_buf,
                                  sizeof qt_sd.signal_buf)) > 0;)
        for (long off = 0; off < got;) {
            const struct qt_sd_dirent64 *e = (const void *)(qt_sd.signal_buf + off);
            off += e->d_reclen;
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(fd, e->d_name, 0);   /* what stays makes the rmdir fail */
        }
    close(fd);
    return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* The pid in "<base>.tmp.<pid>", or -1 when name is not such a temporary of base. */
static long qt_sd_tmp_pid(const char *name, const char *base, size_t blen)
{
    if (strncmp(name, base, blen) || strncmp(name + blen, ".tmp.", 5)) return -1;
    const char *c = name + blen + 5;
    long pid = 0;
    if (*c < '1' || *c > '9') return -1;
    for (; *c >= '0' && *c <= '9'; c++) {
        pid = pid * 10 + (*c - '0');
        if (pid > 0x7fffffffL) return -1;
    }
    return *c ? -1 : pid;
}

/* 1 if process pid may still run: it exists and is not a zombie. A killed writer whose
 * parent died is reparented to pid 1, which in a container is often not an init that reaps
 * it: kill(pid, 0) then succeeds forever, so the state letter in /proc/<pid>/stat (after the
 * ')' that ends the command name) decides. */
static int qt_sd_alive(long pid)
{
    char path[64], buf[512];
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 1;
    buf[n] = 0;
    const char *close_paren = strrchr(buf, ')');
    return !(close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z');
}

typedef struct qt_sd_stale {
    const char *dir, *base;
    size_t blen;
    int removed;
} qt_sd_stale;

/* remove_stale: one entry of the destination's directory. */
static int qt_sd_stale_entry(void *ctx, const char *name, int is_dir)
{
    char *const full = qt_sd.stale_full;
    qt_sd_stale *st = ctx;
    long pid = qt_sd_tmp_pid(name, st->base, st->blen);
    if (pid <= 0 || pid == (long)getpid() || qt_sd_alive(pid)) return 0;   /* may still write */
    snprintf(full, sizeof qt_sd.stale_full, "%s/%s", st->dir, name);
    /* a sharded save's temporary is a directory (ckpt_dir.c) */
    if ((is_dir ? qt_st_remove_dir(full) : unlink(full)) == 0) {
        st->removed++;
        qt_note("removed %s, a temporary left by process %ld, which no longer runs (a save "
                "that did not finish)", full, pid);
    } else if (errno != ENOENT) {
        qt_note("could not remove the stale temporary %s: %s", full, strerror(errno));
    }
    return 0;
}

int qt_st_remove_stale(const char *path)
{
    char *const dir = qt_sd.stale_dir;
    if (strlen(path) >= QT_SD_PATH_MAX) return 0;
    snprintf(dir, sizeof qt_sd.stale_dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? path + (slash - dir) + 1 : path;
    if (!slash) snprintf(dir, sizeof qt_sd.stale_dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    qt_sd_stale st = {dir, base, strlen(base), 0};
    /* a missing directory: the destination check reports it */
    qt_sd_walk(dir, qt_sd.stale_buf, sizeof qt_sd.stale_buf, qt_sd_stale_entry, &st);
    return st.removed;
}

