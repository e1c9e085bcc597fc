// Logging for every binary: spdlog to stderr, and to a file when the service runs in a run directory.
#pragma once

#include <string>

namespace strata {

struct LoggingOptions {
  std::string service;   // shown in every line, e.g. "worker-1"
  std::string log_file;  // empty: stderr only
  std::string level = "info";
};

void InitLogging(const LoggingOptions& options);

}  // namespace strata
