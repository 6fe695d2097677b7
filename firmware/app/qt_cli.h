/* qt_cli.h - the qtrain command line: key=value arguments.
 *
 * Parsing never exits and never allocates: strings point into argv. Every malformed or
 * unknown argument yields one stderr line naming the key, the value and what is expected.
 */
#ifndef QT_CLI_H
#define QT_CLI_H

#include <stdint.h>
#include <stdio.h>

typedef struct qt_cli {
    int64_t steps;             /* total steps to reach (resume counts loaded steps); -1 = plan */
    const char *data;          /* token file, NULL = embedded corpus */
    const char *data_dtype;    /* "uint16" | "uint32" for headerless raw files, or NULL */
    const char *load;          /* safetensors to load, or NULL */
    const char *save;          /* checkpoint written at the end (directory, or one *.safetensors
                                  file), or NULL */
    int64_t save_shard_size;   /* largest shard of a save= directory, bytes (default 4 GiB) */
    const char *save_shard_size_arg;   /* save_shard_size= as given, or NULL */
    int64_t save_every;        /* 0 = off */
    const char *tokenizer;     /* tokenizer.json (or its directory) copied into save= dirs,
                                  or NULL */
    const char *metrics;       /* JSON-lines path, or NULL */
    const char *dump_grads;    /* safetensors path for step gradients, or NULL */
    uint64_t seed;
    float learning_rate;       /* < 0: the plan's */
    int profile;               /* 1: per-op / per-phase timing printed at exit */
    double comm_timeout;       /* seconds a collective of the steps, evals and saves may
                                  wait for a peer; 0 = default */
    double start_timeout;      /* the same before the first step (start-up, load=, metrics=);
                                  0 = default (the larger of 300 and comm_timeout) */
    int overwrite;             /* 1: replace existing metrics / non-qtrain save targets */
    int allow_data_change;     /* 1: resume although the data hash differs from the
                                  checkpoint's (noted in the run manifest) */
    int load_weights_only;     /* 1: load= takes the weights only (step 0, fresh Adam
                                  moments), even from a checkpoint with optimizer state */
    int allow_state_change;    /* 1: load= resumes the Adam moments and the step although
                                  the checkpoint's state hash differs (noted in the manifest) */
    int truncate_metrics;      /* 1: a resumed run cuts the metrics= lines of steps at or
                                  past its start step (crash recovery; noted in the manifest) */
    const char *eval_data;     /* held-out token file (formats of data=), or NULL */
    int64_t eval_holdout;      /* > 0: the last N windows of data= are the eval source */
    int arena_huge;            /* arena_pages=huge: 1 (wait for every huge page); auto: 0 */
    int help;
} qt_cli;

/* Parses argv[1..argc). Returns 0 or QT_E_ARG (message printed). */
int qt_cli_parse(qt_cli *c, int argc, char **argv);
/* Writes the usage text. */
void qt_cli_usage(FILE *f, const char *prog);

#endif
