/* ep_pack.h - packing of routed rows for expert parallelism (qt_ops.def MOE_*).
 *
 * Pure data movement, no arithmetic on the values (a copy never changes bits), so expert
 * parallelism changes where a row is computed, never what is computed. A home rank's row
 * (t, slot), r = t*k + slot, goes to group member j = idx[r] / El; rows leave in increasing
 * r, so each member's slice of the send buffer is in (t, slot) order. Rows whose expert is
 * outside [0, E) go nowhere (the router never produces them; a guard only).
 */
#ifndef QT_PARALLEL_EP_PACK_H
#define QT_PARALLEL_EP_PACK_H

#include <stdint.h>

/* Largest expert group (ranks of the expert axis); configgen and the wrappers check it. */
#define QT_EP_MAX_MEMBERS 1024

#ifdef __cplusplus
extern "C" {
#endif

/* cnt[j*b + s] = rows of home sequence s (tokens [s*S, (s+1)*S)) bound for member j, for
 * j < members, s < b (T = b*S). Writes cnt[members*b]. */
void qt_moe_count(int64_t *cnt, const int32_t *idx, int64_t b, int64_t S, int64_t k,
                  int64_t El, int64_t E, int64_t members);

/* Packs rows of rb bytes (d fp32 or bf16 elements: moved bit for bit) into send (members'
 * slices back to back, member j's starting at row off[j]): row r's source is row
 * (per_token ? r/k : r) of src. With ids, ids receives the local expert id idx[r] - j*El of
 * each packed row at the same position. Reads idx, src; writes send (and ids). off:
 * members entries (prefix sums of the per-member row totals). */
void qt_moe_pack(void *send, int32_t *ids, const void *src, int per_token, const int32_t *idx,
                 int64_t T, int64_t k, int64_t rb, int64_t El, int64_t E, const int64_t *off);

/* The inverse placement: row r of dst (rows of rb bytes) receives the next row of member j's
 * slice of recv (starting at row off[j]), visiting r in increasing order. Writes dst rows
 * with a valid expert only. */
void qt_moe_unpack(void *dst, const void *recv, const int32_t *idx, int64_t T, int64_t k,
                   int64_t rb, int64_t El, int64_t E, const int64_t *off);

/* dx[t] += the returned gradient rows of token t, slots in increasing order (the last loop
 * of the one-rank EXPERT_FFN_BWD): row (t, slot) is the next unread row of member
 * j = idx / El's slice of recv (starting at off[j]). Accumulates dx[T,d]. */
void qt_moe_unpack_tokens_acc(float *dx, const float *recv, const int32_t *idx, int64_t T,
                              int64_t k, int64_t d, int64_t El, int64_t E, const int64_t *off);

#ifdef __cplusplus
}
#endif

#endif
