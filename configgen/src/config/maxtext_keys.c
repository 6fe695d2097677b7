/* config/maxtext_keys.c - MaxText's keys that base.yml does not declare (its checkpointing,
 * logging, profiler, dataset, tokenizer, kernel-selection and precision keys): what a
 * MaxText user passes routinely, from its base.yml (AI-Hypercomputer/maxtext e591f30,
 * src/maxtext/configs/base.yml; docs/refusals.md "MaxText keys without a plan field").
 *
 * Each key of the table is taken in one of two ways, decided by its value:
 *  - a value that changes nothing qtrain trains (a log period, a kernel choice, an output
 *    directory, the value that is what qtrain does anyway) is accepted with a note, on
 *    configgen's stderr and in plan.txt ("MaxText keys without effect here:"), saying why;
 *  - any other value is refused, naming the key, the value, where it was set, why qtrain
 *    cannot honour it and what to do instead (a run-time key of the qtrain binary, such as
 *    save= or load=, or leaving the key out).
 * Invariants: none of these keys is part of the plan: the tables, the hash and the config
 * text (base.yml's keys) are those of the run without them, so a noted key never changes a
 * bit; a value is never dropped without a note; a key set twice counts with its last value
 * (the layers' order, as base.yml keys); hf_access_token's value is never printed. Values
 * compare as text: a scalar with True/TRUE as true, a list as [a, b] whatever the quoting.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "config/qt_cg_config.h"

enum {
    MT_ANY = 1,      /* every value has no effect (ok is unused) */
    MT_SECRET = 2,   /* the value is not printed */
    MT_F32_ANY = 4,  /* with dtype float32 every value has no effect (all float32 already) */
};

typedef struct qt_cg_mt_rule {
    const char *key;
    int flags;
    const char *ok;      /* '|'-separated values without effect ("" the empty string, [] the
                          * empty list); compared after True/TRUE -> true */
    const char *why_ok;  /* the note: why the value changes nothing */
    const char *why_bad; /* the refusal: why another value cannot be honoured, what to do */
} qt_cg_mt_rule;

#define CKPT_RUNTIME "qtrain writes a checkpoint only where its command line says: save=DIR (with save_every=N), docs/cli.md"
#define DATA_RUNTIME "qtrain reads the token file its command line names (data=FILE, eval_data=FILE; text goes through qtrain-data), docs/formats.md"
#define PREC_DEFAULT "MaxText's default; qtrain's precision is its own fixed rules (docs/precision.md: float32 throughout, or with dtype=bfloat16 bf16 operands and float32 sums, statistics and loss)"
#define PREC_BF16 "with dtype=bfloat16 qtrain's precision rules are fixed (docs/precision.md) and this value would not be honoured; expected MaxText's default, or dtype=float32 (where every value is the same)"

static const qt_cg_mt_rule mt_rules[] = {
    /* checkpointing (MaxText base.yml L40-79) */
    {"enable_checkpointing", 0, "false", "no checkpoint is planned; " CKPT_RUNTIME,
     "configgen plans no checkpoint; " CKPT_RUNTIME "; expected false (or leave the key out)"},
    {"async_checkpointing", MT_ANY, NULL, "qtrain saves synchronously, the same files", NULL},
    {"checkpoint_period", 0, NULL, NULL,
     "the checkpoint period is a run-time key of qtrain: save_every=N with save=DIR (docs/cli.md); leave the key out"},
    {"load_parameters_path", 0, "", "no checkpoint is named",
     "qtrain loads a checkpoint at run time: load=PATH, a Hugging Face directory or .safetensors "
     "file (docs/cli.md, docs/formats.md; an Orbax checkpoint is not read); leave the key out"},
    {"load_full_state_path", 0, "", "no checkpoint is named",
     "qtrain resumes at run time: load=DIR of a qtrain save (weights and optimizer state, docs/cli.md; "
     "an Orbax checkpoint is not read); leave the key out"},
    {"checkpoint_storage_concurrent_gb", MT_ANY, NULL, "Orbax I/O tuning; qtrain's checkpoints are safetensors", NULL},
    {"checkpoint_storage_use_ocdbt", MT_ANY, NULL, "Orbax storage; qtrain's checkpoints are safetensors", NULL},
    {"checkpoint_storage_use_zarr3", MT_ANY, NULL, "Orbax storage; qtrain's checkpoints are safetensors", NULL},
    {"base_output_directory", MT_ANY, NULL,
     "qtrain writes only the files its command line names (save=, metrics=, dump_grads=; docs/cli.md)", NULL},
    /* logging, metrics, profiling (L99-108, L837, L889-896, L1058-1072, L1134) */
    {"metrics_file", 0, "", "no metrics file is named",
     "the metrics file is a run-time key of qtrain: metrics=FILE (JSON lines, docs/formats.md); leave the key out"},
    {"log_period", MT_ANY, NULL, "qtrain prints and writes every step (metrics=FILE)", NULL},
    {"enable_tensorboard", MT_ANY, NULL, "no TensorBoard; the metrics are JSON lines (metrics=FILE)", NULL},
    {"gcs_metrics", 0, "false", "nothing is written to GCS", "qtrain writes no GCS metrics; expected false"},
    {"save_config_to_gcs", 0, "false", "nothing is written to GCS",
     "qtrain writes no GCS files (the resolved config is in plan.txt and every metrics manifest); expected false"},
    {"enable_wandb", 0, "false", "no Weights & Biases logging", "qtrain has no Weights & Biases logging; expected false"},
    {"profiler", MT_ANY, NULL, "no XLA / nsys profiler (qtrain's step timings are in the metrics)", NULL},
    {"profiler_steps", MT_ANY, NULL, "no profiler", NULL},
    {"skip_first_n_steps_for_profiler", MT_ANY, NULL, "no profiler", NULL},
    {"upload_all_profiler_results", MT_ANY, NULL, "no profiler", NULL},
    {"log_config", MT_ANY, NULL, "the resolved config is always in plan.txt and the metrics manifest", NULL},
    {"enable_goodput_recording", MT_ANY, NULL, "no goodput monitoring", NULL},
    {"monitor_goodput", MT_ANY, NULL, "no goodput monitoring", NULL},
    {"max_checkify", MT_ANY, NULL, "JAX checkify; qtrain's checks always run", NULL},
    {"jax_cache_dir", MT_ANY, NULL, "no JAX compilation cache (the plan is compiled C)", NULL},
    {"hardware", MT_ANY, NULL, "qtrain runs on CPUs under MPI whatever the value", NULL},
    {"override_model_config", MT_ANY, NULL,
     "configgen always lets the run file and the command line override the model file", NULL},
    /* tokenizer and dataset (L713-800) */
    {"tokenizer_path", MT_ANY, NULL,
     "the tokenizer is a run-time key of qtrain, tokenizer=PATH (copied into save= directories; "
     "text is tokenized by qtrain-data)", NULL},
    {"tokenizer_type", MT_ANY, NULL, "qtrain trains on token ids; qtrain-data tokenizes with a Hugging Face tokenizer.json", NULL},
    {"hf_access_token", MT_ANY | MT_SECRET, NULL, "qtrain downloads nothing", NULL},
    {"dataset_type", MT_ANY, NULL, DATA_RUNTIME "; without data= the embedded corpus", NULL},
    {"dataset_path", MT_ANY, NULL, DATA_RUNTIME, NULL},
    {"dataset_name", MT_ANY, NULL, DATA_RUNTIME, NULL},
    {"train_split", MT_ANY, NULL, DATA_RUNTIME, NULL},
    {"eval_split", MT_ANY, NULL, "the eval source is a run-time key of qtrain: eval_data=FILE or eval_holdout=N", NULL},
    {"hf_path", MT_ANY, NULL, DATA_RUNTIME, NULL},
    {"hf_train_files", MT_ANY, NULL, DATA_RUNTIME, NULL},
    {"grain_train_files", MT_ANY, NULL, DATA_RUNTIME, NULL},
    {"enable_data_shuffling", 0, "false",
     "qtrain reads the windows in file order (docs/formats.md, Data order)",
     "qtrain reads the token file's windows in file order (docs/formats.md, Data order), so a "
     "shuffle would not be honoured: shuffle the documents when writing the token file; "
     "expected false (or leave the key out)"},
    {"data_shuffle_seed", MT_ANY, NULL, "qtrain reads the windows in file order (docs/formats.md, Data order)", NULL},
    {"init_weights_seed", 0, NULL, NULL,
     "the initialisation seed is a run-time key of qtrain: seed=N (docs/cli.md; qtrain's "
     "initialisation is its own, not MaxText's); leave the key out"},
    {"max_prefill_predict_length", MT_ANY, NULL, "inference (decode) only", NULL},
    {"prompt", MT_ANY, NULL, "inference (decode) only", NULL},
    /* kernel selection (L274-276, L392, L1330-1332) */
    {"attention", 0, "autoselected|dot_product|flash|cudnn_flash_te",
     "a kernel choice; qtrain runs its one causal softmax attention (docs/model.md)",
     "expected autoselected, dot_product, flash or cudnn_flash_te (kernel choices, all the same "
     "attention here)"},
    {"attention_type", 0, "global|full", "the full-attention layers attend globally, as this value says",
     "the Qwen3-Next / Qwen3.5 full-attention layers are global causal attention; expected global"},
    {"use_tokamax_gmm", MT_ANY, NULL, "a kernel choice for the routed experts' grouped matmul", NULL},
    {"use_gmm_v2", MT_ANY, NULL, "a kernel choice for the routed experts' grouped matmul", NULL},
    {"use_tokamax_splash", MT_ANY, NULL, "an attention kernel choice", NULL},
    {"use_jax_splash", MT_ANY, NULL, "an attention kernel choice", NULL},
    /* precision (L111, L122-128, L192-198, L993) */
    {"matmul_precision", 0, "default|high|highest",
     "qtrain's matmuls multiply and add in float32 (bf16 operands widened exactly), the bits of "
     "every value", "expected default, high or highest"},
    {"activations_in_float32", MT_F32_ANY, "false", PREC_DEFAULT, PREC_BF16},
    {"float32_logits", MT_F32_ANY, "false", PREC_DEFAULT, PREC_BF16},
    {"float32_qk_product", MT_F32_ANY, "false", PREC_DEFAULT, PREC_BF16},
    {"float32_weight_sum", MT_F32_ANY, "true", PREC_DEFAULT, PREC_BF16},
    {"float32_gate_logits", MT_F32_ANY, "false", PREC_DEFAULT, PREC_BF16},
    {"cast_logits_to_fp32", MT_F32_ANY, "true", PREC_DEFAULT, PREC_BF16},
    {"logits_dot_in_fp32", MT_F32_ANY, "false", PREC_DEFAULT, PREC_BF16},
    {"grad_dtype", 0, "float32", "the gradients are float32",
     "the gradients are kept in float32 (docs/precision.md); expected float32"},
    {"mu_dtype", 0, "|float32", "Adam's moments are float32 (weight_dtype's)",
     "Adam's moments are kept in float32 (docs/precision.md); expected \"\" or float32"},
    {"quantization", 0, "", "no quantization",
     "qtrain trains without quantization (float32 or bfloat16 compute); expected \"\""},
    /* optimizer and step (L974-993, L1054-1055) */
    {"adamw_mask", 0, "[]", "weight decay applies to every parameter (docs/model.md 4)",
     "qtrain's AdamW decays every parameter, norms included (docs/model.md 4); a mask would "
     "not be honoured; expected []"},
    {"trainable_parameters_mask", 0, "[]", "every parameter is trained",
     "qtrain trains every parameter (only mtp_keep_layers carries a head untrained); a mask "
     "would not be honoured; expected []"},
    {"skip_step_on_spikes", 0, "false", "no step is skipped",
     "qtrain applies every step's update; a spike would not skip it; expected false"},
    {"abort_on_nan_loss", 0, "true", "qtrain stops on a non-finite loss, on every rank",
     "qtrain always stops on a non-finite loss (README, Meshes); expected true"},
    {"abort_on_inf_loss", 0, "true", "qtrain stops on a non-finite loss, on every rank",
     "qtrain always stops on a non-finite loss (README, Meshes); expected true"},
    /* ahead-of-time compilation over several slices (L1040, L698) */
    {"compile_topology_num_slices", 0, "-1|1", "one slice",
     "compile_topology plans the devices of one slice here; for N slices give num_ranks=N x "
     "the topology's devices, dcn_data_parallelism=N (or another dcn_* axis) and "
     "device_memory_gib=the device's memory in place of compile_topology (docs/config.md, "
     "memory (AOT)); expected -1 or 1"},
    {"num_slices", 0, "-1|1", "one slice",
     "slices are the dcn_*_parallelism axes here (README, Several machines); expected -1 or 1"},
    /* model-side keys the published files do not set, at MaxText's default or the decoders'
     * own form (L187, L1007, L1232) */
    {"mlp_activations", 0, "[silu, linear]",
     "the experts' activation is SwiGLU, as this value says",
     "the experts are SwiGLU (silu gate x linear up); expected [\"silu\", \"linear\"] (MaxText's default)"},
    {"use_iota_embed", MT_ANY, NULL, "an embedding lookup implementation choice", NULL},
    {"use_multimodal", 0, "false", "text only",
     "qtrain trains the text model only (no vision tower: the *_for_vit keys are accepted and "
     "unused); expected false"},
};

static const qt_cg_mt_rule *mt_rule(const char *key)
{
    for (size_t i = 0; i < sizeof mt_rules / sizeof mt_rules[0]; i++)
        if (!strcmp(mt_rules[i].key, key)) return &mt_rules[i];
    return NULL;
}

int qt_cg_mt_key_known(const char *key)
{
    return mt_rule(key) != NULL;
}

int qt_cg_mt_set(qt_cg_config *c, const char *where, const char *key, const qt_cg_val *v)
{
    int i = 0;
    while (i < c->n_mt && strcmp(c->mt[i].key, key)) i++;
    if (i == c->n_mt) {
        qt_cg_mt_entry *n = realloc(c->mt, (size_t)(c->n_mt + 1) * sizeof *n);
        if (!n) abort(); /* host tool: out of memory for a few records is fatal */
        c->mt = n;
        c->n_mt++;
    }
    c->mt[i].key = key;
    c->mt[i].val = v;
    snprintf(c->mt[i].where, sizeof c->mt[i].where, "%s", where);
    return 0;
}

/* The value as the table compares it: a scalar's text with True/TRUE as true (False/FALSE as
 * false); a list as [a, b] of its items so compared, quoted or not ([] when empty). */
static void mt_text(const qt_cg_val *v, qt_cg_buf *b)
{
    if (v->kind == QT_CG_SCALAR) {
        const int w = qt_cg_bool_word(v->s);
        qt_cg_buf_printf(b, "%s", w < 0 ? v->s : w ? "true" : "false");
        return;
    }
    qt_cg_buf_printf(b, "[");
    for (int i = 0; i < v->n; i++) {
        if (i) qt_cg_buf_printf(b, ", ");
        mt_text(&v->items[i], b);
    }
    qt_cg_buf_printf(b, "]");
}

static int mt_ok(const qt_cg_mt_rule *r, const char *text)
{
    if (r->flags & MT_ANY) return 1;
    if (!r->ok) return 0;
    const size_t n = strlen(text);
    for (const char *p = r->ok;;) {
        const char *bar = strchr(p, '|');
        const size_t m = bar ? (size_t)(bar - p) : strlen(p);
        if (m == n && !strncmp(p, text, n)) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}

int qt_cg_maxtext_rules(const qt_cg_config *c, qt_cg_settings *s, char *err, size_t errlen)
{
    for (int i = 0; i < c->n_mt; i++) {
        const qt_cg_mt_entry *e = &c->mt[i];
        const qt_cg_mt_rule *r = mt_rule(e->key);
        qt_cg_buf b = {0};
        mt_text(e->val, &b);
        const char *shown = (r->flags & MT_SECRET) ? "<not shown>" : b.p ? b.p : "";
        int ok = mt_ok(r, b.p ? b.p : "");
        const char *why = r->why_ok;
        if (!ok && (r->flags & MT_F32_ANY) && s->dtype == QT_F32) {
            ok = 1;
            why = "dtype is float32: every activation, product and sum is float32 already";
        }
        if (!ok) {
            qt_cg_fail(err, errlen, "%s=%s (%s): MaxText's key, not honoured by qtrain: %s",
                       e->key, shown, e->where, r->why_bad);
            qt_cg_buf_free(&b);
            return -1;
        }
        const size_t n = strlen(s->mt_ignored);
        snprintf(s->mt_ignored + n, sizeof s->mt_ignored - n, "%s%s=%s (%s): %s",
                 n ? "; " : "", e->key, shown, e->where, why);
        qt_cg_buf_free(&b);
    }
    return 0;
}
