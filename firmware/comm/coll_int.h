/* coll_int.h - what coll.c shares with the split collectives of coll_async.c (inside
 * firmware/comm only): groups, the current collective's context for messages, the deadline,
 * the counters, the all-to-all-v's checks.
 *
 * Invariant: the module state stays in coll.c's one static struct; these functions are its
 * only other door.
 */
#ifndef QT_COLL_INT_H
#define QT_COLL_INT_H

#include <stdint.h>

/* A group as the algorithms see it: its size, my index, and how to name a member. */
typedef struct qt_grp {
    unsigned mask;      /* mesh axes; ignored when world != 0 */
    int world;          /* 1: the world in rank order (qt_comm_check_same, before the mesh) */
    int size, index;
} qt_grp;

/* Resolve mask into g (or the world when world != 0) for collective `op`: 0 or QT_E_PLAN
 * with a message. */
int qt_coll_group(const char *op, unsigned mask, int world, qt_grp *g);
/* World rank of member `index` of g. */
int qt_coll_member(const qt_grp *g, int index);
/* The bits of group `mask`'s index that are slice digits (0 on one slice). */
int64_t qt_coll_slice_bits(unsigned mask);
/* Monotonic seconds; the deadline of one collective in seconds (<= 0: none). */
double qt_coll_now(void);
double qt_coll_deadline_s(void);
/* Name the collective in progress for messages: op over `mask`, stage (-1: none). */
void qt_coll_note(const char *op, unsigned mask, int stage);
/* The message for a collective that waited past its deadline for world rank `silent`
 * (probes every rank to name the truly silent one); returns QT_E_COMM. */
int qt_coll_silent(int silent);
/* Add to the counters of qt_comm_stats. */
void qt_coll_count(int64_t bytes_sent, double seconds, int64_t calls);

struct qt_coll_cursor;
/* The checks of qt_coll_all_to_all_v (its arguments, op names it in messages), then the
 * group into *g and the cursor into *c (my own block already copied): 0 or QT_E_PLAN. */
int qt_coll_a2av_setup(const char *op, unsigned mask, const void *send,
                       const int64_t *send_counts, const int64_t *send_offs, void *recv,
                       const int64_t *recv_counts, const int64_t *recv_offs,
                       int64_t elem_bytes, qt_grp *g, struct qt_coll_cursor *c);

/* The checks of the units' exchange (qt_coll_exchange_units_f32: its arguments, op names it
 * in messages), then the group into *g and, when something moves (blk > 0 and a group of
 * more than one), the exchange's cursor into *c (coll_steps.h qt_coll_cursor_units; tmp's
 * tmp_elems floats cut into messages of up to QT_COMM_CHUNK_BYTES): 0 or QT_E_PLAN. */
int qt_coll_units_setup(const char *op, unsigned mask, float *const *unit, int q, int64_t blk,
                        float *tmp, int64_t tmp_elems, qt_grp *g, struct qt_coll_cursor *c);

#endif
