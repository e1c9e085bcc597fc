// `strata keys [--markdown]`: every key of the job spec with its type, default and meaning, from
// the one table the reader checks against (services/common/config/job_keys.h). The markdown form
// is the key table of docs/job-spec.md, which a test keeps in step with the table.
#include <cstdio>

#include <absl/strings/str_format.h>

#include "orchestrator/commands.h"
#include "services/common/config/job_keys.h"

namespace strata::cli {

void AddKeysCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "keys", "list every job-spec key: type, default, meaning (docs/job-spec.md has more)");
  auto markdown = std::make_shared<bool>(false);
  cmd->add_flag("--markdown", *markdown, "one markdown table row per key, as docs/job-spec.md");
  cmd->callback([=] {
    for (const JobKey& key : JobKeys()) {
      if (*markdown) {
        std::printf("| `%s` | %s | %s | %s |\n", key.path.c_str(), key.TypeText().c_str(),
                    key.DefaultText().c_str(), key.doc.c_str());
      } else {
        std::printf("%-34s %-40s %s\n  %s\n", key.path.c_str(), key.TypeText().c_str(),
                    key.DefaultText().c_str(), key.doc.c_str());
      }
    }
    *exit_code = 0;
  });
}

}  // namespace strata::cli
