#include "orchestrator/launch/kubectl.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "services/common/process/child_process.h"
#include "services/common/process/run_tool.h"

namespace strata {
namespace {

constexpr char kInstallHint[] =
    "install kubectl (https://kubernetes.io/docs/tasks/tools/; on Debian the package "
    "kubernetes-client) and configure it for your cluster, or name it with --kubectl PATH";

bool Executable(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0 && !std::filesystem::is_directory(path);
}

// A word of a command line as a shell would need it; only for messages.
std::string Quoted(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789-_./=:,@%+") == std::string::npos;
  if (plain) return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

absl::StatusOr<std::string> FindKubectl(const std::string& flag) {
  if (!flag.empty()) {
    if (Executable(flag)) return flag;
    return absl::NotFoundError(
        absl::StrCat("--kubectl ", flag, ": not an executable file; ", kInstallHint));
  }
  if (std::optional<std::string> found = FindOnPath("kubectl")) return *found;
  return absl::NotFoundError(absl::StrCat("kubectl is not on PATH: ", kInstallHint));
}

absl::StatusOr<std::unique_ptr<Kubectl>> Kubectl::Create(KubectlOptions options) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/strata-kubectl-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create a scratch directory ", pattern, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<Kubectl>(new Kubectl(std::move(options), pattern));
}

Kubectl::~Kubectl() {
  std::error_code ignored;
  std::filesystem::remove_all(scratch_, ignored);
}

std::vector<std::string> Kubectl::WithNamespace(const std::vector<std::string>& args) const {
  std::vector<std::string> all = args;
  if (!options_.namespace_name.empty()) all.insert(all.end(), {"-n", options_.namespace_name});
  return all;
}

absl::Status Kubectl::Exec(const std::vector<std::string>& args) const {
  std::vector<std::string> words = {options_.path};
  for (const std::string& a : WithNamespace(args)) words.push_back(a);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  // The process becomes kubectl: no destructor will run, so the scratch directory (which only
  // Run's captured output uses) goes now.
  std::error_code ignored;
  std::filesystem::remove_all(scratch_, ignored);
  ::execv(options_.path.c_str(), argv.data());
  return absl::FailedPreconditionError(
      absl::StrCat("cannot run ", options_.path, ": ", std::strerror(errno)));
}

std::string Kubectl::CommandLine(const std::vector<std::string>& args) const {
  std::vector<std::string> words = {"kubectl"};
  for (const std::string& a : WithNamespace(args)) words.push_back(Quoted(a));
  return absl::StrJoin(words, " ");
}

absl::StatusOr<std::string> Kubectl::Run(const std::vector<std::string>& args) {
  return Run(args, options_.call_timeout);
}

absl::StatusOr<std::string> Kubectl::Run(const std::vector<std::string>& args,
                                         std::chrono::milliseconds timeout) {
  ToolRunOptions tool;
  tool.name = "kubectl";
  tool.argv = {options_.path};
  for (const std::string& a : WithNamespace(args)) tool.argv.push_back(a);
  tool.output_path = scratch_ + "/stdout";
  tool.errors_path = scratch_ + "/stderr";
  tool.timeout = timeout;
  auto run = RunTool(tool);
  if (!run.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", options_.path, ": ", run.status().message()));
  }
  if (!run->finished) {
    return absl::DeadlineExceededError(
        absl::StrCat("`", CommandLine(args), "` did not finish within ",
                     std::chrono::duration<double>(timeout).count(), " s and was killed"));
  }
  if (run->exit_code != 0) {
    const std::string tail = OutputTail(run->errors);
    return absl::UnavailableError(absl::StrCat("`", CommandLine(args), "` ", run->exit_description,
                                               tail.empty() ? "" : ": ", tail));
  }
  return std::move(run->output);
}

}  // namespace strata
