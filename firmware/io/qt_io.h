/* qt_io.h - the firmware's file interfaces: weights/checkpoints (safetensors), token data,
 * metrics. All of them run at init or between steps, use no heap (static buffers and the
 * plan's arena only) and report errors as a negative QT_E* code after printing one line to
 * stderr that names the file, the tensor/key/position and what was expected.
 */
#ifndef QT_IO_H
#define QT_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "qt_plan.h"
#include "qt_err.h"
#include "runtime/qt_metrics.h"


/* ---- weights and checkpoints (firmware/io/checkpoint.c) ----------------------------- */

/* want_optimizer of qt_checkpoint_load: what the load takes besides the weights. */
#define QT_LOAD_WEIGHTS 0      /* the weights only (load_weights_only=1): step 0 */
#define QT_LOAD_RESUME 1       /* also the Adam moments and the step when the checkpoint's
                                  state hash is this plan's (a bit-exact resume) */
#define QT_LOAD_RESUME_ANY 2   /* allow_state_change=1: the moments and the step under
                                  another state hash too (a deliberate change of a hashed
                                  setting: not bit-exact; qt_ckpt_ident.state_changed); a
                                  checkpoint without optimizer state is refused */

/* Load parameters from a safetensors file into the plan's parameter region (and, when the
 * file carries them and `want_optimizer` is not QT_LOAD_WEIGHTS, Adam m/v and the step
 * metadata).
 * Accepts the Hugging Face on-disk names of the plan's decoder (Qwen3-Next or Qwen3.5
 * layouts, per-expert experts.E.{gate,up,down}_proj) and the fused in-memory expert names
 * (mlp.experts.gate_up_proj [E,2I,H], mlp.experts.down_proj [E,H,I]); F32, BF16 or F16 tensors.
 * mtp.* tensors are skipped with a note on stderr. Missing, extra or mis-shaped tensors are
 * errors naming them. Optimizer state saved under another state hash (qt_ckpt_state_hash;
 * files without one: another plan hash) is skipped with a note and only the weights load,
 * unless QT_LOAD_RESUME_ANY: then it loads, with a note naming both hashes.
 * On a mesh every rank reads the file itself and keeps its own part (its compute copy or
 * expert shard, its optimizer blocks); no collective runs. On success *step_out / *data_pos_out receive the step
 * metadata when the optimizer state was loaded with it, else 0; they may be NULL.
 * `path` may also be a Hugging Face sharded checkpoint: a *.safetensors.index.json file or
 * a directory holding model.safetensors.index.json (else exactly one *.safetensors file).
 * Shards are validated against the index and the plan before any byte is written; the
 * moments come from optimizer.safetensors.index.json beside the index when its state hash
 * is this plan's (ckpt_shards.c, limits in st_index.h). */
int qt_checkpoint_load(const qt_plan *p, const char *path, int want_optimizer,
                       int64_t *step_out, int64_t *data_pos_out);

/* Write parameters (HF on-disk names of the plan's decoder) and, if with_optimizer, Adam m/v
 * as "optimizer.m.<name>" / "optimizer.v.<name>" plus __metadata__ (format, step, data
 * position, plan hash, state hash (with the optimizer), run name). Atomic: writes
 * <path>.tmp, fsyncs, renames. On a multi-rank plan every rank must call it (collective:
 * the tensors are gathered from the ranks' shards and optimizer blocks) and world rank 0
 * alone writes; every rank returns rank 0's result, or QT_E_COMM after which the job must
 * be aborted. The file is the one a one-rank run in the same state writes. */
int qt_checkpoint_save(const qt_plan *p, const char *path, int with_optimizer,
                       int64_t step, int64_t data_pos);

/* A pipeline plan p (pipeline_stages S > 1, docs/pipeline.md "Checkpoints") in a run that
 * reads or writes a checkpoint file (key: the first of save=, load=, dump_grads= given;
 * NULL: none, and this is a no-op): every stage's plan, stage(k) for k = 0 .. S - 1
 * (qt_main_stage_plan), so that checkpoints span the stages: a save writes the one-rank file
 * (world rank 0 writes it, each later stage's first rank streams its stage's data to it), a
 * load checks every stage's tensors and keeps this stage's, and the state hash is the
 * one-rank plan's. Each stage's parameters must follow the previous stage's in the one-rank
 * order (else QT_E_PLAN naming the key and the stage; the same verdict on every rank). Call
 * it on every rank before any other checkpoint function; 0 without stages. */
int qt_checkpoint_set_stages(const qt_plan *p, const qt_plan *(*stage)(int k), const char *key);

/* Write a checkpoint as a Hugging Face sharded directory `dir` (ckpt_dir.c): model-0000K-of-
 * 0000N.safetensors + model.safetensors.index.json (HF names, loadable by transformers),
 * and the Adam moments as optimizer-0000K-of-0000M.safetensors +
 * optimizer.safetensors.index.json; the indexes' metadata hold format "qtrain-1", step,
 * data position, plan hash, state hash and run name; config.json of the plan and the
 * tokenizer= files are added where the directory has none (hf_config.h). Shards hold at most shard_bytes of
 * tensor data (a bigger tensor gets its own). Collective on a mesh: every rank writes its
 * share of the shards (shard s by world rank s mod n_ranks; a pipeline: world rank 0 writes
 * them all, ckpt_pp.h), no rank holds more than one
 * gathered tensor at a time. Atomic: the directory is built as <dir>.tmp.<pid> and swapped
 * in with renameat2(RENAME_EXCHANGE), the indexes written last; on any failure <dir> is
 * the previous checkpoint, untouched. Every rank returns the same code (QT_E_COMM: abort).
 * The files do not depend on the mesh. */
int qt_checkpoint_save_dir(const qt_plan *p, const char *dir, int64_t shard_bytes,
                           int64_t step, int64_t data_pos);

/* 1 if a save= path names a single safetensors file (ends in ".safetensors"), 0 if it names
 * a sharded checkpoint directory. */
int qt_checkpoint_is_file(const char *path);
/* Write the normalised gradient (HF on-disk names, F32) to a safetensors file (dump_grads=,
 * tests); collective on a mesh like qt_checkpoint_save. */
int qt_checkpoint_save_grads(const qt_plan *p, const char *path);

/* What the last successful qt_checkpoint_load read (the run manifest's checkpoint identity
 * and the resume check of the data hash). */
typedef struct qt_ckpt_ident {
    int loaded;                /* a load succeeded */
    uint64_t content_hash;     /* a file: XXH64 of its bytes (`xxhsum -H1`); a directory:
                                  XXH64 over the XXH64 values (8 bytes each, little-endian)
                                  of the shards it read, in the index's shard order
                                  (on a mesh computed by world rank 0 only, which writes
                                  the manifest; other ranks leave the hash of nothing) */
    char data_hash[24];        /* metadata "data_hash" ("0x" + 16 hex), "" when absent */
    int64_t data_holdout;      /* metadata "data_holdout" (eval_holdout=N's N), 0 when absent */
    char dtype[16];            /* metadata "dtype" (the compute dtype of a bf16 run's save,
                                  "bfloat16"), "" when absent (float32, or older) */
    char moe_buffer[96];       /* metadata "moe_buffer" (a receive-buffer dropping run's
                                  drop geometry, qt_ckpt_buffer_meta), "" when absent */
    int n_files;               /* safetensors files hashed */
    int state_changed;         /* QT_LOAD_RESUME_ANY: the moments and the step loaded
                                  although the checkpoint's state hash (a file without one:
                                  its plan hash) is not this plan's */
    char state_kind[16];       /* with state_changed: "state hash" or "plan hash" */
    char state_was[24];        /* with state_changed: the checkpoint's hash ("0x" + 16 hex,
                                  or "(none)") */
    char state_now[24];        /* with state_changed: this plan's */
} qt_ckpt_ident;
const qt_ckpt_ident *qt_checkpoint_ident(void);
/* The data hash that saves record in their metadata ("data_hash"); never called: none. */
void qt_checkpoint_set_data_hash(uint64_t hash);
/* The windows at the data's end held out for the eval (eval_holdout=N; 0: none), which
 * saves record as "data_holdout" when N > 0: the training windows are the file's first
 * W - N, so a resume must hold out as many (the data position counts in them). */
void qt_checkpoint_set_data_holdout(int64_t n);

/* State compatibility hash: FNV-1a over everything that sets the training trajectory and
 * the meaning of the optimizer state (model dims, parameter names and global shapes,
 * rotary tables, delta-rule algorithm, optimizer hyper-parameters, learning-rate schedule,
 * global batch, sequence length, the objective: load-balance weight, z-loss, MTP factor,
 * packing, token dropping), nothing that only sets the mesh, the batch split (micro
 * batch x accumulation) or the arena layout. Equal hashes: the saved moments resume this
 * plan bit-exactly, unless the compute dtype differs (not hashed: the checkpoint's "dtype"
 * metadata, qt_ckpt_ident.dtype; the state resumes, noted as not bit-exact). */
uint64_t qt_ckpt_state_hash(const qt_plan *p);
/* "moe_buffer" for a save's metadata, into out[n]: a plan that drops past the expert
 * hosts' receive buffers (moe_ragged, ragged_buffer_factor > 0 on an expert group of more
 * than one rank) records what its drops depend on, "ep=Ep tokens=T rows=B microbatches=G"
 * (the expert degree, a rank's tokens a microbatch, the buffer's rows, the accumulation
 * steps): 1. 0 for every other plan (the key is then not written: their checkpoints' bytes
 * are unchanged). Not in the state hash (Ep and T are the mesh's and the batch split's):
 * a resume whose value differs continues the state, not bit-exactly (main.c notes it). */
int qt_ckpt_buffer_meta(const qt_plan *p, char *out, size_t n);
/* Vets a save= (qtrain_format 1) or dump_grads= (0) destination `path` given as `key`
 * before training, reading only: QT_OK when it does not exist. Refused (QT_E_ARG, message
 * naming key, path and what was expected): an existing path that is not a regular file,
 * a symbolic link (a save would replace the link, and for a directory empty its target),
 * the same file (st_dev, st_ino) as data_path (may be NULL), and - unless overwrite - a
 * file that is not a safetensors file, or for save= one whose __metadata__ format is not
 * "qtrain-1". A save= directory path (qt_checkpoint_is_file 0) must be absent, an empty
 * directory, or a qtrain checkpoint directory (model.safetensors.index.json of format
 * "qtrain-1"); anything else is refused whatever overwrite says (a save replaces the whole
 * directory). */
int qt_checkpoint_check_target(const char *key, const char *path, int qtrain_format,
                               int overwrite, const char *data_path);
/* A save= file (qt_checkpoint_is_file) that exists and is a qtrain checkpoint must hold p's
 * parameters (names and shapes, as a load checks them): a qtrain checkpoint of another
 * model is refused (QT_E_ARG, naming its run_name and the first mismatch) unless the caller
 * has overwrite=1 and skips this. QT_OK otherwise (no file, not a qtrain checkpoint: those
 * are qt_checkpoint_check_target's). Call after qt_checkpoint_set_stages. */
int qt_checkpoint_check_target_model(const qt_plan *p, const char *key, const char *path);
/* Removes "<path>.tmp.<pid>" temporaries left by killed writers (process gone), each with
 * a note on stderr (st_dir.c, qt_st_remove_stale). */
void qt_checkpoint_remove_stale(const char *path);

/* One job at a time per save= target (ckpt_lock.c): takes "<path>.lock" (an exclusive
 * flock(2) on a file beside the target, held until qt_checkpoint_unlock or the process
 * ends, holding "host pid"). A lock held by a live process (on any host that shares the
 * file system) refuses the start (QT_E_ARG, message naming key, path, the holder's host and
 * pid); a lock left by a job that no longer runs (killed, crashed: the kernel released its
 * flock, as for the ".tmp.<pid>" files of qt_checkpoint_remove_stale) is taken over with a
 * note naming the dead owner. A file system without flock gets a note, not a refusal. An
 * existing "<path>.lock" that is not a lock file (it holds other than one "host pid" line)
 * is the user's: refused (QT_E_ARG) unless overwrite. */
int qt_checkpoint_lock(const char *key, const char *path, int overwrite);
/* Releases and removes the lock qt_checkpoint_lock took (no-op when none). */
void qt_checkpoint_unlock(void);
/* Collective on a mesh, at start-up (ckpt_target.c): claims the save= target for this job.
 * Rank 0 takes its lock (qt_checkpoint_lock) and removes the temporaries of dead writers
 * (qt_checkpoint_remove_stale); on a mesh with a save= directory (a sharded checkpoint,
 * which every rank writes into) every rank then checks that it is the directory rank 0
 * sees: rank 0 writes a probe file "<path>.tmp.<pid>" beside it, every rank must read back
 * the same bytes. Single files (save=*.safetensors) are written by rank 0 alone and are not
 * probed. Every rank returns the same code: QT_E_ARG after rank 0's refusal (lock) or the
 * messages of the ranks that do not see the directory; QT_E_COMM: abort. overwrite: as for
 * qt_checkpoint_lock. */
int qt_checkpoint_claim(const qt_plan *p, const char *key, const char *path, int overwrite);
/* Installs the SIGINT / SIGTERM / SIGHUP handler (ckpt_target.c): it removes this process's
 * save temporaries and the save= lock, prints one line and re-raises the signal (exit
 * status 128 + signal). A signal ignored at start stays ignored. Call first in main. */
void qt_checkpoint_signal_guard(void);
/* At start-up, when RLIMIT_FSIZE (ulimit -f) is finite: QT_E_ARG (message naming key,
 * path, the limit and the size) if the largest file a save= (qtrain_format 1; a directory
 * with shards of at most shard_bytes) or dump_grads= (0) target would write holds more
 * tensor data than the limit allows. */
int qt_checkpoint_check_fsize(const qt_plan *p, const char *key, const char *path,
                              int qtrain_format, int64_t shard_bytes);
/* At start-up, for a save= directory (not a *.safetensors file): QT_E_ARG (message naming
 * save_shard_size= as `given`, the path, the shard count, the limit QT_SX_MAX_SHARDS and the
 * smallest accepted size) if its shards of at most shard_bytes would be more than a
 * checkpoint directory may hold (ckpt_dir.c's packing, counted from the plan's tensors), so
 * that it is not found only at the first save, after training. QT_OK otherwise. */
int qt_checkpoint_check_shards(const qt_plan *p, const char *path, int64_t shard_bytes,
                               const char *given);
/* Installs the SIGXFSZ handler (st_write.c): a write past RLIMIT_FSIZE then fails with
 * EFBIG (reported by the writer, the checkpoint untouched) instead of killing the process
 * silently, and the handler prints once which limit was hit. Call first in main. */
void qt_io_fsize_guard(void);

/* ---- token data (firmware/io/data.c) ------------------------------------------------- */

typedef struct qt_data {
    const char *path;          /* NULL for the embedded corpus */
    const void *base;          /* token payload */
    int64_t n_tokens;
    int32_t bytes_per_token;   /* 1 (embedded bytes), 2, 4 or 8 */
    int64_t n_windows;         /* (n_tokens - 1) / seq_len */
    int64_t vocab;             /* every id handed out is < vocab (re-checked by fill) */
    int64_t file_bytes;        /* size of the file (the embedded corpus: its bytes) */
    uint64_t hash;             /* XXH64 of the whole file (qt_hash64.h), computed at open */
    int64_t doc_sep;           /* the end-of-document id the file records (QTTOKENS version
                                * 2), or QT_DATA_SEP_NONE / QT_DATA_SEP_UNKNOWN */
} qt_data;

#define QT_DATA_SEP_NONE (-1)     /* recorded: no separator (eos=none; the embedded corpus) */
#define QT_DATA_SEP_UNKNOWN (-2)  /* nothing recorded (.npy, raw, QTTOKENS version 1) */

/* Open a token file (.npy of an integer dtype, or the raw "QTTOKENS" format documented in
 * docs/formats.md, or headerless raw with dtype given as "uint16"/"uint32") or, with path NULL,
 * the embedded byte-level corpus. Maps it read-only, checks every id < vocab (reporting the
 * first bad id with its position) and that at least one window of seq_len+1 tokens exists.
 * Sets file_bytes and hash (XXH64 of every byte of the file, header included: the run
 * manifest's and the checkpoints' data identity, `xxhsum -H1 FILE`). */
int qt_data_open(qt_data *d, const char *path, const char *raw_dtype, int64_t vocab,
                 int64_t seq_len);

/* Fill inputs/targets (I32, [n_seqs * seq_len]) with global sequences first_seq ..
 * first_seq+n_seqs-1 of optimizer step `step` (window (step*global_batch + j) % n_windows).
 * An id that is no longer < vocab (the file was rewritten after open) is written as 0 and
 * makes it return QT_E_RANGE with a message naming the file, the id and its position. */
int qt_data_fill(const qt_data *d, int64_t step, int64_t global_batch, int64_t first_seq,
                 int64_t n_seqs, int64_t seq_len, int32_t *inputs, int32_t *targets);
/* qt_data_fill of the tokens [tok_lo, tok_lo + tok_n) of each sequence only (a context
 * rank's token block, docs/context.md): inputs/targets [n_seqs * tok_n]. */
int qt_data_fill_part(const qt_data *d, int64_t step, int64_t global_batch, int64_t first_seq,
                      int64_t n_seqs, int64_t seq_len, int64_t tok_lo, int64_t tok_n,
                      int32_t *inputs, int32_t *targets);
/* qt_data_fill_part as the runtime's token source (qt_runtime_set_tokens,
 * runtime/qt_runtime.h): src is the qt_data. With positions (packed documents ending at
 * token eos, docs/data.md) it also writes positions[n_seqs * seq_len], each input token's
 * position inside its document over the whole sequence, and -1 into the targets whose input
 * is eos (the target is the next document's first token: no loss). */
int qt_data_tokens(const void *src, int64_t step, int64_t global_batch, int64_t first_seq,
                   int64_t n_seqs, int64_t seq_len, int64_t tok_lo, int64_t tok_n,
                   int32_t eos, int32_t *inputs, int32_t *targets, int32_t *positions);
/* The document separator of a packed plan (docs/data.md "Where the separator comes from"),
 * the data of key ("data"; messages name "key=PATH" or the embedded corpus): plan_eos >= 0
 * (the plan's eos_id) is taken, and a file that records another id is refused; plan_eos -1
 * (eos_id unset) takes the id the file records (refused outside [0, vocab)), or -1 when it
 * records none (eos=none, the embedded corpus: no separator, each window one document); a
 * file that records nothing (.npy, raw, QTTOKENS version 1) is refused. *eos receives the
 * separator and `from` (from_len bytes) where it came from. QT_OK or QT_E_ARG. */
int qt_data_doc_sep(const qt_data *d, const char *key, int32_t plan_eos, int32_t *eos,
                    char *from, size_t from_len);
/* QT_OK when d (key: "eval_data") records no id or eos, the run's separator (`from`: where
 * it came from, for the message); else QT_E_ARG naming the file and both ids. */
int qt_data_doc_sep_agrees(const qt_data *d, const char *key, int32_t eos, const char *from);
/* QT_OK if the token file is still the one validated at open: same device and inode at its
 * path, same size and modification time; else QT_E_IO with a message naming the file and
 * the change. Two stat calls; the embedded corpus always passes. A SIGBUS while reading an
 * open token file's mapping (truncated under it) prints a message naming it and exits 1. */
int qt_data_check(const qt_data *d);
/* Unmaps and closes d's file (the SIGBUS handler is removed with the last open file) and
 * zeroes *d; a zeroed or already closed d is a no-op. */
void qt_data_close(qt_data *d);

/* ---- metrics (firmware/io/metrics.c) -------------------------------------------------- */

/* qt_step_metrics, the step's record, is the runtime's (runtime/qt_metrics.h). */
/* One JSON object per line: {"step":..,"loss":..,"loss_bits":"0x..","grad_norm":..,"lr":..,
 * "tokens_per_s":..,"step_s":..,"tokens":..,"fingerprint":"0x.."}. */
void qt_metrics_write(FILE *f, const qt_step_metrics *m);
/* One held-out evaluation as a metrics line (issue 33): {"step":s,"eval_loss":L,
 * "eval_perplexity":exp(L),"eval_tokens":N,"eval_loss_bits":"0x..","eval_batches":n,
 * "eval_s":t}; s is the training step it followed, so the resume and truncation rules of
 * step lines cover it. With mtp_eval_target_module k > 0 (only then) before eval_s:
 * "eval_mtp_acceptance_rate_percent":r (%.17g),"eval_mtp_target_module":k,
 * "eval_mtp_accepted":m,"eval_mtp_accept_positions":v (docs/formats.md). */
void qt_metrics_write_eval(FILE *f, const qt_eval_metrics *e);
/* Its progress line on f: "eval after step s/total  eval_loss L  perplexity P ...". */
void qt_progress_print_eval(FILE *f, const qt_eval_metrics *e, int64_t total_steps);
/* The run manifest: the first metrics line of every run (fresh or resumed), written once
 * before its first step. Strings may be NULL (written as null). */
typedef struct qt_manifest {
    const qt_plan *plan;       /* run, plan hash, generator version, mesh, config_text */
    int n_ranks;
    uint64_t seed;
    int argc;                  /* the command line's key=value arguments (argv[1..]) */
    char *const *argv;
    const char *build_compiler, *build_flags, *build_isa, *build_git, *build_kind;
    const char *data_path;     /* NULL: the embedded corpus */
    int64_t data_bytes;
    uint64_t data_hash;
    int64_t data_tokens, data_windows;  /* qt_data's n_tokens and n_windows */
    double data_passes;        /* times steps 0..end_step-1 read the windows: end x B / W */
    const char *load;          /* load= as given, or NULL */
    const qt_ckpt_ident *ckpt; /* what the load read (qt_checkpoint_ident) */
    int64_t start_step, end_step;
    const char *note;          /* e.g. allow_data_change=1's note, or NULL */
    /* the eval source (issue 33; app/eval.c qt_app_eval_manifest): eval_kind 0 none (the
     * plan does not evaluate), 1 eval_data= (eval_path, its bytes and XXH64 as data=), 2
     * eval_holdout=N (the last eval_holdout windows of data=, or of the embedded corpus
     * when data= is not given); eval_windows its windows, eval_batches read by each eval */
    int eval_kind;
    const char *eval_path;
    int64_t eval_bytes, eval_holdout, eval_windows, eval_batches;
    uint64_t eval_hash;
} qt_manifest;

/* One line: {"manifest":"qtrain-1","start_step":S,"end_step":E,"run":..,"plan_hash":..,
 * "generator_version":..,"ranks":R,"mesh":{..},"seed":..,"args":[..],"build":{"compiler",
 * "flags","isa","git","kind"},"data":{"path","bytes","hash","tokens","windows","passes"},
 * "eval":null|{"source":"eval_data","path","bytes","hash","windows","batches"}|
 * {"source":"eval_holdout","holdout":N,"windows","batches"}, "checkpoint":{"path","hash",
 * "files","data_hash"}|null,"note":..|null,"config":{"key":"value",..}} (config values are
 * the YAML flow text of the resolved config, as strings). */
void qt_manifest_write(FILE *f, const qt_manifest *m);
/* Step of the last line of an existing metrics file, or -1 when there is no file, it is
 * empty or it is not a regular file; a last line that is a manifest of start step S (a run
 * that trained nothing) gives S-1. QT_E_FORMAT (message names the file) when the last
 * line is incomplete or is neither {"step":N,.. nor a manifest. */
int qt_metrics_last_step(const char *path, int64_t *last);
/* Crash recovery of a resumed run (truncate_metrics=1): cuts an existing metrics file
 * before its first line that belongs to step `start` or later (a step line with "step" >=
 * start, or a manifest whose start_step >= start), with ftruncate. *lines receives the
 * lines removed, *first / *last the first and last step numbers among them (-1 if none).
 * QT_E_IO / QT_E_FORMAT with a message naming the file. */
int qt_metrics_truncate(const char *path, int64_t start, int64_t *lines, int64_t *first,
                        int64_t *last);
/* Progress line on stderr; on a mesh it ends with "(R ranks)" (tokens/s are the job's). */
void qt_progress_print(FILE *f, const qt_step_metrics *m, int64_t total_steps, int n_ranks);

#endif
