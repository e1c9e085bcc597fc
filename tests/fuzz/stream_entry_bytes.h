// How stream_event_fuzz reads its input as a stream entry, and how fuzz_seeds writes one: the
// entry id, then field names and values, each a 2-byte little-endian length and that many bytes.
// A length past the end takes what is left, so every input is some entry.
#pragma once

#include <string>

#include <absl/strings/string_view.h>

#include "services/common/stream/stream_event.h"

namespace strata::fuzz {

inline std::string EntryBytes(const StreamEntry& entry) {
  std::string out;
  const auto put = [&out](const std::string& s) {
    out.push_back(static_cast<char>(s.size() & 0xff));
    out.push_back(static_cast<char>((s.size() >> 8) & 0xff));
    out += s;
  };
  put(entry.id);
  for (const auto& [name, value] : entry.fields) {
    put(name);
    put(value);
  }
  return out;
}

inline StreamEntry EntryOfBytes(absl::string_view bytes) {
  const auto take = [&bytes]() {
    size_t n = 0;
    if (bytes.size() >= 2) {
      n = static_cast<unsigned char>(bytes[0]) |
          static_cast<size_t>(static_cast<unsigned char>(bytes[1])) << 8;
      bytes.remove_prefix(2);
    } else {
      bytes.remove_prefix(bytes.size());
    }
    const absl::string_view s = bytes.substr(0, n);
    bytes.remove_prefix(s.size());
    return std::string(s);
  };
  StreamEntry entry;
  entry.id = take();
  while (!bytes.empty()) {
    std::string name = take();
    entry.fields.emplace_back(std::move(name), take());
  }
  return entry;
}

}  // namespace strata::fuzz
