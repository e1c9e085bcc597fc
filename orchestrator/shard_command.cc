// `strata shard`: owned by the sharder work; placeholder until it lands.
#include <cstdio>

#include "orchestrator/commands.h"

namespace strata::cli {

void AddShardCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("shard", "build a shard plan (not implemented yet)");
  cmd->callback([exit_code] {
    std::fprintf(stderr, "strata shard: not implemented yet\n");
    *exit_code = 2;
  });
}

}  // namespace strata::cli
