// strata-bench-ps: parameter-server benchmarks with real processes on loopback.
//
//   roundtrip  push+pull round trips (one PushPull per partition, partitions concurrently, as the
//              push/pull synchroniser does) of a synthetic model of a given size, from C client
//              threads against P strata-ps processes: median latency and MB/s (both directions).
//   train      ASP training throughput: one strata-ps and N strata-worker processes on a job spec;
//              samples/s over a measurement window after a warm-up (worker GetStatus steps).
//
// docs/benchmarks.md has the commands and figures; bench/parameter_server/run_ps_bench.sh runs
// them alternating with PyTorch DDP.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <CLI/CLI.hpp>

#include "services/common/base/files.h"
#include "services/common/base/status.h"
#include "services/common/config/job_keys.h"
#include "services/common/config/job_spec.h"
#include "services/common/ml/dataset.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/partition_plan.h"
#include "services/common/wire/rpc.h"
#include "services/parameter_server/ps_process.h"
#include "strata/v1/parameter_server.grpc.pb.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "strata-bench-ps: %s\n", std::string(s.message()).c_str());
  return 1;
}

std::string MakeScratch() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "strata-bench-ps-XXXXXX").string();
  return mkdtemp(pattern.data());
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// ---------------------------------------------------------------------------------------------
// roundtrip

struct RoundTripOptions {
  double size_mb = 1.1;
  int clients = 1, partitions = 1, iterations = 30, warmup = 3, tensors = 16;
  size_t chunk_bytes = 1 << 20;
  std::string ps_binary, work_dir;
};

// A partition's push, encoded once and re-sent every iteration (the bench measures transport and
// server work, not the client's encoding).
std::vector<v1::PushRequest> EncodePush(int worker, const std::vector<TensorPiece>& mine,
                                        size_t chunk_bytes) {
  std::vector<v1::PushRequest> out(1);
  out[0].mutable_header()->set_worker(worker);
  out[0].mutable_header()->set_samples(1);
  for (const TensorPiece& piece : mine) {
    const TensorSpec& spec = piece.spec;
    std::string bytes(spec.bytes(), '\0');
    std::vector<float> grad(spec.numel(), 1e-7f);
    std::memcpy(bytes.data(), grad.data(), bytes.size());
    for (size_t offset = 0; offset < bytes.size(); offset += chunk_bytes) {
      v1::PushRequest r;
      if (offset == 0) {
        r.mutable_chunk()->mutable_header()->set_name(spec.name);
        for (int64_t d : spec.shape) r.mutable_chunk()->mutable_header()->add_shape(d);
        r.mutable_chunk()->mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
      }
      r.mutable_chunk()->set_offset(offset);
      r.mutable_chunk()->set_data(bytes.substr(offset, chunk_bytes));
      out.push_back(std::move(r));
    }
  }
  return out;
}

absl::Status PushPullOnce(v1::ParameterServer::Stub& stub, std::vector<v1::PushRequest>& push,
                          int64_t* version) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(std::chrono::seconds(120)));
  auto stream = stub.PushPull(&context);
  push[0].mutable_header()->set_version(*version);
  for (const auto& m : push) {
    if (!stream->Write(m)) break;
  }
  stream->WritesDone();
  v1::PullResponse response;
  while (stream->Read(&response)) {
    if (response.has_header()) *version = response.header().version();
  }
  return FromGrpcStatus(stream->Finish(), "push/pull");
}

absl::Status RunRoundTrip(const RoundTripOptions& o) {
  const int64_t total_floats = static_cast<int64_t>(o.size_mb * 1e6 / 4);
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < o.tensors; ++i) {
    tensors.push_back({absl::StrCat("t", i), {total_floats / o.tensors}, DType::kFloat32});
  }
  Checkpoint checkpoint;
  for (const auto& spec : tensors)
    checkpoint.entries.push_back({TensorKind::kParameter, NamedTensor::Zeros(spec)});
  const std::string ckpt = o.work_dir + "/model.ckpt", job = o.work_dir + "/job.yaml";
  STRATA_RETURN_IF_ERROR(WriteCheckpoint(ckpt, checkpoint));
  STRATA_RETURN_IF_ERROR(
      WriteFileAtomic(job, "name: bench\ntraining: { lr: 0.001, momentum: 0.9 }\n"));
  STRATA_ASSIGN_OR_RETURN(PartitionPlan plan, PlanPartitions(tensors, o.partitions));

  std::vector<std::unique_ptr<PsProcess>> servers;
  for (int p = 0; p < o.partitions; ++p) {
    PsProcessOptions ps;
    ps.binary = o.ps_binary;
    ps.work_dir = o.work_dir;
    ps.config = job;
    ps.partition = p;
    ps.partitions = o.partitions;
    ps.workers = o.clients;
    ps.consistency = "asp";
    ps.train_examples = 1000000;
    ps.init_checkpoint = ckpt;
    STRATA_ASSIGN_OR_RETURN(auto server, PsProcess::Launch(ps));
    servers.push_back(std::move(server));
  }

  std::mutex mu;
  std::vector<double> latencies_ms;
  std::vector<absl::Status> errors(o.clients);
  std::atomic<int> ready{0};
  Clock::time_point start, end;
  auto client = [&](int c) {
    std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs;
    std::vector<std::vector<v1::PushRequest>> pushes;
    std::vector<int64_t> versions(o.partitions, 0);
    for (int p = 0; p < o.partitions; ++p) {
      stubs.push_back(v1::ParameterServer::NewStub(MakeChannel(servers[p]->address())));
      pushes.push_back(EncodePush(c, plan.pieces_of[p], o.chunk_bytes));
    }
    std::vector<double> mine;
    for (int it = 0; it < o.warmup + o.iterations; ++it) {
      if (it == o.warmup) {
        // Every client starts measuring together, so MB/s is for C concurrent clients.
        ++ready;
        while (ready.load() < o.clients) std::this_thread::yield();
        std::lock_guard<std::mutex> lock(mu);
        if (c == 0) start = Clock::now();
      }
      const auto t0 = Clock::now();
      std::vector<absl::Status> results(o.partitions);
      std::vector<std::thread> threads;
      for (int p = 1; p < o.partitions; ++p) {
        threads.emplace_back(
            [&, p] { results[p] = PushPullOnce(*stubs[p], pushes[p], &versions[p]); });
      }
      results[0] = PushPullOnce(*stubs[0], pushes[0], &versions[0]);
      for (auto& t : threads) t.join();
      for (const auto& r : results) {
        if (!r.ok()) {
          errors[c] = r;
          return;
        }
      }
      if (it >= o.warmup)
        mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::lock_guard<std::mutex> lock(mu);
    latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
    end = std::max(end, Clock::now());
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c) threads.emplace_back(client, c);
  for (auto& t : threads) t.join();
  for (const auto& e : errors) STRATA_RETURN_IF_ERROR(e);
  const double seconds = std::chrono::duration<double>(end - start).count();
  const double model_mb = static_cast<double>(total_floats / o.tensors * o.tensors) * 4 / 1e6;
  // Each round trip moves the model twice (gradients up, weights down).
  const double mb_per_s = 2 * model_mb * o.clients * o.iterations / seconds;
  std::printf(
      "roundtrip size_mb=%.2f partitions=%d clients=%d iterations=%d median_ms=%.2f p90_ms=%.2f "
      "MB_per_s=%.0f\n",
      model_mb, o.partitions, o.clients, o.iterations, Median(latencies_ms),
      Percentile(latencies_ms, 0.9), mb_per_s);
  std::fflush(stdout);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// train

struct TrainOptions {
  std::string config, bin_dir, work_dir;
  int workers = 2, partitions = 1;
  double warmup_s = 15, window_s = 30;
};

absl::StatusOr<v1::WorkerStatus> WorkerStatus(v1::Worker::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(std::chrono::seconds(30)));
  v1::WorkerStatus status;
  STRATA_RETURN_IF_ERROR(FromGrpcStatus(
      stub.GetStatus(&context, v1::WorkerStatusRequest(), &status), "worker status"));
  if (!status.error().empty()) {
    return absl::InternalError(absl::StrCat("worker ", status.rank(), ": ", status.error()));
  }
  return status;
}

absl::StatusOr<int64_t> TotalSteps(std::vector<std::unique_ptr<v1::Worker::Stub>>& stubs) {
  int64_t total = 0;
  for (auto& stub : stubs) {
    STRATA_ASSIGN_OR_RETURN(v1::WorkerStatus s, WorkerStatus(*stub));
    total += s.step();
  }
  return total;
}

absl::Status RunTrain(const TrainOptions& o) {
  STRATA_ASSIGN_OR_RETURN(v1::ResolvedJob job, LoadJobSpec(o.config));
  DatasetOptions data = DatasetOptionsFor(job);
  data.max_test = 1;  // only the training split's size is needed
  STRATA_ASSIGN_OR_RETURN(Dataset dataset, LoadDataset(data));
  const std::string ckpt = o.work_dir + "/init.ckpt";
  const std::string command =
      absl::StrCat("'", o.bin_dir, "/strata-evaluator' --config '", o.config,
                   "' --write-init-checkpoint '", ckpt, "' > '", o.work_dir, "/init.log' 2>&1");
  if (std::system(command.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("writing the initial model failed; see ", o.work_dir, "/init.log"));
  }
  std::vector<std::unique_ptr<PsProcess>> servers, workers;
  std::vector<std::string> server_addresses, worker_addresses;
  for (int p = 0; p < o.partitions; ++p) {
    PsProcessOptions ps;
    ps.binary = o.bin_dir + "/strata-ps";
    ps.work_dir = o.work_dir;
    ps.config = o.config;
    ps.partition = p;
    ps.partitions = o.partitions;
    ps.workers = o.workers;
    ps.consistency = "asp";
    ps.train_examples = static_cast<int64_t>(dataset.train.size());
    ps.init_checkpoint = ckpt;
    STRATA_ASSIGN_OR_RETURN(auto server, PsProcess::Launch(ps));
    server_addresses.push_back(server->address());
    servers.push_back(std::move(server));
  }
  for (int r = 0; r < o.workers; ++r) {
    STRATA_ASSIGN_OR_RETURN(
        auto worker,
        PsProcess::LaunchService(
            {o.bin_dir + "/strata-worker", "--config", o.config, "--rank", std::to_string(r),
             "--world", std::to_string(o.workers), "--run-dir", o.work_dir},
            o.work_dir, absl::StrCat("worker-", r), std::chrono::seconds(180)));
    worker_addresses.push_back(worker->address());
    workers.push_back(std::move(worker));
  }
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs;
  v1::StartRequest start;
  for (const auto& a : worker_addresses) start.add_workers(a);
  for (const auto& a : server_addresses) start.add_parameter_servers(a);
  start.set_mode(v1::SYNC_MODE_PS);
  for (const auto& a : worker_addresses) {
    stubs.push_back(v1::Worker::NewStub(MakeChannel(a)));
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(std::chrono::seconds(30)));
    v1::StartReply reply;
    STRATA_RETURN_IF_ERROR(
        FromGrpcStatus(stubs.back()->Start(&context, start, &reply), absl::StrCat("Start ", a)));
  }
  // A benchmark may sleep: the window is the measurement.
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup_s));
  STRATA_ASSIGN_OR_RETURN(int64_t steps0, TotalSteps(stubs));
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.window_s));
  STRATA_ASSIGN_OR_RETURN(int64_t steps1, TotalSteps(stubs));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const int per_worker_batch = std::max<int>(1, job.training().global_batch() / o.workers);
  const double samples_per_s = static_cast<double>(steps1 - steps0) * per_worker_batch / seconds;
  for (auto& stub : stubs) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(std::chrono::seconds(10)));
    v1::StopReply reply;
    stub->Stop(&context, v1::StopRequest(), &reply).ok();
  }
  std::printf(
      "train arch=%s workers=%d partitions=%d global_batch=%d steps=%lld window_s=%.1f "
      "samples_per_s=%.0f\n",
      Spelled(job.arch()).c_str(), o.workers, o.partitions,
      static_cast<int>(job.training().global_batch()), static_cast<long long>(steps1 - steps0),
      seconds, samples_per_s);
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  CLI::App app{"Strata parameter-server benchmarks"};
  app.require_subcommand(1);
  const std::string self_dir = std::filesystem::canonical("/proc/self/exe").parent_path().string();

  strata::RoundTripOptions rt;
  std::vector<double> sizes = {1.1, 25};
  std::vector<int> clients = {1, 2, 4}, partitions = {1, 2};
  auto* roundtrip =
      app.add_subcommand("roundtrip", "push+pull round trips against strata-ps processes");
  roundtrip->add_option("--sizes-mb", sizes, "model sizes in MB")->delimiter(',');
  roundtrip->add_option("--clients", clients, "concurrent clients (workers)")->delimiter(',');
  roundtrip->add_option("--partitions", partitions, "servers")->delimiter(',');
  roundtrip->add_option("--iterations", rt.iterations, "measured round trips per client");

  strata::TrainOptions tr;
  tr.bin_dir = self_dir;
  std::vector<int> worker_counts = {2, 4};
  auto* train = app.add_subcommand(
      "train", "ASP training throughput with strata-ps and strata-worker processes");
  train->add_option("--config", tr.config, "job spec")->required()->check(CLI::ExistingFile);
  train->add_option("--workers", worker_counts, "worker counts")->delimiter(',');
  train->add_option("--partitions", tr.partitions, "servers");
  train->add_option("--warmup-s", tr.warmup_s, "seconds after Start before measuring");
  train->add_option("--window-s", tr.window_s, "measurement window");
  train->add_option("--bin-dir", tr.bin_dir,
                    "where strata-ps, strata-worker and strata-evaluator are");
  CLI11_PARSE(app, argc, argv);

  const std::string scratch = strata::MakeScratch();
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{scratch};
  if (roundtrip->parsed()) {
    rt.ps_binary = self_dir + "/strata-ps";
    rt.work_dir = scratch;
    const int iterations = rt.iterations;
    for (double size : sizes) {
      for (int p : partitions) {
        for (int c : clients) {
          rt.size_mb = size;
          rt.partitions = p;
          rt.clients = c;
          // Large models: fewer round trips, so one configuration stays within seconds.
          rt.iterations = size > 10 ? std::max(5, iterations / 3) : iterations;
          if (absl::Status s = strata::RunRoundTrip(rt); !s.ok()) return strata::Fail(s);
        }
      }
    }
  } else {
    for (int n : worker_counts) {
      tr.workers = n;
      tr.work_dir = scratch + "/train-" + std::to_string(n);
      std::filesystem::create_directories(tr.work_dir);
      if (absl::Status s = strata::RunTrain(tr); !s.ok()) return strata::Fail(s);
    }
  }
  return 0;
}
