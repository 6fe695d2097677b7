/* qt_plan.h - the static plan tables that configgen emits and the firmware executes.
 *
 * A plan is everything one training step needs, decided at generation time: the model
 * sizes, every tensor (parameters, activations, gradients, optimizer state, scratch) with
 * its logical axes, sharding spec and arena offset, and the flat op schedules.
 *
 * Invariants (checked by configgen, trusted by the firmware):
 *  - every tensor lies inside [0, arena_bytes) and is 64-byte aligned;
 *  - tensors whose lifetimes overlap in a schedule do not share bytes;
 *  - every op's tensor ids are valid indices into tensors[] (or QT_NONE);
 *  - the parameter region is flat: parameter p occupies
 *    [params_offset + 4*flat_offset, +4*numel) and the same flat offset is used inside
 *    the gradient and every tree-level region; the Adam regions hold only this rank's
 *    block of the opt_mask group (all of it when opt_mask is 0). Exceptions, each marked
 *    by a flag: params_compact (the parameter region is laid out as the Adam regions and
 *    parameter tensors point into per-layer gather windows), grads_compact, per-layer
 *    leaf windows (leaf_offset), and dtype=bfloat16 (qt_plan.dtype: the parameter region
 *    holds this rank's fp32 master blocks as params_compact does, and parameter tensors are
 *    the bf16 compute copy at compute_offset + 2*flat_offset, or in gather windows);
 *  - sizes in op attributes agree with the tensor shapes.
 * Generated plan.c files define one `const qt_plan qt_plan_<run>` and its arena. The fields
 * of qt_plan are declared once, in qt_plan_fields.def (struct, plan.c, plan hash).
 */
#ifndef QT_PLAN_H
#define QT_PLAN_H

#include <stdint.h>

#define QT_NONE (-1)
#define QT_MAX_DIMS 4
#define QT_MAX_SEGS 3
#define QT_OP_MAX_T 12
#define QT_OP_MAX_A 10
#define QT_OP_MAX_F 2
/* Gradient tree levels: a tree over n leaves has bit_length(n) levels, so 32 levels hold
 * 2^31 - 1 sequences per step and batch group. Plans of at most QT_TREE_LEVELS_V1 levels
 * write and hash only the first QT_TREE_LEVELS_V1 tree_offset entries (the table's size
 * before it grew from 24 to 32; the rest are zero), so their plan.c and plan hash are
 * unchanged. */
#define QT_MAX_TREE_LEVELS 32
#define QT_TREE_LEVELS_V1 24
/* The tree_offset entries a plan writes and hashes. */
#define QT_TREE_LEVELS_KEPT(n) ((n) > QT_TREE_LEVELS_V1 ? QT_MAX_TREE_LEVELS : QT_TREE_LEVELS_V1)
#define QT_MAX_IN_FLIGHT 4   /* split collectives in flight at once (COLL_START .. COLL_WAIT) */
#define QT_ARENA_ALIGN (2u << 20)
#define QT_TENSOR_ALIGN 64

/* Mesh axes (docs/design.md section 4). A sharding spec is one bitmask of mesh axes per dim;
 * 0 means replicated along that dim. */
enum qt_mesh_axis {
    QT_MESH_DATA = 0,
    QT_MESH_FSDP,
    QT_MESH_TENSOR,
    QT_MESH_EXPERT,
    QT_MESH_CONTEXT,
    QT_MESH_COUNT
};

/* Storage dtype of a tensor. QT_BF16 (bfloat16: the upper 16 bits of an fp32, rounded to
 * nearest even) appears only in plans generated with dtype=bfloat16 (qt_plan.dtype):
 * activations, matmul operands and the parameters' compute copy (docs/precision.md). */
enum qt_dtype { QT_F32 = 0, QT_I32 = 1, QT_BF16 = 2 };

/* Bytes per element of a dtype. */
static inline int64_t qt_dtype_bytes(unsigned dtype)
{
    return dtype == QT_BF16 ? 2 : 4;
}

/* What a tensor is for; drives the memory map in plan.txt and checkpoint IO. */
enum qt_role {
    QT_ROLE_PARAM = 0,   /* fp32 master weight (flat parameter region) */
    QT_ROLE_GRAD,        /* final gradient of a parameter (flat gradient region) */
    QT_ROLE_ADAM_M,      /* first moment */
    QT_ROLE_ADAM_V,      /* second moment */
    QT_ROLE_INPUT,       /* tokens / targets of the current microbatch */
    QT_ROLE_ACT,         /* forward activation */
    QT_ROLE_SAVED,       /* statistic saved by a forward op for its backward */
    QT_ROLE_ACT_GRAD,    /* gradient of an activation */
    QT_ROLE_LOSS,        /* per-sequence loss sums */
    QT_ROLE_TABLE,       /* constant table filled by the init schedule (rotary) */
    QT_ROLE_SCRATCH,     /* kernel scratch, dead outside one op */
    QT_ROLE_COUNT
};

/* How a parameter is initialised when no checkpoint is loaded (MaxText rules). */
enum qt_init_rule {
    QT_INIT_ZEROS = 0,       /* (1+w) norms */
    QT_INIT_ONES,            /* dt_bias, gated-norm weight */
    QT_INIT_NORMAL,          /* N(0, init_scale^2) */
    QT_INIT_TRUNC_NORMAL,    /* N(0, init_scale^2) truncated to +-2 sigma */
    QT_INIT_LOG_UNIFORM,     /* log(U(init_lo, init_hi))  (A_log) */
    QT_INIT_COUNT
};

typedef struct qt_tensor {
    const char *name;              /* e.g. "L3.attn.q" or an HF parameter name */
    uint8_t role;                  /* enum qt_role */
    uint8_t dtype;                 /* enum qt_dtype */
    uint8_t ndim;
    int64_t shape[QT_MAX_DIMS];    /* this rank's local shape */
    int64_t global_shape[QT_MAX_DIMS];
    uint8_t axes[QT_MAX_DIMS];     /* logical axis ids (configgen's table, names in plan.txt) */
    uint8_t spec[QT_MAX_DIMS];     /* bitmask of enum qt_mesh_axis per dim */
    int64_t offset;                /* byte offset into the arena */
    int64_t numel;                 /* local element count */
    /* A split dim made of several parts split separately (the GDN conv channels: q, k, v):
     * the parts' global lengths; each rank holds the same share of every part, the parts
     * back to back. seg[0] = 0: the dim is one part. */
    int64_t seg[QT_MAX_SEGS];
    int32_t seg_dim;               /* the dim seg[] describes */
} qt_tensor;

typedef struct qt_op {
    uint16_t kind;                 /* enum qt_op_kind (qt_ops.h) */
    uint16_t flags;
    int32_t t[QT_OP_MAX_T];        /* tensor ids, meaning per kind (qt_ops.h), QT_NONE if unused */
    int64_t a[QT_OP_MAX_A];        /* integer attributes, meaning per kind */
    float f[QT_OP_MAX_F];          /* float attributes, meaning per kind */
} qt_op;

typedef struct qt_param {
    const char *name;              /* canonical (Qwen3-Next HF) name, e.g.
                                      "model.layers.0.linear_attn.in_proj_qkvz.weight" */
    int32_t tensor;                /* tensor id of the value (role PARAM) */
    int64_t flat_offset;           /* element offset inside every flat region */
    int64_t numel;
    uint8_t init;                  /* enum qt_init_rule */
    float init_scale, init_lo, init_hi;
    int32_t layer;                 /* decoder layer, -1 for embedding / final norm / head */
    int64_t leaves;                /* leaves of its gradient tree per step: the sequences whose
                                      gradient this rank computes (micro_batch * grad_accum, or
                                      every sequence of the expert group for routed experts) */
    int64_t leaf_offset;           /* element offset inside the leaf-tree levels: flat_offset,
                                      except with per-layer reduction (qt_plan.leaf_elems <
                                      n_flat), where it is the parameter's place in its
                                      range's window: ranges[r].leaf_lo + flat_offset - lo */
} qt_param;

/* scan_layers: a block of the microbatch schedule stored once and run `count` times in a
 * row; run j (0-based) executes each op of the block with its tensor ids and integer
 * attributes moved by j times the op's stride (configgen checked, op by op, that the
 * unrolled schedule is exactly that: the layer cycles differ only by which tensors,
 * parameters, ranges and collectives they name). Walk a schedule with qt_mb_cursor. */
typedef struct qt_op_stride {
    int32_t t[QT_OP_MAX_T];
    int64_t a[QT_OP_MAX_A];
} qt_op_stride;

#define QT_MAX_SCANS 2
typedef struct qt_scan {
    int32_t lo, n;                 /* the stored block mb_ops[lo, lo + n) */
    int32_t count;                 /* runs, >= 1 */
    const qt_op_stride *stride;    /* n entries */
} qt_scan;

/* A contiguous range of the flat parameter vector whose parameters share one reduction
 * pattern (configgen orders the parameters so each class is contiguous). Its gradient is
 * summed over the group reduce_mask (the batch axes on which the range is replicated), its
 * optimizer state and update are split over opt_mask (a subset of reduce_mask), and ranks
 * differing on hold_mask hold different parameters (experts sharded over `expert`). Rank i
 * of a group of R ranks owns the block [lo + i*n/R, lo + (i+1)*n/R). */
typedef struct qt_flat_range {
    int64_t lo, n;                 /* flat elements; n a multiple of 16 x |reduce group| */
    uint8_t reduce_mask, opt_mask, hold_mask;
    int64_t adam_lo;               /* where this rank's block starts in the Adam regions */
    int64_t mb_lo;                 /* where this rank's reduce block starts in the compact
                                      microbatch-tree levels (qt_plan.mb_elems) */
    int64_t leaf_lo;               /* where the range starts in the leaf-tree levels: lo, or
                                      with per-layer reduction its window (windows of ranges
                                      whose gradients are live at the same time are disjoint) */
} qt_flat_range;

/* A pre-planned collective (docs/design.md section 3): its kind (one row of qt_coll.def), the
 * group of mesh axes it runs over (a bitmask of enum qt_mesh_axis; the members are the ranks
 * that share this rank's coordinates on every other axis, firmware/comm/qt_coll.h) and the
 * arena byte range it moves. Peers are not listed: every rank derives them from its rank id, so the table does
 * not grow with the rank count. Float reductions use fixed pairing (never MPI_SUM), so
 * they reproduce the pairwise tree over group indices. QT_OP_COLLECTIVE records index this
 * table. */
enum qt_collective_kind {
#define QT_COLL(e, name, text, unit, split, sent, run) QT_COLL_##e,
#include "qt_coll.def"
#undef QT_COLL
    QT_COLL_KIND_COUNT
};

/* Bytes one rank sends for a collective over R ranks moving a range of `bytes` (qt_coll.def
 * SENT column). */
static inline int64_t qt_coll_sent_BLOCKS(int64_t R, int64_t bytes)
{
    return R <= 1 ? 0 : bytes / R * (R - 1);
}

/* A point-to-point message (SEND_RECV): its bytes, once. */
static inline int64_t qt_coll_sent_ONE(int64_t R, int64_t bytes)
{
    (void)R;
    return bytes;
}

/* A tree-shaped collective (qt_coll.def SENT TREE): its bytes once per stage, ceil(log2 R)
 * stages. */
static inline int64_t qt_coll_sent_TREE(int64_t R, int64_t bytes)
{
    int64_t stages = 0;
    while (((int64_t)1 << stages) < R) stages++;
    return stages * bytes;
}

/* A collective kind's row of qt_coll.def (NULL for a kind outside the enum). */
typedef struct qt_coll_kind_info {
    const char *enum_name;         /* "QT_COLL_<ENUM>" */
    const char *text;              /* printable name */
    int32_t unit;                  /* bytes per element */
    int32_t split;                 /* 1: R blocks, one per group index */
    int64_t (*sent)(int64_t R, int64_t bytes);
} qt_coll_kind_info;

static inline const qt_coll_kind_info *qt_coll_kind(unsigned kind)
{
    static const qt_coll_kind_info rows[QT_COLL_KIND_COUNT] = {
#define QT_COLL(e, name, text, unit, split, sent, run) \
    {"QT_COLL_" #e, text, unit, split, qt_coll_sent_##sent},
#include "qt_coll.def"
#undef QT_COLL
    };
    return kind < QT_COLL_KIND_COUNT ? &rows[kind] : 0;
}

typedef struct qt_collective {
    const char *name;              /* what moves, for plan.txt and error messages */
    uint8_t kind;                  /* enum qt_collective_kind */
    uint8_t mask;                  /* mesh axes of the group */
    int64_t offset, bytes;         /* arena byte range (bytes: the whole range, all blocks) */
} qt_collective;

typedef struct qt_model_dims {
    int32_t decoder_block;         /* 0 = qwen3_next, 1 = qwen3_5 */
    int64_t d, n_layers, vocab, cycle;
    int64_t n_q_heads, n_kv_heads, head_dim, rotary_dim;
    int64_t gdn_k_heads, gdn_v_heads, gdn_k_dim, gdn_v_dim, gdn_conv, gdn_chunk;
    int64_t n_experts, top_k, moe_dim, shared_dim;
    float norm_eps, rope_theta;
} qt_model_dims;

typedef struct qt_train_cfg {
    int64_t micro_batch;           /* sequences per microbatch on this rank (per_device_batch_size) */
    int64_t seq_len;               /* max_target_length */
    int64_t grad_accum;            /* gradient_accumulation_steps */
    int64_t global_batch;          /* sequences per optimizer step over all ranks */
    int64_t steps;                 /* default number of steps */
    int64_t schedule_steps;        /* learning_rate_schedule_steps resolved (= steps if -1) */
    float lr, adam_b1, adam_b2, adam_eps, weight_decay, clip;
    float warmup_frac, final_frac, lb_weight;
    /* Appended for issue 33; each group is hashed (plan and state hash) and written into
     * plan.c only when set, so every older plan keeps its bytes and hash.
     * The schedule (docs/model.md section 4): lr_schedule 0 cosine (warmup from warmup_frac
     * at run time, as before), 1 wsd: warmup wsd_warmup steps, stable, then wsd_decay steps
     * of decay (wsd_cosine: 0 linear, 1 cosine), both lengths MaxText's int(L x fraction)
     * taken in double by configgen. */
    int32_t lr_schedule, wsd_cosine;
    int64_t wsd_warmup, wsd_decay;
    float z_loss;                  /* z_loss_multiplier: z x logsumexp^2 per target (0 off) */
    /* Held-out evaluation (docs/cli.md eval_data=): after step s when eval_interval > 0,
     * s >= eval_start and (s - eval_start) % eval_interval == 0; eval_steps batches (-1: the
     * whole eval file) of eval_batch sequence slots per sequence group, run as
     * ceil(eval_batch / micro_batch) forwards of the microbatch (the last one's slots past
     * eval_batch padded with a masked sequence: no loss, no target counted); the forward is
     * the microbatch schedule's logical ops [0, eval_fwd_ops); target_eval_loss > 0 stops. */
    int64_t eval_interval, eval_start, eval_steps, eval_batch, eval_fwd_ops;
    float target_eval_loss;
    /* Appended for issue 35, hashed and written only when set: the sequences one eval batch
     * evaluates over the whole mesh (MaxText's int(devices x eval_per_device_batch_size))
     * when they do not fill every group's eval_batch slots: the slots of the mesh's eval
     * batch are its sequences 0 .. eval_global-1 in group order, the rest padded (masked).
     * 0: eval_batch x the sequence groups, all real. */
    int64_t eval_global;
} qt_train_cfg;

/* The plan: its fields are declared once, in qt_plan_fields.def (type, name, how plan.c
 * writes it and how the plan hash covers it); the struct is that list in order. */
#define QT_PLAN_DECL_I32(F) int32_t F
#define QT_PLAN_DECL_F32(F) float F
#define QT_PLAN_DECL_I64(F) int64_t F
#define QT_PLAN_DECL_I64L(F) int64_t F
#define QT_PLAN_DECL_X8(F) uint8_t F
#define QT_PLAN_DECL_U64X(F) uint64_t F
#define QT_PLAN_DECL_STR(F) const char *F
#define QT_PLAN_DECL_TEXT(F) const char *F
#define QT_PLAN_DECL_ARENA(F) unsigned char *F
#define QT_PLAN_DECL_MESH(F) int32_t F[QT_MESH_COUNT]
#define QT_PLAN_DECL_LEVELS(F) int64_t F[QT_MAX_TREE_LEVELS]
#define QT_PLAN_DECL_MODEL(F) qt_model_dims F
#define QT_PLAN_DECL_TRAIN(F) qt_train_cfg F
#define QT_PLAN_DECL_TENSORS(F) const qt_tensor *F
#define QT_PLAN_DECL_PARAMS(F) const qt_param *F
#define QT_PLAN_DECL_RANGES(F) const qt_flat_range *F
#define QT_PLAN_DECL_OPS(F) const qt_op *F
#define QT_PLAN_DECL_SCANS(F) const qt_scan *F
#define QT_PLAN_DECL_COLLS(F) const qt_collective *F

/* Mesh coordinates with slices (the plan's dcn field, qt_plan_fields.def): the slices of
 * axis a (1 when dcn is NULL or holds 0 / 1 there). */
static inline int32_t qt_mesh_dcn(const int32_t *dcn, int a)
{
    return dcn && dcn[a] > 1 ? dcn[a] : 1;
}

/* The number of slices (machines, or groups of machines on the fast network). */
static inline int64_t qt_mesh_slices(const int32_t *dcn)
{
    int64_t n = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++) n *= qt_mesh_dcn(dcn, a);
    return n;
}

/* coord[a] of world rank `rank` on mesh[] with slices dcn[] (may be NULL): slice-major,
 * each part a mixed-radix number over the axes, data most significant; one slice gives
 * rank = (((d*F + f)*T + t)*E + e)*C + c. */
static inline void qt_mesh_coords(const int32_t *mesh, const int32_t *dcn, int64_t rank,
                                  int32_t *coord)
{
    int64_t per = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        per *= mesh[a] > 0 ? mesh[a] / qt_mesh_dcn(dcn, a) : 1;
    int64_t slice = rank / per, r = rank % per;
    for (int a = QT_MESH_COUNT - 1; a >= 0; a--) {
        const int64_t nd = qt_mesh_dcn(dcn, a), ni = mesh[a] > 0 ? mesh[a] / nd : 1;
        coord[a] = (int32_t)((slice % nd) * ni + r % ni);
        slice /= nd;
        r /= ni;
    }
}

/* The world rank of mesh coordinates coord[] (the inverse of qt_mesh_coords). */
static inline int64_t qt_mesh_rank(const int32_t *mesh, const int32_t *dcn,
                                   const int32_t *coord)
{
    int64_t slice = 0, r = 0, per = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++) {
        const int64_t nd = qt_mesh_dcn(dcn, a), ni = mesh[a] > 0 ? mesh[a] / nd : 1;
        slice = slice * nd + coord[a] / ni;
        r = r * ni + coord[a] % ni;
        per *= ni;
    }
    return slice * per + r;
}

typedef struct qt_plan {
#define QT_PLAN_FIELD(KIND, F, N, HASH, HWHEN, EWHEN, CG) QT_PLAN_DECL_##KIND(F);
#include "qt_plan_fields.def"
#undef QT_PLAN_FIELD
} qt_plan;

/* QT_PLAN_N_HASHED fields are hashed; their HASH places are exactly 0 .. QT_PLAN_N_HASHED-1:
 * none is at or above n (QT_PLAN_HASH_OVER) and they sum to n(n-1)/2 (QT_PLAN_HASH_SUM),
 * which distinct non-negative places do only as 0 .. n-1 (distinct: the case labels of
 * qt_plan_hash's switch). */
enum {
    QT_PLAN_N_HASHED = 0
#define QT_PLAN_FIELD(KIND, F, N, HASH, HWHEN, EWHEN, CG) + ((HASH) >= 0)
#include "qt_plan_fields.def"
#undef QT_PLAN_FIELD
};
enum {
    QT_PLAN_HASH_OVER = 0
#define QT_PLAN_FIELD(KIND, F, N, HASH, HWHEN, EWHEN, CG) + ((HASH) >= QT_PLAN_N_HASHED)
#include "qt_plan_fields.def"
#undef QT_PLAN_FIELD
    ,
    QT_PLAN_HASH_SUM = 0
#define QT_PLAN_FIELD(KIND, F, N, HASH, HWHEN, EWHEN, CG) + ((HASH) >= 0 ? (HASH) : 0)
#include "qt_plan_fields.def"
#undef QT_PLAN_FIELD
};
#ifdef __cplusplus
static_assert(QT_PLAN_HASH_OVER == 0 &&
              QT_PLAN_HASH_SUM == QT_PLAN_N_HASHED * (QT_PLAN_N_HASHED - 1) / 2,
              "qt_plan_fields.def: the HASH places are not 0 .. n-1 each once");
#else
_Static_assert(QT_PLAN_HASH_OVER == 0 &&
               QT_PLAN_HASH_SUM == QT_PLAN_N_HASHED * (QT_PLAN_N_HASHED - 1) / 2,
               "qt_plan_fields.def: the HASH places are not 0 .. n-1 each once");
#endif

/* 1 if tree level l of a plan with these level counts is a compact microbatch-tree level
 * (this rank's reduce blocks only, mb_elems floats; see tree_offset): the microbatch
 * tree's levels below its top, and its top too when grads_compact. The one rule for
 * configgen's layout and report and the firmware's checks. */
static inline int qt_tree_level_compact(int32_t n_tree_levels, int32_t n_mb_levels,
                                        int32_t grads_compact, int l)
{
    return n_mb_levels > 0 && l >= n_tree_levels - n_mb_levels &&
           (l < n_tree_levels - 1 || (grads_compact && l == n_tree_levels - 1));
}

/* Floats of tree level l (tree_offset[l]): compact, a leaf-tree level, or the whole flat
 * vector (the gradient region when it is not compact). */
static inline int64_t qt_tree_level_elems(const struct qt_plan *p, int l)
{
    if (qt_tree_level_compact(p->n_tree_levels, p->n_mb_levels, p->grads_compact, l))
        return p->mb_elems;
    return l < p->n_tree_levels - p->n_mb_levels ? p->leaf_elems : p->n_flat;
}

/* Floats of the parameter region (the fp32 master weights). A bf16 plan keeps only this
 * rank's optimizer blocks there (laid out as the Adam regions); its compute copy is the bf16
 * region at compute_offset (or the gather windows). */
static inline int64_t qt_params_elems(const struct qt_plan *p)
{
    return p->params_compact || p->dtype == QT_BF16 ? p->adam_elems : p->n_flat;
}

/* 1 when the parameter region holds only this rank's optimizer blocks of the fp32 master
 * weights (laid out as the Adam regions): params_compact plans, and every bf16 plan, whose
 * ops read the bf16 compute copy instead. Init, checkpoint IO, the update and the
 * fingerprint address master elements through it (runtime/blocks.c). */
static inline int qt_plan_masters_compact(const struct qt_plan *p)
{
    return p->params_compact || p->dtype == QT_BF16;
}

/* The flat range holding flat element `flat` (ranges tile [0, n_flat) in order), or -1. */
static inline int32_t qt_plan_range_of(const struct qt_plan *p, int64_t flat)
{
    int32_t lo = 0, hi = p->n_ranges - 1;
    while (lo <= hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (flat < p->ranges[mid].lo) hi = mid - 1;
        else if (flat >= p->ranges[mid].lo + p->ranges[mid].n) lo = mid + 1;
        else return mid;
    }
    return -1;
}

/* Canonical token blocks per sequence (context_blocks; 0 in plans without them = 1); the
 * context degree (ranks sharing each sequence: the context axis); the tokens of a sequence
 * this rank's per-token ops hold (seq_len / context degree: its token block of the
 * sequence); and the WGRAD leaves (and loss_seq entries) of one microbatch of this rank's
 * per-token ops: a leaf is one token block of one sequence, in (sequence, block) order
 * (docs/context.md). */
static inline int64_t qt_plan_blocks(const struct qt_plan *p)
{
    return p->context_blocks > 1 ? p->context_blocks : 1;
}

static inline int64_t qt_plan_context(const struct qt_plan *p)
{
    return p->mesh[QT_MESH_CONTEXT] > 1 ? p->mesh[QT_MESH_CONTEXT] : 1;
}

static inline int64_t qt_plan_tokens_per_seq(const struct qt_plan *p)
{
    return p->train.seq_len / qt_plan_context(p);
}

static inline int64_t qt_plan_leaves_per_mb(const struct qt_plan *p)
{
    return p->train.micro_batch * qt_plan_blocks(p) / qt_plan_context(p);
}

/* Token dropping: sparse_matmul false and capacity_factor > 0, a capacity C >= 1
 * (moe_capacity) or C = 0 (moe_drop_all: every routed assignment drops), the plan's
 * MOE_CAPACITY ops; or the expert hosts' receive buffers (moe_ragged, MOE_RAGGED ops).
 * The plan then has the dropped counts' tensor moe_drops. */
static inline int qt_plan_drops(const struct qt_plan *p)
{
    return p->moe_capacity > 0 || p->moe_drop_all || p->moe_ragged;
}

/* The sequence groups: the product of the batch axes but context (the ranks of a group
 * share its sequences; the held-out eval's batch is cut over them, issue 33 / 35). */
static inline int64_t qt_plan_seq_groups(const struct qt_plan *p)
{
    int64_t R = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++)
        if ((p->batch_mask & (1u << a)) && a != QT_MESH_CONTEXT) R *= p->mesh[a];
    return R;
}

/* The leaves of one unit (grad_mb_units) of a parameter with T leaves a microbatch in a
 * range held over hold_mask: the largest power of two dividing T; a routed expert
 * replicated over context (expert_ctx_rep, held over `expert`) has T = E L leaves, the L
 * blocks of each of the E members of its exchange, apart in the global order: the largest
 * power of two dividing L. */
static inline int64_t qt_plan_unit_leaves(const struct qt_plan *p, int64_t T, unsigned hold_mask)
{
    if (p->expert_ctx_rep && (hold_mask & (1u << QT_MESH_EXPERT))) {
        const int64_t L = qt_plan_leaves_per_mb(p);
        return L & -L;
    }
    return T & -T;
}

/* The microbatch form's units of flat range i (grad_mb_units > 0, docs/determinism.md "The
 * microbatch form's units"): its parameters' T leaves a microbatch cover the batch group's
 * R L over its reduce group of R_r ranks (T = R L / R_r), as q_r units of U_r leaves (U_r
 * the largest power of two dividing T, q_r odd, q_r <= grad_mb_units); returns q_r, and
 * *count = G R_r q_r, the units its counter runs over in a step. */
static inline int64_t qt_plan_range_mb_units(const struct qt_plan *p, int32_t i, int64_t *count)
{
    int64_t R = 1, Rr = 1;
    for (int a = 0; a < QT_MESH_COUNT; a++) {
        if (p->batch_mask & (1u << a)) R *= p->mesh[a];
        if (p->ranges[i].reduce_mask & (1u << a)) Rr *= p->mesh[a];
    }
    const int64_t T = R * qt_plan_leaves_per_mb(p) / Rr,
                  q = T > 0 ? T / qt_plan_unit_leaves(p, T, p->ranges[i].hold_mask) : 0;
    *count = p->train.grad_accum * Rr * q;
    return q;
}

/* The comm scratch of the blocking collectives (split = 0) or of the split reduce-scatters
 * (split = 1): its first float in *elems floats (comm_split_elems, qt_plan_fields.def). */
static inline float *qt_plan_comm_scratch(const struct qt_plan *p, int split, int64_t *elems)
{
    const int64_t blocking = p->comm_scratch_elems - p->comm_split_elems;
    *elems = split ? p->comm_split_elems : blocking;
    return (float *)(void *)(p->arena + p->comm_scratch_offset) + (split ? blocking : 0);
}

/* Floats of the gradient region. */
static inline int64_t qt_grads_elems(const struct qt_plan *p)
{
    return p->grads_compact ? p->mb_elems : p->n_flat;
}

/* Walks the unrolled microbatch schedule of a plan:
 *   qt_mb_cursor c = qt_mb_begin(p);
 *   while (qt_mb_next(&c)) use(c.op, c.logical);
 * c.op is the stored op, or for a repeated run of a scanned block the op moved by its
 * stride (materialised in c.buf). Scans must lie inside mb_ops in order (validated at
 * start-up by qt_runtime_init before any walk that runs ops). */
typedef struct qt_mb_cursor {
    const struct qt_plan *p;
    int32_t i;        /* next stored op */
    int32_t rep;      /* run of the scanned block i lies in (0 outside scans) */
    int32_t logical;  /* index of c.op in the unrolled schedule */
    const qt_op *op;
    qt_op buf;
} qt_mb_cursor;

static inline qt_mb_cursor qt_mb_begin(const struct qt_plan *p)
{
    qt_mb_cursor c;
    c.p = p;
    c.i = 0;
    c.rep = 0;
    c.logical = -1;
    c.op = 0;
    return c;
}

static inline int qt_mb_next(qt_mb_cursor *c)
{
    const struct qt_plan *p = c->p;
    if (c->i >= p->n_mb_ops) return 0;
    const qt_scan *sc = 0;
    for (int32_t k = 0; k < p->n_scans; k++)
        if (c->i >= p->scans[k].lo && c->i < p->scans[k].lo + p->scans[k].n) sc = &p->scans[k];
    c->op = &p->mb_ops[c->i];
    if (sc && c->rep > 0) {
        const qt_op_stride *st = &sc->stride[c->i - sc->lo];
        c->buf = *c->op;
        for (int k = 0; k < QT_OP_MAX_T; k++) c->buf.t[k] += c->rep * st->t[k];
        for (int k = 0; k < QT_OP_MAX_A; k++) c->buf.a[k] += c->rep * st->a[k];
        c->op = &c->buf;
    }
    c->logical++;
    c->i++;
    if (sc && c->i == sc->lo + sc->n) {
        if (++c->rep < sc->count) c->i = sc->lo;  /* the block again, one stride further */
        else c->rep = 0;
    }
    return 1;
}

/* Execution context handed to op wrappers: the plan, its arena, and who this rank is on
 * the mesh (everything rank-specific derives from these at start-up). Collectives reach
 * their communicators through the comm layer by group mask (firmware/comm/qt_coll.h);
 * `status` receives the first error of an op that can fail inside a step (a collective). */
typedef struct qt_ctx {
    const qt_plan *plan;
    unsigned char *arena;
    int32_t rank, n_ranks;
    int32_t coord[QT_MESH_COUNT];  /* this rank's coordinate on each mesh axis */
    int *status;                   /* NULL or where a failing op stores its QT_E_* code */
    const struct qt_stage_map *stage; /* NULL, or (bf16 boundary) tensors widened to fp32 */
    struct qt_wgrad_epi *wgrad_epi;   /* NULL, or (WGRAD calls) the leaf-tree carry offered to
                                       * the wrapper (qt_leaf_carry.h) */
    /* bf16 plans: runs op through the boundary (runtime/interp_bf16.c), for a native wrapper
     * that cannot take its own path (ops/ops_bf16_rows.c); set by the runtime, so the ops
     * layer reaches the runtime's boundary without depending on it (tests/layers.txt) */
    void (*bf16_boundary)(const qt_op *op, const struct qt_ctx *ctx);
    void (*bf16_boundary_wgrad)(const qt_op *op, const struct qt_ctx *ctx, int64_t seq,
                                float *const dw[2]);
    /* 1 while the held-out eval's forward runs (qt_runtime_eval), else 0: the eval-only
     * kinds (MTP_ACCEPT) skip themselves in a training microbatch */
    int eval;
} qt_ctx;

/* The tensors of one op that the bf16 boundary (runtime/interp_bf16.c) widened into the
 * plan's fp32 staging region: while the op's fp32 wrapper runs, qt_f32 of tensor id[i]
 * returns at[i] instead of the tensor's bf16 storage. */
typedef struct qt_stage_map {
    int32_t n;
    int32_t id[QT_OP_MAX_T];
    float *at[QT_OP_MAX_T];
} qt_stage_map;

/* An fp32 tensor's storage: the arena at its offset, or its staging copy while the bf16
 * boundary runs the op (c->stage). */
static inline float *qt_f32(const qt_ctx *c, int32_t id)
{
    if (c->stage)
        for (int32_t i = 0; i < c->stage->n; i++)
            if (c->stage->id[i] == id) return c->stage->at[i];
    return (float *)(void *)(c->arena + c->plan->tensors[id].offset);
}

/* A bf16 tensor's storage (its elements are the high halves of binary32, kernels/bf16.h). */
static inline uint16_t *qt_b16(const qt_ctx *c, int32_t id)
{
    return (uint16_t *)(void *)(c->arena + c->plan->tensors[id].offset);
}

/* 1 when tensor id is stored in bf16. */
static inline int qt_is_b16(const qt_ctx *c, int32_t id)
{
    return id != QT_NONE && c->plan->tensors[id].dtype == QT_BF16;
}

/* An I32 tensor's storage (token ids, positions, counts). */
static inline int32_t *qt_i32(const qt_ctx *c, int32_t id)
{
    return (int32_t *)(void *)(c->arena + c->plan->tensors[id].offset);
}

/* Packed documents: each input token's position inside its document ([micro_batch *
 * seq_len], the positions tensor the data fill writes), or NULL for an unpacked plan. */
static inline const int32_t *qt_plan_positions(const qt_ctx *c)
{
    return c->plan->packing ? qt_i32(c, c->plan->positions) : (const int32_t *)0;
}

#endif
