#include "services/parameter_server/ps_process.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"

namespace strata {

absl::StatusOr<std::unique_ptr<PsProcess>> PsProcess::Launch(const PsProcessOptions& o) {
  static std::atomic<int> counter{0};
  std::vector<std::string> args = {o.binary,
                                   "--partition",
                                   std::to_string(o.partition),
                                   "--train-examples",
                                   std::to_string(o.train_examples),
                                   "--sample-budget",
                                   std::to_string(o.sample_budget)};
  if (!o.job.empty()) {
    args.insert(args.end(), {"--job", o.job});
  } else {
    args.insert(args.end(), {"--config", o.config, "--partitions", std::to_string(o.partitions),
                             "--workers", std::to_string(o.workers)});
    if (!o.consistency.empty()) args.insert(args.end(), {"--consistency", o.consistency});
    if (o.staleness >= 0) args.insert(args.end(), {"--staleness", std::to_string(o.staleness)});
    if (o.lr_scale > 0) args.insert(args.end(), {"--lr-scale", absl::StrCat(o.lr_scale)});
  }
  if (!o.init_checkpoint.empty()) args.insert(args.end(), {"--init-checkpoint", o.init_checkpoint});
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  return LaunchService(std::move(args), o.work_dir,
                       absl::StrCat("ps", o.partition, "-", getpid(), "-", counter++),
                       o.start_deadline);
}

absl::StatusOr<std::unique_ptr<PsProcess>> PsProcess::LaunchService(
    std::vector<std::string> args, const std::string& work_dir, const std::string& name,
    std::chrono::milliseconds start_deadline) {
  const std::string port_file = absl::StrCat(work_dir, "/", name, ".port");
  SpawnOptions options;
  options.name = name;
  options.log_path = absl::StrCat(work_dir, "/", name, ".log");
  options.argv = std::move(args);
  options.argv.insert(options.argv.end(), {"--listen", "127.0.0.1:0", "--port-file", port_file});
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> child, ChildProcess::Spawn(options));
  STRATA_ASSIGN_OR_RETURN(int port, WaitForPortFile(*child, port_file, start_deadline));
  return std::unique_ptr<PsProcess>(new PsProcess(std::move(child), port));
}

PsProcess::~PsProcess() = default;  // ChildProcess kills and reaps a child that still runs

std::string PsProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

void PsProcess::Kill() {
  child_->Signal(SIGKILL);
  child_->WaitFor(std::chrono::seconds(30));
}

absl::StatusOr<int> PsProcess::WaitForExit(std::chrono::milliseconds deadline) {
  if (!child_->WaitFor(deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "strata-ps (pid ", child_->pid(), ") still running after ", deadline.count(), " ms"));
  }
  return child_->exit_code();
}

}  // namespace strata
