// --job, --config and --set (resolved_job.h) on a CLI11 command line: the same flags, with the same
// help, on every service binary. `strata` passes --job; a service started by hand takes --config
// with --set overrides, and shorthands for the overrides it is most often started with
// (`--workers N` for `--set cluster.workers=N`), all of which --job refuses, since a resolved job
// holds them already. Header-only, for the binaries' main()s.
#pragma once

#include <deque>
#include <string>
#include <utility>

#include <absl/strings/str_cat.h>
#include <CLI/CLI.hpp>

#include "services/common/config/resolved_job.h"

namespace strata {

class JobFlags {
 public:
  // `who` names the service in the help ("a server", "a worker").
  JobFlags(CLI::App* app, const std::string& who) : app_(app) {
    job_ = app->add_option("--job", source_.job, "the resolved job `strata` wrote (text proto)")
               ->check(CLI::ExistingFile);
    app->add_option(
           "--config", source_.config,
           absl::StrCat("instead of --job, for ", who, " started by hand: a YAML job spec"))
        ->check(CLI::ExistingFile)
        ->excludes(job_);
    app->add_option("--set", source_.overrides,
                    "with --config: override a job-spec key (key=value)")
        ->excludes(job_);
  }

  // FLAG VALUE as a shorthand for --set KEY=VALUE.
  void AddShorthand(const std::string& flag, const std::string& key, const std::string& help) {
    shorthands_.emplace_back(key, std::string());
    app_->add_option(flag, shorthands_.back().second,
                     absl::StrCat("with --config: --set ", key, "=VALUE (", help, ")"))
        ->excludes(job_);
  }

  // Where the job comes from, with the shorthands given folded into the overrides.
  ServiceJobSource Source() const {
    ServiceJobSource source = source_;
    for (const auto& [key, value] : shorthands_) {
      if (!value.empty()) source.overrides.push_back(absl::StrCat(key, "=", value));
    }
    return source;
  }

 private:
  CLI::App* app_;
  CLI::Option* job_ = nullptr;
  ServiceJobSource source_;
  std::deque<std::pair<std::string, std::string>> shorthands_;  // stable addresses for CLI11
};

}  // namespace strata
