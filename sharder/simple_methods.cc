#include "sharder/simple_methods.h"

#include <algorithm>
#include <random>

namespace strata::sharder {

void SeededShuffle(std::vector<int64_t>* values, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = values->size(); i > 1; --i) {
    // Modulo bias is below 2^-32 for any realistic data set size.
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap((*values)[i - 1], (*values)[j]);
  }
}

Shards RandomShards(int64_t examples, int workers, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(examples));
  for (int64_t i = 0; i < examples; ++i) order[i] = i;
  SeededShuffle(&order, seed);
  Shards shards(workers);
  for (auto& s : shards) s.reserve(static_cast<size_t>(examples / workers + 1));
  for (int64_t i = 0; i < examples; ++i) shards[i % workers].push_back(order[i]);
  for (auto& s : shards) std::sort(s.begin(), s.end());
  return shards;
}

Shards ModShards(int64_t examples, int workers) {
  Shards shards(workers);
  for (auto& s : shards) s.reserve(static_cast<size_t>(examples / workers + 1));
  for (int64_t i = 0; i < examples; ++i) shards[i % workers].push_back(i);
  return shards;
}

Shards StratifiedShards(const std::vector<int32_t>& labels, int num_classes, int workers,
                        uint64_t seed) {
  std::vector<std::vector<int64_t>> by_class(num_classes);
  for (size_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(static_cast<int64_t>(i));
  Shards shards(workers);
  int64_t dealer = 0;
  for (int c = 0; c < num_classes; ++c) {
    // A different stream per class, so adding a class does not reshuffle the others.
    SeededShuffle(&by_class[c], seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(c));
    for (int64_t example : by_class[c]) {
      shards[dealer].push_back(example);
      dealer = (dealer + 1) % workers;
    }
  }
  for (auto& s : shards) std::sort(s.begin(), s.end());
  return shards;
}

}  // namespace strata::sharder
