/* driver/diff.c - `configgen --diff A B`: what differs between two plans.
 *
 * A and B are each a run config (.yml/.yaml: the plan is built in memory with
 * qt_cg_plan_build and its report rendered with qt_cg_emit_report, nothing is written), a
 * generated plan directory (its plan.txt) or a plan.txt file. Both are compared as plan.txt
 * text, section by section ("== title ==", keyed by the title up to " ("):
 *   tensors      matched by name (the last field); role, dtype, local and global shape,
 *                logical axes, spec and offset are compared (lifetimes follow the ops);
 *   *schedule    ops aligned by a shortest edit script over the lines without their index,
 *                so an inserted op (a reshard) shows as one op, not as a shifted tail;
 *   every other  (config, mesh, data assignment, per-rank bytes, collectives, memory map)
 *                lines aligned the same way.
 * The lines before the first section (run name, source files, plan hash) are ignored, so
 * two plans that differ only in their names and hash compare equal.
 * Invariants: A and B are only read; the result is deterministic; *differs is 1 exactly
 * when some compared line differs; errors (unreadable input, failed generation) return -1
 * with a message naming the input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/qt_cg.h"
#include "emit/qt_cg_emit.h"
#include "driver/qt_cg_driver.h"

#define QT_CG_DIFF_SHOW 40        /* lines shown per section before "... N more" */
#define QT_CG_DIFF_MAX_D 4000     /* edit-script length beyond which ops pair by index */

typedef struct qt_cg_dsec {
    char *title;                  /* full title line text between "== " and " ==" */
    char key[96];                 /* title up to " (" */
    char **line;                  /* non-empty lines, leading blanks removed */
    int n, cap;
} qt_cg_dsec;

typedef struct qt_cg_dplan {
    char *text;                   /* owned; lines point into it */
    char name[128];               /* plan name from the header */
    qt_cg_dsec *sec;
    int n, cap;
} qt_cg_dplan;

static void dplan_free(qt_cg_dplan *p)
{
    for (int i = 0; i < p->n; i++) free(p->sec[i].line);
    free(p->sec);
    free(p->text);
    memset(p, 0, sizeof *p);
}

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* Reads or renders the plan.txt text of `path` into p->text. */
static int load_text(const char *path, qt_cg_dplan *p, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st))
        return qt_cg_fail(err, errlen, "%s: no such file or directory (expected a run .yml, a "
                          "generated plan directory or a plan.txt)", path);
    if (S_ISDIR(st.st_mode)) {
        char f[4200];
        snprintf(f, sizeof f, "%s/plan.txt", path);
        if (stat(f, &st) || !S_ISREG(st.st_mode))
            return qt_cg_fail(err, errlen, "%s: a directory without plan.txt (expected a "
                              "generated plan directory)", path);
        return qt_cg_read_file(f, &p->text, err, errlen);
    }
    if (!has_suffix(path, ".yml") && !has_suffix(path, ".yaml"))
        return qt_cg_read_file(path, &p->text, err, errlen);
    qt_cg_config c;
    qt_cg_settings s;
    qt_cg_graph g;
    char e[2048];
    int rc = qt_cg_plan_build(NULL, path, 0, NULL, &c, &s, &g, e, sizeof e);
    if (rc) {
        qt_cg_plan_free(&c, &s, &g);
        if (!strncmp(e, path, strlen(path))) return qt_cg_fail(err, errlen, "%s", e);
        return qt_cg_fail(err, errlen, "%s: %s", path, e);
    }
    qt_cg_buf b = {0};
    qt_cg_emit_report(&g, &c, &b);
    qt_cg_plan_free(&c, &s, &g);
    p->text = b.p ? b.p : qt_cg_strdup("");
    return 0;
}

/* Splits p->text into sections; lines before the first section only give the name. */
static int parse(const char *path, qt_cg_dplan *p, char *err, size_t errlen)
{
    char *s = p->text;
    qt_cg_dsec *cur = NULL;
    while (*s) {
        char *e = strchr(s, '\n');
        if (e) *e = 0;
        char *l = s;
        s = e ? e + 1 : s + strlen(s);
        size_t n = strlen(l);
        if (n && l[n - 1] == '\r') l[--n] = 0;
        if (!cur && !strncmp(l, "qtrain plan '", 13)) {
            const char *q = strchr(l + 13, '\'');
            size_t k = q ? (size_t)(q - (l + 13)) : 0;
            if (k >= sizeof p->name) k = sizeof p->name - 1;
            memcpy(p->name, l + 13, k);
            p->name[k] = 0;
        }
        if (n >= 6 && !strncmp(l, "== ", 3) && !strcmp(l + n - 3, " ==")) {
            l[n - 3] = 0;
            p->sec = qt_cg_grow(p->sec, &p->cap, p->n + 1, sizeof *p->sec);
            cur = &p->sec[p->n++];
            cur->title = l + 3;
            const char *par = strstr(cur->title, " (");
            size_t k = par ? (size_t)(par - cur->title) : strlen(cur->title);
            if (k >= sizeof cur->key) k = sizeof cur->key - 1;
            memcpy(cur->key, cur->title, k);
            cur->key[k] = 0;
            continue;
        }
        while (*l == ' ') l++;
        if (!cur || !*l) continue;
        cur->line = qt_cg_grow(cur->line, &cur->cap, cur->n + 1, sizeof *cur->line);
        cur->line[cur->n++] = l;
    }
    if (!p->n)
        return qt_cg_fail(err, errlen, "%s: not a plan report (no \"== section ==\" lines)", path);
    return 0;
}

static const qt_cg_dsec *find_sec(const qt_cg_dplan *p, const char *key)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->sec[i].key, key)) return &p->sec[i];
    return NULL;
}

/* ---- shortest edit script (Myers) ------------------------------------------------------ */

enum { QT_CG_EQ = 0, QT_CG_DEL, QT_CG_INS };
typedef struct qt_cg_edit {
    int kind, a, b;               /* a: index in A (EQ, DEL), b: index in B (EQ, INS) */
} qt_cg_edit;

/* Edit script turning a[0..n) into b[0..m) (lines compared with strcmp); -1 when it needs
 * more than max_d insertions plus deletions. */
static int ses(char *const *a, int n, char *const *b, int m, int max_d, qt_cg_edit **out,
               int *nout)
{
    const int max = n + m, off = max + 1;
    int *v = qt_cg_alloc((size_t)(2 * max + 3) * sizeof *v);
    int *trace = NULL, tcap = 0, D = -1;
    for (int d = 0; d <= max && d <= max_d && D < 0; d++) {
        for (int k = -d; k <= d; k += 2) {
            int x = (k == -d || (k != d && v[off + k - 1] < v[off + k + 1])) ? v[off + k + 1]
                                                                              : v[off + k - 1] + 1;
            int y = x - k;
            while (x < n && y < m && !strcmp(a[x], b[y])) x++, y++;
            v[off + k] = x;
            if (x >= n && y >= m) D = d;
        }
        trace = qt_cg_grow(trace, &tcap, (d + 1) * (d + 1), sizeof *trace);
        memcpy(trace + d * d, v + off - d, (size_t)(2 * d + 1) * sizeof *trace);
    }
    free(v);
    if (D < 0) {
        free(trace);
        return -1;
    }
    qt_cg_edit *e = qt_cg_alloc((size_t)(n + m + 1) * sizeof *e);
    int ne = 0, x = n, y = m;
    for (int d = D; d > 0; d--) {
        const int *pv = trace + (d - 1) * (d - 1) + (d - 1); /* pv[k], k in [-(d-1), d-1] */
        int k = x - y;
        int pk = (k == -d || (k != d && pv[k - 1] < pv[k + 1])) ? k + 1 : k - 1;
        int px = pv[pk], py = px - pk;
        while (x > px && y > py) e[ne++] = (qt_cg_edit){QT_CG_EQ, --x, --y};
        if (x == px) e[ne++] = (qt_cg_edit){QT_CG_INS, -1, --y};
        else e[ne++] = (qt_cg_edit){QT_CG_DEL, --x, -1};
        x = px, y = py;
    }
    while (x > 0 && y > 0) e[ne++] = (qt_cg_edit){QT_CG_EQ, --x, --y};
    free(trace);
    for (int i = 0; i < ne / 2; i++) {
        qt_cg_edit t = e[i];
        e[i] = e[ne - 1 - i];
        e[ne - 1 - i] = t;
    }
    *out = e;
    *nout = ne;
    return 0;
}

/* ---- section comparisons --------------------------------------------------------------- */

typedef struct qt_cg_dout {
    qt_cg_buf *b;
    int shown, more;              /* per section */
} qt_cg_dout;

/* Whether the next difference of the section is shown (the first QT_CG_DIFF_SHOW are). */
static int room(qt_cg_dout *o)
{
    if (o->shown >= QT_CG_DIFF_SHOW) {
        o->more++;
        return 0;
    }
    o->shown++;
    return 1;
}

static void end_section(qt_cg_dout *o)
{
    if (o->more) qt_cg_buf_printf(o->b, "  ... and %d more\n", o->more);
    o->shown = o->more = 0;
}

/* The text of an op line after its index (so an inserted op does not shift the rest). */
static char *op_key(char *l)
{
    char *p = l;
    while (*p >= '0' && *p <= '9') p++;
    if (p == l || *p != ' ') return l;
    while (*p == ' ') p++;
    return p;
}

static int n_ops(const qt_cg_dsec *s)
{
    int n = 0;
    for (int i = 0; i < s->n; i++) n += op_key(s->line[i]) != s->line[i];
    return n;
}

/* Lines aligned by an edit script (index-free keys for schedules); counts the lines only in
 * A and only in B. Pairs by position when the script would be too long. */
static int lines_diff(const qt_cg_dsec *sa, const qt_cg_dsec *sb, int ops, qt_cg_dout *o,
                      int *only_a, int *only_b)
{
    const int n = sa ? sa->n : 0, m = sb ? sb->n : 0;
    char **ka = qt_cg_alloc((size_t)(n + 1) * sizeof *ka);
    char **kb = qt_cg_alloc((size_t)(m + 1) * sizeof *kb);
    for (int i = 0; i < n; i++) ka[i] = ops ? op_key(sa->line[i]) : sa->line[i];
    for (int i = 0; i < m; i++) kb[i] = ops ? op_key(sb->line[i]) : sb->line[i];
    qt_cg_edit *e = NULL;
    int ne = 0;
    *only_a = *only_b = 0;
    if (ses(ka, n, kb, m, QT_CG_DIFF_MAX_D, &e, &ne)) {
        qt_cg_buf_printf(o->b, "  (too many differences to align: compared by position)\n");
        for (int i = 0; i < (n > m ? n : m); i++) {
            if (i < n && i < m && !strcmp(ka[i], kb[i])) continue;
            if (i < n && ++*only_a && room(o)) qt_cg_buf_printf(o->b, "  - %s\n", sa->line[i]);
            if (i < m && ++*only_b && room(o)) qt_cg_buf_printf(o->b, "  + %s\n", sb->line[i]);
        }
    } else {
        for (int i = 0; i < ne; i++) {
            if (e[i].kind == QT_CG_DEL && ++*only_a && room(o))
                qt_cg_buf_printf(o->b, "  - %s\n", sa->line[e[i].a]);
            if (e[i].kind == QT_CG_INS && ++*only_b && room(o))
                qt_cg_buf_printf(o->b, "  + %s\n", sb->line[e[i].b]);
        }
    }
    free(e);
    free(ka);
    free(kb);
    return *only_a || *only_b;
}

/* Fields of a tensor line "id role dtype local global axes spec SPEC @offset ... name". */
typedef struct qt_cg_tline {
    char buf[1024];
    const char *f[8];             /* role dtype local global axes spec offset name */
} qt_cg_tline;

static const char *const tfield[8] = {"role", "dtype", "local shape", "global shape",
                                      "logical axes", "spec", "offset", "name"};

static int tline_parse(const char *l, qt_cg_tline *t)
{
    snprintf(t->buf, sizeof t->buf, "%s", l);
    char *tok[64];
    int n = 0;
    for (char *s = t->buf; *s && n < 64;) {
        while (*s == ' ') *s++ = 0;
        if (!*s) break;
        tok[n++] = s;
        while (*s && *s != ' ') s++;
    }
    int sp = -1, at = -1;
    for (int i = 1; i < n; i++) {
        if (sp < 0 && !strcmp(tok[i], "spec")) sp = i;
        if (at < 0 && tok[i][0] == '@') at = i;
    }
    if (n < 6 || sp < 5 || sp + 1 >= n || at < 0 || tok[0][0] < '0' || tok[0][0] > '9')
        return -1;
    t->f[0] = tok[1];
    t->f[1] = tok[2];
    t->f[2] = tok[3];
    t->f[3] = sp >= 6 ? tok[4] : "=";
    t->f[4] = tok[sp - 1];
    t->f[5] = tok[sp + 1];
    t->f[6] = tok[at];
    t->f[7] = tok[n - 1];
    return 0;
}

/* Tensor lines of one side, for matching by name. */
typedef struct qt_cg_tside {
    qt_cg_tline *t;
    int *ok;                      /* line is a tensor line */
    int *order;                   /* tensor lines sorted by (name, line index) */
    int n, nt;
} qt_cg_tside;

static const qt_cg_tside *qt_cg_sort_side;
static int cmp_tname(const void *x, const void *y)
{
    const int i = *(const int *)x, j = *(const int *)y;
    int c = strcmp(qt_cg_sort_side->t[i].f[7], qt_cg_sort_side->t[j].f[7]);
    return c ? c : (i > j) - (i < j);
}

static void tside_init(qt_cg_tside *s, const qt_cg_dsec *sec)
{
    s->n = sec ? sec->n : 0;
    s->t = qt_cg_alloc((size_t)(s->n + 1) * sizeof *s->t);
    s->ok = qt_cg_alloc((size_t)(s->n + 1) * sizeof *s->ok);
    s->order = qt_cg_alloc((size_t)(s->n + 1) * sizeof *s->order);
    s->nt = 0;
    for (int i = 0; i < s->n; i++)
        if ((s->ok[i] = !tline_parse(sec->line[i], &s->t[i]))) s->order[s->nt++] = i;
    qt_cg_sort_side = s;
    qsort(s->order, (size_t)s->nt, sizeof *s->order, cmp_tname);
    qt_cg_sort_side = NULL;
}

static void tside_free(qt_cg_tside *s)
{
    free(s->t);
    free(s->ok);
    free(s->order);
}

/* Tensors matched by name (the k-th tensor of a name in A with the k-th of it in B); the
 * lines that are not tensors (notes) are compared in order. */
static int tensors_diff(const qt_cg_dsec *sa, const qt_cg_dsec *sb, qt_cg_dout *o, int *nd,
                        char *what, size_t whatlen)
{
    qt_cg_tside A, B;
    tside_init(&A, sa);
    tside_init(&B, sb);
    int *match = qt_cg_alloc((size_t)(A.n + 1) * sizeof *match);
    int *used = qt_cg_alloc((size_t)(B.n + 1) * sizeof *used);
    for (int i = 0; i < A.n; i++) match[i] = -1;
    for (int x = 0, y = 0; x < A.nt && y < B.nt;) {
        const int i = A.order[x], j = B.order[y];
        const int c = strcmp(A.t[i].f[7], B.t[j].f[7]);
        if (c < 0) x++;
        else if (c > 0) y++;
        else match[i] = j, used[j] = 1, x++, y++;
    }
    int changed = 0, only_a = 0, only_b = 0, notes = 0;
    for (int i = 0; i < A.n; i++) {
        if (!A.ok[i]) continue;
        const int j = match[i];
        if (j < 0) {
            if (room(o)) qt_cg_buf_printf(o->b, "  - only in A: %s\n", sa->line[i]);
            only_a++;
            continue;
        }
        char fields[1400];
        size_t k = 0;
        fields[0] = 0;
        for (int f = 0; f < 7 && k < sizeof fields; f++)
            if (strcmp(A.t[i].f[f], B.t[j].f[f]))
                k += (size_t)snprintf(fields + k, sizeof fields - k, "%s%s %s -> %s",
                                      k ? "; " : "", tfield[f], A.t[i].f[f], B.t[j].f[f]);
        if (k) {
            if (room(o)) qt_cg_buf_printf(o->b, "  %s: %s\n", A.t[i].f[7], fields);
            changed++;
        }
    }
    for (int j = 0; j < B.n; j++)
        if (B.ok[j] && !used[j]) {
            if (room(o)) qt_cg_buf_printf(o->b, "  + only in B: %s\n", sb->line[j]);
            only_b++;
        }
    for (int i = 0, j = 0;;) {
        while (i < A.n && A.ok[i]) i++;
        while (j < B.n && B.ok[j]) j++;
        if (i >= A.n && j >= B.n) break;
        if (i < A.n && j < B.n && !strcmp(sa->line[i], sb->line[j])) {
            i++, j++;
            continue;
        }
        if (i < A.n) {
            if (room(o)) qt_cg_buf_printf(o->b, "  - %s\n", sa->line[i]);
            i++, notes++;
        }
        if (j < B.n) {
            if (room(o)) qt_cg_buf_printf(o->b, "  + %s\n", sb->line[j]);
            j++, notes++;
        }
    }
    *nd = changed + only_a + only_b + notes;
    snprintf(what, whatlen, "%d changed, %d only in A, %d only in B", changed, only_a, only_b);
    free(match);
    free(used);
    tside_free(&A);
    tside_free(&B);
    return *nd > 0;
}

static int64_t arena_of(const qt_cg_dplan *p)
{
    const qt_cg_dsec *s = find_sec(p, "memory map");
    for (int i = s ? s->n - 1 : -1; i >= 0; i--) {
        long long v;
        char word[16];
        if (sscanf(s->line[i], "%lld %15s", &v, word) == 2 && !strcmp(word, "end")) return v;
    }
    return -1;
}

int qt_cg_diff(const char *a, const char *b, qt_cg_buf *out, int *differs, char *err,
               size_t errlen)
{
    qt_cg_dplan pa = {0}, pb = {0};
    *differs = 0;
    if (load_text(a, &pa, err, errlen) || parse(a, &pa, err, errlen) ||
        load_text(b, &pb, err, errlen) || parse(b, &pb, err, errlen)) {
        dplan_free(&pa);
        dplan_free(&pb);
        return -1;
    }
    qt_cg_buf_printf(out, "A: %s (plan '%s')\nB: %s (plan '%s')\n", a, pa.name, b, pb.name);
    const int64_t arena_a = arena_of(&pa), arena_b = arena_of(&pb);
    if (arena_a != arena_b)
        qt_cg_buf_printf(out, "arena: %lld -> %lld bytes\n", (long long)arena_a,
                         (long long)arena_b);
    qt_cg_buf summary = {0};
    int nsec = 0;
    /* sections of A in A's order, then those only in B */
    for (int pass = 0; pass < 2; pass++) {
        const qt_cg_dplan *p = pass ? &pb : &pa, *q = pass ? &pa : &pb;
        for (int i = 0; i < p->n; i++) {
            const qt_cg_dsec *s = &p->sec[i], *t = find_sec(q, s->key);
            if (pass && t) continue;
            const qt_cg_dsec *sa = pass ? NULL : s, *sb = pass ? s : t;
            qt_cg_buf body = {0};
            qt_cg_dout ob = {&body, 0, 0};
            char what[128] = "";
            int d;
            if (!strcmp(s->key, "tensors")) {
                int nd = 0;
                d = tensors_diff(sa, sb, &ob, &nd, what, sizeof what);
            } else {
                int ops = has_suffix(s->key, "schedule"), x = 0, y = 0;
                d = lines_diff(sa, sb, ops, &ob, &x, &y);
                snprintf(what, sizeof what, "%s %d only in A, %d only in B",
                         ops ? "ops" : "lines", x, y);
                if (ops && sa && sb)
                    snprintf(what + strlen(what), sizeof what - strlen(what), " (%d vs %d ops)",
                             n_ops(sa), n_ops(sb));
            }
            end_section(&ob);
            if (d) {
                qt_cg_buf_printf(out, "== %s: %s%s%s ==\n%s", s->key, what,
                                 sa ? "" : " (section only in B)", sb ? "" : " (section only in A)",
                                 body.p ? body.p : "");
                qt_cg_buf_printf(&summary, "%s%s", nsec++ ? ", " : "", s->key);
            }
            qt_cg_buf_free(&body);
        }
    }
    if (nsec) {
        qt_cg_buf_printf(out, "plans differ in: %s\n", summary.p);
        *differs = 1;
    } else {
        qt_cg_buf_printf(out, "plans are identical apart from names and plan hash\n");
    }
    qt_cg_buf_free(&summary);
    dplan_free(&pa);
    dplan_free(&pb);
    return 0;
}
