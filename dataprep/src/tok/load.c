/* load.c - reading a Hugging Face tokenizer.json (tokenizer.h): the configuration is checked
 * to be exactly what the Qwen2/Qwen3/Qwen3.5 files hold (model BPE without dropout, prefixes
 * or byte fallback; normalizer NFC; pre_tokenizer Sequence[Split(one of the two patterns,
 * Isolated, not inverted), ByteLevel(use_regex false, add_prefix_space false)];
 * post_processor null or ByteLevel; no truncation or padding), anything else is refused
 * naming the file and what it holds; then the model (model.c) and the added tokens.
 * Invariant: on failure t holds nothing the caller must use (qtd_tok_free releases it). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/err.h"
#include "load.h"
#include "pretok.h"

/* the string value of member `key` of obj, or NULL when absent / not a string */
static const char *str_of(const qtd_json *j, uint32_t obj, const char *key)
{
    uint32_t c = qtd_json_get(j, obj, key, strlen(key));
    return c && j->nodes[c].type == QTD_J_STR ? qtd_json_str(j, c) : NULL;
}

/* 1 when member `key` is absent, null, false or "" (an unused option) */
static int unset(const qtd_json *j, uint32_t obj, const char *key)
{
    uint32_t c = qtd_json_get(j, obj, key, strlen(key));
    return !c || j->nodes[c].type == QTD_J_NULL || j->nodes[c].type == QTD_J_FALSE ||
           (j->nodes[c].type == QTD_J_STR && j->nodes[c].slen == 0);
}

static int is_true(const qtd_json *j, uint32_t obj, const char *key)
{
    uint32_t c = qtd_json_get(j, obj, key, strlen(key));
    return c && j->nodes[c].type == QTD_J_TRUE;
}

static int check_model(const qtd_json *j, uint32_t model, const char *path)
{
    const char *type = model ? str_of(j, model, "type") : NULL;
    if (!type || strcmp(type, "BPE"))
        return qtd_fail("%s: model type \"%s\" is not BPE (a Qwen byte-level BPE tokenizer was expected)", path,
                        type ? type : "(none)");
    static const char *const off[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback",
                                      "ignore_merges"};
    for (size_t k = 0; k < sizeof off / sizeof off[0]; k++)
        if (!unset(j, model, off[k]))
            return qtd_fail("%s: model.%s is set; the Qwen tokenizers leave it unset (null, false or \"\")", path, off[k]);
    return 0;
}

static int check_pretok(qtd_tok *t, const qtd_json *j, uint32_t pt, const char *path)
{
    const char *type = pt ? str_of(j, pt, "type") : NULL;
    uint32_t seq = pt ? qtd_json_get(j, pt, "pretokenizers", 13) : 0;
    if (!type || strcmp(type, "Sequence") || !seq || j->nodes[seq].type != QTD_J_ARR || j->nodes[seq].count != 2)
        return qtd_fail("%s: pre_tokenizer \"%s\" is not the Qwen Sequence [Split, ByteLevel]", path, type ? type : "(none)");
    uint32_t sp = j->nodes[seq].first, bl = j->nodes[sp].next;
    const char *st = str_of(j, sp, "type"), *bt = str_of(j, bl, "type"), *beh = str_of(j, sp, "behavior");
    uint32_t pat = qtd_json_get(j, sp, "pattern", 7);
    uint32_t rx = pat ? qtd_json_get(j, pat, "Regex", 5) : 0;
    if (!st || strcmp(st, "Split") || !rx || j->nodes[rx].type != QTD_J_STR)
        return qtd_fail("%s: pre_tokenizer: the first of the Sequence is not a Split on a Regex pattern", path);
    t->pattern = qtd_pretok_pattern(qtd_json_str(j, rx), j->nodes[rx].slen);
    if (!t->pattern)
        return qtd_fail("%s: pre_tokenizer Split pattern \"%s\" is not a Qwen2/Qwen3/Qwen3.5 pattern", path,
                        qtd_json_str(j, rx));
    if (!beh || strcmp(beh, "Isolated") || is_true(j, sp, "invert"))
        return qtd_fail("%s: pre_tokenizer Split has behavior \"%s\"%s; Qwen's is Isolated, not inverted", path,
                        beh ? beh : "(none)", is_true(j, sp, "invert") ? " inverted" : "");
    if (!bt || strcmp(bt, "ByteLevel") || is_true(j, bl, "use_regex") || is_true(j, bl, "add_prefix_space"))
        return qtd_fail("%s: pre_tokenizer: the second of the Sequence is not ByteLevel with use_regex and "
                        "add_prefix_space false", path);
    return 0;
}

static int check_config(qtd_tok *t, const qtd_json *j, const char *path)
{
    if (j->nodes[0].type != QTD_J_OBJ)
        return qtd_fail("%s: not a JSON object", path);
    if (check_model(j, qtd_json_get(j, 0, "model", 5), path))
        return -1;
    uint32_t nz = qtd_json_get(j, 0, "normalizer", 10);
    const char *nt = nz ? str_of(j, nz, "type") : NULL;
    if (!nt || strcmp(nt, "NFC"))
        return qtd_fail("%s: normalizer \"%s\" is not NFC (the Qwen tokenizers normalise to NFC)", path,
                        nt ? nt : "(none)");
    if (check_pretok(t, j, qtd_json_get(j, 0, "pre_tokenizer", 13), path))
        return -1;
    uint32_t pp = qtd_json_get(j, 0, "post_processor", 14);
    const char *pt = pp && j->nodes[pp].type == QTD_J_OBJ ? str_of(j, pp, "type") : NULL;
    if (pp && j->nodes[pp].type != QTD_J_NULL && (!pt || strcmp(pt, "ByteLevel")))
        return qtd_fail("%s: post_processor \"%s\" is not ByteLevel or null (it would add tokens)", path,
                        pt ? pt : "?");
    if (!unset(j, 0, "truncation") || !unset(j, 0, "padding"))
        return qtd_fail("%s: truncation or padding is set; documents are encoded whole", path);
    return 0;
}

static int read_added(qtd_tok *t, const qtd_json *j, const char *path)
{
    uint32_t arr = qtd_json_get(j, 0, "added_tokens", 12);
    if (!arr || j->nodes[arr].type == QTD_J_NULL)
        return 0;
    if (j->nodes[arr].type != QTD_J_ARR)
        return qtd_fail("%s: added_tokens is not an array", path);
    t->added = (qtd_added *)calloc(j->nodes[arr].count + 1, sizeof *t->added);
    uint32_t k = 0;
    for (uint32_t c = j->nodes[arr].first; c; c = j->nodes[c].next, k++) {
        uint32_t idn = qtd_json_get(j, c, "id", 2), con = qtd_json_get(j, c, "content", 7);
        double v = idn && j->nodes[idn].type == QTD_J_NUM ? strtod(qtd_json_str(j, idn), NULL) : -1;
        if (v < 0 || v >= (1u << 26) || v != (double)(uint32_t)v || !con || j->nodes[con].type != QTD_J_STR ||
            !j->nodes[con].slen)
            return qtd_fail("%s: added_tokens[%u] lacks an integer id or a non-empty content", path, k);
        qtd_added *a = &t->added[t->nadded++];
        a->id = (uint32_t)v;
        a->normalized = (uint8_t)is_true(j, c, "normalized");
        a->lstrip = (uint8_t)is_true(j, c, "lstrip");
        a->rstrip = (uint8_t)is_true(j, c, "rstrip");
        a->single_word = (uint8_t)is_true(j, c, "single_word");
        a->special = (uint8_t)is_true(j, c, "special");
        a->off = (uint32_t)t->pool.len;
        a->len = (uint32_t)j->nodes[con].slen;
        qtd_bytes_put(&t->pool, qtd_json_str(j, con), a->len);
        if (a->id >= t->nids && qtd_tok_alloc_ids(t, a->id + 1))
            return -1;
        t->tok_off[a->id] = a->off;   /* an added token decodes to its content */
        t->tok_len[a->id] = a->len;
        t->has[a->id] = 1;
        t->first_byte[a->normalized][t->pool.data[a->off]] = 1;
    }
    return 0;
}

static int read_file(const char *path, qtd_bytes *b)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK);   /* a FIFO: no wait for a writer */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return qtd_fail("%s: cannot read the tokenizer file (%s)", path, fd < 0 ? "cannot open" : "not a regular file");
    }
    uint8_t *w = qtd_bytes_reserve(b, (size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, w + got, (size_t)st.st_size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != (size_t)st.st_size)
        return qtd_fail("%s: read error", path);
    b->len = got;
    return 0;
}

int qtd_tok_load(qtd_tok *t, const char *path)
{
    memset(t, 0, sizeof *t);
    qtd_bytes text = {0};
    qtd_json j = {0};
    int rc = read_file(path, &text);
    if (!rc && qtd_json_parse(&j, text.data, text.len)) {
        char why[512];
        snprintf(why, sizeof why, "%s", qtd_errmsg());
        /* a byte-order mark (a Windows editor's save) said only "a JSON value at byte 0" */
        if (text.len >= 3 && !memcmp(text.data, "\xef\xbb\xbf", 3))
            rc = qtd_fail("%s: not valid JSON: it starts with a UTF-8 byte-order mark (EF BB "
                          "BF), which the Hugging Face engine refuses too; save the file "
                          "without it", path);
        else
            rc = qtd_fail("%s: not valid JSON: %s", path, why);
    }
    if (!rc)
        rc = check_config(t, &j, path);
    if (!rc)
        rc = qtd_tok_read_model(t, &j, qtd_json_get(&j, 0, "model", 5), path);
    if (!rc)
        rc = read_added(t, &j, path);
    qtd_json_free(&j);
    qtd_bytes_free(&text);
    return rc;
}

int64_t qtd_tok_added_id(const qtd_tok *t, const char *s, size_t len)
{
    for (uint32_t k = 0; k < t->nadded; k++)
        if (t->added[k].len == len && !memcmp(t->pool.data + t->added[k].off, s, len))
            return t->added[k].id;
    return -1;
}

void qtd_tok_free(qtd_tok *t)
{
    qtd_bpe_free(t);
    free(t->tok_off), free(t->tok_len), free(t->has), free(t->added);
    qtd_bytes_free(&t->pool), qtd_bytes_free(&t->norm);
    memset(t, 0, sizeof *t);
}
