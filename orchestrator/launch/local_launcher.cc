#include "orchestrator/launch/local_launcher.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <absl/strings/strip.h>

#include "services/common/base/files.h"
#include "services/common/base/status.h"

namespace strata {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

LocalLauncher::LocalLauncher(std::string bin_dir, std::string run_dir, RunRecord& record,
                             RunConsole& console, RunFailure& failure,
                             std::optional<HostPlacement> hosts)
    : bin_dir_(std::move(bin_dir)),
      paths_(std::move(run_dir)),
      record_(record),
      console_(console),
      failure_(failure),
      hosts_(std::move(hosts)) {}

LocalLauncher::~LocalLauncher() = default;

absl::StatusOr<std::unique_ptr<ChildProcess>> LocalLauncher::Spawn(const std::string& name,
                                                                   std::vector<std::string> argv,
                                                                   const EmulatedHost* host) {
  SpawnOptions o;
  o.name = name;
  o.argv = std::move(argv);
  o.log_path = paths_.ServiceLog(name);
  if (host != nullptr) {
    o.network_namespace = host->network_namespace;
    o.cpu_group = host->cpu_group;
  }
  auto child = ChildProcess::Spawn(o);
  if (!child.ok()) return failure_.Fail(name, child.status());
  return child;
}

absl::Status LocalLauncher::RunTask(const TaskSpec& task, std::chrono::milliseconds timeout,
                                    const std::function<absl::Status()>& keep_going) {
  std::vector<std::string> argv = {absl::StrCat(bin_dir_, "/", task.binary)};
  argv.insert(argv.end(), task.args.begin(), task.args.end());
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> child, Spawn(task.name, argv));
  if (task.record_launch) {
    record_.Event(RunEvent::kLaunched, {{"process", task.name}, {"pid", child->pid()}});
  }
  const auto until = Clock::now() + timeout;
  while (!child->Poll()) {
    STRATA_RETURN_IF_ERROR(keep_going());
    if (Clock::now() > until) {
      return failure_.Fail(
          task.name, absl::DeadlineExceededError(
                         absl::StrCat(task.description, " did not finish within ",
                                      timeout.count() / 1000, " s; see logs/", task.name, ".log")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // waiting on a pid
  }
  if (!child->succeeded()) {
    return failure_.Fail(task.name, absl::InternalError(absl::StrCat(
                                        task.description, " ", child->ExitDescription(),
                                        "; see logs/", task.name, ".log: ", LastLogLine(*child))));
  }
  return absl::OkStatus();
}

absl::Status LocalLauncher::Start(const ServiceSpec& service) {
  Child c;
  c.spec = service;
  c.port_file = paths_.PortFile(service.name);
  if (service.metrics) {
    c.metrics_port_file = paths_.MetricsPortFile(service.name);
  }
  if (hosts_) {
    // The evaluator stays with the orchestrator on the head; servers and workers spread out.
    c.host =
        service.role == ServiceRole::kEvaluator ? &hosts_->head() : &hosts_->ForService(placed_++);
  }
  // A free port, held for the service until the run ends (port_reservation.h); the service
  // reports it in port_file once it listens.
  auto reserved =
      PortReservation::Reserve(ListenHost(c), c.host != nullptr ? c.host->network_namespace : "");
  if (!reserved.ok()) return failure_.Fail(service.name, reserved.status());
  c.reserved_port = std::move(*reserved);
  absl::Status launched = Launch(c, absl::StrCat(ListenHost(c), ":", c.reserved_port->port()));
  // Kept even when the quota failed, so that stopping the run ends this process too.
  if (c.process != nullptr) children_.push_back(std::move(c));
  return launched;
}

absl::Status LocalLauncher::Launch(Child& c, const std::string& listen) {
  const ServiceSpec& service = c.spec;
  std::vector<std::string> argv = {absl::StrCat(bin_dir_, "/", service.binary), "--listen", listen,
                                   "--port-file", c.port_file};
  if (!c.metrics_port_file.empty()) {
    // A free loopback port each time: a restarted process need not get its old one back, as
    // nothing but a scraper reading status.json dials it.
    argv.insert(argv.end(), {"--metrics-listen", absl::StrCat(ListenHost(c), ":0"),
                             "--metrics-port-file", c.metrics_port_file});
  }
  argv.insert(argv.end(), service.args.begin(), service.args.end());
  const std::string command = absl::StrJoin(argv, " ");
  STRATA_ASSIGN_OR_RETURN(c.process, Spawn(service.name, std::move(argv), c.host));
  nlohmann::json launched = {
      {"process", service.name}, {"pid", c.process->pid()}, {"command", command}};
  if (c.host != nullptr) launched["host"] = c.host->name;
  record_.Event(RunEvent::kLaunched, std::move(launched));
  absl::Status limited = absl::OkStatus();
  for (double fraction : service.cpu_fractions) {
    if (limited.ok()) limited = SlowDown(c, fraction);
  }
  return limited;
}

absl::Status LocalLauncher::Restart(const std::string& service) {
  for (Child& c : children_) {
    if (c.spec.name != service) continue;
    if (!c.process->Poll()) {
      return absl::FailedPreconditionError(absl::StrCat(service, " still runs; not restarted"));
    }
    if (c.address.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(service, " never listened; there is no address to restart it at"));
    }
    // The same port: the workers, the servers and this process know the service by its address,
    // and the launcher has held it since the first start, so no other program can have taken it
    // meanwhile (port_reservation.h).
    std::remove(c.port_file.c_str());
    if (!c.metrics_port_file.empty()) std::remove(c.metrics_port_file.c_str());
    c.metrics_url.clear();
    ++c.restarts;
    c.exit_reported = false;
    c.listening_again = false;
    return Launch(c, c.address);
  }
  return absl::NotFoundError(absl::StrCat("no service named ", service, " was started"));
}

bool LocalLauncher::Listening(const std::string& service) {
  for (Child& c : children_) {
    if (c.spec.name != service) continue;
    if (c.address.empty() || c.process->Poll()) return false;
    if (c.restarts == 0 || c.listening_again) return true;
    auto text = ReadFile(c.port_file);
    c.listening_again = text.ok() && !absl::StripAsciiWhitespace(*text).empty();
    if (c.listening_again) {
      record_.Event(RunEvent::kListening,
                    {{"process", c.spec.name}, {"address", c.address}, {"restarts", c.restarts}});
    }
    return c.listening_again;
  }
  return false;
}

// A real slow-down where cgroups allow it; otherwise the run is refused, saying why.
absl::Status LocalLauncher::SlowDown(const Child& c, double fraction) {
  const std::string& name = c.spec.name;
  // On an emulated host with a CPU group, the service's own quota nests inside the host's: a
  // process sits in one group of the hierarchy, and leaving the host's would free it of the
  // host's share.
  const bool nested = c.host != nullptr && !c.host->cpu_group.empty();
  auto limit =
      CpuLimit::Apply(c.process->pid(), fraction, absl::StrCat("strata-", ::getpid(), "-", name),
                      nested ? c.host->cpu_group : std::string("/sys/fs/cgroup/cpu"));
  if (limit.ok()) {
    record_.Event(RunEvent::kStraggler,
                  {{"process", name}, {"cpu_fraction", fraction}, {"cgroup", (*limit)->path()}});
    console_.Say(
        absl::StrFormat("%s runs under a CPU quota: %.0f%% of one core", name, fraction * 100));
    cpu_limits_.push_back(std::move(*limit));
    return absl::OkStatus();
  }
  record_.Event(RunEvent::kStragglerNotApplied,
                {{"process", name},
                 {"cpu_fraction", fraction},
                 {"reason", std::string(limit.status().message())}});
  return absl::FailedPreconditionError(absl::StrFormat(
      "the job asks for %s at %.0f%% of one core, but this machine does not let Strata set CPU "
      "quotas (%s); an experiment at other speeds than the spec says would mislead, so the run "
      "stops. Run as root where the cgroup-v1 cpu controller is mounted at /sys/fs/cgroup/cpu, "
      "or remove the CPU limits from the job spec",
      name, fraction * 100, limit.status().message()));
}

bool LocalLauncher::ReadPorts() {
  bool all = true;
  for (Child& c : children_) {
    if (!c.address.empty()) continue;
    auto text = ReadFile(c.port_file);
    int port = 0;
    if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0) {
      c.address = absl::StrCat(ListenHost(c), ":", port);
      record_.Event(RunEvent::kListening, {{"process", c.spec.name}, {"address", c.address}});
    } else {
      all = false;
    }
  }
  return all;
}

absl::StatusOr<std::vector<Endpoint>> LocalLauncher::WaitReady(
    std::chrono::milliseconds timeout, const std::function<absl::Status()>& keep_going) {
  const auto until = Clock::now() + timeout;
  while (!ReadPorts()) {
    STRATA_RETURN_IF_ERROR(keep_going());
    STRATA_RETURN_IF_ERROR(CheckExits());
    if (Clock::now() > until) {
      std::vector<std::string> missing;
      for (const Child& c : children_) {
        if (c.address.empty()) missing.push_back(c.spec.name);
      }
      return failure_.Fail(missing.front(),
                           absl::DeadlineExceededError(absl::StrCat(
                               absl::StrJoin(missing, ", "), " did not start listening within ",
                               timeout.count() / 1000, " s; see logs/")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // port files appear when they do
  }
  std::vector<Endpoint> endpoints;
  for (const Child& c : children_) {
    endpoints.push_back({c.spec.name, c.spec.role, c.address, c.spec.ring_address});
  }
  return endpoints;
}

absl::Status LocalLauncher::CheckExits() {
  std::vector<ServiceExit> exits = TakeExits();
  if (exits.empty()) return absl::OkStatus();
  return failure_.Fail(exits.front().service, exits.front().failure);
}

std::vector<ServiceExit> LocalLauncher::TakeExits() {
  std::vector<ServiceExit> exits;
  for (Child& c : children_) {
    if (c.exit_reported || !c.process->Poll()) continue;
    c.exit_reported = true;
    const std::string& name = c.spec.name;
    const std::string how = c.process->ExitDescription();
    record_.Event(RunEvent::kProcessExited,
                  {{"process", name}, {"pid", c.process->pid()}, {"how", how}});
    const std::string last = LastLogLine(*c.process);
    exits.push_back(
        {name, c.spec.role, how,
         absl::AbortedError(absl::StrCat(
             name, " (pid ", c.process->pid(), ") ", how, " during the run; see logs/", name,
             ".log", last.empty() ? "" : absl::StrCat(" (last line: ", last, ")")))});
  }
  return exits;
}

bool LocalLauncher::Running(const std::string& service) {
  for (Child& c : children_) {
    if (c.spec.name == service) return !c.process->Poll();
  }
  return false;
}

void LocalLauncher::StopAll(std::chrono::milliseconds wait) {
  std::vector<ChildProcess*> processes;
  for (Child& c : children_) processes.push_back(c.process.get());
  // Give Stop its chance (services flush logs and checkpoints), then signals.
  const auto until = Clock::now() + wait;
  for (ChildProcess* p : processes) {
    p->WaitFor(
        std::max(std::chrono::milliseconds(0),
                 std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now())));
  }
  TerminateAll(processes, std::chrono::seconds(3));
  nlohmann::json exits = nlohmann::json::array();
  for (const Child& c : children_) {
    exits.push_back({{"process", c.spec.name},
                     {"pid", c.process->pid()},
                     {"how", c.process->ExitDescription()}});
  }
  record_.Event(RunEvent::kProcessesEnded, {{"processes", exits}});
  cpu_limits_.clear();  // the cgroups are empty now
}

std::vector<ProcessSnapshot> LocalLauncher::Snapshot() {
  std::vector<ProcessSnapshot> out;
  for (Child& c : children_) {
    if (c.metrics_url.empty() && !c.metrics_port_file.empty()) {
      if (std::optional<int> port = ReadPortFile(c.metrics_port_file)) {
        c.metrics_url = absl::StrCat("http://", ListenHost(c), ":", *port, "/metrics");
      }
    }
    ProcessSnapshot p;
    p.name = c.spec.name;
    p.pid = c.process->pid();
    p.address = c.address;
    p.running = !c.process->exited();
    p.exit = c.process->ExitDescription();
    p.metrics = c.metrics_url;
    p.restarts = c.restarts;
    out.push_back(std::move(p));
  }
  return out;
}

std::string LocalLauncher::ListenHost(const Child& c) {
  return ListenHostOf(c.host);
}

std::string LocalLauncher::LastLogLine(const ChildProcess& process) {
  auto text = ReadFile(process.log_path());
  if (!text.ok()) return "";
  std::string t(absl::StripTrailingAsciiWhitespace(*text));
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace strata
