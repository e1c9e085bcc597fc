#include "services/common/wire/push_pull_frame.h"

#include <algorithm>

#include <absl/strings/str_cat.h>

#include "services/common/wire/tcp_socket.h"

namespace strata::push_pull_wire {
namespace {

using tcp::Get32;
using tcp::Get64;
using tcp::GetDouble;
using tcp::Put32;
using tcp::Put64;
using tcp::PutDouble;

constexpr uint32_t kRequestMagic = 0x51525453;  // "STRQ"
constexpr uint32_t kReplyMagic = 0x52525453;    // "STRR"
constexpr uint32_t kLastStatusCode = 16;        // absl::StatusCode::kUnauthenticated

// Field offsets, in bytes from the start of each header.
enum : size_t {
  kMagicAt = 0,
  kVersionAt = 4,
  kKindAt = 8,     // request; the reply's code
  kWorkerAt = 12,  // request; the reply's message length
  kModelVersionAt = 16,
  kClockAt = 24,  // request; the reply's global epoch
  kSamplesAt = 32,
  kLrAt = 40,           // request; the reply's sample budget
  kFingerprintAt = 48,  // request; the reply's payload length
  kRequestPayloadAt = 56,
  kDeadlineAt = 64,  // 72..80 reserved
};

// `unit`: 4 where every value is a float32, 2 where the values may be 16-bit halves.
absl::Status CheckPayload(const char* what, uint64_t bytes, uint64_t unit) {
  if (bytes % unit != 0 || bytes > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " announces a payload of ", bytes, " bytes: not a whole number of ",
                     unit == 2 ? "16-bit values" : "floats", ", or over ", kMaxPayloadBytes));
  }
  return absl::OkStatus();
}

}  // namespace

void EncodeRequest(const Request& r, uint8_t out[kRequestBytes]) {
  std::fill(out, out + kRequestBytes, 0);
  Put32(out + kMagicAt, kRequestMagic);
  Put32(out + kVersionAt, kVersion);
  Put32(out + kKindAt, static_cast<uint32_t>(r.kind));
  Put32(out + kWorkerAt, r.worker);
  Put64(out + kModelVersionAt, static_cast<uint64_t>(r.version));
  Put64(out + kClockAt, static_cast<uint64_t>(r.clock));
  Put64(out + kSamplesAt, static_cast<uint64_t>(r.samples));
  PutDouble(out + kLrAt, r.lr);
  Put64(out + kFingerprintAt, r.layout_fingerprint);
  Put64(out + kRequestPayloadAt, r.payload_bytes);
  Put64(out + kDeadlineAt, r.deadline_ms);
}

absl::Status DecodeRequest(const uint8_t in[kRequestBytes], Request* r) {
  if (Get32(in + kMagicAt) != kRequestMagic) {
    return absl::InvalidArgumentError("not a push/pull request (bad magic)");
  }
  if (Get32(in + kVersionAt) != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("push/pull request of wire version ",
                                                   Get32(in + kVersionAt), "; this server speaks ",
                                                   kVersion));
  }
  const uint32_t kind = Get32(in + kKindAt);
  if (kind < static_cast<uint32_t>(RequestKind::kExchange) ||
      kind > static_cast<uint32_t>(RequestKind::kExchangeHalf)) {
    return absl::InvalidArgumentError(absl::StrCat("push/pull request of unknown kind ", kind));
  }
  r->kind = static_cast<RequestKind>(kind);
  r->worker = Get32(in + kWorkerAt);
  r->version = static_cast<int64_t>(Get64(in + kModelVersionAt));
  r->clock = static_cast<int64_t>(Get64(in + kClockAt));
  r->samples = static_cast<int64_t>(Get64(in + kSamplesAt));
  r->lr = GetDouble(in + kLrAt);
  r->layout_fingerprint = Get64(in + kFingerprintAt);
  r->payload_bytes = Get64(in + kRequestPayloadAt);
  r->deadline_ms = Get64(in + kDeadlineAt);
  const uint64_t unit = r->kind == RequestKind::kExchangeHalf ? 2 : sizeof(float);
  if (absl::Status s = CheckPayload("push/pull request", r->payload_bytes, unit); !s.ok()) {
    return s;
  }
  const bool exchange = IsExchange(r->kind);
  if (exchange == (r->payload_bytes == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        exchange ? "an exchange" : "a pull or share", " request with ", r->payload_bytes,
        " bytes of payload (an exchange has some, a pull or share none)"));
  }
  return absl::OkStatus();
}

void EncodeReply(const Reply& r, uint8_t out[kReplyBytes]) {
  std::fill(out, out + kReplyBytes, 0);
  Put32(out + kMagicAt, kReplyMagic);
  Put32(out + kVersionAt, kVersion);
  Put32(out + kKindAt, r.code);
  Put32(out + kWorkerAt, r.message_bytes);
  Put64(out + kModelVersionAt, static_cast<uint64_t>(r.version));
  PutDouble(out + kClockAt, r.global_epoch);
  Put64(out + kSamplesAt, static_cast<uint64_t>(r.samples));
  Put64(out + kLrAt, static_cast<uint64_t>(r.sample_budget));
  Put64(out + kFingerprintAt, r.payload_bytes);
}

absl::Status DecodeReply(const uint8_t in[kReplyBytes], Reply* r) {
  if (Get32(in + kMagicAt) != kReplyMagic) {
    return absl::InvalidArgumentError("not a push/pull reply (bad magic)");
  }
  if (Get32(in + kVersionAt) != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("push/pull reply of wire version ",
                                                   Get32(in + kVersionAt), "; this worker speaks ",
                                                   kVersion));
  }
  r->code = Get32(in + kKindAt);
  r->message_bytes = Get32(in + kWorkerAt);
  r->version = static_cast<int64_t>(Get64(in + kModelVersionAt));
  r->global_epoch = GetDouble(in + kClockAt);
  r->samples = static_cast<int64_t>(Get64(in + kSamplesAt));
  r->sample_budget = static_cast<int64_t>(Get64(in + kLrAt));
  r->payload_bytes = Get64(in + kFingerprintAt);
  if (r->code > kLastStatusCode) {
    return absl::InvalidArgumentError(absl::StrCat("push/pull reply with status code ", r->code));
  }
  if (r->message_bytes > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("push/pull reply with a message of ",
                                                   r->message_bytes, " bytes (at most ",
                                                   kMaxMessageBytes, ")"));
  }
  // The reply to a 16-bit exchange may carry halves; the worker checks the exact size it expects.
  if (absl::Status s = CheckPayload("push/pull reply", r->payload_bytes, 2); !s.ok()) return s;
  if (r->code != 0 && r->payload_bytes != 0) {
    return absl::InvalidArgumentError("a push/pull error reply that carries a model");
  }
  return absl::OkStatus();
}

void EncodeShareOffer(const SharedRegionOffer& offer, uint8_t out[kShareOfferBytes]) {
  Put64(out, offer.socket_id);
  Put64(out + 8, offer.region_bytes);
  std::copy(offer.nonce.begin(), offer.nonce.end(), out + 16);
}

SharedRegionOffer DecodeShareOffer(const uint8_t in[kShareOfferBytes]) {
  SharedRegionOffer offer;
  offer.socket_id = Get64(in);
  offer.region_bytes = Get64(in + 8);
  std::copy(in + 16, in + 48, offer.nonce.begin());
  return offer;
}

void LayoutFingerprint::Mix(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash_ ^= p[i];
    hash_ *= 0x100000001b3ULL;
  }
}

void LayoutFingerprint::Add(const TensorSpec& spec, bool is_buffer) {
  uint8_t field[8];
  Put64(field, spec.name.size());
  Mix(field, sizeof(field));
  Mix(spec.name.data(), spec.name.size());
  Put64(field, spec.shape.size());
  Mix(field, sizeof(field));
  for (int64_t d : spec.shape) {
    Put64(field, static_cast<uint64_t>(d));
    Mix(field, sizeof(field));
  }
  const uint8_t kind[2] = {static_cast<uint8_t>(spec.dtype), static_cast<uint8_t>(is_buffer)};
  Mix(kind, sizeof(kind));
}

}  // namespace strata::push_pull_wire
