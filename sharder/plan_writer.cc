#include "sharder/plan_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <zlib.h>

#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/config/job_keys.h"
#include "services/common/wire/shard_index.h"

namespace strata::sharder {
namespace fs = std::filesystem;
namespace {

uint32_t Crc32Update(uint32_t crc, const std::string& bytes) {
  uLong c = crc;
  size_t offset = 0;
  while (offset < bytes.size()) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(bytes.size() - offset, 1u << 30));
    c = crc32(c, reinterpret_cast<const Bytef*>(bytes.data() + offset), piece);
    offset += piece;
  }
  return static_cast<uint32_t>(c);
}

// The CRC-32 and size of a regular file, read in pieces: a user's .npy file may be far larger
// than memory.
absl::Status Crc32OfFile(const std::string& path, uint32_t* crc, uint64_t* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::vector<char> buffer(size_t{1} << 20);
  uLong c = crc32(0, nullptr, 0);
  uint64_t total = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat("reading ", path, ": ", std::strerror(errno)));
    }
    if (got == 0) break;
    c = crc32(c, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(got));
    total += static_cast<uint64_t>(got);
  }
  ::close(fd);
  *crc = static_cast<uint32_t>(c);
  *bytes = total;
  return absl::OkStatus();
}

std::string Hex32(uint32_t v) { return absl::StrFormat("crc32:%08x", v); }

// True if `dir` holds a manifest.json written by us: the only kind of directory we replace.
bool IsShardPlanDirectory(const fs::path& dir) {
  auto text = ReadFile((dir / kShardManifestName).string());
  if (!text.ok()) return false;
  nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return manifest.is_object() && manifest.value("format", "") == kManifestFormat;
}

void SyncDirectory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

absl::Status Publish(const fs::path& staged, const fs::path& target) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(target, ec);
  if (!fs::exists(status)) {
    if (::rename(staged.c_str(), target.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot rename ", staged.string(), " to ",
                                              target.string(), ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  if (!fs::is_directory(status)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--out ", target.string(), " exists and is not a directory; not replacing it"));
  }
  if (!fs::is_empty(target, ec) && !IsShardPlanDirectory(target)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--out ", target.string(),
                     " exists and is not a shard plan (no manifest.json of ours); "
                     "not replacing it"));
  }
  // Swap the new plan in with one atomic exchange; the old one ends up at `staged`.
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot replace ", target.string(), ": ", std::strerror(errno)));
  }
  fs::remove_all(staged, ec);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PlanProvenance> FingerprintDataset(const DatasetOptions& options) {
  PlanProvenance p;
  p.dataset = options;
  auto files = DatasetFiles(options);
  if (!files.ok()) return files.status();
  uint32_t combined = 0;
  if (options.name == v1::DATASET_SYNTHETIC) {
    combined =
        Crc32Update(0, absl::StrCat("synthetic/", options.synthetic_train, "/",
                                    options.synthetic_classes, "/", options.synthetic_subclusters,
                                    "/", options.synthetic_dim, "/", options.seed));
  }
  for (const std::string& path : *files) {
    DatasetFile f;
    f.path = path;
    uint64_t size = 0;
    if (absl::Status s = Crc32OfFile(path, &f.crc32, &size); !s.ok()) return s;
    f.bytes = size;
    combined = Crc32Update(combined, absl::StrCat(fs::path(path).filename().string(), ":", f.bytes,
                                                  ":", f.crc32, ";"));
    p.files.push_back(f);
  }
  p.fingerprint = Hex32(combined);
  return p;
}

nlohmann::ordered_json BuildManifest(const ShardPlan& plan, const PlanProvenance& provenance) {
  using json = nlohmann::ordered_json;
  const ShardPlanOptions& o = plan.options;
  json m;
  m["format"] = kManifestFormat;
  m["version"] = kManifestVersion;
  m["method"] = Spelled(o.method);
  json parameters = {{"workers", o.workers}};
  if (o.method == v1::SHARD_METHOD_DISTRIBUTION_AWARE) {
    parameters["clusters"] = o.clusters;
    parameters["pca_components"] = o.pca_components;
    parameters["max_iterations"] = o.max_iterations;
    parameters["pca_fit_examples"] = o.pca_fit_examples > 0 && o.pca_fit_examples < plan.examples
                                         ? o.pca_fit_examples
                                         : plan.examples;
  }
  if (provenance.dataset.name == v1::DATASET_CIFAR100) {
    parameters["label_set"] = Spelled(provenance.dataset.label_set);
  }
  m["parameters"] = parameters;
  m["seed"] = o.seed;
  json files = json::array();
  for (const DatasetFile& f : provenance.files) {
    files.push_back(
        {{"path", f.path}, {"bytes", f.bytes}, {"crc32", absl::StrFormat("%08x", f.crc32)}});
  }
  m["dataset"] = {{"name", Spelled(provenance.dataset.name)},  {"path", provenance.dataset.path},
                  {"fingerprint", provenance.fingerprint},     {"files", files},
                  {"max_train", provenance.dataset.max_train}, {"num_classes", plan.num_classes}};
  m["examples"] = plan.examples;
  m["class_counts"] = plan.class_totals;
  json shards = json::array();
  for (int w = 0; w < o.workers; ++w) {
    shards.push_back({{"worker", w},
                      {"file", ShardIndexName(w)},
                      {"count", plan.shards[w].size()},
                      {"class_counts", plan.shard_class_counts[w]}});
  }
  m["shards"] = shards;
  if (o.method == v1::SHARD_METHOD_DISTRIBUTION_AWARE) {
    json clusters = json::array();
    for (const ClusterSummary& c : plan.clusters) {
      clusters.push_back({{"size", c.size}, {"broadcast", c.broadcast}});
    }
    m["clusters"] = clusters;
    m["kmeans"] = {{"iterations", plan.kmeans_iterations},
                   {"converged", plan.kmeans_converged},
                   {"inertia", plan.kmeans_inertia}};
  }
  json seconds = json::object();
  double total = 0;
  for (const auto& [phase, s] : provenance.extra_phase_seconds) {
    seconds[phase] = s;
    total += s;
  }
  for (const auto& [phase, s] : plan.phase_seconds) {
    seconds[phase] = s;
    total += s;
  }
  seconds["total"] = total;
  m["seconds"] = seconds;
  return m;
}

absl::Status WriteShardPlan(const std::string& out_dir, const ShardPlan& plan,
                            const PlanProvenance& provenance) {
  if (out_dir.empty()) return absl::InvalidArgumentError("the output directory (--out) is empty");
  fs::path target = fs::absolute(fs::path(out_dir)).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "dir/" names "dir"
  const fs::path parent = target.parent_path();
  if (absl::Status s = MakeDirs(parent.string()); !s.ok()) return s;

  static std::atomic<int> counter{0};
  const fs::path staged = parent / absl::StrCat(".", target.filename().string(), ".tmp-",
                                                ::getpid(), "-", counter.fetch_add(1));
  std::error_code ec;
  fs::remove_all(staged, ec);
  if (!fs::create_directory(staged, ec)) {
    return absl::InternalError(absl::StrCat("cannot create ", staged.string(), ": ", ec.message()));
  }
  auto write_all = [&]() -> absl::Status {
    for (int w = 0; w < plan.options.workers; ++w) {
      absl::Status s = WriteShardIndex((staged / ShardIndexName(w)).string(), plan.shards[w],
                                       static_cast<uint64_t>(plan.examples));
      if (!s.ok()) return s;
    }
    absl::Status s = WriteFileAtomic((staged / kShardManifestName).string(),
                                     BuildManifest(plan, provenance).dump(2) + "\n");
    if (!s.ok()) return s;
    SyncDirectory(staged);
    s = Publish(staged, target);
    if (s.ok()) SyncDirectory(parent);
    return s;
  };
  absl::Status status = write_all();
  if (!status.ok()) fs::remove_all(staged, ec);
  return status;
}

}  // namespace strata::sharder
