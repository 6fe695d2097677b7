// test_amx_emul.cpp - the candidate TDPBF16PS emulations of the AMX probe
// (tests/tools/amx_probe/amx_emul.h, docs/amx.md), on any CPU (no AMX instruction runs here):
//  (a) amx-bf16.md's table T1-T8, transcribed here row by row (candidate, variant, expected
//      bits), against every emulation it names, including the table's "else" columns
//      through the flag variants (no DAZ, no FTZ);
//  (b) the probe's own case table (T1-T8 and the further NaN / Inf / tininess cases, every
//      candidate's bits derived by hand in amx_emul.c) against the emulations, and the
//      tininess-before-rounding variant on F1;
//  (c) every candidate against an independent double model on 200000 random elements whose
//      exponents keep every intermediate sum exact in double (so each fp32 rounding of the
//      model is the single rounding the candidate makes);
//  (d) qt_amx_tile against qt_amx_dot element by element with C carried over 16-pair chunks.
// Mutations that fail it (docs/amx.md): E1 with C entering first, E2 with odd before even,
// E5 rounding each addition, the fused step without the exact path near FLT_MIN.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "CppUTest/TestHarness.h"

extern "C" {
#include "tools/amx_probe/amx_emul.h"
}

namespace {

const qt_amx_case *find_case(const char *name)
{
    for (int i = 0; i < qt_amx_case_count(); i++)
        if (!strcmp(qt_amx_case_get(i)->name, name)) return qt_amx_case_get(i);
    return nullptr;
}

uint32_t run_case(const qt_amx_case *c, int cand, unsigned flags)
{
    return qt_amx_dot(cand, flags, c->c, c->ae, c->ao, c->be, c->bo, c->k);
}

uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

float f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint32_t u32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// The double model (finite, normal-range data only): every sum exact in double, then one
// rounding to float.
float rd(double x) { return (float)x; }

uint32_t model(int cand, uint32_t c, const uint16_t *ae, const uint16_t *ao, const uint16_t *be,
               const uint16_t *bo, int k)
{
    auto v = [](uint16_t h) { return (double)f32((uint32_t)h << 16); };
    float e = 0, o = 0, acc = f32(c);
    switch (cand) {
    case QT_AMX_E1:
    case QT_AMX_E4G:
    case QT_AMX_E4F: // the products are exact in fp32 here, so E4 == E1
        for (int i = 0; i < k; i++) {
            e = rd((double)e + v(ae[i]) * v(be[i]));
            o = rd((double)o + v(ao[i]) * v(bo[i]));
        }
        return u32(rd((double)f32(c) + (double)rd((double)e + (double)o)));
    case QT_AMX_E2:
    case QT_AMX_E3:
        for (int i = 0; i < k; i++) {
            const double pe = v(ae[i]) * v(be[i]), po = v(ao[i]) * v(bo[i]);
            acc = rd((double)acc + (cand == QT_AMX_E2 ? pe : po));
            acc = rd((double)acc + (cand == QT_AMX_E2 ? po : pe));
        }
        return u32(acc);
    case QT_AMX_E5: {
        double s = f32(c);
        for (int i = 0; i < k; i++) s += v(ae[i]) * v(be[i]) + v(ao[i]) * v(bo[i]);
        return u32(rd(s));
    }
    default: { // E6
        float l[32];
        for (int i = 0; i < 2 * k; i++)
            l[i] = rd(i % 2 ? v(ao[i / 2]) * v(bo[i / 2]) : v(ae[i / 2]) * v(be[i / 2]));
        for (int w = 2 * k; w > 1; w = (w + 1) / 2)
            for (int i = 0; i < w; i += 2) l[i / 2] = i + 1 < w ? rd((double)l[i] + (double)l[i + 1]) : l[i];
        return u32(rd((double)f32(c) + (double)l[0]));
    }
    }
}

// bf16 / fp32 with exponent in [-2, 2]: every product and sum of up to 33 terms is exact in
// double (a span of at most 2^11 .. 2^-25).
uint16_t narrow_bf(uint64_t *s)
{
    const uint64_t r = xs(s);
    return (uint16_t)((r & 1u) << 15 | (uint32_t)(125 + (r >> 8) % 5) << 7 | (r >> 16 & 0x7fu));
}

uint32_t narrow_f32(uint64_t *s)
{
    const uint64_t r = xs(s);
    return (uint32_t)(r & 1u) << 31 | (uint32_t)(125 + (r >> 8) % 5) << 23 | (uint32_t)(r >> 16 & 0x7fffffu);
}

} // namespace

TEST_GROUP(AmxEmul) {};

// (a) amx-bf16.md section (c), the table of discriminating vectors, row by row.
TEST(AmxEmul, ResearchTable)
{
    struct { const char *c; int cand; unsigned flags; uint32_t want; } rows[] = {
        {"T1", QT_AMX_E1, 0, 0x40000000u}, {"T1", QT_AMX_E5, 0, 0x40000000u},
        {"T1", QT_AMX_E2, 0, 0x3f800000u}, {"T1", QT_AMX_E3, 0, 0x00000000u},
        {"T2", QT_AMX_E1, 0, 0x4b800000u}, {"T2", QT_AMX_E5, 0, 0x4b800001u},
        {"T3", QT_AMX_E1, 0, 0x4b800001u}, {"T3", QT_AMX_E2, 0, 0x4b800000u},
        {"T3", QT_AMX_E3, 0, 0x4b800000u},
        {"T4", QT_AMX_E1, 0, 0x01000001u}, {"T4", QT_AMX_E2, 0, 0x01000001u},
        {"T4", QT_AMX_E3, 0, 0x01000001u}, {"T4", QT_AMX_E4G, 0, 0x01000000u},
        {"T4", QT_AMX_E4F, 0, 0x01000000u},
        {"T5", QT_AMX_E1, 0, 0x7f000000u}, {"T5", QT_AMX_E2, 0, 0x7f000000u},
        {"T5", QT_AMX_E3, 0, 0x7f000000u}, {"T5", QT_AMX_E4G, 0, 0x7f800000u},
        {"T5", QT_AMX_E4F, 0, 0x7f800000u},
        {"T6", QT_AMX_E1, 0, 0x00000000u}, {"T6", QT_AMX_E2, 0, 0x80000000u},
        {"T6", QT_AMX_E3, 0, 0x80000000u},
        {"T7", QT_AMX_E1, 0, 0x00000000u}, {"T7", QT_AMX_E1, QT_AMX_NO_DAZ, 0x3c000000u},
        {"T8", QT_AMX_E1, 0, 0x00000000u}, {"T8", QT_AMX_E1, QT_AMX_NO_DAZ, 0x80000000u},
        {"T8", QT_AMX_E1, QT_AMX_NO_DAZ | QT_AMX_NO_FTZ, 0x80000001u},
    };
    for (const auto &r : rows) {
        const qt_amx_case *c = find_case(r.c);
        CHECK(c != nullptr);
        const uint32_t got = run_case(c, r.cand, r.flags);
        if (got != r.want)
            FAIL(StringFromFormat("%s %s flags %u: 0x%08x, amx-bf16.md says 0x%08x", r.c,
                                  qt_amx_cand_name(r.cand), r.flags, got, r.want).asCharString());
        // the probe's table agrees with the research table where both state the value
        if (!r.flags) LONGS_EQUAL(r.want, c->want[r.cand]);
    }
    // T7 and T8 without DAZ for every candidate (the table's "else" columns)
    for (int e = 0; e < QT_AMX_NCAND; e++)
        LONGS_EQUAL(0x3c000000u, run_case(find_case("T7"), e, QT_AMX_NO_DAZ));
}

// (b) every candidate on every case of the probe's table; F1 under tininess before rounding.
TEST(AmxEmul, CaseTable)
{
    int stated = 0;
    for (int i = 0; i < qt_amx_case_count(); i++) {
        const qt_amx_case *c = qt_amx_case_get(i);
        for (int e = 0; e < QT_AMX_NCAND; e++) {
            const uint32_t got = run_case(c, e, 0);
            if (got != c->want[e])
                FAIL(StringFromFormat("case %s (%s), %s: 0x%08x, expected 0x%08x", c->name,
                                      c->what, qt_amx_cand_name(e), got, c->want[e]).asCharString());
            stated += (c->doc >> e) & 1u;
        }
    }
    CHECK(qt_amx_case_count() >= 20);
    CHECK(stated >= 30);
    const qt_amx_case *f1 = find_case("F1");
    LONGS_EQUAL(0x00000000u, run_case(f1, QT_AMX_E1, QT_AMX_TINY_BEFORE));
    LONGS_EQUAL(0x00000000u, run_case(f1, QT_AMX_E5, QT_AMX_TINY_BEFORE));
    LONGS_EQUAL(0x00800000u, run_case(f1, QT_AMX_E4G, QT_AMX_TINY_BEFORE)); // product rounded first
    // F12 without FTZ keeps the denormal -2^-140
    LONGS_EQUAL(0x80000200u, run_case(find_case("F12"), QT_AMX_E3, QT_AMX_NO_DAZ | QT_AMX_NO_FTZ));
}

// (c) the candidates against the double model on random narrow-band elements, K 1..16.
TEST(AmxEmul, CandidatesAgainstDoubleModel)
{
    uint64_t s = 0x452821e638d01377ull;
    uint16_t ae[16], ao[16], be[16], bo[16];
    long differ_e1_e5 = 0;
    for (int t = 0; t < 200000; t++) {
        const int k = 1 + (int)(xs(&s) % 16);
        for (int i = 0; i < k; i++) ae[i] = narrow_bf(&s), ao[i] = narrow_bf(&s),
                                    be[i] = narrow_bf(&s), bo[i] = narrow_bf(&s);
        const uint32_t c = narrow_f32(&s);
        for (int e = 0; e < QT_AMX_NCAND; e++) {
            const uint32_t got = qt_amx_dot(e, 0, c, ae, ao, be, bo, k),
                           want = model(e, c, ae, ao, be, bo, k);
            if (got != want)
                FAIL(StringFromFormat("element %d (K %d), %s: 0x%08x, the double model 0x%08x", t,
                                      k, qt_amx_cand_name(e), got, want).asCharString());
        }
        differ_e1_e5 += qt_amx_dot(QT_AMX_E1, 0, c, ae, ao, be, bo, k) !=
                        qt_amx_dot(QT_AMX_E5, 0, c, ae, ao, be, bo, k);
    }
    CHECK(differ_e1_e5 > 1000); // the data tell the orders apart
}

// (d) the tile form, C carried over 16-pair chunks, equals the element form chunk by chunk.
TEST(AmxEmul, TileEqualsElements)
{
    uint64_t s = 0x3b6c9e5e5b7b6f01ull;
    static uint16_t a[3 * 64 * 2], b[48 * 32];
    uint32_t c[3 * 16];
    for (auto &x : a) x = narrow_bf(&s);
    for (auto &x : b) x = narrow_bf(&s);
    for (auto &x : c) x = narrow_f32(&s);
    for (int e = 0; e < QT_AMX_NCAND; e++) {
        uint32_t t[3 * 16];
        memcpy(t, c, sizeof t);
        for (int j = 0; j < 3; j++)
            qt_amx_tile(e, 0, t, 16, a + 32 * j, 96, b + 16 * 32 * j, 32, 3, 16, 16);
        for (int m = 0; m < 3; m++)
            for (int n = 0; n < 16; n++) {
                uint32_t want = c[m * 16 + n];
                for (int j = 0; j < 3; j++) {
                    uint16_t ae[16], ao[16], be[16], bo[16];
                    for (int i = 0; i < 16; i++) {
                        ae[i] = a[m * 96 + 32 * j + 2 * i], ao[i] = a[m * 96 + 32 * j + 2 * i + 1];
                        be[i] = b[(16 * j + i) * 32 + 2 * n], bo[i] = b[(16 * j + i) * 32 + 2 * n + 1];
                    }
                    want = qt_amx_dot(e, 0, want, ae, ao, be, bo, 16);
                }
                LONGS_EQUAL(want, t[m * 16 + n]);
            }
    }
}
