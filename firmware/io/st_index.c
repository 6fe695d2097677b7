/* st_index.c - model.safetensors.index.json reader and `load=` path resolution.
 *
 * Why the whole index is read into one static buffer: names and shard file names are
 * NUL-terminated in place, so the weight_map needs no string pool and no heap. Lookups use
 * an open-addressing hash of entry indices (FNV-1a), as st_read.c does for tensors.
 * The JSON scanner is iterative: weight_map is a flat object; metadata and unknown keys
 * are skipped by counting bracket depth, so no recursion is needed.
 * Directories are listed with getdents64 on an open descriptor rather than opendir(),
 * which allocates (musl and glibc both call malloc in opendir).
 * Invariants: see st_index.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "qt_io.h"
#include "qt_err.h"
#include "st_index.h"

#define QT_SX_HASH (1u << 19)        /* > 2 x QT_SX_MAX_ENTRIES keeps probes short */
#define QT_SX_SHARD_HASH 8192u       /* > 2 x QT_SX_MAX_SHARDS */

static struct {
    char json[QT_SX_MAX_JSON + 1];
    char dir[QT_SX_PATH_MAX];        /* directory of the index, "" = current */
    const char *path;
    int64_t json_used;                         /* bytes of json[] taken by open indexes */
    int32_t n, n_shards, n_files, n_meta;
    const char *meta_key[QT_SX_MAX_META], *meta_val[QT_SX_MAX_META];
    int32_t meta_file[QT_SX_MAX_META];
    const char *name[QT_SX_MAX_ENTRIES];
    int32_t shard[QT_SX_MAX_ENTRIES];
    unsigned char mark[QT_SX_MAX_ENTRIES];
    uint32_t hash[QT_SX_HASH];                 /* entry + 1, 0 = empty */
    const char *shard_name[QT_SX_MAX_SHARDS];
    uint32_t shard_hash[QT_SX_SHARD_HASH];     /* shard + 1, 0 = empty */
    unsigned char dents[1 << 16];
} qt_sx;

static uint32_t qt_sx_fnv(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 16777619u;
    }
    return h;
}

static int qt_ends(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* ---- path resolution ---- */

/* Find the only regular "*.safetensors" entry of dir (getdents64, static buffer). */
static int qt_sx_only_st(const char *dir, char *out, int64_t n)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), found = 0;
    char first[256] = "", second[256] = "";
    if (fd < 0)
        return qt_fail(QT_E_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    for (;;) {
        long got = syscall(SYS_getdents64, fd, qt_sx.dents, sizeof qt_sx.dents);
        if (got < 0) {
            int e = errno;
            close(fd);
            return qt_fail(QT_E_IO, "%s: cannot list directory: %s", dir, strerror(e));
        }
        if (got == 0)
            break;
        for (long at = 0; at < got;) {
            /* linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[] */
            unsigned short reclen;
            memcpy(&reclen, qt_sx.dents + at + 16, 2);
            const char *nm = (const char *)qt_sx.dents + at + 19;
            if (qt_ends(nm, ".safetensors") && nm[0] != '.') {
                snprintf(found ? second : first, 256, "%s", nm);
                found++;
            }
            at += reclen;
        }
    }
    close(fd);
    if (found != 1)
        return qt_fail(QT_E_ARG, "%s: directory has no %s and %s *.safetensors files "
                          "(%s%s%s); name the file to load", dir, QT_SX_INDEX_NAME,
                          found ? "several" : "no", first, found > 1 ? ", " : "", second);
    if (snprintf(out, (size_t)n, "%s/%s", dir, first) >= n)
        return qt_fail(QT_E_ARG, "%s: path too long", dir);
    return QT_OK;
}

int qt_sx_resolve(const char *path, char *out, int64_t n, int *is_index)
{
    struct stat st;
    *is_index = 0;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (snprintf(out, (size_t)n, "%s/%s", path, QT_SX_INDEX_NAME) >= n)
            return qt_fail(QT_E_ARG, "%s: path too long", path);
        if (stat(out, &st) == 0) {
            /* transformers' from_pretrained(DIR) takes model.safetensors before the index:
             * a directory with both is ambiguous (which weights did the user mean?) */
            char single[QT_SX_PATH_MAX];
            if (snprintf(single, sizeof single, "%s/model.safetensors", path) <
                    (int)sizeof single && lstat(single, &st) == 0)
                return qt_fail(QT_E_ARG, "%s holds both %s (a sharded checkpoint) and "
                               "model.safetensors (a single-file one): transformers' "
                               "from_pretrained loads model.safetensors, qtrain would take "
                               "the index; name the file you mean (%s or %s)", path,
                               QT_SX_INDEX_NAME, single, out);
            *is_index = 1;
            return QT_OK;
        }
        return qt_sx_only_st(path, out, n);
    }
    if (snprintf(out, (size_t)n, "%s", path) >= n)
        return qt_fail(QT_E_ARG, "%s: path too long", path);
    *is_index = qt_ends(path, ".index.json");
    return QT_OK;
}

/* ---- JSON scanner over the static buffer ---- */

typedef struct qt_sj {
    char *p, *end, *start;     /* start: this file's first byte, for error offsets */
} qt_sj;

static int qt_sj_bad(const qt_sj *j, const char *what)
{
    return qt_fail(QT_E_FORMAT, "%s: bad index JSON at byte %lld: %s", qt_sx.path,
                      (long long)(j->p - j->start), what);
}

static void qt_sj_ws(qt_sj *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int qt_sj_peek(qt_sj *j, char c)
{
    qt_sj_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 1;
    }
    return 0;
}

static int qt_sj_expect(qt_sj *j, char c)
{
    char msg[32];
    if (qt_sj_peek(j, c))
        return QT_OK;
    snprintf(msg, sizeof msg, "expected '%c'", c);
    return qt_sj_bad(j, msg);
}

/* Escape-free string, NUL-terminated in place. */
static int qt_sj_string(qt_sj *j, char **out)
{
    qt_sj_ws(j);
    if (j->p >= j->end || *j->p != '"')
        return qt_sj_bad(j, "expected a string");
    char *s = ++j->p;
    while (j->p < j->end && *j->p != '"') {
        if (*j->p == '\\')
            return qt_sj_bad(j, "escaped characters in names are not supported");
        if ((unsigned char)*j->p < 0x20)
            return qt_sj_bad(j, "control character in string");
        j->p++;
    }
    if (j->p >= j->end)
        return qt_sj_bad(j, "unterminated string");
    *j->p++ = '\0';
    *out = s;
    return QT_OK;
}

/* Skip any JSON value by bracket depth (strings may hold escapes and brackets). */
static int qt_sj_skip(qt_sj *j)
{
    int64_t depth = 0;
    qt_sj_ws(j);
    if (j->p >= j->end)
        return qt_sj_bad(j, "expected a value");
    do {
        if (j->p >= j->end)
            return qt_sj_bad(j, "unterminated object or array");
        char c = *j->p;
        if (c == '"') {
            for (j->p++; j->p < j->end && *j->p != '"'; j->p++)
                if (*j->p == '\\')
                    j->p++;
            if (j->p >= j->end)
                return qt_sj_bad(j, "unterminated string");
            j->p++;
        } else if (c == '{' || c == '[') {
            depth++;
            j->p++;
        } else if (c == '}' || c == ']') {
            if (--depth < 0)
                return qt_sj_bad(j, "unbalanced bracket");
            j->p++;
        } else if (depth == 0) {
            char *s = j->p;
            while (j->p < j->end && !strchr(",}] \t\r\n", *j->p))
                j->p++;
            if (j->p == s)
                return qt_sj_bad(j, "expected a value");
        } else {
            j->p++;
        }
    } while (depth > 0);
    return QT_OK;
}

/* ',' -> more, closer -> done. */
static int qt_sj_next(qt_sj *j, char closer, int *more)
{
    if (qt_sj_peek(j, ',')) {
        *more = 1;
        return QT_OK;
    }
    if (qt_sj_peek(j, closer)) {
        *more = 0;
        return QT_OK;
    }
    return qt_sj_bad(j, closer == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

static int32_t qt_sx_add_shard(const char *file)
{
    uint32_t m = QT_SX_SHARD_HASH - 1, i = qt_sx_fnv(file) & m;
    while (qt_sx.shard_hash[i]) {
        if (!strcmp(qt_sx.shard_name[qt_sx.shard_hash[i] - 1], file))
            return (int32_t)qt_sx.shard_hash[i] - 1;
        i = (i + 1) & m;
    }
    if (qt_sx.n_shards >= QT_SX_MAX_SHARDS)
        return -1;
    qt_sx.shard_name[qt_sx.n_shards] = file;
    qt_sx.shard_hash[i] = (uint32_t)++qt_sx.n_shards;
    return qt_sx.n_shards - 1;
}

static int qt_sx_add(char *name, char *file)
{
    uint32_t m = QT_SX_HASH - 1, i = qt_sx_fnv(name) & m;
    if (qt_sx.n >= QT_SX_MAX_ENTRIES)
        return qt_fail(QT_E_FORMAT, "%s: more than %d weight_map entries (QT_SX_MAX_ENTRIES)",
                          qt_sx.path, QT_SX_MAX_ENTRIES);
    if (!*file || strchr(file, '/'))
        return qt_fail(QT_E_FORMAT, "%s: tensor %s: shard file name \"%s\" must be a plain "
                          "file name next to the index", qt_sx.path, name, file);
    while (qt_sx.hash[i]) {
        int32_t e = (int32_t)qt_sx.hash[i] - 1;
        if (!strcmp(qt_sx.name[e], name))
            return qt_fail(QT_E_FORMAT, "%s: tensor %s appears twice in weight_map (%s and "
                              "%s)", qt_sx.path, name, qt_sx.shard_name[qt_sx.shard[e]], file);
        i = (i + 1) & m;
    }
    int32_t s = qt_sx_add_shard(file);
    if (s < 0)
        return qt_fail(QT_E_FORMAT, "%s: more than %d shard files (QT_SX_MAX_SHARDS)",
                          qt_sx.path, QT_SX_MAX_SHARDS);
    qt_sx.name[qt_sx.n] = name;
    qt_sx.shard[qt_sx.n] = s;
    qt_sx.mark[qt_sx.n] = 0;
    qt_sx.hash[i] = (uint32_t)++qt_sx.n;
    return QT_OK;
}

/* The "metadata" object: escape-free string values are kept (NUL-terminated in place) for
 * qt_sx_meta; numbers (total_size), other values and entries beyond QT_SX_MAX_META are
 * skipped, so any Hugging Face index still parses. */
static int qt_sx_parse_meta(qt_sj *j)
{
    int rc, more = 1;
    if ((rc = qt_sj_expect(j, '{')))
        return rc;
    if (qt_sj_peek(j, '}'))
        return QT_OK;
    while (more) {
        char *k;
        if ((rc = qt_sj_string(j, &k)) || (rc = qt_sj_expect(j, ':')))
            return rc;
        qt_sj_ws(j);
        char *v = j->p;
        if ((rc = qt_sj_skip(j)))
            return rc;
        if (*v == '"' && !memchr(v + 1, '\\', (size_t)(j->p - v - 1)) &&
            qt_sx.n_meta < QT_SX_MAX_META) {
            j->p[-1] = '\0';
            qt_sx.meta_key[qt_sx.n_meta] = k;
            qt_sx.meta_val[qt_sx.n_meta] = v + 1;
            qt_sx.meta_file[qt_sx.n_meta++] = qt_sx.n_files;
        }
        if ((rc = qt_sj_next(j, '}', &more)))
            return rc;
    }
    return QT_OK;
}

static int qt_sx_parse(qt_sj *j)
{
    int rc, more = 1, have_map = 0;
    if ((rc = qt_sj_expect(j, '{')))
        return rc;
    if (qt_sj_peek(j, '}'))
        more = 0;
    while (more) {
        char *k;
        if ((rc = qt_sj_string(j, &k)) || (rc = qt_sj_expect(j, ':')))
            return rc;
        if (!strcmp(k, "metadata")) {
            if ((rc = qt_sx_parse_meta(j)))
                return rc;
        } else if (strcmp(k, "weight_map")) {
            if ((rc = qt_sj_skip(j)))
                return rc;
        } else {
            int m = 1;
            if (have_map++)
                return qt_sj_bad(j, "second weight_map");
            if ((rc = qt_sj_expect(j, '{')))
                return rc;
            if (qt_sj_peek(j, '}'))
                m = 0;
            while (m) {
                char *name, *file;
                if ((rc = qt_sj_string(j, &name)) || (rc = qt_sj_expect(j, ':')) ||
                    (rc = qt_sj_string(j, &file)) || (rc = qt_sx_add(name, file)) ||
                    (rc = qt_sj_next(j, '}', &m)))
                    return rc;
            }
        }
        if ((rc = qt_sj_next(j, '}', &more)))
            return rc;
    }
    qt_sj_ws(j);
    if (j->p != j->end)
        return qt_sj_bad(j, "trailing characters after the index object");
    if (!have_map)
        return qt_fail(QT_E_FORMAT, "%s: index has no \"weight_map\" object", qt_sx.path);
    return QT_OK;
}

static void qt_sx_reset(void)
{
    /* Clear only the hash slots in use: a full memset would touch 2 MiB per load. Newest
     * first: an entry's probe chain only runs through slots of entries inserted before it,
     * so those must still be set while its slot is looked up (in insertion order a cleared
     * earlier slot cut the chain and left a later entry's slot behind - found by
     * tests/fuzz/fuzz_st_index). */
    for (int32_t e = qt_sx.n - 1; e >= 0; e--) {
        uint32_t m = QT_SX_HASH - 1, i = qt_sx_fnv(qt_sx.name[e]) & m;
        while (qt_sx.hash[i] && qt_sx.hash[i] != (uint32_t)e + 1)
            i = (i + 1) & m;
        qt_sx.hash[i] = 0;
    }
    for (int32_t s = qt_sx.n_shards - 1; s >= 0; s--) {
        uint32_t m = QT_SX_SHARD_HASH - 1, i = qt_sx_fnv(qt_sx.shard_name[s]) & m;
        while (qt_sx.shard_hash[i] && qt_sx.shard_hash[i] != (uint32_t)s + 1)
            i = (i + 1) & m;
        qt_sx.shard_hash[i] = 0;
    }
    qt_sx.n = 0;
    qt_sx.n_shards = 0;
    qt_sx.n_files = 0;
    qt_sx.n_meta = 0;
    qt_sx.json_used = 0;
}

/* Read index_path into the free part of json[] and parse it into the tables. The first
 * file sets the directory shards are looked up in; later ones must share it. */
static int qt_sx_read(const char *index_path)
{
    struct stat st;
    int rc;
    char dir[QT_SX_PATH_MAX];
    qt_sx.path = index_path;
    const char *slash = strrchr(index_path, '/');
    size_t dl = slash ? (size_t)(slash - index_path) : 0;
    if (dl >= sizeof dir)
        return qt_fail(QT_E_ARG, "%s: path too long", index_path);
    memcpy(dir, index_path, dl);
    dir[dl] = '\0';
    if (slash && !dl)
        snprintf(dir, sizeof dir, "/");
    if (!qt_sx.n_files)
        memcpy(qt_sx.dir, dir, dl + 2 < sizeof dir ? dl + 2 : sizeof dir);
    else if (strcmp(dir, qt_sx.dir))
        return qt_fail(QT_E_ARG, "%s: not in the directory of the first index (%s)",
                       index_path, qt_sx.dir);
    int fd = open(index_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   /* a FIFO: no wait */
    if (fd < 0)
        return qt_fail(QT_E_IO, "%s: cannot open: %s", index_path, strerror(errno));
    char *buf = qt_sx.json + qt_sx.json_used;
    const int64_t room = QT_SX_MAX_JSON - qt_sx.json_used;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > room) {
        close(fd);
        return qt_fail(QT_E_FORMAT, "%s: not a regular file, unreadable, or larger than the "
                       "%lld bytes left of QT_SX_MAX_JSON (%d for all indexes of a load)",
                       index_path, (long long)room, QT_SX_MAX_JSON);
    }
    int64_t got = 0;
    while (got < st.st_size) {
        ssize_t r = pread(fd, buf + got, (size_t)(st.st_size - got), got);
        if (r <= 0) {
            rc = qt_fail(QT_E_IO, "%s: read failed at byte %lld", index_path, (long long)got);
            close(fd);
            return rc;
        }
        got += r;
    }
    close(fd);
    buf[got] = '\0';
    qt_sx.json_used += got + 1;
    qt_sj j = { buf, buf + got, buf };
    if ((rc = qt_sx_parse(&j)))
        return rc;
    qt_sx.n_files++;
    return QT_OK;
}

int qt_sx_open(const char *index_path)
{
    qt_sx_reset();
    int rc = qt_sx_read(index_path);
    if (rc)
        qt_sx_reset();
    return rc;
}

int qt_sx_append(const char *index_path)
{
    if (!qt_sx.n_files)
        return qt_fail(QT_E_ARG, "%s: no index open to append to", index_path);
    const char *first = qt_sx.path;
    int rc = qt_sx_read(index_path);
    if (rc)
        qt_sx_reset();
    else
        qt_sx.path = first;
    return rc;
}

const char *qt_sx_meta(int32_t file, const char *key)
{
    for (int32_t k = 0; k < qt_sx.n_meta; k++)
        if (qt_sx.meta_file[k] == file && !strcmp(qt_sx.meta_key[k], key))
            return qt_sx.meta_val[k];
    return NULL;
}

int32_t qt_sx_count(void) { return qt_sx.n; }
const char *qt_sx_name(int32_t e) { return qt_sx.name[e]; }
int32_t qt_sx_shard(int32_t e) { return qt_sx.shard[e]; }
int32_t qt_sx_shards(void) { return qt_sx.n_shards; }
const char *qt_sx_shard_name(int32_t s) { return qt_sx.shard_name[s]; }
unsigned char *qt_sx_mark(int32_t e) { return &qt_sx.mark[e]; }

int32_t qt_sx_find(const char *name)
{
    uint32_t m = QT_SX_HASH - 1, i = qt_sx_fnv(name) & m;
    while (qt_sx.hash[i]) {
        if (!strcmp(qt_sx.name[qt_sx.hash[i] - 1], name))
            return (int32_t)qt_sx.hash[i] - 1;
        i = (i + 1) & m;
    }
    return -1;
}

int qt_sx_shard_path(int32_t s, char *out, int64_t n)
{
    int w = qt_sx.dir[0] ? snprintf(out, (size_t)n, "%s%s%s", qt_sx.dir,
                                    strcmp(qt_sx.dir, "/") ? "/" : "", qt_sx.shard_name[s])
                         : snprintf(out, (size_t)n, "%s", qt_sx.shard_name[s]);
    if (w < 0 || w >= n)
        return qt_fail(QT_E_ARG, "%s: shard path for %s too long", qt_sx.path,
                          qt_sx.shard_name[s]);
    return QT_OK;
}
