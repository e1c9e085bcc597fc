// Keeps a run going when one of its processes dies (docs/user-guide.md, "When a process dies").
// A worker that exits in the asynchronous phase is started again where it listened and rejoins
// with the step count of the one it replaces: it pulls the servers' current model and goes on
// with its shard. A parameter server that exits is started again and resumes from its last
// periodic save while the workers wait for it; the updates applied since that save are lost, and
// counted. A worker that dies in the ring of an all-reduce job is replaced the same way, and the
// ring re-forms around its replacement: the survivors give up the broken operation, the replacement
// and every survivor connect again in a new ring generation, take the model of the survivor that
// completed the most steps and go on from its count. Anything else (a worker in the ring of a
// switch job, which falls back to the servers instead; a process during the switch; the evaluator;
// a process out of restarts) still ends the run, named.
//
// A controller of the supervisor's loop: OnExit takes an exit the launcher reported; Step moves
// each restart on (waiting for the new process to listen, then starting the worker or reading
// what the server resumed with) and never blocks.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "orchestrator/launch/launcher.h"
#include "orchestrator/record/run_record.h"
#include "orchestrator/run/cluster_client.h"
#include "orchestrator/run/controller.h"

namespace strata {

// "worker-3" -> 3, "ps-1" -> 1; -1 for a name without an index ("evaluator").
int ServiceIndex(const std::string& name);

struct RecoveryOptions {
  int max_restarts = 3;  // per service; 0: every exit ends the run
  // From the restart until the new process listens and (a worker) accepts Start.
  std::chrono::milliseconds rejoin_timeout{120000};
  std::chrono::milliseconds rpc_timeout{10000};
  // What a restarted worker is started with: mode PS, the servers, the plan's steps per epoch.
  v1::StartRequest ps_start;
  // The same for the replacement in a re-formed ring: mode ALLREDUCE, the workers.
  v1::StartRequest ring_start;
};

// Whether the run can do without a process for a while, as the supervisor sees it now.
struct RecoveryWindow {
  bool asynchronous = false;  // the workers train against the servers (not in the ring)
  bool switching = false;     // a switch is under way: it needs every process it started with
  bool ring_reformable = false;  // the workers are in the ring of an all-reduce job
};

class ServiceRecovery final : public Controller {
 public:
  ServiceRecovery(RecoveryOptions options, Launcher& launcher, ClusterClient& client,
                  RunRecord& record, RunFailure& failure);

  // Restarts the service of `exit` if the run can survive its loss now; otherwise fails the run
  // with the exit's own message (and the reason no restart was tried).
  absl::Status OnExit(const ServiceExit& exit, const ClusterView& view, RecoveryWindow window,
                      Clock::time_point now);
  absl::Status Step(const ClusterView& view, Clock::time_point now) override;
  std::optional<Clock::duration> StepWithin() const override;

  // The last status a server answered with, for the updates its crash loses.
  void ObserveServer(int partition, const v1::ServerStatus& status);
  // Being restarted: the supervisor expects no answer from it meanwhile.
  bool recovering(const std::string& service) const { return pending_.count(service) > 0; }
  int restarts() const { return restarts_total_; }
  // `service` has restarts left (it would be restarted if the run could do without it now).
  bool may_restart(const std::string& service) const;

 private:
  struct Pending {
    ServiceRole role = ServiceRole::kWorker;
    int index = 0;  // rank or partition
    Clock::time_point began;
    int64_t first_step = 0;    // a worker: where it carries on
    int64_t last_version = -1;  // a server: the last version seen before it died
    bool reform = false;        // a worker whose ring re-forms around its replacement
    bool started = false;       // the replacement accepted Start (re-forming rings only)
  };

  absl::Status StepWorker(const std::string& name, const Pending& p, bool* done);
  absl::Status StepRing(const std::string& name, Pending& p, const ClusterView& view, bool* done);
  // Interrupts every worker but `lost`, so that none waits on it until its ring deadline.
  void InterruptRing(int lost, const std::string& name);
  absl::Status StepServer(const std::string& name, const Pending& p, Clock::time_point now,
                          bool* done);

  RecoveryOptions options_;
  Launcher& launcher_;
  ClusterClient& client_;
  RunRecord& record_;
  RunFailure& failure_;
  std::map<std::string, Pending> pending_;
  std::map<std::string, int> restarts_;  // per service
  std::map<int, int64_t> server_versions_;
  int restarts_total_ = 0;
  uint32_t ring_generation_ = 0;  // of the last ring formed
};

}  // namespace strata
