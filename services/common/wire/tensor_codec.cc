#include "services/common/wire/tensor_codec.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include <absl/strings/str_cat.h>

namespace strata {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire format is little-endian; a big-endian host needs byte swapping here");

void ToProto(const TensorSpec& spec, v1::TensorHeader* header) {
  header->set_name(spec.name);
  header->mutable_shape()->Assign(spec.shape.begin(), spec.shape.end());
  header->set_dtype(static_cast<v1::DType>(static_cast<int>(spec.dtype)));
}

absl::StatusOr<TensorSpec> FromProto(const v1::TensorHeader& header) {
  TensorSpec spec;
  spec.name = header.name();
  if (spec.name.empty()) return absl::InvalidArgumentError("tensor header without a name");
  switch (header.dtype()) {
    case v1::DTYPE_FLOAT32:
      spec.dtype = DType::kFloat32;
      break;
    case v1::DTYPE_INT64:
      spec.dtype = DType::kInt64;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name, "': unsupported dtype ", header.dtype()));
  }
  for (int64_t d : header.shape()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name, "': negative dimension"));
    }
    // Guard the product against overflow before it is used as a size.
    if (d > 0 && spec.numel() > (int64_t{1} << 40) / d) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "': shape too large"));
    }
    spec.shape.push_back(d);
  }
  return spec;
}

absl::Status EncodeTensorInto(const TensorView& tensor, const ChunkOptions& options,
                              v1::TensorChunk* chunk, const std::function<bool()>& send) {
  const TensorSpec& spec = *tensor.spec;
  const size_t total = spec.bytes();
  const size_t step = std::max<size_t>(options.chunk_bytes, 64);
  const auto* bytes = static_cast<const char*>(tensor.data);
  ToProto(spec, chunk->mutable_header());
  size_t offset = 0;
  do {
    const size_t n = std::min(step, total - offset);
    chunk->set_offset(offset);
    chunk->mutable_data()->assign(bytes + offset, n);
    if (!send()) {
      chunk->clear_header();
      return absl::UnavailableError(absl::StrCat("stream closed while sending '", spec.name, "'"));
    }
    chunk->clear_header();
    offset += n;
  } while (offset < total);
  return absl::OkStatus();
}

absl::Status EncodeTensor(const TensorView& tensor, const ChunkOptions& options,
                          const ChunkSink& sink) {
  v1::TensorChunk chunk;
  return EncodeTensorInto(tensor, options, &chunk, [&] { return sink(chunk); });
}

TensorAssembler::TensorAssembler(DestinationFn destination, AssemblerLimits limits)
    : destination_(std::move(destination)), limits_(limits) {}

absl::Status TensorAssembler::Add(const v1::TensorChunk& chunk) {
  if (chunk.has_header()) {
    if (in_tensor_) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", received_.back().name, "' truncated: got ", filled_, " of ",
                       current_bytes_, " bytes before the next tensor began"));
    }
    auto spec = FromProto(chunk.header());
    if (!spec.ok()) return spec.status();
    if (spec->bytes() > limits_.max_tensor_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", spec->name, "' of ", spec->bytes(),
                                                     " bytes exceeds the limit of ",
                                                     limits_.max_tensor_bytes));
    }
    if (total_bytes_ + spec->bytes() > limits_.max_total_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("stream exceeds the limit of ", limits_.max_total_bytes, " bytes"));
    }
    if (total_bytes_ + spec->bytes() > limits_.available_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", spec->name, "' truncated: it declares ", spec->bytes(),
          " bytes, the stream carries ", limits_.available_bytes - total_bytes_, " more"));
    }
    auto destination = destination_(*spec);
    if (!destination.ok()) return destination.status();
    current_ = static_cast<uint8_t*>(*destination);
    current_bytes_ = spec->bytes();
    filled_ = 0;
    total_bytes_ += current_bytes_;
    received_.push_back(std::move(*spec));
    in_tensor_ = true;
  } else if (!in_tensor_) {
    return absl::InvalidArgumentError("data chunk without a tensor header");
  }
  const std::string& data = chunk.data();
  if (chunk.offset() != filled_) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", received_.back().name,
                                                   "': chunk at offset ", chunk.offset(),
                                                   ", expected ", filled_));
  }
  if (data.size() > current_bytes_ - filled_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", received_.back().name, "': ", filled_ + data.size(), " bytes sent, shape ",
        ShapeString(received_.back().shape), " holds ", current_bytes_));
  }
  if (!data.empty()) std::memcpy(current_ + filled_, data.data(), data.size());
  filled_ += data.size();
  if (filled_ == current_bytes_) in_tensor_ = false;
  return absl::OkStatus();
}

absl::Status TensorAssembler::Finish() const {
  if (in_tensor_) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", received_.back().name,
                                                   "' truncated: got ", filled_, " of ",
                                                   current_bytes_, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::TensorChunk>> EncodeAll(const std::vector<NamedTensor>& tensors,
                                                       const ChunkOptions& options) {
  std::vector<v1::TensorChunk> chunks;
  for (const NamedTensor& t : tensors) {
    if (t.data.size() != t.spec.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name(), "' holds ",
                                                     t.data.size(), " bytes, its shape needs ",
                                                     t.spec.bytes()));
    }
    absl::Status status =
        EncodeTensor({&t.spec, t.data.data()}, options, [&](const v1::TensorChunk& c) {
          chunks.push_back(c);
          return true;
        });
    if (!status.ok()) return status;
  }
  return chunks;
}

absl::StatusOr<std::vector<NamedTensor>> DecodeAll(const std::vector<v1::TensorChunk>& chunks,
                                                   AssemblerLimits limits) {
  // Every byte is already here: a header may not declare more than the chunks carry, so a
  // 16-byte header announcing 1 GiB is refused before the 1 GiB is allocated.
  size_t present = 0;
  for (const auto& chunk : chunks) present += chunk.data().size();
  limits.available_bytes = std::min(limits.available_bytes, present);
  // unique_ptr keeps each tensor's buffer in place while the vector grows.
  std::vector<std::unique_ptr<NamedTensor>> out;
  TensorAssembler assembler(
      [&](const TensorSpec& spec) -> absl::StatusOr<void*> {
        out.push_back(std::make_unique<NamedTensor>(NamedTensor::Zeros(spec)));
        return static_cast<void*>(out.back()->data.data());
      },
      limits);
  for (const auto& chunk : chunks) {
    absl::Status status = assembler.Add(chunk);
    if (!status.ok()) return status;
  }
  absl::Status status = assembler.Finish();
  if (!status.ok()) return status;
  std::vector<NamedTensor> tensors;
  tensors.reserve(out.size());
  for (auto& t : out) tensors.push_back(std::move(*t));
  return tensors;
}

}  // namespace strata
