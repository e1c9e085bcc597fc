// Starts N ranks of a benchmark as real processes on loopback (the binary re-executes itself with
// --rank), and lets each rank find the others: every rank binds <host>:0 (127.0.0.1 unless it is
// given its own address), writes host:port into <dir>/port.<rank> atomically and polls for the
// other files. The directory is the only thing the ranks share, so ranks started one by one in
// different network namespaces of the same machine (bench/network/) meet the same way. Shared by
// the all-reduce benchmarks.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include "services/collective/grpc_ring_link.h"
#include "services/collective/ring_allreduce.h"
#include "services/collective/tcp_ring_link.h"
#include "services/common/base/files.h"
#include "services/common/process/child_process.h"
#include "services/common/wire/rpc.h"

namespace strata::bench {

// Parent: runs `self` once per rank with `args` + --rank r --dir DIR, waits for all of them and
// kills the rest as soon as one fails (or when `limit` passes). Returns the exit code to use.
inline int RunRanks(const std::string& self, int world, const std::vector<std::string>& args,
                    std::chrono::seconds limit) {
  char pattern[] = "/tmp/strata-bench-ring-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = pattern;
  // Each rank is a ChildProcess (its own process group, gone with this process, this process's
  // run token in its environment so that the ring calls authenticate), writing to our terminal.
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < world; ++r) {
    SpawnOptions o;
    o.name = absl::StrCat("rank-", r);
    o.argv = {self};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.insert(o.argv.end(), {"--rank", std::to_string(r), "--dir", dir});
    o.inherit_output = true;
    auto child = ChildProcess::Spawn(o);
    if (!child.ok()) {
      std::fprintf(stderr, "%s\n", std::string(child.status().message()).c_str());
      return 1;  // the ranks started so far are killed and reaped as `ranks` goes
    }
    ranks.push_back(std::move(*child));
  }
  int rc = 0;
  const auto until = std::chrono::steady_clock::now() + limit;
  for (size_t alive = ranks.size(); alive > 0;) {
    alive = 0;
    for (auto& rank : ranks) {
      if (!rank->exited() && !rank->Poll()) {
        ++alive;
      } else if (!rank->succeeded() && rc == 0) {
        std::fprintf(stderr, "%s (pid %d) %s; stopping the others\n", rank->name().c_str(),
                     rank->pid(), rank->ExitDescription().c_str());
        rc = 1;
      }
    }
    if (rc != 0) break;  // the others are killed and reaped as `ranks` goes
    if (alive > 0 && std::chrono::steady_clock::now() > until) {
      std::fprintf(stderr, "ranks still running after %lld s; killing them\n",
                   static_cast<long long>(limit.count()));
      rc = 1;
      break;
    }
    if (alive > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling pids
  }
  ranks.clear();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return rc;
}

// Child: ends a rank that succeeded. Shutting the server down waits for the previous rank's
// gRPC stream to end, and destroying the ring for its last TCP frames, so its last operation is
// acknowledged. Then it leaves without static destructors: exiting while gRPC's background threads
// finish their asynchronous shutdown aborted one rank in ~1 of 20 runs (heap corruption,
// "prior > 0").
[[noreturn]] inline void LeaveRank(std::unique_ptr<grpc::Server> server,
                                   std::unique_ptr<RingAllReduce> ring) {
  if (server != nullptr) server->Shutdown();
  ring.reset();
  std::fflush(stdout);
  std::_Exit(0);
}

// Child: dies with the parent, so an interrupted benchmark leaves no ranks behind.
inline void DieWithParent() { prctl(PR_SET_PDEATHSIG, SIGKILL); }

// Child: publishes this rank's host:port and returns every rank's host:port, by rank.
inline absl::StatusOr<std::vector<std::string>> ExchangePorts(
    const std::string& dir, int rank, int world, int port, std::chrono::seconds limit,
    const std::string& host = "127.0.0.1") {
  absl::Status written =
      WriteFileAtomic(absl::StrCat(dir, "/port.", rank), absl::StrCat(host, ":", port));
  if (!written.ok()) return written;
  std::vector<std::string> peers(world);
  const auto until = std::chrono::steady_clock::now() + limit;
  for (int r = 0; r < world; ++r) {
    while (true) {
      auto text = ReadFile(absl::StrCat(dir, "/port.", r));
      if (text.ok() && !text->empty()) {
        peers[r] = *text;
        break;
      }
      if (std::chrono::steady_clock::now() > until) {
        return absl::DeadlineExceededError(
            absl::StrCat("rank ", r, " did not publish its port within ", limit.count(), " s"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return peers;
}

// Child: the ring of rank `rank` for `transport`: "tcp" and "unix" are the gRPC link, "plain-tcp"
// the TCP link (its data plane on `host`, found through gRPC over TCP).
inline absl::StatusOr<std::unique_ptr<RingAllReduce>> MakeRing(
    int rank, const std::string& transport, const std::string& host = "127.0.0.1") {
  if (transport != "plain-tcp") return std::make_unique<RingAllReduce>(rank);
  TcpRingLinkOptions options;
  options.listen_host = host;
  auto link = TcpRingLink::Create(options);
  if (!link.ok()) return link.status();
  return std::make_unique<RingAllReduce>(rank, std::move(*link));
}

// Child: serves `ring` on `host` (and, for transport "unix", on an abstract Unix socket named
// after `dir` and the rank, as the local launcher does), meets the other ranks through `dir` and
// connects the ring to them over that transport. The server is returned in *server. Tunes the
// allocator for the ring first, as strata-worker does, so the figures are the worker's.
inline absl::Status JoinRing(RingAllReduce* ring, const std::string& transport,
                             const std::string& dir, int rank, int world,
                             std::chrono::seconds limit, std::unique_ptr<grpc::Server>* server,
                             const std::string& host = "127.0.0.1") {
  TuneAllocatorForRing();
  const auto unix_address = [&](int r) { return absl::StrCat("unix-abstract:", dir, "/rank-", r); };
  std::vector<std::string> also_listen;
  if (transport == "unix") also_listen.push_back(unix_address(rank));
  int port = 0;
  *server = StartServer(absl::StrCat(host, ":0"), {ring->service()}, &port, also_listen);
  if (!*server) return absl::UnavailableError(absl::StrCat("cannot listen on ", host));
  auto peers = ExchangePorts(dir, rank, world, port, limit, host);
  if (!peers.ok()) return peers.status();
  if (transport == "unix") {
    for (int r = 0; r < world; ++r) (*peers)[r] = unix_address(r);
  }
  return ring->Connect(*peers);
}

}  // namespace strata::bench
