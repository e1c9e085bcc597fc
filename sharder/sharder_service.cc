#include "sharder/sharder_service.h"
#include "services/common/config/job_keys.h"

#include <filesystem>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/base/run_directory.h"
#include "services/common/base/run_paths.h"
#include "services/common/base/status.h"
#include "sharder/shard_job.h"

namespace strata::sharder {

grpc::Status SharderService::Shard(grpc::ServerContext* context, const v1::ShardRequest* request,
                                   v1::ShardReply* reply) {
  // The service writes and reads only where its --run-dir allows: otherwise a caller could
  // create directories anywhere, or name /etc/shadow as `config` and read its lines back in
  // the job-spec errors.
  v1::ShardRequest confined = *request;
  for (auto [path, what] : {std::pair{confined.mutable_config(), "Shard config"},
                            std::pair{confined.mutable_out_dir(), "Shard out_dir"},
                            std::pair{confined.mutable_run_dir(), "Shard run_dir"}}) {
    if (path->empty()) continue;
    auto resolved = ResolveInRunDir(run_dir_, *path, what);
    if (!resolved.ok()) {
      spdlog::warn("refused Shard request from {}: {}", context->peer(),
                   std::string(resolved.status().message()));
      return ToGrpcStatus(resolved.status());
    }
    *path = *resolved;
  }
  auto job = ResolveShardJob(confined);
  if (!job.ok()) {
    spdlog::warn("refused Shard request from {}: {}", context->peer(),
                 std::string(job.status().message()));
    return ToGrpcStatus(job.status());
  }
  // The data is read before the planning lock: a read that took long (a slow disk) must not
  // hold up every later request. The readers take regular files only and never read more than
  // a file of its size holds, so a read ends.
  auto input = LoadShardInput(*job);
  if (!input.ok()) {
    spdlog::warn("Shard request failed: {}", std::string(input.status().message()));
    return ToGrpcStatus(input.status());
  }
  std::lock_guard<std::mutex> lock(planning_);
  if (context->IsCancelled())
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while queued");
  spdlog::info("planning {} over {} workers of {} into {}", Spelled(job->plan.method), job->plan.workers,
               Spelled(job->dataset.name), job->out_dir);
  auto manifest = PlanShards(*job, std::move(*input));
  if (!manifest.ok()) {
    spdlog::warn("Shard request failed: {}", std::string(manifest.status().message()));
    return ToGrpcStatus(manifest.status());
  }
  const nlohmann::ordered_json& m = *manifest;
  reply->set_out_dir(job->out_dir);
  reply->set_manifest_path((std::filesystem::path(job->out_dir) / kShardManifestName).string());
  reply->set_method(m["method"].get<std::string>());
  reply->set_examples(m["examples"].get<int64_t>());
  reply->set_dataset_fingerprint(m["dataset"]["fingerprint"].get<std::string>());
  for (const auto& s : m["shards"]) {
    v1::ShardSummary* summary = reply->add_shards();
    summary->set_worker(s["worker"].get<int>());
    summary->set_count(s["count"].get<int64_t>());
    for (const auto& c : s["class_counts"]) summary->add_class_counts(c.get<int64_t>());
  }
  if (m.contains("clusters")) {
    for (const auto& c : m["clusters"]) {
      v1::ClusterInfo* info = reply->add_clusters();
      info->set_size(c["size"].get<int64_t>());
      info->set_broadcast(c["broadcast"].get<bool>());
    }
  }
  for (const auto& [phase, seconds] : m["seconds"].items()) {
    if (phase == "total") {
      reply->set_seconds(seconds.get<double>());
    } else {
      (*reply->mutable_phase_seconds())[phase] = seconds.get<double>();
    }
  }
  spdlog::info("wrote {} ({} examples, {:.2f} s)", reply->manifest_path(), reply->examples(),
               reply->seconds());
  return grpc::Status::OK;
}

grpc::Status SharderService::Stop(grpc::ServerContext* context, const v1::StopRequest* request,
                                  v1::StopReply* reply) {
  spdlog::info("stop requested by {}: {}", context->peer(), request->reason());
  on_stop_();
  return grpc::Status::OK;
}

}  // namespace strata::sharder
