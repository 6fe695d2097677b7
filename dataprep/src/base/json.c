/* json.c - the JSON reader of json.h: recursive descent, depth limited to 256, strings
 * decoded into one pool. Invariant: on success every node is complete; on failure the
 * message names the first offending byte offset and what was expected there. */
#include "json.h"

#include "err.h"
#include "utf8.h"

typedef struct {
    qtd_json *j;
    const uint8_t *s;
    size_t n, i;
    int depth;
} parser;

static int perr(parser *p, const char *what)
{
    p->j->err_at = p->i;
    return qtd_fail("%s at byte %zu", what, p->i);
}

static void skip_ws(parser *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static uint32_t new_node(parser *p, uint8_t type)
{
    qtd_json *j = p->j;
    if (j->nnodes == j->cap) {
        j->cap = j->cap ? j->cap * 2 : 256;
        j->nodes = (qtd_jnode *)qtd_xrealloc(j->nodes, j->cap * sizeof *j->nodes);
    }
    qtd_jnode *nd = &j->nodes[j->nnodes];
    memset(nd, 0, sizeof *nd);
    nd->type = type;
    return (uint32_t)j->nnodes++;
}

static int hex4(parser *p, uint32_t *v)
{
    if (p->n - p->i < 4)
        return perr(p, "truncated \\u escape");
    *v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = p->s[p->i++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            p->i--;
            return perr(p, "bad hex digit in \\u escape");
        }
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

static int escape(parser *p, qtd_bytes *out)
{
    uint8_t c = p->s[p->i++], u[4];
    const char *map = "\"\"\\\\//b\bf\fn\nr\rt\t";
    for (const char *m = map; *m; m += 2)
        if (c == (uint8_t)m[0]) {
            qtd_bytes_put(out, m + 1, 1);
            return 0;
        }
    if (c != 'u') {
        p->i--;
        return perr(p, "unknown escape in string");
    }
    uint32_t v, lo;
    if (hex4(p, &v))
        return -1;
    if (v >= 0xDC00 && v <= 0xDFFF)
        return perr(p, "lone low surrogate escape in string");
    if (v >= 0xD800 && v <= 0xDBFF) {
        if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
            return perr(p, "high surrogate escape not followed by a low surrogate escape");
        p->i += 2;
        if (hex4(p, &lo))
            return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return perr(p, "high surrogate escape not followed by a low surrogate escape");
        v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
    }
    qtd_bytes_put(out, u, (size_t)qtd_utf8_put(v, u));
    return 0;
}

/* Parses a string at p->i (on the opening quote) into the pool; sets *off, *len. */
static int string(parser *p, size_t *off, size_t *len)
{
    qtd_bytes *pool = &p->j->pool;
    p->i++;
    *off = pool->len;
    for (;;) {
        size_t st = p->i;
        while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' && p->s[p->i] >= 0x20)
            p->i++;
        size_t bad = qtd_utf8_check(p->s + st, p->i - st);
        if (bad != p->i - st) {
            p->i = st + bad;
            return perr(p, "invalid UTF-8 in string");
        }
        qtd_bytes_put(pool, p->s + st, p->i - st);
        if (p->i >= p->n)
            return perr(p, "unterminated string");
        uint8_t c = p->s[p->i++];
        if (c == '"')
            break;
        if (c < 0x20) {
            p->i--;
            return perr(p, "control character in string");
        }
        if (p->i >= p->n)
            return perr(p, "unterminated string");
        if (escape(p, pool))
            return -1;
    }
    *len = pool->len - *off;
    qtd_bytes_put(pool, "", 1);   /* NUL after every string, for printing */
    return 0;
}

static int value(parser *p, uint32_t *out);

static int number(parser *p, uint32_t nd)
{
    size_t st = p->i;
    if (p->s[p->i] == '-')
        p->i++;
    size_t d0 = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
        p->i++;
    if (p->i == d0 || (p->s[d0] == '0' && p->i - d0 > 1))
        return perr(p, "bad number");
    if (p->i < p->n && p->s[p->i] == '.') {
        size_t f0 = ++p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == f0)
            return perr(p, "bad number");
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        size_t e0 = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == e0)
            return perr(p, "bad number");
    }
    p->j->nodes[nd].str = p->j->pool.len;
    p->j->nodes[nd].slen = p->i - st;
    qtd_bytes_put(&p->j->pool, p->s + st, p->i - st);
    qtd_bytes_put(&p->j->pool, "", 1);
    return 0;
}

/* Array or object at p->i (on '[' or '{'). */
static int container(parser *p, uint32_t nd, int obj)
{
    uint8_t close = obj ? '}' : ']';
    uint32_t last = 0;
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return 0;
    }
    for (;;) {
        size_t koff = 0, klen = 0;
        uint32_t ch;
        if (obj) {
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != '"')
                return perr(p, "expected a string key");
            if (string(p, &koff, &klen))
                return -1;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':')
                return perr(p, "expected ':'");
            p->i++;
        }
        if (value(p, &ch))
            return -1;
        qtd_jnode *nodes = p->j->nodes;
        nodes[ch].key = koff;
        nodes[ch].klen = klen;
        if (last)
            nodes[last].next = ch;
        else
            nodes[nd].first = ch;
        last = ch;
        nodes[nd].count++;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return 0;
        }
        return perr(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int literal(parser *p, const char *word, uint32_t *out, uint8_t type)
{
    size_t l = strlen(word);
    if (p->n - p->i < l || memcmp(p->s + p->i, word, l))
        return perr(p, "expected a JSON value");
    p->i += l;
    *out = new_node(p, type);
    return 0;
}

static int value(parser *p, uint32_t *out)
{
    skip_ws(p);
    if (p->i >= p->n)
        return perr(p, "expected a JSON value, found the end");
    uint8_t c = p->s[p->i];
    if (c == '"') {
        *out = new_node(p, QTD_J_STR);
        size_t off, len;
        if (string(p, &off, &len))
            return -1;
        p->j->nodes[*out].str = off;
        p->j->nodes[*out].slen = len;
        return 0;
    }
    if (c == '{' || c == '[') {
        if (++p->depth > 256)
            return perr(p, "nesting deeper than 256");
        *out = new_node(p, c == '{' ? QTD_J_OBJ : QTD_J_ARR);
        int rc = container(p, *out, c == '{');
        p->depth--;
        return rc;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        *out = new_node(p, QTD_J_NUM);
        return number(p, *out);
    }
    if (c == 't')
        return literal(p, "true", out, QTD_J_TRUE);
    if (c == 'f')
        return literal(p, "false", out, QTD_J_FALSE);
    if (c == 'n')
        return literal(p, "null", out, QTD_J_NULL);
    return perr(p, "expected a JSON value");
}

int qtd_json_parse(qtd_json *j, const uint8_t *s, size_t n)
{
    parser p = {j, s, n, 0, 0};
    uint32_t root;
    j->nnodes = 0;
    j->pool.len = 0;
    j->err_at = 0;
    qtd_bytes_reserve(&j->pool, 1);
    if (value(&p, &root))
        return -1;
    skip_ws(&p);
    if (p.i != n)
        return perr(&p, "unexpected text after the JSON value");
    return 0;
}

uint32_t qtd_json_get(const qtd_json *j, uint32_t obj, const char *key, size_t len)
{
    if (j->nodes[obj].type != QTD_J_OBJ)
        return 0;
    uint32_t last = 0;   /* a repeated key: the last member counts, as in json.loads / JSON.parse */
    for (uint32_t c = j->nodes[obj].first; c; c = j->nodes[c].next)
        if (j->nodes[c].klen == len && !memcmp(qtd_json_key(j, c), key, len))
            last = c;
    return last;
}

void qtd_json_free(qtd_json *j)
{
    free(j->nodes);
    qtd_bytes_free(&j->pool);
    memset(j, 0, sizeof *j);
}
