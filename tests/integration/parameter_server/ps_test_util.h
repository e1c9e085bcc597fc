// Helpers shared by the parameter-server tests: a scratch directory, a job spec, a small
// synthetic model checkpoint, and raw client calls, over gRPC and over the plain-TCP data plane
// (so tests can send what a worker never would).
#pragma once

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include "services/common/base/files.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/push_pull_frame.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tcp_socket.h"
#include "services/common/wire/tensor_codec.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata::testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "strata-ps-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// `more`: further sections of the spec, as YAML lines.
inline std::string WriteJobSpec(const ScratchDir& dir, const std::string& training,
                                const std::string& name = "job.yaml",
                                const std::string& more = "") {
  const std::string path = dir / name;
  const std::string yaml =
      absl::StrCat("name: ps-test\nmodel: { arch: mlp }\ntraining: ", training, "\n", more);
  EXPECT_TRUE(WriteFileAtomic(path, yaml).ok());
  return path;
}

inline NamedTensor Filled(const std::string& name, std::vector<int64_t> shape, float start,
                          float step) {
  NamedTensor t = NamedTensor::Zeros({name, std::move(shape), DType::kFloat32});
  for (int64_t i = 0; i < t.spec.numel(); ++i) t.floats()[i] = start + step * static_cast<float>(i);
  return t;
}

// A whole-model checkpoint as a worker writes it: parameters, then buffers, then momentum.
struct SmallModel {
  std::vector<NamedTensor> params, buffers, momentum;

  static SmallModel Make(bool with_momentum = false) {
    SmallModel m;
    m.params = {Filled("fc1.weight", {8, 6}, 0.01f, 0.003f), Filled("fc1.bias", {8}, -0.2f, 0.05f),
                Filled("fc2.weight", {4, 8}, 0.5f, -0.01f), Filled("fc2.bias", {4}, 0.1f, 0.1f)};
    m.buffers = {Filled("bn.running_mean", {8}, 0.0f, 0.25f),
                 Filled("bn.running_var", {8}, 1.0f, 0.0f)};
    for (const auto& p : m.params) {
      m.momentum.push_back(with_momentum ? Filled(p.name(), p.spec.shape, 0.02f, 0.001f)
                                         : NamedTensor::Zeros(p.spec));
    }
    return m;
  }
  Checkpoint ToCheckpoint(int64_t version = 0) const {
    Checkpoint c;
    c.version = version;
    for (const auto& t : params) c.entries.push_back({TensorKind::kParameter, t});
    for (const auto& t : buffers) c.entries.push_back({TensorKind::kBuffer, t});
    for (const auto& t : momentum) c.entries.push_back({TensorKind::kMomentum, t});
    return c;
  }
  std::vector<TensorSpec> Specs() const {
    std::vector<TensorSpec> specs;
    for (const auto& t : params) specs.push_back(t.spec);
    for (const auto& t : buffers) specs.push_back(t.spec);
    return specs;
  }
};

using Stub = v1::ParameterServer::Stub;

inline std::unique_ptr<Stub> Connect(const std::string& address) {
  return v1::ParameterServer::NewStub(MakeChannel(address));
}

inline std::chrono::system_clock::time_point TestDeadline() {
  return DeadlineAfter(std::chrono::seconds(60));
}

inline v1::PushRequest Header(int worker, int64_t version, int64_t samples = 4, int64_t clock = 0) {
  v1::PushRequest r;
  r.mutable_header()->set_worker(worker);
  r.mutable_header()->set_version(version);
  r.mutable_header()->set_samples(samples);
  r.mutable_header()->set_clock(clock);
  return r;
}

inline std::vector<v1::PushRequest> Chunks(const std::vector<NamedTensor>& tensors,
                                           size_t chunk_bytes = 1 << 20) {
  std::vector<v1::PushRequest> out;
  ChunkOptions options;
  options.chunk_bytes = chunk_bytes;
  auto chunks = EncodeAll(tensors, options);
  EXPECT_TRUE(chunks.ok()) << chunks.status();
  if (!chunks.ok()) return out;
  for (auto& c : *chunks) {
    v1::PushRequest r;
    *r.mutable_chunk() = std::move(c);
    out.push_back(std::move(r));
  }
  return out;
}

// Sends the messages as one Push stream; returns the server's answer.
inline grpc::Status RawPush(Stub& stub, const std::vector<v1::PushRequest>& messages,
                            v1::PushReply* reply = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(TestDeadline());
  v1::PushReply ignored;
  auto writer = stub.Push(&context, reply ? reply : &ignored);
  for (const auto& m : messages) {
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

struct Pulled {
  grpc::Status status;
  int64_t version = -1;
  double global_epoch = 0;
  std::vector<NamedTensor> tensors;
  const NamedTensor* Find(const std::string& name) const {
    for (const auto& t : tensors) {
      if (t.name() == name) return &t;
    }
    return nullptr;
  }
};

template <typename Stream>
inline void ReadPulled(Stream* stream, Pulled* out) {
  v1::PullResponse response;
  std::vector<v1::TensorChunk> chunks;
  bool first = true;
  while (stream->Read(&response)) {
    if (first) {
      EXPECT_TRUE(response.has_header());
      out->version = response.header().version();
      out->global_epoch = response.header().global_epoch();
      first = false;
      continue;
    }
    chunks.push_back(response.chunk());
  }
  auto tensors = DecodeAll(chunks);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  if (tensors.ok()) out->tensors = std::move(*tensors);
}

inline Pulled RawPull(Stub& stub, int worker = -1, int64_t clock = 0) {
  grpc::ClientContext context;
  context.set_deadline(TestDeadline());
  v1::PullRequest request;
  request.set_worker(worker);
  request.set_clock(clock);
  auto reader = stub.Pull(&context, request);
  Pulled out;
  ReadPulled(reader.get(), &out);
  out.status = reader->Finish();
  return out;
}

inline Pulled RawPushPull(Stub& stub, const std::vector<v1::PushRequest>& messages) {
  grpc::ClientContext context;
  context.set_deadline(TestDeadline());
  auto stream = stub.PushPull(&context);
  for (const auto& m : messages) {
    if (!stream->Write(m)) break;
  }
  stream->WritesDone();
  Pulled out;
  ReadPulled(stream.get(), &out);
  out.status = stream->Finish();
  return out;
}

// ParameterServer.SaveCheckpoint of `path` (*reply gets the answer when given).
inline grpc::Status SaveCheckpointTo(Stub& stub, const std::string& path,
                                     v1::CheckpointReply* reply = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(TestDeadline());
  v1::CheckpointRequest request;
  request.set_path(path);
  v1::CheckpointReply ignored;
  return stub.SaveCheckpoint(&context, request, reply != nullptr ? reply : &ignored);
}

inline v1::ServerStatus GetStatus(Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(TestDeadline());
  v1::ServerStatus status;
  grpc::Status s = stub.GetStatus(&context, v1::ServerStatusRequest(), &status);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return status;
}

// Polls `condition` (every 10 ms) until it holds or 60 s pass.
template <typename F>
inline bool PollUntil(F&& condition) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < give_up) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling, not synchronisation
  }
  return condition();
}

// Strangers on a data port: connections that each send one byte of a hello and then hold the
// connection open, as anyone on the machine can without a ticket. With `pace` set, a thread keeps
// them up: one more byte on each every `pace`, and a new connection for each one the server
// closes, until destroyed.
class Strangers {
 public:
  Strangers(int port, int count, std::chrono::milliseconds pace = std::chrono::milliseconds(0))
      : port_(port) {
    for (int i = 0; i < count; ++i) {
      const int fd = Open();
      if (fd >= 0) fds_.push_back(fd);
    }
    if (pace.count() > 0 && pipe(wake_) == 0) {
      keeper_ = std::thread([this, pace] { Keep(pace); });
    }
  }
  ~Strangers() {
    if (keeper_.joinable()) {
      (void)!write(wake_[1], "x", 1);
      keeper_.join();
    }
    if (wake_[0] >= 0) {
      close(wake_[0]);
      close(wake_[1]);
    }
    for (int fd : fds_) close(fd);
  }
  size_t size() const { return fds_.size(); }

 private:
  int Open() {
    auto fd = tcp::DialTcp("127.0.0.1", port_, std::chrono::seconds(10));
    if (!fd.ok()) return -1;  // refused while the server is busy closing others
    const uint8_t byte = 0x53;
    (void)tcp::SendAll(*fd, &byte, 1, nullptr, 0);
    return *fd;
  }
  void Keep(std::chrono::milliseconds pace) {
    std::vector<pollfd> polled;
    auto next_byte = std::chrono::steady_clock::now() + pace;
    for (;;) {
      polled.assign(1, {wake_[0], POLLIN, 0});
      for (int fd : fds_) polled.push_back({fd, POLLIN, 0});
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
          next_byte - std::chrono::steady_clock::now());
      poll(polled.data(), polled.size(), static_cast<int>(std::max<int64_t>(wait.count(), 0)));
      if (polled[0].revents != 0) return;
      const bool trickle = std::chrono::steady_clock::now() >= next_byte;
      if (trickle) next_byte += pace;
      for (size_t i = 0; i < fds_.size(); ++i) {
        bool closed = false;
        if (polled[i + 1].revents != 0) {
          char c;
          closed = recv(fds_[i], &c, 1, MSG_DONTWAIT) <= 0;
        }
        const uint8_t byte = 0x53;
        if (!closed && trickle) closed = !tcp::SendAll(fds_[i], &byte, 1, nullptr, 0).ok();
        if (closed) {
          close(fds_[i]);
          fds_[i] = Open();
          if (fds_[i] < 0) fds_[i] = Open();
        }
      }
      fds_.erase(std::remove(fds_.begin(), fds_.end(), -1), fds_.end());
    }
  }

  const int port_;
  std::vector<int> fds_;
  int wake_[2] = {-1, -1};
  std::thread keeper_;
};

// A slow hello: one byte, then another each time `pace` passes without the server closing the
// connection, for at most `limit`. True once the server has closed it. A receive timeout that
// restarts with every byte never closes it; a deadline for the whole hello does.
inline bool TrickleUntilClosed(int port, std::chrono::milliseconds pace,
                               std::chrono::seconds limit) {
  auto fd = tcp::DialTcp("127.0.0.1", port, std::chrono::seconds(10));
  if (!fd.ok()) return false;
  const auto give_up = std::chrono::steady_clock::now() + limit;
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() < give_up) {
    const uint8_t byte = 0x53;
    if (!tcp::SendAll(*fd, &byte, 1, nullptr, 0).ok()) {
      closed = true;
      break;
    }
    pollfd p{*fd, POLLIN, 0};
    // Waits for the server's close (an event), or paces the next byte.
    if (poll(&p, 1, static_cast<int>(pace.count())) > 0) {
      char c;
      closed = recv(*fd, &c, 1, 0) <= 0;
    }
  }
  close(*fd);
  return closed;
}

// A raw client of the push/pull data plane: the test writes every byte itself.
class DataPlaneClient {
 public:
  DataPlaneClient(int port, const tcp::Ticket& ticket, uint32_t worker = 0) {
    auto fd = tcp::DialTcp("127.0.0.1", port, std::chrono::seconds(10));
    EXPECT_TRUE(fd.ok()) << fd.status();
    fd_ = fd.ok() ? *fd : -1;
    uint8_t hello[tcp::kHelloBytes];
    tcp::EncodeHello(push_pull_wire::kHelloMagic, push_pull_wire::kVersion, ticket, worker, hello);
    EXPECT_TRUE(tcp::SendAll(fd_, hello, sizeof(hello), nullptr, 0).ok());
    // A generous bound, not a synchronisation: a server that kept silent would fail the test.
    tcp::SetReceiveTimeout(fd_, std::chrono::seconds(60));
    // An admitted connection is welcomed (a reply header with code 0); a refused one is closed.
    uint8_t welcome[push_pull_wire::kReplyBytes];
    push_pull_wire::Reply reply;
    admitted_ = tcp::ReceiveExact(fd_, welcome, sizeof(welcome)).ok() &&
                push_pull_wire::DecodeReply(welcome, &reply).ok() && reply.code == 0;
  }
  ~DataPlaneClient() { close(fd_); }
  bool admitted() const { return admitted_; }

  struct Answer {
    absl::Status status;  // the reply's code and message
    push_pull_wire::Reply reply;
    std::vector<float> model;
    bool closed = false;  // the server ended the connection instead of answering
  };

  absl::Status SendRaw(const void* data, size_t bytes) {
    return tcp::SendAll(fd_, data, bytes, nullptr, 0);
  }
  absl::Status Send(const push_pull_wire::Request& r, const std::vector<float>& payload) {
    uint8_t header[push_pull_wire::kRequestBytes];
    push_pull_wire::EncodeRequest(r, header);
    return tcp::SendAll(fd_, header, sizeof(header), payload.data(),
                        payload.size() * sizeof(float));
  }
  // `region`: the request was a shared exchange, and a model is read from the region's reply
  // area instead of the socket.
  Answer Receive(const SharedRegion* region = nullptr) {
    Answer a;
    uint8_t raw[push_pull_wire::kReplyBytes];
    absl::Status got = tcp::ReceiveExact(fd_, raw, sizeof(raw));
    if (!got.ok()) {
      a.closed = true;
      a.status = got;
      return a;
    }
    EXPECT_TRUE(push_pull_wire::DecodeReply(raw, &a.reply).ok());
    if (a.reply.code != 0) {
      std::string message(a.reply.message_bytes, '\0');
      EXPECT_TRUE(tcp::ReceiveExact(fd_, message.data(), message.size()).ok());
      a.status = absl::Status(static_cast<absl::StatusCode>(a.reply.code), message);
      return a;
    }
    a.model.resize(a.reply.payload_bytes / sizeof(float));
    if (region != nullptr) {
      EXPECT_LE(a.reply.payload_bytes, region->area_bytes());
      if (a.reply.payload_bytes <= region->area_bytes()) {
        std::memcpy(a.model.data(), region->reply_area(), a.reply.payload_bytes);
      }
      return a;
    }
    EXPECT_TRUE(tcp::ReceiveExact(fd_, a.model.data(), a.reply.payload_bytes).ok());
    return a;
  }
  // Asks for a shared region sized `area_bytes` and attaches it; the error is the server's
  // refusal or the attach's.
  absl::StatusOr<std::unique_ptr<SharedRegion>> Share(uint64_t fingerprint, size_t area_bytes,
                                                      uint32_t worker = 0) {
    push_pull_wire::Request r;
    r.kind = push_pull_wire::RequestKind::kShareMemory;
    r.worker = worker;
    r.layout_fingerprint = fingerprint;
    Answer a = Call(r);
    if (!a.status.ok()) return a.status;
    if (a.reply.payload_bytes != push_pull_wire::kShareOfferBytes) {
      return absl::InternalError("a share reply without an offer");
    }
    return SharedRegion::Attach(
        push_pull_wire::DecodeShareOffer(reinterpret_cast<const uint8_t*>(a.model.data())),
        area_bytes);
  }
  // A shared exchange: `payload` goes into the region's push area, the model comes back in its
  // reply area.
  Answer CallShared(push_pull_wire::Request r, const SharedRegion& region,
                    const std::vector<float>& payload) {
    std::memcpy(region.push_area(), payload.data(),
                std::min(payload.size() * sizeof(float), region.area_bytes()));
    r.kind = push_pull_wire::RequestKind::kExchangeShared;
    if (absl::Status sent = Send(r, {}); !sent.ok()) return {sent, {}, {}, true};
    return Receive(&region);
  }
  Answer Call(const push_pull_wire::Request& r, const std::vector<float>& payload = {}) {
    if (!admitted_) return {absl::UnavailableError("not admitted"), {}, {}, true};
    if (absl::Status sent = Send(r, payload); !sent.ok()) return {sent, {}, {}, true};
    return Receive();
  }
  // True once the server has closed the connection (read returns end of stream).
  bool ClosedByServer() {
    if (!admitted_) return true;  // closed instead of welcomed
    char byte = 0;
    return recv(fd_, &byte, 1, 0) <= 0;
  }

 private:
  int fd_ = -1;
  bool admitted_ = false;
};

}  // namespace strata::testing
