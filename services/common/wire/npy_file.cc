#include "services/common/wire/npy_file.h"

#include "services/common/wire/npy_header_dict.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

// The data are handed out as the file's bytes, which .npy files written by np.save on any common
// machine hold little-endian ('<f4'); big-endian files are refused.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "npy_file assumes a little-endian host");

namespace strata {
namespace {

struct DTypeInfo {
  NpyDType dtype;
  const char* name;
  const char* descr;  // as np.save writes it
  size_t size;
  bool is_float;
};

constexpr DTypeInfo kDTypes[] = {
    {NpyDType::kFloat32, "float32", "<f4", 4, true},
    {NpyDType::kFloat64, "float64", "<f8", 8, true},
    {NpyDType::kUInt8, "uint8", "|u1", 1, false},
    {NpyDType::kInt8, "int8", "|i1", 1, false},
    {NpyDType::kInt32, "int32", "<i4", 4, false},
    {NpyDType::kInt64, "int64", "<i8", 8, false},
};
constexpr char kSupported[] = "float32, float64, uint8, int8, int32 or int64";

const DTypeInfo& Info(NpyDType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  std::fprintf(stderr, "npy_file: unknown NpyDType %d\n", static_cast<int>(dtype));
  std::abort();
}

constexpr char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kAlign = 64;  // numpy's ARRAY_ALIGN
// numpy's GROWTH_AXIS_MAX_DIGITS: spaces left after the dict so that the first axis can grow in
// place.
constexpr size_t kGrowthDigits = 21;
constexpr size_t kWriterMaxDims = 32;  // NPY_MAXDIMS of numpy 1.x

// Python's repr of a shape tuple: "(5,)", "(3, 4)".
std::string PyShape(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// What a descr that is not read stands for, to name it in the refusal.
std::string DescribeUnsupported(absl::string_view code) {
  struct Known {
    const char* code;
    const char* name;
  };
  static constexpr Known kKnown[] = {
      {"b1", "bool"},      {"i2", "int16"},       {"u2", "uint16"},      {"u4", "uint32"},
      {"u8", "uint64"},    {"f2", "float16"},     {"f12", "float96"},    {"f16", "float128"},
      {"c8", "complex64"}, {"c16", "complex128"}, {"c32", "complex256"},
  };
  for (const Known& k : kKnown) {
    if (code == k.code) return k.name;
  }
  if (code.empty()) return "";
  switch (code[0]) {
    case 'U':
      return "a Unicode string";
    case 'S':
    case 'a':
      return "a byte string";
    case 'V':
      return "raw records";
    case 'M':
      return "datetime64";
    case 'm':
      return "timedelta64";
    default:
      return "";
  }
}

absl::StatusOr<NpyDType> DTypeFromDescr(const std::string& descr) {
  char order = 0;
  absl::string_view code = descr;
  if (!code.empty() && std::strchr("<>|=", code[0]) != nullptr) {
    order = code[0];
    code.remove_prefix(1);
  }
  if (code == "O" || code == "O8") {
    return absl::InvalidArgumentError(absl::StrCat(
        "the dtype ", PyQuoted(descr),
        " is an object array, whose data are pickled Python objects; those are never loaded: "
        "save a numeric array"));
  }
  for (const DTypeInfo& info : kDTypes) {
    if (code != info.descr + 1) continue;
    if (info.size == 1 || order == '<') return info.dtype;
    if (order == '>') {
      return absl::InvalidArgumentError(
          absl::StrCat("the dtype ", PyQuoted(descr), " is big-endian ", info.name,
                       "; save a little-endian copy: np.save(path, a.astype('", info.descr, "'))"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the dtype ", PyQuoted(descr), " states no byte order; np.save writes '", info.descr, "'"));
  }
  const std::string known = DescribeUnsupported(code);
  return absl::InvalidArgumentError(absl::StrCat(
      "the dtype ", PyQuoted(descr), known.empty() ? "" : absl::StrCat(" (", known, ")"),
      " is not supported; use ", kSupported));
}

absl::Status WithOrigin(const absl::Status& status, const std::string& origin) {
  return absl::Status(status.code(), absl::StrCat(origin, ": ", status.message()));
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

absl::Status ErrnoError(const std::string& path, absl::string_view what, int error) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (error == ENOENT || error == ENOTDIR) code = absl::StatusCode::kNotFound;
  if (error == EACCES || error == EPERM) code = absl::StatusCode::kPermissionDenied;
  return absl::Status(code, absl::StrCat(path, ": ", what, ": ", std::strerror(error)));
}

absl::Status WriteAll(int fd, const uint8_t* data, size_t bytes, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, data, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path, "cannot write", errno);
    }
    data += n;
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Total bytes of a shape, refusing one whose non-zero dimensions multiply beyond int64_t even if
// another dimension is 0: no real file has such a shape, and row_elements() must fit whatever
// rows() is.
absl::StatusOr<int64_t> ShapeBytes(const std::vector<int64_t>& shape, size_t item_size) {
  int64_t nonzero = static_cast<int64_t>(item_size);
  bool any_zero = false;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative dimension ", d));
    }
    if (d == 0) {
      any_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, d, &nonzero)) {
      return absl::InvalidArgumentError("more than 2^63 - 1 bytes");
    }
  }
  return any_zero ? 0 : nonzero;
}

}  // namespace

size_t NpyItemSize(NpyDType dtype) { return Info(dtype).size; }
const char* NpyDTypeName(NpyDType dtype) { return Info(dtype).name; }
const char* NpyDescr(NpyDType dtype) { return Info(dtype).descr; }
bool NpyIsFloat(NpyDType dtype) { return Info(dtype).is_float; }

// ---- NpyArray -----------------------------------------------------------------------------------

NpyArray::NpyArray(NpyArray&& other) noexcept { *this = std::move(other); }

NpyArray& NpyArray::operator=(NpyArray&& other) noexcept {
  if (this == &other) return *this;
  Unmap();
  origin_ = std::move(other.origin_);
  dtype_ = other.dtype_;
  shape_ = std::move(other.shape_);
  row_elements_ = other.row_elements_;
  data_offset_ = other.data_offset_;
  data_ = other.data_;
  map_base_ = other.map_base_;
  map_bytes_ = other.map_bytes_;
  other.data_ = nullptr;
  other.map_base_ = nullptr;
  other.map_bytes_ = 0;
  return *this;
}

NpyArray::~NpyArray() { Unmap(); }

void NpyArray::Unmap() {
  if (map_base_ != nullptr) ::munmap(map_base_, map_bytes_);
  map_base_ = nullptr;
  map_bytes_ = 0;
}

std::string NpyArray::Describe() const {
  return absl::StrCat("shape ", PyShape(shape_), " ", NpyDTypeName(dtype_));
}

void NpyArray::DropPages(int64_t first_row, int64_t rows) const {
  if (!mapped() || rows <= 0 || first_row < 0 || first_row > this->rows() ||
      rows > this->rows() - first_row) {
    return;
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = static_cast<size_t>(data_offset_ + first_row * row_bytes());
  const size_t end = begin + static_cast<size_t>(rows * row_bytes());
  const size_t first_page = (begin + page - 1) / page * page;
  // The mapping's last page holds nothing after the file's end: it may go whole.
  const size_t last_page = end == map_bytes_ ? (end + page - 1) / page * page : end / page * page;
  if (last_page > first_page) {
    ::madvise(static_cast<uint8_t*>(map_base_) + first_page, last_page - first_page, MADV_DONTNEED);
  }
}

namespace {

// Everything up to the data: magic, version, header length, the dict and what it declares.
absl::Status ParseHeaderInto(absl::string_view bytes, const NpyLimits& limits, NpyHeader* out) {
  if (bytes.empty()) return absl::InvalidArgumentError("empty file (0 bytes), not a .npy file");
  const size_t magic_bytes = std::min(bytes.size(), sizeof kMagic);
  if (std::memcmp(bytes.data(), kMagic, magic_bytes) != 0) {
    const bool zip = bytes.substr(0, 4) == absl::string_view("PK\x03\x04", 4);
    return absl::InvalidArgumentError(absl::StrCat(
        "not a .npy file: it starts with ", QuoteHostileBytes(bytes, 8), ", not \"\\x93NUMPY\"",
        zip ? " (a zip archive, as np.savez writes: save each array with np.save)" : ""));
  }
  if (bytes.size() < 10) {
    return absl::InvalidArgumentError(absl::StrCat(
        "only ", bytes.size(), " bytes, too short for a .npy file (its fixed header is 10)"));
  }
  const int major = static_cast<uint8_t>(bytes[6]);
  const int minor = static_cast<uint8_t>(bytes[7]);
  if (minor != 0 || major < 1 || major > 3) {
    return absl::InvalidArgumentError(absl::StrCat("format version ", major, ".", minor,
                                                   " is not supported (1.0, 2.0 and 3.0 are)"));
  }
  size_t header_at = 10;
  uint64_t header_bytes = 0;
  if (major == 1) {
    uint16_t n;
    std::memcpy(&n, bytes.data() + 8, 2);
    header_bytes = n;
  } else {
    if (bytes.size() < 12) {
      return absl::InvalidArgumentError(
          absl::StrCat("only ", bytes.size(), " bytes, too short for a .npy file of version ",
                       major, ".0 (its fixed header is 12)"));
    }
    uint32_t n;
    std::memcpy(&n, bytes.data() + 8, 4);
    header_bytes = n;
    header_at = 12;
  }
  if (header_bytes > limits.max_header_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the header is ", header_bytes, " bytes long, above the limit of ",
                     limits.max_header_bytes, " (np.save writes under 200)"));
  }
  if (header_bytes > bytes.size() - header_at) {
    return absl::InvalidArgumentError(
        absl::StrCat("the header is ", header_bytes, " bytes long, but the file ends ",
                     bytes.size() - header_at, " bytes after its start (truncated?)"));
  }
  const absl::string_view text = bytes.substr(header_at, header_bytes);
  NpyHeaderDict header;
  NPY_RETURN_IF_ERROR(ParseNpyHeaderDict(text, major, std::max(limits.max_dims, 0), &header));

  auto dtype = DTypeFromDescr(header.descr);
  if (!dtype.ok()) return dtype.status();
  if (header.fortran_order) {
    return absl::InvalidArgumentError(
        absl::StrCat("the array is in Fortran order (shape ", PyShape(header.shape),
                     "); save with np.save(path, np.ascontiguousarray(a))"));
  }
  if (header.shape.empty()) {
    return absl::InvalidArgumentError(
        "the array is 0-d (a single value, shape ()); the data need at least one dimension, "
        "whose index is the example");
  }
  const std::string declared =
      absl::StrCat("the header declares shape ", PyShape(header.shape), " ", NpyDTypeName(*dtype));
  auto data_bytes = ShapeBytes(header.shape, NpyItemSize(*dtype));
  if (!data_bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(declared, ": ", data_bytes.status().message(), " (a corrupt header)"));
  }
  const uint64_t want = static_cast<uint64_t>(*data_bytes);
  if (want > limits.max_data_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(declared, " = ", want,
                                                     " bytes of data, above the limit of ",
                                                     limits.max_data_bytes, " bytes"));
  }
  out->dtype = *dtype;
  out->shape = std::move(header.shape);
  out->data_offset = static_cast<int64_t>(header_at + header_bytes);
  out->data_bytes = *data_bytes;
  return absl::OkStatus();
}

std::string Declared(const NpyHeader& header) {
  return absl::StrCat("the header declares shape ", PyShape(header.shape), " ",
                      NpyDTypeName(header.dtype), " = ", header.data_bytes, " bytes of data");
}

}  // namespace

absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes, const std::string& origin,
                                         const NpyLimits& limits) {
  NpyHeader header;
  absl::Status status = ParseHeaderInto(bytes, limits, &header);
  if (!status.ok()) return WithOrigin(status, origin);
  return header;
}

// Builds arrays for OpenNpy and ParseNpy, the only two ways to get one.
struct NpyArrayBuilder {
  static absl::StatusOr<NpyArray> Parse(absl::string_view bytes, const std::string& origin,
                                        const NpyLimits& limits) {
    NpyHeader header;
    absl::Status status = ParseHeaderInto(bytes, limits, &header);
    if (status.ok()) status = CheckDataSize(header, bytes.size());
    if (!status.ok()) return WithOrigin(status, origin);
    NpyArray array;
    array.origin_ = origin;
    array.dtype_ = header.dtype;
    array.shape_ = std::move(header.shape);
    int64_t row_elements = 1;
    for (size_t i = 1; i < array.shape_.size(); ++i) row_elements *= array.shape_[i];
    array.row_elements_ = row_elements;
    array.data_offset_ = header.data_offset;
    array.data_ = reinterpret_cast<const uint8_t*>(bytes.data()) + header.data_offset;
    return array;
  }

  static void Adopt(NpyArray* array, void* base, size_t bytes) {
    array->map_base_ = base;
    array->map_bytes_ = bytes;
  }

 private:
  // Both ways: a file cut short, and bytes after the data, which mean that the header does not
  // describe what follows it (a shape edited by hand, two arrays concatenated).
  static absl::Status CheckDataSize(const NpyHeader& header, size_t file_bytes) {
    const uint64_t want = static_cast<uint64_t>(header.data_bytes);
    const uint64_t have = file_bytes - static_cast<size_t>(header.data_offset);
    if (have < want) {
      return absl::DataLossError(absl::StrCat(Declared(header), ", but the file holds ", have,
                                              " bytes after the header (truncated?)"));
    }
    if (have > want) {
      return absl::DataLossError(absl::StrCat(
          Declared(header), ", but the file holds ", have, " bytes after the header: ", have - want,
          " bytes too many (the header does not describe the data)"));
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, const std::string& origin,
                                  const NpyLimits& limits) {
  return NpyArrayBuilder::Parse(bytes, origin, limits);
}

absl::StatusOr<NpyArray> OpenNpy(const std::string& path, const NpyLimits& limits) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. The type is checked
  // on the descriptor, so nothing can be swapped in between a check and the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return ErrnoError(path, "cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoError(path, "cannot stat", error);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (", FileKind(st.st_mode), "); a .npy file is"));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": empty file (0 bytes), not a .npy file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping keeps the file
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot map its ", size, " bytes: ", std::strerror(error)));
  }
  auto array =
      NpyArrayBuilder::Parse(absl::string_view(static_cast<const char*>(base), size), path, limits);
  if (!array.ok()) {
    ::munmap(base, size);
    return array.status();
  }
  NpyArrayBuilder::Adopt(&*array, base, size);
  return array;
}

// ---- Reading ------------------------------------------------------------------------------------

namespace {

template <typename T>
void ConvertToFloat(const uint8_t* src, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    out[i] = static_cast<float>(v);
  }
}

[[noreturn]] void RowsOutside(const NpyArray& array, int64_t first_row, int64_t rows,
                              const char* caller) {
  std::fprintf(stderr, "%s: rows [%lld, +%lld) outside the %lld rows of %s\n", caller,
               static_cast<long long>(first_row), static_cast<long long>(rows),
               static_cast<long long>(array.rows()), array.origin().c_str());
  std::abort();
}

absl::Status CheckLabelArray(const NpyArray& labels) {
  if (NpyIsFloat(labels.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        labels.origin(), ": class labels must be integers, but the file holds ",
        NpyDTypeName(labels.dtype()),
        " (save them with a.astype(np.int64); a regression target is read as floats)"));
  }
  if (labels.row_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels.origin(), ": class labels are one per row, shape (N,) or (N, 1), but ",
                     "the file holds ", labels.Describe()));
  }
  return absl::OkStatus();
}

int64_t LabelAt(const NpyArray& labels, int64_t row) {
  const uint8_t* p = labels.row(row);
  switch (labels.dtype()) {
    case NpyDType::kUInt8:
      return *p;
    case NpyDType::kInt8:
      return static_cast<int8_t>(*p);
    case NpyDType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case NpyDType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default:
      return 0;  // CheckLabelArray refused floats
  }
}

template <typename Bits>
bool NonFinite(Bits bits);
template <>
bool NonFinite(uint32_t bits) {
  return (bits & 0x7f800000u) == 0x7f800000u;
}
template <>
bool NonFinite(uint64_t bits) {
  return (bits & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
}

// Index of the first NaN or infinity among `n` elements with the bit width of Bits, or n.
template <typename Bits>
size_t FirstNonFinite(const uint8_t* src, size_t n) {
  constexpr size_t kBlock = 1024;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = std::min(n, start + kBlock);
    bool any = false;
    for (size_t i = start; i < end; ++i) {  // no early exit: the compiler vectorises this
      Bits bits;
      std::memcpy(&bits, src + i * sizeof(Bits), sizeof(Bits));
      any |= NonFinite(bits);
    }
    if (!any) continue;
    for (size_t i = start; i < end; ++i) {
      Bits bits;
      std::memcpy(&bits, src + i * sizeof(Bits), sizeof(Bits));
      if (NonFinite(bits)) return i;
    }
  }
  return n;
}

}  // namespace

void RowsToFloat(const NpyArray& array, int64_t first_row, int64_t rows, float* out) {
  if (first_row < 0 || rows < 0 || first_row > array.rows() || rows > array.rows() - first_row) {
    RowsOutside(array, first_row, rows, "RowsToFloat");
  }
  const uint8_t* src = array.row(first_row);
  const size_t n = static_cast<size_t>(rows * array.row_elements());
  switch (array.dtype()) {
    case NpyDType::kFloat32:
      if (n > 0) std::memcpy(out, src, n * sizeof(float));
      return;
    case NpyDType::kFloat64:
      return ConvertToFloat<double>(src, n, out);
    case NpyDType::kUInt8:
      return ConvertToFloat<uint8_t>(src, n, out);
    case NpyDType::kInt8:
      return ConvertToFloat<int8_t>(src, n, out);
    case NpyDType::kInt32:
      return ConvertToFloat<int32_t>(src, n, out);
    case NpyDType::kInt64:
      return ConvertToFloat<int64_t>(src, n, out);
  }
}

absl::Status ReadLabels(const NpyArray& labels, int num_classes, std::vector<int32_t>* out) {
  if (num_classes == 0 || num_classes < -1) {
    return absl::InvalidArgumentError(absl::StrCat(labels.origin(), ": reading labels for ",
                                                   num_classes, " classes (positive, or -1)"));
  }
  NPY_RETURN_IF_ERROR(CheckLabelArray(labels));
  const int64_t bound = num_classes > 0 ? num_classes : std::numeric_limits<int32_t>::max();
  out->resize(static_cast<size_t>(labels.rows()));
  for (int64_t row = 0; row < labels.rows(); ++row) {
    const int64_t label = LabelAt(labels, row);
    if (label < 0 || label >= bound) {
      return absl::InvalidArgumentError(absl::StrCat(
          labels.origin(), ": row ", row, " holds label ", label, ", outside [0, ", bound, ")"));
    }
    (*out)[static_cast<size_t>(row)] = static_cast<int32_t>(label);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ReadIntegerLabel(const NpyArray& labels, int64_t row) {
  NPY_RETURN_IF_ERROR(CheckLabelArray(labels));
  if (row < 0 || row >= labels.rows()) {
    return absl::OutOfRangeError(
        absl::StrCat(labels.origin(), ": row ", row, " outside the ", labels.rows(), " rows"));
  }
  return LabelAt(labels, row);
}

std::optional<int64_t> FirstNonFiniteRow(const NpyArray& array) {
  if (!NpyIsFloat(array.dtype()) || array.row_bytes() == 0) return std::nullopt;
  // A few MiB at a time, whole rows, dropping each stretch from the resident set once read.
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{16} << 20) / array.row_bytes());
  for (int64_t first = 0; first < array.rows(); first += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, array.rows() - first);
    const size_t n = static_cast<size_t>(rows * array.row_elements());
    const size_t at = array.dtype() == NpyDType::kFloat32
                          ? FirstNonFinite<uint32_t>(array.row(first), n)
                          : FirstNonFinite<uint64_t>(array.row(first), n);
    array.DropPages(first, rows);
    if (at < n) return first + static_cast<int64_t>(at) / array.row_elements();
  }
  return std::nullopt;
}

// ---- Writing ------------------------------------------------------------------------------------

absl::StatusOr<std::string> EncodeNpyHeader(NpyDType dtype, const std::vector<int64_t>& shape) {
  if (shape.empty() || shape.size() > kWriterMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a .npy array of ", shape.size(), " dimensions; 1 to ", kWriterMaxDims, " are written"));
  }
  auto bytes = ShapeBytes(shape, NpyItemSize(dtype));
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", PyShape(shape), ": ", bytes.status().message()));
  }
  // numpy sorts the keys and writes repr() of each value, ", " after each.
  std::string dict = absl::StrCat("{'descr': '", NpyDescr(dtype),
                                  "', 'fortran_order': False, 'shape': ", PyShape(shape), ", }");
  dict.append(kGrowthDigits - absl::StrCat(shape[0]).size(), ' ');
  const size_t with_newline = dict.size() + 1;
  const size_t pad = kAlign - (sizeof kMagic + 2 + 2 + with_newline) % kAlign;
  const size_t header_bytes = with_newline + pad;  // < 65536 with at most 32 dimensions
  std::string out(kMagic, sizeof kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header_bytes & 0xff));
  out.push_back(static_cast<char>(header_bytes >> 8));
  out += dict;
  out.append(pad, ' ');
  out.push_back('\n');
  return out;
}

absl::Status WriteNpy(const std::string& path, NpyDType dtype, const std::vector<int64_t>& shape,
                      const void* data) {
  auto header = EncodeNpyHeader(dtype, shape);
  if (!header.ok()) return WithOrigin(header.status(), path);
  const size_t data_bytes = static_cast<size_t>(*ShapeBytes(shape, NpyItemSize(dtype)));
  if (data == nullptr && data_bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no data for ", data_bytes, " bytes"));
  }
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) return ErrnoError(tmp, "cannot create", errno);
  }
  if (fd < 0) return ErrnoError(tmp, "cannot create", EEXIST);
  absl::Status status =
      WriteAll(fd, reinterpret_cast<const uint8_t*>(header->data()), header->size(), tmp);
  if (status.ok()) status = WriteAll(fd, static_cast<const uint8_t*>(data), data_bytes, tmp);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError(tmp, "cannot fsync", errno);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError(tmp, "cannot close", errno);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoError(path, "cannot rename into place", errno);
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

}  // namespace strata
