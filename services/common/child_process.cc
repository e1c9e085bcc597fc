#include "services/common/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/numbers.h>
#include <absl/strings/strip.h>

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const ChildOptions& options) {
  if (::access(options.binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot run ", options.binary, ": ", std::strerror(errno)));
  }
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->name_ = options.name.empty() ? options.binary.substr(options.binary.rfind('/') + 1) : options.name;
  child->log_file_ = options.log_file;
  if (!options.port_file.empty()) ::unlink(options.port_file.c_str());

  // Everything the child needs is prepared before fork: after fork in a threaded process only
  // async-signal-safe calls are allowed until exec.
  std::vector<std::string> args = {options.binary};
  args.insert(args.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int log_fd = -1;
  if (!options.log_file.empty()) {
    log_fd = ::open(options.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(absl::StrCat("cannot open log ", options.log_file, ": ", std::strerror(errno)));
    }
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  child->pid_ = pid;
  if (!options.port_file.empty()) {
    absl::Status s = child->WaitForPort(options.port_file, options.start_deadline);
    if (!s.ok()) return s;  // the destructor kills the child
  }
  return child;
}

absl::Status ChildProcess::WaitForPort(const std::string& port_file,
                                       std::chrono::milliseconds deadline) {
  const auto give_up = Clock::now() + deadline;
  for (;;) {
    std::ifstream in(port_file);
    std::string text;
    if (in && std::getline(in, text)) {
      int port = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) && port > 0 && port < 65536) {
        port_ = port;
        return absl::OkStatus();
      }
    }
    if (Exited()) {
      return absl::UnavailableError(absl::StrCat(name_, " exited with code ", exit_code_,
                                                 " before it was ready; its log ends:\n", LogTail()));
    }
    if (Clock::now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(name_, " did not report its port within ",
                                                      deadline.count() / 1000, " s; its log ends:\n",
                                                      LogTail()));
    }
    // The port file is written once, atomically; poll it at a modest rate until the deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !Exited()) Kill();
}

std::string ChildProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

bool ChildProcess::Exited() {
  if (exited_) return true;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exited_ = true;
    exit_code_ = DecodeWaitStatus(status);
  } else if (r < 0 && errno == ECHILD) {
    exited_ = true;
    exit_code_ = -1;
  }
  return exited_;
}

absl::StatusOr<int> ChildProcess::WaitForExit(std::chrono::milliseconds deadline) {
  const auto give_up = Clock::now() + deadline;
  while (!Exited()) {
    if (Clock::now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(name_, " (pid ", pid_, ") still runs"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return exit_code_;
}

void ChildProcess::Terminate(std::chrono::milliseconds grace) {
  if (Exited()) return;
  ::kill(pid_, SIGTERM);
  if (!WaitForExit(grace).ok()) Kill();
}

void ChildProcess::Kill() {
  if (Exited()) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  if (::waitpid(pid_, &status, 0) == pid_) exit_code_ = DecodeWaitStatus(status);
  exited_ = true;
}

std::string ChildProcess::LogTail(size_t max_bytes) const {
  if (log_file_.empty()) return "(no log file)";
  std::ifstream in(log_file_, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (text.size() > max_bytes) text = "..." + text.substr(text.size() - max_bytes);
  return text;
}

}  // namespace strata
