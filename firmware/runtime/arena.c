/* arena.c - arena validation, mapping, huge-page backing and prefault (see qt_arena.h).
 *
 * Why: first-touch faults cost ~15 us per 4 KiB page on this class of VM, so the arena is
 * faulted in once at start-up, on 2 MiB pages where possible, and never mapped or unmapped
 * again. The qtrain binaries do not have the arena mapped by exec (linker/arena_unload.c):
 * an exec-time mapping that does not fit RLIMIT_AS is a bare SIGSEGV before main. So the
 * first qt_arena_init checks the section's size against RLIMIT_AS (with what is already
 * mapped) and MemAvailable, then maps the section's address range itself with
 * MAP_FIXED_NOREPLACE (never over anything else); every failure is a message naming the
 * sizes. Binaries whose arena exec did map (the unit tests) keep it: then a hugetlb mapping
 * replaces the range only before anything has written to it (no data can be lost), and a
 * failed hugetlb mapping is replaced by fresh zero pages, which is what the section held.
 * No heap: /proc and /sys are read with open/read into a static buffer.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <elf.h>
#include <errno.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "qt_arena.h"
#include "qt_err.h"
#ifndef QT_MUSL
#include <stddef.h> /* hugetlbfs.h uses size_t without including it */
#include <hugetlbfs.h>
#endif

extern unsigned char __qt_arena_start[];
extern unsigned char __qt_arena_end[];
/* The section can be larger than 2 GiB (the bench plan's is), so its end may lie beyond the
 * reach of a 32-bit PC-relative address. The bounds are read through 64-bit pointers held
 * in data (absolute relocations) instead of being addressed directly. */
static unsigned char *const volatile qt_arena_lo = __qt_arena_start;
static unsigned char *const volatile qt_arena_hi = __qt_arena_end;

#define QT_PAGE_4K 4096u
/* The Linux ABI value; older C library headers (musl 1.2.3) lack the name. */
#ifdef MADV_POPULATE_WRITE
#define QT_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define QT_MADV_POPULATE_WRITE 23
#endif

static struct {
    int backed;
    enum qt_arena_mode mode;
    enum qt_arena_pages pages;  /* the policy qt_arena_set_pages chose (default auto) */
    double prefault_s;
    int populate;  /* 1: the last prefault was MADV_POPULATE_WRITE, 0: the touch loop */
    long long small_bytes;   /* of a THP arena: bytes populated on 4 KiB pages (auto) */
    double thp_gbps;         /* of a THP arena: huge-page population rate, GB/s */
    char buf[8192];
    unsigned char resident[4096];  /* mincore vector, one chunk of pages at a time */
} qt_arena_state;

static double qt_arena_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Reads a small text file into the static buffer; returns its length or -1. */
static long qt_arena_slurp(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    long n = 0;
    while (n < (long)sizeof qt_arena_state.buf - 1) {
        ssize_t r = read(fd, qt_arena_state.buf + n, sizeof qt_arena_state.buf - 1 - (size_t)n);
        if (r <= 0) break;
        n += r;
    }
    close(fd);
    qt_arena_state.buf[n] = 0;
    return n;
}

static int qt_arena_thp_allowed(void)
{
    if (qt_arena_slurp("/sys/kernel/mm/transparent_hugepage/enabled") < 0) return 0;
    return strstr(qt_arena_state.buf, "[never]") == NULL;
}

/* The number after "key:" in a /proc file (meminfo, status); -1 if absent. */
static long long qt_arena_proc_value(const char *path, const char *key)
{
    if (qt_arena_slurp(path) < 0) return -1;
    const char *s = strstr(qt_arena_state.buf, key);
    if (!s) return -1;
    s += strlen(key);
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return -1;
    long long v = 0;
    while (*s >= '0' && *s <= '9' && v < (1ll << 50)) v = v * 10 + (*s++ - '0');
    return v;
}

#ifndef QT_MUSL
static long long qt_arena_hugepages_free(void)
{
    long long v = qt_arena_proc_value("/proc/meminfo", "HugePages_Free:");
    return v < 0 ? 0 : v;
}

/* 1 if hugetlb pages of the arena's alignment can back len bytes. */
static int qt_arena_hugetlb_fits(size_t len)
{
    /* libhugetlbfs names the kernel's default huge page size; the section is aligned and
     * padded for 2 MiB pages (linker/arena.ld), so any other default is not used. */
    return gethugepagesize() == (long)QT_ARENA_ALIGN &&
           (unsigned long long)qt_arena_hugepages_free() * QT_ARENA_ALIGN >= len;
}

/* 1 if no page of [base, base+len) is resident, i.e. nothing can have been written there
 * (a unit-test binary may have used another plan's arena in the section before). */
static int qt_arena_untouched(unsigned char *base, size_t len)
{
    const size_t chunk = sizeof qt_arena_state.resident * QT_PAGE_4K;
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        if (mincore(base + off, n, qt_arena_state.resident) != 0) return 0;
        for (size_t i = 0; i < (n + QT_PAGE_4K - 1) / QT_PAGE_4K; i++)
            if (qt_arena_state.resident[i] & 1u) return 0;
    }
    return 1;
}

static int qt_arena_try_hugetlb(unsigned char *base, size_t len)
{
    if (!qt_arena_hugetlb_fits(len)) return 0;
    if (!qt_arena_untouched(base, len)) return 0;
    void *r = mmap(base, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB, -1, 0);
    if (r == (void *)base) return 1;
    /* the old range may be gone after a failed MAP_FIXED: put zero pages back */
    r = mmap(base, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    return r == (void *)base ? 0 : -1;
}
#endif

int qt_arena_check_fit(const char *run, long long arena_bytes, long long map_bytes,
                       long long mapped_bytes, long long as_limit, long long mem_available)
{
    const double mib = 1024.0 * 1024.0;
    if (as_limit >= 0 && map_bytes > 0 &&
        (map_bytes > as_limit || mapped_bytes > as_limit - map_bytes)) {
        fprintf(stderr, "qtrain: plan %s: the arena needs %lld bytes (%.1f MiB), but the "
                "address-space limit RLIMIT_AS (ulimit -v) is %lld bytes (%.1f MiB) and %.1f "
                "MiB is already mapped; raise ulimit -v to at least %lld (KiB)\n", run,
                map_bytes, (double)map_bytes / mib, as_limit, (double)as_limit / mib,
                (double)mapped_bytes / mib, (mapped_bytes + map_bytes) / 1024 + 1024);
        return QT_E_PLAN;
    }
    if (mem_available >= 0 && arena_bytes > mem_available) {
        fprintf(stderr, "qtrain: plan %s: the arena needs %lld bytes (%.1f MiB), but "
                "MemAvailable in /proc/meminfo is %lld bytes (%.1f MiB); free memory or use "
                "a plan with a smaller arena\n", run, arena_bytes, (double)arena_bytes / mib,
                mem_available, (double)mem_available / mib);
        return QT_E_PLAN;
    }
    return QT_OK;
}

/* 1 if exec mapped addr: a PT_LOAD segment of this program covers it (a binary that
 * linker/arena_unload.c did not process). Read from the program headers (AT_PHDR), not
 * from what happens to be mapped there. */
static int qt_arena_exec_mapped(const unsigned char *addr)
{
    const Elf64_Phdr *ph = (const Elf64_Phdr *)getauxval(AT_PHDR);
    unsigned long n = getauxval(AT_PHNUM);
    if (!ph || !n)   /* no auxiliary vector: judge by what is mapped */
        return mincore((void *)addr, QT_PAGE_4K, qt_arena_state.resident) == 0 || errno != ENOMEM;
    uintptr_t bias = 0;   /* ET_EXEC has no PT_PHDR and no load bias */
    for (unsigned long i = 0; i < n; i++)
        if (ph[i].p_type == PT_PHDR) bias = (uintptr_t)ph - ph[i].p_vaddr;
    for (unsigned long i = 0; i < n; i++)
        if (ph[i].p_type == PT_LOAD && (uintptr_t)addr >= bias + ph[i].p_vaddr &&
            (uintptr_t)addr < bias + ph[i].p_vaddr + ph[i].p_memsz)
            return 1;
    return 0;
}

/* Checks the limits, then maps [base, base+len), which exec left unmapped. */
static int qt_arena_map(const qt_plan *p, unsigned char *base, size_t len)
{
    const double mib = 1024.0 * 1024.0;
    int huge = 0;
#ifndef QT_MUSL
    huge = qt_arena_hugetlb_fits(len);
#endif
    struct rlimit rl;
    long long as_limit = -1, mapped = 0, avail = -1;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        as_limit = rl.rlim_cur > (rlim_t)INT64_MAX ? INT64_MAX : (long long)rl.rlim_cur;
        long long vm_kib = qt_arena_proc_value("/proc/self/status", "VmSize:");
        mapped = vm_kib > 0 ? vm_kib * 1024 : 0;
    }
    if (!huge) {   /* hugetlb pages come from their own reserved pool */
        long long kib = qt_arena_proc_value("/proc/meminfo", "MemAvailable:");
        avail = kib >= 0 ? kib * 1024 : -1;
    }
    int rc = qt_arena_check_fit(p->run_name, (long long)len, (long long)len, mapped, as_limit,
                                avail);
    if (rc) return rc;
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
    void *r = MAP_FAILED;
#ifndef QT_MUSL
    if (huge) {
        r = mmap(base, len, PROT_READ | PROT_WRITE, flags | MAP_HUGETLB, -1, 0);
        if (r == (void *)base) {
            qt_arena_state.mode = QT_ARENA_HUGETLB;
            return QT_OK;
        }
        if (r != MAP_FAILED) munmap(r, len);   /* a kernel that ignored NOREPLACE */
    }
#endif
    r = mmap(base, len, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (r != (void *)base) {
        int e = r == MAP_FAILED ? errno : EEXIST;
        if (r != MAP_FAILED) munmap(r, len);
        fprintf(stderr, "qtrain: plan %s: cannot map the arena, %lld bytes (%.1f MiB) at %p: "
                "%s%s\n", p->run_name, (long long)len, (double)len / mib, (void *)base,
                strerror(e), e == EEXIST ? " (the address range is already in use)" : "");
        return QT_E_PLAN;
    }
    if (qt_arena_thp_allowed() && madvise(base, len, MADV_HUGEPAGE) == 0)
        qt_arena_state.mode = QT_ARENA_THP;
    return QT_OK;
}

static int qt_arena_back(const qt_plan *p)
{
    unsigned char *base = qt_arena_lo;
    size_t len = (size_t)(qt_arena_hi - qt_arena_lo);
    qt_arena_state.mode = QT_ARENA_4K;
    if (len == 0) return QT_OK;
    if (!qt_arena_exec_mapped(base)) return qt_arena_map(p, base, len);
    /* mapped by exec (a binary not processed by arena_unload): check what the prefault
     * will need, then move it to huge pages if it is still untouched */
    long long kib = qt_arena_proc_value("/proc/meminfo", "MemAvailable:");
    int rc = qt_arena_check_fit(p->run_name, (long long)p->arena_bytes, 0, 0, -1,
                                kib >= 0 ? kib * 1024 : -1);
    if (rc) return rc;
#ifndef QT_MUSL
    int h = qt_arena_try_hugetlb(base, len);
    if (h < 0) {
        fprintf(stderr, "arena: could not restore the mapping of [%p, +%zu) after a failed hugetlb map\n",
                (void *)base, len);
        return QT_E_PLAN;
    }
    if (h > 0) {
        qt_arena_state.mode = QT_ARENA_HUGETLB;
        return QT_OK;
    }
#endif
    if (qt_arena_thp_allowed() && madvise(base, len, MADV_HUGEPAGE) == 0)
        qt_arena_state.mode = QT_ARENA_THP;
    return QT_OK;
}

/* Prefault [a, a+n) writable in one call (Linux 5.14+): every page is faulted in as a
 * write would fault it (a THP region gets huge pages) without the access itself, so the
 * contents stay as they are. The touch loop it replaces reads then writes a byte of every
 * 4 KiB, which on 4 KiB pages faults twice per page (the zero page, then a private copy):
 * 0.5 GiB took 0.54 s touched and 0.19-0.20 s populated here. On huge pages both spend
 * their time zeroing pages, and on a VM whose host has taken the free memory back (free
 * page reporting) in the host's faults, which no guest-side order avoids (docs/bench.md,
 * 2026-12-01). Returns 1 when done, 0 where the kernel lacks it (then the caller touches). */
static int qt_arena_populate(unsigned char *a, int64_t n)
{
    if (n <= 0) return 1;
    return madvise(a, (size_t)n, QT_MADV_POPULATE_WRITE) == 0;
}

int qt_arena_keep_huge(long long huge_bytes, double huge_s)
{
    return huge_s < QT_ARENA_COMPACT_S ||
           (double)huge_bytes >= QT_ARENA_COMPACT_GBPS * 1e9 * huge_s;
}

/* A THP arena under arena_pages=auto: populated in QT_ARENA_CHUNK pieces. Each huge page
 * may make the kernel compact memory first (THP defrag "madvise": direct compaction in the
 * faulting thread); where the page cache has fragmented the free memory this ran at
 * 0.05-0.1 GB/s here (the bench's 2 GiB arena in 20-48 s, 19 s of it system time, in
 * every run) against 2.4-4.9 GB/s otherwise. Once the huge pages have cost
 * QT_ARENA_COMPACT_S at a rate under QT_ARENA_COMPACT_GBPS (qt_arena_keep_huge), the rest
 * is advised MADV_NOHUGEPAGE and populated on 4 KiB pages (1.8-3.4 GB/s in the same
 * state; the bench model's steps took ~3% more CPU on them). Contents are unchanged either
 * way. Returns 1 when done, 0 where the kernel lacks MADV_POPULATE_WRITE (nothing was
 * populated then: its first call fails). */
static int qt_arena_populate_thp(unsigned char *a, int64_t n)
{
    const int64_t chunk = QT_ARENA_CHUNK;
    int64_t done = 0;
    double huge_s = 0.0;
    while (done < n) {
        const int64_t len = n - done < chunk ? n - done : chunk;
        const double t0 = qt_arena_now();
        if (!qt_arena_populate(a + done, len)) return 0;
        huge_s += qt_arena_now() - t0;
        done += len;
        if (done < n && !qt_arena_keep_huge((long long)done, huge_s) &&
            madvise(a + done, (size_t)(n - done), MADV_NOHUGEPAGE) == 0) {
            if (!qt_arena_populate(a + done, n - done)) return 0;
            qt_arena_state.small_bytes = (long long)(n - done);
            break;
        }
    }
    qt_arena_state.thp_gbps = huge_s > 0 ? (double)(n - qt_arena_state.small_bytes) / huge_s / 1e9 : 0.0;
    return 1;
}

int qt_arena_init(const qt_plan *p)
{
    const unsigned char *a = p->arena;
    if (!a || p->arena_bytes <= 0 || a < qt_arena_lo ||
        p->arena_bytes > qt_arena_hi - a) {
        fprintf(stderr, "plan %s: arena [%p, +%lld) is not inside section .qt_arena [%p, %p) "
                "(link with linker/arena.ld; declare it in .bss.qt_arena)\n", p->run_name,
                (const void *)a, (long long)p->arena_bytes, (void *)qt_arena_lo,
                (void *)qt_arena_hi);
        return QT_E_PLAN;
    }
    if (((uintptr_t)a & (QT_ARENA_ALIGN - 1)) != 0) {
        fprintf(stderr, "plan %s: arena %p is not 2 MiB aligned\n", p->run_name, (const void *)a);
        return QT_E_PLAN;
    }
    if (!qt_arena_state.backed) {
        int rc = qt_arena_back(p);
        if (rc) return rc;
        qt_arena_state.backed = 1;
    }
    double t0 = qt_arena_now();
    qt_arena_state.small_bytes = 0;
    qt_arena_state.thp_gbps = 0.0;
    qt_arena_state.populate = qt_arena_state.mode == QT_ARENA_THP &&
                                      qt_arena_state.pages == QT_ARENA_PAGES_AUTO
                                  ? qt_arena_populate_thp(p->arena, p->arena_bytes)
                                  : qt_arena_populate(p->arena, p->arena_bytes);
    if (!qt_arena_state.populate) {
        volatile unsigned char *q = p->arena;
        for (int64_t i = 0; i < p->arena_bytes; i += QT_PAGE_4K) q[i] = q[i];
    }
    qt_arena_state.prefault_s = qt_arena_now() - t0;
    return QT_OK;
}

enum qt_arena_mode qt_arena_mode(void)
{
    return qt_arena_state.mode;
}

const char *qt_arena_mode_name(void)
{
    switch (qt_arena_state.mode) {
    case QT_ARENA_HUGETLB: return "hugetlbfs";
    case QT_ARENA_THP: return "THP";
    default: return "4K";
    }
}

double qt_arena_prefault_seconds(void)
{
    return qt_arena_state.prefault_s;
}

const char *qt_arena_prefault_method(void)
{
    return qt_arena_state.populate ? "populate" : "touch";
}

void qt_arena_set_pages(enum qt_arena_pages pages)
{
    qt_arena_state.pages = pages;
}

long long qt_arena_small_bytes(double *thp_gbps)
{
    if (thp_gbps) *thp_gbps = qt_arena_state.thp_gbps;
    return qt_arena_state.small_bytes;
}
