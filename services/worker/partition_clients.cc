#include "services/worker/partition_clients.h"

#include <algorithm>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <spdlog/spdlog.h>

#include "services/common/base/status.h"
#include "services/common/wire/partition_plan.h"
#include "services/common/wire/rpc.h"
#include "services/worker/grpc_partition_link.h"
#include "services/worker/tcp_partition_link.h"

namespace strata {

std::unique_ptr<PartitionLink> MakeNetworkPartitionLink(const PartitionClientsOptions& options,
                                                        PartitionLinkOptions link) {
  std::shared_ptr<grpc::Channel> channel = MakeChannel(link.address);
  if (options.tcp_data_plane) {
    return std::make_unique<TcpPartitionLink>(std::move(link), options.shared_memory,
                                              std::move(channel));
  }
  return std::make_unique<GrpcPartitionLink>(std::move(link), std::move(channel));
}

absl::StatusOr<std::unique_ptr<PartitionClients>> PartitionClients::Create(
    const PartitionClientsOptions& options, const Trainer& trainer) {
  if (options.servers.empty())
    return absl::InvalidArgumentError("push/pull needs at least one parameter server");
  if (options.rank < 0)
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " is negative"));
  if (options.deadline.count() <= 0)
    return absl::InvalidArgumentError("push/pull deadline must be positive");
  std::vector<ModelTensor> model;
  std::vector<TensorSpec> specs;
  for (const auto& e : trainer.parameters().entries()) model.push_back({e.spec, false, e.offset});
  for (const auto& e : trainer.buffers().entries()) model.push_back({e.spec, true, e.offset});
  for (const auto& t : model) specs.push_back(t.spec);
  STRATA_ASSIGN_OR_RETURN(
      PartitionPlan plan,
      PlanPartitions(specs, static_cast<int>(options.servers.size()), options.split_tensors));
  std::vector<ServerLink> servers(options.servers.size());
  for (size_t i = 0; i < servers.size(); ++i) {
    servers[i].index = static_cast<int>(i);
    servers[i].address = options.servers[i];
    PartitionLinkOptions link;
    link.partition = static_cast<int>(i);
    link.address = options.servers[i];
    link.rank = options.rank;
    link.chunk_bytes = options.chunk_bytes;
    link.half_precision = options.half_precision;
    // A piece is a contiguous range of its tensor's floats in the trainer's buffers.
    for (const TensorPiece& piece : plan.pieces_of[i]) {
      const ModelTensor& whole = model[piece.tensor];
      link.tensors.push_back({piece.spec, whole.is_buffer, whole.offset + piece.float_offset});
    }
    if (options.make_link) {
      STRATA_ASSIGN_OR_RETURN(servers[i].link, options.make_link(link));
    } else {
      servers[i].link = MakeNetworkPartitionLink(options, std::move(link));
    }
  }
  return std::unique_ptr<PartitionClients>(new PartitionClients(options, std::move(servers),
                                                                trainer.parameters().total_floats(),
                                                                trainer.buffers().total_floats()));
}

absl::Status PartitionClients::ForEachServer(const std::function<absl::Status(ServerLink&)>& f) {
  std::vector<absl::Status> results(servers_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i + 1 < servers_.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = f(servers_[i]); });
  }
  results.back() = f(servers_.back());
  for (auto& t : threads) t.join();
  for (const auto& r : results) STRATA_RETURN_IF_ERROR(r);
  return absl::OkStatus();
}

std::vector<std::string> PartitionClients::LinkPaths() const {
  std::vector<std::string> paths;
  for (const ServerLink& s : servers_) {
    paths.push_back(
        absl::StrCat("parameter server ", s.index, " (", s.address, "): ", s.link->Path()));
  }
  return paths;
}

uint64_t PartitionClients::LinkPathStamp() const {
  uint64_t newest = 0;
  for (const ServerLink& s : servers_) newest = std::max(newest, s.link->path_stamp());
  return newest;
}

void PartitionClients::MarkInstalled() {
  for (ServerLink& s : servers_) s.installed_version = s.version;
}

void PartitionClients::ReadBudget(bool* has_budget, bool* budget_spent) const {
  for (const ServerLink& s : servers_) {
    *has_budget = *has_budget || s.sample_budget > 0;
    *budget_spent = *budget_spent || (s.sample_budget > 0 && s.samples >= s.sample_budget);
  }
}

PushFields PartitionClients::For(const ServerLink& s, PushFields fields) {
  if (fields.version < 0) fields.version = s.installed_version;
  return fields;
}

absl::Status PartitionClients::PullInto(ServerLink& s, int64_t clock, float* parameters,
                                        float* buffers) {
  STRATA_ASSIGN_OR_RETURN(const PartitionReply reply,
                          s.link->Pull(clock, parameters, buffers, Call()));
  s.Note(reply);
  return absl::OkStatus();
}

absl::Status PartitionClients::PushTo(ServerLink& s, const PushFields& fields,
                                      const float* gradients, const float* buffers) {
  STRATA_ASSIGN_OR_RETURN(s.pushed_version,
                          s.link->Push(For(s, fields), gradients, buffers, Call()));
  return absl::OkStatus();
}

absl::Status PartitionClients::Exchange(ServerLink& s, const PushFields& fields,
                                        const ExchangeBuffers& x) {
  absl::StatusOr<PartitionReply> exchanged = s.link->Exchange(For(s, fields), x, Call());
  if (exchanged.ok()) {
    s.Note(*exchanged);
    return absl::OkStatus();
  }
  if (exchanged.status().code() != absl::StatusCode::kUnavailable) return exchanged.status();
  const auto since = std::chrono::steady_clock::now();
  spdlog::warn("{}; waiting up to {} s for it to come back",
               std::string(exchanged.status().message()), options_.deadline.count() / 1000);
  for (;;) {
    // A poll interval, not a synchronisation: the restart takes what it takes.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    absl::Status pulled = PullInto(s, fields.clock, x.parameters_in, x.buffers_in);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    if (pulled.ok()) {
      spdlog::info("parameter server {} answers again after {:.1f} s, at version {}", s.index,
                   waited, s.version);
      return absl::OkStatus();
    }
    if (pulled.code() != absl::StatusCode::kUnavailable ||
        waited * 1000 > static_cast<double>(options_.deadline.count())) {
      return Annotate(pulled,
                      absl::StrFormat("after waiting %.0f s for the server to return", waited));
    }
  }
}

}  // namespace strata
