#include "orchestrator/lib/compose_run.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "orchestrator/launch/compose_render.h"
#include "orchestrator/launch/container_plan.h"
#include "orchestrator/lib/local_run.h"
#include "orchestrator/plan/job_checks.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/config/resolved_job.h"
#include "services/common/process/child_process.h"
#include "services/common/process/interrupt.h"
#include "services/common/process/run_tool.h"
#include "services/common/wire/rpc_auth.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// Between reads of docker-compose's output while it runs: the lines reach the screen within this.
constexpr std::chrono::milliseconds kFollowInterval{100};
// The orchestrator container's service name in the rendered file, and where its run directory is.
constexpr char kOrchestratorService[] = "orchestrator";

std::string DockerHostText() {
  const char* host = std::getenv("DOCKER_HOST");
  return host != nullptr && *host != '\0' ? absl::StrCat("DOCKER_HOST=", host)
                                          : "the default socket (DOCKER_HOST unset)";
}

// Runs a docker or docker-compose call to its end, killed at `timeout`; the call and its output
// (stdout and stderr) are appended to `log`, so a run directory keeps every call.
absl::StatusOr<ToolRun> RunDockerTool(const std::vector<std::string>& argv, const std::string& log,
                                      std::chrono::milliseconds timeout) {
  ToolRunOptions tool;
  tool.name = argv.front();
  tool.argv = argv;
  tool.output_path = log + ".tmp";
  tool.timeout = timeout;
  auto run = RunTool(tool);
  if (!run.ok()) return run.status();
  std::remove(tool.output_path.c_str());
  std::ofstream(log, std::ios::app) << "$ " << absl::StrJoin(argv, " ") << "\n"
                                    << run->output << "(exit " << run->exit_code << ")\n";
  return run;
}

// docker-compose v1 project names: lower-case letters, digits, '-' and '_'. The run directory's
// name for the reader, and a hash of its absolute path so that two runs whose directories share
// a name (runs/a/run, runs/b/run) never share a project: a project's `down` would remove the
// other's containers.
std::string ProjectName(const std::string& run_dir) {
  std::filesystem::path path = std::filesystem::absolute(run_dir).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "runs/x/" names "x"
  const std::string absolute = path.string();
  uint32_t hash = 2166136261u;  // FNV-1a
  for (unsigned char c : absolute) hash = (hash ^ c) * 16777619u;
  std::string out = "strata-";
  for (char c : std::filesystem::path(absolute).filename().string()) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += std::isalnum(static_cast<unsigned char>(l)) || l == '_' ? l : '-';
  }
  return absl::StrFormat("%s-%08x", out, hash);
}

// The repository's image script beside a build directory (BIN_DIR = <repo>/build/bin), if there.
std::optional<std::string> MakeImageScript(const std::string& bin_dir) {
  const std::filesystem::path repo = std::filesystem::path(bin_dir).parent_path().parent_path();
  const std::filesystem::path script = repo / "scripts" / "make-image.sh";
  if (::access(script.c_str(), X_OK) == 0 &&
      std::filesystem::exists(repo / "docker" / "Dockerfile"))
    return script.string();
  return std::nullopt;
}

class ComposeRun {
 public:
  ComposeRun(const ComposeRunOptions& options, v1::ResolvedJob job, std::string run_dir)
      : options_(options), job_(std::move(job)), dir_(std::move(run_dir)) {}

  int Run();

 private:
  // Exit 2 with the message: the machine or the input is wrong and nothing ran.
  int Refuse(const std::string& message) {
    std::fprintf(stderr, "strata run: %s\n", message.c_str());
    return 2;
  }
  void Say(const std::string& line) {
    if (!options_.quiet) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  absl::Status Render();
  int EnsureImage();
  int Up();
  void CollectRecord();
  void TearDown();
  std::vector<std::string> Compose(std::vector<std::string> args) const {
    std::vector<std::string> argv = {compose_, "-p", project_, "-f",
                                     dir_ + "/compose/docker-compose.yml"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  const ComposeRunOptions& options_;
  v1::ResolvedJob job_;
  std::string dir_;
  std::string project_;
  std::string docker_, compose_;
  std::string tools_log_;  // every docker call and its output
  std::vector<std::string> services_;
};

int ComposeRun::Run() {
  auto docker = FindOnPath("docker");
  auto compose = FindOnPath("docker-compose");
  if (!docker || !compose) {
    return Refuse(absl::StrCat(
        "launcher.kind compose needs `", !docker ? "docker" : "docker-compose",
        "` on the PATH (Debian: apt-get install docker.io docker-compose); nothing was run"));
  }
  docker_ = *docker;
  compose_ = *compose;
  project_ = ProjectName(dir_);
  tools_log_ = dir_ + "/compose/docker-calls.log";
  for (const ContainerSpec& c : PlanComposeContainers(job_).containers) {
    services_.push_back(c.name);
  }
  if (absl::Status s = Render(); !s.ok()) return Refuse(std::string(s.message()));
  // For the reader (and tests): `docker-compose -p "$(cat compose/project)" ...`.
  WriteFileAtomic(dir_ + "/compose/project", project_ + "\n").IgnoreError();

  auto info = RunDockerTool({docker_, "info", "--format", "{{.ServerVersion}}"}, tools_log_,
                            options_.tool_timeout);
  if (!info.ok() || !info->ok()) {
    return Refuse(absl::StrCat("cannot reach the Docker daemon at ", DockerHostText(), ": ",
                               info.ok() ? OutputTail(info->output, 400) : info.status().ToString(),
                               "\n  start it (or set DOCKER_HOST); nothing was run"));
  }
  if (int rc = EnsureImage(); rc != 0) return rc;

  // Unlike the other drivers, this one has always left SIGPIPE at its default action.
  InterruptOptions interrupt;
  interrupt.ignore_sigpipe = false;
  InstallInterruptHandlers(interrupt);

  Say(absl::StrFormat("strata run: %s on docker-compose (project %s, image %s); run directory %s",
                      job_.name(), project_, options_.image, dir_));
  const int up = Up();
  CollectRecord();
  TearDown();
  if (Interrupted() != 0) {
    std::fprintf(stderr, "strata run: interrupted; the project is removed; run directory %s\n",
                 dir_.c_str());
    return 130;
  }
  if (up != 0) {
    std::fprintf(stderr,
                 "strata run: the compose run failed (exit %d); services' output in %s/logs/, "
                 "docker-compose's in %s/compose/up.log\n",
                 up, dir_.c_str(), dir_.c_str());
    return up == 2 || up == 130 ? up : 1;
  }
  Say(absl::StrCat("results in ", dir_,
                   " (the project's containers, network and volume are "
                   "removed)"));
  return 0;
}

absl::Status ComposeRun::Render() {
  const std::string compose_dir = dir_ + "/compose";
  if (absl::Status s = MakeDirs(compose_dir); !s.ok()) return s;
  // The token file is readable by the containers' user through the bind mount compose makes of
  // it; the directory keeps everyone else on this machine out.
  ::chmod(compose_dir.c_str(), 0700);
  RenderOptions render;
  render.image = options_.image;
  if (absl::Status s = WriteRenderedFiles(compose_dir, RenderCompose(job_, render)); !s.ok())
    return s;
  absl::StatusOr<std::string> token = GenerateRunToken();
  if (!token.ok()) return token.status();
  const std::string token_file = compose_dir + "/run-token";
  if (absl::Status s = WriteFileAtomic(token_file, *token); !s.ok()) return s;
  ::chmod(token_file.c_str(), 0644);
  return absl::OkStatus();
}

int ComposeRun::EnsureImage() {
  auto inspect = RunDockerTool({docker_, "image", "inspect", "--format", "{{.Id}}", options_.image},
                               tools_log_, options_.tool_timeout);
  if (inspect.ok() && inspect->ok()) return 0;
  std::optional<std::string> script = MakeImageScript(options_.bin_dir);
  if (!script) {
    return Refuse(absl::StrCat("the image ", options_.image, " is not in the Docker daemon (",
                               DockerHostText(),
                               "): build it with `make image` or name another "
                               "with --image; nothing was run"));
  }
  Say(absl::StrCat("the image ", options_.image, " is missing: building it from ", options_.bin_dir,
                   " (", *script, " --prebuilt; a minute or two)"));
  auto build = RunDockerTool({*script, "--prebuilt", options_.bin_dir, "--tag", options_.image},
                             dir_ + "/compose/image-build.log", options_.image_build_timeout);
  if (!build.ok() || !build->ok()) {
    return Refuse(absl::StrCat("building the image ", options_.image, " failed: ",
                               build.ok() ? OutputTail(build->output) : build.status().ToString(),
                               "\n  (whole output in ", dir_, "/compose/image-build.log)"));
  }
  return 0;
}

// `up` attached to the orchestrator only: the one-shot sharder's exit does not end the project,
// the orchestrator's does, and docker-compose exits with its code. Its output (the orchestrator's
// progress) is followed to the screen as it comes.
int ComposeRun::Up() {
  SpawnOptions o;
  o.name = "docker-compose";
  o.argv = Compose({"up", "--no-color", "--no-log-prefix", "--exit-code-from", kOrchestratorService,
                    kOrchestratorService});
  o.log_path = dir_ + "/compose/up.log";
  auto child = ChildProcess::Spawn(o);
  if (!child.ok()) {
    std::fprintf(stderr, "strata run: %s\n", child.status().ToString().c_str());
    return 1;
  }
  int fd = ::open(o.log_path.c_str(), O_RDONLY | O_CLOEXEC);
  auto follow = [&] {
    char buf[8192];
    ssize_t n;
    while (fd >= 0 && (n = ::read(fd, buf, sizeof buf)) > 0) {
      if (!options_.quiet) std::fwrite(buf, 1, static_cast<size_t>(n), stdout);
    }
    std::fflush(stdout);
  };
  std::optional<Clock::time_point> stopping;
  while (!(*child)->Poll()) {
    follow();
    if (Interrupted() != 0 && !stopping) {
      // docker-compose stops the containers it started (SIGTERM to each: the orchestrator stops
      // the services through their Stop RPC and writes its record), then exits.
      (*child)->Signal(SIGINT);
      stopping = Clock::now();
    }
    if (stopping && Clock::now() - *stopping > options_.teardown_timeout) (*child)->Signal(SIGKILL);
    std::this_thread::sleep_for(kFollowInterval);
  }
  follow();
  if (fd >= 0) ::close(fd);
  return (*child)->exit_code();
}

// The run record from the project's volume into the run directory, and each service's output
// as logs/<service>.log, as a local run leaves them.
void ComposeRun::CollectRecord() {
  auto id =
      RunDockerTool(Compose({"ps", "-q", kOrchestratorService}), tools_log_, options_.tool_timeout);
  const std::string container =
      id.ok() && id->ok() ? std::string(absl::StripAsciiWhitespace(id->output)) : "";
  if (!container.empty() && container.find('\n') == std::string::npos) {
    auto cp = RunDockerTool({docker_, "cp", container + ":/run/strata/.", dir_ + "/"}, tools_log_,
                            options_.tool_timeout);
    if (!cp.ok() || !cp->ok()) {
      std::fprintf(stderr, "strata run: could not copy the run record out of the project: %s\n",
                   cp.ok() ? OutputTail(cp->output, 400).c_str() : cp.status().ToString().c_str());
    }
  }
  // The run's own certificates, made in the volume by the one-shot step, end with the run as a
  // local run's do (the volume itself goes with `down --volumes`).
  if (TlsOn(job_) && job_.security().tls_dir().empty()) {
    std::error_code ec;
    std::filesystem::remove_all(RunPaths(dir_).tls, ec);
  }
  MakeDirs(dir_ + "/logs").IgnoreError();
  for (const std::string& service : services_) {
    auto logs = RunDockerTool(Compose({"logs", "--no-color", "--no-log-prefix", service}),
                              tools_log_ + ".logs", options_.tool_timeout);
    if (logs.ok()) WriteFileAtomic(RunPaths(dir_).ServiceLog(service), logs->output).IgnoreError();
  }
  std::remove((tools_log_ + ".logs").c_str());  // the output is in logs/ already
}

// Containers, the network and the volume: nothing of the project outlives the run, and neither
// does its token.
void ComposeRun::TearDown() {
  auto down = RunDockerTool(Compose({"down", "--volumes", "--remove-orphans", "--timeout", "10"}),
                            tools_log_, options_.teardown_timeout);
  if (!down.ok() || !down->ok()) {
    std::fprintf(
        stderr,
        "strata run: docker-compose down failed; remove the project by hand: "
        "docker-compose -p %s -f %s/compose/docker-compose.yml down --volumes\n%s\n",
        project_.c_str(), dir_.c_str(),
        down.ok() ? OutputTail(down->output, 400).c_str() : down.status().ToString().c_str());
  }
  std::remove((dir_ + "/compose/run-token").c_str());  // after `down`, which reads the file
}

}  // namespace

int RunComposeJob(const ComposeRunOptions& options) {
  JobCheckOptions check;
  check.overrides = options.overrides;
  std::optional<v1::ResolvedJob> job = LoadJobOrSayWhy("strata run", options.job_path, check);
  if (!job) return 2;
  const std::string dir = options.out_dir.empty() ? DefaultRunDir(job->name()) : options.out_dir;
  if (std::filesystem::exists(dir + "/job.yaml") || std::filesystem::exists(dir + "/compose")) {
    std::fprintf(stderr, "strata run: %s already holds a run; choose another --out\n", dir.c_str());
    return 2;
  }
  ComposeRun run(options, std::move(*job), dir);
  return run.Run();
}

}  // namespace strata
