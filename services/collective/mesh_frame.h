// The wire of the stream replicas' gradient mesh on plain TCP (tcp_mesh_link.h; the mesh itself is
// gradient_mesh.h). The socket calls, tickets and hello are the ones the ring and the parameter
// servers use (services/common/wire/tcp_socket.h).
//
// A connection goes from a sending replica to one receiving replica and lives for the run. It
// opens with a hello (the mesh's magic, the sender's rank and the 32-byte ticket the receiver
// handed out over gRPC, StreamReplica.DataPlane, which carries the run token), then frames
// follow, each a fixed 40-byte little-endian header and a payload:
//   gradient  count x world clock entries (int64), then the values' sum   sender -> receiver
//             (float32, the model's parameter count)
//   end       the sender sends no more; `index` is its gradient count     sender -> receiver
//   ack       the receiver has taken a message into its inbox; `index`     receiver -> sender
//             counts the messages it has taken on the connection
//   half      a gradient whose values' sum travels as 16-bit floats         sender -> receiver
//             (strategy.push_compression fp16), converted to float32 on arrival
// The fields are those of a StreamGradient message (proto/strata/v1/collective.proto), which is
// what the receiver builds, reading the values straight into it.
#pragma once

#include <cstddef>
#include <cstdint>

#include <absl/status/status.h>

#include "services/common/wire/tcp_socket.h"
#include "strata/v1/collective.pb.h"

namespace strata::mesh_frame {

// At most this many gradients summed in one message (stream.max_grad_buffer's upper bound).
inline constexpr uint32_t kMaxGradientsPerMessage = 1024;
// At most this many replicas, so that a header's clock is bounded before anything is allocated.
inline constexpr uint32_t kMaxWorld = 4096;

constexpr size_t kHeaderBytes = 40;

enum class Kind : uint32_t { kGradient = 1, kEnd = 2, kAck = 3, kHalfGradient = 4 };

// A gradient of either width.
inline bool CarriesGradient(Kind kind) {
  return kind == Kind::kGradient || kind == Kind::kHalfGradient;
}
// Bytes per value of a gradient frame: 4, or 2 for a half one.
inline uint64_t ValueWidth(Kind kind) { return kind == Kind::kHalfGradient ? 2 : 4; }

struct Header {
  Kind kind = Kind::kGradient;
  uint32_t sender = 0;
  uint32_t world = 0;
  uint64_t index = 0;  // an ack: the messages taken so far
  uint32_t count = 0;  // gradients summed; 0 in an end or an ack
  uint64_t value_bytes = 0;
};

// The clock's bytes that follow a gradient's header: count x world entries of 8 bytes.
inline uint64_t ClockBytes(const Header& h) { return uint64_t{h.count} * h.world * 8; }

void Encode(const Header& header, uint8_t out[kHeaderBytes]);
// Checks the magic and the kind, that an end or an ack carries nothing, and that a gradient's
// count and world are within the bounds above and its values a whole number of floats (of halves
// for a half gradient; the receiver checks them against its own world and model).
absl::Status Decode(const uint8_t in[kHeaderBytes], Header* header);

// The header of `g` (a gradient or an end).
Header HeaderOf(const v1::StreamGradient& g);

// The mesh's hello (tcp::EncodeHello with the mesh's magic); the sender is a rank.
void EncodeHello(const tcp::Ticket& ticket, uint32_t sender, uint8_t out[tcp::kHelloBytes]);
absl::Status DecodeHello(const uint8_t in[tcp::kHelloBytes], tcp::Ticket* ticket, uint32_t* sender);

}  // namespace strata::mesh_frame
