#include "orchestrator/run/control_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <vector>

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>

#include "services/common/base/status.h"
#include "services/common/wire/rpc.h"

namespace strata {

class RunControlServer::Service final : public v1::RunControl::Service {
 public:
  Service(std::function<v1::RunInfo()> info, RunPredictHandler predict)
      : info_(std::move(info)), predict_(std::move(predict)) {}

  grpc::Status GetRunInfo(grpc::ServerContext*, const v1::RunInfoRequest*,
                          v1::RunInfo* reply) override {
    *reply = info_();
    return grpc::Status::OK;
  }

  grpc::Status SwitchNow(grpc::ServerContext*, const v1::SwitchNowRequest*,
                         v1::SwitchNowReply* reply) override {
    switch_requested_.store(true);
    reply->set_queued(true);
    return grpc::Status::OK;
  }

  grpc::Status Predict(grpc::ServerContext*, const v1::RunPredictRequest* request,
                       v1::PredictReply* reply) override {
    if (!predict_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this run answers no predictions while it trains; its final model "
                          "answers once it has finished");
    }
    return predict_(*request, reply);
  }

  bool TakeSwitchRequest() { return switch_requested_.exchange(false); }

 private:
  const std::function<v1::RunInfo()> info_;
  const RunPredictHandler predict_;
  std::atomic<bool> switch_requested_{false};
};

namespace {

constexpr char kSocketName[] = "control.sock";
constexpr size_t kMaxSocketPath = 107;  // sun_path's 108 bytes with the terminating zero

// A fresh directory only this user can enter: `RUN_DIR/.control` (what a killed orchestrator left
// there goes first), or one mkdtemp makes when a socket path under the run directory is too long.
absl::StatusOr<std::string> MakeSocketDirectory(const std::string& run_dir) {
  // Absolute: status.json names it for commands started in any directory.
  std::error_code ec;
  const std::string in_run =
      std::filesystem::absolute(run_dir, ec).lexically_normal().string() + "/.control";
  if (in_run.size() + 1 + sizeof(kSocketName) - 1 <= kMaxSocketPath) {
    std::error_code ignored;
    std::filesystem::remove_all(in_run, ignored);
    if (::mkdir(in_run.c_str(), 0700) != 0 || ::chmod(in_run.c_str(), 0700) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot make ", in_run, " for the control socket: ", std::strerror(errno)));
    }
    return in_run;
  }
  std::string pattern = (std::filesystem::temp_directory_path() / "strata-control-XXXXXX").string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  // mkdtemp makes the directory with mode 0700.
  if (::mkdtemp(buffer.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a directory for the control socket (",
                                            pattern, "): ", std::strerror(errno)));
  }
  return std::string(buffer.data());
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunControlServer>> RunControlServer::Start(
    const std::string& run_dir, std::function<v1::RunInfo()> info, RunPredictHandler predict) {
  std::unique_ptr<RunControlServer> s(new RunControlServer());
  // The directory exists with mode 0700 before the socket is bound in it: nobody else can reach
  // the socket at any moment.
  STRATA_ASSIGN_OR_RETURN(s->dir_, MakeSocketDirectory(run_dir));
  s->socket_path_ = absl::StrCat(s->dir_, "/", kSocketName);
  s->service_ = std::make_unique<Service>(std::move(info), std::move(predict));
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  // The directory's mode is the access check: no run token (see the header).
  builder.AddListeningPort("unix:" + s->socket_path_, grpc::InsecureServerCredentials());
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr) {
    return absl::InternalError(absl::StrCat("cannot serve the control socket ", s->socket_path_));
  }
  return s;
}

RunControlServer::~RunControlServer() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_.reset();
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

bool RunControlServer::TakeSwitchRequest() { return service_->TakeSwitchRequest(); }

namespace {

std::unique_ptr<v1::RunControl::Stub> ControlStub(const std::string& socket_path) {
  // A Predict answer can be as large as any message of the run (gRPC's client default is 4 MiB).
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  return v1::RunControl::NewStub(grpc::CreateCustomChannel(
      "unix:" + socket_path, grpc::InsecureChannelCredentials(), args));
}

}  // namespace

absl::StatusOr<v1::RunInfo> GetRunInfo(const std::string& socket_path,
                                       std::chrono::milliseconds deadline) {
  if (socket_path.empty()) return absl::UnavailableError("the run publishes no control socket");
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(deadline));
  v1::RunInfo info;
  const grpc::Status s = ControlStub(socket_path)->GetRunInfo(&context, {}, &info);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("control socket ", socket_path));
  return info;
}

absl::Status RequestSwitchNow(const std::string& socket_path, const std::string& requested_by,
                              std::chrono::milliseconds deadline) {
  if (socket_path.empty()) return absl::UnavailableError("the run publishes no control socket");
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(deadline));
  v1::SwitchNowRequest request;
  request.set_requested_by(requested_by);
  v1::SwitchNowReply reply;
  const grpc::Status s = ControlStub(socket_path)->SwitchNow(&context, request, &reply);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("control socket ", socket_path));
  return absl::OkStatus();
}

absl::StatusOr<v1::PredictReply> PredictThroughRun(const std::string& socket_path,
                                                   const v1::RunPredictRequest& request,
                                                   std::chrono::milliseconds deadline) {
  if (socket_path.empty()) return absl::UnavailableError("the run publishes no control socket");
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(deadline));
  v1::PredictReply reply;
  const grpc::Status s = ControlStub(socket_path)->Predict(&context, request, &reply);
  if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("replica ", request.replica()));
  return reply;
}

OrchestratorLiveness ProbeOrchestrator(const std::string& control_socket, double status_updated_s) {
  if (control_socket.empty()) {
    const double age = static_cast<double>(std::time(nullptr)) - status_updated_s;
    return age > 60 ? OrchestratorLiveness::kGone : OrchestratorLiveness::kUnknown;
  }
  // A local call: seconds are generous even on a loaded machine. A server that is there but slow
  // (deadline passed) is alive; only a socket nobody serves is gone.
  const auto info = GetRunInfo(control_socket, std::chrono::seconds(10));
  if (info.ok() || info.status().code() == absl::StatusCode::kDeadlineExceeded)
    return OrchestratorLiveness::kAlive;
  return OrchestratorLiveness::kGone;
}

}  // namespace strata
