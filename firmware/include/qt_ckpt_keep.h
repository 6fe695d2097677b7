/* qt_ckpt_keep.h - the layout of the carried MTP head's region (qt_plan mtp_keep, plans
 * with mtp_keep_layers > 0 and no trained head; docs/model.md 1.8 "nothing lost"), shared
 * by configgen (which sizes it, config/mtp.c) and the firmware (which fills it on load= and
 * writes it on save=, firmware/io/ckpt_keep.c).
 *
 * Invariants: the region starts with one int64_t, the record count; then each record is a
 * qt_keep_rec followed by its nbytes of tensor data (the file's bytes, unconverted), padded
 * to a multiple of 8 bytes. Records keep the loaded file's tensor order (the file's order is
 * its header's, which for qtrain's own files is the plan order). The region's capacity is
 * QT_KEEP_BYTES(tensors, elements): room for `tensors` records whose elements are at most 4
 * bytes each (F32, BF16, F16), so any dtype a checkpoint holds the head in fits.
 */
#ifndef QT_CKPT_KEEP_H
#define QT_CKPT_KEEP_H

#include <stdint.h>

#define QT_KEEP_NAME_MAX 512   /* = QT_ST_NAME_MAX (safetensors.h) */
#define QT_KEEP_MAX_DIMS 8     /* = QT_ST_MAX_DIMS */

typedef struct qt_keep_rec {
    char name[QT_KEEP_NAME_MAX];
    int32_t dtype;                     /* enum qt_st_dtype */
    int32_t ndim;
    int64_t shape[QT_KEEP_MAX_DIMS];
    int64_t nbytes;
} qt_keep_rec;

/* bytes of the region for at most n tensors of e elements in all, each <= 4 bytes */
#define QT_KEEP_BYTES(n, e) \
    ((int64_t)sizeof(int64_t) + (int64_t)(n) * ((int64_t)sizeof(qt_keep_rec) + 8) + 4 * (int64_t)(e))

#endif
