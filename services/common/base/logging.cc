#include "services/common/base/logging.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace strata {

void InitLogging(const LoggingOptions& options) {
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!options.log_file.empty()) {
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.log_file));
  }
  auto logger = std::make_shared<spdlog::logger>(options.service, sinks.begin(), sinks.end());
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  logger->set_level(spdlog::level::from_str(options.level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void ExitProcess(int code) {
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace strata
