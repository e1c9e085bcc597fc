// The flags of `strata shard` and of `strata-sharder`'s one-shot mode, defined once: `strata`
// passes the given ones through to strata-sharder, which resolves them (sharder/shard_job.h).
// Torch-free; compiled into both binaries.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace strata::shard {

struct ShardFlags {
  std::string config;  // job spec: positional JOB.yaml or --config
  std::string job;     // or the resolved job `strata` wrote (--job)
  std::string dataset, data, label_set, method, out;
  int workers = 0, clusters = 0, pca_components = 0, max_iterations = 0, threads = 0;
  uint64_t seed = 0;
  int64_t max_train = 0, pca_fit_examples = 0;
  std::set<std::string> given;  // long names ("workers") of the flags present on the command line

  bool Given(const std::string& name) const { return given.count(name) > 0; }
};

// Adds the flags (and the optional positional job spec) to `app`.
void AddShardFlags(CLI::App* app, ShardFlags* flags);

// After parsing: records which flags were given in flags->given.
void NoteGivenShardFlags(const CLI::App& app, ShardFlags* flags);

// The given flags as arguments for strata-sharder ("--workers", "12", ...); the positional job
// spec becomes "--config PATH".
std::vector<std::string> ShardFlagsAsArgs(const ShardFlags& flags);

}  // namespace strata::shard
