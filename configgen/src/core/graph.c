/* core/graph.c - the life cycle of the shared data model (core/qt_cg.h qt_cg_graph): a
 * blank op record and the release of everything a graph owns. Every stage that appends
 * ops starts them with qt_cg_op_blank, so an unused tensor slot is always QT_NONE.
 * Invariant: qt_cg_graph_free leaves the graph zeroed (it may be freed again).
 */
#include <stdlib.h>
#include <string.h>
#include "core/qt_cg.h"

void qt_cg_op_blank(qt_op *op, int kind)
{
    memset(op, 0, sizeof *op);
    op->kind = (uint16_t)kind;
    for (int i = 0; i < QT_OP_MAX_T; i++) op->t[i] = QT_NONE;
}

void qt_cg_graph_free(qt_cg_graph *g)
{
    for (int i = 0; i < g->nt; i++) free((char *)g->ts[i].t.name);
    free(g->ts);
    free(g->ps);
    free(g->init);
    free(g->mb);
    free(g->step);
    free(g->mbend);
    free(g->layer_op0);
    free(g->layer_op1);
    free(g->layer_t0);
    free(g->layer_t1);
    free(g->bwd_src);
    free(g->ranges);
    free(g->gather_win);
    free(g->mbc);
    for (int k = 0; k < QT_MAX_SCANS; k++) free(g->scan_stride[k]);
    for (int i = 0; i < g->ncoll; i++) free((char *)g->coll[i].name);
    free(g->coll);
    free(g->pp_stage_figs);
    for (int st = 0; g->pp_graphs && st < g->pp_settings[0].pp_stages; st++)
        qt_cg_graph_free(&g->pp_graphs[st]);
    free(g->pp_graphs);
    free(g->pp_settings);
    free(g->pp_chunk_base);
    memset(g, 0, sizeof *g);
}
