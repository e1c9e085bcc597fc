// The job-spec parser (services/common/config/job_spec.h) on any text. A spec names the file the
// orchestrator and every service read, and `strata-sharder serve` parses one named in a request.
//
// The input is the file, then, after each NUL byte, one `--set` assignment (at most four), so the
// fuzzer reaches the overrides too; a seed without NUL is a plain file. Checked:
//   - every error is placed, "FILE:LINE: key: what" or "(from --set K=V): key: what", on one
//     line (ParseJobSpec joins them one per line);
//   - a text that is no mapping leaves the job at its defaults;
//   - an accepted spec has no problem the services' own check of the table would find
//     (ResolvedJobProblems): the reader and the checker walk the same table of keys;
//   - it is written as YAML (what `strata run` writes to job.yaml), and that YAML parses back,
//     without errors, to the same job, byte for byte;
//   - its text (what every service reads) is accepted by the services' reader and reads back to
//     the same message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>

#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts = absl::StrSplit(input, '\0');
  if (parts.size() > 5) return 0;
  const std::string text = parts[0];
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());

  const JobSpecReading reading = ReadJobSpec(text, "fuzz.yaml", overrides);
  for (const std::string& error : reading.errors) {
    FUZZ_CHECK(absl::StartsWith(error, "fuzz.yaml") || absl::StartsWith(error, "(from --set "),
               error);
    FUZZ_CHECK(error.find('\n') == std::string::npos, error);  // ParseJobSpec: one per line
  }
  const std::string defaults = DefaultJob().SerializeAsString();
  if (!reading.mapping_read) {
    FUZZ_CHECK(reading.job.SerializeAsString() == defaults, "a job from text that is no mapping");
  }
  if (!reading.errors.empty()) return 0;

  const std::vector<std::string> problems = ResolvedJobProblems(reading.job);
  FUZZ_CHECK(problems.empty(), "an accepted spec breaks the table: " +
                                   absl::StrJoin(problems, "; ") + "\nspec:\n" + text);
  const std::string yaml = JobSpecYaml(reading.job);
  const JobSpecReading again = ReadJobSpec(yaml, "job.yaml");
  FUZZ_CHECK(again.errors.empty(), "the written spec is refused:\n" +
                                       absl::StrJoin(again.errors, "\n") + "\nwritten:\n" + yaml);
  FUZZ_CHECK(again.job.SerializeAsString() == reading.job.SerializeAsString(),
             "the written spec reads back to another job:\n" + yaml);
  FUZZ_CHECK(JobSpecYaml(again.job) == yaml, "the written spec is written differently:\n" + yaml);

  const std::string job_text = ResolvedJobText(reading.job);
  const absl::StatusOr<v1::ResolvedJob> read = ParseResolvedJob(job_text, "job.resolved.txtpb");
  FUZZ_CHECK(read.ok(),
             "a service refuses the resolved job: " + read.status().ToString() + "\n" + job_text);
  FUZZ_CHECK(read->SerializeAsString() == reading.job.SerializeAsString(),
             "the resolved job reads back differently:\n" + job_text);
  return 0;
}
