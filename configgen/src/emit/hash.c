/* emit/hash.c - the plan hash of a graph: the graph's tables are viewed as the qt_plan the
 * emitter will write, and hashed by qt_plan_hash (firmware/runtime/plan_hash.c), the same
 * function the firmware runs at start-up, so "the same plan" has one definition.
 */
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"
#include "emit/qt_cg_emit.h"
#include "../../firmware/runtime/qt_plan_hash.h"

uint64_t qt_cg_hash(const qt_cg_graph *g)
{
    const qt_cg_settings *s = g->s;
    qt_tensor *ts = calloc((size_t)(g->nt ? g->nt : 1), sizeof *ts);
    if (!ts) abort(); /* host tool: out of memory for a few thousand records is fatal */
    for (int i = 0; i < g->nt; i++) ts[i] = g->ts[i].t;
    qt_plan p;
    memset(&p, 0, sizeof p);
    p.run_name = s->run_name;
    p.generator_version = QT_CG_VERSION;
    p.n_ranks = (int32_t)s->n_ranks;
    for (int i = 0; i < QT_MESH_COUNT; i++) p.mesh[i] = (int32_t)s->mesh[i];
    p.shard_mode = s->shard_mode;
    p.zero1 = s->zero1;
    p.model = s->m;
    p.train = s->tr;
    p.arena_bytes = g->arena_bytes;
    p.n_tensors = g->nt;
    p.tensors = ts;
    p.n_params = g->np;
    p.params = g->ps;
    p.n_param_elems = g->n_param_elems;
    p.n_flat = g->n_flat;
    p.batch_mask = s->batch_mask;
    p.opt_mask = s->opt_mask;
    p.adam_elems = g->adam_elems;
    p.n_ranges = g->n_ranges;
    p.ranges = g->ranges;
    p.leaf_elems = g->leaf_elems;
    p.grads_compact = g->grads_compact;
    p.layer_reduce = g->layer_reduce;
    p.params_compact = g->params_compact;
    p.comm_scratch_offset = g->comm_scratch_offset;
    p.comm_scratch_elems = g->comm_scratch_elems;
    p.staging_offset = g->staging_offset;
    p.staging_elems = g->staging_elems;
    p.params_offset = g->params_offset;
    p.grads_offset = g->grads_offset;
    p.adam_m_offset = g->adam_m_offset;
    p.adam_v_offset = g->adam_v_offset;
    p.n_tree_levels = g->n_tree_levels;
    memcpy(p.tree_offset, g->tree_offset, sizeof p.tree_offset);
    p.mb_elems = g->mb_elems;
    p.leaf_scratch_offset = g->leaf_scratch_offset;
    p.leaf_scratch_elems = g->leaf_scratch_elems;
    p.tokens = g->tokens;
    p.targets = g->targets;
    p.loss_seq = g->loss_seq;
    p.lb_seq = g->lb_seq;
    p.n_init_ops = g->ninit;
    p.init_ops = g->init;
    qt_scan scans[QT_MAX_SCANS];
    for (int k = 0; k < g->n_scans; k++) {
        scans[k] = g->scans[k];
        scans[k].stride = g->scan_stride[k];
    }
    p.n_mb_ops = g->mbc ? g->nmbc : g->nmb;
    p.mb_ops = g->mbc ? g->mbc : g->mb;
    p.n_scans = g->n_scans;
    p.scans = g->n_scans ? scans : NULL;
    p.n_mb_logical = g->n_scans ? g->nmb : 0;
    p.n_mb_levels = g->n_mb_levels;
    p.n_mbend_ops = g->nmbend;
    p.mbend_ops = g->mbend;
    p.n_step_ops = g->nstep;
    p.step_ops = g->step;
    p.n_collectives = g->ncoll;
    p.collectives = g->coll;
    uint64_t h = qt_plan_hash(&p);
    free(ts);
    return h;
}
