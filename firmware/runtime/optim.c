/* optim.c - schedule, normalisation, clipping and AdamW (see qt_optim.h).
 *
 * Invariant: every float expression is written with explicit parenthesised order and the
 * build uses -ffp-contract=off, so no FMA or reassociation can change the bits between
 * compilers, -march levels or libcs. The only reduction (sum of squares) is exact. The
 * AVX-512 loops (AdamW, fingerprint terms) do per lane exactly the scalar reference's IEEE
 * float or mod-2^64 integer operations, so both paths give the same bits; the scalar
 * references stay public for the tests and for CPUs without AVX-512 (and the fingerprint's
 * scalar loop is the faster one on CPUs with slow 64-bit vector multiplies: qt_fp_use_vector).
 * The step's fused passes (qt_grads_normalise_sumsq, qt_adamw_update_fp) stream each array
 * once: the same per-element operations, one loop, software prefetch ahead of the loads
 * (their loops are long for the bytes they move, so without it memory idles while they
 * compute).
 */
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "qt_optim.h"
#include "qt_exact.h"
#include "qt_vec.h"
#include "math/qt_math.h"

static struct {
    qt_exact_sq sq;  /* bins of qt_grads_sumsq (8 KiB: kept off the stack) */
    int fp_vector;   /* qt_fp_mix's vector path: -1 not decided yet, 0 no, 1 yes */
} qt_optim_state = {.fp_vector = -1};

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

double qt_lr_schedule_wsd(int64_t t, double peak, int64_t sched_steps, int64_t warm,
                          int64_t decay, double final_frac, int cosine)
{
    if (t < 0 || t >= sched_steps) return 0.0;
    if (t < warm) return peak * (double)t / (double)warm;
    const int64_t u = t - (sched_steps - decay);   /* step inside the decay, < 0: stable */
    if (u < 0 || decay <= 1) return peak;
    const double fin = peak * final_frac, x = (double)u / (double)(decay - 1);
    if (cosine) return fin + (peak - fin) * 0.5 * (1.0 + qt_cos(QT_PI * x));
    return (peak - fin) * (1.0 - x) + fin;   /* optax linear_schedule's expression */
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
    qt_adamw_hp_divide(hp, 0.0f);
}

void qt_adamw_hp_divide(qt_adamw_hp *hp, float n_tokens)
{
    hp->gdiv = n_tokens;
    hp->ginv = n_tokens != 0.0f && qt_exact_div_inverse(n_tokens, &hp->gmul);
    if (!hp->ginv) hp->gmul = n_tokens;
}

void qt_grads_normalise(float *g, int64_t n, float n_tokens)
{
    qt_vec_div_scalar(g, n, n_tokens);
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
    qt_exact_sq_clear(&qt_optim_state.sq);
    qt_exact_sq_add(&qt_optim_state.sq, &acc, g, n);
    qt_exact_sq_flush(&qt_optim_state.sq, &acc);
    return qt_exact_value(&acc);
}

double qt_grads_sumsq_ref(const float *g, int64_t n)
{
    qt_exact acc;
    qt_exact_clear(&acc);
    for (int64_t i = 0; i < n; i++) qt_exact_add_prod(&acc, g[i], g[i]);
    return qt_exact_value(&acc);
}

void qt_grads_normalise_sumsq(float *g, int64_t n, float n_tokens, qt_exact_sq *q,
                              qt_exact *acc)
{
    qt_exact_sq_add_div(q, acc, g, n, n_tokens);
}

void qt_grads_sumsq_quot(const float *g, int64_t n, float n_tokens, qt_exact_sq *q,
                         qt_exact *acc)
{
    qt_exact_sq_add_quot(q, acc, g, n, n_tokens);
}

void qt_adamw_update(float *p, float *m, float *v, const float *g, int64_t n,
                     const qt_adamw_hp *hp)
{
    qt_adamw_update_scaled(p, m, v, g, n, hp, 1.0f, 0);
}

void qt_adamw_update_ref(float *p, float *m, float *v, const float *g, int64_t n,
                         const qt_adamw_hp *hp, float gscale, int scaled)
{
    const float b1 = hp->b1, b2 = hp->b2, c1 = 1.0f - hp->b1, c2 = 1.0f - hp->b2;
    const float bc1 = (float)hp->bc1, bc2 = (float)hp->bc2;
    const float lr = hp->lr, eps = hp->eps, wd = hp->wd;
    const int div = hp->gdiv != 0.0f, inv = hp->ginv;
    const float gd = hp->gmul;
    for (int64_t i = 0; i < n; i++) {
        float gi = !div ? g[i] : inv ? g[i] * gd : g[i] / gd;
        gi = scaled ? gi * gscale : gi;
        float mi = (b1 * m[i]) + (c1 * gi);
        float vi = (b2 * v[i]) + (c2 * (gi * gi));
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float upd = (mhat / (qt_sqrtf(vhat) + eps)) + (wd * p[i]);
        p[i] = p[i] - (lr * upd);
    }
}

#if defined(__AVX512F__)
/* One 16-lane step of qt_adamw_update_scaled on elements i..i+15 (the constants are
 * hoisted when inlined into a loop); returns the updated p. */
static inline __m512 qt_adamw_v16(float *p, float *m, float *v, const float *g, int64_t i,
                                  const qt_adamw_hp *hp, float gscale, int scaled)
{
    const __m512 b1 = _mm512_set1_ps(hp->b1), b2 = _mm512_set1_ps(hp->b2);
    const __m512 c1 = _mm512_set1_ps(1.0f - hp->b1), c2 = _mm512_set1_ps(1.0f - hp->b2);
    const __m512 bc1 = _mm512_set1_ps((float)hp->bc1), bc2 = _mm512_set1_ps((float)hp->bc2);
    const __m512 lr = _mm512_set1_ps(hp->lr), eps = _mm512_set1_ps(hp->eps);
    const __m512 wd = _mm512_set1_ps(hp->wd);
    __m512 gi = _mm512_loadu_ps(g + i);
    if (hp->gdiv != 0.0f)  /* the normalisation left to the update: its quotient */
        gi = hp->ginv ? _mm512_mul_ps(gi, _mm512_set1_ps(hp->gmul))
                      : _mm512_div_ps(gi, _mm512_set1_ps(hp->gmul));
    if (scaled) gi = _mm512_mul_ps(gi, _mm512_set1_ps(gscale));
    __m512 pi = _mm512_loadu_ps(p + i);
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(c1, gi));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)),
                              _mm512_mul_ps(c2, _mm512_mul_ps(gi, gi)));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    __m512 mhat = _mm512_div_ps(mi, bc1), vhat = _mm512_div_ps(vi, bc2);
    __m512 den = _mm512_add_ps(_mm512_sqrt_ps(vhat), eps);
    __m512 upd = _mm512_add_ps(_mm512_div_ps(mhat, den), _mm512_mul_ps(wd, pi));
    __m512 pn = _mm512_sub_ps(pi, _mm512_mul_ps(lr, upd));
    _mm512_storeu_ps(p + i, pn);
    return pn;
}
#endif

void qt_adamw_update_scaled(float *p, float *m, float *v, const float *g, int64_t n,
                            const qt_adamw_hp *hp, float gscale, int scaled)
{
    int64_t i = 0;
#if defined(__AVX512F__)
    /* Lane-wise the same IEEE operations in the same order as the scalar loop (separate
     * mul/add, no FMA; vsqrtps is correctly rounded like qt_sqrtf, and v >= 0 or NaN), so
     * the bits equal qt_adamw_update_ref's; tested against it. */
    const qt_adamw_hp h = *hp;  /* a local copy: the stores cannot alias it (constants hoisted) */
    for (; i + 16 <= n; i += 16) qt_adamw_v16(p, m, v, g, i, &h, gscale, scaled);
#endif
    qt_adamw_update_ref(p + i, m + i, v + i, g + i, n - i, hp, gscale, scaled);
}

#if defined(__AVX512F__) && !defined(__AVX512DQ__)
/* The fingerprint term of one element (qt_fp_mix_ref's loop body) given gidx * QT_FP_K (the
 * fused update's lanes without AVX512DQ's 64-bit multiply). */
static inline uint64_t qt_fp_term(uint32_t bits, uint64_t gk)
{
    uint64_t x = (gk ^ (uint64_t)bits) + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
#endif

#if defined(__AVX512F__) && defined(__AVX512DQ__)
/* qt_fp_term on 8 lanes (bits zero-extended, gk = gidx * K per lane). */
static inline __m512i qt_fp_terms8(__m512i bits, __m512i gk)
{
    __m512i x = _mm512_add_epi64(_mm512_xor_si512(gk, bits),
                                 _mm512_set1_epi64((long long)0x9E3779B97F4A7C15ull));
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)),
                           _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ull));
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)),
                           _mm512_set1_epi64((long long)0x94D049BB133111EBull));
    return _mm512_xor_si512(x, _mm512_srli_epi64(x, 31));
}
#endif

/* Floats ahead of the fused update's loads (each of its four streams): the loop is long
 * (three divisions and a square root per vector) for the memory it moves. */
#define QT_ADAMW_PREFETCH 512

uint64_t qt_adamw_update_fp(float *p, float *m, float *v, const float *g, int64_t n,
                            const qt_adamw_hp *hp, float gscale, int scaled, uint64_t gidx0,
                            qt_bf16 *cc)
{
    uint64_t fp = 0;
    int64_t i = 0;
#if defined(__AVX512F__)
    /* Per 16 elements: the vector update, then the 16 fingerprint terms in scalar integer
     * code on the freshly stored p (other ports than the divisions: they overlap). The
     * index products gidx * K advance by K mod 2^64 (the same values as the product). */
    uint64_t gk = (gidx0 * 0x9E3779B97F4A7C15ull);
    const uint64_t k = 0x9E3779B97F4A7C15ull;
#if defined(__AVX512DQ__)
    __m512i acc = _mm512_setzero_si512();
    __m512i gkv = _mm512_set1_epi64((long long)gk);
    gkv = _mm512_add_epi64(gkv, _mm512_mullo_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0),
                                                   _mm512_set1_epi64((long long)k)));
    const __m512i k8 = _mm512_set1_epi64((long long)(8 * k));
#endif
    /* a local copy of the constants: the float stores below cannot alias it, so they are
     * broadcast once, not reloaded (and bc1 / bc2 converted) every iteration */
    const qt_adamw_hp h = *hp;
    for (; i + 16 <= n; i += 16) {
        if (i + QT_ADAMW_PREFETCH < n) {
            _mm_prefetch((const char *)(g + i + QT_ADAMW_PREFETCH), _MM_HINT_T0);
            _mm_prefetch((const char *)(p + i + QT_ADAMW_PREFETCH), _MM_HINT_T0);
            _mm_prefetch((const char *)(m + i + QT_ADAMW_PREFETCH), _MM_HINT_T0);
            _mm_prefetch((const char *)(v + i + QT_ADAMW_PREFETCH), _MM_HINT_T0);
        }
        const __m512 pn = qt_adamw_v16(p, m, v, g, i, &h, gscale, scaled);
#if defined(__AVX512BW__)
        if (cc) qt_bf16_store16(cc + i, pn); /* bf16.h: VCVTNEPS2BF16 where built */
#else
        if (cc)
            for (int l = 0; l < 16; l++) cc[i + l] = qt_bf16_from_f32(p[i + l]);
#endif
#if defined(__AVX512DQ__)
        const __m512i b = _mm512_castps_si512(pn);
        acc = _mm512_add_epi64(acc, qt_fp_terms8(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(b)), gkv));
        gkv = _mm512_add_epi64(gkv, k8);
        acc = _mm512_add_epi64(acc, qt_fp_terms8(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(b, 1)), gkv));
        gkv = _mm512_add_epi64(gkv, k8);
#else
        uint32_t bits[16];
        _mm512_storeu_si512((void *)bits, _mm512_castps_si512(pn));
        for (int l = 0; l < 16; l++, gk += k) fp += qt_fp_term(bits[l], gk);
#endif
    }
#if defined(__AVX512DQ__)
    uint64_t lanes[8];
    _mm512_storeu_si512((void *)lanes, acc);
    for (int l = 0; l < 8; l++) fp += lanes[l];
#endif
#endif
    qt_adamw_update_scaled(p + i, m + i, v + i, g + i, n - i, hp, gscale, scaled);
    /* the tail through bf16.h's inline rounding (not qt_bf16_from_f32_n: this file links
     * into builds without the kernels, the fuzz targets') */
    if (cc)
        for (int64_t j = i; j < n; j++) cc[j] = qt_bf16_from_f32(p[j]);
    return fp + qt_fp_mix_ref(p + i, n - i, gidx0 + (uint64_t)i);
}

#define QT_FP_K 0x9E3779B97F4A7C15ull

uint64_t qt_fp_mix_ref(const float *w, int64_t n, uint64_t gidx0)
{
    uint64_t sum = 0;
    for (int64_t j = 0; j < n; j++) {
        uint32_t bits;
        memcpy(&bits, &w[j], sizeof bits);
        uint64_t x = (((gidx0 + (uint64_t)j) * QT_FP_K) ^ (uint64_t)bits) + 0x9E3779B97F4A7C15ull;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        sum += x ^ (x >> 31);
    }
    return sum;
}

/* Whether the vector path of qt_fp_mix pays: it rests on vpmullq (64-bit lane multiplies),
 * fast on AMD Zen (where it was measured faster than the scalar loop) but not on the Xeon
 * VMs here: 2.9 ns per element against 0.76 for the scalar loop, whose three 64-bit imuls
 * per element are its bound (2026-12-01, docs/bench.md). Both give the same sum, so the
 * choice moves time only. */
static int qt_fp_use_vector(void)
{
    if (qt_optim_state.fp_vector < 0) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
        __builtin_cpu_init();
        qt_optim_state.fp_vector = __builtin_cpu_is("amd") ? 1 : 0;
#else
        qt_optim_state.fp_vector = 0;
#endif
    }
    return qt_optim_state.fp_vector;
}

uint64_t qt_fp_mix(const float *w, int64_t n, uint64_t gidx0)
{
    return qt_fp_use_vector() ? qt_fp_mix_vector(w, n, gidx0) : qt_fp_mix_ref(w, n, gidx0);
}

uint64_t qt_fp_mix_vector(const float *w, int64_t n, uint64_t gidx0)
{
    int64_t j = 0;
    uint64_t sum = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    /* integer arithmetic mod 2^64 lane by lane: identical to the scalar sum */
    const __m512i k = _mm512_set1_epi64((long long)QT_FP_K);
    const __m512i c0 = _mm512_set1_epi64((long long)0x9E3779B97F4A7C15ull);
    const __m512i c1 = _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ull);
    const __m512i c2 = _mm512_set1_epi64((long long)0x94D049BB133111EBull);
    const __m512i step = _mm512_set1_epi64(8);
    __m512i idx = _mm512_add_epi64(_mm512_set1_epi64((long long)gidx0),
                                   _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
    __m512i acc = _mm512_setzero_si512();
    for (; j + 8 <= n; j += 8) {
        __m512i b = _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(const void *)(w + j)));
        __m512i x = _mm512_add_epi64(_mm512_xor_si512(_mm512_mullo_epi64(idx, k), b), c0);
        x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)), c1);
        x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)), c2);
        acc = _mm512_add_epi64(acc, _mm512_xor_si512(x, _mm512_srli_epi64(x, 31)));
        idx = _mm512_add_epi64(idx, step);
    }
    /* Lanes summed as uint64_t (mod 2^64, any order gives the same bits). Not with
     * _mm512_reduce_add_epi64: gcc's header adds them as signed long long vectors, and the
     * wrap-around of this hash sum is then signed overflow (undefined; UBSan reports it). */
    uint64_t lanes[8];
    _mm512_storeu_si512((void *)lanes, acc);
    for (int l = 0; l < 8; l++) sum += lanes[l];
#endif
    return sum + qt_fp_mix_ref(w + j, n - j, gidx0 + (uint64_t)j);
}
