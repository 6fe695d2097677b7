/* params_init.c - seeded parameter initialisation and the parameter fingerprint.
 *
 * Invariants: values are functions of (seed, param index, global element index) only;
 * the fingerprint is a sum modulo 2^64 of per-element hashes of (global flat index, bits),
 * which is commutative, so it is independent of element order and of the mesh (unsharded
 * parameters hash consecutive indices through qt_fp_mix; sharded ones too, one run of
 * consecutive global indices (qt_global_run) at a time, mapped through qt_global_index).
 * Math runs in double through qt_math.h (no libm), then rounds once to float.
 */
#include <string.h>
#include "qt_runtime.h"
#include "qt_rng.h"
#include "qt_blocks.h"
#include "qt_optim.h"
#include "qt_pipeline.h"
#include "math/qt_math.h"

#define QT_TWO_PI 6.28318530717958647692
#define QT_TRUNC_MAX_DRAWS 64

static struct {
    int32_t rank;
} qt_rng_state;

uint64_t qt_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t qt_rng_key(uint64_t seed, int64_t param, int64_t elem, int64_t draw)
{
    uint64_t k = qt_mix64(seed ^ 0x5851F42D4C957F2Dull);
    k = qt_mix64(k ^ (uint64_t)param);
    k = qt_mix64(k ^ (uint64_t)elem);
    return qt_mix64(k ^ ((uint64_t)draw * 0xD1B54A32D192ED03ull));
}

static double qt_rng_u53(uint64_t h)
{
    return (double)((h >> 11) + 1) * (1.0 / 9007199254740992.0);
}

double qt_rng_uniform(uint64_t seed, int64_t param, int64_t elem, int64_t draw)
{
    return qt_rng_u53(qt_rng_key(seed, param, elem, draw));
}

double qt_rng_normal(uint64_t seed, int64_t param, int64_t elem, int64_t draw)
{
    uint64_t h = qt_rng_key(seed, param, elem, draw);
    double u1 = qt_rng_u53(h);                 /* (0,1]: log is finite */
    double u2 = qt_rng_u53(qt_mix64(h ^ 0xA0761D6478BD642Full)) - (1.0 / 9007199254740992.0);
    return qt_sqrt(-2.0 * qt_log(u1)) * qt_cos(QT_TWO_PI * u2);
}

float qt_init_value(const qt_param *pa, uint64_t seed, int64_t param, int64_t elem)
{
    switch (pa->init) {
    case QT_INIT_ZEROS:
        return 0.0f;
    case QT_INIT_ONES:
        return 1.0f;
    case QT_INIT_NORMAL:
        return (float)((double)pa->init_scale * qt_rng_normal(seed, param, elem, 0));
    case QT_INIT_TRUNC_NORMAL:
        for (int64_t d = 0; d < QT_TRUNC_MAX_DRAWS; d++) {
            double z = qt_rng_normal(seed, param, elem, d);
            if (z >= -2.0 && z <= 2.0) return (float)((double)pa->init_scale * z);
        }
        return 0.0f;
    case QT_INIT_LOG_UNIFORM: {
        double lo = pa->init_lo, hi = pa->init_hi;
        double u = qt_rng_uniform(seed, param, elem, 0);
        return (float)qt_log(lo + (hi - lo) * u);
    }
    default:
        return 0.0f;
    }
}

void qt_rng_set_rank(int32_t rank)
{
    qt_rng_state.rank = rank;
}

/* Index of this rank's shard along the mesh axes in `mask` (first axis major). */
static int64_t qt_shard_index(const qt_plan *p, uint8_t mask)
{
    int32_t coord[QT_MESH_COUNT];
    qt_mesh_coords(p->mesh, p->dcn, qt_rng_state.rank, coord);
    int64_t idx = 0;
    for (int a = 0; a < QT_MESH_COUNT; a++) {
        if (!(mask & (1u << a))) continue;
        int64_t n = p->mesh[a] > 0 ? p->mesh[a] : 1;
        idx = idx * n + coord[a];
    }
    return idx;
}

int64_t qt_global_index(const qt_plan *p, const qt_tensor *t, int64_t local)
{
    int sharded = 0;
    for (int d = 0; d < t->ndim; d++) sharded |= t->shape[d] != t->global_shape[d];
    if (!sharded) return local;
    int64_t coord[QT_MAX_DIMS] = {0};
    for (int d = t->ndim - 1; d >= 0; d--) {
        coord[d] = local % t->shape[d];
        local /= t->shape[d];
    }
    int64_t g = 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t c = coord[d];
        if (t->shape[d] != t->global_shape[d]) {
            const int64_t shard = qt_shard_index(p, t->spec[d]);
            if (t->seg[0] > 0 && t->seg_dim == d) {
                /* parts back to back, each split the same way: find c's part */
                const int64_t parts = t->global_shape[d] / t->shape[d];
                int64_t lo_l = 0, lo_g = 0;
                for (int s = 0; s < QT_MAX_SEGS && t->seg[s] > 0; s++) {
                    const int64_t len = t->seg[s] / parts;
                    if (c < lo_l + len) {
                        c = lo_g + shard * len + (c - lo_l);
                        break;
                    }
                    lo_l += len;
                    lo_g += t->seg[s];
                }
            } else {
                c += shard * t->shape[d];
            }
        }
        g = g * t->global_shape[d] + c;
    }
    return g;
}

int64_t qt_global_run(const qt_tensor *t, int64_t local)
{
    int ds = -1;  /* the innermost sharded dim */
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != t->global_shape[d]) ds = d;
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
    if (ds < 0) return numel - local;  /* unsharded: global index = local index */
    /* the dims after ds are whole, so a block of `inner` elements is contiguous in both
     * numberings, and so are the blocks of consecutive coordinates c of dim ds while c stays
     * in one part (segmented dim) or in the row (plain: c + shard * shape) */
    int64_t inner = 1;
    for (int d = ds + 1; d < t->ndim; d++) inner *= t->shape[d];
    const int64_t c = (local / inner) % t->shape[ds];
    int64_t end = t->shape[ds];
    if (t->seg[0] > 0 && t->seg_dim == ds) {
        const int64_t parts = t->global_shape[ds] / t->shape[ds];
        int64_t lo_l = 0;
        for (int s = 0; s < QT_MAX_SEGS && t->seg[s] > 0; s++) {
            const int64_t len = t->seg[s] / parts;
            if (c < lo_l + len) {
                end = lo_l + len;
                break;
            }
            lo_l += len;
        }
    }
    return (end - c) * inner - local % inner;
}

void qt_params_init(const qt_plan *p, uint64_t seed)
{
    for (int32_t i = 0; i < p->n_params; i++) {
        const qt_param *pa = &p->params[i];
        const qt_tensor *t = &p->tensors[pa->tensor];
        /* the local elements [j0, j1) this rank's parameter region holds: all of them, or
         * with a compact region those inside its optimizer block of the range */
        int64_t j0 = 0, j1 = pa->numel;
        float *w = (float *)(void *)(p->arena + p->params_offset) + pa->flat_offset;
        if (qt_plan_masters_compact(p)) {
            const int32_t r = qt_plan_range_of(p, pa->flat_offset);
            int64_t blo, bn;
            qt_step_block(p, r, &blo, &bn);
            j0 = blo > pa->flat_offset ? blo - pa->flat_offset : 0;
            j1 = blo + bn - pa->flat_offset < pa->numel ? blo + bn - pa->flat_offset : pa->numel;
            if (j1 <= j0) continue;
            w = qt_step_param_at(p, r, pa->flat_offset + j0);
        }
        for (int64_t j = j0; j < j1;) {
            /* the shard mapping once per run of consecutive global indices */
            int64_t run = qt_global_run(t, j);
            if (run > j1 - j) run = j1 - j;
            const int64_t g = qt_global_index(p, t, j);
            /* a pipeline stage's parameters by their one-rank index (qt_pp_param_index) */
            const int64_t pi = qt_pp_param_index(p, i);
            for (int64_t k = 0; k < run; k++)
                w[j + k - j0] = qt_init_value(pa, seed, pi, g + k);
            j += run;
        }
    }
}

int64_t qt_param_global_numel(const qt_plan *p, int32_t i)
{
    const qt_param *pa = &p->params[i];
    const qt_tensor *t = &p->tensors[pa->tensor];
    if (!t->ndim) return pa->numel;
    int64_t gn = 1;
    for (int d = 0; d < t->ndim; d++) gn *= t->global_shape[d];
    return gn;
}

int qt_param_sharded(const qt_plan *p, int32_t i)
{
    const qt_tensor *t = &p->tensors[p->params[i].tensor];
    int sharded = 0;
    for (int d = 0; d < t->ndim; d++) sharded |= t->shape[d] != t->global_shape[d];
    return sharded;
}

uint64_t qt_param_fp_chunk(const qt_plan *p, int32_t i, int64_t gbase, int64_t j0, int64_t n)
{
    const qt_param *pa = &p->params[i];
    const qt_tensor *t = &p->tensors[pa->tensor];
    /* elements j0 .. j0+n-1 (with a compact parameter region: inside the rank's block) */
    const float *w = qt_plan_masters_compact(p)
        ? qt_step_param_at(p, qt_plan_range_of(p, pa->flat_offset), pa->flat_offset + j0)
        : (const float *)(const void *)(p->arena + p->params_offset) + pa->flat_offset + j0;
    const int sharded = qt_param_sharded(p, i);
    /* unsharded: global index = local index, so consecutive elements hash consecutive
     * indices and the vectorised mixer applies */
    if (!sharded) return qt_fp_mix(w, n, (uint64_t)(gbase + j0));
    /* sharded: one vectorised run per stretch of consecutive global indices (a per-element
     * mapping cost 2 s of EP2's bench step); the sum mod 2^64 is the same in any grouping */
    uint64_t sum = 0;
    for (int64_t j = j0; j < j0 + n;) {
        int64_t run = qt_global_run(t, j);
        if (run > j0 + n - j) run = j0 + n - j;
        sum += qt_fp_mix(&w[j - j0], run, (uint64_t)(gbase + qt_global_index(p, t, j)));
        j += run;
    }
    return sum;
}

uint64_t qt_param_fingerprint(const qt_plan *p)
{
    uint64_t sum = 0;
    int64_t gbase = p->pp_elem0;  /* global flat index of the parameter's first element (a
                                     pipeline stage's first: its one-rank index) */
    for (int32_t i = 0; i < p->n_params; i++) {
        gbase = qt_pp_elem_base(p, i, gbase);  /* a circular stage's chunk restarts it */
        sum += qt_param_fp_chunk(p, i, gbase, 0, p->params[i].numel);
        gbase += qt_param_global_numel(p, i);
    }
    return sum;
}
