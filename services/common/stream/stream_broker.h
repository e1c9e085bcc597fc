// The broker a stream job's events travel through: a Redis stream, read by one consumer group
// (docs/protocol.md, "Stream events"). StreamBroker is the seam: the producer and, next, the
// replicas speak to it; ConnectStreamBroker gives the one real implementation (hiredis, the
// synchronous API, one connection), and a test can stand another in its place.
//
// Every blocking call is bounded: a connection is made within `connect_timeout`, a command's
// reply must come within `command_timeout` (plus the BLOCK time of a blocking read). When the
// broker goes away, a call reconnects with back-off, logging the loss and the return once each,
// and gives up with Unavailable after `reconnect_for`; the next call tries again. A command cut
// off by a lost connection is sent again once reconnected, so delivery is at least once: an XADD
// may land twice (the events' `seq` shows it), an XREADGROUP's entries may wait in the lost
// consumer's pending list until claimed (XAUTOCLAIM).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/config/broker_address.h"
#include "services/common/stream/stream_event.h"

namespace strata {

struct StreamBrokerOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds command_timeout{10000};
  // How long a call keeps reconnecting before it returns Unavailable; 0: one attempt.
  std::chrono::milliseconds reconnect_for{30000};
  std::chrono::milliseconds backoff_first{50}, backoff_max{2000};
  // Prefixes the log lines ("produce", "worker-1").
  std::string who = "stream";
};

// XPENDING's summary form: what the group was handed and has not acknowledged.
struct PendingSummary {
  int64_t count = 0;
  std::string first_id, last_id;                              // empty when count is 0
  std::vector<std::pair<std::string, int64_t>> per_consumer;  // name, pending entries
};

// One group of XINFO GROUPS (Redis 7).
struct ConsumerGroupInfo {
  std::string name;
  int64_t consumers = 0;
  int64_t pending = 0;
  std::string last_delivered_id;
  // Entries in the stream not yet delivered to the group; -1 when Redis cannot tell (after
  // deletions), as XINFO says with a nil.
  int64_t lag = -1;
  // Entries the group has been handed since it was made (Redis 7's entries-read); -1 when Redis
  // cannot tell.
  int64_t entries_read = -1;
};

struct AutoClaimed {
  std::string next_start;  // "0-0" once the pending list has been scanned to its end
  std::vector<StreamEntry> entries;
  // Pending entries that were deleted from the stream meanwhile (Redis drops them from the list).
  std::vector<std::string> deleted_ids;
};

class StreamBroker {
 public:
  virtual ~StreamBroker() = default;

  // XADD key [MAXLEN ~ max_len] * fields...: the new entry's id. max_len 0: no cap.
  virtual absl::StatusOr<std::string> Add(const std::string& key, const StreamFields& fields,
                                          int64_t max_len = 0) = 0;
  // Many XADDs in one round trip (pipelined); the ids in order. A failure part way may leave the
  // first entries added.
  virtual absl::StatusOr<std::vector<std::string>> AddMany(const std::string& key,
                                                           const std::vector<StreamFields>& entries,
                                                           int64_t max_len = 0) = 0;
  // XGROUP CREATE key group start MKSTREAM; a group that exists already is fine (BUSYGROUP).
  virtual absl::Status CreateGroup(const std::string& key, const std::string& group,
                                   const std::string& start_id = "0") = 0;
  // XREADGROUP GROUP group consumer COUNT count BLOCK block STREAMS key >: new entries for this
  // consumer, none when `block` passed without any. NotFound when the group or stream is gone.
  virtual absl::StatusOr<std::vector<StreamEntry>> ReadGroup(const std::string& key,
                                                             const std::string& group,
                                                             const std::string& consumer, int count,
                                                             std::chrono::milliseconds block) = 0;
  // XREADGROUP GROUP group consumer COUNT count STREAMS key after: the entries this consumer was
  // handed before and has not acknowledged, from the first id past `after` ("0": from the
  // start). What a restarted consumer of the same name takes up first; an entry deleted from the
  // stream meanwhile comes with no fields.
  virtual absl::StatusOr<std::vector<StreamEntry>> ReadOwnPending(const std::string& key,
                                                                  const std::string& group,
                                                                  const std::string& consumer,
                                                                  const std::string& after,
                                                                  int count) = 0;
  // XACK: how many of `ids` were pending and are now acknowledged.
  virtual absl::StatusOr<int64_t> Ack(const std::string& key, const std::string& group,
                                      const std::vector<std::string>& ids) = 0;
  // XAUTOCLAIM key group consumer min_idle start COUNT count: entries pending longer than
  // `min_idle` (a dead consumer's) handed to `consumer`.
  virtual absl::StatusOr<AutoClaimed> AutoClaim(const std::string& key, const std::string& group,
                                                const std::string& consumer,
                                                std::chrono::milliseconds min_idle,
                                                const std::string& start, int count) = 0;
  virtual absl::StatusOr<PendingSummary> Pending(const std::string& key,
                                                 const std::string& group) = 0;
  // The group `group` of the stream; NotFound if it has none of that name.
  virtual absl::StatusOr<ConsumerGroupInfo> GroupInfo(const std::string& key,
                                                      const std::string& group) = 0;
  virtual absl::StatusOr<int64_t> Length(const std::string& key) = 0;  // XLEN
  // XINFO STREAM's entries-added (Redis 7): every entry ever added to the stream, the ones a cap
  // has trimmed since included.
  virtual absl::StatusOr<int64_t> EntriesAdded(const std::string& key) = 0;
  // XREVRANGE key + - COUNT count: the stream's latest `count` entries, newest first; fewer while
  // the stream holds fewer.
  virtual absl::StatusOr<std::vector<StreamEntry>> Newest(const std::string& key, int count) = 0;
  // HSET key field value, and HGETALL key: the small shared records beside a stream (where each
  // replica of a stream job listens).
  virtual absl::Status PutField(const std::string& key, const std::string& field,
                                const std::string& value) = 0;
  virtual absl::StatusOr<std::map<std::string, std::string>> Fields(const std::string& key) = 0;
  virtual absl::Status Ping() = 0;
};

// A client of the Redis broker at `address`: connects now, within options.connect_timeout (no
// reconnecting: an address that does not answer is an error the caller reports at once).
absl::StatusOr<std::unique_ptr<StreamBroker>> ConnectStreamBroker(
    const BrokerAddress& address, const StreamBrokerOptions& options = {});

}  // namespace strata
