/* vdp_cases.h - the discriminating vectors of amx-bf16.md (T1, T3, T6-T8) and the NaN-priority
 * cases adapted to VDPBF16PS, whose order is the project's (firmware/kernels/bf16.h): per
 * instruction and fp32 lane, acc = step(a_hi, b_hi, acc), then acc = step(a_lo, b_lo, acc);
 * a chain of k instructions on one lane. want: the bits of that order (the SDM's text and
 * table); alt: what a differing arithmetic would give (named in alt_what).
 * Invariants: constant data only.
 */
#ifndef QT_VDP_CASES_H
#define QT_VDP_CASES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name, *what;
    int k;                              /* instructions in the chain, 1..2 */
    uint16_t alo[2], ahi[2], blo[2], bhi[2]; /* per instruction */
    uint32_t c, want, alt;
    const char *alt_what;
} qt_vdp_case;

int qt_vdp_case_count(void);
const qt_vdp_case *qt_vdp_case_get(int i);

#ifdef __cplusplus
}
#endif

#endif
