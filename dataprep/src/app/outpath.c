/* outpath.c - the out= checks of outpath.h. Invariant: nothing is created, changed or
 * removed here (stat, lstat and access only); every refusal names out=PATH and what to give
 * instead. The encode's write stays a temporary file renamed at the end (tokfile.h), which
 * checks again that a target not to be replaced did not appear meanwhile. */
#include "outpath.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/err.h"

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

/* the directory that will hold path: it must exist and take new files */
static int check_dir(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!path[0] || (slash && !slash[1]) || strlen(path) >= sizeof dir)
        return qtd_fail("out=%s: expected the path of a file (not empty, not ending in '/', shorter than %zu "
                        "characters)", path, sizeof dir);
    size_t n = slash ? (size_t)(slash - path) : 0;
    memcpy(dir, path, n);
    dir[n] = 0;
    const char *d = slash ? (n ? dir : "/") : ".";
    struct stat st;
    if (stat(d, &st))
        return qtd_fail("out=%s: the directory %s %s; create it or give another path", path, d,
                        errno == ENOENT ? "does not exist" : strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return qtd_fail("out=%s: %s is %s, not a directory; give another path", path, d, kind_of(st.st_mode));
    if (access(d, W_OK | X_OK))
        return qtd_fail("out=%s: the directory %s is not writable (%s); give another path", path, d, strerror(errno));
    return 0;
}

static int same_file(const struct stat *a, const char *path)
{
    struct stat b;
    int r = strcmp(path, "-") ? stat(path, &b) : fstat(0, &b);
    return r == 0 && S_ISREG(b.st_mode) && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

int qtd_out_check(const char *path, int overwrite, const char *tokenizer, const char *const *inputs, int ninputs)
{
    if (check_dir(path))
        return -1;
    struct stat st;
    if (lstat(path, &st))
        return errno == ENOENT ? 0 : qtd_fail("out=%s: cannot stat: %s", path, strerror(errno));
    if (stat(path, &st)) {
        if (!overwrite)
            return qtd_fail("out=%s exists (a symbolic link to a missing file); give overwrite=1 to replace it, or "
                            "another path", path);
        return 0;
    }
    if (!S_ISREG(st.st_mode))
        return qtd_fail("out=%s exists and is %s; expected the path of a token file to write (new, or a file to "
                        "replace with overwrite=1)", path, kind_of(st.st_mode));
    if (tokenizer && same_file(&st, tokenizer))
        return qtd_fail("out=%s is the same file as the tokenizer %s (same device and inode); writing it would destroy "
                        "the tokenizer, even with overwrite=1: give another out= path", path, tokenizer);
    for (int i = 0; i < ninputs; i++)
        if (same_file(&st, inputs[i]))
            return qtd_fail("out=%s is the same file as the input %s (same device and inode); writing it would destroy "
                            "the input, even with overwrite=1: give another out= path", path,
                            strcmp(inputs[i], "-") ? inputs[i] : "- (stdin)");
    if (!overwrite)
        return qtd_fail("out=%s exists; give overwrite=1 to replace it, or another path", path);
    return 0;
}
