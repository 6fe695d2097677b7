/* bf16.h - the bf16 bit contract: storage, fp32 <-> bf16 conversion and the VDPBF16PS
 * dot-product step, in three paths with the same bits (docs/precision.md, "bf16").
 *
 * Storage: a bf16 is a uint16_t holding the high 16 bits of an IEEE binary32 (sign, 8
 * exponent bits, 7 mantissa bits). Pairs: element 2i is the low half ("lo") and element
 * 2i+1 the high half ("hi") of a little-endian uint32_t.
 *
 * fp32 -> bf16 (qt_bf16_from_f32) is VCVTNEPS2BF16: zero and denormal inputs give the zero
 * of their sign; +-inf stay; a NaN keeps its sign and its 7 high mantissa bits and is made
 * quiet (bit 6 of the bf16 set); every other value rounds to nearest, ties to even, on the
 * 16 dropped bits (past the largest finite bf16: +-inf). bf16 -> fp32 is exact (a shift).
 *
 * The step (qt_bf16_fma_ref): r = a*b + c for fp32 a, b, c, as one lane of one half of
 * VDPBF16PS ("FP32 FMA with DAZ in, FTZ out, round to nearest even", measured on the
 * machines we run on, docs/toolchain.md section 7):
 *  1. denormal a, b, c read as the zero of their sign (DAZ);
 *  2. NaN in: the first NaN of (a, b, c) in that order, made quiet;
 *  3. otherwise the IEEE fma rounded to nearest even; an invalid operation (inf*0,
 *     inf-inf) gives the x86 default NaN 0xffc00000;
 *  4. FTZ with x86's tininess rule (after rounding, with an unbounded exponent): a result
 *     whose magnitude, rounded to 24 bits with an unbounded exponent, is below FLT_MIN is
 *     the zero of its sign. (So an exact value just under FLT_MIN that IEEE's gradual
 *     underflow would round up to FLT_MIN is flushed; "fmaf, then flush denormals" is NOT
 *     this rule.)
 * The dot step per fp32 lane (qt_bf16_dp_ref): acc = step(a_hi, b_hi, acc), then
 * acc = step(a_lo, b_lo, acc).
 *
 * Paths: the scalar reference (*_ref, portable C with explicit flushing); the AVX2+FMA
 * emulation (*_emul: the FMA instruction under MXCSR.FTZ|DAZ, which is x86's FTZ rule
 * above, plus an explicit NaN selection), built where __AVX2__ and __FMA__ are; the
 * AVX512_BF16 instruction (*_insn), built where __AVX512BF16__ is. The firmware's path
 * (qt_bf16_dp, the matmuls of bf16_matmul.h) is the instruction where the build has it,
 * else the emulation. qt_bf16_check() verifies at start-up that the built paths give the
 * reference's bits on the edge values (and that the CPU has the instruction the build
 * uses); the tests check them on millions of lanes.
 * Float build only: everything here is absent under -DQT_REAL_DOUBLE.
 * Invariants: no heap, no state; the emulation restores MXCSR before it returns.
 */
#ifndef QT_KERNEL_BF16_H
#define QT_KERNEL_BF16_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t qt_bf16;

#define QT_BF16_PATH_REF 0  /* scalar reference */
#define QT_BF16_PATH_EMUL 1 /* AVX2+FMA emulation */
#define QT_BF16_PATH_INSN 2 /* AVX512_BF16 instruction */
#define QT_BF16_PATH_WIDE 3 /* matmuls only (bf16_matmul.h): the emulation on 16-lane FMAs */

/* The MXCSR the fp32-FMA emulations of VDPBF16PS run under, from the caller's csr: DAZ (bit
 * 6) and FTZ (bit 15) as the instruction's step, and round to nearest (bits 13-14 cleared)
 * forced, since the instruction reads no MXCSR: the caller's rounding mode would otherwise
 * leak into the emulation (under round-toward-zero it differed on 39% of lanes; docs/amx.md).
 * Under the process default (0x1f80) this is the same csr as FTZ|DAZ alone. */
#define QT_BF16_EMUL_CSR(csr) (((csr) & ~0x6000u) | 0x8040u)

static inline uint32_t qt_bf16_bits_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float qt_bf16_f32_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp32 -> bf16 as VCVTNEPS2BF16 (see above). */
static inline qt_bf16 qt_bf16_from_f32(float x)
{
    uint32_t u = qt_bf16_bits_f32(x);
    if ((u & 0x7f800000u) == 0) return (qt_bf16)((u >> 16) & 0x8000u); /* zero, denormal */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (qt_bf16)((u >> 16) | 0x0040u); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* nearest even; carries into the exponent (to inf) */
    return (qt_bf16)(u >> 16);
}

/* bf16 -> fp32: exact. */
static inline float qt_f32_from_bf16(qt_bf16 h)
{
    return qt_bf16_f32_bits((uint32_t)h << 16);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define QT_BF16_HAVE_V16 1
/* Sixteen lanes of qt_bf16_from_f32 in its integer form (the same rule lane by lane: zero
 * and denormals to the zero of their sign, NaN quieted keeping its sign and 7 high mantissa
 * bits, else nearest even on the 16 dropped bits): about twelve vector integer operations,
 * on every AVX-512BW CPU. */
static inline __m256i qt_bf16_round16_int(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                             _mm512_and_si512(hi, _mm512_set1_epi32(1)))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
    const __mmask16 tiny = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x0040));
    r = _mm512_mask_and_epi32(r, tiny, hi, _mm512_set1_epi32(0x8000));
    return _mm512_cvtepi32_epi16(r);
}

/* Sixteen lanes of qt_bf16_from_f32: VCVTNEPS2BF16 where the build has AVX512_BF16, else
 * the integer form. The two give the same bits on all 2^32 fp32 inputs, under any MXCSR (the
 * instruction reads none of it: nearest even, denormal inputs to signed zero, NaN quieted),
 * checked exhaustively by the unit test Bf16.Round16AllInputs on the machine at hand and on
 * the edge table by qt_bf16_check at start-up; the integer form stays the tested fallback. */
static inline __m256i qt_bf16_round16(__m512 x)
{
#if defined(__AVX512BF16__)
    return (__m256i)_mm512_cvtneps_pbh(x);
#else
    return qt_bf16_round16_int(x);
#endif
}

/* Sixteen bf16 at p widened (exact). */
static inline __m512 qt_bf16_widen16(const qt_bf16 *p)
{
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* qt_bf16_round16(x) stored to p[0..15]. */
static inline void qt_bf16_store16(qt_bf16 *p, __m512 x)
{
    _mm256_storeu_si256((__m256i *)(void *)p, qt_bf16_round16(x));
}
#endif

/* dst[n] = bf16(src) (writes). */
void qt_bf16_from_f32_n(qt_bf16 *dst, const float *src, int64_t n);
/* dst[n] = fp32(src) (writes; exact). */
void qt_f32_from_bf16_n(float *dst, const qt_bf16 *src, int64_t n);
/* y[n] = bf16(fp32(a) + fp32(b)) (writes; y may be a or b) and dst[n] = bf16(fp32(dst) +
 * fp32(src)) (accumulates): one fp32 add and one rounding per element in one pass, the bits
 * of widening, qt_add / qt_acc (elementwise.h) and rounding back. */
void qt_bf16_add_n(qt_bf16 *y, const qt_bf16 *a, const qt_bf16 *b, int64_t n);
void qt_bf16_acc_n(qt_bf16 *dst, const qt_bf16 *src, int64_t n);
/* dst[n] = bf16(fp32(dst) + src) for fp32 src (accumulates): one add and one rounding per
 * element. */
void qt_bf16_acc_f32_n(qt_bf16 *dst, const float *src, int64_t n);
/* dst[n] = bf16(fp32(src)) (writes; dst may be src): a copy through the boundary's widening
 * and rounding (a bf16 denormal becomes the zero of its sign, a NaN is quieted, every other
 * value is copied), sixteen lanes at a time where built; qt_bf16_copy_n_ref the scalar form. */
void qt_bf16_copy_n(qt_bf16 *dst, const qt_bf16 *src, int64_t n);
void qt_bf16_copy_n_ref(qt_bf16 *dst, const qt_bf16 *src, int64_t n);

/* One FMA step of VDPBF16PS: a*b + c with DAZ, NaN selection, RNE and FTZ (see above). */
float qt_bf16_fma_ref(float a, float b, float c);

/* The dot step over n fp32 lanes: acc[i] = step(a[2i+1], b[2i+1], acc[i]), then
 * acc[i] = step(a[2i], b[2i], acc[i]). Reads a[2n], b[2n] (bf16), accumulates into acc[n].
 * _ref: scalar; _emul: AVX2 (absent without AVX2+FMA: returns -1, else 0); _insn:
 * VDPBF16PS (returns -1 when the build lacks it); qt_bf16_dp: the build's path. */
void qt_bf16_dp_ref(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n);
int qt_bf16_dp_emul(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n);
int qt_bf16_dp_insn(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n);
void qt_bf16_dp(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n);

/* dst[n] = bf16(src) with VCVTNEPS2BF16 itself; -1 (nothing written) without AVX512_BF16. */
int qt_bf16_from_f32_insn(qt_bf16 *dst, const float *src, int64_t n);

/* The path this build's kernels take (QT_BF16_PATH_*). */
int qt_bf16_path(void);

/* Start-up check: QT_OK (0) when the built paths (the emulation and, where built, the
 * instruction and the conversion instruction) give the reference's bits on the edge table
 * (signed zeros, denormals in and out, the tininess boundary, infinities, overflow, NaNs,
 * ties) and the CPU reports AVX512_BF16 if the build uses it; otherwise QT_E_PLAN and a
 * one-line reason in msg[cap] naming the CPU feature, the path and the first lane that
 * differs (for the caller's qt_fail; msg may be NULL). Writes msg only. qt_runtime_init runs
 * it first, so a binary never takes a path that differs from the reference. */
int qt_bf16_check(char *msg, int cap);

/* A dot-step path as qt_bf16_dp_ref (acc[n] accumulated from a[2n], b[2n]); returns 0, or -1
 * when the build lacks it (qt_bf16_dp_emul, qt_bf16_dp_insn, or a test's own). */
typedef int (*qt_bf16_dp_fn)(float *acc, const qt_bf16 *a, const qt_bf16 *b, int64_t n);

/* The edge-table part of qt_bf16_check for one path: QT_OK when dp gives the reference's
 * bits on every lane of the table, else QT_E_PLAN and "bf16: <what> differs ..." (or "<what>
 * is not built") in msg[cap] (msg may be NULL). Reads nothing but the table; writes msg. */
int qt_bf16_check_dp(qt_bf16_dp_fn dp, const char *what, char *msg, int cap);

/* The check's edge table, for the tests: its lane count, and lane l's accumulator c and
 * operand pairs a2[2], b2[2] (element 0 lo, 1 hi). */
int qt_bf16_edge_count(void);
void qt_bf16_edge_lane(int l, float *c, qt_bf16 *a2, qt_bf16 *b2);

#ifdef __cplusplus
}
#endif

#endif
