#include "services/common/stream/event_replay.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strata {

TokenBucket::TokenBucket(double rate, double burst, Clock::time_point now)
    : rate_(rate), burst_(std::max(1.0, burst)), tokens_(0), last_(now) {}

void TokenBucket::Refill(Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - last_).count();
  if (seconds > 0) tokens_ = std::min(burst_, tokens_ + rate_ * seconds);
  last_ = now;
}

void TokenBucket::SetRate(double rate, Clock::time_point now) {
  Refill(now);
  rate_ = rate;
}

int64_t TokenBucket::Available(Clock::time_point now, int64_t max) {
  if (rate_ <= 0) return max;
  Refill(now);
  return std::min<int64_t>(max, static_cast<int64_t>(std::floor(std::max(0.0, tokens_))));
}

std::chrono::microseconds TokenBucket::UntilNext() const {
  if (rate_ <= 0 || tokens_ >= 1) return std::chrono::microseconds(0);
  return std::chrono::microseconds(static_cast<int64_t>(std::ceil((1 - tokens_) / rate_ * 1e6)));
}

double RampedRate(double start, double step, double every_seconds, double elapsed) {
  if (step <= 0 || every_seconds <= 0) return start;
  return start + step * std::floor(elapsed / every_seconds);
}

std::vector<int32_t> DriftPermutation(int32_t classes, uint64_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(std::max(0, classes)));
  std::iota(p.begin(), p.end(), 0);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state](uint64_t bound) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;  // Knuth's MMIX LCG
    return (state >> 33) % bound;
  };
  // Sattolo: j < i strictly, so the result is one cycle through every class.
  for (size_t i = p.size(); i > 1; --i) std::swap(p[i - 1], p[next(i - 1)]);
  return p;
}

}  // namespace strata
