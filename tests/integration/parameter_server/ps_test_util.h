// Helpers shared by the parameter-server tests: a scratch directory, a job spec, a small
// synthetic model checkpoint, and raw client calls (so tests can send what a worker never would).
#pragma once

#include <stdlib.h>

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
#include "services/common/wire/rpc.h"
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

inline std::string WriteJobSpec(const ScratchDir& dir, const std::string& training,
                                const std::string& name = "job.yaml") {
  const std::string path = dir / name;
  const std::string yaml =
      absl::StrCat("name: ps-test\nmodel: { arch: mlp }\ntraining: ", training, "\n");
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

}  // namespace strata::testing
