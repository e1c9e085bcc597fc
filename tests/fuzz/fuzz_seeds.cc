// Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/seed-*) from the real
// encoders, so the seeds follow the formats when they change: valid tensor streams, checkpoints
// ring segments, the plain-TCP link's frames and .npy files, the job specs of configs/, and a few
// hostile inputs of each kind that the parsers must refuse (the cases docs/security.md lists).
//
//   cmake --build build-fuzz --target fuzz_seeds   # after scripts/fuzz.sh configured the tree
//   build-fuzz/bin/fuzz_seeds tests/fuzz/corpus configs
//
// Inputs the fuzzers found (crash-*) are kept beside the seeds and not touched here.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <grpcpp/support/byte_buffer.h>
#include <nlohmann/json.hpp>

#include "services/collective/mesh_frame.h"
#include "services/collective/segment_codec.h"
#include "services/collective/tcp_frame.h"
#include "services/common/stream/stream_event.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/npy_file.h"
#include "services/common/wire/push_pull_frame.h"
#include "services/common/wire/tensor_codec.h"
#include "strata/v1/evaluator.pb.h"
#include "tests/fuzz/stream_entry_bytes.h"
#include "tests/support/crafted_checkpoint.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / ("seed-" + name), std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::cerr << "fuzz_seeds: cannot write " << (dir / name) << "\n";
    std::exit(1);
  }
}

NamedTensor Filled(TensorSpec spec) {
  NamedTensor t = NamedTensor::Zeros(std::move(spec));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<uint8_t>(i * 37 + 11);
  return t;
}

// The small model the tensor-codec target's streaming destination holds.
std::vector<NamedTensor> Model() {
  std::vector<NamedTensor> model = {
      Filled({"fc.weight", {4, 3}, DType::kFloat32}), Filled({"fc.bias", {3}, DType::kFloat32}),
      Filled({"steps", {}, DType::kInt64}), NamedTensor::Zeros({"empty", {0, 5}, DType::kFloat32})};
  for (int i = 0; i < 12; ++i) model[0].floats()[i] = 0.25f * static_cast<float>(i - 6);
  return model;
}

std::string Request(const std::vector<v1::TensorChunk>& chunks) {
  v1::EvaluateRequest request;
  for (const auto& c : chunks) *request.add_tensors() = c;
  return request.SerializeAsString();
}

std::string Encoded(const std::vector<NamedTensor>& tensors, size_t chunk_bytes) {
  auto chunks = EncodeAll(tensors, {chunk_bytes});
  if (!chunks.ok()) {
    std::cerr << "fuzz_seeds: " << chunks.status() << "\n";
    std::exit(1);
  }
  return Request(*chunks);
}

void TensorCodecSeeds(const fs::path& dir) {
  Write(dir, "model", Encoded(Model(), 1 << 20));
  // Several chunks per tensor (EncodeTensor sends at least 64 bytes a chunk).
  Write(dir, "chunked",
        Encoded({Filled({"conv.weight", {8, 2, 3, 3}, DType::kFloat32}),
                 Filled({"ids", {5}, DType::kInt64})},
                64));
  // Hostile: a header declaring 1 GiB over 16 bytes of data, data without a header, a negative
  // dimension, a chunk at the wrong offset, an unknown dtype.
  v1::TensorChunk huge;
  huge.mutable_header()->set_name("huge");
  huge.mutable_header()->add_shape(int64_t{1} << 28);
  huge.mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
  huge.set_data(std::string(16, '\0'));
  Write(dir, "declares-1gib", Request({huge}));
  v1::TensorChunk headless;
  headless.set_data(std::string(8, '\1'));
  Write(dir, "no-header", Request({headless}));
  v1::TensorChunk negative = huge;
  negative.mutable_header()->set_shape(0, -4);
  Write(dir, "negative-dimension", Request({negative}));
  auto chunked = *EncodeAll({Filled({"w", {32}, DType::kFloat32})}, {64});
  chunked[1].set_offset(chunked[1].offset() + 4);
  Write(dir, "wrong-offset", Request(chunked));
  v1::TensorChunk dtype = huge;
  dtype.mutable_header()->set_shape(0, 4);
  dtype.mutable_header()->set_dtype(static_cast<v1::DType>(7));
  Write(dir, "unknown-dtype", Request({dtype}));
}

std::string Serialized(const Checkpoint& c) {
  auto bytes = SerializeCheckpoint(c);
  if (!bytes.ok()) {
    std::cerr << "fuzz_seeds: " << bytes.status() << "\n";
    std::exit(1);
  }
  return *bytes;
}

void CheckpointSeeds(const fs::path& dir) {
  Checkpoint c;
  c.epoch = 3;
  c.step = 1234;
  c.version = 77;
  c.extra = {{"arch", "mlp"}, {"lr", 0.05}, {"partition", 0}};
  for (NamedTensor& t : Model()) c.entries.push_back({TensorKind::kParameter, std::move(t)});
  c.entries.push_back({TensorKind::kMomentum, Filled({"fc.weight", {4, 3}, DType::kFloat32})});
  c.entries.push_back({TensorKind::kBuffer, Filled({"bn.running_var", {3}, DType::kFloat32})});
  const std::string sample = Serialized(c);
  Write(dir, "model", sample);
  Write(dir, "empty", Serialized(Checkpoint{}));
  // Hostile: cut short, a flipped data byte (bad CRC), a negative dimension whose byte count
  // wraps with the next tensor's, a shape whose size wraps size_t, a byte count as a string.
  Write(dir, "truncated", sample.substr(0, sample.size() / 2));
  std::string flipped = sample;
  flipped[flipped.size() - 10] ^= 0x40;
  Write(dir, "bad-crc", flipped);
  auto tensor = [](nlohmann::json shape, nlohmann::json bytes) {
    return nlohmann::json{{"name", "w"},
                          {"shape", std::move(shape)},
                          {"dtype", "float32"},
                          {"kind", "parameter"},
                          {"bytes", std::move(bytes)}};
  };
  auto meta = [](nlohmann::json tensors) {
    return nlohmann::json{{"epoch", 0}, {"step", 0}, {"version", 0}, {"tensors", tensors}};
  };
  Write(dir, "negative-dimension",
        testing::CraftedCheckpoint(meta({tensor({-1}, uint64_t{0} - 4), tensor({1}, 4)}),
                                   std::string(4, '\0')));
  Write(dir, "size-wraps",
        testing::CraftedCheckpoint(meta({tensor({int64_t{1} << 62, 4}, 0)}), ""));
  Write(dir, "bytes-as-string",
        testing::CraftedCheckpoint(meta({tensor({1}, "4")}), std::string(4, '\0')));
}

std::string Flat(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

void SegmentSeeds(const fs::path& dir) {
  const SegmentHeader header{
      .operation = 3, .sender = 1, .world = 2, .count = 8, .step = 1, .offset = 4};
  const float floats[4] = {1.5f, -2.0f, 0.0f, 3.25f};
  const std::string data = Flat(EncodeSegment(header, floats, 4, std::make_shared<LoanLedger>()));
  // The target's first byte says how many cut points follow (data[0] % 8).
  Write(dir, "data", std::string(1, '\0') + data);
  Write(dir, "data-in-slices", std::string("\x03\x05\x14\x28", 4) + data);
  Write(dir, "abort", std::string(1, '\0') + Flat(EncodeAbort(header, "worker-1: step timed out")));
  // Hostile: a payload length far beyond the message, an abort reason over the 64 KiB cap, an
  // unknown varint field, a group wire type.
  std::string too_long = data.substr(0, data.size() - 16);
  too_long.resize(too_long.size() - 1);
  too_long += std::string("\x80\x80\x80\x80\x80\x20", 6);  // varint 2^40
  Write(dir, "length-beyond-message", std::string(1, '\0') + too_long);
  Write(dir, "abort-over-cap", std::string(1, '\0') + std::string("\x42\x81\x80\x04", 4) + "x");
  Write(dir, "unknown-field", std::string(1, '\0') + std::string("\x78\x96\x01", 3) + data);
  Write(dir, "group-wire-type", std::string(1, '\0') + std::string("\x0b\x0c", 2));
}

// A connection to the plain-TCP data plane (tcp_frame_fuzz.cc): a hello, then frames.
void TcpFrameSeeds(const fs::path& dir) {
  tcp::Ticket ticket{};
  for (size_t i = 0; i < ticket.size(); ++i) ticket[i] = static_cast<uint8_t>(i * 7 + 1);
  std::string hello(tcp::kHelloBytes, '\0');
  tcp_ring::EncodeHello(ticket, 1, reinterpret_cast<uint8_t*>(hello.data()));
  const auto frame = [](tcp_ring::FrameKind kind, uint64_t count, uint64_t offset, uint64_t bytes,
                        const std::string& payload) {
    tcp_ring::Frame f;
    f.kind = kind;
    f.header = SegmentHeader{
        .operation = 3, .sender = 1, .world = 2, .count = count, .step = 2, .offset = offset};
    f.payload_bytes = bytes;
    std::string out(tcp_ring::kFrameHeaderBytes, '\0');
    tcp_ring::EncodeFrame(f, reinterpret_cast<uint8_t*>(out.data()));
    return out + payload;
  };
  using K = tcp_ring::FrameKind;
  const std::string data = frame(K::kData, 8, 4, 16, std::string(16, '\x3f'));
  Write(dir, "operation",
        hello + data + frame(K::kAbort, 0, 0, 9, "timed out") + frame(K::kEnd, 0, 0, 0, ""));
  Write(dir, "ack", hello + frame(K::kAck, 0, 0, 0, ""));
  // Hostile: a payload beyond the declared buffer, an oversized abort, a bad magic after a good
  // frame (frame() would refuse none of these: it only encodes).
  Write(dir, "beyond-buffer", hello + frame(K::kData, 4, 2, 16, std::string(16, '\0')));
  Write(dir, "abort-over-cap", hello + frame(K::kAbort, 0, 0, 1 << 20, "x"));
  Write(dir, "bad-magic", hello + data + std::string(tcp_ring::kFrameHeaderBytes, '\x5a'));
}

// A connection to a stream replica's mesh data plane (mesh_frame_fuzz.cc): a hello, then frames.
void MeshFrameSeeds(const fs::path& dir) {
  tcp::Ticket ticket{};
  for (size_t i = 0; i < ticket.size(); ++i) ticket[i] = static_cast<uint8_t>(i * 5 + 3);
  std::string hello(tcp::kHelloBytes, '\0');
  mesh_frame::EncodeHello(ticket, 0, reinterpret_cast<uint8_t*>(hello.data()));
  const auto frame = [](mesh_frame::Kind kind, uint64_t index, uint32_t count, uint32_t world,
                        uint64_t value_bytes) {
    mesh_frame::Header h;
    h.kind = kind;
    h.sender = 0;
    h.world = world;
    h.index = index;
    h.count = count;
    h.value_bytes = value_bytes;
    std::string out(mesh_frame::kHeaderBytes, '\0');
    mesh_frame::Encode(h, reinterpret_cast<uint8_t*>(out.data()));
    const uint64_t clock = mesh_frame::ClockBytes(h);
    return out + std::string(clock, '\0') + std::string(value_bytes, '\x3f');
  };
  using K = mesh_frame::Kind;
  Write(dir, "exchange",
        hello + frame(K::kGradient, 0, 1, 2, 20) + frame(K::kGradient, 1, 4, 2, 20) +
            frame(K::kEnd, 5, 0, 2, 0));
  Write(dir, "ack", hello + frame(K::kAck, 3, 0, 2, 0));
  Write(dir, "half", hello + frame(K::kHalfGradient, 0, 2, 2, 10));
  // Hostile: values of a ragged size, an end that carries values, a bad magic after a good frame.
  Write(dir, "ragged-values", hello + frame(K::kGradient, 0, 1, 2, 7));
  Write(dir, "end-with-values", hello + frame(K::kEnd, 0, 0, 2, 8));
  Write(dir, "bad-magic",
        hello + frame(K::kGradient, 0, 1, 2, 4) + std::string(mesh_frame::kHeaderBytes, '\x5a'));
}

// A connection to the parameter server's data plane (push_pull_frame_fuzz.cc): a hello, then
// requests; the same bytes are read as replies too, so replies follow as well.
void PushPullFrameSeeds(const fs::path& dir) {
  namespace wire = push_pull_wire;
  tcp::Ticket ticket{};
  for (size_t i = 0; i < ticket.size(); ++i) ticket[i] = static_cast<uint8_t>(i * 5 + 3);
  std::string hello(tcp::kHelloBytes, '\0');
  tcp::EncodeHello(wire::kHelloMagic, wire::kVersion, ticket, 0,
                   reinterpret_cast<uint8_t*>(hello.data()));
  const auto request = [](wire::RequestKind kind, uint64_t bytes) {
    wire::Request r;
    r.kind = kind;
    r.worker = 1;
    r.version = 7;
    r.clock = 3;
    r.samples = 64;
    r.lr = 0.05;
    r.layout_fingerprint = 0x1234;
    r.payload_bytes = bytes;
    r.deadline_ms = 60000;
    std::string out(wire::kRequestBytes, '\0');
    wire::EncodeRequest(r, reinterpret_cast<uint8_t*>(out.data()));
    return out + std::string(bytes, '\x3f');
  };
  const auto reply = [](uint32_t code, uint32_t message, uint64_t bytes) {
    wire::Reply r;
    r.code = code;
    r.message_bytes = message;
    r.version = 8;
    r.global_epoch = 0.5;
    r.samples = 640;
    r.payload_bytes = bytes;
    std::string out(wire::kReplyBytes, '\0');
    wire::EncodeReply(r, reinterpret_cast<uint8_t*>(out.data()));
    return out;
  };
  using K = wire::RequestKind;
  Write(dir, "exchange-then-pull", hello + request(K::kExchange, 16) + request(K::kPull, 0));
  Write(dir, "replies", hello + reply(0, 0, 16) + std::string(16, '\0') + reply(9, 5, 0) + "nope!");
  // Hostile: an exchange without a payload, a payload that is not whole floats, a bad magic.
  Write(dir, "empty-exchange", hello + request(K::kExchange, 0));
  Write(dir, "ragged-payload", hello + request(K::kExchange, 6));
  Write(dir, "bad-magic", hello + std::string(wire::kRequestBytes, '\x5a'));
  // Shared memory: a share, then an exchange whose payload is in the region (only its header on
  // the socket), then a pull; and a share that claims a payload.
  Write(dir, "share-then-shared-exchange",
        hello + request(K::kShareMemory, 0) +
            request(K::kExchangeShared, 16).substr(0, wire::kRequestBytes) + request(K::kPull, 0));
  Write(dir, "share-with-payload", hello + request(K::kShareMemory, 8));
  // 16-bit exchanges: halves then floats, and a reply in halves; one of an odd number of bytes.
  Write(dir, "half-exchange",
        hello + request(K::kExchangeHalf, 14) + std::string(14, '\0') + reply(0, 0, 10) +
            std::string(10, '\0'));
  Write(dir, "ragged-half-exchange", hello + request(K::kExchangeHalf, 7));
}

// Users' .npy arrays (npy_file_fuzz.cc): what np.save writes for each dtype read, headers numpy
// could also have written (version 3.0, Python 2's long integers, another key order), and files
// the reader refuses.
void NpyFileSeeds(const fs::path& dir) {
  const auto saved = [](NpyDType dtype, std::vector<int64_t> shape) {
    auto header = EncodeNpyHeader(dtype, shape);
    if (!header.ok()) {
      std::cerr << "fuzz_seeds: " << header.status() << "\n";
      std::exit(1);
    }
    int64_t bytes = static_cast<int64_t>(NpyItemSize(dtype));
    for (int64_t d : shape) bytes *= d;
    std::string data(static_cast<size_t>(bytes), '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 37 + 11);
    return *header + data;
  };
  // A header of the given text, padded as np.save pads it, then `data`.
  const auto crafted = [](const std::string& dict, const std::string& data, int major = 1) {
    const size_t prefix = major == 1 ? 10 : 12;
    std::string text = dict;
    text.append((64 - (prefix + text.size() + 1) % 64) % 64, ' ');
    text += '\n';
    std::string out("\x93NUMPY", 6);
    out.push_back(static_cast<char>(major));
    out.push_back('\0');
    const uint32_t n = static_cast<uint32_t>(text.size());
    out.append(reinterpret_cast<const char*>(&n), major == 1 ? 2 : 4);
    return out + text + data;
  };
  Write(dir, "float32", saved(NpyDType::kFloat32, {3, 4}));
  Write(dir, "float64-4d", saved(NpyDType::kFloat64, {2, 3, 2, 2}));
  Write(dir, "uint8", saved(NpyDType::kUInt8, {16}));
  Write(dir, "int8", saved(NpyDType::kInt8, {4, 2}));
  Write(dir, "int32-labels", saved(NpyDType::kInt32, {5}));
  Write(dir, "int64-labels", saved(NpyDType::kInt64, {3, 1}));
  Write(dir, "zero-rows", saved(NpyDType::kFloat32, {0, 7}));
  const std::string f4x6(24, '\x3f');
  Write(dir, "version-3",
        crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f4x6, 3));
  Write(dir, "python2-longs",
        crafted("{'shape': (2L, 3L), \"fortran_order\": False, 'descr': '<f4'}", f4x6));
  // Hostile: cut short, trailing bytes, 3 GiB declared in 200 bytes, a shape whose size wraps,
  // a negative dimension, nine dimensions, big-endian, Fortran order, structured, object and
  // complex dtypes, a Python expression, a byte that is not ASCII.
  const std::string good = saved(NpyDType::kFloat32, {3, 4});
  Write(dir, "truncated", good.substr(0, good.size() - 5));
  Write(dir, "trailing-bytes", good + "extra");
  std::string claims =
      crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (805306368,), }", "");
  claims.resize(200, '\x7f');
  Write(dir, "declares-3gib", claims);
  Write(dir, "size-wraps",
        crafted("{'descr': '<i8', 'fortran_order': False, "
                "'shape': (0, 4611686018427387904, 4611686018427387904), }",
                ""));
  Write(dir, "negative-dimension",
        crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", f4x6));
  Write(dir, "nine-dimensions",
        crafted("{'descr': '<f4', 'fortran_order': False, "
                "'shape': (1, 1, 1, 1, 1, 1, 1, 2, 3), }",
                f4x6));
  Write(dir, "big-endian",
        crafted("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", f4x6));
  Write(dir, "fortran-order",
        crafted("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", f4x6));
  Write(dir, "structured",
        crafted("{'descr': [('x', '<f4'), ('y', '<i4')], 'fortran_order': "
                "False, 'shape': (3,), }",
                f4x6));
  Write(dir, "object", crafted("{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", f4x6));
  Write(dir, "complex128",
        crafted("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", std::string(16, 0)));
  Write(dir, "expression",
        crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) * 3, }", f4x6));
  Write(dir, "not-ascii",
        crafted("{'descr': '<f4\xff', 'fortran_order': False, 'shape': (6,), }", f4x6));
}

void JobSpecSeeds(const fs::path& dir, const fs::path& configs) {
  for (const char* name : {"quickstart.yaml", "fmnist-mlp.yaml", "fmnist-resnet20.yaml",
                           "experiments/heterogeneous-job.yaml", "experiments/sharding-job.yaml"}) {
    std::ifstream in(configs / name, std::ios::binary);
    if (!in) {
      std::cerr << "fuzz_seeds: cannot read " << (configs / name) << "\n";
      std::exit(1);
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Write(dir, fs::path(name).stem().string(), text);
  }
  // After each NUL, one --set assignment (see job_spec_fuzz.cc).
  const auto with_sets = [](std::vector<std::string> parts) {
    std::string out = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) out += std::string(1, '\0') + parts[i];
    return out;
  };
  Write(dir, "overrides",
        with_sets({"name: o\ncluster: { workers: 4 }\n", "training.lr=0.05", "strategy.kind=switch",
                   "cluster.cpu.worker=0.5"}));
  // Hostile: duplicate keys, an alias standing for a section, a deep nesting, invalid YAML, a
  // file of comments only, and an override that creates a section under a scalar.
  Write(dir, "duplicate-keys", "name: a\ntraining: { lr: 0.1 }\ntraining: { lr: 0.2 }\n");
  Write(dir, "alias", "x: &t { epochs: 2 }\ntraining: *t\nname: *t\n");
  Write(dir, "deep", "name: d\ndataset: " + std::string(200, '[') + std::string(200, ']') + "\n");
  Write(dir, "invalid", "name: [unclosed\n\ttraining: {\n");
  Write(dir, "comments-only", "# nothing here\n");
  Write(dir, "set-under-scalar", with_sets({"name: s\n", "name.inner=3"}));
}

// Stream events (stream_event_fuzz.cc): what `strata produce` writes for the fuzz target's two
// schemas, and one entry of each malformed kind the decoder refuses.
void StreamEventSeeds(const fs::path& dir) {
  StreamEvent event;
  event.shape = {2, 2};
  event.features = {0.5f, -1.f, 0.f, 3.25f};
  event.label = 3;
  event.produced_ns = 1764300000000000000;
  event.seq = 17;
  const auto entry = [](StreamFields fields) {
    return fuzz::EntryBytes({"1764300000000-0", std::move(fields)});
  };
  const StreamFields good = EncodeStreamEvent(event);
  Write(dir, "event", entry(good));
  StreamEvent image = event;
  image.shape = {1, 28, 28};
  image.features.assign(784, 0.25f);
  Write(dir, "image", entry(EncodeStreamEvent(image)));
  const auto with = [&good](const std::string& name, const std::string& value) {
    StreamFields fields = good;
    for (auto& [n, v] : fields) {
      if (n == name) v = value;
    }
    return fields;
  };
  const float nan = std::nanf("");
  std::string x_nan = good[0].second;
  std::memcpy(&x_nan[4], &nan, 4);
  Write(dir, "nan", entry(with("x", x_nan)));
  Write(dir, "short-x", entry(with("x", good[0].second.substr(0, 12))));
  Write(dir, "other-shape", entry(with("shape", "4,1")));
  Write(dir, "label-out-of-range", entry(with("y", "10")));
  StreamFields no_label = good;
  no_label.erase(no_label.begin() + 2);
  Write(dir, "no-label", entry(no_label));
  StreamFields twice = good;
  twice.push_back(good[2]);
  Write(dir, "label-twice", entry(twice));
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: fuzz_seeds CORPUS_DIR CONFIGS_DIR (e.g. tests/fuzz/corpus configs)\n";
    return 2;
  }
  const std::filesystem::path corpus = argv[1];
  strata::TensorCodecSeeds(corpus / "tensor_codec");
  strata::CheckpointSeeds(corpus / "checkpoint");
  strata::SegmentSeeds(corpus / "segment_codec");
  strata::JobSpecSeeds(corpus / "job_spec", argv[2]);
  strata::TcpFrameSeeds(corpus / "tcp_frame");
  strata::MeshFrameSeeds(corpus / "mesh_frame");
  strata::PushPullFrameSeeds(corpus / "push_pull_frame");
  strata::NpyFileSeeds(corpus / "npy_file");
  strata::StreamEventSeeds(corpus / "stream_event");
  return 0;
}
