// The parameter server's data-plane headers (services/common/wire/push_pull_frame.h): round trips,
// every refusal of a header a hostile peer could send, and a fingerprint that tells layouts apart.
#include "services/common/wire/push_pull_frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::push_pull_wire {
namespace {

using ::testing::HasSubstr;

Request AnExchange() {
  Request r;
  r.kind = RequestKind::kExchange;
  r.worker = 3;
  r.version = -2;  // the header carries it; the server's own checks refuse it
  r.clock = 41;
  r.samples = 64;
  r.lr = 0.0125;
  r.layout_fingerprint = 0xfeedfacecafebeefULL;
  r.payload_bytes = 4096;
  r.deadline_ms = 60000;
  return r;
}

absl::Status Decoded(const Request& r, Request* back) {
  uint8_t raw[kRequestBytes];
  EncodeRequest(r, raw);
  return DecodeRequest(raw, back);
}

absl::Status Decoded(const Reply& r, Reply* back) {
  uint8_t raw[kReplyBytes];
  EncodeReply(r, raw);
  return DecodeReply(raw, back);
}

TEST(PushPullFrame, ARequestRoundTrips) {
  const Request r = AnExchange();
  Request back;
  ASSERT_TRUE(Decoded(r, &back).ok());
  EXPECT_EQ(back.kind, r.kind);
  EXPECT_EQ(back.worker, r.worker);
  EXPECT_EQ(back.version, r.version);
  EXPECT_EQ(back.clock, r.clock);
  EXPECT_EQ(back.samples, r.samples);
  EXPECT_EQ(back.lr, r.lr);
  EXPECT_EQ(back.layout_fingerprint, r.layout_fingerprint);
  EXPECT_EQ(back.payload_bytes, r.payload_bytes);
  EXPECT_EQ(back.deadline_ms, r.deadline_ms);
}

TEST(PushPullFrame, RequestsThatDoNotFitTheirKindAreRefused) {
  Request back;
  Request r = AnExchange();
  r.payload_bytes = 6;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("whole number of floats"));
  r.payload_bytes = kMaxPayloadBytes + 4;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("over"));
  r.payload_bytes = 0;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("an exchange"));
  r.kind = RequestKind::kPull;
  EXPECT_TRUE(Decoded(r, &back).ok());
  r.payload_bytes = 8;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("a pull"));

  uint8_t raw[kRequestBytes];
  EncodeRequest(AnExchange(), raw);
  raw[0] ^= 1;
  EXPECT_THAT(std::string(DecodeRequest(raw, &back).message()), HasSubstr("bad magic"));
  EncodeRequest(AnExchange(), raw);
  raw[4] = 9;  // wire version
  EXPECT_THAT(std::string(DecodeRequest(raw, &back).message()), HasSubstr("wire version 9"));
  EncodeRequest(AnExchange(), raw);
  raw[8] = 7;  // kind
  EXPECT_THAT(std::string(DecodeRequest(raw, &back).message()), HasSubstr("unknown kind 7"));
}

TEST(PushPullFrame, SharedMemoryRequestsFollowTheSameRules) {
  Request back;
  Request r = AnExchange();
  r.kind = RequestKind::kExchangeShared;  // announces the size it leaves in the region
  ASSERT_TRUE(Decoded(r, &back).ok());
  EXPECT_EQ(back.kind, RequestKind::kExchangeShared);
  EXPECT_EQ(back.payload_bytes, r.payload_bytes);
  EXPECT_FALSE(PayloadOnSocket(back.kind));
  EXPECT_TRUE(PayloadOnSocket(RequestKind::kExchange));
  r.payload_bytes = 0;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("an exchange"));
  r.kind = RequestKind::kShareMemory;
  EXPECT_TRUE(Decoded(r, &back).ok());
  r.payload_bytes = 8;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("a pull or share"));
  uint8_t raw[kRequestBytes];
  EncodeRequest(AnExchange(), raw);
  raw[8] = 6;  // one past the last kind
  EXPECT_THAT(std::string(DecodeRequest(raw, &back).message()), HasSubstr("unknown kind 6"));
  raw[8] = 0;
  EXPECT_THAT(std::string(DecodeRequest(raw, &back).message()), HasSubstr("unknown kind 0"));
}

// strategy.push_compression fp16: the gradients in halves, the buffers in floats, so any even
// size may be right; the server compares it with its partition's exact size.
TEST(PushPullFrame, SixteenBitExchangesCarryWholeHalvesOnTheSocket) {
  Request back;
  Request r = AnExchange();
  r.kind = RequestKind::kExchangeHalf;
  r.payload_bytes = 6;  // three halves: refused as floats, whole as halves
  ASSERT_TRUE(Decoded(r, &back).ok());
  EXPECT_EQ(back.kind, RequestKind::kExchangeHalf);
  EXPECT_EQ(back.payload_bytes, 6u);
  EXPECT_TRUE(PayloadOnSocket(back.kind));
  EXPECT_TRUE(IsExchange(back.kind));
  r.payload_bytes = 7;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("whole number of 16-bit"));
  r.payload_bytes = 0;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("an exchange"));
  r.payload_bytes = kMaxPayloadBytes + 2;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("over"));
  EXPECT_EQ(PayloadBytes(3, 2, /*half=*/true), 14u);
  EXPECT_EQ(PayloadBytes(3, 2, /*half=*/false), 20u);
}

TEST(PushPullFrame, AShareOfferRoundTrips) {
  SharedRegionOffer offer;
  offer.socket_id = 0x0123456789abcdefULL;
  offer.region_bytes = (uint64_t{1} << 33) + 4096;
  for (size_t i = 0; i < offer.nonce.size(); ++i) offer.nonce[i] = static_cast<uint8_t>(7 * i + 1);
  uint8_t raw[kShareOfferBytes];
  EncodeShareOffer(offer, raw);
  const SharedRegionOffer back = DecodeShareOffer(raw);
  EXPECT_EQ(back.socket_id, offer.socket_id);
  EXPECT_EQ(back.region_bytes, offer.region_bytes);
  EXPECT_EQ(back.nonce, offer.nonce);
}

TEST(PushPullFrame, RepliesRoundTripAndLiesAreRefused) {
  Reply r;
  r.version = 12;
  r.global_epoch = 1.75;
  r.samples = 9000;
  r.sample_budget = 60000;
  r.payload_bytes = 1024;
  Reply back;
  ASSERT_TRUE(Decoded(r, &back).ok());
  EXPECT_EQ(back.version, 12);
  EXPECT_EQ(back.global_epoch, 1.75);
  EXPECT_EQ(back.samples, 9000);
  EXPECT_EQ(back.sample_budget, 60000);
  EXPECT_EQ(back.payload_bytes, 1024u);

  r.code = 9;  // FAILED_PRECONDITION, with a model: a lie
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("error reply that carries"));
  r.payload_bytes = 0;
  r.message_bytes = kMaxMessageBytes + 1;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("at most"));
  r.message_bytes = 10;
  EXPECT_TRUE(Decoded(r, &back).ok());
  r.code = 17;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("status code 17"));
  r.code = 0;
  r.payload_bytes = 10;  // five halves: a 16-bit exchange's reply may hold that
  EXPECT_TRUE(Decoded(r, &back).ok());
  r.payload_bytes = 11;
  EXPECT_THAT(std::string(Decoded(r, &back).message()), HasSubstr("whole number of 16-bit"));
}

TEST(PushPullFrame, TheFingerprintTellsLayoutsApart) {
  const TensorSpec w{"fc.weight", {4, 3}, DType::kFloat32};
  const TensorSpec b{"fc.bias", {4}, DType::kFloat32};
  auto of = [](std::vector<std::pair<TensorSpec, bool>> tensors) {
    LayoutFingerprint f;
    for (const auto& [spec, is_buffer] : tensors) f.Add(spec, is_buffer);
    return f.value();
  };
  const uint64_t base = of({{w, false}, {b, false}});
  EXPECT_EQ(base, of({{w, false}, {b, false}}));
  EXPECT_NE(base, of({{b, false}, {w, false}})) << "order";
  EXPECT_NE(base, of({{w, false}, {b, true}})) << "a buffer is not a parameter";
  EXPECT_NE(base, of({{w, false}, {TensorSpec{"fc.bias", {2, 2}, DType::kFloat32}, false}}))
      << "shape";
  EXPECT_NE(base, of({{w, false}, {TensorSpec{"fc.bia", {4}, DType::kFloat32}, false}})) << "name";
  EXPECT_NE(of({{TensorSpec{"ab", {1}, DType::kFloat32}, false}}),
            of({{TensorSpec{"a", {1}, DType::kFloat32}, false},
                {TensorSpec{"b", {}, DType::kFloat32}, false}}))
      << "names cannot run into each other";
}

}  // namespace
}  // namespace strata::push_pull_wire
