/* st_index.h - Hugging Face sharded checkpoints: `load=` path resolution and the
 * `model.safetensors.index.json` weight map, without heap.
 *
 * Index format: {"metadata": {...}, "weight_map": {"<tensor name>": "<shard file>", ..}};
 * other top-level keys are skipped (balanced JSON required); metadata string values are
 * kept (qt_sx_meta), other metadata values skipped.
 * Shard file names are relative to the index's directory and may not contain '/'.
 *
 * Limits (static .bss; only the pages an index uses are touched). The published
 * checkpoints: Qwen3-Next-80B ~75k weight_map entries / ~6 MB of JSON / 41 shards,
 * Qwen3.5-397B ~93k entries / ~8 MB / ~94 shards:
 *   QT_SX_MAX_JSON     32 MiB index file        QT_SX_MAX_ENTRIES  2^18 weight_map entries
 *   QT_SX_MAX_SHARDS   4096 shard files         QT_SX_PATH_MAX     4096 bytes per path
 * Invariants after a successful qt_sx_open: every weight_map name is unique, NUL-terminated
 * and escape-free; every entry refers to a shard in [0, qt_sx_shards()); shards are
 * numbered in order of first appearance. Names stay valid until the next qt_sx_open.
 */
#ifndef QT_ST_INDEX_H
#define QT_ST_INDEX_H

#include <stdint.h>

#define QT_SX_MAX_JSON (32 << 20)
#define QT_SX_MAX_ENTRIES (1 << 18)
#define QT_SX_MAX_SHARDS 4096
#define QT_SX_PATH_MAX 4096
#define QT_SX_MAX_META 64
#define QT_SX_INDEX_NAME "model.safetensors.index.json"
#define QT_SX_OPT_INDEX_NAME "optimizer.safetensors.index.json"   /* qtrain's, beside it */

/* Resolve a `load=` argument. A directory becomes its model.safetensors.index.json if
 * present, else its only *.safetensors file (QT_E_ARG if there are none or several). A
 * path ending in ".index.json" is an index. Writes the resolved path to out (n bytes) and
 * *is_index (1 = index JSON, 0 = single safetensors file). Errors name the path. */
int qt_sx_resolve(const char *path, char *out, int64_t n, int *is_index);

/* Read and validate an index file into the static tables (replacing any earlier one). */
int qt_sx_open(const char *index_path);
/* Add a second index of the same directory (a qtrain checkpoint's
 * optimizer.safetensors.index.json) to the open one: one weight_map and one shard list over
 * both files, names unique across them, QT_SX_MAX_JSON shared. On error the tables are
 * emptied (nothing stays open). */
int qt_sx_append(const char *index_path);
/* String value of "metadata" key `key` of index file `file` (0 = the one qt_sx_open read,
 * 1 = the first appended), NULL if absent or not an escape-free string. At most
 * QT_SX_MAX_META values are kept per load; number values (total_size) are not. */
const char *qt_sx_meta(int32_t file, const char *key);
int32_t qt_sx_count(void);
const char *qt_sx_name(int32_t e);
/* Shard of entry e. */
int32_t qt_sx_shard(int32_t e);
/* Entry of a tensor name, -1 if the weight_map does not list it. */
int32_t qt_sx_find(const char *name);
int32_t qt_sx_shards(void);
/* Shard file name as written in the index. */
const char *qt_sx_shard_name(int32_t s);
/* Path of shard s next to the index, into out (n bytes). QT_E_ARG if it does not fit. */
int qt_sx_shard_path(int32_t s, char *out, int64_t n);
/* One byte of per-entry scratch for the loader (cleared by qt_sx_open). */
unsigned char *qt_sx_mark(int32_t e);

#endif
