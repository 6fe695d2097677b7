// test_mesh_coords.cpp - qt_plan.h's slice-major rank <-> coordinate maps (qt_mesh_coords,
// qt_mesh_rank): inverse of each other on every rank of meshes with and without slices; one
// slice (dcn NULL or all 1) is the plain mixed radix, data most significant; with slices a
// slice's ranks are consecutive and share their slice digits, and every coordinate is hit
// exactly once.
#include <vector>

#include "CppUTest/TestHarness.h"

#include "qt_plan.h"

TEST_GROUP(MeshCoords){};

static void check_mesh(const int32_t mesh[QT_MESH_COUNT], const int32_t dcn[QT_MESH_COUNT])
{
    int64_t n = 1, ns = qt_mesh_slices(dcn);
    for (int a = 0; a < QT_MESH_COUNT; a++) n *= mesh[a];
    std::vector<int> seen((size_t)n, 0);
    for (int64_t r = 0; r < n; r++) {
        int32_t c[QT_MESH_COUNT];
        qt_mesh_coords(mesh, dcn, r, c);
        LONGS_EQUAL(r, qt_mesh_rank(mesh, dcn, c));
        int64_t mr = 0, slice = 0;
        for (int a = 0; a < QT_MESH_COUNT; a++) {
            CHECK(c[a] >= 0 && c[a] < mesh[a]);
            mr = mr * mesh[a] + c[a];
            const int32_t nd = qt_mesh_dcn(dcn, a);
            slice = slice * nd + c[a] / (mesh[a] / nd);
        }
        seen[(size_t)mr]++;
        if (ns == 1) LONGS_EQUAL(r, mr);              // one slice: plain mixed radix
        LONGS_EQUAL(r / (n / ns), slice);             // slice-major: consecutive ranks
    }
    for (int64_t i = 0; i < n; i++) LONGS_EQUAL(1, seen[(size_t)i]);
}

TEST(MeshCoords, OneSliceIsMixedRadix)
{
    const int32_t mesh[QT_MESH_COUNT] = {2, 3, 2, 1, 2};
    const int32_t ones[QT_MESH_COUNT] = {1, 1, 1, 1, 1};
    check_mesh(mesh, NULL);
    check_mesh(mesh, ones);
    int32_t c[QT_MESH_COUNT];
    qt_mesh_coords(mesh, NULL, 1 * 12 + 2 * 4 + 1 * 2 + 1, c);  // d1 f2 t1 e0 c1
    LONGS_EQUAL(1, c[QT_MESH_DATA]);
    LONGS_EQUAL(2, c[QT_MESH_FSDP]);
    LONGS_EQUAL(1, c[QT_MESH_TENSOR]);
    LONGS_EQUAL(1, c[QT_MESH_CONTEXT]);
}

TEST(MeshCoords, SlicesAreSliceMajor)
{
    const int32_t m1[QT_MESH_COUNT] = {4, 2, 1, 2, 1}, d1[QT_MESH_COUNT] = {2, 1, 1, 1, 1};
    const int32_t m2[QT_MESH_COUNT] = {2, 2, 1, 1, 1}, d2[QT_MESH_COUNT] = {1, 2, 1, 1, 1};
    const int32_t m3[QT_MESH_COUNT] = {2, 4, 2, 2, 1}, d3[QT_MESH_COUNT] = {2, 2, 1, 2, 1};
    check_mesh(m1, d1);
    check_mesh(m2, d2);
    check_mesh(m3, d3);
    // dcn fsdp 2 x ici data 2: rank 1 is (data 1, fsdp 0), rank 2 is (data 0, fsdp 1)
    int32_t c[QT_MESH_COUNT];
    qt_mesh_coords(m2, d2, 1, c);
    LONGS_EQUAL(1, c[QT_MESH_DATA]);
    LONGS_EQUAL(0, c[QT_MESH_FSDP]);
    qt_mesh_coords(m2, d2, 2, c);
    LONGS_EQUAL(0, c[QT_MESH_DATA]);
    LONGS_EQUAL(1, c[QT_MESH_FSDP]);
}
