// The ring's receiving side against a client that is not a ring peer: segments for operations
// far ahead of this rank, or more segments than an operation can need, are refused with a status
// naming the operation instead of being queued for ever.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/collective/ring_allreduce.h"
#include "services/collective/segment_codec.h"
#include "services/common/wire/rpc.h"
#include "strata/v1/collective.grpc.pb.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

class RingInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer("127.0.0.1:0", {ring_.service()}, &port_);
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Collective::NewStub(MakeChannel("127.0.0.1:" + std::to_string(port_)));
  }

  // Sends `segments` segments of `operation` on one stream; returns the receiver's answer.
  grpc::Status Send(uint64_t operation, int segments) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(std::chrono::seconds(60)));
    v1::RingAck ack;
    auto writer = stub_->Ring(&context, &ack);
    v1::RingSegment segment;
    segment.set_operation(operation);
    segment.set_sender(1);
    segment.set_world(2);
    segment.set_count(4);
    segment.set_data(std::string(16, '\0'));
    for (int i = 0; i < segments; ++i) {
      if (!writer->Write(segment)) break;  // the receiver refused: Finish says why
    }
    writer->WritesDone();
    return writer->Finish();
  }

  RingAllReduce ring_{0};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Collective::Stub> stub_;
};

TEST_F(RingInputTest, SegmentsForAnOperationFarAheadAreRefused) {
  // Before: queued until the rank reached operation 1000, that is, for ever.
  grpc::Status status = Send(1000, 3);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("operation 1000"));
  EXPECT_THAT(status.error_message(), HasSubstr("this rank is at operation 0"));
  // The next operations, which a peer may legitimately be ahead on, are still accepted.
  status = Send(1, 3);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// Before: one segment of any later generation made the rank drop every operation it was on and
// jump to that generation (the test's first Send was accepted, OK). Now generations come from
// the orchestrator's ReformRing only (RingLink::AnnounceGeneration); the next generation's first
// operations are queued without retiring anything, in case a peer re-formed first.
TEST_F(RingInputTest, AGenerationNoReformationAnnouncedIsRefused) {
  grpc::Status status = Send(uint64_t{5} << kRingGenerationShift, 1);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("no re-formation announced"));
  status = Send(uint64_t{1} << kRingGenerationShift, 1);
  EXPECT_TRUE(status.ok()) << status.error_message();
  status = Send(1, 3);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(RingInputTest, MoreQueuedSegmentsThanAnOperationNeedsAreRefused) {
  // Before: every segment was kept, so one stream could grow the worker without bound.
  grpc::Status status = Send(2, (1 << 14) + 10);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("ring operation 2"));
}

TEST_F(RingInputTest, AnAbortReasonThatIsNotUtf8IsRefused) {
  // Found by the segment codec's fuzz target: the reason was taken as it came and passed on as the
  // ring's error, into the worker's status, which protobuf then refused to parse.
  const SegmentHeader header{.operation = 0, .sender = 1, .world = 2};
  for (const std::string& reason : {std::string("stopped \xff"), std::string("\xc0\xaf"),
                                    std::string("\xed\xa0\x80"), std::string("cut \xe2\x82")}) {
    ParsedSegment parsed;
    absl::Status status = ParseSegment(EncodeAbort(header, reason), &parsed);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << reason;
    EXPECT_THAT(std::string(status.message()), HasSubstr("not UTF-8"));
  }
  ParsedSegment parsed;
  const std::string reason = "worker-1 gave up: d\xc3\xa9lai \xe2\x82\xac \xf0\x9f\x98\x80";
  ASSERT_TRUE(ParseSegment(EncodeAbort(header, reason), &parsed).ok());
  EXPECT_EQ(parsed.abort, reason);
  // Through the service, the stream is refused.
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(std::chrono::seconds(60)));
  v1::RingAck ack;
  auto writer = stub_->Ring(&context, &ack);
  v1::RingSegment segment;
  segment.set_sender(1);
  segment.set_world(2);
  segment.set_abort("bad \xff");  // protobuf logs the invalid UTF-8 and sends it anyway
  writer->Write(segment);
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("not UTF-8"));
}

}  // namespace
}  // namespace strata
