// kubectl as `strata submit`, `status`, `logs` and `delete` run it (docs/deploy.md, "strata
// submit"): one child process per call (services/common/process/child_process.h: its own process
// group, killed with strata), stdout read back apart from stderr, and a deadline on every call: a
// kubectl still running then is killed with its whole process group. No shell is involved.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

namespace strata {

// The kubectl to run: `flag` (--kubectl) when given, which must be executable; else the first
// `kubectl` on PATH. NotFound, saying how to install kubectl or name it with --kubectl.
absl::StatusOr<std::string> FindKubectl(const std::string& flag);

struct KubectlOptions {
  std::string path;  // from FindKubectl
  // Appended to every call as `-n NAMESPACE`. Default: none (kubectl's current context).
  std::string namespace_name;
  // Longest a call may take; it is then killed. Default 60 s: a kubectl that cannot reach its
  // API server gives up well before (about 30 s); raise it only for a very slow cluster.
  std::chrono::milliseconds call_timeout{60000};
};

class Kubectl {
 public:
  // Makes a private scratch directory (under $TMPDIR, else /tmp) for the calls' output.
  static absl::StatusOr<std::unique_ptr<Kubectl>> Create(KubectlOptions options);
  ~Kubectl();  // removes the scratch directory
  Kubectl(const Kubectl&) = delete;
  Kubectl& operator=(const Kubectl&) = delete;

  // Runs `kubectl ARGS -n NAMESPACE` and returns its stdout. Unavailable when it exits non-zero
  // (the message quotes the command and the end of its stderr), DeadlineExceeded when it was
  // killed at `timeout` (default: options.call_timeout).
  absl::StatusOr<std::string> Run(const std::vector<std::string>& args);
  absl::StatusOr<std::string> Run(const std::vector<std::string>& args,
                                  std::chrono::milliseconds timeout);

  // Replaces this process with `kubectl ARGS -n NAMESPACE`, its output the terminal's, for a call
  // that runs until the user stops it (`logs -f`): no deadline, nothing read back. Returns only
  // when kubectl cannot be executed.
  absl::Status Exec(const std::vector<std::string>& args) const;

  // The command as a user would type it, for messages: "kubectl get job x -n default".
  std::string CommandLine(const std::vector<std::string>& args) const;

  void set_namespace(std::string namespace_name) {
    options_.namespace_name = std::move(namespace_name);
  }
  const KubectlOptions& options() const { return options_; }

 private:
  Kubectl(KubectlOptions options, std::string scratch)
      : options_(std::move(options)), scratch_(std::move(scratch)) {}
  std::vector<std::string> WithNamespace(const std::vector<std::string>& args) const;

  KubectlOptions options_;
  std::string scratch_;
};

}  // namespace strata
