#include "orchestrator/record/event_text.h"

#include <cmath>
#include <limits>
#include <optional>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include "orchestrator/record/report_format.h"
#include "orchestrator/record/run_record.h"
#include "services/common/base/metrics.h"

namespace strata {
namespace record_text {

using nlohmann::json;

double Number(const json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::numeric_limits<double>::quiet_NaN();
}

std::string Text(const json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_string()) return j[key].get<std::string>();
  return "";
}

bool Flag(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

// The member `key` of `j` if both are objects; null otherwise.
nlohmann::json Member(const json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_object()) return j[key];
  return nullptr;
}

// A pid or rank as written, without thousands separators.
std::string Id(const json& j, const char* key) {
  const double v = Number(j, key);
  return std::isfinite(v) ? absl::StrCat(static_cast<int64_t>(v)) : "--";
}

std::string Capitalized(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

// "a", "a and b", "a, b and c".
std::string JoinAnd(const std::vector<std::string>& items) {
  if (items.size() <= 1) return items.empty() ? "" : items[0];
  return absl::StrCat(absl::StrJoin(items.begin(), items.end() - 1, ", "), " and ", items.back());
}

std::string Plural(int64_t n, const std::string& one, const std::string& many) {
  return absl::StrCat(FormatCount(n), " ", n == 1 ? one : many);
}

// An epoch the record gives as a fraction (the switch's), with one decimal: "epoch 14.9".
std::string EpochText(double epoch) { return FormatFixed(epoch, 1); }

}  // namespace record_text

namespace {

using nlohmann::json;
using record_text::Capitalized;
using record_text::EpochText;
using record_text::Flag;
using record_text::JoinAnd;
using record_text::Member;
using record_text::Number;
using record_text::Plural;
using record_text::Text;

// A value of an event this version does not describe, shortened: never a whole JSON document.
std::string ScalarText(const json& v) {
  if (v.is_string()) return FitText(v.get<std::string>(), 10, 400);
  if (v.is_number_integer()) return FormatCount(v.get<int64_t>());
  if (v.is_number()) return FormatSignificant(v.get<double>(), 4);
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_array()) return Plural(static_cast<int64_t>(v.size()), "item", "items");
  return "";
}

std::string TriggerText(const std::string& trigger) {
  if (trigger == "empirical") return "the empirical rule";
  if (trigger == "at_fraction") return "the at_fraction rule";
  if (trigger == "manual") return "strata switch";
  if (trigger == "ring_broken") return "a worker lost from the ring";
  return trigger;
}

std::string HandoverCheckText(const json& verification) {
  if (!verification.is_object()) return "";
  if (verification.contains("error") && verification["error"].is_string()) {
    return absl::StrCat("; the servers' weights could not be compared: ",
                        verification["error"].get<std::string>());
  }
  if (Flag(verification, "weights_equal")) {
    return "; the servers' weights equal the last all-reduce model";
  }
  return absl::StrCat("; ", FormatFixed(Number(verification, "tensors_differing"), 0), " of ",
                      FormatFixed(Number(verification, "tensors_compared"), 0),
                      " tensors on the servers differ from the last all-reduce model");
}

std::string RunStartedText(const json& e) {
  std::string s = "Run started";
  if (!Text(e, "job").empty()) absl::StrAppend(&s, " from ", Text(e, "job"));
  std::vector<std::string> overrides;
  if (e.contains("overrides") && e["overrides"].is_array()) {
    for (const json& o : e["overrides"]) {
      if (o.is_string()) overrides.push_back(o.get<std::string>());
    }
  }
  if (!overrides.empty()) absl::StrAppend(&s, " with --set ", absl::StrJoin(overrides, ", "));
  const std::string tls = Text(e, "tls");
  if (!tls.empty() && tls != "off") absl::StrAppend(&s, "; TLS ", tls);
  return s;
}

std::string ResumedText(const json& e) {
  std::string s = "Taken up again by strata resume";
  if (const double n = Number(e, "resume"); std::isfinite(n)) {
    absl::StrAppend(&s, " (resume ", FormatFixed(n, 0), ")");
  }
  const std::string phase = Text(e, "phase");
  if (!phase.empty()) absl::StrAppend(&s, ", in ", PhaseLabel(phase));
  if (e.contains("steps") && e["steps"].is_array() && !e["steps"].empty() &&
      e["steps"][0].is_number()) {
    absl::StrAppend(&s, " from step ", FormatCount(e["steps"][0].get<int64_t>()));
  }
  return s;
}

std::string ShardsWrittenText(const json& e) {
  std::string s = "Sharded";
  if (const double n = Number(e, "train_examples"); std::isfinite(n)) {
    absl::StrAppend(&s, " ", FormatCount(static_cast<int64_t>(n)), " training examples");
  }
  if (!Text(e, "method").empty()) absl::StrAppend(&s, " (", Text(e, "method"), ")");
  if (e.contains("shard_sizes") && e["shard_sizes"].is_array()) {
    absl::StrAppend(&s, " into ",
                    Plural(static_cast<int64_t>(e["shard_sizes"].size()), "shard", "shards"));
  }
  if (const double secs = Number(e, "seconds"); std::isfinite(secs)) {
    absl::StrAppend(&s, " in ", FormatSeconds(secs));
  }
  if (const double steps = Number(e, "steps_per_epoch"); std::isfinite(steps)) {
    absl::StrAppend(&s, "; ", FormatCount(static_cast<int64_t>(steps)), " steps per epoch");
  }
  return s;
}

std::string TrainingStartedText(const json& e) {
  std::string s = absl::StrCat("Training started in ", PhaseLabel(Text(e, "mode")));
  if (const double steps = Number(e, "steps_per_epoch"); std::isfinite(steps)) {
    absl::StrAppend(&s, ": ", FormatCount(static_cast<int64_t>(steps)), " steps per epoch");
  }
  if (const double batch = Number(e, "worker_batch"); std::isfinite(batch)) {
    absl::StrAppend(&s, ", ", FormatCount(static_cast<int64_t>(batch)),
                    " examples per worker step");
  }
  return s;
}

std::string SwitchDecidedText(const json& e) {
  // The reason names its rule ("at_fraction rule: 4 of 8 epochs done, ...").
  const SwitchDecidedRecord d = SwitchDecidedRecord::FromJson(e);
  std::string s = d.trigger == "manual" || d.reason.empty()
                      ? absl::StrCat("Switch decided by ", TriggerText(d.trigger))
                      : absl::StrCat("Switch decided: ", d.reason);
  if (const double step = Number(e, "at_step"); std::isfinite(step)) {
    absl::StrAppend(&s, "; hand-over at step ", FormatCount(static_cast<int64_t>(step)));
  }
  return s;
}

std::string SwitchDoneText(const json& e) {
  const SwitchDoneEvent done = SwitchDoneEvent::FromJson(e);
  std::string s = absl::StrCat("Switched to parameter servers at step ", FormatCount(done.at_step));
  if (done.epoch) absl::StrAppend(&s, " (epoch ", EpochText(*done.epoch), ")");
  if (done.handover_s) absl::StrAppend(&s, ", handover ", FormatSeconds(*done.handover_s));
  absl::StrAppend(&s, HandoverCheckText(Member(e, "verification")));
  return s;
}

std::string TrainingFinishedText(const json& e) {
  std::string s = "Training finished";
  if (const double steps = Number(e, "steps"); std::isfinite(steps)) {
    absl::StrAppend(&s, ": ", FormatCount(static_cast<int64_t>(steps)), " steps over all workers");
  }
  return s;
}

std::string RestartText(const json& e, const std::string& process) {
  std::string s = absl::StrCat("Restarted ", process);
  const double n = Number(e, "restart"), of = Number(e, "of");
  if (std::isfinite(n) && std::isfinite(of)) {
    absl::StrAppend(&s, " (restart ", FormatFixed(n, 0), " of ", FormatFixed(of, 0), ")");
  }
  return s;
}

std::string RejoinedText(const json& e, const std::string& process) {
  std::string s = absl::StrCat(process, " rejoined");
  if (const double step = Number(e, "first_step"); std::isfinite(step)) {
    absl::StrAppend(&s, " at step ", FormatCount(static_cast<int64_t>(step)));
  }
  if (!Text(e, "model_from").empty()) {
    absl::StrAppend(&s, " in a re-formed ring, with the model of ", Text(e, "model_from"));
  }
  if (const double v = Number(e, "resumed_version"); std::isfinite(v)) {
    absl::StrAppend(&s, " from its save of version ", FormatCount(static_cast<int64_t>(v)));
  }
  if (const double lost = Number(e, "updates_lost"); std::isfinite(lost)) {
    absl::StrAppend(&s, "; ", Plural(static_cast<int64_t>(lost), "update", "updates"),
                    " lost and redone");
  }
  return s;
}

std::string ProcessesEndedText(const json& e) {
  std::vector<std::string> unclean;
  size_t n = 0;
  if (e.contains("processes") && e["processes"].is_array()) {
    for (const json& p : e["processes"]) {
      ++n;
      const std::string how = Text(p, "how");
      if (how != "exited with code 0") {
        unclean.push_back(absl::StrCat(Text(p, "process"), " ", how));
      }
    }
  }
  std::string s =
      absl::StrCat("All ", Plural(static_cast<int64_t>(n), "process", "processes"), " ended");
  if (unclean.empty()) return absl::StrCat(s, ", each with exit code 0");
  return absl::StrCat(s, "; ", JoinAnd(unclean));
}

std::string RunFailedText(const json& e, const std::string& process) {
  std::string s = absl::StrCat("Run ", Text(e, "state").empty() ? "failed" : Text(e, "state"));
  if (!process.empty()) absl::StrAppend(&s, " (", process, ")");
  if (!Text(e, "error").empty()) absl::StrAppend(&s, ": ", Text(e, "error"));
  return s;
}

}  // namespace

std::string DescribeEvent(const json& e) {
  if (!e.is_object()) return "";
  const std::string name = Text(e, "event");
  const std::optional<RunEvent> event = RunEventOf(e);
  const std::string process = Text(e, "process");
  // A newer event, or one of another shape than this version writes: its name and its plain
  // fields.
  auto generic = [&] {
    std::vector<std::string> fields;
    for (auto it = e.begin(); it != e.end(); ++it) {
      if (it.key() == "event" || it.key() == "time" || it.key() == "wall_s" ||
          it.key() == "command" || it.value().is_object()) {
        continue;
      }
      const std::string v = ScalarText(it.value());
      if (!v.empty()) fields.push_back(absl::StrCat(HumanKey(it.key()), " ", v));
    }
    return absl::StrCat(Capitalized(HumanKey(name)),
                        fields.empty() ? "" : absl::StrCat(": ", absl::StrJoin(fields, ", ")));
  };
  if (!event) return generic();
  switch (*event) {
    case RunEvent::kRunStarted:
      return RunStartedText(e);
    case RunEvent::kResumed:
      return ResumedText(e);
    case RunEvent::kLaunched:
      return absl::StrCat("Started ", process);
    case RunEvent::kListening:
      return absl::StrCat(process, " listening");
    case RunEvent::kShardsWritten:
      return ShardsWrittenText(e);
    case RunEvent::kStraggler:
      return absl::StrCat(process,
                          " slowed down on purpose: ", FormatPercent(Number(e, "cpu_fraction"), 0),
                          " of one core");
    case RunEvent::kStragglerNotApplied:
      return absl::StrCat(process, " could not be slowed down: ", Text(e, "reason"));
    case RunEvent::kTrainingStarted:
      return TrainingStartedText(e);
    case RunEvent::kEvaluationFailed:
      return absl::StrCat("Evaluation of epoch ", FormatFixed(Number(e, "epoch"), 0),
                          " failed: ", Text(e, "error"));
    case RunEvent::kSwitchRule:
      return "";  // every epoch's value is in the evaluation table
    case RunEvent::kSwitchRequestIgnored:
      return absl::StrCat("A switch request was ignored: ", Text(e, "reason"));
    case RunEvent::kSwitchDecided:
      return SwitchDecidedText(e);
    case RunEvent::kSwitchSkipped:
      return absl::StrCat("Switch skipped: ", Text(e, "reason"));
    case RunEvent::kSwitchFailed:
      return absl::StrCat("Switch failed", process.empty() ? "" : absl::StrCat(" (", process, ")"),
                          ": ", Text(e, "error"));
    case RunEvent::kSwitchDone:
      return SwitchDoneText(e);
    case RunEvent::kTrainingFinished:
      return TrainingFinishedText(e);
    case RunEvent::kProcessExited:
      return absl::StrCat(process, " ", Text(e, "how"));
    case RunEvent::kRestart:
      return RestartText(e, process);
    case RunEvent::kRejoined:
      return RejoinedText(e, process);
    case RunEvent::kProcessesEnded:
      return ProcessesEndedText(e);
    case RunEvent::kRunFailed:
      return RunFailedText(e, process);
    case RunEvent::kRunFinished:
      return absl::StrCat("Run ", Text(e, "state"), " after ", FormatSeconds(Number(e, "wall_s")));
    case RunEvent::kDriftDetected:
      if (!e.contains("replica") || !e.contains("events")) return generic();
      return absl::StrCat(
          absl::StrFormat("Drift detected by replica %d after %d of its events: the error went "
                          "from %.3f to %.3f",
                          static_cast<int>(Number(e, "replica")),
                          static_cast<int64_t>(Number(e, "events")), Number(e, "error_before"),
                          Number(e, "error_after")),
          e.contains("lr_after") ? absl::StrFormat("; learning rate back from %.4g to %.4g",
                                                   Number(e, "lr_before"), Number(e, "lr_after"))
                                 : "");
    case RunEvent::kServerLinks: {
      if (!e.contains("links") || !e["links"].is_array()) return generic();
      std::vector<std::string> links;
      for (const auto& l : e["links"]) {
        if (l.is_string()) links.push_back(l.get<std::string>());
      }
      return absl::StrCat(process, " reaches ", absl::StrJoin(links, "; "));
    }
  }
  return Capitalized(HumanKey(name));
}

}  // namespace strata
