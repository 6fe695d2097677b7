/* qt_audit.h - qtrain-audit, the reproducibility audit tool (a host tool: heap allowed).
 *
 *   qtrain-audit runs A.jsonl B.jsonl     manifests key by key, steps bit by bit (runs.c)
 *   qtrain-audit ckpt A B                 checkpoints tensor by tensor (tensors.c)
 *   qtrain-audit grads A B                dump_grads= files tensor by tensor (tensors.c)
 *   qtrain-audit plot M.jsonl [M2.jsonl] -o out.png [--overwrite]
 *                                         loss, grad norm, lr, tokens/s (plot.c)
 *
 * Exit status of every command: 0 when the inputs are bit-identical (plot: written), 1 when
 * they differ, 2 on an error (unreadable or malformed input), with a message on stderr.
 * Invariant: nothing is written except plot's output file and its temporaries (new files:
 * an existing output file is replaced only with --overwrite).
 * Layers: main.c (the command line) calls the commands runs.c, tensors.c and plot.c, which
 * call the helpers jsonl.c (metrics files, ulp distances) and args.c (their arguments) and
 * the firmware's safetensors readers; no file calls one above it.
 */
#ifndef QT_AUDIT_H
#define QT_AUDIT_H

#include <stdint.h>
#include <stdio.h>

#define QT_AUDIT_SAME 0
#define QT_AUDIT_DIFF 1
#define QT_AUDIT_ERR 2

/* One step line of a metrics file. Text fields keep the exact decimal qtrain printed. */
typedef struct qt_audit_step {
    int64_t step;
    uint32_t loss_bits;
    uint64_t fingerprint;
    double loss, grad_norm, lr, tokens_per_s;
    int has_norm;              /* grad_norm was a number (not null) */
    double mtp_loss;           /* the MTP head's cross-entropy mean (issue 31) */
    int has_mtp;               /* the line has mtp_loss */
} qt_audit_step;

/* A flattened JSON object: "a.b.c" -> raw value text (strings without their quotes). */
typedef struct qt_audit_kv {
    char **key, **val;
    int n, cap;
} qt_audit_kv;

/* A held-out eval line ({"step":s,"eval_loss":L,...}, issue 33); with the key
 * mtp_eval_target_module it also carries the MTP head's acceptance rate. */
typedef struct qt_audit_eval {
    int64_t step;
    double loss;
    double mtp_acc;            /* eval_mtp_acceptance_rate_percent, when has_mtp_acc */
    int has_mtp_acc;
    int mtp_k;                 /* eval_mtp_target_module (the depth), 0 when absent */
} qt_audit_eval;

typedef struct qt_audit_metrics {
    const char *path;
    qt_audit_step *steps;
    int n_steps, cap;
    qt_audit_eval *evals;      /* eval lines, in file order (not step lines: runs and
                                  compare look at steps only) */
    int n_evals, eval_cap;
    int n_manifests;
    qt_audit_kv manifest;      /* the first manifest line, flattened (empty if none) */
} qt_audit_metrics;

/* Reads a metrics file: manifest lines (the first one is kept) and step lines. */
int qt_audit_metrics_read(const char *path, qt_audit_metrics *m);
void qt_audit_metrics_free(qt_audit_metrics *m);
/* Flattens one JSON object line into kv (nested objects as dotted keys, arrays raw). */
int qt_audit_flatten(const char *line, qt_audit_kv *kv);
const char *qt_audit_kv_get(const qt_audit_kv *kv, const char *key);
void qt_audit_kv_free(qt_audit_kv *kv);

/* Distance in units in the last place between two floats / doubles of the same sign
 * ordering (bit patterns mapped to a monotone integer line; +0 and -0 are 0 apart). */
uint64_t qt_audit_ulp32(uint32_t a, uint32_t b);
uint64_t qt_audit_ulp64(uint64_t a, uint64_t b);

/* The arguments of the comparing commands: exactly two paths and an optional --all;
 * else a usage line naming `usage` ("runs A.jsonl B.jsonl") and -1. */
int qt_audit_two_args(int argc, char **argv, const char *usage, const char **a,
                      const char **b, int *all);

/* The commands (main.c passes the arguments after the command's name): runs (two metrics
 * files), ckpt / grads (qt_audit_tensors; `what` names the kind in the report: "checkpoint",
 * "gradients"), plot. Each prints its report and returns the exit status: 0 identical
 * (plot: written), 1 different, QT_AUDIT_ERR (2) on an error or bad usage. */
int qt_audit_runs(int argc, char **argv);
int qt_audit_tensors(int argc, char **argv, const char *what);
int qt_audit_plot(int argc, char **argv);

#endif
