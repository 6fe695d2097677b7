/* safetensors.h - reader and streaming writer for the safetensors format, without heap.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON
 * {"__metadata__":{"k":"v",..}, "<name>":{"dtype":"F32","shape":[..],"data_offsets":[b,e]},..}
 * then the data region; offsets are relative to its start.
 *
 * Limits (static storage, sized so one file can hold the largest shipped model with its
 * Adam state stored per expert: Qwen3.5-397B has ~93k parameter tensors, x3 with m and v =
 * ~280k tensors, ~40 MB of JSON):
 *   QT_ST_MAX_TENSORS  2^19 tensors per file      QT_ST_MAX_HEADER  64 MiB of JSON
 *   QT_ST_MAX_DIMS     8 dims per tensor          QT_ST_MAX_META  4096 metadata entries
 *   QT_ST_MAX_OPEN     2 files open for reading at once (st_compare needs two)
 * The tables live in .bss; only the pages a file actually uses are touched.
 *
 * Reader invariants after a successful qt_st_open: the header parsed completely; names are
 * unique, NUL-terminated and valid UTF-8 (names and metadata strings have their JSON escapes
 * decoded in place; \u0000 is refused); every tensor's byte size equals numel times its
 * dtype size; the tensors tile the data region exactly (sorted by offset: first at 0, no
 * gap, no overlap, last ends at the end of the file). The file is mapped privately; names
 * and metadata strings point into that mapping and stay valid until qt_st_close.
 *
 * Writer invariants: one file at a time; the complete header is known before any tensor
 * byte is written; data goes through a static buffer to <path>.tmp, and only
 * qt_st_wcommit (fsync, rename, fsync of the directory) makes <path> appear or change.
 * Any error leaves the writer failed: the caller must call qt_st_wabort, which removes the
 * temporary file.
 */
#ifndef QT_SAFETENSORS_H
#define QT_SAFETENSORS_H

#include <stdint.h>

#define QT_ST_MAX_TENSORS (1 << 19)
#define QT_ST_MAX_HEADER (64 << 20)
#define QT_ST_MAX_DIMS 8
#define QT_ST_MAX_META 4096   /* 64 until session 24, which refused files other tools write
                                 with 50-80 entries; 2 x 4096 pointers a slot, in .bss */
#define QT_ST_MAX_OPEN 2
#define QT_ST_NAME_MAX 512

enum qt_st_dtype {
    QT_ST_F32 = 0, QT_ST_BF16, QT_ST_F16, QT_ST_F64,
    QT_ST_I8, QT_ST_U8, QT_ST_I16, QT_ST_U16, QT_ST_I32, QT_ST_U32, QT_ST_I64, QT_ST_U64,
    QT_ST_BOOL, QT_ST_DTYPE_COUNT
};

typedef struct qt_st_tensor {
    const char *name;
    int32_t dtype;                 /* enum qt_st_dtype */
    int32_t ndim;
    int64_t shape[QT_ST_MAX_DIMS];
    int64_t numel;
    int64_t begin, end;            /* byte offsets inside the data region */
} qt_st_tensor;

/* "F32", "BF16", ... ; NULL for an invalid code. */
const char *qt_st_dtype_name(int dtype);
/* Bytes per element, 0 for an invalid code. */
int qt_st_dtype_size(int dtype);

/* ---- reader ---- */

/* Open and validate `path`; *h receives a handle. QT_E_IO if it cannot be opened or
 * mapped, QT_E_FORMAT (message names the file and the defect) if it is not a valid file,
 * QT_E_PLAN if every reader slot is in use. */
int qt_st_open(const char *path, int *h);
void qt_st_close(int h);
int32_t qt_st_count(int h);
/* Tensors in header order, i in [0, qt_st_count). */
const qt_st_tensor *qt_st_at(int h, int32_t i);
/* Tensor by exact name, NULL if absent (hash lookup). */
const qt_st_tensor *qt_st_find(int h, const char *name);
/* Value of a __metadata__ key, NULL if absent. */
const char *qt_st_meta(int h, const char *key);
/* XXH64 (qt_hash64.h) of the whole file, header included: its content identity. */
uint64_t qt_st_hash(int h);
/* Start of a tensor's bytes in the mapping (unaligned in general). */
const void *qt_st_data(int h, const qt_st_tensor *t);
/* Convert elements [first, first+n) of t (F32, BF16, F16 or F64) to float into dst
 * (writes n floats). Returns 0, or -1 for another dtype. Exact for F32/BF16/F16. */
int qt_st_read_f32(int h, const qt_st_tensor *t, int64_t first, int64_t n, float *dst);

/* ---- writer ---- */

/* Start writing `path` (the bytes go to "<path>.tmp"). */
int qt_st_wopen(const char *path);
/* Add one __metadata__ entry; all of them come before the first qt_st_wadd. */
int qt_st_wmeta(const char *key, const char *value);
/* Declare the next tensor; data offsets follow declaration order. */
int qt_st_wadd(const char *name, int dtype, int ndim, const int64_t *shape);
/* Finish the header and write it; then qt_st_wwrite the tensors' bytes in order. */
int qt_st_wbegin(void);
int qt_st_wwrite(const void *bytes, int64_t n);
/* Check every declared byte was written, flush, fsync, rename onto <path>, fsync the
 * directory. On error the temporary file is removed and <path> is untouched. */
int qt_st_wcommit(void);
/* Discard: close and unlink <path>.tmp. Safe to call in any state. */
void qt_st_wabort(void);
/* From a signal handler that ends the process: unlink the temporary of a write in
 * progress (async-signal-safe; nothing else is touched); 1 if one was removed. */
int qt_st_wsignal(void);
/* Removes "<path>.tmp.<pid>" files (and directories) in path's directory whose process <pid> no longer exists
 * (left by a writer that was killed), with a note on stderr for each; returns how many. */
int qt_st_remove_stale(const char *path);
/* Removes the directory `path` and the files in it (one level: a sharded checkpoint or its
 * temporary). 0, or -1 with a note on stderr when something could not be removed. */
int qt_st_remove_dir(const char *path);
/* The same from a signal handler (async-signal-safe: system calls only, no message):
 * 0 when path is gone (or was never there), -1 when something stayed. */
int qt_st_remove_dir_signal(const char *path);
/* Calls fn(ctx, name, is_dir) for every entry of directory dir but "." and "..", in
 * directory order, until fn returns non-zero (returned). -1 (errno set) if dir cannot be
 * opened. Entries are read with getdents64 into a static buffer: fn must not call it. */
int qt_st_dir_each(const char *dir, int (*fn)(void *ctx, const char *name, int is_dir),
                   void *ctx);

#endif
