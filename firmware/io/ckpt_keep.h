/* ckpt_keep.h - the carried multi-token-prediction head (plans with mtp_keep_layers > 0 and
 * no trained head; docs/model.md 1.8 "nothing lost"): a loaded checkpoint's mtp.* tensors
 * kept verbatim in the plan's region (qt_ckpt_keep.h) and written unchanged into every
 * save. Called by checkpoint.c (single file), ckpt_shards.c (sharded load) and ckpt_dir.c
 * (directory save); every function is a no-op returning QT_OK / 0 on other plans. */
#ifndef QT_CKPT_KEEP_IO_H
#define QT_CKPT_KEEP_IO_H

#include <stdint.h>
#include "qt_plan.h"
#include "safetensors.h"

/* Whether the plan carries a head (loaded mtp.* tensors are kept, not skipped). */
int qt_ckpt_keep_on(const qt_plan *p);
/* Starts a load's check: no bytes counted yet (the region is untouched until _begin). */
void qt_ckpt_keep_check_start(void);
/* Checks that file tensor t (named mtp.*) can be kept: a depth below mtp_keep_layers, a
 * float dtype of at most 4 bytes, and room left in the region. QT_E_MISMATCH naming the
 * file, tensor and value otherwise. */
int qt_ckpt_keep_check(const qt_plan *p, const qt_st_tensor *t, const char *path);
/* Empties the region (a load whose file holds no mtp.*: nothing is carried). */
void qt_ckpt_keep_begin(const qt_plan *p);
/* Appends file tensor t of open file h (checked by _check) to the region. */
void qt_ckpt_keep_add(const qt_plan *p, int h, const qt_st_tensor *t);
/* The tensors carried now. */
int32_t qt_ckpt_keep_count(const qt_plan *p);
/* Record i's name, dtype, shape and bytes (i < qt_ckpt_keep_count). */
const char *qt_ckpt_keep_at(const qt_plan *p, int32_t i, int32_t *dtype, int32_t *ndim,
                            const int64_t **shape, const void **bytes, int64_t *nbytes);
/* Save: declares every carried tensor (qt_st_wadd), then writes their bytes (qt_st_wwrite),
 * in record order. */
int qt_ckpt_keep_declare(const qt_plan *p);
int qt_ckpt_keep_write(const qt_plan *p);

#endif
