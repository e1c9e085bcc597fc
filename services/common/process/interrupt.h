// Ctrl-C for the programs that start others (`strata run`, `supervise`, `submit`, `sweep`). Their
// children run in process groups of their own (child_process.h), so the terminal's SIGINT reaches
// only the launcher, which must then end the run in order: stop the services, write the record,
// exit 130. The handlers installed here only note the signal; the launcher's loop asks
// Interrupted() between its steps and does the rest on its own thread.
#pragma once

#include <csignal>
#include <vector>

namespace strata {

struct InterruptOptions {
  // The signals that ask for an orderly end. `strata sweep` leaves SIGHUP out: a closed terminal
  // ends the sweep at once, and its runs with it (PR_SET_PDEATHSIG).
  std::vector<int> signals = {SIGINT, SIGTERM, SIGHUP};
  // The first signal puts the default action back, so that a second one ends the process at once
  // (`strata submit`, whose orderly end is slow kubectl calls; those die with it).
  bool second_signal_ends_process = false;
  // SIGPIPE ignored: a write to a closed pipe or socket (a reader of our output gone) fails with
  // EPIPE instead of ending the process before it has stopped its children.
  bool ignore_sigpipe = true;
};

// Installs the handlers, without SA_RESTART: a blocking call returns early (EINTR), so the loop
// notices soon. Process-wide: call once, from the main thread, before the loop that polls.
void InstallInterruptHandlers(const InterruptOptions& options = {});

// The last signal that asked for an end, 0 while none has come.
int Interrupted();

// How many such signals have come (`strata sweep`: a second Ctrl-C kills its runs at once).
int InterruptCount();

}  // namespace strata
