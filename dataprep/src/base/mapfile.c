/* mapfile.c - whole files mapped read-only (mapfile.h). */
#include "mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"

int qtd_map_file(const char *path, const char *what, uint8_t **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK);   /* a FIFO: no wait for a writer */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return qtd_fail("%s: cannot read the %s: %s", path, what,
                        fd < 0 ? strerror(e) : "not a regular file");
    }
    size_t n = (size_t)st.st_size;
    void *m = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return qtd_fail("%s: cannot map the %s: %s", path, what, strerror(e));
    *data = (uint8_t *)m;
    *size = n;
    return 0;
}

void qtd_unmap_file(uint8_t *data, size_t size)
{
    if (data)
        munmap(data, size);
}
