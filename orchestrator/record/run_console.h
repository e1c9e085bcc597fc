// What `strata run` prints: whole lines (stages, evaluations, the switch) and, on a terminal, one
// progress line redrawn in place under them. --quiet prints neither.
#pragma once

#include <cstdio>
#include <string>

#include "services/common/process/progress.h"

namespace strata {

class RunConsole {
 public:
  explicit RunConsole(bool quiet) : quiet_(quiet), progress_(!quiet) {}

  void Say(const std::string& line) {
    if (quiet_) return;
    progress_.Clear();
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  bool progress_live() const { return progress_.live(); }
  void Progress(const std::string& text) { progress_.Update(text); }
  void ClearProgress() { progress_.Clear(); }

 private:
  bool quiet_;
  ProgressLine progress_;
};

}  // namespace strata
