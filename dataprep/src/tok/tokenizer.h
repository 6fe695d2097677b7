/* tokenizer.h - a byte-level BPE tokenizer of the Qwen family, loaded from a Hugging Face
 * tokenizer.json (load.c, model.c), and its encoder (encode.c, added.c, bpe.c) and decoder
 * (decode.c). Invariants after qtd_tok_load succeeded: every id < nids has its bytes in
 * `pool` (tok_len may be 0 only for an id no entry defines, has[id] == 0); byte_id maps all
 * 256 bytes to vocab ids; the merge table holds every merge with its rank and result id. */
#ifndef QTD_TOKENIZER_H
#define QTD_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../base/buf.h"

typedef struct {
    uint32_t id;
    uint32_t off, len;   /* content bytes in the tokenizer's pool */
    uint8_t normalized, lstrip, rstrip, single_word, special;
} qtd_added;

typedef struct {
    uint64_t key;   /* hash of the bytes, 0 = empty slot */
    uint32_t off, len;     /* the piece's bytes in cache_keys */
    uint32_t ids, nids;    /* its ids in cache_ids */
} qtd_cache_slot;

typedef struct {
    /* vocabulary: raw bytes of every id */
    uint32_t nids;
    uint32_t *tok_off, *tok_len;
    uint8_t *has;
    qtd_bytes pool;
    uint32_t byte_id[256];
    /* merges: open addressing on (left << 32 | right) */
    uint64_t *mkey;
    uint32_t *mrank, *mres;
    size_t mmask;
    uint32_t nmerges;
    /* added tokens, and the first bytes any of them starts with */
    qtd_added *added;
    uint32_t nadded;
    uint8_t first_byte[2][256];   /* [normalized][byte] */
    int pattern;                  /* QTD_PAT_* */
    /* word cache (bpe.c) and scratch */
    qtd_cache_slot *cache;
    size_t cache_mask, cache_used;
    qtd_bytes cache_keys;
    qtd_u32s cache_ids;
    qtd_bytes norm;   /* NFC output of one segment */
    void *scratch;    /* bpe.c's merge work arrays */
    size_t longest_piece;   /* bytes of the longest piece encoded since the caller zeroed
                               it (a long one costs QTD_BPE_BYTES_PER_BYTE of memory a byte) */
} qtd_tok;

/* Memory the byte-level BPE of one piece takes per byte of it, rounded up (bpe.c: the
 * symbol ids and the list links, 12 bytes, and the candidate-pair heap, 8 bytes an entry):
 * a piece is merged whole, as Hugging Face does, so a document that is one long "word"
 * (no space, punctuation or letter / digit change for the Split pattern to cut at) needs
 * about 20 x its length (a 50 MB one-letter line 1.1 GB, measured) and O(N log N) time. */
#define QTD_BPE_BYTES_PER_BYTE 20
/* Pieces from this length on are reported (cmd_encode.c): 16 MiB, about 320 MiB to merge. */
#define QTD_LONG_PIECE ((size_t)16 << 20)

/* Reads the tokenizer.json at path into t (zeroed first). Returns 0, or -1 with a message
 * naming the file and what it holds where a Qwen byte-level BPE tokenizer was expected. */
int qtd_tok_load(qtd_tok *t, const char *path);
void qtd_tok_free(qtd_tok *t);

/* The id of an added token whose content is `s` (len bytes); -1 when there is none. */
int64_t qtd_tok_added_id(const qtd_tok *t, const char *s, size_t len);

/* Encodes the valid UTF-8 text s[0..n) as Hugging Face's encode(text) does (added tokens
 * first, then NFC, the Split pattern, byte-level BPE) and appends the ids to out. Reads t's
 * tables; writes out and t's cache and scratch. */
void qtd_tok_encode(qtd_tok *t, const uint8_t *s, size_t n, qtd_u32s *out);

/* Appends the BPE ids of one pre-tokenized piece (raw bytes) to out (bpe.c). */
void qtd_bpe_piece(qtd_tok *t, const uint8_t *s, size_t n, qtd_u32s *out);
/* Builds the merge table from parallel arrays of n (left, right, result) ids in rank
 * order (bpe.c). Returns 0, or -1 when a pair repeats (qtd_fail names its rank). */
int qtd_bpe_set_merges(qtd_tok *t, const uint32_t *left, const uint32_t *right, const uint32_t *res, uint32_t n);

/* Frees what bpe.c allocated in t: merge table, cache, work arrays (bpe.c). */
void qtd_bpe_free(qtd_tok *t);

/* Appends the bytes of ids[0..n) to out; -1 (qtd_fail naming the position) when an id is
 * not in the vocabulary (decode.c). */
int qtd_tok_decode(const qtd_tok *t, const uint32_t *ids, size_t n, qtd_bytes *out);

/* byte-level alphabet (decode.c): the code point standing for byte b, and back (-1 when cp
 * stands for no byte) */
uint32_t qtd_bytelevel_cp(uint8_t b);
int qtd_bytelevel_byte(uint32_t cp);

#endif
