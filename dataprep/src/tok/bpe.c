/* bpe.c - byte-level BPE of one piece, with a merge table keyed by the pair of ids and a
 * cache of pieces already seen.
 * Merging: the symbols (initially one per byte) form a linked list; a binary min-heap holds
 * candidate pairs ordered by (rank, position of the left symbol), so the lowest-ranked pair
 * is merged first and, among equal ranks, the leftmost, as Hugging Face's BPE does. A heap
 * entry is stale when its left symbol died or the pair at its position is no longer the one
 * with that rank; stale entries are skipped when popped (a pair's text only grows, so a
 * position never holds the same pair twice).
 * Invariants: no allocation per byte (work arrays grow and are kept); the cache holds only
 * pieces of at most QTD_CACHE_MAX_PIECE bytes and is emptied when its pools pass a bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/err.h"
#include "tokenizer.h"

#define QTD_CACHE_MAX_PIECE 128
#define QTD_CACHE_SLOTS (1u << 20)
#define QTD_CACHE_POOL (64u << 20)

typedef struct {
    uint32_t rank, pos;
} heap_ent;

typedef struct {
    uint32_t *id;
    int32_t *next, *prev;
    heap_ent *heap;
    size_t cap, hcap;
} work;

static inline uint64_t mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

int qtd_bpe_set_merges(qtd_tok *t, const uint32_t *left, const uint32_t *right, const uint32_t *res, uint32_t n)
{
    free(t->mkey);
    free(t->mrank);
    free(t->mres);
    size_t cap = 1024;
    while (cap < (size_t)n * 2)
        cap *= 2;
    t->mkey = (uint64_t *)calloc(cap, sizeof *t->mkey);
    t->mrank = (uint32_t *)qtd_xrealloc(NULL, cap * sizeof *t->mrank);
    t->mres = (uint32_t *)qtd_xrealloc(NULL, cap * sizeof *t->mres);
    if (!t->mkey)
        return qtd_fail("out of memory for %u merges", n);
    t->mmask = cap - 1;
    t->nmerges = n;
    for (uint32_t r = 0; r < n; r++) {
        uint64_t key = (uint64_t)left[r] << 32 | right[r];
        size_t h = mix(key + 1) & t->mmask;   /* stored as key + 1: 0 marks an empty slot */
        while (t->mkey[h] && t->mkey[h] != key + 1)
            h = (h + 1) & t->mmask;
        /* a repeated pair takes its last rank, as the map Hugging Face collects does */
        t->mkey[h] = key + 1;
        t->mrank[h] = r;
        t->mres[h] = res[r];
    }
    return 0;
}

/* rank and result of the pair (a, b); rank UINT32_MAX when they do not merge */
static inline uint32_t lookup(const qtd_tok *t, uint32_t a, uint32_t b, uint32_t *res)
{
    uint64_t key = ((uint64_t)a << 32 | b) + 1;
    size_t h = mix(key) & t->mmask;
    for (;;) {
        uint64_t k = t->mkey[h];
        if (k == key) {
            *res = t->mres[h];
            return t->mrank[h];
        }
        if (!k)
            return UINT32_MAX;
        h = (h + 1) & t->mmask;
    }
}

static void heap_push(work *w, size_t *n, uint32_t rank, uint32_t pos)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        heap_ent *e = &w->heap[p];
        if (e->rank < rank || (e->rank == rank && e->pos < pos))
            break;
        w->heap[i] = *e;
        i = p;
    }
    w->heap[i].rank = rank;
    w->heap[i].pos = pos;
}

static heap_ent heap_pop(work *w, size_t *n)
{
    heap_ent top = w->heap[0], x = w->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && (w->heap[c + 1].rank < w->heap[c].rank ||
                           (w->heap[c + 1].rank == w->heap[c].rank && w->heap[c + 1].pos < w->heap[c].pos)))
            c++;
        if (x.rank < w->heap[c].rank || (x.rank == w->heap[c].rank && x.pos < w->heap[c].pos))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    w->heap[i] = x;
    return top;
}

static work *get_work(qtd_tok *t, size_t n)
{
    work *w = (work *)t->scratch;
    if (!w) {
        w = (work *)calloc(1, sizeof *w);
        if (!w)
            exit(1);
        t->scratch = w;
    }
    if (n > w->cap) {
        /* twice the need for ordinary pieces (few regrowths); exactly the need for long
         * ones, whose arrays are the run's largest allocation */
        w->cap = n < QTD_LONG_PIECE ? n * 2 : n;
        /* at most n - 1 initial pairs plus 2 new ones per merge */
        w->hcap = w->cap * 3;
        void *a = realloc(w->id, w->cap * sizeof *w->id), *b = a ? realloc(w->next, w->cap * sizeof *w->next) : NULL;
        if (a) w->id = (uint32_t *)a;
        if (b) w->next = (int32_t *)b;
        void *c = b ? realloc(w->prev, w->cap * sizeof *w->prev) : NULL;
        if (c) w->prev = (int32_t *)c;
        void *d = c ? realloc(w->heap, w->hcap * sizeof *w->heap) : NULL;
        if (!d) {
            fprintf(stderr, "qtrain-data: out of memory for a pre-tokenizer piece of %zu bytes: "
                    "byte-level BPE merges a piece whole, as Hugging Face does, and needs about "
                    "%d bytes of memory per byte of it (%.0f MiB); split such a document (a line "
                    "with no space or punctuation) or give the job more memory\n", n,
                    QTD_BPE_BYTES_PER_BYTE, (double)n * QTD_BPE_BYTES_PER_BYTE / 1048576.0);
            exit(1);
        }
        w->heap = (heap_ent *)d;
    }
    return w;
}

static void merge_piece(qtd_tok *t, const uint8_t *s, size_t n, qtd_u32s *out)
{
    work *w = get_work(t, n);
    size_t hn = 0;
    uint32_t res = 0;
    for (size_t i = 0; i < n; i++) {
        w->id[i] = t->byte_id[s[i]];
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        w->prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = lookup(t, w->id[i], w->id[i + 1], &res);
        if (r != UINT32_MAX)
            heap_push(w, &hn, r, (uint32_t)i);
    }
    while (hn) {
        heap_ent e = heap_pop(w, &hn);
        int32_t p = (int32_t)e.pos, q = w->next[p];
        if (w->prev[p] == -2 || q < 0 || lookup(t, w->id[p], w->id[q], &res) != e.rank)
            continue;   /* stale */
        w->id[p] = res;
        w->next[p] = w->next[q];
        if (w->next[q] >= 0)
            w->prev[w->next[q]] = p;
        w->prev[q] = -2;   /* dead */
        uint32_t r, unused;
        if (w->prev[p] >= 0 && (r = lookup(t, w->id[w->prev[p]], res, &unused)) != UINT32_MAX)
            heap_push(w, &hn, r, (uint32_t)w->prev[p]);
        if (w->next[p] >= 0 && (r = lookup(t, res, w->id[w->next[p]], &unused)) != UINT32_MAX)
            heap_push(w, &hn, r, (uint32_t)p);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i])
        qtd_u32s_push(out, w->id[i]);
}

static uint64_t hash_bytes(const uint8_t *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        h = mix(h ^ v) * 0x9E3779B97F4A7C15ull;
    }
    uint64_t v = 0;
    memcpy(&v, s + i, n - i);
    h = mix(h ^ v ^ 0x5bd1e995);
    return h ? h : 1;
}

static void cache_clear(qtd_tok *t)
{
    if (!t->cache) {
        t->cache = (qtd_cache_slot *)calloc(QTD_CACHE_SLOTS, sizeof *t->cache);
        if (!t->cache)
            exit(1);
        t->cache_mask = QTD_CACHE_SLOTS - 1;
    } else
        memset(t->cache, 0, QTD_CACHE_SLOTS * sizeof *t->cache);
    t->cache_used = 0;
    t->cache_keys.len = 0;
    t->cache_ids.len = 0;
}

void qtd_bpe_piece(qtd_tok *t, const uint8_t *s, size_t n, qtd_u32s *out)
{
    if (n == 1) {
        qtd_u32s_push(out, t->byte_id[s[0]]);
        return;
    }
    if (n > QTD_CACHE_MAX_PIECE) {
        merge_piece(t, s, n, out);
        return;
    }
    if (!t->cache || t->cache_used * 2 > QTD_CACHE_SLOTS || t->cache_keys.len > QTD_CACHE_POOL)
        cache_clear(t);
    uint64_t h = hash_bytes(s, n);
    size_t slot = h & t->cache_mask;
    for (;;) {
        qtd_cache_slot *c = &t->cache[slot];
        if (!c->key)
            break;
        if (c->key == h && c->len == n && !memcmp(t->cache_keys.data + c->off, s, n)) {
            for (uint32_t k = 0; k < c->nids; k++)
                qtd_u32s_push(out, t->cache_ids.data[c->ids + k]);
            return;
        }
        slot = (slot + 1) & t->cache_mask;
    }
    size_t first = out->len;
    merge_piece(t, s, n, out);
    qtd_cache_slot *c = &t->cache[slot];
    c->key = h;
    c->off = (uint32_t)t->cache_keys.len;
    c->len = (uint32_t)n;
    c->ids = (uint32_t)t->cache_ids.len;
    c->nids = (uint32_t)(out->len - first);
    qtd_bytes_put(&t->cache_keys, s, n);
    for (size_t k = first; k < out->len; k++)
        qtd_u32s_push(&t->cache_ids, out->data[k]);
    t->cache_used++;
}

void qtd_bpe_free(qtd_tok *t)
{
    work *w = (work *)t->scratch;
    if (w) {
        free(w->id), free(w->next), free(w->prev), free(w->heap);
        free(w);
    }
    free(t->mkey), free(t->mrank), free(t->mres), free(t->cache);
    qtd_bytes_free(&t->cache_keys);
    qtd_u32s_free(&t->cache_ids);
    t->scratch = NULL, t->mkey = NULL, t->mrank = t->mres = NULL, t->cache = NULL;
}
