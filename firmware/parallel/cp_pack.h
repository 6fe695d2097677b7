/* cp_pack.h - the layout permutation of context parallelism's head exchange (Ulysses;
 * qt_ops.def CTX_TO_HEADS, CTX_TO_TOKENS and their BWD kinds; docs/context.md).
 *
 * Pure data movement: rows are copied bit for bit in their element width (4 bytes fp32, 2
 * bytes bf16); the accumulating unpacks add exactly one value into each element. So the
 * bits of an exchange never depend on the context degree C.
 *
 * Shapes, for group index c of a context group of C members, Sl = S/C, Gl = G/C (or 1
 * when G < C), g0(c) = c*G/C (integer division) the first group of member c (uneven
 * ownership, u > 0, below: Gl and g0 per unit run):
 *   token layout [b, Sl, G, w]: row (s, u) is global token c*Sl + u of sequence s;
 *   head layout  [b, S, Gl, w]: row (s, t) holds groups [g0(c), g0(c) + Gl) of token t;
 *   G < C (C a multiple of G: kv heads shared by several ranks' query heads): each group is
 *     held by rho = C/G consecutive members (a replica chain); to_heads copies it to each,
 *     and to_tokens takes it from the chain's last member c = g*rho + rho - 1 only (the
 *     one that holds the group's complete gradient: ops_ctx.c CTX_CHAIN_*);
 *   packed layout [C, b, Sl, Gl, w]: block j (what goes to, or came from, member j), row
 *     (j, s, u) at row index (j*b + s)*Sl + u, Gl*w elements per row.
 * The token side (qt_cp_pack_tokens, qt_cp_unpack_tokens) maps token row (s, u), groups
 * [j*Gl, (j+1)*Gl), to packed row (j, s, u); the head side (qt_cp_pack_heads,
 * qt_cp_unpack_heads) maps head row (s, j*Sl + u) to packed row (j, s, u). Then
 *   to_heads  = pack_tokens, all-to-all of the C blocks, unpack_heads;
 *   to_tokens = pack_heads,  all-to-all of the C blocks, unpack_tokens.
 * With C = 1 every layout is the same [b, S, G, w], and either unpack of the source is the
 * whole exchange.
 * Uneven ownership (u > 0; G need not divide by C): the G groups are U = G/u units of u
 * groups (e.g. a kv head's query heads), member j owns the contiguous run of units
 * [j*U/C, (j+1)*U/C) (integer division: run sizes differ by at most one, a member may own
 * none), so groups g0(j) = (j*U/C)*u .. g0(j) + n(j), n(j) = its units x u. Every member's
 * head side has Gl = ceil(U/C)*u group slots: its n(c) groups, then Gl - n(c) padding slots
 * that to_heads writes as zeros (pack_tokens zero-fills them) and to_tokens never reads.
 * The packed blocks are Gl groups wide (a fixed-size all-to-all).
 * Invariants: no heap, no state; the functions trust a shape that qt_cp_shape_check passed.
 */
#ifndef QT_PARALLEL_CP_PACK_H
#define QT_PARALLEL_CP_PACK_H

#include <stdint.h>

/* Elements of one side of an exchange (the token and the head layout hold the same count),
 * and the scratch an exchange op needs: the send and the receive blocks, in 4-byte floats
 * (enough for either element width; QT_CP_SCRATCH_BYTES is what one width uses). */
#define QT_CP_GL(G, C) ((G) >= (C) ? (G) / (C) : 1)
/* head-side group slots with units of u groups (u > 0: uneven ownership), else QT_CP_GL */
#define QT_CP_SLOTS(G, C, u) ((u) > 0 ? ((G) / (u) + (C) - 1) / (C) * (u) : QT_CP_GL(G, C))
#define QT_CP_ELEMS(b, S, G, w, C) ((b) * ((S) / (C)) * (G) * (w))
#define QT_CP_HEAD_ELEMS(b, S, G, w, C) ((b) * (S) * QT_CP_GL(G, C) * (w))
#define QT_CP_HEAD_ELEMS_U(b, S, G, w, C, u) ((b) * (S) * QT_CP_SLOTS(G, C, u) * (w))
#define QT_CP_SCRATCH_FLOATS(b, S, G, w, C) (2 * QT_CP_HEAD_ELEMS(b, S, G, w, C))
#define QT_CP_SCRATCH_FLOATS_U(b, S, G, w, C, u) (2 * QT_CP_HEAD_ELEMS_U(b, S, G, w, C, u))
#define QT_CP_SCRATCH_BYTES(b, S, G, w, C, eb) (2 * QT_CP_HEAD_ELEMS(b, S, G, w, C) * (eb))

#ifdef __cplusplus
extern "C" {
#endif

/* One exchange's shape: b sequences of S tokens (the whole length), G head groups of w
 * elements per token row, C members, eb bytes per element, u groups a unit (0: the even
 * split G/C, or G < C's replica chains; > 0: uneven runs of units, above). */
typedef struct qt_cp_shape {
    int64_t b, S, G, w, C, eb, u;
} qt_cp_shape;

/* QT_OK when every size is >= 1, eb is 2 or 4, S % C == 0 and G % C == 0 or C % G == 0
 * (u > 0: G % u == 0 instead); else QT_E_PLAN with one line naming the sizes (qt_fail). */
int qt_cp_shape_check(const qt_cp_shape *sh);

/* Bytes of one packed block (b*Sl*Gl*w elements): what each member sends each member. */
int64_t qt_cp_block_bytes(const qt_cp_shape *sh);

/* Member j's first group and its group count (u > 0: its run of units; else Gl groups). */
int64_t qt_cp_first(const qt_cp_shape *sh, int64_t j);
int64_t qt_cp_count(const qt_cp_shape *sh, int64_t j);

/* packed[j, s, u] = tok[s, u, groups of j]. Reads tok (token layout), writes packed. */
void qt_cp_pack_tokens(const qt_cp_shape *sh, void *packed, const void *tok);

/* tok[s, u, groups of j] = packed[j, s, u] (acc = 0), or += it (acc = 1: fp32 add; bf16:
 * widened, added once in fp32, rounded once to nearest even). Reads packed, writes or
 * accumulates tok (token layout), every element once. */
void qt_cp_unpack_tokens(const qt_cp_shape *sh, void *tok, const void *packed, int acc);

/* packed[j, s, u] = heads[s, j*Sl + u]. Reads heads (head layout), writes packed. */
void qt_cp_pack_heads(const qt_cp_shape *sh, void *packed, const void *heads);

/* heads[s, j*Sl + u] = packed[j, s, u] (acc = 0), or += it (acc = 1, as above). Reads
 * packed, writes or accumulates heads (head layout), every element once. */
void qt_cp_unpack_heads(const qt_cp_shape *sh, void *heads, const void *packed, int acc);

/* dst[i] += src[i] for n elements of eb bytes: fp32 adds, or bf16 widened, added in fp32
 * and rounded once (qt_bf16_from_f32). Reads src, accumulates dst. */
void qt_cp_add(void *dst, const void *src, int64_t n, int64_t eb);

/* Scalar references, element by element from the layouts' definitions (the tests call
 * them; the firmware does not): member c's head-layout y from every member's token-layout
 * x (xs[j] = member j's, j < C), and member c's token-layout x from every member's
 * head-layout y (ys[j]). Write y (x) whole. */
void qt_cp_ref_to_heads(const qt_cp_shape *sh, int64_t c, void *y, const void *const *xs);
void qt_cp_ref_to_tokens(const qt_cp_shape *sh, int64_t c, void *x, const void *const *ys);

#ifdef __cplusplus
}
#endif

#endif
