// Logging for every binary: spdlog to stderr, and to a file when the service runs in a run
// directory.
#pragma once

#include <string>

namespace strata {

struct LoggingOptions {
  std::string service;   // shown in every line, e.g. "worker-1"
  std::string log_file;  // empty: stderr only
  std::string level = "info";
};

void InitLogging(const LoggingOptions& options);

// Ends a service process: flushes the logs and stdio, then leaves without running static
// destructors. gRPC's asynchronous shutdown and LibTorch's static state can race at exit (seen
// as an abort in about 1 run in 20), which would turn a clean Stop into a failure.
[[noreturn]] void ExitProcess(int code);

}  // namespace strata
