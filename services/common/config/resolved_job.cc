#include "services/common/config/resolved_job.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "services/common/base/files.h"
#include "services/common/config/job_spec.h"

namespace strata {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Collects the text parser's complaints with their line and column (1-based).
class TextErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit TextErrors(std::string origin) : origin_(std::move(origin)) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(absl::StrCat(origin_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, message);
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string origin_;
  std::vector<std::string> errors_;
};

// The checks of one value of `key` in `holder` (element `index` of a repeated field, or -1).
void CheckValue(const JobKey& key, const Message& holder, int index, const std::string& name,
                std::vector<std::string>* problems) {
  const FieldDescriptor* f = key.leaf();
  const Reflection* r = holder.GetReflection();
  const bool rep = index >= 0;
  double number = 0;
  std::string text;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      number = rep ? r->GetRepeatedInt32(holder, f, index) : r->GetInt32(holder, f);
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      number =
          static_cast<double>(rep ? r->GetRepeatedInt64(holder, f, index) : r->GetInt64(holder, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      number = static_cast<double>(rep ? r->GetRepeatedUInt64(holder, f, index)
                                       : r->GetUInt64(holder, f));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      number = rep ? r->GetRepeatedDouble(holder, f, index) : r->GetDouble(holder, f);
      if (!std::isfinite(number)) problems->push_back(absl::StrCat(name, " must be finite"));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      text = rep ? r->GetRepeatedString(holder, f, index) : r->GetString(holder, f);
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int value =
          rep ? r->GetRepeatedEnumValue(holder, f, index) : r->GetEnumValue(holder, f);
      const auto* d = f->enum_type()->FindValueByNumber(value);
      const std::string spelled = d == nullptr ? "" : Spelled(d);
      const bool allowed = key.allowed.empty() || std::find(key.allowed.begin(), key.allowed.end(),
                                                            spelled) != key.allowed.end();
      if (spelled.empty()) {
        problems->push_back(absl::StrCat(name, " is not a known value (", value, ")"));
      } else if (!allowed) {
        problems->push_back(absl::StrCat(name, " is '", spelled, "', not one of ",
                                         absl::StrJoin(key.allowed, ", ")));
      }
      return;
    }
    default:
      return;
  }
  const bool below = key.min && (key.min_open ? number <= *key.min : number < *key.min);
  const bool above = key.max && (key.max_open ? number >= *key.max : number > *key.max);
  if (below || above) {
    problems->push_back(absl::StrCat(name, " must be ", key.RangeText(), ", got ", number));
  }
  // The extra check of a string is made only on a value that was given: an empty default means
  // "not set" (security.tls_dir).
  const bool unset =
      f->cpp_type() == FieldDescriptor::CPPTYPE_STRING && text.empty() && key.default_yaml.empty();
  if (key.check != nullptr && !unset) {
    if (std::string p = key.check(text, number); !p.empty()) {
      problems->push_back(absl::StrCat(name, " ", p));
    }
  }
}

}  // namespace

std::vector<std::string> ResolvedJobProblems(const v1::ResolvedJob& job) {
  std::vector<std::string> p;
  auto need = [&p](bool ok, const std::string& field, const std::string& rule) {
    if (!ok) p.push_back(absl::StrCat(field, " ", rule));
  };
  need(job.format() == kResolvedJobFormat, "format",
       absl::StrCat("must be ", kResolvedJobFormat, ", got ", job.format()));
  // The checks the YAML reader makes, made again from the same table: a service trusts no file
  // blindly.
  for (const JobKey& key : JobKeys()) {
    if (key.IsListItem()) continue;
    const Message* holder = &job;
    for (size_t i = 0; i + 1 < key.chain.size(); ++i) {
      holder = &holder->GetReflection()->GetMessage(*holder, key.chain[i]);
    }
    const FieldDescriptor* f = key.leaf();
    if (key.IsListOfMappings()) {
      const int n = holder->GetReflection()->FieldSize(*holder, f);
      for (int i = 0; i < n; ++i) {
        const Message& item = holder->GetReflection()->GetRepeatedMessage(*holder, f, i);
        for (const JobKey& k : JobKeys()) {
          if (k.ListPath() == key.path) {
            CheckValue(k, item, -1, absl::StrCat(key.path, "[", i, "].", k.Name()), &p);
          }
        }
      }
    } else if (f->is_repeated()) {
      const int n = holder->GetReflection()->FieldSize(*holder, f);
      for (int i = 0; i < n; ++i) {
        CheckValue(key, *holder, i, absl::StrCat(key.path, "[", i, "]"), &p);
      }
    } else {
      CheckValue(key, *holder, -1, key.path, &p);
    }
  }
  // The derived facts.
  const auto& t = job.training();
  need(t.worker_batch() >= 1 && t.worker_batch() <= t.global_batch(), "training.worker_batch",
       "must lie in [1, global_batch]");
  const auto& s = job.strategy();
  need(std::isfinite(s.server_lr_scale()) && s.server_lr_scale() > 0, "strategy.server_lr_scale",
       "must be finite and > 0");
  need(s.round_points() >= 1, "strategy.round_points", "must be >= 1");
  need(s.bucket_bytes() >= 0 && s.bucket_bytes() <= (int64_t{1} << 30), "strategy.bucket_bytes",
       "must lie in [0, 1 GiB]");
  return p;
}

std::string ResolvedJobText(const v1::ResolvedJob& job) {
  std::string text;
  google::protobuf::TextFormat::Printer printer;
  printer.PrintToString(job, &text);
  return text;
}

absl::StatusOr<v1::ResolvedJob> ParseResolvedJob(const std::string& text,
                                                 const std::string& origin) {
  v1::ResolvedJob job;
  TextErrors errors(origin);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &job)) {
    return absl::InvalidArgumentError(errors.errors().empty()
                                          ? absl::StrCat(origin, ": not a resolved job")
                                          : absl::StrJoin(errors.errors(), "\n"));
  }
  if (std::vector<std::string> p = ResolvedJobProblems(job); !p.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": resolved job refused: ", absl::StrJoin(p, "; ")));
  }
  return job;
}

absl::StatusOr<v1::ResolvedJob> LoadResolvedJob(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseResolvedJob(*text, path);
}

absl::StatusOr<v1::ResolvedJob> LoadServiceJob(const ServiceJobSource& source) {
  if (source.job.empty() == source.config.empty()) {
    return absl::InvalidArgumentError(
        "give the job as exactly one of --job (what `strata` writes) and --config (a YAML spec)");
  }
  if (!source.job.empty()) {
    if (!source.overrides.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--job ", source.job,
                                                     " is resolved already: it takes no --set (",
                                                     absl::StrJoin(source.overrides, ", "), ")"));
    }
    return LoadResolvedJob(source.job);
  }
  return LoadJobSpec(source.config, source.overrides);
}

double WorkerCpuShare(const v1::ResolvedCluster& cluster, int rank) {
  for (const v1::ResolvedStraggler& st : cluster.stragglers()) {
    if (st.worker() == rank) return st.cpu_fraction();
  }
  if (cluster.cpu().worker() <= 0) return 0;
  const int r = rank;
  return cluster.cpu().worker() *
         (r >= 0 && r < cluster.worker_speeds_size() ? cluster.worker_speeds(r) : 1.0);
}

std::optional<int> BuiltinModelTensors(v1::ModelArch arch) {
  const auto* d = v1::ModelArch_descriptor()->FindValueByNumber(arch);
  if (d == nullptr || !d->options().HasExtension(v1::model_tensors)) return std::nullopt;
  return d->options().GetExtension(v1::model_tensors);
}

std::string ModelText(const v1::ResolvedJob& job) {
  const std::string& file = job.model().torchscript();
  if (file.empty()) return Spelled(job.arch());
  const size_t slash = file.rfind('/');
  return absl::StrCat(slash == std::string::npos ? file : file.substr(slash + 1), " (TorchScript)");
}

int64_t AtFractionSwitchEpoch(double fraction, int64_t epochs) {
  // A small epsilon keeps 0.3 * 10 (= 3.0000000000000004 in binary) at epoch 3.
  const double at = std::ceil(fraction * static_cast<double>(epochs) - 1e-9);
  return std::max<int64_t>(1, static_cast<int64_t>(at));
}

std::string StrategyText(const v1::ResolvedStrategy& s) {
  switch (s.kind()) {
    case v1::STRATEGY_KIND_PS:
      return absl::StrCat("ps (", Spelled(s.consistency()), ")");
    case v1::STRATEGY_KIND_SWITCH:
      return s.rule() == v1::SWITCH_RULE_AT_FRACTION
                 ? absl::StrCat("switch (at_fraction ", s.at_fraction(), ")")
                 : absl::StrCat("switch (empirical, window ", s.window(), ", threshold ",
                                s.threshold_percent(), "%)");
    default:
      return Spelled(s.kind());
  }
}

}  // namespace strata
