/* ckpt_map.h - how each canonical plan parameter is laid out on disk.
 *
 * The plan stores parameters under their Qwen3-Next Hugging Face names with fused experts
 * (mlp.experts.gate_up_proj [E,2I,d], mlp.experts.down_proj [E,d,I]). On disk one plan
 * parameter becomes one or more "pieces"; every piece is a list of rows of row_len floats,
 * and disk row r of the piece is plan row qt_ckpt_plan_row(piece, r) of the parameter
 * (a row is the last dimension, so every mapping is a row gather/scatter):
 *   - experts (both decoders, split layout): experts.E.gate_proj.weight [I,d] = gate_up rows
 *     E*2I + [0,I); up_proj [I,d] = rows E*2I + [I,2I); down_proj [d,I] = down rows E*d + r;
 *   - Qwen3.5 (decoder_block 1): prefix model.language_model. for everything under model.;
 *     in_proj_qkvz -> in_proj_qkv [Cc,d] (all q heads, all k heads, all v heads) and
 *     in_proj_z [Hv*Dv,d]; in_proj_ba -> in_proj_b [Hv,d] and in_proj_a [Hv,d], with the
 *     grouped row formulas of qt_ops.h;
 *   - linear_attn.conv1d.weight: on disk [C,1,K] (HF nn.Conv1d); a plan shape [C,K] is the
 *     same bytes. Loading accepts either shape.
 * With fused != 0 the experts keep their fused in-memory names and shapes (one piece).
 */
#ifndef QT_CKPT_MAP_H
#define QT_CKPT_MAP_H

#include <stdint.h>
#include "qt_plan.h"
#include "safetensors.h"

enum qt_ckpt_kind { QT_MAP_IDENT = 0, QT_MAP_ROWS, QT_MAP_QKV, QT_MAP_Z, QT_MAP_B, QT_MAP_A };

typedef struct qt_ckpt_piece {
    char name[QT_ST_NAME_MAX];      /* on-disk name (without any optimizer.m./v. prefix) */
    int32_t ndim;
    int64_t shape[QT_MAX_DIMS];     /* on-disk shape */
    int32_t alt_ndim;               /* another accepted on-disk shape, 0 if none */
    int64_t alt_shape[QT_MAX_DIMS];
    int64_t rows, row_len;          /* piece = rows x row_len floats */
    int32_t kind;                   /* enum qt_ckpt_kind */
    int64_t row0;                   /* QT_MAP_ROWS: first plan row */
    int64_t hk, dk, hv, dv;         /* GDN kinds: head counts and dims */
} qt_ckpt_piece;

/* 1 if parameter i is a fused expert tensor (has a split on-disk layout). */
int qt_ckpt_is_expert(const qt_plan *p, int32_t i);
/* The fused in-memory on-disk name of parameter i (decoder prefix applied) into out. */
void qt_ckpt_fused_name(const qt_plan *p, int32_t i, char *out, size_t n);
/* Number of pieces of parameter i; 0 with a message if the plan's shape does not fit the
 * layout (QT_E_PLAN is then the caller's error). */
int32_t qt_ckpt_count(const qt_plan *p, int32_t i, int fused);
/* Describe piece k (0 <= k < count) of parameter i. */
void qt_ckpt_piece_at(const qt_plan *p, int32_t i, int fused, int32_t k, qt_ckpt_piece *pc);
/* Plan row (index into the parameter viewed as rows of pc->row_len) of disk row r. */
int64_t qt_ckpt_plan_row(const qt_ckpt_piece *pc, int64_t r);
/* Reads the on-disk tensor t of piece pc (file h), converted to float, where it lands on
 * plan (global) elements [ga, gb) of the parameter (disk row r is plan row
 * qt_ckpt_plan_row(pc, r)): each such element g goes to win[g - ga]; nothing is read for
 * the rest. Returns the number of floats copied (0: the piece has none there). Writes win. */
int64_t qt_ckpt_copy_piece_window(int h, const qt_st_tensor *t, const qt_ckpt_piece *pc,
                                  float *win, int64_t ga, int64_t gb);
/* 1 when piece pc has plan elements in [ga, gb). Reads only pc. */
int qt_ckpt_piece_in_window(const qt_ckpt_piece *pc, int64_t ga, int64_t gb);
/* "[a,b,..]" into out (n bytes). */
void qt_ckpt_fmt_shape(char *out, size_t n, int32_t ndim, const int64_t *s);
/* Check file tensor t (NULL = absent) named `name` in `file` against piece pc: present,
 * F32/BF16/F16, shape or alternative shape. QT_OK or QT_E_MISMATCH with a message. */
int qt_ckpt_check_tensor(const qt_ckpt_piece *pc, const qt_st_tensor *t, const char *file,
                         const char *name);
/* Every element of file tensor t, as float (F64 beyond float range becomes inf), must be
 * finite and, with nonneg, not negative (-0 is allowed). QT_OK, or QT_E_FORMAT with a
 * message naming file, tensor and the first bad element's index and value. Reads only. */
int qt_ckpt_check_values(int h, const qt_st_tensor *t, const char *file, const char *name,
                         int nonneg);
/* 1 if a file tensor that is no plan parameter is skipped rather than an error: mtp.*
 * (then *is_mtp = 1) and, for Qwen3.5, model.visual.*. */
int qt_ckpt_skippable(const qt_plan *p, const char *name, int *is_mtp);

#endif
