// StreamBroker over hiredis's synchronous API: one connection, one command at a time (pipelined
// for AddMany), each reply's type checked before it is read, since a reply of another shape (a
// proxy, another Redis version, a key of another type) must be an error and never a crash.
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <map>
#include <thread>

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/stream/stream_broker.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};

timeval TimevalOf(milliseconds d) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(d.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((d.count() % 1000) * 1000);
  return tv;
}

const char* TypeName(int type) {
  switch (type) {
    case REDIS_REPLY_STRING:
      return "string";
    case REDIS_REPLY_ARRAY:
      return "array";
    case REDIS_REPLY_INTEGER:
      return "integer";
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_STATUS:
      return "status";
    case REDIS_REPLY_ERROR:
      return "error";
    default:
      return "unknown";
  }
}

// A reply of the wrong shape: the broker is not the Redis 7 this client speaks to.
absl::Status Unexpected(absl::string_view op, absl::string_view what, const redisReply* r) {
  return absl::InternalError(absl::StrCat(op, ": unexpected reply from the broker: ", what, " is ",
                                          r == nullptr ? "missing" : TypeName(r->type)));
}

bool IsText(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}
std::string Text(const redisReply* r) { return std::string(r->str, r->len); }

absl::StatusOr<int64_t> Integer(absl::string_view op, absl::string_view what, const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_INTEGER) return Unexpected(op, what, r);
  return static_cast<int64_t>(r->integer);
}

// [id, [field, value, ...]]; a nil field list (an entry deleted while pending) gives no fields.
absl::StatusOr<StreamEntry> EntryOf(absl::string_view op, const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !IsText(r->element[0])) {
    return Unexpected(op, "an entry (id and fields)", r);
  }
  StreamEntry entry;
  entry.id = Text(r->element[0]);
  const redisReply* fields = r->element[1];
  if (fields->type == REDIS_REPLY_NIL) return entry;
  if (fields->type != REDIS_REPLY_ARRAY || fields->elements % 2 != 0) {
    return Unexpected(op, "an entry's field list", fields);
  }
  for (size_t i = 0; i < fields->elements; i += 2) {
    if (!IsText(fields->element[i]) || !IsText(fields->element[i + 1])) {
      return Unexpected(op, "a field or value", fields->element[i]);
    }
    entry.fields.emplace_back(Text(fields->element[i]), Text(fields->element[i + 1]));
  }
  return entry;
}

absl::StatusOr<std::vector<StreamEntry>> EntriesOf(absl::string_view op, const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return Unexpected(op, "the entries", r);
  std::vector<StreamEntry> entries;
  entries.reserve(r->elements);
  for (size_t i = 0; i < r->elements; ++i) {
    auto entry = EntryOf(op, r->element[i]);
    if (!entry.ok()) return entry.status();
    entries.push_back(*std::move(entry));
  }
  return entries;
}

class RedisStreamBroker : public StreamBroker {
 public:
  RedisStreamBroker(BrokerAddress address, StreamBrokerOptions options)
      : address_(std::move(address)), options_(std::move(options)) {}

  absl::Status Connect() {
    context_.reset();
    const timeval tv = TimevalOf(options_.connect_timeout);
    redisContext* c = address_.unix_path.empty()
                          ? redisConnectWithTimeout(address_.host.c_str(), address_.port, tv)
                          : redisConnectUnixWithTimeout(address_.unix_path.c_str(), tv);
    if (c == nullptr) return absl::ResourceExhaustedError("cannot allocate a Redis context");
    std::unique_ptr<redisContext, ContextDeleter> owned(c);
    if (c->err != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to the broker at ", address_.Describe(), ": ", c->errstr));
    }
    context_ = std::move(owned);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Add(const std::string& key, const StreamFields& fields,
                                  int64_t max_len) override {
    auto ids = AddMany(key, {fields}, max_len);
    if (!ids.ok()) return ids.status();
    return ids->front();
  }

  absl::StatusOr<std::vector<std::string>> AddMany(const std::string& key,
                                                   const std::vector<StreamFields>& entries,
                                                   int64_t max_len) override {
    std::vector<std::vector<std::string>> commands;
    commands.reserve(entries.size());
    for (const StreamFields& fields : entries) {
      std::vector<std::string> args = {"XADD", key};
      if (max_len > 0) args.insert(args.end(), {"MAXLEN", "~", absl::StrCat(max_len)});
      args.push_back("*");
      for (const auto& [name, value] : fields) args.insert(args.end(), {name, value});
      commands.push_back(std::move(args));
    }
    auto replies = Run("XADD", commands, milliseconds(0));
    if (!replies.ok()) return replies.status();
    std::vector<std::string> ids;
    for (const Reply& r : *replies) {
      if (absl::Status e = ErrorOf("XADD", r.get()); !e.ok()) return e;
      if (!IsText(r.get())) return Unexpected("XADD", "the new entry's id", r.get());
      ids.push_back(Text(r.get()));
    }
    return ids;
  }

  absl::Status CreateGroup(const std::string& key, const std::string& group,
                           const std::string& start_id) override {
    auto r = RunOne("XGROUP CREATE", {"XGROUP", "CREATE", key, group, start_id, "MKSTREAM"});
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_ERROR && absl::StartsWith(Text(r->get()), "BUSYGROUP")) {
      return absl::OkStatus();
    }
    if (absl::Status e = ErrorOf("XGROUP CREATE", r->get()); !e.ok()) return e;
    if (!IsText(r->get())) return Unexpected("XGROUP CREATE", "the reply", r->get());
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<StreamEntry>> ReadGroup(const std::string& key,
                                                     const std::string& group,
                                                     const std::string& consumer, int count,
                                                     milliseconds block) override {
    auto r = RunOne("XREADGROUP",
                    {"XREADGROUP", "GROUP", group, consumer, "COUNT", absl::StrCat(count), "BLOCK",
                     absl::StrCat(block.count()), "STREAMS", key, ">"},
                    block);
    if (!r.ok()) return r.status();
    return StreamEntriesOf(r->get());
  }

  absl::StatusOr<std::vector<StreamEntry>> ReadOwnPending(const std::string& key,
                                                          const std::string& group,
                                                          const std::string& consumer,
                                                          const std::string& after,
                                                          int count) override {
    auto r = RunOne("XREADGROUP", {"XREADGROUP", "GROUP", group, consumer, "COUNT",
                                   absl::StrCat(count), "STREAMS", key, after});
    if (!r.ok()) return r.status();
    return StreamEntriesOf(r->get());
  }

  absl::StatusOr<int64_t> Ack(const std::string& key, const std::string& group,
                              const std::vector<std::string>& ids) override {
    if (ids.empty()) return 0;
    std::vector<std::string> args = {"XACK", key, group};
    args.insert(args.end(), ids.begin(), ids.end());
    auto r = RunOne("XACK", std::move(args));
    if (!r.ok()) return r.status();
    if (absl::Status e = ErrorOf("XACK", r->get()); !e.ok()) return e;
    return Integer("XACK", "the count acknowledged", r->get());
  }

  absl::StatusOr<AutoClaimed> AutoClaim(const std::string& key, const std::string& group,
                                        const std::string& consumer, milliseconds min_idle,
                                        const std::string& start, int count) override {
    auto r =
        RunOne("XAUTOCLAIM", {"XAUTOCLAIM", key, group, consumer, absl::StrCat(min_idle.count()),
                              start, "COUNT", absl::StrCat(count)});
    if (!r.ok()) return r.status();
    const redisReply* reply = r->get();
    if (absl::Status e = ErrorOf("XAUTOCLAIM", reply); !e.ok()) return e;
    // Redis 7: [next start, [entries], [deleted ids]].
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 || !IsText(reply->element[0])) {
      return Unexpected("XAUTOCLAIM", "the next start, entries and deleted ids", reply);
    }
    AutoClaimed claimed;
    claimed.next_start = Text(reply->element[0]);
    auto entries = EntriesOf("XAUTOCLAIM", reply->element[1]);
    if (!entries.ok()) return entries.status();
    claimed.entries = *std::move(entries);
    const redisReply* deleted = reply->element[2];
    if (deleted->type != REDIS_REPLY_ARRAY) return Unexpected("XAUTOCLAIM", "deleted ids", deleted);
    for (size_t i = 0; i < deleted->elements; ++i) {
      if (!IsText(deleted->element[i]))
        return Unexpected("XAUTOCLAIM", "an id", deleted->element[i]);
      claimed.deleted_ids.push_back(Text(deleted->element[i]));
    }
    return claimed;
  }

  absl::StatusOr<PendingSummary> Pending(const std::string& key,
                                         const std::string& group) override {
    auto r = RunOne("XPENDING", {"XPENDING", key, group});
    if (!r.ok()) return r.status();
    const redisReply* reply = r->get();
    if (absl::Status e = ErrorOf("XPENDING", reply); !e.ok()) return e;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4) {
      return Unexpected("XPENDING", "the summary", reply);
    }
    PendingSummary summary;
    auto count = Integer("XPENDING", "the count", reply->element[0]);
    if (!count.ok()) return count.status();
    summary.count = *count;
    if (IsText(reply->element[1])) summary.first_id = Text(reply->element[1]);
    if (IsText(reply->element[2])) summary.last_id = Text(reply->element[2]);
    const redisReply* consumers = reply->element[3];
    if (consumers->type == REDIS_REPLY_NIL) return summary;
    if (consumers->type != REDIS_REPLY_ARRAY) {
      return Unexpected("XPENDING", "the consumers", consumers);
    }
    for (size_t i = 0; i < consumers->elements; ++i) {
      const redisReply* c = consumers->element[i];
      // [name, count as a string].
      if (c->type != REDIS_REPLY_ARRAY || c->elements != 2 || !IsText(c->element[0]) ||
          !IsText(c->element[1])) {
        return Unexpected("XPENDING", "a consumer's name and count", c);
      }
      int64_t n = 0;
      if (!absl::SimpleAtoi(Text(c->element[1]), &n)) {
        return Unexpected("XPENDING", "a consumer's count", c->element[1]);
      }
      summary.per_consumer.emplace_back(Text(c->element[0]), n);
    }
    return summary;
  }

  absl::StatusOr<ConsumerGroupInfo> GroupInfo(const std::string& key,
                                              const std::string& group) override {
    auto r = RunOne("XINFO GROUPS", {"XINFO", "GROUPS", key});
    if (!r.ok()) return r.status();
    const redisReply* reply = r->get();
    if (absl::Status e = ErrorOf("XINFO GROUPS", reply); !e.ok()) return e;
    if (reply->type != REDIS_REPLY_ARRAY) return Unexpected("XINFO GROUPS", "the groups", reply);
    for (size_t g = 0; g < reply->elements; ++g) {
      const redisReply* pairs = reply->element[g];
      if (pairs->type != REDIS_REPLY_ARRAY || pairs->elements % 2 != 0) {
        return Unexpected("XINFO GROUPS", "a group's fields", pairs);
      }
      ConsumerGroupInfo info;
      for (size_t i = 0; i < pairs->elements; i += 2) {
        if (!IsText(pairs->element[i])) return Unexpected("XINFO GROUPS", "a field name", pairs);
        const std::string name = Text(pairs->element[i]);
        const redisReply* value = pairs->element[i + 1];
        if (name == "name" && IsText(value)) info.name = Text(value);
        if (name == "last-delivered-id" && IsText(value)) info.last_delivered_id = Text(value);
        if (value->type == REDIS_REPLY_INTEGER) {
          if (name == "consumers") info.consumers = value->integer;
          if (name == "pending") info.pending = value->integer;
          if (name == "lag") info.lag = value->integer;
          if (name == "entries-read") info.entries_read = value->integer;
        }
      }
      if (info.name == group) return info;
    }
    return absl::NotFoundError(
        absl::StrCat("stream ", key, " at ", address_.Describe(), " has no group ", group));
  }

  absl::StatusOr<int64_t> Length(const std::string& key) override {
    auto r = RunOne("XLEN", {"XLEN", key});
    if (!r.ok()) return r.status();
    if (absl::Status e = ErrorOf("XLEN", r->get()); !e.ok()) return e;
    return Integer("XLEN", "the length", r->get());
  }

  absl::StatusOr<int64_t> EntriesAdded(const std::string& key) override {
    auto r = RunOne("XINFO STREAM", {"XINFO", "STREAM", key});
    if (!r.ok()) return r.status();
    const redisReply* reply = r->get();
    if (absl::Status e = ErrorOf("XINFO STREAM", reply); !e.ok()) return e;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2 != 0) {
      return Unexpected("XINFO STREAM", "the stream's fields", reply);
    }
    for (size_t i = 0; i < reply->elements; i += 2) {
      if (IsText(reply->element[i]) && Text(reply->element[i]) == "entries-added" &&
          reply->element[i + 1]->type == REDIS_REPLY_INTEGER) {
        return static_cast<int64_t>(reply->element[i + 1]->integer);
      }
    }
    return Unexpected("XINFO STREAM", "entries-added (Redis 7)", reply);
  }

  absl::StatusOr<std::vector<StreamEntry>> Newest(const std::string& key, int count) override {
    auto r = RunOne("XREVRANGE", {"XREVRANGE", key, "+", "-", "COUNT", absl::StrCat(count)});
    if (!r.ok()) return r.status();
    if (absl::Status e = ErrorOf("XREVRANGE", r->get()); !e.ok()) return e;
    return EntriesOf("XREVRANGE", r->get());
  }

  absl::Status PutField(const std::string& key, const std::string& field,
                        const std::string& value) override {
    auto r = RunOne("HSET", {"HSET", key, field, value});
    if (!r.ok()) return r.status();
    if (absl::Status e = ErrorOf("HSET", r->get()); !e.ok()) return e;
    return Integer("HSET", "the count of new fields", r->get()).status();
  }

  absl::StatusOr<std::map<std::string, std::string>> Fields(const std::string& key) override {
    auto r = RunOne("HGETALL", {"HGETALL", key});
    if (!r.ok()) return r.status();
    const redisReply* reply = r->get();
    if (absl::Status e = ErrorOf("HGETALL", reply); !e.ok()) return e;
    // A flat array of field, value, ... (RESP2, what hiredis speaks by default).
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2 != 0) {
      return Unexpected("HGETALL", "field/value pairs", reply);
    }
    std::map<std::string, std::string> fields;
    for (size_t i = 0; i < reply->elements; i += 2) {
      if (!IsText(reply->element[i]) || !IsText(reply->element[i + 1])) {
        return Unexpected("HGETALL", "a field or value", reply);
      }
      fields[Text(reply->element[i])] = Text(reply->element[i + 1]);
    }
    return fields;
  }

  absl::Status Ping() override {
    auto r = RunOne("PING", {"PING"});
    if (!r.ok()) return r.status();
    if (absl::Status e = ErrorOf("PING", r->get()); !e.ok()) return e;
    return IsText(r->get()) && Text(r->get()) == "PONG" ? absl::OkStatus()
                                                        : Unexpected("PING", "PONG", r->get());
  }

 private:
  // XREADGROUP's reply: [[key, [entries]]], one stream asked for and one answered; none when a
  // BLOCK passed (nil).
  absl::StatusOr<std::vector<StreamEntry>> StreamEntriesOf(const redisReply* reply) const {
    if (absl::Status e = ErrorOf("XREADGROUP", reply); !e.ok()) return e;
    if (reply->type == REDIS_REPLY_NIL) return std::vector<StreamEntry>();
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1) {
      return Unexpected("XREADGROUP", "the list of streams", reply);
    }
    const redisReply* stream = reply->element[0];
    if (stream->type != REDIS_REPLY_ARRAY || stream->elements != 2 || !IsText(stream->element[0])) {
      return Unexpected("XREADGROUP", "the stream's key and entries", stream);
    }
    return EntriesOf("XREADGROUP", stream->element[1]);
  }

  // The broker's own error reply as a Status: NotFound for a missing group or stream (NOGROUP),
  // FailedPrecondition for a key of another type (WRONGTYPE), InvalidArgument for the rest.
  absl::Status ErrorOf(absl::string_view op, const redisReply* r) const {
    if (r == nullptr || r->type != REDIS_REPLY_ERROR) return absl::OkStatus();
    const std::string text = Text(r);
    const std::string message =
        absl::StrCat(op, " at ", address_.Describe(), ": the broker says: ", text);
    if (absl::StartsWith(text, "NOGROUP")) return absl::NotFoundError(message);
    if (absl::StartsWith(text, "WRONGTYPE")) return absl::FailedPreconditionError(message);
    return absl::InvalidArgumentError(message);
  }

  absl::StatusOr<Reply> RunOne(absl::string_view op, std::vector<std::string> args,
                               milliseconds extra_timeout = milliseconds(0)) {
    auto replies = Run(op, {std::move(args)}, extra_timeout);
    if (!replies.ok()) return replies.status();
    return std::move(replies->front());
  }

  // Sends `commands` pipelined and reads one reply each. On a lost connection (or none yet),
  // reconnects with back-off and sends them all again, for up to options_.reconnect_for.
  absl::StatusOr<std::vector<Reply>> Run(absl::string_view op,
                                         const std::vector<std::vector<std::string>>& commands,
                                         milliseconds extra_timeout) {
    const Clock::time_point started = Clock::now();
    milliseconds backoff = options_.backoff_first;
    for (;;) {
      absl::Status problem = context_ == nullptr ? Connect() : absl::OkStatus();
      if (problem.ok()) {
        auto replies = Send(commands, options_.command_timeout + extra_timeout);
        if (replies.ok()) {
          if (lost_) {
            spdlog::info("{}: the broker at {} answers again", options_.who, address_.Describe());
            lost_ = false;
          }
          return replies;
        }
        problem = replies.status();
        context_.reset();  // hiredis: a context with an I/O error is unusable
      }
      if (!lost_) {
        spdlog::warn(
            "{}: {}: lost the broker at {} ({}); reconnecting with back-off for up to "
            "{} ms",
            options_.who, std::string(op), address_.Describe(), std::string(problem.message()),
            options_.reconnect_for.count());
        lost_ = true;
      }
      const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
      if (waited + backoff > options_.reconnect_for) {
        return absl::UnavailableError(absl::StrCat(op, ": the broker at ", address_.Describe(),
                                                   " did not answer for ", waited.count(),
                                                   " ms: ", problem.message()));
      }
      std::this_thread::sleep_for(backoff);  // back-off between attempts, not a synchronisation
      backoff = std::min(backoff * 2, options_.backoff_max);
    }
  }

  absl::StatusOr<std::vector<Reply>> Send(const std::vector<std::vector<std::string>>& commands,
                                          milliseconds timeout) {
    redisContext* c = context_.get();
    if (redisSetTimeout(c, TimevalOf(timeout)) != REDIS_OK) {
      return absl::UnavailableError(absl::StrCat("cannot set the socket timeout: ", c->errstr));
    }
    for (const std::vector<std::string>& args : commands) {
      std::vector<const char*> argv;
      std::vector<size_t> lengths;
      for (const std::string& a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
      }
      if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()) !=
          REDIS_OK) {
        return absl::UnavailableError(c->errstr);
      }
    }
    std::vector<Reply> replies;
    for (size_t i = 0; i < commands.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) {
        return absl::UnavailableError(c->err != 0 ? c->errstr : "no reply");
      }
      replies.emplace_back(static_cast<redisReply*>(raw));
    }
    return replies;
  }

  const BrokerAddress address_;
  const StreamBrokerOptions options_;
  std::unique_ptr<redisContext, ContextDeleter> context_;
  bool lost_ = false;  // logged as lost, not yet as back
};

}  // namespace

absl::StatusOr<std::unique_ptr<StreamBroker>> ConnectStreamBroker(
    const BrokerAddress& address, const StreamBrokerOptions& options) {
  // hiredis writes with write(2): a broker that went away would raise SIGPIPE and end the
  // process instead of the call failing with EPIPE and reconnecting. gRPC ignores it for the
  // same reason; nothing in Strata wants the signal.
  static const bool sigpipe_ignored = [] { return ::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)sigpipe_ignored;
  auto broker = std::make_unique<RedisStreamBroker>(address, options);
  if (absl::Status s = broker->Connect(); !s.ok()) return s;
  return std::unique_ptr<StreamBroker>(std::move(broker));
}

}  // namespace strata
