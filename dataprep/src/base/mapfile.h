/* mapfile.h - a whole regular file mapped read-only (qtrain-data's inputs and token files).
 * Invariant: on success *data is the mapping of *size bytes, or NULL when the file is empty;
 * on failure nothing stays open or mapped and the error names the file and `what`. */
#ifndef QTD_MAPFILE_H
#define QTD_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

/* Opens path, requires a regular file, maps it; 0 or -1 with qtd_fail's message
 * ("PATH: cannot read the WHAT: reason"). Unmap with qtd_unmap_file. */
int qtd_map_file(const char *path, const char *what, uint8_t **data, size_t *size);
void qtd_unmap_file(uint8_t *data, size_t size);

#endif
