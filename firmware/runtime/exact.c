/* exact.c - the Kulisch-style exact accumulator (see qt_exact.h).
 *
 * Invariants: after qt_exact_normalise every limb but the top one lies in [0, 2^32) and the
 * top limb carries the sign, so the representation of a value is unique; between
 * normalisations each limb changes by less than 2^32 per deposit and at most 2^30 deposits
 * are made, so int64 limbs cannot overflow. No floating-point rounding ever happens before
 * qt_exact_value, which is why the result depends only on the multiset of inputs. The
 * square sums (qt_exact_sq) may split the same exact value between integer lane sums,
 * bins and deposits in any way: only the exact total reaches qt_exact_value.
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
/* what qt_exact_sq_run does to each x first: nothing, x / d, x * d (QT_SQ_OP bits); with
 * QT_SQ_KEEP the quotient or product is squared but not stored (x is only read) */
enum { QT_SQ_READ = 0, QT_SQ_DIV = 1, QT_SQ_MUL = 2, QT_SQ_OP = 3, QT_SQ_KEEP = 4 };

/* x / d or x * d as the mode says (the scalar form of the lanes' operation) */
static inline float qt_exact_sq_op(float x, int op, float d)
{
    return op == QT_SQ_DIV ? x / d : op == QT_SQ_MUL ? x * d : x;
}

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

/* The scalar bins: x[j]^2 into bin[j mod copies][e] (e = max(biased exponent, 1)). */
static void qt_exact_sq_bins(qt_exact_sq *q, const float *xs, int64_t len)
{
    int64_t j = 0;
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
}

#if defined(__AVX512F__)
/* Vector form for the common case of a narrow exponent range (gradients), one pass: a
 * sub-chunk's window of 16 exponents [lo, lo+16) is placed from the largest exponent of the
 * sub-chunk before (lo = E - 13: two exponents of headroom; the first one of a pass looks
 * ahead), clamped to [1, 239] so that inf/NaN (exponent 255) always fall outside. An element
 * of exponent e = lo + t (t < 16) has the square mx^2 * 2^(2e - 300) =
 * (mx << t)^2 * 2^(2 lo - 300), an integer below 2^80 on the grid of 2^(2 lo - 300): with
 * AVX-512 IFMA its low 52 bits and the bits above go into two uint64 lane sums (grid
 * positions 2 lo + 20 and + 72), without it its three 32-bit digits (mx^2 << 2t, the top
 * one below 2^14) into three (2 lo + 20, + 52, + 84). A sub-chunk adds at most
 * QT_SQ_SUB / 8 values below 2^52 to a lane, so the lanes cannot wrap; they enter the long
 * accumulator as exact deposits. Nonzero elements outside the
 * window are gathered and go to the scalar bins (inf/NaN to bin 255, handled by the
 * caller); zeros add nothing. The sum is the same exact value, so the result has the same
 * bits as the bins'. The division of qt_exact_sq_add_div happens lane-wise before (a
 * multiplication by 1/d where d is a power of two whose inverse is a normal float: both
 * are the correctly rounded x * 2^-k, the same bits). */
#define QT_SQ_SUB QT_EXACT_SQ_SUB  /* sub-chunk: at most 256 adds per lane */
#define QT_SQ_PREFETCH 1024        /* floats ahead (4 KiB) */

/* The window base for a largest exponent e. */
static int qt_exact_sq_lo(int e)
{
    return e - 13 < 1 ? 1 : e - 13 > 239 ? 239 : e - 13;
}

/* Deposits the lane sums of one digit at grid position pos. */
static void qt_exact_sq_deposit_lanes(qt_exact *a, __m512i acc, int pos)
{
    uint64_t lanes[8];
    _mm512_storeu_si512((void *)lanes, acc);
    for (int l = 0; l < 8; l++)
        if (lanes[l]) qt_exact_deposit(a, 0, lanes[l], pos);
}

/* x[0..n), n a multiple of 16 up to QT_SQ_SUB, in the window at lo; mode QT_SQ_DIV / MUL
 * first replaces x by x / d or x * d (stored back unless QT_SQ_KEEP). Returns the largest
 * biased exponent seen. */
static inline int qt_exact_sq_window(qt_exact_sq *q, qt_exact *a, float *x, int64_t n, int lo,
                                     int mode, float d, int64_t pf_lim)
{
    const __m512i e_mask = _mm512_set1_epi32(0xff), m_mask = _mm512_set1_epi32(0x7fffff);
    const __m512i hidden = _mm512_set1_epi32(0x800000), one = _mm512_set1_epi32(1);
    const __m512i vlo = _mm512_set1_epi32(lo), fifteen = _mm512_set1_epi32(15);
    const __m512i low32 = _mm512_set1_epi64(0xffffffffll);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512 dv = _mm512_set1_ps(d);
    __m512i d0 = _mm512_setzero_si512(), d1 = d0, d2 = d0, emax = d0;
    float *out_vals = q->outside;
    int64_t n_out = 0;
    for (int64_t j = 0; j < n; j += 16) {
        /* the loop is long for the memory it reads: the loads ahead are issued here */
        if (j + QT_SQ_PREFETCH < pf_lim) _mm_prefetch((const char *)(x + j + QT_SQ_PREFETCH), _MM_HINT_T0);
        __m512 xv = _mm512_loadu_ps(x + j);
        if ((mode & QT_SQ_OP) == QT_SQ_DIV) xv = _mm512_div_ps(xv, dv);
        if ((mode & QT_SQ_OP) == QT_SQ_MUL) xv = _mm512_mul_ps(xv, dv);
        if ((mode & QT_SQ_OP) && !(mode & QT_SQ_KEEP)) _mm512_storeu_ps(x + j, xv);
        const __m512i b = _mm512_castps_si512(xv);
        const __m512i e = _mm512_and_si512(_mm512_srli_epi32(b, 23), e_mask);
        emax = _mm512_max_epu32(emax, e);
        const __mmask16 nz = _mm512_test_epi32_mask(e, e);
        const __m512i t = _mm512_sub_epi32(_mm512_mask_mov_epi32(one, nz, e), vlo);
        const __mmask16 in = _mm512_cmple_epu32_mask(t, fifteen);
        /* mantissas of the lanes in the window (others 0) */
        const __m512i m = _mm512_maskz_mov_epi32(
            in, _mm512_or_si512(_mm512_and_si512(b, m_mask), _mm512_maskz_mov_epi32(nz, hidden)));
        const __mmask16 out = (__mmask16)(~in & _mm512_test_epi32_mask(b, abs_mask));
        if (out) {  /* outside the window (zeros are not): to the scalar bins afterwards */
            _mm512_mask_compressstoreu_ps(out_vals + n_out, out, xv);
            n_out += __builtin_popcount(out);
        }
        /* even elements sit in the low halves of the 64-bit lanes, odd ones in the high */
        const __m512i me = _mm512_and_si512(m, low32), mo = _mm512_srli_epi64(m, 32);
        const __m512i te = _mm512_and_si512(t, low32), to = _mm512_srli_epi64(t, 32);
#if defined(__AVX512IFMA__)
        /* (mx << t)^2 < 2^80: its low 52 bits and the bits above into two lane sums */
        const __m512i xe = _mm512_sllv_epi64(me, te), xo = _mm512_sllv_epi64(mo, to);
        d0 = _mm512_madd52lo_epu64(d0, xe, xe);
        d1 = _mm512_madd52hi_epu64(d1, xe, xe);
        d0 = _mm512_madd52lo_epu64(d0, xo, xo);
        d1 = _mm512_madd52hi_epu64(d1, xo, xo);
#else
        /* mx^2 << 2t < 2^78: three 32-bit digits */
        const __m512i se = _mm512_add_epi64(te, te), so = _mm512_add_epi64(to, to);
        const __m512i c64 = _mm512_set1_epi64(64);
        const __m512i re = _mm512_sub_epi64(c64, se), ro = _mm512_sub_epi64(c64, so);
        const __m512i qe = _mm512_mul_epu32(me, me), qo = _mm512_mul_epu32(mo, mo);
        const __m512i le = _mm512_sllv_epi64(qe, se), lw = _mm512_sllv_epi64(qo, so);
        d0 = _mm512_add_epi64(d0, _mm512_add_epi64(_mm512_and_si512(le, low32),
                                                   _mm512_and_si512(lw, low32)));
        d1 = _mm512_add_epi64(d1, _mm512_add_epi64(_mm512_srli_epi64(le, 32),
                                                   _mm512_srli_epi64(lw, 32)));
        d2 = _mm512_add_epi64(d2, _mm512_add_epi64(_mm512_srlv_epi64(qe, re),
                                                   _mm512_srlv_epi64(qo, ro)));
#endif
    }
#if defined(__AVX512IFMA__)
    qt_exact_sq_deposit_lanes(a, d0, 2 * lo + 20);
    qt_exact_sq_deposit_lanes(a, d1, 2 * lo + 20 + 52);
    (void)d2;
#else
    qt_exact_sq_deposit_lanes(a, d0, 2 * lo + 20);
    qt_exact_sq_deposit_lanes(a, d1, 2 * lo + 20 + 32);
    qt_exact_sq_deposit_lanes(a, d2, 2 * lo + 20 + 64);
#endif
    qt_exact_sq_bins(q, out_vals, n_out);
    return (int)_mm512_reduce_max_epu32(emax);
}

/* The vector part of a block: whole 16-float groups of x[0..len); returns how many. */
static int64_t qt_exact_sq_vector(qt_exact_sq *q, qt_exact *a, float *x, int64_t len, int mode,
                                  float d)
{
    int64_t j = 0;
    while (j + 16 <= len) {
        int64_t c = (len - j) & ~(int64_t)15;
        if (c > QT_SQ_SUB) c = QT_SQ_SUB;
        if (!q->lo) {  /* the first window: the largest exponent of the first 16 results */
            __m512 xv = _mm512_loadu_ps(x + j);
            if ((mode & QT_SQ_OP) == QT_SQ_DIV) xv = _mm512_div_ps(xv, _mm512_set1_ps(d));
            if ((mode & QT_SQ_OP) == QT_SQ_MUL) xv = _mm512_mul_ps(xv, _mm512_set1_ps(d));
            const __m512i b = _mm512_and_si512(_mm512_castps_si512(xv), _mm512_set1_epi32(0x7fffffff));
            q->lo = qt_exact_sq_lo((int)(_mm512_reduce_max_epu32(b) >> 23) + 1);
        }
        int e;
        /* each mode a constant, so every call is its own specialised loop */
        switch (mode) {
        case QT_SQ_DIV: e = qt_exact_sq_window(q, a, x + j, c, q->lo, QT_SQ_DIV, d, len - j); break;
        case QT_SQ_MUL: e = qt_exact_sq_window(q, a, x + j, c, q->lo, QT_SQ_MUL, d, len - j); break;
        case QT_SQ_DIV | QT_SQ_KEEP:
            e = qt_exact_sq_window(q, a, x + j, c, q->lo, QT_SQ_DIV | QT_SQ_KEEP, d, len - j);
            break;
        case QT_SQ_MUL | QT_SQ_KEEP:
            e = qt_exact_sq_window(q, a, x + j, c, q->lo, QT_SQ_MUL | QT_SQ_KEEP, d, len - j);
            break;
        default: e = qt_exact_sq_window(q, a, x + j, c, q->lo, QT_SQ_READ, d, len - j); break;
        }
        q->lo = qt_exact_sq_lo(e);
        j += c;
    }
    return j;
}
#endif

/* qt_exact_sq_add's blocks; mode: the quotient or product replaces each x first (with
 * QT_SQ_KEEP: is squared in its place, x is not written). */
static void qt_exact_sq_run(qt_exact_sq *q, qt_exact *a, float *x, int64_t n, int mode, float d)
{
    int64_t k = 0;
    while (k < n) {
        int64_t len = n - k;
        if (len > QT_SQ_BLOCK - q->used) len = QT_SQ_BLOCK - q->used;
        float *xs = x + k;
        int64_t j = 0;
#if defined(__AVX512F__)
        j = qt_exact_sq_vector(q, a, xs, len, mode, d);
#endif
        const int op = mode & QT_SQ_OP;
        if (op && (mode & QT_SQ_KEEP)) {
            /* the rest's quotients through the outside buffer (free between windows) */
            for (int64_t i = j; i < len; i += QT_EXACT_SQ_SUB) {
                const int64_t c = len - i < QT_EXACT_SQ_SUB ? len - i : QT_EXACT_SQ_SUB;
                for (int64_t t = 0; t < c; t++) q->outside[t] = qt_exact_sq_op(xs[i + t], op, d);
                qt_exact_sq_bins(q, q->outside, c);
            }
        } else {
            for (int64_t i = j; op && i < len; i++) xs[i] = qt_exact_sq_op(xs[i], op, d);
            qt_exact_sq_bins(q, xs + j, len - j);
        }
        /* bin 255 collects inf/NaN: record them through the scalar path, which tracks them */
        int special = 0;
        for (int c = 0; c < QT_EXACT_SQ_COPIES; c++) {
            special |= q->bin[c][255] != 0;
            q->bin[c][255] = 0;
        }
        if (special) {
            for (j = 0; j < len; j++) {
                const float v = (mode & QT_SQ_KEEP) ? qt_exact_sq_op(xs[j], op, d) : xs[j];
                uint32_t b;
                memcpy(&b, &v, sizeof b);
                if (((b >> 23) & 0xffu) == 0xffu) qt_exact_add_prod(a, v, v);
            }
        }
        q->used += len;
        k += len;
        if (q->used >= QT_SQ_BLOCK) qt_exact_sq_flush_bins(q, a);
    }
}

void qt_exact_sq_add(qt_exact_sq *q, qt_exact *a, const float *x, int64_t n)
{
    /* mode QT_SQ_READ never writes x */
    qt_exact_sq_run(q, a, (float *)(uintptr_t)x, n, QT_SQ_READ, 1.0f);
}

int qt_exact_div_inverse(float d, float *inv)
{
    uint32_t b;
    memcpy(&b, &d, sizeof b);
    const uint32_t e = (b >> 23) & 0xffu;
    /* d = 2^(e - 127) exactly, 1/d normal too: multiply by the exact inverse */
    if (!(b & 0x807fffffu) && e >= 2 && e <= 252) {
        const uint32_t ib = (254u - e) << 23;
        memcpy(inv, &ib, sizeof *inv);
        return 1;
    }
    *inv = d;
    return 0;
}

void qt_exact_sq_add_div(qt_exact_sq *q, qt_exact *a, float *x, int64_t n, float d)
{
    float f;
    if (qt_exact_div_inverse(d, &f)) qt_exact_sq_run(q, a, x, n, QT_SQ_MUL, f);
    else qt_exact_sq_run(q, a, x, n, QT_SQ_DIV, d);
}

void qt_exact_sq_add_quot(qt_exact_sq *q, qt_exact *a, const float *x, int64_t n, float d)
{
    /* QT_SQ_KEEP never writes x */
    float *xw = (float *)(uintptr_t)x, f;
    if (qt_exact_div_inverse(d, &f)) qt_exact_sq_run(q, a, xw, n, QT_SQ_MUL | QT_SQ_KEEP, f);
    else qt_exact_sq_run(q, a, xw, n, QT_SQ_DIV | QT_SQ_KEEP, d);
}

void qt_exact_sq_flush(qt_exact_sq *q, qt_exact *a)
{
    qt_exact_sq_flush_bins(q, a);
}
