// NumPy .npy files (what np.save writes), for users who bring their own data as arrays. The file
// comes from outside and is read as hostile input: its header is parsed strictly by hand (a
// Python dict literal of exactly 'descr', 'fortran_order' and 'shape', never evaluated), and every
// size it declares is checked against the bytes actually present before anything is touched. A
// refusal names the file and what is wrong with it.
//
// An opened file is memory-mapped read-only, not read: opening a 10 GB file costs an mmap, and a
// process touches only the pages of the rows it reads. The array's bytes are the file's own,
// little-endian, and need not be aligned to the item size (a header of another length than
// numpy's puts the data anywhere), so readers copy elements out with memcpy, as the helpers here
// do. The mapping assumes that nobody truncates the file while it is open: the kernel answers an
// access beyond the new end with SIGBUS, and no check at open time can rule that out.
//
// The format: "\x93NUMPY", a major and a minor version byte (1.0, 2.0 and 3.0 are read), the
// header length (u16 for 1.0, u32 after), the header text padded with spaces and ending in '\n',
// then the data in C order. docs/data-and-models.md, "NumPy arrays (.npy)".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

namespace strata {

enum class NpyDType : uint8_t { kFloat32, kFloat64, kUInt8, kInt8, kInt32, kInt64 };

size_t NpyItemSize(NpyDType dtype);
// "float32", "uint8", ...: numpy's own names, for messages.
const char* NpyDTypeName(NpyDType dtype);
// The descr np.save writes for it: "<f4", "|u1", ...
const char* NpyDescr(NpyDType dtype);
bool NpyIsFloat(NpyDType dtype);

struct NpyLimits {
  // numpy's own writer needs under 200 bytes for 8 dimensions; np.load refuses headers above
  // 10000 characters unless told to trust the file.
  size_t max_header_bytes = 64 << 10;
  int max_dims = 8;
  // The data a caller is prepared to map. The default only keeps sizes within the 47 bits of a
  // process's address space; a data set sets its own cap.
  uint64_t max_data_bytes = uint64_t{1} << 47;
};

// A parsed .npy array, read-only. Owns the file's mapping (OpenNpy) or borrows bytes the caller
// keeps alive for as long as the array lives (ParseNpy). Move-only.
class NpyArray {
 public:
  NpyArray(NpyArray&& other) noexcept;
  NpyArray& operator=(NpyArray&& other) noexcept;
  NpyArray(const NpyArray&) = delete;
  NpyArray& operator=(const NpyArray&) = delete;
  ~NpyArray();

  // The path, or the origin handed to ParseNpy; every message about the array starts with it.
  const std::string& origin() const { return origin_; }
  NpyDType dtype() const { return dtype_; }
  size_t item_size() const { return NpyItemSize(dtype_); }
  // At least one dimension (a 0-d array is refused), each >= 0.
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rows() const { return shape_[0]; }
  // Elements of one row: the product of shape[1:], 1 for a 1-d array.
  int64_t row_elements() const { return row_elements_; }
  int64_t row_bytes() const { return row_elements_ * static_cast<int64_t>(item_size()); }
  int64_t elements() const { return rows() * row_elements_; }
  int64_t data_bytes() const { return rows() * row_bytes(); }
  // Where the data starts in the file: numpy's writer aligns it to 64 bytes.
  int64_t data_offset() const { return data_offset_; }
  // The first data byte; `data_bytes()` of them follow. Not necessarily aligned.
  const uint8_t* data() const { return data_; }
  const uint8_t* row(int64_t i) const { return data_ + i * row_bytes(); }
  // True when backed by the file's mapping (OpenNpy), false over borrowed bytes (ParseNpy).
  bool mapped() const { return map_base_ != nullptr; }
  // "shape (60000, 784) float32", for messages.
  std::string Describe() const;

  // Tells the kernel that these rows will not be read again soon: their pages leave this
  // process's resident set (they stay in the page cache and come back on the next access). Only
  // pages wholly inside the rows are dropped. Does nothing over borrowed bytes.
  void DropPages(int64_t first_row, int64_t rows) const;

 private:
  friend struct NpyArrayBuilder;
  NpyArray() = default;
  void Unmap();

  std::string origin_;
  NpyDType dtype_ = NpyDType::kFloat32;
  std::vector<int64_t> shape_;
  int64_t row_elements_ = 0;
  int64_t data_offset_ = 0;
  const uint8_t* data_ = nullptr;
  void* map_base_ = nullptr;  // the whole file, from offset 0
  size_t map_bytes_ = 0;
};

// What a .npy header declares.
struct NpyHeader {
  NpyDType dtype = NpyDType::kFloat32;
  std::vector<int64_t> shape;
  int64_t data_offset = 0;  // where the data start
  int64_t data_bytes = 0;   // product(shape) * item size
};

// Reads only the header: `bytes` must hold the file's first data_offset bytes and may hold more
// (the data are not looked at, so a caller can check a file's shape from its first few KiB).
// Every check of ParseNpy but the data size.
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes, const std::string& origin,
                                         const NpyLimits& limits = {});

// Opens and maps a .npy file. Anything but a regular file (a FIFO, a device such as /dev/zero, a
// directory) is refused without blocking or reading, also through a symlink; a missing file is
// NOT_FOUND; a header or data above `limits` RESOURCE_EXHAUSTED; a data size that disagrees with
// the header (cut short, or trailing bytes) DATA_LOSS; everything else INVALID_ARGUMENT.
absl::StatusOr<NpyArray> OpenNpy(const std::string& path, const NpyLimits& limits = {});

// The same checks over bytes the caller owns and keeps alive while the array lives.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, const std::string& origin,
                                  const NpyLimits& limits = {});

// Converts `rows` rows from `first_row` on to float32 into `out` (rows * row_elements() floats),
// whatever the dtype: uint8 stays 0..255 (the caller scales), float64 outside float's range
// becomes +-inf. The rows must lie inside the array: anything else is a bug of the caller, and
// aborts.
void RowsToFloat(const NpyArray& array, int64_t first_row, int64_t rows, float* out);

// Class labels: an integer dtype (int8, uint8, int32, int64) and one label per row (shape (N,) or
// (N, 1)). `num_classes` > 0 requires every label in [0, num_classes); -1 only in [0, 2^31 - 1).
// The first label out of range is reported with its row: "train_y.npy: row 17 holds label 12,
// outside [0, 10)". On an error `out` is left unspecified.
absl::Status ReadLabels(const NpyArray& labels, int num_classes, std::vector<int32_t>* out);
// One label, with the same checks of dtype and shape; OUT_OF_RANGE for a row outside the array.
absl::StatusOr<int64_t> ReadIntegerLabel(const NpyArray& labels, int64_t row);

// The first row holding a NaN or an infinity, reading the data once, front to back (pages already
// read leave the resident set as the scan moves on); nullopt for an array without any, and for
// integer dtypes.
std::optional<int64_t> FirstNonFiniteRow(const NpyArray& array);

// Everything np.save puts before the data, byte for byte as numpy 1.24 writes it: version 1.0,
// the header dict with the spare spaces numpy leaves for growing the first axis, padded so that
// the data starts at a multiple of 64 bytes, ending in '\n'. At least one dimension, at most 32
// (numpy's own limit), each >= 0, and a total size within int64_t.
absl::StatusOr<std::string> EncodeNpyHeader(NpyDType dtype, const std::vector<int64_t>& shape);

// Writes an array as np.save would (EncodeNpyHeader, then the product(shape) * item size bytes of
// `data`, which are taken as little-endian). The file is created exclusively (O_EXCL,
// O_NOFOLLOW) under a temporary name with mode 0600, synced, then renamed over `path`, so a
// reader never sees half a file and a symlink planted at the temporary name is never followed.
absl::Status WriteNpy(const std::string& path, NpyDType dtype, const std::vector<int64_t>& shape,
                      const void* data);

}  // namespace strata
