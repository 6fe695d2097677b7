/* qt_cg.h - configgen's data model and library interface (host tool, not firmware).
 *
 * configgen turns a layered YAML config (base.yml, models/<model>.yml, runs/<run>.yml,
 * key=value overrides) into the static plan tables of firmware/include/qt_plan.h:
 *   yaml -> config (known keys, types, layering) -> settings (validated, resolved) ->
 *   graph (forward ops, then reverse-mode backward) -> layout (flat regions + liveness
 *   planner) -> hash -> emitted files (plan.h, plan.c, plan_main.c, plan.txt).
 * Invariants: every public symbol is prefixed qt_cg_; every function that can fail returns
 * 0 on success or -1 after writing one message into (err, errlen); on any error nothing is
 * written to the output directory. The host may use malloc; allocation failure aborts.
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

int qt_cg_edit_distance(const char *a, const char *b);
/* Read a whole file into a fresh NUL-terminated buffer: a regular file of at most 16 MiB
 * (a directory, device or FIFO is refused with a message saying what it is). */
int qt_cg_read_file(const char *path, char **text, char *err, size_t errlen);
/* Format a float as a C literal that round-trips ("1e-06f", "10000.0f"). */
void qt_cg_float_literal(char *out, size_t n, float v);

/* ---- YAML subset (config/yaml.c) ------------------------------------------------------ */

enum { QT_CG_SCALAR = 0, QT_CG_LIST = 1 };

typedef struct qt_cg_val {
    int kind;                  /* QT_CG_SCALAR or QT_CG_LIST */
    int quoted;                /* scalar was written in quotes (always a string) */
    char *s;                   /* scalar text (unquoted) */
    struct qt_cg_val *items;   /* list items */
    int n;
} qt_cg_val;

typedef struct qt_cg_entry {
    char *key;
    qt_cg_val val;
    int line;
} qt_cg_entry;

typedef struct qt_cg_doc {
    char *file;
    qt_cg_entry *e;
    int n, cap;
} qt_cg_doc;

/* Parse `text` (the contents of `file`) as flat `key: value` lines. Errors are
 * "file:line: ...". */
int qt_cg_yaml_parse(const char *file, const char *text, qt_cg_doc *out, char *err, size_t errlen);
/* Parse one value (a command-line override's right-hand side); the whole text must be used. */
int qt_cg_yaml_parse_value(const char *where, const char *text, qt_cg_val *out, char *err,
                           size_t errlen);
void qt_cg_val_free(qt_cg_val *v);
void qt_cg_doc_free(qt_cg_doc *d);
/* Render a value back to YAML flow text (for messages and plan.txt). */
void qt_cg_val_render(const qt_cg_val *v, qt_cg_buf *b);

/* ---- layered config (config/config.c) ------------------------------------------------- */

enum { QT_CG_T_BOOL = 0, QT_CG_T_INT, QT_CG_T_FLOAT, QT_CG_T_STR, QT_CG_T_LIST };

typedef struct qt_cg_known {
    const char *key;           /* points into the base doc */
    int type;                  /* inferred from the base.yml value */
    const qt_cg_val *val;      /* current (last applied) value */
    char where[300];           /* "file:line" or "command line" of the current value */
} qt_cg_known;

typedef struct qt_cg_config {
    qt_cg_doc base, model, run;
    int have_model;
    qt_cg_val *over;           /* parsed override values */
    char **over_keys;
    int n_over;
    qt_cg_known *k;            /* one per base.yml key, in base order */
    int n;
    char run_name[128];
    char model_name[128];
    char *files[3];            /* base, model (or NULL), run paths as given */
} qt_cg_config;

/* Load base.yml and models/<model_name>.yml from configs_dir, the run file, then the
 * overrides ("key=value"). run_name defaults to the run file's stem; a run_name (or
 * model_name) of 128 characters or more is refused, as is a run with no model_name that
 * does not set every model key itself. */
int qt_cg_config_load(qt_cg_config *c, const char *configs_dir, const char *run_path, int n_over,
                      char *const *over, char *err, size_t errlen);
void qt_cg_config_free(qt_cg_config *c);
/* The model keys: base.yml's "model shape" section. A run without a model_name must set
 * every one of them itself (run file or command line), else it is refused. */
extern const char *const qt_cg_model_keys[];
extern const int qt_cg_n_model_keys;
const qt_cg_known *qt_cg_config_find(const qt_cg_config *c, const char *key);

/* ---- validated settings (config/settings.c) ------------------------------------------- */

#define QT_CG_MAX_RULE_AXES 12
/* MaxText mesh axes (research/maxtext.md 3.1); those qtrain lacks have size 1. */
#define QT_CG_N_MT_AXES 12

typedef struct qt_cg_rule {
    const char *name;          /* logical axis name (points into the config) */
    int n;
    int axes[QT_CG_MAX_RULE_AXES]; /* MaxText mesh axis ids (qt_cg_mt_axis_names) */
} qt_cg_rule;

enum qt_cg_remat_policy { QT_CG_REMAT_NONE = 0, QT_CG_REMAT_FULL, QT_CG_REMAT_SAVE_DOT };
enum qt_cg_param_gather { QT_CG_GATHER_AUTO = 0, QT_CG_GATHER_STEP, QT_CG_GATHER_LAYER };
enum qt_cg_grad_reduce { QT_CG_REDUCE_AUTO = 0, QT_CG_REDUCE_STEP, QT_CG_REDUCE_MICROBATCH,
                         QT_CG_REDUCE_LAYER };

typedef struct qt_cg_settings {
    char run_name[128];
    char cname[128];           /* run_name with non-alphanumerics -> '_' */
    char model_name[128];
    qt_model_dims m;
    qt_train_cfg tr;
    int32_t mesh[QT_MESH_COUNT];
    int32_t n_ranks, shard_mode, zero1;
    int32_t remat;             /* enum qt_cg_remat_policy */
    int32_t param_gather;      /* enum qt_cg_param_gather (param_gather) */
    int32_t scan_layers;       /* scan_layers: store repeated layer cycles once */
    int32_t grad_reduce;       /* enum qt_cg_grad_reduce (gradient_reduce) */
    char topology[64];         /* compile_topology, "" = none */
    double budget_gib;         /* per-rank arena budget (device_memory_gib), 0 = unchecked */
    uint8_t batch_mask;        /* mesh axes (size > 1) that split the global batch */
    uint8_t opt_mask;          /* mesh axes the optimizer state is split over */
    double lb_weight;
    int use_mrope;
    int gdn_chunked;           /* gdn_core_algorithm: 1 chunked (WY), 0 recurrent */
    qt_cg_rule *rules;
    int n_rules;
    char unused[512];          /* accepted-but-unused keys that were set (vision tower) */
} qt_cg_settings;

int qt_cg_settings_resolve(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen);
void qt_cg_settings_free(qt_cg_settings *s);

/* ---- sharding (mesh/shard.c) -------------------------------------------------------- */

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
extern const char *const qt_cg_lax_names[QT_LAX_COUNT];

/* Resolve logical axis names to mesh axes with MaxText semantics: rules in order; a rule
 * applies to the (first) dim with its name only if that dim is unassigned and none of its
 * mesh axes is already used by another dim; size-1 axes are dropped afterwards.
 * names[i] may be NULL (replicated). spec[i] receives a bitmask of enum qt_mesh_axis;
 * desc (optional, ndim strings of 64 bytes) receives e.g. "(fsdp,expert)" or "-". */
void qt_cg_resolve(const qt_cg_rule *rules, int n_rules, const int32_t mesh[QT_MESH_COUNT],
                   int ndim, const char *const *names, uint8_t *spec, char (*desc)[64]);

/* ---- graph (model/graph.c, model/autodiff.c, core/slots.c) ------------------------- */

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
    int reduce_per_mb;         /* 1: reduce-scatter after each microbatch (n_mb_levels > 0
                                  on meshes with batch axes); chosen by qt_cg_plan_build */
    int layer_reduce;          /* 1 (with reduce_per_mb): per layer, inside the microbatch
                                  schedule (qt_plan.layer_reduce); chosen by qt_cg_plan_build */
    int grads_compact;         /* qt_plan.grads_compact (memory/memplan.c decides) */
    int params_compact;        /* 1: per-layer parameter gathers (qt_plan.params_compact);
                                  chosen by qt_cg_plan_build, implies layer_reduce */
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
    /* layout (memory/memplan.c) */
    int64_t n_param_elems, n_flat, adam_elems;
    int32_t n_ranges, capranges;
    qt_flat_range *ranges;
    int64_t leaf_elems;        /* floats per leaf-tree level (qt_plan.leaf_elems) */
    int64_t params_offset, grads_offset, adam_m_offset, adam_v_offset;
    int64_t comm_scratch_offset, comm_scratch_elems;
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

int qt_cg_graph_build(qt_cg_graph *g, const qt_cg_settings *s, char *err, size_t errlen);
/* 1 for the logical axes whose dims tensor parallelism splits for compute (q_heads,
 * kv_heads, gdn_head, mlp); other dims sharded over `tensor` only split optimizer state. */
int qt_cg_tp_axis(int lax);
int qt_cg_autodiff(qt_cg_graph *g, char *err, size_t errlen);
void qt_cg_graph_free(qt_cg_graph *g);

/* Internal helpers shared by graph and autodiff. */
int32_t qt_cg_add_tensor(qt_cg_graph *g, const char *name, int role, int dtype, int ndim,
                         const int64_t *shape, const uint8_t *axes);
qt_op *qt_cg_emit_op(qt_cg_graph *g, int init, int kind);
/* *op = an op of `kind` with every attribute 0 and every tensor slot QT_NONE. */
void qt_cg_op_blank(qt_op *op, int kind);
/* A new tensor "<name of id><suffix>" with id's role, type, shapes, layouts and segments
 * (not its parameter link, lifetime flags or reshard note); returns its id. */
int32_t qt_cg_clone_tensor(qt_cg_graph *g, int32_t id, const char *suffix);

/* The per-step schedule after the last microbatch (qt_ops.def, step section): on one rank
 * the fused gradient finalisation and the AdamW update; on a mesh the local tree total,
 * the gradient reduce-scatter (and all-gather) over the batch axes, normalisation and norm
 * over the optimizer block, AdamW on it and the parameter all-gather. Runs after the
 * memory plan (the collectives name arena ranges). */
void qt_cg_step_schedule(qt_cg_graph *g);
/* Size of group `mask` on the plan's mesh (product of the masked axes' sizes). */
int64_t qt_cg_group_size(const qt_cg_settings *s, unsigned mask);
/* "data,fsdp" (or "-") for a mask. */
const char *qt_cg_mask_name(unsigned mask, char *buf, size_t n);

/* ---- layouts (mesh/layout.c) ------------------------------------------------------- */

/* The execution layout of a new activation from its logical axes: batch axes split over the
 * batch group, heads and the shared expert's width over `tensor` (when tensor parallelism
 * is on), everything else whole. Layers override it where they run otherwise. */
void qt_cg_layout_default(const qt_cg_settings *s, int ndim, const uint8_t *axes, uint8_t *exec);
/* A layer declares that tensors [from, g->nt) keep the dims whose logical axis is `lax`
 * whole (replicated) although the rules declare them split, giving the reason. */
void qt_cg_layout_declare(qt_cg_graph *g, int32_t from, int lax, const char *reason);
/* The layout type check: every activation's execution layout equals the layout its logical
 * axes declare (t.spec), unless its layer declared the reshard. shard_mode=explicit: an
 * undeclared difference is an error naming the layer, op, tensor, declared and executed
 * layouts; auto: differences are propagated, and counted in *n_reshards (may be NULL). */
/* 1 if activation ct is held otherwise than its logical axes declare (not a parameter
 * or scratch, and its execution layout differs from its spec in some dim). */
int qt_cg_held_otherwise(const qt_cg_tensor *ct);
int qt_cg_layout_check(const qt_cg_graph *g, int *n_reshards, char *err, size_t errlen);
/* "(data,fsdp),-,tensor" for a per-dim layout. */
void qt_cg_layout_name(const uint8_t *lay, int ndim, char *buf, size_t n);

/* ---- memory (memory/memplan.c) -------------------------------------------------------- */

int qt_cg_memplan(qt_cg_graph *g, char *err, size_t errlen);
/* Rematerialisation per s->remat (model/remat.c): after autodiff, before memplan. */
int qt_cg_remat(qt_cg_graph *g, char *err, size_t errlen);
/* 1 if tree level l is a compact microbatch-tree level (below that tree's top: only this
 * rank's reduce blocks, mb_elems floats); see qt_plan.tree_offset. */
int qt_cg_tree_level_compact(const qt_cg_graph *g, int l);
/* The flat range holding parameter p (-1 before the memory plan). */
int qt_cg_range_of(const qt_cg_graph *g, int p);
/* Leaves of parameter p's leaf tree: its leaves per step, or per microbatch when a
 * microbatch tree follows (n_mb_levels > 0). */
int64_t qt_cg_tree_leaves(const qt_cg_graph *g, int p);
/* Floats of tree level l (qt_plan.h qt_tree_level_elems). */
int64_t qt_cg_tree_level_elems(const qt_cg_graph *g, int l);
/* The per-rank budget in bytes (0 = none) and its check: 0, or -1 with an error naming
 * the budget, the excess and the biggest consumers by category and tensor (memory/budget.c). */
int64_t qt_cg_budget_bytes(const qt_cg_settings *s);
int qt_cg_budget_check(const qt_cg_graph *g, char *err, size_t errlen);
/* Check the plan invariants (alignment, bounds, no overlap of live tensors, flat regions);
 * returns 0 or -1 with the first violation in err. */
int qt_cg_check_plan(const qt_cg_graph *g, char *err, size_t errlen);

/* Check the schedules (check/check.c): every slot a kind uses is set and no other; a tensor
 * read or accumulated into was written earlier (parameters, inputs and the init-written
 * table count as written); 'p' slots hold parameters; WGRAD ops carry QT_OPF_WGRAD and
 * name their parameters in a[8]/a[9]; each parameter has exactly one WGRAD producer. */
int qt_cg_check_schedule(const qt_cg_graph *g, char *err, size_t errlen);

/* ---- scan_layers (schedule/scan.c) ------------------------------------------------------ */

/* The decoder layer op o belongs to (prev: the layer of the op before it), -1 for none. */
int qt_cg_scan_op_layer(const qt_cg_graph *g, const qt_op *o, int prev);
/* With s->scan_layers: derives the stored microbatch schedule (g->mbc, g->scans) from the
 * final unrolled one, where the layer cycles repeat exactly; checks that it unrolls back
 * to g->mb. 0, or -1 with a message. */
int qt_cg_scan(qt_cg_graph *g, char *err, size_t errlen);

/* ---- emission (emit/emit.c, emit/report.c, emit/hash.c) -------------------------- */

uint64_t qt_cg_hash(const qt_cg_graph *g);
void qt_cg_emit_plan_h(const qt_cg_graph *g, const char *banner, qt_cg_buf *b);
/* plan.c: every table, and the resolved config (cfg) as qt_plan.config_text. */
void qt_cg_emit_plan_c(const qt_cg_graph *g, const qt_cg_config *cfg, const char *banner,
                       qt_cg_buf *b);
void qt_cg_emit_plan_main(const qt_cg_graph *g, const char *banner, qt_cg_buf *b);
void qt_cg_emit_report(const qt_cg_graph *g, const qt_cg_config *c, qt_cg_buf *b);

/* ---- driver (driver/generate.c) ------------------------------------------------------- */

/* Everything up to (not including) writing files; fills c, s and g (free with
 * qt_cg_plan_free). configs_dir NULL: found from the run file (../base.yml, ./base.yml) or
 * configgen/configs. */
int qt_cg_plan_build(const char *configs_dir, const char *run_path, int n_over,
                     char *const *over, qt_cg_config *c, qt_cg_settings *s, qt_cg_graph *g,
                     char *err, size_t errlen);
void qt_cg_plan_free(qt_cg_config *c, qt_cg_settings *s, qt_cg_graph *g);
/* The command line: argv[0] ignored, [-o outdir] <run.yml> [key=value ...]. */
int qt_cg_generate(int argc, char **argv, char *err, size_t errlen);

/* ---- plan diff (driver/diff.c) --------------------------------------------------------- */

/* `configgen --diff A B`: compares two plans, each a run .yml (built in memory), a generated
 * plan directory or a plan.txt, and appends what differs to out (sections, tensors by name,
 * ops by index and kind, collectives, arena size). *differs = 1 when anything but the names
 * and the plan hash differs, else 0. Returns -1 with a message when an input cannot be
 * read or generated. */
int qt_cg_diff(const char *a, const char *b, qt_cg_buf *out, int *differs, char *err,
               size_t errlen);

#endif
