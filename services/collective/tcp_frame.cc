#include "services/collective/tcp_frame.h"

#include <cstring>

#include <absl/strings/str_cat.h>

namespace strata::tcp_ring {
namespace {

using tcp::Get32;
using tcp::Get64;
using tcp::Put32;
using tcp::Put64;

constexpr uint32_t kFrameMagic = 0x46525453;  // "STRF"
constexpr uint32_t kHelloMagic = 0x48525453;  // "STRH"
constexpr uint32_t kVersion = 1;

// Layout of the frame header, in bytes from its start.
enum : size_t {
  kMagicAt = 0,
  kKindAt = 4,
  kOperationAt = 8,
  kSenderAt = 16,
  kWorldAt = 20,
  kCountAt = 24,
  kStepAt = 32,
  kOffsetAt = 40,  // 36..40 unused (alignment)
  kPayloadAt = 48,
};
static_assert(kPayloadAt + 8 == kFrameHeaderBytes);

}  // namespace

void EncodeFrame(const Frame& frame, uint8_t out[kFrameHeaderBytes]) {
  std::memset(out, 0, kFrameHeaderBytes);
  Put32(out + kMagicAt, kFrameMagic);
  Put32(out + kKindAt, static_cast<uint32_t>(frame.kind));
  Put64(out + kOperationAt, frame.header.operation);
  Put32(out + kSenderAt, frame.header.sender);
  Put32(out + kWorldAt, frame.header.world);
  Put64(out + kCountAt, frame.header.count);
  Put32(out + kStepAt, frame.header.step);
  Put64(out + kOffsetAt, frame.header.offset);
  Put64(out + kPayloadAt, frame.payload_bytes);
}

absl::Status DecodeFrame(const uint8_t in[kFrameHeaderBytes], Frame* frame) {
  if (Get32(in + kMagicAt) != kFrameMagic) {
    return absl::InvalidArgumentError("not a ring frame (bad magic)");
  }
  const uint32_t kind = Get32(in + kKindAt);
  if (kind < static_cast<uint32_t>(FrameKind::kData) ||
      kind > static_cast<uint32_t>(FrameKind::kHalfData)) {
    return absl::InvalidArgumentError(absl::StrCat("ring frame of unknown kind ", kind));
  }
  frame->kind = static_cast<FrameKind>(kind);
  frame->header.operation = Get64(in + kOperationAt);
  frame->header.sender = Get32(in + kSenderAt);
  frame->header.world = Get32(in + kWorldAt);
  frame->header.count = Get64(in + kCountAt);
  frame->header.step = Get32(in + kStepAt);
  frame->header.offset = Get64(in + kOffsetAt);
  frame->payload_bytes = Get64(in + kPayloadAt);
  const uint64_t bytes = frame->payload_bytes;
  switch (frame->kind) {
    case FrameKind::kData:
    case FrameKind::kHalfData: {
      const uint64_t count = frame->header.count, offset = frame->header.offset;
      const uint64_t value = ValueBytes(frame->kind);
      // The receiver holds the values as floats: a half frame may carry no more of them.
      if (bytes == 0 || bytes % value != 0 || bytes / value > kMaxDataBytes / sizeof(float) ||
          offset > count || bytes / value > count - offset) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ring data frame of ", bytes, " bytes at offset ", offset, " of a buffer of ", count,
            " floats: not a whole number of ", value == 2 ? "half " : "",
            "floats inside the buffer, or over ", kMaxDataBytes / sizeof(float) * value, " bytes"));
      }
      break;
    }
    case FrameKind::kAbort:
      if (bytes > kMaxAbortBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("ring abort frame of ", bytes, " bytes (at most ", kMaxAbortBytes, ")"));
      }
      break;
    case FrameKind::kEnd:
    case FrameKind::kAck:
      if (bytes != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("ring end or ack frame with a payload of ", bytes, " bytes"));
      }
      break;
  }
  return absl::OkStatus();
}

void EncodeHello(const tcp::Ticket& ticket, uint32_t sender, uint8_t out[tcp::kHelloBytes]) {
  tcp::EncodeHello(kHelloMagic, kVersion, ticket, sender, out);
}

absl::Status DecodeHello(const uint8_t in[tcp::kHelloBytes], tcp::Ticket* ticket,
                         uint32_t* sender) {
  return tcp::DecodeHello(kHelloMagic, kVersion, "ring", in, ticket, sender);
}

}  // namespace strata::tcp_ring
