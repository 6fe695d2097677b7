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
#define QT_CKPT_GRADS_CONTENT "gradients" /* __metadata__ content of a dump_grads= file */
#define QT_CKPT_OPT_M "optimizer.m."       /* name prefixes of the Adam moments */
#define QT_CKPT_OPT_V "optimizer.v."

/* Refuse plans the checkpoint code cannot map (shapes that do not fit the layouts, a mesh
 * layout ckpt_gather.c cannot gather); QT_OK or QT_E_PLAN with a message. The same verdict
 * on every rank of a mesh. */
int qt_ckpt_check_plan(const qt_plan *p, const char *path);
/* A parameter streamed to a file window by window (rows of its first dimension,
 * qt_ckpt_gather_rows): the window held now. Zero it before each parameter. */
typedef struct qt_ckpt_win {
    int64_t w0, w1;                 /* global rows held (w1 = 0: none yet) */
    const float *base;              /* global element w0 x row at base[0] */
} qt_ckpt_win;
/* Save side, collective: piece k of parameter i of region src in file order. Gathers the
 * windows the piece's rows lie in (the same sequence on every rank: call it on every rank
 * for every piece, with the parameter's qt_ckpt_win) and, when write, appends the piece's
 * data to the open safetensors file (qt_st_wwrite), the bytes of the whole-tensor write;
 * write == QT_CKPT_SEND (a pipeline stage's first rank) appends them to the stream to the
 * writer instead (qt_ckpp_put, ckpt_pp.h). Returns a gather or send failure (the job must
 * stop); a write error goes to *wrc (nothing more is written once it is set). */
#define QT_CKPT_SEND 2
int qt_ckpt_save_piece(const qt_plan *p, int src, int32_t i, int32_t k, int write, int *wrc,
                       qt_ckpt_win *w);
/* Elements of one row of the first dimension of parameter i in its global layout (>= 1). */
int64_t qt_ckpt_row_elems(const qt_plan *p, int32_t i);
/* The record of the last load (qt_checkpoint_ident), filled by the loaders. */
qt_ckpt_ident *qt_ckpt_ident_mut(void);
/* A load (QT_LOAD_RESUME_ANY, allow_state_change=1) takes the moments and the step of
 * `path` although its `kind` ("state hash", or "plan hash" for a file without one) `was`
 * is not this plan's `now`: records it in the load record (state_changed) and writes the
 * note rank 0 prints into note[n]. */
void qt_ckpt_state_change(const char *path, const char *kind, const char *was,
                          const char *now, char *note, size_t n);
/* The end of allow_state_change=1's refusal of a checkpoint without optimizer state: what a
 * load without the key does with it (a qtrain checkpoint, `fmt` QT_CKPT_FORMAT, needs
 * load_weights_only=1; another file's weights load from step 0). */
const char *qt_ckpt_no_state_hint(const char *fmt);
/* The data hash saves record: 1 and "0x..." in out[24] when set, else 0. */
int qt_ckpt_data_hash(char *out);
/* "data_holdout" for a save's metadata (decimal, into out[24]); 0 when no windows are held
 * out (the key is then not written: such checkpoints' bytes are unchanged). */
int qt_ckpt_data_holdout(char *out);
/* "dtype" for a save's metadata: "bfloat16" for a bf16 plan, NULL for float32 (the key is
 * then not written: every fp32 checkpoint's bytes are unchanged; absent reads as float32).
 * Not in the state hash: both keep fp32 masters and moments, so the state resumes across a
 * change, but not bit-exactly (main.c notes it). */
const char *qt_ckpt_dtype_meta(const qt_plan *p);
/* Metadata value v (NULL = absent: *out = 0) of key in file path as a non-negative decimal
 * integer; QT_E_FORMAT naming file, key and value otherwise. */
int qt_ckpt_meta_int(const char *path, const char *key, const char *v, int64_t *out);

#endif
