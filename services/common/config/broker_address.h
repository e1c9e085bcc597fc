// Where a stream's Redis broker listens, as `stream.address` and `strata produce --address` write
// it: `redis://HOST:PORT` (TCP) or the absolute path of a unix socket (`/run/x/redis.sock`, also
// spelled `unix:///run/x/redis.sock`). Parsed here, beside the job keys, so that `strata validate`
// refuses a bad address with the key's line, and the broker client (services/common/stream)
// connects to exactly what was validated.
#pragma once

#include <string>

#include <absl/status/statusor.h>

namespace strata {

struct BrokerAddress {
  std::string unix_path;  // non-empty: a unix socket; host and port are then unused
  std::string host;
  int port = 0;

  // "unix:/run/x/redis.sock" or "redis://127.0.0.1:6379", for messages.
  std::string Describe() const;
};

// The address `text` names, or InvalidArgument saying what is wrong with it (one line, without
// the key: the caller names where the text came from).
absl::StatusOr<BrokerAddress> ParseBrokerAddress(const std::string& text);

}  // namespace strata
