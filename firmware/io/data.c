/* data.c - token streams: qt_data_open / qt_data_fill / qt_data_close (qt_io.h).
 *
 * Accepted files (mapped read-only, never copied):
 *  - NumPy .npy, format version 1, 2 or 3: magic "\x93NUMPY", major, minor, header length
 *    (uint16 LE for v1, uint32 LE for v2/v3), a Python dict literal with exactly the keys
 *    'descr', 'fortran_order', 'shape' (parsed strictly: balanced braces, each key once,
 *    fortran_order True or False, shape a tuple of integers); payload follows. descr must
 *    be a little-endian (or byte-order-free) integer: |u1 |i1 <u2 <i2 <u4 <i4 <u8 <i8. Any
 *    shape, flattened in C order; fortran_order True is refused (NumPy writes it only for
 *    arrays of 2 or more dimensions that are not C-contiguous).
 *  - "QTTOKENS" raw format, version 1 or 2. A 24-byte (version 1) or 32-byte (version 2)
 *    header, all little-endian:
 *        bytes 0..7   magic "QTTOKENS"
 *        bytes 8..11  uint32 version, 1 or 2
 *        bytes 12..15 uint32 bytes per token, 2 or 4
 *        bytes 16..23 uint64 token count N
 *        bytes 24..27 (version 2) uint32 end-of-document id: the separator that follows
 *                     each document (qtrain-data's eos=), 0xFFFFFFFF: none (not separated)
 *        bytes 28..31 (version 2) uint32 reserved, 0
 *    followed by exactly N tokens, unsigned little-endian of that width, nothing after.
 *    Version 1 records no separator (doc_sep QT_DATA_SEP_UNKNOWN, as .npy and raw files).
 *  - Headerless raw tokens when raw_dtype is "uint16" or "uint32" (file size a multiple of
 *    the width).
 *  - path NULL: the embedded corpus (corpus.c), one token per byte; needs vocab >= 256.
 *    One stream of plain text with no separator byte (doc_sep QT_DATA_SEP_NONE).
 * The document separator for packing (qt_data_doc_sep): the plan's eos_id when it has one
 * (a file that records another id is refused), else the one the file records.
 * Invariants after a successful open: every token is in [0, vocab); n_tokens >= seq_len+1;
 * n_windows = (n_tokens-1)/seq_len >= 1. Signed files are validated as signed, so after
 * open every token can be read as an unsigned integer of the same width (8-byte tokens
 * are allowed: bytes_per_token may be 8 as well as 1, 2, 4).
 * Data rule (tests/golden/SPEC.md section 2): window n covers tokens [n*S, n*S+S];
 * packed documents (qt_data_tokens with positions) end at the plan's eos id;
 * optimizer step i, global sequence j uses window (i*B + j) % W.
 * A file that changes after open breaks those invariants, so: qt_data_check compares the
 * path's device/inode and the open file's size and modification time with what they were
 * at open (two stat calls; main runs it around every step); qt_data_fill re-checks every
 * id it hands out against vocab (an id written into the mapping after the validation
 * would index outside the embedding) and writes 0 in its place; and a SIGBUS inside a
 * token mapping (file truncated under it) ends the process with a message naming the file
 * (write + _exit, async-signal-safe; a SIGBUS elsewhere gets the default action).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"
#include "corpus.h"
#include "qt_hash64.h"

#define QT_DATA_MAX_OPEN 4
#define QT_QTT_HEADER 24
#define QT_QTT_HEADER2 32
#define QT_QTT_NO_SEP 0xFFFFFFFFu

typedef struct qt_map_slot {
    const qt_data *owner;
    void *map;
    size_t len;
    int fd;                       /* kept open: fstat sees a rewrite or truncation */
    dev_t dev;                    /* identity, size and mtime at open */
    ino_t ino;
    off_t size;
    struct timespec mtime;
    char sigbus_msg[512];         /* preformatted: the SIGBUS handler only writes it */
    size_t sigbus_len;
} qt_map_slot;

static struct {
    qt_map_slot slot[QT_DATA_MAX_OPEN];
    int handler_installed;
    struct sigaction old_bus;
} qt_dat;

/* SIGBUS inside a token mapping: the file shrank under it. Async-signal-safe: reads the
 * static slots, write(2), _exit(2). Elsewhere: the previous action takes over (a fault
 * re-executes the access and reaches it with its own siginfo; a sent signal is re-sent). */
static void qt_data_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const unsigned char *a = (const unsigned char *)si->si_addr;
    for (int k = 0; k < QT_DATA_MAX_OPEN; k++) {
        const qt_map_slot *s = &qt_dat.slot[k];
        if (s->owner && a >= (const unsigned char *)s->map &&
            a < (const unsigned char *)s->map + s->len) {
            ssize_t w = write(2, s->sigbus_msg, s->sigbus_len);
            (void)w;
            _exit(1);
        }
    }
    sigaction(sig, &qt_dat.old_bus, NULL);
    if (si->si_code <= 0)
        raise(sig);
}

static void qt_data_install_handler(void)
{
    if (qt_dat.handler_installed)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = qt_data_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &qt_dat.old_bus) == 0)
        qt_dat.handler_installed = 1;
}

typedef struct qt_fmt {
    int64_t offset;       /* payload start in the file */
    int64_t n;            /* tokens */
    int32_t width;        /* bytes per token */
    int32_t is_signed;
    int64_t sep;          /* qt_data.doc_sep */
} qt_fmt;

static uint64_t qt_le(const unsigned char *b, int width)
{
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

static int qt_npy_descr(const char *path, const char *got, qt_fmt *f)
{
    static const struct { const char *d; int w, s; } ok[] = {
        { "|u1", 1, 0 }, { "|i1", 1, 1 }, { "<u2", 2, 0 }, { "<i2", 2, 1 },
        { "<u4", 4, 0 }, { "<i4", 4, 1 }, { "<u8", 8, 0 }, { "<i8", 8, 1 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(got, ok[i].d)) {
            f->width = ok[i].w;
            f->is_signed = ok[i].s;
            return QT_OK;
        }
    if (strchr("fcbOSUVmM?", got[1] ? got[1] : 'x') && got[0])
        return qt_fail(QT_E_FORMAT, "%s: .npy dtype '%s' is not an integer type (token "
                          "files need |u1 <u2 <u4 <i2 <i4 <i8 <u8)", path, got);
    return qt_fail(QT_E_FORMAT, "%s: unsupported .npy dtype '%s' (need a little-endian "
                      "integer: |u1 <u2 <u4 <i2 <i4 <i8 <u8)", path, got);
}

/* The header dict, parsed strictly (what NumPy writes, as a Python literal): '{', then the
 * keys 'descr' (a quoted string), 'fortran_order' (True or False) and 'shape' (a tuple of
 * non-negative integers; one element needs its comma), each exactly once in any order,
 * separated by ',' with an optional trailing ',', then '}' and nothing but blanks and the
 * newline up to the header's end. h is NUL-terminated at that end. */
typedef struct qt_npy_dict {
    const char *path, *h;
    char descr[16];
    int open;             /* after the '{' */
    int fortran, dims, seen[3];
    int64_t n;
} qt_npy_dict;

static const char *qt_npy_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* "expected X at byte B, found 'c'" (or "..., but the header ends") */
static int qt_npy_expected(const qt_npy_dict *d, const char *p, const char *what)
{
    if (!*p || *p == '\n' || *p == '\r')
        return qt_fail(QT_E_FORMAT, "%s: bad .npy header: expected %s, but the header ends%s",
                       d->path, what, d->open ? ": the dict is not closed" : "");
    return qt_fail(QT_E_FORMAT, "%s: bad .npy header: expected %s at byte %d, found '%c'",
                   d->path, what, (int)(p - d->h), *p);
}

/* A quoted string (' or ") into out (at most cap-1 characters); NULL when p holds none. */
static const char *qt_npy_string(const char *p, char *out, size_t cap)
{
    char q = *p;
    size_t n = 0;
    if (q != '\'' && q != '"')
        return NULL;
    for (p++; *p && *p != q && *p != '\n'; p++)
        if (n + 1 < cap)
            out[n++] = *p;
    out[n] = '\0';
    return *p == q ? p + 1 : NULL;
}

static int qt_npy_shape(qt_npy_dict *d, const char **pp)
{
    const char *p = *pp;
    if (*p != '(')
        return qt_fail(QT_E_FORMAT, "%s: bad .npy header: 'shape': expected a tuple such as "
                       "(20,) or (4, 5) at byte %d", d->path, (int)(p - d->h));
    const char *open = p;
    int commas = 0;
    d->n = 1;
    d->dims = 0;
    p = qt_npy_ws(p + 1);
    while (*p != ')') {
        if (*p < '0' || *p > '9')
            return qt_npy_expected(d, p, "'shape': expected an integer or ')'");
        int64_t v = 0;
        while (*p >= '0' && *p <= '9') {
            if (v > (INT64_C(1) << 50))
                return qt_fail(QT_E_FORMAT, "%s: bad .npy header: shape too large", d->path);
            v = v * 10 + (*p++ - '0');
        }
        if (v && d->n > (INT64_C(1) << 58) / v)
            return qt_fail(QT_E_FORMAT, "%s: bad .npy header: shape too large", d->path);
        d->n *= v;
        d->dims++;
        p = qt_npy_ws(p);
        if (*p == ',') {
            commas++;
            p = qt_npy_ws(p + 1);
        } else if (*p != ')') {
            return qt_npy_expected(d, p, "'shape': expected ',' or ')' after a dimension");
        }
    }
    if (d->dims == 1 && !commas)
        return qt_fail(QT_E_FORMAT, "%s: bad .npy header: 'shape' %.*s is not a tuple; a "
                       "one-element tuple needs a comma: %.*s,)", d->path,
                       (int)(p + 1 - open), open, (int)(p - open), open);
    *pp = p + 1;
    return QT_OK;
}

static int qt_npy_dict_parse(qt_npy_dict *d)
{
    static const char *const keys[3] = { "descr", "fortran_order", "shape" };
    const char *p = qt_npy_ws(d->h);
    if (*p != '{')
        return qt_npy_expected(d, p, "'{' (a Python dict)");
    d->open = 1;
    p = qt_npy_ws(p + 1);
    while (*p != '}') {
        char key[32];
        const char *k = p;
        p = qt_npy_string(p, key, sizeof key);
        if (!p)
            return qt_npy_expected(d, k, "a key ('descr', 'fortran_order' or 'shape') or the "
                                   "closing '}'");
        int ki = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(key, keys[i]))
                ki = i;
        if (ki < 0)
            return qt_fail(QT_E_FORMAT, "%s: bad .npy header: unexpected key '%s'; expected "
                           "exactly 'descr', 'fortran_order' and 'shape'", d->path, key);
        if (d->seen[ki]++)
            return qt_fail(QT_E_FORMAT, "%s: bad .npy header: key '%s' appears twice", d->path,
                           key);
        p = qt_npy_ws(p);
        if (*p != ':') {
            char what[64];
            snprintf(what, sizeof what, "':' after '%s'", key);
            return qt_npy_expected(d, p, what);
        }
        p = qt_npy_ws(p + 1);
        if (ki == 0) {
            p = qt_npy_string(p, d->descr, sizeof d->descr);
            if (!p)
                return qt_fail(QT_E_FORMAT, "%s: bad .npy header: 'descr': expected a quoted "
                               "dtype string such as '<u2' (structured dtypes are not token "
                               "files)", d->path);
        } else if (ki == 1) {
            char word[16];
            size_t n = 0;
            while (((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || *p == '_') && n + 1 < sizeof word)
                word[n++] = *p++;
            word[n] = '\0';
            if (strcmp(word, "True") && strcmp(word, "False"))
                return qt_fail(QT_E_FORMAT, "%s: bad .npy header: 'fortran_order' is %s; "
                               "expected True or False", d->path, n ? word : "missing");
            d->fortran = word[0] == 'T';
        } else {
            int rc = qt_npy_shape(d, &p);
            if (rc)
                return rc;
        }
        p = qt_npy_ws(p);
        if (*p == ',') {
            p = qt_npy_ws(p + 1);
        } else if (*p != '}') {
            char what[80];
            snprintf(what, sizeof what, "',' or '}' after the value of '%s'", key);
            return qt_npy_expected(d, p, what);
        }
    }
    for (p++; *p; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return qt_fail(QT_E_FORMAT, "%s: bad .npy header: unexpected '%c' at byte %d, "
                           "after the dict's closing '}'", d->path, *p, (int)(p - d->h));
    for (int i = 0; i < 3; i++)
        if (!d->seen[i])
            return qt_fail(QT_E_FORMAT, "%s: bad .npy header: no '%s' key (the dict needs "
                           "exactly 'descr', 'fortran_order' and 'shape')", d->path, keys[i]);
    return QT_OK;
}

static int qt_npy_header(const char *path, const unsigned char *m, int64_t size, qt_fmt *f)
{
    char h[4096];
    int64_t hl, start;
    if (size < 10)
        return qt_fail(QT_E_FORMAT, "%s: bad .npy header: file too short", path);
    if (m[6] == 1) {
        hl = (int64_t)qt_le(m + 8, 2);
        start = 10;
    } else if (m[6] == 2 || m[6] == 3) {
        if (size < 12)
            return qt_fail(QT_E_FORMAT, "%s: bad .npy header: file too short", path);
        hl = (int64_t)qt_le(m + 8, 4);
        start = 12;
    } else {
        return qt_fail(QT_E_FORMAT, "%s: bad .npy header: unknown version %d", path, m[6]);
    }
    if (hl <= 0 || hl >= (int64_t)sizeof h || start + hl > size)
        return qt_fail(QT_E_FORMAT, "%s: bad .npy header: header length %lld", path,
                          (long long)hl);
    memcpy(h, m + start, (size_t)hl);
    h[hl] = '\0';
    f->offset = start + hl;
    qt_npy_dict d;
    memset(&d, 0, sizeof d);
    d.path = path;
    d.h = h;
    int rc = qt_npy_dict_parse(&d);
    if (rc)
        return rc;
    rc = qt_npy_descr(path, d.descr, f);
    if (rc)
        return rc;
    if (d.fortran)
        return qt_fail(QT_E_FORMAT, "%s: .npy array is in Fortran order (fortran_order: True); "
                          "save it C-ordered (np.ascontiguousarray)", path);
    f->n = d.n;
    return QT_OK;
}

static int qt_detect(const char *path, const char *raw_dtype, const unsigned char *m,
                     int64_t size, qt_fmt *f)
{
    memset(f, 0, sizeof *f);
    f->sep = QT_DATA_SEP_UNKNOWN;
    if (raw_dtype && *raw_dtype) {
        if (!strcmp(raw_dtype, "uint16"))
            f->width = 2;
        else if (!strcmp(raw_dtype, "uint32"))
            f->width = 4;
        else
            return qt_fail(QT_E_ARG, "%s: raw dtype \"%s\" not supported (uint16 or uint32)",
                              path, raw_dtype);
        if (size % f->width)
            return qt_fail(QT_E_FORMAT, "%s: raw %s file has %lld bytes, not a multiple of "
                              "%d", path, raw_dtype, (long long)size, (int)f->width);
        f->n = size / f->width;
        return QT_OK;
    }
    if (size >= 6 && !memcmp(m, "\x93NUMPY", 6)) {
        int rc = qt_npy_header(path, m, size, f);
        if (rc)
            return rc;
    } else if (size >= 8 && !memcmp(m, "QTTOKENS", 8)) {
        if (size < QT_QTT_HEADER)
            return qt_fail(QT_E_FORMAT, "%s: bad QTTOKENS header: file has %lld bytes, the "
                              "header needs %d", path, (long long)size, QT_QTT_HEADER);
        uint32_t ver = (uint32_t)qt_le(m + 8, 4), w = (uint32_t)qt_le(m + 12, 4);
        uint64_t n = qt_le(m + 16, 8);
        if (ver != 1 && ver != 2)
            return qt_fail(QT_E_FORMAT, "%s: bad QTTOKENS header: version %u (expected 1 or "
                              "2)", path, ver);
        f->offset = QT_QTT_HEADER;
        if (ver == 2) {
            if (size < QT_QTT_HEADER2)
                return qt_fail(QT_E_FORMAT, "%s: bad QTTOKENS header: file has %lld bytes, "
                               "the version 2 header needs %d", path, (long long)size,
                               QT_QTT_HEADER2);
            uint32_t sep = (uint32_t)qt_le(m + 24, 4), rsv = (uint32_t)qt_le(m + 28, 4);
            if (rsv != 0)
                return qt_fail(QT_E_FORMAT, "%s: bad QTTOKENS header: reserved bytes 28..31 "
                               "hold %u (expected 0)", path, rsv);
            if (sep != QT_QTT_NO_SEP && w == 2 && sep > 0xFFFFu)
                return qt_fail(QT_E_FORMAT, "%s: bad QTTOKENS header: end-of-document id %u "
                               "does not fit its 2-byte tokens", path, sep);
            f->sep = sep == QT_QTT_NO_SEP ? QT_DATA_SEP_NONE : (int64_t)sep;
            f->offset = QT_QTT_HEADER2;
        }
        if (w != 2 && w != 4)
            return qt_fail(QT_E_FORMAT, "%s: bad QTTOKENS header: %u bytes per token "
                              "(expected 2 or 4)", path, w);
        if (n > (uint64_t)1 << 58)
            return qt_fail(QT_E_FORMAT, "%s: bad QTTOKENS header: token count %llu", path,
                              (unsigned long long)n);
        f->width = (int32_t)w;
        f->n = (int64_t)n;
    } else {
        return qt_fail(QT_E_FORMAT, "%s: unknown token file format (expected the .npy magic "
                          "or a QTTOKENS header; for a headerless file of raw ids give "
                          "data_dtype=uint16 or data_dtype=uint32)", path);
    }
    if (size - f->offset != f->n * f->width)
        return qt_fail(QT_E_FORMAT, "%s: payload has %lld bytes but the header declares "
                          "%lld tokens of %d bytes (%lld bytes)", path,
                          (long long)(size - f->offset), (long long)f->n, (int)f->width,
                          (long long)(f->n * f->width));
    return QT_OK;
}

static int qt_check_tokens(const char *path, const unsigned char *b, const qt_fmt *f,
                           int64_t vocab)
{
    for (int64_t i = 0; i < f->n; i++) {
        uint64_t u = qt_le(b + i * f->width, f->width);
        int64_t v;
        if (f->is_signed && f->width < 8 && (u >> (8 * f->width - 1)))
            v = (int64_t)u - ((int64_t)1 << (8 * f->width));
        else
            v = (int64_t)u;
        if ((f->is_signed && v < 0) || (!f->is_signed && u >= (uint64_t)vocab) || v >= vocab) {
            char id[32];   /* signed files print signed ids, unsigned ones unsigned */
            if (f->is_signed)
                snprintf(id, sizeof id, "%lld", (long long)v);
            else
                snprintf(id, sizeof id, "%llu", (unsigned long long)u);
            return qt_fail(QT_E_RANGE, "%s: token id %s at position %lld is outside "
                              "[0, %lld) (vocab_size)", path, id, (long long)i,
                              (long long)vocab);
        }
    }
    return QT_OK;
}

static int qt_data_finish(qt_data *d, const char *path, int64_t seq_len)
{
    const char *what = path ? path : "(embedded corpus)";
    if (seq_len <= 0)
        return qt_fail(QT_E_ARG, "%s: seq_len %lld must be positive", what,
                          (long long)seq_len);
    if (d->n_tokens < seq_len + 1)
        return qt_fail(QT_E_RANGE, "%s: %lld token%s, need at least seq_len+1 = %lld for one "
                          "window (max_target_length %lld, and the next token as its last "
                          "target): give more data, or a run file with a smaller "
                          "max_target_length", what, (long long)d->n_tokens,
                          d->n_tokens == 1 ? "" : "s", (long long)(seq_len + 1),
                          (long long)seq_len);
    d->n_windows = (d->n_tokens - 1) / seq_len;
    return QT_OK;
}

int qt_data_open(qt_data *d, const char *path, const char *raw_dtype, int64_t vocab,
                 int64_t seq_len)
{
    memset(d, 0, sizeof *d);
    if (!path) {
        if (vocab < 256)
            return qt_fail(QT_E_ARG, "(embedded corpus): byte-level tokens need vocab_size "
                              ">= 256, the plan has %lld; pass data=<token file>",
                              (long long)vocab);
        d->base = qt_corpus_bytes(&d->n_tokens);
        d->bytes_per_token = 1;
        d->vocab = vocab;
        d->file_bytes = d->n_tokens;
        d->hash = qt_hash64(d->base, (size_t)d->n_tokens);
        d->doc_sep = QT_DATA_SEP_NONE;   /* plain text, no separator byte */
        return qt_data_finish(d, NULL, seq_len);
    }
    qt_map_slot *s = NULL;
    for (int k = 0; k < QT_DATA_MAX_OPEN; k++)
        if (!qt_dat.slot[k].owner) {
            s = &qt_dat.slot[k];
            break;
        }
    if (!s)
        return qt_fail(QT_E_PLAN, "%s: more than %d token files open", path,
                          QT_DATA_MAX_OPEN);
    /* O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a
     * writer; reads of a regular file ignore it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return qt_fail(QT_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return qt_fail(QT_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return qt_fail(QT_E_ARG, "%s: is a directory; expected a token file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return qt_fail(QT_E_ARG, "%s: is not a regular file (a device, FIFO or socket); "
                          "expected a token file", path);
    }
    if (st.st_size <= 0) {
        close(fd);
        return qt_fail(QT_E_FORMAT, "%s: empty file", path);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        close(fd);
        return qt_fail(QT_E_IO, "%s: cannot map: %s", path, strerror(e));
    }
    /* the handler is in place before the first read of the mapping (validation) */
    s->map = m;
    s->len = (size_t)st.st_size;
    int ml = snprintf(s->sigbus_msg, sizeof s->sigbus_msg, "qtrain: data file %s was truncated "
                      "or replaced while mapped (SIGBUS reading its tokens); stopping\n", path);
    s->sigbus_len = ml < 0 ? 0 : (size_t)ml < sizeof s->sigbus_msg ? (size_t)ml
                                                                    : sizeof s->sigbus_msg - 1;
    s->owner = d;
    qt_data_install_handler();
    qt_fmt f;
    int rc = qt_detect(path, raw_dtype, m, st.st_size, &f);
    if (!rc)
        rc = qt_check_tokens(path, (const unsigned char *)m + f.offset, &f, vocab);
    if (!rc) {
        d->path = path;
        d->base = (const unsigned char *)m + f.offset;
        d->n_tokens = f.n;
        d->bytes_per_token = f.width;
        d->vocab = vocab;
        d->file_bytes = st.st_size;
        d->hash = qt_hash64(m, (size_t)st.st_size);
        d->doc_sep = f.sep;
        rc = qt_data_finish(d, path, seq_len);
    }
    if (rc) {
        munmap(m, (size_t)st.st_size);
        close(fd);
        s->owner = NULL;
        memset(d, 0, sizeof *d);
        return rc;
    }
    s->fd = fd;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->size = st.st_size;
    s->mtime = st.st_mtim;
    return QT_OK;
}

int qt_data_check(const qt_data *d)
{
    if (!d->path)
        return QT_OK;   /* the embedded corpus cannot change */
    for (int k = 0; k < QT_DATA_MAX_OPEN; k++) {
        const qt_map_slot *s = &qt_dat.slot[k];
        if (s->owner != d)
            continue;
        struct stat st, ps;
        if (fstat(s->fd, &st) != 0)
            return qt_fail(QT_E_IO, "data file %s: cannot stat: %s", d->path,
                              strerror(errno));
        if (st.st_size != s->size)
            return qt_fail(QT_E_IO, "data file %s changed during the run: its size went "
                              "from %lld to %lld bytes; stopping (its tokens were validated "
                              "when it was opened; restart to use the new contents)", d->path,
                              (long long)s->size, (long long)st.st_size);
        if (st.st_mtim.tv_sec != s->mtime.tv_sec || st.st_mtim.tv_nsec != s->mtime.tv_nsec)
            return qt_fail(QT_E_IO, "data file %s changed during the run: it was written "
                              "to (modification time changed); stopping (its tokens were "
                              "validated when it was opened; restart to use the new contents)",
                              d->path);
        if (stat(d->path, &ps) != 0)
            return qt_fail(QT_E_IO, "data file %s changed during the run: it can no longer "
                              "be found at its path (%s); stopping", d->path, strerror(errno));
        if (ps.st_dev != s->dev || ps.st_ino != s->ino)
            return qt_fail(QT_E_IO, "data file %s changed during the run: another file "
                              "was put at its path (inode %llu, was %llu); stopping (restart "
                              "to use the new file)", d->path, (unsigned long long)ps.st_ino,
                              (unsigned long long)s->ino);
        return QT_OK;
    }
    return QT_OK;
}

/* Token i as read now; ids were validated at open, but the file may have been rewritten
 * since: an id outside [0, vocab) is counted in *bad (first position in *bad_at) and read
 * as 0, so it can never index outside the embedding. */
static int32_t qt_token(const qt_data *d, int64_t i, int64_t *bad, int64_t *bad_at,
                        uint64_t *bad_id)
{
    const unsigned char *b = (const unsigned char *)d->base + i * d->bytes_per_token;
    uint64_t u = qt_le(b, d->bytes_per_token);
    if (d->vocab > 0 && u >= (uint64_t)d->vocab) {
        if (!(*bad)++) {
            *bad_at = i;
            *bad_id = u;
        }
        return 0;
    }
    return (int32_t)u;
}

/* The error of a fill that met an id outside the vocabulary (the file changed). */
static int qt_data_changed(const qt_data *d, uint64_t bad_id, int64_t bad_at)
{
    return qt_fail(QT_E_RANGE, "data file %s changed during the run: token id %llu at "
                   "position %lld is outside [0, %lld) (vocab_size); it was in range when the "
                   "file was opened; stopping", d->path ? d->path : "(embedded corpus)",
                   (unsigned long long)bad_id, (long long)bad_at, (long long)d->vocab);
}

int qt_data_fill(const qt_data *d, int64_t step, int64_t global_batch, int64_t first_seq,
                 int64_t n_seqs, int64_t seq_len, int32_t *inputs, int32_t *targets)
{
    return qt_data_fill_part(d, step, global_batch, first_seq, n_seqs, seq_len, 0, seq_len,
                             inputs, targets);
}

int qt_data_fill_part(const qt_data *d, int64_t step, int64_t global_batch, int64_t first_seq,
                      int64_t n_seqs, int64_t seq_len, int64_t tok_lo, int64_t tok_n,
                      int32_t *inputs, int32_t *targets)
{
    int64_t bad = 0, bad_at = 0;
    uint64_t bad_id = 0;
    for (int64_t j = 0; j < n_seqs; j++) {
        int64_t w = (step * global_batch + first_seq + j) % d->n_windows;
        int64_t at = w * seq_len + tok_lo;
        for (int64_t t = 0; t < tok_n; t++) {
            inputs[j * tok_n + t] = qt_token(d, at + t, &bad, &bad_at, &bad_id);
            targets[j * tok_n + t] = qt_token(d, at + t + 1, &bad, &bad_at, &bad_id);
        }
    }
    return bad ? qt_data_changed(d, bad_id, bad_at) : QT_OK;
}

/* Packed documents: positions[j*S + t] = position of input token t of sequence j inside
 * its document (a document starts at the window's first token and after every eos), over
 * the whole window; the targets of the part that are the next document's first token (the
 * input is eos) become -1: no loss. */
static int qt_data_pack(const qt_data *d, int64_t step, int64_t global_batch,
                        int64_t first_seq, int64_t n_seqs, int64_t seq_len, int64_t tok_n,
                        int32_t eos, const int32_t *inputs, int32_t *targets,
                        int32_t *positions)
{
    int64_t bad = 0, bad_at = 0;
    uint64_t bad_id = 0;
    for (int64_t j = 0; j < n_seqs; j++) {
        int64_t at = ((step * global_batch + first_seq + j) % d->n_windows) * seq_len;
        int32_t *pos = positions + j * seq_len;
        pos[0] = 0;
        for (int64_t t = 1; t < seq_len; t++)
            pos[t] = qt_token(d, at + t - 1, &bad, &bad_at, &bad_id) == eos ? 0 : pos[t - 1] + 1;
        for (int64_t t = 0; t < tok_n; t++)
            if (inputs[j * tok_n + t] == eos) targets[j * tok_n + t] = -1;
    }
    return bad ? qt_data_changed(d, bad_id, bad_at) : QT_OK;
}

int qt_data_tokens(const void *src, int64_t step, int64_t global_batch, int64_t first_seq,
                   int64_t n_seqs, int64_t seq_len, int64_t tok_lo, int64_t tok_n,
                   int32_t eos, int32_t *inputs, int32_t *targets, int32_t *positions)
{
    const qt_data *d = (const qt_data *)src;
    int rc = qt_data_fill_part(d, step, global_batch, first_seq, n_seqs, seq_len, tok_lo,
                               tok_n, inputs, targets);
    if (rc || !positions) return rc;
    return qt_data_pack(d, step, global_batch, first_seq, n_seqs, seq_len, tok_n, eos, inputs,
                        targets, positions);
}

/* "data=FILE" / "the embedded corpus" into buf */
static const char *qt_data_name(const qt_data *d, const char *key, char *buf, size_t n)
{
    if (d->path)
        snprintf(buf, n, "%s=%s", key, d->path);
    else
        snprintf(buf, n, "the embedded corpus");
    return buf;
}

int qt_data_doc_sep(const qt_data *d, const char *key, int32_t plan_eos, int32_t *eos,
                    char *from, size_t from_len)
{
    char nm[4200];
    qt_data_name(d, key, nm, sizeof nm);
    if (plan_eos >= 0) {
        if (d->doc_sep >= 0 && d->doc_sep != plan_eos)
            return qt_fail(QT_E_ARG, "%s records end-of-document id %lld (its QTTOKENS header: "
                           "the eos= it was encoded with) but the plan's eos_id is %d "
                           "(packing: true); expected the same id: regenerate the plan with "
                           "eos_id: %lld or without eos_id (the file's id is then used), or "
                           "re-encode the text with eos=%d", nm, (long long)d->doc_sep,
                           (int)plan_eos, (long long)d->doc_sep, (int)plan_eos);
        *eos = plan_eos;
        snprintf(from, from_len, "the plan's eos_id");
        return QT_OK;
    }
    if (d->doc_sep == QT_DATA_SEP_UNKNOWN)
        return qt_fail(QT_E_ARG, "%s: packing: true needs the document separator's token id, "
                       "and neither the plan (eos_id unset, -1) nor the file (.npy, raw and "
                       "QTTOKENS version 1 files record none) gives it: set eos_id in the "
                       "run file (151643 is <|endoftext|> of the Qwen vocabulary), or encode "
                       "the text with qtrain-data, whose QTTOKENS version 2 header records it, "
                       "or set packing: false (each window one document, as MaxText's "
                       "flat-token reader, the OLMo numpy mix, trains it)", nm);
    if (d->doc_sep >= d->vocab)
        return qt_fail(QT_E_ARG, "%s records end-of-document id %lld (its QTTOKENS header), "
                       "outside the plan's vocabulary [0, %lld) (vocab_size): the file was "
                       "encoded with another tokenizer", nm, (long long)d->doc_sep,
                       (long long)d->vocab);
    *eos = (int32_t)d->doc_sep;
    if (d->doc_sep >= 0)
        snprintf(from, from_len, "the QTTOKENS header of %s", nm);
    else if (d->path)
        snprintf(from, from_len, "the QTTOKENS header of %s: none (encoded with eos=none), so "
                 "each window is one document", nm);
    else
        snprintf(from, from_len, "the embedded corpus: none (byte tokens of plain text, no "
                 "separator), so each window is one document");
    return QT_OK;
}

int qt_data_doc_sep_agrees(const qt_data *d, const char *key, int32_t eos, const char *from)
{
    char nm[4200];
    if (d->doc_sep < 0 || d->doc_sep == eos)
        return QT_OK;
    qt_data_name(d, key, nm, sizeof nm);
    if (eos < 0)
        return qt_fail(QT_E_ARG, "%s records end-of-document id %lld (its QTTOKENS header) but "
                       "the training data has no separator (%s); expected an eval file of the "
                       "same encoding", nm, (long long)d->doc_sep, from);
    return qt_fail(QT_E_ARG, "%s records end-of-document id %lld (its QTTOKENS header) but the "
                   "run's separator is %d (%s); expected the same id", nm,
                   (long long)d->doc_sep, (int)eos, from);
}

void qt_data_close(qt_data *d)
{
    int open_left = 0;
    for (int k = 0; k < QT_DATA_MAX_OPEN; k++) {
        qt_map_slot *s = &qt_dat.slot[k];
        if (s->owner == d) {
            s->owner = NULL;
            munmap(s->map, s->len);
            close(s->fd);
        }
        open_left += s->owner != NULL;
    }
    if (!open_left && qt_dat.handler_installed) {
        sigaction(SIGBUS, &qt_dat.old_bus, NULL);
        qt_dat.handler_installed = 0;
    }
    memset(d, 0, sizeof *d);
}
