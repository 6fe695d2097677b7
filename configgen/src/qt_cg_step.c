/* qt_cg_step.c - the step schedule: what runs once per optimizer step after the last
 * microbatch. On one rank: finalise the gradient trees (a0 = leaves per step, a1 = the
 * step's global target-token count), then the AdamW update. The multi-rank planner inserts
 * its gradient collectives between the two (design.md sections 5-6).
 */
#include <string.h>
#include "qt_cg.h"

static qt_op step_op(int kind)
{
    qt_op o;
    memset(&o, 0, sizeof o);
    o.kind = (uint16_t)kind;
    for (int s = 0; s < QT_OP_MAX_T; s++) o.t[s] = QT_NONE;
    return o;
}

void qt_cg_step_schedule(qt_cg_graph *g)
{
    const qt_train_cfg *t = &g->s->tr;
    g->nstep = 0;
    qt_op fin = step_op(QT_OP_GRAD_FINALIZE);
    fin.a[0] = t->micro_batch * t->grad_accum;
    fin.a[1] = t->global_batch * t->seq_len;
    g->step[g->nstep++] = fin;
    g->step[g->nstep++] = step_op(QT_OP_ADAMW);
}
