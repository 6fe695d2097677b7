/* main.c - qtrain-data, the text-to-tokens tool of qtrain (README "Text to tokens"):
 * dispatches to encode, decode and info (commands.h); prints the one error message and
 * exits 1 on failure, 2 on a usage error. */
#include <stdio.h>
#include <string.h>

#include "../base/err.h"
#include "../unicode/ucd.h"
#include "commands.h"

static void usage(FILE *f)
{
    fprintf(f,
            "qtrain-data - Qwen tokenizer (Hugging Face tokenizer.json, byte-level BPE) and token files\n"
            "  qtrain-data encode tokenizer=FILE out=FILE [field=text] [eos=auto|ID|none] [overwrite=1] [--] INPUT...\n"
            "      INPUT: a text file (one document), a .jsonl/.ndjson/.json file (one JSON object per line,\n"
            "      string member field=), or - (stdin, one document); after --, every argument is an INPUT\n"
            "      (a name with '='); out: a new QTTOKENS file of uint32 ids (an existing one is replaced\n"
            "      only with overwrite=1, never an input), each document followed by eos (auto: the id of\n"
            "      <|endoftext|>)\n"
            "  qtrain-data decode tokenizer=FILE in=FILE [from=N] [count=N]   the bytes of tokens on stdout\n"
            "  qtrain-data info in=FILE [eos=ID]   tokens, bytes, largest id, documents (EOS count)\n"
            "  qtrain-data --version\n"
            "Unicode data (NFC, \\p{L} \\p{N} \\p{M}, White_Space): Unicode %s.\n",
            qtd_ucd_version);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("qtrain-data 1 (Unicode %s)\n", qtd_ucd_version);
        return 0;
    }
    int rc;
    if (!strcmp(argv[1], "encode"))
        rc = qtd_cmd_encode(argc - 2, argv + 2);
    else if (!strcmp(argv[1], "decode"))
        rc = qtd_cmd_decode(argc - 2, argv + 2);
    else if (!strcmp(argv[1], "info"))
        rc = qtd_cmd_info(argc - 2, argv + 2);
    else {
        fprintf(stderr, "qtrain-data: unknown command '%s'; expected encode, decode or info\n", argv[1]);
        usage(stderr);
        return 2;
    }
    if (fflush(stdout))
        rc = -1;
    if (rc) {
        fprintf(stderr, "qtrain-data: %s\n", qtd_errmsg());
        return 1;
    }
    return 0;
}
