// `kubectl kustomize` on rendered Kubernetes files, with the kubectl this machine has. Debian 12
// ships kubectl 1.20 (package kubernetes-client, which scripts/install-deps.sh installs where no
// kubectl is), whose built-in kustomize (v2) predates two forms `strata render` writes in the
// overlays: a directory under `resources:` (there `bases:`) and `patches: - path: F` (there
// `patchesStrategicMerge: [F]`, the same strategic merge of the same file). With such a kubectl the
// files are copied and those two lines spelled the old way before the build; a newer kubectl builds
// them as rendered. Anything else old kustomize cannot read still fails the build.
#pragma once

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {

// The client's minor version (20 for 1.20), or -1 when kubectl does not say.
inline int KubectlMinorVersion() {
  const CommandResult r = RunCommand("kubectl version --client -o json");
  std::smatch m;
  static const std::regex minor("\"minor\":\\s*\"(\\d+)");
  if (r.exit_code != 0 || !std::regex_search(r.output, m, minor)) return -1;
  return std::stoi(m[1]);
}

// The overlay kustomization of `text` in kustomize v2's spelling.
inline std::string InKustomizeV2Spelling(const std::string& text) {
  std::string s = std::regex_replace(
      text, std::regex("(^|\\n)resources:\\n(  - \\.\\./\\.\\./base)"), "$1bases:\n$2");
  s = std::regex_replace(s, std::regex("(^|\\n)patches:\\n"), "$1patchesStrategicMerge:\n");
  // Its entries are file names, not {path: ...} objects.
  return std::regex_replace(s, std::regex("\\n  - path: "), "\n  - ");
}

// Builds `root`/`target` (target: "base", "overlays/small", ...) with kubectl kustomize; stdout
// only (a newer kubectl's warnings go to stderr). `root` is the directory `strata render` wrote.
inline CommandResult KustomizeBuild(const std::string& root, const std::string& target) {
  namespace fs = std::filesystem;
  static const int minor = KubectlMinorVersion();
  std::string dir = root;
  std::string copy;
  if (minor >= 0 && minor < 21) {
    copy = MakeTempDir("kustomize-v2");
    fs::copy(root, copy, fs::copy_options::recursive);
    for (const auto& entry : fs::recursive_directory_iterator(copy + "/overlays")) {
      if (entry.path().filename() != "kustomization.yaml") continue;
      const std::string text = Slurp(entry.path().string());
      WriteText(entry.path().string(), InKustomizeV2Spelling(text));
    }
    dir = copy;
  }
  const std::string out = MakeTempDir("kustomize-out") + "/built.yaml";
  // In a subshell, so that only stderr comes back through the pipe.
  CommandResult r = RunCommand("(kubectl kustomize " + dir + "/" + target + " > " + out + ")");
  if (r.exit_code == 0) r.output = Slurp(out);
  fs::remove_all(fs::path(out).parent_path());
  if (!copy.empty()) fs::remove_all(copy);
  return r;
}

}  // namespace strata::testing
