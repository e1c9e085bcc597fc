#include "services/common/job_spec.h"

#include <functional>
#include <set>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <yaml-cpp/yaml.h>

#include "services/common/files.h"

namespace strata {
namespace {

bool OneOf(const std::string& v, const std::vector<std::string>& allowed) {
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

// Walks the YAML tree, fills the spec and collects every problem with its key and line.
class SpecReader {
 public:
  explicit SpecReader(std::string origin) : origin_(std::move(origin)) {}

  void Error(const YAML::Node& at, const std::string& key, const std::string& what) {
    if (at.IsDefined() && at.Mark().line >= 0) {
      errors_.push_back(absl::StrCat(origin_, ":", at.Mark().line + 1, ": ", key, ": ", what));
    } else {
      errors_.push_back(absl::StrCat(origin_, ": ", key, ": ", what));
    }
  }

  // Checks that `node` is a map whose keys are all in `allowed`.
  bool Map(const YAML::Node& node, const std::string& path, const std::set<std::string>& allowed) {
    if (!node.IsDefined() || node.IsNull()) return false;
    if (!node.IsMap()) {
      Error(node, path.empty() ? "(top level)" : path, "expected a mapping of keys");
      return false;
    }
    for (const auto& kv : node) {
      const std::string key = kv.first.Scalar();
      if (!allowed.count(key)) {
        Error(kv.first, Join(path, key),
              absl::StrCat("unknown key (allowed: ", absl::StrJoin(allowed, ", "), ")"));
      }
    }
    return true;
  }

  template <typename T>
  void Field(const YAML::Node& map, const std::string& path, const char* key, T* out,
             const std::function<std::string(const T&)>& check = {}) {
    const YAML::Node node = map[key];
    if (!node.IsDefined() || node.IsNull()) return;
    const std::string full = Join(path, key);
    T value;
    if (!node.IsScalar() || !YAML::convert<T>::decode(node, value)) {
      Error(node, full, absl::StrCat("expected ", TypeName<T>(), ", got '", Describe(node), "'"));
      return;
    }
    if (check) {
      std::string problem = check(value);
      if (!problem.empty()) {
        Error(node, full, problem);
        return;
      }
    }
    *out = value;
  }

  template <typename T>
  void List(const YAML::Node& map, const std::string& path, const char* key, std::vector<T>* out) {
    const YAML::Node node = map[key];
    if (!node.IsDefined() || node.IsNull()) return;
    const std::string full = Join(path, key);
    if (!node.IsSequence()) {
      Error(node, full, absl::StrCat("expected a list of ", TypeName<T>()));
      return;
    }
    out->clear();
    for (size_t i = 0; i < node.size(); ++i) {
      T value;
      if (!node[i].IsScalar() || !YAML::convert<T>::decode(node[i], value)) {
        Error(node[i], absl::StrCat(full, "[", i, "]"), absl::StrCat("expected ", TypeName<T>()));
        continue;
      }
      out->push_back(value);
    }
  }

  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : absl::StrCat(path, ".", key);
  }

  const std::vector<std::string>& errors() const { return errors_; }

 private:
  template <typename T>
  static const char* TypeName() {
    if constexpr (std::is_same_v<T, std::string>) return "a string";
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    if constexpr (std::is_integral_v<T>) return "an integer";
    return "a number";
  }
  static std::string Describe(const YAML::Node& node) {
    if (node.IsScalar()) return node.Scalar();
    if (node.IsSequence()) return "a list";
    if (node.IsMap()) return "a mapping";
    return "nothing";
  }

  std::string origin_;
  std::vector<std::string> errors_;
};

std::function<std::string(const int&)> AtLeast(int min) {
  return
      [min](const int& v) { return v < min ? absl::StrCat("must be >= ", min, ", got ", v) : ""; };
}
std::function<std::string(const double&)> NonNegative() {
  return [](const double& v) { return v < 0 ? absl::StrCat("must be >= 0, got ", v) : ""; };
}
std::function<std::string(const std::string&)> Among(std::vector<std::string> allowed) {
  return [allowed](const std::string& v) {
    return OneOf(v, allowed)
               ? std::string()
               : absl::StrCat("'", v, "' is not one of ", absl::StrJoin(allowed, ", "));
  };
}

void ReadSpec(const YAML::Node& root, SpecReader& r, JobSpec* spec) {
  if (!r.Map(root, "",
             {"name", "dataset", "model", "training", "cluster", "sharding", "strategy",
              "launcher"})) {
    if (!root.IsDefined() || root.IsNull()) r.Error(root, "(top level)", "the job spec is empty");
    return;
  }
  r.Field<std::string>(root, "", "name", &spec->name, [](const std::string& v) {
    if (v.empty() || v.size() > 63) return std::string("must be 1 to 63 characters");
    for (char c : v) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) {
        return std::string(
            "may hold letters, digits, '-' and '_' only (it names directories and pods)");
      }
    }
    return std::string();
  });

  if (YAML::Node n = root["dataset"];
      r.Map(n, "dataset", {"name", "path", "label_set", "max_train", "max_test"})) {
    r.Field<std::string>(n, "dataset", "name", &spec->dataset.name,
                         Among({"fashion-mnist", "mnist", "cifar10", "cifar100", "synthetic"}));
    r.Field<std::string>(n, "dataset", "path", &spec->dataset.path);
    r.Field<std::string>(n, "dataset", "label_set", &spec->dataset.label_set,
                         Among({"fine", "coarse"}));
    auto non_negative = [](const int64_t& v) {
      return v < 0 ? std::string("must be >= 0") : std::string();
    };
    r.Field<int64_t>(n, "dataset", "max_train", &spec->dataset.max_train, non_negative);
    r.Field<int64_t>(n, "dataset", "max_test", &spec->dataset.max_test, non_negative);
  }
  if (YAML::Node n = root["model"]; r.Map(n, "model", {"arch"})) {
    r.Field<std::string>(n, "model", "arch", &spec->model.arch, Among(KnownModelArchs()));
  }
  if (YAML::Node n = root["training"]; r.Map(n, "training",
                                             {"epochs", "batch_size", "lr", "momentum",
                                              "weight_decay", "lr_schedule", "seed", "threads"})) {
    TrainingSpec& t = spec->training;
    r.Field<int>(n, "training", "epochs", &t.epochs, AtLeast(1));
    r.Field<int>(n, "training", "batch_size", &t.batch_size, AtLeast(1));
    r.Field<double>(n, "training", "lr", &t.lr, [](const double& v) {
      return v > 0 ? std::string() : absl::StrCat("must be > 0, got ", v);
    });
    r.Field<double>(n, "training", "momentum", &t.momentum, [](const double& v) {
      return v >= 0 && v < 1 ? std::string() : absl::StrCat("must be in [0, 1), got ", v);
    });
    r.Field<double>(n, "training", "weight_decay", &t.weight_decay, NonNegative());
    r.Field<uint64_t>(n, "training", "seed", &t.seed);
    r.Field<int>(n, "training", "threads", &t.threads, AtLeast(0));
    if (YAML::Node s = n["lr_schedule"];
        r.Map(s, "training.lr_schedule", {"milestones", "gamma"})) {
      r.List<int>(s, "training.lr_schedule", "milestones", &t.lr_schedule.milestones);
      r.Field<double>(
          s, "training.lr_schedule", "gamma", &t.lr_schedule.gamma, [](const double& v) {
            return v > 0 && v <= 1 ? std::string() : absl::StrCat("must be in (0, 1], got ", v);
          });
      for (size_t i = 1; i < t.lr_schedule.milestones.size(); ++i) {
        if (t.lr_schedule.milestones[i] <= t.lr_schedule.milestones[i - 1]) {
          r.Error(s["milestones"], "training.lr_schedule.milestones",
                  "must be strictly increasing");
          break;
        }
      }
    }
  }
  if (YAML::Node n = root["cluster"];
      r.Map(n, "cluster", {"workers", "parameter_servers", "threads_per_worker", "stragglers"})) {
    ClusterSpec& c = spec->cluster;
    r.Field<int>(n, "cluster", "workers", &c.workers, AtLeast(1));
    r.Field<int>(n, "cluster", "parameter_servers", &c.parameter_servers, AtLeast(1));
    r.Field<int>(n, "cluster", "threads_per_worker", &c.threads_per_worker, AtLeast(1));
    if (YAML::Node s = n["stragglers"]; s.IsDefined() && !s.IsNull()) {
      if (!s.IsSequence()) {
        r.Error(s, "cluster.stragglers", "expected a list of {worker, cpu_fraction}");
      } else {
        for (size_t i = 0; i < s.size(); ++i) {
          const std::string path = absl::StrCat("cluster.stragglers[", i, "]");
          StragglerSpec st;
          if (!r.Map(s[i], path, {"worker", "cpu_fraction"})) continue;
          if (!s[i]["worker"].IsDefined()) r.Error(s[i], path + ".worker", "is required");
          r.Field<int>(s[i], path, "worker", &st.worker, AtLeast(0));
          r.Field<double>(s[i], path, "cpu_fraction", &st.cpu_fraction, [](const double& v) {
            return v > 0 && v <= 1 ? std::string() : absl::StrCat("must be in (0, 1], got ", v);
          });
          c.stragglers.push_back(st);
        }
      }
    }
  }
  if (YAML::Node n = root["sharding"];
      r.Map(n, "sharding", {"method", "clusters", "pca_components", "max_iterations"})) {
    ShardingSpec& s = spec->sharding;
    r.Field<std::string>(n, "sharding", "method", &s.method,
                         Among({"random", "mod", "stratified", "distribution-aware"}));
    r.Field<int>(n, "sharding", "clusters", &s.clusters, AtLeast(1));
    r.Field<int>(n, "sharding", "pca_components", &s.pca_components, AtLeast(1));
    r.Field<int>(n, "sharding", "max_iterations", &s.max_iterations, AtLeast(1));
  }
  if (YAML::Node n = root["strategy"];
      r.Map(n, "strategy",
            {"kind", "consistency", "staleness", "rule", "at_fraction", "window",
             "threshold_percent", "ps_lr_scale"})) {
    StrategySpec& s = spec->strategy;
    r.Field<std::string>(n, "strategy", "kind", &s.kind, Among({"allreduce", "ps", "switch"}));
    r.Field<std::string>(n, "strategy", "consistency", &s.consistency,
                         Among({"asp", "bsp", "ssp"}));
    r.Field<int>(n, "strategy", "staleness", &s.staleness, AtLeast(0));
    r.Field<std::string>(n, "strategy", "rule", &s.rule, Among({"empirical", "at_fraction"}));
    r.Field<double>(n, "strategy", "at_fraction", &s.at_fraction, [](const double& v) {
      return v > 0 && v < 1 ? std::string() : absl::StrCat("must be in (0, 1), got ", v);
    });
    r.Field<int>(n, "strategy", "window", &s.window, AtLeast(1));
    r.Field<double>(n, "strategy", "threshold_percent", &s.threshold_percent, [](const double& v) {
      return v > 0 ? std::string() : absl::StrCat("must be > 0, got ", v);
    });
    r.Field<double>(n, "strategy", "ps_lr_scale", &s.ps_lr_scale, NonNegative());
    // `at_fraction` given means that rule unless a rule is named.
    if (n["at_fraction"].IsDefined() && !n["rule"].IsDefined()) s.rule = "at_fraction";
  }
  if (YAML::Node n = root["launcher"]; r.Map(n, "launcher", {"kind", "ring_transport"})) {
    r.Field<std::string>(n, "launcher", "kind", &spec->launcher.kind,
                         Among({"local", "compose", "kubernetes"}));
    r.Field<std::string>(n, "launcher", "ring_transport", &spec->launcher.ring_transport,
                         Among({"unix", "tcp"}));
  }
  // Cross-field checks.
  for (size_t i = 0; i < spec->cluster.stragglers.size(); ++i) {
    if (spec->cluster.stragglers[i].worker >= spec->cluster.workers) {
      r.Error(root["cluster"]["stragglers"][i]["worker"],
              absl::StrCat("cluster.stragglers[", i, "].worker"),
              absl::StrCat("worker ", spec->cluster.stragglers[i].worker, " does not exist (",
                           spec->cluster.workers, " workers)"));
    }
  }
  if (spec->training.batch_size < spec->cluster.workers) {
    r.Error(root["training"]["batch_size"], "training.batch_size",
            absl::StrCat("global batch ", spec->training.batch_size, " is smaller than the ",
                         spec->cluster.workers, " workers that split it"));
  }
}

absl::Status ApplyOverride(YAML::Node root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--set '", assignment, "': expected key=value"));
  }
  const std::vector<std::string> path = absl::StrSplit(assignment.substr(0, eq), '.');
  // yaml-cpp's operator[] returns handles; walk with a vector of nodes so assignment sticks.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    YAML::Node next = chain.back()[path[i]];
    if (!next.IsDefined() || next.IsNull()) {
      chain.back()[path[i]] = YAML::Node(YAML::NodeType::Map);
      next = chain.back()[path[i]];
    }
    chain.push_back(next);
  }
  YAML::Node value = YAML::Load(assignment.substr(eq + 1));
  chain.back()[path.back()] = value;
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& KnownModelArchs() {
  static const std::vector<std::string> archs = {"mlp", "cnn", "resnet20", "resnet32", "resnet56"};
  return archs;
}

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& origin,
                                     const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    for (const std::string& o : overrides) {
      if (!root.IsMap()) break;
      absl::Status s = ApplyOverride(root, o);
      if (!s.ok()) return s;
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": invalid YAML: ", e.msg));
  }
  JobSpec spec;
  SpecReader reader(origin);
  ReadSpec(root, reader, &spec);
  if (!reader.errors().empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(reader.errors(), "\n"));
  }
  return spec;
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path,
                                    const std::vector<std::string>& overrides) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseJobSpec(*text, path, overrides);
}

std::string JobSpecToYaml(const JobSpec& s) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << s.name;
  out << YAML::Key << "dataset" << YAML::Value << YAML::BeginMap << YAML::Key << "name"
      << YAML::Value << s.dataset.name << YAML::Key << "path" << YAML::Value << s.dataset.path
      << YAML::Key << "label_set" << YAML::Value << s.dataset.label_set << YAML::Key << "max_train"
      << YAML::Value << s.dataset.max_train << YAML::Key << "max_test" << YAML::Value
      << s.dataset.max_test << YAML::EndMap;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap << YAML::Key << "arch" << YAML::Value
      << s.model.arch << YAML::EndMap;
  const TrainingSpec& t = s.training;
  out << YAML::Key << "training" << YAML::Value << YAML::BeginMap << YAML::Key << "epochs"
      << YAML::Value << t.epochs << YAML::Key << "batch_size" << YAML::Value << t.batch_size
      << YAML::Key << "lr" << YAML::Value << t.lr << YAML::Key << "momentum" << YAML::Value
      << t.momentum << YAML::Key << "weight_decay" << YAML::Value << t.weight_decay << YAML::Key
      << "lr_schedule" << YAML::Value << YAML::BeginMap << YAML::Key << "milestones" << YAML::Value
      << YAML::Flow << t.lr_schedule.milestones << YAML::Key << "gamma" << YAML::Value
      << t.lr_schedule.gamma << YAML::EndMap << YAML::Key << "seed" << YAML::Value << t.seed
      << YAML::Key << "threads" << YAML::Value << t.threads << YAML::EndMap;
  const ClusterSpec& c = s.cluster;
  out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap << YAML::Key << "workers"
      << YAML::Value << c.workers << YAML::Key << "parameter_servers" << YAML::Value
      << c.parameter_servers << YAML::Key << "threads_per_worker" << YAML::Value
      << c.threads_per_worker << YAML::Key << "stragglers" << YAML::Value << YAML::BeginSeq;
  for (const auto& st : c.stragglers) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "worker" << YAML::Value << st.worker
        << YAML::Key << "cpu_fraction" << YAML::Value << st.cpu_fraction << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  const ShardingSpec& sh = s.sharding;
  out << YAML::Key << "sharding" << YAML::Value << YAML::BeginMap << YAML::Key << "method"
      << YAML::Value << sh.method << YAML::Key << "clusters" << YAML::Value << sh.clusters
      << YAML::Key << "pca_components" << YAML::Value << sh.pca_components << YAML::Key
      << "max_iterations" << YAML::Value << sh.max_iterations << YAML::EndMap;
  const StrategySpec& st = s.strategy;
  out << YAML::Key << "strategy" << YAML::Value << YAML::BeginMap << YAML::Key << "kind"
      << YAML::Value << st.kind << YAML::Key << "consistency" << YAML::Value << st.consistency
      << YAML::Key << "staleness" << YAML::Value << st.staleness << YAML::Key << "rule"
      << YAML::Value << st.rule << YAML::Key << "at_fraction" << YAML::Value << st.at_fraction
      << YAML::Key << "window" << YAML::Value << st.window << YAML::Key << "threshold_percent"
      << YAML::Value << st.threshold_percent << YAML::Key << "ps_lr_scale" << YAML::Value
      << st.ps_lr_scale << YAML::EndMap;
  out << YAML::Key << "launcher" << YAML::Value << YAML::BeginMap << YAML::Key << "kind"
      << YAML::Value << s.launcher.kind << YAML::Key << "ring_transport" << YAML::Value
      << s.launcher.ring_transport << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace strata
