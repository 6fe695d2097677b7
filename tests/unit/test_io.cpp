// test_io.cpp - firmware IO: safetensors reader/writer, checkpoints of both decoders
// (names, Qwen3.5 row permutation, bf16, optimizer state, atomic save), token data
// (npy, QTTOKENS, raw, embedded corpus, data rule), metrics, and a table of bad inputs
// that must each fail with their error code and a message naming the defect.
// Every file lives in a mkdtemp directory under /tmp that teardown removes.
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>

extern "C" {
#include "qt_plan.h"
#include "io/qt_io.h"
#include "qt_err.h"
#include "io/safetensors.h"
#include "io/st_index.h"
#include "io/hf_config.h"
}

#include "CppUTest/TestHarness.h"

namespace {

// ---- a hand-made tiny plan: one GDN+MoE layer, Hk=2 Dk=2 Hv=4 (r=2) Dv=3, d=4, E=3 I=2
const int kD = 4, kV = 8, kHk = 2, kDk = 2, kHv = 4, kDv = 3, kE = 3, kI = 2, kK = 4;
const int kQkvz = kHk * (2 * kDk + 2 * (kHv / kHk) * kDv);   // 32 rows, G = 16
const int kCc = 2 * kHk * kDk + kHv * kDv;                   // 20 conv channels

struct spec { const char *name; int ndim; int64_t s[3]; };
const spec kSpecs[] = {
    { "model.embed_tokens.weight", 2, { kV, kD, 0 } },
    { "model.layers.0.input_layernorm.weight", 1, { kD, 0, 0 } },
    { "model.layers.0.linear_attn.in_proj_qkvz.weight", 2, { kQkvz, kD, 0 } },
    { "model.layers.0.linear_attn.in_proj_ba.weight", 2, { 2 * kHv, kD, 0 } },
    { "model.layers.0.linear_attn.conv1d.weight", 2, { kCc, kK, 0 } },
    { "model.layers.0.linear_attn.A_log", 1, { kHv, 0, 0 } },
    { "model.layers.0.mlp.gate.weight", 2, { kE, kD, 0 } },
    { "model.layers.0.mlp.experts.gate_up_proj", 3, { kE, 2 * kI, kD } },
    { "model.layers.0.mlp.experts.down_proj", 3, { kE, kD, kI } },
    { "model.norm.weight", 1, { kD, 0, 0 } },
    { "lm_head.weight", 2, { kV, kD, 0 } },
};
const int kNP = sizeof kSpecs / sizeof kSpecs[0];
const int kQkvzParam = 2, kBaParam = 3, kGuParam = 7, kDownParam = 8;

struct tiny {
    qt_tensor t[kNP];
    qt_param p[kNP];
    qt_plan plan;
    int64_t region_elems;
};
alignas(64) unsigned char g_arena[4 * 4 * 1024 * 4];
tiny g_tiny;
char g_dir[64];
char g_path[256], g_path2[256];
unsigned char g_big[1 << 16];

void make_plan(int decoder)
{
    tiny &T = g_tiny;
    memset(&T, 0, sizeof T);
    int64_t flat = 0;
    for (int i = 0; i < kNP; i++) {
        int64_t n = 1;
        T.t[i].name = kSpecs[i].name;
        T.t[i].role = QT_ROLE_PARAM;
        T.t[i].ndim = (uint8_t)kSpecs[i].ndim;
        for (int d = 0; d < kSpecs[i].ndim; d++) {
            T.t[i].shape[d] = T.t[i].global_shape[d] = kSpecs[i].s[d];
            n *= kSpecs[i].s[d];
        }
        T.t[i].numel = n;
        T.t[i].offset = 4 * flat;
        T.p[i].name = kSpecs[i].name;
        T.p[i].tensor = i;
        T.p[i].flat_offset = flat;
        T.p[i].numel = n;
        T.p[i].layer = strstr(kSpecs[i].name, "layers.0") ? 0 : -1;
        flat += (n + 15) / 16 * 16;   // 64-byte aligned as configgen does
    }
    T.region_elems = flat;
    qt_plan &P = T.plan;
    P.run_name = decoder ? "test-io-35" : "test-io-next";
    P.hash = decoder ? 0x1234abcd5678ef01ull : 0x0fedcba987654321ull;
    P.n_ranks = 1;
    P.model.decoder_block = decoder;
    P.model.d = kD;
    P.model.n_layers = 1;
    P.model.vocab = kV;
    P.model.gdn_k_heads = kHk;
    P.model.gdn_v_heads = kHv;
    P.model.gdn_k_dim = kDk;
    P.model.gdn_v_dim = kDv;
    P.model.gdn_conv = kK;
    P.model.n_experts = kE;
    P.model.moe_dim = kI;
    P.arena = g_arena;
    P.arena_bytes = sizeof g_arena;
    P.n_tensors = kNP;
    P.tensors = T.t;
    P.n_params = kNP;
    P.params = T.p;
    P.n_param_elems = flat;
    P.params_offset = 0;
    P.grads_offset = 4 * flat;
    P.adam_m_offset = 8 * flat;
    P.adam_v_offset = 12 * flat;
    CHECK(16 * flat <= (int64_t)sizeof g_arena);
}

float *region(int r) { return (float *)(void *)g_arena + r * g_tiny.region_elems; }
float *param(int r, int i) { return region(r) + g_tiny.p[i].flat_offset; }

// Distinct, exactly representable values: region r, element k -> r*4096 + k + 0.5 (and a
// sign pattern), so any misplaced row shows up as a wrong value.
// Alignment padding between parameters stays 0: checkpoints carry parameters only.
void fill_region(int r)
{
    memset(region(r), 0, 4 * g_tiny.region_elems);
    for (int i = 0; i < kNP; i++)
        for (int64_t k = g_tiny.p[i].flat_offset; k < g_tiny.p[i].flat_offset + g_tiny.p[i].numel; k++)
            region(r)[k] = (float)((k % 3 ? 1 : -1) * (r * 4096 + k + 0.5));
}

// Index of the first differing float (bitwise), -1 if equal: short failure messages.
long first_diff(const float *a, const float *b, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        if (memcmp(&a[k], &b[k], 4)) return (long)k;
    return -1;
}

const char *path_in(const char *name, char *buf = g_path)
{
    snprintf(buf, 256, "%s/%s", g_dir, name);
    return buf;
}

void write_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(b, 1, n, f) == n);
    fclose(f);
}

size_t read_bytes(const char *path, void *b, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(b, 1, cap, f);
    fclose(f);
    return n;
}


// True if the test directory holds an entry whose name starts with prefix (the writer's
// temporary is "<target>.tmp.<pid>").
static bool exists_prefix(const char *prefix)
{
    DIR *d = opendir(g_dir);
    bool found = false;
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) found = true;
    if (d) closedir(d);
    return found;
}

// Read one on-disk tensor as floats; returns its element count (0 if absent).
int64_t disk_tensor(const char *file, const char *name, float *out, int64_t cap)
{
    int h;
    LONGS_EQUAL(QT_OK, qt_st_open(file, &h));
    const qt_st_tensor *t = qt_st_find(h, name);
    int64_t n = t ? t->numel : 0;
    if (t) {
        CHECK(n <= cap);
        LONGS_EQUAL(0, qt_st_read_f32(h, t, 0, n, out));
    }
    qt_st_close(h);
    return n;
}

// Copy a safetensors file through the reader and writer, optionally altering it.
enum mut { M_NONE, M_BF16, M_DROP, M_EXTRA, M_RESHAPE, M_DTYPE_I32, M_MTP };
void rewrite(const char *src, const char *dst, mut m, const char *target = "")
{
    int h;
    static unsigned char buf[1 << 16];
    LONGS_EQUAL(QT_OK, qt_st_open(src, &h));
    LONGS_EQUAL(QT_OK, qt_st_wopen(dst));
    const char *keys[] = { "format", "step", "data_pos", "plan_hash", "run_name" };
    for (const char *k : keys)
        if (qt_st_meta(h, k)) LONGS_EQUAL(QT_OK, qt_st_wmeta(k, qt_st_meta(h, k)));
    int64_t extra_shape[2] = { 2, 2 };
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < qt_st_count(h); i++) {
            const qt_st_tensor *t = qt_st_at(h, i);
            bool hit = !strcmp(t->name, target);
            if (m == M_DROP && hit) continue;
            int dtype = m == M_BF16 ? QT_ST_BF16 : (m == M_DTYPE_I32 && hit) ? QT_ST_I32 : t->dtype;
            int64_t shape[QT_ST_MAX_DIMS];
            memcpy(shape, t->shape, sizeof shape);
            if (m == M_RESHAPE && hit) { shape[0] = t->shape[1]; shape[1] = t->shape[0]; }
            if (pass == 0) {
                LONGS_EQUAL(QT_OK, qt_st_wadd(t->name, dtype, t->ndim, shape));
                continue;
            }
            const unsigned char *src_b = (const unsigned char *)qt_st_data(h, t);
            if (m == M_BF16) {   // round-to-nearest-even on the float bits
                for (int64_t k = 0; k < t->numel; k++) {
                    uint32_t u;
                    memcpy(&u, src_b + 4 * k, 4);
                    uint16_t b = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
                    LONGS_EQUAL(QT_OK, qt_st_wwrite(&b, 2));
                }
            } else {
                LONGS_EQUAL(QT_OK, qt_st_wwrite(src_b, t->end - t->begin));
            }
        }
        if (pass == 0 && (m == M_EXTRA || m == M_MTP))
            LONGS_EQUAL(QT_OK, qt_st_wadd(m == M_EXTRA ? "model.bogus.weight"
                                                       : "mtp.fc.weight", QT_ST_F32, 2, extra_shape));
        if (pass == 0) LONGS_EQUAL(QT_OK, qt_st_wbegin());
    }
    if (m == M_EXTRA || m == M_MTP) {
        memset(buf, 0, 16);
        LONGS_EQUAL(QT_OK, qt_st_wwrite(buf, 16));
    }
    LONGS_EQUAL(QT_OK, qt_st_wcommit());
    qt_st_close(h);
}

void write_st_raw(const char *path, const char *json, size_t data_bytes, int64_t hlen_override = -1)
{
    static unsigned char buf[4096];
    size_t hl = strlen(json);
    uint64_t len = hlen_override >= 0 ? (uint64_t)hlen_override : hl;
    for (int b = 0; b < 8; b++) buf[b] = (unsigned char)(len >> (8 * b));
    memcpy(buf + 8, json, hl);
    memset(buf + 8 + hl, 0, data_bytes);
    write_bytes(path, buf, 8 + hl + data_bytes);
}

void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    char p[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

bool has(const char *needle) { return strstr(qt_last_error(), needle) != NULL; }
bool has_note(const char *needle) { return strstr(qt_notes(), needle) != NULL; }

}  // namespace

TEST_GROUP(io)
{
    void setup() override
    {
        snprintf(g_dir, sizeof g_dir, "/tmp/qt_io_test_XXXXXX");
        CHECK(mkdtemp(g_dir) != NULL);
        memset(g_arena, 0, sizeof g_arena);
        qt_set_quiet(1);
    }
    void teardown() override
    {
        char sub[256];
        qt_set_quiet(0);
        snprintf(sub, sizeof sub, "%s/sh", g_dir);   // sharded-checkpoint subdirectory
        remove_dir(sub);
        remove_dir(g_dir);
    }
};

// ---------------------------------------------------------------- checkpoints

static void round_trip(int decoder)
{
    make_plan(decoder);
    fill_region(0);
    static float saved[1 << 12];
    memcpy(saved, region(0), 4 * g_tiny.region_elems);
    const char *f = path_in("w.safetensors");
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, f, 0, 5, 77));
    CHECK(!exists_prefix("w.safetensors.tmp"));
    memset(g_arena, 0, sizeof g_arena);
    int64_t step = -1, pos = -1;
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, f, 0, &step, &pos));
    // bit-exact: the load must undo every permutation of the save
    LONGS_EQUAL(-1, first_diff(saved, region(0), g_tiny.region_elems));
    // a weights-only file does not resume the schedule: its step metadata is ignored
    LONGS_EQUAL(0, step);
    LONGS_EQUAL(0, pos);
}

TEST(io, next_round_trip_and_names)
{
    round_trip(0);
    static float buf[256];
    const char *f = g_path;
    // fused names are not on disk; per-expert slices are
    LONGS_EQUAL(0, disk_tensor(f, "model.layers.0.mlp.experts.gate_up_proj", buf, 256));
    LONGS_EQUAL(kNP - 2 + 3 * kE, [] { int h; qt_st_open(g_path, &h); int n = qt_st_count(h);
                                       qt_st_close(h); return n; }());
    // expert 1 gate = gate_up rows [2I, 2I+I), up = rows [2I+I, 4I)
    const float *gu = param(0, kGuParam), *down = param(0, kDownParam);
    LONGS_EQUAL(kI * kD, disk_tensor(f, "model.layers.0.mlp.experts.1.gate_proj.weight", buf, 256));
    MEMCMP_EQUAL(gu + (1 * 2 * kI + 0) * kD, buf, 4 * kI * kD);
    LONGS_EQUAL(kI * kD, disk_tensor(f, "model.layers.0.mlp.experts.1.up_proj.weight", buf, 256));
    MEMCMP_EQUAL(gu + (1 * 2 * kI + kI) * kD, buf, 4 * kI * kD);
    LONGS_EQUAL(kD * kI, disk_tensor(f, "model.layers.0.mlp.experts.2.down_proj.weight", buf, 256));
    MEMCMP_EQUAL(down + 2 * kD * kI, buf, 4 * kD * kI);
    // Next keeps the grouped GDN projections and the model. prefix; conv1d is [C,1,K]
    LONGS_EQUAL(kQkvz * kD, disk_tensor(f, "model.layers.0.linear_attn.in_proj_qkvz.weight", buf, 256));
    int h;
    LONGS_EQUAL(QT_OK, qt_st_open(f, &h));
    const qt_st_tensor *c = qt_st_find(h, "model.layers.0.linear_attn.conv1d.weight");
    CHECK(c != NULL);
    LONGS_EQUAL(3, c->ndim);
    LONGS_EQUAL(kCc, c->shape[0]);
    LONGS_EQUAL(1, c->shape[1]);
    LONGS_EQUAL(kK, c->shape[2]);
    STRCMP_EQUAL("pt", qt_st_meta(h, "format"));
    qt_st_close(h);
}

TEST(io, qwen35_round_trip_names_and_row_order)
{
    round_trip(1);
    static float buf[256];
    const char *f = g_path;
    const char *pre = "model.language_model.layers.0.";
    char name[256];
    LONGS_EQUAL(0, disk_tensor(f, "model.layers.0.input_layernorm.weight", buf, 256));
    LONGS_EQUAL(kV * kD, disk_tensor(f, "model.language_model.embed_tokens.weight", buf, 256));
    LONGS_EQUAL(kV * kD, disk_tensor(f, "lm_head.weight", buf, 256));
    LONGS_EQUAL(kD, disk_tensor(f, "model.language_model.norm.weight", buf, 256));
    snprintf(name, sizeof name, "%smlp.experts.0.gate_proj.weight", pre);
    LONGS_EQUAL(kI * kD, disk_tensor(f, name, buf, 256));
    // Hand-computed grouped-row index of every split row (G = 16, r = 2, qt_ops.h formulas).
    static const int qkv_rows[kCc] = { 0, 1, 16, 17,   2, 3, 18, 19,
                                       4, 5, 6, 7, 8, 9, 20, 21, 22, 23, 24, 25 };
    static const int z_rows[kHv * kDv] = { 10, 11, 12, 13, 14, 15, 26, 27, 28, 29, 30, 31 };
    static const int b_rows[kHv] = { 0, 1, 4, 5 }, a_rows[kHv] = { 2, 3, 6, 7 };
    struct { const char *suffix; const int *rows; int n; int param; } cases[] = {
        { "linear_attn.in_proj_qkv.weight", qkv_rows, kCc, kQkvzParam },
        { "linear_attn.in_proj_z.weight", z_rows, kHv * kDv, kQkvzParam },
        { "linear_attn.in_proj_b.weight", b_rows, kHv, kBaParam },
        { "linear_attn.in_proj_a.weight", a_rows, kHv, kBaParam },
    };
    for (auto &cs : cases) {
        snprintf(name, sizeof name, "%s%s", pre, cs.suffix);
        LONGS_EQUAL(cs.n * kD, disk_tensor(f, name, buf, 256));
        for (int r = 0; r < cs.n; r++)
            MEMCMP_EQUAL(param(0, cs.param) + cs.rows[r] * kD, buf + r * kD, 4 * kD);
    }
    snprintf(name, sizeof name, "%slinear_attn.in_proj_qkvz.weight", pre);
    LONGS_EQUAL(0, disk_tensor(f, name, buf, 256));
}

TEST(io, bf16_load_and_fused_expert_names)
{
    make_plan(1);
    fill_region(0);
    static float want[1 << 12];
    memcpy(want, region(0), 4 * g_tiny.region_elems);
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, path_in("f.safetensors"), 0, 0, 0));
    rewrite(g_path, path_in("b.safetensors", g_path2), M_BF16);
    memset(g_arena, 0, sizeof g_arena);
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, g_path2, 0, NULL, NULL));
    // expected = the float rounded to bf16 (nearest even), widened back: exact comparison
    double worst = 0.0;
    for (int64_t k = 0; k < g_tiny.region_elems; k++) {
        uint32_t u;
        memcpy(&u, &want[k], 4);
        uint32_t r = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
        float e;
        memcpy(&e, &r, 4);
        CHECK(e == region(0)[k]);
        double rel = fabs((double)e - want[k]) / fabs((double)want[k]);
        if (rel > worst) worst = rel;
    }
    // bf16 keeps 8 significant bits: round-to-nearest relative error <= 2^-8, and the test
    // values need more than 8 bits, so the error must also be non-zero (the path converted)
    CHECK(worst <= 1.0 / 256 && worst > 0.0);

    // A file with the fused in-memory expert names loads too.
    int h;
    LONGS_EQUAL(QT_OK, qt_st_open(g_path, &h));
    LONGS_EQUAL(QT_OK, qt_st_wopen(path_in("fused.safetensors", g_path2)));
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < kNP; i++) {
            char name[256];
            if (i == kGuParam || i == kDownParam) {
                snprintf(name, sizeof name, "model.language_model.layers.0.mlp.experts.%s",
                         i == kGuParam ? "gate_up_proj" : "down_proj");
                if (pass == 0)
                    LONGS_EQUAL(QT_OK, qt_st_wadd(name, QT_ST_F32, 3, kSpecs[i].s));
                else
                    LONGS_EQUAL(QT_OK, qt_st_wwrite(want + g_tiny.p[i].flat_offset, 4 * g_tiny.p[i].numel));
            }
        }
        for (int32_t k = 0; k < qt_st_count(h); k++) {
            const qt_st_tensor *t = qt_st_at(h, k);
            if (strstr(t->name, ".experts.")) continue;
            if (pass == 0) LONGS_EQUAL(QT_OK, qt_st_wadd(t->name, t->dtype, t->ndim, t->shape));
            else LONGS_EQUAL(QT_OK, qt_st_wwrite(qt_st_data(h, t), t->end - t->begin));
        }
        if (pass == 0) LONGS_EQUAL(QT_OK, qt_st_wbegin());
    }
    LONGS_EQUAL(QT_OK, qt_st_wcommit());
    qt_st_close(h);
    memset(g_arena, 0, sizeof g_arena);
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, g_path2, 0, NULL, NULL));
    LONGS_EQUAL(-1, first_diff(want, region(0), g_tiny.region_elems));
}

TEST(io, optimizer_state_round_trip_and_hash_check)
{
    make_plan(0);
    fill_region(0);
    fill_region(2);
    fill_region(3);
    // a second moment is never negative (a load refuses one that is)
    for (int64_t k = 0; k < g_tiny.region_elems; k++) region(3)[k] = fabsf(region(3)[k]);
    static float want[3][1 << 12];
    for (int r = 0; r < 3; r++)
        memcpy(want[r], region(r == 0 ? 0 : r + 1), 4 * g_tiny.region_elems);
    const char *f = path_in("ck.safetensors");
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, f, 1, 42, 4200));
    memset(g_arena, 0, sizeof g_arena);
    int64_t step = 0, pos = 0;
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, f, 1, &step, &pos));
    LONGS_EQUAL(42, step);
    LONGS_EQUAL(4200, pos);
    LONGS_EQUAL(-1, first_diff(want[0], region(0), g_tiny.region_elems));
    LONGS_EQUAL(-1, first_diff(want[1], region(2), g_tiny.region_elems));
    LONGS_EQUAL(-1, first_diff(want[2], region(3), g_tiny.region_elems));
    int h;
    LONGS_EQUAL(QT_OK, qt_st_open(f, &h));
    STRCMP_EQUAL("qtrain-1", qt_st_meta(h, "format"));
    STRCMP_EQUAL("0x0fedcba987654321", qt_st_meta(h, "plan_hash"));
    STRCMP_EQUAL("test-io-next", qt_st_meta(h, "run_name"));
    CHECK(qt_st_find(h, "optimizer.m.model.layers.0.mlp.experts.2.up_proj.weight") != NULL);
    CHECK(qt_st_find(h, "optimizer.v.lm_head.weight") != NULL);
    qt_st_close(h);

    // weights only from an optimizer checkpoint: m/v untouched
    memset(g_arena, 0, sizeof g_arena);
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, f, 0, NULL, NULL));
    LONGS_EQUAL(-1, first_diff(want[0], region(0), g_tiny.region_elems));
    CHECK(region(2)[0] == 0.0f);

    // Another plan with the same trajectory (other mesh, batch split or layout: another
    // plan hash, the same state hash): the moments and the step resume. This replaces the
    // old whole-plan-hash rule for files that carry a state hash, so checkpoints move
    // between meshes.
    g_tiny.plan.hash ^= 1;
    memset(g_arena, 0, sizeof g_arena);
    step = -1;
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, f, 1, &step, NULL));
    LONGS_EQUAL(42, step);
    LONGS_EQUAL(-1, first_diff(want[1], region(2), g_tiny.region_elems));

    // Another trajectory (here the learning rate): the weights load, the moments and the
    // step do not, and the note names both state hashes
    g_tiny.plan.hash ^= 1;
    char saved_sh[24], other_sh[24];
    snprintf(saved_sh, sizeof saved_sh, "0x%016llx",
             (unsigned long long)qt_ckpt_state_hash(&g_tiny.plan));
    g_tiny.plan.train.lr = 1e-3f;
    snprintf(other_sh, sizeof other_sh, "0x%016llx",
             (unsigned long long)qt_ckpt_state_hash(&g_tiny.plan));
    CHECK(strcmp(saved_sh, other_sh) != 0);
    memset(g_arena, 0, sizeof g_arena);
    qt_clear_notes();
    step = -1;
    pos = -1;
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, f, 1, &step, &pos));
    CHECK(has_note(saved_sh) && has_note(other_sh));
    CHECK(has_note("loading the weights only"));
    LONGS_EQUAL(0, step);
    LONGS_EQUAL(0, pos);
    LONGS_EQUAL(-1, first_diff(want[0], region(0), g_tiny.region_elems));
    CHECK(region(2)[0] == 0.0f);
    CHECK(region(3)[0] == 0.0f);

    // A file without a state hash (older qtrain-1; rewrite() keeps the other keys) keeps
    // the old rule: another plan hash loads the weights only, naming both plan hashes
    g_tiny.plan.train.lr = 0.0f;
    rewrite(f, path_in("old.safetensors", g_path2), M_NONE);
    LONGS_EQUAL(QT_OK, qt_st_open(g_path2, &h));
    CHECK(qt_st_meta(h, "state_hash") == NULL);
    qt_st_close(h);
    memset(g_arena, 0, sizeof g_arena);
    step = -1;
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, g_path2, 1, &step, NULL));
    LONGS_EQUAL(42, step);
    LONGS_EQUAL(-1, first_diff(want[2], region(3), g_tiny.region_elems));
    g_tiny.plan.hash ^= 1;
    memset(g_arena, 0, sizeof g_arena);
    qt_clear_notes();
    step = -1;
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, g_path2, 1, &step, NULL));
    CHECK(has_note("0x0fedcba987654321") && has_note("0x0fedcba987654320"));
    CHECK(has_note("loading the weights only"));
    LONGS_EQUAL(0, step);
    CHECK(region(2)[0] == 0.0f);
}

TEST(io, state_hash_ignores_mesh_and_batch_split)
{
    // what only sets the mesh, the batch split or the layout leaves the state hash alone;
    // what sets the trajectory changes it
    make_plan(0);
    const uint64_t h0 = qt_ckpt_state_hash(&g_tiny.plan);
    qt_plan &P = g_tiny.plan;
    P.hash ^= 0xff;
    P.n_ranks = 4;
    P.mesh[QT_MESH_EXPERT] = 4;
    P.train.micro_batch = 3;
    P.train.grad_accum = 5;
    P.train.steps = 99;
    P.adam_m_offset += 64;
    g_tiny.t[kGuParam].shape[0] = 1;      // a local expert shard
    CHECK(qt_ckpt_state_hash(&P) == h0);
    P.train.global_batch = 8;
    CHECK(qt_ckpt_state_hash(&P) != h0);
    P.train.global_batch = 0;
    P.train.schedule_steps = 7;
    CHECK(qt_ckpt_state_hash(&P) != h0);
    P.train.schedule_steps = 0;
    P.train.adam_b2 = 0.95f;
    CHECK(qt_ckpt_state_hash(&P) != h0);
    P.train.adam_b2 = 0.0f;
    // the MTP head's weight in the objective (mtp_loss_scaling_factor) sets the trajectory
    // as the z-loss does; MaxText's default 0.1 keeps the hash states had before it counted,
    // and without a head the factor is inert
    P.mtp_factor = 0.3f;
    CHECK(qt_ckpt_state_hash(&P) == h0);
    P.mtp_layers = 1;
    CHECK(qt_ckpt_state_hash(&P) != h0);
    P.mtp_factor = 0.1f;
    CHECK(qt_ckpt_state_hash(&P) == h0);
    P.mtp_layers = 0;
    // packing (with its separator) and token dropping set the objective too (session 23);
    // off, the hash states had before they counted; the compute dtype does not count (the
    // same fp32 masters and moments: a resume across it is noted, main.c)
    P.dtype = QT_BF16;
    CHECK(qt_ckpt_state_hash(&P) == h0);
    P.dtype = QT_F32;
    P.pack_eos = 7;
    CHECK(qt_ckpt_state_hash(&P) == h0);
    P.packing = 1;
    const uint64_t hp = qt_ckpt_state_hash(&P);
    CHECK(hp != h0);
    P.pack_eos = 9;
    CHECK(qt_ckpt_state_hash(&P) != hp);
    P.packing = 0;
    P.moe_ragged = 1;                     // the receive buffers' dropping: the expert degree's
    CHECK(qt_ckpt_state_hash(&P) == h0);
    P.moe_ragged = 0;
    P.moe_capacity = 8;
    const uint64_t hc = qt_ckpt_state_hash(&P);
    CHECK(hc != h0);
    P.moe_capacity = 4;
    CHECK(qt_ckpt_state_hash(&P) != hc);
    P.moe_capacity = 0;
    P.moe_drop_all = 1;
    CHECK(qt_ckpt_state_hash(&P) != h0);
    P.moe_drop_all = 0;
    CHECK(qt_ckpt_state_hash(&P) == h0);
    g_tiny.t[kGuParam].global_shape[0] = 4;   // another expert count
    CHECK(qt_ckpt_state_hash(&P) != h0);
}

// Overwrites element idx of tensor `name` in a safetensors file with v (F32 tensors).
static void poke_f32(const char *file, const char *name, int64_t idx, float v)
{
    int h;
    LONGS_EQUAL(QT_OK, qt_st_open(file, &h));
    const qt_st_tensor *t = qt_st_find(h, name);
    CHECK(t != NULL && t->dtype == QT_ST_F32 && idx < t->numel);
    int64_t begin = t->begin;
    qt_st_close(h);
    unsigned char len8[8];
    CHECK(read_bytes(file, len8, 8) == 8);
    uint64_t hl = 0;
    for (int b = 7; b >= 0; b--) hl = hl << 8 | len8[b];
    FILE *f = fopen(file, "r+b");
    CHECK(f != NULL);
    fseek(f, (long)(8 + hl + begin + 4 * idx), SEEK_SET);
    CHECK(fwrite(&v, 4, 1, f) == 1);
    fclose(f);
}

// Loaded values are validated before anything is written: a NaN or inf weight or first
// moment, a NaN or negative second moment, each names the tensor and the first bad index.
TEST(io, nonfinite_or_negative_state_is_refused_before_loading)
{
    make_plan(0);
    fill_region(0);
    fill_region(2);
    fill_region(3);
    for (int64_t k = 0; k < g_tiny.region_elems; k++) region(3)[k] = fabsf(region(3)[k]);
    const char *good = path_in("good.safetensors");
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, good, 1, 3, 0));
    static unsigned char copy[sizeof g_arena];
    struct { const char *tensor; int64_t idx; float v; const char *msg; } cases[] = {
        { "optimizer.m.lm_head.weight", 5, NAN, "tensor optimizer.m.lm_head.weight: element 5 is nan; expected finite values" },
        { "optimizer.v.model.norm.weight", 2, NAN, "tensor optimizer.v.model.norm.weight: element 2 is nan" },
        { "optimizer.v.model.norm.weight", 1, -0.25f, "element 1 is -0.25; expected finite values >= 0" },
        { "model.layers.0.mlp.gate.weight", 7, INFINITY, "tensor model.layers.0.mlp.gate.weight: element 7 is inf" },
    };
    for (auto &c : cases) {
        static unsigned char buf[1 << 16];
        size_t n = read_bytes(good, buf, sizeof buf);
        write_bytes(path_in("bad.safetensors", g_path2), buf, n);
        poke_f32(g_path2, c.tensor, c.idx, c.v);
        memset(g_arena, 0x5a, sizeof g_arena);
        memcpy(copy, g_arena, sizeof g_arena);
        int64_t step = -1;
        LONGS_EQUAL(QT_E_FORMAT, qt_checkpoint_load(&g_tiny.plan, g_path2, 1, &step, NULL));
        if (!has(c.msg) || !has(g_path2)) FAIL(qt_last_error());
        CHECK(memcmp(copy, g_arena, sizeof g_arena) == 0);   // nothing changed
    }
    // -0 is a valid second moment, and the good file loads
    poke_f32(good, "optimizer.v.model.norm.weight", 1, -0.0f);
    int64_t step = -1;
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, good, 1, &step, NULL));
    LONGS_EQUAL(3, step);
}

TEST(io, grads_use_gradient_region)
{
    make_plan(0);
    fill_region(1);
    LONGS_EQUAL(QT_OK, qt_checkpoint_save_grads(&g_tiny.plan, path_in("g.safetensors")));
    static float buf[256];
    LONGS_EQUAL(kV * kD, disk_tensor(g_path, "lm_head.weight", buf, 256));
    MEMCMP_EQUAL(param(1, kNP - 1), buf, 4 * kV * kD);
}

TEST(io, atomic_save_keeps_old_file)
{
    make_plan(0);
    fill_region(0);
    const char *f = path_in("a.safetensors");
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, f, 0, 1, 1));
    static unsigned char before[1 << 15], after[1 << 15];
    size_t n = read_bytes(f, before, sizeof before);
    CHECK(n > 2000);
    // A real write failure: the file-size limit makes pwrite fail with EFBIG mid-way.
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1000;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    fill_region(2);   // different content, so a partial overwrite would be visible
    memcpy(region(0), region(2), 4 * g_tiny.region_elems);
    int rc = qt_checkpoint_save(&g_tiny.plan, f, 1, 2, 2);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    LONGS_EQUAL(QT_E_IO, rc);
    CHECK(has("write failed"));
    CHECK(!exists_prefix("a.safetensors.tmp"));
    LONGS_EQUAL(n, read_bytes(f, after, sizeof after));
    MEMCMP_EQUAL(before, after, n);
    // and a save into a missing directory fails cleanly
    LONGS_EQUAL(QT_E_IO, qt_checkpoint_save(&g_tiny.plan, "/nonexistent-qt/x.safetensors", 0, 0, 0));
}

// ---------------------------------------------------------------- sharded checkpoints

// How write_shards damages the split (all optional).
struct shard_opts {
    const char *dup;        // also written into the next shard (index keeps the first)
    const char *reshape;    // dims 0 and 1 swapped in its shard
    const char *remap;      // the index names the next shard instead of the real one
    const char *extra;      // extra weight_map entry "<name>" -> second shard, not written
    bool mtp;               // an mtp.* tensor in the last shard (listed in the index)
    bool bad_json;          // index truncated mid-object
};

// Split the single-file checkpoint src into n shards "model-0000K-of-0000N.safetensors"
// in dir (tensor k of c goes to shard k*n/c: contiguous, header order) plus
// model.safetensors.index.json, the way transformers' save_pretrained lays them out.
static void write_shards(const char *src, const char *dir, int n, const shard_opts &o)
{
    static char index[1 << 15];
    char file[8][64], path[320];
    int h, at = 0;
    LONGS_EQUAL(QT_OK, qt_st_open(src, &h));
    int c = qt_st_count(h);
    at += snprintf(index + at, sizeof index - at,
                   "{\n  \"metadata\": {\"total_size\": 1234, \"note\": \"a [b] {c}\"},\n"
                   "  \"weight_map\": {\n");
    for (int s = 0; s < n; s++)
        snprintf(file[s], sizeof file[s], "model-%05d-of-%05d.safetensors", s + 1, n);
    for (int s = 0; s < n; s++) {
        snprintf(path, sizeof path, "%s/%s", dir, file[s]);
        LONGS_EQUAL(QT_OK, qt_st_wopen(path));
        LONGS_EQUAL(QT_OK, qt_st_wmeta("format", "pt"));
        int64_t mtp_shape[2] = { 2, 2 };
        for (int pass = 0; pass < 2; pass++) {
            for (int k = 0; k < c; k++) {
                const qt_st_tensor *t = qt_st_at(h, k);
                int home = k * n / c;
                bool dup_here = o.dup && !strcmp(t->name, o.dup) && s == (home + 1) % n;
                if (home != s && !dup_here) continue;
                int64_t shape[QT_ST_MAX_DIMS];
                memcpy(shape, t->shape, sizeof shape);
                if (o.reshape && !strcmp(t->name, o.reshape)) {
                    shape[0] = t->shape[1];
                    shape[1] = t->shape[0];
                }
                if (pass == 0)
                    LONGS_EQUAL(QT_OK, qt_st_wadd(t->name, t->dtype, t->ndim, shape));
                else
                    LONGS_EQUAL(QT_OK, qt_st_wwrite(qt_st_data(h, t), t->end - t->begin));
                if (pass == 0 && home == s) {
                    int to = (o.remap && !strcmp(t->name, o.remap)) ? (s + 1) % n : s;
                    at += snprintf(index + at, sizeof index - at, "    \"%s\": \"%s\",\n",
                                   t->name, file[to]);
                }
            }
            bool mtp_here = o.mtp && s == n - 1;
            if (pass == 0 && mtp_here) {
                LONGS_EQUAL(QT_OK, qt_st_wadd("mtp.fc.weight", QT_ST_F32, 2, mtp_shape));
                at += snprintf(index + at, sizeof index - at, "    \"mtp.fc.weight\": \"%s\",\n",
                               file[s]);
            }
            if (pass == 0) LONGS_EQUAL(QT_OK, qt_st_wbegin());
            if (pass == 1 && mtp_here) {
                static const float zeros[4] = { 0, 0, 0, 0 };
                LONGS_EQUAL(QT_OK, qt_st_wwrite(zeros, sizeof zeros));
            }
        }
        LONGS_EQUAL(QT_OK, qt_st_wcommit());
    }
    qt_st_close(h);
    if (o.extra)
        at += snprintf(index + at, sizeof index - at, "    \"%s\": \"%s\",\n", o.extra,
                       file[1 % n]);
    at -= 2;   // drop the last ",\n": JSON has no trailing commas
    at += snprintf(index + at, sizeof index - at, o.bad_json ? "\n  }\n" : "\n  }\n}\n");
    CHECK(at < (int)sizeof index - 1);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_bytes(path, index, (size_t)at);
}

static const char *shard_dir()
{
    static char dir[256];
    snprintf(dir, sizeof dir, "%s/sh", g_dir);
    remove_dir(dir);
    CHECK(mkdir(dir, 0700) == 0);
    return dir;
}

TEST(io, sharded_load_matches_single_file)
{
    static float want[1 << 12];
    for (int decoder = 0; decoder < 2; decoder++) {
        make_plan(decoder);
        fill_region(0);
        const char *single = path_in("single.safetensors");
        LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, single, 0, 0, 0));
        memset(g_arena, 0, sizeof g_arena);
        LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, single, 0, NULL, NULL));
        memcpy(want, region(0), 4 * g_tiny.region_elems);
        for (int n = 2; n <= 3; n++) {
            const char *dir = shard_dir();
            shard_opts o = {};
            o.mtp = true;
            write_shards(single, dir, n, o);
            char idx[320];
            snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
            // via the index file: bit-exact with the single-file load (same float bits)
            memset(g_arena, 0, sizeof g_arena);
            qt_clear_notes();
            int64_t step = -1;
            LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, idx, 1, &step, NULL));
            LONGS_EQUAL(-1, first_diff(want, region(0), g_tiny.region_elems));
            LONGS_EQUAL(0, step);
            CHECK(has_note("skipped 1 mtp.* tensors"));
            CHECK(has_note("no optimizer.safetensors.index.json beside it"));
            // via the directory
            memset(g_arena, 0, sizeof g_arena);
            LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, dir, 0, NULL, NULL));
            LONGS_EQUAL(-1, first_diff(want, region(0), g_tiny.region_elems));
        }
    }
    // a directory without an index but with exactly one safetensors file loads that file
    const char *dir = shard_dir();
    char one[320];
    snprintf(one, sizeof one, "%s/only.safetensors", dir);
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, one, 0, 0, 0));
    memset(g_arena, 0, sizeof g_arena);
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, dir, 0, NULL, NULL));
    LONGS_EQUAL(-1, first_diff(want, region(0), g_tiny.region_elems));
    // with two files and no index the directory is ambiguous
    snprintf(one, sizeof one, "%s/second.safetensors", dir);
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, one, 0, 0, 0));
    LONGS_EQUAL(QT_E_ARG, qt_checkpoint_load(&g_tiny.plan, dir, 0, NULL, NULL));
    CHECK(has("several *.safetensors"));
}

// qtrain's own sharded save (ckpt_dir.c): weights, moments and step round-trip bit-exactly
// through several shards; the files are what the single-file save holds; a re-save keeps
// the user's files; a failed save leaves the previous checkpoint; damaged directories are
// refused before anything loads.
static void fill_state()
{
    make_plan(0);
    fill_region(0);
    fill_region(2);
    fill_region(3);
    for (int64_t k = 0; k < g_tiny.region_elems; k++) region(3)[k] = fabsf(region(3)[k]);
}

// "<prefix>-0000K-of-0000N.safetensors" name of shard k of the n that dir holds.
static const char *shard_name(const char *dir, const char *prefix, int k)
{
    static char out[400];
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && strstr(e->d_name, "-of-")) n++;
    if (d) closedir(d);
    CHECK(n >= k);
    snprintf(out, sizeof out, "%s/%s-%05d-of-%05d.safetensors", dir, prefix, k, n);
    return out;
}

static bool regions_zero()
{
    for (int r = 0; r < 4; r++)
        for (int64_t k = 0; k < g_tiny.region_elems; k++)
            if (region(r)[k] != 0.0f) return false;
    return true;
}

TEST(io, sharded_save_round_trip_layout_and_atomicity)
{
    static float want[3][1 << 12];
    static char path[400], idx[400];
    fill_state();
    for (int r = 0; r < 3; r++) memcpy(want[r], region(r ? r + 1 : 0), 4 * g_tiny.region_elems);
    const char *dir = shard_dir();
    rmdir(dir);                                   // the save creates it
    LONGS_EQUAL(QT_OK, qt_checkpoint_check_target("save", dir, 1, 0, NULL));
    LONGS_EQUAL(QT_OK, qt_checkpoint_save_dir(&g_tiny.plan, dir, 512, 42, 4200));
    CHECK(!exists_prefix("sh.tmp"));
    // several shards of each kind, HF names, and the metadata
    snprintf(path, sizeof path, "%s", shard_name(dir, "model", 1));
    CHECK(strstr(path, "-of-00001") == NULL);     // more than one model shard
    static float buf[1 << 12], ref[1 << 12];
    const char *single = path_in("single.safetensors");
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, single, 1, 42, 4200));
    int64_t n = disk_tensor(path, "model.embed_tokens.weight", buf, 1 << 12);
    CHECK(n > 0);
    LONGS_EQUAL(n, disk_tensor(single, "model.embed_tokens.weight", ref, 1 << 12));
    MEMCMP_EQUAL(ref, buf, 4 * n);
    snprintf(path, sizeof path, "%s", shard_name(dir, "optimizer", 2));
    int h;
    LONGS_EQUAL(QT_OK, qt_st_open(path, &h));
    STRCMP_EQUAL("42", qt_st_meta(h, "step"));
    qt_st_close(h);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    LONGS_EQUAL(QT_OK, qt_sx_open(idx));
    STRCMP_EQUAL("qtrain-1", qt_sx_meta(0, "format"));
    STRCMP_EQUAL("4200", qt_sx_meta(0, "data_pos"));
    CHECK(qt_sx_find("model.layers.0.mlp.experts.2.up_proj.weight") >= 0);
    // round trip: every region bit-exact, the step and data position resume
    memset(g_arena, 0, sizeof g_arena);
    int64_t step = 0, pos = 0;
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, dir, 1, &step, &pos));
    LONGS_EQUAL(42, step);
    LONGS_EQUAL(4200, pos);
    for (int r = 0; r < 3; r++)
        LONGS_EQUAL(-1, first_diff(want[r], region(r ? r + 1 : 0), g_tiny.region_elems));
    // weights only: the moments and the step stay
    memset(g_arena, 0, sizeof g_arena);
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, idx, 0, &step, NULL));
    LONGS_EQUAL(0, step);
    CHECK(region(2)[0] == 0.0f);

    // a re-save replaces the checkpoint and keeps the user's files (hard links)
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_bytes(path, "{}", 2);
    LONGS_EQUAL(QT_OK, qt_checkpoint_check_target("save", dir, 1, 0, NULL));
    fill_state();
    region(0)[0] += 1.0f;
    LONGS_EQUAL(QT_OK, qt_checkpoint_save_dir(&g_tiny.plan, dir, 100000, 43, 4300));
    char two[4];
    LONGS_EQUAL(2, read_bytes(path, two, sizeof two));
    CHECK(!strcmp(shard_name(dir, "model", 1) + strlen(dir), "/model-00001-of-00001.safetensors"));
    CHECK(!exists_prefix("sh.tmp"));
    memset(g_arena, 0, sizeof g_arena);
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, dir, 1, &step, NULL));
    LONGS_EQUAL(43, step);
    CHECK(region(0)[0] == want[0][0] + 1.0f);

    // a save that fails mid-way (file-size limit: a shard write gets EFBIG) leaves the
    // previous checkpoint and no temporary
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 3000;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    region(0)[0] += 1.0f;
    int rc = qt_checkpoint_save_dir(&g_tiny.plan, dir, 100000, 44, 4400);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    LONGS_EQUAL(QT_E_IO, rc);
    CHECK(!exists_prefix("sh.tmp"));
    memset(g_arena, 0, sizeof g_arena);
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, dir, 1, &step, NULL));
    LONGS_EQUAL(43, step);
    CHECK(region(0)[0] == want[0][0] + 1.0f);
}

TEST(io, sharded_save_damage_is_refused_before_loading)
{
    static char a[400], b[400], victim[400], idx[400];
    fill_state();
    const char *dir = shard_dir();
    LONGS_EQUAL(QT_OK, qt_checkpoint_save_dir(&g_tiny.plan, dir, 512, 42, 4200));
    snprintf(idx, sizeof idx, "%s/optimizer.safetensors.index.json", dir);
    // a shard of another save of the same plan: the steps disagree
    snprintf(a, sizeof a, "%s/other", g_dir);
    LONGS_EQUAL(QT_OK, qt_checkpoint_save_dir(&g_tiny.plan, a, 512, 41, 4100));
    snprintf(b, sizeof b, "%s", shard_name(a, "optimizer", 3));
    snprintf(victim, sizeof victim, "%s", shard_name(dir, "optimizer", 3));
    const char *vname = strrchr(victim, '/') + 1;
    static unsigned char keep[1 << 16], other[1 << 16];
    size_t nk = read_bytes(victim, keep, sizeof keep), no = read_bytes(b, other, sizeof other);
    CHECK(nk > 100 && no > 100);
    remove_dir(a);
    write_bytes(victim, other, no);
    memset(g_arena, 0, sizeof g_arena);
    LONGS_EQUAL(QT_E_MISMATCH, qt_checkpoint_load(&g_tiny.plan, dir, 1, NULL, NULL));
    if (!has(vname) || !has("is from step 41, the index from step 42"))
        FAIL(qt_last_error());
    CHECK(regions_zero());
    // truncated by one byte, and missing: refused naming the file, nothing loads
    write_bytes(victim, keep, nk - 1);
    LONGS_EQUAL(QT_E_FORMAT, qt_checkpoint_load(&g_tiny.plan, dir, 1, NULL, NULL));
    CHECK(has(vname));
    CHECK(regions_zero());
    unlink(victim);
    LONGS_EQUAL(QT_E_IO, qt_checkpoint_load(&g_tiny.plan, dir, 1, NULL, NULL));
    CHECK(has(vname) && has("cannot open"));
    CHECK(regions_zero());
    // loading the weights alone does not read the optimizer files
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, dir, 0, NULL, NULL));
    write_bytes(victim, keep, nk);
    // moments of another trajectory (state hash): the weights load, from step 0
    static char json[1 << 16];
    size_t nj = read_bytes(idx, json, sizeof json - 1);
    json[nj] = 0;
    char *hash = strstr(json, "\"state_hash\":\"0x");
    CHECK(hash != NULL);
    hash[16] = hash[16] == 'f' ? 'e' : 'f';
    write_bytes(idx, json, nj);
    memset(g_arena, 0, sizeof g_arena);
    qt_clear_notes();
    int64_t step = -1;
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, dir, 1, &step, NULL));
    LONGS_EQUAL(0, step);
    CHECK(has_note("optimizer state was saved for state hash"));
    CHECK(region(2)[0] == 0.0f && region(0)[0] != 0.0f);
}

TEST(io, sharded_save_targets)
{
    static char p[400];
    const char *dir = shard_dir();                  // empty: fine
    LONGS_EQUAL(QT_OK, qt_checkpoint_check_target("save", dir, 1, 0, NULL));
    snprintf(p, sizeof p, "%s/sub", dir);         // a subdirectory could not be carried over
    CHECK(mkdir(p, 0700) == 0);
    LONGS_EQUAL(QT_E_ARG, qt_checkpoint_check_target("save", dir, 1, 1, NULL));
    CHECK(has("holds the subdirectory sub"));
    rmdir(p);
    // a Hugging Face checkpoint that is not qtrain's is replaced only with overwrite=1
    make_plan(0);
    fill_region(0);
    const char *single = path_in("single.safetensors");
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, single, 0, 0, 0));
    write_shards(single, dir, 2, shard_opts{});
    LONGS_EQUAL(QT_E_ARG, qt_checkpoint_check_target("save", dir, 1, 0, NULL));
    CHECK(has("holds checkpoint files but no qtrain checkpoint"));
    LONGS_EQUAL(QT_OK, qt_checkpoint_check_target("save", dir, 1, 1, NULL));
    // a regular file at a directory path
    snprintf(p, sizeof p, "%s/plain", g_dir);
    write_bytes(p, "x", 1);
    LONGS_EQUAL(QT_E_ARG, qt_checkpoint_check_target("save", p, 1, 1, NULL));
    CHECK(has("exists and is a regular file, not a directory"));
    unlink(p);
    CHECK(qt_checkpoint_is_file("a/b.safetensors"));
    CHECK(!qt_checkpoint_is_file("a/b"));
}

TEST(io, sharded_load_bad_cases_change_nothing)
{
    make_plan(1);
    fill_region(0);
    const char *single = path_in("single.safetensors");
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, single, 0, 0, 0));
    const char *emb = "model.language_model.embed_tokens.weight";
    struct { shard_opts o; const char *unlink_shard; int code; const char *msg1, *msg2; } cases[] = {
        // missing shard file
        { {}, "model-00002-of-00003.safetensors", QT_E_IO,
          "model-00002-of-00003.safetensors: cannot open",
          "model.safetensors.index.json lists the shard model-00002-of-00003.safetensors" },
        // index lists a tensor its shard does not hold
        { { NULL, NULL, NULL, "mtp.fc.weight", false, false }, NULL, QT_E_MISMATCH,
          "maps tensor mtp.fc.weight to shard", "model-00002-of-00003.safetensors, which does not contain it" },
        // index lists a tensor no shard or plan knows
        { { NULL, NULL, NULL, "model.bogus.weight", false, false }, NULL, QT_E_MISMATCH,
          "unexpected tensor model.bogus.weight", "" },
        // tensor present in two shards (index keeps the first)
        { { emb, NULL, NULL, NULL, false, false }, NULL, QT_E_MISMATCH,
          "tensor model.language_model.embed_tokens.weight is in shard",
          "model-00002-of-00003.safetensors but the index maps it to model-00001-of-00003.safetensors" },
        // mapped to another shard than the one holding it (shards are checked in order of
        // first mention in the weight_map, so the wrong shard is reported first here)
        { { NULL, NULL, emb, NULL, false, false }, NULL, QT_E_MISMATCH,
          "maps tensor model.language_model.embed_tokens.weight to shard",
          "model-00002-of-00003.safetensors, which does not contain it" },
        // malformed index JSON
        { { NULL, NULL, NULL, NULL, false, true }, NULL, QT_E_FORMAT, "bad index JSON", "" },
        // shape mismatch in the last shard: the earlier shards are valid, still nothing loads
        { { NULL, "lm_head.weight", NULL, NULL, false, false }, NULL, QT_E_MISMATCH,
          "model-00003-of-00003.safetensors: tensor lm_head.weight: wrong shape: expected [8,4], "
          "file has [4,8]", "" },
    };
    char idx[320], victim[320];
    int n_case = 0;
    for (auto &c : cases) {
        const char *dir = shard_dir();
        write_shards(single, dir, 3, c.o);
        if (c.unlink_shard) {
            snprintf(victim, sizeof victim, "%s/%s", dir, c.unlink_shard);
            CHECK(unlink(victim) == 0);
        }
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
        memset(g_arena, 0, sizeof g_arena);
        int rc = qt_checkpoint_load(&g_tiny.plan, (n_case++ % 2) ? dir : idx, 0, NULL, NULL);
        if (rc != c.code || !has(c.msg1) || !has(c.msg2))
            FAIL(qt_last_error());
        // the message names a file of this checkpoint
        CHECK(has("/sh/"));
        for (int64_t k = 0; k < g_tiny.region_elems; k++)
            CHECK(region(0)[k] == 0.0f);   // all-or-nothing across shards
    }
    // a NaN in the last shard: refused by the first pass, nothing loads
    {
        const char *dir = shard_dir();
        write_shards(single, dir, 3, shard_opts{});
        snprintf(victim, sizeof victim, "%s/model-00003-of-00003.safetensors", dir);
        poke_f32(victim, "lm_head.weight", 4, NAN);
        memset(g_arena, 0, sizeof g_arena);
        LONGS_EQUAL(QT_E_FORMAT, qt_checkpoint_load(&g_tiny.plan, dir, 0, NULL, NULL));
        if (!has("model-00003-of-00003.safetensors: tensor lm_head.weight: element 4 is nan"))
            FAIL(qt_last_error());
        for (int64_t k = 0; k < g_tiny.region_elems; k++)
            CHECK(region(0)[k] == 0.0f);
    }
    // a weight_map listing one name twice
    const char *dir = shard_dir();
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    const char *twice = "{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"y.safetensors\"}}";
    write_bytes(idx, twice, strlen(twice));
    LONGS_EQUAL(QT_E_FORMAT, qt_checkpoint_load(&g_tiny.plan, idx, 0, NULL, NULL));
    CHECK(has("tensor a appears twice in weight_map (x.safetensors and y.safetensors)"));
}

// ---------------------------------------------------------------- bad files

// A header's strings may hold JSON escapes: the safetensors library (serde_json) escapes '"',
// '\' and control characters in metadata values (a description with a newline, a JSON
// config stored as a string), Python's json non-ASCII too. They are decoded in place; a
// surrogate pair becomes one 4-byte UTF-8 character; invalid UTF-8, a lone surrogate, an
// unknown escape and \u0000 are refused, naming the byte.
TEST(io, safetensors_header_escapes)
{
    int h;
    write_st_raw(path_in("esc.safetensors"),
                 "{\"__metadata__\":{\"note\":\"a\\nb \\\"q\\\" \\\\ \\/ caf\\u00e9 \\ud83d\\ude00 \\t\","
                 "\"raw\":\"caf\xc3\xa9\"},"
                 "\"w\\u002eweigh\\u0074\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    if (qt_st_open(g_path, &h) != QT_OK) FAIL(qt_last_error());
    STRCMP_EQUAL("a\nb \"q\" \\ / caf\xc3\xa9 \xf0\x9f\x98\x80 \t", qt_st_meta(h, "note"));
    STRCMP_EQUAL("caf\xc3\xa9", qt_st_meta(h, "raw"));
    CHECK(qt_st_find(h, "w.weight") != NULL);
    qt_st_close(h);
    struct { const char *json; const char *msg; } cases[] = {
        { "{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", "\\u0000 (a NUL character)" },
        { "{\"__metadata__\":{\"k\":\"\\ud83d x\"}}", "high surrogate escape not followed" },
        { "{\"__metadata__\":{\"k\":\"\\ude00\"}}", "low surrogate escape without" },
        { "{\"__metadata__\":{\"k\":\"\\x41\"}}", "invalid escape" },
        { "{\"__metadata__\":{\"k\":\"\\u12G4\"}}", "four hex digits" },
        { "{\"__metadata__\":{\"k\":\"\xff\"}}", "invalid UTF-8" },
        { "{\"__metadata__\":{\"k\":\"\xed\xa0\x80\"}}", "invalid UTF-8" },   // a surrogate
        { "{\"__metadata__\":{\"k\":\"\xc0\xae\"}}", "invalid UTF-8" },       // overlong '.'
    };
    for (auto &c : cases) {
        write_st_raw(path_in("bad.safetensors"), c.json, 0);
        LONGS_EQUAL(QT_E_FORMAT, qt_st_open(g_path, &h));
        if (!has(c.msg) || !has("bad safetensors header JSON at byte")) FAIL(qt_last_error());
    }
}

// __metadata__ with as many entries as other tools write (session 24: 64 was the limit,
// and files with 50-80 entries were refused): 80 and QT_ST_MAX_META open, each value read
// back; one more is refused naming the file, the count and QT_ST_MAX_META.
static void write_st_meta(const char *path, int n)
{
    std::string j = "{\"__metadata__\":{";
    for (int k = 0; k < n; k++)
        j += (k ? ",\"key" : "\"key") + std::to_string(k) + "\":\"value " + std::to_string(k) + "\"";
    j += "},\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    std::string f(8, '\0');
    for (int b = 0; b < 8; b++) f[b] = (char)((uint64_t)j.size() >> (8 * b));
    f += j;
    f.append(4, '\0');
    write_bytes(path, f.data(), f.size());
}

TEST(io, safetensors_many_metadata_entries)
{
    int h;
    for (int n : {80, QT_ST_MAX_META}) {
        write_st_meta(path_in("meta.safetensors"), n);
        if (qt_st_open(g_path, &h) != QT_OK) FAIL(qt_last_error());
        char key[32], want[32];
        for (int k = 0; k < n; k += n / 8) {
            snprintf(key, sizeof key, "key%d", k);
            snprintf(want, sizeof want, "value %d", k);
            STRCMP_EQUAL(want, qt_st_meta(h, key));
        }
        snprintf(key, sizeof key, "key%d", n - 1);
        snprintf(want, sizeof want, "value %d", n - 1);
        STRCMP_EQUAL(want, qt_st_meta(h, key));
        qt_st_close(h);
    }
    CHECK(QT_ST_MAX_META >= 1024);
    write_st_meta(path_in("meta.safetensors"), QT_ST_MAX_META + 1);
    LONGS_EQUAL(QT_E_FORMAT, qt_st_open(g_path, &h));
    char msg[96];
    snprintf(msg, sizeof msg, "more than %d __metadata__ entries (QT_ST_MAX_META)", QT_ST_MAX_META);
    if (!has(msg) || !has(g_path)) FAIL(qt_last_error());
}

TEST(io, bad_safetensors_headers)
{
    struct { const char *json; size_t data; int64_t hlen; const char *msg; } cases[] = {
        { "{}", 0, 100, "not a safetensors file, or a truncated one: its first 8 bytes give a "
                        "header length of 100 bytes, but the file has 10" },
        { "{}", 0, 0, "header length 0; expected at least 2" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, -1, "bad safetensors header JSON" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}", 4, -1, "past the end" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, -1, "need 8" },
        { "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1, "unknown dtype" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
          "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1, "overlaps" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1, "hole" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1, "appears twice" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12, -1, "trailing bytes" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, -1, "missing data_offsets" },
    };
    int h;
    for (auto &c : cases) {
        write_st_raw(path_in("bad.safetensors"), c.json, c.data, c.hlen);
        LONGS_EQUAL(QT_E_FORMAT, qt_st_open(g_path, &h));
        if (!has(c.msg) || !has(g_path))
            FAIL(qt_last_error());
    }
    // one element short and one element long, in every float dtype and a few integer ones:
    // a [2,3] tensor whose data_offsets span 5 or 7 elements (the file holds that many bytes,
    // so only the size rule can refuse it); the exact 6 elements open (the control)
    struct { const char *dtype; int size; } dts[] = {
        {"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F64", 8}, {"I32", 4}, {"U8", 1}, {"I64", 8},
    };
    for (auto &d : dts) {
        for (int elems = 5; elems <= 7; elems++) {
            char json[256], want[160];
            const int bytes = elems * d.size;
            snprintf(json, sizeof json,
                     "{\"w\":{\"dtype\":\"%s\",\"shape\":[2,3],\"data_offsets\":[0,%d]}}",
                     d.dtype, bytes);
            write_st_raw(path_in("len.safetensors"), json, (size_t)bytes);
            const int rc = qt_st_open(g_path, &h);
            if (elems == 6) {
                if (rc != QT_OK) FAIL(qt_last_error());
                qt_st_close(h);
                continue;
            }
            LONGS_EQUAL(QT_E_FORMAT, rc);
            snprintf(want, sizeof want,
                     "%s: tensor w: data_offsets span %d bytes, shape and dtype %s need %d",
                     g_path, bytes, d.dtype, 6 * d.size);
            if (!has(want)) {
                fprintf(stderr, "%s, %d elements: want \"%s\"\n", d.dtype, elems, want);
                FAIL(qt_last_error());
            }
        }
    }
    write_bytes(g_path, "\x05\0\0", 3);   // shorter than the length field
    LONGS_EQUAL(QT_E_FORMAT, qt_st_open(g_path, &h));
    CHECK(has("truncated header"));
    // truncating a valid checkpoint by one byte is detected
    make_plan(0);
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, path_in("t.safetensors", g_path2), 0, 0, 0));
    struct stat st;
    CHECK(stat(g_path2, &st) == 0);
    CHECK(truncate(g_path2, st.st_size - 1) == 0);
    LONGS_EQUAL(QT_E_FORMAT, qt_checkpoint_load(&g_tiny.plan, g_path2, 0, NULL, NULL));
    CHECK(has("past the end") && has("truncated"));
}

TEST(io, checkpoint_mismatches_change_nothing)
{
    make_plan(1);
    fill_region(0);
    const char *good = path_in("good.safetensors");
    LONGS_EQUAL(QT_OK, qt_checkpoint_save(&g_tiny.plan, good, 0, 0, 0));
    struct { mut m; const char *target; int code; const char *msg; } cases[] = {
        { M_DROP, "model.language_model.layers.0.linear_attn.in_proj_z.weight", QT_E_MISMATCH,
          "missing tensor model.language_model.layers.0.linear_attn.in_proj_z.weight" },
        { M_EXTRA, "", QT_E_MISMATCH, "unexpected tensor model.bogus.weight" },
        { M_RESHAPE, "model.language_model.layers.0.mlp.gate.weight", QT_E_MISMATCH,
          "wrong shape: expected [3,4], file has [4,3]" },
        { M_DTYPE_I32, "lm_head.weight", QT_E_MISMATCH, "unsupported dtype I32" },
    };
    for (auto &c : cases) {
        rewrite(good, path_in("bad.safetensors", g_path2), c.m, c.target);
        memset(g_arena, 0, sizeof g_arena);
        LONGS_EQUAL(c.code, qt_checkpoint_load(&g_tiny.plan, g_path2, 0, NULL, NULL));
        if (!has(c.msg) || !has(g_path2))
            FAIL(qt_last_error());
        for (int64_t k = 0; k < g_tiny.region_elems; k++)
            CHECK(region(0)[k] == 0.0f);   // all-or-nothing
    }
    // mtp.* is skipped, not an error
    rewrite(good, g_path2, M_MTP);
    LONGS_EQUAL(QT_OK, qt_checkpoint_load(&g_tiny.plan, g_path2, 0, NULL, NULL));
    // a Next file is not a Qwen3.5 file
    make_plan(0);
    LONGS_EQUAL(QT_E_MISMATCH, qt_checkpoint_load(&g_tiny.plan, good, 0, NULL, NULL));
    CHECK(has("missing tensor model.embed_tokens.weight"));
}

// ---------------------------------------------------------------- token data

// A version-1 .npy whose header is the text hdr (padded with spaces and '\n' as NumPy does).
static void write_npy_hdr(const char *path, const char *hdr, const void *payload, size_t bytes)
{
    static unsigned char buf[1 << 16];
    int hl = (int)strlen(hdr);
    int total = 10 + hl + 1;
    int pad = (64 - total % 64) % 64;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)((hl + pad + 1) & 0xff);
    buf[9] = (unsigned char)((hl + pad + 1) >> 8);
    memcpy(buf + 10, hdr, (size_t)hl);
    memset(buf + 10 + hl, ' ', (size_t)pad);
    buf[10 + hl + pad] = '\n';
    memcpy(buf + 10 + hl + pad + 1, payload, bytes);
    write_bytes(path, buf, (size_t)(10 + hl + pad + 1) + bytes);
}

static void write_npy(const char *path, const char *descr, const void *payload, size_t n_elems,
                      size_t width, const char *shape = NULL)
{
    static unsigned char buf[1 << 16];
    char hdr[256], sh[64];
    if (shape) snprintf(sh, sizeof sh, "%s", shape);
    else snprintf(sh, sizeof sh, "(%zu,)", n_elems);
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr, sh);
    int total = 10 + hl + 1;
    int pad = (64 - total % 64) % 64;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)((hl + pad + 1) & 0xff);
    buf[9] = (unsigned char)((hl + pad + 1) >> 8);
    memcpy(buf + 10, hdr, (size_t)hl);
    memset(buf + 10 + hl, ' ', (size_t)pad);
    buf[10 + hl + pad] = '\n';
    memcpy(buf + 10 + hl + pad + 1, payload, n_elems * width);
    write_bytes(path, buf, (size_t)(10 + hl + pad + 1) + n_elems * width);
}

TEST(io, data_rule_npy_qttokens_raw)
{
    const int N = 50, S = 4, VOC = 1000;
    uint16_t tok[N];
    uint32_t tok32[N];
    for (int i = 0; i < N; i++) { tok[i] = (uint16_t)(i * 7 % VOC); tok32[i] = tok[i]; }
    static unsigned char q[24 + 4 * N];
    memcpy(q, "QTTOKENS", 8);
    uint32_t ver = 1, w = 4;
    uint64_t cnt = N;
    memcpy(q + 8, &ver, 4); memcpy(q + 12, &w, 4); memcpy(q + 16, &cnt, 8);
    memcpy(q + 24, tok32, 4 * N);
    write_npy(path_in("t.npy"), "<u2", tok, N, 2);
    write_bytes(path_in("t.qtt", g_path2), q, sizeof q);
    static char raw[256];
    snprintf(raw, sizeof raw, "%s/t.raw", g_dir);
    write_bytes(raw, tok, sizeof tok);
    struct { const char *p; const char *dt; int bpt; } files[] = {
        { g_path, NULL, 2 }, { g_path2, NULL, 4 }, { raw, "uint16", 2 } };
    for (auto &fl : files) {
        qt_data d;
        LONGS_EQUAL(QT_OK, qt_data_open(&d, fl.p, fl.dt, VOC, S));
        LONGS_EQUAL(N, d.n_tokens);
        LONGS_EQUAL(fl.bpt, d.bytes_per_token);
        LONGS_EQUAL((N - 1) / S, d.n_windows);
        int32_t in[2 * S], tg[2 * S];
        const int64_t step = 3, B = 5, first = 2;
        qt_data_fill(&d, step, B, first, 2, S, in, tg);
        for (int j = 0; j < 2; j++) {
            int64_t win = (step * B + first + j) % ((N - 1) / S);   // SPEC.md section 2
            for (int t = 0; t < S; t++) {
                LONGS_EQUAL(tok[win * S + t], in[j * S + t]);
                LONGS_EQUAL(tok[win * S + t + 1], tg[j * S + t]);
            }
        }
        qt_data_close(&d);
    }
}

// QTTOKENS version 2 (docs/formats.md): a 32-byte header whose bytes 24..27 record the
// end-of-document id (0xFFFFFFFF: none) and 28..31 are reserved 0; version 1 files still
// load and record nothing, as .npy and raw files
static void write_qtt(const char *path, uint32_t ver, uint32_t width, uint32_t eos, uint32_t rsv,
                      const uint32_t *ids, int n, size_t cut = 0)
{
    static unsigned char b[32 + 4 * 64];
    const size_t h = ver == 2 ? 32 : 24;
    uint64_t cnt = (uint64_t)n;
    memcpy(b, "QTTOKENS", 8);
    memcpy(b + 8, &ver, 4); memcpy(b + 12, &width, 4); memcpy(b + 16, &cnt, 8);
    if (ver == 2) { memcpy(b + 24, &eos, 4); memcpy(b + 28, &rsv, 4); }
    for (int i = 0; i < n; i++) {
        if (width == 4) memcpy(b + h + 4 * i, &ids[i], 4);
        else { uint16_t v = (uint16_t)ids[i]; memcpy(b + h + 2 * i, &v, 2); }
    }
    write_bytes(path, b, cut ? cut : h + width * (size_t)n);
}

TEST(io, qttokens_v2_records_the_separator)
{
    path_in("q.tok");
    uint32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (uint32_t)(i % 9 == 8 ? 7 : i % 5);
    qt_data d;
    struct { uint32_t ver, width, eos; int64_t want; } ok[] = {
        { 2, 4, 7, 7 }, { 2, 2, 7, 7 }, { 2, 4, 0xFFFFFFFFu, QT_DATA_SEP_NONE },
        { 2, 4, 99, 99 }, { 1, 4, 0, QT_DATA_SEP_UNKNOWN } };
    for (auto &c : ok) {
        write_qtt(g_path, c.ver, c.width, c.eos, 0, ids, 40);
        LONGS_EQUAL_TEXT(QT_OK, qt_data_open(&d, g_path, NULL, 100, 4), qt_last_error());
        LONGS_EQUAL(40, d.n_tokens);
        LONGS_EQUAL(c.want, d.doc_sep);
        int32_t in[4], tg[4];
        qt_data_fill(&d, 0, 1, 1, 1, 4, in, tg);   // the payload starts after the header
        LONGS_EQUAL((int32_t)ids[4], in[0]);
        LONGS_EQUAL((int32_t)ids[8], tg[3]);
        qt_data_close(&d);
    }
    uint16_t t16[40];
    for (int i = 0; i < 40; i++) t16[i] = (uint16_t)ids[i];
    write_npy(g_path, "<u2", t16, 40, 2);
    LONGS_EQUAL(QT_OK, qt_data_open(&d, g_path, NULL, 100, 4));
    LONGS_EQUAL(QT_DATA_SEP_UNKNOWN, d.doc_sep);
    qt_data_close(&d);
    LONGS_EQUAL(QT_OK, qt_data_open(&d, NULL, NULL, 256, 16));
    LONGS_EQUAL(QT_DATA_SEP_NONE, d.doc_sep);   // the embedded corpus: plain text, no separator
    qt_data_close(&d);
    // bad version 2 headers: reserved word set, header cut short, a 2-byte file's id > 65535
    write_qtt(g_path, 2, 4, 7, 1, ids, 40);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("reserved bytes 28..31 hold 1 (expected 0)"));
    write_qtt(g_path, 2, 4, 7, 0, ids, 40, 28);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("file has 28 bytes, the version 2 header needs 32"));
    write_qtt(g_path, 2, 2, 70000, 0, ids, 40);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("end-of-document id 70000 does not fit its 2-byte tokens"));
    write_qtt(g_path, 2, 4, 7, 0, ids, 40, 32 + 4 * 39);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("payload has 156 bytes but the header declares 40 tokens"));
}

// qt_data_doc_sep: the plan's eos_id wins and must agree with a recorded id; without one
// the file's id, or none, or a refusal naming the file when it records nothing
TEST(io, doc_sep_precedence_and_refusals)
{
    path_in("q.tok");
    uint32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (uint32_t)(i % 6);
    qt_data d;
    int32_t eos = 123;
    char from[512];
    // recorded 7
    write_qtt(g_path, 2, 4, 7, 0, ids, 40);
    LONGS_EQUAL(QT_OK, qt_data_open(&d, g_path, NULL, 100, 4));
    LONGS_EQUAL(QT_OK, qt_data_doc_sep(&d, "data", -1, &eos, from, sizeof from));
    LONGS_EQUAL(7, eos);
    STRCMP_CONTAINS("the QTTOKENS header of data=", from);
    LONGS_EQUAL(QT_OK, qt_data_doc_sep(&d, "data", 7, &eos, from, sizeof from));
    LONGS_EQUAL(7, eos);
    STRCMP_EQUAL("the plan's eos_id", from);
    LONGS_EQUAL(QT_E_ARG, qt_data_doc_sep(&d, "data", 9, &eos, from, sizeof from));
    CHECK(has("records end-of-document id 7 (its QTTOKENS header: the eos= it was encoded "
              "with) but the plan's eos_id is 9 (packing: true); expected the same id"));
    CHECK(has("data=/"));
    LONGS_EQUAL(QT_OK, qt_data_doc_sep_agrees(&d, "eval_data", 7, "x"));
    LONGS_EQUAL(QT_E_ARG, qt_data_doc_sep_agrees(&d, "eval_data", 5, "the plan's eos_id"));
    CHECK(has("eval_data=/"));
    CHECK(has("records end-of-document id 7 (its QTTOKENS header) but the run's separator is 5 "
              "(the plan's eos_id)"));
    LONGS_EQUAL(QT_E_ARG, qt_data_doc_sep_agrees(&d, "eval_data", -1, "y"));
    CHECK(has("the training data has no separator (y)"));
    qt_data_close(&d);
    // recorded 150, outside a vocabulary of 100 (the file's tokens are all < 100)
    write_qtt(g_path, 2, 4, 150, 0, ids, 40);
    LONGS_EQUAL(QT_OK, qt_data_open(&d, g_path, NULL, 100, 4));
    LONGS_EQUAL(QT_E_ARG, qt_data_doc_sep(&d, "data", -1, &eos, from, sizeof from));
    CHECK(has("records end-of-document id 150 (its QTTOKENS header), outside the plan's "
              "vocabulary [0, 100) (vocab_size)"));
    qt_data_close(&d);
    // recorded none: no separator without eos_id; the plan's eos_id applies with one
    write_qtt(g_path, 2, 4, 0xFFFFFFFFu, 0, ids, 40);
    LONGS_EQUAL(QT_OK, qt_data_open(&d, g_path, NULL, 100, 4));
    LONGS_EQUAL(QT_OK, qt_data_doc_sep(&d, "data", -1, &eos, from, sizeof from));
    LONGS_EQUAL(-1, eos);
    STRCMP_CONTAINS("none (encoded with eos=none), so each window is one document", from);
    LONGS_EQUAL(QT_OK, qt_data_doc_sep(&d, "data", 3, &eos, from, sizeof from));
    LONGS_EQUAL(3, eos);
    LONGS_EQUAL(QT_OK, qt_data_doc_sep_agrees(&d, "eval_data", 3, "x"));
    qt_data_close(&d);
    // version 1 records nothing: refused without eos_id, naming the file and the key
    write_qtt(g_path, 1, 4, 0, 0, ids, 40);
    LONGS_EQUAL(QT_OK, qt_data_open(&d, g_path, NULL, 100, 4));
    LONGS_EQUAL(QT_E_ARG, qt_data_doc_sep(&d, "data", -1, &eos, from, sizeof from));
    CHECK(has(": packing: true needs the document separator's token id, and neither the plan "
              "(eos_id unset, -1) nor the file (.npy, raw and QTTOKENS version 1 files record "
              "none) gives it"));
    CHECK(has("encode the text with qtrain-data, whose QTTOKENS version 2 header records it, "
              "or set packing: false"));
    LONGS_EQUAL(QT_OK, qt_data_doc_sep(&d, "data", 4, &eos, from, sizeof from));
    LONGS_EQUAL(4, eos);
    qt_data_close(&d);
    // the embedded corpus
    LONGS_EQUAL(QT_OK, qt_data_open(&d, NULL, NULL, 256, 16));
    LONGS_EQUAL(QT_OK, qt_data_doc_sep(&d, "data", -1, &eos, from, sizeof from));
    LONGS_EQUAL(-1, eos);
    STRCMP_CONTAINS("the embedded corpus: none", from);
    qt_data_close(&d);
}

TEST(io, embedded_corpus)
{
    qt_data d;
    LONGS_EQUAL(QT_OK, qt_data_open(&d, NULL, NULL, 256, 128));
    CHECK(d.n_tokens >= 60000 && d.n_tokens <= 200000);
    LONGS_EQUAL(1, d.bytes_per_token);
    LONGS_EQUAL((d.n_tokens - 1) / 128, d.n_windows);
    CHECK(memcmp(d.base, "                    GNU GENERAL PUBLIC LICENSE", 46) == 0);
    int32_t in[128], tg[128];
    qt_data_fill(&d, 0, 1, 1, 1, 128, in, tg);
    LONGS_EQUAL(((const unsigned char *)d.base)[128], in[0]);
    LONGS_EQUAL(((const unsigned char *)d.base)[129], tg[0]);
    qt_data_close(&d);
    LONGS_EQUAL(QT_E_ARG, qt_data_open(&d, NULL, NULL, 80, 16));
    CHECK(has("vocab_size >= 256"));
}

TEST(io, bad_token_files)
{
    uint16_t tok[20];
    for (int i = 0; i < 20; i++) tok[i] = (uint16_t)i;
    float ftok[20] = { 0 };
    int16_t neg[20] = { 0 };
    neg[7] = -3;
    qt_data d;
    // float dtype
    write_npy(path_in("f.npy"), "<f4", ftok, 20, 4);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("not an integer") && has(g_path));
    // big-endian integers are not accepted
    write_npy(g_path, ">u2", tok, 20, 2);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("unsupported .npy dtype '>u2'"));
    // id out of range: first offending id and its position
    write_npy(g_path, "<u2", tok, 20, 2);
    LONGS_EQUAL(QT_E_RANGE, qt_data_open(&d, g_path, NULL, 9, 4));
    CHECK(has("token id 9 at position 9"));
    write_npy(g_path, "<i2", neg, 20, 2);
    LONGS_EQUAL(QT_E_RANGE, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("token id -3 at position 7"));
    // too short: 20 tokens, seq_len 20 needs 21
    write_npy(g_path, "<u2", tok, 20, 2);
    LONGS_EQUAL(QT_E_RANGE, qt_data_open(&d, g_path, NULL, 100, 20));
    CHECK(has("need at least seq_len+1 = 21"));
    // payload size does not match the shape
    write_npy(g_path, "<u2", tok, 20, 2, "(21,)");
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("payload has 40 bytes"));
    // bad QTTOKENS headers
    unsigned char q[24 + 40];
    memcpy(q, "QTTOKENS", 8);
    uint32_t ver = 2, w = 2;
    uint64_t cnt = 20;
    memcpy(q + 8, &ver, 4); memcpy(q + 12, &w, 4); memcpy(q + 16, &cnt, 8);
    memcpy(q + 24, tok, 40);
    write_bytes(g_path, q, sizeof q);
    ver = 3;
    memcpy(q + 8, &ver, 4);
    write_bytes(g_path, q, sizeof q);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("bad QTTOKENS header: version 3 (expected 1 or 2)"));
    ver = 1; w = 3;
    memcpy(q + 8, &ver, 4); memcpy(q + 12, &w, 4);
    write_bytes(g_path, q, sizeof q);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("3 bytes per token"));
    write_bytes(g_path, q, 20);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("bad QTTOKENS header"));
    // unknown format, raw with odd size, unknown raw dtype
    write_bytes(g_path, "hello world", 11);
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("unknown token file format"));
    LONGS_EQUAL(QT_E_FORMAT, qt_data_open(&d, g_path, "uint16", 200, 4));
    CHECK(has("not a multiple of 2"));
    LONGS_EQUAL(QT_E_ARG, qt_data_open(&d, g_path, "int7", 200, 4));
    LONGS_EQUAL(QT_E_IO, qt_data_open(&d, path_in("nope.npy"), NULL, 100, 4));
    // an unsigned id prints unsigned (uint64 max, not -1)
    uint64_t big[20] = { 0 };
    big[5] = UINT64_MAX;
    write_npy(g_path, "<u8", big, 20, 8);
    LONGS_EQUAL(QT_E_RANGE, qt_data_open(&d, g_path, NULL, 100, 4));
    CHECK(has("token id 18446744073709551615 at position 5"));
    // a directory says so
    LONGS_EQUAL(QT_E_ARG, qt_data_open(&d, g_dir, NULL, 100, 4));
    CHECK(has("is a directory"));
    // The header dict is parsed strictly: exactly 'descr', 'fortran_order' (True or False;
    // True refused) and 'shape', each once, balanced braces, nothing after the '}'. Each
    // message names the file and what was expected. (The first two were accepted before.)
    static const struct { const char *hdr, *msg; } hdrs[] = {
        { "{'descr': '<u2', 'fortran_order': False, 'shape': (20,), ",
          "expected a key ('descr', 'fortran_order' or 'shape') or the closing '}', but the "
          "header ends: the dict is not closed" },
        { "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (20,), }",
          "'fortran_order' is Maybe; expected True or False" },
        { "{'descr': '<u2', 'fortran_order': Falsey, 'shape': (20,), }",
          "'fortran_order' is Falsey; expected True or False" },
        { "{'descr': '<u2', 'fortran_order': True, 'shape': (20,), }",
          "Fortran order (fortran_order: True); save it C-ordered" },
        { "{'descr': '<u2', 'fortran_order': False, 'shape': (20,), 'extra': 1, }",
          "unexpected key 'extra'; expected exactly 'descr', 'fortran_order' and 'shape'" },
        { "{'descr': '<u2', 'descr': '<u2', 'fortran_order': False, 'shape': (20,), }",
          "key 'descr' appears twice" },
        { "{'descr': '<u2', 'shape': (20,), }", "no 'fortran_order' key" },
        { "{'descr': '<u2', 'fortran_order': False, }", "no 'shape' key" },
        { "'descr': '<u2', 'fortran_order': False, 'shape': (20,), }",
          "expected '{' (a Python dict) at byte 0, found '''" },
        { "{'descr': '<u2', 'fortran_order': False, 'shape': (20,), }}",
          "unexpected '}' at byte 58, after the dict's closing '}'" },
        { "{'descr': '<u2', 'fortran_order': False, 'shape': (20, }",
          "'shape': expected an integer or ')' at byte 55" },
        { "{'descr': '<u2', 'fortran_order': False, 'shape': 20, }",
          "'shape': expected a tuple such as (20,)" },
        { "{'descr': '<u2', 'fortran_order': False, 'shape': (20), }",
          "'shape' (20) is not a tuple; a one-element tuple needs a comma: (20,)" },
        { "{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (20,), }",
          "'descr': expected a quoted dtype string" },
        { "{'descr' '<u2', 'fortran_order': False, 'shape': (20,), }",
          "expected ':' after 'descr' at byte 9" },
        { "{'descr': '<u2' 'fortran_order': False, 'shape': (20,), }",
          "expected ',' or '}' after the value of 'descr' at byte 16" },
        { "{'descr': '<u2', 'fortran_order': False, 'shape': (20,), ,}",
          "expected a key ('descr', 'fortran_order' or 'shape') or the closing '}' at byte 57" },
    };
    for (auto &c : hdrs) {
        write_npy_hdr(g_path, c.hdr, tok, 40);
        int rc = qt_data_open(&d, g_path, NULL, 100, 4);
        if (rc != QT_E_FORMAT || !has(c.msg) || !has(g_path))
            fprintf(stderr, "header %s: rc %d, '%s', want '%s'\n", c.hdr, rc, qt_last_error(),
                    c.msg);
        LONGS_EQUAL(QT_E_FORMAT, rc);
        CHECK(has(c.msg) && has(g_path));
    }
    // what NumPy may write is accepted: keys in any order, no trailing comma, double
    // quotes, a 2-D C-ordered shape, and a 1-D shape written with spaces
    static const char *const ok[] = {
        "{'shape': (20,), 'fortran_order': False, 'descr': '<u2'}",
        "{\"descr\": \"<u2\", \"fortran_order\": False, \"shape\": (20,)}",
        "{'descr': '<u2', 'fortran_order': False, 'shape': (4, 5), }",
        "{'descr': '<u2', 'fortran_order': False, 'shape': ( 20 , ), }",
    };
    for (const char *h : ok) {
        write_npy_hdr(g_path, h, tok, 40);
        int rc = qt_data_open(&d, g_path, NULL, 100, 4);
        if (rc != QT_OK) fprintf(stderr, "header %s: %s\n", h, qt_last_error());
        LONGS_EQUAL(QT_OK, rc);
        LONGS_EQUAL(20, d.n_tokens);
        qt_data_close(&d);
    }
}

// A token file that changes after it was opened and validated: rewritten in place (new
// mtime; an id now out of range is caught by the fill too, and never handed out),
// truncated (size), replaced at its path (inode), and truncated under the mapping (SIGBUS,
// in a child process: the handler names the file and exits 1).
TEST(io, data_file_changed_after_open)
{
    static uint16_t tok[16000];
    for (int i = 0; i < 16000; i++) tok[i] = (uint16_t)(i % 50);
    const int S = 8;
    int32_t in[S], tg[S];
    qt_data d;
    const char *f = path_in("c.npy");

    write_npy(f, "<u2", tok, 16000, 2);
    LONGS_EQUAL(QT_OK, qt_data_open(&d, f, NULL, 50, S));
    LONGS_EQUAL(QT_OK, qt_data_check(&d));
    LONGS_EQUAL(QT_OK, qt_data_fill(&d, 0, 1, 0, 1, S, in, tg));
    // rewrite in place: token 3 becomes 999 (out of range); the mtime moves on
    usleep(20000);
    FILE *w = fopen(f, "r+b");
    CHECK(w != NULL);
    const size_t payload = (size_t)(read_bytes(f, g_big, sizeof g_big) - 2 * 16000);
    uint16_t bad = 999;
    fseek(w, (long)(payload + 2 * 3), SEEK_SET);
    fwrite(&bad, 2, 1, w);
    fclose(w);
    LONGS_EQUAL(QT_E_IO, qt_data_check(&d));
    CHECK(has("data file") && has(f) && has("changed during the run") && has("modification time"));
    in[3] = -1;
    LONGS_EQUAL(QT_E_RANGE, qt_data_fill(&d, 0, 1, 0, 1, S, in, tg));
    CHECK(has("token id 999 at position 3"));
    LONGS_EQUAL(0, in[3]);   // never handed out
    qt_data_close(&d);

    // truncated: the size differs
    write_npy(f, "<u2", tok, 16000, 2);
    LONGS_EQUAL(QT_OK, qt_data_open(&d, f, NULL, 50, S));
    CHECK(truncate(f, 4096) == 0);
    LONGS_EQUAL(QT_E_IO, qt_data_check(&d));
    CHECK(has("its size went from") && has("to 4096 bytes"));
    // under the mapping: reading past the new end is a SIGBUS, which names the file
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t child = fork();
    if (child == 0) {
        dup2(pipefd[1], 2);
        qt_data_fill(&d, 1000, 1, 0, 1, S, in, tg);   // window 1000: byte ~16 KiB
        _exit(0);
    }
    close(pipefd[1]);
    char msg[1024] = "";
    ssize_t got = read(pipefd[0], msg, sizeof msg - 1);
    close(pipefd[0]);
    msg[got > 0 ? got : 0] = 0;
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1 || !strstr(msg, f) || !strstr(msg, "SIGBUS"))
        FAIL(msg);
    qt_data_close(&d);

    // replaced at its path: another inode
    write_npy(f, "<u2", tok, 16000, 2);
    LONGS_EQUAL(QT_OK, qt_data_open(&d, f, NULL, 50, S));
    write_npy(path_in("c2.npy", g_path2), "<u2", tok, 16000, 2);
    CHECK(rename(g_path2, f) == 0);
    LONGS_EQUAL(QT_E_IO, qt_data_check(&d));
    CHECK(has("another file was put at its path"));
    qt_data_close(&d);
}

// ---------------------------------------------------------------- metrics

TEST(io, metrics_line_format)
{
    qt_step_metrics m;
    memset(&m, 0, sizeof m);
    m.step = 3;
    m.loss_f32 = 5.25f;
    m.loss = m.loss_f32;
    m.grad_norm = 0.1;
    m.lr = 3e-3;
    m.tokens_per_s = 1234.5;
    m.step_seconds = 0.25;
    m.tokens = 1024;
    m.fingerprint = 0x0123456789abcdefull;
    char buf[512] = { 0 };
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    qt_metrics_write(f, &m);
    m.grad_norm = 1.0 / 0.0 * 0.0;   // NaN -> null
    qt_metrics_write(f, &m);
    fclose(f);
    STRCMP_EQUAL("{\"step\":3,\"loss\":5.25,\"loss_bits\":\"0x40a80000\",\"grad_norm\":0.10000000000000001,"
                 "\"lr\":0.0030000000000000001,\"tokens_per_s\":1234.5,\"step_s\":0.25,\"tokens\":1024,"
                 "\"fingerprint\":\"0x0123456789abcdef\"}\n"
                 "{\"step\":3,\"loss\":5.25,\"loss_bits\":\"0x40a80000\",\"grad_norm\":null,"
                 "\"lr\":0.0030000000000000001,\"tokens_per_s\":1234.5,\"step_s\":0.25,\"tokens\":1024,"
                 "\"fingerprint\":\"0x0123456789abcdef\"}\n", buf);
    char line[256] = { 0 };
    f = fmemopen(line, sizeof line - 1, "w");
    m.grad_norm = 0.5;
    qt_progress_print(f, &m, 10, 1);
    fclose(f);
    CHECK(strstr(line, "step 4/10") && strstr(line, "loss 5.250000") && strstr(line, "tokens/s"));
}

// truncate_metrics=1 (crash recovery): the file is cut before the first line of step >= S or
// manifest of start_step >= S, whatever the line lengths (manifests longer than the scan
// chunk), and keeps whole lines; a file that does not reach S is left alone.
TEST(io, metrics_truncate_cuts_at_the_resume_step)
{
    const char *f = path_in("m.jsonl");
    static char big[9000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    FILE *w = fopen(f, "w");
    CHECK(w != NULL);
    fprintf(w, "{\"manifest\":\"qtrain-1\",\"start_step\":0,\"pad\":\"%s\"}\n", big);
    for (int s = 0; s < 4; s++) fprintf(w, "{\"step\":%d,\"loss\":1}\n", s);
    fprintf(w, "{\"manifest\":\"qtrain-1\",\"start_step\":4,\"pad\":\"%s\"}\n", big);
    for (int s = 4; s < 7; s++) fprintf(w, "{\"step\":%d,\"loss\":1}\n", s);
    fclose(w);
    struct stat st;
    CHECK(stat(f, &st) == 0);
    const off_t full = st.st_size;
    int64_t lines = -1, first = -1, last = -1, end = -1;
    // nothing at or past step 9: unchanged
    LONGS_EQUAL(QT_OK, qt_metrics_truncate(f, 9, &lines, &first, &last));
    LONGS_EQUAL(0, lines);
    CHECK(stat(f, &st) == 0 && st.st_size == full);
    // resume at 5: steps 5, 6 go
    LONGS_EQUAL(QT_OK, qt_metrics_truncate(f, 5, &lines, &first, &last));
    LONGS_EQUAL(2, lines);
    LONGS_EQUAL(5, first);
    LONGS_EQUAL(6, last);
    LONGS_EQUAL(QT_OK, qt_metrics_last_step(f, &end));
    LONGS_EQUAL(4, end);
    // resume at 3: step 3, the second run's manifest and step 4 go
    LONGS_EQUAL(QT_OK, qt_metrics_truncate(f, 3, &lines, &first, &last));
    LONGS_EQUAL(3, lines);
    LONGS_EQUAL(3, first);
    LONGS_EQUAL(4, last);
    LONGS_EQUAL(QT_OK, qt_metrics_last_step(f, &end));
    LONGS_EQUAL(2, end);
    // a missing file is nothing to cut
    LONGS_EQUAL(QT_OK, qt_metrics_truncate(path_in("none.jsonl"), 1, &lines, &first, &last));
    LONGS_EQUAL(0, lines);
}

// One job per save= target: a second lock of the same path from another process is
// refused naming this process; after release the file is gone and the lock is free again.
TEST(io, checkpoint_lock_one_owner)
{
    const char *ck = path_in("ck");
    LONGS_EQUAL(QT_OK, qt_checkpoint_lock("save", ck, 0));
    char lock[512];
    snprintf(lock, sizeof lock, "%s.lock", ck);
    CHECK(access(lock, F_OK) == 0);
    pid_t child = fork();
    if (child == 0) {   // another process: refused while we hold it
        qt_set_quiet(1);
        int rc = qt_checkpoint_lock("save", ck, 0);
        _exit(rc == QT_E_ARG && strstr(qt_last_error(), "is in use by another job") ? 0 : 1);
    }
    int status = -1;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    qt_checkpoint_unlock();
    CHECK(access(lock, F_OK) != 0);
    LONGS_EQUAL(QT_OK, qt_checkpoint_lock("save", ck, 0));
    qt_checkpoint_unlock();
}

// ---------------------------------------------------------------- config.json (hf_config.c)

// The plan's floats are written with the fewest digits that read back as them (1e-06, not
// 9.9999999747524271e-07), integral reals as N.0; a buffer too small is refused; a
// config.json already in the directory is never replaced.
TEST(io, hf_config_json_values_and_existing_file_kept)
{
    static char json[1 << 16];
    make_plan(1);
    qt_plan &P = g_tiny.plan;
    P.model.n_layers = 8;
    P.model.cycle = 4;
    P.model.head_dim = 256;
    P.model.rotary_dim = 64;
    P.model.norm_eps = 1e-6f;
    P.model.rope_theta = 1e7f;
    P.train.lb_weight = 0.001f;
    P.train.seq_len = 4096;
    long n = qt_hf_config_json(&P, json, sizeof json);
    CHECK(n > 0 && n == (long)strlen(json));
    CHECK(strstr(json, "\"model_type\": \"qwen3_5_moe\""));
    CHECK(strstr(json, "\"rms_norm_eps\": 1e-06,"));
    CHECK(strstr(json, "\"rope_theta\": 10000000.0,"));
    CHECK(strstr(json, "\"partial_rotary_factor\": 0.25,"));
    CHECK(strstr(json, "\"mrope_section\": [11, 11, 10]"));
    CHECK(strstr(json, "\"router_aux_loss_coef\": 0.001,"));
    CHECK(strstr(json, "\"output_router_logits\": true"));
    CHECK(strstr(json, "\"max_position_embeddings\": 4096"));
    CHECK(strstr(json, "\"linear_attention\", \"full_attention\", \"linear_attention\""));
    LONGS_EQUAL(-1, qt_hf_config_json(&P, json, 100));
    make_plan(0);
    CHECK(qt_hf_config_json(&g_tiny.plan, json, sizeof json) > 0);
    CHECK(strstr(json, "\"architectures\": [\"Qwen3NextForCausalLM\"]"));
    CHECK(strstr(json, "\"norm_topk_prob\": true"));
    const char *cfg = path_in("config.json");
    FILE *f = fopen(cfg, "w");
    fputs("{\"user\": 1}\n", f);
    fclose(f);
    LONGS_EQUAL(QT_OK, qt_hf_files_write(&g_tiny.plan, g_dir));
    f = fopen(cfg, "r");
    char back[64] = {0};
    CHECK(fgets(back, sizeof back, f) != NULL);
    fclose(f);
    STRCMP_EQUAL("{\"user\": 1}\n", back);
    CHECK(!exists_prefix("config.json.qtrain-tmp"));
    remove(cfg);
    LONGS_EQUAL(QT_OK, qt_hf_files_write(&g_tiny.plan, g_dir));
    CHECK(access(cfg, F_OK) == 0);
    remove(cfg);
}

// qt_hf_config_check (hf_check.c): a config.json beside the weights must agree with the
// plan on the keys of the math and shapes. Numbers compare as numbers (1e-6 == 1e-06), a
// key transformers defaults is compared with its default when absent, keys that do not
// change the math are ignored; a disagreement names the key and both values; save= with
// overwrite notes it and marks config.json for replacement by the next save.
TEST(io, hf_config_check_compares_the_keys_of_the_math)
{
    static char json[1 << 16], edit[1 << 16];
    make_plan(0);
    g_tiny.plan.model.norm_eps = 1e-6f;   // transformers' default, so it may be left out
    const qt_plan *P = &g_tiny.plan;
    const char *cfg = path_in("config.json");
    long n = qt_hf_config_json(P, json, sizeof json);
    CHECK(n > 0);
    LONGS_EQUAL(QT_OK, qt_hf_config_check(P, "load", g_dir, 0));   // none: nothing to check
    write_bytes(cfg, json, (size_t)n);
    LONGS_EQUAL(QT_OK, qt_hf_config_check(P, "load", g_dir, 0));
    LONGS_EQUAL(QT_OK, qt_hf_config_check(P, "save", g_dir, 0));
    // another spelling of the same numbers, an ignored key changed, rms_norm_eps absent
    // (transformers' default 1e-06 is the plan's)
    char *e = strstr(json, "\"rms_norm_eps\": 1e-06,");
    CHECK(e != NULL);
    snprintf(edit, sizeof edit, "%.*s%s", (int)(e - json), json, e + strlen("\"rms_norm_eps\": 1e-06,"));
    char *v = strstr(edit, "\"max_position_embeddings\": ");
    CHECK(v != NULL);
    v[27] = '9';
    write_bytes(cfg, edit, strlen(edit));
    LONGS_EQUAL(QT_OK, qt_hf_config_check(P, "load", g_dir, 0));
    snprintf(edit, sizeof edit, "%.*s\"rms_norm_eps\": 1e-6,%s", (int)(e - json), json,
             e + strlen("\"rms_norm_eps\": 1e-06,"));
    write_bytes(cfg, edit, strlen(edit));
    LONGS_EQUAL(QT_OK, qt_hf_config_check(P, "load", g_dir, 0));
    // hidden_size changed: refused by load= and save=, naming both values
    snprintf(edit, sizeof edit, "%s", json);
    char *h = strstr(edit, "\"hidden_size\": ");
    CHECK(h != NULL);
    memcpy(h + 15, "9", 1);
    write_bytes(cfg, edit, strlen(edit));
    LONGS_EQUAL(QT_E_ARG, qt_hf_config_check(P, "load", g_dir, 0));
    CHECK(strstr(qt_last_error(), "config.json: hidden_size is 9"));
    CHECK(strstr(qt_last_error(), "but the plan (and the weights) have"));
    LONGS_EQUAL(QT_E_ARG, qt_hf_config_check(P, "save", g_dir, 0));
    CHECK(strstr(qt_last_error(), "give overwrite=1 to replace it with the plan's config.json"));
    LONGS_EQUAL(0, qt_hf_config_replacing());
    LONGS_EQUAL(QT_OK, qt_hf_config_check(P, "save", g_dir, 1));
    LONGS_EQUAL(1, qt_hf_config_replacing());
    qt_hf_config_replace_set(0);
    // a shape key missing, and text that is not JSON
    write_bytes(cfg, "{\"model_type\": \"qwen3_next\"}", 28);
    LONGS_EQUAL(QT_E_ARG, qt_hf_config_check(P, "load", g_dir, 0));
    CHECK(strstr(qt_last_error(), "vocab_size is missing"));
    write_bytes(cfg, "{\"a\": [1, 2}", 12);
    LONGS_EQUAL(QT_E_ARG, qt_hf_config_check(P, "load", g_dir, 0));
    CHECK(strstr(qt_last_error(), "not a JSON object"));
    remove(cfg);
}
