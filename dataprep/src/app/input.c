/* input.c - document iteration over one INPUT (input.h). Files are mapped read-only;
 * standard input is read whole. Invariants: fn only ever sees valid UTF-8; a JSON line is
 * parsed completely (any syntax error refuses the file); blank lines of a JSON-lines file
 * are skipped; nothing is skipped silently otherwise. A plain-text input that starts with a
 * byte-order mark, or looks like JSON lines ('{' first), is read as it is, with a note. */
#include "input.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/buf.h"
#include "../base/err.h"
#include "../base/mapfile.h"
#include "../base/json.h"
#include "../base/utf8.h"

static size_t line_of(const uint8_t *s, size_t off)
{
    size_t l = 1;
    for (const uint8_t *p = s; (p = memchr(p, '\n', (size_t)(s + off - p))) != NULL; p++)
        l++;
    return l;
}

static int has_bom(const uint8_t *s, size_t n)
{
    return n >= 3 && s[0] == 0xEF && s[1] == 0xBB && s[2] == 0xBF;
}

static int text_doc(const char *name, const uint8_t *s, size_t n, qtd_doc_fn fn, void *ctx)
{
    size_t bad = qtd_utf8_check(s, n);
    if (bad != n)
        return qtd_fail("%s: line %zu, byte offset %zu: invalid UTF-8 (byte 0x%02X); expected UTF-8 text", name,
                        line_of(s, bad), bad, s[bad]);
    size_t k = has_bom(s, n) ? 3 : 0;
    if (k)
        qtd_note("%s starts with a UTF-8 byte-order mark (EF BB BF): kept as text (U+FEFF is encoded, as the Hugging "
                 "Face tokenizer does); remove it if it is not part of the document", name);
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r' || s[k] == '\n'))
        k++;
    if (k < n && s[k] == '{')
        qtd_note("%s starts with '{' but is read as plain text (one document); name it .jsonl or .ndjson to read one "
                 "JSON object per line", name);
    return fn(ctx, s, n, n, n);
}

static int jsonl_line(const char *name, size_t lineno, qtd_json *j, const uint8_t *s, size_t n, const char *field)
{
    size_t k = 0;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
        k++;
    if (k == n)
        return 1;   /* blank */
    if (has_bom(s, n))
        return qtd_fail("%s:%zu: the line starts with a UTF-8 byte-order mark (EF BB BF); save the file without it "
                        "(JSON lines are UTF-8 without a mark, as Python's json.loads expects)", name, lineno);
    if (qtd_json_parse(j, s, n)) {
        size_t at = j->err_at;
        char why[256];
        snprintf(why, sizeof why, "%s", qtd_errmsg());
        if (strstr(why, "invalid UTF-8"))
            return qtd_fail("%s: line %zu, byte offset %zu: invalid UTF-8 (byte 0x%02X); expected UTF-8 text", name,
                            lineno, at, at < n ? s[at] : 0);
        return qtd_fail("%s:%zu: not valid JSON (%s of the line); expected one JSON object per line", name, lineno,
                        why);
    }
    uint32_t f = qtd_json_get(j, 0, field, strlen(field));
    if (!f || j->nodes[f].type != QTD_J_STR)
        return qtd_fail("%s:%zu: %s; expected an object with a string member \"%s\" (field=)", name, lineno,
                        j->nodes[0].type != QTD_J_OBJ ? "not a JSON object"
                        : !f                          ? "no member of that name"
                                                      : "the member is not a string",
                        field);
    return 0;
}

static int jsonl_docs(const char *name, const uint8_t *s, size_t n, const char *field, qtd_doc_fn fn, void *ctx)
{
    qtd_json j = {0};
    size_t at = 0, lineno = 0;
    int rc = 0;
    while (at < n && !rc) {
        const uint8_t *nl = memchr(s + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - s) : n;
        lineno++;
        int r = jsonl_line(name, lineno, &j, s + at, end - at, field);
        if (r < 0)
            rc = -1;
        else if (r == 0) {
            uint32_t f = qtd_json_get(&j, 0, field, strlen(field));
            rc = fn(ctx, (const uint8_t *)qtd_json_str(&j, f), j.nodes[f].slen, end, n);
        }
        at = end + 1;
    }
    qtd_json_free(&j);
    return rc;
}

static int read_stdin(qtd_bytes *b)
{
    for (;;) {
        uint8_t *w = qtd_bytes_reserve(b, 1 << 20);
        ssize_t r = read(0, w, 1 << 20);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return qtd_fail("(stdin): read error: %s", strerror(errno));
        if (r == 0)
            return 0;
        b->len += (size_t)r;
    }
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcasecmp(s + n - k, suffix);
}

int qtd_input_is_jsonl(const char *path)
{
    return ends_with(path, ".jsonl") || ends_with(path, ".ndjson") || ends_with(path, ".json");
}

int qtd_input_each(const char *path, const char *field, qtd_doc_fn fn, void *ctx)
{
    if (!strcmp(path, "-")) {
        qtd_bytes b = {0};
        int rc = read_stdin(&b);
        if (!rc)
            rc = text_doc("(stdin)", b.data ? b.data : (const uint8_t *)"", b.len, fn, ctx);
        qtd_bytes_free(&b);
        return rc;
    }
    uint8_t *m;
    size_t n;
    if (qtd_map_file(path, "input", &m, &n))
        return -1;
    if (m)
        madvise(m, n, MADV_SEQUENTIAL);
    const uint8_t *s = m ? m : (const uint8_t *)"";
    int rc = qtd_input_is_jsonl(path) ? jsonl_docs(path, s, n, field, fn, ctx) : text_doc(path, s, n, fn, ctx);
    qtd_unmap_file(m, n);
    return rc;
}
