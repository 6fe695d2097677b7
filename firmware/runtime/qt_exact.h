/* qt_exact.h - exact, order-independent accumulation of floats and float products.
 *
 * A Kulisch-style long accumulator: the exact sum is kept as a fixed-point integer whose
 * least significant bit weighs 2^-QT_EXACT_FRAC_BITS, split into 32-bit digits held in
 * int64 limbs so that many deposits can be added without carrying. Every float, and every
 * product of two floats (exact in double: 24x24-bit significands, exponents within
 * [-298, 256)), lands on that grid exactly, so the sum is exact and therefore independent
 * of the order of the additions and of how they are split between accumulators.
 * Conversion to double is correctly rounded (to nearest, ties to even) from the
 * normalised, unique representation, so equal sums always give equal bits.
 * Non-finite inputs are tracked separately: any NaN, or +inf together with -inf, gives NaN.
 */
#ifndef QT_EXACT_H
#define QT_EXACT_H

#include <stdint.h>

#define QT_EXACT_LIMB_BITS 32
#define QT_EXACT_FRAC_BITS 320   /* covers 2^-298 (smallest float product) with margin */
#define QT_EXACT_LIMBS 22        /* 704 bits: magnitudes up to 2^383 */

typedef struct qt_exact {
    int64_t limb[QT_EXACT_LIMBS];  /* digit i weighs 2^(32 i - 320); not normalised */
    int64_t pending;               /* deposits since the last normalisation */
    uint32_t special;              /* bit 0: +inf seen, bit 1: -inf seen, bit 2: NaN seen */
} qt_exact;

/* Sets the accumulator to exactly zero. */
void qt_exact_clear(qt_exact *a);
/* Adds x exactly. */
void qt_exact_add_f(qt_exact *a, float x);
/* Adds the exact product x*y (computed exactly in double). */
void qt_exact_add_prod(qt_exact *a, float x, float y);
/* Adds d exactly, which must be a multiple of 2^-320 below 2^383 in magnitude (true for
 * floats, float products and integers); other finite values are truncated toward zero to
 * the grid. */
void qt_exact_add_d(qt_exact *a, double d);
/* Adds everything in b to a (exact; used to merge partial accumulators). */
void qt_exact_merge(qt_exact *a, const qt_exact *b);
/* Fast exact sum of squares of floats: integer lane sums over a sliding window of 16
 * exponents, and integer bins per float exponent for the rest (see exact.c), flushed into a
 * qt_exact. Holds 16 KiB; keep it in static storage. */
#define QT_EXACT_SQ_COPIES 4     /* independent bin sets: breaks store-to-load chains */
#define QT_EXACT_SQ_SUB 2048     /* elements per window (vector path) */
typedef struct qt_exact_sq {
    uint64_t bin[QT_EXACT_SQ_COPIES][256];  /* sum of mantissa^2 per biased float exponent */
    int64_t used;                           /* elements since the last flush */
    int32_t lo;                             /* next window's lowest exponent (0: not placed) */
    float outside[QT_EXACT_SQ_SUB];         /* a window's elements outside it */
} qt_exact_sq;

/* Empties the bins. */
void qt_exact_sq_clear(qt_exact_sq *q);
/* Adds x[i]^2 for i < n exactly: same value as qt_exact_add_prod(a, x[i], x[i]) for each i
 * once qt_exact_sq_flush has run. Deposits into a whenever the bins could overflow; inf and
 * NaN go to a's special flags directly. Reads x. */
void qt_exact_sq_add(qt_exact_sq *q, qt_exact *a, const float *x, int64_t n);
/* x[i] = x[i] / d (float division) for i < n, then the squares of the quotients as
 * qt_exact_sq_add adds them, in one pass. Writes x. */
void qt_exact_sq_add_div(qt_exact_sq *q, qt_exact *a, float *x, int64_t n, float d);
/* The same squares of the same quotients (so the same value), x not written: the one-pass
 * norm of a gradient whose division is left to its reader (AdamW). Reads x. */
void qt_exact_sq_add_quot(qt_exact_sq *q, qt_exact *a, const float *x, int64_t n, float d);
/* How those quotients are computed: when d is a power of two whose inverse is a normal
 * float, *inv = 1/d and returns 1 (x * inv is the correctly rounded x / d: the same bits);
 * else *inv = d and returns 0 (x / d). Every reader that divides a gradient left
 * undivided by qt_exact_sq_add_quot computes its quotients this way. */
int qt_exact_div_inverse(float d, float *inv);
/* Moves everything still held in the bins into a and empties them. */
void qt_exact_sq_flush(qt_exact_sq *q, qt_exact *a);
/* The sum, correctly rounded to double. Normalises a (does not change its value). */
double qt_exact_value(qt_exact *a);

#endif
