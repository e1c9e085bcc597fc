#include "services/common/config/job_spec.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <absl/strings/escaping.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <yaml-cpp/yaml.h>

#include "services/common/base/files.h"
#include "services/common/config/job_key_values.h"
#include "services/common/config/job_keys.h"
#include "services/common/config/resolved_job.h"

namespace strata {
namespace {

using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

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

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
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

// The sections of the spec as the table lays them out: each section's keys and subsections, in
// table order ("" is the top level; a list of mappings is a section of its items' keys).
class Sections {
 public:
  static const Sections& Get() {
    static const Sections* s = new Sections();
    return *s;
  }
  const std::vector<std::string>& Children(const std::string& section) const {
    static const std::vector<std::string> none;
    auto it = children_.find(section);
    return it == children_.end() ? none : it->second;
  }

 private:
  Sections() {
    for (const JobKey& key : JobKeys()) {
      // Every section on the way to the key, then the key, each once, in order of appearance.
      std::string section;
      std::string rest = key.IsListItem() ? key.ListPath() : key.Section();
      std::vector<std::string> parts;
      if (!rest.empty()) parts = absl::StrSplit(rest, '.');
      for (const std::string& part : parts) {
        Add(section, part);
        section = Join(section, part);
      }
      Add(section, key.Name());
    }
  }
  void Add(const std::string& section, const std::string& child) {
    std::vector<std::string>& list = children_[section];
    if (std::find(list.begin(), list.end(), child) == list.end()) list.push_back(child);
  }
  std::map<std::string, std::vector<std::string>> children_;
};

// Every per-worker figure that follows from the keys, computed once, here.
void Derive(v1::ResolvedJob* job) {
  const int workers = std::max(1, job->cluster().workers());
  v1::ResolvedTraining* t = job->mutable_training();
  // training.batch_size is the global batch: each worker's mini-batch is its share.
  const int64_t worker_batch = std::max<int64_t>(1, t->global_batch() / workers);
  t->set_worker_batch(worker_batch);
  v1::ResolvedStrategy* s = job->mutable_strategy();
  // ASP/SSP apply each worker's push on its own: 1 / workers keeps the step of n pushes that of
  // one global-batch step (docs/algorithms.md).
  s->set_server_lr_scale(s->ps_lr_scale() > 0 ? s->ps_lr_scale() : 1.0 / workers);
  s->set_round_points(static_cast<int64_t>(workers) * worker_batch);
  s->set_bucket_bytes(static_cast<int64_t>(std::llround(s->bucket_mb() * (1 << 20))));
}

// Walks the YAML tree by the table, fills the job and collects every problem with its key and
// place.
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

  // `refuse`: the value of `key` is not taken (the job keeps its default), so later checks that
  // depend on it stay silent instead of reporting consequences of the default.
  void Error(const std::string& where, const std::string& key, const std::string& what,
             bool refuse = true) {
    out_->errors.push_back(Printable(absl::StrCat(where, ": ", key, ": ", what)));
    if (refuse) out_->refused.insert(key);
  }

  // The top level, then every section and key the table knows, in table order.
  bool ReadRoot(const YAML::Node& root) {
    if (!Map(root, "", Sections::Get().Children(""))) return false;
    ReadSection(root, "");
    return true;
  }

 private:
  // Checks that `node` is a map whose keys are all in `allowed`, each once, and records where
  // every key is. yaml-cpp keeps duplicate keys and answers lookups with the first, so the walk
  // over the pairs is the only place a duplicate shows.
  bool Map(const YAML::Node& node, const std::string& path, const std::vector<std::string>& keys) {
    if (!node.IsDefined() || node.IsNull()) return false;
    const std::string name = path.empty() ? "(top level)" : path;
    if (!node.IsMap()) {
      Error(path.empty() ? Locate(node) : At(path, node), name, "expected a mapping of keys");
      return false;
    }
    const std::set<std::string> allowed(keys.begin(), keys.end());
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

  void ReadSection(const YAML::Node& map, const std::string& section) {
    for (const std::string& child : Sections::Get().Children(section)) {
      const std::string full = Join(section, child);
      const JobKey* key = FindJobKey(full);
      const YAML::Node node = map[child];
      if (key != nullptr && key->IsListOfMappings()) {
        ReadList(map, *key);
      } else if (key != nullptr) {
        ReadKey(map, *key, full, nullptr);
      } else if (Map(node, full, Sections::Get().Children(full))) {
        ReadSection(node, full);
      }
    }
  }

  // A list of mappings: each item a small section of its own ("cluster.stragglers[0].worker").
  void ReadList(const YAML::Node& map, const JobKey& list) {
    const YAML::Node node = map[list.Name()];
    if (!node.IsDefined()) return;
    const std::vector<std::string>& keys = Sections::Get().Children(list.path);
    if (node.IsNull()) {
      Error(At(list.path, node), list.path, "has no value (write [] for none)");
      return;
    }
    if (!node.IsSequence()) {
      Error(At(list.path, node), list.path,
            absl::StrCat("expected a list of {", absl::StrJoin(keys, ", "), "}"));
      return;
    }
    Message* holder = KeyHolder(list, &out_->job, nullptr);
    holder->GetReflection()->ClearField(holder, list.leaf());
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string path = absl::StrCat(list.path, "[", i, "]");
      if (!Map(node[i], path, keys)) continue;
      Message* item = holder->GetReflection()->AddMessage(holder, list.leaf());
      // The item's defaults first, then what it says.
      for (const std::string& name : keys) {
        const JobKey& k = *FindJobKey(absl::StrCat(list.path, "[].", name));
        if (!k.default_yaml.empty()) {
          KeyValue d;
          DecodeKeyValue(k, YAML::Load(k.default_yaml), &d);
          StoreKeyValue(item, k.leaf(), d);
        }
      }
      for (const std::string& name : keys) {
        const JobKey& k = *FindJobKey(absl::StrCat(list.path, "[].", name));
        if (k.required && !node[i][name].IsDefined()) {
          Error(Locate(node[i]), Join(path, name), "is required");
        }
        ReadKey(node[i], k, Join(path, name), item);
      }
    }
  }

  // One key of `map`: type, range and check, then stored. `full` is its path as messages say it.
  void ReadKey(const YAML::Node& map, const JobKey& key, const std::string& full, Message* item) {
    const YAML::Node node = map[key.Name()];
    if (!node.IsDefined()) return;
    const std::string where = At(full, node);
    const FieldDescriptor* f = key.leaf();
    if (f->is_repeated()) {
      if (node.IsNull()) {
        Error(where, full, "has no value (write [] for none)");
        return;
      }
      if (!node.IsSequence()) {
        Error(where, full,
              absl::StrCat("expected a list of ", key.IsNumber() ? "numbers" : "values"));
        return;
      }
      Message* holder = KeyHolder(key, &out_->job, item);
      holder->GetReflection()->ClearField(holder, f);
      for (size_t i = 0; i < node.size(); ++i) {
        const std::string element = absl::StrCat(full, "[", i, "]");
        KeyValue value;
        std::string problem = DecodeKeyValue(key, node[i], &value);
        if (problem.empty() && key.IsNumber()) problem = KeyRangeProblem(key, value.number);
        if (!problem.empty()) {
          // An element of the wrong type is named by its place; the list is refused.
          Error(Locate(node[i]), element,
                absl::StartsWith(problem, "expected") ? absl::StrCat("expected ", KeyTypeName(f))
                                                      : problem);
          out_->refused.insert(full);
          continue;
        }
        StoreKeyValue(holder, f, value);
      }
      return;
    }
    if (node.IsNull()) {
      Error(where, full, "has no value (give one, or leave the key out for the default)");
      return;
    }
    KeyValue value;
    std::string problem = DecodeKeyValue(key, node, &value);
    if (problem.empty() && key.IsNumber()) problem = KeyRangeProblem(key, value.number);
    if (problem.empty() && key.check != nullptr) problem = key.check(value.text, value.number);
    if (!problem.empty()) {
      Error(where, full, problem);
      return;
    }
    StoreKeyValue(KeyHolder(key, &out_->job, item), f, value);
  }

  // The place of `key`'s value: where Map() found the key, else the node itself.
  std::string At(const std::string& key, const YAML::Node& node) const {
    if (auto it = out_->sources.find(key); it != out_->sources.end()) return it->second;
    return Locate(node);
  }

  JobSpecReading* out_;
  std::vector<OverrideNodes> overrides_;
};

// The rules between keys, each skipped when one of its inputs was refused: its default would make
// the message about a value nobody wrote.
void CheckAcrossKeys(SpecReader& r, JobSpecReading* out) {
  v1::ResolvedJob& job = out->job;
  auto error = [&](const std::string& key, const std::string& what) {
    r.Error(out->Where(key), key, what);
  };
  // `at_fraction` given means that rule unless a rule is named.
  if (out->Given("strategy.at_fraction") && !out->Given("strategy.rule")) {
    job.mutable_strategy()->set_rule(v1::SWITCH_RULE_AT_FRACTION);
  }
  // Targets (mse, bce_with_logits) have no classes to stratify by: a regression job asking for
  // it is refused, one that does not ask is split at random.
  if (job.training().loss() != v1::LOSS_CROSS_ENTROPY && !out->Refused("training.loss")) {
    if (!out->Given("sharding.method")) {
      job.mutable_sharding()->set_method(v1::SHARD_METHOD_RANDOM);
    } else if (job.sharding().method() == v1::SHARD_METHOD_STRATIFIED &&
               !out->Refused("sharding.method")) {
      error("sharding.method",
            absl::StrCat("stratified needs class labels, and training.loss ",
                         Spelled(job.training().loss()),
                         " trains on targets: use random, mod or distribution-aware"));
    }
  }
  const auto& milestones = job.training().lr_milestones();
  if (!out->Refused("training.lr_schedule.milestones")) {
    for (int i = 1; i < milestones.size(); ++i) {
      if (milestones[i] <= milestones[i - 1]) {
        error("training.lr_schedule.milestones", "must be strictly increasing");
        break;
      }
    }
  }
  const auto& mix = job.stream().produce().drift().classes();
  if (!out->Refused("stream.produce.drift.classes")) {
    // Whether each is below the data set's number of classes, `strata produce` checks: it has
    // the data.
    for (int i = 0; i < mix.size(); ++i) {
      if (mix[i] < 0 || std::count(mix.begin(), mix.end(), mix[i]) > 1) {
        error("stream.produce.drift.classes",
              absl::StrCat("class ", mix[i], (mix[i] < 0 ? " is negative" : " is given twice"),
                           ": give each class once, from 0"));
        break;
      }
    }
  }
  // A key given where it means nothing would be silently ignored.
  for (const JobKey& key : JobKeys()) {
    if (key.applies == nullptr || !out->Given(key.path) || out->Refused(key.path)) continue;
    if (std::any_of(key.applies_inputs.begin(), key.applies_inputs.end(),
                    [&](const std::string& k) { return out->Refused(k); })) {
      continue;
    }
    if (std::string why = key.applies(job); !why.empty()) error(key.path, why);
  }
  const v1::ResolvedCluster& cluster = job.cluster();
  for (int i = 0; i < cluster.stragglers_size(); ++i) {
    const std::string key = absl::StrCat("cluster.stragglers[", i, "].worker");
    if (out->Refused(key) || out->Refused("cluster.workers")) continue;
    if (cluster.stragglers(i).worker() >= cluster.workers()) {
      error(key, absl::StrCat("worker ", cluster.stragglers(i).worker(), " does not exist (",
                              cluster.workers(), " workers)"));
    }
  }
  if (cluster.worker_speeds_size() > 0 && !out->Refused("cluster.worker_speeds") &&
      !out->Refused("cluster.workers")) {
    if (cluster.worker_speeds_size() != cluster.workers()) {
      error("cluster.worker_speeds",
            absl::StrCat(cluster.worker_speeds_size(), " speeds for ", cluster.workers(),
                         " workers: give one per worker"));
    } else if (cluster.cpu().worker() <= 0 && !out->Refused("cluster.cpu.worker")) {
      error("cluster.worker_speeds",
            "needs cluster.cpu.worker, the cores a worker of speed 1 gets");
    }
  }
  if (cluster.compute_speeds_size() > 0 && !out->Refused("cluster.compute_speeds") &&
      !out->Refused("cluster.workers") && cluster.compute_speeds_size() != cluster.workers()) {
    error("cluster.compute_speeds",
          absl::StrCat(cluster.compute_speeds_size(), " speeds for ", cluster.workers(),
                       " workers: give one per worker"));
  }
  if (!out->Refused("training.batch_size") && !out->Refused("cluster.workers") &&
      job.training().global_batch() < cluster.workers()) {
    // Blame the key the file (or --set) gave; with batch_size left at its default, the workers.
    const std::string key =
        out->Given("training.batch_size") ? "training.batch_size" : "cluster.workers";
    error(key, absl::StrCat("global batch ", job.training().global_batch(), " is smaller than the ",
                            cluster.workers(), " workers that split it"));
  }
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

// ---- the emitter ----------------------------------------------------------------------------

bool SameValue(const JobKey& key, const Message& a, const Message& b) {
  const Message& ha = *KeyHolder(key, a, nullptr);
  const Message& hb = *KeyHolder(key, b, nullptr);
  const FieldDescriptor* f = key.leaf();
  const Reflection* r = ha.GetReflection();
  if (f->is_repeated()) {
    if (r->FieldSize(ha, f) != r->FieldSize(hb, f)) return false;
    return r->FieldSize(ha, f) == 0;  // only empty lists are compared: the defaults are empty
  }
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return r->GetInt32(ha, f) == r->GetInt32(hb, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return r->GetInt64(ha, f) == r->GetInt64(hb, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return r->GetUInt64(ha, f) == r->GetUInt64(hb, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return r->GetDouble(ha, f) == r->GetDouble(hb, f);
    case FieldDescriptor::CPPTYPE_STRING:
      return r->GetString(ha, f) == r->GetString(hb, f);
    case FieldDescriptor::CPPTYPE_ENUM:
      return r->GetEnumValue(ha, f) == r->GetEnumValue(hb, f);
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(ha, f) == r->GetBool(hb, f);
    default:
      return false;
  }
}

// Writes element `index` of `f` (or its only value, index -1) of `m`.
void EmitValue(YAML::Emitter& out, const Message& m, const FieldDescriptor* f, int index) {
  const Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      out << (rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      out << static_cast<long long>(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      out << (rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      out << static_cast<unsigned long long>(rep ? r->GetRepeatedUInt64(m, f, index)
                                                 : r->GetUInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      out << (rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      out << (rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out << (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      out << (rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      out << Spelled(rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f));
      break;
    default:
      break;
  }
}

bool Emitted(const JobKey& key, const v1::ResolvedJob& job) {
  if (key.emit_only_where_applies && key.applies != nullptr && !key.applies(job).empty()) {
    return false;
  }
  static const v1::ResolvedJob defaults = DefaultJob();
  return !(key.emit_only_unless_default && SameValue(key, job, defaults));
}

// A section none of whose keys is written is left out whole (no `stream: {}`).
bool EmitsAnything(const v1::ResolvedJob& job, const std::string& section) {
  for (const std::string& child : Sections::Get().Children(section)) {
    const std::string full = Join(section, child);
    const JobKey* key = FindJobKey(full);
    if (key == nullptr ? EmitsAnything(job, full) : Emitted(*key, job)) return true;
  }
  return false;
}

void EmitSection(YAML::Emitter& out, const v1::ResolvedJob& job, const std::string& section) {
  for (const std::string& child : Sections::Get().Children(section)) {
    const std::string full = Join(section, child);
    const JobKey* key = FindJobKey(full);
    if (key == nullptr) {
      if (!EmitsAnything(job, full)) continue;
      out << YAML::Key << child << YAML::Value;
      if (IsFlowSection(full)) out << YAML::Flow;
      out << YAML::BeginMap;
      EmitSection(out, job, full);
      out << YAML::EndMap;
      continue;
    }
    if (!Emitted(*key, job)) continue;
    out << YAML::Key << child << YAML::Value;
    const Message& holder = *KeyHolder(*key, job, nullptr);
    const FieldDescriptor* f = key->leaf();
    const int n = f->is_repeated() ? holder.GetReflection()->FieldSize(holder, f) : 0;
    if (key->IsListOfMappings()) {
      out << YAML::BeginSeq;
      for (int i = 0; i < n; ++i) {
        const Message& item = holder.GetReflection()->GetRepeatedMessage(holder, f, i);
        out << YAML::Flow << YAML::BeginMap;
        for (const std::string& name : Sections::Get().Children(full)) {
          const JobKey& k = *FindJobKey(absl::StrCat(full, "[].", name));
          out << YAML::Key << name << YAML::Value;
          EmitValue(out, item, k.leaf(), -1);
        }
        out << YAML::EndMap;
      }
      out << YAML::EndSeq;
    } else if (f->is_repeated()) {
      out << YAML::Flow << YAML::BeginSeq;
      for (int i = 0; i < n; ++i) EmitValue(out, holder, f, i);
      out << YAML::EndSeq;
    } else {
      EmitValue(out, holder, f, -1);
    }
  }
}

}  // namespace

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

v1::ResolvedJob DefaultJob() {
  v1::ResolvedJob job;
  job.set_format(kResolvedJobFormat);
  for (const JobKey& key : JobKeys()) {
    if (key.IsListItem() || key.IsListOfMappings() || key.leaf()->is_repeated()) continue;
    KeyValue value;
    if (key.leaf()->cpp_type() != FieldDescriptor::CPPTYPE_STRING || !key.default_yaml.empty()) {
      DecodeKeyValue(key, YAML::Load(key.default_yaml), &value);
    }
    StoreKeyValue(KeyHolder(key, &job, nullptr), key.leaf(), value);
  }
  Derive(&job);
  return job;
}

JobSpecReading ReadJobSpec(const std::string& yaml_text, const std::string& origin,
                           const std::vector<std::string>& overrides) {
  JobSpecReading out;
  out.origin = origin;
  out.job = DefaultJob();
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
  if (usable) {
    out.mapping_read = reader.ReadRoot(root);
    if (out.mapping_read) CheckAcrossKeys(reader, &out);
  }
  Derive(&out.job);
  return out;
}

absl::StatusOr<v1::ResolvedJob> ParseJobSpec(const std::string& yaml_text,
                                             const std::string& origin,
                                             const std::vector<std::string>& overrides) {
  JobSpecReading reading = ReadJobSpec(yaml_text, origin, overrides);
  if (!reading.errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(reading.errors, "\n"));
  }
  return std::move(reading.job);
}

absl::StatusOr<v1::ResolvedJob> LoadJobSpec(const std::string& path,
                                            const std::vector<std::string>& overrides) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseJobSpec(*text, path, overrides);
}

std::string JobSpecYaml(const v1::ResolvedJob& job) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  EmitSection(out, job, "");
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace strata
