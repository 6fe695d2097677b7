/* fuzz_safetensors.c - libFuzzer target: the safetensors reader (firmware/io/st_read.c).
 *
 * Input: the bytes of a file. It is written to the scratch directory and opened with
 * qt_st_open, which maps it and parses/validates the header. Covers: the 8-byte length,
 * the JSON scanner (strings, integer lists, __metadata__), dtype/shape/offset checks, the
 * name hash, the tiling sort, and on success the accessors and qt_st_read_f32.
 * Invariants checked after a successful open (safetensors.h): every tensor is found by
 * its name and is itself; names are shorter than QT_ST_NAME_MAX; numel matches the shape;
 * end - begin = numel x dtype size; the tensors tile the data region (no gap, no overlap,
 * last end = data bytes); metadata keys resolve. A failed open returns a negative QT_E_*
 * code and leaves no slot in use (the second open below needs both slots).
 */
#include "qt_fuzz.h"
#include "qt_err.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static float buf[64];
    const char *path = qt_fuzz_path("input.safetensors", 0);
    qt_set_quiet(!getenv("QT_FUZZ_VERBOSE"));
    qt_fuzz_write(path, data, size);
    int h = -1, rc = qt_st_open(path, &h);
    if (rc) {
        qt_fuzz_assert(rc < 0);
        return 0;
    }
    qt_fuzz_assert(h >= 0 && h < QT_ST_MAX_OPEN);
    int32_t n = qt_st_count(h);
    qt_fuzz_assert(n >= 0 && n <= QT_ST_MAX_TENSORS);
    int64_t hlen = 0;
    for (int b = 7; b >= 0; b--) hlen = (hlen << 8) | data[b];
    int64_t data_len = (int64_t)size - 8 - hlen, total = 0;
    for (int32_t i = 0; i < n; i++) {
        const qt_st_tensor *t = qt_st_at(h, i);
        qt_fuzz_assert(strlen(t->name) < QT_ST_NAME_MAX);
        qt_fuzz_assert(qt_st_find(h, t->name) == t);
        qt_fuzz_assert(qt_st_dtype_name(t->dtype) != NULL);
        qt_fuzz_assert(t->ndim >= 0 && t->ndim <= QT_ST_MAX_DIMS);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        qt_fuzz_assert(numel == t->numel);
        qt_fuzz_assert(t->begin >= 0 && t->end - t->begin == numel * qt_st_dtype_size(t->dtype));
        qt_fuzz_assert(t->end <= data_len);
        total += t->end - t->begin;
        /* the first and last few elements, through the converting reader */
        int64_t k = t->numel < 16 ? t->numel : 16;
        int r1 = qt_st_read_f32(h, t, 0, k, buf);
        int r2 = qt_st_read_f32(h, t, t->numel - k, k, buf + 16);
        int is_float = t->dtype == QT_ST_F32 || t->dtype == QT_ST_BF16 ||
                       t->dtype == QT_ST_F16 || t->dtype == QT_ST_F64;
        qt_fuzz_assert(r1 == (is_float ? 0 : -1) && r2 == r1);
    }
    qt_fuzz_assert(total == data_len);   /* exact tiling: no gap, no overlap */
    (void)qt_st_meta(h, "format");
    (void)qt_st_meta(h, "step");
    qt_fuzz_assert(qt_st_find(h, "\x01not-a-tensor") == NULL);
    /* a second slot on the same file sees the same tensors */
    int h2 = -1;
    qt_fuzz_assert(qt_st_open(path, &h2) == QT_OK && h2 != h);
    qt_fuzz_assert(qt_st_count(h2) == n);
    int h3 = -1;
    qt_fuzz_assert(qt_st_open(path, &h3) == QT_E_PLAN);   /* every slot in use */
    qt_st_close(h2);
    qt_st_close(h);
    return 0;
}
