/* qt_ep_rounds.h - the exchanges of the expert dispatch in rounds (ops_ep_rounds.c;
 * the rounds themselves: parallel/ep_rounds.h), shared by the MOE_ROUNDS_* wrappers and
 * tests/tools/coll_check.c (--ep-rounds).
 *
 * Protocol over the expert group `mask` (M members, b blocks each): every member
 * all-gathers its per-(destination, block) row counts (qt_ep_rounds_counts), then every
 * member walks the same rounds (qt_ep_rounds_next) and, per round, moves rows home -> host
 * (qt_ep_round_send) and host -> home (qt_ep_round_back). Rows are copied, never combined.
 * A failure returns QT_E_* (the caller stops the step).
 */
#ifndef QT_OPS_EP_ROUNDS_H
#define QT_OPS_EP_ROUNDS_H

#include <stdint.h>
#include "../parallel/ep_pack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One round [L0, L1) on this member: the tables of qt_ep_round_tables and the home slices. */
typedef struct qt_ep_round {
    int64_t L0, L1, rows;  /* leaves of the round; rows this member hosts in it */
    int64_t scnt[QT_EP_MAX_MEMBERS], soff[QT_EP_MAX_MEMBERS];
    int64_t rcnt[QT_EP_MAX_MEMBERS], roff[QT_EP_MAX_MEMBERS];
    int64_t home_off[QT_EP_MAX_MEMBERS]; /* my packed buffer's member slices */
} qt_ep_round;

/* The count exchange: my rows per (member j, block s) from idx[T,k] (T = b*S tokens,
 * experts [j*El, (j+1)*El) on member j of E = M*El) into my block of G (M*M*b int64), an
 * all-gather over `mask`, and my packed buffer's slices (rd->home_off). Starts the walk:
 * rd->L1 = 0. Writes G and rd; 0 or QT_E_*. */
int qt_ep_rounds_counts(unsigned mask, const int32_t *idx, int64_t T, int64_t k, int64_t E,
                        int64_t El, int64_t b, int64_t *G, qt_ep_round *rd);

/* The next round after rd (rounds of at most R rows per host), its tables into rd (seg: as
 * qt_ep_round_tables, may be NULL). Returns 1 when a round follows, 0 after the last,
 * QT_E_PLAN (negative) with a message naming the leaf when a leaf holds more than R rows. */
int qt_ep_rounds_next(unsigned mask, const int64_t *G, int64_t b, int64_t R, qt_ep_round *rd,
                      int64_t *seg);

/* Home -> host: my packed rows of the round (elements of eb bytes, from `home`) into
 * `host` (the round's rows, leaf order). Reads home, writes host[0 .. rd->rows). */
int qt_ep_round_send(unsigned mask, const qt_ep_round *rd, const void *home, void *host,
                     int64_t eb);

/* Host -> home: the round's host rows back to where their home packed them. Reads host,
 * writes the round's rows of `home`. */
int qt_ep_round_back(unsigned mask, const qt_ep_round *rd, const void *host, void *home,
                     int64_t eb);

#ifdef __cplusplus
}
#endif

#endif
