// `strata produce JOB.yaml [--address A] [--rate N] [--ramp STEP:SECONDS] [--max-events N]`:
// replays the job's training set (any data set Strata reads: the built-in ones and
// `dataset.name: npy`) onto the job's Redis stream as an unbounded stream of events, one example
// an entry (docs/protocol.md, "Stream events"), looping over the data as TensAIR's generator
// does. The rate is held with a token bucket; `--ramp` raises it in steps. From
// `stream.produce.drift.at_event` on, `permute_labels` sends every label y as p(y), p a fixed
// permutation of the classes (DriftPermutation of the job's seed). Runs until --max-events or
// Ctrl-C; a progress line every second.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>

#include "orchestrator/commands.h"
#include "orchestrator/plan/job_checks.h"
#include "services/common/config/broker_address.h"
#include "services/common/config/job_keys.h"
#include "services/common/ml/dataset.h"
#include "services/common/process/interrupt.h"
#include "services/common/stream/event_replay.h"
#include "services/common/stream/stream_broker.h"
#include "services/common/stream/stream_event.h"

namespace strata::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct ProduceFlags {
  std::string job;
  std::vector<std::string> overrides;
  std::string address;  // empty: stream.address
  double rate = -1;     // < 0: stream.produce.rate
  std::string ramp;     // "STEP:SECONDS"
  int64_t max_events = 0;
  int64_t max_len = 0;
};

// Events sent per XADD pipeline at most: big enough to amortise the round trip, small enough
// that the rate stays smooth at a few thousand events a second.
constexpr int64_t kMaxPipeline = 256;

int64_t WallClockNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

absl::Status ParseRamp(const std::string& text, double* step, double* every) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], step) ||
      !absl::SimpleAtod(parts[1], every) || !(*step > 0) || !(*every > 0) || *step > 1e7 ||
      *every > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ramp '", text, "': give STEP:SECONDS, the events/s added every SECONDS (both > 0)"));
  }
  return absl::OkStatus();
}

class Producer {
 public:
  Producer(const ProduceFlags& flags, const v1::ResolvedJob& job, Dataset data,
           std::unique_ptr<StreamBroker> broker, std::string where)
      : flags_(flags),
        job_(job),
        data_(std::move(data)),
        broker_(std::move(broker)),
        where_(std::move(where)),
        permutation_(DriftPermutation(data_.num_classes, job.training().seed())) {}

  // stream.produce.drift.classes: the examples of those classes, in the data set's order, which
  // the replay keeps to from at_event on. A class the data set does not have, or has no example
  // of, is an error naming the key.
  absl::Status SelectMix() {
    const auto& classes = job_.stream().produce().drift().classes();
    if (classes.empty()) return absl::OkStatus();
    for (int32_t c : classes) {
      if (c >= data_.num_classes) {
        return absl::InvalidArgumentError(
            absl::StrCat("stream.produce.drift.classes: class ", c, " is not one of ", data_.name,
                         "'s ", data_.num_classes, " (0 to ", data_.num_classes - 1, ")"));
      }
      const size_t before = mix_.size();
      for (size_t e = 0; e < data_.train.size(); ++e) {
        if (data_.train.labels[e] == c) mix_.push_back(static_cast<int64_t>(e));
      }
      if (mix_.size() == before) {
        return absl::InvalidArgumentError(absl::StrCat("stream.produce.drift.classes: ", data_.name,
                                                       " has no example of class ", c));
      }
    }
    std::sort(mix_.begin(), mix_.end());
    return absl::OkStatus();
  }

  int Run(double rate, double ramp_step, double ramp_every) {
    const v1::ResolvedStreamDrift& drift = job_.stream().produce().drift();
    const size_t per = data_.example_floats();
    const int64_t examples = static_cast<int64_t>(data_.train.size());
    const Clock::time_point started = Clock::now();
    // A burst of a twentieth of a second's events: the rate holds over any second.
    TokenBucket bucket(rate, std::max(1.0, rate / 20), started);
    Clock::time_point next_line = started + std::chrono::seconds(1);
    int64_t sent = 0, sent_at_line = 0;
    std::vector<StreamFields> batch;
    StreamEvent event;
    event.shape = data_.ExampleShape();
    event.features.resize(per);
    std::printf("produce: %s to stream %s at %s, %s\n", DataText().c_str(),
                job_.stream().key().c_str(), where_.c_str(),
                RateText(rate, ramp_step, ramp_every).c_str());
    std::fflush(stdout);
    while (flags_.max_events == 0 || sent < flags_.max_events) {
      if (Interrupted() != 0) break;
      const Clock::time_point now = Clock::now();
      const double elapsed = std::chrono::duration<double>(now - started).count();
      if (ramp_step > 0) bucket.SetRate(RampedRate(rate, ramp_step, ramp_every, elapsed), now);
      int64_t n = bucket.Available(now, kMaxPipeline);
      if (flags_.max_events > 0) n = std::min(n, flags_.max_events - sent);
      if (n == 0) {
        // Pacing: wait for the next token (at most until the next progress line).
        std::this_thread::sleep_for(std::min<Clock::duration>(bucket.UntilNext(), next_line - now));
      } else {
        batch.clear();
        for (int64_t i = 0; i < n; ++i) {
          const int64_t seq = sent + i;
          const bool drifted = seq >= drift.at_event();
          const int64_t e = drifted && !mix_.empty()
                                ? mix_[static_cast<size_t>((seq - drift.at_event()) %
                                                           static_cast<int64_t>(mix_.size()))]
                                : seq % examples;
          data_.train.CopyFeatures(e, per, event.features.data());
          int32_t label = data_.train.labels[static_cast<size_t>(e)];
          if (drift.permute_labels() && drifted) label = permutation_[label];
          event.label = label;
          event.seq = seq;
          event.produced_ns = WallClockNs();
          batch.push_back(EncodeStreamEvent(event));
        }
        auto ids = broker_->AddMany(job_.stream().key(), batch, flags_.max_len);
        if (!ids.ok()) {
          std::fprintf(stderr, "strata produce: after %lld events: %s\n",
                       static_cast<long long>(sent), std::string(ids.status().message()).c_str());
          return 1;
        }
        bucket.Spend(n);
        sent += n;
      }
      if (Clock::now() >= next_line) {
        const double since = std::chrono::duration<double>(Clock::now() - started).count();
        std::printf(
            "produce: %lld events, %.0f/s in the last second (target %s), pass %lld over "
            "the data, %.0f s%s\n",
            static_cast<long long>(sent), static_cast<double>(sent - sent_at_line),
            bucket.rate() > 0 ? absl::StrCat(bucket.rate(), "/s").c_str() : "unlimited",
            static_cast<long long>(sent / examples + 1), since, DriftText(sent).c_str());
        std::fflush(stdout);
        sent_at_line = sent;
        next_line += std::chrono::seconds(1);
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    std::printf("produce: %s: %lld events in %.1f s (%.0f/s)%s\n",
                Interrupted() != 0 ? "interrupted" : "done", static_cast<long long>(sent), seconds,
                seconds > 0 ? static_cast<double>(sent) / seconds : 0.0, DriftText(sent).c_str());
    std::fflush(stdout);
    return Interrupted() != 0 ? 130 : 0;
  }

 private:
  std::string DataText() const {
    return absl::StrCat(data_.train.size(), " examples of ", data_.name, " (shape ",
                        ShapeText(data_.ExampleShape()), ", ", data_.num_classes, " classes)");
  }
  static std::string RateText(double rate, double step, double every) {
    if (rate <= 0) return "as fast as the broker takes them";
    std::string text = absl::StrCat(rate, " events/s");
    if (step > 0) absl::StrAppend(&text, ", +", step, " every ", every, " s");
    return text;
  }
  std::string DriftText(int64_t sent) const {
    const v1::ResolvedStreamDrift& drift = job_.stream().produce().drift();
    std::vector<std::string> what;
    if (drift.permute_labels()) what.push_back("labels permuted");
    if (!drift.classes().empty()) {
      what.push_back(absl::StrCat("only classes ", absl::StrJoin(drift.classes(), ", ")));
    }
    if (what.empty()) return "";
    return absl::StrCat("; ", absl::StrJoin(what, " and "),
                        sent > drift.at_event() ? " since event " : " from event ",
                        drift.at_event());
  }

  const ProduceFlags& flags_;
  const v1::ResolvedJob& job_;
  Dataset data_;
  std::vector<int64_t> mix_;  // stream.produce.drift.classes' examples (SelectMix)
  std::unique_ptr<StreamBroker> broker_;
  std::string where_;
  std::vector<int32_t> permutation_;
};

int Produce(const ProduceFlags& flags) {
  JobCheckOptions options;
  options.overrides = flags.overrides;
  auto job = LoadJobOrSayWhy("strata produce", flags.job, options, "produced");
  if (!job) return 2;
  const std::string address_text = flags.address.empty() ? job->stream().address() : flags.address;
  if (address_text.empty()) {
    std::fprintf(stderr,
                 "strata produce: no broker: give --address (redis://HOST:PORT or a unix socket's "
                 "path) or stream.address; a broker of the run's own exists only inside a run\n");
    return 2;
  }
  auto address = ParseBrokerAddress(address_text);
  if (!address.ok()) {
    std::fprintf(stderr, "strata produce: %s: %s\n",
                 flags.address.empty() ? "stream.address" : "--address",
                 std::string(address.status().message()).c_str());
    return 2;
  }
  double ramp_step = 0, ramp_every = 0;
  if (!flags.ramp.empty()) {
    if (absl::Status s = ParseRamp(flags.ramp, &ramp_step, &ramp_every); !s.ok()) {
      std::fprintf(stderr, "strata produce: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  const double rate = flags.rate >= 0 ? flags.rate : job->stream().produce().rate();
  if (rate > 1e7 || (ramp_step > 0 && rate <= 0)) {
    std::fprintf(stderr, "strata produce: --rate must be in [0, 1e7] events/s%s\n",
                 ramp_step > 0 ? ", and > 0 to ramp from" : "");
    return 2;
  }

  auto data = LoadDataset(DatasetOptionsFor(*job));
  if (!data.ok()) {
    std::fprintf(stderr, "strata produce: %s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  if (!data->class_labels()) {
    std::fprintf(stderr,
                 "strata produce: %s holds targets (training.loss %s); a stream event carries a "
                 "class label\n",
                 data->name.c_str(), Spelled(job->training().loss()).c_str());
    return 2;
  }
  if (data->train.size() == 0) {
    std::fprintf(stderr, "strata produce: %s has no training examples to replay\n",
                 data->name.c_str());
    return 2;
  }

  StreamBrokerOptions broker_options;
  broker_options.who = "produce";
  auto broker = ConnectStreamBroker(*address, broker_options);
  if (!broker.ok()) {
    std::fprintf(stderr, "strata produce: %s (is the broker running?)\n",
                 std::string(broker.status().message()).c_str());
    return 1;
  }
  InstallInterruptHandlers();
  Producer producer(flags, *job, *std::move(data), *std::move(broker), address->Describe());
  if (absl::Status mix = producer.SelectMix(); !mix.ok()) {
    std::fprintf(stderr, "strata produce: %s; nothing was sent\n",
                 std::string(mix.message()).c_str());
    return 2;
  }
  return producer.Run(rate, ramp_step, ramp_every);
}

}  // namespace

void AddProduceCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "produce", "replay the job's data set onto its Redis stream, as events at a given rate");
  auto flags = std::make_shared<ProduceFlags>();
  cmd->add_option("job", flags->job, "job spec (YAML)")->required();
  cmd->add_option("--set", flags->overrides, "override a key (repeatable)");
  cmd->add_option("--address", flags->address,
                  "the broker: redis://HOST:PORT or a unix socket's path (default stream.address)");
  cmd->add_option("--rate", flags->rate,
                  "events per second, 0 = unlimited (default stream.produce.rate)");
  cmd->add_option("--ramp", flags->ramp, "STEP:SECONDS: add STEP events/s every SECONDS");
  cmd->add_option("--max-events", flags->max_events, "stop after N events (default: never)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-len", flags->max_len,
                  "cap the stream at about N entries (XADD MAXLEN ~; default: no cap)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([flags, exit_code] { *exit_code = Produce(*flags); });
}

}  // namespace strata::cli
