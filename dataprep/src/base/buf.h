/* buf.h - growable arrays for the host tool: bytes (qtd_bytes) and 32-bit values
 * (qtd_u32s). Invariants: len <= cap; data is NULL only while cap is 0; growth doubles, so
 * appends are amortised O(1); an allocation failure exits (a host tool out of memory has
 * nothing better to do). */
#ifndef QTD_BUF_H
#define QTD_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *data;
    size_t len, cap;
} qtd_bytes;

typedef struct {
    uint32_t *data;
    size_t len, cap;
} qtd_u32s;

/* realloc or exit with a message */
static inline void *qtd_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "qtrain-data: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return q;
}

/* Makes room for `extra` more bytes after len; returns a pointer to data + len. */
static inline uint8_t *qtd_bytes_reserve(qtd_bytes *b, size_t extra)
{
    if (b->len + extra > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->len + extra)
            c *= 2;
        b->data = (uint8_t *)qtd_xrealloc(b->data, c);
        b->cap = c;
    }
    return b->data + b->len;
}

/* Appends p[0..n) (grows b; p may be NULL when n is 0). */
static inline void qtd_bytes_put(qtd_bytes *b, const void *p, size_t n)
{
    if (!n)
        return;
    memcpy(qtd_bytes_reserve(b, n), p, n);
    b->len += n;
}

/* Appends x (grows v by doubling, from 64). */
static inline void qtd_u32s_push(qtd_u32s *v, uint32_t x)
{
    if (v->len == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->data = (uint32_t *)qtd_xrealloc(v->data, v->cap * sizeof *v->data);
    }
    v->data[v->len++] = x;
}

/* Frees the storage and leaves b empty (reusable). */
static inline void qtd_bytes_free(qtd_bytes *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* Frees the storage and leaves v empty (reusable). */
static inline void qtd_u32s_free(qtd_u32s *v)
{
    free(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}

#endif
