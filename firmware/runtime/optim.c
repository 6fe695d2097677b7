/* optim.c - schedule, normalisation, clipping and AdamW (see qt_optim.h).
 *
 * Invariant: every float expression is written with explicit parenthesised order and the
 * build uses -ffp-contract=off, so no FMA or reassociation can change the bits between
 * compilers, -march levels or libcs. The only reduction (sum of squares) is exact.
 */
#include "qt_optim.h"
#include "qt_exact.h"
#include "math/qt_math.h"

#define QT_PI 3.14159265358979323846

double qt_lr_schedule(int64_t t, double peak, int64_t sched_steps, double warmup_frac,
                      double final_frac)
{
    int64_t warm = (int64_t)((double)sched_steps * warmup_frac);
    if (t < 0 || t >= sched_steps) return 0.0;
    if (t < warm) return peak * (double)t / (double)warm;
    double fin = peak * final_frac;
    int64_t s = t - warm, n = sched_steps - warm;
    if (n <= 1) return peak;
    double c = qt_cos(QT_PI * (double)s / (double)(n - 1));
    return fin + (peak - fin) * 0.5 * (1.0 + c);
}

double qt_powi(double b, int64_t n)
{
    double r = 1.0;
    while (n > 0) {
        if (n & 1) r *= b;
        b *= b;
        n >>= 1;
    }
    return r;
}

void qt_adamw_hp_make(qt_adamw_hp *hp, float lr, float b1, float b2, float eps, float wd,
                      int64_t t)
{
    hp->lr = lr;
    hp->b1 = b1;
    hp->b2 = b2;
    hp->eps = eps;
    hp->wd = wd;
    hp->bc1 = 1.0 - qt_powi((double)b1, t + 1);
    hp->bc2 = 1.0 - qt_powi((double)b2, t + 1);
}

void qt_grads_normalise(float *g, int64_t n, float n_tokens)
{
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / n_tokens;
}

float qt_grads_clip(float *g, int64_t n, double norm, double clip)
{
    if (!(clip > 0.0) || !(norm > clip)) return 1.0f;
    float s = (float)(clip / norm);
    for (int64_t i = 0; i < n; i++) g[i] = g[i] * s;
    return s;
}

double qt_grads_sumsq(const float *g, int64_t n)
{
    qt_exact acc;
    qt_exact_clear(&acc);
    for (int64_t i = 0; i < n; i++) qt_exact_add_prod(&acc, g[i], g[i]);
    return qt_exact_value(&acc);
}

void qt_adamw_update(float *p, float *m, float *v, const float *g, int64_t n,
                     const qt_adamw_hp *hp)
{
    const float b1 = hp->b1, b2 = hp->b2, c1 = 1.0f - hp->b1, c2 = 1.0f - hp->b2;
    const float bc1 = (float)hp->bc1, bc2 = (float)hp->bc2;
    const float lr = hp->lr, eps = hp->eps, wd = hp->wd;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = (b1 * m[i]) + (c1 * gi);
        float vi = (b2 * v[i]) + (c2 * (gi * gi));
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float upd = (mhat / (qt_sqrtf(vhat) + eps)) + (wd * p[i]);
        p[i] = p[i] - (lr * upd);
    }
}
