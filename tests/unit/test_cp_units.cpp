// test_cp_units.cpp - the own units of a parameter kept whole over context and their
// placement by owner (parallel/cp_units.h; qt_ops.def CTX_OWN_UNITS and the *_WGRAD_U
// kinds: GDN heads owned unevenly over context, issue 35), single process, at 0 ulp:
//  (1) the runs: member j owns units [j*U/C, (j+1)*U/C), every unit exactly once, sizes
//      differing by at most one, ceil(U/C) slots;
//  (2) select: each member's slot block holds its units' rows of every segment, in order,
//      then zero padding, fp32 and bf16 elements (bytes compared);
//  (3) place: the members' slot blocks (as an all-gather leaves them, stride apart) put
//      back give the whole parameter, every element written once (a sentinel elsewhere
//      would survive), for 1 to 3 segments of different widths, U < C included;
//  (4) the shape check's refusals.
#include <stdint.h>
#include <string.h>
#include <vector>
#include "CppUTest/TestHarness.h"

extern "C" {
#include "parallel/cp_units.h"
}

TEST_GROUP(CpUnits){};

TEST(CpUnits, RunsCoverEveryUnitOnceAndDifferByAtMostOne)
{
    for (int64_t U = 1; U <= 17; U++)
        for (int64_t C = 1; C <= 8; C++) {
            int64_t next = 0, lo = U, hi = 0;
            for (int64_t j = 0; j < C; j++) {
                LONGS_EQUAL(next, qt_cpu_first(U, C, j));
                const int64_t n = qt_cpu_count(U, C, j);
                next += n;
                lo = n < lo ? n : lo;
                hi = n > hi ? n : hi;
                CHECK(n <= qt_cpu_slots(U, C));
            }
            LONGS_EQUAL(U, next);
            CHECK(hi - lo <= 1);
            LONGS_EQUAL((U + C - 1) / C, qt_cpu_slots(U, C));
            LONGS_EQUAL(hi, qt_cpu_slots(U, C));
        }
}

TEST(CpUnits, SelectThenPlaceGivesTheWholeParameterBack)
{
    const int64_t widths[3][3] = {{3, 0, 0}, {2, 2, 5}, {4, 1, 0}};
    const int nsegs[3] = {1, 3, 2};
    for (int k = 0; k < 3; k++)
        for (int64_t U = 1; U <= 7; U++)
            for (int64_t C = 1; C <= 5; C++)
                for (int64_t eb = 2; eb <= 4; eb += 2) {
                    qt_cpu_shape sh = {U, C, nsegs[k], {widths[k][0], widths[k][1], widths[k][2]}, eb};
                    LONGS_EQUAL(0, qt_cpu_check(&sh));
                    const int64_t W = qt_cpu_whole_elems(&sh), B = qt_cpu_block_elems(&sh);
                    std::vector<float> whole((size_t)W);
                    for (int64_t i = 0; i < W; i++) whole[(size_t)i] = (float)(i + 1) * 0.5f;
                    // the segments' element offsets in the whole and in a slot block
                    std::vector<float> blocks((size_t)(C * B));
                    for (int64_t j = 0; j < C; j++) {
                        std::vector<unsigned char> y((size_t)(B * eb), 0xAB);
                        if (eb == 4) {
                            qt_cpu_select(&sh, j, y.data(), whole.data());
                        } else {  // bf16-width elements: the high halves of the floats
                            std::vector<uint16_t> x16((size_t)W);
                            for (int64_t i = 0; i < W; i++) {
                                uint32_t b;
                                memcpy(&b, &whole[(size_t)i], 4);
                                x16[(size_t)i] = (uint16_t)(b >> 16);
                            }
                            qt_cpu_select(&sh, j, y.data(), x16.data());
                        }
                        // expected block: per segment the member's units then zeros
                        const int64_t L = qt_cpu_slots(U, C), u0 = qt_cpu_first(U, C, j),
                                      n = qt_cpu_count(U, C, j);
                        int64_t ys = 0, xs = 0;
                        for (int s = 0; s < nsegs[k]; s++) {
                            const int64_t w = sh.w[s];
                            for (int64_t e = 0; e < L * w; e++) {
                                const int64_t slot = e / w;
                                float want = slot < n ? whole[(size_t)(xs + (u0 + slot) * w + e % w)] : 0.0f;
                                uint32_t wb;
                                memcpy(&wb, &want, 4);
                                if (eb == 4) {
                                    uint32_t got;
                                    memcpy(&got, &y[(size_t)((ys + e) * 4)], 4);
                                    UNSIGNED_LONGS_EQUAL(wb, got);
                                    blocks[(size_t)(j * B + ys + e)] = want;
                                } else {
                                    uint16_t got;
                                    memcpy(&got, &y[(size_t)((ys + e) * 2)], 2);
                                    UNSIGNED_LONGS_EQUAL(wb >> 16, got);
                                }
                            }
                            ys += L * w;
                            xs += U * w;
                        }
                    }
                    if (eb != 4) continue;
                    std::vector<float> back((size_t)W, -7.25f);
                    qt_cpu_place(&sh, back.data(), blocks.data(), B);
                    MEMCMP_EQUAL(whole.data(), back.data(), (size_t)W * sizeof(float));
                }
}

TEST(CpUnits, ShapeCheckRefuses)
{
    qt_cpu_shape ok = {4, 3, 1, {2, 0, 0}, 4};
    LONGS_EQUAL(0, qt_cpu_check(&ok));
    qt_cpu_shape bad[] = {{0, 3, 1, {2, 0, 0}, 4}, {4, 0, 1, {2, 0, 0}, 4}, {4, 3, 0, {2, 0, 0}, 4},
                          {4, 3, 4, {2, 1, 1}, 4}, {4, 3, 2, {2, 0, 0}, 4}, {4, 3, 1, {2, 0, 0}, 3}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(qt_cpu_check(&bad[i]) != 0);
}
