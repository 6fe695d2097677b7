/* ep_pack.c - packing of routed rows for expert parallelism (see ep_pack.h).
 * Invariant: every loop visits rows in increasing r = t*k + slot, so packing and unpacking
 * are the same order on both sides of an exchange.
 */
#include <string.h>
#include "ep_pack.h"

static int qt_moe_valid(int32_t e, int64_t E)
{
    return e >= 0 && e < E;
}

void qt_moe_count(int64_t *cnt, const int32_t *idx, int64_t b, int64_t S, int64_t k,
                  int64_t El, int64_t E, int64_t members)
{
    for (int64_t i = 0; i < members * b; i++) cnt[i] = 0;
    for (int64_t r = 0; r < b * S * k; r++) {
        const int32_t e = idx[r];
        if (!qt_moe_valid(e, E)) continue;
        cnt[(e / El) * b + (r / k) / S]++;
    }
}

void qt_moe_pack(void *send, int32_t *ids, const void *src, int per_token, const int32_t *idx,
                 int64_t T, int64_t k, int64_t rb, int64_t El, int64_t E, const int64_t *off)
{
    int64_t next[QT_EP_MAX_MEMBERS];
    const int64_t members = E / El;
    for (int64_t j = 0; j < members && j < QT_EP_MAX_MEMBERS; j++) next[j] = off[j];
    for (int64_t r = 0; r < T * k; r++) {
        const int32_t e = idx[r];
        if (!qt_moe_valid(e, E)) continue;
        const int64_t j = e / El, at = next[j]++;
        memcpy((char *)send + at * rb, (const char *)src + (per_token ? r / k : r) * rb,
               (size_t)rb);
        if (ids) ids[at] = (int32_t)(e - j * El);
    }
}

void qt_moe_unpack(void *dst, const void *recv, const int32_t *idx, int64_t T, int64_t k,
                   int64_t rb, int64_t El, int64_t E, const int64_t *off)
{
    int64_t next[QT_EP_MAX_MEMBERS];
    const int64_t members = E / El;
    for (int64_t j = 0; j < members && j < QT_EP_MAX_MEMBERS; j++) next[j] = off[j];
    for (int64_t r = 0; r < T * k; r++) {
        const int32_t e = idx[r];
        if (!qt_moe_valid(e, E)) continue;
        memcpy((char *)dst + r * rb, (const char *)recv + (next[e / El]++) * rb, (size_t)rb);
    }
}

void qt_moe_unpack_tokens_acc(float *dx, const float *recv, const int32_t *idx, int64_t T,
                              int64_t k, int64_t d, int64_t El, int64_t E, const int64_t *off)
{
    int64_t next[QT_EP_MAX_MEMBERS];
    const int64_t members = E / El;
    for (int64_t j = 0; j < members && j < QT_EP_MAX_MEMBERS; j++) next[j] = off[j];
    for (int64_t r = 0; r < T * k; r++) {
        const int32_t e = idx[r];
        if (!qt_moe_valid(e, E)) continue;
        const float *s = recv + (next[e / El]++) * d;
        float *o = dx + (r / k) * d;
        for (int64_t i = 0; i < d; i++) o[i] += s[i];
    }
}
