#include "services/common/ml/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <zlib.h>

#include "services/common/base/status.h"
#include "services/common/config/job_keys.h"

namespace strata {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kCifarPixels = 3 * 32 * 32;

// Deflate emits at most 1032 bytes of output per byte of input (its maximum ratio), so a file of
// N bytes holds at most 1032 N bytes of data, gzipped or not: what a header declares is checked
// against that before anything is allocated for it.
constexpr uint64_t kMaxInflateRatio = 1032;
// No data file of a supported set comes near this (CIFAR-100's train.bin is 150 MiB).
constexpr uint64_t kMaxDataFileBytes = uint64_t{4} << 30;
// Data arrives in pieces of this size: memory grows with what the file actually holds, not with
// what its header claims.
constexpr size_t kReadPiece = size_t{16} << 20;

// A data file opened for reading: a regular file (not a device such as /dev/zero, which reads
// for ever, nor a FIFO, which blocks the reader for ever), gzipped or plain.
struct GzFile {
  gzFile file = nullptr;
  uint64_t file_bytes = 0;  // on disk
  ~GzFile() {
    if (file != nullptr) gzclose(file);
  }
  // The most data bytes that can follow what was read so far (after the first read, zlib knows
  // whether the file is plain or gzipped).
  uint64_t MaxContent(uint64_t consumed) const {
    const uint64_t bound =
        gzdirect(file) ? file_bytes : std::min(file_bytes * kMaxInflateRatio, kMaxDataFileBytes);
    return bound > consumed ? bound - consumed : 0;
  }
};

absl::Status OpenDataFile(const std::string& path, GzFile* out) {
  // stat before open: opening some devices has effects, and a FIFO blocks open itself.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  // O_NONBLOCK and the fstat close the race with a FIFO or device swapped in after the stat.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  out->file = gzdopen(fd, "rb");
  if (out->file == nullptr) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot open ", path, ": out of memory"));
  }
  out->file_bytes = static_cast<uint64_t>(st.st_size);
  return absl::OkStatus();
}

// Reads exactly n bytes or fails, naming the file and how much was missing.
absl::Status ReadExactly(gzFile file, void* out, size_t n, const std::string& path,
                         absl::string_view what) {
  auto* p = static_cast<char*>(out);
  size_t got = 0;
  while (got < n) {
    const unsigned piece = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    int r = gzread(file, p + got, piece);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(file, &err);
      return absl::DataLossError(absl::StrCat(path, ": corrupt while reading ", what, ": ", msg));
    }
    if (r == 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": truncated: ", what, " needs ", n, " bytes, file ends after ", got));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FindFile(const std::string& dir, const std::string& name) {
  for (const std::string& candidate : {name + ".gz", name}) {
    fs::path p = fs::path(dir) / candidate;
    if (fs::exists(p)) return p.string();
  }
  return absl::NotFoundError(
      absl::StrCat("missing data file ", (fs::path(dir) / name).string(), "[.gz]"));
}

void ToUnitFloats(const std::vector<uint8_t>& bytes, std::vector<float>* out) {
  out->resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) (*out)[i] = bytes[i] * (1.0f / 255.0f);
}

absl::Status ReadIdxSplit(const std::string& images_path, const std::string& labels_path,
                          size_t limit, DatasetSplit* split, int64_t* height, int64_t* width) {
  auto images = ReadIdxFile(images_path);
  if (!images.ok()) return images.status();
  auto labels = ReadIdxFile(labels_path);
  if (!labels.ok()) return labels.status();
  if (images->dims.size() != 3) {
    return absl::DataLossError(
        absl::StrCat(images_path, ": expected 3 dimensions, found ", images->dims.size()));
  }
  if (labels->dims.size() != 1 || labels->dims[0] != images->dims[0]) {
    return absl::DataLossError(absl::StrCat(labels_path, ": ",
                                            labels->dims.empty() ? 0 : labels->dims[0],
                                            " labels for ", images->dims[0], " images"));
  }
  *height = images->dims[1];
  *width = images->dims[2];
  size_t n = static_cast<size_t>(images->dims[0]);
  if (limit > 0 && limit < n) n = limit;
  const size_t per = static_cast<size_t>(*height * *width);
  images->data.resize(n * per);
  ToUnitFloats(images->data, &split->features);
  split->labels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (labels->data[i] > 9) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", int{labels->data[i]},
                                              " at index ", i, " is outside 0..9"));
    }
    split->labels[i] = labels->data[i];
  }
  return absl::OkStatus();
}

std::string CifarDir(const std::string& path, const std::string& sub) {
  if (fs::exists(fs::path(path) / sub)) return (fs::path(path) / sub).string();
  return path;
}

std::vector<std::string> Cifar10TrainNames() {
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back(absl::StrCat("data_batch_", i, ".bin"));
  return names;
}

void Truncate(DatasetSplit* split, size_t limit, size_t per) {
  if (limit == 0 || limit >= split->size()) return;
  split->labels.resize(limit);
  if (!split->features.empty()) split->features.resize(limit * per);
  if (!split->targets.empty()) split->targets.resize(limit * (split->targets.size() / split->size()));
  if (!split->hidden_clusters.empty()) split->hidden_clusters.resize(limit);
}

// ---- your own data: .npy files ---------------------------------------------------------------

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::StatusOr<std::shared_ptr<const NpyArray>> OpenMapped(const std::string& path) {
  auto array = OpenNpy(path);
  if (!array.ok()) return array.status();
  return std::make_shared<const NpyArray>(*std::move(array));
}

// One split: x's rows are the examples, y's their class labels (an integer dtype, one per row)
// or their targets (float32 or float64, any trailing shape).
absl::Status ReadNpySplit(const std::string& x_path, const std::string& y_path, size_t limit,
                          bool scan_features, DatasetSplit* split,
                          std::vector<int64_t>* example_shape,
                          std::vector<int64_t>* target_shape) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const NpyArray> x, OpenMapped(x_path));
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const NpyArray> y, OpenMapped(y_path));
  const NpyDType xt = x->dtype();
  if (xt != NpyDType::kFloat32 && xt != NpyDType::kFloat64 && xt != NpyDType::kUInt8 &&
      xt != NpyDType::kInt64) {
    return absl::InvalidArgumentError(absl::StrCat(
        x_path, ": features of dtype ", NpyDTypeName(xt),
        " are not read; use float32, float64, uint8 (scaled to [0, 1]) or int64"));
  }
  if (x->rows() != y->rows()) {
    return absl::InvalidArgumentError(absl::StrCat(
        y_path, ": ", y->rows(), " rows, but ", fs::path(x_path).filename().string(), " has ",
        x->rows(), ": one target (or label) per example"));
  }
  if (x->rows() == 0) return absl::InvalidArgumentError(absl::StrCat(x_path, ": no examples"));
  const std::vector<int64_t> shape(x->shape().begin() + 1, x->shape().end());
  if (!example_shape->empty() && *example_shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        x_path, ": examples of shape ", ShapeText(shape), ", the training examples are ",
        ShapeText(*example_shape)));
  }
  *example_shape = shape;
  size_t n = static_cast<size_t>(x->rows());
  if (limit > 0 && limit < n) n = limit;
  if (scan_features) {
    if (std::optional<int64_t> row = FirstNonFiniteRow(*x); row && *row < static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(x_path, ": row ", *row, " holds NaN or infinity"));
    }
  }
  const bool labels = !NpyIsFloat(y->dtype());
  if (labels) {
    if (!target_shape->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          y_path, ": class labels (", NpyDTypeName(y->dtype()),
          "), but the training targets are floats"));
    }
    const bool one_per_row =
        y->shape().size() == 1 || (y->shape().size() == 2 && y->shape()[1] == 1);
    if (!one_per_row) {
      return absl::InvalidArgumentError(absl::StrCat(
          y_path, ": labels of shape ", ShapeText(y->shape()),
          ": class labels are one integer per example (shape (N,)); for several labels per "
          "example save 0/1 targets as float32 and use training.loss bce_with_logits"));
    }
    STRATA_RETURN_IF_ERROR(ReadLabels(*y, -1, &split->labels));
    split->labels.resize(n);
  } else {
    const std::vector<int64_t> tshape(y->shape().begin() + 1, y->shape().end());
    if (!target_shape->empty() && *target_shape != std::vector<int64_t>(tshape.empty() ? std::vector<int64_t>{1} : tshape)) {
      return absl::InvalidArgumentError(absl::StrCat(y_path, ": targets of shape ",
                                                     ShapeText(tshape), ", the training targets are ",
                                                     ShapeText(*target_shape)));
    }
    if (tshape.empty()) {
      *target_shape = {1};
    } else {
      *target_shape = tshape;
    }
    if (std::optional<int64_t> row = FirstNonFiniteRow(*y)) {
      return absl::InvalidArgumentError(
          absl::StrCat(y_path, ": row ", *row, " holds NaN or infinity"));
    }
    const int64_t per = y->row_elements();
    split->targets.resize(n * static_cast<size_t>(per));
    RowsToFloat(*y, 0, static_cast<int64_t>(n), split->targets.data());
    split->labels.assign(n, 0);
  }
  split->mapped_features = std::move(x);
  split->mapped_scale = xt == NpyDType::kUInt8 ? 1.0f / 255.0f : 1.0f;
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadNpyDataset(const std::vector<std::string>& files,
                                       const DatasetOptions& options) {
  Dataset d;
  d.name = Spelled(options.name);
  STRATA_RETURN_IF_ERROR(ReadNpySplit(files[0], files[1], options.max_train,
                                      options.scan_features, &d.train, &d.example_shape,
                                      &d.target_shape));
  if (files.size() == 4) {
    const bool labels = d.target_shape.empty();
    STRATA_RETURN_IF_ERROR(ReadNpySplit(files[2], files[3], options.max_test,
                                        options.scan_features, &d.test, &d.example_shape,
                                        &d.target_shape));
    if (labels != d.target_shape.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          files[3], ": targets of another kind than ", fs::path(files[1]).filename().string(),
          "'s (class labels in one, floats in the other)"));
    }
  }
  // What a built-in model takes: images as they are, vectors as 1 x 1 x D.
  const std::vector<int64_t>& e = d.example_shape;
  if (e.size() == 3) {
    d.channels = e[0], d.height = e[1], d.width = e[2];
  } else {
    d.channels = 1;
    d.height = e.size() == 2 ? e[0] : 1;
    d.width = e.empty() ? 1 : e.back();
  }
  if (d.class_labels()) {
    int32_t top = 0;
    for (const DatasetSplit* s : {&d.train, &d.test}) {
      for (int32_t l : s->labels) top = std::max(top, l);
    }
    d.num_classes = std::max(2, top + 1);
  } else {
    d.num_classes = static_cast<int>(d.target_floats());
  }
  return d;
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  GzFile f;
  if (absl::Status opened = OpenDataFile(path, &f); !opened.ok()) return opened;
  unsigned char magic[4];
  absl::Status status = ReadExactly(f.file, magic, 4, path, "the IDX header");
  if (!status.ok()) return status;
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08) {
    return absl::DataLossError(absl::StrCat(path, ": not an IDX file of unsigned bytes (magic ",
                                            int{magic[0]}, ",", int{magic[1]}, ",", int{magic[2]},
                                            ")"));
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4) {
    return absl::DataLossError(absl::StrCat(path, ": implausible IDX rank ", ndims));
  }
  IdxArray array;
  size_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    unsigned char b[4];
    status = ReadExactly(f.file, b, 4, path, "the IDX dimensions");
    if (!status.ok()) return status;
    const int64_t d = (int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    if (d <= 0 || d > (1 << 28)) {
      return absl::DataLossError(absl::StrCat(path, ": implausible dimension ", d));
    }
    array.dims.push_back(d);
    total *= static_cast<size_t>(d);
  }
  if (total > (size_t{1} << 32)) return absl::DataLossError(absl::StrCat(path, ": too large"));
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(ndims);
  const uint64_t room = f.MaxContent(gzdirect(f.file) ? header : 0);
  if (total > room) {
    return absl::DataLossError(absl::StrCat(path, ": the header declares ", total,
                                            " bytes of data, but a file of ", f.file_bytes,
                                            " bytes holds at most ", room));
  }
  while (array.data.size() < total) {
    const size_t at = array.data.size();
    const size_t piece = std::min(total - at, kReadPiece);
    array.data.resize(at + piece);
    status = ReadExactly(f.file, array.data.data() + at, piece, path, "the IDX data");
    if (!status.ok()) return status;
  }
  return array;
}

absl::Status ReadCifarFile(const std::string& path, int label_bytes, int label_index,
                           int num_classes, DatasetSplit* out) {
  GzFile f;
  if (absl::Status opened = OpenDataFile(path, &f); !opened.ok()) return opened;
  const size_t record = static_cast<size_t>(label_bytes + kCifarPixels);
  std::vector<uint8_t> bytes;
  // Read the whole file, never more than a file of its size can hold; the size must be a whole
  // number of records.
  std::vector<uint8_t> buffer(1 << 20);
  for (;;) {
    int r = gzread(f.file, buffer.data(), static_cast<unsigned>(buffer.size()));
    if (r < 0) return absl::DataLossError(absl::StrCat(path, ": corrupt"));
    if (r == 0) break;
    if (static_cast<uint64_t>(r) > f.MaxContent(bytes.size())) {
      return absl::DataLossError(absl::StrCat(path, ": more data than a file of ", f.file_bytes,
                                              " bytes can hold (is it growing?)"));
    }
    bytes.insert(bytes.end(), buffer.begin(), buffer.begin() + r);
  }
  if (bytes.empty() || bytes.size() % record != 0) {
    return absl::DataLossError(absl::StrCat(path, ": ", bytes.size(),
                                            " bytes is not a whole number of ", record,
                                            "-byte CIFAR records (truncated?)"));
  }
  const size_t n = bytes.size() / record;
  const size_t base = out->labels.size();
  out->labels.resize(base + n);
  out->features.resize((base + n) * kCifarPixels);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* r = bytes.data() + i * record;
    const int label = r[label_index];
    if (label >= num_classes) {
      return absl::DataLossError(
          absl::StrCat(path, ": record ", i, " has label ", label, ", expected < ", num_classes));
    }
    out->labels[base + i] = label;
    float* dst = out->features.data() + (base + i) * kCifarPixels;
    for (int64_t k = 0; k < kCifarPixels; ++k) dst[k] = r[label_bytes + k] * (1.0f / 255.0f);
  }
  return absl::OkStatus();
}

Dataset MakeRandomImageDataset(int64_t examples, int64_t channels, int64_t height, int64_t width,
                               int classes, uint64_t seed) {
  Dataset d;
  d.name = "random";
  d.channels = channels;
  d.height = height;
  d.width = width;
  d.num_classes = classes;
  d.mean.assign(static_cast<size_t>(channels), 0.0f);
  d.stddev.assign(static_cast<size_t>(channels), 1.0f);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  d.train.features.resize(static_cast<size_t>(examples) * d.example_floats());
  for (float& f : d.train.features) f = normal(rng);
  for (int64_t i = 0; i < examples; ++i)
    d.train.labels.push_back(static_cast<int32_t>(i % classes));
  d.test = d.train;
  return d;
}

Dataset MakeSyntheticDataset(const DatasetOptions& options) {
  Dataset d;
  d.name = "synthetic";
  d.channels = 1;
  d.height = 1;
  d.width = options.synthetic_dim;
  d.num_classes = options.synthetic_classes;
  d.mean = {0.0f};
  d.stddev = {1.0f};
  const int clusters = options.synthetic_classes * options.synthetic_subclusters;
  std::mt19937_64 rng(options.seed);
  // Sub-cluster centres far apart relative to the unit noise, so that the hidden structure is
  // there to be found; the coarse label is centre / subclusters.
  std::normal_distribution<float> centre(0.0f, 4.0f), noise(0.0f, 1.0f);
  std::vector<float> centres(static_cast<size_t>(clusters) * d.width);
  for (float& c : centres) c = centre(rng);
  auto fill = [&](size_t n, DatasetSplit* split) {
    split->features.resize(n * d.width);
    split->labels.resize(n);
    split->hidden_clusters.resize(n);
    // Unequal cluster sizes (weights 1..clusters) make some clusters sparse, as in real data.
    std::vector<double> weights(clusters);
    for (int c = 0; c < clusters; ++c) weights[c] = 1.0 + c % 4;
    std::discrete_distribution<int> pick(weights.begin(), weights.end());
    for (size_t i = 0; i < n; ++i) {
      const int c = pick(rng);
      split->hidden_clusters[i] = c;
      split->labels[i] = c / options.synthetic_subclusters;
      for (int64_t k = 0; k < d.width; ++k) {
        split->features[i * d.width + k] = centres[c * d.width + k] + noise(rng);
      }
    }
  };
  fill(options.synthetic_train, &d.train);
  fill(options.synthetic_test, &d.test);
  return d;
}

absl::StatusOr<std::vector<std::string>> DatasetFiles(const DatasetOptions& options) {
  std::vector<std::string> files;
  auto add = [&](const std::string& dir, const std::string& name) -> absl::Status {
    auto found = FindFile(dir, name);
    if (!found.ok()) return found.status();
    files.push_back(*found);
    return absl::OkStatus();
  };
  const v1::DatasetName name = options.name;
  if (name == v1::DATASET_FASHION_MNIST || name == v1::DATASET_MNIST) {
    for (const char* n : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                          "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
      absl::Status s = add(options.path, n);
      if (!s.ok()) return s;
    }
  } else if (name == v1::DATASET_CIFAR10) {
    const std::string dir = CifarDir(options.path, "cifar-10-batches-bin");
    auto names = Cifar10TrainNames();
    names.push_back("test_batch.bin");
    for (const auto& n : names) {
      absl::Status s = add(dir, n);
      if (!s.ok()) return s;
    }
  } else if (name == v1::DATASET_CIFAR100) {
    const std::string dir = CifarDir(options.path, "cifar-100-binary");
    for (const char* n : {"train.bin", "test.bin"}) {
      absl::Status s = add(dir, n);
      if (!s.ok()) return s;
    }
  } else if (name == v1::DATASET_NPY) {
    for (const char* n : {kNpyTrainFeatures, kNpyTrainTargets}) {
      const fs::path p = fs::path(options.path) / n;
      std::error_code ec;
      if (!fs::exists(p, ec)) {
        return absl::NotFoundError(absl::StrCat("missing data file ", p.string()));
      }
      files.push_back(p.string());
    }
    // The held-out files come as a pair or not at all.
    const fs::path x = fs::path(options.path) / kNpyTestFeatures;
    const fs::path y = fs::path(options.path) / kNpyTestTargets;
    std::error_code ec;
    const bool have_x = fs::exists(x, ec), have_y = fs::exists(y, ec);
    if (have_x != have_y) {
      return absl::NotFoundError(absl::StrCat("missing data file ", (have_x ? y : x).string(),
                                              " (", (have_x ? x : y).filename().string(),
                                              " is there: give both test files or neither)"));
    }
    if (have_x) {
      files.push_back(x.string());
      files.push_back(y.string());
    }
  } else if (name != v1::DATASET_SYNTHETIC) {
    return absl::InvalidArgumentError(absl::StrCat("unknown data set ", static_cast<int>(name)));
  }
  return files;
}

DatasetOptions DatasetOptionsFor(const v1::ResolvedJob& job) {
  DatasetOptions options;
  options.name = job.dataset().name();
  options.path = job.dataset().path();
  options.label_set = job.dataset().label_set();
  options.max_train = static_cast<size_t>(job.dataset().max_train());
  options.max_test = static_cast<size_t>(job.dataset().max_test());
  options.seed = job.training().seed();
  return options;
}

absl::StatusOr<Dataset> LoadDataset(const DatasetOptions& options) {
  auto files = DatasetFiles(options);
  if (!files.ok()) return files.status();
  if (options.name == v1::DATASET_NPY) return LoadNpyDataset(*files, options);
  Dataset d;
  d.name = Spelled(options.name);
  if (options.name == v1::DATASET_SYNTHETIC) {
    d = MakeSyntheticDataset(options);
  } else if (options.name == v1::DATASET_FASHION_MNIST || options.name == v1::DATASET_MNIST) {
    d.channels = 1;
    d.num_classes = 10;
    if (options.name == v1::DATASET_FASHION_MNIST) {
      d.mean = {0.2860f};
      d.stddev = {0.3530f};
    } else {
      d.mean = {0.1307f};
      d.stddev = {0.3081f};
    }
    int64_t h2 = 0, w2 = 0;
    absl::Status s =
        ReadIdxSplit((*files)[0], (*files)[1], options.max_train, &d.train, &d.height, &d.width);
    if (!s.ok()) return s;
    s = ReadIdxSplit((*files)[2], (*files)[3], options.max_test, &d.test, &h2, &w2);
    if (!s.ok()) return s;
    if (h2 != d.height || w2 != d.width) {
      return absl::DataLossError(absl::StrCat(options.path, ": train and test image sizes differ"));
    }
  } else {
    d.channels = 3;
    d.height = d.width = 32;
    d.augment = true;
    const bool c100 = options.name == v1::DATASET_CIFAR100;
    int label_bytes = 1, label_index = 0;
    if (c100) {
      const bool coarse = options.label_set == v1::LABEL_SET_COARSE;
      if (!coarse && options.label_set != v1::LABEL_SET_FINE) {
        return absl::InvalidArgumentError("cifar100 label_set must be fine or coarse");
      }
      label_bytes = 2;
      label_index = coarse ? 0 : 1;
      d.num_classes = coarse ? 20 : 100;
      d.mean = {0.5071f, 0.4865f, 0.4409f};
      d.stddev = {0.2673f, 0.2564f, 0.2762f};
    } else {
      d.num_classes = 10;
      d.mean = {0.4914f, 0.4822f, 0.4465f};
      d.stddev = {0.2470f, 0.2435f, 0.2616f};
    }
    const size_t test_files = 1;
    for (size_t i = 0; i + test_files < files->size(); ++i) {
      absl::Status s =
          ReadCifarFile((*files)[i], label_bytes, label_index, d.num_classes, &d.train);
      if (!s.ok()) return s;
    }
    absl::Status s = ReadCifarFile(files->back(), label_bytes, label_index, d.num_classes, &d.test);
    if (!s.ok()) return s;
  }
  Truncate(&d.train, options.max_train, d.example_floats());
  Truncate(&d.test, options.max_test, d.example_floats());
  return d;
}

absl::Status Dataset::CheckExampleBatch(const std::vector<int64_t>& shape,
                                        int64_t max_examples) const {
  const std::vector<int64_t> example = ExampleShape();
  if (shape.size() != example.size() + 1 ||
      !std::equal(example.begin(), example.end(), shape.begin() + 1)) {
    return absl::InvalidArgumentError(absl::StrCat("input of shape [", absl::StrJoin(shape, ", "),
                                                   "]; the model takes [N, ",
                                                   absl::StrJoin(example, ", "), "]"));
  }
  if (shape[0] < 1 || (max_examples > 0 && shape[0] > max_examples)) {
    return absl::InvalidArgumentError(
        max_examples > 0 ? absl::StrCat(shape[0], " examples in one request; 1 to ", max_examples)
                         : absl::StrCat("input of ", shape[0], " examples; at least 1"));
  }
  return absl::OkStatus();
}

size_t Dataset::example_floats() const {
  if (example_shape.empty()) return static_cast<size_t>(channels * height * width);
  size_t n = 1;
  for (int64_t d : example_shape) n *= static_cast<size_t>(d);
  return n;
}

size_t Dataset::target_floats() const {
  size_t n = 1;
  for (int64_t d : target_shape) n *= static_cast<size_t>(d);
  return target_shape.empty() ? 0 : n;
}

void DatasetSplit::CopyFeatures(int64_t e, size_t per, float* out) const {
  if (mapped_features == nullptr) {
    std::copy_n(features.data() + e * static_cast<int64_t>(per), per, out);
    return;
  }
  RowsToFloat(*mapped_features, e, 1, out);
  if (mapped_scale != 1.0f) {
    for (size_t i = 0; i < per; ++i) out[i] *= mapped_scale;
  }
}

const float* DatasetSplit::AllFeatures(size_t per, std::vector<float>* scratch) const {
  if (mapped_features == nullptr) return features.data();
  scratch->resize(size() * per);
  for (size_t e = 0; e < size(); ++e) CopyFeatures(static_cast<int64_t>(e), per, scratch->data() + e * per);
  return scratch->data();
}

}  // namespace strata
