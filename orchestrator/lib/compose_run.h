// `strata run` with `launcher.kind: compose`: the job runs as a docker-compose project on this
// machine's Docker daemon, every service in a container of its own, so everything that crosses a
// network does so for real (the ring over TCP between network namespaces, services found by
// name). The run renders the project into RUN_DIR/compose (launch/compose_render.h), writes the
// run token as the project's secret, builds the image if the daemon lacks it, and runs
// `docker-compose up` attached to the orchestrator container (`strata supervise`, which prints
// the same progress as a local run). At the end, whatever the outcome (success, failure, Ctrl-C),
// it copies the run record out of the project's volume into RUN_DIR and removes the project's
// containers, network and volume.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace strata {

struct ComposeRunOptions {
  std::string job_path;
  std::vector<std::string> overrides;  // --set key=value
  std::string out_dir;                 // empty: runs/<name>-<timestamp>
  std::string image = "strata:latest";
  // Where the strata binaries are: an image that is missing is built from them
  // (scripts/make-image.sh --prebuilt, found beside the repository's build directory).
  std::string bin_dir;
  bool quiet = false;
  // Deadlines of the docker and docker-compose calls around the run (not of the run itself).
  std::chrono::milliseconds tool_timeout{120000};
  std::chrono::milliseconds image_build_timeout{1800000};
  std::chrono::milliseconds teardown_timeout{180000};
};

// Exit codes as RunLocalJob's: 0 success, 1 the run failed, 2 the job, the command line or the
// machine (no docker, no daemon, no image) is wrong and nothing ran, 130 interrupted.
int RunComposeJob(const ComposeRunOptions& options);

}  // namespace strata
