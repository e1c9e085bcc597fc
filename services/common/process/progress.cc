#include "services/common/process/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace strata {

ProgressLine::ProgressLine(bool enabled) : live_(enabled && ::isatty(STDOUT_FILENO)) {}

ProgressLine::~ProgressLine() { Clear(); }

void ProgressLine::Update(const std::string& text) {
  if (!live_) return;
  std::printf("\r%s", text.c_str());
  if (text.size() < last_width_)
    std::printf("%*s", static_cast<int>(last_width_ - text.size()), "");
  last_width_ = text.size();
  std::fflush(stdout);
}

void ProgressLine::Clear() {
  if (!live_ || last_width_ == 0) return;
  std::printf("\r%*s\r", static_cast<int>(last_width_), "");
  std::fflush(stdout);
  last_width_ = 0;
}

std::string Bar(double fraction, int width) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int filled = static_cast<int>(fraction * width + 0.5);
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

}  // namespace strata
