/* args.c - key=value parsing (args.h). Invariant: every key given is one of the command's
 * keys and appears once; values are never empty. */
#include "args.h"

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

int qtd_args_parse(qtd_args *a, const char *cmd, int argc, char **argv, int max_pos)
{
    char known[256] = "";
    for (int i = 0; i < QTD_MAX_KEYS && a->keys[i]; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s=", i ? " " : "", a->keys[i]);
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || argv[i][0] == '=') {
            if (a->npos >= max_pos)
                return qtd_fail("%s: argument '%s' is not key=value (keys: %s)", cmd, argv[i], known);
            a->pos[a->npos++] = argv[i];
            continue;
        }
        int k = key_index(a, argv[i], (size_t)(eq - argv[i]));
        if (k < 0)
            return qtd_fail("%s: unknown key '%.*s' in '%s'; expected one of %s", cmd, (int)(eq - argv[i]), argv[i],
                            argv[i], known);
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
    *out = strtoull(v, &end, 10);
    if (*end)
        return qtd_fail("%s=%s: expected a non-negative integer", key, v);
    return 0;
}
