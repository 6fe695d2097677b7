/* vdp_cases.c - the VDPBF16PS discriminating cases (contract: vdp_cases.h). Derivations:
 * V1 hi first: 0 + 2^24 + 1 ties to 2^24, - 2^24 + 1 = 1; lo first ends at 0; exact 2.
 * V3 2^24 + 1 ties to 2^24 twice; C entering last (the SDM's AMX text) gives 2^24 + 2.
 * V6 -0 + (-1)(0) = -0 twice; two chains from +0 then C + sum would give +0.
 * V7 the bf16 denormal 2^-133 times 2^126 is 2^-7 without DAZ.
 * V8 C = -denormal: DAZ gives -0, then +0 + -0 = +0.
 * V8b C = 0x007fffff plus 2^-126: 0x00800000 with DAZ, 0x00ffffff without (exact).
 * N1-N5 the SDM's priority: src1 lo, src2 lo, src1 hi, src2 hi, srcdest; N6/N7 signalling
 * NaNs are quieted; N8 inf * 0 is x86's default NaN.
 */
#include "vdp_cases.h"

static const qt_vdp_case qt_vdp_cases[] = {
    {"V1", "order: hi [2^24, -2^24], lo [1, 1], C 0", 2, {0x3f80, 0x3f80}, {0x4b80, 0xcb80},
     {0x3f80, 0x3f80}, {0x3f80, 0x3f80}, 0x00000000u, 0x3f800000u, 0x00000000u, "lo first"},
    {"V3", "where C enters: hi = lo = 1, C 2^24", 1, {0x3f80}, {0x3f80}, {0x3f80}, {0x3f80},
     0x4b800000u, 0x4b800000u, 0x4b800001u, "C added last"},
    {"V6", "signed zeros: (-1)(0) twice, C -0", 1, {0xbf80}, {0xbf80}, {0x0000}, {0x0000},
     0x80000000u, 0x80000000u, 0x00000000u, "chains from +0, C last"},
    {"V7", "DAZ on bf16: 0x0001 * 2^126 (hi)", 1, {0}, {0x0001}, {0}, {0x7e80}, 0x00000000u,
     0x00000000u, 0x3c000000u, "no DAZ"},
    {"V8", "DAZ on C: C 0x80000001, products +0", 1, {0}, {0}, {0x3f80}, {0x3f80}, 0x80000001u,
     0x00000000u, 0x00000000u, "no DAZ (the same here)"},
    {"V8b", "DAZ on C: C 0x007fffff, hi 2^-63 * 2^-63", 1, {0}, {0x2000}, {0}, {0x2000},
     0x007fffffu, 0x00800000u, 0x00ffffffu, "no DAZ"},
    {"N1", "NaN in all five: lo a 7fc1, lo b 7fc2, hi a 7fc3, hi b 7fc4, C 7fc55555", 1,
     {0x7fc1}, {0x7fc3}, {0x7fc2}, {0x7fc4}, 0x7fc55555u, 0x7fc10000u, 0x7fc55555u, "C first"},
    {"N2", "lo a finite", 1, {0x3f80}, {0x7fc3}, {0x7fc2}, {0x7fc4}, 0x7fc55555u, 0x7fc20000u,
     0x7fc30000u, "hi first"},
    {"N3", "lo a, lo b finite", 1, {0x3f80}, {0x7fc3}, {0x3f80}, {0x7fc4}, 0x7fc55555u,
     0x7fc30000u, 0x7fc55555u, "C first"},
    {"N4", "lo pair and hi a finite", 1, {0x3f80}, {0x3f80}, {0x3f80}, {0x7fc4}, 0x7fc55555u,
     0x7fc40000u, 0x7fc55555u, "C first"},
    {"N5", "only C NaN", 1, {0x3f80}, {0x3f80}, {0x3f80}, {0x3f80}, 0x7fc55555u, 0x7fc55555u,
     0xffc00000u, "default NaN"},
    {"N6", "bf16 sNaN 0x7f81 (lo a)", 1, {0x7f81}, {0}, {0x3f80}, {0}, 0x00000000u,
     0x7fc10000u, 0x7f810000u, "not quieted"},
    {"N7", "fp32 sNaN C 0x7fa00001", 1, {0x3f80}, {0x3f80}, {0x3f80}, {0x3f80}, 0x7fa00001u,
     0x7fe00001u, 0x7fa00001u, "not quieted"},
    {"N8", "inf * 0 (hi)", 1, {0}, {0x7f80}, {0}, {0}, 0x00000000u, 0xffc00000u, 0x7fc00000u,
     "positive default NaN"},
};

int qt_vdp_case_count(void) { return (int)(sizeof qt_vdp_cases / sizeof qt_vdp_cases[0]); }

const qt_vdp_case *qt_vdp_case_get(int i)
{
    return i >= 0 && i < qt_vdp_case_count() ? &qt_vdp_cases[i] : 0;
}
