// The parameter server's plain-TCP data plane (services/common/wire/push_pull_frame.h): what a
// server reads from anyone who connects to its data port, and what a worker reads back. The input
// is a connection's byte stream: a hello, then request headers each followed by the payload it
// declares (or as much of it as is left); the same bytes are also read as reply headers.
// Checked:
//   - no request is accepted whose payload is not whole floats (whole halves for a 16-bit
//     exchange) within kMaxPayloadBytes, or that carries a payload as a pull or share request or
//     none as an exchange (the server reads exactly that many bytes into the partition's staging,
//     from the socket or, for a shared exchange, from the shared region); no request of a kind
//     outside the five;
//   - no reply is accepted with an unknown status code, a message over kMaxMessageBytes, a payload
//     that is not whole halves within the bound, or a model alongside an error;
//   - whatever is accepted encodes again to a header that decodes to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <absl/strings/str_cat.h>

#include "services/common/wire/push_pull_frame.h"
#include "services/common/wire/tcp_socket.h"
#include "tests/fuzz/fuzz_check.h"

namespace strata::push_pull_wire {
namespace {

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

void CheckRequest(const Request& r) {
  // A 16-bit exchange carries whole halves; every other payload whole floats.
  const uint64_t unit = r.kind == RequestKind::kExchangeHalf ? 2 : sizeof(float);
  FUZZ_CHECK(r.payload_bytes % unit == 0 && r.payload_bytes <= kMaxPayloadBytes,
             absl::StrCat("a request of ", r.payload_bytes, " bytes"));
  const bool exchange = r.kind == RequestKind::kExchange ||
                        r.kind == RequestKind::kExchangeShared ||
                        r.kind == RequestKind::kExchangeHalf;
  FUZZ_CHECK(exchange == IsExchange(r.kind), "IsExchange disagrees with the kinds");
  FUZZ_CHECK(exchange || r.kind == RequestKind::kPull || r.kind == RequestKind::kShareMemory,
             absl::StrCat("a request of kind ", static_cast<uint32_t>(r.kind)));
  FUZZ_CHECK(exchange != (r.payload_bytes == 0),
             "a pull or share with a payload, or an exchange without one");
  FUZZ_CHECK(PayloadOnSocket(r.kind) ==
                 (r.kind == RequestKind::kExchange || r.kind == RequestKind::kExchangeHalf),
             "a payload on the socket for a request that has none there");
  uint8_t again[kRequestBytes];
  EncodeRequest(r, again);
  Request back;
  FUZZ_CHECK(DecodeRequest(again, &back).ok(), "an accepted request encoded again is refused");
  FUZZ_CHECK(back.kind == r.kind && back.worker == r.worker && back.version == r.version &&
                 back.clock == r.clock && back.samples == r.samples && SameBits(back.lr, r.lr) &&
                 back.layout_fingerprint == r.layout_fingerprint &&
                 back.payload_bytes == r.payload_bytes && back.deadline_ms == r.deadline_ms,
             "an accepted request encoded again decodes differently");
}

void CheckReply(const Reply& r) {
  FUZZ_CHECK(r.code <= 16, absl::StrCat("status code ", r.code));
  FUZZ_CHECK(r.message_bytes <= kMaxMessageBytes, absl::StrCat("a message of ", r.message_bytes));
  // Whole halves: a 16-bit exchange's reply may carry them; the worker checks the exact size.
  FUZZ_CHECK(r.payload_bytes % 2 == 0 && r.payload_bytes <= kMaxPayloadBytes,
             absl::StrCat("a reply of ", r.payload_bytes, " bytes"));
  FUZZ_CHECK(r.code == 0 || r.payload_bytes == 0, "an error reply with a model");
  uint8_t again[kReplyBytes];
  EncodeReply(r, again);
  Reply back;
  FUZZ_CHECK(DecodeReply(again, &back).ok(), "an accepted reply encoded again is refused");
  FUZZ_CHECK(back.code == r.code && back.message_bytes == r.message_bytes &&
                 back.version == r.version && SameBits(back.global_epoch, r.global_epoch) &&
                 back.samples == r.samples && back.sample_budget == r.sample_budget &&
                 back.payload_bytes == r.payload_bytes,
             "an accepted reply encoded again decodes differently");
}

}  // namespace
}  // namespace strata::push_pull_wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::push_pull_wire;
  namespace tcp = strata::tcp;
  if (size < tcp::kHelloBytes) return 0;
  tcp::Ticket ticket;
  uint32_t sender = 0;
  (void)tcp::DecodeHello(kHelloMagic, kVersion, "push/pull", data, &ticket, &sender);
  for (size_t at = tcp::kHelloBytes; size - at >= kReplyBytes; at += kReplyBytes) {
    Reply reply;
    if (DecodeReply(data + at, &reply).ok()) CheckReply(reply);
  }
  size_t at = tcp::kHelloBytes;
  while (size - at >= kRequestBytes) {
    Request request;
    if (!DecodeRequest(data + at, &request).ok()) return 0;  // the server ends the connection
    CheckRequest(request);
    at += kRequestBytes;
    const uint64_t on_socket = PayloadOnSocket(request.kind) ? request.payload_bytes : 0;
    at += static_cast<size_t>(std::min<uint64_t>(on_socket, size - at));
  }
  return 0;
}
