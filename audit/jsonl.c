/* jsonl.c - reading qtrain metrics files for the audit: step lines and manifest lines
 * (qt_audit.h), and the ulp distances.
 *
 * The JSON accepted is what qtrain writes: one object per line; strings without unicode
 * escapes beyond \uXXXX of control characters; nested objects (flattened to dotted keys)
 * and arrays (kept as raw text). Lines are read whole, whatever their length (getline).
 * Invariants: a metrics file is a regular file (a directory, FIFO or device is refused,
 * never read as empty or waited on); a step line must carry step, loss_bits and
 * fingerprint, else the file is refused naming the line number; a held-out eval line (it
 * carries eval_loss) is kept apart from the step lines; the first manifest line is kept,
 * later ones counted (a resumed run appends one per restart).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "qt_audit.h"

static void qt_kv_add(qt_audit_kv *kv, const char *k, size_t kn, const char *v, size_t vn)
{
    if (kv->n == kv->cap) {
        kv->cap = kv->cap ? 2 * kv->cap : 64;
        kv->key = realloc(kv->key, (size_t)kv->cap * sizeof *kv->key);
        kv->val = realloc(kv->val, (size_t)kv->cap * sizeof *kv->val);
        if (!kv->key || !kv->val) { perror("qtrain-audit"); exit(QT_AUDIT_ERR); }
    }
    kv->key[kv->n] = strndup(k, kn);
    kv->val[kv->n] = strndup(v, vn);
    kv->n++;
}

/* End of the string starting at the opening quote s (points at the closing quote). */
static const char *qt_str_end(const char *s)
{
    for (s++; *s && *s != '"'; s++)
        if (*s == '\\' && s[1]) s++;
    return s;
}

/* Unescaped copy of the string body [b, e). */
static char *qt_unescape(const char *b, const char *e, size_t *n)
{
    char *o = malloc((size_t)(e - b) + 1);
    size_t k = 0;
    for (const char *c = b; c < e; c++) {
        if (*c == '\\' && c + 1 < e) {
            c++;
            if (*c == 'n') o[k++] = '\n';
            else if (*c == 't') o[k++] = '\t';
            else if (*c == 'u' && c + 4 < e) { o[k++] = (char)strtol((char[]){c[1], c[2], c[3], c[4], 0}, NULL, 16); c += 4; }
            else o[k++] = *c;
        } else {
            o[k++] = *c;
        }
    }
    o[k] = 0;
    *n = k;
    return o;
}

int qt_audit_flatten(const char *line, qt_audit_kv *kv)
{
    char prefix[1024] = "";
    size_t plen[16];
    int depth = 0;
    const char *c = line;
    while (*c == ' ') c++;
    if (*c != '{') return -1;
    c++;
    plen[0] = 0;
    for (;;) {
        while (*c == ' ' || *c == ',' || *c == '\n') c++;
        if (*c == '}') {
            if (depth == 0) return 0;
            prefix[plen[depth--]] = 0;
            c++;
            continue;
        }
        if (*c != '"') return -1;
        const char *ke = qt_str_end(c);
        if (*ke != '"') return -1;
        char key[1024];
        snprintf(key, sizeof key, "%s%.*s", prefix, (int)(ke - c - 1), c + 1);
        c = ke + 1;
        while (*c == ' ') c++;
        if (*c++ != ':') return -1;
        while (*c == ' ') c++;
        if (*c == '{') {
            if (depth == 15) return -1;
            plen[++depth] = strlen(prefix);   /* restored when this object closes */
            snprintf(prefix, sizeof prefix, "%s.", key);
            c++;
            continue;
        }
        const char *vb = c, *ve;
        if (*c == '"') {
            ve = qt_str_end(c);
            if (*ve != '"') return -1;
            size_t n;
            char *u = qt_unescape(vb + 1, ve, &n);
            qt_kv_add(kv, key, strlen(key), u, n);
            free(u);
            c = ve + 1;
            continue;
        }
        if (*c == '[') {
            int d = 0;
            for (; *c; c++) {
                if (*c == '"') c = qt_str_end(c);
                else if (*c == '[') d++;
                else if (*c == ']' && --d == 0) break;
            }
            if (!*c) return -1;
            ve = ++c;
        } else {
            while (*c && *c != ',' && *c != '}') c++;
            ve = c;
        }
        qt_kv_add(kv, key, strlen(key), vb, (size_t)(ve - vb));
    }
}

const char *qt_audit_kv_get(const qt_audit_kv *kv, const char *key)
{
    for (int i = 0; i < kv->n; i++)
        if (!strcmp(kv->key[i], key)) return kv->val[i];
    return NULL;
}

void qt_audit_kv_free(qt_audit_kv *kv)
{
    for (int i = 0; i < kv->n; i++) {
        free(kv->key[i]);
        free(kv->val[i]);
    }
    free(kv->key);
    free(kv->val);
    memset(kv, 0, sizeof *kv);
}

static int qt_hex(const char *v, uint64_t *out)
{
    if (!v || strncmp(v, "0x", 2)) return -1;
    char *e;
    *out = strtoull(v + 2, &e, 16);
    return *e ? -1 : 0;
}

static int qt_num(const char *v, double *out)
{
    if (!v || !strcmp(v, "null")) return -1;
    char *e;
    *out = strtod(v, &e);
    return *e ? -1 : 0;
}

int qt_audit_metrics_read(const char *path, qt_audit_metrics *m)
{
    memset(m, 0, sizeof *m);
    m->path = path;
    /* O_NONBLOCK: a FIFO opens at once and is refused with a directory or a device (a
     * directory read as an empty file gave a verdict, a FIFO's open waited forever) */
    struct stat st = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        fprintf(stderr, "qtrain-audit: cannot open %s: %s\n", path, strerror(errno));
        return QT_AUDIT_ERR;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "qtrain-audit: %s: is not a regular file (%s); expected a metrics "
                "file (JSON lines, metrics= of qtrain)\n", path, S_ISDIR(st.st_mode) ?
                "a directory" : "a FIFO, socket or device");
        close(fd);
        return QT_AUDIT_ERR;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        fprintf(stderr, "qtrain-audit: cannot open %s: %s\n", path, strerror(errno));
        close(fd);
        return QT_AUDIT_ERR;
    }
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (long no = 1; getline(&line, &cap, f) > 0 && !rc; no++) {
        qt_audit_kv kv = {0};
        if (qt_audit_flatten(line, &kv)) {
            fprintf(stderr, "qtrain-audit: %s:%ld: not a JSON object line\n", path, no);
            rc = QT_AUDIT_ERR;
        } else if (qt_audit_kv_get(&kv, "eval_loss")) {
            qt_audit_eval e = {0};
            double step;
            if (qt_num(qt_audit_kv_get(&kv, "step"), &step) ||
                qt_num(qt_audit_kv_get(&kv, "eval_loss"), &e.loss)) {
                fprintf(stderr, "qtrain-audit: %s:%ld: an eval line without step and "
                        "eval_loss\n", path, no);
                rc = QT_AUDIT_ERR;
            } else {
                e.step = (int64_t)step;
                double k;
                e.has_mtp_acc = !qt_num(qt_audit_kv_get(&kv, "eval_mtp_acceptance_rate_percent"),
                                        &e.mtp_acc);
                if (e.has_mtp_acc && !qt_num(qt_audit_kv_get(&kv, "eval_mtp_target_module"), &k))
                    e.mtp_k = (int)k;
                if (m->n_evals == m->eval_cap) {
                    m->eval_cap = m->eval_cap ? 2 * m->eval_cap : 64;
                    m->evals = realloc(m->evals, (size_t)m->eval_cap * sizeof *m->evals);
                    if (!m->evals) { perror("qtrain-audit"); exit(QT_AUDIT_ERR); }
                }
                m->evals[m->n_evals++] = e;
            }
        } else if (qt_audit_kv_get(&kv, "manifest")) {
            if (m->n_manifests++ == 0) m->manifest = kv;
            else qt_audit_kv_free(&kv);
            continue;
        } else {
            qt_audit_step s = {0};
            double step;
            uint64_t lb;
            if (qt_num(qt_audit_kv_get(&kv, "step"), &step) ||
                qt_hex(qt_audit_kv_get(&kv, "loss_bits"), &lb) ||
                qt_hex(qt_audit_kv_get(&kv, "fingerprint"), &s.fingerprint)) {
                fprintf(stderr, "qtrain-audit: %s:%ld: a metrics line without step, loss_bits "
                        "and fingerprint\n", path, no);
                rc = QT_AUDIT_ERR;
            } else {
                s.step = (int64_t)step;
                s.loss_bits = (uint32_t)lb;
                float lf;
                memcpy(&lf, &s.loss_bits, 4);
                s.loss = lf;
                s.has_norm = !qt_num(qt_audit_kv_get(&kv, "grad_norm"), &s.grad_norm);
                if (qt_num(qt_audit_kv_get(&kv, "lr"), &s.lr)) s.lr = 0.0;
                if (qt_num(qt_audit_kv_get(&kv, "tokens_per_s"), &s.tokens_per_s)) s.tokens_per_s = 0.0;
                s.has_mtp = !qt_num(qt_audit_kv_get(&kv, "mtp_loss"), &s.mtp_loss);
                if (m->n_steps == m->cap) {
                    m->cap = m->cap ? 2 * m->cap : 256;
                    m->steps = realloc(m->steps, (size_t)m->cap * sizeof *m->steps);
                    if (!m->steps) { perror("qtrain-audit"); exit(QT_AUDIT_ERR); }
                }
                m->steps[m->n_steps++] = s;
            }
        }
        qt_audit_kv_free(&kv);
    }
    free(line);
    fclose(f);
    if (rc) qt_audit_metrics_free(m);
    return rc;
}

void qt_audit_metrics_free(qt_audit_metrics *m)
{
    free(m->steps);
    free(m->evals);
    qt_audit_kv_free(&m->manifest);
    m->steps = NULL;
    m->evals = NULL;
    m->n_steps = m->n_evals = 0;
}

/* Sign-magnitude bits to a monotone line: negatives mirrored below zero. */
uint64_t qt_audit_ulp32(uint32_t a, uint32_t b)
{
    int64_t x = (a & 0x80000000u) ? -(int64_t)(a & 0x7fffffffu) : (int64_t)a;
    int64_t y = (b & 0x80000000u) ? -(int64_t)(b & 0x7fffffffu) : (int64_t)b;
    return x > y ? (uint64_t)(x - y) : (uint64_t)(y - x);
}

uint64_t qt_audit_ulp64(uint64_t a, uint64_t b)
{
    const uint64_t sign = (uint64_t)1 << 63;
    /* map to unsigned order: negatives reversed below 2^63, positives above */
    uint64_t x = (a & sign) ? sign - (a & ~sign) : sign + a;
    uint64_t y = (b & sign) ? sign - (b & ~sign) : sign + b;
    return x > y ? x - y : y - x;
}
