#include "services/parameter_server/ps_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

#include "services/common/files.h"

namespace strata {
namespace {

std::string Tail(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return "(no log)";
  return text->size() > 2000 ? text->substr(text->size() - 2000) : *text;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsProcess>> PsProcess::Launch(const PsProcessOptions& o) {
  static std::atomic<int> counter{0};
  std::vector<std::string> args = {o.binary,
                                   "--config",
                                   o.config,
                                   "--partition",
                                   std::to_string(o.partition),
                                   "--partitions",
                                   std::to_string(o.partitions),
                                   "--workers",
                                   std::to_string(o.workers),
                                   "--train-examples",
                                   std::to_string(o.train_examples)};
  if (!o.consistency.empty()) args.insert(args.end(), {"--consistency", o.consistency});
  if (o.staleness >= 0) args.insert(args.end(), {"--staleness", std::to_string(o.staleness)});
  if (o.lr_scale > 0) args.insert(args.end(), {"--lr-scale", absl::StrCat(o.lr_scale)});
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
  const std::string log_path = absl::StrCat(work_dir, "/", name, ".log");
  args.insert(args.end(), {"--listen", "127.0.0.1:0", "--port-file", port_file});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0)
    return absl::InternalError(
        absl::StrCat("cannot create ", log_path, ": ", std::strerror(errno)));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(log_fd);
  std::unique_ptr<PsProcess> process(new PsProcess(pid, log_path));
  const auto give_up = std::chrono::steady_clock::now() + start_deadline;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->exited_ = true;
      return absl::InternalError(absl::StrCat(args[0], " exited with code ", ExitCode(status),
                                              " before serving; log:\n", Tail(log_path)));
    }
    if (auto text = ReadFile(port_file); text.ok()) {
      int port = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0) {
        process->port_ = port;
        return process;
      }
    }
    if (std::chrono::steady_clock::now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(args[0], " wrote no port file within ",
                                                      start_deadline.count(), " ms; log:\n",
                                                      Tail(log_path)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the port file
  }
}

PsProcess::~PsProcess() { Kill(); }

std::string PsProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

void PsProcess::Kill() {
  if (exited_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  exited_ = true;
}

absl::StatusOr<int> PsProcess::WaitForExit(std::chrono::milliseconds deadline) {
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      return ExitCode(status);
    }
    if (std::chrono::steady_clock::now() > give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("strata-ps (pid ", pid_, ") still running after ", deadline.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the child's exit
  }
}

}  // namespace strata
