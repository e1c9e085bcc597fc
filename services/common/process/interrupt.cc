#include "services/common/process/interrupt.h"

#include <signal.h>

#include <atomic>

namespace strata {
namespace {

// Written by the handler only: lock-free atomics are async-signal-safe.
std::atomic<int> g_signal{0};
std::atomic<int> g_count{0};
static_assert(std::atomic<int>::is_always_lock_free);

void OnSignal(int sig) {
  g_signal.store(sig);
  g_count.fetch_add(1);
}

}  // namespace

void InstallInterruptHandlers(const InterruptOptions& options) {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = options.second_signal_ends_process ? SA_RESETHAND : 0;
  for (const int sig : options.signals) ::sigaction(sig, &sa, nullptr);
  if (options.ignore_sigpipe) ::signal(SIGPIPE, SIG_IGN);
}

int Interrupted() { return g_signal.load(); }

int InterruptCount() { return g_count.load(); }

}  // namespace strata
