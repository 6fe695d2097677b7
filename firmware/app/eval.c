/* eval.c - the qtrain program's held-out evaluation (issue 33): the eval token source
 * (eval_data=FILE, or eval_holdout=N: the last N windows of the training data), when an
 * eval is due, its metrics row and progress line, and the early stop on target_eval_loss.
 *
 * Invariants: everything that can fail about the eval data (no source for a plan that
 * evaluates, a source for a plan that does not, a file shorter than one eval batch, an id
 * out of range) is refused at start-up, before the arena; an eval reads the eval source
 * from its start (window 0) every time, eval batches 0 .. n_batches-1 with n_batches =
 * eval_steps (at most what the source holds) or every whole eval batch of the source
 * (eval_steps -1); the held-out windows of eval_holdout= are never read by training (the
 * training view ends at the first held-out window's first token, an input of the eval but
 * no training target); a plan that evaluates on the embedded corpus (no data=, no eval
 * source: make run) holds out its last QT_APP_EVAL_CORPUS_HOLDOUT windows. Module state: one
 * static struct; no heap.
 */
#include <stdio.h>
#include <string.h>
#include "qt_app_eval.h"
#include "qt_err.h"
#include "comm/qt_coll.h"
#include "runtime/qt_runtime.h"

static struct {
    qt_data data;              /* eval_data= (opened here), or the holdout view */
    int open;                  /* data is a file this module opened (closed at exit) */
    int on;                    /* the plan evaluates and a source is installed */
    int64_t n_batches;
    int64_t holdout;           /* eval_holdout=N (or the corpus holdout) in use, else 0 */
    int evals;
    double first_loss, last_loss;
    int32_t acc_k;             /* mtp_eval_target_module (0: none) and its first and last rates */
    double first_acc, last_acc;
    int64_t last_step;
    int rank;
} qt_app_eval;

/* eval_holdout=N: the last N windows of *train become the eval source, and *train ends at
 * their first token (read as the last target of no training window: training windows are
 * [0, W-N), eval windows the rest). */
static int qt_app_eval_holdout(const qt_plan *p, const qt_cli *cli, qt_data *train)
{
    const int64_t S = p->train.seq_len, W = train->n_windows, n = cli->eval_holdout;
    if (n >= W)
        return qt_fail(QT_E_RANGE, "eval_holdout=%lld: %s has %lld window%s of %lld tokens; "
                       "expected fewer held-out windows than that, so training keeps at least "
                       "one", (long long)n, train->path ? train->path : "(embedded corpus)",
                       (long long)W, W == 1 ? "" : "s", (long long)S + 1);
    qt_data *e = &qt_app_eval.data;
    *e = *train;
    const int64_t lo = (W - n) * S;
    e->base = (const unsigned char *)train->base + lo * train->bytes_per_token;
    e->n_tokens = train->n_tokens - lo;
    e->n_windows = (e->n_tokens - 1) / S;
    train->n_tokens = lo + 1;
    train->n_windows = W - n;
    qt_app_eval.holdout = n;
    return QT_OK;
}

int64_t qt_app_eval_holdout_windows(void) { return qt_app_eval.holdout; }

static int qt_app_eval_install(const qt_plan *p, const qt_cli *cli);

int qt_app_eval_open(const qt_plan *p, const qt_cli *cli, qt_data *train, int rank)
{
    const char *src = cli->eval_data ? "eval_data=" : "eval_holdout=";
    memset(&qt_app_eval, 0, sizeof qt_app_eval);
    qt_app_eval.rank = rank;
    if (p->train.eval_interval <= 0) {
        if (!cli->eval_data && !cli->eval_holdout) return QT_OK;
        return qt_fail(QT_E_ARG, "%s%s: the plan %s does not evaluate (eval_interval -1); "
                       "generate it with eval_interval=N to evaluate every N steps", src,
                       cli->eval_data ? cli->eval_data : "N", p->run_name);
    }
    if (cli->eval_data && cli->eval_holdout)
        return qt_fail(QT_E_ARG, "eval_data= and eval_holdout= both given; expected one eval "
                       "source");
    if (!cli->eval_data && !cli->eval_holdout && !cli->data) {
        /* the embedded corpus (make run): its tail is the eval source */
        qt_cli c = *cli;
        c.eval_holdout = QT_APP_EVAL_CORPUS_HOLDOUT;
        if (rank == 0)
            fprintf(stderr, "qtrain: note: eval on the embedded corpus's last %d windows "
                    "(eval_holdout=%d; training reads the windows before them)\n",
                    QT_APP_EVAL_CORPUS_HOLDOUT, QT_APP_EVAL_CORPUS_HOLDOUT);
        int rc = qt_app_eval_holdout(p, &c, train);
        return rc ? rc : qt_app_eval_install(p, &c);
    }
    if (!cli->eval_data && !cli->eval_holdout)
        return qt_fail(QT_E_ARG, "the plan %s evaluates every %lld steps (eval_interval) but "
                       "no eval source was given: pass eval_data=FILE (a token file, as data=) "
                       "or eval_holdout=N (the last N windows of the data)", p->run_name,
                       (long long)p->train.eval_interval);
    int rc;
    if (cli->eval_data) {
        rc = qt_data_open(&qt_app_eval.data, cli->eval_data, cli->data_dtype, p->model.vocab,
                          p->train.seq_len);
        qt_app_eval.open = rc == QT_OK;
    } else {
        rc = qt_app_eval_holdout(p, cli, train);
    }
    return rc ? rc : qt_app_eval_install(p, cli);
}

int qt_app_eval_doc_sep(const qt_cli *cli, int32_t eos, const char *from)
{
    return qt_app_eval.open && cli->eval_data
               ? qt_data_doc_sep_agrees(&qt_app_eval.data, "eval_data", eos, from) : QT_OK;
}

/* The eval source is open (qt_app_eval.data): at least one eval batch, the batches each eval
 * reads, installed as the runtime's eval tokens. */
static int qt_app_eval_install(const qt_plan *p, const qt_cli *cli)
{
    const int64_t Bg = qt_runtime_eval_batch(p), W = qt_app_eval.data.n_windows;
    const char *name = cli->eval_data ? cli->eval_data : "the held-out windows";
    if (W < Bg)
        return qt_fail(QT_E_RANGE, "%s: %lld window%s of %lld tokens, fewer than one eval "
                       "batch of %lld sequences (eval_per_device_batch_size x num_ranks): "
                       "give a longer eval file or a smaller "
                       "eval_per_device_batch_size", name, (long long)W, W == 1 ? "" : "s",
                       (long long)p->train.seq_len + 1, (long long)Bg);
    qt_app_eval.n_batches = W / Bg;
    if (p->train.eval_steps > 0 && p->train.eval_steps < qt_app_eval.n_batches)
        qt_app_eval.n_batches = p->train.eval_steps;
    else if (p->train.eval_steps > 0 && qt_app_eval.rank == 0)
        fprintf(stderr, "qtrain: note: eval_steps=%lld, but %s hold %lld eval batch%s of %lld "
                "sequences; each eval reads those\n", (long long)p->train.eval_steps, name,
                (long long)qt_app_eval.n_batches, qt_app_eval.n_batches == 1 ? "" : "es",
                (long long)Bg);
    qt_app_eval.on = 1;
    qt_runtime_set_eval_tokens(qt_data_tokens, &qt_app_eval.data);
    return QT_OK;
}

int qt_app_eval_due(const qt_plan *p, int64_t step)
{
    const qt_train_cfg *t = &p->train;
    return qt_app_eval.on && step >= t->eval_start &&
           (step - t->eval_start) % t->eval_interval == 0;
}

int qt_app_eval_run(const qt_plan *p, int64_t step, int64_t end, FILE *metrics,
                    const char *metrics_path, int *stop)
{
    qt_eval_metrics e;
    memset(&e, 0, sizeof e);
    *stop = 0;
    int rc = qt_runtime_eval(p, step, qt_app_eval.n_batches, &e);
    if (rc == QT_OK && qt_app_eval.open) rc = qt_data_check(&qt_app_eval.data);
    if (rc == QT_OK && qt_app_eval.rank == 0) {
        if (metrics) {
            qt_metrics_write_eval(metrics, &e);
            if (fflush(metrics) != 0 || ferror(metrics))
                rc = qt_fail(QT_E_IO, "writing the metrics file %s failed at the eval after "
                             "step %lld", metrics_path, (long long)step + 1);
        }
        qt_progress_print_eval(stderr, &e, end);
    }
    rc = qt_coll_agree("the eval", rc);
    if (rc) return rc;
    if (!qt_app_eval.evals++) {
        qt_app_eval.first_loss = e.loss;
        qt_app_eval.first_acc = e.mtp_accept_rate;
    }
    qt_app_eval.last_loss = e.loss;
    qt_app_eval.acc_k = e.mtp_accept_k;
    qt_app_eval.last_acc = e.mtp_accept_rate;
    qt_app_eval.last_step = step;
    const float target = p->train.target_eval_loss;
    if (target > 0.0f && e.loss <= (double)target) {
        *stop = 1;
        if (qt_app_eval.rank == 0)
            fprintf(stderr, "qtrain: eval loss %.6f after step %lld reached target_eval_loss "
                    "%g: stopping early\n", e.loss, (long long)step + 1, (double)target);
    }
    return QT_OK;
}

void qt_app_eval_summary(FILE *f)
{
    if (!qt_app_eval.evals) return;
    char acc[96] = "";
    if (qt_app_eval.acc_k > 0)
        snprintf(acc, sizeof acc, "; MTP acceptance rate (depth %d) %.2f%% -> %.2f%%",
                 (int)qt_app_eval.acc_k, qt_app_eval.first_acc, qt_app_eval.last_acc);
    fprintf(f, "qtrain: %d eval%s (%lld batch%s each): eval loss %.6f -> %.6f (after step "
            "%lld)%s\n", qt_app_eval.evals, qt_app_eval.evals == 1 ? "" : "s",
            (long long)qt_app_eval.n_batches, qt_app_eval.n_batches == 1 ? "" : "es",
            qt_app_eval.first_loss, qt_app_eval.last_loss,
            (long long)qt_app_eval.last_step + 1, acc);
}

void qt_app_eval_close(void)
{
    if (qt_app_eval.open) qt_data_close(&qt_app_eval.data);
    qt_app_eval.open = 0;
    qt_app_eval.on = 0;
}

void qt_app_eval_manifest(qt_manifest *m)
{
    m->eval_kind = !qt_app_eval.on ? 0 : qt_app_eval.holdout ? 2 : 1;
    if (!m->eval_kind) return;
    m->eval_path = qt_app_eval.data.path;
    m->eval_bytes = qt_app_eval.data.file_bytes;
    m->eval_hash = qt_app_eval.data.hash;
    m->eval_holdout = qt_app_eval.holdout;
    m->eval_windows = qt_app_eval.data.n_windows;
    m->eval_batches = qt_app_eval.n_batches;
}
