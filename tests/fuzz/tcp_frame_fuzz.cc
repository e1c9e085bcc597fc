// The ring's plain-TCP data plane (services/collective/tcp_frame.h): what a worker reads from
// anyone who connects to its data port, parsed the way the receiving thread parses it. The input is
// the byte stream of a connection: a hello, then frame headers each followed by the payload it
// declares (or by as much of it as is left). Checked:
//   - no header is accepted whose payload does not fit its kind: data of whole floats (or half
//     floats) inside the buffer it declares and at most kMaxDataBytes as floats, an abort of at
//     most kMaxAbortBytes, nothing after an end or an ack (what the receiver allocates and where it
//     writes depends on this);
//   - an accepted header encodes again to one that decodes to the same frame;
//   - a decoded hello encodes again to the same ticket and sender.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <absl/strings/str_cat.h>

#include "services/collective/tcp_frame.h"
#include "tests/fuzz/data_plane_fuzz.h"
#include "tests/fuzz/fuzz_check.h"

namespace strata::tcp_ring {
namespace {

bool Same(const Frame& a, const Frame& b) {
  return a.kind == b.kind && a.payload_bytes == b.payload_bytes &&
         a.header.operation == b.header.operation && a.header.sender == b.header.sender &&
         a.header.world == b.header.world && a.header.count == b.header.count &&
         a.header.step == b.header.step && a.header.offset == b.header.offset;
}

void CheckFrame(const Frame& f) {
  const uint64_t bytes = f.payload_bytes;
  switch (f.kind) {
    case FrameKind::kData:
    case FrameKind::kHalfData: {
      // The receiver holds a half frame's values as floats: at most kMaxDataBytes of them.
      const uint64_t value = f.kind == FrameKind::kHalfData ? 2 : 4;
      FUZZ_CHECK(bytes > 0 && bytes % value == 0 && bytes / value * 4 <= kMaxDataBytes,
                 absl::StrCat("data of ", bytes, " bytes"));
      FUZZ_CHECK(
          f.header.offset <= f.header.count && bytes / value <= f.header.count - f.header.offset,
          absl::StrCat(bytes, " bytes at ", f.header.offset, " of ", f.header.count));
      break;
    }
    case FrameKind::kAbort:
      FUZZ_CHECK(bytes <= kMaxAbortBytes, absl::StrCat("abort of ", bytes, " bytes"));
      break;
    case FrameKind::kEnd:
    case FrameKind::kAck:
      FUZZ_CHECK(bytes == 0, absl::StrCat("end or ack with ", bytes, " bytes"));
      break;
  }
  uint8_t again[kFrameHeaderBytes];
  EncodeFrame(f, again);
  Frame back;
  FUZZ_CHECK(DecodeFrame(again, &back).ok(), "an accepted frame encoded again is refused");
  FUZZ_CHECK(Same(f, back), "an accepted frame encoded again decodes differently");
}

}  // namespace
}  // namespace strata::tcp_ring

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::tcp_ring;
  if (size < strata::tcp::kHelloBytes) return 0;
  strata::fuzz::CheckHelloRoundTrip(data, DecodeHello, EncodeHello);
  strata::fuzz::ForEachFrame<Frame>(data, size, kFrameHeaderBytes, DecodeFrame, CheckFrame,
                                    [](const Frame& f) { return f.payload_bytes; });
  return 0;
}
