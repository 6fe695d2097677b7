/* ckpt_common.h - helpers every checkpoint reader and writer shares (ckpt_common.c): the
 * on-disk names of qtrain's state, the load record, the data hash saves record, the plan
 * check and the metadata integer parser. The state hash itself is public (qt_io.h).
 */
#ifndef QT_CKPT_COMMON_H
#define QT_CKPT_COMMON_H

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
/* The record of the last load (qt_checkpoint_ident), filled by the loaders. */
qt_ckpt_ident *qt_ckpt_ident_mut(void);
/* The data hash saves record: 1 and "0x..." in out[24] when set, else 0. */
int qt_ckpt_data_hash(char *out);
/* Metadata value v (NULL = absent: *out = 0) of key in file path as a non-negative decimal
 * integer; QT_E_FORMAT naming file, key and value otherwise. */
int qt_ckpt_meta_int(const char *path, const char *key, const char *v, int64_t *out);

#endif
