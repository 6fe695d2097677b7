/* core/util.c - small host helpers for configgen: error formatting, allocation, text
 * buffers, edit distance (key suggestions), whole-file reads (regular files of at most
 * 16 MiB: a device or a FIFO is refused before it is read), float literals.
 * Invariant: allocation never returns NULL (configgen aborts when the host is out of
 * memory; it has nothing useful to do without it).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/qt_cg.h"

#define QT_CG_MAX_FILE (16 << 20)

int qt_cg_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void *qt_cg_alloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fputs("configgen: out of memory\n", stderr);
        abort();
    }
    return p;
}

void *qt_cg_grow(void *p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return p;
    int nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(p, (size_t)nc * elem);
    if (!q) {
        fputs("configgen: out of memory\n", stderr);
        abort();
    }
    memset((char *)q + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *cap = nc;
    return q;
}

char *qt_cg_strdup(const char *s)
{
    size_t n = strlen(s);
    char *d = qt_cg_alloc(n + 1);
    memcpy(d, s, n + 1);
    return d;
}

void qt_cg_buf_printf(qt_cg_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) return;
    if (b->n + (size_t)need + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + (size_t)need + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) {
            fputs("configgen: out of memory\n", stderr);
            abort();
        }
        b->p = q;
        b->cap = nc;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)need + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)need;
}

void qt_cg_buf_free(qt_cg_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

int qt_cg_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int *row = qt_cg_alloc((lb + 1) * sizeof(int));
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    int d = row[lb];
    free(row);
    return d;
}

int qt_cg_read_file(const char *path, char **text, char *err, size_t errlen)
{
    /* open without blocking (a FIFO with no writer) and look before reading: /dev/zero
     * would never end, a directory is not a read error */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return qt_cg_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return qt_cg_fail(err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode)) {
        close(fd);
        return qt_cg_fail(err, errlen, "%s: is %s; expected a config file", path,
                          S_ISDIR(st.st_mode) ? "a directory" : S_ISCHR(st.st_mode) ?
                          "a character device, not a regular file" : "not a regular file");
    }
    if (st.st_size > QT_CG_MAX_FILE) {
        close(fd);
        return qt_cg_fail(err, errlen, "%s: is %lld bytes, more than the %d MiB a config file "
                          "may have", path, (long long)st.st_size, QT_CG_MAX_FILE >> 20);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return qt_cg_fail(err, errlen, "%s: cannot open: %s", path, strerror(e));
    }
    size_t cap = 4096, n = 0;
    char *p = qt_cg_alloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            char *q = realloc(p, cap);
            if (!q) abort();
            p = q;
        }
        size_t got = fread(p + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0 || n > QT_CG_MAX_FILE) break;   /* a file that grows while read */
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(p);
        return qt_cg_fail(err, errlen, "%s: read error", path);
    }
    if (n > QT_CG_MAX_FILE) {
        free(p);
        return qt_cg_fail(err, errlen, "%s: more than the %d MiB a config file may have", path,
                          QT_CG_MAX_FILE >> 20);
    }
    p[n] = 0;
    if (strlen(p) != n) {
        free(p);
        return qt_cg_fail(err, errlen, "%s: contains a NUL byte", path);
    }
    *text = p;
    return 0;
}

void qt_cg_float_literal(char *out, size_t n, float v)
{
    /* 9 significant digits round-trip every float; the suffix needs a '.' or exponent. */
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.9g", (double)v);
    if (!strpbrk(tmp, ".eEn")) snprintf(out, n, "%s.0f", tmp);
    else snprintf(out, n, "%sf", tmp);
}
