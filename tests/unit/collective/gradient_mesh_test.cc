// GradientMesh, the stream replicas' gradient exchange, between meshes of one process on real gRPC
// servers: gradients arrive once and in the sender's order, and what a hostile or broken caller
// sends (no token, a stranger's rank, a gap, a wrong size, a repeat after the end) is refused
// without reaching the replica's model.
#include "services/collective/gradient_mesh.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "services/common/wire/rpc.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr size_t kFloats = 5;

struct MeshNode {
  std::unique_ptr<GradientMesh> mesh;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

MeshNode StartNode(int rank, int world) {
  GradientMeshOptions options;
  options.rank = rank;
  options.world = world;
  options.parameter_floats = kFloats;
  options.deadline = std::chrono::seconds(30);
  MeshNode node;
  node.mesh = std::make_unique<GradientMesh>(options);
  int port = 0;
  node.server = StartServer("127.0.0.1:0", {node.mesh.get()}, &port);
  EXPECT_NE(port, 0);
  node.address = "127.0.0.1:" + std::to_string(port);
  return node;
}

std::shared_ptr<v1::StreamGradient> Gradient(int sender, int world, uint64_t index, float value) {
  auto g = std::make_shared<v1::StreamGradient>();
  g->set_sender(sender);
  g->set_world(world);
  g->set_index(index);
  g->set_count(1);
  for (int r = 0; r < world; ++r) g->add_clock(r == sender ? static_cast<int64_t>(index) : 0);
  std::vector<float> values(kFloats, value);
  g->set_values(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return g;
}

// Takes from `mesh` until `count` messages came or 60 s passed.
std::vector<std::unique_ptr<v1::StreamGradient>> TakeAll(GradientMesh& mesh, size_t count) {
  std::vector<std::unique_ptr<v1::StreamGradient>> all;
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (all.size() < count && Clock::now() < until) {
    auto taken = mesh.Take(Clock::now() + std::chrono::milliseconds(200));
    EXPECT_TRUE(taken.ok()) << taken.status();
    if (!taken.ok()) break;
    for (auto& g : *taken) all.push_back(std::move(g));
  }
  return all;
}

// Sends `messages` to `address` on a stream of its own, as a caller with (or without) the token.
grpc::Status SendRaw(const std::string& address, const std::vector<v1::StreamGradient>& messages,
                     bool with_token = true) {
  auto channel = with_token ? MakeChannel(address)
                            : grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::StreamReplica::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(std::chrono::seconds(30)));
  v1::StreamGradientAck ack;
  auto stream = stub->Gradients(&context, &ack);
  for (const auto& m : messages) {
    if (!stream->Write(m)) break;
  }
  stream->WritesDone();
  return stream->Finish();
}

TEST(GradientMesh, ThreeReplicasReceiveEveryOtherReplicasGradientsOnceInOrder) {
  const int world = 3;
  std::vector<MeshNode> nodes;
  for (int r = 0; r < world; ++r) nodes.push_back(StartNode(r, world));
  std::vector<std::string> peers;
  for (const auto& n : nodes) peers.push_back(n.address);
  for (auto& n : nodes) ASSERT_TRUE(n.mesh->Connect(peers).ok());
  const int per_sender = 40;
  for (int r = 0; r < world; ++r) {
    for (int i = 0; i < per_sender; ++i) {
      ASSERT_TRUE(nodes[r].mesh->Broadcast(Gradient(r, world, i, r * 1000 + i)).ok());
    }
  }
  for (int r = 0; r < world; ++r) {
    auto got = TakeAll(*nodes[r].mesh, (world - 1) * per_sender);
    ASSERT_EQ(got.size(), static_cast<size_t>((world - 1) * per_sender));
    std::vector<int> next(world, 0);
    for (const auto& g : got) {
      ASSERT_NE(static_cast<int>(g->sender()), r);
      EXPECT_EQ(g->index(), static_cast<uint64_t>(next[g->sender()]++));
      const float* v = reinterpret_cast<const float*>(g->values().data());
      EXPECT_EQ(v[kFloats - 1], g->sender() * 1000.0f + g->index());
    }
  }
  for (auto& n : nodes) {
    EXPECT_TRUE(n.mesh->Close(Clock::now() + std::chrono::seconds(30)).ok());
  }
  for (auto& n : nodes) n.server->Shutdown(DeadlineAfter(std::chrono::seconds(2)));
}

TEST(GradientMesh, ACallWithoutTheTokenOrFromAStrangerReachesNothing) {
  MeshNode node = StartNode(1, 2);
  v1::StreamGradient g = *Gradient(0, 2, 0, 1.0f);
  EXPECT_EQ(SendRaw(node.address, {g}, /*with_token=*/false).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::StreamGradient stranger = *Gradient(0, 2, 0, 1.0f);
  stranger.set_sender(7);
  grpc::Status s = SendRaw(node.address, {stranger});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("no replica 7"));
  v1::StreamGradient self = *Gradient(1, 2, 0, 1.0f);  // the receiver's own rank
  EXPECT_EQ(SendRaw(node.address, {self}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // None of it arrived, and the mesh still takes the real replica 0's gradient 0.
  auto taken = node.mesh->Take(Clock::now());
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(taken->empty());
  EXPECT_TRUE(SendRaw(node.address, {g}).ok());
  EXPECT_EQ(TakeAll(*node.mesh, 1).size(), 1u);
  node.server->Shutdown(DeadlineAfter(std::chrono::seconds(2)));
}

// A gap, a repeat, a wrong size or a wrong clock from a replica means gradients were lost or
// doubled: the replicas could no longer agree, so the mesh fails (Take says why, naming the
// sender) rather than train on.
TEST(GradientMesh, AGapARepeatOrAWrongSizeFailsTheMeshNamingTheSender) {
  struct Case {
    const char* name;
    std::vector<v1::StreamGradient> messages;
    const char* says;
  };
  v1::StreamGradient short_values = *Gradient(0, 2, 0, 1.0f);
  short_values.mutable_values()->resize(7);
  v1::StreamGradient short_clock = *Gradient(0, 2, 0, 1.0f);
  short_clock.clear_clock();
  v1::StreamGradient no_count = *Gradient(0, 2, 0, 1.0f);
  no_count.set_count(0);
  v1::StreamGradient two_counted = *Gradient(0, 2, 0, 1.0f);
  two_counted.set_count(2);
  v1::StreamGradient end;
  end.set_sender(0);
  end.set_world(2);
  end.set_index(1);
  end.set_end(true);
  v1::StreamGradient other_world = *Gradient(0, 3, 0, 1.0f);
  const std::vector<Case> cases = {
      {"gap", {*Gradient(0, 2, 0, 1), *Gradient(0, 2, 2, 1)}, "where 1 was due"},
      {"repeat", {*Gradient(0, 2, 0, 1), *Gradient(0, 2, 0, 1)}, "where 1 was due"},
      {"size", {short_values}, "7 bytes for a model of 5 floats"},
      {"clock", {short_clock}, "a clock of 0 entries for 1 gradient(s) of 2 replicas"},
      {"count", {no_count}, "a message of 0 gradients"},
      {"count beyond the clock", {two_counted}, "a clock of 2 entries for 2 gradient(s)"},
      {"world", {other_world}, "a job of 3 replicas"},
      {"after end", {*Gradient(0, 2, 0, 1), end, *Gradient(0, 2, 1, 1)}, "after its end"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    MeshNode node = StartNode(1, 2);
    grpc::Status s = SendRaw(node.address, c.messages);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr(c.says));
    if (std::string(c.name) != "after end") {
      auto taken = node.mesh->Take(Clock::now() + std::chrono::seconds(5));
      ASSERT_FALSE(taken.ok());
      EXPECT_THAT(std::string(taken.status().message()), HasSubstr("replica 0"));
    }
    node.server->Shutdown(DeadlineAfter(std::chrono::seconds(2)));
  }
}

}  // namespace
}  // namespace strata
