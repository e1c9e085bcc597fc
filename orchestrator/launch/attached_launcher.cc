#include "orchestrator/launch/attached_launcher.h"

#include <thread>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/string_view.h>
#include <absl/strings/strip.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "services/common/wire/rpc.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// Between health checks of a service that is not serving yet: its start-up (loading LibTorch and
// the data set) takes seconds, so this costs nothing and spares the log.
constexpr std::chrono::milliseconds kHealthPollInterval{500};
constexpr std::chrono::milliseconds kHealthCallDeadline{2000};

bool Serving(grpc::health::v1::Health::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(kHealthCallDeadline));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub.Check(&context, {}, &response);
  return status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::StatusOr<std::string> Indexed(const std::vector<std::string>& addresses,
                                    absl::string_view index_text, const std::string& name,
                                    const char* flag) {
  size_t index = 0;
  if (!absl::SimpleAtoi(index_text, &index) || index >= addresses.size()) {
    return absl::NotFoundError(absl::StrCat("the job has a service ", name, " but ", flag,
                                            " gives ", addresses.size(), " address(es)"));
  }
  return addresses[index];
}

}  // namespace

absl::StatusOr<std::string> AttachedAddress(const AttachedServices& services,
                                            const std::string& name) {
  absl::string_view rest = name;
  if (absl::ConsumePrefix(&rest, "ps-")) {
    return Indexed(services.parameter_servers, rest, name, "--parameter-servers");
  }
  if (absl::ConsumePrefix(&rest, "worker-")) {
    return Indexed(services.workers, rest, name, "--workers");
  }
  if (name == "evaluator" && !services.evaluator.empty()) return services.evaluator;
  return absl::NotFoundError(absl::StrCat("no address was given for the job's service ", name));
}

AttachedLauncher::AttachedLauncher(AttachedServices services, RunRecord& record)
    : services_(std::move(services)), record_(record) {}

absl::Status AttachedLauncher::RunTask(const TaskSpec& task, std::chrono::milliseconds /*timeout*/,
                                       const std::function<absl::Status()>& keep_going) {
  // The platform ran it before this process started (compose's one-shot sharder service, the
  // Kubernetes Job's init container); what it wrote is read and checked by the caller.
  record_.Event(RunEvent::kLaunched, {{"process", task.name}, {"ran_before_the_orchestrator", true}});
  return keep_going();
}

absl::Status AttachedLauncher::Start(const ServiceSpec& service) {
  absl::StatusOr<std::string> address = AttachedAddress(services_, service.name);
  if (!address.ok()) return address.status();
  Endpoint e;
  e.service = service.name;
  e.role = service.role;
  e.address = *address;  // across containers the ring runs over the service address
  endpoints_.push_back(std::move(e));
  record_.Event(RunEvent::kLaunched, {{"process", service.name}, {"address", *address}});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Endpoint>> AttachedLauncher::WaitReady(
    std::chrono::milliseconds timeout, const std::function<absl::Status()>& keep_going) {
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>> stubs;
  for (const Endpoint& e : endpoints_) {
    stubs.push_back(grpc::health::v1::Health::NewStub(MakeChannel(e.address)));
  }
  std::vector<bool> ready(endpoints_.size(), false);
  const auto until = Clock::now() + timeout;
  while (true) {
    std::vector<std::string> silent;
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      if (!ready[i] && Serving(*stubs[i])) {
        ready[i] = true;
        record_.Event(RunEvent::kListening,
                      {{"process", endpoints_[i].service}, {"address", endpoints_[i].address}});
      }
      if (!ready[i]) silent.push_back(absl::StrCat(endpoints_[i].service, " (", endpoints_[i].address, ")"));
    }
    if (silent.empty()) return endpoints_;
    if (absl::Status s = keep_going(); !s.ok()) return s;
    if (Clock::now() >= until) {
      return absl::DeadlineExceededError(absl::StrCat(
          "not serving after ", timeout.count() / 1000, " s (standard gRPC health check): ",
          absl::StrJoin(silent, ", ")));
    }
    std::this_thread::sleep_for(kHealthPollInterval);
  }
}

}  // namespace strata
