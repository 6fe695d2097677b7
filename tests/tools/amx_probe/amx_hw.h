/* amx_hw.h - the hardware side of the AMX probe: CPU identification, AMX availability
 * (CPUID leaf 7, XCR0, the Linux permission ARCH_REQ_XCOMP_PERM for XTILEDATA) and one
 * TDPBF16PS sequence on caller buffers under a chosen MXCSR (docs/amx.md).
 * Invariants: only amx_hw.c holds AMX instructions, in functions with target attributes (the
 * rest of the build keeps its flags); every sequence ends with TILERELEASE and restores MXCSR.
 */
#ifndef QT_AMX_HW_H
#define QT_AMX_HW_H

#include <stdint.h>

/* One line: vendor, family / model / stepping (CPUID leaf 1, display values), the model name
 * and microcode revision (/proc/cpuinfo), and the AMX / AVX512_BF16 CPUID bits. */
void qt_amx_hw_cpu(char *buf, int cap);

/* 1 when TDPBF16PS can run here (CPUID AMX-TILE and AMX-BF16, the OS enables the tile state
 * in XCR0, and the kernel granted XTILEDATA); else 0 with the reason in why[cap]. Requests
 * the permission once (the first call). On success why holds the palette 1 limits. */
int qt_amx_hw_available(char *why, int cap);

/* nchunks TDPBF16PS on one tile configuration: C (rows x cols fp32 bits at c, row stride
 * ldc elements) loaded once, then for chunk j: A rows (rows x kchunk pairs at a + 2 kchunk j,
 * row stride lda bf16) and B (kchunk x cols pairs at b + kchunk j ldb, row stride ldb bf16),
 * C += A B; C stored back. MXCSR is set to mxcsr around the instructions and restored.
 * rows, cols, kchunk in 1..16. Returns 0, or -1 without AMX (nothing done). */
int qt_amx_hw_run(int rows, int cols, int kchunk, int nchunks, uint32_t *c, int ldc,
                  const uint16_t *a, int lda, const uint16_t *b, int ldb, unsigned mxcsr);

#endif
