// Progress on a terminal: one line redrawn in place; on a pipe or file, nothing until the caller
// prints a whole line. Keeps long work visible without flooding logs.
#pragma once

#include <string>

namespace strata {

class ProgressLine {
 public:
  // Redraws in place only when stdout is a terminal and `enabled`.
  explicit ProgressLine(bool enabled);
  ~ProgressLine();
  void Update(const std::string& text);
  // Clears the live line so a permanent line can be printed.
  void Clear();
  bool live() const { return live_; }

 private:
  bool live_;
  size_t last_width_ = 0;
};

std::string Bar(double fraction, int width);

}  // namespace strata
