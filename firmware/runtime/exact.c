/* exact.c - the Kulisch-style exact accumulator (see qt_exact.h).
 *
 * Invariants: after qt_exact_normalise every limb but the top one lies in [0, 2^32) and the
 * top limb carries the sign, so the representation of a value is unique; between
 * normalisations each limb changes by less than 2^32 per deposit and at most 2^30 deposits
 * are made, so int64 limbs cannot overflow. No floating-point rounding ever happens before
 * qt_exact_value, which is why the result depends only on the multiset of inputs.
 */
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "qt_exact.h"

#define QT_EXACT_MAX_PENDING (1ll << 30)
#define QT_EXACT_DIGIT 4294967296ll
#define QT_EXACT_SPECIAL_PINF 1u
#define QT_EXACT_SPECIAL_NINF 2u
#define QT_EXACT_SPECIAL_NAN 4u

void qt_exact_clear(qt_exact *a)
{
    memset(a, 0, sizeof *a);
}

static void qt_exact_normalise(qt_exact *a)
{
    /* gcc defines >> on negative int64 as an arithmetic shift, i.e. floor(x / 2^32), which
     * keeps each remainder in [0, 2^32). */
    for (int i = 0; i < QT_EXACT_LIMBS - 1; i++) {
        int64_t c = a->limb[i] >> QT_EXACT_LIMB_BITS;
        a->limb[i] -= c * QT_EXACT_DIGIT;
        a->limb[i + 1] += c;
    }
    a->pending = 0;
}

/* Adds (or subtracts when neg) m * 2^(p - QT_EXACT_FRAC_BITS), 0 <= p, m < 2^64. */
static void qt_exact_deposit(qt_exact *a, int neg, uint64_t m, int p)
{
    int i = p / QT_EXACT_LIMB_BITS, s = p % QT_EXACT_LIMB_BITS;
    if (i + 2 >= QT_EXACT_LIMBS) {
        a->special |= neg ? QT_EXACT_SPECIAL_NINF : QT_EXACT_SPECIAL_PINF;
        return;
    }
    /* m < 2^64 shifted by s < 32 spans three 32-bit digits, the top one below 2^31 */
    uint64_t d0 = (m << s) & 0xffffffffull;
    uint64_t hi = s ? (m >> (QT_EXACT_LIMB_BITS - s)) : (m >> QT_EXACT_LIMB_BITS);
    uint64_t d1 = hi & 0xffffffffull, d2 = hi >> 32;
    if (neg) {
        a->limb[i] -= (int64_t)d0;
        a->limb[i + 1] -= (int64_t)d1;
        a->limb[i + 2] -= (int64_t)d2;
    } else {
        a->limb[i] += (int64_t)d0;
        a->limb[i + 1] += (int64_t)d1;
        a->limb[i + 2] += (int64_t)d2;
    }
    if (++a->pending >= QT_EXACT_MAX_PENDING) qt_exact_normalise(a);
}

void qt_exact_add_d(qt_exact *a, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    int neg = (int)(bits >> 63);
    int be = (int)((bits >> 52) & 0x7ff);
    uint64_t m = bits & ((1ull << 52) - 1);
    if (be == 0x7ff) {
        a->special |= m ? QT_EXACT_SPECIAL_NAN : (neg ? QT_EXACT_SPECIAL_NINF : QT_EXACT_SPECIAL_PINF);
        return;
    }
    int e;
    if (be == 0) {
        e = -1074;
    } else {
        m |= 1ull << 52;
        e = be - 1075;
    }
    if (m == 0) return;
    int tz = __builtin_ctzll(m);
    m >>= tz;
    int p = e + tz + QT_EXACT_FRAC_BITS;
    if (p < 0) {
        /* below the grid: cannot happen for floats or float products */
        m = (-p >= 64) ? 0 : (m >> -p);
        p = 0;
        if (m == 0) return;
    }
    qt_exact_deposit(a, neg, m, p);
}

void qt_exact_add_f(qt_exact *a, float x)
{
    qt_exact_add_d(a, (double)x);
}

void qt_exact_add_prod(qt_exact *a, float x, float y)
{
    /* 24-bit by 24-bit significands give at most 48 bits: the double product is exact */
    qt_exact_add_d(a, (double)x * (double)y);
}

void qt_exact_merge(qt_exact *a, const qt_exact *b)
{
    qt_exact_normalise(a);
    for (int i = 0; i < QT_EXACT_LIMBS; i++) a->limb[i] += b->limb[i];
    a->pending = 1 + b->pending;
    a->special |= b->special;
    if (a->pending >= QT_EXACT_MAX_PENDING) qt_exact_normalise(a);
}

double qt_exact_value(qt_exact *a)
{
    static const uint64_t qnan = 0x7ff8000000000000ull, pinf = 0x7ff0000000000000ull,
                          ninf = 0xfff0000000000000ull;
    uint64_t bits;
    double r;
    if (a->special) {
        if ((a->special & QT_EXACT_SPECIAL_NAN) ||
            (a->special & (QT_EXACT_SPECIAL_PINF | QT_EXACT_SPECIAL_NINF)) ==
                (QT_EXACT_SPECIAL_PINF | QT_EXACT_SPECIAL_NINF))
            bits = qnan;
        else
            bits = (a->special & QT_EXACT_SPECIAL_PINF) ? pinf : ninf;
        memcpy(&r, &bits, sizeof r);
        return r;
    }
    qt_exact_normalise(a);
    uint32_t dg[QT_EXACT_LIMBS];
    int neg = a->limb[QT_EXACT_LIMBS - 1] < 0;
    for (int i = 0; i < QT_EXACT_LIMBS; i++) dg[i] = (uint32_t)((uint64_t)a->limb[i] & 0xffffffffull);
    if (neg) {
        /* two's complement negation of the whole digit string gives the magnitude */
        uint64_t c = 1;
        for (int i = 0; i < QT_EXACT_LIMBS; i++) {
            uint64_t v = (uint64_t)(uint32_t)~dg[i] + c;
            dg[i] = (uint32_t)v;
            c = v >> 32;
        }
    }
    int h = QT_EXACT_LIMBS - 1;
    while (h >= 0 && dg[h] == 0) h--;
    if (h < 0) return 0.0;
    uint64_t hi64 = ((uint64_t)dg[h] << 32) | (h >= 1 ? dg[h - 1] : 0u);
    uint32_t lo32 = h >= 2 ? dg[h - 2] : 0u;
    int sticky = 0;
    for (int i = h - 3; i >= 0; i--) sticky |= dg[i] != 0;
    int lz = __builtin_clzll(hi64);  /* <= 31 because dg[h] != 0 */
    uint64_t top = lz ? ((hi64 << lz) | ((uint64_t)lo32 >> (32 - lz))) : hi64;
    uint32_t rest = lz ? (uint32_t)((uint64_t)lo32 << lz) : lo32;
    sticky |= rest != 0;
    int topbit = 32 * h + 31 - lz;   /* position of the leading 1 on the fixed-point grid */
    uint64_t mant = top >> 11, rb = top & 0x7ffull;
    if (rb > 0x400u || (rb == 0x400u && (sticky || (mant & 1u)))) mant++;
    if (mant == (1ull << 53)) {
        mant >>= 1;
        topbit++;
    }
    int64_t biased = (int64_t)(topbit - QT_EXACT_FRAC_BITS) + 1023;
    bits = ((uint64_t)biased << 52) | (mant & ((1ull << 52) - 1));
    if (neg) bits |= 1ull << 63;
    memcpy(&r, &bits, sizeof r);
    return r;
}

/* Squares by float exponent: x = mx * 2^(e - 150) with mx < 2^24 an integer (implicit bit
 * included, e = max(biased exponent, 1)), so x^2 = mx^2 * 2^(2e - 300) and mx^2 < 2^48 is an
 * exact integer. Integers sharing e add exactly in a uint64 bin as long as at most 2^16 land
 * in it (2^16 * (2^48 - 1) < 2^64); bins are flushed after every 2^16 elements in total, so
 * no bin can wrap whatever the call sizes. Each bin then enters the long accumulator as one
 * exact deposit. Exact sums commute, so the result equals per-element deposits. */
#define QT_SQ_BLOCK (1ll << 16)
#define QT_SQ_PREP 256          /* elements prepared per vector batch (3 KiB of stack) */

static void qt_exact_sq_flush_bins(qt_exact_sq *q, qt_exact *a)
{
    for (int c = 0; c < QT_EXACT_SQ_COPIES; c++) {
        for (int e = 1; e < 255; e++) {
            uint64_t v = q->bin[c][e];
            if (!v) continue;
            q->bin[c][e] = 0;
            /* v * 2^(2e - 300) on the 2^-320 grid: position 2e + 20 */
            qt_exact_deposit(a, 0, v, 2 * e + 20);
        }
    }
    q->used = 0;
}

void qt_exact_sq_clear(qt_exact_sq *q)
{
    memset(q, 0, sizeof *q);
}

void qt_exact_sq_add(qt_exact_sq *q, qt_exact *a, const float *x, int64_t n)
{
    int64_t k = 0;
    while (k < n) {
        int64_t len = n - k;
        if (len > QT_SQ_BLOCK - q->used) len = QT_SQ_BLOCK - q->used;
        const float *xs = x + k;
        int64_t j = 0;
#if defined(__AVX512F__)
        /* exponent index and exact square of 16 floats per vector step (the same integer
         * values as the scalar lines below), then scalar bin updates */
        uint32_t idx[QT_SQ_PREP];
        uint64_t sqv[QT_SQ_PREP];
        const __m512i e_mask = _mm512_set1_epi32(0xff), m_mask = _mm512_set1_epi32(0x7fffff);
        const __m512i hidden = _mm512_set1_epi32(0x800000), one = _mm512_set1_epi32(1);
        for (; j + QT_SQ_PREP <= len; j += QT_SQ_PREP) {
            for (int v = 0; v < QT_SQ_PREP; v += 16) {
                __m512i b = _mm512_loadu_si512((const void *)(xs + j + v));
                __m512i e = _mm512_and_si512(_mm512_srli_epi32(b, 23), e_mask);
                __mmask16 nz = _mm512_test_epi32_mask(e, e);
                __m512i m = _mm512_or_si512(_mm512_and_si512(b, m_mask),
                                            _mm512_maskz_mov_epi32(nz, hidden));
                _mm512_storeu_si512((void *)(idx + v), _mm512_mask_mov_epi32(one, nz, e));
                __m512i lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(m));
                __m512i hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(m, 1));
                _mm512_storeu_si512((void *)(sqv + v), _mm512_mul_epu32(lo, lo));
                _mm512_storeu_si512((void *)(sqv + v + 8), _mm512_mul_epu32(hi, hi));
            }
            for (int v = 0; v < QT_SQ_PREP; v += QT_EXACT_SQ_COPIES)
                for (int c = 0; c < QT_EXACT_SQ_COPIES; c++) q->bin[c][idx[v + c]] += sqv[v + c];
        }
#endif
        for (; j + QT_EXACT_SQ_COPIES <= len; j += QT_EXACT_SQ_COPIES) {
            for (int c = 0; c < QT_EXACT_SQ_COPIES; c++) {
                uint32_t b;
                memcpy(&b, &xs[j + c], sizeof b);
                uint32_t e = (b >> 23) & 0xffu;
                uint64_t m = (b & 0x7fffffu) | ((uint32_t)(e != 0) << 23);
                q->bin[c][e | (uint32_t)(e == 0)] += m * m;
            }
        }
        for (; j < len; j++) {
            uint32_t b;
            memcpy(&b, &xs[j], sizeof b);
            uint32_t e = (b >> 23) & 0xffu;
            uint64_t m = (b & 0x7fffffu) | ((uint32_t)(e != 0) << 23);
            q->bin[0][e | (uint32_t)(e == 0)] += m * m;
        }
        /* bin 255 collects inf/NaN: record them through the scalar path, which tracks them */
        int special = 0;
        for (int c = 0; c < QT_EXACT_SQ_COPIES; c++) {
            special |= q->bin[c][255] != 0;
            q->bin[c][255] = 0;
        }
        if (special) {
            for (j = 0; j < len; j++) {
                uint32_t b;
                memcpy(&b, &xs[j], sizeof b);
                if (((b >> 23) & 0xffu) == 0xffu) qt_exact_add_prod(a, xs[j], xs[j]);
            }
        }
        q->used += len;
        k += len;
        if (q->used >= QT_SQ_BLOCK) qt_exact_sq_flush_bins(q, a);
    }
}

void qt_exact_sq_flush(qt_exact_sq *q, qt_exact *a)
{
    qt_exact_sq_flush_bins(q, a);
}
