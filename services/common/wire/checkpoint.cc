#include "services/common/wire/checkpoint.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <utility>

#include <absl/strings/str_cat.h>
#include <zlib.h>

#include "services/common/base/files.h"

namespace strata {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'K'};

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }

uint32_t GetU32(const std::string& in, size_t at) {
  uint32_t v;
  std::memcpy(&v, in.data() + at, 4);
  return v;
}

uint32_t Crc32(const char* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths; feed large files in pieces.
  while (n > 0) {
    uInt piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), piece);
    data += piece;
    n -= piece;
  }
  return static_cast<uint32_t>(crc);
}

// An integer of the metadata (epoch, step, version, a dimension). nlohmann's get<int64_t>()
// converts any number: 1.7 silently became dimension 1, and 1e300 or 92233720368547758083 (beyond
// uint64_t, so parsed as a double) was converted out of range, which is undefined behaviour
// (tests/fuzz/checkpoint_fuzz.cc). Only an integer that fits int64_t is taken.
bool GetInt64(const nlohmann::json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (!value.is_number_integer()) return false;
  *out = value.get<int64_t>();
  return true;
}

absl::StatusOr<TensorKind> KindFromName(const std::string& name) {
  if (name == "parameter") return TensorKind::kParameter;
  if (name == "buffer") return TensorKind::kBuffer;
  if (name == "momentum") return TensorKind::kMomentum;
  return absl::DataLossError(absl::StrCat("unknown tensor kind '", name, "'"));
}

}  // namespace

const char* TensorKindName(TensorKind kind) {
  switch (kind) {
    case TensorKind::kParameter:
      return "parameter";
    case TensorKind::kBuffer:
      return "buffer";
    case TensorKind::kMomentum:
      return "momentum";
  }
  return "unknown";
}

const CheckpointEntry* Checkpoint::Find(TensorKind kind, const std::string& name) const {
  for (const auto& e : entries) {
    if (e.kind == kind && e.tensor.name() == name) return &e;
  }
  return nullptr;
}

absl::StatusOr<std::string> SerializeCheckpoint(const Checkpoint& checkpoint) {
  nlohmann::json meta = {{"epoch", checkpoint.epoch},
                         {"step", checkpoint.step},
                         {"version", checkpoint.version},
                         {"extra", checkpoint.extra},
                         {"tensors", nlohmann::json::array()}};
  size_t payload = 0;
  for (const auto& e : checkpoint.entries) {
    const NamedTensor& t = e.tensor;
    if (t.data.size() != t.spec.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint tensor '", t.name(), "' holds ",
                                                     t.data.size(), " bytes, shape needs ",
                                                     t.spec.bytes()));
    }
    meta["tensors"].push_back({{"name", t.name()},
                               {"shape", t.spec.shape},
                               {"dtype", DTypeName(t.spec.dtype)},
                               {"kind", TensorKindName(e.kind)},
                               {"bytes", t.data.size()}});
    payload += t.data.size();
  }
  const std::string meta_text = meta.dump();
  std::string out;
  out.reserve(16 + meta_text.size() + payload + 4);
  out.append(kMagic, 8);
  PutU32(&out, kCheckpointFormatVersion);
  PutU32(&out, static_cast<uint32_t>(meta_text.size()));
  out.append(meta_text);
  for (const auto& e : checkpoint.entries) {
    out.append(reinterpret_cast<const char*>(e.tensor.data.data()), e.tensor.data.size());
  }
  PutU32(&out, Crc32(out.data(), out.size()));
  return out;
}

absl::StatusOr<Checkpoint> ParseCheckpoint(const std::string& bytes, const std::string& origin) {
  auto fail = [&](absl::StatusCode code, absl::string_view why) {
    return absl::Status(code, absl::StrCat("checkpoint ", origin, ": ", why));
  };
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    return fail(absl::StatusCode::kDataLoss, "not a Strata checkpoint (bad magic)");
  }
  if (bytes.size() < 20) return fail(absl::StatusCode::kDataLoss, "truncated header");
  const uint32_t format = GetU32(bytes, 8);
  if (format != kCheckpointFormatVersion) {
    return fail(
        absl::StatusCode::kUnimplemented,
        absl::StrCat("format version ", format, ", this build reads ", kCheckpointFormatVersion));
  }
  const size_t meta_len = GetU32(bytes, 12);
  if (16 + meta_len + 4 > bytes.size()) {
    return fail(absl::StatusCode::kDataLoss,
                absl::StrCat("truncated: ", bytes.size(), " bytes, metadata alone needs ",
                             16 + meta_len + 4));
  }
  auto meta = nlohmann::json::parse(bytes.begin() + 16, bytes.begin() + 16 + meta_len, nullptr,
                                    /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("tensors")) {
    return fail(absl::StatusCode::kDataLoss, "corrupt metadata");
  }
  // Every count below comes from the file: each is checked against the bytes actually present
  // before it is used, in arithmetic that cannot wrap, so a crafted header is an error and never
  // an allocation, an exception or a read past the end.
  const size_t available = bytes.size() - (16 + meta_len + 4);
  size_t payload = 0;
  Checkpoint checkpoint;
  try {
    for (const auto& [key, field] :
         {std::pair{"epoch", &checkpoint.epoch}, std::pair{"step", &checkpoint.step},
          std::pair{"version", &checkpoint.version}}) {
      if (!GetInt64(meta.at(key), field)) {
        return fail(absl::StatusCode::kDataLoss,
                    absl::StrCat("corrupt metadata: ", key, " is not an integer"));
      }
    }
    checkpoint.extra = meta.value("extra", nlohmann::json::object());
    const nlohmann::json& tensors = meta.at("tensors");
    if (!tensors.is_array()) return fail(absl::StatusCode::kDataLoss, "corrupt metadata");
    for (const auto& t : tensors) {
      CheckpointEntry e;
      auto kind = KindFromName(t.at("kind").get<std::string>());
      if (!kind.ok()) return fail(absl::StatusCode::kDataLoss, kind.status().message());
      e.kind = *kind;
      e.tensor.spec.name = t.at("name").get<std::string>();
      const nlohmann::json& shape = t.at("shape");
      if (!shape.is_array()) {
        return fail(absl::StatusCode::kDataLoss,
                    absl::StrCat("tensor '", e.tensor.spec.name, "' has a shape that is no list"));
      }
      for (size_t i = 0; i < shape.size(); ++i) {
        int64_t d = 0;
        if (!GetInt64(shape[i], &d)) {
          return fail(absl::StatusCode::kDataLoss,
                      absl::StrCat("tensor '", e.tensor.spec.name, "': dimension ", i,
                                   " is not an integer"));
        }
        e.tensor.spec.shape.push_back(d);
      }
      auto dtype = DTypeFromName(t.at("dtype").get<std::string>());
      if (!dtype.ok()) return fail(absl::StatusCode::kDataLoss, dtype.status().message());
      e.tensor.spec.dtype = *dtype;
      const std::string& name = e.tensor.spec.name;
      // The shape's size, bounded by what is left of the file at every factor.
      size_t need = DTypeSize(e.tensor.spec.dtype);
      bool zero = false;
      for (int64_t d : e.tensor.spec.shape) {
        if (d < 0) {
          return fail(absl::StatusCode::kDataLoss,
                      absl::StrCat("tensor '", name, "' has negative dimension ", d));
        }
        if (d == 0) zero = true;
        const uint64_t ud = static_cast<uint64_t>(d);
        if (!zero && ud > 0 && need > (available - payload) / ud) {
          return fail(absl::StatusCode::kDataLoss,
                      absl::StrCat("truncated: tensor '", name, "' of shape ",
                                   ShapeString(e.tensor.spec.shape), " needs more than the ",
                                   available - payload, " bytes left in the file"));
        }
        if (!zero) need *= static_cast<size_t>(ud);
      }
      if (zero) need = 0;
      if (need > available - payload) {  // a scalar (empty shape) skips the loop's check
        return fail(absl::StatusCode::kDataLoss,
                    absl::StrCat("truncated: tensor '", name, "' needs ", need, " bytes, ",
                                 available - payload, " are left in the file"));
      }
      if (!t.at("bytes").is_number_unsigned() || t.at("bytes").get<uint64_t>() != need) {
        return fail(absl::StatusCode::kDataLoss,
                    absl::StrCat("tensor '", name, "' size disagrees with its shape"));
      }
      payload += need;  // need <= available - payload: no wrap
      checkpoint.entries.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    return fail(absl::StatusCode::kDataLoss, absl::StrCat("corrupt metadata: ", e.what()));
  } catch (const std::exception& e) {
    // Nothing above should throw past the checks; a caller must still get a Status, not an abort.
    return fail(absl::StatusCode::kDataLoss, absl::StrCat("unreadable metadata: ", e.what()));
  }
  const size_t expected = 16 + meta_len + payload + 4;
  if (bytes.size() < expected) {
    return fail(absl::StatusCode::kDataLoss,
                absl::StrCat("truncated: ", bytes.size(), " of ", expected, " bytes"));
  }
  if (bytes.size() > expected) {
    return fail(absl::StatusCode::kDataLoss,
                absl::StrCat("trailing garbage: ", bytes.size(), " bytes, expected ", expected));
  }
  if (Crc32(bytes.data(), expected - 4) != GetU32(bytes, expected - 4)) {
    return fail(absl::StatusCode::kDataLoss, "checksum mismatch (corrupt data)");
  }
  size_t at = 16 + meta_len;
  for (auto& e : checkpoint.entries) {
    const size_t n = e.tensor.spec.bytes();
    e.tensor.data.assign(bytes.begin() + at, bytes.begin() + at + n);
    at += n;
  }
  return checkpoint;
}

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& checkpoint,
                             const std::string& beneath) {
  auto bytes = SerializeCheckpoint(checkpoint);
  if (!bytes.ok()) return bytes.status();
  FileAccessOptions options;
  options.beneath = beneath;
  return WriteFileAtomic(path, *bytes, options);
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path, const std::string& beneath) {
  FileAccessOptions options;
  options.beneath = beneath;
  auto bytes = ReadFile(path, options);
  if (!bytes.ok()) return bytes.status();
  return ParseCheckpoint(*bytes, path);
}

}  // namespace strata
