// Tiny test helpers for the twin case programs: each prints "PASS <name>" or fails the process.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernel_operator.h"

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                               \
            std::fprintf(stderr, "\n");                                      \
            std::exit(1);                                                    \
        }                                                                    \
    } while (0)

// `stmt` must throw twin::Error whose message contains `needle`.
#define EXPECT_ERROR(stmt, needle)                                                              \
    do {                                                                                        \
        std::string tw_msg;                                                                     \
        try {                                                                                   \
            stmt;                                                                               \
        } catch (const twin::Error& e) {                                                        \
            tw_msg = e.what();                                                                  \
        }                                                                                       \
        CHECK(!tw_msg.empty(), "no error from %s", #stmt);                                      \
        CHECK(tw_msg.find(needle) != std::string::npos, "message '%s' lacks '%s'", tw_msg.c_str(), \
              needle);                                                                          \
    } while (0)

inline void Pass(const char* name) { std::printf("PASS %s\n", name); }

// Fresh core state with the 910B limits (or the given ones) before each case.
inline void FreshCore(TwCoreLimits limits = twin::kDefaultLimits) { twin::BeginBlock(0, 1, limits); }

inline bool Close(double got, double want, double rtol, double atol)
{
    return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}
