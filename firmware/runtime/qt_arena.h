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

/* Checks that the plan's arena lies inside the section and is 2 MiB aligned; on the first
 * call backs the whole (still untouched, zero) section with huge pages: hugetlb pages
 * (MAP_HUGETLB | MAP_FIXED, glibc build only) when enough are reserved, else transparent
 * huge pages (madvise), else 4 KiB pages; then prefaults the plan's arena by touching
 * every 4 KiB (values unchanged). Returns 0 or QT_E_PLAN (message printed). */
int qt_arena_init(const qt_plan *p);
/* Backing chosen by the first qt_arena_init. */
enum qt_arena_mode qt_arena_mode(void);
const char *qt_arena_mode_name(void);
/* Seconds the last prefault took. */
double qt_arena_prefault_seconds(void);

#endif
