/* memory/pipeline_mem.c - what a pipeline stage needs beyond its one-microbatch arena
 * (issue 36, docs/pipeline.md "Memory"): the activations saved for the backward of the
 * microbatches in flight under each schedule, and the receive buffers of the point-to-point
 * activations and gradients; and the bytes those move per step.
 *
 * Invariants: without pipeline stages (pp_stages <= 1) the need is the arena itself, byte for
 * byte, so no existing plan's verdict or figure changes; a stage's arena already holds one
 * microbatch's activations (its R x Lps layers, every repeat), so k microbatches in flight
 * add k - 1 times the bytes one microbatch keeps from its forward for its backward (the
 * tensors the embedding and the layers write and the backward still reads; the liveness
 * planner shares everything else); GPipe holds all M microbatches of an accumulation step, 1F1B at most S
 * (Megatron: stage r holds min(S - r, M), stage 0 the most), interleaved 1F1B (R > 1) its
 * peak (microbatch, chunk) pairs in flight, qt_pp_intl_inflight, over R, rounded up. Reads the finished plan only.
 * The executed need is the stage-local tables' own arenas: there a stage keeps only its
 * inputs in flight, in slots of its arena, so nothing is added to them; a stage-local
 * graph's need (qt_cg_need_bytes, what its budget-driven form choices compare) is its arena.
 */
#include "core/qt_cg.h"
#include "memory/qt_cg_memory.h"
#include "qt_pp_sched.h"

static int64_t local_bytes(const qt_tensor *t)
{
    int64_t n = qt_dtype_bytes(t->dtype);
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

int64_t qt_cg_pp_saved_bytes(const qt_cg_graph *g)
{
    /* the tensors the embedding and the stage's layers create (ids below the last layer's
     * end, model/graph.c), not the head's: on the last stage the head's forward, loss and
     * backward run back to back, and the other stages have no head; later ids (gradients,
     * remat copies, gather windows) never wait for another microbatch */
    const int n = g->n_layers_rec > 0 ? g->layer_t1[g->n_layers_rec - 1] : g->nt;
    int64_t sum = 0;
    for (int i = 0; i < n && i < g->nt; i++) {
        const qt_cg_tensor *t = &g->ts[i];
        if (!qt_cg_planned(t) || t->whole || t->first < 0) continue;
        if (t->first < g->n_fwd && t->last >= g->n_fwd) sum += local_bytes(&t->t);
    }
    return sum;
}

int64_t qt_cg_pp_boundary_bytes(const qt_cg_settings *s)
{
    const int64_t cp = s->mesh[QT_MESH_CONTEXT] > 1 ? s->mesh[QT_MESH_CONTEXT] : 1;
    return s->tr.micro_batch * (s->tr.seq_len / cp) * s->m.d * qt_dtype_bytes((unsigned)s->dtype);
}

int64_t qt_cg_pp_inflight(const qt_cg_settings *s, int schedule)
{
    if (s->pp_stages <= 1) return 1;
    const int64_t R = s->pp_repeats;
    if (schedule == 1 && R > 1) {
        /* interleaved: (microbatch, chunk) pairs, each 1 / R of a microbatch's saved bytes
         * (qt_pp_sched.h), rounded up to whole microbatches */
        const int64_t pairs = qt_pp_intl_inflight(s->pp_stages, s->pp_stage, s->pp_micro,
                                                  s->pp_repeats);
        return (pairs + R - 1) / R;
    }
    const int64_t held = (int64_t)s->pp_stages - s->pp_stage; /* Megatron: min(S - s, M) */
    return schedule == 1 && held < s->pp_micro ? held : s->pp_micro;
}

int64_t qt_cg_pp_need(const qt_cg_graph *g, int schedule)
{
    const qt_cg_settings *s = g->s;
    if (s->pp_stages <= 1) return g->arena_bytes;
    /* one activation and one gradient received, each double-buffered so the next
     * microbatch's receive overlaps this one's compute */
    return g->arena_bytes + (qt_cg_pp_inflight(s, schedule) - 1) * qt_cg_pp_saved_bytes(g) +
           4 * qt_cg_pp_boundary_bytes(s);
}

int64_t qt_cg_need_bytes(const qt_cg_graph *g)
{
    if (g->s->pp_local) return g->arena_bytes; /* the stage-local tables: slots included */
    return qt_cg_pp_need(g, g->s->pp_schedule);
}

int64_t qt_cg_pp_executed_need(const qt_cg_graph *g, int *stage)
{
    const qt_cg_settings *s = g->s;
    *stage = -1;
    if (s->pp_stages <= 1 || !g->pp_graphs) return -1;
    int64_t need = -1;
    for (int st = 0; st < s->pp_stages; st++)
        if (g->pp_graphs[st].arena_bytes > need) {
            need = g->pp_graphs[st].arena_bytes;
            *stage = st;
        }
    return need;
}
