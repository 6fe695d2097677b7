/* args.h - key=value command-line arguments of qtrain-data (the style of qtrain's own
 * command line, docs/cli.md): each argument with '=' sets a known key once; the others are
 * positional, and so is every argument after a `--` (an INPUT whose name holds '='). */
#ifndef QTD_ARGS_H
#define QTD_ARGS_H

#include <stdint.h>

#define QTD_MAX_KEYS 8
#define QTD_MAX_POS 4096

typedef struct {
    const char *keys[QTD_MAX_KEYS];   /* NULL-terminated list of the command's keys */
    const char *vals[QTD_MAX_KEYS];
    const char *pos[QTD_MAX_POS];
    int npos;
} qtd_args;

/* Parses argv[0..argc) against a->keys (set by the caller). Returns 0, or -1 naming an
 * unknown or repeated key (when the command takes positional arguments and the key is not
 * made of [a-z0-9_], the message says to put a file name after --), or a positional argument
 * when max_pos is 0. The first `--` is dropped. */
int qtd_args_parse(qtd_args *a, const char *cmd, int argc, char **argv, int max_pos);
/* The value of key, or def when it was not given. */
const char *qtd_arg(const qtd_args *a, const char *key, const char *def);
/* Reads key as a non-negative integer (def when absent) into *out; -1 with a message. */
int qtd_arg_u64(const qtd_args *a, const char *key, uint64_t def, uint64_t *out);

#endif
