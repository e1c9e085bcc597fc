#include "services/common/process/child_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <absl/strings/string_view.h>
#include <absl/strings/strip.h>

#include "services/common/wire/rpc_auth.h"

extern char** environ;

namespace strata {

std::vector<std::string> ChildEnvironment() {
  const std::string prefix = absl::StrCat(kRunTokenEnv, "=");
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, prefix)) env.emplace_back(*e);
  }
  const RpcAuth auth = CurrentRpcAuth();
  if (!auth.insecure && !auth.token.empty()) env.push_back(prefix + auth.token);
  return env;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  if (::access(options.argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(options.name, ": cannot execute ", options.argv[0],
                                            ": ", std::strerror(errno)));
  }
  const int log_fd =
      options.inherit_output
          ? STDERR_FILENO
          : ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(absl::StrCat(options.name, ": cannot open log ", options.log_path,
                                            ": ", std::strerror(errno)));
  }
  int out_fd = options.inherit_output ? STDOUT_FILENO : log_fd;
  // Closes what this function opened (not the inherited descriptors).
  auto close_fds = [&] {
    if (options.inherit_output) return;
    ::close(log_fd);
    if (out_fd != log_fd) ::close(out_fd);
  };
  if (!options.inherit_output && !options.stdout_path.empty()) {
    out_fd = ::open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out_fd < 0) {
      const int err = errno;
      ::close(log_fd);
      return absl::InternalError(absl::StrCat(options.name, ": cannot open ", options.stdout_path,
                                              ": ", std::strerror(err)));
    }
  }
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The run token reaches the child through its environment alone: the launcher's own
  // environment is left as it was, and /proc/PID/environ is readable only by the same user.
  const std::vector<std::string> env_strings =
      options.env.has_value() ? *options.env : ChildEnvironment();
  std::vector<char*> envp;
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  // An emulated host: its namespace and CPU group are opened here, entered by the child.
  int netns_fd = -1, cgroup_fd = -1;
  auto close_host_fds = [&] {
    if (netns_fd >= 0) ::close(netns_fd);
    if (cgroup_fd >= 0) ::close(cgroup_fd);
  };
  if (!options.network_namespace.empty()) {
    netns_fd = ::open(options.network_namespace.c_str(), O_RDONLY | O_CLOEXEC);
    if (netns_fd < 0) {
      const int err = errno;
      close_fds();
      return absl::NotFoundError(absl::StrCat(options.name, ": cannot open network namespace ",
                                              options.network_namespace, ": ", std::strerror(err)));
    }
  }
  if (!options.cpu_group.empty()) {
    const std::string procs = absl::StrCat(options.cpu_group, "/cgroup.procs");
    cgroup_fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (cgroup_fd < 0) {
      const int err = errno;
      close_fds();
      close_host_fds();
      return absl::NotFoundError(
          absl::StrCat(options.name, ": cannot join CPU group ", procs, ": ", std::strerror(err)));
    }
  }
  // What the child says before it gives up on entering its host (errno appended, as digits).
  std::vector<std::string> host_parts;
  for (const std::string* part : {&options.network_namespace, &options.cpu_group}) {
    if (!part->empty()) host_parts.push_back(*part);
  }
  const std::string host_failure = absl::StrCat(options.name, ": could not enter its host (",
                                                absl::StrJoin(host_parts, ", "), "): errno ");

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    close_fds();
    close_host_fds();
    return absl::InternalError(absl::StrCat(options.name, ": fork failed: ", std::strerror(err)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the orchestrator died before prctl took effect
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    // "0" moves the writing process (cgroup v1 and v2). The group before the namespace: nothing
    // of the child runs outside its host's CPU share.
    if ((cgroup_fd >= 0 && ::write(cgroup_fd, "0", 1) != 1) ||
        (netns_fd >= 0 && ::setns(netns_fd, CLONE_NEWNET) != 0)) {
      const int err = errno;
      char digits[12];  // formatted by hand: no library call that may allocate after fork
      int n = 0;
      for (int e = err > 0 ? err : 0; n == 0 || e > 0; e /= 10)
        digits[n++] = static_cast<char>('0' + e % 10);
      char text[13];
      for (int k = 0; k < n; ++k) text[k] = digits[n - 1 - k];
      text[n++] = '\n';
      ssize_t ignored = ::write(STDERR_FILENO, host_failure.data(), host_failure.size());
      ignored = ::write(STDERR_FILENO, text, static_cast<size_t>(n));
      (void)ignored;
      ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  close_fds();
  close_host_fds();
  // Also from the parent, so that a signal sent right after Spawn already finds the group.
  ::setpgid(pid, pid);
  return std::unique_ptr<ChildProcess>(new ChildProcess(options.name, options.log_path, pid));
}

ChildProcess::~ChildProcess() {
  if (!exited_) {
    Signal(SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

bool ChildProcess::Poll() {
  if (exited_) return true;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exited_ = true;
    wait_status_ = status;
  } else if (r < 0 && errno == ECHILD) {
    exited_ = true;  // reaped elsewhere; nothing more to learn
  }
  return exited_;
}

std::string ChildProcess::ExitDescription() const {
  if (!exited_) return "is running";
  if (WIFEXITED(wait_status_)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status_));
  if (WIFSIGNALED(wait_status_)) {
    const int sig = WTERMSIG(wait_status_);
    return absl::StrCat("was killed by signal ", sig, " (", ::strsignal(sig), ")");
  }
  return "ended";
}

bool ChildProcess::killed_by_signal() const { return exited_ && WIFSIGNALED(wait_status_); }

bool ChildProcess::succeeded() const {
  return exited_ && WIFEXITED(wait_status_) && WEXITSTATUS(wait_status_) == 0;
}

int ChildProcess::exit_code() const {
  if (WIFEXITED(wait_status_)) return WEXITSTATUS(wait_status_);
  if (WIFSIGNALED(wait_status_)) return 128 + WTERMSIG(wait_status_);
  return -1;
}

void ChildProcess::Signal(int signal) {
  if (exited_) return;
  // The group first (the service and anything it started), the pid as a fallback.
  if (::killpg(pid_, signal) != 0) ::kill(pid_, signal);
}

bool ChildProcess::WaitFor(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!Poll()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(20));  // polling a pid; no event to wait on
  }
  return true;
}

std::string LogTail(const std::string& log_path, size_t max_bytes) {
  std::ifstream in(log_path, std::ios::binary);
  if (!in) return "(no log)";
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (text.size() > max_bytes) text = "..." + text.substr(text.size() - max_bytes);
  return text;
}

std::string OutputTail(const std::string& text, size_t max_bytes) {
  std::string t(absl::StripAsciiWhitespace(text));
  if (t.size() > max_bytes) t = "..." + t.substr(t.size() - max_bytes);
  return t;
}

std::optional<std::string> FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) {
      return candidate;
    }
  }
  return std::nullopt;
}

std::optional<int> ReadPortFile(const std::string& port_file) {
  std::ifstream in(port_file);
  std::string text;
  int port = 0;
  if (in && std::getline(in, text) && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) &&
      port > 0 && port < 65536) {
    return port;
  }
  return std::nullopt;
}

absl::StatusOr<int> WaitForPortFile(ChildProcess& child, const std::string& port_file,
                                    std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    if (std::optional<int> port = ReadPortFile(port_file)) return *port;
    if (child.Poll()) {
      return absl::UnavailableError(absl::StrCat(child.name(), " ", child.ExitDescription(),
                                                 " before it was ready; its log ends:\n",
                                                 LogTail(child.log_path())));
    }
    if (std::chrono::steady_clock::now() >= until) {
      return absl::DeadlineExceededError(
          absl::StrCat(child.name(), " did not report its port within ", deadline.count() / 1000,
                       " s; its log ends:\n", LogTail(child.log_path())));
    }
    // The file is written once, atomically; nothing to wait on but the file system.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void TerminateAll(const std::vector<ChildProcess*>& children, std::chrono::milliseconds grace) {
  for (ChildProcess* c : children) {
    if (!c->Poll()) c->Signal(SIGTERM);
  }
  const auto until = std::chrono::steady_clock::now() + grace;
  for (ChildProcess* c : children) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    c->WaitFor(std::max(left, std::chrono::milliseconds(0)));
  }
  for (ChildProcess* c : children) {
    if (!c->Poll()) {
      c->Signal(SIGKILL);
      c->WaitFor(std::chrono::seconds(10));
    }
  }
}

}  // namespace strata
