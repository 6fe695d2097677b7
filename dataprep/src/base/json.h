/* json.h - a small JSON (RFC 8259) reader into a flat node array. Strings are decoded to
 * UTF-8 (escapes included; \uD83D\uDE00 surrogate pairs joined; a lone surrogate, a control
 * character in a string, or invalid UTF-8 is an error). Invariants: node 0 is the root;
 * the children of an array or object are linked by `next` from `first` (0 ends a list: the
 * root is never a child); a member node carries its key; string bytes live in `pool`,
 * addressed by offset, so the node array and pool may grow while parsing. A document may be
 * reparsed into the same qtd_json (qtd_json_parse resets it), so per-line parsing reuses its
 * memory. */
#ifndef QTD_JSON_H
#define QTD_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

enum { QTD_J_NULL, QTD_J_FALSE, QTD_J_TRUE, QTD_J_NUM, QTD_J_STR, QTD_J_ARR, QTD_J_OBJ };

typedef struct {
    uint8_t type;
    uint32_t first, next, count;   /* children (arrays, objects) and sibling link */
    size_t key, klen;              /* the member's key in pool (object members) */
    size_t str, slen;              /* string value in pool; for numbers the source text */
} qtd_jnode;

typedef struct {
    qtd_jnode *nodes;
    size_t nnodes, cap;
    qtd_bytes pool;
    size_t err_at;   /* byte offset of a parse error */
} qtd_json;

/* Parses s[0..n) (one JSON value, surrounding white space allowed) into j. Returns 0, or -1
 * with qtd_fail("<what> at byte <k>"), j->err_at = k. */
int qtd_json_parse(qtd_json *j, const uint8_t *s, size_t n);
/* The member of object node `obj` named key (len bytes), or 0 when absent/not an object. A key
 * given twice yields its last member (Python's json.loads, JavaScript's JSON.parse). */
uint32_t qtd_json_get(const qtd_json *j, uint32_t obj, const char *key, size_t len);
/* Pointer to a node's string bytes (or a member's key with qtd_json_key). */
static inline const char *qtd_json_str(const qtd_json *j, uint32_t n)
{
    return (const char *)j->pool.data + j->nodes[n].str;
}
static inline const char *qtd_json_key(const qtd_json *j, uint32_t n)
{
    return (const char *)j->pool.data + j->nodes[n].key;
}
void qtd_json_free(qtd_json *j);

#endif
