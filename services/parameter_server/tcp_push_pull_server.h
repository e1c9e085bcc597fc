// The parameter server's plain-TCP data plane (services/common/wire/push_pull_frame.h): the
// per-step push/pull of every worker over one long-lived connection each, with the tensors read
// straight into a reused staging buffer and the reply written straight from the published model,
// so that no byte is copied in user space (gRPC's PushPull copies each one four times: encode,
// serialise, parse, decode). Everything else the server does stays on gRPC, which also hands out
// this plane: ParameterServer.DataPlane returns the port and the ticket, and only a caller that
// passed the run token (or TLS) gets them. With TLS on the server opens no data plane at all,
// because this one is not encrypted; nor when its job says strategy.ps_link: grpc.
//
// A connection must present its worker's ticket within the hello timeout (the whole hello, read
// by a HelloGate apart from the workers' connections, so that strangers take no slot a worker
// needs); the server then answers with a welcome, and the connection's requests go through
// the same checks and the same PartitionStore::Push and Pull as the gRPC service's, so the
// consistency policies, budgets and refusals are the same. Bounds: the number of connections,
// each request's payload (exactly the partition's size), every wait (the worker's deadline, at
// most max_wait; a worker that hangs up ends its wait) and every reply (send_timeout).
//
// A worker on this host may ask for a shared region (services/common/wire/shared_region.h): one
// per connection, sized for the partition and handed to that worker alone, through which its
// exchanges then move the tensors while the socket carries only the headers; the server copies
// the push out of the region in the pass that checks it, and applies the copy.
#pragma once

#include <atomic>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/wire/tcp_hello_gate.h"
#include "services/common/wire/tcp_socket.h"
#include "services/parameter_server/partition_store.h"

namespace strata {

struct TcpPushPullServerOptions {
  std::string listen_host;  // on a port the kernel picks
  // Admitted connections per worker: its current one and the one that replaces it after a
  // reconnect. A newer connection of a worker that has this many closes its oldest.
  int connections_per_worker = 2;
  // Connections that have not yet sent a whole hello, held apart from the workers' (the
  // HelloGate's pool, services/common/wire/tcp_hello_gate.h), and the time each has for it from
  // accept.
  size_t max_pending = 64;
  std::chrono::milliseconds hello_timeout{10000};
  // A worker that does not take its reply within this long is cut off: it would hold a thread
  // and a copy of the model.
  std::chrono::milliseconds send_timeout{60000};
  std::chrono::milliseconds max_wait{std::chrono::minutes(10)};
};

class TcpPushPullServer {
 public:
  static absl::StatusOr<std::unique_ptr<TcpPushPullServer>> Start(PartitionStore* partition,
                                                                  TcpPushPullServerOptions options);
  ~TcpPushPullServer();  // Stop()

  int port() const { return port_; }
  // The ticket that admits worker `worker` (0 <= worker < the job's workers) and no other: a
  // connection speaks for the worker its hello names, so one worker's ticket cannot open a
  // connection as another (BSP and SSP count clocks per worker).
  const tcp::Ticket& ticket(int worker) const { return tickets_.at(static_cast<size_t>(worker)); }
  // Exchanges answered through a shared region (workers on this host), for the status.
  int64_t shared_exchanges() const { return shared_exchanges_.load(std::memory_order_relaxed); }

  // Closes the listening socket and every connection and joins their threads. A connection
  // waiting inside the store is released by PartitionStore::Shutdown (call it first) or by its
  // deadline.
  void Stop();

 private:
  struct Connection {
    int fd = -1;
    uint32_t worker = 0;
    bool done = false;
    std::thread thread;
  };

  TcpPushPullServer(PartitionStore* partition, TcpPushPullServerOptions options, int port,
                    std::vector<tcp::Ticket> tickets)
      : partition_(partition),
        options_(std::move(options)),
        port_(port),
        tickets_(std::move(tickets)) {}

  // The gate's callback: a hello with the ticket of the worker it names starts that worker's
  // session on a thread of its own.
  bool Admit(int fd, const uint8_t* hello);
  void Serve(Connection* connection);
  // Joins the threads of connections that have ended; with mu_ held.
  void ReapFinished(std::unique_lock<std::mutex>& lock);

  PartitionStore* const partition_;
  const TcpPushPullServerOptions options_;
  const int port_;
  const std::vector<tcp::Ticket> tickets_;  // by worker
  std::unique_ptr<tcp::HelloGate> gate_;
  std::mutex mu_;
  std::list<Connection> connections_;
  bool stopping_ = false;
  std::atomic<int64_t> shared_exchanges_{0};
};

}  // namespace strata
