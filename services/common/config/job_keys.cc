#include "services/common/config/job_keys.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_replace.h>
#include <absl/strings/str_split.h>

#include "services/common/base/host_name.h"
#include "services/common/config/broker_address.h"

namespace strata {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

JobKey Key(std::string path) {
  JobKey k;
  k.path = std::move(path);
  return k;
}

// ---- the checks beyond a range --------------------------------------------------------------

std::string RunName(const std::string& v, double) {
  if (v.empty() || v.size() > 63) return "must be 1 to 63 characters";
  for (char c : v) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) {
      return "may hold letters, digits, '-' and '_' only (it names directories and pods)";
    }
  }
  return "";
}

std::string NotEmptyPath(const std::string& v, double) {
  return v.empty() ? "is empty (leave it out for the built-in model.arch)" : "";
}

std::string NotEmpty(const std::string& v, double) {
  return v.empty() ? "is empty (leave it out to have strata run make the run's certificates)" : "";
}

// A host name as a certificate's subject alternative name holds it (base/host_name.h).
std::string DnsName(const std::string& v, double) {
  if (IsDnsHostName(v)) return "";
  return absl::StrCat(
      "'", v, "' is not a host name (labels of letters, digits and '-', separated by dots)");
}

std::string NeverOrSeconds(const std::string&, double v) {
  return v == 0 || (v >= 0.1 && v <= 86400)
             ? ""
             : absl::StrCat("must be 0 (never) or in [0.1, 86400] seconds, got ", v);
}

// A stream key or consumer-group name as redis-cli and the logs show it: printable, no spaces.
std::string StreamName(const std::string& v, double) {
  if (v.empty() || v.size() > 200) return "must be 1 to 200 characters";
  for (char c : v) {
    if (!std::isgraph(static_cast<unsigned char>(c))) {
      return "may hold printable characters only, no spaces";
    }
  }
  return "";
}

std::string BrokerAddressText(const std::string& v, double) {
  if (v.empty()) return "";
  const absl::Status parsed = ParseBrokerAddress(v).status();
  return parsed.ok() ? "" : std::string(parsed.message());
}

// ---- when a key means something -------------------------------------------------------------

std::string ForServers(const v1::ResolvedJob& job) {
  return job.strategy().kind() == v1::STRATEGY_KIND_ALLREDUCE
             ? "applies to push/pull with parameter servers, which strategy.kind allreduce does "
               "not have"
             : "";
}

std::string ForAllReduce(const v1::ResolvedJob& job) {
  return job.strategy().kind() == v1::STRATEGY_KIND_PS
             ? "applies to the all-reduce phase, which strategy.kind ps does not have"
             : "";
}

bool PointRounds(const v1::ResolvedJob& job) {
  return job.strategy().consistency() == v1::CONSISTENCY_PDP ||
         job.strategy().consistency() == v1::CONSISTENCY_APDP;
}

// K* keys on a mode that has no K* would be silently ignored.
std::string ForPointRounds(const v1::ResolvedJob& job) {
  return PointRounds(job)
             ? ""
             : absl::StrCat("applies to strategy.consistency pdp and apdp only (it is ",
                            Spelled(job.strategy().consistency()), ")");
}

std::string ForKStarSearch(const v1::ResolvedJob& job) {
  if (std::string why = ForPointRounds(job); !why.empty()) return why;
  return job.strategy().k_star() > 0
             ? "starts the K* search, which a fixed strategy.k_star turns off: remove one"
             : "";
}

std::string ForBuiltinModel(const v1::ResolvedJob& job) {
  return job.model().torchscript().empty()
             ? ""
             : "names a built-in model, which model.torchscript replaces: give one of the two";
}

// The built-in data sets hold class labels only: other losses need targets of the user's own.
std::string ForLossOfTheData(const v1::ResolvedJob& job) {
  return job.training().loss() == v1::LOSS_CROSS_ENTROPY || job.dataset().name() == v1::DATASET_NPY
             ? ""
             : absl::StrCat(Spelled(job.training().loss()),
                            " needs targets of your own (dataset.name npy); '",
                            Spelled(job.dataset().name()), "' holds class labels only");
}

// A directory or name that TLS off would ignore means plaintext where TLS was meant.
std::string ForTls(const v1::ResolvedJob& job) {
  return job.security().tls() == v1::TLS_MODE_OFF
             ? "has no effect while security.tls is off, so the run would travel in plaintext: "
               "set security.tls to on or mutual, or remove the key"
             : "";
}

// ---- the table --------------------------------------------------------------------------------

std::vector<JobKey> MakeTable() {
  return {
      Key("name").Default("job").Check(RunName).Doc(
          "Names the run directory (`runs/<name>-<timestamp>`) and, later, pods."),

      Key("dataset.name").Default("fashion-mnist").Doc("The data set."),
      Key("dataset.path")
          .Default("/usr/share/datasets/fashion-mnist")
          .Doc("Directory with the data files (IDX files, plain or gzipped; CIFAR binary "
               "batches)."),
      Key("dataset.label_set")
          .Default("fine")
          .Doc("CIFAR-100 only: `fine` (100 classes) or "
               "`coarse` (20)."),
      Key("dataset.max_train")
          .Default("0")
          .AtLeast(0)
          .Doc("Use only the first N training examples (0 = all)."),
      Key("dataset.max_test")
          .Default("0")
          .AtLeast(0)
          .Doc("Use only the first N held-out examples for evaluation (0 = all)."),

      Key("model.arch")
          .Field("arch")
          .Default("mlp")
          .Applies(ForBuiltinModel, {"model.torchscript"})
          .EmitOnlyWhereApplies()
          .Doc("The built-in model."),
      Key("model.torchscript")
          .Check(NotEmptyPath)
          .EmitOnlyUnlessDefault()
          .Doc("A TorchScript file of your own (`torch.jit.script(model).save(...)`) to train "
               "instead of a built-in model."),

      Key("training.epochs")
          .Default("10")
          .AtLeast(1)
          .Doc("Length of the job in passes over the training set."),
      Key("training.batch_size")
          .Field("training.global_batch")
          .Default("128")
          .AtLeast(1)
          .Doc("Global batch."),
      Key("training.lr")
          .Default("0.1")
          .Above(0)
          .Doc("Learning rate (all-reduce: applied to the averaged gradient, as on one process)."),
      Key("training.momentum")
          .Default("0.9")
          .AtLeast(0)
          .Below(1)
          .Doc("SGD momentum (torch.optim.SGD arithmetic, on workers and servers alike)."),
      Key("training.weight_decay").Default("0").AtLeast(0).Doc("L2 weight decay."),
      Key("training.lr_schedule.milestones")
          .Field("training.lr_milestones")
          .Default("[]")
          .Flow()
          .TypeDoc("list of integers, strictly increasing")
          .Doc("Epochs after which the learning rate is multiplied by `gamma`."),
      Key("training.lr_schedule.gamma")
          .Field("training.lr_gamma")
          .Default("0.1")
          .Above(0)
          .AtMost(1)
          .Doc("Factor at each milestone."),
      Key("training.seed").Default("1").Doc("Model initialisation, data order, random sharding."),
      Key("training.threads")
          .Default("0")
          .AtLeast(0)
          .Doc("Intra-op threads of the single-process trainer `strata-train` (0 = all cores)."),
      Key("training.loss")
          .Default("cross_entropy")
          .Applies(ForLossOfTheData, {"dataset.name"})
          .EmitOnlyUnlessDefault()
          .Doc("What the model's output is trained on."),

      Key("cluster.workers")
          .Default("2")
          .AtLeast(1)
          .Doc("Training replicas (`strata-worker` processes)."),
      Key("cluster.parameter_servers")
          .Default("1")
          .AtLeast(1)
          .Doc(
              "Parameter servers (`strata-ps`) for strategies `ps` and `switch`, and `stream` with "
              "`stream.sync: servers`; each owns a share "
              "of the model's tensors (large ones cut into pieces, `strategy.ps_split`); with "
              "`ps_split: false` each owns whole tensors, so there can be no more servers than "
              "model tensors."),
      Key("cluster.threads_per_worker")
          .Field("training.threads_per_worker")
          .Default("1")
          .AtLeast(1)
          .Doc("Intra-op threads of each worker."),
      Key("cluster.stragglers")
          .Default("[]")
          .TypeDoc("list of `{worker, cpu_fraction}`")
          .Doc("Workers to slow down on purpose."),
      Key("cluster.stragglers[].worker")
          .Required()
          .AtLeast(0)
          .Doc("The straggler's rank; it must exist."),
      Key("cluster.stragglers[].cpu_fraction")
          .Default("1")
          .Above(0)
          .AtMost(1)
          .Doc("The straggler's share of one core."),
      Key("cluster.cpu.worker")
          .Default("0")
          .AtLeast(0)
          .AtMost(64)
          .Unit("cores")
          .Doc("A CPU quota for every worker (0.5 = half of one core; 0 = none)."),
      Key("cluster.cpu.parameter_server")
          .Default("0")
          .AtLeast(0)
          .AtMost(64)
          .Unit("cores")
          .Doc("A CPU quota for every parameter server (0 = none)."),
      Key("cluster.cpu.evaluator")
          .Default("0")
          .AtLeast(0)
          .AtMost(64)
          .Unit("cores")
          .Doc("A CPU quota for the evaluator (0 = none)."),
      Key("cluster.worker_speeds")
          .Default("[]")
          .Above(0)
          .AtMost(64)
          .Flow()
          .TypeDoc("list of numbers in (0, 64], one per worker")
          .Doc("Relative speeds: worker r's quota is `cpu.worker x worker_speeds[r]`."),
      Key("cluster.compute_speeds")
          .Default("[]")
          .AtLeast(0.01)
          .AtMost(1)
          .Flow()
          .TypeDoc("list of numbers in [0.01, 1], one per worker")
          .EmitOnlyUnlessDefault()
          .Doc("Per worker, the speed of its computing alone: after each mini-batch's forward and "
               "backward pass worker r waits (1 / compute_speeds[r] - 1) times their duration, "
               "while its messages travel at full speed."),

      Key("sharding.method").Default("stratified").Doc("How the training set is split."),
      Key("sharding.clusters")
          .Default("20")
          .AtLeast(1)
          .Doc("distribution-aware: KMeans clusters (2 x classes is the recommendation)."),
      Key("sharding.pca_components")
          .Default("50")
          .AtLeast(1)
          .Doc("distribution-aware: PCA dimensions before clustering."),
      Key("sharding.max_iterations")
          .Default("150")
          .AtLeast(1)
          .Doc("distribution-aware: KMeans iteration cap."),

      Key("strategy.kind").Default("allreduce").Doc("How the workers synchronise."),
      Key("strategy.consistency")
          .Default("asp")
          .Doc("Parameter-server consistency for `ps` and after a `switch`."),
      Key("strategy.staleness")
          .Default("3")
          .AtLeast(0)
          .Doc("SSP bound on the clock gap between the fastest and the slowest worker."),
      Key("strategy.k_star")
          .Default("0")
          .AtLeast(0)
          .Applies(ForPointRounds, {"strategy.consistency"})
          .EmitOnlyWhereApplies()
          .Doc("`pdp`, `apdp`: the global mini-batch K* in points, all workers together."),
      Key("strategy.k_star_start")
          .Default("0")
          .AtLeast(0)
          .Applies(ForKStarSearch, {"strategy.consistency", "strategy.k_star"})
          .EmitOnlyWhereApplies()
          .Doc("`pdp`, `apdp` with K* searched: the first candidate."),
      Key("strategy.probe_ratio")
          .Default("0.05")
          .Above(0)
          .AtMost(1)
          .Applies(ForPointRounds, {"strategy.consistency"})
          .EmitOnlyWhereApplies()
          .Doc("`pdp`, `apdp` with K* searched: each candidate is probed over max(probe_ratio x "
               "training points, 4 x candidate) points."),
      Key("strategy.rule").Default("empirical").Doc("When a `switch` job switches."),
      Key("strategy.at_fraction")
          .Default("0.3")
          .Above(0)
          .Below(1)
          .Doc("`at_fraction` rule: switch at the boundary after epoch ceil(alpha x epochs)."),
      Key("strategy.window")
          .Default("5")
          .AtLeast(1)
          .Doc("`empirical` rule: relative changes averaged (window + 1 losses)."),
      Key("strategy.threshold_percent")
          .Default("1")
          .Above(0)
          .Doc("`empirical` rule: switch when s < threshold."),
      Key("strategy.ps_lr_scale")
          .Default("0")
          .AtLeast(0)
          .Doc("Per-worker learning rate on the parameter servers = `training.lr` x scale; 0 means "
               "1 / workers (the thesis's lr / n)."),
      Key("strategy.ps_pipeline")
          .Default("0")
          .AtLeast(0)
          .AtMost(1)
          .Doc("Under parameter servers, how many push/pull exchanges may travel while the worker "
               "computes its next step."),
      Key("strategy.bucket_mb")
          .Default("0")
          .AtLeast(0)
          .AtMost(1024)
          .Applies(ForAllReduce, {"strategy.kind"})
          .EmitOnlyUnlessDefault()
          .Doc("`allreduce` and `switch` (before the switch): > 0 averages the gradients in "
               "buckets of about this many MB while backward still runs, as PyTorch DDP does."),
      Key("strategy.ring_link")
          .Default("tcp")
          .Allowed({"grpc", "tcp"})
          .Applies(ForAllReduce, {"strategy.kind"})
          .EmitOnlyUnlessDefault()
          .Doc("`allreduce` and `switch` (before the switch): how the ring's segments travel."),
      Key("strategy.ring_compression")
          .Default("none")
          .Allowed({"none", "fp16"})
          .Applies(ForAllReduce, {"strategy.kind"})
          .EmitOnlyUnlessDefault()
          .Doc("`allreduce` and `switch` (before the switch): `fp16` rounds every gradient value "
               "a worker sends in the ring to a 16-bit float and, on the plain-TCP ring, sends "
               "it in 16 bits: half the bytes, for a rounding of each partial sum."),
      Key("strategy.ps_link")
          .Default("shm")
          .Allowed({"grpc", "tcp", "shm"})
          .Applies(ForServers, {"strategy.kind"})
          .EmitOnlyUnlessDefault()
          .Doc("How the per-step push/pull with the parameter servers travels."),
      Key("strategy.ps_split")
          .Default("true")
          .TypeDoc("`true` or `false`")
          .Applies(ForServers, {"strategy.kind"})
          .EmitOnlyUnlessDefault()
          .Doc("With more than one parameter server: a tensor larger than an even share of the "
               "model is cut by rows into pieces dealt out over the servers, so that each carries "
               "about as many bytes; `false` deals out whole tensors."),
      Key("strategy.push_compression")
          .Default("none")
          .Allowed({"none", "fp16"})
          .Applies(ForServers, {"strategy.kind"})
          .EmitOnlyUnlessDefault()
          .Doc("`ps`, `switch` (after the switch) and `stream` (through servers, or the mesh on "
               "`stream.link: tcp`): `fp16` sends the gradients a worker pushes and the weights "
               "it pulls (a stream replica's sums to its peers) as 16-bit floats on the plain-TCP "
               "data planes: half the bytes; the servers keep and update the model in 32 bits."),

      Key("launcher.kind").Default("local").Doc("Where the job's processes run."),
      Key("launcher.ring_transport")
          .Default("unix")
          .Doc("`local` only: how the workers' ring all-reduce travels between the processes."),

      Key("security.tls").Default("off").Doc("Transport security between the run's processes."),
      Key("security.tls_dir")
          .Check(NotEmpty)
          .Applies(ForTls, {"security.tls"})
          .EmitOnlyWhereApplies()
          .EmitOnlyUnlessDefault()
          .Doc("`on`, `mutual`: a directory with `ca.pem`, `server.pem`, `server.key` and, for "
               "`mutual`, `client.pem`, `client.key` (PEM, keys unencrypted)."),
      Key("security.tls_server_name")
          .Default("strata")
          .Check(DnsName)
          .Applies(ForTls, {"security.tls"})
          .EmitOnlyWhereApplies()
          .Doc("The DNS name every client expects in `server.pem` (a subject alternative name), "
               "whatever address it dials."),

      Key("metrics.enabled")
          .Default("true")
          .TypeDoc("`true` or `false`")
          .Doc("Every parameter server, worker and the evaluator serve Prometheus metrics at "
               "`/metrics`."),
      Key("metrics.port")
          .Default("9464")
          .AtLeast(1)
          .AtMost(65535)
          .Doc("`compose` and `kubernetes`: the port every container serves its metrics on."),

      // Every stream key is written to job.yaml only when it differs from its default, so the
      // job.yaml of a job that does not stream reads as it did before the section existed.
      Key("stream.address")
          .Check(BrokerAddressText)
          .EmitOnlyUnlessDefault()
          .Doc("The Redis broker of the stream: `redis://HOST:PORT` or the absolute path of its "
               "unix socket; empty: a broker of the run's own."),
      Key("stream.key")
          .Default("strata:events")
          .Check(StreamName)
          .EmitOnlyUnlessDefault()
          .Doc("The stream's key on the broker."),
      Key("stream.group")
          .Default("replicas")
          .Check(StreamName)
          .EmitOnlyUnlessDefault()
          .Doc("The consumer group the replicas read the stream as."),
      Key("stream.batch_events")
          .Default("64")
          .AtLeast(1)
          .AtMost(65536)
          .EmitOnlyUnlessDefault()
          .Doc("A replica's mini-batch: a tumbling window of this many events."),
      Key("stream.max_grad_buffer")
          .Default("4")
          .AtLeast(1)
          .AtMost(1024)
          .EmitOnlyUnlessDefault()
          .Doc("Gradients a replica buffers before it sends them to every other replica."),
      Key("stream.max_events")
          .Default("0")
          .AtLeast(0)
          .EmitOnlyUnlessDefault()
          .Doc("Stop after this many events (0 = no limit)."),
      Key("stream.max_seconds")
          .Default("0")
          .AtLeast(0)
          .AtMost(31536000)
          .Unit("seconds")
          .EmitOnlyUnlessDefault()
          .Doc("Stop after this long (0 = no limit)."),
      Key("stream.claim_idle_ms")
          .Default("30000")
          .AtLeast(100)
          .AtMost(86400000)
          .EmitOnlyUnlessDefault()
          .Doc("Events a consumer was handed and has not acknowledged for this many milliseconds "
               "are claimed by another (a dead replica's)."),
      Key("stream.accuracy_window")
          .Default("1000")
          .AtLeast(1)
          .AtMost(10000000)
          .EmitOnlyUnlessDefault()
          .Doc("The prequential accuracy of a stream run's progress and metrics.jsonl is over each "
               "replica's latest this many events."),
      Key("stream.freeze_at_event")
          .Default("0")
          .AtLeast(0)
          .EmitOnlyUnlessDefault()
          .Doc("From the event the producer numbered this (its `seq`) on, the replicas stop "
               "training: every window is still scored, no gradient is computed (0 = never)."),
      Key("stream.predict_rate")
          .Default("0")
          .AtLeast(0)
          .AtMost(1)
          .EmitOnlyUnlessDefault()
          .Doc("The share of the stream's events `strata run` also sends to the replicas' "
               "Predict as they enter the stream, recording each answer's latency and whether "
               "it was right (0 = none)."),
      Key("stream.lr_decay_events")
          .Default("0")
          .AtLeast(0)
          .EmitOnlyUnlessDefault()
          .Doc("A replica's learning rate decays as training.lr / (1 + e / this), e the events it "
               "trained since the start or since stream.on_drift reset it (0 = constant)."),
      Key("stream.on_drift")
          .Default("continue")
          .Allowed({"continue", "reset_lr"})
          .EmitOnlyUnlessDefault()
          .Doc("When a replica's drift detector fires: `continue` keeps training as before; "
               "`reset_lr` restarts the decay of stream.lr_decay_events, so the rate is "
               "training.lr again."),
      Key("stream.sync")
          .Default("mesh")
          .Allowed({"mesh", "allreduce", "servers"})
          .EmitOnlyUnlessDefault()
          .Doc("How the replicas combine gradients: `mesh` (TensAIR's protocol: each applies its "
               "own at once and sends it to the others, no barrier), `allreduce` (the "
               "synchronous baseline: every replica's window gradient summed by a ring "
               "all-reduce each step and applied by all together) or `servers` (through "
               "cluster.parameter_servers parameter servers, asynchronously: each replica "
               "pushes its window's gradient and pulls the servers' model in one exchange); "
               "stream.max_grad_buffer is the mesh's only."),
      Key("stream.link")
          .Default("tcp")
          .Allowed({"grpc", "tcp"})
          .EmitOnlyUnlessDefault()
          .Doc("`stream.sync: mesh`: how the replicas' gradients travel to each other: `tcp` (a "
               "plain TCP connection per pair, handed out over gRPC with a ticket; gRPC when TLS "
               "is on) or `grpc` (a gRPC stream per pair)."),
      Key("stream.max_in_flight")
          .Default("0")
          .AtLeast(0)
          .AtMost(1024)
          .EmitOnlyUnlessDefault()
          .Doc("`stream.sync: mesh` on `stream.link: tcp`: at most this many messages (each a sum "
               "of up to stream.max_grad_buffer gradients) to each peer sent and not yet taken "
               "by it, and as many waiting to be sent; a replica whose peers have not "
               "acknowledged them waits (0 = no bound, TensAIR's protocol)."),
      Key("stream.produce.rate")
          .Default("0")
          .AtLeast(0)
          .AtMost(10000000)
          .EmitOnlyUnlessDefault()
          .Doc("`strata produce`: events per second (0 = as fast as the broker takes them)."),
      Key("stream.produce.drift.at_event")
          .Default("0")
          .AtLeast(0)
          .EmitOnlyUnlessDefault()
          .Doc("`strata produce`: the first event (counted from 0 over the whole replay) the drift "
               "changes."),
      Key("stream.produce.drift.permute_labels")
          .Default("false")
          .TypeDoc("`true` or `false`")
          .EmitOnlyUnlessDefault()
          .Doc("`strata produce`: from `at_event` on, every label y is sent as p(y), p a fixed "
               "permutation of the classes that moves every class."),
      Key("stream.produce.drift.classes")
          .Default("[]")
          .Flow()
          .EmitOnlyUnlessDefault()
          .TypeDoc("list of class numbers, each in [0, classes)")
          .Doc("`strata produce`: from `at_event` on, only the examples of these classes are "
               "replayed, in the data set's order (a change of the class mix; empty: every "
               "class). With `permute_labels` too, their labels are permuted as well."),

      Key("recovery.restarts")
          .Default("3")
          .AtLeast(0)
          .AtMost(100)
          .Doc("How many times each worker and each parameter server may be started again."),
      Key("recovery.server_checkpoint_s")
          .Default("10")
          .AtLeast(0.1)
          .AtMost(86400)
          .Unit("seconds")
          .Doc("Each parameter server saves its partition (weights, momentum, version, samples "
               "applied) to `checkpoints/ps-<p>.ckpt` this often, and at once when it first "
               "holds a model."),
      Key("recovery.ring_checkpoint_s")
          .Default("10")
          .Check(NeverOrSeconds)
          .TypeDoc("0, or a number in [0.1, 86400]")
          .Doc("While the workers train in the ring, worker 0 saves the model with its momentum "
               "and buffers to `checkpoints/ring.ckpt` this often."),
  };
}

// Resolves each row's field chain against v1::ResolvedJob; a row naming no field is a
// programming error, caught by the first use of the table in any test.
void Bind(JobKey* key) {
  std::string field = key->field.empty() ? key->path : key->field;
  field = absl::StrReplaceAll(field, {{"[]", ""}});
  const Descriptor* message = v1::ResolvedJob::descriptor();
  for (absl::string_view part : absl::StrSplit(field, '.')) {
    const FieldDescriptor* f =
        message == nullptr ? nullptr : message->FindFieldByName(std::string(part));
    if (f == nullptr) {
      std::fprintf(stderr, "job_keys.cc: key %s names no field %s of strata.v1.ResolvedJob\n",
                   key->path.c_str(), field.c_str());
      std::abort();
    }
    key->chain.push_back(f);
    message = f->message_type();
  }
}

// Whole numbers in full ("86400000", not StrCat's "8.64e+07"), others as StrCat writes them.
std::string Number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrCat(v);
}

}  // namespace

std::string JobKey::ListPath() const {
  const size_t at = path.find("[]");
  return at == std::string::npos ? std::string() : path.substr(0, at);
}

std::string JobKey::Name() const {
  const size_t dot = path.find_last_of('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string JobKey::Section() const {
  if (IsListItem()) return ListPath();
  const size_t dot = path.find_last_of('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

bool JobKey::IsListOfMappings() const {
  return !IsListItem() && leaf()->is_repeated() &&
         leaf()->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
}

bool JobKey::IsNumber() const {
  switch (leaf()->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return true;
    default:
      return false;
  }
}

std::string JobKey::RangeText() const {
  const std::string u = unit.empty() ? "" : absl::StrCat(" ", unit);
  if (min && max) {
    return absl::StrCat("in ", min_open ? "(" : "[", Number(*min), ", ", Number(*max),
                        max_open ? ")" : "]", u);
  }
  if (min) return absl::StrCat(min_open ? "> " : ">= ", Number(*min), u);
  if (max) return absl::StrCat(max_open ? "< " : "<= ", Number(*max), u);
  return "";
}

std::string JobKey::TypeText() const {
  if (!type_doc.empty()) return type_doc;
  const FieldDescriptor* f = leaf();
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
    std::vector<std::string> names = allowed;
    if (names.empty()) {
      for (int i = 0; i < f->enum_type()->value_count(); ++i) {
        if (std::string s = Spelled(f->enum_type()->value(i)); !s.empty()) names.push_back(s);
      }
    }
    for (std::string& n : names) n = absl::StrCat("`", n, "`");
    const std::string last = names.back();
    names.pop_back();
    return names.empty() ? last : absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
  }
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) return "string";
  const bool integer = f->cpp_type() != FieldDescriptor::CPPTYPE_DOUBLE &&
                       f->cpp_type() != FieldDescriptor::CPPTYPE_FLOAT;
  // An integer that is one of two values is a switch: "0 or 1".
  if (integer && min && max && !min_open && !max_open && *max - *min == 1) {
    return absl::StrCat(Number(*min), " or ", Number(*max));
  }
  std::string range = RangeText();
  if (integer && range.empty() && f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64) range = ">= 0";
  const std::string kind = integer ? "integer" : (unit.empty() ? "number" : "number of " + unit);
  if (!unit.empty()) range = range.substr(0, range.size() - unit.size() - 1);
  return range.empty() ? kind : absl::StrCat(kind, " ", range);
}

std::string JobKey::DefaultText() const {
  if (required) return "(required)";
  if (default_yaml.empty()) return "(none)";
  return absl::StrCat("`", default_yaml, "`");
}

const std::vector<JobKey>& JobKeys() {
  static const std::vector<JobKey>* table = [] {
    auto* t = new std::vector<JobKey>(MakeTable());
    for (JobKey& k : *t) Bind(&k);
    return t;
  }();
  return *table;
}

const JobKey* FindJobKey(const std::string& path) {
  static const std::map<std::string, const JobKey*>* index = [] {
    auto* m = new std::map<std::string, const JobKey*>();
    for (const JobKey& k : JobKeys()) (*m)[k.path] = &k;
    return m;
  }();
  auto it = index->find(path);
  return it == index->end() ? nullptr : it->second;
}

bool IsFlowSection(const std::string& section) { return section == "cluster.cpu"; }

std::string Spelled(const google::protobuf::EnumValueDescriptor* value) {
  return value->options().GetExtension(v1::spelled);
}

const google::protobuf::EnumValueDescriptor* EnumBySpelling(
    const google::protobuf::EnumDescriptor* type, const std::string& text) {
  for (int i = 0; i < type->value_count(); ++i) {
    if (!text.empty() && Spelled(type->value(i)) == text) return type->value(i);
  }
  return nullptr;
}

std::string Spellings(const google::protobuf::EnumDescriptor* type) {
  std::vector<std::string> names;
  for (int i = 0; i < type->value_count(); ++i) {
    if (std::string s = Spelled(type->value(i)); !s.empty()) names.push_back(s);
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace strata
