// The .npy reader and writer (services/common/wire/npy_file.h) on real files: round trips of every
// dtype and shape, every refusal with its message (bad magic and versions, headers that are not
// numpy's dict literal, unsupported, big-endian, structured and object dtypes, Fortran order, bad
// and overflowing shapes, data that disagrees with the header), special files (a FIFO, /dev/zero
// and a symlink to it, a directory), the pages a reader touches, labels, non-finite values, and
// files exchanged with numpy itself in both directions.
#include "services/common/wire/npy_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/ci.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class NpyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "strata-npy-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void WriteBytes(const std::string& name, const std::string& bytes) const {
    std::ofstream out(Path(name), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << name;
  }
  static std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  fs::path dir_;
};

// ---- Test data ----------------------------------------------------------------------------------

constexpr NpyDType kAllDTypes[] = {NpyDType::kFloat32, NpyDType::kFloat64, NpyDType::kUInt8,
                                   NpyDType::kInt8,    NpyDType::kInt32,   NpyDType::kInt64};

// Element i of a test array of each dtype, as a double; the Python script below computes the
// same values with numpy.
double Value(NpyDType dtype, int64_t i) {
  switch (dtype) {
    case NpyDType::kFloat32:
      return static_cast<double>(i % 97) * 0.25 - 3;
    case NpyDType::kFloat64:
      return static_cast<double>(i) / 7.0 - 5;
    case NpyDType::kUInt8:
      return static_cast<double>((i * 37) % 256);
    case NpyDType::kInt8:
      return static_cast<double>((i * 37) % 256 - 128);
    case NpyDType::kInt32:
      return static_cast<double>(i * 100003 - 50000);
    case NpyDType::kInt64:
      return static_cast<double>(i * ((int64_t{1} << 40) + 3) - 7);
  }
  return 0;
}

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

// The little-endian bytes of `n` elements of Value().
std::string Values(NpyDType dtype, int64_t n) {
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case NpyDType::kFloat32:
        Put(&out, static_cast<float>(Value(dtype, i)));
        break;
      case NpyDType::kFloat64:
        Put(&out, Value(dtype, i));
        break;
      case NpyDType::kUInt8:
        Put(&out, static_cast<uint8_t>((i * 37) % 256));
        break;
      case NpyDType::kInt8:
        Put(&out, static_cast<int8_t>((i * 37) % 256 - 128));
        break;
      case NpyDType::kInt32:
        Put(&out, static_cast<int32_t>(i * 100003 - 50000));
        break;
      case NpyDType::kInt64:
        Put(&out, i * ((int64_t{1} << 40) + 3) - 7);
        break;
    }
  }
  return out;
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A .npy file whose header text is `dict`, padded with spaces and a newline so that the data start
// at a multiple of 64 as np.save does (unless `pad` is false), then `data`.
std::string Crafted(const std::string& dict, const std::string& data, int major = 1,
                    bool pad = true) {
  std::string text = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  if (pad) {
    text.append((64 - (prefix + text.size() + 1) % 64) % 64, ' ');
    text += '\n';
  }
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  const uint32_t n = static_cast<uint32_t>(text.size());
  out.append(reinterpret_cast<const char*>(&n), major == 1 ? 2 : 4);
  return out + text + data;
}

std::string Dict(const std::string& descr, const std::string& shape,
                 const std::string& fortran = "False") {
  return absl::StrCat("{'descr': '", descr, "', 'fortran_order': ", fortran, ", 'shape': ", shape,
                      ", }");
}

// The resident size of the mapping that holds `address`, from /proc/self/smaps: a line
// "BEGIN-END perms ..." opens each mapping, its "Rss:" line follows.
int64_t MappedResidentKb(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const uintptr_t at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long begin = 0, end = 0;
    char space = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx%c", &begin, &end, &space) == 3 && space == ' ') {
      inside = at >= begin && at < end;
      continue;
    }
    long long kb = 0;
    if (inside && std::sscanf(line.c_str(), "Rss: %lld kB", &kb) == 1) return kb;
  }
  return -1;
}

// ---- Round trips --------------------------------------------------------------------------------

TEST_F(NpyFileTest, EveryDTypeAndShapeRoundTrips) {
  const std::vector<std::vector<int64_t>> shapes = {{5}, {3, 4}, {2, 3, 2, 2}, {0, 7}, {0}};
  for (NpyDType dtype : kAllDTypes) {
    for (const auto& shape : shapes) {
      const std::string label = absl::StrCat(NpyDTypeName(dtype), " ", shape.size(), "-d");
      const std::string path =
          Path(absl::StrCat(NpyDTypeName(dtype), "-", shape.size(), "-", shape[0], ".npy"));
      const int64_t n = Product(shape);
      const std::string data = Values(dtype, n);
      ASSERT_TRUE(WriteNpy(path, dtype, shape, data.data()).ok()) << label;

      struct stat st;
      ASSERT_EQ(::stat(path.c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0600u) << label;

      auto array = OpenNpy(path);
      ASSERT_TRUE(array.ok()) << label << ": " << array.status();
      EXPECT_TRUE(array->mapped());
      EXPECT_EQ(array->origin(), path);
      EXPECT_EQ(array->dtype(), dtype) << label;
      EXPECT_EQ(array->shape(), shape) << label;
      EXPECT_EQ(array->rows(), shape[0]);
      EXPECT_EQ(array->row_elements(),
                shape[0] == 0 ? Product({shape.begin() + 1, shape.end()}) : n / shape[0]);
      EXPECT_EQ(array->row_bytes(),
                array->row_elements() * static_cast<int64_t>(NpyItemSize(dtype)));
      EXPECT_EQ(array->data_bytes(), static_cast<int64_t>(data.size()));
      EXPECT_EQ(array->data_offset() % 64, 0) << "np.save aligns the data to 64 bytes";
      EXPECT_EQ(static_cast<int64_t>(st.st_size), array->data_offset() + array->data_bytes());
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(array->data()), data.size()), data)
          << label;

      std::vector<float> floats(static_cast<size_t>(n) + 1, -1.0f);
      RowsToFloat(*array, 0, array->rows(), floats.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(floats[i], static_cast<float>(Value(dtype, i))) << label << " element " << i;
      }
      EXPECT_EQ(floats[n], -1.0f) << "wrote past the rows asked for";
      if (array->rows() > 1) {  // a stretch in the middle
        std::vector<float> one(static_cast<size_t>(array->row_elements()));
        RowsToFloat(*array, 1, 1, one.data());
        EXPECT_EQ(one[0], static_cast<float>(Value(dtype, array->row_elements())));
      }

      // The same bytes, borrowed.
      const std::string file = ReadBytes(path);
      auto parsed = ParseNpy(file, "borrowed");
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_FALSE(parsed->mapped());
      EXPECT_EQ(parsed->shape(), shape);
      EXPECT_EQ(parsed->data(),
                reinterpret_cast<const uint8_t*>(file.data()) + parsed->data_offset());

      // Moving hands the mapping over.
      NpyArray moved = std::move(*array);
      EXPECT_TRUE(moved.mapped());
      EXPECT_EQ(moved.shape(), shape);
    }
  }
}

TEST_F(NpyFileTest, RowsToFloatMapsFloat64BeyondFloatToInfinity) {
  const double values[] = {1e300, -1e300, 0.5, std::numeric_limits<double>::quiet_NaN()};
  ASSERT_TRUE(WriteNpy(Path("big.npy"), NpyDType::kFloat64, {4}, values).ok());
  auto array = OpenNpy(Path("big.npy"));
  ASSERT_TRUE(array.ok()) << array.status();
  float out[4];
  RowsToFloat(*array, 0, 4, out);
  EXPECT_EQ(out[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[2], 0.5f);
  EXPECT_TRUE(std::isnan(out[3]));
}

// What numpy writes around the dict and what a hand-written header may differ in, all read: keys in
// another order, double quotes, no trailing commas, tabs and newlines between tokens, no final
// newline, versions 2.0 and 3.0, Python 2's long integers in 1.0, '<u1' for uint8, and data
// that do not start at an aligned offset.
TEST_F(NpyFileTest, HeadersNumpyCouldHaveWrittenAreRead) {
  const std::string data = Values(NpyDType::kFloat32, 12);
  const std::vector<std::pair<std::string, std::string>> accepted = {
      {"numpy", Crafted(Dict("<f4", "(3, 4)"), data)},
      {"order", Crafted("{'shape': (3, 4), 'fortran_order': False, 'descr': '<f4'}", data)},
      {"double quotes",
       Crafted("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3, 4)}", data)},
      {"tight", Crafted("{'descr':'<f4','fortran_order':False,'shape':(3,4,),}", data)},
      {"tabs",
       Crafted("{\t'descr' : '<f4' ,\n'fortran_order' :\tFalse , 'shape' : ( 3 , 4 ) }", data)},
      {"no newline", Crafted(Dict("<f4", "(3, 4)"), data, 1, false)},
      {"version 2.0", Crafted(Dict("<f4", "(3, 4)"), data, 2)},
      {"version 3.0", Crafted(Dict("<f4", "(3, 4)"), data, 3)},
      {"python 2 longs", Crafted(Dict("<f4", "(3L, 4L)"), data)},
      {"unaligned", Crafted(Dict("<f4", "(3, 4)") + "   ", data, 1, false)},
  };
  for (const auto& [name, bytes] : accepted) {
    auto array = ParseNpy(bytes, name);
    ASSERT_TRUE(array.ok()) << name << ": " << array.status();
    EXPECT_EQ(array->shape(), (std::vector<int64_t>{3, 4})) << name;
    float out[12];
    RowsToFloat(*array, 0, 3, out);
    EXPECT_EQ(out[11], static_cast<float>(Value(NpyDType::kFloat32, 11))) << name;
  }
  auto u1 = ParseNpy(Crafted(Dict("<u1", "(3,)"), "abc"), "u1");
  ASSERT_TRUE(u1.ok()) << u1.status();
  EXPECT_EQ(u1->dtype(), NpyDType::kUInt8);
}

TEST_F(NpyFileTest, TheHeaderAloneIsReadFromTheFilesFirstBytes) {
  const std::string data = Values(NpyDType::kInt32, 30);
  ASSERT_TRUE(WriteNpy(Path("h.npy"), NpyDType::kInt32, {5, 6}, data.data()).ok());
  const std::string file = ReadBytes(Path("h.npy"));
  auto whole = ParseNpyHeader(file, "h.npy");
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::string prefix = file.substr(0, static_cast<size_t>(whole->data_offset));
  auto header = ParseNpyHeader(prefix, "h.npy");
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->dtype, NpyDType::kInt32);
  EXPECT_EQ(header->shape, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(header->data_offset, 128);
  EXPECT_EQ(header->data_bytes, 120);
  // The data size is ParseNpy's check, not ParseNpyHeader's; a header cut short is refused.
  EXPECT_EQ(ParseNpy(prefix, "h.npy").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(ParseNpyHeader(prefix.substr(0, 100), "h.npy").status().message()),
              HasSubstr("h.npy: the header is 118 bytes long, but the file ends 90 bytes after "
                        "its start (truncated?)"));
}

// ---- Refusals -----------------------------------------------------------------------------------

struct Refusal {
  std::string name;
  std::string bytes;
  absl::StatusCode code;
  std::string message;  // after "origin: "
  NpyLimits limits = {};
};

std::string LengthField(uint32_t n, int bytes) {
  return std::string(reinterpret_cast<const char*>(&n), static_cast<size_t>(bytes));
}

std::vector<Refusal> Refusals() {
  using C = absl::StatusCode;
  const std::string f4x6 = Values(NpyDType::kFloat32, 6);
  const std::string magic("\x93NUMPY", 6);
  NpyLimits small_data;
  small_data.max_data_bytes = 100;
  return {
      {"empty", "", C::kInvalidArgument, "empty file (0 bytes), not a .npy file"},
      {"bad magic", std::string("\x93NUMPX\x01\x00", 8), C::kInvalidArgument,
       "not a .npy file: it starts with \"\\x93NUMPX\\x01\\x00\", not \"\\x93NUMPY\""},
      {"npz", std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10), C::kInvalidArgument,
       "(a zip archive, as np.savez writes: save each array with np.save)"},
      {"short", magic + "\x01", C::kInvalidArgument,
       "only 7 bytes, too short for a .npy file (its fixed header is 10)"},
      {"version 4.0", magic + std::string("\x04\x00\x10\x00", 4) + std::string(16, ' '),
       C::kInvalidArgument, "format version 4.0 is not supported (1.0, 2.0 and 3.0 are)"},
      {"version 1.1", magic + std::string("\x01\x01\x10\x00", 4) + std::string(16, ' '),
       C::kInvalidArgument, "format version 1.1 is not supported"},
      {"header beyond the file",
       magic + std::string("\x01\x00", 2) + LengthField(1000, 2) + Dict("<f4", "(2,)"),
       C::kInvalidArgument,
       "the header is 1000 bytes long, but the file ends 57 bytes after its start (truncated?)"},
      {"header above the limit",
       magic + std::string("\x02\x00", 2) + LengthField(100000, 4) + std::string(100000, ' '),
       C::kResourceExhausted,
       "the header is 100000 bytes long, above the limit of 65536 (np.save writes under 200)"},
      {"not a dict", Crafted("[('descr', '<f4')]", ""), C::kInvalidArgument,
       "header is not the dict literal np.save writes: expected '{' (the header is a Python dict "
       "literal) at byte 0 of the header, found \"[('descr', '<f4')]"},
      {"extra key",
       Crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", f4x6),
       C::kInvalidArgument,
       "header has the key 'x'; a .npy header holds exactly 'descr', 'fortran_order' and 'shape'"},
      {"missing key", Crafted("{'descr': '<f4', 'fortran_order': False}", f4x6),
       C::kInvalidArgument, "header has no 'shape' key"},
      {"duplicate key",
       Crafted("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (6,)}", f4x6),
       C::kInvalidArgument, "header has the key 'descr' twice"},
      {"an expression",
       Crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) + (3,)}", f4x6),
       C::kInvalidArgument, "expected ',' or '}' at byte 55 of the header, found \"+ (3,)}"},
      {"a call", Crafted("{'descr': '<f4', 'fortran_order': False, 'shape': __import__('os')}", ""),
       C::kInvalidArgument, "expected the shape as a tuple such as (60000, 784) at byte 50"},
      {"after the dict", Crafted(Dict("<f4", "(6,)") + " # six", f4x6), C::kInvalidArgument,
       "expected only spaces and a newline after the dict"},
      {"adjacent strings",
       Crafted("{'descr': '<' 'f4', 'fortran_order': False, 'shape': (6,)}", f4x6),
       C::kInvalidArgument, "expected ',' or '}' at byte 14"},
      {"escape", Crafted("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (6,)}", f4x6),
       C::kInvalidArgument, "holds a byte other than printable ASCII without escapes"},
      {"not ascii",
       Crafted("{'descr': '<f4\xc3\xa9', 'fortran_order': False, 'shape': (6,)}", f4x6),
       C::kInvalidArgument, "holds a byte other than printable ASCII without escapes"},
      {"unterminated", Crafted("{'descr': '<f4", "", 1, false), C::kInvalidArgument,
       "is not closed"},
      {"fortran_order 1", Crafted(Dict("<f4", "(6,)", "1"), f4x6), C::kInvalidArgument,
       "expected True or False for 'fortran_order'"},
      // dtypes
      {"complex128", Crafted(Dict("<c16", "(6,)"), std::string(96, '\0')), C::kInvalidArgument,
       "the dtype '<c16' (complex128) is not supported; use float32, float64, uint8, int8, int32 "
       "or int64"},
      {"float16", Crafted(Dict("<f2", "(6,)"), std::string(12, '\0')), C::kInvalidArgument,
       "the dtype '<f2' (float16) is not supported"},
      {"strings", Crafted(Dict("<U5", "(6,)"), std::string(120, '\0')), C::kInvalidArgument,
       "the dtype '<U5' (a Unicode string) is not supported"},
      {"unknown", Crafted(Dict("<q9", "(6,)"), ""), C::kInvalidArgument,
       "the dtype '<q9' is not supported"},
      {"big-endian", Crafted(Dict(">f4", "(6,)"), f4x6), C::kInvalidArgument,
       "the dtype '>f4' is big-endian float32; save a little-endian copy: np.save(path, "
       "a.astype('<f4'))"},
      {"no byte order", Crafted(Dict("f4", "(6,)"), f4x6), C::kInvalidArgument,
       "the dtype 'f4' states no byte order; np.save writes '<f4'"},
      {"structured",
       Crafted("{'descr': [('x', '<f4'), ('y', '<i8')], 'fortran_order': False, 'shape': (1,)}",
               std::string(12, '\0')),
       C::kInvalidArgument,
       "the dtype is structured (\"[('x', '<f4'), ('y', '<i8')], 'f...\"); only plain numeric "
       "arrays are read: save each field as its own array"},
      {"object", Crafted(Dict("|O", "(6,)"), std::string(48, '\0')), C::kInvalidArgument,
       "the dtype '|O' is an object array, whose data are pickled Python objects; those are never "
       "loaded: save a numeric array"},
      // layout and shape
      {"fortran order", Crafted(Dict("<f4", "(2, 3)", "True"), f4x6), C::kInvalidArgument,
       "the array is in Fortran order (shape (2, 3)); save with np.save(path, "
       "np.ascontiguousarray(a))"},
      {"0-d", Crafted(Dict("<f4", "()"), f4x6.substr(0, 4)), C::kInvalidArgument,
       "the array is 0-d (a single value, shape ())"},
      {"negative", Crafted(Dict("<f4", "(-3, 2)"), f4x6), C::kInvalidArgument,
       "the shape has a negative dimension (-3)"},
      {"float dimension", Crafted(Dict("<f4", "(3.0, 2)"), f4x6), C::kInvalidArgument,
       "the shape holds \"3.0\", which is not an integer"},
      {"bool dimension", Crafted(Dict("<f4", "(True, 6)"), f4x6), C::kInvalidArgument,
       "the shape holds \"True\", which is not an integer"},
      {"exponent", Crafted(Dict("<f4", "(6e0,)"), f4x6), C::kInvalidArgument,
       "the shape holds \"6e0\", which is not an integer"},
      {"leading zero", Crafted(Dict("<f4", "(06,)"), f4x6), C::kInvalidArgument,
       "the shape holds \"06\", which is not a Python integer (leading zero)"},
      {"long in 3.0", Crafted(Dict("<f4", "(6L,)"), f4x6, 3), C::kInvalidArgument,
       "the shape holds \"6L\", which is not an integer"},
      {"not a tuple", Crafted(Dict("<f4", "(6)"), f4x6), C::kInvalidArgument,
       "the shape (6) is a number, not a tuple: np.save writes (6,)"},
      {"a list", Crafted(Dict("<f4", "[2, 3]"), f4x6), C::kInvalidArgument,
       "the shape is a list; np.save writes a tuple such as (60000, 784)"},
      {"beyond int64", Crafted(Dict("<f4", "(99999999999999999999,)"), f4x6), C::kInvalidArgument,
       "the shape has a dimension of \"99999999999999999999\", beyond 2^63 - 1"},
      {"int64 max + 1", Crafted(Dict("<f4", "(9223372036854775808,)"), f4x6), C::kInvalidArgument,
       "beyond 2^63 - 1"},
      {"product overflows", Crafted(Dict("<i8", "(4611686018427387904, 4)"), f4x6),
       C::kInvalidArgument,
       "the header declares shape (4611686018427387904, 4) int64: more than 2^63 - 1 bytes (a "
       "corrupt header)"},
      {"bytes overflow", Crafted(Dict("<f8", "(1152921504606846976,)"), ""), C::kInvalidArgument,
       "more than 2^63 - 1 bytes"},
      // Zero rows would make the array empty, but a row would still hold 2^124 elements.
      {"overflow behind a zero",
       Crafted(Dict("<f4", "(0, 4611686018427387904, 4611686018427387904)"), ""),
       C::kInvalidArgument, "more than 2^63 - 1 bytes"},
      {"nine dimensions", Crafted(Dict("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 6)"), f4x6),
       C::kInvalidArgument, "the shape has more than 8 dimensions (at most 8 are read)"},
      // sizes
      {"truncated", Crafted(Dict("<f4", "(60000, 784)"), std::string(1000, '\0')), C::kDataLoss,
       "the header declares shape (60000, 784) float32 = 188160000 bytes of data, but the file "
       "holds 1000 bytes after the header (truncated?)"},
      {"trailing bytes", Crafted(Dict("<f4", "(2, 3)"), f4x6 + "extra!"), C::kDataLoss,
       "the header declares shape (2, 3) float32 = 24 bytes of data, but the file holds 30 bytes "
       "after the header: 6 bytes too many (the header does not describe the data)"},
      {"a lying header", Crafted(Dict("<f4", "(1, 3)"), f4x6), C::kDataLoss, "12 bytes too many"},
      {"above the data limit", Crafted(Dict("<f4", "(200,)"), std::string(800, '\0')),
       C::kResourceExhausted,
       "the header declares shape (200,) float32 = 800 bytes of data, above the limit of 100 bytes",
       small_data},
  };
}

// Broken on purpose once: with the `have > want` check in NpyArrayBuilder::Fill removed, the
// "trailing bytes" and "a lying header" cases parsed (as shape (2, 3) and (1, 3) with the rest
// of the file ignored) and this test failed on both.
TEST_F(NpyFileTest, EveryRefusalNamesTheFileAndWhatIsWrong) {
  for (const Refusal& r : Refusals()) {
    auto parsed = ParseNpy(r.bytes, "data/x.npy", r.limits);
    if (parsed.ok()) {
      ADD_FAILURE() << r.name << " was accepted: " << parsed->Describe();
      continue;
    }
    EXPECT_EQ(parsed.status().code(), r.code) << r.name << ": " << parsed.status();
    const std::string message(parsed.status().message());
    EXPECT_THAT(message, HasSubstr("data/x.npy: ")) << r.name;
    EXPECT_THAT(message, HasSubstr(r.message)) << r.name;
    EXPECT_EQ(message.find('\n'), std::string::npos) << r.name << ": more than one line";

    // The same from a file, through the mapping.
    const std::string path = Path("refused.npy");
    WriteBytes("refused.npy", r.bytes);
    auto opened = OpenNpy(path, r.limits);
    if (opened.ok()) {
      ADD_FAILURE() << r.name << " was accepted from a file: " << opened->Describe();
      continue;
    }
    EXPECT_EQ(opened.status().code(), r.code) << r.name << ": " << opened.status();
    EXPECT_THAT(std::string(opened.status().message()), HasSubstr(path + ": ")) << r.name;
    EXPECT_THAT(std::string(opened.status().message()), HasSubstr(r.message)) << r.name;
  }
}

TEST_F(NpyFileTest, TheExactMessageOfATruncatedFile) {
  fs::create_directories(dir_ / "data");
  WriteBytes("data/train_x.npy", Crafted(Dict("<f4", "(60000, 784)"), std::string(1000, '\0')));
  auto opened = OpenNpy(Path("data/train_x.npy"));
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().message(),
            Path("data/train_x.npy") +
                ": the header declares shape (60000, 784) float32 = 188160000 bytes of data, but "
                "the file holds 1000 bytes after the header (truncated?)");
}

TEST_F(NpyFileTest, AHeaderClaimingThreeGibibytesInA200ByteFileIsRefusedUnread) {
  std::string bytes = Crafted(Dict("<f4", "(805306368,)"), "");
  bytes.resize(200, '\x7f');
  WriteBytes("claims-3gib.npy", bytes);
  ASSERT_EQ(fs::file_size(dir_ / "claims-3gib.npy"), 200u);
  auto opened = OpenNpy(Path("claims-3gib.npy"));
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(opened.status().message()),
              HasSubstr("(805306368,) float32 = 3221225472 bytes of data, but the file holds 72 "
                        "bytes after the header (truncated?)"));
}

// ---- Files that are not regular files ----------------------------------------------------------

TEST_F(NpyFileTest, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = Path("train_x.npy");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Without O_NONBLOCK the open waits for a writer for ever: a generous bound, then unblock a
  // stuck reader so that the test fails instead of hanging.
  auto opened = std::async(std::launch::async, [&] { return OpenNpy(fifo); });
  if (opened.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "OpenNpy blocked on a FIFO";
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  const auto status = opened.get().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), fifo + ": not a regular file (a FIFO); a .npy file is");
}

TEST_F(NpyFileTest, DevicesDirectoriesAndMissingFilesAreRefused) {
  auto zero = OpenNpy("/dev/zero");
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(zero.status().message(),
            "/dev/zero: not a regular file (a character device); a .npy file is");

  fs::create_symlink("/dev/zero", dir_ / "zero.npy");
  auto linked = OpenNpy(Path("zero.npy"));
  EXPECT_EQ(linked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(linked.status().message()),
              HasSubstr("zero.npy: not a regular file (a character device)"));

  fs::create_directories(dir_ / "dir.npy");
  auto directory = OpenNpy(Path("dir.npy"));
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(directory.status().message()), HasSubstr("(a directory)"));

  auto missing = OpenNpy(Path("missing.npy"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("missing.npy: cannot open"));

  // A symlink to a regular .npy file is followed.
  const float one[1] = {1.5f};
  ASSERT_TRUE(WriteNpy(Path("real.npy"), NpyDType::kFloat32, {1}, one).ok());
  fs::create_symlink(dir_ / "real.npy", dir_ / "alias.npy");
  EXPECT_TRUE(OpenNpy(Path("alias.npy")).ok());
}

// ---- Memory mapping -----------------------------------------------------------------------------

// The 10 GiB file is sparse: it takes no disk, and the mapping makes a few pages resident for the
// two rows read (136 kB here). Broken on purpose once: with MAP_POPULATE added to OpenNpy's mmap
// (the whole file read in at open) and the file cut to 256 MiB for the experiment, 262148 kB
// were resident after the open and this test failed.
TEST_F(NpyFileTest, OpeningATenGibibyteFileTouchesOnlyTheRowsRead) {
  const int64_t row_elements = 1024;                              // 4 KiB rows
  const int64_t rows = (int64_t{10} << 30) / (row_elements * 4);  // 10 GiB of data
  auto header = EncodeNpyHeader(NpyDType::kFloat32, {rows, row_elements});
  ASSERT_TRUE(header.ok()) << header.status();
  const std::string path = Path("huge.npy");
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, header->data(), header->size()), static_cast<ssize_t>(header->size()));
    // Row 123456 holds 7.0 in its first element; everything else is a hole (zeros).
    const float seven = 7.0f;
    const off_t at = static_cast<off_t>(header->size()) + 123456 * row_elements * 4;
    ASSERT_EQ(::pwrite(fd, &seven, 4, at), 4);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(header->size()) + rows * row_elements * 4), 0)
        << "the file system cannot hold a sparse 10 GiB file: " << std::strerror(errno);
    ::close(fd);
  }
  auto array = OpenNpy(path);
  ASSERT_TRUE(array.ok()) << array.status();
  ASSERT_TRUE(array->mapped());
  EXPECT_EQ(array->data_bytes(), int64_t{10} << 30);
  std::vector<float> row(static_cast<size_t>(row_elements), -1.0f);
  RowsToFloat(*array, 123456, 1, row.data());
  EXPECT_EQ(row[0], 7.0f);
  EXPECT_EQ(row[1], 0.0f);
  RowsToFloat(*array, rows - 1, 1, row.data());
  EXPECT_EQ(row[0], 0.0f);
  const int64_t resident_kb = MappedResidentKb(array->data());
  ASSERT_GE(resident_kb, 0) << "the mapping is not in /proc/self/smaps";
  // The kernel maps a little around each fault (fault-around, large folios): a few MiB at most,
  // against 10 GiB.
  EXPECT_LT(resident_kb, 64 * 1024) << "resident kB of the mapping";
  std::printf("10 GiB .npy, two rows read: %lld kB of the mapping resident\n",
              static_cast<long long>(resident_kb));
}

// ---- Labels -------------------------------------------------------------------------------------

TEST_F(NpyFileTest, LabelsAreCheckedForDTypeShapeAndRange) {
  std::vector<int64_t> labels(40);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
  ASSERT_TRUE(WriteNpy(Path("train_y.npy"), NpyDType::kInt64, {40}, labels.data()).ok());
  auto good = OpenNpy(Path("train_y.npy"));
  ASSERT_TRUE(good.ok()) << good.status();
  std::vector<int32_t> out;
  ASSERT_TRUE(ReadLabels(*good, 10, &out).ok());
  ASSERT_EQ(out.size(), 40u);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], static_cast<int32_t>(i % 10));
  EXPECT_EQ(*ReadIntegerLabel(*good, 13), 3);
  EXPECT_EQ(ReadIntegerLabel(*good, 40).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ReadIntegerLabel(*good, -1).status().code(), absl::StatusCode::kOutOfRange);
  // Too few classes for these labels.
  auto few = ReadLabels(*good, 9, &out);
  EXPECT_EQ(few.message(), Path("train_y.npy") + ": row 9 holds label 9, outside [0, 9)");

  labels[17] = 12;
  ASSERT_TRUE(WriteNpy(Path("bad_y.npy"), NpyDType::kInt64, {40}, labels.data()).ok());
  auto bad = OpenNpy(Path("bad_y.npy"));
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(ReadLabels(*bad, 10, &out).message(),
            Path("bad_y.npy") + ": row 17 holds label 12, outside [0, 10)");
  EXPECT_TRUE(ReadLabels(*bad, -1, &out).ok()) << "-1: any label in [0, 2^31 - 1)";
  EXPECT_EQ(out[17], 12);

  const int32_t negative[3] = {0, -1, 2};
  ASSERT_TRUE(WriteNpy(Path("neg_y.npy"), NpyDType::kInt32, {3, 1}, negative).ok());
  auto neg = OpenNpy(Path("neg_y.npy"));
  ASSERT_TRUE(neg.ok());
  EXPECT_THAT(std::string(ReadLabels(*neg, -1, &out).message()),
              HasSubstr("row 1 holds label -1, outside [0, 2147483647)"));

  const int64_t wide[2] = {int64_t{1} << 40, 0};
  ASSERT_TRUE(WriteNpy(Path("wide_y.npy"), NpyDType::kInt64, {2}, wide).ok());
  auto w = OpenNpy(Path("wide_y.npy"));
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(std::string(ReadLabels(*w, -1, &out).message()),
              HasSubstr("row 0 holds label 1099511627776, outside [0, 2147483647)"));

  const int8_t small[4] = {3, 0, -2, 1};
  ASSERT_TRUE(WriteNpy(Path("i8_y.npy"), NpyDType::kInt8, {4}, small).ok());
  auto i8 = OpenNpy(Path("i8_y.npy"));
  ASSERT_TRUE(i8.ok());
  EXPECT_THAT(std::string(ReadLabels(*i8, 4, &out).message()),
              HasSubstr("row 2 holds label -2, outside [0, 4)"));
  const uint8_t bytes[4] = {3, 0, 255, 1};
  ASSERT_TRUE(WriteNpy(Path("u8_y.npy"), NpyDType::kUInt8, {4}, bytes).ok());
  auto u8 = OpenNpy(Path("u8_y.npy"));
  ASSERT_TRUE(u8.ok());
  ASSERT_TRUE(ReadLabels(*u8, 256, &out).ok());
  EXPECT_EQ(out[2], 255);

  const float floats[3] = {0, 1, 2};
  ASSERT_TRUE(WriteNpy(Path("f_y.npy"), NpyDType::kFloat32, {3}, floats).ok());
  auto f = OpenNpy(Path("f_y.npy"));
  ASSERT_TRUE(f.ok());
  EXPECT_THAT(std::string(ReadLabels(*f, 10, &out).message()),
              HasSubstr("f_y.npy: class labels must be integers, but the file holds float32"));
  EXPECT_FALSE(ReadIntegerLabel(*f, 0).ok());

  const int64_t two_columns[4] = {0, 1, 2, 3};
  ASSERT_TRUE(WriteNpy(Path("k_y.npy"), NpyDType::kInt64, {2, 2}, two_columns).ok());
  auto k = OpenNpy(Path("k_y.npy"));
  ASSERT_TRUE(k.ok());
  EXPECT_THAT(std::string(ReadLabels(*k, 10, &out).message()),
              HasSubstr("class labels are one per row, shape (N,) or (N, 1), but the file holds "
                        "shape (2, 2) int64"));
  EXPECT_EQ(ReadLabels(*good, 0, &out).code(), absl::StatusCode::kInvalidArgument);
}

// ---- Non-finite values --------------------------------------------------------------------------

TEST_F(NpyFileTest, FirstNonFiniteRowFindsNaNAndInfinity) {
  std::vector<float> f(500, 1.0f);
  auto first = [&](NpyDType dtype, const void* data, std::vector<int64_t> shape) {
    const std::string path = Path("nf.npy");
    EXPECT_TRUE(WriteNpy(path, dtype, shape, data).ok());
    auto array = OpenNpy(path);
    EXPECT_TRUE(array.ok()) << array.status();
    return FirstNonFiniteRow(*array);
  };
  EXPECT_EQ(first(NpyDType::kFloat32, f.data(), {100, 5}), std::nullopt);
  f[37 * 5 + 4] = std::numeric_limits<float>::quiet_NaN();
  f[90 * 5] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(first(NpyDType::kFloat32, f.data(), {100, 5}), 37);
  EXPECT_EQ(first(NpyDType::kFloat32, f.data(), {500}), 37 * 5 + 4);
  f[37 * 5 + 4] = std::numeric_limits<float>::max();  // large, but finite
  EXPECT_EQ(first(NpyDType::kFloat32, f.data(), {100, 5}), 90);

  std::vector<double> d(3000, -2.0);
  EXPECT_EQ(first(NpyDType::kFloat64, d.data(), {1000, 3}), std::nullopt);
  d[2999] = -std::numeric_limits<double>::infinity();
  EXPECT_EQ(first(NpyDType::kFloat64, d.data(), {1000, 3}), 999);
  d[4] = std::numeric_limits<double>::signaling_NaN();
  EXPECT_EQ(first(NpyDType::kFloat64, d.data(), {1000, 3}), 1);

  const int64_t ints[2] = {-1, 1};
  EXPECT_EQ(first(NpyDType::kInt64, ints, {2}), std::nullopt);
  EXPECT_EQ(first(NpyDType::kFloat32, nullptr, {0, 5}), std::nullopt);
}

// Broken on purpose once: without DropPages in FirstNonFiniteRow, the whole 64 MiB stayed resident
// after the scan (65540 kB) and this test failed.
TEST_F(NpyFileTest, ScanningForNonFiniteValuesLeavesLittleResident) {
  const int64_t rows = 16384, row_elements = 1024;  // 64 MiB of float32
  std::vector<float> data(static_cast<size_t>(rows * row_elements), 0.5f);
  ASSERT_TRUE(
      WriteNpy(Path("scan.npy"), NpyDType::kFloat32, {rows, row_elements}, data.data()).ok());
  data = {};
  auto array = OpenNpy(Path("scan.npy"));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(FirstNonFiniteRow(*array), std::nullopt);
  const int64_t resident_kb = MappedResidentKb(array->data());
  ASSERT_GE(resident_kb, 0);
  EXPECT_LT(resident_kb, 16 * 1024) << "resident kB of a 64 MiB mapping after the scan";
}

// ---- The writer ---------------------------------------------------------------------------------

TEST_F(NpyFileTest, WriteNpyReplacesASymlinkInsteadOfWritingThroughIt) {
  WriteBytes("victim", "precious");
  fs::create_symlink(dir_ / "victim", dir_ / "out.npy");
  const int32_t v[2] = {1, 2};
  ASSERT_TRUE(WriteNpy(Path("out.npy"), NpyDType::kInt32, {2}, v).ok());
  EXPECT_EQ(ReadBytes(Path("victim")), "precious");
  EXPECT_FALSE(fs::is_symlink(dir_ / "out.npy"));
  EXPECT_TRUE(OpenNpy(Path("out.npy")).ok());
  // Nothing else is left in the directory (no temporary file).
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 2);
}

TEST_F(NpyFileTest, WriteNpyRefusesShapesItCannotWrite) {
  const float v[1] = {0};
  EXPECT_THAT(std::string(WriteNpy(Path("a.npy"), NpyDType::kFloat32, {}, v).message()),
              HasSubstr("a .npy array of 0 dimensions"));
  EXPECT_THAT(std::string(WriteNpy(Path("a.npy"), NpyDType::kFloat32, {-1}, v).message()),
              HasSubstr("negative dimension -1"));
  EXPECT_THAT(
      std::string(WriteNpy(Path("a.npy"), NpyDType::kFloat64, {int64_t{1} << 62, 4}, v).message()),
      HasSubstr("more than 2^63 - 1 bytes"));
  EXPECT_FALSE(WriteNpy(Path("a.npy"), NpyDType::kFloat32, {1}, nullptr).ok());
  EXPECT_FALSE(fs::exists(dir_ / "a.npy"));
  EXPECT_EQ(WriteNpy(Path("no/such/dir/a.npy"), NpyDType::kFloat32, {1}, v).code(),
            absl::StatusCode::kNotFound);
}

// ---- numpy itself -------------------------------------------------------------------------------

// Writes (`write DIR`) or checks (`check DIR`) the files of the cases below with numpy: the values
// are those of Value() above.
constexpr char kNumpyScript[] = R"PY(
import io, sys
import numpy as np
mode, d = sys.argv[1], sys.argv[2]
CASES = [("f32", np.float32, (3, 4)), ("f64", np.float64, (2, 3, 4, 5)),
         ("u8", np.uint8, (16, 16)), ("i8", np.int8, (200,)), ("i32", np.int32, (5, 6)),
         ("i64", np.int64, (7, 1)), ("empty", np.float32, (0, 3))]
def values(dtype, shape):
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    if dtype == np.float32: v = (i % 97) * 0.25 - 3
    elif dtype == np.float64: v = i / 7.0 - 5
    elif dtype == np.uint8: v = (i * 37) % 256
    elif dtype == np.int8: v = (i * 37) % 256 - 128
    elif dtype == np.int32: v = i * 100003 - 50000
    else: v = i * (2**40 + 3) - 7
    return v.astype(dtype).reshape(shape)
if mode == "write":
    for name, dtype, shape in CASES:
        np.save(f"{d}/{name}.npy", values(dtype, shape))
    np.save(f"{d}/fortran.npy", np.asfortranarray(values(np.float32, (3, 4))))
    np.save(f"{d}/bigendian.npy", values(np.float32, (3, 4)).astype(">f4"))
    for v in (2, 3):
        with open(f"{d}/v{v}.npy", "wb") as f:
            np.lib.format.write_array(f, values(np.float64, (2, 3)), version=(v, 0))
else:
    for name, dtype, shape in CASES:
        a = np.load(f"{d}/{name}.npy")
        assert a.dtype == dtype and a.shape == shape, (name, a.dtype, a.shape)
        assert np.array_equal(a, values(dtype, shape)), name + ": values differ"
        b = io.BytesIO()
        np.save(b, values(dtype, shape))
        with open(f"{d}/{name}.npy", "rb") as f:
            assert f.read() == b.getvalue(), name + ": bytes differ from np.save's"
        print("numpy read", name)
print("numpy", np.__version__, mode, "done")
)PY";

struct NumpyCase {
  std::string name;
  NpyDType dtype;
  std::vector<int64_t> shape;
};

const std::vector<NumpyCase>& NumpyCases() {
  static const std::vector<NumpyCase> cases = {
      {"f32", NpyDType::kFloat32, {3, 4}},  {"f64", NpyDType::kFloat64, {2, 3, 4, 5}},
      {"u8", NpyDType::kUInt8, {16, 16}},   {"i8", NpyDType::kInt8, {200}},
      {"i32", NpyDType::kInt32, {5, 6}},    {"i64", NpyDType::kInt64, {7, 1}},
      {"empty", NpyDType::kFloat32, {0, 3}}};
  return cases;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

CommandResult RunShell(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Why numpy cannot be run here, or "" when it can.
std::string NumpyUnavailable() {
  if (::access("/usr/bin/python3", X_OK) != 0) {
    return "no /usr/bin/python3 (scripts/install-deps.sh installs python3-numpy)";
  }
  const CommandResult r = RunShell("/usr/bin/python3 -c 'import numpy'");
  if (r.exit_code != 0) {
    return "/usr/bin/python3 has no numpy (scripts/install-deps.sh installs python3-numpy)";
  }
  return "";
}

// Under CI=true a missing numpy fails the test; elsewhere it skips with the reason.
#define REQUIRE_NUMPY()                                                         \
  do {                                                                          \
    const std::string unavailable = NumpyUnavailable();                         \
    if (!unavailable.empty()) {                                                 \
      STRATA_UNAVAILABLE(unavailable);                                          \
    }                                                                           \
  } while (0)

TEST_F(NpyFileTest, FilesNumpyWroteAreReadWithTheirValues) {
  REQUIRE_NUMPY();
  std::ofstream(Path("npy.py")) << kNumpyScript;
  const CommandResult wrote =
      RunShell("/usr/bin/python3 " + Path("npy.py") + " write " + dir_.string());
  ASSERT_EQ(wrote.exit_code, 0) << wrote.output;

  for (const NumpyCase& c : NumpyCases()) {
    auto array = OpenNpy(Path(c.name + ".npy"));
    ASSERT_TRUE(array.ok()) << c.name << ": " << array.status();
    EXPECT_EQ(array->dtype(), c.dtype) << c.name;
    EXPECT_EQ(array->shape(), c.shape) << c.name;
    const int64_t n = Product(c.shape);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(array->data()),
                          static_cast<size_t>(array->data_bytes())),
              Values(c.dtype, n))
        << c.name;
    std::vector<float> floats(static_cast<size_t>(n));
    RowsToFloat(*array, 0, array->rows(), floats.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(floats[i], static_cast<float>(Value(c.dtype, i))) << c.name << " element " << i;
    }
  }
  for (const char* version : {"v2", "v3"}) {
    auto array = OpenNpy(Path(absl::StrCat(version, ".npy")));
    ASSERT_TRUE(array.ok()) << version << ": " << array.status();
    EXPECT_EQ(array->shape(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(array->data()), 48),
              Values(NpyDType::kFloat64, 6));
  }
  auto fortran = OpenNpy(Path("fortran.npy"));
  EXPECT_THAT(std::string(fortran.status().message()),
              HasSubstr("the array is in Fortran order (shape (3, 4)); save with np.save(path, "
                        "np.ascontiguousarray(a))"));
  auto big = OpenNpy(Path("bigendian.npy"));
  EXPECT_THAT(std::string(big.status().message()),
              HasSubstr("the dtype '>f4' is big-endian float32"));
}

TEST_F(NpyFileTest, NumpyReadsWhatWriteNpyWroteByteForByte) {
  REQUIRE_NUMPY();
  for (const NumpyCase& c : NumpyCases()) {
    const std::string data = Values(c.dtype, Product(c.shape));
    ASSERT_TRUE(WriteNpy(Path(c.name + ".npy"), c.dtype, c.shape, data.data()).ok()) << c.name;
  }
  std::ofstream(Path("npy.py")) << kNumpyScript;
  const CommandResult checked =
      RunShell("/usr/bin/python3 " + Path("npy.py") + " check " + dir_.string());
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  for (const NumpyCase& c : NumpyCases()) {
    EXPECT_THAT(checked.output, HasSubstr("numpy read " + c.name + "\n"));
  }
}

}  // namespace
}  // namespace strata
