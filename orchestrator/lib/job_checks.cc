#include "orchestrator/lib/job_checks.h"

#include <unistd.h>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <yaml-cpp/yaml.h>

#include "services/common/dataset.h"
#include "services/common/files.h"

namespace strata {
namespace {

bool SetByOverride(const std::vector<std::string>& overrides, const std::string& key) {
  for (const std::string& o : overrides) {
    if (o.rfind(key + "=", 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::optional<int> ModelTensorCount(const std::string& arch) {
  // mlp: 3 linear layers (weight, bias). cnn: 2 convolutions and 2 linear layers (weight, bias).
  // ResNet-(6n+2): stem conv + BatchNorm (weight, bias, running mean, running var), 3n basic
  // blocks of 2 x (conv + BatchNorm), 2 projection shortcuts (conv + BatchNorm), linear head.
  auto resnet = [](int n) { return 5 + 3 * n * 10 + 2 * 5 + 2; };
  if (arch == "mlp") return 6;
  if (arch == "cnn") return 8;
  if (arch == "resnet20") return resnet(3);
  if (arch == "resnet32") return resnet(5);
  if (arch == "resnet56") return resnet(9);
  return std::nullopt;
}

int KeyLine(const std::string& yaml_text, const std::string& key) {
  try {
    YAML::Node node = YAML::Load(yaml_text);
    for (absl::string_view part : absl::StrSplit(key, '.')) {
      std::string name(part);
      std::optional<size_t> index;
      if (size_t bracket = name.find('['); bracket != std::string::npos) {
        index = std::stoul(name.substr(bracket + 1));
        name = name.substr(0, bracket);
      }
      if (!node.IsMap() || !node[name].IsDefined()) return 0;
      node = node[name];
      if (index) {
        if (!node.IsSequence() || *index >= node.size()) return 0;
        node = node[*index];
      }
    }
    return node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

absl::StatusOr<CheckedJob> LoadAndCheckJob(const std::string& path,
                                           const JobCheckOptions& options) {
  CheckedJob job;
  {
    auto text = ReadFile(path);
    if (!text.ok()) return text.status();
    job.yaml_text = *text;
  }
  {
    auto spec = ParseJobSpec(job.yaml_text, path, options.overrides);
    if (!spec.ok()) return spec.status();
    job.spec = *spec;
  }
  const JobSpec& spec = job.spec;
  std::vector<std::string> errors;
  auto error = [&](const std::string& key, const std::string& what) {
    const int line = KeyLine(job.yaml_text, key);
    if (line > 0) {
      errors.push_back(absl::StrCat(path, ":", line, ": ", key, ": ", what));
    } else if (SetByOverride(options.overrides, key)) {
      errors.push_back(absl::StrCat(path, ": ", key, " (from --set): ", what));
    } else {
      errors.push_back(absl::StrCat(path, ": ", key, " (default): ", what));
    }
  };

  // The data files: a typo in dataset.path should fail here, not minutes later in every worker.
  if (auto files = DatasetFiles(DatasetOptionsFor(spec.dataset, spec.training.seed)); !files.ok()) {
    error("dataset.path", absl::StrCat("data set '", spec.dataset.name,
                                       "' not usable: ", files.status().message()));
  } else {
    for (const std::string& f : *files) {
      if (::access(f.c_str(), R_OK) != 0) error("dataset.path", absl::StrCat("cannot read ", f));
    }
  }

  // Parameter servers own whole tensors: one more server than tensors would own nothing.
  if (auto tensors = ModelTensorCount(spec.model.arch);
      tensors && spec.cluster.parameter_servers > *tensors) {
    error("cluster.parameter_servers",
          absl::StrCat(spec.cluster.parameter_servers, " parameter servers but model '",
                       spec.model.arch, "' has only ", *tensors,
                       " tensors to partition (each server owns whole tensors)"));
  }

  if (spec.strategy.kind == "switch" && spec.strategy.rule == "at_fraction") {
    // The parser bounds at_fraction to (0, 1); a switch after the last epoch would never happen.
    const double at = spec.strategy.at_fraction * spec.training.epochs;
    if (at > spec.training.epochs - 1e-9) {
      error("strategy.at_fraction", "the switch would come after the last epoch");
    }
  }
  if (spec.strategy.kind == "switch" && spec.strategy.rule == "empirical" &&
      spec.training.epochs < spec.strategy.window + 1) {
    error("strategy.window",
          absl::StrCat("the empirical rule needs window + 1 = ", spec.strategy.window + 1,
                       " evaluated epochs but training.epochs is ", spec.training.epochs,
                       ": it could never fire"));
  }
  if (spec.strategy.kind != "allreduce" && spec.cluster.parameter_servers < 1) {
    error("cluster.parameter_servers", "strategy needs at least one parameter server");
  }
  if (options.for_run && spec.launcher.kind != "local") {
    error("launcher.kind", absl::StrCat("'", spec.launcher.kind,
                                        "' is not driven by `strata run` on this machine; "
                                        "only 'local' is"));
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return job;
}

}  // namespace strata
