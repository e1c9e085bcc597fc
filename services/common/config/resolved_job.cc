#include "services/common/config/resolved_job.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "services/common/base/files.h"

namespace strata {
namespace {

// Each enum beside the spec's spelling of it: the one table both directions read.
template <typename Enum>
using Names = std::vector<std::pair<Enum, const char*>>;

const Names<v1::DatasetName>& DatasetNames() {
  static const Names<v1::DatasetName> names = {{v1::DATASET_FASHION_MNIST, "fashion-mnist"},
                                               {v1::DATASET_MNIST, "mnist"},
                                               {v1::DATASET_CIFAR10, "cifar10"},
                                               {v1::DATASET_CIFAR100, "cifar100"},
                                               {v1::DATASET_SYNTHETIC, "synthetic"}};
  return names;
}
const Names<v1::LabelSet>& LabelSetNames() {
  static const Names<v1::LabelSet> names = {{v1::LABEL_SET_FINE, "fine"},
                                            {v1::LABEL_SET_COARSE, "coarse"}};
  return names;
}
const Names<v1::ModelArch>& ModelArchNames() {
  static const Names<v1::ModelArch> names = {
      {v1::MODEL_ARCH_MLP, "mlp"},           {v1::MODEL_ARCH_MLP_WIDE, "mlp_wide"},
      {v1::MODEL_ARCH_CNN, "cnn"},           {v1::MODEL_ARCH_RESNET20, "resnet20"},
      {v1::MODEL_ARCH_RESNET32, "resnet32"}, {v1::MODEL_ARCH_RESNET56, "resnet56"}};
  return names;
}
const Names<v1::StrategyKind>& StrategyKindNames() {
  static const Names<v1::StrategyKind> names = {{v1::STRATEGY_KIND_ALLREDUCE, "allreduce"},
                                                {v1::STRATEGY_KIND_PS, "ps"},
                                                {v1::STRATEGY_KIND_SWITCH, "switch"}};
  return names;
}
const Names<v1::Consistency>& ConsistencyNames() {
  static const Names<v1::Consistency> names = {{v1::CONSISTENCY_ASP, "asp"},
                                               {v1::CONSISTENCY_BSP, "bsp"},
                                               {v1::CONSISTENCY_SSP, "ssp"},
                                               {v1::CONSISTENCY_PDP, "pdp"},
                                               {v1::CONSISTENCY_APDP, "apdp"}};
  return names;
}
const Names<v1::DataLink>& DataLinkNames() {
  static const Names<v1::DataLink> names = {{v1::DATA_LINK_TCP, "tcp"},
                                            {v1::DATA_LINK_GRPC, "grpc"},
                                            {v1::DATA_LINK_SHARED_MEMORY, "shm"}};
  return names;
}

const Names<v1::ShardMethod>& ShardMethodNames() {
  static const Names<v1::ShardMethod> names = {
      {v1::SHARD_METHOD_RANDOM, "random"},
      {v1::SHARD_METHOD_MOD, "mod"},
      {v1::SHARD_METHOD_STRATIFIED, "stratified"},
      {v1::SHARD_METHOD_DISTRIBUTION_AWARE, "distribution-aware"}};
  return names;
}

template <typename Enum>
std::string TextOf(const Names<Enum>& names, Enum value) {
  for (const auto& [e, text] : names) {
    if (e == value) return text;
  }
  return absl::StrCat("(unknown ", static_cast<int>(value), ")");
}

template <typename Enum>
bool Known(const Names<Enum>& names, Enum value) {
  return std::any_of(names.begin(), names.end(), [&](const auto& n) { return n.first == value; });
}

// Sets `*out` to the enum the spec's `text` names, or records why not.
template <typename Enum>
void Lookup(const Names<Enum>& names, const std::string& key, const std::string& text, Enum* out,
            std::vector<std::string>* errors) {
  for (const auto& [e, spelled] : names) {
    if (text == spelled) {
      *out = e;
      return;
    }
  }
  std::vector<std::string> known;
  for (const auto& n : names) known.push_back(n.second);
  errors->push_back(absl::StrCat(key, ": '", text, "' is none of ", absl::StrJoin(known, ", ")));
}

// Collects the text parser's complaints with their line and column (1-based).
class TextErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit TextErrors(std::string origin) : origin_(std::move(origin)) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(absl::StrCat(origin_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, message);
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string origin_;
  std::vector<std::string> errors_;
};

// The checks the YAML reader makes, made again on the message: a service trusts no file blindly.
std::vector<std::string> Problems(const v1::ResolvedJob& job) {
  std::vector<std::string> p;
  auto need = [&p](bool ok, const std::string& field, const std::string& rule) {
    if (!ok) p.push_back(absl::StrCat(field, " ", rule));
  };
  auto finite_at_least = [](double v, double low) { return std::isfinite(v) && v >= low; };
  need(job.format() == kResolvedJobFormat, "format",
       absl::StrCat("must be ", kResolvedJobFormat, ", got ", job.format()));
  need(!job.name().empty(), "name", "must not be empty");
  const auto& d = job.dataset();
  need(Known(DatasetNames(), d.name()), "dataset.name", "is not a known data set");
  need(Known(LabelSetNames(), d.label_set()), "dataset.label_set", "is not a known label set");
  need(d.max_train() >= 0 && d.max_test() >= 0, "dataset.max_train and max_test", "must be >= 0");
  need(Known(ModelArchNames(), job.arch()), "arch", "is not a known model");
  const auto& t = job.training();
  need(t.epochs() >= 1, "training.epochs", "must be >= 1");
  need(t.global_batch() >= 1, "training.global_batch", "must be >= 1");
  need(t.worker_batch() >= 1 && t.worker_batch() <= t.global_batch(), "training.worker_batch",
       "must lie in [1, global_batch]");
  need(std::isfinite(t.lr()) && t.lr() > 0, "training.lr", "must be finite and > 0");
  need(finite_at_least(t.momentum(), 0) && t.momentum() < 1, "training.momentum",
       "must lie in [0, 1)");
  need(finite_at_least(t.weight_decay(), 0), "training.weight_decay", "must be finite and >= 0");
  need(finite_at_least(t.lr_gamma(), 0), "training.lr_gamma", "must be finite and >= 0");
  need(t.threads_per_worker() >= 1, "training.threads_per_worker", "must be >= 1");
  const auto& c = job.cluster();
  need(c.workers() >= 1, "cluster.workers", "must be >= 1");
  need(c.parameter_servers() >= 1, "cluster.parameter_servers", "must be >= 1");
  const auto& s = job.strategy();
  need(Known(StrategyKindNames(), s.kind()), "strategy.kind", "is not a known strategy");
  need(Known(ConsistencyNames(), s.consistency()), "strategy.consistency",
       "is not a known consistency mode");
  need(s.staleness() >= 0, "strategy.staleness", "must be >= 0");
  need(std::isfinite(s.server_lr_scale()) && s.server_lr_scale() > 0, "strategy.server_lr_scale",
       "must be finite and > 0");
  need(s.round_points() >= 1, "strategy.round_points", "must be >= 1");
  need(s.k_star() >= 0 && s.k_star_start() >= 0, "strategy.k_star and k_star_start",
       "must be >= 0");
  need(s.probe_ratio() > 0 && s.probe_ratio() <= 1, "strategy.probe_ratio", "must lie in (0, 1]");
  need(s.ps_pipeline() == 0 || s.ps_pipeline() == 1, "strategy.ps_pipeline", "must be 0 or 1");
  need(s.bucket_bytes() >= 0 && s.bucket_bytes() <= (int64_t{1} << 30), "strategy.bucket_bytes",
       "must lie in [0, 1 GiB]");
  need(Known(DataLinkNames(), s.ring_link()) && s.ring_link() != v1::DATA_LINK_SHARED_MEMORY,
       "strategy.ring_link", "is not a ring link (tcp or grpc)");
  need(Known(DataLinkNames(), s.ps_link()), "strategy.ps_link", "is not a known link");
  need(job.recovery().restarts() >= 0, "recovery.restarts", "must be >= 0");
  const auto& sh = job.sharding();
  need(Known(ShardMethodNames(), sh.method()), "sharding.method", "is not a known method");
  need(sh.clusters() >= 1 && sh.pca_components() >= 1 && sh.max_iterations() >= 1,
       "sharding.clusters, pca_components and max_iterations", "must be >= 1");
  return p;
}

}  // namespace

absl::StatusOr<v1::ResolvedJob> ResolveJob(const JobSpec& spec) {
  std::vector<std::string> errors;
  v1::ResolvedJob job;
  job.set_format(kResolvedJobFormat);
  job.set_name(spec.name);

  v1::ResolvedDataset* d = job.mutable_dataset();
  v1::DatasetName dataset = v1::DATASET_NAME_UNSPECIFIED;
  Lookup(DatasetNames(), "dataset.name", spec.dataset.name, &dataset, &errors);
  d->set_name(dataset);
  d->set_path(spec.dataset.path);
  v1::LabelSet label_set = v1::LABEL_SET_UNSPECIFIED;
  Lookup(LabelSetNames(), "dataset.label_set", spec.dataset.label_set, &label_set, &errors);
  d->set_label_set(label_set);
  d->set_max_train(spec.dataset.max_train);
  d->set_max_test(spec.dataset.max_test);

  v1::ModelArch arch = v1::MODEL_ARCH_UNSPECIFIED;
  Lookup(ModelArchNames(), "model.arch", spec.model.arch, &arch, &errors);
  job.set_arch(arch);

  const int workers = std::max(1, spec.cluster.workers);
  v1::ResolvedTraining* t = job.mutable_training();
  t->set_epochs(spec.training.epochs);
  t->set_global_batch(spec.training.batch_size);
  // training.batch_size is the global batch: each worker's mini-batch is its share.
  const int64_t worker_batch = std::max(1, spec.training.batch_size / workers);
  t->set_worker_batch(worker_batch);
  t->set_lr(spec.training.lr);
  t->set_momentum(spec.training.momentum);
  t->set_weight_decay(spec.training.weight_decay);
  for (int m : spec.training.lr_schedule.milestones) t->add_lr_milestones(m);
  t->set_lr_gamma(spec.training.lr_schedule.gamma);
  t->set_seed(spec.training.seed);
  t->set_threads_per_worker(spec.cluster.threads_per_worker);

  job.mutable_cluster()->set_workers(spec.cluster.workers);
  job.mutable_cluster()->set_parameter_servers(spec.cluster.parameter_servers);

  const StrategySpec& from = spec.strategy;
  v1::ResolvedStrategy* s = job.mutable_strategy();
  v1::StrategyKind kind = v1::STRATEGY_KIND_UNSPECIFIED;
  Lookup(StrategyKindNames(), "strategy.kind", from.kind, &kind, &errors);
  s->set_kind(kind);
  v1::Consistency consistency = v1::CONSISTENCY_UNSPECIFIED;
  Lookup(ConsistencyNames(), "strategy.consistency", from.consistency, &consistency, &errors);
  s->set_consistency(consistency);
  s->set_staleness(from.staleness);
  // ASP/SSP apply each worker's push on its own: 1 / workers keeps the step of n pushes that of
  // one global-batch step (docs/algorithms.md).
  s->set_server_lr_scale(from.ps_lr_scale > 0 ? from.ps_lr_scale : 1.0 / workers);
  s->set_round_points(static_cast<int64_t>(workers) * worker_batch);
  s->set_k_star(from.k_star);
  s->set_k_star_start(from.k_star_start);
  s->set_probe_ratio(from.probe_ratio);
  s->set_ps_pipeline(from.ps_pipeline);
  s->set_bucket_bytes(static_cast<int64_t>(std::llround(from.bucket_mb * (1 << 20))));
  v1::DataLink ring_link = v1::DATA_LINK_UNSPECIFIED, ps_link = v1::DATA_LINK_UNSPECIFIED;
  Lookup(DataLinkNames(), "strategy.ring_link", from.ring_link, &ring_link, &errors);
  Lookup(DataLinkNames(), "strategy.ps_link", from.ps_link, &ps_link, &errors);
  s->set_ring_link(ring_link);
  s->set_ps_link(ps_link);

  job.mutable_recovery()->set_restarts(spec.recovery.restarts);
  v1::ResolvedSharding* sh = job.mutable_sharding();
  v1::ShardMethod method = v1::SHARD_METHOD_UNSPECIFIED;
  Lookup(ShardMethodNames(), "sharding.method", spec.sharding.method, &method, &errors);
  sh->set_method(method);
  sh->set_clusters(spec.sharding.clusters);
  sh->set_pca_components(spec.sharding.pca_components);
  sh->set_max_iterations(spec.sharding.max_iterations);
  if (errors.empty()) errors = Problems(job);
  if (!errors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job spec does not resolve: ", absl::StrJoin(errors, "; ")));
  }
  return job;
}

std::string ResolvedJobText(const v1::ResolvedJob& job) {
  std::string text;
  google::protobuf::TextFormat::Printer printer;
  printer.PrintToString(job, &text);
  return text;
}

absl::StatusOr<v1::ResolvedJob> ParseResolvedJob(const std::string& text,
                                                 const std::string& origin) {
  v1::ResolvedJob job;
  TextErrors errors(origin);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &job)) {
    return absl::InvalidArgumentError(errors.errors().empty()
                                          ? absl::StrCat(origin, ": not a resolved job")
                                          : absl::StrJoin(errors.errors(), "\n"));
  }
  if (std::vector<std::string> p = Problems(job); !p.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": resolved job refused: ", absl::StrJoin(p, "; ")));
  }
  return job;
}

absl::StatusOr<v1::ResolvedJob> LoadResolvedJob(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseResolvedJob(*text, path);
}

absl::StatusOr<v1::ResolvedJob> LoadServiceJob(const ServiceJobSource& source) {
  if (source.job.empty() == source.config.empty()) {
    return absl::InvalidArgumentError(
        "give the job as exactly one of --job (what `strata` writes) and --config (a YAML spec)");
  }
  if (!source.job.empty()) {
    if (!source.overrides.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--job ", source.job,
                                                     " is resolved already: it takes no --set (",
                                                     absl::StrJoin(source.overrides, ", "), ")"));
    }
    return LoadResolvedJob(source.job);
  }
  auto spec = LoadJobSpec(source.config, source.overrides);
  if (!spec.ok()) return spec.status();
  return ResolveJob(*spec);
}

DatasetSpec DatasetSpecOf(const v1::ResolvedJob& job) {
  DatasetSpec d;
  d.name = DatasetNameText(job.dataset().name());
  d.path = job.dataset().path();
  d.label_set = LabelSetText(job.dataset().label_set());
  d.max_train = job.dataset().max_train();
  d.max_test = job.dataset().max_test();
  return d;
}

LrScheduleSpec LrScheduleOf(const v1::ResolvedTraining& training) {
  LrScheduleSpec schedule;
  schedule.milestones.assign(training.lr_milestones().begin(), training.lr_milestones().end());
  schedule.gamma = training.lr_gamma();
  return schedule;
}

std::string DatasetNameText(v1::DatasetName name) { return TextOf(DatasetNames(), name); }
std::string LabelSetText(v1::LabelSet set) { return TextOf(LabelSetNames(), set); }
std::string ModelArchText(v1::ModelArch arch) { return TextOf(ModelArchNames(), arch); }
std::string StrategyKindText(v1::StrategyKind kind) { return TextOf(StrategyKindNames(), kind); }
std::string ConsistencyText(v1::Consistency consistency) {
  return TextOf(ConsistencyNames(), consistency);
}
std::string DataLinkText(v1::DataLink link) { return TextOf(DataLinkNames(), link); }
std::string ShardMethodText(v1::ShardMethod method) { return TextOf(ShardMethodNames(), method); }

}  // namespace strata
