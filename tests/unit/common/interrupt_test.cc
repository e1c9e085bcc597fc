// The launchers' Ctrl-C helper (services/common/process/interrupt.h). Each case runs in a child
// process of its own (a death test), since the handlers are process-wide: the signal is raised
// for real and the child's exit says what the handler did.
#include "services/common/process/interrupt.h"

#include <signal.h>

#include <cstdlib>

#include <gtest/gtest.h>

namespace strata {
namespace {

// As `strata sweep` asks for them.
constexpr int kSweepSignals[] = {SIGINT, SIGTERM};

// With InstallInterruptHandlers broken so that it installed no handler, the child died of the
// SIGTERM ("died but not with expected exit code").
TEST(InterruptDeathTest, NotesTheSignalInsteadOfEndingTheProcess) {
  EXPECT_EXIT(
      {
        InstallInterruptHandlers();
        if (Interrupted() != 0 || InterruptCount() != 0) std::_Exit(1);
        ::raise(SIGTERM);
        ::raise(SIGINT);
        // The last signal, and how many came (a sweep kills its runs at the second).
        std::_Exit(Interrupted() == SIGINT && InterruptCount() == 2 ? 0 : 2);
      },
      ::testing::ExitedWithCode(0), "");
}

// Without SA_RESETHAND the second SIGINT was only noted, and the child exited 0.
TEST(InterruptDeathTest, SecondSignalEndsTheProcessWhenAsked) {
  EXPECT_EXIT(
      {
        InterruptOptions options;
        options.second_signal_ends_process = true;
        InstallInterruptHandlers(options);
        ::raise(SIGINT);
        if (Interrupted() != SIGINT) std::_Exit(1);
        ::raise(SIGINT);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

TEST(InterruptDeathTest, LeavesOtherSignalsAlone) {
  EXPECT_EXIT(
      {
        InterruptOptions options;
        options.signals.assign(kSweepSignals, kSweepSignals + 2);  // no SIGHUP
        InstallInterruptHandlers(options);
        ::raise(SIGHUP);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGHUP), "");
}

TEST(InterruptDeathTest, IgnoresSigpipeUnlessToldNotTo) {
  EXPECT_EXIT(
      {
        InstallInterruptHandlers();
        ::raise(SIGPIPE);
        std::_Exit(Interrupted() == 0 ? 0 : 1);  // ignored, and not an interrupt
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        InterruptOptions options;
        options.ignore_sigpipe = false;
        InstallInterruptHandlers(options);
        ::raise(SIGPIPE);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGPIPE), "");
}

}  // namespace
}  // namespace strata
