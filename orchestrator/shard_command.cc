// `strata shard`: builds a shard plan by running strata-sharder (which links LibTorch; `strata`
// does not) with the same flags, or prints a plan's class balance (--stats, in-process).
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "orchestrator/commands.h"
#include "orchestrator/plan/shard_stats.h"
#include "services/common/process/child_process.h"
#include "sharder/shard_flags.h"

namespace strata::cli {
namespace {

// strata-sharder lives next to `strata` (build/bin, /usr/bin in the image).
std::string SharderPath() {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "strata-sharder";
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "strata-sharder";
}

// In the foreground: the sharder's progress and errors reach the terminal as they come. It runs
// under ChildProcess like every process Strata starts (its own process group, gone with
// `strata`); OMP_WAIT_POLICY, set by `strata`'s main, reaches it through the environment.
int RunSharder(const std::vector<std::string>& args) {
  SpawnOptions o;
  o.name = "strata-sharder";
  o.argv = {SharderPath()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.inherit_output = true;
  std::fflush(stdout);
  std::fflush(stderr);
  auto child = ChildProcess::Spawn(o);
  if (!child.ok()) {
    std::fprintf(stderr, "strata shard: cannot start %s\n",
                 std::string(child.status().message()).c_str());
    return 1;
  }
  while (!(*child)->WaitFor(std::chrono::hours(1))) {
  }
  if (!(*child)->succeeded() && (*child)->exit_code() > 128) {
    std::fprintf(stderr, "strata shard: %s %s\n", o.argv[0].c_str(),
                 (*child)->ExitDescription().c_str());
  }
  return (*child)->exit_code();
}

}  // namespace

void AddShardCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "shard",
      "build a shard plan (random | mod | stratified | distribution-aware), or --stats DIR");
  // Owned by the callback, which lives as long as `app`; CLI11 writes into them while parsing.
  auto flags = std::make_shared<shard::ShardFlags>();
  auto stats_dir = std::make_shared<std::string>();
  shard::AddShardFlags(cmd, flags.get());
  cmd->add_option("--stats", *stats_dir, "print the per-shard class balance of the plan in DIR");
  cmd->callback([cmd, flags, stats_dir, exit_code] {
    if (!stats_dir->empty()) {
      auto table = shard::ShardStats(*stats_dir);
      if (!table.ok()) {
        std::fprintf(stderr, "strata shard: %s\n", std::string(table.status().message()).c_str());
        *exit_code = 1;
        return;
      }
      std::fputs(table->c_str(), stdout);
      *exit_code = 0;
      return;
    }
    shard::NoteGivenShardFlags(*cmd, flags.get());
    *exit_code = RunSharder(shard::ShardFlagsAsArgs(*flags));
  });
}

}  // namespace strata::cli
