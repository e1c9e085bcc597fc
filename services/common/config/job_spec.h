// The job spec (docs/job-spec.md): one validated YAML file instead of scattered flags, read through
// the table of keys (job_keys.h) straight into the job as Strata runs it (v1::ResolvedJob). Every
// problem is reported as "FILE:LINE: key: what" (or "(from --set KEY=VALUE): key: what" when an
// override brought the value); unknown keys, duplicate keys, keys without a value, non-finite
// numbers and an empty file are errors, so a typo never silently falls back to a default.
//
// What the parse keeps besides the job is only what the job cannot hold: where each key came from,
// for the messages of the checks that come after the schema (orchestrator/plan/job_checks.h).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "strata/v1/job.pb.h"

namespace strata {

// Everything the parser learned from one job spec, for callers that check more than the schema:
// they must blame the same places and skip checks whose inputs were already refused, so that one
// mistake is reported once, not again as its consequences.
struct JobSpecReading {
  std::string origin;  // the file path (or what stands for it) in messages
  // Accepted values; the default wherever a key is absent or was refused; the derived facts
  // computed from those.
  v1::ResolvedJob job;
  std::vector<std::string> errors;  // every problem, in the order found, one line each
  // Dotted keys whose values were refused ("training.lr", "cluster.stragglers[0].worker"); an
  // unknown key is an error but refuses no value.
  std::set<std::string> refused;
  // Every key present after --set, dotted, to its place: "FILE:LINE" or "(from --set K=V)".
  std::map<std::string, std::string> sources;
  // False when the text is not YAML, is empty, or is not a mapping: nothing in `job` came from it.
  bool mapping_read = false;

  // The place to blame for `key`: its own source, else that of the nearest enclosing section in
  // the file, else `origin` alone (a default the file never mentions).
  std::string Where(const std::string& key) const;
  // True if `key`, a key inside it or a section around it was refused.
  bool Refused(const std::string& key) const;
  bool Given(const std::string& key) const { return sources.count(key) > 0; }
};

// `origin` names the text in messages (usually the file path). `overrides` are "a.b=value"
// settings (from `--set`) applied before validation, so they are checked like the file.
JobSpecReading ReadJobSpec(const std::string& yaml_text, const std::string& origin,
                           const std::vector<std::string>& overrides = {});

// ReadJobSpec as a Status: InvalidArgument with every error, one per line.
absl::StatusOr<v1::ResolvedJob> ParseJobSpec(const std::string& yaml_text,
                                             const std::string& origin,
                                             const std::vector<std::string>& overrides = {});
absl::StatusOr<v1::ResolvedJob> LoadJobSpec(const std::string& path,
                                            const std::vector<std::string>& overrides = {});

// The job of a spec that sets nothing: every key's default, the derived facts computed.
v1::ResolvedJob DefaultJob();

// The job as YAML, every key the table writes (the run directory's job.yaml, the containers'
// ConfigMap); ParseJobSpec reads it back to the same job.
std::string JobSpecYaml(const v1::ResolvedJob& job);

}  // namespace strata
