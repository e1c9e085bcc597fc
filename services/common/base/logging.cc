#include "services/common/base/logging.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#if defined(__SANITIZE_ADDRESS__)
#define STRATA_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_ADDRESS_SANITIZER 1
#endif
#endif
#ifdef STRATA_ADDRESS_SANITIZER
#include <sanitizer/lsan_interface.h>
#endif

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
#ifdef STRATA_ADDRESS_SANITIZER
  // _Exit skips the leak check LeakSanitizer runs at exit, which would leave every service's leaks
  // unseen under `make test-sanitize`: run it here (a no-op with detect_leaks=0). A leak makes the
  // process exit with LeakSanitizer's code instead of `code`, which the test that started it sees.
  __lsan_do_leak_check();
#endif
  std::_Exit(code);
}

}  // namespace strata
