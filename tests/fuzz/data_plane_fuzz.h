// What the plain-TCP data planes' fuzz targets (the ring's frames, tcp_frame_fuzz.cc, and the
// stream mesh's, mesh_frame_fuzz.cc) do with the bytes of a connection: the hello first, read and
// encoded again, then fixed-size headers each followed by the payload it declares (or by as much
// of it as is left), until a header is refused, as the receiving thread reads them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "services/common/wire/tcp_socket.h"
#include "tests/fuzz/fuzz_check.h"

namespace strata::fuzz {

// `decode(bytes, &ticket, &sender)` and `encode(ticket, sender, out)`: a decoded hello encodes
// again to one that reads back the same.
template <typename DecodeHello, typename EncodeHello>
void CheckHelloRoundTrip(const uint8_t* data, DecodeHello decode, EncodeHello encode) {
  tcp::Ticket ticket;
  uint32_t sender = 0;
  if (!decode(data, &ticket, &sender).ok()) return;
  uint8_t again[tcp::kHelloBytes];
  encode(ticket, sender, again);
  tcp::Ticket back;
  uint32_t back_sender = 0;
  FUZZ_CHECK(decode(again, &back, &back_sender).ok() && tcp::SameTicket(back, ticket) &&
                 back_sender == sender,
             "a hello encoded again reads differently");
}

// After the hello: each header of `header_bytes` that `decode(bytes, &header)` accepts goes to
// `check(header)`, and `payload(header)` bytes after it are skipped.
template <typename Header, typename Decode, typename Check, typename Payload>
void ForEachFrame(const uint8_t* data, size_t size, size_t header_bytes, Decode decode, Check check,
                  Payload payload) {
  size_t at = tcp::kHelloBytes;
  while (size - at >= header_bytes) {
    Header header;
    if (!decode(data + at, &header).ok()) return;  // the receiver closes the connection
    check(header);
    at += header_bytes;
    at += static_cast<size_t>(std::min<uint64_t>(payload(header), size - at));
  }
}

}  // namespace strata::fuzz
