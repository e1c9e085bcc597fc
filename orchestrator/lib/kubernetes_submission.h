// A job on a Kubernetes cluster through kubectl (docs/deploy.md, "strata submit"): the
// composition root of `strata submit`, as local_run.h is of `strata run`
// (kubernetes_submission.cc), and what `strata status`, `logs` and `delete` do with the submission
// directory it leaves (submission_commands.cc). What the two share, the record and kubectl's
// answers about the run, is cluster_run.h.
//
// `strata submit` renders the job (kubernetes_render.h), creates the orchestrator Job suspended,
// reads its UID, creates every other object with an owner reference to it (the run volume's claim
// aside: it keeps the record), resumes the Job and follows it (kubernetes_state.h) until it
// succeeds, fails, has a pod that never starts, runs out of time or is interrupted. Then it saves
// the pods' logs and deletes the Job, which deletes everything it owns: nothing of the run is
// left running. With `detach` it returns once the objects exist.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "orchestrator/launch/render_files.h"

namespace strata {

struct SubmitOptions {
  std::string job_path;
  std::vector<std::string> overrides;  // --set key=value
  // The submission directory: the rendered files, the run token, the objects as created, the
  // record (submission.json) and, at the end, the pods' logs. Default:
  // runs/<name>-<timestamp>/kubernetes.
  std::string out_dir;
  RenderOptions render;        // the image
  std::string overlay;         // "" (base), "small" or "large"
  std::string namespace_name;  // default: the namespace of kubectl's current context
  std::string kubectl;         // default: kubectl on PATH
  bool detach = false;         // return once the objects exist
  // How long the run may take from its submission; past it the run is deleted and submit exits
  // 1. Default: a day, the Job's ttlSecondsAfterFinished.
  std::chrono::milliseconds timeout{std::chrono::hours(24)};
  // How long a pod may stay unable to start (an image that cannot be pulled, a container that
  // cannot be created, no node for it) before the run is deleted. Default 5 minutes: long
  // enough for a registry hiccup or a claim being bound.
  std::chrono::milliseconds start_timeout{std::chrono::minutes(5)};
  // Between two looks at the Job and its pods. Default 5 s.
  std::chrono::milliseconds poll_interval{std::chrono::seconds(5)};
  // One kubectl call (KubectlOptions::call_timeout).
  std::chrono::milliseconds kubectl_timeout{std::chrono::seconds(60)};
  // Deleting the Job and waiting until everything it owns is gone.
  std::chrono::milliseconds delete_timeout{std::chrono::minutes(5)};
};

// Exit code: 0 the Job succeeded (with `detach`: was created); 1 it failed, a pod never
// started, the time ran out or kubectl failed; 2 bad input (nothing created); 130 interrupted.
int SubmitKubernetesJob(const SubmitOptions& options);

// `dir` itself or `dir`/kubernetes, whichever holds a submission record (submission.json).
std::optional<std::string> FindSubmissionDir(const std::string& dir);

struct SubmissionCommandOptions {
  std::string kubectl;  // default: the one the submission used, else kubectl on PATH
  std::chrono::milliseconds kubectl_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds delete_timeout{std::chrono::minutes(5)};
};

// `strata status DIR`: the Job's state and every pod's. Exit 0, 1 when kubectl fails, 2 when
// kubectl cannot be found or the record cannot be read.
int ShowSubmissionStatus(const std::string& dir, const SubmissionCommandOptions& options);

// `strata logs DIR --service NAME`: the service's log from its pod, or from the logs saved when
// the run ended. `tail_lines` < 0: all of it. `follow`: becomes `kubectl logs -f` of the pod
// while there is one (a saved log is printed once).
int ShowSubmissionLogs(const std::string& dir, const std::string& service, int tail_lines,
                       bool follow, const SubmissionCommandOptions& options);

// `strata delete DIR`: deletes the Job in the foreground (everything it owns goes first), then
// whatever still carries the job's instance label, except the run volume's claim.
int DeleteSubmission(const std::string& dir, const SubmissionCommandOptions& options);

// The last `n` lines of `text` (all of it when n < 0).
std::string LastLines(const std::string& text, int n);

}  // namespace strata
