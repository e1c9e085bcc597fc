// How the services of a run are started, watched and ended, with nothing about training: the run
// hands the launcher specs (which binary, which role flags, how much CPU) and gets back where each
// service listens. LocalLauncher runs them as child processes on 127.0.0.1; a launcher for
// containers or a cluster scheduler implements the same interface, and the run supervisor and the
// switch never see the difference (they talk to the services through the ClusterClient).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "orchestrator/record/run_files.h"

namespace strata {

enum class ServiceRole { kParameterServer, kWorker, kEvaluator };

// A long-running service. The launcher decides where it listens and tells it so.
struct ServiceSpec {
  std::string name;  // "ps-0", "worker-1", "evaluator"
  ServiceRole role = ServiceRole::kWorker;
  std::string binary;             // "strata-worker"
  std::vector<std::string> args;  // role flags from the plan
  // Workers whose ring runs over a local socket: the extra address they listen on for their ring
  // peers ("unix-abstract:..."), passed in `args` too; empty: the ring uses the main address.
  std::string ring_address;
  // At most one entry: the cores the service's CPU quota allows (cluster.cpu, worker_speeds,
  // stragglers); empty: no quota.
  std::vector<double> cpu_fractions;
  // Serves Prometheus metrics (metrics.enabled): the launcher says where (--metrics-listen).
  bool metrics = false;
};

// A step that runs to completion before the services start (the sharder, the initial model).
struct TaskSpec {
  std::string name;    // "sharder"
  std::string binary;  // "strata-sharder"
  std::vector<std::string> args;
  std::string description;    // how messages name it: "the sharder"
  bool record_launch = true;  // the initial-model writer has never had a launch event
};

// Where a started service can be reached.
struct Endpoint {
  std::string service;
  ServiceRole role = ServiceRole::kWorker;
  std::string address;       // host:port for the orchestrator, the evaluator and the servers
  std::string ring_address;  // workers: where ring peers reach it (the address if empty)
};

// A service that exited while the run needed it. `failure` is the message that ends the run when
// nothing recovers it: the service named, how it ended, where its log is.
struct ServiceExit {
  std::string service;
  ServiceRole role = ServiceRole::kWorker;
  std::string how;  // "killed by signal 9 (Killed)", "exited with code 1"
  absl::Status failure;
};

class Launcher {
 public:
  virtual ~Launcher() = default;

  // Runs `task` to its end; `keep_going` (signals) is checked while it runs. A task that fails or
  // outlives `timeout` fails the run, named.
  virtual absl::Status RunTask(const TaskSpec& task, std::chrono::milliseconds timeout,
                               const std::function<absl::Status()>& keep_going) = 0;
  virtual absl::Status Start(const ServiceSpec& service) = 0;
  // Until every started service reports where it listens (in start order), checking exits and
  // `keep_going` meanwhile; names the ones still silent at `timeout`.
  virtual absl::StatusOr<std::vector<Endpoint>> WaitReady(
      std::chrono::milliseconds timeout, const std::function<absl::Status()>& keep_going) = 0;
  // A service that exited while the run needs it fails the run, named. Does not block.
  virtual absl::Status CheckExits() = 0;
  // The services that exited since the last call, each reported once (and recorded); the caller
  // decides whether the run survives them. Does not block.
  virtual std::vector<ServiceExit> TakeExits() = 0;
  // Starts an exited service again with its own flags, where it listened before, so that every
  // peer and the orchestrator reach it at the address they know. Does not wait for it to listen.
  // UNIMPLEMENTED where this process does not run the services (containers).
  virtual absl::Status Restart(const std::string& service) = 0;
  // The service (re)started listens again at its address.
  virtual bool Listening(const std::string& service) = 0;
  virtual bool Running(const std::string& service) = 0;
  // Ends every service: up to `wait` to exit on their own (a Stop RPC is the caller's), then
  // signals; records how each ended.
  virtual void StopAll(std::chrono::milliseconds wait) = 0;
  virtual std::vector<ProcessSnapshot> Snapshot() = 0;
};

}  // namespace strata
