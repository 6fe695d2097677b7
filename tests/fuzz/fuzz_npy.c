/* fuzz_npy.c - libFuzzer target: the token-file reader (firmware/io/data.c): .npy
 * (versions 1-3, integer dtypes), the QTTOKENS raw format and headerless raw tokens.
 *
 * Input: a 4-byte control prefix, then the bytes of the token file.
 *   byte 0 % 3   raw dtype given as data_dtype=: 0 none (detect .npy / QTTOKENS), 1 "uint16",
 *                2 "uint32"
 *   byte 1       vocab_size = 1 + byte1 * 257 (1 .. 65536)
 *   byte 2       seq_len = 1 + byte2 % 64
 *   byte 3       global batch = 1 + byte3 % 4
 * The file is opened with qt_data_open; on success two steps of windows are filled with
 * qt_data_fill, qt_data_check runs and qt_data_close unmaps it.
 * Invariants after a successful open (qt_io.h): n_tokens >= seq_len + 1; n_windows =
 * (n_tokens - 1) / seq_len >= 1; bytes_per_token in {1, 2, 4, 8}; the payload lies inside
 * the file; every id qt_data_fill hands out is in [0, vocab) and fill returns QT_OK (the
 * file did not change); qt_data_check passes. A failure returns a negative code and
 * leaves *d zeroed.
 */
#include "qt_fuzz.h"
#include "qt_err.h"
#include "io/qt_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int32_t in[4 * 64], tg[4 * 64];
    static const char *const dtypes[3] = { NULL, "uint16", "uint32" };
    if (size < 4) return 0;
    const char *raw = dtypes[data[0] % 3];
    int64_t vocab = 1 + (int64_t)data[1] * 257, seq = 1 + data[2] % 64, gb = 1 + data[3] % 4;
    const char *path = qt_fuzz_path("input.npy", 0);
    qt_set_quiet(!getenv("QT_FUZZ_VERBOSE"));
    qt_fuzz_write(path, data + 4, size - 4);
    qt_data d;
    int rc = qt_data_open(&d, path, raw, vocab, seq);
    if (rc) {
        static const qt_data zero;
        qt_fuzz_assert(rc < 0 && !memcmp(&d, &zero, sizeof d));
        return 0;
    }
    int64_t w = d.bytes_per_token;
    qt_fuzz_assert(w == 1 || w == 2 || w == 4 || w == 8);
    qt_fuzz_assert(d.n_tokens >= seq + 1 && d.n_windows == (d.n_tokens - 1) / seq);
    qt_fuzz_assert(d.n_windows >= 1 && d.vocab == vocab);
    /* the payload is the last n_tokens * width bytes of the file, exactly */
    int64_t file = (int64_t)size - 4, off = file - d.n_tokens * w;
    qt_fuzz_assert(off >= 0 && off <= file);
    for (int64_t step = 0; step < 2; step++) {
        rc = qt_data_fill(&d, step, gb, 0, gb, seq, in, tg);
        qt_fuzz_assert(rc == QT_OK);
        for (int64_t i = 0; i < gb * seq; i++)
            qt_fuzz_assert(in[i] >= 0 && in[i] < vocab && tg[i] >= 0 && tg[i] < vocab);
    }
    qt_fuzz_assert(qt_data_check(&d) == QT_OK);
    qt_data_close(&d);
    return 0;
}
