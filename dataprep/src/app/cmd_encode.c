/* cmd_encode.c - `qtrain-data encode tokenizer=FILE out=FILE [field=text]
 * [eos=auto|ID|none] [overwrite=1] [--] INPUT...`: every document of every INPUT (input.h)
 * encoded in order, each followed by the EOS id, into one QTTOKENS file (tokfile.h: version
 * 2, whose header records that id, or none, for packing: docs/data.md); a
 * summary on stdout and, for long runs, a progress line on stderr about once a second.
 * Invariants: out= and field= are checked before the tokenizer or any input is read
 * (outpath.h: an existing file is replaced only with overwrite=1, never an input); an output
 * without documents or with fewer than 2 tokens is refused; on any error the temporary
 * output is removed and the target is untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/err.h"
#include "../tok/tokenizer.h"
#include "args.h"
#include "commands.h"
#include "input.h"
#include "outpath.h"
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
    c->tok.longest_piece = 0;
    qtd_tok_encode(&c->tok, doc, n, &c->ids);
    if (c->tok.longest_piece >= QTD_LONG_PIECE)
        qtd_note("%s: document %llu holds a pre-tokenizer piece of %zu bytes (a run with no "
                 "space, punctuation or letter / digit change for the Split pattern to cut "
                 "at): byte-level BPE merges a piece whole, as Hugging Face does, which took "
                 "about %.0f MiB of memory (%d bytes a byte) and grows with the piece: a 500 "
                 "MB one needs about 10 GB", c->input, (unsigned long long)c->docs + 1,
                 c->tok.longest_piece,
                 (double)c->tok.longest_piece * QTD_BPE_BYTES_PER_BYTE / 1048576.0,
                 QTD_BPE_BYTES_PER_BYTE);
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
            fprintf(stderr, "qtrain-data: %s: %.1f of %.1f MB, %llu document%s, %llu token%s, %.1f MB/s\n", c->input,
                    (double)done / 1e6, (double)total / 1e6, (unsigned long long)c->docs, qtd_s(c->docs),
                    (unsigned long long)c->tokens, qtd_s(c->tokens), (double)c->bytes / 1e6 / (t - c->t0));
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

/* "A B C" (the INPUTs, the first few) into buf, for the messages about all of them */
static const char *input_list(const qtd_args *a, char *buf, size_t cap)
{
    buf[0] = 0;
    for (int i = 0; i < a->npos && i < 4; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? " " : "", a->pos[i]);
    if (a->npos > 4)
        snprintf(buf + strlen(buf), cap - strlen(buf), " and %d more", a->npos - 4);
    return buf;
}

/* What can be refused before the tokenizer or any input is read: keys' values, field= on
 * plain-text inputs, the out= path (outpath.h). */
static int check_args(const qtd_args *a, const char *out, int *overwrite)
{
    const char *ow = qtd_arg(a, "overwrite", "0"), *field = qtd_arg(a, "field", NULL);
    if (strcmp(ow, "0") && strcmp(ow, "1"))
        return qtd_fail("overwrite=%s: expected 0 or 1", ow);
    *overwrite = ow[0] == '1';
    for (int i = 0; field && i < a->npos; i++)
        if (!qtd_input_is_jsonl(a->pos[i]))
            return qtd_fail("field=%s applies to JSON-lines inputs (.jsonl, .ndjson, .json); %s is read as plain text "
                            "(one document): drop field=, or rename the file", field,
                            strcmp(a->pos[i], "-") ? a->pos[i] : "- (stdin)");
    return qtd_out_check(out, *overwrite, qtd_arg(a, "tokenizer", NULL), a->pos, a->npos);
}

/* A token file qtrain can train on holds at least one document and 2 tokens (an input and
 * its target). */
static int check_output(const enc_ctx *c, const qtd_args *a)
{
    char list[1024];
    if (c->docs == 0)
        return qtd_fail("encode: no documents in %s (JSON lines with blank lines only); nothing written: give a text "
                        "file, or JSON lines with at least one object", input_list(a, list, sizeof list));
    if (c->tokens < 2)
        return qtd_fail("encode: %llu token%s from %s (%llu document%s, eos=%s); a token file needs at least 2 tokens "
                        "(an input and its target) to train on: nothing written, give more text",
                        (unsigned long long)c->tokens, qtd_s(c->tokens), input_list(a, list, sizeof list),
                        (unsigned long long)c->docs, qtd_s(c->docs), qtd_arg(a, "eos", "auto"));
    return 0;
}

static int run(enc_ctx *c, const qtd_args *a)
{
    const char *tokpath = qtd_arg(a, "tokenizer", NULL), *out = qtd_arg(a, "out", NULL);
    int overwrite = 0;
    if (!tokpath || !out || a->npos == 0)
        return qtd_fail("encode: expected tokenizer=FILE out=FILE and at least one INPUT (a text file, a .jsonl file "
                        "or - for stdin)");
    /* the temporary output is created before the tokenizer is read: a directory that does
     * not take files (read-only, or unwritable though access() allowed it to root) fails first */
    if (check_args(a, out, &overwrite) || qtd_tokw_open(&c->w, out, overwrite))
        return -1;
    if (qtd_tok_load(&c->tok, tokpath) || resolve_eos(c, qtd_arg(a, "eos", "auto"), tokpath))
        return -1;
    c->t0 = c->last_report = now();
    for (int i = 0; i < a->npos; i++) {
        c->input = a->pos[i];
        if (qtd_input_each(a->pos[i], qtd_arg(a, "field", "text"), on_doc, c))
            return -1;
    }
    if (check_output(c, a) || qtd_tokw_commit(&c->w, c->eos))
        return -1;
    double dt = now() - c->t0;
    if (dt <= 0)
        dt = 1e-9;
    char eos[32] = "eos none";
    if (c->eos >= 0)
        snprintf(eos, sizeof eos, "eos %lld", (long long)c->eos);
    printf("qtrain-data: %llu document%s, %llu byte%s, %llu tokens (%s) in %.3f s: %.2f MB/s, %.0f tokens/s -> %s\n",
           (unsigned long long)c->docs, qtd_s(c->docs), (unsigned long long)c->bytes, qtd_s(c->bytes),
           (unsigned long long)c->tokens, eos, dt, (double)c->bytes / 1e6 / dt, (double)c->tokens / dt, out);
    return 0;
}

int qtd_cmd_encode(int argc, char **argv)
{
    qtd_args a = {.keys = {"tokenizer", "out", "field", "eos", "overwrite", NULL}};
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
