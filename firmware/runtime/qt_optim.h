/* qt_optim.h - learning-rate schedule, gradient normalisation/clipping and AdamW.
 *
 * Semantics follow docs/model.md section 4 and tests/golden/SPEC.md. The schedule and the
 * bias corrections are computed in double with the project's own math (qt_cos), the
 * element updates in float, in the fixed expression order documented per function, so the
 * bits depend only on the inputs.
 */
#ifndef QT_OPTIM_H
#define QT_OPTIM_H

#include <stdint.h>
#include "qt_exact.h"
#include "kernels/bf16.h"

typedef struct qt_adamw_hp {
    float lr;            /* this step's learning rate (already scheduled) */
    float b1, b2, eps, wd;
    double bc1, bc2;     /* 1 - b1^(t+1), 1 - b2^(t+1) */
    float gdiv;          /* 0: g is the normalised gradient; else g is still to be divided
                          * by gdiv (the step's token count: the normalisation left to the
                          * update by qt_grads_sumsq_quot), as qt_exact_div_inverse says:
                          * g * gmul when ginv, else g / gdiv - the quotients the
                          * normalising pass would have stored */
    float gmul;
    int ginv;
} qt_adamw_hp;

/* Warmup + cosine schedule at 0-based step t: warm = (int64)(sched_steps * warmup_frac);
 * t < warm: peak*t/warm; t < sched_steps: final + (peak-final)*0.5*(1+cos(pi*s/(n-1))),
 * s = t-warm, n = sched_steps-warm (peak when n <= 1), final = peak*final_frac; else 0. */
double qt_lr_schedule(int64_t t, double peak, int64_t sched_steps, double warmup_frac,
                      double final_frac);
/* MaxText's WSD schedule (lr_schedule_type wsd) at 0-based step t, L = sched_steps, the
 * integer lengths warm = int(L x warmup_steps_fraction) and decay = int(L x
 * wsd_decay_steps_fraction) (warm + decay <= L): t < warm: peak*t/warm (0 at t = 0); then
 * peak until the decay's first step L - decay; decay step u = t - (L - decay), x =
 * u/(decay-1): linear (peak-final)*(1-x)+final, or cosine final+(peak-final)*0.5*(1+cos(pi
 * x)), final = peak*final_frac (peak when decay <= 1: optax's zero-step transition); 0 for
 * t >= L. */
double qt_lr_schedule_wsd(int64_t t, double peak, int64_t sched_steps, int64_t warm,
                          int64_t decay, double final_frac, int cosine);

/* b^n in double by binary exponentiation (fixed operation order). */
double qt_powi(double b, int64_t n);

/* Fills hp for 0-based step t (bias corrections with count t+1); gdiv 0 (g normalised). */
void qt_adamw_hp_make(qt_adamw_hp *hp, float lr, float b1, float b2, float eps, float wd,
                      int64_t t);
/* Leaves the normalisation to the update: every g[i] is read as the quotient g[i] /
 * n_tokens of qt_grads_normalise_sumsq (the same operation, so the same bits) before the
 * clip scale; n_tokens 0 turns it off. */
void qt_adamw_hp_divide(qt_adamw_hp *hp, float n_tokens);

/* g[i] = g[i] / n_tokens (float division) for i < n. Writes g. */
void qt_grads_normalise(float *g, int64_t n, float n_tokens);

/* qt_grads_normalise and the exact squares of the results (qt_exact_sq_add into q and acc;
 * the caller clears and flushes q) in one pass over g. Writes g. */
void qt_grads_normalise_sumsq(float *g, int64_t n, float n_tokens, qt_exact_sq *q,
                              qt_exact *acc);
/* The exact squares of the same quotients g[i] / n_tokens (the same value in acc), g not
 * written: the norm pass when the update divides (qt_adamw_hp_divide). Reads g. */
void qt_grads_sumsq_quot(const float *g, int64_t n, float n_tokens, qt_exact_sq *q,
                         qt_exact *acc);

/* Global-norm clipping: if clip > 0 and norm > clip, g[i] = g[i] * (float)(clip/norm).
 * Returns the float scale used (1 when not clipped). Writes g. */
float qt_grads_clip(float *g, int64_t n, double norm, double clip);

/* Exact sum of g[i]^2 over i < n converted to double (order-independent). Reads g.
 * Uses exponent bins (qt_exact_sq); qt_grads_sumsq_ref deposits element by element and
 * must give the same bits (it is the reference for tests). */
double qt_grads_sumsq(const float *g, int64_t n);
double qt_grads_sumsq_ref(const float *g, int64_t n);

/* AdamW on n elements. Reads g; writes p, m, v:
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*(g*g);
 *   mhat = m / (float)bc1;  vhat = v / (float)bc2;
 *   p = p - lr * (mhat / (sqrt(vhat) + eps) + wd * p)      (all float, left to right). */
void qt_adamw_update(float *p, float *m, float *v, const float *g, int64_t n,
                     const qt_adamw_hp *hp);
/* The same with clipping folded in: when `scaled`, every g[i] is replaced by the float
 * product g[i] * gscale before use (bit-identical to scaling g first; g is not written);
 * with hp->gdiv set, g[i] is first divided (qt_adamw_hp_divide), again without writing g.
 * Vectorised where the CPU allows; qt_adamw_update_ref is the scalar reference and gives
 * identical bits. */
void qt_adamw_update_scaled(float *p, float *m, float *v, const float *g, int64_t n,
                            const qt_adamw_hp *hp, float gscale, int scaled);
void qt_adamw_update_ref(float *p, float *m, float *v, const float *g, int64_t n,
                         const qt_adamw_hp *hp, float gscale, int scaled);

/* qt_adamw_update_scaled followed by the fingerprint terms (qt_fp_mix) of the updated p,
 * whose global indices are gidx0, gidx0+1, ...; returns their sum. When cc is not NULL it
 * also writes cc[i] = qt_bf16_from_f32(p[i]) of every updated element (a bf16 plan's
 * compute copy). Same bits as the two or three calls one after the other, in one pass. */
uint64_t qt_adamw_update_fp(float *p, float *m, float *v, const float *g, int64_t n,
                            const qt_adamw_hp *hp, float gscale, int scaled, uint64_t gidx0,
                            qt_bf16 *cc);

/* Fingerprint terms of n consecutive elements whose global indices are gidx0, gidx0+1, ...:
 * sum mod 2^64 of qt_mix64((gidx * 0x9E3779B97F4A7C15) ^ bits(w[j])). Reads w. qt_fp_mix takes
 * the faster form on this CPU, qt_fp_mix_ref is the scalar reference (identical result). */
uint64_t qt_fp_mix(const float *w, int64_t n, uint64_t gidx0);
/* The AVX-512 form (the scalar loop when not built with AVX-512DQ); qt_fp_mix takes it only
 * where 64-bit vector multiplies are fast (optim.c: qt_fp_use_vector). Same result. */
uint64_t qt_fp_mix_vector(const float *w, int64_t n, uint64_t gidx0);
uint64_t qt_fp_mix_ref(const float *w, int64_t n, uint64_t gidx0);

#endif
