/* cmd_encode.c - `qtrain-data encode tokenizer=FILE out=FILE [field=text]
 * [eos=auto|ID|none] INPUT...`: every document of every INPUT (input.h) encoded in order,
 * each followed by the EOS id, into one QTTOKENS file (tokfile.h); a summary on stdout and,
 * for long runs, a progress line on stderr about once a second.
 * Invariant: on any error the temporary output is removed and the target is untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/err.h"
#include "../tok/tokenizer.h"
#include "args.h"
#include "commands.h"
#include "input.h"
#include "tokfile.h"

typedef struct {
    qtd_tok tok;
    qtd_tokwriter w;
    qtd_u32s ids;
    int64_t eos;   /* -1: none */
    uint64_t docs, bytes, tokens;
    const char *input;
    double t0, last_report;
} enc_ctx;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int on_doc(void *vc, const uint8_t *doc, size_t n, size_t done, size_t total)
{
    enc_ctx *c = (enc_ctx *)vc;
    c->ids.len = 0;
    qtd_tok_encode(&c->tok, doc, n, &c->ids);
    if (c->eos >= 0)
        qtd_u32s_push(&c->ids, (uint32_t)c->eos);
    c->docs++;
    c->bytes += n;
    c->tokens += c->ids.len;
    if (qtd_tokw_put(&c->w, c->ids.data, c->ids.len))
        return -1;
    if ((c->docs & 63) == 0 || n > (1u << 20)) {
        double t = now();
        if (t - c->last_report >= 1.0) {
            c->last_report = t;
            fprintf(stderr, "qtrain-data: %s: %.1f of %.1f MB, %llu documents, %llu tokens, %.1f MB/s\n", c->input,
                    (double)done / 1e6, (double)total / 1e6, (unsigned long long)c->docs,
                    (unsigned long long)c->tokens, (double)c->bytes / 1e6 / (t - c->t0));
        }
    }
    return 0;
}

static int resolve_eos(enc_ctx *c, const char *eos, const char *tokpath)
{
    if (!strcmp(eos, "none")) {
        c->eos = -1;
        return 0;
    }
    if (!strcmp(eos, "auto")) {
        c->eos = qtd_tok_added_id(&c->tok, "<|endoftext|>", 13);
        if (c->eos < 0)
            return qtd_fail("%s: no added token <|endoftext|> for eos=auto; give eos=ID or eos=none", tokpath);
        return 0;
    }
    char *end;
    unsigned long long v = strtoull(eos, &end, 10);
    if (eos[0] < '0' || eos[0] > '9' || *end)
        return qtd_fail("eos=%s: expected auto, none or a token id", eos);
    if (v >= c->tok.nids || !c->tok.has[v])
        return qtd_fail("eos=%s: not an id of %s (%u ids)", eos, tokpath, c->tok.nids);
    c->eos = (int64_t)v;
    return 0;
}

static int run(enc_ctx *c, const qtd_args *a)
{
    const char *tokpath = qtd_arg(a, "tokenizer", NULL), *out = qtd_arg(a, "out", NULL);
    if (!tokpath || !out || a->npos == 0)
        return qtd_fail("encode: expected tokenizer=FILE out=FILE and at least one INPUT (a text file, a .jsonl file "
                        "or - for stdin)");
    if (qtd_tok_load(&c->tok, tokpath) || resolve_eos(c, qtd_arg(a, "eos", "auto"), tokpath))
        return -1;
    if (qtd_tokw_open(&c->w, out))
        return -1;
    c->t0 = c->last_report = now();
    for (int i = 0; i < a->npos; i++) {
        c->input = a->pos[i];
        if (qtd_input_each(a->pos[i], qtd_arg(a, "field", "text"), on_doc, c))
            return -1;
    }
    if (qtd_tokw_commit(&c->w))
        return -1;
    double dt = now() - c->t0;
    if (dt <= 0)
        dt = 1e-9;
    printf("qtrain-data: %llu documents, %llu bytes, %llu tokens (eos %lld) in %.3f s: %.2f MB/s, %.0f tokens/s -> %s\n",
           (unsigned long long)c->docs, (unsigned long long)c->bytes, (unsigned long long)c->tokens,
           (long long)c->eos, dt, (double)c->bytes / 1e6 / dt, (double)c->tokens / dt, out);
    return 0;
}

int qtd_cmd_encode(int argc, char **argv)
{
    qtd_args a = {.keys = {"tokenizer", "out", "field", "eos", NULL}};
    if (qtd_args_parse(&a, "encode", argc, argv, QTD_MAX_POS))
        return -1;
    enc_ctx *c = (enc_ctx *)calloc(1, sizeof *c);
    if (!c)
        return qtd_fail("out of memory");
    c->w.fd = -1;
    int rc = run(c, &a);
    if (rc)
        qtd_tokw_abort(&c->w);
    qtd_tok_free(&c->tok);
    qtd_u32s_free(&c->ids);
    free(c);
    return rc;
}
