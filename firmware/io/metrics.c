/* metrics.c - per-step metrics as JSON lines and the human progress line (qt_io.h).
 *
 * Why the formats: %.9g round-trips a float and %.17g a double, so a metrics file can be
 * compared bit for bit; the loss bits and the parameter fingerprint are also printed in
 * hex so comparisons do not depend on decimal formatting. JSON has no NaN/Inf: such
 * values are written as null (the hex loss bits still show what happened).
 * Invariant: one complete line per call, flushed, so a killed run leaves whole lines; a
 * write that fails part-way (a full disk) is undone: the rest of the line is dropped from
 * the stream's buffer and a regular file cut back to where the line began
 * (qt_metrics_line_end), so the file ends with a whole line and a resume can append.
 * qt_metrics_last_step reads only the last line of an existing file (scanning back in
 * static chunks, no heap), so a resumed run can check that the file it appends to ends at
 * the step before its own.
 *
 * The run manifest (qt_manifest_write) is the first line every run (fresh or resumed)
 * writes: one JSON object starting {"manifest":"qtrain-1","start_step":S, so readers that
 * look for "step" lines skip it (its keys never include "step" alone), and a file that
 * ends with a manifest (a run that trained no step) ends, for the resume check, at step
 * S-1. A resumed run appends its own manifest before its steps, so the file holds one
 * manifest per (re)start, each followed by the steps that run trained.
 * qt_metrics_truncate (truncate_metrics=1, recovery after a crash) walks the lines forward
 * (line starts found in static chunks, each line's first bytes read with pread) to the
 * first line of step >= start or manifest of start_step >= start, and ftruncates there: the
 * file keeps whole lines only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"
#include "qt_plan.h"
#include "math/qt_math.h"

#define QT_METRICS_TAIL 4096
#define QT_METRICS_HEAD 128
#define QT_MANIFEST_LEAD "{\"manifest\":\"qtrain-1\","

static struct {
    char chunk[QT_METRICS_TAIL];        /* backward scan of qt_metrics_last_step */
    char head[QT_METRICS_HEAD + 1];     /* the start of the last line */
    off_t line_start;                   /* size of the regular file before this line; -1 */
} qt_met;

/* Before a line: where it begins (every earlier line is flushed, so the file's size). */
static void qt_metrics_line_begin(FILE *f)
{
    struct stat st;
    qt_met.line_start = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
}

/* After a line: flushed; when that fails, the unwritten rest is discarded (so no later
 * flush or fclose adds it) and a regular file is cut back to the line's start. */
static void qt_metrics_line_end(FILE *f)
{
    if (fflush(f) == 0 && !ferror(f))
        return;
    __fpurge(f);
    if (qt_met.line_start >= 0 && ftruncate(fileno(f), qt_met.line_start) != 0)
        qt_note("could not cut the metrics file back to its last whole line: %s",
                strerror(errno));
}

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
    qt_metrics_line_begin(f);
    fprintf(f, "{\"step\":%lld", (long long)m->step);
    qt_num(f, "loss", m->loss, 9);
    fprintf(f, ",\"loss_bits\":\"0x%08x\"", (unsigned)lb);
    if (m->mtp) qt_num(f, "mtp_loss", m->mtp_loss, 9); /* the MTP head's CE mean */
    qt_num(f, "grad_norm", m->grad_norm, 17);
    qt_num(f, "lr", m->lr, 17);
    qt_num(f, "tokens_per_s", m->tokens_per_s, 9);
    qt_num(f, "step_s", m->step_seconds, 9);
    fprintf(f, ",\"tokens\":%lld", (long long)m->tokens);
    if (m->packed) /* packed documents: the targets the loss averages */
        fprintf(f, ",\"loss_tokens\":%lld", (long long)m->loss_tokens);
    if (m->has_z) qt_num(f, "z_loss", m->z_loss, 9); /* the z-loss share of loss */
    if (m->moe_assignments > 0) { /* token dropping: the share of assignments dropped */
        fprintf(f, ",\"moe_dropped\":%lld,\"moe_assignments\":%lld",
                (long long)m->moe_dropped, (long long)m->moe_assignments);
        qt_num(f, "moe_dropped_share", (double)m->moe_dropped / (double)m->moe_assignments, 9);
        fputs(",\"moe_dropped_layer\":[", f);
        for (int32_t l = 0; l < m->n_drop_layers; l++)
            fprintf(f, "%s%lld", l ? "," : "", (long long)m->moe_dropped_layer[l]);
        fputc(']', f);
        if (m->mtp) /* the MTP head's MoE layer, apart from the main layers' share */
            fprintf(f, ",\"mtp_moe_dropped\":%lld", (long long)m->mtp_moe_dropped);
    }
    fprintf(f, ",\"fingerprint\":\"0x%016llx\"}\n", (unsigned long long)m->fingerprint);
    qt_metrics_line_end(f);
}

void qt_metrics_write_eval(FILE *f, const qt_eval_metrics *e)
{
    uint32_t lb;
    memcpy(&lb, &e->loss_f32, 4);
    qt_metrics_line_begin(f);
    fprintf(f, "{\"step\":%lld", (long long)e->step);
    qt_num(f, "eval_loss", e->loss, 9);
    qt_num(f, "eval_perplexity", qt_exp(e->loss), 9);
    fprintf(f, ",\"eval_tokens\":%lld,\"eval_loss_bits\":\"0x%08x\"", (long long)e->tokens,
            (unsigned)lb);
    fprintf(f, ",\"eval_batches\":%lld", (long long)e->batches);
    if (e->mtp_accept_k > 0) { /* mtp_eval_target_module: MaxText's acceptance rate */
        qt_num(f, "eval_mtp_acceptance_rate_percent", e->mtp_accept_rate, 17);
        fprintf(f, ",\"eval_mtp_target_module\":%d,\"eval_mtp_accepted\":%lld,"
                "\"eval_mtp_accept_positions\":%lld", (int)e->mtp_accept_k,
                (long long)e->mtp_accepted, (long long)e->mtp_accept_positions);
    }
    qt_num(f, "eval_s", e->seconds, 9);
    fputs("}\n", f);
    qt_metrics_line_end(f);
}

void qt_progress_print_eval(FILE *f, const qt_eval_metrics *e, int64_t total_steps)
{
    char acc[96] = "";
    if (e->mtp_accept_k > 0)
        snprintf(acc, sizeof acc, "  mtp_acceptance_rate %.2f%% (depth %d)", e->mtp_accept_rate,
                 (int)e->mtp_accept_k);
    fprintf(f, "eval after step %lld/%lld  eval_loss %.6f  perplexity %.4g%s  (%lld targets, "
            "%.2f s)\n", (long long)(e->step + 1), (long long)total_steps, e->loss,
            qt_exp(e->loss), acc, (long long)e->tokens, e->seconds);
    fflush(f);
}

void qt_progress_print(FILE *f, const qt_step_metrics *m, int64_t total_steps, int n_ranks)
{
    char ranks[32] = "";
    if (n_ranks > 1) snprintf(ranks, sizeof ranks, "  (%d ranks)", n_ranks);
    char mtp[48] = "";
    if (m->mtp) snprintf(mtp, sizeof mtp, "  mtp_loss %.6f", m->mtp_loss);
    fprintf(f, "step %lld/%lld  loss %.6f%s  grad_norm %.4g  lr %.3e  %.0f tokens/s%s\n",
            (long long)(m->step + 1), (long long)total_steps, m->loss, mtp, m->grad_norm, m->lr,
            qt_finite(m->tokens_per_s) ? m->tokens_per_s : 0.0, ranks);
    fflush(f);
}

/* A JSON string: quotes, backslashes and control characters escaped; NULL as null. n < 0:
 * up to the NUL. */
static void qt_json_str(FILE *f, const char *v, int64_t n)
{
    if (!v) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (int64_t i = 0; n < 0 ? v[i] != 0 : i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void qt_json_hex(FILE *f, const char *key, uint64_t v)
{
    fprintf(f, ",\"%s\":\"0x%016llx\"", key, (unsigned long long)v);
}

void qt_manifest_write(FILE *f, const qt_manifest *m)
{
    const qt_plan *p = m->plan;
    static const char *const axes[QT_MESH_COUNT] = {"data", "fsdp", "tensor", "expert",
                                                    "context"};
    qt_metrics_line_begin(f);
    fprintf(f, QT_MANIFEST_LEAD "\"start_step\":%lld,\"end_step\":%lld,\"run\":",
            (long long)m->start_step, (long long)m->end_step);
    qt_json_str(f, p->run_name, -1);
    qt_json_hex(f, "plan_hash", p->hash);
    fputs(",\"generator_version\":", f);
    qt_json_str(f, p->generator_version, -1);
    fprintf(f, ",\"ranks\":%d,\"mesh\":{", m->n_ranks);
    for (int a = 0; a < QT_MESH_COUNT; a++)
        fprintf(f, "%s\"%s\":%d", a ? "," : "", axes[a], p->mesh[a]);
    fprintf(f, "},\"seed\":%llu,\"args\":[", (unsigned long long)m->seed);
    for (int a = 0; a < m->argc; a++) {
        if (a) fputc(',', f);
        qt_json_str(f, m->argv[a], -1);
    }
    fputs("],\"build\":{\"compiler\":", f);
    qt_json_str(f, m->build_compiler, -1);
    fputs(",\"flags\":", f);
    qt_json_str(f, m->build_flags, -1);
    fputs(",\"isa\":", f);
    qt_json_str(f, m->build_isa, -1);
    fputs(",\"git\":", f);
    qt_json_str(f, m->build_git, -1);
    fputs(",\"kind\":", f);
    qt_json_str(f, m->build_kind, -1);
    fputs("},\"data\":{\"path\":", f);
    qt_json_str(f, m->data_path ? m->data_path : "(embedded corpus)", -1);
    fprintf(f, ",\"bytes\":%lld", (long long)m->data_bytes);
    qt_json_hex(f, "hash", m->data_hash);
    fprintf(f, ",\"tokens\":%lld,\"windows\":%lld,\"passes\":%.6g", (long long)m->data_tokens,
            (long long)m->data_windows, m->data_passes);
    fputs("},\"eval\":", f);
    if (m->eval_kind == 1) {
        fputs("{\"source\":\"eval_data\",\"path\":", f);
        qt_json_str(f, m->eval_path, -1);
        fprintf(f, ",\"bytes\":%lld", (long long)m->eval_bytes);
        qt_json_hex(f, "hash", m->eval_hash);
    } else if (m->eval_kind == 2) {
        fprintf(f, "{\"source\":\"eval_holdout\",\"holdout\":%lld", (long long)m->eval_holdout);
    }
    if (m->eval_kind)
        fprintf(f, ",\"windows\":%lld,\"batches\":%lld}", (long long)m->eval_windows,
                (long long)m->eval_batches);
    else fputs("null", f);
    fputs(",\"checkpoint\":", f);
    if (m->load && m->ckpt && m->ckpt->loaded) {
        fputs("{\"path\":", f);
        qt_json_str(f, m->load, -1);
        qt_json_hex(f, "hash", m->ckpt->content_hash);
        fprintf(f, ",\"files\":%d,\"data_hash\":", m->ckpt->n_files);
        qt_json_str(f, m->ckpt->data_hash[0] ? m->ckpt->data_hash : NULL, -1);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs(",\"note\":", f);
    qt_json_str(f, m->note, -1);
    fputs(",\"config\":{", f);
    /* config_text: "key=value\n" lines (qt_plan.h) */
    int first = 1;
    for (const char *c = p->config_text; c && *c;) {
        const char *eq = strchr(c, '='), *nl = strchr(c, '\n');
        if (!nl) nl = c + strlen(c);
        if (eq && eq < nl) {
            fputs(first ? "" : ",", f);
            qt_json_str(f, c, eq - c);
            fputc(':', f);
            qt_json_str(f, eq + 1, nl - eq - 1);
            first = 0;
        }
        c = *nl ? nl + 1 : nl;
    }
    fputs("}}\n", f);
    qt_metrics_line_end(f);
}

/* Reads the first bytes of the file's last line into qt_met.head (NUL-terminated). The
 * line start is found by scanning backwards in QT_METRICS_TAIL chunks, so a manifest line
 * of any length is fine. */
static int qt_metrics_last_line(int fd, const char *path, int64_t size)
{
    char *buf = qt_met.chunk;
    if (pread(fd, buf, 1, size - 1) != 1)
        return qt_fail(QT_E_IO, "metrics file %s: cannot read its last byte", path);
    if (buf[0] != '\n')
        return qt_fail(QT_E_FORMAT, "metrics file %s: the last line is incomplete (no "
                          "newline at byte %lld); expected whole JSON lines written by qtrain",
                          path, (long long)size);
    int64_t end = size - 1, line = 0;   /* the last line is [line, end) */
    for (int64_t hi = end; hi > 0 && !line;) {
        int64_t lo = hi > QT_METRICS_TAIL ? hi - QT_METRICS_TAIL : 0;
        if (pread(fd, buf, (size_t)(hi - lo), lo) != (ssize_t)(hi - lo))
            return qt_fail(QT_E_IO, "metrics file %s: cannot read bytes %lld..%lld", path,
                           (long long)lo, (long long)hi);
        for (int64_t b = hi - lo; b > 0; b--)
            if (buf[b - 1] == '\n') {
                line = lo + b;
                break;
            }
        hi = lo;
    }
    int64_t n = end - line < QT_METRICS_HEAD ? end - line : QT_METRICS_HEAD;
    if (pread(fd, qt_met.head, (size_t)n, line) != (ssize_t)n)
        return qt_fail(QT_E_IO, "metrics file %s: cannot read its last line", path);
    qt_met.head[n] = 0;
    return QT_OK;
}

/* The decimal after `key` at the start of c; -1 when absent or malformed. */
static int64_t qt_metrics_lead(const char *c, const char *key)
{
    int64_t v = 0;
    int digits = 0;
    if (strncmp(c, key, strlen(key)))
        return -1;
    for (c += strlen(key); *c >= '0' && *c <= '9' && digits < 18; c++, digits++)
        v = v * 10 + (*c - '0');
    return digits && (*c == ',' || *c == '}') ? v : -1;
}

int qt_metrics_last_step(const char *path, int64_t *last)
{
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
    int rc = qt_metrics_last_line(fd, path, st.st_size);
    close(fd);
    if (rc)
        return rc;
    int64_t v = qt_metrics_lead(qt_met.head, "{\"step\":");
    if (v < 0) {
        /* a manifest line last: that run started at start_step and trained no step */
        v = qt_metrics_lead(qt_met.head, QT_MANIFEST_LEAD "\"start_step\":");
        if (v < 0)
            return qt_fail(QT_E_FORMAT, "metrics file %s: the last line does not start with "
                           "{\"step\":N or a qtrain manifest; expected a qtrain metrics line",
                           path);
        v -= 1;
    }
    *last = v;
    return QT_OK;
}

/* The line starting at byte off: counted when at or past the cut (the first line of step
 * >= start or manifest of start_step >= start), which it may set. */
typedef struct qt_metrics_cut {
    int64_t start, cut, lines, first, last;
} qt_metrics_cut;

static int qt_metrics_cut_line(int fd, const char *path, int64_t off, int64_t size,
                               qt_metrics_cut *c)
{
    int64_t n = size - off < QT_METRICS_HEAD ? size - off : QT_METRICS_HEAD;
    if (pread(fd, qt_met.head, (size_t)n, off) != (ssize_t)n)
        return qt_fail(QT_E_IO, "metrics file %s: cannot read byte %lld", path, (long long)off);
    qt_met.head[n] = 0;
    int64_t step = qt_metrics_lead(qt_met.head, "{\"step\":");
    int64_t mst = step < 0 ? qt_metrics_lead(qt_met.head, QT_MANIFEST_LEAD "\"start_step\":")
                           : -1;
    if (c->cut < 0 && (step >= c->start || mst >= c->start))
        c->cut = off;
    if (c->cut >= 0) {
        c->lines++;
        if (step >= 0) {
            if (c->first < 0) c->first = step;
            c->last = step;
        }
    }
    return QT_OK;
}

int qt_metrics_truncate(const char *path, int64_t start, int64_t *lines, int64_t *first,
                        int64_t *last)
{
    struct stat st;
    qt_metrics_cut c = {start, -1, 0, -1, -1};
    *lines = 0;
    *first = *last = -1;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? QT_OK : qt_fail(QT_E_IO, "metrics file %s: cannot open for "
                                                 "truncating: %s", path, strerror(errno));
    int rc = QT_OK;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
        rc = qt_metrics_cut_line(fd, path, 0, st.st_size, &c);
    for (int64_t lo = 0; !rc && S_ISREG(st.st_mode) && lo < st.st_size; lo += QT_METRICS_TAIL) {
        int64_t m = st.st_size - lo < QT_METRICS_TAIL ? st.st_size - lo : QT_METRICS_TAIL;
        if (pread(fd, qt_met.chunk, (size_t)m, lo) != (ssize_t)m) {
            rc = qt_fail(QT_E_IO, "metrics file %s: cannot read bytes %lld..%lld", path,
                         (long long)lo, (long long)(lo + m));
            break;
        }
        for (int64_t b = 0; b < m && !rc; b++)
            if (qt_met.chunk[b] == '\n' && lo + b + 1 < st.st_size)
                rc = qt_metrics_cut_line(fd, path, lo + b + 1, st.st_size, &c);
    }
    if (!rc && c.cut >= 0 && ftruncate(fd, c.cut) != 0)
        rc = qt_fail(QT_E_IO, "metrics file %s: cannot truncate it at byte %lld: %s", path,
                     (long long)c.cut, strerror(errno));
    if (!rc && c.cut >= 0 && fsync(fd) != 0)
        rc = qt_fail(QT_E_IO, "metrics file %s: fsync failed: %s", path, strerror(errno));
    close(fd);
    *lines = c.lines;
    *first = c.first;
    *last = c.last;
    return rc;
}
