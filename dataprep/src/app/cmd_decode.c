/* cmd_decode.c - `qtrain-data decode tokenizer=FILE in=FILE [from=N] [count=N]` (the bytes
 * of tokens from..from+count-1 on stdout, as the tokenizer's vocabulary holds them: a range
 * may start or end inside a multi-byte character) and `qtrain-data info in=FILE [eos=ID]`
 * (tokens, bytes, largest id, documents = number of EOS ids: eos= if given, else the id the
 * header records (version 2), else 151643; and what the header records).
 * Invariant: a range beyond the file or an id beyond the vocabulary is an error naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../tok/tokenizer.h"
#include "args.h"
#include "commands.h"
#include "tokfile.h"

static int decode_range(const qtd_tok *t, const qtd_tokfile *f, const char *in, uint64_t from, uint64_t count)
{
    qtd_bytes out = {0};
    uint32_t chunk[4096];
    int rc = 0;
    for (uint64_t k = from; k < from + count && !rc;) {
        size_t m = 0;
        for (; m < 4096 && k < from + count; m++, k++) {
            chunk[m] = qtd_tokf_get(f, k);
            if (chunk[m] >= t->nids || !t->has[chunk[m]]) {
                qtd_bytes_free(&out);
                return qtd_fail("%s: token %llu is id %u, not in the vocabulary of the tokenizer (%u ids)", in,
                                (unsigned long long)k, chunk[m], t->nids);
            }
        }
        out.len = 0;
        if (qtd_tok_decode(t, chunk, m, &out)) {
            rc = -1;
        } else if (fwrite(out.data, 1, out.len, stdout) != out.len)
            rc = qtd_fail("stdout: write error");
    }
    qtd_bytes_free(&out);
    return rc;
}

int qtd_cmd_decode(int argc, char **argv)
{
    qtd_args a = {.keys = {"tokenizer", "in", "from", "count", NULL}};
    if (qtd_args_parse(&a, "decode", argc, argv, 0))
        return -1;
    const char *tokpath = qtd_arg(&a, "tokenizer", NULL), *in = qtd_arg(&a, "in", NULL);
    if (!tokpath || !in)
        return qtd_fail("decode: expected tokenizer=FILE in=FILE [from=N] [count=N]");
    uint64_t from, count;
    qtd_tokfile f;
    qtd_tok t;
    memset(&t, 0, sizeof t);
    int rc = qtd_arg_u64(&a, "from", 0, &from) || qtd_tokf_open(&f, in) ? -1 : 0;
    if (!rc) {
        rc = qtd_arg_u64(&a, "count", from < f.count ? f.count - from : 0, &count);
        if (!rc && (from > f.count || count > f.count - from))
            rc = qtd_fail("%s: from=%llu count=%llu is beyond its %llu tokens", in, (unsigned long long)from,
                          (unsigned long long)count, (unsigned long long)f.count);
        if (!rc)
            rc = qtd_tok_load(&t, tokpath);
        if (!rc)
            rc = decode_range(&t, &f, in, from, count);
        qtd_tokf_close(&f);
    }
    qtd_tok_free(&t);
    return rc;
}

int qtd_cmd_info(int argc, char **argv)
{
    qtd_args a = {.keys = {"in", "eos", NULL}};
    if (qtd_args_parse(&a, "info", argc, argv, 0))
        return -1;
    const char *in = qtd_arg(&a, "in", NULL);
    uint64_t eos;
    if (!in)
        return qtd_fail("info: expected in=FILE [eos=ID]");
    qtd_tokfile f;
    if (qtd_tokf_open(&f, in))
        return -1;
    if (qtd_arg_u64(&a, "eos", f.eos >= 0 ? (uint64_t)f.eos : 151643, &eos) ||
        (eos > 0xFFFFFFFFu && qtd_fail("eos=%s: expected a token id below 2^32 (the ids a token "
                                       "file holds)", qtd_arg(&a, "eos", "")))) {
        qtd_tokf_close(&f);
        return -1;
    }
    char rec[96];
    if (f.eos >= 0)
        snprintf(rec, sizeof rec, "version 2, end-of-document id %lld", (long long)f.eos);
    else
        snprintf(rec, sizeof rec, "version %u, %s", f.version,
                 f.eos == -1 ? "no separator (eos=none)" : "no end-of-document id recorded");
    uint64_t docs = 0;
    uint32_t maxid = 0;
    for (uint64_t k = 0; k < f.count; k++) {
        uint32_t id = qtd_tokf_get(&f, k);
        docs += id == eos;
        if (id > maxid)
            maxid = id;
    }
    printf("%s: %llu token%s of %u bytes, %zu bytes, largest id %u, %llu document%s (EOS id %llu); header: %s\n",
           in, (unsigned long long)f.count, qtd_s(f.count), f.width, f.size, maxid, (unsigned long long)docs,
           qtd_s(docs), (unsigned long long)eos, rec);
    qtd_tokf_close(&f);
    return 0;
}
