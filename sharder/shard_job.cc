#include "sharder/shard_job.h"

#include <chrono>
#include <limits>
#include <optional>

#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"
#include "services/common/config/job_keys.h"
#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"
#include "sharder/clustering.h"
#include "sharder/plan_writer.h"

namespace strata::sharder {
namespace {

// The settings a job can take from either source, with "unset" spelled as std::nullopt.
struct JobSettings {
  std::optional<std::string> config, job, dataset, data, label_set, method, out;
  std::optional<int> workers, clusters, pca_components, max_iterations, threads;
  std::optional<uint64_t> seed;
  std::optional<int64_t> max_train, pca_fit_examples;
};

template <typename T>
void Take(const std::optional<T>& value, T* target) {
  if (value) *target = *value;
}

// `what` spelled `text` as its enum, or the error that names the spellings there are.
template <typename Enum>
absl::StatusOr<Enum> Spelling(const std::string& what, const std::string& text) {
  if (std::optional<Enum> e = EnumFromSpelling<Enum>(text)) return *e;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", text, "' (known: ", Spellings<Enum>(), ")"));
}

absl::StatusOr<ShardJob> Resolve(const JobSettings& s) {
  ShardJob job;
  if (s.config && s.job) {
    return absl::InvalidArgumentError(
        "give the job once: a job spec (JOB.yaml / --config) or --job");
  }
  // The job's settings (what `strata` resolved, or a spec read the same way), else the spec's
  // defaults; the flags override either.
  v1::ResolvedJob base = DefaultJob();
  if (s.job || s.config) {
    auto resolved = s.job ? LoadResolvedJob(*s.job) : LoadJobSpec(*s.config);
    if (!resolved.ok()) return resolved.status();
    base = *std::move(resolved);
  } else {
    if (!s.dataset) {
      return absl::InvalidArgumentError(
          "dataset is required (--dataset, or a job spec: JOB.yaml / --config / --job)");
    }
    if (!s.workers) {
      return absl::InvalidArgumentError(
          "workers is required (--workers, or a job spec: JOB.yaml / --config / --job)");
    }
    if (*s.dataset != "fashion-mnist" && !s.data && *s.dataset != "synthetic") {
      return absl::InvalidArgumentError(absl::StrCat("--data is required for dataset '", *s.dataset,
                                                     "' (the directory of its files)"));
    }
  }
  // Workers generate synthetic data from training.seed; the plan must index the same examples.
  job.dataset = DatasetOptionsFor(base);
  const v1::ResolvedSharding& sharding = base.sharding();
  job.plan.method = sharding.method();
  job.plan.clusters = sharding.clusters();
  job.plan.pca_components = sharding.pca_components();
  job.plan.max_iterations = sharding.max_iterations();
  job.plan.workers = base.cluster().workers();
  job.plan.seed = base.training().seed();
  if (s.dataset) {
    STRATA_ASSIGN_OR_RETURN(job.dataset.name, Spelling<v1::DatasetName>("dataset", *s.dataset));
  }
  if (s.label_set) {
    std::optional<v1::LabelSet> set = EnumFromSpelling<v1::LabelSet>(*s.label_set);
    if (!set) {
      return absl::InvalidArgumentError(
          absl::StrCat("label_set must be fine or coarse, got '", *s.label_set, "'"));
    }
    job.dataset.label_set = *set;
  }
  if (s.method) {
    STRATA_ASSIGN_OR_RETURN(job.plan.method,
                            Spelling<v1::ShardMethod>("sharding method", *s.method));
  }
  Take(s.data, &job.dataset.path);
  if (s.max_train) {
    if (*s.max_train < 0) {
      return absl::InvalidArgumentError(absl::StrCat("max_train must be >= 0, got ", *s.max_train));
    }
    job.dataset.max_train = static_cast<size_t>(*s.max_train);
  }
  if (!s.job && !s.config && s.seed) job.dataset.seed = *s.seed;
  Take(s.workers, &job.plan.workers);
  Take(s.clusters, &job.plan.clusters);
  Take(s.pca_components, &job.plan.pca_components);
  Take(s.max_iterations, &job.plan.max_iterations);
  Take(s.pca_fit_examples, &job.plan.pca_fit_examples);
  Take(s.seed, &job.plan.seed);
  Take(s.threads, &job.threads);
  if (!s.out || s.out->empty()) {
    return absl::InvalidArgumentError("the plan directory is required (--out DIR)");
  }
  job.out_dir = *s.out;
  if (job.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be >= 0, got ", job.threads));
  }
  // The sharder never reads the test split; one example keeps the reader's checks cheap.
  job.dataset.max_test = 1;
  // Options that need no data are checked before the (slow) load.
  if (absl::Status st = ValidateShardPlanOptions(job.plan, std::numeric_limits<int64_t>::max(),
                                                 std::numeric_limits<int64_t>::max());
      !st.ok()) {
    return st;
  }
  return job;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<ShardJob> ResolveShardJob(const shard::ShardFlags& f) {
  JobSettings s;
  auto take = [&](const char* name, auto value, auto* target) {
    if (f.Given(name)) *target = value;
  };
  take("config", f.config, &s.config);
  take("job", f.job, &s.job);
  take("dataset", f.dataset, &s.dataset);
  take("data", f.data, &s.data);
  take("label-set", f.label_set, &s.label_set);
  take("max-train", f.max_train, &s.max_train);
  take("workers", f.workers, &s.workers);
  take("method", f.method, &s.method);
  take("clusters", f.clusters, &s.clusters);
  take("pca-components", f.pca_components, &s.pca_components);
  take("max-iterations", f.max_iterations, &s.max_iterations);
  take("pca-fit-examples", f.pca_fit_examples, &s.pca_fit_examples);
  take("seed", f.seed, &s.seed);
  take("threads", f.threads, &s.threads);
  take("out", f.out, &s.out);
  return Resolve(s);
}

absl::StatusOr<ShardJob> ResolveShardJob(const v1::ShardRequest& r) {
  JobSettings s;
  auto text = [](const std::string& v, std::optional<std::string>* target) {
    if (!v.empty()) *target = v;
  };
  auto number = [](auto v, auto* target) {
    if (v != 0) *target = v;
  };
  text(r.config(), &s.config);
  text(r.dataset(), &s.dataset);
  text(r.data_path(), &s.data);
  text(r.label_set(), &s.label_set);
  text(r.method(), &s.method);
  text(r.out_dir(), &s.out);
  if (!r.run_dir().empty()) {
    const std::string run_dir = r.run_dir();
    if (!s.out) s.out = run_dir + "/shards";
    if (!s.config && !s.dataset) s.config = run_dir + "/job.yaml";
  }
  number(r.workers(), &s.workers);
  number(r.clusters(), &s.clusters);
  number(r.pca_components(), &s.pca_components);
  number(r.max_iterations(), &s.max_iterations);
  number(r.threads(), &s.threads);
  number(r.seed(), &s.seed);
  number(r.max_train(), &s.max_train);
  number(r.pca_fit_examples(), &s.pca_fit_examples);
  // A request cannot say "0 workers" by leaving the field out; a negative count is still refused.
  if (r.workers() < 0) s.workers = r.workers();
  if (r.clusters() < 0) s.clusters = r.clusters();
  if (r.pca_components() < 0) s.pca_components = r.pca_components();
  return Resolve(s);
}

absl::StatusOr<ShardInput> LoadShardInput(const ShardJob& job) {
  auto start = std::chrono::steady_clock::now();
  auto dataset = LoadDataset(job.dataset);
  if (!dataset.ok()) return dataset.status();
  auto provenance = FingerprintDataset(job.dataset);
  if (!provenance.ok()) return provenance.status();
  provenance->extra_phase_seconds.emplace_back("load", SecondsSince(start));
  return ShardInput{std::move(*dataset), std::move(*provenance)};
}

absl::StatusOr<nlohmann::ordered_json> PlanShards(const ShardJob& job, ShardInput input) {
  SetClusteringThreads(job.threads);
  auto plan =
      MakeShardPlan(input.dataset.train, static_cast<int64_t>(input.dataset.example_floats()),
                    input.dataset.num_classes, job.plan);
  if (!plan.ok()) return plan.status();
  if (absl::Status s = WriteShardPlan(job.out_dir, *plan, input.provenance); !s.ok()) return s;
  return BuildManifest(*plan, input.provenance);
}

absl::StatusOr<nlohmann::ordered_json> RunShardJob(const ShardJob& job) {
  auto input = LoadShardInput(job);
  if (!input.ok()) return input.status();
  return PlanShards(job, std::move(*input));
}

}  // namespace strata::sharder
