/* fuzz_cli.c - libFuzzer target: the qtrain command line (firmware/app/cli.c).
 *
 * Input: arguments separated by NUL or newline bytes (at most 64; argv[0] is "qtrain").
 * qt_cli_parse runs on them, then qt_cli_usage writes the help text to /dev/null.
 * Invariants (qt_cli.h): parsing never exits and never allocates; it returns QT_OK or
 * QT_E_ARG; on success every string field is NULL or points into one argument (just
 * after its '='), steps is -1 or in [0, INT64_MAX/2], save_every >= 0 and set only with
 * save, learning_rate is -1 or finite in [0, 1e30], comm_timeout and start_timeout 0 or in
 * (0, 1e6],
 * profile / overwrite / help are 0 or 1, data_dtype is NULL, "uint16" or "uint32".
 */
#include <math.h>
#include "qt_fuzz.h"
#include "qt_err.h"
#include "app/qt_cli.h"

#define QT_FUZZ_MAX_ARGS 64

static int qt_fuzz_in_args(const char *s, char **argv, int argc)
{
    if (!s) return 1;
    for (int i = 1; i < argc; i++) {
        size_t n = strlen(argv[i]);
        if (s > argv[i] && s <= argv[i] + n && s[-1] == '=') return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    char *buf = malloc(size + 1), *argv[QT_FUZZ_MAX_ARGS + 2];
    int argc = 1;
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    argv[0] = "qtrain";
    for (size_t i = 0, start = 0; i <= size && argc <= QT_FUZZ_MAX_ARGS; i++)
        if (i == size || buf[i] == '\n' || buf[i] == 0) {
            buf[i] = 0;
            if (i > start || i < size) argv[argc++] = buf + start;
            start = i + 1;
        }
    argv[argc] = NULL;
    qt_cli c;
    int rc = qt_cli_parse(&c, argc, argv);
    qt_fuzz_assert(rc == QT_OK || rc == QT_E_ARG);
    if (rc == QT_OK) {
        qt_fuzz_assert(qt_fuzz_in_args(c.data, argv, argc) && qt_fuzz_in_args(c.load, argv, argc));
        qt_fuzz_assert(qt_fuzz_in_args(c.save, argv, argc) && qt_fuzz_in_args(c.metrics, argv, argc));
        qt_fuzz_assert(qt_fuzz_in_args(c.dump_grads, argv, argc));
        qt_fuzz_assert(!c.data_dtype || !strcmp(c.data_dtype, "uint16") ||
                       !strcmp(c.data_dtype, "uint32"));
        qt_fuzz_assert(c.steps == -1 || (c.steps >= 0 && c.steps <= INT64_MAX / 2));
        qt_fuzz_assert(c.save_every >= 0 && c.save_every <= INT64_MAX / 2);
        qt_fuzz_assert(!c.save_every || c.save);
        qt_fuzz_assert(c.learning_rate == -1.0f ||
                       (isfinite(c.learning_rate) && c.learning_rate >= 0.0f &&
                        c.learning_rate <= 1e30f));
        qt_fuzz_assert(c.comm_timeout == 0.0 || (c.comm_timeout > 0.0 && c.comm_timeout <= 1e6));
        qt_fuzz_assert(c.start_timeout == 0.0 ||
                       (c.start_timeout > 0.0 && c.start_timeout <= 1e6));
        qt_fuzz_assert((c.profile | c.overwrite | c.help) <= 1 && c.profile >= 0 &&
                       c.overwrite >= 0 && c.help >= 0);
    }
    if (!devnull) devnull = fopen("/dev/null", "w");
    if (devnull) qt_cli_usage(devnull, argv[0]);
    free(buf);
    return 0;
}
