// The switch's handover check (orchestrator/run/handover_check.h) on a model whose first tensor is
// split over two servers in pieces of rows (strategy.ps_split): pieces that cover the tensor once
// and hold its bytes pass; a piece with one wrong value, rows on two servers, or rows on none do
// not, named. (Seen to fail: with the check comparing a piece with the start of its tensor instead
// of its own rows, the second piece of an exact handover was reported as differing.)
#include "orchestrator/run/handover_check.h"

#include <numeric>

#include <gtest/gtest.h>

#include "services/common/wire/partition_plan.h"

namespace strata {
namespace {

NamedTensor Counting(const std::string& name, std::vector<int64_t> shape) {
  NamedTensor t = NamedTensor::Zeros({name, std::move(shape), DType::kFloat32});
  std::iota(t.floats(), t.floats() + t.spec.numel(), 1.0f);
  return t;
}

// Rows [first, end) of `whole`, as a server sends them.
NamedTensor Rows(const NamedTensor& whole, int64_t first, int64_t end) {
  TensorPiece p;
  p.spec = whole.spec;
  p.spec.name = PieceName(whole.name(), first, end);
  p.spec.shape[0] = end - first;
  p.float_offset = static_cast<size_t>(first * whole.spec.numel() / whole.spec.shape[0]);
  p.first_row = first;
  p.end_row = end;
  p.whole = false;
  return SlicePiece(whole, p).value();
}

class HandoverCheckTest : public ::testing::Test {
 protected:
  HandoverCheckTest() {
    checkpoint_.entries.push_back({TensorKind::kParameter, weight_});
    checkpoint_.entries.push_back({TensorKind::kParameter, bias_});
  }
  HandoverVerification Check(std::vector<NamedTensor> server0, std::vector<NamedTensor> server1) {
    std::vector<ServerModelRead> reads(2);
    reads[0].tensors = std::move(server0);
    reads[1].tensors = std::move(server1);
    return CompareServersWithCheckpoint(checkpoint_, reads, {});
  }

  NamedTensor weight_ = Counting("fc.weight", {6, 3});
  NamedTensor bias_ = Counting("fc.bias", {3});
  Checkpoint checkpoint_;
};

TEST_F(HandoverCheckTest, PiecesThatCoverTheTensorOnceWithItsBytesPass) {
  const HandoverVerification v = Check({Rows(weight_, 0, 3), bias_}, {Rows(weight_, 3, 6)});
  EXPECT_TRUE(v.weights_equal);
  EXPECT_EQ(v.tensors_compared, 3);
  EXPECT_EQ(v.tensors_differing, 0);
  EXPECT_EQ(v.tensors_missing, 0);
}

TEST_F(HandoverCheckTest, AWrongValueRowsTwiceOrRowsNowhereFailNamed) {
  NamedTensor wrong = Rows(weight_, 3, 6);
  wrong.floats()[4] += 1.0f;
  HandoverVerification v = Check({Rows(weight_, 0, 3), bias_}, {wrong});
  EXPECT_FALSE(v.weights_equal);
  ASSERT_EQ(v.differing.size(), 1u);
  EXPECT_EQ(v.differing[0], "ps-1: fc.weight[3:6]");

  v = Check({Rows(weight_, 0, 4), bias_}, {Rows(weight_, 3, 6)});
  EXPECT_FALSE(v.weights_equal);
  ASSERT_EQ(v.differing.size(), 1u);
  EXPECT_EQ(v.differing[0], "ps-1: fc.weight[3:6] (sent by more than one server)");

  v = Check({Rows(weight_, 0, 2), bias_}, {Rows(weight_, 3, 6)});
  EXPECT_FALSE(v.weights_equal);
  EXPECT_EQ(v.tensors_missing, 1);
  ASSERT_EQ(v.differing.size(), 1u);
  EXPECT_EQ(v.differing[0], "fc.weight: on no server (some rows)");

  NamedTensor past_the_end = Rows(weight_, 3, 6);
  past_the_end.spec.name = PieceName("fc.weight", 4, 7);
  v = Check({Rows(weight_, 0, 4), bias_}, {past_the_end});
  EXPECT_FALSE(v.weights_equal);
  EXPECT_EQ(v.differing[0], "ps-1: fc.weight[4:7] (rows outside the tensor)");
}

}  // namespace
}  // namespace strata
