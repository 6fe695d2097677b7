/* model.c - the "model" object of a tokenizer.json: a byte-level BPE vocabulary ("vocab":
 * byte-level string -> id) and its "merges" (["a b", ...] or [["a", "b"], ...], rank =
 * index). Every vocab string is turned back into the raw bytes it stands for; a merge whose
 * parts or whose concatenation is not in the vocabulary is refused, as Hugging Face refuses
 * it. Invariant: ids are unique; the lookup table maps raw bytes to ids during loading only. */
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "../base/json.h"
#include "../base/utf8.h"
#include "load.h"
#include "tokenizer.h"

typedef struct {
    uint32_t *slot;   /* id + 1, 0 = empty */
    size_t mask;
} bytes_map;

static uint64_t hb(const uint8_t *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static int64_t map_find(const bytes_map *m, const qtd_tok *t, const uint8_t *s, size_t n)
{
    for (size_t h = hb(s, n) & m->mask;; h = (h + 1) & m->mask) {
        uint32_t v = m->slot[h];
        if (!v)
            return -1;
        if (t->tok_len[v - 1] == n && !memcmp(t->pool.data + t->tok_off[v - 1], s, n))
            return v - 1;
    }
}

/* byte-level string -> raw bytes appended to out; -1 when a code point stands for no byte */
static int unbyte(const char *s, size_t n, qtd_bytes *out)
{
    size_t i = 0;
    while (i < n) {
        int b = qtd_bytelevel_byte(qtd_utf8_next((const uint8_t *)s, &i));
        if (b < 0)
            return -1;
        uint8_t c = (uint8_t)b;
        qtd_bytes_put(out, &c, 1);
    }
    return 0;
}

static int read_vocab(qtd_tok *t, const qtd_json *j, uint32_t vocab, const char *path, bytes_map *m)
{
    uint32_t maxid = 0;
    for (uint32_t c = j->nodes[vocab].first; c; c = j->nodes[c].next) {
        double v = j->nodes[c].type == QTD_J_NUM ? strtod(qtd_json_str(j, c), NULL) : -1;
        if (v < 0 || v > 4e9 || v != (double)(uint32_t)v)
            return qtd_fail("%s: model.vocab[\"%s\"] is not a token id", path, qtd_json_key(j, c));
        if ((uint32_t)v > maxid)
            maxid = (uint32_t)v;
    }
    if (qtd_tok_alloc_ids(t, maxid + 1))
        return -1;
    size_t cap = 1024;
    while (cap < (size_t)j->nodes[vocab].count * 2)
        cap *= 2;
    m->slot = (uint32_t *)calloc(cap, sizeof *m->slot);
    m->mask = cap - 1;
    for (uint32_t c = j->nodes[vocab].first; c; c = j->nodes[c].next) {
        uint32_t id = (uint32_t)strtod(qtd_json_str(j, c), NULL);
        if (t->has[id])
            return qtd_fail("%s: model.vocab: id %u given twice", path, id);
        t->tok_off[id] = (uint32_t)t->pool.len;
        if (unbyte(qtd_json_key(j, c), j->nodes[c].klen, &t->pool))
            return qtd_fail("%s: model.vocab[\"%s\"] is not a byte-level token (a ByteLevel BPE vocabulary "
                            "was expected)", path, qtd_json_key(j, c));
        t->tok_len[id] = (uint32_t)(t->pool.len - t->tok_off[id]);
        t->has[id] = 1;
        size_t h = hb(t->pool.data + t->tok_off[id], t->tok_len[id]) & m->mask;
        while (m->slot[h])
            h = (h + 1) & m->mask;
        m->slot[h] = id + 1;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        int64_t id = map_find(m, t, &c, 1);
        if (id < 0)
            return qtd_fail("%s: model.vocab lacks the token of byte 0x%02X (a byte-level vocabulary has all 256)",
                            path, b);
        t->byte_id[b] = (uint32_t)id;
    }
    return 0;
}

/* one merge: its two parts as byte-level strings */
static int merge_parts(const qtd_json *j, uint32_t c, const char **a, size_t *al, const char **b, size_t *bl)
{
    const qtd_jnode *nd = &j->nodes[c];
    if (nd->type == QTD_J_STR) {
        const char *s = qtd_json_str(j, c), *sp = memchr(s, ' ', nd->slen);
        if (!sp || memchr(sp + 1, ' ', nd->slen - (size_t)(sp + 1 - s)))
            return -1;
        *a = s, *al = (size_t)(sp - s), *b = sp + 1, *bl = nd->slen - *al - 1;
        return 0;
    }
    if (nd->type != QTD_J_ARR || nd->count != 2 || j->nodes[nd->first].type != QTD_J_STR ||
        j->nodes[j->nodes[nd->first].next].type != QTD_J_STR)
        return -1;
    uint32_t x = nd->first, y = j->nodes[x].next;
    *a = qtd_json_str(j, x), *al = j->nodes[x].slen, *b = qtd_json_str(j, y), *bl = j->nodes[y].slen;
    return 0;
}

static int read_merges(qtd_tok *t, const qtd_json *j, uint32_t merges, const char *path, const bytes_map *m)
{
    uint32_t n = j->nodes[merges].count, r = 0;
    uint32_t *l = (uint32_t *)qtd_xrealloc(NULL, (n + 1) * sizeof *l), *rt = (uint32_t *)qtd_xrealloc(NULL, (n + 1) * sizeof *rt),
             *res = (uint32_t *)qtd_xrealloc(NULL, (n + 1) * sizeof *res);
    qtd_bytes tmp = {0};
    int rc = 0;
    for (uint32_t c = j->nodes[merges].first; c && !rc; c = j->nodes[c].next, r++) {
        const char *a, *b;
        size_t al, bl;
        if (merge_parts(j, c, &a, &al, &b, &bl)) {
            rc = qtd_fail("%s: model.merges[%u] is neither \"a b\" nor [\"a\", \"b\"]", path, r);
            break;
        }
        tmp.len = 0;
        int bad = unbyte(a, al, &tmp);
        size_t split = tmp.len;
        bad |= unbyte(b, bl, &tmp);
        int64_t ia = bad ? -1 : map_find(m, t, tmp.data, split), ib = bad ? -1 : map_find(m, t, tmp.data + split, tmp.len - split),
                ir = bad ? -1 : map_find(m, t, tmp.data, tmp.len);
        if (ia < 0 || ib < 0 || ir < 0)
            rc = qtd_fail("%s: model.merges[%u] (\"%.*s\" \"%.*s\"): a part or the merged token is not in model.vocab",
                          path, r, (int)al, a, (int)bl, b);
        l[r] = (uint32_t)ia, rt[r] = (uint32_t)ib, res[r] = (uint32_t)ir;
    }
    if (!rc)
        rc = qtd_bpe_set_merges(t, l, rt, res, n);
    free(l), free(rt), free(res), qtd_bytes_free(&tmp);
    return rc;
}

int qtd_tok_read_model(qtd_tok *t, const qtd_json *j, uint32_t model, const char *path)
{
    uint32_t vocab = qtd_json_get(j, model, "vocab", 5), merges = qtd_json_get(j, model, "merges", 6);
    if (!vocab || j->nodes[vocab].type != QTD_J_OBJ)
        return qtd_fail("%s: model.vocab is missing or not an object", path);
    if (!merges || j->nodes[merges].type != QTD_J_ARR)
        return qtd_fail("%s: model.merges is missing or not an array", path);
    bytes_map m = {0};
    int rc = read_vocab(t, j, vocab, path, &m);
    if (!rc)
        rc = read_merges(t, j, merges, path, &m);
    free(m.slot);
    return rc;
}

int qtd_tok_alloc_ids(qtd_tok *t, uint32_t n)
{
    if (n > (1u << 26))
        return qtd_fail("token id %u is too large", n - 1);
    t->tok_off = (uint32_t *)qtd_xrealloc(t->tok_off, n * sizeof *t->tok_off);
    t->tok_len = (uint32_t *)qtd_xrealloc(t->tok_len, n * sizeof *t->tok_len);
    t->has = (uint8_t *)qtd_xrealloc(t->has, n);
    for (uint32_t i = t->nids; i < n; i++)
        t->tok_off[i] = t->tok_len[i] = 0, t->has[i] = 0;
    t->nids = n;
    return 0;
}
