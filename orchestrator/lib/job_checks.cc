#include "orchestrator/lib/job_checks.h"

#include <unistd.h>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <yaml-cpp/yaml.h>

#include "orchestrator/lib/switch_rule.h"
#include "services/common/base/files.h"
#include "services/common/ml/dataset.h"
#include "services/common/wire/tls.h"

namespace strata {

namespace {

// Why a job with TLS cannot run in containers yet; `carrier` names what refuses it.
std::string TlsInContainersRefusal(const std::string& mode, const std::string& carrier) {
  return absl::StrCat(
      "'", mode, "' is not carried by ", carrier,
      " yet: each container would need the certificates as a secret and the health probes a TLS "
      "client (Kubernetes' gRPC probes speak no TLS); use launcher.kind local, or security.tls "
      "off on a network only the job's containers reach (docs/deploy.md)");
}

}  // namespace

std::optional<int> ModelTensorCount(const std::string& arch) {
  // mlp: 3 linear layers (weight, bias). cnn: 2 convolutions and 2 linear layers (weight, bias).
  // ResNet-(6n+2): stem conv + BatchNorm (weight, bias, running mean, running var), 3n basic
  // blocks of 2 x (conv + BatchNorm), 2 projection shortcuts (conv + BatchNorm), linear head.
  auto resnet = [](int n) { return 5 + 3 * n * 10 + 2 * 5 + 2; };
  if (arch == "mlp" || arch == "mlp_wide") return 6;
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
  // The schema's errors come first, then these checks, all in one report: a typo elsewhere must
  // not hide that the data files are missing. A check whose inputs the schema refused stays
  // silent, since it would only judge the defaults standing in for them.
  JobSpecReading reading = ReadJobSpec(job.yaml_text, path, options.overrides);
  std::vector<std::string> errors = reading.errors;
  job.spec = reading.spec;
  const JobSpec& spec = job.spec;
  auto usable = [&](std::initializer_list<const char*> keys) {
    if (!reading.mapping_read) return false;
    for (const char* key : keys) {
      if (reading.Refused(key)) return false;
    }
    return true;
  };
  auto error = [&](const std::string& key, const std::string& what) {
    // A key neither the file nor --set gives is blamed on its section (or the file), and says so.
    const bool given = reading.sources.count(key) > 0;
    errors.push_back(absl::StrCat(reading.Where(key), ": ", key, ": ", what,
                                  given ? "" : " (not set: the default)"));
  };

  // The data files: a typo in dataset.path should fail here, not minutes later in every worker.
  if (usable({"dataset", "training.seed"})) {
    if (auto files = DatasetFiles(DatasetOptionsFor(spec.dataset, spec.training.seed));
        !files.ok()) {
      error("dataset.path", absl::StrCat("data set '", spec.dataset.name,
                                         "' not usable: ", files.status().message()));
    } else {
      for (const std::string& f : *files) {
        if (::access(f.c_str(), R_OK) != 0) error("dataset.path", absl::StrCat("cannot read ", f));
      }
    }
  }

  // Parameter servers own whole tensors: one more server than tensors would own nothing.
  if (auto tensors = ModelTensorCount(spec.model.arch);
      usable({"model.arch", "cluster.parameter_servers"}) && tensors &&
      spec.cluster.parameter_servers > *tensors) {
    error("cluster.parameter_servers",
          absl::StrCat(spec.cluster.parameter_servers, " parameter servers but model '",
                       spec.model.arch, "' has only ", *tensors,
                       " tensors to partition (each server owns whole tensors)"));
  }

  if (usable({"strategy.kind", "strategy.rule", "strategy.at_fraction", "training.epochs"}) &&
      spec.strategy.kind == "switch" && spec.strategy.rule == "at_fraction") {
    // The run aims the switch at the boundary after epoch SwitchEpoch() (SwitchPolicy::Observe),
    // and a switch at or after the last step is skipped (SwitchController::Decide): the boundary
    // after the last epoch is the end of training, so the switch must come before it.
    const int epochs = spec.training.epochs;
    const int64_t switch_epoch =
        AtFractionSwitchRule(spec.strategy.at_fraction, epochs).SwitchEpoch();
    if (switch_epoch >= epochs) {
      error("strategy.at_fraction",
            epochs < 2
                ? absl::StrCat("a switch needs an epoch boundary before the end of training, "
                               "and training.epochs is ",
                               epochs)
                : absl::StrFormat(
                      "ceil(%g x %d epochs) puts the switch after epoch %d, where training "
                      "ends: it would never happen (use at most %d/%d)",
                      spec.strategy.at_fraction, epochs, switch_epoch, epochs - 1, epochs));
    }
  }
  if (usable({"strategy.kind", "strategy.rule", "strategy.window", "training.epochs"}) &&
      spec.strategy.kind == "switch" && spec.strategy.rule == "empirical" &&
      spec.training.epochs < spec.strategy.window + 1) {
    error("strategy.window",
          absl::StrCat("the empirical rule needs window + 1 = ", spec.strategy.window + 1,
                       " evaluated epochs but training.epochs is ", spec.training.epochs,
                       ": it could never fire"));
  }
  if (usable({"strategy.kind", "cluster.parameter_servers"}) && spec.strategy.kind != "allreduce" &&
      spec.cluster.parameter_servers < 1) {
    error("cluster.parameter_servers", "strategy needs at least one parameter server");
  }
  // The certificates of a job that names its own: every file a service will load, checked now
  // rather than in each service at start (docs/security.md, "Transport security").
  if (usable({"security"}) && spec.security.tls != "off" && !spec.security.tls_dir.empty()) {
    TlsSettings settings;
    settings.mode = *TlsModeFromName(spec.security.tls);
    settings.dir = spec.security.tls_dir;
    settings.server_name = spec.security.tls_server_name;
    if (auto material = LoadTlsMaterial(settings, TlsUse::kServerAndClient); !material.ok()) {
      error("security.tls_dir", std::string(material.status().message()));
    }
  }
  if (usable({"launcher.kind", "security.tls"}) && spec.launcher.kind != "local" &&
      spec.security.tls != "off") {
    error("security.tls",
          TlsInContainersRefusal(spec.security.tls,
                                 absl::StrCat("launcher.kind ", spec.launcher.kind)));
  }
  if (usable({"launcher.kind"}) && options.for_run && spec.launcher.kind == "kubernetes") {
    error("launcher.kind", "'kubernetes' jobs go to a cluster with `strata submit` (or `strata "
                           "render` for the files); `strata run` drives 'local' and 'compose'");
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return job;
}

absl::StatusOr<JobSpec> LoadContainerJob(const std::string& path,
                                         const std::vector<std::string>& overrides) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  JobSpecReading reading = ReadJobSpec(*text, path, overrides);
  if (!reading.errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(reading.errors, "\n"));
  }
  const JobSpec* spec = &reading.spec;
  if (spec->security.tls != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        reading.Where("security.tls"), ": security.tls: ",
        TlsInContainersRefusal(spec->security.tls, "the compose and Kubernetes renderers")));
  }
  if (spec->strategy.kind != "allreduce") {
    const auto tensors = ModelTensorCount(spec->model.arch);
    if (tensors && spec->cluster.parameter_servers > *tensors) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cluster.parameter_servers: ", spec->cluster.parameter_servers,
                       " servers for the ", *tensors, " tensors of model ", spec->model.arch,
                       "; use at most ", *tensors));
    }
  }
  return *spec;
}

}  // namespace strata
