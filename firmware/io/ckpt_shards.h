/* ckpt_shards.h - the loader of checkpoints split over several safetensors files
 * (model-0000K-of-0000N.safetensors + model.safetensors.index.json, qtrain's optimizer-*
 * files beside them), ckpt_shards.c. The helpers it shares with checkpoint.c and ckpt_dir.c
 * are in ckpt_common.h.
 */
#ifndef QT_CKPT_SHARDS_H
#define QT_CKPT_SHARDS_H

#include <stdint.h>
#include "qt_plan.h"
#include "qt_io.h"

/* Load the parameters listed by the index file `index_path` from its shards (and, with
 * want_optimizer, the Adam moments listed by optimizer.safetensors.index.json beside it,
 * when its state hash is this plan's) into this rank's parts of the plan's regions.
 * All-or-nothing: the weight maps, every shard's header and every tensor's dtype, shape
 * and values are validated before the first byte is written. *step_out / *data_pos_out
 * (not NULL) receive the saved step and data position when the moments loaded, else 0. */
int qt_ckpt_load_index(const qt_plan *p, const char *index_path, int want_optimizer,
                       int64_t *step_out, int64_t *data_pos_out);

#endif
