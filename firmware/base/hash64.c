/* hash64.c - XXH64 with seed 0 (qt_hash64.h): 32-byte stripes over four lanes, then the
 * tail and the avalanche, exactly as the reference implementation, so `xxhsum -H1` on a
 * file prints the hash qtrain reports for it. Used once per file at open (data, loaded
 * checkpoints), never during steps; reads through memcpy (any alignment), no heap.
 * Base layer: it calls libc only.
 */
#include <string.h>
#include "qt_hash64.h"

#define QT_P1 0x9E3779B185EBCA87ull
#define QT_P2 0xC2B2AE3D27D4EB4Full
#define QT_P3 0x165667B19E3779F9ull
#define QT_P4 0x85EBCA77C2B2AE63ull
#define QT_P5 0x27D4EB2F165667C5ull

static uint64_t qt_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t qt_rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;   /* x86-64: little-endian, as XXH64 reads */
}

static uint32_t qt_rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t qt_round(uint64_t acc, uint64_t in)
{
    acc += in * QT_P2;
    return qt_rotl(acc, 31) * QT_P1;
}

static uint64_t qt_merge(uint64_t acc, uint64_t v)
{
    acc ^= qt_round(0, v);
    return acc * QT_P1 + QT_P4;
}

static void qt_stripe(uint64_t *v, const unsigned char *p)
{
    v[0] = qt_round(v[0], qt_rd64(p));
    v[1] = qt_round(v[1], qt_rd64(p + 8));
    v[2] = qt_round(v[2], qt_rd64(p + 16));
    v[3] = qt_round(v[3], qt_rd64(p + 24));
}

void qt_hash64_init(qt_hash64_state *h)
{
    memset(h, 0, sizeof *h);
    h->v[0] = QT_P1 + QT_P2;
    h->v[1] = QT_P2;
    h->v[2] = 0;
    h->v[3] = 0 - QT_P1;
}

void qt_hash64_update(qt_hash64_state *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    h->total += n;
    if (h->n_buf) {
        size_t take = 32 - h->n_buf < n ? 32 - h->n_buf : n;
        memcpy(h->buf + h->n_buf, p, take);
        h->n_buf += (uint32_t)take;
        p += take;
        n -= take;
        if (h->n_buf < 32) return;
        qt_stripe(h->v, h->buf);
        h->n_buf = 0;
    }
    for (; n >= 32; p += 32, n -= 32) qt_stripe(h->v, p);
    memcpy(h->buf, p, n);
    h->n_buf = (uint32_t)n;
}

uint64_t qt_hash64_final(const qt_hash64_state *h)
{
    uint64_t acc;
    if (h->total >= 32) {
        acc = qt_rotl(h->v[0], 1) + qt_rotl(h->v[1], 7) + qt_rotl(h->v[2], 12) +
              qt_rotl(h->v[3], 18);
        for (int i = 0; i < 4; i++) acc = qt_merge(acc, h->v[i]);
    } else {
        acc = QT_P5;
    }
    acc += h->total;
    const unsigned char *p = h->buf;
    uint32_t n = h->n_buf;
    for (; n >= 8; p += 8, n -= 8) {
        acc ^= qt_round(0, qt_rd64(p));
        acc = qt_rotl(acc, 27) * QT_P1 + QT_P4;
    }
    if (n >= 4) {
        acc ^= (uint64_t)qt_rd32(p) * QT_P1;
        acc = qt_rotl(acc, 23) * QT_P2 + QT_P3;
        p += 4;
        n -= 4;
    }
    for (; n; p++, n--) {
        acc ^= (uint64_t)*p * QT_P5;
        acc = qt_rotl(acc, 11) * QT_P1;
    }
    acc ^= acc >> 33;
    acc *= QT_P2;
    acc ^= acc >> 29;
    acc *= QT_P3;
    acc ^= acc >> 32;
    return acc;
}

uint64_t qt_hash64(const void *data, size_t n)
{
    qt_hash64_state h;
    qt_hash64_init(&h);
    qt_hash64_update(&h, data, n);
    return qt_hash64_final(&h);
}
