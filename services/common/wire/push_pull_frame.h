// The wire of the parameter server's plain-TCP data plane: what a worker's push/pull looks like
// on a connection it opened with a ticket (services/common/wire/tcp_socket.h) that the server
// handed out over gRPC (ParameterServer.DataPlane). gRPC stays the control plane (status,
// checkpoints, the handover, progress); this carries only the per-step exchange.
//
// A connection carries one call at a time, request then reply:
//   request  80-byte header, then for an exchange the partition's gradients and buffer values as
//            raw little-endian float32, in the partition's tensor order (PartitionPlan, model
//            order); a pull has no payload
//   reply    64-byte header, then either the partition's weights and buffer values in the same
//            order (code 0), or a UTF-8 message of at most 64 KiB (code: an absl::StatusCode)
// A worker on the server's host may move the tensors through shared memory instead
// (services/common/wire/shared_region.h): it asks once with a share request (no payload), whose
// reply carries a 48-byte offer instead of a model; then each shared exchange announces the
// partition's size in payload_bytes but sends it in the region's push area, and its reply
// announces the model's size and leaves it in the reply area: nothing follows either header.
// Both ends know the tensors, so the payload carries no names or shapes: the request names the
// layout by its fingerprint (names, shapes, kinds, in order) and the server refuses one that is
// not its own. A refused request (its payload read whole) leaves the connection usable. A header
// that breaks these rules (bad magic, version or kind, a payload that is not a whole number of
// floats (of 16-bit halves for a 16-bit exchange), over 1 GiB, or present where none belongs) is
// answered with a refusal, and then the connection ends.
#pragma once

#include <cstddef>
#include <cstdint>

#include <absl/status/status.h>

#include "services/common/wire/shared_region.h"
#include "services/common/wire/tensor.h"

namespace strata::push_pull_wire {

enum class RequestKind : uint32_t {
  kExchange = 1,
  kPull = 2,
  kShareMemory = 3,     // asks for a shared region; the reply's payload is its offer
  kExchangeShared = 4,  // an exchange whose tensors are in the shared region, both ways
  // An exchange in 16 bits (strategy.push_compression: fp16): the gradients as IEEE half floats,
  // then the buffer values as float32; its reply carries the weights the same way, or the whole
  // model in float32 when a weight is beyond a half's range (the payload's size tells which).
  kExchangeHalf = 5,
};

// Whether the request's payload_bytes follow its header on the socket.
inline bool PayloadOnSocket(RequestKind kind) {
  return kind == RequestKind::kExchange || kind == RequestKind::kExchangeHalf;
}

inline bool IsExchange(RequestKind kind) {
  return kind == RequestKind::kExchange || kind == RequestKind::kExchangeShared ||
         kind == RequestKind::kExchangeHalf;
}

// The bytes of a partition of `parameter_floats` parameters and `buffer_floats` buffer values on
// the socket, the parameters (or their gradients) in 16 or 32 bits.
inline uint64_t PayloadBytes(uint64_t parameter_floats, uint64_t buffer_floats, bool half) {
  return parameter_floats * (half ? 2 : 4) + buffer_floats * 4;
}

constexpr uint32_t kHelloMagic = 0x50525453;  // "STRP"
// 2: the server answers an admitted hello with a welcome. 3: a share offer names the socket the
// region's descriptor is handed over on, not the server's pid and descriptor. 4: 16-bit exchanges
// (kExchangeHalf), so payloads are whole numbers of halves, not of floats.
constexpr uint32_t kVersion = 4;
constexpr size_t kRequestBytes = 80;
constexpr size_t kReplyBytes = 64;
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;
constexpr uint32_t kMaxMessageBytes = 64 << 10;
constexpr size_t kShareOfferBytes = 48;

struct Request {
  RequestKind kind = RequestKind::kExchange;
  uint32_t worker = 0;
  int64_t version = 0;  // the model version the gradients were computed on
  int64_t clock = 0;
  int64_t samples = 0;
  double lr = 0;
  uint64_t layout_fingerprint = 0;
  uint64_t payload_bytes = 0;
  // How long the worker waits for the reply; the server bounds its own waits by it.
  uint64_t deadline_ms = 0;
};

struct Reply {
  uint32_t code = 0;  // absl::StatusCode; 0 (OK): a model follows
  uint32_t message_bytes = 0;
  int64_t version = 0;
  double global_epoch = 0;
  int64_t samples = 0, sample_budget = 0;
  uint64_t payload_bytes = 0;
};

void EncodeRequest(const Request& request, uint8_t out[kRequestBytes]);
absl::Status DecodeRequest(const uint8_t in[kRequestBytes], Request* request);
void EncodeReply(const Reply& reply, uint8_t out[kReplyBytes]);
absl::Status DecodeReply(const uint8_t in[kReplyBytes], Reply* reply);

// The reply payload of a share request: the hand-over socket's id, region size, the region's first 32
// bytes (SharedRegionOffer).
void EncodeShareOffer(const SharedRegionOffer& offer, uint8_t out[kShareOfferBytes]);
SharedRegionOffer DecodeShareOffer(const uint8_t in[kShareOfferBytes]);

// A 64-bit FNV-1a digest of a partition's tensors in order: name, shape, and whether each is a
// buffer. Equal on both ends when they cut the same model by the same plan.
class LayoutFingerprint {
 public:
  void Add(const TensorSpec& spec, bool is_buffer);
  uint64_t value() const { return hash_; }

 private:
  void Mix(const void* data, size_t bytes);
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace strata::push_pull_wire
