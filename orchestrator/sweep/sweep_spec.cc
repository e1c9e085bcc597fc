#include "orchestrator/sweep/sweep_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <yaml-cpp/yaml.h>

namespace strata::sweep {
namespace {

const std::set<std::string>& TopLevelKeys() {
  static const std::set<std::string> keys = {
      "name", "base", "grid", "cells", "seeds", "parallel", "baseline", "target_accuracy", "out"};
  return keys;
}

// The most seeds a sweep file may ask for; far above any real sweep, below a typo's 10^9.
constexpr int64_t kMaxSeeds = 1000;

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Stem(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = file.rfind('.');
  return dot == std::string::npos || dot == 0 ? file : file.substr(0, dot);
}

// A value as `--set` reads it back: YAML, in flow style so that it stays on one line.
std::string FlowText(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

// Cell names are directory names and CSV fields: letters, digits and ._=,+- only.
bool NameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string("._=,+-").find(c) != std::string::npos;
}
// A default name from override values: brackets, quotes and spaces dropped ("[3, 6]" -> "3,6"),
// anything else a name may not hold replaced by '_'.
std::string SafeName(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string(" []{}\"'").find(c) != std::string::npos) continue;
    out += NameChar(c) ? c : '_';
  }
  return out;
}

class SweepReader {
 public:
  SweepReader(std::string origin, SweepSpec* out) : origin_(std::move(origin)), out_(out) {}

  std::vector<std::string>& errors() { return errors_; }

  std::string At(const YAML::Node& node) const {
    if (node.IsDefined() && node.Mark().line >= 0) {
      return absl::StrCat(origin_, ":", node.Mark().line + 1);
    }
    return absl::StrCat(origin_, ":1");
  }
  static int Line(const YAML::Node& node) {
    return node.IsDefined() && node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
  }
  void Error(const YAML::Node& at, const std::string& key, const std::string& what) {
    errors_.push_back(absl::StrCat(At(at), ": ", key, ": ", what));
  }

  // The top-level keys, in the order their errors read best: each step reports its own.
  void Read(const YAML::Node& root) {
    CollectKeys(root);
    ReadName();
    ReadBase();
    ReadGridOrCells();
    ReadSeedsKey();
    ReadParallel();
    ReadTargetAccuracy();
    ReadOut();
    NameCells();
    ReadBaseline();
  }

  void set_cores(int cores) { cores_ = cores; }

 private:
  // The keys, each once; yaml-cpp answers a lookup with the first of duplicates, so only the walk
  // over the pairs sees them.
  void CollectKeys(const YAML::Node& root) {
    for (const auto& kv : root) {
      const std::string key = kv.first.Scalar();
      if (!TopLevelKeys().count(key)) {
        Error(kv.first, key,
              absl::StrCat("unknown key (allowed: ", absl::StrJoin(TopLevelKeys(), ", "), ")"));
        continue;
      }
      if (auto first = keys_.find(key); first != keys_.end()) {
        Error(kv.first, key,
              absl::StrCat("duplicate key: first on line ", Line(first->second.first),
                           " (keep one)"));
        continue;
      }
      keys_.emplace(key, std::make_pair(kv.first, kv.second));
    }
  }

  // The value of a key that is there and not null; an error for a key without a value.
  const YAML::Node* Value(const char* key) {
    auto it = keys_.find(key);
    if (it == keys_.end()) return nullptr;
    if (it->second.second.IsNull()) {
      Error(it->second.first, key, "has no value (give one, or leave the key out)");
      return nullptr;
    }
    return &it->second.second;
  }

  void ReadName() {
    if (const YAML::Node* n = Value("name")) {
      if (!n->IsScalar() || n->Scalar().empty()) {
        Error(*n, "name", "expected a non-empty string");
      } else {
        out_->name = n->Scalar();
      }
    }
    if (out_->name.empty()) out_->name = Stem(origin_);
  }

  void ReadBase() {
    if (const YAML::Node* n = Value("base")) {
      if (!n->IsScalar() || n->Scalar().empty()) {
        Error(*n, "base", "expected the path of a job spec (relative to this file)");
      } else {
        const std::string& base = n->Scalar();
        out_->base_path =
            std::filesystem::path(base[0] == '/' ? base : absl::StrCat(DirName(origin_), "/", base))
                .lexically_normal()
                .string();
        out_->base_line = Line(*n);
      }
    } else if (!keys_.count("base")) {
      errors_.push_back(absl::StrCat(origin_,
                                     ":1: base: required: the job spec every cell varies "
                                     "(a path relative to this file)"));
    }
  }

  void ReadGridOrCells() {
    const bool has_grid = keys_.count("grid") > 0, has_cells = keys_.count("cells") > 0;
    if (has_grid && has_cells) {
      Error(keys_["cells"].first, "cells",
            absl::StrCat("give either grid or cells, not both (grid is on line ",
                         Line(keys_["grid"].first), ")"));
    } else if (has_grid) {
      ReadGrid(keys_["grid"].first, keys_["grid"].second);
    } else if (has_cells) {
      ReadCells(keys_["cells"].first, keys_["cells"].second);
    } else {
      errors_.push_back(
          absl::StrCat(origin_,
                       ":1: grid: required: a grid of job keys to lists of values, or a list of "
                       "cells (one of the two)"));
    }
  }

  void ReadSeedsKey() {
    if (keys_.count("seeds")) {
      ReadSeeds(keys_["seeds"].first, keys_["seeds"].second);
    } else {
      errors_.push_back(absl::StrCat(origin_,
                                     ":1: seeds: required: the seeds every cell runs with, e.g. "
                                     "seeds: [1, 2, 3] or seeds: {count: 10}"));
    }
  }

  void ReadParallel() {
    const YAML::Node* n = Value("parallel");
    if (n == nullptr) return;
    int parallel = 0;
    const int limit = ParallelLimit(cores_);
    if (!n->IsScalar() || !YAML::convert<int>::decode(*n, parallel) || parallel < 1) {
      Error(*n, "parallel", absl::StrCat("expected a whole number >= 1, got '", FlowText(*n), "'"));
    } else if (parallel > limit) {
      Error(*n, "parallel",
            absl::StrCat(parallel, " is above this machine's limit of ", limit, " (", cores_,
                         " core(s) / 2, rounded down, at least 1): every run is already several "
                         "busy processes, so runs side by side would measure their contention "
                         "for the cores, not the strategies"));
    } else {
      out_->parallel = parallel;
    }
  }

  void ReadTargetAccuracy() {
    const YAML::Node* n = Value("target_accuracy");
    if (n == nullptr) return;
    double target = 0;
    if (!n->IsScalar() || !YAML::convert<double>::decode(*n, target) || !std::isfinite(target) ||
        target <= 0 || target > 1) {
      Error(*n, "target_accuracy",
            absl::StrCat("expected a validation accuracy in (0, 1], got '", FlowText(*n), "'"));
    } else {
      out_->target_accuracy = target;
    }
  }

  void ReadOut() {
    if (const YAML::Node* n = Value("out")) {
      if (!n->IsScalar() || n->Scalar().empty()) {
        Error(*n, "out", "expected a directory path");
      } else {
        out_->out = n->Scalar();
      }
    }
  }

  // After the cells are named: the baseline names one of them (default: the first).
  void ReadBaseline() {
    if (const YAML::Node* n = Value("baseline")) {
      if (!n->IsScalar() || n->Scalar().empty()) {
        Error(*n, "baseline", "expected the name of a cell");
      } else if (!out_->cells.empty()) {
        std::vector<std::string> names;
        for (const Cell& c : out_->cells) names.push_back(c.name);
        if (std::find(names.begin(), names.end(), n->Scalar()) == names.end()) {
          Error(*n, "baseline",
                absl::StrCat("no cell is named '", n->Scalar(),
                             "' (cells: ", absl::StrJoin(names, ", "), ")"));
        } else {
          out_->baseline = n->Scalar();
        }
      }
    }
    if (out_->baseline.empty() && !out_->cells.empty()) out_->baseline = out_->cells[0].name;
  }

  // An override's key: dotted parts, not the seed (that is what `seeds:` sets).
  bool CheckKey(const YAML::Node& key_node, const std::string& where) {
    const std::string key = key_node.IsScalar() ? key_node.Scalar() : "";
    if (key.empty()) {
      Error(key_node, where, "expected a dotted job key, e.g. strategy.kind");
      return false;
    }
    for (absl::string_view part : absl::StrSplit(key, '.')) {
      if (part.empty() || key.find('=') != std::string::npos) {
        Error(key_node, where, absl::StrCat("'", key, "' is not a dotted job key"));
        return false;
      }
    }
    if (key == "training.seed") {
      Error(key_node, where, "the seed is set by seeds: (every cell runs with each of them)");
      return false;
    }
    return true;
  }

  std::optional<Override> ReadValue(const YAML::Node& value, const std::string& key,
                                    const std::string& where) {
    if (!value.IsDefined() || value.IsNull()) {
      Error(value, where, "has no value");
      return std::nullopt;
    }
    return Override{key, FlowText(value), Line(value), where};
  }

  void ReadGrid(const YAML::Node& key_node, const YAML::Node& grid) {
    if (grid.IsNull() || (grid.IsMap() && grid.size() == 0)) {
      Error(key_node, "grid", "empty: give at least one job key with a list of values");
      return;
    }
    if (!grid.IsMap()) {
      Error(grid, "grid", "expected a mapping of job keys to lists of values");
      return;
    }
    // The values of each key, then their cartesian product in file order (the last key varies
    // fastest), so the cells come out in the order a reader of the file expects.
    std::vector<std::vector<Override>> axes;
    std::set<std::string> seen;
    bool ok = true;
    for (const auto& kv : grid) {
      const std::string where = absl::StrCat("grid.", kv.first.Scalar());
      if (!CheckKey(kv.first, where)) {
        ok = false;
        continue;
      }
      const std::string key = kv.first.Scalar();
      if (!seen.insert(key).second) {
        Error(kv.first, where, "duplicate key (keep one)");
        ok = false;
        continue;
      }
      const YAML::Node& values = kv.second;
      if (values.IsNull() || (values.IsSequence() && values.size() == 0)) {
        Error(kv.first, where, "empty: give a list of at least one value");
        ok = false;
        continue;
      }
      if (!values.IsSequence()) {
        Error(values, where,
              absl::StrCat("expected a list of values, e.g. [", FlowText(values), "]"));
        ok = false;
        continue;
      }
      std::vector<Override> axis;
      std::set<std::string> texts;
      for (size_t i = 0; i < values.size(); ++i) {
        auto o = ReadValue(values[i], key, absl::StrCat(where, "[", i, "]"));
        if (!o) {
          ok = false;
          continue;
        }
        if (!texts.insert(o->value).second) {
          Error(values[i], o->where, absl::StrCat("the value ", o->value, " is listed twice"));
          ok = false;
          continue;
        }
        axis.push_back(*o);
      }
      axes.push_back(std::move(axis));
    }
    if (!ok) return;
    std::vector<std::vector<Override>> product = {{}};
    for (const auto& axis : axes) {
      std::vector<std::vector<Override>> next;
      for (const auto& partial : product) {
        for (const Override& o : axis) {
          next.push_back(partial);
          next.back().push_back(o);
        }
      }
      product = std::move(next);
    }
    for (auto& overrides : product) {
      out_->cells.push_back(Cell{"", std::move(overrides), Line(key_node), "grid"});
      explicit_names_.push_back(false);
    }
  }

  void ReadCells(const YAML::Node& key_node, const YAML::Node& cells) {
    if (cells.IsNull() || (cells.IsSequence() && cells.size() == 0)) {
      Error(key_node, "cells", "empty: give at least one cell");
      return;
    }
    if (!cells.IsSequence()) {
      Error(cells, "cells", "expected a list of cells, each {name: NAME, set: {KEY: VALUE, ...}}");
      return;
    }
    for (size_t i = 0; i < cells.size(); ++i) {
      const YAML::Node& item = cells[i];
      const std::string where = absl::StrCat("cells[", i, "]");
      if (!item.IsMap()) {
        Error(item, where, "expected {name: NAME, set: {KEY: VALUE, ...}}");
        continue;
      }
      Cell cell{"", {}, Line(item), where};
      bool named = false, ok = true;
      for (const auto& kv : item) {
        const std::string k = kv.first.Scalar();
        if (k == "name") {
          if (!kv.second.IsScalar() || kv.second.Scalar().empty()) {
            Error(kv.second, where + ".name", "expected a non-empty name");
            ok = false;
          } else {
            cell.name = kv.second.Scalar();
            named = true;
          }
        } else if (k == "set") {
          if (kv.second.IsNull()) continue;  // the base job as it is
          if (!kv.second.IsMap()) {
            Error(kv.second, where + ".set", "expected a mapping of job keys to values");
            ok = false;
            continue;
          }
          std::set<std::string> seen;
          for (const auto& o : kv.second) {
            const std::string okey = absl::StrCat(where, ".set.", o.first.Scalar());
            if (!CheckKey(o.first, okey)) {
              ok = false;
              continue;
            }
            if (!seen.insert(o.first.Scalar()).second) {
              Error(o.first, okey, "duplicate key (keep one)");
              ok = false;
              continue;
            }
            auto value = ReadValue(o.second, o.first.Scalar(), okey);
            if (!value) {
              ok = false;
              continue;
            }
            cell.overrides.push_back(*value);
          }
        } else {
          Error(kv.first, absl::StrCat(where, ".", k), "unknown key (allowed: name, set)");
          ok = false;
        }
      }
      if (ok) {
        out_->cells.push_back(std::move(cell));
        explicit_names_.push_back(named);
      }
    }
  }

  void ReadSeeds(const YAML::Node& key_node, const YAML::Node& seeds) {
    if (seeds.IsNull() || (seeds.IsSequence() && seeds.size() == 0)) {
      Error(key_node, "seeds",
            "empty: every cell needs at least one seed, e.g. seeds: {count: 10}");
      return;
    }
    if (seeds.IsSequence()) {
      std::set<uint64_t> seen;
      for (size_t i = 0; i < seeds.size(); ++i) {
        uint64_t seed = 0;
        int64_t signed_seed = 0;
        const std::string where = absl::StrCat("seeds[", i, "]");
        if (!seeds[i].IsScalar() || !YAML::convert<int64_t>::decode(seeds[i], signed_seed) ||
            signed_seed < 0) {
          Error(seeds[i], where,
                absl::StrCat("expected a whole number >= 0, got '", FlowText(seeds[i]), "'"));
          continue;
        }
        seed = static_cast<uint64_t>(signed_seed);
        if (!seen.insert(seed).second) {
          Error(seeds[i], where, absl::StrCat("seed ", seed, " is listed twice"));
          continue;
        }
        out_->seeds.push_back(seed);
      }
      if (out_->seeds.size() > static_cast<size_t>(kMaxSeeds)) {
        Error(key_node, "seeds", absl::StrCat("at most ", kMaxSeeds, " seeds"));
      }
      return;
    }
    if (!seeds.IsMap()) {
      Error(seeds, "seeds", "expected a list of seeds, or {count: N, start: S}");
      return;
    }
    int64_t count = -1, start = 1;
    bool ok = true;
    for (const auto& kv : seeds) {
      const std::string k = kv.first.Scalar();
      int64_t v = 0;
      if (k != "count" && k != "start") {
        Error(kv.first, "seeds." + k, "unknown key (allowed: count, start)");
        ok = false;
        continue;
      }
      if (!kv.second.IsScalar() || !YAML::convert<int64_t>::decode(kv.second, v)) {
        Error(kv.second, "seeds." + k,
              absl::StrCat("expected a whole number, got '", FlowText(kv.second), "'"));
        ok = false;
        continue;
      }
      (k == "count" ? count : start) = v;
    }
    if (!ok) return;
    if (count == -1) {
      Error(seeds, "seeds.count", "required: how many seeds (start defaults to 1)");
      return;
    }
    if (count < 1 || count > kMaxSeeds) {
      Error(seeds["count"], "seeds.count",
            absl::StrCat("must be between 1 and ", kMaxSeeds, ", got ", count));
      return;
    }
    if (start < 0) {
      Error(seeds["start"], "seeds.start", absl::StrCat("must be >= 0, got ", start));
      return;
    }
    for (int64_t i = 0; i < count; ++i) out_->seeds.push_back(static_cast<uint64_t>(start + i));
  }

  // Default names from the overrides ("kind=ps_lr=0.05": the last part of each key, or the whole
  // key where two keys share a last part), then every name checked and made unique.
  void NameCells() {
    std::map<std::string, std::set<std::string>> by_last;
    for (const Cell& c : out_->cells) {
      for (const Override& o : c.overrides) {
        if (std::find(out_->override_keys.begin(), out_->override_keys.end(), o.key) ==
            out_->override_keys.end()) {
          out_->override_keys.push_back(o.key);
        }
        by_last[o.key.substr(o.key.rfind('.') + 1)].insert(o.key);
      }
    }
    std::map<std::string, std::string> first_line;
    for (size_t i = 0; i < out_->cells.size(); ++i) {
      Cell& c = out_->cells[i];
      if (!explicit_names_[i]) {
        std::vector<std::string> parts;
        for (const Override& o : c.overrides) {
          std::string last = o.key.substr(o.key.rfind('.') + 1);
          parts.push_back(absl::StrCat(by_last[last].size() > 1 ? o.key : last, "=", o.value));
        }
        c.name = parts.empty() ? "base" : SafeName(absl::StrJoin(parts, "_"));
      } else if (!std::all_of(c.name.begin(), c.name.end(), NameChar) || c.name[0] == '.') {
        errors_.push_back(absl::StrCat(origin_, ":", c.line, ": ", c.where, ".name: '", c.name,
                                       "': use letters, digits and ._=,+- only (it names a "
                                       "directory), not starting with '.'"));
        continue;
      }
      auto [it, inserted] = first_line.emplace(c.name, c.where);
      if (!inserted) {
        errors_.push_back(absl::StrCat(origin_, ":", c.line, ": ", c.where, ": the cell name '",
                                       c.name, "' is taken by ", it->second,
                                       " (names must differ: they are directories)"));
      }
    }
  }

  std::string origin_;
  SweepSpec* out_;
  // The top-level keys seen: name -> (key node, value node).
  std::map<std::string, std::pair<YAML::Node, YAML::Node>> keys_;
  int cores_ = 1;
  std::vector<bool> explicit_names_;
  std::vector<std::string> errors_;
};

}  // namespace

void SortByLine(const std::string& origin, std::vector<std::string>& errors) {
  auto line_of = [&](const std::string& e) {
    if (e.compare(0, origin.size() + 1, origin + ":") != 0) return 0L;
    return std::strtol(e.c_str() + origin.size() + 1, nullptr, 10);
  };
  std::stable_sort(errors.begin(), errors.end(), [&](const std::string& a, const std::string& b) {
    return line_of(a) < line_of(b);
  });
}

int ParallelLimit(int cores) { return std::max(1, cores / 2); }

absl::StatusOr<SweepSpec> ParseSweepSpec(const std::string& yaml_text, const std::string& origin,
                                         const SweepParseOptions& options) {
  SweepSpec spec;
  spec.origin = origin;
  SweepReader reader(origin, &spec);
  reader.set_cores(options.cores);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ":", e.mark.line >= 0 ? e.mark.line + 1 : 1,
                     ": (syntax): invalid YAML at column ", e.mark.column + 1, ": ", e.msg));
  }
  if (root.IsNull() || (root.IsMap() && root.size() == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin,
                     ":1: (top level): empty sweep file: it needs base, grid or cells, "
                     "and seeds"));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(reader.At(root), ": (top level): expected a mapping of keys"));
  }
  reader.Read(root);
  if (!reader.errors().empty()) {
    SortByLine(origin, reader.errors());
    return absl::InvalidArgumentError(absl::StrJoin(reader.errors(), "\n"));
  }
  return spec;
}

nlohmann::json SweepSpecToJson(const SweepSpec& spec) {
  nlohmann::json cells = nlohmann::json::array();
  for (const Cell& c : spec.cells) {
    nlohmann::json overrides = nlohmann::json::array();
    for (const Override& o : c.overrides) {
      overrides.push_back({{"key", o.key}, {"value", o.value}});
    }
    cells.push_back({{"name", c.name}, {"overrides", overrides}});
  }
  nlohmann::json j = {{"origin", spec.origin},
                      {"name", spec.name},
                      {"base", spec.base_path},
                      {"cells", cells},
                      {"override_keys", spec.override_keys},
                      {"seeds", spec.seeds},
                      {"parallel", spec.parallel},
                      {"baseline", spec.baseline},
                      {"target_accuracy", nullptr}};
  if (spec.target_accuracy) j["target_accuracy"] = *spec.target_accuracy;
  return j;
}

absl::StatusOr<SweepSpec> SweepSpecFromJson(const nlohmann::json& j) {
  try {
    SweepSpec spec;
    spec.origin = j.at("origin").get<std::string>();
    spec.name = j.at("name").get<std::string>();
    spec.base_path = j.at("base").get<std::string>();
    for (const auto& c : j.at("cells")) {
      Cell cell;
      cell.name = c.at("name").get<std::string>();
      for (const auto& o : c.at("overrides")) {
        cell.overrides.push_back(
            Override{o.at("key").get<std::string>(), o.at("value").get<std::string>(), 0, ""});
      }
      spec.cells.push_back(std::move(cell));
    }
    spec.override_keys = j.at("override_keys").get<std::vector<std::string>>();
    spec.seeds = j.at("seeds").get<std::vector<uint64_t>>();
    spec.parallel = j.at("parallel").get<int>();
    spec.baseline = j.at("baseline").get<std::string>();
    if (j.at("target_accuracy").is_number()) {
      spec.target_accuracy = j.at("target_accuracy").get<double>();
    }
    return spec;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not a sweep description: ", e.what()));
  }
}

}  // namespace strata::sweep
