// `strata produce` as a real process against a real redis-server (EmbeddedBroker on a unix
// socket in the test's directory), read back through a consumer group the way the replicas will.
// What each test looked like when broken on purpose is in its comment.
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/common/ml/dataset.h"
#include "services/common/stream/event_replay.h"
#include "services/common/wire/npy_file.h"
#include "tests/integration/stream/stream_test_util.h"

namespace strata::testing {
namespace {

using ::testing::HasSubstr;

class StreamProduceTest : public StreamBrokerTest {
 protected:
  std::string WriteJob(const std::string& yaml) {
    const std::string path = dir_ + "/job.yaml";
    std::ofstream(path) << yaml;
    return path;
  }

  // Runs `strata produce ARGS` to the end; its output in *output.
  int Produce(const std::vector<std::string>& args, std::string* output) {
    std::vector<std::string> all = {"produce"};
    all.insert(all.end(), args.begin(), args.end());
    return Strata(all, "produce.log", output, std::chrono::seconds(120));
  }

  static Dataset FashionMnist(size_t max_train) {
    DatasetOptions options;
    options.name = v1::DATASET_FASHION_MNIST;
    options.path = "/usr/share/datasets/fashion-mnist";
    options.max_train = max_train;
    auto data = LoadDataset(options);
    EXPECT_TRUE(data.ok()) << data.status();
    return data.ok() ? *std::move(data) : Dataset();
  }
};

// 1,000 events at 2,000 events/s over 300 examples, read by two consumers of one group: every
// event arrives exactly once, in order of seq the labels and features of example seq % 300, all
// acknowledged, lag 0; the producer's timestamps span about half a second. With the token bucket
// given no rate on purpose (Available returning max always), the span check failed: 1,000 events
// went out in 11 ms.
TEST_F(StreamProduceTest, EveryProducedEventIsReadExactlyOnceByAGroupOfTwo) {
  const std::string job = WriteJob(
      "name: produce-test\n"
      "dataset: { name: fashion-mnist, max_train: 300 }\n"
      "stream: { key: fmnist, group: replicas }\n");
  auto setup = Client();
  ASSERT_NE(setup, nullptr);
  ASSERT_TRUE(setup->CreateGroup("fmnist", "replicas", "0").ok());

  const int64_t n = 1000;
  std::atomic<int64_t> total{0};
  const EventSchema schema = {{1, 28, 28}, 10};
  ConsumerTally tallies[2];
  std::vector<std::thread> consumers;
  for (int c = 0; c < 2; ++c) {
    consumers.emplace_back([&, c] {
      auto client = Client();
      if (client == nullptr) return;
      tallies[c] = ConsumeUntil(*client, "fmnist", "replicas", "replica-" + std::to_string(c),
                                schema, total, n, std::chrono::seconds(90));
    });
  }
  std::string output;
  const int code = Produce({job, "--address", broker_->socket_path(), "--rate", "2000",
                            "--max-events", std::to_string(n)},
                           &output);
  // A producer that failed sent nothing more: the consumers need not wait out their deadline.
  if (code != 0) total += n;
  for (std::thread& t : consumers) t.join();
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("produce: done: 1000 events"));
  EXPECT_THAT(output, HasSubstr("300 examples of fashion-mnist (shape 1,28,28, 10 classes)"));

  const Dataset data = FashionMnist(300);
  std::map<int64_t, const StreamEvent*> by_seq;
  int64_t first_ns = INT64_MAX, last_ns = 0;
  for (const ConsumerTally& tally : tallies) {
    ASSERT_TRUE(tally.failure.ok()) << tally.failure;
    EXPECT_TRUE(tally.refused.empty()) << tally.refused.front();
    EXPECT_GT(tally.events.size(), 0u) << "one consumer got every event";
    for (const StreamEvent& e : tally.events) {
      EXPECT_TRUE(by_seq.emplace(e.seq, &e).second) << "event " << e.seq << " read twice";
      first_ns = std::min(first_ns, e.produced_ns);
      last_ns = std::max(last_ns, e.produced_ns);
    }
  }
  ASSERT_EQ(static_cast<int64_t>(by_seq.size()), n);
  EXPECT_EQ(by_seq.begin()->first, 0);
  EXPECT_EQ(by_seq.rbegin()->first, n - 1);
  std::vector<float> expected(784);
  for (const auto& [seq, e] : by_seq) {
    data.train.CopyFeatures(seq % 300, 784, expected.data());
    ASSERT_EQ(e->label, data.train.labels[seq % 300]) << "event " << seq;
    ASSERT_EQ(e->features, expected) << "event " << seq;
  }
  // 1,000 events at 2,000/s with a burst of 100: at least 0.4 s between first and last.
  EXPECT_GE(last_ns - first_ns, 400'000'000) << "the rate was not held";
  EXPECT_LT(last_ns - first_ns, 30'000'000'000);

  auto pending = setup->Pending("fmnist", "replicas");
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ(pending->count, 0);
  auto info = setup->GroupInfo("fmnist", "replicas");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->lag, 0);
  EXPECT_EQ(info->consumers, 2);
  auto length = setup->Length("fmnist");
  ASSERT_TRUE(length.ok());
  EXPECT_EQ(*length, n);
}

// The drift schedule: from event 150 on, every label y is sent as p(y), p = DriftPermutation(10,
// seed); before it, as the data set has it. With the comparison `seq >= at_event` changed to
// `seq > at_event` in the producer on purpose, this failed at event 150: label 3, its own,
// where p gave 9.
TEST_F(StreamProduceTest, DriftPermutesTheLabelsFromItsEventOnExactly) {
  const std::string job = WriteJob(
      "name: drift-test\n"
      "dataset: { name: fashion-mnist, max_train: 100 }\n"
      "training: { seed: 5 }\n"
      "stream: { key: drifting, produce: { drift: { at_event: 150, permute_labels: true } } }\n");
  std::string output;
  ASSERT_EQ(Produce({job, "--address", broker_->socket_path(), "--max-events", "400"}, &output), 0)
      << output;
  EXPECT_THAT(output, HasSubstr("labels permuted since event 150"));
  auto client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->CreateGroup("drifting", "g", "0").ok());
  std::atomic<int64_t> total{0};
  ConsumerTally tally = ConsumeUntil(*client, "drifting", "g", "c", {{1, 28, 28}, 10}, total, 400,
                                     std::chrono::seconds(60));
  ASSERT_TRUE(tally.failure.ok()) << tally.failure;
  ASSERT_EQ(tally.events.size(), 400u);
  const Dataset data = FashionMnist(100);
  const std::vector<int32_t> p = DriftPermutation(10, 5);
  for (const StreamEvent& e : tally.events) {
    const int32_t original = data.train.labels[e.seq % 100];
    ASSERT_EQ(e.label, e.seq < 150 ? original : p[original]) << "event " << e.seq;
  }
}

// The class mix: from event 150 on only the examples of classes 2 and 7 are replayed, in the data
// set's order, looping over them; before it every example in turn. A class the data set does not
// have is refused before anything is sent. With the selection left out of the replay on purpose
// (every example still sent after the drift), this failed after event 150: label 3
// where the selection gives a 2.
TEST_F(StreamProduceTest, AClassMixDriftReplaysOnlyItsClassesFromItsEventOn) {
  const std::string job = WriteJob(
      "name: mix-test\n"
      "dataset: { name: fashion-mnist, max_train: 100 }\n"
      "stream: { key: mixing, produce: { drift: { at_event: 150, classes: [7, 2] } } }\n");
  std::string output;
  ASSERT_EQ(Produce({job, "--address", broker_->socket_path(), "--max-events", "400"}, &output), 0)
      << output;
  EXPECT_THAT(output, HasSubstr("only classes 7, 2 since event 150"));
  auto client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->CreateGroup("mixing", "g", "0").ok());
  std::atomic<int64_t> total{0};
  ConsumerTally tally = ConsumeUntil(*client, "mixing", "g", "c", {{1, 28, 28}, 10}, total, 400,
                                     std::chrono::seconds(60));
  ASSERT_TRUE(tally.failure.ok()) << tally.failure;
  ASSERT_EQ(tally.events.size(), 400u);
  // The test's own selection: the examples of classes 2 and 7, in the data set's order.
  const Dataset data = FashionMnist(100);
  std::vector<size_t> mix;
  for (size_t e = 0; e < data.train.size(); ++e) {
    if (data.train.labels[e] == 2 || data.train.labels[e] == 7) mix.push_back(e);
  }
  ASSERT_GT(mix.size(), 1u);
  const size_t per = data.example_floats();
  std::vector<float> expected(per);
  for (const StreamEvent& e : tally.events) {
    const size_t example = e.seq < 150 ? static_cast<size_t>(e.seq % 100)
                                       : mix[static_cast<size_t>(e.seq - 150) % mix.size()];
    ASSERT_EQ(e.label, data.train.labels[example]) << "event " << e.seq;
    data.train.CopyFeatures(static_cast<int64_t>(example), per, expected.data());
    ASSERT_EQ(e.features, expected) << "event " << e.seq;
  }
  // A class Fashion-MNIST does not have: refused, naming the key; nothing more on the stream.
  const std::string wrong = WriteJob(
      "name: mix-wrong\n"
      "dataset: { name: fashion-mnist, max_train: 100 }\n"
      "stream: { key: mixing, produce: { drift: { at_event: 0, classes: [3, 10] } } }\n");
  EXPECT_EQ(Produce({wrong, "--address", broker_->socket_path(), "--max-events", "10"}, &output),
            2);
  EXPECT_THAT(output, HasSubstr("stream.produce.drift.classes: class 10 is not one of"));
  auto length = client->Length("mixing");
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(*length, 400);
}

// A NumPy data set of the user's own (dataset.name npy) replays the same way: its shape and
// classes come from the files.
TEST_F(StreamProduceTest, ReplaysANumpyDataSet) {
  const std::string data_dir = dir_ + "/npy";
  std::filesystem::create_directories(data_dir);
  auto x_header = EncodeNpyHeader(NpyDType::kFloat32, {6, 2, 3});
  auto y_header = EncodeNpyHeader(NpyDType::kInt64, {6});
  ASSERT_TRUE(x_header.ok() && y_header.ok());
  std::string x = *x_header, y = *y_header;
  for (int i = 0; i < 36; ++i) {
    const float v = 0.25f * static_cast<float>(i);
    x.append(reinterpret_cast<const char*>(&v), 4);
  }
  for (int64_t label : {0, 1, 2, 0, 1, 2}) y.append(reinterpret_cast<const char*>(&label), 8);
  std::ofstream(data_dir + "/train_x.npy", std::ios::binary) << x;
  std::ofstream(data_dir + "/train_y.npy", std::ios::binary) << y;
  const std::string job = WriteJob("name: npy-test\ndataset: { name: npy, path: " + data_dir +
                                   " }\nstream: { key: own }\n");
  std::string output;
  ASSERT_EQ(Produce({job, "--address", broker_->socket_path(), "--max-events", "20"}, &output), 0)
      << output;
  auto client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->CreateGroup("own", "g", "0").ok());
  std::atomic<int64_t> total{0};
  ConsumerTally tally =
      ConsumeUntil(*client, "own", "g", "c", {{2, 3}, 3}, total, 20, std::chrono::seconds(60));
  ASSERT_TRUE(tally.failure.ok()) << tally.failure;
  ASSERT_EQ(tally.events.size(), 20u);
  for (const StreamEvent& e : tally.events) {
    EXPECT_EQ(e.label, (e.seq % 6) % 3);
    EXPECT_EQ(e.features[0], 0.25f * static_cast<float>((e.seq % 6) * 6));
  }
}

// An address where no broker listens: a clear error, exit 1, nothing else. And no address at all.
TEST_F(StreamProduceTest, AnUnreachableBrokerIsAClearError) {
  const std::string job =
      WriteJob("name: nowhere\ndataset: { name: fashion-mnist, max_train: 10 }\n");
  std::string output;
  EXPECT_EQ(Produce({job, "--address", dir_ + "/nobody.sock", "--max-events", "5"}, &output), 1);
  EXPECT_THAT(output, HasSubstr("strata produce: cannot connect to the broker at unix:" + dir_ +
                                "/nobody.sock"));
  EXPECT_EQ(Produce({job, "--max-events", "5"}, &output), 2);
  EXPECT_THAT(output, HasSubstr("strata produce: no broker: give --address"));
  EXPECT_EQ(Produce({job, "--address", "http://x", "--max-events", "5"}, &output), 2);
  EXPECT_THAT(output, HasSubstr("--address: 'http://x' is not a broker address"));
  EXPECT_EQ(Produce({job, "--address", broker_->socket_path(), "--ramp", "fast"}, &output), 2);
  EXPECT_THAT(output, HasSubstr("--ramp 'fast': give STEP:SECONDS"));
}

}  // namespace
}  // namespace strata::testing
