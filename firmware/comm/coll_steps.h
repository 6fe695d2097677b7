/* coll_steps.h - the float reduce-scatter, the all-gather, the all-to-all-v and the units'
 * pairwise exchange of qt_coll.h as cursors over their point-to-point steps (coll_steps.c),
 * shared by the blocking collectives (coll.c)
 * and the split ones that run beside compute (coll_async.c), so both move the same bytes
 * and add the same operands in the same order: the bits cannot depend on which form ran.
 *
 * A cursor is set up once (qt_coll_cursor_rs / _ag), then driven by its owner:
 *     while (qt_coll_cursor_next(&c)) {     // c.x: the next transfer (packing done)
 *         ...send c.x.sb bytes of c.x.s to member c.x.dst, receive c.x.rb into c.x.r
 *            from member c.x.src (group indices; -1 none)...
 *         qt_coll_cursor_done(&c);          // that step's local adds, then advance
 *     }
 * Invariants: a cursor touches only its buffer and its scratch; every member of the group
 * walks the same sequence of transfers with matching sizes (pairwise order matches them);
 * no heap, no recursion.
 */
#ifndef QT_COLL_STEPS_H
#define QT_COLL_STEPS_H

#include <stdint.h>

#define QT_COLL_MAX_ANY 1024     /* members of a reduce-scatter group that is not a power of 2 */
#define QT_COLL_MAX_UNITS 32     /* units a member of a units exchange (tree levels: 24) */

/* One point-to-point step, in group indices. */
typedef struct qt_coll_step {
    int dst, src;
    const char *s;
    char *r;
    int64_t sb, rb;
} qt_coll_step;

typedef struct qt_coll_cursor {
    int reduce;                 /* 1: float reduce-scatter; 0: all-gather */
    int R, idx;
    char *buf;
    int64_t blk;                /* reduce: floats per block; gather: bytes per block */
    float *tmp;                 /* reduce: scratch */
    int64_t msg;                /* reduce: floats per message (pow2) or per piece (any) */
    int64_t slow;               /* gather: group-index bits that cross slices (first) */
    /* position */
    int s, pass, k, in_stage;
    int64_t done, off, sub, sub_next, held;
    qt_coll_step x;             /* the current step (valid after next() returned 1) */
    int stage;                  /* the current step's stage, for messages */
    /* all-to-all-v (a2a = 1): the caller's buffers and tables, elements of eb bytes */
    int a2a;
    const char *a_s;
    char *a_r;
    const int64_t *scnt, *soff, *rcnt, *roff;
    int64_t eb;
    /* units' exchange (units = q > 0): the q unit buffers (R*blk floats each); msg: floats
     * of each unit a message, packed q side by side into tmp, received after them */
    int units;
    float *unit[QT_COLL_MAX_UNITS];
} qt_coll_cursor;

/* 1 when r is a power of two (r > 0). */
int qt_coll_pow2(int r);

/* Reduce-scatter of qt_coll_reduce_scatter_f32 over R members (R >= 2, a power of two, or
 * at most QT_COLL_MAX_ANY), my index idx, buf R*blk floats (blk > 0), tmp_elems floats of
 * scratch (>= 2, or >= R-1 when R is not a power of two). */
void qt_coll_cursor_rs(qt_coll_cursor *c, int R, int idx, float *buf, int64_t blk, float *tmp,
                       int64_t tmp_elems);
/* All-gather of qt_coll_all_gather: buf R*blk_bytes bytes (blk_bytes > 0); slow: the group
 * index bits that cross slices (0 on one slice; R a power of two when nonzero). */
void qt_coll_cursor_ag(qt_coll_cursor *c, int R, int idx, void *buf, int64_t blk_bytes,
                       int64_t slow);
/* All-to-all-v of qt_coll_all_to_all_v over R members (R >= 1), my index idx: copies my
 * own block (send block idx to receive block idx, memmove) here, then steps k = 1..R-1 send
 * block (idx + k) % R to that member and receive block (idx - k) % R from it (pairwise
 * order). Counts and offsets are in elements of eb bytes, arrays of R read when a step is
 * taken: they, send and recv must stay unchanged until the cursor is finished. */
void qt_coll_cursor_a2av(qt_coll_cursor *c, int R, int idx, const void *send,
                         const int64_t *scnt, const int64_t *soff, void *recv,
                         const int64_t *rcnt, const int64_t *roff, int64_t eb);
/* The units' exchange of qt_coll_exchange_units_f32 over R members (R >= 2), my index idx:
 * unit[u] (u < q <= QT_COLL_MAX_UNITS) R*blk floats each (blk > 0), the pointers copied;
 * tmp at least 2*q*msg floats (msg >= 1 floats of each unit a message). Round k = 0..R-1
 * pairs me with p = (k - idx) mod R (p != idx): piece by piece, next() packs my units'
 * block p (msg floats of each, at the piece's offset) into tmp and names the transfer (send
 * the q*n packed floats to p, receive p's q*n into tmp + q*n), done() unpacks them into the
 * same place of block p (copies only). Between next() and done() nothing else may touch
 * the units' block p or tmp. */
void qt_coll_cursor_units(qt_coll_cursor *c, int R, int idx, float *const *unit, int q,
                          int64_t blk, float *tmp, int64_t msg);
/* The fold of qt_coll_reduce_units_f32: unit[u] (u < q) are R*blk floats each, block m of
 * unit u holding member m's unit u of my block (R * q <= QT_COLL_MAX_ANY). The R*q pieces, in
 * the order (m, u), are summed in qt_coll_counter_tree's shape (the one-rank leaf tree's
 * binary counter over them) and the total stored in block idx of out (R*blk floats, may be
 * one of the units). The units' blocks are garbage afterwards. */
void qt_coll_fold_units(float *const *unit, int R, int q, int64_t blk, int idx, float *out);
/* The next transfer into c->x (packing its outgoing data if needed); 0 when finished. */
int qt_coll_cursor_next(qt_coll_cursor *c);
/* After c->x completed: the step's local work (the reduce-scatter's adds), then advance. */
void qt_coll_cursor_done(qt_coll_cursor *c);

#endif
