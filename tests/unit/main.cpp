// main.cpp - CppUTest runner for the unit tests (kernels, math, configgen, runtime, io).
#include "CppUTest/CommandLineTestRunner.h"

int main(int ac, char **av)
{
    return CommandLineTestRunner::RunAllTests(ac, av);
}
