/* fuzz_ckpt_load.c - libFuzzer target: the checkpoint loader (firmware/io/checkpoint.c,
 * ckpt_map.c, st_read.c) against a real plan, generated/test-next-tiny (linked in, with its
 * arena in the .qt_arena section as in the unit tests).
 *
 * Input: the bytes of a safetensors checkpoint. It is written to the scratch directory and
 * loaded with qt_checkpoint_load(plan, path, want_optimizer, ...) twice, without and with the
 * optimizer state, then vetted as a save= target with qt_checkpoint_check_target. Covers the header reader, the plan
 * mapping (HF split and fused expert names, conv1d shapes), dtype conversion, the value
 * checks (finite weights and moments, v >= 0), the state / plan hash comparison, the
 * __metadata__ step and data_pos parsing and the copy into the arena.
 * Invariants: the loader returns QT_OK or a negative QT_E_* code and never exits; on
 * success every parameter in the arena is finite (the loader checks values before any
 * byte is written; an arena that held only finite values keeps only finite values), and
 * step / data_pos are >= 0 and 0 unless the optimizer state was asked for.
 */
#include <math.h>
#include "qt_fuzz.h"
#include "qt_err.h"
#include "qt_plan.h"
#include "io/qt_io.h"

extern const qt_plan qt_plan_test_next_tiny;

/* One load; checks the invariants of the header comment. */
static void qt_fuzz_load(const qt_plan *p, const char *path, int want_opt)
{
    int64_t step = -1, pos = -1;
    int rc = qt_checkpoint_load(p, path, want_opt, &step, &pos);
    if (getenv("QT_FUZZ_VERBOSE"))
        fprintf(stderr, "qt_fuzz: load (optimizer %d): rc %d step %lld data_pos %lld\n",
                want_opt, rc, (long long)step, (long long)pos);
    qt_fuzz_assert(rc == QT_OK || (rc < 0 && rc >= QT_E_COMM));
    qt_fuzz_assert(step >= 0 && pos >= 0);
    if (rc != QT_OK) return;
    if (!want_opt) qt_fuzz_assert(step == 0 && pos == 0);
    const float *w = (const float *)(const void *)(p->arena + p->params_offset);
    for (int64_t i = 0; i < p->n_param_elems; i++) qt_fuzz_assert(isfinite(w[i]));
    const float *m = (const float *)(const void *)(p->arena + p->adam_m_offset);
    const float *v = (const float *)(const void *)(p->arena + p->adam_v_offset);
    for (int64_t i = 0; i < p->adam_elems; i++)
        qt_fuzz_assert(isfinite(m[i]) && isfinite(v[i]) && !(v[i] < 0.0f));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const qt_plan *p = &qt_plan_test_next_tiny;
    const char *path = qt_fuzz_path("input.safetensors", 0);
    qt_set_quiet(!getenv("QT_FUZZ_VERBOSE"));
    qt_fuzz_write(path, data, size);
    qt_fuzz_load(p, path, 0);
    qt_fuzz_load(p, path, 1);
    int rc = qt_checkpoint_check_target("save", path, 1, 0, NULL);
    qt_fuzz_assert(rc == QT_OK || rc == QT_E_ARG);
    qt_clear_notes();
    return 0;
}
