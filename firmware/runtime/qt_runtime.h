/* qt_runtime.h - start-up and the training step.
 *
 * qt_runtime_init validates the plan against this process (plan hash, rank count, arena
 * section bounds), backs the arena with huge pages where possible, prefaults it, runs the
 * init schedule and initialises parameters (seeded) unless a checkpoint is loaded later.
 * qt_runtime_step runs one optimizer step: for each microbatch, take its tokens from the
 * installed token source (qt_runtime_set_tokens: the runtime reads no files), run the
 * microbatch schedule (forward, backward, per-sequence weight-gradient leaves pushed into the
 * pairwise trees), then finalise the trees, normalise by the global token count, compute the
 * gradient norm with the exact accumulator, clip, and apply AdamW. No heap, no syscalls but
 * the clock.
 */
#ifndef QT_RUNTIME_H
#define QT_RUNTIME_H

#include <stdint.h>
#include "qt_plan.h"
#include <stdio.h>
#include "qt_ops.h"
#include "qt_metrics.h"

typedef struct qt_run_opts {
    uint64_t seed;
    float lr_override;         /* < 0: use the plan's */
    int64_t total_steps;       /* for the schedule: plan's schedule_steps unless > 0 */
    int32_t rank;              /* this process's rank (0 when single-rank) */
    int32_t n_ranks;           /* ranks the process was started with; <= 0 means 1 */
    int32_t arena_pages;       /* enum qt_arena_pages (qt_arena.h): 0 auto, 1 huge */
} qt_run_opts;

/* Heap audit hook (tests/tools/heap_audit.c, LD_PRELOAD): called with 1 right before the
 * first training step and 0 after the last one, only when the library is present. */
void qt_heap_audit_mark(int in_steps) __attribute__((weak));

/* The plan this binary was built for (generated/<run>/plan_main.c). */
const qt_plan *qt_main_plan(void);
/* A pipeline plan's stage k (0 .. pipeline_stages - 1), or NULL: defined by the
 * plan_main.c of pipeline plans only (weak: NULL elsewhere). */
const qt_plan *qt_main_stage_plan(int k) __attribute__((weak));

/* Start-up (see the top of this file): checks the CPU's bf16 path, validates p against this
 * process and o (NULL: seed 0, one rank, the plan's schedule), maps and prefaults the arena,
 * warms up the connections, runs the init schedule, zeroes the Adam moments and initialises
 * the parameters with o->seed. On a mesh every rank must call it (the start-up checks agree
 * across ranks). QT_OK, or a QT_E_* code once the failure is printed. */
int qt_runtime_init(const qt_plan *p, const qt_run_opts *o);
/* Initialise every parameter from the plan's init rules with the given seed (counter-based
 * RNG keyed by (seed, parameter index, element index): independent of sharding). */
void qt_params_init(const qt_plan *p, uint64_t seed);
/* The master weights were written outside a step (qt_params_init, a checkpoint load): a
 * bf16 plan's compute copy is made bf16(masters) again on every rank (rounding and the
 * parameter all-gathers: all ranks call it). qt_runtime_init calls it after its own
 * initialisation. Nothing to do in fp32 plans. 0 or the collective's QT_E_*. */
int qt_runtime_params_changed(void);
/* The steps' token source: fills inputs and targets (I32, [n_seqs * tok_n]) with the tokens
 * [tok_lo, tok_lo + tok_n) of global sequences first_seq .. first_seq+n_seqs-1 (of seq_len
 * tokens) of optimizer step `step` (a context rank's token block; the whole sequence
 * otherwise: 0, seq_len); returns QT_OK or a
 * negative QT_E_* code after printing its one line. The program installs io/data.c's
 * (qt_data_tokens with its qt_data), a test its own. */
typedef int (*qt_token_fill_fn)(const void *src, int64_t step, int64_t global_batch,
                                int64_t first_seq, int64_t n_seqs, int64_t seq_len,
                                int64_t tok_lo, int64_t tok_n, int32_t eos,
                                int32_t *inputs, int32_t *targets, int32_t *positions);
/* Installs the token source of qt_runtime_step / _grads (fill called with src). */
void qt_runtime_set_tokens(qt_token_fill_fn fill, const void *src);
/* The document separator of a packed plan, resolved at start-up from the plan's eos_id or
 * the token file (qt_data_doc_sep, io/qt_io.h): replaces p->pack_eos in the fills (the
 * eos argument of qt_token_fill_fn) and the MTP head's masks; -1: no separator. */
void qt_runtime_set_eos(int32_t eos);
/* The held-out evaluation's token source (issue 33): the same kind of fill as the steps',
 * over the eval file; its "step" argument is the eval batch (from the file's start every
 * eval), its global batch qt_runtime_eval_batch's. NULL fill: no eval source. */
void qt_runtime_set_eval_tokens(qt_token_fill_fn fill, const void *src);
/* Sequences of one eval batch over the whole mesh (the windows it reads): the plan's
 * eval_global when set, else its eval_batch per sequence group x the sequence groups (the
 * batch axes but context). 0 when the plan has no evaluation. */
int64_t qt_runtime_eval_batch(const qt_plan *p);
/* One held-out evaluation at the current weights, after step `step`: eval batches
 * 0 .. n_batches-1 of the eval source, each ceil(eval_batch / micro_batch) forwards of the
 * microbatch schedule's forward (no backward, no update, nothing allocated: the training
 * microbatch's arena), slots past the eval batch's sequences padded with masked targets
 * (issue 35). Per-sequence losses are summed by the exact accumulator and merged
 * over the batch axes, so every mesh gives one rank's bits. Fills *e. Returns QT_OK,
 * QT_E_PLAN (no eval in the plan or no source), the fill's or a collective's error. */
int qt_runtime_eval(const qt_plan *p, int64_t step, int64_t n_batches, qt_eval_metrics *e);
/* One optimizer step `step` (0-based) over the installed token source. Fills *m (loss,
 * norm, lr, fingerprint). Normalisation and clipping are folded into the update, so
 * afterwards the gradient region holds the unnormalised gradient total of the step
 * (qt_runtime_grads leaves the normalised one). Returns QT_OK, QT_E_PLAN when no token
 * source is installed, or the source's error (qt_data_fill's QT_E_RANGE: a token id out of
 * range, the data file changed) before any schedule ran on the bad tokens. */
int qt_runtime_step(const qt_plan *p, int64_t step, qt_step_metrics *m);
/* Forward+backward only (no optimizer update): leaves the step's final, normalised and
 * unclipped gradient in the gradient region. Used by dump_grads and the tests. */
int qt_runtime_grads(const qt_plan *p, int64_t step, qt_step_metrics *m);
/* Tells the heap audit (if preloaded) whether training steps are in progress. */
void qt_runtime_mark_steps(int in_steps);
/* One start-up line on f: run name, plan hash, arena size and page backing (hugetlbfs /
 * THP / 4K) with the prefault time, rank count and the comm back end name. */
void qt_runtime_banner(FILE *f, const qt_plan *p, const char *comm_backend);
/* Learning rate of 0-based step t under the current options (override, schedule steps). */
double qt_runtime_lr(const qt_plan *p, int64_t t);
/* Replaces the kernel table used by the interpreter (tests); NULL restores
 * qt_kernel_table. Call before qt_runtime_init. */
void qt_runtime_set_kernel_table(const qt_kernel_entry *table);

/* Opt-in profiling (qtrain profile=1): when on, every op and every optimizer phase is timed
 * with clock_gettime; qt_runtime_profile_print writes ms per step per phase and per op kind
 * (run / wgrad) to f. Off by default: then no per-op clock calls are made. */
void qt_runtime_profile_enable(int on);
void qt_runtime_profile_print(FILE *f);
/* One line on f: "qtrain: peak RSS X MiB (arena Y MiB, binary Z MiB)" from getrusage; binary
 * is the file-backed image (text + data, not bss). */
void qt_runtime_memory_print(FILE *f, const qt_plan *p);

/* Order-independent fingerprint over (global element index, value bits) of all params. */
uint64_t qt_param_fingerprint(const qt_plan *p);

#endif
