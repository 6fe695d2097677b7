/* config/yaml.c - the flat YAML subset of docs/design.md section 2.
 *
 * Accepted: `key: value` lines starting in column 0; values are numbers, true/false,
 * quoted ('..' or "..") or bare strings, or flow lists `[...]` that may nest and span
 * lines (comments and a trailing comma allowed inside); `#` starts a comment outside
 * quotes, as in YAML only at the start of the value or after a blank (`a: x#1` is the value
 * `x#1`, as PyYAML reads it, not `x`). A UTF-8 byte-order mark at the start of the file is
 * skipped, as PyYAML (MaxText's reader) skips it; so are a document start "---" before the
 * first key and a document end "..." (a second document after either is refused, as
 * MaxText's loader refuses it). Everything else (indentation, block lists "- x", mappings,
 * anchors, block scalars, duplicate keys) is rejected as "file:line: ...", because silently reading a
 * richer YAML than we understand would let a config mean something we do not plan for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

typedef struct qt_cg_lex {
    const char *file;
    const char *s;
    size_t i;
    int line;
    char *err;
    size_t errlen;
} qt_cg_lex;

static int lex_fail(qt_cg_lex *l, int line, const char *msg, const char *arg)
{
    if (line > 0)
        return qt_cg_fail(l->err, l->errlen, "%s:%d: %s%s", l->file, line, msg, arg ? arg : "");
    return qt_cg_fail(l->err, l->errlen, "%s: %s%s", l->file, msg, arg ? arg : "");
}

/* A message that quotes one offending character. */
static int lex_fail_char(qt_cg_lex *l, const char *msg, char c)
{
    char q[8] = {'\'', c, '\'', 0};
    return lex_fail(l, l->line, msg, q);
}

static void skip_inline(qt_cg_lex *l)
{
    while (l->s[l->i] == ' ' || l->s[l->i] == '\t' || l->s[l->i] == '\r') l->i++;
}

static void skip_comment(qt_cg_lex *l)
{
    if (l->s[l->i] == '#')
        while (l->s[l->i] && l->s[l->i] != '\n') l->i++;
}

/* Inside a list: whitespace, newlines and comments all separate tokens. */
static void skip_all(qt_cg_lex *l)
{
    for (;;) {
        skip_inline(l);
        skip_comment(l);
        if (l->s[l->i] == '\n') {
            l->i++;
            l->line++;
            continue;
        }
        return;
    }
}

static int parse_value(qt_cg_lex *l, qt_cg_val *v, int in_list, int depth);

static int parse_list(qt_cg_lex *l, qt_cg_val *v, int depth)
{
    int open_line = l->line, cap = 0;
    v->kind = QT_CG_LIST;
    l->i++; /* '[' */
    for (;;) {
        skip_all(l);
        char c = l->s[l->i];
        if (c == 0) {
            char at[32];
            snprintf(at, sizeof at, "%d", open_line);
            return lex_fail(l, l->line, "unterminated list opened at line ", at);
        }
        if (c == ']') {
            l->i++;
            return 0;
        }
        v->items = qt_cg_grow(v->items, &cap, v->n + 1, sizeof *v->items);
        /* Counted before the error check: an item that fails half-way (a nested list or a
         * string cut short) already owns memory, and only counted items are freed with v
         * (qt_cg_val_free); parse_value leaves a failed item freeable. Found by fuzzing
         * (tests/fuzz/regressions/yaml/leak-nested-list). */
        int r = parse_value(l, &v->items[v->n], 1, depth + 1);
        v->n++;
        if (r) return -1;
        skip_all(l);
        c = l->s[l->i];
        if (c == ',') {
            l->i++;
            continue;
        }
        if (c == ']') {
            l->i++;
            return 0;
        }
        if (c == 0) continue; /* reported as unterminated above */
        char msg[96];
        snprintf(msg, sizeof msg, "expected ',' or ']' in the list opened at line %d, found ",
                 open_line);
        return lex_fail_char(l, msg, c);
    }
}

static int parse_quoted(qt_cg_lex *l, qt_cg_val *v)
{
    char q = l->s[l->i++];
    size_t cap = 16, n = 0;
    char *out = qt_cg_alloc(cap);
    for (;;) {
        char c = l->s[l->i];
        if (c == 0 || c == '\n') {
            free(out);
            return lex_fail(l, l->line, "unterminated string", NULL);
        }
        l->i++;
        if (c == q) break;
        if (c == '\\' && q == '"' && (l->s[l->i] == '"' || l->s[l->i] == '\\')) c = l->s[l->i++];
        if (n + 2 > cap) {
            cap *= 2;
            char *t = realloc(out, cap);
            if (!t) abort();
            out = t;
        }
        out[n++] = c;
    }
    out[n] = 0;
    v->kind = QT_CG_SCALAR;
    v->quoted = 1;
    v->s = out;
    return 0;
}

static int parse_bare(qt_cg_lex *l, qt_cg_val *v, int in_list)
{
    size_t start = l->i;
    char c0 = l->s[l->i];
    if (c0 && strchr("{}&*!|>%@`", c0))
        return lex_fail_char(l, "unsupported YAML syntax starting with ", c0);
    while (l->s[l->i] && l->s[l->i] != '\n' &&
           !(l->s[l->i] == '#' &&
             (l->i == 0 || l->s[l->i - 1] == ' ' || l->s[l->i - 1] == '\t'))) {
        if (in_list && (l->s[l->i] == ',' || l->s[l->i] == ']')) break;
        if (l->s[l->i] == ':' && (l->s[l->i + 1] == ' ' || l->s[l->i + 1] == '\t' ||
                                  l->s[l->i + 1] == '\n' || l->s[l->i + 1] == 0))
            return lex_fail(l, l->line, "nested mappings are not supported", NULL);
        if (l->s[l->i] == '[' || l->s[l->i] == ']' || l->s[l->i] == '{' || l->s[l->i] == '}' ||
            l->s[l->i] == '"' || l->s[l->i] == '\'')
            return lex_fail_char(l, "unexpected character in a bare value: ", l->s[l->i]);
        l->i++;
    }
    size_t end = l->i;
    while (end > start && (l->s[end - 1] == ' ' || l->s[end - 1] == '\t' || l->s[end - 1] == '\r'))
        end--;
    if (end == start) return lex_fail(l, l->line, "missing value", NULL);
    char *out = qt_cg_alloc(end - start + 1);
    memcpy(out, l->s + start, end - start);
    v->kind = QT_CG_SCALAR;
    v->s = out;
    return 0;
}

static int parse_value(qt_cg_lex *l, qt_cg_val *v, int in_list, int depth)
{
    memset(v, 0, sizeof *v);
    if (depth > 16) return lex_fail(l, l->line, "lists nested too deeply", NULL);
    char c = l->s[l->i];
    if (c == '[') return parse_list(l, v, depth);
    if (c == '"' || c == '\'') return parse_quoted(l, v);
    if (c == '-' && (l->s[l->i + 1] == ' ' || l->s[l->i + 1] == '\n'))
        return lex_fail(l, l->line, "block lists (\"- item\") are not supported; use [a, b]", NULL);
    return parse_bare(l, v, in_list);
}

static int is_key_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_key_char(char c)
{
    return is_key_start(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

/* A document marker line at l->i (column 0): "---" -> 1, "..." -> 2, each alone on its line
 * or followed by blanks and a comment; the line is consumed. 0 (nothing consumed) else. */
static int doc_marker(qt_cg_lex *l)
{
    const char *p = l->s + l->i;
    int kind = !strncmp(p, "---", 3) ? 1 : !strncmp(p, "...", 3) ? 2 : 0;
    if (!kind || (p[3] && p[3] != '\n' && p[3] != ' ' && p[3] != '\t' && p[3] != '\r'))
        return 0;
    size_t save = l->i;
    l->i += 3;
    skip_inline(l);
    skip_comment(l);
    if (l->s[l->i] != '\n' && l->s[l->i] != 0) {
        l->i = save;
        return 0;
    }
    if (l->s[l->i] == '\n') {
        l->i++;
        l->line++;
    }
    return kind;
}

int qt_cg_yaml_parse(const char *file, const char *text, qt_cg_doc *out, char *err, size_t errlen)
{
    qt_cg_lex l = {file, text, 0, 1, err, errlen};
    int doc_started = 0, doc_ended = 0;   /* a "---" line was read; the line of "..." */
    memset(out, 0, sizeof *out);
    out->file = qt_cg_strdup(file);
    if (!strncmp(text, "\xef\xbb\xbf", 3)) l.i = 3; /* a BOM (Windows editors): PyYAML skips it too */
    while (text[l.i]) {
        size_t ls = l.i;
        skip_inline(&l);
        skip_comment(&l);
        if (text[l.i] == '\n' || text[l.i] == 0) {
            if (text[l.i] == '\n') {
                l.i++;
                l.line++;
            }
            continue;
        }
        if (l.i != ls)
            return lex_fail(&l, l.line,
                            "indented line: nested mappings and block lists are not supported",
                            NULL);
        const int mline = l.line, marker = doc_marker(&l);
        if (marker) {
            /* "---" opens the document (PyYAML, MaxText's reader, takes one before the first
             * key), "..." ends it; a key after "..." or a second "---" starts another
             * document, which MaxText's loader refuses ("expected a single document") */
            if (marker == 1 && !out->n && !doc_started && !doc_ended) {
                doc_started = 1;
                continue;
            }
            if (marker == 2 && !doc_ended) {
                doc_ended = mline;
                continue;
            }
            return lex_fail(&l, mline, marker == 1 ? "a second YAML document starts here (---), "
                            "which MaxText's loader refuses (it reads one document): put every "
                            "key in one (a single --- is taken only before the first key)" :
                            "a second document end (...)", NULL);
        }
        if (doc_ended) {
            char msg[240];
            snprintf(msg, sizeof msg, "a key after the document end (... at line %d) starts a "
                     "second YAML document, which MaxText's loader refuses: remove the ... line",
                     doc_ended);
            return lex_fail(&l, l.line, msg, NULL);
        }
        if (text[l.i] == '-')
            return lex_fail(&l, l.line, "block lists (\"- item\") are not supported; use [a, b]",
                            NULL);
        if (!is_key_start(text[l.i])) return lex_fail(&l, l.line, "expected 'key: value'", NULL);
        size_t ks = l.i;
        while (is_key_char(text[l.i])) l.i++;
        char *key = qt_cg_alloc(l.i - ks + 1);
        memcpy(key, text + ks, l.i - ks);
        int line = l.line;
        skip_inline(&l);
        if (text[l.i] != ':') {
            free(key);
            return lex_fail(&l, line, "expected ':' after a key ('key: value')", NULL);
        }
        l.i++;
        skip_inline(&l);
        if (text[l.i] == '\n' || text[l.i] == 0 || text[l.i] == '#') {
            int r = lex_fail(&l, line, "no value for key ", key);
            size_t m = strlen(err ? err : "");
            if (err && m + 60 < errlen)
                snprintf(err + m, errlen - m, " (nested mappings are not supported)");
            free(key);
            return r;
        }
        for (int j = 0; j < out->n; j++)
            if (!strcmp(out->e[j].key, key)) {
                char msg[200];
                snprintf(msg, sizeof msg, "duplicate key '%s' (first set at line %d)", key,
                         out->e[j].line);
                free(key);
                return lex_fail(&l, line, msg, NULL);
            }
        out->e = qt_cg_grow(out->e, &out->cap, out->n + 1, sizeof *out->e);
        qt_cg_entry *e = &out->e[out->n++];
        e->key = key;
        e->line = line;
        if (parse_value(&l, &e->val, 0, 0)) return -1;
        skip_inline(&l);
        skip_comment(&l);
        if (text[l.i] != '\n' && text[l.i] != 0)
            return lex_fail(&l, l.line, "unexpected text after the value", NULL);
    }
    return 0;
}

int qt_cg_yaml_parse_value(const char *where, const char *text, qt_cg_val *out, char *err,
                           size_t errlen)
{
    qt_cg_lex l = {where, text, 0, 0, err, errlen};
    skip_inline(&l);
    if (!text[l.i]) return lex_fail(&l, 0, "missing value", NULL);
    if (parse_value(&l, out, 0, 0)) {
        qt_cg_val_free(out);   /* a failed value owns nothing afterwards (idempotent free) */
        return -1;
    }
    skip_inline(&l);
    if (text[l.i]) {
        qt_cg_val_free(out);
        return lex_fail(&l, 0, "unexpected text after the value: ", text + l.i);
    }
    return 0;
}

void qt_cg_val_free(qt_cg_val *v)
{
    for (int i = 0; i < v->n; i++) qt_cg_val_free(&v->items[i]);
    free(v->items);
    free(v->s);
    memset(v, 0, sizeof *v);
}

void qt_cg_doc_free(qt_cg_doc *d)
{
    for (int i = 0; i < d->n; i++) {
        free(d->e[i].key);
        qt_cg_val_free(&d->e[i].val);
    }
    free(d->e);
    free(d->file);
    memset(d, 0, sizeof *d);
}

void qt_cg_val_render(const qt_cg_val *v, qt_cg_buf *b)
{
    if (v->kind == QT_CG_SCALAR) {
        if (v->quoted) qt_cg_buf_printf(b, "'%s'", v->s);
        else qt_cg_buf_printf(b, "%s", v->s);
        return;
    }
    qt_cg_buf_printf(b, "[");
    for (int i = 0; i < v->n; i++) {
        if (i) qt_cg_buf_printf(b, ", ");
        qt_cg_val_render(&v->items[i], b);
    }
    qt_cg_buf_printf(b, "]");
}

/* YAML's core-schema bool spellings: 1 true, 0 false, -1 neither (config.c types them by
 * key: the text stays a scalar here). */
int qt_cg_bool_word(const char *s)
{
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) return 1;
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) return 0;
    return -1;
}
