// The stream replicas' plain-TCP data plane (services/collective/mesh_frame.h): what a replica
// reads from anyone who connects to its mesh data port, parsed the way its reader thread parses
// it. The input is the byte stream of a connection: a hello, then frame headers each followed by
// the clock and values it declares (or by as much of them as is left). Checked:
//   - no header is accepted that would have the receiver allocate beyond the bounds: a gradient
//     of 1 to kMaxGradientsPerMessage gradients of 1 to kMaxWorld replicas (its clock at most
//     their product's entries) and values of whole floats (halves in a half gradient); an end
//     or an ack carries nothing;
//   - an accepted header encodes again to one that decodes to the same header;
//   - a decoded hello encodes again to the same ticket and sender.
#include <cstddef>
#include <cstdint>

#include <absl/strings/str_cat.h>

#include "services/collective/mesh_frame.h"
#include "tests/fuzz/data_plane_fuzz.h"
#include "tests/fuzz/fuzz_check.h"

namespace strata::mesh_frame {
namespace {

bool Same(const Header& a, const Header& b) {
  return a.kind == b.kind && a.sender == b.sender && a.world == b.world && a.index == b.index &&
         a.count == b.count && a.value_bytes == b.value_bytes;
}

void CheckHeader(const Header& h) {
  FUZZ_CHECK(h.world >= 1 && h.world <= kMaxWorld, absl::StrCat("a world of ", h.world));
  if (CarriesGradient(h.kind)) {
    FUZZ_CHECK(h.count >= 1 && h.count <= kMaxGradientsPerMessage,
               absl::StrCat("a count of ", h.count));
    FUZZ_CHECK(ClockBytes(h) <= uint64_t{kMaxGradientsPerMessage} * kMaxWorld * 8,
               absl::StrCat("a clock of ", ClockBytes(h), " bytes"));
    FUZZ_CHECK(h.value_bytes % ValueWidth(h.kind) == 0,
               absl::StrCat(h.value_bytes, " value bytes of kind ", static_cast<int>(h.kind)));
  } else {
    FUZZ_CHECK(h.count == 0 && h.value_bytes == 0, "an end or an ack that carries something");
  }
  uint8_t again[kHeaderBytes];
  Encode(h, again);
  Header back;
  FUZZ_CHECK(Decode(again, &back).ok(), "an accepted header encoded again is refused");
  FUZZ_CHECK(Same(h, back), "an accepted header encoded again decodes differently");
}

}  // namespace
}  // namespace strata::mesh_frame

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::mesh_frame;
  if (size < strata::tcp::kHelloBytes) return 0;
  strata::fuzz::CheckHelloRoundTrip(data, DecodeHello, EncodeHello);
  strata::fuzz::ForEachFrame<Header>(data, size, kHeaderBytes, Decode, CheckHeader,
                                     [](const Header& h) { return ClockBytes(h) + h.value_bytes; });
  return 0;
}
