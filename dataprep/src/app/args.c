/* args.c - key=value parsing (args.h). Invariants: every key given is one of the command's
 * keys and appears once; values are never empty; after the first `--` every argument is
 * positional, '=' or not; a number is plain decimal below 2^64 (never clamped). */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"

static int key_index(const qtd_args *a, const char *k, size_t len)
{
    for (int i = 0; i < QTD_MAX_KEYS && a->keys[i]; i++)
        if (strlen(a->keys[i]) == len && !strncmp(a->keys[i], k, len))
            return i;
    return -1;
}

/* A key is made of [a-z0-9_]; anything else before the '=' (a '/', a '.') is likely a file
 * name with '=' in it, which only `--` can pass as an INPUT. */
static int unknown_key(const char *cmd, const char *arg, size_t klen, const char *known, int takes_inputs)
{
    int keylike = 1;
    for (size_t k = 0; k < klen; k++)
        if (!((arg[k] >= 'a' && arg[k] <= 'z') || (arg[k] >= '0' && arg[k] <= '9') || arg[k] == '_'))
            keylike = 0;
    if (keylike || !takes_inputs)
        return qtd_fail("%s: unknown key '%.*s' in '%s'; expected one of %s", cmd, (int)klen, arg, arg, known);
    return qtd_fail("%s: unknown key '%.*s' in '%s' (expected one of %s); if '%s' is a file, put it after -- "
                    "(qtrain-data %s KEY=VALUE... -- INPUT...)", cmd, (int)klen, arg, arg, known, arg, cmd);
}

int qtd_args_parse(qtd_args *a, const char *cmd, int argc, char **argv, int max_pos)
{
    char known[256] = "";
    for (int i = 0; i < QTD_MAX_KEYS && a->keys[i]; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s=", i ? " " : "", a->keys[i]);
    int keys_end = argc;
    for (int i = 0; i < argc; i++) {
        if (i < keys_end && !strcmp(argv[i], "--")) {
            keys_end = i;   /* `--` ends the keys: every later argument is positional */
            continue;
        }
        const char *eq = strchr(argv[i], '=');
        if (i > keys_end || !eq || argv[i][0] == '=') {
            if (a->npos >= max_pos)
                return qtd_fail("%s: argument '%s' is not key=value (keys: %s)", cmd, argv[i], known);
            a->pos[a->npos++] = argv[i];
            continue;
        }
        int k = key_index(a, argv[i], (size_t)(eq - argv[i]));
        if (k < 0)
            return unknown_key(cmd, argv[i], (size_t)(eq - argv[i]), known, max_pos > 0);
        if (a->vals[k])
            return qtd_fail("%s: key '%s' given twice", cmd, a->keys[k]);
        if (!eq[1])
            return qtd_fail("%s: '%s' has an empty value", cmd, argv[i]);
        a->vals[k] = eq + 1;
    }
    return 0;
}

const char *qtd_arg(const qtd_args *a, const char *key, const char *def)
{
    int k = key_index(a, key, strlen(key));
    return k >= 0 && a->vals[k] ? a->vals[k] : def;
}

int qtd_arg_u64(const qtd_args *a, const char *key, uint64_t def, uint64_t *out)
{
    const char *v = qtd_arg(a, key, NULL);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    if (v[0] < '0' || v[0] > '9')
        return qtd_fail("%s=%s: expected a non-negative integer", key, v);
    errno = 0;
    *out = strtoull(v, &end, 10);
    if (*end)
        return qtd_fail("%s=%s: expected a non-negative integer", key, v);
    if (errno == ERANGE)   /* strtoull's 2^64-1 would stand in for the value given */
        return qtd_fail("%s=%s: expected a non-negative integer below 2^64", key, v);
    return 0;
}
