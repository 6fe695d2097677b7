/* qt_fuzz.h - shared helpers of the libFuzzer targets in tests/fuzz/ (header only).
 *
 * The readers under test take paths and map or read the file themselves, so every target
 * writes its input to a file in a per-process scratch directory ($TMPDIR or /tmp,
 * "qtrain-fuzz.XXXXXX", created on first use and removed with its files at exit) and
 * passes that path. Error messages of the firmware are silenced (qt_set_quiet) so the
 * fuzzer's output stays readable; they are still formatted, so the formatting runs too.
 * Invariants: a target never exits, never leaks, and restores every global it touches;
 * a broken invariant of the code under test aborts through qt_fuzz_assert (libFuzzer
 * records the input as a crash).
 */
#ifndef QT_FUZZ_H
#define QT_FUZZ_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts (a crash for libFuzzer) with the failed condition when cond is false. */
#define qt_fuzz_assert(cond)                                                              \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "qt_fuzz: invariant failed at %s:%d: %s\n", __FILE__,         \
                    __LINE__, #cond);                                                     \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static char qt_fuzz_dir_path[256];

static inline void qt_fuzz_cleanup(void)
{
    static const char *const names[] = {   /* every file a target writes */
        "input.yml", "input.npy", "input.safetensors", "model.safetensors.index.json", NULL
    };
    char p[512];
    if (!qt_fuzz_dir_path[0]) return;
    for (int i = 0; names[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", qt_fuzz_dir_path, names[i]);
        unlink(p);
    }
    rmdir(qt_fuzz_dir_path);
}

/* The scratch directory of this process (created on the first call). */
static inline const char *qt_fuzz_dir(void)
{
    if (!qt_fuzz_dir_path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(qt_fuzz_dir_path, sizeof qt_fuzz_dir_path, "%s/qtrain-fuzz.XXXXXX",
                 t && *t ? t : "/tmp");
        if (!mkdtemp(qt_fuzz_dir_path)) {
            perror("qt_fuzz: mkdtemp");
            abort();
        }
        atexit(qt_fuzz_cleanup);
    }
    return qt_fuzz_dir_path;
}

/* "<scratch dir>/<name>" into a static buffer (one per slot, so two paths can coexist). */
static inline const char *qt_fuzz_path(const char *name, int slot)
{
    static char buf[4][512];
    snprintf(buf[slot & 3], sizeof buf[0], "%s/%s", qt_fuzz_dir(), name);
    return buf[slot & 3];
}

/* Writes n bytes to path (created or truncated); aborts on an I/O error of the harness. */
static inline void qt_fuzz_write(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const unsigned char *b = data;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w <= 0) {
            perror(path);
            abort();
        }
        b += w;
        n -= (size_t)w;
    }
    close(fd);
}

/* The project root (configs, plans): $QT_ROOT, else the current directory. */
static inline const char *qt_fuzz_root(void)
{
    const char *r = getenv("QT_ROOT");
    return r && *r ? r : ".";
}

#endif
