// The run record's names and payloads: what `strata run` writes is what the readers parse.
#include "orchestrator/record/run_record.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "services/common/base/metrics.h"
#include "services/common/base/run_directory.h"

namespace strata {
namespace {

TEST(RunRecord, EveryEventNameReadsBackAsItsEvent) {
  for (int i = 0; i <= static_cast<int>(RunEvent::kRunFinished); ++i) {
    const RunEvent e = static_cast<RunEvent>(i);
    EXPECT_EQ(RunEventOf({{"event", RunEventName(e)}}), e) << RunEventName(e);
  }
  EXPECT_EQ(RunEventOf({{"event", "no_such_event"}}), std::nullopt);
  EXPECT_EQ(RunEventOf(nlohmann::json(nullptr)), std::nullopt);
  EXPECT_STREQ(RunEventName(RunEvent::kSwitchDone), "switch_done");
}

TEST(RunRecord, SwitchDoneRoundTripsWhatReadersShow) {
  SwitchDoneEvent e;
  e.at_step = 2966;
  e.requested_at_step = 2960;
  e.epoch = 12.62;
  e.handover_s = 0.07;
  e.wall_s = 17.5;
  e.verification.weights_equal = true;
  e.verification.tensors_compared = 6;
  e.verification.checked_by = "servers";
  const nlohmann::json j = e.ToJson();
  EXPECT_EQ(j["requested_at_step"], 2960);
  EXPECT_EQ(j["verification"]["tensors_compared"], 6);
  EXPECT_FALSE(j["verification"].contains("error"));
  const SwitchDoneEvent back = SwitchDoneEvent::FromJson(j);
  EXPECT_EQ(back.at_step, 2966);
  EXPECT_DOUBLE_EQ(*back.epoch, 12.62);
  EXPECT_DOUBLE_EQ(*back.handover_s, 0.07);
  EXPECT_DOUBLE_EQ(*back.wall_s, 17.5);
  // A torn or older line: nothing made up.
  EXPECT_FALSE(SwitchDoneEvent::FromJson({{"event", "switch_done"}}).epoch.has_value());
}

TEST(RunRecord, AVerificationThatCouldNotCompareSaysWhyAndNothingElse) {
  HandoverVerification v;
  v.error = "no such file";
  v.checked_by = "servers";
  const nlohmann::json j = v.ToJson();
  EXPECT_EQ(j["error"], "no such file");
  EXPECT_EQ(j["weights_equal"], false);
  EXPECT_FALSE(j.contains("tensors_compared"));
  EXPECT_FALSE(j.contains("raced_with_a_push"));
}

TEST(RunRecord, SwitchDecidedCarriesTheRulesFigures) {
  SwitchDecidedEvent e;
  e.trigger.kind = TriggerKind::kEmpirical;
  e.trigger.epoch = 12;
  e.trigger.reason = "plateau";
  e.trigger.empirical = EmpiricalTriggerDetails{0.95, 1.0, 5, {0.5, 0.4}};
  e.at_step = 2966;
  const nlohmann::json j = e.ToJson();
  EXPECT_EQ(j["trigger"], "empirical");
  EXPECT_EQ(j["window"], 5);
  EXPECT_EQ(j["val_losses"].size(), 2u);
  EXPECT_FALSE(j.contains("target_step"));
  const SwitchDecidedRecord r = SwitchDecidedRecord::FromJson(j);
  EXPECT_EQ(r.trigger, "empirical");
  EXPECT_EQ(r.epoch, 12);
  EXPECT_EQ(r.reason, "plateau");
  EXPECT_EQ(TriggerKindFromName(r.trigger), TriggerKind::kEmpirical);
}

TEST(RunRecord, RunFailedNamesTheProcessOrNull) {
  const RunFailedEvent interrupted{"interrupted", "Ctrl-C", ""};
  EXPECT_TRUE(interrupted.ToJson()["process"].is_null());
  const nlohmann::json j = RunFailedEvent{"failed", "boom", "worker-1"}.ToJson();
  EXPECT_EQ(RunFailedEvent::FromJson(j).process, "worker-1");
  EXPECT_EQ(RunFailedEvent::FromJson(j).error, "boom");
}

TEST(RunRecord, WritesEventLinesWithTheirNameTimeAndWallClock) {
  std::string dir_template = ::testing::TempDir() + "/run-record-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template.data());
  auto record = RunRecord::Open(dir, std::chrono::steady_clock::now());
  ASSERT_TRUE(record.ok()) << record.status();
  (*record)->SwitchSkipped({"training ends before the switch step", 10, 9});
  (*record)->Event(RunEvent::kRunFinished, {{"state", "succeeded"}, {"wall_s", 1.5}});
  auto lines = ReadJsonLines(RunPaths(dir).events);
  ASSERT_TRUE(lines.ok());
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_EQ(RunEventOf((*lines)[0]), RunEvent::kSwitchSkipped);
  EXPECT_EQ((*lines)[0]["last_step"], 9);
  EXPECT_TRUE((*lines)[0]["time"].is_number());
  EXPECT_TRUE((*lines)[0]["wall_s"].is_number());
  EXPECT_EQ((*lines)[1]["wall_s"], 1.5);  // a payload's own wall_s is kept
  record->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
