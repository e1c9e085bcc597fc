// `strata render JOB.yaml --launcher compose|kubernetes --out DIR [--set key=value ...]
// [--image IMAGE]`: the job as files to read, keep in git and apply by hand (docs/deploy.md).
// Usage errors and bad input (a job spec that does not validate, an unknown launcher, an output
// directory that cannot be written) exit 2, like every `strata` command.
#include <cstdio>

#include <absl/strings/str_cat.h>

#include "orchestrator/commands.h"
#include "orchestrator/launch/compose_render.h"
#include "orchestrator/launch/kubernetes_render.h"
#include "orchestrator/plan/job_checks.h"

namespace strata::cli {
namespace {

struct RenderArgs {
  std::string job, launcher, out;
  std::vector<std::string> overrides;
  RenderOptions options;
};

int Render(const RenderArgs& a) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "strata render: %s\n", message.c_str());
    return 2;
  };
  if (a.launcher != "compose" && a.launcher != "kubernetes") {
    return fail(absl::StrCat("unknown launcher '", a.launcher,
                             "': use --launcher compose or --launcher kubernetes"));
  }
  if (a.options.image.empty()) return fail("--image: the image name is empty");
  auto spec = LoadContainerJob(
      a.job, a.overrides,
      a.launcher == "compose" ? v1::LAUNCHER_KIND_COMPOSE : v1::LAUNCHER_KIND_KUBERNETES);
  if (!spec.ok()) return fail(std::string(spec.status().message()));
  RenderedFiles files;
  if (a.launcher == "compose") {
    files = RenderCompose(*spec, a.options);
  } else {
    auto k8s = RenderKubernetes(*spec, a.options);
    if (!k8s.ok()) return fail(std::string(k8s.status().message()));
    files = *std::move(k8s);
  }
  if (absl::Status s = WriteRenderedFiles(a.out, files); !s.ok()) {
    return fail(std::string(s.message()));
  }
  std::printf("%s: %zu file(s) for %s written to %s (docs/deploy.md)\n", spec->name().c_str(),
              files.size(), a.launcher.c_str(), a.out.c_str());
  return 0;
}

}  // namespace

void AddRenderCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "render", "write a job as docker-compose or Kubernetes (kustomize) files to apply by hand");
  auto args = std::make_shared<RenderArgs>();
  cmd->add_option("job", args->job, "job spec (YAML)")->required();
  cmd->add_option("--launcher", args->launcher, "compose | kubernetes")->required();
  cmd->add_option("--out", args->out, "directory to write the files into")->required();
  cmd->add_option("--set", args->overrides,
                  "override a key, e.g. --set cluster.workers=4 (repeatable)");
  cmd->add_option("--image", args->options.image,
                  "the image holding the strata binaries (default strata:latest)");
  cmd->callback([args, exit_code] { *exit_code = Render(*args); });
}

}  // namespace strata::cli
