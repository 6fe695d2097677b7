/* qt_metrics.h - the record of one optimizer step, owned by the runtime: qt_runtime_step
 * and the step schedule's ops fill it (runtime.c, step_ops.c); the IO layer writes it as a
 * metrics line and a progress line (io/metrics.c), the program reports it (app/main.c).
 *
 * Invariants: plain data, no pointers; loss is loss_f32 widened (the bits the metrics line
 * prints in hex); tokens is the step's global token count.
 */
#ifndef QT_METRICS_H
#define QT_METRICS_H

#include <stdint.h>

#define QT_METRICS_MAX_LAYERS 128

typedef struct qt_step_metrics {
    int64_t step;
    double loss;               /* reported loss (float value widened) */
    float loss_f32;            /* bits printed in hex */
    double grad_norm, lr, tokens_per_s, step_seconds;
    uint64_t fingerprint;
    int64_t tokens;
    int64_t loss_tokens;       /* targets with a loss: tokens, or fewer when packed
                                  documents end inside the windows (the normaliser) */
    int packed;                /* the plan packs documents (loss_tokens in the metrics) */
    int mtp;                   /* the plan has the MTP head (mtp_loss in the metrics) */
    double mtp_loss;           /* its cross-entropy mean over the positions with an MTP
                                  loss, before the factor (docs/model.md 1.8) */
    /* token dropping (qt_plan_drops: a capacity C >= 1 or C = 0, or the expert hosts'
     * receive buffers): routed assignments of the step's global batch dropped (past their
     * expert's capacity or their host's buffer), their total, and the dropped count per
     * layer (the first QT_METRICS_MAX_LAYERS layers; n_drop_layers of them are reported) */
    int64_t moe_dropped, moe_assignments;
    int32_t n_drop_layers;
    int64_t moe_dropped_layer[QT_METRICS_MAX_LAYERS];
    int64_t mtp_moe_dropped;   /* with the MTP head: its MoE layers' dropped assignments
                                  (not in moe_dropped, whose share counts the main layers) */
    /* z-loss (plans with z_loss_multiplier, issue 33): MaxText's learning/z_loss, the sum of
     * z x lse^2 over the targets with a loss / their count (already inside loss) */
    int has_z;
    double z_loss;
} qt_step_metrics;

/* The record of one held-out evaluation (issue 33; qt_runtime_eval fills it, io/metrics.c
 * writes it as {"step":s,"eval_loss":...}): loss is MaxText's eval/avg_loss, the masked
 * cross entropy summed exactly over the whole pass / the targets counted (loss_f32 widened,
 * as the training loss). */
typedef struct qt_eval_metrics {
    int64_t step;              /* the training step after whose update it ran (0-based) */
    double loss;
    float loss_f32;
    int64_t tokens;            /* targets with a loss over the pass (eval_tokens) */
    int64_t batches;           /* eval batches read (from the eval file's start) */
    double seconds;
    /* mtp_eval_target_module k > 0 (else mtp_accept_k 0 and the rest 0): the acceptance
     * rate of the pass, 100 x matches / positions in double (MaxText's
     * eval/avg_mtp_acceptance_rate_percent up to its per-batch float32 rounding when the
     * batches have equal positions; pooled, so the eval's batch size does not change it);
     * the pass's matches (depth k's prediction at t equal to the main model's at t + k) and
     * positions (depth k has a loss at t) */
    int32_t mtp_accept_k;
    double mtp_accept_rate;
    int64_t mtp_accepted, mtp_accept_positions;
} qt_eval_metrics;

#endif
