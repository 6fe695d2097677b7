/* ckpt_dir.h - the sharded checkpoint directory writer's check of a save= directory
 * (ckpt_dir.c; its writer, qt_checkpoint_save_dir, is public in qt_io.h).
 */
#ifndef QT_CKPT_DIR_H
#define QT_CKPT_DIR_H

#include <stdint.h>
#include "qt_plan.h"

/* The save= check of a sharded checkpoint directory (qt_checkpoint_check_target). */
int qt_ckpt_check_dir_target(const char *key, const char *path, int overwrite);
/* Tensor data bytes of the largest shard a save with shards of at most shard_bytes writes
 * (the packing of qt_checkpoint_save_dir), or -1 when it cannot pack (its error then comes
 * from the save). */
int64_t qt_ckpt_dir_largest(const qt_plan *p, int64_t shard_bytes);
/* From a signal handler that ends the process (async-signal-safe): remove the temporary
 * directory DIR.tmp.<pid> of a save in progress on this rank (the half-written checkpoint,
 * or after the swap the previous one); 1 if one was removed, else 0. */
int qt_ckpt_dir_signal(void);

#endif
