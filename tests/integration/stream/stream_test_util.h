// What the stream tests share: a private redis-server per test (a temporary directory of its
// own, short enough for a unix socket's path), a client of it, and a consumer that reads a group
// until it has what it expects, decoding and acknowledging every entry as a replica will.
#pragma once

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "services/common/process/child_process.h"
#include "services/common/stream/embedded_broker.h"
#include "services/common/stream/stream_broker.h"
#include "services/common/stream/stream_event.h"
#include "tests/support/ci.h"

namespace strata::testing {

class StreamBrokerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/strata-stream-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    if (auto found = FindRedisServer(); !found.ok()) {
      STRATA_UNAVAILABLE(std::string(found.status().message()));
    }
    StartBroker();
  }
  void TearDown() override {
    broker_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  void StartBroker() {
    EmbeddedBrokerOptions options;
    options.directory = dir_;
    auto broker = EmbeddedBroker::Start(options);
    ASSERT_TRUE(broker.ok()) << broker.status();
    broker_ = *std::move(broker);
  }

  std::unique_ptr<StreamBroker> Client(StreamBrokerOptions options = {}) {
    auto client = ConnectStreamBroker(broker_->address(), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Runs `strata ARGS` to its end (at most `limit`), its output going to DIR/LOG; the exit code,
  // the output in *output.
  int Strata(const std::vector<std::string>& args, const std::string& log, std::string* output,
             std::chrono::seconds limit = std::chrono::seconds(600)) {
    SpawnOptions o;
    o.name = "strata " + (args.empty() ? std::string() : args[0]);
    o.argv = {STRATA_BIN};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.log_path = dir_ + "/" + log;
    auto child = ChildProcess::Spawn(o);
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return -1;
    EXPECT_TRUE((*child)->WaitFor(limit)) << o.name << " did not end";
    *output = Slurp(o.log_path);
    return (*child)->exit_code();
  }

  // `strata run JOB --out RUN` in the background (its output in DIR/run.log), returned once
  // replica `replica`'s progress file says it trains, or once the run has ended, or after
  // `limit` (the caller checks the child's Poll()).
  std::unique_ptr<ChildProcess> StartRunUntilTraining(const std::string& job, const std::string& run,
                                                      int replica,
                                                      std::chrono::seconds limit =
                                                          std::chrono::seconds(180)) {
    SpawnOptions o;
    o.name = "strata-run";
    o.argv = {STRATA_BIN, "run", job, "--out", run};
    o.log_path = dir_ + "/run.log";
    auto child = ChildProcess::Spawn(o);
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return nullptr;
    const std::string progress = run + "/stream/replica-" + std::to_string(replica) +
                                 ".progress.json";
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until && !(*child)->Poll() &&
           Slurp(progress).find("\"training\"") == std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling a file
    }
    return *std::move(child);
  }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
  std::unique_ptr<EmbeddedBroker> broker_;
};

// One consumer of a group: what it read, decoded and acknowledged.
struct ConsumerTally {
  std::vector<StreamEvent> events;
  std::vector<std::string> ids;
  std::vector<absl::Status> refused;  // malformed entries, acknowledged and skipped
  absl::Status failure;               // a broker call that failed
};

// Reads as `consumer` until `total` (shared by the consumers of the group) reaches `expected`
// or `deadline` passes; every entry is acknowledged after it is decoded, malformed or not.
inline ConsumerTally ConsumeUntil(StreamBroker& broker, const std::string& key,
                                  const std::string& group, const std::string& consumer,
                                  const EventSchema& schema, std::atomic<int64_t>& total,
                                  int64_t expected, std::chrono::seconds deadline) {
  ConsumerTally tally;
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (total.load() < expected && std::chrono::steady_clock::now() < end) {
    auto entries = broker.ReadGroup(key, group, consumer, 50, std::chrono::milliseconds(100));
    if (!entries.ok()) {
      tally.failure = entries.status();
      return tally;
    }
    std::vector<std::string> ids;
    for (const StreamEntry& entry : *entries) {
      auto event = DecodeStreamEvent(entry, schema);
      if (event.ok()) {
        tally.events.push_back(*std::move(event));
      } else {
        tally.refused.push_back(event.status());
      }
      ids.push_back(entry.id);
      tally.ids.push_back(entry.id);
    }
    auto acked = broker.Ack(key, group, ids);
    if (!acked.ok() || *acked != static_cast<int64_t>(ids.size())) {
      tally.failure = acked.ok() ? absl::InternalError("XACK acknowledged fewer") : acked.status();
      return tally;
    }
    total += static_cast<int64_t>(ids.size());
  }
  return tally;
}

}  // namespace strata::testing
