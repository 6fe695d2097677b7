/* heap_audit.c - LD_PRELOAD library proving that no heap allocation happens during training
 * steps.
 *
 * Build: gcc -shared -fPIC -o build/tools/libheap_audit.so tests/tools/heap_audit.c -ldl
 * Use:   LD_PRELOAD=build/tools/libheap_audit.so build/<run>/qtrain steps=3
 * It interposes malloc, calloc, realloc, free, posix_memalign, aligned_alloc, memalign and
 * valloc, forwarding to glibc's __libc_* entry points (no dlsym, so no bootstrap
 * recursion), and counts the calls made while the runtime has marked steps in progress via
 * qt_heap_audit_mark (a weak symbol the firmware calls only when this library is loaded).
 * At exit it prints "heap audit: <n> allocation calls during steps" on stderr and, if the
 * program was about to exit 0 but n > 0, turns the exit code into 3.
 * Invariant: the counters are updated with atomic builtins, since MPI/UCX may run threads.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t s);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t a, size_t n);

static struct {
    int in_steps;
    int ever_marked;
    long long count;
} qt_audit;

static void qt_audit_hit(void)
{
    if (__atomic_load_n(&qt_audit.in_steps, __ATOMIC_RELAXED))
        __atomic_add_fetch(&qt_audit.count, 1, __ATOMIC_RELAXED);
}

void qt_heap_audit_mark(int in_steps)
{
    __atomic_store_n(&qt_audit.in_steps, in_steps ? 1 : 0, __ATOMIC_SEQ_CST);
    if (in_steps) qt_audit.ever_marked = 1;
}

void *malloc(size_t n)
{
    qt_audit_hit();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t s)
{
    qt_audit_hit();
    return __libc_calloc(n, s);
}

void *realloc(void *p, size_t n)
{
    qt_audit_hit();
    return __libc_realloc(p, n);
}

void free(void *p)
{
    if (p) qt_audit_hit();
    __libc_free(p);
}

void *memalign(size_t a, size_t n)
{
    qt_audit_hit();
    return __libc_memalign(a, n);
}

void *aligned_alloc(size_t a, size_t n)
{
    qt_audit_hit();
    return __libc_memalign(a, n);
}

void *valloc(size_t n)
{
    qt_audit_hit();
    return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), n);
}

int posix_memalign(void **out, size_t a, size_t n)
{
    qt_audit_hit();
    if (a < sizeof(void *) || (a & (a - 1))) return EINVAL;
    void *p = __libc_memalign(a, n);
    if (!p && n) return ENOMEM;
    *out = p;
    return 0;
}

/* Runs from exit() with the exit status, so it can only fail a successful run. */
static void qt_audit_report(int status, void *arg)
{
    (void)arg;
    long long n = __atomic_load_n(&qt_audit.count, __ATOMIC_SEQ_CST);
    fprintf(stderr, "heap audit: %lld allocation calls during steps%s\n", n,
            qt_audit.ever_marked ? "" : " (steps were never marked)");
    if (status == 0 && n > 0) {
        fflush(NULL);
        _exit(3);
    }
}

__attribute__((constructor)) static void qt_audit_init(void)
{
    on_exit(qt_audit_report, NULL);
}
