/* build_info.c - the build facts of the run manifest (qt_build_info.h).
 *
 * The Makefile compiles this file alone with -DQT_BUILD_FLAGS="..." (the flags of the
 * firmware objects of that build) and -DQT_BUILD_GIT="..." (git describe of the checkout),
 * and rebuilds it when either changes (build/gen/build_info.txt). The compiler and the ISA
 * level come from the compiler's own predefined macros, so they cannot disagree with the
 * code that was generated. Invariant: nothing here is computed at run time.
 */
#include "qt_build_info.h"

#ifndef QT_BUILD_FLAGS
#define QT_BUILD_FLAGS "unknown"
#endif
#ifndef QT_BUILD_GIT
#define QT_BUILD_GIT "unknown"
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define QT_BUILD_ISA "x86-64-v4 (AVX-512)"
#elif defined(__AVX2__) && defined(__FMA__)
#define QT_BUILD_ISA "x86-64-v3 (AVX2, FMA)"
#elif defined(__x86_64__)
#define QT_BUILD_ISA "x86-64"
#else
#define QT_BUILD_ISA "unknown"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define QT_BUILD_KIND "asan"
#elif defined(QT_MUSL)
#define QT_BUILD_KIND "musl static"
#else
#define QT_BUILD_KIND "glibc+mpich"
#endif

#ifdef __clang__
#define QT_BUILD_CC "clang " __clang_version__
#else
#define QT_BUILD_CC "gcc " __VERSION__
#endif

static const qt_build_info qt_build = {QT_BUILD_CC, QT_BUILD_FLAGS, QT_BUILD_ISA, QT_BUILD_GIT,
                                       QT_BUILD_KIND};

const qt_build_info *qt_build_info_get(void) { return &qt_build; }
