// The three methods that need no feature vectors. Each returns one index list per worker; the
// lists are disjoint and together cover 0..n-1 exactly once.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::sharder {

using Shards = std::vector<std::vector<int64_t>>;

// Seeded shuffle, then dealt round-robin: shard sizes differ by at most 1.
Shards RandomShards(int64_t examples, int workers, uint64_t seed);

// Example i goes to worker i mod n (TensorFlow's default input sharding, the paper's baseline).
Shards ModShards(int64_t examples, int workers);

// Each class is shuffled (seeded) and dealt round-robin, the dealer's position carrying over from
// one class to the next: per class, and in total, shard counts differ by at most 1.
Shards StratifiedShards(const std::vector<int32_t>& labels, int num_classes, int workers,
                        uint64_t seed);

// Deterministic Fisher-Yates with a fixed generator, so a plan does not depend on the standard
// library's distribution implementations.
void SeededShuffle(std::vector<int64_t>* values, uint64_t seed);

}  // namespace strata::sharder
