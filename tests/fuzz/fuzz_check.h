// What the fuzz targets assert. A broken invariant aborts, which libFuzzer records as a crash
// (like a sanitizer report) and keeps the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace strata::fuzz {

[[noreturn]] inline void InvariantBroken(const char* file, int line, const char* condition,
                                         const std::string& detail) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\n  %s\n", file, line, condition,
               detail.c_str());
  std::abort();
}

}  // namespace strata::fuzz

// `detail` (a std::string expression) is evaluated only when `condition` fails.
#define FUZZ_CHECK(condition, detail)                                                            \
  do {                                                                                           \
    if (!(condition)) ::strata::fuzz::InvariantBroken(__FILE__, __LINE__, #condition, (detail)); \
  } while (0)
