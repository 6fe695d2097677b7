/* metrics.c - per-step metrics as JSON lines and the human progress line (qt_io.h).
 *
 * Why the formats: %.9g round-trips a float and %.17g a double, so a metrics file can be
 * compared bit for bit; the loss bits and the parameter fingerprint are also printed in
 * hex so comparisons do not depend on decimal formatting. JSON has no NaN/Inf: such
 * values are written as null (the hex loss bits still show what happened).
 * Invariant: one complete line per call, flushed, so a killed run leaves whole lines.
 */
#include <stdio.h>
#include <string.h>

#include "qt_io.h"

/* Finite test on the bits: no libm on any firmware path. */
static int qt_finite(double x)
{
    uint64_t b;
    memcpy(&b, &x, 8);
    return ((b >> 52) & 0x7ffu) != 0x7ffu;
}

static void qt_num(FILE *f, const char *key, double v, int digits)
{
    if (qt_finite(v))
        fprintf(f, ",\"%s\":%.*g", key, digits, v);
    else
        fprintf(f, ",\"%s\":null", key);
}

void qt_metrics_write(FILE *f, const qt_step_metrics *m)
{
    uint32_t lb;
    memcpy(&lb, &m->loss_f32, 4);
    fprintf(f, "{\"step\":%lld", (long long)m->step);
    qt_num(f, "loss", m->loss, 9);
    fprintf(f, ",\"loss_bits\":\"0x%08x\"", (unsigned)lb);
    qt_num(f, "grad_norm", m->grad_norm, 17);
    qt_num(f, "lr", m->lr, 17);
    qt_num(f, "tokens_per_s", m->tokens_per_s, 9);
    qt_num(f, "step_s", m->step_seconds, 9);
    fprintf(f, ",\"tokens\":%lld,\"fingerprint\":\"0x%016llx\"}\n", (long long)m->tokens,
            (unsigned long long)m->fingerprint);
    fflush(f);
}

void qt_progress_print(FILE *f, const qt_step_metrics *m, int64_t total_steps)
{
    fprintf(f, "step %lld/%lld  loss %.6f  grad_norm %.4g  lr %.3e  %.0f tokens/s\n",
            (long long)(m->step + 1), (long long)total_steps, m->loss, m->grad_norm, m->lr,
            qt_finite(m->tokens_per_s) ? m->tokens_per_s : 0.0);
    fflush(f);
}
