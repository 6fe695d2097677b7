/* amx_hw.c - the AMX probe's hardware side (contract: amx_hw.h): CPUID / XCR0 / arch_prctl
 * checks and TDPBF16PS through inline assembly (LDTILECFG, TILELOADD, TDPBF16PS, TILESTORED,
 * TILERELEASE on tmm0 = C, tmm1 = A, tmm2 = B) in functions carrying
 * target("amx-tile,amx-bf16"), so this file builds with the project's flags on any x86-64
 * CPU and runs its AMX code only after qt_amx_hw_available said yes.
 * Invariants: no heap; the tile configuration is a local 64-byte block; MXCSR restored.
 */
#include "amx_hw.h"
#include <cpuid.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define QT_ARCH_GET_XCOMP_PERM 0x1022
#define QT_ARCH_REQ_XCOMP_PERM 0x1023
#define QT_XFEATURE_XTILEDATA 18

static void qt_amx_proc_field(const char *key, char *out, int cap)
{
    out[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    const size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) != 0 || (line[kl] != ' ' && line[kl] != '\t' && line[kl] != ':'))
            continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ') v++;
        snprintf(out, (size_t)cap, "%s", v);
        out[strcspn(out, "\n")] = 0;
        break;
    }
    fclose(f);
}

void qt_amx_hw_cpu(char *buf, int cap)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    char vendor[13] = {0};
    __get_cpuid(0, &a, &b, &c, &d);
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
    __get_cpuid(1, &a, &b, &c, &d);
    const unsigned fam = (a >> 8) & 0xf, xfam = (a >> 20) & 0xff, mod = (a >> 4) & 0xf,
                   xmod = (a >> 16) & 0xf, step = a & 0xf;
    const unsigned family = fam == 0xf ? fam + xfam : fam;
    const unsigned model = (fam == 0x6 || fam == 0xf) ? (xmod << 4 | mod) : mod;
    unsigned e7 = 0, e71a = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) e7 = d;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) e71a = a;
    char name[128], ucode[64];
    qt_amx_proc_field("model name", name, sizeof name);
    qt_amx_proc_field("microcode", ucode, sizeof ucode);
    snprintf(buf, (size_t)cap,
             "%s family %u (0x%x) model %u (0x%x) stepping %u, \"%s\", microcode %s; CPUID "
             "AMX-TILE %u AMX-BF16 %u AMX-INT8 %u AVX512_BF16 %u",
             vendor, family, family, model, model, step, name[0] ? name : "?",
             ucode[0] ? ucode : "? (not in /proc/cpuinfo)", (e7 >> 24) & 1u, (e7 >> 22) & 1u,
             (e7 >> 25) & 1u, (e71a >> 5) & 1u);
}

static int qt_amx_ok = -1; /* -1 unknown, 0 no, 1 yes (set by the first availability call) */

int qt_amx_hw_available(char *why, int cap)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1u) || !((d >> 22) & 1u)) {
        snprintf(why, (size_t)cap, "this CPU has no AMX-BF16 (CPUID.(EAX=7,ECX=0):EDX bit 24 "
                 "AMX-TILE = %u, bit 22 AMX-BF16 = %u)", (d >> 24) & 1u, (d >> 22) & 1u);
        return qt_amx_ok = 0;
    }
    __get_cpuid(1, &a, &b, &c, &d);
    if (!((c >> 27) & 1u)) {
        snprintf(why, (size_t)cap, "CPUID reports AMX but OSXSAVE is off (CPUID.1:ECX bit 27)");
        return qt_amx_ok = 0;
    }
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3u) != 3u) {
        snprintf(why, (size_t)cap, "CPUID reports AMX but the OS does not enable the tile state "
                 "(XCR0 = 0x%08x%08x, bits 17 XTILECFG and 18 XTILEDATA)", hi, lo);
        return qt_amx_ok = 0;
    }
    if (syscall(SYS_arch_prctl, QT_ARCH_REQ_XCOMP_PERM, QT_XFEATURE_XTILEDATA) != 0) {
        snprintf(why, (size_t)cap, "the kernel refused arch_prctl(ARCH_REQ_XCOMP_PERM, "
                 "XFEATURE_XTILEDATA): %s (Linux >= 5.16 is needed)", strerror(errno));
        return qt_amx_ok = 0;
    }
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, QT_ARCH_GET_XCOMP_PERM, &perm) != 0 ||
        !((perm >> QT_XFEATURE_XTILEDATA) & 1u)) {
        snprintf(why, (size_t)cap, "arch_prctl(ARCH_GET_XCOMP_PERM) does not show XTILEDATA "
                 "(0x%lx)", perm);
        return qt_amx_ok = 0;
    }
    /* palette 1's limits (CPUID leaf 0x1d subleaf 1, leaf 0x1e subleaf 0) */
    unsigned p1a = 0, p1b = 0, p1c = 0, t = 0, tb = 0, tc = 0, td = 0;
    __get_cpuid_count(0x1d, 1, &p1a, &p1b, &p1c, &d);
    __get_cpuid_count(0x1e, 0, &t, &tb, &tc, &td);
    snprintf(why, (size_t)cap, "AMX usable: palette 1 %u bytes a tile, %u bytes a row, %u tile "
             "names, %u rows; TMUL max K %u rows, max N %u bytes", p1a >> 16, p1b & 0xffffu,
             p1b >> 16, p1c & 0xffffu, tb & 0xffu, (tb >> 8) & 0xffffu);
    return qt_amx_ok = 1;
}

__attribute__((target("amx-tile,amx-bf16"), noinline)) static void
qt_amx_hw_seq(const uint8_t *cfg, int nchunks, int kchunk, uint32_t *c, long sc,
              const uint16_t *a, long sa, const uint16_t *b, long sb, long ldb, unsigned mxcsr)
{
    unsigned saved;
    __asm__ volatile("ldtilecfg (%0)" ::"r"(cfg) : "memory");
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm0" ::"r"(c), "r"(sc) : "memory");
    for (int j = 0; j < nchunks; j++) {
        const uint16_t *aj = a + (long)2 * kchunk * j, *bj = b + (long)kchunk * j * ldb;
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm1" ::"r"(aj), "r"(sa) : "memory");
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm2" ::"r"(bj), "r"(sb) : "memory");
        __asm__ volatile("stmxcsr %0" : "=m"(saved));
        __asm__ volatile("ldmxcsr %0" ::"m"(mxcsr));
        __asm__ volatile("tdpbf16ps %%tmm2, %%tmm1, %%tmm0" ::: "memory");
        __asm__ volatile("ldmxcsr %0" ::"m"(saved));
    }
    __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(c), "r"(sc) : "memory");
    __asm__ volatile("tilerelease" ::: "memory");
}

int qt_amx_hw_run(int rows, int cols, int kchunk, int nchunks, uint32_t *c, int ldc,
                  const uint16_t *a, int lda, const uint16_t *b, int ldb, unsigned mxcsr)
{
    if (qt_amx_ok != 1 || rows < 1 || rows > 16 || cols < 1 || cols > 16 || kchunk < 1 ||
        kchunk > 16 || nchunks < 1)
        return -1;
    /* palette 1: byte 0 palette, 16 + 2 i colsb of tile i, 48 + i rows of tile i */
    _Alignas(64) uint8_t cfg[64];
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1;
    const uint16_t colsb[3] = {(uint16_t)(4 * cols), (uint16_t)(4 * kchunk), (uint16_t)(4 * cols)};
    const uint8_t nrows[3] = {(uint8_t)rows, (uint8_t)rows, (uint8_t)kchunk};
    for (int i = 0; i < 3; i++) {
        memcpy(cfg + 16 + 2 * i, &colsb[i], 2);
        cfg[48 + i] = nrows[i];
    }
    qt_amx_hw_seq(cfg, nchunks, kchunk, c, (long)ldc * 4, a, (long)lda * 2, b, (long)ldb * 2,
                  ldb, mxcsr);
    return 0;
}
