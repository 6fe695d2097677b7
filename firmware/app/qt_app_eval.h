/* qt_app_eval.h - the qtrain program's held-out evaluation (app/eval.c, issue 33): the eval
 * source, when an eval is due, the eval itself with its metrics row, progress line and
 * early stop. Called by main.c only.
 */
#ifndef QT_APP_EVAL_H
#define QT_APP_EVAL_H

#include <stdint.h>
#include <stdio.h>
#include "qt_plan.h"
#include "qt_cli.h"
#include "io/qt_io.h"

/* Windows of the embedded corpus held out when a plan evaluates without an eval source and
 * without data= (make run: 32 windows of default.yml's 129 tokens, 4 eval batches of 8). */
#define QT_APP_EVAL_CORPUS_HOLDOUT 32

/* At start-up, after the training data is open: the eval source of a plan that evaluates
 * (eval_data= opened and validated as data=, or eval_holdout=N cut from *train, which then
 * ends before it; with neither and no data=, the embedded corpus's last
 * QT_APP_EVAL_CORPUS_HOLDOUT windows), installed as the runtime's eval tokens; refuses a source without an
 * evaluating plan, a plan without a source, and a source shorter than one eval batch.
 * Returns QT_OK or the QT_E_* code after its message. */
int qt_app_eval_open(const qt_plan *p, const qt_cli *cli, qt_data *train, int rank);
/* Packed plans, after qt_app_eval_open: QT_OK when the eval_data= file records no
 * end-of-document id or the run's `eos` (from: where that came from); else QT_E_ARG naming
 * both (a held-out view shares the training file's). */
int qt_app_eval_doc_sep(const qt_cli *cli, int32_t eos, const char *from);
/* 1 if an eval follows step `step` (0-based): step >= eval_start_step and
 * (step - eval_start_step) % eval_interval == 0. */
int qt_app_eval_due(const qt_plan *p, int64_t step);
/* The eval after step `step` (all ranks): its metrics row (rank 0, to metrics when not
 * NULL) and progress line; the ranks agree on the result. *stop = 1 when the eval loss
 * reached target_eval_loss. Returns QT_OK or the agreed error. */
int qt_app_eval_run(const qt_plan *p, int64_t step, int64_t end, FILE *metrics,
                    const char *metrics_path, int *stop);
/* The summary line of the evals run (rank 0 calls it), nothing when none ran. */
void qt_app_eval_summary(FILE *f);
void qt_app_eval_close(void);
/* Fills the manifest's eval_* fields with the source installed (none, eval_data= with its
 * bytes and hash, or the holdout of N windows) and its windows and batches per eval. */
void qt_app_eval_manifest(qt_manifest *m);
/* The windows held out of the training data for the eval (eval_holdout=N or the embedded
 * corpus's holdout), 0 when none: a save records it, a resume must hold out as many. */
int64_t qt_app_eval_holdout_windows(void);

#endif
