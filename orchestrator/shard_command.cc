// `strata shard`: builds a shard plan by running strata-sharder (which links LibTorch; `strata`
// does not) with the same flags, or prints a plan's class balance (--stats, in-process).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "orchestrator/commands.h"
#include "sharder/shard_flags.h"
#include "orchestrator/lib/shard_stats.h"

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

int RunSharder(const std::vector<std::string>& args) {
  const std::string program = SharderPath();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "strata shard: cannot start %s: %s\n", program.c_str(), std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    // See EnsurePassiveOpenMpWaiting in sharder/sharder_main.cc: set here, it saves a re-exec.
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    ::execv(program.c_str(), argv.data());
    std::fprintf(stderr, "strata shard: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::fprintf(stderr, "strata shard: lost %s: %s\n", program.c_str(), std::strerror(errno));
      return 1;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    std::fprintf(stderr, "strata shard: %s killed by signal %d\n", program.c_str(), WTERMSIG(status));
    return 128 + WTERMSIG(status);
  }
  return 1;
}

}  // namespace

void AddShardCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "shard", "build a shard plan (random | mod | stratified | distribution-aware), or --stats DIR");
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
