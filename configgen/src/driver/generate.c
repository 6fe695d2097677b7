/* driver/generate.c - the configgen driver: command line, the build pipeline and the
 * atomic write of the four output files.
 *
 * Invariants: every check (config, validation, schedule, memory plan) runs and every file
 * is rendered in memory before the first byte reaches the output directory, so any error
 * leaves nothing written; each file is written to a temporary name in the same directory
 * and renamed over the old one, so readers never see a half-written file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/qt_cg.h"

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void find_configs(const char *run_path, char *out, size_t n)
{
    char dir[4096], probe[4200];
    snprintf(dir, sizeof dir, "%s", run_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    snprintf(probe, sizeof probe, "%s/../base.yml", dir);
    if (exists(probe)) {
        /* keep paths readable in banners: "configgen/configs/runs/.." -> "configgen/configs" */
        char *s2 = strrchr(dir, '/');
        if (s2 && strcmp(s2 + 1, "..") && strcmp(s2 + 1, ".")) {
            *s2 = 0;
            snprintf(out, n, "%s", dir);
        } else if (!s2 && strcmp(dir, ".") && strcmp(dir, "..")) {
            snprintf(out, n, ".");
        } else {
            size_t k = strlen(dir);
            if (k + 4 > n) k = n - 4;
            memcpy(out, dir, k);
            memcpy(out + k, "/..", 4);
        }
        return;
    }
    snprintf(probe, sizeof probe, "%s/base.yml", dir);
    if (exists(probe)) {
        snprintf(out, n, "%s", dir);
        return;
    }
    snprintf(out, n, "configgen/configs");
}

int qt_cg_plan_build(const char *configs_dir, const char *run_path, int n_over,
                     char *const *over, qt_cg_config *c, qt_cg_settings *s, qt_cg_graph *g,
                     char *err, size_t errlen)
{
    char dir[4096];
    memset(c, 0, sizeof *c);
    memset(s, 0, sizeof *s);
    memset(g, 0, sizeof *g);
    if (!configs_dir) {
        find_configs(run_path, dir, sizeof dir);
        configs_dir = dir;
    }
    if (qt_cg_config_load(c, configs_dir, run_path, n_over, over, err, errlen)) return -1;
    if (qt_cg_settings_resolve(c, s, err, errlen)) return -1;
    if (qt_cg_graph_build(g, s, err, errlen)) return -1;
    if (qt_cg_autodiff(g, err, errlen)) return -1;
    if (qt_cg_remat(g, err, errlen)) return -1;
    /* gradient_reduce: the step form (one reduce-scatter after the microbatches) unless
     * expert parallelism needs the microbatch form, or auto finds the step form's
     * parameter-sized tree levels over the budget (then the microbatch form, then the
     * per-layer form with layer-sized leaf levels); the bits are the same */
    g->params_compact = s->param_gather == QT_CG_GATHER_LAYER;
    const int layer = (s->grad_reduce == QT_CG_REDUCE_LAYER || g->params_compact) && s->batch_mask;
    g->reduce_per_mb = layer || s->grad_reduce == QT_CG_REDUCE_MICROBATCH ||
                       s->mesh[QT_MESH_EXPERT] > 1;
    g->layer_reduce = layer;
    if (qt_cg_memplan(g, err, errlen)) return -1;
    const int64_t budget = qt_cg_budget_bytes(s);
    for (int form = 0; form < 2 && s->grad_reduce == QT_CG_REDUCE_AUTO && s->batch_mask &&
                       budget > 0 && g->arena_bytes > budget && !g->layer_reduce; form++) {
        if (g->reduce_per_mb) g->layer_reduce = 1;
        g->reduce_per_mb = 1;
        if (qt_cg_memplan(g, err, errlen)) return -1;
    }
    /* param_gather=auto: per-layer gathers when still over the budget with per-layer
     * reduction (which they need), on meshes that shard parameters for compute in MaxText
     * (fsdp, expert); ZeRO-1 alone keeps them replicated over data (docs/design.md section 5),
     * so a data-only split is gathered per layer only when the user asks (param_gather=layer,
     * ZeRO-3 over data) */
    const unsigned fsdp_like = (1u << QT_MESH_FSDP) | (1u << QT_MESH_EXPERT);
    if (s->param_gather == QT_CG_GATHER_AUTO && (s->opt_mask & fsdp_like) && g->layer_reduce &&
        budget > 0 && g->arena_bytes > budget) {
        g->params_compact = 1;
        if (qt_cg_memplan(g, err, errlen)) return -1;
    }
    qt_cg_step_schedule(g);
    if (qt_cg_check_schedule(g, err, errlen)) return -1;
    if (qt_cg_layout_check(g, &g->n_reshards, err, errlen)) return -1;
    if (qt_cg_check_plan(g, err, errlen)) return -1;
    if (qt_cg_scan(g, err, errlen)) return -1;
    g->hash = qt_cg_hash(g);
    return 0;
}

void qt_cg_plan_free(qt_cg_config *c, qt_cg_settings *s, qt_cg_graph *g)
{
    qt_cg_graph_free(g);
    qt_cg_settings_free(s);
    qt_cg_config_free(c);
}

static int mkdir_p(const char *path, char *err, size_t errlen)
{
    char buf[4400];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST)
            return qt_cg_fail(err, errlen, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST)
        return qt_cg_fail(err, errlen, "%s: cannot create directory: %s", buf, strerror(errno));
    return 0;
}

static int write_atomic(const char *path, const qt_cg_buf *b, char *err, size_t errlen)
{
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%.4300s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return qt_cg_fail(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
    int bad = fwrite(b->p, 1, b->n, f) != b->n;
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return qt_cg_fail(err, errlen, "%s: write failed: %s", path, strerror(e));
    }
    return 0;
}

static void banner(const qt_cg_config *c, const qt_cg_graph *g, qt_cg_buf *b)
{
    qt_cg_buf_printf(b, "generated by configgen %s from", QT_CG_VERSION);
    for (int i = 0; i < 3; i++)
        if (c->files[i]) qt_cg_buf_printf(b, " %s", c->files[i]);
    for (int i = 0; i < c->n_over; i++) {
        qt_cg_buf_printf(b, " %s=", c->over_keys[i]);
        qt_cg_val_render(&c->over[i], b);
    }
    qt_cg_buf_printf(b, "\n * plan hash 0x%016llx; do not edit; make gen regenerates.",
                     (unsigned long long)g->hash);
    /* The banner is pasted inside C comments: a value containing the comment terminator
     * must not end the comment early (and inject code into plan.c). */
    for (size_t i = 0; i + 1 < b->n; i++)
        if (b->p[i] == '*' && b->p[i + 1] == '/') b->p[i + 1] = '|';
}

/* Moves the finished temporary directory into place. A previous plan directory is first
 * renamed aside and removed afterwards, so a reader sees either the whole old plan or the
 * whole new one, never a mix of files from both. */
static int swap_dir(const char *tmpdir, const char *dir, const char *const *names, int n,
                    char *err, size_t errlen)
{
    char old[4400], path[4600];
    snprintf(old, sizeof old, "%.4300s.old.%ld", dir, (long)getpid());
    int had_old = rename(dir, old) == 0;
    if (!had_old && errno != ENOENT)
        return qt_cg_fail(err, errlen, "%s: cannot replace: %s", dir, strerror(errno));
    if (rename(tmpdir, dir)) {
        int e = errno;
        if (had_old) rename(old, dir);
        return qt_cg_fail(err, errlen, "%s: cannot move the new plan in place: %s", dir,
                          strerror(e));
    }
    if (had_old) {
        for (int k = 0; k < n; k++) {
            snprintf(path, sizeof path, "%s/%s", old, names[k]);
            unlink(path);
        }
        rmdir(old);
    }
    return 0;
}

int qt_cg_generate(int argc, char **argv, char *err, size_t errlen)
{
    static const char usage[] = "usage: configgen [-o outdir] <run.yml> [key=value ...] | "
                                "configgen --diff A B";
    const char *outdir = "generated", *run = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "-o")) {
            if (i + 1 >= argc) return qt_cg_fail(err, errlen, "-o needs a directory");
            outdir = argv[++i];
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            return qt_cg_fail(err, errlen, "%s", usage);
        } else if (!strcmp(argv[i], "--diff")) {
            /* main.c runs --diff itself (exit 0/1/2); here it is only misplaced */
            return qt_cg_fail(err, errlen, "--diff comes first and alone: %s", usage);
        } else if (argv[i][0] == '-') {
            return qt_cg_fail(err, errlen, "unknown option %s; %s", argv[i], usage);
        } else {
            run = argv[i++];
            break;
        }
    }
    if (!run) return qt_cg_fail(err, errlen, "%s", usage);
    qt_cg_config c;
    qt_cg_settings s;
    qt_cg_graph g;
    int rc = qt_cg_plan_build(NULL, run, argc - i, argv + i, &c, &s, &g, err, errlen);
    if (!rc) rc = qt_cg_budget_check(&g, err, errlen);
    if (!rc) {
        qt_cg_buf ban = {0}, files[4] = {{0}};
        static const char *names[4] = {"plan.h", "plan.c", "plan_main.c", "plan.txt"};
        banner(&c, &g, &ban);
        qt_cg_emit_plan_h(&g, ban.p, &files[0]);
        qt_cg_emit_plan_c(&g, &c, ban.p, &files[1]);
        qt_cg_emit_plan_main(&g, ban.p, &files[2]);
        qt_cg_emit_report(&g, &c, &files[3]);
        char dir[4096], tmpdir[4200], path[4300];
        snprintf(dir, sizeof dir, "%s/%s", outdir, s.run_name);
        snprintf(tmpdir, sizeof tmpdir, "%s/.%s.tmp.%ld", outdir, s.run_name, (long)getpid());
        rc = mkdir_p(tmpdir, err, errlen);
        for (int k = 0; k < 4 && !rc; k++) {
            snprintf(path, sizeof path, "%s/%s", tmpdir, names[k]);
            rc = write_atomic(path, &files[k], err, errlen);
        }
        if (!rc) rc = swap_dir(tmpdir, dir, names, 4, err, errlen);
        if (rc) {
            for (int k = 0; k < 4; k++) {
                snprintf(path, sizeof path, "%s/%s", tmpdir, names[k]);
                unlink(path);
            }
            rmdir(tmpdir);
        }
        for (int k = 0; k < 4; k++) qt_cg_buf_free(&files[k]);
        qt_cg_buf_free(&ban);
    }
    qt_cg_plan_free(&c, &s, &g);
    return rc;
}
