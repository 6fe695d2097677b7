/* pipeline_time.c - where a pipeline stage's time goes (issue 36's bubble, docs/pipeline.md
 * "The bubble, measured"): the wall time of the microbatch schedule, the part of it spent
 * waiting for boundary messages (receives, and the flush of the group's sends), and the
 * time waiting at the step's merges over the stages after it (metrics, norm, fingerprint),
 * which is where the stage that finishes its schedule first waits for the others. Printed
 * once at the end of a run, one line per stage.
 *
 * Invariants: clock reads only (CLOCK_MONOTONIC through qt_interp_now), beside the
 * messages and never between the kernels' inputs and outputs, so no bit changes; this
 * file's static counters are the only state, written by the rank's own thread.
 */
#include "qt_pipeline.h"
#include "qt_interp.h"
#include "comm/qt_comm.h"

static double qt_pp_secs[QT_PP_T_COUNT];

double qt_pp_clock(void)
{
    return qt_interp_now();
}

void qt_pp_time_add(int kind, double t0)
{
    if (kind >= 0 && kind < QT_PP_T_COUNT) qt_pp_secs[kind] += qt_interp_now() - t0;
}

void qt_pp_time_print(FILE *f, const qt_plan *p, int64_t steps)
{
    if (p->pipeline_stages <= 1 || steps <= 0) return;
    int rank = 0, n = 1, local = 0;
    qt_comm_world(&rank, &n);
    const int S = p->pipeline_stages, s = qt_pp_stage_of(rank, n, S, &local);
    if (local != 0) return;
    const double sched = qt_pp_secs[QT_PP_T_SCHED], wait = qt_pp_secs[QT_PP_T_WAIT];
    const double merge = qt_pp_secs[QT_PP_T_MERGE], span = sched + merge;
    /* circular repeats: R x M forward slots a stage (MaxText's M*R + S - 1 iterations) */
    const int R = p->pp_repeats > 1 ? p->pp_repeats : 1;
    const double RM = (double)R * (double)p->pp_micro;
    fprintf(f, "qtrain: pipeline stage %d of %d (rank %d, %s, M %d): schedule %.3f s over %lld "
            "steps, computing %.3f s, waiting %.3f s for boundary messages + %.3f s at the "
            "step's merges over the stages; bubble %.4f (waiting / (schedule + merge waits)), "
            "formula (S-1)/(%sM+S-1) = %.4f\n", s, S, rank, p->pp_schedule ? "1f1b" : "gpipe",
            p->pp_micro, sched, (long long)steps, sched - wait, wait, merge,
            span > 0.0 ? (wait + merge) / span : 0.0, R > 1 ? "R*" : "", (S - 1) / (RM + S - 1));
}
