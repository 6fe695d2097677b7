/* tokfile.h - the QTTOKENS token file (docs/formats.md, firmware/io/data.c): a
 * little-endian header (magic "QTTOKENS", uint32 version, uint32 bytes per token 2 or 4,
 * uint64 token count N; version 2 adds uint32 end-of-document id, 0xFFFFFFFF for none, and
 * uint32 reserved 0: 32 bytes; version 1 ends at 24) then exactly N tokens. The writer
 * makes version 2 files of 4-byte tokens, recording the eos it separated the documents
 * with, under a temporary name in the target's directory and renames it at the end, so the
 * target name never holds a partial file. The reader takes both versions. */
#ifndef QTD_TOKFILE_H
#define QTD_TOKFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char path[4096], tmp[4200];
    int fd;
    int overwrite;   /* 0: the commit never replaces a file that appeared at path meanwhile */
    uint64_t count;
    uint32_t buf[1 << 16];
    size_t nbuf;
} qtd_tokwriter;

/* Creates the temporary file beside `path` and writes a header with count 0. overwrite=0:
 * the commit refuses to replace a file at `path` (the caller checked there was none). */
int qtd_tokw_open(qtd_tokwriter *w, const char *path, int overwrite);
/* Appends ids[0..n). */
int qtd_tokw_put(qtd_tokwriter *w, const uint32_t *ids, size_t n);
/* Writes the final count and the end-of-document id eos (< 0: none) into the header,
 * closes and renames to the target. */
int qtd_tokw_commit(qtd_tokwriter *w, int64_t eos);
/* Closes and removes the temporary file (after an error; safe to call twice). */
void qtd_tokw_abort(qtd_tokwriter *w);

typedef struct {
    uint8_t *map;
    size_t size;
    uint32_t width;   /* bytes per token */
    uint64_t count;
    uint32_t version; /* 1 or 2 */
    size_t header;    /* 24 (version 1) or 32 (version 2) */
    int64_t eos;      /* the recorded end-of-document id; -1: none (eos=none); -2: version 1 */
} qtd_tokfile;

/* Maps and checks a QTTOKENS file: header, version, width, the reserved word, size =
 * header + count * width (a shorter file is "truncated", naming both sizes). */
int qtd_tokf_open(qtd_tokfile *f, const char *path);
/* Token k (< count). */
uint32_t qtd_tokf_get(const qtd_tokfile *f, uint64_t k);
void qtd_tokf_close(qtd_tokfile *f);

#endif
