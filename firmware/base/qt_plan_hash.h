/* qt_plan_hash.h - the plan hash, shared by configgen (which stores it in plan.c) and the
 * firmware (which recomputes it at start-up to refuse stale or hand-edited tables).
 */
#ifndef QT_PLAN_HASH_H
#define QT_PLAN_HASH_H

#include <stdint.h>
#include "qt_plan.h"

/* 64-bit FNV-1a over a canonical serialisation of every table and scalar of *p except the
 * hash itself and the arena pointer. Reads p only. */
uint64_t qt_plan_hash(const qt_plan *p);

#endif
