/* st_write.c - streaming safetensors writer (header first, then data through a buffer).
 *
 * Why this shape: a checkpoint of a full-size model does not fit a second copy in memory,
 * and its on-disk layout differs from the arena (per-expert slices, Qwen3.5 row
 * permutations), so the caller declares every tensor, the header is written once with all
 * offsets known, and the rows are then streamed from the arena in declaration order.
 * Invariants: see safetensors.h. The header is padded with spaces to a multiple of 8 so the
 * data region is 8-byte aligned, as other writers do.
 * A writer killed mid-save leaves its "<path>.tmp.<pid>" (st_dir.c qt_st_remove_stale
 * removes it at a later start-up); SIGINT / SIGTERM / SIGHUP do not (qt_st_wsignal, called
 * by ckpt_target.c's handler, unlinks it).
 * qt_io_fsize_guard: a write past RLIMIT_FSIZE (ulimit -f) raises SIGXFSZ, whose default
 * action kills the process without a word (exit status 153). The handler instead writes one
 * preformatted line (async-signal-safe: write(2) of a static buffer, once) and returns, so
 * the write fails with EFBIG and its writer reports it: a save then aborts its temporary and
 * the previous checkpoint stays intact.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"
#include "safetensors.h"

#define QT_ST_WBUF (4 << 20)
#define QT_ST_PATH_MAX 4096

enum { QT_STW_IDLE = 0, QT_STW_META, QT_STW_TENSORS, QT_STW_DATA, QT_STW_FAILED };

static struct {
    volatile int state;   /* read by qt_st_wsignal from a signal handler */
    int fd;
    char path[QT_ST_PATH_MAX];
    char tmp[QT_ST_PATH_MAX + 32];
    char header[QT_ST_MAX_HEADER + 16];
    int64_t hlen;
    int n_meta;
    int64_t n_tensors;
    int64_t data_total;     /* declared bytes */
    int64_t file_pos;       /* next pwrite offset */
    int64_t data_written;
    int64_t buf_len;
    unsigned char buf[QT_ST_WBUF];
    /* the file-size limit's message, written by the SIGXFSZ handler */
    struct {
        char msg[256];
        size_t len;
        volatile sig_atomic_t said;
    } fsz;
} qt_stw;

static int qt_stw_fail(int code)
{
    qt_stw.state = QT_STW_FAILED;
    return code;
}

static int qt_stw_put(const char *s)
{
    size_t n = strlen(s);
    if (qt_stw.hlen + (int64_t)n > QT_ST_MAX_HEADER)
        return qt_stw_fail(qt_fail(QT_E_FORMAT, "%s: header exceeds %d bytes "
                                      "(QT_ST_MAX_HEADER)", qt_stw.path, QT_ST_MAX_HEADER));
    memcpy(qt_stw.header + qt_stw.hlen, s, n);
    qt_stw.hlen += (int64_t)n;
    return QT_OK;
}

/* JSON string with the two characters that must be escaped for our names and values. */
static int qt_stw_put_str(const char *s)
{
    char one[3] = { 0, 0, 0 };
    int rc = qt_stw_put("\"");
    for (; !rc && *s; s++) {
        if ((unsigned char)*s < 0x20)
            return qt_stw_fail(qt_fail(QT_E_ARG, "%s: control character in header string",
                                          qt_stw.path));
        one[0] = *s == '"' || *s == '\\' ? '\\' : *s;
        one[1] = *s == '"' || *s == '\\' ? *s : 0;
        rc = qt_stw_put(one);
    }
    return rc ? rc : qt_stw_put("\"");
}

static int qt_stw_write_all(const void *p, int64_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = pwrite(qt_stw.fd, b, (size_t)n, qt_stw.file_pos);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return qt_stw_fail(qt_fail(QT_E_IO, "%s: write failed at byte %lld: %s",
                                          qt_stw.tmp, (long long)qt_stw.file_pos,
                                          w < 0 ? strerror(errno) : "no progress"));
        b += w;
        n -= w;
        qt_stw.file_pos += w;
    }
    return QT_OK;
}

int qt_st_wopen(const char *path)
{
    if (qt_stw.state != QT_STW_IDLE)
        return qt_fail(QT_E_ARG, "%s: another safetensors write is in progress (%s)", path,
                          qt_stw.path);
    if (strlen(path) >= QT_ST_PATH_MAX)
        return qt_fail(QT_E_ARG, "%s: path too long", path);
    snprintf(qt_stw.path, sizeof qt_stw.path, "%s", path);
    /* A per-process name created exclusively: never truncates someone else's file, and two
     * writers of the same path cannot interleave in one temporary. */
    snprintf(qt_stw.tmp, sizeof qt_stw.tmp, "%s.tmp.%ld", path, (long)getpid());
    /* not idle before the open: a signal delivered as the open returns finds the file
     * (qt_st_wsignal) */
    qt_stw.state = QT_STW_META;
    qt_stw.fd = open(qt_stw.tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (qt_stw.fd < 0) {
        qt_stw.state = QT_STW_IDLE;
        return qt_fail(QT_E_IO, "%s: cannot create: %s", qt_stw.tmp, strerror(errno));
    }
    qt_stw.hlen = 0;
    qt_stw.n_meta = 0;
    qt_stw.n_tensors = 0;
    qt_stw.data_total = 0;
    qt_stw.file_pos = 0;
    qt_stw.data_written = 0;
    qt_stw.buf_len = 0;
    return qt_stw_put("{");
}

int qt_st_wmeta(const char *key, const char *value)
{
    int rc;
    if (qt_stw.state != QT_STW_META)
        return qt_stw_fail(qt_fail(QT_E_ARG, "%s: metadata after tensors", qt_stw.path));
    if ((rc = qt_stw_put(qt_stw.n_meta ? "," : "\"__metadata__\":{")) ||
        (rc = qt_stw_put_str(key)) || (rc = qt_stw_put(":")) || (rc = qt_stw_put_str(value)))
        return rc;
    qt_stw.n_meta++;
    return QT_OK;
}

static int qt_stw_end_meta(void)
{
    if (qt_stw.state == QT_STW_META) {
        qt_stw.state = QT_STW_TENSORS;
        if (qt_stw.n_meta)
            return qt_stw_put("}");
    }
    return QT_OK;
}

int qt_st_wadd(const char *name, int dtype, int ndim, const int64_t *shape)
{
    char num[96];
    int rc;
    if ((rc = qt_stw_end_meta()))
        return rc;
    if (qt_stw.state != QT_STW_TENSORS)
        return qt_stw_fail(qt_fail(QT_E_ARG, "%s: tensor %s declared in the wrong state",
                                      qt_stw.path, name));
    if (!qt_st_dtype_name(dtype) || ndim < 0 || ndim > QT_ST_MAX_DIMS)
        return qt_stw_fail(qt_fail(QT_E_ARG, "%s: tensor %s: bad dtype or rank",
                                      qt_stw.path, name));
    int64_t bytes = qt_st_dtype_size(dtype);
    for (int d = 0; d < ndim; d++) {
        /* the reader's bound: no dimension or byte count beyond 2^58 */
        if (shape[d] < 0 || shape[d] > ((int64_t)1 << 58) || (shape[d] && bytes > ((int64_t)1 << 58) / shape[d]))
            return qt_stw_fail(qt_fail(QT_E_ARG, "%s: tensor %s: bad dimension %lld",
                                          qt_stw.path, name, (long long)shape[d]));
        bytes *= shape[d];
    }
    if ((rc = qt_stw_put(qt_stw.n_meta || qt_stw.n_tensors ? "," : "")) ||
        (rc = qt_stw_put_str(name)) || (rc = qt_stw_put(":{\"dtype\":\"")) ||
        (rc = qt_stw_put(qt_st_dtype_name(dtype))) || (rc = qt_stw_put("\",\"shape\":[")))
        return rc;
    for (int d = 0; d < ndim; d++) {
        snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)shape[d]);
        if ((rc = qt_stw_put(num)))
            return rc;
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%lld,%lld]}", (long long)qt_stw.data_total,
             (long long)(qt_stw.data_total + bytes));
    if ((rc = qt_stw_put(num)))
        return rc;
    qt_stw.data_total += bytes;
    qt_stw.n_tensors++;
    return QT_OK;
}

int qt_st_wbegin(void)
{
    int rc;
    unsigned char len8[8];
    if ((rc = qt_stw_end_meta()))
        return rc;
    if (qt_stw.state != QT_STW_TENSORS)
        return qt_stw_fail(qt_fail(QT_E_ARG, "%s: header finished twice", qt_stw.path));
    if ((rc = qt_stw_put("}")))
        return rc;
    while (qt_stw.hlen % 8)
        if ((rc = qt_stw_put(" ")))
            return rc;
    for (int b = 0; b < 8; b++)
        len8[b] = (unsigned char)((uint64_t)qt_stw.hlen >> (8 * b));
    if ((rc = qt_stw_write_all(len8, 8)) || (rc = qt_stw_write_all(qt_stw.header, qt_stw.hlen)))
        return rc;
    qt_stw.state = QT_STW_DATA;
    return QT_OK;
}

static int qt_stw_flush(void)
{
    int rc = qt_stw_write_all(qt_stw.buf, qt_stw.buf_len);
    qt_stw.buf_len = 0;
    return rc;
}

int qt_st_wwrite(const void *bytes, int64_t n)
{
    const unsigned char *b = bytes;
    int rc;
    if (qt_stw.state != QT_STW_DATA)
        return qt_stw_fail(qt_fail(QT_E_ARG, "%s: data written before the header",
                                      qt_stw.path));
    if (qt_stw.data_written + n > qt_stw.data_total)
        return qt_stw_fail(qt_fail(QT_E_ARG, "%s: more data than the header declares",
                                      qt_stw.path));
    qt_stw.data_written += n;
    while (n > 0) {
        int64_t take = QT_ST_WBUF - qt_stw.buf_len;
        if (take > n)
            take = n;
        memcpy(qt_stw.buf + qt_stw.buf_len, b, (size_t)take);
        qt_stw.buf_len += take;
        b += take;
        n -= take;
        if (qt_stw.buf_len == QT_ST_WBUF && (rc = qt_stw_flush()))
            return rc;
    }
    return QT_OK;
}

/* Directory of the target, so the rename itself is made durable. */
static int qt_stw_sync_dir(void)
{
    char dir[QT_ST_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", qt_stw.path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return qt_fail(QT_E_IO, "%s: cannot open directory to fsync: %s", dir,
                          strerror(errno));
    int rc = fsync(fd);
    close(fd);
    return rc ? qt_fail(QT_E_IO, "%s: fsync of directory failed: %s", dir, strerror(errno))
              : QT_OK;
}

int qt_st_wcommit(void)
{
    int rc;
    if (qt_stw.state != QT_STW_DATA) {
        rc = qt_fail(QT_E_ARG, "%s: commit in the wrong state", qt_stw.path);
        qt_st_wabort();
        return rc;
    }
    if (qt_stw.data_written != qt_stw.data_total) {
        rc = qt_fail(QT_E_ARG, "%s: %lld data bytes written, header declares %lld",
                        qt_stw.path, (long long)qt_stw.data_written,
                        (long long)qt_stw.data_total);
        qt_st_wabort();
        return rc;
    }
    if ((rc = qt_stw_flush())) {
        qt_st_wabort();
        return rc;
    }
    if (fsync(qt_stw.fd) != 0) {
        rc = qt_fail(QT_E_IO, "%s: fsync failed: %s", qt_stw.tmp, strerror(errno));
        qt_st_wabort();
        return rc;
    }
    if (close(qt_stw.fd) != 0) {
        qt_stw.fd = -1;
        rc = qt_fail(QT_E_IO, "%s: close failed: %s", qt_stw.tmp, strerror(errno));
        qt_st_wabort();
        return rc;
    }
    qt_stw.fd = -1;
    if (rename(qt_stw.tmp, qt_stw.path) != 0) {
        rc = qt_fail(QT_E_IO, "%s: rename to %s failed: %s", qt_stw.tmp, qt_stw.path,
                        strerror(errno));
        qt_st_wabort();
        return rc;
    }
    qt_stw.state = QT_STW_IDLE;
    return qt_stw_sync_dir();
}

int qt_st_wsignal(void)
{
    return qt_stw.state != QT_STW_IDLE && unlink(qt_stw.tmp) == 0;
}

void qt_st_wabort(void)
{
    if (qt_stw.state == QT_STW_IDLE)
        return;
    if (qt_stw.fd >= 0)
        close(qt_stw.fd);
    qt_stw.fd = -1;
    unlink(qt_stw.tmp);
    qt_stw.state = QT_STW_IDLE;
}

/* ---- the file-size limit ---- */

static void qt_stw_sigxfsz(int sig)
{
    (void)sig;
    if (qt_stw.fsz.said)
        return;
    qt_stw.fsz.said = 1;
    ssize_t w = write(2, qt_stw.fsz.msg, qt_stw.fsz.len);
    (void)w;
}

void qt_io_fsize_guard(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    int n = snprintf(qt_stw.fsz.msg, sizeof qt_stw.fsz.msg, "qtrain: a write reached the file-size "
                     "limit RLIMIT_FSIZE (ulimit -f) of %llu bytes (%llu KiB); the write fails "
                     "(EFBIG) and this process stops: raise ulimit -f\n",
                     (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_cur / 1024);
    qt_stw.fsz.len = n > 0 && (size_t)n < sizeof qt_stw.fsz.msg ? (size_t)n : 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = qt_stw_sigxfsz;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGXFSZ, &sa, NULL);
}
