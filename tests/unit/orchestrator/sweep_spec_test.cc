// The sweep file: grid expansion, explicit cells, the two forms of seeds, and every refusal
// with its line.
#include "orchestrator/sweep/sweep_spec.h"

#include <gtest/gtest.h>

namespace strata::sweep {
namespace {

SweepSpec Parse(const std::string& text, int cores = 8) {
  auto spec = ParseSweepSpec(text, "exp/sweep.yaml", {.cores = cores});
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.ok() ? *spec : SweepSpec{};
}

std::string Errors(const std::string& text, int cores = 8) {
  auto spec = ParseSweepSpec(text, "exp/sweep.yaml", {.cores = cores});
  EXPECT_FALSE(spec.ok());
  return spec.ok() ? "" : std::string(spec.status().message());
}

TEST(SweepSpec, GridExpandsToTheCartesianProductInFileOrder) {
  const SweepSpec spec = Parse(R"(base: ../configs/job.yaml
grid:
  strategy.kind: [allreduce, ps]
  training.lr: [0.1, 0.05, 0.01]
seeds: [1, 2]
)");
  EXPECT_EQ(spec.base_path, "configs/job.yaml");  // relative to the sweep file, normalised
  EXPECT_EQ(spec.base_line, 1);
  ASSERT_EQ(spec.cells.size(), 6u);
  const std::vector<std::string> names = {"kind=allreduce_lr=0.1",  "kind=allreduce_lr=0.05",
                                          "kind=allreduce_lr=0.01", "kind=ps_lr=0.1",
                                          "kind=ps_lr=0.05",        "kind=ps_lr=0.01"};
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(spec.cells[i].name, names[i]);
  ASSERT_EQ(spec.cells[4].overrides.size(), 2u);
  EXPECT_EQ(spec.cells[4].overrides[0].Assignment(), "strategy.kind=ps");
  EXPECT_EQ(spec.cells[4].overrides[0].line, 3);
  EXPECT_EQ(spec.cells[4].overrides[1].Assignment(), "training.lr=0.05");
  EXPECT_EQ(spec.cells[4].overrides[1].line, 4);
  EXPECT_EQ(spec.cells[4].overrides[1].where, "grid.training.lr[1]");
  EXPECT_EQ(spec.override_keys, (std::vector<std::string>{"strategy.kind", "training.lr"}));
  EXPECT_EQ(spec.seeds, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(spec.parallel, 1);
  EXPECT_EQ(spec.baseline, "kind=allreduce_lr=0.1");  // the first cell unless named
  EXPECT_FALSE(spec.target_accuracy.has_value());
  EXPECT_EQ(spec.name, "sweep");  // the file's stem
}

TEST(SweepSpec, DefaultNamesUseWholeKeysWhereLastPartsClash) {
  const SweepSpec spec = Parse(R"(base: job.yaml
grid:
  strategy.kind: [ps]
  launcher.kind: [local]
  training.lr_schedule.milestones: [[3, 6]]
seeds: [1]
)");
  ASSERT_EQ(spec.cells.size(), 1u);
  EXPECT_EQ(spec.cells[0].name, "strategy.kind=ps_launcher.kind=local_milestones=3,6");
  EXPECT_EQ(spec.cells[0].overrides[2].Assignment(), "training.lr_schedule.milestones=[3, 6]");
}

TEST(SweepSpec, ExplicitCells) {
  const SweepSpec spec = Parse(R"(name: strategies
base: /abs/job.yaml
cells:
  - name: ar
    set: { strategy.kind: allreduce }
  - set: { strategy.kind: ps, cluster.workers: 4 }
  - name: as-is
seeds: {count: 3, start: 10}
baseline: as-is
target_accuracy: 0.85
parallel: 2
out: runs/strategies
)");
  EXPECT_EQ(spec.name, "strategies");
  EXPECT_EQ(spec.base_path, "/abs/job.yaml");
  ASSERT_EQ(spec.cells.size(), 3u);
  EXPECT_EQ(spec.cells[0].name, "ar");
  EXPECT_EQ(spec.cells[1].name, "kind=ps_workers=4");
  EXPECT_EQ(spec.cells[1].line, 6);
  EXPECT_EQ(spec.cells[1].overrides[1].where, "cells[1].set.cluster.workers");
  EXPECT_EQ(spec.cells[2].name, "as-is");
  EXPECT_TRUE(spec.cells[2].overrides.empty());
  EXPECT_EQ(spec.override_keys, (std::vector<std::string>{"strategy.kind", "cluster.workers"}));
  EXPECT_EQ(spec.seeds, (std::vector<uint64_t>{10, 11, 12}));
  EXPECT_EQ(spec.baseline, "as-is");
  EXPECT_EQ(spec.target_accuracy, 0.85);
  EXPECT_EQ(spec.parallel, 2);
  EXPECT_EQ(spec.out, "runs/strategies");
}

TEST(SweepSpec, SeedCountStartsAtOne) {
  const SweepSpec spec = Parse("base: j.yaml\ngrid: {training.lr: [0.1]}\nseeds: {count: 4}\n");
  EXPECT_EQ(spec.seeds, (std::vector<uint64_t>{1, 2, 3, 4}));
}

TEST(SweepSpec, RefusesUnknownKeysWithTheirLines) {
  const std::string e = Errors(R"(base: j.yaml
grid: {training.lr: [0.1]}
seeds: [1]
colour: blue
cells:
  - name: x
    sett: {}
)");
  EXPECT_NE(e.find("exp/sweep.yaml:4: colour: unknown key"), std::string::npos) << e;
  EXPECT_NE(e.find("exp/sweep.yaml:5: cells: give either grid or cells, not both"),
            std::string::npos)
      << e;
}

TEST(SweepSpec, RefusesEmptyGridCellsAndSeeds) {
  EXPECT_NE(Errors("base: j.yaml\ngrid: {}\nseeds: [1]\n").find("exp/sweep.yaml:2: grid: empty"),
            std::string::npos);
  EXPECT_NE(Errors("base: j.yaml\ncells: []\nseeds: [1]\n").find("exp/sweep.yaml:2: cells: empty"),
            std::string::npos);
  const std::string e = Errors("base: j.yaml\ngrid:\n  training.lr: []\nseeds: []\n");
  EXPECT_NE(e.find("exp/sweep.yaml:3: grid.training.lr: empty"), std::string::npos) << e;
  EXPECT_NE(e.find("exp/sweep.yaml:4: seeds: empty"), std::string::npos) << e;
  EXPECT_NE(Errors("base: j.yaml\ngrid: {training.lr: [0.1]}\nseeds: {count: 0}\n")
                .find("exp/sweep.yaml:3: seeds.count: must be between 1 and"),
            std::string::npos);
  EXPECT_NE(Errors("base: j.yaml\ngrid: {training.lr: [0.1]}\n").find("seeds: required"),
            std::string::npos);
  EXPECT_NE(
      Errors("grid: {training.lr: [0.1]}\nseeds: [1]\n").find("exp/sweep.yaml:1: base: required"),
      std::string::npos);
}

TEST(SweepSpec, RefusesParallelismAboveHalfTheCores) {
  const std::string text = "base: j.yaml\ngrid: {training.lr: [0.1]}\nseeds: [1]\nparallel: 2\n";
  const std::string e = Errors(text, /*cores=*/2);
  EXPECT_NE(e.find("exp/sweep.yaml:4: parallel: 2 is above this machine's limit of 1 (2 core(s)"),
            std::string::npos)
      << e;
  EXPECT_EQ(Parse(text, /*cores=*/4).parallel, 2);
  EXPECT_EQ(ParallelLimit(1), 1);
  EXPECT_EQ(ParallelLimit(2), 1);
  EXPECT_EQ(ParallelLimit(5), 2);
  EXPECT_NE(Errors("base: j.yaml\ngrid: {training.lr: [0.1]}\nseeds: [1]\nparallel: 0\n")
                .find("exp/sweep.yaml:4: parallel: expected a whole number >= 1"),
            std::string::npos);
}

TEST(SweepSpec, RefusesTheSeedAsAnOverrideAndRepeatedValues) {
  const std::string e = Errors(R"(base: j.yaml
grid:
  training.seed: [1, 2]
  training.lr: [0.1, 0.1]
seeds: [1, 1]
)");
  EXPECT_NE(e.find("exp/sweep.yaml:3: grid.training.seed: the seed is set by seeds:"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("exp/sweep.yaml:4: grid.training.lr[1]: the value 0.1 is listed twice"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("exp/sweep.yaml:5: seeds[1]: seed 1 is listed twice"), std::string::npos) << e;
}

TEST(SweepSpec, RefusesBadNamesAndAnUnknownBaseline) {
  const std::string e = Errors(R"(base: j.yaml
cells:
  - name: a/b
  - name: same
  - name: same
seeds: [1]
baseline: nope
target_accuracy: 85
)");
  EXPECT_NE(e.find("exp/sweep.yaml:3: cells[0].name: 'a/b': use letters"), std::string::npos) << e;
  EXPECT_NE(e.find("exp/sweep.yaml:5: cells[2]: the cell name 'same' is taken by cells[1]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("exp/sweep.yaml:7: baseline: no cell is named 'nope'"), std::string::npos) << e;
  EXPECT_NE(e.find("exp/sweep.yaml:8: target_accuracy: expected a validation accuracy in (0, 1]"),
            std::string::npos)
      << e;
  // Errors come in line order.
  EXPECT_LT(e.find(":3:"), e.find(":5:"));
  EXPECT_LT(e.find(":5:"), e.find(":7:"));
}

TEST(SweepSpec, RefusesSyntaxErrorsAndEmptyFiles) {
  EXPECT_NE(Errors("base: [unclosed\n").find("exp/sweep.yaml:"), std::string::npos);
  EXPECT_NE(Errors("# nothing\n").find("exp/sweep.yaml:1: (top level): empty sweep file"),
            std::string::npos);
}

TEST(SweepSpec, JsonRoundTrip) {
  const SweepSpec spec = Parse(R"(base: j.yaml
grid: {strategy.kind: [allreduce, ps]}
seeds: [3, 4]
target_accuracy: 0.8
)");
  auto back = SweepSpecFromJson(SweepSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->base_path, spec.base_path);
  ASSERT_EQ(back->cells.size(), 2u);
  EXPECT_EQ(back->cells[1].name, "kind=ps");
  EXPECT_EQ(back->cells[1].overrides[0].Assignment(), "strategy.kind=ps");
  EXPECT_EQ(back->seeds, spec.seeds);
  EXPECT_EQ(back->baseline, "kind=allreduce");
  EXPECT_EQ(back->target_accuracy, 0.8);
  EXPECT_FALSE(SweepSpecFromJson(nlohmann::json::object()).ok());
}

}  // namespace
}  // namespace strata::sweep
