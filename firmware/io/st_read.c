/* st_read.c - safetensors reader: parse and validate the header into static tables.
 *
 * Why a private writable mapping: the file is mapped MAP_PRIVATE with write access so the
 * closing quote of every name / metadata string can be overwritten with a NUL in place.
 * That gives C strings without copying them into a heap or a second 64 MiB pool; only
 * the header pages become private copies, the file is never modified.
 * Invariants: see safetensors.h. The parser is iterative (no recursion): the safetensors
 * header has a fixed nesting depth of two objects and one array.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"
#include "safetensors.h"
#include "qt_hash64.h"

#define QT_ST_HASH_SLOTS (1u << 20)   /* > 2 x QT_ST_MAX_TENSORS keeps probes short */

typedef struct qt_st_slot {
    int used;
    const char *path;
    unsigned char *map;
    int64_t map_len;
    int64_t data_start;                 /* 8 + header length */
    int32_t n;
    int32_t n_meta;
    const char *meta_key[QT_ST_MAX_META];
    const char *meta_val[QT_ST_MAX_META];
    qt_st_tensor t[QT_ST_MAX_TENSORS];
    uint32_t hash[QT_ST_HASH_SLOTS];    /* tensor index + 1, 0 = empty */
    uint32_t order[QT_ST_MAX_TENSORS];  /* tensor indices sorted by begin (validation) */
} qt_st_slot;

static struct {
    qt_st_slot slot[QT_ST_MAX_OPEN];
} qt_st_rd;

static const char *const qt_st_names[QT_ST_DTYPE_COUNT] = {
    "F32", "BF16", "F16", "F64", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "BOOL"
};
static const int qt_st_sizes[QT_ST_DTYPE_COUNT] = { 4, 2, 2, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1 };

const char *qt_st_dtype_name(int dtype)
{
    return (dtype >= 0 && dtype < QT_ST_DTYPE_COUNT) ? qt_st_names[dtype] : NULL;
}

int qt_st_dtype_size(int dtype)
{
    return (dtype >= 0 && dtype < QT_ST_DTYPE_COUNT) ? qt_st_sizes[dtype] : 0;
}

static uint32_t qt_st_hash_name(const char *s)
{
    uint32_t h = 2166136261u;   /* FNV-1a */
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 16777619u;
    }
    return h;
}

/* ---- a tiny cursor-based JSON scanner over [p, end) ---- */

typedef struct qt_js {
    char *p, *end, *start;
    const char *path;
} qt_js;

static void qt_js_ws(qt_js *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int qt_js_bad(const qt_js *j, const char *what)
{
    return qt_fail(QT_E_FORMAT, "%s: bad safetensors header JSON at byte %lld: %s",
                      j->path, (long long)(j->p - j->start), what);
}

static int qt_js_expect(qt_js *j, char c)
{
    char msg[32];
    qt_js_ws(j);
    if (j->p >= j->end || *j->p != c) {
        snprintf(msg, sizeof msg, "expected '%c'", c);
        return qt_js_bad(j, msg);
    }
    j->p++;
    return QT_OK;
}

/* Four hex digits at p (end excluded): their value, or -1. */
static int32_t qt_js_hex4(const char *p, const char *end)
{
    int32_t v = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        const char c = p[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
                      c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Bytes of the well-formed UTF-8 sequence at p (end excluded), 0 if it is not one
 * (overlong forms, surrogates and code points past U+10FFFF are not). */
static int qt_js_utf8_len(const unsigned char *p, const unsigned char *end)
{
    const unsigned c = p[0];
    int n;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { n = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { n = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; cp = c & 0x07; }
    else return 0;
    if (end - p < n)
        return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

/* Parse a JSON string; NUL-terminate it in place. Escapes are decoded in place (an escape
 * is never shorter than the bytes it stands for, so the decoded string ends at or before
 * the closing quote): a serde_json writer (the safetensors library) escapes '"', '\' and
 * control characters in metadata values, Python's json non-ASCII too. The text must be
 * UTF-8 (serde_json refuses anything else); \u0000 is refused, the strings are C strings. */
static int qt_js_string(qt_js *j, char **out)
{
    qt_js_ws(j);
    if (j->p >= j->end || *j->p != '"')
        return qt_js_bad(j, "expected a string");
    char *s = ++j->p, *w = s;
    while (j->p < j->end && *j->p != '"') {
        const unsigned char c = (unsigned char)*j->p;
        if (c < 0x20)
            return qt_js_bad(j, "control character in string");
        if (c >= 0x80) {
            const int n = qt_js_utf8_len((const unsigned char *)j->p,
                                         (const unsigned char *)j->end);
            if (!n)
                return qt_js_bad(j, "invalid UTF-8 in a string (JSON text is UTF-8)");
            memmove(w, j->p, (size_t)n);
            w += n;
            j->p += n;
            continue;
        }
        if (c != '\\') {
            *w++ = *j->p++;
            continue;
        }
        if (j->end - j->p < 2)
            return qt_js_bad(j, "unterminated string");
        const char e = j->p[1];
        static const char esc[] = "\"\\/bfnrt", val[] = "\"\\/\b\f\n\r\t";
        const char *simple = e ? strchr(esc, e) : NULL;
        if (simple) {
            *w++ = val[simple - esc];
            j->p += 2;
            continue;
        }
        if (e != 'u')
            return qt_js_bad(j, "invalid escape in a string (expected one of \\\" \\\\ \\/ \\b "
                                "\\f \\n \\r \\t \\uXXXX)");
        int32_t cp = qt_js_hex4(j->p + 2, j->end);
        if (cp < 0)
            return qt_js_bad(j, "\\u needs four hex digits");
        int len = 6;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return qt_js_bad(j, "a low surrogate escape without a high one before it");
        if (cp >= 0xd800 && cp <= 0xdbff) {
            const int32_t lo = j->end - j->p >= 12 && j->p[6] == '\\' && j->p[7] == 'u' ?
                               qt_js_hex4(j->p + 8, j->end) : -1;
            if (lo < 0xdc00 || lo > 0xdfff)
                return qt_js_bad(j, "a high surrogate escape not followed by a low one");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            len = 12;
        }
        if (cp == 0)
            return qt_js_bad(j, "\\u0000 (a NUL character) in a string is not supported");
        if (cp < 0x80) {
            *w++ = (char)cp;
        } else if (cp < 0x800) {
            *w++ = (char)(0xc0 | cp >> 6);
            *w++ = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            *w++ = (char)(0xe0 | cp >> 12);
            *w++ = (char)(0x80 | (cp >> 6 & 0x3f));
            *w++ = (char)(0x80 | (cp & 0x3f));
        } else {
            *w++ = (char)(0xf0 | cp >> 18);
            *w++ = (char)(0x80 | (cp >> 12 & 0x3f));
            *w++ = (char)(0x80 | (cp >> 6 & 0x3f));
            *w++ = (char)(0x80 | (cp & 0x3f));
        }
        j->p += len;
    }
    if (j->p >= j->end)
        return qt_js_bad(j, "unterminated string");
    *w = '\0';
    j->p++;
    *out = s;
    return QT_OK;
}

static int qt_js_uint(qt_js *j, int64_t *out)
{
    qt_js_ws(j);
    int64_t v = 0;
    int digits = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > (INT64_C(1) << 58))
            return qt_js_bad(j, "integer too large");
        v = v * 10 + (*j->p - '0');
        j->p++;
        digits++;
    }
    if (!digits)
        return qt_js_bad(j, "expected a non-negative integer");
    *out = v;
    return QT_OK;
}

/* ',' -> 1 (more), closer -> 0 (done), else error. */
static int qt_js_next(qt_js *j, char closer, int *more)
{
    qt_js_ws(j);
    if (j->p < j->end && *j->p == ',') { j->p++; *more = 1; return QT_OK; }
    if (j->p < j->end && *j->p == closer) { j->p++; *more = 0; return QT_OK; }
    return qt_js_bad(j, closer == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

static int qt_js_peek(qt_js *j, char c)
{
    qt_js_ws(j);
    if (j->p < j->end && *j->p == c) { j->p++; return 1; }
    return 0;
}

static int qt_st_parse_meta(qt_st_slot *s, qt_js *j)
{
    int rc, more = 1;
    if ((rc = qt_js_expect(j, '{')))
        return rc;
    if (qt_js_peek(j, '}'))
        return QT_OK;
    while (more) {
        char *k, *v;
        if ((rc = qt_js_string(j, &k)) || (rc = qt_js_expect(j, ':')) ||
            (rc = qt_js_string(j, &v)))
            return rc;
        if (s->n_meta >= QT_ST_MAX_META)
            return qt_fail(QT_E_FORMAT, "%s: more than %d __metadata__ entries "
                           "(QT_ST_MAX_META); expected at most that many string pairs",
                           j->path, QT_ST_MAX_META);
        s->meta_key[s->n_meta] = k;
        s->meta_val[s->n_meta++] = v;
        if ((rc = qt_js_next(j, '}', &more)))
            return rc;
    }
    return QT_OK;
}

static int qt_st_parse_int_list(qt_js *j, int64_t *vals, int max, int *n, const char *what)
{
    int rc, more = 1;
    *n = 0;
    if ((rc = qt_js_expect(j, '[')))
        return rc;
    if (qt_js_peek(j, ']'))
        return QT_OK;
    while (more) {
        if (*n >= max)
            return qt_fail(QT_E_FORMAT, "%s: %s has more than %d entries", j->path, what,
                              max);
        if ((rc = qt_js_uint(j, &vals[*n])))
            return rc;
        (*n)++;
        if ((rc = qt_js_next(j, ']', &more)))
            return rc;
    }
    return QT_OK;
}

static int qt_st_parse_tensor(qt_js *j, qt_st_tensor *t)
{
    int rc, more = 1, have = 0, n;
    int64_t off[3];
    if ((rc = qt_js_expect(j, '{')))
        return rc;
    while (more) {
        char *k;
        if ((rc = qt_js_string(j, &k)) || (rc = qt_js_expect(j, ':')))
            return rc;
        if (!strcmp(k, "dtype")) {
            char *v;
            if ((rc = qt_js_string(j, &v)))
                return rc;
            t->dtype = -1;
            for (int d = 0; d < QT_ST_DTYPE_COUNT; d++)
                if (!strcmp(v, qt_st_names[d]))
                    t->dtype = d;
            if (t->dtype < 0)
                return qt_fail(QT_E_FORMAT, "%s: tensor %s: unknown dtype \"%s\"", j->path,
                                  t->name, v);
            have |= 1;
        } else if (!strcmp(k, "shape")) {
            if ((rc = qt_st_parse_int_list(j, t->shape, QT_ST_MAX_DIMS, &n, "shape")))
                return rc;
            t->ndim = n;
            have |= 2;
        } else if (!strcmp(k, "data_offsets")) {
            if ((rc = qt_st_parse_int_list(j, off, 3, &n, "data_offsets")))
                return rc;
            if (n != 2)
                return qt_fail(QT_E_FORMAT, "%s: tensor %s: data_offsets needs 2 entries",
                                  j->path, t->name);
            t->begin = off[0];
            t->end = off[1];
            have |= 4;
        } else {
            return qt_fail(QT_E_FORMAT, "%s: tensor %s: unknown key \"%s\"", j->path,
                              t->name, k);
        }
        if ((rc = qt_js_next(j, '}', &more)))
            return rc;
    }
    if (have != 7)
        return qt_fail(QT_E_FORMAT, "%s: tensor %s: missing %s", j->path, t->name,
                          !(have & 1) ? "dtype" : !(have & 2) ? "shape" : "data_offsets");
    return QT_OK;
}

static int qt_st_insert(qt_st_slot *s, int32_t idx)
{
    uint32_t m = QT_ST_HASH_SLOTS - 1, i = qt_st_hash_name(s->t[idx].name) & m;
    while (s->hash[i]) {
        if (!strcmp(s->t[s->hash[i] - 1].name, s->t[idx].name))
            return -1;
        i = (i + 1) & m;
    }
    s->hash[i] = (uint32_t)idx + 1;
    return 0;
}

/* Heapsort of order[] by begin (then end): iterative, no extra memory. */
static int qt_st_less(const qt_st_slot *s, uint32_t a, uint32_t b)
{
    const qt_st_tensor *x = &s->t[a], *y = &s->t[b];
    return x->begin < y->begin || (x->begin == y->begin && x->end < y->end);
}

static void qt_st_sift(qt_st_slot *s, int64_t root, int64_t n)
{
    uint32_t *o = s->order;
    for (;;) {
        int64_t c = 2 * root + 1;
        if (c >= n)
            return;
        if (c + 1 < n && qt_st_less(s, o[c], o[c + 1]))
            c++;
        if (!qt_st_less(s, o[root], o[c]))
            return;
        uint32_t tmp = o[root]; o[root] = o[c]; o[c] = tmp;
        root = c;
    }
}

static void qt_st_sort(qt_st_slot *s)
{
    int64_t n = s->n;
    for (int64_t i = 0; i < n; i++)
        s->order[i] = (uint32_t)i;
    for (int64_t i = n / 2 - 1; i >= 0; i--)
        qt_st_sift(s, i, n);
    for (int64_t e = n - 1; e > 0; e--) {
        uint32_t tmp = s->order[0]; s->order[0] = s->order[e]; s->order[e] = tmp;
        qt_st_sift(s, 0, e);
    }
}

static int qt_st_validate(qt_st_slot *s)
{
    int64_t data_len = s->map_len - s->data_start;
    for (int32_t i = 0; i < s->n; i++) {
        qt_st_tensor *t = &s->t[i];
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] != 0 && numel > (INT64_C(1) << 58) / t->shape[d])
                return qt_fail(QT_E_FORMAT, "%s: tensor %s: shape too large", s->path,
                                  t->name);
            numel *= t->shape[d];
        }
        t->numel = numel;
        if (t->end < t->begin)
            return qt_fail(QT_E_FORMAT, "%s: tensor %s: data_offsets [%lld, %lld] decrease",
                              s->path, t->name, (long long)t->begin, (long long)t->end);
        if (t->end - t->begin != numel * qt_st_sizes[t->dtype])
            return qt_fail(QT_E_FORMAT,
                              "%s: tensor %s: data_offsets span %lld bytes, shape and dtype %s "
                              "need %lld", s->path, t->name, (long long)(t->end - t->begin),
                              qt_st_names[t->dtype], (long long)(numel * qt_st_sizes[t->dtype]));
        if (t->end > data_len)
            return qt_fail(QT_E_FORMAT,
                              "%s: tensor %s: data_offsets end %lld is past the end of the file "
                              "(data region has %lld bytes): truncated file?", s->path, t->name,
                              (long long)t->end, (long long)data_len);
    }
    qt_st_sort(s);
    int64_t at = 0;
    for (int32_t k = 0; k < s->n; k++) {
        const qt_st_tensor *t = &s->t[s->order[k]];
        if (t->begin != at)
            return qt_fail(QT_E_FORMAT, "%s: tensor %s: data starts at %lld, expected %lld "
                              "(%s)", s->path, t->name, (long long)t->begin, (long long)at,
                              t->begin < at ? "overlaps the previous tensor" : "hole before it");
        at = t->end;
    }
    if (at != data_len)
        return qt_fail(QT_E_FORMAT, "%s: tensors end at data byte %lld but the data region has "
                          "%lld bytes (trailing bytes)", s->path, (long long)at,
                          (long long)data_len);
    return QT_OK;
}

static int qt_st_parse(qt_st_slot *s)
{
    qt_js j = { (char *)s->map + 8, (char *)s->map + s->data_start, (char *)s->map + 8, s->path };
    int rc, more = 1;
    if ((rc = qt_js_expect(&j, '{')))
        return rc;
    if (qt_js_peek(&j, '}'))
        more = 0;
    while (more) {
        char *k;
        if ((rc = qt_js_string(&j, &k)) || (rc = qt_js_expect(&j, ':')))
            return rc;
        if (!strcmp(k, "__metadata__")) {
            if ((rc = qt_st_parse_meta(s, &j)))
                return rc;
        } else {
            if (s->n >= QT_ST_MAX_TENSORS)
                return qt_fail(QT_E_FORMAT, "%s: more than %d tensors (QT_ST_MAX_TENSORS)",
                                  s->path, QT_ST_MAX_TENSORS);
            qt_st_tensor *t = &s->t[s->n];
            memset(t, 0, sizeof *t);
            t->name = k;
            if (strlen(k) >= QT_ST_NAME_MAX)
                return qt_fail(QT_E_FORMAT, "%s: tensor name longer than %d bytes", s->path,
                                  QT_ST_NAME_MAX - 1);
            if ((rc = qt_st_parse_tensor(&j, t)))
                return rc;
            if (qt_st_insert(s, s->n))
                return qt_fail(QT_E_FORMAT, "%s: tensor %s appears twice", s->path, k);
            s->n++;
        }
        if ((rc = qt_js_next(&j, '}', &more)))
            return rc;
    }
    qt_js_ws(&j);
    if (j.p != j.end)
        return qt_js_bad(&j, "trailing characters after the header object");
    return qt_st_validate(s);
}

static void qt_st_release(qt_st_slot *s)
{
    /* Clear only the slots in use (a full memset would touch 4 MiB for a tiny file).
     * Reverse insertion order keeps every remaining entry's probe chain intact. */
    for (int32_t i = s->n - 1; i >= 0; i--) {
        uint32_t m = QT_ST_HASH_SLOTS - 1, k = qt_st_hash_name(s->t[i].name) & m;
        while (s->hash[k] && s->hash[k] != (uint32_t)i + 1)
            k = (k + 1) & m;
        s->hash[k] = 0;
    }
    if (s->map)
        munmap(s->map, (size_t)s->map_len);
    s->map = NULL;
    s->n = 0;
    s->n_meta = 0;
    s->used = 0;
}

int qt_st_open(const char *path, int *h)
{
    qt_st_slot *s = NULL;
    int k, rc;
    for (k = 0; k < QT_ST_MAX_OPEN; k++)
        if (!qt_st_rd.slot[k].used) {
            s = &qt_st_rd.slot[k];
            break;
        }
    if (!s)
        return qt_fail(QT_E_PLAN, "%s: more than %d safetensors files open", path,
                          QT_ST_MAX_OPEN);
    /* O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return qt_fail(QT_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    unsigned char len8[8];
    if (fstat(fd, &st) != 0) {
        rc = qt_fail(QT_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return qt_fail(QT_E_ARG, "%s: is %s; expected a safetensors file", path,
                       S_ISDIR(st.st_mode) ? "a directory" :
                       "not a regular file (a device, FIFO or socket)");
    }
    if (st.st_size < 8 || pread(fd, len8, 8, 0) != 8) {
        close(fd);
        return qt_fail(QT_E_FORMAT, "%s: truncated header: file has %lld bytes, the header "
                          "length alone needs 8", path, (long long)st.st_size);
    }
    uint64_t hlen = 0;
    for (int b = 7; b >= 0; b--)
        hlen = (hlen << 8) | len8[b];
    if (hlen < 2 || hlen > (uint64_t)QT_ST_MAX_HEADER || hlen > (uint64_t)st.st_size - 8) {
        close(fd);
        if (hlen > (uint64_t)st.st_size - 8)
            return qt_fail(QT_E_FORMAT, "%s: not a safetensors file, or a truncated one: its "
                           "first 8 bytes give a header length of %llu bytes, but the file has "
                           "%lld (expected an 8-byte little-endian header length, that many "
                           "bytes of JSON, then the tensor data)", path,
                           (unsigned long long)hlen, (long long)st.st_size);
        if (hlen < 2)
            return qt_fail(QT_E_FORMAT, "%s: header length %llu; expected at least 2 (the "
                           "JSON object {})", path, (unsigned long long)hlen);
        return qt_fail(QT_E_FORMAT, "%s: header length %llu is over qtrain's limit of %d "
                       "bytes of JSON (QT_ST_MAX_HEADER)", path, (unsigned long long)hlen,
                       QT_ST_MAX_HEADER);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return qt_fail(QT_E_IO, "%s: cannot map: %s", path, strerror(errno));
    s->used = 1;
    s->path = path;
    s->map = m;
    s->map_len = st.st_size;
    s->data_start = 8 + (int64_t)hlen;
    s->n = 0;
    s->n_meta = 0;
    rc = qt_st_parse(s);
    if (rc) {
        qt_st_release(s);
        return rc;
    }
    *h = k;
    return QT_OK;
}

void qt_st_close(int h)
{
    if (h >= 0 && h < QT_ST_MAX_OPEN && qt_st_rd.slot[h].used)
        qt_st_release(&qt_st_rd.slot[h]);
}

uint64_t qt_st_hash(int h)
{
    return qt_hash64(qt_st_rd.slot[h].map, (size_t)qt_st_rd.slot[h].map_len);
}
int32_t qt_st_count(int h) { return qt_st_rd.slot[h].n; }
const qt_st_tensor *qt_st_at(int h, int32_t i) { return &qt_st_rd.slot[h].t[i]; }

const qt_st_tensor *qt_st_find(int h, const char *name)
{
    const qt_st_slot *s = &qt_st_rd.slot[h];
    uint32_t m = QT_ST_HASH_SLOTS - 1, i = qt_st_hash_name(name) & m;
    while (s->hash[i]) {
        if (!strcmp(s->t[s->hash[i] - 1].name, name))
            return &s->t[s->hash[i] - 1];
        i = (i + 1) & m;
    }
    return NULL;
}

const char *qt_st_meta(int h, const char *key)
{
    const qt_st_slot *s = &qt_st_rd.slot[h];
    for (int32_t i = 0; i < s->n_meta; i++)
        if (!strcmp(s->meta_key[i], key))
            return s->meta_val[i];
    return NULL;
}

const void *qt_st_data(int h, const qt_st_tensor *t)
{
    return qt_st_rd.slot[h].map + qt_st_rd.slot[h].data_start + t->begin;
}

/* IEEE half -> float by bit manipulation (subnormals normalised by shifting). */
static float qt_st_f16(uint16_t x)
{
    uint32_t sign = (uint32_t)(x & 0x8000u) << 16, e = (x >> 10) & 0x1fu, m = x & 0x3ffu, bits;
    if (e == 0x1f) {
        bits = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    } else if (!m) {
        bits = sign;
    } else {
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int qt_st_read_f32(int h, const qt_st_tensor *t, int64_t first, int64_t n, float *dst)
{
    const unsigned char *src = (const unsigned char *)qt_st_data(h, t);
    switch (t->dtype) {
    case QT_ST_F32:
        memcpy(dst, src + 4 * first, (size_t)(4 * n));
        return 0;
    case QT_ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            const unsigned char *b = src + 2 * (first + i);
            uint32_t bits = ((uint32_t)b[0] | (uint32_t)b[1] << 8) << 16;
            memcpy(&dst[i], &bits, 4);
        }
        return 0;
    case QT_ST_F16:
        for (int64_t i = 0; i < n; i++) {
            const unsigned char *b = src + 2 * (first + i);
            dst[i] = qt_st_f16((uint16_t)(b[0] | b[1] << 8));
        }
        return 0;
    case QT_ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, src + 8 * (first + i), 8);
            dst[i] = (float)v;
        }
        return 0;
    default:
        return -1;
    }
}
