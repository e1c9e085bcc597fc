// The job spec's stream section (job_keys.cc) and the broker address it holds: values travel into
// the resolved job and back through job.yaml, ranges are refused with key and line, and a job
// without a stream section writes the job.yaml it wrote before the section existed. With the
// section-skipping in EmitSection removed on purpose, AJobWithoutAStreamWritesNoStreamSection
// failed: the plain job's job.yaml held "stream:\n  produce:\n    drift:\n      {}" before
// `recovery:`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/common/config/broker_address.h"
#include "services/common/config/job_spec.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

TEST(StreamKeys, TravelIntoTheResolvedJobAndBackThroughJobYaml) {
  auto spec = ParseJobSpec(R"(name: s
stream:
  address: redis://127.0.0.1:6390
  key: fmnist
  batch_events: 32
  max_grad_buffer: 8
  max_events: 240000
  claim_idle_ms: 5000
  lr_decay_events: 20000
  on_drift: reset_lr
  sync: allreduce
  produce: { rate: 20000, drift: { at_event: 100000, permute_labels: true } }
)",
                           "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::ResolvedStream& s = spec->stream();
  EXPECT_EQ(s.address(), "redis://127.0.0.1:6390");
  EXPECT_EQ(s.key(), "fmnist");
  EXPECT_EQ(s.group(), "replicas");  // default
  EXPECT_EQ(s.batch_events(), 32);
  EXPECT_EQ(s.max_grad_buffer(), 8);
  EXPECT_EQ(s.max_events(), 240000);
  EXPECT_EQ(s.max_seconds(), 0);
  EXPECT_EQ(s.claim_idle_ms(), 5000);
  EXPECT_EQ(s.lr_decay_events(), 20000);
  EXPECT_EQ(s.on_drift(), v1::STREAM_ON_DRIFT_RESET_LR);
  EXPECT_EQ(s.sync(), v1::STREAM_SYNC_ALLREDUCE);
  EXPECT_EQ(s.produce().rate(), 20000);
  EXPECT_EQ(s.produce().drift().at_event(), 100000);
  EXPECT_TRUE(s.produce().drift().permute_labels());
  auto again = ParseJobSpec(JobSpecYaml(*spec), "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecYaml(*spec);
  EXPECT_EQ(again->SerializeAsString(), spec->SerializeAsString());
}

TEST(StreamKeys, AJobWithoutAStreamWritesNoStreamSection) {
  auto spec = ParseJobSpec("name: plain\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(JobSpecYaml(*spec), ::testing::Not(HasSubstr("stream")));
  auto drift_only =
      ParseJobSpec("name: d\nstream: { produce: { drift: { at_event: 5 } } }\n", "job.yaml");
  ASSERT_TRUE(drift_only.ok()) << drift_only.status();
  EXPECT_THAT(JobSpecYaml(*drift_only), HasSubstr("at_event: 5"));
  EXPECT_THAT(JobSpecYaml(*drift_only), ::testing::Not(HasSubstr(" rate:")));
}

TEST(StreamKeys, OutOfRangeValuesAreRefusedWithKeyAndLine) {
  struct Case {
    const char* line;
    const char* expect;
  } cases[] = {
      {"  batch_events: 0", "job.yaml:3: stream.batch_events: must be in [1, 65536]"},
      {"  max_grad_buffer: 2000", "job.yaml:3: stream.max_grad_buffer: must be in [1, 1024]"},
      {"  max_events: -1", "job.yaml:3: stream.max_events: must be >= 0"},
      {"  max_seconds: -2", "job.yaml:3: stream.max_seconds: must be in [0, 31536000] seconds"},
      {"  claim_idle_ms: 5", "job.yaml:3: stream.claim_idle_ms: must be in [100, 86400000]"},
      {"  produce: { rate: -1 }", "stream.produce.rate: must be in [0, 10000000]"},
      {"  produce: { drift: { at_event: -3 } }", "stream.produce.drift.at_event: must be >= 0"},
      {"  produce: { drift: { permute_labels: maybe } }", "stream.produce.drift.permute_labels"},
      {"  produce: { drift: { classes: [1, -2] } }",
       "stream.produce.drift.classes: class -2 is negative"},
      {"  produce: { drift: { classes: [4, 4] } }",
       "stream.produce.drift.classes: class 4 is given twice"},
      {"  produce: { drift: { classes: three } }", "stream.produce.drift.classes"},
      {"  key: ''", "job.yaml:3: stream.key: must be 1 to 200 characters"},
      {"  group: 'two words'", "job.yaml:3: stream.group: may hold printable characters only"},
      {"  address: http://x:1", "job.yaml:3: stream.address: 'http://x:1' is not a broker address"},
      {"  address: redis://host:0", "the port must be 1 to 65535"},
      {"  address: relative/redis.sock", "unknown scheme"},
      {"  lr_decay_events: -1", "job.yaml:3: stream.lr_decay_events: must be >= 0"},
      {"  on_drift: restart", "job.yaml:3: stream.on_drift"},
      {"  sync: ring", "job.yaml:3: stream.sync"},
      {"  batch_event: 3", "job.yaml:3: stream.batch_event: unknown key"},
  };
  for (const Case& c : cases) {
    auto spec = ParseJobSpec(std::string("name: s\nstream:\n") + c.line + "\n", "job.yaml");
    ASSERT_FALSE(spec.ok()) << c.line;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(c.expect)) << c.line;
  }
}

TEST(BrokerAddress, ParsesTcpAndUnixSocketsAndRefusesTheRest) {
  auto tcp = ParseBrokerAddress("redis://127.0.0.1:6379");
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  EXPECT_EQ(tcp->host, "127.0.0.1");
  EXPECT_EQ(tcp->port, 6379);
  EXPECT_EQ(tcp->Describe(), "redis://127.0.0.1:6379");
  auto v6 = ParseBrokerAddress("redis://[::1]:7000");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  for (const char* unix_path : {"/tmp/r/redis.sock", "unix:///tmp/r/redis.sock"}) {
    auto u = ParseBrokerAddress(unix_path);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_EQ(u->unix_path, "/tmp/r/redis.sock");
    EXPECT_EQ(u->Describe(), "unix:/tmp/r/redis.sock");
  }
  for (const char* bad : {"", "redis://", "redis://host", "redis://host:99999", "redis://:80",
                          "redis://h:8x", "unix://relative", "tcp://h:1", "redis://a b:1"}) {
    EXPECT_FALSE(ParseBrokerAddress(bad).ok()) << bad;
  }
  EXPECT_THAT(std::string(ParseBrokerAddress("/" + std::string(200, 'a')).status().message()),
              HasSubstr("at most 107 bytes"));
}

}  // namespace
}  // namespace strata
