#include "services/collective/in_memory_ring_link.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>

namespace strata {
namespace {

using Clock = RingClock;

struct Message {
  SegmentHeader header;
  std::string abort;
  std::vector<uint8_t> bytes;
  bool end = false;  // the sender's stream for this operation is over
  Clock::time_point visible_at;
};

struct RankState {
  bool dead = false;
  bool silent = false;
  std::chrono::milliseconds delay{0};
  int sends_before_death = -1;  // -1: no planned death
  uint64_t next_operation = 0;  // lower operations are over: their messages are dropped
  std::map<uint64_t, std::deque<Message>> inboxes;  // by operation
  std::set<uint64_t> open;  // operations whose stream to the next rank is open
};

}  // namespace

struct InMemoryRing::State {
  explicit State(int w) : world(w), ranks(static_cast<size_t>(w)) {}

  int next(int rank) const { return (rank + 1) % world; }

  // Puts `message` into the next rank's inbox, or loses it. With mu held.
  void Deliver(int from, uint64_t operation, Message message) {
    RankState& sender = ranks[from];
    if (!message.end) {  // a planned death counts what the algorithm sends
      if (sender.sends_before_death == 0) KillLocked(from);
      if (sender.sends_before_death > 0) --sender.sends_before_death;
    }
    if (!BrokenLocked(from).ok() || sender.silent) return;
    RankState& receiver = ranks[next(from)];
    if (operation < receiver.next_operation) return;
    message.visible_at = Clock::now() + sender.delay;
    receiver.inboxes[operation].push_back(std::move(message));
    cv.notify_all();
  }

  // Why `rank`'s streams to the next rank are broken, or OK. With mu held.
  absl::Status BrokenLocked(int rank) const {
    if (ranks[rank].dead) return absl::UnavailableError("this rank's in-memory link was killed");
    if (ranks[next(rank)].dead) {
      return absl::UnavailableError("connection refused: its in-memory link was killed");
    }
    return absl::OkStatus();
  }

  void KillLocked(int rank) {
    RankState& victim = ranks[rank];
    victim.dead = true;
    victim.sends_before_death = -1;
    victim.inboxes.clear();
    RankState& receiver = ranks[next(rank)];
    for (uint64_t operation : victim.open) {
      if (operation < receiver.next_operation) continue;
      Message end;
      end.end = true;
      end.visible_at = Clock::now();  // a reset connection is noticed at once
      receiver.inboxes[operation].push_back(std::move(end));
    }
    victim.open.clear();
    cv.notify_all();
  }

  std::mutex mu;
  std::condition_variable cv;
  const int world;
  std::vector<RankState> ranks;
};

namespace {

class InMemoryOperation final : public RingLink::Operation {
 public:
  InMemoryOperation(std::shared_ptr<InMemoryRing::State> state, int rank, uint64_t operation)
      : state_(std::move(state)), rank_(rank), operation_(operation) {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->ranks[rank_].dead) state_->ranks[rank_].open.insert(operation_);
  }
  ~InMemoryOperation() override {
    if (!ended_) Abandon();
  }

  void Send(const SegmentHeader& header, const float* data, size_t floats) override {
    Message message;
    message.header = header;
    message.bytes.resize(floats * sizeof(float));
    std::memcpy(message.bytes.data(), data, message.bytes.size());
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->Deliver(rank_, operation_, std::move(message));
  }
  void SendAbort(const SegmentHeader& header, const std::string& reason) override {
    Message message;
    message.header = header;
    message.abort = reason;
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->Deliver(rank_, operation_, std::move(message));
  }
  void DropUnsent() override {}  // messages are delivered when sent: nothing waits to go

  Received Receive(Clock::time_point until, RingSegment* out) override {
    std::unique_lock<std::mutex> lock(state_->mu);
    while (true) {
      std::deque<Message>& inbox = state_->ranks[rank_].inboxes[operation_];
      const auto now = Clock::now();
      auto wake = until;
      if (!inbox.empty() && inbox.front().visible_at <= now && !inbox.front().end) {
        current_ = std::move(inbox.front());
        inbox.pop_front();
        lock.unlock();
        Expose(out);
        return Received::kSegment;
      }
      if (!state_->BrokenLocked(rank_).ok()) return Received::kSendFailed;
      if (!inbox.empty()) {
        if (inbox.front().visible_at <= now) return Received::kPreviousEnded;
        wake = std::min(wake, inbox.front().visible_at);
      }
      if (now >= until) return Received::kTimedOut;
      state_->cv.wait_until(lock, wake);
    }
  }

  bool ReceiveAbort(Clock::time_point until, std::string* reason) override {
    std::unique_lock<std::mutex> lock(state_->mu);
    while (true) {
      std::deque<Message>& inbox = state_->ranks[rank_].inboxes[operation_];
      const auto now = Clock::now();
      auto wake = until;
      for (auto it = inbox.begin(); it != inbox.end(); ++it) {
        if (it->visible_at > now) {
          wake = std::min(wake, it->visible_at);
          break;
        }
        if (it->end) return false;
        if (it->abort.empty()) continue;
        *reason = std::move(it->abort);
        inbox.erase(it);
        return true;
      }
      if (now >= until) return false;
      state_->cv.wait_until(lock, wake);
    }
  }

  absl::Status SendError() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    absl::Status broken = state_->BrokenLocked(rank_);
    return broken.ok() ? absl::UnavailableError("stream broke") : broken;
  }

  Completion Finish(Clock::time_point until) override {
    std::unique_lock<std::mutex> lock(state_->mu);
    ended_ = true;
    if (!state_->BrokenLocked(rank_).ok()) {
      EndLocked();
      return Completion::kSendFailed;
    }
    if (state_->ranks[rank_].silent) {
      // The end of the stream is lost like everything else: no acknowledgement can come.
      while (Clock::now() < until) state_->cv.wait_until(lock, until);
      EndLocked();
      return Completion::kNotAcknowledged;
    }
    EndLocked();
    return Completion::kAcknowledged;
  }

  void Abandon() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    ended_ = true;
    EndLocked();
  }

 private:
  // Closes the stream to the next rank and drops what is left of this and earlier operations.
  void EndLocked() {
    RankState& me = state_->ranks[rank_];
    if (me.open.erase(operation_) > 0) {
      Message end;
      end.end = true;
      state_->Deliver(rank_, operation_, std::move(end));
    }
    me.inboxes.erase(me.inboxes.begin(), me.inboxes.upper_bound(operation_));
    me.next_operation = std::max(me.next_operation, operation_ + 1);
  }

  // Hands out current_ in pieces cut at unaligned offsets, as a transport's buffers may be.
  void Expose(RingSegment* out) {
    out->header = current_.header;
    out->abort = std::move(current_.abort);
    out->has_data = out->abort.empty();
    out->data_bytes = current_.bytes.size();
    out->pieces.clear();
    const uint8_t* bytes = current_.bytes.data();
    const size_t size = current_.bytes.size();
    const size_t cuts[] = {std::min<size_t>(3, size), std::max<size_t>(3, size / 2 + 1), size};
    size_t from = 0;
    for (size_t cut : cuts) {
      cut = std::min(cut, size);
      if (cut > from) out->pieces.emplace_back(bytes + from, cut - from);
      from = std::max(from, cut);
    }
  }

  std::shared_ptr<InMemoryRing::State> state_;
  const int rank_;
  const uint64_t operation_;
  Message current_;  // owns the bytes of the segment last handed out by Receive
  bool ended_ = false;
};

class InMemoryLink final : public RingLink {
 public:
  InMemoryLink(std::shared_ptr<InMemoryRing::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  absl::Status Connect(int rank, const std::vector<std::string>& peers) override {
    if (rank != rank_ || static_cast<int>(peers.size()) != state_->world) {
      return absl::InvalidArgumentError(
          absl::StrCat("in-memory ring link: rank ", rank, " of ", peers.size(),
                       " connected to the link of rank ", rank_, " of ", state_->world));
    }
    return absl::OkStatus();
  }

  std::unique_ptr<Operation> Begin(uint64_t operation, std::chrono::milliseconds lifetime,
                                   std::chrono::milliseconds grace) override {
    return std::make_unique<InMemoryOperation>(state_, rank_, operation);
  }

 private:
  std::shared_ptr<InMemoryRing::State> state_;
  const int rank_;
};

}  // namespace

InMemoryRing::InMemoryRing(int world) : state_(std::make_shared<State>(world)) {}
InMemoryRing::~InMemoryRing() = default;

std::unique_ptr<RingLink> InMemoryRing::Link(int rank) {
  return std::make_unique<InMemoryLink>(state_, rank);
}

void InMemoryRing::Kill(int rank) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->KillLocked(rank);
}

std::unique_ptr<RingLink> InMemoryRing::Replace(int rank) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->ranks[rank] = RankState{};
    state_->cv.notify_all();
  }
  return Link(rank);
}

void InMemoryRing::KillAfterSending(int rank, int segments) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->ranks[rank].sends_before_death = segments;
}

void InMemoryRing::Silence(int rank) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->ranks[rank].silent = true;
}

void InMemoryRing::Delay(int rank, std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->ranks[rank].delay = delay;
}

}  // namespace strata
