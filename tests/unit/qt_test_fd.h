/* qt_test_fd.h - the central finite differences the double backward checks share (C++).
 * Include it before CppUTest's headers (it includes <functional> and <vector>, which the
 * memory-leak macros of CppUTest would break). */
#ifndef QT_TEST_FD_H
#define QT_TEST_FD_H

#include <functional>
#include <vector>

/* Central finite differences of loss() with respect to every element of x (restored after
 * each probe), step h: the numerical gradient the double backward checks compare with. */
static inline std::vector<double> qt_test_numgrad(std::vector<double> &x, double h,
                                                  const std::function<double()> &loss)
{
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = loss();
        x[i] = keep - h;
        double lm = loss();
        x[i] = keep;
        g[i] = (lp - lm) / (2.0 * h);
    }
    return g;
}

#endif
