#include "services/parameter_server/pdp/pull_coordinator.h"

#include <algorithm>
#include <cmath>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/base/metrics.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The wake-up of a wait that also polls a stream's cancellation.
constexpr auto kPoll = std::chrono::milliseconds(200);

}  // namespace

absl::StatusOr<std::unique_ptr<PullCoordinator>> PullCoordinator::Create(
    PullCoordinatorOptions options) {
  if (options.workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("PDP needs workers, got ", options.workers));
  }
  if (!ServerDecidesPulls(options.mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the pull coordinator serves pdp and apdp, not ", Spelled(options.mode)));
  }
  if (options.fixed_k_star < 0) {
    return absl::InvalidArgumentError(absl::StrCat("K* ", options.fixed_k_star, " < 0"));
  }
  if (options.fixed_k_star == 0) {
    if (absl::Status s = ValidateKStarSearch(options.search); !s.ok()) return s;
  }
  if (options.round_deadline.count() <= 0) {
    return absl::InvalidArgumentError("the round deadline must be positive");
  }
  return std::unique_ptr<PullCoordinator>(new PullCoordinator(std::move(options)));
}

PullCoordinator::PullCoordinator(PullCoordinatorOptions options)
    : options_(std::move(options)), started_(Clock::now()), workers_(options_.workers) {
  if (options_.fixed_k_star > 0) {
    k_star_ = options_.fixed_k_star;
  } else {
    search_.emplace(options_.search);
    k_star_ = search_->k();
  }
}

PullCoordinator::~PullCoordinator() { Stop(); }

void PullCoordinator::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { Run(); });
}

void PullCoordinator::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<int64_t> PullCoordinator::Subscribe(int worker) {
  std::lock_guard<std::mutex> lock(mu_);
  if (worker < 0 || worker >= options_.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", worker, " is not one of the job's ", options_.workers, " workers"));
  }
  if (++workers_[worker].subscriptions > 1) {
    spdlog::warn("worker {} subscribed again to the rounds (at round {})", worker, round_);
  }
  cv_.notify_all();
  const bool owes_update = pulled_round_ == round_ && !workers_[worker].updated;
  return owes_update ? pulled_round_ - 1 : pulled_round_;
}

void PullCoordinator::Unsubscribe(int worker) {
  std::lock_guard<std::mutex> lock(mu_);
  if (worker >= 0 && worker < options_.workers && workers_[worker].subscriptions > 0) {
    --workers_[worker].subscriptions;
  }
}

std::optional<RoundNoticeView> PullCoordinator::Next(int64_t after,
                                                     std::chrono::system_clock::time_point deadline,
                                                     const std::function<bool()>& cancelled) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (after < 0) return RoundNoticeView{0, k_star_, ended_ || stopping_, round_};
    if (pulled_round_ > after) return RoundNoticeView{pulled_round_, k_star_, false};
    if (ended_ || stopping_) return RoundNoticeView{pulled_round_, k_star_, true};
    if ((cancelled && cancelled()) || std::chrono::system_clock::now() >= deadline) {
      return std::nullopt;
    }
    cv_.wait_for(lock, kPoll);
  }
}

absl::StatusOr<int64_t> PullCoordinator::Report(const CountReportView& r) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string who = absl::StrCat("count report of worker ", r.worker, " for round ", r.round);
  if (r.worker < 0 || r.worker >= options_.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": the job has workers 0 to ", options_.workers - 1));
  }
  if (r.points < 0 || !std::isfinite(r.seconds) || r.seconds < 0 || r.dropped < 0 ||
      (r.update && (!std::isfinite(r.loss) || r.version_gap < 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": points ", r.points, ", seconds ", r.seconds,
        r.update ? absl::StrCat(", loss ", r.loss, ", version gap ", r.version_gap) : "",
        " (points, seconds and dropped points must be >= 0 and finite; an update carries a "
        "finite loss and a gap >= 0)"));
  }
  WorkerState& w = workers_[r.worker];
  const auto now = Clock::now();
  if (r.update) {
    if (r.round != pulled_round_ || round_ != pulled_round_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "update ", who.substr(5), ": the coordinator gathers ",
          round_ == pulled_round_ ? absl::StrCat("round ", round_)
                                  : absl::StrCat("no round (round ", round_, " is accumulating)")));
    }
    if (w.updated) {
      return absl::AlreadyExistsError(absl::StrCat("update ", who.substr(5), " arrived twice"));
    }
    w.updated = true;
    w.update_points = r.points;
    w.update_loss = r.loss;
    w.version_gap = r.version_gap;
    w.dropped = r.dropped;
    if (r.seconds > 0 && r.points > 0) w.rate = static_cast<double>(r.points) / r.seconds;
    // The worker's next round started when it answered; its count of it may be here already.
    if (w.report_round <= r.round) {
      w.report_round = r.round + 1;
      w.points = 0;
      w.reported_at = now;
    }
    w.round_started = now;
  } else {
    // The worker answered the pull (its update report may still be on its way) and counts on.
    const bool early = r.round == round_ + 1 && pulled_round_ == round_;
    if (r.round != round_ && !early) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, ": the coordinator is in round ", round_));
    }
    if (r.round == round_ && pulled_round_ == round_) return k_star_;  // late: the pull went out
    if (w.report_round == r.round && r.points < w.points) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": counts go backwards, ", r.points, " after ", w.points));
    }
    w.report_round = w.counted_round = r.round;
    w.points = r.points;
    if (r.seconds > 0 && r.points > 0) w.rate = static_cast<double>(r.points) / r.seconds;
    w.reported_at = now;
  }
  last_report_at_ = now;
  cv_.notify_all();
  return k_star_;
}

bool PullCoordinator::AllSubscribed() const {
  return std::all_of(workers_.begin(), workers_.end(),
                     [](const WorkerState& w) { return w.subscriptions > 0; });
}

double PullCoordinator::PredictedCount(Clock::time_point at) const {
  double count = 0;
  for (const WorkerState& w : workers_) {
    const bool reported = w.report_round == round_;
    const auto since = reported ? w.reported_at : w.round_started;
    count += (reported ? static_cast<double>(w.points) : 0.0) +
             w.rate * std::max(0.0, Seconds(at - since));
  }
  return count;
}

std::optional<Clock::time_point> PullCoordinator::PredictedCrossing() const {
  // sum_i p_i + r_i (t - a_i) = K*, solved for t (seconds since started_).
  double points = 0, rates = 0, weighted_since = 0;
  bool any_report = false;
  for (const WorkerState& w : workers_) {
    const bool reported = w.report_round == round_;
    any_report = any_report || w.counted_round == round_;
    const double since = Seconds((reported ? w.reported_at : w.round_started) - started_);
    points += reported ? static_cast<double>(w.points) : 0.0;
    rates += w.rate;
    weighted_since += w.rate * since;
  }
  // The workers go on computing while the pull request travels and finish the batch in hand:
  // the pull goes out `lead_` points early, what the rounds so far overshot by.
  // Until some worker has reported in this round there is nothing to pull: a PDP worker may
  // still be waiting for the model of the last round, whatever its rate says.
  if (!any_report) return std::nullopt;
  const double k = static_cast<double>(k_star_) - lead_;
  if (points >= k) return Clock::time_point::min();  // due already
  if (rates <= 0) return std::nullopt;
  const double t = (k - points + weighted_since) / rates;
  return started_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t));
}

std::string PullCoordinator::MissingUpdates() const {
  std::string missing;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!workers_[i].updated) absl::StrAppend(&missing, missing.empty() ? "" : ", ", i);
  }
  return missing;
}

int64_t PullCoordinator::MeasuredFloor() const {
  // The points the workers process while one pull is under way: below that, a round would be
  // more pull than work.
  std::vector<double> pulls;
  for (size_t i = rounds_.size() > 5 ? rounds_.size() - 5 : 0; i < rounds_.size(); ++i) {
    pulls.push_back(rounds_[i].pull_s);
  }
  if (pulls.empty()) return 0;
  std::sort(pulls.begin(), pulls.end());
  double rates = 0;
  for (const WorkerState& w : workers_) rates += w.rate;
  return static_cast<int64_t>(pulls[pulls.size() / 2] * rates);
}

void PullCoordinator::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ && !AllSubscribed()) cv_.wait_for(lock, kPoll);
  if (stopping_) return;
  round_started_ = last_report_at_ = Clock::now();
  for (WorkerState& w : workers_) w.reported_at = w.round_started = round_started_;
  spdlog::info("{}: every worker subscribed; K* {}{}", Spelled(options_.mode), k_star_,
               search_ ? " (first candidate of the search)" : "");
  const auto deadline = options_.round_deadline;
  while (!stopping_) {
    // Accumulating: pull when the predicted global count reaches K*.
    for (;;) {
      if (stopping_) return;
      const auto now = Clock::now();
      const auto crossing = PredictedCrossing();
      if (crossing && now >= *crossing) break;
      if (!crossing && now - last_report_at_ >= deadline) {
        spdlog::warn(
            "round {}: no count report for {:.0f} s and no rate to predict from; "
            "pulling now",
            round_, Seconds(deadline));
        break;
      }
      cv_.wait_until(lock, crossing ? std::min(*crossing, now + deadline) : now + deadline);
    }
    const auto pulled_at = Clock::now();
    const double predicted = PredictedCount(pulled_at);
    const int64_t k_of_round = k_star_;
    const bool probing = search_ && !search_->done();
    if (probing && probe_points_ >= search_->WindowPoints()) {
      const double gain = ProbeGain(probe_rounds_);
      const int64_t candidate = search_->k();
      search_->Record(gain, MeasuredFloor());
      spdlog::info("K* search: {} points per round gained {:.4g} per s; {}", candidate, gain,
                   search_->Describe());
      probe_rounds_.clear();
      probe_points_ = 0;
      k_star_ = search_->k();
    }
    pulled_round_ = round_;
    cv_.notify_all();
    // Gathering: every worker's update.
    auto give_up = Clock::now() + deadline;
    while (!stopping_ && !MissingUpdates().empty()) {
      if (cv_.wait_until(lock, give_up) == std::cv_status::timeout && Clock::now() >= give_up) {
        spdlog::error(
            "round {}: waited {:.0f} s for the update of worker {} (the others sent "
            "theirs)",
            round_, Seconds(Clock::now() - pulled_at), MissingUpdates());
        give_up = Clock::now() + deadline;
      }
    }
    if (stopping_) return;
    CloseRound(pulled_at, predicted, k_of_round, probing);
    if (options_.sample_budget > 0 && total_points_ >= options_.sample_budget) {
      ended_ = true;
      cv_.notify_all();
      spdlog::info("{} rounds applied {} points, the job's {}: no more rounds", rounds_.size(),
                   total_points_, options_.sample_budget);
      return;
    }
  }
}

void PullCoordinator::CloseRound(Clock::time_point pulled_at, double predicted, int64_t k,
                                 bool probing) {
  const auto now = Clock::now();
  RoundRecord record;
  record.round = round_;
  record.k_star = k;
  record.probing = probing;
  record.predicted = predicted;
  double loss = 0;
  for (WorkerState& w : workers_) {
    record.points.push_back(w.update_points);
    record.version_gaps.push_back(w.version_gap);
    record.dropped.push_back(w.dropped);
    record.count += w.update_points;
    loss += w.update_loss * static_cast<double>(w.update_points);
    w.updated = false;
  }
  record.loss = record.count > 0 ? loss / static_cast<double>(record.count) : 0;
  record.closed_s = Seconds(now - started_);
  record.round_s = Seconds(now - round_started_);
  record.pull_s = Seconds(now - pulled_at);
  total_points_ += record.count;
  const double half = 0.5 * static_cast<double>(k);
  lead_ =
      std::clamp(0.7 * lead_ + 0.3 * (static_cast<double>(record.count) - predicted), -half, half);
  if (search_ && !search_->done() && k == search_->k()) {
    probe_rounds_.push_back({record.closed_s, record.loss});
    probe_points_ += record.count;
  }
  rounds_.push_back(record);
  WriteRecord(record);
  ++round_;
  round_started_ = now;
}

void PullCoordinator::WriteRecord(const RoundRecord& r) {
  if (options_.rounds_file.empty()) return;
  if (!rounds_writer_) {
    auto opened = JsonLinesWriter::Open(options_.rounds_file);
    if (!opened.ok()) {
      spdlog::warn("cannot record the rounds: {}", std::string(opened.status().message()));
      return;
    }
    rounds_writer_ = std::move(*opened);
  }
  nlohmann::json shares = nlohmann::json::array();
  for (int64_t p : r.points) {
    shares.push_back(r.count > 0 ? static_cast<double>(p) / static_cast<double>(r.count) : 0.0);
  }
  const nlohmann::json line = {{"round", r.round},
                               {"mode", Spelled(options_.mode)},
                               {"k_star", r.k_star},
                               {"probing", r.probing},
                               {"predicted", r.predicted},
                               {"count", r.count},
                               {"points", r.points},
                               {"shares", shares},
                               {"version_gaps", r.version_gaps},
                               {"dropped", r.dropped},
                               {"loss", r.loss},
                               {"t", r.closed_s},
                               {"round_s", r.round_s},
                               {"pull_s", r.pull_s}};
  if (absl::Status s = rounds_writer_->Write(line); !s.ok()) {
    spdlog::warn("cannot record round {}: {}", r.round, std::string(s.message()));
  }
}

std::vector<RoundRecord> PullCoordinator::Rounds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rounds_;
}

int64_t PullCoordinator::KStar() const {
  std::lock_guard<std::mutex> lock(mu_);
  return k_star_;
}

std::string PullCoordinator::SearchText() const {
  std::lock_guard<std::mutex> lock(mu_);
  return search_ ? search_->Describe() : absl::StrCat("fixed K* ", k_star_);
}

}  // namespace strata
