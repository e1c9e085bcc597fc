// strata-ps against a hostile client: checkpoint paths outside --run-dir, devices, FIFOs and
// lying checkpoint headers, pushes that are finite but would leave the model non-finite, and
// whatever a client can send to the plain-TCP push/pull data plane.
// Each is refused with a status naming the problem, the model stays as it was, and the server
// keeps serving.
#include <sys/stat.h>

#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include <gtest/gtest.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include "services/parameter_server/ps_process.h"
#include "tests/integration/parameter_server/ps_test_util.h"

namespace strata::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kTraining[] =
    "{ lr: 0.1, momentum: 0.9, weight_decay: 0.01, batch_size: 8, epochs: 1 }";

// A checkpoint whose only tensor claims shape [-1] with 2^64-4 bytes, plus one of 4 bytes: the
// sizes sum to 0 modulo 2^64, so with a valid checksum only the parser's own checks refuse it.
std::string LyingCheckpoint() {
  nlohmann::json tensor = {{"name", "fc1.weight"},
                           {"shape", {-1}},
                           {"dtype", "float32"},
                           {"kind", "parameter"},
                           {"bytes", uint64_t{0} - 4}};
  nlohmann::json other = {{"name", "fc1.bias"},
                          {"shape", {1}},
                          {"dtype", "float32"},
                          {"kind", "parameter"},
                          {"bytes", 4}};
  const std::string meta =
      nlohmann::json{{"epoch", 0}, {"step", 0}, {"version", 0}, {"tensors", {tensor, other}}}
          .dump();
  std::string out = "STRATACK";
  auto put = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put(kCheckpointFormatVersion);
  put(static_cast<uint32_t>(meta.size()));
  out += meta;
  put(static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size()))));
  return out;
}

class PsInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = dir_ / "run";
    fs::create_directories(run_);
    config_ = WriteJobSpec(dir_, kTraining);
    model_ = SmallModel::Make(/*with_momentum=*/true);
    checkpoint_ = run_ + "/model.ckpt";
    ASSERT_TRUE(WriteCheckpoint(checkpoint_, model_.ToCheckpoint(/*version=*/5)).ok());
  }

  std::unique_ptr<PsProcess> Launch(bool loaded, bool with_run_dir = true, int workers = 1,
                                    const std::string& consistency = "asp") {
    PsProcessOptions o;
    o.binary = STRATA_PS_BINARY;
    o.work_dir = dir_.path();
    o.config = config_;
    o.workers = workers;
    o.consistency = consistency;
    o.train_examples = 1000;
    if (loaded) o.init_checkpoint = checkpoint_;
    if (with_run_dir) o.extra_args = {"--run-dir", run_};
    auto p = PsProcess::Launch(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  static grpc::Status Checkpoint(Stub& stub, bool save, const std::string& path,
                                 v1::CheckpointReply* reply = nullptr) {
    grpc::ClientContext context;
    // Short: a FIFO that blocked the server thread would show as DEADLINE_EXCEEDED.
    context.set_deadline(DeadlineAfter(std::chrono::seconds(10)));
    v1::CheckpointRequest request;
    request.set_path(path);
    v1::CheckpointReply ignored;
    return save ? stub.SaveCheckpoint(&context, request, reply ? reply : &ignored)
                : stub.LoadCheckpoint(&context, request, reply ? reply : &ignored);
  }

  std::vector<v1::PushRequest> PushOf(float gradient, double lr) const {
    std::vector<NamedTensor> tensors;
    for (const auto& p : model_.params)
      tensors.push_back(Filled(p.name(), p.spec.shape, gradient, 0));
    for (const auto& b : model_.buffers) tensors.push_back(Filled(b.name(), b.spec.shape, 1, 0));
    std::vector<v1::PushRequest> m = {Header(0, 5)};
    m[0].mutable_header()->set_lr(lr);
    for (auto& c : Chunks(tensors)) m.push_back(std::move(c));
    return m;
  }

  // The data plane's port and worker `worker`'s ticket, as ParameterServer.DataPlane hands them.
  static std::pair<int, tcp::Ticket> DataPlaneOf(Stub& stub, uint32_t worker) {
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::DataPlaneRequest request;
    request.set_sender(worker);
    v1::DataPlaneOffer offer;
    grpc::Status s = stub.DataPlane(&context, request, &offer);
    EXPECT_TRUE(s.ok()) << s.error_message();
    tcp::Ticket ticket{};
    EXPECT_EQ(offer.ticket().size(), tcp::kTicketBytes);
    if (offer.ticket().size() == tcp::kTicketBytes) {
      std::copy(offer.ticket().begin(), offer.ticket().end(), ticket.begin());
    }
    return {static_cast<int>(offer.port()), ticket};
  }

  ScratchDir dir_;
  std::string run_, config_, checkpoint_;
  SmallModel model_;
};

// Anyone on the machine can connect to the data port. Before: a connection without a hello took
// one of the 256 slots the workers' connections use, and its 10 s were a receive timeout that
// restarted with every byte. Against the old server, the hello trickled a byte every 5 s below
// was never closed (TrickleUntilClosed gave up after 120 s, 24 of its 48 bytes sent) and, with 300
// strangers holding a byte each, the worker's own connection was closed unread. Now strangers wait
// in a pool of their own with one deadline for the whole hello, and the worker is admitted and
// served.
TEST_F(PsInputTest, StrangersWithoutATicketTakeNoWorkersSlot) {
  auto ps = Launch(/*loaded=*/true);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const auto [port, ticket] = DataPlaneOf(*stub, 0);
  EXPECT_TRUE(TrickleUntilClosed(port, std::chrono::seconds(5), std::chrono::seconds(120)))
      << "a hello sent a byte at a time was never cut off";

  Strangers strangers(port, 300);
  EXPECT_GT(strangers.size(), 256u);
  push_pull_wire::LayoutFingerprint fingerprint;
  for (const auto& t : model_.params) fingerprint.Add(t.spec, false);
  for (const auto& t : model_.buffers) fingerprint.Add(t.spec, true);
  push_pull_wire::Request pull;
  pull.kind = push_pull_wire::RequestKind::kPull;
  pull.layout_fingerprint = fingerprint.value();
  pull.deadline_ms = 60000;
  DataPlaneClient worker(port, ticket, /*worker=*/0);
  ASSERT_TRUE(worker.admitted()) << "the worker's connection was refused";
  auto a = worker.Call(pull);
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.reply.version, 5);
}

// A shared push rewritten while the server handles it. Before: the server scanned the push area
// for its largest magnitude, then ran its step reading the area again, so a writer racing the
// exchange (here the worker's own threads; any process of the same user could open the region
// as /proc/PID/fd/FD of the server) could put NaN into the published model. Run against the old
// server, this test found a memfd among the server's descriptors (the path another process
// would take) and NaN at element 0 of the pulled weights, in each of three runs. Now the server
// copies the push out in the pass that checks it and applies the copy, and holds no descriptor of
// the region once its worker has it.
TEST_F(PsInputTest, ASharedPushRewrittenDuringTheExchangeNeverReachesTheModel) {
  // Plain SGD: a push of zero gradients leaves every weight where it was.
  config_ = WriteJobSpec(
      dir_, "{ lr: 0.1, momentum: 0, weight_decay: 0, batch_size: 8, epochs: 1 }", "plain.yaml");
  auto ps = Launch(/*loaded=*/true);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const auto [port, ticket] = DataPlaneOf(*stub, 0);
  push_pull_wire::LayoutFingerprint fingerprint;
  size_t floats = 0, parameter_floats = 0;
  for (const auto& t : model_.params) {
    fingerprint.Add(t.spec, false);
    parameter_floats += static_cast<size_t>(t.spec.numel());
  }
  floats = parameter_floats;
  for (const auto& t : model_.buffers) {
    fingerprint.Add(t.spec, true);
    floats += static_cast<size_t>(t.spec.numel());
  }
  DataPlaneClient worker(port, ticket, /*worker=*/0);
  push_pull_wire::Request pull;
  pull.kind = push_pull_wire::RequestKind::kPull;
  pull.layout_fingerprint = fingerprint.value();
  pull.deadline_ms = 60000;
  const auto before = worker.Call(pull);
  ASSERT_TRUE(before.status.ok()) << before.status;
  ASSERT_EQ(before.model.size(), floats);
  // Zero gradients, and the buffers' own values.
  std::vector<float> honest(floats, 0.0f);
  std::copy(before.model.begin() + parameter_floats, before.model.end(),
            honest.begin() + parameter_floats);

  auto region = worker.Share(fingerprint.value(), floats * sizeof(float));
  ASSERT_TRUE(region.ok()) << region.status();
  // Flips one gradient and one buffer value between the honest one and NaN, Inf or -Inf, as
  // fast as it can, for as long as the exchanges run.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> rounds{0};
  std::thread hostile([&, area = reinterpret_cast<volatile float*>((*region)->push_area())] {
    const float poison[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
    const size_t targets[] = {0, floats - 1};
    for (int64_t round = 0; !stop.load(std::memory_order_relaxed); ++round) {
      for (size_t t : targets) area[t] = poison[round % 3];
      for (size_t t : targets) area[t] = honest[t];
      rounds.store(round + 1, std::memory_order_relaxed);
    }
  });
  push_pull_wire::Request exchange;
  exchange.worker = 0;
  exchange.layout_fingerprint = fingerprint.value();
  exchange.payload_bytes = floats * sizeof(float);
  exchange.deadline_ms = 60000;
  exchange.samples = 8;
  exchange.lr = 0.1;
  int accepted = 0, refused = 0;
  int64_t version = before.reply.version;
  // At least 2000 exchanges, and on until the writer has been seen at work (bounded).
  for (int i = 0; i < 2000 || (rounds.load() < 100000 && i < 200000); ++i) {
    exchange.version = version;
    // Besides the thread, this one: the push is rewritten a chosen time after the request went
    // out (0 to 63 us, a different time each exchange), while the server reads it.
    std::memcpy((*region)->push_area(), honest.data(), floats * sizeof(float));
    exchange.kind = push_pull_wire::RequestKind::kExchangeShared;
    ASSERT_TRUE(worker.Send(exchange, {}).ok());
    const auto rewrite_at = std::chrono::steady_clock::now() + std::chrono::microseconds(i % 64);
    while (std::chrono::steady_clock::now() < rewrite_at) {
    }
    auto* area = reinterpret_cast<volatile float*>((*region)->push_area());
    area[0] = std::nanf("");
    area[floats - 1] = std::numeric_limits<float>::infinity();
    auto a = worker.Receive(region->get());
    ASSERT_FALSE(a.closed) << a.status;
    if (a.status.ok()) {
      ++accepted;
      version = a.reply.version;
    } else {
      ASSERT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
      ++refused;
    }
  }
  stop = true;
  hostile.join();
  // (After the exchanges: the server answers a request only once the hand-over is over.)
  int server_memfds = 0;
  for (const auto& entry : fs::directory_iterator(absl::StrCat("/proc/", ps->pid(), "/fd"))) {
    std::error_code ec;
    const auto target = fs::read_symlink(entry.path(), ec);
    if (!ec && target.string().rfind("/memfd:strata-push-pull", 0) == 0) ++server_memfds;
  }
  EXPECT_EQ(server_memfds, 0) << "another process of this user could open the region";

  const auto after = worker.Call(pull);
  ASSERT_TRUE(after.status.ok()) << after.status;
  ASSERT_EQ(after.model.size(), floats);
  for (size_t i = 0; i < floats; ++i) {
    ASSERT_TRUE(std::isfinite(after.model[i])) << "element " << i << " after " << accepted
                                               << " accepted and " << refused << " refused pushes";
    ASSERT_EQ(after.model[i], before.model[i]) << "element " << i << " moved";
  }
  std::printf("shared pushes under attack: %d accepted, %d refused, %lld rewrites\n", accepted,
              refused, static_cast<long long>(rounds.load()));
}

// Before: one ticket per server for all workers, so whoever held worker 0's could open a
// connection naming worker 1 and push and pull as it (BSP and SSP count clocks per worker). Run
// against the old server, the pull below as worker 1 was answered with the model. Now each
// worker has its own ticket, and a hello naming another worker is closed unread.
TEST_F(PsInputTest, AWorkersTicketAdmitsThatWorkerOnly) {
  auto ps = Launch(/*loaded=*/true, /*with_run_dir=*/true, /*workers=*/2, "ssp");
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const auto [port, ticket0] = DataPlaneOf(*stub, 0);
  const auto [port1, ticket1] = DataPlaneOf(*stub, 1);
  EXPECT_EQ(port, port1);
  EXPECT_NE(ticket0, ticket1);

  push_pull_wire::LayoutFingerprint fingerprint;
  for (const auto& t : model_.params) fingerprint.Add(t.spec, false);
  for (const auto& t : model_.buffers) fingerprint.Add(t.spec, true);
  push_pull_wire::Request pull;
  pull.kind = push_pull_wire::RequestKind::kPull;
  pull.layout_fingerprint = fingerprint.value();
  pull.deadline_ms = 60000;

  {  // Worker 0's ticket in a hello naming worker 1.
    DataPlaneClient impostor(port, ticket0, /*worker=*/1);
    pull.worker = 1;
    auto a = impostor.Call(pull);
    EXPECT_TRUE(a.closed) << "answered a pull as worker 1 on worker 0's ticket: " << a.status;
  }
  {  // Each worker's own ticket admits it, and its requests must name it.
    DataPlaneClient worker1(port, ticket1, /*worker=*/1);
    pull.worker = 1;
    auto a = worker1.Call(pull);
    ASSERT_TRUE(a.status.ok()) << a.status;
    pull.worker = 0;
    a = worker1.Call(pull);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
  }
  DataPlaneClient worker0(port, ticket0, /*worker=*/0);
  pull.worker = 0;
  EXPECT_TRUE(worker0.Call(pull).status.ok());
}

TEST_F(PsInputTest, CheckpointPathsOutsideTheRunDirectoryAreRefused) {
  auto ps = Launch(/*loaded=*/true);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());

  // Before: the file was written wherever the caller said.
  for (const std::string& outside : {dir_ / "outside.ckpt", std::string("../escape.ckpt")}) {
    grpc::Status s = Checkpoint(*stub, /*save=*/true, outside);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_NE(s.error_message().find(outside), std::string::npos) << s.error_message();
  }
  EXPECT_FALSE(fs::exists(dir_ / "outside.ckpt"));
  EXPECT_FALSE(fs::exists(dir_ / "escape.ckpt"));
  v1::CheckpointReply reply;
  grpc::Status saved = Checkpoint(*stub, /*save=*/true, "saved/ps-0.ckpt", &reply);
  ASSERT_TRUE(saved.ok()) << saved.error_message();
  EXPECT_TRUE(ReadCheckpoint(run_ + "/saved/ps-0.ckpt").ok());

  // Before: any readable file was parsed, and /etc/passwd's failure said what it held.
  grpc::Status s = Checkpoint(*stub, /*save=*/false, "/etc/passwd");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(s.error_message().find("root:"), std::string::npos) << s.error_message();

  // A link in the run directory to /dev/zero (before: read until the server ran out of memory).
  fs::create_symlink("/dev/zero", run_ + "/zero.ckpt");
  s = Checkpoint(*stub, /*save=*/false, "zero.ckpt");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();

  // A FIFO inside the run directory (before: the handler blocked for ever waiting for a writer).
  ASSERT_EQ(mkfifo((run_ + "/fifo.ckpt").c_str(), 0600), 0);
  s = Checkpoint(*stub, /*save=*/false, "fifo.ckpt");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("not a regular file"), std::string::npos) << s.error_message();

  // A lying header inside the run directory (before: an exception, UNKNOWN to the caller).
  ASSERT_TRUE(WriteFileAtomic(run_ + "/lying.ckpt", LyingCheckpoint()).ok());
  s = Checkpoint(*stub, /*save=*/false, "lying.ckpt");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS) << s.error_message();

  // Nothing changed and the server still serves.
  const v1::ServerStatus status = GetStatus(*stub);
  EXPECT_TRUE(status.loaded());
  EXPECT_EQ(status.version(), 5);
}

// Before: the save's temporary file had a predictable name (`PATH.tmp.PID`) and was opened with
// O_CREAT | O_TRUNC, following links, so a link planted there by anything that can write the run
// directory (every container of a compose or Kubernetes job) got a file outside overwritten with
// the model; and the checkpoint was 0644, readable by every local user. Run against the old code,
// this test found the victim holding checkpoint bytes and the mode 0644.
TEST_F(PsInputTest, ASaveFollowsNoPlantedLinkAndIsPrivate) {
  auto ps = Launch(/*loaded=*/true);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const std::string victim = dir_ / "victim.txt";
  ASSERT_TRUE(WriteFileAtomic(victim, "precious").ok());
  fs::create_directories(run_ + "/saved");
  fs::create_symlink(victim, absl::StrCat(run_, "/saved/ps-0.ckpt.tmp.", ps->pid()));

  grpc::Status saved = Checkpoint(*stub, /*save=*/true, "saved/ps-0.ckpt");
  ASSERT_TRUE(saved.ok()) << saved.error_message();
  EXPECT_EQ(ReadFile(victim).value_or(""), "precious");
  struct stat st;
  ASSERT_EQ(::stat((run_ + "/saved/ps-0.ckpt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(ReadCheckpoint(run_ + "/saved/ps-0.ckpt").ok());

  // A directory the request names is made 0700 by the server itself.
  saved = Checkpoint(*stub, /*save=*/true, "fresh/ps-0.ckpt");
  ASSERT_TRUE(saved.ok()) << saved.error_message();
  ASSERT_EQ(::stat((run_ + "/fresh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(PsInputTest, WithoutARunDirectoryTheCheckpointRpcsTakeNoPath) {
  auto ps = Launch(/*loaded=*/true, /*with_run_dir=*/false);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  grpc::Status s = Checkpoint(*stub, /*save=*/false, checkpoint_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("--run-dir"), std::string::npos) << s.error_message();
  s = Checkpoint(*stub, /*save=*/true, dir_ / "anywhere.ckpt");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_FALSE(fs::exists(dir_ / "anywhere.ckpt"));
}

TEST_F(PsInputTest, InitCheckpointWithALyingHeaderEndsTheServerCleanly) {
  // Before: the exception escaped main and the process aborted (killed by SIGABRT).
  const std::string lying = run_ + "/lying.ckpt";
  ASSERT_TRUE(WriteFileAtomic(lying, LyingCheckpoint()).ok());
  PsProcessOptions o;
  o.binary = STRATA_PS_BINARY;
  o.work_dir = dir_.path();
  o.config = config_;
  o.train_examples = 1000;
  o.init_checkpoint = lying;
  auto refused = PsProcess::Launch(o);
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("exited with code"), std::string::npos) << message;  // not a signal
  EXPECT_NE(message.find("negative dimension"), std::string::npos) << message;
}

TEST_F(PsInputTest, PushesThatWouldPoisonTheModelAreRefusedAndChangeNothing) {
  auto ps = Launch(/*loaded=*/true);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const Pulled before = RawPull(*stub);
  ASSERT_TRUE(before.status.ok());

  // Before: 1e300 is finite as a double, became inf as the float rate, and every weight NaN.
  grpc::Status s = RawPush(*stub, PushOf(0.5f, 1e300));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("learning rate"), std::string::npos) << s.error_message();
  // Finite gradients near FLT_MAX at an admissible rate: the step overflows to inf.
  s = RawPush(*stub, PushOf(FLT_MAX / 2, 10.0));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("non-finite"), std::string::npos) << s.error_message();

  const Pulled after = RawPull(*stub);
  ASSERT_TRUE(after.status.ok());
  EXPECT_EQ(after.version, before.version);
  ASSERT_EQ(after.tensors.size(), before.tensors.size());
  for (size_t i = 0; i < after.tensors.size(); ++i) {
    EXPECT_EQ(after.tensors[i].data, before.tensors[i].data) << after.tensors[i].name();
  }
  const v1::ServerStatus status = GetStatus(*stub);
  EXPECT_EQ(status.pushes(), 0);
  EXPECT_EQ(status.rejected_pushes(), 2);
  // The momentum is untouched too: an ordinary push afterwards gives finite weights.
  const Pulled good = RawPushPull(*stub, PushOf(0.5f, 0));
  ASSERT_TRUE(good.status.ok()) << good.status.error_message();
  EXPECT_EQ(good.version, 6);
  for (const auto& t : good.tensors) {
    for (int64_t k = 0; k < t.spec.numel(); ++k)
      ASSERT_TRUE(std::isfinite(t.floats()[k])) << t.name();
  }
}

TEST_F(PsInputTest, TheTcpDataPlaneRefusesWhatAHostileClientSendsAndKeepsServing) {
  auto ps = Launch(/*loaded=*/true);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const Pulled before = RawPull(*stub);
  ASSERT_TRUE(before.status.ok());

  // The plane is handed out to this job's workers only.
  v1::DataPlaneOffer offer;
  {
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::DataPlaneRequest request;
    request.set_sender(1);  // the job has worker 0 only
    grpc::Status s = stub->DataPlane(&context, request, &offer);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::DataPlaneRequest request;
    grpc::Status s = stub->DataPlane(&context, request, &offer);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_EQ(offer.ticket().size(), tcp::kTicketBytes);
  const int port = static_cast<int>(offer.port());
  tcp::Ticket ticket;
  std::copy(offer.ticket().begin(), offer.ticket().end(), ticket.begin());

  push_pull_wire::LayoutFingerprint fingerprint;
  size_t floats = 0;
  for (const auto& t : model_.params) {
    fingerprint.Add(t.spec, false);
    floats += static_cast<size_t>(t.spec.numel());
  }
  for (const auto& t : model_.buffers) {
    fingerprint.Add(t.spec, true);
    floats += static_cast<size_t>(t.spec.numel());
  }
  push_pull_wire::Request exchange;
  exchange.worker = 0;
  exchange.version = 5;
  exchange.layout_fingerprint = fingerprint.value();
  exchange.payload_bytes = floats * sizeof(float);
  exchange.deadline_ms = 60000;
  const std::vector<float> good(floats, 0.5f);

  {  // A wrong ticket: the connection is closed before anything is read from it.
    tcp::Ticket wrong = ticket;
    wrong[7] ^= 1;
    DataPlaneClient c(port, wrong);
    EXPECT_TRUE(c.ClosedByServer());
  }
  {  // A worker outside the job, with the right ticket: closed as well.
    DataPlaneClient c(port, ticket, /*worker=*/9);
    EXPECT_TRUE(c.ClosedByServer());
  }
  {  // A header that is not one: refused, then closed (nothing after it can be found).
    DataPlaneClient c(port, ticket);
    std::vector<uint8_t> junk(push_pull_wire::kRequestBytes, 0xAB);
    ASSERT_TRUE(c.SendRaw(junk.data(), junk.size()).ok());
    auto a = c.Receive();
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_NE(a.status.message().find("bad magic"), std::string::npos) << a.status;
    EXPECT_TRUE(c.ClosedByServer());
  }
  {  // A payload announced past the limit is refused from the header alone.
    DataPlaneClient c(port, ticket);
    push_pull_wire::Request lying = exchange;
    lying.payload_bytes = push_pull_wire::kMaxPayloadBytes + 4;
    auto a = c.Call(lying);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_TRUE(c.ClosedByServer());
  }
  {  // Refusals of whole requests leave the connection usable.
    DataPlaneClient c(port, ticket);
    push_pull_wire::Request wrong_size = exchange;
    wrong_size.payload_bytes = 8;
    auto a = c.Call(wrong_size, {1.0f, 2.0f});
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_NE(a.status.message().find("this partition holds"), std::string::npos) << a.status;

    push_pull_wire::Request other_model = exchange;
    other_model.layout_fingerprint ^= 1;
    a = c.Call(other_model, good);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kFailedPrecondition) << a.status;
    EXPECT_NE(a.status.message().find("different model"), std::string::npos) << a.status;

    std::vector<float> poisoned = good;
    poisoned[3] = std::nanf("");
    a = c.Call(exchange, poisoned);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_NE(a.status.message().find("fc1.weight"), std::string::npos) << a.status;

    push_pull_wire::Request bad_rate = exchange;
    bad_rate.lr = 1e300;
    a = c.Call(bad_rate, good);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_NE(a.status.message().find("learning rate"), std::string::npos) << a.status;

    push_pull_wire::Request future = exchange;
    future.version = 1000;
    a = c.Call(future, good);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_NE(a.status.message().find("future"), std::string::npos) << a.status;

    // A 16-bit exchange (strategy.push_compression fp16) must be the partition's size in its
    // form, halves for the parameters, floats for the buffers; and its halves are checked as
    // floats are: a NaN among them is refused, naming the tensor.
    push_pull_wire::Request half = exchange;
    half.kind = push_pull_wire::RequestKind::kExchangeHalf;
    a = c.Call(half, good);  // 32-bit sized
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_NE(a.status.message().find("16-bit push"), std::string::npos) << a.status;
    size_t parameter_floats = 0;
    for (const auto& t : model_.params) parameter_floats += static_cast<size_t>(t.spec.numel());
    half.payload_bytes =
        push_pull_wire::PayloadBytes(parameter_floats, floats - parameter_floats, true);
    std::vector<uint8_t> halves(half.payload_bytes, 0);
    halves[6] = 0x00;
    halves[7] = 0x7e;  // value 3: a NaN half
    uint8_t header[push_pull_wire::kRequestBytes];
    push_pull_wire::EncodeRequest(half, header);
    ASSERT_TRUE(c.SendRaw(header, sizeof(header)).ok());
    ASSERT_TRUE(c.SendRaw(halves.data(), halves.size()).ok());
    a = c.Receive();
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_NE(a.status.message().find("fc1.weight"), std::string::npos) << a.status;

    push_pull_wire::Request pull;
    pull.kind = push_pull_wire::RequestKind::kPull;
    pull.layout_fingerprint = fingerprint.value();
    a = c.Call(pull);
    ASSERT_TRUE(a.status.ok()) << a.status;
    EXPECT_EQ(a.reply.version, before.version) << "nothing refused changed the model";
    size_t at = 0;
    for (const auto& t : before.tensors) {
      for (int64_t k = 0; k < t.spec.numel(); ++k, ++at) {
        ASSERT_EQ(a.model[at], t.floats()[k]) << t.name() << "[" << k << "]";
      }
    }
  }
  {  // A worker that hangs up halfway through its push.
    DataPlaneClient c(port, ticket);
    uint8_t header[push_pull_wire::kRequestBytes];
    push_pull_wire::EncodeRequest(exchange, header);
    ASSERT_TRUE(c.SendRaw(header, sizeof(header)).ok());
    ASSERT_TRUE(c.SendRaw(good.data(), good.size() * sizeof(float) / 2).ok());
  }
  {  // Shared memory: the same checks, and nothing is read from the socket that is not there.
    DataPlaneClient c(port, ticket);
    auto unoffered = SharedRegion::Create(floats * sizeof(float));  // not the server's
    ASSERT_TRUE(unoffered.ok()) << unoffered.status();
    auto a = c.CallShared(exchange, **unoffered, good);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kFailedPrecondition) << a.status;
    EXPECT_NE(a.status.message().find("share request first"), std::string::npos) << a.status;

    auto region = c.Share(fingerprint.value(), floats * sizeof(float));
    ASSERT_TRUE(region.ok()) << region.status();
    std::vector<float> poisoned = good;
    poisoned[3] = std::numeric_limits<float>::infinity();
    a = c.CallShared(exchange, **region, poisoned);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_NE(a.status.message().find("fc1.weight"), std::string::npos) << a.status;

    push_pull_wire::Request wrong_size = exchange;
    wrong_size.payload_bytes = 8;
    a = c.CallShared(wrong_size, **region, good);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kInvalidArgument) << a.status;
    EXPECT_NE(a.status.message().find("this partition holds"), std::string::npos) << a.status;

    auto other_worker = c.Share(fingerprint.value(), floats * sizeof(float), /*worker=*/3);
    EXPECT_EQ(other_worker.status().code(), absl::StatusCode::kInvalidArgument)
        << other_worker.status();
    // An offer is not a model: asking again gives a fresh region (the old one is no longer read).
    auto again = c.Share(fingerprint.value(), floats * sizeof(float));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_NE((*again)->offer().socket_id, (*region)->offer().socket_id);
  }
  const v1::ServerStatus status = GetStatus(*stub);
  EXPECT_EQ(status.pushes(), 0);
  EXPECT_GE(status.rejected_pushes(), 8);
  EXPECT_EQ(status.shared_memory_exchanges(), 0);

  // Still serving: an ordinary exchange is applied and answered with the new model.
  DataPlaneClient c(port, ticket);
  auto a = c.Call(exchange, good);
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.reply.version, 6);
  ASSERT_EQ(a.model.size(), floats);
  for (float v : a.model) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(a.model[0], before.tensors[0].floats()[0]);

  // And through a shared region, on the same connection: the model of version 7 comes back in
  // the region, equal to what a pull over the socket then reads.
  auto region = c.Share(fingerprint.value(), floats * sizeof(float));
  ASSERT_TRUE(region.ok()) << region.status();
  push_pull_wire::Request next = exchange;
  next.version = 6;
  auto shared = c.CallShared(next, **region, good);
  ASSERT_TRUE(shared.status.ok()) << shared.status;
  EXPECT_EQ(shared.reply.version, 7);
  push_pull_wire::Request pull;
  pull.kind = push_pull_wire::RequestKind::kPull;
  pull.layout_fingerprint = fingerprint.value();
  auto pulled = c.Call(pull);
  ASSERT_TRUE(pulled.status.ok()) << pulled.status;
  EXPECT_EQ(pulled.model, shared.model);
  EXPECT_NE(shared.model, a.model);
  EXPECT_EQ(GetStatus(*stub).shared_memory_exchanges(), 1);
}

}  // namespace
}  // namespace strata::testing
