/* tokfile.c - QTTOKENS writer and reader (tokfile.h). Invariants: the header is written
 * little-endian byte by byte (any host); the target path is only ever created by rename()
 * of a complete file (SIGINT, SIGTERM and SIGHUP remove the temporary file first; SIGXFSZ,
 * the `ulimit -f` limit, is ignored while it is written, so the write fails with EFBIG and
 * the error path removes it, where the signal used to end the process and leave it), and
 * without overwrite that rename never replaces an existing file; every write error is
 * reported with the file's name. */
#include "tokfile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/err.h"
#include "../base/mapfile.h"

static void le(uint8_t *p, uint64_t v, int n)
{
    for (int k = 0; k < n; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static int write_all(int fd, const void *p, size_t n, const char *name)
{
    const uint8_t *b = (const uint8_t *)p;
    while (n) {
        ssize_t r = write(fd, b, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EFBIG) {
            struct rlimit rl;
            if (!getrlimit(RLIMIT_FSIZE, &rl) && rl.rlim_cur != RLIM_INFINITY)
                return qtd_fail("%s: write failed: the file-size limit RLIMIT_FSIZE (ulimit -f) is "
                                "%llu bytes; raise it, nothing was written", name,
                                (unsigned long long)rl.rlim_cur);
        }
        if (r <= 0)
            return qtd_fail("%s: write failed: %s", name, strerror(errno));
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* the temporary file of the writer in progress, removed if SIGINT/SIGTERM/SIGHUP ends the run */
static char g_tmp[4200];

static void on_signal(int sig)
{
    if (g_tmp[0])
        unlink(g_tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void guard(const char *tmp)
{
    snprintf(g_tmp, sizeof g_tmp, "%s", tmp ? tmp : "");
    if (tmp) {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        signal(SIGHUP, on_signal);
        signal(SIGXFSZ, SIG_IGN);
    }
}

#define QTD_HEADER 32           /* version 2 */
#define QTD_NO_EOS 0xFFFFFFFFu  /* version 2's "no separator" */

static void header(uint8_t *h, uint64_t count, int64_t eos)
{
    memcpy(h, "QTTOKENS", 8);
    le(h + 8, 2, 4);
    le(h + 12, 4, 4);
    le(h + 16, count, 8);
    le(h + 24, eos < 0 ? QTD_NO_EOS : (uint64_t)eos, 4);
    le(h + 28, 0, 4);
}

int qtd_tokw_open(qtd_tokwriter *w, const char *path, int overwrite)
{
    memset(w, 0, sizeof *w - sizeof w->buf);
    w->fd = -1;
    w->overwrite = overwrite;
    if (strlen(path) >= sizeof w->path)
        return qtd_fail("%s: path too long", path);
    snprintf(w->path, sizeof w->path, "%s", path);
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path + 1) : 0;
    snprintf(w->tmp, sizeof w->tmp, "%.*s.%s.tmp.XXXXXX", dl, path, slash ? slash + 1 : path);
    w->fd = mkstemp(w->tmp);
    if (w->fd < 0) {
        w->tmp[0] = 0;
        return qtd_fail("out=%s: cannot create a temporary file in its directory (%s); give another path", path,
                        strerror(errno));
    }
    guard(w->tmp);
    uint8_t h[QTD_HEADER];
    header(h, 0, -1);
    return write_all(w->fd, h, QTD_HEADER, w->path);
}

static int flush(qtd_tokwriter *w)
{
    uint8_t tmp[sizeof w->buf];
    for (size_t i = 0; i < w->nbuf; i++)
        le(tmp + 4 * i, w->buf[i], 4);
    int rc = write_all(w->fd, tmp, w->nbuf * 4, w->path);
    w->nbuf = 0;
    return rc;
}

int qtd_tokw_put(qtd_tokwriter *w, const uint32_t *ids, size_t n)
{
    const size_t cap = sizeof w->buf / sizeof w->buf[0];
    for (size_t i = 0; i < n; i++) {
        if (w->nbuf == cap && flush(w))
            return -1;
        w->buf[w->nbuf++] = ids[i];
    }
    w->count += n;
    return 0;
}

/* Renames the temporary file to the target; without overwrite, atomically refuses a target
 * that appeared since the caller's check (RENAME_NOREPLACE; where the file system lacks it,
 * a check just before the rename). */
static int place(qtd_tokwriter *w)
{
    int r = -1;
    if (!w->overwrite) {
        r = renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->path, RENAME_NOREPLACE);
        struct stat st;
        if ((r && errno == EEXIST) || (r && (errno == EINVAL || errno == ENOSYS) && !lstat(w->path, &st)))
            return qtd_fail("out=%s appeared during the encode (created by another program); not replaced: give "
                            "overwrite=1 to replace it, or another path", w->path);
        if (r && errno != EINVAL && errno != ENOSYS)
            return qtd_fail("%s: cannot rename %s to it: %s", w->path, w->tmp, strerror(errno));
    }
    if (r && rename(w->tmp, w->path))
        return qtd_fail("%s: cannot rename %s to it: %s", w->path, w->tmp, strerror(errno));
    return 0;
}

int qtd_tokw_commit(qtd_tokwriter *w, int64_t eos)
{
    uint8_t h[QTD_HEADER];
    header(h, w->count, eos);
    if (flush(w))
        return -1;
    if (pwrite(w->fd, h, QTD_HEADER, 0) != QTD_HEADER)
        return qtd_fail("%s: write failed: %s", w->tmp, strerror(errno));
    if (fchmod(w->fd, 0644) || close(w->fd)) {
        w->fd = -1;
        return qtd_fail("%s: close failed: %s", w->tmp, strerror(errno));
    }
    w->fd = -1;
    if (place(w))
        return -1;
    w->tmp[0] = 0;
    guard(NULL);
    return 0;
}

void qtd_tokw_abort(qtd_tokwriter *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    if (w->tmp[0])
        unlink(w->tmp);
    w->tmp[0] = 0;
    guard(NULL);
}

static uint32_t u32(const uint8_t *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int qtd_tokf_open(qtd_tokfile *f, const char *path)
{
    memset(f, 0, sizeof *f);
    if (qtd_map_file(path, "token file", &f->map, &f->size))
        return -1;
    const uint8_t *m = f->map;
    if (f->size < 24 || memcmp(m, "QTTOKENS", 8))
        return qtd_fail("%s: not a QTTOKENS token file (expected the 8-byte magic QTTOKENS and a 24-byte header; "
                        "the file has %zu bytes)", path, f->size);
    uint32_t ver = u32(m + 8);
    f->width = u32(m + 12);
    for (int k = 7; k >= 0; k--)
        f->count = f->count << 8 | m[16 + k];
    if ((ver != 1 && ver != 2) || (f->width != 2 && f->width != 4))
        return qtd_fail("%s: QTTOKENS header has version %u and %u bytes per token (expected version 1 or 2, 2 or 4 "
                        "bytes)", path, ver, f->width);
    f->version = ver;
    f->header = ver == 2 ? QTD_HEADER : 24;
    f->eos = -2;
    if (ver == 2) {
        if (f->size < QTD_HEADER)
            return qtd_fail("%s: truncated QTTOKENS header: the version 2 header needs %d bytes, the file has %zu",
                            path, QTD_HEADER, f->size);
        if (u32(m + 28))
            return qtd_fail("%s: QTTOKENS header: reserved bytes 28..31 hold %u (expected 0)", path, u32(m + 28));
        f->eos = u32(m + 24) == QTD_NO_EOS ? -1 : (int64_t)u32(m + 24);
    }
    if (f->count > (f->size - f->header) / f->width || (f->size - f->header) != f->count * f->width)
        return qtd_fail("%s: truncated or padded token file: the header says %llu tokens (%llu bytes), the file has "
                        "%zu bytes", path, (unsigned long long)f->count,
                        (unsigned long long)(f->header + f->count * f->width), f->size);
    return 0;
}

uint32_t qtd_tokf_get(const qtd_tokfile *f, uint64_t k)
{
    const uint8_t *p = f->map + f->header + k * f->width;
    return f->width == 2 ? (uint32_t)(p[0] | p[1] << 8)
                         : p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void qtd_tokf_close(qtd_tokfile *f)
{
    if (f->map)
        munmap(f->map, f->size);
    f->map = NULL;
}
