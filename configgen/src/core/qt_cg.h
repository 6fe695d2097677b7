/* core/qt_cg.h - configgen's shared data model (host tool, not firmware): utilities, the
 * mesh axis vocabulary, the validated settings, and the graph every stage reads and
 * extends (tensors, ops, schedules, ranges, arena offsets). Each stage declares its own
 * functions in <stage>/qt_cg_<stage>.h, so a file's includes show which stages it uses.
 *
 * configgen turns a layered YAML config (base.yml, models/<model>.yml, runs/<run>.yml,
 * key=value overrides) into the static plan tables of firmware/include/qt_plan.h. The
 * pipeline (driver/pipeline.c runs it top to bottom), stage by stage:
 *   config/    parse the YAML subset (yaml.c), layer the known keys (config.c), validate
 *              and resolve them into qt_cg_settings, the mesh included (settings.c)
 *   mesh/      logical axes -> mesh axes (shard.c), mesh groups (groups.c), each tensor's
 *              declared and executed layout (layout.c)
 *   model/     the forward graph (graph.c), reverse-mode autodiff (autodiff.c), remat
 *              (remat.c), each tensor's storage dtype (precision.c)
 *   memory/    flat parameter ranges (ranges.c); the arena and the liveness planner
 *              (memplan.c); the per-rank budget (budget.c)
 *   schedule/  per-layer reduce and gather edits of the microbatch schedule, between the
 *              ranges and the arena (layer_ops.c); the step schedule and its collectives
 *              (step.c); scanned layer cycles (scan.c)
 *   check/     the schedules (check.c), the layout type check (layout.c), the memory plan
 *              (plan.c)
 *   emit/      the plan hash (hash.c), plan.h / plan.c / plan_main.c (emit.c), plan.txt
 *              (report.c)
 *   driver/    the pipeline and the gradient_reduce / param_gather form chosen against the
 *              budget (pipeline.c), the command and the atomic write (generate.c, main.c),
 *              configgen --diff (diff.c)
 * Layering: core < config < mesh < model < memory < schedule < check < emit < driver. A
 * file calls functions of its own stage or of lower ones only, and no two files call each
 * other (checked on the objects: nm, undefined symbols against their definitions).
 * Invariants: C11, -Wall -Wextra -Werror; every public symbol is prefixed qt_cg_ and
 * snake_case; every function that can fail returns 0 on success or -1 after writing one
 * message into (err, errlen); on any error nothing is written to the output directory. The
 * host may use malloc; allocation failure aborts.
 */
#ifndef QT_CG_H
#define QT_CG_H

#include <stddef.h>
#include <stdint.h>
#include "qt_plan.h"
#include "qt_ops.h"

#define QT_CG_VERSION "0.1.0"

/* ---- utilities (core/util.c) ------------------------------------------------------- */

/* Format a message into err (if non-NULL) and return -1, so callers write
 * `return qt_cg_fail(err, errlen, ...)`. */
int qt_cg_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void *qt_cg_alloc(size_t bytes);                       /* zeroed; aborts when out of memory */
void *qt_cg_grow(void *p, int *cap, int need, size_t elem); /* amortised array growth */
char *qt_cg_strdup(const char *s);

/* Growable text buffer; p is always NUL-terminated. */
typedef struct qt_cg_buf {
    char *p;
    size_t n, cap;
} qt_cg_buf;
void qt_cg_buf_printf(qt_cg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void qt_cg_buf_free(qt_cg_buf *b);

/* Levenshtein distance between a and b (insertions, deletions, substitutions of bytes: the
 * "did you mean" hints for unknown keys and values). */
int qt_cg_edit_distance(const char *a, const char *b);
/* Read a whole file into a fresh NUL-terminated buffer: a regular file of at most 16 MiB
 * (a directory, device or FIFO is refused with a message saying what it is). */
int qt_cg_read_file(const char *path, char **text, char *err, size_t errlen);
/* Format a float as a C literal that round-trips ("1e-06f", "10000.0f"). */
void qt_cg_float_literal(char *out, size_t n, float v);

/* ---- the MaxText mesh axis vocabulary (core/axes.c) ---- */

#define QT_CG_MAX_RULE_AXES 12
/* MaxText mesh axes (docs/sharding.md section 1); those qtrain lacks have size 1. */
#define QT_CG_N_MT_AXES 12

extern const char *const qt_cg_mt_axis_names[QT_CG_N_MT_AXES];
/* MaxText mesh axis id -> enum qt_mesh_axis, or -1 when qtrain lacks the axis. */
int qt_cg_mt_to_qt(int mt_axis);
int qt_cg_mt_axis_id(const char *name);    /* -1 if unknown */

/* Logical axis ids stored in qt_tensor.axes (0 = none/replicated). */
enum qt_cg_lax {
    QT_LAX_NONE = 0,
    QT_LAX_ACT_BATCH, QT_LAX_ACT_NORM_LENGTH, QT_LAX_ACT_EMBED, QT_LAX_ACT_LENGTH,
    QT_LAX_ACT_EMBED_LOGITS_BATCH, QT_LAX_ACT_VOCAB, QT_LAX_ACT_KV_BATCH,
    QT_LAX_ACT_LENGTH_ATTN, QT_LAX_ACT_KV_HEADS, QT_LAX_ACT_KV_HEAD_DIM, QT_LAX_ACT_MLP,
    QT_LAX_VOCAB, QT_LAX_EMBED_VOCAB, QT_LAX_EMBED, QT_LAX_GDN_HEAD, QT_LAX_Q_HEADS,
    QT_LAX_KV_HEADS, QT_LAX_MLP, QT_LAX_EXP, QT_LAX_EMBED_MOE, QT_LAX_MLP_MOE,
    QT_LAX_ACT_HEADS,
    QT_LAX_COUNT
};
/* ---- validated settings (the config stage resolves them: config/settings.c) ---- */

typedef struct qt_cg_rule {
    const char *name;          /* logical axis name (points into the config) */
    int n;
    int axes[QT_CG_MAX_RULE_AXES]; /* MaxText mesh axis ids (qt_cg_mt_axis_names) */
} qt_cg_rule;

enum qt_cg_remat_policy { QT_CG_REMAT_NONE = 0, QT_CG_REMAT_FULL, QT_CG_REMAT_SAVE_DOT };
enum qt_cg_param_gather { QT_CG_GATHER_AUTO = 0, QT_CG_GATHER_STEP, QT_CG_GATHER_LAYER };
enum qt_cg_overlap { QT_CG_OVERLAP_AUTO = 0, QT_CG_OVERLAP_ON, QT_CG_OVERLAP_OFF, QT_CG_OVERLAP_ALL };
enum qt_cg_expert_dispatch { QT_CG_DISPATCH_WHOLE = 0, QT_CG_DISPATCH_ROUNDS };
enum qt_cg_grad_reduce { QT_CG_REDUCE_AUTO = 0, QT_CG_REDUCE_STEP, QT_CG_REDUCE_MICROBATCH,
                         QT_CG_REDUCE_LAYER };

typedef struct qt_cg_settings {
    char run_name[128];
    char cname[128];           /* run_name with non-alphanumerics -> '_' */
    char model_name[128];
    qt_model_dims m;
    qt_train_cfg tr;
    double per_device_batch;                   /* per_device_batch_size (may be a fraction) */
    int64_t batch_maxtext;     /* > 0: per_device_batch_size x tensor x context (x stages) is
                                * not whole; MaxText's int(n_ranks x per_device_batch_size)
                                * sequences per microbatch, split evenly over the batch groups
                                * (qt_cg_group_batch), or (batch_padded) unevenly */
    int64_t batch_padded;      /* > 0: those sequences do not split evenly over the batch
                                * groups (per_device_batch_size < 1, as MaxText's sliced
                                * batch): the groups' slots past them, this many, are padded
                                * sequences with every target masked (tr.global_batch counts
                                * the real ones; docs/refusals.md) */
    int32_t mesh[QT_MESH_COUNT];
    int32_t dcn[QT_MESH_COUNT];   /* slices of each axis (dcn_*_parallelism; 1 = one slice) */
    int32_t n_ranks, shard_mode, zero1;
    int32_t remat;             /* enum qt_cg_remat_policy */
    int32_t param_gather;      /* enum qt_cg_param_gather (param_gather) */
    int32_t scan_layers;       /* scan_layers: store repeated layer cycles once */
    int64_t expert_chunk_rows; /* expert_chunk_rows: rows per chunk of the routed expert
                                  FFN's forward and backward scratch (qt_cg_expert_chunk) */
    int32_t expert_dispatch;   /* enum qt_cg_expert_dispatch (expert_dispatch, config/dispatch.c) */
    int32_t expert_rounds_auto; /* expert_dispatch auto with rounds possible: the driver plans
                                   rounds when the whole dispatch is over the budget */
    int64_t expert_round_rows; /* rows per round of the dispatch in rounds (config/dispatch.c) */
    int64_t ckpt_window;       /* checkpoint_window_floats: floats per checkpoint gather
                                  window (memory/memplan.c ckpt_window) */
    int32_t grad_reduce;       /* enum qt_cg_grad_reduce (gradient_reduce) */
    int32_t overlap;           /* enum qt_cg_overlap (collective_overlap) */
    int32_t dtype;             /* compute dtype (dtype): QT_F32 or QT_BF16 (docs/precision.md) */
    int32_t ctx_seq_split;     /* context parallelism with b > 1 sequences per batch group:
                                  b (they run as b microbatches of one), else 0 */
    int32_t context_blocks;    /* canonical token blocks per sequence (context_blocks
                                  resolved: >= 1; docs/context.md) */
    int32_t vocab_parallel;    /* logits, d.logits and lm_head split over tensor (1 only
                                  with a tensor degree > 1: vocab_parallel) */
    int32_t vocab_blocks;      /* canonical vocabulary blocks (vocab_blocks resolved: >= 1;
                                  1 = the plain cross entropy; docs/determinism.md) */
    int32_t canon_factor;      /* canonical_factor: canonical blocks and head groups are this
                                  odd factor x a power of two (config/canon.c; 1 = the
                                  powers of two of every plan without the key) */
    int32_t canon_implied;     /* 1: canonical_factor was not set and the tensor / context
                                  axes imply canon_factor (their odd parts; config/settings.c
                                  mesh_canon): the bits are one rank's with that factor */
    int32_t canon_max;         /* the most canonical blocks of a count: 0 = QT_CANON_BLOCKS
                                  (every plan with tensor x context <= it), else tensor x
                                  context, implied with canonical_factor unset (mesh_canon):
                                  the plan's bits are its own */
    char topology[64];         /* compile_topology, "" = none */
    double budget_gib;         /* per-rank arena budget (device_memory_gib), 0 = unchecked */
    uint8_t batch_mask;        /* mesh axes (size > 1) that split the global batch */
    uint8_t opt_mask;          /* mesh axes the optimizer state is split over */
    double lb_weight;
    /* The MoE form (config/moe.c, issue 32): moe_dense = sparse_matmul false (MaxText's
     * dense_matmul); moe_capacity = C, the assignments each expert keeps per sequence of
     * max_target_length tokens (capacity_factor > 0 with the dense form), 0 = dropless;
     * moe_drop_all: the dense form's capacity rounds to C = 0 (moe_capacity stays 0): every
     * routed assignment drops, as MaxText's generate_masks with C = 0;
     * moe_note: what plan.txt (and configgen's stderr) says about the form. */
    int32_t moe_dense;
    double capacity_factor;
    int64_t moe_capacity;
    int32_t moe_drop_all;
    /* ragged_buffer_factor r (MaxText's sparse path; > 0: the expert hosts' receive buffers
     * hold int(T k r) rows and drop the rest, model/graph.c moe_ragged; only with an expert
     * group of more than one rank); -1 when unset or <= 0 */
    double ragged_factor;
    char moe_note[512];
    /* expert_ctx_rep: 1 = the routed experts are split over `expert` alone and replicated
     * over context (MaxText's default rules; docs/context.md "Experts replicated over
     * context"): each context index runs its own exchange over the expert axis, and the
     * experts' gradients reduce over context as the dense weights' do. Planned where the
     * expert x context group does not divide num_experts but the expert axis does
     * (config/settings.c), and with ragged_buffer_factor > 0 (config/moe.c). 0: the expert
     * group spans expert x context. */
    int32_t expert_ctx_rep;
    int use_mrope;
    int gdn_chunked;           /* gdn_core_algorithm: 1 chunked (WY), 0 recurrent */
    int32_t packing, eos_id;   /* packing: documents end at eos_id (docs/data.md) */
    int32_t mtp_layers;        /* multi-token-prediction depths (mtp_num_layers, 0: no head;
                                  config/mtp.c, docs/model.md 1.8) */
    double mtp_factor;         /* mtp_loss_scaling_factor */
    int32_t mtp_eval_k;        /* mtp_eval_target_module: the depth whose acceptance rate the
                                  held-out eval reports (config/mtp.c), 0: none */
    int32_t mtp_keep;          /* mtp_keep_layers: depths of a checkpoint's head carried
                                  through untrained (config/mtp.c), 0: none */
    int64_t mtp_keep_bytes;    /* the carried head's region (qt_ckpt_keep.h record layout) */
    /* Pipeline parallelism (config/pipeline.c, issue 36, docs/pipeline.md): S = pp_stages
     * (ici x dcn pipeline; 1 = none, and then every pp_* below is 0 or 1), Lps =
     * pp_lps layers per stage and repeat, R = pp_repeats (circular), M = pp_micro
     * microbatches per accumulation step, pp_batch = the batch group's sequences per
     * accumulation step before the split (B; B / M per microbatch), pp_schedule 0 gpipe
     * (MaxText's, circular) 1 1f1b (Megatron's, R = 1), pp_stage = the stage whose tables
     * this plan holds (driver/pipeline.c plans every stage and keeps the heaviest),
     * pp_key = the mesh key that set S (messages). */
    int32_t pp_stages, pp_dcn, pp_lps, pp_repeats, pp_micro, pp_schedule, pp_stage;
    int64_t pp_batch;
    /* pp_local 1: the stage's executable tables (driver/pipeline.c): the embedding on stage
     * 0 only, the final norm, head and loss on the last stage only, the boundaries as
     * tensors (model/graph.c); 0: the planning graph with both (an upper bound). pp_param0,
     * pp_elem0: the stage's first parameter index and global element index in the one-rank
     * model's order (its initialisation and fingerprint). */
    int32_t pp_local;
    int64_t pp_param0, pp_elem0;
    /* pp_scan: the run's scan_layers, kept for the stage-local tables (config/pipeline.c
     * turns scan_layers off for the planning graphs; driver/pipeline.c scans a stage's
     * tables when its layers are whole layer cycles) */
    int32_t pp_scan;
    /* circular stage-local tables (pp_local, R > 1): per repeat chunk r of the stage,
     * [2 r] its first parameter's one-rank index and [2 r + 1] its one-rank element index
     * (driver/pipeline.c; model/graph.c writes them into the PP_CHUNK markers) */
    const int64_t *pp_chunk_base;
    char pp_key[48];
    qt_cg_rule *rules;
    int n_rules;
    char unused[512];          /* accepted-but-unused keys that were set (vision tower) */
    /* keys set to a value this plan ignores, as MaxText does, each with why (docs/refusals.md:
     * MaxText runs them, so qtrain does not refuse them); configgen's stderr and plan.txt
     * say so. The plan is the one without them (same tables). */
    char ignored[768];
    /* MaxText keys outside base.yml set to a value without effect here, each "key=value
     * (where): why" ("; " between; config/maxtext_keys.c); stderr and plan.txt say so */
    char mt_ignored[16384];
} qt_cg_settings;

/* Bytes per element of the parameters' compute copy (2 in bf16: docs/precision.md), and the
 * element alignment of flat offsets and range blocks that keeps every parameter and block
 * 64-byte aligned in it (16 fp32, 32 bf16). */
/* "" or "s" after a count: "1 rank", "2 ranks" (messages and plan.txt). */
static inline const char *qt_cg_s(long long n)
{
    return n == 1 ? "" : "s";
}

/* The greatest common divisor of a and b (>= 0; gcd(a, 0) = a). */
static inline int64_t qt_cg_gcd(int64_t a, int64_t b)
{
    while (b) {
        const int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Bytes of one element of the compute dtype (4 fp32, 2 bf16). */
static inline int64_t qt_cg_compute_bytes(const qt_cg_settings *s)
{
    return qt_dtype_bytes((unsigned)s->dtype);
}

/* The layers a pipeline stage holds (docs/pipeline.md): R x Lps, local layer j of stage
 * pp_stage being global layer (r x S + stage) x Lps + i for j = r x Lps + i (MaxText's
 * map); without a pipeline every layer, j itself. */
static inline int64_t qt_cg_stage_layers(const qt_cg_settings *s)
{
    return s->pp_stages > 1 ? (int64_t)s->pp_repeats * s->pp_lps : s->m.n_layers;
}

static inline int64_t qt_cg_pp_layer(const qt_cg_settings *s, int64_t stage, int64_t j)
{
    if (s->pp_stages <= 1) return j;
    return (j / s->pp_lps * s->pp_stages + stage) * s->pp_lps + j % s->pp_lps;
}

/* Canonical token blocks per sequence (context_blocks; >= 1) and the tokens of one block:
 * the rows of a WGRAD leaf and of a loss_seq entry (docs/context.md). */
static inline int64_t qt_cg_blocks(const qt_cg_settings *s)
{
    return s->context_blocks > 1 ? s->context_blocks : 1;
}

static inline int64_t qt_cg_leaf_tokens(const qt_cg_settings *s)
{
    return s->tr.seq_len / qt_cg_blocks(s);
}

/* Rows of one chunk of the routed expert FFN's forward and backward (the kernels' `cap`,
 * firmware/kernels/expert_ffn.c; the expert_chunk_rows key, default 4096): when an op has
 * more rows (T x k, an expert host's worst case Rmax included), its scratch holds the
 * intermediates of this many rows and the kernel loops over chunks. A row's forward and
 * data gradient do not depend on the chunk (the matmul row contract), so the bits do not
 * either; the weight gradient keeps its own scratch, sized so that a leaf's rows of one
 * expert are always one chunk (its canonical order). Ops with at most this many rows keep
 * the whole-rows sizes (issue 21). */
static inline int64_t qt_cg_expert_chunk(const qt_cg_settings *s)
{
    return s->expert_chunk_rows > 0 ? s->expert_chunk_rows : 4096;
}

/* The context degree (ranks sharing one sequence: docs/context.md), and the mask of the
 * context axis when it splits (0 otherwise). */
static inline int64_t qt_cg_context(const qt_cg_settings *s)
{
    return s->mesh[QT_MESH_CONTEXT] > 1 ? s->mesh[QT_MESH_CONTEXT] : 1;
}

static inline uint8_t qt_cg_context_mask(const qt_cg_settings *s)
{
    return qt_cg_context(s) > 1 ? (uint8_t)(1u << QT_MESH_CONTEXT) : 0;
}

/* The expert group (the ranks a routed row can travel to) and its mesh mask: expert x
 * context, or the expert axis alone with the experts replicated over context
 * (expert_ctx_rep); one rank (mask 0) without expert parallelism. */
static inline int64_t qt_cg_expert_group(const qt_cg_settings *s)
{
    if (s->mesh[QT_MESH_EXPERT] < 2) return 1;
    return s->mesh[QT_MESH_EXPERT] * (s->expert_ctx_rep ? 1 : qt_cg_context(s));
}

static inline uint8_t qt_cg_expert_group_mask(const qt_cg_settings *s)
{
    if (s->mesh[QT_MESH_EXPERT] < 2) return 0;
    return (uint8_t)((1u << QT_MESH_EXPERT) | (s->expert_ctx_rep ? 0 : qt_cg_context_mask(s)));
}

/* Elements of the compute dtype in QT_TENSOR_ALIGN bytes: a flat range's length is a
 * multiple of it times its group's size (check/plan.c). */
static inline int64_t qt_cg_flat_align(const qt_cg_settings *s)
{
    return QT_TENSOR_ALIGN / qt_cg_compute_bytes(s);
}

/* ---- the graph: tensors, ops and every stage's results (core/graph.c) ---- */

typedef struct qt_cg_tensor {
    qt_tensor t;               /* t.name owned by the graph */
    int param;                 /* index into params or -1 */
    int whole;                 /* live for the whole microbatch schedule */
    int first, last;           /* op index range in mb_ops (-1: unused) */
    int32_t ep_seg;            /* expert-parallel row ids (er): the seg tensor of their rows */
    int32_t alias_of;          /* per-layer parameter gathers: the gather window this
                                  parameter tensor lies in (its offset = the window's +
                                  alias_off bytes), else -1 */
    int64_t alias_off;
    uint8_t grad_done;         /* parameters: mesh axes over which every rank's gradient leaves
                                  are already complete sums (the GDN norm weight under context
                                  parallelism: its head groups are summed over tensor x
                                  context inside the WGRAD), so its range does not reduce
                                  over them (memory/ranges.c) */
    uint8_t exec[QT_MAX_DIMS]; /* execution layout: mesh axes each dim is split over in this
                                  plan (t.spec is the layout its logical axes declare) */
    const char *reshard;       /* why exec may differ from the declared layout (a layer's
                                  declaration, mesh/layout.c), or NULL */
} qt_cg_tensor;

typedef struct qt_cg_graph {
    const qt_cg_settings *s;
    qt_cg_tensor *ts;
    int nt, capt;
    qt_param *ps;
    int np, capp;
    qt_op *init;
    int ninit, capinit;
    qt_op *mb;
    int nmb, capmb;
    qt_op *step;               /* the step schedule (schedule/step.c) */
    int nstep, capstep;
    qt_op *mbend;              /* the microbatch-end schedule (meshes with batch axes) */
    int nmbend, capmbend;
    int32_t n_mb_levels;       /* microbatch tree levels (qt_plan.h), 0 for one tree */
    int32_t grad_units;        /* step form, L leaves a batch rank not a power of two: the
                                  q = L / U unit levels (qt_plan_fields.def), else 0 */
    int32_t grad_mb_units;     /* microbatch or per-layer form whose reduce-scatter is not a
                                  split of the one-rank tree: q >= 1 units a rank and microbatch
                                  (qt_plan_fields.def grad_mb_units), else 0 */
    int reduce_per_mb;         /* 1: reduce-scatter after each microbatch (n_mb_levels > 0
                                  on meshes with batch axes); chosen by qt_cg_plan_build */
    int layer_reduce;          /* 1 (with reduce_per_mb): per layer, inside the microbatch
                                  schedule (qt_plan.layer_reduce); chosen by qt_cg_plan_build */
    int grads_compact;         /* qt_plan.grads_compact (memory/memplan.c decides) */
    int params_compact;        /* 1: per-layer parameter gathers (qt_plan.params_compact);
                                  chosen by qt_cg_plan_build, implies layer_reduce */
    int mb_overlap;            /* 1 (collective_overlap all, microbatch form, G > 1): the
                                  microbatch-end's last reduce-scatter (with grad_mb_units:
                                  its last units exchange) is split, waited for before the
                                  next microbatch's backward (schedule/step.c) */
    int overlap;               /* 1: the per-layer collectives are split (COLL_START /
                                  COLL_WAIT) and moved to overlap compute (schedule/
                                  overlap.c); chosen by qt_cg_plan_build */
    int32_t *gather_win;       /* per-layer gathers: the window tensor of each pending
                                  all-gather (COLLECTIVE a0 = -1 - k), resolved by
                                  qt_cg_step_schedule */
    int n_gather_win, cap_gather_win;
    /* scan_layers (schedule/scan.c): the stored microbatch schedule (NULL: it is g->mb) and
     * its scanned blocks; g->mb stays the unrolled schedule every check works on */
    qt_op *mbc;
    int nmbc;
    int n_scans;
    qt_scan scans[QT_MAX_SCANS];
    qt_op_stride *scan_stride[QT_MAX_SCANS];
    qt_collective *coll;       /* the collectives the step schedule names (names owned) */
    int n_reshards;            /* activations held otherwise than declared (mesh/layout.c) */
    int ncoll, capcoll;
    int n_fwd;                 /* mb ops [0, n_fwd) are the forward */
    /* decoder layers as built (model/graph.c): forward ops [layer_op0, layer_op1) and the
     * tensors created for the layer, ids [layer_t0, layer_t1) */
    int n_layers_rec;
    int *layer_op0, *layer_op1;
    int32_t *layer_t0, *layer_t1;
    int *bwd_src;              /* backward op n_fwd + i was emitted for forward op bwd_src[i]
                                  (model/autodiff.c) */
    int n_remat_ops;           /* forward ops recomputed in the backward (model/remat.c) */
    int32_t tokens, targets, loss_seq, lb_seq, table;
    int32_t moe_drops;         /* I32 [layers x b] dropped counts (token dropping), else QT_NONE */
    int32_t moe_ragged;        /* 1: the MoE layers drop by the receive buffers (MOE_RAGGED:
                                  ragged_buffer_factor > 0 on an expert group > 1 rank) */
    int64_t ragged_rows;       /* then B = int(T k r), the rows a host's buffer holds, */
    int64_t ragged_tokens;     /* T: a rank's tokens a microbatch */
    int64_t ep_rows, ep_rows_dropless; /* expert parallelism: rows an expert host holds per MoE
                                          layer (Rmax; with a capacity at most M x b x El x C),
                                          and the dropless worst case; 0 without EP */
    int32_t head_w;            /* lm_head.weight (its data gradient: model/autodiff.c) */
    int32_t positions;         /* packing: I32 [b, S] positions in documents, else QT_NONE */
    int32_t mtp_tokens, mtp_targets, mtp_loss_seq; /* the MTP head's inputs and loss sums
                                  (qt_plan_fields.def), QT_NONE without a head */
    int32_t mtp_scale;         /* packing with a head: F32 [1] gradient scale the runtime
                                  writes per step, else QT_NONE */
    int32_t mtp_keep;          /* I32 region of the carried head (mtp_keep_layers), else QT_NONE */
    int mtp_depth;             /* the MTP depth (0-based) whose layer model/graph.c builds */
    int64_t *pp_stage_figs;    /* pipeline stages (driver/pipeline.c): per stage, the need
                                  under gpipe and 1f1b, the one-microbatch arena and the
                                  bytes saved per microbatch (4 per stage), else NULL */
    /* pipeline stage-local tables (pp_local, model/graph.c, model/autodiff.c): the input
     * boundary (stages > 0) and its gradient, the output boundary (stages < S - 1) and its
     * gradient (the backward's seed), the in-flight slots ([3 M, boundary], F32, bf16 in
     * a bf16 plan: M received inputs, M activation sends, M gradient sends), each live for
     * the whole microbatch schedule; QT_NONE otherwise. pp_lb_slots (with the
     * load-balance loss): F32 [2 M, b], M received and M sent partial lb_seq sums (the
     * one-rank layer order's running sum, carried from stage to stage beside the
     * activations), else QT_NONE */
    int32_t pp_in, pp_din, pp_out, pp_dout, pp_slots, pp_lb_slots;
    /* the MTP head on a pipeline (mtp_num_layers D > 0, docs/pipeline.md "The MTP head on a
     * pipeline"): stage 0's pp_mtp_out, the depths' embeddings MTP<j>.emb of the one
     * stacked EMBED_FWD (D > 1: STACKed per token block into one tensor [b, D S, d]), sent
     * straight to the last stage, and pp_mtp_dout its gradient (received back: a second
     * seed of the backward); the last stage's pp_mtp_in (received; D > 1: SPLIT into the
     * depths' inputs) and pp_mtp_din its gradient (sent back); pp_mtp_slots [M, D x
     * boundary] on stage 0 (the sends in flight), [2 M, D x boundary] on the last stage (M
     * received, M sends in flight). Each live for the whole microbatch schedule; QT_NONE
     * otherwise */
    int32_t pp_mtp_in, pp_mtp_din, pp_mtp_out, pp_mtp_dout, pp_mtp_slots;
    /* driver/pipeline.c, a pipeline plan: every stage's stage-local plan (the files hold
     * these), their settings, and the hash that names them together */
    struct qt_cg_graph *pp_graphs;
    qt_cg_settings *pp_settings;
    uint64_t pp_group_hash;
    int64_t *pp_chunk_base;    /* circular repeats: every stage's chunks' one-rank bases
                                  (driver/pipeline.c; the stages' settings point into it) */
    /* layout (memory/memplan.c) */
    int64_t n_param_elems, n_flat, adam_elems;
    int32_t n_ranges, capranges;
    qt_flat_range *ranges;
    int64_t leaf_elems;        /* floats per leaf-tree level (qt_plan.leaf_elems) */
    int64_t params_offset, grads_offset, adam_m_offset, adam_v_offset;
    int64_t compute_offset;                    /* bf16: the compute copy (qt_plan.h) */
    int64_t bf16_stage_offset, bf16_stage_elems; /* bf16: the staging region (qt_plan.h) */
    int64_t comm_scratch_offset, comm_scratch_elems;
    int64_t comm_split_elems;  /* the split reduce-scatters' part (qt_plan.comm_split_elems) */
    int64_t staging_offset, staging_elems;     /* checkpoint staging (multi-rank only) */
    int32_t n_tree_levels;
    int64_t tree_offset[QT_MAX_TREE_LEVELS];
    int64_t mb_elems;                          /* floats of a compact microbatch-tree level */
    int64_t leaf_scratch_offset, leaf_scratch_elems;
    int64_t act_offset, act_peak, arena_bytes;
    uint64_t hash;
    const char *too_big;       /* first tensor whose shape product exceeds 2^56 (an error) */
} qt_cg_graph;

/* Slot roles per op kind: one char per t[] slot: 'w' writes, 'a' accumulates, 'r' reads an
 * activation, 'p' reads a parameter, 's' kernel scratch, '-' unused. */
const char *qt_cg_op_slots(int kind);
const char *qt_cg_op_name(int kind);
/* 1 when slot `slot` of `kind` may be QT_NONE (upper case in qt_ops.def). */
int qt_cg_op_slot_optional(int kind, int slot);
/* enum qt_op_class of a kind (qt_ops.def CLASS column). */
int qt_cg_op_class(int kind);
/* QT_OPP_* properties of a kind (qt_ops.def PROPS column). */
unsigned qt_cg_op_props(int kind);

/* *op = an op of `kind` with every attribute 0 and every tensor slot QT_NONE. */
void qt_cg_op_blank(qt_op *op, int kind);
/* Frees everything the graph owns and zeroes it. */
void qt_cg_graph_free(qt_cg_graph *g);

#endif
