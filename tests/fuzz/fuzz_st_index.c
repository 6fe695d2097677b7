/* fuzz_st_index.c - libFuzzer target: the Hugging Face sharded-checkpoint index reader and
 * load= path resolution (firmware/io/st_index.c).
 *
 * Input: the bytes of a model.safetensors.index.json. It is written into the scratch
 * directory under that name and read with qt_sx_open (JSON scanner, skipping of metadata
 * and unknown keys by bracket depth, weight_map entries, name and shard hashes); then
 * qt_sx_resolve runs on the directory and on the file (the index must be found).
 * Invariants after a successful open (st_index.h): every entry name is found and maps to
 * itself; every entry's shard is in [0, shards); shard names are non-empty and hold no
 * '/'; every shard path fits and lies in the scratch directory; the weight_map has no
 * unlisted name. A failed open returns a negative QT_E_* code and leaves an empty table.
 *
 * Every input is opened twice, which must give the same table: this found the reset bug
 * (qt_sx_reset cleared hash slots in insertion order and left a colliding later name's
 * slot behind; fixed, regression input in tests/fuzz/regressions/st_index/).
 */
#include "qt_fuzz.h"
#include "qt_err.h"
#include "io/st_index.h"


/* The contract of a successful open (see above). */
static void qt_fuzz_check_table(void)
{
    static char out[QT_SX_PATH_MAX];
    int32_t n = qt_sx_count(), ns = qt_sx_shards();
    qt_fuzz_assert(n >= 0 && n <= QT_SX_MAX_ENTRIES && ns >= 0 && ns <= QT_SX_MAX_SHARDS);
    qt_fuzz_assert(n == 0 || ns >= 1);
    for (int32_t e = 0; e < n; e++) {
        const char *name = qt_sx_name(e);
        int32_t f = qt_sx_find(name);
        qt_fuzz_assert(f >= 0 && f < QT_SX_MAX_ENTRIES && !strcmp(qt_sx_name(f), name));
        qt_fuzz_assert(qt_sx_shard(e) >= 0 && qt_sx_shard(e) < QT_SX_MAX_SHARDS);
        qt_fuzz_assert(f == e && qt_sx_shard(e) < ns);
        qt_fuzz_assert(*qt_sx_mark(e) == 0);
    }
    size_t dl = strlen(qt_fuzz_dir());
    for (int32_t s = 0; s < ns; s++) {
        const char *sn = qt_sx_shard_name(s);
        qt_fuzz_assert(sn[0] && !strchr(sn, '/'));
        if (qt_sx_shard_path(s, out, sizeof out) == QT_OK)
            qt_fuzz_assert(!strncmp(out, qt_fuzz_dir(), dl) && out[dl] == '/' &&
                           !strcmp(out + dl + 1, sn));
    }
    qt_fuzz_assert(qt_sx_find("\x01not-listed") == -1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char out[QT_SX_PATH_MAX];
    const char *path = qt_fuzz_path("model.safetensors.index.json", 0);
    int is_index = -1;
    qt_set_quiet(!getenv("QT_FUZZ_VERBOSE"));
    qt_fuzz_write(path, data, size);
    qt_fuzz_assert(qt_sx_resolve(qt_fuzz_dir(), out, sizeof out, &is_index) == QT_OK);
    qt_fuzz_assert(is_index == 1 && !strcmp(out, path));
    qt_fuzz_assert(qt_sx_resolve(path, out, sizeof out, &is_index) == QT_OK && is_index == 1);
    int rc = qt_sx_open(path);
    if (rc) {
        qt_fuzz_assert(rc < 0);
        qt_fuzz_assert(qt_sx_count() == 0 && qt_sx_shards() == 0);
        return 0;
    }
    qt_fuzz_check_table();
    {
        /* the same file again gives the same table */
        int32_t n = qt_sx_count(), ns = qt_sx_shards();
        rc = qt_sx_open(path);
        if (rc) fprintf(stderr, "qt_fuzz: second open: %s\n", qt_last_error());
        qt_fuzz_assert(rc == QT_OK && qt_sx_count() == n && qt_sx_shards() == ns);
        qt_fuzz_check_table();
    }
    return 0;
}
