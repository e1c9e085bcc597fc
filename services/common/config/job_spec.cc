#include "services/common/config/job_spec.h"

#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <yaml-cpp/yaml.h>

#include "services/common/base/files.h"

namespace strata {
namespace {

bool OneOf(const std::string& v, const std::vector<std::string>& allowed) {
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

// One `--set` assignment and the nodes it put into the tree (its value, and the sections and keys
// it had to create): a problem with any of them is blamed on the assignment, never on a line of
// the file it was not in.
struct OverrideNodes {
  std::string assignment;
  std::vector<YAML::Node> nodes;
};

bool Contains(const YAML::Node& tree, const YAML::Node& at) {
  if (tree.is(at)) return true;
  if (tree.IsMap()) {
    for (const auto& kv : tree) {
      if (Contains(kv.first, at) || Contains(kv.second, at)) return true;
    }
  } else if (tree.IsSequence()) {
    for (const auto& item : tree) {
      if (Contains(item, at)) return true;
    }
  }
  return false;
}

// "a.b[2].c" -> "a.b[2]" -> "a.b" -> "a" -> "".
std::string ParentKey(const std::string& key) {
  const size_t cut = key.find_last_of(".[");
  return cut == std::string::npos ? std::string() : key.substr(0, cut);
}

std::string WhereIn(const JobSpecReading& reading, const std::string& key) {
  for (std::string k = key; !k.empty(); k = ParentKey(k)) {
    if (auto it = reading.sources.find(k); it != reading.sources.end()) return it->second;
  }
  return reading.origin;
}

// Messages quote what the file says (values, keys); a line break or an escape sequence in one
// would split the one-line message or reach a terminal raw (found with the job-spec fuzz target).
// Control characters are written as C escapes instead ("\n", "\x1b").
std::string Printable(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      out += absl::CHexEscape(std::string(1, c));
    } else {
      out += c;
    }
  }
  return out;
}

// Walks the YAML tree, fills the spec and collects every problem with its key and place.
class SpecReader {
 public:
  explicit SpecReader(JobSpecReading* out) : out_(out) {}

  void AddOverride(OverrideNodes o) { overrides_.push_back(std::move(o)); }

  // The --set assignment that brought `at`, or "" when it comes from the file.
  std::string OverrideOf(const YAML::Node& at) const {
    if (!at.IsDefined()) return "";
    // Latest first: a later --set of the same key replaced the earlier one's value.
    for (auto o = overrides_.rbegin(); o != overrides_.rend(); ++o) {
      for (const YAML::Node& n : o->nodes) {
        if (Contains(n, at)) return o->assignment;
      }
    }
    return "";
  }

  // "(from --set K=V)", "FILE:LINE", or "FILE" for a node that is in neither.
  std::string Locate(const YAML::Node& at) const {
    if (std::string a = OverrideOf(at); !a.empty()) return FromSet(a);
    if (at.IsDefined() && at.Mark().line >= 0) {
      return absl::StrCat(out_->origin, ":", at.Mark().line + 1);
    }
    return out_->origin;
  }
  static std::string FromSet(const std::string& assignment) {
    return absl::StrCat("(from --set ", assignment, ")");
  }

  std::string Where(const std::string& key) const { return WhereIn(*out_, key); }
  bool Refused(const std::string& key) const { return out_->Refused(key); }
  bool Given(const std::string& key) const { return out_->sources.count(key) > 0; }

  // `refuse`: the value of `key` is not taken (the spec keeps its default), so later checks that
  // depend on it stay silent instead of reporting consequences of the default.
  void Error(const std::string& where, const std::string& key, const std::string& what,
             bool refuse = true) {
    out_->errors.push_back(Printable(absl::StrCat(where, ": ", key, ": ", what)));
    if (refuse) out_->refused.insert(key);
  }
  void Error(const YAML::Node& at, const std::string& key, const std::string& what) {
    Error(Locate(at), key, what);
  }

  // Checks that `node` is a map whose keys are all in `allowed`, each once, and records where
  // every key is. yaml-cpp keeps duplicate keys and answers lookups with the first, so the walk
  // over the pairs is the only place a duplicate shows.
  bool Map(const YAML::Node& node, const std::string& path, const std::set<std::string>& allowed) {
    if (!node.IsDefined() || node.IsNull()) return false;
    const std::string name = path.empty() ? "(top level)" : path;
    if (!node.IsMap()) {
      Error(path.empty() ? Locate(node) : At(path, node), name, "expected a mapping of keys");
      return false;
    }
    std::map<std::string, YAML::Node> seen;
    for (const auto& kv : node) {
      const std::string key = kv.first.Scalar();
      const std::string full = Join(path, key);
      if (!allowed.count(key)) {
        Error(Locate(kv.first), full,
              absl::StrCat("unknown key (allowed: ", absl::StrJoin(allowed, ", "), ")"),
              /*refuse=*/false);
        continue;
      }
      if (auto first = seen.find(key); first != seen.end()) {
        Error(Locate(kv.first), full,
              absl::StrCat("duplicate key: first on line ", first->second.Mark().line + 1,
                           ", again on line ", kv.first.Mark().line + 1,
                           " (only one could count; keep one)"));
        continue;
      }
      seen.emplace(key, kv.first);
      // A value replaced by --set is blamed on the assignment even though its key is in the file.
      const std::string from_set = OverrideOf(kv.second);
      out_->sources[full] = from_set.empty() ? Locate(kv.first) : FromSet(from_set);
    }
    return true;
  }

  template <typename T>
  void Field(const YAML::Node& map, const std::string& path, const char* key, T* out,
             const std::function<std::string(const T&)>& check = {}) {
    const YAML::Node node = map[key];
    if (!node.IsDefined()) return;
    const std::string full = Join(path, key);
    const std::string where = At(full, node);
    if (node.IsNull()) {
      Error(where, full, "has no value (give one, or leave the key out for the default)");
      return;
    }
    T value;
    if (!node.IsScalar() || !YAML::convert<T>::decode(node, value)) {
      Error(where, full, absl::StrCat("expected ", TypeName<T>(), ", got '", Describe(node), "'"));
      return;
    }
    if constexpr (std::is_floating_point_v<T>) {
      // yaml-cpp reads .inf and .nan as numbers; no setting of a job means either.
      if (!std::isfinite(value)) {
        Error(where, full, absl::StrCat("must be a finite number, got '", node.Scalar(), "'"));
        return;
      }
    }
    if constexpr (std::is_same_v<T, std::string>) {
      // No setting is spelled with control characters, and yaml-cpp's emitter writes some
      // unquoted (a trailing carriage return), so the resolved job.yaml every service reads
      // would hold another value ("data\r" read back as "data"; found with the job-spec fuzz
      // target).
      for (char c : value) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
          Error(where, full, "may not hold control characters (line breaks, tabs, escapes)");
          return;
        }
      }
    }
    if (check) {
      std::string problem = check(value);
      if (!problem.empty()) {
        Error(where, full, problem);
        return;
      }
    }
    *out = value;
  }

  template <typename T>
  void List(const YAML::Node& map, const std::string& path, const char* key, std::vector<T>* out) {
    const YAML::Node node = map[key];
    if (!node.IsDefined()) return;
    const std::string full = Join(path, key);
    if (node.IsNull()) {
      Error(At(full, node), full, "has no value (write [] for none)");
      return;
    }
    if (!node.IsSequence()) {
      Error(At(full, node), full, absl::StrCat("expected a list of ", TypeName<T>()));
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

 private:
  // The place of `key`'s value: where Map() found the key, else the node itself.
  std::string At(const std::string& key, const YAML::Node& node) const {
    if (auto it = out_->sources.find(key); it != out_->sources.end()) return it->second;
    return Locate(node);
  }

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

  JobSpecReading* out_;
  std::vector<OverrideNodes> overrides_;
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

// A host name as a certificate's subject alternative name holds it: dot-separated labels of
// letters, digits and '-', none empty or starting or ending with '-'.
std::function<std::string(const std::string&)> DnsName() {
  return [](const std::string& v) {
    const std::string problem = absl::StrCat(
        "'", v, "' is not a host name (labels of letters, digits and '-', separated by dots)");
    if (v.empty() || v.size() > 253) return problem;
    for (absl::string_view label : absl::StrSplit(v, '.')) {
      if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
        return problem;
      }
      for (char c : label) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return problem;
      }
    }
    return std::string();
  };
}

// Returns false when `root` is not a mapping (nothing could be read).
// cluster.cpu and cluster.worker_speeds: each process's own CPU quota, so that an emulated
// cluster's speeds come from the spec and not from contention for the machine's cores.
void ReadCpuShares(const YAML::Node& cluster, SpecReader& r, ClusterSpec* c) {
  // More than 64 cores for one process is surely a typo for a fraction.
  auto cores = [](const double& v) {
    return v >= 0 && v <= 64 ? std::string() : absl::StrCat("must be in [0, 64] cores, got ", v);
  };
  if (YAML::Node cpu = cluster["cpu"];
      r.Map(cpu, "cluster.cpu", {"worker", "parameter_server", "evaluator"})) {
    r.Field<double>(cpu, "cluster.cpu", "worker", &c->cpu.worker, cores);
    r.Field<double>(cpu, "cluster.cpu", "parameter_server", &c->cpu.parameter_server, cores);
    r.Field<double>(cpu, "cluster.cpu", "evaluator", &c->cpu.evaluator, cores);
  }
  r.List<double>(cluster, "cluster", "worker_speeds", &c->worker_speeds);
  for (size_t i = 0; i < c->worker_speeds.size(); ++i) {
    const double v = c->worker_speeds[i];
    if (!(std::isfinite(v) && v > 0 && v <= 64)) {
      const std::string key = absl::StrCat("cluster.worker_speeds[", i, "]");
      r.Error(cluster["worker_speeds"][i], key, absl::StrCat("must be in (0, 64], got ", v));
    }
  }
}

bool ReadSpec(const YAML::Node& root, SpecReader& r, JobSpec* spec) {
  if (!r.Map(root, "",
             {"name", "dataset", "model", "training", "cluster", "sharding", "strategy", "launcher",
              "recovery", "security"})) {
    return false;
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
          r.Error(r.Where("training.lr_schedule.milestones"), "training.lr_schedule.milestones",
                  "must be strictly increasing");
          break;
        }
      }
    }
  }
  if (YAML::Node n = root["cluster"]; r.Map(n, "cluster",
                                            {"workers", "parameter_servers", "threads_per_worker",
                                             "stragglers", "cpu", "worker_speeds"})) {
    ReadCpuShares(n, r, &spec->cluster);
    ClusterSpec& c = spec->cluster;
    r.Field<int>(n, "cluster", "workers", &c.workers, AtLeast(1));
    r.Field<int>(n, "cluster", "parameter_servers", &c.parameter_servers, AtLeast(1));
    r.Field<int>(n, "cluster", "threads_per_worker", &c.threads_per_worker, AtLeast(1));
    if (YAML::Node s = n["stragglers"]; s.IsDefined()) {
      if (s.IsNull()) {
        r.Error(r.Where("cluster.stragglers"), "cluster.stragglers",
                "has no value (write [] for none)");
      } else if (!s.IsSequence()) {
        r.Error(r.Where("cluster.stragglers"), "cluster.stragglers",
                "expected a list of {worker, cpu_fraction}");
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
            {"kind", "consistency", "staleness", "k_star", "k_star_start", "probe_ratio", "rule",
             "at_fraction", "window", "threshold_percent", "ps_lr_scale", "ps_pipeline",
             "bucket_mb", "ring_link", "ps_link"})) {
    StrategySpec& s = spec->strategy;
    r.Field<std::string>(n, "strategy", "kind", &s.kind, Among({"allreduce", "ps", "switch"}));
    r.Field<std::string>(n, "strategy", "consistency", &s.consistency,
                         Among({"asp", "bsp", "ssp", "pdp", "apdp"}));
    r.Field<int>(n, "strategy", "staleness", &s.staleness, AtLeast(0));
    r.Field<int>(n, "strategy", "k_star", &s.k_star, AtLeast(0));
    r.Field<int>(n, "strategy", "k_star_start", &s.k_star_start, AtLeast(0));
    r.Field<double>(n, "strategy", "probe_ratio", &s.probe_ratio, [](const double& v) {
      return v > 0 && v <= 1 ? std::string() : absl::StrCat("must be in (0, 1], got ", v);
    });
    r.Field<std::string>(n, "strategy", "rule", &s.rule, Among({"empirical", "at_fraction"}));
    r.Field<double>(n, "strategy", "at_fraction", &s.at_fraction, [](const double& v) {
      return v > 0 && v < 1 ? std::string() : absl::StrCat("must be in (0, 1), got ", v);
    });
    r.Field<int>(n, "strategy", "window", &s.window, AtLeast(1));
    r.Field<double>(n, "strategy", "threshold_percent", &s.threshold_percent, [](const double& v) {
      return v > 0 ? std::string() : absl::StrCat("must be > 0, got ", v);
    });
    r.Field<double>(n, "strategy", "ps_lr_scale", &s.ps_lr_scale, NonNegative());
    r.Field<int>(n, "strategy", "ps_pipeline", &s.ps_pipeline, [](const int& v) {
      return v == 0 || v == 1 ? std::string() : absl::StrCat("must be 0 or 1, got ", v);
    });
    r.Field<double>(n, "strategy", "bucket_mb", &s.bucket_mb, [](const double& v) {
      return v >= 0 && v <= 1024 ? std::string() : absl::StrCat("must be in [0, 1024], got ", v);
    });
    r.Field<std::string>(n, "strategy", "ring_link", &s.ring_link, Among({"grpc", "tcp"}));
    r.Field<std::string>(n, "strategy", "ps_link", &s.ps_link, Among({"grpc", "tcp", "shm"}));
    if (s.kind == "allreduce" && r.Given("strategy.ps_link") && !r.Refused("strategy.ps_link")) {
      r.Error(r.Where("strategy.ps_link"), "strategy.ps_link",
              "applies to push/pull with parameter servers, which strategy.kind allreduce does "
              "not have");
    }
    for (const char* key : {"strategy.bucket_mb", "strategy.ring_link"}) {
      if (s.kind == "ps" && r.Given(key) && !r.Refused(key)) {
        r.Error(r.Where(key), key,
                "applies to the all-reduce phase, which strategy.kind ps does not have");
      }
    }
    // K* keys on a mode that has no K* would be silently ignored.
    if (!r.Refused("strategy.consistency") && s.consistency != "pdp" && s.consistency != "apdp") {
      for (const char* key : {"k_star", "k_star_start", "probe_ratio"}) {
        const std::string full = absl::StrCat("strategy.", key);
        if (r.Given(full) && !r.Refused(full)) {
          r.Error(r.Where(full), full,
                  absl::StrCat("applies to strategy.consistency pdp and apdp only (it is ",
                               s.consistency, ")"));
        }
      }
    }
    if (s.k_star > 0 && r.Given("strategy.k_star_start")) {
      r.Error(r.Where("strategy.k_star_start"), "strategy.k_star_start",
              "starts the K* search, which a fixed strategy.k_star turns off: remove one");
    }
    // `at_fraction` given means that rule unless a rule is named.
    if (n["at_fraction"].IsDefined() && !n["rule"].IsDefined()) s.rule = "at_fraction";
  }
  if (YAML::Node n = root["launcher"]; r.Map(n, "launcher", {"kind", "ring_transport"})) {
    r.Field<std::string>(n, "launcher", "kind", &spec->launcher.kind,
                         Among({"local", "compose", "kubernetes"}));
    r.Field<std::string>(n, "launcher", "ring_transport", &spec->launcher.ring_transport,
                         Among({"unix", "tcp"}));
  }
  if (YAML::Node n = root["security"];
      r.Map(n, "security", {"tls", "tls_dir", "tls_server_name"})) {
    SecuritySpec& s = spec->security;
    r.Field<std::string>(n, "security", "tls", &s.tls, Among({"off", "on", "mutual"}));
    r.Field<std::string>(n, "security", "tls_dir", &s.tls_dir, [](const std::string& v) {
      return v.empty() ? std::string(
                             "is empty (leave it out to have strata run make the run's "
                             "certificates)")
                       : std::string();
    });
    r.Field<std::string>(n, "security", "tls_server_name", &s.tls_server_name, DnsName());
    // A directory or name that TLS off would ignore means plaintext where TLS was meant.
    if (!r.Refused("security.tls") && s.tls == "off") {
      for (const char* key : {"tls_dir", "tls_server_name"}) {
        const std::string full = absl::StrCat("security.", key);
        if (r.Given(full) && !r.Refused(full)) {
          r.Error(r.Where(full), full,
                  "has no effect while security.tls is off, so the run would travel in "
                  "plaintext: set security.tls to on or mutual, or remove the key");
        }
      }
    }
  }
  if (YAML::Node n = root["recovery"];
      r.Map(n, "recovery", {"restarts", "server_checkpoint_s", "ring_checkpoint_s"})) {
    r.Field<int>(n, "recovery", "restarts", &spec->recovery.restarts, [](const int& v) {
      return v >= 0 && v <= 100 ? std::string() : absl::StrCat("must be in [0, 100], got ", v);
    });
    r.Field<double>(n, "recovery", "server_checkpoint_s", &spec->recovery.server_checkpoint_s,
                    [](const double& v) {
                      return v >= 0.1 && v <= 86400
                                 ? std::string()
                                 : absl::StrCat("must be in [0.1, 86400] seconds, got ", v);
                    });
    r.Field<double>(
        n, "recovery", "ring_checkpoint_s", &spec->recovery.ring_checkpoint_s, [](const double& v) {
          return v == 0 || (v >= 0.1 && v <= 86400)
                     ? std::string()
                     : absl::StrCat("must be 0 (never) or in [0.1, 86400] seconds, got ", v);
        });
  }
  // Cross-field checks, skipped when an input was refused: its default would make the message
  // about a value nobody wrote.
  for (size_t i = 0; i < spec->cluster.stragglers.size(); ++i) {
    const std::string key = absl::StrCat("cluster.stragglers[", i, "].worker");
    if (r.Refused(key) || r.Refused("cluster.workers")) continue;
    if (spec->cluster.stragglers[i].worker >= spec->cluster.workers) {
      r.Error(r.Where(key), key,
              absl::StrCat("worker ", spec->cluster.stragglers[i].worker, " does not exist (",
                           spec->cluster.workers, " workers)"));
    }
  }
  const ClusterSpec& cluster = spec->cluster;
  if (!cluster.worker_speeds.empty() && !r.Refused("cluster.worker_speeds") &&
      !r.Refused("cluster.workers")) {
    if (static_cast<int>(cluster.worker_speeds.size()) != cluster.workers) {
      r.Error(r.Where("cluster.worker_speeds"), "cluster.worker_speeds",
              absl::StrCat(cluster.worker_speeds.size(), " speeds for ", cluster.workers,
                           " workers: give one per worker"));
    } else if (cluster.cpu.worker <= 0 && !r.Refused("cluster.cpu.worker")) {
      r.Error(r.Where("cluster.worker_speeds"), "cluster.worker_speeds",
              "needs cluster.cpu.worker, the cores a worker of speed 1 gets");
    }
  }
  if (!r.Refused("training.batch_size") && !r.Refused("cluster.workers") &&
      spec->training.batch_size < spec->cluster.workers) {
    // Blame the key the file (or --set) gave; with batch_size left at its default, the workers.
    const std::string key =
        r.Given("training.batch_size") ? "training.batch_size" : "cluster.workers";
    r.Error(r.Where(key), key,
            absl::StrCat("global batch ", spec->training.batch_size, " is smaller than the ",
                         spec->cluster.workers, " workers that split it"));
  }
  return true;
}

// Applies one `--set a.b=value` to `root` (nullptr: the file is unusable, only the assignment's
// own form is checked). Problems are reported against the assignment; the nodes it adds to the
// tree are handed to `r` so that later problems with them are too.
void ApplyOverride(YAML::Node* root, const std::string& assignment, SpecReader& r) {
  const std::string where = SpecReader::FromSet(assignment);
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    r.Error(where, "--set", "expected KEY=VALUE, e.g. training.lr=0.05", /*refuse=*/false);
    return;
  }
  const std::string key = assignment.substr(0, eq);
  const std::vector<std::string> path = absl::StrSplit(key, '.');
  for (const std::string& part : path) {
    if (part.empty()) {
      r.Error(where, key, "empty part in the dotted key", /*refuse=*/false);
      return;
    }
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    r.Error(where, key, absl::StrCat("the value is not valid YAML: ", e.msg));
    return;
  }
  if (root == nullptr) return;
  OverrideNodes added{assignment, {}};
  // A key the assignment creates has no place in the file (its mark line is -1): it is ours.
  auto note_new_key = [&added](const YAML::Node& map, const std::string& name) {
    for (const auto& kv : map) {
      if (kv.first.Scalar() == name && kv.first.Mark().line < 0) added.nodes.push_back(kv.first);
    }
  };
  try {
    // yaml-cpp's operator[] returns handles; walk with a vector of nodes so assignment sticks.
    std::vector<YAML::Node> chain{*root};
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      YAML::Node next = chain.back()[path[i]];
      if (!next.IsDefined() || next.IsNull()) {
        chain.back()[path[i]] = YAML::Node(YAML::NodeType::Map);
        next = chain.back()[path[i]];
        added.nodes.push_back(next);
        note_new_key(chain.back(), path[i]);
      } else if (!next.IsMap()) {
        r.Error(
            where, key,
            absl::StrCat("cannot set: '", absl::StrJoin(path.begin(), path.begin() + i + 1, "."),
                         "' is not a section"));
        return;
      }
      chain.push_back(next);
    }
    chain.back()[path.back()] = value;
    added.nodes.push_back(value);
    note_new_key(chain.back(), path.back());
  } catch (const YAML::Exception& e) {
    r.Error(where, key, absl::StrCat("cannot set: ", e.msg));
    return;
  }
  r.AddOverride(std::move(added));
}

}  // namespace

const std::vector<std::string>& KnownModelArchs() {
  static const std::vector<std::string> archs = {"mlp",      "mlp_wide", "cnn",
                                                 "resnet20", "resnet32", "resnet56"};
  return archs;
}

std::string JobSpecReading::Where(const std::string& key) const { return WhereIn(*this, key); }

bool JobSpecReading::Refused(const std::string& key) const {
  for (const std::string& k : refused) {
    if (k == key) return true;
    // One is a section around the other: "dataset" and "dataset.path", "cluster.stragglers[0]".
    const std::string& shorter = k.size() < key.size() ? k : key;
    const std::string& longer = k.size() < key.size() ? key : k;
    if (longer.compare(0, shorter.size(), shorter) == 0 &&
        (longer[shorter.size()] == '.' || longer[shorter.size()] == '[')) {
      return true;
    }
  }
  return false;
}

JobSpecReading ReadJobSpec(const std::string& yaml_text, const std::string& origin,
                           const std::vector<std::string>& overrides) {
  JobSpecReading out;
  out.origin = origin;
  SpecReader reader(&out);
  YAML::Node root;
  bool usable = false;
  try {
    root = YAML::Load(yaml_text);
    usable = true;
  } catch (const YAML::Exception& e) {
    reader.Error(e.mark.line >= 0 ? absl::StrCat(origin, ":", e.mark.line + 1) : origin, "(syntax)",
                 absl::StrCat("invalid YAML at column ", e.mark.column + 1, ": ", e.msg));
  }
  // An empty file (or one of comments) would otherwise run as a job of defaults: almost always
  // the wrong file, or one saved before it was written.
  if (usable && (root.IsNull() || (root.IsMap() && root.size() == 0))) {
    reader.Error(absl::StrCat(origin, ":1"), "(top level)",
                 "empty job spec: the file holds no keys (a job made only of defaults is refused)");
    usable = false;
  }
  if (usable && !root.IsMap()) {
    reader.Error(reader.Locate(root), "(top level)", "expected a mapping of keys");
    usable = false;
  }
  for (const std::string& o : overrides) ApplyOverride(usable ? &root : nullptr, o, reader);
  if (usable) out.mapping_read = ReadSpec(root, reader, &out.spec);
  return out;
}

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& origin,
                                     const std::vector<std::string>& overrides) {
  JobSpecReading reading = ReadJobSpec(yaml_text, origin, overrides);
  if (!reading.errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(reading.errors, "\n"));
  }
  return std::move(reading.spec);
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
  out << YAML::EndSeq << YAML::Key << "cpu" << YAML::Value << YAML::Flow << YAML::BeginMap
      << YAML::Key << "worker" << YAML::Value << c.cpu.worker << YAML::Key << "parameter_server"
      << YAML::Value << c.cpu.parameter_server << YAML::Key << "evaluator" << YAML::Value
      << c.cpu.evaluator << YAML::EndMap << YAML::Key << "worker_speeds" << YAML::Value
      << YAML::Flow << c.worker_speeds << YAML::EndMap;
  const ShardingSpec& sh = s.sharding;
  out << YAML::Key << "sharding" << YAML::Value << YAML::BeginMap << YAML::Key << "method"
      << YAML::Value << sh.method << YAML::Key << "clusters" << YAML::Value << sh.clusters
      << YAML::Key << "pca_components" << YAML::Value << sh.pca_components << YAML::Key
      << "max_iterations" << YAML::Value << sh.max_iterations << YAML::EndMap;
  const StrategySpec& st = s.strategy;
  out << YAML::Key << "strategy" << YAML::Value << YAML::BeginMap << YAML::Key << "kind"
      << YAML::Value << st.kind << YAML::Key << "consistency" << YAML::Value << st.consistency
      << YAML::Key << "staleness" << YAML::Value << st.staleness;
  // The K* keys only where they apply: the spec refuses them elsewhere.
  if (st.consistency == "pdp" || st.consistency == "apdp") {
    out << YAML::Key << "k_star" << YAML::Value << st.k_star;
    if (st.k_star == 0) out << YAML::Key << "k_star_start" << YAML::Value << st.k_star_start;
    out << YAML::Key << "probe_ratio" << YAML::Value << st.probe_ratio;
  }
  out << YAML::Key << "rule" << YAML::Value << st.rule << YAML::Key << "at_fraction" << YAML::Value
      << st.at_fraction << YAML::Key << "window" << YAML::Value << st.window << YAML::Key
      << "threshold_percent" << YAML::Value << st.threshold_percent << YAML::Key << "ps_lr_scale"
      << YAML::Value << st.ps_lr_scale << YAML::Key << "ps_pipeline" << YAML::Value
      << st.ps_pipeline;
  // Only when on, so that resolved specs of jobs without buckets read as before.
  if (st.bucket_mb > 0) out << YAML::Key << "bucket_mb" << YAML::Value << st.bucket_mb;
  // Only when not the default, so that resolved specs of other jobs read as before.
  if (st.ring_link != "tcp") out << YAML::Key << "ring_link" << YAML::Value << st.ring_link;
  if (st.ps_link != "shm") out << YAML::Key << "ps_link" << YAML::Value << st.ps_link;
  out << YAML::EndMap;
  out << YAML::Key << "launcher" << YAML::Value << YAML::BeginMap << YAML::Key << "kind"
      << YAML::Value << s.launcher.kind << YAML::Key << "ring_transport" << YAML::Value
      << s.launcher.ring_transport << YAML::EndMap;
  // The TLS keys only with TLS on: the spec refuses them with TLS off.
  out << YAML::Key << "security" << YAML::Value << YAML::BeginMap << YAML::Key << "tls"
      << YAML::Value << s.security.tls;
  if (s.security.tls != "off") {
    if (!s.security.tls_dir.empty()) {
      out << YAML::Key << "tls_dir" << YAML::Value << s.security.tls_dir;
    }
    out << YAML::Key << "tls_server_name" << YAML::Value << s.security.tls_server_name;
  }
  out << YAML::EndMap;
  out << YAML::Key << "recovery" << YAML::Value << YAML::BeginMap << YAML::Key << "restarts"
      << YAML::Value << s.recovery.restarts << YAML::Key << "server_checkpoint_s" << YAML::Value
      << s.recovery.server_checkpoint_s << YAML::Key << "ring_checkpoint_s" << YAML::Value
      << s.recovery.ring_checkpoint_s << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

double WorkerCpuShare(const ClusterSpec& cluster, int rank) {
  for (const StragglerSpec& st : cluster.stragglers) {
    if (st.worker == rank) return st.cpu_fraction;
  }
  if (cluster.cpu.worker <= 0) return 0;
  const size_t r = static_cast<size_t>(rank);
  return cluster.cpu.worker * (r < cluster.worker_speeds.size() ? cluster.worker_speeds[r] : 1.0);
}

}  // namespace strata
