/* ckpt_pp.h - checkpoints of a pipeline plan (ckpt_pp.c; docs/pipeline.md "Checkpoints"):
 * the stages' plans, their parameters in one-rank order (blocks: the stages' repeat
 * chunks), and the byte stream that carries a block's file data to the writer, world rank 0.
 *
 * On a plan without pipeline stages (or before qt_checkpoint_set_stages) every function
 * below describes one stage, the plan itself: count 1, stage 0 = p, mine 0, one block of all
 * its parameters.
 */
#ifndef QT_CKPT_PP_H
#define QT_CKPT_PP_H

#include <stdint.h>
#include "qt_plan.h"

/* 1 when p is a pipeline stage's plan whose stages are known (checkpoints span them). */
int qt_ckpp_on(const qt_plan *p);
/* The stages (1 without a pipeline); stage k's plan (p itself without a pipeline); this
 * rank's stage (0 without a pipeline). */
int qt_ckpp_count(const qt_plan *p);
const qt_plan *qt_ckpp_stage(const qt_plan *p, int k);
int qt_ckpp_mine(const qt_plan *p);
/* A block of the one-rank parameter order: local parameters [i0, i1) of stage `stage`'s
 * plan, its repeat chunk `chunk` (0 without repeats). */
typedef struct qt_ckpp_blk {
    int stage, chunk;
    int32_t i0, i1;
} qt_ckpp_blk;
/* The blocks (1 without a pipeline; S x R on a pipeline of S stages and R repeats), and
 * block b (0 .. count - 1; the one-rank order: block b + 1's parameters follow b's). */
int qt_ckpp_blocks(const qt_plan *p);
const qt_ckpp_blk *qt_ckpp_block(const qt_plan *p, int b);
/* On a pipeline: 1 on world rank 0 (the file writer); 1 on the first rank of a stage after
 * the first (it streams its stage's file data to the writer). */
int qt_ckpp_writer(void);
int qt_ckpp_sender(void);

/* Data bytes of one region (parameters, one Adam moment, or the gradient) of block b's
 * parameters in a file (every piece, F32). Plan data only. */
int64_t qt_ckpp_block_bytes(const qt_plan *p, int b);

/* The sender's stream: put appends n bytes (sending every full chunk to world rank 0), end
 * sends the rest and waits for every send. 0 or QT_E_COMM (a silent peer: abort). */
int qt_ckpp_put(const void *b, int64_t n);
int qt_ckpp_put_end(void);
/* The writer: receives block b's stream of one region (qt_ckpp_block_bytes) from its
 * stage's first rank and writes it to the open safetensors file, unless a write already
 * failed (*wrc: write errors; the stream is still received, so the sender is matched).
 * 0 or QT_E_COMM. */
int qt_ckpp_take(const qt_plan *p, int b, int *wrc);
/* The same in parts (a sharded directory: the region spans shards): begin block b's region,
 * then take_n its next n bytes into the open file, until the region is complete. */
void qt_ckpp_take_begin(const qt_plan *p, int b);
int qt_ckpp_take_n(int64_t n, int *wrc);
/* World rank 0's `bytes` of buf to every rank (point-to-point, in rank order). 0 or
 * QT_E_COMM. */
int qt_ckpp_bcast(void *buf, int64_t bytes);

#endif
