// Your own model and data (docs/data-and-models.md, "Your own model", "Your own data"): real
// files made by real PyTorch and numpy (tests/support/own_model_files.py, run with Debian's
// python3-torch and python3-numpy), trained through `strata run`, exported with `strata export`
// and loaded back in Python; and every kind of bad file refused by `strata validate` and
// `strata run` with the file named, nothing launched and no run directory left behind.
//
// Python with torch and numpy is a component these tests cannot do without: under CI=true its
// absence fails them; elsewhere they skip, saying why.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "tests/integration/orchestrator/cli_test_util.h"
#include "tests/support/ci.h"

namespace strata::testing {
namespace {

using ::testing::HasSubstr;

const char kPython[] = "/usr/bin/python3";

std::string Script() {
  return std::string(STRATA_TEST_SOURCE_DIR) + "/tests/support/own_model_files.py";
}

// Why there is no Python with torch and numpy here, or "".
std::string PyTorchMissing() {
  const CommandResult r =
      RunCommand(absl::StrCat(kPython, " -c 'import torch, numpy; print(torch.__version__)'"));
  return r.exit_code == 0 ? "" : "no python3 with torch and numpy: " + r.output;
}

// Skips (or, under CI=true, fails) a test that has no Python with torch and numpy: the scripts
// install python3-torch and python3-numpy (scripts/install-deps.sh).
#define REQUIRE_PYTORCH()                                                 \
  do {                                                                    \
    if (const std::string why = PyTorchMissing(); !why.empty()) {        \
      STRATA_UNAVAILABLE(why);                                            \
    }                                                                     \
  } while (0)

class OwnModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("own-model");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { RunCommand("rm -rf " + dir_); }

  // own_model_files.py WHAT KIND OUT [more]; fails the test with Python's output otherwise.
  void Make(const std::string& what, const std::string& kind, const std::string& out,
            const std::string& more = "") {
    const CommandResult r = RunCommand(
        absl::StrCat(kPython, " ", Script(), " ", what, " ", kind, " ", out, " ", more));
    ASSERT_EQ(r.exit_code, 0) << what << " " << kind << ":\n" << r.output;
  }
  std::string Job(const std::string& name, const std::string& model, const std::string& data,
                  const std::string& rest) {
    const std::string path = absl::StrCat(dir_, "/", name, ".yaml");
    WriteText(path, absl::StrCat("name: ", name, "\nmodel: { torchscript: ", model,
                                 " }\ndataset: { name: npy, path: ", data, " }\n", rest));
    return path;
  }
  CommandResult Strata(const std::string& args) {
    return RunCommand(absl::StrCat(testing::Strata(), " ", args));
  }

  std::string dir_;
};

// The README's steps, end to end: a scripted model and .npy data, `strata validate`,
// `strata run` (the live switch), `strata export`, and PyTorch's own accuracy of the exported
// model against the one the run's evaluator reported. (Broken on purpose once: with the export
// writing the initial weights instead of the trained ones, check_export.py printed accuracy
// 0.084 against the reported 0.71 and exited 1.)
TEST_F(OwnModel, TrainsThroughStrataRunAndComesBackToPyTorchWithTheReportedAccuracy) {
  REQUIRE_PYTORCH();
  const std::string model = dir_ + "/net.pt", data = dir_ + "/data";
  ASSERT_NO_FATAL_FAILURE(Make("model", "mlp", model));
  ASSERT_NO_FATAL_FAILURE(Make("data", "fmnist", data, "--train 3000 --test 1000"));
  const std::string job = Job("own", model, data,
                              "training: { epochs: 4, batch_size: 64, lr: 0.05 }\n"
                              "cluster: { workers: 2, parameter_servers: 1 }\n"
                              "strategy: { kind: switch, rule: at_fraction, at_fraction: 0.5 }\n");
  const CommandResult valid = Strata("validate " + job);
  ASSERT_EQ(valid.exit_code, 0) << valid.output;

  const std::string run_dir = dir_ + "/run";
  const CommandResult run = Strata(absl::StrCat("run ", job, " --out ", run_dir, " --quiet"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json summary = ReadJson(run_dir + "/summary.json");
  EXPECT_EQ(summary.value("state", ""), "succeeded") << summary.dump(2);
  EXPECT_GT(summary.value("final_val_acc", 0.0), 0.6) << "4 epochs of 3,000 examples";
  EXPECT_EQ(ReadLines(run_dir + "/events.jsonl").size() > 0, true);
  EXPECT_TRUE(Exists(run_dir + "/model.pt")) << "the run keeps the model it started with";

  const std::string trained = dir_ + "/trained.pt";
  const CommandResult exported = Strata(absl::StrCat("export ", run_dir, " --out ", trained));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const CommandResult check = RunCommand(absl::StrCat(
      kPython, " ", STRATA_TEST_SOURCE_DIR, "/examples/your-own-model/check_export.py ", trained,
      " ", data, " ", run_dir));
  EXPECT_EQ(check.exit_code, 0) << check.output;

  // The exported file holds the trained weights, not the ones it started from.
  const CommandResult differs = RunCommand(absl::StrCat(
      kPython, " -c \"import torch; a = torch.jit.load('", model, "'); b = torch.jit.load('",
      trained, "'); print(max(float((p - q).abs().max()) for p, q in zip(a.parameters(), "
               "b.parameters())))\""));
  ASSERT_EQ(differs.exit_code, 0) << differs.output;
  EXPECT_GT(std::stod(differs.output), 1e-3) << differs.output;

  // `strata predict` on the finished run answers from its final model: the outputs PyTorch's own
  // forward pass of the exported module gives on the same (uint8, scaled) examples. (Broken on
  // purpose once: with the evaluator's --predict not loading the checkpoint, the largest
  // difference was 22.6 and the test failed.)
  const std::string scores = dir_ + "/scores.npy";
  const CommandResult predicted = Strata(
      absl::StrCat("predict ", run_dir, " --input ", data, "/test_x.npy --out ", scores));
  ASSERT_EQ(predicted.exit_code, 0) << predicted.output;
  EXPECT_THAT(predicted.output, HasSubstr("1000 example(s) from the final weights in "));
  const CommandResult same = RunCommand(absl::StrCat(
      kPython, " -c \"import numpy as np, torch; m = torch.jit.load('", trained,
      "'); m.eval(); x = np.load('", data, "/test_x.npy').astype(np.float32) * np.float32(1 / 255); "
      "s = np.load('", scores, "'); t = m(torch.from_numpy(x)).detach().numpy(); "
      "print(s.shape == t.shape, float(np.abs(s - t).max()))\""));
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_THAT(same.output, HasSubstr("True ")) << "the outputs' shapes differ: " << same.output;
  EXPECT_LT(std::stod(same.output.substr(same.output.find(' ') + 1)), 1e-4) << same.output;
}

// Every strategy with a model of the user's that has BatchNorm buffers: the ring (over TCP and
// over gRPC), the parameter servers in each consistency mode, and the switch by either rule.
TEST_F(OwnModel, EveryStrategyTrainsABatchNormModelOfTheUsers) {
  // The arms whose every update is computed on the current model: the ring's and BSP's.
  const auto synchronous = [](const std::string& name) {
    return name.rfind("ring", 0) == 0 || name == "ps-bsp";
  };
  REQUIRE_PYTORCH();
  const std::string model = dir_ + "/cnn.pt", data = dir_ + "/data";
  ASSERT_NO_FATAL_FAILURE(Make("model", "cnn_bn", model));
  // Enough steps for a switch to be handed over before training ends (the orchestrator leads
  // the switch step by about 0.3 s of steps).
  ASSERT_NO_FATAL_FAILURE(Make("data", "fmnist", data, "--train 3000 --test 500"));
  const std::vector<std::pair<std::string, std::string>> strategies = {
      {"ring-tcp", "{ kind: allreduce, ring_link: tcp }"},
      {"ring-grpc", "{ kind: allreduce, ring_link: grpc }"},
      {"ps-asp", "{ kind: ps, consistency: asp }"},
      {"ps-bsp", "{ kind: ps, consistency: bsp }"},
      {"ps-ssp", "{ kind: ps, consistency: ssp, staleness: 2 }"},
      {"ps-pdp", "{ kind: ps, consistency: pdp, k_star: 256 }"},
      {"ps-apdp", "{ kind: ps, consistency: apdp, k_star: 256 }"},
      {"switch-fraction", "{ kind: switch, rule: at_fraction, at_fraction: 0.5 }"},
      {"switch-empirical", "{ kind: switch, rule: empirical, window: 1, threshold_percent: 100 }"},
  };
  for (const auto& [name, strategy] : strategies) {
    SCOPED_TRACE(name);
    // The empirical rule decides on evaluations that arrive while training goes on; at about a
    // quarter of a second per epoch, four epochs left a loaded CI machine no room to hand the
    // switch over (it was skipped as too late). Ten give it six epochs of slack.
    const int epochs = name == "switch-empirical" ? 10 : 4;
    const std::string job =
        Job(name, model, data,
            // lr 0.02, and no momentum wherever pushes are stale: with the servers' momentum,
            // asynchronous pushes blow this model's BatchNorm weights up (loss stuck at ln 10), a
            // property of the job, not of the model being the user's. At 0.05 it happened over
            // every link; at 0.02 once under ASP and once under SSP (2026-11-29, accuracy 0.104
            // on a loaded 2-core machine, the second in a clean-clone CI run). The synchronous
            // arms keep momentum.
            absl::StrCat("training: { epochs: ", epochs, ", batch_size: 32, lr: 0.02",
                         synchronous(name) ? "" : ", momentum: 0",
                         " }\n"
                         "cluster: { workers: 2, parameter_servers: 2 }\n"
                         "strategy: ",
                         strategy, "\n"));
    const std::string run_dir = absl::StrCat(dir_, "/", name);
    const CommandResult run = Strata(absl::StrCat("run ", job, " --out ", run_dir, " --quiet"));
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const nlohmann::json summary = ReadJson(run_dir + "/summary.json");
    EXPECT_EQ(summary.value("state", ""), "succeeded") << run.output;
    // Better than the 0.1 of guessing: the model learned, whatever moved its weights.
    EXPECT_GT(summary.value("final_val_acc", 0.0), 0.3) << summary.dump(2);
    if (name.rfind("switch", 0) == 0) {
      // summary.json names the step of a switch that happened and null otherwise.
      EXPECT_TRUE(summary.contains("switch_step") && summary["switch_step"].is_number_integer())
          << summary.dump(2);
    }
  }
}

// Targets instead of classes: mse reports RMSE and learns a linear map; bce_with_logits learns
// three labels per example. The sharding falls back to random (no classes to stratify).
TEST_F(OwnModel, RegressionAndMultiLabelTargetsTrainAndReportTheirMetrics) {
  REQUIRE_PYTORCH();
  ASSERT_NO_FATAL_FAILURE(Make("model", "regression", dir_ + "/regression.pt"));
  ASSERT_NO_FATAL_FAILURE(Make("data", "regression", dir_ + "/regression", "--train 2000 --test 500"));
  ASSERT_NO_FATAL_FAILURE(Make("model", "multilabel", dir_ + "/multilabel.pt"));
  ASSERT_NO_FATAL_FAILURE(Make("data", "multilabel", dir_ + "/multilabel", "--train 2000 --test 500"));
  const std::string common =
      "training: { epochs: 6, batch_size: 32, lr: 0.02, momentum: 0.9, loss: LOSS }\n"
      "cluster: { workers: 2, parameter_servers: 1 }\n"
      "strategy: { kind: switch, rule: at_fraction, at_fraction: 0.5 }\n";
  auto with_loss = [&](const std::string& loss) {
    std::string text = common;
    text.replace(text.find("LOSS"), 4, loss);
    return text;
  };

  const std::string regression =
      Job("regression", dir_ + "/regression.pt", dir_ + "/regression", with_loss("mse"));
  const CommandResult r = Strata(absl::StrCat("run ", regression, " --out ", dir_, "/r --quiet"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> metrics = ReadLines(dir_ + "/r/metrics.jsonl");
  ASSERT_FALSE(metrics.empty());
  // y = x.w + 0.1 noise: the targets' spread is about 2, the noise 0.1.
  // (The first evaluation may come after the model has converged: these steps are fast.)
  for (const nlohmann::json& line : metrics) EXPECT_TRUE(line.contains("val_rmse")) << line.dump();
  const double last = metrics.back().value("val_rmse", 1e9);
  EXPECT_LT(last, 0.3) << "predicting the mean gives about 2";
  EXPECT_GT(last, 0.05) << "below the noise: not an RMSE";
  const nlohmann::json manifest = ReadJson(dir_ + "/r/shards/manifest.json");
  EXPECT_EQ(manifest.value("method", ""), "random") << "no classes to stratify by";

  const std::string multilabel = Job("multilabel", dir_ + "/multilabel.pt", dir_ + "/multilabel",
                                     with_loss("bce_with_logits"));
  const CommandResult m = Strata(absl::StrCat("run ", multilabel, " --out ", dir_, "/m --quiet"));
  ASSERT_EQ(m.exit_code, 0) << m.output;
  // Per-label accuracy of three linearly separable labels: far above the 0.5 of a coin.
  EXPECT_GT(ReadJson(dir_ + "/m/summary.json").value("final_val_acc", 0.0), 0.85);
}

// A built-in model and its TorchScript twin (the same layers, names and initial weights, written
// in Python) train to the same loss curve, step for step, on the same data: the TorchScript path
// changes nothing but where the model comes from. The twin gets the built-in model's initial
// weights through `strata-evaluator --export`. (Broken on purpose once: with the trainer's
// TorchScript model left in evaluation mode while training, the ResNet-20 twin's first epoch
// ended at train_loss 2.380 and val_acc 0.104 against the built-in model's 1.589 and 0.614.)
TEST_F(OwnModel, BuiltInModelsAndTheirTorchScriptTwinsTrainTheSameCurve) {
  REQUIRE_PYTORCH();
  struct Case {
    const char* arch;
    const char* twin;
    const char* training;  // a few hundred steps of the MLP, a hundred of the ResNet
    const char* max_train;
  };
  for (const Case& c : {Case{"mlp", "mlp_twin", "{ epochs: 3, batch_size: 32, lr: 0.05 }", "3000"},
                        Case{"resnet20", "resnet20_twin", "{ epochs: 1, batch_size: 16, lr: 0.05 }",
                             "1600"}}) {
    SCOPED_TRACE(c.arch);
    const std::string data = absl::StrCat(
        "dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: ",
        c.max_train, ", max_test: 500 }\ntraining: ", c.training, "\n");
    const std::string builtin = absl::StrCat(dir_, "/", c.arch, ".yaml");
    WriteText(builtin, absl::StrCat("name: builtin\nmodel: { arch: ", c.arch, " }\n", data));
    const std::string twin = absl::StrCat(dir_, "/", c.twin, ".pt");
    ASSERT_NO_FATAL_FAILURE(Make("model", c.twin, twin));
    const std::string twin_job = absl::StrCat(dir_, "/", c.twin, ".yaml");
    WriteText(twin_job, absl::StrCat("name: twin\nmodel: { torchscript: ", twin, " }\n", data));
    // The built-in model's first weights, written into the twin.
    const std::string init = absl::StrCat(dir_, "/", c.arch, "-init.ckpt");
    const std::string twin_init = absl::StrCat(dir_, "/", c.twin, "-init.pt");
    const std::string evaluator = BinDir() + "/strata-evaluator";
    CommandResult r = RunCommand(
        absl::StrCat(evaluator, " --config ", builtin, " --write-init-checkpoint ", init));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = RunCommand(absl::StrCat(evaluator, " --config ", twin_job, " --export ", init, " --out ",
                                twin_init));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    WriteText(twin_job, absl::StrCat("name: twin\nmodel: { torchscript: ", twin_init, " }\n", data));

    std::vector<std::vector<nlohmann::json>> curves;
    for (const std::string& job : {builtin, twin_job}) {
      const std::string out = job + ".out";
      r = RunCommand(absl::StrCat(BinDir(), "/strata-train --config ", job, " --out ", out,
                                  " --threads 1 --quiet"));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      curves.push_back(ReadLines(out + "/metrics.jsonl"));
    }
    ASSERT_EQ(curves[0].size(), curves[1].size());
    ASSERT_FALSE(curves[0].empty());
    for (size_t e = 0; e < curves[0].size(); ++e) {
      for (const char* key : {"train_loss", "val_loss", "val_acc"}) {
        const double a = curves[0][e].value(key, -1.0), b = curves[1][e].value(key, -2.0);
        // Float tolerance: the same operations in the same order; only LibTorch's choice of
        // kernels between the two call paths may differ in the last bits.
        EXPECT_NEAR(a, b, 1e-4 * std::max(1.0, std::abs(a)))
            << key << " of epoch " << e + 1 << ": built-in " << a << ", TorchScript " << b;
      }
    }
  }
}

struct BadInput {
  const char* name;
  const char* what;      // "model" or "bad": own_model_files.py's command
  const char* kind;      // the model or broken data set to make
  const char* loss;      // training.loss of the job
  const char* expect;    // in the message
  const char* names;     // the file the message must name ("net.pt", "train_x.npy", ...)
};

class OwnModelRefusals : public OwnModel, public ::testing::WithParamInterface<BadInput> {};

// Each refusal: `strata validate` exits 2 naming the file and what is wrong; `strata run` exits 2
// the same way, launches nothing and leaves no run directory. (Broken on purpose once: with the
// header's size check removed from the .npy reader, LyingHeader and Truncated were accepted by
// validate, and the run of Truncated died in the workers with SIGBUS instead.)
TEST_P(OwnModelRefusals, AtValidateNamingTheFileAndNothingIsLaunched) {
  REQUIRE_PYTORCH();
  const BadInput& c = GetParam();
  std::string model = dir_ + "/net.pt", data = dir_ + "/data";
  if (std::string(c.what) == "model") {
    ASSERT_NO_FATAL_FAILURE(Make("model", c.kind, model));
    ASSERT_NO_FATAL_FAILURE(Make("data", "fmnist", data, "--train 300 --test 100"));
  } else {
    ASSERT_NO_FATAL_FAILURE(Make("model", std::string(c.loss) == "mse" ? "regression" : "mlp", model));
    ASSERT_NO_FATAL_FAILURE(Make("bad", c.kind, data));
  }
  const std::string job =
      Job("refused", model, data,
          absl::StrCat("training: { epochs: 2, loss: ", c.loss,
                       " }\ncluster: { workers: 2, parameter_servers: 1 }\n"
                       "strategy: { kind: ps }\n"));
  const CommandResult valid = Strata("validate " + job);
  EXPECT_EQ(valid.exit_code, 2) << valid.output;
  EXPECT_NE(valid.output.find(c.expect), std::string::npos) << valid.output;
  EXPECT_NE(valid.output.find(c.names), std::string::npos) << valid.output;

  const std::string run_dir = dir_ + "/run";
  const CommandResult run = Strata(absl::StrCat("run ", job, " --out ", run_dir));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("nothing was launched"), std::string::npos) << run.output;
  EXPECT_FALSE(Exists(run_dir)) << "a refused run leaves no run directory";
}

INSTANTIATE_TEST_SUITE_P(
    Files, OwnModelRefusals,
    ::testing::Values(
        BadInput{"StateDictNotTorchScript", "model", "state_dict", "cross_entropy",
                 "not a TorchScript file", "net.pt"},
        BadInput{"FewerLogitsThanClasses", "model", "mlp5", "cross_entropy",
                 "outputs 5 logits: every label must lie in [0, 5)", "train_y.npy"},
        BadInput{"NoTrainableParameter", "model", "frozen", "cross_entropy",
                 "no trainable parameter", "net.pt"},
        BadInput{"ForwardReturnsATuple", "model", "tuple", "cross_entropy", "not one tensor",
                 "net.pt"},
        BadInput{"Truncated", "bad", "truncated", "cross_entropy", "truncated", "train_x.npy"},
        BadInput{"LyingHeader", "bad", "lying_header", "cross_entropy", "bytes too many",
                 "train_x.npy"},
        BadInput{"UnsupportedDtype", "bad", "dtype", "cross_entropy", "int16", "train_x.npy"},
        BadInput{"FortranOrder", "bad", "fortran", "cross_entropy", "Fortran order",
                 "train_x.npy"},
        BadInput{"LengthsDisagree", "bad", "length_mismatch", "cross_entropy", "399 rows",
                 "train_y.npy"},
        BadInput{"NanFeatures", "bad", "nan_features", "cross_entropy", "row 123 holds NaN",
                 "train_x.npy"},
        BadInput{"InfiniteRegressionTarget", "bad", "nan_targets", "mse",
                 "row 17 holds NaN or infinity", "train_y.npy"},
        BadInput{"LabelOutOfRange", "bad", "label_out_of_range", "cross_entropy",
                 "labels up to 12", "train_y.npy"},
        BadInput{"NoTestFiles", "bad", "no_test_files", "cross_entropy", "no held-out examples",
                 "test_x.npy"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace strata::testing
