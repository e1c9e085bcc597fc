#include "services/common/wire/tcp_hello_gate.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

namespace strata::tcp {
namespace {

using Clock = std::chrono::steady_clock;

struct Pending {
  int fd = -1;
  Clock::time_point deadline;
  uint8_t hello[kHelloBytes];
  size_t have = 0;
};

void SetBlocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

}  // namespace

struct HelloGate::State {
  HelloGateOptions options;
  HelloGate::Admit admit;
  int listen_fd = -1;
  int wake_fd = -1;  // an eventfd: Stop writes it to end poll()
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> dropped{0};
  std::thread thread;
  std::deque<Pending> pending;  // oldest first

  void Drop(Pending& p) {
    close(p.fd);
    p.fd = -1;
    dropped.fetch_add(1, std::memory_order_relaxed);
  }

  // Reads what has arrived of `p`'s hello; false once `p` is settled (handed on or dropped).
  bool Read(Pending& p) {
    for (;;) {
      const ssize_t n = recv(p.fd, p.hello + p.have, kHelloBytes - p.have, 0);
      if (n > 0) {
        p.have += static_cast<size_t>(n);
        if (p.have < kHelloBytes) continue;
        SetBlocking(p.fd, true);
        if (admit(p.fd, p.hello)) {
          p.fd = -1;
        } else {
          close(p.fd);
          p.fd = -1;
        }
        return false;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      Drop(p);  // closed or broken before its hello
      return false;
    }
  }

  void AcceptAll() {
    for (;;) {
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && !pending.empty()) {
          Drop(pending.front());  // out of descriptors: the longest waiter makes room
          pending.pop_front();
          continue;
        }
        return;  // EAGAIN: nothing more for now (or an error poll will report again)
      }
      if (pending.size() >= options.max_pending) {
        Drop(pending.front());
        pending.pop_front();
      }
      Pending p;
      p.fd = fd;
      p.deadline = Clock::now() + options.handshake_timeout;
      pending.push_back(p);
      // A peer usually sends its hello with its first packet: read it now, before another burst
      // of accepts could make this connection the oldest.
      if (!Read(pending.back())) pending.pop_back();
    }
  }

  void Loop() {
    std::vector<pollfd> fds;
    while (!stopping.load()) {
      const auto now = Clock::now();
      // Deadlines are whole-handshake ones: they were set at accept and never move.
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->deadline <= now) {
          Drop(*it);
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      fds.assign({{wake_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}});
      auto next = now + std::chrono::hours(1);
      for (const Pending& p : pending) {
        fds.push_back({p.fd, POLLIN, 0});
        next = std::min(next, p.deadline);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
      const int ready = poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait, 1)));
      if (ready < 0) {
        if (errno == EINTR) continue;
        spdlog::warn("{}: poll failed ({}); it takes no more connections", options.what,
                     std::strerror(errno));
        return;
      }
      if (fds[0].revents != 0) break;
      // Pending first (in the order polled), then new connections.
      std::vector<int> readable;
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0) readable.push_back(fds[i].fd);
      }
      for (auto it = pending.begin(); it != pending.end();) {
        const bool ready_now =
            std::find(readable.begin(), readable.end(), it->fd) != readable.end();
        if (ready_now && !Read(*it)) {
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      if (fds[1].revents != 0) AcceptAll();
    }
  }
};

HelloGate::HelloGate(std::unique_ptr<State> state) : state_(std::move(state)) {}

absl::StatusOr<std::unique_ptr<HelloGate>> HelloGate::Start(int listen_fd, HelloGateOptions options,
                                                            Admit admit) {
  auto state = std::make_unique<State>();
  state->options = std::move(options);
  state->admit = std::move(admit);
  state->listen_fd = listen_fd;
  SetBlocking(listen_fd, false);
  state->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state->wake_fd < 0) {
    close(listen_fd);
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  State* raw = state.get();
  state->thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<HelloGate>(new HelloGate(std::move(state)));
}

HelloGate::~HelloGate() { Stop(); }

void HelloGate::Stop() {
  State& s = *state_;
  if (s.stopping.exchange(true)) return;
  const uint64_t one = 1;
  (void)!write(s.wake_fd, &one, sizeof(one));
  if (s.thread.joinable()) s.thread.join();
  for (Pending& p : s.pending) close(p.fd);
  s.pending.clear();
  close(s.listen_fd);
  close(s.wake_fd);
}

int64_t HelloGate::dropped() const { return state_->dropped.load(std::memory_order_relaxed); }

}  // namespace strata::tcp
