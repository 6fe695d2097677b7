/* qt_coll.h - deterministic collectives over mesh sub-groups (implemented once in coll.c,
 * on top of the point-to-point primitive qt_comm_sendrecv of the back ends, qt_comm.h).
 *
 * Mesh and groups. The mesh has the axes of enum qt_mesh_axis (DATA, FSDP, TENSOR, EXPERT,
 * CONTEXT) with sizes mesh[]; a world rank is the mixed-radix number of its coordinates
 * with DATA most significant and CONTEXT least significant:
 *     rank = ((((d*F + f)*T + t)*E + e)*C + c).
 * A group is a bitmask of mesh axes (bit a = 1u << a). The members of my group `mask` are
 * the ranks whose coordinates equal mine on every axis NOT in the mask; a member's group
 * index is the mixed-radix number of its coordinates over the masked axes (same order,
 * DATA most significant). Group size = product of the masked axis sizes; mask 0 is the
 * one-member group {me}; QT_COLL_ALL is the world, in rank order on one slice (on several,
 * in coordinate order: qt_mesh_coords; index 0 is rank 0 either way).
 *
 * Invariants:
 *  - No float is ever reduced by MPI (docs/design.md section 6). The only float reduction,
 *    qt_coll_reduce_scatter_f32, adds in a fixed pairing that is a perfect pairwise tree
 *    over group indices, so its bits depend only on the inputs and the group size, never on
 *    timing, message sizes, chunking or scratch size.
 *  - Every call is collective over its group: all members call the same functions with
 *    the same mask, sizes and root, in the same order (SPMD). Messages travel on a private
 *    duplicate of MPI_COMM_WORLD with one tag; pairwise FIFO order does the matching.
 *  - No heap after qt_comm_init: buffers and scratch are the caller's (arena); the module
 *    state is one static struct in coll.c.
 *  - Every collective runs under a deadline (qt_comm_set_deadline). When a peer does not
 *    answer in time, the call probes every rank (qt_comm_probe_silent) and prints
 *        qtrain: rank R: <context>: no answer from rank P within S s[ (...)][; <hint>]
 *    naming the rank that is really silent (not a live peer that waits for it), to stderr
 *    (the hint: qt_comm_set_timeout_hint, e.g. which phase of the job it was in), and
 *    returns QT_E_COMM; its messages stay posted, so the caller must abort the job
 *    (qt_comm_abort) and not call another collective.
 *  - Return codes: 0 ok; QT_E_PLAN misuse (mesh not initialised, bad mask, bad sizes,
 *    non-power-of-two reduce-scatter group), each with a message on stderr; QT_E_COMM a
 *    peer was silent or MPI failed; QT_E_MISMATCH from qt_comm_check_same.
 *  - In the musl build (comm_local.c) the world has one rank: every group has size 1 and
 *    every collective returns 0 without touching its buffers (a group of one already
 *    holds the result).
 *
 * Use (error handling abbreviated):
 *     qt_comm_init(&argc, &argv, &rank, &size);
 *     if (qt_comm_check_same(plan_hash)) ...abort...;     // may precede the mesh
 *     qt_comm_mesh_init(plan->mesh, rank, size);           // before any group collective
 *     const unsigned dp = 1u << QT_MESH_DATA;              // a group: the data axis
 *     int64_t blk = n / qt_comm_group_size(dp);            // my block: qt_comm_group_index(dp)
 *     qt_comm_set_context("grad reduce-scatter", step);
 *     if (qt_coll_reduce_scatter_f32(dp, grad, blk, scratch, scratch_elems))
 *         qt_comm_abort(code);                             // QT_E_COMM: messages still posted
 */
#ifndef QT_COLL_H
#define QT_COLL_H

#include <stdint.h>
#include "qt_plan.h"

#define QT_COLL_ALL ((1u << QT_MESH_COUNT) - 1u) /* every mesh axis: the whole world */
#define QT_COLL_DEFAULT_DEADLINE 300.0           /* seconds, per collective call */

/* ---- mesh ------------------------------------------------------------------------------- */

/* Set up the mesh for world rank `rank` of `size` (as returned by qt_comm_init). Reads
 * mesh[QT_MESH_COUNT] (every entry >= 1, product == size). Precomputes my coordinates and,
 * for each of the 2^QT_MESH_COUNT masks, the group size and my group index (rank arithmetic
 * only: no communicator is created). Returns 0 or QT_E_PLAN with a message. May be called
 * again to change the mesh (between collectives). */
int qt_comm_mesh_init(const int32_t mesh[QT_MESH_COUNT], int rank, int size);
/* The same on a mesh of several slices (dcn[a] slices of axis a, NULL = one slice): ranks
 * are slice-major (qt_plan.h qt_mesh_coords), so the members of a group that differ only in
 * their slice digits are the highest group indices, and the reduce-scatter's pairing (low
 * index bits first) sums inside a slice before it crosses slices. */
int qt_comm_mesh_init_slices(const int32_t mesh[QT_MESH_COUNT], const int32_t *dcn, int rank,
                             int size);

/* A mesh that is a part of the world (a pipeline stage's: its ranks are world ranks base ..
 * base + its size - 1, docs/pipeline.md): after qt_comm_mesh_init_slices with the rank
 * inside the part and the part's size, the members of every group are named by world rank
 * (qt_comm_group_rank and the collectives over mesh groups add base). 0 (the default, set
 * by every mesh init): the mesh is the world. */
void qt_comm_mesh_set_base(int base);

/* After qt_comm_mesh_init_slices on a mesh of several slices: every rank's host name is
 * gathered and rank 0 notes (qt_note, never an error) a slice whose ranks run on more than
 * one machine, or slices that share one (slices.c). Collective over the world; returns 0
 * or a collective's error. One slice: returns at once. */
int qt_comm_check_slices(const int32_t *mesh, const int32_t *dcn, int rank, int size);

/* Size of group `mask` (product of the masked axis sizes), or QT_E_PLAN (mesh not
 * initialised, mask has bits >= QT_MESH_COUNT). */
int qt_comm_group_size(unsigned mask);

/* My index in group `mask` (0 <= index < group size), or QT_E_PLAN as above. */
int qt_comm_group_index(unsigned mask);

/* World rank of member `index` of my group `mask`, or QT_E_PLAN (also for index out of
 * [0, group size)). */
int qt_comm_group_rank(unsigned mask, int index);

/* ---- watchdog and counters -------------------------------------------------------------- */

/* Deadline of each later collective call, counted from its start, in seconds; 0 or less =
 * wait forever. Default QT_COLL_DEFAULT_DEADLINE. Local setting: give every rank the same. */
void qt_comm_set_deadline(double seconds);

/* A clause every later timeout message ends with ("; <hint>", at most 159 characters,
 * copied; NULL or "" clears it): which phase of the job the wait is in and the setting
 * that bounds it, e.g. qtrain's start-up and its start_timeout= key. Local, like the
 * deadline. */
void qt_comm_set_timeout_hint(const char *hint);

/* Name what the next collectives belong to, for timeout messages: `what` (copied, at most
 * 127 characters; NULL clears it) and `step` (< 0 = no step). The message then reads e.g.
 * "grad sync, step 12, reduce_scatter over data+fsdp, stage 0". */
void qt_comm_set_context(const char *what, long long step);

/* Counters since start (any pointer may be NULL): payload bytes this rank sent, wall
 * seconds spent inside collective calls (local adds and copies included), and the number
 * of collective calls (qt_comm_exchange and qt_comm_check_same included). */
void qt_comm_stats(int64_t *bytes_sent, double *seconds, int64_t *calls);

/* ---- collectives ------------------------------------------------------------------------ */

/* Float reduce-scatter with fixed pairing (recursive halving), over group `mask` of size R,
 * R a power of two (R = 1 returns at once). R not a power of two (at most 1024; tmp_elems
 * >= R-1): every member sends each owner its piece of the owner's block and the owner sums
 * the R pieces in the one-rank leaf tree's binary-counter shape over member order
 * (qt_tree.h: the complete subtrees for the set bits of R, combined lowest first): for
 * R = 3 (x0 + x1) + x2, for R = 6 ((x0 + x1) + (x2 + x3)) + (x4 + x5).
 *   buf: R*blk floats, read and written. On entry block j (floats [j*blk, (j+1)*blk)) is my
 *        contribution destined to group index j. On return block idx = my group index holds
 *        the elementwise sum over all R members' block idx, computed as the perfect pairwise
 *        tree over group indices ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)) ...;
 *        the other blocks hold partial sums (garbage).
 *   tmp: tmp_elems floats of scratch (written), tmp_elems >= 2; half of it packs outgoing
 *        blocks and half receives, so each message carries min(tmp_elems/2, 4 Mi) floats.
 *        1 MiB of scratch is plenty; the bits do not depend on it.
 * Stage s = 0..log2(R)-1: partner = idx ^ (1 << s); I keep the blocks (among those still
 * held) whose bit s equals mine, send the others to the partner, and add the partner's copy
 * of the kept blocks elementwise (mine + theirs: IEEE addition is commutative, so both
 * partners get the same bits). Sends R-1 blocks of blk floats in total, halving per stage. */
int qt_coll_reduce_scatter_f32(unsigned mask, float *buf, int64_t blk, float *tmp,
                               int64_t tmp_elems);

/* The step form's units (qt_ops.def GRAD_UNITS; docs/determinism.md "Any split") over group
 * `mask` of size R (R * q <= 1024, q <= 32): unit[u] (u < q) are R*blk floats each, member m's unit u
 * of a range (its leaves' subtree number m*q + u of the one-rank tree, in that order); block
 * j (floats [j*blk, (j+1)*blk)) is destined to group index j. Members are paired once each
 * (round k: the pair whose indices add up to k mod R) and exchange their q units of each
 * other's block (chunked through tmp: q*n floats out and q*n in per message, tmp_elems >=
 * 2q). Then block idx = my group index of `out` (R*blk floats; may be unit[q-1]) receives
 * the R*q pieces summed in the one-rank leaf tree's binary-counter shape over the order
 * (m, u) (qt_coll_reduce_scatter_f32's shape for a group that is not a power of two, with
 * q pieces a member): for R = 2, q = 3: ((x00 + x01) + (x02 + x10)) + (x11 + x12). The
 * units' blocks are garbage afterwards. Sends q*(R-1) blocks of blk floats in R-1 pairings.
 * R = 1 folds the q units. 0, QT_E_COMM, or QT_E_PLAN (bad sizes). */
int qt_coll_reduce_units_f32(unsigned mask, float *const *unit, int q, int64_t blk, float *out,
                             float *tmp, int64_t tmp_elems);

/* The exchange of qt_coll_reduce_units_f32 without its fold (the microbatch form's units,
 * docs/determinism.md "Any split": the owner pushes the R*q pieces of each microbatch into a
 * counter over the step's G*R*q units, qt_tree.h qt_tree_push_units): afterwards block m of
 * unit[u] (floats [m*blk, (m+1)*blk)) holds member m's unit u of my block (group index
 * idx; block idx is my own). Copies only: the same messages as qt_coll_reduce_units_f32.
 * 0, QT_E_COMM, or QT_E_PLAN (bad sizes). */
int qt_coll_exchange_units_f32(unsigned mask, float *const *unit, int q, int64_t blk,
                               float *tmp, int64_t tmp_elems);

/* All-gather in place over group `mask` of size R.
 *   buf: R*blk_bytes bytes. On entry block idx (bytes [idx*blk_bytes, +blk_bytes)) is mine;
 *        the other blocks are overwritten. On return block j holds member j's block.
 * Recursive doubling (partner idx ^ (1 << s)) when R is a power of two, else a ring. */
int qt_coll_all_gather(unsigned mask, void *buf, int64_t blk_bytes);

/* Broadcast `bytes` bytes of buf from group index `root` (0 <= root < R) to every member of
 * group `mask`: read on the root, written on the others. Binomial tree over (idx - root) mod R. */
int qt_coll_broadcast(unsigned mask, void *buf, int64_t bytes, int root);

/* In-place sum over group `mask` of v[0..n) on every member: uint64 wrapping add (values
 * mod 2^64, e.g. fingerprints). Exact, so independent of the order. n >= 0. */
int qt_coll_sum_u64(unsigned mask, uint64_t *v, int n);

/* Same for int64 counts (two's-complement add: bit-identical to the uint64 sum). */
int qt_coll_sum_i64(unsigned mask, int64_t *v, int n);

/* In-place elementwise maximum over group `mask` of v[0..n) (int64, signed) on every
 * member: exact, so independent of the order (recursive doubling, or binomial reduce and
 * broadcast). n >= 0. The agreed error flag of a mesh: each rank puts its status, all get
 * the worst. */
int qt_coll_max_i64(unsigned mask, int64_t *v, int n);

/* What qt_coll_max_i64 combines: acc[i] = max(acc[i], in[i]) for i < n (reads in, reads and
 * writes acc). */
void qt_coll_merge_max_i64(int64_t *acc, const int64_t *in, int n);

/* Exchange all-to-all counts over group `mask` of size R: reads send_counts[R] (what I will
 * send to group index j), writes recv_counts[R] (what member j will send me). The two
 * arrays must not overlap. */
int qt_coll_all_to_all_counts(unsigned mask, const int64_t *send_counts, int64_t *recv_counts);

/* Point to point inside group `mask` (the context replica chains, ops_ctx.c): sends sbytes
 * of `send` to group index dst (-1: none) and receives rbytes into `recv` from group index
 * src (-1: none), under the collectives' deadline (a silent peer is named). Reads send,
 * writes recv. */
int qt_coll_pass(unsigned mask, int dst, const void *send, int64_t sbytes, int src, void *recv,
                 int64_t rbytes);

/* All-to-all with variable counts (MoE dispatch, dropless) over group `mask` of size R.
 * Sends send_counts[j] elements of elem_bytes bytes starting at element send_offs[j] of
 * `send` to group index j, and receives recv_counts[j] elements from member j into `recv`
 * starting at element recv_offs[j]. recv_counts must equal what the peers send (exchange
 * them first with qt_coll_all_to_all_counts); a mismatch is QT_E_COMM. Counts may be 0.
 * Reads send, the counts and offsets; writes only the recv ranges named by recv_offs and
 * recv_counts (send and recv must not overlap). Pairwise shift schedule: at step k I send
 * to (idx + k) mod R and receive from (idx - k) mod R; my own block is copied locally. */
int qt_coll_all_to_all_v(unsigned mask, const void *send, const int64_t *send_counts,
                         const int64_t *send_offs, void *recv, const int64_t *recv_counts,
                         const int64_t *recv_offs, int64_t elem_bytes);

/* All-to-all with one block size over group `mask` of size R (context parallelism's head
 * exchange, qt_ops.def CTX_*). send and recv hold R blocks of blk_bytes bytes each: block j
 * of send (bytes [j*blk_bytes, (j+1)*blk_bytes)) goes to group index j, and block j of recv
 * receives member j's block for me. Reads send, writes every byte of recv; the two must not
 * overlap (QT_E_PLAN with a message, as for NULL buffers or blk_bytes < 0). Pairwise shift
 * schedule of qt_coll_all_to_all_v; my own block is copied locally, so a group of one is a
 * copy. Bytes move, never combined: the result does not depend on the schedule. */
int qt_coll_all_to_all(unsigned mask, const void *send, void *recv, int64_t blk_bytes);

/* Check that every rank of the world runs the same plan: all ranks combine (plan hash,
 * world size) with an exact min/max reduction (recursive doubling or binomial tree; no
 * barrier, no mesh needed, so it may run before qt_comm_mesh_init). Returns 0 when all
 * agree; otherwise every rank prints its own hash and one differing hash with the lowest
 * rank holding it, and returns QT_E_MISMATCH. */
int qt_comm_check_same(uint64_t plan_hash);

/* The agreed error flag of the job (every rank calls it at the same point, with its own
 * status: QT_OK or the negative QT_E_* code of a failure it has already printed): one
 * max_i64-style all-reduce over the world (no mesh needed). Returns QT_OK when every rank
 * passed QT_OK; my own status when I failed; otherwise QT_E_PEER after printing
 *     qtrain: rank R/N: <context>: stopping: rank F/N failed (its message says why)
 * where F is the lowest failing rank. QT_E_COMM when the flag itself could not be agreed
 * (a silent peer: abort the job). `what` names the point for that message. */
int qt_coll_agree(const char *what, int status);

/* ---- plan collectives (qt_plan.h qt_collective, one row of qt_coll.def each) ------------ */

/* Whether collective c fits a plan whose arena holds arena_bytes bytes: a kind with a range
 * form (qt_coll.def RUN), a range inside the arena, and bytes that split as the row says
 * (a multiple of UNIT, times the group size when SPLIT). 0 when it fits, else QT_E_PLAN
 * (no message: the caller names the op). */
int qt_coll_range_check(const qt_collective *c, int64_t arena_bytes);

/* Run collective c of a plan on its arena range (base = arena + c->offset, c->bytes bytes,
 * read and written as its qt_coll.def row says); `scratch` (scratch_elems floats) is the
 * plan's comm scratch for the kinds that need one (reduce-scatter). 0 or QT_E_*; a kind
 * without a range form is QT_E_PLAN with a message. */
int qt_coll_run_range(const qt_collective *c, unsigned char *base, float *scratch,
                      int64_t scratch_elems);

/* Point-to-point exchange with world rank `peer` under the deadline: sends sbytes from
 * send and receives exactly rbytes into recv (either may be 0). For plan steps that pair
 * ranks themselves. Returns 0, QT_E_COMM (silent peer, size mismatch, MPI error) or
 * QT_E_PLAN (peer out of range, or my own rank with unequal sizes; peer == my rank copies). */
int qt_comm_exchange(int peer, const void *send, int64_t sbytes, void *recv, int64_t rbytes);

/* The start-up connection warm-up with world rank `peer` (qt_comm.h qt_comm_warm: both
 * call it for each other, visiting their peers in increasing rank order; send and recv hold
 * 8 * big bytes each) as a collective: under the deadline, a silent peer named as for the
 * others ("warm-up over all ranks"). Returns 0 or QT_E_*. */
int qt_coll_warm(int peer, const void *send, void *recv, int64_t big);

/* ---- the pipeline's point-to-point messages (coll_p2p.c; docs/pipeline.md) -------------- */

/* Post a non-blocking send of `bytes` of buf (unchanged until qt_coll_p2p_flush) to world
 * rank peer on channel tag (0 .. 7). 0 or QT_E_*. */
int qt_coll_p2p_send(int peer, int tag, const void *buf, int64_t bytes);
/* Receive exactly `bytes` into buf from world rank peer on channel tag, waiting under the
 * collectives' deadline (a silent peer is named). 0 or QT_E_*. */
int qt_coll_p2p_recv(int peer, int tag, void *buf, int64_t bytes);
/* The same in two halves, for a receive posted ahead of use (the message may arrive while
 * the caller computes): post it (*id its request; buf must not be read before the wait),
 * then wait for it under the deadline. Receives of one channel from one peer match in
 * posting order. 0 or QT_E_*. */
int qt_coll_p2p_post_recv(int peer, int tag, void *buf, int64_t bytes, int *id);
int qt_coll_p2p_wait_recv(int id, int peer);
/* Wait for every send posted since the last flush (their buffers are free again). */
int qt_coll_p2p_flush(void);
/* All-gather over the world ranks ranks[0 .. n) (me: my index): blocks holds n blocks of
 * blk bytes, mine at index me on entry, every member's on return (bytes only). */
int qt_coll_p2p_allgather(const int *ranks, int n, int me, void *blocks, int64_t blk);

/* ---- split collectives (coll_async.c; docs/overlap.md) -------------------------------- */

/* Start plan collective `id` (c its row: a reduce-scatter or an all-gather; base its arena
 * range; scratch as for qt_coll_run_range) and return before it completes: it runs on a
 * transfer slot of its own while the caller computes, advanced by qt_coll_progress, and its
 * range holds the result only after qt_coll_wait_range(id). Until then neither the range
 * nor (for a reduce-scatter) the scratch may be touched by anything else. Same transfers,
 * same adds, same bits as qt_coll_run_range. A group of one starts nothing. 0 or QT_E_*
 * (QT_E_PLAN: another kind, QT_COMM_SLOTS collectives already in flight). */
int qt_coll_start_range(int64_t id, const qt_collective *c, unsigned char *base, float *scratch,
                        int64_t scratch_elems);

/* Start qt_coll_all_to_all_v's exchange (same arguments, same checks, same pairwise steps,
 * same bytes in the same places) as split collective `id` (< 0: the plan's collectives own
 * the ids >= 0) and return before it completes: my own block is copied here, the others
 * arrive on a transfer slot while the caller computes (qt_coll_progress), complete after
 * qt_coll_wait_a2av(id). Until then send, recv and the four tables must stay unchanged and
 * unread (recv). A group of one copies and starts nothing. 0 or QT_E_*. */
int qt_coll_start_a2av(int64_t id, unsigned mask, const void *send, const int64_t *send_counts,
                       const int64_t *send_offs, void *recv, const int64_t *recv_counts,
                       const int64_t *recv_offs, int64_t elem_bytes);

/* Complete split all-to-all-v `id` started over `mask` (as qt_coll_wait_range). 0,
 * QT_E_COMM, or QT_E_PLAN when `id` is not in flight (and the group has more than one
 * member). */
int qt_coll_wait_a2av(int64_t id, unsigned mask);

/* Start qt_coll_exchange_units_f32's exchange (same arguments, same checks, same pairwise
 * steps and pieces for the same tmp_elems, the same bytes into the same places) as split
 * collective `id` (< 0, distinct from every other id in flight; the plan's collectives own
 * the ids >= 0) and return before it completes: its pieces are packed from the units into
 * tmp, sent, received into tmp and unpacked into the units as qt_coll_progress advances it.
 * The unit pointers are copied. Until qt_coll_wait_units(id) neither the units' blocks nor
 * tmp may be touched by anything else. Bytes only move, never combined: the result does not
 * depend on the scratch size or on when the pieces ran. A group of one (or blk 0) starts
 * nothing. 0 or QT_E_* (QT_E_PLAN: bad arguments, id in flight, slots exhausted). */
int qt_coll_start_units(int64_t id, unsigned mask, float *const *unit, int q, int64_t blk,
                        float *tmp, int64_t tmp_elems);

/* Complete split units exchange `id` started over `mask` with blocks of blk floats (as
 * qt_coll_wait_range): afterwards the units hold what qt_coll_exchange_units_f32 leaves.
 * 0, QT_E_COMM, or QT_E_PLAN when `id` is not in flight (and something was to move). */
int qt_coll_wait_units(int64_t id, unsigned mask, int64_t blk);

/* Advance every collective in flight as far as its transfers allow, without waiting (one
 * test per busy slot; a finished step's adds and the next step's post). Returns at once
 * when none is in flight. 0 or QT_E_COMM. */
int qt_coll_progress(void);

/* Complete plan collective `id` (c its row), progressing every collective in flight, under
 * the collectives' deadline counted from this call (a silent peer is named as for the
 * blocking calls). 0, QT_E_COMM, or QT_E_PLAN when `id` is not in flight (and its group
 * has more than one member). */
int qt_coll_wait_range(int64_t id, const qt_collective *c);

/* Collectives started and not yet waited for. */
int qt_coll_in_flight(void);

#endif
