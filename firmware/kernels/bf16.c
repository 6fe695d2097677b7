/* bf16.c - the bf16 bit contract's three paths (contract: bf16.h): the scalar reference of
 * the VDPBF16PS step, its AVX2+FMA emulation (FMA under MXCSR.FTZ|DAZ plus an explicit NaN
 * selection), the AVX512_BF16 instruction, the conversions and the start-up check.
 * Invariants: no heap; MXCSR is restored before every return of the emulation; the edge
 * table of the check lives in one static buffer and is rebuilt on each call (cheap).
 * Float build only (empty under -DQT_REAL_DOUBLE).
 */
#ifndef QT_REAL_DOUBLE
#include "bf16.h"
#include <stdio.h>
#include "qt_err.h"

#ifndef __FMA__
#error "qtrain's bf16 reference needs the FMA instruction: build with ARCH=-march=x86-64-v3 or newer"
#endif

#if defined(__AVX2__) && defined(__FMA__)
#define QT_BF16_HAVE_EMUL 1
#include <immintrin.h>
#endif
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define QT_BF16_HAVE_INSN 1
#include <cpuid.h>
#endif

#define QT_F32_MIN_BITS 0x00800000u
#define QT_F32_DEFAULT_NAN 0xffc00000u

static float qt_bf16_daz(float x)
{
    const uint32_t u = qt_bf16_bits_f32(x);
    return (u & 0x7f800000u) == 0 ? qt_bf16_f32_bits(u & 0x80000000u) : x;
}

static int qt_bf16_isnan(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

float qt_bf16_fma_ref(float a, float b, float c)
{
    a = qt_bf16_daz(a), b = qt_bf16_daz(b), c = qt_bf16_daz(c);
    const uint32_t ua = qt_bf16_bits_f32(a), ub = qt_bf16_bits_f32(b), uc = qt_bf16_bits_f32(c);
    if (qt_bf16_isnan(ua)) return qt_bf16_f32_bits(ua | 0x00400000u);
    if (qt_bf16_isnan(ub)) return qt_bf16_f32_bits(ub | 0x00400000u);
    if (qt_bf16_isnan(uc)) return qt_bf16_f32_bits(uc | 0x00400000u);
    const float r = __builtin_fmaf(a, b, c);
    const uint32_t ur = qt_bf16_bits_f32(r), mag = ur & 0x7fffffffu;
    if (mag > 0x7f800000u) return qt_bf16_f32_bits(QT_F32_DEFAULT_NAN); /* inf*0, inf-inf */
    if (mag < QT_F32_MIN_BITS) return qt_bf16_f32_bits(ur & 0x80000000u);
    if (mag == QT_F32_MIN_BITS) {
        /* IEEE's gradual underflow rounded the exact value to FLT_MIN; x86 decides tininess
         * on the value rounded to 24 bits with an unbounded exponent. Scaling a and c by
         * 2^64 (exact: a result this small bounds |a| < 2^41 and |c| < 2^-85) moves the
         * exact value into the normal range, where fmaf rounds it with 24 bits. */
        const float r2 = __builtin_fmaf(a * 0x1p64f, b, c * 0x1p64f);
        if ((qt_bf16_bits_f32(r2) & 0x7fffffffu) < qt_bf16_bits_f32(0x1p-62f))
            return qt_bf16_f32_bits(ur & 0x80000000u);
    }
    return r;
}

void qt_bf16_dp_ref(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float c = acc[i];
        c = qt_bf16_fma_ref(qt_f32_from_bf16(a[2 * i + 1]), qt_f32_from_bf16(b[2 * i + 1]), c);
        c = qt_bf16_fma_ref(qt_f32_from_bf16(a[2 * i]), qt_f32_from_bf16(b[2 * i]), c);
        acc[i] = c;
    }
}

/* Sixteen lanes at a time where the build has AVX-512BW (bf16.h's qt_bf16_store16, the same
 * bits lane by lane), the rest one by one. */
void qt_bf16_from_f32_n(qt_bf16 *dst, const float *src, int64_t n)
{
    int64_t i = 0;
#ifdef QT_BF16_HAVE_V16
    for (; i + 16 <= n; i += 16) qt_bf16_store16(dst + i, _mm512_loadu_ps(src + i));
#endif
    for (; i < n; i++) dst[i] = qt_bf16_from_f32(src[i]);
}

void qt_bf16_copy_n_ref(qt_bf16 *dst, const qt_bf16 *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = qt_bf16_from_f32(qt_f32_from_bf16(src[i]));
}

void qt_bf16_copy_n(qt_bf16 *dst, const qt_bf16 *src, int64_t n)
{
    int64_t i = 0;
#ifdef QT_BF16_HAVE_V16
    for (; i + 16 <= n; i += 16) qt_bf16_store16(dst + i, qt_bf16_widen16(src + i));
#endif
    qt_bf16_copy_n_ref(dst + i, src + i, n - i);
}

void qt_f32_from_bf16_n(float *dst, const qt_bf16 *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = qt_f32_from_bf16(src[i]);
}

/* Sixteen lanes at a time where the build has AVX-512BW (the same add and rounding per
 * lane, bf16.h's qt_bf16_round16: gcc's vectorisation of the scalar rounding is about three
 * times the instructions), the rest one by one. y may be a or b (each lane reads before
 * it writes). */
void qt_bf16_add_n(qt_bf16 *y, const qt_bf16 *a, const qt_bf16 *b, int64_t n)
{
    int64_t i = 0;
#ifdef QT_BF16_HAVE_V16
    for (; i + 16 <= n; i += 16)
        qt_bf16_store16(y + i, _mm512_add_ps(qt_bf16_widen16(a + i), qt_bf16_widen16(b + i)));
#endif
    for (; i < n; i++) y[i] = qt_bf16_from_f32(qt_f32_from_bf16(a[i]) + qt_f32_from_bf16(b[i]));
}

void qt_bf16_acc_n(qt_bf16 *dst, const qt_bf16 *src, int64_t n)
{
    qt_bf16_add_n(dst, dst, src, n);
}

void qt_bf16_acc_f32_n(qt_bf16 *dst, const float *src, int64_t n)
{
    int64_t i = 0;
#ifdef QT_BF16_HAVE_V16
    for (; i + 16 <= n; i += 16)
        qt_bf16_store16(dst + i, _mm512_add_ps(qt_bf16_widen16(dst + i), _mm512_loadu_ps(src + i)));
#endif
    for (; i < n; i++) dst[i] = qt_bf16_from_f32(qt_f32_from_bf16(dst[i]) + src[i]);
}

/* ------------------------------------------------------------------ AVX2 emulation */
#ifdef QT_BF16_HAVE_EMUL
/* One step on 8 lanes; the caller has set MXCSR.FTZ|DAZ. The FMA gives DAZ, RNE, FTZ and
 * the default NaN; which input NaN an FMA returns depends on the operand order the
 * compiler encodes, so NaN inputs are selected explicitly (a, then b, then c), quieted. */
static inline __m256 qt_bf16_step8(__m256 a, __m256 b, __m256 c)
{
    const __m256 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000));
    __m256 r = _mm256_fmadd_ps(a, b, c);
    r = _mm256_blendv_ps(r, _mm256_or_ps(c, quiet), _mm256_cmp_ps(c, c, _CMP_UNORD_Q));
    r = _mm256_blendv_ps(r, _mm256_or_ps(b, quiet), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
    r = _mm256_blendv_ps(r, _mm256_or_ps(a, quiet), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    return r;
}

/* One group of eight lanes: acc[0..8) += the pairs a[0..16), b[0..16) in two steps (the
 * high then the low half of each pair, VDPBF16PS's order). */
static inline void qt_bf16_dp_emul8(float *acc, const qt_bf16 *a, const qt_bf16 *b)
{
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i va = _mm256_loadu_si256((const __m256i *)a);
    const __m256i vb = _mm256_loadu_si256((const __m256i *)b);
    __m256 c = _mm256_loadu_ps(acc);
    c = qt_bf16_step8(_mm256_castsi256_ps(_mm256_and_si256(va, hi)),
                      _mm256_castsi256_ps(_mm256_and_si256(vb, hi)), c);
    c = qt_bf16_step8(_mm256_castsi256_ps(_mm256_slli_epi32(va, 16)),
                      _mm256_castsi256_ps(_mm256_slli_epi32(vb, 16)), c);
    _mm256_storeu_ps(acc, c);
}

/* Not inlined into qt_bf16_dp_emul, so that no float operation moves across its MXCSR
 * writes. */
__attribute__((noinline)) static void qt_bf16_dp_emul_core(float *acc, const qt_bf16 *a,
                                                           const qt_bf16 *b, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) qt_bf16_dp_emul8(acc + i, a + 2 * i, b + 2 * i);
    if (i < n) { /* the tail through a zero-padded lane group */
        qt_bf16 ta[16] = {0}, tb[16] = {0};
        float tc[8] = {0};
        for (int64_t j = 0; j < n - i; j++) {
            ta[2 * j] = a[2 * (i + j)], ta[2 * j + 1] = a[2 * (i + j) + 1];
            tb[2 * j] = b[2 * (i + j)], tb[2 * j + 1] = b[2 * (i + j) + 1];
            tc[j] = acc[i + j];
        }
        qt_bf16_dp_emul8(tc, ta, tb);
        for (int64_t j = 0; j < n - i; j++) acc[i + j] = tc[j];
    }
}

int qt_bf16_dp_emul(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(QT_BF16_EMUL_CSR(csr)); /* FTZ | DAZ, round to nearest */
    qt_bf16_dp_emul_core(acc, a, b, n);
    _mm_setcsr(csr);
    return 0;
}
#else
int qt_bf16_dp_emul(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n)
{
    (void)acc, (void)a, (void)b, (void)n;
    return -1;
}
#endif

/* ------------------------------------------------------------------ the instruction */
#ifdef QT_BF16_HAVE_INSN
int qt_bf16_dp_insn(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n)
{
    int64_t i = 0;
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        const __m512i va = _mm512_maskz_loadu_epi32(m, a + 2 * i);
        const __m512i vb = _mm512_maskz_loadu_epi32(m, b + 2 * i);
        const __m512 c = _mm512_maskz_loadu_ps(m, acc + i);
        _mm512_mask_storeu_ps(acc + i, m, _mm512_dpbf16_ps(c, (__m512bh)va, (__m512bh)vb));
    }
    return 0;
}

int qt_bf16_from_f32_insn(qt_bf16 *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)h);
    }
    return 0;
}
#else
int qt_bf16_dp_insn(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n)
{
    (void)acc, (void)a, (void)b, (void)n;
    return -1;
}

int qt_bf16_from_f32_insn(qt_bf16 *dst, const float *src, int64_t n)
{
    (void)dst, (void)src, (void)n;
    return -1;
}
#endif

int qt_bf16_path(void)
{
#if defined(QT_BF16_HAVE_INSN)
    return QT_BF16_PATH_INSN;
#elif defined(QT_BF16_HAVE_EMUL)
    return QT_BF16_PATH_EMUL;
#else
    return QT_BF16_PATH_REF;
#endif
}

void qt_bf16_dp(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n)
{
#if defined(QT_BF16_HAVE_INSN)
    qt_bf16_dp_insn(acc, a, b, n);
#elif defined(QT_BF16_HAVE_EMUL)
    qt_bf16_dp_emul(acc, a, b, n);
#else
    qt_bf16_dp_ref(acc, a, b, n);
#endif
}

/* ------------------------------------------------------------------ start-up check */
/* bf16 operands of the edge table: zeros, ones, denormals, the smallest normal, values
 * whose products land at the tininess boundary with acc = +-FLT_MIN (2^-75 times
 * 1.5 * 2^-76, 2^-76, 1.0078125 * 2^-76), large values for overflow, infinities, NaNs. */
static const qt_bf16 qt_bf16_edge_v[] = {
    0x0000, 0x8000, 0x3f80, 0xbf80, 0x0001, 0x8040, 0x0080, 0x8080, 0x1a00, 0x19c0,
    0x9980, 0x9981, 0x99c0, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc1, 0xffa3, 0x4000, 0x3f81,
};
/* accumulators: zeros, +-FLT_MIN, a denormal, 1, FLT_MAX, infinities, NaNs */
static const uint32_t qt_bf16_edge_c[] = {
    0x00000000u, 0x80000000u, 0x00800000u, 0x80800000u, 0x00400000u, 0x80000001u,
    0x3f800000u, 0x7f7fffffu, 0xff800000u, 0x7fc12345u, 0xffa00001u, 0x33800000u,
};
#define QT_BF16_NV (int)(sizeof qt_bf16_edge_v / sizeof qt_bf16_edge_v[0])
#define QT_BF16_NC (int)(sizeof qt_bf16_edge_c / sizeof qt_bf16_edge_c[0])
#define QT_BF16_EDGE (QT_BF16_NC * QT_BF16_NV * QT_BF16_NV)

static struct {
    qt_bf16 a[2 * QT_BF16_EDGE], b[2 * QT_BF16_EDGE];
    float ref[QT_BF16_EDGE], got[QT_BF16_EDGE], c[QT_BF16_EDGE];
} qt_bf16_chk;

int qt_bf16_edge_count(void) { return QT_BF16_EDGE; }

/* Lane l of the edge table: every (acc, a_hi, b_hi) of the lists, the lo pair walking the
 * value list at two other strides so that each lane's second step sees another pair. */
void qt_bf16_edge_lane(int l, float *c, qt_bf16 *a2, qt_bf16 *b2)
{
    const int ic = l / (QT_BF16_NV * QT_BF16_NV), ia = l / QT_BF16_NV % QT_BF16_NV,
              ib = l % QT_BF16_NV;
    *c = qt_bf16_f32_bits(qt_bf16_edge_c[ic]);
    a2[1] = qt_bf16_edge_v[ia], b2[1] = qt_bf16_edge_v[ib];
    /* for odd accumulator rows the lo pair is +0 * +0, which leaves the hi step's result
     * visible (up to the sign of a zero) */
    a2[0] = ic % 2 ? 0 : qt_bf16_edge_v[(l * 7 + 3) % QT_BF16_NV];
    b2[0] = ic % 2 ? 0 : qt_bf16_edge_v[(l * 11 + 5) % QT_BF16_NV];
}

int qt_bf16_check_dp(qt_bf16_dp_fn dp, const char *what, char *msg, int cap)
{
    if (msg && cap > 0) msg[0] = 0;
    for (int l = 0; l < QT_BF16_EDGE; l++)
        qt_bf16_edge_lane(l, &qt_bf16_chk.c[l], qt_bf16_chk.a + 2 * l, qt_bf16_chk.b + 2 * l);
    memcpy(qt_bf16_chk.ref, qt_bf16_chk.c, sizeof qt_bf16_chk.ref);
    qt_bf16_dp_ref(qt_bf16_chk.ref, qt_bf16_chk.a, qt_bf16_chk.b, QT_BF16_EDGE);
    memcpy(qt_bf16_chk.got, qt_bf16_chk.c, sizeof qt_bf16_chk.got);
    if (dp(qt_bf16_chk.got, qt_bf16_chk.a, qt_bf16_chk.b, QT_BF16_EDGE) != 0) {
        if (msg && cap > 0) snprintf(msg, (size_t)cap, "bf16: %s is not built", what);
        return QT_E_PLAN;
    }
    for (int l = 0; l < QT_BF16_EDGE; l++) {
        const uint32_t r = qt_bf16_bits_f32(qt_bf16_chk.ref[l]),
                       g = qt_bf16_bits_f32(qt_bf16_chk.got[l]);
        if (r != g) {
            if (msg && cap > 0)
                snprintf(msg, (size_t)cap,
                         "bf16: %s differs from the reference step (edge lane %d of %d): acc "
                         "0x%08x, a (hi, lo) 0x%04x 0x%04x, b 0x%04x 0x%04x gives 0x%08x, the "
                         "reference 0x%08x",
                         what, l, QT_BF16_EDGE, qt_bf16_bits_f32(qt_bf16_chk.c[l]),
                         qt_bf16_chk.a[2 * l + 1], qt_bf16_chk.a[2 * l],
                         qt_bf16_chk.b[2 * l + 1], qt_bf16_chk.b[2 * l], g, r);
            return QT_E_PLAN;
        }
    }
    return QT_OK;
}

#ifdef QT_BF16_HAVE_INSN
/* Appends the advice of an instruction-path failure to msg (the build takes that path). */
static void qt_bf16_advise(char *msg, int cap)
{
    if (!msg || cap <= 0) return;
    const size_t n = strlen(msg);
    if (n + 1 < (size_t)cap)
        snprintf(msg + n, (size_t)cap - n, "; this binary was built to take the AVX512_BF16 "
                 "path and refuses to run: rebuild with ARCH=-march=x86-64-v3 (the AVX2 "
                 "emulation, the same bits)");
}
#endif

int qt_bf16_check(char *msg, int cap)
{
    if (msg && cap > 0) msg[0] = 0;
#ifdef QT_BF16_HAVE_INSN
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) || !(eax & (1u << 5))) {
        if (msg && cap > 0)
            snprintf(msg, (size_t)cap, "bf16: this build uses the CPU feature AVX512_BF16 "
                                       "(VDPBF16PS, VCVTNEPS2BF16) and this CPU does not report "
                                       "it (CPUID.(7,1):EAX bit 5): rebuild with "
                                       "ARCH=-march=x86-64-v3");
        return QT_E_PLAN;
    }
#endif
#ifdef QT_BF16_HAVE_EMUL
    if (qt_bf16_check_dp(qt_bf16_dp_emul, "the AVX2+FMA emulation", msg, cap)) return QT_E_PLAN;
#endif
#ifdef QT_BF16_HAVE_INSN
    if (qt_bf16_check_dp(qt_bf16_dp_insn, "VDPBF16PS (CPU feature AVX512_BF16)", msg, cap)) {
        qt_bf16_advise(msg, cap);
        return QT_E_PLAN;
    }
    /* the conversion instruction on the accumulators and the step results */
    for (int l = 0; l < QT_BF16_EDGE; l += 16) {
        qt_bf16 h[16];
        const float *src = l / 16 % 2 ? qt_bf16_chk.ref + l : qt_bf16_chk.c + l;
        const int64_t k = QT_BF16_EDGE - l < 16 ? QT_BF16_EDGE - l : 16;
        qt_bf16_from_f32_insn(h, src, k);
        for (int64_t j = 0; j < k; j++)
            if (h[j] != qt_bf16_from_f32(src[j])) {
                if (msg && cap > 0)
                    snprintf(msg, (size_t)cap, "bf16: VCVTNEPS2BF16 (CPU feature AVX512_BF16) "
                             "differs from the reference conversion: 0x%08x gives 0x%04x, the "
                             "reference 0x%04x", qt_bf16_bits_f32(src[j]), h[j],
                             qt_bf16_from_f32(src[j]));
                qt_bf16_advise(msg, cap);
                return QT_E_PLAN;
            }
    }
#endif
    return QT_OK;
}
#endif
