/* comm_env.c - the single-rank build's guard against running as one process of a
 * multi-process job: qt_comm_env_check (qt_comm.h), called by comm_local.c's qt_comm_init.
 *
 * A process manager tells each process it starts how many there are, in the environment:
 * MPICH's hydra (mpiexec here; Intel MPI's too) sets PMI_SIZE, PMI_RANK and
 * MPI_LOCALNRANKS, Slurm's PMI-2 sets PMI_SIZE and PMI_RANK, Open MPI sets
 * OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_RANK, PMIx launchers PMIX_RANK, MVAPICH
 * MV2_COMM_WORLD_SIZE. A size above 1 or a rank above 0 means other processes run the same
 * command; the single-rank back end cannot talk to them, so each would train the whole
 * model alone and write the same checkpoint and metrics files. That is refused, naming the
 * variable and its value and the MPI build to use instead.
 * Invariants: reads the environment with getenv only (no heap, nothing kept); a variable
 * whose value is not a plain decimal number is ignored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qt_comm.h"
#include "qt_err.h"

/* value of a decimal environment variable, or -1 when unset or not a plain number */
static long qt_env_num(const char *name)
{
    const char *s = getenv(name);
    char *end;
    if (!s || *s < '0' || *s > '9') return -1;
    long v = strtol(s, &end, 10);
    return *end ? -1 : v;
}

int qt_comm_env_check(const char *argv0)
{
    static const struct { const char *name; int is_rank; } vars[] = {
        {"PMI_SIZE", 0}, {"MPI_LOCALNRANKS", 0}, {"OMPI_COMM_WORLD_SIZE", 0},
        {"MV2_COMM_WORLD_SIZE", 0}, {"PMI_RANK", 1}, {"OMPI_COMM_WORLD_RANK", 1},
        {"PMIX_RANK", 1},
    };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        long v = qt_env_num(vars[i].name);
        if (vars[i].is_rank ? v < 1 : v < 2) continue;
        /* the MPI build sits next to this binary: build/<run>/qtrain */
        const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
        int dir = slash ? (int)(slash - argv0) + 1 : 0;
        char who[64];
        if (vars[i].is_rank) snprintf(who, sizeof who, "as rank %ld of a multi-process job", v);
        else snprintf(who, sizeof who, "as one of %ld processes", v);
        return qt_fail(QT_E_PLAN, "%s=%ld: a process manager (mpiexec, srun) started this "
                       "process %s, but %s is the single-rank build (no MPI): every process "
                       "would train alone and write the same checkpoint and metrics files; "
                       "run the MPI build %.*sqtrain (build/<run>/qtrain) under mpiexec, or "
                       "this binary without mpiexec", vars[i].name, v, who,
                       argv0 ? argv0 : "qtrain-static", dir, argv0 ? argv0 : "");
    }
    return QT_OK;
}
