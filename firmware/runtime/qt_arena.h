/* qt_arena.h - the static arena: section bounds check, huge-page backing, prefault.
 *
 * The arena arrays of generated plans live in the linker section .qt_arena
 * (linker/arena.ld, symbols __qt_arena_start/__qt_arena_end, both 2 MiB aligned).
 */
#ifndef QT_ARENA_H
#define QT_ARENA_H

#include <stdint.h>
#include "qt_plan.h"

enum qt_arena_mode { QT_ARENA_4K = 0, QT_ARENA_THP, QT_ARENA_HUGETLB };
/* qtrain's arena_pages=: auto (default) stops waiting for the kernel's compaction of huge
 * pages after QT_ARENA_COMPACT_S at under QT_ARENA_COMPACT_GBPS (the rest of a THP arena on
 * 4 KiB pages); huge keeps THP for the whole arena however long it takes. */
enum qt_arena_pages { QT_ARENA_PAGES_AUTO = 0, QT_ARENA_PAGES_HUGE };
#define QT_ARENA_CHUNK (64ll << 20)      /* THP population piece under auto, bytes */
#define QT_ARENA_COMPACT_S 2.0           /* seconds of huge-page population always allowed */
#define QT_ARENA_COMPACT_GBPS 0.5        /* below this rate after them: 4 KiB pages */

/* Checks that the plan's arena lies inside the section and is 2 MiB aligned; on the first
 * call backs the whole (still untouched, zero) section: when exec did not map it (qtrain
 * binaries, linker/arena_unload.c) it first checks the size against RLIMIT_AS and
 * MemAvailable, then maps it (MAP_FIXED_NOREPLACE); with hugetlb pages (MAP_HUGETLB, glibc
 * build only) when enough are reserved, else transparent huge pages (madvise), else 4 KiB
 * pages; then prefaults the plan's arena (values unchanged): MADV_POPULATE_WRITE (a THP
 * arena under QT_ARENA_PAGES_AUTO in QT_ARENA_CHUNK pieces, the rest on 4 KiB pages once
 * qt_arena_keep_huge says the kernel's compaction is too slow), or where the kernel lacks
 * it (before 5.14) a write of every 4 KiB of what it holds.
 * Returns 0 or QT_E_PLAN (message printed, naming the sizes and the limit). */
int qt_arena_init(const qt_plan *p);
/* The start-up fit test, on numbers (testable): map_bytes to be mapped must fit the
 * address-space limit as_limit together with mapped_bytes already mapped, and arena_bytes
 * to be prefaulted must not exceed mem_available. A limit < 0 is absent. Returns 0, or
 * QT_E_PLAN after one stderr line naming the plan `run`, the sizes and the limit. */
int qt_arena_check_fit(const char *run, long long arena_bytes, long long map_bytes,
                       long long mapped_bytes, long long as_limit, long long mem_available);
/* The page policy for the next qt_arena_init (before it; default QT_ARENA_PAGES_AUTO). */
void qt_arena_set_pages(enum qt_arena_pages pages);
/* 1 while a THP arena's population may go on asking for huge pages: huge_bytes populated in
 * huge_s seconds so far (under QT_ARENA_COMPACT_S, or at QT_ARENA_COMPACT_GBPS or more). */
int qt_arena_keep_huge(long long huge_bytes, double huge_s);
/* Of a THP arena's last prefault: bytes populated on 4 KiB pages (0 unless auto gave up
 * on huge pages), and the huge pages' population rate in GB/s (*thp_gbps, may be NULL). */
long long qt_arena_small_bytes(double *thp_gbps);
/* Backing chosen by the first qt_arena_init. */
enum qt_arena_mode qt_arena_mode(void);
const char *qt_arena_mode_name(void);
/* Seconds the last prefault took, and how: "populate" (MADV_POPULATE_WRITE) or "touch". */
double qt_arena_prefault_seconds(void);
const char *qt_arena_prefault_method(void);

#endif
