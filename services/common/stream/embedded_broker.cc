#include "services/common/stream/embedded_broker.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cstdio>
#include <string>
#include <thread>

#include <absl/strings/str_cat.h>

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// One PING over a fresh connection, 500 ms at most: true on PONG.
bool AnswersPing(const std::string& socket_path) {
  const timeval tv = {0, 500 * 1000};
  redisContext* c = redisConnectUnixWithTimeout(socket_path.c_str(), tv);
  if (c == nullptr) return false;
  bool pong = false;
  if (c->err == 0 && redisSetTimeout(c, tv) == REDIS_OK) {
    auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
    pong = reply != nullptr && reply->type == REDIS_REPLY_STATUS &&
           std::string(reply->str, reply->len) == "PONG";
    if (reply != nullptr) freeReplyObject(reply);
  }
  redisFree(c);
  return pong;
}

}  // namespace

absl::StatusOr<std::string> FindRedisServer(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  if (auto path = FindOnPath(name)) return *path;
  return absl::NotFoundError(
      absl::StrCat("no ", name,
                   " on PATH: a stream job without stream.address needs one (Debian package "
                   "redis-server, installed by scripts/install-deps.sh)"));
}

absl::StatusOr<std::unique_ptr<EmbeddedBroker>> EmbeddedBroker::Start(
    const EmbeddedBrokerOptions& options) {
  auto server = FindRedisServer(options.redis_server);
  if (!server.ok()) return server.status();
  std::unique_ptr<EmbeddedBroker> broker(new EmbeddedBroker());
  broker->options_ = options;
  auto address = ParseBrokerAddress(options.directory + "/redis.sock");
  if (!address.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the embedded broker's socket in ", options.directory, ": ", address.status().message()));
  }
  broker->address_ = *address;
  broker->log_path_ = options.directory + "/redis.log";
  // A socket left by a broker that was killed would make redis-server refuse to bind.
  std::remove(broker->socket_path().c_str());

  SpawnOptions spawn;
  spawn.name = "redis-server";
  // --port 0: no TCP listener at all. --save "" and --appendonly no: nothing written to disk;
  // a stream job's events are replayable from its data set, and its progress is in the run.
  spawn.argv = {*server,
                "--port",
                "0",
                "--unixsocket",
                broker->socket_path(),
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                options.directory,
                "--daemonize",
                "no",
                "--logfile",
                ""};
  spawn.log_path = broker->log_path_;
  auto child = ChildProcess::Spawn(spawn);
  if (!child.ok()) return child.status();
  broker->child_ = *std::move(child);

  const Clock::time_point deadline = Clock::now() + options.ready_deadline;
  for (;;) {
    if (AnswersPing(broker->socket_path())) return broker;
    if (broker->child_->Poll()) {
      return absl::UnavailableError(absl::StrCat("redis-server ", broker->child_->ExitDescription(),
                                                 " before it answered on ", broker->socket_path(),
                                                 "; its log ends:\n", LogTail(broker->log_path_)));
    }
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "redis-server did not answer PING on ", broker->socket_path(), " within ",
          options.ready_deadline.count(), " ms; its log ends:\n", LogTail(broker->log_path_)));
    }
    // Polling the socket against the deadline: the server says nothing else when it is ready.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void EmbeddedBroker::Stop() {
  if (child_ == nullptr) return;
  TerminateAll({child_.get()}, options_.stop_grace);
  child_.reset();
  std::remove(socket_path().c_str());
}

EmbeddedBroker::~EmbeddedBroker() { Stop(); }

}  // namespace strata
