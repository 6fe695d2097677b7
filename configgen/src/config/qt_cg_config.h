/* config/qt_cg_config.h - stage 1, config: the YAML subset (yaml.c), the layered
 * config of known keys (config.c) and its validation into qt_cg_settings (settings.c).
 * Uses core only. */
#ifndef QT_CG_CONFIG_H
#define QT_CG_CONFIG_H

#include <stdarg.h>
#include "core/qt_cg.h"

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

enum { QT_CG_T_BOOL = 0, QT_CG_T_INT, QT_CG_T_FLOAT, QT_CG_T_STR, QT_CG_T_LIST };

typedef struct qt_cg_known {
    const char *key;           /* points into the base doc */
    int type;                  /* inferred from the base.yml value */
    const qt_cg_val *val;      /* current (last applied) value */
    char where[300];           /* "file:line" or "command line" of the current value */
} qt_cg_known;

/* A MaxText key base.yml does not declare, as set (config/maxtext_keys.c's table). */
typedef struct qt_cg_mt_entry {
    const char *key;           /* points into a doc or the override keys */
    const qt_cg_val *val;      /* last applied value */
    char where[300];
} qt_cg_mt_entry;

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
    qt_cg_mt_entry *mt;        /* MaxText keys outside base.yml that were set, first-set order */
    int n_mt;
} qt_cg_config;

/* YAML's core-schema bool spellings: 1 for true / True / TRUE, 0 for false / False / FALSE,
 * -1 for anything else (config/yaml.c). */
int qt_cg_bool_word(const char *s);
/* MaxText's keys outside base.yml (config/maxtext_keys.c): whether the table has `key`; record
 * a value set for it (the last one counts); and, once the settings are resolved (s->dtype),
 * each recorded key either noted into s->mt_ignored ("key=value (where): why") or refused
 * with the reason and what to do instead (0, or -1 with err set). */
int qt_cg_mt_key_known(const char *key);
int qt_cg_mt_set(qt_cg_config *c, const char *where, const char *key, const qt_cg_val *v);

/* Load base.yml and models/<model_name>.yml from configs_dir, the run file, then the
 * overrides ("key=value"). run_name defaults to the run file's stem; a run_name (or
 * model_name) of 128 characters or more is refused, as is a run with no model_name that
 * does not set every model key itself. */
/* 1 if `text` is MaxText's own configs/base.yml (it sets base_output_directory and hardware,
 * which no qtrain config does): never qtrain's base layer, nor a run file (config.c) */
int qt_cg_maxtext_base_text(const char *text);
int qt_cg_config_load(qt_cg_config *c, const char *configs_dir, const char *run_path, int n_over,
                      char *const *over, char *err, size_t errlen);
void qt_cg_config_free(qt_cg_config *c);
/* The model keys: base.yml's "model shape" section. A run without a model_name must set
 * every one of them itself (run file or command line), else it is refused. */
extern const char *const qt_cg_model_keys[];
extern const int qt_cg_n_model_keys;
const qt_cg_known *qt_cg_config_find(const qt_cg_config *c, const char *key);

/* The key families' shared rules (config/rules.c): base.yml's key by name (a missing one is
 * configgen's bug: abort), its value as a number, and the refusal "key=value (where):
 * message" written into err (returns -1). */
const qt_cg_known *qt_cg_rule_key(const qt_cg_config *c, const char *key);
double qt_cg_rule_f(const qt_cg_config *c, const char *key);
/* "key=value (where)" of a key, into buf (a message naming the second key of a rule). */
const char *qt_cg_rule_other(const qt_cg_config *c, const char *key, char *buf, size_t cap);
int qt_cg_rule_vbad(const qt_cg_config *c, char *err, size_t errlen, const char *key,
                    const char *fmt, va_list ap);
int qt_cg_rule_bad(const qt_cg_config *c, char *err, size_t errlen, const char *key,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A key set to a value the plan ignores, as MaxText does (docs/refusals.md: accepted, not
 * refused): "key=value (where) is ignored: why" appended to s->ignored ("; " between). */
void qt_cg_rule_ignored(const qt_cg_config *c, qt_cg_settings *s, const char *key,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- validated settings (config/settings.c) ---- */

/* The multi-token-prediction keys (config/mtp.c): mtp_num_layers and
 * mtp_loss_scaling_factor validated against the resolved model, train and mesh settings
 * into s->mtp_layers and s->mtp_factor. */
int qt_cg_settings_mtp(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen);
int qt_cg_settings_resolve(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen);
/* The canonical count of a contraction or head-group sum over n (config/canon.c): the
 * blocks of the plan's canonical_factor x a power of two, at most QT_CANON_BLOCKS. */
int64_t qt_cg_canon(const qt_cg_settings *s, int64_t n);
void qt_cg_settings_free(qt_cg_settings *s);
/* The MoE form keys (config/moe.c): sparse_matmul, capacity_factor, ragged_buffer_factor
 * into s->moe_dense, capacity_factor, moe_capacity, moe_note; needs the model, training and
 * mesh settings resolved. 0, or -1 with the message in err. */
int qt_cg_moe_rules(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen);
/* The expert dispatch key (config/dispatch.c): expert_dispatch whole or rounds into
 * s->expert_dispatch, checked against the mesh, dtype and expert_chunk_rows; needs the
 * model, training and mesh settings resolved. 0, or -1 with the message in err. */
int qt_cg_dispatch_rules(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen);
/* The schedule, objective and evaluation keys (config/train_rules.c, issue 33), after the
 * batch split: lr_schedule_type / wsd_*, z_loss_multiplier, eval_*. 0 or -1 with err set. */
int qt_cg_train_rules(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen);
int qt_cg_maxtext_rules(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen);
/* Sequences per batch group (and accumulation step) of a per-device batch pdb on n_ranks
 * ranks whose batch groups are tp x cp x S ranks (tensor, context, pipeline stages share
 * their sequences): pdb x tp x cp (x S). When that is not a whole number >= 1, MaxText's
 * count instead (configs/types.py calculate_global_batch_sizes: int(n_ranks x pdb)
 * sequences trained per microbatch) when it is >= 1 and splits evenly over the
 * n_ranks / (tp cp S) groups; *total then receives it (else 0), and the caller refuses a
 * result that is still not whole. */
double qt_cg_group_batch(double pdb, int32_t n_ranks, int32_t tp, int32_t cp, int32_t S,
                         int64_t *total);

/* The pipeline keys (config/pipeline.c, issue 36): num_pipeline_microbatches,
 * num_layers_per_pipeline_stage, num_pipeline_repeats, pipeline_parallel_layers and
 * pipeline_schedule, validated against the stages (s->pp_stages, from the mesh) and the
 * batch group's sequences per accumulation step B (before the split); fills s->pp_*.
 * Called by the batch split only when S > 1. 0, or -1 with err set. */
int qt_cg_pipeline_rules(const qt_cg_config *c, qt_cg_settings *s, double B, char *err,
                         size_t errlen);

#endif
