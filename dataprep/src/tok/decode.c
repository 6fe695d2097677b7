/* decode.c - ids back to bytes (tokenizer.h): the bytes each id stands for, concatenated
 * (the byte-level decoder of Hugging Face, before its UTF-8 conversion). Invariant: an id
 * the tokenizer does not define is an error, never skipped. */
#include "../base/err.h"
#include "tokenizer.h"

int qtd_tok_decode(const qtd_tok *t, const uint32_t *ids, size_t n, qtd_bytes *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->nids || !t->has[id])
            return qtd_fail("id %u at position %zu is not in the vocabulary (%u ids)", id, i, t->nids);
        qtd_bytes_put(out, t->pool.data + t->tok_off[id], t->tok_len[id]);
    }
    return 0;
}
