/* qt_build_info.h - how this binary was built, for the run manifest (build_info.c).
 *
 * Invariant: constant strings fixed at compile time; nothing here depends on the machine the
 * binary runs on.
 */
#ifndef QT_BUILD_INFO_H
#define QT_BUILD_INFO_H

typedef struct qt_build_info {
    const char *compiler;      /* "gcc 12.2.0" (__VERSION__) */
    const char *flags;         /* the firmware's compile flags (Makefile, -DQT_BUILD_FLAGS) */
    const char *isa;           /* ISA level the compiler targeted, from its predefined macros */
    const char *git;           /* git revision of the checkout ("-dirty" when it had
                                  uncommitted changes), or "unknown" outside a checkout */
    const char *kind;          /* "glibc+mpich", "musl static" or "asan" */
} qt_build_info;

/* The record of this binary (static, never NULL; the strings are literals). */
const qt_build_info *qt_build_info_get(void);

#endif
