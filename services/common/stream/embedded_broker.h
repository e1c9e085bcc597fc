// A private redis-server for one run or one test: it listens only on a unix socket in the given
// directory (mode 0700: no other user can connect, and no TCP port is opened), keeps nothing on
// disk (no RDB snapshots, no append-only file) and is gone with its owner (ChildProcess: its own
// process group, PR_SET_PDEATHSIG). Start returns once the server answers PING; Stop ends it.
// `strata run` will start one for a stream job without `stream.address`; the stream tests start
// one each.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <absl/status/statusor.h>

#include "services/common/config/broker_address.h"
#include "services/common/process/child_process.h"

namespace strata {

struct EmbeddedBrokerOptions {
  std::string directory;  // the socket, the log (redis.log) and redis-server's working directory
  std::string redis_server = "redis-server";        // found on PATH unless absolute
  std::chrono::milliseconds ready_deadline{20000};  // until it answers PING
  std::chrono::milliseconds stop_grace{5000};       // SIGTERM, then SIGKILL after this
};

class EmbeddedBroker {
 public:
  // Starts redis-server and waits until it answers PING. Fails, quoting the end of its log, if it
  // cannot start, exits, or does not answer within the deadline.
  static absl::StatusOr<std::unique_ptr<EmbeddedBroker>> Start(
      const EmbeddedBrokerOptions& options);
  ~EmbeddedBroker();  // Stop()
  EmbeddedBroker(const EmbeddedBroker&) = delete;
  EmbeddedBroker& operator=(const EmbeddedBroker&) = delete;

  const BrokerAddress& address() const { return address_; }
  const std::string& socket_path() const { return address_.unix_path; }
  const std::string& log_path() const { return log_path_; }
  // Ends the server (SIGTERM, then SIGKILL after the grace) and removes its socket. A stopped
  // broker's data are gone; Start another on the same directory for a broker that came back.
  void Stop();
  bool running() const { return child_ != nullptr; }

 private:
  EmbeddedBroker() = default;
  EmbeddedBrokerOptions options_;
  BrokerAddress address_;
  std::string log_path_;
  std::unique_ptr<ChildProcess> child_;
};

// The redis-server to start: `name` if it is a path, else the first one on PATH; NotFound with
// the install hint when there is none.
absl::StatusOr<std::string> FindRedisServer(const std::string& name = "redis-server");

}  // namespace strata
