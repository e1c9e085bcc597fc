#include "services/common/wire/shard_index.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <absl/strings/str_cat.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/base/status.h"

namespace strata {
namespace {

constexpr size_t kHeaderBytes = 32;
constexpr size_t kTrailerBytes = 4;

void PutLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(const std::string& in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= uint64_t{static_cast<unsigned char>(in[offset + i])} << (8 * i);
  }
  return value;
}

uint32_t Crc32(const char* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), piece);
    data += piece;
    n -= piece;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

absl::StatusOr<std::string> EncodeShardIndex(std::vector<int64_t> indices, uint64_t examples) {
  std::sort(indices.begin(), indices.end());
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || static_cast<uint64_t>(indices[i]) >= examples) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard index ", indices[i], " is outside [0, ", examples, ")"));
    }
    if (i > 0 && indices[i] == indices[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("shard index ", indices[i], " appears twice"));
    }
  }
  std::string out;
  out.reserve(kHeaderBytes + 8 * indices.size() + kTrailerBytes);
  out.append(kShardIndexMagic, sizeof(kShardIndexMagic));
  PutLittleEndian(kShardIndexVersion, 4, &out);
  PutLittleEndian(0, 4, &out);
  PutLittleEndian(examples, 8, &out);
  PutLittleEndian(indices.size(), 8, &out);
  for (int64_t v : indices) PutLittleEndian(static_cast<uint64_t>(v), 8, &out);
  PutLittleEndian(Crc32(out.data(), out.size()), 4, &out);
  return out;
}

absl::StatusOr<ShardIndex> DecodeShardIndex(const std::string& bytes, const std::string& origin) {
  if (bytes.size() < kHeaderBytes + kTrailerBytes) {
    return absl::DataLossError(absl::StrCat(origin, ": truncated shard index: ", bytes.size(),
                                            " bytes, the header and checksum alone need ",
                                            kHeaderBytes + kTrailerBytes));
  }
  if (std::memcmp(bytes.data(), kShardIndexMagic, sizeof(kShardIndexMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(origin, ": not a shard index file (bad magic)"));
  }
  const uint64_t version = GetLittleEndian(bytes, 8, 4);
  if (version != kShardIndexVersion) {
    return absl::DataLossError(absl::StrCat(origin, ": shard index version ", version,
                                            ", this build reads version ", kShardIndexVersion));
  }
  ShardIndex index;
  index.examples = GetLittleEndian(bytes, 16, 8);
  const uint64_t count = GetLittleEndian(bytes, 24, 8);
  const uint64_t payload = bytes.size() - kHeaderBytes - kTrailerBytes;
  if (count > payload / 8 || payload != count * 8) {
    return absl::DataLossError(absl::StrCat(origin, ": shard index header promises ", count,
                                            " indices but the file holds ", payload,
                                            " bytes of them (truncated or corrupt)"));
  }
  const uint32_t stored = static_cast<uint32_t>(GetLittleEndian(bytes, bytes.size() - 4, 4));
  if (Crc32(bytes.data(), bytes.size() - kTrailerBytes) != stored) {
    return absl::DataLossError(absl::StrCat(origin, ": shard index checksum mismatch (corrupt)"));
  }
  index.indices.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    const int64_t v = static_cast<int64_t>(GetLittleEndian(bytes, kHeaderBytes + 8 * i, 8));
    if (v < 0 || static_cast<uint64_t>(v) >= index.examples ||
        (i > 0 && v <= index.indices[i - 1])) {
      return absl::DataLossError(absl::StrCat(origin, ": shard index entry ", i, " (", v,
                                              ") is out of order or outside [0, ", index.examples,
                                              ")"));
    }
    index.indices[i] = v;
  }
  return index;
}

absl::Status WriteShardIndex(const std::string& path, std::vector<int64_t> indices,
                             uint64_t examples) {
  STRATA_ASSIGN_OR_RETURN(std::string bytes, EncodeShardIndex(std::move(indices), examples));
  return WriteFileAtomic(path, bytes);
}

absl::StatusOr<ShardIndex> ReadShardIndexFile(const std::string& path) {
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return DecodeShardIndex(*bytes, path);
}

absl::StatusOr<std::vector<int64_t>> ReadShardIndex(const std::string& path) {
  auto index = ReadShardIndexFile(path);
  if (!index.ok()) return index.status();
  return std::move(index->indices);
}

absl::StatusOr<ShardPlanFacts> ReadShardPlanFacts(const std::string& manifest_path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadFile(manifest_path));
  const nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": not a shard plan manifest: ", what));
  };
  if (!m.is_object() || m.value("format", "") != "strata-shard-plan") return bad("no format");
  ShardPlanFacts facts;
  const auto examples = m.find("examples");
  if (examples == m.end() || !examples->is_number_integer() || examples->get<int64_t>() < 1) {
    return bad("no positive \"examples\"");
  }
  facts.examples = examples->get<int64_t>();
  const auto parameters = m.find("parameters");
  if (parameters != m.end() && parameters->is_object()) {
    const auto workers = parameters->find("workers");
    if (workers != parameters->end() && workers->is_number_integer()) {
      facts.workers = workers->get<int>();
    }
  }
  const auto dataset = m.find("dataset");
  if (dataset != m.end() && dataset->is_object())
    facts.fingerprint = dataset->value("fingerprint", "");
  const auto shards = m.find("shards");
  if (shards != m.end() && shards->is_array()) {
    for (const nlohmann::json& entry : *shards) {
      ShardPlanFacts::Shard shard;
      if (entry.is_object()) {
        if (entry.contains("worker") && entry["worker"].is_number_integer())
          shard.worker = entry["worker"].get<int>();
        if (entry.contains("file") && entry["file"].is_string()) shard.file = entry["file"];
        if (entry.contains("count") && entry["count"].is_number_integer())
          shard.count = entry["count"].get<int64_t>();
      }
      facts.shards.push_back(shard);
    }
  }
  return facts;
}

absl::StatusOr<std::vector<int64_t>> CheckShardIndexFor(const std::string& index_path,
                                                        const ShardExpectation& expected) {
  const std::filesystem::path index(index_path);
  const std::string manifest_path = (index.parent_path() / kShardManifestName).string();
  STRATA_ASSIGN_OR_RETURN(ShardPlanFacts plan, ReadShardPlanFacts(manifest_path));
  STRATA_ASSIGN_OR_RETURN(ShardIndex shard, ReadShardIndexFile(index_path));
  auto refuse = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat(index_path, ": not this worker's shard: ", what));
  };
  if (plan.workers != expected.workers) {
    return refuse(absl::StrCat("its plan (", manifest_path, ") has ", plan.workers,
                               " shard(s), the job ", expected.workers, " worker(s)"));
  }
  if (expected.rank < 0 || expected.rank >= expected.workers) {
    return refuse(absl::StrCat("rank ", expected.rank, " is not one of the job's ",
                               expected.workers, " worker(s)"));
  }
  const ShardPlanFacts::Shard* listed = nullptr;
  for (const ShardPlanFacts::Shard& s : plan.shards) {
    if (s.worker == expected.rank) listed = &s;
  }
  if (listed == nullptr) {
    return refuse(absl::StrCat("its plan lists no shard for worker ", expected.rank));
  }
  if (listed->file != index.filename().string()) {
    return refuse(
        absl::StrCat("its plan gives worker ", expected.rank, " the file ", listed->file));
  }
  if (listed->count != static_cast<int64_t>(shard.indices.size())) {
    return refuse(absl::StrCat("it holds ", shard.indices.size(), " index(es), its plan lists ",
                               listed->count, " for worker ", expected.rank));
  }
  if (static_cast<int64_t>(shard.examples) != plan.examples) {
    return refuse(absl::StrCat("it indexes a training set of ", shard.examples,
                               " example(s), its plan one of ", plan.examples));
  }
  if (plan.examples != expected.train_examples) {
    return refuse(absl::StrCat("its plan is for a training set of ", plan.examples,
                               " example(s), the worker loaded ", expected.train_examples));
  }
  if (!expected.fingerprint.empty() && plan.fingerprint != expected.fingerprint) {
    return refuse(absl::StrCat("its plan is for the data set ", plan.fingerprint,
                               ", the worker's is ", expected.fingerprint));
  }
  return std::move(shard.indices);
}

}  // namespace strata
