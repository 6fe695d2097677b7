/* cli.c - key=value command-line parsing for qtrain (see qt_cli.h).
 *
 * Invariants: each key may appear once; numbers must be plain decimal (no sign, no
 * leading blank, no trailing characters, no hex); learning_rate and the timeouts are
 * decimal floats (digits, '.', an exponent).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "qt_cli.h"
#include <stdio.h>
#include "qt_err.h"
#include "io/qt_io.h"

enum qt_cli_key {
    QT_KEY_STEPS, QT_KEY_DATA, QT_KEY_DATA_DTYPE, QT_KEY_LOAD, QT_KEY_SAVE, QT_KEY_SAVE_EVERY,
    QT_KEY_METRICS, QT_KEY_SEED, QT_KEY_LR, QT_KEY_DUMP_GRADS, QT_KEY_PROFILE,
    QT_KEY_COMM_TIMEOUT, QT_KEY_OVERWRITE, QT_KEY_SAVE_SHARD_SIZE, QT_KEY_ALLOW_DATA_CHANGE,
    QT_KEY_LOAD_WEIGHTS_ONLY, QT_KEY_TRUNCATE_METRICS, QT_KEY_TOKENIZER, QT_KEY_HELP,
    QT_KEY_EVAL_DATA, QT_KEY_EVAL_HOLDOUT, QT_KEY_ARENA_PAGES, QT_KEY_START_TIMEOUT,
    QT_KEY_ALLOW_STATE_CHANGE, QT_KEY_COUNT
};

static const char *const qt_cli_names[QT_KEY_COUNT] = {
    "steps", "data", "data_dtype", "load", "save", "save_every", "metrics", "seed",
    "learning_rate", "dump_grads", "profile", "comm_timeout", "overwrite", "save_shard_size",
    "allow_data_change", "load_weights_only", "truncate_metrics", "tokenizer", "help",
    "eval_data", "eval_holdout", "arena_pages", "start_timeout", "allow_state_change"
};

void qt_cli_usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [key=value ...]\n"
            "  steps=N          train until step N (total, counting steps of a loaded checkpoint;\n"
            "                   default: the plan's steps; 0 = no training)\n"
            "  data=PATH        token file (.npy, QTTOKENS raw, or headerless raw with data_dtype);\n"
            "                   default: the embedded corpus\n"
            "  data_dtype=T     uint16 | uint32, for headerless raw token files\n"
            "  load=PATH        safetensors weights, sharded *.index.json, or a directory of them;\n"
            "                   optimizer state and step resume when present\n"
            "  save=PATH        write a checkpoint (weights + optimizer) at the end: a Hugging\n"
            "                   Face sharded directory (model-*-of-*.safetensors + index, the\n"
            "                   optimizer-* files beside them), or one file if PATH ends in\n"
            "                   .safetensors\n"
            "  save_shard_size=B  largest shard of a save= directory, bytes with an optional\n"
            "                   K, M, G, T or P suffix (powers of 1024; default 4G, at most 1P)\n"
            "  save_every=N     also save to the save= path every N steps (atomic)\n"
            "  tokenizer=PATH   tokenizer.json (or a directory holding it; tokenizer_config.json\n"
            "                   beside it too): copied into each save= directory that has none\n"
            "  metrics=PATH     JSON-lines metrics, one line per step; a resumed run appends\n"
            "                   (the file must end at the step before the resume step)\n"
            "  seed=N           parameter init seed (unsigned decimal, default 0)\n"
            "  learning_rate=X  peak learning rate override (default: the plan's)\n"
            "  dump_grads=PATH  write the first step's normalised gradients, then train on\n"
            "  profile=0|1      1: time every op and optimizer phase (clock_gettime around each\n"
            "                   op) and print ms per step per phase and per op kind at exit;\n"
            "                   adds a little overhead, off by default\n"
            "  comm_timeout=S   multi-rank watchdog: a collective of the steps, evals or saves\n"
            "                   that waits longer than S seconds for a peer ends the job\n"
            "                   naming the peer (default 300)\n"
            "  start_timeout=S  the same bound on start-up's waits for a peer (plan check,\n"
            "                   arena, warm-up, load=, metrics=), which a rank slow to start\n"
            "                   makes long; default 300, or comm_timeout when that is larger\n"
            "  overwrite=0|1    1: replace an existing metrics file (fresh or resumed run), and\n"
            "                   an existing save=/dump_grads= file that is not a qtrain file\n"
            "  allow_data_change=0|1  1: resume from a checkpoint saved on other data (its\n"
            "                   data_hash differs); the run manifest records a note\n"
            "  allow_state_change=0|1  1: resume the Adam moments and the step of load= although\n"
            "                   its state hash differs (another schedule, learning rate,\n"
            "                   global batch or objective: a deliberate change, not a bit-exact\n"
            "                   resume; the run manifest records a note)\n"
            "  load_weights_only=0|1  1: load= takes the weights only and training starts at\n"
            "                   step 0 with fresh Adam moments (a qtrain checkpoint whose\n"
            "                   optimizer state is missing is refused without it)\n"
            "  truncate_metrics=0|1  1: a resumed run cuts the metrics= lines of its start step\n"
            "                   and later (left by a run that crashed after the checkpoint);\n"
            "                   the run manifest records it\n"
            "  eval_data=PATH   held-out token file (formats of data=) for a plan with\n"
            "                   eval_interval: eval loss rows in metrics=\n"
            "  eval_holdout=N   the last N windows of the data are the eval source instead\n"
            "                   (training then reads the windows before them only)\n"
            "  arena_pages=auto|huge  auto: the arena on transparent huge pages until the\n"
            "                   kernel's compaction for them has taken 2 s at under 0.5 GB/s,\n"
            "                   the rest on 4 KiB pages (the banner says how much); huge:\n"
            "                   huge pages for all of it however long the start-up takes\n"
            "  help             this text\n", prog);
}

/* Edit distance between key[0..n) and name (both short): a one-row dynamic program over a
 * fixed-size stack row, capped at QT_CLI_KEY_MAX characters. key's capitals count as their
 * lower case (the names are lower case), so STEPS=3 is told 'steps'. */
#define QT_CLI_KEY_MAX 32
static int qt_cli_distance(const char *key, size_t n, const char *name)
{
    size_t m = strlen(name);
    if (n > QT_CLI_KEY_MAX) n = QT_CLI_KEY_MAX;
    int row[QT_CLI_KEY_MAX + 1];
    for (size_t j = 0; j <= m && j <= QT_CLI_KEY_MAX; j++) row[j] = (int)j;
    if (m > QT_CLI_KEY_MAX) m = QT_CLI_KEY_MAX;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j];
            const char c = key[i - 1] >= 'A' && key[i - 1] <= 'Z' ? (char)(key[i - 1] + 32) : key[i - 1];
            int best = diag + (c != name[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

static int qt_cli_bad(const char *key, const char *val, const char *expect)
{
    fprintf(stderr, "qtrain: bad argument %s=%s: expected %s\n", key, val, expect);
    return QT_E_ARG;
}

/* the largest steps=, save_every=, eval_holdout= (INT64_MAX / 2), in the messages: a value
 * past it (or past 2^64) was told "expected a non-negative integer", which it is (audit24) */
#define QT_CLI_MAX_TEXT "4611686018427387903 (2^62 - 1)"

static int qt_cli_u64(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* Index of the key arg[0..klen) in qt_cli_names; QT_KEY_COUNT after printing an
 * unknown-key message (with the nearest key when it is within edit distance 3). */
static int qt_cli_find(const char *arg, size_t klen)
{
    int k = 0;
    while (k < QT_KEY_COUNT &&
           !(strlen(qt_cli_names[k]) == klen && !strncmp(arg, qt_cli_names[k], klen)))
        k++;
    if (k < QT_KEY_COUNT) return k;
    int best = 0, best_d = 1 << 30;
    for (int cand = 0; cand < QT_KEY_COUNT; cand++) {
        int dist = qt_cli_distance(arg, klen, qt_cli_names[cand]);
        if (dist < best_d) { best_d = dist; best = cand; }
    }
    if (best_d <= 3)
        fprintf(stderr, "qtrain: unknown key '%.*s' in '%s'; did you mean '%s'? (try: help)\n",
                (int)klen, arg, arg, qt_cli_names[best]);
    else
        fprintf(stderr, "qtrain: unknown key '%.*s' in '%s' (try: help)\n", (int)klen, arg, arg);
    return QT_KEY_COUNT;
}

/* save_shard_size=: digits with an optional K, M, G, T or P suffix (powers of 1024), from 1
 * byte up to 1P (2^50 bytes). */
static int qt_cli_byte_count(const char *key, const char *val, int64_t *out)
{
    uint64_t u = 0;
    size_t n = strlen(val);
    const char *sfx = "KMGTP";
    const char *at = n > 1 ? strchr(sfx, val[n - 1]) : NULL;
    char digits[32];
    if (n >= sizeof digits) return qt_cli_bad(key, val, "a byte count such as 4G");
    memcpy(digits, val, n + 1);
    if (at) digits[n - 1] = 0;
    int shift = at ? 10 * (int)(at - sfx + 1) : 0;
    if (qt_cli_u64(digits, &u) || u == 0 || u > ((uint64_t)1 << 50) >> shift)
        return qt_cli_bad(key, val, "a positive byte count up to 1P (2^50 bytes), "
                          "digits with an optional K, M, G, T or P suffix (e.g. 4G, 512K, 1P)");
    *out = (int64_t)(u << shift);
    return QT_OK;
}

/* A decimal number in (lo, hi] (lo_open) or [lo, hi], else the message naming `expect`.
 * Plain decimal only: strtod alone also takes a leading blank or sign and hex floats. */
static int qt_cli_number(const char *key, const char *val, double lo, int lo_open, double hi,
                         const char *expect, double *out)
{
    errno = 0;
    char *end = NULL;
    double v = strtod(val, &end);
    if (!((*val >= '0' && *val <= '9') || *val == '.') || strpbrk(val, "xX"))
        return qt_cli_bad(key, val, expect);
    if (errno || *end || end == val || !(lo_open ? v > lo : v >= lo) || v > hi)
        return qt_cli_bad(key, val, expect);
    *out = v;
    return QT_OK;
}

/* A 0|1 switch. */
static int qt_cli_flag(const char *key, const char *val, int *out)
{
    if (strcmp(val, "0") && strcmp(val, "1")) return qt_cli_bad(key, val, "0 or 1");
    *out = val[0] == '1';
    return QT_OK;
}

/* Key k's value val (not empty unless help) into *c; QT_OK or QT_E_ARG after the message. */
static int qt_cli_set(qt_cli *c, int k, const char *val)
{
    const char *key = qt_cli_names[k];
    uint64_t u = 0;
    double v = 0.0;
    int rc = QT_OK;
    switch (k) {
    case QT_KEY_STEPS:
        if (qt_cli_u64(val, &u) || u > (uint64_t)INT64_MAX / 2)
            return qt_cli_bad(key, val, "a non-negative integer up to " QT_CLI_MAX_TEXT);
        c->steps = (int64_t)u;
        break;
    case QT_KEY_SAVE_EVERY:
        if (qt_cli_u64(val, &u) || u == 0 || u > (uint64_t)INT64_MAX / 2)
            return qt_cli_bad(key, val, "a positive integer up to " QT_CLI_MAX_TEXT);
        c->save_every = (int64_t)u;
        break;
    case QT_KEY_EVAL_HOLDOUT:
        if (qt_cli_u64(val, &u) || u == 0 || u > (uint64_t)INT64_MAX / 2)
            return qt_cli_bad(key, val, "a positive number of windows up to " QT_CLI_MAX_TEXT);
        c->eval_holdout = (int64_t)u;
        break;
    case QT_KEY_SAVE_SHARD_SIZE:
        c->save_shard_size_arg = val;
        return qt_cli_byte_count(key, val, &c->save_shard_size);
    case QT_KEY_SEED:
        if (qt_cli_u64(val, &u))
            return qt_cli_bad(key, val, "an unsigned decimal integer up to 18446744073709551615 "
                              "(2^64 - 1)");
        c->seed = u;
        break;
    case QT_KEY_LR:
        rc = qt_cli_number(key, val, 0.0, 0, 1e30, "a finite non-negative number", &v);
        if (rc == QT_OK) c->learning_rate = (float)v;
        break;
    case QT_KEY_ARENA_PAGES:
        if (strcmp(val, "auto") && strcmp(val, "huge"))
            return qt_cli_bad(key, val, "auto or huge");
        c->arena_huge = !strcmp(val, "huge");
        break;
    case QT_KEY_DATA_DTYPE:
        if (strcmp(val, "uint16") && strcmp(val, "uint32"))
            return qt_cli_bad(key, val, "uint16 or uint32");
        c->data_dtype = val;
        break;
    case QT_KEY_PROFILE: return qt_cli_flag(key, val, &c->profile);
    case QT_KEY_COMM_TIMEOUT:
    case QT_KEY_START_TIMEOUT:
        rc = qt_cli_number(key, val, 0.0, 1, 1e6, "a number of seconds in (0, 1e6]", &v);
        if (rc == QT_OK) *(k == QT_KEY_COMM_TIMEOUT ? &c->comm_timeout : &c->start_timeout) = v;
        break;
    case QT_KEY_OVERWRITE: return qt_cli_flag(key, val, &c->overwrite);
    case QT_KEY_ALLOW_DATA_CHANGE: return qt_cli_flag(key, val, &c->allow_data_change);
    case QT_KEY_LOAD_WEIGHTS_ONLY: return qt_cli_flag(key, val, &c->load_weights_only);
    case QT_KEY_ALLOW_STATE_CHANGE: return qt_cli_flag(key, val, &c->allow_state_change);
    case QT_KEY_TRUNCATE_METRICS: return qt_cli_flag(key, val, &c->truncate_metrics);
    case QT_KEY_DATA: c->data = val; break;
    case QT_KEY_EVAL_DATA: c->eval_data = val; break;
    case QT_KEY_LOAD: c->load = val; break;
    case QT_KEY_SAVE: c->save = val; break;
    case QT_KEY_METRICS: c->metrics = val; break;
    case QT_KEY_DUMP_GRADS: c->dump_grads = val; break;
    case QT_KEY_TOKENIZER: c->tokenizer = val; break;
    case QT_KEY_HELP: c->help = 1; break;
    default: break;
    }
    return rc;
}

int qt_cli_parse(qt_cli *c, int argc, char **argv)
{
    int seen[QT_KEY_COUNT] = {0};
    memset(c, 0, sizeof *c);
    c->steps = -1;
    c->learning_rate = -1.0f;
    c->save_shard_size = (int64_t)4 << 30;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "help") || !strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            c->help = 1;
            continue;
        }
        const char *eq = strchr(arg, '=');
        if (!eq) {
            fprintf(stderr, "qtrain: argument '%s' is not key=value (try: help)\n", arg);
            return QT_E_ARG;
        }
        const int k = qt_cli_find(arg, (size_t)(eq - arg));
        if (k == QT_KEY_COUNT) return QT_E_ARG;
        const char *key = qt_cli_names[k], *val = eq + 1;
        if (seen[k]) {
            fprintf(stderr, "qtrain: key %s given twice\n", key);
            return QT_E_ARG;
        }
        seen[k] = 1;
        if (!*val && k != QT_KEY_HELP) return qt_cli_bad(key, val, "a non-empty value");
        int rc = qt_cli_set(c, k, val);
        if (rc != QT_OK) return rc;
    }
    if (c->save_every && !c->save) {
        fprintf(stderr, "qtrain: save_every=%lld needs save=PATH\n", (long long)c->save_every);
        return QT_E_ARG;
    }
    if (c->tokenizer && (!c->save || qt_checkpoint_is_file(c->save))) {
        fprintf(stderr, "qtrain: tokenizer=%s needs save=DIR, a checkpoint directory (the "
                "tokenizer files are copied into it)%s\n", c->tokenizer,
                c->save ? "; a save= path ending in .safetensors is one file" : "");
        return QT_E_ARG;
    }
    if (c->save && c->dump_grads && !strcmp(c->save, c->dump_grads)) {
        fprintf(stderr, "qtrain: save= and dump_grads= name the same file %s: the checkpoint "
                "would replace the gradient dump; give two paths\n", c->save);
        return QT_E_ARG;
    }
    if (c->load_weights_only && !c->load) {
        fprintf(stderr, "qtrain: load_weights_only=1 needs load=PATH\n");
        return QT_E_ARG;
    }
    if (c->allow_state_change && !c->load) {
        fprintf(stderr, "qtrain: allow_state_change=1 needs load=PATH (the checkpoint whose "
                "optimizer state and step it resumes)\n");
        return QT_E_ARG;
    }
    if (c->allow_state_change && c->load_weights_only) {
        fprintf(stderr, "qtrain: allow_state_change=1 and load_weights_only=1 contradict each "
                "other: the first resumes the Adam moments and the step of load=%s across a "
                "state-hash change, the second loads its weights only, from step 0; give one\n",
                c->load);
        return QT_E_ARG;
    }
    if (c->truncate_metrics && !c->metrics) {
        fprintf(stderr, "qtrain: truncate_metrics=1 needs metrics=PATH\n");
        return QT_E_ARG;
    }
    return QT_OK;
}
