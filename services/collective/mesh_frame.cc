#include "services/collective/mesh_frame.h"

#include <cstring>

#include <absl/strings/str_cat.h>

namespace strata::mesh_frame {
namespace {

using tcp::Get32;
using tcp::Get64;
using tcp::Put32;
using tcp::Put64;

constexpr uint32_t kFrameMagic = 0x464d5453;  // "STMF"
constexpr uint32_t kHelloMagic = 0x484d5453;  // "STMH"
constexpr uint32_t kVersion = 1;

// Layout of the header, in bytes from its start.
enum : size_t {
  kMagicAt = 0,
  kKindAt = 4,
  kSenderAt = 8,
  kWorldAt = 12,
  kIndexAt = 16,
  kCountAt = 24,  // 28..32 unused (alignment)
  kValuesAt = 32,
};
static_assert(kValuesAt + 8 == kHeaderBytes);

}  // namespace

void Encode(const Header& header, uint8_t out[kHeaderBytes]) {
  std::memset(out, 0, kHeaderBytes);
  Put32(out + kMagicAt, kFrameMagic);
  Put32(out + kKindAt, static_cast<uint32_t>(header.kind));
  Put32(out + kSenderAt, header.sender);
  Put32(out + kWorldAt, header.world);
  Put64(out + kIndexAt, header.index);
  Put32(out + kCountAt, header.count);
  Put64(out + kValuesAt, header.value_bytes);
}

absl::Status Decode(const uint8_t in[kHeaderBytes], Header* header) {
  if (Get32(in + kMagicAt) != kFrameMagic) {
    return absl::InvalidArgumentError("not a mesh frame (bad magic)");
  }
  const uint32_t kind = Get32(in + kKindAt);
  if (kind < static_cast<uint32_t>(Kind::kGradient) ||
      kind > static_cast<uint32_t>(Kind::kHalfGradient)) {
    return absl::InvalidArgumentError(absl::StrCat("mesh frame of unknown kind ", kind));
  }
  header->kind = static_cast<Kind>(kind);
  header->sender = Get32(in + kSenderAt);
  header->world = Get32(in + kWorldAt);
  header->index = Get64(in + kIndexAt);
  header->count = Get32(in + kCountAt);
  header->value_bytes = Get64(in + kValuesAt);
  if (header->world < 1 || header->world > kMaxWorld) {
    return absl::InvalidArgumentError(
        absl::StrCat("a mesh frame of ", header->world, " replicas (1 to ", kMaxWorld, ")"));
  }
  if (!CarriesGradient(header->kind)) {
    if (header->count != 0 || header->value_bytes != 0) {
      return absl::InvalidArgumentError("an end or an ack carries no gradient");
    }
    return absl::OkStatus();
  }
  if (header->count < 1 || header->count > kMaxGradientsPerMessage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a message of ", header->count, " gradients (1 to ", kMaxGradientsPerMessage, ")"));
  }
  if (header->value_bytes % ValueWidth(header->kind) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("values of ", header->value_bytes, " bytes: not whole ",
                     header->kind == Kind::kHalfGradient ? "halves" : "floats"));
  }
  return absl::OkStatus();
}

Header HeaderOf(const v1::StreamGradient& g) {
  Header h;
  h.kind = g.end() ? Kind::kEnd : Kind::kGradient;
  h.sender = g.sender();
  h.world = g.world();
  h.index = g.index();
  h.count = g.end() ? 0 : g.count();
  h.value_bytes = g.end() ? 0 : g.values().size();
  return h;
}

void EncodeHello(const tcp::Ticket& ticket, uint32_t sender, uint8_t out[tcp::kHelloBytes]) {
  tcp::EncodeHello(kHelloMagic, kVersion, ticket, sender, out);
}

absl::Status DecodeHello(const uint8_t in[tcp::kHelloBytes], tcp::Ticket* ticket,
                         uint32_t* sender) {
  return tcp::DecodeHello(kHelloMagic, kVersion, "gradient mesh", in, ticket, sender);
}

}  // namespace strata::mesh_frame
