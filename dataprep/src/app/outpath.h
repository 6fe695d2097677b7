/* outpath.h - the checks on `qtrain-data encode out=PATH`, made before the tokenizer or any
 * input is read. The rule (shared by every qtrain tool, docs/design.md): no tool writes over
 * a file it did not create without overwrite=1. */
#ifndef QTD_OUTPATH_H
#define QTD_OUTPATH_H

/* Returns 0 when `path` may be written, else -1 with a message naming out= and the path:
 *  - its directory must exist and be writable;
 *  - an existing path must be a regular file (a directory, device, FIFO, socket: refused even
 *    with overwrite=1), must not be the tokenizer or any of inputs[0..ninputs) (same device
 *    and inode, symbolic links followed; "-" is standard input: refused even with
 *    overwrite=1), and is replaced only when overwrite is set. */
int qtd_out_check(const char *path, int overwrite, const char *tokenizer, const char *const *inputs, int ninputs);

#endif
