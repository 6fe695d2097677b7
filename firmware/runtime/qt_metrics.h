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
} qt_step_metrics;

#endif
