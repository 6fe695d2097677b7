/* ckpt_shards.h - checkpoints split over several safetensors files (model-0000K-of-0000N
 * .safetensors + model.safetensors.index.json, qtrain's optimizer-* files beside them):
 * the loader (ckpt_shards.c) and the helpers checkpoint.c, ckpt_dir.c and it share.
 */
#ifndef QT_CKPT_SHARDS_H
#define QT_CKPT_SHARDS_H

#include <stdint.h>
#include "qt_plan.h"
#include "qt_io.h"

#define QT_CKPT_FORMAT "qtrain-1"          /* __metadata__ format of files with state */
#define QT_CKPT_OPT_M "optimizer.m."       /* name prefixes of the Adam moments */
#define QT_CKPT_OPT_V "optimizer.v."

/* Refuse plans the checkpoint code cannot map (shapes that do not fit the layouts, a mesh
 * layout ckpt_gather.c cannot gather); QT_OK or QT_E_PLAN with a message. The same verdict
 * on every rank of a mesh. */
int qt_ckpt_check_plan(const qt_plan *p, const char *path);
/* Parameter i of the float region starting at byte region_offset of the arena. */
float *qt_ckpt_region(const qt_plan *p, int64_t region_offset, int32_t i);

/* Load the parameters listed by the index file `index_path` from its shards (and, with
 * want_optimizer, the Adam moments listed by optimizer.safetensors.index.json beside it,
 * when its state hash is this plan's) into this rank's parts of the plan's regions.
 * All-or-nothing: the weight maps, every shard's header and every tensor's dtype, shape
 * and values are validated before the first byte is written. *step_out / *data_pos_out
 * (not NULL) receive the saved step and data position when the moments loaded, else 0. */
int qt_ckpt_load_index(const qt_plan *p, const char *index_path, int want_optimizer,
                       int64_t *step_out, int64_t *data_pos_out);
/* checkpoint.c's record of the last load (qt_checkpoint_ident), filled by the loaders. */
qt_ckpt_ident *qt_ckpt_ident_mut(void);
/* The data hash saves record: 1 and "0x..." in out[24] when set, else 0. */
int qt_ckpt_data_hash(char *out);
/* The save= check of a sharded checkpoint directory (qt_checkpoint_check_target). */
int qt_ckpt_check_dir_target(const char *key, const char *path, int overwrite);
/* Metadata value v (NULL = absent: *out = 0) of key in file path as a non-negative decimal
 * integer; QT_E_FORMAT naming file, key and value otherwise. */
int qt_ckpt_meta_int(const char *path, const char *key, const char *v, int64_t *out);

#endif
