/* qt_hash64.h - XXH64 (seed 0), the fast 64-bit content hash of the run manifest: the data
 * file, loaded checkpoints, anything an audit identifies by its bytes.
 *
 * Invariants: the exact XXH64 algorithm (Yann Collet's specification), so a value can be
 * checked outside qtrain with `xxhsum -H1 FILE` (Debian package xxhash); little-endian
 * reads; no heap, no state beyond the caller's stack. Streaming (init/update/final) gives
 * the same value as one call over the concatenated bytes.
 */
#ifndef QT_HASH64_H
#define QT_HASH64_H

#include <stddef.h>
#include <stdint.h>

typedef struct qt_hash64 {
    uint64_t v[4];
    uint64_t total;
    unsigned char buf[32];
    uint32_t n_buf;
} qt_hash64_state;

/* Streaming: init sets *h to the empty input; update appends data[0..n) (any alignment,
 * n may be 0); final returns the hash of everything appended so far and leaves *h as it
 * is (more updates may follow). */
void qt_hash64_init(qt_hash64_state *h);
void qt_hash64_update(qt_hash64_state *h, const void *data, size_t n);
uint64_t qt_hash64_final(const qt_hash64_state *h);
/* One call: XXH64(data[0..n), seed 0). */
uint64_t qt_hash64(const void *data, size_t n);

#endif
