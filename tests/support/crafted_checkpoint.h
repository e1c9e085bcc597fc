// Checkpoint files made byte by byte, for tests and fuzz seeds that must reach the parser's own
// checks: the metadata says whatever the caller wants, and the CRC is correct, so the checksum
// never refuses them first (services/common/wire/checkpoint.h has the format).
#pragma once

#include <cstdint>
#include <string>

#include <zlib.h>
#include <nlohmann/json.hpp>

#include "services/common/wire/checkpoint.h"

namespace strata::testing {

inline std::string CraftedCheckpoint(const nlohmann::json& meta, const std::string& payload = "") {
  const std::string text = meta.dump();
  std::string out = "STRATACK";
  auto put = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put(kCheckpointFormatVersion);
  put(static_cast<uint32_t>(text.size()));
  out += text;
  out += payload;
  put(static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size()))));
  return out;
}

}  // namespace strata::testing
