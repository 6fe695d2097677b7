/* ckpt_shards.h - loading a Hugging Face checkpoint split over several safetensors files
 * (model-0000K-of-0000N.safetensors + model.safetensors.index.json), and the helpers it
 * shares with checkpoint.c.
 */
#ifndef QT_CKPT_SHARDS_H
#define QT_CKPT_SHARDS_H

#include <stdint.h>
#include "qt_plan.h"

/* Refuse plans the checkpoint code cannot map (shapes that do not fit the layouts, a mesh
 * layout ckpt_gather.c cannot gather); QT_OK or QT_E_PLAN with a message. The same verdict
 * on every rank of a mesh. */
int qt_ckpt_check_plan(const qt_plan *p, const char *path);
/* Parameter i of the float region starting at byte region_offset of the arena. */
float *qt_ckpt_region(const qt_plan *p, int64_t region_offset, int32_t i);

/* Load the parameters listed by the index file `index_path` from its shards into the
 * plan's parameter region. All-or-nothing: the weight_map, every shard's header and every
 * tensor's dtype and shape are validated before the first byte is written. Optimizer
 * state is never read from a sharded checkpoint (a note says so when want_optimizer). */
int qt_ckpt_load_index(const qt_plan *p, const char *index_path, int want_optimizer);

#endif
