/* metrics.c - per-step metrics as JSON lines and the human progress line (qt_io.h).
 *
 * Why the formats: %.9g round-trips a float and %.17g a double, so a metrics file can be
 * compared bit for bit; the loss bits and the parameter fingerprint are also printed in
 * hex so comparisons do not depend on decimal formatting. JSON has no NaN/Inf: such
 * values are written as null (the hex loss bits still show what happened).
 * Invariant: one complete line per call, flushed, so a killed run leaves whole lines.
 * qt_metrics_last_step reads only the tail of an existing file (static buffer, no heap), so
 * a resumed run can check that the file it appends to ends at the step before its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"

#define QT_METRICS_TAIL 4096

/* Finite test on the bits: no libm on any firmware path. */
static int qt_finite(double x)
{
    uint64_t b;
    memcpy(&b, &x, 8);
    return ((b >> 52) & 0x7ffu) != 0x7ffu;
}

static void qt_num(FILE *f, const char *key, double v, int digits)
{
    if (qt_finite(v))
        fprintf(f, ",\"%s\":%.*g", key, digits, v);
    else
        fprintf(f, ",\"%s\":null", key);
}

void qt_metrics_write(FILE *f, const qt_step_metrics *m)
{
    uint32_t lb;
    memcpy(&lb, &m->loss_f32, 4);
    fprintf(f, "{\"step\":%lld", (long long)m->step);
    qt_num(f, "loss", m->loss, 9);
    fprintf(f, ",\"loss_bits\":\"0x%08x\"", (unsigned)lb);
    qt_num(f, "grad_norm", m->grad_norm, 17);
    qt_num(f, "lr", m->lr, 17);
    qt_num(f, "tokens_per_s", m->tokens_per_s, 9);
    qt_num(f, "step_s", m->step_seconds, 9);
    fprintf(f, ",\"tokens\":%lld,\"fingerprint\":\"0x%016llx\"}\n", (long long)m->tokens,
            (unsigned long long)m->fingerprint);
    fflush(f);
}

void qt_progress_print(FILE *f, const qt_step_metrics *m, int64_t total_steps, int n_ranks)
{
    char ranks[32] = "";
    if (n_ranks > 1) snprintf(ranks, sizeof ranks, "  (%d ranks)", n_ranks);
    fprintf(f, "step %lld/%lld  loss %.6f  grad_norm %.4g  lr %.3e  %.0f tokens/s%s\n",
            (long long)(m->step + 1), (long long)total_steps, m->loss, m->grad_norm, m->lr,
            qt_finite(m->tokens_per_s) ? m->tokens_per_s : 0.0, ranks);
    fflush(f);
}

int qt_metrics_last_step(const char *path, int64_t *last)
{
    static char tail[QT_METRICS_TAIL + 1];
    *last = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) return QT_OK;
        return qt_fail(QT_E_IO, "metrics file %s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return QT_OK;   /* a device or pipe (e.g. /dev/null) has no earlier lines */
    }
    int64_t n = st.st_size < QT_METRICS_TAIL ? st.st_size : QT_METRICS_TAIL;
    ssize_t got = pread(fd, tail, (size_t)n, st.st_size - n);
    close(fd);
    if (got != (ssize_t)n)
        return qt_fail(QT_E_IO, "metrics file %s: cannot read its last %lld bytes", path,
                          (long long)n);
    tail[n] = 0;
    if (tail[n - 1] != '\n')
        return qt_fail(QT_E_FORMAT, "metrics file %s: the last line is incomplete (no "
                          "newline at byte %lld); expected whole JSON lines written by qtrain",
                          path, (long long)st.st_size);
    int64_t b = n - 1;
    while (b > 0 && tail[b - 1] != '\n') b--;
    if (b == 0 && n < st.st_size)
        return qt_fail(QT_E_FORMAT, "metrics file %s: the last line is longer than %d "
                          "bytes; expected a qtrain metrics line", path, QT_METRICS_TAIL);
    const char *c = tail + b;
    const char *key = "{\"step\":";
    int64_t v = 0;
    int digits = 0;
    if (!strncmp(c, key, strlen(key)))
        for (c += strlen(key); *c >= '0' && *c <= '9' && digits < 18; c++, digits++)
            v = v * 10 + (*c - '0');
    if (!digits || (*c != ',' && *c != '}'))
        return qt_fail(QT_E_FORMAT, "metrics file %s: the last line does not start with "
                          "{\"step\":N; expected a qtrain metrics line", path);
    *last = v;
    return QT_OK;
}
