// The sweep file of `strata sweep` (docs/user-guide.md, "Sweeps"): a base job spec, the cells
// that vary it (a grid of job keys to lists of values, or an explicit list of named cells) and the
// seeds every cell runs with. This layer parses the file and expands the grid into cells; it does
// no I/O, so every refusal is unit-tested. A problem is reported as "FILE:LINE: key: what", all of
// them at once, before anything runs. Whether an override makes a valid *job* is the job spec's
// business (orchestrator/plan/job_checks.h); sweep_runner.h asks it for every cell up front.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

namespace strata::sweep {

// One `--set key=value` a cell applies to the base job.
struct Override {
  std::string key;    // dotted job key, as `--set` takes it ("strategy.kind")
  std::string value;  // the value as YAML text (flow style for lists and maps)
  int line = 0;       // 1-based line of the value in the sweep file (0: not from a file)
  std::string where;  // the sweep key that set it, for messages ("grid.strategy.kind[1]")

  std::string Assignment() const { return key + "=" + value; }
};

struct Cell {
  std::string name;  // also the directory name of its runs
  std::vector<Override> overrides;
  int line = 0;       // where the cell is written (its `cells:` item, or the `grid:` key)
  std::string where;  // "cells[1]" or "grid"
};

struct SweepSpec {
  std::string origin;     // the sweep file as named on the command line
  std::string name;       // `name:`, else the file name without directory and extension
  std::string base_path;  // `base:` resolved against the sweep file's directory
  int base_line = 0;
  std::vector<Cell> cells;
  // Every key some cell overrides, in the order first seen: the columns of results.csv.
  std::vector<std::string> override_keys;
  std::vector<uint64_t> seeds;  // each becomes training.seed of one run per cell
  int parallel = 1;
  std::string baseline;  // a cell name; the first cell when the file names none
  std::optional<double> target_accuracy;
  std::string out;  // `out:` as written (relative to the working directory), "" if absent
};

// How many runs may go side by side on a machine with `cores` cores: half of them, at least one.
// A local run is already several busy processes (2 workers, a server, the evaluator); two runs
// on the same cores would time each other's contention, not the strategies.
int ParallelLimit(int cores);

struct SweepParseOptions {
  int cores = 1;  // this machine's cores, for the `parallel:` limit
};

// Parses and checks the sweep file's text; `origin` is its path (messages, and the directory
// `base:` is relative to). The error lists every problem, one per line.
absl::StatusOr<SweepSpec> ParseSweepSpec(const std::string& yaml_text, const std::string& origin,
                                         const SweepParseOptions& options);

// Orders "ORIGIN:LINE: ..." messages by line (stable; others first), as a reader scans a file.
void SortByLine(const std::string& origin, std::vector<std::string>& errors);

// The spec as OUT/sweep.json, so that `strata sweep --report OUT` can rebuild the tables without
// the sweep file; and back.
nlohmann::json SweepSpecToJson(const SweepSpec& spec);
absl::StatusOr<SweepSpec> SweepSpecFromJson(const nlohmann::json& j);

}  // namespace strata::sweep
